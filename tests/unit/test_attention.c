/* test_attention.c — the fused attention (compiler/fuse_attn.c) against attention computed in
 * double, on the cpu and the opencl device. For each case (head dim, sequence, causal or not, a
 * sliding window, grouped-query ratio, kv heads replicated under tp, a cp rank's offset, bf16), a
 * one-layer model is compiled with ppc; in one rank's listing the first layer's three attention
 * kernels (attention_fwd, attention_dq, attention_dkv) are found and run alone on random Q, K, V
 * and dO written where their arguments point: O and the log-sum-exp from the forward, then dQ
 * (and each row's delta, which dkv reads), dK and dV, each against the reference as
 * max|x - ref| / max|ref|. The three kernels run twice and must write the same bits. Then the same model, one rank, one
 * step through ppr with `--attention fused` and `--attention gemm`: loss and every gradient alike. ppc and ppr are
 * found next to this binary; the work files go to BUILD/attention/. The last line is "N passed, M failed". */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rt_dev.h"
#include "rt_io.h"
#include "rt_prog.h"
#include "test_util.h"

static char bin[512] = "build";

typedef struct {
  int d, s, b, hq, hk, tp, cp, causal, bf16, window;
  double cap; /* the scores' soft cap (0: none) */
} Case;

/* Head dims 32/64/96/128; S 1, 17, 100, 1024 (not multiples of the tiles); causal and not;
 * query heads a kv head 1, 2, 4, 8; kv heads replicated (tp 4 over 2 of them); a cp rank's
 * offset; bf16. */
static const Case cases[] = {
    {.d = 32, .s = 17, .b = 2, .hq = 2, .hk = 2, .tp = 1, .cp = 1, .causal = 1},
    {.d = 64, .s = 100, .b = 2, .hq = 4, .hk = 2, .tp = 1, .cp = 1, .causal = 1},
    {.d = 96, .s = 1, .b = 3, .hq = 4, .hk = 1, .tp = 1, .cp = 1, .causal = 1},
    {.d = 128, .s = 17, .b = 1, .hq = 8, .hk = 1, .tp = 1, .cp = 1, .causal = 0},
    {.d = 32, .s = 100, .b = 1, .hq = 4, .hk = 1, .tp = 1, .cp = 1, .causal = 0},
    {.d = 64, .s = 1024, .b = 1, .hq = 2, .hk = 1, .tp = 1, .cp = 1, .causal = 1},
    {.d = 32, .s = 17, .b = 2, .hq = 4, .hk = 2, .tp = 4, .cp = 1, .causal = 1},
    {.d = 32, .s = 34, .b = 2, .hq = 4, .hk = 2, .tp = 1, .cp = 2, .causal = 1},
    {.d = 64, .s = 100, .b = 1, .hq = 2, .hk = 2, .tp = 1, .cp = 4, .causal = 0},
    {.d = 64, .s = 100, .b = 2, .hq = 4, .hk = 2, .tp = 1, .cp = 1, .causal = 1, .bf16 = 1},
    {.d = 128, .s = 40, .b = 1, .hq = 2, .hk = 1, .tp = 1, .cp = 2, .causal = 1, .bf16 = 1},
    /* sliding windows: shorter than the sequence (not a multiple of the tiles, and shorter than a
     * tile), as long, longer; across the cp ranks' boundary; with grouped-query heads and tp */
    {.d = 32, .s = 100, .b = 2, .hq = 4, .hk = 2, .tp = 1, .cp = 1, .causal = 1, .window = 37},
    {.d = 64, .s = 100, .b = 1, .hq = 2, .hk = 1, .tp = 1, .cp = 1, .causal = 1, .window = 5},
    {.d = 32, .s = 17, .b = 2, .hq = 2, .hk = 2, .tp = 1, .cp = 1, .causal = 1, .window = 17},
    {.d = 32, .s = 17, .b = 2, .hq = 2, .hk = 2, .tp = 1, .cp = 1, .causal = 1, .window = 40},
    {.d = 32, .s = 68, .b = 2, .hq = 4, .hk = 2, .tp = 1, .cp = 2, .causal = 1, .window = 21},
    {.d = 32, .s = 100, .b = 1, .hq = 4, .hk = 2, .tp = 1, .cp = 4, .causal = 1, .window = 30},
    {.d = 64, .s = 1024, .b = 1, .hq = 2, .hk = 1, .tp = 1, .cp = 1, .causal = 1, .window = 200},
    {.d = 32, .s = 17, .b = 2, .hq = 4, .hk = 2, .tp = 4, .cp = 1, .causal = 1, .window = 6},
    {.d = 64, .s = 100, .b = 2, .hq = 4, .hk = 2, .tp = 1, .cp = 1, .causal = 1, .bf16 = 1, .window = 33},
    /* soft-capped scores (Gemma 2's), with a window and under cp, and without causal */
    {.d = 32, .s = 100, .b = 2, .hq = 4, .hk = 2, .tp = 1, .cp = 1, .causal = 1, .window = 21, .cap = 2.5},
    {.d = 64, .s = 68, .b = 1, .hq = 2, .hk = 1, .tp = 1, .cp = 2, .causal = 1, .cap = 1.5},
    {.d = 32, .s = 17, .b = 2, .hq = 2, .hk = 2, .tp = 1, .cp = 1, .causal = 0, .cap = 4},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

/* f32: 1e-5 of the largest value (observed: up to 1.7e-6, dK at S 1024: sums of 1024 products in a
 * fixed order); bf16: O is stored rounded (2^-9 of a value), and the gradients read bf16 dO and
 * the rounded O (the delta's): 2^-6 of the largest gradient. */
#define TOL_F32  1e-5
#define TOL_BF16 (1.0 / 64)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double unit(void) { /* splitmix64, [-1, 1) */
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1p-52 - 1;
}

static float bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  u &= 0xFFFF0000u;
  memcpy(&x, &u, 4);
  return x;
}

/* ---- the model and its listing ------------------------------------------------------------ */

static int write_model(const char *path, const Case *c) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  char window[96] = "";
  if (c->window) snprintf(window, sizeof window, ", window = %d", c->window);
  if (c->cap > 0) snprintf(window + strlen(window), sizeof window - strlen(window), ", softcap = %g", c->cap);
  fprintf(f,
          "model \"attention\"\n"
          "dim vocab = 256\ndim hidden = 8\ndim heads = %d\ndim kv_heads = %d\ndim head_dim = %d\n"
          "train { micro_batch = %d, seq = %d }\n"
          "input tokens: i32[B, S]\ninput labels: i32[B, S]\n"
          "param E: [vocab, hidden] as \"E\" init normal(std = 0.5)\n"
          "param Wq: [heads * head_dim, hidden] as \"Wq\" init normal(std = 0.5) tp column\n"
          "param Wk: [kv_heads * head_dim, hidden] as \"Wk\" init normal(std = 0.5) tp column\n"
          "param Wv: [kv_heads * head_dim, hidden] as \"Wv\" init normal(std = 0.5) tp column\n"
          "param Wo: [hidden, heads * head_dim] as \"Wo\" init normal(std = 0.3) tp row\n"
          "param W: [vocab, hidden] as \"W\" init normal(std = 0.3)\n"
          "x = embedding(tokens, E)\n"
          "q = split_heads(linear(x, Wq), heads = heads)\n"
          "k = split_heads(linear(x, Wk), heads = kv_heads)\n"
          "v = split_heads(linear(x, Wv), heads = kv_heads)\n"
          "a = attention(q, k, v%s%s)\n"
          "logits = transpose_sb(linear(linear(merge_heads(a), Wo), W))\n"
          "loss = cross_entropy(logits, labels)\n",
          c->hq, c->hk, c->d, c->b, c->s, c->causal ? ", causal" : "", window);
  return fclose(f);
}

/* The nth (from 0) kernel instruction of block b whose kernel's name ends in suffix. */
static const RtInstr *find_kernel(const RtProg *p, int b, const char *suffix, int nth) {
  const RtBlock *blk = &p->blk[b];
  for (int i = 0; i < blk->n; i++) {
    const RtInstr *in = &blk->ins[i];
    if (in->kind != RT_I_KERNEL) continue;
    const char *name = p->kernels[in->kernel];
    size_t n = strlen(name), m = strlen(suffix);
    if (n > m && !strcmp(name + n - m, suffix) && nth-- == 0) return in;
  }
  return NULL;
}

/* ---- a kernel run: its pointer arguments bound to host tensors -------------------------- */

typedef struct {
  const RtInstr *in;
  int dt[RT_MAX_KARGS]; /* per pointer argument, in order: PP_F32 or PP_BF16 */
  float *host[RT_MAX_KARGS];
  int64_t n[RT_MAX_KARGS];
  bool out[RT_MAX_KARGS];
  int nptr;
} Call;

static int64_t arena_off(const RtProg *p, const RtPtr *q) {
  return q->off + (q->in_slot ? p->reg[RT_REG_SLOTS].base : 0);
}

/* Binds pointer argument i to n floats at host, written by the kernel (out) or read. */
static void bind(Call *c, int i, float *host, int64_t n, bool out) { c->host[i] = host, c->n[i] = n, c->out[i] = out; }

/* Writes the call's inputs, runs it, reads its outputs back. 0, or -1 with a message. */
static int run_call(RtDev *d, const RtProg *p, const Call *c, const char *what) {
  RtKArg a[RT_MAX_KARGS];
  int b = 0;
  for (int i = 0; i < c->in->nargs; i++) {
    const RtArg *x = &c->in->args[i];
    if (x->kind == RT_A_PTR) {
      int64_t off = arena_off(p, &x->ptr), es = pp_dtype_bytes((PpDType)c->dt[b]);
      if (!c->out[b]) {
        void *buf = malloc((size_t)(c->n[b] * es));
        for (int64_t e = 0; e < c->n[b]; e++) {
          if (c->dt[b] == PP_BF16) {
            uint32_t u;
            memcpy(&u, &c->host[b][e], 4);
            ((uint16_t *)buf)[e] = (uint16_t)(u >> 16); /* the values are bf16 already */
          } else {
            ((float *)buf)[e] = c->host[b][e];
          }
        }
        int rc = rt_dev_write(d, off, buf, c->n[b] * es);
        free(buf);
        if (rc) return printf("FAIL %s: write: %s\n", what, rt_dev_error(d)), -1;
      }
      a[i] = (RtKArg){.kind = RT_KA_PTR, .off = off};
      b++;
    } else if (x->kind == RT_A_F32) {
      a[i] = (RtKArg){.kind = RT_KA_F32, .f = x->f};
    } else if (x->kind == RT_A_I64) {
      a[i] = (RtKArg){.kind = RT_KA_I64, .i = x->i};
    } else {
      return printf("FAIL %s: a runtime scalar argument\n", what), -1;
    }
  }
  if (rt_dev_launch(d, c->in->kernel, &c->in->geom, c->in->nargs, a) || rt_dev_sync(d))
    return printf("FAIL %s: launch: %s\n", what, rt_dev_error(d)), -1;
  b = 0;
  for (int i = 0; i < c->in->nargs; i++) {
    if (c->in->args[i].kind != RT_A_PTR) continue;
    if (c->out[b]) {
      int64_t es = pp_dtype_bytes((PpDType)c->dt[b]);
      void *buf = malloc((size_t)(c->n[b] * es));
      if (rt_dev_read(d, arena_off(p, &c->in->args[i].ptr), buf, c->n[b] * es)) {
        free(buf);
        return printf("FAIL %s: read: %s\n", what, rt_dev_error(d)), -1;
      }
      for (int64_t e = 0; e < c->n[b]; e++) {
        if (c->dt[b] == PP_BF16) {
          uint32_t u = (uint32_t)((uint16_t *)buf)[e] << 16;
          memcpy(&c->host[b][e], &u, 4);
        } else {
          c->host[b][e] = ((float *)buf)[e];
        }
      }
      free(buf);
    }
    b++;
  }
  return 0;
}

/* A call of instruction in with nptr pointer arguments expected. */
static int make_call(Call *c, const RtProg *p, const RtInstr *in, const char *csrc, int nptr, const char *what) {
  memset(c, 0, sizeof *c);
  c->in = in;
  if (!in) return printf("FAIL %s: no such kernel in the listing\n", what), -1;
  int n = 0;
  for (int i = 0; i < in->nargs; i++) n += in->args[i].kind == RT_A_PTR;
  int nt = test_kernel_types(csrc, p->kernels[in->kernel], c->dt, RT_MAX_KARGS);
  if (n != nptr || nt != nptr) return printf("FAIL %s: %d buffers (%d typed), expected %d\n", what, n, nt, nptr), -1;
  c->nptr = n;
  return 0;
}

/* ---- the reference ------------------------------------------------------------------------ */

typedef struct {
  int64_t SQ, SK, B, HQ, HK, D, off;
  bool causal;
  int64_t window; /* 0: none */
  double cap;     /* 0: none */
  double scale;
} Shape4;

static int64_t qi(const Shape4 *s, int64_t i, int64_t b, int64_t h, int64_t d) {
  return ((i * s->B + b) * s->HQ + h) * s->D + d;
}
static int64_t ki(const Shape4 *s, int64_t j, int64_t b, int64_t g, int64_t d) {
  return ((j * s->B + b) * s->HK + g) * s->D + d;
}

/* O, lse, dQ, dK, dV in double from Q, K, V, dO */
static void reference(const Shape4 *s, const float *q, const float *k, const float *v, const float *dout, double *o,
                      double *lse, double *dq, double *dk, double *dv) {
  int64_t R = s->HQ / s->HK, nkv = s->SK * s->B * s->HK * s->D;
  double *p = malloc((size_t)s->SK * sizeof *p), *dp = malloc((size_t)s->SK * sizeof *dp),
         *dt = malloc((size_t)s->SK * sizeof *dt); /* the cap's derivative, 1 - tanh^2 */
  memset(dk, 0, (size_t)nkv * sizeof *dk);
  memset(dv, 0, (size_t)nkv * sizeof *dv);
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->HQ; h++)
      for (int64_t i = 0; i < s->SQ; i++) {
        int64_t g = h / R, nk = s->causal ? s->off + i + 1 : s->SK;
        int64_t j0 = s->window && nk > s->window ? nk - s->window : 0; /* the window's first key */
        double m = -INFINITY, l = 0;
        for (int64_t j = j0; j < nk; j++) {
          double a = 0;
          for (int64_t d = 0; d < s->D; d++) a += (double)q[qi(s, i, b, h, d)] * k[ki(s, j, b, g, d)];
          p[j] = s->scale * a;
          dt[j] = 1;
          if (s->cap > 0) {
            double t = tanh(p[j] / s->cap);
            p[j] = s->cap * t, dt[j] = 1 - t * t;
          }
          if (p[j] > m) m = p[j];
        }
        for (int64_t j = j0; j < nk; j++) l += p[j] = exp(p[j] - m);
        lse[(b * s->HQ + h) * s->SQ + i] = m + log(l);
        double delta = 0;
        for (int64_t j = j0; j < nk; j++) {
          p[j] /= l;
          double a = 0;
          for (int64_t d = 0; d < s->D; d++) a += (double)dout[qi(s, i, b, h, d)] * v[ki(s, j, b, g, d)];
          dp[j] = a;
          delta += p[j] * a;
        }
        for (int64_t d = 0; d < s->D; d++) {
          double a = 0, gq = 0;
          for (int64_t j = j0; j < nk; j++) {
            double ds = s->scale * p[j] * (dp[j] - delta) * dt[j];
            a += p[j] * v[ki(s, j, b, g, d)];
            gq += ds * k[ki(s, j, b, g, d)];
            dk[ki(s, j, b, g, d)] += ds * q[qi(s, i, b, h, d)];
            dv[ki(s, j, b, g, d)] += p[j] * dout[qi(s, i, b, h, d)];
          }
          o[qi(s, i, b, h, d)] = a;
          dq[qi(s, i, b, h, d)] = gq;
        }
      }
  free(p);
  free(dp);
  free(dt);
}

/* max |x - ref| / max |ref| */
static double rel_err(const float *x, const double *ref, int64_t n) {
  double e = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)x[i] - ref[i]);
    if (!(d <= e)) e = d; /* a NaN stays */
    if (fabs(ref[i]) > m) m = fabs(ref[i]);
  }
  return m > 0 ? e / m : e;
}

/* ---- one case on one device ---------------------------------------------------------------- */

typedef struct {
  float *q, *k, *v, *dout, *o, *lse, *delta, *dq, *dk, *dv;
} Host;

#define NCALLS 3

/* The kernels, in order, on the host tensors; 0 or -1. */
static int run_all(RtDev *d, const RtProg *p, Call *c, const char *what) {
  for (int i = 0; i < NCALLS; i++)
    if (run_call(d, p, &c[i], what)) return -1;
  return 0;
}

static void run_device(const char *dir, const RtProg *p, const char *csrc, const Shape4 *s, const Case *cs,
                       const char *dev, const char *label) {
  char what[600], err[1024];
  snprintf(what, sizeof what, "%s on %s", label, dev);
  RtDev *d = NULL;
  if (rt_dev_open(dev, 0, &d, err, sizeof err)) {
    check(0, "%s: %s", what, err);
    return;
  }
  if (rt_dev_alloc(d, p->arena) || rt_dev_load(d, dir, p)) {
    check(0, "%s: %s", what, rt_dev_error(d));
    rt_dev_close(d);
    return;
  }
  int64_t nq = s->SQ * s->B * s->HQ * s->D, nkv = s->SK * s->B * s->HK * s->D, nr = s->B * s->HQ * s->SQ;
  Host h = {0};
  float **all[] = {&h.q, &h.k, &h.v, &h.dout, &h.o, &h.lse, &h.delta, &h.dq, &h.dk, &h.dv};
  int64_t sizes[] = {nq, nkv, nkv, nq, nq, nr, nr, nq, nkv, nkv};
  for (int i = 0; i < 10; i++) *all[i] = calloc((size_t)sizes[i], sizeof(float));
  rng = 0x9E3779B97F4A7C15ull; /* the same inputs on every device */
  for (int64_t i = 0; i < nq; i++) h.q[i] = (float)(2 * unit()), h.dout[i] = (float)unit();
  for (int64_t i = 0; i < nkv; i++) h.k[i] = (float)(2 * unit()), h.v[i] = (float)unit();
  if (cs->bf16) {
    for (int64_t i = 0; i < nq; i++) h.q[i] = bf16_round(h.q[i]), h.dout[i] = bf16_round(h.dout[i]);
    for (int64_t i = 0; i < nkv; i++) h.k[i] = bf16_round(h.k[i]), h.v[i] = bf16_round(h.v[i]);
  }
  Call c[NCALLS];
  bool ok = !make_call(&c[0], p, find_kernel(p, RT_BLK_FORWARD, "attention_fwd", 0), csrc, 5, what) &&
            !make_call(&c[1], p, find_kernel(p, RT_BLK_BACKWARD, "attention_dq", 0), csrc, 8, what) &&
            !make_call(&c[2], p, find_kernel(p, RT_BLK_BACKWARD, "attention_dkv", 0), csrc, 8, what);
  if (ok) {
    /* attention_fwd Q K V O L; attention_dq Q K V dO L delta O dQ (delta written); attention_dkv
     * Q K V dO L delta dK dV (fuse_attn.c) */
    bind(&c[0], 0, h.q, nq, false), bind(&c[0], 1, h.k, nkv, false), bind(&c[0], 2, h.v, nkv, false);
    bind(&c[0], 3, h.o, nq, true), bind(&c[0], 4, h.lse, nr, true);
    for (int i = 1; i < 3; i++) {
      bind(&c[i], 0, h.q, nq, false), bind(&c[i], 1, h.k, nkv, false), bind(&c[i], 2, h.v, nkv, false);
      bind(&c[i], 3, h.dout, nq, false), bind(&c[i], 4, h.lse, nr, false);
    }
    bind(&c[1], 5, h.delta, nr, true), bind(&c[1], 6, h.o, nq, false), bind(&c[1], 7, h.dq, nq, true);
    bind(&c[2], 5, h.delta, nr, false), bind(&c[2], 6, h.dk, nkv, true), bind(&c[2], 7, h.dv, nkv, true);
    ok = !run_all(d, p, c, what);
  }
  if (!ok) {
    check(0, "%s: the kernels did not run", what);
  } else {
    double *o = malloc((size_t)nq * sizeof *o), *lse = malloc((size_t)nr * sizeof *lse),
           *dq = malloc((size_t)nq * sizeof *dq), *dk = malloc((size_t)nkv * sizeof *dk),
           *dv = malloc((size_t)nkv * sizeof *dv);
    reference(s, h.q, h.k, h.v, h.dout, o, lse, dq, dk, dv);
    double tol = cs->bf16 ? TOL_BF16 : TOL_F32;
    const char *names[] = {"O", "lse", "dQ", "dK", "dV"};
    const float *got[] = {h.o, h.lse, h.dq, h.dk, h.dv};
    const double *want[] = {o, lse, dq, dk, dv};
    int64_t n[] = {nq, nr, nq, nkv, nkv};
    for (int i = 0; i < 5; i++) {
      /* the lse is f32 in every program: f32's limit */
      double e = rel_err(got[i], want[i], n[i]), t = i == 1 ? TOL_F32 : tol;
      check(e < t, "%s: %s against double: %.3g < %g", what, names[i], e, t);
    }
    /* again: the same bits */
    float *first[5];
    for (int i = 0; i < 5; i++) {
      first[i] = malloc((size_t)n[i] * sizeof(float));
      memcpy(first[i], got[i], (size_t)n[i] * sizeof(float));
    }
    bool same = !run_all(d, p, c, what);
    for (int i = 0; i < 5 && same; i++) same = !memcmp(first[i], got[i], (size_t)n[i] * sizeof(float));
    check(same, "%s: a second run writes the same bits", what);
    for (int i = 0; i < 5; i++) free(first[i]);
    free(o), free(lse), free(dq), free(dk), free(dv);
  }
  for (int i = 0; i < 10; i++) free(*all[i]);
  rt_dev_close(d);
}

/* ---- the whole step: fused against gemm ---------------------------------------------------- */

/* One step of the model compiled into dir/NAME (one rank): its loss; the gradients to grads. */
static double step(const char *dir, const char *name, const char *dev, const char *grads) {
  char cmd[4096], log[1200];
  snprintf(log, sizeof log, "%s/%s.jsonl", dir, name);
  remove(log); /* a new run's log */
  snprintf(cmd, sizeof cmd,
           "%s/ppr %s/%s --device %s --quiet --steps 1 --lr 0 --log %s --save-grads %s > %s/%s.out 2>&1", bin, dir,
           name, dev, log, grads, dir, name);
  if (system(cmd) != 0) {
    printf("FAIL %s failed (%s/%s.out)\n", cmd, dir, name);
    return NAN;
  }
  char *text = slurp(log);
  const char *at = text ? strstr(text, "\"loss\":") : NULL;
  double loss = at ? strtod(at + 7, NULL) : NAN;
  free(text);
  return loss;
}

/* max over the tensors of max|a - b| / max|b| */
static double grads_err(const char *a_path, const char *b_path, char *worst, size_t wlen) {
  char err[512];
  RtStFile *a = NULL, *b = NULL;
  if (rt_st_open(a_path, &a, err, sizeof err) || rt_st_open(b_path, &b, err, sizeof err)) {
    snprintf(worst, wlen, "%s", err);
    rt_st_close(a);
    return NAN;
  }
  double e = 0;
  snprintf(worst, wlen, "none");
  for (int i = 0; i < rt_st_count(b); i++) {
    int j = rt_st_find(a, rt_st_name(b, i));
    int64_t n = rt_st_numel(b, i);
    if (j < 0 || rt_st_numel(a, j) != n) {
      snprintf(worst, wlen, "%s missing", rt_st_name(b, i));
      e = NAN;
      break;
    }
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    double *yd = malloc((size_t)n * sizeof *yd);
    if (rt_st_read_f32(a, j, x, (size_t)n, err, sizeof err) || rt_st_read_f32(b, i, y, (size_t)n, err, sizeof err)) {
      snprintf(worst, wlen, "%s", err);
      e = NAN;
    } else {
      for (int64_t k = 0; k < n; k++) yd[k] = y[k];
      double r = rel_err(x, yd, n);
      if (!(r <= e)) e = r, snprintf(worst, wlen, "%s", rt_st_name(b, i));
    }
    free(x), free(y), free(yd);
  }
  rt_st_close(a);
  rt_st_close(b);
  return e;
}

static void against_gemm(const char *dir, const char *model, const Case *cs, const char *label) {
  char cmd[4096];
  for (int g = 0; g < 2; g++) {
    snprintf(cmd, sizeof cmd, "%s/ppc %s --attention %s%s -o %s/%s > %s/%s.log 2>&1", bin, model, g ? "gemm" : "fused",
             cs->bf16 ? " --precision bf16" : "", dir, g ? "gemm" : "fused", dir, g ? "gemm" : "fused");
    if (system(cmd) != 0) {
      check(0, "%s: %s failed", label, cmd);
      return;
    }
  }
  const char *devs[] = {"cpu", "opencl"};
  for (int v = 0; v < 2; v++) {
    char gf[1100], gg[1100], worst[600];
    snprintf(gf, sizeof gf, "%s/grads_fused.safetensors", dir);
    snprintf(gg, sizeof gg, "%s/grads_gemm.safetensors", dir);
    double lf = step(dir, "fused", devs[v], gf), lg = step(dir, "gemm", devs[v], gg);
    /* f32: both sum in f32 in other orders (observed: loss 1e-7, gradients 1e-6); bf16: each
     * rounds its own intermediate values (P, dS) to bf16 or not (observed: loss 3e-5, gradients 2e-3) */
    double tl = cs->bf16 ? 2e-4 : 1e-6, tg = cs->bf16 ? TOL_BF16 : TOL_F32;
    double el = fabs(lf - lg) / fabs(lg);
    check(el < tl, "%s on %s: step loss, fused %.7f against gemm %.7f: %.3g < %g", label, devs[v], lf, lg, el, tl);
    double eg = grads_err(gf, gg, worst, sizeof worst);
    check(eg < tg, "%s on %s: gradients, fused against gemm: worst %.3g (%s) < %g", label, devs[v], eg, worst, tg);
  }
}

int main(int argc, char **argv) {
  (void)argc;
  const char *slash = strrchr(argv[0], '/');
  if (slash) snprintf(bin, sizeof bin, "%.*s", (int)(slash - argv[0]), argv[0]);
  for (int i = 0; i < NCASES; i++) {
    const Case *cs = &cases[i];
    char dir[900], model[1000], cmd[4096], label[200];
    char window[64] = "";
    if (cs->window) snprintf(window, sizeof window, " window %d", cs->window);
    if (cs->cap > 0) snprintf(window + strlen(window), sizeof window - strlen(window), " softcap %g", cs->cap);
    snprintf(label, sizeof label, "D %d S %d B %d heads %d/%d%s%s%s tp %d cp %d%s", cs->d, cs->s, cs->b, cs->hq, cs->hk,
             cs->causal ? " causal" : "", window, cs->hk < cs->tp ? " (kv replicated)" : "", cs->tp, cs->cp,
             cs->bf16 ? " bf16" : "");
    snprintf(dir, sizeof dir, "%s/attention/case%d", bin, i);
    snprintf(model, sizeof model, "%s/model.pdl", dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    if (system(cmd) != 0 || write_model(model, cs)) {
      check(0, "%s: cannot write %s", label, model);
      continue;
    }
    snprintf(cmd, sizeof cmd, "%s/ppc %s --tp %d --cp %d%s -o %s/prog > %s/ppc.log 2>&1", bin, model, cs->tp, cs->cp,
             cs->bf16 ? " --precision bf16" : "", dir, dir);
    if (system(cmd) != 0) {
      check(0, "%s: ppc failed (%s/ppc.log)", label, dir);
      continue;
    }
    /* the last rank: under cp its queries start past 0; under tp its heads are the last */
    char prog[1200], err[512], src[1300], pdir[1000];
    snprintf(pdir, sizeof pdir, "%s/prog", dir);
    snprintf(prog, sizeof prog, "%s/rank%d.prog", pdir, cs->tp * cs->cp - 1);
    RtProg *p = NULL;
    if (rt_prog_load(prog, &p, err, sizeof err)) {
      check(0, "%s: %s", label, err);
      continue;
    }
    snprintf(src, sizeof src, "%s/%s.c", pdir, p->kernels_base);
    char *csrc = slurp(src);
    int64_t hk = cs->hk >= cs->tp ? cs->hk / cs->tp : 1;
    Shape4 s = {.SQ = cs->s / cs->cp,
                .SK = cs->s,
                .B = cs->b,
                .HQ = cs->hq / cs->tp,
                .HK = hk,
                .D = cs->d,
                .off = (int64_t)p->cp_rank * (cs->s / cs->cp),
                .causal = cs->causal,
                .window = cs->window,
                .cap = cs->cap,
                .scale = 1 / sqrt((double)cs->d)};
    check(p->cp_rank == cs->cp - 1, "%s: the listing's cp rank %d", label, p->cp_rank);
    run_device(pdir, p, csrc, &s, cs, "cpu", label);
    run_device(pdir, p, csrc, &s, cs, "opencl", label);
    free(csrc);
    rt_prog_free(p);
    if (cs->tp == 1 && cs->cp == 1 && cs->s <= 100 && !cs->cap) against_gemm(dir, model, cs, label); /* no cap there */
  }
  return check_done();
}
