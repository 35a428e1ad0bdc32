/* rt_dev.c - the devices by name (--device cpu|opencl[:N]|cuda[:N]), the device clock and the devices' failure
 * messages. */
#include "pp_gemm.h"
#include "rt_dev.h"
#include "rt_util.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[RT_NDEV] = {"cpu", "opencl", "cuda"}; /* ORDER RtDevKind */
#ifdef PPR_CUDA
static const RtDevOps *const devices[RT_NDEV] = {&rt_dev_cpu_ops, &rt_dev_opencl_ops, &rt_dev_cuda_ops};
#else /* built without the CUDA toolkit */
static const RtDevOps *const devices[RT_NDEV] = {&rt_dev_cpu_ops, &rt_dev_opencl_ops, NULL};
#endif

const char *rt_dev_kind_name(RtDevKind k) { return k < RT_NDEV ? kind_names[k] : "?"; }

int rt_dev_parse(const char *spec, RtDevKind *kind, int *index) {
  for (int k = 0; k < RT_NDEV; k++) {
    size_t n = strlen(kind_names[k]);
    if (strncmp(spec, kind_names[k], n)) continue;
    *kind = (RtDevKind)k;
    *index = -1;
    if (!spec[n]) return 0;
    if (spec[n] != ':' || k == RT_DEV_CPU || !spec[n + 1]) return -1;
    long v = 0;
    for (const char *q = spec + n + 1; *q; q++) {
      if (*q < '0' || *q > '9' || v > 100000) return -1;
      v = v * 10 + (*q - '0');
    }
    *index = (int)v;
    return 0;
  }
  return -1;
}

int rt_dev_open(const char *spec, int local_rank, RtDev **out, char *err, size_t errlen) {
  *out = NULL;
  RtDevKind kind;
  int index;
  if (rt_dev_parse(spec, &kind, &index))
    return rt_fail_at(err, errlen, __FILE__, __LINE__, "--device '%s': expected cpu, opencl, opencl:N, cuda or cuda:N",
                      spec);
  if (!devices[kind])
    return rt_fail_at(err, errlen, __FILE__, __LINE__, "--device %s: this ppr was built without the %s device", spec,
                      kind_names[kind]);
  return devices[kind]->open(out, index, local_rank, err, errlen);
}

RtGemm rt_gemm_key(const RtGemm *g, int scalars) {
  RtGemm key;
  memset(&key, 0, sizeof key); /* padding too: keys are compared bytewise */
  key.ta = g->ta, key.tb = g->tb, key.m = g->m, key.n = g->n, key.k = g->k, key.batch = g->batch;
  key.lda = g->lda, key.ldb = g->ldb, key.ldc = g->ldc, key.sa = g->sa, key.sb = g->sb, key.sc = g->sc;
  for (int i = 0; i < 3; i++) key.dt[i] = g->dt[i];
  if (scalars) key.alpha = g->alpha, key.beta = g->beta;
  return key;
}

void rt_gemm_spans(const RtGemm *g, int64_t n[3]) {
  int64_t ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k, br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
  n[0] = pp_gemm_span(g->batch, g->sa, ar, g->lda, ac);
  n[1] = pp_gemm_span(g->batch, g->sb, br, g->ldb, bc);
  n[2] = pp_gemm_span(g->batch, g->sc, g->m, g->ldc, g->n);
}

RtGemm rt_gemm_colmajor(const RtGemm *g) {
  RtGemm c = *g;
  c.ta = g->tb, c.tb = g->ta;
  c.m = g->n, c.n = g->m;
  c.a = g->b, c.lda = g->ldb, c.sa = g->sb;
  c.b = g->a, c.ldb = g->lda, c.sb = g->sa;
  c.dt[0] = g->dt[1], c.dt[1] = g->dt[0];
  c.tri = PP_TRI_NONE; /* the column-major devices compute every product: correct for any triangle */
  return c;
}

int rt_gemm_lt_epilogue(const RtGemm *g, const RtEpi *e, RtLtGemm *out, char *why, size_t whylen) {
  bool gelu = e->kind == PP_EPI_GELU || e->kind == PP_EPI_DGELU;
  const char *no = g->batch != 1      ? "a batched GEMM"
                   : g->beta != 0     ? "beta is not 0"
                   : g->ldc != g->n   ? "C is not dense"
                   : gelu && g->n % 8 ? "GELU's input would have a leading dimension not a multiple of 8"
                   : e->d % 16 || (gelu && e->aux % 16) ? "D or GELU's input is not 16-byte aligned"
                   : e->bias >= 0 && e->bias % 16       ? "the bias is not 16-byte aligned"
                   : e->kind != PP_EPI_GELU && (e->bias >= 0) != (e->kind == PP_EPI_BIAS)
                       ? "dgelu takes no bias, bias needs one"
                       : NULL;
  switch (e->kind) {
  case PP_EPI_NONE: no = "no epilogue"; break;
  case PP_EPI_GELU: out->epi = e->bias >= 0 ? RT_LT_GELU_AUX_BIAS : RT_LT_GELU_AUX; break;
  case PP_EPI_DGELU: out->epi = RT_LT_DGELU; break;
  case PP_EPI_BIAS: out->epi = RT_LT_BIAS; break;
  }
  if (no) {
    snprintf(why, whylen, "%s", no);
    return -1;
  }
  out->m = rt_gemm_colmajor(g);
  out->m.c = e->d; /* D: the column-major n x m result, C's layout (beta 0: C is not read) */
  out->aux = gelu ? e->aux : -1, out->aux_ld = gelu ? g->n : 0, out->bias = e->bias;
  return 0;
}

double rt_dev_time_ms(RtDev *d) {
  int rc = rt_dev_sync(d);
  return rc ? NAN : rt_util_now_s() * 1e3;
}

int rt_dev_fail_at(RtDev *d, const char *file, int line, const char *fmt, ...) {
  char msg[3072];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(d->err, sizeof d->err, "%s: %s [%s:%d]", d->desc, msg, file, line);
  return -1;
}
