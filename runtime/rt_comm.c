/* rt_comm.c - the transport of ppr over MPI: start-up, the communicators, the pipeline's messages and the deterministic
 * collectives on device buffers (staged through host memory when the arena is not host memory). */
#if defined(__SANITIZE_ADDRESS__)
#define _GNU_SOURCE /* dl_iterate_phdr, for pin_libraries */
#endif
#include "rt_comm.h"
#include "rt_util.h"

#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef PPR_CUDA
#include <nccl.h>
#endif

#define CHUNK      ((size_t)1 << 30) /* the most bytes of one MPI message of a gather or broadcast */
#define MAX_REQ    4
#define SPIN       50e-6    /* s: a wait polls without sleeping this long first */
#define NAP_MIN    50000L   /* ns: then the first sleep between two polls */
#define NAP_MAX    1000000L /* ns: the longest (each sleep is 1.5 times the last) */
#define TAG_NOTICE 1        /* the watchdog's notices, on RtComm.wd */
#define FROZEN     0.25     /* s: a gap between two polls of a wait this long is time the process did not run */

/* The communicators a collective runs on: the watchdog counts the collectives of each, so that
 * the members of one call have the same count. G_SUB + i: sub[i]. */
enum { G_WORLD, G_AUX, G_PP, G_TP, G_DP, G_EMB, G_SUB };

/* A message's host copy: a received one is written to the device after the wait. */
typedef struct {
  void *buf;
  size_t cap;
  int64_t off, bytes; /* recv into the device at off; bytes 0: nothing to write */
} Stage;

struct RtComm {
  int mpi; /* MPI_Init_thread ran */
  int rank, size;
  int local_rank;           /* among the ranks on this machine (MPI_COMM_TYPE_SHARED) */
  MPI_Comm world;           /* a duplicate of MPI_COMM_WORLD: the pipeline's messages */
  MPI_Comm aux;             /* another: checks, sums, gathers, broadcasts */
  MPI_Comm wd;              /* another: the watchdog's notices */
  MPI_Comm pp, tp, dp, emb; /* from rt_comm_groups; MPI_COMM_NULL when absent */
  int nsub;                 /* the tp/R groups some rank's listing uses, one communicator per R */
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
  int nccl;                /* rt_comm_use_device: NCCL carries the messages and collectives */
  double timeout;          /* the watchdog's, seconds; 0: none */
  RtWhere where;           /* what the rank is doing (rt_comm_set_where) */
  int64_t seq[G_SUB];      /* per communicator: the collectives started on it */
  int64_t *sub_seq;        /* the same for sub[i] */
  RtP2p msg[MAX_REQ];      /* the messages of req */
  int stop_sig, stop_rank; /* rt_comm_step_sum's verdict: a rank asked to stop */
#ifdef PPR_CUDA
  ncclComm_t npp, ntp, ndp, nemb, *nccl_sub; /* one per MPI group, NULL where the group is absent */
  int prev, next, pp_prev, pp_next;          /* the pipeline neighbours: world ranks, ranks in npp */
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

static volatile sig_atomic_t stop_signal; /* rt_comm_request_stop: this process's */

/* ---- errors -------------------------------------------------------------------------------- */

_Noreturn static void mpi_fail(int rc, const char *call, const char *file, int line) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0, rank = -1;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error code %d", rc);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "ppr: error: rank %d: MPI: %s failed: %s [%s:%d]\n", rank, call, s, file, line);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* Every MPI call goes through this: on failure, the call, MPI's message and where, then MPI_Abort. */
#define MPI_CHECK(call)                                                                                                \
  do {                                                                                                                 \
    int rc_ = (call);                                                                                                  \
    if (rc_ != MPI_SUCCESS) mpi_fail(rc_, #call, __FILE__, __LINE__);                                                  \
  } while (0)

_Noreturn void rt_comm_internal(const char *what, const char *file, int line) {
  int started = 0, ended = 0;
  fprintf(stderr, "ppr: error: internal: %s [%s:%d]\n", what, file, line);
  fflush(stderr);
  MPI_Initialized(&started);
  MPI_Finalized(&ended);
  if (started && !ended) MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* ---- the watchdog ---------------------------------------------------------------------------- */

static void sleep_ns(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL); /* a signal may cut it short: the caller polls again */
}

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

/* What a rank that stopped waiting tells the others. */
typedef struct {
  int32_t rank, timed_out, in_coll, gid;
  int64_t seq;
  double waited; /* seconds */
} Notice;

static int group_id(const RtComm *c, MPI_Comm g) {
  if (g == c->aux) return G_AUX;
  if (g == c->pp) return G_PP;
  if (g == c->tp) return G_TP;
  if (g == c->dp) return G_DP;
  if (g == c->emb) return G_EMB;
  for (int i = 0; i < c->nsub; i++)
    if (g == c->sub[i]) return G_SUB + i;
  return G_WORLD;
}

/* The next collective on g: its count among g's collectives, the same on every member. */
static int64_t next_seq(RtComm *c, MPI_Comm g, int *gid) {
  *gid = group_id(c, g);
  return *gid >= G_SUB ? ++c->sub_seq[*gid - G_SUB] : ++c->seq[*gid];
}

/* "rank 3", "ranks 1 and 3", "ranks 0, 1 and 3" */
static void rank_list(char *s, size_t n, const int *r, int k) {
  size_t at = (size_t)snprintf(s, n, "rank%s ", k > 1 ? "s" : "");
  for (int i = 0; i < k && at < n; i++) {
    if (i == 16) {
      at += (size_t)snprintf(s + at, n - at, "... (%d in all)", k);
      break;
    }
    at += (size_t)snprintf(s + at, n - at, "%s%d", i == 0 ? "" : i == k - 1 ? " and " : ", ", r[i]);
  }
}

static const char *block_word(int b) {
  return b == RT_BLK_FORWARD     ? "forward"
         : b == RT_BLK_BACKWARD  ? "backward"
         : b == RT_BLK_OPTIMIZER ? "optimizer"
                                 : "?";
}

/* "; step 2, micro-batch 1, schedule entry 7, backward instruction 12 at rank2.prog:301" */
static size_t where_text(const RtWhere *w, char *s, size_t n) {
  size_t at = 0;
#define ADD(...) at += at < n ? (size_t)snprintf(s + at, n - at, __VA_ARGS__) : 0
#define SEP      (at ? ", " : "; ")
  if (w->what) ADD("%s%s", SEP, w->what);
  if (w->step >= 0) ADD("%sstep %lld", SEP, (long long)w->step + 1);
  if (w->mb >= 0) ADD("%smicro-batch %d", SEP, w->mb);
  if (w->entry >= 0) ADD("%sschedule entry %d", SEP, w->entry);
  if (w->block >= 0) ADD("%s%s", SEP, block_word(w->block));
  if (w->instr >= 0) ADD(" instruction %d", w->instr);
  if (w->file && w->line > 0) ADD(" at %s:%d", w->file, w->line);
#undef SEP
#undef ADD
  return at < n ? at : n;
}

/* A pipeline message (or another, with mop): "recv of activations from rank 3, micro-batch 2, forward" */
static size_t msg_text(const RtP2p *m, const char *mop, char *s, size_t n) {
  if (mop)
    return (size_t)snprintf(s, n, "%s: %s of %lld bytes %s rank %d", mop, m->send ? "send" : "recv",
                            (long long)m->bytes, m->send ? "to" : "from", m->peer);
  return (size_t)snprintf(s, n, "%s of %s %s rank %d, micro-batch %d, %s", m->send ? "send" : "recv",
                          m->tag % 2 ? "gradients" : "activations", m->send ? "to" : "from", m->peer, m->tag / 2,
                          m->tag % 2 ? "backward" : "forward");
}

/* The world ranks of the members of g, in g's order; *k of them. NULL when out of memory. */
static int *members(RtComm *c, MPI_Comm g, int *k) {
  MPI_Group wg, gg;
  int n = 0;
  MPI_CHECK(MPI_Comm_size(g, &n));
  int *in = malloc((size_t)n * sizeof *in), *out = malloc((size_t)n * sizeof *out);
  if (!in || !out) {
    free(in);
    free(out);
    return NULL;
  }
  for (int i = 0; i < n; i++) in[i] = i;
  MPI_CHECK(MPI_Comm_group(g, &gg));
  MPI_CHECK(MPI_Comm_group(c->world, &wg));
  MPI_CHECK(MPI_Group_translate_ranks(gg, n, in, wg, out));
  MPI_CHECK(MPI_Group_free(&wg));
  MPI_CHECK(MPI_Group_free(&gg));
  free(in);
  *k = n;
  return out;
}

/* A notice from another rank is waiting. */
static int notice_waiting(RtComm *c) {
  int flag = 0;
  MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, TAG_NOTICE, c->wd, &flag, MPI_STATUS_IGNORE));
  return flag;
}

/* The wait w (its requests req, NULL: all of w's messages pending) made no progress since `since`:
 * for the timeout (timed_out), or another rank's watchdog said so (a notice). Tell every other
 * rank, hear what the ranks that are waiting too say during the grace period, print what this
 * rank waits for, then end the job. */
_Noreturn static void stuck(RtComm *c, const Wait *w, const MPI_Request *req, const RtWhere *where, double since,
                            int timed_out) {
  /* the job ends: a SIGTERM (Open MPI's MPI_Abort sends one before SIGKILL) has nothing to stop,
   * and ends the rank as a second one would */
  stop_signal = -1;
  double t = rt_util_now_s();
  int n = c->size, nsent = 0;
  Notice mine = {.rank = c->rank,
                 .timed_out = timed_out,
                 .in_coll = w->g != MPI_COMM_NULL,
                 .gid = w->gid,
                 .seq = w->seq,
                 .waited = t - since};
  Notice *heard = calloc((size_t)n, sizeof *heard);
  MPI_Request *sent = calloc((size_t)n, sizeof *sent);
  for (int r = 0; heard && r < n; r++) heard[r].rank = -1;
  for (int r = 0; sent && r < n; r++)
    if (r != c->rank) MPI_CHECK(MPI_Isend(&mine, (int)sizeof mine, MPI_BYTE, r, TAG_NOTICE, c->wd, &sent[nsent++]));
  double grace = c->timeout > 0 && c->timeout < 4 ? c->timeout / 4 : 1.0;
  int cause = timed_out ? c->rank : -1;
  double cause_s = timed_out ? t - since : 0;
  do {
    while (notice_waiting(c)) {
      Notice x;
      MPI_CHECK(MPI_Recv(&x, (int)sizeof x, MPI_BYTE, MPI_ANY_SOURCE, TAG_NOTICE, c->wd, MPI_STATUS_IGNORE));
      if (x.rank < 0 || x.rank >= n) continue;
      if (heard) heard[x.rank] = x;
      if (x.timed_out && cause < 0) cause = x.rank, cause_s = x.waited;
    }
    int done = 0;
    if (nsent) MPI_CHECK(MPI_Testall(nsent, sent, &done, MPI_STATUSES_IGNORE));
    sleep_ns(NAP_MAX);
  } while (rt_util_now_s() - t < grace);

  /* whom this rank waits for */
  int *who = malloc((size_t)(n + MAX_REQ) * sizeof *who), nwho = 0;
  char what[1024];
  size_t at = 0;
  if (w->g != MPI_COMM_NULL) {
    int k = 0, *m = members(c, w->g, &k);
    for (int pass = 0; who && m && pass < 2 && !nwho; pass++) /* pass 1: no member reported: all of them */
      for (int i = 0; i < k; i++) {
        const Notice *h = heard && m[i] >= 0 && m[i] < n ? &heard[m[i]] : NULL;
        int there = h && h->rank == m[i] && h->in_coll && h->gid == w->gid && h->seq == w->seq;
        if (m[i] != c->rank && (pass || !there)) who[nwho++] = m[i];
      }
    free(m);
    at = (size_t)snprintf(what, sizeof what, "%s", w->op);
    if (w->count >= 0 && at < sizeof what)
      at += (size_t)snprintf(what + at, sizeof what - at, " of %lld %s", (long long)w->count, w->unit);
  } else {
    for (int i = 0; i < w->n; i++) {
      if (req && req[i] == MPI_REQUEST_NULL) continue;
      if (who) who[nwho++] = w->msg[i].peer;
      if (at < sizeof what) at += (size_t)snprintf(what + at, sizeof what - at, "%s", at ? "; " : "");
      if (at < sizeof what) at += msg_text(&w->msg[i], w->mop, what + at, sizeof what - at);
    }
  }
  if (at < sizeof what) where_text(where, what + at, sizeof what - at);
  char list[512] = "another rank";
  if (who && nwho) {
    /* in rank order, once each */
    for (int i = 1; i < nwho; i++)
      for (int j = i; j > 0 && who[j - 1] > who[j]; j--) {
        int v = who[j];
        who[j] = who[j - 1];
        who[j - 1] = v;
      }
    int k = 0;
    for (int i = 0; i < nwho; i++)
      if (!k || who[k - 1] != who[i]) who[k++] = who[i];
    rank_list(list, sizeof list, who, k);
  }
  /* a rank that had only just begun to wait when told is not stuck: it says nothing */
  char why[128] = "";
  if (!timed_out && cause >= 0)
    snprintf(why, sizeof why, " (rank %d made none for %.1f s: the job ends)", cause, cause_s);
  else if (!timed_out) snprintf(why, sizeof why, " (another rank's watchdog ends the job)");
  if (timed_out || t - since >= grace)
    fprintf(stderr, "ppr: rank %d: error: no progress for %.1f s%s: waiting for %s (%s)\n", c->rank, t - since, why,
            list, what);
  fflush(stderr);
  free(who);
  free(heard);
  /* the rank whose timeout ran out ends the job, after the others have printed theirs; a rank
   * that was told does so too only if the job is still there after 5 s */
  sleep_ns(timed_out ? 200000000L : 999999999L);
  for (int k = 0; !timed_out && k < 4; k++) sleep_ns(999999999L);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* Waits for the n requests of w (n <= MAX_REQ): MPI_Testsome, polled with sched_yield for SPIN,
 * then with sleeps that grow from NAP_MIN to NAP_MAX while nothing completes; the watchdog's
 * timeout counts from the last completion. */
static void wait_reqs(RtComm *c, int n, MPI_Request *req, const Wait *w) {
  int idx[MAX_REQ], left = n;
  long nap = NAP_MIN;
  double since = rt_util_now_s(), last = since;
  if (n > MAX_REQ) RT_INTERNAL("too many requests in one wait");
  for (;;) {
    int out = 0;
    MPI_CHECK(MPI_Testsome(n, req, &out, idx, MPI_STATUSES_IGNORE));
    if (out == MPI_UNDEFINED) return; /* every request was done already */
    if (out > 0) {
      if ((left -= out) <= 0) return;
      since = rt_util_now_s();
      nap = NAP_MIN;
      continue;
    }
    double t = rt_util_now_s();
    if (t - since < SPIN) { /* a short wait is over soon: poll, letting others run meanwhile */
      sched_yield();
      continue;
    }
    /* a long gap between two polls: this process did not run (SIGSTOP, a starved core); the
     * others are not to blame for that time */
    if (t - last > FROZEN) since += t - last;
    last = t;
    if (notice_waiting(c)) stuck(c, w, req, &c->where, since, 0);
    if (c->timeout > 0 && t - since >= c->timeout) stuck(c, w, req, &c->where, since, 1);
    sleep_ns(nap);
    nap = nap * 3 / 2 < NAP_MAX ? nap * 3 / 2 : NAP_MAX;
  }
}

/* Waits for the collective rq on g (op: what it is, for the watchdog's message). */
static void coll_wait(RtComm *c, MPI_Comm g, MPI_Request *rq, const char *op, int64_t count, const char *unit) {
  Wait w = {.op = op, .g = g, .count = count, .unit = unit};
  w.seq = next_seq(c, g, &w.gid);
  wait_reqs(c, 1, rq, &w);
}

void rt_comm_set_timeout(RtComm *c, double seconds) {
  if (c) c->timeout = seconds > 0 ? seconds : 0;
}

void rt_comm_set_where(RtComm *c, const RtWhere *w) {
  if (c) c->where = *w;
}

void rt_comm_set_what(RtComm *c, const char *what) {
  if (c) c->where = (RtWhere){.step = -1, .entry = -1, .block = -1, .instr = -1, .mb = -1, .what = what};
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
  c->world = c->aux = c->wd = c->pp = c->tp = c->dp = c->emb = MPI_COMM_NULL;
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
    ncclComm_t all[4] = {c->npp, c->ntp, c->ndp, c->nemb};
    for (int i = 0; i < 4; i++)
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

/* ---- collectives --------------------------------------------------------------------------- */

int rt_comm_all_ok(RtComm *c, int ok) {
  int v = ok ? 1 : 0, r = v;
  if (c && c->mpi) {
    MPI_Request rq;
    MPI_CHECK(MPI_Iallreduce(&v, &r, 1, MPI_INT, MPI_MIN, c->aux, &rq));
    coll_wait(c, c->aux, &rq, "the check that every rank succeeded", -1, NULL);
  }
  return r;
}

void rt_comm_barrier(RtComm *c) {
  if (c && c->mpi) {
    MPI_Request rq;
    MPI_CHECK(MPI_Ibarrier(c->aux, &rq));
    coll_wait(c, c->aux, &rq, "a barrier", -1, NULL);
  }
}

static void allgather(RtComm *c, const void *mine, void *all, size_t bytes, const char *op) {
  if (bytes > (size_t)INT32_MAX) RT_INTERNAL("allgather of more than 2 GiB per rank");
  MPI_Request rq;
  MPI_CHECK(MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c->aux, &rq));
  coll_wait(c, c->aux, &rq, op, (int64_t)bytes, "bytes from each rank");
}

void rt_comm_allgather(RtComm *c, const void *mine, void *all, size_t bytes) {
  if (!c || !c->mpi) {
    memmove(all, mine, bytes);
    return;
  }
  allgather(c, mine, all, bytes, "an allgather");
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
  allgather(c, pair, all, sizeof pair, "a sum over the world");
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
    coll_wait(c, c->aux, &rq, "a broadcast", (int64_t)n, "bytes");
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
  coll_wait(c, c->aux, &rq, "a gather of sizes on rank 0", -1, NULL);
  if (c->rank != 0) {
    for (size_t off = 0; off < n; off += CHUNK) {
      size_t k = n - off < CHUNK ? n - off : CHUNK;
      RtP2p m = {.send = 1, .peer = 0, .tag = 1, .bytes = (int64_t)k};
      MPI_CHECK(MPI_Isend((const unsigned char *)mine + off, (int)k, MPI_BYTE, 0, 1, c->aux, &rq));
      wait_reqs(c, 1, &rq, &(Wait){.g = MPI_COMM_NULL, .n = 1, .msg = &m, .mop = "a gather on rank 0"});
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
      wait_reqs(c, 1, &rq, &(Wait){.g = MPI_COMM_NULL, .n = 1, .msg = &m, .mop = "a gather on rank 0"});
    }
    at += sizes[r];
  }
  free(ns);
  free(sink);
  if (!b) return RT_FAIL("out of memory gathering %zu bytes on rank 0", total);
  *all = b;
  return 0;
}

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
  coll_wait(c, g, &rq, "the broadcast of an NCCL id", (int64_t)sizeof id, "bytes");
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
    if (o->send) NCCL_CHECK(ncclSend(buf, (size_t)(o->bytes / 4), ncclFloat, peer, c->npp, (cudaStream_t)stream));
    else NCCL_CHECK(ncclRecv(buf, (size_t)(o->bytes / 4), ncclFloat, peer, c->npp, (cudaStream_t)stream));
  }
  NCCL_CHECK(ncclGroupEnd());
}
#endif

void rt_comm_use_device(RtComm *c, RtDev *d, const RtProg *p) {
  (void)p;
  if (!c || !c->mpi || !d->uid[0]) return;
#ifdef PPR_CUDA
  /* NCCL takes one rank per GPU: ranks that share one go through host-staged MPI */
  char(*uids)[sizeof d->uid] = malloc((size_t)c->size * sizeof *uids);
  if (!uids) RT_INTERNAL("out of memory");
  allgather(c, d->uid, uids, sizeof d->uid, "the allgather of the GPUs' ids");
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
  c->npp = nccl_over(c, c->pp);
  c->ntp = nccl_over(c, c->tp);
  c->ndp = nccl_over(c, c->dp);
  c->nemb = nccl_over(c, c->emb);
  c->nccl_sub = calloc((size_t)(c->nsub ? c->nsub : 1), sizeof *c->nccl_sub);
  if (!c->nccl_sub) RT_INTERNAL("out of memory");
  for (int i = 0; i < c->nsub; i++) c->nccl_sub[i] = nccl_over(c, c->sub[i]);
  c->prev = p->prev, c->next = p->next;
  c->pp_prev = p->prev >= 0 ? rank_in(c, c->pp, p->prev) : -1;
  c->pp_next = p->next >= 0 ? rank_in(c, c->pp, p->next) : -1;
  c->nccl = 1;
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
      ncclComm_t all[4] = {c->npp, c->ntp, c->ndp, c->nemb};
      for (int i = 0; i < 4 + c->nsub; i++) {
        ncclComm_t m = i < 4 ? all[i] : c->nccl_sub[i - 4];
        ncclResult_t e = ncclSuccess;
        if (m) NCCL_CHECK(ncclCommGetAsyncError(m, &e));
        if (e != ncclSuccess && e != ncclInProgress) {
          ncclCommAbort(m);
          nccl_fail(e, "a collective or message (ncclCommGetAsyncError)", __FILE__, __LINE__);
        }
      }
      double t = rt_util_now_s();
      int late = c->timeout > 0 && t - since >= c->timeout;
      if (late || notice_waiting(c)) { /* the device's queue is stuck: name its first NCCL operation */
        Wait w = {.op = c->nccl_op ? c->nccl_op : "the device's queued work",
                  .g = c->nccl_g,
                  .seq = c->nccl_seq,
                  .count = c->nccl_op ? c->nccl_count : -1,
                  .unit = "floats",
                  .n = c->nccl_nmsg,
                  .msg = c->nccl_msg};
        if (w.g != MPI_COMM_NULL) w.gid = group_id(c, w.g);
        stuck(c, &w, NULL, &c->nccl_where, since, late);
      }
      nanosleep(&nap, NULL);
    }
  }
#else
  (void)c;
#endif
  return rt_dev_sync(d);
}

void rt_comm_p2p_post(RtComm *c, RtDev *d, int n, const RtP2p *ops) {
  if (!c || !c->mpi) RT_INTERNAL("a pipeline message in a one-rank world");
#ifdef PPR_CUDA
  if (c->nccl) {
    nccl_p2p(c, d, n, ops); /* on the device's stream: what follows it there waits for it */
    return;
  }
#endif
  if (c->nreq + n > MAX_REQ) RT_INTERNAL("too many messages in flight");
  for (int i = 0; i < n; i++) {
    const RtP2p *o = &ops[i];
    if (o->bytes / 4 > INT32_MAX) RT_INTERNAL("a message of more than 2^31 floats");
    Stage *st = &c->stage[c->nreq];
    st->bytes = 0;
    void *buf = rt_dev_host(d, o->off);
    if (!buf) { /* host staging: the device's bytes go out of, or come into, a host copy */
      buf = room(&st->buf, &st->cap, (size_t)o->bytes);
      if (o->send && rt_dev_read(d, o->off, buf, o->bytes)) dev_fail(c, d);
      if (!o->send) st->off = o->off, st->bytes = o->bytes;
    }
    c->msg[c->nreq] = *o;
    MPI_Request *rq = &c->req[c->nreq++];
    if (o->send) MPI_CHECK(MPI_Isend(buf, (int)(o->bytes / 4), MPI_FLOAT, o->peer, o->tag, c->world, rq));
    else MPI_CHECK(MPI_Irecv(buf, (int)(o->bytes / 4), MPI_FLOAT, o->peer, o->tag, c->world, rq));
  }
}

void rt_comm_p2p_wait(RtComm *c, RtDev *d) {
  if (!c || !c->nreq) return; /* NCCL's messages: ordered on the device's stream, waited for there */
  wait_reqs(c, c->nreq, c->req, &(Wait){.g = MPI_COMM_NULL, .n = c->nreq, .msg = c->msg});
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
    coll_wait(c, g, &rq, name, count, "floats");
    reduce_rows(buf, all, count, n, count, op);
    return;
  }
  if (n > c->ints_cap) {
    free(c->ints);
    c->ints = malloc((size_t)n * 4 * sizeof *c->ints);
    if (!c->ints) RT_INTERNAL("out of memory");
    c->ints_cap = n;
  }
  int *counts = c->ints, *displs = counts + n, *rcounts = displs + n, *rdispls = rcounts + n;
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
  coll_wait(c, g, &rq, name, count, "floats");
  reduce_rows(buf + displs[me], parts, len, n, len, op);
  MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, g, &rq));
  coll_wait(c, g, &rq, name, count, "floats");
}

/* det_allreduce on the floats at arena offset off, through a host copy where the arena is not host memory. */
static void dev_allreduce(RtComm *c, RtDev *d, MPI_Comm g, int op, int64_t off, int64_t count, const char *name) {
#ifdef PPR_CUDA
  if (c->nccl) { /* NCCL's reduction: every member gets the same bits, in NCCL's fixed order */
    ncclComm_t m = g == c->tp ? c->ntp : g == c->dp ? c->ndp : g == c->emb ? c->nemb : NULL;
    for (int i = 0; i < c->nsub && !m; i++)
      if (g == c->sub[i]) m = c->nccl_sub[i];
    if (!m) RT_INTERNAL("an allreduce without its NCCL communicator");
    void *stream = NULL, *buf = rt_dev_native(d, off, &stream);
    int gid = 0;
    int64_t seq = next_seq(c, g, &gid);
    if (!c->nccl_busy) { /* the first operation of the queue: what it waits for if it stops */
      c->nccl_busy = 1;
      c->nccl_op = name, c->nccl_g = g, c->nccl_seq = seq, c->nccl_count = count, c->nccl_nmsg = 0;
      c->nccl_where = c->where;
    }
    NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)count, ncclFloat, op == RT_OP_MAX ? ncclMax : ncclSum, m,
                             (cudaStream_t)stream));
    return;
  }
#endif
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
  dev_allreduce(c, d, c->emb, RT_OP_SUM, off, count, "allreduce_tied");
}

void rt_comm_allreduce(RtComm *c, RtDev *d, int group, int sub, int op, int64_t off, int64_t count) {
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
    dev_allreduce(c, d, g, op, off, count, names[op == RT_OP_MAX][group == RT_G_TP ? 0 : group == RT_G_DP ? 2 : 1]);
}

int rt_comm_before_host(RtComm *c, RtDev *d) { return c && c->nccl ? rt_comm_wait(c, d) : 0; }

int rt_comm_tag_ub(RtComm *c) {
  if (!c || !c->mpi) return INT32_MAX;
  int *ub = NULL, flag = 0;
  MPI_CHECK(MPI_Comm_get_attr(c->world, MPI_TAG_UB, &ub, &flag));
  return flag && ub ? *ub : 32767; /* the least MPI promises */
}

/* ---- the program's communicators -------------------------------------------------------------- */

void rt_comm_groups(RtComm *c, const RtProg *p) {
  if (c && c->mpi) {
    int tp = p->tp, pp = p->pp;
    /* MPI_Comm_split waits for every rank, unwatched: the watchdog sees them arrive here first */
    rt_comm_barrier(c);
    MPI_CHECK(MPI_Comm_split(c->world, p->dp_rank * tp + p->tp_rank, p->stage, &c->pp));
    MPI_CHECK(MPI_Comm_split(c->world, p->dp_rank * pp + p->stage, p->tp_rank, &c->tp));
    MPI_CHECK(MPI_Comm_split(c->world, p->stage * tp + p->tp_rank, p->dp_rank, &c->dp));
    MPI_CHECK(
        MPI_Comm_split(c->world, p->nshared > 0 ? p->dp_rank * tp + p->tp_rank : MPI_UNDEFINED, p->stage, &c->emb));
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
    for (int b = 0; b < RT_NBLK; b++)
      for (int i = 0; i < p->blk[b].n; i++) {
        const RtInstr *x = &p->blk[b].ins[i];
        if (x->kind != RT_I_ALLREDUCE || x->group != RT_G_TP_SUB) continue;
        for (int k = 0; k < ndiv; k++) used[k] |= div[k] == x->sub;
      }
    MPI_Request rq;
    MPI_CHECK(MPI_Iallreduce(used, any, ndiv, MPI_INT, MPI_MAX, c->world, &rq));
    coll_wait(c, c->world, &rq, "the start-up's agreement on the tp/R groups", -1, NULL);
    for (int k = 0; k < ndiv; k++) {
      if (!any[k]) continue;
      int r = div[k], group = (p->dp_rank * pp + p->stage) * (tp / r) + p->tp_rank / r;
      c->sub_r[c->nsub] = r;
      MPI_CHECK(MPI_Comm_split(c->world, group, p->tp_rank, &c->sub[c->nsub]));
      c->nsub++;
    }
    free(div);
    free(used);
    free(any);
  }
}
