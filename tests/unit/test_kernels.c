/* test_kernels.c - unit tests for kernels/attention.h: row kernels vs a naive float64 reference, and the reference vs finite differences. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The C prelude the generated sources put before the kernel templates. */
#define PPK_FN static inline
#define PPK_RESTRICT restrict
#define PPK_NEG_INF (-INFINITY)
#define PPK_MAX_HEAD_DIM 256
#include "../../kernels/attention.h"

typedef struct {
    int pass, fail;
} T;

#if defined(__GNUC__)
#define T_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define T_PRINTF(a, b)
#endif

static int check(T *t, int ok, const char *fmt, ...) T_PRINTF(3, 4);
static int check(T *t, int ok, const char *fmt, ...) {
    va_list ap;
    printf("%s: ", ok ? "PASS" : "FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (ok) t->pass++;
    else t->fail++;
    return ok;
}

/* ---- helpers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double rnd(void) { /* xorshift64*, uniform in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* ||a - b|| / ||b||; falls back to the absolute ||a - b|| when the reference is ~0.
 * NaN anywhere makes the result NaN (and the check fails). */
static double rel_err_fd(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t x = 0; x < n; x++) {
        double e = (double)a[x] - b[x];
        num += e * e;
        den += b[x] * b[x];
    }
    return den > 1e-24 ? sqrt(num / den) : sqrt(num);
}
static double rel_err_dd(const double *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t x = 0; x < n; x++) {
        double e = a[x] - b[x];
        num += e * e;
        den += b[x] * b[x];
    }
    return den > 1e-24 ? sqrt(num / den) : sqrt(num);
}

typedef struct {
    int64_t S, B, HQ, HK, D;
} Shape;

/* Index helpers for the sequence-first layouts. */
static size_t iq(const Shape *s, int64_t i, int64_t b, int64_t h, int64_t d) { return (size_t)(((i * s->B + b) * s->HQ + h) * s->D + d); }
static size_t ik(const Shape *s, int64_t j, int64_t b, int64_t g, int64_t d) { return (size_t)(((j * s->B + b) * s->HK + g) * s->D + d); }
static size_t il(const Shape *s, int64_t b, int64_t h, int64_t i) { return (size_t)((b * s->HQ + h) * s->S + i); }

/* ---- naive float64 reference with full softmax matrices ---- */

/* P[i*S + j] for one (b, h): the masked softmax of scale * q_i.k_j over j. Also lse_i. */
static void ref_probs(const Shape *s, const double *q, const double *k, double scale, int causal, int64_t b, int64_t h,
                      double *P, double *lse_bh) {
    int64_t S = s->S, D = s->D, g = h / (s->HQ / s->HK);
    for (int64_t i = 0; i < S; i++) {
        double m = -INFINITY;
        for (int64_t j = 0; j < S; j++) {
            double sc = -INFINITY;
            if (!causal || j <= i) {
                sc = 0;
                for (int64_t d = 0; d < D; d++) sc += q[iq(s, i, b, h, d)] * k[ik(s, j, b, g, d)];
                sc *= scale;
            }
            P[i * S + j] = sc;
            if (sc > m) m = sc;
        }
        double l = 0;
        for (int64_t j = 0; j < S; j++) l += exp(P[i * S + j] - m);
        double lse = m + log(l);
        for (int64_t j = 0; j < S; j++) P[i * S + j] = exp(P[i * S + j] - lse);
        if (lse_bh) lse_bh[i] = lse;
    }
}

/* o = P v and lse, for all (b, h). */
static void ref_forward(const Shape *s, const double *q, const double *k, const double *v, double scale, int causal,
                        double *o, double *lse) {
    int64_t S = s->S, D = s->D;
    double *P = xcalloc((size_t)(S * S), sizeof *P);
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->HQ; h++) {
            int64_t g = h / (s->HQ / s->HK);
            ref_probs(s, q, k, scale, causal, b, h, P, lse ? lse + il(s, b, h, 0) : NULL);
            for (int64_t i = 0; i < S; i++)
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < S; j++) acc += P[i * S + j] * v[ik(s, j, b, g, d)];
                    o[iq(s, i, b, h, d)] = acc;
                }
        }
    free(P);
}

/* Gradients of L = sum dout . o:  dP = dout v^T, delta_i = sum_j P_ij dP_ij, dS = P (dP - delta),
 * dq = scale dS k, dk = scale dS^T q, dv = P^T dout (dk, dv summed over the query heads of a group). */
static void ref_backward(const Shape *s, const double *q, const double *k, const double *v, const double *dout,
                         double scale, int causal, double *dq, double *dk, double *dv, double *delta) {
    int64_t S = s->S, D = s->D;
    size_t nk = (size_t)(S * s->B * s->HK * D);
    memset(dk, 0, nk * sizeof *dk);
    memset(dv, 0, nk * sizeof *dv);
    double *P = xcalloc((size_t)(S * S), sizeof *P);
    double *dS = xcalloc((size_t)(S * S), sizeof *dS);
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->HQ; h++) {
            int64_t g = h / (s->HQ / s->HK);
            ref_probs(s, q, k, scale, causal, b, h, P, NULL);
            for (int64_t i = 0; i < S; i++) {
                double dl = 0;
                for (int64_t j = 0; j < S; j++) {
                    double dp = 0;
                    for (int64_t d = 0; d < D; d++) dp += dout[iq(s, i, b, h, d)] * v[ik(s, j, b, g, d)];
                    dS[i * S + j] = dp;
                    dl += P[i * S + j] * dp;
                }
                delta[il(s, b, h, i)] = dl;
                for (int64_t j = 0; j < S; j++) dS[i * S + j] = P[i * S + j] * (dS[i * S + j] - dl);
            }
            for (int64_t i = 0; i < S; i++)
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < S; j++) acc += dS[i * S + j] * k[ik(s, j, b, g, d)];
                    dq[iq(s, i, b, h, d)] = scale * acc;
                }
            for (int64_t j = 0; j < S; j++)
                for (int64_t d = 0; d < D; d++) {
                    double ak = 0, av = 0;
                    for (int64_t i = 0; i < S; i++) {
                        ak += dS[i * S + j] * q[iq(s, i, b, h, d)];
                        av += P[i * S + j] * dout[iq(s, i, b, h, d)];
                    }
                    dk[ik(s, j, b, g, d)] += scale * ak;
                    dv[ik(s, j, b, g, d)] += av;
                }
        }
    free(P);
    free(dS);
}

static double ref_loss(const Shape *s, const double *q, const double *k, const double *v, const double *dout,
                       double scale, int causal, double *otmp) {
    ref_forward(s, q, k, v, scale, causal, otmp, NULL);
    size_t nq = (size_t)(s->S * s->B * s->HQ * s->D);
    double L = 0;
    for (size_t x = 0; x < nq; x++) L += dout[x] * otmp[x];
    return L;
}

/* Central differences of ref_loss w.r.t. every element of x (one of q, k, v), into g. */
static void fd_grad(const Shape *s, double *q, double *k, double *v, const double *dout, double scale, int causal,
                    double *x, size_t n, double *g, double *otmp) {
    const double eps = 1e-6;
    for (size_t e = 0; e < n; e++) {
        double x0 = x[e];
        x[e] = x0 + eps;
        double lp = ref_loss(s, q, k, v, dout, scale, causal, otmp);
        x[e] = x0 - eps;
        double lm = ref_loss(s, q, k, v, dout, scale, causal, otmp);
        x[e] = x0;
        g[e] = (lp - lm) / (2 * eps);
    }
}

/* ---- one shape ---- */

static void fill_nan(float *a, size_t n) {
    for (size_t x = 0; x < n; x++) a[x] = NAN;
}

static void test_shape(T *t, Shape sh, int causal, double scale_mul, int do_fd) {
    const Shape *s = &sh;
    int64_t S = s->S, B = s->B, HQ = s->HQ, HK = s->HK, D = s->D;
    size_t nq = (size_t)(S * B * HQ * D), nk = (size_t)(S * B * HK * D), nl = (size_t)(B * HQ * S);
    float scale = (float)(scale_mul / sqrt((double)D));
    char name[96];
    snprintf(name, sizeof name, "S=%lld B=%lld HQ=%lld HK=%lld D=%lld causal=%d scale=%g", (long long)S, (long long)B,
             (long long)HQ, (long long)HK, (long long)D, causal, (double)scale);

    /* Float inputs; the reference runs in float64 on exactly the same values. */
    float *q = xcalloc(nq, 4), *k = xcalloc(nk, 4), *v = xcalloc(nk, 4), *dout = xcalloc(nq, 4);
    double *qd = xcalloc(nq, 8), *kd = xcalloc(nk, 8), *vd = xcalloc(nk, 8), *doutd = xcalloc(nq, 8);
    for (size_t x = 0; x < nq; x++) qd[x] = q[x] = (float)rnd();
    for (size_t x = 0; x < nk; x++) kd[x] = k[x] = (float)rnd();
    for (size_t x = 0; x < nk; x++) vd[x] = v[x] = (float)rnd();
    for (size_t x = 0; x < nq; x++) doutd[x] = dout[x] = (float)rnd();

    /* Kernels, every output prefilled with NaN to prove it is overwritten. Rows run in reverse order
     * (they must be independent); the passes run in the order the generated code uses: fwd, dq, dk, dv. */
    float *o = xcalloc(nq, 4), *lse = xcalloc(nl, 4), *dq = xcalloc(nq, 4), *delta = xcalloc(nl, 4);
    float *dk = xcalloc(nk, 4), *dv = xcalloc(nk, 4);
    fill_nan(o, nq), fill_nan(lse, nl), fill_nan(dq, nq), fill_nan(delta, nl), fill_nan(dk, nk), fill_nan(dv, nk);
    int64_t qrows = B * HQ * S, krows = B * HK * S;
    for (int64_t r = qrows - 1; r >= 0; r--) ppk_attention_fwd_row(q, k, v, o, lse, S, B, HQ, HK, D, scale, causal, r);
    for (int64_t r = qrows - 1; r >= 0; r--)
        ppk_attention_dq_row(q, k, v, o, lse, dout, dq, delta, S, B, HQ, HK, D, scale, causal, r);
    for (int64_t r = krows - 1; r >= 0; r--)
        ppk_attention_dk_row(q, k, v, o, lse, dout, delta, dk, S, B, HQ, HK, D, scale, causal, r);
    for (int64_t r = krows - 1; r >= 0; r--)
        ppk_attention_dv_row(q, k, v, o, lse, dout, dv, S, B, HQ, HK, D, scale, causal, r);

    /* Reference. */
    double *ro = xcalloc(nq, 8), *rlse = xcalloc(nl, 8), *rdq = xcalloc(nq, 8), *rdelta = xcalloc(nl, 8);
    double *rdk = xcalloc(nk, 8), *rdv = xcalloc(nk, 8);
    ref_forward(s, qd, kd, vd, (double)scale, causal, ro, rlse);
    ref_backward(s, qd, kd, vd, doutd, (double)scale, causal, rdq, rdk, rdv, rdelta);

    /* Large scales stress the max subtraction; float rounding of a score of size ~|scale|*D is then
     * amplified by exp, so compare those more loosely (the point is: finite and right). */
    double tf = scale_mul > 1.5 ? 1e-4 : 1e-5, tg = scale_mul > 1.5 ? 1e-3 : 1e-4, e;
    e = rel_err_fd(o, ro, nq);
    check(t, e <= tf, "fwd o     %s: rel err %.3g (tol %g)", name, e, tf);
    e = rel_err_fd(lse, rlse, nl);
    check(t, e <= tf, "fwd lse   %s: rel err %.3g (tol %g)", name, e, tf);
    e = rel_err_fd(delta, rdelta, nl);
    check(t, e <= tg, "bwd delta %s: rel err %.3g (tol %g)", name, e, tg);
    e = rel_err_fd(dq, rdq, nq);
    check(t, e <= tg, "bwd dq    %s: rel err %.3g (tol %g)", name, e, tg);
    e = rel_err_fd(dk, rdk, nk);
    check(t, e <= tg, "bwd dk    %s: rel err %.3g (tol %g)", name, e, tg);
    e = rel_err_fd(dv, rdv, nk);
    check(t, e <= tg, "bwd dv    %s: rel err %.3g (tol %g)", name, e, tg);

    if (do_fd) {
        /* The reference gradient itself, against central differences of L = sum dout . o in float64. */
        double *g = xcalloc(nq > nk ? nq : nk, 8), *otmp = xcalloc(nq, 8);
        const double tfd = 1e-6;
        fd_grad(s, qd, kd, vd, doutd, (double)scale, causal, qd, nq, g, otmp);
        e = rel_err_dd(rdq, g, nq);
        check(t, e <= tfd, "fd ref dq %s: rel err %.3g (tol %g)", name, e, tfd);
        fd_grad(s, qd, kd, vd, doutd, (double)scale, causal, kd, nk, g, otmp);
        e = rel_err_dd(rdk, g, nk);
        check(t, e <= tfd, "fd ref dk %s: rel err %.3g (tol %g)", name, e, tfd);
        fd_grad(s, qd, kd, vd, doutd, (double)scale, causal, vd, nk, g, otmp);
        e = rel_err_dd(rdv, g, nk);
        check(t, e <= tfd, "fd ref dv %s: rel err %.3g (tol %g)", name, e, tfd);
        free(g), free(otmp);
    }

    free(q), free(k), free(v), free(dout), free(qd), free(kd), free(vd), free(doutd);
    free(o), free(lse), free(dq), free(delta), free(dk), free(dv);
    free(ro), free(rlse), free(rdq), free(rdelta), free(rdk), free(rdv);
}

/* A head dimension beyond PPK_MAX_HEAD_DIM must not overrun the local accumulators: outputs become NaN. */
static void test_head_dim_guard(T *t) {
    enum { D = PPK_MAX_HEAD_DIM + 1 };
    static float q[D], k[D], v[D], o[D], dout[D], dq[D], dk[D], dv[D];
    float lse = 0, delta = 0;
    for (int d = 0; d < D; d++) q[d] = k[d] = v[d] = dout[d] = 0.5f, o[d] = dq[d] = dk[d] = dv[d] = 0;
    ppk_attention_fwd_row(q, k, v, o, &lse, 1, 1, 1, 1, D, 1.0f, 0, 0);
    ppk_attention_dq_row(q, k, v, o, &lse, dout, dq, &delta, 1, 1, 1, 1, D, 1.0f, 0, 0);
    ppk_attention_dk_row(q, k, v, o, &lse, dout, &delta, dk, 1, 1, 1, 1, D, 1.0f, 0, 0);
    ppk_attention_dv_row(q, k, v, o, &lse, dout, dv, 1, 1, 1, 1, D, 1.0f, 0, 0);
    int ok = isnan(lse) && isnan(delta);
    for (int d = 0; d < D; d++) ok = ok && isnan(o[d]) && isnan(dq[d]) && isnan(dk[d]) && isnan(dv[d]);
    check(t, ok, "D=%d > PPK_MAX_HEAD_DIM: every output is NaN, no overrun", D);
}

int main(void) {
    T t = {0, 0};
    static const Shape shapes[] = {{1, 1, 1, 1, 2}, {5, 2, 4, 2, 8}, {16, 3, 4, 1, 16}, {7, 1, 6, 3, 12}, {9, 2, 8, 8, 32}};
    for (size_t x = 0; x < sizeof shapes / sizeof shapes[0]; x++) {
        const Shape *s = &shapes[x];
        int small = s->S * s->B * s->HQ * s->D <= 1024; /* finite differences only where cheap */
        for (int causal = 0; causal <= 1; causal++) test_shape(&t, *s, causal, 1.0, small);
    }
    /* Scores of up to a few hundred: expf would overflow (past ~88) without the max subtraction. */
    for (int causal = 0; causal <= 1; causal++) test_shape(&t, (Shape){6, 2, 4, 2, 16}, causal, 200.0, 0);
    test_head_dim_guard(&t);
    printf("%d passed, %d failed\n", t.pass, t.fail);
    return t.fail ? 1 : 0;
}
