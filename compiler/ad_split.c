/* ad_split.c — the split backward of the zero-bubble schedules: B computes what the previous stage
 * waits for (the gradient of the received hidden state, sent back), W the rest (the weight
 * gradients: the GEMMs and reductions that only feed parameter gradients). A backward node is in
 * B when the sent gradient depends on it; every other backward node is marked wgt. B then sends
 * its gradient before W runs. On the first stage nothing is sent back: all of its backward is W. */
#include <stdlib.h>

#include "ppc.h"

void ad_split(Graph *g) {
  bool *need = xcalloc((size_t)g->nnodes, sizeof *need);
  /* nodes only read nodes made before them: one sweep from the last node back finds every
   * backward node a send_backward depends on */
  for (int i = g->nnodes - 1; i >= 0; i--) {
    const IrNode *n = &g->nodes[i];
    if (n->op == OP_SEND_BACKWARD) need[i] = true;
    if (!need[i]) continue;
    for (int k = 0; k < n->nin; k++) {
      if (n->in[k] >= i) diag_fatal("internal: node %d reads node %d, made after it", i, n->in[k]);
      if (n->in[k] >= 0 && g->nodes[n->in[k]].bwd) need[n->in[k]] = true;
    }
  }
  /* attention's three gradients are computed together (fuse_gemm.c, at the first of them): all in B
   * when any of them is needed there (they read the same inputs, which B computes then anyway) */
  bool *att = xcalloc((size_t)g->nnodes, sizeof *att); /* per forward attention node */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < g->nnodes; i++) {
      const IrNode *n = &g->nodes[i];
      if (n->op != OP_ATTENTION_DQ && n->op != OP_ATTENTION_DK && n->op != OP_ATTENTION_DV) continue;
      if (pass == 0) att[n->fwd] |= need[i];
      else need[i] = att[n->fwd];
    }
  free(att);
  for (int i = 0; i < g->nnodes; i++) g->nodes[i].wgt = g->nodes[i].bwd && !need[i];
  free(need);
}
