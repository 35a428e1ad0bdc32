/* rt_comm.h - ppr's transport (rt_comm.c, rt_comm_watch.c, rt_comm_dev.c): MPI when a launcher started the process,
 * else a one-rank world without MPI; messages and collectives on device buffers. */
#ifndef RT_COMM_H
#define RT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "rt_dev.h"
#include "rt_prog.h"

/*
 * Every function takes the RtComm of rt_comm_init; a NULL RtComm is a one-rank world (rank 0 of
 * 1, no MPI). Only rt_comm*.c include <mpi.h> (through rt_comm_impl.h). A failing MPI call is
 * not returned: it prints "ppr: error: MPI: CALL failed: MPI_Error_string [file:line]" on stderr
 * and calls MPI_Abort; so does a failing device copy inside a message or collective.
 *
 * Messages and collectives name device buffers by their arena offset. Where the device's arena
 * is host memory (rt_dev_host) MPI works on it directly; otherwise the bytes are staged through a
 * host copy: read from the device before a send or a reduction, written back after a receive or a
 * reduction.
 */
typedef struct RtComm RtComm;

/* Starts MPI (MPI_Init_thread, funneled) when the process was started by a launcher (mpirun:
 * the environment holds OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK or PMI_SIZE) or PPR_MPI=1 is
 * set; otherwise the world is this one process and MPI is never initialised (*out is still a
 * valid RtComm). Returns non-zero only when the MPI library refuses to start. */
int rt_comm_init(int *argc, char ***argv, RtComm **out, char *err, size_t errlen);
void rt_comm_finalize(RtComm *c);                  /* MPI_Finalize when started; frees c */
_Noreturn void rt_comm_abort(RtComm *c, int code); /* MPI_Abort when started, else exit */
int rt_comm_rank(const RtComm *c);                 /* world rank */
int rt_comm_size(const RtComm *c);                 /* world size */
int rt_comm_uses_mpi(const RtComm *c);
int rt_comm_local_rank(const RtComm *c); /* among the ranks on this machine */
int rt_comm_local_size(const RtComm *c); /* the ranks on this machine (1 without MPI) */

/* ---- the watchdog ---------------------------------------------------------------------------- */

/*
 * Every wait for a message or a collective over MPI is a nonblocking operation polled with
 * MPI_Testsome: for 50 us with sched_yield between polls, then sleeping between them (50 us at
 * first, each sleep 1.5 times the last, up to 1 ms), so a waiting rank does not spin on a core.
 * When a wait makes no progress (no request of it completes; time the process did not run does
 * not count) for the timeout, the rank prints "ppr: rank R: error: no progress for T s: waiting
 * for rank P (WHAT; WHERE)" and tells every other rank (a message on a communicator of its own);
 * each rank that has been waiting itself for the grace period (a quarter of the timeout, at most
 * 1 s) prints what it waits for the same way, and after that period the job ends with MPI_Abort
 * (exit status 1). Of a collective, the ranks named are the members of its group that did not
 * report being in the same call. With NCCL, the device's queue is watched the same way
 * (rt_comm_wait, rt_comm_before_host), naming its first NCCL operation.
 */
#define RT_COMM_TIMEOUT 300.0                        /* seconds, the default */
void rt_comm_set_timeout(RtComm *c, double seconds); /* 0: wait forever */

/* What the rank is doing, named in the watchdog's message (the executor and ppr set it before
 * the messages and collectives they start). Fields of -1 (0 for line, NULL for strings) are left
 * out. */
typedef struct {
  int64_t step;     /* 0-based; printed 1-based */
  int entry;        /* the schedule entry */
  int block, instr; /* RT_BLK_* and the instruction's index in it */
  int chunk;        /* the block's chunk: named ("forward:1") when > 0 */
  int mb;           /* the micro-batch (the listing's local number) */
  int line;         /* the listing's line */
  const char *file; /* the listing */
  const char *what; /* why, in words: "the step's loss", "--save: the weights to rank 0" */
} RtWhere;
void rt_comm_set_where(RtComm *c, const RtWhere *w);
void rt_comm_set_what(RtComm *c, const char *what); /* outside a step: only what */

/* ---- stopping at a step boundary (SIGTERM, SIGINT) --------------------------------------------- */

/* Async-signal-safe: this process asks the world to stop after the current step (sig: the
 * signal's number, > 0). */
void rt_comm_request_stop(int sig);
/* This process's request: the signal, or 0; -1 when the watchdog is ending the job (a signal has
 * nothing to stop then). */
int rt_comm_stop_requested(void);
/* rt_comm_sum that also tells every rank whether any rank asked to stop (rt_comm_request_stop
 * before its call): the same answer on every rank, read with rt_comm_stopping. Collective. */
double rt_comm_step_sum(RtComm *c, double v);
/* After rt_comm_step_sum: 1 when some rank asked to stop; *sig and *rank: the first such rank's
 * signal and world rank. */
int rt_comm_stopping(const RtComm *c, int *sig, int *rank);

/* ---- collectives over the world (every rank calls them, in the same order) ---------------- */

int rt_comm_all_ok(RtComm *c, int ok); /* 1 when ok is non-zero on every rank */
void rt_comm_barrier(RtComm *c);
/* The sum of v over the world, added in rank order on every rank: the same bits everywhere. */
double rt_comm_sum(RtComm *c, double v);
void rt_comm_allgather(RtComm *c, const void *mine, void *all, size_t bytes); /* all: size * bytes */
void rt_comm_bcast(RtComm *c, void *buf, size_t bytes, int root);
/* The same over the data-parallel group (every dp and cp rank of this rank's stage and tp_rank):
 * root is the member's index in it (ZeRO-1's shards, gathered on the host to be saved). */
void rt_comm_dp_bcast(RtComm *c, void *buf, size_t bytes, int root);
/* Gathers a block of bytes from every rank on rank 0: there *all (malloc'd; free it) holds the
 * blocks in rank order and sizes[r] (sizes has world-size entries) their lengths. Elsewhere *all
 * is NULL and sizes is not touched. Returns non-zero (on rank 0 only) when out of memory; the
 * transfers happen anyway, so no rank waits forever. */
int rt_comm_gather(RtComm *c, const void *mine, size_t n, unsigned char **all, size_t *sizes, char *err, size_t errlen);

/* The largest message tag the MPI library allows (INT32_MAX without MPI). */
int rt_comm_tag_ub(RtComm *c);
/* An internal error: the message and where, then MPI_Abort (or exit). */
_Noreturn void rt_comm_internal(const char *what, const char *file, int line);
#define RT_INTERNAL(what) rt_comm_internal((what), __FILE__, __LINE__)

/* ---- the program's communicators ----------------------------------------------------------- */

/* After rt_mesh_check: the communicators from the coordinates (MPI_Comm_split): the pipeline,
 * tensor-parallel (and its tp/R runs that any listing uses) and data-parallel groups and the
 * embedding group (the ranks holding a shared param with the same tp and dp coordinates).
 * Collective. */
void rt_comm_groups(RtComm *c, const RtProg *p);

#ifdef PPR_CUDA
/* NCCL, loaded when a rank's communicators go to NCCL (the toolkit's major version, through ppr's
 * run path) with every function ppr calls: 0, or non-zero with the reason in err (rt_util_load_lib's).
 * rt_comm_nccl_error_name, after it: NCCL's text for a result, through the loaded table. */
int rt_comm_load_nccl(char *err, size_t errlen);
const char *rt_comm_nccl_error_name(int result);
#endif

/* After rt_comm_groups, with this rank's device: on a cuda device, when every rank of the world
 * has a GPU of its own, NCCL carries the messages and collectives from here on (a communicator
 * per group, made from an ncclUniqueId broadcast over MPI; a comm entry's messages inside one
 * ncclGroupStart/End, on the device's stream); when ranks share a GPU, which NCCL refuses, MPI
 * staged through host memory does, and rank 0 says so once. When the programs hold chunks of
 * layers, the pipeline's messages go through host-staged MPI even with NCCL (their order is proven
 * for sends that do not wait, which NCCL's sends do not give; rank 0 says so once). Other devices:
 * MPI. Collective. */
void rt_comm_use_device(RtComm *c, RtDev *d, const RtProg *p);
/* Waits for the device's queued work (with NCCL: watching for its asynchronous errors meanwhile;
 * a failed or dead peer ends the job, and so does no progress for the timeout). 0, or -1 with the
 * device's message. */
int rt_comm_wait(RtComm *c, RtDev *d);
/* Before the host reads or writes the device (which waits for the device's queue): with NCCL,
 * rt_comm_wait, so that a stuck message is watched; otherwise nothing (0). */
int rt_comm_before_host(RtComm *c, RtDev *d);

/* The pipeline's point-to-point messages: post them all (MPI_Isend / MPI_Irecv on the world
 * communicator, peer = a world rank), then wait for the receives (polled, under the watchdog). A
 * send goes out of a host copy of its buffer and stays in flight, so the sender computes on while
 * its peer has not yet taken it; rt_comm_p2p_flush waits for every send in flight (the executor:
 * before the optimizer). The tag says what a message is (rt_boundary_msg): 2*mb for activations,
 * 2*mb + 1 for gradients without chunks (pp_boundary_tag). A message to this rank itself goes
 * through MPI like any other. With NCCL the messages are ordered on the device's stream instead,
 * except in programs with chunks of layers (rt_comm_use_device). */
typedef struct {
  int send; /* 1: MPI_Isend, 0: MPI_Irecv */
  int peer, tag;
  int64_t off, bytes; /* the device buffer: arena offset and size */
  int mb, chunk;      /* what the message is, for the watchdog: the micro-batch; the chunk, -1 without chunks */
} RtP2p;
void rt_comm_p2p_post(RtComm *c, RtDev *d, int n, const RtP2p *ops); /* n <= 4 */
void rt_comm_p2p_wait(RtComm *c, RtDev *d);
/* A receive posted ahead of its comm entry, as soon as its buffer is free (overlap): a handle for
 * rt_comm_recv_wait, or -1 when it is to be posted at its entry (NCCL's stream-ordered messages,
 * or MAX_EARLY in flight). */
int rt_comm_recv_early(RtComm *c, RtDev *d, const RtP2p *o);
void rt_comm_recv_wait(RtComm *c, RtDev *d, int h);
void rt_comm_p2p_flush(RtComm *c);

/* SUM in place over the embedding group (allreduce_tied): count floats at arena offset off. */
void rt_comm_allreduce_emb(RtComm *c, RtDev *d, int64_t off, int64_t count);
/* `allreduce GROUP OP`: in place over the TP group (RT_G_TP), the runs of sub consecutive TP ranks
 * (RT_G_TP_SUB) or the DP group (RT_G_DP); op RT_OP_SUM or RT_OP_MAX. Deterministic: every element
 * is reduced in the group's rank order, once, and every member gets the same bits. A group of one
 * (or a one-rank world) leaves the buffer as it is. count elements of dtype (PP_F32, or PP_BF16:
 * widened to f32, reduced in f32 and rounded to nearest even once; through NCCL, its bf16 sum). */
void rt_comm_allreduce(RtComm *c, RtDev *d, int group, int sub, int op, int64_t off, int64_t count, PpDType dtype);
/* Sequence (context) parallelism over the TP (cp) group, RT_G_TP (RT_G_CP): every member's count
 * elements of dtype (f32 or bf16, copied as they are) at part, in rank order, into whole; (floats)
 * the n·count at whole summed over the group of n (rank order: the allreduce's bits), member r's
 * count into part. */
void rt_comm_seq_gather(RtComm *c, RtDev *d, int group, int64_t part, int64_t whole, int64_t count, PpDType dtype);
void rt_comm_seq_scatter(RtComm *c, RtDev *d, int group, int64_t whole, int64_t part, int64_t count);

#endif /* RT_COMM_H */
