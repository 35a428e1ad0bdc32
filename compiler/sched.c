/* sched.c — pipeline schedules compiled into every rank's program (naive, GPipe, 1F1B), the
 * batching of a send with the receive that follows it, the compile-time proof that no rank
 * blocks forever, and the slot-by-slot timeline that --emit schedule prints. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

static void push(StageSched *st, SchedEntry e) {
  if (st->n == st->cap) {
    st->cap = st->cap ? 2 * st->cap : 32;
    st->e = xrealloc(st->e, (size_t)st->cap * sizeof *st->e);
  }
  st->e[st->n++] = e;
}

static SchedEntry comm1(CommKind k, int mb, int slot) {
  return (SchedEntry){.kind = SE_COMM, .ops = {{k, mb, slot}}, .nops = 1};
}

static const char *const kinds[] = {"naive", "gpipe", "1f1b"}; /* SCHED_NAMES says them */

bool sched_known(const char *kind) {
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (!strcmp(kinds[i], kind)) return true;
  return false;
}

/* The order of forwards and backwards one stage runs. */
static void order(const char *kind, int pp, int r, int M, int *seq, int *n) {
  *n = 0;
  if (!strcmp(kind, "naive")) { /* one micro-batch through every stage and back before the next */
    for (int m = 0; m < M; m++) seq[(*n)++] = m, seq[(*n)++] = -1 - m;
  } else if (!strcmp(kind, "gpipe")) { /* all forwards, then all backwards */
    for (int m = 0; m < M; m++) seq[(*n)++] = m;
    for (int m = 0; m < M; m++) seq[(*n)++] = -1 - m;
  } else { /* 1f1b: warm-up of min(p-r-1, M) forwards, one forward one backward, cool-down */
    int w = pp - r - 1 < M ? pp - r - 1 : M;
    for (int m = 0; m < w; m++) seq[(*n)++] = m;
    for (int i = 0; i < M - w; i++) seq[(*n)++] = w + i, seq[(*n)++] = -1 - i;
    for (int i = M - w; i < M; i++) seq[(*n)++] = -1 - i;
  }
}

/* Micro-batches in flight at once: the activation slots a stage needs. */
static int slots_needed(const int *seq, int n) {
  int live = 0, most = 0;
  for (int i = 0; i < n; i++) {
    live += seq[i] >= 0 ? 1 : -1;
    if (live > most) most = live;
  }
  return most ? most : 1;
}

Sched *sched_build(int pp, int M, const char *kind) {
  Sched *s = xcalloc(1, sizeof *s);
  s->pp = pp;
  s->M = M;
  snprintf(s->kind, sizeof s->kind, "%s", kind);
  s->st = xcalloc((size_t)pp, sizeof *s->st);
  int *seq = xmalloc((size_t)(2 * M) * sizeof *seq);
  for (int r = 0; r < pp; r++) {
    StageSched *st = &s->st[r];
    int n;
    order(kind, pp, r, M, seq, &n);
    st->nslots = slots_needed(seq, n);
    bool first = r == 0, last = r == pp - 1;
    for (int i = 0; i < n; i++) {
      int m = seq[i] >= 0 ? seq[i] : -1 - seq[i], slot = m % st->nslots;
      if (seq[i] >= 0) {
        if (!first) push(st, comm1(C_RECV_FWD, m, slot));
        push(st, (SchedEntry){.kind = SE_F, .mb = m, .slot = slot});
        if (!last) push(st, comm1(C_SEND_FWD, m, slot));
      } else {
        if (!last) push(st, comm1(C_RECV_BWD, m, slot));
        push(st, (SchedEntry){.kind = SE_B, .mb = m, .slot = slot});
        if (!first) push(st, comm1(C_SEND_BWD, m, slot));
      }
    }
    /* a send and the receive in the other direction right after it go out as one batch */
    int out = 0;
    for (int i = 0; i < st->n; i++) {
      SchedEntry e = st->e[i];
      if (e.kind == SE_COMM && i + 1 < st->n && st->e[i + 1].kind == SE_COMM) {
        CommKind a = e.ops[0].kind, b = st->e[i + 1].ops[0].kind;
        if ((a == C_SEND_FWD && b == C_RECV_BWD) || (a == C_SEND_BWD && b == C_RECV_FWD)) {
          e.ops[1] = st->e[i + 1].ops[0];
          e.nops = 2;
          i++;
        }
      }
      st->e[out++] = e;
    }
    st->n = out;
  }
  free(seq);
  return s;
}

void sched_free(Sched *s) {
  if (!s) return;
  for (int r = 0; r < s->pp; r++) free(s->st[r].e);
  free(s->st);
  free(s);
}

static const char *comm_name[] = {"send_forward", "recv_forward", "send_backward", "recv_backward"};

void sched_entry_str(const SchedEntry *e, char *buf, size_t n) {
  if (e->kind == SE_F) snprintf(buf, n, "F %d (slot %d)", e->mb, e->slot);
  else if (e->kind == SE_B) snprintf(buf, n, "B %d (slot %d)", e->mb, e->slot);
  else if (e->nops == 1) snprintf(buf, n, "%s %d", comm_name[e->ops[0].kind], e->ops[0].mb);
  else
    snprintf(buf, n, "%s %d + %s %d", comm_name[e->ops[0].kind], e->ops[0].mb, comm_name[e->ops[1].kind], e->ops[1].mb);
}

/* ============================================================================================
 * The proof: every rank's communication, simulated together. An operation completes when its
 * peer has the matching operation posted (same direction and micro-batch); a batch completes
 * when all of its operations have; a rank then moves on. Compute never blocks.
 * ========================================================================================== */

static int peer_of(CommKind k, int r) { return k == C_SEND_FWD || k == C_RECV_BWD ? r + 1 : r - 1; }
static CommKind match_of(CommKind k) { return (CommKind)(k ^ 1); } /* send <-> recv, ORDER CommKind */

/* The rank's current batch, skipping compute; -1 when it is done. */
static int current(const Sched *s, int r, const int *pc) {
  int i = pc[r];
  while (i < s->st[r].n && s->st[r].e[i].kind != SE_COMM) i++;
  return i < s->st[r].n ? i : -1;
}

/* Located at the train block's schedule setting; from a flag or the default, "ppc: error:". */
__attribute__((format(printf, 3, 4))) static void report(Src *src, Loc at, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (at.first >= 0) diag_error(src, at, "%s", msg);
  else fprintf(stderr, "ppc: error: %s: %s\n", src->path, msg), src->nerrors++;
}

int sched_verify(const Sched *s, Src *src, Loc at) {
  int pp = s->pp;
  /* every stage runs each micro-batch's forward once, then its backward once */
  for (int r = 0; r < pp; r++) {
    int *seen = xcalloc((size_t)s->M, sizeof *seen);
    for (int i = 0; i < s->st[r].n; i++) {
      const SchedEntry *e = &s->st[r].e[i];
      if (e->kind == SE_COMM) continue;
      bool bad = e->mb < 0 || e->mb >= s->M || seen[e->mb] != (e->kind == SE_F ? 0 : 1);
      if (bad) {
        char buf[96];
        sched_entry_str(e, buf, sizeof buf);
        report(src, at,
               "schedule '%s': rank %d, entry %d (%s) is out of order: each micro-batch's forward runs once, "
               "then its backward once",
               s->kind, r, i, buf);
        free(seen);
        return 1;
      }
      seen[e->mb]++;
    }
    for (int m = 0; m < s->M; m++)
      if (seen[m] != 2) {
        report(src, at, "schedule '%s': rank %d never runs the %s of micro-batch %d", s->kind, r,
               seen[m] ? "backward" : "forward", m);
        free(seen);
        return 1;
      }
    free(seen);
  }
  int *pc = xcalloc((size_t)pp, sizeof *pc);
  bool(*done)[2] = xcalloc((size_t)pp, sizeof *done);
  int rc = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; r++) {
      int i = current(s, r, pc);
      if (i < 0) {
        pc[r] = s->st[r].n;
        continue;
      }
      const SchedEntry *e = &s->st[r].e[i];
      for (int k = 0; k < e->nops; k++) {
        if (done[r][k]) continue;
        const CommOp *op = &e->ops[k];
        int q = peer_of(op->kind, r);
        if (q < 0 || q >= pp) continue; /* reported below: no peer */
        int j = current(s, q, pc);
        if (j < 0) continue;
        const SchedEntry *f = &s->st[q].e[j];
        for (int l = 0; l < f->nops; l++)
          if (!done[q][l] && f->ops[l].kind == match_of(op->kind) && f->ops[l].mb == op->mb &&
              peer_of(f->ops[l].kind, q) == r)
            done[r][k] = done[q][l] = true;
      }
      bool all = true;
      for (int k = 0; k < e->nops; k++) all &= done[r][k];
      if (all) {
        pc[r] = i + 1;
        done[r][0] = done[r][1] = false;
        progress = true;
      }
    }
  }
  /* anyone left waiting? */
  char buf[96], buf2[96];
  for (int r = 0; r < pp; r++) {
    int i = current(s, r, pc);
    if (i < 0) continue;
    const SchedEntry *e = &s->st[r].e[i];
    sched_entry_str(e, buf, sizeof buf);
    int q = peer_of(e->ops[0].kind, r);
    for (int k = 0; k < e->nops; k++)
      if (!done[r][k]) q = peer_of(e->ops[k].kind, r);
    int j = q >= 0 && q < pp ? current(s, q, pc) : -1;
    if (q < 0 || q >= pp)
      report(src, at, "schedule '%s': rank %d, entry %d (%s) has no peer stage", s->kind, r, i, buf);
    else if (j < 0)
      report(src, at, "schedule '%s': rank %d, entry %d (%s) is never matched: rank %d has finished", s->kind, r, i,
             buf, q);
    else {
      sched_entry_str(&s->st[q].e[j], buf2, sizeof buf2);
      report(src, at,
             "schedule '%s' deadlocks: rank %d waits in entry %d (%s) for rank %d, which waits in entry %d (%s)",
             s->kind, r, i, buf, q, j, buf2);
    }
    rc = 1;
    break; /* the first blocked rank names the cycle; the rest follow from it */
  }
  free(pc);
  free(done);
  return rc;
}

/* --debug-schedule R:I:J swaps entries I and J of rank R; R:I drops entry I. */
void sched_debug_break(Sched *s, const char *how) {
  int r = -1, i = -1, j = -1;
  int n = sscanf(how, "%d:%d:%d", &r, &i, &j);
  if (n < 2 || r < 0 || r >= s->pp || i < 0 || i >= s->st[r].n) diag_fatal("--debug-schedule: bad spec '%s'", how);
  StageSched *st = &s->st[r];
  if (n == 3) {
    if (j < 0 || j >= st->n) diag_fatal("--debug-schedule: bad spec '%s'", how);
    SchedEntry t = st->e[i];
    st->e[i] = st->e[j];
    st->e[j] = t;
  } else {
    memmove(&st->e[i], &st->e[i + 1], (size_t)(st->n - i - 1) * sizeof *st->e);
    st->n--;
  }
}

/* ============================================================================================
 * The timeline: a forward takes one time slot, a backward two (it computes the gradients of the
 * inputs and of the weights); a stage waits for its inputs. Bubble = idle / total.
 * ========================================================================================== */

static int64_t gcd(int64_t a, int64_t b) { return b ? gcd(b, a % b) : a; }

void sched_print(FILE *f, const Sched *s) {
  int pp = s->pp, M = s->M;
  int *fdone = xcalloc((size_t)(pp * M), sizeof *fdone), *bdone = xcalloc((size_t)(pp * M), sizeof *bdone);
  int *pc = xcalloc((size_t)pp, sizeof *pc), *clock = xcalloc((size_t)pp, sizeof *clock);
  int total = 0;
  /* per stage, the compute entries in order */
  int **seq = xcalloc((size_t)pp, sizeof *seq), *nseq = xcalloc((size_t)pp, sizeof *nseq);
  for (int r = 0; r < pp; r++) {
    seq[r] = xcalloc((size_t)(2 * M), sizeof **seq);
    for (int i = 0; i < s->st[r].n; i++) {
      const SchedEntry *e = &s->st[r].e[i];
      if (e->kind == SE_F) seq[r][nseq[r]++] = e->mb;
      if (e->kind == SE_B) seq[r][nseq[r]++] = -1 - e->mb;
    }
  }
  int width = 3 * M * pp + 3 * M;
  char **line = xcalloc((size_t)pp, sizeof *line);
  for (int r = 0; r < pp; r++) line[r] = xcalloc((size_t)width + 1, 4);
  int *start = xcalloc((size_t)(pp * 2 * M), sizeof *start);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; r++) {
      if (pc[r] >= nseq[r]) continue;
      int x = seq[r][pc[r]], m = x >= 0 ? x : -1 - x;
      int ready;
      if (x >= 0) ready = r == 0 ? 0 : fdone[(r - 1) * M + m];
      else ready = r == pp - 1 ? fdone[r * M + m] : bdone[(r + 1) * M + m];
      if (ready < 0 || (x >= 0 && r > 0 && !fdone[(r - 1) * M + m]) ||
          (x < 0 && r < pp - 1 && !bdone[(r + 1) * M + m]) || (x < 0 && !fdone[r * M + m]))
        continue;
      int t0 = clock[r] > ready ? clock[r] : ready;
      int t1 = t0 + (x >= 0 ? 1 : 2);
      start[r * 2 * M + pc[r]] = t0;
      if (x >= 0) fdone[r * M + m] = t1;
      else bdone[r * M + m] = t1;
      clock[r] = t1;
      if (t1 > total) total = t1;
      pc[r]++;
      progress = true;
    }
  }
  fprintf(f, "# schedule %s: %d stages, %d micro-batches (a forward takes one slot, a backward two)\n", s->kind, pp, M);
  for (int r = 0; r < pp; r++) {
    fprintf(f, "stage %d |", r);
    int t = 0;
    for (int i = 0; i < nseq[r]; i++) {
      int t0 = start[r * 2 * M + i], x = seq[r][i], m = x >= 0 ? x : -1 - x;
      for (; t < t0; t++) fprintf(f, "  . ");
      if (x >= 0) fprintf(f, " F%-2d", m), t++;
      else fprintf(f, " B%-2d B%-2d", m, m), t += 2;
    }
    for (; t < total; t++) fprintf(f, "  . ");
    fprintf(f, "|  slots %d\n", s->st[r].nslots);
  }
  int64_t busy = 3LL * M * pp, all = (int64_t)total * pp, idle = all - busy, d = gcd(idle, all);
  fprintf(f, "bubble: %lld/%lld = %.1f%% of every stage's time idle (%lld of %lld slots)\n", (long long)(idle / d),
          (long long)(all / d), 100.0 * (double)idle / (double)all, (long long)idle, (long long)all);
  for (int r = 0; r < pp; r++) free(line[r]), free(seq[r]);
  free(line);
  free(seq);
  free(nseq);
  free(start);
  free(fdone);
  free(bdone);
  free(pc);
  free(clock);
}
