/* rt_comm_impl.h - what the files of ppr's transport share, and only they (rt_comm.c, rt_comm_watch.c,
 * rt_comm_dev.c): the RtComm, MPI_CHECK, and the watchdog's waits (rt_comm_watch.c). */
#ifndef RT_COMM_IMPL_H
#define RT_COMM_IMPL_H

#include "rt_comm.h"

#include <mpi.h>

#ifdef PPR_CUDA
#include <nccl.h>
/* NCCL's functions ppr calls, loaded when a rank's communicators go to NCCL (rt_comm_use_device):
 * ppr starts without the library elsewhere */
// clang-format off
#define NCCL_FUNCTIONS(X) \
  X(ncclGetErrorString) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommAbort) \
  X(ncclCommGetAsyncError) X(ncclGroupStart) X(ncclGroupEnd) X(ncclSend) X(ncclRecv) X(ncclAllReduce) \
  X(ncclAllGather) X(ncclReduceScatter)
// clang-format on
#define NCCL_DECLARE(f) extern __typeof__(f) *p_##f;
NCCL_FUNCTIONS(NCCL_DECLARE)
/* below, each NCCL name calls through its pointer */
#define ncclGetErrorString    (*p_ncclGetErrorString)
#define ncclGetUniqueId       (*p_ncclGetUniqueId)
#define ncclCommInitRank      (*p_ncclCommInitRank)
#define ncclCommDestroy       (*p_ncclCommDestroy)
#define ncclCommAbort         (*p_ncclCommAbort)
#define ncclCommGetAsyncError (*p_ncclCommGetAsyncError)
#define ncclGroupStart        (*p_ncclGroupStart)
#define ncclGroupEnd          (*p_ncclGroupEnd)
#define ncclSend              (*p_ncclSend)
#define ncclRecv              (*p_ncclRecv)
#define ncclAllReduce         (*p_ncclAllReduce)
#define ncclAllGather         (*p_ncclAllGather)
#define ncclReduceScatter     (*p_ncclReduceScatter)
#endif

#define MAX_REQ   4
#define MAX_EARLY 64 /* receives posted ahead at most: more are posted at their entry */

/* The communicators a collective runs on: the watchdog counts the collectives of each, so that
 * the members of one call have the same count. G_SUB + i: sub[i]. */
enum { G_WORLD, G_AUX, G_PP, G_TP, G_DP, G_EMB, G_CP, G_SUB };

/* A message's host copy: a received one is written to the device after the wait. */
typedef struct {
  void *buf;
  size_t cap;
  int64_t off, bytes; /* recv into the device at off; bytes 0: nothing to write */
} Stage;

struct RtComm {
  int mpi; /* MPI_Init_thread ran */
  int rank, size;
  int local_rank, local_size;   /* among the ranks on this machine (MPI_COMM_TYPE_SHARED), and their count */
  MPI_Comm world;               /* a duplicate of MPI_COMM_WORLD: the pipeline's messages */
  MPI_Comm aux;                 /* another: checks, sums, gathers, broadcasts */
  MPI_Comm wd;                  /* another: the watchdog's notices */
  MPI_Comm pp, tp, dp, emb, cp; /* from rt_comm_groups; MPI_COMM_NULL when absent */
  int nsub;                     /* the tp/R groups some rank's listing uses, one communicator per R */
  int *sub_r;
  MPI_Comm *sub;
  MPI_Request req[MAX_REQ];
  int nreq;
  Stage stage[MAX_REQ]; /* per request: the host copy of a device buffer, or none */
  float *red;           /* allreduce scratch: red_cap floats */
  size_t red_cap;
  float *host; /* an allreduce's host copy of a device buffer: host_cap floats */
  size_t host_cap;
  int *ints; /* allreduce counts and displacements: 4 * ints_cap */
  int ints_cap;
  int nccl;           /* rt_comm_use_device: NCCL carries the messages and collectives */
  double timeout;     /* the watchdog's, seconds; 0: none */
  RtWhere where;      /* what the rank is doing (rt_comm_set_where) */
  int64_t seq[G_SUB]; /* per communicator: the collectives started on it */
  int64_t *sub_seq;   /* the same for sub[i] */
  RtP2p msg[MAX_REQ]; /* the messages of req */
  /* receives posted ahead of their comm entry (rt_comm_recv_early): waited for by handle */
  MPI_Request ereq[MAX_EARLY];
  RtP2p emsg[MAX_EARLY];
  Stage estage[MAX_EARLY];
  int eused[MAX_EARLY];
  /* sends in flight: posted from a host copy, so the arena may change at once; waited for by
   * rt_comm_p2p_flush (before the optimizer) or found done at a later post */
  MPI_Request *sreq;
  RtP2p *smsg;
  Stage *sbuf; /* sbuf[i].buf: the copy send i reads; kept (its capacity reused) once done */
  int nsend, scap;
  int stop_sig, stop_rank; /* rt_comm_step_sum's verdict: a rank asked to stop */
#ifdef PPR_CUDA
  ncclComm_t npp, ntp, ndp, nemb, ncp, *nccl_sub; /* one per MPI group, NULL where the group is absent */
  int prev, next, pp_prev, pp_next;               /* the pipeline neighbours: world ranks, ranks in npp */
  int nccl_p2p; /* NCCL carries the pipeline's messages too (not in programs with chunks: MPI does) */
  /* the first NCCL operation queued since the device's queue was last seen empty: what a stuck
   * queue waits for first (the queue runs in order) */
  int nccl_busy, nccl_nmsg;
  RtP2p nccl_msg[2];
  RtWhere nccl_where;
  const char *nccl_op;
  MPI_Comm nccl_g;
  int64_t nccl_seq, nccl_count;
#endif
};

/* Every MPI call goes through this: on failure, the call, MPI's message and where, then MPI_Abort. */
_Noreturn void rt_comm_mpi_fail(int rc, const char *call, const char *file, int line);
#define MPI_CHECK(call)                                                                                                \
  do {                                                                                                                 \
    int rc_ = (call);                                                                                                  \
    if (rc_ != MPI_SUCCESS) rt_comm_mpi_fail(rc_, #call, __FILE__, __LINE__);                                          \
  } while (0)

/* The watchdog ends the job: from now on a stop signal has nothing to stop (rt_comm_stop_requested is -1). */
void rt_comm_stop_ending(void);
/* rt_comm_allgather over the world with op, what it is, in the watchdog's message. Collective. */
void rt_comm_allgather_named(RtComm *c, const void *mine, void *all, size_t bytes, const char *op);

/* ---- the watchdog (rt_comm_watch.c) --------------------------------------------------------- */

/* What a wait is for. A collective: op, on g (its G_* gid, and its count there). Messages: n of
 * them, msg[i] the one of request i; mop what they are for when not the pipeline's. */
typedef struct {
  const char *op;
  MPI_Comm g;
  int gid;
  int64_t seq;
  int64_t count;    /* of the collective's elements; -1: not said */
  const char *unit; /* "floats", "bytes" */
  int n;
  const RtP2p *msg;
  const char *mop;
} Wait;

int rt_comm_group_id(const RtComm *c, MPI_Comm g); /* G_*: the communicator g among c's */
/* The next collective on g: its count among g's collectives, the same on every member. */
int64_t rt_comm_next_seq(RtComm *c, MPI_Comm g, int *gid);
int rt_comm_notice_waiting(RtComm *c); /* a notice from another rank is waiting */
/* The wait w (its requests req, NULL: all of w's messages pending) made no progress since `since`:
 * for the timeout (timed_out), or another rank's watchdog said so (a notice). Tell every other
 * rank, hear what the ranks that are waiting too say during the grace period, print what this
 * rank waits for, then end the job. */
_Noreturn void rt_comm_stuck(RtComm *c, const Wait *w, const MPI_Request *req, const RtWhere *where, double since,
                             int timed_out);
/* Waits for the n requests of w (n <= MAX_REQ), polled, under the watchdog. */
void rt_comm_wait_reqs(RtComm *c, int n, MPI_Request *req, const Wait *w);
/* Waits for the collective rq on g (op: what it is, for the watchdog's message). */
void rt_comm_coll_wait(RtComm *c, MPI_Comm g, MPI_Request *rq, const char *op, int64_t count, const char *unit);

#endif /* RT_COMM_IMPL_H */
