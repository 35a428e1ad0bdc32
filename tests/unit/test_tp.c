/* test_tp.c - the runtime's tensor and data parallelism: the deterministic allreduce (every member
 * gets the bits of a reduction in the group's rank order), shards of the dense tensors (--seed and
 * --init give each rank its slice, --save reassembles the dense tensor, padding rows dropped), a
 * padded vocabulary trained over a mesh against the one-rank run, and the start-up checks of the
 * ranks' listings (every dense row owned once, the same collectives in every TP group), and the
 * watchdog of a collective that a rank never joins. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rt_comm.h"
#include "rt_dev.h"
#include "rt_io.h"
#include "rt_mesh.h"
#include "rt_exec.h"

#define CHECK_PRINT_ALL /* every result, as it runs */
#include "check.h"

static char bin[512] = "build", dir[600];

#define MPIRUN "timeout 300 mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 "

static int quiet; /* a failure is what the next check expects: do not print the command */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int rc = system(cmd);
  if (rc != 0 && !quiet) printf("  | command (exit %d): %s\n", rc, cmd);
  return rc;
}

static char *read_text(const char *p, size_t *len) {
  FILE *f = fopen(p, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  size_t got = fread(b, 1, (size_t)n, f);
  fclose(f);
  b[got] = 0;
  if (len) *len = got;
  return b;
}

/* ---- the allreduce, inside an MPI world (test_tp --allreduce TP DP DEVICE under mpirun) ---- */

/* A float of rank r's element i: magnitudes over 2^-10 .. 2^10, so the order of a sum matters. */
static float value(int r, int64_t i, int op) {
  uint64_t h = rt_splitmix64((uint64_t)r * 0x9e3779b97f4a7c15ull + (uint64_t)i * 7 + (uint64_t)op);
  return (float)ldexp((double)(int)(h % 2001) - 1000.0, (int)((h >> 20) % 21) - 20);
}

/* A listing as rt_mesh_check needs it for rank me of a tp x dp world: the mesh, and the tp/R
 * groups its blocks use (subs[0..*nsub)). */
static RtProg *fake_prog(int tp, int dp, int me, int *subs, int *nsub_out) {
  RtProg *p = calloc(1, sizeof *p);
  p->path = strdup("allreduce.prog");
  p->model = strdup("allreduce");
  p->tp = tp;
  p->pp = 1;
  p->dp = dp;
  p->rank = me;
  p->tp_rank = me % tp;
  p->dp_rank = me / tp;
  p->prev = p->next = -1;
  p->micro_batch = p->seq = 1;
  p->microbatches = p->local_microbatches = dp;
  p->vocab = 1;
  p->tied = -1;
  int nsub = 0;
  for (int r = 1; r <= tp; r++)
    if (tp % r == 0) subs[nsub++] = r;
  p->blk[RT_BLK_FORWARD].ins = calloc((size_t)nsub, sizeof(RtInstr));
  p->blk[RT_BLK_FORWARD].n = nsub;
  for (int k = 0; k < nsub; k++) {
    RtInstr *x = &p->blk[RT_BLK_FORWARD].ins[k];
    x->kind = RT_I_ALLREDUCE;
    x->group = RT_G_TP_SUB;
    x->sub = subs[k];
    x->bytes = 4;
  }
  *nsub_out = nsub;
  return p;
}

/* The buffers live in a device's arena: on cpu MPI reduces the arena itself, on opencl through a
 * host copy. */
static int allreduce_child(int argc, char **argv, int tp, int dp, const char *device) {
  char err[4096];
  RtComm *c = NULL;
  if (rt_comm_init(&argc, &argv, &c, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  int me = rt_comm_rank(c), n = rt_comm_size(c);
  if (n != tp * dp) {
    fprintf(stderr, "allreduce child: %d ranks for tp %d dp %d\n", n, tp, dp);
    rt_comm_finalize(c);
    return 1;
  }
  int subs[8], nsub = 0;
  RtProg *p = fake_prog(tp, dp, me, subs, &nsub);
  int model_tied = 0;
  if (rt_mesh_check(c, p, "allreduce", &model_tied, err, sizeof err)) {
    fprintf(stderr, "rank %d: %s\n", me, err);
    rt_comm_finalize(c);
    return 1;
  }
  rt_comm_groups(c, p);
  RtDev *dev = NULL;
  if (rt_dev_open(device, rt_comm_local_rank(c), &dev, err, sizeof err) || rt_dev_alloc(dev, 40000 * 4 + 64)) {
    fprintf(stderr, "rank %d: %s\n", me, dev ? rt_dev_error(dev) : err);
    rt_comm_finalize(c);
    return 1;
  }
  static const int64_t counts[] = {1, 5, 1000, 11111, 40000};
  int bad = 0, cases = 0;
  for (int g = 0; g < nsub + 1; g++) /* the tp/R groups, then the DP group */
    for (int op = 0; op < 4; op++)   /* sum, max; then in bf16 (widened, reduced in f32, rounded once) */
      for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        int64_t cnt = counts[ci];
        PpDType dt = op >= 2 ? PP_BF16 : PP_F32;
        int rop = op & 1;
        int R = g < nsub ? subs[g] : dp;
        /* the members in the group's order */
        int members[64], nm = 0;
        for (int q = 0; q < n; q++) {
          int same = g < nsub ? q / tp == me / tp && (q % tp) / R == (me % tp) / R : q % tp == me % tp;
          if (same) members[nm++] = q;
        }
        float *buf = malloc((size_t)cnt * sizeof *buf);
        uint16_t *h = (uint16_t *)(void *)buf; /* bf16: the values rounded, in the first half */
        for (int64_t i = 0; i < cnt; i++) {
          float x = value(me, i, rop);
          if (dt == PP_BF16) h[i] = pp_bf16_from_f32(x);
          else buf[i] = x;
        }
        int64_t off = 64, es = pp_dtype_bytes(dt); /* an offset inside the arena, as an operand's */
        if (rt_dev_write(dev, off, buf, cnt * es)) fprintf(stderr, "%s\n", rt_dev_error(dev));
        if (g < nsub) rt_comm_allreduce(c, dev, R == tp ? RT_G_TP : RT_G_TP_SUB, R, rop, off, cnt, dt);
        else rt_comm_allreduce(c, dev, RT_G_DP, 0, rop, off, cnt, dt);
        if (rt_dev_read(dev, off, buf, cnt * es)) fprintf(stderr, "%s\n", rt_dev_error(dev));
        int ok = 1;
        for (int64_t i = 0; i < cnt && ok; i++) {
          float v = 0;
          for (int k = 0; k < nm; k++) {
            float w = value(members[k], i, rop);
            if (dt == PP_BF16) w = pp_f32_from_bf16(pp_bf16_from_f32(w));
            v = k == 0 ? w : rop == RT_OP_MAX ? (w > v ? w : v) : v + w;
          }
          if (dt == PP_BF16) ok = h[i] == pp_bf16_from_f32(v);
          else ok = memcmp(&v, &buf[i], sizeof v) == 0;
        }
        free(buf);
        cases++;
        if (!rt_comm_all_ok(c, ok)) {
          bad++;
          if (me == 0)
            printf("allreduce: %s of %lld %s over groups of %d: a rank's result is not the rank-order "
                   "reduction\n",
                   rop ? "max" : "sum", (long long)cnt, pp_dtype_name(dt), nm);
        }
      }
  if (me == 0) printf("allreduce: %d of %d cases bit-exact on every rank\n", cases - bad, cases);
  rt_dev_close(dev);
  rt_prog_free(p);
  rt_comm_finalize(c);
  return bad != 0;
}

static void test_allreduce(const char *self) {
  static const int worlds[][2] = {{6, 1}, {2, 3}};
  static const char *const devices[] = {"cpu", "opencl"};
  for (int w = 0; w < 4; w++) {
    int tp = worlds[w % 2][0], dp = worlds[w % 2][1];
    const char *device = devices[w / 2];
    char out[1024];
    snprintf(out, sizeof out, "%s/allreduce%d.txt", dir, w);
    int rc = sh(MPIRUN "-x POCL_MAX_PTHREAD_COUNT=1 -np %d %s --allreduce %d %d %s > %s 2>&1", tp * dp, self, tp, dp,
                device, out);
    char *t = read_text(out, NULL);
    int cases = tp == 6 ? 4 * 4 * 5 + 20 : 2 * 4 * 5 + 20; /* groups x (sum, max; f32, bf16) x counts */
    char want[128];
    snprintf(want, sizeof want, "allreduce: %d of %d cases bit-exact on every rank", cases, cases);
    check(rc == 0 && t && strstr(t, want),
          "allreduce on %s over tp %d dp %d (groups tp/R for every R dividing tp, and dp), sum and max of 1 to 40000 "
          "f32 and bf16 values: every rank has the rank-order reduction (bf16: in f32, rounded once), bit for bit",
          device, tp, dp);
    if (rc || !t || !strstr(t, want)) printf("  | %s\n", t ? t : "(no output)");
    free(t);
  }
}

/* ---- the watchdog, inside an MPI world (test_tp --watchdog stall|late under mpirun -np 3) ---- */

/* A TP group of 3 runs an allreduce; rank 2 comes 2 s late (late: the others wait, --timeout 0)
 * or not at all (stall: --timeout 1). */
static int watchdog_child(int argc, char **argv, const char *mode) {
  char err[4096];
  RtComm *c = NULL;
  if (rt_comm_init(&argc, &argv, &c, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  int me = rt_comm_rank(c), subs[8], nsub = 0, model_tied = 0, stall = !strcmp(mode, "stall");
  RtProg *p = fake_prog(3, 1, me, subs, &nsub);
  RtDev *dev = NULL;
  if (rt_comm_size(c) != 3 || rt_mesh_check(c, p, "watchdog", &model_tied, err, sizeof err)) {
    fprintf(stderr, "rank %d: 3 ranks expected; %s\n", me, err);
    rt_comm_finalize(c);
    return 1;
  }
  rt_comm_groups(c, p);
  if (rt_dev_open("cpu", rt_comm_local_rank(c), &dev, err, sizeof err) || rt_dev_alloc(dev, 64)) {
    fprintf(stderr, "rank %d: %s\n", me, dev ? rt_dev_error(dev) : err);
    rt_comm_finalize(c);
    return 1;
  }
  rt_comm_set_timeout(c, stall ? 1 : 0);
  rt_comm_set_where(
      c, &(RtWhere){
             .step = 2, .entry = 5, .block = RT_BLK_BACKWARD, .instr = 7, .mb = 1, .line = 42, .file = "fake.prog"});
  if (me == 2) sleep(stall ? 60 : 2); /* stall: the job ends before */
  rt_comm_allreduce(c, dev, RT_G_TP, 0, RT_OP_SUM, 0, 5, PP_F32);
  if (me == 0) printf("watchdog %s: the allreduce is done\n", mode);
  rt_dev_close(dev);
  rt_prog_free(p);
  rt_comm_finalize(c);
  return 0;
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The line of text t that starts with prefix, in line (empty when there is none). */
static void line_of(const char *t, const char *prefix, char *line, size_t n) {
  line[0] = 0;
  for (const char *l = t; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    if (!strncmp(l, prefix, strlen(prefix))) {
      size_t k = strchr(l, '\n') ? (size_t)(strchr(l, '\n') - l) : strlen(l);
      snprintf(line, n, "%.*s", (int)(k < n ? k : n - 1), l);
      return;
    }
}

static void test_watchdog(const char *self) {
  char out[1024], l0[1024], l1[1024];
  static const char want[] =
      "waiting for rank 2 (allreduce tp sum of 5 floats; step 3, micro-batch 1, schedule entry 5, "
      "backward instruction 7 at fake.prog:42)";
  snprintf(out, sizeof out, "%s/watchdog_stall.txt", dir);
  double t0 = seconds();
  quiet = 1;
  int rc = sh(MPIRUN "-np 3 %s --watchdog stall > %s 2>&1", self, out);
  quiet = 0;
  double took = seconds() - t0;
  char *t = read_text(out, NULL);
  line_of(t ? t : "", "ppr: rank 0: error: no progress for ", l0, sizeof l0);
  line_of(t ? t : "", "ppr: rank 1: error: no progress for ", l1, sizeof l1);
  int ok = rc != 0 && took < 20 && strstr(l0, want) && strstr(l1, want) && !strstr(t, "ppr: rank 2: error");
  check(ok,
        "watchdog: a TP group of 3 whose rank 2 never joins the allreduce, --timeout 1: ranks 0 and 1 each name "
        "rank 2 alone (not each other, both being in the call) and where they are; the job ends non-zero in %.1f s",
        took);
  if (!ok) printf("  | exit %d\n  | %s\n", rc, t ? t : "(no output)");
  free(t);

  snprintf(out, sizeof out, "%s/watchdog_late.txt", dir);
  t0 = seconds();
  rc = sh(MPIRUN "-np 3 %s --watchdog late > %s 2>&1", self, out);
  took = seconds() - t0;
  t = read_text(out, NULL);
  ok = rc == 0 && t && strstr(t, "watchdog late: the allreduce is done") && took >= 2;
  check(ok, "watchdog: --timeout 0 waits as long as it takes (rank 2 joins 2 s late, the allreduce completes)");
  if (!ok) printf("  | exit %d\n  | %s\n", rc, t ? t : "(no output)");
  free(t);
}

/* ---- safetensors helpers ------------------------------------------------------------------- */

/* Tensor by tensor, the same names, shapes and bits (a may lack `skip`). */
static int same_file(const char *a_path, const char *b_path, const char *skip, char *why, size_t wn) {
  char err[512];
  RtStFile *a = NULL, *b = NULL;
  if (rt_st_open(a_path, &a, err, sizeof err) || rt_st_open(b_path, &b, err, sizeof err)) {
    snprintf(why, wn, "%s", err);
    rt_st_close(a);
    return 0;
  }
  int ok = 1, nb = 0;
  for (int i = 0; i < rt_st_count(b) && ok; i++) {
    const char *name = rt_st_name(b, i);
    if (skip && !strcmp(name, skip)) continue;
    nb++;
    int j = rt_st_find(a, name);
    int64_t da[RT_ST_MAX_NDIM], db[RT_ST_MAX_NDIM];
    int na = j < 0 ? -1 : rt_st_shape(a, j, da, RT_ST_MAX_NDIM), nd = rt_st_shape(b, i, db, RT_ST_MAX_NDIM);
    if (na != nd || memcmp(da, db, (size_t)nd * sizeof *da)) {
      snprintf(why, wn, "%s: missing or of another shape", name);
      ok = 0;
      break;
    }
    int64_t n = rt_st_numel(b, i);
    float *x = malloc((size_t)n * 4 + 4), *y = malloc((size_t)n * 4 + 4);
    rt_st_read_f32(a, j, x, (size_t)n, err, sizeof err);
    rt_st_read_f32(b, i, y, (size_t)n, err, sizeof err);
    if (memcmp(x, y, (size_t)n * 4)) {
      int64_t k = 0;
      while (x[k] == y[k]) k++;
      snprintf(why, wn, "%s differs at element %lld (%.9g vs %.9g)", name, (long long)k, x[k], y[k]);
      ok = 0;
    }
    free(x);
    free(y);
  }
  if (ok && rt_st_count(a) != nb) {
    snprintf(why, wn, "%d tensors, not %d", rt_st_count(a), nb);
    ok = 0;
  }
  rt_st_close(a);
  rt_st_close(b);
  return ok;
}

/* A dense checkpoint: every tensor of `like`, random values; tied_head: also lm_head.weight as a
 * copy of the embedding (a head that differs at element head_diff, unless it is -1). */
static void random_file(const char *like, const char *path, int tied_head, int64_t head_diff) {
  char err[512];
  RtStFile *f = NULL;
  if (rt_st_open(like, &f, err, sizeof err)) {
    printf("  | %s\n", err);
    return;
  }
  int n = rt_st_count(f), m = n + (tied_head ? 1 : 0);
  const char **names = calloc((size_t)m, sizeof *names);
  int *nd = calloc((size_t)m, sizeof *nd);
  int64_t(*shapes)[RT_ST_MAX_NDIM] = calloc((size_t)m, sizeof *shapes);
  const int64_t **sp = calloc((size_t)m, sizeof *sp);
  float **data = calloc((size_t)m, sizeof *data);
  uint64_t s = 12345;
  for (int i = 0; i < n; i++) {
    names[i] = rt_st_name(f, i);
    nd[i] = rt_st_shape(f, i, shapes[i], RT_ST_MAX_NDIM);
    sp[i] = shapes[i];
    int64_t k = rt_st_numel(f, i);
    data[i] = malloc((size_t)k * 4 + 4);
    for (int64_t j = 0; j < k; j++) data[i][j] = (float)((double)((s = rt_splitmix64(s)) >> 11) * 0x1p-53 - 0.5) * 0.1f;
  }
  if (tied_head) {
    int e = rt_st_find(f, "model.embed_tokens.weight");
    names[n] = "lm_head.weight";
    nd[n] = nd[e];
    sp[n] = shapes[e];
    int64_t k = rt_st_numel(f, e);
    data[n] = malloc((size_t)k * 4);
    memcpy(data[n], data[e], (size_t)k * 4);
    if (head_diff >= 0) data[n][head_diff] += 1.0f;
  }
  if (rt_st_write(path, m, names, nd, sp, (const float *const *)data, err, sizeof err)) printf("  | %s\n", err);
  for (int i = 0; i < m; i++) free(data[i]);
  free(names);
  free(nd);
  free(shapes);
  free(sp);
  free(data);
  rt_st_close(f);
}

/* ---- programs from ppc --------------------------------------------------------------------- */

static int compile(const char *model, int tp, int pp, int dp, const char *name) {
  return sh("%s/ppc %s --tp %d --pp %d --dp %d --microbatches 4 -o %s/%s > %s/%s.ppc.txt 2>&1", bin, model, tp, pp, dp,
            dir, name, dir, name);
}

/* ppr on NP ranks (1: without mpirun); the output in DIR/last.txt, which *out gets (free it). */
static int ppr(int np, const char *name, const char *args, char **out) {
  char o[1024];
  snprintf(o, sizeof o, "%s/last.txt", dir);
  int rc;
  quiet = out != NULL;
  if (np == 1) rc = sh("%s/ppr %s/%s %s > %s 2>&1", bin, dir, name, args, o);
  else rc = sh(MPIRUN "-np %d %s/ppr %s/%s %s > %s 2>&1", np, bin, dir, name, args, o);
  quiet = 0;
  if (out) *out = read_text(o, NULL);
  return rc;
}

static void test_shards(void) {
  static const struct {
    const char *model, *name;
    int tp, pp, dp;
  } m[] = {
      {"tests/models/tiny_pad.pdl", "pad_1", 1, 1, 1},       {"tests/models/tiny_pad.pdl", "pad_t4", 4, 1, 1},
      {"tests/models/tiny_pad.pdl", "pad_t2p2d2", 2, 2, 2},  {"tests/models/tiny_pad.pdl", "pad_t4p2", 4, 2, 1},
      {"tests/models/tiny_untied.pdl", "untied_1", 1, 1, 1}, {"tests/models/tiny_untied.pdl", "untied_t2", 2, 1, 1},
  };
  for (size_t i = 0; i < sizeof m / sizeof *m; i++)
    if (compile(m[i].model, m[i].tp, m[i].pp, m[i].dp, m[i].name)) {
      check(0, "ppc %s --tp %d --pp %d --dp %d", m[i].model, m[i].tp, m[i].pp, m[i].dp);
      return;
    }
  char why[1024], args[4096], ref[700], got[700], rnd[700], *out = NULL;
  /* --seed: every mesh saves the one-rank run's weights, bit for bit */
  snprintf(ref, sizeof ref, "%s/pad_seed.safetensors", dir);
  snprintf(args, sizeof args, "--seed 5 --steps 0 --save %s --quiet", ref);
  ppr(1, "pad_1", args, NULL);
  for (int i = 1; i <= 3; i++) {
    int np = m[i].tp * m[i].pp * m[i].dp;
    snprintf(got, sizeof got, "%s/%s_seed.safetensors", dir, m[i].name);
    snprintf(args, sizeof args, "--seed 5 --steps 0 --save %s --quiet", got);
    int rc = ppr(np, m[i].name, args, NULL);
    int ok = rc == 0 && same_file(got, ref, NULL, why, sizeof why);
    check(ok,
          "tiny_pad tp %d pp %d dp %d: --seed 5 --save gives the one-rank weights, tensor by tensor (the "
          "vocab table of 250 rows reassembled from its shards, padding dropped)",
          m[i].tp, m[i].pp, m[i].dp);
    if (!ok) printf("  | %s\n", rc ? "ppr failed" : why);
  }
  snprintf(got, sizeof got, "%s/pad_t4_lr0.safetensors", dir);
  snprintf(args, sizeof args, "--seed 5 --steps 2 --lr 0 --save %s --quiet", got);
  int rc = ppr(4, "pad_t4", args, NULL);
  check(rc == 0 && same_file(got, ref, NULL, why, sizeof why),
        "tiny_pad tp 4: two steps with --lr 0 leave the seeded weights as they were");
  snprintf(ref, sizeof ref, "%s/untied_seed.safetensors", dir);
  snprintf(args, sizeof args, "--seed 5 --steps 0 --save %s --quiet", ref);
  ppr(1, "untied_1", args, NULL);
  snprintf(got, sizeof got, "%s/untied_t2_seed.safetensors", dir);
  snprintf(args, sizeof args, "--seed 5 --steps 0 --save %s --quiet", got);
  rc = ppr(2, "untied_t2", args, NULL);
  check(rc == 0 && same_file(got, ref, NULL, why, sizeof why),
        "tiny_untied tp 2: --seed 5 --save gives the one-rank weights (its own lm_head.weight too)");

  /* --init of a dense file: each rank reads its slice; --save puts them together again */
  snprintf(ref, sizeof ref, "%s/pad_seed.safetensors", dir);
  snprintf(rnd, sizeof rnd, "%s/pad_random.safetensors", dir);
  random_file(ref, rnd, 1, -1);
  for (int i = 1; i <= 3; i++) {
    int np = m[i].tp * m[i].pp * m[i].dp;
    snprintf(got, sizeof got, "%s/%s_init.safetensors", dir, m[i].name);
    snprintf(args, sizeof args, "--init %s --steps 0 --save %s --quiet", rnd, got);
    rc = ppr(np, m[i].name, args, NULL);
    int ok = rc == 0 && same_file(got, rnd, "lm_head.weight", why, sizeof why);
    check(ok,
          "tiny_pad tp %d pp %d dp %d: --init of a dense file (with lm_head.weight, a copy of the tied "
          "table) and --save give the file back",
          m[i].tp, m[i].pp, m[i].dp);
    if (!ok) printf("  | %s\n", rc ? "ppr failed" : why);
  }
  /* the same start, trained on a mesh and on one rank */
  snprintf(ref, sizeof ref, "%s/pad_1_w.safetensors", dir);
  snprintf(args, sizeof args, "--init %s --steps 3 --clip 1 --eps 1e-6 --save %s --log %s/pad_1.jsonl --quiet", rnd,
           ref, dir);
  char lp[700];
  snprintf(lp, sizeof lp, "%s/pad_1.jsonl", dir);
  remove(lp); /* a new run's log */
  ppr(1, "pad_1", args, NULL);
  snprintf(got, sizeof got, "%s/pad_t4p2_w.safetensors", dir);
  snprintf(args, sizeof args, "--init %s --steps 3 --clip 1 --eps 1e-6 --save %s --log %s/pad_t4p2.jsonl --quiet", rnd,
           got, dir);
  snprintf(lp, sizeof lp, "%s/pad_t4p2.jsonl", dir);
  remove(lp);
  rc = ppr(8, "pad_t4p2", args, NULL);
  {
    double worst = rc ? 1 : 0;
    char err[512];
    RtStFile *a = NULL, *b = NULL;
    if (!rc && !rt_st_open(got, &a, err, sizeof err) && !rt_st_open(ref, &b, err, sizeof err))
      for (int i = 0; i < rt_st_count(b); i++) {
        int j = rt_st_find(a, rt_st_name(b, i));
        int64_t n = rt_st_numel(b, i);
        if (j < 0 || rt_st_numel(a, j) != n) {
          worst = 1;
          break;
        }
        float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
        rt_st_read_f32(a, j, x, (size_t)n, err, sizeof err);
        rt_st_read_f32(b, i, y, (size_t)n, err, sizeof err);
        double num = 0, den = 0;
        for (int64_t k = 0; k < n; k++) num += (x[k] - y[k]) * (double)(x[k] - y[k]), den += (double)y[k] * y[k];
        double r = sqrt(num / (den > 0 ? den : 1));
        if (r > worst || r != r) worst = r;
        free(x);
        free(y);
      }
    else worst = 1;
    rt_st_close(a);
    rt_st_close(b);
    char p1[800], p2[800];
    snprintf(p1, sizeof p1, "%s/pad_1.jsonl", dir);
    snprintf(p2, sizeof p2, "%s/pad_t4p2.jsonl", dir);
    char *l1 = read_text(p1, NULL), *l2 = read_text(p2, NULL);
    double a1 = NAN, a2 = NAN;
    if (l1 && strstr(l1, "\"step\":3")) a1 = strtod(strstr(strstr(l1, "\"step\":3"), "\"loss\":") + 7, NULL);
    if (l2 && strstr(l2, "\"step\":3")) a2 = strtod(strstr(strstr(l2, "\"step\":3"), "\"loss\":") + 7, NULL);
    free(l1);
    free(l2);
    check(worst < 1e-5 && fabs(a1 - a2) < 1e-6 * fabs(a1),
          "tiny_pad tp 4 pp 2 from the same --init: the third step's loss (%.7f vs %.7f) and the weights after "
          "3 steps (rel %.1e) are the one-rank run's",
          a2, a1, worst);
  }

  /* --init errors on a mesh: shapes are the dense ones; the tied head is compared slice by slice */
  snprintf(got, sizeof got, "%s/pad_local.safetensors", dir);
  {
    char err[512];
    const char *names[1] = {"model.embed_tokens.weight"};
    int nd[1] = {2};
    int64_t s0[2] = {64, 64}; /* a rank's rows (250 over 4, padded to 64) */
    const int64_t *sp[1] = {s0};
    float *z = calloc(64 * 64, 4);
    const float *d[1] = {z};
    rt_st_write(got, 1, names, nd, sp, d, err, sizeof err);
    free(z);
  }
  snprintf(args, sizeof args, "--init %s --steps 0", got);
  rc = ppr(4, "pad_t4", args, &out);
  check(rc != 0 && out &&
            strstr(out, "tensor model.embed_tokens.weight has shape [64,64], the program's param 0 needs [250,64] "
                        "(the dense tensor; this rank holds a shard of it)"),
        "tiny_pad tp 4: --init of a shard-shaped tensor names the dense shape");
  free(out);
  snprintf(rnd, sizeof rnd, "%s/pad_badhead.safetensors", dir);
  random_file(ref, rnd, 1, 200 * 64 + 3); /* dense row 200: rank 3's shard (rows 192..249) */
  snprintf(args, sizeof args, "--init %s --steps 0", rnd);
  rc = ppr(4, "pad_t4", args, &out);
  check(rc != 0 && out &&
            strstr(out, "tensor lm_head.weight differs from model.embed_tokens.weight at element 12803 ("),
        "tiny_pad tp 4: a lm_head.weight that is not the tied table is refused, naming the dense element");
  if (!(rc != 0 && out && strstr(out, "element 12803"))) printf("  | %s\n", out ? out : "");
  free(out);
}

/* ---- the ranks' listings must agree: edited copies, re-hashed ------------------------------- */

/* DIR/name/rankR.prog with `from` replaced by `to` (first occurrence), its hash recomputed. */
static int edit(const char *name, int r, const char *from, const char *to) {
  char p[800];
  snprintf(p, sizeof p, "%s/%s/rank%d.prog", dir, name, r);
  size_t n;
  char *t = read_text(p, &n);
  char *at = t ? strstr(t, from) : NULL;
  if (!at) {
    printf("  | test bug: '%s' not in %s\n", from, p);
    free(t);
    return -1;
  }
  size_t fl = strlen(from), tl = strlen(to);
  char *u = malloc(n + tl + 1);
  memcpy(u, t, (size_t)(at - t));
  memcpy(u + (at - t), to, tl);
  memcpy(u + (at - t) + tl, at + fl, n - (size_t)(at - t) - fl + 1);
  size_t un = n - fl + tl;
  char *hl = strstr(u, "\nhash ");
  char *body = strchr(hl + 1, '\n') + 1;
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)rt_fnv1a64(body, un - (size_t)(body - u)));
  memcpy(hl + 6, hex, 16);
  FILE *f = fopen(p, "wb");
  fwrite(u, 1, un, f);
  fclose(f);
  free(t);
  free(u);
  return 0;
}

/* The first whole line (with its newline) of DIR/name/rankR.prog that contains both a and b. */
static int line_with(const char *name, int r, const char *a, const char *b, char *out, size_t n) {
  char p[800];
  snprintf(p, sizeof p, "%s/%s/rank%d.prog", dir, name, r);
  char *t = read_text(p, NULL);
  for (char *l = t; l && *l;) {
    char *e = strchr(l, '\n');
    size_t len = e ? (size_t)(e - l + 1) : strlen(l);
    char save = l[len];
    l[len] = 0;
    int hit = strstr(l, a) && strstr(l, b) && len < n;
    if (hit) snprintf(out, n, "%s", l);
    l[len] = save;
    if (hit) {
      free(t);
      return 0;
    }
    l += len;
  }
  printf("  | test bug: no line with '%s' and '%s' in %s\n", a, b, p);
  free(t);
  return -1;
}

/* line with its first `from` replaced by `to`, into out (n bytes); -1 when absent or too long */
static int replaced(const char *line, const char *from, const char *to, char *out, size_t n) {
  const char *at = strstr(line, from);
  if (!at || strlen(line) - strlen(from) + strlen(to) >= n) {
    printf("  | test bug: '%s' not in '%s'\n", from, line);
    return -1;
  }
  snprintf(out, n, "%.*s%s%s", (int)(at - line), line, to, at + strlen(from));
  return 0;
}

static void test_listings(void) {
  char *out = NULL;
  if (compile("examples/tiny.pdl", 2, 1, 1, "own") || compile("examples/tiny.pdl", 2, 1, 1, "coll") ||
      compile("examples/tiny.pdl", 2, 2, 2, "dpcoll")) {
    check(0, "ppc examples/tiny.pdl for the listing checks");
    return;
  }
  /* rank 1 claims rank 0's rows of a column-parallel weight (its line found by name: its offset
   * is ppc's to choose) */
  char line[512], claim[512];
  if (!line_with("own", 1, "model.layers.0.self_attn.q_proj.weight f32 [32,64] @", " shard 0 32 32 64", line,
                 sizeof line) &&
      !replaced(line, " shard 0 32 32 64", " shard 0 0 32 64", claim, sizeof claim))
    edit("own", 1, line, claim);
  int rc = ppr(2, "own", "--steps 1", &out);
  check(rc != 0 && out &&
            strstr(out, "model_param model.layers.0.self_attn.q_proj.weight: rows [0, 32) of dim 0 are owned by") &&
            strstr(out, "model_param model.layers.0.self_attn.q_proj.weight: no rank owns rows [32, 64) of dim 0"),
        "tp 2: two ranks owning the same rows of a weight, none the others: refused at start-up");
  if (!(rc != 0 && out && strstr(out, "rows [0, 32)"))) printf("  | %s\n", out ? out : "");
  free(out);
  out = NULL;
  /* a shard in parts (GPT-2's fused q, k, v): rows counted in dense coordinates, every part */
  if (compile("tests/models/tiny_gpt2.pdl", 2, 1, 1, "ownparts") ||
      line_with("ownparts", 1, "transformer.h.0.attn.c_attn.weight f32 [64,96] @", " shard 1 32 96 192 parts 3", line,
                sizeof line) ||
      replaced(line, " shard 1 32 96 192", " shard 1 0 96 192", claim, sizeof claim) ||
      edit("ownparts", 1, line, claim))
    check(0, "ppc tests/models/tiny_gpt2.pdl --tp 2 for the ownership of a shard in parts");
  else {
    rc = ppr(2, "ownparts", "--steps 1", &out);
    check(rc != 0 && out &&
              strstr(out, "model_param transformer.h.0.attn.c_attn.weight: rows [0, 32) of dim 1 are owned by") &&
              strstr(out, "model_param transformer.h.0.attn.c_attn.weight: no rank owns rows [32, 64) of dim 1"),
          "tp 2, a shard in 3 parts: two ranks owning the same rows of every part, none the others: refused");
    if (!(rc != 0 && out && strstr(out, "no rank owns rows [32, 64)"))) printf("  | %s\n", out ? out : "");
    free(out);
  }
  /* rank 1 skips one of the TP group's allreduces: it would hang or mix up buffers */
  if (!line_with("coll", 1, "  allreduce tp sum @", "# row-parallel linear: partial sums", line, sizeof line))
    edit("coll", 1, line, "");
  rc = ppr(2, "coll", "--steps 1", &out);
  check(rc != 0 && out && strstr(out, "rank1.prog: its schedule or its 'allreduce tp' instructions differ from") &&
            strstr(out, "(the same TP group, stage 0 dp_rank 0)"),
        "tp 2: a rank whose allreduce tp instructions differ from its TP group's is refused at start-up");
  if (!(rc != 0 && out && strstr(out, "differ from"))) printf("  | %s\n", out ? out : "");
  free(out);
  /* a replica that runs one more dp collective than its partner */
  char *t = NULL;
  {
    char p[800];
    snprintf(p, sizeof p, "%s/dpcoll/rank6.prog", dir);
    t = read_text(p, NULL);
  }
  char *ar = t ? strstr(t, "  allreduce tp max ") : NULL;
  if (ar) {
    char line[256], to[600];
    size_t k = (size_t)(strchr(ar, '\n') - ar) + 1;
    snprintf(line, sizeof line, "%.*s", (int)k, ar);
    snprintf(to, sizeof to, "%s  allreduce dp max %s", line, line + strlen("  allreduce tp max "));
    edit("dpcoll", 6, line, to);
    rc = ppr(8, "dpcoll", "--steps 1", &out);
    check(rc != 0 && out && strstr(out, "rank6.prog: its schedule or its 'allreduce dp' instructions differ from") &&
              strstr(out, "(the same DP group, stage 1 tp_rank 0)"),
          "tp 2 pp 2 dp 2: a replica whose allreduce dp instructions differ from its DP group's is refused");
    if (!(rc != 0 && out && strstr(out, "differ from"))) printf("  | %s\n", out ? out : "");
    free(out);
  } else {
    check(0, "tp 2 pp 2 dp 2: rank6.prog has an allreduce tp max");
  }
  free(t);
  /* context parallelism: a cp rank that skips one of its group's K/V gathers; two ranks that claim
   * the same place (cp_rank) in the mesh */
  if (sh("%s/ppc examples/tiny.pdl --cp 2 --microbatches 4 -o %s/cpcoll > /dev/null 2>&1", bin, dir) ||
      line_with("cpcoll", 1, "  allgather cp ", "attention L0", line, sizeof line) || edit("cpcoll", 1, line, ""))
    check(0, "ppc examples/tiny.pdl --cp 2 and an allgather cp in rank1.prog");
  else {
    rc = ppr(2, "cpcoll", "--steps 1", &out);
    check(
        rc != 0 && out &&
            strstr(out, "rank1.prog: its schedule or its 'allgather cp' and 'reduce_scatter cp' instructions differ") &&
            strstr(out, "(the same cp group, stage 0 tp_rank 0 dp_rank 0)"),
        "cp 2: a rank whose allgather cp instructions differ from its cp group's is refused at start-up");
    if (!(rc != 0 && out && strstr(out, "differ"))) printf("  | %s\n", out ? out : "");
    free(out);
  }
  if (sh("%s/ppc examples/tiny.pdl --cp 2 --microbatches 4 -o %s/cpplace > /dev/null 2>&1", bin, dir) ||
      edit("cpplace", 1, "dp_rank 0 cp_rank 1\n", "dp_rank 0 cp_rank 0\n"))
    check(0, "ppc examples/tiny.pdl --cp 2 and rank1.prog's cp_rank");
  else {
    rc = ppr(2, "cpplace", "--steps 1", &out);
    check(rc != 0 && out && strstr(out, "rank1.prog: stage 0 tp_rank 0, dp_rank 0, cp_rank 0 is also") &&
              strstr(out, "rank0.prog's place in the mesh"),
          "cp 2: two ranks at the same cp_rank are refused at start-up");
    if (!(rc != 0 && out && strstr(out, "place in the mesh"))) printf("  | %s\n", out ? out : "");
    free(out);
  }
}

int main(int argc, char **argv) {
  if (argc == 5 && !strcmp(argv[1], "--allreduce"))
    return allreduce_child(argc, argv, atoi(argv[2]), atoi(argv[3]), argv[4]);
  if (argc == 3 && !strcmp(argv[1], "--watchdog")) return watchdog_child(argc, argv, argv[2]);
  const char *slash = strrchr(argv[0], '/');
  if (slash) snprintf(bin, sizeof bin, "%.*s", (int)(slash - argv[0]), argv[0]);
  snprintf(dir, sizeof dir, "%s/tp", bin);
  if (sh("rm -rf %s && mkdir -p %s", dir, dir)) return 1;
  test_allreduce(argv[0]);
  test_watchdog(argv[0]);
  test_shards();
  test_listings();
  return check_done();
}
