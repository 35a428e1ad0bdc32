/* recompute.c — activation recomputation on a lowered program (train { recompute }): a layer's
 * forward instructions run again at the start of its backward, so that what they produced need
 * not wait in the micro-batch's slot from the forward to the backward.
 *
 * The copies are the forward's own instructions — the same kernels, GEMMs and collectives on the
 * same inputs, in the same order — so every value they produce has the bits the forward gave it,
 * and the gradients are those of a program that keeps everything. Each buffer the copies write is
 * a new one (the forward's stays where the forward reads it); the layer's backward instructions
 * read the new ones; a forward buffer no backward instruction reads any more leaves the slot for
 * the scratch region. What a layer keeps:
 *   full       its input (the residual stream entering it), and what other layers' backward reads
 *   selective  also the outputs of its GEMMs, attention and collectives: the norms, elementwise
 *              work and RoPE are recomputed (Korthikanti et al.'s split, with the fused attention
 *              keeping no S x S values)
 * With a split backward (zb-h1, zbv) the copies run in B; a value W reads waits in the slot from B
 * to W, as a value of B does. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

/* What an instruction reads and writes, buffers only (offsets ignored): at most MAX_OPERANDS. */
typedef struct Access {
  int r[MAX_OPERANDS], nr;
  int w[MAX_OPERANDS], nw;
} Access;

static bool kernel_reads(const Kernel *k, int buf) {
  for (int i = 0; i < k->ne; i++)
    if ((k->e[i].op == K_LD || k->e[i].op == K_LDI) && k->e[i].a == buf) return true;
  for (int i = 0; i < k->ns; i++)
    if (k->s[i].kind == KS_STORE && k->s[i].buf == buf && k->s[i].op != '=') return true;
  return false;
}

static void add(int *list, int *n, int vb) {
  for (int i = 0; i < *n; i++)
    if (list[i] == vb) return;
  list[(*n)++] = vb;
}

/* false: an instruction kind the copies do not take (its outputs are then kept) */
static bool access(const Program *p, const Instr *in, Access *a) {
  a->nr = a->nw = 0;
  switch (in->kind) {
  case I_KERNEL: {
    const Kernel *k = p->kernels[in->kernel];
    for (int i = 0; i < k->nbufs && i < in->nop; i++) {
      if (in->op[i].kind != 'b') continue;
      if (kernel_reads(k, i) && !k->bufs[i].reread) add(a->r, &a->nr, in->op[i].vb);
      if (k->bufs[i].written) add(a->w, &a->nw, in->op[i].vb);
    }
    return true;
  }
  case I_GEMM:
    add(a->r, &a->nr, in->op[0].vb);
    add(a->r, &a->nr, in->op[1].vb);
    if (in->beta != 0) add(a->r, &a->nr, in->op[2].vb);
    add(a->w, &a->nw, in->op[2].vb);
    for (int i = 3; i < in->nop; i++)
      if (in->op[i].kind == 'b') add(a->r, &a->nr, in->op[i].vb);
    return true;
  case I_ALLREDUCE: /* in place */
    add(a->r, &a->nr, in->op[0].vb);
    add(a->w, &a->nw, in->op[0].vb);
    return true;
  case I_ALLGATHER:
  case I_REDUCE_SCATTER:
    add(a->r, &a->nr, in->op[0].vb);
    add(a->w, &a->nw, in->op[1].vb);
    return true;
  case I_BATCH:
  case I_ZERO:
  case I_SEED:
  case I_LOSS:
  case I_LOGITS:
  case I_GRADNORM:
  case I_ALLREDUCE_TIED: return false;
  }
  return false;
}

static bool has(const int *list, int n, int vb) {
  for (int i = 0; i < n; i++)
    if (list[i] == vb) return true;
  return false;
}

/* Selective: the instructions cheap to run again — kernels, but not attention's. */
static bool cheap(const Graph *g, const Instr *in) {
  return in->kind == I_KERNEL && !(in->node >= 0 && g->nodes[in->node].op == OP_ATTENTION);
}

static int node_layer(const Graph *g, const Instr *in) { return in->node >= 0 ? g->nodes[in->node].layer : -1; }

static void insert(Block *b, int at, const Instr *in) {
  if (b->n == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 128;
    b->ins = xrealloc(b->ins, (size_t)b->cap * sizeof *b->ins);
  }
  memmove(&b->ins[at + 1], &b->ins[at], (size_t)(b->n - at) * sizeof *b->ins);
  b->ins[at] = *in;
  b->n++;
}

static int new_buffer(Program *p, int from) {
  if (p->nvb == p->vcap) {
    p->vcap = p->vcap ? 2 * p->vcap : 128;
    p->vb = xrealloc(p->vb, (size_t)p->vcap * sizeof *p->vb);
  }
  VBuf *v = &p->vb[p->nvb];
  *v = p->vb[from];
  char name[sizeof v->name];
  snprintf(name, sizeof name, "rc_%.36s", p->vb[from].name);
  memcpy(v->name, name, sizeof name);
  v->cls = BC_SCRATCH;
  v->first = v->last = -1;
  v->pin_start = v->pin_end = false;
  return p->nvb++;
}

/* One layer of a chunk being recomputed: its forward instructions (their fwd-block indices, in
 * order), what each reads and writes, and the marks of the choice. */
typedef struct Layer {
  int *at;
  Access *acc;
  bool *ok;   /* copyable, as far as the choice has got */
  bool *take; /* copied: ok, and what it writes is read by the layer's backward, or by a copy */
  int n;
} Layer;

/* A writer of v among the layer's instructions before i (*before) and at or after it (*after). */
static void writers(const Layer *L, int i, int v, bool *before, bool *after) {
  *before = *after = false;
  for (int j = 0; j < L->n; j++)
    if (has(L->acc[j].w, L->acc[j].nw, v)) *(j < i ? before : after) = true;
}

/* Which copyable instructions keep their meaning when run again with the buffers they write
 * renamed. A buffer is renamed when every one of the layer's writers of it is copied and no
 * backward instruction writes it (pinned[vb]); a copy reads a renamed buffer only after a copy
 * wrote it, a kept one only where no later instruction of the layer writes it (the kept buffer
 * holds the layer's last value), and one the layer does not write only where it outlives the
 * forward (not scratch). Dropping an instruction can drop others: to a fixed point. */
static void settle(const Program *p, Layer *L, const bool *pinned, bool *renamed) {
  for (bool again = true; again;) {
    again = false;
    memset(renamed, 0, (size_t)p->nvb * sizeof *renamed);
    for (int i = 0; i < L->n; i++)
      for (int k = 0; k < L->acc[i].nw; k++) renamed[L->acc[i].w[k]] = !pinned[L->acc[i].w[k]];
    for (int i = 0; i < L->n; i++)
      for (int k = 0; k < L->acc[i].nw && !L->ok[i]; k++) renamed[L->acc[i].w[k]] = false;
    for (int i = 0; i < L->n; i++) {
      if (!L->ok[i]) continue;
      bool good = true;
      for (int k = 0; k < L->acc[i].nw && good; k++) good = renamed[L->acc[i].w[k]];
      for (int k = 0; k < L->acc[i].nr && good; k++) {
        bool before, after;
        writers(L, i, L->acc[i].r[k], &before, &after);
        if (before || after) good = renamed[L->acc[i].r[k]] ? before : !after;
        else good = p->vb[L->acc[i].r[k]].cls != BC_SCRATCH; /* another block's value: gone by the backward */
      }
      if (!good) L->ok[i] = false, again = true;
    }
  }
}

static bool in_layer(const Graph *g, const Instr *in, int layer) { return node_layer(g, in) == layer; }

/* Marks in used[] every buffer an instruction of block b (of the layer, when layer >= 0) reads or
 * writes: one pass, whatever the number of buffers asked about. */
static void mark_uses(const Graph *g, const Block *b, int layer, bool *used) {
  for (int i = 0; i < b->n; i++) {
    if (layer >= 0 && !in_layer(g, &b->ins[i], layer)) continue;
    for (int k = 0; k < b->ins[i].nop; k++)
      if (b->ins[i].op[k].kind == 'b') used[b->ins[i].op[k].vb] = true;
  }
}

static void remap(Instr *in, const int *to) {
  for (int k = 0; k < in->nop; k++)
    if (in->op[k].kind == 'b' && to[in->op[k].vb] >= 0) in->op[k].vb = to[in->op[k].vb];
}

/* The copies' place in the backward block: before the first instruction reading a copy's buffer
 * (fresh[vb]), or before its GEMM when it is an epilogue (which stays next to it); else before the
 * layer's first; else at the end. */
static int insert_at(const Graph *g, const Block *b, int layer, const bool *fresh) {
  for (int i = 0; i < b->n; i++)
    for (int k = 0; k < b->ins[i].nop; k++)
      if (b->ins[i].op[k].kind == 'b' && fresh[b->ins[i].op[k].vb])
        return i > 0 && b->ins[i - 1].kind == I_GEMM && b->ins[i - 1].epi != PP_EPI_NONE ? i - 1 : i;
  for (int i = 0; i < b->n; i++)
    if (in_layer(g, &b->ins[i], layer)) return i;
  return b->n;
}

/* Layer `layer` of chunk ch recomputed in its backward. */
static void recompute_layer(Program *p, int ch, int layer, bool full, const bool *pinned) {
  ProgChunk *c = &p->ch[ch];
  const Graph *g = c->g;
  Layer L = {.at = xmalloc((size_t)(c->fwd.n + 1) * sizeof(int)),
             .acc = xmalloc((size_t)(c->fwd.n + 1) * sizeof(Access)),
             .ok = xcalloc((size_t)c->fwd.n + 1, sizeof(bool)),
             .take = xcalloc((size_t)c->fwd.n + 1, sizeof(bool))};
  for (int i = 0; i < c->fwd.n; i++) {
    const Instr *in = &c->fwd.ins[i];
    if (!in_layer(g, in, layer)) continue;
    L.at[L.n] = i;
    L.ok[L.n] = access(p, in, &L.acc[L.n]) && (full || cheap(g, in));
    L.n++;
  }
  int nvb = p->nvb;
  bool *renamed = xcalloc((size_t)nvb, sizeof *renamed), *needed = xcalloc((size_t)nvb, sizeof *needed);
  int *to = xmalloc((size_t)nvb * sizeof *to);
  settle(p, &L, pinned, renamed);
  /* what the layer's backward (B and W) reads of the renamed buffers, then back through the copies */
  const Block *bw[2] = {&c->bwd, &c->wgt};
  mark_uses(g, bw[0], layer, needed);
  mark_uses(g, bw[1], layer, needed);
  for (int v = 0; v < nvb; v++) needed[v] = needed[v] && renamed[v];
  for (int i = L.n - 1; i >= 0; i--) {
    for (int k = 0; k < L.acc[i].nw && L.ok[i] && !L.take[i]; k++) L.take[i] = needed[L.acc[i].w[k]];
    for (int k = 0; k < L.acc[i].nr && L.take[i]; k++)
      if (renamed[L.acc[i].r[k]]) needed[L.acc[i].r[k]] = true;
  }
  for (int v = 0; v < nvb; v++) to[v] = -1;
  Instr *copy = xmalloc((size_t)(L.n + 1) * sizeof *copy);
  int ncopy = 0;
  for (int i = 0; i < L.n; i++) {
    if (!L.take[i]) continue;
    for (int k = 0; k < L.acc[i].nw; k++)
      if (to[L.acc[i].w[k]] < 0) to[L.acc[i].w[k]] = new_buffer(p, L.acc[i].w[k]);
    copy[ncopy] = c->fwd.ins[L.at[i]];
    if (!(i + 1 < L.n && L.take[i + 1] && L.at[i + 1] == L.at[i] + 1)) copy[ncopy].epi = PP_EPI_NONE; /* alone */
    remap(&copy[ncopy], to);
    copy[ncopy++].why = "recomputed for the backward";
  }
  /* what a copy reads of the layer's kept values waits for it in the slot (selective: a GEMM's
   * output the forward read at once, such as q before its RoPE) */
  for (int i = 0; i < L.n; i++)
    for (int k = 0; k < L.acc[i].nr && L.take[i]; k++) {
      VBuf *v = &p->vb[L.acc[i].r[k]];
      if (!renamed[L.acc[i].r[k]] && v->cls == BC_SCRATCH) v->cls = BC_SLOT, v->chunk = ch;
    }
  if (ncopy) {
    for (int b = 0; b < 2; b++)
      for (int i = 0; i < bw[b]->n; i++)
        if (in_layer(g, &bw[b]->ins[i], layer)) remap(&bw[b]->ins[i], to);
    bool *mark = xcalloc((size_t)p->nvb, sizeof *mark); /* the copies' buffers, then W's */
    for (int v = 0; v < nvb; v++)
      if (to[v] >= 0) mark[to[v]] = true;
    int at = insert_at(g, &c->bwd, layer, mark);
    for (int i = 0; i < ncopy; i++) insert(&c->bwd, at + i, &copy[i]);
    /* a copy W reads waits in the slot from B to W */
    memset(mark, 0, (size_t)p->nvb * sizeof *mark);
    mark_uses(g, &c->wgt, -1, mark);
    for (int v = 0; v < nvb; v++)
      if (to[v] >= 0 && mark[to[v]]) p->vb[to[v]].cls = BC_SLOT, p->vb[to[v]].chunk = ch;
    free(mark);
  }
  free(copy);
  free(to);
  free(renamed);
  free(needed);
  free(L.at);
  free(L.acc);
  free(L.ok);
  free(L.take);
}

/* Whether buffer v is a chunk's boundary (a received or sent value: the schedule's, not an
 * instruction's). */
static bool boundary(const Program *p, int v) {
  for (int ch = 0; ch < p->nch; ch++)
    for (int k = 0; k < PP_NBND; k++)
      if (p->ch[ch].bnd[k] == v) return true;
  return false;
}

/* A slot buffer no backward instruction reads any more lives inside its forward: scratch. */
static void release(Program *p) {
  bool *used = xcalloc((size_t)p->nvb + 1, sizeof *used);
  for (int ch = 0; ch < p->nch; ch++) {
    mark_uses(p->ch[ch].g, &p->ch[ch].bwd, -1, used);
    mark_uses(p->ch[ch].g, &p->ch[ch].wgt, -1, used);
  }
  for (int v = 0; v < p->nvb; v++) {
    VBuf *b = &p->vb[v];
    if (b->cls == BC_SLOT && b->view < 0 && !b->pin_start && !b->pin_end && !boundary(p, v) && !used[v])
      b->cls = BC_SCRATCH;
  }
  free(used);
}

void recompute(Program *p, const Config *c) {
  if (c->recompute == RECOMPUTE_NONE) return;
  int nvb = p->nvb;
  bool *pinned = xcalloc((size_t)nvb + 1, sizeof *pinned); /* written by a backward instruction */
  for (int ch = 0; ch < p->nch; ch++) {
    const Block *bw[2] = {&p->ch[ch].bwd, &p->ch[ch].wgt};
    for (int b = 0; b < 2; b++)
      for (int i = 0; i < bw[b]->n; i++) {
        Access a;
        if (!access(p, &bw[b]->ins[i], &a)) {
          for (int k = 0; k < bw[b]->ins[i].nop; k++) /* unknown: every buffer it names */
            if (bw[b]->ins[i].op[k].kind == 'b') pinned[bw[b]->ins[i].op[k].vb] = true;
          continue;
        }
        for (int k = 0; k < a.nw; k++) pinned[a.w[k]] = true;
      }
  }
  for (int ch = 0; ch < p->nch; ch++) {
    const Graph *g = p->ch[ch].g;
    int lo = g->nlayers, hi = -1; /* the chunk's layers */
    for (int i = 0; i < g->nnodes; i++)
      if (g->nodes[i].layer >= 0) {
        if (g->nodes[i].layer < lo) lo = g->nodes[i].layer;
        if (g->nodes[i].layer > hi) hi = g->nodes[i].layer;
      }
    for (int l = lo; l <= hi; l++)
      if (l >= c->rc_lo && l < c->rc_hi) recompute_layer(p, ch, l, c->recompute == RECOMPUTE_FULL, pinned);
  }
  free(pinned);
  release(p);
}
