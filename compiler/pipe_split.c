/* pipe_split.c — one pipeline stage's forward graph: the nodes of its layers (and the embedding on
 * the first stage, the final norm, head and loss on the last), only the parameters they read
 * (under their global names), and the boundary nodes: a recv_forward leaf standing for the
 * previous stage's hidden state and a send_forward of the hidden state the next stage reads. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

/* Old node ids to the stage's: an array over the stage's own node range, and a short list for
 * the few values read from outside it (parameters declared elsewhere, the inputs, the hidden
 * state of the previous stage). */
typedef struct Map {
  int lo, hi, *in; /* [lo, hi): the stage's nodes */
  int (*out)[2];   /* {old, new} */
  int nout, cap;
} Map;

static int *map_at(Map *m, int old) {
  if (old >= m->lo && old < m->hi) return &m->in[old - m->lo];
  for (int i = 0; i < m->nout; i++)
    if (m->out[i][0] == old) return &m->out[i][1];
  if (m->nout == m->cap) {
    m->cap = m->cap ? 2 * m->cap : 16;
    m->out = xrealloc(m->out, (size_t)m->cap * sizeof *m->out);
  }
  m->out[m->nout][0] = old;
  m->out[m->nout][1] = -1;
  return &m->out[m->nout++][1];
}

/* The first forward node of stage `stage` or a later one. Nodes are made in the order pre, layer
 * 0, ..., layer N-1, post, so a stage's nodes are one range: found in O(log n), a stage split in
 * time proportional to its own size (a 100,000-layer model over 1,000 stages is 1,000 splits). */
static int first_node(const Graph *g, int pp, int stage) {
  int lo = 0, hi = g->nfwd;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (pipe_stage_of_node(g, pp, &g->nodes[mid]) < stage) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Which parameters are tied (an embedding table that is also a head) and, with pp > 1, which
 * have a copy on another stage; the lowest stage holding one owns it. */
static void mark_params(Graph *s, const Plan *plan) {
  for (int i = 0; i < s->nparams; i++) {
    IrParam *q = &s->params[i];
    const ParamStages *ps = &plan->param[q->gindex];
    q->tied = ps->tied;
    q->shared = ps->count > 1;
    q->copy = q->shared && s->stage > ps->first;
  }
}

Graph *pipe_split(const Graph *g, const Plan *plan, int stage) {
  int pp = (int)g->cfg.pp;
  Graph *s = ir_clone_header(g);
  s->stage = stage;
  s->npp = pp;
  Map map = {.lo = first_node(g, pp, stage), .hi = first_node(g, pp, stage + 1)};
  map.in = xmalloc(((size_t)(map.hi - map.lo) + 1) * sizeof *map.in);
  for (int i = 0; i < map.hi - map.lo; i++) map.in[i] = -1;
  int recv = -1, hidden_in = -1;

  for (int i = map.lo; i < map.hi; i++) {
    const IrNode *n = &g->nodes[i];
    if (n->op == OP_PARAM || n->op == OP_INPUT) continue; /* copied when first read */
    if (pipe_stage_of_node(g, pp, n) != stage) diag_fatal("internal: node %%%d is out of the order of the stages", i);
    /* a generation program's graph ends with its logits: the loss and its labels are not read */
    bool out = g->infer && n->op == OP_CROSS_ENTROPY;
    int in[6], nin = out ? 1 : n->nin;
    for (int k = 0; k < nin; k++) {
      int src = n->in[k], *to = map_at(&map, src);
      const IrNode *sn = &g->nodes[src];
      if (*to < 0 && sn->op == OP_PARAM) {
        int pi = ir_copy_param(s, &g->params[sn->param], sn); /* may move s->params */
        *to = s->params[pi].node;
      } else if (*to < 0 && sn->op == OP_INPUT) {
        int id = ir_add_node(s, OP_INPUT, sn->loc);
        s->nodes[id] = *sn;
        s->nodes[id].param = s->ninputs;
        s->inputs[s->ninputs] = g->inputs[sn->param];
        s->inputs[s->ninputs].node = id;
        s->ninputs++;
        *to = id;
      } else if (*to < 0) {
        /* a value of an earlier stage: the hidden state the previous stage sends */
        if (hidden_in >= 0 && hidden_in != src)
          diag_fatal("internal: stage %d reads two values of earlier stages (%%%d and %%%d)", stage, hidden_in, src);
        hidden_in = src;
        recv = ir_add(s, OP_RECV_FORWARD, 0, NULL, sn->shape);
        s->nodes[recv].layout = sn->layout;
        s->nodes[recv].layer = n->layer;
        s->nodes[recv].region = n->region;
        s->nodes[recv].var = sn->var;
        *to = recv;
      }
      in[k] = *to;
    }
    int id = ir_add_node(s, out ? OP_LOGITS : n->op, n->loc);
    s->nodes[id] = *n;
    memcpy(s->nodes[id].in, in, sizeof in[0] * (size_t)nin);
    if (out) {
      s->nodes[id].op = OP_LOGITS;
      s->nodes[id].nin = 1;
      s->nodes[id].shape = s->nodes[in[0]].shape;
      s->nodes[id].layout = s->nodes[in[0]].layout;
    }
    *map_at(&map, i) = id;
    if (i == g->loss && !out) s->loss = id;
  }
  /* the value the next stage reads */
  if (stage + 1 < pp) {
    int out = -1;
    for (int i = map.hi, end = first_node(g, pp, stage + 2); i < end; i++) {
      const IrNode *n = &g->nodes[i];
      if (n->op == OP_PARAM || n->op == OP_INPUT) continue;
      for (int k = 0; k < n->nin; k++) {
        const IrNode *sn = &g->nodes[n->in[k]];
        if (sn->op != OP_PARAM && sn->op != OP_INPUT && pipe_stage_of_node(g, pp, sn) == stage) out = n->in[k];
      }
    }
    if (out < 0 || *map_at(&map, out) < 0) diag_fatal("internal: stage %d sends nothing to stage %d", stage, stage + 1);
    int snd = ir_add(s, OP_SEND_FORWARD, 1, (int[]){*map_at(&map, out)}, g->nodes[out].shape);
    s->nodes[snd].layout = g->nodes[out].layout;
    s->nodes[snd].layer = g->nodes[out].layer;
    s->nodes[snd].region = g->nodes[out].region;
  }
  free(map.in);
  free(map.out);
  if (ir_verify(s)) diag_fatal("internal: stage %d's graph does not verify", stage);
  mark_params(s, plan);
  return s;
}
