/* mem_plan.c — places every virtual buffer in the rank's arena: parameters, gradients, AdamW
 * moments and working copies in regions of one layout; saved activations in a slot; block-local
 * values in a scratch region whose bytes are reused when lifetimes do not overlap; last, the GEMM
 * library's workspace. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

static int64_t align(int64_t x) { return (x + MEM_ALIGN - 1) / MEM_ALIGN * MEM_ALIGN; }

/* Every buffer an instruction touches: its first and last use, numbered across the blocks (each
 * chunk's forward, backward and weights, then the optimizer and the refresh). */
static void lifetimes(Program *p) {
  int nb = 3 * p->nch + 2;
  Block **blocks = xmalloc((size_t)nb * sizeof *blocks);
  for (int k = 0; k < p->nch; k++) {
    blocks[3 * k] = &p->ch[k].fwd;
    blocks[3 * k + 1] = &p->ch[k].bwd;
    blocks[3 * k + 2] = &p->ch[k].wgt;
  }
  blocks[nb - 2] = &p->opt;
  blocks[nb - 1] = &p->refresh;
  int t = 0, *start = xmalloc((size_t)nb * sizeof *start), *end = xmalloc((size_t)nb * sizeof *end);
  for (int b = 0; b < nb; b++) {
    start[b] = t;
    for (int i = 0; i < blocks[b]->n; i++, t++) {
      const Instr *in = &blocks[b]->ins[i];
      for (int k = 0; k < in->nop; k++) {
        if (in->op[k].kind != 'b') continue;
        VBuf *v = &p->vb[in->op[k].vb];
        if (v->first < 0) v->first = t;
        v->last = t;
      }
    }
    end[b] = t; /* one past the block's last instruction */
  }
  /* values the schedule receives before a block or sends after it */
  for (int i = 0; i < p->nvb; i++) {
    VBuf *v = &p->vb[i];
    if (v->first < 0) continue;
    for (int b = 0; b < nb; b++) {
      if (v->pin_start && v->first >= start[b] && v->first < end[b]) v->first = start[b];
      if (v->pin_end && v->last >= start[b] && v->last < end[b]) v->last = end[b];
    }
  }
  free(blocks);
  free(start);
  free(end);
}

static int by_size(const void *a, const void *b) {
  const VBuf *x = *(const VBuf *const *)a, *y = *(const VBuf *const *)b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return x->first - y->first;
}

/* The placed buffers, found by lifetime: the buffers in order of their first use, as the leaves
 * of a segment tree whose nodes hold the latest last use of the placed leaves under them. The
 * placed buffers live at the same time as [first, last] are the placed leaves of first use up to
 * `last` whose last use is at least `first`: found in O((k + 1) log n) for k of them. */
typedef struct Live {
  VBuf **by_first; /* every buffer, by first use */
  int *leaf;       /* per buffer of the list: its leaf (its index in by_first) */
  int *max_last;   /* per tree node: the latest last use of a placed leaf under it; INT_MIN: none */
  int size;        /* leaves in the tree: a power of two, at least n */
} Live;

typedef struct FirstUse {
  int first, i; /* a buffer's first use, its index in the list */
} FirstUse;

static int by_first(const void *a, const void *b) {
  const FirstUse *x = a, *y = b;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return x->i - y->i;
}

static Live live_new(VBuf **list, int n) {
  Live t = {.size = 1};
  while (t.size < n) t.size *= 2;
  FirstUse *order = xmalloc(((size_t)n + 1) * sizeof *order);
  for (int i = 0; i < n; i++) order[i] = (FirstUse){list[i]->first, i};
  qsort(order, (size_t)n, sizeof *order, by_first);
  t.by_first = xmalloc(((size_t)n + 1) * sizeof *t.by_first);
  t.leaf = xmalloc(((size_t)n + 1) * sizeof *t.leaf);
  for (int j = 0; j < n; j++) {
    t.by_first[j] = list[order[j].i];
    t.leaf[order[j].i] = j;
  }
  free(order);
  t.max_last = xmalloc(2 * (size_t)t.size * sizeof *t.max_last);
  for (int i = 0; i < 2 * t.size; i++) t.max_last[i] = INT_MIN;
  return t;
}

static void live_free(Live *t) {
  free(t->by_first);
  free(t->leaf);
  free(t->max_last);
}

static void live_place(Live *t, int i, int last) {
  int x = t->size + t->leaf[i];
  t->max_last[x] = last;
  for (x /= 2; x >= 1; x /= 2)
    t->max_last[x] = t->max_last[2 * x] > t->max_last[2 * x + 1] ? t->max_last[2 * x] : t->max_last[2 * x + 1];
}

/* The placed buffers of leaves [lo, hi) under node x that are used at or after `first`, with
 * leaves below `end` only, appended to out. */
static void live_find(const Live *t, int x, int lo, int hi, int end, int first, VBuf **out, int *nout) {
  if (lo >= end || t->max_last[x] < first) return;
  if (hi - lo == 1) {
    out[(*nout)++] = t->by_first[lo];
    return;
  }
  int mid = lo + (hi - lo) / 2;
  live_find(t, 2 * x, lo, mid, end, first, out, nout);
  live_find(t, 2 * x + 1, mid, hi, end, first, out, nout);
}

static int by_off(const void *a, const void *b) {
  const VBuf *x = *(const VBuf *const *)a, *y = *(const VBuf *const *)b;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* Greedy first fit by decreasing size: the lowest offset that overlaps no placed buffer whose
 * lifetime overlaps. A placed buffer u is in the way of [off, off + size) when
 * u->off < off + size && off < u->off + align(u->bytes); walked in order of offset, each one in
 * the way moves off to its end, and the first one wholly above off + size ends the walk (every
 * later one is above it too). */
static int64_t place_scratch(VBuf **list, int n) {
  qsort(list, (size_t)n, sizeof *list, by_size);
  Live t = live_new(list, n);
  VBuf **near = xmalloc(((size_t)n + 1) * sizeof *near);
  int64_t top = 0;
  for (int i = 0; i < n; i++) {
    VBuf *v = list[i];
    /* the placed buffers whose lifetimes overlap v's: u->first <= v->last && u->last >= v->first */
    int lo = 0, hi = n;
    while (lo < hi) {
      int mid = lo + (hi - lo) / 2;
      if (t.by_first[mid]->first <= v->last) lo = mid + 1;
      else hi = mid;
    }
    int k = 0;
    live_find(&t, 1, 0, t.size, lo, v->first, near, &k);
    qsort(near, (size_t)k, sizeof *near, by_off);
    int64_t off = 0, size = align(v->bytes);
    for (int j = 0; j < k && near[j]->off < off + size; j++) {
      int64_t end = near[j]->off + align(near[j]->bytes);
      if (end > off) off = end;
    }
    v->off = off;
    if (off + size > top) top = off + size;
    live_place(&t, i, v->last);
  }
  free(near);
  live_free(&t);
  return top;
}

int64_t mem_param_elems(const Program *p, int64_t numel) {
  /* with working copies of e bytes an element, the f32 buffers align to MEM_ALIGN·4/e bytes and the
   * copies to MEM_ALIGN: MEM_ALIGN/e elements either way */
  int64_t unit = MEM_ALIGN / (fuse_keeps_copies(p->g) ? pp_dtype_bytes(pp_precision_dtype[p->g->cfg.precision]) : 4);
  return (numel + unit - 1) / unit * unit;
}

int mem_zero_ranks(const Program *p) {
  const Config *c = &p->g->cfg;
  return c->zero && !p->g->infer ? (int)(c->dp * c->cp) : 1; /* a generation program has no optimizer */
}

int64_t mem_zero_shard(const Program *p, int64_t n) {
  int64_t Z = mem_zero_ranks(p), unit = mem_param_elems(p, 1);
  return (n + Z * unit - 1) / (Z * unit) * unit;
}

int mem_param_part(const Program *p, int i) { return ir_param_decays(&p->g->params[i]) ? 0 : 1; }

void mem_plan(Program *p) {
  lifetimes(p);
  int64_t size[BC__COUNT] = {0}, slot[PP_MAX_CHUNKS] = {0}; /* a slot: each chunk's layout from 0 */
  VBuf **scratch = xcalloc((size_t)p->nvb + 1, sizeof *scratch);
  int ns = 0;
  int64_t untouched = 0; /* the largest scratch buffer no instruction touches (a product made in parts) */
  for (int i = 0; i < p->nvb; i++) {
    VBuf *v = &p->vb[i];
    if (v->cls == BC_SCRATCH) {
      if (v->first < 0) { /* never touched: at the region's start, over whatever lives there */
        v->off = 0;
        if (v->bytes > untouched) untouched = v->bytes;
        continue;
      }
      scratch[ns++] = v;
      continue;
    }
    if (v->cls == BC_SLOT) {
      v->off = slot[v->chunk];
      slot[v->chunk] += align(v->bytes);
      if (slot[v->chunk] > size[BC_SLOT]) size[BC_SLOT] = slot[v->chunk]; /* one slot holds any chunk's */
      continue;
    }
  }
  /* the parameters' regions, alike: their parts in order (mem_param_part), each part's
   * parameters in order, so that AdamW updates a part with one kernel (fuse_adamw.c); then, as a
   * third part, a tied embedding's gradient (grads only: the params' layout, then it). ZeRO-1: each
   * of the two parts padded to Z shards, and the moments' regions hold this rank's shard alone
   * (the part's moment buffers all start at it: only its view is read, fuse_adamw.c) */
  int Z = mem_zero_ranks(p);
  for (int part = 0; part < 3; part++) {
    int64_t start[BC__COUNT];
    memcpy(start, size, sizeof start);
    for (int i = 0; i < p->nvb; i++) {
      VBuf *v = &p->vb[i];
      if (v->cls == BC_SLOT || v->cls == BC_SCRATCH || v->view >= 0 ||
          (v->tail ? 2 : mem_param_part(p, v->param)) != part)
        continue;
      v->off = size[v->cls];
      if (Z > 1 && part < 2 && (v->cls == BC_ADAM_M || v->cls == BC_ADAM_V)) continue;
      size[v->cls] += mem_param_elems(p, ir_shape_numel(&v->shape)) * pp_dtype_bytes(v->dtype);
    }
    int64_t n = (size[BC_PARAM] - start[BC_PARAM]) / 4; /* the part's elements */
    if (Z == 1 || part == 2 || !n) continue;
    int64_t S = mem_zero_shard(p, n);
    size[BC_PARAM] = start[BC_PARAM] + Z * S * 4;
    size[BC_GRAD] = start[BC_GRAD] + Z * S * 4;
    if (size[BC_COPY] > start[BC_COPY])
      size[BC_COPY] = start[BC_COPY] + Z * S * pp_dtype_bytes(pp_precision_dtype[p->g->cfg.precision]);
    size[BC_ADAM_M] = start[BC_ADAM_M] + S * 4;
    size[BC_ADAM_V] = start[BC_ADAM_V] + S * 4;
  }
  for (int i = 0; i < p->nvb; i++)
    if (p->vb[i].view >= 0) p->vb[i].off = p->vb[p->vb[i].view].off;
  size[BC_SCRATCH] = place_scratch(scratch, ns);
  if (align(untouched) > size[BC_SCRATCH]) size[BC_SCRATCH] = align(untouched);
  size[BC_WORKSPACE] = WORKSPACE_BYTES;
  free(scratch);
  int64_t off = 0;
  for (int c = 0; c < BC__COUNT; c++) {
    if (c == BC_WORKSPACE) off = (off + 255) / 256 * 256; /* cuBLASLt wants its workspace 256-byte aligned */
    p->region_off[c] = off;
    p->region_bytes[c] = size[c];
    off += c == BC_SLOT ? size[c] * p->nslots : size[c];
  }
  p->arena = off;
}
