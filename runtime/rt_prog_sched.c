/* rt_prog_sched.c - the schedule of a listing: its entries (zero_grads, F, B, W, comm, OPT), checked against the
 * schedule so far: slots, units (a chunk's micro-batch) and the pipeline's messages (docs/stage-format.md, "The
 * schedule"). */
#include "rt_prog_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names in messages --------------------------------------------------------------------- */

/* An entry's or op's name as the listing writes it: "F", or "F:1" in a program with chunks. */
typedef struct {
  char t[32];
} Name;

static Name name_of(const RtParser *s, const char *op, int c) {
  Name n;
  if (s->p->nchunks > 1) snprintf(n.t, sizeof n.t, "%s:%d", op, c);
  else snprintf(n.t, sizeof n.t, "%s", op);
  return n;
}

/* A unit (u = chunk * local micro-batches + micro-batch): "micro-batch 3", or "micro-batch 3 of
 * chunk 1" in a program with chunks. */
typedef struct {
  char t[48];
} Unit;

static Unit unit_of(const RtParser *s, int u) {
  Unit n;
  int m = s->p->local_microbatches;
  if (s->p->nchunks > 1) snprintf(n.t, sizeof n.t, "micro-batch %d of chunk %d", u % m, u / m);
  else snprintf(n.t, sizeof n.t, "micro-batch %d", u % m);
  return n;
}

/* ---- schedule ------------------------------------------------------------------------------ */

/* The arena bytes [*a, *e) of a comm op's buffer. */
static void op_range(const RtProg *g, const RtCommOp *o, int64_t *a, int64_t *e) {
  const RtBoundary *b = rt_prog_boundary(g, o->chunk, o->kind);
  int64_t off = b->ptr.off;
  if (b->ptr.in_slot) off += g->reg[RT_REG_SLOTS].base + (int64_t)o->slot * g->reg[RT_REG_SLOTS].bytes;
  *a = off;
  *e = off + b->bytes;
}

/* A received gradient waits in the arena for its B: an F, B or W of another unit may not run. */
static int check_need_b(RtParser *s, const char *en, int m, int sl) {
  int M = s->p->local_microbatches, u = s->need_b;
  return rt_prog_err(s,
                     "%s %d %d: the gradient received for %s (line %d) is in the arena, where this block may write: "
                     "%s %d must come first",
                     en, m, sl, unit_of(s, u).t, s->need_b_line, name_of(s, "B", u / M).t, u % M);
}

/* One op of a comm entry, against the schedule so far (docs/stage-format.md, "The schedule"). */
static int comm_op(RtParser *s, const RtCommOp *o) {
  RtProg *g = s->p;
  int k = o->kind, c = o->chunk, m = o->mb, sl = o->slot, u = c * g->local_microbatches + m;
  const RtBoundary *b = rt_prog_boundary(g, c, k);
  Name kname = name_of(s, pp_boundary_name(k), c);
  const char *kn = kname.t;
  Name fn = name_of(s, "F", c), bn = name_of(s, "B", c);
  Unit ut = unit_of(s, u);
  if (!b->present) {
    if (g->nchunks > 1) return rt_prog_err(s, "comm %s: chunk %d has no 'boundary %s' line", kn, c, kn);
    return rt_prog_err(s, "comm %s: this stage has no 'boundary %s' line", kn, kn);
  }
  if (s->ops_done[u] & (1u << k)) return rt_prog_err(s, "a second %s for %s", kn, ut.t);
  int fs = s->fwd_done[u] ? s->fslot[u] : -1;
  if ((k != PP_RECV_FWD) && !s->fwd_done[u]) return rt_prog_err(s, "%s %d %d before %s %d", kn, m, sl, fn.t, m);
  if (k != PP_RECV_FWD && fs != sl) return rt_prog_err(s, "%s %d %d: %s's forward ran in slot %d", kn, m, sl, ut.t, fs);
  switch ((PpBoundary)k) {
  case PP_RECV_FWD:
    if (s->fwd_done[u])
      return rt_prog_err(s, "%s %d %d after %s %d (the forward reads what it receives)", kn, m, sl, fn.t, m);
    if (s->slot_holds[sl] >= 0)
      return rt_prog_err(s, "%s %d %d: slot %d still holds %s (its %s has not run)", kn, m, sl, sl,
                         unit_of(s, s->slot_holds[sl]).t, s->split ? "W" : "B");
    if (s->slot_recv[sl] >= 0)
      return rt_prog_err(s, "%s %d %d: slot %d already holds the input received for %s", kn, m, sl, sl,
                         unit_of(s, s->slot_recv[sl]).t);
    s->slot_recv[sl] = u;
    s->slot_done[sl] = -1;
    break;
  case PP_SEND_FWD:
    if (b->ptr.in_slot) {
      if (s->bwd_done[u]) return rt_prog_err(s, "%s %d %d after %s %d", kn, m, sl, bn.t, m);
    } else if (s->last_fb_kind != RT_E_F || s->last_fb_unit != u) {
      return rt_prog_err(s,
                         "%s %d %d: its buffer is in the arena (@%lld), so it must follow %s %d with no F, B "
                         "or W between (blocks reuse the arena's scratch)",
                         kn, m, sl, (long long)b->ptr.off, fn.t, m);
    }
    break;
  case PP_RECV_BWD:
    if (s->bwd_done[u])
      return rt_prog_err(s, "%s %d %d after %s %d (the backward reads what it receives)", kn, m, sl, bn.t, m);
    if (!b->ptr.in_slot) {
      if (s->need_b >= 0)
        return rt_prog_err(s,
                           "%s %d %d: the gradient received for %s (line %d) is still waiting for "
                           "its B in the same buffer",
                           kn, m, sl, unit_of(s, s->need_b).t, s->need_b_line);
      s->need_b = u;
      s->need_b_line = s->line;
    }
    break;
  case PP_SEND_BWD:
    if (!s->bwd_done[u]) return rt_prog_err(s, "%s %d %d before %s %d", kn, m, sl, bn.t, m);
    if (b->ptr.in_slot) {
      if (s->slot_done[sl] != u)
        return rt_prog_err(s, "%s %d %d: slot %d was reused after %s %d", kn, m, sl, sl, bn.t, m);
    } else if (s->last_fb_kind != RT_E_B || s->last_fb_unit != u) {
      return rt_prog_err(s,
                         "%s %d %d: its buffer is in the arena (@%lld), so it must follow %s %d with no F, B "
                         "or W between (blocks reuse the arena's scratch)",
                         kn, m, sl, (long long)b->ptr.off, bn.t, m);
    }
    break;
  case PP_NBND: break;
  }
  s->ops_done[u] |= (unsigned char)(1u << k);
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
    char *t = s->f[1 + 3 * i];
    int k = -1;
    if (rt_prog_chunk_suffix(s, t, &o->chunk)) return -1;
    for (int j = 0; j < PP_NBND; j++)
      if (!strcmp(t, pp_boundary_name(j))) k = j;
    if (k < 0) return rt_prog_err(s, "comm: unknown op '%.60s' (expected send_fwd, recv_fwd, send_bwd or recv_bwd)", t);
    o->kind = (PpBoundary)k;
    if (rt_prog_want_i32(s, 2 + 3 * i, "comm: micro-batch", 0, g->local_microbatches - 1, &o->mb) ||
        rt_prog_want_i32(s, 3 + 3 * i, "comm: slot", 0, g->nslots - 1, &o->slot) || comm_op(s, o))
      return -1;
  }
  /* posted together: the two buffers must not overlap; except, in a program with chunks (whose
   * messages always go through MPI, each send from a host copy taken when it is posted), a send
   * posted before the receive: its bytes are copied before the receive may write them */
  int copied_first =
      g->nchunks > 1 && e->nops == 2 && pp_boundary_is_send(e->op[0].kind) && !pp_boundary_is_send(e->op[1].kind);
  if (e->nops == 2 && !copied_first) {
    int64_t a0, e0, a1, e1;
    op_range(g, &e->op[0], &a0, &e0);
    op_range(g, &e->op[1], &a1, &e1);
    if (a0 < e1 && a1 < e0)
      return rt_prog_err(s, "comm: the buffers of %s %d and %s %d overlap (they are in flight together)",
                         name_of(s, pp_boundary_name(e->op[0].kind), e->op[0].chunk).t, e->op[0].mb,
                         name_of(s, pp_boundary_name(e->op[1].kind), e->op[1].chunk).t, e->op[1].mb);
  }
  return 0;
}

/* W C M SLOT */
static int weights_entry(RtParser *s, RtEntry *e, const char *wn) {
  int M = s->p->local_microbatches, m = e->mb, sl = e->slot, u = e->chunk * M + m;
  if (!s->split)
    return rt_prog_err(s, "%s %d %d: the program has no weights block (its backward is not split)", wn, m, sl);
  if (s->need_b >= 0) return check_need_b(s, wn, m, sl);
  if (!s->bwd_done[u])
    return rt_prog_err(s, "%s %d %d before %s %d (W reads what B computed)", wn, m, sl, name_of(s, "B", e->chunk).t, m);
  if (s->wgt_done[u]) return rt_prog_err(s, "a second %s for %s", wn, unit_of(s, u).t);
  if (s->slot_holds[sl] != u)
    return rt_prog_err(s, "%s %d %d: %s's forward did not run in slot %d", wn, m, sl, unit_of(s, u).t, sl);
  e->kind = RT_E_W;
  s->wgt_done[u] = 1;
  s->slot_holds[sl] = -1; /* W is the last to read the slot */
  s->nwgt++;
  return 0;
}

/* F C M SLOT */
static int forward_entry(RtParser *s, RtEntry *e, const char *en) {
  const RtProg *g = s->p;
  int c = e->chunk, m = e->mb, sl = e->slot, u = c * g->local_microbatches + m;
  e->kind = RT_E_F;
  if (s->fwd_done[u]) return rt_prog_err(s, "a second %s for %s", en, unit_of(s, u).t);
  if (s->slot_holds[sl] >= 0)
    return rt_prog_err(s, "%s %d %d: slot %d still holds %s (its %s has not run)", en, m, sl, sl,
                       unit_of(s, s->slot_holds[sl]).t, s->split ? "W" : "B");
  if (rt_prog_boundary(g, c, PP_RECV_FWD)->present && s->slot_recv[sl] != u) {
    if (s->ops_done[u] & (1u << PP_RECV_FWD))
      return rt_prog_err(s, "%s %d %d: the input of %s was received into another slot", en, m, sl, unit_of(s, u).t);
    return rt_prog_err(s, "%s %d %d before %s %d %d (the stage's input comes from the previous stage)", en, m, sl,
                       name_of(s, "recv_fwd", c).t, m, sl);
  }
  if (s->slot_recv[sl] >= 0 && s->slot_recv[sl] != u)
    return rt_prog_err(s, "%s %d %d: slot %d holds the input received for %s", en, m, sl, sl,
                       unit_of(s, s->slot_recv[sl]).t);
  s->fwd_done[u] = 1;
  s->fslot[u] = sl;
  s->slot_holds[sl] = u;
  s->slot_recv[sl] = -1;
  s->slot_done[sl] = -1;
  return 0;
}

/* B C M SLOT */
static int backward_entry(RtParser *s, RtEntry *e, const char *en) {
  const RtProg *g = s->p;
  int c = e->chunk, m = e->mb, sl = e->slot, u = c * g->local_microbatches + m;
  e->kind = RT_E_B;
  if (!s->fwd_done[u]) return rt_prog_err(s, "%s %d %d before %s %d", en, m, sl, name_of(s, "F", c).t, m);
  if (s->bwd_done[u]) return rt_prog_err(s, "a second %s for %s", en, unit_of(s, u).t);
  if (s->slot_holds[sl] != u)
    return rt_prog_err(s, "%s %d %d: %s's forward did not run in slot %d", en, m, sl, unit_of(s, u).t, sl);
  if (!s->nzero) return rt_prog_err(s, "%s %d %d before zero_grads", en, m, sl);
  if (rt_prog_boundary(g, c, PP_RECV_BWD)->present && !(s->ops_done[u] & (1u << PP_RECV_BWD)))
    return rt_prog_err(s,
                       "%s %d %d before %s %d %d (the gradient of the stage's output comes from the next "
                       "stage)",
                       en, m, sl, name_of(s, "recv_bwd", c).t, m, sl);
  s->bwd_done[u] = 1;
  if (!s->split) s->slot_holds[sl] = -1; /* split: W reads the slot still */
  s->slot_done[sl] = u;
  s->need_b = -1;
  s->nbwd++;
  return 0;
}

/* OPT: after every unit's B (W) and every message. */
static int opt_entry(RtParser *s, RtEntry *e) {
  const RtProg *g = s->p;
  int M = g->local_microbatches, nu = g->nchunks * M;
  if (rt_prog_want_nf(s, 1, "OPT")) return -1;
  if (g->nchunks > 1) {
    for (int u = 0; u < nu; u++) {
      if (!s->bwd_done[u] || (s->split && !s->wgt_done[u]))
        return rt_prog_err(s, "OPT before %s %d ran (every chunk's micro-batches come first: %d of %d %s ran)",
                           name_of(s, s->bwd_done[u] ? "W" : "B", u / M).t, u % M, s->bwd_done[u] ? s->nwgt : s->nbwd,
                           nu, s->bwd_done[u] ? "W" : "B");
    }
  } else {
    if (s->nbwd != M) return rt_prog_err(s, "OPT before every micro-batch's B ran (%d of %d)", s->nbwd, M);
    if (s->split && s->nwgt != M) return rt_prog_err(s, "OPT before every micro-batch's W ran (%d of %d)", s->nwgt, M);
  }
  for (int u = 0; u < nu; u++)
    for (int k = 0; k < PP_NBND; k++)
      if (rt_prog_boundary(g, u / M, k)->present && !(s->ops_done[u] & (1u << k)))
        return rt_prog_err(s, "OPT before %s of %s (every micro-batch's messages come first)",
                           name_of(s, pp_boundary_name(k), u / M).t, unit_of(s, u).t);
  e->kind = RT_E_OPT;
  s->nopt++;
  return 0;
}

int rt_prog_schedule_entry(RtParser *s) {
  RtProg *g = s->p;
  if (rt_prog_grow(s, (void **)&g->sched, &s->cap_entries, g->nentries + 1, sizeof *g->sched)) return -1;
  RtEntry *e = &g->sched[g->nentries];
  memset(e, 0, sizeof *e);
  e->line = s->line;
  if (s->nopt) return rt_prog_err(s, "'%.60s' after OPT (OPT is the schedule's last entry)", s->f[0]);
  int suffix = strchr(s->f[0], ':') != NULL;
  if (rt_prog_chunk_suffix(s, s->f[0], &e->chunk)) return -1;
  const char *op = s->f[0];
  int unit = !strcmp(op, "F") || !strcmp(op, "B") || !strcmp(op, "W");
  if (g->generate && strcmp(op, "F") && strcmp(op, "comm"))
    return rt_prog_err(s, "'%.60s' in a generation program's schedule (%s): it runs F and comm entries alone", op,
                       PP_SCHED_FORWARD);
  if (suffix && !unit)
    return rt_prog_err(s, "%.60s: no ':C' here (only F, B, W and the ops of a comm entry name a chunk)", op);
  if (unit) {
    Name en = name_of(s, op, e->chunk);
    char form[40];
    snprintf(form, sizeof form, "%s MICROBATCH SLOT", op);
    if (rt_prog_want_nf(s, 3, form) || rt_prog_want_i32(s, 1, "micro-batch", 0, g->local_microbatches - 1, &e->mb) ||
        rt_prog_want_i32(s, 2, "slot", 0, g->nslots - 1, &e->slot))
      return -1;
    int rc;
    if (op[0] == 'W') rc = weights_entry(s, e, en.t);
    else if (s->need_b >= 0 && (op[0] == 'F' || s->need_b != e->chunk * g->local_microbatches + e->mb))
      rc = check_need_b(s, en.t, e->mb, e->slot);
    else rc = op[0] == 'F' ? forward_entry(s, e, en.t) : backward_entry(s, e, en.t);
    if (rc) return -1;
    s->last_fb_kind = e->kind;
    s->last_fb_unit = e->chunk * g->local_microbatches + e->mb;
  } else if (!strcmp(op, "zero_grads")) {
    if (rt_prog_want_nf(s, 1, "zero_grads")) return -1;
    if (s->nzero) return rt_prog_err(s, "a second zero_grads");
    if (s->nbwd) return rt_prog_err(s, "zero_grads after a B entry would discard its gradients");
    if (s->nwgt) return rt_prog_err(s, "zero_grads after a W entry would discard its gradients");
    e->kind = RT_E_ZERO_GRADS;
    s->nzero++;
  } else if (!strcmp(op, "comm")) {
    if (comm_entry(s, e)) return -1;
  } else if (!strcmp(op, "OPT")) {
    if (opt_entry(s, e)) return -1;
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
    for (int c = 0; c < (rt_blk_program(b) ? 1 : g->nchunks); c++) {
      char name[32];
      if (b == RT_BLK_WEIGHTS || b == RT_BLK_REFRESH || rt_prog_block(g, c, b)->present ||
          (g->generate && b != RT_BLK_FORWARD))
        continue;
      if (g->nchunks > 1)
        return rt_prog_err(s,
                           "no %s block before the schedule (every chunk has a forward and a backward block, the "
                           "program an optimizer block)",
                           rt_prog_block_label(g, c, b, name, sizeof name));
      return rt_prog_err(s, "no %s block before the schedule (a training program has forward, backward and optimizer)",
                         rt_block_name(b));
    }
  s->split = g->blk[RT_BLK_WEIGHTS].present;
  for (int c = 1; c < g->nchunks; c++) {
    const RtBlock *w = rt_prog_block(g, c, RT_BLK_WEIGHTS), *w0 = &g->blk[RT_BLK_WEIGHTS];
    if (w->present && !s->split)
      return rt_prog_err(s,
                         "chunk %d has a weights block (line %d), chunk 0 has none: either every chunk has a weights "
                         "block or none does",
                         c, w->line);
    if (!w->present && s->split)
      return rt_prog_err(s,
                         "chunk %d has no weights block, chunk 0 has one (line %d): either every chunk has a weights "
                         "block or none does",
                         c, w0->line);
  }
  size_t ns = (size_t)g->nslots, nm = (size_t)g->local_microbatches * (size_t)g->nchunks;
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
  s->last_fb_unit = -1;
  s->need_b = -1;
  s->schedule_line = s->line;
  s->sec = SEC_SCHEDULE;
  return 0;
}

/* A generation program: every chunk's forward ran, and the logits are the last virtual stage's. */
static int end_generate(RtParser *s) {
  const RtProg *g = s->p;
  for (int c = 0; c < g->nchunks; c++)
    if (!s->fwd_done[c * g->local_microbatches])
      return rt_prog_err(s, "the schedule never runs %s 0", name_of(s, "F", c).t);
  int last = -1;
  for (int c = 0; c < g->nchunks; c++)
    if (g->chunk[c].next < 0) last = c;
  if (last >= 0 && !g->logits.present)
    return rt_prog_err(s, "a generation program's last virtual stage (chunk %d) has no logits instruction", last);
  if (g->logits.present && g->logits.chunk != last) {
    s->line = g->logits.line;
    return rt_prog_err(s, "logits in chunk %d, which is not the last virtual stage: its output goes to the next one",
                       g->logits.chunk);
  }
  return 0;
}

int rt_prog_end_schedule(RtParser *s) {
  if (s->p->generate) {
    if (end_generate(s)) return -1;
    s->sec = SEC_DONE;
    return 0;
  }
  if (!s->nopt) return rt_prog_err(s, "the schedule has no OPT entry");
  s->sec = SEC_DONE;
  return 0;
}
