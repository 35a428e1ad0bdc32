/* cg_kir.c — the kernel IR's one renderer (kir.c builds the IR), specialised to C, OpenCL C or
 * CUDA C by a language table. The body printer is shared; only the table differs. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

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
  const char *gbarrier; /* a barrier that orders global memory too (KS_SYNC) */
  const char *neg_inf;
  const char *unroll; /* the line before a loop of a constant count to unroll; NULL: none */
  const char *fetch;  /* a cache line's prefetch, called with an element's address; NULL: none */
  const char *fma;    /* the fused multiply-add a product added is written as; NULL: the compiler's */
  /* a private array (kir_array): its storage with %d its number and %lld its floats, then the
   * declaration of ppk_aN, what the kernel's code reads and writes, with %d its number (twice) */
  const char *array_decl, *array_name;
  /* the line before each loop of a kernel with private arrays; NULL: none. NVRTC unrolls their
   * constant loops whole otherwise (a stage's fused attention: ten times the PTX and the time) */
  const char *array_loop;
  const char *types[PP_DTYPE_COUNT]; /* a buffer's element type; bf16 is its 16 bits as an integer */
} LangTable;

static const LangTable lang_c = {
    .name = "c",
    .prelude = ppk_prelude_c,
    .kernel_head = "void ",
    .restrict_kw = "restrict",
    .int_suffix = "LL",
    .threads_as_loops = true,
    .neg_inf = "(-INFINITY)",
    .fetch = "__builtin_prefetch",
    .fma = "fmaf",
    /* through a restrict pointer: GCC 12 vectorises a loop around an inner sum (outer-loop
     * vectorisation, fuse_attn.c's scores) over a pointer's elements, not over an array's */
    .array_decl = "_Alignas(64) float ppk_s%d[%lld];",
    .array_name = " float *restrict ppk_a%d = ppk_s%d;",
    .types = {"float", "int32_t", "uint16_t"},
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
    .gbarrier = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
    .neg_inf = "(-INFINITY)",
    .unroll = "#pragma unroll",
    .fma = "fma",
    .array_decl = "float ppk_a%d[%lld];",
    .array_name = "",
    .types = {"float", "int32_t", "ushort"},
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
    .gbarrier = "__syncthreads();",
    .neg_inf = "(-__int_as_float(0x7f800000))",
    .unroll = "#pragma unroll",
    .fma = "fmaf",
    .array_decl = "float ppk_a%d[%lld];",
    .array_name = "",
    .array_loop = "#pragma unroll 1",
    .types = {"float", "int32_t", "unsigned short"},
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

static void expr(Rend *r, int id);

/* A sum or difference with a product as a term, where the language table names a fused
 * multiply-add: written as one, so that which product is fused, and so the bits, is the renderer's
 * choice and not the compiler's (the C kernels are compiled with -ffp-contract=off). When both
 * terms are products the left one is fused (a*b + c*d = fma(a, b, c*d)): the first product in
 * evaluation order, as GCC's contraction takes it in a plain expression. */
static bool fused(Rend *r, const KExpr *e) {
  const KExpr *a = &r->k->e[e->a], *b = &r->k->e[e->b];
  if (!r->t->fma || (a->op != K_MUL && b->op != K_MUL)) return false;
  bool right = a->op != K_MUL; /* the product is the right term */
  const KExpr *m = right ? b : a;
  int other = right ? e->a : e->b;
  EMIT("%s(%s", r->t->fma, right && e->op == K_SUB ? "-(" : ""); /* x - a*b = fma(-a, b, x) */
  expr(r, m->a);
  EMIT("%s, ", right && e->op == K_SUB ? ")" : "");
  expr(r, m->b);
  EMIT(", %s", !right && e->op == K_SUB ? "-(" : ""); /* a*b - x = fma(a, b, -x) */
  expr(r, other);
  EMIT("%s)", !right && e->op == K_SUB ? ")" : "");
  return true;
}

static void expr(Rend *r, int id) {
  const KExpr *e = &r->k->e[id];
  static const char *fn1[] = {[K_EXP] = "ppk_exp", [K_LOG] = "logf", [K_TANH] = "tanhf",      [K_SQRT] = "sqrtf",
                              [K_COS] = "cosf",    [K_SIN] = "sinf", [K_RND] = "ppk_bf16_rnd"};
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
  case K_LDI: {
    bool bf = r->k->bufs[e->a].dtype == PP_BF16; /* widened to float on load (exact) */
    EMIT("%s%s[", bf ? "ppk_bf16_ld(" : "", r->k->bufs[e->a].name);
    expr(r, e->b);
    EMIT(bf ? "])" : "]");
    break;
  }
  case K_ARG:
  case K_IARG: EMIT("s%d", e->a); break;
  case K_ALD:
    EMIT("ppk_a%d[", e->a);
    expr(r, e->b);
    EMIT("]");
    break;
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
  case K_RAND:
    EMIT("ppk_rand(");
    expr(r, e->a);
    EMIT(", ");
    expr(r, e->b);
    EMIT(", ");
    expr(r, e->c);
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
  case K_RND:
    EMIT("%s(", fn1[e->op]);
    expr(r, e->a);
    EMIT(")");
    break;
  case K_ADD:
  case K_SUB:
    if (fused(r, e)) break;
    /* fallthrough */
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

/* buf[idx] = v, buf[idx] += v or buf[idx] = max(buf[idx], v). A bf16 element is read as float, and
 * the result rounded to nearest even once, as it is stored. */
static void store(Rend *r, const KStmt *st) {
  const KBuf *b = &r->k->bufs[st->buf];
  bool bf = b->dtype == PP_BF16;
  EMIT("%s[", b->name);
  expr(r, st->a);
  if (st->op == '+' && !bf) EMIT("] += ");
  else EMIT("] = %s", bf ? "ppk_bf16_st(" : "");
  if (st->op == 'M' || (st->op == '+' && bf)) { /* the element's old value */
    EMIT("%s%s%s[", st->op == 'M' ? "ppk_max(" : "", bf ? "ppk_bf16_ld(" : "", b->name);
    expr(r, st->a);
    EMIT(bf ? "])" : "]");
    EMIT(st->op == 'M' ? ", " : " + ");
  }
  if (bf && st->op == '+') EMIT("ppk_bf16_rnd("); /* the sum of two bf16 values, as an add kernel's */
  expr(r, st->b);
  EMIT("%s%s%s;\n", bf && st->op == '+' ? ")" : "", st->op == 'M' ? ")" : "", bf ? ")" : "");
}

static void stmts(Rend *r, int s, int depth, Ctx ctx);

static void indent(Rend *r, int depth) { EMIT("%*s", 2 * depth, ""); }

/* How a reduction folds two values: a max or a sum. */
static const char *fold_fmt(int op) { return op == 'M' ? "ppk_max(%s, %s)" : "%s + %s"; }

/* A reduction's element folded into acc (a partial): a sum of products fused into it where the
 * language table names a fused multiply-add, else the element computed and then folded. */
static void fold_into(Rend *r, const KStmt *st, int depth, const char *acc) {
  const KExpr *x = &r->k->e[st->b];
  if (st->op == '+' && r->t->fma && x->op == K_MUL) {
    indent(r, depth), EMIT("%s = %s(", acc, r->t->fma);
    expr(r, x->a);
    EMIT(", ");
    expr(r, x->b);
    EMIT(", %s);\n", acc);
    return;
  }
  indent(r, depth), EMIT("const float ppk_x = ");
  expr(r, st->b);
  EMIT(";\n");
  indent(r, depth), EMIT("%s = ", acc);
  EMIT(fold_fmt(st->op), acc, "ppk_x");
  EMIT(";\n");
}

/* A reduction: T partials folded in j order, then the tree; the result in every thread. */
static void reduction(Rend *r, const KStmt *st, int depth) {
  const LangTable *t = r->t;
  int T = r->k->block, d = depth;
  const char *init = st->op == 'M' ? t->neg_inf : "0.0f";
  const char *fold = fold_fmt(st->op);
  indent(r, d), EMIT("float v%d;\n", st->var);
  indent(r, d), EMIT("{\n");
  d++;
  if (t->threads_as_loops) {
    indent(r, d), EMIT("_Alignas(64) float ppk_part[%d];\n", T);
    indent(r, d), EMIT("for (int ppk_t = 0; ppk_t < %d; ppk_t++) ppk_part[ppk_t] = %s;\n", T, init);
    indent(r, d), EMIT("const int64_t ppk_n = ");
    expr(r, st->a);
    EMIT(";\n");
    indent(r, d), EMIT("for (int64_t ppk_j = 0; ppk_j < ppk_n; ppk_j += %d) {\n", T);
    indent(r, d + 1), EMIT("const int ppk_m = ppk_n - ppk_j < %d ? (int)(ppk_n - ppk_j) : %d;\n", T, T);
    if (st->fetch_ld > 0 && t->fetch) { /* the next row's lines over this part of the row */
      const KBuf *fb = &r->k->bufs[st->fetch_buf];
      int line = 64 / pp_dtype_bytes(fb->dtype);
      indent(r, d + 1), EMIT("if (r + 1 < %lld%s)\n", (long long)r->k->rows, t->int_suffix);
      indent(r, d + 2),
          EMIT("for (int ppk_q = 0; ppk_q < ppk_m; ppk_q += %d) %s(&%s[(r + 1) * %lld%s + ppk_j + ppk_q]);\n", line,
               t->fetch, fb->name, (long long)st->fetch_ld, t->int_suffix);
    }
    indent(r, d + 1), EMIT("for (int ppk_t = 0; ppk_t < ppk_m; ppk_t++) {\n");
    indent(r, d + 2), EMIT("const int64_t v%d = ppk_j + ppk_t;\n", st->lv);
    stmts(r, st->body, d + 2, CTX_THREAD);
    fold_into(r, st, d + 2, "ppk_part[ppk_t]");
    indent(r, d + 1), EMIT("}\n");
    indent(r, d), EMIT("}\n");
    if (st->op == 'M') {
      /* a max's tree a stage a loop, each of a constant count (one loop over the stages, its count a
       * variable, compiles to vector and scalar remainders and branches: a short row's softmax
       * spends much of its time there); the same pairs, and a max has no rounding */
      for (int s = T / 2; s > 0; s >>= 1) {
        char hi[48];
        snprintf(hi, sizeof hi, "ppk_part[ppk_t + %d]", s);
        indent(r, d), EMIT("for (int ppk_t = 0; ppk_t < %d; ppk_t++) ppk_part[ppk_t] = ", s);
        EMIT(fold, "ppk_part[ppk_t]", hi);
        EMIT(";\n");
      }
      indent(r, d), EMIT("v%d = ppk_part[0];\n", st->var);
    } else { /* a sum's: the prelude's ppk_tree_sum, the same pairs on vectors (the kernels are
              * compiled without contraction, so no fold's product reaches its first sums) */
      indent(r, d), EMIT("v%d = ppk_tree_sum(ppk_part, %d);\n", st->var, T);
    }
  } else {
    indent(r, d), EMIT("float ppk_acc = %s;\n", init);
    indent(r, d), EMIT("const int64_t ppk_n = ");
    expr(r, st->a);
    EMIT(";\n");
    indent(r, d), EMIT("for (int64_t v%d = ppk_tid; v%d < ppk_n; v%d += %d) {\n", st->lv, st->lv, st->lv, T);
    stmts(r, st->body, d + 1, CTX_THREAD);
    fold_into(r, st, d + 1, "ppk_acc");
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

static void let_stmt(Rend *r, const KStmt *st, int depth) {
  indent(r, depth), EMIT("%s v%d = ", r->k->var_int[st->var] ? "int64_t" : "float", st->var);
  expr(r, st->a);
  EMIT(";\n");
}

#define SWAP_MAX 1024 /* the widest shared loop whose temporaries tfor_swap keeps in arrays */

/* C: a shared loop whose body is temporaries and then one loop over something else (RoPE: the
 * angle's cosine and sine per frequency j, then every head at that position) is rendered with
 * the two loops swapped, so that the inner loop runs along j, contiguous, and vectorises: the
 * temporaries are computed for every j first, into arrays. The threads of a block are
 * independent (no barrier inside a shared loop), so their iterations may run in any order. */
static bool tfor_swap(Rend *r, const KStmt *st, int depth) {
  const Kernel *k = r->k;
  if (k->e[st->a].op != K_I || k->e[st->a].i < 1 || k->e[st->a].i > SWAP_MAX) return false;
  int loop = -1, nlet = 0;
  for (int s = st->body; s >= 0; s = k->s[s].next) {
    if (k->s[s].kind == KS_LET && loop < 0) nlet++;
    else if (k->s[s].kind == KS_FOR && loop < 0 && k->s[s].next < 0) loop = s;
    else return false;
  }
  if (loop < 0 || !nlet || k->e[k->s[loop].a].op != K_I) return false; /* an inner loop of constant extent */
  int64_t E = k->e[st->a].i;
  int j = st->var, d = depth;
  indent(r, d), EMIT("{\n");
  for (int s = st->body; s != loop; s = k->s[s].next)
    indent(r, d + 1),
        EMIT("%s ppk_h%d[%lld];\n", k->var_int[k->s[s].var] ? "int64_t" : "float", k->s[s].var, (long long)E);
  indent(r, d + 1), EMIT("for (int64_t v%d = 0; v%d < %lld; v%d++) {\n", j, j, (long long)E, j);
  for (int s = st->body; s != loop; s = k->s[s].next) {
    let_stmt(r, &k->s[s], d + 2);
    indent(r, d + 2), EMIT("ppk_h%d[v%d] = v%d;\n", k->s[s].var, j, k->s[s].var);
  }
  indent(r, d + 1), EMIT("}\n");
  const KStmt *lp = &k->s[loop];
  indent(r, d + 1), EMIT("for (int64_t v%d = 0; v%d < ", lp->var, lp->var);
  expr(r, lp->a);
  EMIT("; v%d++) {\n", lp->var);
  indent(r, d + 2), EMIT("for (int64_t v%d = 0; v%d < %lld; v%d++) {\n", j, j, (long long)E, j);
  for (int s = st->body; s != loop; s = k->s[s].next)
    indent(r, d + 3), EMIT("const %s v%d = ppk_h%d[v%d];\n", k->var_int[k->s[s].var] ? "int64_t" : "float", k->s[s].var,
                           k->s[s].var, j);
  stmts(r, lp->body, d + 3, CTX_THREAD);
  indent(r, d + 2), EMIT("}\n");
  indent(r, d + 1), EMIT("}\n");
  indent(r, d), EMIT("}\n");
  return true;
}

/* column_tiles' count of columns: expression ext, or the literal cols when ext < 0 */
static void cols_or(Rend *r, int ext, long long cols) {
  if (ext >= 0) expr(r, ext);
  else EMIT("%lldLL", cols);
}

/* C, a column sum's loops swapped (column_sum_c, tfor_column_sum): opens the loop over tiles of 64
 * columns (ext: the columns' count, an expression, or the literal cols when ext < 0), starts the
 * tile's 64 sums at let's value and walks loop's rows once, adding each row's 64 terms (set's
 * value, the column named col); leaves the tile's loop open, the sums in ppk_sum[ppk_t] for
 * ppk_t < ppk_cn, for the caller to store and close. */
static void column_tiles(Rend *r, int d, int ext, long long cols, const char *col, const KStmt *let, const KStmt *loop,
                         const KStmt *set) {
  indent(r, d), EMIT("for (int64_t ppk_c0 = 0; ppk_c0 < ");
  cols_or(r, ext, cols);
  EMIT("; ppk_c0 += 64) {\n");
  indent(r, d + 1), EMIT("const int64_t ppk_cn = ");
  cols_or(r, ext, cols);
  EMIT(" - ppk_c0 < 64 ? ");
  cols_or(r, ext, cols);
  EMIT(" - ppk_c0 : 64;\n");
  indent(r, d + 1), EMIT("float ppk_sum[64];\n");
  indent(r, d + 1), EMIT("for (int64_t ppk_t = 0; ppk_t < ppk_cn; ppk_t++) ppk_sum[ppk_t] = ");
  expr(r, let->a);
  EMIT(";\n");
  indent(r, d + 1), EMIT("for (int64_t v%d = 0; v%d < ", loop->var, loop->var);
  expr(r, loop->a);
  EMIT("; v%d++) {\n", loop->var);
  indent(r, d + 2), EMIT("for (int64_t ppk_t = 0; ppk_t < ppk_cn; ppk_t++) {\n");
  indent(r, d + 3), EMIT("const int64_t %s = ppk_c0 + ppk_t;\n", col);
  indent(r, d + 3), EMIT("ppk_sum[ppk_t] = ppk_sum[ppk_t] + ");
  expr(r, set->a);
  EMIT(";\n");
  indent(r, d + 2), EMIT("}\n");
  indent(r, d + 1), EMIT("}\n");
}

/* C: a shared loop over columns j whose body is a column sum, `let a = INIT; for t < N { a += E };
 * B[idx] op= a` with N the same for every j (col_sum's parts, a block a part of the rows; a sum
 * over the heads a row holds), is rendered as column_sum_c renders a flat one (column_tiles).
 * Each column's sum adds its terms in the same order, so the result is the same. */
static bool tfor_column_sum(Rend *r, const KStmt *st, int depth) {
  const Kernel *k = r->k;
  int j = st->var;
  const KStmt *let = st->body >= 0 ? &k->s[st->body] : NULL;
  if (!let || let->kind != KS_LET || let->next < 0 || k->e[let->a].op != K_F || k->var_int[let->var]) return false;
  const KStmt *loop = &k->s[let->next];
  if (loop->kind != KS_FOR || loop->next < 0 || loop->body < 0) return false;
  const KExpr *n = &k->e[loop->a];
  if (n->op != K_I && !((n->op == K_V || n->op == K_IV) && n->a != j)) return false; /* N: a constant or a temporary */
  const KStmt *set = &k->s[loop->body], *sto = &k->s[loop->next];
  if (set->kind != KS_SET || set->op != '+' || set->var != let->var || set->next >= 0) return false;
  if (sto->kind != KS_STORE || sto->next >= 0 || sto->op == 'M' || k->bufs[sto->buf].dtype != PP_F32) return false;
  if (k->e[sto->b].op != K_V || k->e[sto->b].a != let->var) return false;
  int d = depth;
  char col[24];
  snprintf(col, sizeof col, "v%d", j);
  column_tiles(r, d, st->a, 0, col, let, loop, set);
  indent(r, d + 1), EMIT("for (int64_t ppk_t = 0; ppk_t < ppk_cn; ppk_t++) {\n");
  indent(r, d + 2), EMIT("const int64_t v%d = ppk_c0 + ppk_t;\n", j);
  indent(r, d + 2), EMIT("const float v%d = ppk_sum[ppk_t];\n", let->var);
  indent(r, d + 2), store(r, sto);
  indent(r, d + 1), EMIT("}\n");
  indent(r, d), EMIT("}\n");
  return true;
}

static void stmts(Rend *r, int s, int depth, Ctx ctx) {
  const LangTable *t = r->t;
  for (; s >= 0; s = r->k->s[s].next) {
    const KStmt *st = &r->k->s[s];
    switch (st->kind) {
    case KS_FOR:
      if (r->k->narrays && t->array_loop) indent(r, depth), EMIT("%s\n", t->array_loop);
      indent(r, depth), EMIT("for (int64_t v%d = 0; v%d < ", st->var, st->var);
      expr(r, st->a);
      EMIT("; v%d++) {\n", st->var);
      stmts(r, st->body, depth + 1, ctx);
      indent(r, depth), EMIT("}\n");
      break;
    case KS_TFOR:
      if (t->threads_as_loops && (tfor_column_sum(r, st, depth) || tfor_swap(r, st, depth))) break;
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
    case KS_LET: let_stmt(r, st, depth); break;
    case KS_SET:
      indent(r, depth), EMIT("v%d = ", st->var);
      if (st->op == 'M') EMIT("ppk_max(v%d, ", st->var);
      else if (st->op == '+') EMIT("v%d + ", st->var);
      expr(r, st->a);
      EMIT(st->op == 'M' ? ");\n" : ";\n");
      break;
    case KS_SYNC:
      if (!t->threads_as_loops) indent(r, depth), EMIT("%s\n", t->gbarrier);
      break;
    case KS_ASTORE:
      indent(r, depth), EMIT("ppk_a%d[", st->buf);
      expr(r, st->a);
      EMIT("] %s ", st->op == '+' ? "+=" : "=");
      expr(r, st->b);
      EMIT(";\n");
      break;
    case KS_STORE:
      indent(r, depth);
      /* a block's threads all compute a uniform value: one of them stores it */
      if (ctx == CTX_UNIFORM && !t->threads_as_loops) EMIT("if (ppk_tid == 0) ");
      store(r, st);
      break;
    }
  }
}

/* A flat kernel that sums a column per thread: `let a = INIT; for i < N { a += E }; B[row] op= a`
 * (a norm's or a bias's weight gradient: rows are columns of a [N, rows] operand). Its statement
 * for the sum, or -1 for another kernel. */
static int column_sum(const Kernel *k) {
  if (k->mode != KM_FLAT || k->body < 0) return -1;
  const KStmt *let = &k->s[k->body];
  if (let->kind != KS_LET || let->next < 0 || k->e[let->a].op != K_F) return -1;
  const KStmt *loop = &k->s[let->next];
  if (loop->kind != KS_FOR || loop->next < 0 || loop->body < 0) return -1;
  const KStmt *set = &k->s[loop->body], *st = &k->s[loop->next];
  if (set->kind != KS_SET || set->op != '+' || set->var != let->var || set->next >= 0) return -1;
  if (st->kind != KS_STORE || st->next >= 0 || st->op == 'M') return -1;
  if (k->bufs[st->buf].dtype != PP_F32) return -1; /* the swapped loops store float sums */
  if (k->e[st->a].op != K_ROW || k->e[st->b].op != K_V || k->e[st->b].a != let->var) return -1;
  return k->body;
}

/* C: column_sum's kernel with its loops swapped: each thread takes tiles of 64 columns and walks
 * the N rows once, adding each row's 64 values into 64 sums (contiguous loads the compiler
 * vectorises, where a column per iteration reads with a stride). Each column's sum adds its
 * terms in the same order, so the result is the same. */
static void column_sum_c(Rend *r, int s) {
  const Kernel *k = r->k;
  const KStmt *let = &k->s[s], *loop = &k->s[let->next], *set = &k->s[loop->body], *st = &k->s[loop->next];
  long long rows = (long long)k->rows;
  if ((double)k->rows * (double)k->work >= 32768.0 && k->rows > 64)
    EMIT("  #pragma omp parallel for schedule(static)\n");
  column_tiles(r, 1, -1, rows, "r", let, loop, set);
  EMIT("    for (int64_t ppk_t = 0; ppk_t < ppk_cn; ppk_t++) %s[ppk_c0 + ppk_t] %s ppk_sum[ppk_t];\n",
       k->bufs[st->buf].name, st->op == '+' ? "+=" : "=");
  EMIT("  }\n}\n");
}

/* One pass of a thread's kir_flat_rows rows, a block apart; checked: the last pass, which stops at
 * the first row past the end. */
static void flat_pass(Rend *r, int rows, bool checked) {
  const Kernel *k = r->k;
  EMIT("      for (int ppk_e = 0; ppk_e < %d; ppk_e++) {\n", rows);
  EMIT("        const int64_t r = ppk_b + ppk_e * %d + ppk_tid;\n", k->block);
  if (checked) EMIT("        if (r >= %lld%s) break;\n", (long long)k->rows, r->t->int_suffix);
  stmts(r, k->body, 4, CTX_THREAD);
  EMIT("      }\n");
}

/* A GPU's flat kernel of kir_flat_rows > 1 rows a thread: the loop over its passes and the
 * kernel's closing brace. A whole pass is unrolled with no bound to check (its loads may all be
 * issued at once); the last, partial one goes row by row. */
static void flat_passes(Rend *r) {
  const Kernel *k = r->k;
  const LangTable *t = r->t;
  int rows = kir_flat_rows(k), per = k->block * rows;
  EMIT("  for (int64_t ppk_b = %s * %d; ppk_b < %lld%s; ppk_b += %s * %d) {\n", t->bid, per, (long long)k->rows,
       t->int_suffix, t->nblocks, per);
  EMIT("    if (ppk_b + %d <= %lld%s) {\n", per, (long long)k->rows, t->int_suffix);
  if (t->unroll) EMIT("      %s\n", t->unroll);
  flat_pass(r, rows, false);
  EMIT("    } else {\n");
  flat_pass(r, rows, true);
  EMIT("    }\n  }\n}\n");
}

void cg_render_kernel(const Kernel *k, Lang lang, char **out, size_t *len, size_t *cap) {
  Rend rr = {k, tables[lang], out, len, cap}, *r = &rr;
  const LangTable *t = r->t;
  KGeom g = kir_geom(k);
  char per[32];
  snprintf(per, sizeof per, "%d rows per thread", kir_flat_rows(k));
  EMIT("/* %s: %s, %lld rows; <<<%lld, %d, %lld>>> */\n", k->name,
       k->mode == KM_BLOCK     ? "a row per block"
       : kir_flat_rows(k) == 1 ? "a row per thread"
                               : per,
       (long long)k->rows, (long long)g.grid, g.block, (long long)g.local);
  EMIT(t->kernel_head, k->block);
  EMIT("%s(", k->name);
  if (t->arena_args) EMIT("__global char *ppk_arena");
  for (int i = 0; i < k->nbufs; i++) {
    const KBuf *b = &k->bufs[i];
    if (t->arena_args) EMIT(", int64_t o%d", i);
    else EMIT("%s%s%s *%s %s", i ? ", " : "", b->written ? "" : "const ", t->types[b->dtype], t->restrict_kw, b->name);
  }
  for (int i = 0; i < k->nargs; i++)
    EMIT("%s%s s%d", i || k->nbufs || t->arena_args ? ", " : "", k->arg_int[i] ? "int64_t" : "float", i);
  EMIT(") {\n");
  if (t->arena_args) /* OpenCL 1.2 passes no raw pointers into a buffer: offsets into the one arena */
    for (int i = 0; i < k->nbufs; i++) {
      const KBuf *b = &k->bufs[i];
      const char *ty = t->types[b->dtype], *c = b->written ? "" : "const ";
      EMIT("  __global %s%s *%s %s = (__global %s%s *)(ppk_arena + o%d);\n", c, ty, t->restrict_kw, b->name, c, ty, i);
    }
  if (!t->threads_as_loops) {
    EMIT("  const int64_t ppk_tid = %s;\n", t->tid);
    if (k->reduces) EMIT("  "), EMIT(t->local_decl, k->block), EMIT("\n");
  }
  int cs = t->threads_as_loops ? column_sum(k) : -1;
  if (cs >= 0) {
    column_sum_c(r, cs); /* C: the column sums with their loops swapped */
  } else if (!t->threads_as_loops && kir_flat_rows(k) > 1) {
    flat_passes(r);
  } else {
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
    for (int a = 0; a < k->narrays; a++) { /* the row's private arrays */
      EMIT("    "), EMIT(t->array_decl, a, (long long)k->arrays[a]);
      EMIT(t->array_name, a, a), EMIT("\n");
    }
    stmts(r, k->body, 2, k->mode == KM_BLOCK ? CTX_UNIFORM : CTX_THREAD);
    EMIT("  }\n}\n");
  }
  if (lang == LANG_C) { /* NAME__call(void **args): the arguments by address, as cuLaunchKernel takes them */
    EMIT("void %s__call(void **a) { %s(", k->name, k->name);
    for (int i = 0; i < k->nbufs; i++)
      EMIT("%s*(%s%s **)a[%d]", i ? ", " : "", k->bufs[i].written ? "" : "const ", t->types[k->bufs[i].dtype], i);
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
