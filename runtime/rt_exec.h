/* rt_exec.h - the executor (rt_exec.c): a rank's program run on its device, a training step, a
 * validation pass, the next logits; the parameters' init (rt_init.c); the default training text
 * (rt_text.c). */
#ifndef RT_EXEC_H
#define RT_EXEC_H

#include "rt_prog.h"

/* ---- the executor (rt_exec.c) -------------------------------------------------------------- */

typedef struct RtExec RtExec;

typedef struct {
  double lr, beta1, beta2, eps, wd;
  double clip; /* clip_max; used only when use_clip */
  int use_clip;
  uint64_t dropout_seed; /* dropout's Philox key (s:seed) */
} RtHyper;

/* Called once per step in the optimizer block just before its grad_norm runs: the gradients are
 * accumulated over the micro-batches, summed over the embedding group (allreduce_tied) and not
 * yet clipped. Non-zero return aborts the step. Over MPI every rank calls it at the same point. */
typedef int (*RtHook)(void *ctx, RtExec *x, char *err, size_t errlen);

typedef struct RtComm RtComm; /* rt_comm.h */

/* The timeline of --trace: one event per F and B block, per comm entry (posting the messages,
 * then waiting for them), per OPT (with the collectives and the hook inside it as their own
 * events), per zero_grads, the step itself and the step's loss sum. */
typedef enum {
  RT_EV_STEP,
  RT_EV_ZERO,
  RT_EV_F,
  RT_EV_B,
  RT_EV_W,
  RT_EV_OPT,
  RT_EV_POST, /* a comm entry: MPI_Isend / MPI_Irecv */
  RT_EV_WAIT, /* a comm entry: MPI_Waitall */
  RT_EV_COLL, /* allreduce_tied, the grad_norm sum, the loss sum */
  RT_EV_HOOK  /* --save-grads */
} RtEventKind;

typedef struct {
  double ts, dur;     /* microseconds from the trace's start */
  int32_t kind, step; /* RtEventKind; the step, 1-based */
  int32_t chunk, mb;  /* F, B, W: the chunk and the micro-batch; else -1 */
  char name[48];
} RtEvent;

typedef struct RtDev RtDev; /* rt_dev.h */

/* Allocates the zeroed arena on the device and loads the stage's kernels there (DIR/<kernels>.so,
 * .cl, ...: the device's kind of file, checked against the listing's hash). p and dev must
 * outlive the executor; rt_exec_close does not close the device. */
int rt_exec_open(const RtProg *p, const char *dir, RtDev *dev, RtExec **out, char *err, size_t errlen);
void rt_exec_close(RtExec *x); /* NULL ok; prints the PPR_PROFILE report */
/* The communication of a multi-rank world (rt_comm.h); without it (NULL, the default) the
 * program runs alone: sums are local and a comm entry is an internal error. */
void rt_exec_set_comm(RtExec *x, RtComm *c);
RtDev *rt_exec_device(RtExec *x);
double rt_now_ms(void); /* CLOCK_MONOTONIC in milliseconds */
/* Start recording the timeline, times relative to t0_ms (an rt_now_ms value). */
void rt_exec_trace(RtExec *x, double t0_ms);
/* The events so far (NULL, 0 when not tracing); *oom when an allocation failed and events were lost. */
const RtEvent *rt_exec_events(const RtExec *x, int64_t *n, int *oom);
/* Of the last step while tracing: its wall time and the time in compute (F, B, and OPT without
 * its collectives), milliseconds; the --save-grads hook counts in neither. */
void rt_exec_step_times(const RtExec *x, double *wall_ms, double *compute_ms);
/* Param i's numel floats in region (RT_REG_PARAMS: its values; RT_REG_GRADS: its gradient
 * accumulator; RT_REG_ADAM_M, RT_REG_ADAM_V: its AdamW moments) to host memory dst; or its values
 * (rt_exec_write_param) or those of a region from src. Non-zero with the device's message in err when
 * the device fails. */
int rt_exec_read_param(RtExec *x, int i, int region, float *dst, char *err, size_t errlen);
int rt_exec_write_param(RtExec *x, int i, const float *src, char *err, size_t errlen);
int rt_exec_write_region(RtExec *x, int i, int region, const float *src, char *err, size_t errlen);
/* ZeRO-1 (the listing's zero line): each rank holds its shard of the summed gradients and of the
 * moments alone. rt_exec_zero_gather, a collective over the data-parallel group, gathers every
 * member's shard of region (RT_REG_GRADS, RT_REG_ADAM_M or RT_REG_ADAM_V) on the host, where
 * rt_exec_read_param then reads that region's params until rt_exec_zero_release; writing a
 * moment writes the rank's shard of it. Without zero, nothing to do. */
int rt_exec_zero_gather(RtExec *x, int region, char *err, size_t errlen);
void rt_exec_zero_release(RtExec *x);
/* What the executor's collective calls return besides 0: a failure every rank shares (the hook's,
 * a message the ranks agreed on), or this rank's device failing, which the other ranks do not know
 * of (the caller ends the job). */
enum { RT_FAILED = -1, RT_DEVICE_FAILED = -2 };

/* One training step: step is 0-based (it selects the data; the AdamW t is step + 1).
 * *loss = the step loss (the sum of the last stage's loss instructions' values / microbatches (the
 * global M), summed over the last stage's ranks of tp_rank 0 of every replica: the same on every rank),
 * *grad_norm = the grad_norm instruction's norm over the world's owned params (pre-clip).
 * Returns 0; RT_FAILED when the hook failed (every rank has called it: a collective verdict);
 * RT_DEVICE_FAILED when this rank's device failed (the message in err; the other ranks do not know). */
int rt_exec_step(RtExec *x, const RtData *d, int64_t step, const RtHyper *h, RtHook before_opt, void *ctx, double *loss,
                 double *grad_norm, char *err, size_t errlen);
/* A validation pass after 0-based step `step` (named in the watchdog's messages): the schedule's
 * forward entries and forward messages only (no gradient, moment or param is touched) over the
 * first k micro-batches of d (micro-batch i of the pass reads rt_data_batch(d, 0, i, k, ...), on
 * every mesh), in runs of the schedule's M micro-batches. *loss = the mean of the last (virtual)
 * stage's loss values over the k micro-batches, summed over the world as the step's loss: the same
 * on every rank. Collective. 0, or RT_DEVICE_FAILED when this rank's device failed (the message in err). */
int rt_exec_eval(RtExec *x, const RtData *d, int64_t step, int k, double *loss, char *err, size_t errlen);
/* The logits that follow a sequence: one forward pass (rt_exec_eval's entries) of every replica's
 * local micro-batch 0, whose first sequence holds tokens[0..n) (1 <= n <= seq; the rest of it, the
 * other sequences and the labels token 0), then that sequence's logits at position n - 1 (the
 * program's `logits`: a generation program's output, or what a training program's loss reads),
 * gathered on world rank 0 into row[0..vocab) (elsewhere row is not touched, and may be NULL).
 * Collective. 0; RT_FAILED with the message in err; RT_DEVICE_FAILED when this rank's device failed. */
int rt_exec_next_logits(RtExec *x, const int32_t *tokens, int n, float *row, char *err, size_t errlen);
/* The FLOPs of one step's GEMMs on this rank: 2*m*n*k*batch of each gemm of the blocks its
 * schedule's F, B and W entries run. */
double rt_exec_gemm_flops(const RtExec *x);

/* ---- parameter init (rt_init.c) ------------------------------------------------------------ */

uint64_t rt_splitmix64(uint64_t x);
/* The seed-init value of element i (dense index) of the tensor `name` with normal(0, std). */
float rt_init_normal_value(uint64_t seed, const char *name, int64_t i, double std);
/* Fill every param per its `init` (normal, ones, zeros); mesh-independent: a shard's element takes
 * the value of its element of the dense tensor, padding rows are 0. */
int rt_init_seed(const RtProg *p, RtExec *x, uint64_t seed, char *err, size_t errlen);
/* What rt_init_load skipped or mapped, for the line ppr prints. */
typedef struct {
  int skipped;      /* non-parameter buffers skipped: rotary inv_freq, GPT-2's attention masks */
  int rotary, mask; /* of them: *.rotary_emb.inv_freq; *.attn.bias and *.attn.masked_bias */
  int stripped;     /* the checkpoint's names all lack the listing's checkpoint_prefix */
} RtInitInfo;
/* Load every param of this rank (copies included) from a checkpoint (rt_ckpt_open: a safetensors
 * file, a sharded checkpoint's index or a model folder) by checkpoint name (F32/F16/BF16/F64); a
 * sharded param reads its slice of the dense tensor (padding rows 0). The checkpoint is checked
 * against the whole model (the model_param lines, or this rank's params when there are none): a
 * tensor is extra when it is not a model param (nor lm_head.weight when model_tied, nor a known
 * non-parameter buffer, which is skipped), and every model param in it must have its (dense)
 * shape. With the listing's checkpoint_prefix P, a checkpoint none of whose names starts with P
 * names the params that start with P without it. model_tied: the model has a tied embedding (some
 * rank holds a tied param). info (may be NULL) says what was skipped. */
int rt_init_load(const RtProg *p, RtExec *x, const char *path, int model_tied, RtInitInfo *info, char *err,
                 size_t errlen);
/* --resume's optimizer file (a safetensors file): the AdamW moments of every model param as dense
 * tensors "exp_avg.NAME" (adam_m) and "exp_avg_sq.NAME" (adam_v), each of the param's dense shape,
 * and nothing else; every param of this rank (copies included) reads its slice of both. Checked
 * whole before anything is written. */
int rt_init_load_moments(const RtProg *p, RtExec *x, const char *path, char *err, size_t errlen);

/* ---- the default training text (rt_text.c): bytes are tokens ------------------------------- */

extern const char rt_default_text[];
extern const size_t rt_default_text_len;

#endif /* RT_EXEC_H */
