/* fuzz_listing.c — libFuzzer target: bytes as a rank's program listing through ppr's parser
 * (rt_prog_parse, runtime/rt_prog*.c; the format is docs/stage-format.md).
 *
 * A listing carries the FNV-1a hash of everything after its hash line, so nearly every mutation
 * would stop at "content hash mismatch". When the input has a line "hash " followed by 16
 * lowercase hex digits and a newline, those digits are replaced by the hash of the bytes after
 * that line first, as ppc would write it; the mutated listing then reaches the checks behind
 * the hash. (The hash check itself is the one thing this leaves out; tests/unit/test_ppr.c
 * covers it.)
 *
 * What counts as a bug (the target aborts, and libFuzzer saves the input):
 *   - a sanitizer report;
 *   - a rejection whose message does not name the file (rt_prog.h's contract);
 *   - a listing that loads with an operand outside the arena or its slot, a param outside the
 *     params region, a kernel index or a schedule entry out of range: the parser's promise is
 *     that whatever loads, the executor can run without another bounds check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_prog.h"

#define PATH "fuzz.prog"

static void bad(const char *fmt, int64_t a, int64_t b) {
  fprintf(stderr, "fuzz_listing: a loaded listing breaks the parser's promise: ");
  fprintf(stderr, fmt, (long long)a, (long long)b);
  fputc('\n', stderr);
  abort();
}

static int hexdigit(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

/* Rewrite the hash of the first "hash HEX16\n" line to match the bytes after it. */
static void rehash(char *t, size_t n) {
  for (size_t i = 0; i + 22 <= n; i++) {
    if ((i > 0 && t[i - 1] != '\n') || memcmp(t + i, "hash ", 5)) continue;
    size_t h = i + 5;
    int ok = t[h + 16] == '\n';
    for (int k = 0; k < 16 && ok; k++) ok = hexdigit(t[h + (size_t)k]);
    if (!ok) continue;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)rt_fnv1a64(t + h + 17, n - (h + 17)));
    memcpy(t + h, hex, 16);
    return;
  }
}

/* [off, off + bytes) inside the arena (or one slot, for $OFF). */
static void in_bounds(const RtProg *p, const RtPtr *q, int64_t bytes, const char *what) {
  if (!q->present) return;
  int64_t lim = q->in_slot ? p->reg[RT_REG_SLOTS].bytes : p->arena;
  if (q->off < 0 || bytes < 0 || q->off > lim || bytes > lim - q->off) {
    fprintf(stderr, "fuzz_listing: %s:\n", what);
    bad("offset %lld + %lld bytes leaves its space", q->off, bytes);
  }
}

/* The last byte a GEMM operand touches: BATCH matrices of rows x cols, leading dim ld, stride
 * elements apart (every factor non-negative, as the parser checks). */
static void gemm_operand(const RtProg *p, const RtPtr *q, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                         int64_t batch) {
  if (rows < 1 || cols < 1 || ld < cols || stride < 0 || batch < 1) bad("gemm: an operand of %lld x %lld", rows, cols);
  __int128 last = (__int128)(batch - 1) * stride + (__int128)(rows - 1) * ld + (cols - 1);
  __int128 bytes = 4 * (last + 1);
  if (bytes > (__int128)RT_MAX_OFFSET) bad("gemm: an operand spans more than %lld bytes (%lld)", RT_MAX_OFFSET, 0);
  in_bounds(p, q, (int64_t)bytes, "gemm operand");
}

static void check_geom(const RtGeom *g) {
  if (g->grid < 1 || g->grid > RT_MAX_GRID) bad("a kernel's grid %lld (at most %lld)", g->grid, RT_MAX_GRID);
  if (g->block < 1 || g->block > RT_MAX_BLOCK || (g->block & (g->block - 1)))
    bad("a kernel's block %lld (a power of two up to %lld)", g->block, RT_MAX_BLOCK);
  if (g->local < 0 || g->local > RT_MAX_LOCAL)
    bad("a kernel's local memory %lld (at most %lld)", g->local, RT_MAX_LOCAL);
}

static void check(const RtProg *p) {
  if (p->arena < 1 || p->arena > RT_MAX_OFFSET) bad("arena %lld (at most %lld)", p->arena, RT_MAX_OFFSET);
  if (p->nslots < 1) bad("%lld slots (at least %lld)", p->nslots, 1);
  for (int r = 0; r < RT_NREG; r++) {
    int64_t total = p->reg[r].bytes * (r == RT_REG_SLOTS ? p->nslots : 1);
    if (p->reg[r].base < 0 || p->reg[r].bytes < 0 || p->reg[r].base + total > p->arena)
      bad("region %lld ends past the arena (%lld bytes)", r, p->arena);
  }
  if (p->local_microbatches < 1 || p->local_microbatches > p->microbatches)
    bad("%lld local micro-batches of %lld", p->local_microbatches, p->microbatches);
  if (p->nchunks < 0 || p->nchunks > PP_MAX_CHUNKS) bad("%lld chunks (at most %lld)", p->nchunks, PP_MAX_CHUNKS);
  for (int cb = 0; cb < rt_prog_nchunks(p) * RT_NBLK; cb++) {
    int c = cb / RT_NBLK, b = cb % RT_NBLK;
    const RtBlock *blk = rt_prog_block(p, c, b);
    if (c > 0 && b == RT_BLK_OPTIMIZER) continue; /* the program's one optimizer block, checked with chunk 0 */
    if (blk->n < 0 || (blk->n > 0 && !blk->ins)) bad("block %lld has %lld instructions", b, blk->n);
    for (int n = 0; n < blk->n; n++) {
      const RtInstr *in = &blk->ins[n];
      switch (in->kind) {
      case RT_I_GEMM: {
        int64_t rows[3] = {in->ta ? in->k : in->m, in->tb ? in->n : in->k, in->m};
        int64_t cols[3] = {in->ta ? in->m : in->k, in->tb ? in->k : in->n, in->n};
        int64_t ld[3] = {in->lda, in->ldb, in->ldc}, st[3] = {in->sa, in->sb, in->sc};
        for (int o = 0; o < 3; o++) gemm_operand(p, &in->p[o], rows[o], cols[o], ld[o], st[o], in->batch);
        break;
      }
      case RT_I_KERNEL:
      case RT_I_GRAD_NORM:
        if (in->kernel < 0 || in->kernel >= p->nkernels) bad("kernel index %lld of %lld", in->kernel, p->nkernels);
        check_geom(&in->geom);
        if (memcmp(&p->kgeom[in->kernel], &in->geom, sizeof in->geom))
          bad("kernel %lld called with another geometry than its first call (line %lld)", in->kernel, in->line);
        if (in->kind == RT_I_GRAD_NORM) { /* p[0]: GRID partial sums; p[1]: the table, in->bytes rows of 8 bytes */
          in_bounds(p, &in->p[0], 4 * in->geom.grid, "grad_norm partials");
          in_bounds(p, &in->p[1], 8 * in->bytes, "grad_norm table");
          if (in->bytes < (p->nparams ? p->nparams : 1) || in->geom.grid % in->bytes)
            bad("grad_norm's table of %lld rows for %lld params, or GRID not a multiple of its rows", in->bytes,
                p->nparams);
          break;
        }
        if (in->nargs < 0 || in->nargs > RT_MAX_KARGS || (in->nargs > 0 && !in->args))
          bad("a kernel call with %lld arguments (at most %lld)", in->nargs, RT_MAX_KARGS);
        for (int a = 0; a < in->nargs; a++)
          if (in->args[a].kind == RT_A_PTR)
            in_bounds(p, &in->args[a].ptr, in->args[a].bytes ? in->args[a].bytes : 4, "kernel argument");
          else if (in->args[a].kind == RT_A_SCALAR && (in->args[a].scalar < 0 || in->args[a].scalar >= RT_NSCALAR))
            bad("scalar argument %lld of %lld", in->args[a].scalar, RT_NSCALAR);
        break;
      case RT_I_BATCH:
        for (int k = 0; k < 2; k++) in_bounds(p, &in->p[k], (int64_t)p->micro_batch * p->seq * 4, "batch");
        break;
      case RT_I_ZERO:
      case RT_I_ALLREDUCE_TIED:
      case RT_I_ALLREDUCE:
        in_bounds(p, &in->p[0], in->bytes, "zero/allreduce");
        if (in->bytes % 4) bad("zero/allreduce of %lld bytes, not a multiple of %lld", in->bytes, 4);
        break;
      case RT_I_SEED:
      case RT_I_LOSS: in_bounds(p, &in->p[0], 4, "seed/loss"); break;
      case RT_I_LOGITS: in_bounds(p, &in->p[0], in->lg[0] * in->lg[1] * in->lg[2] * 4, "logits"); break;
      default: bad("instruction kind %lld on line %lld", in->kind, in->line);
      }
    }
  }
  const RtRegion *pr = &p->reg[RT_REG_PARAMS];
  for (int i = 0; i < p->nparams; i++) {
    const RtParam *q = &p->params[i];
    if (!q->name || q->ndim < 0 || q->ndim > RT_MAX_NDIM) bad("param %lld has %lld dims", i, q->ndim);
    int64_t numel = 1;
    for (int d = 0; d < q->ndim; d++) {
      if (q->dims[d] < 1) bad("param %lld has a dim of %lld", i, q->dims[d]);
      numel *= q->dims[d];
    }
    if (numel != q->numel) bad("param numel %lld, its dims give %lld", q->numel, numel);
    if (q->off < pr->base || 4 * q->numel > pr->bytes || q->off - pr->base > pr->bytes - 4 * q->numel)
      bad("param at @%lld + %lld elements leaves the params region", q->off, q->numel);
    if (q->sharded &&
        (q->shard_dim < 0 || q->shard_dim >= q->ndim || q->shard_start < 0 || q->shard_start >= q->shard_dense))
      bad("param %lld: a shard along dim %lld", i, q->shard_dim);
  }
  if (p->tied >= p->nparams) bad("tied param %lld of %lld", p->tied, p->nparams);
  for (int e = 0; e < p->nentries; e++) {
    const RtEntry *en = &p->sched[e];
    if ((en->kind == RT_E_F || en->kind == RT_E_B || en->kind == RT_E_W) &&
        (en->slot < 0 || en->slot >= p->nslots || en->mb < 0 || en->mb >= p->local_microbatches || en->chunk < 0 ||
         en->chunk >= rt_prog_nchunks(p)))
      bad("F/B/W entry: micro-batch %lld, slot %lld (or its chunk)", en->mb, en->slot);
    if (en->kind == RT_E_COMM && (en->nops < 1 || en->nops > 2))
      bad("a comm entry of %lld ops (1 to %lld)", en->nops, 2);
    for (int o = 0; en->kind == RT_E_COMM && o < en->nops; o++)
      if (en->op[o].kind < 0 || en->op[o].kind >= PP_NBND || en->op[o].slot < 0 || en->op[o].slot >= p->nslots ||
          en->op[o].mb < 0 || en->op[o].mb >= p->local_microbatches || en->op[o].chunk < 0 ||
          en->op[o].chunk >= rt_prog_nchunks(p) || !rt_prog_boundary(p, en->op[o].chunk, en->op[o].kind)->present)
        bad("comm op: micro-batch %lld, slot %lld (or its chunk)", en->op[o].mb, en->op[o].slot);
  }
  for (int ck = 0; ck < rt_prog_nchunks(p) * PP_NBND; ck++) {
    const RtBoundary *b = rt_prog_boundary(p, ck / PP_NBND, ck % PP_NBND);
    if (!b->present) continue;
    in_bounds(p, &b->ptr, b->bytes, "boundary");
    if (b->bytes % 4) bad("boundary %lld of %lld bytes", ck % PP_NBND, b->bytes);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *t = malloc(size ? size : 1);
  if (!t) return 0;
  memcpy(t, data, size);
  rehash(t, size);
  RtProg *p = NULL;
  char err[4096];
  err[0] = 0;
  int rc = rt_prog_parse(PATH, t, size, &p, err, sizeof err);
  if (rc == 0) {
    if (!p) bad("rt_prog_parse returned %lld and no program (%lld)", rc, 0);
    check(p);
  } else {
    if (p) bad("rt_prog_parse failed (%lld) and returned a program (%lld)", rc, 0);
    if (!strstr(err, PATH)) {
      fprintf(stderr, "fuzz_listing: a rejection that does not name the file: '%s'\n", err);
      abort();
    }
  }
  rt_prog_free(p);
  free(t);
  return 0;
}
