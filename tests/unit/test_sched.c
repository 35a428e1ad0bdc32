/* test_sched.c — the schedules against their published bubbles: on balanced stages (every stage's
 * forward, backward and weight-gradient costs equal) the predicted timeline of sched_time.c must
 * give, for p = 2..8 and M = 1..4p, naive (p-1)/p, GPipe and 1F1B (p-1)/(M+p-1) whatever the
 * forward/backward ratio, and ZB-H1 with F = B = W (p-1)/(3M+p-1) for M >= p (a third of 1F1B's idle
 * time); 1F1B holds p-r activation sets on stage r, GPipe M; every schedule passes the proof. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ppc.h"

static double expected(const char *kind, int p, int M) {
  if (!strcmp(kind, "naive")) return (double)(p - 1) / p;
  if (!strcmp(kind, "zb-h1")) return (double)(p - 1) / (3.0 * M + p - 1);
  return (double)(p - 1) / (M + p - 1);
}

int main(void) {
  Src src = {.path = "test_sched"};
  for (int k = 0; k < sched_count(); k++) {
    const char *kind = sched_name(k);
    for (int p = 2; p <= 8; p++)
      for (int M = 1; M <= 4 * p; M++) {
        Sched *s = sched_build(p, M, kind);
        check(!sched_verify(s, &src, NOLOC), "%s p=%d M=%d passes the proof", kind, p, M);
        StageCost *c = calloc((size_t)p, sizeof *c);
        /* F = B = W = 1 for a split backward; otherwise a backward twice a forward, and thrice */
        for (int ratio = 1; ratio <= (s->split ? 1 : 2); ratio++) {
          for (int r = 0; r < p; r++) c[r] = (StageCost){1, s->split ? 1 : ratio, s->split ? 1 : ratio, 1};
          SchedPrediction pr = sched_predict(s, c);
          double want = expected(kind, p, M);
          if (s->split && M < p) continue; /* too few micro-batches for W to fill the bubble */
          check(fabs(pr.bubble - want) < 1e-12, "%s p=%d M=%d ratio %d: bubble %.6f, formula %.6f", kind, p, M, ratio,
                pr.bubble, want);
        }
        for (int r = 0; r < p; r++) {
          int want = !strcmp(kind, "1f1b")    ? (p - r < M ? p - r : M)
                     : !strcmp(kind, "gpipe") ? M
                     : !strcmp(kind, "naive") ? 1
                                              : (p < M ? p : M);
          check(s->st[r].nslots == want, "%s p=%d M=%d stage %d holds %d activation sets (want %d)", kind, p, M, r,
                s->st[r].nslots, want);
        }
        free(c);
        sched_free(s);
      }
  }
  return check_done();
}
