/* rt_comm.c - the transport of ppr over MPI: start-up and end, stopping at a step boundary, the collectives over the
 * world (checks, sums, gathers, broadcasts) and the program's communicators. The pipeline's messages and the
 * collectives on device buffers are rt_comm_dev.c's, the watchdog over every wait rt_comm_watch.c's. */
#if defined(__SANITIZE_ADDRESS__)
#define _GNU_SOURCE /* dl_iterate_phdr, for pin_libraries */
#endif
#include "rt_comm_impl.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK ((size_t)1 << 30) /* the most bytes of one MPI message of a gather or broadcast */

static volatile sig_atomic_t stop_signal; /* rt_comm_request_stop: this process's */

/* ---- errors -------------------------------------------------------------------------------- */

_Noreturn void rt_comm_mpi_fail(int rc, const char *call, const char *file, int line) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0, rank = -1;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error code %d", rc);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "ppr: error: rank %d: MPI: %s failed: %s [%s:%d]\n", rank, call, s, file, line);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

_Noreturn void rt_comm_internal(const char *what, const char *file, int line) {
  int started = 0, ended = 0;
  fprintf(stderr, "ppr: error: internal: %s [%s:%d]\n", what, file, line);
  fflush(stderr);
  MPI_Initialized(&started);
  MPI_Finalized(&ended);
  if (started && !ended) MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* ---- stopping at a step boundary ------------------------------------------------------------ */

void rt_comm_request_stop(int sig) { stop_signal = sig > 0 ? sig : 1; }
int rt_comm_stop_requested(void) { return stop_signal; }

int rt_comm_stopping(const RtComm *c, int *sig, int *rank) {
  if (!c || !c->stop_sig) return 0;
  if (sig) *sig = c->stop_sig;
  if (rank) *rank = c->stop_rank;
  return 1;
}

void rt_comm_stop_ending(void) { stop_signal = -1; }

/* ---- start and end ------------------------------------------------------------------------- */

static int launched(void) {
  const char *f = getenv("PPR_MPI");
  if (f && !strcmp(f, "1")) return 1;
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

int rt_comm_init(int *argc, char ***argv, RtComm **out, char *err, size_t errlen) {
  *out = NULL;
  RtComm *c = calloc(1, sizeof *c);
  RT_CHECK_ALLOC(c);
  c->size = 1;
  c->world = c->aux = c->wd = c->pp = c->tp = c->dp = c->emb = c->cp = MPI_COMM_NULL;
  c->timeout = RT_COMM_TIMEOUT;
  rt_comm_set_what(c, NULL);
  if (launched()) {
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
      free(c);
      return RT_FAIL("MPI_Init_thread failed (error code %d)", rc);
    }
    c->mpi = 1;
    /* errors come back to MPI_CHECK (and its message) instead of aborting inside MPI;
     * communicators made from this one inherit it */
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->world));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->aux));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->wd));
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &c->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &c->local_size));
    MPI_CHECK(MPI_Comm_free(&node));
  }
  *out = c;
  return 0;
}

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
#include <link.h>
/* Under AddressSanitizer only. MPI_Finalize unloads Open MPI's plugins and PMIx; LeakSanitizer
 * reports at exit, and can then not name the library of a leak inside them, so the suppressions
 * by library (tests/lsan-mpi.supp) would not match. Keep every loaded library mapped. */
#define MAX_PIN 1024
static int pin_collect(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const char **names = data;
  int n = 0;
  while (n < MAX_PIN && names[n]) n++;
  if (n < MAX_PIN - 1 && info->dlpi_name && info->dlpi_name[0]) names[n] = info->dlpi_name;
  return 0;
}
static void pin_libraries(void) {
  static const char *names[MAX_PIN];
  dl_iterate_phdr(pin_collect, names); /* no dlopen while the loader's list is locked */
  for (int i = 0; i < MAX_PIN && names[i]; i++) (void)dlopen(names[i], RTLD_LAZY | RTLD_NOLOAD);
}
#else
static void pin_libraries(void) {}
#endif

static void comm_free(MPI_Comm *m) {
  if (*m != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(m));
}

void rt_comm_finalize(RtComm *c) {
  if (!c) return;
#ifdef PPR_CUDA
  if (c->nccl) {
    ncclComm_t all[5] = {c->npp, c->ntp, c->ndp, c->nemb, c->ncp};
    for (int i = 0; i < 5; i++)
      if (all[i]) ncclCommDestroy(all[i]);
    for (int i = 0; i < c->nsub; i++)
      if (c->nccl_sub[i]) ncclCommDestroy(c->nccl_sub[i]);
    free(c->nccl_sub);
  }
#endif
  if (c->mpi) {
    rt_comm_set_what(c, "the end of the run");
    rt_comm_barrier(c); /* MPI_Finalize waits for every rank, unwatched: the watchdog sees them here first */
    for (int i = 0; i < c->nsub; i++) comm_free(&c->sub[i]);
    comm_free(&c->cp);
    comm_free(&c->emb);
    comm_free(&c->dp);
    comm_free(&c->tp);
    comm_free(&c->pp);
    comm_free(&c->wd);
    comm_free(&c->aux);
    comm_free(&c->world);
    pin_libraries();
    MPI_CHECK(MPI_Finalize());
  }
  free(c->sub);
  free(c->sub_r);
  free(c->sub_seq);
  free(c->red);
  free(c->host);
  for (int i = 0; i < MAX_REQ; i++) free(c->stage[i].buf);
  for (int i = 0; i < MAX_EARLY; i++) free(c->estage[i].buf);
  for (int i = 0; i < c->scap; i++) free(c->sbuf[i].buf);
  free(c->sbuf);
  free(c->sreq);
  free(c->smsg);
  free(c->ints);
  free(c);
}

_Noreturn void rt_comm_abort(RtComm *c, int code) {
  fflush(stdout);
  fflush(stderr);
  if (c && c->mpi) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

int rt_comm_rank(const RtComm *c) { return c ? c->rank : 0; }
int rt_comm_size(const RtComm *c) { return c ? c->size : 1; }
int rt_comm_uses_mpi(const RtComm *c) { return c && c->mpi; }
int rt_comm_local_rank(const RtComm *c) { return c ? c->local_rank : 0; }
int rt_comm_local_size(const RtComm *c) { return c && c->local_size > 0 ? c->local_size : 1; }

/* ---- collectives --------------------------------------------------------------------------- */

int rt_comm_all_ok(RtComm *c, int ok) {
  int v = ok ? 1 : 0, r = v;
  if (c && c->mpi) {
    MPI_Request rq;
    MPI_CHECK(MPI_Iallreduce(&v, &r, 1, MPI_INT, MPI_MIN, c->aux, &rq));
    rt_comm_coll_wait(c, c->aux, &rq, "the check that every rank succeeded", -1, NULL);
  }
  return r;
}

void rt_comm_barrier(RtComm *c) {
  if (c && c->mpi) {
    MPI_Request rq;
    MPI_CHECK(MPI_Ibarrier(c->aux, &rq));
    rt_comm_coll_wait(c, c->aux, &rq, "a barrier", -1, NULL);
  }
}

void rt_comm_allgather_named(RtComm *c, const void *mine, void *all, size_t bytes, const char *op) {
  if (bytes > (size_t)INT32_MAX) RT_INTERNAL("allgather of more than 2 GiB per rank");
  MPI_Request rq;
  MPI_CHECK(MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c->aux, &rq));
  rt_comm_coll_wait(c, c->aux, &rq, op, (int64_t)bytes, "bytes from each rank");
}

void rt_comm_allgather(RtComm *c, const void *mine, void *all, size_t bytes) {
  if (!c || !c->mpi) {
    memmove(all, mine, bytes);
    return;
  }
  rt_comm_allgather_named(c, mine, all, bytes, "an allgather");
}

/* The sum of v over the world, in rank order; with stop: the stop requests folded in. */
static double sum_world(RtComm *c, double v, int stop) {
  if (stop) c->stop_sig = 0, c->stop_rank = -1;
  int mine = stop && stop_signal > 0 ? (int)stop_signal : 0;
  if (!c->mpi || c->size == 1) {
    if (mine) c->stop_sig = mine, c->stop_rank = c->rank;
    return v;
  }
  double pair[2] = {v, (double)mine}, *all = malloc((size_t)c->size * sizeof pair);
  if (!all) RT_INTERNAL("out of memory");
  rt_comm_allgather_named(c, pair, all, sizeof pair, "a sum over the world");
  double s = 0;
  for (int r = 0; r < c->size; r++) {
    s += all[2 * r];
    if (all[2 * r + 1] != 0 && !c->stop_sig) c->stop_sig = (int)all[2 * r + 1], c->stop_rank = r;
  }
  free(all);
  return s;
}

double rt_comm_sum(RtComm *c, double v) { return c ? sum_world(c, v, 0) : v; }
double rt_comm_step_sum(RtComm *c, double v) { return c ? sum_world(c, v, 1) : v; }

void rt_comm_bcast(RtComm *c, void *buf, size_t bytes, int root) {
  if (!c || !c->mpi) return;
  for (size_t off = 0; off < bytes; off += CHUNK) {
    size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
    MPI_Request rq;
    MPI_CHECK(MPI_Ibcast((unsigned char *)buf + off, (int)n, MPI_BYTE, root, c->aux, &rq));
    rt_comm_coll_wait(c, c->aux, &rq, "a broadcast", (int64_t)n, "bytes");
  }
}

void rt_comm_dp_bcast(RtComm *c, void *buf, size_t bytes, int root) {
  if (!c || !c->mpi || c->dp == MPI_COMM_NULL) return;
  for (size_t off = 0; off < bytes; off += CHUNK) {
    size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
    MPI_Request rq;
    MPI_CHECK(MPI_Ibcast((unsigned char *)buf + off, (int)n, MPI_BYTE, root, c->dp, &rq));
    rt_comm_coll_wait(c, c->dp, &rq, "ZeRO-1's gather of the shards", (int64_t)n, "bytes");
  }
}

int rt_comm_gather(RtComm *c, const void *mine, size_t n, unsigned char **all, size_t *sizes, char *err,
                   size_t errlen) {
  *all = NULL;
  if (!c || !c->mpi || c->size == 1) {
    sizes[0] = n;
    *all = malloc(n ? n : 1);
    RT_CHECK_ALLOC(*all);
    if (n) memcpy(*all, mine, n);
    return 0;
  }
  uint64_t mine_n = n, *ns = NULL;
  if (c->rank == 0) {
    ns = malloc((size_t)c->size * sizeof *ns);
    if (!ns) RT_INTERNAL("out of memory");
  }
  MPI_Request rq;
  MPI_CHECK(MPI_Igather(&mine_n, 1, MPI_UINT64_T, ns, 1, MPI_UINT64_T, 0, c->aux, &rq));
  rt_comm_coll_wait(c, c->aux, &rq, "a gather of sizes on rank 0", -1, NULL);
  if (c->rank != 0) {
    for (size_t off = 0; off < n; off += CHUNK) {
      size_t k = n - off < CHUNK ? n - off : CHUNK;
      RtP2p m = {.send = 1, .peer = 0, .tag = 1, .bytes = (int64_t)k};
      MPI_CHECK(MPI_Isend((const unsigned char *)mine + off, (int)k, MPI_BYTE, 0, 1, c->aux, &rq));
      rt_comm_wait_reqs(c, 1, &rq, &(Wait){.g = MPI_COMM_NULL, .n = 1, .msg = &m, .mop = "a gather on rank 0"});
    }
    return 0;
  }
  size_t total = 0;
  for (int r = 0; r < c->size; r++) {
    sizes[r] = (size_t)ns[r];
    total += (size_t)ns[r];
  }
  unsigned char *b = malloc(total ? total : 1), *sink = NULL;
  if (!b) sink = malloc(CHUNK); /* still receive everything, so no rank waits forever */
  if (!b && !sink) RT_INTERNAL("out of memory");
  size_t at = 0;
  if (b && n) memcpy(b, mine, n);
  at += n;
  for (int r = 1; r < c->size; r++) {
    for (size_t off = 0; off < sizes[r]; off += CHUNK) {
      size_t k = sizes[r] - off < CHUNK ? sizes[r] - off : CHUNK;
      RtP2p m = {.send = 0, .peer = r, .tag = 1, .bytes = (int64_t)k};
      MPI_CHECK(MPI_Irecv(b ? b + at + off : sink, (int)k, MPI_BYTE, r, 1, c->aux, &rq));
      rt_comm_wait_reqs(c, 1, &rq, &(Wait){.g = MPI_COMM_NULL, .n = 1, .msg = &m, .mop = "a gather on rank 0"});
    }
    at += sizes[r];
  }
  free(ns);
  free(sink);
  if (!b) return RT_FAIL("out of memory gathering %zu bytes on rank 0", total);
  *all = b;
  return 0;
}

int rt_comm_tag_ub(RtComm *c) {
  if (!c || !c->mpi) return INT32_MAX;
  int *ub = NULL, flag = 0;
  MPI_CHECK(MPI_Comm_get_attr(c->world, MPI_TAG_UB, &ub, &flag));
  return flag && ub ? *ub : 32767; /* the least MPI promises */
}

/* ---- the program's communicators -------------------------------------------------------------- */

void rt_comm_groups(RtComm *c, const RtProg *p) {
  if (c && c->mpi) {
    int tp = p->tp, pp = p->pp, cp = p->cp > 1 ? p->cp : 1;
    /* a pipeline: one (dp_rank, cp_rank, tp_rank); a TP group: one (dp_rank, stage, cp_rank); a
     * cp group: one (dp_rank, stage, tp_rank); the gradients' group ("dp"): one (stage, tp_rank),
     * every data-parallel replica and context-parallel rank, in world-rank order */
    int line = p->dp_rank * cp + p->cp_rank, grp = (p->dp_rank * pp + p->stage) * cp + p->cp_rank;
    /* MPI_Comm_split waits for every rank, unwatched: the watchdog sees them arrive here first */
    rt_comm_barrier(c);
    MPI_CHECK(MPI_Comm_split(c->world, line * tp + p->tp_rank, p->stage, &c->pp));
    MPI_CHECK(MPI_Comm_split(c->world, grp, p->tp_rank, &c->tp));
    MPI_CHECK(MPI_Comm_split(c->world, p->stage * tp + p->tp_rank, line, &c->dp));
    MPI_CHECK(MPI_Comm_split(c->world, p->nshared > 0 ? line * tp + p->tp_rank : MPI_UNDEFINED, p->stage, &c->emb));
    MPI_CHECK(MPI_Comm_split(c->world, cp > 1 ? (p->dp_rank * pp + p->stage) * tp + p->tp_rank : MPI_UNDEFINED,
                             p->cp_rank, &c->cp));
    /* the tp/R groups any rank uses (every rank takes part in each split: they are collective) */
    int ndiv = 0;
    for (int r = 1; r <= tp; r++) ndiv += tp % r == 0;
    int *div = calloc((size_t)ndiv, sizeof *div), *used = calloc((size_t)ndiv, sizeof *used),
        *any = calloc((size_t)ndiv, sizeof *any);
    c->sub_r = calloc((size_t)ndiv, sizeof *c->sub_r);
    c->sub = calloc((size_t)ndiv, sizeof *c->sub);
    c->sub_seq = calloc((size_t)ndiv, sizeof *c->sub_seq);
    if (!div || !used || !any || !c->sub_r || !c->sub || !c->sub_seq) RT_INTERNAL("out of memory");
    for (int r = 1, k = 0; r <= tp; r++)
      if (tp % r == 0) div[k++] = r;
    for (int ch = 0; ch < rt_prog_nchunks(p); ch++)
      for (int b = 0; b < RT_NBLK; b++) {
        if (ch > 0 && rt_blk_program(b)) continue;
        const RtBlock *bk = rt_prog_block(p, ch, b);
        for (int i = 0; i < bk->n; i++) {
          const RtInstr *x = &bk->ins[i];
          if (x->kind != RT_I_ALLREDUCE || x->group != RT_G_TP_SUB) continue;
          for (int k = 0; k < ndiv; k++) used[k] |= div[k] == x->sub;
        }
      }
    MPI_Request rq;
    MPI_CHECK(MPI_Iallreduce(used, any, ndiv, MPI_INT, MPI_MAX, c->world, &rq));
    rt_comm_coll_wait(c, c->world, &rq, "the start-up's agreement on the tp/R groups", -1, NULL);
    for (int k = 0; k < ndiv; k++) {
      if (!any[k]) continue;
      int r = div[k], group = grp * (tp / r) + p->tp_rank / r;
      c->sub_r[c->nsub] = r;
      MPI_CHECK(MPI_Comm_split(c->world, group, p->tp_rank, &c->sub[c->nsub]));
      c->nsub++;
    }
    free(div);
    free(used);
    free(any);
  }
}
