/* test_partition.c — the balanced pipeline partition (pipe_balance) against the dynamic program it
 * replaced: over prefixes, best[r][j] = min over i of max(best[r-1][i], cost of stage r on [i, j)),
 * taking the first i that reaches the minimum, O(p N^2). On random layer costs (uniform, heavy-
 * tailed, with ties and zeros) and every pp up to N, both must give the same boundaries. Then one
 * large case that the dynamic program could not do: 100,000 layers over 1,000 stages. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ppc.h"

static void reference(const double *layer, int N, double pre, double post, int pp, int *bounds) {
  double *prefix = calloc((size_t)N + 1, sizeof *prefix);
  for (int l = 0; l < N; l++) prefix[l + 1] = prefix[l] + layer[l];
  double *best = malloc((size_t)(pp + 1) * (size_t)(N + 1) * sizeof *best);
  int *cut = malloc((size_t)(pp + 1) * (size_t)(N + 1) * sizeof *cut);
#define AT(r, j) ((size_t)(r) * (size_t)(N + 1) + (size_t)(j))
  for (int j = 0; j <= N; j++) best[AT(0, j)] = j == 0 ? 0 : 1e300;
  for (int r = 1; r <= pp; r++)
    for (int j = 0; j <= N; j++) {
      best[AT(r, j)] = 1e300;
      cut[AT(r, j)] = -1;
      for (int i = r - 1; i < j; i++) {
        double stage = prefix[j] - prefix[i] + (r == 1 ? pre : 0) + (r == pp && j == N ? post : 0);
        double worst = best[AT(r - 1, i)] > stage ? best[AT(r - 1, i)] : stage;
        if (worst < best[AT(r, j)]) best[AT(r, j)] = worst, cut[AT(r, j)] = i;
      }
    }
  bounds[pp] = N;
  for (int r = pp, j = N; r > 0; r--) j = bounds[r - 1] = cut[AT(r, j)];
#undef AT
  free(prefix);
  free(best);
  free(cut);
}

static unsigned long long rng = 88172645463325252ULL;
static double uniform(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

int main(void) {
  int ncases = 0;
  for (int trial = 0; trial < 400; trial++) {
    int N = 1 + (int)(uniform() * 40);
    double layer[64];
    int kind = trial % 4;
    for (int l = 0; l < N; l++) {
      double u = uniform();
      layer[l] = kind == 0   ? u * 100                          /* uniform */
                 : kind == 1 ? (double)(1 + (int)(u * 3)) * 1e9 /* few values: ties */
                 : kind == 2 ? (u < 0.3 ? 0 : u * 1e12)         /* zeros */
                             : 1.0 / (1e-3 + u * u);            /* heavy-tailed */
    }
    double pre = uniform() < 0.5 ? 0 : uniform() * 500, post = uniform() * 500;
    for (int pp = 1; pp <= N; pp++) {
      int want[65], got[65];
      reference(layer, N, pre, post, pp, want);
      memset(got, 0xff, sizeof got);
      pipe_balance(layer, N, pre, post, pp, got);
      int same = !memcmp(want, got, (size_t)(pp + 1) * sizeof *got);
      check(same, "trial %d (kind %d): %d layers over %d stages: boundaries as the dynamic program's", trial, kind, N,
            pp);
      if (!same) {
        for (int r = 0; r <= pp; r++) printf("  bound %d: want %d got %d\n", r, want[r], got[r]);
      }
      ncases++;
    }
  }
  printf("PASS %d partitions equal the dynamic program's\n", ncases);

  /* 100,000 layers over 1,000 stages: every stage non-empty, in order, the last one ending at N */
  int N = 100000, pp = 1000;
  double *layer = malloc((size_t)N * sizeof *layer);
  for (int l = 0; l < N; l++) layer[l] = 1 + uniform();
  int *b = malloc((size_t)(pp + 1) * sizeof *b);
  pipe_balance(layer, N, 50, 200, pp, b);
  int ok = b[0] == 0 && b[pp] == N;
  double worst = 0, sum = 0;
  for (int r = 0; r < pp; r++) {
    ok = ok && b[r + 1] > b[r];
    double s = 0;
    for (int l = b[r]; l < b[r + 1]; l++) s += layer[l];
    worst = s > worst ? s : worst;
    sum += s;
  }
  check(ok, "100000 layers over 1000 stages: boundaries increase from 0 to N");
  check(worst <= sum / pp + 2 + 250,
        "100000 layers over 1000 stages: the costliest stage (%.1f) within two layers and the ends of the mean (%.1f)",
        worst, sum / pp);
  printf("PASS 100000 layers over 1000 stages\n");
  free(layer);
  free(b);
  return check_done();
}
