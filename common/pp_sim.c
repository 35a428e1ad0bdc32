/* pp_sim.c — the rendezvous simulation of every rank's pipeline messages (pp_sim.h). */
#include "pp_sim.h"

#include <stdbool.h>
#include <stdlib.h>

int pp_sim_run(const PpSimRank *rank, int n, int *at, unsigned char (*done)[2]) {
  for (int r = 0; r < n; r++) at[r] = 0, done[r][0] = done[r][1] = 0;
  for (;;) {
    int progress = 0, finished = 1;
    for (int r = 0; r < n; r++) {
      if (at[r] >= rank[r].n) continue;
      finished = 0;
      const PpSimBatch *x = &rank[r].b[at[r]];
      for (int i = 0; i < x->nops; i++) {
        int q = x->op[i].peer;
        if (done[r][i] || q < 0 || q >= n || at[q] >= rank[q].n) continue;
        const PpSimBatch *y = &rank[q].b[at[q]];
        for (int j = 0; j < y->nops; j++)
          if (!done[q][j] && y->op[j].peer == r && y->op[j].tag == x->op[i].tag && y->op[j].send != x->op[i].send) {
            done[r][i] = done[q][j] = 1;
            progress = 1;
            break;
          }
      }
    }
    if (finished) return 0;
    for (int r = 0; r < n; r++) {
      if (at[r] >= rank[r].n) continue;
      const PpSimBatch *x = &rank[r].b[at[r]];
      int all = 1;
      for (int i = 0; i < x->nops; i++) all &= done[r][i];
      if (all) {
        at[r]++;
        done[r][0] = done[r][1] = 0;
        progress = 1;
      }
    }
    if (!progress) return 1;
  }
}

int pp_sim_run_eager(const PpSimRank *rank, int n, int *at, unsigned char (*done)[2]) {
  /* the sends posted and not yet received: (from, to, tag), in posting order */
  int cap = 1, nsent = 0;
  for (int r = 0; r < n; r++) cap += 2 * rank[r].n;
  int(*sent)[3] = malloc((size_t)cap * sizeof *sent);
  if (!sent) return 1;
  for (int r = 0; r < n; r++) at[r] = 0, done[r][0] = done[r][1] = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; r++) {
      if (at[r] >= rank[r].n) continue;
      const PpSimBatch *x = &rank[r].b[at[r]];
      for (int i = 0; i < x->nops; i++) {
        if (done[r][i]) continue;
        if (x->op[i].send) { /* posted: done */
          sent[nsent][0] = r, sent[nsent][1] = x->op[i].peer, sent[nsent++][2] = x->op[i].tag;
          done[r][i] = 1;
          progress = true;
          continue;
        }
        for (int k = 0; k < nsent; k++)
          if (sent[k][0] == x->op[i].peer && sent[k][1] == r && sent[k][2] == x->op[i].tag) {
            sent[k][0] = sent[nsent - 1][0], sent[k][1] = sent[nsent - 1][1], sent[k][2] = sent[nsent - 1][2];
            nsent--;
            done[r][i] = 1;
            progress = true;
            break;
          }
      }
      int all = 1;
      for (int i = 0; i < x->nops; i++) all &= done[r][i];
      if (all) {
        at[r]++;
        done[r][0] = done[r][1] = 0;
        progress = true;
      }
    }
  }
  int stuck = nsent > 0;
  for (int r = 0; r < n; r++) stuck |= at[r] < rank[r].n;
  free(sent);
  return stuck;
}
