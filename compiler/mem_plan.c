/* mem_plan.c — places every virtual buffer in the rank's arena: parameters, gradients and AdamW
 * moments in four regions of one layout; saved activations in a slot; block-local values in a
 * scratch region whose bytes are reused when lifetimes do not overlap; last, the GEMM library's
 * workspace. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

#define ALIGN 64

static int64_t align(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

/* Every buffer an instruction touches: its first and last use, numbered across the blocks. */
static void lifetimes(Program *p) {
  Block *blocks[3] = {&p->fwd, &p->bwd, &p->opt};
  int t = 0, start[3], end[3];
  for (int b = 0; b < 3; b++) {
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
    for (int b = 0; b < 3; b++) {
      if (v->pin_start && v->first >= start[b] && v->first < end[b]) v->first = start[b];
      if (v->pin_end && v->last >= start[b] && v->last < end[b]) v->last = end[b];
    }
  }
}

static int by_size(const void *a, const void *b) {
  const VBuf *x = *(const VBuf *const *)a, *y = *(const VBuf *const *)b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return x->first - y->first;
}

/* Greedy first fit by decreasing size: the lowest offset that overlaps no placed buffer whose
 * lifetime overlaps. */
static int64_t place_scratch(VBuf **list, int n) {
  qsort(list, (size_t)n, sizeof *list, by_size);
  int64_t top = 0;
  for (int i = 0; i < n; i++) {
    VBuf *v = list[i];
    int64_t off = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (int j = 0; j < i; j++) {
        VBuf *u = list[j];
        bool live = !(u->last < v->first || v->last < u->first);
        bool overlap = off < u->off + align(u->bytes) && u->off < off + align(v->bytes);
        if (live && overlap) {
          off = u->off + align(u->bytes);
          moved = true;
        }
      }
    }
    v->off = off;
    if (off + align(v->bytes) > top) top = off + align(v->bytes);
  }
  return top;
}

void mem_plan(Program *p) {
  lifetimes(p);
  int64_t size[BC__COUNT] = {0};
  VBuf **scratch = xcalloc((size_t)p->nvb + 1, sizeof *scratch);
  int ns = 0;
  for (int i = 0; i < p->nvb; i++) {
    VBuf *v = &p->vb[i];
    if (v->cls == BC_SCRATCH) {
      if (v->first < 0) v->first = v->last = 0; /* never touched: still placed */
      scratch[ns++] = v;
      continue;
    }
    v->off = size[v->cls];
    size[v->cls] += align(v->bytes);
  }
  size[BC_SCRATCH] = place_scratch(scratch, ns);
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
