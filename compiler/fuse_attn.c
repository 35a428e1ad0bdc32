/* fuse_attn.c — attention fused (FlashAttention-2's algorithm), the default lowering of
 * `attention`: no S x S scores anywhere. Flat kernels, each thread a tile of one (batch, head):
 *
 *   attention_fwd    BQ query rows: over the key tiles in order, the scores of the tile, an online
 *                    softmax (running maximum and sum) and O accumulated in the thread's private
 *                    arrays; O and each row's log-sum-exp (lse) written at the end.
 *   attention_dq     BQ query rows: first each row's delta = rowsum(dO * O), which the backward's
 *                    softmax gradient needs (written for attention_dkv); then over the key tiles in
 *                    order, the probabilities recomputed from Q, K and the saved lse, dP and dS,
 *                    dQ += dS K.
 *   attention_dkv    BK keys of one kv head, owned: over the R query heads of its group and every
 *                    query that sees the tile, in order, P and dS again, dV += P^T dO and
 *                    dK += dS^T Q in private arrays; written once.
 *
 * Every sum runs in one thread in a fixed order (the tile sizes fix it), so a run gives the same
 * bits every time; no atomics, no S x S buffer: the scratch is the lse and delta, a float a row.
 * A thread copies each tile into its private arrays (kir_array), the tile it keeps for the whole
 * loop transposed (the forward's and dQ's queries, dK and dV's keys), and keeps a few rows' sums
 * in temporaries, one chain each: in C the loops around those chains run along the transposed
 * tile's rows or the head dimension and GCC vectorises them. The forward and dQ hold a tile's
 * scores key-major (a key's scores for the BQ rows side by side), so that each row's statistics
 * (the maximum, the rescaling, lse and delta) are vectors over the rows.
 * Causal: key tiles wholly after a query tile's last row are not visited (the forward, dQ) and
 * queries wholly before a key tile are not (dK, dV); the tile across the diagonal is masked per
 * element. A sliding window (window W: a query sees its own position and the W - 1 before it)
 * skips the key tiles wholly before a query tile's first row's window (the forward, dQ) and the
 * queries wholly past a key tile's last key's window (dK, dV), and masks the rest per element.
 * Context parallelism shifts the diagonal by the rank's first position (fuse_kc_gpos):
 * the keys are the whole sequence's, gathered as for the GEMM path. Grouped-query heads index
 * their kv head (h / R), never a copy. */
#include "ppc.h"

static const IrNode *N(const FuseCtx *c, int id) { return &c->g->nodes[id]; }

/* The tiles: query rows a thread (forward, dQ) and keys a tile. A key tile of 16 is one AVX-512
 * vector of scores; 16 query rows use each key tile the thread copies. */
#define ATT_BQ 16
#define ATT_BK 16
_Static_assert(ATT_BQ == ATT_BK, "a tile of queries and one of keys are transposed alike (tile_tr)");
/* query rows a key tile's thread takes at a time: the chains of its sums over them */
#define ATT_G 8
/* score rows summed at a time (scores): ATT_RB chains, each a vector of ATT_BK keys' sums in C */
#define ATT_RB 8

/* A masked score: far below any real one, so that it never is a row's maximum and its
 * exponential after the maximum is subtracted is 0 (ppk_exp is 0 below -104). */
#define ATT_MASKED -1e30

typedef struct Att {
  FuseCtx *c;
  KCall kc;
  Kernel *k;
  int64_t SQ, SK, B, HQ, HK, D, R;
  bool causal;
  int64_t W;  /* the sliding window, 0 where it has none (or covers the sequence) */
  double cap; /* the scores' soft cap, cap tanh(s / cap) (Gemma 2's); 0: none */
  double scale;
  int node; /* the node the kernels' instructions implement */
  int off;  /* context parallelism: the rank's first position (a temporary); -1 without */
} Att;

static int I(Att *a, int64_t v) { return kir_i(a->k, v); }
static int add(Att *a, int x, int y) { return kir_e(a->k, K_IADD, x, y, 0); }
static int sub(Att *a, int x, int y) { return kir_e(a->k, K_ISUB, x, y, 0); }
static int mul(Att *a, int x, int y) { return kir_e(a->k, K_IMUL, x, y, 0); }
static int lt(Att *a, int x, int y) { return kir_e(a->k, K_ILT, x, y, 0); }
static int imin(Att *a, int x, int y) { return kir_e(a->k, K_ISEL, lt(a, x, y), x, y); }
static int imax(Att *a, int x, int y) { return kir_e(a->k, K_ISEL, lt(a, x, y), y, x); }
static int fadd(Att *a, int x, int y) { return kir_e(a->k, K_ADD, x, y, 0); }
static int fsub(Att *a, int x, int y) { return kir_e(a->k, K_SUB, x, y, 0); }
static int fmul(Att *a, int x, int y) { return kir_e(a->k, K_MUL, x, y, 0); }
static int let(Att *a, int x) { return kir_let(a->k, x); }

static int64_t q_tiles(const Att *a) { return (a->SQ + ATT_BQ - 1) / ATT_BQ; }
static int64_t k_tiles(const Att *a) { return (a->SK + ATT_BK - 1) / ATT_BK; }

/* x*n + y, an index */
static int mad(Att *a, int x, int64_t n, int y) { return add(a, mul(a, x, I(a, n)), y); }

/* Where a gradient is stored: rows (position, batch) of W values from byte add of buffer vb, its
 * heads' D values each at head·D of the row: its own buffer, or its part of the concat that reads
 * it (FuseCtx.into) */
typedef struct AttDst {
  int vb;
  int64_t add, W;
} AttDst;

/* the index of (position pos, batch b, head)'s first value in d */
static int dst_row(Att *a, const AttDst *d, int pos, int b, int head) {
  return let(a, add(a, mul(a, mad(a, pos, a->B, b), I(a, d->W)), mul(a, head, I(a, a->D))));
}

/* The element offset of row i (a position) of a [S,B,H,D] tensor at head offset hd = (b*H + h)*D. */
static int row_at(Att *a, int i, int64_t H, int hd) { return let(a, mad(a, i, a->B * H * a->D, hd)); }

/* The thread's tile and (batch, head) from its row r: the tile r % tiles (returned), *bh = r / tiles
 * = b*H + h for H heads, *h the head, *b the batch. Consecutive threads take a head's tiles. */
static int tile_of(Att *a, int64_t tiles, int64_t H, int *b, int *h, int *bh) {
  Kernel *k = a->k;
  int r = kir_row(k);
  int t = let(a, kir_e(k, K_IMOD, r, I(a, tiles), 0));
  *bh = let(a, kir_e(k, K_IDIV, r, I(a, tiles), 0));
  *h = let(a, kir_e(k, K_IMOD, *bh, I(a, H), 0));
  *b = let(a, kir_e(k, K_IDIV, *bh, I(a, H), 0));
  return t;
}

/* The keys j < seen_end are those the query at global position gi sees: in the sequence, and not
 * after it when causal (a temporary; one compare a key, no branch in the loop over them). */
static int seen_end(Att *a, int gi) {
  return a->causal ? let(a, imin(a, add(a, gi, I(a, 1)), I(a, a->SK))) : I(a, a->SK);
}

static int gpos(Att *a, int i);

/* With a sliding window, the keys before the window of the query at global position gi are not
 * seen: one less than its first, max(gi - W, -1) (a temporary); -1 without a window. */
static int seen_before(Att *a, int gi) { return a->W ? let(a, imax(a, sub(a, gi, I(a, a->W)), I(a, -1))) : -1; }

/* Whether key j is seen by a query whose keys end before end and start after before (seen_end,
 * seen_before): an int condition */
static int seen(Att *a, int j, int end, int before) {
  int c = lt(a, j, end);
  return before < 0 ? c : kir_e(a->k, K_IAND, c, lt(a, before, j), 0);
}

/* The key tiles a tile of queries from local row i0 visits: every one, or when causal those up to
 * the tile holding the key at the last query's global position (glast); with a window from the
 * tile holding the first query's first key (*first; -1 without a window: from the first). The
 * count is returned. */
static int key_tiles(Att *a, int i0, int glast, int *first) {
  int end = a->causal ? let(a, add(a, kir_e(a->k, K_IDIV, glast, I(a, ATT_BK), 0), I(a, 1))) : I(a, k_tiles(a));
  *first = -1;
  if (!a->W) return end;
  *first = let(a, kir_e(a->k, K_IDIV, add(a, seen_before(a, gpos(a, i0)), I(a, 1)), I(a, ATT_BK), 0));
  return let(a, sub(a, end, *first));
}

/* The first key of key tile kb of those key_tiles() counts from first */
static int tile_key(Att *a, int first, int kb) {
  return let(a, mul(a, first >= 0 ? add(a, first, kb) : kb, I(a, ATT_BK)));
}

/* A score from its product q.k: scale q.k, or with a soft cap cap tanh(scale q.k / cap), *t (when
 * not NULL) the tanh, which the score's gradient multiplies by (1 - t^2) */
static int score(Att *a, int qk, int *t) {
  int s = fmul(a, kir_f(a->k, a->scale), qk);
  if (!a->cap) return s;
  int th = let(a, kir_e(a->k, K_TANH, kir_e(a->k, K_DIV, s, kir_f(a->k, a->cap), 0), 0, 0));
  if (t) *t = th;
  return fmul(a, th, kir_f(a->k, a->cap));
}

/* arr[r*D + d] = X[row x0+r, element d] for r < n: rows of Q or dO (or O), or with keys of K or V,
 * at head offset hd. Rows past the sequence read its last: their scores are masked, their P and
 * dS are 0, and what they sum is not stored. */
static void copy_rows(Att *a, int arr, int buf, int x0, int n, int hd, bool keys) {
  Kernel *k = a->k;
  int64_t S = keys ? a->SK : a->SQ;
  int r = kir_for(k, I(a, n));
  int at = row_at(a, imin(a, add(a, x0, r), I(a, S - 1)), keys ? a->HK : a->HQ, hd);
  int d = kir_for(k, I(a, a->D));
  kir_astore(k, arr, mad(a, r, a->D, d), '=', kir_ld(k, buf, add(a, at, d)));
  kir_end(k);
  kir_end(k);
}

/* T[d*16 + t] = X[row x0+t, element d] for a tile of 16 (ATT_BQ = ATT_BK) rows (copy_rows):
 * transposed, its rows copied whole first into Y, a private array of 16 rows */
static void tile_tr(Att *a, int tarr, int yarr, int buf, int x0, int hd, bool keys) {
  Kernel *k = a->k;
  copy_rows(a, yarr, buf, x0, ATT_BK, hd, keys);
  int d = kir_for(k, I(a, a->D));
  int t = kir_for(k, I(a, ATT_BK));
  kir_astore(k, tarr, mad(a, d, ATT_BK, t), '=', kir_ald(k, yarr, mad(a, t, a->D, d)));
  kir_end(k);
  kir_end(k);
}

/* S[r*16 + c] = sum over d, in order, of X[r*D + d] T[d*16 + c] for n rows of X (a multiple of
 * ATT_RB) and a transposed tile T of 16 rows (tile_tr): ATT_RB rows' sums at a time in
 * temporaries, one chain each; the C compiler vectorises the loop over T's rows around them (the
 * sums in registers). The tiles are the thread's private arrays: the C compiler vectorises that
 * loop only where it can tell that no store reaches what it reads. Q K^T with X the queries and T
 * the keys (dK and dV's tile, row-major), or with X the keys and T the queries (the forward's and
 * dQ's, key-major): a score is the same sum either way. */
static void scores(Att *a, int sarr, int xarr, int n, int tarr) {
  Kernel *k = a->k;
  int rb = kir_for(k, I(a, n / ATT_RB));
  int jj = kir_for(k, I(a, ATT_BK));
  int v[ATT_RB];
  for (int r = 0; r < ATT_RB; r++) v[r] = kir_var(k, kir_f(k, 0));
  int d = kir_for(k, I(a, a->D));
  int kv = let(a, kir_ald(k, tarr, mad(a, d, ATT_BK, jj)));
  for (int r = 0; r < ATT_RB; r++)
    kir_set(k, v[r], '=', fadd(a, v[r], fmul(a, kir_ald(k, xarr, mad(a, mad(a, rb, ATT_RB, I(a, r)), a->D, d)), kv)));
  kir_end(k);
  for (int r = 0; r < ATT_RB; r++) kir_astore(k, sarr, mad(a, mad(a, rb, ATT_RB, I(a, r)), ATT_BK, jj), '=', v[r]);
  kir_end(k);
  kir_end(k);
}

/* Acc[r*D + d] = Acc[r*D + d] F[r] + sum over the tile's keys jj, in order, of P[jj*n + r] (a
 * key-major tile) Y[jj*D + d] (a tile as stored, copy_rows), for n rows (a multiple of 2), F[r] a
 * row's factor (farr; 1 when farr < 0): two rows' chains at a time, the loop over the head
 * dimension vectorised around them (O = O alpha + P V, dQ += dS K) */
static void rows_times_keys(Att *a, int acc, int farr, int parr, int n, int yarr) {
  Kernel *k = a->k;
  int rb = kir_for(k, I(a, n / 2));
  int d = kir_for(k, I(a, a->D));
  int e0 = let(a, mad(a, mad(a, rb, 2, I(a, 0)), a->D, d)), e1 = let(a, add(a, e0, I(a, a->D)));
  int x0 = kir_ald(k, acc, e0), x1 = kir_ald(k, acc, e1);
  if (farr >= 0) {
    x0 = fmul(a, x0, kir_ald(k, farr, mad(a, rb, 2, I(a, 0))));
    x1 = fmul(a, x1, kir_ald(k, farr, mad(a, rb, 2, I(a, 1))));
  }
  int v0 = kir_var(k, x0), v1 = kir_var(k, x1);
  int jj = kir_for(k, I(a, ATT_BK));
  int y = let(a, kir_ald(k, yarr, mad(a, jj, a->D, d)));
  kir_set(k, v0, '=', fadd(a, v0, fmul(a, kir_ald(k, parr, mad(a, jj, n, mad(a, rb, 2, I(a, 0)))), y)));
  kir_set(k, v1, '=', fadd(a, v1, fmul(a, kir_ald(k, parr, mad(a, jj, n, mad(a, rb, 2, I(a, 1)))), y)));
  kir_end(k);
  kir_astore(k, acc, e0, '=', v0);
  kir_astore(k, acc, e1, '=', v1);
  kir_end(k);
  kir_end(k);
}

/* dV[jj*D + d] += sum over r < n, in order, of P[r*BK + jj] dO[r*D + d], and dK likewise of
 * dS and Q: the tile's keys' sums over n query rows, two keys' chains of each at a time, the loop
 * over the head dimension vectorised around them */
static void keys_times_rows(Att *a, int adv, int adk, int parr, int dsarr, int n, int xg, int xq) {
  Kernel *k = a->k;
  int jp = kir_for(k, I(a, ATT_BK / 2));
  int d = kir_for(k, I(a, a->D));
  int e0 = let(a, mad(a, mad(a, jp, 2, I(a, 0)), a->D, d)), e1 = let(a, add(a, e0, I(a, a->D)));
  int v0 = kir_var(k, kir_ald(k, adv, e0)), v1 = kir_var(k, kir_ald(k, adv, e1)), k0 = kir_var(k, kir_ald(k, adk, e0)),
      k1 = kir_var(k, kir_ald(k, adk, e1));
  int r = kir_for(k, I(a, n));
  int g = let(a, kir_ald(k, xg, mad(a, r, a->D, d))), q = let(a, kir_ald(k, xq, mad(a, r, a->D, d)));
  int p0 = mad(a, r, ATT_BK, mul(a, jp, I(a, 2))), p1 = add(a, p0, I(a, 1));
  kir_set(k, v0, '=', fadd(a, v0, fmul(a, kir_ald(k, parr, p0), g)));
  kir_set(k, v1, '=', fadd(a, v1, fmul(a, kir_ald(k, parr, p1), g)));
  kir_set(k, k0, '=', fadd(a, k0, fmul(a, kir_ald(k, dsarr, p0), q)));
  kir_set(k, k1, '=', fadd(a, k1, fmul(a, kir_ald(k, dsarr, p1), q)));
  kir_end(k);
  kir_astore(k, adv, e0, '=', v0);
  kir_astore(k, adv, e1, '=', v1);
  kir_astore(k, adk, e0, '=', k0);
  kir_astore(k, adk, e1, '=', k1);
  kir_end(k);
  kir_end(k);
}

/* The shapes of attention node fwd: SQ the rank's queries; SK the keys they see, the whole
 * sequence's under context parallelism. */
static Att att_shape(FuseCtx *c, int fwd, int node) {
  const IrNode *f = N(c, fwd);
  const Shape *qs = &N(c, f->in[0])->shape, *kvs = &N(c, f->in[1])->shape;
  Att a = {.c = c,
           .SQ = qs->d[0],
           .SK = qs->d[0] * (c->g->cfg.cp > 1 ? c->g->cfg.cp : 1),
           .B = qs->d[1],
           .HQ = qs->d[2],
           .HK = kvs->d[2],
           .D = qs->d[3],
           .causal = f->a.causal,
           .W = f->a.window,
           .cap = f->a.cap,
           .scale = f->a.scale,
           .node = node,
           .off = -1};
  a.R = a.HQ / a.HK;
  if (a.W >= a.SK) a.W = 0; /* a window over the whole sequence: causal attention */
  return a;
}

/* A kernel of rows threads, 32 a block (a warp; each thread holds whole tiles), work its rough
 * operations a thread; where it compares positions (`positions`) under context parallelism, the
 * rank's first position as an argument. */
static void att_kernel(Att *a, const char *name, int64_t rows, int64_t work, bool positions) {
  a->kc = fuse_kc_flat(name, rows, a->node);
  a->k = a->kc.k;
  a->k->block = 32;
  a->k->work = work;
  a->off = positions && a->c->g->cfg.cp > 1 ? kir_let(a->k, fuse_kc_gpos(a->c, &a->kc, kir_i(a->k, 0))) : -1;
}

/* A thread's flops (its kernel's work, which the schedule's cost model and the C renderer's
 * threading read): products of the head dimension over pairs (query, key), half of them seen when
 * causal */
static int64_t flops(const Att *a, int products, int64_t pairs) {
  if (a->W) return (int64_t)(2 * products * pairs * a->D * ir_attention_seen(a->SK, a->W));
  return 2 * products * pairs * a->D / (a->causal ? 2 : 1);
}

/* The global position of local query i: + the rank's first under context parallelism. */
static int gpos(Att *a, int i) { return a->off >= 0 ? add(a, a->off, i) : i; }

/* ---- the forward ---------------------------------------------------------------------------- */

static void fwd_kernel(Att *a, int vq, int vk, int vv, int vo, int vl) {
  att_kernel(a, "attention_fwd", a->B * a->HQ * q_tiles(a), flops(a, 2, ATT_BQ * a->SK), true);
  Kernel *k = a->k;
  FuseCtx *c = a->c;
  int Q = fuse_kc_vbuf(c, &a->kc, vq, false), K = fuse_kc_vbuf(c, &a->kc, vk, false),
      V = fuse_kc_vbuf(c, &a->kc, vv, false), O = fuse_kc_vbuf(c, &a->kc, vo, true),
      L = fuse_kc_vbuf(c, &a->kc, vl, true);
  /* the rows' Q transposed and their O; a key tile's K and V as stored and its scores key-major;
   * each row's maximum, the tile's, and the factor that rescales the row; the rows' sums, one a key
   * of the tile (kept apart until the end, so that the tile's sums are a vector's) */
  int aqt = kir_array(k, a->D * ATT_BQ), ao = kir_array(k, ATT_BQ * a->D), st = kir_array(k, ATT_BK * ATT_BQ),
      am = kir_array(k, ATT_BQ), tm = kir_array(k, ATT_BQ), aa = kir_array(k, ATT_BQ),
      al = kir_array(k, ATT_BK * ATT_BQ), kr = kir_array(k, ATT_BK * a->D), vr = kir_array(k, ATT_BK * a->D);

  int b, h, bh;
  int qt = tile_of(a, q_tiles(a), a->HQ, &b, &h, &bh);
  int g = let(a, kir_e(k, K_IDIV, h, I(a, a->R), 0));
  int hdq = let(a, mul(a, bh, I(a, a->D))), hdk = let(a, mul(a, mad(a, b, a->HK, g), I(a, a->D)));
  int i0 = let(a, mul(a, qt, I(a, ATT_BQ)));
  tile_tr(a, aqt, kr, Q, i0, hdq, false);
  int e = kir_for(k, I(a, ATT_BQ * a->D));
  kir_astore(k, ao, e, '=', kir_f(k, 0));
  kir_end(k);
  e = kir_for(k, I(a, ATT_BK * ATT_BQ));
  kir_astore(k, al, e, '=', kir_f(k, 0));
  kir_end(k);
  int ii = kir_for(k, I(a, ATT_BQ));
  kir_astore(k, am, ii, '=', kir_f(k, ATT_MASKED));
  kir_end(k);
  int kb0, nkb = key_tiles(a, i0, gpos(a, imin(a, add(a, i0, I(a, ATT_BQ - 1)), I(a, a->SQ - 1))), &kb0);
  int kb = kir_for(k, nkb);
  int j0 = tile_key(a, kb0, kb);
  copy_rows(a, kr, K, j0, ATT_BK, hdk, true);
  copy_rows(a, vr, V, j0, ATT_BK, hdk, true);
  scores(a, st, kr, ATT_BK, aqt);
  /* the scores scaled and masked, and each row's maximum over the tile (a maximum is the same in
   * any order), a key at a time, the rows side by side */
  ii = kir_for(k, I(a, ATT_BQ));
  kir_astore(k, tm, ii, '=', kir_f(k, ATT_MASKED));
  kir_end(k);
  int jj = kir_for(k, I(a, ATT_BK));
  ii = kir_for(k, I(a, ATT_BQ));
  int at = let(a, mad(a, jj, ATT_BQ, ii));
  int gi = let(a, gpos(a, imin(a, add(a, i0, ii), I(a, a->SQ - 1))));
  int s = let(a, kir_e(k, K_SEL, seen(a, add(a, j0, jj), seen_end(a, gi), seen_before(a, gi)),
                       score(a, kir_ald(k, st, at), NULL), kir_f(k, ATT_MASKED)));
  kir_astore(k, st, at, '=', s);
  kir_astore(k, tm, ii, '=', kir_e(k, K_MAX, kir_ald(k, tm, ii), s, 0));
  kir_end(k);
  kir_end(k);
  /* each row's new maximum, and the factor its O and sums are rescaled by */
  ii = kir_for(k, I(a, ATT_BQ));
  int mx = let(a, kir_e(k, K_MAX, kir_ald(k, am, ii), kir_ald(k, tm, ii), 0));
  kir_astore(k, aa, ii, '=', kir_e(k, K_EXP, fsub(a, kir_ald(k, am, ii), mx), 0, 0));
  kir_astore(k, am, ii, '=', mx);
  kir_end(k);
  /* P = exp(s - max) in place, and the sums rescaled */
  jj = kir_for(k, I(a, ATT_BK));
  ii = kir_for(k, I(a, ATT_BQ));
  at = let(a, mad(a, jj, ATT_BQ, ii));
  int sv = let(a, kir_ald(k, st, at));
  int p = let(a, kir_e(k, K_SEL, kir_e(k, K_FLT, kir_f(k, ATT_MASKED / 2), sv, 0),
                       kir_e(k, K_EXP, fsub(a, sv, kir_ald(k, am, ii)), 0, 0), kir_f(k, 0)));
  kir_astore(k, st, at, '=', p);
  kir_astore(k, al, at, '=', fadd(a, fmul(a, kir_ald(k, al, at), kir_ald(k, aa, ii)), p));
  kir_end(k);
  kir_end(k);
  rows_times_keys(a, ao, aa, st, ATT_BQ, vr); /* O = O alpha + P V */
  kir_end(k);                                 /* the key tiles */
  /* O / sum and lse = max + log(sum), for the rows in the sequence */
  ii = kir_for(k, I(a, ATT_BQ));
  int i = let(a, add(a, i0, ii));
  kir_if(k, lt(a, i, I(a, a->SQ)));
  int sum = kir_var(k, kir_f(k, 0));
  jj = kir_for(k, I(a, ATT_BK));
  kir_set(k, sum, '=', fadd(a, sum, kir_ald(k, al, mad(a, jj, ATT_BQ, ii))));
  kir_end(k);
  int inv = let(a, kir_e(k, K_DIV, kir_f(k, 1), sum, 0));
  int oat = row_at(a, i, a->HQ, hdq);
  int d = kir_for(k, I(a, a->D));
  kir_store(k, O, add(a, oat, d), '=', fmul(a, kir_ald(k, ao, mad(a, ii, a->D, d)), inv));
  kir_end(k);
  kir_store(k, L, mad(a, bh, a->SQ, i), '=', fadd(a, kir_ald(k, am, ii), kir_e(k, K_LOG, sum, 0, 0)));
  kir_end(k);
  kir_end(k);
  fuse_kc_emit(c, &a->kc);
}

/* ---- the backward --------------------------------------------------------------------------- */

/* P and dS of the score at index at of sarr (S = Q K^T unscaled) and parr (dP = dO V^T), key j
 * of a row whose keys end before end and start after before (seen_end, seen_before), lse and
 * delta its statistics: P = exp(scale S - lse) where the key is seen (0 else) into sarr, and
 * dS = P (dP - delta) scale into parr */
static void prob_ds(Att *a, int sarr, int parr, int at, int j, int end, int before, int lse, int dl) {
  Kernel *k = a->k;
  int t = -1;
  int p = let(a, kir_e(k, K_SEL, seen(a, j, end, before),
                       kir_e(k, K_EXP, fsub(a, score(a, kir_ald(k, sarr, at), &t), lse), 0, 0), kir_f(k, 0)));
  kir_astore(k, sarr, at, '=', p);
  int ds = fmul(a, p, fsub(a, kir_ald(k, parr, at), dl));
  if (t >= 0) ds = fmul(a, ds, fsub(a, kir_f(k, 1), fmul(a, t, t))); /* through the cap's tanh */
  kir_astore(k, parr, at, '=', fmul(a, ds, kir_f(k, a->scale)));
}

/* prob_ds over n rows of a row-major score tile (dK and dV's), rows i0 + r and the keys j0 + jj.
 * Rows past SQ read row SQ-1's statistics and their P and dS are 0 (a key tile's sums run over
 * rows). */
static void probs_and_ds(Att *a, int sarr, int parr, int n, int i0, int j0, int L, int Dl, int bh) {
  Kernel *k = a->k;
  int r = kir_for(k, I(a, n));
  int i = let(a, imin(a, add(a, i0, r), I(a, a->SQ - 1)));
  int gi = let(a, gpos(a, i));
  int lse = let(a, kir_ld(k, L, mad(a, bh, a->SQ, i))), dl = let(a, kir_ld(k, Dl, mad(a, bh, a->SQ, i)));
  int end = let(a, kir_e(k, K_ISEL, lt(a, add(a, i0, r), I(a, a->SQ)), seen_end(a, gi), I(a, 0)));
  int before = seen_before(a, gi);
  int jj = kir_for(k, I(a, ATT_BK));
  prob_ds(a, sarr, parr, let(a, mad(a, r, ATT_BK, jj)), add(a, j0, jj), end, before, lse, dl);
  kir_end(k);
  kir_end(k);
}

/* dK and dV of BK keys of one kv head: over its R query heads and the queries that see a key of
 * the tile, in order, ATT_G rows at a time */
static void dkv_kernel(Att *a, const int vb[6], const AttDst *dk, const AttDst *dv) {
  att_kernel(a, "attention_dkv", a->B * a->HK * k_tiles(a), flops(a, 4, ATT_BK * a->R * a->SQ), true);
  Kernel *k = a->k;
  FuseCtx *c = a->c;
  int Q = fuse_kc_vbuf(c, &a->kc, vb[0], false), K = fuse_kc_vbuf(c, &a->kc, vb[1], false),
      V = fuse_kc_vbuf(c, &a->kc, vb[2], false), G = fuse_kc_vbuf(c, &a->kc, vb[3], false),
      L = fuse_kc_vbuf(c, &a->kc, vb[4], false), Dl = fuse_kc_vbuf(c, &a->kc, vb[5], false),
      DK = fuse_kc_vbuf_at(c, &a->kc, dk->vb, dk->add, true), DV = fuse_kc_vbuf_at(c, &a->kc, dv->vb, dv->add, true);
  int adk = kir_array(k, ATT_BK * a->D), adv = kir_array(k, ATT_BK * a->D), xq = kir_array(k, ATT_G * a->D),
      xg = kir_array(k, ATT_G * a->D), sc = kir_array(k, ATT_G * ATT_BK), dp = kir_array(k, ATT_G * ATT_BK),
      kta = kir_array(k, a->D * ATT_BK), vta = kir_array(k, a->D * ATT_BK);
  int b, g, bg;
  int kb = tile_of(a, k_tiles(a), a->HK, &b, &g, &bg);
  int hdk = let(a, mul(a, bg, I(a, a->D)));
  int j0 = let(a, mul(a, kb, I(a, ATT_BK)));
  tile_tr(a, kta, adk, K, j0, hdk, true); /* adk: the rows on their way */
  tile_tr(a, vta, adk, V, j0, hdk, true);
  int e = kir_for(k, I(a, ATT_BK * a->D));
  kir_astore(k, adk, e, '=', kir_f(k, 0));
  kir_astore(k, adv, e, '=', kir_f(k, 0));
  kir_end(k);
  /* the first query that sees the tile's first key: global position j0, local j0 - the rank's first */
  int first = I(a, 0);
  if (a->causal) {
    int f = let(a, a->off >= 0 ? sub(a, j0, a->off) : j0);
    first = let(a, kir_e(k, K_ISEL, lt(a, f, I(a, 0)), I(a, 0), f));
  }
  /* and with a window the end of the queries that see its last key: local j0 + BK - 1 + W */
  int qend = I(a, a->SQ);
  if (a->W) {
    int e = add(a, j0, I(a, ATT_BK - 1 + a->W));
    qend = let(a, imin(a, a->off >= 0 ? sub(a, e, a->off) : e, I(a, a->SQ)));
  }
  int ngroups = let(a, kir_e(k, K_IDIV, add(a, sub(a, qend, first), I(a, ATT_G - 1)), I(a, ATT_G), 0));
  int r = kir_for(k, I(a, a->R));
  int bh = let(a, mad(a, b, a->HQ, mad(a, g, a->R, r)));
  int hdq = let(a, mul(a, bh, I(a, a->D)));
  int t = kir_for(k, ngroups);
  int i0 = let(a, mad(a, t, ATT_G, first));
  copy_rows(a, xq, Q, i0, ATT_G, hdq, false);
  copy_rows(a, xg, G, i0, ATT_G, hdq, false);
  scores(a, sc, xq, ATT_G, kta);
  scores(a, dp, xg, ATT_G, vta);
  probs_and_ds(a, sc, dp, ATT_G, i0, j0, L, Dl, bh);
  keys_times_rows(a, adv, adk, sc, dp, ATT_G, xg, xq); /* dV += P^T dO, dK += dS^T Q */
  kir_end(k);                                          /* the query rows */
  kir_end(k);                                          /* the heads */
  int jj = kir_for(k, I(a, ATT_BK));
  int j = let(a, add(a, j0, jj));
  kir_if(k, lt(a, j, I(a, a->SK)));
  int kat = dst_row(a, dk, j, b, g), vat = dk->W == dv->W ? kat : dst_row(a, dv, j, b, g);
  int d = kir_for(k, I(a, a->D));
  kir_store(k, DK, add(a, kat, d), '=', kir_ald(k, adk, mad(a, jj, a->D, d)));
  kir_store(k, DV, add(a, vat, d), '=', kir_ald(k, adv, mad(a, jj, a->D, d)));
  kir_end(k);
  kir_end(k);
  kir_end(k);
  fuse_kc_emit(c, &a->kc);
}

/* dQ of BQ query rows, and their delta = rowsum(dO * O) into Dl: over the key tiles they see, in
 * order, the tiles' scores key-major */
static void dq_kernel(Att *a, const int vb[6], int vo, const AttDst *dq) {
  att_kernel(a, "attention_dq", a->B * a->HQ * q_tiles(a), flops(a, 3, ATT_BQ * a->SK) + 2 * ATT_BQ * a->D, true);
  Kernel *k = a->k;
  FuseCtx *c = a->c;
  int Q = fuse_kc_vbuf(c, &a->kc, vb[0], false), K = fuse_kc_vbuf(c, &a->kc, vb[1], false),
      V = fuse_kc_vbuf(c, &a->kc, vb[2], false), G = fuse_kc_vbuf(c, &a->kc, vb[3], false),
      L = fuse_kc_vbuf(c, &a->kc, vb[4], false), Dl = fuse_kc_vbuf(c, &a->kc, vb[5], true),
      O = fuse_kc_vbuf(c, &a->kc, vo, false), DQ = fuse_kc_vbuf_at(c, &a->kc, dq->vb, dq->add, true);
  /* the rows' Q and dO transposed, their dQ, lse and delta; a key tile's K and V as stored, its
   * scores and dP key-major */
  int aqt = kir_array(k, a->D * ATT_BQ), agt = kir_array(k, a->D * ATT_BQ), adq = kir_array(k, ATT_BQ * a->D),
      lse = kir_array(k, ATT_BQ), adl = kir_array(k, ATT_BQ), st = kir_array(k, ATT_BK * ATT_BQ),
      dpt = kir_array(k, ATT_BK * ATT_BQ), kr = kir_array(k, ATT_BK * a->D), vr = kir_array(k, ATT_BK * a->D);

  int b, h, bh;
  int qt = tile_of(a, q_tiles(a), a->HQ, &b, &h, &bh);
  int g = let(a, kir_e(k, K_IDIV, h, I(a, a->R), 0));
  int hdq = let(a, mul(a, bh, I(a, a->D))), hdk = let(a, mul(a, mad(a, b, a->HK, g), I(a, a->D)));
  int i0 = let(a, mul(a, qt, I(a, ATT_BQ)));
  tile_tr(a, aqt, kr, Q, i0, hdq, false); /* kr: the rows on their way */
  tile_tr(a, agt, kr, G, i0, hdq, false);
  int e = kir_for(k, I(a, ATT_BQ * a->D));
  kir_astore(k, adq, e, '=', kir_f(k, 0));
  kir_end(k);
  /* the rows' statistics: lse, and delta = rowsum(dO * O), each row's sum over the head dimension
   * in order, the rows side by side (O's rows transposed into kr, vr on their way; rows past SQ
   * take row SQ-1's and are not stored) */
  tile_tr(a, kr, vr, O, i0, hdq, false);
  int ii = kir_for(k, I(a, ATT_BQ));
  kir_astore(k, adl, ii, '=', kir_f(k, 0));
  kir_end(k);
  int d = kir_for(k, I(a, a->D));
  ii = kir_for(k, I(a, ATT_BQ));
  int at = let(a, mad(a, d, ATT_BQ, ii));
  kir_astore(k, adl, ii, '=', fadd(a, kir_ald(k, adl, ii), fmul(a, kir_ald(k, agt, at), kir_ald(k, kr, at))));
  kir_end(k);
  kir_end(k);
  ii = kir_for(k, I(a, ATT_BQ));
  int li = let(a, mad(a, bh, a->SQ, imin(a, add(a, i0, ii), I(a, a->SQ - 1))));
  kir_astore(k, lse, ii, '=', kir_ld(k, L, li));
  kir_if(k, lt(a, add(a, i0, ii), I(a, a->SQ)));
  kir_store(k, Dl, li, '=', kir_ald(k, adl, ii));
  kir_end(k);
  kir_end(k);
  int kb0, nkb = key_tiles(a, i0, gpos(a, imin(a, add(a, i0, I(a, ATT_BQ - 1)), I(a, a->SQ - 1))), &kb0);
  int kb = kir_for(k, nkb);
  int j0 = tile_key(a, kb0, kb);
  copy_rows(a, kr, K, j0, ATT_BK, hdk, true);
  copy_rows(a, vr, V, j0, ATT_BK, hdk, true);
  scores(a, st, kr, ATT_BK, aqt);
  scores(a, dpt, vr, ATT_BK, agt);
  int jj = kir_for(k, I(a, ATT_BK));
  ii = kir_for(k, I(a, ATT_BQ));
  int gi = let(a, gpos(a, imin(a, add(a, i0, ii), I(a, a->SQ - 1))));
  prob_ds(a, st, dpt, let(a, mad(a, jj, ATT_BQ, ii)), add(a, j0, jj), seen_end(a, gi), seen_before(a, gi),
          kir_ald(k, lse, ii), kir_ald(k, adl, ii));
  kir_end(k);
  kir_end(k);
  rows_times_keys(a, adq, -1, dpt, ATT_BQ, kr); /* dQ += dS K */
  kir_end(k);                                   /* the key tiles */
  ii = kir_for(k, I(a, ATT_BQ));
  int i = let(a, add(a, i0, ii));
  kir_if(k, lt(a, i, I(a, a->SQ)));
  int qat = dst_row(a, dq, i, b, h);
  d = kir_for(k, I(a, a->D));
  kir_store(k, DQ, add(a, qat, d), '=', kir_ald(k, adq, mad(a, ii, a->D, d)));
  kir_end(k);
  kir_end(k);
  kir_end(k);
  fuse_kc_emit(c, &a->kc);
}

/* gradient g's destination (AttDst), of heads heads */
static AttDst att_dst(FuseCtx *c, int g, int64_t heads, int64_t D) {
  AttDst d = {fuse_prog_buf(c, g), 0, heads * D};
  int x = c->into[g];
  if (x < 0) return d;
  const IrNode *n = N(c, x);
  int part = 0;
  while (N(c, n->in[part])->in[0] != g) part++;
  d.W = n->shape.d[n->shape.nd - 1];
  d.add = part * (d.W / n->a.parts) * pp_dtype_bytes(c->p->vb[d.vb].dtype);
  return d;
}

void fuse_attn_grads(FuseCtx *c, int id, int fwd, int *gq, int *gk, int *gv) {
  *gq = *gk = *gv = -1;
  for (int i = id; i < c->g->nnodes && (*gq < 0 || *gk < 0 || *gv < 0); i++) /* made together: a few nodes apart */
    if (N(c, i)->fwd == fwd) {
      if (N(c, i)->op == OP_ATTENTION_DQ) *gq = i;
      if (N(c, i)->op == OP_ATTENTION_DK) *gk = i;
      if (N(c, i)->op == OP_ATTENTION_DV) *gv = i;
    }
  if (*gq < 0 || *gk < 0 || *gv < 0) diag_fatal("internal: attention %%%d lacks one of its gradients", fwd);
}

/* Context parallelism: the whole sequence's keys (values) from every cp rank's part, in rank
 * order, into a scratch buffer of the whole. */
static int gather_kv(FuseCtx *c, int node, int part, const char *name, const Att *a) {
  int whole = fuse_prog_vbuf(c, name, BC_SCRATCH, (Shape){4, {a->SK, a->B, a->HK, a->D}}, c->p->vb[part].dtype);
  fuse_prog_seq_coll(c, node, true, "cp", part, whole, node,
                     "context parallelism: the whole sequence's keys and values from every rank's positions");
  return whole;
}

void fuse_attn_lower(FuseCtx *c, int id) {
  const IrNode *n = N(c, id);
  int fwd = n->op == OP_ATTENTION ? id : n->fwd;
  const IrNode *f = N(c, fwd);
  if (n->op != OP_ATTENTION && c->att_done[fwd]) return; /* the backward: all three gradients at the first */
  Att a = att_shape(c, fwd, id);
  bool cp = a.SK != a.SQ;
  int vq = fuse_prog_buf(c, f->in[0]);
  int vk = cp ? gather_kv(c, id, fuse_prog_buf(c, f->in[1]), "k_all", &a) : fuse_prog_buf(c, f->in[1]);
  int vv = cp ? gather_kv(c, id, fuse_prog_buf(c, f->in[2]), "v_all", &a) : fuse_prog_buf(c, f->in[2]);
  int lse = c->p->node_aux[fwd]; /* [B,HQ,SQ] f32 */
  if (lse < 0) diag_fatal("internal: attention %%%d has no log-sum-exp buffer", fwd);
  if (n->op == OP_ATTENTION) {
    fwd_kernel(&a, vq, vk, vv, fuse_prog_buf(c, id), lse);
    return;
  }
  c->att_done[fwd] = true;
  int gq, gk, gv;
  fuse_attn_grads(c, id, fwd, &gq, &gk, &gv);
  int vdo = fuse_prog_buf(c, n->in[3]);
  int delta = fuse_prog_vbuf(c, "delta", BC_SCRATCH, (Shape){1, {a.B * a.HQ * a.SQ}}, PP_F32);
  Att kv = a, q = a;
  const int vb[6] = {vq, vk, vv, vdo, lse, delta};
  /* dK and dV: the nodes' buffers, or under context parallelism the whole sequence's f32 partial
   * sums, reduce-scattered */
  Shape kv_all = {4, {a.SK, a.B, a.HK, a.D}};
  AttDst dk = att_dst(c, gk, a.HK, a.D), dv = att_dst(c, gv, a.HK, a.D), dq = att_dst(c, gq, a.HQ, a.D);
  if (cp) {
    dk = (AttDst){fuse_prog_vbuf(c, "dk_f32", BC_SCRATCH, kv_all, PP_F32), 0, a.HK * a.D};
    dv = (AttDst){fuse_prog_vbuf(c, "dv_f32", BC_SCRATCH, kv_all, PP_F32), 0, a.HK * a.D};
  }
  dq_kernel(&q, vb, fuse_prog_buf(c, fwd), &dq); /* first: it writes the delta dkv reads */
  dkv_kernel(&kv, vb, &dk, &dv);
  if (cp) { /* each rank its positions' sums over every rank's queries */
    static const char why[] = "context parallelism: every rank's queries' part of the keys' (values') gradient, summed";
    fuse_prog_seq_coll(c, id, false, "cp", dk.vb, fuse_prog_buf(c, gk), gk, why);
    fuse_prog_seq_coll(c, id, false, "cp", dv.vb, fuse_prog_buf(c, gv), gv, why);
  }
}
