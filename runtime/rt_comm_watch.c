/* rt_comm_watch.c - the watchdog of ppr's transport: every wait for MPI requests polled, and a rank whose wait makes
 * no progress names what it waits for and for whom, tells the others, and ends the job (rt_comm.h, "the watchdog"). */
#include "rt_comm_impl.h"
#include "rt_util.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SPIN       50e-6    /* s: a wait polls without sleeping this long first */
#define NAP_MIN    50000L   /* ns: then the first sleep between two polls */
#define NAP_MAX    1000000L /* ns: the longest (each sleep is 1.5 times the last) */
#define TAG_NOTICE 1        /* the watchdog's notices, on RtComm.wd */
#define FROZEN     0.25     /* s: a gap between two polls of a wait this long is time the process did not run */

/* ---- the watchdog ---------------------------------------------------------------------------- */

static void sleep_ns(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL); /* a signal may cut it short: the caller polls again */
}

/* What a rank that stopped waiting tells the others. */
typedef struct {
  int32_t rank, timed_out, in_coll, gid;
  int64_t seq;
  double waited; /* seconds */
} Notice;

int rt_comm_group_id(const RtComm *c, MPI_Comm g) {
  if (g == c->aux) return G_AUX;
  if (g == c->pp) return G_PP;
  if (g == c->tp) return G_TP;
  if (g == c->dp) return G_DP;
  if (g == c->emb) return G_EMB;
  if (g == c->cp) return G_CP;
  for (int i = 0; i < c->nsub; i++)
    if (g == c->sub[i]) return G_SUB + i;
  return G_WORLD;
}

/* The next collective on g: its count among g's collectives, the same on every member. */
int64_t rt_comm_next_seq(RtComm *c, MPI_Comm g, int *gid) {
  *gid = rt_comm_group_id(c, g);
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

/* "; step 2, micro-batch 1, schedule entry 7, backward instruction 12 at rank2.prog:301" */
static size_t where_text(const RtWhere *w, char *s, size_t n) {
  size_t at = 0;
#define ADD(...) at += at < n ? (size_t)snprintf(s + at, n - at, __VA_ARGS__) : 0
#define SEP      (at ? ", " : "; ")
  if (w->what) ADD("%s%s", SEP, w->what);
  if (w->step >= 0) ADD("%sstep %lld", SEP, (long long)w->step + 1);
  if (w->mb >= 0) ADD("%smicro-batch %d", SEP, w->mb);
  if (w->entry >= 0) ADD("%sschedule entry %d", SEP, w->entry);
  if (w->block >= 0) ADD("%s%s", SEP, rt_block_name(w->block));
  if (w->block >= 0 && !rt_blk_program(w->block) && w->chunk > 0) ADD(":%d", w->chunk);
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
  size_t k = (size_t)snprintf(s, n, "%s of %s %s rank %d, micro-batch %d", m->send ? "send" : "recv",
                              m->tag % 2 ? "gradients" : "activations", m->send ? "to" : "from", m->peer, m->mb);
  if (k < n && m->chunk >= 0) k += (size_t)snprintf(s + k, n - k, " of chunk %d", m->chunk);
  if (k < n) k += (size_t)snprintf(s + k, n - k, ", %s", m->tag % 2 ? "backward" : "forward");
  return k < n ? k : n;
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
int rt_comm_notice_waiting(RtComm *c) {
  int flag = 0;
  MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, TAG_NOTICE, c->wd, &flag, MPI_STATUS_IGNORE));
  return flag;
}

/* The wait w (its requests req, NULL: all of w's messages pending) made no progress since `since`:
 * for the timeout (timed_out), or another rank's watchdog said so (a notice). Tell every other
 * rank, hear what the ranks that are waiting too say during the grace period, print what this
 * rank waits for, then end the job. */
_Noreturn void rt_comm_stuck(RtComm *c, const Wait *w, const MPI_Request *req, const RtWhere *where, double since,
                             int timed_out) {
  /* the job ends: a SIGTERM (Open MPI's MPI_Abort sends one before SIGKILL) has nothing to stop,
   * and ends the rank as a second one would */
  rt_comm_stop_ending();
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
    while (rt_comm_notice_waiting(c)) {
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
void rt_comm_wait_reqs(RtComm *c, int n, MPI_Request *req, const Wait *w) {
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
    if (rt_comm_notice_waiting(c)) rt_comm_stuck(c, w, req, &c->where, since, 0);
    if (c->timeout > 0 && t - since >= c->timeout) rt_comm_stuck(c, w, req, &c->where, since, 1);
    sleep_ns(nap);
    nap = nap * 3 / 2 < NAP_MAX ? nap * 3 / 2 : NAP_MAX;
  }
}

/* Waits for the collective rq on g (op: what it is, for the watchdog's message). */
void rt_comm_coll_wait(RtComm *c, MPI_Comm g, MPI_Request *rq, const char *op, int64_t count, const char *unit) {
  Wait w = {.op = op, .g = g, .count = count, .unit = unit};
  w.seq = rt_comm_next_seq(c, g, &w.gid);
  rt_comm_wait_reqs(c, 1, rq, &w);
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
