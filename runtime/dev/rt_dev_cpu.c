/* rt_dev_cpu.c - the cpu device: the arena in host memory, the stage's C kernels as a shared object (dlopen), GEMMs
 * through OpenBLAS (attention's short products through rt_sgemm). */
#define _GNU_SOURCE /* madvise's MADV_HUGEPAGE; sched_setaffinity */
#include "rt_dev_cpu.h"
#include "rt_dev.h"
#include "rt_sgemm.h"
#include "rt_util.h"

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef PPR_DNNL
#include <dnnl.h>
#include <dnnl_debug.h>
#endif

typedef void (*KernelFn)(void **args);

typedef struct {
  RtDev d;
  unsigned char *arena;
  void *so;
  KernelFn *fn; /* per kernel */
  int nfn;
  int nt;         /* threads for a GEMM: the count OpenBLAS would take (gemm_threads); OpenBLAS then runs one */
  float *wide[3]; /* a bf16 GEMM's A, B, C widened to f32 (cpu_gemm); grown as needed */
  int64_t wide_cap[3];
  float *work; /* rt_sgemm's work, a slice per thread; grown as needed */
  int64_t work_cap;
  bool own; /* f32 GEMMs that rt_sgemm_fits go to it (PPR_CPU_GEMM: auto); else all to OpenBLAS */
#ifdef PPR_DNNL
  dnnl_engine_t eng; /* NULL: oneDNN did not start; bf16 GEMMs widen */
  dnnl_stream_t st;
  struct DnnlPlan *plans;
  int nplans, capplans;
#endif
} Cpu;

#ifdef PPR_DNNL
/* A bf16 GEMM as a oneDNN matmul primitive, made once per shape (key: the GEMM with its offsets
 * zeroed); prim NULL: oneDNN has no bf16 kernel for it on this CPU (PPR_DNNL_TRACE=1 prints its
 * choice for each shape), the GEMM widens. */
typedef struct DnnlPlan {
  RtGemm key;
  dnnl_primitive_t prim;
  dnnl_memory_t mem[3];
} DnnlPlan;

#define DNNL_CHECK(d, call)                                                                                            \
  do {                                                                                                                 \
    dnnl_status_t s_ = (call);                                                                                         \
    if (s_ != dnnl_success) return RT_DEV_FAIL(d, "%s failed: %s", #call, dnnl_status2str(s_));                        \
  } while (0)

/* The memory descriptor of batch row-major rows x cols matrices, leading dimension ld, stride apart,
 * stored transposed (cols x rows) when t. */
static dnnl_status_t dnnl_matrix(dnnl_memory_desc_t *md, int batch, int64_t rows, int64_t cols, int64_t ld,
                                 int64_t stride, int t, PpDType dt) {
  dnnl_data_type_t ty = dt == PP_BF16 ? dnnl_bf16 : dnnl_f32;
  dnnl_dims_t dims = {batch, rows, cols}, strides = {stride, t ? 1 : ld, t ? ld : 1};
  if (batch == 1) { /* 2-D */
    dnnl_dims_t d2 = {rows, cols}, s2 = {t ? 1 : ld, t ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, d2, ty, s2);
  }
  return dnnl_memory_desc_init_by_strides(md, 3, dims, ty, strides);
}

/* g's plan, made if new; NULL with d's error set on failure. */
static DnnlPlan *dnnl_plan(Cpu *c, const RtGemm *g) {
  RtDev *d = &c->d;
  RtGemm key = rt_gemm_key(g, 1); /* alpha and beta are the primitive's attributes */
  for (int i = 0; i < c->nplans; i++)
    if (!memcmp(&c->plans[i].key, &key, sizeof key)) return &c->plans[i];
  if (c->nplans == c->capplans) {
    int cap = c->capplans ? 2 * c->capplans : 64;
    DnnlPlan *np = realloc(c->plans, (size_t)cap * sizeof *np);
    if (!np) {
      RT_DEV_FAIL(d, "out of memory");
      return NULL;
    }
    c->plans = np, c->capplans = cap;
  }
  DnnlPlan *pl = &c->plans[c->nplans];
  memset(pl, 0, sizeof *pl);
  memcpy(&pl->key, &key, sizeof key);
  dnnl_memory_desc_t md[3];
  dnnl_matmul_desc_t mm;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  int ok = dnnl_matrix(&md[0], g->batch, g->m, g->k, g->lda, g->sa, g->ta, g->dt[0]) == dnnl_success &&
           dnnl_matrix(&md[1], g->batch, g->k, g->n, g->ldb, g->sb, g->tb, g->dt[1]) == dnnl_success &&
           dnnl_matrix(&md[2], g->batch, g->m, g->n, g->ldc, g->sc, 0, g->dt[2]) == dnnl_success &&
           dnnl_matmul_desc_init(&mm, &md[0], &md[1], NULL, &md[2]) == dnnl_success &&
           dnnl_primitive_attr_create(&attr) == dnnl_success;
  if (ok && g->alpha != 1.0f) ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &g->alpha) == dnnl_success;
  if (ok && g->beta != 0.0f) /* C = alpha AB + beta C, summed in f32 and rounded once */
    ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, g->beta) == dnnl_success &&
         dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
  /* no implementation: the GEMM widens (pl->prim stays NULL) */
  const char *impl = NULL;
  if (ok && dnnl_primitive_desc_create(&pd, &mm, attr, c->eng, NULL) == dnnl_success &&
      dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
      getenv("PPR_DNNL_TRACE"))
    fprintf(stderr, "onednn: gemm %c %c %d %d %d batch %d: %s\n", g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->m, g->n,
            g->k, g->batch, impl);
  /* not oneDNN's reference loops (ref:...), slower than widening for OpenBLAS; its brgemm kernels
   * (AMX, AVX512-BF16) and its gemm:jit (attention's strided batches: measured a little faster
   * than widening over minimind256's step) it keeps */
  if (pd && impl && strncmp(impl, "ref", 3)) {
    dnnl_status_t s = dnnl_primitive_create(&pl->prim, pd);
    for (int i = 0; i < 3 && s == dnnl_success; i++)
      s = dnnl_memory_create(&pl->mem[i], &md[i], c->eng, DNNL_MEMORY_NONE);
    if (s != dnnl_success) {
      RT_DEV_FAIL(d, "oneDNN: making the matmul of 'gemm %c %c %d %d %d' (batch %d): %s", g->ta ? 'T' : 'N',
                  g->tb ? 'T' : 'N', g->m, g->n, g->k, g->batch, dnnl_status2str(s));
      pl = NULL;
    }
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (pl) c->nplans++;
  return pl;
}

/* g through oneDNN (--onednn; its OpenMP threads are the kernels'): 0 when done, 1 when it cannot
 * take g (the caller widens), -1 on failure. */
static int gemm_dnnl(Cpu *c, const RtGemm *g) {
  /* one type for A and B; a batch is disjoint products (C shared by the batches: widened) */
  if (!c->d.onednn || g->dt[0] != g->dt[1] || (g->batch > 1 && (!g->sa || !g->sb || !g->sc))) return 1;
  if (!c->eng) { /* the first GEMM through oneDNN */
    DNNL_CHECK(&c->d, dnnl_engine_create(&c->eng, dnnl_cpu, 0));
    DNNL_CHECK(&c->d, dnnl_stream_create(&c->st, c->eng, dnnl_stream_default_flags));
  }
  DnnlPlan *pl = dnnl_plan(c, g);
  if (!pl) return -1;
  if (!pl->prim) return 1;
  const int64_t off[3] = {g->a, g->b, g->c};
  for (int i = 0; i < 3; i++) DNNL_CHECK(&c->d, dnnl_memory_set_data_handle(pl->mem[i], c->arena + off[i]));
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, pl->mem[0]}, {DNNL_ARG_WEIGHTS, pl->mem[1]}, {DNNL_ARG_DST, pl->mem[2]}};
  DNNL_CHECK(&c->d, dnnl_primitive_execute(pl->prim, c->st, 3, args));
  DNNL_CHECK(&c->d, dnnl_stream_wait(c->st));
  return 0;
}
#endif

/* The value an args[] entry points to (a pointer variable, a float or an int64). */
typedef union {
  void *ptr;
  float f;
  int64_t i;
} ArgVal;

/* The CPU's best OpenBLAS core for SGEMM, by its instructions; NULL for none better than generic. */
static const char *cpu_core(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return NULL;
}

/* OpenBLAS's cores with AVX-512 SGEMM kernels, and with AVX2 and FMA ones (its names) */
static int core_in(const char *core, const char *const *set) {
  for (; *set; set++)
    if (!strcasecmp(core, *set)) return 1;
  return 0;
}

/* Under OMP_PROC_BIND libgomp has bound this thread to its first place when it started, and a
 * program it runs inherits that place as the whole of the CPUs it may use: libgomp there makes its
 * places of that, and every thread runs on one CPU (minimind256 at two threads as slow as at one).
 * So the CPUs of all the places (those the process was started with, or the user's OMP_PLACES)
 * are this thread's again first; unbound (OMP_PROC_BIND false or unset, no OMP_PLACES), nothing. */
static void unbind_first_thread(void) {
  if (omp_get_proc_bind() == omp_proc_bind_false) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < omp_get_num_places(); i++) {
    int n = omp_get_place_num_procs(i), ids[CPU_SETSIZE];
    if (n < 1 || n > CPU_SETSIZE) continue;
    omp_get_place_proc_ids(i, ids);
    for (int j = 0; j < n; j++)
      if (ids[j] >= 0 && ids[j] < CPU_SETSIZE) CPU_SET(ids[j], &set);
  }
  if (CPU_COUNT(&set) > 0) sched_setaffinity(0, sizeof set, &set); /* on failure: as libgomp left it */
}

void rt_dev_cpu_blas_core(char **argv) {
  static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids", "Zen4", NULL};
  static const char *const avx2[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen4", NULL};
  const char *want = cpu_core(), *have = openblas_get_corename();
  int core = !getenv("OPENBLAS_CORETYPE") && want && have && !core_in(have, !strcmp(want, "SkylakeX") ? avx512 : avx2);
  int timeout = !getenv("OPENBLAS_THREAD_TIMEOUT");
  if (!core && !timeout) return;
  if ((core && setenv("OPENBLAS_CORETYPE", want, 1)) || (timeout && setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1))) return;
  unbind_first_thread();
  execv("/proc/self/exe", argv); /* on failure: on as it is (its threads as libgomp binds them) */
  if (core) unsetenv("OPENBLAS_CORETYPE");
  if (timeout) unsetenv("OPENBLAS_THREAD_TIMEOUT");
}

static int shared_nt; /* the threads rt_dev_cpu_share_cores gave each rank; 0: none */

/* The GEMMs' threads (docs/devices.md): OpenBLAS's count as OpenBLAS takes it (OPENBLAS_NUM_THREADS,
 * GOTO_NUM_THREADS or OMP_NUM_THREADS, the first set to a count; else the CPUs), or the rank's share,
 * at most the CPUs this process may use. Counted here, not asked of OpenBLAS: OpenBLAS counts the
 * CPUs its loading thread may run on, and under OMP_PROC_BIND libgomp has bound that thread to one
 * CPU by then, so OpenBLAS took 1 (every GEMM on one thread: minimind256 at two threads as slow as
 * at one). */
static int gemm_threads(void) {
  static const char *const vars[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"};
  int procs = omp_get_num_procs(), n = shared_nt; /* libgomp's count of the CPUs it started with */
  for (size_t i = 0; n < 1 && i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    n = v ? atoi(v) : 0;
  }
  if (n < 1 || n > procs) n = procs;
  return n > 0 ? n : 1;
}

int rt_dev_cpu_share_cores(int local_ranks) {
  const char *o = getenv("OMP_NUM_THREADS"), *b = getenv("OPENBLAS_NUM_THREADS");
  if (local_ranks < 2 || (o && *o) || (b && *b)) return 0;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int procs = omp_get_num_procs(); /* those this process may run on */
  int n = online > 0 ? (int)(online / local_ranks) : 1;
  if (n < 1) n = 1;
  if (n > procs) n = procs;
  if (n >= omp_get_max_threads()) return 0;
  omp_set_num_threads(n);
  shared_nt = n; /* the GEMMs' (gemm_threads) */
  return n;
}

int rt_dev_cpu_onednn(void) {
#ifdef PPR_DNNL
  return 1;
#else
  return 0;
#endif
}

const char *rt_dev_cpu_blas_name(void) {
  const char *n = openblas_get_corename();
  return n ? n : "?";
}

static int cpu_open(RtDev **out, int index, int local_rank, char *err, size_t errlen) {
  (void)index;
  (void)local_rank;
  const char *gv = getenv("PPR_CPU_GEMM");
  if (gv && *gv && strcmp(gv, "auto") && strcmp(gv, "openblas")) {
    snprintf(err, errlen, "PPR_CPU_GEMM=%s: expected auto (the default: ppr's own GEMM where it is faster) or openblas",
             gv);
    return -1;
  }
  Cpu *c = calloc(1, sizeof *c);
  RT_CHECK_ALLOC(c);
  c->d.ops = &rt_dev_cpu_ops;
  c->own = !(gv && !strcmp(gv, "openblas"));
  c->nt = gemm_threads();
  openblas_set_num_threads(1);    /* the GEMMs' threads are the kernels' OpenMP ones (cpu_gemm) */
  int kt = omp_get_max_threads(); /* the kernels' */
  char gemms[32] = "";
  if (kt != c->nt) snprintf(gemms, sizeof gemms, ", GEMMs on %d", c->nt);
  snprintf(c->d.desc, sizeof c->d.desc, "cpu (OpenBLAS %s, %d thread%s%s)", rt_dev_cpu_blas_name(), kt,
           kt == 1 ? "" : "s", gemms);
  *out = &c->d;
  return 0;
}

static void cpu_close(RtDev *d) {
  Cpu *c = (Cpu *)d;
  /* The kernel object is never dlclose'd: it may have started OpenMP worker threads (libgomp,
   * loaded with it), and unloading their code under them crashes at exit. It stays mapped
   * until the process ends; a second load of the same file reuses it. */
  free(c->fn);
  for (int i = 0; i < 3; i++) free(c->wide[i]);
  free(c->work);
#ifdef PPR_DNNL
  for (int i = 0; i < c->nplans; i++) {
    if (c->plans[i].prim) dnnl_primitive_destroy(c->plans[i].prim);
    for (int k = 0; k < 3; k++)
      if (c->plans[i].mem[k]) dnnl_memory_destroy(c->plans[i].mem[k]);
  }
  free(c->plans);
  if (c->st) dnnl_stream_destroy(c->st);
  if (c->eng) dnnl_engine_destroy(c->eng);
#endif
  free(c->arena);
  free(c);
}

static int cpu_alloc(RtDev *d, int64_t bytes) {
  Cpu *c = (Cpu *)d;
  /* whole 2 MiB pages, asked for as huge pages where the kernel offers them on request (advice
   * only: failure changes nothing): a step streams the arena's activations, gradients and AdamW's
   * moments, and with 4 KiB pages its memory-bound kernels waited on the TLB (minimind256 at one
   * thread: the step 1-3% faster, the norms 10%, the gradient norm 15%; docs/perf.md) */
  const size_t huge = (size_t)2 << 20;
  size_t n = ((size_t)bytes + huge - 1) / huge * huge;
  c->arena = aligned_alloc(huge, n ? n : huge);
  if (!c->arena) return RT_DEV_FAIL(d, "cannot allocate the arena (%lld bytes)", (long long)bytes);
#ifdef MADV_HUGEPAGE
  if (n) madvise(c->arena, n, MADV_HUGEPAGE);
#endif
  memset(c->arena, 0, n);
  d->arena = bytes;
  return 0;
}

static int cpu_zero(RtDev *d, int64_t off, int64_t bytes) {
  memset(((Cpu *)d)->arena + off, 0, (size_t)bytes);
  return 0;
}

static int cpu_write(RtDev *d, int64_t off, const void *src, int64_t bytes) {
  memcpy(((Cpu *)d)->arena + off, src, (size_t)bytes);
  return 0;
}

static int cpu_read(RtDev *d, int64_t off, void *dst, int64_t bytes) {
  memcpy(dst, ((Cpu *)d)->arena + off, (size_t)bytes);
  return 0;
}

static void *cpu_host(RtDev *d, int64_t off) { return ((Cpu *)d)->arena + off; }

static int cpu_load(RtDev *d, const char *dir, const RtProg *p) {
  /* the geometry does not matter here: the C kernels loop over their rows and threads themselves */
  Cpu *c = (Cpu *)d;
  const char *hash = p->kernels_hash;
  int n = p->nkernels;
  char *const *names = p->kernels;
  char path[4096], msg[2048];
  /* its size and hash first: a damaged object would crash the process in dlopen (SIGBUS) */
  char *bytes = rt_kernel_file_read(p, dir, RT_KF_SO, NULL, path, sizeof path, msg, sizeof msg);
  if (!bytes) return RT_DEV_FAIL(d, "%s", msg);
  free(bytes);
  c->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!c->so) {
    const char *e = dlerror();
    return RT_DEV_FAIL(d, "%s: cannot load the kernel object: %s", path, e ? e : "unknown dlopen error");
  }
  const char *h = dlsym(c->so, "ppk_source_hash");
  if (!h) return RT_DEV_FAIL(d, "%s: exports no ppk_source_hash: not a ppc kernel object", path);
  if (strncmp(h, hash, 17) != 0) {
    char found[41];
    size_t k = strnlen(h, 40);
    for (size_t i = 0; i < k; i++) found[i] = (h[i] >= ' ' && h[i] < 127) ? h[i] : '?';
    found[k] = 0;
    return RT_DEV_FAIL(d,
                       "%s: its ppk_source_hash is '%s', the listing expects '%s': the kernels and the listing come "
                       "from different ppc runs",
                       path, found, hash);
  }
  c->fn = calloc((size_t)(n ? n : 1), sizeof *c->fn);
  if (!c->fn) return RT_DEV_FAIL(d, "out of memory");
  c->nfn = n;
  /* every kernel the program calls; all missing ones in one message */
  char missing[2048] = "";
  size_t used = 0;
  int nmissing = 0;
  for (int k = 0; k < n; k++) {
    char sym[256];
    snprintf(sym, sizeof sym, "%s__call", names[k]);
    void *f = dlsym(c->so, sym);
    if (f) {
      memcpy(&c->fn[k], &f, sizeof f);
      continue;
    }
    if (used < sizeof missing)
      used += (size_t)snprintf(missing + used, sizeof missing - used, "%s %s (symbol %s)", nmissing ? "," : "",
                               names[k], sym);
    nmissing++;
  }
  if (nmissing) return RT_DEV_FAIL(d, "%s: no kernel%s called by the listing", path, missing);
  return 0;
}

static int cpu_launch(RtDev *d, int kernel, const RtGeom *g, int nargs, const RtKArg *args) {
  (void)g;
  Cpu *c = (Cpu *)d;
  ArgVal val[RT_MAX_KARGS];
  void *a[RT_MAX_KARGS + 1];
  for (int i = 0; i < nargs; i++) {
    switch (args[i].kind) {
    case RT_KA_PTR: val[i].ptr = c->arena + args[i].off; break;
    case RT_KA_F32: val[i].f = args[i].f; break;
    case RT_KA_I64: val[i].i = args[i].i; break;
    }
    a[i] = &val[i];
  }
  a[nargs] = NULL;
  c->fn[kernel](a);
  return 0;
}

#define TRI_ROWS 64 /* a triangle through OpenBLAS: a product per block of this many rows */

/* Rows [r0, r1) and columns [c0, c1) of product i: through rt_sgemm with work when own (g's triangle
 * there, every k), else through OpenBLAS over the inner indices [k0, k1). */
static void one_part(const RtGemm *g, const float *A, const float *B, float *C, int i, int r0, int r1, int c0, int c1,
                     int k0, int k1, bool own, float *work) {
  float *cc = C + i * g->sc + (int64_t)r0 * g->ldc + c0;
  if (!own && k1 <= k0) { /* no products: C = beta C */
    for (int r = 0; r < r1 - r0; r++)
      for (int j = 0; j < c1 - c0; j++)
        cc[(int64_t)r * g->ldc + j] = g->beta != 0.0f ? g->beta * cc[(int64_t)r * g->ldc + j] : 0.0f;
    return;
  }
  const float *a = A + i * g->sa + (int64_t)r0 * (g->ta ? 1 : g->lda) + (int64_t)k0 * (g->ta ? g->lda : 1);
  const float *b = B + i * g->sb + (int64_t)c0 * (g->tb ? g->ldb : 1) + (int64_t)k0 * (g->tb ? 1 : g->ldb);
  if (own) {
    rt_sgemm(g->ta, g->tb, r1 - r0, c1 - c0, g->k, g->alpha, a, g->lda, b, g->ldb, g->beta, cc, g->ldc, g->tri, r0, c0,
             work);
    return;
  }
  cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, r1 - r0, c1 - c0,
              k1 - k0, g->alpha, a, g->lda, b, g->ldb, g->beta, cc, g->ldc);
}

/* Products [i0, i1) of the batch, C's rows [r0, r1) and columns [c0, c1) of each, in batch order;
 * through rt_sgemm with work (its floats for one product) when own, else OpenBLAS: a triangle there
 * a product per TRI_ROWS rows, over the columns (out) or inner indices (lower, upper) those rows keep. */
static void gemm_part(const RtGemm *g, const float *A, const float *B, float *C, int i0, int i1, int r0, int r1, int c0,
                      int c1, bool own, float *work) {
  for (int i = i0; i < i1; i++) {
    if (own || g->tri == PP_TRI_NONE) {
      one_part(g, A, B, C, i, r0, r1, c0, c1, 0, g->k, own, work);
      continue;
    }
    for (int r = r0; r < r1; r += TRI_ROWS) {
      int re = r1 - r < TRI_ROWS ? r1 : r + TRI_ROWS;
      switch (g->tri) {
      case PP_TRI_NONE: break;
      case PP_TRI_OUT: /* columns j <= the block's last row */
        if (re > c0) one_part(g, A, B, C, i, r, re, c0, re < c1 ? re : c1, 0, g->k, false, NULL);
        break;
      case PP_TRI_LOWER: one_part(g, A, B, C, i, r, re, c0, c1, 0, re < g->k ? re : g->k, false, NULL); break;
      case PP_TRI_UPPER: one_part(g, A, B, C, i, r, re, c0, c1, r < g->k ? r : g->k, g->k, false, NULL); break;
      }
    }
  }
}

#define GEMM_SPLIT_MIN (1 << 18) /* m*n*k*batch below which one thread computes the whole GEMM */

/* Operand k (A, B, C) of a bf16 GEMM as f32: its n spanned elements widened (exactly) into a buffer
 * of the same layout (only the buffer when !copy: a C that BETA 0 overwrites). NULL when out of
 * memory. */
static float *widen(Cpu *c, int k, int64_t off, int64_t n, bool copy) {
  if (n > c->wide_cap[k]) {
    float *w = realloc(c->wide[k], (size_t)n * sizeof *w);
    if (!w) return NULL;
    c->wide[k] = w, c->wide_cap[k] = n;
  }
  const uint16_t *h = (const uint16_t *)(const void *)(c->arena + off);
  float *w = c->wide[k];
  if (!copy) return w;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; i++) w[i] = pp_f32_from_bf16(h[i]);
  return w;
}

static int gemm_f32(Cpu *c, const RtGemm *g, const float *A, const float *B, float *C);

/* A GEMM with bf16 operands: each widened to f32, the f32 GEMM (products and sums in f32, as a
 * bf16 GEMM accumulates), then C's m x n results of each product rounded to bf16 once. */
static int gemm_mixed(Cpu *c, const RtGemm *g) {
  int64_t n[3];
  rt_gemm_spans(g, n);
  const float *A = g->dt[0] == PP_BF16 ? widen(c, 0, g->a, n[0], true) : (const float *)(void *)(c->arena + g->a);
  const float *B = g->dt[1] == PP_BF16 ? widen(c, 1, g->b, n[1], true) : (const float *)(void *)(c->arena + g->b);
  float *C = g->dt[2] != PP_BF16 ? (float *)(void *)(c->arena + g->c) : widen(c, 2, g->c, n[2], g->beta != 0.0f);
  if (!A || !B || !C) return RT_DEV_FAIL(&c->d, "out of memory widening a bf16 GEMM's operands");
  gemm_f32(c, g, A, B, C);
  if (g->dt[2] == PP_BF16) {
    uint16_t *h = (uint16_t *)(void *)(c->arena + g->c);
    int64_t nb = g->sc ? g->batch : 1;
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)g->m * g->n * nb >= (1 << 16))
    for (int64_t b = 0; b < nb; b++)
      for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
          if (g->tri == PP_TRI_OUT && j > i) continue; /* not wanted: perhaps never written */
          int64_t at = b * g->sc + i * g->ldc + j;
          h[at] = pp_bf16_from_f32(C[at]);
        }
  }
  return 0;
}

static int cpu_gemm(RtDev *d, const RtGemm *g) {
  Cpu *c = (Cpu *)d;
  if (g->dt[0] != PP_F32 || g->dt[1] != PP_F32 || g->dt[2] != PP_F32) {
#ifdef PPR_DNNL
    int rc = gemm_dnnl(c, g);
    if (rc <= 0) return rc;
#endif
    return gemm_mixed(c, g);
  }
#ifdef PPR_DNNL
  int rc = gemm_dnnl(c, g); /* --onednn: its f32 kernels too (brgemm on AVX-512) */
  if (rc <= 0) return rc;
#endif
  return gemm_f32(c, g, (const float *)(void *)(c->arena + g->a), (const float *)(void *)(c->arena + g->b),
                  (float *)(void *)(c->arena + g->c));
}

/* The f32 GEMM over A, B and C (the arena's, or widened copies of the same layout), on one thread
 * pool: OpenBLAS runs single-threaded (cpu_open) and ppr shares each GEMM over the kernels' OpenMP
 * threads: a batch of products into distinct Cs a product per thread, otherwise C's rows (or
 * columns, when wider) in blocks of 16, or on rt_sgemm with op(A) = A its columns in blocks of 32
 * (when there is one a thread), each thread computing its block of every product in batch
 * order (a batch adding into one C adds in the same order); on rt_sgemm the threads as a team
 * sharing the packing and op(B)'s panels (rt_sgemm_team) where op(A) = A^T (a weight's gradient),
 * or where op(A) = A and op(B) is made in one group of panels: each thread then computes the
 * rows of C (the tokens) that the kernels give it, the rows it wrote or will read (split by
 * columns, the kernel after read half its rows from the other core's cache, 2-3 times slower
 * where the host placed the two CPUs apart: minimind256 at two threads 76.9 -> 75.0 ms a step,
 * its kernels 8.3 -> 7.7 ms; in a spell without that cost, the GEMMs still 1 ms faster); a wider op(B) is
 * still split by columns, each thread's panels its own: minimind's products ran 20 ms a step
 * slower by rows). The products rt_sgemm_fits takes (attention's, the linear layers' and the
 * narrow weights' gradients; PPR_CPU_GEMM=openblas: none) go to rt_sgemm, the rest to OpenBLAS.
 * Each element of C is computed as one thread of either computes it, so the values do not depend
 * on the threads (OpenBLAS's AVX-512 kernels; its AVX2 ones round a part of C otherwise,
 * docs/devices.md). */
static void team_sync(void *arg) {
  (void)arg;
#pragma omp barrier
}

static int gemm_f32(Cpu *c, const RtGemm *g, const float *A, const float *B, float *C) {
  int nt = c->nt;
  bool split = nt > 1 && (int64_t)g->m * g->n * g->k * g->batch >= GEMM_SPLIT_MIN;
  bool by_batch = g->sc != 0 && g->batch >= nt;
  bool own = c->own && rt_sgemm_fits(g->ta, g->m, g->n, g->k, g->lda);
  bool team = split && !by_batch && own && g->tri == PP_TRI_NONE && (g->ta || rt_sgemm_one_group(g->n, g->k));
  int64_t work = own ? (rt_sgemm_work(g->ta, g->m, g->n, g->k, g->lda) + 15) / 16 * 16 : 0; /* 64-byte slices */
  int slices = team ? 1 : nt;                                                               /* a team shares one */
  if (own && work * slices > c->work_cap) {
    free(c->work);
    c->work = aligned_alloc(64, (size_t)(work * slices) * sizeof(float));
    c->work_cap = c->work ? work * slices : 0;
    if (!c->work)
      return RT_DEV_FAIL(&c->d, "out of memory for a GEMM's work (%lld floats)", (long long)(work * slices));
  }
  if (!split) {
    gemm_part(g, A, B, C, 0, g->batch, 0, g->m, 0, g->n, own, c->work);
    return 0;
  }
  if (team) { /* every thread on every product, in batch order */
#pragma omp parallel num_threads(nt)
    {
      RtSgemmTeam tm = {omp_get_thread_num(), omp_get_num_threads(), team_sync, NULL};
      for (int i = 0; i < g->batch; i++)
        rt_sgemm_team(g->ta, g->tb, g->m, g->n, g->k, g->alpha, A + i * g->sa, g->lda, B + i * g->sb, g->ldb, g->beta,
                      C + i * g->sc, g->ldc, c->work, &tm);
    }
    return 0;
  }
  /* rt_sgemm reads an untransposed A where it lies and makes op(B)'s panels: columns of 32 a thread
   * share nothing (by rows, each thread would make every panel) */
  bool panels = own && !g->ta;
  bool by_rows = panels ? (g->n + 31) / 32 < nt : g->m >= g->n;
  int size = !by_rows && panels ? 32 : 16; /* rows or columns a unit */
  int units = by_batch ? g->batch : ((by_rows ? g->m : g->n) + size - 1) / size;
  if (units < nt) nt = units;
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num(), w = omp_get_num_threads();
    int u0 = rt_util_share(units, t, w), u1 = rt_util_share(units, t + 1, w);
    float *ws = own ? c->work + t * work : NULL;
    if (by_batch) gemm_part(g, A, B, C, u0, u1, 0, g->m, 0, g->n, own, ws);
    else if (by_rows)
      gemm_part(g, A, B, C, 0, g->batch, u0 * size, u1 * size < g->m ? u1 * size : g->m, 0, g->n, own, ws);
    else gemm_part(g, A, B, C, 0, g->batch, 0, g->m, u0 * size, u1 * size < g->n ? u1 * size : g->n, own, ws);
  }
  return 0;
}

static int cpu_sync(RtDev *d) {
  (void)d;
  return 0;
}

static int cpu_query(RtDev *d) {
  (void)d;
  return 0;
}

static void *cpu_native(RtDev *d, int64_t off, void **stream) {
  (void)d, (void)off;
  *stream = NULL;
  return NULL;
}

const RtDevOps rt_dev_cpu_ops = {
    .kind = RT_DEV_CPU,
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .alloc = cpu_alloc,
    .zero = cpu_zero,
    .write = cpu_write,
    .read = cpu_read,
    .host = cpu_host,
    .load = cpu_load,
    .launch = cpu_launch,
    .gemm = cpu_gemm,
    .sync = cpu_sync,
    .query = cpu_query,
    .native = cpu_native,
};
