/* ir_transpose.c — a stage's transposes moved before the linear or matmul layer they follow:
 * transpose_sb(linear(x, W)) becomes linear(transpose_sb(x), W). The head's logits leave [B,S,V]
 * while the hidden states are [S,B,H]: computed as written, the head is B products of S rows each
 * (strided batches over the sequence-first rows), its weight gradient B products of S-deep sums.
 * Moved, the [S,B,H] input is copied to [B,S,H] once (H columns, where the logits have V), and the
 * head, its input gradient and its weight gradient are one product each over all B*S rows. */
#include <stdlib.h>

#include "ppc.h"

/* Swaps node t = transpose_sb(l) and node l = linear(x, W[, b]) in place, l read by t alone: l
 * becomes transpose_sb(x) and t linear(l, W[, b]), each keeping its index (inputs still precede
 * their readers), t its value's name, shape and layout. */
static void swap(Graph *g, int t, int l) {
  IrNode *T = &g->nodes[t], *L = &g->nodes[l];
  IrNode lin = *L, tr = *T;
  const Shape *xs = &g->nodes[lin.in[0]].shape;
  *L = tr;
  L->in[0] = lin.in[0];
  L->shape = *xs;
  L->shape.d[0] = xs->d[1];
  L->shape.d[1] = xs->d[0];
  L->var = NULL;
  *T = lin;
  T->in[0] = l;
  T->shape = tr.shape;
  T->layout = tr.layout;
  T->var = tr.var;
}

void ir_transpose_sink(Graph *g) {
  int *users = xcalloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *users);
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].nin; k++)
      if (g->nodes[i].in[k] >= 0) users[g->nodes[i].in[k]]++;
  for (int t = 0; t < g->nnodes; t++) {
    const IrNode *n = &g->nodes[t];
    if (n->op != OP_TRANSPOSE_SB || n->bwd) continue;
    int l = n->in[0];
    const IrNode *L = &g->nodes[l];
    if ((L->op != OP_LINEAR && L->op != OP_MATMUL) || users[l] != 1 || g->nodes[L->in[0]].shape.nd != 3) continue;
    swap(g, t, l);
  }
  free(users);
}
