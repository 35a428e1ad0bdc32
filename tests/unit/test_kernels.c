/* test_kernels.c — every kernel and GEMM that ppc generates runs alike on the cpu device (the C
 * kernels, OpenBLAS) and on the opencl device (the OpenCL C kernels, CLBlast; PoCL here): for each
 * model and mesh of the cases, each stage's listing, every distinct kernel and every distinct GEMM
 * is run once on both devices on the same random operands. Each kernel's operands must then agree
 * to 1e-6 of their largest value (NaN where both are NaN), and bit for bit where the kernel calls
 * no library transcendental (calls_libm): both devices' kernels round as the renderer writes them.
 * A GEMM is a library's sum of K products
 * in its own order: on 2048 sampled elements each device must be within the classical bound
 * 2Ku·(|A||B|)_ij (u = 2^-24) of the product in double, and the two devices' whole results within
 * 1e-4 (a wrong stride or layout is far off). bf16 operands (--precision bf16 programs) are filled
 * with random bf16 values and compared widened, to 2^-7 of their largest value: a result both devices
 * compute alike in f32 may still round to neighbouring bf16 values where their f32 sums differ in
 * the last bit; a bf16 GEMM's bound adds C's rounding, 2^-8 of |C|; the last case's cpu GEMMs run
 * through oneDNN (ppr --onednn) where ppr has it. Operands are packed into a small arena of their own
 * (a kernel touches only the extents its instruction names), so the full-size models fit. ppc is
 * found next to this binary; the work files go to BUILD/kernels/. Then the devices' start-up
 * errors: opencl with no platform, kernels that do not build, an arena too large for the device;
 * cuda on a machine without a GPU.
 * The last line is "N passed, M failed". */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_dev_cpu.h"
#include "pp_limits.h"
#include "rt_dev.h"
#include "rt_prog.h"

#define CHECK_PRINT_ALL /* every result, as it runs */
#include "check.h"
#include "test_util.h"

#define TOL 1e-6

static char bin[512] = "build";

/* The models: each dense and on a mesh; the big ones at a short sequence (the kernels' shapes
 * change with it, their code paths do not). */
static const char *const cases[][2] = {
    {"examples/tiny.pdl", ""},
    {"examples/tiny.pdl", "--tp 2"},
    {"examples/tiny.pdl", "--tp 4 --pp 2"}, /* kv heads replicated, a pipeline */
    {"tests/models/tiny_gpt2.pdl", ""},
    {"tests/models/tiny_gpt2.pdl", "--micro-batch 4 --seq 32"}, /* column sums over 128 rows: in parts */
    {"tests/models/tiny_untied.pdl", "--tp 2 --pp 2"},          /* an untied head */
    {"tests/models/tiny_pad.pdl", "--tp 4"},                    /* a padded vocabulary */
    {"tests/models/tiny_pad.pdl", "--precision bf16"},          /* 250 rows padded to 256: a masked classifier */
    {"examples/minimind.pdl", "--micro-batch 1 --seq 64"},
    {"examples/minimind.pdl", "--micro-batch 1 --seq 64 --tp 2"},
    {"examples/gpt2.pdl", "--micro-batch 1 --seq 64"},
    {"examples/gpt2.pdl", "--micro-batch 1 --seq 64 --tp 2"},
    {"examples/tiny.pdl", "--precision bf16"},
    {"examples/tiny.pdl", "--precision bf16 --tp 2 --pp 2"},
    {"tests/models/tiny_gpt2.pdl", "--precision bf16 --tp 2"},
    {"tests/models/tiny_gpt2.pdl", "--precision bf16 --microbatches 2"}, /* the cpu's GEMMs through oneDNN */
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) { /* splitmix64 */
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static float unit(void) { return (float)((double)(next() >> 11) * 0x1p-53); } /* [0, 1) */

/* ---- an instruction's operands, packed ------------------------------------------------------ */

typedef struct {
  int64_t off, bytes; /* in the rank's arena (slot 0 for $ operands) */
  int64_t at;         /* in the packed arena */
  PpDType dt;         /* of the buffer it lies in: i32 token ids (random ids below the vocab), bf16, f32 */
  int positive;       /* AdamW's second moments: random in [0, 1) */
} Operand;

typedef struct {
  Operand op[RT_MAX_KARGS];
  int n;
  int64_t size;
} Pack;

static int64_t arena_off(const RtProg *p, const RtPtr *q) {
  return q->off + (q->in_slot ? p->reg[RT_REG_SLOTS].base : 0);
}

/* The operand's place in the packed arena; ranges of the same bytes share one place. */
/* dt: the operand's type, or -1: that of the buffer line it is (the one starting there with its
 * bytes, else one starting there, else one holding it: scratch buffers of different types may share
 * bytes at different times). */
static int64_t pack_add(Pack *k, const RtProg *p, const RtPtr *q, int64_t bytes, int dt) {
  int64_t off = arena_off(p, q);
  for (int i = 0; i < k->n; i++)
    if (k->op[i].off == off && k->op[i].bytes >= bytes) return k->op[i].at;
  Operand *o = &k->op[k->n++];
  o->off = off;
  o->bytes = bytes;
  o->at = k->size;
  k->size += (bytes + 63) / 64 * 64;
  int best = 0;
  o->dt = dt >= 0 ? (PpDType)dt : PP_F32;
  for (int b = 0; b < p->nbuffers && dt < 0; b++) {
    const RtBuffer *f = &p->buffers[b];
    int64_t fo = arena_off(p, &f->ptr);
    int fit = fo == off && f->bytes == bytes ? 3 : fo == off ? 2 : off > fo && off < fo + f->bytes ? 1 : 0;
    if (fit > best) best = fit, o->dt = f->dtype;
  }
  const RtRegion *v = &p->reg[RT_REG_ADAM_V];
  o->positive = off >= v->base && off < v->base + v->bytes;
  return o->at;
}

/* GEMM operand bytes: BATCH row-major matrices of rows x cols, leading dimension ld, stride apart. */
static int64_t gemm_bytes(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch, PpDType dt) {
  return pp_dtype_bytes(dt) * ((rows - 1) * ld + (batch - 1) * stride + cols);
}

typedef struct {
  RtDev *cpu, *cl;
  const RtProg *p;
  const char *what;
  float *a, *b, *init;
  int64_t cap;
  int ran, bad, exact; /* kernels run, failed, held to their bits */
} Run;

/* Element i of a GEMM operand of type dt at byte_off of a packed arena, as a float. */
static float at_f(const float *base, int64_t byte_off, int64_t i, PpDType dt) {
  if (dt == PP_BF16) return pp_f32_from_bf16(((const uint16_t *)(const void *)((const char *)base + byte_off))[i]);
  return base[byte_off / 4 + i];
}

/* The sampled elements of both devices' C within 2Ku(|A||B|)_ij + |beta| u |C0| of the double
 * product; the largest such ratio in *ratio (<= 1 passes). */
static int gemm_bound(const Run *r, const RtGemm *g, double *ratio) {
  const double u = 0x1p-24;
  *ratio = 0;
  for (int t = 0; t < 2048; t++) {
    int64_t b = (int64_t)(next() % (uint64_t)g->batch), i = (int64_t)(next() % (uint64_t)g->m),
            j = (int64_t)(next() % (uint64_t)g->n);
    double ref = 0, mag = 0;
    for (int64_t q = 0; q < g->k; q++) {
      double x = at_f(r->init, g->a, b * g->sa + (g->ta ? q * g->lda + i : i * g->lda + q), g->dt[0]);
      double y = at_f(r->init, g->b, b * g->sb + (g->tb ? j * g->ldb + q : q * g->ldb + j), g->dt[1]);
      ref += x * y;
      mag += fabs(x * y);
    }
    int64_t ci = b * g->sc + i * g->ldc + j;
    double c0 = at_f(r->init, g->c, ci, g->dt[2]);
    if (g->sc == 0 && g->batch > 1) continue; /* C shared by the batches: checked against the other device */
    ref = g->alpha * ref + g->beta * c0;
    double bound = 2 * g->k * u * fabs(g->alpha) * mag + fabs(g->beta * c0) * u + 1e-30;
    if (g->dt[2] == PP_BF16) bound += 0x1p-8 * fabs(ref); /* C rounded to bf16 */
    for (int d = 0; d < 2; d++) {
      double got = at_f(d ? r->b : r->a, g->c, ci, g->dt[2]), q = fabs(got - ref) / bound;
      if (q > *ratio || q != q) *ratio = q;
    }
  }
  return *ratio <= 1;
}

/* Whether kernel name's C body (in the C kernels' source) calls a library transcendental, whose
 * implementations differ between the C library and an OpenCL one; the rest of a kernel's arithmetic
 * is the renderer's (contraction off and the same fused multiply-adds on both, the prelude's
 * ppk_exp for exponentials), so without one the devices agree bit for bit. */
static bool calls_libm(const char *csrc, const char *name) {
  static const char *const libm[] = {"expf(", "logf(", "tanhf(", "cosf(", "sinf(", "powf("};
  char head[200], tail[200];
  snprintf(head, sizeof head, "\nvoid %s(", name);
  snprintf(tail, sizeof tail, "\nvoid %s__call(", name);
  const char *b = csrc ? strstr(csrc, head) : NULL, *e = b ? strstr(b, tail) : NULL;
  if (!b || !e) return true; /* not found: no claim */
  for (size_t i = 0; i < sizeof libm / sizeof *libm; i++) {
    const char *f = strstr(b, libm[i]);
    if (f && f < e) return true;
  }
  return false;
}

/* Random operands into both arenas; run(dev) on each; compare every operand (bit for bit when
 * exact, NaN where both are NaN). */
static void compare(Run *r, Pack *k, const char *name, int (*run)(RtDev *, void *), void *ctx, const RtGemm *gemm,
                    bool exact) {
  for (int i = 0; i < k->n; i++) {
    Operand *o = &k->op[i];
    float *v = r->init + o->at / 4;
    int32_t *iv = (int32_t *)(void *)v;
    uint16_t *hv = (uint16_t *)(void *)v;
    for (int64_t j = 0; j < o->bytes / pp_dtype_bytes(o->dt); j++) {
      if (o->dt == PP_I32) iv[j] = (int32_t)(next() % (uint64_t)r->p->vocab);
      else if (o->dt == PP_BF16) hv[j] = pp_bf16_from_f32(o->positive ? unit() : 2 * unit() - 1);
      else v[j] = o->positive ? unit() : 2 * unit() - 1;
    }
  }
  RtDev *devs[2] = {r->cpu, r->cl};
  float *out[2] = {r->a, r->b};
  for (int d = 0; d < 2; d++) {
    if (rt_dev_write(devs[d], 0, r->init, k->size) || run(devs[d], ctx) || rt_dev_read(devs[d], 0, out[d], k->size)) {
      check(0, "%s: %s: %s", r->what, name, rt_dev_error(devs[d]));
      r->bad++;
      return;
    }
  }
  double worst = 0;
  int changed = 0;
  int64_t nbits = 0; /* elements whose bits differ (exact) */
  const char *why = "";
  for (int i = 0; i < k->n; i++) {
    const Operand *o = &k->op[i];
    int64_t es = pp_dtype_bytes(o->dt), n = o->bytes / es;
    if (o->dt == PP_I32) {
      if (memcmp(r->a + o->at / 4, r->b + o->at / 4, (size_t)o->bytes)) worst = INFINITY, why = " (token ids)";
      continue;
    }
    double big = 0, diff = 0;
    for (int64_t j = 0; j < n; j++) {
      double x = at_f(r->a, o->at, j, o->dt), y = at_f(r->b, o->at, j, o->dt);
      changed |= memcmp((char *)r->a + o->at + j * es, (char *)r->init + o->at + j * es, (size_t)es) != 0;
      if (x != x && y != y) continue; /* NaN on both: the same arithmetic on an input outside its domain */
      nbits += exact && memcmp((char *)r->a + o->at + j * es, (char *)r->b + o->at + j * es, (size_t)es) != 0;
      if (fabs(x) > big) big = fabs(x);
      double e = fabs(x - y);
      if (e > diff || e != e) diff = e;
    }
    /* as a share of what the operand's type allows: the devices' f32 sums may differ in the last bit */
    double rel = (big > 0 ? diff / big : diff) / (o->dt == PP_BF16 ? 0x1p-7 : gemm ? 1e-4 : TOL);
    if (rel > worst || rel != rel) worst = rel;
  }
  r->ran++;
  r->exact += exact;
  double ratio = 0;
  int ok = worst <= 1 && nbits == 0 && (!gemm || gemm_bound(r, gemm, &ratio));
  if (!ok || !changed) {
    r->bad++;
    if (gemm)
      check(0, "%s: %s on cpu and opencl: %.3g of the error bound, the devices %.3g of their limit apart%s", r->what,
            name, ratio, worst, changed ? "" : "; it wrote nothing");
    else
      check(0,
            "%s: %s on cpu and opencl: largest difference %.3g of its limit (%g of the operand's largest value; bf16: "
            "2^-7), %lld elements with other bits (where it calls no library transcendental: none allowed)%s%s",
            r->what, name, worst, TOL, (long long)nbits, why, changed ? "" : "; the kernel wrote nothing");
  }
}

typedef struct {
  const RtInstr *in;
  const int64_t *at; /* per argument: its packed offset (pointers) */
  float scal[RT_NSCALAR];
} KernelCall;

static int run_kernel(RtDev *d, void *ctx) {
  const KernelCall *c = ctx;
  RtKArg a[RT_MAX_KARGS];
  for (int i = 0; i < c->in->nargs; i++) {
    const RtArg *x = &c->in->args[i];
    switch (x->kind) {
    case RT_A_PTR: a[i] = (RtKArg){.kind = RT_KA_PTR, .off = c->at[i]}; break;
    case RT_A_F32: a[i] = (RtKArg){.kind = RT_KA_F32, .f = x->f}; break;
    case RT_A_I64: a[i] = (RtKArg){.kind = RT_KA_I64, .i = x->i}; break;
    case RT_A_SCALAR: a[i] = (RtKArg){.kind = RT_KA_F32, .f = c->scal[x->scalar]}; break;
    }
  }
  return rt_dev_launch(d, c->in->kernel, &c->in->geom, c->in->nargs, a) || rt_dev_sync(d);
}

static int run_gemm(RtDev *d, void *ctx) { return rt_dev_gemm(d, ctx) || rt_dev_sync(d); }

typedef struct {
  int kernel;
  RtGeom g;
  int64_t n, partials, table, rows; /* rows: the table's (the listing's RUNS) */
} NormCall;

/* grad_norm's kernel over n floats at 0 cut into up to three runs of whole PP_NORM_UNITs (the
 * table's other rows zero), as ppr writes its table */
static int run_norm(RtDev *d, void *ctx) {
  const NormCall *c = ctx;
  int32_t *tab = calloc((size_t)c->rows * 2, sizeof *tab);
  int64_t runs = c->rows < 3 ? c->rows : 3, units = c->n / PP_NORM_UNIT / runs, at = 0;
  for (int64_t i = 0; i < runs && tab; i++) {
    int64_t len = i + 1 < runs ? units * PP_NORM_UNIT : c->n - at;
    tab[2 * i] = (int32_t)(at / PP_NORM_UNIT), tab[2 * i + 1] = (int32_t)len;
    at += len;
  }
  RtKArg a[3] = {
      {.kind = RT_KA_PTR, .off = 0}, {.kind = RT_KA_PTR, .off = c->partials}, {.kind = RT_KA_PTR, .off = c->table}};
  int rc =
      !tab || rt_dev_write(d, c->table, tab, 8 * c->rows) || rt_dev_launch(d, c->kernel, &c->g, 3, a) || rt_dev_sync(d);
  free(tab);
  return rc;
}

/* The packed operands of an instruction (kernel or gemm); at[i] per kernel argument. */
static void pack_instr(Pack *k, const RtProg *p, const RtInstr *in, int64_t *at, const char *csrc) {
  memset(k, 0, sizeof *k);
  if (in->kind == RT_I_KERNEL) {
    int dt[RT_MAX_KARGS], nt = test_kernel_types(csrc, p->kernels[in->kernel], dt, RT_MAX_KARGS), b = 0;
    for (int i = 0; i < in->nargs; i++)
      if (in->args[i].kind == RT_A_PTR) {
        int t = b < nt ? dt[b] : -1;
        b++;
        at[i] = pack_add(k, p, &in->args[i].ptr, in->args[i].bytes ? in->args[i].bytes : 4, t);
      }
  } else {
    int64_t ar = in->ta ? in->k : in->m, ac = in->ta ? in->m : in->k, br = in->tb ? in->n : in->k,
            bc = in->tb ? in->k : in->n;
    at[0] = pack_add(k, p, &in->p[0], gemm_bytes(ar, ac, in->lda, in->sa, in->batch, in->dt[0]), (int)in->dt[0]);
    at[1] = pack_add(k, p, &in->p[1], gemm_bytes(br, bc, in->ldb, in->sb, in->batch, in->dt[1]), (int)in->dt[1]);
    at[2] = pack_add(k, p, &in->p[2], gemm_bytes(in->m, in->n, in->ldc, in->sc, in->batch, in->dt[2]), (int)in->dt[2]);
  }
}

static int same_gemm(const RtInstr *a, const RtInstr *b) {
  return a->ta == b->ta && a->tb == b->tb && a->m == b->m && a->n == b->n && a->k == b->k && a->lda == b->lda &&
         a->ldb == b->ldb && a->ldc == b->ldc && a->sa == b->sa && a->sb == b->sb && a->sc == b->sc &&
         a->batch == b->batch && a->alpha == b->alpha && a->beta == b->beta && a->dt[0] == b->dt[0] &&
         a->dt[1] == b->dt[1] && a->dt[2] == b->dt[2];
}

/* A whole text file, or NULL. */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      char *nb = realloc(buf, cap = 2 * cap + 8192);
      if (!nb) break;
      buf = nb;
    }
    size_t got = fread(buf + n, 1, 4096, f);
    n += got;
    if (got < 4096) break;
  }
  fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

/* One listing: its kernels and GEMMs on both devices. */
static void test_listing(const char *dir, const char *prog, const char *what, int onednn) {
  char err[4096];
  RtProg *p = NULL;
  if (rt_prog_load(prog, &p, err, sizeof err)) {
    check(0, "%s: %s", what, err);
    return;
  }
  Run r = {.p = p, .what = what};
  char cpath[1024];
  snprintf(cpath, sizeof cpath, "%s/%s.c", dir, p->kernels_base);
  char *csrc = read_text(cpath);
  /* the largest packed arena of any instruction */
  int64_t *at = calloc(RT_MAX_KARGS, sizeof *at);
  Pack *k = calloc(1, sizeof *k);
  int64_t most = 64 * 1024;
  for (int b = 0; b < RT_NBLK; b++)
    for (int i = 0; i < p->blk[b].n; i++) {
      const RtInstr *in = &p->blk[b].ins[i];
      if (in->kind != RT_I_KERNEL && in->kind != RT_I_GEMM) continue;
      pack_instr(k, p, in, at, csrc);
      if (k->size > most) most = k->size;
    }
  int64_t maxn = 0;
  for (int i = 0; i < p->nparams; i++)
    if (p->params[i].numel > maxn) maxn = p->params[i].numel;
  if (4 * maxn + 4 * 65536 > most) most = 4 * maxn + 4 * 65536;
  r.cap = most;
  r.a = malloc((size_t)most);
  r.b = malloc((size_t)most);
  r.init = malloc((size_t)most);
  if (rt_dev_open("cpu", 0, &r.cpu, err, sizeof err) || rt_dev_open("opencl", 0, &r.cl, err, sizeof err)) {
    check(0, "%s: %s", what, err);
    goto out;
  }
  r.cpu->onednn = onednn;
  if (rt_dev_alloc(r.cpu, most) || rt_dev_alloc(r.cl, most) || rt_dev_load(r.cpu, dir, p) ||
      rt_dev_load(r.cl, dir, p)) {
    check(0, "%s: %s%s", what, rt_dev_error(r.cpu), rt_dev_error(r.cl));
    goto out;
  }
  int *seen = calloc((size_t)p->nkernels, sizeof *seen);
  const RtInstr **gemms = calloc(4096, sizeof *gemms);
  int ngemm = 0, nkern = 0;
  for (int b = 0; b < RT_NBLK; b++)
    for (int i = 0; i < p->blk[b].n; i++) {
      const RtInstr *in = &p->blk[b].ins[i];
      char name[160];
      if (in->kind == RT_I_KERNEL && !seen[in->kernel]) {
        seen[in->kernel] = 1;
        nkern++;
        pack_instr(k, p, in, at, csrc);
        KernelCall c = {in, at, {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 0.5f}};
        snprintf(name, sizeof name, "kernel %s (line %d)", p->kernels[in->kernel], in->line);
        compare(&r, k, name, run_kernel, &c, NULL, !calls_libm(csrc, p->kernels[in->kernel]));
      } else if (in->kind == RT_I_GEMM) {
        int dup = 0;
        for (int g = 0; g < ngemm && !dup; g++) dup = same_gemm(gemms[g], in);
        if (dup || ngemm == 4096) continue;
        gemms[ngemm++] = in;
        pack_instr(k, p, in, at, csrc);
        /* the whole product on both devices (random operands have no zeros for a triangle; the
         * cpu device's triangles are checked in test_gemm) */
        RtGemm m = {in->ta,     in->tb,   in->m,  in->n,  in->k,  in->batch,
                    in->alpha,  in->beta, at[0],  at[1],  at[2],  in->lda,
                    in->ldb,    in->ldc,  in->sa, in->sb, in->sc, {in->dt[0], in->dt[1], in->dt[2]},
                    PP_TRI_NONE};
        snprintf(name, sizeof name, "gemm %c %c %d %d %d batch %d (line %d)", in->ta ? 'T' : 'N', in->tb ? 'T' : 'N',
                 in->m, in->n, in->k, in->batch, in->line);
        compare(&r, k, name, run_gemm, &m, &m, false);
      } else if (in->kind == RT_I_GRAD_NORM && !seen[in->kernel]) {
        /* grad_norm's kernel over the largest param's worth of random gradient */
        seen[in->kernel] = 1;
        nkern++;
        memset(k, 0, sizeof *k);
        RtPtr whole = {1, 0, 0};
        pack_add(k, p, &whole, 4 * maxn, PP_F32);
        NormCall c = {in->kernel, in->geom, maxn, 0, 0, in->bytes};
        RtPtr part = {1, 0, p->arena - 4 * in->geom.grid - 8 * in->bytes}; /* any place that is no buffer */
        RtPtr tab = {1, 0, p->arena - 8 * in->bytes};
        c.partials = pack_add(k, p, &part, 4 * in->geom.grid, PP_F32);
        c.table = pack_add(k, p, &tab, 8 * in->bytes, PP_I32);
        snprintf(name, sizeof name, "grad_norm's kernel %s over %lld floats", p->kernels[in->kernel], (long long)maxn);
        compare(&r, k, name, run_norm, &c, NULL, !calls_libm(csrc, p->kernels[in->kernel]));
      }
    }
  check(r.bad == 0 && r.ran == nkern + ngemm && nkern == p->nkernels && r.exact > 0,
        "%s: %d kernels (of %d) and %d distinct GEMMs agree on cpu and opencl to %g; the %d kernels that call no "
        "library transcendental bit for bit",
        what, nkern, p->nkernels, ngemm, TOL, r.exact);
  free(seen);
  free((void *)gemms);
out:
  rt_dev_close(r.cpu);
  rt_dev_close(r.cl);
  free(r.a);
  free(r.b);
  free(r.init);
  free(at);
  free(k);
  free(csrc);
  rt_prog_free(p);
}

/* ---- the opencl device's start-up errors --------------------------------------------------- */

/* Runs ppr with env before it on DIR; its output in *out (malloc'd); the exit status. */
static int ppr(const char *env, const char *dir, const char *args, char **out) {
  char cmd[4096], path[1024];
  snprintf(path, sizeof path, "%s/ppr.out", dir);
  snprintf(cmd, sizeof cmd, "%s %s/ppr %s %s > %s 2>&1", env, bin, dir, args, path);
  int rc = system(cmd);
  FILE *f = fopen(path, "rb");
  *out = calloc(1, 1 << 16);
  if (f) {
    size_t n = fread(*out, 1, (1 << 16) - 1, f);
    (*out)[n] = 0;
    fclose(f);
  }
  return rc;
}

static int exists(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f) fclose(f);
  return f != NULL;
}

/* DIR/rank0.prog names DIR/FILE (its `object EXT` line) by the file's size and hash as it is now,
 * the listing rehashed: a kernel file edited on purpose passes ppr's check of the file and fails
 * later. 0, or -1. */
static int rename_object(const char *dir, const char *ext) {
  char path[1200], prog[1200];
  snprintf(path, sizeof path, "%s/kernels_s0.%s", dir, ext);
  snprintf(prog, sizeof prog, "%s/rank0.prog", dir);
  char *bufs[2] = {NULL, NULL};
  size_t lens[2] = {0, 0};
  const char *paths[2] = {path, prog};
  for (int k = 0; k < 2; k++) {
    FILE *f = fopen(paths[k], "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, r;
    bufs[k] = malloc(cap + 1);
    while ((r = fread(bufs[k] + lens[k], 1, cap - lens[k], f)) > 0)
      if ((lens[k] += r) == cap) bufs[k] = realloc(bufs[k], (cap *= 2) + 1);
    fclose(f);
    bufs[k][lens[k]] = 0;
  }
  char want[64], line[64], *t = bufs[1], *at, *hl = strstr(t, "\nhash "), *body = hl ? strchr(hl + 1, '\n') : NULL;
  snprintf(want, sizeof want, "\nobject %s ", ext);
  at = strstr(t, want);
  int rc = -1;
  if (at && body) {
    int n = snprintf(line, sizeof line, "\nobject %s %zu %016llx", ext, lens[0],
                     (unsigned long long)rt_fnv1a64(bufs[0], lens[0]));
    char *end = strchr(at + 1, '\n');
    size_t out_len = (size_t)(at - t) + (size_t)n + strlen(end);
    char *o = malloc(out_len + 1);
    snprintf(o, out_len + 1, "%.*s%s%s", (int)(at - t), t, line, end);
    char *ob = strchr(strstr(o, "\nhash ") + 1, '\n') + 1;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)rt_fnv1a64(ob, strlen(ob)));
    memcpy(strstr(o, "\nhash ") + 6, hex, 16);
    FILE *f = fopen(prog, "wb");
    rc = f && fwrite(o, 1, out_len, f) == out_len ? 0 : -1;
    if (f && fclose(f)) rc = -1;
    free(o);
  }
  free(bufs[0]);
  free(bufs[1]);
  return rc;
}

static void test_device_errors(void) {
  char dir[900], cmd[4096], save[1024], log[1024], *out = NULL;
  snprintf(dir, sizeof dir, "%s/kernels/errors", bin);
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && %s/ppc examples/tiny.pdl -o %s > /dev/null", dir, dir, bin,
           dir);
  if (system(cmd)) {
    check(0, "ppc examples/tiny.pdl for the device errors");
    return;
  }
  snprintf(save, sizeof save, "%s/w.safetensors", dir);
  snprintf(log, sizeof log, "%s/log.jsonl", dir);
  char args[2600];
  snprintf(args, sizeof args, "--device opencl --save %s --log %s", save, log);

  /* no OpenCL driver: the ICD loader finds no platform */
  int rc = ppr("OCL_ICD_VENDORS=/nonexistent", dir, args, &out);
  check(rc != 0 && strstr(out, "ppr: error: --device opencl: no OpenCL platform is installed") && !exists(save) &&
            !exists(log),
        "opencl without a platform: a clear error, exit 1, nothing written");
  if (!strstr(out, "no OpenCL platform")) printf("  | %s\n", out);
  free(out);

  /* kernels that do not build: the build log, naming the device */
  char cl[1024];
  snprintf(cl, sizeof cl, "%s/kernels_s0.cl", dir);
  snprintf(cmd, sizeof cmd, "sed -i 's/static inline float ppk_max(float a/static inline float ppk_max(floatx a/' %s",
           cl);
  if (system(cmd) || rename_object(dir, "cl")) check(0, "editing %s", cl);
  rc = ppr("", dir, args, &out);
  check(rc != 0 && strstr(out, "ppr: error: opencl:0 (") && strstr(out, "kernels_s0.cl: building the kernels failed") &&
            strstr(out, "floatx") && !exists(save) && !exists(log),
        "opencl kernels that do not build: the device, the file and the build log, exit 1, nothing written");
  if (!strstr(out, "building the kernels failed")) printf("  | %s\n", out);
  free(out);

  /* cuda without a GPU: a clear error naming what is missing, before anything is written */
  if (exists("/dev/nvidia0") || exists("/dev/nvidiactl")) {
    printf("SKIP --device cuda without a GPU: this machine has one (make gpu-check runs it)\n");
  } else {
    snprintf(args, sizeof args, "--device cuda --save %s --log %s", save, log);
    rc = ppr("", dir, args, &out);
    check(rc != 0 && strstr(out, "ppr: error: --device cuda: ") &&
              (strstr(out, "no CUDA driver: libcuda.so.1 cannot be loaded") || strstr(out, "no CUDA-capable device") ||
               strstr(out, "built without the cuda device")) &&
              !exists(save) && !exists(log),
          "--device cuda on a machine without a GPU: it names what is missing, exit 1, nothing written");
    if (!strstr(out, "--device cuda")) printf("  | %s\n", out);
    free(out);
    snprintf(args, sizeof args, "--device opencl --save %s --log %s", save, log);
  }

  /* an arena larger than the device allows in one allocation */
  snprintf(cmd, sizeof cmd,
           "rm -rf %s && mkdir -p %s && %s/ppc examples/minimind.pdl --micro-batch 1 --seq 64 -o %s > /dev/null", dir,
           dir, bin, dir);
  if (system(cmd)) {
    check(0, "ppc examples/minimind.pdl for the device errors");
    return;
  }
  rc = ppr("POCL_MEMORY_LIMIT=1", dir, args, &out);
  check(rc != 0 && strstr(out, "ppr: error: opencl:0 (") && strstr(out, "the arena needs ") &&
            strstr(out, "CL_DEVICE_MAX_MEM_ALLOC_SIZE") && !exists(save) && !exists(log),
        "an arena larger than the opencl device allows: a clear error naming the device, exit 1, nothing written");
  if (!strstr(out, "the arena needs")) printf("  | %s\n", out);
  free(out);
}

int main(int argc, char **argv) {
  (void)argc;
  const char *slash = strrchr(argv[0], '/');
  if (slash) snprintf(bin, sizeof bin, "%.*s", (int)(slash - argv[0]), argv[0]);
  for (int c = 0; c < NCASES; c++) {
    char dir[900], cmd[4800];
    snprintf(dir, sizeof dir, "%s/kernels/case%d", bin, c);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && %s/ppc %s %s -o %s > %s.log 2>&1", dir, dir, bin,
             cases[c][0], cases[c][1], dir, dir);
    if (system(cmd) != 0) {
      check(0, "%s %s: ppc failed (%s.log)", cases[c][0], cases[c][1], dir);
      continue;
    }
    /* every stage, as its last tensor-parallel rank runs it (its vocabulary rows start past 0) */
    int tp = 1, pp = 1, dp = 1, cp = 1;
    char prog[1200], err[512];
    snprintf(prog, sizeof prog, "%s/rank0.prog", dir);
    if (rt_prog_read_mesh(prog, &tp, &pp, &dp, &cp, err, sizeof err)) {
      check(0, "%s", err);
      continue;
    }
    for (int s = 0; s < pp; s++) {
      char what[512];
      snprintf(prog, sizeof prog, "%s/rank%d.prog", dir, s * tp + tp - 1);
      snprintf(what, sizeof what, "%s %s: stage %d tp_rank %d", cases[c][0], cases[c][1], s, tp - 1);
      /* the last case's bf16 GEMMs on cpu through oneDNN (ppr --onednn), where ppr has it */
      int dnnl = c == NCASES - 1 && rt_dev_cpu_onednn();
      if (dnnl) snprintf(what + strlen(what), sizeof what - strlen(what), " (cpu GEMMs through oneDNN)");
      test_listing(dir, prog, what, dnnl);
    }
  }
  test_device_errors();
  return check_done();
}
