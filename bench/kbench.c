/* kbench.c - each kernel of a stage's listing alone, on buffers of the listing's sizes, against the
 * state of the caches it may find them in: hot (just run), cold (a 64 MB stream read between
 * runs), and just written by the threads, each the share of every buffer that the kernel's static
 * schedule gives that same thread (own) or another one (other). The ratio of in place (ppr's
 * PPR_PROFILE) to these says what a kernel waits on. Usage (bench/kbench.sh builds and runs it):
 *
 *   kbench LISTING [REPS]
 *
 * LISTING a rank's .prog, read by ppr's own parser (rt_prog_load), its kernels from the .so beside
 * it; each kernel's first launch (in block order) is timed, best of REPS (default 10) runs in each
 * state, on OMP_NUM_THREADS threads. Buffers are zeros (a valid value of every element type: token
 * ids and labels too); a launch's literal scalars are the listing's, its runtime ones (s:NAME) the
 * values below. Kernels that write over their inputs (a softmax, AdamW) run again on what they
 * wrote: their times, not their values, are the point. */
#define _POSIX_C_SOURCE 200809L
#include "rt_prog.h"
#include "rt_util.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLUSH (64 << 20) /* bytes a cold run is preceded by a read of */

static void die(const char *msg, const char *what) {
  fprintf(stderr, "kbench: %s%s%s\n", msg, what ? ": " : "", what ? what : "");
  exit(2);
}

/* A runtime scalar's value for the harness, by RT_S_*: plausible AdamW hyperparameters and bias
 * corrections, the clip, a token scale of 1, and for the int64 ones (RT_S_SEED on) 1. */
static double runtime_scalar(int s) {
  static const double v[RT_S_SEED] = {
      [RT_S_LR] = 1e-3, [RT_S_BETA1] = 0.9, [RT_S_BETA2] = 0.95, [RT_S_EPS] = 1e-8,    [RT_S_WD] = 0.1,
      [RT_S_BC1] = 0.1, [RT_S_BC2] = 0.05,  [RT_S_CLIP] = 1.0,   [RT_S_TOKSCALE] = 1.0};
  return s < RT_S_SEED ? v[s] : 1.0;
}

/* Each thread reads and writes back every buffer's share [t n / T, (t + 1) n / T) of thread `t`
 * (own) or of thread T-1-t (other), as a kernel before this one in a step would have. */
static void write_shares(void **bufs, const int64_t *bytes, int n, bool other) {
#pragma omp parallel
  {
    int t = omp_get_thread_num(), T = omp_get_num_threads(), s = other ? T - 1 - t : t;
    for (int i = 0; i < n; i++) {
      if (!bufs[i]) continue;
      int64_t words = bytes[i] / 4, lo = words * s / T, hi = words * (s + 1) / T;
      volatile uint32_t *w = bufs[i]; /* each element read and stored: its line modified here */
      for (int64_t j = lo; j < hi; j++) w[j] = w[j];
    }
  }
}

/* Kernel in's launch, timed in each state: best[] hot, cold, own, other. */
static void time_launch(void (*fn)(void **), const RtInstr *in, int reps, const unsigned char *flush, double best[4]) {
  void *bufs[RT_MAX_KARGS] = {0}, *args[RT_MAX_KARGS + 1];
  int64_t bytes[RT_MAX_KARGS] = {0};
  union {
    void *ptr;
    float f;
    int64_t i;
  } val[RT_MAX_KARGS];
  for (int k = 0; k < in->nargs; k++) {
    const RtArg *a = &in->args[k];
    switch (a->kind) {
    case RT_A_PTR:
      bytes[k] = a->bytes;
      if (!(val[k].ptr = bufs[k] = calloc(1, (size_t)a->bytes + 64))) die("out of memory", NULL);
      break;
    case RT_A_F32: val[k].f = a->f; break;
    case RT_A_I64: val[k].i = a->i; break;
    case RT_A_SCALAR:
      if (a->scalar < RT_S_SEED) val[k].f = (float)runtime_scalar(a->scalar);
      else val[k].i = (int64_t)runtime_scalar(a->scalar);
      break;
    }
    args[k] = &val[k];
  }
  args[in->nargs] = NULL;
  for (int st = 0; st < 4; st++) {
    best[st] = 1e30;
    for (int r = 0; r < reps + (st == 0); r++) { /* hot: one run first, untimed */
      if (st >= 1) { /* cold, and before the writes: nothing of the buffers left in the caches */
        volatile unsigned sum = 0;
        for (size_t j = 0; j < FLUSH; j += 64) sum += flush[j];
      }
      if (st >= 2) write_shares(bufs, bytes, in->nargs, st == 3);
      double t0 = rt_util_now_s();
      fn(args);
      double dt = rt_util_now_s() - t0;
      if ((st || r) && dt < best[st]) best[st] = dt;
    }
  }
  for (int k = 0; k < in->nargs; k++) free(bufs[k]);
}

int main(int argc, char **argv) {
  if (argc < 2) die("usage: kbench LISTING [REPS]", NULL);
  int reps = argc > 2 ? atoi(argv[2]) : 10;
  if (reps < 1) die("REPS must be at least 1", argv[2]);
  RtProg *p = NULL;
  char err[512];
  if (rt_prog_load(argv[1], &p, err, sizeof err)) die(err, NULL);
  /* the kernels' .so beside the listing, its size and hash checked against the listing as ppr does */
  char dir[4096], so_path[4096];
  const char *slash = strrchr(argv[1], '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - argv[1]) + (slash == argv[1]) : 1, slash ? argv[1] : ".");
  char *so_bytes = rt_kernel_file_read(p, dir, RT_KF_SO, NULL, so_path, sizeof so_path, err, sizeof err);
  if (!so_bytes) die(err, NULL);
  free(so_bytes);
  void *so = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  if (!so) die("cannot load the kernels", dlerror());
  unsigned char *flush = malloc(FLUSH);
  bool *done = calloc((size_t)(p->nkernels ? p->nkernels : 1), sizeof *done);
  if (!flush || !done) die("out of memory", NULL);
  memset(flush, 1, FLUSH);
  double tot[4] = {0};
  printf("%-28s %8s %9s %9s %9s %9s   (µs a call, best of %d; %d threads)\n", "kernel", "MB", "hot", "cold", "own",
         "other", reps, omp_get_max_threads());
  for (int c = 0; c < rt_prog_nchunks(p); c++)
    for (int b = 0; b < RT_NBLK; b++)
      for (int i = 0; i < rt_prog_block(p, c, b)->n; i++) {
        const RtInstr *in = &rt_prog_block(p, c, b)->ins[i];
        if (in->kind != RT_I_KERNEL || done[in->kernel]) continue;
        done[in->kernel] = true;
        const char *name = p->kernels[in->kernel];
        char sym[160];
        snprintf(sym, sizeof sym, "%s__call", name);
        void (*fn)(void **) = (void (*)(void **))dlsym(so, sym);
        if (!fn) die("no such kernel in the .so", sym);
        double best[4], mb = 0;
        for (int k = 0; k < in->nargs; k++)
          if (in->args[k].kind == RT_A_PTR) mb += (double)in->args[k].bytes / 1e6;
        time_launch(fn, in, reps, flush, best);
        printf("%-28s %8.2f %9.2f %9.2f %9.2f %9.2f\n", name, mb, best[0] * 1e6, best[1] * 1e6, best[2] * 1e6,
               best[3] * 1e6);
        for (int st = 0; st < 4; st++) tot[st] += best[st];
      }
  printf("%-28s %8s %9.2f %9.2f %9.2f %9.2f   (each kernel once)\n", "sum", "", tot[0] * 1e6, tot[1] * 1e6,
         tot[2] * 1e6, tot[3] * 1e6);
  free(done);
  free(flush);
  rt_prog_free(p);
  return 0;
}
