/* pipe_plan.c — the partition plan: which layers and parameters each pipeline stage owns. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

/* Stage r of p runs layers [N*r//p, N*(r+1)//p): every stage gets floor(N/p) or ceil(N/p)
 * consecutive layers, and the boundaries of neighbouring stages are the same expression. */
int pipe_layer_start(int nlayers, int rank, int pp) { return (int)((int64_t)nlayers * rank / pp); }

static int stage_start(const Graph *g, int r, int pp) {
  return g->bounds ? g->bounds[r] : pipe_layer_start(g->nlayers, r, pp);
}

/* The stage whose layers hold `layer`: the last r with start(r) <= layer (binary search; the
 * starts do not decrease). */
static int stage_of_layer(const Graph *g, int pp, int layer) {
  int lo = 0, hi = pp - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (stage_start(g, mid, pp) <= layer) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* ============================================================================================
 * The cost model: forward plus backward (twice the forward) of each op, in flop-equivalents:
 * flops + 8 * bytes moved (a CPU or GPU does roughly ten flops in the time it moves a byte).
 * ========================================================================================== */

#define BYTE_WEIGHT 8.0

double pipe_node_cost(const Graph *g, const IrNode *n) {
  /* an element's bytes: the precision's activations and weight copies (f32: 4, bf16: 2) */
  double es = (double)pp_dtype_bytes(pp_precision_dtype[g->cfg.precision]);
  double out = (double)ir_shape_numel(&n->shape), flops = 0, bytes = es * out;
  const Shape *x = n->nin ? &g->nodes[n->in[0]].shape : NULL;
  switch (n->op) {
  OP_CASES_LEAF:
  case OP_SPLIT_HEADS:
  case OP_MERGE_HEADS: return 0;
  case OP_LINEAR:
  case OP_MATMUL: {
    double K = (double)x->d[x->nd - 1], R = (double)ir_shape_numel(x) / K, Nn = (double)n->shape.d[n->shape.nd - 1];
    flops = 2 * R * Nn * K;
    bytes = es * (R * K + Nn * K + R * Nn);
    break;
  }
  case OP_ATTENTION: { /* QK^T and PV over S x S scores; half of them under a causal mask, fewer in a window */
    double S = (double)x->d[0], B = (double)x->d[1], H = (double)x->d[2], D = (double)x->d[3];
    double seen = !n->a.causal                           ? 1
                  : n->a.window && n->a.window < x->d[0] ? ir_attention_seen(x->d[0], n->a.window)
                                                         : 0.5;
    flops = 4 * B * H * S * S * D * seen;
    bytes = 4 * es * out;
    break;
  }
  case OP_EMBEDDING:
  case OP_POS_EMBEDDING:
    flops = 0;
    bytes = 2 * es * out;
    break;
  case OP_CROSS_ENTROPY:
    flops = 5 * (double)ir_shape_numel(x);
    bytes = 2 * es * (double)ir_shape_numel(x);
    break;
  /* elementwise and per-row ops: a few flops per input element, every operand read once */
  OP_CASES_FWD_ELEM:
  case OP_RMSNORM:
  case OP_LAYERNORM:
  case OP_ROPE:
  case OP_CHUNK:
  case OP_TRANSPOSE_SB:
  /* made by pipe_split and tp_shard, so in a stage's forward graph only (the partition costs the
   * whole model's): the data they pass on, as an elementwise op */
  OP_CASES_PP:
  OP_CASES_TP:
    for (int k = 0; k < n->nin; k++) bytes += es * (double)ir_shape_numel(&g->nodes[n->in[k]].shape);
    flops = 5 * (x ? (double)ir_shape_numel(x) : out);
    break;
  /* made by autodiff: costed with their forward op (the factor 3 below) */
  OP_CASES_BWD:
  OP_CASES_BWD_ELEM:
    diag_fatal("internal: pipe_node_cost of %s, a backward op: the forward op's cost counts it", ir_ops[n->op].name);
  }
  return 3 * (flops + BYTE_WEIGHT * bytes);
}

/* ============================================================================================
 * The balanced partition: contiguous layers, every stage at least one, minimising the costliest
 * stage, the embedding counted on the first stage and the final norm, head and loss on the last.
 * Of the partitions that reach the minimum, the one whose boundaries, taken from the last stage
 * back, are each as early as possible. O(p^2 log N) feasibility checks of O(log N) steps each,
 * so 100,000 layers over 1,000 stages take well under a second.
 * ========================================================================================== */

typedef struct {
  const double *prefix; /* prefix[l]: the cost of layers [0, l) */
  double pre, post;
  int pp, n;
} Partition;

/* One stage's cost: its layers [i, j), the embedding on stage 1, the head and loss on the last
 * stage when it ends the model. The one expression the search and its checks share. */
static double stage_cost(const Partition *q, int r, int i, int j) {
  return q->prefix[j] - q->prefix[i] + (r == 1 ? q->pre : 0) + (r == q->pp && j == q->n ? q->post : 0);
}

/* Can stages 1..r hold layers [0, j), one layer or more each, none costing more than T? Greedy:
 * every stage but the last ends as late as it can (binary search over the prefix sums), which
 * leaves the fewest layers, so the cheapest work, to the stages after it. Exact, because a
 * stage's cost only grows as its range grows, in floating point as in arithmetic. */
static bool feasible(const Partition *q, int r, int j, double T) {
  int pos = 0;
  for (int k = 1; k < r; k++) {
    int lo = pos + 1, hi = j - (r - k); /* the end, in [lo, hi] */
    if (lo > hi || stage_cost(q, k, pos, lo) > T) return false;
    while (lo < hi) {
      int mid = lo + (hi - lo + 1) / 2;
      if (stage_cost(q, k, pos, mid) <= T) lo = mid;
      else hi = mid - 1;
    }
    pos = lo;
  }
  return pos < j && stage_cost(q, r, pos, j) <= T;
}

/* The least possible costliest stage when stages 1..r hold layers [0, j): the smallest double T
 * for which feasible() holds, found by bisecting the bit patterns of non-negative doubles (they
 * order as the numbers do). */
static double least_max(const Partition *q, int r, int j) {
  double top = stage_cost(q, 1, 0, j) + (r == q->pp && j == q->n ? q->post : 0);
  uint64_t lo = 0, hi;
  memcpy(&hi, &top, sizeof hi);
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    double t;
    memcpy(&t, &mid, sizeof t);
    if (feasible(q, r, j, t)) hi = mid;
    else lo = mid + 1;
  }
  double t;
  memcpy(&t, &lo, sizeof t);
  return t;
}

/* bounds[0..pp]: the balanced boundaries of n layers costing layer[l], pre on the first stage and
 * post on the last (1 <= pp <= n). */
void pipe_balance(const double *layer, int n, double pre, double post, int pp, int *bounds) {
  double *prefix = xcalloc((size_t)n + 1, sizeof *prefix);
  for (int l = 0; l < n; l++) prefix[l + 1] = prefix[l] + layer[l];
  Partition q = {.prefix = prefix, .pre = pre, .post = post, .pp = pp, .n = n};
  bounds[pp] = n;
  bounds[0] = 0;
  /* Stage r's start, from the last stage back: the earliest i for which stage r costs no more
   * than the best stages 1..r can do on [0, j) and stages 1..r-1 can still hold [0, i) within it */
  for (int r = pp, j = n; r > 1; r--) {
    double best = least_max(&q, r, j);
    int lo = r - 1, hi = j - 1;
    while (lo < hi) {
      int mid = lo + (hi - lo) / 2;
      if (stage_cost(&q, r, mid, j) <= best) hi = mid;
      else lo = mid + 1;
    }
    while (lo < j - 1 && !feasible(&q, r - 1, lo, best)) lo++;
    j = bounds[r - 1] = lo;
  }
  free(prefix);
}

void pipe_partition(Graph *g, bool balanced) {
  int pp = (int)g->cfg.pp, N = g->nlayers;
  free(g->bounds);
  g->bounds = NULL;
  if (!balanced || N == 0 || pp <= 1) return;
  double *layer = xcalloc((size_t)N, sizeof *layer), pre = 0, post = 0;
  for (int i = 0; i < g->nnodes && i < (g->nfwd ? g->nfwd : g->nnodes); i++) {
    const IrNode *n = &g->nodes[i];
    double c = pipe_node_cost(g, n);
    if (n->region == REG_LAYER) layer[n->layer] += c;
    else if (n->region == REG_PRE) pre += c;
    else post += c;
  }
  g->bounds = xmalloc((size_t)(pp + 1) * sizeof *g->bounds);
  pipe_balance(layer, N, pre, post, pp, g->bounds);
  free(layer);
}

/* The stage a node runs on: its layer's stage, the first stage before the layers, the last
 * after them. */
int pipe_stage_of_node(const Graph *g, int pp, const IrNode *n) {
  if (n->region == REG_LAYER) return stage_of_layer(g, pp, n->layer);
  return n->region == REG_PRE ? 0 : pp - 1;
}

/* Elements one tensor-parallel rank holds: the split dimension divided by tp (a vocabulary
 * padded up to a multiple of tp). */
static int64_t rank_numel(const IrParam *p, int64_t tp, int split_dim) {
  if (p->role == ROLE_REPLICATED || split_dim < 0) return ir_shape_numel(&p->shape);
  int64_t n = 1;
  for (int i = 0; i < p->shape.nd; i++) n *= i == split_dim ? (p->shape.d[i] + tp - 1) / tp : p->shape.d[i];
  return n;
}

/* The dimension a role splits, from the op that first uses the parameter (first_use: that op's
 * node, -1 for none). */
static int split_dim(const Graph *g, int param, int first_use) {
  const IrParam *p = &g->params[param];
  if (p->role == ROLE_REPLICATED) return -1;
  if (p->shape.nd == 1) return 0;
  if (first_use < 0) return -1;
  if (g->nodes[first_use].op == OP_MATMUL) return p->role == ROLE_ROW ? 0 : 1;
  return p->role == ROLE_ROW ? 1 : 0;
}

static int cmp_pair(const void *a, const void *b) {
  const int *x = a, *y = b;
  return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : x[1] != y[1] ? (x[1] < y[1] ? -1 : 1) : 0;
}

Plan *pipe_plan(const Graph *g) {
  int pp = (int)g->cfg.pp, np = g->nparams;
  Plan *p = xcalloc(1, sizeof *p);
  p->pp = pp;
  p->stages = xcalloc((size_t)pp, sizeof *p->stages);
  p->param = xcalloc((size_t)np + 1, sizeof *p->param);
  for (int r = 0; r < pp; r++) {
    p->stages[r].layer_start = stage_start(g, r, pp);
    p->stages[r].layer_end = stage_start(g, r + 1, pp);
  }
  /* one pass over the nodes: each use of a parameter as a (stage, parameter) pair */
  int *first_use = xmalloc((size_t)(np + 1) * sizeof *first_use), *uses = xcalloc((size_t)np + 1, sizeof *uses);
  for (int i = 0; i < np; i++) first_use[i] = -1;
  int *pairs = NULL, npairs = 0, cap = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = &g->nodes[i];
    int r = pipe_stage_of_node(g, pp, n);
    if (n->op == OP_EMBEDDING || n->op == OP_POS_EMBEDDING) p->stages[r].has_embedding = true;
    if (n->op == OP_CROSS_ENTROPY) p->stages[r].has_loss = true;
    if ((n->op == OP_RMSNORM || n->op == OP_LAYERNORM) && n->region == REG_POST) p->stages[r].has_final_norm = true;
    if ((n->op == OP_LINEAR || n->op == OP_MATMUL) && n->region == REG_POST) p->stages[r].has_head = true;
    if (n->op == OP_PARAM) continue;
    if (i < (g->nfwd ? g->nfwd : g->nnodes)) p->stages[r].cost += pipe_node_cost(g, n);
    for (int k = 0; k < n->nin; k++) {
      if (n->in[k] < 0) continue; /* a .concat part with no gradient */
      const IrNode *src = &g->nodes[n->in[k]];
      if (src->op != OP_PARAM) continue;
      int q = src->param;
      if (first_use[q] < 0) first_use[q] = i;
      uses[q] |= n->op == OP_EMBEDDING ? 1 : n->op == OP_LINEAR || n->op == OP_MATMUL ? 2 : 0;
      if (npairs == cap) pairs = xrealloc(pairs, (size_t)(cap = cap ? 2 * cap : 1024) * 2 * sizeof *pairs);
      pairs[2 * npairs] = r, pairs[2 * npairs + 1] = q, npairs++;
    }
  }
  qsort(pairs, (size_t)npairs, 2 * sizeof *pairs, cmp_pair);
  p->held = xmalloc((size_t)(npairs + 1) * sizeof *p->held);
  p->held_at = xcalloc((size_t)pp + 1, sizeof *p->held_at);
  for (int i = 0; i < np; i++) p->param[i] = (ParamStages){.first = -1, .last = -1, .tied = uses[i] == 3};
  int nheld = 0;
  for (int i = 0; i < npairs; i++) {
    int r = pairs[2 * i], q = pairs[2 * i + 1];
    if (i && pairs[2 * i - 2] == r && pairs[2 * i - 1] == q) continue; /* the same use again */
    p->held[nheld++] = q;
    p->held_at[r + 1] = nheld;
    ParamStages *s = &p->param[q];
    if (s->first < 0) s->first = r;
    s->last = r;
    s->count++;
  }
  for (int r = 1; r <= pp; r++)
    if (p->held_at[r] < p->held_at[r - 1]) p->held_at[r] = p->held_at[r - 1]; /* stages holding none */
  for (int r = 0; r < pp; r++)
    for (int h = p->held_at[r]; h < p->held_at[r + 1]; h++) {
      int q = p->held[h];
      p->stages[r].nparams += ir_shape_numel(&g->params[q].shape);
      p->stages[r].nparams_rank += rank_numel(&g->params[q], g->cfg.tp, split_dim(g, q, first_use[q]));
    }
  free(pairs);
  free(first_use);
  free(uses);
  return p;
}

void pipe_plan_free(Plan *p) {
  if (!p) return;
  free(p->stages);
  free(p->param);
  free(p->held);
  free(p->held_at);
  free(p);
}

/* ============================================================================================
 * plan.txt / --emit plan
 * ========================================================================================== */

/* Print the names of one stage's parameters. */
static void print_params(FILE *f, const Graph *g, const Plan *p, int r, const Sched *sch) {
  char sb[96];
  for (int h = p->held_at[r]; h < p->held_at[r + 1]; h++) {
    const IrParam *q = &g->params[p->held[h]];
    const ParamStages *s = &p->param[p->held[h]];
    /* "    %-56s %-14s %s" without printf: a plan of 100,000 layers has a million of these lines */
    char line[PP_MAX_NAME + 128], *l = line;
    const char *cols[3] = {q->name, ir_shape_str(&q->shape, sb, sizeof sb), ir_role_name(q->role)};
    static const size_t width[3] = {56, 14, 0};
    memcpy(l, "    ", 4), l += 4;
    for (int c = 0; c < 3; c++) {
      size_t n = strlen(cols[c]);
      memcpy(l, cols[c], n), l += n;
      for (; n < width[c]; n++) *l++ = ' ';
      if (c < 2) *l++ = ' ';
    }
    fwrite(line, 1, (size_t)(l - line), f);
    if (s->tied) {
      const char *st = sch ? "virtual stage" : "stage";
      if (s->first == s->last) fprintf(f, "  tied: embedding and head on %s %d", st, s->first);
      else if (sch && sched_rank_of(sch, s->first) == sched_rank_of(sch, s->last))
        fprintf(f, "  tied: embedding on virtual stage %d, head on virtual stage %d (both rank %d's: one tensor)",
                s->first, s->last, sched_rank_of(sch, s->first));
      else
        fprintf(f, "  tied: embedding on %s %d, head on %s %d (a copy on each; gradients summed)", st, s->first, st,
                s->last);
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

void pipe_plan_print(FILE *f, const Graph *g, const Plan *p, const Sched *sch, const int64_t *act) {
  const Config *c = &g->cfg;
  bool chunks = sch && sch->V > 1;
  long long pp = chunks ? sch->pp : (long long)c->pp;
  int64_t total = 0;
  for (int i = 0; i < g->nparams; i++) total += ir_shape_numel(&g->params[i].shape);
  char hb[32];
  fprintf(f, "# plan of model '%s'\n", g->model);
  if (c->cp > 1)
    fprintf(f, "mesh: tp=%lld pp=%lld dp=%lld cp=%lld (%lld ranks)\n", (long long)c->tp, pp, (long long)c->dp,
            (long long)c->cp, (long long)(c->tp * pp * c->dp * c->cp));
  else
    fprintf(f, "mesh: tp=%lld pp=%lld dp=%lld (%lld ranks)\n", (long long)c->tp, pp, (long long)c->dp,
            (long long)(c->tp * pp * c->dp));
  fprintf(f, "step: micro_batch=%lld seq=%lld microbatches=%lld schedule=%s\n", (long long)c->micro_batch,
          (long long)c->seq, (long long)c->microbatches, c->schedule);
  human_bytes(hb, sizeof hb, total * 4);
  fprintf(f, "model: %d layers, %d parameter tensors, %lld parameters (%s fp32)\n", g->nlayers, g->nparams,
          (long long)total, hb);
  if (c->precision != PP_PREC_FP32)
    fprintf(f,
            "precision: %s: activations, their gradients and the weights' working copies in %s; the weights, their "
            "gradients and AdamW's moments fp32\n",
            pp_precision_names[c->precision], pp_dtype_name(pp_precision_dtype[c->precision]));
  int64_t h = 0; /* a stage message: [S,B,H] of the hidden size the embedding gives */
  for (int i = 0; i < g->nnodes && !h; i++)
    if (g->nodes[i].op == OP_EMBEDDING) h = g->nodes[i].shape.d[2];
  int64_t msg = c->seq * c->micro_batch * h * (int64_t)pp_dtype_bytes(pp_precision_dtype[c->precision]);
  if (c->cp > 1) {
    char a[32], b[32];
    human_bytes(a, sizeof a, msg / c->cp);
    human_bytes(b, sizeof b, msg);
    fprintf(f,
            "context parallelism: each of the %lld ranks of a cp group holds %lld consecutive positions of the %lld "
            "(cp rank r: [r*%lld, (r+1)*%lld)); attention all-gathers K and V over the group; a stage message %s "
            "a rank (%s without)\n",
            (long long)c->cp, (long long)ir_seq_local(c), (long long)c->seq, (long long)ir_seq_local(c),
            (long long)ir_seq_local(c), a, b);
    msg /= c->cp;
  }
  if (c->sp && c->tp > 1) {
    char a[32], b[32];
    human_bytes(a, sizeof a, msg / c->tp);
    human_bytes(b, sizeof b, msg);
    fprintf(f,
            "sequence parallelism: outside attention and the MLP each tensor-parallel rank holds %lld of the %lld "
            "positions; a stage message %s a rank (%s without)\n",
            (long long)(ir_seq_local(c) / c->tp), (long long)ir_seq_local(c), a, b);
  }
  double total_cost = 0;
  for (int r = 0; r < p->pp; r++) total_cost += p->stages[r].cost;
  if (g->bounds)
    fprintf(f,
            "partition: balanced: contiguous layers minimising the costliest stage (forward+backward flops + 8 x "
            "bytes), N=%d\n",
            g->nlayers);
  else if (chunks)
    fprintf(f, "partition: virtual stage v of %d runs layers [N*v//(p*V), N*(v+1)//(p*V)) with N=%d\n", p->pp,
            g->nlayers);
  else fprintf(f, "partition: stage r of %d runs layers [N*r//p, N*(r+1)//p) with N=%d\n", p->pp, g->nlayers);
  if (chunks)
    fprintf(f, "chunks: %d per rank (--vpp); %s\n", sch->V,
            sch->vshape ? "rank r holds virtual stages r and 2p-1-r (a V)" : "rank r holds virtual stages r, r+p, ...");
  for (int r = 0; r < p->pp; r++) {
    const StageInfo *s = &p->stages[r];
    if (chunks) {
      int rank = sched_rank_of(sch, r), k = 0;
      while (sched_vstage(sch, rank, k) != r) k++;
      fprintf(f, "\nvirtual stage %d (rank %d, chunk %d): ", r, rank, k);
    } else fprintf(f, "\nstage %d: ", r);
    if (s->layer_end > s->layer_start)
      fprintf(f, "layers [%d, %d) = %d..%d", s->layer_start, s->layer_end, s->layer_start, s->layer_end - 1);
    else fprintf(f, "no layers");
    if (s->has_embedding) fputs(", embedding", f);
    if (s->has_final_norm) fputs(", final norm", f);
    if (s->has_head) fputs(", head", f);
    if (s->has_loss) fputs(", loss", f);
    fprintf(f, "; predicted share of the compute %.1f%%\n", total_cost > 0 ? 100 * s->cost / total_cost : 0.0);
    human_bytes(hb, sizeof hb, s->nparams * 4);
    fprintf(f, "  parameters: %lld (%s fp32", (long long)s->nparams, hb);
    if (c->precision != PP_PREC_FP32) {
      human_bytes(hb, sizeof hb, s->nparams * pp_dtype_bytes(pp_precision_dtype[c->precision]));
      fprintf(f, ", working copies %s %s", hb, pp_dtype_name(pp_precision_dtype[c->precision]));
    }
    fputc(')', f);
    if (c->tp > 1) {
      human_bytes(hb, sizeof hb, s->nparams_rank * 4);
      fprintf(f, "; per tensor-parallel rank %lld (%s)", (long long)s->nparams_rank, hb);
    }
    fputc('\n', f);
    if (act) {
      human_bytes(hb, sizeof hb, act[r]);
      fprintf(f, "  activations: %s a micro-batch on each rank (what its forward keeps for its backward)\n", hb);
    }
    print_params(f, g, p, r, chunks ? sch : NULL);
  }
}
