/* rt_comm_dev.c - ppr's messages and collectives on device buffers: the pipeline's point-to-point messages, the
 * deterministic allreduce (staged through host memory when the arena is not host memory), and NCCL where it carries
 * them (cuda). */
#include "rt_comm_impl.h"
#include "rt_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- point to point and the embedding group ------------------------------------------------ */

/* A device failure inside the transport ends the job, as a failed MPI call does. */
_Noreturn static void dev_fail(RtComm *c, RtDev *d) {
  fprintf(stderr, "ppr: error: rank %d: %s\n", c ? c->rank : 0, rt_dev_error(d));
  fflush(stderr);
  if (c && c->mpi) MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* A host buffer of at least n bytes in *buf (capacity *cap). */
static void *room(void **buf, size_t *cap, size_t n) {
  if (n > *cap) {
    free(*buf);
    *buf = malloc(n ? n : 1);
    if (!*buf) RT_INTERNAL("out of memory");
    *cap = n;
  }
  return *buf;
}

#ifdef PPR_CUDA
/* Every NCCL call: on failure the call, where, NCCL's message, then the job ends. */
#define NCCL_CHECK(call)                                                                                               \
  do {                                                                                                                 \
    ncclResult_t rc_ = (call);                                                                                         \
    if (rc_ != ncclSuccess && rc_ != ncclInProgress) nccl_fail(rc_, #call, __FILE__, __LINE__);                        \
  } while (0)

_Noreturn static void nccl_fail(ncclResult_t rc, const char *call, const char *file, int line) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "ppr: error: rank %d: NCCL: %s failed: %s [%s:%d]\n", rank, call, ncclGetErrorString(rc), file, line);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

#define NCCL_DEFINE(f) __typeof__(f) *p_##f;
NCCL_FUNCTIONS(NCCL_DEFINE)

int rt_comm_load_nccl(char *err, size_t errlen) {
  static void *lib;
#define NCCL_NAME(f) #f,
#define NCCL_SLOT(f) (void *)&p_##f,
  static const char *const names[] = {NCCL_FUNCTIONS(NCCL_NAME)};
  void *const slots[] = {NCCL_FUNCTIONS(NCCL_SLOT)};
  return rt_util_load_lib(&lib, "libnccl.so." RT_UTIL_STR(NCCL_MAJOR), names, slots,
                          (int)(sizeof slots / sizeof *slots), err, errlen);
}

const char *rt_comm_nccl_error_name(int result) { return ncclGetErrorString((ncclResult_t)result); }

/* NCCL for this rank, or the job ends naming what to install */
static void load_nccl(void) {
  char why[512];
  if (!rt_comm_load_nccl(why, sizeof why)) return;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "ppr: error: rank %d: --device cuda with a GPU a rank needs NCCL: %s; install NCCL %d\n", rank, why,
          NCCL_MAJOR);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* One NCCL communicator over the members of an MPI one: the id made by its rank 0, broadcast. */
static ncclComm_t nccl_over(RtComm *c, MPI_Comm g) {
  if (g == MPI_COMM_NULL) return NULL;
  int n = 0, me = 0;
  MPI_CHECK(MPI_Comm_size(g, &n));
  MPI_CHECK(MPI_Comm_rank(g, &me));
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (me == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Request rq;
  MPI_CHECK(MPI_Ibcast(&id, (int)sizeof id, MPI_BYTE, 0, g, &rq));
  rt_comm_coll_wait(c, g, &rq, "the broadcast of an NCCL id", (int64_t)sizeof id, "bytes");
  ncclComm_t comm = NULL;
  NCCL_CHECK(ncclCommInitRank(&comm, n, id, me));
  return comm;
}

/* rank's place in the MPI group g (MPI_UNDEFINED when not a member) */
static int rank_in(RtComm *c, MPI_Comm g, int rank) {
  MPI_Group wg, gg;
  int r = MPI_UNDEFINED;
  MPI_CHECK(MPI_Comm_group(c->world, &wg));
  MPI_CHECK(MPI_Comm_group(g, &gg));
  MPI_CHECK(MPI_Group_translate_ranks(wg, 1, &rank, gg, &r));
  MPI_CHECK(MPI_Group_free(&wg));
  MPI_CHECK(MPI_Group_free(&gg));
  return r;
}

static void nccl_p2p(RtComm *c, RtDev *d, int n, const RtP2p *ops) {
  if (!c->nccl_busy && n <= 2) { /* the first operation of the queue: what it waits for if it stops */
    c->nccl_busy = 1;
    c->nccl_op = NULL, c->nccl_g = MPI_COMM_NULL, c->nccl_nmsg = n;
    memcpy(c->nccl_msg, ops, (size_t)n * sizeof *ops);
    c->nccl_where = c->where;
  }
  NCCL_CHECK(ncclGroupStart()); /* a comm entry's send and receive go together */
  for (int i = 0; i < n; i++) {
    const RtP2p *o = &ops[i];
    void *stream = NULL, *buf = rt_dev_native(d, o->off, &stream);
    int peer = o->peer == c->prev ? c->pp_prev : o->peer == c->next ? c->pp_next : -1;
    if (peer < 0) RT_INTERNAL("a pipeline message to a rank that is not a neighbour");
    /* the bytes as they are: f32 or bf16 elements alike */
    if (o->send) NCCL_CHECK(ncclSend(buf, (size_t)o->bytes, ncclUint8, peer, c->npp, (cudaStream_t)stream));
    else NCCL_CHECK(ncclRecv(buf, (size_t)o->bytes, ncclUint8, peer, c->npp, (cudaStream_t)stream));
  }
  NCCL_CHECK(ncclGroupEnd());
}
#endif

/* A pipeline message as MPI elements: 4-byte ones (f32, or bf16 pairs) where the bytes allow, else
 * 2-byte (an odd number of bf16). MPI moves the bytes as they are either way. */
static MPI_Datatype msg_type(const RtP2p *o) { return o->bytes % 4 ? MPI_UINT16_T : MPI_FLOAT; }
static int msg_count(const RtP2p *o) { return (int)(o->bytes % 4 ? o->bytes / 2 : o->bytes / 4); }

void rt_comm_use_device(RtComm *c, RtDev *d, const RtProg *p) {
  (void)p;
  if (!c || !c->mpi || !d->uid[0]) return;
#ifdef PPR_CUDA
  /* NCCL takes one rank per GPU: ranks that share one go through host-staged MPI */
  char(*uids)[sizeof d->uid] = malloc((size_t)c->size * sizeof *uids);
  if (!uids) RT_INTERNAL("out of memory");
  rt_comm_allgather_named(c, d->uid, uids, sizeof d->uid, "the allgather of the GPUs' ids");
  int shared = 0;
  for (int a = 0; a < c->size && !shared; a++)
    for (int b = a + 1; b < c->size && !shared; b++) shared = !strncmp(uids[a], uids[b], sizeof d->uid);
  free(uids);
  if (shared) {
    if (c->rank == 0)
      printf("ppr: ranks share a GPU, and NCCL takes one rank per GPU: messages and collectives go through MPI, staged "
             "through host memory\n");
    return;
  }
  load_nccl();
  c->npp = nccl_over(c, c->pp);
  c->ntp = nccl_over(c, c->tp);
  c->ndp = nccl_over(c, c->dp);
  c->nemb = nccl_over(c, c->emb);
  c->ncp = nccl_over(c, c->cp);
  c->nccl_sub = calloc((size_t)(c->nsub ? c->nsub : 1), sizeof *c->nccl_sub);
  if (!c->nccl_sub) RT_INTERNAL("out of memory");
  for (int i = 0; i < c->nsub; i++) c->nccl_sub[i] = nccl_over(c, c->sub[i]);
  c->prev = p->prev, c->next = p->next;
  c->pp_prev = p->prev >= 0 ? rank_in(c, c->pp, p->prev) : -1;
  c->pp_next = p->next >= 0 ? rank_in(c, c->pp, p->next) : -1;
  c->nccl = 1;
  /* chunks of layers: the schedules' order of messages is proven for sends that never wait (MPI's,
   * posted from a host copy), not for NCCL's, which wait for their receives; the pipeline's
   * messages go through MPI, staged through host memory (every rank has as many chunks) */
  c->nccl_p2p = rt_prog_nchunks(p) == 1;
  if (!c->nccl_p2p && c->rank == 0)
    fprintf(stderr, "ppr: note: the programs hold chunks of layers: the pipeline's messages go through MPI, staged "
                    "through host memory (their order is proven for sends that do not wait, which NCCL's do not "
                    "give); NCCL carries the collectives\n");
#endif
}

/* Waits for the device's queued work; with NCCL, watching for its asynchronous errors meanwhile,
 * so that a dead or failed peer ends the job instead of hanging it. */
int rt_comm_wait(RtComm *c, RtDev *d) {
#ifdef PPR_CUDA
  if (c && c->nccl) {
    struct timespec nap = {0, 100000}; /* 0.1 ms */
    double since = rt_util_now_s();
    for (;;) {
      int q = rt_dev_query(d);
      if (q <= 0) {
        c->nccl_busy = 0;
        return q;
      }
      ncclComm_t all[5] = {c->npp, c->ntp, c->ndp, c->nemb, c->ncp};
      for (int i = 0; i < 5 + c->nsub; i++) {
        ncclComm_t m = i < 5 ? all[i] : c->nccl_sub[i - 5];
        ncclResult_t e = ncclSuccess;
        if (m) NCCL_CHECK(ncclCommGetAsyncError(m, &e));
        if (e != ncclSuccess && e != ncclInProgress) {
          ncclCommAbort(m);
          nccl_fail(e, "a collective or message (ncclCommGetAsyncError)", __FILE__, __LINE__);
        }
      }
      double t = rt_util_now_s();
      int late = c->timeout > 0 && t - since >= c->timeout;
      if (late || rt_comm_notice_waiting(c)) { /* the device's queue is stuck: name its first NCCL operation */
        Wait w = {.op = c->nccl_op ? c->nccl_op : "the device's queued work",
                  .g = c->nccl_g,
                  .seq = c->nccl_seq,
                  .count = c->nccl_op ? c->nccl_count : -1,
                  .unit = "floats",
                  .n = c->nccl_nmsg,
                  .msg = c->nccl_msg};
        if (w.g != MPI_COMM_NULL) w.gid = rt_comm_group_id(c, w.g);
        rt_comm_stuck(c, &w, NULL, &c->nccl_where, since, late);
      }
      nanosleep(&nap, NULL);
    }
  }
#else
  (void)c;
#endif
  return rt_dev_sync(d);
}

/* The sends in flight that are done: their slots freed (the copies' memory kept for reuse). */
static void reap_sends(RtComm *c) {
  for (int i = 0; i < c->nsend;) {
    int done = 0;
    MPI_CHECK(MPI_Test(&c->sreq[i], &done, MPI_STATUS_IGNORE));
    if (!done) {
      i++;
      continue;
    }
    Stage t = c->sbuf[i]; /* keep the copy's memory: move it past the live ones */
    c->nsend--;
    c->sreq[i] = c->sreq[c->nsend];
    c->smsg[i] = c->smsg[c->nsend];
    c->sbuf[i] = c->sbuf[c->nsend];
    c->sbuf[c->nsend] = t;
  }
}

/* A send: the buffer copied to the host, posted, and left in flight. */
static void post_send(RtComm *c, RtDev *d, const RtP2p *o) {
  if (c->nsend == c->scap) {
    int cap = c->scap ? 2 * c->scap : 8;
    MPI_Request *r = realloc(c->sreq, (size_t)cap * sizeof *r);
    if (r) c->sreq = r;
    RtP2p *m = realloc(c->smsg, (size_t)cap * sizeof *m);
    if (m) c->smsg = m;
    Stage *b = realloc(c->sbuf, (size_t)cap * sizeof *b);
    if (b) c->sbuf = b;
    if (!r || !m || !b) RT_INTERNAL("out of memory");
    memset(c->sbuf + c->scap, 0, (size_t)(cap - c->scap) * sizeof *c->sbuf);
    c->scap = cap;
  }
  Stage *st = &c->sbuf[c->nsend];
  void *buf = room(&st->buf, &st->cap, (size_t)o->bytes);
  const void *host = rt_dev_host(d, o->off);
  if (!host && rt_comm_before_host(c, d)) dev_fail(c, d); /* with NCCL's collectives queued: watched */
  if (host) memcpy(buf, host, (size_t)o->bytes);
  else if (rt_dev_read(d, o->off, buf, o->bytes)) dev_fail(c, d);
  c->smsg[c->nsend] = *o;
  MPI_CHECK(MPI_Isend(buf, msg_count(o), msg_type(o), o->peer, o->tag, c->world, &c->sreq[c->nsend]));
  c->nsend++;
}

void rt_comm_p2p_flush(RtComm *c) {
  if (!c) return;
  for (int i = 0; i < c->nsend; i += MAX_REQ) {
    int n = c->nsend - i < MAX_REQ ? c->nsend - i : MAX_REQ;
    rt_comm_wait_reqs(c, n, c->sreq + i, &(Wait){.g = MPI_COMM_NULL, .n = n, .msg = c->smsg + i});
  }
  reap_sends(c);
}

void rt_comm_p2p_post(RtComm *c, RtDev *d, int n, const RtP2p *ops) {
  if (!c || !c->mpi) RT_INTERNAL("a pipeline message in a one-rank world");
#ifdef PPR_CUDA
  if (c->nccl && c->nccl_p2p) {
    nccl_p2p(c, d, n, ops); /* on the device's stream: what follows it there waits for it */
    return;
  }
#endif
  if (c->nreq + n > MAX_REQ) RT_INTERNAL("too many messages in flight");
  reap_sends(c);
  for (int i = 0; i < n; i++) {
    const RtP2p *o = &ops[i];
    if ((o->bytes % 4 ? o->bytes / 2 : o->bytes / 4) > INT32_MAX) RT_INTERNAL("a message of more than 2^31 elements");
    if (o->send) {
      post_send(c, d, o);
      continue;
    }
    Stage *st = &c->stage[c->nreq];
    st->bytes = 0;
    void *buf = rt_dev_host(d, o->off);
    if (!buf) { /* host staging: the device's bytes come into a host copy */
      buf = room(&st->buf, &st->cap, (size_t)o->bytes);
      st->off = o->off, st->bytes = o->bytes;
    }
    c->msg[c->nreq] = *o;
    MPI_CHECK(MPI_Irecv(buf, msg_count(o), msg_type(o), o->peer, o->tag, c->world, &c->req[c->nreq++]));
  }
}

int rt_comm_recv_early(RtComm *c, RtDev *d, const RtP2p *o) {
  if (!c || !c->mpi || c->nccl || o->send) return -1;
  int h = 0;
  while (h < MAX_EARLY && c->eused[h]) h++;
  if (h == MAX_EARLY) return -1;
  Stage *st = &c->estage[h];
  st->bytes = 0;
  void *buf = rt_dev_host(d, o->off);
  if (!buf) { /* host staging, copied in at the wait */
    buf = room(&st->buf, &st->cap, (size_t)o->bytes);
    st->off = o->off, st->bytes = o->bytes;
  }
  c->emsg[h] = *o;
  MPI_CHECK(MPI_Irecv(buf, msg_count(o), msg_type(o), o->peer, o->tag, c->world, &c->ereq[h]));
  c->eused[h] = 1;
  return h;
}

void rt_comm_recv_wait(RtComm *c, RtDev *d, int h) {
  if (!c || h < 0 || h >= MAX_EARLY || !c->eused[h]) RT_INTERNAL("a wait for a receive not posted ahead");
  rt_comm_wait_reqs(c, 1, &c->ereq[h], &(Wait){.g = MPI_COMM_NULL, .n = 1, .msg = &c->emsg[h]});
  if (c->estage[h].bytes && rt_dev_write(d, c->estage[h].off, c->estage[h].buf, c->estage[h].bytes)) dev_fail(c, d);
  c->eused[h] = 0;
}

void rt_comm_p2p_wait(RtComm *c, RtDev *d) {
  if (!c || !c->nreq) return; /* NCCL's messages: ordered on the device's stream, waited for there */
  rt_comm_wait_reqs(c, c->nreq, c->req, &(Wait){.g = MPI_COMM_NULL, .n = c->nreq, .msg = c->msg});
  for (int i = 0; i < c->nreq; i++)
    if (c->stage[i].bytes && rt_dev_write(d, c->stage[i].off, c->stage[i].buf, c->stage[i].bytes)) dev_fail(c, d);
  c->nreq = 0;
}

/* ---- deterministic allreduce ----------------------------------------------------------------- */

static float *red_scratch(RtComm *c, size_t n) {
  if (n > c->red_cap) {
    free(c->red);
    c->red = malloc(n * sizeof *c->red);
    if (!c->red) RT_INTERNAL("out of memory");
    c->red_cap = n;
  }
  return c->red;
}

/* Room for the four int arrays of n an MPI_Ialltoallv takes (counts, displacements; sent, received). */
static int *v_counts(RtComm *c, int n) {
  if (n > c->ints_cap) {
    free(c->ints);
    c->ints = malloc((size_t)n * 4 * sizeof *c->ints);
    if (!c->ints) RT_INTERNAL("out of memory");
    c->ints_cap = n;
  }
  return c->ints;
}

/* dst[i] = src[0][i] op src[1][i] op ... op src[n-1][i], left to right (src[q] = all + q * stride) */
static void reduce_rows(float *dst, const float *all, int64_t stride, int n, int64_t len, int op) {
  for (int64_t i = 0; i < len; i++) {
    float v = all[i];
    for (int q = 1; q < n; q++) {
      float w = all[q * stride + i];
      if (op == RT_OP_MAX) v = w > v ? w : v;
      else v = v + w;
    }
    dst[i] = v;
  }
}

/* The totals of small buffers: every member gathers all of them (MPI_Allgather) and reduces them
 * itself. Larger ones: member q reduces elements [count·q/n, count·(q+1)/n) of every member
 * (MPI_Alltoallv), then every member gets every part (MPI_Allgatherv). Either way each element is
 * reduced in the group's rank order, and every member ends with the same bits (MPI_Allreduce does
 * not promise either). */
#define SMALL_REDUCE ((int64_t)1 << 16) /* floats gathered from all members at most */
#define SEGMENT      ((int64_t)1 << 24) /* floats reduced at a time (64 MiB): bounds the scratch */
static void reduce_part(RtComm *c, MPI_Comm g, int n, int me, int op, float *buf, int64_t count, const char *name);
static void det_allreduce(RtComm *c, MPI_Comm g, int op, float *buf, int64_t count, const char *name) {
  int n = 1, me = 0;
  MPI_CHECK(MPI_Comm_size(g, &n));
  MPI_CHECK(MPI_Comm_rank(g, &me));
  if (n == 1 || count == 0) return;
  for (int64_t off = 0; off < count; off += SEGMENT)
    reduce_part(c, g, n, me, op, buf + off, count - off < SEGMENT ? count - off : SEGMENT, name);
}

static void reduce_part(RtComm *c, MPI_Comm g, int n, int me, int op, float *buf, int64_t count, const char *name) {
  MPI_Request rq;
  if (count * n <= SMALL_REDUCE) {
    float *all = red_scratch(c, (size_t)(count * n));
    MPI_CHECK(MPI_Iallgather(buf, (int)count, MPI_FLOAT, all, (int)count, MPI_FLOAT, g, &rq));
    rt_comm_coll_wait(c, g, &rq, name, count, "floats");
    reduce_rows(buf, all, count, n, count, op);
    return;
  }
  int *counts = v_counts(c, n), *displs = counts + n, *rcounts = displs + n, *rdispls = rcounts + n;
  for (int q = 0; q < n; q++) {
    int64_t a = count * q / n, e = count * (q + 1) / n;
    displs[q] = (int)a;
    counts[q] = (int)(e - a);
  }
  int len = counts[me];
  for (int q = 0; q < n; q++) {
    rcounts[q] = len;
    rdispls[q] = q * len; /* <= count */
  }
  float *parts = red_scratch(c, (size_t)len * (size_t)n + 1);
  MPI_CHECK(MPI_Ialltoallv(buf, counts, displs, MPI_FLOAT, parts, rcounts, rdispls, MPI_FLOAT, g, &rq));
  rt_comm_coll_wait(c, g, &rq, name, count, "floats");
  reduce_rows(buf + displs[me], parts, len, n, len, op);
  MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, g, &rq));
  rt_comm_coll_wait(c, g, &rq, name, count, "floats");
}

/* det_allreduce on the floats at arena offset off, through a host copy where the arena is not host memory. */
static void dev_allreduce(RtComm *c, RtDev *d, MPI_Comm g, int op, int64_t off, int64_t count, PpDType dt,
                          const char *name) {
#ifdef PPR_CUDA
  if (c->nccl) { /* NCCL's reduction: every member gets the same bits, in NCCL's fixed order */
    ncclComm_t m = g == c->tp ? c->ntp : g == c->dp ? c->ndp : g == c->emb ? c->nemb : NULL;
    for (int i = 0; i < c->nsub && !m; i++)
      if (g == c->sub[i]) m = c->nccl_sub[i];
    if (!m) RT_INTERNAL("an allreduce without its NCCL communicator");
    void *stream = NULL, *buf = rt_dev_native(d, off, &stream);
    int gid = 0;
    int64_t seq = rt_comm_next_seq(c, g, &gid);
    if (!c->nccl_busy) { /* the first operation of the queue: what it waits for if it stops */
      c->nccl_busy = 1;
      c->nccl_op = name, c->nccl_g = g, c->nccl_seq = seq, c->nccl_count = count, c->nccl_nmsg = 0;
      c->nccl_where = c->where;
    }
    NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)count, dt == PP_BF16 ? ncclBfloat16 : ncclFloat,
                             op == RT_OP_MAX ? ncclMax : ncclSum, m, (cudaStream_t)stream));
    return;
  }
#endif
  if (dt == PP_BF16) { /* widened to f32, reduced as floats, rounded once */
    uint16_t *h = rt_dev_host(d, off);
    float *buf = room((void **)&c->host, &c->host_cap, (size_t)count * (sizeof *buf + sizeof *h));
    uint16_t *stage = (uint16_t *)(void *)(buf + count);
    if (!h && rt_dev_read(d, off, stage, count * 2)) dev_fail(c, d);
    const uint16_t *src = h ? h : stage;
    for (int64_t i = 0; i < count; i++) buf[i] = pp_f32_from_bf16(src[i]);
    det_allreduce(c, g, op, buf, count, name);
    uint16_t *dst = h ? h : stage;
    for (int64_t i = 0; i < count; i++) dst[i] = pp_bf16_from_f32(buf[i]);
    if (!h && rt_dev_write(d, off, stage, count * 2)) dev_fail(c, d);
    return;
  }
  float *buf = rt_dev_host(d, off);
  if (buf) {
    det_allreduce(c, g, op, buf, count, name);
    return;
  }
  buf = room((void **)&c->host, &c->host_cap, (size_t)count * sizeof *buf);
  if (rt_dev_read(d, off, buf, count * 4)) dev_fail(c, d);
  det_allreduce(c, g, op, buf, count, name);
  if (rt_dev_write(d, off, buf, count * 4)) dev_fail(c, d);
}

void rt_comm_allreduce_emb(RtComm *c, RtDev *d, int64_t off, int64_t count) {
  if (!c || c->emb == MPI_COMM_NULL) RT_INTERNAL("allreduce_tied without an embedding group");
  dev_allreduce(c, d, c->emb, RT_OP_SUM, off, count, PP_F32, "allreduce_tied");
}

void rt_comm_allreduce(RtComm *c, RtDev *d, int group, int sub, int op, int64_t off, int64_t count, PpDType dtype) {
  if (!c || !c->mpi) return; /* a one-rank world: every group is this rank alone */
  MPI_Comm g = MPI_COMM_NULL;
  if (group == RT_G_TP) g = c->tp;
  else if (group == RT_G_DP) g = c->dp;
  else
    for (int i = 0; i < c->nsub; i++)
      if (c->sub_r[i] == sub) g = c->sub[i];
  if (g == MPI_COMM_NULL) RT_INTERNAL("an allreduce without its group");
  int n = 1;
  MPI_CHECK(MPI_Comm_size(g, &n));
  /* the watchdog's name of it, as the listing writes it */
  static const char *const names[2][3] = {{"allreduce tp sum", "allreduce tp/R sum", "allreduce dp sum"},
                                          {"allreduce tp max", "allreduce tp/R max", "allreduce dp max"}};
  if (n > 1)
    dev_allreduce(c, d, g, op, off, count, dtype,
                  names[op == RT_OP_MAX][group == RT_G_TP   ? 0
                                         : group == RT_G_DP ? 2
                                                            : 1]);
}

/* Sequence and context parallelism's collectives over the TP group (RT_G_TP) or the cp group
 * (RT_G_CP), and ZeRO-1's over the dp x cp group (RT_G_DP), on arrays of the arena (a member's
 * part may lie inside the whole at its place, in place): the all-gather (every member's count elements at part, in
 * rank order, into whole) and the reduce-scatter (the n·count floats at whole summed over the
 * group; member r's part the sums of elements [r·count, (r+1)·count)). The sums are the
 * deterministic all-reduce's: each element folded in rank order (reduce_rows), so a reduce-scatter
 * gives the bits an allreduce would, and every member the same. Through a host copy where the
 * arena is not host memory; with NCCL, ncclAllGather and ncclReduceScatter on the device queue. */
static void seq_coll(RtComm *c, RtDev *d, int group, int gather, int64_t part, int64_t whole, int64_t count,
                     PpDType dt) {
  MPI_Comm g = c && c->mpi ? (group == RT_G_CP ? c->cp : group == RT_G_DP ? c->dp : c->tp) : MPI_COMM_NULL;
  if (g == MPI_COMM_NULL) RT_INTERNAL("a sequence-parallel collective without its group");
  static const char *const names[3][2] = {{"reduce_scatter tp", "allgather tp"},
                                          {"reduce_scatter cp", "allgather cp"},
                                          {"reduce_scatter dp", "allgather dp"}};
  const char *name = names[group == RT_G_CP ? 1 : group == RT_G_DP ? 2 : 0][gather != 0];
  int n = 1, me = 0;
  MPI_CHECK(MPI_Comm_size(g, &n));
  MPI_CHECK(MPI_Comm_rank(g, &me));
#ifdef PPR_CUDA
  if (c->nccl) {
    void *stream = NULL, *p = rt_dev_native(d, part, &stream), *w = rt_dev_native(d, whole, &stream);
    ncclComm_t nc = group == RT_G_CP ? c->ncp : group == RT_G_DP ? c->ndp : c->ntp;
    int gid = 0;
    int64_t seq = rt_comm_next_seq(c, g, &gid);
    if (!c->nccl_busy) {
      c->nccl_busy = 1;
      c->nccl_op = name, c->nccl_g = g, c->nccl_seq = seq, c->nccl_count = count, c->nccl_nmsg = 0;
      c->nccl_where = c->where;
    }
    if (gather)
      NCCL_CHECK(
          ncclAllGather(p, w, (size_t)count, dt == PP_BF16 ? ncclBfloat16 : ncclFloat, nc, (cudaStream_t)stream));
    else NCCL_CHECK(ncclReduceScatter(w, p, (size_t)count, ncclFloat, ncclSum, nc, (cudaStream_t)stream));
    return;
  }
#endif
  int es = pp_dtype_bytes(dt);
  char *hp = rt_dev_host(d, part), *hw = rt_dev_host(d, whole);
  int staged = !hp || !hw;
  /* in place: the part is the whole's member-me block (MPI's MPI_IN_PLACE for the gather) */
  int inplace = !staged && hp == hw + (int64_t)me * count * es;
  if (staged) { /* the part and the whole in one host buffer */
    char *h = room((void **)&c->host, &c->host_cap, (size_t)count * (size_t)(n + 1) * (size_t)es);
    hp = h, hw = h + count * es;
    if (rt_dev_read(d, gather ? part : whole, gather ? hp : hw, (gather ? 1 : n) * count * es)) dev_fail(c, d);
  }
  MPI_Request rq;
  if (gather) {
    MPI_Datatype t = dt == PP_BF16 ? MPI_UINT16_T : MPI_FLOAT;
    MPI_CHECK(MPI_Iallgather(inplace ? MPI_IN_PLACE : hp, inplace ? 0 : (int)count, inplace ? MPI_DATATYPE_NULL : t, hw,
                             (int)count, t, g, &rq));
    rt_comm_coll_wait(c, g, &rq, name, count * n, dt == PP_BF16 ? "bf16 elements" : "floats");
  } else {
    /* in runs of at most SEGMENT floats from all members together: the scratch stays bounded (a
     * ZeRO-1 part is the whole of a rank's gradients) */
    int64_t run = SEGMENT / n > 0 ? SEGMENT / n : 1;
    int *counts = v_counts(c, n), *displs = counts + n, *rcounts = displs + n, *rdispls = rcounts + n;
    for (int64_t o = 0; o < count; o += run) {
      int64_t len = count - o < run ? count - o : run;
      float *parts = red_scratch(c, (size_t)(len * n) + 1);
      for (int q = 0; q < n; q++) {
        counts[q] = rcounts[q] = (int)len;
        displs[q] = (int)(q * count + o); /* member q's block of the whole, this run of it */
        rdispls[q] = (int)(q * len);
      }
      MPI_CHECK(MPI_Ialltoallv(hw, counts, displs, MPI_FLOAT, parts, rcounts, rdispls, MPI_FLOAT, g, &rq));
      rt_comm_coll_wait(c, g, &rq, name, len * n, "floats");
      reduce_rows((float *)(void *)hp + o, parts, len, n, len, RT_OP_SUM);
    }
  }
  if (staged && rt_dev_write(d, gather ? whole : part, gather ? hw : hp, (gather ? n : 1) * count * es)) dev_fail(c, d);
}

void rt_comm_seq_gather(RtComm *c, RtDev *d, int group, int64_t part, int64_t whole, int64_t count, PpDType dtype) {
  seq_coll(c, d, group, 1, part, whole, count, dtype);
}

void rt_comm_seq_scatter(RtComm *c, RtDev *d, int group, int64_t whole, int64_t part, int64_t count) {
  seq_coll(c, d, group, 0, part, whole, count, PP_F32);
}

int rt_comm_before_host(RtComm *c, RtDev *d) { return c && c->nccl ? rt_comm_wait(c, d) : 0; }
