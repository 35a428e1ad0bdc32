/* test_sched.c — the schedules against their published bubbles: on balanced stages (every stage's
 * forward, backward and weight-gradient costs equal) the predicted timeline of sched_time.c must
 * give, for p = 2..8 and M = 1..4p, naive (p-1)/p, GPipe and 1F1B (p-1)/(M+p-1) whatever the
 * forward/backward ratio, and ZB-H1 with F = B = W (p-1)/(3M+p-1) for M >= p (a third of 1F1B's idle
 * time); 1F1B holds p-r activation sets on stage r, GPipe M; every schedule passes the proof.
 * Interleaved 1F1B over V = 2..4 chunks per rank: (p-1)/(VM+p-1) for M a multiple of p; and what
 * does not fit is said. */
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

/* A rank's activation slots over its order: every entry in one of its slots, and an F never
 * takes a slot whose micro-batch (of any chunk) has not finished (its B, or its W with a split
 * backward). 1 when so. */
static int slots_ok(const Sched *s, int r) {
  const StageSched *st = &s->st[r];
  int holds[4096];
  if (st->nslots > 4096) return 0;
  for (int i = 0; i < st->nslots; i++) holds[i] = -1;
  for (int i = 0; i < st->n; i++) {
    const SchedEntry *e = &st->e[i];
    if (e->kind == SE_COMM) continue;
    if (e->slot < 0 || e->slot >= st->nslots) return 0;
    int unit = e->chunk * s->M + e->mb;
    if (e->kind == SE_F) {
      if (holds[e->slot] >= 0) return 0;
      holds[e->slot] = unit;
    } else if (holds[e->slot] != unit) return 0;
    else if (e->kind == (s->split ? SE_W : SE_B)) holds[e->slot] = -1;
  }
  return 1;
}

int main(void) {
  Src src = {.path = "test_sched"};
  for (int k = 0; k < sched_count(); k++) {
    const char *kind = sched_name(k);
    for (int p = 2; p <= 8; p++)
      for (int M = 1; M <= 4 * p; M++) {
        char why[256];
        if (sched_fits(kind, p, 1, M, 4 * p, why, sizeof why)) continue; /* zbv: two chunks, below */
        Sched *s = sched_build(p, 1, M, kind);
        check(!sched_verify(s, &src, NOLOC), "%s p=%d M=%d passes the proof", kind, p, M);
        StageCost *c = calloc((size_t)p, sizeof *c);
        /* F = B = W = 1 for a split backward; otherwise a backward twice a forward, and thrice */
        for (int ratio = 1; ratio <= (s->split ? 1 : 2); ratio++) {
          for (int r = 0; r < p; r++) c[r] = (StageCost){1, s->split ? 1 : ratio, s->split ? 1 : ratio, 1, 0, 0};
          SchedPrediction pr = sched_predict(s, c);
          double want = expected(kind, p, M);
          if (s->split && M < p) continue; /* too few micro-batches for W to fill the bubble */
          check(fabs(pr.bubble - want) < 1e-12, "%s p=%d M=%d ratio %d: bubble %.6f, formula %.6f", kind, p, M, ratio,
                pr.bubble, want);
        }
        for (int r = 0; r < p; r++) {
          int want = !strcmp(kind, "1f1b") || sched_chunked(kind) ? (p - r < M ? p - r : M) /* one chunk: 1F1B */
                     : !strcmp(kind, "gpipe")                     ? M
                     : !strcmp(kind, "naive")                     ? 1
                                                                  : (p < M ? p : M);
          check(s->st[r].nslots == want, "%s p=%d M=%d stage %d holds %d activation sets (want %d)", kind, p, M, r,
                s->st[r].nslots, want);
        }
        free(c);
        sched_free(s);
      }
  }
  /* interleaved 1F1B over V chunks per rank, M a multiple of p: each virtual stage's forward costs
   * 1/V of a stage's, so the bubble is ((p-1)/V) / (M + (p-1)/V) = (p-1)/(VM+p-1) */
  for (int p = 2; p <= 8; p++)
    for (int V = 2; V <= 4; V++)
      for (int M = p; M <= 4 * p; M += p) {
        char why[256];
        check(!sched_fits("interleaved", p, V, M, p * V, why, sizeof why), "interleaved p=%d V=%d M=%d fits", p, V, M);
        Sched *s = sched_build(p, V, M, "interleaved");
        check(!sched_verify(s, &src, NOLOC), "interleaved p=%d V=%d M=%d: every chunk's F and B once, messages matched",
              p, V, M);
        for (int r = 0; r < p; r++)
          check(slots_ok(s, r), "interleaved p=%d V=%d M=%d rank %d: no slot reused early", p, V, M, r);
        StageCost *c = calloc((size_t)(p * V), sizeof *c);
        for (int ratio = 1; ratio <= 2; ratio++) {
          for (int v = 0; v < p * V; v++) c[v] = (StageCost){1.0 / V, (double)ratio / V, (double)ratio / V, 1, 0, 0};
          double want = (double)(p - 1) / (V * M + p - 1), got = sched_predict(s, c).bubble;
          check(fabs(got - want) < 1e-12, "interleaved p=%d V=%d M=%d ratio %d: bubble %.6f, formula %.6f", p, V, M,
                ratio, got, want);
        }
        free(c);
        sched_free(s);
      }
  /* zbv: the V-shaped chunks with a split backward in the paper's order; proven and within 1F1B's
   * memory (2p chunk activations) at every p and M; with F = B = W its bubble is about half of
   * ZB-H1's at M >= p (the steady state has none) */
  for (int p = 2; p <= 8; p++)
    for (int M = 1; M <= 4 * p; M++) {
      Sched *s = sched_build(p, 2, M, "zbv");
      check(!sched_verify(s, &src, NOLOC), "zbv p=%d M=%d: every chunk's F, B and W once, messages matched", p, M);
      for (int r = 0; r < p; r++)
        check(slots_ok(s, r) && s->st[r].nslots <= 2 * p,
              "zbv p=%d M=%d rank %d: %d slots (at most 2p), none reused early", p, M, r, s->st[r].nslots);
      sched_free(s);
    }
  for (int p = 2; p <= 8; p++)
    for (int M = p; M <= 4 * p; M += p) {
      Sched *s = sched_build(p, 2, M, "zbv"), *h = sched_build(p, 1, M, "zb-h1");
      check(!sched_verify(s, &src, NOLOC), "zbv p=%d M=%d: every chunk's F, B and W once, messages matched", p, M);
      int self = 0; /* the turn of the V: rank p-1 sends its first chunk's output to its second */
      for (int i = 0; i < s->st[p - 1].n; i++)
        for (int k = 0; k < s->st[p - 1].e[i].nops; k++) self += s->st[p - 1].e[i].ops[k].peer == p - 1;
      check(self == 4 * M, "zbv p=%d M=%d: rank %d exchanges %d messages with itself (want 4 per micro-batch)", p, M,
            p - 1, self);
      for (int r = 0; r < p; r++)
        check(slots_ok(s, r), "zbv p=%d M=%d rank %d: each chunk in its own slots, none reused early", p, M, r);
      StageCost *c = calloc((size_t)(2 * p), sizeof *c), *ch = calloc((size_t)p, sizeof *ch);
      for (int v = 0; v < 2 * p; v++) c[v] = (StageCost){0.5, 0.5, 0.5, 1, 0, 0};
      for (int r = 0; r < p; r++) ch[r] = (StageCost){1, 1, 1, 1, 0, 0};
      double z = sched_predict(s, c).bubble, zh = sched_predict(h, ch).bubble;
      check(z < (M > p ? 0.6 : 1.0) * zh, "zbv p=%d M=%d: bubble %.4f, zb-h1's %.4f", p, M, z, zh);
      for (int r = 0; r < p; r++)
        check(sched_vstage(s, r, 0) == r && sched_vstage(s, r, 1) == 2 * p - 1 - r &&
                  sched_rank_of(s, 2 * p - 1 - r) == r,
              "zbv p=%d: rank %d holds virtual stages %d and %d", p, r, r, 2 * p - 1 - r);
      free(c), free(ch);
      sched_free(s), sched_free(h);
    }
  /* what does not fit: said, with what would */
  char why[256];
  check(sched_fits("interleaved", 4, 2, 6, 8, why, sizeof why) &&
            strstr(why, "6 micro-batches per replica do not fit (4 or 8 would)"),
        "interleaved with M not a multiple of p: %s", why);
  check(sched_fits("interleaved", 4, 3, 8, 8, why, sizeof why) && strstr(why, "into pp x vpp = 12 chunks") &&
            strstr(why, "vpp 2 or less would fit"),
        "interleaved with fewer layers than chunks: %s", why);
  check(sched_fits("zbv", 4, 3, 8, 24, why, sizeof why) && strstr(why, "it needs --vpp 2, not 3"),
        "zbv with --vpp 3: %s", why);
  check(sched_fits("interleaved", 1, 2, 4, 8, why, sizeof why) && strstr(why, "it needs --pp 2 or more"),
        "chunks of layers on one rank: %s", why);
  check(sched_fits("1f1b", 4, 2, 8, 8, why, sizeof why) &&
            strstr(why, "--vpp 2 needs a schedule whose ranks hold chunks"),
        "--vpp with an unchunked schedule: %s", why);
  return check_done();
}
