/* rt_prof.c - the executor's instruments: PPR_PROFILE's per-instruction profile (printed at the end) and --trace's
 * timeline of events. */
#include "rt_prof.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROF_KINDS 16 /* instruction kinds; a larger RtInstrKind counts as the last */
typedef struct {
  int chunk, blk, ta, tb, m, n, k, batch;
  PpTri tri;
  int64_t calls;
  double ms;
} ProfGemm;
typedef struct {
  int on;
  int64_t steps;
  double step_ms, zero_grads_ms, blk_ms[PP_MAX_CHUNKS][RT_NBLK], kind_ms[PROF_KINDS]; /* blk_ms: per chunk */
  int64_t kind_n[PROF_KINDS];
  double *kern_ms; /* per RtProg.kernels */
  int64_t *kern_n;
  double *kern_bytes; /* per RtProg.kernels: the bytes its launches' buffer arguments span */
  ProfGemm *gemm;
  int ngemm, capgemm;
} Prof;

typedef struct {
  int on, oom;
  double t0; /* the trace's start (rt_dev_time_ms) */
  RtEvent *ev;
  int64_t n, cap;
} Trace;

struct RtProf {
  const RtProg *p;
  char device[256];
  Prof prof;
  Trace tr;
};

RtProf *rt_prof_new(const RtProg *p, const char *device) {
  RtProf *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->p = p;
  snprintf(f->device, sizeof f->device, "%s", device);
  const char *pe = getenv("PPR_PROFILE");
  if (pe && *pe && strcmp(pe, "0")) {
    f->prof.on = 1;
    if (p->nkernels) {
      f->prof.kern_ms = calloc((size_t)p->nkernels, sizeof *f->prof.kern_ms);
      f->prof.kern_n = calloc((size_t)p->nkernels, sizeof *f->prof.kern_n);
      f->prof.kern_bytes = calloc((size_t)p->nkernels, sizeof *f->prof.kern_bytes);
      if (!f->prof.kern_ms || !f->prof.kern_n || !f->prof.kern_bytes) {
        rt_prof_free(f);
        return NULL;
      }
    }
  }
  return f;
}

int rt_prof_profiling(const RtProf *f) { return f && f->prof.on; }

static void prof_instr(Prof *pr, int chunk, int b, const RtInstr *in, double ms) {
  int k = (int)in->kind < PROF_KINDS ? (int)in->kind : PROF_KINDS - 1;
  pr->kind_ms[k] += ms;
  pr->kind_n[k]++;
  pr->blk_ms[chunk][b] += ms;
  if (in->kind == RT_I_KERNEL && pr->kern_ms) {
    pr->kern_ms[in->kernel] += ms;
    pr->kern_n[in->kernel]++;
    for (int a = 0; a < in->nargs; a++)
      if (in->args[a].kind == RT_A_PTR) pr->kern_bytes[in->kernel] += (double)in->args[a].bytes;
  } else if (in->kind == RT_I_GEMM) {
    ProfGemm *g = NULL;
    for (int i = 0; i < pr->ngemm && !g; i++) {
      ProfGemm *c = &pr->gemm[i];
      if (c->chunk == chunk && c->blk == b && c->ta == in->ta && c->tb == in->tb && c->m == in->m && c->n == in->n &&
          c->k == in->k && c->batch == in->batch && c->tri == in->tri)
        g = c;
    }
    if (!g) {
      if (pr->ngemm == pr->capgemm) {
        int cap = pr->capgemm ? 2 * pr->capgemm : 64;
        ProfGemm *ng = realloc(pr->gemm, (size_t)cap * sizeof *ng);
        if (!ng) return;
        pr->gemm = ng;
        pr->capgemm = cap;
      }
      g = &pr->gemm[pr->ngemm++];
      *g = (ProfGemm){chunk, b, in->ta, in->tb, in->m, in->n, in->k, in->batch, in->tri, 0, 0};
    }
    g->calls++;
    g->ms += ms;
  }
}

/* A shape's FLOPs over all its calls (a triangle's products alone) */
static double prof_gemm_flops(const ProfGemm *g) {
  return 2.0 * pp_tri_macs(g->tri, g->m, g->n, g->k) * g->batch * (double)g->calls;
}

static const char *prof_kind_name(int k) {
  switch (k) {
  case RT_I_BATCH: return "batch";
  case RT_I_ZERO: return "zero";
  case RT_I_KERNEL: return "kernel";
  case RT_I_GEMM: return "gemm";
  case RT_I_SEED: return "seed";
  case RT_I_LOSS: return "loss";
  case RT_I_LOGITS: return "logits";
  case RT_I_GRAD_NORM: return "grad_norm";
  case RT_I_ALLREDUCE_TIED: return "allreduce_tied";
  case RT_I_ALLREDUCE: return "allreduce";
  case RT_I_ALLGATHER: return "allgather";
  case RT_I_REDUCE_SCATTER: return "reduce_scatter";
  default: return "other";
  }
}

#define PROF_TOP_KERNELS 12 /* the profile's table of single kernels: the slowest this many */

/* A kernel's op: its name without the "kN_" prefix ppc gives it. */
static const char *prof_op(const char *name) {
  const char *u = strchr(name, '_');
  if (name[0] == 'k' && u && u > name + 1 && strspn(name + 1, "0123456789") == (size_t)(u - name - 1)) return u + 1;
  return name;
}

static int prof_gemm_cmp(const void *a, const void *b) {
  double x = ((const ProfGemm *)a)->ms, y = ((const ProfGemm *)b)->ms;
  return x < y ? 1 : x > y ? -1 : 0;
}

typedef struct {
  const char *op;
  int kernels;
  int64_t calls;
  double ms, bytes;
} ProfOp;

/* bytes moved in ms, as GB/s; 0 for no time */
static double prof_gbs(double bytes, double ms) { return ms > 0 ? bytes / (ms * 1e6) : 0; }

static int prof_op_cmp(const void *a, const void *b) {
  double x = ((const ProfOp *)a)->ms, y = ((const ProfOp *)b)->ms;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void prof_report(const RtProf *f) {
  const Prof *pr = &f->prof;
  const RtProg *p = f->p;
  FILE *o = stderr;
  if (pr->steps < 1) {
    fprintf(o, "ppr profile: no step counted (the first step is warm-up): run 2 or more steps\n");
    return;
  }
  double n = (double)pr->steps, step = pr->step_ms / n, sum = 0;
  for (int k = 0; k < PROF_KINDS; k++) sum += pr->kind_ms[k];
  fprintf(o, "ppr profile: %s on %s, %lld steps counted (not the first), per step: %.3f ms, %.3f ms in instructions\n",
          p->model, f->device, (long long)pr->steps, step, sum / n);
  fprintf(o, "  by block:    ");
  char name[32];
  for (int b = 0; b < RT_NBLK; b++)
    for (int c = 0; c < (rt_blk_program(b) ? 1 : rt_prog_nchunks(p)); c++)
      if (rt_prog_block(p, c, b)->present)
        fprintf(o, " %s %.3f ms", rt_prog_block_label(p, c, b, name, sizeof name), pr->blk_ms[c][b] / n);
  fprintf(o, "  zero_grads %.3f ms\n", pr->zero_grads_ms / n);
  fprintf(o, "  by instruction:");
  for (int k = 0; k < PROF_KINDS; k++)
    if (pr->kind_n[k])
      fprintf(o, " %s %.3f ms (%.1f%%, %lld calls)", prof_kind_name(k), pr->kind_ms[k] / n,
              step > 0 ? 100 * pr->kind_ms[k] / pr->step_ms : 0, (long long)(pr->kind_n[k] / pr->steps));
  fprintf(o, "\n");

  ProfGemm *g = malloc((size_t)(pr->ngemm ? pr->ngemm : 1) * sizeof *g);
  if (g) {
    if (pr->ngemm) memcpy(g, pr->gemm, (size_t)pr->ngemm * sizeof *g);
    qsort(g, (size_t)pr->ngemm, sizeof *g, prof_gemm_cmp);
    double fl = 0;
    for (int i = 0; i < pr->ngemm; i++) fl += prof_gemm_flops(&g[i]);
    double gms = pr->kind_ms[RT_I_GEMM];
    fprintf(o,
            "  gemm: %.2f GFLOP per step at %.1f GFLOP/s; shapes by time (C[M,N] = op(A)[M,K] op(B)[K,N], BATCH "
            "of them per call; TRI: the products of a triangle alone, counted so):\n",
            fl / n * 1e-9, gms > 0 ? fl / (gms * 1e6) : 0);
    fprintf(o, "    %-9s %-5s %6s %6s %6s %6s %10s %9s %6s %8s  %s\n", "block", "TA TB", "M", "N", "K", "BATCH",
            "calls/step", "ms/step", "%", "GFLOP/s", "TRI");
    for (int i = 0; i < pr->ngemm; i++) {
      double fl = prof_gemm_flops(&g[i]);
      fprintf(o, "    %-9s %c  %c  %6d %6d %6d %6d %10.1f %9.3f %6.1f %8.2f  %s\n",
              rt_prog_block_label(p, g[i].chunk, g[i].blk, name, sizeof name), g[i].ta ? 'T' : 'N', g[i].tb ? 'T' : 'N',
              g[i].m, g[i].n, g[i].k, g[i].batch, g[i].calls / n, g[i].ms / n, 100 * g[i].ms / pr->step_ms,
              g[i].ms > 0 ? fl / (g[i].ms * 1e6) : 0, g[i].tri != PP_TRI_NONE ? pp_tri_name(g[i].tri) : "-");
    }
    free(g);
  }

  ProfOp *ops = calloc((size_t)(p->nkernels ? p->nkernels : 1), sizeof *ops);
  if (ops && pr->kern_ms) {
    int nops = 0;
    for (int k = 0; k < p->nkernels; k++) {
      const char *op = prof_op(p->kernels[k]);
      int i = 0;
      while (i < nops && strcmp(ops[i].op, op)) i++;
      if (i == nops) ops[nops++] = (ProfOp){op, 0, 0, 0, 0};
      ops[i].kernels++;
      ops[i].calls += pr->kern_n[k];
      ops[i].ms += pr->kern_ms[k];
      ops[i].bytes += pr->kern_bytes[k];
    }
    qsort(ops, (size_t)nops, sizeof *ops, prof_op_cmp);
    double kb = 0, kms = 0;
    for (int i = 0; i < nops; i++) kb += ops[i].bytes, kms += ops[i].ms;
    fprintf(o,
            "  kernels: %.1f MB per step spanned by their buffer arguments (read or written, each once a launch), "
            "%.1f GB/s over their time; by op (all kernels kN_OP of one OP together):\n",
            kb / n * 1e-6, prof_gbs(kb, kms));
    fprintf(o, "    %-22s %7s %10s %9s %6s %8s\n", "op", "kernels", "calls/step", "ms/step", "%", "GB/s");
    for (int i = 0; i < nops; i++)
      fprintf(o, "    %-22s %7d %10.1f %9.3f %6.1f %8.1f\n", ops[i].op, ops[i].kernels, ops[i].calls / n, ops[i].ms / n,
              100 * ops[i].ms / pr->step_ms, prof_gbs(ops[i].bytes, ops[i].ms));
    /* the slowest kernels one by one: an op's kernels (a sum's parts and their total, say) apart */
    int nk = 0;
    for (int k = 0; k < p->nkernels; k++)
      if (pr->kern_n[k]) ops[nk++] = (ProfOp){p->kernels[k], 1, pr->kern_n[k], pr->kern_ms[k], pr->kern_bytes[k]};
    qsort(ops, (size_t)nk, sizeof *ops, prof_op_cmp);
    if (nk > PROF_TOP_KERNELS) nk = PROF_TOP_KERNELS;
    fprintf(o, "  the %d slowest kernels:\n", nk);
    fprintf(o, "    %-26s %10s %9s %6s %9s %9s %8s\n", "kernel", "calls/step", "ms/step", "%", "us/call", "MB/call",
            "GB/s");
    for (int i = 0; i < nk; i++)
      fprintf(o, "    %-26s %10.1f %9.3f %6.1f %9.2f %9.3f %8.1f\n", ops[i].op, ops[i].calls / n, ops[i].ms / n,
              100 * ops[i].ms / pr->step_ms, 1e3 * ops[i].ms / (double)ops[i].calls,
              ops[i].bytes / (double)ops[i].calls * 1e-6, prof_gbs(ops[i].bytes, ops[i].ms));
  }
  free(ops);
}

void rt_prof_instr(RtProf *f, int chunk, int blk, const RtInstr *in, double ms) {
  prof_instr(&f->prof, chunk, blk, in, ms);
}
void rt_prof_zero_grads(RtProf *f, double ms) { f->prof.zero_grads_ms += ms; }

void rt_prof_step(RtProf *f, double ms) {
  f->prof.step_ms += ms;
  f->prof.steps++;
}

void rt_prof_free(RtProf *f) {
  if (!f) return;
  if (f->prof.on) prof_report(f);
  free(f->prof.kern_ms);
  free(f->prof.kern_n);
  free(f->prof.kern_bytes);
  free(f->prof.gemm);
  free(f->tr.ev);
  free(f);
}

/* ---- the trace ------------------------------------------------------------------------------ */

void rt_trace_start(RtProf *f, double t0_ms) {
  f->tr.on = 1;
  f->tr.t0 = t0_ms;
}

int rt_trace_on(const RtProf *f) { return f && f->tr.on; }

void rt_trace_add(RtProf *f, int kind, int64_t step, double t0, double t1, const char *fmt, ...) {
  Trace *t = &f->tr;
  if (!t->on || t->oom) return;
  if (t->n == t->cap) {
    int64_t cap = t->cap ? 2 * t->cap : 1024;
    RtEvent *ne = realloc(t->ev, (size_t)cap * sizeof *ne);
    if (!ne) {
      t->oom = 1;
      return;
    }
    t->ev = ne;
    t->cap = cap;
  }
  RtEvent *e = &t->ev[t->n++];
  memset(e, 0, sizeof *e);
  e->ts = (t0 - t->t0) * 1e3;
  e->dur = (t1 - t0) * 1e3;
  e->kind = kind;
  e->step = (int32_t)(step + 1);
  e->chunk = e->mb = -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->name, sizeof e->name, fmt, ap);
  va_end(ap);
}

void rt_trace_unit(RtProf *f, int kind, int64_t step, double t0, double t1, int chunk, int mb) {
  char k = kind == RT_EV_F ? 'F' : kind == RT_EV_B ? 'B' : 'W';
  if (chunk > 0) rt_trace_add(f, kind, step, t0, t1, "%c:%d %d", k, chunk, mb);
  else rt_trace_add(f, kind, step, t0, t1, "%c %d", k, mb);
  Trace *t = &f->tr;
  if (t->on && !t->oom && t->n > 0) {
    t->ev[t->n - 1].chunk = chunk;
    t->ev[t->n - 1].mb = mb;
  }
}

const RtEvent *rt_trace_events(const RtProf *f, int64_t *n, int *oom) {
  *n = f->tr.on ? f->tr.n : 0;
  *oom = f->tr.oom;
  return f->tr.on ? f->tr.ev : NULL;
}
