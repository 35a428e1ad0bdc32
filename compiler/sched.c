/* sched.c — pipeline schedules compiled into every rank's program (naive, GPipe, 1F1B, ZB-H1;
 * interleaved 1F1B and ZB-V, whose ranks hold several chunks of layers),
 * the batching of a send with the receive that follows it, and the compile-time proof that every
 * stage runs each micro-batch's parts once and in order and that no rank blocks forever.
 * sched_time.c predicts their timelines. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pp_sim.h"
#include "ppc.h"

static void push(StageSched *st, SchedEntry e) {
  if (st->n == st->cap) {
    st->cap = st->cap ? 2 * st->cap : 32;
    st->e = xrealloc(st->e, (size_t)st->cap * sizeof *st->e);
  }
  st->e[st->n++] = e;
}

/* The order of one rank's compute: (kind, chunk, micro-batch) triples. */
typedef struct Order {
  SchedKind *kind;
  int *chunk, *mb;
  int n;
} Order;

static void add(Order *o, SchedKind k, int chunk, int mb) {
  o->kind[o->n] = k;
  o->chunk[o->n] = chunk;
  o->mb[o->n++] = mb;
}

/* naive: one micro-batch through every stage and back before the next */
static void order_naive(Order *o, int pp, int r, int M, int V) {
  (void)pp, (void)r, (void)V;
  for (int m = 0; m < M; m++) add(o, SE_F, 0, m), add(o, SE_B, 0, m);
}

/* gpipe: all forwards, then all backwards */
static void order_gpipe(Order *o, int pp, int r, int M, int V) {
  (void)pp, (void)r, (void)V;
  for (int m = 0; m < M; m++) add(o, SE_F, 0, m);
  for (int m = 0; m < M; m++) add(o, SE_B, 0, m);
}

/* 1f1b and zb-h1 share one pattern: step x runs F x, then B x-(p-1-r) (stage r's backward lags
 * its forward by the p-1-r stages after it), and with a split backward W x-(p-1) (every W lags
 * its forward by p-1 steps, which fills the bubbles at the end with weight gradients while the
 * activations held stay p at most, as 1F1B's first stage holds). Entries out of [0, M) are
 * skipped: the first steps are the warm-up, the last the cool-down. */
static void order_steps(Order *o, int pp, int r, int M, bool split) {
  for (int x = 0; x < M + pp - 1; x++) {
    int b = x - (pp - 1 - r), w = x - (pp - 1);
    if (x < M) add(o, SE_F, 0, x);
    if (b >= 0 && b < M) add(o, SE_B, 0, b);
    if (split && w >= 0 && w < M) add(o, SE_W, 0, w);
  }
}
static void order_1f1b(Order *o, int pp, int r, int M, int V) {
  (void)V;
  order_steps(o, pp, r, M, false);
}
static void order_zbh1(Order *o, int pp, int r, int M, int V) {
  (void)V;
  order_steps(o, pp, r, M, true);
}

/* interleaved (Megatron's interleaved 1F1B): rank r holds chunks r, r+p, ... of the p·V chunks
 * of layers. Its M·V forward units run in groups of p micro-batches per chunk: unit k is chunk
 * (k/p) mod V of micro-batch (k/(p·V))·p + k mod p; backward unit k the same micro-batch of chunk
 * V-1 - (k/p) mod V. A warm-up of (p-r-1)·2 + (V-1)·p forwards (all of them when M = p), then one
 * forward one backward, then the remaining backwards. M must be a multiple of p. */
static void unit(int k, int pp, int V, bool fwd, int *chunk, int *mb) {
  int c = (k / pp) % V;
  *chunk = fwd ? c : V - 1 - c;
  *mb = k / (pp * V) * pp + k % pp;
}
static void order_interleaved(Order *o, int pp, int r, int M, int V) {
  if (V == 1) { /* one chunk: 1F1B itself */
    order_steps(o, pp, r, M, false);
    return;
  }
  int total = M * V, warm = M == pp ? total : (pp - r - 1) * 2 + (V - 1) * pp;
  if (warm > total) warm = total;
  int c, m;
  for (int k = 0; k < warm; k++) unit(k, pp, V, true, &c, &m), add(o, SE_F, c, m);
  for (int k = 0; k < total - warm; k++) {
    unit(warm + k, pp, V, true, &c, &m), add(o, SE_F, c, m);
    unit(k, pp, V, false, &c, &m), add(o, SE_B, c, m);
  }
  for (int k = total - warm; k < total; k++) unit(k, pp, V, false, &c, &m), add(o, SE_B, c, m);
}

/* zbv (the Zero Bubble paper's ZB-V): two chunks per rank in a V, rank r holding virtual stages r
 * and 2p-1-r, so rank 0 holds the first and the last; the backward split into B and W. */
static int zbv_v(int pp, int r, int c) { return c ? 2 * pp - 1 - r : r; }

/* zbv's order, as the Zero Bubble paper draws ZB-V (rank r holds chunk 0, virtual stage r, and
 * chunk 1, virtual stage 2p-1-r): a warm-up of 2(p-r)-1 forwards of chunk 0; r pairs of a
 * chunk-1 and a chunk-0 forward; p-r rounds of a chunk-1 forward, B and W; then the steady state,
 * rounds of F, B, W on chunk 0 and then on chunk 1 while forwards remain; a cool-down of r pairs of
 * B (chunk 0, chunk 1) and p-r of B and W on chunk 0; the remaining W last. Entries of a
 * micro-batch past M are left out, and whatever a phase could not run (few micro-batches) comes
 * in the cool-down. With F = B = W it leaves no bubble in the steady state and holds at most 2p
 * chunk activations, 1F1B's memory. */
typedef struct ZbvCount {
  int f[2], b[2], w[2]; /* per chunk: the next micro-batch of each kind */
} ZbvCount;

static void zbv_step(Order *o, ZbvCount *n, SchedKind k, int c, int M) {
  int *x = k == SE_F ? &n->f[c] : k == SE_B ? &n->b[c] : &n->w[c];
  if (*x >= M) return;
  if (k == SE_B && n->b[c] >= n->f[c]) return; /* never before its forward */
  if (k == SE_W && n->w[c] >= n->b[c]) return; /* never before its B */
  add(o, k, c, (*x)++);
}

static void order_zbv(Order *o, int pp, int r, int M, int V) {
  (void)V;
  ZbvCount n = {{0, 0}, {0, 0}, {0, 0}};
  for (int i = 0; i < 2 * (pp - r) - 1; i++) zbv_step(o, &n, SE_F, 0, M);
  for (int i = 0; i < r; i++) zbv_step(o, &n, SE_F, 1, M), zbv_step(o, &n, SE_F, 0, M);
  for (int i = 0; i < pp - r; i++)
    zbv_step(o, &n, SE_F, 1, M), zbv_step(o, &n, SE_B, 1, M), zbv_step(o, &n, SE_W, 1, M);
  while (n.f[1] < n.f[0] || n.f[0] < M) {
    zbv_step(o, &n, SE_F, 0, M), zbv_step(o, &n, SE_B, 0, M), zbv_step(o, &n, SE_W, 0, M);
    zbv_step(o, &n, SE_F, 1, M), zbv_step(o, &n, SE_B, 1, M), zbv_step(o, &n, SE_W, 1, M);
  }
  for (int i = 0; i < r; i++) zbv_step(o, &n, SE_B, 0, M), zbv_step(o, &n, SE_B, 1, M);
  for (int i = 0; i < pp - r; i++) zbv_step(o, &n, SE_B, 0, M), zbv_step(o, &n, SE_W, 0, M);
  while (n.b[1] < M || n.b[0] < M) zbv_step(o, &n, SE_B, 1, M), zbv_step(o, &n, SE_B, 0, M);
  while (n.w[1] < M) zbv_step(o, &n, SE_W, 1, M);
  while (n.w[0] < M) zbv_step(o, &n, SE_W, 0, M);
}

/* The schedules: SCHED_NAMES (ppc.h) lists them for messages, in this order. */
static const struct {
  const char *name;
  bool split;   /* the backward runs as B (activation gradients) and W (weight gradients) */
  bool chunked; /* a rank holds --vpp chunks of layers */
  bool vshape;  /* two chunks in a V: rank r holds virtual stages r and 2p-1-r (else r, r+p, ...) */
  void (*order)(Order *o, int pp, int r, int M, int V);
} kinds[] = {
    {"naive", false, false, false, order_naive},
    {"gpipe", false, false, false, order_gpipe},
    {"1f1b", false, false, false, order_1f1b},
    {"zb-h1", true, false, false, order_zbh1},
    {"interleaved", false, true, false, order_interleaved},
    {"zbv", true, true, true, order_zbv},
};
#define NKINDS ((int)(sizeof kinds / sizeof *kinds))

static int kind_index(const char *name) {
  for (int i = 0; i < NKINDS; i++)
    if (!strcmp(kinds[i].name, name)) return i;
  return -1;
}

bool sched_known(const char *kind) { return kind_index(kind) >= 0; }
bool sched_splits(const char *kind) { return kind_index(kind) >= 0 && kinds[kind_index(kind)].split; }
bool sched_chunked(const char *kind) { return kind_index(kind) >= 0 && kinds[kind_index(kind)].chunked; }

const char *sched_one_chunk(bool split) {
  for (int k = 0; k < NKINDS; k++)
    if (!kinds[k].chunked && kinds[k].split == split) return kinds[k].name;
  diag_fatal("internal: no one-chunk schedule with%s a split backward", split ? "" : "out");
}

int sched_vstage(const Sched *s, int r, int chunk) { return s->vshape ? zbv_v(s->pp, r, chunk) : chunk * s->pp + r; }
int sched_rank_of(const Sched *s, int v) { return !s->vshape ? v % s->pp : v < s->pp ? v : 2 * s->pp - 1 - v; }

const char *sched_fits(const char *kind, int pp, int V, int M, int nlayers, char *why, size_t n) {
  bool chunked = sched_chunked(kind);
  if (!chunked && V != 1)
    return snprintf(why, n, "--vpp %d needs a schedule whose ranks hold chunks of layers (interleaved); '%s' holds one",
                    V, kind),
           why;
  if (chunked && pp * V > nlayers)
    return snprintf(why, n,
                    "schedule '%s' cuts the %d layers into pp x vpp = %d chunks: every chunk needs a layer (vpp %d "
                    "or less would fit)",
                    kind, nlayers, pp * V, nlayers / pp > 0 ? nlayers / pp : 1),
           why;
  if (chunked && pp < 2)
    return snprintf(why, n, "schedule '%s' runs chunks of layers on a pipeline of ranks: it needs --pp 2 or more",
                    kind),
           why;
  int k = kind_index(kind);
  if (k >= 0 && kinds[k].vshape && V != 2)
    return snprintf(why, n, "schedule '%s' holds two chunks of layers per rank in a V: it needs --vpp 2, not %d", kind,
                    V),
           why;
  if (chunked && V > 1 && M % pp && !kinds[k].vshape) {
    char would[48];
    if (M < pp) snprintf(would, sizeof would, "%d would", pp);
    else snprintf(would, sizeof would, "%d or %d would", M / pp * pp, (M / pp + 1) * pp);
    snprintf(why, n,
             "schedule '%s' runs the micro-batches in groups of pp = %d: %d micro-batches per replica do not fit (%s)",
             kind, pp, M, would);
    return why;
  }
  return NULL;
}
int sched_count(void) { return NKINDS; }
const char *sched_name(int i) { return kinds[i].name; }

/* Each compute entry's activation slot, and how many slots the rank needs: a micro-batch's
 * activations are held from its forward to the end of its backward (its W when the backward is
 * split). One chunk: micro-batch m in slot m mod n, n the most held at once (the order runs the
 * micro-batches first in, first out). Chunks: the rank's slots are one pool (a slot is sized for
 * the largest chunk), a forward takes the lowest free slot and the last part frees it. */
static int assign_slots(const Order *o, bool split, int V, int M, int *slot) {
  int live = 0, most = 0;
  for (int i = 0; i < o->n; i++) {
    live += o->kind[i] == SE_F ? 1 : o->kind[i] == (split ? SE_W : SE_B) ? -1 : 0;
    if (live > most) most = live;
  }
  if (!most) most = 1;
  if (V == 1) {
    for (int i = 0; i < o->n; i++) slot[i] = o->mb[i] % most;
    return most;
  }
  int *holder = xmalloc((size_t)most * sizeof *holder), *at = xmalloc((size_t)(V * M) * sizeof *at);
  for (int q = 0; q < most; q++) holder[q] = -1;
  for (int i = 0; i < o->n; i++) {
    int unit = o->chunk[i] * M + o->mb[i];
    if (o->kind[i] == SE_F) {
      int q = 0;
      while (holder[q] >= 0) q++; /* a free one exists: at most `most` are held */
      holder[q] = unit, at[unit] = q;
    }
    slot[i] = at[unit];
    if (o->kind[i] == (split ? SE_W : SE_B)) holder[at[unit]] = -1;
  }
  free(holder);
  free(at);
  return most;
}

/* A message of micro-batch m across the boundary k of rank r's chunk c: its peer rank and the
 * chunk of the lower of the two virtual stages it links (pp_boundary_tag). */
static SchedEntry comm1(const Sched *s, int r, int c, PpBoundary k, int m, int slot) {
  int v = sched_vstage(s, r, c), other = pp_boundary_to_next(k) ? v + 1 : v - 1;
  CommOp op = {.kind = k,
               .mb = m,
               .slot = slot,
               .chunk = c,
               .peer = sched_rank_of(s, other),
               .link = pp_boundary_link(k, v, s->pp)};
  return (SchedEntry){.kind = SE_COMM, .chunk = c, .ops = {op}, .nops = 1};
}

/* a generation program's order: the micro-batch through the rank's chunks, in the order of their
 * virtual stages (c·pp + r, or r and 2·pp-1-r in a V: increasing in c either way) */
static void order_forward(Order *o, int pp, int r, int M, int V) {
  (void)pp, (void)r, (void)M;
  for (int c = 0; c < V; c++) add(o, SE_F, c, 0);
}

static Sched *build(int pp, int V, int M, const char *kind, bool split, bool vshape,
                    void (*order)(Order *o, int pp, int r, int M, int V)) {
  Sched *s = xcalloc(1, sizeof *s);
  s->pp = pp;
  s->V = V;
  s->M = M;
  s->split = split;
  s->vshape = vshape;
  s->fwd_only = order == order_forward;
  snprintf(s->kind, sizeof s->kind, "%s", kind);
  s->st = xcalloc((size_t)pp, sizeof *s->st);
  size_t cap = (size_t)(3 * M * V);
  Order o = {.kind = xmalloc(cap * sizeof *o.kind),
             .chunk = xmalloc(cap * sizeof *o.chunk),
             .mb = xmalloc(cap * sizeof *o.mb)};
  int nv = pp * V, *slot = xmalloc(cap * sizeof *slot);
  for (int r = 0; r < pp; r++) {
    StageSched *st = &s->st[r];
    o.n = 0;
    order(&o, pp, r, M, V);
    st->nslots = assign_slots(&o, s->split, V, M, slot);
    for (int i = 0; i < o.n; i++) {
      int m = o.mb[i], c = o.chunk[i], v = sched_vstage(s, r, c);
      bool first = v == 0, last = v == nv - 1;
      SchedEntry e = {.kind = o.kind[i], .chunk = c, .mb = m, .slot = slot[i]};
      /* the neighbours of the virtual stage; one on this rank too (the turn of a V) is a message
       * to itself, which the transport carries like any other */
      bool prev = !first, next = !last;
      switch (o.kind[i]) {
      case SE_F:
        if (prev) push(st, comm1(s, r, c, PP_RECV_FWD, m, e.slot));
        push(st, e);
        if (next) push(st, comm1(s, r, c, PP_SEND_FWD, m, e.slot));
        break;
      case SE_B:
        if (next) push(st, comm1(s, r, c, PP_RECV_BWD, m, e.slot));
        push(st, e);
        if (prev) push(st, comm1(s, r, c, PP_SEND_BWD, m, e.slot));
        break;
      case SE_W: push(st, e); break;
      case SE_COMM: diag_fatal("internal: a communication in a compute order");
      }
    }
    /* a send and the receive in the other direction right after it go out as one batch; with
     * chunks, any send and the receive after it (the ring of virtual stages wraps from the last
     * rank to the first: were every rank to send before it receives, none would receive) */
    int out = 0;
    for (int i = 0; i < st->n; i++) {
      SchedEntry e = st->e[i];
      if (e.kind == SE_COMM && i + 1 < st->n && st->e[i + 1].kind == SE_COMM) {
        PpBoundary a = e.ops[0].kind, b = st->e[i + 1].ops[0].kind;
        if ((a == PP_SEND_FWD && b == PP_RECV_BWD) || (a == PP_SEND_BWD && b == PP_RECV_FWD) ||
            (V > 1 && pp_boundary_is_send(a) && !pp_boundary_is_send(b))) {
          e.ops[1] = st->e[i + 1].ops[0];
          e.nops = 2;
          i++;
        }
      }
      st->e[out++] = e;
    }
    st->n = out;
  }
  free(o.kind);
  free(o.chunk);
  free(o.mb);
  free(slot);
  return s;
}

Sched *sched_build(int pp, int V, int M, const char *kind) {
  int k = kind_index(kind);
  if (k < 0 || V < 1 || V > SCHED_MAX_CHUNKS || (kinds[k].vshape && V != 2) || (!kinds[k].chunked && V != 1))
    diag_fatal("internal: sched_build of '%s' with %d chunks", kind, V);
  return build(pp, V, M, kind, kinds[k].split, kinds[k].vshape, kinds[k].order);
}

Sched *sched_forward(const Sched *train) {
  return build(train->pp, train->V, 1, PP_SCHED_FORWARD, false, train->vshape, order_forward);
}

void sched_free(Sched *s) {
  if (!s) return;
  for (int r = 0; r < s->pp; r++) free(s->st[r].e);
  free(s->st);
  free(s);
}

char sched_letter(SchedKind k) {
  switch (k) {
  case SE_F: return 'F';
  case SE_B: return 'B';
  case SE_W: return 'W';
  case SE_COMM: break;
  }
  return '?';
}

/* in messages, spelled out; ORDER PpBoundary */
static const char *comm_name[] = {"recv_forward", "send_forward", "recv_backward", "send_backward"};

void sched_entry_str(const Sched *s, const SchedEntry *e, char *buf, size_t n) {
  char c[2][24] = {"", ""};
  if (s->V > 1) /* which chunk, with chunks of layers */
    for (int k = 0; k < 2; k++) snprintf(c[k], sizeof c[k], " of chunk %d", k < e->nops ? e->ops[k].chunk : e->chunk);
  if (e->kind != SE_COMM) snprintf(buf, n, "%c %d%s (slot %d)", sched_letter(e->kind), e->mb, c[1], e->slot);
  else if (e->nops == 1) snprintf(buf, n, "%s %d%s", comm_name[e->ops[0].kind], e->ops[0].mb, c[0]);
  else
    snprintf(buf, n, "%s %d%s + %s %d%s", comm_name[e->ops[0].kind], e->ops[0].mb, c[0], comm_name[e->ops[1].kind],
             e->ops[1].mb, c[1]);
}

/* ============================================================================================
 * The proof: every rank's communication, simulated together. An operation completes when its
 * peer has the matching operation posted (same direction and micro-batch); a batch completes
 * when all of its operations have; a rank then moves on. Compute never blocks.
 * ========================================================================================== */

/* Located at the train block's schedule setting; from a flag or the default, "ppc: error:". */
void sched_report(Src *src, Loc at, const char *fmt, ...) {
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
  /* every stage runs each micro-batch's forward once, then its backward once (B then W once each
   * when the backward is split) */
  int parts = s->fwd_only ? 1 : s->split ? 3 : 2;
  for (int r = 0; r < pp; r++) {
    int *seen = xcalloc((size_t)(s->M * s->V), sizeof *seen); /* per chunk and micro-batch */
    for (int i = 0; i < s->st[r].n; i++) {
      const SchedEntry *e = &s->st[r].e[i];
      if (e->kind == SE_COMM) continue;
      int step = e->kind == SE_F ? 0 : e->kind == SE_B ? 1 : 2;
      int idx = e->chunk * s->M + e->mb;
      bool bad = e->mb < 0 || e->mb >= s->M || e->chunk < 0 || e->chunk >= s->V || seen[idx] != step || step >= parts;
      if (bad) {
        char buf[96];
        sched_entry_str(s, e, buf, sizeof buf);
        sched_report(src, at,
                     "schedule '%s': rank %d, entry %d (%s) is out of order: each micro-batch's forward runs once, "
                     "then its backward once%s",
                     s->kind, r, i, buf, s->split ? " (B, then W)" : "");
        free(seen);
        return 1;
      }
      seen[idx]++;
    }
    for (int i = 0; i < s->M * s->V; i++)
      if (seen[i] != parts) {
        const char *what = seen[i] == 0   ? "forward"
                           : seen[i] == 1 ? (s->split ? "backward (B)" : "backward")
                                          : "weight gradients (W)";
        char chunk[24] = "";
        if (s->V > 1) snprintf(chunk, sizeof chunk, " of chunk %d", i / s->M);
        sched_report(src, at, "schedule '%s': rank %d never runs the %s of micro-batch %d%s", s->kind, r, what,
                     i % s->M, chunk);
        free(seen);
        return 1;
      }
    free(seen);
  }
  /* the messages: each stage's comm entries as pp_sim.c's batches; entry[r][k]: batch k's entry */
  PpSimRank *rank = xcalloc((size_t)pp, sizeof *rank);
  PpSimBatch **bat = xcalloc((size_t)pp, sizeof *bat);
  int **entry = xcalloc((size_t)pp, sizeof *entry), *pc = xcalloc((size_t)pp, sizeof *pc);
  unsigned char(*done)[2] = xcalloc((size_t)pp, sizeof *done);
  for (int r = 0; r < pp; r++) {
    const StageSched *st = &s->st[r];
    bat[r] = xcalloc((size_t)st->n + 1, sizeof **bat);
    entry[r] = xcalloc((size_t)st->n + 1, sizeof **entry);
    int n = 0;
    for (int i = 0; i < st->n; i++) {
      const SchedEntry *e = &st->e[i];
      if (e->kind != SE_COMM) continue;
      bat[r][n].nops = e->nops;
      for (int k = 0; k < e->nops; k++)
        bat[r][n].op[k] = (PpSimOp){.peer = e->ops[k].peer,
                                    .tag = pp_boundary_tag(e->ops[k].kind, e->ops[k].mb, e->ops[k].link, s->V),
                                    .send = pp_boundary_is_send(e->ops[k].kind)};
      entry[r][n++] = i;
    }
    rank[r] = (PpSimRank){bat[r], n};
  }
  int rc = 0;
  /* the programs' messages as rendezvous (NCCL's sends wait for their receives); the chunked
   * schedules' with sends that do not wait, as ppr carries them (MPI, sends left in flight) */
  if (s->V > 1) pp_sim_run_eager(rank, pp, pc, done);
  else pp_sim_run(rank, pp, pc, done);
  /* pc[r]: the batch rank r waits in; as an entry, -1 when the rank is done */
  for (int r = 0; r < pp; r++) pc[r] = pc[r] < rank[r].n ? entry[r][pc[r]] : -1;
  /* anyone left waiting? */
  char buf[96], buf2[96];
  for (int r = 0; r < pp; r++) {
    int i = pc[r];
    if (i < 0) continue;
    const SchedEntry *e = &s->st[r].e[i];
    sched_entry_str(s, e, buf, sizeof buf);
    int q = e->ops[0].peer;
    for (int k = 0; k < e->nops; k++)
      if (!done[r][k]) q = e->ops[k].peer;
    int j = q >= 0 && q < pp ? pc[q] : -1;
    if (q < 0 || q >= pp)
      sched_report(src, at, "schedule '%s': rank %d, entry %d (%s) has no peer stage", s->kind, r, i, buf);
    else if (j < 0)
      sched_report(src, at, "schedule '%s': rank %d, entry %d (%s) is never matched: rank %d has finished", s->kind, r,
                   i, buf, q);
    else {
      sched_entry_str(s, &s->st[q].e[j], buf2, sizeof buf2);
      sched_report(src, at,
                   "schedule '%s' deadlocks: rank %d waits in entry %d (%s) for rank %d, which waits in entry %d (%s)",
                   s->kind, r, i, buf, q, j, buf2);
    }
    rc = 1;
    break; /* the first blocked rank names the cycle; the rest follow from it */
  }
  for (int r = 0; r < pp; r++) free(bat[r]), free(entry[r]);
  free(bat);
  free(entry);
  free(rank);
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
