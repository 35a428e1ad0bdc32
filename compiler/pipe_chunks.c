/* pipe_chunks.c — a rank that holds several chunks of layers (interleaved, zbv): the rank's graph of
 * parameters, each tensor once however many of its chunks read it (ZB-V's rank 0 holds the first
 * virtual stage's embedding and the last one's head: one tied tensor, whose gradient both chunks
 * add into), with the pipeline's sharing decided between ranks rather than virtual stages. The
 * lowering (fuse_lower.c) gives each chunk its blocks and the rank one optimizer over these. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

/* Whether virtual stage v holds the model's parameter x (plan->held is in index order). */
static bool holds(const Plan *plan, int v, int x) {
  int lo = plan->held_at[v], hi = plan->held_at[v + 1];
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (plan->held[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo < plan->held_at[v + 1] && plan->held[lo] == x;
}

Graph *pipe_chunks_rank(const Graph *model, const Plan *vplan, const Sched *s, int r, Graph *const *chunk, int nch) {
  Graph *g = ir_clone_header(model);
  free(g->bounds); /* a rank of chunks: its stages are the schedule's */
  g->bounds = NULL;
  g->cfg.pp = s->pp;
  g->stage = r;
  g->npp = s->pp;
  int top = model->nparams;
  bool *seen = xcalloc((size_t)(top ? top : 1), sizeof *seen);
  for (int c = 0; c < nch; c++)
    for (int i = 0; i < chunk[c]->nparams; i++) {
      const IrParam *q = &chunk[c]->params[i];
      if (q->gindex < 0 || q->gindex >= top) diag_fatal("internal: parameter %s has no index in the model", q->name);
      if (seen[q->gindex]) continue; /* read by an earlier chunk too: one tensor */
      seen[q->gindex] = true;
      int pi = ir_copy_param(g, q, &chunk[c]->nodes[q->node]); /* may move g->params */
      IrParam *p = &g->params[pi];
      /* shared between ranks, not virtual stages: owned by the rank holding the lowest one */
      const ParamStages *ps = &vplan->param[q->gindex];
      bool other = false;
      for (int v = ps->first; v >= 0 && v <= ps->last && !other; v++)
        other = sched_rank_of(s, v) != r && holds(vplan, v, q->gindex);
      p->shared = other;
      p->copy = other && sched_rank_of(s, ps->first) != r;
    }
  free(seen);
  return g;
}
