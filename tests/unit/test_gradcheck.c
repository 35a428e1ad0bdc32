/* test_gradcheck.c — per-op finite-difference gradient check. For each small model of
 * tests/gradcheck/ (one op or rule each): compile it with ppc, write deterministic random weights
 * and tokens, get the analytic gradient g of the step's loss from ppr (--lr 0 --save-grads), then
 * compare directional derivatives with central differences of the loss that ppr reports:
 *
 *   global:     along u = g/|g| and along 3 random unit directions, all parameters perturbed;
 *   per tensor: for every parameter T, along T's own gradient direction, only T perturbed (a
 *               random direction in T when g_T = 0, where the derivative must then be ~0).
 *
 * ppc and ppr are found next to this binary (argv[0]), as test_fixtures does; the work files go to
 * BUILD/gradcheck/MODEL/. Each check prints one line; the last line is "N passed, M failed". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "rt_io.h"

/* One model of tests/gradcheck/ and the step h of its differences (the loss is a float32 sum:
 * h must keep h·|g| far above its rounding, and h² · L''' below 1% of |g|). */
typedef struct {
  const char *name;
  double h;
} Model;

static const Model models[] = {
    {"embedding", 1e-2},
    {"pos_embedding", 1e-2},
    {"linear", 1e-2},
    {"linear_bias", 1e-2},
    {"matmul_bias", 1e-2},
    {"rmsnorm", 1e-2},
    {"rmsnorm_offset", 1e-2}, /* x*rstd*(w + 1) */
    {"scale", 1e-2},
    {"softcap", 1e-2},
    {"layernorm", 1e-2},
    {"colsum", 1e-2}, /* the column sums over more rows than a part: two kernels each */
    {"rope", 1e-2},
    {"rope_llama3", 1e-2}, /* rope with Llama-3 frequency scaling */
    {"heads", 1e-2},
    {"attention_gqa", 1e-2},
    {"attention_window", 1e-2}, /* a sliding window of 3 of the 8 positions */
    {"attention_full", 1e-2},
    {"attention_scale", 1e-2},
    {"silu", 1e-2},
    {"gelu", 1e-2},
    {"relu", 1e-2},
    {"add_mul", 1e-2},
    {"chunk", 1e-2},
    {"chunk_mixed", 1e-2},
    {"transpose_kernel", 1e-2},
    {"transpose_gemm", 1e-2},
    {"tied", 1e-2},
    {"multi_use", 1e-2},
    {"microbatches", 3e-3},
};

/* Tolerance. The loss ppr reports is float32 (a float32 forward pass, a float32 mean over the
 * tokens), so each loss carries a rounding error of a few ulps (an ulp is 2.4e-7 for a loss near
 * 3). A central difference (L(w+hu) − L(w−hu)) / 2h therefore has an error of about ulp/h from
 * rounding (2.4e-5 at h = 1e-2; LOSS_ULPS/h is allowed for it), plus the truncation error
 * h²/6 · L'''(u), ~1e-5..1e-4 for these O(1) models at h = 1e-2 (h is smaller for a model whose
 * |g| is large). Both stay well below 1e-2 · |g| for gradients of norm ~0.02..5, while a wrong
 * rule (a flipped sign, a missing term or factor, a wrong index or part) moves g·u by a large
 * fraction of |g|. The weights are rounded to float32 after the perturbation; the analytic side
 * uses the perturbation actually applied, g·(w⁺ − w⁻) / 2h, so that rounding is no error. */
#define REL_TOL   1e-2
#define LOSS_ULPS 4.0

static int pass, fail;
static char bin[512] = "build"; /* the directory holding ppc, ppr and this test */

/* ---- deterministic random numbers ------------------------------------------------------------ */

static uint64_t rng_state;
static uint64_t rng_next(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_uniform(void) { return ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0; } /* (0,1) */
static double rng_normal(void) { return sqrt(-2 * log(rng_uniform())) * cos(6.283185307179586 * rng_uniform()); }
static void rng_seed(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  rng_state = h;
}

/* ---- the program's parameters, from its listing ------------------------------------------------ */

#define MAXP 64
typedef struct {
  char name[256];
  int ndim;
  int64_t dims[8];
  int64_t n, off; /* elements, and where the tensor starts in the flat vector of all parameters */
  char init[16];
  double std;
} Param;

typedef struct {
  Param p[MAXP];
  int np;
  int64_t total;
  int B, S, M, V;
} Prog;

/* The header's step and vocab lines and every param line; -1 if anything does not parse. */
static int read_listing(const char *path, Prog *pg) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[2048];
  int bad = 0;
  memset(pg, 0, sizeof *pg);
  while (!bad && fgets(line, sizeof line, f)) {
    if (!strncmp(line, "step ", 5))
      bad = sscanf(line, "step micro_batch %d seq %d microbatches %d", &pg->B, &pg->S, &pg->M) != 3;
    else if (!strncmp(line, "vocab ", 6)) bad = sscanf(line, "vocab %d", &pg->V) != 1;
    else if (!strncmp(line, "param ", 6)) {
      /* param INDEX NAME f32 [D0,D1,...] @OFF init normal STD | ones | zeros ... */
      if (pg->np == MAXP) {
        bad = 1;
        break;
      }
      Param *q = &pg->p[pg->np];
      char shape[256];
      int idx;
      if (sscanf(line, "param %d %255s f32 %255s %*s init %15s %lf", &idx, q->name, shape, q->init, &q->std) < 4 ||
          shape[0] != '[') {
        bad = 1;
        break;
      }
      q->n = 1;
      for (char *s = shape + 1; *s != ']';) {
        if (q->ndim == 8 || *s < '0' || *s > '9') {
          bad = 1;
          break;
        }
        q->dims[q->ndim] = strtoll(s, &s, 10);
        q->n *= q->dims[q->ndim++];
        if (*s == ',') s++;
      }
      q->off = pg->total;
      pg->total += q->n;
      pg->np++;
    }
  }
  fclose(f);
  return !bad && pg->np > 0 && pg->B > 0 && pg->S > 0 && pg->M > 0 && pg->V > 0 ? 0 : -1;
}

/* ---- files and processes ------------------------------------------------------------------------ */

static int write_weights(const char *path, const Prog *pg, const float *w) {
  const char *names[MAXP];
  int ndims[MAXP];
  const int64_t *shapes[MAXP];
  const float *data[MAXP];
  for (int i = 0; i < pg->np; i++) {
    names[i] = pg->p[i].name;
    ndims[i] = pg->p[i].ndim;
    shapes[i] = pg->p[i].dims;
    data[i] = w + pg->p[i].off;
  }
  char err[512];
  if (rt_st_write(path, pg->np, names, ndims, shapes, data, err, sizeof err)) {
    printf("FAIL writing %s: %s\n", path, err);
    return -1;
  }
  return 0;
}

/* The gradients in the order of pg, by name; every parameter must be there. */
static int read_grads(const char *path, const Prog *pg, double *g) {
  char err[512];
  RtStFile *f = NULL;
  if (rt_st_open(path, &f, err, sizeof err)) {
    printf("FAIL reading %s: %s\n", path, err);
    return -1;
  }
  int rc = 0;
  float *tmp = malloc((size_t)pg->total * sizeof *tmp);
  for (int i = 0; i < pg->np && !rc; i++) {
    int j = rt_st_find(f, pg->p[i].name);
    if (j < 0 || rt_st_numel(f, j) != pg->p[i].n || rt_st_read_f32(f, j, tmp, (size_t)pg->p[i].n, err, sizeof err)) {
      printf("FAIL %s: gradient of %s missing or unreadable\n", path, pg->p[i].name);
      rc = -1;
      break;
    }
    for (int64_t k = 0; k < pg->p[i].n; k++) g[pg->p[i].off + k] = tmp[k];
  }
  free(tmp);
  rt_st_close(f);
  return rc;
}

static int sh(const char *cmd) {
  int rc = system(cmd);
  if (rc != 0) printf("FAIL command (exit %d): %s\n", rc, cmd);
  return rc;
}

/* One ppr step from the weights at wpath; the loss from its log (NAN on any failure, reported). */
static double run_loss(const char *dir, const char *wpath, const char *grads) {
  char cmd[4096], log[1100];
  snprintf(log, sizeof log, "%s/log.jsonl", dir);
  remove(log);
  snprintf(cmd, sizeof cmd,
           "%s/ppr %s/prog --quiet --init %s --data %s/tokens.txt --steps 1 --lr 0 --wd 0 --log %s%s%s", bin, dir,
           wpath, dir, log, grads ? " --save-grads " : "", grads ? grads : "");
  if (sh(cmd)) return NAN;
  char *text = slurp(log);
  const char *p = text ? strstr(text, "\"loss\":") : NULL;
  double loss = p ? strtod(p + 7, NULL) : NAN;
  if (!isfinite(loss)) printf("FAIL no finite loss in %s\n", log);
  free(text);
  return loss;
}

/* ---- the checks --------------------------------------------------------------------------------- */

typedef struct {
  const char *model, *dir;
  const Prog *pg;
  const float *w;  /* the weights of the analytic gradient */
  const double *g; /* that gradient */
  double h, loss;
} Ctx;

/* Central difference along the unit vector u (zero outside the perturbed tensors) against g·u;
 * the error must be below REL_TOL · ref (ref: the norm of the gradient being checked) plus
 * LOSS_ULPS ulps of the loss over h. */
static void directional(const Ctx *c, const double *u, const char *what, double ref) {
  int64_t n = c->pg->total;
  float *wp = malloc((size_t)n * sizeof *wp), *wm = malloc((size_t)n * sizeof *wm);
  double an = 0;
  for (int64_t i = 0; i < n; i++) {
    wp[i] = (float)(c->w[i] + c->h * u[i]);
    wm[i] = (float)(c->w[i] - c->h * u[i]);
    an += c->g[i] * ((double)wp[i] - (double)wm[i]);
  }
  an /= 2 * c->h;
  char pp[1100], pm[1100];
  snprintf(pp, sizeof pp, "%s/w_plus.safetensors", c->dir);
  snprintf(pm, sizeof pm, "%s/w_minus.safetensors", c->dir);
  double lp = NAN, lm = NAN;
  if (!write_weights(pp, c->pg, wp) && !write_weights(pm, c->pg, wm)) {
    lp = run_loss(c->dir, pp, NULL);
    lm = run_loss(c->dir, pm, NULL);
  }
  double fd = (lp - lm) / (2 * c->h);
  double ulp = (double)nextafterf((float)fabs(c->loss), INFINITY) - (double)(float)fabs(c->loss);
  double err = fabs(fd - an), tol = REL_TOL * ref + LOSS_ULPS * ulp / c->h;
  int ok = isfinite(fd) && err <= tol;
  printf("%s %-16s %-28s fd % .6e  analytic % .6e  err %.2e  tol %.2e (%.1f%% of it)\n", ok ? "PASS" : "FAIL", c->model,
         what, fd, an, err, tol, 100 * err / tol);
  ok ? pass++ : fail++;
  free(wp);
  free(wm);
}

static double norm(const double *v, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += v[i] * v[i];
  return sqrt(s);
}

/* A random unit vector on [from, from+len), zero elsewhere. */
static void random_unit(double *u, int64_t n, int64_t from, int64_t len) {
  memset(u, 0, (size_t)n * sizeof *u);
  for (int64_t i = from; i < from + len; i++) u[i] = rng_normal();
  double s = norm(u, n);
  for (int64_t i = from; i < from + len; i++) u[i] /= s;
}

static void check_model(const Model *m) {
  char dir[1024], cmd[4096], path[1100];
  snprintf(dir, sizeof dir, "%s/gradcheck/%s", bin, m->name);
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && %s/ppc tests/gradcheck/%s.pdl -o %s/prog", dir, dir, bin,
           m->name, dir);
  if (sh(cmd)) {
    printf("FAIL %s: ppc failed\n", m->name);
    fail++;
    return;
  }
  Prog *pg = malloc(sizeof *pg);
  snprintf(path, sizeof path, "%s/prog/rank0.prog", dir);
  if (read_listing(path, pg)) {
    printf("FAIL %s: cannot read the parameters, step and vocab of %s\n", m->name, path);
    fail++;
    free(pg);
    return;
  }
  rng_seed(m->name);

  /* tokens: a text file whose bytes are the ids, enough for every micro-batch of step 0 */
  snprintf(path, sizeof path, "%s/tokens.txt", dir);
  FILE *f = fopen(path, "wb");
  int ntok = pg->M * pg->B * pg->S + 1;
  for (int i = 0; i < ntok && f; i++) fputc((int)(rng_next() % (uint64_t)(pg->V < 256 ? pg->V : 256)), f);
  if (!f || fclose(f)) {
    printf("FAIL %s: cannot write %s\n", m->name, path);
    fail++;
    free(pg);
    return;
  }

  /* weights: "ones" (norm weights, multipliers) ~1 + N(0, 0.2); "normal(std)" ~N(0, std); "zeros"
   * (biases, addends) ~N(0, 0.3), so that no term starts at a special point */
  int64_t n = pg->total;
  float *w = malloc((size_t)n * sizeof *w);
  double *g = malloc((size_t)n * sizeof *g), *u = malloc((size_t)n * sizeof *u);
  for (int i = 0; i < pg->np; i++) {
    const Param *q = &pg->p[i];
    for (int64_t k = 0; k < q->n; k++) {
      double z = rng_normal();
      w[q->off + k] = (float)(!strcmp(q->init, "ones") ? 1 + 0.2 * z : (!strcmp(q->init, "normal") ? q->std : 0.3) * z);
    }
  }
  char w0[1100], gpath[1100];
  snprintf(w0, sizeof w0, "%s/w0.safetensors", dir);
  snprintf(gpath, sizeof gpath, "%s/grads.safetensors", dir);
  double loss = NAN;
  if (write_weights(w0, pg, w) || !isfinite(loss = run_loss(dir, w0, gpath)) || read_grads(gpath, pg, g)) {
    printf("FAIL %s: no analytic gradient\n", m->name);
    fail++;
    goto done;
  }
  double gn = norm(g, n);
  printf("---- %s: %d tensors, %lld parameters, B %d S %d microbatches %d vocab %d, loss %.6f, |g| %.4e, h %g\n",
         m->name, pg->np, (long long)n, pg->B, pg->S, pg->M, pg->V, loss, gn, m->h);
  Ctx c = {m->name, dir, pg, w, g, m->h, loss};
  if (!(gn > 0)) {
    printf("FAIL %s: the gradient is zero\n", m->name);
    fail++;
    goto done;
  }

  /* all parameters at once */
  for (int64_t i = 0; i < n; i++) u[i] = g[i] / gn;
  directional(&c, u, "all, along g", gn);
  for (int r = 0; r < 3; r++) {
    char what[64];
    snprintf(what, sizeof what, "all, random direction %d", r + 1);
    random_unit(u, n, 0, n);
    directional(&c, u, what, gn);
  }
  /* one tensor at a time, along its own gradient */
  for (int i = 0; i < pg->np; i++) {
    const Param *q = &pg->p[i];
    double tn = norm(g + q->off, q->n);
    char what[300];
    if (tn > 0) {
      memset(u, 0, (size_t)n * sizeof *u);
      for (int64_t k = 0; k < q->n; k++) u[q->off + k] = g[q->off + k] / tn;
      snprintf(what, sizeof what, "%s along g_T", q->name);
      directional(&c, u, what, tn);
    } else { /* a zero gradient: the loss must not move along a random direction of T either */
      random_unit(u, n, q->off, q->n);
      snprintf(what, sizeof what, "%s (g_T = 0) random", q->name);
      directional(&c, u, what, gn);
    }
  }
done:
  free(w);
  free(g);
  free(u);
  free(pg);
}

int main(int argc, char **argv) {
  const char *slash = strrchr(argv[0], '/');
  if (slash) snprintf(bin, sizeof bin, "%.*s", (int)(slash - argv[0]), argv[0]);
  /* single-threaded children: deterministic sums, and cheap on a small machine */
  setenv("OMP_NUM_THREADS", "1", 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  if (argc > 1) /* test_gradcheck NAME [h]: one model, tests/gradcheck/NAME.pdl (for debugging) */
    check_model(&(Model){argv[1], argc > 2 ? strtod(argv[2], NULL) : 1e-2});
  else
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) check_model(&models[i]);
  printf("%d passed, %d failed\n", pass, fail);
  return fail != 0;
}
