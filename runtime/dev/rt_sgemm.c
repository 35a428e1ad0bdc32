/* rt_sgemm.c - a register-blocked f32 GEMM for AVX-512: attention's short products (M, N up to a
 * short sequence, K up to a head's width or such a sequence), where OpenBLAS spends much of its time
 * packing, and the linear layers' and the head's, where it runs up to a tenth faster than OpenBLAS's
 * kernels: C = alpha op(A) op(B) + beta C, row-major. Blocks of 12 rows x 32 columns of C live in
 * 24 registers; A is broadcast element by element, op(B) read a row of 32 at a time from panels
 * (rows copied; a transposed B's by 16 x 16 transposes in registers, its last K mod 16 gathered),
 * made a group of columns and a pass over K at a time. An untransposed A whose rows lie apart (a
 * head's slice of [S, B, H]) is first copied contiguous; a transposed one is packed 12 wide when
 * op(B) is wider than 3 panels, else read where it lies, 12 floats from each of A's rows (packs_a).
 * Each element of C is one chain of fused multiply-adds over
 * k = 0 .. K-1 in order (a pass over K goes on from the last one's partial sums), times alpha,
 * plus beta times C by one more (C not read when beta is 0): its value depends neither on the
 * blocking nor on threads. A triangle (causal attention) skips whole blocks of C (and on tri:out's
 * diagonal the last 16 columns of a block when all lie above it), or runs each block of rows over a
 * shorter range of k; the products it leaves out of a kept element's chain are
 * with op(A)'s zeros, so the value is the whole chain's but for the sign of a zero. AVX-512 only,
 * checked at run time; rt_sgemm_fits says which products are taken here. */
#include "rt_sgemm.h"
#include "rt_util.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define MR          12 /* rows of C per block: 2 x 12 accumulators, 2 B vectors and a broadcast in 32 registers */
#define NR          32 /* columns of C per block: two 16-float vectors */
#define PANEL_AHEAD 8  /* rows of B a panel's copy fetches ahead (measured: attention's GEMMs 5% faster in place) */

#define AVX512 __attribute__((target("avx512f")))

/* Where a block's chains start and end: at zero, or the partial sums at pin; in C (times alpha, plus
 * beta C), or raw in the partial sums at pout. Partial sums: a block's rows pld floats apart, 32
 * each, 64-byte aligned (the chains of a K longer than a pass, carried from one pass to the next). */
typedef struct {
  const float *pin;
  float *pout;
  int64_t pld;
} Ends;

/* The block C[0..mr, 0..32) (columns beyond the masks not touched): A's element (r, p) at
 * a[r * ars + p * acs] (packed: ars 1, acs 12, constants), op(B)'s row p at b + p * bs (a panel:
 * 64-byte aligned, zero past the masks' columns). A where it lies is read through four row pointers,
 * rows 3j + i at row 3j's plus i * ars (an addressing mode's scale), so that the loop needs seven
 * general registers, not one per row. */
static inline __attribute__((always_inline)) AVX512 void block(const int mr, const bool packed, const bool wide, int k,
                                                               const float *a, int64_t ars, int64_t acs, const float *b,
                                                               int64_t bs, __mmask16 m0, __mmask16 m1, float alpha,
                                                               float beta, float *c, int64_t ldc, const Ends *e) {
  __m512 c0[MR], c1[MR];
  if (e->pin) {
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++)
      c0[r] = _mm512_load_ps(e->pin + r * e->pld), c1[r] = _mm512_load_ps(e->pin + r * e->pld + 16);
  } else {
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) c0[r] = _mm512_setzero_ps(), c1[r] = _mm512_setzero_ps();
  }
  /* C's block is written at the end (and read first when beta != 0): its lines fetched meanwhile,
   * whatever beta is, since a store to a line not in the cache waits for the line too (attention's
   * outputs have their rows kilobytes apart: minimind256's triangle products 7.3-8.5 -> 6.6-7.1 ms a
   * step at one thread when beta 0 fetched as well) */
  if (!e->pout)
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++)
      _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0),
          _mm_prefetch((const char *)(c + r * ldc + 16), _MM_HINT_T0);
  const float *a3 = mr > 3 ? a + 3 * ars : a, *a6 = mr > 6 ? a + 6 * ars : a, *a9 = mr > 9 ? a + 9 * ars : a;
  for (int p = 0; p < k; p++, a += acs, a3 += acs, a6 += acs, a9 += acs, b += bs) {
    __m512 b0 = _mm512_load_ps(b), b1 = wide ? _mm512_load_ps(b + 16) : b0;
    if (!packed && ars == 1) /* a transposed A where it lies: its row 8 steps on (an address, maybe past A) */
      _mm_prefetch((const char *)((uintptr_t)a + (uintptr_t)(8 * acs) * sizeof *a), _MM_HINT_T0);
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
      const float *ar = r < 3 ? a : r < 6 ? a3 : r < 9 ? a6 : a9;
      __m512 av = _mm512_set1_ps(packed ? a[r] : ar[(r % 3) * ars]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      if (wide) c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
  }
  if (e->pout) {
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++)
      _mm512_store_ps(e->pout + r * e->pld, c0[r]), _mm512_store_ps(e->pout + r * e->pld + 16, c1[r]);
    return;
  }
  __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
  for (int r = 0; r < mr; r++) {
    float *cr = c + r * ldc;
    __m512 r0 = _mm512_mul_ps(va, c0[r]), r1 = _mm512_mul_ps(va, c1[r]);
    if (beta != 0.0f) {
      r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, cr), r0);
      r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, cr + 16), r1);
    }
    _mm512_mask_storeu_ps(cr, m0, r0);
    _mm512_mask_storeu_ps(cr + 16, m1, r1);
  }
}

/* A block of mr rows: a switch to a body whose row loop is unrolled with registers for each; A
 * packed (a K x 12 block: ars 1, acs MR, constants there) or where it lies. */
static AVX512 void block_rows(int mr, int k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t bs,
                              __mmask16 m0, __mmask16 m1, float alpha, float beta, float *c, int64_t ldc,
                              const Ends *e) {
  static const Ends whole = {NULL, NULL, 0}; /* one pass: a body without the partial sums' tests */
  bool one = !e->pin && !e->pout;
#define ROWS(n, w)                                                                                                     \
  case n:                                                                                                              \
    if (ars == 1 && acs == MR) {                                                                                       \
      if (one) block(n, true, w, k, a, 1, MR, b, bs, m0, m1, alpha, beta, c, ldc, &whole);                             \
      else block(n, true, w, k, a, 1, MR, b, bs, m0, m1, alpha, beta, c, ldc, e);                                      \
    } else if (one) block(n, false, w, k, a, ars, acs, b, bs, m0, m1, alpha, beta, c, ldc, &whole);                    \
    else block(n, false, w, k, a, ars, acs, b, bs, m0, m1, alpha, beta, c, ldc, e);                                    \
    break;
#define ROWS12(w)                                                                                                      \
  ROWS(1, w)                                                                                                           \
  ROWS(2, w)                                                                                                           \
  ROWS(3, w) ROWS(4, w) ROWS(5, w) ROWS(6, w) ROWS(7, w) ROWS(8, w) ROWS(9, w) ROWS(10, w) ROWS(11, w) ROWS(12, w)
  if (m1) {
    switch (mr) { ROWS12(true) }
  } else { /* the panel's first 16 columns alone (a narrow op(B), or a triangle's diagonal): half the products */
    switch (mr) { ROWS12(false) }
  }
#undef ROWS12
#undef ROWS
}

static __mmask16 lanes(int w) { return (__mmask16)(w >= 16 ? 0xFFFF : w <= 0 ? 0 : (1u << w) - 1); }

/* dst's rows c = 0..15 (16 floats each, dst + c * dld, 64-byte aligned) = column c of the 16 x 16
 * block whose row r is src + r * ld: three rounds of shuffles (within 128-bit lanes by 32 and 64
 * bits, then across lanes), no gathers. */
static inline __attribute__((always_inline)) AVX512 void transpose16(const float *src, int64_t ld, float *dst,
                                                                     int64_t dld) {
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ld);
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) /* lane L: rows i, i+1 of columns 4L, 4L+1 (lo) or 4L+2, 4L+3 (hi) */
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) { /* r[g + c], lane L: rows g..g+3 of column 4L + c */
    r[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44), r[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
    r[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44), r[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) { /* columns c, 4 + c, 8 + c, 12 + c: lane L of r[c], r[4 + c], r[8 + c], r[12 + c] */
    __m512 x0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), x1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
    __m512 y0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88), y1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
    _mm512_store_ps(dst + c * dld, _mm512_shuffle_f32x4(x0, y0, 0x88));
    _mm512_store_ps(dst + (8 + c) * dld, _mm512_shuffle_f32x4(x0, y0, 0xDD));
    _mm512_store_ps(dst + (4 + c) * dld, _mm512_shuffle_f32x4(x1, y1, 0x88));
    _mm512_store_ps(dst + (12 + c) * dld, _mm512_shuffle_f32x4(x1, y1, 0xDD));
  }
}

/* op(B)'s columns [j, j + w) as a K x 32 panel, row p at pan + p * 32 (columns past w zero) */
static AVX512 void panel(bool tb, int k, const float *B, int64_t ldb, int j, int w, float *pan) {
  __mmask16 m0 = lanes(w), m1 = lanes(w - 16);
  int p0 = 0;
  if (!tb) { /* op(B)[p][j + q] = B[p * ldb + j + q]: rows copied */
    for (int p = 0; p < k; p++) {
      if (p + PANEL_AHEAD < k) { /* B's rows lie apart (a head's slice): no stream to the hardware */
        _mm_prefetch((const char *)(B + (p + PANEL_AHEAD) * ldb + j), _MM_HINT_T0);
        _mm_prefetch((const char *)(B + (p + PANEL_AHEAD) * ldb + j + 16), _MM_HINT_T0);
      }
      _mm512_store_ps(pan + p * NR, _mm512_maskz_loadu_ps(m0, B + p * ldb + j));
      _mm512_store_ps(pan + p * NR + 16, _mm512_maskz_loadu_ps(m1, B + p * ldb + j + 16));
    }
    return;
  }
  /* op(B)[p][j + q] = B[(j + q) * ldb + p]: a whole panel's 32 rows by blocks of 16 x 16 */
  if (w >= NR)
    for (; p0 + 16 <= k; p0 += 16) {
      if (p0 + 32 <= k)
        for (int r = 0; r < NR; r++) _mm_prefetch((const char *)(B + (int64_t)(j + r) * ldb + p0 + 16), _MM_HINT_T0);
      transpose16(B + (int64_t)j * ldb + p0, ldb, pan + p0 * NR, NR);
      transpose16(B + (int64_t)(j + 16) * ldb + p0, ldb, pan + p0 * NR + 16, NR);
    }
  if (ldb > INT32_MAX / NR) { /* the rest element by element */
    for (int p = p0; p < k; p++)
      for (int q = 0; q < NR; q++) pan[p * NR + q] = q < w ? B[(int64_t)(j + q) * ldb + p] : 0.0f;
  } else { /* the rest gathered from 32 rows of B (32-bit offsets) */
    const float *bj = B + (int64_t)j * ldb;
    __m512i i0 = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                    _mm512_set1_epi32((int)ldb));
    __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32((int)(16 * ldb)));
    for (int p = p0; p < k; p++) {
      _mm512_store_ps(pan + p * NR, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, i0, bj + p, 4));
      _mm512_store_ps(pan + p * NR + 16, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, i1, bj + p, 4));
    }
  }
}

/* The inner indices [a_first, a_end) a block of mr rows from row ai of the whole product runs over:
 * a lower triangle's up to its last row, an upper one's from its first */
static int a_first(PpTri tri, int64_t ai, int k) { return tri == PP_TRI_UPPER ? (int)(ai < k ? ai : k) : 0; }
static int a_end(PpTri tri, int64_t ai, int mr, int k) {
  return tri == PP_TRI_LOWER ? (int)(ai + mr < k ? ai + mr : k) : k;
}

/* Of np panels, those holding a column j <= last (tri:out: the last row wanted, less the first column) */
static int out_panels(int np, int64_t last) { return last < 0 ? 0 : (int)(last / NR + 1 < np ? last / NR + 1 : np); }

#define KC    1024         /* inner indices per pass at most: a block's A over a pass, 48 KiB at most */
#define GROUP (256 * 1024) /* floats of op(B)'s panels per group at most: a second-level cache of 1 MiB */

/* How a product is cut and where its parts lie in work: K in nkb passes of kc (evenly; one when K <=
 * KC), op(B)'s columns in groups of gp panels (gp x 32 x kc floats at most GROUP, one at least);
 * the work's floats: the group's panels (from its start), the partial sums of every row over a
 * group's columns (when nkb > 1), A copied contiguous or packed (when copy). */
typedef struct {
  int nkb, kc, gp;
  int64_t part, acont, total; /* offsets in work, and its floats */
} Cut;

static Cut cut(int m, int n, int k, bool copy) {
  Cut c;
  c.nkb = (k + KC - 1) / KC;
  c.kc = (k + c.nkb - 1) / c.nkb;
  int np = (n + NR - 1) / NR, gp = GROUP / (NR * c.kc);
  c.gp = gp < 1 ? 1 : gp > np ? np : gp;
  int64_t mpad = (int64_t)(m + MR - 1) / MR * MR;
  c.part = (int64_t)c.gp * NR * c.kc;
  c.acont = c.part + (c.nkb > 1 ? mpad * c.gp * NR : 0);
  c.total = c.acont + (copy ? mpad * k : 0);
  return c;
}

/* Whether a transposed A is packed first (K x 12 a block), or read where it lies, 12 floats from
 * each of its rows: packing pays when a block of rows runs over more than 3 panels of op(B)
 * (measured on an AMD EPYC: attention's dK and dV, N a head's 64 or 96, run 5-15% faster where A
 * lies, in place and alone; N 128 and more run faster packed, the block's rows re-read from the
 * first-level cache). Read where it lies, A's rows lie lda apart, 2 KiB at a sequence of 512: the
 * block fetches the row 8 steps ahead itself (an earlier host's prefetchers did not follow such
 * strides, and the same products ran 50% slower in place there; on this one it costs nothing). */
#define TA_PACK_MIN_N (3 * NR + 1)
static bool packs_a(bool ta, int n) { return ta && n >= TA_PACK_MIN_N; }

/* A is copied or packed first: transposed (packed K x 12 a block), or its rows apart (contiguous) */
static bool copies_a(bool ta, int n, int k, int64_t lda) { return ta ? packs_a(ta, n) : lda > k; }

/* op(B) in groups of panels of 32 columns, each group over K in passes of kc (the panels read from
 * the second-level cache, each once per block of 12 rows), C a block of 12 rows at a time over the
 * group's panels, the block's A over the pass in the first-level cache: a transposed A packed
 * K x 12 (or read where it lies: packs_a), an untransposed one read where it lies (copied
 * contiguous first when its rows lie apart: a head's slice of [S, B, H] has rows B H floats apart,
 * and rows a page apart share a first-level cache set and evict each other). A chain longer than a pass goes on from
 * its partial sum, so each element's chain is the same fused multiply-adds in the same order as in one pass. */
static AVX512 void sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float beta, float *C, int64_t ldc, PpTri tri, int row0, int col0,
                         float *work, const RtSgemmTeam *tm) {
  int np = (n + NR - 1) / NR;
  if (tri == PP_TRI_OUT) np = out_panels(np, (int64_t)row0 + m - 1 - col0); /* the last row's */
  Cut cu = cut(m, n, k, copies_a(ta, n, k, lda));
  bool packed = packs_a(ta, n);
  float *bp = work, *part = work + cu.part, *acont = work + cu.acont;
  int64_t pld = (int64_t)cu.gp * NR; /* the partial sums' row */
  /* a team's member: its rows [m0, m1) of A to copy or pack, and its panels of each group to make.
   * It computes C over the rows it copied and every panel where op(A) = A: A's rows and C's are
   * the step's tokens, which the kernels before and after share out the same way (rows that a
   * thread reads right after another core wrote them come from that core's cache, up to two to
   * three times slower). Where op(A) = A^T (a weight's gradient: A packed by blocks of 12 rows), it
   * computes every row over the panels it made: it reads those from its own second-level cache,
   * and A's blocks once a group (its rows instead, it read every panel once a block of rows, half
   * from the other core's cache: minimind256's weight gradients at two threads 7.17 -> 6.90 ms a
   * step). */
  int t = tm ? tm->t : 0, nt = tm ? tm->nt : 1, mb = (m + MR - 1) / MR;
  int m0 = ta ? rt_util_share(mb, t, nt) * MR : rt_util_share(m, t, nt);
  int m1 = ta ? rt_util_share(mb, t + 1, nt) * MR : rt_util_share(m, t + 1, nt);
  if (m1 > m) m1 = m;
  bool by_panels = tm && ta;
  int ra = by_panels ? 0 : m0, rb = by_panels ? m : m1; /* the rows it computes */
  if (!ta && lda > k) {
    for (int r = m0; r < m1; r++) memcpy(acont + (int64_t)r * k, A + r * lda, (size_t)k * sizeof *acont);
    A = acont, lda = k;
  } else if (packed) { /* op(A)[i + r][p] = A[p * lda + i + r]: block i / 12's column p, 12 floats at
                        * acont + (i * k + p * 12); A read 16 rows at a time (first-level cache), each
                        * block's 16 columns then written whole lines at once, the next 16 rows' same
                        * columns prefetched meanwhile (A comes from memory, and lines taken across
                        * rows are no stream to the hardware's prefetchers); a triangle's blocks only
                        * over the p they run over (below) */
    for (int p0 = 0; p0 < k; p0 += 16) {
      int p1 = k - p0 < 16 ? k : p0 + 16;
      for (int i = m0; i < m1; i += MR) {
        int64_t ai = (int64_t)row0 + i;
        if (tri == PP_TRI_UPPER && ai >= p1) break; /* this block and the next start past p1 */
        int pb = tri == PP_TRI_UPPER && ai > p0 ? (int)ai : p0;
        int pe = tri == PP_TRI_LOWER && ai + MR < p1 ? (int)(ai + MR) : p1;
        __mmask16 mm = lanes(m - i);
        for (int p = pb; p < pe; p++) {
          if (p + 16 < k) _mm_prefetch((const char *)(A + (int64_t)(p + 16) * lda + i), _MM_HINT_T0);
          _mm512_mask_storeu_ps(acont + (int64_t)i * k + p * MR, mm & 0xFFF,
                                _mm512_maskz_loadu_ps(mm, A + p * lda + i));
        }
      }
    }
  }
  int64_t ars = ta ? 1 : lda, acs = packed ? MR : ta ? lda : 1; /* op(A)[r][p] at a[r * ars + p * acs] */
  for (int q0 = 0; q0 < np; q0 += cu.gp) {
    int q1 = np - q0 < cu.gp ? np : q0 + cu.gp;
    for (int pc = 0; pc < k; pc += cu.kc) {
      int pe = k - pc < cu.kc ? k : pc + cu.kc, kn = pe - pc;
      int qa = q0 + rt_util_share(q1 - q0, t, nt), qb = q0 + rt_util_share(q1 - q0, t + 1, nt); /* the member's */
      if (tm && (q0 || pc)) tm->sync(tm->arg); /* every member done with the last group's panels */
      for (int q = qa; q < qb; q++)
        panel(tb, kn, tb ? B + pc : B + (int64_t)pc * ldb, ldb, q * NR, n - q * NR, bp + (int64_t)(q - q0) * NR * kn);
      if (tm) tm->sync(tm->arg);                              /* A packed, and every panel of the group made */
      int ca = by_panels ? qa : q0, cb = by_panels ? qb : q1; /* the panels it computes */
      for (int i = ra; i < rb; i += MR) {
        int mr = rb - i < MR ? rb - i : MR;
        int64_t ai = (int64_t)row0 + i; /* the block's first row in the whole product */
        int kb = a_first(tri, ai, k), ke = a_end(tri, ai, mr, k);
        int lo = kb > pc ? kb : pc, hi = ke < pe ? ke : pe;
        bool none = kb >= ke;
        if (none) { /* no products (upper, rows past K): alpha 0 + beta C, in the first pass */
          if (pc) continue;
          lo = hi = pc;
        } else if (lo >= hi) continue;                                        /* none in this pass */
        int qe = tri == PP_TRI_OUT ? out_panels(np, ai + mr - 1 - col0) : np; /* the block's last row's */
        const float *a = (packed ? acont + (int64_t)i * k : ta ? A + i : A + i * lda) + lo * acs;
        for (int q = ca; q < cb && q < qe; q++) {
          int w = n - q * NR;
          if (tri == PP_TRI_OUT && ai + mr - 1 - col0 < (int64_t)q * NR + 16)
            w = w < 16 ? w : 16; /* above the diagonal */
          float *pq = part + i * pld + (q - q0) * NR;
          Ends e = {!none && lo > kb ? pq : NULL, !none && hi < ke ? pq : NULL, pld};
          block_rows(mr, hi - lo, a, ars, acs, bp + (int64_t)(q - q0) * NR * kn + (int64_t)(lo - pc) * NR, NR, lanes(w),
                     lanes(w - 16), alpha, beta, C + i * ldc + q * NR, ldc, &e);
        }
      }
    }
  }
  if (tm) tm->sync(tm->arg); /* the work free for the next product */
}

int64_t rt_sgemm_work(bool ta, int m, int n, int k, int64_t lda) { return cut(m, n, k, copies_a(ta, n, k, lda)).total; }

bool rt_sgemm_one_group(int n, int k) {
  Cut c = cut(1, n, k, false);
  return c.nkb == 1 && c.gp >= (n + NR - 1) / NR;
}

static bool has_avx512(void) {
  static int avx512 = -1;
  if (avx512 < 0) avx512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
  return avx512;
}

bool rt_sgemm_fits(bool ta, int m, int n, int k, int64_t lda) {
  if (!has_avx512() || m < 1 || n < 1 || k < 1) return false;
  if (ta && m > RT_SGEMM_MAX_TM && (k > RT_SGEMM_MAX_T || m > RT_SGEMM_MAX_T || n > RT_SGEMM_MAX_T)) return false;
  return rt_sgemm_work(ta, m, n, k, lda) <= RT_SGEMM_MAX_WORK;
}

void rt_sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc, PpTri tri, int row0, int col0, float *work) {
  sgemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, tri, row0, col0, work, NULL);
}

void rt_sgemm_team(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int64_t lda, const float *B,
                   int64_t ldb, float beta, float *C, int64_t ldc, float *work, const RtSgemmTeam *tm) {
  sgemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, PP_TRI_NONE, 0, 0, work, tm->nt > 1 ? tm : NULL);
}

#else /* no AVX-512 path on this compiler or architecture: every product goes to the library */

bool rt_sgemm_fits(bool ta, int m, int n, int k, int64_t lda) {
  (void)ta, (void)m, (void)n, (void)k, (void)lda;
  return false;
}

int64_t rt_sgemm_work(bool ta, int m, int n, int k, int64_t lda) {
  (void)ta, (void)m, (void)n, (void)k, (void)lda;
  return 0;
}

bool rt_sgemm_one_group(int n, int k) {
  (void)n, (void)k;
  return false;
}

void rt_sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc, PpTri tri, int row0, int col0, float *work) {
  (void)tri, (void)row0, (void)col0;
  (void)work, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb,
      (void)beta;
  (void)C, (void)ldc;
}

void rt_sgemm_team(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int64_t lda, const float *B,
                   int64_t ldb, float beta, float *C, int64_t ldc, float *work, const RtSgemmTeam *tm) {
  rt_sgemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, PP_TRI_NONE, 0, 0, work);
  (void)tm;
}

#endif
