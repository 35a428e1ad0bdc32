/* cg_kir.c — the kernel IR (builder) and its one renderer, specialised to C or CUDA by a
 * language table. The body printer is shared; only the table differs. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

/* ============================================================================================
 * Builder
 * ========================================================================================== */

Kernel *kir_new(const char *name, int64_t rows) {
  Kernel *k = xcalloc(1, sizeof *k);
  snprintf(k->name, sizeof k->name, "%s", name);
  k->rows = rows;
  k->body = -1;
  k->nopen = 1;
  k->open[0] = -1; /* the row body */
  k->tail[0] = -1;
  k->work = 1;
  return k;
}

void kir_free(Kernel *k) {
  if (!k) return;
  free(k->e);
  free(k->s);
  free(k);
}

int kir_buf(Kernel *k, const char *name, bool is_int, bool written) {
  if (k->nbufs == KIR_MAX_BUFS) diag_fatal("internal: kernel %s has too many buffers", k->name);
  KBuf *b = &k->bufs[k->nbufs];
  snprintf(b->name, sizeof b->name, "%s", name);
  b->is_int = is_int;
  b->written = written;
  return k->nbufs++;
}

int kir_e(Kernel *k, KOp op, int a, int b, int c) {
  if (k->ne == k->ecap) {
    k->ecap = k->ecap ? 2 * k->ecap : 64;
    k->e = xrealloc(k->e, (size_t)k->ecap * sizeof *k->e);
  }
  k->e[k->ne] = (KExpr){.op = op, .a = a, .b = b, .c = c};
  return k->ne++;
}

int kir_f(Kernel *k, double f) {
  int e = kir_e(k, K_F, 0, 0, 0);
  k->e[e].f = f;
  return e;
}

int kir_i(Kernel *k, int64_t i) {
  int e = kir_e(k, K_I, 0, 0, 0);
  k->e[e].i = i;
  return e;
}

int kir_row(Kernel *k) { return kir_e(k, K_ROW, 0, 0, 0); }
int kir_ld(Kernel *k, int buf, int idx) { return kir_e(k, k->bufs[buf].is_int ? K_LDI : K_LD, buf, idx, 0); }

int kir_arg(Kernel *k, int n) {
  if (n >= k->nargs) k->nargs = n + 1;
  return kir_e(k, K_ARG, n, 0, 0);
}

int kir_iarg(Kernel *k, int n) {
  if (n >= k->nargs) k->nargs = n + 1;
  k->arg_int[n] = true;
  return kir_e(k, K_IARG, n, 0, 0);
}

static int is_int_expr(const Kernel *k, int e) { return k->e[e].op >= K_I; }

static int stmt(Kernel *k, KStmtKind kind) {
  if (k->ns == k->scap) {
    k->scap = k->scap ? 2 * k->scap : 64;
    k->s = xrealloc(k->s, (size_t)k->scap * sizeof *k->s);
  }
  int id = k->ns++;
  k->s[id] = (KStmt){.kind = kind, .body = -1, .next = -1};
  /* append to the innermost open list */
  int lvl = k->nopen - 1;
  if (k->tail[lvl] >= 0) k->s[k->tail[lvl]].next = id;
  else if (lvl == 0) k->body = id;
  else k->s[k->open[lvl]].body = id;
  k->tail[lvl] = id;
  return id;
}

static int new_var(Kernel *k, bool is_int) {
  if (k->nvars == 64) diag_fatal("internal: kernel %s has too many temporaries", k->name);
  k->var_int[k->nvars] = is_int;
  return k->nvars++;
}

int kir_let(Kernel *k, int value) {
  bool in = is_int_expr(k, value);
  int v = new_var(k, in);
  int s = stmt(k, KS_LET);
  k->s[s].var = v;
  k->s[s].a = value;
  return kir_e(k, in ? K_IV : K_V, v, 0, 0);
}

void kir_set(Kernel *k, int var_expr, char op, int value) {
  int s = stmt(k, KS_SET);
  k->s[s].var = k->e[var_expr].a;
  k->s[s].op = op;
  k->s[s].a = value;
}

void kir_store(Kernel *k, int buf, int idx, char op, int value) {
  int s = stmt(k, KS_STORE);
  k->s[s].buf = buf;
  k->s[s].a = idx;
  k->s[s].b = value;
  k->s[s].op = op;
}

static void open_list(Kernel *k, int s) {
  if (k->nopen == 8) diag_fatal("internal: kernel %s nests too deeply", k->name);
  k->open[k->nopen] = s;
  k->tail[k->nopen] = -1;
  k->nopen++;
}

int kir_for(Kernel *k, int extent) {
  int v = new_var(k, true);
  int s = stmt(k, KS_FOR);
  k->s[s].var = v;
  k->s[s].a = extent;
  open_list(k, s);
  return kir_e(k, K_IV, v, 0, 0);
}

void kir_if(Kernel *k, int cond) {
  int s = stmt(k, KS_IF);
  k->s[s].a = cond;
  open_list(k, s);
}

void kir_end(Kernel *k) {
  if (k->nopen <= 1) diag_fatal("internal: unbalanced kir_end in %s", k->name);
  k->nopen--;
}

void kir_call(Kernel *k, const char *fn, int nargs, const int *args) {
  int s = stmt(k, KS_CALL);
  k->s[s].fn = fn;
  k->s[s].ncargs = nargs;
  memcpy(k->s[s].cargs, args, (size_t)nargs * sizeof *args);
}

/* ============================================================================================
 * Renderer: one body printer, two language tables
 * ========================================================================================== */

typedef struct LangTable {
  const char *kernel_head;   /* before "void NAME(" */
  const char *restrict_kw;
  const char *row_loop;      /* printf format over the row count */
  const char *parallel;      /* printed before the row loop when the work is large; may be "" */
  const char *rsqrt;         /* printf format over one operand */
  int wrapper;               /* emit NAME__call(void **args) */
} LangTable;

static const LangTable lang_c = {
    .kernel_head = "void ",
    .restrict_kw = "restrict",
    .row_loop = "for (int64_t r = 0; r < %lldLL; r++)",
    .parallel = "#pragma omp parallel for schedule(static)\n  ",
    .rsqrt = "(1.0f / sqrtf(%s))",
    .wrapper = 1,
};

static const LangTable lang_cuda = {
    .kernel_head = "extern \"C\" __global__ void ",
    .restrict_kw = "__restrict__",
    .row_loop = "for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < %lldLL; "
                "r += (int64_t)blockDim.x * gridDim.x)",
    .parallel = "",
    .rsqrt = "rsqrtf(%s)",
    .wrapper = 0,
};

static const LangTable *table(Lang l) { return l == LANG_C ? &lang_c : &lang_cuda; }

void cg_append(char **out, size_t *len, size_t *cap, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    size_t room = *cap - *len;
    int n = vsnprintf(*out ? *out + *len : NULL, *out ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) diag_fatal("internal: formatting failed");
    if (*out && (size_t)n < room) {
      *len += (size_t)n;
      return;
    }
    *cap = (*cap + (size_t)n + 1) * 2;
    *out = xrealloc(*out, *cap);
    if (*len == 0) (*out)[0] = 0;
  }
}

typedef struct R {
  const Kernel *k;
  const LangTable *t;
  char **out;
  size_t *len, *cap;
} R;

#define EMIT(...) cg_append(r->out, r->len, r->cap, __VA_ARGS__)

static void expr(R *r, int id) {
  const KExpr *e = &r->k->e[id];
  static const char *fn1[] = {[K_EXP] = "expf", [K_LOG] = "logf", [K_TANH] = "tanhf", [K_SQRT] = "sqrtf",
                              [K_COS] = "cosf", [K_SIN] = "sinf"};
  static const char *bin[] = {[K_ADD] = "+", [K_SUB] = "-", [K_MUL] = "*", [K_DIV] = "/", [K_IADD] = "+", [K_ISUB] = "-",
                              [K_IMUL] = "*", [K_IDIV] = "/", [K_IMOD] = "%", [K_IEQ] = "==", [K_ILT] = "<",
                              [K_IAND] = "&&"};
  switch (e->op) {
  case K_F: {
    char buf[40];
    snprintf(buf, sizeof buf, "%.9g", e->f);
    if (!strpbrk(buf, ".einn")) strcat(buf, ".0");
    EMIT("%sf", buf);
    break;
  }
  case K_I: EMIT("%lldLL", (long long)e->i); break;
  case K_ROW: EMIT("r"); break;
  case K_LD:
  case K_LDI: EMIT("%s[", r->k->bufs[e->a].name); expr(r, e->b); EMIT("]"); break;
  case K_ARG:
  case K_IARG: EMIT("s%d", e->a); break;
  case K_V:
  case K_IV: EMIT("v%d", e->a); break;
  case K_TOF: EMIT("(float)("); expr(r, e->a); EMIT(")"); break;
  case K_NEG: EMIT("(-"); expr(r, e->a); EMIT(")"); break;
  case K_MAX: EMIT("fmaxf("); expr(r, e->a); EMIT(", "); expr(r, e->b); EMIT(")"); break;
  case K_POW: EMIT("powf("); expr(r, e->a); EMIT(", "); expr(r, e->b); EMIT(")"); break;
  case K_RSQRT: {
    /* render the operand into a scratch buffer, then into the table's format */
    char *sub = NULL;
    size_t sl = 0, sc = 0;
    R rr = *r;
    rr.out = &sub, rr.len = &sl, rr.cap = &sc;
    expr(&rr, e->a);
    EMIT(r->t->rsqrt, sub);
    free(sub);
    break;
  }
  case K_SEL:
  case K_ISEL: EMIT("("); expr(r, e->a); EMIT(" ? "); expr(r, e->b); EMIT(" : "); expr(r, e->c); EMIT(")"); break;
  case K_EXP: case K_LOG: case K_TANH: case K_SQRT: case K_COS: case K_SIN:
    EMIT("%s(", fn1[e->op]); expr(r, e->a); EMIT(")"); break;
  default:
    EMIT("(");
    expr(r, e->a);
    EMIT(" %s ", bin[e->op]);
    expr(r, e->b);
    EMIT(")");
  }
}

static void stmts(R *r, int s, int depth) {
  for (; s >= 0; s = r->k->s[s].next) {
    const KStmt *st = &r->k->s[s];
    EMIT("%*s", 2 * depth, "");
    switch (st->kind) {
    case KS_FOR:
      EMIT("for (int64_t v%d = 0; v%d < ", st->var, st->var);
      expr(r, st->a);
      EMIT("; v%d++) {\n", st->var);
      stmts(r, st->body, depth + 1);
      EMIT("%*s}\n", 2 * depth, "");
      break;
    case KS_IF:
      EMIT("if (");
      expr(r, st->a);
      EMIT(") {\n");
      stmts(r, st->body, depth + 1);
      EMIT("%*s}\n", 2 * depth, "");
      break;
    case KS_LET:
      EMIT("%s v%d = ", r->k->var_int[st->var] ? "int64_t" : "float", st->var);
      expr(r, st->a);
      EMIT(";\n");
      break;
    case KS_SET:
    case KS_STORE: {
      char lhs[64];
      if (st->kind == KS_SET) snprintf(lhs, sizeof lhs, "v%d", st->var);
      if (st->kind == KS_STORE) {
        EMIT("%s[", r->k->bufs[st->buf].name);
        expr(r, st->a);
        EMIT("]");
      } else {
        EMIT("%s", lhs);
      }
      if (st->op == 'M') {
        EMIT(" = fmaxf(");
        if (st->kind == KS_SET) EMIT("%s", lhs);
        else { EMIT("%s[", r->k->bufs[st->buf].name); expr(r, st->a); EMIT("]"); }
        EMIT(", ");
        expr(r, st->kind == KS_SET ? st->a : st->b);
        EMIT(");\n");
      } else {
        EMIT(st->op == '+' ? " += " : " = ");
        expr(r, st->kind == KS_SET ? st->a : st->b);
        EMIT(";\n");
      }
      break;
    }
    case KS_CALL:
      EMIT("%s(", st->fn);
      for (int i = 0; i < st->ncargs; i++) {
        if (i) EMIT(", ");
        if (st->cargs[i] < 0) EMIT("%s", r->k->bufs[-1 - st->cargs[i]].name);
        else expr(r, st->cargs[i]);
      }
      EMIT(", r);\n");
      break;
    }
  }
}

void cg_render_kernel(const Kernel *k, Lang lang, char **out, size_t *len, size_t *cap) {
  R rr = {k, table(lang), out, len, cap}, *r = &rr;
  const LangTable *t = r->t;
  EMIT("/* %s: %lld rows */\n", k->name, (long long)k->rows);
  EMIT("%s%s(", t->kernel_head, k->name);
  for (int i = 0; i < k->nbufs; i++) {
    const KBuf *b = &k->bufs[i];
    EMIT("%s%s%s *%s %s", i ? ", " : "", b->written ? "" : "const ", b->is_int ? "int32_t" : "float", t->restrict_kw,
         b->name);
  }
  for (int i = 0; i < k->nargs; i++) EMIT("%s%s s%d", i || k->nbufs ? ", " : "", k->arg_int[i] ? "int64_t" : "float", i);
  EMIT(") {\n  ");
  /* OpenMP only where there is enough work to pay for the threads */
  if ((double)k->rows * (double)k->work >= 32768.0 && k->rows > 1) EMIT("%s", t->parallel);
  EMIT(t->row_loop, (long long)k->rows);
  EMIT(" {\n");
  stmts(r, k->body, 2);
  EMIT("  }\n}\n");
  if (t->wrapper) {
    EMIT("void %s__call(void **a) { %s(", k->name, k->name);
    for (int i = 0; i < k->nbufs; i++)
      EMIT("%s*(%s%s **)a[%d]", i ? ", " : "", k->bufs[i].written ? "" : "const ", k->bufs[i].is_int ? "int32_t" : "float", i);
    for (int i = 0; i < k->nargs; i++)
      EMIT("%s*(%s *)a[%d]", i || k->nbufs ? ", " : "", k->arg_int[i] ? "int64_t" : "float", k->nbufs + i);
    EMIT("); }\n");
  }
  EMIT("\n");
}

/* the kernel templates of kernels/, embedded at build time (build/gen/kernels_embed.c) */
extern const char *const ppk_templates[];

void cg_render_prelude(Lang lang, char **out, size_t *len, size_t *cap) {
  if (lang == LANG_C)
    cg_append(out, len, cap,
              "/* generated by ppc %s: C kernels */\n#include <math.h>\n#include <stdint.h>\n"
              "#define PPK_FN static inline\n#define PPK_RESTRICT restrict\n#define PPK_NEG_INF (-INFINITY)\n",
              PPC_VERSION);
  else
    cg_append(out, len, cap,
              "/* generated by ppc %s: CUDA kernels (NVRTC, sm_90) */\n#ifdef __CUDACC_RTC__\ntypedef long long int64_t;\ntypedef int int32_t;\n#else\n#include <stdint.h>\n#endif\n"
              "#define PPK_FN static __device__ __forceinline__\n#define PPK_RESTRICT __restrict__\n"
              "#define PPK_NEG_INF (-__int_as_float(0x7f800000))\n",
              PPC_VERSION);
  cg_append(out, len, cap, "#define PPK_MAX_HEAD_DIM 256\n\n");
  for (int i = 0; ppk_templates[i]; i++) cg_append(out, len, cap, "%s\n", ppk_templates[i]);
}
