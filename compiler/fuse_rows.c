/* fuse_rows.c — the row kernels: a row (a token's features, or a column of a gradient) per
 * thread or per block, for the embeddings, the norms, rope, chunk, concat, transpose_sb, the
 * cross-entropy and the bias and parameter gradients. */
#include "ppc.h"

static const IrNode *N(const FuseCtx *c, int id) { return &c->g->nodes[id]; }

static int idx2(Kernel *k, int row, int64_t width, int j) {
  return kir_e(k, K_IADD, kir_e(k, K_IMUL, row, kir_i(k, width), 0), j, 0);
}

static int64_t last_dim(const Shape *s) { return s->nd ? s->d[s->nd - 1] : 1; }

/* .param_grad: dW += g, for a parameter used directly */
void fuse_rows_param_grad(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  KCall kc = fuse_kc_flat("param_grad", ir_shape_numel(&n->shape), id);
  int g = fuse_kc_vbuf(c, &kc, fuse_prog_grad(c, n->gparam), true);
  kir_store(kc.k, g, kir_row(kc.k), '+', fuse_elem_val(c, &kc, n->in[0], kir_row(kc.k)));
  fuse_kc_emit(c, &kc);
}

void fuse_rows_embedding(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  int64_t S = n->shape.d[0], B = n->shape.d[1], H = n->shape.d[2];
  KCall kc = fuse_kc_block("embedding", S * B, H, id);
  Kernel *k = kc.k;
  int y = fuse_kc_node(c, &kc, id, true), ids = fuse_kc_node(c, &kc, n->in[0], false),
      w = fuse_kc_node(c, &kc, n->in[1], false);
  int r = kir_row(k);
  int s = kir_let(k, kir_e(k, K_IDIV, r, kir_i(k, B), 0)), b = kir_let(k, kir_e(k, K_IMOD, r, kir_i(k, B), 0));
  int tok = kir_let(k, kir_ld(k, ids, kir_e(k, K_IADD, kir_e(k, K_IMUL, b, kir_i(k, S), 0), s, 0)));
  if (n->a.vlocal) { /* vocab-parallel: my rows of the table, zeros for the others' */
    int v0 = fuse_kc_iscalar(&kc, fuse_prog_vstart(n->a.vlocal));
    int loc = kir_let(k, kir_e(k, K_ISUB, tok, v0, 0));
    int mine = kir_let(
        k, kir_e(k, K_IAND, kir_e(k, K_ILT, kir_i(k, -1), loc, 0), kir_e(k, K_ILT, loc, kir_i(k, n->a.vlocal), 0), 0));
    int j = kir_tfor(k, kir_i(k, H));
    kir_store(
        k, y, idx2(k, r, H, j), '=',
        kir_e(k, K_SEL, mine, kir_ld(k, w, idx2(k, kir_e(k, K_ISEL, mine, loc, kir_i(k, 0)), H, j)), kir_f(k, 0)));
    kir_end(k);
  } else {
    int j = kir_tfor(k, kir_i(k, H));
    kir_store(k, y, idx2(k, r, H, j), '=', kir_ld(k, w, idx2(k, tok, H, j)));
    kir_end(k);
  }
  k->work = H;
  fuse_kc_emit(c, &kc);
}

#define EMB_DW_COLS 64 /* columns of dW a row of embedding_dw's kernel owns */

void fuse_rows_embedding_dw(FuseCtx *c, int id) {
  /* a scatter by columns: row q of the kernel owns dW's columns [64q, 64q + 64), so no two rows
   * collide; within a row, each position's dy in order, its 64 columns shared by the block's
   * threads (the C kernel: contiguous, a vector loop; each element's sum in position order as
   * before) */
  const IrNode *n = N(c, id);
  const Shape *dy = &N(c, n->in[1])->shape;
  int64_t S = dy->d[0], B = dy->d[1], H = dy->d[2];
  KCall kc = fuse_kc_block("embedding_dw", (H + EMB_DW_COLS - 1) / EMB_DW_COLS, EMB_DW_COLS, id);
  Kernel *k = kc.k;
  int eg = fuse_prog_emb_grad(c, n->gparam); /* a tied one's own, when the head's is on this rank too */
  int g = fuse_kc_vbuf(c, &kc, eg, true), ids = fuse_kc_node(c, &kc, n->in[0], false),
      d = fuse_kc_node(c, &kc, n->in[1], false);
  int c0 = kir_let(k, kir_e(k, K_IMUL, kir_row(k), kir_i(k, EMB_DW_COLS), 0));
  int left = kir_e(k, K_ISUB, kir_i(k, H), c0, 0);
  int cols =
      H % EMB_DW_COLS
          ? kir_let(k, kir_e(k, K_ISEL, kir_e(k, K_ILT, left, kir_i(k, EMB_DW_COLS), 0), left, kir_i(k, EMB_DW_COLS)))
          : kir_i(k, EMB_DW_COLS);
  int p = kir_for(k, kir_i(k, S * B));
  int s = kir_e(k, K_IDIV, p, kir_i(k, B), 0), b = kir_e(k, K_IMOD, p, kir_i(k, B), 0);
  int tok = kir_let(k, kir_ld(k, ids, kir_e(k, K_IADD, kir_e(k, K_IMUL, b, kir_i(k, S), 0), s, 0)));
  if (n->a.vlocal) { /* vocab-parallel: only my rows */
    int v0 = fuse_kc_iscalar(&kc, fuse_prog_vstart(n->a.vlocal));
    tok = kir_let(k, kir_e(k, K_ISUB, tok, v0, 0));
    kir_if(k,
           kir_e(k, K_IAND, kir_e(k, K_ILT, kir_i(k, -1), tok, 0), kir_e(k, K_ILT, tok, kir_i(k, n->a.vlocal), 0), 0));
  }
  int j = kir_tfor(k, cols);
  int col = kir_e(k, K_IADD, c0, j, 0);
  kir_store(k, g, idx2(k, tok, H, col), '+', kir_ld(k, d, idx2(k, p, H, col)));
  kir_end(k);
  if (n->a.vlocal) kir_end(k);
  kir_end(k);
  k->work = S * B * EMB_DW_COLS;
  fuse_kc_emit(c, &kc);
  if (eg != fuse_prog_grad(c, n->gparam))
    c->blk->ins[c->blk->n - 1].why = "the embedding's half, added in the optimizer";
}

void fuse_rows_pos_embedding(FuseCtx *c, int id, bool grad) {
  const IrNode *n = N(c, id);
  const Shape *sh = grad ? &N(c, n->in[0])->shape : &n->shape;
  int64_t S = sh->d[0], B = sh->d[1], H = sh->d[2];
  KCall kc = fuse_kc_block(grad ? "pos_embedding_dw" : "pos_embedding", grad ? S : S * B, H, id);
  Kernel *k = kc.k;
  int r = kir_row(k);
  if (!grad) {
    int y = fuse_kc_node(c, &kc, id, true), w = fuse_kc_node(c, &kc, n->in[0], false);
    /* the table's row of the position: the rank's first (context parallelism) plus the local one */
    int s = kir_let(k, fuse_kc_gpos(c, &kc, kir_e(k, K_IDIV, r, kir_i(k, B), 0)));
    int j = kir_tfor(k, kir_i(k, H));
    kir_store(k, y, idx2(k, r, H, j), '=', kir_ld(k, w, idx2(k, s, H, j)));
    kir_end(k);
    k->work = H;
  } else { /* row s: dW[s, j] += sum over b of dy[s, b, j], the b in order */
    int g = fuse_kc_vbuf(c, &kc, fuse_prog_grad(c, n->gparam), true), d = fuse_kc_node(c, &kc, n->in[0], false);
    int j = kir_tfor(k, kir_i(k, H));
    int acc = kir_let(k, kir_f(k, 0));
    int b = kir_for(k, kir_i(k, B));
    kir_set(k, acc, '+', kir_ld(k, d, idx2(k, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, B), 0), b, 0), H, j)));
    kir_end(k);
    kir_store(k, g, idx2(k, fuse_kc_gpos(c, &kc, r), H, j), '+', acc);
    kir_end(k);
    k->work = B * H;
  }
  fuse_kc_emit(c, &kc);
}

/* A norm's input x0 at `at`: in the kernel's first pass over the row, when the kernel computes x0
 * (xs its buffer, c->normed), computed and stored; otherwise its value (read back once stored). */
static int norm_x(FuseCtx *c, KCall *kc, int x0, int xs, int at, bool first) {
  if (xs < 0 || !first) return fuse_elem_val(c, kc, x0, at);
  int v = fuse_elem_expr(c, kc, x0, at);
  if (fuse_value_dtype(c, x0) == PP_BF16) v = kir_e(kc->k, K_RND, v, 0, 0); /* as stored, and read back */
  v = kir_let(kc->k, v);
  kir_store(kc->k, xs, at, '=', v);
  return v;
}

static int rope_table(FuseCtx *c, int id);
static void rope_angle(Kernel *k, int t, int s, int64_t half, int j, int *co, int *si);
static void rope_turn(Kernel *k, bool inv, int a, int b, int co, int si, int *lo, int *hi);

/* A norm's weight at column j as it scales: w, or w + offset (rmsnorm's offset; 0 for layernorm) */
static int norm_w(Kernel *k, const IrNode *n, int w, int j) {
  int v = kir_ld(k, w, j);
  return n->a.offset != 0 ? kir_e(k, K_ADD, v, kir_f(k, n->a.offset), 0) : v;
}

/* The norm's output at column j of row r: (x - mean) rstd w (+ b) */
static int norm_out(FuseCtx *c, KCall *kc, int r, int64_t D, int j, int mean, int rstd, int w, int bb) {
  Kernel *k = kc->k;
  int id = kc->node;
  int xh = kir_e(k, K_MUL, kir_e(k, K_SUB, fuse_elem_val(c, kc, N(c, id)->in[0], idx2(k, r, D, j)), mean, 0), rstd, 0);
  int out = kir_e(k, K_MUL, xh, norm_w(k, N(c, id), w, j), 0);
  return bb >= 0 ? kir_e(k, K_ADD, out, kir_ld(k, bb, j), 0) : out;
}

/* rmsnorm / layernorm forward: a row of D per block; saves rstd (and the mean) per row. */
void fuse_rows_norm(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  bool rms = n->op == OP_RMSNORM;
  int64_t D = last_dim(&n->shape), R = ir_shape_numel(&n->shape) / D;
  int rope = c->norm_rope[id];                       /* the rope this kernel turns the row by as it stores it, or -1 */
  int tab_vb = rope >= 0 ? rope_table(c, rope) : -1; /* made first: a kernel of its own */
  KCall kc = fuse_kc_block(rms ? "rmsnorm" : "layernorm", R, D, id);
  Kernel *k = kc.k;
  int y = fuse_kc_node(c, &kc, rope >= 0 ? rope : id, true), w = fuse_kc_node(c, &kc, n->in[1], false);
  int tab = rope >= 0 ? fuse_kc_vbuf(c, &kc, tab_vb, false) : -1;
  int st = fuse_kc_vbuf(c, &kc, c->p->node_aux[id], true);
  int bb = rms ? -1 : fuse_kc_node(c, &kc, n->in[2], false);
  int r = kir_row(k);
  int mean = kir_f(k, 0);
  /* x an add this kernel computes (c->normed): its first pass over the row stores it, each thread
   * the elements it reads again in the later passes (norm_x) */
  int x0 = n->in[0], xs = c->normed[x0] ? fuse_kc_node(c, &kc, x0, true) : -1;
  if (xs >= 0) k->bufs[xs].reread = true;
  if (!rms) {
    int j = kir_reduce(k, kir_i(k, D));
    int sum = kir_reduce_end(k, '+', norm_x(c, &kc, x0, xs, idx2(k, r, D, j), true));
    mean = kir_let(k, kir_e(k, K_DIV, sum, kir_f(k, (double)D), 0));
  }
  int j = kir_reduce(k, kir_i(k, D)); /* rmsnorm's first pass, layernorm's second */
  int xv = kir_let(k, kir_e(k, K_SUB, norm_x(c, &kc, x0, xs, idx2(k, r, D, j), rms), mean, 0));
  int ss = kir_reduce_end(k, '+', kir_e(k, K_MUL, xv, xv, 0));
  int rstd = kir_let(
      k, kir_e(k, K_RSQRT, kir_e(k, K_ADD, kir_e(k, K_DIV, ss, kir_f(k, (double)D), 0), kir_f(k, n->a.eps), 0), 0, 0));
  if (rms) kir_store(k, st, r, '=', rstd);
  else {
    kir_store(k, st, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), '=', mean);
    kir_store(k, st, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), kir_i(k, 1), 0), '=', rstd);
  }
  if (rope < 0) {
    j = kir_tfor(k, kir_i(k, D));
    kir_store(k, y, idx2(k, r, D, j), '=', norm_out(c, &kc, r, D, j, mean, rstd, w, bb));
  } else { /* the rope's pairs (j, j + D/2) of the row, turned by its position's angles */
    int64_t half = D / 2, BH = N(c, rope)->shape.d[1] * N(c, rope)->shape.d[2];
    j = kir_tfor(k, kir_i(k, half));
    int co, si, lo, hi;
    rope_angle(k, tab, kir_e(k, K_IDIV, r, kir_i(k, BH), 0), half, j, &co, &si);
    /* the pair as the norm would store it: a bf16 value rounded, as the rope read it back */
    bool bf = fuse_value_dtype(c, id) == PP_BF16;
    int a = norm_out(c, &kc, r, D, j, mean, rstd, w, bb);
    int b = norm_out(c, &kc, r, D, kir_e(k, K_IADD, j, kir_i(k, half), 0), mean, rstd, w, bb);
    a = kir_let(k, bf ? kir_e(k, K_RND, a, 0, 0) : a);
    b = kir_let(k, bf ? kir_e(k, K_RND, b, 0, 0) : b);
    rope_turn(k, false, a, b, co, si, &lo, &hi);
    kir_store(k, y, idx2(k, r, D, j), '=', lo);
    kir_store(k, y, idx2(k, r, D, kir_e(k, K_IADD, j, kir_i(k, half), 0)), '=', hi);
  }
  kir_end(k);
  k->work = 3 * D;
  fuse_kc_emit(c, &kc);
}

/* Column sums, dst[j] += the sum over rows i < R of term(i, j), for j < D, of one or two nodes
 * (a norm's weight gradient and its bias's read the same dy: one pass over it): each column one
 * chain of adds in row order. Over more than COL_PART rows the rows are cut into parts of COL_PART
 * (the last one shorter): a kernel with a block per part, its threads over the columns, writes
 * each part's chains into a scratch [parts, sums x D], and a second adds each column's parts in
 * part order. A column per thread over all the rows gave a GPU a few blocks of R loads each in
 * sequence (GPT-2's [8192, 768]: 3 blocks, 1.4 ms a call on an H200, docs/perf.md); the parts give
 * it R / COL_PART blocks. The order of each sum is the kernel IR's, the same on every device, and
 * the same whether it shares its pass or not. */
#define COL_PART 64
#define COL_SUMS 2 /* sums one pass makes at most */

typedef int (*ColTerm)(FuseCtx *c, KCall *kc, int id, int i, int j); /* the term of row i, column j */

typedef struct ColSum {
  int id;       /* the node */
  int dst;      /* the buffer its sums are added into */
  ColTerm term; /* its term */
  int work;     /* its term's work */
} ColSum;

/* The second kernel of col_sums: dst[j] += the parts' sums of column j in part order. */
static void col_fold(FuseCtx *c, const char *name, int64_t D, int64_t parts, int sums, const ColSum *s, int ns) {
  KCall kc = fuse_kc_flat(name, D, s[0].id);
  Kernel *k = kc.k;
  int pb = fuse_kc_vbuf(c, &kc, sums, false);
  for (int q = 0; q < ns; q++) {
    int g = fuse_kc_vbuf(c, &kc, s[q].dst, true);
    int acc = kir_var(k, kir_f(k, 0)); /* each its own */
    int part = kir_for(k, kir_i(k, parts));
    kir_set(k, acc, '+', kir_ld(k, pb, idx2(k, part, ns * D, kir_e(k, K_IADD, kir_i(k, q * D), kir_row(k), 0))));
    kir_end(k);
    kir_store(k, g, kir_row(k), '+', acc);
  }
  k->work = ns * parts;
  fuse_kc_emit(c, &kc);
}

static void col_sum_one_part(FuseCtx *c, const char *name, int64_t D, int64_t R, const ColSum *s, int ns) {
  KCall kc = fuse_kc_flat(name, D, s[0].id);
  Kernel *k = kc.k;
  int acc[COL_SUMS];
  for (int q = 0; q < ns; q++) acc[q] = kir_var(k, kir_f(k, 0)); /* each its own */
  int i = kir_for(k, kir_i(k, R));
  for (int q = 0; q < ns; q++) kir_set(k, acc[q], '+', s[q].term(c, &kc, s[q].id, i, kir_row(k)));
  kir_end(k);
  k->work = 0;
  for (int q = 0; q < ns; q++) {
    kir_store(k, fuse_kc_vbuf(c, &kc, s[q].dst, true), kir_row(k), '+', acc[q]);
    k->work += s[q].work * R;
  }
  fuse_kc_emit(c, &kc);
}

static void col_sums(FuseCtx *c, const char *name, int64_t D, int64_t R, const ColSum *s, int ns) {
  int64_t parts = (R + COL_PART - 1) / COL_PART;
  if (parts <= 1) { /* one chain a column, a column per thread */
    col_sum_one_part(c, name, D, R, s, ns);
    return;
  }
  int sums = fuse_prog_vbuf(c, "column_parts", BC_SCRATCH, (Shape){2, {parts, ns * D}}, PP_F32);
  KCall k1 = fuse_kc_block(name, parts, D, s[0].id);
  Kernel *k = k1.k;
  int pb = fuse_kc_vbuf(c, &k1, sums, true);
  int p = kir_row(k);
  int i0 = kir_let(k, kir_e(k, K_IMUL, p, kir_i(k, COL_PART), 0));
  int left = kir_let(k, kir_e(k, K_ISUB, kir_i(k, R), i0, 0));
  int rows = kir_let(k, kir_e(k, K_ISEL, kir_e(k, K_ILT, left, kir_i(k, COL_PART), 0), left, kir_i(k, COL_PART)));
  int j = kir_tfor(k, kir_i(k, D));
  int acc[COL_SUMS];
  for (int q = 0; q < ns; q++) acc[q] = kir_var(k, kir_f(k, 0)); /* each its own */
  int t = kir_for(k, rows);
  for (int q = 0; q < ns; q++) kir_set(k, acc[q], '+', s[q].term(c, &k1, s[q].id, kir_e(k, K_IADD, i0, t, 0), j));
  kir_end(k);
  k->work = 0;
  for (int q = 0; q < ns; q++) {
    kir_store(k, pb, idx2(k, p, ns * D, kir_e(k, K_IADD, kir_i(k, q * D), j, 0)), '=', acc[q]);
    k->work += s[q].work * COL_PART * D;
  }
  kir_end(k);
  fuse_kc_emit(c, &k1);
  col_fold(c, name, D, parts, sums, s, ns);
}

/* rmsnorm_dw / layernorm_dw's term: dy * xhat, xhat = (x - mean) * rstd (rms: mean 0) */
static int norm_dw_term(FuseCtx *c, KCall *kc, int id, int i, int j) {
  const IrNode *n = N(c, id);
  bool rms = n->op == OP_RMSNORM_DW;
  Kernel *k = kc->k;
  int64_t D = last_dim(&N(c, n->in[1])->shape);
  int x = fuse_kc_node(c, kc, n->in[1], false);
  int st = fuse_kc_vbuf(c, kc, c->p->node_aux[n->fwd], false);
  int mean = rms ? kir_f(k, 0) : kir_ld(k, st, kir_e(k, K_IMUL, i, kir_i(k, 2), 0));
  int rstd =
      rms ? kir_ld(k, st, i) : kir_ld(k, st, kir_e(k, K_IADD, kir_e(k, K_IMUL, i, kir_i(k, 2), 0), kir_i(k, 1), 0));
  int xh = kir_e(k, K_MUL, kir_e(k, K_SUB, kir_ld(k, x, idx2(k, i, D, j)), mean, 0), rstd, 0);
  return kir_e(k, K_MUL, fuse_elem_val(c, kc, n->in[0], idx2(k, i, D, j)), xh, 0);
}

/* bias_db's term: dy */
static int bias_db_term(FuseCtx *c, KCall *kc, int id, int i, int j) {
  const IrNode *n = N(c, id);
  return fuse_elem_val(c, kc, n->in[0], idx2(kc->k, i, last_dim(&N(c, n->in[0])->shape), j));
}

static bool is_col_sum(Op op) { return op == OP_BIAS_DB || op == OP_RMSNORM_DW || op == OP_LAYERNORM_DW; }

static ColSum col_sum_of(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  if (n->op == OP_BIAS_DB) return (ColSum){id, fuse_prog_grad(c, n->gparam), bias_db_term, 1};
  return (ColSum){id, fuse_prog_grad(c, n->gparam), norm_dw_term, 3};
}

/* A later column sum of the same block over the same dy (a norm's bias gradient beside its weight
 * gradient), which then shares id's pass and lowers to nothing of its own; or -1. */
static int col_partner(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  for (int j = id + 1; j < c->g->nnodes; j++) {
    const IrNode *m = N(c, j);
    if (is_col_sum(m->op) && !c->merged[j] && m->in[0] == n->in[0] && m->bwd == n->bwd && m->wgt == n->wgt) return j;
  }
  return -1;
}

/* rmsnorm_dw / layernorm_dw: dw[j] += sum_r dy * xhat; bias_db: db[j] += sum_r dy[r, j]; with a
 * partner over the same dy (col_partner), both in one pass. */
void fuse_rows_col_sum(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  const Shape *ds = &N(c, n->in[0])->shape;
  int64_t D = last_dim(ds), R = ir_shape_numel(ds) / D;
  ColSum s[COL_SUMS] = {col_sum_of(c, id)};
  int ns = 1, partner = col_partner(c, id);
  char name[48];
  snprintf(name, sizeof name, "%s", ir_ops[n->op].name + 1);
  if (partner >= 0) {
    s[ns++] = col_sum_of(c, partner);
    c->merged[partner] = true;
    snprintf(name + strlen(name), sizeof name - strlen(name), "_%s", ir_ops[N(c, partner)->op].name + 1);
  }
  col_sums(c, name, D, R, s, ns);
}

/* A norm's input gradient: dy, x, w and the saved statistics of row r, whose dy*xhat and dy the
 * row's part adds to its column sums in the same pass (sums >= 0: the scratch [parts, ns x D] of a
 * partner's col_fold, row p = r / COL_PART; else none). */
typedef struct NormDx {
  int dx, x, w, st;     /* the kernel's buffers */
  int sums, part, nsum; /* the parts' scratch buffer and this row's part, or -1; its sums (1 or 2) */
  int64_t D;
} NormDx;

static void norm_dx_row(FuseCtx *c, KCall *kc, int id, const NormDx *a, int r) {
  const IrNode *n = N(c, id);
  Kernel *k = kc->k;
  bool rms = n->op == OP_RMSNORM_DX;
  int64_t D = a->D;
  int rstd, mean = kir_f(k, 0);
  if (rms) rstd = kir_let(k, kir_ld(k, a->st, r));
  else {
    mean = kir_let(k, kir_ld(k, a->st, kir_e(k, K_IMUL, r, kir_i(k, 2), 0)));
    rstd = kir_let(k, kir_ld(k, a->st, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), kir_i(k, 1), 0)));
  }
  /* g = dy*w, xhat = (x - mean) * rstd; sums of g*xhat (and g) over the row */
  int j = kir_reduce(k, kir_i(k, D));
  int gv = kir_let(k, kir_e(k, K_MUL, fuse_elem_val(c, kc, n->in[0], idx2(k, r, D, j)), norm_w(k, n, a->w, j), 0));
  int xh = kir_e(k, K_MUL, kir_e(k, K_SUB, kir_ld(k, a->x, idx2(k, r, D, j)), mean, 0), rstd, 0);
  int sgx = kir_reduce_end(k, '+', kir_e(k, K_MUL, gv, xh, 0));
  int mgx = kir_let(k, kir_e(k, K_DIV, sgx, kir_f(k, (double)D), 0));
  int mg = kir_f(k, 0);
  if (!rms) {
    j = kir_reduce(k, kir_i(k, D));
    int sg = kir_reduce_end(k, '+',
                            kir_e(k, K_MUL, fuse_elem_val(c, kc, n->in[0], idx2(k, r, D, j)), kir_ld(k, a->w, j), 0));
    mg = kir_let(k, kir_e(k, K_DIV, sg, kir_f(k, (double)D), 0));
  }
  j = kir_tfor(k, kir_i(k, D));
  int dy = kir_let(k, fuse_elem_val(c, kc, n->in[0], idx2(k, r, D, j)));
  int xh2 = kir_let(k, kir_e(k, K_MUL, kir_e(k, K_SUB, kir_ld(k, a->x, idx2(k, r, D, j)), mean, 0), rstd, 0));
  /* rms: rstd (g - xhat mean(g xhat)); layer: rstd (g - mean(g) - xhat mean(g xhat)) */
  int inner = kir_e(k, K_SUB, kir_e(k, K_MUL, dy, norm_w(k, n, a->w, j), 0), kir_e(k, K_MUL, xh2, mgx, 0), 0);
  if (!rms) inner = kir_e(k, K_SUB, inner, mg, 0);
  kir_store(k, a->dx, idx2(k, r, D, j), c->acc[id] >= 0 ? '+' : '=', kir_e(k, K_MUL, rstd, inner, 0)); /* +: a sum */
  if (a->sums >= 0) { /* the part's column sums: norm_dw_term's dy * xhat, bias_db_term's dy */
    int at = idx2(k, a->part, a->nsum * D, j);
    kir_store(k, a->sums, at, '+', kir_e(k, K_MUL, dy, xh2, 0));
    if (a->nsum > 1) kir_store(k, a->sums, kir_e(k, K_IADD, at, kir_i(k, D), 0), '+', dy);
  }
  kir_end(k);
}

/* The norm's weight gradient over the same dy and x in the same block (whose pass it can share),
 * or -1. */
static int norm_dw_of(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  for (int j = id + 1; j < c->g->nnodes; j++) {
    const IrNode *m = N(c, j);
    if ((m->op == OP_RMSNORM_DW || m->op == OP_LAYERNORM_DW) && m->fwd == n->fwd && !c->merged[j] &&
        m->in[0] == n->in[0] && m->in[1] == n->in[1] && m->bwd == n->bwd && m->wgt == n->wgt)
      return j;
  }
  return -1;
}

/* rmsnorm_dx / layernorm_dx: a row of D per block, from dy, x, w and the saved statistics. With
 * its weight's gradient in the same block over more than COL_PART rows: a block a part of
 * COL_PART rows instead, which also keeps the part's column sums of dy*xhat (and of dy for the
 * bias's gradient, col_partner) in its row of a scratch, adding the rows in order as col_sums'
 * first kernel does; col_fold adds the parts. One pass over dy and x for dx, dw and db. */
void fuse_rows_norm_dx(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  bool rms = n->op == OP_RMSNORM_DX;
  int64_t D = last_dim(&n->shape), R = ir_shape_numel(&n->shape) / D, parts = (R + COL_PART - 1) / COL_PART;
  int dw = parts > 1 ? norm_dw_of(c, id) : -1;
  ColSum s[COL_SUMS];
  int ns = 0, sums = -1;
  char name[48];
  snprintf(name, sizeof name, "%s", rms ? "rmsnorm_dx" : "layernorm_dx");
  if (dw >= 0) {
    s[ns++] = col_sum_of(c, dw);
    c->merged[dw] = true;
    int db = col_partner(c, dw);
    if (db >= 0 && N(c, db)->op == OP_BIAS_DB) s[ns++] = col_sum_of(c, db), c->merged[db] = true;
    snprintf(name + strlen(name), sizeof name - strlen(name), "_dw%s", ns > 1 ? "_db" : "");
    sums = fuse_prog_vbuf(c, "column_parts", BC_SCRATCH, (Shape){2, {parts, ns * D}}, PP_F32);
  }
  KCall kc = fuse_kc_block(name, dw >= 0 ? parts : R, D, id);
  Kernel *k = kc.k;
  NormDx a = {.dx = fuse_kc_node(c, &kc, id, true),
              .x = fuse_kc_node(c, &kc, n->in[1], false),
              .w = fuse_kc_node(c, &kc, n->in[2], false),
              .st = fuse_kc_vbuf(c, &kc, c->p->node_aux[n->fwd], false),
              .sums = sums >= 0 ? fuse_kc_vbuf(c, &kc, sums, true) : -1,
              .part = kir_row(k),
              .nsum = ns,
              .D = D};
  if (dw < 0) {
    norm_dx_row(c, &kc, id, &a, kir_row(k));
    k->work = 4 * D;
  } else {
    int i0 = kir_let(k, kir_e(k, K_IMUL, a.part, kir_i(k, COL_PART), 0));
    int left = kir_let(k, kir_e(k, K_ISUB, kir_i(k, R), i0, 0));
    int rows = kir_let(k, kir_e(k, K_ISEL, kir_e(k, K_ILT, left, kir_i(k, COL_PART), 0), left, kir_i(k, COL_PART)));
    int j = kir_tfor(k, kir_i(k, D)); /* each column by the thread that adds to it */
    for (int q = 0; q < ns; q++)
      kir_store(k, a.sums, kir_e(k, K_IADD, idx2(k, a.part, ns * D, j), kir_i(k, q * D), 0), '=', kir_f(k, 0));
    kir_end(k);
    int t = kir_for(k, rows);
    norm_dx_row(c, &kc, id, &a, kir_e(k, K_IADD, i0, t, 0));
    kir_end(k);
    k->work = (4 + 2 * ns) * D * COL_PART;
  }
  fuse_kc_emit(c, &kc);
  if (dw >= 0) col_fold(c, name, D, parts, sums, s, ns);
}

/* Llama-3's scaling of one frequency inv, as transformers' _compute_llama3_parameters: with the
 * wavelength w = 2π/inv, w < original_max_pos/high_freq_factor keeps inv, w >
 * original_max_pos/low_freq_factor divides it by factor, and between them it is interpolated
 * smoothly, (1 − sm)·inv/factor + sm·inv with sm = (original_max_pos/w − low_freq_factor) /
 * (high_freq_factor − low_freq_factor). */
static int rope_llama3(Kernel *k, const IrNode *n, int inv_freq) {
  const IrAttrs *a = &n->a;
  double omax = (double)a->original_max_pos;
  int inv = kir_let(k, inv_freq);
  int wl = kir_let(k, kir_e(k, K_DIV, kir_f(k, 2 * 3.14159265358979323846), inv, 0));
  int sm = kir_let(k, kir_e(k, K_DIV,
                            kir_e(k, K_SUB, kir_e(k, K_DIV, kir_f(k, omax), wl, 0), kir_f(k, a->low_freq_factor), 0),
                            kir_f(k, a->high_freq_factor - a->low_freq_factor), 0));
  int lowered = kir_e(k, K_DIV, inv, kir_f(k, a->factor), 0);
  int smooth = kir_e(
      k, K_ADD, kir_e(k, K_DIV, kir_e(k, K_MUL, kir_e(k, K_SUB, kir_f(k, 1), sm, 0), inv, 0), kir_f(k, a->factor), 0),
      kir_e(k, K_MUL, sm, inv, 0), 0);
  int high = kir_e(k, K_FLT, wl, kir_f(k, omax / a->high_freq_factor), 0); /* a high frequency: kept */
  int low = kir_e(k, K_FLT, kir_f(k, omax / a->low_freq_factor), wl, 0);   /* a low one: divided by factor */
  return kir_e(k, K_SEL, high, inv, kir_e(k, K_SEL, low, lowered, smooth));
}

/* Whether rope nodes a and b turn by the same angles: the same positions, head size, theta and
 * scaling. */
static bool rope_same(const IrNode *a, const IrNode *b) {
  const IrAttrs *x = &a->a, *y = &b->a;
  return a->shape.d[0] == b->shape.d[0] && a->shape.d[3] == b->shape.d[3] && x->theta == y->theta &&
         x->llama3 == y->llama3 &&
         (!x->llama3 || (x->factor == y->factor && x->low_freq_factor == y->low_freq_factor &&
                         x->high_freq_factor == y->high_freq_factor && x->original_max_pos == y->original_max_pos));
}

/* The RoPE table of node id's kind: [S, D/2, 2], each position's and frequency's cosine and sine.
 * The first rope of a kind in the chunk (a forward one: forward nodes come first) computes it into
 * a slot buffer, once a micro-batch; every rope and rope_dx of that kind reads it. */
static int rope_table(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  for (int t = 0; t < c->nrope; t++)
    if (rope_same(N(c, c->rope_tab[t]), n)) return c->rope_vb[t];
  if (c->nrope == FUSE_MAX_ROPE) diag_fatal("internal: more than %d kinds of RoPE in one chunk", FUSE_MAX_ROPE);
  int64_t S = n->shape.d[0], D = n->shape.d[3], half = D / 2;
  int vb = fuse_prog_vbuf(c, "rope_table", BC_SLOT, (Shape){3, {S, half, 2}}, PP_F32);
  c->rope_tab[c->nrope] = id;
  c->rope_vb[c->nrope++] = vb;
  KCall kc = fuse_kc_block("rope_table", S, half, id);
  Kernel *k = kc.k;
  int y = fuse_kc_vbuf(c, &kc, vb, true);
  int s = kir_row(k), pos = fuse_kc_gpos(c, &kc, s); /* row s holds the rank's position s */
  int j = kir_tfor(k, kir_i(k, half));
  /* inv_freq = 1 / theta^(2j/D), angle = position * inv_freq, in float32 as the reference */
  int fr = kir_e(
      k, K_DIV, kir_f(k, 1),
      kir_e(k, K_POW, kir_f(k, n->a.theta),
            kir_e(k, K_DIV, kir_e(k, K_TOF, kir_e(k, K_IMUL, kir_i(k, 2), j, 0), 0, 0), kir_f(k, (double)D), 0), 0),
      0);
  if (n->a.llama3) fr = rope_llama3(k, n, fr);
  int ang = kir_let(k, kir_e(k, K_MUL, kir_e(k, K_TOF, pos, 0, 0), fr, 0));
  int at = kir_let(k, kir_e(k, K_IMUL, idx2(k, s, half, j), kir_i(k, 2), 0));
  kir_store(k, y, at, '=', kir_e(k, K_COS, ang, 0, 0));
  kir_store(k, y, kir_e(k, K_IADD, at, kir_i(k, 1), 0), '=', kir_e(k, K_SIN, ang, 0, 0));
  kir_end(k);
  k->work = 60 * half; /* a power and a sine and cosine per frequency */
  fuse_kc_emit(c, &kc);
  return vb;
}

/* Position s's angle for frequency j from table t ([S, D/2, 2]: the cosine, then the sine). */
static void rope_angle(Kernel *k, int t, int s, int64_t half, int j, int *co, int *si) {
  int at = kir_e(k, K_IMUL, idx2(k, s, half, j), kir_i(k, 2), 0);
  *co = kir_let(k, kir_ld(k, t, at));
  *si = kir_let(k, kir_ld(k, t, kir_e(k, K_IADD, at, kir_i(k, 1), 0)));
}

/* Rotate-half RoPE of the pair (a, b) = (x[j], x[j + D/2]) by the angle (co, si), or its inverse
 * (the gradient): the turned pair in *lo (element j) and *hi (element j + D/2). */
static void rope_turn(Kernel *k, bool inv, int a, int b, int co, int si, int *lo, int *hi) {
  int ac = kir_e(k, K_MUL, a, co, 0), bs = kir_e(k, K_MUL, b, si, 0);
  int bc = kir_e(k, K_MUL, b, co, 0), as = kir_e(k, K_MUL, a, si, 0);
  *lo = kir_e(k, inv ? K_ADD : K_SUB, ac, bs, 0);
  *hi = kir_e(k, inv ? K_SUB : K_ADD, bc, as, 0);
}

/* rotate-half RoPE at position s, or its inverse (the gradient), from the table */
void fuse_rows_rope(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  bool inv = n->op == OP_ROPE_DX;
  const Shape *sh = &n->shape;
  int64_t S = sh->d[0], B = sh->d[1], H = sh->d[2], D = sh->d[3], half = D / 2;
  int tab = rope_table(c, id);
  /* one row per position s: the angle's cosine and sine read once per (s, j) and used for all B*H
   * heads at that position */
  KCall kc = fuse_kc_block(inv ? "rope_dx" : "rope", S, half, id);
  Kernel *k = kc.k;
  int y = fuse_kc_node(c, &kc, id, true), t = fuse_kc_vbuf(c, &kc, tab, false);
  int s = kir_row(k);
  int j = kir_tfor(k, kir_i(k, half));
  int co, si;
  rope_angle(k, t, s, half, j, &co, &si);
  int bh = kir_for(k, kir_i(k, B * H));
  int row = kir_e(k, K_IADD, kir_e(k, K_IMUL, s, kir_i(k, B * H), 0), bh, 0);
  int i0 = kir_let(k, idx2(k, row, D, j)), i1 = kir_let(k, kir_e(k, K_IADD, i0, kir_i(k, half), 0));
  int a = kir_let(k, fuse_elem_val(c, &kc, n->in[0], i0)), b = kir_let(k, fuse_elem_val(c, &kc, n->in[0], i1));
  int lo, hi;
  rope_turn(k, inv, a, b, co, si, &lo, &hi);
  kir_store(k, y, i0, '=', lo);
  kir_store(k, y, i1, '=', hi);
  kir_end(k);
  kir_end(k);
  k->work = half * (2 + 6 * B * H);
  fuse_kc_emit(c, &kc);
}

#define CHUNK_GEMMS_MAX 8 /* parts of a product its chunks get each from a GEMM of its own, at most */

/* The chunks of a product that nothing else reads, made by the GEMM just emitted (one product,
 * C dense): a GEMM a part instead, over its columns of the weight, into the part's buffer, and its
 * bias added as that GEMM's epilogue (epi:bias), so that no kernel copies the parts out (q, k and
 * v of a fused projection). False, with nothing emitted, where that does not apply. */
static bool chunk_by_gemms(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  int p = n->in[0], P = (int)n->a.parts, part[CHUNK_GEMMS_MAX];
  Block *b = c->blk;
  const Instr *g = b->n ? &b->ins[b->n - 1] : NULL;
  int64_t w = last_dim(&n->shape);
  if (!g || g->kind != I_GEMM || g->node != p || !pp_epi_gemm_ok(g->batch, g->beta, g->ldc, g->n, g->tri) ||
      g->n != P * w || g->op[2].add != 0 || P > CHUNK_GEMMS_MAX || c->saved[p] || c->nusers[p] != P)
    return false;
  for (int i = 0; i < P; i++) part[i] = -1;
  for (int c2 = id; c2 < c->g->nnodes; c2++) {
    const IrNode *m = N(c, c2);
    if (m->op == OP_CHUNK && m->in[0] == p && !c->merged[c2] && !c->inlined[c2] && m->a.parts == P &&
        m->bwd == n->bwd && m->wgt == n->wgt && part[m->a.index] < 0 &&
        c->p->vb[fuse_prog_buf(c, c2)].dtype == c->p->vb[g->op[2].vb].dtype)
      part[m->a.index] = c2;
  }
  for (int i = 0; i < P; i++)
    if (part[i] < 0) return false;
  Instr whole = *g;
  b->n--; /* the product's GEMM, made again a part at a time */
  int64_t eb = pp_dtype_bytes(c->p->vb[whole.op[1].vb].dtype), R = whole.m;
  const IrNode *pn = N(c, p);
  int bias = pn->nin == 3 ? fuse_prog_buf(c, pn->in[2]) : -1;
  for (int i = 0; i < P; i++) {
    Instr *in = fuse_prog_instr(c, I_GEMM, p);
    int node = in->node;
    *in = whole;
    in->node = node;
    in->n = w, in->ldc = w;
    in->op[1].add += (whole.tb == 'T' ? i * w * whole.ldb : i * w) * eb; /* part i's columns of op(B) */
    in->op[2] = fuse_prog_ob(fuse_prog_buf(c, part[i]), 0);
    if (bias >= 0) fuse_gemm_bias(c, part[i], bias, i * w * pp_dtype_bytes(c->p->vb[bias].dtype), R, w);
    if (i) c->merged[part[i]] = true;
  }
  return true;
}

/* chunk: part I of P of the last dimension; the later chunks of the same value in the same block
 * (q, k and v of one product) are written by the same kernel, which reads each row once, and
 * lower to nothing of their own. */
void fuse_rows_chunk(FuseCtx *c, int id) {
  if (chunk_by_gemms(c, id)) return;
  const IrNode *n = N(c, id);
  int64_t w = last_dim(&n->shape), R = ir_shape_numel(&n->shape) / w, P = n->a.parts;
  KCall kc = fuse_kc_block("chunk", R, w, id);
  Kernel *k = kc.k;
  int r = kir_row(k);
  k->work = 0;
  for (int c2 = id; c2 < c->g->nnodes; c2++) {
    const IrNode *m = N(c, c2);
    if (c2 != id && (m->op != OP_CHUNK || c->merged[c2] || c->inlined[c2] || m->in[0] != n->in[0] || m->a.parts != P ||
                     m->bwd != n->bwd || m->wgt != n->wgt))
      continue;
    if (c2 != id) c->merged[c2] = true;
    int y = fuse_kc_node(c, &kc, c2, true);
    int j = kir_tfor(k, kir_i(k, w));
    int src =
        kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, P * w), 0), kir_e(k, K_IADD, kir_i(k, m->a.index * w), j, 0), 0);
    kir_store(k, y, idx2(k, r, w, j), '=', fuse_elem_val(c, &kc, n->in[0], src));
    kir_end(k);
    k->work += w;
  }
  fuse_kc_emit(c, &kc);
}

void fuse_rows_concat(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  int64_t P = n->a.parts, w = last_dim(&n->shape) / P, R = ir_shape_numel(&n->shape) / (w * P);
  KCall kc = fuse_kc_block("concat", R, w, id);
  Kernel *k = kc.k;
  int y = fuse_kc_node(c, &kc, id, true);
  int r = kir_row(k);
  for (int part = 0; part < P; part++) {
    int j = kir_tfor(k, kir_i(k, w));
    int dst = kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, P * w), 0), kir_e(k, K_IADD, kir_i(k, part * w), j, 0), 0);
    kir_store(k, y, dst, '=', n->in[part] < 0 ? kir_f(k, 0) : fuse_elem_val(c, &kc, n->in[part], idx2(k, r, w, j)));
    kir_end(k);
  }
  k->work = w * P;
  fuse_kc_emit(c, &kc);
}

void fuse_rows_transpose(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  const Shape *out = &n->shape; /* [d1, d0, F...] from [d0, d1, F...] */
  int64_t A = out->d[0], Bd = out->d[1], F = ir_shape_numel(out) / (A * Bd);
  KCall kc = fuse_kc_block("transpose_sb", A * Bd, F, id);
  Kernel *k = kc.k;
  int y = fuse_kc_node(c, &kc, id, true), x = fuse_kc_node(c, &kc, n->in[0], false);
  int r = kir_row(k);
  int a = kir_e(k, K_IDIV, r, kir_i(k, Bd), 0), b = kir_e(k, K_IMOD, r, kir_i(k, Bd), 0);
  int src = kir_let(k, kir_e(k, K_IADD, kir_e(k, K_IMUL, b, kir_i(k, A), 0), a, 0));
  int j = kir_tfor(k, kir_i(k, F));
  kir_store(k, y, idx2(k, r, F, j), '=', kir_ld(k, x, idx2(k, src, F, j)));
  kir_end(k);
  k->work = F;
  fuse_kc_emit(c, &kc);
}

/* `logits OPERAND B S VLOCAL VSTART`: the logits [B,S,VLOCAL] (node's value), columns [VSTART,
 * VSTART + VLOCAL) of the vocabulary (those at or past it padding): a generation program's output
 * (.logits, id), or in a training program the ones its loss (id) reads. id's a.vlocal says whether
 * they are a vocabulary shard (tp_shard.c). */
void fuse_rows_logits(FuseCtx *c, int id, int node) {
  const Shape *ls = &N(c, node)->shape;
  int64_t VL = N(c, id)->a.vlocal;
  Instr *in = fuse_prog_instr(c, I_LOGITS, id);
  in->op[in->nop++] = fuse_prog_ob(fuse_prog_buf(c, node), 0);
  for (int d = 0; d < 3; d++) in->op[in->nop++] = (Operand){.kind = 'i', .i = ls->d[d]};
  in->op[in->nop++] = VL ? fuse_prog_vstart(VL) : (Operand){.kind = 'i', .i = 0};
}

/* The gradient seed's value: dloss/dloss of a micro-batch's loss, 1 / micro-batches (the step's
 * loss is their mean). The `seed` instruction writes it; the fused cross-entropy bakes it in. */
double fuse_rows_seed(const FuseCtx *c) { return 1.0 / (double)c->g->cfg.microbatches; }

/* What the mean over a micro-batch's R rows of labels divides by: R, times cp under context
 * parallelism (each cp rank holds R of the micro-batch's R·cp tokens; the step's loss sums the cp
 * ranks' parts). */
static double mean_rows(const FuseCtx *c, int64_t R) {
  return (double)R * (double)(c->g->cfg.cp > 1 ? c->g->cfg.cp : 1);
}

/* The weight of one row's loss in the micro-batch's loss with ignore_index (1/rows without): the
 * runtime scalar tokscale = M / (the labels the step counts, over every micro-batch and replica),
 * so that the step's loss, the mean of the micro-batches' losses, is the mean over the counted
 * tokens. */
static int row_weight(Kernel *k, KCall *kc) {
  return kir_let(k, fuse_kc_scalar(kc, (Operand){.kind = 's', .s = "tokscale"}));
}

/* v, or 0 for a row whose label t is the ignore_index */
static int counted(Kernel *k, const IrNode *ce, int t, int v) {
  if (!ce->a.masked) return v;
  return kir_e(k, K_SEL, kir_e(k, K_IEQ, t, kir_i(k, ce->a.ignore_index), 0), kir_f(k, 0), v);
}

/* a label usable as a column index: an ignored row's reads column 0 (its result is discarded) */
static int label_col(Kernel *k, const IrNode *ce, int t) {
  if (!ce->a.masked) return t;
  return kir_e(k, K_ISEL, kir_e(k, K_IEQ, t, kir_i(k, ce->a.ignore_index), 0), kir_i(k, 0), t);
}

/* The cross-entropy's backward node when the forward's kernel writes the gradient over the logits
 * in the same pass (llm.c's fused classifier): its CE_DX, whose incoming gradient is the seed, and
 * the logits read by nothing else (a generation pass stops at the `logits` instruction, before the
 * kernel); -1 otherwise. Not for vocabulary-parallel logits, whose log-sum-exp needs the group's
 * sums first. */
int fuse_rows_ce_fused(const FuseCtx *c, int ce) {
  const IrNode *n = N(c, ce);
  if (n->op != OP_CROSS_ENTROPY || n->a.vlocal || c->nusers[n->in[0]] != 2) return -1;
  for (int i = ce + 1; i < c->g->nnodes; i++) {
    const IrNode *d = N(c, i);
    if (d->op == OP_CE_DX && d->fwd == ce && d->in[0] == n->in[0]) return N(c, d->in[2])->op == OP_SEED ? i : -1;
  }
  return -1;
}

/* cross-entropy forward: per row (a block each) the log-sum-exp (saved) and the loss; then the
 * mean over rows. Fused (fuse_rows_ce_fused): the same kernel then writes the row's gradient over
 * its logits, so the [rows, V] logits are read from memory once and the backward has no kernel.
 * Three passes over the row there: the maximum, exp(x - max) summed and kept in place, the gradient.
 * With vocab-parallel logits each rank sees its columns: the row maximum, the sum of exponentials
 * and the target logit are reduced over the TP group between three kernels; [B,S,V] is never
 * gathered. Padded columns (past the real vocabulary) do not count. */
void fuse_rows_ce(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  fuse_rows_logits(c, id, n->in[0]);
  const Shape *ls = &N(c, n->in[0])->shape;
  int64_t V = ls->d[2], R = ls->d[0] * ls->d[1], VL = n->a.vlocal;
  int rowloss = fuse_prog_vbuf(c, "rowloss", BC_SCRATCH, (Shape){1, {R}}, PP_F32);
  if (!VL) {
    /* the real vocabulary's columns: the others are padding (vocab_pad.c), out of the maximum and
     * the sums, their gradient 0 */
    int64_t VR = n->a.vtotal && n->a.vtotal < V ? n->a.vtotal : V;
    bool fused = fuse_rows_ce_fused(c, id) >= 0;
    KCall kc = fuse_kc_block("cross_entropy", R, V, id);
    Kernel *k = kc.k;
    int lg = fuse_kc_node(c, &kc, n->in[0], fused), lab = fuse_kc_node(c, &kc, n->in[1], false);
    int st = fuse_kc_vbuf(c, &kc, c->p->node_aux[id], true), rl = fuse_kc_vbuf(c, &kc, rowloss, true);
    int r = kir_row(k);
    int t = kir_let(k, kir_ld(k, lab, r));
    /* the target's logit, read before the maximum's reduction: fused, that reduction's barrier then
     * orders every thread's read of it before any thread writes over the row */
    int tl = kir_let(k, kir_ld(k, lg, idx2(k, r, V, label_col(k, n, t))));
    int j = kir_reduce(k, kir_i(k, VR));
    int m = kir_reduce_end(k, 'M', kir_ld(k, lg, idx2(k, r, V, j)));
    if (!fused) {
      j = kir_reduce(k, kir_i(k, VR));
      kir_reduce_fetch(k, lg, V); /* the next row's logits from memory while this one's exponentials run */
      int se = kir_reduce_end(k, '+', kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, lg, idx2(k, r, V, j)), m, 0), 0, 0));
      int lse = kir_let(k, kir_e(k, K_ADD, m, kir_e(k, K_LOG, se, 0, 0), 0));
      kir_store(k, st, r, '=', lse);
      kir_store(k, rl, r, '=', counted(k, n, t, kir_e(k, K_SUB, lse, tl, 0)));
    } else {
      /* e = exp(x - max) kept in place of x: one exponential an element (f32 logits; bf16 ones
       * would round it, which the unfused gradient does not: it is computed again below) */
      bool keep = c->p->vb[fuse_prog_buf(c, n->in[0])].dtype == PP_F32;
      j = kir_reduce(k, kir_i(k, VR));
      kir_reduce_fetch(k, lg, V); /* the next row's logits from memory while this one's exponentials run */
      int at = idx2(k, r, V, j);
      int e = kir_let(k, kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, lg, at), m, 0), 0, 0));
      if (keep) kir_store(k, lg, at, '=', e);
      int se = kir_reduce_end(k, '+', e);
      int lse = kir_let(k, kir_e(k, K_ADD, m, kir_e(k, K_LOG, se, 0, 0), 0));
      kir_store(k, st, r, '=', lse);
      kir_store(k, rl, r, '=', counted(k, n, t, kir_e(k, K_SUB, lse, tl, 0)));
      /* the gradient (e / sum - onehot) * seed * the row's weight (1/rows: seed / rows) */
      int scale = n->a.masked
                      ? kir_let(k, kir_e(k, K_MUL, kir_f(k, (float)fuse_rows_seed(c)), row_weight(k, &kc), 0))
                      : kir_let(k, kir_e(k, K_DIV, kir_f(k, (float)fuse_rows_seed(c)), kir_f(k, mean_rows(c, R)), 0));
      int inv = kir_let(k, kir_e(k, K_DIV, kir_f(k, 1), se, 0));
      j = kir_tfor(k, kir_i(k, VR));
      at = idx2(k, r, V, j);
      int ex = keep ? kir_ld(k, lg, at) : kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, lg, at), m, 0), 0, 0);
      kir_store(k, lg, at, '=', counted(k, n, t, kir_e(k, K_MUL, kir_e(k, K_MUL, ex, inv, 0), scale, 0)));
      kir_end(k);
      if (VR < V) { /* the padding's gradient */
        j = kir_tfor(k, kir_i(k, V - VR));
        kir_store(k, lg, idx2(k, r, V, kir_e(k, K_IADD, kir_i(k, VR), j, 0)), '=', kir_f(k, 0));
        kir_end(k);
      }
      /* the target's element, e / sum - 1, written again after the loop (and a barrier: on a GPU
       * after every thread's stores) rather than a compare and a select in it (a tenth of the
       * kernel's time on a CPU); its e is the loop's, the same exponential of the same logit */
      kir_sync(k);
      int et = kir_e(k, K_EXP, kir_e(k, K_SUB, tl, m, 0), 0, 0);
      kir_store(
          k, lg, idx2(k, r, V, label_col(k, n, t)), '=',
          counted(k, n, t, kir_e(k, K_MUL, kir_e(k, K_SUB, kir_e(k, K_MUL, et, inv, 0), kir_f(k, 1), 0), scale, 0)));
    }
    k->work = (fused ? 5 : 3) * V;
    fuse_kc_emit(c, &kc);
  } else {
    int mx = fuse_prog_vbuf(c, "ce_max", BC_SCRATCH, (Shape){1, {R}}, PP_F32);
    int sums = fuse_prog_vbuf(c, "ce_sums", BC_SCRATCH, (Shape){2, {R, 2}}, PP_F32);
    /* 1: my columns' maximum, then the maximum over the group */
    KCall k1 = fuse_kc_block("ce_vp_max", R, VL, id);
    Kernel *k = k1.k;
    int lg = fuse_kc_node(c, &k1, n->in[0], false), m = fuse_kc_vbuf(c, &k1, mx, true);
    int v0 = fuse_kc_iscalar(&k1, fuse_prog_vstart(VL));
    int r = kir_row(k);
    int j = kir_reduce(k, kir_i(k, VL));
    int real = kir_e(k, K_ILT, kir_e(k, K_IADD, v0, j, 0), kir_i(k, n->a.vtotal), 0);
    int acc = kir_reduce_end(k, 'M', kir_e(k, K_SEL, real, kir_ld(k, lg, idx2(k, r, VL, j)), kir_f(k, -3.0e38)));
    kir_store(k, m, r, '=', acc);
    k->work = VL;
    fuse_kc_emit(c, &k1);
    fuse_prog_allreduce(c, id, mx, R * 4, "tp", "max",
                        "vocab-parallel cross-entropy: the row maximum over all columns");
    /* 2: my columns' sum of exponentials and, if the label is mine, its logit; then summed */
    KCall k2 = fuse_kc_block("ce_vp_sums", R, VL, id);
    k = k2.k;
    lg = fuse_kc_node(c, &k2, n->in[0], false);
    int lab = fuse_kc_node(c, &k2, n->in[1], false);
    m = fuse_kc_vbuf(c, &k2, mx, false);
    int sm = fuse_kc_vbuf(c, &k2, sums, true);
    v0 = fuse_kc_iscalar(&k2, fuse_prog_vstart(VL));
    r = kir_row(k);
    int mr = kir_let(k, kir_ld(k, m, r));
    j = kir_reduce(k, kir_i(k, VL));
    kir_reduce_fetch(k, lg, VL);
    real = kir_e(k, K_ILT, kir_e(k, K_IADD, v0, j, 0), kir_i(k, n->a.vtotal), 0);
    int se = kir_reduce_end(k, '+',
                            kir_e(k, K_SEL, real,
                                  kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, lg, idx2(k, r, VL, j)), mr, 0), 0, 0),
                                  kir_f(k, 0)));
    int loc = kir_let(k, kir_e(k, K_ISUB, kir_ld(k, lab, r), v0, 0));
    int mine =
        kir_let(k, kir_e(k, K_IAND, kir_e(k, K_ILT, kir_i(k, -1), loc, 0), kir_e(k, K_ILT, loc, kir_i(k, VL), 0), 0));
    kir_store(k, sm, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), '=', se);
    kir_store(
        k, sm, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), kir_i(k, 1), 0), '=',
        kir_e(k, K_SEL, mine, kir_ld(k, lg, idx2(k, r, VL, kir_e(k, K_ISEL, mine, loc, kir_i(k, 0)))), kir_f(k, 0)));
    k->work = 2 * VL;
    fuse_kc_emit(c, &k2);
    fuse_prog_allreduce(c, id, sums, R * 8, "tp", "sum",
                        "vocab-parallel cross-entropy: sums of exponentials and the target logit");
    /* 3: log-sum-exp (saved for the backward) and the row's loss, a row per thread */
    KCall k3 = fuse_kc_flat("ce_vp_loss", R, id);
    k = k3.k;
    m = fuse_kc_vbuf(c, &k3, mx, false);
    sm = fuse_kc_vbuf(c, &k3, sums, false);
    int st = fuse_kc_vbuf(c, &k3, c->p->node_aux[id], true), rl = fuse_kc_vbuf(c, &k3, rowloss, true);
    lab = n->a.masked ? fuse_kc_node(c, &k3, n->in[1], false) : -1;
    r = kir_row(k);
    int lse = kir_let(k, kir_e(k, K_ADD, kir_ld(k, m, r),
                               kir_e(k, K_LOG, kir_ld(k, sm, kir_e(k, K_IMUL, r, kir_i(k, 2), 0)), 0, 0), 0));
    kir_store(k, st, r, '=', lse);
    int loss =
        kir_e(k, K_SUB, lse, kir_ld(k, sm, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), kir_i(k, 1), 0)), 0);
    kir_store(k, rl, r, '=', n->a.masked ? counted(k, n, kir_ld(k, lab, r), loss) : loss);
    fuse_kc_emit(c, &k3);
  }
  /* the mean over the rows: one block */
  KCall mc = fuse_kc_block("mean", 1, R, id);
  Kernel *mk = mc.k;
  int out = fuse_kc_node(c, &mc, id, true), src = fuse_kc_vbuf(c, &mc, rowloss, false);
  int i = kir_reduce(mk, kir_i(mk, R));
  int acc = kir_reduce_end(mk, '+', kir_ld(mk, src, i));
  if (n->a.masked) kir_store(mk, out, kir_i(mk, 0), '=', kir_e(mk, K_MUL, acc, row_weight(mk, &mc), 0));
  else kir_store(mk, out, kir_i(mk, 0), '=', kir_e(mk, K_DIV, acc, kir_f(mk, mean_rows(c, R)), 0));
  mk->work = R;
  fuse_kc_emit(c, &mc);
  Instr *in = fuse_prog_instr(c, I_LOSS, id);
  in->op[in->nop++] = fuse_prog_ob(fuse_prog_buf(c, id), 0);
}

/* dlogits = (softmax - onehot) * dloss / rows; nothing when the forward's kernel wrote it */
void fuse_rows_ce_dx(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  if (fuse_rows_ce_fused(c, n->fwd) == id) return;
  const Shape *ls = &n->shape;
  int64_t V = ls->d[2], R = ls->d[0] * ls->d[1];
  KCall kc = fuse_kc_block("cross_entropy_dx", R, V, id);
  Kernel *k = kc.k;
  int dl = fuse_kc_node(c, &kc, id, true), lg = fuse_kc_node(c, &kc, n->in[0], false),
      lab = fuse_kc_node(c, &kc, n->in[1], false), seed = fuse_kc_node(c, &kc, n->in[2], false),
      st = fuse_kc_vbuf(c, &kc, c->p->node_aux[n->fwd], false);
  const IrNode *ce = N(c, n->fwd);
  int r = kir_row(k);
  int w = ce->a.masked ? row_weight(k, &kc) : -1;
  int scale = ce->a.masked ? kir_let(k, kir_e(k, K_MUL, kir_ld(k, seed, kir_i(k, 0)), w, 0))
                           : kir_let(k, kir_e(k, K_DIV, kir_ld(k, seed, kir_i(k, 0)), kir_f(k, mean_rows(c, R)), 0));
  int lse = kir_let(k, kir_ld(k, st, r));
  int t = kir_let(k, kir_ld(k, lab, r));
  /* vocab-parallel: column j is global column v0 + j; padded columns (vocab_pad.c) get no gradient */
  int v0 = n->a.vlocal ? fuse_kc_iscalar(&kc, fuse_prog_vstart(n->a.vlocal)) : kir_i(k, 0);
  int j = kir_tfor(k, kir_i(k, V));
  int gj = kir_let(k, kir_e(k, K_IADD, v0, j, 0));
  int p = kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, lg, idx2(k, r, V, j)), lse, 0), 0, 0);
  int oh = kir_e(k, K_SEL, kir_e(k, K_IEQ, gj, t, 0), kir_f(k, 1), kir_f(k, 0));
  int g = kir_e(k, K_MUL, kir_e(k, K_SUB, p, oh, 0), scale, 0);
  if (n->a.vtotal) g = kir_e(k, K_SEL, kir_e(k, K_ILT, gj, kir_i(k, n->a.vtotal), 0), g, kir_f(k, 0));
  kir_store(k, dl, idx2(k, r, V, j), '=', counted(k, ce, t, g));
  kir_end(k);
  k->work = 3 * V;
  fuse_kc_emit(c, &kc);
}

/* A collective's f32 sum (buffer vb) rounded once into node id's bf16 buffer. */
void fuse_rows_round(FuseCtx *c, int id, int vb) {
  KCall kc = fuse_kc_flat("round_sum", ir_shape_numel(&N(c, id)->shape), id);
  int r = kir_row(kc.k);
  int from = fuse_kc_vbuf(c, &kc, vb, false);
  kir_store(kc.k, fuse_kc_node(c, &kc, id, true), r, '=', kir_ld(kc.k, from, r));
  kc.k->work = 1;
  fuse_kc_emit(c, &kc);
}

/* .add_bias: x + b on every row, the bias added after a row-parallel linear's reduction */
void fuse_rows_add_bias(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  int64_t Nn = last_dim(&n->shape), R = ir_shape_numel(&n->shape) / Nn;
  KCall kc = fuse_kc_flat("add_bias", R * Nn, id); /* element r takes bias r mod N */
  Kernel *k = kc.k;
  int y = fuse_kc_node(c, &kc, id, true), b = fuse_kc_node(c, &kc, n->in[1], false);
  int r = kir_row(k);
  kir_store(k, y, r, '=',
            kir_e(k, K_ADD, fuse_elem_val(c, &kc, n->in[0], r), kir_ld(k, b, kir_e(k, K_IMOD, r, kir_i(k, Nn), 0)), 0));
  fuse_kc_emit(c, &kc);
}
