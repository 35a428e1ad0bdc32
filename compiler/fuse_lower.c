/* fuse_lower.c — lowers the forward+backward graph to a program: which values are fused into
 * their consumer's kernel and which the backward keeps, every value's virtual buffer (mem_plan.c
 * places them), then each node's kernels, GEMMs and instructions in order (fuse_elem.c,
 * fuse_gemm.c, fuse_rows.c) and the optimizer (fuse_adamw.c). */
#include <limits.h>
#include <stdlib.h>

#include "ppc.h"

static const IrNode *N(const FuseCtx *c, int id) { return &c->g->nodes[id]; }

static int64_t last_dim(const Shape *s) { return s->nd ? s->d[s->nd - 1] : 1; }

/* ============================================================================================
 * Analysis and the driver
 * ========================================================================================== */

static bool gemm_reader(Op op) {
  return op == OP_LINEAR || op == OP_MATMUL || op == OP_LINEAR_DX || op == OP_MATMUL_DX || op == OP_LINEAR_DW ||
         op == OP_MATMUL_DW;
}

/* FuseCtx.wide, in a bf16 program: WIDE_SUM a column-parallel input gradient or a sum of them,
 * WIDE_PARTIAL a partial sum a tensor-parallel collective completes (analyse) */
enum { WIDE_SUM = 1, WIDE_PARTIAL = 2 };

static bool is_alias(Op op) {
  return op == OP_SPLIT_HEADS || op == OP_MERGE_HEADS || op == OP_TP_COPY || op == OP_TP_REDUCE || op == OP_ALLREDUCE;
}

/* The node whose value x's is, through aliases (the producer that owns the bytes). */
static int alias_source(const FuseCtx *c, int x) {
  while (is_alias(N(c, x)->op)) x = N(c, x)->in[0];
  return x;
}

/* An add of the backward in a sum: read by nothing else, or a term of one. */
static bool sum_add(const FuseCtx *c, int i) {
  const IrNode *n = N(c, i);
  return n->op == OP_ADD && n->bwd && !c->saved[i];
}

/* A sum's top add: not itself a term of an add in the same block. It may be saved (a split
 * backward's W reads it): its value is then kept in the buffer it is accumulated into. */
static bool sum_root(const FuseCtx *c, int i) {
  const IrNode *n = N(c, i);
  return n->op == OP_ADD && n->bwd &&
         !(!c->saved[i] && c->nusers[i] == 1 && sum_add(c, c->user[i]) && N(c, c->user[i])->wgt == n->wgt);
}

/* An add of the sum whose top add is `top`: read by nothing else, in its block. */
static bool sum_inner(const FuseCtx *c, int t, int top) {
  return sum_add(c, t) && c->nusers[t] == 1 && N(c, t)->wgt == N(c, top)->wgt;
}

#define SUM_MAX 8 /* terms of one sum at most */

/* The sum whose top add is i: its adds (opened while read by nothing else) and its terms. 0, or -1
 * past SUM_MAX. */
static int sum_collect(const FuseCtx *c, int i, int *adds, int *na, int *terms, int *nt) {
  adds[(*na)++] = i;
  for (int k = 0; k < 2; k++) {
    int t = N(c, i)->in[k];
    if (t < 0) return -1;
    if (sum_inner(c, t, i)) {
      if (*na == SUM_MAX || sum_collect(c, t, adds, na, terms, nt)) return -1;
    } else if (*nt < SUM_MAX) terms[(*nt)++] = t;
    else return -1;
  }
  return 0;
}

static bool is_dx_gemm(Op op) { return op == OP_LINEAR_DX || op == OP_MATMUL_DX; }
static bool is_norm_dx(Op op) { return op == OP_RMSNORM_DX || op == OP_LAYERNORM_DX; }

/* The input gradient of a column-parallel (or vocabulary-parallel) weight's product: under
 * tensor parallelism a partial sum over the rank's columns. */
static bool column_dx(const FuseCtx *c, int i) {
  const IrNode *n = N(c, i), *w = n->nin > 1 && n->in[1] >= 0 ? N(c, n->in[1]) : NULL;
  if (!is_dx_gemm(n->op) || !w || w->op != OP_PARAM) return false;
  Role r = c->g->params[w->param].role;
  return r == ROLE_COLUMN || r == ROLE_VOCAB;
}

/* Whether every reader of base but the sum's adds runs at its own place (a GEMM, a norm's or a
 * bias's gradient: nothing that could be fused into a later kernel), in base's block, before node
 * `before`. */
static bool read_before(const FuseCtx *c, int base, const int *adds, int na, int before) {
  for (int i = base + 1; i < c->g->nnodes; i++) {
    const IrNode *n = N(c, i);
    bool reads = false, ours = false;
    for (int k = 0; k < n->nin; k++) reads |= n->in[k] == base;
    for (int a = 0; a < na; a++) ours |= adds[a] == i;
    if (!reads || ours) continue;
    bool placed = gemm_reader(n->op) || is_norm_dx(n->op) || n->op == OP_RMSNORM_DW || n->op == OP_LAYERNORM_DW ||
                  n->op == OP_BIAS_DB;
    if (!placed || i >= before || n->wgt != N(c, base)->wgt) return false;
  }
  return true;
}

/* The sum whose top add is root accumulated into its first term's buffer when it can be: the
 * other terms are dx GEMMs (beta 1) or norm gradients (stored with +=) that nothing else reads,
 * and the first term (base) was written into a buffer of its own (a dx GEMM's, a norm gradient's
 * or an add's) that its other readers are done with before the second term. */
static void accumulate(FuseCtx *c, int root) {
  int adds[SUM_MAX], terms[SUM_MAX], na = 0, nt = 0;
  if (sum_collect(c, root, adds, &na, terms, &nt) || nt < 2) return;
  const IrNode *r = N(c, root);
  int base = terms[0], second = INT_MAX;
  for (int k = 1; k < nt; k++)
    if (terms[k] < base) base = terms[k];
  for (int k = 0; k < nt; k++)
    if (terms[k] != base && terms[k] < second) second = terms[k];
  const IrNode *b = N(c, base);
  bool own = is_dx_gemm(b->op) || is_norm_dx(b->op) ||
             (b->op == OP_ADD && b->bwd && (c->acc[base] >= 0 || c->nusers[base] > 1)); /* not fused away */
  if (!own || c->saved[base] || b->wgt != r->wgt || b->layout != r->layout || !read_before(c, base, adds, na, second))
    return;
  /* bf16: a product added into a bf16 sum would be rounded once with it (a GEMM's beta), where an
   * add rounds each: products accumulate only in a sum of column-parallel input gradients, which is
   * kept in f32 (analyse) */
  bool gemms = false, columns = true;
  for (int k = 0; k < nt; k++) gemms |= is_dx_gemm(N(c, terms[k])->op), columns &= column_dx(c, terms[k]);
  if (fuse_act_dtype(c) != PP_F32 && gemms && !columns) return;
  for (int k = 0; k < nt; k++) {
    const IrNode *t = N(c, terms[k]);
    if (terms[k] != base && (!(is_dx_gemm(t->op) || is_norm_dx(t->op)) || c->nusers[terms[k]] != 1 ||
                             c->saved[terms[k]] || t->wgt != r->wgt || t->layout != r->layout))
      return;
  }
  for (int a = 0; a < na; a++) c->acc[adds[a]] = base;
  for (int k = 0; k < nt; k++)
    if (terms[k] != base) c->acc[terms[k]] = base;
  /* a saved sum (split backward: B's, read by W) is kept where it is accumulated, so that it adds
   * its terms in the order of the program that does not split (the same bits) */
  if (c->saved[root]) c->saved[base] = true;
}

/* Whether linear id's bias is added by the kernels that read its product (fuse_elem_val), not by
 * a pass of its own over it: every forward reader loads the product by its flat index (an
 * elementwise op, a chunk, a rope's or a norm's x), and when the backward reads the biased value
 * (gelu's input) its one forward reader, an elementwise kernel of its own, stores it back. */
static bool bias_deferred(const FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  if ((n->op != OP_LINEAR && n->op != OP_MATMUL) || n->nin != 3 || n->bwd) return false;
  int readers = 0;
  for (int i = id + 1; i < c->g->nnodes; i++) {
    const IrNode *u = N(c, i);
    for (int k = 0; k < u->nin; k++) {
      if (u->in[k] != id || u->bwd) continue; /* the backward reads the stored value */
      bool flat = fuse_elem_is(u->op) || u->op == OP_CHUNK ||
                  (k == 0 && (u->op == OP_ROPE || u->op == OP_RMSNORM || u->op == OP_LAYERNORM));
      if (!flat || (c->saved[id] && (!fuse_elem_is(u->op) || c->inlined[i]))) return false;
      readers++;
    }
  }
  return readers > 0 && (!c->saved[id] || readers == 1);
}

/* A concat of attention's gradients alone (q, k and v's of one product, each through its
 * merge_heads, read by nothing else): the backward's kernels write each into its part of the
 * concat's buffer (fuse_attn.c), and the concat copies nothing. Not under context parallelism,
 * whose K and V gradients are reduce-scattered into their own buffers. */
static void concat_into(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  if (n->op != OP_CONCAT || c->g->cfg.cp > 1 || c->g->cfg.att_gemm || n->nin != n->a.parts || n->nin > 3) return;
  int src[3], fwd = -1;
  for (int p = 0; p < n->nin; p++) {
    int m = n->in[p], s = m >= 0 ? N(c, m)->in[0] : -1;
    if (m < 0 || N(c, m)->op != OP_MERGE_HEADS || c->nusers[m] != 1 || c->saved[m] || s < 0) return;
    const IrNode *g = N(c, s);
    if ((g->op != OP_ATTENTION_DQ && g->op != OP_ATTENTION_DK && g->op != OP_ATTENTION_DV) || c->nusers[s] != 1 ||
        c->saved[s] || g->wgt != n->wgt || g->layout != n->layout || (fwd >= 0 && g->fwd != fwd) ||
        last_dim(&N(c, m)->shape) * n->a.parts != last_dim(&n->shape) ||
        fuse_value_dtype(c, s) != fuse_value_dtype(c, id))
      return;
    fwd = g->fwd;
    src[p] = s;
  }
  for (int p = 0; p < n->nin; p++) c->into[src[p]] = id;
  c->merged[id] = true;
}

static void analyse(FuseCtx *c) {
  const Graph *g = c->g;
  int nn = g->nnodes;
  c->nusers = xcalloc((size_t)nn, sizeof(int));
  c->user = xcalloc((size_t)nn, sizeof(int));
  c->saved = xcalloc((size_t)nn, sizeof(bool));
  c->inlined = xcalloc((size_t)nn, sizeof(bool));
  c->merged = xcalloc((size_t)nn, sizeof(bool));
  c->normed = xcalloc((size_t)nn, sizeof(bool));
  c->norm_rope = xmalloc((size_t)(nn ? nn : 1) * sizeof(int));
  for (int i = 0; i < nn; i++) c->norm_rope[i] = -1;
  c->acc = xcalloc((size_t)nn, sizeof(int));
  c->phys = xcalloc((size_t)nn, sizeof(Layout));
  c->att_done = xcalloc((size_t)nn, sizeof(bool));
  c->wide = xcalloc((size_t)nn, 1);
  for (int i = 0; i < nn; i++) {
    const IrNode *n = N(c, i);
    for (int k = 0; k < n->nin; k++) {
      if (n->in[k] < 0) continue;
      c->nusers[n->in[k]]++;
      c->user[n->in[k]] = i;
      if (n->bwd && !N(c, n->in[k])->bwd) c->saved[n->in[k]] = true;
      /* a split backward: what B computes and W reads waits in the slot from B to W */
      if (n->wgt && N(c, n->in[k])->bwd && !N(c, n->in[k])->wgt) c->saved[n->in[k]] = true;
    }
    if (n->fwd >= 0) c->saved[n->fwd] = true;
  }
  /* an alias of a saved value keeps its source alive too */
  for (int i = nn - 1; i >= 0; i--)
    if (c->saved[i] && is_alias(N(c, i)->op)) c->saved[N(c, i)->in[0]] = true;
  for (int i = 0; i < nn; i++) c->phys[i] = N(c, i)->layout;
  /* rematerialisation: a forward elementwise value that only elementwise ops read, the backward's
   * among them, computed from values the backward keeps anyway (parameters, saved values), is not
   * kept: each of its readers computes it inside its own kernel (SwiGLU's silu(gate), whose
   * gradient keeps the gate: the forward's product reads gate and up once and writes nothing
   * else, and the backward's reads no kept silu) */
  for (int i = 0; i < nn; i++) {
    const IrNode *n = N(c, i);
    if (n->bwd || !fuse_elem_is(n->op) || !c->saved[i]) continue;
    bool ok = true;
    for (int k = 0; k < n->nin && ok; k++) ok = n->in[k] >= 0 && (c->saved[n->in[k]] || N(c, n->in[k])->op == OP_PARAM);
    for (int j = i + 1; j < nn && ok; j++)
      for (int k = 0; k < N(c, j)->nin; k++)
        if (N(c, j)->in[k] == i && !fuse_elem_is(N(c, j)->op)) ok = false;
    if (!ok) continue;
    c->saved[i] = false;
    c->inlined[i] = true;
  }
  /* accumulation (accumulate, above): a sum of the backward written into its first term's buffer
   * by the products and norm gradients of its other terms, no add kernel: a gate and an up
   * projection's input gradients, q, k and v's, and the residual stream's gradient */
  for (int i = 0; i < nn; i++) c->acc[i] = -1;
  for (int i = 0; i < nn; i++)
    if (sum_root(c, i)) accumulate(c, i);
  /* in a bf16 program, f32: the input gradients of column-parallel products and their sums (q, k
   * and v's; gate and up's: what tensor parallelism sums over the ranks, so that every mesh and
   * schedule adds them in f32 and their reader sees the same), and any partial sum a
   * tensor-parallel collective completes (rounded after the collective, where the one-rank program
   * rounds the whole product). Other sums (the residual stream's gradient) stay bf16, and so do
   * the values that cross a pipeline boundary. */
  for (int i = 0; i < nn; i++) {
    const IrNode *n = N(c, i);
    if (column_dx(c, i) || (n->op == OP_ADD && n->bwd && c->wide[n->in[0]] & WIDE_SUM && c->wide[n->in[1]] & WIDE_SUM))
      c->wide[i] |= WIDE_SUM;
    /* sequence parallelism: such a sum reduce-scattered stays f32, as the allreduce leaves it */
    if (n->op == OP_TP_SCATTER && c->wide[alias_source(c, n->in[0])] & WIDE_SUM) c->wide[i] |= WIDE_SUM;
  }
  for (int i = 0; i < nn; i++) {
    const IrNode *n = N(c, i);
    if (n->op == OP_TP_REDUCE || n->op == OP_ALLREDUCE || n->op == OP_TP_SCATTER)
      c->wide[alias_source(c, n->in[0])] |= WIDE_PARTIAL;
  }
  /* fusion: a single-use elementwise op is computed inside its consumer */
  for (int i = 0; i < nn; i++) {
    const IrNode *n = N(c, i);
    if (c->inlined[i] || c->acc[i] >= 0 || !fuse_elem_is(n->op) || c->nusers[i] != 1 || c->saved[i]) continue;
    const IrNode *u = N(c, c->user[i]);
    if (u->bwd != n->bwd || u->wgt != n->wgt) continue;
    bool ok = fuse_elem_is(u->op) || u->op == OP_PARAM_GRAD || u->op == OP_RMSNORM || u->op == OP_LAYERNORM ||
              u->op == OP_RMSNORM_DX || u->op == OP_LAYERNORM_DX || u->op == OP_RMSNORM_DW ||
              u->op == OP_LAYERNORM_DW || u->op == OP_BIAS_DB || u->op == OP_CHUNK;
    /* the consumer must read this input by its own flat index: not the x of a norm gradient */
    if ((u->op == OP_RMSNORM_DX || u->op == OP_LAYERNORM_DX || u->op == OP_RMSNORM_DW || u->op == OP_LAYERNORM_DW) &&
        u->in[0] != i)
      ok = false;
    c->inlined[i] = ok;
  }
  /* a residual add that a norm reads first (the next add and the backward read it later): the
   * norm's kernel computes it in its first pass over each row and stores it there, so the sum is
   * not written by a kernel of its own and read back by the next (a bf16 sum rounded as it is
   * stored, and the norm reads the rounded value: the same numbers). */
  for (int i = 0; i < nn; i++) {
    const IrNode *n = N(c, i);
    int a = n->nin ? n->in[0] : -1;
    if ((n->op != OP_RMSNORM && n->op != OP_LAYERNORM) || n->bwd || a < 0) continue;
    const IrNode *x = N(c, a);
    if (x->op != OP_ADD || x->bwd || x->wgt != n->wgt || c->inlined[a] || c->merged[a] || c->acc[a] >= 0) continue;
    /* with recomputation, the add that ends a layer stays the layer's: the next layer's norm
     * reading it back is a kernel the next layer's backward can run again from the kept sum */
    if (g->cfg.recompute != RECOMPUTE_NONE && x->layer != n->layer) continue;
    bool first = true;
    for (int j = a + 1; j < i && first; j++)
      for (int k = 0; k < N(c, j)->nin; k++) first &= N(c, j)->in[k] != a;
    if (first) c->normed[a] = c->merged[a] = true;
  }
  /* RoPE over a per-head norm (q_norm, k_norm): the norm's kernel turns each row's pairs as it
   * stores them, into the rope's buffer, so the normed heads are not written and read back (the
   * norm's gradient reads its input and statistics, not its output) */
  for (int i = 0; i < nn; i++) {
    const IrNode *n = N(c, i);
    int x = n->nin ? n->in[0] : -1;
    if (n->op != OP_ROPE || n->bwd || x < 0) continue;
    const IrNode *xn = N(c, x);
    if ((xn->op != OP_RMSNORM && xn->op != OP_LAYERNORM) || xn->bwd || xn->wgt != n->wgt || c->nusers[x] != 1 ||
        last_dim(&xn->shape) != n->shape.d[3])
      continue;
    c->norm_rope[x] = i;
    c->merged[i] = true;
  }
  c->biased = xcalloc((size_t)nn, sizeof(bool));
  for (int i = 0; i < nn; i++) c->biased[i] = bias_deferred(c, i);
  c->into = xmalloc((size_t)(nn ? nn : 1) * sizeof(int));
  for (int i = 0; i < nn; i++) c->into[i] = -1;
  for (int i = 0; i < nn; i++) concat_into(c, i);
}

/* Which transposes are free: the producer, a GEMM, writes transposed, as d0 products of d1 rows
 * each (of the transposed [d0, d1, F]), where d1 >= d0. Any other is a copy kernel: a GEMM
 * reading it then runs as one product over all its rows, not one per sequence or position. */
static bool transpose_is_free(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  int src = n->in[0];
  if (n->shape.nd != 3) return false; /* GEMM views cover [d0, d1, F] activations only */
  return gemm_reader(N(c, src)->op) && N(c, src)->op != OP_LINEAR_DW && N(c, src)->op != OP_MATMUL_DW &&
         c->nusers[src] == 1 && !c->saved[src] && n->shape.d[1] >= n->shape.d[0];
}

bool fuse_keeps_copies(const Graph *g) { return !g->infer && g->cfg.precision != PP_PREC_FP32; }

/* The rank's parameters, each once: its value, gradient and AdamW moments (every chunk reading one
 * uses these); rank_grad[i]: parameter i's gradient buffer. A tied parameter whose embedding and head
 * are both this rank's has a second gradient buffer, the embedding's (Program.emb_vb): the
 * embedding's gradient accumulates there over the micro-batches, the head's products' in the
 * gradient, and the optimizer adds the two once (fuse_adamw.c), as a pipeline whose first and last
 * stages hold the halves adds them (allreduce_tied). So each half sums its micro-batches alone on
 * every mesh, and the tied gradient is the same bits on one rank as on a pipeline. */
static void param_buffers(FuseCtx *c, int *rank_grad) {
  static const BufClass pc[5] = {BC_PARAM, BC_GRAD, BC_ADAM_M, BC_ADAM_V, BC_COPY};
  const Graph *g = c->g;
  bool copies = fuse_keeps_copies(g);
  c->p->copy_vb = xmalloc((size_t)(g->nparams ? g->nparams : 1) * sizeof(int));
  for (int i = 0; i < g->nparams; i++) rank_grad[i] = c->p->copy_vb[i] = -1;
  for (int cls = 0; cls < (g->infer ? 1 : copies ? 5 : 4); cls++) /* a generation program: the values alone */
    for (int i = 0; i < g->nparams; i++) {
      DType dt = pc[cls] == BC_COPY ? pp_precision_dtype[g->cfg.precision] : PP_F32;
      int vb = fuse_prog_vbuf(c, g->params[i].name, pc[cls], g->params[i].shape, dt);
      c->p->vb[vb].param = i;
      if (pc[cls] == BC_GRAD) rank_grad[i] = vb;
      if (pc[cls] == BC_COPY) c->p->copy_vb[i] = vb;
    }
  c->p->emb_vb = xmalloc((size_t)(g->nparams ? g->nparams : 1) * sizeof(int));
  for (int i = 0; i < g->nparams; i++) {
    const IrParam *q = &g->params[i];
    c->p->emb_vb[i] = -1;
    if (g->infer || !q->tied || q->shared) continue;
    char name[40];
    snprintf(name, sizeof name, "emb_grad%d", i);
    int vb = c->p->emb_vb[i] = fuse_prog_vbuf(c, name, BC_GRAD, q->shape, PP_F32);
    c->p->vb[vb].param = i;
    c->p->vb[vb].tail = true;
  }
}

/* The type of node i's buffer: the precision's for activations and their gradients; f32 for the
 * loss and the backward's seed (read and written by ppr as floats), and for the values analyse
 * keeps wide (sums in progress). */
DType fuse_value_dtype(const FuseCtx *c, int i) {
  const IrNode *n = N(c, i);
  if (n->op == OP_CROSS_ENTROPY || n->op == OP_SEED || i == c->g->loss || c->wide[i]) return PP_F32;
  return fuse_act_dtype(c);
}

/* A tensor-parallel sum (tp_reduce, allreduce) of a bf16 program whose input, a partial sum, is kept
 * in f32 while the one-rank program stores the whole rounded (a row-parallel linear's product): its
 * value is the reduced sum rounded to bf16 once, in a buffer of its own. */
static bool reduce_rounds(const FuseCtx *c, int i) {
  const IrNode *n = N(c, i);
  if ((n->op != OP_TP_REDUCE && n->op != OP_ALLREDUCE) || fuse_act_dtype(c) == PP_F32) return false;
  return !(c->wide[alias_source(c, n->in[0])] & WIDE_SUM);
}

/* A chunk's values' buffers; its parameters are the rank's (pmap, rank_grad). */
static void assign_buffers(FuseCtx *c, const int *rank_grad) {
  const Graph *g = c->g;
  Program *p = c->p;
  int nn = g->nnodes;
  p->node_vb = xmalloc((size_t)nn * sizeof(int));
  p->node_aux = xmalloc((size_t)nn * sizeof(int));
  p->node_probs = xmalloc((size_t)nn * sizeof(int));
  c->grad_vb = xmalloc((size_t)(g->nparams ? g->nparams : 1) * sizeof(int));
  for (int i = 0; i < nn; i++) p->node_vb[i] = p->node_aux[i] = p->node_probs[i] = -1;
  for (int i = 0; i < g->nparams; i++) {
    int r = c->pmap[i];
    /* the value buffers come first, in the rank's order; bf16: the forward and backward read the copies */
    p->node_vb[g->params[i].node] = p->copy_vb[r] >= 0 ? p->copy_vb[r] : r;
    c->grad_vb[i] = rank_grad[r];
  }
  for (int i = 0; i < nn; i++) {
    const IrNode *n = N(c, i);
    char name[40];
    snprintf(name, sizeof name, "%s%d", n->bwd ? "g" : "t", i);
    if (n->var && !n->bwd) snprintf(name, sizeof name, "%.24s.%d", n->var, i);
    if (n->op == OP_PARAM || n->gparam >= 0 || c->inlined[i] || c->into[i] >= 0) continue; /* into: the concat's */
    if (n->op == OP_INPUT) {
      p->node_vb[i] = fuse_prog_vbuf(c, n->var, BC_SLOT, n->shape, PP_I32);
      continue;
    }
    if (n->op == OP_LOGITS) { /* the output: kept in the slot, read after the pass */
      int vb = p->node_vb[i] = p->node_vb[n->in[0]];
      p->vb[vb].cls = BC_SLOT;
      p->vb[vb].pin_end = true;
      c->phys[i] = c->phys[n->in[0]];
      continue;
    }
    if (c->acc[i] >= 0) { /* accumulated into an earlier value's buffer */
      p->node_vb[i] = p->node_vb[c->acc[i]];
      c->phys[i] = c->phys[c->acc[i]];
      continue;
    }
    if (n->op == OP_CE_DX && fuse_rows_ce_fused(c, n->fwd) == i) { /* written over the logits */
      p->node_vb[i] = p->node_vb[n->in[0]];
      c->phys[i] = c->phys[n->in[0]];
      continue;
    }
    if (is_alias(n->op) && !reduce_rounds(c, i)) {
      p->node_vb[i] = p->node_vb[n->in[0]];
      c->phys[i] = c->phys[n->in[0]];
      continue;
    }
    /* pipeline boundaries: received values live from their block's start, sent ones to its end */
    if (n->op == OP_SEND_FORWARD || n->op == OP_SEND_BACKWARD) {
      int vb = p->node_vb[n->in[0]];
      p->node_vb[i] = vb;
      p->vb[vb].pin_end = true;
      p->ch[c->chunk].bnd[n->op == OP_SEND_FORWARD ? PP_SEND_FWD : PP_SEND_BWD] = vb;
      continue;
    }
    if (n->op == OP_RECV_FORWARD || n->op == OP_RECV_BACKWARD) {
      bool f = n->op == OP_RECV_FORWARD;
      /* a received gradient that W reads waits in the slot: W may run long after the gradient
       * of the next micro-batch arrives (a stage that sends nothing back runs its whole backward
       * as W, the received gradient too) */
      bool slot = f || c->saved[i] || n->wgt;
      int vb = fuse_prog_vbuf(c, f ? "recv_forward" : "recv_backward", slot ? BC_SLOT : BC_SCRATCH, n->shape,
                              fuse_act_dtype(c));
      p->vb[vb].pin_start = true;
      p->node_vb[i] = vb;
      p->ch[c->chunk].bnd[f ? PP_RECV_FWD : PP_RECV_BWD] = vb;
      continue;
    }
    if (n->op == OP_TRANSPOSE_SB && transpose_is_free(c, i)) {
      int src = n->in[0];
      if (gemm_reader(N(c, src)->op) && c->nusers[src] == 1 && N(c, src)->op != OP_LINEAR_DW) c->phys[src] = n->layout;
      p->node_vb[i] = p->node_vb[src];
      c->phys[i] = c->phys[src];
      /* a saved alias keeps the bytes it shares alive until the backward */
      if (c->saved[i] && !n->wgt) p->vb[p->node_vb[i]].cls = BC_SLOT;
      continue;
    }
    bool slot = c->saved[i] && !n->wgt; /* a forward value the backward reads, a B value W reads */
    if (c->norm_rope[i] < 0)            /* a norm whose kernel stores its rope's value has none of its own */
      p->node_vb[i] = fuse_prog_vbuf(c, name, slot ? BC_SLOT : BC_SCRATCH, n->shape, fuse_value_dtype(c, i));
    for (int k = 0; n->op == OP_CONCAT && c->merged[i] && k < n->nin; k++) /* its parts write it (concat_into) */
      p->node_vb[n->in[k]] = p->node_vb[N(c, n->in[k])->in[0]] = p->node_vb[i];
    /* saved statistics */
    int64_t R = n->shape.nd ? ir_shape_numel(&n->shape) / last_dim(&n->shape) : 1;
    Shape aux = {0};
    if (n->op == OP_RMSNORM) aux = (Shape){1, {R}};
    if (n->op == OP_LAYERNORM) aux = (Shape){1, {2 * R}};
    if (n->op == OP_CROSS_ENTROPY) {
      const Shape *ls = &N(c, n->in[0])->shape;
      aux = (Shape){1, {ls->d[0] * ls->d[1]}};
    }
    /* attention_probs = keep: the softmax's probabilities [B x HQ, S, S] saved for the backward
     * (under context parallelism they stay recomputed, after K and V are gathered again) */
    bool keep = n->op == OP_ATTENTION && g->cfg.att_gemm && g->cfg.keep_probs && g->cfg.cp == 1 && c->saved[i];
    /* attention's log-sum-exp [B,HQ,S], which recomputed probabilities read (every fused backward) */
    if (n->op == OP_ATTENTION && !keep) aux = (Shape){1, {n->shape.d[0] * n->shape.d[1] * n->shape.d[2]}};
    if (aux.nd) {
      snprintf(name, sizeof name, "stats%d", i);
      p->node_aux[i] = fuse_prog_vbuf(c, name, c->saved[i] ? BC_SLOT : BC_SCRATCH, aux, PP_F32);
    }
    if (keep) {
      snprintf(name, sizeof name, "probs%d", i);
      Shape ps = {3, {n->shape.d[1] * n->shape.d[2], n->shape.d[0], n->shape.d[0]}};
      p->node_probs[i] = fuse_prog_vbuf(c, name, BC_SLOT, ps, fuse_act_dtype(c));
    }
  }
  /* transposes the producer writes: its buffer keeps the logical shape, stored flipped */
  for (int i = 0; i < nn; i++)
    if (N(c, i)->op == OP_TRANSPOSE_SB && p->node_vb[i] == p->node_vb[N(c, i)->in[0]] && p->node_vb[i] >= 0)
      c->phys[i] = c->phys[N(c, i)->in[0]];
}

/* Node id's kernels, GEMMs and instructions, appended to c->blk; nothing for a fused value. */
static void lower_node(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  if (c->inlined[id] || c->merged[id] || (n->op == OP_ADD && c->acc[id] >= 0)) return;
  switch (n->op) {
  case OP_SPLIT_HEADS:
  case OP_MERGE_HEADS:
  OP_CASES_LEAF:
    break;
  case OP_RECV_FORWARD:
  case OP_SEND_FORWARD:
  case OP_RECV_BACKWARD:
  case OP_SEND_BACKWARD: break; /* the schedule's */
  case OP_LOGITS: fuse_rows_logits(c, id, n->in[0]); break;
  case OP_EMBEDDING: fuse_rows_embedding(c, id); break;
  case OP_EMBEDDING_DW: fuse_rows_embedding_dw(c, id); break;
  case OP_POS_EMBEDDING: fuse_rows_pos_embedding(c, id, false); break;
  case OP_POS_EMBEDDING_DW: fuse_rows_pos_embedding(c, id, true); break;
  case OP_LINEAR:
  case OP_MATMUL: fuse_gemm_linear(c, id); break;
  case OP_LINEAR_DX:
  case OP_MATMUL_DX: fuse_gemm_linear_dx(c, id); break;
  case OP_LINEAR_DW:
  case OP_MATMUL_DW: fuse_gemm_linear_dw(c, id); break;
  case OP_BIAS_DB: fuse_rows_col_sum(c, id); break;
  case OP_RMSNORM:
  case OP_LAYERNORM: fuse_rows_norm(c, id); break;
  case OP_RMSNORM_DX:
  case OP_LAYERNORM_DX: fuse_rows_norm_dx(c, id); break;
  case OP_RMSNORM_DW:
  case OP_LAYERNORM_DW: fuse_rows_col_sum(c, id); break;
  case OP_ROPE:
  case OP_ROPE_DX: fuse_rows_rope(c, id); break;
  case OP_ATTENTION:
  case OP_ATTENTION_DQ:
  case OP_ATTENTION_DK:
  case OP_ATTENTION_DV:
    if (c->g->cfg.att_gemm) fuse_gemm_attention(c, id);
    else fuse_attn_lower(c, id);
    break;
  OP_CASES_FWD_ELEM:
  OP_CASES_BWD_ELEM:
    fuse_elem_lower(c, id);
    break;
  case OP_CHUNK: fuse_rows_chunk(c, id); break;
  case OP_CONCAT: fuse_rows_concat(c, id); break;
  case OP_TRANSPOSE_SB:
    if (c->p->node_vb[id] != c->p->node_vb[n->in[0]]) fuse_rows_transpose(c, id);
    break;
  case OP_CROSS_ENTROPY: fuse_rows_ce(c, id); break;
  case OP_CE_DX: fuse_rows_ce_dx(c, id); break;
  case OP_SEED: {
    Instr *in = fuse_prog_instr(c, I_SEED, id);
    in->op[in->nop++] = fuse_prog_ob(fuse_prog_buf(c, id), 0);
    in->value = fuse_rows_seed(c);
    break;
  }
  case OP_PARAM_GRAD: fuse_rows_param_grad(c, id); break;
  case OP_TP_COPY: break; /* identity forward */
  case OP_TP_REDUCE:
  case OP_ALLREDUCE: {
    int src = fuse_prog_buf(c, n->in[0]);
    fuse_prog_allreduce(
        c, id, src, c->p->vb[src].bytes, "tp", "sum",
        n->op == OP_ALLREDUCE ? "the input of column-parallel linears: its gradient is summed over the ranks"
        : n->in[0] >= 0 && N(c, n->in[0])->op == OP_EMBEDDING ? "vocab-parallel embedding: rows from every rank"
                                                              : "row-parallel linear: partial sums");
    if (src != fuse_prog_buf(c, id)) fuse_rows_round(c, id, src); /* reduce_rounds */
    break;
  }
  case OP_ADD_BIAS: fuse_rows_add_bias(c, id); break;
  case OP_TP_GATHER:
  case OP_TP_UNSPLIT:
  case OP_TP_SCATTER: { /* the rank's part of S is op[0] of a gather, op[1] of a reduce-scatter */
    bool g = n->op != OP_TP_SCATTER;
    /* bf16: the partial sums are f32 (WIDE_PARTIAL), reduced in f32, rounded once after */
    fuse_prog_seq_coll(c, id, g, "tp", fuse_prog_buf(c, n->in[0]), fuse_prog_buf(c, id), id,
                       g ? "sequence parallelism: the whole sequence from every rank's positions"
                         : "sequence parallelism: partial sums, summed, each rank its positions");
    break;
  }
  case OP_TP_SLICE: { /* rank r's positions: elements [r·n, (r+1)·n) of the replicated value */
    int64_t numel = ir_shape_numel(&n->shape);
    KCall kc = fuse_kc_flat("tp_slice", numel, id);
    int r = kir_row(kc.k);
    int from = fuse_kc_iscalar(&kc, fuse_prog_vstart(numel));
    kir_store(kc.k, fuse_kc_node(c, &kc, id, true), r, '=',
              kir_ld(kc.k, fuse_kc_node(c, &kc, n->in[0], false), kir_e(kc.k, K_IADD, r, from, 0)));
    kc.k->work = 1;
    fuse_kc_emit(c, &kc);
    break;
  }
  }
}

/* Which of the rank's parameters each of the chunk's is: the same tensor of the model (gindex). */
static int *param_map(const Graph *rank, const Graph *g) {
  int top = 0;
  for (int j = 0; j < rank->nparams; j++)
    if (rank->params[j].gindex >= top) top = rank->params[j].gindex + 1;
  int *at = xmalloc((size_t)(top ? top : 1) * sizeof *at),
      *map = xmalloc((size_t)(g->nparams ? g->nparams : 1) * sizeof *map);
  for (int j = 0; j < top; j++) at[j] = -1;
  for (int j = 0; j < rank->nparams; j++) at[rank->params[j].gindex] = j;
  for (int i = 0; i < g->nparams; i++) {
    int x = g->params[i].gindex;
    map[i] = x >= 0 && x < top ? at[x] : -1;
    if (map[i] < 0) diag_fatal("internal: parameter %s is not the rank's", g->params[i].name);
  }
  free(at);
  return map;
}

/* One chunk: its buffers, then each node's instructions in its forward, backward or weights block. */
static void lower_chunk(FuseCtx *c, const Graph *rank, const int *rank_grad) {
  Program *p = c->p;
  ProgChunk *ch = &p->ch[c->chunk];
  const Graph *g = c->g;
  if (rank == g) { /* one chunk: the rank's parameters are its own */
    c->pmap = xmalloc((size_t)(g->nparams ? g->nparams : 1) * sizeof *c->pmap);
    for (int i = 0; i < g->nparams; i++) c->pmap[i] = i;
  } else c->pmap = param_map(rank, g);
  analyse(c);
  assign_buffers(c, rank_grad);
  c->nrope = 0;
  c->blk = &ch->fwd;
  /* the batch: token ids and labels of this micro-batch */
  if (g->ninputs) {
    Instr *in = fuse_prog_instr(c, I_BATCH, -1);
    in->nop = 2;
    in->op[0] = in->op[1] = (Operand){.kind = '-'};
    for (int i = 0; i < g->ninputs; i++)
      in->op[g->inputs[i].use == USE_LABELS] = fuse_prog_ob(p->node_vb[g->inputs[i].node], 0);
  }
  for (int i = 0; i < g->nnodes; i++) {
    c->blk = !N(c, i)->bwd ? &ch->fwd : N(c, i)->wgt ? &ch->wgt : &ch->bwd;
    lower_node(c, i);
  }
  free(c->pmap);
  c->pmap = NULL;
  free(c->nusers);
  free(c->user);
  free(c->saved);
  free(c->inlined);
  free(c->merged);
  free(c->normed);
  free(c->norm_rope);
  free(c->acc);
  free(c->biased);
  free(c->into);
  free(c->phys);
  free(c->att_done);
  free(c->wide);
  free(c->grad_vb);
  free(p->node_vb);
  free(p->node_aux);
  free(p->node_probs);
  p->node_vb = p->node_aux = p->node_probs = NULL;
}

Program *fuse_lower(const Graph *rank, Graph *const *chunk, int nch) {
  if (nch < 1 || nch > PP_MAX_CHUNKS) diag_fatal("internal: a program of %d chunks", nch);
  Program *p = xcalloc(1, sizeof *p);
  p->g = rank;
  p->nch = nch;
  p->opt.name = "optimizer";
  p->refresh.name = "refresh";
  p->nslots = 1;
  for (int k = 0; k < 2; k++) p->zview[k][0] = p->zview[k][1] = -1;
  FuseCtx c = {.p = p, .g = rank};
  int *rank_grad = xmalloc((size_t)(rank->nparams ? rank->nparams : 1) * sizeof *rank_grad);
  param_buffers(&c, rank_grad);
  for (int k = 0; k < nch; k++) {
    ProgChunk *ch = &p->ch[k];
    ch->g = chunk[k];
    ch->fwd.name = "forward";
    ch->bwd.name = "backward";
    ch->wgt.name = "weights";
    for (int i = 0; i < PP_NBND; i++) ch->bnd[i] = -1;
    c.g = chunk[k];
    c.chunk = k;
    lower_chunk(&c, rank, rank_grad);
  }
  c.g = rank; /* the optimizer: over the rank's parameters */
  c.chunk = 0;
  c.grad_vb = rank_grad;
  if (!rank->infer) {
    AdamPart parts[2];
    fuse_adamw_parts(&c, parts);
    for (int k = 0; k < 2; k++)
      p->zview[k][0] = parts[k].vb[0], p->zview[k][1] = parts[k].vb[2], p->zshard[k] = parts[k].shard;
    fuse_adamw(&c, parts);
    fuse_adamw_refresh(&c, parts);
  }
  for (int i = 0; i < p->nk; i++) free(c.bodies[i]);
  free(c.bodies);
  free(rank_grad);
  return p;
}
