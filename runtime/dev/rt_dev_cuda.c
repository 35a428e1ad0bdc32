/* rt_dev_cuda.c - the cuda device: the CUDA driver API (libcuda loaded at run time), one context and stream per rank,
 * the arena as one cuMemAlloc, the stage's cubin (or its PTX), GEMMs through cuBLASLt. */
#include "rt_dev.h"
#include "rt_util.h"

#ifdef PPR_CUDA
#include <cublasLt.h>
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the driver, loaded at run time: a ppr built with the toolkit starts without a driver ------ */

/* Every driver function ppr calls. Each p_NAME has NAME's prototype from cuda.h; it is looked up
 * by the versioned symbol cuda.h maps NAME to (cuMemAlloc is cuMemAlloc_v2). */
// clang-format off
#define CU_FUNCTIONS(X) \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) \
  X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDeviceGetAttribute) X(cuDeviceGetPCIBusId) \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuStreamCreate) \
  X(cuStreamDestroy) X(cuMemGetInfo) X(cuMemAlloc) X(cuMemFree) \
  X(cuMemsetD8Async) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuModuleLoadData) \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuFuncGetAttribute) \
  X(cuLaunchKernel) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) \
  X(cuEventQuery) X(cuEventDestroy) X(cuGetErrorName) X(cuGetErrorString)
// clang-format on
#define DECLARE(f) static __typeof__(f) *p_##f;
CU_FUNCTIONS(DECLARE)

/* cuBLASLt's functions ppr calls, loaded as the device starts (its library is large: linked, it
 * would make every ppr start relocate it, and need the toolkit on every machine) */
// clang-format off
#define LT_FUNCTIONS(X) \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusName) X(cublasLtGetStatusString) \
  X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate) \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulPreferenceCreate) \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate) \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)
// clang-format on
LT_FUNCTIONS(DECLARE)
/* below, each cuBLASLt name calls through its pointer */
#define cublasLtCreate                       (*p_cublasLtCreate)
#define cublasLtDestroy                      (*p_cublasLtDestroy)
#define cublasLtGetStatusName                (*p_cublasLtGetStatusName)
#define cublasLtGetStatusString              (*p_cublasLtGetStatusString)
#define cublasLtMatmul                       (*p_cublasLtMatmul)
#define cublasLtMatmulAlgoGetHeuristic       (*p_cublasLtMatmulAlgoGetHeuristic)
#define cublasLtMatmulDescCreate             (*p_cublasLtMatmulDescCreate)
#define cublasLtMatmulDescDestroy            (*p_cublasLtMatmulDescDestroy)
#define cublasLtMatmulDescSetAttribute       (*p_cublasLtMatmulDescSetAttribute)
#define cublasLtMatmulPreferenceCreate       (*p_cublasLtMatmulPreferenceCreate)
#define cublasLtMatmulPreferenceDestroy      (*p_cublasLtMatmulPreferenceDestroy)
#define cublasLtMatmulPreferenceSetAttribute (*p_cublasLtMatmulPreferenceSetAttribute)
#define cublasLtMatrixLayoutCreate           (*p_cublasLtMatrixLayoutCreate)
#define cublasLtMatrixLayoutDestroy          (*p_cublasLtMatrixLayoutDestroy)
#define cublasLtMatrixLayoutSetAttribute     (*p_cublasLtMatrixLayoutSetAttribute)

#define NAME(f)    RT_UTIL_STR(f), /* the versioned symbol (cuMemAlloc_v2) */
#define LT_NAME(f) #f,             /* the name itself, not the pointer call above */
#define SLOT(f)    (void *)&p_##f,
static void *libcuda, *libcublaslt;

/* Loads libcuda.so.1 and every function; 0, or -1 with the reason in err. */
static int load_driver(char *err, size_t errlen) {
  static const char *const names[] = {CU_FUNCTIONS(NAME)};
  void *const slots[] = {CU_FUNCTIONS(SLOT)};
  char why[512];
  int rc =
      rt_util_load_lib(&libcuda, "libcuda.so.1", names, slots, (int)(sizeof slots / sizeof *slots), why, sizeof why);
  if (!rc) return 0;
  if (rc == -2)
    return rt_fail_at(err, errlen, __FILE__, __LINE__,
                      "--device cuda: the CUDA driver is older than this ppr's toolkit: %s", why);
  return rt_fail_at(err, errlen, __FILE__, __LINE__, "--device cuda: no CUDA driver: %s; install the NVIDIA driver",
                    why);
}

int rt_dev_cuda_load_cublaslt(char *err, size_t errlen) {
  static const char *const names[] = {LT_FUNCTIONS(LT_NAME)};
  void *const slots[] = {LT_FUNCTIONS(SLOT)};
  char why[512];
  if (!rt_util_load_lib(&libcublaslt, "libcublasLt.so." RT_UTIL_STR(CUBLAS_VER_MAJOR), names, slots,
                        (int)(sizeof slots / sizeof *slots), why, sizeof why))
    return 0;
  return rt_fail_at(err, errlen, __FILE__, __LINE__, "--device cuda: cuBLASLt: %s; install the CUDA toolkit's cuBLAS",
                    why);
}

const char *rt_dev_cuda_blas_status_name(int status) { return cublasLtGetStatusName((cublasStatus_t)status); }

static const char *cu_error(CUresult rc) {
  const char *name = NULL, *text = NULL;
  if (p_cuGetErrorName) p_cuGetErrorName(rc, &name);
  if (p_cuGetErrorString) p_cuGetErrorString(rc, &text);
  static __thread char buf[256];
  snprintf(buf, sizeof buf, "%s (%s)", name ? name : "an unknown CUDA error", text ? text : "?");
  return buf;
}

/* Every CUDA, cuBLASLt call: on failure the call, where, and the library's message; -1. */
#define CU_CHECK(d, call)                                                                                              \
  do {                                                                                                                 \
    CUresult rc_ = (p_##call);                                                                                         \
    if (rc_ != CUDA_SUCCESS) return RT_DEV_FAIL(d, "%s failed: %s", #call, cu_error(rc_));                             \
  } while (0)
#define LT_CHECK(d, call)                                                                                              \
  do {                                                                                                                 \
    cublasStatus_t rc_ = (call);                                                                                       \
    if (rc_ != CUBLAS_STATUS_SUCCESS)                                                                                  \
      return RT_DEV_FAIL(d, "%s failed: %s (%s)", #call, cublasLtGetStatusName(rc_), cublasLtGetStatusString(rc_));    \
  } while (0)

/* ---- the device ---------------------------------------------------------------------------- */

/* A GEMM of the listing, planned once for cuBLASLt: its descriptors and the algorithm. */
typedef struct {
  RtGemm key;      /* the column-major form, offsets replaced by their alignments */
  int epi;         /* its epilogue, an RtLtEpi, or -1 */
  uint32_t aux_al; /* the epilogue's matrix's alignment (0 without) */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
} Plan;

typedef struct {
  RtDev d;
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUevent done;
  CUdeviceptr arena;
  CUmodule module;
  CUfunction *fn; /* per kernel */
  int nfn;
  int max_shared;
  cublasLtHandle_t lt;
  int64_t ws_off, ws_bytes; /* cuBLASLt's workspace: the listing's `workspace` region */
  Plan *plans;
  int nplans, capplans;
} Cu;

static int cu_open(RtDev **out, int index, int local_rank, char *err, size_t errlen) {
  *out = NULL;
  if (load_driver(err, errlen)) return -1;
  CUresult rc = p_cuInit(0);
  if (rc == CUDA_ERROR_NO_DEVICE)
    return rt_fail_at(err, errlen, __FILE__, __LINE__, "--device cuda: cuInit: no CUDA-capable device is detected");
  if (rc != CUDA_SUCCESS)
    return rt_fail_at(err, errlen, __FILE__, __LINE__, "--device cuda: cuInit failed: %s", cu_error(rc));
  int n = 0;
  rc = p_cuDeviceGetCount(&n);
  if (rc != CUDA_SUCCESS || n == 0)
    return rt_fail_at(err, errlen, __FILE__, __LINE__,
                      "--device cuda: no CUDA device (cuDeviceGetCount: %d devices%s%s)", n, rc ? ", " : "",
                      rc ? cu_error(rc) : "");
  /* by default the node-local rank picks the device, so the ranks of a machine spread over its GPUs */
  int want = index >= 0 ? index : local_rank % n;
  if (want >= n)
    return rt_fail_at(err, errlen, __FILE__, __LINE__, "--device cuda:%d: there %s %d CUDA device%s (cuda:0..%d)", want,
                      n == 1 ? "is" : "are", n, n == 1 ? "" : "s", n - 1);
  Cu *c = calloc(1, sizeof *c);
  RT_CHECK_ALLOC(c);
  c->d.ops = &rt_dev_cuda_ops;
  snprintf(c->d.desc, sizeof c->d.desc, "cuda:%d", want);
  *out = &c->d;
  char name[128] = "?";
  size_t total = 0;
  int major = 0, minor = 0;
  if (p_cuDeviceGet(&c->dev, want) || p_cuDeviceGetName(name, sizeof name, c->dev) ||
      p_cuDeviceTotalMem(&total, c->dev) ||
      p_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->dev) ||
      p_cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->dev) ||
      p_cuDeviceGetAttribute(&c->max_shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, c->dev)) {
    RT_DEV_FAIL(&c->d, "cannot query the device");
    goto fail;
  }
  snprintf(c->d.desc, sizeof c->d.desc, "cuda:%d (%.120s, %.1f GiB, sm_%d%d)", want, name, (double)total / (1 << 30),
           major, minor);
  char bus[64] = "?", host[128] = "?";
  p_cuDeviceGetPCIBusId(bus, sizeof bus, c->dev);
  gethostname(host, sizeof host);
  host[sizeof host - 1] = 0;
  snprintf(c->d.uid, sizeof c->d.uid, "%s/%s", host, bus);
  if ((rc = p_cuDevicePrimaryCtxRetain(&c->ctx, c->dev)) || (rc = p_cuCtxSetCurrent(c->ctx)) ||
      (rc = p_cuStreamCreate(&c->stream, CU_STREAM_NON_BLOCKING)) ||
      (rc = p_cuEventCreate(&c->done, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING))) {
    RT_DEV_FAIL(&c->d, "creating the context, stream and event failed: %s", cu_error(rc));
    goto fail;
  }
  if (rt_dev_cuda_load_cublaslt(c->d.err, sizeof c->d.err)) goto fail;
  cublasStatus_t lrc = cublasLtCreate(&c->lt);
  if (lrc != CUBLAS_STATUS_SUCCESS) {
    RT_DEV_FAIL(&c->d, "cublasLtCreate failed: %s", cublasLtGetStatusName(lrc));
    goto fail;
  }
  return 0;
fail:
  snprintf(err, errlen, "%s", c->d.err);
  rt_dev_cuda_ops.close(&c->d);
  *out = NULL;
  return -1;
}

static void cu_close(RtDev *d) {
  Cu *c = (Cu *)d;
  if (c->stream) p_cuEventRecord(c->done, c->stream), p_cuEventSynchronize(c->done);
  for (int i = 0; i < c->nplans; i++) {
    cublasLtMatmulDescDestroy(c->plans[i].desc);
    cublasLtMatrixLayoutDestroy(c->plans[i].a);
    cublasLtMatrixLayoutDestroy(c->plans[i].b);
    cublasLtMatrixLayoutDestroy(c->plans[i].c);
  }
  free(c->plans);
  if (c->lt) cublasLtDestroy(c->lt);
  free(c->fn);
  if (c->module) p_cuModuleUnload(c->module);
  if (c->arena) p_cuMemFree(c->arena);
  if (c->done) p_cuEventDestroy(c->done);
  if (c->stream) p_cuStreamDestroy(c->stream);
  if (c->ctx) p_cuDevicePrimaryCtxRelease(c->dev);
  free(c);
}

static int cu_sync(RtDev *d) {
  Cu *c = (Cu *)d;
  CU_CHECK(d, cuEventRecord(c->done, c->stream));
  CU_CHECK(d, cuEventSynchronize(c->done));
  return 0;
}

static int cu_query(RtDev *d) {
  Cu *c = (Cu *)d;
  CU_CHECK(d, cuEventRecord(c->done, c->stream));
  CUresult rc = p_cuEventQuery(c->done);
  if (rc == CUDA_ERROR_NOT_READY) return 1;
  if (rc != CUDA_SUCCESS) return RT_DEV_FAIL(d, "cuEventQuery failed: %s", cu_error(rc));
  return 0;
}

static int cu_alloc(RtDev *d, int64_t bytes) {
  Cu *c = (Cu *)d;
  size_t free_b = 0, total = 0;
  CU_CHECK(d, cuMemGetInfo(&free_b, &total));
  size_t n = (size_t)((bytes + 255) / 256 * 256);
  if (n > free_b)
    return RT_DEV_FAIL(d, "the arena needs %lld bytes; the device has %zu free of %zu", (long long)bytes, free_b,
                       total);
  CU_CHECK(d, cuMemAlloc(&c->arena, n));
  CU_CHECK(d, cuMemsetD8Async(c->arena, 0, n, c->stream));
  d->arena = bytes;
  return cu_sync(d);
}

static int cu_zero(RtDev *d, int64_t off, int64_t bytes) {
  Cu *c = (Cu *)d;
  CU_CHECK(d, cuMemsetD8Async(c->arena + (CUdeviceptr)off, 0, (size_t)bytes, c->stream));
  return 0;
}

static int cu_write(RtDev *d, int64_t off, const void *src, int64_t bytes) {
  Cu *c = (Cu *)d;
  CU_CHECK(d, cuMemcpyHtoDAsync(c->arena + (CUdeviceptr)off, src, (size_t)bytes, c->stream));
  return cu_sync(d); /* src may be reused as soon as this returns */
}

static int cu_read(RtDev *d, int64_t off, void *dst, int64_t bytes) {
  Cu *c = (Cu *)d;
  CU_CHECK(d, cuMemcpyDtoHAsync(dst, c->arena + (CUdeviceptr)off, (size_t)bytes, c->stream));
  return cu_sync(d);
}

static void *cu_host(RtDev *d, int64_t off) {
  (void)d, (void)off;
  return NULL;
}

static void *cu_native(RtDev *d, int64_t off, void **stream) {
  Cu *c = (Cu *)d;
  *stream = c->stream;
  return (void *)(uintptr_t)(c->arena + (CUdeviceptr)off);
}

/* DIR/BASE.EXT (the cubin or the PTX), its size and hash checked against the listing's 'cuda'
 * line; NULL with the reason in d->err. */
static char *kernel_file(RtDev *d, const char *dir, const RtProg *p, int kind, size_t *len) {
  char msg[2048];
  char *s = rt_kernel_file_read(p, dir, kind, len, NULL, 0, msg, sizeof msg);
  if (!s) RT_DEV_FAIL(d, "%s", msg);
  return s;
}

static int cu_load(RtDev *d, const char *dir, const RtProg *p) {
  Cu *c = (Cu *)d;
  c->ws_off = p->reg[RT_REG_WORKSPACE].base;
  c->ws_bytes = p->reg[RT_REG_WORKSPACE].bytes;
  if (p->file[RT_KF_CUBIN].bytes < 0)
    return RT_DEV_FAIL(d,
                       "%s: its 'cuda %s - - - -' line names no compiled CUDA kernels: ppc ran without NVRTC; compile "
                       "the program with a ppc built with the CUDA toolkit",
                       p->path, p->cuda_arch);
  /* the cubin for the listing's target; on another GPU its PTX, compiled by the driver */
  size_t len = 0;
  char *bin = kernel_file(d, dir, p, RT_KF_CUBIN, &len);
  if (!bin) return -1;
  CUresult rc = p_cuModuleLoadData(&c->module, bin);
  free(bin);
  if (rc != CUDA_SUCCESS) {
    char *ptx = kernel_file(d, dir, p, RT_KF_PTX, &len);
    if (!ptx) return -1;
    CUresult rc2 = p_cuModuleLoadData(&c->module, ptx);
    free(ptx);
    if (rc2 != CUDA_SUCCESS)
      return RT_DEV_FAIL(d, "loading %s's kernels failed: the %s cubin: %s; its PTX: %s", p->kernels_base, p->cuda_arch,
                         cu_error(rc), cu_error(rc2));
  }
  /* the source hash the kernels carry */
  CUdeviceptr hp = 0;
  size_t hn = 0;
  char got[17] = "";
  CU_CHECK(d, cuModuleGetGlobal(&hp, &hn, c->module, "ppk_source_hash"));
  if (hn >= 17) CU_CHECK(d, cuMemcpyDtoHAsync(got, hp, 17, c->stream));
  if (cu_sync(d)) return -1;
  got[16] = 0;
  if (strncmp(got, p->kernels_hash, 17))
    return RT_DEV_FAIL(d, "%s's kernels carry the source hash '%s', the listing expects '%s'", p->kernels_base, got,
                       p->kernels_hash);
  c->fn = calloc((size_t)(p->nkernels ? p->nkernels : 1), sizeof *c->fn);
  if (!c->fn) return RT_DEV_FAIL(d, "out of memory");
  c->nfn = p->nkernels;
  for (int i = 0; i < p->nkernels; i++) {
    rc = p_cuModuleGetFunction(&c->fn[i], c->module, p->kernels[i]);
    if (rc != CUDA_SUCCESS)
      return RT_DEV_FAIL(d, "%s: no kernel %s called by the listing: %s", p->kernels_base, p->kernels[i], cu_error(rc));
    int most = 0;
    CU_CHECK(d, cuFuncGetAttribute(&most, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, c->fn[i]));
    if (p->kgeom[i].block > most)
      return RT_DEV_FAIL(d, "kernel %s: blocks of %d threads, the device runs it with at most %d", p->kernels[i],
                         p->kgeom[i].block, most);
    if (p->kgeom[i].local > c->max_shared)
      return RT_DEV_FAIL(d, "kernel %s: %lld bytes of shared memory, the device has %d per block", p->kernels[i],
                         (long long)p->kgeom[i].local, c->max_shared);
  }
  return 0;
}

static int cu_launch(RtDev *d, int kernel, const RtGeom *g, int nargs, const RtKArg *args) {
  Cu *c = (Cu *)d;
  union {
    CUdeviceptr p;
    float f;
    int64_t i;
  } val[RT_MAX_KARGS];
  void *params[RT_MAX_KARGS + 1];
  for (int i = 0; i < nargs; i++) {
    switch (args[i].kind) {
    case RT_KA_PTR: val[i].p = c->arena + (CUdeviceptr)args[i].off; break;
    case RT_KA_F32: val[i].f = args[i].f; break;
    case RT_KA_I64: val[i].i = args[i].i; break;
    }
    params[i] = &val[i];
  }
  params[nargs] = NULL;
  /* the kernels' shared memory is static (declared in them): no dynamic bytes */
  CU_CHECK(
      d, cuLaunchKernel(c->fn[kernel], (unsigned)g->grid, 1, 1, (unsigned)g->block, 1, 1, 0, c->stream, params, NULL));
  return 0;
}

/* ---- GEMMs: cuBLASLt, planned once per shape ---------------------------------------------------- */

static uint32_t alignment(CUdeviceptr p) {
  uint32_t a = 256;
  while (a > 4 && p % a) a /= 2;
  return a;
}

/* cuBLASLt's epilogues, by RtLtEpi */
static const cublasLtEpilogue_t lt_epilogue[] = {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                                 CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_BIAS}; /* ORDER RtLtEpi */

/* The plan of column-major GEMM m (offsets in bytes), with epilogue lt (NULL: none; its pointers
 * are set again before each call); NULL with the reason in d->err. */
static Plan *plan(Cu *c, const RtGemm *m, const RtLtGemm *lt) {
  RtDev *d = &c->d;
  RtGemm key = rt_gemm_key(m, 0);
  if (m->dt[0] != m->dt[1]) { /* cuBLASLt multiplies two operands of one type */
    RT_DEV_FAIL(d, "a GEMM of a %s and a %s operand: cuBLASLt takes A and B of one type", pp_dtype_name(m->dt[0]),
                pp_dtype_name(m->dt[1]));
    return NULL;
  }
  /* the operands' alignments, not their places (the scalars are arguments, not part of the plan) */
  key.a = alignment(c->arena + (CUdeviceptr)m->a), key.b = alignment(c->arena + (CUdeviceptr)m->b);
  key.c = alignment(c->arena + (CUdeviceptr)m->c);
  int epi = lt ? (int)lt->epi : -1;
  uint32_t aux_al = lt && lt->aux >= 0 ? alignment(c->arena + (CUdeviceptr)lt->aux) : 0;
  for (int i = 0; i < c->nplans; i++)
    if (!memcmp(&c->plans[i].key, &key, sizeof key) && c->plans[i].epi == epi && c->plans[i].aux_al == aux_al)
      return &c->plans[i];
  if (c->nplans == c->capplans) {
    int cap = c->capplans ? 2 * c->capplans : 64;
    Plan *np = realloc(c->plans, (size_t)cap * sizeof *np);
    if (!np) {
      RT_DEV_FAIL(d, "out of memory");
      return NULL;
    }
    c->plans = np, c->capplans = cap;
  }
  Plan *pl = &c->plans[c->nplans];
  memset(pl, 0, sizeof *pl);
  pl->key = key;
  pl->epi = epi, pl->aux_al = aux_al;
  cublasOperation_t ta = m->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = m->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasComputeType_t ct = d->tf32 && m->dt[0] == PP_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  int32_t batch = m->batch;
  int64_t strides[3] = {m->sa, m->sb, m->sc};
#define PLAN_CHECK(call)                                                                                               \
  do {                                                                                                                 \
    cublasStatus_t rc_ = (call);                                                                                       \
    if (rc_ != CUBLAS_STATUS_SUCCESS) {                                                                                \
      RT_DEV_FAIL(d, "%s failed: %s (%s)", #call, cublasLtGetStatusName(rc_), cublasLtGetStatusString(rc_));           \
      return NULL;                                                                                                     \
    }                                                                                                                  \
  } while (0)
  PLAN_CHECK(cublasLtMatmulDescCreate(&pl->desc, ct, CUDA_R_32F));
  PLAN_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  PLAN_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  /* the stored matrices, column-major: A is m x k (or k x m transposed), B k x n (or n x k), C m x n */
  /* bf16 A and B (tensor cores), products summed in f32, C and D f32 or bf16 (rounded once) */
  cudaDataType_t ty[3];
  for (int i = 0; i < 3; i++) ty[i] = m->dt[i] == PP_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  if (lt) { /* GELU's input matrix (its pointer again before each call) and the bias: C's type */
    cublasLtEpilogue_t e = lt_epilogue[lt->epi];
    int64_t ld = lt->aux_ld;
    void *aux = (void *)(uintptr_t)(c->arena + (CUdeviceptr)lt->aux);
    int32_t bt = ty[2];
    PLAN_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (lt->aux >= 0) {
      PLAN_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
      PLAN_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    }
    if (lt->bias >= 0)
      PLAN_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  PLAN_CHECK(cublasLtMatrixLayoutCreate(&pl->a, ty[0], m->ta ? m->k : m->m, m->ta ? m->m : m->k, m->lda));
  PLAN_CHECK(cublasLtMatrixLayoutCreate(&pl->b, ty[1], m->tb ? m->n : m->k, m->tb ? m->k : m->n, m->ldb));
  PLAN_CHECK(cublasLtMatrixLayoutCreate(&pl->c, ty[2], m->m, m->n, m->ldc));
  cublasLtMatrixLayout_t lay[3] = {pl->a, pl->b, pl->c};
  for (int i = 0; i < 3 && batch > 1; i++) {
    PLAN_CHECK(cublasLtMatrixLayoutSetAttribute(lay[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    PLAN_CHECK(cublasLtMatrixLayoutSetAttribute(lay[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                                sizeof strides[i]));
  }
  cublasLtMatmulPreference_t pref;
  PLAN_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = (uint64_t)c->ws_bytes;
  /* no split-K reduced in place with atomics: the same bits on every run */
  uint32_t schemes =
      CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  uint32_t al[3] = {(uint32_t)key.a, (uint32_t)key.b, (uint32_t)key.c};
  cublasStatus_t prc =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (!prc)
    prc = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                               sizeof schemes);
  if (!prc)
    prc = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
  if (!prc)
    prc = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
  if (!prc)
    prc = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
  if (!prc)
    prc = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]);
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  if (!prc) prc = cublasLtMatmulAlgoGetHeuristic(c->lt, pl->desc, pl->a, pl->b, pl->c, pl->c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  PLAN_CHECK(prc);
  if (!found) {
    RT_DEV_FAIL(d, "cuBLASLt has no algorithm for the column-major 'gemm %c %c %d %d %d' (batch %d)", m->ta ? 'T' : 'N',
                m->tb ? 'T' : 'N', m->m, m->n, m->k, m->batch);
    return NULL;
  }
#undef PLAN_CHECK
  pl->algo = res.algo;
  c->nplans++;
  return pl;
}

static int cu_gemm(RtDev *d, const RtGemm *g) {
  Cu *c = (Cu *)d;
  RtGemm m = rt_gemm_colmajor(g);
  /* C shared by the batches: they add into it one after another, as single GEMMs */
  int seq = g->sc == 0 && g->batch > 1, n = seq ? g->batch : 1;
  RtGemm one = m;
  if (seq) one.batch = 1;
  Plan *pl = plan(c, &one, NULL);
  if (!pl) return -1;
  void *ws = (void *)(uintptr_t)(c->arena + (CUdeviceptr)c->ws_off);
  /* batch i's A and B: strides in elements of their types */
  int64_t ea = pp_dtype_bytes(m.dt[0]), eb = pp_dtype_bytes(m.dt[1]);
  for (int i = 0; i < n; i++) {
    CUdeviceptr a = c->arena + (CUdeviceptr)(m.a + ea * i * m.sa), b = c->arena + (CUdeviceptr)(m.b + eb * i * m.sb),
                cc = c->arena + (CUdeviceptr)m.c;
    if (seq && (alignment(a) < pl->key.a || alignment(b) < pl->key.b)) {
      RtGemm o = one;
      o.a = m.a + ea * i * m.sa, o.b = m.b + eb * i * m.sb;
      if (!(pl = plan(c, &o, NULL))) return -1;
    }
    LT_CHECK(d, cublasLtMatmul(c->lt, pl->desc, &m.alpha, (const void *)(uintptr_t)a, pl->a, (const void *)(uintptr_t)b,
                               pl->b, &m.beta, (const void *)(uintptr_t)cc, pl->c, (void *)(uintptr_t)cc, pl->c,
                               &pl->algo, ws, (size_t)c->ws_bytes, c->stream));
  }
  return 0;
}

/* g with its epilogue inside cuBLASLt's GEMM (--lt-epilogues): 1, or 0 when cuBLASLt takes no such
 * GEMM (rt_gemm_lt_epilogue says why; the caller runs the GEMM and the kernel), -1 on failure. */
static int cu_gemm_epi(RtDev *d, const RtGemm *g, const RtEpi *e) {
  Cu *c = (Cu *)d;
  RtLtGemm lt;
  char why[128];
  if (rt_gemm_lt_epilogue(g, e, &lt, why, sizeof why)) return 0;
  Plan *pl = plan(c, &lt.m, &lt);
  if (!pl) return -1;
  void *aux = (void *)(uintptr_t)(c->arena + (CUdeviceptr)lt.aux), *ws = (void *)(uintptr_t)(c->arena + c->ws_off);
  void *bias = lt.bias >= 0 ? (void *)(uintptr_t)(c->arena + (CUdeviceptr)lt.bias) : NULL;
  if (lt.aux >= 0)
    LT_CHECK(d, cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  if (bias)
    LT_CHECK(d, cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  const void *a = (const void *)(uintptr_t)(c->arena + (CUdeviceptr)lt.m.a),
             *b = (const void *)(uintptr_t)(c->arena + (CUdeviceptr)lt.m.b);
  void *dd = (void *)(uintptr_t)(c->arena + (CUdeviceptr)lt.m.c);
  LT_CHECK(d, cublasLtMatmul(c->lt, pl->desc, &lt.m.alpha, a, pl->a, b, pl->b, &lt.m.beta, dd, pl->c, dd, pl->c,
                             &pl->algo, ws, (size_t)c->ws_bytes, c->stream));
  return 1;
}

const RtDevOps rt_dev_cuda_ops = {
    .kind = RT_DEV_CUDA,
    .name = "cuda",
    .open = cu_open,
    .close = cu_close,
    .alloc = cu_alloc,
    .zero = cu_zero,
    .write = cu_write,
    .read = cu_read,
    .host = cu_host,
    .load = cu_load,
    .launch = cu_launch,
    .gemm = cu_gemm,
    .gemm_epi = cu_gemm_epi,
    .sync = cu_sync,
    .query = cu_query,
    .native = cu_native,
};

#endif /* PPR_CUDA */
