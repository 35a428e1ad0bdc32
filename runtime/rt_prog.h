/* rt_prog.h - the ppr program: a rank's listing parsed (rt_prog.c, rt_prog_*.c). The executor that
 * runs it is rt_exec.h's. */
#ifndef RT_PROG_H
#define RT_PROG_H

#include <stddef.h>
#include <stdint.h>

#include "pp_boundary.h"
#include "pp_stagedir.h"
#include "pp_dtype.h"
#include "pp_limits.h"
#include "pp_regions.h"
#include "pp_stagedir.h"
#include "pp_epi.h"
#include "pp_tri.h"
#include "rt_io.h"

/*
 * Conventions are those of rt_io.h: int status 0 = success; on error a message
 * is written to err[0..errlen) naming the file (and line, tensor, kernel) and
 * what was expected. Nothing is printed. docs/stage-format.md is the contract.
 */

#define RT_PROG_VERSION PP_PROG_VERSION /* the listing format version this ppr reads */
#define RT_PPR_VERSION  "0.1.0"
#define RT_MAX_NDIM     8                    /* dims of a param or buffer shape */
#define RT_MAX_KARGS    64                   /* arguments of one kernel instruction */
#define RT_MAX_OFFSET   PP_MAX_ARENA         /* arena bytes, offsets, extents, strides: at most 1 TiB (pp_limits.h) */
#define RT_MAX_BLOCK    1024                 /* threads per block of a kernel launch: a power of two up to this */
#define RT_MAX_LOCAL    65536                /* local (shared) memory bytes of a kernel launch */
#define RT_MAX_GRID     ((int64_t)INT32_MAX) /* blocks of a kernel launch */

/* ---- failure reports for library calls: the message ends with [source file:line] ---------- */

#if defined(__GNUC__)
#define RT_FMT(a, b) __attribute__((format(printf, a, b)))
#else
#define RT_FMT(a, b)
#endif

/* Writes "MESSAGE [file:line]" into err; returns -1. */
int rt_fail_at(char *err, size_t errlen, const char *file, int line, const char *fmt, ...) RT_FMT(5, 6);

/* In a function with `char *err, size_t errlen` in scope: report a failed library call. */
#define RT_FAIL(...) rt_fail_at(err, errlen, __FILE__, __LINE__, __VA_ARGS__)
/* A NULL from an allocator: "out of memory" with the source location. */
#define RT_CHECK_ALLOC(p)                                                                                              \
  do {                                                                                                                 \
    if (!(p)) return RT_FAIL("out of memory");                                                                         \
  } while (0)

/* ---- the program --------------------------------------------------------------------------- */

/* the arena's regions, in common/pp_regions.h's order; `workspace` (a GEMM library's scratch) and `copies` may be
 * absent: then they have 0 bytes */
enum {
  RT_REG_PARAMS,
  RT_REG_GRADS,
  RT_REG_ADAM_M,
  RT_REG_ADAM_V,
  RT_REG_COPIES, /* --precision bf16: the parameters' working copies; absent otherwise */
  RT_REG_SLOTS,
  RT_REG_SCRATCH,
  RT_REG_WORKSPACE,
  RT_NREG
};
/* ORDER: as in the listing; weights (W of a split backward) only in programs of a split schedule */
enum { RT_BLK_FORWARD, RT_BLK_BACKWARD, RT_BLK_WEIGHTS, RT_BLK_OPTIMIZER, RT_BLK_REFRESH, RT_NBLK };
/* The optimizer and refresh blocks are the program's, run outside any chunk and slot; the others
 * are each chunk's. refresh (--precision bf16): the working copies from the values, run before a
 * step whenever the values were set from the host. */
static inline int rt_blk_program(int b) { return b >= RT_BLK_OPTIMIZER; }
/* The runtime scalars (s:NAME): floats, then from RT_S_SEED on int64s. */
enum {
  RT_S_LR,
  RT_S_BETA1,
  RT_S_BETA2,
  RT_S_EPS,
  RT_S_WD,
  RT_S_BC1,
  RT_S_BC2,
  RT_S_CLIP,
  RT_S_TOKSCALE,
  RT_S_SEED,   /* --dropout-seed */
  RT_S_RNGCTR, /* (step mod 2^32)·2^32 + the global micro-batch: dropout's stream */
  RT_S_TRAIN,  /* 1 in a training step, 0 in a validation or generation pass */
  RT_NSCALAR
};

typedef enum {
  RT_I_BATCH,
  RT_I_ZERO,
  RT_I_KERNEL,
  RT_I_GEMM,
  RT_I_SEED,
  RT_I_LOSS,
  RT_I_LOGITS,
  RT_I_GRAD_NORM,
  RT_I_ALLREDUCE_TIED,
  RT_I_ALLREDUCE,
  RT_I_ALLGATHER,     /* p[0] this rank's part (bytes), p[1] the group's parts in rank order */
  RT_I_REDUCE_SCATTER /* p[0] the group's parts summed over it, p[1] this rank's part (bytes) */
} RtInstrKind;
/* The group of an `allreduce`: the TP group, runs of R consecutive TP ranks (tp/R), or the DP group
 * (every replica and context-parallel rank of the stage and tp_rank); of an `allgather` or
 * `reduce_scatter`: the TP group or the context-parallel group (RT_G_CP). */
typedef enum { RT_G_TP, RT_G_TP_SUB, RT_G_DP, RT_G_CP } RtGroup;
typedef enum { RT_OP_SUM, RT_OP_MAX } RtReduceOp;
typedef enum { RT_A_PTR, RT_A_F32, RT_A_I64, RT_A_SCALAR } RtArgKind;
typedef enum { RT_E_ZERO_GRADS, RT_E_F, RT_E_B, RT_E_W, RT_E_OPT, RT_E_COMM } RtEntryKind;
typedef enum { RT_INIT_NORMAL, RT_INIT_ONES, RT_INIT_ZEROS } RtInitKind;

typedef struct {
  int present; /* 0 for `-` (batch only) */
  int in_slot; /* 1: $OFF (relative to the current slot), 0: @OFF (absolute) */
  int64_t off;
} RtPtr;

typedef struct {
  RtArgKind kind;
  RtPtr ptr;     /* RT_A_PTR */
  int64_t bytes; /* RT_A_PTR: the extent written after ':', 0 if none was written */
  float f;       /* RT_A_F32 */
  int64_t i;     /* RT_A_I64 */
  int scalar;    /* RT_A_SCALAR: RT_S_* */
} RtArg;

/* A kernel's launch geometry, `<<<GRID,BLOCK,LOCAL>>>` in the listing: blocks, threads per block,
 * bytes of local (shared) memory. Decided by the compiler; the same on every call of a kernel. */
typedef struct {
  int64_t grid;
  int block;
  int64_t local;
} RtGeom;

typedef struct {
  RtInstrKind kind;
  int line;
  RtPtr p[3];    /* batch: tokens, labels; zero/seed/loss/allreduce_tied/allreduce: p[0]; gemm: A, B, C;
                  * grad_norm: p[0] the partial sums (GRID / RUNS a row of the table), p[1] the
                  * table of the owned gradients (RUNS rows of two i32) */
  int64_t bytes; /* zero, allreduce_tied, allreduce, grad_norm (its table's rows: RUNS) */
  int group;     /* allreduce, allgather, reduce_scatter: RtGroup */
  int sub;       /* allreduce tp/R: R (a divisor of tp); else 0 */
  int op;        /* allreduce: RtReduceOp */
  float value;   /* seed */
  int64_t lg[4]; /* logits: B S VLOCAL VSTART (p[0] the logits, in the slot) */
  int kernel;    /* kernel, grad_norm: index into RtProg.kernels */
  RtGeom geom;   /* kernel, grad_norm */
  int nargs;
  RtArg *args;
  /* gemm */
  int ta, tb; /* 1 = T */
  PpTri tri;  /* gemm: the products a device may skip (tri:NAME), PP_TRI_NONE */
  PpEpi epi;  /* gemm: the next instruction, a kernel, may run inside it (epi:NAME), PP_EPI_NONE */
  int m, n, k, lda, ldb, ldc, batch;
  float alpha, beta;
  int64_t sa, sb, sc;
  PpDType dt[3]; /* A, B, C: f32 or bf16 (a bf16 GEMM accumulates in f32) */
} RtInstr;

typedef struct {
  int present, line, n;
  RtInstr *ins;
} RtBlock;

typedef struct {
  PpBoundary kind;
  int chunk, mb, slot; /* chunk: the op's `:C` (0 without) */
} RtCommOp;

typedef struct {
  RtEntryKind kind;
  int chunk, mb, slot, line; /* F, B, W: chunk is the entry's `:C` (0 without) */
  int nops;                  /* comm: 1 or 2 ops, posted together, then waited for together */
  RtCommOp op[2];
} RtEntry;

/* Where a stage's pipeline messages live: one [S,B,H] hidden state or its gradient. */
typedef struct {
  int present, line;
  RtPtr ptr; /* recv_fwd: always $ (in the micro-batch's slot) */
  int64_t bytes;
  int ndim; /* -1 when no shape was written */
  int64_t dims[RT_MAX_NDIM];
} RtBoundary;

/* A chunk of layers the rank holds (`chunk C vstage S prev P next N`): virtual stage vstage of the
 * pipeline's pp·V (the layers run through virtual stages 0 .. pp·V − 1 in order). A program without
 * chunk lines has one chunk, chunk 0: its stage, its `peers`. Chunk 0's boundaries and blocks are
 * RtProg.bnd and RtProg.blk (where one-chunk code has always read them); those of chunks 1 .. V − 1
 * are here (read any chunk's through rt_prog_boundary and rt_prog_block). */
typedef struct {
  int vstage;
  int prev, next;          /* the world ranks holding vstage − 1 and vstage + 1, -1 for none; may be this rank */
  int line;                /* its chunk line; 0 without chunk lines */
  RtBoundary bnd[PP_NBND]; /* chunks 1 ..: the chunk's boundaries (chunk 0: unused) */
  RtBlock blk[RT_BLK_OPTIMIZER]; /* chunks 1 ..: forward, backward, weights (chunk 0: unused) */
} RtChunk;

/* Where a forward leaves its logits (`logits $OFF B S VLOCAL VSTART [TYPE]` in a forward block):
 * [B,S,VLOCAL] elements of TYPE (f32 when not given, or bf16) in the micro-batch's slot, columns [VSTART, VSTART +
 * VLOCAL) of the vocabulary, those at or past `vocab` padding. A generation program's output; in a training program,
 * what its loss reads. */
typedef struct {
  int present, chunk, line;
  RtPtr ptr;
  int64_t b, s, vlocal, vstart;
  PpDType dtype;
} RtLogits;

/* A `buffer` line: what the compiler placed where (not needed to execute). */
typedef struct {
  char *name;
  PpDType dtype; /* PP_I32: token ids, labels */
  RtPtr ptr;
  int64_t bytes;
} RtBuffer;

/* A dense parameter of the whole model (`model_param`), held by this rank or another. */
typedef struct {
  char *name;
  int ndim, line;
  int64_t dims[RT_MAX_NDIM];
} RtModelParam;

typedef struct {
  int64_t base, bytes;
} RtRegion;

typedef struct {
  int index;  /* == its position in RtProg.params */
  char *name; /* the global checkpoint name */
  int ndim;
  int64_t dims[RT_MAX_NDIM];
  int64_t numel;
  int64_t off; /* absolute arena offset of the value (inside the params region) */
  RtInitKind init;
  double std; /* RT_INIT_NORMAL */
  int decay, tied, line;
  int shared;  /* a copy of this tensor lives on another stage (a tied embedding and its head) */
  int copy;    /* this rank is not its owner: not in grad_norm, not written by --save */
  int replica; /* another rank holds the same values and owns them (implied by copy) */
  int owned;   /* neither copy nor replica: in grad_norm, written by --save */
  /* `shard DIM START LEN DENSE`: the local tensor is the dense one (dims with dims[DIM] = DENSE)
   * restricted along DIM to [START, START + LEN); rows at or past DENSE are zero padding.
   * `... parts P`: along DIM both are P blocks (LEN/P and DENSE/P rows); local block b is dense
   * rows [b·DENSE/P + START, b·DENSE/P + START + LEN/P) (no padding) */
  int sharded, shard_dim, shard_parts;          /* shard_parts 1 unless `parts P` */
  int64_t shard_start, shard_dense;             /* LEN is dims[shard_dim] */
  int64_t dense_dims[RT_MAX_NDIM], dense_numel; /* the dense tensor (== dims, numel when not sharded) */
} RtParam;

/* The kernel files a listing names, by their extension: NAME.so (cpu), NAME.cl (opencl),
 * NAME.cubin and NAME.ptx (cuda). */
typedef enum { RT_KF_SO, RT_KF_CL, RT_KF_CUBIN, RT_KF_PTX, RT_NKF } RtKernelFile;

/* What the listing says of one kernel file: its size and FNV-1a 64 hash (`object so BYTES HEX`,
 * `object cl ...`, the `cuda` line's pairs); bytes -1 and hash "-" when it names no such file. */
typedef struct {
  int64_t bytes;
  char hash[17];
  int line;
} RtFileSum;

typedef struct RtProg {
  char *path; /* as given to rt_prog_load / rt_prog_parse; used in every message */
  char *compiler, *model, *schedule_name;
  char *kernels_base;     /* `kernels NAME HASH`: NAME.so (cpu), NAME.cl (opencl), NAME.cubin/.ptx (cuda) */
  char cuda_arch[16];     /* `cuda ARCH ...`: the target of NAME.cubin */
  RtFileSum file[RT_NKF]; /* per RtKernelFile: the file's bytes and hash, checked before it is loaded */
  char kernels_hash[17];
  char compile_id[17]; /* `compile`: one id for every listing of one ppc run (ranks compare it) */
  char *ckpt_prefix; /* `checkpoint_prefix P`: a prefix of param names a checkpoint's names may all lack; NULL: none */
  char *hf_config;   /* `hf_config JSON`: the Hugging Face config the model came from (--save's config.json); NULL */
  uint64_t hash;
  int tp, pp, dp, rank, stage, tp_rank, dp_rank;
  int cp, cp_rank; /* context parallelism: the mesh's cp (1 without) and this rank's place in its cp group */
  int prev, next;  /* the pipeline neighbours' world ranks (`peers`), -1 for none */
  int nchunks;     /* V, the chunks of layers: 1 without chunk lines */
  RtChunk chunk[PP_MAX_CHUNKS];       /* [0, nchunks): each chunk's virtual stage and neighbours */
  int micro_batch, seq, microbatches; /* microbatches: the step's global count M */
  int generate;                       /* schedule PP_SCHED_FORWARD: a generation program (forward only) */
  int opt_clears_grads;               /* `block optimizer PP_OPT_CLEARS_GRADS`: it leaves the grads zero */
  RtLogits logits;                    /* its logits, on the rank holding the last virtual stage */
  int local_microbatches;             /* M / dp: the micro-batches of this rank's schedule */
  int64_t vocab;
  int masked;       /* `vocab N ignore_index I`: the loss counts the labels other than I */
  int ignore_index; /* I */
  RtRegion reg[RT_NREG];
  int nslots;
  /* ZeRO-1 (`zero Z R`, `zero_part` lines): the optimizer's state sharded over the Z ranks of the
   * dp x cp group, this rank the R-th; per part of the parameters' regions: its start in the
   * params region (the grads and copies alike), its elements (Z shards), a shard's elements, and
   * where this rank's shard of the moments starts in adam_m (adam_v alike). zero 0: none. */
  int zero, zrank, nzpart;
  struct {
    int64_t off, n, shard, moff;
  } zpart[2];
  int64_t arena;
  int nparams;
  RtParam *params;
  int tied;                /* index of the tied param, or -1 */
  int nshared;             /* params marked shared */
  RtBoundary bnd[PP_NBND]; /* chunk 0's boundaries */
  int nmodel;              /* model_param lines; 0 when the listing has none (then the model is this rank's params) */
  RtModelParam *mparams;
  int nbuffers;
  RtBuffer *buffers;
  int nkernels;
  char **kernels;       /* distinct kernel names, in order of first use */
  RtGeom *kgeom;        /* per kernel: its geometry (every call's) */
  RtBlock blk[RT_NBLK]; /* chunk 0's forward, backward and weights blocks, and the optimizer block */
  int nentries;
  RtEntry *sched;
} RtProg;

/* Chunk c's block b (RT_BLK_*; the optimizer block is the program's, whatever c) and boundary k. */
static inline const RtBlock *rt_prog_block(const RtProg *p, int c, int b) {
  return c == 0 || rt_blk_program(b) ? &p->blk[b] : &p->chunk[c].blk[b];
}
static inline const RtBoundary *rt_prog_boundary(const RtProg *p, int c, int k) {
  return c == 0 ? &p->bnd[k] : &p->chunk[c].bnd[k];
}
/* The chunks of a program: nchunks, and 1 for an RtProg built by hand (nchunks 0). */
static inline int rt_prog_nchunks(const RtProg *p) { return p->nchunks > 1 ? p->nchunks : 1; }
/* The positions of a sequence one rank holds: seq/cp (context parallelism; cp rank r holds
 * [r·seq/cp, (r+1)·seq/cp)), seq without. */
static inline int rt_prog_seq_local(const RtProg *p) { return p->cp > 1 ? p->seq / p->cp : p->seq; }
/* The world the mesh makes: tp·pp·dp·cp ranks, rank ((dp_rank·pp + stage)·cp + cp_rank)·tp + tp_rank. */
static inline int64_t rt_prog_nranks(const RtProg *p) {
  return (int64_t)p->tp * p->pp * p->dp * (p->cp > 1 ? p->cp : 1);
}
/* The name of chunk c's block b as the listing writes it: "forward", "forward:1" (no suffix in a
 * program without chunks, and for the optimizer block). buf: at least 24 bytes. */
const char *rt_prog_block_label(const RtProg *p, int c, int b, char *buf, size_t n);

/* Parse a listing held in memory (text[0..len), need not be NUL-terminated). path names it in
 * messages. Every check of docs/stage-format.md is made here: version, hash, order, syntax,
 * bounds of every operand, schedule rules. On error *out is NULL. */
int rt_prog_parse(const char *path, const char *text, size_t len, RtProg **out, char *err, size_t errlen);
/* Read the file and parse it. */
int rt_prog_load(const char *path, RtProg **out, char *err, size_t errlen);
void rt_prog_free(RtProg *p); /* NULL ok */

uint64_t rt_fnv1a64(const void *data, size_t n);
const char *rt_kernel_file_ext(int kind); /* "so", "cl", "cubin", "ptx" */
/* DIR/<kernels base>.EXT, the kernel file of RtKernelFile kind, read whole and checked against
 * the listing before any device uses it: its size, then its FNV-1a 64 hash. Returns its bytes
 * (NUL-terminated; *len without the NUL, which the caller frees) or NULL with a message naming
 * the file, the listing's line and the expected and found size or hash. path (may be NULL)
 * receives the file's path. */
char *rt_kernel_file_read(const RtProg *p, const char *dir, int kind, size_t *len, char *path, size_t pathlen,
                          char *err, size_t errlen);
const char *rt_region_name(int r);
const char *rt_block_name(int b);
const char *rt_scalar_name(int s);

/* A pipeline message: the comm op of boundary kind `kind` for (local) micro-batch mb of a chunk
 * with virtual stage vstage whose neighbours are the world ranks prev and next, on a rank holding
 * nchunks chunks of a pipeline of pp ranks, by pp_boundary.h's rules; used by the executor that
 * sends and by the start-up check that simulates every rank. */
typedef struct {
  int send; /* 1: this rank sends, 0: it receives */
  int peer; /* the neighbour's world rank (-1: none; may be this rank) */
  int tag;  /* pp_boundary_tag: 2*mb (2*mb + 1 for the gradient) without chunks */
} RtMsg;
RtMsg rt_boundary_msg(int kind, int mb, int vstage, int prev, int next, int pp, int nchunks);
/* The mesh of a listing: reads the file and checks its header up to the `mesh` line only (version,
 * hash, order), so every rank can learn the world size from DIR/rank0.prog. */
int rt_prog_read_mesh(const char *path, int *tp, int *pp, int *dp, int *cp, char *err, size_t errlen);

#endif /* RT_PROG_H */
