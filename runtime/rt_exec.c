/* rt_exec.c - the executor: runs a rank's schedule, block by block, instruction by instruction, through the device
 * interface (rt_dev.h) and the transport (rt_comm.h). */
#include "rt_comm.h"
#include "rt_dev.h"
#include "rt_prof.h"
#include "rt_exec.h"
#include "rt_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp_limits.h"

/* A run of gradients: n floats at the grads region's offset off (params region offsets). */
typedef struct {
  int64_t off, n;
} RtRun;

struct RtExec {
  const RtProg *p;
  RtDev *dev;
  RtComm *comm;    /* NULL: one rank */
  RtProf *prof;    /* PPR_PROFILE, --trace */
  int32_t *batch;  /* host copy of a micro-batch: tokens, then labels */
  float *partials; /* host copy of the grad_norm partial sums */
  RtRun *runs;     /* grad_norm's: the owned params' gradients, in memory order */
  int nruns;
  int32_t *norm_tab;          /* grad_norm's table of the runs (norm_table), as the device gets it */
  int64_t norm_rows;          /* its rows: the listing's RUNS */
  double wall_ms, compute_ms; /* the last step's, while tracing */
  int loss_chunk;             /* the chunk whose loss counts: the last virtual stage's, on tp_rank 0; else -1 */
  int stale;                  /* the working copies (refresh block) are older than the values */
  int grads_zero;             /* the grads region is zero: the last step's optimizer block cleared it */
  /* receives posted ahead (overlap): op j of entry e (index 2e + j) is posted right after entry
   * early[2e + j] (-1: at the step's start), or at its entry (-2); its handle, -1 when not posted;
   * order: the indices posted ahead, by early[] (a step posts them in this order) */
  int *early, *handle, *order;
  int norder;
  /* ZeRO-1: a region's parts gathered whole on the host (rt_exec_zero_gather), read by
   * rt_exec_read_param until rt_exec_zero_release; zregion -1: none */
  int zregion;
  float *zhost[2];
};

/* One step's state. */
typedef struct {
  RtExec *x;
  const RtData *d;
  int64_t step;
  const RtHyper *h;
  float scal[RT_NSCALAR];
  double loss, grad_norm;
  int prof;    /* PPR_PROFILE and not the first step */
  int tr;      /* tracing */
  RtHook hook; /* before grad_norm, once per step */
  void *ctx;
  char *err;
  size_t errlen;
  double hook_ms, coll_ms; /* --trace: time in the hook, and in collectives inside OPT */
  int entry;               /* the schedule entry running */
  int next_early;          /* x->order[next_early]: the next receive to post ahead */
  /* the data a batch instruction reads: local micro-batch mb of replica d is micro-batch
   * m0 + d * (M / dp) + mb of data_M at data_step (rt_data_batch); the loss values are divided by
   * loss_div. A training step: step, 0, M, M. A validation pass (rt_exec_eval): 0, its first
   * validation micro-batch, K, K; micro-batches at or past limit (K) are not run. */
  int64_t data_step, m0, limit;
  int data_m;
  double loss_div;
  const char *what; /* for the watchdog: NULL in a training step */
  /* rt_exec_next_logits: every replica runs its local micro-batch 0 alone, whose first sequence
   * is tokens[0..ntok) (the rest token 0, labels 0); NULL otherwise */
  const int32_t *tokens;
  int ntok;
} Step;

double rt_now_ms(void) { return rt_util_now_s() * 1e3; }

void rt_exec_set_comm(RtExec *x, RtComm *c) { x->comm = c; }
RtDev *rt_exec_device(RtExec *x) { return x->dev; }
void rt_exec_trace(RtExec *x, double t0_ms) { rt_trace_start(x->prof, t0_ms); }
const RtEvent *rt_exec_events(const RtExec *x, int64_t *n, int *oom) { return rt_trace_events(x->prof, n, oom); }

void rt_exec_step_times(const RtExec *x, double *wall_ms, double *compute_ms) {
  *wall_ms = x->wall_ms;
  *compute_ms = x->compute_ms;
}

/* The device's failure as this call's message; RT_DEVICE_FAILED (this rank alone failed). */
static int dev_failed(RtExec *x, char *err, size_t errlen) {
  if (err && errlen) snprintf(err, errlen, "%s", rt_dev_error(x->dev));
  return RT_DEVICE_FAILED;
}

/* Whether entry en may read or write the buffers of slot `slot`, whatever its chunk (the chunks of
 * a rank share the slots, each with its own layout); slot -1, a boundary at a fixed offset: any
 * block run or message. */
static int touches(const RtEntry *en, int slot) {
  if (en->kind == RT_E_F || en->kind == RT_E_B || en->kind == RT_E_W) return slot < 0 || en->slot == slot;
  if (en->kind != RT_E_COMM) return 0;
  for (int j = 0; j < en->nops; j++)
    if (slot < 0 || en->op[j].slot == slot) return 1;
  return 0;
}

/* When each receive of a training step can be posted: right after the last entry before it that
 * uses its slot (the buffer is then free until the message lands), if that is earlier than the
 * entry before its own. The entries' order is the schedule's, which the start-up check simulates on
 * every rank; a receive posted earlier waits at the same place and blocks nothing, so the order
 * it proves stands. */
static int plan_early(RtExec *x) {
  const RtProg *g = x->p;
  int n = g->nentries;
  const char *env = getenv("PPR_EARLY_RECV");
  int off = env && !strcmp(env, "0"); /* every receive posted at its entry */
  x->early = malloc((size_t)(2 * n + 1) * sizeof *x->early);
  x->handle = malloc((size_t)(2 * n + 1) * sizeof *x->handle);
  x->order = malloc((size_t)(2 * n + 1) * sizeof *x->order);
  if (!x->early || !x->handle || !x->order) return -1;
  for (int e = 0; e < n; e++)
    for (int j = 0; j < 2; j++) {
      const RtEntry *en = &g->sched[e];
      int k = 2 * e + j, after = -2;
      x->handle[k] = -1;
      if (!off && en->kind == RT_E_COMM && j < en->nops && !pp_boundary_is_send(en->op[j].kind)) {
        const RtCommOp *o = &en->op[j];
        int slot = rt_prog_boundary(g, o->chunk, o->kind)->ptr.in_slot ? o->slot : -1;
        after = -1;
        for (int q = e - 1; q >= 0 && after < 0; q--)
          if (touches(&g->sched[q], slot)) after = q;
        if (after == e - 1) after = -2; /* no entry between: posted at its own */
      }
      x->early[k] = after;
    }
  for (int after = -1; after < n; after++) /* by the entry they follow: once, at start-up */
    for (int k = 2 * (after + 1); k < 2 * n; k++)
      if (x->early[k] == after) x->order[x->norder++] = k;
  return 0;
}

/* By offset (then size: a zero-size param before the one at its offset). */
static int run_cmp(const void *a, const void *b) {
  const RtRun *x = a, *y = b;
  return x->off != y->off ? (x->off < y->off ? -1 : 1) : (x->n > y->n) - (x->n < y->n);
}

/* grad_norm's runs: the owned params' gradients (not the copies and replicas) in memory order,
 * each its own partial sums, the same floats on every mesh that holds it whole (a pipeline's
 * stages), whatever else the rank holds. Returns their number. */
static int grad_runs(const RtProg *p, RtRun *runs) {
  int n = 0;
  for (int i = 0; i < p->nparams; i++) {
    if (!p->params[i].owned) continue;
    RtRun r = {p->params[i].off, p->params[i].numel};
    if (!p->zero) {
      runs[n++] = r;
      continue;
    }
    /* ZeRO-1: this rank's summed gradients are its shard of each part: the param's run inside it */
    for (int k = 0; k < p->nzpart; k++) {
      int64_t lo = p->zpart[k].off + 4 * p->zpart[k].shard * p->zrank, hi = lo + 4 * p->zpart[k].shard;
      int64_t a = r.off > lo ? r.off : lo, e = r.off + 4 * r.n < hi ? r.off + 4 * r.n : hi;
      if (a < e) runs[n++] = (RtRun){a, (e - a) / 4};
    }
  }
  qsort(runs, (size_t)n, sizeof *runs, run_cmp);
  return n;
}

/* grad_norm's table: a row for each run, its offset into the gradients' region in units of
 * PP_NORM_UNIT floats and its length, i32 each; zero rows after (no work). */
static int norm_table(RtExec *x, char *err, size_t errlen) {
  const RtProg *p = x->p;
  if (x->nruns > x->norm_rows && x->norm_rows)
    return RT_FAIL("%s: grad_norm's table has %lld rows for %d owned params", p->path, (long long)x->norm_rows,
                   x->nruns);
  for (int i = 0; i < x->nruns && x->norm_rows; i++) {
    int64_t at = x->runs[i].off - p->reg[RT_REG_PARAMS].base, unit = 4 * PP_NORM_UNIT;
    if (at % unit || at / unit > INT32_MAX || x->runs[i].n > INT32_MAX)
      return RT_FAIL("%s: a gradient at byte %lld of %lld floats: grad_norm's table holds offsets in units of %d "
                     "bytes below 2^31 and lengths below 2^31",
                     p->path, (long long)at, (long long)x->runs[i].n, (int)unit);
    x->norm_tab[2 * i] = (int32_t)(at / unit);
    x->norm_tab[2 * i + 1] = (int32_t)x->runs[i].n;
  }
  return 0;
}

int rt_exec_open(const RtProg *p, const char *dir, RtDev *dev, RtExec **out, char *err, size_t errlen) {
  *out = NULL;
  RtExec *x = calloc(1, sizeof *x);
  RT_CHECK_ALLOC(x);
  x->p = p;
  x->dev = dev;
  x->loss_chunk = -1;
  x->zregion = -1;
  x->stale = 1;
  for (int c = 0; c < rt_prog_nchunks(p); c++)
    if (p->chunk[c].vstage == p->pp * rt_prog_nchunks(p) - 1 && p->tp_rank == 0) x->loss_chunk = c;
  x->prof = rt_prof_new(p, dev->desc);
  x->batch = malloc((size_t)p->micro_batch * (size_t)p->seq * 2 * sizeof *x->batch);
  const RtBlock *o = &p->blk[RT_BLK_OPTIMIZER];
  int64_t np = 0;
  for (int i = 0; i < o->n; i++)
    if (o->ins[i].kind == RT_I_GRAD_NORM) np = o->ins[i].geom.grid, x->norm_rows = o->ins[i].bytes;
  x->partials = malloc((size_t)(np ? np : 1) * sizeof *x->partials);
  x->runs = malloc((size_t)(p->nparams ? p->nparams : 1) * sizeof *x->runs);
  x->norm_tab = calloc((size_t)(x->norm_rows ? x->norm_rows : 1) * 2, sizeof *x->norm_tab);
  if (!x->prof || !x->batch || !x->partials || !x->runs || !x->norm_tab) {
    rt_exec_close(x);
    return RT_FAIL("out of memory");
  }
  x->nruns = grad_runs(p, x->runs);
  if (norm_table(x, err, errlen)) {
    rt_exec_close(x);
    return -1;
  }
  if (plan_early(x)) {
    rt_exec_close(x);
    return RT_FAIL("out of memory");
  }
  if (rt_dev_alloc(dev, p->arena) || rt_dev_load(dev, dir, p)) {
    snprintf(err, errlen, "%s", rt_dev_error(dev));
    rt_exec_close(x);
    return -1;
  }
  *out = x;
  return 0;
}

void rt_exec_close(RtExec *x) {
  if (!x) return;
  rt_prof_free(x->prof);
  free(x->early);
  free(x->handle);
  free(x->order);
  free(x->batch);
  free(x->partials);
  free(x->runs);
  free(x->norm_tab);
  rt_exec_zero_release(x);
  free(x);
}

/* Where param values sit in region (params, grads, adam_m, adam_v) relative to the params region. */
static int64_t region_shift(const RtProg *p, int region) { return p->reg[region].base - p->reg[RT_REG_PARAMS].base; }

/* ZeRO-1: the part of the parameters' regions param (at params offset off) lies in; -1: none. */
static int zero_part(const RtProg *p, int64_t off) {
  for (int k = 0; k < p->nzpart; k++)
    if (off >= p->zpart[k].off && off < p->zpart[k].off + 4 * p->zpart[k].n) return k;
  return -1;
}

/* Where this rank's shard of part k of region (grads, adam_m, adam_v) starts in the arena. */
static int64_t zero_shard_at(const RtProg *p, int k, int region) {
  if (region == RT_REG_GRADS) return p->zpart[k].off + region_shift(p, region) + 4 * p->zpart[k].shard * p->zrank;
  return p->zpart[k].moff + (p->reg[region].base - p->reg[RT_REG_ADAM_M].base);
}

int rt_exec_zero_gather(RtExec *x, int region, char *err, size_t errlen) {
  const RtProg *p = x->p;
  rt_exec_zero_release(x);
  if (!p->zero) return 0;
  int rc = 0;
  for (int k = 0; k < p->nzpart; k++) { /* every member's shard, broadcast from it in turn */
    int64_t S = p->zpart[k].shard;
    x->zhost[k] = malloc((size_t)p->zpart[k].n * sizeof(float));
    if (!x->zhost[k]) RT_INTERNAL("out of memory for ZeRO-1's gathered shards"); /* every member must take part */
    if (!rc && (rt_comm_before_host(x->comm, x->dev) ||
                rt_dev_read(x->dev, zero_shard_at(p, k, region), x->zhost[k] + S * p->zrank, S * 4)))
      rc = dev_failed(x, err, errlen);
    for (int r = 0; r < p->zero; r++) rt_comm_dp_bcast(x->comm, x->zhost[k] + S * r, (size_t)S * 4, r);
  }
  x->zregion = region;
  return rc;
}

void rt_exec_zero_release(RtExec *x) {
  for (int k = 0; k < 2; k++) free(x->zhost[k]), x->zhost[k] = NULL;
  x->zregion = -1;
}

int rt_exec_read_param(RtExec *x, int i, int region, float *dst, char *err, size_t errlen) {
  const RtParam *q = &x->p->params[i];
  if (x->p->zero && region != RT_REG_PARAMS) { /* ZeRO-1: from the gathered parts */
    int k = zero_part(x->p, q->off);
    if (k < 0 || x->zregion != region || !x->zhost[k])
      return rt_fail_at(err, errlen, __FILE__, __LINE__, "internal: %s of param %s read without its ZeRO-1 gather",
                        rt_region_name(region), q->name);
    memcpy(dst, x->zhost[k] + (q->off - x->p->zpart[k].off) / 4, (size_t)q->numel * sizeof *dst);
    return 0;
  }
  if (rt_comm_before_host(x->comm, x->dev) ||
      rt_dev_read(x->dev, q->off + region_shift(x->p, region), dst, q->numel * 4))
    return dev_failed(x, err, errlen);
  return 0;
}

int rt_exec_write_param(RtExec *x, int i, const float *src, char *err, size_t errlen) {
  return rt_exec_write_region(x, i, RT_REG_PARAMS, src, err, errlen);
}

int rt_exec_write_region(RtExec *x, int i, int region, const float *src, char *err, size_t errlen) {
  const RtParam *q = &x->p->params[i];
  const RtProg *p = x->p;
  if (p->zero && (region == RT_REG_ADAM_M || region == RT_REG_ADAM_V)) { /* ZeRO-1: this rank's shard of it */
    int k = zero_part(p, q->off);
    if (k < 0)
      return rt_fail_at(err, errlen, __FILE__, __LINE__, "internal: param %s outside the ZeRO-1 parts", q->name);
    int64_t S = p->zpart[k].shard, first = (q->off - p->zpart[k].off) / 4, lo = S * p->zrank;
    int64_t a = first > lo ? first : lo, e = first + q->numel < lo + S ? first + q->numel : lo + S;
    if (a < e && rt_dev_write(x->dev, zero_shard_at(p, k, region) + 4 * (a - lo), src + (a - first), (e - a) * 4))
      return dev_failed(x, err, errlen);
    return 0;
  }
  if (rt_dev_write(x->dev, q->off + region_shift(x->p, region), src, q->numel * 4)) return dev_failed(x, err, errlen);
  if (region == RT_REG_PARAMS) x->stale = 1; /* the working copies: refreshed before the next pass */
  return 0;
}

/* For the watchdog's message: the instruction n of chunk c's block b (for micro-batch mb) runs. */
static void where(Step *s, int c, int b, int n, int mb, const RtInstr *in, const char *what) {
  rt_comm_set_where(s->x->comm, &(RtWhere){.step = s->step,
                                           .entry = s->entry,
                                           .block = b,
                                           .chunk = c,
                                           .instr = n,
                                           .mb = mb,
                                           .line = in->line,
                                           .file = s->x->p->path,
                                           .what = what ? what : s->what});
}

/* The arena offset of an operand: $ operands are relative to the micro-batch's slot. */
static int64_t at(const RtProg *g, const RtPtr *p, int slot) {
  int64_t off = p->off;
  if (p->in_slot) off += g->reg[RT_REG_SLOTS].base + (int64_t)slot * g->reg[RT_REG_SLOTS].bytes;
  return off;
}

/* grad_norm: the sum of squares of the gradients of the params this rank owns, by one launch of
 * the listing's kernel over the runs (grad_runs, the table norm_table) into GRID / RUNS partial
 * sums a run, added in double in memory order; then summed over the world. */
static int grad_norm(Step *s, const RtInstr *in) {
  RtExec *x = s->x;
  const RtProg *p = x->p;
  int64_t per = in->geom.grid / in->bytes, base = at(p, &in->p[0], -1), tab = at(p, &in->p[1], -1);
  if (x->nruns) {
    RtKArg a[3] = {{.kind = RT_KA_PTR, .off = p->reg[RT_REG_GRADS].base},
                   {.kind = RT_KA_PTR, .off = base},
                   {.kind = RT_KA_PTR, .off = tab}};
    if (rt_dev_write(x->dev, tab, x->norm_tab, 8 * in->bytes) || rt_dev_launch(x->dev, in->kernel, &in->geom, 3, a) ||
        rt_comm_before_host(x->comm, x->dev) || rt_dev_read(x->dev, base, x->partials, 4 * per * x->nruns))
      return -1;
  }
  double local = 0;
  for (int64_t i = 0; i < per * x->nruns; i++) local += (double)x->partials[i];
  double c0 = s->tr ? rt_now_ms() : 0;
  s->grad_norm = sqrt(rt_comm_sum(x->comm, local));
  if (s->tr && rt_comm_size(x->comm) > 1) {
    double c1 = rt_now_ms();
    s->coll_ms += c1 - c0;
    rt_trace_add(x->prof, RT_EV_COLL, s->step, c0, c1, "grad_norm sum");
  }
  s->scal[RT_S_CLIP] = 1.0f;
  if (s->h->use_clip) {
    double c = s->h->clip / (s->grad_norm + 1e-6);
    if (c < 1.0) s->scal[RT_S_CLIP] = (float)c;
  }
  return 0;
}

/* An int64 runtime scalar for local micro-batch mb. rngctr numbers the micro-batch globally (as
 * the data does: replica d's local mb is the step's m0 + d·(M/dp) + mb), so that a dropout mask is
 * the same on every mesh. train: a training step's (which has hyper-parameters), not a forward
 * pass's (which names itself for the watchdog). */
static int64_t iscalar(const Step *s, int k, int mb) {
  const RtProg *g = s->x->p;
  if (k == RT_S_SEED) return s->h ? (int64_t)s->h->dropout_seed : 0;
  if (k == RT_S_TRAIN) return s->h && !s->what;
  uint64_t m = (uint64_t)(s->m0 + (int64_t)g->dp_rank * g->local_microbatches + mb);
  return (int64_t)(((uint64_t)s->step << 32) | (m & 0xffffffffu));
}

/* Runs chunk c's block b for micro-batch mb in slot slot: 0; RT_FAILED the hook failed; RT_DEVICE_FAILED the device
 * failed. */
static int run_block(Step *s, int c, int b, int mb, int slot) {
  RtExec *x = s->x;
  RtDev *dev = x->dev;
  const RtProg *g = x->p;
  const RtBlock *bk = rt_prog_block(g, c, b);
  for (int n = 0; n < bk->n; n++) {
    const RtInstr *in = &bk->ins[n];
    double t0 = s->prof ? rt_dev_time_ms(dev) : 0;
    int rc = 0;
    switch (in->kind) {
    case RT_I_BATCH: { /* local micro-batch mb of replica d is the step's d * (M / dp) + mb */
      int64_t bs = (int64_t)g->micro_batch * g->seq;
      int32_t *tok = x->batch, *lab = x->batch + bs;
      if (s->tokens) {
        memset(x->batch, 0, (size_t)(2 * bs) * sizeof *x->batch);
        memcpy(tok, s->tokens, (size_t)s->ntok * sizeof *tok);
      } else
        rt_data_batch(s->d, s->data_step, (int)(s->m0 + (int64_t)g->dp_rank * g->local_microbatches + mb), s->data_m,
                      g->micro_batch, g->seq, in->p[0].present ? tok : NULL, in->p[1].present ? lab : NULL);
      if (g->cp > 1) { /* context parallelism: the rank's positions of each row, [B, seq/cp] */
        int64_t sl = g->seq / g->cp, B = g->micro_batch;
        for (int64_t r = 0; r < 2 * B; r++) /* tokens then labels, row by row, in place */
          memmove(x->batch + r * sl, x->batch + r * g->seq + g->cp_rank * sl, (size_t)sl * sizeof *x->batch);
        bs = B * sl;
        tok = x->batch, lab = x->batch + bs;
      }
      where(s, c, b, n, mb, in, NULL);
      rc = rt_comm_before_host(x->comm, dev); /* with NCCL: the queue's messages, watched */
      if (!rc && in->p[0].present) rc = rt_dev_write(dev, at(g, &in->p[0], slot), tok, bs * 4);
      if (!rc && in->p[1].present) rc = rt_dev_write(dev, at(g, &in->p[1], slot), lab, bs * 4);
      break;
    }
    case RT_I_ZERO: rc = rt_dev_zero(dev, at(g, &in->p[0], slot), in->bytes); break;
    case RT_I_KERNEL: {
      RtKArg a[RT_MAX_KARGS];
      for (int k = 0; k < in->nargs; k++) {
        const RtArg *r = &in->args[k];
        switch (r->kind) {
        case RT_A_PTR: a[k] = (RtKArg){.kind = RT_KA_PTR, .off = at(g, &r->ptr, slot)}; break;
        case RT_A_F32: a[k] = (RtKArg){.kind = RT_KA_F32, .f = r->f}; break;
        case RT_A_I64: a[k] = (RtKArg){.kind = RT_KA_I64, .i = r->i}; break;
        case RT_A_SCALAR:
          if (r->scalar < RT_S_SEED) a[k] = (RtKArg){.kind = RT_KA_F32, .f = s->scal[r->scalar]};
          else a[k] = (RtKArg){.kind = RT_KA_I64, .i = iscalar(s, r->scalar, mb)};
          break;
        }
      }
      rc = rt_dev_launch(dev, in->kernel, &in->geom, in->nargs, a);
      break;
    }
    case RT_I_GEMM: {
      RtGemm m = {in->ta,
                  in->tb,
                  in->m,
                  in->n,
                  in->k,
                  in->batch,
                  in->alpha,
                  in->beta,
                  at(g, &in->p[0], slot),
                  at(g, &in->p[1], slot),
                  at(g, &in->p[2], slot),
                  in->lda,
                  in->ldb,
                  in->ldc,
                  in->sa,
                  in->sb,
                  in->sc,
                  {in->dt[0], in->dt[1], in->dt[2]},
                  in->tri};
      int fused = 0;
      if (in->epi != PP_EPI_NONE) { /* the parser put its kernel next */
        const RtInstr *k = &bk->ins[n + 1];
        int aux = pp_epi_aux[in->epi], bias = pp_epi_bias[in->epi];
        RtEpi e = {in->epi, at(g, &k->args[pp_epi_d[in->epi]].ptr, slot),
                   aux >= 0 ? at(g, &k->args[aux].ptr, slot) : -1,
                   bias >= 0 && bias < k->nargs ? at(g, &k->args[bias].ptr, slot) : -1};
        fused = rt_dev_gemm_epi(dev, &m, &e);
      }
      if (fused > 0) n++; /* the kernel ran inside the GEMM */
      else rc = fused < 0 ? -1 : rt_dev_gemm(dev, &m);
      break;
    }
    case RT_I_SEED:
      where(s, c, b, n, mb, in, NULL);
      rc = rt_comm_before_host(x->comm, dev) || rt_dev_write(dev, at(g, &in->p[0], slot), &in->value, sizeof in->value);
      break;
    case RT_I_LOGITS: /* where they are: read after the pass (rt_exec_next_logits) */
      /* a generation pass ends the block here: the loss after it reads labels the pass has not
       * got, and a fused cross-entropy writes its gradient over the logits */
      if (s->tokens) return 0;
      break;
    case RT_I_LOSS: {
      float v = 0;
      where(s, c, b, n, mb, in, NULL);
      rc = rt_comm_before_host(x->comm, dev) || rt_dev_read(dev, at(g, &in->p[0], slot), &v, sizeof v);
      if (c == x->loss_chunk) s->loss += (double)v / s->loss_div;
      break;
    }
    case RT_I_ALLREDUCE_TIED:
    case RT_I_ALLREDUCE: {
      double c0 = s->tr ? rt_dev_time_ms(dev) : 0;
      int64_t off = at(g, &in->p[0], slot);
      where(s, c, b, n, mb, in, NULL);
      if (in->kind == RT_I_ALLREDUCE_TIED) rt_comm_allreduce_emb(x->comm, dev, off, in->bytes / 4);
      else
        rt_comm_allreduce(x->comm, dev, in->group, in->sub, in->op, off, in->bytes / pp_dtype_bytes(in->dt[0]),
                          in->dt[0]);
      if (s->tr) {
        double c1 = rt_now_ms();
        if (b == RT_BLK_OPTIMIZER) s->coll_ms += c1 - c0;
        const char *op = in->op == RT_OP_MAX ? "max" : "sum";
        if (in->kind == RT_I_ALLREDUCE_TIED) rt_trace_add(x->prof, RT_EV_COLL, s->step, c0, c1, "allreduce_tied");
        else if (in->group == RT_G_TP_SUB)
          rt_trace_add(x->prof, RT_EV_COLL, s->step, c0, c1, "allreduce tp/%d %s", in->sub, op);
        else
          rt_trace_add(x->prof, RT_EV_COLL, s->step, c0, c1, "allreduce %s %s", in->group == RT_G_DP ? "dp" : "tp", op);
      }
      break;
    }
    case RT_I_ALLGATHER:
    case RT_I_REDUCE_SCATTER: {
      double c0 = s->tr ? rt_dev_time_ms(dev) : 0;
      int64_t a = at(g, &in->p[0], slot), z = at(g, &in->p[1], slot);
      where(s, c, b, n, mb, in, NULL);
      if (in->kind == RT_I_ALLGATHER)
        rt_comm_seq_gather(x->comm, dev, in->group, a, z, in->bytes / pp_dtype_bytes(in->dt[0]), in->dt[0]);
      else rt_comm_seq_scatter(x->comm, dev, in->group, a, z, in->bytes / 4);
      if (s->tr)
        rt_trace_add(x->prof, RT_EV_COLL, s->step, c0, rt_now_ms(), "%s %s",
                     in->kind == RT_I_ALLGATHER ? "allgather" : "reduce_scatter",
                     in->group == RT_G_CP   ? "cp"
                     : in->group == RT_G_DP ? "dp"
                                            : "tp");
      break;
    }
    case RT_I_GRAD_NORM:
      if (s->hook) { /* --save-grads: the gradients now are the summed, unclipped ones */
        double h0 = s->tr ? rt_dev_time_ms(dev) : 0;
        RtHook hook = s->hook;
        s->hook = NULL;
        if (hook(s->ctx, x, s->err, s->errlen)) return -1;
        if (s->tr) {
          double h1 = rt_now_ms();
          s->hook_ms += h1 - h0;
          rt_trace_add(x->prof, RT_EV_HOOK, s->step, h0, h1, "save-grads");
        }
      }
      where(s, c, b, n, mb, in, "the gradient norm");
      rc = grad_norm(s, in);
      break;
    }
    if (rc) return RT_DEVICE_FAILED;
    if (s->prof) rt_prof_instr(x->prof, c, b, in, rt_dev_time_ms(dev) - t0);
  }
  return 0;
}

/* A forward-only pass (rt_exec_eval) runs a comm entry's forward messages (send_fwd, recv_fwd) of
 * the micro-batches it runs; a training step all of them. */
static int fwd_runs(const Step *s, int mb) {
  const RtProg *g = s->x->p;
  return s->tokens ? mb == 0 : s->m0 + (int64_t)g->dp_rank * g->local_microbatches + mb < s->limit;
}
static int comm_op_runs(const Step *s, const RtCommOp *o) {
  if (!s->what) return 1;
  return (o->kind == PP_SEND_FWD || o->kind == PP_RECV_FWD) && fwd_runs(s, o->mb);
}

/* The message of op o. */
static RtP2p p2p_of(const RtProg *g, const RtCommOp *o) {
  int nch = rt_prog_nchunks(g);
  const RtBoundary *b = rt_prog_boundary(g, o->chunk, o->kind);
  const RtChunk *ch = &g->chunk[o->chunk];
  RtMsg m = rt_boundary_msg(o->kind, o->mb, ch->vstage, ch->prev, ch->next, g->pp, nch);
  return (RtP2p){.send = m.send,
                 .peer = m.peer,
                 .tag = m.tag,
                 .off = at(g, &b->ptr, o->slot),
                 .bytes = b->bytes,
                 .mb = o->mb,
                 .chunk = nch > 1 ? o->chunk : -1};
}

/* A comm entry: post its messages (those comm_op_runs keeps; receives posted ahead are waited
 * for alone), then wait for them. */
static void run_comm(Step *s, const RtEntry *en) {
  rt_comm_set_where(s->x->comm, &(RtWhere){.step = s->step,
                                           .entry = s->entry,
                                           .block = -1,
                                           .chunk = -1,
                                           .instr = -1,
                                           .mb = -1,
                                           .line = en->line,
                                           .file = s->x->p->path,
                                           .what = s->what});
  RtExec *x = s->x;
  const RtProg *g = x->p;
  RtP2p ops[2];
  char name[48] = "";
  size_t k = 0;
  char ename[48] = "";
  size_t q = 0;
  int n = 0, early[2], ne = 0;
  for (int j = 0; j < en->nops; j++) {
    const RtCommOp *o = &en->op[j];
    if (!comm_op_runs(s, o)) continue;
    int h = s->what ? -1 : x->handle[2 * s->entry + j];
    if (h >= 0) { /* posted ahead: waited for below */
      early[ne++] = h;
      x->handle[2 * s->entry + j] = -1;
      if (s->tr && q < sizeof ename)
        q += (size_t)snprintf(ename + q, sizeof ename - q, "%s%s %d", q ? " + " : "", pp_boundary_name(o->kind), o->mb);
      continue;
    }
    int i = n++;
    ops[i] = p2p_of(g, o);
    if (s->tr && k < sizeof name) {
      k += (size_t)snprintf(name + k, sizeof name - k, "%s%s", i ? " + " : "", pp_boundary_name(o->kind));
      if (rt_prog_nchunks(g) > 1 && k < sizeof name) k += (size_t)snprintf(name + k, sizeof name - k, ":%d", o->chunk);
      if (k < sizeof name) k += (size_t)snprintf(name + k, sizeof name - k, " %d", o->mb);
    }
  }
  double t0 = s->tr ? rt_dev_time_ms(x->dev) : 0;
  if (n) rt_comm_p2p_post(x->comm, x->dev, n, ops);
  double t1 = s->tr ? rt_now_ms() : 0;
  if (n) rt_comm_p2p_wait(x->comm, x->dev);
  for (int i = 0; i < ne; i++) rt_comm_recv_wait(x->comm, x->dev, early[i]);
  if (s->tr) {
    double t2 = rt_dev_time_ms(x->dev);
    if (n) rt_trace_add(x->prof, RT_EV_POST, s->step, t0, t1, "%s: post", name);
    if (ne)
      rt_trace_add(x->prof, RT_EV_WAIT, s->step, t1, t2, "%s%s%s (posted ahead): wait", name, n ? " + " : "", ename);
    else if (n) rt_trace_add(x->prof, RT_EV_WAIT, s->step, t1, t2, "%s: wait", name);
  }
}

/* The receives a training step posts right after entry `after` (-1: at its start); called for
 * after = -1, 0, 1, ... in turn, it walks x->order once a step. */
static void post_early(Step *s, int after) {
  RtExec *x = s->x;
  const RtProg *g = x->p;
  if (!x->comm || s->what) return;
  for (; s->next_early < x->norder && x->early[x->order[s->next_early]] == after; s->next_early++) {
    int k = x->order[s->next_early], e = k / 2;
    const RtCommOp *o = &g->sched[e].op[k % 2];
    RtP2p m = p2p_of(g, o);
    double t0 = s->tr ? rt_now_ms() : 0;
    x->handle[k] = rt_comm_recv_early(x->comm, x->dev, &m);
    if (s->tr && x->handle[k] >= 0)
      rt_trace_add(x->prof, RT_EV_POST, s->step, t0, rt_now_ms(), "%s %d: posted ahead (entry %d's)",
                   pp_boundary_name(o->kind), o->mb, e);
  }
}

/* The refresh block (--precision bf16: the parameters' working copies from their values), when
 * the values were set from the host since it last ran; AdamW keeps the copies current itself.
 * 0, or nonzero when the device failed. */
static int refresh(Step *s) {
  RtExec *x = s->x;
  if (!x->stale || !x->p->blk[RT_BLK_REFRESH].present) return 0;
  if (run_block(s, 0, RT_BLK_REFRESH, -1, -1)) return RT_DEVICE_FAILED;
  x->stale = 0;
  return 0;
}

/* A masked loss's row weight for the pass over micro-batches 0 .. M-1 of M at data step `step`:
 * M / (the labels they count), whatever replica or stage reads them, so that the pass's loss is the
 * mean over the counted tokens; 0 when none counts (the loss and gradients are then 0). */
static float tokscale(const RtProg *g, const RtData *d, int64_t step, int M) {
  if (!g->masked) return 0;
  int64_t n = rt_data_count(d, step, 0, M, M, g->micro_batch, g->seq);
  return n > 0 ? (float)((double)M / (double)n) : 0.0f;
}

int rt_exec_step(RtExec *x, const RtData *d, int64_t step, const RtHyper *h, RtHook before_opt, void *ctx, double *loss,
                 double *gnorm, char *err, size_t errlen) {
  const RtProg *g = x->p;
  RtDev *dev = x->dev;
  Step s;
  memset(&s, 0, sizeof s);
  s.x = x;
  s.d = d;
  s.step = step;
  s.h = h;
  s.data_step = step;
  s.data_m = g->microbatches;
  s.limit = g->microbatches;
  s.loss_div = g->microbatches;
  double t = (double)step + 1.0;
  s.scal[RT_S_LR] = (float)h->lr;
  s.scal[RT_S_BETA1] = (float)h->beta1;
  s.scal[RT_S_BETA2] = (float)h->beta2;
  s.scal[RT_S_EPS] = (float)h->eps;
  s.scal[RT_S_WD] = (float)h->wd;
  s.scal[RT_S_BC1] = (float)(1.0 - pow(h->beta1, t));
  s.scal[RT_S_BC2] = (float)(1.0 - pow(h->beta2, t));
  s.scal[RT_S_CLIP] = 1.0f;
  s.scal[RT_S_TOKSCALE] = tokscale(g, d, step, g->microbatches);
  s.grad_norm = NAN;
  s.prof = rt_prof_profiling(x->prof) && step > 0;
  s.tr = rt_trace_on(x->prof);
  s.hook = before_opt;
  s.ctx = ctx;
  s.err = err;
  s.errlen = errlen;
  int timed = s.prof || s.tr;
  double step_t0 = timed ? rt_dev_time_ms(dev) : 0, compute = 0;
  if (refresh(&s)) return dev_failed(x, err, errlen);
  post_early(&s, -1);
  for (int e = 0; e < g->nentries; e++) {
    const RtEntry *en = &g->sched[e];
    double t0 = timed ? rt_dev_time_ms(dev) : 0;
    s.entry = e;
    int rc = 0;
    switch (en->kind) {
    case RT_E_ZERO_GRADS:
      /* skipped after a step whose optimizer block left the gradients zero (clears_grads) */
      if (!x->grads_zero)
        rc = rt_dev_zero(dev, g->reg[RT_REG_GRADS].base, g->reg[RT_REG_GRADS].bytes) ? RT_DEVICE_FAILED : 0;
      x->grads_zero = 0; /* the step's B and W entries write them */
      if (timed) {
        double t1 = rt_dev_time_ms(dev);
        if (s.prof) rt_prof_zero_grads(x->prof, t1 - t0);
        rt_trace_add(x->prof, RT_EV_ZERO, step, t0, t1, "zero_grads");
      }
      break;
    case RT_E_F:
    case RT_E_B:
    case RT_E_W: {
      int blk = en->kind == RT_E_F ? RT_BLK_FORWARD : en->kind == RT_E_B ? RT_BLK_BACKWARD : RT_BLK_WEIGHTS;
      rc = run_block(&s, en->chunk, blk, en->mb, en->slot);
      if (s.tr) {
        double t1 = rt_dev_time_ms(dev);
        compute += t1 - t0;
        int ev = en->kind == RT_E_F ? RT_EV_F : en->kind == RT_E_B ? RT_EV_B : RT_EV_W;
        rt_trace_unit(x->prof, ev, step, t0, t1, en->chunk, en->mb);
      }
      break;
    }
    case RT_E_COMM: run_comm(&s, en); break;
    case RT_E_OPT: {
      if (x->comm) rt_comm_p2p_flush(x->comm); /* the step's sends taken by their peers */
      double inner = s.coll_ms + s.hook_ms;
      rc = run_block(&s, 0, RT_BLK_OPTIMIZER, -1, -1);
      x->grads_zero = !rc && g->opt_clears_grads;
      if (s.tr) {
        double t1 = rt_dev_time_ms(dev);
        compute += (t1 - t0) - (s.coll_ms + s.hook_ms - inner);
        rt_trace_add(x->prof, RT_EV_OPT, step, t0, t1, "OPT");
      }
      break;
    }
    }
    if (rc == RT_DEVICE_FAILED) return dev_failed(x, err, errlen);
    if (rc) return -1;
    post_early(&s, e);
  }
  /* without an OPT entry (a program always has one) the hook still sees the gradients */
  if (s.hook && s.hook(ctx, x, err, errlen)) return -1;
  /* the step ends when its work has run */
  rt_comm_set_where(
      x->comm,
      &(RtWhere){
          .step = step, .entry = -1, .block = -1, .instr = -1, .mb = -1, .what = "the end of the step's queued work"});
  if (rt_comm_wait(x->comm, dev)) return dev_failed(x, err, errlen);
  /* the loss: the last virtual stage's (the last stage's without chunks), summed over its tp_rank 0
   * ranks of every replica (each loss value is divided by the global M already; run_block counted
   * only those of x->loss_chunk); the same everywhere */
  double t0 = s.tr ? rt_now_ms() : 0;
  double mine = s.loss;
  rt_comm_set_where(
      x->comm, &(RtWhere){.step = step, .entry = -1, .block = -1, .instr = -1, .mb = -1, .what = "the step's loss"});
  s.loss = rt_comm_step_sum(x->comm, mine); /* and whether a rank asked to stop (SIGTERM, SIGINT) */
  if (s.tr) {
    double t1 = rt_now_ms();
    if (rt_comm_size(x->comm) > 1) rt_trace_add(x->prof, RT_EV_COLL, step, t0, t1, "loss sum");
    rt_trace_add(x->prof, RT_EV_STEP, step, step_t0, t1, "step %lld", (long long)(step + 1));
    x->wall_ms = t1 - step_t0 - s.hook_ms;
    x->compute_ms = compute;
  }
  if (s.prof) rt_prof_step(x->prof, rt_now_ms() - step_t0);
  *loss = s.loss;
  *gnorm = s.grad_norm;
  return 0;
}

/* One run of a forward-only pass (rt_exec_eval, rt_exec_next_logits): the schedule's F entries of
 * the micro-batches fwd_runs keeps and their forward messages, in schedule order; then every send
 * taken. 0, or RT_DEVICE_FAILED when the device failed. */
static int forward_run(Step *s) {
  const RtProg *g = s->x->p;
  if (refresh(s)) return RT_DEVICE_FAILED;
  for (int e = 0; e < g->nentries; e++) {
    const RtEntry *en = &g->sched[e];
    s->entry = e;
    int rc = 0;
    switch (en->kind) {
    case RT_E_F:
      if (fwd_runs(s, en->mb)) rc = run_block(s, en->chunk, RT_BLK_FORWARD, en->mb, en->slot);
      break;
    case RT_E_COMM: run_comm(s, en); break;
    case RT_E_ZERO_GRADS:
    case RT_E_B:
    case RT_E_W:
    case RT_E_OPT: break;
    }
    if (rc) return RT_DEVICE_FAILED;
  }
  if (s->x->comm) rt_comm_p2p_flush(s->x->comm); /* this run's sends taken, before the next run's */
  return 0;
}

/* The state of a forward-only pass (what names it for the watchdog): no optimizer scalars, no
 * gradient norm; the caller sets where its data comes from. */
static Step forward_step(RtExec *x, int64_t step, const char *what, char *err, size_t errlen) {
  Step s;
  memset(&s, 0, sizeof s);
  s.x = x;
  s.step = step;
  s.scal[RT_S_CLIP] = 1.0f;
  s.grad_norm = NAN;
  s.err = err;
  s.errlen = errlen;
  s.what = what;
  return s;
}

/* After a forward-only pass: its queued work done (what names it for the watchdog). */
static int forward_end(Step *s, const char *what) {
  rt_comm_set_where(s->x->comm,
                    &(RtWhere){.step = s->step, .entry = -1, .block = -1, .instr = -1, .mb = -1, .what = what});
  return rt_comm_wait(s->x->comm, s->x->dev) ? RT_DEVICE_FAILED : 0;
}

/* A validation pass: the schedule's forward entries only, over validation micro-batches 0 .. k-1
 * of d (micro-batch i reads rt_data_batch(d, 0, i, k, ...): the same batches on every mesh and at
 * every evaluation). One run of the schedule takes M (the step's micro-batches) of them: local
 * micro-batch mb of replica r is validation micro-batch m0 + r * (M / dp) + mb, for m0 = 0, M,
 * 2M, ...; those at or past k are skipped, on every rank alike. Each run executes, in schedule
 * order, the F entries and the forward messages (send_fwd, recv_fwd) of the comm entries, each in
 * its slot: no zero_grads, B, W, backward message or OPT, so the gradients, the Adam moments and
 * the params stay as they are (the forward blocks write only slots and scratch).
 *
 * Why this cannot deadlock, for any schedule ppr accepts (chunks too): the training schedule
 * completes (ppr's start-up check runs every rank's comm entries against each other, with
 * rendezvous messages, or with sends that never wait for programs with chunks, where ppr indeed
 * posts each send from a host copy and leaves it in flight). The pass is a subsequence of it: each
 * rank keeps its entries in their order, and drops a message only together with its partner (the
 * backward kinds on both sides; the same skipped micro-batch on the sender and the receiver, whose
 * tags are the training step's). Were some rank stuck, it would wait in an entry for a message its
 * peer has not posted because the peer is stuck earlier in its own order, and so on: the chain
 * closes into a cycle of entries each of which, in the training run, completed only after the next
 * one had (a wait after its partner's post, a post after the entries before it), which the
 * completed training run rules out. Sends that never wait only make this easier: no rank ever
 * waits for a forward message's receiver. */
int rt_exec_eval(RtExec *x, const RtData *d, int64_t step, int k, double *loss, char *err, size_t errlen) {
  const RtProg *g = x->p;
  Step s = forward_step(x, step, "the validation pass", err, errlen);
  s.d = d;
  s.data_m = k;
  s.limit = k;
  s.loss_div = k;
  s.scal[RT_S_TOKSCALE] = tokscale(g, d, 0, k);
  for (s.m0 = 0; s.m0 < k; s.m0 += g->microbatches)
    if (forward_run(&s)) return dev_failed(x, err, errlen);
  if (forward_end(&s, "the end of the validation pass's queued work")) return dev_failed(x, err, errlen);
  /* summed like the step's loss: the last virtual stage's tp_rank 0 ranks of every replica */
  rt_comm_set_where(
      x->comm,
      &(RtWhere){.step = step, .entry = -1, .block = -1, .instr = -1, .mb = -1, .what = "the validation loss"});
  *loss = rt_comm_sum(x->comm, s.loss);
  return 0;
}

int rt_exec_next_logits(RtExec *x, const int32_t *tokens, int n, float *row, char *err, size_t errlen) {
  const RtProg *g = x->p;
  RtDev *dev = x->dev;
  if (n < 1 || n > g->seq) return RT_FAIL("%s: %d tokens for a sequence of %d", g->path, n, g->seq);
  if (g->cp > 1)
    return RT_FAIL("%s: a program of cp %d splits the sequence: it does not generate (compile one without cp)", g->path,
                   g->cp);
  Step s = forward_step(x, -1, "the generation pass", err, errlen);
  s.tokens = tokens;
  s.ntok = n;
  if (forward_run(&s) || forward_end(&s, "the end of the generation pass's queued work"))
    return dev_failed(x, err, errlen);
  /* this rank's columns of the row at position n - 1 of sequence 0: the first replica's, every
   * vocabulary shard once (a head not split over tensor parallelism: tp_rank 0's) */
  const RtLogits *l = &g->logits;
  int64_t vocab = g->vocab, cnt = 0;
  if (l->present && g->dp_rank == 0 && (l->vlocal < vocab || g->tp_rank == 0))
    cnt = l->vstart + l->vlocal <= vocab ? l->vlocal : vocab - l->vstart;
  size_t bytes = 2 * sizeof(int64_t) + (size_t)cnt * sizeof(float);
  unsigned char *mine = malloc(bytes);
  RT_CHECK_ALLOC(mine);
  int64_t head[2] = {l->vstart, cnt};
  memcpy(mine, head, sizeof head);
  int rc = 0;
  if (cnt) {
    int slot = 0;
    for (int e = 0; e < g->nentries; e++)
      if (g->sched[e].kind == RT_E_F && g->sched[e].chunk == l->chunk && g->sched[e].mb == 0) slot = g->sched[e].slot;
    int64_t es = pp_dtype_bytes(l->dtype);
    int64_t off = at(g, &l->ptr, slot) + (int64_t)(n - 1) * l->vlocal * es; /* [B,S,VLOCAL]: sequence 0 */
    rc = rt_dev_read(dev, off, mine + sizeof head, cnt * es) ? RT_DEVICE_FAILED : 0;
    if (!rc && l->dtype == PP_BF16) { /* widened in place, from the last element down */
      uint16_t h;
      for (int64_t j = cnt - 1; j >= 0; j--) {
        memcpy(&h, mine + sizeof head + j * 2, 2);
        float f = pp_f32_from_bf16(h);
        memcpy(mine + sizeof head + j * 4, &f, 4);
      }
    }
  }
  rt_comm_set_where(
      x->comm,
      &(RtWhere){.step = -1, .entry = -1, .block = -1, .instr = -1, .mb = -1, .what = "the gather of the logits"});
  int world = x->comm ? rt_comm_size(x->comm) : 1;
  size_t *sizes = calloc((size_t)world, sizeof *sizes);
  unsigned char *all = NULL;
  if (!sizes) {
    free(mine);
    return RT_FAIL("out of memory");
  }
  if (!rc) rc = rt_comm_gather(x->comm, mine, bytes, &all, sizes, err, errlen);
  free(mine);
  if (!rc && all) { /* world rank 0: the row from its pieces, each column once */
    char *seen = calloc((size_t)vocab, 1);
    if (!seen) rc = RT_FAIL("out of memory");
    size_t at0 = 0;
    for (int r = 0; r < world && !rc; r++) {
      int64_t h[2];
      memcpy(h, all + at0, sizeof h);
      for (int64_t j = 0; j < h[1]; j++) {
        if (seen[h[0] + j]++) rc = RT_FAIL("%s: logit %lld comes from two ranks", g->path, (long long)(h[0] + j));
        memcpy(&row[h[0] + j], all + at0 + sizeof h + (size_t)j * 4, 4);
      }
      at0 += sizes[r];
    }
    for (int64_t v = 0; v < vocab && !rc; v++)
      if (!seen[v])
        rc = RT_FAIL("%s: no rank holds logit %lld of the vocabulary's %lld", g->path, (long long)v, (long long)vocab);
    free(seen);
  }
  free(all);
  free(sizes);
  if (rc == RT_DEVICE_FAILED) return dev_failed(x, err, errlen);
  return rc;
}

/* 2 m n k per GEMM of a batch of `batch`, summed over a block. */
static double block_flops(const RtBlock *b) {
  double f = 0;
  for (int i = 0; i < b->n; i++)
    if (b->ins[i].kind == RT_I_GEMM)
      f += 2.0 * pp_tri_macs(b->ins[i].tri, b->ins[i].m, b->ins[i].n, b->ins[i].k) *
           (b->ins[i].batch > 0 ? b->ins[i].batch : 1);
  return f;
}

double rt_exec_gemm_flops(const RtExec *x) {
  const RtProg *g = x->p;
  double f = 0;
  for (int e = 0; e < g->nentries; e++) {
    const RtEntry *en = &g->sched[e];
    switch (en->kind) {
    case RT_E_F: f += block_flops(rt_prog_block(g, en->chunk, RT_BLK_FORWARD)); break;
    case RT_E_B: f += block_flops(rt_prog_block(g, en->chunk, RT_BLK_BACKWARD)); break;
    case RT_E_W: f += block_flops(rt_prog_block(g, en->chunk, RT_BLK_WEIGHTS)); break;
    case RT_E_ZERO_GRADS:
    case RT_E_OPT:
    case RT_E_COMM: break;
    }
  }
  return f;
}
