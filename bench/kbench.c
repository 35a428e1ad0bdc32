/* kbench.c - each kernel of a stage's listing alone, on buffers of the listing's sizes, against the
 * state of the caches it may find them in: hot (just run), cold (a 64 MB stream read between
 * runs), and just written by the threads, each the share of every buffer that the kernel's static
 * schedule gives that same thread (own) or another one (other). The ratio of in place (ppr's
 * PPR_PROFILE) to these says what a kernel waits on. Usage (bench/kbench.sh builds and runs it):
 *
 *   kbench LISTING SO [REPS]
 *
 * LISTING a rank's .prog, SO its kernels_sN.so; each kernel's first launch line is timed, best of
 * REPS (default 10) runs in each state, on OMP_NUM_THREADS threads. Buffers are filled with small
 * values (int32 ones, token ids and labels, with 0); a listing's scalars are its literals, and
 * runtime ones (s:NAME) plausible values. Kernels that write over their inputs (a softmax, AdamW)
 * run again on what they wrote: their times, not their values, are the point. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>

#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ARGS  64
#define MAX_KERNS 512
#define FLUSH     (64 << 20) /* bytes a cold run is preceded by a read of */

typedef enum { A_PTR, A_F32, A_I64 } Kind;

typedef struct {
  Kind kind;
  size_t bytes;  /* A_PTR */
  bool i32;      /* A_PTR: int32 elements */
  void *p;       /* A_PTR: the buffer */
  double scalar; /* A_F32, A_I64 */
  union {
    void *ptr;
    float f;
    int64_t i;
  } val;
} Arg;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(const char *msg, const char *what) {
  fprintf(stderr, "kbench: %s%s%s\n", msg, what ? ": " : "", what ? what : "");
  exit(2);
}

/* A plausible value of runtime scalar NAME (the optimizer's hyperparameters, a step's counters). */
static double runtime_scalar(const char *name) {
  static const struct {
    const char *name;
    double v;
  } known[] = {{"lr", 1e-3},  {"beta1", 0.9}, {"beta2", 0.95},   {"eps", 1e-8},  {"wd", 0.1},      {"bc1", 0.1},
               {"bc2", 0.05}, {"clip", 1.0},  {"tokscale", 1.0}, {"train", 1.0}, {"seed", 1234.0}, {"rngctr", 1.0}};
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (!strcmp(known[i].name, name)) return known[i].v;
  return 1.0;
}

/* The kinds of NAME__call's arguments, from its line in the kernels' C source: a pointer cast
 * (`*(float **)a[i]`, `*(const int32_t **)a[i]`), a float (`*(float *)a[i]`) or an int64. */
static int call_kinds(const char *src, const char *name, Kind *kinds, bool *i32) {
  char key[160];
  snprintf(key, sizeof key, "void %s__call(void **a) {", name);
  const char *at = strstr(src, key);
  if (!at) return -1;
  const char *end = strchr(at, '\n');
  int n = 0;
  for (const char *q = at + strlen(key); q && q < end && n < MAX_ARGS; q++) {
    const char *cast = strstr(q, "*(");
    if (!cast || cast >= end) break;
    const char *close = strstr(cast, ")a[");
    if (!close || close >= end) break;
    size_t len = (size_t)(close - cast);
    char t[64];
    snprintf(t, sizeof t, "%.*s", (int)(len < sizeof t ? len : sizeof t - 1), cast + 2);
    i32[n] = strstr(t, "int32_t") != NULL;
    kinds[n++] = strstr(t, "**") ? A_PTR : strstr(t, "int64_t") ? A_I64 : A_F32;
    q = close + 2;
  }
  return n;
}

static void fill(Arg *a, int nargs) {
  for (int i = 0; i < nargs; i++) {
    if (a[i].kind != A_PTR) continue;
    if (a[i].i32) memset(a[i].p, 0, a[i].bytes);
    else {
      float *f = a[i].p;
      for (size_t j = 0; j < a[i].bytes / 4; j++) f[j] = (float)((j * 2654435761u) % 1000) * 1e-3f - 0.5f;
    }
  }
}

/* Each thread reads and writes back every buffer's share [t n / T, (t + 1) n / T) of thread `t`
 * (own) or of thread T-1-t (other), as a kernel before this one in a step would have. */
static void write_shares(Arg *a, int nargs, bool other) {
#pragma omp parallel
  {
    int t = omp_get_thread_num(), T = omp_get_num_threads(), s = other ? T - 1 - t : t;
    for (int i = 0; i < nargs; i++) {
      if (a[i].kind != A_PTR) continue;
      size_t n = a[i].bytes / 4, lo = n * (size_t)s / (size_t)T, hi = n * (size_t)(s + 1) / (size_t)T;
      volatile uint32_t *w = a[i].p; /* each element read and stored: its line modified here */
      for (size_t j = lo; j < hi; j++) w[j] = w[j];
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 3) die("usage: kbench LISTING SO [REPS]", NULL);
  int reps = argc > 3 ? atoi(argv[3]) : 10;
  if (reps < 1) die("REPS must be at least 1", argv[3]);
  void *so = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!so) die("cannot load the kernels", dlerror());
  /* the kernels' C source beside the .so (kernels_sN.c), for the arguments' kinds */
  char cpath[4096];
  snprintf(cpath, sizeof cpath, "%.*s.c", (int)(strlen(argv[2]) > 3 ? strlen(argv[2]) - 3 : 0), argv[2]);
  FILE *cf = fopen(cpath, "rb");
  if (!cf) die("cannot open the kernels' C source", cpath);
  fseek(cf, 0, SEEK_END);
  long csz = ftell(cf);
  fseek(cf, 0, SEEK_SET);
  char *src = malloc((size_t)csz + 1);
  if (!src || fread(src, 1, (size_t)csz, cf) != (size_t)csz) die("cannot read", cpath);
  src[csz] = 0;
  fclose(cf);
  FILE *lf = fopen(argv[1], "r");
  if (!lf) die("cannot open the listing", argv[1]);
  unsigned char *flush = malloc(FLUSH);
  if (!flush) die("out of memory", NULL);
  memset(flush, 1, FLUSH);
  char seen[MAX_KERNS][96];
  int nseen = 0;
  double tot[4] = {0};
  printf("%-28s %8s %9s %9s %9s %9s   (µs a call, best of %d; %d threads)\n", "kernel", "MB", "hot", "cold", "own",
         "other", reps, omp_get_max_threads());
  char line[8192];
  while (fgets(line, sizeof line, lf)) {
    char *p = line;
    while (*p == ' ') p++;
    if (strncmp(p, "kernel ", 7)) continue;
    char *hash = strchr(p, '#');
    if (hash) *hash = 0;
    char *save = NULL, *tok = strtok_r(p + 7, " \t\n", &save);
    if (!tok) continue;
    char name[96];
    snprintf(name, sizeof name, "%s", tok);
    bool dup = false;
    for (int i = 0; i < nseen && !dup; i++) dup = !strcmp(seen[i], name);
    if (dup || nseen == MAX_KERNS) continue;
    snprintf(seen[nseen++], sizeof seen[0], "%s", name);
    Kind kinds[MAX_ARGS];
    bool i32[MAX_ARGS];
    int nk = call_kinds(src, name, kinds, i32);
    char sym[128];
    snprintf(sym, sizeof sym, "%s__call", name);
    void (*fn)(void **) = (void (*)(void **))dlsym(so, sym);
    if (nk < 0 || !fn) die("no such kernel in the .so and its source", name);
    Arg a[MAX_ARGS];
    int na = 0;
    size_t bytes = 0;
    while ((tok = strtok_r(NULL, " \t\n", &save)) && na < MAX_ARGS) {
      if (!strncmp(tok, "<<<", 3)) continue;
      Arg x = {0};
      if (tok[0] == '$' || tok[0] == '@') {
        char *colon = strchr(tok, ':');
        if (!colon) die("a buffer argument without its bytes", tok);
        x.kind = A_PTR;
        x.bytes = (size_t)strtoull(colon + 1, NULL, 10);
        x.p = aligned_alloc(64, (x.bytes + 63) / 64 * 64 + 64);
        if (!x.p) die("out of memory", name);
        bytes += x.bytes;
      } else if (tok[1] == ':' && (tok[0] == 'f' || tok[0] == 'i' || tok[0] == 's')) {
        x.scalar = tok[0] == 's' ? runtime_scalar(tok + 2) : strtod(tok + 2, NULL);
        x.kind = A_F32; /* its kind is the call's, below */
      } else die("an argument kbench does not know", tok);
      a[na++] = x;
    }
    if (na != nk) die("the listing's arguments and the kernel's differ in number", name);
    void *args[MAX_ARGS + 1];
    for (int i = 0; i < na; i++) {
      if ((a[i].kind == A_PTR) != (kinds[i] == A_PTR)) die("a buffer where the kernel takes a scalar, or back", name);
      a[i].i32 = kinds[i] == A_PTR && i32[i];
      a[i].kind = kinds[i];
      if (a[i].kind == A_PTR) a[i].val.ptr = a[i].p;
      else if (a[i].kind == A_F32) a[i].val.f = (float)a[i].scalar;
      else a[i].val.i = (int64_t)a[i].scalar;
      args[i] = &a[i].val;
    }
    args[na] = NULL;
    fill(a, na);
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int st = 0; st < 4; st++)
      for (int r = 0; r < reps + (st == 0); r++) { /* hot: one run first, untimed */
        if (st >= 1) { /* cold, and before the writes: nothing of the buffers left in the caches */
          volatile unsigned sum = 0;
          for (size_t j = 0; j < FLUSH; j += 64) sum += flush[j];
        }
        if (st >= 2) write_shares(a, na, st == 3);
        double t0 = now();
        fn(args);
        double dt = now() - t0;
        if ((st || r) && dt < best[st]) best[st] = dt;
      }
    printf("%-28s %8.2f %9.2f %9.2f %9.2f %9.2f\n", name, (double)bytes / 1e6, best[0] * 1e6, best[1] * 1e6,
           best[2] * 1e6, best[3] * 1e6);
    for (int st = 0; st < 4; st++) tot[st] += best[st];
    for (int i = 0; i < na; i++)
      if (a[i].kind == A_PTR) free(a[i].p);
  }
  fclose(lf);
  printf("%-28s %8s %9.2f %9.2f %9.2f %9.2f   (each kernel once)\n", "sum", "", tot[0] * 1e6, tot[1] * 1e6,
         tot[2] * 1e6, tot[3] * 1e6);
  free(flush);
  free(src);
  return nseen ? 0 : 1;
}
