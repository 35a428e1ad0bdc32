/* rt_dev_opencl.c - the opencl device: the arena as one cl_mem, the stage's OpenCL C kernels built from source at load,
 * GEMMs through CLBlast. */
#define CL_TARGET_OPENCL_VERSION 120
#include "rt_dev.h"
#include "rt_pocl_cache.h"

#include <CL/cl.h>
#include <clblast_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 64

typedef struct {
  RtDev d;
  cl_device_id dev;
  int pocl; /* the platform is PoCL: its kernel cache is checked at open, recorded at close */
  cl_context ctx;
  cl_command_queue q;
  cl_mem arena;
  cl_program prog;
  cl_kernel *k; /* per kernel */
  int nk;
  cl_kernel widen, narrow; /* the prelude's ppk_widen_bf16, ppk_narrow_bf16: a bf16 GEMM's conversions */
  cl_mem wide[3];          /* a bf16 GEMM's A, B, C as floats; grown as needed */
  size_t wide_cap[3];
  cl_ulong global_mem, max_alloc, local_mem;
  size_t max_wg;
} Cl;

/* ---- errors: every OpenCL and CLBlast call is checked, its name and the code's printed --------- */

// clang-format off
#define C(x) {x, #x},
static const struct { cl_int code; const char *name; } cl_errors[] = {
  C(CL_DEVICE_NOT_FOUND) C(CL_DEVICE_NOT_AVAILABLE) C(CL_COMPILER_NOT_AVAILABLE)
  C(CL_MEM_OBJECT_ALLOCATION_FAILURE) C(CL_OUT_OF_RESOURCES) C(CL_OUT_OF_HOST_MEMORY)
  C(CL_BUILD_PROGRAM_FAILURE) C(CL_INVALID_VALUE) C(CL_INVALID_DEVICE_TYPE)
  C(CL_INVALID_PLATFORM) C(CL_INVALID_DEVICE) C(CL_INVALID_CONTEXT)
  C(CL_INVALID_COMMAND_QUEUE) C(CL_INVALID_MEM_OBJECT) C(CL_INVALID_BUILD_OPTIONS)
  C(CL_INVALID_PROGRAM) C(CL_INVALID_PROGRAM_EXECUTABLE) C(CL_INVALID_KERNEL_NAME)
  C(CL_INVALID_KERNEL) C(CL_INVALID_ARG_INDEX) C(CL_INVALID_ARG_VALUE)
  C(CL_INVALID_ARG_SIZE) C(CL_INVALID_KERNEL_ARGS) C(CL_INVALID_WORK_DIMENSION)
  C(CL_INVALID_WORK_GROUP_SIZE) C(CL_INVALID_WORK_ITEM_SIZE) C(CL_INVALID_GLOBAL_OFFSET)
  C(CL_INVALID_OPERATION) C(CL_INVALID_BUFFER_SIZE) C(CL_INVALID_GLOBAL_WORK_SIZE)
  C(CL_MISALIGNED_SUB_BUFFER_OFFSET) C(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
  {-1001, "CL_PLATFORM_NOT_FOUND_KHR"},
};
#undef C
// clang-format on

static const char *cl_name(cl_int rc) {
  for (size_t i = 0; i < sizeof cl_errors / sizeof *cl_errors; i++)
    if (cl_errors[i].code == rc) return cl_errors[i].name;
  return "an unknown OpenCL error";
}

#define CL_CHECK(d, call)                                                                                              \
  do {                                                                                                                 \
    cl_int rc_ = (call);                                                                                               \
    if (rc_ != CL_SUCCESS) return RT_DEV_FAIL(d, "%s failed: %s (%d)", #call, cl_name(rc_), (int)rc_);                 \
  } while (0)

static const char *blast_name(CLBlastStatusCode rc) {
  switch ((int)rc) {
  case CLBlastNotImplemented: return "not implemented";
  case CLBlastInvalidMatrixA: return "matrix A is not a valid buffer";
  case CLBlastInvalidMatrixB: return "matrix B is not a valid buffer";
  case CLBlastInvalidMatrixC: return "matrix C is not a valid buffer";
  case CLBlastInvalidDimension: return "M, N and K must be positive";
  case CLBlastInvalidLeadDimA: return "LDA is smaller than A's rows";
  case CLBlastInvalidLeadDimB: return "LDB is smaller than B's rows";
  case CLBlastInvalidLeadDimC: return "LDC is smaller than C's rows";
  case CLBlastInsufficientMemoryA: return "A's buffer is too small";
  case CLBlastInsufficientMemoryB: return "B's buffer is too small";
  case CLBlastInsufficientMemoryC: return "C's buffer is too small";
  case CLBlastInsufficientMemoryTemp: return "the temporary buffer is too small";
  case CLBlastInvalidBatchCount: return "the batch count must be positive";
  case CLBlastInvalidLocalMemUsage: return "not enough local memory on the device";
  case CLBlastDatabaseError: return "no entry for the device in CLBlast's database";
  case CLBlastUnknownError: return "an unknown error";
  case CLBlastUnexpectedError: return "an unexpected error";
  default: return rc > -1000 ? cl_name((cl_int)rc) : "an unknown CLBlast status";
  }
}

/* A failed GEMM names the call and its operands as the listing wrote them. */
#define BLAST_CHECK(d, g, call)                                                                                        \
  do {                                                                                                                 \
    CLBlastStatusCode rc_ = (call);                                                                                    \
    if (rc_ != CLBlastSuccess)                                                                                         \
      return RT_DEV_FAIL(                                                                                              \
          d, "%s failed for 'gemm %c %c %d %d %d %g @%lld %d %lld @%lld %d %lld %g @%lld %d %lld %d': %s (%d)", #call, \
          (g)->ta ? 'T' : 'N', (g)->tb ? 'T' : 'N', (g)->m, (g)->n, (g)->k, (double)(g)->alpha, (long long)(g)->a,     \
          (g)->lda, (long long)(g)->sa, (long long)(g)->b, (g)->ldb, (long long)(g)->sb, (double)(g)->beta,            \
          (long long)(g)->c, (g)->ldc, (long long)(g)->sc, (g)->batch, blast_name(rc_), (int)rc_);                     \
  } while (0)

/* ---- the device ---------------------------------------------------------------------------- */

static void info_str(cl_device_id dev, cl_device_info what, char *buf, size_t n) {
  buf[0] = 0;
  if (clGetDeviceInfo(dev, what, n, buf, NULL) != CL_SUCCESS) snprintf(buf, n, "?");
  buf[n - 1] = 0;
}

static int cl_open(RtDev **out, int index, int local_rank, char *err, size_t errlen) {
  (void)local_rank; /* OpenCL: the first device unless --device opencl:N */
  cl_uint np = 0;
  cl_platform_id plats[16];
  cl_int rc = clGetPlatformIDs(16, plats, &np);
  if (rc == -1001 /* CL_PLATFORM_NOT_FOUND_KHR: the ICD loader found no driver */ || (rc == CL_SUCCESS && np == 0))
    return rt_fail_at(err, errlen, __FILE__, __LINE__,
                      "--device opencl: no OpenCL platform is installed (an ICD under /etc/OpenCL/vendors; on the "
                      "CPU: Debian's pocl-opencl-icd)");
  if (rc != CL_SUCCESS)
    return rt_fail_at(err, errlen, __FILE__, __LINE__, "--device opencl: clGetPlatformIDs failed: %s (%d)", cl_name(rc),
                      (int)rc);
  if (np > 16) np = 16;
  /* every device of every platform, in order: opencl:N is the N-th */
  cl_device_id devs[MAX_DEVICES];
  cl_platform_id dplat[MAX_DEVICES];
  int nd = 0;
  for (cl_uint p = 0; p < np && nd < MAX_DEVICES; p++) {
    cl_uint n = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, (cl_uint)(MAX_DEVICES - nd), devs + nd, &n) != CL_SUCCESS)
      continue;
    for (cl_uint i = 0; i < n && nd < MAX_DEVICES; i++) dplat[nd++] = plats[p];
  }
  if (nd == 0)
    return rt_fail_at(err, errlen, __FILE__, __LINE__, "--device opencl: the OpenCL platforms have no device");
  int want = index < 0 ? 0 : index;
  if (want >= nd)
    return rt_fail_at(err, errlen, __FILE__, __LINE__, "--device opencl:%d: there %s %d OpenCL device%s (opencl:0..%d)",
                      want, nd == 1 ? "is" : "are", nd, nd == 1 ? "" : "s", nd - 1);
  Cl *c = calloc(1, sizeof *c);
  RT_CHECK_ALLOC(c);
  c->d.ops = &rt_dev_opencl_ops;
  c->dev = devs[want];
  char pname[128], dname[128];
  if (clGetPlatformInfo(dplat[want], CL_PLATFORM_NAME, sizeof pname, pname, NULL) != CL_SUCCESS)
    snprintf(pname, sizeof pname, "?");
  pname[sizeof pname - 1] = 0;
  info_str(c->dev, CL_DEVICE_NAME, dname, sizeof dname);
  clGetDeviceInfo(c->dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof c->global_mem, &c->global_mem, NULL);
  clGetDeviceInfo(c->dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof c->max_alloc, &c->max_alloc, NULL);
  clGetDeviceInfo(c->dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof c->local_mem, &c->local_mem, NULL);
  clGetDeviceInfo(c->dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof c->max_wg, &c->max_wg, NULL);
  snprintf(c->d.desc, sizeof c->d.desc, "opencl:%d (%.100s: %.100s, %.1f GiB)", want, pname, dname,
           (double)c->global_mem / (1 << 30));
  c->pocl = strstr(pname, "Portable Computing Language") != NULL;
  char note[4600];
  if (c->pocl && rt_pocl_cache_check(note, sizeof note)) fprintf(stderr, "ppr: note: %s\n", note);
  *out = &c->d;
  cl_int e = CL_SUCCESS;
  c->ctx = clCreateContext(NULL, 1, &c->dev, NULL, NULL, &e);
  if (e != CL_SUCCESS) {
    RT_DEV_FAIL(&c->d, "clCreateContext failed: %s (%d)", cl_name(e), (int)e);
    goto fail;
  }
  c->q = clCreateCommandQueue(c->ctx, c->dev, 0, &e);
  if (e != CL_SUCCESS) {
    RT_DEV_FAIL(&c->d, "clCreateCommandQueue failed: %s (%d)", cl_name(e), (int)e);
    goto fail;
  }
  return 0;
fail:
  snprintf(err, errlen, "%s", c->d.err);
  rt_dev_opencl_ops.close(&c->d);
  *out = NULL;
  return -1;
}

static void cl_close(RtDev *d) {
  Cl *c = (Cl *)d;
  if (c->q) clFinish(c->q);
  for (int i = 0; i < c->nk; i++)
    if (c->k[i]) clReleaseKernel(c->k[i]);
  free(c->k);
  if (c->widen) clReleaseKernel(c->widen);
  if (c->narrow) clReleaseKernel(c->narrow);
  for (int i = 0; i < 3; i++)
    if (c->wide[i]) clReleaseMemObject(c->wide[i]);
  if (c->prog) clReleaseProgram(c->prog);
  if (c->arena) clReleaseMemObject(c->arena);
  if (c->q) clReleaseCommandQueue(c->q);
  if (c->ctx) clReleaseContext(c->ctx);
  if (c->pocl) rt_pocl_cache_record(); /* what PoCL built for this run, for the next check */
  free(c);
}

static int cl_alloc(RtDev *d, int64_t bytes) {
  Cl *c = (Cl *)d;
  size_t n = (size_t)((bytes + 63) / 64 * 64);
  if (n > c->max_alloc || n > c->global_mem)
    return RT_DEV_FAIL(d,
                       "the arena needs %lld bytes; the device has %llu bytes and allocates at most %llu at once "
                       "(CL_DEVICE_MAX_MEM_ALLOC_SIZE%s)",
                       (long long)bytes, (unsigned long long)c->global_mem, (unsigned long long)c->max_alloc,
                       strstr(d->desc, "Portable Computing Language") ? "; PoCL: POCL_MEMORY_LIMIT=GiB raises it" : "");
  cl_int e = CL_SUCCESS;
  c->arena = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, n ? n : 64, NULL, &e);
  if (e != CL_SUCCESS)
    return RT_DEV_FAIL(d, "clCreateBuffer of the arena (%lld bytes) failed: %s (%d)", (long long)bytes, cl_name(e),
                       (int)e);
  const float zero = 0.0f;
  CL_CHECK(d, clEnqueueFillBuffer(c->q, c->arena, &zero, sizeof zero, 0, n, 0, NULL, NULL));
  CL_CHECK(d, clFinish(c->q)); /* an allocation may fail only when first used */
  d->arena = bytes;
  return 0;
}

static int cl_zero(RtDev *d, int64_t off, int64_t bytes) {
  Cl *c = (Cl *)d;
  const float zero = 0.0f;
  CL_CHECK(d, clEnqueueFillBuffer(c->q, c->arena, &zero, sizeof zero, (size_t)off, (size_t)bytes, 0, NULL, NULL));
  return 0;
}

static int cl_write(RtDev *d, int64_t off, const void *src, int64_t bytes) {
  Cl *c = (Cl *)d;
  CL_CHECK(d, clEnqueueWriteBuffer(c->q, c->arena, CL_TRUE, (size_t)off, (size_t)bytes, src, 0, NULL, NULL));
  return 0;
}

static int cl_read(RtDev *d, int64_t off, void *dst, int64_t bytes) {
  Cl *c = (Cl *)d;
  CL_CHECK(d, clEnqueueReadBuffer(c->q, c->arena, CL_TRUE, (size_t)off, (size_t)bytes, dst, 0, NULL, NULL));
  return 0;
}

static void *cl_host(RtDev *d, int64_t off) {
  (void)d;
  (void)off;
  return NULL;
}

static int cl_load(RtDev *d, const char *dir, const RtProg *p) {
  Cl *c = (Cl *)d;
  const char *hash = p->kernels_hash;
  int n = p->nkernels;
  char *const *names = p->kernels;
  const RtGeom *geoms = p->kgeom;
  size_t len = 0;
  char path[4096], msg[2048];
  char *src =
      rt_kernel_file_read(p, dir, RT_KF_CL, &len, path, sizeof path, msg, sizeof msg); /* size and hash checked */
  if (!src) return RT_DEV_FAIL(d, "%s", msg);
  char want[64];
  snprintf(want, sizeof want, "/* ppk_source_hash %s */\n", hash);
  if (strncmp(src, want, strlen(want))) {
    free(src);
    return RT_DEV_FAIL(d,
                       "%s: its first line is not '/* ppk_source_hash %s */': the kernels and the listing come from "
                       "different ppc runs",
                       path, hash);
  }
  cl_int e = CL_SUCCESS;
  const char *srcs[1] = {src};
  c->prog = clCreateProgramWithSource(c->ctx, 1, srcs, &len, &e);
  free(src);
  if (e != CL_SUCCESS) return RT_DEV_FAIL(d, "clCreateProgramWithSource(%s) failed: %s (%d)", path, cl_name(e), (int)e);
  e = clBuildProgram(c->prog, 1, &c->dev, "-cl-std=CL1.2", NULL, NULL);
  if (e != CL_SUCCESS) {
    size_t ln = 0;
    clGetProgramBuildInfo(c->prog, c->dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &ln);
    char *log = malloc(ln + 1);
    if (log && clGetProgramBuildInfo(c->prog, c->dev, CL_PROGRAM_BUILD_LOG, ln, log, NULL) == CL_SUCCESS) log[ln] = 0;
    else if (log) log[0] = 0;
    RT_DEV_FAIL(d, "%s: building the kernels failed: %s (%d); the build log:\n%.2800s", path, cl_name(e), (int)e,
                log ? log : "(out of memory)");
    free(log);
    return -1;
  }
  c->widen = clCreateKernel(c->prog, "ppk_widen_bf16", &e);
  if (e == CL_SUCCESS) c->narrow = clCreateKernel(c->prog, "ppk_narrow_bf16", &e);
  if (e != CL_SUCCESS)
    return RT_DEV_FAIL(d, "%s: no ppk_widen_bf16/ppk_narrow_bf16 (the prelude's; clCreateKernel: %s)", path,
                       cl_name(e));
  c->k = calloc((size_t)(n ? n : 1), sizeof *c->k);
  if (!c->k) return RT_DEV_FAIL(d, "out of memory");
  c->nk = n;
  for (int i = 0; i < n; i++) {
    c->k[i] = clCreateKernel(c->prog, names[i], &e);
    if (e != CL_SUCCESS)
      return RT_DEV_FAIL(d, "%s: no kernel %s called by the listing (clCreateKernel: %s)", path, names[i], cl_name(e));
    size_t kwg = 0;
    CL_CHECK(d, clGetKernelWorkGroupInfo(c->k[i], c->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg, NULL));
    if ((size_t)geoms[i].block > kwg)
      return RT_DEV_FAIL(d, "kernel %s: blocks of %d threads, the device runs it with at most %zu", names[i],
                         geoms[i].block, kwg);
    if ((cl_ulong)geoms[i].local > c->local_mem)
      return RT_DEV_FAIL(d, "kernel %s: %lld bytes of local memory, the device has %llu", names[i],
                         (long long)geoms[i].local, (unsigned long long)c->local_mem);
  }
  return 0;
}

static int cl_launch(RtDev *d, int kernel, const RtGeom *g, int nargs, const RtKArg *args) {
  Cl *c = (Cl *)d;
  cl_kernel k = c->k[kernel];
  CL_CHECK(d, clSetKernelArg(k, 0, sizeof c->arena, &c->arena));
  for (int i = 0; i < nargs; i++) {
    cl_long v;
    switch (args[i].kind) {
    case RT_KA_PTR:
    case RT_KA_I64:
      v = args[i].kind == RT_KA_PTR ? args[i].off : args[i].i;
      CL_CHECK(d, clSetKernelArg(k, (cl_uint)i + 1, sizeof v, &v));
      break;
    case RT_KA_F32: CL_CHECK(d, clSetKernelArg(k, (cl_uint)i + 1, sizeof(float), &args[i].f)); break;
    }
  }
  size_t global = (size_t)g->grid * (size_t)g->block, local = (size_t)g->block;
  CL_CHECK(d, clEnqueueNDRangeKernel(c->q, k, 1, NULL, &global, &local, 0, NULL, NULL));
  return 0;
}

static int launch_1d(RtDev *d, cl_kernel k, int64_t n) {
  Cl *c = (Cl *)d;
  size_t local = 256, groups = (size_t)((n + 255) / 256);
  if (groups > 4096) groups = 4096; /* the kernels stride over the rest */
  size_t global = groups * local;
  CL_CHECK(d, clEnqueueNDRangeKernel(c->q, k, 1, NULL, &global, &local, 0, NULL, NULL));
  return 0;
}

/* Operand k's n elements at arena byte off, widened into c->wide[k]. */
static int widen(RtDev *d, int k, int64_t off, int64_t n) {
  Cl *c = (Cl *)d;
  size_t bytes = (size_t)n * sizeof(float);
  if (bytes > c->wide_cap[k]) {
    if (c->wide[k]) clReleaseMemObject(c->wide[k]);
    c->wide_cap[k] = 0;
    cl_int e = CL_SUCCESS;
    c->wide[k] = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, bytes, NULL, &e);
    if (e != CL_SUCCESS)
      return RT_DEV_FAIL(d, "clCreateBuffer(%zu bytes) for a bf16 GEMM's operand failed: %s (%d)", bytes, cl_name(e),
                         (int)e);
    c->wide_cap[k] = bytes;
  }
  cl_long o = off, cnt = n;
  CL_CHECK(d, clSetKernelArg(c->widen, 0, sizeof c->arena, &c->arena));
  CL_CHECK(d, clSetKernelArg(c->widen, 1, sizeof o, &o));
  CL_CHECK(d, clSetKernelArg(c->widen, 2, sizeof c->wide[k], &c->wide[k]));
  CL_CHECK(d, clSetKernelArg(c->widen, 3, sizeof cnt, &cnt));
  return launch_1d(d, c->widen, n);
}

static int sgemm(RtDev *d, const RtGemm *g, cl_mem a, size_t ao, cl_mem b, size_t bo, cl_mem cm, size_t co);

/* A GEMM with bf16 operands: each widened to floats on the device, CLBlast's SGEMM over them, C's
 * results rounded back to bf16 once; the same arithmetic as the cpu device's. */
static int gemm_mixed(RtDev *d, const RtGemm *g) {
  Cl *c = (Cl *)d;
  const int64_t off[3] = {g->a, g->b, g->c};
  int64_t n[3];
  rt_gemm_spans(g, n);
  cl_mem m[3];
  size_t o[3];
  for (int k = 0; k < 3; k++) {
    if (g->dt[k] == PP_BF16) {
      if (widen(d, k, off[k], n[k])) return -1;
      m[k] = c->wide[k], o[k] = 0;
    } else {
      m[k] = c->arena, o[k] = (size_t)(off[k] / 4);
    }
  }
  if (sgemm(d, g, m[0], o[0], m[1], o[1], m[2], o[2])) return -1;
  if (g->dt[2] != PP_BF16) return 0;
  cl_long a0 = g->c, mm = g->m, nn = g->n, ld = g->ldc, st = g->sc, nb = g->sc ? g->batch : 1;
  CL_CHECK(d, clSetKernelArg(c->narrow, 0, sizeof c->arena, &c->arena));
  CL_CHECK(d, clSetKernelArg(c->narrow, 1, sizeof a0, &a0));
  CL_CHECK(d, clSetKernelArg(c->narrow, 2, sizeof c->wide[2], &c->wide[2]));
  CL_CHECK(d, clSetKernelArg(c->narrow, 3, sizeof mm, &mm));
  CL_CHECK(d, clSetKernelArg(c->narrow, 4, sizeof nn, &nn));
  CL_CHECK(d, clSetKernelArg(c->narrow, 5, sizeof ld, &ld));
  CL_CHECK(d, clSetKernelArg(c->narrow, 6, sizeof st, &st));
  CL_CHECK(d, clSetKernelArg(c->narrow, 7, sizeof nb, &nb));
  return launch_1d(d, c->narrow, nb * mm * nn);
}

static int cl_gemm(RtDev *d, const RtGemm *g) {
  Cl *c = (Cl *)d;
  if (g->dt[0] != PP_F32 || g->dt[1] != PP_F32 || g->dt[2] != PP_F32) return gemm_mixed(d, g);
  return sgemm(d, g, c->arena, (size_t)(g->a / 4), c->arena, (size_t)(g->b / 4), c->arena, (size_t)(g->c / 4));
}

/* CLBlast's SGEMM of g over float buffers a, b and cm from element offsets ao, bo and co. */
static int sgemm(RtDev *d, const RtGemm *g, cl_mem a, size_t ao, cl_mem b, size_t bo, cl_mem cm, size_t co) {
  Cl *c = (Cl *)d;
  CLBlastTranspose ta = g->ta ? CLBlastTransposeYes : CLBlastTransposeNo,
                   tb = g->tb ? CLBlastTransposeYes : CLBlastTransposeNo;
  if (g->batch == 1 || g->sc == 0) /* C shared by the batches: they add into it one after another */
    for (int i = 0; i < g->batch; i++)
      BLAST_CHECK(d, g,
                  CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, (size_t)g->m, (size_t)g->n, (size_t)g->k, g->alpha, a,
                               ao + (size_t)(i * g->sa), (size_t)g->lda, b, bo + (size_t)(i * g->sb), (size_t)g->ldb,
                               g->beta, cm, co, (size_t)g->ldc, &c->q, NULL));
  else
    BLAST_CHECK(d, g,
                CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, (size_t)g->m, (size_t)g->n, (size_t)g->k,
                                           g->alpha, a, ao, (size_t)g->lda, (size_t)g->sa, b, bo, (size_t)g->ldb,
                                           (size_t)g->sb, g->beta, cm, co, (size_t)g->ldc, (size_t)g->sc,
                                           (size_t)g->batch, &c->q, NULL));
  return 0;
}

static int cl_sync(RtDev *d) {
  CL_CHECK(d, clFinish(((Cl *)d)->q));
  return 0;
}

static int cl_query(RtDev *d) { return cl_sync(d); } /* an in-order queue: done once clFinish returns */

static void *cl_native(RtDev *d, int64_t off, void **stream) {
  (void)d, (void)off;
  *stream = NULL;
  return NULL;
}

const RtDevOps rt_dev_opencl_ops = {
    .kind = RT_DEV_OPENCL,
    .name = "opencl",
    .open = cl_open,
    .close = cl_close,
    .alloc = cl_alloc,
    .zero = cl_zero,
    .write = cl_write,
    .read = cl_read,
    .host = cl_host,
    .load = cl_load,
    .launch = cl_launch,
    .gemm = cl_gemm,
    .sync = cl_sync,
    .query = cl_query,
    .native = cl_native,
};
