/* rt_lr.h - the learning-rate schedule of ppr (rt_lr.c): lr(step) in closed form. */
#ifndef RT_LR_H
#define RT_LR_H

#include <stddef.h>
#include <stdint.h>

typedef enum { RT_LR_CONSTANT, RT_LR_COSINE, RT_LR_LINEAR, RT_LR_WSD } RtLrKind;

/* --lr-schedule KIND --lr LR --lr-min MIN --warmup W --decay-steps D over --steps N. With t = step + 1 (1-based):
 *   warmup (every kind): t <= W: LR * t / W (from 0, reaching LR at t = W);
 *   constant: LR after the warmup;
 *   cosine:   MIN + (LR - MIN) * (1 + cos(pi p)) / 2, p = min(1, (t - W) / D);
 *   linear:   LR - (LR - MIN) * p, p as for cosine;
 *   wsd:      LR until t = N - D, then MIN + (LR - MIN) * (1 - sqrt(p)), p = (t - (N - D)) / D (the "1-sqrt"
 *             cool-down): the last step uses MIN.
 * D: cosine and linear default to N - W (the decay ends on the last step), wsd to N / 5 (at least 1). */
typedef struct {
  RtLrKind kind;
  double lr, lr_min;
  int64_t warmup, decay, steps; /* decay 0: the default, set by rt_lr_check */
  int have_lr_min;              /* --lr-min given */
} RtLr;

/* "constant", "cosine", "linear", "wsd"; -1 for another name. */
int rt_lr_kind(const char *name);
const char *rt_lr_name(RtLrKind k);
/* Fills the default decay and checks the combination: 0, or -1 with a message naming the options
 * ("--warmup 20 is more than --steps 10"). */
int rt_lr_check(RtLr *s, char *err, size_t errlen);
/* The learning rate of 0-based step `step` (in double). */
double rt_lr_at(const RtLr *s, int64_t step);

#endif /* RT_LR_H */
