/* fuse_gemm.c — the matrix products: linear and matmul and their gradients as GEMMs over the
 * activations' rows (transpose_sb folded into batched strides), and attention as GEMMs around its
 * softmax kernels. */
#include "ppc.h"

static const IrNode *N(const FuseCtx *c, int id) { return &c->g->nodes[id]; }

static int idx2(Kernel *k, int row, int64_t width, int j) {
  return kir_e(k, K_IADD, kir_e(k, K_IMUL, row, kir_i(k, width), 0), j, 0);
}

/* ============================================================================================
 * GEMMs: activations as matrices of rows; a transposed-in-memory operand becomes batches
 * ========================================================================================== */

typedef struct View {
  int vb;
  int64_t rows_per_batch_ld; /* leading dimension */
  int64_t base, stride;      /* byte offset of batch 0 and elements between batches */
} View;

/* An activation [d0, d1, F] stored as [d0,d1] (flipped = false) or [d1,d0] (flipped = true). */
static View act_view(FuseCtx *c, int node, bool batched, int64_t d0, int64_t d1, int64_t F) {
  bool flipped =
      c->phys[node] != N(c, node)->layout && c->phys[node] != LAYOUT_NONE && N(c, node)->layout != LAYOUT_NONE;
  View v = {.vb = fuse_prog_buf(c, node)};
  if (!batched) v.rows_per_batch_ld = F;
  else if (!flipped) v.rows_per_batch_ld = d1 * F, v.stride = F;
  else v.rows_per_batch_ld = F, v.stride = d0 * F;
  (void)d1;
  return v;
}

static bool flipped(FuseCtx *c, int node) {
  Layout l = N(c, node)->layout, ph = c->phys[node];
  return l != LAYOUT_NONE && ph != LAYOUT_NONE && l != ph;
}

static void gemm(FuseCtx *c, int node, char ta, char tb, int64_t m, int64_t n, int64_t k, View A, View B, View C,
                 double beta, int64_t batch) {
  Instr *in = fuse_prog_instr(c, I_GEMM, node);
  in->ta = ta, in->tb = tb;
  in->m = m, in->n = n, in->k = k;
  in->alpha = 1;
  in->beta = beta;
  in->op[0] = fuse_prog_ob(A.vb, A.base), in->lda = A.rows_per_batch_ld, in->sa = A.stride;
  in->op[1] = fuse_prog_ob(B.vb, B.base), in->ldb = B.rows_per_batch_ld, in->sb = B.stride;
  in->op[2] = fuse_prog_ob(C.vb, C.base), in->ldc = C.rows_per_batch_ld, in->sc = C.stride;
  in->nop = 3;
  in->batch = batch;
}

static View param_view(int vb, int64_t ld) { return (View){.vb = vb, .rows_per_batch_ld = ld}; }

/* linear/matmul and their gradients. The activation operands are matrices of rows, d0*d1 of them
 * (or all leading dims); batches of d0 rows, d1 of them, when one is stored transposed. */
typedef struct GemmRows {
  const IrNode *n;
  bool lin;        /* linear (W[N,K]), not matmul (W[K,N]) */
  int64_t F_in, R; /* the features of the activation input (x, or dy), and its rows */
  bool any_flip;   /* an activation operand is stored transposed: batched */
  int64_t d0, d1, batch, M;
} GemmRows;

static GemmRows gemm_rows(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  GemmRows r = {.n = n, .lin = n->op == OP_LINEAR || n->op == OP_LINEAR_DX || n->op == OP_LINEAR_DW};
  int act_in = n->in[0]; /* x, or dy */
  const Shape *xs = &N(c, act_in)->shape;
  r.F_in = xs->d[xs->nd - 1];
  r.R = ir_shape_numel(xs) / r.F_in;
  /* batching is needed when any activation operand is stored transposed */
  r.any_flip = flipped(c, act_in) || (n->op != OP_LINEAR_DW && n->op != OP_MATMUL_DW && c->phys[id] != n->layout &&
                                      c->phys[id] != LAYOUT_NONE && n->layout != LAYOUT_NONE);
  if ((n->op == OP_LINEAR_DW || n->op == OP_MATMUL_DW) && flipped(c, n->in[1])) r.any_flip = true;
  r.d0 = xs->nd >= 3 ? xs->d[0] : r.R, r.d1 = xs->nd >= 3 ? r.R / xs->d[0] : 1;
  r.batch = r.any_flip ? r.d1 : 1, r.M = r.any_flip ? r.d0 : r.R;
  return r;
}

/* linear, matmul: y = x W^T or x W, then the bias */
void fuse_gemm_linear(FuseCtx *c, int id) {
  GemmRows r = gemm_rows(c, id);
  const IrNode *n = r.n;
  const Shape *w = &N(c, n->in[1])->shape;
  int64_t K = r.F_in, Nn = r.lin ? w->d[0] : w->d[1];
  View X = act_view(c, n->in[0], r.any_flip, r.d0, r.d1, K);
  View W = param_view(fuse_prog_buf(c, n->in[1]), w->d[1]);
  View Y = act_view(c, id, r.any_flip, r.d0, r.d1, Nn);
  /* a flipped output: the view must treat it as stored [d1,d0] */
  if (r.any_flip) {
    bool fo = c->phys[id] != n->layout && c->phys[id] != LAYOUT_NONE;
    Y = (View){.vb = fuse_prog_buf(c, id), .rows_per_batch_ld = fo ? Nn : r.d1 * Nn, .stride = fo ? r.d0 * Nn : Nn};
  }
  gemm(c, id, 'N', r.lin ? 'T' : 'N', r.M, Nn, K, X, W, Y, 0, r.batch);
  if (n->nin == 3 && !c->biased[id]) /* the bias: the GEMM's epilogue when it is one product */
    fuse_gemm_bias(c, id, fuse_prog_buf(c, n->in[2]), 0, r.R, Nn);
}

/* Node id's product [R, N] (its buffer, from its GEMM just emitted) plus the bias at bytes add of
 * buffer bias, broadcast over the rows (element r takes bias r mod N); that GEMM's epilogue
 * (epi:bias) where it may carry one and wrote the whole buffer. */
void fuse_gemm_bias(FuseCtx *c, int id, int bias, int64_t add, int64_t R, int64_t N) {
  KCall kc = fuse_kc_flat("bias_add", R * N, id);
  Kernel *k = kc.k;
  int y = fuse_kc_node(c, &kc, id, true), b = fuse_kc_vbuf_at(c, &kc, bias, add, false);
  kir_store(k, y, kir_row(k), '+', kir_ld(k, b, kir_e(k, K_IMOD, kir_row(k), kir_i(k, N), 0)));
  fuse_kc_emit(c, &kc);
  const VBuf *yb = &c->p->vb[fuse_prog_buf(c, id)];
  Instr *g = &c->blk->ins[c->blk->n - 2];
  if (g->kind == I_GEMM && pp_epi_gemm_ok(g->batch, g->beta, g->ldc, g->n, g->tri) &&
      g->op[2].vb == fuse_prog_buf(c, id) && yb->bytes == R * N * pp_dtype_bytes(yb->dtype) &&
      c->p->vb[bias].dtype == yb->dtype)
    g->epi = PP_EPI_BIAS;
}

/* linear_dx, matmul_dx: dx[R,K] = dy[R,N] . W[N,K] (linear) or dy . W[K,N]^T (matmul) */
void fuse_gemm_linear_dx(FuseCtx *c, int id) {
  GemmRows r = gemm_rows(c, id);
  const IrNode *n = r.n;
  const Shape *w = &N(c, n->in[1])->shape;
  int64_t Nn = r.F_in, K = r.lin ? w->d[1] : w->d[0];
  View DY = act_view(c, n->in[0], r.any_flip, r.d0, r.d1, Nn);
  View W = param_view(fuse_prog_buf(c, n->in[1]), w->d[1]);
  View DX = act_view(c, id, r.any_flip, r.d0, r.d1, K);
  gemm(c, id, 'N', r.lin ? 'N' : 'T', r.M, K, Nn, DY, W, DX, c->acc[id] >= 0 ? 1 : 0, r.batch); /* 1: into an add */
}

/* linear_dw, matmul_dw: linear dW[N,K] += dy^T x, matmul dW[K,N] += x^T dy; the batches
 * accumulate into one dW */
void fuse_gemm_linear_dw(FuseCtx *c, int id) {
  GemmRows r = gemm_rows(c, id);
  const IrNode *n = r.n;
  int x = n->in[1];
  int64_t Nn = r.F_in, K = N(c, x)->shape.d[N(c, x)->shape.nd - 1];
  View DY = act_view(c, n->in[0], r.any_flip, r.d0, r.d1, Nn);
  View X = act_view(c, x, r.any_flip, r.d0, r.d1, K);
  int g = fuse_prog_grad(c, n->gparam);
  if (r.lin) gemm(c, id, 'T', 'N', Nn, K, r.M, DY, X, param_view(g, K), 1, r.batch);
  else gemm(c, id, 'T', 'N', K, Nn, r.M, X, DY, param_view(g, Nn), 1, r.batch);
}

/* ============================================================================================
 * Attention as GEMMs (as llm.c's cuBLAS path): the scores of each (batch, query head) are an
 * S x S matrix, QK^T and PV strided batched GEMMs over the [S,B,H,D] activations, the softmax a
 * kernel between them. Grouped-query heads by strides: query head h = g*R + r reads kv head g, so
 * for each r < R one GEMM covers the B*HK pairs (b, g), stepping R heads in q and one in k, v.
 * ========================================================================================== */

/* An attention operand: a buffer, its first element for r = 0, the elements added per r, the
 * leading dimension and the elements between batches (b, g). */
typedef struct AttOp {
  int vb;
  int64_t at, per_r, ld, stride;
} AttOp;

/* q-shaped [SQ,B,HQ,D] (q, o, do, dq), kv-shaped [SK,B,HK,D] (k, v, dk, dv), scores [B*HQ,SQ,SK] */
static AttOp att_q(int vb, int64_t B, int64_t HQ, int64_t D, int64_t R) { return (AttOp){vb, 0, D, B * HQ * D, R * D}; }
static AttOp att_kv(int vb, int64_t B, int64_t HK, int64_t D) { return (AttOp){vb, 0, 0, B * HK * D, D}; }
static AttOp att_s(int vb, int64_t SQ, int64_t SK, int64_t R) { return (AttOp){vb, 0, SQ * SK, SK, R * SQ * SK}; }

static View att_view(const FuseCtx *c, AttOp o, int r) {
  int64_t es = pp_dtype_bytes(c->p->vb[o.vb].dtype);
  return (View){.vb = o.vb, .rows_per_batch_ld = o.ld, .base = es * (o.at + r * o.per_r), .stride = o.stride};
}

/* C = alpha op(A) op(B) for each r < R, batched over the B*HK pairs; acc: C is kv-shaped and the
 * R query heads of a group add into it in order (the first overwrites). tri: the products causal
 * masking leaves (pp_tri.h), on a square S x S score matrix. */
static void att_gemm(FuseCtx *c, int node, int64_t R, int64_t batch, char ta, char tb, int64_t m, int64_t n, int64_t k,
                     double alpha, AttOp A, AttOp B, AttOp C, bool acc, PpTri tri, const char *why) {
  for (int r = 0; r < R; r++) {
    gemm(c, node, ta, tb, m, n, k, att_view(c, A, r), att_view(c, B, r), att_view(c, C, r), acc && r > 0 ? 1 : 0,
         batch);
    c->blk->ins[c->blk->n - 1].alpha = alpha;
    c->blk->ins[c->blk->n - 1].tri = tri;
    c->blk->ins[c->blk->n - 1].why = why;
  }
}

/* Row r = (b*HQ + h)*SQ + i of the scores: the query at the rank's position i sees keys [0, its
 * global position] when causal (context parallelism: the keys are the whole sequence's, the
 * queries the rank's SQ from its first position on), every key otherwise. */
static int att_keys(FuseCtx *c, KCall *kc, int64_t SQ, int64_t SK, bool causal) {
  Kernel *k = kc->k;
  int i = kir_e(k, K_IMOD, kir_row(k), kir_i(k, SQ), 0);
  return kir_let(k, causal ? kir_e(k, K_IADD, fuse_kc_gpos(c, kc, i), kir_i(k, 1), 0) : kir_i(k, SK));
}

/* With a sliding window of W positions, one less than the first key row r sees: its global
 * position - W (a temporary); -1 without a window. */
static int att_before(FuseCtx *c, KCall *kc, int64_t SQ, int64_t W) {
  if (!W) return -1;
  Kernel *k = kc->k;
  int i = kir_e(k, K_IMOD, kir_row(k), kir_i(k, SQ), 0);
  return kir_let(k, kir_e(k, K_ISUB, fuse_kc_gpos(c, kc, i), kir_i(k, W), 0));
}

/* value where key j is in the row's window (after before, att_before), else masked: the keys
 * before a window are masked in the loops over the row (every loop of a row kernel runs over the
 * same keys: a thread reads what it wrote), not skipped */
static int att_window(Kernel *k, int before, int j, int value, double masked) {
  if (before < 0) return value;
  return kir_e(k, K_SEL, kir_e(k, K_ILT, before, j, 0), value, kir_f(k, masked));
}

/* Stores 0 over a causal row's masked tail, the keys nk .. SK-1 (nothing when every key is seen):
 * the loops before it run over the seen keys alone, neither reading nor computing the masked ones. */
static void att_zero_tail(Kernel *k, int buf, int r, int64_t SK, int nk, bool causal) {
  if (!causal) return;
  int j = kir_tfor(k, kir_e(k, K_ISUB, kir_i(k, SK), nk, 0));
  kir_store(k, buf, idx2(k, r, SK, kir_e(k, K_IADD, nk, j, 0)), '=', kir_f(k, 0));
  kir_end(k);
}

/* Context parallelism: the whole sequence's keys (values) from every cp rank's part, in rank order
 * (the sequence's order), into a scratch buffer of the whole: the gathered K or V. */
static AttOp att_gather(FuseCtx *c, int node, int part, const char *name, int64_t SK, int64_t B, int64_t HK,
                        int64_t D) {
  int whole = fuse_prog_vbuf(c, name, BC_SCRATCH, (Shape){4, {SK, B, HK, D}}, c->p->vb[part].dtype);
  fuse_prog_seq_coll(c, node, true, "cp", part, whole, node,
                     "context parallelism: the whole sequence's keys and values from every rank's positions");
  return att_kv(whole, B, HK, D);
}

void fuse_gemm_attention(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  int fwd = n->op == OP_ATTENTION ? id : n->fwd;
  const IrNode *f = N(c, fwd);
  const Shape *qs = &N(c, f->in[0])->shape, *kvs = &N(c, f->in[1])->shape;
  /* SQ the rank's queries; SK the keys they see: the whole sequence's under context parallelism */
  int64_t SQ = qs->d[0], SK = SQ * (c->g->cfg.cp > 1 ? c->g->cfg.cp : 1), B = qs->d[1], HQ = qs->d[2], HK = kvs->d[2],
          D = qs->d[3], R = HQ / HK, batch = B * HK;
  bool causal = f->a.causal, cp = SK != SQ;
  int64_t W = f->a.window < SK ? f->a.window : 0; /* a window over the whole sequence: causal attention */
  /* causal without context parallelism: the scores' strict upper triangle is masked (the softmax
   * kernels write its probabilities and their gradients as zeros), so a product writing scores
   * needs their lower triangle alone, and one reading P or dS (op(A), lower; transposed, upper)
   * only the keys each query sees */
  bool tri = causal && !cp;
  PpTri t_out = tri ? PP_TRI_OUT : PP_TRI_NONE, t_low = tri ? PP_TRI_LOWER : PP_TRI_NONE,
        t_up = tri ? PP_TRI_UPPER : PP_TRI_NONE;
  if (n->op != OP_ATTENTION && c->att_done[fwd]) return; /* the backward: all three gradients at the first */
  AttOp q = att_q(fuse_prog_buf(c, f->in[0]), B, HQ, D, R),
        kk = cp ? att_gather(c, id, fuse_prog_buf(c, f->in[1]), "k_all", SK, B, HK, D)
                : att_kv(fuse_prog_buf(c, f->in[1]), B, HK, D),
        v = cp ? att_gather(c, id, fuse_prog_buf(c, f->in[2]), "v_all", SK, B, HK, D)
               : att_kv(fuse_prog_buf(c, f->in[2]), B, HK, D);
  int lse = c->p->node_aux[fwd];    /* [B,HQ,SQ]: the log-sum-exp of each query's scores; -1 when kept */
  int kept = c->p->node_probs[fwd]; /* attention_probs = keep: the probabilities' saved buffer; -1 */
  Shape ss = {3, {B * HQ, SQ, SK}};
  if (n->op == OP_ATTENTION) {
    AttOp p = att_s(kept >= 0 ? kept : fuse_prog_vbuf(c, "scores", BC_SCRATCH, ss, fuse_act_dtype(c)), SQ, SK, R);
    att_gemm(c, id, R, batch, 'N', 'T', SQ, SK, D, f->a.scale, q, kk, p, false, t_out, "scores = scale Q K^T");
    /* the causal softmax of each row, in place; its log-sum-exp saved for a backward that
     * recomputes the probabilities (kept ones need none: a logarithm a row, 13% of the kernel) */
    KCall kc = fuse_kc_block("attention_softmax", B * HQ * SQ, SK, id);
    Kernel *k = kc.k;
    int P = fuse_kc_vbuf(c, &kc, p.vb, true), L = lse >= 0 ? fuse_kc_vbuf(c, &kc, lse, true) : -1;
    int r = kir_row(k), nk = att_keys(c, &kc, SQ, SK, causal), before = att_before(c, &kc, SQ, W);
    int j = kir_reduce(k, nk);
    int m = kir_reduce_end(k, 'M', att_window(k, before, j, kir_ld(k, P, idx2(k, r, SK, j)), -1e30));
    j = kir_reduce(k, nk);      /* exp(s - max) kept in place of s: one exponential a score */
    kir_reduce_fetch(k, P, SK); /* the next row's scores meanwhile */
    int ex = kir_let(
        k, att_window(k, before, j, kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, P, idx2(k, r, SK, j)), m, 0), 0, 0), 0));
    kir_store(k, P, idx2(k, r, SK, j), '=', ex);
    int l = kir_reduce_end(k, '+', ex);
    if (L >= 0) kir_store(k, L, r, '=', kir_e(k, K_ADD, m, kir_e(k, K_LOG, l, 0, 0), 0));
    int inv = kir_let(k, kir_e(k, K_DIV, kir_f(k, 1), l, 0));
    j = kir_tfor(k, nk);
    kir_store(k, P, idx2(k, r, SK, j), '=', kir_e(k, K_MUL, kir_ld(k, P, idx2(k, r, SK, j)), inv, 0));
    kir_end(k);
    att_zero_tail(k, P, r, SK, nk, causal);
    k->work = 4 * SK;
    fuse_kc_emit(c, &kc);
    att_gemm(c, id, R, batch, 'N', 'N', SQ, D, SK, 1, p, v, att_q(fuse_prog_buf(c, id), B, HQ, D, R), false, t_low,
             "O = P V");
    return;
  }
  /* the backward: all three gradients at the first of the three nodes (under context parallelism
   * after gathering K and V again: recomputed, not kept) */
  c->att_done[fwd] = true;
  int gq, gk, gv;
  fuse_attn_grads(c, id, fwd, &gq, &gk, &gv);
  AttOp dout = att_q(fuse_prog_buf(c, n->in[3]), B, HQ, D, R);
  AttOp p = att_s(kept >= 0 ? kept : fuse_prog_vbuf(c, "probs", BC_SCRATCH, ss, fuse_act_dtype(c)), SQ, SK, R),
        dp = att_s(fuse_prog_vbuf(c, "dscores", BC_SCRATCH, ss, fuse_act_dtype(c)), SQ, SK, R);
  /* dK and dV: the node's buffer, or under context parallelism the whole sequence's f32 partial
   * sums, reduce-scattered */
  Shape kv_all = {4, {SK, B, HK, D}};
  int dk_all = cp ? fuse_prog_vbuf(c, "dk_f32", BC_SCRATCH, kv_all, PP_F32) : fuse_prog_buf(c, gk),
      dv_all = cp ? fuse_prog_vbuf(c, "dv_f32", BC_SCRATCH, kv_all, PP_F32) : fuse_prog_buf(c, gv);
  if (kept < 0) { /* attention_probs = recompute */
    att_gemm(c, id, R, batch, 'N', 'T', SQ, SK, D, f->a.scale, q, kk, p, false, t_out, "the scores again: scale Q K^T");
    /* P = exp(s - lse): the forward's probabilities from its saved log-sum-exp */
    KCall kc = fuse_kc_block("attention_probs", B * HQ * SQ, SK, id);
    Kernel *k = kc.k;
    int P = fuse_kc_vbuf(c, &kc, p.vb, true), L = fuse_kc_vbuf(c, &kc, lse, false);
    int r = kir_row(k), nk = att_keys(c, &kc, SQ, SK, causal), before = att_before(c, &kc, SQ, W);
    int l = kir_let(k, kir_ld(k, L, r));
    int j = kir_tfor(k, nk);
    kir_store(
        k, P, idx2(k, r, SK, j), '=',
        att_window(k, before, j, kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, P, idx2(k, r, SK, j)), l, 0), 0, 0), 0));
    kir_end(k);
    att_zero_tail(k, P, r, SK, nk, causal);
    k->work = 2 * SK;
    fuse_kc_emit(c, &kc);
  }
  att_gemm(c, id, R, batch, 'N', 'T', SQ, SK, D, 1, dout, v, dp, false, t_out, "dP = dO V^T");
  att_gemm(c, id, R, batch, 'T', 'N', SK, D, SQ, 1, p, dout, att_kv(dv_all, B, HK, D), true, t_up, "dV = P^T dO");
  {
    /* dS = scale P (dP - delta), delta = the row's sum of P dP (= dO . O): 0 where P is (a window's
     * masked keys among them) */
    KCall kc = fuse_kc_block("attention_dscores", B * HQ * SQ, SK, id);
    Kernel *k = kc.k;
    int P = fuse_kc_vbuf(c, &kc, p.vb, false), G = fuse_kc_vbuf(c, &kc, dp.vb, true);
    int r = kir_row(k), nk = att_keys(c, &kc, SQ, SK, causal);
    int j = kir_reduce(k, nk);
    int delta =
        kir_reduce_end(k, '+', kir_e(k, K_MUL, kir_ld(k, P, idx2(k, r, SK, j)), kir_ld(k, G, idx2(k, r, SK, j)), 0));
    j = kir_tfor(k, nk);
    int pv = kir_let(k, kir_ld(k, P, idx2(k, r, SK, j)));
    int ds = kir_e(k, K_MUL, kir_e(k, K_MUL, kir_f(k, f->a.scale), pv, 0),
                   kir_e(k, K_SUB, kir_ld(k, G, idx2(k, r, SK, j)), delta, 0), 0);
    kir_store(k, G, idx2(k, r, SK, j), '=', ds);
    kir_end(k);
    att_zero_tail(k, G, r, SK, nk, causal);
    k->work = 3 * SK;
    fuse_kc_emit(c, &kc);
  }
  att_gemm(c, id, R, batch, 'N', 'N', SQ, D, SK, 1, dp, kk, att_q(fuse_prog_buf(c, gq), B, HQ, D, R), false, t_low,
           "dQ = dS K");
  att_gemm(c, id, R, batch, 'T', 'N', SK, D, SQ, 1, dp, q, att_kv(dk_all, B, HK, D), true, t_up, "dK = dS^T Q");
  if (cp) { /* each rank its positions' sums over every rank's queries */
    static const char why[] = "context parallelism: every rank's queries' part of the keys' (values') gradient, summed";
    fuse_prog_seq_coll(c, id, false, "cp", dk_all, fuse_prog_buf(c, gk), gk, why);
    fuse_prog_seq_coll(c, id, false, "cp", dv_all, fuse_prog_buf(c, gv), gv, why);
  }
}
