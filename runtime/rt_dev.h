/* rt_dev.h - the device interface: one arena, its zeroing and copies, a stage's kernels and their launches, strided
 * batched GEMM, a clock; the cpu, opencl and cuda devices behind it. */
#ifndef RT_DEV_H
#define RT_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "pp_dtype.h"
#include "rt_prog.h"

/*
 * The executor (rt_exec.c) knows nothing of a device but this header. A device holds one arena
 * (every buffer of the program is a byte offset into it), runs the kernels ppc generated for the
 * stage, and runs GEMMs. Work may be queued: a launch or a GEMM returns before it has run, in the
 * order given; rt_dev_read waits for the work before it, rt_dev_sync for all of it.
 *
 * Every function returns 0 or -1; on -1 the device's message (rt_dev_error) names the device,
 * the call that failed, what it said, and [file:line].
 */

/* ORDER RtDevKind: rt_dev.c's table and the --device names */
typedef enum { RT_DEV_CPU, RT_DEV_OPENCL, RT_DEV_CUDA, RT_NDEV } RtDevKind;

typedef struct RtDev RtDev;

/* One argument of a kernel launch, in the order of the `kernel` instruction's ARGs. */
typedef enum { RT_KA_PTR, RT_KA_F32, RT_KA_I64 } RtKArgKind;
typedef struct {
  RtKArgKind kind;
  int64_t off; /* RT_KA_PTR: a byte offset into the arena */
  float f;     /* RT_KA_F32 */
  int64_t i;   /* RT_KA_I64 */
} RtKArg;

/* For each of batch: C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, row-major, op(X) = X or X^T.
 * a, b, c: byte offsets into the arena; leading dimensions and batch strides in elements (of each
 * operand's type). */
typedef struct {
  int ta, tb;
  int m, n, k, batch;
  float alpha, beta;
  int64_t a, b, c;
  int lda, ldb, ldc;
  int64_t sa, sb, sc;
  PpDType dt[3]; /* A, B, C: PP_F32 or PP_BF16; products and sums in f32, C rounded once if bf16 */
  PpTri tri;     /* the products the device may skip (pp_tri.h); computing them all is correct too */
} RtGemm;

/* The column-major GEMM (cuBLAS, cuBLASLt) that writes the same bytes as the row-major g: a
 * row-major C[m,n] is the column-major C^T[n,m] with the same leading dimension, and
 * C^T = op(B)^T op(A)^T, so the column-major call multiplies B's storage by A's with m and n
 * swapped, each operand keeping its transpose flag. Pure; tests/unit/test_gemm.c runs it through
 * OpenBLAS's column-major sgemm over every GEMM of the example models' listings. */
RtGemm rt_gemm_colmajor(const RtGemm *g);
/* A device's cache key of g: its shape, strides and types, its alpha and beta when scalars, no
 * offsets, every other byte (padding too) zero, so that keys compare with memcmp. */
RtGemm rt_gemm_key(const RtGemm *g, int scalars);
/* The elements each operand of g spans (A, B, C): BATCH stored matrices, leading dimension and
 * stride apart, (BATCH-1)·stride + (rows-1)·ld + cols; a device that converts an operand converts these. */
void rt_gemm_spans(const RtGemm *g, int64_t n[3]);

/* A GEMM's epilogue (pp_epi.h) as a device runs it inside the GEMM, from the kernel after it:
 * byte offsets of D (the kernel's output; bias: C), of GELU's input matrix (gelu: written, the
 * GEMM's C; dgelu: read, the kernel's X; bias: -1) and of the bias (-1 without). */
typedef struct {
  PpEpi kind;
  int64_t d, aux, bias;
} RtEpi;

/* cuBLASLt's epilogues that run the listing's (cublasLtEpilogue_t's GELU_AUX, GELU_AUX_BIAS, DGELU,
 * BIAS) */
typedef enum { RT_LT_GELU_AUX, RT_LT_GELU_AUX_BIAS, RT_LT_DGELU, RT_LT_BIAS } RtLtEpi;

/* A GEMM with its epilogue in cuBLASLt's column-major terms: m the column-major GEMM
 * (rt_gemm_colmajor) writing D (m.c = D's offset), aux the GELU input matrix's offset and its
 * leading dimension in elements (-1 for BIAS), bias the bias vector's offset (-1 without), one
 * element per row of the column-major D (a column of the row-major C). */
typedef struct {
  RtLtEpi epi;
  RtGemm m;
  int64_t aux, aux_ld, bias;
} RtLtGemm;

/* The cuBLASLt form of row-major g with epilogue e: 0, or -1 with the reason in why when cuBLASLt
 * takes no such GEMM (the device then runs the GEMM and the kernel). Pure; tests/unit/test_gemm.c
 * runs its result as cuBLASLt defines the epilogues, through OpenBLAS, against the kernels'
 * row-major definition. */
int rt_gemm_lt_epilogue(const RtGemm *g, const RtEpi *e, RtLtGemm *out, char *why, size_t whylen);

typedef struct RtDevOps {
  RtDevKind kind;
  const char *name; /* "cpu", "opencl", "cuda" */
  /* index: the N of --device NAME:N, -1 for the default; local_rank: this process's rank among
   * those on its machine (a GPU device picks local_rank mod the device count by default) */
  int (*open)(RtDev **out, int index, int local_rank, char *err, size_t errlen);
  void (*close)(RtDev *d);
  int (*alloc)(RtDev *d, int64_t bytes); /* the arena, zeroed; once */
  int (*zero)(RtDev *d, int64_t off, int64_t bytes);
  int (*write)(RtDev *d, int64_t off, const void *src, int64_t bytes);
  int (*read)(RtDev *d, int64_t off, void *dst, int64_t bytes); /* waits for the work queued before */
  void *(*host)(RtDev *d, int64_t off); /* the arena's bytes at off when they are host memory, else NULL */
  /* the stage's kernels of listing p: DIR/<kernels base>.<the device's kind of file>, checked
   * against the listing's hashes; kernel i of the launches is p->kernels[i], with geometry
   * p->kgeom[i] (checked against the device) */
  int (*load)(RtDev *d, const char *dir, const RtProg *p);
  int (*launch)(RtDev *d, int kernel, const RtGeom *g, int nargs, const RtKArg *args);
  int (*gemm)(RtDev *d, const RtGemm *g);
  /* g with its epilogue e inside it, as one GEMM: 1 when the device did, 0 when it cannot (the
   * caller runs the GEMM and then the epilogue's kernel), -1 on failure. NULL: never */
  int (*gemm_epi)(RtDev *d, const RtGemm *g, const RtEpi *e);
  int (*sync)(RtDev *d); /* waits for all queued work */
  /* 1 while queued work has not run, 0 when it all has, -1 on failure: a wait that can watch
   * for something else meanwhile (a collective library's errors) */
  int (*query)(RtDev *d);
  /* the device's address of the arena's byte off, and (in *stream) the queue the device runs on,
   * for a library that works on device memory itself (NCCL); NULL on devices without */
  void *(*native)(RtDev *d, int64_t off, void **stream);
} RtDevOps;

struct RtDev {
  const RtDevOps *ops;
  int tf32;       /* --tf32: GEMMs may round their inputs to TF32 (cuda) */
  int onednn;     /* --onednn: bf16 GEMMs through oneDNN (cpu) */
  int lt_epi;     /* --lt-epilogues: the listing's GEMM epilogues inside cuBLASLt's GEMMs (cuda) */
  char uid[192];  /* which physical device (cuda: host/PCI bus id), "" where it does not matter */
  char desc[256]; /* which device: "opencl:0 (Portable Computing Language: pthread-... , 3.9 GiB)" */
  char err[4096]; /* the last failure */
  int64_t arena;  /* bytes of the arena, once allocated */
};

extern const RtDevOps rt_dev_cpu_ops, rt_dev_opencl_ops, rt_dev_cuda_ops;

#ifdef PPR_CUDA
/* cuBLASLt, loaded as the cuda device opens (the toolkit's major version, through ppr's run path
 * to the toolkit's libraries) with every function ppr calls: 0, or -1 with the reason in err.
 * rt_dev_cuda_blas_status_name, after it: cuBLASLt's name of a status, through the loaded table. */
int rt_dev_cuda_load_cublaslt(char *err, size_t errlen);
const char *rt_dev_cuda_blas_status_name(int status);
#endif

/* --device SPEC: cpu, opencl, opencl:N, cuda, cuda:N. Opens the device; *out NULL on failure. */
int rt_dev_open(const char *spec, int local_rank, RtDev **out, char *err, size_t errlen);
int rt_dev_parse(const char *spec, RtDevKind *kind, int *index); /* 0, or -1 for a bad SPEC */
const char *rt_dev_kind_name(RtDevKind k);

static inline void rt_dev_close(RtDev *d) {
  if (d) d->ops->close(d);
}
static inline const char *rt_dev_error(const RtDev *d) { return d->err; }
static inline int rt_dev_alloc(RtDev *d, int64_t bytes) { return d->ops->alloc(d, bytes); }
static inline int rt_dev_zero(RtDev *d, int64_t off, int64_t bytes) { return bytes ? d->ops->zero(d, off, bytes) : 0; }
static inline int rt_dev_write(RtDev *d, int64_t off, const void *src, int64_t bytes) {
  return bytes ? d->ops->write(d, off, src, bytes) : 0;
}
static inline int rt_dev_read(RtDev *d, int64_t off, void *dst, int64_t bytes) {
  return bytes ? d->ops->read(d, off, dst, bytes) : 0;
}
static inline void *rt_dev_host(RtDev *d, int64_t off) { return d->ops->host(d, off); }
static inline int rt_dev_load(RtDev *d, const char *dir, const RtProg *p) { return d->ops->load(d, dir, p); }
static inline int rt_dev_launch(RtDev *d, int kernel, const RtGeom *g, int nargs, const RtKArg *args) {
  return d->ops->launch(d, kernel, g, nargs, args);
}
static inline int rt_dev_gemm(RtDev *d, const RtGemm *g) { return d->ops->gemm(d, g); }
/* 1: g ran with e inside it; 0: the device does not fuse it (run the GEMM, then the kernel); -1 */
static inline int rt_dev_gemm_epi(RtDev *d, const RtGemm *g, const RtEpi *e) {
  return d->lt_epi && d->ops->gemm_epi ? d->ops->gemm_epi(d, g, e) : 0;
}
static inline int rt_dev_sync(RtDev *d) { return d->ops->sync(d); }
static inline int rt_dev_query(RtDev *d) { return d->ops->query(d); }
static inline void *rt_dev_native(RtDev *d, int64_t off, void **stream) { return d->ops->native(d, off, stream); }

/* The device's clock for timing (--trace, PPR_PROFILE): waits for the queued work, then reads
 * CLOCK_MONOTONIC in milliseconds. On a queueing device every timed span thus ends when its work
 * has run. A failed wait shows as NAN (the next call that fails names it). */
double rt_dev_time_ms(RtDev *d);

/* For the devices' files: "MESSAGE [file:line]" into d->err, prefixed with the device. -1. */
int rt_dev_fail_at(RtDev *d, const char *file, int line, const char *fmt, ...) RT_FMT(4, 5);
#define RT_DEV_FAIL(d, ...) rt_dev_fail_at((d), __FILE__, __LINE__, __VA_ARGS__)

#endif /* RT_DEV_H */
