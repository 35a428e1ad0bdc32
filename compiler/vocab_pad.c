/* vocab_pad.c — the vocabulary's rows padded to a multiple of train { vocab_pad } on each rank
 * (llm.c's 50257 -> 50304): a head's GEMMs over the padded width have aligned rows and a width the
 * GEMM libraries tile evenly. The padding rows of the table are zeros (ppr initialises and loads
 * only the dense rows: a param's `shard` past its dense size), so the padded logits are 0; the
 * cross-entropy leaves them out of its maximum and sums and gives them no gradient, so the
 * padding rows' gradients stay 0 and the loss is the unpadded one. Checkpoints hold the dense
 * tensor. Under tensor parallelism tp_shard() pads each rank's rows by the same rule. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

/* Whether tp ranks of rows rows each give the last rank a row of a dense-row vocabulary: it starts
 * at row (tp - 1) rows, which must lie inside the table. */
bool vocab_rows_fit(int64_t dense, int64_t tp, int64_t rows) { return (tp - 1) * rows < dense; }

/* A rank's rows: ceil(dense / tp), rounded up to a multiple of pad unless that would leave the last
 * rank without a row of the vocabulary (16 rows over tp 2 at 64 a rank), which keeps the rows
 * unpadded but for tp's own rounding. */
int64_t vocab_pad_rows(int64_t dense, int64_t tp, int64_t pad) {
  int64_t local = (dense + tp - 1) / tp, padded = pad > 1 ? (local + pad - 1) / pad * pad : local;
  return vocab_rows_fit(dense, tp, padded) ? padded : local;
}

/* The dimension of param node p that holds the vocabulary: a matmul's weight [H, V] has it last,
 * a linear's [V, H] and an embedding table first. */
static int vocab_dim(const Graph *g, int p) {
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *u = &g->nodes[i];
    if (u->op == OP_MATMUL && u->nin >= 2 && u->in[1] == p) return 1;
  }
  return 0;
}

/* Whether the values that read param p of graph g (the head's product, what is elementwise of it or
 * swaps its first two dimensions, the cross-entropy or the logits a generation program returns)
 * can all take the padded width; padded[i] marks those whose last dimension grows. Anything else
 * reading them (a reduction over the vocabulary other than the cross-entropy's, a head with a
 * bias) keeps the vocabulary unpadded. */
static bool follows(const Graph *g, int p, bool *padded) {
  memset(padded, 0, (size_t)g->nnodes * sizeof *padded);
  padded[p] = true;
  for (int i = p + 1; i < g->nnodes; i++) {
    const IrNode *n = &g->nodes[i];
    bool reads = false;
    for (int k = 0; k < n->nin; k++) reads |= n->in[k] >= 0 && padded[n->in[k]];
    if (!reads) continue;
    bool weight = (n->op == OP_LINEAR || n->op == OP_MATMUL) && n->in[1] == p && n->in[0] >= 0 && !padded[n->in[0]] &&
                  (n->nin < 3 || n->in[2] < 0);
    if (n->op == OP_EMBEDDING && n->in[1] == p && !padded[n->in[0]]) continue; /* rows by token: unchanged */
    if (n->op == OP_CROSS_ENTROPY && !padded[n->in[1]]) continue;
    if (weight || n->op == OP_LOGITS || n->op == OP_TRANSPOSE_SB || fuse_elem_is(n->op)) {
      for (int k = 0; k < n->nin && !weight; k++) /* elementwise: every input the padded width, or a scalar */
        if (n->in[k] >= 0 && !padded[n->in[k]] && ir_shape_numel(&g->nodes[n->in[k]].shape) != 1) return false;
      padded[i] = true;
      continue;
    }
    return false;
  }
  return true;
}

void vocab_pad(Graph *g, const Graph *model) {
  int64_t pad = g->cfg.vocab_pad;
  if (pad <= 1) return;
  bool *padded = xcalloc((size_t)(g->nnodes > model->nnodes ? g->nnodes : model->nnodes) + 1, sizeof *padded);
  for (int pi = 0; pi < g->nparams; pi++) {
    IrParam *q = &g->params[pi];
    const IrParam *mq = &model->params[q->gindex];
    int p = q->node, dim = vocab_dim(model, mq->node);
    if (q->role != ROLE_VOCAB || q->shard_dim >= 0 || dim >= q->shape.nd) continue;
    int64_t dense = q->shape.d[dim], rows = vocab_pad_rows(dense, 1, pad);
    /* the whole model decides, so that each stage holding the tensor (a tied table's embedding
     * and its head) pads it alike; a stage reads it as the whole model does */
    if (rows == dense || !follows(model, mq->node, padded)) continue;
    if (!follows(g, p, padded))
      diag_fatal("internal: a stage reads the vocabulary table '%s' otherwise than the model", q->name);
    q->shard_dim = dim, q->dense_len = dense;
    q->shape.d[dim] = rows;
    g->nodes[p].shape = q->shape;
    for (int i = p + 1; i < g->nnodes; i++) {
      IrNode *n = &g->nodes[i];
      if (n->op == OP_CROSS_ENTROPY && padded[n->in[0]]) n->a.vtotal = g->vocab;
      if (!padded[i]) continue;
      n->shape.d[n->shape.nd - 1] = rows;
      if (n->op == OP_LOGITS) n->a.vtotal = g->vocab;
    }
  }
  free(padded);
}
