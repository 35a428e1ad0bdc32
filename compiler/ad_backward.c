/* ad_backward.c — compile-time autodiff: appends the backward graph, one vector-Jacobian rule
 * per forward op, starting from an explicit backward-seed node. Gradients of a value with several
 * users are summed; parameter gradients are sinks that accumulate into the gradient buffers. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

typedef struct Contrib {
  int node;  /* the gradient contribution */
  int chunk; /* -1: a whole-tensor contribution; else the chunk index of a chunk's gradient */
  int parts;
  struct Contrib *next;
} Contrib;

typedef struct Ad {
  Graph *g;
  Contrib **contrib; /* per forward node */
  int at;            /* the forward node being differentiated: new nodes take its layer */
  int *regather;     /* per forward .tp_gather: its backward twin (sequence parallelism), -1 */
} Ad;

static IrNode *N(Ad *ad, int id) { return &ad->g->nodes[id]; }

/* A backward node placed with the forward node it differentiates. */
static int node(Ad *ad, Op op, Shape shape, int nin, const int *in) {
  int id = ir_add(ad->g, op, nin, in, shape);
  IrNode *n = N(ad, id), *f = N(ad, ad->at);
  n->bwd = true;
  n->layer = f->layer;
  n->region = f->region;
  n->loc = f->loc;
  n->layout = N(ad, in[0] >= 0 ? in[0] : ad->at)->layout;
  n->a = f->a;
  return id;
}

static int node1(Ad *ad, Op op, Shape shape, int a) { return node(ad, op, shape, 1, (int[]){a}); }
static int node2(Ad *ad, Op op, Shape shape, int a, int b) { return node(ad, op, shape, 2, (int[]){a, b}); }

/* Gradient contribution to t: parameters get a sink, inputs (integers) none. */
static void contribute(Ad *ad, int t, int g, int chunk, int parts) {
  IrNode *n = N(ad, t);
  if (n->op == OP_INPUT) return;
  if (n->op == OP_PARAM && chunk < 0) {
    int param = n->param;
    int s = node1(ad, OP_PARAM_GRAD, n->shape, g); /* may move the nodes: n is stale after it */
    N(ad, s)->gparam = param;
    return;
  }
  /* a gradient has the layout of the value it is the gradient of (transpose_sb flips it) */
  if (chunk < 0) N(ad, g)->layout = n->layout;
  Contrib *c = xcalloc(1, sizeof *c);
  *c = (Contrib){g, chunk, parts, ad->contrib[t]};
  ad->contrib[t] = c;
}

static int sink(Ad *ad, Op op, int param_node, int nin, const int *in) {
  int s = node(ad, op, N(ad, param_node)->shape, nin, in);
  N(ad, s)->gparam = N(ad, param_node)->param;
  return s;
}

/* The summed gradient of t: chunk gradients side by side, then everything added. */
static int gradient_of(Ad *ad, int t) {
  Contrib *list = ad->contrib[t];
  if (!list) return -1;
  int total = -1;
  /* chunk contributions, grouped by their number of parts */
  for (Contrib *c = list; c; c = c->next) {
    if (c->chunk < 0 || c->node < 0) continue;
    int parts = c->parts, in[6];
    for (int k = 0; k < 6; k++) in[k] = -1;
    for (Contrib *d = c; d; d = d->next) {
      if (d->chunk < 0 || d->node < 0 || d->parts != parts) continue;
      int k = d->chunk;
      in[k] = in[k] < 0 ? d->node : node2(ad, OP_ADD, N(ad, d->node)->shape, in[k], d->node);
      if (d != c) d->node = -1;
    }
    c->node = -1;
    int cat = node(ad, OP_CONCAT, N(ad, t)->shape, parts, in);
    N(ad, cat)->a.parts = parts;
    N(ad, cat)->layout = N(ad, t)->layout;
    total = total < 0 ? cat : node2(ad, OP_ADD, N(ad, t)->shape, total, cat);
  }
  for (Contrib *c = list; c; c = c->next) {
    if (c->chunk >= 0) continue;
    total = total < 0 ? c->node : node2(ad, OP_ADD, N(ad, t)->shape, total, c->node);
  }
  return total;
}

/* One vector-Jacobian rule per op: gy is the gradient of node i's output. */
static void vjp(Ad *ad, int i, int gy) {
  IrNode n = *N(ad, i); /* a copy: adding nodes may move the array */
  const int *in = n.in;
  Shape sx = N(ad, in[0])->shape;
  int g;
  switch (n.op) {
  case OP_EMBEDDING: sink(ad, OP_EMBEDDING_DW, in[1], 2, (int[]){in[0], gy}); break;
  case OP_POS_EMBEDDING: sink(ad, OP_POS_EMBEDDING_DW, in[0], 1, (int[]){gy}); break;
  case OP_LINEAR:
  case OP_MATMUL: {
    int lin = n.op == OP_LINEAR;
    contribute(ad, in[0], node2(ad, lin ? OP_LINEAR_DX : OP_MATMUL_DX, sx, gy, in[1]), -1, 0);
    /* a sequence-parallel input is gathered again for the weight gradient (Megatron-SP): the
     * forward's whole sequence is then not kept for the backward, only each rank's positions */
    int x = in[0];
    if (N(ad, x)->op == OP_TP_GATHER) {
      if (ad->regather[x] < 0) ad->regather[x] = node1(ad, OP_TP_GATHER, N(ad, x)->shape, N(ad, x)->in[0]);
      x = ad->regather[x];
    }
    sink(ad, lin ? OP_LINEAR_DW : OP_MATMUL_DW, in[1], 2, (int[]){gy, x});
    if (n.nin == 3) sink(ad, OP_BIAS_DB, in[2], 1, (int[]){gy});
    break;
  }
  case OP_RMSNORM:
  case OP_LAYERNORM: {
    int rms = n.op == OP_RMSNORM;
    g = node(ad, rms ? OP_RMSNORM_DX : OP_LAYERNORM_DX, sx, 3, (int[]){gy, in[0], in[1]});
    N(ad, g)->fwd = i;
    contribute(ad, in[0], g, -1, 0);
    int s = sink(ad, rms ? OP_RMSNORM_DW : OP_LAYERNORM_DW, in[1], 2, (int[]){gy, in[0]});
    N(ad, s)->fwd = i;
    if (!rms) sink(ad, OP_BIAS_DB, in[2], 1, (int[]){gy});
    break;
  }
  case OP_ROPE: contribute(ad, in[0], node1(ad, OP_ROPE_DX, sx, gy), -1, 0); break;
  case OP_SPLIT_HEADS: contribute(ad, in[0], node1(ad, OP_MERGE_HEADS, sx, gy), -1, 0); break;
  case OP_MERGE_HEADS:
    g = node1(ad, OP_SPLIT_HEADS, sx, gy);
    N(ad, g)->a.heads = sx.d[2];
    contribute(ad, in[0], g, -1, 0);
    break;
  case OP_ATTENTION: {
    static const Op ops[3] = {OP_ATTENTION_DQ, OP_ATTENTION_DK, OP_ATTENTION_DV};
    for (int k = 0; k < 3; k++) {
      g = node(ad, ops[k], N(ad, in[k])->shape, 4, (int[]){in[0], in[1], in[2], gy});
      N(ad, g)->fwd = i;
      contribute(ad, in[k], g, -1, 0);
    }
    break;
  }
  case OP_SILU: contribute(ad, in[0], node2(ad, OP_SILU_DX, sx, gy, in[0]), -1, 0); break;
  case OP_GELU: contribute(ad, in[0], node2(ad, OP_GELU_DX, sx, gy, in[0]), -1, 0); break;
  case OP_RELU: contribute(ad, in[0], node2(ad, OP_RELU_DX, sx, gy, in[0]), -1, 0); break;
  case OP_SCALE: contribute(ad, in[0], node1(ad, OP_SCALE, sx, gy), -1, 0); break; /* by kept: dx = by * dy */
  case OP_SOFTCAP: contribute(ad, in[0], node2(ad, OP_SOFTCAP_DX, sx, gy, in[0]), -1, 0); break;
  case OP_DROPOUT: contribute(ad, in[0], node1(ad, OP_DROPOUT_DX, sx, gy), -1, 0); break; /* p, dropid kept */
  case OP_ADD:
    contribute(ad, in[0], gy, -1, 0);
    contribute(ad, in[1], gy, -1, 0);
    break;
  case OP_MUL:
    contribute(ad, in[0], node2(ad, OP_MUL, sx, gy, in[1]), -1, 0);
    contribute(ad, in[1], node2(ad, OP_MUL, sx, gy, in[0]), -1, 0);
    break;
  case OP_CHUNK: contribute(ad, in[0], gy, (int)n.a.index, (int)n.a.parts); break;
  case OP_TRANSPOSE_SB: contribute(ad, in[0], node1(ad, OP_TRANSPOSE_SB, sx, gy), -1, 0); break;
  case OP_TP_COPY: /* identity forward; the gradient is summed over the TP group */
    contribute(ad, in[0], node1(ad, OP_ALLREDUCE, sx, gy), -1, 0);
    break;
  case OP_TP_REDUCE: contribute(ad, in[0], gy, -1, 0); break; /* summed forward; the gradient passes */
  case OP_TP_GATHER: /* the readers' gradients are partial (column-parallel): summed, each rank its part */
    contribute(ad, in[0], node1(ad, OP_TP_SCATTER, sx, gy), -1, 0);
    break;
  case OP_TP_UNSPLIT: /* whole readers (made replicated by their own .tp_copy): the rank's part */
    contribute(ad, in[0], node1(ad, OP_TP_SLICE, sx, gy), -1, 0);
    break;
  case OP_TP_SCATTER: /* every rank's partial sum feeds every part: the whole gradient */
  case OP_TP_SLICE:   /* each rank's part of the replicated value's gradient, gathered */
    contribute(ad, in[0], node1(ad, OP_TP_GATHER, sx, gy), -1, 0);
    break;
  case OP_ADD_BIAS:
    contribute(ad, in[0], gy, -1, 0);
    sink(ad, OP_BIAS_DB, in[1], 1, (int[]){gy});
    break;
  case OP_CROSS_ENTROPY:
    g = node(ad, OP_CE_DX, sx, 3, (int[]){in[0], in[1], gy});
    N(ad, g)->fwd = i;
    contribute(ad, in[0], g, -1, 0);
    break;
  /* leaves and the sent hidden state: ad_backward() calls no rule for them (a parameter's
   * gradient is a sink, an input has none, the received value's gradient is sent back) */
  OP_CASES_LEAF:
  OP_CASES_PP:
    diag_fatal("internal: vjp of %s, which has no rule of its own", ir_ops[n.op].name);
  /* made by autodiff: no gradient of their own (the backward graph is not differentiated) */
  OP_CASES_BWD:
  OP_CASES_BWD_ELEM:
    diag_fatal("internal: vjp of %s, a backward op", ir_ops[n.op].name);
  }
}

int ad_backward(Graph *g) {
  Ad ad = {.g = g,
           .contrib = xcalloc((size_t)g->nnodes, sizeof(Contrib *)),
           .regather = xmalloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof(int))};
  for (int i = 0; i < g->nnodes; i++) ad.regather[i] = -1;
  g->nfwd = g->nnodes;
  g->grad = xmalloc((size_t)g->nnodes * sizeof *g->grad);
  for (int i = 0; i < g->nfwd; i++) g->grad[i] = -1;
  /* where the backward starts: the seed d loss = 1/microbatches on the last stage, the received
   * gradient of the sent hidden state on the others */
  int recv_fwd = -1;
  for (int i = 0; i < g->nfwd; i++) {
    IrNode n = *N(&ad, i); /* a copy: adding nodes may move the array */
    if (n.op == OP_RECV_FORWARD) recv_fwd = i;
    if (n.op == OP_SEND_FORWARD) {
      ad.at = i;
      int rb = node(&ad, OP_RECV_BACKWARD, n.shape, 0, (int[]){-1});
      N(&ad, rb)->layout = n.layout;
      contribute(&ad, n.in[0], rb, -1, 0);
    }
  }
  if (g->loss >= 0) {
    ad.at = g->loss;
    g->seed = node(&ad, OP_SEED, (Shape){0, {0}}, 0, (int[]){-1});
    N(&ad, g->seed)->layout = LAYOUT_NONE;
    contribute(&ad, g->loss, g->seed, -1, 0);
  }
  for (int i = g->nfwd - 1; i >= 0; i--) {
    IrNode *n = N(&ad, i);
    if (n->op == OP_INPUT || n->op == OP_PARAM || n->op == OP_SEND_FORWARD) continue;
    ad.at = i;
    int gy = gradient_of(&ad, i);
    if (gy < 0) continue;
    g->grad[i] = gy;
    if (N(&ad, i)->op != OP_RECV_FORWARD) vjp(&ad, i, gy); /* gradient_of may have moved the nodes */
  }
  /* a parameter read through chunk: its parts' gradients side by side, into its gradient */
  for (int i = 0; i < g->nfwd; i++)
    if (N(&ad, i)->op == OP_PARAM && ad.contrib[i]) {
      ad.at = i;
      int gp = gradient_of(&ad, i);
      int s = node1(&ad, OP_PARAM_GRAD, N(&ad, i)->shape, gp);
      N(&ad, s)->gparam = N(&ad, i)->param;
    }
  /* the received leaf's gradient goes back to the previous stage */
  if (recv_fwd >= 0 && g->grad[recv_fwd] >= 0) {
    ad.at = recv_fwd;
    node(&ad, OP_SEND_BACKWARD, N(&ad, recv_fwd)->shape, 1, (int[]){g->grad[recv_fwd]});
  }
  for (int i = 0; i < g->nfwd; i++)
    for (Contrib *c = ad.contrib[i], *next; c; c = next) next = c->next, free(c);
  free(ad.contrib);
  free(ad.regather);
  return ir_verify(g);
}
