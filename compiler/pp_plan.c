/* pp_plan.c — the partition plan: which layers and parameters each pipeline stage owns. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

/* Stage r of p runs layers [N*r//p, N*(r+1)//p): every stage gets floor(N/p) or ceil(N/p)
 * consecutive layers, and the boundaries of neighbouring stages are the same expression. */
int pp_layer_start(int nlayers, int rank, int pp) { return (int)((int64_t)nlayers * rank / pp); }

static int stage_of_layer(int nlayers, int pp, int layer) {
  int r = 0;
  while (r + 1 < pp && pp_layer_start(nlayers, r + 1, pp) <= layer) r++;
  return r;
}

/* The stage a node runs on: its layer's stage, the first stage before the layers, the last
 * after them. */
static int stage_of_node(const Graph *g, int pp, const IrNode *n) {
  if (n->region == REG_LAYER) return stage_of_layer(g->nlayers, pp, n->layer);
  return n->region == REG_PRE ? 0 : pp - 1;
}

/* Elements one tensor-parallel rank holds: the split dimension divided by tp (a vocabulary
 * padded up to a multiple of tp). */
static int64_t rank_numel(const IrParam *p, int64_t tp, int split_dim) {
  if (p->role == ROLE_REPLICATED || split_dim < 0) return shape_numel(&p->shape);
  int64_t n = 1;
  for (int i = 0; i < p->shape.nd; i++) n *= i == split_dim ? (p->shape.d[i] + tp - 1) / tp : p->shape.d[i];
  return n;
}

/* The dimension a role splits, from the first op that uses the parameter. */
static int split_dim(const Graph *g, int param) {
  const IrParam *p = &g->params[param];
  if (p->role == ROLE_REPLICATED) return -1;
  if (p->shape.nd == 1) return 0;
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = &g->nodes[i];
    for (int k = 0; k < n->nin; k++) {
      if (n->in[k] != p->node) continue;
      if (n->op == OP_MATMUL) return p->role == ROLE_ROW ? 0 : 1;
      return p->role == ROLE_ROW ? 1 : 0;
    }
  }
  return -1;
}

Plan *pp_plan(const Graph *g) {
  int pp = (int)g->cfg.pp;
  Plan *p = xcalloc(1, sizeof *p);
  p->pp = pp;
  p->stages = xcalloc((size_t)pp, sizeof *p->stages);
  p->param_stage_mask = xcalloc((size_t)g->nparams + 1, sizeof *p->param_stage_mask);
  for (int r = 0; r < pp; r++) {
    p->stages[r].layer_start = pp_layer_start(g->nlayers, r, pp);
    p->stages[r].layer_end = pp_layer_start(g->nlayers, r + 1, pp);
  }
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = &g->nodes[i];
    int r = stage_of_node(g, pp, n);
    if (n->op == OP_EMBEDDING || n->op == OP_POS_EMBEDDING) p->stages[r].has_embedding = true;
    if (n->op == OP_CROSS_ENTROPY) p->stages[r].has_loss = true;
    if ((n->op == OP_RMSNORM || n->op == OP_LAYERNORM) && n->region == REG_POST) p->stages[r].has_final_norm = true;
    if ((n->op == OP_LINEAR || n->op == OP_MATMUL) && n->region == REG_POST) p->stages[r].has_head = true;
    if (n->op == OP_PARAM) continue;
    for (int k = 0; k < n->nin; k++) {
      const IrNode *src = &g->nodes[n->in[k]];
      if (src->op == OP_PARAM) p->param_stage_mask[src->param] |= 1 << r;
    }
  }
  for (int i = 0; i < g->nparams; i++) {
    int64_t dense = shape_numel(&g->params[i].shape);
    int64_t local = rank_numel(&g->params[i], g->cfg.tp, split_dim(g, i));
    for (int r = 0; r < pp; r++)
      if (p->param_stage_mask[i] >> r & 1) p->stages[r].nparams += dense, p->stages[r].nparams_rank += local;
  }
  return p;
}

void pp_plan_free(Plan *p) {
  if (!p) return;
  free(p->stages);
  free(p->param_stage_mask);
  free(p);
}

/* ============================================================================================
 * plan.txt / --emit plan
 * ========================================================================================== */

/* A parameter read both by an embedding lookup and by a linear/matmul is a tied head. */
static int is_tied(const Graph *g, int param) {
  int uses = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = &g->nodes[i];
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] == g->params[param].node)
        uses |= n->op == OP_EMBEDDING ? 1 : n->op == OP_LINEAR || n->op == OP_MATMUL ? 2 : 0;
  }
  return uses == 3;
}

static int lowest_bit(int m) {
  int r = 0;
  while (m && !(m >> r & 1)) r++;
  return r;
}

/* Print the names of one stage's parameters; a run of layers' names is shown per layer. */
static void print_params(FILE *f, const Graph *g, const Plan *p, int r) {
  char sb[96];
  for (int i = 0; i < g->nparams; i++) {
    if (!(p->param_stage_mask[i] >> r & 1)) continue;
    const IrParam *q = &g->params[i];
    fprintf(f, "    %-56s %-14s %s", q->name, shape_str(&q->shape, sb, sizeof sb), role_name(q->role));
    if (is_tied(g, i)) {
      int m = p->param_stage_mask[i], first = lowest_bit(m), last = 31 - __builtin_clz((unsigned)m);
      if (first == last) fprintf(f, "  tied: embedding and head on stage %d", first);
      else fprintf(f, "  tied: embedding on stage %d, head on stage %d (a copy on each; gradients summed)", first, last);
    }
    fputc('\n', f);
  }
}

static void human_bytes(char *buf, size_t n, int64_t bytes) {
  if (bytes >= (int64_t)1 << 30) snprintf(buf, n, "%.2f GiB", (double)bytes / (double)((int64_t)1 << 30));
  else if (bytes >= 1 << 20) snprintf(buf, n, "%.2f MiB", (double)bytes / (double)(1 << 20));
  else if (bytes >= 1 << 10) snprintf(buf, n, "%.2f KiB", (double)bytes / 1024.0);
  else snprintf(buf, n, "%lld B", (long long)bytes);
}

void pp_plan_print(FILE *f, const Graph *g, const Plan *p) {
  const Config *c = &g->cfg;
  int64_t total = 0;
  for (int i = 0; i < g->nparams; i++) total += shape_numel(&g->params[i].shape);
  char hb[32];
  fprintf(f, "# plan of model '%s'\n", g->model);
  fprintf(f, "mesh: tp=%lld pp=%lld dp=%lld (%lld ranks)\n", (long long)c->tp, (long long)c->pp, (long long)c->dp,
          (long long)(c->tp * c->pp * c->dp));
  fprintf(f, "step: micro_batch=%lld seq=%lld microbatches=%lld schedule=%s\n", (long long)c->micro_batch,
          (long long)c->seq, (long long)c->microbatches, c->schedule);
  human_bytes(hb, sizeof hb, total * 4);
  fprintf(f, "model: %d layers, %d parameter tensors, %lld parameters (%s fp32)\n", g->nlayers, g->nparams,
          (long long)total, hb);
  fprintf(f, "partition: stage r of %d runs layers [N*r//p, N*(r+1)//p) with N=%d\n", p->pp, g->nlayers);
  for (int r = 0; r < p->pp; r++) {
    const StageInfo *s = &p->stages[r];
    fprintf(f, "\nstage %d: ", r);
    if (s->layer_end > s->layer_start)
      fprintf(f, "layers [%d, %d) = %d..%d", s->layer_start, s->layer_end, s->layer_start, s->layer_end - 1);
    else
      fprintf(f, "no layers");
    if (s->has_embedding) fputs(", embedding", f);
    if (s->has_final_norm) fputs(", final norm", f);
    if (s->has_head) fputs(", head", f);
    if (s->has_loss) fputs(", loss", f);
    fputc('\n', f);
    human_bytes(hb, sizeof hb, s->nparams * 4);
    fprintf(f, "  parameters: %lld (%s fp32)", (long long)s->nparams, hb);
    if (c->tp > 1) {
      human_bytes(hb, sizeof hb, s->nparams_rank * 4);
      fprintf(f, "; per tensor-parallel rank %lld (%s)", (long long)s->nparams_rank, hb);
    }
    fputc('\n', f);
    print_params(f, g, p, r);
  }
}
