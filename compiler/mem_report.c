/* mem_report.c — what a rank's device memory holds (--emit memory) and whether it fits
 * (--mem-limit): each stage's arena region by region, exactly as mem_plan.c placed it and -o
 * writes it, beside Megatron-LM's estimate for the same configuration. */
#include <stdlib.h>
#include <string.h>

#include "pp_gemm.h"
#include "ppc.h"

static double gib(int64_t b) { return (double)b / (1 << 30); }

/* What each region holds, for the table. ORDER BufClass */
static const char *const region_what[BC__COUNT] = {
    "the weights (fp32)",
    "their gradients (fp32)",
    "AdamW's first moments (fp32)",
    "AdamW's second moments (fp32)",
    "the weights' working copies",
    "activations the forward keeps for the backward",
    "values inside a block, bytes shared where lifetimes do not overlap",
    "the GEMM library's workspace",
};

/* A region's bytes in the arena: the slot region holds nslots slots. */
int64_t mem_region_total(const Program *p, int c) {
  return c == BC_SLOT ? p->region_bytes[c] * p->nslots : p->region_bytes[c];
}

/* The elements of the parameters the rank holds (each once, whichever chunks read it). */
static int64_t rank_params(const Program *p) {
  int64_t n = 0;
  for (int i = 0; i < p->g->nparams; i++) n += ir_shape_numel(&p->g->params[i].shape);
  return n;
}

/* The host memory the cpu and opencl devices add for bf16 GEMMs: each operand widened to f32 in a
 * buffer of its own (A, B, C), as large as the largest span it takes (pp_gemm.h). */
static int64_t widened_bytes(const Program *p) {
  int64_t most[3] = {0, 0, 0};
  const Block *blocks[3 * PP_MAX_CHUNKS + 2];
  int nb = 0;
  for (int k = 0; k < p->nch; k++)
    blocks[nb++] = &p->ch[k].fwd, blocks[nb++] = &p->ch[k].bwd, blocks[nb++] = &p->ch[k].wgt;
  blocks[nb++] = &p->opt;
  blocks[nb++] = &p->refresh;
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < blocks[b]->n; i++) {
      const Instr *in = &blocks[b]->ins[i];
      if (in->kind != I_GEMM) continue;
      bool ta = in->ta == 'T', tb = in->tb == 'T';
      int64_t n[3] = {pp_gemm_span(in->batch, in->sa, ta ? in->k : in->m, in->lda, ta ? in->m : in->k),
                      pp_gemm_span(in->batch, in->sb, tb ? in->n : in->k, in->ldb, tb ? in->k : in->n),
                      pp_gemm_span(in->batch, in->sc, in->m, in->ldc, in->n)};
      for (int k = 0; k < 3; k++)
        if (p->vb[in->op[k].vb].dtype == PP_BF16 && n[k] > most[k]) most[k] = n[k];
    }
  return (most[0] + most[1] + most[2]) * (int64_t)sizeof(float);
}

/* ============================================================================================
 * Megatron-LM's estimate (megatron/training/theoretical_memory_usage.py, from Korthikanti et al.,
 * "Reducing Activation Recomputation in Large Transformer Models", Table 2), per rank of a stage:
 * weights and optimizer 18 bytes a parameter (bf16 weights, fp32 gradients, master weights and
 * two moments); activations per layer s·b·h·(18 + 4·ffn/h)/tp bytes with sequence parallelism
 * (and selective recompute, which a fused attention makes the default: no S x S values), else
 * s·b·h·(10 + 24/tp), or with full recomputation the layer's input alone, 2·s·b·h (/tp with
 * sequence parallelism); times the layers of the stage and the micro-batches in flight on it; the
 * first stage adds the embedding's input and output, a one-stage model the head's. In fp32 its
 * bytes are scaled to what the same count takes there: 4-byte activations, 16 bytes a parameter.
 * ========================================================================================== */

typedef struct Shape2 {
  int64_t h, ffn; /* the hidden width; the widest dimension of a layer's weights */
} Shape2;

static Shape2 model_widths(const Graph *m) {
  Shape2 w = {0, 0};
  for (int i = 0; i < m->nnodes && !w.h; i++)
    if (m->nodes[i].op == OP_EMBEDDING) w.h = m->nodes[i].shape.d[m->nodes[i].shape.nd - 1];
  for (int i = 0; i < m->nparams; i++) {
    const IrParam *q = &m->params[i];
    if (q->layer < 0 || q->shape.nd != 2) continue;
    for (int d = 0; d < 2; d++)
      if (q->shape.d[d] > w.ffn) w.ffn = q->shape.d[d];
  }
  if (w.ffn < w.h) w.ffn = w.h;
  return w;
}

typedef struct Megatron {
  double weights, acts; /* bytes */
} Megatron;

static Megatron megatron(const Graph *m, const Program *p, const Sched *s, int stage) {
  const Config *c = &m->cfg;
  Shape2 w = model_widths(m);
  double S = (double)ir_seq_local(c), B = (double)c->micro_batch, h = (double)w.h, t = (double)c->tp;
  int layers = 0;
  for (int i = 0; i < p->g->nparams; i++) /* the layers whose weights the rank holds */
    if (p->g->params[i].layer >= 0) {
      bool seen = false;
      for (int j = 0; j < i && !seen; j++) seen = p->g->params[j].layer == p->g->params[i].layer;
      layers += !seen;
    }
  bool first = stage == 0, only = c->pp == 1;
  double inflight = s->st[stage].nslots, per_layer, extra = 0;
  if (c->sp) {
    per_layer = S * B * h * (18 + 4 * (double)w.ffn / h) / t;
    if (first) extra += (8 * S * B + S * B * h) / t; /* the embedding's input, its dropout */
    if (only) extra += S * B * h * 4 * (1 + (double)m->vocab / h) / t;
  } else {
    per_layer = S * B * h * (10 + 24 / t);
    if (first) extra += 8 * S * B + S * B * h;
    if (only) extra += (S * B * (double)m->vocab / t + S * B * h) * 2;
  }
  /* full recomputation keeps a layer's input alone: 2·s·b·h bytes, split over tp with sp (Table 2) */
  if (c->recompute == RECOMPUTE_FULL) per_layer = 2 * S * B * h / (c->sp ? t : 1);
  /* fp32: its 2-byte activations take 4 bytes, and a parameter 16 (no working copy) */
  bool fp32 = c->precision == PP_PREC_FP32;
  /* a slot holds one chunk's micro-batch: with chunks of layers, 1/nch of the rank's layers */
  /* its distributed optimizer shards the f32 master weights and both moments: 6 + 12/dp bytes a
   * parameter (ppc's ZeRO-1 shards the moments alone: 10 + 8/dp) */
  double Z = mem_zero_ranks(p), per_param = c->zero ? (fp32 ? 8 + 8 / Z : 6 + 12 / Z) : fp32 ? 16.0 : 18.0;
  Megatron r = {.weights = per_param * (double)rank_params(p),
                .acts = (per_layer * layers / p->nch + extra) * inflight * (fp32 ? 2 : 1)};
  if (!c->sp) r.acts *= 1.05; /* its allowance for temporaries without sequence parallelism */
  return r;
}

/* ============================================================================================
 * The table
 * ========================================================================================== */

/* The ranks running stage r, as ranges ("0-7, 64-71"): in this loop order they increase. */
static void rank_list(FILE *f, const Config *c, int stage) {
  int lo = -1, prev = -1;
  const char *sep = "";
  for (int dp = 0; dp < c->dp; dp++)
    for (int cp = 0; cp < c->cp; cp++)
      for (int tp = 0; tp < c->tp; tp++) {
        int r = cg_rank(c, &(Coord){.tp = tp, .cp = cp, .dp = dp}, stage);
        if (lo >= 0 && r != prev + 1) {
          fprintf(f, prev > lo ? "%s%d-%d" : "%s%d", sep, lo, prev);
          sep = ", ";
          lo = -1;
        }
        if (lo < 0) lo = r;
        prev = r;
      }
  fprintf(f, prev > lo ? "%s%d-%d" : "%s%d", sep, lo, prev);
}

static void region_row(FILE *f, const char *name, int64_t b, const char *what) {
  fprintf(f, "  %-10s %15lld %9.3f  %s\n", name, (long long)b, gib(b), what);
}

static void print_stage(FILE *f, const Graph *m, const Program *p, const Sched *s, int stage) {
  fprintf(f, "\nstage %d: ranks ", stage);
  rank_list(f, &m->cfg, stage);
  fprintf(f, "; %lld parameter elements a rank\n", (long long)rank_params(p));
  fprintf(f, "  %-10s %15s %9s  %s\n", "region", "bytes", "GiB", "what");
  int64_t sum = 0;
  for (int c = 0; c < BC__COUNT; c++) {
    int64_t b = mem_region_total(p, c);
    sum += b;
    char what[256];
    if (c == BC_COPY) {
      if (!b) continue;
      snprintf(what, sizeof what, "%s (%s)", region_what[c], pp_dtype_name(pp_precision_dtype[m->cfg.precision]));
    } else if (c == BC_SLOT)
      snprintf(what, sizeof what, "%s: %d set%s held at once under %s, x %lld bytes (a micro-batch's)", region_what[c],
               p->nslots, p->nslots == 1 ? "" : "s", s->kind, (long long)p->region_bytes[c]);
    else if ((c == BC_ADAM_M || c == BC_ADAM_V) && m->cfg.zero)
      snprintf(what, sizeof what, "%s: this rank's shard, 1/%d", region_what[c], mem_zero_ranks(p));
    else snprintf(what, sizeof what, "%s", region_what[c]);
    region_row(f, pp_region_name(c), b, what);
  }
  if (p->arena != sum) region_row(f, "(padding)", p->arena - sum, "alignment of the workspace");
  region_row(f, "arena", p->arena, "what ppr allocates on the device");
  Megatron e = megatron(m, p, s, stage);
  int64_t state = 0;
  for (int c = BC_PARAM; c <= BC_COPY; c++) state += mem_region_total(p, c);
  int64_t acts = mem_region_total(p, BC_SLOT);
  fprintf(f,
          "  Megatron-LM's estimate: weights and optimizer %.3f GiB (ppc %.3f, x%.2f), activations %.3f GiB (ppc "
          "%.3f, x%.2f), total %.3f GiB\n",
          e.weights / (1 << 30), gib(state), e.weights > 0 ? (double)state / e.weights : 0, e.acts / (1 << 30),
          gib(acts), e.acts > 0 ? (double)acts / e.acts : 0, (e.weights + e.acts) / (1 << 30));
}

/* The rank with the largest arena (the lowest rank of its stage): its stage, and its rank. */
static int most_loaded(const Config *c, const Program *const *prog, int *rank) {
  int best = 0;
  for (int r = 1; r < c->pp; r++)
    if (prog[r]->arena > prog[best]->arena) best = r;
  *rank = cg_rank(c, &(Coord){0}, best);
  return best;
}

void mem_report_print(FILE *f, const Graph *m, const Sched *s, const Program *const *prog) {
  const Config *c = &m->cfg;
  Shape2 w = model_widths(m);
  fprintf(f, "# ppc --emit memory: per stage, the device memory each of its ranks allocates (its arena, region by "
             "region, as -o writes it)\n");
  fprintf(f,
          "# %s %s; tp %lld, pp %lld, dp %lld, cp %lld%s (%lld ranks); micro_batch %lld, seq %lld, %lld "
          "micro-batches a step; schedule %s\n",
          m->model, pp_precision_names[c->precision], (long long)c->tp, (long long)c->pp, (long long)c->dp,
          (long long)c->cp, c->sp ? ", sp" : "", (long long)(c->tp * c->pp * c->dp * c->cp), (long long)c->micro_batch,
          (long long)c->seq, (long long)c->microbatches, s->kind);
  fprintf(f,
          "# Megatron-LM's estimate (megatron/training/theoretical_memory_usage.py): h %lld, ffn %lld (the widest "
          "dimension of a layer's weights), s %lld positions a rank, %s\n",
          (long long)w.h, (long long)w.ffn, (long long)ir_seq_local(c),
          c->sp ? "sequence parallel: s*b*h*(18 + 4*ffn/h)/tp bytes a layer"
                : "without sequence parallelism: s*b*h*(10 + 24/tp) bytes a layer, x1.05");
  if (c->precision == PP_PREC_FP32)
    fprintf(f, "# (its bf16 bytes scaled to fp32: activations x2, 16 bytes a parameter)\n");
  if (c->zero)
    fprintf(f, "# zero 1: its distributed optimizer's 6 + 12/dp bytes a parameter (it shards the fp32 master weights "
               "too; ppc shards the moments: 10 + 8/dp)\n");
  for (int r = 0; r < c->pp; r++) print_stage(f, m, prog[r], s, r);
  int64_t wide = 0;
  for (int r = 0; r < c->pp; r++)
    if (widened_bytes(prog[r]) > wide) wide = widened_bytes(prog[r]);
  fprintf(f, "\noutside the arena: the device runtime's context and its collectives' buffers (NCCL; over MPI, a "
             "host scratch of at most 64 MiB), the host's copy of a step's tokens");
  if (wide)
    fprintf(f, "; on cpu and opencl, bf16 GEMM operands widened to fp32: at most %lld bytes a rank", (long long)wide);
  fprintf(f, "\n");
  int rank, stage = most_loaded(c, prog, &rank);
  fprintf(f, "most loaded rank: %d, %.2f GiB\n", rank, gib(prog[stage]->arena));
}

/* --mem-limit: 0 when every rank's arena fits, else 1 after saying which rank, its largest
 * region and the options that shrink it. */
int mem_fit_check(const Graph *m, const Program *const *prog, int64_t limit) {
  const Config *c = &m->cfg;
  int rank, stage = most_loaded(c, prog, &rank);
  const Program *p = prog[stage];
  if (p->arena <= limit) return 0;
  int big = 0;
  for (int r = 1; r < BC__COUNT; r++)
    if (mem_region_total(p, r) > mem_region_total(p, big)) big = r;
  fprintf(stderr,
          "ppc: error: rank %d (stage %d) needs %.3f GiB of device memory, more than --mem-limit %.3f GiB; "
          "its largest region is %s, %.3f GiB (%s)\n",
          rank, stage, gib(p->arena), gib(limit), pp_region_name(big), gib(mem_region_total(p, big)), region_what[big]);
  fprintf(stderr, "  what shrinks it:");
  if (big == BC_SLOT) {
    fprintf(stderr, " a smaller --micro-batch;");
    if (c->recompute != RECOMPUTE_FULL)
      fprintf(stderr, " --recompute %s;", c->recompute == RECOMPUTE_NONE ? "selective or full" : "full");
    if (c->tp > 1 && !c->sp) fprintf(stderr, " --sp;");
    if (c->precision == PP_PREC_FP32) fprintf(stderr, " --precision bf16;");
    if (!strcmp(c->schedule, "gpipe")) fprintf(stderr, " --schedule 1f1b (gpipe keeps every micro-batch's);");
    else if (strcmp(c->schedule, "1f1b")) fprintf(stderr, " --schedule auto, which weighs what each schedule keeps;");
  } else if (big == BC_SCRATCH) {
    fprintf(stderr, " a smaller --micro-batch or --seq;");
    if (c->att_gemm) fprintf(stderr, " --attention fused;");
  }
  if (big <= BC_COPY && !c->zero && c->dp * c->cp > 1)
    fprintf(stderr, " --zero 1 (AdamW's moments over the dp ranks);");
  fprintf(stderr, " a larger --tp or --pp (fewer weights and activations a rank); --emit memory shows every region\n");
  return 1;
}
