/* sched_time.c — a schedule's predicted timeline: the cost of each stage's forward, backward (B)
 * and weight gradients (W) from its lowered program, every rank's entries placed in time as their
 * inputs arrive, the step time, the bubble and the activations held; printed as a chart
 * (--emit schedule) or drawn as SVG (--emit svg, pp_timeline.c). */
#include <stdlib.h>
#include <string.h>

#include "pp_timeline.h"
#include "ppc.h"

/* ============================================================================================
 * Costs: flop-equivalents, flops + SCHED_BYTE_WEIGHT x bytes moved, per instruction
 * ========================================================================================== */

static double buf_bytes(const Program *p, const Operand *o) { return o->kind == 'b' ? (double)p->vb[o->vb].bytes : 0; }

double sched_kernel_flops(const Kernel *k) { return (double)k->rows * (double)k->work; }

double sched_gemm_flops(const Instr *in) {
  return 2 * pp_tri_macs(in->tri, in->m, in->n, in->k) * (double)in->batch; /* a triangle: its products alone */
}

static double instr_cost(const Program *p, const Instr *in) {
  double flops = 0, bytes = 0;
  switch (in->kind) {
  case I_GEMM: {
    double m = (double)in->m, n = (double)in->n, k = (double)in->k, batch = (double)in->batch;
    flops = sched_gemm_flops(in);
    double ea = (double)pp_dtype_bytes(p->vb[in->op[0].vb].dtype),
           eb = (double)pp_dtype_bytes(p->vb[in->op[1].vb].dtype),
           ec = (double)pp_dtype_bytes(p->vb[in->op[2].vb].dtype); /* each operand's element */
    bytes = (ea * m * k + eb * k * n + ec * m * n) * batch;
    break;
  }
  case I_KERNEL:
  case I_GRADNORM: {
    flops = sched_kernel_flops(p->kernels[in->kernel]);
    for (int a = 0; a < in->nop; a++) bytes += buf_bytes(p, &in->op[a]);
    break;
  }
  case I_ZERO: bytes = (double)in->bytes; break;
  case I_LOGITS: break; /* a marker: where the logits are */
  case I_BATCH:
  case I_SEED:
  case I_LOSS:
  case I_ALLREDUCE_TIED:
  case I_ALLREDUCE:
  case I_ALLGATHER:
  case I_REDUCE_SCATTER:
    for (int a = 0; a < in->nop; a++) bytes += buf_bytes(p, &in->op[a]);
    break;
  }
  return flops + SCHED_BYTE_WEIGHT * bytes;
}

static double block_cost(const Program *p, const Block *b) {
  double c = 0;
  for (int i = 0; i < b->n; i++) c += instr_cost(p, &b->ins[i]);
  return c;
}

void sched_stage_cost(const Program *p, int chunk, StageCost *c) {
  c->f = block_cost(p, &p->ch[chunk].fwd);
  c->b = block_cost(p, &p->ch[chunk].bwd);
  c->w = block_cost(p, &p->ch[chunk].wgt);
  c->slot_bytes = 0; /* the chunk's own slot layout (a slot is sized for the largest) */
  for (int i = 0; i < p->nvb; i++)
    if (p->vb[i].cls == BC_SLOT && p->vb[i].chunk == chunk)
      c->slot_bytes += (p->vb[i].bytes + MEM_ALIGN - 1) / MEM_ALIGN * MEM_ALIGN;
  c->state_bytes = c->scratch_bytes = 0; /* the program's: a one-chunk program's are its chunk's */
  for (int r = BC_PARAM; r <= BC_COPY; r++) c->state_bytes += mem_region_total(p, r);
  c->scratch_bytes = mem_region_total(p, BC_SCRATCH) + mem_region_total(p, BC_WORKSPACE);
}

/* ============================================================================================
 * The timeline: a rank runs its compute entries in order, each as soon as the rank is free and
 * its input has arrived (a forward: the previous stage's forward of that micro-batch; a backward:
 * the next stage's backward; W: its own B). Messages take no time; the bubble is the idle share.
 * ========================================================================================== */

typedef struct Timeline {
  int pp;
  PpSpan **span; /* per rank, its compute entries in order */
  int *n;
  double total;
  double *busy;  /* per rank */
  double bubble; /* the idle share of all ranks' time */
} Timeline;

static double entry_cost(const Sched *s, const StageCost *c, SchedKind k) {
  switch (k) {
  case SE_F: return c->f;
  case SE_B: return s->split ? c->b : c->b + c->w; /* unsplit: one backward does both */
  case SE_W: return c->w;
  case SE_COMM: break;
  }
  return 0;
}

/* The letter of an entry in the pictures: F, B, W; lowercase for a rank's odd chunks. */
static char letter(const SchedEntry *e) {
  char c = sched_letter(e->kind);
  return e->chunk % 2 ? (char)(c - 'A' + 'a') : c;
}

/* cost: per virtual stage (per stage without chunks of layers). */
static Timeline *predict(const Sched *s, const StageCost *cost) {
  int pp = s->pp, M = s->M, nv = s->pp * s->V;
  Timeline *t = xcalloc(1, sizeof *t);
  t->pp = pp;
  t->span = xcalloc((size_t)pp, sizeof *t->span);
  t->n = xcalloc((size_t)pp, sizeof *t->n);
  t->busy = xcalloc((size_t)pp, sizeof *t->busy);
  double *fend = xmalloc((size_t)(nv * M) * sizeof *fend), *bend = xmalloc((size_t)(nv * M) * sizeof *bend);
  for (int i = 0; i < nv * M; i++) fend[i] = bend[i] = -1;
  int *pc = xcalloc((size_t)pp, sizeof *pc);
  double *clock = xcalloc((size_t)pp, sizeof *clock);
  for (int r = 0; r < pp; r++) t->span[r] = xcalloc((size_t)s->st[r].n + 1, sizeof **t->span);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; r++) {
      const StageSched *st = &s->st[r];
      while (pc[r] < st->n && st->e[pc[r]].kind == SE_COMM) pc[r]++;
      if (pc[r] >= st->n) continue;
      const SchedEntry *e = &st->e[pc[r]];
      int m = e->mb, v = sched_vstage(s, r, e->chunk);
      double ready = 0;
      if (e->kind == SE_F && v > 0) ready = fend[(v - 1) * M + m];
      if (e->kind == SE_B && v < nv - 1) ready = bend[(v + 1) * M + m];
      if (ready < 0) continue; /* its input has not been computed yet */
      double t0 = clock[r] > ready ? clock[r] : ready, t1 = t0 + entry_cost(s, &cost[v], e->kind);
      if (e->kind == SE_F) fend[v * M + m] = t1;
      if (e->kind == SE_B) bend[v * M + m] = t1;
      t->span[r][t->n[r]++] = (PpSpan){t0, t1, letter(e), m};
      t->busy[r] += t1 - t0;
      clock[r] = t1;
      if (t1 > t->total) t->total = t1;
      pc[r]++;
      progress = true;
    }
  }
  double busy = 0;
  for (int r = 0; r < pp; r++) {
    if (pc[r] < s->st[r].n) diag_fatal("internal: the timeline of schedule '%s' stops at rank %d", s->kind, r);
    busy += t->busy[r];
  }
  t->bubble = t->total > 0 ? 1 - busy / (t->total * pp) : 0;
  free(fend);
  free(bend);
  free(pc);
  free(clock);
  return t;
}

static void timeline_free(Timeline *t) {
  for (int r = 0; r < t->pp; r++) free(t->span[r]);
  free(t->span);
  free(t->n);
  free(t->busy);
  free(t);
}

/* The activation bytes rank r holds: its slots, each as large as its largest chunk's activations. */
static int64_t held(const Sched *s, const StageCost *cost, int r) {
  int64_t slot = 0;
  for (int c = 0; c < s->V; c++)
    if (cost[sched_vstage(s, r, c)].slot_bytes > slot) slot = cost[sched_vstage(s, r, c)].slot_bytes;
  return s->st[r].nslots * slot;
}

static int sets(const Sched *s, int r) { return s->st[r].nslots; }

/* The device memory rank r needs: its chunks' parameters' regions, the largest scratch and
 * workspace of them, and its activations. */
static int64_t rank_bytes(const Sched *s, const StageCost *cost, int r) {
  int64_t state = 0, scratch = 0;
  for (int c = 0; c < s->V; c++) {
    const StageCost *x = &cost[sched_vstage(s, r, c)];
    state += x->state_bytes;
    if (x->scratch_bytes > scratch) scratch = x->scratch_bytes;
  }
  return state + scratch + held(s, cost, r);
}

SchedPrediction sched_predict(const Sched *s, const StageCost *cost) {
  Timeline *t = predict(s, cost);
  SchedPrediction out = {.step = t->total, .bubble = t->bubble};
  for (int r = 0; r < s->pp; r++) {
    if (held(s, cost, r) > out.peak_bytes) out.peak_bytes = held(s, cost, r);
    if (rank_bytes(s, cost, r) > out.peak_memory) out.peak_memory = rank_bytes(s, cost, r);
  }
  timeline_free(t);
  return out;
}

/* The unit the numbers are printed in: 10^6 or 10^9 flop-equivalents. */
static double unit_of(double total, const char **name) {
  *name = total >= 1e10 ? "Gfe" : "Mfe";
  return total >= 1e10 ? 1e9 : 1e6;
}

static void mib(char *buf, size_t n, int64_t bytes) { snprintf(buf, n, "%.2f MiB", (double)bytes / (1 << 20)); }

/* The published bubble of the schedule on balanced stages, where there is one. */
static void formula(FILE *f, const Sched *s) {
  double p = s->pp, M = s->M;
  if (!strcmp(s->kind, "1f1b") || !strcmp(s->kind, "gpipe"))
    fprintf(f, "formula (balanced stages): (p-1)/(M+p-1) = %.1f%%\n", 100 * (p - 1) / (M + p - 1));
  else if (!strcmp(s->kind, "naive")) fprintf(f, "formula (balanced stages): (p-1)/p = %.1f%%\n", 100 * (p - 1) / p);
  else if (!strcmp(s->kind, "interleaved"))
    fprintf(f, "formula (balanced stages): ((p-1)/V)/(M+(p-1)/V) = (p-1)/(VM+p-1) = %.1f%%, V = %d\n",
            100 * (p - 1) / (s->V * M + p - 1), s->V);
  else if (!strcmp(s->kind, "zbv"))
    fprintf(f, "formula (balanced stages, F = B = W): (p-1)(F+B-2W) of idle time per rank = 0%%, V-shaped chunks\n");
  else if (!strcmp(s->kind, "zb-h1"))
    fprintf(f, "formula (balanced stages, F = B = W): (p-1)/(3M+p-1) = %.1f%%, a third of 1F1B's bubble time\n",
            100 * (p - 1) / (3 * M + p - 1));
}

void sched_print(FILE *f, const Sched *s, const StageCost *cost) {
  Timeline *t = predict(s, cost);
  const char *un;
  double u = unit_of(t->total, &un);
  fprintf(f, "# schedule %s: %d stages, %d micro-batches; costs from the cost model in %s (10^%d flops + %g x bytes)\n",
          s->kind, s->pp, s->M, un, u == 1e9 ? 9 : 6, SCHED_BYTE_WEIGHT);
  if (s->V > 1 && s->vshape)
    fprintf(f,
            "# 2 chunks of layers per rank in a V: rank r holds virtual stages r and %d-r; costs per chunk, lowercase "
            "letters for the second\n",
            2 * s->pp - 1);
  else if (s->V > 1)
    fprintf(f,
            "# %d chunks of layers per rank: rank r holds virtual stages r, r+%d, ...; costs per chunk, lowercase "
            "letters for odd chunks\n",
            s->V, s->pp);
  for (int r = 0; r < s->pp; r++) {
    char b[32];
    mib(b, sizeof b, held(s, cost, r));
    fprintf(f, "stage %d:", r);
    for (int k = 0; k < (s->split ? 3 : 2); k++) {
      fprintf(f, " %c ", "FBW"[k]);
      for (int c = 0; c < s->V; c++) {
        const StageCost *x = &cost[sched_vstage(s, r, c)];
        double v = k == 0 ? x->f : k == 2 ? x->w : s->split ? x->b : x->b + x->w;
        fprintf(f, "%s%.4g", c ? "/" : "", v / u);
      }
      fprintf(f, " ");
    }
    int n = sets(s, r);
    fprintf(f, " | busy %.4g, idle %.1f%% | %d activation set%s held at most, %s\n", t->busy[r] / u,
            100 * (1 - t->busy[r] / t->total), n, n == 1 ? "" : "s", b);
  }
  /* the chart: a column is total/W of time; an entry is its letter and micro-batch, then dashes */
  enum { W = 120 };
  double col = t->total / W;
  char line[W + 1];
  for (int r = 0; r < s->pp; r++) {
    memset(line, '.', W);
    line[W] = 0;
    for (int i = 0; i < t->n[r]; i++) {
      const PpSpan *e = &t->span[r][i];
      int a = (int)(e->t0 / col + 0.5), z = (int)(e->t1 / col + 0.5);
      if (z <= a) z = a + 1;
      if (z > W) z = W;
      char label[16];
      int len = snprintf(label, sizeof label, "%c%d", e->kind, e->mb);
      for (int c = a; c < z; c++) line[c] = c - a < len ? label[c - a] : '-';
    }
    fprintf(f, "stage %d |%s|\n", r, line);
  }
  fprintf(f, "step: %.4g %s predicted; bubble %.1f%% of all ranks' time idle\n", t->total / u, un, 100 * t->bubble);
  formula(f, s);
  timeline_free(t);
}

void sched_svg(FILE *f, const Sched *s, const StageCost *cost, const char *model) {
  Timeline *t = predict(s, cost);
  const char *un;
  double u = unit_of(t->total, &un);
  for (int r = 0; r < s->pp; r++)
    for (int i = 0; i < t->n[r]; i++) t->span[r][i].t0 /= u, t->span[r][i].t1 /= u;
  char title[160], sub[160];
  snprintf(title, sizeof title, "%s: schedule %s, %d stages, %d micro-batches (predicted)", model, s->kind, s->pp,
           s->M);
  snprintf(sub, sizeof sub, "step %.4g %s, bubble %.1f%% (ppc's cost model: flops + %g x bytes)", t->total / u, un,
           100 * t->bubble, SCHED_BYTE_WEIGHT);
  PpLane *lane = xcalloc((size_t)s->pp, sizeof *lane);
  for (int r = 0; r < s->pp; r++) lane[r] = (PpLane){t->span[r], t->n[r]};
  pp_timeline_svg(f, title, sub, lane, s->pp, t->total / u, un);
  free(lane);
  timeline_free(t);
}

/* ============================================================================================
 * --schedule auto: every schedule predicted, the fastest whose ranks' memory fits
 * ========================================================================================== */

static void gib(char *buf, size_t n, int64_t bytes) { snprintf(buf, n, "%.3f GiB", (double)bytes / (1 << 30)); }

int sched_choose(int pp, int M, int nlayers, const StageCost *const cost[2][2], int64_t mem_limit, FILE *why,
                 int *vpp) {
  char lim[32] = "none";
  if (mem_limit > 0) gib(lim, sizeof lim, mem_limit);
  fprintf(why, "# schedule auto: %d stages, %d micro-batches; device memory limit per rank: %s\n", pp, M, lim);
  fprintf(why, "#   %-19s %14s %8s %14s %14s\n", "schedule", "step", "bubble", "activations", "memory");
  fprintf(why, "#   %-19s %14s %8s %14s %14s\n", "", "", "", "(most on a rank)", "(most on a rank)");
  int best = -1;
  SchedPrediction bp = {0};
  const char *un = "Mfe";
  double u = 1e6;
  for (int k = 0; k < sched_count(); k++) {
    const char *kind = sched_name(k);
    bool chunked = sched_chunked(kind);
    int V = chunked ? 2 : 1; /* chunked: two chunks per rank, the costs are the virtual stages' */
    char why_not[256];
    if (!cost[chunked][sched_splits(kind)] || sched_fits(kind, pp, V, M, nlayers, why_not, sizeof why_not)) continue;
    Sched *s = sched_build(pp, V, M, kind);
    SchedPrediction p = sched_predict(s, cost[chunked][s->split]);
    if (k == 0) u = unit_of(p.step, &un);
    bool fits = mem_limit <= 0 || p.peak_memory <= mem_limit;
    char b[32], mem[32], name[32];
    gib(b, sizeof b, p.peak_bytes);
    gib(mem, sizeof mem, p.peak_memory);
    if (chunked) snprintf(name, sizeof name, "%s (vpp %d)", kind, V);
    else snprintf(name, sizeof name, "%s", kind);
    fprintf(why, "#   %-19s %10.4g %s %7.1f%% %14s %14s%s\n", name, p.step / u, un, 100 * p.bubble, b, mem,
            fits ? "" : "  over the limit");
    /* the fastest; between equal steps, the one holding less */
    if (fits && (best < 0 || p.step < bp.step * (1 - 1e-9) ||
                 (p.step <= bp.step * (1 + 1e-9) && p.peak_memory < bp.peak_memory)))
      best = k, bp = p, *vpp = V;
    sched_free(s);
  }
  if (best >= 0)
    fprintf(why, "# chosen: %s%s, the fastest predicted step that fits\n", sched_name(best),
            *vpp > 1 ? " --vpp 2" : "");
  return best;
}
