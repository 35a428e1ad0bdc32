/* fuse_elem.c — elementwise ops: which ops are (a single-use one is fused into its consumer's
 * kernel: fuse_lower.c decides), the expression of each at a flat index from its inputs' values,
 * and the kernel of one that is not fused. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

static const IrNode *N(const FuseCtx *c, int id) { return &c->g->nodes[id]; }

/* Ops computed one element at a time from the same element of each input (fuse_elem_expr below):
 * ops.def's FWD_ELEM and BWD_ELEM. A single-use one is fused into its consumer's kernel. */
bool fuse_elem_is(Op op) {
  switch (op) {
  OP_CASES_FWD_ELEM:
  OP_CASES_BWD_ELEM:
    return true;
  /* leaves, views, rows, reductions, GEMMs, collectives and pipeline boundaries */
  OP_CASES_LEAF:
  OP_CASES_FWD:
  OP_CASES_BWD:
  OP_CASES_PP:
  OP_CASES_TP:
    return false;
  }
  return false;
}

static int sigmoid(Kernel *k, int x) {
  return kir_e(k, K_DIV, kir_f(k, 1), kir_e(k, K_ADD, kir_f(k, 1), kir_e(k, K_EXP, kir_e(k, K_NEG, x, 0, 0), 0, 0), 0),
               0);
}

#define GELU_C 0.7978845608028654 /* sqrt(2/pi) */

_Static_assert((PP_MAX_LAYERS + 1) * (int64_t)PP_DROPOUT_MAX <= (int64_t)1 << 24 && PP_MAX_NUMEL <= (int64_t)1 << 40,
               "a dropout stream and index fit the 64-bit counter word");

/* Dropout's factor at flat index idx of its value: 0 for a dropped element, 1/(1-p) for a kept one
 * (drawn u >= p), 1 outside a training step (s:train 0: a validation pass) and in a generation
 * program. The draw is ppk_rand of the counter (idx + stream·2^40, s:rngctr) under the key s:seed:
 * rngctr is the step and the global micro-batch, so the mask depends on the seed, the step, the
 * micro-batch, the op and the element's index in the replicated value alone -- the same on every
 * mesh, and drawn again, not stored, by the gradient (.dropout_dx). */
static int dropout_factor(FuseCtx *c, KCall *kc, const IrNode *n, int idx) {
  Kernel *k = kc->k;
  if (c->g->infer || n->a.p == 0) return kir_f(k, 1);
  /* the op's stream: its number in the source and its layer (the repeated layer's body is one
   * source), below 2^24 (PP_DROPOUT_MAX, PP_MAX_LAYERS); the index below 2^40 (PP_MAX_NUMEL) */
  int64_t stream = (int64_t)(n->layer + 1) * PP_DROPOUT_MAX + n->a.dropid;
  int at = kir_e(k, K_IADD, idx, kir_i(k, stream * ((int64_t)1 << 40)), 0);
  int64_t numel = ir_shape_numel(&n->shape);
  if (n->a.seqshard) /* a rank's positions of S: its elements follow the ranks' before it */
    at = kir_e(k, K_IADD, at, fuse_kc_iscalar(kc, fuse_prog_vstart(numel)), 0);
  const Config *g = &c->g->cfg;
  if (g->cp > 1) { /* context parallelism: the rank's positions follow the cp ranks' before it */
    int64_t whole = numel * (n->a.seqshard ? g->tp : 1); /* the cp rank's elements, over its TP ranks */
    if (n->layout == LAYOUT_BS) { /* [B,S,...]: each row b of the whole has cp ranks' positions */
      int64_t row = whole / n->shape.d[0];
      int b = kir_e(k, K_IDIV, idx, kir_i(k, row), 0);
      at = kir_e(k, K_IADD, at, kir_e(k, K_IMUL, b, kir_i(k, row * (g->cp - 1)), 0), 0);
      whole = row;
    }
    at = kir_e(k, K_IADD, at, fuse_kc_iscalar(kc, fuse_prog_cpstart(whole)), 0);
  }
  int u = kir_e(k, K_RAND, at, fuse_kc_rscalar(kc, "seed"), fuse_kc_rscalar(kc, "rngctr"));
  int f = kir_e(k, K_SEL, kir_e(k, K_FLT, u, kir_f(k, (float)n->a.p), 0), kir_f(k, 0),
                kir_f(k, (float)(1.0 / (1.0 - n->a.p))));
  return kir_e(k, K_SEL, kir_e(k, K_IEQ, fuse_kc_rscalar(kc, "train"), kir_i(k, 0), 0), kir_f(k, 1), f);
}

/* The value of an elementwise op at flat index idx, from its inputs' values. */
int fuse_elem_expr(FuseCtx *c, KCall *kc, int node, int idx) {
  Kernel *k = kc->k;
  const IrNode *n = N(c, node);
  int a = fuse_elem_val(c, kc, n->in[0], idx);
  int b = n->nin > 1 ? fuse_elem_val(c, kc, n->in[1], idx) : -1;
  switch (n->op) {
  case OP_ADD: return kir_e(k, K_ADD, a, b, 0);
  case OP_MUL: return kir_e(k, K_MUL, a, b, 0);
  case OP_SILU: { /* the sigmoid a temporary, which SILU_DX's finds in a kernel holding both (SwiGLU's backward) */
    int x = kir_let(k, a);
    return kir_e(k, K_MUL, x, kir_let(k, sigmoid(k, x)), 0);
  }
  case OP_GELU: {
    /* 0.5 x (1 + tanh(c (x + 0.044715 x^3))) */
    int x = kir_let(k, a);
    int x3 = kir_e(k, K_MUL, x, kir_e(k, K_MUL, x, x, 0), 0);
    int u = kir_e(k, K_MUL, kir_f(k, GELU_C), kir_e(k, K_ADD, x, kir_e(k, K_MUL, kir_f(k, 0.044715), x3, 0), 0), 0);
    return kir_e(k, K_MUL, kir_e(k, K_MUL, kir_f(k, 0.5), x, 0),
                 kir_e(k, K_ADD, kir_f(k, 1), kir_e(k, K_TANH, u, 0, 0), 0), 0);
  }
  case OP_RELU: return kir_e(k, K_MAX, kir_f(k, 0), a, 0); /* ppk_max(0, x): x when x is NaN, as torch.relu */
  case OP_SCALE: return kir_e(k, K_MUL, a, kir_f(k, (float)n->a.scale), 0); /* the constant a float, as torch's */
  case OP_SOFTCAP: /* cap tanh(x / cap), in that order, as Gemma 2's */
    return kir_e(k, K_MUL, kir_e(k, K_TANH, kir_e(k, K_DIV, a, kir_f(k, n->a.cap), 0), 0, 0), kir_f(k, n->a.cap), 0);
  case OP_DROPOUT:
  case OP_DROPOUT_DX: return kir_e(k, K_MUL, a, dropout_factor(c, kc, n, idx), 0);
  case OP_SILU_DX: {
    /* dy * s * (1 + x (1 - s)), s = sigmoid(x) */
    int dy = kir_let(k, a), x = kir_let(k, b);
    int s = kir_let(k, sigmoid(k, x));
    int t = kir_e(k, K_ADD, kir_f(k, 1), kir_e(k, K_MUL, x, kir_e(k, K_SUB, kir_f(k, 1), s, 0), 0), 0);
    return kir_e(k, K_MUL, dy, kir_e(k, K_MUL, s, t, 0), 0);
  }
  case OP_GELU_DX: {
    /* dy * (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2)), t = tanh(c (x + 0.044715 x^3)) */
    int dy = kir_let(k, a), x = kir_let(k, b);
    int x2 = kir_let(k, kir_e(k, K_MUL, x, x, 0));
    int u = kir_e(k, K_MUL, kir_f(k, GELU_C),
                  kir_e(k, K_ADD, x, kir_e(k, K_MUL, kir_f(k, 0.044715), kir_e(k, K_MUL, x2, x, 0), 0), 0), 0);
    int t = kir_let(k, kir_e(k, K_TANH, u, 0, 0));
    int d1 = kir_e(k, K_MUL, kir_f(k, 0.5), kir_e(k, K_ADD, kir_f(k, 1), t, 0), 0);
    int du = kir_e(k, K_MUL, kir_f(k, GELU_C),
                   kir_e(k, K_ADD, kir_f(k, 1), kir_e(k, K_MUL, kir_f(k, 3 * 0.044715), x2, 0), 0), 0);
    int d2 = kir_e(k, K_MUL, kir_e(k, K_MUL, kir_f(k, 0.5), x, 0),
                   kir_e(k, K_MUL, kir_e(k, K_SUB, kir_f(k, 1), kir_e(k, K_MUL, t, t, 0), 0), du, 0), 0);
    return kir_e(k, K_MUL, dy, kir_e(k, K_ADD, d1, d2, 0), 0);
  }
  case OP_SOFTCAP_DX: { /* dy (1 - t^2), t = tanh(x / cap) */
    int t = kir_let(k, kir_e(k, K_TANH, kir_e(k, K_DIV, b, kir_f(k, n->a.cap), 0), 0, 0));
    return kir_e(k, K_MUL, a, kir_e(k, K_SUB, kir_f(k, 1), kir_e(k, K_MUL, t, t, 0), 0), 0);
  }
  case OP_RELU_DX: /* x > 0 ? dy : 0: no gradient at x = 0, as in PyTorch */
    return kir_e(k, K_SEL, kir_e(k, K_FLT, kir_f(k, 0), b, 0), a, kir_f(k, 0));
  /* not fuse_elem_is(): lowered by their own kernels, never built into another's */
  OP_CASES_LEAF:
  OP_CASES_FWD:
  OP_CASES_BWD:
  OP_CASES_PP:
  OP_CASES_TP:
    break;
  }
  diag_fatal("internal: %s is not elementwise", ir_ops[n->op].name);
}

/* A product whose bias its readers add (c->biased): the GEMM's element plus its column's bias,
 * rounded as the bias pass would have stored it; stored back when the backward reads the sum (by
 * its one forward reader's kernel, fuse_lower.c's bias_deferred). */
static int biased_val(FuseCtx *c, KCall *kc, int node, int idx) {
  Kernel *k = kc->k;
  const IrNode *n = N(c, node);
  int64_t cols = n->shape.d[n->shape.nd - 1];
  int y = fuse_kc_node(c, kc, node, c->saved[node]), b = fuse_kc_node(c, kc, n->in[2], false);
  int v = kir_e(k, K_ADD, kir_ld(k, y, idx), kir_ld(k, b, kir_e(k, K_IMOD, idx, kir_i(k, cols), 0)), 0);
  if (c->p->vb[fuse_prog_buf(c, node)].dtype == PP_BF16) v = kir_e(k, K_RND, v, 0, 0);
  if (!c->saved[node]) return v;
  v = kir_let(k, v);
  kir_store(k, y, idx, '=', v);
  return v;
}

/* node's value at flat index idx in kc's kernel: a fused producer's expression, or a load. */
int fuse_elem_val(FuseCtx *c, KCall *kc, int node, int idx) {
  if (c->inlined[node]) { /* a bf16 value rounded as if stored: fused or not, the same numbers */
    int v = fuse_elem_expr(c, kc, node, idx);
    return fuse_value_dtype(c, node) == PP_BF16 ? kir_e(kc->k, K_RND, v, 0, 0) : v;
  }
  if (c->biased[node] && !N(c, kc->node)->bwd) return biased_val(c, kc, node, idx); /* the backward's: stored */
  return kir_ld(kc->k, fuse_kc_node(c, kc, node, false), idx);
}

/* Whether every value node's kernel loads (its inputs, through fused producers) is a node before
 * `before`, and, with `leaf` >= 0, whether one of them is leaf: *shares is set then. */
static bool loads_before(const FuseCtx *c, int node, int before, const bool *leaf, bool *shares) {
  const IrNode *n = N(c, node);
  for (int k = 0; k < n->nin; k++) {
    int in = n->in[k];
    if (in < 0) continue;
    if (c->inlined[in]) {
      if (!loads_before(c, in, before, leaf, shares)) return false;
    } else if (in >= before) return false;
    else if (leaf && leaf[in]) *shares = true;
  }
  return true;
}

static void mark_loads(const FuseCtx *c, int node, bool *leaf) {
  const IrNode *n = N(c, node);
  for (int k = 0; k < n->nin; k++)
    if (n->in[k] >= 0) {
      if (c->inlined[n->in[k]]) mark_loads(c, n->in[k], leaf);
      else leaf[n->in[k]] = true;
    }
}

/* How many nodes of node id's pass (forward or backward) read it. */
static int pass_readers(const FuseCtx *c, int id, bool bwd) {
  int n = 0;
  for (int i = id + 1; i < c->g->nnodes; i++)
    for (int k = 0; k < N(c, i)->nin; k++) n += N(c, i)->in[k] == id && N(c, i)->bwd == bwd;
  return n;
}

/* The epilogue (pp_epi.h) that node id's kernel, just emitted, is to the GEMM before it, or
 * PP_EPI_NONE: GELU of a product (plus its deferred bias) that nothing else of the forward reads,
 * or GELU's gradient of a product (dy) that nothing else reads, by a kernel that loads them. */
static PpEpi epilogue_kind(const FuseCtx *c, int id, const Instr *g, const Instr *k) {
  const IrNode *n = N(c, id);
  int src = n->in[0];
  if (g->kind != I_GEMM || g->node != src || !pp_epi_gemm_ok(g->batch, g->beta, g->ldc, g->n, g->tri) ||
      c->inlined[src])
    return PP_EPI_NONE;
  PpEpi e = PP_EPI_NONE;
  if (n->op == OP_GELU && !n->bwd && pass_readers(c, src, false) == 1) e = PP_EPI_GELU;
  if (n->op == OP_GELU_DX && c->nusers[src] == 1 && !c->saved[src] && !c->inlined[n->in[1]]) e = PP_EPI_DGELU;
  if (e == PP_EPI_NONE || k->nop < pp_epi_args[e][0] || k->nop > pp_epi_args[e][1]) return PP_EPI_NONE;
  const Operand *kc = &k->op[pp_epi_c[e]]; /* the kernel's C: the GEMM's */
  if (kc->kind != 'b' || kc->vb != g->op[2].vb || kc->add != g->op[2].add) return PP_EPI_NONE;
  for (int a = 0; a < k->nop; a++)
    if (k->op[a].kind != 'b' || c->p->vb[k->op[a].vb].dtype != c->p->vb[g->op[2].vb].dtype) return PP_EPI_NONE;
  return e;
}

/* Whether instruction in (a kernel or a GEMM) touches none of kernel k's written buffers and
 * writes none of its others: k can run before it with the same results. */
static bool independent(const FuseCtx *c, const Instr *in, const Instr *k) {
  const Kernel *kk = c->p->kernels[k->kernel], *ik = in->kind == I_KERNEL ? c->p->kernels[in->kernel] : NULL;
  if (in->kind != I_GEMM && !ik) return false;
  for (int a = 0; a < in->nop; a++) {
    if (in->op[a].kind != 'b') continue;
    bool w = ik ? a < ik->nbufs && ik->bufs[a].written : a == 2; /* a GEMM writes C alone */
    for (int j = 0; j < kk->nbufs; j++)
      if (k->op[j].kind == 'b' && k->op[j].vb == in->op[a].vb && (w || kk->bufs[j].written)) return false;
  }
  return true;
}

/* Marks the GEMM of node id's input with the epilogue that id's kernel, just emitted, is, if it is
 * one; the kernel moves up to follow it when the instructions between do not depend on it (the
 * backward's weight gradients between a product and GELU's gradient). */
static void epilogue(FuseCtx *c, int id) {
  Block *b = c->blk;
  int last = b->n - 1, g = last - 1;
  while (g >= 0 && !(b->ins[g].kind == I_GEMM && b->ins[g].node == N(c, id)->in[0])) g--;
  if (g < 0) return;
  for (int i = g + 1; i < last; i++)
    if (!independent(c, &b->ins[i], &b->ins[last])) return;
  PpEpi e = epilogue_kind(c, id, &b->ins[g], &b->ins[last]);
  if (e == PP_EPI_NONE) return;
  Instr k = b->ins[last];
  memmove(&b->ins[g + 2], &b->ins[g + 1], (size_t)(last - g - 1) * sizeof k);
  b->ins[g + 1] = k;
  b->ins[g].epi = e;
}

#define ELEM_MERGE_MAX 3 /* values one elementwise kernel writes at most */

/* A plain elementwise node (not fused into a consumer): out[r] = f(inputs[r]). Later elementwise
 * values of the same block and size that load some of the same values, and only values already
 * computed here, are written by the same kernel (SwiGLU's backward: d(up) = dy silu(gate) and
 * d(gate) read dy and gate once); they are marked merged and lower to nothing of their own. */
void fuse_elem_lower(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  int64_t numel = ir_shape_numel(&n->shape);
  int nn = c->g->nnodes, with[ELEM_MERGE_MAX], nw = 0;
  with[nw++] = id;
  bool *leaf = xcalloc((size_t)nn, sizeof *leaf);
  mark_loads(c, id, leaf);
  for (int j = id + 1; j < nn && nw < ELEM_MERGE_MAX; j++) {
    const IrNode *m = N(c, j);
    bool shares = false;
    if (!fuse_elem_is(m->op) || c->inlined[j] || c->merged[j] || c->acc[j] >= 0 || m->bwd != n->bwd ||
        m->wgt != n->wgt || ir_shape_numel(&m->shape) != numel || !loads_before(c, j, id, leaf, &shares) || !shares)
      continue;
    with[nw++] = j;
    mark_loads(c, j, leaf);
  }
  free(leaf);
  char name[48] = "";
  for (int w = 0; w < nw; w++) {
    const char *op = ir_ops[N(c, with[w])->op].name;
    snprintf(name + strlen(name), sizeof name - strlen(name), "%s%s", w ? "_" : "", op + (op[0] == '.'));
  }
  KCall kc = fuse_kc_flat(name, numel, id);
  for (int w = 0; w < nw; w++) {
    int out = fuse_kc_node(c, &kc, with[w], true);
    kir_store(kc.k, out, kir_row(kc.k), '=', fuse_elem_expr(c, &kc, with[w], kir_row(kc.k)));
    if (w) c->merged[with[w]] = true;
  }
  fuse_kc_emit(c, &kc);
  if (nw == 1) epilogue(c, id);
}
