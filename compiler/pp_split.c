/* pp_split.c — one pipeline stage's forward graph: the nodes of its layers (and the embedding on
 * the first stage, the final norm, head and loss on the last), only the parameters they read
 * (under their global names), and the boundary nodes: a recv_forward leaf standing for the
 * previous stage's hidden state and a send_forward of the hidden state the next stage reads. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

Graph *pp_split(const Graph *g, int stage) {
  int pp = (int)g->cfg.pp;
  Graph *s = xcalloc(1, sizeof *s);
  s->src = g->src;
  s->model = xstrdup(g->model);
  s->cfg = g->cfg;
  s->nlayers = g->nlayers;
  s->vocab = g->vocab;
  if (g->bounds) {
    s->bounds = xmalloc((size_t)(pp + 1) * sizeof *s->bounds);
    memcpy(s->bounds, g->bounds, (size_t)(pp + 1) * sizeof *s->bounds);
  }
  s->layers_loc = g->layers_loc;
  s->loss = -1;
  s->seed = -1;
  s->stage = stage;
  s->npp = pp;
  int *map = xmalloc((size_t)g->nnodes * sizeof *map); /* old node -> new node */
  for (int i = 0; i < g->nnodes; i++) map[i] = -1;
  int recv = -1, hidden_in = -1;

  for (int i = 0; i < g->nfwd; i++) {
    const IrNode *n = &g->nodes[i];
    if (n->op == OP_PARAM || n->op == OP_INPUT) continue; /* copied when first read */
    if (pp_stage_of_node(g, pp, n) != stage) continue;
    int in[6];
    for (int k = 0; k < n->nin; k++) {
      int src = n->in[k];
      const IrNode *sn = &g->nodes[src];
      if (map[src] < 0 && sn->op == OP_PARAM) {
        int pi = ir_copy_param(s, &g->params[sn->param], sn); /* may move s->params */
        map[src] = s->params[pi].node;
      } else if (map[src] < 0 && sn->op == OP_INPUT) {
        int id = ir_add_node(s, OP_INPUT, sn->loc);
        s->nodes[id] = *sn;
        s->nodes[id].param = s->ninputs;
        s->inputs[s->ninputs] = g->inputs[sn->param];
        s->inputs[s->ninputs].node = id;
        s->ninputs++;
        map[src] = id;
      } else if (map[src] < 0) {
        /* a value of an earlier stage: the hidden state the previous stage sends */
        if (hidden_in >= 0 && hidden_in != src)
          diag_fatal("internal: stage %d reads two values of earlier stages (%%%d and %%%d)", stage, hidden_in, src);
        hidden_in = src;
        recv = ir_add(s, OP_RECV_FORWARD, 0, NULL, sn->shape);
        s->nodes[recv].layout = sn->layout;
        s->nodes[recv].layer = n->layer;
        s->nodes[recv].region = n->region;
        s->nodes[recv].var = sn->var;
        map[src] = recv;
      }
      in[k] = map[src];
    }
    int id = ir_add_node(s, n->op, n->loc);
    s->nodes[id] = *n;
    memcpy(s->nodes[id].in, in, sizeof in[0] * (size_t)n->nin);
    map[i] = id;
    if (i == g->loss) s->loss = id;
  }
  /* the value the next stage reads */
  if (stage + 1 < pp) {
    int out = -1;
    for (int i = 0; i < g->nfwd; i++) {
      const IrNode *n = &g->nodes[i];
      if (n->op == OP_PARAM || n->op == OP_INPUT || pp_stage_of_node(g, pp, n) != stage + 1) continue;
      for (int k = 0; k < n->nin; k++) {
        const IrNode *sn = &g->nodes[n->in[k]];
        if (sn->op != OP_PARAM && sn->op != OP_INPUT && pp_stage_of_node(g, pp, sn) == stage) out = n->in[k];
      }
    }
    if (out < 0 || map[out] < 0) diag_fatal("internal: stage %d sends nothing to stage %d", stage, stage + 1);
    int snd = ir_add(s, OP_SEND_FORWARD, 1, (int[]){map[out]}, g->nodes[out].shape);
    s->nodes[snd].layout = g->nodes[out].layout;
    s->nodes[snd].layer = g->nodes[out].layer;
    s->nodes[snd].region = g->nodes[out].region;
  }
  free(map);
  if (ir_verify(s)) diag_fatal("internal: stage %d's graph does not verify", stage);
  return s;
}
