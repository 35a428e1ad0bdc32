/* test_gemm.c — the row-major to column-major mapping of a listing's GEMM (rt_gemm_colmajor, what
 * the cuda device hands cuBLASLt), checked on the CPU: for every distinct GEMM of the example
 * models' listings (every transpose, leading dimension, batch stride and batch count they use,
 * dense and on meshes), the mapped call run through OpenBLAS's column-major sgemm must write the
 * same C as the row-major call does. Then the cpu device's own GEMM for short products (rt_sgemm):
 * on those listings' GEMMs it takes and on a grid of shapes, transposes, leading dimensions, alpha
 * and beta, it must write exactly what a scalar chain of fused multiply-adds in k order writes, and
 * nothing outside C; with a triangle (tri:out, lower, upper) the same over the elements the triangle
 * wants, whole or split into parts as threads take them; and the same of a team of 2 or 3 threads
 * computing one product together (rt_sgemm_team). Last, the cpu device's triangles through
 * OpenBLAS (products longer than rt_sgemm's), against the whole product. The last line is "N passed,
 * M failed". */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_dev.h"
#include "rt_prog.h"
#include "rt_sgemm.h"

static int pass, fail;
static char bin[512] = "build";

static const char *const cases[][2] = {
    {"examples/tiny.pdl", "--attention gemm"}, /* attention's GEMMs and their triangles */
    {"tests/models/tiny_gpt2.pdl", ""},
    {"tests/models/tiny_untied.pdl", "--tp 2 --pp 2"},
    {"examples/tiny.pdl", "--tp 4"},
    {"examples/minimind.pdl", "--micro-batch 2 --seq 64 --attention gemm"},
    {"examples/minimind.pdl", "--micro-batch 2 --seq 64 --tp 2 --pp 2"},
    {"examples/gpt2.pdl", "--micro-batch 2 --seq 64"},
    {"examples/gpt2.pdl", "--micro-batch 2 --seq 64 --tp 2"},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
  va_list ap;
  printf("%s ", ok ? "PASS" : "FAIL");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  ok ? pass++ : fail++;
}

static uint64_t rng = 12345;
static float rnd(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 40) / (double)(1ull << 24)) * 2 - 1;
}

/* Elements spanned by batch matrices of rows x cols, leading dimension ld, stride apart. */
static int64_t span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  return (rows - 1) * ld + (batch - 1) * stride + cols;
}

/* The listing's semantics: for each batch element in order, C = alpha op(A) op(B) + beta C. */
static void run(CBLAS_ORDER order, const RtGemm *g, const float *A, const float *B, float *C) {
  for (int i = 0; i < g->batch; i++)
    cblas_sgemm(order, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, g->alpha,
                A + i * g->sa, g->lda, B + i * g->sb, g->ldb, g->beta, C + i * g->sc, g->ldc);
}

/* op(A)[i][p] of product b is outside g's triangle: a zero the program writes there (lower, upper) */
static bool a_masked(const RtGemm *g, int64_t i, int64_t p) {
  return (g->tri == PP_TRI_LOWER && p > i) || (g->tri == PP_TRI_UPPER && p < i);
}

/* g's operands over their whole spans, random in [-1, 1), op(A) zero outside a lower or upper
 * triangle; C0 and C1 alike (NaN when nan_c). Returns C's span. */
static int64_t operands(const RtGemm *g, float **A, float **B, float **C0, float **C1, bool nan_c) {
  int64_t na = span(g->ta ? g->k : g->m, g->ta ? g->m : g->k, g->lda, g->sa, g->batch);
  int64_t nb = span(g->tb ? g->n : g->k, g->tb ? g->k : g->n, g->ldb, g->sb, g->batch);
  int64_t nc = span(g->m, g->n, g->ldc, g->sc, g->batch);
  *A = malloc((size_t)na * 4), *B = malloc((size_t)nb * 4), *C0 = malloc((size_t)nc * 4), *C1 = malloc((size_t)nc * 4);
  for (int64_t i = 0; i < na; i++) (*A)[i] = rnd();
  for (int64_t i = 0; i < nb; i++) (*B)[i] = rnd();
  for (int64_t i = 0; i < nc; i++) (*C0)[i] = (*C1)[i] = nan_c ? NAN : rnd();
  for (int b = 0; b < g->batch; b++)
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t p = 0; p < g->k; p++)
        if (a_masked(g, i, p)) (*A)[b * g->sa + (g->ta ? p * g->lda + i : i * g->lda + p)] = 0.0f;
  return nc;
}

/* One product as rt_sgemm defines it: each element a chain of fmaf over k in order, times alpha, plus
 * beta C by one more fmaf (C not read when beta is 0); a lower or upper triangle's chain over its k
 * alone. A row of C's chains advance together, over op(B) copied row-major (the same fmaf in the
 * same order as element by element; fused, so the vectorizer changes no bits). */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,fma"), optimize("O3")))
#endif
static void
chain(const RtGemm *g, const float *A, const float *B, float *C) {
  float *b = malloc((size_t)g->k * g->n * sizeof *b), *acc = malloc((size_t)g->n * sizeof *acc);
  if (!b || !acc) {
    fprintf(stderr, "test_gemm: out of memory\n");
    exit(2);
  }
  for (int64_t p = 0; p < g->k; p++)
    for (int64_t j = 0; j < g->n; j++) b[p * g->n + j] = g->tb ? B[j * g->ldb + p] : B[p * g->ldb + j];
  for (int64_t i = 0; i < g->m; i++) {
    for (int j = 0; j < g->n; j++) acc[j] = 0;
    for (int64_t p = 0; p < g->k; p++) {
      if (a_masked(g, i, p)) continue;
      float a = g->ta ? A[p * g->lda + i] : A[i * g->lda + p];
      const float *bp = b + p * g->n;
      for (int j = 0; j < g->n; j++) acc[j] = fmaf(a, bp[j], acc[j]);
    }
    float *c = C + i * g->ldc;
    for (int j = 0; j < g->n; j++) {
      float r = g->alpha * acc[j];
      c[j] = g->beta != 0.0f ? fmaf(g->beta, c[j], r) : r;
    }
  }
  free(b);
  free(acc);
}

/* rt_sgemm's value y against the chain's x: other bits, but for the sign of a zero (a triangle's
 * chain leaves out products with op(A)'s zeros) */
static bool differs(float x, float y) { return memcmp(&x, &y, sizeof x) && !(x == 0.0f && y == 0.0f); }

/* Element e of C's span is one that g's triangle does not want (tri:out, j > i): unspecified. */
static bool unwanted(const RtGemm *g, int64_t e) {
  if (g->tri != PP_TRI_OUT) return false;
  for (int b = 0; b < g->batch; b++) { /* the product holding e (C's products are disjoint) */
    int64_t off = e - b * g->sc, i = off / g->ldc, j = off % g->ldc;
    if (off >= 0 && i < g->m && j < g->n) return j > i;
  }
  return false;
}

/* A team of nt threads on one product (rt_sgemm_team, a pthread barrier for its sync). */
typedef struct {
  const RtGemm *g;
  const float *A, *B;
  float *C, *W;
  int t, nt;
  pthread_barrier_t *bar;
} Member;

static void member_sync(void *arg) { pthread_barrier_wait(arg); }

static void *member_run(void *arg) {
  Member *mb = arg;
  const RtGemm *g = mb->g;
  RtSgemmTeam tm = {mb->t, mb->nt, member_sync, mb->bar};
  rt_sgemm_team(g->ta, g->tb, g->m, g->n, g->k, g->alpha, mb->A, g->lda, mb->B, g->ldb, g->beta, mb->C, g->ldc, mb->W,
                &tm);
  return NULL;
}

/* rt_sgemm on g's batch against chain, bit for bit, over C's whole span (elements between rows must
 * keep their values; a BETA 0 C starts as NaN, which must not leak in), but for the elements g's
 * triangle does not want and the sign of a zero (a triangle's chain leaves out products with op(A)'s
 * zeros). split: each product in four parts, as threads take one (rows and columns halved); team
 * (2 or more, no triangle): each product by rt_sgemm_team with that many threads. 0 when equal,
 * else prints. */
static int own_differs_in(const RtGemm *g, bool split, int team) {
  float *A, *B, *C0, *C1,
      *W = aligned_alloc(64, (size_t)(rt_sgemm_work(g->ta, g->m, g->n, g->k, g->lda) + 16) / 16 * 64);
  int64_t nc = operands(g, &A, &B, &C0, &C1, g->beta == 0.0f);
  int rs[3] = {0, split ? g->m / 2 : g->m, g->m}, cs[3] = {0, split ? g->n / 2 : g->n, g->n};
  for (int i = 0; i < g->batch; i++) {
    chain(g, A + i * g->sa, B + i * g->sb, C0 + i * g->sc);
    if (team > 1) {
      pthread_barrier_t bar;
      pthread_barrier_init(&bar, NULL, (unsigned)team);
      pthread_t th[8];
      Member mb[8];
      for (int t = 0; t < team; t++) {
        mb[t] = (Member){g, A + i * g->sa, B + i * g->sb, C1 + i * g->sc, W, t, team, &bar};
        if (pthread_create(&th[t], NULL, member_run, &mb[t])) {
          fprintf(stderr, "test_gemm: pthread_create failed\n");
          exit(2);
        }
      }
      for (int t = 0; t < team; t++) pthread_join(th[t], NULL);
      pthread_barrier_destroy(&bar);
      continue;
    }
    for (int r = 0; r < 2; r++)
      for (int c = 0; c < 2; c++) {
        int r0 = rs[r], r1 = rs[r + 1], c0 = cs[c], c1 = cs[c + 1];
        if (r1 <= r0 || c1 <= c0) continue;
        rt_sgemm(g->ta, g->tb, r1 - r0, c1 - c0, g->k, g->alpha, A + i * g->sa + (int64_t)r0 * (g->ta ? 1 : g->lda),
                 g->lda, B + i * g->sb + (int64_t)c0 * (g->tb ? g->ldb : 1), g->ldb, g->beta,
                 C1 + i * g->sc + (int64_t)r0 * g->ldc + c0, g->ldc, g->tri, r0, c0, W);
      }
  }
  int64_t at = -1;
  for (int64_t i = 0; i < nc && at < 0; i++)
    if (differs(C0[i], C1[i]) && !unwanted(g, i)) at = i;
  char how[32] = "";
  if (team > 1) snprintf(how, sizeof how, " (a team of %d)", team);
  else if (split) snprintf(how, sizeof how, " (in parts)");
  if (at >= 0)
    printf("  rt_sgemm %c %c %d %d %d alpha %g beta %g lda %d ldb %d ldc %d batch %d tri %s%s: C[%lld] is %.9g, the "
           "fma chain %.9g\n",
           g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->m, g->n, g->k, g->alpha, g->beta, g->lda, g->ldb, g->ldc, g->batch,
           pp_tri_name(g->tri), how, (long long)at, C1[at], C0[at]);
  free(A), free(B), free(C0), free(C1), free(W);
  return at >= 0;
}

static int own_differs(const RtGemm *g) { return own_differs_in(g, false, 0); }

static int same(const RtGemm *a, const RtGemm *b) {
  return a->ta == b->ta && a->tb == b->tb && a->m == b->m && a->n == b->n && a->k == b->k && a->lda == b->lda &&
         a->ldb == b->ldb && a->ldc == b->ldc && a->sa == b->sa && a->sb == b->sb && a->sc == b->sc &&
         a->batch == b->batch && a->alpha == b->alpha && a->beta == b->beta && a->tri == b->tri;
}

/* pp_tri_macs, the FLOP counts' multiply-adds of a triangle, against counting them one by one */
static void tri_macs(void) {
  int bad = 0, n = 0;
  for (int t = PP_TRI_NONE; t <= PP_TRI_UPPER; t++)
    for (int m = 1; m < 14; m++)
      for (int nn = 1; nn < 14; nn++)
        for (int k = 1; k < 14; k += 3, n++) {
          double c = 0;
          for (int i = 0; i < m; i++)
            for (int j = 0; j < nn; j++)
              for (int p = 0; p < k; p++)
                c += !((t == PP_TRI_OUT && j > i) || (t == PP_TRI_LOWER && p > i) || (t == PP_TRI_UPPER && p < i));
          bad += c != pp_tri_macs((PpTri)t, m, nn, k);
        }
  check(bad == 0, "pp_tri_macs: %d shapes of each triangle (M, N 1..13, K 1..13): %d counts differ", n / 4, bad);
}

/* One f32 product C[m, n] = alpha op(A) op(B) + beta C (ab: alpha and beta), A and B with pad
 * elements past their columns in each row, C's rows ldc apart. */
static RtGemm one_product(int ta, int tb, int m, int n, int k, const float ab[2], int pad, int ldc, PpTri tri) {
  return (RtGemm){ta,
                  tb,
                  m,
                  n,
                  k,
                  1,
                  ab[0],
                  ab[1],
                  0,
                  0,
                  0,
                  (ta ? m : k) + pad,
                  (tb ? k : n) + pad,
                  ldc,
                  0,
                  0,
                  0,
                  {PP_F32, PP_F32, PP_F32},
                  tri};
}

/* The cpu device's triangles of 600 and 613 rows (split over threads as the device splits), op(A)
 * zero outside a lower or upper triangle, over the elements each triangle wants: through OpenBLAS
 * (lib: PPR_CPU_GEMM=openblas, a product per block of rows; else op(A) = A^T past rt_sgemm's
 * sizes) against the whole product through OpenBLAS, and those rt_sgemm takes (op(A) = A) bit for
 * bit against the chain. */
static void tri_device(bool lib) {
  char err[512];
  RtDev *d = NULL;
  if (lib) setenv("PPR_CPU_GEMM", "openblas", 1);
  int rc = rt_dev_open("cpu", 0, &d, err, sizeof err);
  unsetenv("PPR_CPU_GEMM");
  if (rc) {
    check(0, "cpu device: %s", err);
    return;
  }
  int own = 0;
  int bad = 0, n = 0;
  if (rt_dev_alloc(d, (int64_t)3 * 2 * 613 * 613 * 4)) { /* the largest case's A, B and C */
    check(0, "cpu device: %s", d->err);
    rt_dev_close(d);
    return;
  }
  for (int tri = PP_TRI_OUT; tri <= PP_TRI_UPPER; tri++)
    for (int batch = 1; batch <= 2; batch++)
      for (int ta = 0; ta < 2; ta++) {
        int s = 600 + 13 * ta, dd = 70;
        int m = s, nn = tri == PP_TRI_OUT ? s : dd, k = tri == PP_TRI_OUT ? dd : s;
        RtGemm g = {ta,
                    batch == 2,
                    m,
                    nn,
                    k,
                    batch,
                    0.5f,
                    batch == 2 ? 1.0f : 0.0f,
                    0,
                    0,
                    0,
                    ta ? m : k,
                    batch == 2 ? k : nn,
                    nn,
                    (int64_t)m * k,
                    (int64_t)k * nn,
                    (int64_t)m * nn,
                    {PP_F32, PP_F32, PP_F32},
                    (PpTri)tri};
        float *A, *B, *C0, *C1;
        int64_t nc = operands(&g, &A, &B, &C0, &C1, false);
        int64_t na = (int64_t)batch * m * k, nb = (int64_t)batch * k * nn;
        g.b = na * 4, g.c = (na + nb) * 4;
        bool chained = !lib && rt_sgemm_fits(g.ta, m, nn, k, g.lda);
        own += chained;
        if (chained)
          for (int i = 0; i < batch; i++) chain(&g, A + i * g.sa, B + i * g.sb, C0 + i * g.sc);
        else run(CblasRowMajor, &g, A, B, C0);
        if (rt_dev_write(d, 0, A, na * 4) || rt_dev_write(d, g.b, B, nb * 4) || rt_dev_write(d, g.c, C1, nc * 4) ||
            rt_dev_gemm(d, &g) || rt_dev_read(d, g.c, C1, nc * 4)) {
          check(0, "cpu device: %s", d->err);
          bad++;
        } else {
          double worst = 0, big = 1;
          for (int64_t i = 0; i < nc; i++)
            if (!unwanted(&g, i)) {
              double e = fabs((double)C0[i] - C1[i]);
              if (chained && differs(C0[i], C1[i])) e = INFINITY;
              if (e > worst || e != e) worst = e;
              if (fabs(C0[i]) > big) big = fabs(C0[i]);
            }
          n++;
          if (!(worst <= 1e-6 * big)) { /* OpenBLAS sums a shorter k in another order */
            bad++;
            printf(
                "  cpu device tri:%s %c %c %d %d %d batch %d: differs from the whole product by %.3g (largest %.3g)\n",
                pp_tri_name(g.tri), ta ? 'T' : 'N', g.tb ? 'T' : 'N', m, nn, k, batch, worst, big);
          }
        }
        free(A), free(B), free(C0), free(C1);
      }
  rt_dev_close(d);
  bool avx512 = rt_sgemm_fits(false, 1, 1, 1, 1); /* without it every product goes to OpenBLAS */
  check(n == 12 && bad == 0 && (lib || !avx512 ? own == 0 : own > 0 && own < n),
        "cpu device%s: %d triangles (tri:out, lower, upper; S 600 and 613; one product and a batch of two; BETA 0 and "
        "1), %d through OpenBLAS: the whole product's values where wanted; %d on rt_sgemm: the chain's bits",
        lib ? " with PPR_CPU_GEMM=openblas" : "", n, n - own, own);
}

/* ---- GEMM epilogues in cuBLASLt's terms (rt_gemm_lt_epilogue) ---- */

static float gelu(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))); }
static float dgelu(float x) {
  float t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
  return 0.5f * (1 + t) + 0.5f * x * (1 - t * t) * 0.7978845608f * (1 + 3 * 0.044715f * x * x);
}

/* Row-major g with epilogue kind (bias: gelu with a bias) run two ways over one arena of floats:
 * as the listing defines the pair (the GEMM, then its kernel over C's rows and columns), and as
 * cuBLASLt defines its epilogue over the column-major form rt_gemm_lt_epilogue gives (a bias
 * element per row of the column-major D, GELU's input matrix aux_ld apart). The largest difference
 * of D and GELU's input, relative; -1 when rt_gemm_lt_epilogue refused. */
static double lt_epilogue_differs(RtGemm g, PpEpi kind, bool bias) {
  int64_t mn = (int64_t)g.m * g.n, na = (int64_t)g.m * g.k, nb = (int64_t)g.k * g.n;
  g.lda = g.ta ? g.m : g.k, g.ldb = g.tb ? g.k : g.n, g.ldc = g.n, g.batch = 1, g.alpha = 1, g.beta = 0;
  /* floats: A, B, C, D, X (dgelu's input; gelu's written over C), bias; 16-byte aligned */
  int64_t at[7] = {0};
  int64_t size[6] = {na, nb, mn, mn, mn, g.n};
  for (int i = 0; i < 6; i++) at[i + 1] = at[i] + (size[i] + 3) / 4 * 4;
  float *r = malloc((size_t)at[6] * 4), *c = malloc((size_t)at[6] * 4);
  for (int64_t i = 0; i < at[6]; i++) r[i] = c[i] = rnd() * 2;
  g.a = at[0] * 4, g.b = at[1] * 4, g.c = at[2] * 4;
  RtEpi e = {kind, kind == PP_EPI_BIAS ? g.c : at[3] * 4,
             kind == PP_EPI_GELU    ? g.c
             : kind == PP_EPI_DGELU ? at[4] * 4
                                    : -1,
             bias ? at[5] * 4 : -1};
  RtLtGemm lt;
  char why[128];
  if (rt_gemm_lt_epilogue(&g, &e, &lt, why, sizeof why)) {
    free(r), free(c);
    return -1;
  }
  /* the listing: C = op(A) op(B), then the kernel row by row */
  cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1,
              r + at[0], g.lda, r + at[1], g.ldb, 0, r + at[2], g.ldc);
  for (int64_t i = 0; i < g.m; i++)
    for (int64_t j = 0; j < g.n; j++) {
      float *cc = r + at[2] + i * g.n + j, *d = r + at[3] + i * g.n + j;
      if (kind == PP_EPI_GELU) *cc += bias ? r[at[5] + j] : 0, *d = gelu(*cc);
      else if (kind == PP_EPI_DGELU) *d = *cc * dgelu(r[at[4] + i * g.n + j]);
      else *cc += r[at[5] + j];
    }
  /* cuBLASLt: D = op(A') op(B') column-major, then its epilogue element by element */
  const RtGemm *m = &lt.m;
  cblas_sgemm(CblasColMajor, m->ta ? CblasTrans : CblasNoTrans, m->tb ? CblasTrans : CblasNoTrans, m->m, m->n, m->k, 1,
              c + m->a / 4, m->lda, c + m->b / 4, m->ldb, 0, c + m->c / 4, m->ldc);
  for (int64_t col = 0; col < m->n; col++)
    for (int64_t row = 0; row < m->m; row++) {
      float *d = c + m->c / 4 + col * m->ldc + row, *aux = c + lt.aux / 4 + col * lt.aux_ld + row;
      switch (lt.epi) {
      case RT_LT_GELU_AUX_BIAS: *d += c[lt.bias / 4 + row]; /* fall through */
      case RT_LT_GELU_AUX: *aux = *d, *d = gelu(*d); break;
      case RT_LT_DGELU: *d *= dgelu(*aux); break;
      case RT_LT_BIAS: *d += c[lt.bias / 4 + row]; break;
      }
    }
  double worst = 0, big = 1;
  for (int64_t i = 0; i < at[6]; i++) {
    if (kind == PP_EPI_DGELU && i >= at[2] && i < at[3]) continue; /* C: not written by cuBLASLt, and unspecified */
    double x = fabs((double)r[i] - c[i]);
    if (x > worst || x != x) worst = x;
    if (fabs(r[i]) > big) big = fabs(r[i]);
  }
  free(r), free(c);
  return worst / big;
}

/* Every GEMM with an epilogue in the listings, and shapes about them, through both definitions;
 * what cuBLASLt cannot take refused. */
static void lt_epilogues(const RtGemm *listed, const PpEpi *lkind, const bool *lbias, int nlisted) {
  int n = 0, bad = 0, kinds[PP_EPI_COUNT] = {0};
  for (int i = 0; i < nlisted; i++) {
    double d = lt_epilogue_differs(listed[i], lkind[i], lbias[i]);
    n++, kinds[lkind[i]]++;
    if (!(d >= 0 && d <= 1e-6)) bad++;
  }
  check(nlisted > 0 && kinds[PP_EPI_GELU] && kinds[PP_EPI_DGELU] && kinds[PP_EPI_BIAS] && bad == 0,
        "cuBLASLt's epilogues: %d GEMMs with epi: in the listings (%d gelu, %d dgelu, %d bias), the column-major "
        "form rt_gemm_lt_epilogue gives, its epilogue as cuBLASLt defines it, writes D and GELU's input as the "
        "GEMM and its kernel do (%d differ by more than 1e-6)",
        n, kinds[PP_EPI_GELU], kinds[PP_EPI_DGELU], kinds[PP_EPI_BIAS], bad);
  static const int shapes[][5] = {{1, 8, 1, 0, 0}, {37, 24, 5, 0, 1}, {64, 96, 48, 1, 0}, {13, 16, 100, 1, 1}};
  n = 0, bad = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int k = PP_EPI_GELU; k < PP_EPI_COUNT; k++)
      for (int b = k == PP_EPI_BIAS; b <= (k != PP_EPI_DGELU); b++) { /* gelu with a bias and without */
        const int *sh = shapes[s];
        RtGemm g = {.ta = sh[3], .tb = sh[4], .m = sh[0], .n = sh[1], .k = sh[2], .dt = {PP_F32, PP_F32, PP_F32}};
        double d = lt_epilogue_differs(g, (PpEpi)k, b);
        n++, bad += !(d >= 0 && d <= 1e-6);
      }
  check(n == 16 && bad == 0,
        "cuBLASLt's epilogues: %d shapes (every transpose, gelu with and without bias, dgelu, bias): %d differ", n,
        bad);
  /* what cuBLASLt does not take: the device runs the GEMM and the kernel */
  RtGemm ok = {
      .m = 4, .n = 16, .k = 8, .batch = 1, .alpha = 1, .lda = 8, .ldb = 16, .ldc = 16, .dt = {PP_F32, PP_F32, PP_F32}};
  RtEpi e = {PP_EPI_GELU, 0, 256, 512};
  RtLtGemm lt;
  char why[128] = "";
  RtGemm odd = ok, batched = ok, beta = ok, wide = ok;
  odd.n = 12, odd.ldc = 12, batched.batch = 2, beta.beta = 1, wide.ldc = 24;
  RtEpi skew = e, dgb = {PP_EPI_DGELU, 0, 256, 512}, eb = {PP_EPI_BIAS, 0, -1, 512}, nob = {PP_EPI_BIAS, 0, -1, -1};
  skew.bias = 516;
  int taken = rt_gemm_lt_epilogue(&ok, &e, &lt, why, sizeof why) == 0 && lt.epi == RT_LT_GELU_AUX_BIAS &&
              lt.aux_ld == 16 && lt.m.m == 16 && lt.m.n == 4 && lt.m.c == 0 && lt.aux == 256 && lt.bias == 512;
  taken = taken && rt_gemm_lt_epilogue(&odd, &eb, &lt, why, sizeof why) == 0 && lt.epi == RT_LT_BIAS && lt.aux < 0 &&
          lt.bias == 512; /* no GELU matrix: N need not be a multiple of 8 */
  int refused = 0;
  const char *reasons = "";
  static char all[512];
  all[0] = 0;
  struct {
    const RtGemm *g;
    const RtEpi *e;
  } no[] = {{&odd, &e}, {&batched, &e}, {&beta, &e}, {&wide, &e}, {&ok, &skew}, {&ok, &dgb}, {&ok, &nob}};
  for (size_t i = 0; i < sizeof no / sizeof *no; i++)
    if (rt_gemm_lt_epilogue(no[i].g, no[i].e, &lt, why, sizeof why)) {
      refused++;
      snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", i ? "; " : "", why);
    }
  reasons = all;
  check(taken && refused == 7,
        "rt_gemm_lt_epilogue: gelu with a bias over a 4 x 16 C becomes GELU_AUX_BIAS over the 16 x 4 column-major D "
        "(aux_ld 16), a bias over 4 x 12 BIAS; %d of 7 refused: %s",
        refused, reasons);
}

int main(int argc, char **argv) {
  (void)argc;
  const char *slash = strrchr(argv[0], '/');
  if (slash) snprintf(bin, sizeof bin, "%.*s", (int)(slash - argv[0]), argv[0]);
  RtGemm *seen = calloc(8192, sizeof *seen), epi_g[64];
  PpEpi epi_k[64];
  bool epi_b[64];
  int nepi = 0;
  int nseen = 0, kinds[2][2] = {{0}}, batched = 0, shared_c = 0;
  for (int c = 0; c < NCASES; c++) {
    char dir[900], cmd[4096];
    snprintf(dir, sizeof dir, "%s/gemm/case%d", bin, c);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && %s/ppc %s %s -o %s > /dev/null", dir, dir, bin, cases[c][0],
             cases[c][1], dir);
    if (system(cmd)) {
      check(0, "%s %s: ppc failed", cases[c][0], cases[c][1]);
      continue;
    }
    int tp = 1, pp = 1, dp = 1, cp = 1;
    char prog[1000], err[2048];
    snprintf(prog, sizeof prog, "%s/rank0.prog", dir);
    if (rt_prog_read_mesh(prog, &tp, &pp, &dp, &cp, err, sizeof err)) {
      check(0, "%s", err);
      continue;
    }
    for (int s = 0; s < pp; s++) {
      RtProg *p = NULL;
      snprintf(prog, sizeof prog, "%s/rank%d.prog", dir, s * tp);
      if (rt_prog_load(prog, &p, err, sizeof err)) {
        check(0, "%s", err);
        continue;
      }
      for (int b = 0; b < RT_NBLK; b++)
        for (int i = 0; i < p->blk[b].n; i++) {
          const RtInstr *in = &p->blk[b].ins[i];
          if (in->kind != RT_I_GEMM) continue;
          RtGemm g = {in->ta,    in->tb,   in->m,  in->n,  in->k,  in->batch,
                      in->alpha, in->beta, 0,      0,      0,      in->lda,
                      in->ldb,   in->ldc,  in->sa, in->sb, in->sc, {in->dt[0], in->dt[1], in->dt[2]},
                      in->tri};
          int dup = 0;
          for (int k = 0; k < nseen && !dup; k++) dup = same(&seen[k], &g);
          if (!dup && nseen < 8192) seen[nseen++] = g;
          if (in->epi != PP_EPI_NONE && !dup && nepi < 64) /* its kernel next: gelu's third argument the bias */
            epi_g[nepi] = g, epi_k[nepi] = in->epi,
            epi_b[nepi++] = pp_epi_bias[in->epi] >= 0 && in[1].nargs > pp_epi_bias[in->epi];
        }
      rt_prog_free(p);
    }
  }
  /* a form the format allows and today's listings no longer use: batches adding into one C (SC =
   * 0), as a head's weight gradient was when ppc kept the head's transpose after it (dW[V,H] +=
   * dlogits[b]^T x[:, b, :] for each sequence b) */
  seen[nseen++] = (RtGemm){
      1, 0, 24, 16, 8, 3, 1.0f, 1.0f, 0, 0, 0, 24, 3 * 16, 16, 8 * 24, 16, 0, {PP_F32, PP_F32, PP_F32}, PP_TRI_NONE};
  int bad = 0;
  for (int t = 0; t < nseen; t++) {
    const RtGemm *g = &seen[t];
    kinds[g->ta][g->tb]++;
    batched += g->batch > 1;
    shared_c += g->batch > 1 && g->sc == 0;
    float *A, *B, *C0, *C1;
    int64_t nc = operands(g, &A, &B, &C0, &C1, false);
    run(CblasRowMajor, g, A, B, C0);
    RtGemm m = rt_gemm_colmajor(g);
    run(CblasColMajor, &m, B, A, C1); /* the column-major call's A is the row-major B's storage */
    double worst = 0, big = 0;
    for (int64_t i = 0; i < nc; i++) {
      double e = fabs((double)C0[i] - C1[i]);
      if (e > worst || e != e) worst = e;
      if (fabs(C0[i]) > big) big = fabs(C0[i]);
    }
    if (!(worst <= 1e-6 * (big > 1 ? big : 1))) {
      bad++;
      check(0,
            "gemm %c %c %d %d %d lda %d sa %lld ldb %d sb %lld ldc %d sc %lld batch %d: the column-major form differs "
            "by %.3g",
            g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->m, g->n, g->k, g->lda, (long long)g->sa, g->ldb, (long long)g->sb,
            g->ldc, (long long)g->sc, g->batch, worst);
    }
    free(A), free(B), free(C0), free(C1);
  }
  check(
      bad == 0 && nseen > 0 && kinds[0][0] && kinds[0][1] && kinds[1][0] && batched && shared_c,
      "%d distinct GEMMs of the examples' listings and one more (N N %d, N T %d, T N %d, T T %d; %d batched, %d adding "
      "batches into one C): the column-major form cuBLASLt gets writes the same C through OpenBLAS",
      nseen, kinds[0][0], kinds[0][1], kinds[1][0], kinds[1][1], batched, shared_c);

  /* rt_sgemm: the listings' GEMMs it takes, then a grid over its blocks' edges */
  if (!rt_sgemm_fits(false, 1, 1, 1, 1)) {
    check(1, "rt_sgemm: this CPU has no AVX-512; every GEMM goes to OpenBLAS (%d listing GEMMs)", nseen);
  } else {
    int taken = 0, wrong = 0, tris = 0;
    for (int t = 0; t < nseen; t++)
      if (rt_sgemm_fits(seen[t].ta, seen[t].m, seen[t].n, seen[t].k, seen[t].lda))
        taken++, tris += seen[t].tri != PP_TRI_NONE, wrong += own_differs(&seen[t]);
    check(taken > 0 && tris > 0 && wrong == 0,
          "rt_sgemm: %d of the %d listing GEMMs are short enough for it (%d with a triangle); %d differ from "
          "the fma chain",
          taken, nseen, tris, wrong);
    static const int ms[] = {1, 5, 12, 13, 37, 128, 300}, ns[] = {1, 15, 16, 17, 31, 33, 64, 100, 512},
                     ks[] = {1, 7, 37, 64, 128, 512};
    static const float ab[][2] = {{1, 0}, {0.125f, 1}, {-0.5f, 0.75f}};
    int n = 0;
    wrong = 0;
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
          for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
              int m = ms[mi], nn = ns[ni], k = ks[ki], v = (int)(mi + ni + ki);
              /* leading dimensions packed or far apart (a page: rt_sgemm compacts such rows first) */
              int pad = v % 3 == 0 ? 0 : v % 3 == 1 ? 3 : 1024;
              RtGemm g = one_product(ta, tb, m, nn, k, ab[v % 3], pad, nn + (v % 2) * 5, PP_TRI_NONE);
              if (!rt_sgemm_fits(ta, m, nn, k, g.lda)) continue;
              n++, wrong += own_differs(&g);
            }
    check(n == (int)(4 * sizeof ms / sizeof *ms * sizeof ns / sizeof *ns * sizeof ks / sizeof *ks) && wrong == 0,
          "rt_sgemm: %d shapes (all four transposes, M 1..300, N 1..512, K 1..512, packed "
          "and strided operands, BETA 0, 1 and 0.75): %d differ from the fma chain",
          n, wrong);
    /* past a sequence's sizes, op(A) = A only: the linear layers' and the head's products */
    static const int big[][4] = {{1037, 97, 1500, PP_TRI_NONE},  {600, 700, 64, PP_TRI_NONE},
                                 {97, 1100, 704, PP_TRI_NONE},   {1030, 45, 6400, PP_TRI_NONE},
                                 {1100, 45, 1030, PP_TRI_UPPER}, {1030, 45, 1100, PP_TRI_LOWER},
                                 {300, 310, 1500, PP_TRI_OUT}};
    n = 0, wrong = 0;
    for (int tb = 0; tb < 2; tb++)
      for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
        int m = big[i][0], nn = big[i][1], k = big[i][2], v = (int)i + tb;
        RtGemm g = one_product(0, tb, m, nn, k, ab[v % 3], v % 2 ? 3 : 0, nn + (v % 2) * 5, (PpTri)big[i][3]);
        if (!rt_sgemm_fits(false, m, nn, k, g.lda)) continue;
        n++, wrong += own_differs_in(&g, tb, 0);
      }
    check(n == 14 && wrong == 0 && !rt_sgemm_fits(true, 600, 64, 64, 600) && !rt_sgemm_fits(true, 300, 64, 600, 300) &&
              rt_sgemm_fits(true, RT_SGEMM_MAX_TM, 704, 6400, RT_SGEMM_MAX_TM) &&
              rt_sgemm_fits(false, 1024, 151936, 896, 896) && rt_sgemm_fits(false, 1024, 896, 151936, 151936) &&
              !rt_sgemm_fits(false, 20000, 64, 1000, 1001),
          "rt_sgemm: %d products past 512 (op(A) = A; M to 1100, N to 1100 in groups of columns, K to 6400 in passes; "
          "lower, upper and out triangles, rows past K; whole and in four parts): %d differ from the fma chain; a "
          "151936-word vocabulary as N or K is its, op(A) = A^T past 512 with M past %d and work past %lld floats "
          "(20000 rows copied contiguous) OpenBLAS's",
          n, wrong, RT_SGEMM_MAX_TM, (long long)RT_SGEMM_MAX_WORK);
    /* a team of threads on one product: op(A) = A^T (weights' gradients: M up to RT_SGEMM_MAX_TM, K
     * the tokens) and the others, groups of panels (N 704 at K 1024: three), passes over K (1500:
     * two), A packed (N past 96) or read where it lies, rows apart; teams of 2 and 3 */
    static const int tms[] = {1, 13, 37, RT_SGEMM_MAX_TM}, tns[] = {1, 33, 100, 704}, tks[] = {7, 1024, 1500};
    n = 0, wrong = 0;
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (size_t mi = 0; mi < sizeof tms / sizeof *tms; mi++)
          for (size_t ni = 0; ni < sizeof tns / sizeof *tns; ni++)
            for (size_t ki = 0; ki < sizeof tks / sizeof *tks; ki++) {
              int m = tms[mi], nn = tns[ni], k = tks[ki], v = (int)(mi + ni + ki) + ta + tb;
              RtGemm g =
                  one_product(ta, tb, m, nn, k, ab[v % 3], v % 3 == 2 ? 1024 : v % 3, nn + (v % 2) * 5, PP_TRI_NONE);
              if (!rt_sgemm_fits(ta, m, nn, k, g.lda)) continue;
              n++, wrong += own_differs_in(&g, false, 2 + v % 2);
            }
    check(n == 4 * (int)(sizeof tms / sizeof *tms * sizeof tns / sizeof *tns * sizeof tks / sizeof *tks) && wrong == 0,
          "rt_sgemm_team: %d products (all four transposes; M 1..%d, N 1..704 in up to 3 groups of panels, K 7..1500 "
          "in up to 2 passes; teams of 2 and 3 threads): %d differ from one thread's fma chain",
          n, RT_SGEMM_MAX_TM, wrong);
    /* triangles: S x S scores (out) or an S x S op(A) (lower, upper), square and not, every
     * transpose, the block edges, whole and in the parts threads take */
    static const int ss[] = {1, 12, 13, 40, 100, 257, 512}, dd[] = {1, 33, 96};
    n = 0, wrong = 0;
    for (int tri = PP_TRI_OUT; tri <= PP_TRI_UPPER; tri++)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
          for (size_t si = 0; si < sizeof ss / sizeof *ss; si++)
            for (size_t di = 0; di < sizeof dd / sizeof *dd; di++) {
              int v = (int)(si + di) + ta + tb + tri, s = ss[si], d = dd[di], wide = s < 500 ? (v % 2) * 7 : 0;
              int m = s, nn = tri == PP_TRI_OUT ? s + wide : d, k = tri == PP_TRI_OUT ? d : s + wide;
              int pad = v % 3 == 1 ? 3 : 0;
              RtGemm g = one_product(ta, tb, m, nn, k, ab[v % 3], pad, nn + (v % 2) * 5, (PpTri)tri);
              if (!rt_sgemm_fits(ta, m, nn, k, g.lda)) continue;
              n++, wrong += own_differs_in(&g, false, 0) + own_differs_in(&g, true, 0);
            }
    check(n == 3 * 4 * (int)(sizeof ss / sizeof *ss * sizeof dd / sizeof *dd) && wrong == 0,
          "rt_sgemm: %d triangles (tri:out, lower and upper; all four transposes; S 1..512, square and not; "
          "whole and in four parts): %d differ from the fma chain over the triangle",
          n, wrong);
  }
  lt_epilogues(epi_g, epi_k, epi_b, nepi);
  tri_device(true);
  tri_device(false);
  tri_macs();
  free(seen);
  printf("%d passed, %d failed\n", pass, fail);
  return fail != 0;
}
