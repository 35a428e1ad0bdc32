/* rt_prog_instr.c - the instructions of a listing's blocks (batch, zero, kernel, gemm, seed, loss, grad_norm,
 * allreduce_tied, allreduce), each operand bounded, and the optimizer block's checks of the gradient sums. */
#include "rt_prog_parse.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BATCH ((int64_t)1 << 20) /* gemm BATCH */

/* ---- instructions -------------------------------------------------------------------------- */

/* <<<GRID,BLOCK,LOCAL>>> */
static int parse_geom(RtParser *s, const char *t, const char *what, RtGeom *out) {
  char tmp[96];
  size_t n = strlen(t);
  if (n < 8 || n >= sizeof tmp || strncmp(t, "<<<", 3) || strcmp(t + n - 3, ">>>"))
    return rt_prog_err(s, "%s: expected the launch geometry <<<GRID,BLOCK,LOCAL>>>, found '%.60s'", what, t);
  memcpy(tmp, t + 3, n - 6);
  tmp[n - 6] = 0;
  char *c1 = strchr(tmp, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
  if (!c1 || !c2)
    return rt_prog_err(s, "%s: expected the launch geometry <<<GRID,BLOCK,LOCAL>>>, found '%.60s'", what, t);
  *c1 = *c2 = 0;
  int64_t b;
  if (rt_prog_parse_int(tmp, 1, RT_MAX_GRID, &out->grid))
    return rt_prog_err(s, "%s: %.60s: GRID is not an integer in [1, 2^31-1]", what, t);
  if (rt_prog_parse_int(c1 + 1, 1, RT_MAX_BLOCK, &b) || (b & (b - 1)))
    return rt_prog_err(s, "%s: %.60s: BLOCK is not a power of two in [1, %d]", what, t, RT_MAX_BLOCK);
  out->block = (int)b;
  if (rt_prog_parse_int(c2 + 1, 0, RT_MAX_LOCAL, &out->local))
    return rt_prog_err(s, "%s: %.60s: LOCAL is not an integer in [0, %d]", what, t, RT_MAX_LOCAL);
  return 0;
}

/* The index of kernel NAME, launched with geometry g: every call of a kernel has the same. */
static int kernel_index(RtParser *s, const char *name, const RtGeom *g0) {
  RtProg *g = s->p;
  for (int i = 0; i < g->nkernels; i++)
    if (!strcmp(g->kernels[i], name)) {
      const RtGeom *o = &g->kgeom[i];
      if (o->grid != g0->grid || o->block != g0->block || o->local != g0->local)
        return rt_prog_err(s,
                           "kernel %.60s: launched <<<%lld,%d,%lld>>> here, <<<%lld,%d,%lld>>> before (a kernel's "
                           "geometry is fixed by the compiler)",
                           name, (long long)g0->grid, g0->block, (long long)g0->local, (long long)o->grid, o->block,
                           (long long)o->local);
      return i;
    }
  int cap = s->cap_kernels;
  if (rt_prog_grow(s, (void **)&g->kernels, &s->cap_kernels, g->nkernels + 1, sizeof *g->kernels)) return -1;
  if (s->cap_kernels != cap) {
    RtGeom *ng = realloc(g->kgeom, (size_t)s->cap_kernels * sizeof *ng);
    S_ALLOC(ng);
    g->kgeom = ng;
  }
  g->kernels[g->nkernels] = rt_prog_strdup(name);
  S_ALLOC(g->kernels[g->nkernels]);
  g->kgeom[g->nkernels] = *g0;
  return g->nkernels++;
}

static int only_in(RtParser *s, const char *ins, int allow_fwd_bwd, int allow_opt) {
  int b = s->cur_blk;
  char name[32];
  if (b == RT_BLK_REFRESH) /* the working copies: kernels alone */
    return rt_prog_err(s, "'%s' is not allowed in the refresh block (only kernels)", ins);
  if ((b == RT_BLK_OPTIMIZER && !allow_opt) || (b != RT_BLK_OPTIMIZER && !allow_fwd_bwd))
    return rt_prog_err(s, "'%s' is not allowed in the %s block (only in %s)", ins,
                       rt_prog_block_label(s->p, s->cur_chunk, b, name, sizeof name),
                       allow_opt ? "the optimizer block" : "the forward and backward blocks");
  return 0;
}

/* logits $OFF B S VLOCAL VSTART [TYPE]: once a program, in a forward block, in the slot */
static int parse_logits(RtParser *s, RtInstr *in) {
  RtProg *g = s->p;
  RtLogits *l = &g->logits;
  static const char *const form = "logits $OFF B S VLOCAL VSTART [f32|bf16]";
  if (s->cur_blk != RT_BLK_FORWARD) return rt_prog_err(s, "logits outside a forward block");
  if (l->present) return rt_prog_err(s, "a second logits (the first is on line %d)", l->line);
  int dt = s->nf == 7 ? pp_dtype_parse(s->f[6]) : PP_F32;
  if (s->nf == 7 && dt != PP_F32 && dt != PP_BF16)
    return rt_prog_err(s, "logits: type '%.60s' (expected f32 or bf16)", s->f[6]);
  if ((s->nf != 7 && rt_prog_want_nf(s, 6, form)) || rt_prog_parse_ptr(s, s->f[1], "logits", &in->p[0], NULL) ||
      rt_prog_want_int(s, 2, "logits: B", g->micro_batch, g->micro_batch, &in->lg[0]) ||
      rt_prog_want_int(s, 3, "logits: S", rt_prog_seq_local(g), rt_prog_seq_local(g), &in->lg[1]) ||
      rt_prog_want_int(s, 4, "logits: VLOCAL", 1, g->vocab + PP_MAX_RANKS, &in->lg[2]) ||
      rt_prog_want_int(s, 5, "logits: VSTART", 0, g->vocab - 1, &in->lg[3]))
    return -1;
  if (!in->p[0].in_slot)
    return rt_prog_err(s, "logits: '%.60s': the logits live in the micro-batch's slot ($OFF)", s->f[1]);
  if (rt_prog_check_extent(s, "logits", &in->p[0], in->lg[0] * in->lg[1] * in->lg[2] * pp_dtype_bytes(dt))) return -1;
  *l = (RtLogits){.present = 1,
                  .chunk = s->cur_chunk,
                  .line = s->line,
                  .ptr = in->p[0],
                  .b = in->lg[0],
                  .s = in->lg[1],
                  .vlocal = in->lg[2],
                  .vstart = in->lg[3],
                  .dtype = (PpDType)dt};
  return 0;
}

/* Elements spanned by BATCH row-major matrices of rows x cols with leading dim ld, stride apart. */
static int gemm_operand(RtParser *s, const char *which, const RtPtr *p, int64_t rows, int64_t cols, int64_t ld,
                        int64_t stride, int64_t batch, PpDType dt) {
  if (ld < cols)
    return rt_prog_err(s, "gemm: leading dimension of %s is %lld, less than its %lld columns", which, (long long)ld,
                       (long long)cols);
  int64_t a, b, e;
  if (__builtin_mul_overflow(rows - 1, ld, &a) || __builtin_mul_overflow(batch - 1, stride, &b) ||
      __builtin_add_overflow(a, b, &e) || __builtin_add_overflow(e, cols, &e) ||
      __builtin_mul_overflow(e, pp_dtype_bytes(dt), &e))
    return rt_prog_err(s, "gemm: %s spans more than 2^63 bytes", which);
  char what[32];
  snprintf(what, sizeof what, "gemm: %s", which);
  return rt_prog_check_extent(s, what, p, e);
}

static int parse_gemm(RtParser *s, RtInstr *in) {
  static const char *const form =
      "gemm TA TB M N K ALPHA A LDA SA B LDB SB BETA C LDC SC BATCH [TYPE_A TYPE_B TYPE_C] [tri:TRI] [epi:EPI]";
  int nf = s->nf; /* without the triangle and the epilogue */
  in->tri = PP_TRI_NONE;
  in->epi = PP_EPI_NONE;
  if (nf > 18 && !strncmp(s->f[nf - 1], "epi:", 4)) {
    int e = pp_epi_parse(s->f[nf - 1] + 4);
    if (e < 0) return rt_prog_err(s, "gemm: '%.60s' (expected epi:gelu, epi:dgelu or epi:bias)", s->f[nf - 1]);
    in->epi = (PpEpi)e;
    nf--;
  }
  if (nf > 18 && !strncmp(s->f[nf - 1], "tri:", 4)) {
    int t = pp_tri_parse(s->f[nf - 1] + 4);
    if (t < 0) return rt_prog_err(s, "gemm: '%.60s' (expected tri:out, tri:lower or tri:upper)", s->f[nf - 1]);
    in->tri = (PpTri)t;
    nf--;
  }
  if (nf != 18 && nf != 21)
    return rt_prog_err(
        s, "expected 18 fields, or 21 with the types, then perhaps a triangle; found %d (the line reads '%s')", s->nf,
        form);
  for (int i = 0; i < 3; i++) {
    int t = nf == 21 ? pp_dtype_parse(s->f[18 + i]) : PP_F32;
    if (t != PP_F32 && t != PP_BF16)
      return rt_prog_err(s, "gemm: TYPE_%c is '%.60s' (expected f32 or bf16)", "ABC"[i], s -> f[18 + i]);
    in->dt[i] = (PpDType)t;
  }
  for (int i = 1; i <= 2; i++)
    if (strcmp(s->f[i], "N") && strcmp(s->f[i], "T"))
      return rt_prog_err(s, "gemm: %s is '%.60s' (expected N or T)", i == 1 ? "TA" : "TB", s->f[i]);
  in->ta = s->f[1][0] == 'T';
  in->tb = s->f[2][0] == 'T';
  if (rt_prog_want_i32(s, 3, "gemm: M", 1, INT_MAX, &in->m) || rt_prog_want_i32(s, 4, "gemm: N", 1, INT_MAX, &in->n) ||
      rt_prog_want_i32(s, 5, "gemm: K", 1, INT_MAX, &in->k))
    return -1;
  if (rt_prog_parse_float(s->f[6], &in->alpha))
    return rt_prog_err(s, "gemm: ALPHA '%.60s' is not a finite number", s->f[6]);
  if (rt_prog_parse_ptr(s, s->f[7], "gemm: A", &in->p[0], NULL) ||
      rt_prog_want_i32(s, 8, "gemm: LDA", 1, INT_MAX, &in->lda) ||
      rt_prog_want_int(s, 9, "gemm: SA", 0, PP_MAX_ARENA, &in->sa) ||
      rt_prog_parse_ptr(s, s->f[10], "gemm: B", &in->p[1], NULL) ||
      rt_prog_want_i32(s, 11, "gemm: LDB", 1, INT_MAX, &in->ldb) ||
      rt_prog_want_int(s, 12, "gemm: SB", 0, PP_MAX_ARENA, &in->sb))
    return -1;
  if (rt_prog_parse_float(s->f[13], &in->beta))
    return rt_prog_err(s, "gemm: BETA '%.60s' is not a finite number", s->f[13]);
  if (rt_prog_parse_ptr(s, s->f[14], "gemm: C", &in->p[2], NULL) ||
      rt_prog_want_i32(s, 15, "gemm: LDC", 1, INT_MAX, &in->ldc) ||
      rt_prog_want_int(s, 16, "gemm: SC", 0, PP_MAX_ARENA, &in->sc) ||
      rt_prog_want_i32(s, 17, "gemm: BATCH", 1, MAX_BATCH, &in->batch))
    return -1;
  int64_t ar = in->ta ? in->k : in->m, ac = in->ta ? in->m : in->k;
  int64_t br = in->tb ? in->n : in->k, bc = in->tb ? in->k : in->n;
  if (gemm_operand(s, "A", &in->p[0], ar, ac, in->lda, in->sa, in->batch, in->dt[0]) ||
      gemm_operand(s, "B", &in->p[1], br, bc, in->ldb, in->sb, in->batch, in->dt[1]) ||
      gemm_operand(s, "C", &in->p[2], in->m, in->n, in->ldc, in->sc, in->batch, in->dt[2]))
    return -1;
  if (in->epi != PP_EPI_NONE && !pp_epi_gemm_ok(in->batch, in->beta, in->ldc, in->n, in->tri))
    return rt_prog_err(s, "gemm epi:%s: an epilogue needs BATCH 1, BETA 0, LDC = N and no triangle",
                       pp_epi_name(in->epi));
  return 0;
}

/* Kernel k after gemm g epi:NAME: the pointer arguments pp_epi.h says, C the GEMM's, each with an
 * extent of at least what its role touches. */
static int check_epilogue(RtParser *s, const RtInstr *g, const RtInstr *k) {
  PpEpi e = g->epi;
  int64_t es = pp_dtype_bytes(g->dt[2]), mn = (int64_t)g->m * g->n * es;
  const int *na = pp_epi_args[e];
  if (k->nargs < na[0] || k->nargs > na[1]) {
    char want[32];
    if (na[0] == na[1]) snprintf(want, sizeof want, "%d", na[0]);
    else snprintf(want, sizeof want, "%d to %d", na[0], na[1]);
    return rt_prog_err(s, "kernel after gemm epi:%s (line %d): %d arguments (expected %s)", pp_epi_name(e), g->line,
                       k->nargs, want);
  }
  for (int a = 0; a < k->nargs; a++) {
    int64_t want = a == pp_epi_bias[e] ? g->n * es : mn; /* the bias a row of C, the rest C's size */
    if (k->args[a].kind != RT_A_PTR || k->args[a].bytes < want)
      return rt_prog_err(s, "kernel after gemm epi:%s (line %d): argument %d (%s) is not a pointer to %lld bytes",
                         pp_epi_name(e), g->line, a + 1, pp_epi_roles[e][a], (long long)want);
  }
  const RtPtr *c = &k->args[pp_epi_c[e]].ptr;
  if (c->in_slot != g->p[2].in_slot || c->off != g->p[2].off)
    return rt_prog_err(s, "kernel after gemm epi:%s (line %d): argument %d is not the GEMM's C", pp_epi_name(e),
                       g->line, pp_epi_c[e] + 1);
  return 0;
}

/* A gemm epi:NAME must be followed by its kernel: an error when the block's last instruction is
 * one and the line being read (what) is not a kernel. */
int rt_prog_epi_pending(RtParser *s, const char *what) {
  const RtBlock *bk = rt_prog_block(s->p, s->cur_chunk, s->cur_blk);
  if (!bk->n || bk->ins[bk->n - 1].kind != RT_I_GEMM || bk->ins[bk->n - 1].epi == PP_EPI_NONE) return 0;
  return rt_prog_err(s, "gemm epi:%s (line %d) is followed by %s, not by its kernel",
                     pp_epi_name(bk->ins[bk->n - 1].epi), bk->ins[bk->n - 1].line, what);
}

static int parse_kernel(RtParser *s, RtInstr *in) {
  if (s->nf < 3) return rt_prog_err(s, "expected 'kernel NAME <<<GRID,BLOCK,LOCAL>>> ARG...'");
  if (!rt_prog_is_ident(s->f[1])) return rt_prog_err(s, "kernel: '%.60s' is not a C identifier", s->f[1]);
  char what0[96];
  snprintf(what0, sizeof what0, "kernel %.60s", s->f[1]);
  if (parse_geom(s, s->f[2], what0, &in->geom)) return -1;
  if (s->nf - 3 > RT_MAX_KARGS)
    return rt_prog_err(s, "kernel %.60s: %d arguments, at most %d", s->f[1], s->nf - 3, RT_MAX_KARGS);
  in->kernel = kernel_index(s, s->f[1], &in->geom);
  if (in->kernel < 0) return -1;
  in->nargs = s->nf - 3;
  if (in->nargs) {
    in->args = calloc((size_t)in->nargs, sizeof *in->args);
    S_ALLOC(in->args);
  }
  for (int a = 0; a < in->nargs; a++) {
    const char *t = s->f[a + 3];
    RtArg *x = &in->args[a];
    char what[128];
    snprintf(what, sizeof what, "kernel %.60s: argument %d", s->f[1], a + 1);
    if (t[0] == '@' || t[0] == '$') {
      x->kind = RT_A_PTR;
      /* without an extent, at least the first element must be inside */
      if (rt_prog_parse_ptr(s, t, what, &x->ptr, &x->bytes) ||
          rt_prog_check_extent(s, what, &x->ptr, x->bytes ? x->bytes : 4))
        return -1;
    } else if (!strncmp(t, "f:", 2)) {
      x->kind = RT_A_F32;
      if (rt_prog_parse_float(t + 2, &x->f)) return rt_prog_err(s, "%s: '%.60s' is not a finite float", what, t);
    } else if (!strncmp(t, "i:", 2)) {
      x->kind = RT_A_I64;
      if (rt_prog_parse_int(t + 2, INT64_MIN, INT64_MAX, &x->i))
        return rt_prog_err(s, "%s: '%.60s' is not a 64-bit integer", what, t);
    } else if (!strncmp(t, "s:", 2)) {
      x->kind = RT_A_SCALAR;
      x->scalar = -1;
      for (int k = 0; k < RT_NSCALAR; k++)
        if (!strcmp(t + 2, rt_scalar_name(k))) x->scalar = k;
      if (x->scalar < 0)
        return rt_prog_err(s,
                           "%s: unknown runtime scalar '%.60s' (lr, beta1, beta2, eps, wd, bc1, bc2, clip, tokscale, "
                           "seed, rngctr, train)",
                           what, t);
      if (x->scalar == RT_S_CLIP && (s->cur_blk != RT_BLK_OPTIMIZER || !s->grad_norm_line))
        return rt_prog_err(s, "%s: s:clip is set by grad_norm: use it in the optimizer block after grad_norm", what);
      if (x->scalar == RT_S_TOKSCALE && !s->p->masked)
        return rt_prog_err(s, "%s: s:tokscale weighs a masked loss's rows: the vocab line has no ignore_index", what);
    } else {
      return rt_prog_err(s, "%s: '%.60s' (expected @OFF[:BYTES], $OFF[:BYTES], f:FLOAT, i:INT or s:NAME)", what, t);
    }
  }
  return 0;
}

/* grad_norm KERNEL <<<GRID,BLOCK,LOCAL>>> @PARTIALS:BYTES @TABLE:BYTES: KERNEL(grads, partials,
 * table), one launch, writes GRID partial sums of squares, GRID / RUNS for each of the RUNS rows
 * of the table ppr writes first (rt_exec.c: the owned gradients' offsets in units of PP_NORM_UNIT
 * floats and their lengths, i32 pairs, zero past the last); there are at least as many rows as
 * params. */
static int parse_grad_norm(RtParser *s, RtInstr *in) {
  static const char *const form = "grad_norm KERNEL <<<GRID,BLOCK,LOCAL>>> @PARTIALS:BYTES @TABLE:BYTES";
  if (rt_prog_want_nf(s, 5, form)) return -1;
  if (!rt_prog_is_ident(s->f[1])) return rt_prog_err(s, "grad_norm: '%.60s' is not a C identifier", s->f[1]);
  if (parse_geom(s, s->f[2], "grad_norm", &in->geom)) return -1;
  in->kernel = kernel_index(s, s->f[1], &in->geom);
  int64_t partials, table;
  if (in->kernel < 0 || rt_prog_parse_ptr(s, s->f[3], "grad_norm: partials", &in->p[0], &partials) ||
      rt_prog_parse_ptr(s, s->f[4], "grad_norm: table", &in->p[1], &table))
    return -1;
  in->bytes = table / 8;
  if (in->bytes < (s->p->nparams ? s->p->nparams : 1) || in->geom.grid % in->bytes)
    return rt_prog_err(s,
                       "grad_norm: a table of %lld bytes holds %lld rows: expected a row (8 bytes) a param (%d) "
                       "and GRID (%lld) a multiple of the rows",
                       (long long)table, (long long)in->bytes, s->p->nparams, (long long)in->geom.grid);
  if (partials < 4 * in->geom.grid)
    return rt_prog_err(s, "grad_norm: the partials hold %lld bytes; GRID %lld partial sums need %lld",
                       (long long)partials, (long long)in->geom.grid, (long long)(4 * in->geom.grid));
  return rt_prog_check_extent(s, "grad_norm: partials", &in->p[0], partials) ||
         rt_prog_check_extent(s, "grad_norm: table", &in->p[1], table);
}

/* At the optimizer block's end: every shared param's gradient is inside one allreduce_tied. */
int rt_prog_check_shared_sums(RtParser *s) {
  const RtProg *g = s->p;
  const RtBlock *o = &g->blk[RT_BLK_OPTIMIZER];
  int64_t shift = g->reg[RT_REG_GRADS].base - g->reg[RT_REG_PARAMS].base;
  for (int i = 0; i < g->nparams; i++) {
    const RtParam *q = &g->params[i];
    if (!q->shared) continue;
    int64_t a = q->off + shift, e = a + 4 * q->numel;
    int covered = 0;
    for (int n = 0; n < o->n && !covered; n++)
      covered =
          o->ins[n].kind == RT_I_ALLREDUCE_TIED && o->ins[n].p[0].off <= a && o->ins[n].p[0].off + o->ins[n].bytes >= e;
    if (!covered)
      return rt_prog_err(s,
                         "param %.200s (line %d) is shared, but no allreduce_tied of the optimizer block sums its "
                         "gradient (@%lld, %lld bytes)",
                         q->name, q->line, (long long)a, (long long)(e - a));
  }
  return 0;
}

/* allreduce tp|tp/R|dp sum|max OPERAND BYTES */
static int parse_allreduce(RtParser *s, RtInstr *in) {
  const RtProg *g = s->p;
  static const char *const form = "allreduce tp|tp/R|dp sum|max OPERAND BYTES [f32|bf16]";
  if (s->nf != 6 && rt_prog_want_nf(s, 5, form)) return -1;
  int dt = s->nf == 6 ? pp_dtype_parse(s->f[5]) : PP_F32;
  if (dt != PP_F32 && dt != PP_BF16) return rt_prog_err(s, "allreduce: type '%.60s' (expected f32 or bf16)", s->f[5]);
  in->dt[0] = (PpDType)dt;
  const char *gr = s->f[1];
  if (!strcmp(gr, "tp")) {
    in->group = RT_G_TP;
  } else if (!strcmp(gr, "dp")) {
    in->group = RT_G_DP;
  } else if (!strncmp(gr, "tp/", 3)) {
    int64_t r;
    if (rt_prog_parse_int(gr + 3, 1, PP_MAX_RANKS, &r))
      return rt_prog_err(s, "allreduce: group '%.60s': R in tp/R is not an integer in [1, %d]", gr, PP_MAX_RANKS);
    if (g->tp % r)
      return rt_prog_err(s, "allreduce: group tp/%lld: %lld does not divide tp %d", (long long)r, (long long)r, g->tp);
    in->group = RT_G_TP_SUB;
    in->sub = (int)r;
  } else {
    return rt_prog_err(s, "allreduce: unknown group '%.60s' (expected tp, tp/R or dp)", gr);
  }
  if (!strcmp(s->f[2], "sum")) in->op = RT_OP_SUM;
  else if (!strcmp(s->f[2], "max")) in->op = RT_OP_MAX;
  else return rt_prog_err(s, "allreduce: unknown op '%.60s' (expected sum or max)", s->f[2]);
  if (rt_prog_parse_ptr(s, s->f[3], "allreduce", &in->p[0], NULL) ||
      rt_prog_want_int(s, 4, "allreduce: bytes", 2, (int64_t)4 * INT32_MAX, &in->bytes))
    return -1;
  if (in->bytes % pp_dtype_bytes(dt))
    return rt_prog_err(s, "allreduce: %lld bytes is not a whole number of %s elements", (long long)in->bytes,
                       pp_dtype_name(dt));
  if (rt_prog_check_extent(s, "allreduce", &in->p[0], in->bytes)) return -1;
  const RtRegion *grr = &g->reg[RT_REG_GRADS];
  if (s->cur_blk == RT_BLK_OPTIMIZER && s->grad_norm_line && !in->p[0].in_slot &&
      in->p[0].off < grr->base + grr->bytes && grr->base < in->p[0].off + in->bytes)
    return rt_prog_err(s, "allreduce of gradients after grad_norm (line %d): the norm needs the summed gradients",
                       s->grad_norm_line);
  return 0;
}

/* At the optimizer block's end, with dp·cp > 1: every param's gradient is inside one `allreduce dp
 * sum` (before grad_norm), or the replicas (and context-parallel ranks) would drift apart. With
 * ZeRO-1: inside one `reduce_scatter dp` whose part is this rank's block of it, and the param's
 * values inside the whole of one `allgather dp`. */
int rt_prog_check_dp_sums(RtParser *s) {
  const RtProg *g = s->p;
  if (g->dp * g->cp == 1) return 0;
  const RtBlock *o = &g->blk[RT_BLK_OPTIMIZER];
  int64_t shift = g->reg[RT_REG_GRADS].base - g->reg[RT_REG_PARAMS].base;
  for (int i = 0; i < g->nparams; i++) {
    const RtParam *q = &g->params[i];
    int64_t a = q->off + shift, e = a + 4 * q->numel;
    int covered = 0, gathered = 0;
    for (int n = 0; n < o->n && !covered; n++) {
      const RtInstr *x = &o->ins[n];
      covered = x->kind == RT_I_ALLREDUCE && x->group == RT_G_DP && x->op == RT_OP_SUM && x->p[0].off <= a &&
                x->p[0].off + x->bytes >= e;
      if (g->zero && x->kind == RT_I_REDUCE_SCATTER && x->group == RT_G_DP && x->p[0].off <= a &&
          x->p[0].off + x->bytes * g->zero >= e) {
        if (x->p[1].off != x->p[0].off + x->bytes * g->zrank)
          return rt_prog_err(s,
                             "reduce_scatter dp (line %d): this rank's part is @%lld, not its block @%lld of the whole",
                             x->line, (long long)x->p[1].off, (long long)(x->p[0].off + x->bytes * g->zrank));
        covered = 1;
      }
    }
    for (int n = 0; n < o->n && g->zero && !gathered; n++) {
      const RtInstr *x = &o->ins[n];
      gathered = x->kind == RT_I_ALLGATHER && x->group == RT_G_DP && x->p[1].off <= q->off &&
                 x->p[1].off + x->bytes * g->zero >= q->off + 4 * q->numel;
    }
    if (covered && g->zero && !gathered)
      return rt_prog_err(
          s, "param %.200s (line %d): zero, but no 'allgather dp' of the optimizer block gathers its values", q->name,
          q->line);
    if (!covered && g->zero)
      return rt_prog_err(s,
                         "param %.200s (line %d): zero, but no 'reduce_scatter dp' of the optimizer block sums its "
                         "gradient (@%lld, %lld bytes) over the replicas",
                         q->name, q->line, (long long)a, (long long)(e - a));
    if (!covered)
      return rt_prog_err(s,
                         "param %.200s (line %d): dp %d%s, but no 'allreduce dp sum' of the optimizer block sums its "
                         "gradient (@%lld, %lld bytes) over the replicas",
                         q->name, q->line, g->dp, g->cp > 1 ? " with cp > 1" : "", (long long)a, (long long)(e - a));
  }
  return 0;
}

int rt_prog_instr_line(RtParser *s) {
  RtProg *g = s->p;
  RtBlock *bk = rt_prog_block_w(g, s->cur_chunk, s->cur_blk);
  if (rt_prog_grow(s, (void **)&bk->ins, &s->cap_ins, bk->n + 1, sizeof *bk->ins)) return -1;
  RtInstr *in = &bk->ins[bk->n];
  memset(in, 0, sizeof *in);
  in->line = s->line;
  const char *op = s->f[0];
  int rc;
  if (strcmp(op, "kernel") && rt_prog_epi_pending(s, op)) return -1;
  if (!strcmp(op, "batch")) {
    in->kind = RT_I_BATCH;
    rc = only_in(s, op, 1, 0) || rt_prog_want_nf(s, 3, "batch TOKENS LABELS");
    int64_t bytes = (int64_t)g->micro_batch * rt_prog_seq_local(g) * 4; /* the rank's positions */
    for (int i = 0; i < 2 && !rc; i++) {
      const char *what = i ? "batch: labels" : "batch: tokens";
      if (!strcmp(s->f[i + 1], "-")) continue;
      rc = rt_prog_parse_ptr(s, s->f[i + 1], what, &in->p[i], NULL) || rt_prog_check_extent(s, what, &in->p[i], bytes);
    }
  } else if (!strcmp(op, "zero")) {
    in->kind = RT_I_ZERO;
    rc = rt_prog_want_nf(s, 3, "zero DST BYTES") || rt_prog_parse_ptr(s, s->f[1], "zero", &in->p[0], NULL) ||
         rt_prog_want_int(s, 2, "zero: bytes", 1, PP_MAX_ARENA, &in->bytes) ||
         rt_prog_check_extent(s, "zero", &in->p[0], in->bytes);
  } else if (!strcmp(op, "kernel")) {
    in->kind = RT_I_KERNEL;
    rc = parse_kernel(s, in);
    if (!rc && bk->n && bk->ins[bk->n - 1].kind == RT_I_GEMM && bk->ins[bk->n - 1].epi != PP_EPI_NONE)
      rc = check_epilogue(s, &bk->ins[bk->n - 1], in);
  } else if (!strcmp(op, "gemm")) {
    in->kind = RT_I_GEMM;
    rc = parse_gemm(s, in);
  } else if (!strcmp(op, "seed")) {
    in->kind = RT_I_SEED;
    rc = only_in(s, op, 1, 0) || rt_prog_want_nf(s, 3, "seed DST VALUE") ||
         rt_prog_parse_ptr(s, s->f[1], "seed", &in->p[0], NULL) || rt_prog_check_extent(s, "seed", &in->p[0], 4);
    if (!rc && rt_prog_parse_float(s->f[2], &in->value))
      rc = rt_prog_err(s, "seed: VALUE '%.60s' is not a finite number", s->f[2]);
  } else if (!strcmp(op, "loss")) {
    in->kind = RT_I_LOSS;
    rc = only_in(s, op, 1, 0) || rt_prog_want_nf(s, 2, "loss SRC") ||
         rt_prog_parse_ptr(s, s->f[1], "loss", &in->p[0], NULL) || rt_prog_check_extent(s, "loss", &in->p[0], 4);
    if (!rc && g->generate)
      rc = rt_prog_err(s, "loss in a generation program (schedule %s): its forward ends with logits", PP_SCHED_FORWARD);
  } else if (!strcmp(op, "logits")) {
    in->kind = RT_I_LOGITS;
    rc = parse_logits(s, in);
  } else if (!strcmp(op, "grad_norm")) {
    in->kind = RT_I_GRAD_NORM;
    rc = only_in(s, op, 0, 1) || parse_grad_norm(s, in);
    if (!rc && s->grad_norm_line)
      rc = rt_prog_err(s, "a second grad_norm (the first is on line %d)", s->grad_norm_line);
    if (!rc) s->grad_norm_line = s->line;
  } else if (!strcmp(op, "allreduce_tied")) {
    in->kind = RT_I_ALLREDUCE_TIED;
    rc = only_in(s, op, 0, 1) || rt_prog_want_nf(s, 3, "allreduce_tied @OFF BYTES") ||
         rt_prog_parse_ptr(s, s->f[1], "allreduce_tied", &in->p[0], NULL) ||
         rt_prog_want_int(s, 2, "allreduce_tied: bytes", 4, (int64_t)4 * INT32_MAX, &in->bytes) ||
         rt_prog_check_extent(s, "allreduce_tied", &in->p[0], in->bytes);
    const RtRegion *gr = &g->reg[RT_REG_GRADS];
    if (!rc && in->bytes % 4)
      rc = rt_prog_err(s, "allreduce_tied: %lld bytes is not a whole number of floats", (long long)in->bytes);
    if (!rc && (in->p[0].off < gr->base || in->p[0].off + in->bytes > gr->base + gr->bytes))
      rc = rt_prog_err(s, "allreduce_tied: @%lld + %lld bytes is not inside the grads region [%lld, %lld)",
                       (long long)in->p[0].off, (long long)in->bytes, (long long)gr->base,
                       (long long)(gr->base + gr->bytes));
    if (!rc && s->grad_norm_line)
      rc = rt_prog_err(s, "allreduce_tied after grad_norm (line %d): the norm needs the summed gradients",
                       s->grad_norm_line);
    if (!rc && !g->nshared) rc = rt_prog_err(s, "allreduce_tied, but no param is marked shared");
  } else if (!strcmp(op, "allreduce")) {
    in->kind = RT_I_ALLREDUCE;
    rc = parse_allreduce(s, in);
  } else if (!strcmp(op, "allgather") || !strcmp(op, "reduce_scatter")) {
    int gather = op[0] == 'a';
    const char *form =
        gather ? "allgather tp|cp|dp PART WHOLE BYTES [bf16]" : "reduce_scatter tp|cp|dp WHOLE PART BYTES";
    in->kind = gather ? RT_I_ALLGATHER : RT_I_REDUCE_SCATTER;
    int dp = s->nf > 1 && !strcmp(s->f[1], "dp"); /* ZeRO-1's, in the optimizer block */
    in->group = dp ? RT_G_DP : s->nf > 1 && !strcmp(s->f[1], "cp") ? RT_G_CP : RT_G_TP;
    int n = in->group == RT_G_CP ? g->cp : in->group == RT_G_DP ? g->dp * g->cp : g->tp; /* the group's size */
    int dt = gather && s->nf == 6 ? pp_dtype_parse(s->f[5]) : PP_F32;
    rc = only_in(s, op, !dp, dp) || ((!gather || s->nf != 6) && rt_prog_want_nf(s, 5, form)) ||
         (in->group == RT_G_TP && rt_prog_want_word(s, 1, "tp", form)) ||
         rt_prog_parse_ptr(s, s->f[2], op, &in->p[0], NULL) || rt_prog_parse_ptr(s, s->f[3], op, &in->p[1], NULL) ||
         rt_prog_want_int(s, 4, "bytes", 2, (int64_t)4 * INT32_MAX / (n > 0 ? n : 1), &in->bytes);
    if (!rc && in->group == RT_G_CP && n < 2)
      rc = rt_prog_err(s, "%s cp, but the mesh has cp %d: a group of one rank", op, n);
    if (!rc && dp && !g->zero) rc = rt_prog_err(s, "%s dp in a listing without 'zero' (ZeRO-1's collectives)", op);
    if (!rc && (dt != PP_F32 && dt != PP_BF16))
      rc = rt_prog_err(s, "%s: element type '%.60s' (expected bf16, or none for f32)", op, s->f[5]);
    in->dt[0] = dt < 0 ? PP_F32 : (PpDType)dt;
    if (!rc && in->bytes % pp_dtype_bytes(in->dt[0]))
      rc = rt_prog_err(s, "%s: %lld bytes is not a whole number of %s elements", op, (long long)in->bytes,
                       pp_dtype_name(in->dt[0]));
    if (!rc)
      rc = rt_prog_check_extent(s, op, &in->p[0], gather ? in->bytes : in->bytes * n) ||
           rt_prog_check_extent(s, op, &in->p[1], gather ? in->bytes * n : in->bytes);
  } else if (!strcmp(op, "block") || !strcmp(op, "schedule")) {
    char name[32];
    return rt_prog_err(s, "'%s' inside block %s (line %d): a block ends with 'end'", op,
                       rt_prog_block_label(g, s->cur_chunk, s->cur_blk, name, sizeof name), bk->line);
  } else {
    return rt_prog_err(s,
                       "unknown instruction '%.60s' (expected batch, zero, kernel, gemm, seed, loss, logits, "
                       "allreduce, allreduce_tied, allgather, reduce_scatter or grad_norm)",
                       op);
  }
  if (rc) {
    free(in->args);
    in->args = NULL;
    return -1;
  }
  bk->n++;
  return 0;
}
