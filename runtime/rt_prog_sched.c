/* rt_prog_sched.c - the schedule of a listing: its entries (zero_grads, F, B, W, comm, OPT), checked against the
 * schedule so far: slots, micro-batches and the pipeline's messages (docs/stage-format.md, "The schedule"). */
#include "rt_prog_parse.h"

#include <stdlib.h>
#include <string.h>

/* ---- schedule ------------------------------------------------------------------------------ */

/* The arena bytes [*a, *e) of a comm op's buffer. */
static void op_range(const RtProg *g, const RtCommOp *o, int64_t *a, int64_t *e) {
  const RtBoundary *b = &g->bnd[o->kind];
  int64_t off = b->ptr.off;
  if (b->ptr.in_slot) off += g->reg[RT_REG_SLOTS].base + (int64_t)o->slot * g->reg[RT_REG_SLOTS].bytes;
  *a = off;
  *e = off + b->bytes;
}

/* One op of a comm entry, against the schedule so far (docs/stage-format.md, "The schedule"). */
static int comm_op(RtParser *s, const RtCommOp *o) {
  RtProg *g = s->p;
  int k = o->kind, m = o->mb, sl = o->slot;
  const RtBoundary *b = &g->bnd[k];
  const char *kn = pp_boundary_name(k);
  if (!b->present) return rt_prog_err(s, "comm %s: this stage has no 'boundary %s' line", kn, kn);
  if (s->ops_done[m] & (1u << k)) return rt_prog_err(s, "a second %s for micro-batch %d", kn, m);
  int fs = s->fwd_done[m] ? s->fslot[m] : -1;
  if ((k != PP_RECV_FWD) && !s->fwd_done[m]) return rt_prog_err(s, "%s %d %d before F %d", kn, m, sl, m);
  if (k != PP_RECV_FWD && fs != sl)
    return rt_prog_err(s, "%s %d %d: micro-batch %d's forward ran in slot %d", kn, m, sl, m, fs);
  switch (k) {
  case PP_RECV_FWD:
    if (s->fwd_done[m])
      return rt_prog_err(s, "recv_fwd %d %d after F %d (the forward reads what it receives)", m, sl, m);
    if (s->slot_holds[sl] >= 0)
      return rt_prog_err(s, "recv_fwd %d %d: slot %d still holds micro-batch %d (its %s has not run)", m, sl, sl,
                         s->slot_holds[sl], s->split ? "W" : "B");
    if (s->slot_recv[sl] >= 0)
      return rt_prog_err(s, "recv_fwd %d %d: slot %d already holds the input received for micro-batch %d", m, sl, sl,
                         s->slot_recv[sl]);
    s->slot_recv[sl] = m;
    s->slot_done[sl] = -1;
    break;
  case PP_SEND_FWD:
    if (b->ptr.in_slot) {
      if (s->bwd_done[m]) return rt_prog_err(s, "send_fwd %d %d after B %d", m, sl, m);
    } else if (s->last_fb_kind != RT_E_F || s->last_fb_mb != m) {
      return rt_prog_err(s,
                         "send_fwd %d %d: its buffer is in the arena (@%lld), so it must follow F %d with no F, B "
                         "or W between (blocks reuse the arena's scratch)",
                         m, sl, (long long)b->ptr.off, m);
    }
    break;
  case PP_RECV_BWD:
    if (s->bwd_done[m])
      return rt_prog_err(s, "recv_bwd %d %d after B %d (the backward reads what it receives)", m, sl, m);
    if (!b->ptr.in_slot) {
      if (s->need_b >= 0)
        return rt_prog_err(s,
                           "recv_bwd %d %d: the gradient received for micro-batch %d (line %d) is still waiting for "
                           "its B in the same buffer",
                           m, sl, s->need_b, s->need_b_line);
      s->need_b = m;
      s->need_b_line = s->line;
    }
    break;
  case PP_SEND_BWD:
    if (!s->bwd_done[m]) return rt_prog_err(s, "send_bwd %d %d before B %d", m, sl, m);
    if (b->ptr.in_slot) {
      if (s->slot_done[sl] != m) return rt_prog_err(s, "send_bwd %d %d: slot %d was reused after B %d", m, sl, sl, m);
    } else if (s->last_fb_kind != RT_E_B || s->last_fb_mb != m) {
      return rt_prog_err(s,
                         "send_bwd %d %d: its buffer is in the arena (@%lld), so it must follow B %d with no F, B "
                         "or W between (blocks reuse the arena's scratch)",
                         m, sl, (long long)b->ptr.off, m);
    }
    break;
  }
  s->ops_done[m] |= (unsigned char)(1u << k);
  return 0;
}

static int comm_entry(RtParser *s, RtEntry *e) {
  RtProg *g = s->p;
  static const char *const form = "comm OP MICROBATCH SLOT [OP MICROBATCH SLOT]";
  if (s->nf != 4 && s->nf != 7)
    return rt_prog_err(s, "expected '%s' (OP: send_fwd, recv_fwd, send_bwd, recv_bwd)", form);
  e->kind = RT_E_COMM;
  e->nops = (s->nf - 1) / 3;
  for (int i = 0; i < e->nops; i++) {
    RtCommOp *o = &e->op[i];
    const char *t = s->f[1 + 3 * i];
    int k = -1;
    for (int j = 0; j < PP_NBND; j++)
      if (!strcmp(t, pp_boundary_name(j))) k = j;
    if (k < 0) return rt_prog_err(s, "comm: unknown op '%.60s' (expected send_fwd, recv_fwd, send_bwd or recv_bwd)", t);
    o->kind = (PpBoundary)k;
    if (rt_prog_want_i32(s, 2 + 3 * i, "comm: micro-batch", 0, g->local_microbatches - 1, &o->mb) ||
        rt_prog_want_i32(s, 3 + 3 * i, "comm: slot", 0, g->nslots - 1, &o->slot) || comm_op(s, o))
      return -1;
  }
  if (e->nops == 2) { /* posted together: the two buffers must not overlap */
    int64_t a0, e0, a1, e1;
    op_range(g, &e->op[0], &a0, &e0);
    op_range(g, &e->op[1], &a1, &e1);
    if (a0 < e1 && a1 < e0)
      return rt_prog_err(s, "comm: the buffers of %s %d and %s %d overlap (they are in flight together)",
                         pp_boundary_name(e->op[0].kind), e->op[0].mb, pp_boundary_name(e->op[1].kind), e->op[1].mb);
  }
  return 0;
}

int rt_prog_schedule_entry(RtParser *s) {
  RtProg *g = s->p;
  if (rt_prog_grow(s, (void **)&g->sched, &s->cap_entries, g->nentries + 1, sizeof *g->sched)) return -1;
  RtEntry *e = &g->sched[g->nentries];
  memset(e, 0, sizeof *e);
  e->line = s->line;
  const char *op = s->f[0];
  if (s->nopt) return rt_prog_err(s, "'%.60s' after OPT (OPT is the schedule's last entry)", op);
  if (!strcmp(op, "zero_grads")) {
    if (rt_prog_want_nf(s, 1, "zero_grads")) return -1;
    if (s->nzero) return rt_prog_err(s, "a second zero_grads");
    if (s->nbwd) return rt_prog_err(s, "zero_grads after a B entry would discard its gradients");
    if (s->nwgt) return rt_prog_err(s, "zero_grads after a W entry would discard its gradients");
    e->kind = RT_E_ZERO_GRADS;
    s->nzero++;
  } else if (!strcmp(op, "W")) {
    if (rt_prog_want_nf(s, 3, "W MICROBATCH SLOT") ||
        rt_prog_want_i32(s, 1, "micro-batch", 0, g->local_microbatches - 1, &e->mb) ||
        rt_prog_want_i32(s, 2, "slot", 0, g->nslots - 1, &e->slot))
      return -1;
    int m = e->mb, sl = e->slot;
    if (!s->split)
      return rt_prog_err(s, "W %d %d: the program has no weights block (its backward is not split)", m, sl);
    if (s->need_b >= 0)
      return rt_prog_err(s,
                         "W %d %d: the gradient received for micro-batch %d (line %d) is in the arena, where this "
                         "block may write: B %d must come first",
                         m, sl, s->need_b, s->need_b_line, s->need_b);
    if (!s->bwd_done[m]) return rt_prog_err(s, "W %d %d before B %d (W reads what B computed)", m, sl, m);
    if (s->wgt_done[m]) return rt_prog_err(s, "a second W for micro-batch %d", m);
    if (s->slot_holds[sl] != m)
      return rt_prog_err(s, "W %d %d: micro-batch %d's forward did not run in slot %d", m, sl, m, sl);
    e->kind = RT_E_W;
    s->wgt_done[m] = 1;
    s->slot_holds[sl] = -1; /* W is the last to read the slot */
    s->nwgt++;
    s->last_fb_kind = e->kind;
    s->last_fb_mb = m;
  } else if (!strcmp(op, "F") || !strcmp(op, "B")) {
    int fwd = op[0] == 'F';
    const char *form = fwd ? "F MICROBATCH SLOT" : "B MICROBATCH SLOT";
    if (rt_prog_want_nf(s, 3, form) || rt_prog_want_i32(s, 1, "micro-batch", 0, g->local_microbatches - 1, &e->mb) ||
        rt_prog_want_i32(s, 2, "slot", 0, g->nslots - 1, &e->slot))
      return -1;
    int m = e->mb, sl = e->slot;
    if (s->need_b >= 0 && (fwd || s->need_b != m))
      return rt_prog_err(s,
                         "%s %d %d: the gradient received for micro-batch %d (line %d) is in the arena, where this "
                         "block may write: B %d must come first",
                         op, m, sl, s->need_b, s->need_b_line, s->need_b);
    if (fwd) {
      e->kind = RT_E_F;
      if (s->fwd_done[m]) return rt_prog_err(s, "a second F for micro-batch %d", m);
      if (s->slot_holds[sl] >= 0)
        return rt_prog_err(s, "F %d %d: slot %d still holds micro-batch %d (its %s has not run)", m, sl, sl,
                           s->slot_holds[sl], s->split ? "W" : "B");
      if (g->bnd[PP_RECV_FWD].present && s->slot_recv[sl] != m) {
        if (s->ops_done[m] & (1u << PP_RECV_FWD))
          return rt_prog_err(s, "F %d %d: the input of micro-batch %d was received into another slot", m, sl, m);
        return rt_prog_err(s, "F %d %d before recv_fwd %d %d (the stage's input comes from the previous stage)", m, sl,
                           m, sl);
      }
      if (s->slot_recv[sl] >= 0 && s->slot_recv[sl] != m)
        return rt_prog_err(s, "F %d %d: slot %d holds the input received for micro-batch %d", m, sl, sl,
                           s->slot_recv[sl]);
      s->fwd_done[m] = 1;
      s->fslot[m] = sl;
      s->slot_holds[sl] = m;
      s->slot_recv[sl] = -1;
      s->slot_done[sl] = -1;
    } else {
      e->kind = RT_E_B;
      if (!s->fwd_done[m]) return rt_prog_err(s, "B %d %d before F %d", m, sl, m);
      if (s->bwd_done[m]) return rt_prog_err(s, "a second B for micro-batch %d", m);
      if (s->slot_holds[sl] != m)
        return rt_prog_err(s, "B %d %d: micro-batch %d's forward did not run in slot %d", m, sl, m, sl);
      if (!s->nzero) return rt_prog_err(s, "B %d %d before zero_grads", m, sl);
      if (g->bnd[PP_RECV_BWD].present && !(s->ops_done[m] & (1u << PP_RECV_BWD)))
        return rt_prog_err(s,
                           "B %d %d before recv_bwd %d %d (the gradient of the stage's output comes from the next "
                           "stage)",
                           m, sl, m, sl);
      s->bwd_done[m] = 1;
      if (!s->split) s->slot_holds[sl] = -1; /* split: W reads the slot still */
      s->slot_done[sl] = m;
      s->need_b = -1;
      s->nbwd++;
    }
    s->last_fb_kind = e->kind;
    s->last_fb_mb = m;
  } else if (!strcmp(op, "comm")) {
    if (comm_entry(s, e)) return -1;
  } else if (!strcmp(op, "OPT")) {
    if (rt_prog_want_nf(s, 1, "OPT")) return -1;
    if (s->nbwd != g->local_microbatches)
      return rt_prog_err(s, "OPT before every micro-batch's B ran (%d of %d)", s->nbwd, g->local_microbatches);
    if (s->split && s->nwgt != g->local_microbatches)
      return rt_prog_err(s, "OPT before every micro-batch's W ran (%d of %d)", s->nwgt, g->local_microbatches);
    for (int m = 0; m < g->local_microbatches; m++)
      for (int k = 0; k < PP_NBND; k++)
        if (g->bnd[k].present && !(s->ops_done[m] & (1u << k)))
          return rt_prog_err(s, "OPT before %s of micro-batch %d (every micro-batch's messages come first)",
                             pp_boundary_name(k), m);
    e->kind = RT_E_OPT;
    s->nopt++;
  } else {
    return rt_prog_err(s,
                       "unknown schedule entry '%.60s' (expected zero_grads, F M SLOT, B M SLOT, W M SLOT, comm OP M "
                       "SLOT [OP M SLOT] or OPT)",
                       op);
  }
  g->nentries++;
  return 0;
}

int rt_prog_start_schedule(RtParser *s) {
  RtProg *g = s->p;
  for (int b = 0; b < RT_NBLK; b++)
    if (!g->blk[b].present && b != RT_BLK_WEIGHTS)
      return rt_prog_err(s, "no %s block before the schedule (a training program has forward, backward and optimizer)",
                         rt_block_name(b));
  s->split = g->blk[RT_BLK_WEIGHTS].present;
  size_t ns = (size_t)g->nslots, nm = (size_t)g->local_microbatches;
  s->slot_holds = malloc(ns * sizeof *s->slot_holds);
  s->slot_recv = malloc(ns * sizeof *s->slot_recv);
  s->slot_done = malloc(ns * sizeof *s->slot_done);
  s->fwd_done = calloc(nm, 1);
  s->bwd_done = calloc(nm, 1);
  s->wgt_done = calloc(nm, 1);
  s->ops_done = calloc(nm, 1);
  s->fslot = calloc(nm, sizeof *s->fslot);
  S_ALLOC(s->slot_holds);
  S_ALLOC(s->slot_recv);
  S_ALLOC(s->slot_done);
  S_ALLOC(s->fwd_done);
  S_ALLOC(s->bwd_done);
  S_ALLOC(s->wgt_done);
  S_ALLOC(s->ops_done);
  S_ALLOC(s->fslot);
  for (int i = 0; i < g->nslots; i++) s->slot_holds[i] = s->slot_recv[i] = s->slot_done[i] = -1;
  s->last_fb_kind = -1;
  s->last_fb_mb = -1;
  s->need_b = -1;
  s->schedule_line = s->line;
  s->sec = SEC_SCHEDULE;
  return 0;
}

int rt_prog_end_schedule(RtParser *s) {
  if (!s->nopt) return rt_prog_err(s, "the schedule has no OPT entry");
  s->sec = SEC_DONE;
  return 0;
}
