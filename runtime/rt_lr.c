/* rt_lr.c - the learning-rate schedule (rt_lr.h): warmup, then constant, cosine, linear or
 * warmup-stable-decay, each in closed form. */
#include "rt_lr.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const names[] = {"constant", "cosine", "linear", "wsd"};

int rt_lr_kind(const char *name) {
  for (int k = 0; k < (int)(sizeof names / sizeof names[0]); k++)
    if (!strcmp(name, names[k])) return k;
  return -1;
}

const char *rt_lr_name(RtLrKind k) {
  switch (k) {
  case RT_LR_CONSTANT:
  case RT_LR_COSINE:
  case RT_LR_LINEAR:
  case RT_LR_WSD: return names[k];
  }
  return "?";
}

int rt_lr_check(RtLr *s, char *err, size_t errlen) {
  const char *name = rt_lr_name(s->kind);
  if (s->warmup > s->steps) {
    snprintf(err, errlen, "--warmup %lld is more than --steps %lld", (long long)s->warmup, (long long)s->steps);
    return -1;
  }
  if (s->lr_min > s->lr) {
    snprintf(err, errlen, "--lr-min %g is more than --lr %g: the decay goes down to --lr-min", s->lr_min, s->lr);
    return -1;
  }
  switch (s->kind) {
  case RT_LR_CONSTANT:
    if (s->decay || s->have_lr_min) {
      snprintf(err, errlen, "%s is for a decaying --lr-schedule (cosine, linear or wsd), not constant",
               s->decay ? "--decay-steps" : "--lr-min");
      return -1;
    }
    return 0;
  case RT_LR_COSINE:
  case RT_LR_LINEAR:
    if (!s->decay) s->decay = s->steps - s->warmup;
    if (s->decay < 1 && s->steps == 0) s->decay = 1; /* no step: nothing to schedule */
    if (s->decay < 1) {
      snprintf(err, errlen,
               "--lr-schedule %s: no step left to decay after --warmup %lld (--steps %lld): lower --warmup or "
               "give --decay-steps",
               name, (long long)s->warmup, (long long)s->steps);
      return -1;
    }
    return 0;
  case RT_LR_WSD: {
    int dflt = !s->decay;
    if (dflt) s->decay = s->steps / 5 > 0 ? s->steps / 5 : 1;
    if (s->warmup + s->decay > s->steps && s->steps > 0) {
      snprintf(err, errlen,
               "--lr-schedule wsd: --warmup %lld and --decay-steps %lld%s add up to more than --steps %lld (the "
               "decay is the run's last steps, after the warmup and the stable part)",
               (long long)s->warmup, (long long)s->decay, dflt ? " (the default: --steps / 5)" : "",
               (long long)s->steps);
      return -1;
    }
    return 0;
  }
  }
  return 0;
}

double rt_lr_at(const RtLr *s, int64_t step) {
  double t = (double)step + 1.0, w = (double)s->warmup, d = (double)s->decay;
  if (s->warmup > 0 && t <= w) return s->lr * t / w;
  double p;
  switch (s->kind) {
  case RT_LR_CONSTANT: return s->lr;
  case RT_LR_COSINE:
  case RT_LR_LINEAR:
    p = (t - w) / d;
    if (p > 1) p = 1;
    if (s->kind == RT_LR_LINEAR) return s->lr - (s->lr - s->lr_min) * p;
    return s->lr_min + (s->lr - s->lr_min) * (1 + cos(3.14159265358979323846 * p)) / 2;
  case RT_LR_WSD: {
    double t0 = (double)s->steps - d;
    if (t <= t0) return s->lr;
    p = (t - t0) / d;
    if (p > 1) p = 1;
    return s->lr_min + (s->lr - s->lr_min) * (1 - sqrt(p));
  }
  }
  return s->lr;
}
