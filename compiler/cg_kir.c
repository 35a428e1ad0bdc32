/* cg_kir.c — the kernel IR (builder) and its one renderer, specialised to C, OpenCL C or CUDA C
 * by a language table. The body printer is shared; only the table differs. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

/* ============================================================================================
 * Builder
 * ========================================================================================== */

Kernel *kir_new(const char *name, KMode mode, int64_t rows, int block) {
  if (block < 1 || block > KIR_MAX_BLOCK || (block & (block - 1)))
    diag_fatal("internal: kernel %s: %d threads per block is not a power of two up to %d", name, block, KIR_MAX_BLOCK);
  Kernel *k = xcalloc(1, sizeof *k);
  snprintf(k->name, sizeof k->name, "%s", name);
  k->mode = mode;
  k->rows = rows;
  k->block = block;
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

KGeom kir_geom(const Kernel *k) {
  int64_t blocks = k->mode == KM_FLAT ? (k->rows + k->block - 1) / k->block : k->rows;
  if (blocks < 1) blocks = 1;
  if (blocks > KIR_MAX_GRID) blocks = KIR_MAX_GRID;
  return (KGeom){blocks, k->block, k->reduces ? (int64_t)k->block * 4 : 0};
}

int kir_block_for(int64_t width) {
  int t = 32;
  while (t < 256 && t < width) t *= 2;
  return t;
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

/* The kind of the innermost open loop or reduction, or -1 at the row body. */
static int enclosing(const Kernel *k, KStmtKind kind) {
  for (int l = k->nopen - 1; l >= 1; l--)
    if (k->s[k->open[l]].kind == kind) return l;
  return -1;
}

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
  if (enclosing(k, KS_REDUCE) >= 0) diag_fatal("internal: kernel %s stores inside a reduction", k->name);
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

static int loop(Kernel *k, KStmtKind kind, int extent) {
  int v = new_var(k, true);
  int s = stmt(k, kind);
  k->s[s].var = v;
  k->s[s].a = extent;
  open_list(k, s);
  return kir_e(k, K_IV, v, 0, 0);
}

int kir_for(Kernel *k, int extent) { return loop(k, KS_FOR, extent); }

/* The block's threads share a loop or a reduction only at the block's own level: not inside
 * another shared loop or reduction (their threads have gone separate ways). */
static void check_block_level(Kernel *k, const char *what) {
  if (k->mode != KM_BLOCK) diag_fatal("internal: kernel %s: %s in a flat kernel", k->name, what);
  if (enclosing(k, KS_TFOR) >= 0 || enclosing(k, KS_REDUCE) >= 0)
    diag_fatal("internal: kernel %s: %s inside a shared loop or reduction", k->name, what);
}

int kir_tfor(Kernel *k, int extent) {
  check_block_level(k, "a shared loop");
  return loop(k, KS_TFOR, extent);
}

int kir_reduce(Kernel *k, int extent) {
  check_block_level(k, "a reduction");
  int lv = new_var(k, true);
  int s = stmt(k, KS_REDUCE);
  k->s[s].lv = lv;
  k->s[s].a = extent;
  open_list(k, s);
  k->reduces = true;
  return kir_e(k, K_IV, lv, 0, 0);
}

int kir_reduce_end(Kernel *k, char op, int value) {
  if (k->nopen <= 1 || k->s[k->open[k->nopen - 1]].kind != KS_REDUCE)
    diag_fatal("internal: kir_reduce_end in %s without an open reduction", k->name);
  KStmt *s = &k->s[k->open[k->nopen - 1]];
  s->op = op;
  s->b = value;
  s->var = new_var(k, false);
  int var = s->var;
  k->nopen--;
  return kir_e(k, K_V, var, 0, 0);
}

void kir_if(Kernel *k, int cond) {
  int s = stmt(k, KS_IF);
  k->s[s].a = cond;
  open_list(k, s);
}

void kir_end(Kernel *k) {
  if (k->nopen <= 1) diag_fatal("internal: unbalanced kir_end in %s", k->name);
  if (k->s[k->open[k->nopen - 1]].kind == KS_REDUCE)
    diag_fatal("internal: a reduction in %s closed by kir_end", k->name);
  k->nopen--;
}

/* ============================================================================================
 * Renderer: one body printer, three language tables
 * ========================================================================================== */

/* The kernel preludes of kernels/, embedded at build time (build/gen/kernels_embed.c). */
extern const char ppk_prelude_c[], ppk_prelude_opencl[], ppk_prelude_cuda[];

typedef struct LangTable {
  const char *name;        /* the --emit word */
  const char *prelude;     /* pasted once before the kernels: types, math names, ppk_max */
  const char *kernel_head; /* before "NAME(": with %d for the block size */
  const char *restrict_kw;
  const char *int_suffix;          /* of a 64-bit integer literal */
  bool arena_args;                 /* pointers are byte offsets into one __global char *ppk_arena */
  bool threads_as_loops;           /* C: a block's threads are an inner loop; reductions keep T partials */
  const char *tid, *bid, *nblocks; /* the thread's index in its block, the block's, the block count */
  const char *local_decl;          /* local memory of a reduction's partials: with %d for T */
  const char *barrier;
  const char *neg_inf;
} LangTable;

static const LangTable lang_c = {
    .name = "c",
    .prelude = ppk_prelude_c,
    .kernel_head = "void ",
    .restrict_kw = "restrict",
    .int_suffix = "LL",
    .threads_as_loops = true,
    .neg_inf = "(-INFINITY)",
};

static const LangTable lang_opencl = {
    .name = "opencl",
    .prelude = ppk_prelude_opencl,
    .kernel_head = "__kernel __attribute__((reqd_work_group_size(%d, 1, 1))) void ",
    .restrict_kw = "restrict",
    .int_suffix = "L",
    .arena_args = true,
    .tid = "(int64_t)get_local_id(0)",
    .bid = "(int64_t)get_group_id(0)",
    .nblocks = "(int64_t)get_num_groups(0)",
    .local_decl = "__local float ppk_red[%d];",
    .barrier = "barrier(CLK_LOCAL_MEM_FENCE);",
    .neg_inf = "(-INFINITY)",
};

static const LangTable lang_cuda = {
    .name = "cuda",
    .prelude = ppk_prelude_cuda,
    .kernel_head = "extern \"C\" __global__ void __launch_bounds__(%d) ",
    .restrict_kw = "__restrict__",
    .int_suffix = "LL",
    .tid = "(int64_t)threadIdx.x",
    .bid = "(int64_t)blockIdx.x",
    .nblocks = "(int64_t)gridDim.x",
    .local_decl = "__shared__ float ppk_red[%d];",
    .barrier = "__syncthreads();",
    .neg_inf = "(-__int_as_float(0x7f800000))",
};

static const LangTable *const tables[] = {&lang_c, &lang_opencl, &lang_cuda}; /* ORDER Lang */

const char *cg_lang_name(Lang lang) { return tables[lang]->name; }

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

typedef struct Rend {
  const Kernel *k;
  const LangTable *t;
  char **out;
  size_t *len, *cap;
} Rend;

#define EMIT(...) cg_append(r->out, r->len, r->cap, __VA_ARGS__)

static void expr(Rend *r, int id) {
  const KExpr *e = &r->k->e[id];
  static const char *fn1[] = {
      [K_EXP] = "expf", [K_LOG] = "logf", [K_TANH] = "tanhf", [K_SQRT] = "sqrtf", [K_COS] = "cosf", [K_SIN] = "sinf"};
  static const char *bin[] = {
      [K_ADD] = "+",  [K_SUB] = "-",  [K_MUL] = "*",  [K_DIV] = "/", [K_IADD] = "+",  [K_ISUB] = "-", [K_IMUL] = "*",
      [K_IDIV] = "/", [K_IMOD] = "%", [K_IEQ] = "==", [K_ILT] = "<", [K_IAND] = "&&", [K_FLT] = "<"};
  switch (e->op) {
  case K_F: {
    char buf[40];
    snprintf(buf, sizeof buf, "%.9g", e->f);
    if (!strpbrk(buf, ".einn")) strcat(buf, ".0");
    EMIT("%sf", buf);
    break;
  }
  case K_I: EMIT("%lld%s", (long long)e->i, r->t->int_suffix); break;
  case K_ROW: EMIT("r"); break;
  case K_LD:
  case K_LDI:
    EMIT("%s[", r->k->bufs[e->a].name);
    expr(r, e->b);
    EMIT("]");
    break;
  case K_ARG:
  case K_IARG: EMIT("s%d", e->a); break;
  case K_V:
  case K_IV: EMIT("v%d", e->a); break;
  case K_TOF:
    EMIT("(float)(");
    expr(r, e->a);
    EMIT(")");
    break;
  case K_NEG:
    EMIT("(-");
    expr(r, e->a);
    EMIT(")");
    break;
  case K_MAX:
    EMIT("ppk_max(");
    expr(r, e->a);
    EMIT(", ");
    expr(r, e->b);
    EMIT(")");
    break;
  case K_POW:
    EMIT("powf(");
    expr(r, e->a);
    EMIT(", ");
    expr(r, e->b);
    EMIT(")");
    break;
  case K_RSQRT:
    EMIT("(1.0f / sqrtf(");
    expr(r, e->a);
    EMIT("))");
    break;
  case K_SEL:
  case K_ISEL:
    EMIT("(");
    expr(r, e->a);
    EMIT(" ? ");
    expr(r, e->b);
    EMIT(" : ");
    expr(r, e->c);
    EMIT(")");
    break;
  case K_EXP:
  case K_LOG:
  case K_TANH:
  case K_SQRT:
  case K_COS:
  case K_SIN:
    EMIT("%s(", fn1[e->op]);
    expr(r, e->a);
    EMIT(")");
    break;
  case K_ADD:
  case K_SUB:
  case K_MUL:
  case K_DIV:
  case K_IADD:
  case K_ISUB:
  case K_IMUL:
  case K_IDIV:
  case K_IMOD:
  case K_IEQ:
  case K_ILT:
  case K_IAND:
  case K_FLT:
    EMIT("(");
    expr(r, e->a);
    EMIT(" %s ", bin[e->op]);
    expr(r, e->b);
    EMIT(")");
    break;
  }
}

/* Where a statement runs: by every thread of a block alike (a block kernel's row body and its
 * serial loops), or by one thread on its own (a flat kernel, a shared loop, a reduction's body). */
typedef enum { CTX_UNIFORM, CTX_THREAD } Ctx;

static void stmts(Rend *r, int s, int depth, Ctx ctx);

static void indent(Rend *r, int depth) { EMIT("%*s", 2 * depth, ""); }

/* A reduction: T partials folded in j order, then the tree; the result in every thread. */
static void reduction(Rend *r, const KStmt *st, int depth) {
  const LangTable *t = r->t;
  int T = r->k->block, d = depth;
  const char *init = st->op == 'M' ? t->neg_inf : "0.0f";
  const char *fold = st->op == 'M' ? "ppk_max(%s, %s)" : "%s + %s";
  indent(r, d), EMIT("float v%d;\n", st->var);
  indent(r, d), EMIT("{\n");
  d++;
  if (t->threads_as_loops) {
    indent(r, d), EMIT("float ppk_part[%d];\n", T);
    indent(r, d), EMIT("for (int ppk_t = 0; ppk_t < %d; ppk_t++) ppk_part[ppk_t] = %s;\n", T, init);
    indent(r, d), EMIT("const int64_t ppk_n = ");
    expr(r, st->a);
    EMIT(";\n");
    indent(r, d), EMIT("for (int64_t ppk_j = 0; ppk_j < ppk_n; ppk_j += %d) {\n", T);
    indent(r, d + 1), EMIT("const int ppk_m = ppk_n - ppk_j < %d ? (int)(ppk_n - ppk_j) : %d;\n", T, T);
    indent(r, d + 1), EMIT("for (int ppk_t = 0; ppk_t < ppk_m; ppk_t++) {\n");
    indent(r, d + 2), EMIT("const int64_t v%d = ppk_j + ppk_t;\n", st->lv);
    stmts(r, st->body, d + 2, CTX_THREAD);
    indent(r, d + 2), EMIT("const float ppk_x = ");
    expr(r, st->b);
    EMIT(";\n");
    indent(r, d + 2), EMIT("ppk_part[ppk_t] = ");
    EMIT(fold, "ppk_part[ppk_t]", "ppk_x");
    EMIT(";\n");
    indent(r, d + 1), EMIT("}\n");
    indent(r, d), EMIT("}\n");
    indent(r, d), EMIT("for (int ppk_s = %d; ppk_s > 0; ppk_s >>= 1)\n", T / 2);
    indent(r, d + 1), EMIT("for (int ppk_t = 0; ppk_t < ppk_s; ppk_t++) ppk_part[ppk_t] = ");
    EMIT(fold, "ppk_part[ppk_t]", "ppk_part[ppk_t + ppk_s]");
    EMIT(";\n");
    indent(r, d), EMIT("v%d = ppk_part[0];\n", st->var);
  } else {
    indent(r, d), EMIT("float ppk_acc = %s;\n", init);
    indent(r, d), EMIT("const int64_t ppk_n = ");
    expr(r, st->a);
    EMIT(";\n");
    indent(r, d), EMIT("for (int64_t v%d = ppk_tid; v%d < ppk_n; v%d += %d) {\n", st->lv, st->lv, st->lv, T);
    stmts(r, st->body, d + 1, CTX_THREAD);
    indent(r, d + 1), EMIT("const float ppk_x = ");
    expr(r, st->b);
    EMIT(";\n");
    indent(r, d + 1), EMIT("ppk_acc = ");
    EMIT(fold, "ppk_acc", "ppk_x");
    EMIT(";\n");
    indent(r, d), EMIT("}\n");
    indent(r, d), EMIT("ppk_red[ppk_tid] = ppk_acc;\n");
    indent(r, d), EMIT("%s\n", t->barrier);
    indent(r, d), EMIT("for (int ppk_s = %d; ppk_s > 0; ppk_s >>= 1) {\n", T / 2);
    indent(r, d + 1), EMIT("if (ppk_tid < ppk_s) ppk_red[ppk_tid] = ");
    EMIT(fold, "ppk_red[ppk_tid]", "ppk_red[ppk_tid + ppk_s]");
    EMIT(";\n");
    indent(r, d + 1), EMIT("%s\n", t->barrier);
    indent(r, d), EMIT("}\n");
    indent(r, d), EMIT("v%d = ppk_red[0];\n", st->var);
    indent(r, d), EMIT("%s\n", t->barrier); /* every thread has read it before the next reduction writes */
  }
  d--;
  indent(r, d), EMIT("}\n");
}

static void stmts(Rend *r, int s, int depth, Ctx ctx) {
  const LangTable *t = r->t;
  for (; s >= 0; s = r->k->s[s].next) {
    const KStmt *st = &r->k->s[s];
    switch (st->kind) {
    case KS_FOR:
      indent(r, depth), EMIT("for (int64_t v%d = 0; v%d < ", st->var, st->var);
      expr(r, st->a);
      EMIT("; v%d++) {\n", st->var);
      stmts(r, st->body, depth + 1, ctx);
      indent(r, depth), EMIT("}\n");
      break;
    case KS_TFOR:
      if (t->threads_as_loops) indent(r, depth), EMIT("for (int64_t v%d = 0; v%d < ", st->var, st->var);
      else indent(r, depth), EMIT("for (int64_t v%d = ppk_tid; v%d < ", st->var, st->var);
      expr(r, st->a);
      if (t->threads_as_loops) EMIT("; v%d++) {\n", st->var);
      else EMIT("; v%d += %d) {\n", st->var, r->k->block);
      stmts(r, st->body, depth + 1, CTX_THREAD);
      indent(r, depth), EMIT("}\n");
      break;
    case KS_REDUCE: reduction(r, st, depth); break;
    case KS_IF:
      indent(r, depth), EMIT("if (");
      expr(r, st->a);
      EMIT(") {\n");
      stmts(r, st->body, depth + 1, ctx);
      indent(r, depth), EMIT("}\n");
      break;
    case KS_LET:
      indent(r, depth), EMIT("%s v%d = ", r->k->var_int[st->var] ? "int64_t" : "float", st->var);
      expr(r, st->a);
      EMIT(";\n");
      break;
    case KS_SET:
      indent(r, depth), EMIT("v%d = ", st->var);
      if (st->op == 'M') EMIT("ppk_max(v%d, ", st->var);
      else if (st->op == '+') EMIT("v%d + ", st->var);
      expr(r, st->a);
      EMIT(st->op == 'M' ? ");\n" : ";\n");
      break;
    case KS_STORE:
      indent(r, depth);
      /* a block's threads all compute a uniform value: one of them stores it */
      if (ctx == CTX_UNIFORM && !t->threads_as_loops) EMIT("if (ppk_tid == 0) ");
      EMIT("%s[", r->k->bufs[st->buf].name);
      expr(r, st->a);
      EMIT("]");
      if (st->op == 'M') {
        EMIT(" = ppk_max(%s[", r->k->bufs[st->buf].name);
        expr(r, st->a);
        EMIT("], ");
        expr(r, st->b);
        EMIT(");\n");
      } else {
        EMIT(st->op == '+' ? " += " : " = ");
        expr(r, st->b);
        EMIT(";\n");
      }
      break;
    }
  }
}

void cg_render_kernel(const Kernel *k, Lang lang, char **out, size_t *len, size_t *cap) {
  Rend rr = {k, tables[lang], out, len, cap}, *r = &rr;
  const LangTable *t = r->t;
  KGeom g = kir_geom(k);
  EMIT("/* %s: %s, %lld rows; <<<%lld, %d, %lld>>> */\n", k->name,
       k->mode == KM_FLAT ? "a row per thread" : "a row per block", (long long)k->rows, (long long)g.grid, g.block,
       (long long)g.local);
  EMIT(t->kernel_head, k->block);
  EMIT("%s(", k->name);
  if (t->arena_args) EMIT("__global char *ppk_arena");
  for (int i = 0; i < k->nbufs; i++) {
    const KBuf *b = &k->bufs[i];
    if (t->arena_args) EMIT(", int64_t o%d", i);
    else
      EMIT("%s%s%s *%s %s", i ? ", " : "", b->written ? "" : "const ", b->is_int ? "int32_t" : "float", t->restrict_kw,
           b->name);
  }
  for (int i = 0; i < k->nargs; i++)
    EMIT("%s%s s%d", i || k->nbufs || t->arena_args ? ", " : "", k->arg_int[i] ? "int64_t" : "float", i);
  EMIT(") {\n");
  if (t->arena_args) /* OpenCL 1.2 passes no raw pointers into a buffer: offsets into the one arena */
    for (int i = 0; i < k->nbufs; i++) {
      const KBuf *b = &k->bufs[i];
      const char *ty = b->is_int ? "int32_t" : "float", *c = b->written ? "" : "const ";
      EMIT("  __global %s%s *%s %s = (__global %s%s *)(ppk_arena + o%d);\n", c, ty, t->restrict_kw, b->name, c, ty, i);
    }
  if (!t->threads_as_loops) {
    EMIT("  const int64_t ppk_tid = %s;\n", t->tid);
    if (k->reduces) EMIT("  "), EMIT(t->local_decl, k->block), EMIT("\n");
  }
  EMIT("  ");
  if (t->threads_as_loops) {
    /* OpenMP only where there is enough work to pay for the threads */
    if ((double)k->rows * (double)k->work >= 32768.0 && k->rows > 1)
      EMIT("#pragma omp parallel for schedule(static)\n  ");
    EMIT("for (int64_t r = 0; r < %lld%s; r++)", (long long)k->rows, t->int_suffix);
  } else if (k->mode == KM_FLAT) {
    EMIT("for (int64_t r = %s * %d + ppk_tid; r < %lld%s; r += %s * %d)", t->bid, k->block, (long long)k->rows,
         t->int_suffix, t->nblocks, k->block);
  } else {
    EMIT("for (int64_t r = %s; r < %lld%s; r += %s)", t->bid, (long long)k->rows, t->int_suffix, t->nblocks);
  }
  EMIT(" {\n");
  stmts(r, k->body, 2, k->mode == KM_BLOCK ? CTX_UNIFORM : CTX_THREAD);
  EMIT("  }\n}\n");
  if (lang == LANG_C) { /* NAME__call(void **args): the arguments by address, as cuLaunchKernel takes them */
    EMIT("void %s__call(void **a) { %s(", k->name, k->name);
    for (int i = 0; i < k->nbufs; i++)
      EMIT("%s*(%s%s **)a[%d]", i ? ", " : "", k->bufs[i].written ? "" : "const ",
           k->bufs[i].is_int ? "int32_t" : "float", i);
    for (int i = 0; i < k->nargs; i++)
      EMIT("%s*(%s *)a[%d]", i || k->nbufs ? ", " : "", k->arg_int[i] ? "int64_t" : "float", k->nbufs + i);
    EMIT("); }\n");
  }
  EMIT("\n");
}

void cg_render_prelude(Lang lang, char **out, size_t *len, size_t *cap) {
  cg_append(out, len, cap, "/* generated by ppc %s: %s kernels */\n%s\n", PPC_VERSION,
            lang == LANG_C        ? "C"
            : lang == LANG_OPENCL ? "OpenCL C"
                                  : "CUDA C (NVRTC)",
            tables[lang]->prelude);
}
