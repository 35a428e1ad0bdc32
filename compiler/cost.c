/* cost.c — ppc --emit cost: the work of one training step on each rank, from its lowered program
 * (the data of its listing) run as its schedule runs it: the kernel launches and the bytes their
 * pointer arguments span, the GEMMs' FLOPs and the bytes their operands span, the kernels that
 * span the most bytes, and a roofline prediction of that work's time on a few devices. */
#include <stdlib.h>

#include "ppc.h"

/* ============================================================================================
 * The devices: peak rates and memory bandwidth, the roofline's only inputs
 * ========================================================================================== */

typedef struct CostDevice {
  const char *name;
  double bf16; /* FLOP/s of a GEMM whose A and B are bf16 (tensor cores, dense) */
  double tf32; /* FLOP/s of an f32 GEMM rounded to TF32 (ppr --tf32 on cuda); 0: none */
  double fp32; /* FLOP/s of f32 arithmetic without tensor cores: other GEMMs, and every kernel */
  double bw;   /* bytes read or written a second */
} CostDevice;

/* The GPUs: NVIDIA's data-sheet peaks (dense, without sparsity) and HBM bandwidths. The cpu: the
 * machine this table was written on (Intel Xeon @ 2.80GHz, AVX-512, 2 cores under KVM, Debian 12),
 * measured by a small C program: OpenBLAS 0.3.21's cblas_sgemm (pthread, 2 threads) row-major
 * N N of 4096 x 4096 x 4096, best of 5 calls: 231 to 269 GFLOP/s over 3 runs on a quiet machine
 * (half that while other jobs ran; taken: 250); memcpy of 1 GiB, best of 5: 11.8 to 12.9 GB/s
 * copied, so 24 GB/s read and written (taken). Its bf16 GEMMs are f32 ones (the cpu device widens
 * bf16 operands), and its kernels' arithmetic has the same FMA units at most. */
static const CostDevice devices[] = {
    {"H100-SXM", 989e12, 494e12, 67e12, 3.35e12},
    {"H200", 989e12, 494e12, 67e12, 4.8e12},
    {"cpu", 250e9, 0, 250e9, 24e9},
};
#define NDEV ((int)(sizeof devices / sizeof devices[0]))

/* The roofline time of one launch or GEMM: whichever of its bytes and its FLOPs takes longer. */
static double roof(double flops, double peak, double bytes, const CostDevice *d) {
  double t = bytes / d->bw;
  return flops / peak > t ? flops / peak : t;
}

/* ============================================================================================
 * Counting a block
 * ========================================================================================== */

/* What some instructions do: one run of a block, or a step. */
typedef struct Tally {
  int64_t launches; /* kernel launches: kernel lines and grad_norm's */
  double kbytes;    /* the bytes their pointer arguments span */
  int64_t gemms;
  double gflops, gbytes;                     /* the GEMMs' FLOPs and the bytes their operands span */
  int64_t epis;                              /* GEMMs' epilogues (epi:), counted inside them */
  double ebytes;                             /* the bytes their kernels span when run after the GEMM */
  double ksec[NDEV], gsec[NDEV], tsec[NDEV]; /* roofline seconds: kernels, GEMMs, GEMMs with f32 at TF32 */
} Tally;

/* One kernel's launches, bytes and roofline seconds on the first device over the step. */
typedef struct Use {
  int64_t launches;
  double bytes, sec;
} Use;

typedef struct Cost {
  const Program *p;
  const Coord *w; /* the rank: which parameters it owns */
  Use *use;       /* per p->kernels */
} Cost;

/* One launch of kernel k over bytes, in a block its schedule runs `runs` times a step. A kernel's
 * FLOPs are the schedule's cost model's (its rows times its rough work a row), at the fp32 peak. */
static void launch(Cost *c, int k, double bytes, int64_t runs, Tally *t) {
  double flops = sched_kernel_flops(c->p->kernels[k]);
  t->launches++;
  t->kbytes += bytes;
  for (int d = 0; d < NDEV; d++) t->ksec[d] += roof(flops, devices[d].fp32, bytes, &devices[d]);
  c->use[k].launches += runs;
  c->use[k].bytes += bytes * (double)runs;
  c->use[k].sec += roof(flops, devices[0].fp32, bytes, &devices[0]) * (double)runs;
}

/* A kernel line: its bytes are the extents the listing writes after its pointer arguments. */
static void count_kernel(Cost *c, const Instr *in, int64_t runs, Tally *t) {
  double bytes = 0;
  for (int a = 0; a < in->nop; a++) bytes += (double)cg_extent(c->p, &in->op[a]);
  launch(c, in->kernel, bytes, runs, t);
}

/* grad_norm: one launch over the gradients of the parameters the rank owns (a param line of the
 * listing without copy or replica; rt_exec.c's grad_runs), its partial sums and its table. */
static void count_grad_norm(Cost *c, const Instr *in, int64_t runs, Tally *t) {
  const Program *p = c->p;
  double bytes = (double)cg_extent(p, &in->op[0]) + (double)cg_extent(p, &in->op[1]);
  for (int i = 0; i < p->nvb; i++) {
    const VBuf *v = &p->vb[i];
    if (v->cls != BC_PARAM || v->view >= 0 || cg_listed_replica(p->g, &p->g->params[v->param], c->w)) continue;
    bytes += (double)ir_shape_numel(&p->g->params[v->param].shape) * pp_dtype_bytes(PP_F32);
  }
  launch(c, in->kernel, bytes, runs, t);
}

/* A GEMM: 2·m·n·k·batch FLOPs, of a triangle (tri: causal attention's) the products it keeps alone
 * (sched_gemm_flops: about half; the cpu device skips the others, the opencl and cuda devices
 * compute the whole product today, so their time is predicted short by that much); its bytes the
 * spans of A, B and C, and the rest of the buffer of any operand after them. A bf16 x bf16 GEMM
 * runs at the bf16 peak, any other at the fp32 one (tsec: at TF32 where the device has it). */
static void count_gemm(Cost *c, const Instr *in, double extra, Tally *t) {
  const Program *p = c->p;
  bool ta = in->ta == 'T', tb = in->tb == 'T';
  double n[3] = {(double)pp_gemm_span(in->batch, in->sa, ta ? in->k : in->m, in->lda, ta ? in->m : in->k),
                 (double)pp_gemm_span(in->batch, in->sb, tb ? in->n : in->k, in->ldb, tb ? in->k : in->n),
                 (double)pp_gemm_span(in->batch, in->sc, in->m, in->ldc, in->n)};
  double bytes = extra, flops = sched_gemm_flops(in);
  for (int k = 0; k < 3; k++) bytes += n[k] * (double)pp_dtype_bytes(p->vb[in->op[k].vb].dtype);
  for (int a = 3; a < in->nop; a++) bytes += (double)cg_extent(p, &in->op[a]);
  bool bf16 = p->vb[in->op[0].vb].dtype == PP_BF16 && p->vb[in->op[1].vb].dtype == PP_BF16;
  t->gemms++;
  t->gflops += flops;
  t->gbytes += bytes;
  for (int d = 0; d < NDEV; d++) {
    const CostDevice *dv = &devices[d];
    double f32 = dv->tf32 > 0 ? dv->tf32 : dv->fp32;
    t->gsec[d] += roof(flops, bf16 ? dv->bf16 : dv->fp32, bytes, dv);
    t->tsec[d] += roof(flops, bf16 ? dv->bf16 : f32, bytes, dv);
  }
}

/* A GEMM's epilogue e, its next kernel in (pp_epi.h): the bytes it adds to the GEMM's, its pointer
 * arguments but C (which the GEMM spans) as a device that fuses them moves them; t keeps the
 * launch and bytes it is when run after the GEMM. */
static double count_epilogue(Cost *c, PpEpi e, const Instr *in, Tally *t) {
  double all = 0, c1 = (double)cg_extent(c->p, &in->op[pp_epi_c[e]]);
  for (int a = 0; a < in->nop; a++) all += (double)cg_extent(c->p, &in->op[a]);
  t->epis++;
  t->ebytes += all;
  return all - c1;
}

/* One run of block b, which the rank's schedule runs `runs` times a step (Use counts them all). */
static Tally count_block(Cost *c, const Block *b, int64_t runs) {
  Tally t = {0};
  for (int i = 0; i < b->n; i++) {
    const Instr *in = &b->ins[i];
    switch (in->kind) {
    case I_KERNEL: count_kernel(c, in, runs, &t); break;
    case I_GRADNORM: count_grad_norm(c, in, runs, &t); break;
    case I_GEMM:
      if (in->epi != PP_EPI_NONE && i + 1 < b->n && b->ins[i + 1].kind == I_KERNEL)
        count_gemm(c, in, count_epilogue(c, in->epi, &b->ins[++i], &t), &t);
      else count_gemm(c, in, 0, &t);
      break;
    case I_BATCH:
    case I_ZERO:
    case I_SEED:
    case I_LOSS:
    case I_LOGITS:
    case I_ALLREDUCE_TIED:
    case I_ALLREDUCE:
    case I_ALLGATHER:
    case I_REDUCE_SCATTER: break; /* no kernel or GEMM: a copy, a memset, a marker, a message */
    }
  }
  return t;
}

/* to += runs x t */
static void tally_add(Tally *to, const Tally *t, int64_t runs) {
  double r = (double)runs;
  to->launches += runs * t->launches;
  to->kbytes += r * t->kbytes;
  to->gemms += runs * t->gemms;
  to->gflops += r * t->gflops;
  to->gbytes += r * t->gbytes;
  to->epis += runs * t->epis;
  to->ebytes += r * t->ebytes;
  for (int d = 0; d < NDEV; d++)
    to->ksec[d] += r * t->ksec[d], to->gsec[d] += r * t->gsec[d], to->tsec[d] += r * t->tsec[d];
}

/* How many entries of kind k of chunk ch the rank's schedule runs a step: its blocks' runs. */
static int64_t runs_of(const StageSched *st, SchedKind k, int ch) {
  int64_t n = 0;
  for (int i = 0; i < st->n; i++) n += st->e[i].kind == k && st->e[i].chunk == ch;
  return n;
}

/* ============================================================================================
 * Printing a rank's step
 * ========================================================================================== */

/* bytes (or FLOPs) in decimal units: "22.1 G" */
static const char *human(double x, char *buf, size_t n) {
  const char *unit = " kMGTPE";
  int u = 0;
  while (x >= 999.95 && unit[u + 1]) x /= 1000, u++;
  snprintf(buf, n, u ? "%.1f %c" : "%.0f ", x, unit[u]);
  return buf;
}

static void block_row(FILE *f, const char *name, int64_t runs, const Tally *t) {
  fprintf(f, "  %-12s %6lld %9lld %15.0f %7lld %17.0f %15.0f\n", name, (long long)runs, (long long)(runs * t->launches),
          (double)runs * t->kbytes, (long long)(runs * t->gemms), (double)runs * t->gflops, (double)runs * t->gbytes);
}

/* Every block of the rank's program: one row each, the step's totals in *step. */
static void print_blocks(FILE *f, Cost *c, const StageSched *st, Tally *step) {
  const Program *p = c->p;
  fprintf(f, "  %-12s %6s %9s %15s %7s %17s %15s\n", "block", "runs", "launches", "kernel bytes", "GEMMs", "GEMM FLOP",
          "GEMM bytes");
  static const SchedKind kinds[3] = {SE_F, SE_B, SE_W};
  for (int ch = 0; ch < p->nch; ch++)
    for (int k = 0; k < 3; k++) {
      const Block *b = k == 0 ? &p->ch[ch].fwd : k == 1 ? &p->ch[ch].bwd : &p->ch[ch].wgt;
      int64_t runs = runs_of(st, kinds[k], ch);
      if (!b->n && !runs) continue; /* an unsplit backward's empty weights block */
      char name[32];
      snprintf(name, sizeof name, p->nch > 1 ? "%s:%d" : "%s", b->name, ch);
      Tally t = count_block(c, b, runs);
      block_row(f, name, runs, &t);
      tally_add(step, &t, runs);
    }
  Tally t = count_block(c, &p->opt, 1); /* the OPT entry: once a step */
  block_row(f, p->opt.name, 1, &t);
  tally_add(step, &t, 1);
  fprintf(f, "  %-12s %6s %9lld %15.0f %7lld %17.0f %15.0f\n", "step", "", (long long)step->launches, step->kbytes,
          (long long)step->gemms, step->gflops, step->gbytes);
}

/* The refresh block, which ppr runs only after the values were set from outside (a start, a
 * resume): no step's work. runs 0: Use counts none of it. */
static void print_notes(FILE *f, Cost *c) {
  const Program *p = c->p;
  if (p->refresh.n) {
    Tally t = count_block(c, &p->refresh, 0);
    char hb[32];
    fprintf(f, "  (refresh: not counted, ppr runs it only after the weights were set; %lld launches, %sB)\n",
            (long long)t.launches, human(t.kbytes, hb, sizeof hb));
  }
}

static void print_roofline(FILE *f, const Tally *t) {
  fprintf(f, "\n  roofline: each launch max(bytes / bandwidth, its FLOPs / the fp32 peak), each GEMM max(bytes /\n"
             "  bandwidth, FLOPs / the peak of its types: bf16 x bf16 the bf16 peak, else fp32), summed: the\n"
             "  rank's compute alone (no communication, pipeline bubble, overlap or launch latency)\n");
  fprintf(f, "  %-10s %11s %11s %8s %11s %11s %11s\n", "device", "bf16 TF/s", "fp32 TF/s", "GB/s", "kernels ms",
          "GEMMs ms", "step ms");
  for (int d = 0; d < NDEV; d++)
    fprintf(f, "  %-10s %11.4g %11.4g %8.0f %11.3f %11.3f %11.3f\n", devices[d].name, devices[d].bf16 * 1e-12,
            devices[d].fp32 * 1e-12, devices[d].bw * 1e-9, t->ksec[d] * 1e3, t->gsec[d] * 1e3,
            (t->ksec[d] + t->gsec[d]) * 1e3);
  for (int d = 0; d < NDEV; d++) /* the program does not say whether ppr runs with --tf32 */
    if (devices[d].tf32 > 0 && t->tsec[d] < t->gsec[d])
      fprintf(f, "  %s with ppr --tf32 (f32 GEMMs at %.0f TF/s): GEMMs %.3f ms, step %.3f ms\n", devices[d].name,
              devices[d].tf32 * 1e-12, t->tsec[d] * 1e3, (t->ksec[d] + t->tsec[d]) * 1e3);
}

#define COST_TOP 10 /* the kernels listed by bytes */

static const Use *sort_use;
static int by_bytes(const void *a, const void *b) {
  const Use *x = &sort_use[*(const int *)a], *y = &sort_use[*(const int *)b];
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return *(const int *)a - *(const int *)b;
}

/* The kernels spanning the most bytes a step, by the name the listing gives them. */
static void print_top(FILE *f, const Cost *c, double total) {
  int nk = c->p->nk, *order = xmalloc((size_t)(nk ? nk : 1) * sizeof *order);
  for (int k = 0; k < nk; k++) order[k] = k;
  sort_use = c->use;
  qsort(order, (size_t)nk, sizeof *order, by_bytes);
  char hb[32];
  fprintf(f, "\n  the %d kernels spanning the most bytes (of %sB a step), and their roofline time on %s:\n",
          nk < COST_TOP ? nk : COST_TOP, human(total, hb, sizeof hb), devices[0].name);
  fprintf(f, "  %-28s %9s %15s %7s %9s\n", "kernel", "launches", "bytes", "share", "ms");
  for (int i = 0; i < nk && i < COST_TOP && c->use[order[i]].launches; i++) {
    const Use *u = &c->use[order[i]];
    fprintf(f, "  %-28s %9lld %15.0f %6.1f%% %9.3f\n", c->p->kernels[order[i]]->name, (long long)u->launches, u->bytes,
            total > 0 ? 100 * u->bytes / total : 0, u->sec * 1e3);
  }
  free(order);
}

/* One rank's step: the program of its stage, at its coordinates w. */
static void print_rank(FILE *f, const Program *p, const Sched *s, const Coord *w) {
  const Config *cfg = &p->g->cfg;
  const StageSched *st = &s->st[p->g->stage];
  fprintf(f, "rank %d: stage %d of %lld, tp_rank %d, dp_rank %d", cg_rank(cfg, w, p->g->stage), p->g->stage,
          (long long)cfg->pp, w->tp, w->dp);
  if (cfg->cp > 1) fprintf(f, ", cp_rank %d", w->cp);
  fprintf(f, "; %s %s, micro_batch %lld, seq %lld, schedule %s, %d micro-batch%s a step on each replica\n", p->g->model,
          pp_precision_names[cfg->precision], (long long)cfg->micro_batch, (long long)cfg->seq, s->kind, s->M,
          s->M > 1 ? "es" : "");
  Cost c = {.p = p, .w = w, .use = xcalloc((size_t)(p->nk ? p->nk : 1), sizeof *c.use)};
  Tally step = {0};
  print_blocks(f, &c, st, &step);
  print_notes(f, &c);
  char hk[32], hf[32], hg[32];
  fprintf(f, "  per step: %lld kernel launches spanning %sB; %lld GEMMs, %sFLOP spanning %sB\n",
          (long long)step.launches, human(step.kbytes, hk, sizeof hk), (long long)step.gemms,
          human(step.gflops, hf, sizeof hf), human(step.gbytes, hg, sizeof hg));
  if (step.epis)
    fprintf(f,
            "  %lld GEMM epilogues (epi:) counted inside their GEMMs, as cuda fuses them (ppr --lt-epilogues);\n"
            "  run after their GEMMs (cpu, opencl, cuda without it) they add %lld launches spanning %sB\n",
            (long long)step.epis, (long long)step.epis, human(step.ebytes, hk, sizeof hk));
  print_roofline(f, &step);
  print_top(f, &c, step.kbytes);
  free(c.use);
}

void cost_print(FILE *f, const Sched *s, const Program *const *prog) {
  const Config *cfg = &prog[0]->g->cfg;
  fprintf(f, "# ppc --emit cost: per rank, the work of one training step as its schedule runs its blocks\n");
  /* in rank order: rank = ((dp·pp + stage)·cp + cp_rank)·tp + tp_rank */
  for (int dp = 0; dp < cfg->dp; dp++)
    for (int r = 0; r < cfg->pp; r++)
      for (int cp = 0; cp < cfg->cp; cp++)
        for (int tp = 0; tp < cfg->tp; tp++) {
          fprintf(f, "\n");
          print_rank(f, prog[r], s, &(Coord){.tp = tp, .cp = cp, .dp = dp});
        }
}
