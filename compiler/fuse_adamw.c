/* fuse_adamw.c — the optimizer block: the gradients summed where they are partial (a tied
 * parameter's halves: its copies', or its embedding's and head's on this rank; tensor-parallel
 * partial sums, data-parallel replicas), the gradient norm,
 * and AdamW, one kernel over each part of the parameters' regions (mem_param_part: the decayed
 * parameters, the rest), each gradient left zero for the next step (the block is declared
 * PP_OPT_CLEARS_GRADS, and ppr skips that step's zero_grads). */
#include <stdlib.h>

#include "ppc.h"

/* The gradient norm: the sum of squares of each parameter's gradient the rank owns, by one launch
 * of NORM_BLOCKS blocks a parameter: block b sums part b mod NORM_BLOCKS of row b / NORM_BLOCKS of
 * a table ppr writes before it (the owned gradients in memory order, each its offset in the
 * gradients' region in units of PP_NORM_UNIT floats and its element count, i32 pairs; zero rows
 * past the last), into partial b; ppr adds the partials in double, in memory order (grad_norm in
 * the listing). A parameter's partials are the same floats on every mesh that holds it whole. */
#define NORM_BLOCKS 64
static void grad_norm(FuseCtx *c) {
  int64_t P = c->g->nparams ? c->g->nparams : 1;
  Kernel *k = kir_new("sumsq", KM_BLOCK, NORM_BLOCKS * P, 256);
  int x = kir_buf(k, "p0", PP_F32, false), out = kir_buf(k, "p1", PP_F32, true), tab = kir_buf(k, "p2", PP_I32, false);
  int row = kir_let(k, kir_e(k, K_IMUL, kir_e(k, K_IDIV, kir_row(k), kir_i(k, NORM_BLOCKS), 0), kir_i(k, 2), 0));
  int at = kir_let(k, kir_e(k, K_IMUL, kir_ld(k, tab, row), kir_i(k, PP_NORM_UNIT), 0));
  int n = kir_let(k, kir_ld(k, tab, kir_e(k, K_IADD, row, kir_i(k, 1), 0)));
  int part = kir_let(k, kir_e(k, K_IDIV, kir_e(k, K_IADD, n, kir_i(k, NORM_BLOCKS - 1), 0), kir_i(k, NORM_BLOCKS), 0));
  int start = kir_let(k, kir_e(k, K_IMUL, kir_e(k, K_IMOD, kir_row(k), kir_i(k, NORM_BLOCKS), 0), part, 0));
  int left = kir_let(k, kir_e(k, K_ISUB, n, start, 0));
  int j = kir_reduce(k, kir_e(k, K_ISEL, kir_e(k, K_ILT, left, part, 0), left, part));
  int v = kir_let(k, kir_ld(k, x, kir_e(k, K_IADD, at, kir_e(k, K_IADD, start, j, 0), 0)));
  int sum = kir_reduce_end(k, '+', kir_e(k, K_MUL, v, v, 0));
  kir_store(k, out, kir_row(k), '=', sum);
  int64_t numel = 0; /* a block's share of the gradients: a multiply and an add an element */
  for (int i = 0; i < c->g->nparams; i++) numel += ir_shape_numel(&c->g->params[i].shape);
  k->work = 2 * numel / (NORM_BLOCKS * P) + 1;
  Instr *in = fuse_prog_instr(c, I_GRADNORM, -1);
  in->kernel = fuse_kc_register(c, k);
  int partials = fuse_prog_vbuf(c, "norm_partials", BC_SCRATCH, (Shape){2, {P, NORM_BLOCKS}}, PP_F32);
  int runs = fuse_prog_vbuf(c, "norm_runs", BC_SCRATCH, (Shape){2, {P, 2}}, PP_I32);
  in->op[in->nop++] = fuse_prog_ob(partials, 0);
  in->op[in->nop++] = fuse_prog_ob(runs, 0);
}

/* A tied parameter's gradient g (the head's products, summed over the micro-batches) plus its
 * embedding's, e (likewise, in a buffer of its own), a row of the table per block; e left zero. The
 * embedding's gradient has rows only where the step's tokens are: a row of e that is all zero is
 * skipped (g + 0 is g: g is never -0, having been accumulated into +0), so the kernel reads e and
 * touches g in the step's tokens' rows alone. A row with a NaN or an infinity is added. */
static void tied_grad(FuseCtx *c, const IrParam *q, int g, int e) {
  int64_t D = q->shape.d[q->shape.nd - 1], R = ir_shape_numel(&q->shape) / D;
  KCall kc = fuse_kc_block("tied_grad", R, D, -1);
  Kernel *k = kc.k;
  int G = fuse_kc_vbuf(c, &kc, g, true), E = fuse_kc_vbuf(c, &kc, e, true);
  int r = kir_row(k);
  int j = kir_reduce(k, kir_i(k, D));
  int x = kir_let(k, kir_ld(k, E, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, D), 0), j, 0)));
  int mass = kir_reduce_end(k, '+', kir_e(k, K_MAX, x, kir_e(k, K_NEG, x, 0, 0), 0));       /* NaN stays NaN */
  kir_if(k, kir_e(k, K_IEQ, kir_e(k, K_FLT, mass, kir_f(k, 0x1p-149), 0), kir_i(k, 0), 0)); /* not all zero */
  j = kir_tfor(k, kir_i(k, D));
  int at = kir_let(k, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, D), 0), j, 0));
  kir_store(k, G, at, '=', kir_e(k, K_ADD, kir_ld(k, G, at), kir_ld(k, E, at), 0));
  kir_store(k, E, at, '=', kir_f(k, 0));
  kir_end(k);
  kir_end(k);
  k->work = 2 * D;
  fuse_kc_emit(c, &kc);
  c->blk->ins[c->blk->n - 1].why = "the tied gradient: the head's half plus the embedding's";
}

/* Part `which` of the parameters' regions (AdamPart, ppc.h). */
static AdamPart part(FuseCtx *c, int which) {
  static const BufClass cls[5] = {BC_PARAM, BC_GRAD, BC_ADAM_M, BC_ADAM_V, BC_COPY};
  Program *p = c->p;
  AdamPart a = {.n = 0, .vb = {-1, -1, -1, -1, -1}, .decays = false, .svb = {-1, -1, -1, -1, -1}};
  int first[5] = {-1, -1, -1, -1, -1};
  for (int b = 0; b < p->nvb; b++) {
    const VBuf *v = &p->vb[b];
    if (v->view >= 0 || v->tail || v->param < 0 || mem_param_part(p, v->param) != which) continue;
    for (int k = 0; k < 5; k++)
      if (v->cls == cls[k] && first[k] < 0) first[k] = b;
    if (v->cls == BC_PARAM) a.n += mem_param_elems(p, ir_shape_numel(&v->shape));
  }
  if (!a.n) return a;
  a.decays = ir_param_decays(&c->g->params[p->vb[first[0]].param]);
  a.shard = a.n;
  if (mem_zero_ranks(p) > 1) a.shard = mem_zero_shard(p, a.n), a.n = a.shard * mem_zero_ranks(p); /* mem_plan.c */
  for (int k = 0; k < 5; k++) {
    if (first[k] < 0) continue;
    int64_t n = k == 2 || k == 3 ? a.shard : a.n; /* the moments: this rank's shard (all of it without zero) */
    a.vb[k] = fuse_prog_vbuf(c, a.decays ? "decayed" : "undecayed", cls[k], (Shape){1, {n}}, p->vb[first[k]].dtype);
    p->vb[a.vb[k]].view = first[k];
    if (a.shard == a.n || k == 2 || k == 3) continue;
    a.svb[k] = fuse_prog_vbuf(c, "shard", cls[k], (Shape){1, {a.shard}}, p->vb[first[k]].dtype);
    p->vb[a.svb[k]].view = first[k];
  }
  return a;
}

void fuse_adamw_parts(FuseCtx *c, AdamPart parts[2]) {
  for (int which = 0; which < 2; which++) parts[which] = part(c, which);
}

/* The optimizer block: the sums of partial gradients, the gradient norm, then AdamW. */
void fuse_adamw(FuseCtx *c, const AdamPart parts[2]) {
  Program *p = c->p;
  c->blk = &p->opt;
  /* a tied parameter: the head's gradient plus the embedding's, each summed over the micro-batches
   * alone: from the stage holding the other half (a copy there), or from the embedding's own buffer
   * here (fuse_lower.c, param_buffers), left zero for the next step */
  for (int i = 0; i < c->g->nparams; i++) {
    const IrParam *q = &c->g->params[i];
    if (q->shared) {
      Instr *in = fuse_prog_instr(c, I_ALLREDUCE_TIED, -1);
      in->op[in->nop++] = fuse_prog_ob(fuse_prog_grad(c, i), 0);
      in->bytes = ir_shape_numel(&q->shape) * 4;
    }
    if (c->p->emb_vb[i] < 0) continue;
    tied_grad(c, q, fuse_prog_grad(c, i), c->p->emb_vb[i]);
  }
  /* gradients that are partial sums over tensor-parallel ranks */
  for (int i = 0; i < c->g->nparams; i++) {
    const IrParam *q = &c->g->params[i];
    if (!q->grad_reduce) continue;
    char group[16];
    snprintf(group, sizeof group, q->grad_reduce == 1 ? "tp" : "tp/%d", q->shard_rep);
    fuse_prog_allreduce(c, -1, fuse_prog_grad(c, i), ir_shape_numel(&q->shape) * 4, group, "sum",
                        q->grad_reduce == 1 ? "a replicated weight applied to split heads: each rank saw its heads only"
                                            : "a kv head replicated over ranks: each saw its own query heads");
  }
  /* data and context parallelism: every replica's gradients summed (each already carries
   * 1/microbatches; a cp rank's, its share of the micro-batch's tokens); with ZeRO-1 each part's
   * sums reduce-scattered, every rank its shard's */
  bool zero = mem_zero_ranks(p) > 1;
  for (int which = 0; which < 2 && zero; which++) {
    AdamPart a = parts[which];
    if (!a.n) continue;
    Instr *in = fuse_prog_instr(c, I_REDUCE_SCATTER, -1);
    snprintf(in->group, sizeof in->group, "dp");
    in->op[in->nop++] = fuse_prog_ob(a.vb[1], 0);
    in->op[in->nop] = fuse_prog_ob(a.svb[1], 0);
    in->op[in->nop++].zadd = a.shard * 4;
    in->bytes = a.shard * 4;
    in->why = "ZeRO-1: the replicas' gradients summed, each rank its shard";
  }
  if (c->g->cfg.dp * c->g->cfg.cp > 1 && !zero) {
    int first = parts[0].n ? parts[0].vb[1] : parts[1].vb[1]; /* the grads region's start */
    if (first >= 0)
      fuse_prog_allreduce(c, -1, first, -1, "dp", "sum",
                          c->g->cfg.cp > 1
                              ? "data and context parallelism: the replicas' and the sequence parts' gradients"
                              : "data parallelism: the replicas' gradients");
  }
  grad_norm(c);
  for (int which = 0; which < 2; which++) {
    AdamPart a = parts[which];
    if (!a.n) continue;
    /* with ZeRO-1: this rank's shard of the params, grads and copies, and its moments */
    const int *pv = zero ? a.svb : a.vb;
    KCall kc = fuse_kc_flat("adamw", a.shard, -1);
    Kernel *k = kc.k;
    int P = fuse_kc_vbuf(c, &kc, pv[0], true), G = fuse_kc_vbuf(c, &kc, pv[1], true),
        M = fuse_kc_vbuf(c, &kc, a.vb[2], true), V = fuse_kc_vbuf(c, &kc, a.vb[3], true);
    int lr = fuse_kc_scalar(&kc, (Operand){.kind = 's', .s = "lr"});
    int b1 = fuse_kc_scalar(&kc, (Operand){.kind = 's', .s = "beta1"});
    int b2 = fuse_kc_scalar(&kc, (Operand){.kind = 's', .s = "beta2"});
    int eps = fuse_kc_scalar(&kc, (Operand){.kind = 's', .s = "eps"});
    int wd = fuse_kc_scalar(&kc, a.decays ? (Operand){.kind = 's', .s = "wd"} : (Operand){.kind = 'f', .f = 0});
    int bc1 = fuse_kc_scalar(&kc, (Operand){.kind = 's', .s = "bc1"});
    int bc2 = fuse_kc_scalar(&kc, (Operand){.kind = 's', .s = "bc2"});
    int clip = fuse_kc_scalar(&kc, (Operand){.kind = 's', .s = "clip"});
    int r = kir_row(k);
    int g = kir_let(k, kir_e(k, K_MUL, kir_ld(k, G, r), clip, 0));
    int m = kir_let(k, kir_e(k, K_ADD, kir_e(k, K_MUL, b1, kir_ld(k, M, r), 0),
                             kir_e(k, K_MUL, kir_e(k, K_SUB, kir_f(k, 1), b1, 0), g, 0), 0));
    int v = kir_let(k, kir_e(k, K_ADD, kir_e(k, K_MUL, b2, kir_ld(k, V, r), 0),
                             kir_e(k, K_MUL, kir_e(k, K_SUB, kir_f(k, 1), b2, 0), kir_e(k, K_MUL, g, g, 0), 0), 0));
    kir_store(k, G, r, '=', kir_f(k, 0)); /* the next step's gradient starts from zero */
    kir_store(k, M, r, '=', m);
    kir_store(k, V, r, '=', v);
    int mh = kir_e(k, K_DIV, m, bc1, 0), vh = kir_e(k, K_DIV, v, bc2, 0);
    int pd =
        kir_let(k, kir_e(k, K_MUL, kir_ld(k, P, r), kir_e(k, K_SUB, kir_f(k, 1), kir_e(k, K_MUL, lr, wd, 0), 0), 0));
    int np = kir_let(
        k,
        kir_e(k, K_SUB, pd,
              kir_e(k, K_MUL, lr, kir_e(k, K_DIV, mh, kir_e(k, K_ADD, kir_e(k, K_SQRT, vh, 0, 0), eps, 0), 0), 0), 0));
    kir_store(k, P, r, '=', np);
    int C = a.vb[4] >= 0 ? fuse_kc_vbuf(c, &kc, pv[4], true) : -1;
    if (C >= 0) kir_store(k, C, r, '=', np); /* the working copies */
    k->work = 12;
    if (zero) {
      kc.ops[P].zadd = kc.ops[G].zadd = a.shard * 4;
      if (C >= 0) kc.ops[C].zadd = a.shard * pp_dtype_bytes(p->vb[a.vb[4]].dtype);
    }
    fuse_kc_emit(c, &kc);
    /* ZeRO-1: every rank's updated shard to every rank: the f32 weights (what --save reads, and the
     * forward in f32) and the working copies where there are */
    for (int k2 = 0; k2 < 5 && zero; k2 += 4) {
      if (a.vb[k2] < 0) continue;
      Instr *in = fuse_prog_instr(c, I_ALLGATHER, -1);
      snprintf(in->group, sizeof in->group, "dp");
      in->op[in->nop] = fuse_prog_ob(a.svb[k2], 0);
      in->op[in->nop++].zadd = p->vb[a.svb[k2]].bytes;
      in->op[in->nop++] = fuse_prog_ob(a.vb[k2], 0);
      in->bytes = p->vb[a.svb[k2]].bytes;
      in->why = k2 ? "ZeRO-1: the working copies of every rank's shard" : "ZeRO-1: the weights of every rank's shard";
    }
  }
  /* every gradient zeroed above, and the padding between them; with ZeRO-1 the rank's shard alone */
  p->opt_clears_grads = !zero;
}

/* The refresh block: each parameter's working copy (--precision bf16) from its f32 value, rounded
 * to nearest even. AdamW writes the copies as it updates the values; ppr runs this block whenever
 * the values were set from outside (initial weights, a checkpoint). Empty in fp32. */
void fuse_adamw_refresh(FuseCtx *c, const AdamPart parts[2]) {
  Program *p = c->p;
  c->blk = &p->refresh;
  for (int which = 0; which < 2; which++) {
    AdamPart a = parts[which];
    if (!a.n || a.vb[4] < 0) continue;
    KCall kc = fuse_kc_flat("refresh_copy", a.n, -1);
    int r = kir_row(kc.k);
    int src = fuse_kc_vbuf(c, &kc, a.vb[0], false);
    kir_store(kc.k, fuse_kc_vbuf(c, &kc, a.vb[4], true), r, '=', kir_ld(kc.k, src, r));
    kc.k->work = 1;
    fuse_kc_emit(c, &kc);
  }
}
