/* pp_plan.c — the partition plan: which layers and parameters each pipeline stage owns. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

/* Stage r of p runs layers [N*r//p, N*(r+1)//p): every stage gets floor(N/p) or ceil(N/p)
 * consecutive layers, and the boundaries of neighbouring stages are the same expression. */
int pp_layer_start(int nlayers, int rank, int pp) { return (int)((int64_t)nlayers * rank / pp); }

static int stage_start(const Graph *g, int r, int pp) {
  return g->bounds ? g->bounds[r] : pp_layer_start(g->nlayers, r, pp);
}

static int stage_of_layer(const Graph *g, int pp, int layer) {
  int r = 0;
  while (r + 1 < pp && stage_start(g, r + 1, pp) <= layer) r++;
  return r;
}

/* ============================================================================================
 * The cost model: forward plus backward (twice the forward) of each op, in flop-equivalents:
 * flops + 8 * bytes moved (a CPU or GPU does roughly ten flops in the time it moves a byte).
 * ========================================================================================== */

#define BYTE_WEIGHT 8.0

double pp_node_cost(const Graph *g, const IrNode *n) {
  double out = (double)shape_numel(&n->shape), flops = 0, bytes = 4 * out;
  const Shape *x = n->nin ? &g->nodes[n->in[0]].shape : NULL;
  switch (n->op) {
  case OP_INPUT: case OP_PARAM: case OP_SPLIT_HEADS: case OP_MERGE_HEADS: return 0;
  case OP_LINEAR: case OP_MATMUL: {
    double K = (double)x->d[x->nd - 1], R = (double)shape_numel(x) / K, Nn = (double)n->shape.d[n->shape.nd - 1];
    flops = 2 * R * Nn * K;
    bytes = 4 * (R * K + Nn * K + R * Nn);
    break;
  }
  case OP_ATTENTION: { /* QK^T and PV over S x S scores; half of them under a causal mask */
    double S = (double)x->d[0], B = (double)x->d[1], H = (double)x->d[2], D = (double)x->d[3];
    flops = 4 * B * H * S * S * D * (n->a.causal ? 0.5 : 1);
    bytes = 4 * 4 * out;
    break;
  }
  case OP_EMBEDDING: case OP_POS_EMBEDDING: flops = 0; bytes = 8 * out; break;
  case OP_CROSS_ENTROPY: flops = 5 * (double)shape_numel(x); bytes = 8 * (double)shape_numel(x); break;
  default:
    for (int k = 0; k < n->nin; k++) bytes += 4 * (double)shape_numel(&g->nodes[n->in[k]].shape);
    flops = 5 * (x ? (double)shape_numel(x) : out);
  }
  return 3 * (flops + BYTE_WEIGHT * bytes);
}

/* Uniform: N*r//p. Balanced: contiguous boundaries minimising the costliest stage, the
 * embedding counted on the first stage and the final norm, head and loss on the last; every
 * stage keeps at least one layer (dynamic programming over prefixes). */
void pp_partition(Graph *g, bool balanced) {
  int pp = (int)g->cfg.pp, N = g->nlayers;
  free(g->bounds);
  g->bounds = NULL;
  if (!balanced || N == 0 || pp <= 1) return;
  double *layer = xcalloc((size_t)N, sizeof *layer), pre = 0, post = 0;
  for (int i = 0; i < g->nnodes && i < (g->nfwd ? g->nfwd : g->nnodes); i++) {
    const IrNode *n = &g->nodes[i];
    double c = pp_node_cost(g, n);
    if (n->region == REG_LAYER) layer[n->layer] += c;
    else if (n->region == REG_PRE) pre += c;
    else post += c;
  }
  double *prefix = xcalloc((size_t)N + 1, sizeof *prefix);
  for (int l = 0; l < N; l++) prefix[l + 1] = prefix[l] + layer[l];
  /* best[r][j]: the least possible slowest stage when stages 0..r-1 hold layers [0, j) */
  double *best = xmalloc((size_t)(pp + 1) * (size_t)(N + 1) * sizeof *best);
  int *cut = xmalloc((size_t)(pp + 1) * (size_t)(N + 1) * sizeof *cut);
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
  g->bounds = xmalloc((size_t)(pp + 1) * sizeof *g->bounds);
  g->bounds[pp] = N;
  for (int r = pp, j = N; r > 0; r--) j = g->bounds[r - 1] = cut[AT(r, j)];
#undef AT
  free(layer);
  free(prefix);
  free(best);
  free(cut);
}

/* The stage a node runs on: its layer's stage, the first stage before the layers, the last
 * after them. */
int pp_stage_of_node(const Graph *g, int pp, const IrNode *n) {
  if (n->region == REG_LAYER) return stage_of_layer(g, pp, n->layer);
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
    p->stages[r].layer_start = stage_start(g, r, pp);
    p->stages[r].layer_end = stage_start(g, r + 1, pp);
  }
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = &g->nodes[i];
    int r = pp_stage_of_node(g, pp, n);
    if (n->op == OP_EMBEDDING || n->op == OP_POS_EMBEDDING) p->stages[r].has_embedding = true;
    if (n->op == OP_CROSS_ENTROPY) p->stages[r].has_loss = true;
    if ((n->op == OP_RMSNORM || n->op == OP_LAYERNORM) && n->region == REG_POST) p->stages[r].has_final_norm = true;
    if ((n->op == OP_LINEAR || n->op == OP_MATMUL) && n->region == REG_POST) p->stages[r].has_head = true;
    if (n->op == OP_PARAM) continue;
    if (i < (g->nfwd ? g->nfwd : g->nnodes)) p->stages[r].cost += pp_node_cost(g, n);
    for (int k = 0; k < n->nin; k++) {
      if (n->in[k] < 0) continue; /* a .concat part with no gradient */
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
  double total_cost = 0;
  for (int r = 0; r < p->pp; r++) total_cost += p->stages[r].cost;
  if (g->bounds)
    fprintf(f, "partition: balanced: contiguous layers minimising the costliest stage (forward+backward flops + 8 x "
               "bytes), N=%d\n", g->nlayers);
  else
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
    fprintf(f, "; predicted share of the compute %.1f%%\n", total_cost > 0 ? 100 * s->cost / total_cost : 0.0);
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
