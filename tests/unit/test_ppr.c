/* test_ppr.c - tests of the runtime ppr: a hand-written listing and kernels (softmax regression through a tied
 * embedding) checked against a direct computation, every error path, and a fuzzer of the listing parser. */
#include "ppr_gen.h"
#include "rt_comm.h"
#include "rt_dev.h"
#include "rt_lr.h"
#include "rt_prog.h"
#include "rt_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the model: V tokens, H hidden, micro-batches of B rows of S tokens, M per step ---------- */
#define V 16
#define H 8
#define B 2
#define S 4
#define M 2
#define N (B * S) /* rows of one micro-batch */

/* Everything after the hash line. Rows are r = b*S + s. x = E[tok]; h_b = x_b P (batched gemm,
 * one batch element per row b of the micro-batch); y = h * gain; logits = y E^T (the tied head);
 * loss = mean cross-entropy. */
static const char *const BODY_T =
    "model testlin\n"
    "mesh tp 1 pp 1 dp 1\n"
    "rank 0 stage 0 tp_rank 0 dp_rank 0\n"
    "step micro_batch 2 seq 4 microbatches 2 schedule gpipe\n"
    "vocab 16\n"
    "kernels k 0123456789abcdef\n"
    "object so @SO\n" /* k.so's size and hash, known once it is compiled (main) */
    "object cl - -\n"
    "cuda sm_90 - - - -\n"
    "\n"
    "region params  0    832\n"
    "region grads   832  832\n"
    "region adam_m  1664 832\n"
    "region adam_v  2496 832\n"
    "region slots   3328 1472 2      # two micro-batches in flight\n"
    "region scratch 6272 1344\n"
    "arena 7616\n"
    "\n"
    "param 0 emb.weight f32 [16,8] @0 init normal 0.5 decay 1 tied\n"
    "param 1 gain f32 [8] @512 init ones decay 0\n"
    "param 2 proj.weight f32 [8,8] @576 init normal 0.3 decay 1\n"
    "\n"
    "buffer tokens i32 [2,4] $0 saved\n"
    "buffer labels i32 [2,4] $64 saved\n"
    "buffer x f32 [8,8] $128 saved\n"
    "buffer h f32 [8,8] $384 saved\n"
    "buffer y f32 [8,8] $640 saved\n"
    "buffer probs f32 [8,16] $896 saved\n"
    "buffer loss f32 [1] $1408 saved\n"
    "buffer logits f32 [8,16] @6272\n"
    "buffer dy f32 [8,8] @6784\n"
    "buffer dh f32 [8,8] @7040\n"
    "buffer dx f32 [8,8] @7296\n"
    "buffer dl f32 [1] @7552\n"
    "\n"
    "block forward\n"
    "  batch $0 $64\n"
    "  kernel embed_fwd <<<1,1,0>>> $0:32 @0:512 $128:256 i:8 i:8\n"
    "  gemm N N 4 8 8 1 $128 8 32 @576 8 0 0 $384 8 32 2      # h_b = x_b P\n"
    "  kernel gain_fwd <<<1,1,0>>> $384:256 @512:32 $640:256 i:8 i:8 f:1\n"
    "  gemm N T 8 16 8 1 $640 8 0 @0 8 0 0 @6272 16 0 1       # logits = y E^T\n"
    "  kernel xent_fwd <<<1,1,0>>> @6272:512 $64:32 $896:512 $1408:4 i:8 i:16\n"
    "  loss $1408\n"
    "end\n"
    "\n"
    "block backward\n"
    "  seed @7552 0.5\n"
    "  kernel xent_bwd <<<1,1,0>>> $896:512 $64:32 @7552 @6272:512 i:8 i:16\n"
    "  gemm T N 16 8 8 1 @6272 16 0 $640 8 0 1 @832 8 0 1     # dE += dlogits^T y\n"
    "  gemm N N 8 8 16 1 @6272 16 0 @0 8 0 0 @6784 8 0 1      # dy = dlogits E\n"
    "  kernel gain_bwd <<<1,1,0>>> $384:256 @512:32 @6784:256 @7040:256 @1344:32 i:8 i:8\n"
    "  gemm T N 8 8 4 1 $128 8 32 @7040 8 32 1 @1408 8 0 2    # dP += x_b^T dh_b\n"
    "  gemm N T 8 8 8 1 @7040 8 0 @576 8 0 0 @7296 8 0 1      # dx = dh P^T\n"
    "  kernel embed_bwd <<<1,1,0>>> $0:32 @7296:256 @832:512 i:8 i:8\n"
    "end\n"
    "\n"
    "block optimizer\n"
    "  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n"
    "  kernel adamw <<<1,1,0>>> @0:512 @832:512 @1664:512 @2496:512 i:128 i:1 s:lr s:beta1 s:beta2 s:eps s:wd s:bc1 "
    "s:bc2 s:clip\n"
    "  kernel adamw <<<1,1,0>>> @512:32 @1344:32 @2176:32 @3008:32 i:8 i:0 s:lr s:beta1 s:beta2 s:eps s:wd s:bc1 s:bc2 "
    "s:clip\n"
    "  kernel adamw <<<1,1,0>>> @576:256 @1408:256 @2240:256 @3072:256 i:64 i:1 s:lr s:beta1 s:beta2 s:eps s:wd s:bc1 "
    "s:bc2 "
    "s:clip\n"
    "end\n"
    "\n"
    "schedule\n"
    "  zero_grads\n"
    "  F 0 0\n"
    "  F 1 1\n"
    "  B 0 0\n"
    "  B 1 1\n"
    "  OPT\n"
    "end\n";

/* The bodies with k.so's `object so` line filled in (main). */
static const char *BODY, *STAGE0, *STAGE1;

static const char *const KERNELS =
    "/* hand-written kernels for test_ppr */\n"
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "const char ppk_source_hash[] = \"0123456789abcdef\";\n"
    "#define F(i) (*(float **)a[i])\n"
    "#define CF(i) (*(const float **)a[i])\n"
    "#define CI(i) (*(const int32_t **)a[i])\n"
    "#define I64(i) (*(int64_t *)a[i])\n"
    "#define S(i) (*(float *)a[i])\n"
    "static void embed_fwd(const int32_t *tok, const float *E, float *x, int64_t n, int64_t h) {\n"
    "  #pragma omp parallel for\n"
    "  for (int64_t r = 0; r < n; r++) for (int64_t j = 0; j < h; j++) x[r * h + j] = E[tok[r] * h + j];\n"
    "}\n"
    "void embed_fwd__call(void **a) { embed_fwd(CI(0), CF(1), F(2), I64(3), I64(4)); }\n"
    "static void gain_fwd(const float *hh, const float *g, float *y, int64_t n, int64_t h, float alpha) {\n"
    "  #pragma omp parallel for\n"
    "  for (int64_t r = 0; r < n; r++) for (int64_t j = 0; j < h; j++) y[r * h + j] = alpha * hh[r * h + j] * g[j];\n"
    "}\n"
    "void gain_fwd__call(void **a) { gain_fwd(CF(0), CF(1), F(2), I64(3), I64(4), S(5)); }\n"
    "static void xent_fwd(const float *lg, const int32_t *lab, float *p, float *loss, int64_t n, int64_t v) {\n"
    "  double tot = 0;\n"
    "  for (int64_t r = 0; r < n; r++) {\n"
    "    float mx = lg[r * v];\n"
    "    for (int64_t k = 1; k < v; k++) mx = fmaxf(mx, lg[r * v + k]);\n"
    "    double z = 0;\n"
    "    for (int64_t k = 0; k < v; k++) z += exp((double)lg[r * v + k] - mx);\n"
    "    for (int64_t k = 0; k < v; k++) p[r * v + k] = (float)(exp((double)lg[r * v + k] - mx) / z);\n"
    "    tot += log(z) + mx - lg[r * v + lab[r]];\n"
    "  }\n"
    "  loss[0] = (float)(tot / n);\n"
    "}\n"
    "void xent_fwd__call(void **a) { xent_fwd(CF(0), CI(1), F(2), F(3), I64(4), I64(5)); }\n"
    "static void xent_bwd(const float *p, const int32_t *lab, const float *dl, float *d, int64_t n, int64_t v) {\n"
    "  float s = dl[0] / (float)n;\n"
    "  for (int64_t r = 0; r < n; r++)\n"
    "    for (int64_t k = 0; k < v; k++) d[r * v + k] = (p[r * v + k] - (k == lab[r] ? 1.0f : 0.0f)) * s;\n"
    "}\n"
    "void xent_bwd__call(void **a) { xent_bwd(CF(0), CI(1), CF(2), F(3), I64(4), I64(5)); }\n"
    "static void gain_bwd(const float *hh, const float *g, const float *dy, float *dh, float *gg, int64_t n,\n"
    "                     int64_t h) {\n"
    "  for (int64_t j = 0; j < h; j++) {\n"
    "    float acc = 0;\n"
    "    for (int64_t r = 0; r < n; r++) {\n"
    "      dh[r * h + j] = dy[r * h + j] * g[j];\n"
    "      acc += dy[r * h + j] * hh[r * h + j];\n"
    "    }\n"
    "    gg[j] += acc;\n"
    "  }\n"
    "}\n"
    "void gain_bwd__call(void **a) { gain_bwd(CF(0), CF(1), CF(2), F(3), F(4), I64(5), I64(6)); }\n"
    "static void embed_bwd(const int32_t *tok, const float *dx, float *gE, int64_t n, int64_t h) {\n"
    "  for (int64_t r = 0; r < n; r++) for (int64_t j = 0; j < h; j++) gE[tok[r] * h + j] += dx[r * h + j];\n"
    "}\n"
    "void embed_bwd__call(void **a) { embed_bwd(CI(0), CF(1), F(2), I64(3), I64(4)); }\n"
    "static void adamw(float *p, const float *g, float *m, float *v, int64_t n, int64_t decay, float lr, float b1,\n"
    "                  float b2, float eps, float wd, float bc1, float bc2, float clip) {\n"
    "  #pragma omp parallel for\n"
    "  for (int64_t i = 0; i < n; i++) {\n"
    "    float gi = g[i] * clip;\n"
    "    if (decay) p[i] *= 1.0f - lr * wd;\n"
    "    m[i] = b1 * m[i] + (1.0f - b1) * gi;\n"
    "    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;\n"
    "    p[i] -= lr * (m[i] / bc1) / (sqrtf(v[i] / bc2) + eps);\n"
    "  }\n"
    "}\n"
    "void adamw__call(void **a) {\n"
    "  adamw(F(0), CF(1), F(2), F(3), I64(4), I64(5), S(6), S(7), S(8), S(9), S(10), S(11), S(12), S(13));\n"
    "}\n"
    "/* AdamW that leaves its gradient zero, as ppc's does (block optimizer clears_grads) */\n"
    "void adamw_clear__call(void **a) {\n"
    "  adamw__call(a);\n"
    "  for (int64_t i = 0; i < I64(4); i++) F(1)[i] = 0;\n"
    "}\n"
    "/* grad_norm's kernel: the listings' <<<3,1,0>>>, a block a row of the table of 3 (offsets in units\n"
    " * of PP_NORM_UNIT, 16 floats), each its gradient's sum of squares into out[row] */\n"
    "static void sumsq(const float *g, float *out, const int32_t *t) {\n"
    "  for (int r = 0; r < 3; r++) {\n"
    "    double s = 0;\n"
    "    for (int64_t i = 0; i < t[2 * r + 1]; i++) s += (double)g[16 * (int64_t)t[2 * r] + i] * g[16 * (int64_t)t[2 * "
    "r] + i];\n"
    "    out[r] = (float)s;\n"
    "  }\n"
    "}\n"
    "void sumsq__call(void **a) { sumsq(CF(0), F(1), CI(2)); }\n";

/* ---- test harness -------------------------------------------------------------------------- */

static int npass, nfail;
static char tdir[256], ppr[512];

static int check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int check(int ok, const char *fmt, ...) {
  va_list ap;
  printf("%s: ", ok ? "PASS" : "FAIL");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  if (ok) npass++;
  else nfail++;
  return ok;
}

static void path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tdir, name); }

static int write_bytes(const char *p, const void *b, size_t n) {
  FILE *fp = fopen(p, "wb");
  if (!fp) return -1;
  size_t w = n ? fwrite(b, 1, n, fp) : 0;
  return (fclose(fp) == 0 && w == n) ? 0 : -1;
}

/* The whole file and its length; NULL when it cannot be read. */
static char *read_bytes(const char *p, size_t *n) {
  FILE *fp = fopen(p, "rb");
  if (!fp) return NULL;
  size_t cap = 4096, len = 0, r;
  char *b = malloc(cap);
  while ((r = fread(b + len, 1, cap - len, fp)) > 0)
    if ((len += r) == cap) b = realloc(b, cap *= 2);
  fclose(fp);
  *n = len;
  return b;
}

static char *read_text(const char *p) {
  FILE *fp = fopen(p, "rb");
  if (!fp) return NULL;
  size_t cap = 4096, len = 0;
  char *b = malloc(cap);
  for (;;) {
    if (len + 1 >= cap) b = realloc(b, cap *= 2);
    size_t r = fread(b + len, 1, cap - len - 1, fp);
    if (r == 0) break;
    len += r;
  }
  fclose(fp);
  b[len] = 0;
  return b;
}

/* A --log's step records: its text after the start line ({"start": ...}) that opens it. */
static char *records(char *log) {
  char *nl = !strncmp(log, "{\"start\":", 9) ? strchr(log, '\n') : NULL;
  return nl ? nl + 1 : log;
}

static uint64_t fnv(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

#define COMPILE_LINE "compile 00000000000000c0\n" /* the hashed part's first line: every test listing's id */

/* The header of a listing whose hashed part (COMPILE_LINE and b[0..n)) hashes to what it says, into
 * t; its length. */
static int header(char *t, size_t cap, const char *b, size_t n) {
  uint64_t h = fnv(COMPILE_LINE, strlen(COMPILE_LINE));
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)b[i]) * 0x100000001b3ull;
  return snprintf(t, cap, "ppr-program 5\ncompiler ppc test\nhash %016llx\n" COMPILE_LINE, (unsigned long long)h);
}

/* The full listing for a body: header with the body's hash. Caller frees. */
static char *listing(const char *body) {
  size_t n = strlen(body) + 128;
  char *s = malloc(n);
  int hl = header(s, n, body, strlen(body));
  snprintf(s + hl, n - (size_t)hl, "%s", body);
  return s;
}

/* The `object so ...` line of body, without its newline (a static buffer). */
static const char *so_line_of(const char *body) {
  static char line[128];
  const char *at = strstr(body, "object so ");
  size_t n = at ? strcspn(at, "\n") : 0;
  snprintf(line, sizeof line, "%.*s", (int)n, at ? at : "");
  return line;
}

/* body with the first occurrence of `from` replaced by `to` (must occur). Caller frees. */
static char *replace(const char *body, const char *from, const char *to) {
  const char *at = strstr(body, from);
  if (!at) {
    fprintf(stderr, "test bug: '%s' not in the body\n", from);
    exit(2);
  }
  size_t n = strlen(body) - strlen(from) + strlen(to) + 1;
  char *s = malloc(n);
  snprintf(s, n, "%.*s%s%s", (int)(at - body), body, to, at + strlen(from));
  return s;
}

/* The listing line number of the first occurrence of text in body (3 header lines first). */
static int line_of(const char *body, const char *text) {
  const char *at = strstr(body, text);
  int line = 5;
  for (const char *q = body; q < at; q++) line += *q == '\n';
  return line;
}

/* A program directory NAME under tdir holding rank0.prog and a link to the kernels. */
static void make_dir(const char *name, const char *text) {
  char d[512], p[600], so[600];
  path(d, sizeof d, name);
  mkdir(d, 0755);
  snprintf(p, sizeof p, "%s/rank0.prog", d);
  write_bytes(p, text, strlen(text));
  snprintf(so, sizeof so, "%s/k.so", d);
  unlink(so);
  if (symlink("../k.so", so) != 0) perror("symlink");
}

static void make_prog(const char *name, const char *body) {
  char *t = listing(body);
  make_dir(name, t);
  free(t);
}

static char out[1 << 16]; /* output of the last ppr run */

/* Run ppr with args (a shell fragment); returns its exit status, 128+signal when killed. */
static int run(const char *args) {
  char cmd[16384], o[512];
  path(o, sizeof o, "out.txt");
  snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1", ppr, args, o);
  int st = system(cmd);
  char *t = read_text(o);
  snprintf(out, sizeof out, "%s", t ? t : "");
  free(t);
  if (st == -1) return -1;
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return WEXITSTATUS(st);
}

static int sane(int rc) {
  return rc < 128 && rc != 99 && !strstr(out, "AddressSanitizer") && !strstr(out, "LeakSanitizer") &&
         !strstr(out, "runtime error:");
}

static void show(void) {
  char *s = out;
  for (int k = 0; k < 8 && *s; k++) {
    char *nl = strchr(s, '\n');
    int n = nl ? (int)(nl - s) : (int)strlen(s);
    printf("  | %.*s\n", n, s);
    s = nl ? nl + 1 : s + n;
  }
}

/* ppr must fail with exit 1, say `needle`, and not crash. */
static void expect_fail(const char *what, const char *args, const char *needle) {
  int rc = run(args);
  int ok = rc == 1 && sane(rc) && strstr(out, needle) && strstr(out, "ppr: error: ");
  if (!check(ok, "%s: exit 1 with '%s'", what, needle)) {
    printf("  | exit %d\n", rc);
    show();
  }
}

static void expect_ok(const char *what, const char *args) {
  int rc = run(args);
  if (!check(rc == 0 && sane(rc), "%s: exit 0", what)) {
    printf("  | exit %d\n", rc);
    show();
  }
}

/* ---- data, weights and the direct computation ---------------------------------------------- */

typedef struct {
  float E[V * H], g[H], P[H * H];
} W;

static uint64_t lcg = 12345;
static double urand(void) {
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(lcg >> 11) * 0x1p-53;
}

static void write_tokens(const char *p, const int *tok, int n, int claim) {
  int32_t hdr[256] = {0};
  hdr[0] = 20240520;
  hdr[1] = 1;
  hdr[2] = claim;
  size_t bytes = sizeof hdr + (size_t)n * 2;
  unsigned char *b = malloc(bytes);
  memcpy(b, hdr, sizeof hdr);
  for (int i = 0; i < n; i++) {
    b[1024 + 2 * i] = (unsigned char)(tok[i] & 255);
    b[1024 + 2 * i + 1] = (unsigned char)(tok[i] >> 8);
  }
  write_bytes(p, b, bytes);
  free(b);
}

static int write_weights(const char *p, const W *w, int with_head, const float *head) {
  const char *names[4] = {"emb.weight", "gain", "proj.weight", "lm_head.weight"};
  int nd[4] = {2, 1, 2, 2};
  int64_t se[2] = {V, H}, sg[1] = {H}, sp[2] = {H, H};
  const int64_t *shapes[4] = {se, sg, sp, se};
  const float *data[4] = {w->E, w->g, w->P, head ? head : w->E};
  char err[512];
  int rc = rt_st_write(p, with_head ? 4 : 3, names, nd, shapes, data, err, sizeof err);
  if (rc) printf("  | %s\n", err);
  return rc;
}

static int read_weights(const char *p, W *w, int grads_ok) {
  RtStFile *f;
  char err[512];
  if (rt_st_open(p, &f, err, sizeof err)) {
    printf("  | %s\n", err);
    return -1;
  }
  int rc = rt_st_count(f) != 3;
  const char *names[3] = {"emb.weight", "gain", "proj.weight"};
  float *dst[3] = {w->E, w->g, w->P};
  size_t n[3] = {V * H, H, H * H};
  for (int k = 0; k < 3 && !rc; k++) {
    int i = rt_st_find(f, names[k]);
    rc = i < 0 || rt_st_read_f32(f, i, dst[k], n[k], err, sizeof err);
  }
  (void)grads_ok;
  rt_st_close(f);
  return rc ? -1 : 0;
}

/* The step loss and gradients in double, straight from the definitions (no gemm). */
static double ref_step(const W *w, const int *data, int ndata, int64_t step, double *gE, double *gg, double *gP) {
  memset(gE, 0, sizeof(double) * V * H);
  memset(gg, 0, sizeof(double) * H);
  memset(gP, 0, sizeof(double) * H * H);
  double total = 0;
  for (int m = 0; m < M; m++) {
    int tok[N], lab[N];
    for (int b = 0; b < B; b++) {
      int64_t start = ((step * M + m) * B + b) * S;
      for (int s = 0; s < S; s++) {
        tok[b * S + s] = data[(start + s) % ndata];
        lab[b * S + s] = data[(start + s + 1) % ndata];
      }
    }
    double x[N][H], h[N][H], y[N][H], p[N][V], dl[N][V], dh[N][H];
    for (int r = 0; r < N; r++)
      for (int j = 0; j < H; j++) x[r][j] = w->E[tok[r] * H + j];
    for (int r = 0; r < N; r++)
      for (int j = 0; j < H; j++) {
        double a = 0;
        for (int k = 0; k < H; k++) a += x[r][k] * w->P[k * H + j];
        h[r][j] = a;
        y[r][j] = a * w->g[j];
      }
    double loss = 0;
    for (int r = 0; r < N; r++) {
      double lg[V], mx = -1e300, z = 0;
      for (int v = 0; v < V; v++) {
        double a = 0;
        for (int j = 0; j < H; j++) a += y[r][j] * w->E[v * H + j];
        lg[v] = a;
        if (a > mx) mx = a;
      }
      for (int v = 0; v < V; v++) z += exp(lg[v] - mx);
      for (int v = 0; v < V; v++) p[r][v] = exp(lg[v] - mx) / z;
      loss += log(z) + mx - lg[lab[r]];
    }
    total += loss / N / M;
    for (int r = 0; r < N; r++)
      for (int v = 0; v < V; v++) dl[r][v] = (p[r][v] - (v == lab[r])) / N / M;
    for (int v = 0; v < V; v++)
      for (int j = 0; j < H; j++)
        for (int r = 0; r < N; r++) gE[v * H + j] += dl[r][v] * y[r][j];
    for (int r = 0; r < N; r++)
      for (int j = 0; j < H; j++) {
        double a = 0;
        for (int v = 0; v < V; v++) a += dl[r][v] * w->E[v * H + j];
        gg[j] += a * h[r][j];
        dh[r][j] = a * w->g[j];
      }
    for (int k = 0; k < H; k++)
      for (int j = 0; j < H; j++)
        for (int r = 0; r < N; r++) gP[k * H + j] += x[r][k] * dh[r][j];
    for (int r = 0; r < N; r++)
      for (int k = 0; k < H; k++) {
        double a = 0;
        for (int j = 0; j < H; j++) a += dh[r][j] * w->P[k * H + j];
        gE[tok[r] * H + k] += a;
      }
  }
  return total;
}

static double rel_err(const float *a, const double *b, int n) {
  double d = 0, nb = 0;
  for (int i = 0; i < n; i++) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    nb += b[i] * b[i];
  }
  return nb > 0 ? sqrt(d / nb) : sqrt(d);
}

/* The reference's own gradient against central differences (in double). */
static double fd_check(const W *w0, const int *data, int nd) {
  double gE[V * H], gg[H], gP[H * H], t1[V * H], t2[H], t3[H * H];
  ref_step(w0, data, nd, 0, gE, gg, gP);
  double worst = 0;
  int picks[][2] = {{0, 3}, {0, 77}, {1, 2}, {1, 7}, {2, 0}, {2, 45}};
  for (size_t k = 0; k < sizeof picks / sizeof *picks; k++) {
    W w = *w0;
    float *v = picks[k][0] == 0 ? w.E : picks[k][0] == 1 ? w.g : w.P;
    int i = picks[k][1];
    /* a float perturbation: the reference works on float weights */
    float base = v[i], hstep = 1e-2f;
    v[i] = base + hstep;
    double lp = ref_step(&w, data, nd, 0, t1, t2, t3);
    v[i] = base - hstep;
    double lm = ref_step(&w, data, nd, 0, t1, t2, t3);
    double fd = (lp - lm) / (2 * (double)hstep);
    double an = picks[k][0] == 0 ? gE[i] : picks[k][0] == 1 ? gg[i] : gP[i];
    double e = fabs(fd - an) / (fabs(an) + 1e-3);
    if (e > worst) worst = e;
  }
  return worst;
}

/* ---- the seeded init, re-implemented from docs/ppr.md --------------------------------------- */

static uint64_t sm64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static float doc_normal(uint64_t seed, const char *name, int64_t i, double std) {
  uint64_t key = sm64(seed ^ fnv(name, strlen(name)));
  uint64_t a = sm64(key + 2 * (uint64_t)i), b = sm64(key + 2 * (uint64_t)i + 1);
  double u1 = (double)((a >> 11) + 1) / 9007199254740992.0, u2 = (double)(b >> 11) / 9007199254740992.0;
  return (float)(std * sqrt(-2 * log(u1)) * cos(2 * 3.141592653589793 * u2));
}

/* ---- tests ---------------------------------------------------------------------------------- */

static int data_main[37], data_cyc[320];

static void test_gradients(const W *w) {
  char wp[512], dp[512], gp[512], lp[512], args[8192];
  path(wp, sizeof wp, "w.safetensors");
  path(dp, sizeof dp, "data.bin");
  path(gp, sizeof gp, "g.safetensors");
  path(lp, sizeof lp, "log.jsonl");
  double gE[V * H], gg[H], gP[H * H];
  double loss = ref_step(w, data_main, 37, 0, gE, gg, gP);
  double fd = fd_check(w, data_main, 37);
  check(fd < 1e-3, "reference: analytic gradient vs central differences, worst rel %.2e", fd);

  snprintf(args, sizeof args, "%s/main --init %s --data %s --steps 1 --save-grads %s --log %s", tdir, wp, dp, gp, lp);
  expect_ok("gpipe (2 slots): one step with --save-grads and --log", args);
  W g;
  if (check(read_weights(gp, &g, 1) == 0, "--save-grads wrote emb.weight, gain, proj.weight")) {
    double e1 = rel_err(g.E, gE, V * H), e2 = rel_err(g.g, gg, H), e3 = rel_err(g.P, gP, H * H);
    check(e1 < 1e-5 && e2 < 1e-5 && e3 < 1e-5,
          "gradients equal the direct computation (rel %.1e %.1e %.1e; tied E gets both uses)", e1, e2, e3);
  }
  double norm = 0;
  for (int i = 0; i < V * H; i++) norm += gE[i] * gE[i];
  for (int i = 0; i < H; i++) norm += gg[i] * gg[i];
  for (int i = 0; i < H * H; i++) norm += gP[i] * gP[i];
  norm = sqrt(norm);
  char *log = read_text(lp);
  double l = NAN, gn = NAN, lr = NAN, ms = NAN, tps = NAN;
  int step = 0;
  int got = log ? sscanf(records(log),
                         "{\"step\":%d,\"loss\":%lf,\"grad_norm\":%lf,\"lr\":%lf,\"ms\":%lf,\"tokens_per_s\":%lf}",
                         &step, &l, &gn, &lr, &ms, &tps)
                : 0;
  check(log && !strncmp(log, "{\"start\":0,\"run\":\"", 18) && got == 6 && step == 1 && lr == 1e-3 && ms >= 0 &&
            tps >= 0,
        "--log: the start line, then one JSON object with the six keys");
  check(fabs(l - loss) < 1e-5 * loss, "loss %.7f equals the direct computation %.7f", l, loss);
  check(fabs(gn - norm) < 1e-5 * norm, "grad_norm %.7f equals the direct computation %.7f", gn, norm);
  free(log);
  check(strstr(out, "step 1/1  loss ") && strstr(out, "  grad_norm ") && strstr(out, "  lr 1.00e-03  ") &&
            strstr(out, " ms  ") && strstr(out, " tok/s  elapsed ") && strstr(out, "  eta 0.0s\n"),
        "stdout: 'step 1/1  loss ...  grad_norm ...  lr 1.00e-03  ... ms  ... tok/s  elapsed ...  eta 0.0s'");

  /* the same gradients with one slot (1F1B order) */
  char *b1 = replace(BODY, "  F 0 0\n  F 1 1\n  B 0 0\n  B 1 1\n", "  F 0 0\n  B 0 0\n  F 1 0\n  B 1 0\n");
  make_prog("oneslot", b1);
  free(b1);
  char gp1[512];
  path(gp1, sizeof gp1, "g1.safetensors");
  snprintf(args, sizeof args, "%s/oneslot --init %s --data %s --save-grads %s --quiet", tdir, wp, dp, gp1);
  expect_ok("1f1b (1 slot): one step", args);
  W g1;
  if (read_weights(gp1, &g1, 1) == 0 && read_weights(gp, &g, 1) == 0)
    check(!memcmp(&g, &g1, sizeof g), "1f1b and gpipe schedules give bit-identical gradients");
  else check(0, "1f1b gradients readable");
  check(!strstr(out, "step 1/1"), "--quiet prints no step line");

  /* two AdamW steps with clipping, against the same update in double */
  double lrv = 0.01, b1v = 0.8, b2v = 0.9, epsv = 1e-3, wdv = 0.05, clipv = norm / 2;
  double pe[V * H], pg[H], pp[H * H], me[V * H] = {0}, mg[H] = {0}, mp[H * H] = {0}, ve[V * H] = {0}, vg[H] = {0},
                                             vp[H * H] = {0};
  for (int i = 0; i < V * H; i++) pe[i] = w->E[i];
  for (int i = 0; i < H; i++) pg[i] = w->g[i];
  for (int i = 0; i < H * H; i++) pp[i] = w->P[i];
  double losses[2];
  for (int t = 1; t <= 2; t++) {
    W cur;
    for (int i = 0; i < V * H; i++) cur.E[i] = (float)pe[i];
    for (int i = 0; i < H; i++) cur.g[i] = (float)pg[i];
    for (int i = 0; i < H * H; i++) cur.P[i] = (float)pp[i];
    losses[t - 1] = ref_step(&cur, data_main, 37, t - 1, gE, gg, gP);
    double nrm = 0;
    for (int i = 0; i < V * H; i++) nrm += gE[i] * gE[i];
    for (int i = 0; i < H; i++) nrm += gg[i] * gg[i];
    for (int i = 0; i < H * H; i++) nrm += gP[i] * gP[i];
    nrm = sqrt(nrm);
    double c = clipv / (nrm + 1e-6);
    if (c > 1) c = 1;
    double bc1 = 1 - pow(b1v, t), bc2 = 1 - pow(b2v, t);
    double *ps[3] = {pe, pg, pp}, *gs[3] = {gE, gg, gP}, *ms_[3] = {me, mg, mp}, *vs[3] = {ve, vg, vp};
    int ns[3] = {V * H, H, H * H}, dec[3] = {1, 0, 1};
    for (int k = 0; k < 3; k++)
      for (int i = 0; i < ns[k]; i++) {
        double gi = gs[k][i] * c;
        if (dec[k]) ps[k][i] *= 1 - lrv * wdv;
        ms_[k][i] = b1v * ms_[k][i] + (1 - b1v) * gi;
        vs[k][i] = b2v * vs[k][i] + (1 - b2v) * gi * gi;
        ps[k][i] -= lrv * (ms_[k][i] / bc1) / (sqrt(vs[k][i] / bc2) + epsv);
      }
  }
  char sp[512];
  path(sp, sizeof sp, "w2.safetensors");
  snprintf(args, sizeof args,
           "%s/main --init %s --data %s --steps 2 --lr 0.01 --beta1 0.8 --beta2 0.9 --eps 1e-3 --wd 0.05 "
           "--clip %.9g --save %s --log %s",
           tdir, wp, dp, clipv, sp, lp);
  remove(lp); /* a new run's log */
  expect_ok("two AdamW steps with --clip, custom betas, eps, wd", args);
  W u;
  if (check(read_weights(sp, &u, 0) == 0, "--save wrote the final weights")) {
    double e1 = rel_err(u.E, pe, V * H), e2 = rel_err(u.g, pg, H), e3 = rel_err(u.P, pp, H * H);
    check(e1 < 1e-5 && e2 < 1e-5 && e3 < 1e-5,
          "weights after 2 clipped AdamW steps equal the direct update (rel %.1e %.1e %.1e)", e1, e2, e3);
  }
  log = read_text(lp);
  double l1 = NAN, l2 = NAN;
  int n1 = 0, n2 = 0;
  if (log) {
    char *second = strchr(records(log), '\n');
    sscanf(records(log), "{\"step\":%d,\"loss\":%lf", &n1, &l1);
    if (second) sscanf(second + 1, "{\"step\":%d,\"loss\":%lf", &n2, &l2);
  }
  check(n1 == 1 && n2 == 2 && fabs(l1 - losses[0]) < 1e-5 * losses[0] && fabs(l2 - losses[1]) < 1e-5 * losses[1],
        "step 2 reads the next data window (with wrap-around) and the updated weights: loss %.6f vs %.6f", l2,
        losses[1]);
  free(log);

  /* `block optimizer clears_grads`: ppr skips step 2's zero_grads. With AdamW kernels that clear
   * the gradients, the same update; with ones that do not (a false promise), step 2 adds to step
   * 1's gradients, which shows the skip happened. */
  for (int clears = 1; clears >= 0; clears--) {
    char *a = replace(BODY, "block optimizer\n", "block optimizer clears_grads\n"), *b = a;
    for (int i = 0; clears && i < 3; i++) {
      b = replace(a, "kernel adamw ", "kernel adamw_clear ");
      free(a);
      a = b;
    }
    const char *name = clears ? "clears" : "false_clears";
    make_prog(name, b);
    free(b);
    snprintf(args, sizeof args,
             "%s/%s --init %s --data %s --steps 2 --lr 0.01 --beta1 0.8 --beta2 0.9 --eps 1e-3 --wd 0.05 "
             "--clip %.9g --save %s --quiet",
             tdir, name, wp, dp, clipv, sp);
    expect_ok(clears ? "clears_grads: two steps" : "clears_grads, AdamW not clearing: two steps", args);
    if (read_weights(sp, &u, 0) == 0) {
      double e = rel_err(u.E, pe, V * H) + rel_err(u.g, pg, H) + rel_err(u.P, pp, H * H);
      if (clears) check(e < 3e-5, "clears_grads and clearing AdamW: the direct update (rel %.1e)", e);
      else check(e > 1e-3, "clears_grads over AdamW that does not clear: step 2 accumulates (rel %.1e)", e);
    } else check(0, "clears_grads: --save readable");
  }
}

static void test_training(void) {
  char dp[512], lp[512], args[8192];
  path(dp, sizeof dp, "cyc.bin");
  path(lp, sizeof lp, "train.jsonl");
  snprintf(args, sizeof args, "%s/main --seed 3 --data %s --steps 300 --lr 0.03 --log %s --quiet", tdir, dp, lp);
  expect_ok("training 300 steps on a cyclic sequence", args);
  char *log = read_text(lp);
  int lines = 0;
  double first = NAN, last = NAN;
  for (char *q = log; q && *q;) {
    double l;
    if (sscanf(q, "{\"step\":%*d,\"loss\":%lf", &l) == 1) {
      if (!lines) first = l;
      last = l;
      lines++;
    }
    char *nl = strchr(q, '\n');
    q = nl ? nl + 1 : NULL;
  }
  check(lines == 300, "--log has one line per step (%d)", lines);
  check(last < 0.25 * first, "the loss falls from %.4f to %.4f", first, last);
  free(log);
}

static void test_seed_init(void) {
  char sp[512], sp2[512], args[8192];
  path(sp, sizeof sp, "seed7.safetensors");
  path(sp2, sizeof sp2, "seed7b.safetensors");
  snprintf(args, sizeof args, "%s/main --seed 7 --steps 0 --save %s --quiet", tdir, sp);
  expect_ok("--seed 7 --steps 0 --save", args);
  W w;
  if (!check(read_weights(sp, &w, 0) == 0, "seeded weights saved")) return;
  int same = 1;
  for (int i = 0; i < V * H; i++) same &= w.E[i] == doc_normal(7, "emb.weight", i, 0.5);
  for (int i = 0; i < H * H; i++) same &= w.P[i] == doc_normal(7, "proj.weight", i, 0.3);
  for (int i = 0; i < H; i++) same &= w.g[i] == 1.0f;
  check(same, "every element is the documented function of (seed, name, index); ones are 1");
  double mean = 0, var = 0;
  for (int i = 0; i < V * H; i++) mean += w.E[i] / (V * H);
  for (int i = 0; i < V * H; i++) var += (w.E[i] - mean) * (w.E[i] - mean) / (V * H);
  check(fabs(mean) < 0.15 && fabs(sqrt(var) - 0.5) < 0.1, "emb.weight looks like normal(0, 0.5): mean %.3f std %.3f",
        mean, sqrt(var));
  snprintf(args, sizeof args, "%s/main --seed 8 --steps 0 --save %s --quiet", tdir, sp2);
  run(args);
  W w2;
  check(read_weights(sp2, &w2, 0) == 0 && memcmp(w.E, w2.E, sizeof w.E) != 0, "--seed 8 gives other weights");
  snprintf(args, sizeof args, "%s/main --steps 0 --save %s --quiet", tdir, sp2);
  run(args);
  check(read_weights(sp2, &w2, 0) == 0 && w2.E[5] == doc_normal(1, "emb.weight", 5, 0.5), "the default seed is 1");
}

/* A safetensors file with the three params in F16 (emb, proj) and BF16 (gain), values exact in both. */
static void test_half_init(void) {
  char hp[512], sp[512], args[8192];
  path(hp, sizeof hp, "half.safetensors");
  path(sp, sizeof sp, "half_out.safetensors");
  char hdr[512];
  int hl = snprintf(hdr, sizeof hdr,
                    "{\"emb.weight\":{\"dtype\":\"F16\",\"shape\":[16,8],\"data_offsets\":[0,256]},"
                    "\"gain\":{\"dtype\":\"BF16\",\"shape\":[8],\"data_offsets\":[256,272]},"
                    "\"proj.weight\":{\"dtype\":\"F16\",\"shape\":[8,8],\"data_offsets\":[272,400]}}");
  while (hl % 8) hdr[hl++] = ' ';
  unsigned char buf[8 + 512 + 400];
  for (int k = 0; k < 8; k++) buf[k] = (unsigned char)((uint64_t)hl >> (8 * k));
  memcpy(buf + 8, hdr, (size_t)hl);
  unsigned char *d = buf + 8 + hl;
  W want;
  /* F16: k/64 for k in [-64, 63]: sign, exponent, mantissa built by hand */
  for (int i = 0; i < V * H + H * H; i++) {
    int k = (i * 37) % 128 - 64;
    float v = (float)k / 64.0f;
    uint16_t h = 0;
    if (k != 0) {
      int a = k < 0 ? -k : k, e = 0;
      while ((a >> e) > 1) e++;                             /* a in [2^e, 2^(e+1)) */
      uint16_t mant = (uint16_t)(((a << 10) >> e) & 0x3ff); /* a / 2^e - 1 in 10 bits */
      h = (uint16_t)((k < 0 ? 0x8000 : 0) | ((e - 6 + 15) << 10) | mant);
    }
    int off = i < V * H ? 2 * i : 272 + 2 * (i - V * H);
    d[off] = (unsigned char)(h & 255);
    d[off + 1] = (unsigned char)(h >> 8);
    if (i < V * H) want.E[i] = v;
    else want.P[i - V * H] = v;
  }
  for (int j = 0; j < H; j++) { /* BF16: the top half of the float */
    float v = 0.5f + 0.25f * (float)j;
    uint32_t u;
    memcpy(&u, &v, 4);
    d[256 + 2 * j] = (unsigned char)((u >> 16) & 255);
    d[256 + 2 * j + 1] = (unsigned char)(u >> 24);
    want.g[j] = v;
  }
  write_bytes(hp, buf, 8 + (size_t)hl + 400);
  snprintf(args, sizeof args, "%s/main --init %s --steps 0 --save %s --quiet", tdir, hp, sp);
  expect_ok("--init from F16 and BF16 tensors", args);
  W got;
  check(read_weights(sp, &got, 0) == 0 && !memcmp(&got, &want, sizeof got), "F16/BF16 values converted exactly");
}

static void test_init_errors(const W *w) {
  char p[512], args[8192];
  const char *names[4] = {"emb.weight", "gain", "proj.weight", "extra.bias"};
  int nd[4] = {2, 1, 2, 1};
  int64_t se[2] = {V, H}, sg[1] = {H}, sp[2] = {H, H}, sbad[2] = {H, 4}, sx[1] = {3};
  float zero[128] = {0};
  char err[512];

  /* only emb.weight: two missing, listed together */
  path(p, sizeof p, "miss.safetensors");
  const int64_t *sh1[1] = {se};
  const float *d1[1] = {w->E};
  rt_st_write(p, 1, names, nd, sh1, d1, err, sizeof err);
  snprintf(args, sizeof args, "%s/main --init %s", tdir, p);
  expect_fail("--init with two tensors missing", args, "miss.safetensors: 2 tensors missing: gain, proj.weight");

  /* wrong shape: names the tensor and both shapes */
  path(p, sizeof p, "shape.safetensors");
  const int64_t *sh2[3] = {se, sg, sbad};
  const float *d2[3] = {w->E, w->g, w->P};
  rt_st_write(p, 3, names, nd, sh2, d2, err, sizeof err);
  snprintf(args, sizeof args, "%s/main --init %s", tdir, p);
  expect_fail("--init with a wrong shape", args,
              "tensor proj.weight has shape [8,4], the program's param 2 needs [8,8]");

  /* an extra tensor */
  path(p, sizeof p, "extra.safetensors");
  const int64_t *sh3[4] = {se, sg, sp, sx};
  const float *d3[4] = {w->E, w->g, w->P, zero};
  rt_st_write(p, 4, names, nd, sh3, d3, err, sizeof err);
  snprintf(args, sizeof args, "%s/main --init %s", tdir, p);
  expect_fail("--init with an extra tensor", args, "1 tensor the program has no param for: extra.bias");

  /* lm_head.weight: accepted when equal to the tied param, else an error */
  path(p, sizeof p, "head_ok.safetensors");
  write_weights(p, w, 1, NULL);
  snprintf(args, sizeof args, "%s/main --init %s --steps 0", tdir, p);
  expect_ok("--init with lm_head.weight equal to the tied emb.weight", args);
  float head[V * H];
  memcpy(head, w->E, sizeof head);
  head[17] += 0.25f;
  path(p, sizeof p, "head_bad.safetensors");
  write_weights(p, w, 1, head);
  snprintf(args, sizeof args, "%s/main --init %s --steps 0", tdir, p);
  expect_fail("--init with lm_head.weight different from the tied param", args,
              "tensor lm_head.weight differs from emb.weight at element 17");
  char *b = replace(BODY, " decay 1 tied\n", " decay 1\n");
  make_prog("untied", b);
  free(b);
  path(p, sizeof p, "head_ok.safetensors");
  snprintf(args, sizeof args, "%s/untied --init %s --steps 0", tdir, p);
  expect_fail(
      "--init with lm_head.weight when no param is tied", args,
      "1 tensor the program has no param for: lm_head.weight (lm_head.weight is accepted only when a param is tied)");

  /* truncated safetensors */
  char full[512];
  path(full, sizeof full, "head_ok.safetensors");
  char *t = NULL;
  FILE *fp = fopen(full, "rb");
  unsigned char buf[4096];
  size_t n = fp ? fread(buf, 1, sizeof buf, fp) : 0;
  if (fp) fclose(fp);
  (void)t;
  path(p, sizeof p, "trunc.safetensors");
  write_bytes(p, buf, n - 100);
  snprintf(args, sizeof args, "%s/main --init %s", tdir, p);
  expect_fail("--init with a truncated safetensors file", args, "trunc.safetensors: ");
  write_bytes(p, buf, 5);
  expect_fail("--init with a 5-byte safetensors file", args, "file too small for a safetensors header");
  path(p, sizeof p, "nonexistent.safetensors");
  snprintf(args, sizeof args, "%s/main --init %s", tdir, p);
  expect_fail("--init with a missing file", args, "nonexistent.safetensors: cannot open");
}

static void test_data_errors(void) {
  char p[512], args[8192];
  int tok[50];
  for (int i = 0; i < 50; i++) tok[i] = i % V;
  path(p, sizeof p, "short.bin");
  write_tokens(p, tok, 50, 100);
  snprintf(args, sizeof args, "%s/main --data %s", tdir, p);
  expect_fail("--data: an llm.c file shorter than its header says", args, "short.bin: ");
  tok[33] = 20;
  path(p, sizeof p, "big.bin");
  write_tokens(p, tok, 50, 50);
  snprintf(args, sizeof args, "%s/main --data %s", tdir, p);
  expect_fail("--data: a token id >= vocab", args, "big.bin: token 20 at position 33 is not below the vocabulary's 16");
  snprintf(args, sizeof args, "%s/main", tdir);
  expect_fail("the built-in text's bytes exceed a vocab of 16", args,
              "the built-in text: token 84 at position 0 is not below the vocabulary's 16");
  path(p, sizeof p, "empty.txt");
  write_bytes(p, "", 0);
  snprintf(args, sizeof args, "%s/main --data %s", tdir, p);
  expect_fail("--data: an empty file", args, "empty.txt: empty token data");
  path(p, sizeof p, "no_such_data.bin");
  snprintf(args, sizeof args, "%s/main --data %s", tdir, p);
  expect_fail("--data: a missing file", args, "no_such_data.bin: cannot open");
}

static void test_listing_errors(void) {
  char args[8192];
  /* hand edit: one byte changed, hash not updated */
  char *t = listing(BODY);
  char *at = strstr(t, "seed @7552 0.5");
  at[strlen("seed @7552 0.")] = '6';
  make_dir("edited", t);
  free(t);
  snprintf(args, sizeof args, "%s/edited", tdir);
  char want[600];
  snprintf(want, sizeof want, "%s/edited/rank0.prog: content hash mismatch: edited by hand, or written by another ppc",
           tdir);
  expect_fail("an edited listing", args, want);

  t = listing(BODY);
  t[strlen("ppr-program ")] = '3'; /* the version before grad_norm's table */
  make_dir("v2", t);
  free(t);
  snprintf(args, sizeof args, "%s/v2", tdir);
  snprintf(want, sizeof want, "%s/v2/rank0.prog: format version 3, this ppr reads 5", tdir);
  expect_fail("format version 3", args, want);

  struct {
    const char *name, *from, *to, *needle_fmt;
  } cases[] = {
      {"oob_gemm", "@7296 8 0 1 ", "@7424 8 0 1 ", ":%d: gemm: C: @7424 + 256 bytes leaves the arena (7616 bytes)"},
      {"oob_kernel", "$896:512 $1408:4", "$1024:512 $1408:4",
       ":%d: kernel xent_fwd: argument 3: $1024 + 512 bytes leaves the slot (1472 bytes)"},
      {"oob_plain", "@7552 @6272:512", "@7616 @6272:512",
       ":%d: kernel xent_bwd: argument 3: @7616 + 4 bytes leaves the arena"},
      {"oob_batch", "batch $0 $64", "batch $0 $1441", ":%d: batch: labels: '$1441': offset is not a multiple of 4"},
      {"oob_batch2", "batch $0 $64", "batch $0 $1444", ":%d: batch: labels: $1444 + 32 bytes leaves the slot"},
      {"unknown", "  loss $1408", "  frobnicate $1408", ":%d: unknown instruction 'frobnicate'"},
      {"clip_early", "  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n  kernel adamw <<<1,1,0>>> @0:512",
       "  kernel adamw <<<1,1,0>>> @0:512", ":%d: kernel adamw: argument 14: s:clip is set by grad_norm"},
      {"slot_busy", "  F 1 1\n", "  F 1 0\n", ":%d: F 1 0: slot 0 still holds micro-batch 0"},
      {"no_extent_param", "@576 init normal", "@580 init normal",
       ":%d: param proj.weight: offset 580 is not a multiple of 64"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    char *b = replace(BODY, cases[k].from, cases[k].to);
    make_prog(cases[k].name, b);
    char needle[256];
    snprintf(needle, sizeof needle, cases[k].needle_fmt, line_of(b, cases[k].to));
    free(b);
    snprintf(args, sizeof args, "%s/%s", tdir, cases[k].name);
    expect_fail(cases[k].name, args, needle);
  }

  char *b = replace(BODY, "kernel gain_bwd", "kernel gain_bwdx");
  make_prog("nosym", b);
  free(b);
  snprintf(args, sizeof args, "%s/nosym", tdir);
  expect_fail("a kernel missing from the object", args, "k.so: no kernel gain_bwdx (symbol gain_bwdx__call) called by");

  b = replace(BODY, "kernels k 0123456789abcdef", "kernels k 0123456789abcdee");
  make_prog("khash", b);
  free(b);
  snprintf(args, sizeof args, "%s/khash", tdir);
  expect_fail("a kernel object with another source hash", args, "k.so: its ppk_source_hash is '0123456789abcdef', ");

  b = replace(BODY, "kernels k ", "kernels gone ");
  make_prog("noso", b);
  free(b);
  snprintf(args, sizeof args, "%s/noso", tdir);
  expect_fail("a missing kernel object", args,
              "gone.so: cannot open the kernel file named by the listing's 'kernels' line");

  /* a file that is not a shared library, which the listing names by its size and hash: dlopen refuses it */
  char junk_line[64];
  snprintf(junk_line, sizeof junk_line, "object so 16 %016llx", (unsigned long long)fnv("not an ELF file\n", 16));
  char *b2 = replace(BODY, "kernels k ", "kernels junk ");
  b = replace(b2, so_line_of(BODY), junk_line);
  free(b2);
  make_prog("junkso", b);
  free(b);
  char jp[700];
  snprintf(jp, sizeof jp, "%s/junkso/junk.so", tdir);
  write_bytes(jp, "not an ELF file\n", 16);
  snprintf(args, sizeof args, "%s/junkso", tdir);
  expect_fail("a kernel object that is not a shared library", args, "junk.so: cannot load the kernel object");

  /* a damaged kernel object is refused before dlopen (which would die of SIGBUS on a truncated one) */
  char kp[512];
  path(kp, sizeof kp, "k.so");
  size_t kn = 0;
  char *kso = read_bytes(kp, &kn);
  struct {
    const char *name, *what;
    size_t len;
    long flip;
    const char *needle;
  } damaged[] = {
      {"so_trunc", "a truncated kernel object", 1000, -1,
       "%s: has 1000 bytes, expected %zu (the listing's 'object so' line, %s:11)"},
      {"so_empty", "an empty kernel object", 0, -1,
       "%s: has 0 bytes, expected %zu (the listing's 'object so' line, %s:11)"},
      {"so_flip", "a kernel object with one byte changed", 0, 100,
       "%s: its content hash (FNV-1a 64 of its %zu bytes) is %s, expected %s (the listing's 'object so' line, %s:11)"},
  };
  for (size_t k = 0; kso && k < sizeof damaged / sizeof *damaged; k++) {
    size_t len = damaged[k].flip >= 0 ? kn : damaged[k].len;
    make_prog(damaged[k].name, BODY);
    char dp[512], lp[600], needle[1024];
    snprintf(dp, sizeof dp, "%s/%s", tdir, damaged[k].name);
    snprintf(jp, sizeof jp, "%s/k.so", dp);
    snprintf(lp, sizeof lp, "%s/rank0.prog", dp);
    unlink(jp); /* the link to the good object */
    if (damaged[k].flip >= 0) kso[damaged[k].flip] ^= 0x40;
    write_bytes(jp, kso, len);
    if (damaged[k].flip >= 0) {
      char got[17], want[17];
      snprintf(got, sizeof got, "%016llx", (unsigned long long)fnv(kso, kn));
      kso[damaged[k].flip] ^= 0x40;
      snprintf(want, sizeof want, "%016llx", (unsigned long long)fnv(kso, kn));
      snprintf(needle, sizeof needle, damaged[k].needle, jp, kn, got, want, lp);
    } else {
      snprintf(needle, sizeof needle, damaged[k].needle, jp, kn, lp);
    }
    expect_fail(damaged[k].what, dp, needle);
  }
  free(kso);
  b = replace(BODY, so_line_of(BODY), "object so - -");
  make_prog("so_none", b);
  free(b);
  snprintf(args, sizeof args, "%s/so_none", tdir);
  snprintf(want, sizeof want, "%s/so_none/rank0.prog:11: the listing's 'object so' line names no so file", tdir);
  expect_fail("a listing that names no kernel object ('object so - -')", args, want);

  b = replace(BODY, "mesh tp 1 pp 1 dp 1", "mesh tp 2 pp 1 dp 1");
  make_prog("tp2", b);
  free(b);
  snprintf(args, sizeof args, "%s/tp2", tdir);
  snprintf(want, sizeof want,
           "ppr: error: %s/tp2 was compiled for 2 ranks (tp 2 \u00d7 pp 1 \u00d7 dp 1) but mpirun started 1 ranks",
           tdir);
  expect_fail("a 2-rank listing run without mpirun", args, want);

  snprintf(args, sizeof args, "%s/nowhere", tdir);
  expect_fail("a missing program directory", args, "nowhere/rank0.prog: cannot open: No such file or directory");
}

static void test_cli(void) {
  char args[8192];
  struct {
    const char *args, *needle;
  } bad[] = {
      {"--frobnicate", "unknown option '--frobnicate'"},
      {"", "no program directory DIR"},
      {"--steps abc", "--steps: expected an integer"},
      {"--steps", "--steps needs a value"},
      {"--lr -1", "--lr: expected a number in [0, 1e+09], found '-1'"},
      {"--beta1 1", "--beta1: expected a number in [0, 1)"},
      {"--eps 0", "--eps: expected a number in (0, "},
      {"--clip nan", "--clip: expected a number"},
      {"--seed 1 --init w.safetensors", "--init and --seed exclude each other"},
      {"--steps 0 --save-grads g.safetensors", "--save-grads needs at least one step"},
      {"--lr-schedule step", "--lr-schedule: expected constant, cosine, linear or wsd, found 'step'"},
      {"--steps 5 --warmup 6", "--warmup 6 is more than --steps 5"},
      {"--lr-schedule cosine --lr 1e-3 --lr-min 1e-2", "--lr-min 0.01 is more than --lr 0.001"},
      {"--decay-steps 3", "--decay-steps is for a decaying --lr-schedule (cosine, linear or wsd), not constant"},
      {"--lr-min 0", "--lr-min is for a decaying --lr-schedule"},
      {"--lr-schedule linear --steps 5 --warmup 5", "--lr-schedule linear: no step left to decay after --warmup 5"},
      {"--lr-schedule wsd --steps 10 --warmup 8 --decay-steps 3",
       "--lr-schedule wsd: --warmup 8 and --decay-steps 3 add up to more than --steps 10"},
      {"--lr-schedule wsd --steps 10 --warmup 9", "--decay-steps 2 (the default: --steps / 5) add up to more"},
      {"--decay-steps 0 --lr-schedule cosine", "--decay-steps: expected at least 1 step, found '0'"},
      {"--val-data v.bin --val-frac 0.1", "--val-data and --val-frac exclude each other"},
      {"--eval-every 5", "--eval-every needs a validation set: --val-data FILE or --val-frac F"},
      {"--val-batches 4", "--val-batches needs a validation set"},
      {"--val-frac 1", "--val-frac: expected a number in (0, 1), found '1'"},
      {"--val-frac 0.1 --eval-every 0", "--eval-every: expected at least 1 step, found '0'"},
      {"--val-frac 0.1 --val-batches 0", "--val-batches: expected at least 1 micro-batch, found '0'"},
      {"--peak-flops 0", "--peak-flops: expected a number in (0, "},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    snprintf(args, sizeof args, "%s%s%s", bad[k].args[0] == 0 ? "" : tdir, bad[k].args[0] == 0 ? "" : "/main ",
             bad[k].args);
    int rc = run(args);
    int ok = rc == 1 && sane(rc) && strstr(out, bad[k].needle) &&
             strstr(out, "usage: ppr DIR [options]  ('ppr --help' lists them)");
    if (!check(ok, "bad flags '%s': usage and exit 1, saying '%s'", bad[k].args, bad[k].needle)) {
      printf("  | exit %d\n", rc);
      show();
    }
  }
  snprintf(args, sizeof args, "%s/main %s/main", tdir, tdir);
  int rc = run(args);
  check(rc == 1 && strstr(out, "more than one DIR"), "two directories: usage and exit 1");
  rc = run("--help");
  check(rc == 0 && strstr(out, "usage: ppr DIR") && strstr(out, "--save-grads"), "--help: usage on stdout, exit 0");
  rc = run("--version");
  check(rc == 0 && strstr(out, "ppr ") && strstr(out, "reads ppr-program 5"), "--version");
  char p[512];
  path(p, sizeof p, "data.bin");
  snprintf(args, sizeof args, "%s/main --data=%s --steps=1 --save %s/no/such/dir/w.safetensors", tdir, p, tdir);
  expect_fail("--save into a missing directory", args, "/no/such/dir/w.safetensors");
  snprintf(args, sizeof args, "%s/main --data %s --log %s/no/such/dir/log.jsonl", tdir, p, tdir);
  expect_fail("--log into a missing directory", args, "log.jsonl: cannot open for writing");
}

/* ---- a two-stage pipeline of the same model, over MPI --------------------------------------- */

/* Stage 0 holds the embedding (tied, shared: the owner) and sends x; stage 1 receives x, holds
 * gain, proj and a copy of the embedding for the head, computes the loss and sends dx back; the
 * two embedding gradients are summed by allreduce_tied. */
static const char *const STAGE0_T = "model testlin\n"
                                    "mesh tp 1 pp 2 dp 1\n"
                                    "rank 0 stage 0 tp_rank 0 dp_rank 0\n"
                                    "peers prev -1 next 1\n"
                                    "step micro_batch 2 seq 4 microbatches 2 schedule 1f1b\n"
                                    "vocab 16\n"
                                    "kernels k 0123456789abcdef\n"
                                    "object so @SO\n" /* k.so's size and hash, known once it is compiled (main) */
                                    "object cl - -\n"
                                    "cuda sm_90 - - - -\n"
                                    "\n"
                                    "region params  0    512\n"
                                    "region grads   512  512\n"
                                    "region adam_m  1024 512\n"
                                    "region adam_v  1536 512\n"
                                    "region slots   2048 64 2\n"
                                    "region scratch 2176 512\n"
                                    "arena 2688\n"
                                    "\n"
                                    "boundary send_fwd @2176 256 [2,4,8]\n"
                                    "boundary recv_bwd @2432 256 [2,4,8]\n"
                                    "param 0 emb.weight f32 [16,8] @0 init normal 0.5 decay 1 tied shared\n"
                                    "model_param emb.weight [16,8]\n"
                                    "model_param gain [8]\n"
                                    "model_param proj.weight [8,8]\n"
                                    "\n"
                                    "buffer tokens i32 [2,4] $0 saved\n"
                                    "buffer x f32 [8,8] @2176\n"
                                    "buffer dx f32 [8,8] @2432\n"
                                    "\n"
                                    "block forward\n"
                                    "  batch $0 -\n"
                                    "  kernel embed_fwd <<<1,1,0>>> $0:32 @0:512 @2176:256 i:8 i:8\n"
                                    "end\n"
                                    "\n"
                                    "block backward\n"
                                    "  kernel embed_bwd <<<1,1,0>>> $0:32 @2432:256 @512:512 i:8 i:8\n"
                                    "end\n"
                                    "\n"
                                    "block optimizer\n"
                                    "  allreduce_tied @512 512\n"
                                    "  grad_norm sumsq <<<3,1,0>>> @2176:12 @2192:24\n"
                                    "  kernel adamw <<<1,1,0>>> @0:512 @512:512 @1024:512 @1536:512 i:128 i:1 s:lr "
                                    "s:beta1 s:beta2 s:eps s:wd s:bc1 s:bc2 s:clip\n"
                                    "end\n"
                                    "\n"
                                    "schedule 1f1b\n"
                                    "  zero_grads\n"
                                    "  F 0 0\n"
                                    "  comm send_fwd 0 0\n"
                                    "  F 1 1\n"
                                    "  comm send_fwd 1 1 recv_bwd 0 0\n"
                                    "  B 0 0\n"
                                    "  comm recv_bwd 1 1\n"
                                    "  B 1 1\n"
                                    "  OPT\n"
                                    "end\n";

static const char *const STAGE1_T =
    "model testlin\n"
    "mesh tp 1 pp 2 dp 1\n"
    "rank 1 stage 1 tp_rank 0 dp_rank 0\n"
    "peers prev 0 next -1\n"
    "step micro_batch 2 seq 4 microbatches 2 schedule 1f1b\n"
    "vocab 16\n"
    "kernels k 0123456789abcdef\n"
    "object so @SO\n" /* k.so's size and hash, known once it is compiled (main) */
    "object cl - -\n"
    "cuda sm_90 - - - -\n"
    "\n"
    "region params  0    896\n"
    "region grads   896  896\n"
    "region adam_m  1792 896\n"
    "region adam_v  2688 896\n"
    "region slots   3584 1408 1\n"
    "region scratch 4992 1344\n"
    "arena 6336\n"
    "\n"
    "boundary recv_fwd $0 256 [2,4,8]\n"
    "boundary send_bwd @6016 256 [2,4,8]\n"
    "param 0 gain f32 [8] @0 init ones decay 0\n"
    "param 1 proj.weight f32 [8,8] @64 init normal 0.3 decay 1\n"
    "param 2 emb.weight f32 [16,8] @384 init normal 0.5 decay 1 tied shared copy\n"
    "model_param emb.weight [16,8]\n"
    "model_param gain [8]\n"
    "model_param proj.weight [8,8]\n"
    "\n"
    "buffer x f32 [8,8] $0 saved\n"
    "buffer labels i32 [2,4] $256 saved\n"
    "buffer h f32 [8,8] $320 saved\n"
    "buffer y f32 [8,8] $576 saved\n"
    "buffer probs f32 [8,16] $832 saved\n"
    "buffer loss f32 [1] $1344 saved\n"
    "buffer logits f32 [8,16] @4992\n"
    "buffer dy f32 [8,8] @5504\n"
    "buffer dh f32 [8,8] @5760\n"
    "buffer dx f32 [8,8] @6016\n"
    "buffer dl f32 [1] @6272\n"
    "\n"
    "block forward\n"
    "  batch - $256\n"
    "  gemm N N 4 8 8 1 $0 8 32 @64 8 0 0 $320 8 32 2      # h_b = x_b P\n"
    "  kernel gain_fwd <<<1,1,0>>> $320:256 @0:32 $576:256 i:8 i:8 f:1\n"
    "  gemm N T 8 16 8 1 $576 8 0 @384 8 0 0 @4992 16 0 1  # logits = y E^T\n"
    "  kernel xent_fwd <<<1,1,0>>> @4992:512 $256:32 $832:512 $1344:4 i:8 i:16\n"
    "  loss $1344\n"
    "end\n"
    "\n"
    "block backward\n"
    "  seed @6272 0.5\n"
    "  kernel xent_bwd <<<1,1,0>>> $832:512 $256:32 @6272 @4992:512 i:8 i:16\n"
    "  gemm T N 16 8 8 1 @4992 16 0 $576 8 0 1 @1280 8 0 1  # dE += dlogits^T y (the copy's gradient)\n"
    "  gemm N N 8 8 16 1 @4992 16 0 @384 8 0 0 @5504 8 0 1  # dy = dlogits E\n"
    "  kernel gain_bwd <<<1,1,0>>> $320:256 @0:32 @5504:256 @5760:256 @896:32 i:8 i:8\n"
    "  gemm T N 8 8 4 1 $0 8 32 @5760 8 32 1 @960 8 0 2    # dP += x_b^T dh_b\n"
    "  gemm N T 8 8 8 1 @5760 8 0 @64 8 0 0 @6016 8 0 1    # dx = dh P^T, sent back\n"
    "end\n"
    "\n"
    "block optimizer\n"
    "  allreduce_tied @1280 512\n"
    "  grad_norm sumsq <<<3,1,0>>> @6272:12 @6288:24\n"
    "  kernel adamw <<<1,1,0>>> @0:32 @896:32 @1792:32 @2688:32 i:8 i:0 s:lr s:beta1 s:beta2 s:eps s:wd s:bc1 s:bc2 "
    "s:clip\n"
    "  kernel adamw <<<1,1,0>>> @64:256 @960:256 @1856:256 @2752:256 i:64 i:1 s:lr s:beta1 s:beta2 s:eps s:wd s:bc1 "
    "s:bc2 s:clip\n"
    "  kernel adamw <<<1,1,0>>> @384:512 @1280:512 @2176:512 @3072:512 i:128 i:1 s:lr s:beta1 s:beta2 s:eps s:wd s:bc1 "
    "s:bc2 "
    "s:clip\n"
    "end\n"
    "\n"
    "schedule 1f1b\n"
    "  zero_grads\n"
    "  comm recv_fwd 0 0\n"
    "  F 0 0\n"
    "  B 0 0\n"
    "  comm send_bwd 0 0 recv_fwd 1 0\n"
    "  F 1 0\n"
    "  B 1 0\n"
    "  comm send_bwd 1 0\n"
    "  OPT\n"
    "end\n";

#define MPIRUN "timeout 120 mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 "

/* A pipeline directory NAME under tdir from two bodies (NULL: no such file). */
static void make_pipe(const char *name, const char *b0, const char *b1) {
  char d[512], p[600], so[600];
  path(d, sizeof d, name);
  mkdir(d, 0755);
  const char *bodies[2] = {b0, b1};
  for (int r = 0; r < 2; r++) {
    snprintf(p, sizeof p, "%s/rank%d.prog", d, r);
    unlink(p);
    if (!bodies[r]) continue;
    char *t = listing(bodies[r]);
    write_bytes(p, t, strlen(t));
    free(t);
  }
  snprintf(so, sizeof so, "%s/k.so", d);
  unlink(so);
  if (symlink("../k.so", so) != 0) perror("symlink");
}

/* ppr under mpirun -np NP; like run(). */
static int mpi_run(int np, const char *args) {
  char a[16384];
  snprintf(a, sizeof a, "%s", args);
  char cmd[16384 + 2048], o[512];
  path(o, sizeof o, "out.txt");
  snprintf(cmd, sizeof cmd, MPIRUN "-np %d %s %s >%s 2>&1", np, ppr, a, o);
  int st = system(cmd);
  char *t = read_text(o);
  snprintf(out, sizeof out, "%s", t ? t : "");
  free(t);
  if (st == -1) return -1;
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return WEXITSTATUS(st);
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *q = strstr(hay, needle); q; q = strstr(q + 1, needle)) n++;
  return n;
}

static void expect_mpi_fail(const char *what, int np, const char *args, const char *needle) {
  int rc = mpi_run(np, args);
  int ok = rc != 0 && rc != 124 && sane(rc) && strstr(out, needle) && strstr(out, "ppr: error: ");
  if (!check(ok, "mpirun -np %d: %s: fails (not by the timeout) with '%s'", np, what, needle)) {
    printf("  | exit %d\n", rc);
    show();
  }
}

/* The weights after three clipped AdamW steps of the one-rank program (main): what the meshes'
 * runs of the same three steps must reproduce. Run once (its check counted then), read from its
 * --save after. 0, or -1. */
static int one_rank_three_steps(W *b) {
  static int ran;
  char wp[512], dp[512], sp[512], args[2048];
  path(wp, sizeof wp, "w.safetensors");
  path(dp, sizeof dp, "data.bin");
  path(sp, sizeof sp, "one3.safetensors");
  if (!ran) {
    ran = 1;
    snprintf(args, sizeof args, "%s/main --init %s --data %s --steps 3 --lr 0.01 --clip 0.5 --save %s --quiet", tdir,
             wp, dp, sp);
    expect_ok("the one-rank program, three clipped steps", args);
  }
  return read_weights(sp, b, 0);
}

/* ||a - b|| / ||b|| over all three params */
static double weights_rel(const W *a, const W *b) {
  double e = 0, n = 0;
  for (int i = 0; i < V * H; i++) e += (a->E[i] - b->E[i]) * (a->E[i] - b->E[i]), n += b->E[i] * b->E[i];
  for (int i = 0; i < H; i++) e += (a->g[i] - b->g[i]) * (a->g[i] - b->g[i]), n += b->g[i] * b->g[i];
  for (int i = 0; i < H * H; i++) e += (a->P[i] - b->P[i]) * (a->P[i] - b->P[i]), n += b->P[i] * b->P[i];
  return sqrt(e / n);
}

static void test_pipeline_mpi(const W *w) {
  char wp[512], dp[512], gp[512], lp[512], sp[512], tp[512], args[8192];
  path(wp, sizeof wp, "w.safetensors");
  path(dp, sizeof dp, "data.bin");
  path(gp, sizeof gp, "pg.safetensors");
  path(lp, sizeof lp, "plog.jsonl");
  make_pipe("pipe", STAGE0, STAGE1);

  /* the gradients of one step: the direct computation, through two ranks */
  double gE[V * H], gg[H], gP[H * H];
  double loss = ref_step(w, data_main, 37, 0, gE, gg, gP);
  snprintf(args, sizeof args, "%s/pipe --init %s --data %s --steps 1 --save-grads %s --log %s", tdir, wp, dp, gp, lp);
  int rc = mpi_run(2, args);
  if (!check(rc == 0 && sane(rc), "mpirun -np 2: a two-stage pipeline trains one step")) {
    printf("  | exit %d\n", rc);
    show();
    return;
  }
  check(count_of(out, "step 1/1  loss ") == 1 && strstr(out, "mesh tp 1 pp 2 dp 1 (2 ranks over MPI)"),
        "pipeline: rank 0 alone prints the banner and the step line");
  W g;
  if (check(read_weights(gp, &g, 1) == 0, "pipeline --save-grads: the owners' params, once each (no copy)")) {
    double e1 = rel_err(g.E, gE, V * H), e2 = rel_err(g.g, gg, H), e3 = rel_err(g.P, gP, H * H);
    check(e1 < 1e-5 && e2 < 1e-5 && e3 < 1e-5,
          "pipeline gradients equal the direct computation (rel %.1e %.1e %.1e; emb.weight summed over the two "
          "stages by allreduce_tied)",
          e1, e2, e3);
  }
  double norm = 0;
  for (int i = 0; i < V * H; i++) norm += gE[i] * gE[i];
  for (int i = 0; i < H; i++) norm += gg[i] * gg[i];
  for (int i = 0; i < H * H; i++) norm += gP[i] * gP[i];
  norm = sqrt(norm);
  char *log = read_text(lp);
  double l = NAN, gn = NAN;
  int step = 0;
  int got = log ? sscanf(records(log), "{\"step\":%d,\"loss\":%lf,\"grad_norm\":%lf", &step, &l, &gn) : 0;
  check(got == 3 && fabs(l - loss) < 1e-5 * loss && fabs(gn - norm) < 1e-5 * norm,
        "pipeline loss %.7f and grad_norm %.7f (the copy counted once) equal the direct computation", l, gn);
  free(log);

  /* three clipped AdamW steps: the same weights as the one-rank program */
  path(sp, sizeof sp, "pw.safetensors");
  path(tp, sizeof tp, "trace.json");
  snprintf(args, sizeof args, "%s/pipe --init %s --data %s --steps 3 --lr 0.01 --clip 0.5 --save %s --trace %s --quiet",
           tdir, wp, dp, sp, tp);
  rc = mpi_run(2, args);
  check(rc == 0 && sane(rc), "mpirun -np 2: three clipped steps with --save and --trace");
  check(strstr(out, "ppr: bubble (1 - compute / step time), mean of steps 2..3: rank 0/s0 0.") &&
            strstr(out, ", rank 1/s1 ") && strstr(out, "\"ppr_bubble\")\n"),
        "--trace prints the mean bubble of every rank in one line");
  char *tr = read_text(tp);
  check(tr && strstr(tr, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[") &&
            strstr(tr, "\"args\":{\"name\":\"rank 1 (stage 1)\"}") &&
            strstr(tr, "\"name\":\"F 1\",\"cat\":\"compute\",\"ph\":\"X\"") &&
            strstr(tr, "\"name\":\"send_bwd 0 + recv_fwd 1: wait\"") && strstr(tr, "\"name\":\"allreduce_tied\"") &&
            strstr(tr, "\"pid\":1,\"tid\":0") && tr[strlen(tr) - 2] == '}' &&
            strstr(tr, "\"ppr_bubble\":{\"what\":\"1 - compute / step time\",\"first_step\":1,\"mean_from_step\":2,") &&
            strstr(tr, "{\"rank\":1,\"stage\":1,\"steps\":[0."),
        "--trace writes Chrome trace events: both ranks, F/B, comm post/wait, allreduce_tied; each step's bubble");
  free(tr);
  path(tp, sizeof tp, "trace.svg");
  tr = read_text(tp);
  check(tr && strstr(tr, "<svg xmlns=\"http://www.w3.org/2000/svg\"") && strstr(tr, "(measured, ppr --trace)") &&
            strstr(tr, ">rank 1</text>") && strstr(tr, "<title>F1 [") && strstr(tr, "<title>B0 [") &&
            strstr(tr, "</svg>\n"),
        "--trace draws the last step beside the trace (trace.svg): both ranks, F and B of each micro-batch");
  free(tr);
  W a, b;
  if (check(read_weights(sp, &a, 0) == 0 && one_rank_three_steps(&b) == 0, "both --save files readable"))
    check(weights_rel(&a, &b) < 1e-6, "pipeline weights after 3 steps equal the one-rank run's (rel %.1e)",
          weights_rel(&a, &b));
  /* the one-rank program under mpirun -np 1: the same run */
  path(sp, sizeof sp, "np1.safetensors");
  snprintf(args, sizeof args, "%s/main --init %s --data %s --steps 3 --lr 0.01 --clip 0.5 --save %s --quiet", tdir, wp,
           dp, sp);
  rc = mpi_run(1, args);
  if (check(rc == 0 && sane(rc), "mpirun -np 1 runs a one-rank program") && read_weights(sp, &a, 0) == 0)
    check(!memcmp(&a, &b, sizeof a), "mpirun -np 1 and a plain run give bit-identical weights");

  /* --init of a pipeline: the whole model is checked on every rank, each loads its own */
  char p[512];
  const char *names[4] = {"emb.weight", "gain", "proj.weight", "extra.bias"};
  int nd[4] = {2, 1, 2, 1};
  int64_t se[2] = {V, H}, sg[1] = {H}, spp[2] = {H, H}, sx[1] = {3}, sbad[2] = {H, 4};
  float zero[8] = {0};
  char err[512];
  path(p, sizeof p, "pextra.safetensors");
  const int64_t *sh[4] = {se, sg, spp, sx};
  const float *dd[4] = {w->E, w->g, w->P, zero};
  rt_st_write(p, 4, names, nd, sh, dd, err, sizeof err);
  snprintf(args, sizeof args, "%s/pipe --init %s --steps 0", tdir, p);
  expect_mpi_fail("--init with an extra tensor", 2, args, "1 tensor the program has no param for: extra.bias");
  check(count_of(out, "extra.bias") == 1, "the same message of two ranks is printed once");
  path(p, sizeof p, "pmiss.safetensors");
  const int64_t *sh2[2] = {se, sg};
  rt_st_write(p, 2, names, nd, sh2, dd, err, sizeof err);
  snprintf(args, sizeof args, "%s/pipe --init %s --steps 0", tdir, p);
  expect_mpi_fail("--init without stage 1's proj.weight", 2, args, "pmiss.safetensors: 1 tensor missing: proj.weight");
  path(p, sizeof p, "pshape.safetensors");
  const int64_t *sh3[3] = {se, sg, sbad};
  rt_st_write(p, 3, names, nd, sh3, dd, err, sizeof err);
  snprintf(args, sizeof args, "%s/pipe --init %s --steps 0", tdir, p);
  expect_mpi_fail("--init with a wrong shape of another stage's tensor", 2, args, "tensor proj.weight has shape [8,4]");
  path(p, sizeof p, "head_ok.safetensors");
  snprintf(args, sizeof args, "%s/pipe --init %s --steps 0", tdir, p);
  rc = mpi_run(2, args);
  check(rc == 0 && sane(rc), "pipeline --init with lm_head.weight equal to the tied embedding");

  /* a launch that does not fit the listings */
  snprintf(args, sizeof args, "%s/pipe --steps 1", tdir);
  char want[1024];
  snprintf(want, sizeof want,
           "ppr: error: %s/pipe was compiled for 2 ranks (tp 1 \u00d7 pp 2 \u00d7 dp 1) but mpirun started 3 ranks",
           tdir);
  expect_mpi_fail("3 ranks for a 2-rank pipeline", 3, args, want);
  check(count_of(out, "was compiled for 2 ranks") == 3, "every rank says so");
  snprintf(want, sizeof want,
           "ppr: error: %s/pipe was compiled for 2 ranks (tp 1 \u00d7 pp 2 \u00d7 dp 1) but mpirun started 1 ranks",
           tdir);
  expect_fail("a 2-rank pipeline without mpirun", args, want);

  make_pipe("pipe_half", STAGE0, NULL);
  snprintf(args, sizeof args, "%s/pipe_half --steps 1", tdir);
  expect_mpi_fail("rank1.prog missing", 2, args, "pipe_half/rank1.prog: cannot open: No such file or directory");

  make_pipe("pipe_same", STAGE0, STAGE0);
  snprintf(args, sizeof args, "%s/pipe_same --steps 1", tdir);
  expect_mpi_fail("rank 0's listing as rank1.prog", 2, args,
                  "pipe_same/rank1.prog: the listing says 'rank 0': it is rank 0's program, not rank 1's");

  char *b1 = replace(STAGE1, "boundary recv_fwd $0 256 [2,4,8]", "boundary recv_fwd $0 128");
  make_pipe("pipe_bytes", STAGE0, b1);
  free(b1);
  snprintf(args, sizeof args, "%s/pipe_bytes --steps 1", tdir);
  expect_mpi_fail("neighbours that disagree on the hidden state's size", 2, args,
                  "rank0.prog sends a 256-byte hidden state to");

  char *b0 =
      replace(STAGE0, "model_param proj.weight [8,8]\n", "model_param proj.weight [8,8]\nmodel_param extra.w [4]\n");
  b1 = replace(STAGE1, "model_param proj.weight [8,8]\n", "model_param proj.weight [8,8]\nmodel_param extra.w [4]\n");
  make_pipe("pipe_owner", b0, b1);
  free(b0);
  free(b1);
  snprintf(args, sizeof args, "%s/pipe_owner --steps 1", tdir);
  expect_mpi_fail("a model_param no rank owns", 2, args, "model_param extra.w: no rank owns it");

  /* each waits for the other: stage 0 for a gradient, stage 1 for the next input */
  b0 = replace(STAGE0, "  F 1 1\n  comm send_fwd 1 1 recv_bwd 0 0\n  B 0 0\n",
               "  F 1 1\n  comm recv_bwd 0 0\n  comm send_fwd 1 1\n  B 0 0\n");
  b1 = replace(STAGE1, "  B 0 0\n  comm send_bwd 0 0 recv_fwd 1 0\n",
               "  B 0 0\n  comm recv_fwd 1 0\n  comm send_bwd 0 0\n");
  make_pipe("pipe_deadlock", b0, b1);
  free(b0);
  free(b1);
  snprintf(args, sizeof args, "%s/pipe_deadlock --steps 1", tdir);
  expect_mpi_fail("schedules that would deadlock", 2, args, "the schedules' messages cannot all complete");
  check(strstr(out, "pipe_deadlock/rank0.prog:55: rank 0 waits in 'comm recv_bwd 0 0'") &&
            strstr(out, "pipe_deadlock/rank1.prog:77: rank 1 waits in 'comm recv_fwd 1 0'"),
        "the deadlock message names where each rank waits");

  b0 = replace(STAGE0, "model_param gain [8]\n", "model_param gain [9]\n");
  make_pipe("pipe_model", b0, STAGE1);
  free(b0);
  snprintf(args, sizeof args, "%s/pipe_model --steps 1", tdir);
  expect_mpi_fail("model_param lines that differ between ranks", 2, args,
                  "rank1.prog: its model_param lines differ from");
}

/* ---- in-process parser checks and the fuzzer ----------------------------------------------- */

static int parse_msg(const char *text, char *err, size_t errlen) {
  RtProg *p = NULL;
  int rc = rt_prog_parse("t.prog", text, strlen(text), &p, err, errlen);
  rt_prog_free(p);
  return rc;
}

static void expect_parse_error_in(const char *body, const char *what, const char *from, const char *to,
                                  const char *needle) {
  char *b = replace(body, from, to);
  char *t = listing(b);
  char err[2048] = "";
  int rc = parse_msg(t, err, sizeof err);
  char n2[512];
  snprintf(n2, sizeof n2, needle, line_of(b, to));
  if (!check(rc != 0 && strstr(err, n2), "parser: %s -> '%s'", what, n2)) printf("  | got: %s\n", err);
  free(b);
  free(t);
}

/* BODY with from replaced by to parses */
static void expect_parse_ok(const char *what, const char *from, const char *to) {
  char *b = replace(BODY, from, to);
  char *t = listing(b);
  char err[2048] = "";
  int rc = parse_msg(t, err, sizeof err);
  if (!check(rc == 0, "parser: %s parses", what)) printf("  | got: %s\n", err);
  free(b);
  free(t);
}

static void expect_parse_error(const char *what, const char *from, const char *to, const char *needle) {
  expect_parse_error_in(BODY, what, from, to, needle);
}

/* BODY with from replaced by to, whose byte \001 becomes `byte` (a NUL too: the listing is parsed
 * with its length), rehashed; needle NULL: it must load. */
static void expect_parse_byte(const char *what, const char *from, const char *to, unsigned char byte,
                              const char *needle) {
  char *b = replace(BODY, from, to);
  size_t n = strlen(b);
  int line = line_of(b, to);
  for (const char *q = to; *q != '\001'; q++) line += *q == '\n';
  *strchr(b, '\001') = (char)byte;
  char *t = malloc(n + 128);
  int hl = header(t, n + 128, b, n);
  memcpy(t + hl, b, n);
  char err[2048] = "", n2[512] = "";
  RtProg *p = NULL;
  int rc = rt_prog_parse("t.prog", t, (size_t)hl + n, &p, err, sizeof err);
  rt_prog_free(p);
  if (needle) {
    snprintf(n2, sizeof n2, needle, line);
    if (!check(rc != 0 && strstr(err, n2), "parser: %s -> '%s'", what, n2)) printf("  | got: %s\n", err);
  } else if (!check(rc == 0, "parser: %s loads", what)) {
    printf("  | got: %s\n", err);
  }
  free(b);
  free(t);
}

/* The listing rules of pipeline programs: boundaries, flags, model params, comm entries. */
static void test_pipeline_parser(void) {
  char err[2048] = "";
  const char *bodies[2] = {STAGE0, STAGE1};
  for (int r = 0; r < 2; r++) {
    char *t = listing(bodies[r]);
    RtProg *p = NULL;
    int rc = rt_prog_parse("t.prog", t, strlen(t), &p, err, sizeof err);
    if (check(rc == 0 && p, "parser: pipeline stage %d loads [%s]", r, rc ? err : "ok")) {
      int ok =
          p->nmodel == 3 && p->prev == (r ? 0 : -1) && p->next == (r ? -1 : 1) && p->nshared == 1 && p->nentries == 9;
      if (r == 0)
        ok = ok && p->bnd[PP_SEND_FWD].present && p->bnd[PP_RECV_BWD].present && !p->bnd[PP_RECV_FWD].present &&
             p->bnd[PP_SEND_FWD].bytes == 256 && p->sched[4].kind == RT_E_COMM && p->sched[4].nops == 2 &&
             p->sched[4].op[1].kind == PP_RECV_BWD && p->params[0].shared && !p->params[0].copy;
      else
        ok = ok && p->bnd[PP_RECV_FWD].ptr.in_slot && p->params[2].copy && p->params[2].tied && p->tied == 2 &&
             p->blk[RT_BLK_OPTIMIZER].ins[0].kind == RT_I_ALLREDUCE_TIED;
      check(ok, "parser: stage %d: peers, boundaries, flags, model params and comm entries as written", r);
    }
    rt_prog_free(p);
    free(t);
  }
  const char *S0 = STAGE0, *S1 = STAGE1;
  /* boundaries */
  expect_parse_error_in(S0, "a boundary toward no stage", "boundary recv_bwd @2432 256 [2,4,8]\n",
                        "boundary recv_bwd @2432 256 [2,4,8]\nboundary recv_fwd $0 64\n",
                        ":26: boundary recv_fwd: stage 0 has no previous stage (peers prev -1 next 1)");
  expect_parse_error_in(S0, "a missing boundary", "boundary recv_bwd @2432 256 [2,4,8]\n", "",
                        ":25: no 'boundary recv_bwd' line before this one: stage 0 has a next stage (rank 1)");
  expect_parse_error_in(
      S1, "recv_fwd in the arena", "boundary recv_fwd $0 256", "boundary recv_fwd @0 256",
      ":%d: boundary recv_fwd: '@0': the received hidden state lives in the micro-batch's slot ($OFF)");
  expect_parse_error_in(S0, "a boundary shape of other bytes", "@2176 256 [2,4,8]", "@2176 256 [2,4,9]",
                        ":%d: boundary send_fwd: shape [2,4,9] is 288 bytes of f32, not 256");
  expect_parse_error_in(S0, "a boundary leaving the arena", "@2432 256 [2,4,8]", "@2436 256 [2,4,8]",
                        ":%d: boundary recv_bwd: @2436 + 256 bytes leaves the arena (2688 bytes)");
  expect_parse_error_in(S0, "a boundary given twice", "boundary recv_bwd @2432 256 [2,4,8]\n",
                        "boundary recv_bwd @2432 256 [2,4,8]\nboundary recv_bwd @2432 256\n",
                        ":26: boundary recv_bwd is given twice (first on line 25)");
  expect_parse_error_in(S0, "a boundary after the params", "model_param emb.weight [16,8]\n",
                        "boundary send_bwd @0 4\nmodel_param emb.weight [16,8]\n",
                        ":%d: boundary after a param line (boundaries come first)");
  expect_parse_error_in(S0, "peers prev on the first stage", "peers prev -1 next 1", "peers prev 1 next -1",
                        ":%d: peers: prev 1, but stage 0 is the first stage (prev -1)");
  /* flags and model params */
  expect_parse_error_in(S1, "copy without shared", "tied shared copy", "tied copy",
                        ":%d: param emb.weight: 'copy' without 'shared'");
  expect_parse_error_in(S1, "a flag twice", "tied shared copy", "tied shared shared",
                        ":%d: param emb.weight: flag 'shared' given twice");
  expect_parse_error_in(
      S1, "an unknown flag", "tied shared copy", "tied shared mine",
      ":%d: param emb.weight: unexpected 'mine' at the end of the line (flags: tied, shared, copy, replica, "
      "shard DIM START LEN DENSE [parts P])");
  expect_parse_error("shared with one stage", " decay 1 tied\n", " decay 1 tied shared\n",
                     ":%d: param emb.weight: shared, but the mesh has one pipeline stage (pp 1)");
  expect_parse_error_in(S1, "a param not among the model params", "model_param gain [8]\n", "",
                        "t.prog:26: param gain is not one of the model's params");
  expect_parse_error_in(S1, "a param of another shape than its model_param", "model_param gain [8]",
                        "model_param gain [4]", "param gain: its shape differs from its model_param line");
  expect_parse_error_in(S1, "a model_param twice", "model_param gain [8]\n",
                        "model_param gain [8]\nmodel_param gain [8]\n",
                        ":31: model_param gain is given twice (first on line 30)");
  expect_parse_error_in(S1, "a param after the model params", "model_param proj.weight [8,8]\n",
                        "model_param proj.weight [8,8]\nparam 3 z f32 [1] @832 init ones decay 0\n",
                        ":32: param after a model_param line (params come first)");
  /* allreduce_tied */
  expect_parse_error_in(S1, "allreduce_tied after grad_norm",
                        "  allreduce_tied @1280 512\n  grad_norm sumsq <<<3,1,0>>> @6272:12 @6288:24\n",
                        "  grad_norm sumsq <<<3,1,0>>> @6272:12 @6288:24\n  allreduce_tied @1280 512\n",
                        ":66: allreduce_tied after grad_norm (line 65): the norm needs the summed gradients");
  expect_parse_error_in(S1, "no allreduce_tied for a shared param", "  allreduce_tied @1280 512\n", "",
                        "param emb.weight (line 28) is shared, but no allreduce_tied of the optimizer block sums its "
                        "gradient (@1280, 512 bytes)");
  expect_parse_error_in(S1, "allreduce_tied outside the grads", "allreduce_tied @1280 512", "allreduce_tied @384 512",
                        ":%d: allreduce_tied: @384 + 512 bytes is not inside the grads region [896, 1792)");
  expect_parse_error_in(S1, "allreduce_tied in the backward block", "  seed @6272 0.5\n",
                        "  seed @6272 0.5\n  allreduce_tied @1280 512\n",
                        "'allreduce_tied' is not allowed in the backward block (only in the optimizer block)");
  expect_parse_error("allreduce_tied without a shared param", "  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n",
                     "  allreduce_tied @832 512\n  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n",
                     ":%d: allreduce_tied, but no param is marked shared");
  /* comm entries */
  expect_parse_error("comm in a one-stage program", "  F 1 1\n", "  F 1 1\n  comm send_fwd 1 1\n",
                     ":72: comm send_fwd: this stage has no 'boundary send_fwd' line");
  expect_parse_error_in(S0, "an unknown comm op", "  comm send_fwd 0 0\n", "  comm send 0 0\n",
                        ":%d: comm: unknown op 'send' (expected send_fwd, recv_fwd, send_bwd or recv_bwd)");
  expect_parse_error_in(S0, "comm with 3 fields", "  comm send_fwd 0 0\n", "  comm send_fwd 0\n",
                        ":%d: expected 'comm OP MICROBATCH SLOT [OP MICROBATCH SLOT]'");
  expect_parse_error_in(S0, "send_fwd before its F", "  F 0 0\n  comm send_fwd 0 0\n", "  comm send_fwd 0 0\n  F 0 0\n",
                        ":%d: send_fwd 0 0 before F 0");
  expect_parse_error_in(
      S0, "send_fwd from the arena after another F", "  F 0 0\n  comm send_fwd 0 0\n  F 1 1\n",
      "  F 0 0\n  F 1 1\n  comm send_fwd 0 0\n",
      ":54: send_fwd 0 0: its buffer is in the arena (@2176), so it must follow F 0 with no F, B or W between");
  expect_parse_error_in(S0, "send_fwd in another slot", "  comm send_fwd 0 0\n", "  comm send_fwd 0 1\n",
                        ":%d: send_fwd 0 1: micro-batch 0's forward ran in slot 0");
  expect_parse_error_in(S0, "a second send_fwd", "  comm recv_bwd 1 1\n", "  comm recv_bwd 1 1 send_fwd 1 1\n",
                        ":%d: a second send_fwd for micro-batch 1");
  expect_parse_error_in(
      S0, "B before its recv_bwd", "  comm recv_bwd 1 1\n", "",
      ":57: B 1 1 before recv_bwd 1 1 (the gradient of the stage's output comes from the next stage)");
  expect_parse_error_in(
      S0, "an F while a received gradient waits in the arena", "  comm send_fwd 1 1 recv_bwd 0 0\n  B 0 0\n",
      "  comm send_fwd 1 1 recv_bwd 0 0\n  F 0 0\n",
      ":56: F 0 0: the gradient received for micro-batch 0 (line 55) is in the arena, where this block may write");
  expect_parse_error_in(S0, "two received gradients in one arena buffer",
                        "  comm send_fwd 1 1 recv_bwd 0 0\n  B 0 0\n  comm recv_bwd 1 1\n",
                        "  comm send_fwd 1 1 recv_bwd 0 0\n  comm recv_bwd 1 1\n  B 0 0\n",
                        ":56: recv_bwd 1 1: the gradient received for micro-batch 0 (line 55) is still waiting");
  expect_parse_error_in(S0, "OPT before every message", "  comm send_fwd 1 1 recv_bwd 0 0\n", "  comm recv_bwd 0 0\n",
                        ":59: OPT before send_fwd of micro-batch 1");
  expect_parse_error_in(S1, "F before its recv_fwd", "  comm recv_fwd 0 0\n  F 0 0\n", "  F 0 0\n  comm recv_fwd 0 0\n",
                        ":%d: F 0 0 before recv_fwd 0 0 (the stage's input comes from the previous stage)");
  expect_parse_error_in(S1, "recv_fwd into a busy slot", "  B 0 0\n  comm send_bwd 0 0 recv_fwd 1 0\n",
                        "  comm recv_fwd 1 0\n  B 0 0\n  comm send_bwd 0 0\n",
                        ":%d: recv_fwd 1 0: slot 0 still holds micro-batch 0 (its B has not run)");
  expect_parse_error_in(S1, "send_bwd before its B", "  B 0 0\n  comm send_bwd 0 0 recv_fwd 1 0\n",
                        "  comm send_bwd 0 0\n  B 0 0\n  comm recv_fwd 1 0\n", ":%d: send_bwd 0 0 before B 0");
  expect_parse_error_in(S1, "two buffers of one comm entry overlap", "boundary send_bwd @6016 256",
                        "boundary send_bwd @3584 256",
                        ":77: comm: the buffers of send_bwd 0 and recv_fwd 1 overlap (they are in flight together)");
  expect_parse_error_in(S1, "comm after OPT", "  OPT\n", "  OPT\n  comm send_bwd 1 0\n",
                        "'comm' after OPT (OPT is the schedule's last entry)");
}

/* Tensor- and data-parallel listings: shard clauses, allreduce, the local micro-batches. BODY as
 * rank 0 of tp 2: the table split by rows (vocab 16 over 2 ranks), proj by columns of its dim 1. */
static char *tp_body(void) {
  char *a = replace(BODY, "mesh tp 1 pp 1 dp 1", "mesh tp 2 pp 1 dp 1");
  char *b = replace(a, "param 0 emb.weight f32 [16,8] @0 init normal 0.5 decay 1 tied\n",
                    "param 0 emb.weight f32 [8,8] @0 init normal 0.5 decay 1 tied shard 0 0 8 16\n");
  free(a);
  a = replace(b, "param 2 proj.weight f32 [8,8] @576 init normal 0.3 decay 1\n",
              "param 2 proj.weight f32 [8,4] @576 init normal 0.3 decay 1 shard 1 4 4 8\n"
              "model_param emb.weight [16,8]\nmodel_param gain [8]\nmodel_param proj.weight [8,8]\n");
  free(b);
  b = replace(a, "  loss $1408\n", "  allreduce tp max $1408 4\n  allreduce tp/2 sum @6272 512\n  loss $1408\n");
  free(a);
  a = replace(b, "  kernel embed_bwd", "  allreduce tp/1 sum @7296 256    # a comment\n  kernel embed_bwd");
  free(b);
  b = replace(a, "block optimizer\n  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n",
              "block optimizer\n  allreduce tp sum @1344 32\n  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n");
  free(a);
  return b;
}

static void test_tp_parser(void) {
  char err[2048] = "";
  char *tb = tp_body(), *t = listing(tb);
  RtProg *p = NULL;
  int rc = rt_prog_parse("t.prog", t, strlen(t), &p, err, sizeof err);
  if (check(rc == 0 && p, "parser: a tensor-parallel listing loads [%s]", rc ? err : "ok")) {
    const RtParam *e = &p->params[0], *g = &p->params[1], *q = &p->params[2];
    const RtBlock *f = &p->blk[RT_BLK_FORWARD], *bk = &p->blk[RT_BLK_BACKWARD], *o = &p->blk[RT_BLK_OPTIMIZER];
    check(p->tp == 2 && e->sharded && e->shard_dim == 0 && e->shard_start == 0 && e->shard_dense == 16 &&
              e->dims[0] == 8 && e->dense_dims[0] == 16 && e->dense_dims[1] == 8 && e->dense_numel == 128 &&
              e->numel == 64 && !g->sharded && g->dense_numel == 8 && q->sharded && q->shard_dim == 1 &&
              q->shard_start == 4 && q->dense_dims[0] == 8 && q->dense_dims[1] == 8 && p->tied == 0,
          "parser: shard clauses: the local and the dense shapes");
    check(f->ins[6].kind == RT_I_ALLREDUCE && f->ins[6].group == RT_G_TP && f->ins[6].op == RT_OP_MAX &&
              f->ins[6].p[0].in_slot && f->ins[6].bytes == 4 && f->ins[7].group == RT_G_TP_SUB && f->ins[7].sub == 2 &&
              f->ins[7].op == RT_OP_SUM && bk->ins[7].kind == RT_I_ALLREDUCE && bk->ins[7].sub == 1 &&
              o->ins[0].kind == RT_I_ALLREDUCE && o->ins[0].p[0].off == 1344 && o->ins[0].bytes == 32,
          "parser: allreduce tp, tp/R, sum and max, in every block");
  }
  rt_prog_free(p);
  free(t);
  /* shard clauses */
  expect_parse_error_in(tb, "shard DIM past the dims", "tied shard 0 0 8 16", "tied shard 2 0 8 16",
                        ":%d: param emb.weight: shard DIM 2, but the param has 2 dims");
  expect_parse_error_in(tb, "shard LEN other than the local dim", "tied shard 0 0 8 16", "tied shard 0 0 7 16",
                        ":%d: param emb.weight: shard LEN 7 is not the param's dim 0 (8)");
  expect_parse_error_in(tb, "shard START past the dense rows", "tied shard 0 0 8 16", "tied shard 0 16 8 16",
                        ":%d: param emb.weight: shard START 16 is not inside the dense dim 0 of 16 rows");
  expect_parse_error_in(tb, "shard with 3 integers", "tied shard 0 0 8 16", "tied shard 0 0 8",
                        ":%d: param emb.weight: 'shard DIM START LEN DENSE' needs 4 integers");
  expect_parse_error_in(tb, "shard START not an integer", "tied shard 0 0 8 16", "tied shard 0 x 8 16",
                        ":%d: shard: START: expected an integer in [0, 1099511627776], found 'x'");
  expect_parse_error_in(tb, "shard twice", "tied shard 0 0 8 16", "shard 0 0 8 16 tied shard 0 0 8 16",
                        ":%d: param emb.weight: flag 'shard' given twice");
  expect_parse_error_in(tb, "a tied table whose dense rows are not the vocab", "tied shard 0 0 8 16",
                        "tied shard 0 0 8 12", ":%d: param emb.weight: tied, so its first dim 12 must be the vocab 16");
  /* parts: LEN and DENSE are P blocks; block b is dense rows [b·DENSE/P + START, + LEN/P) */
  char *pb = replace(tb, "decay 1 shard 1 4 4 8\n", "decay 1 shard 1 2 4 8 parts 2\n");
  t = listing(pb);
  p = NULL;
  rc = rt_prog_parse("t.prog", t, strlen(t), &p, err, sizeof err);
  check(rc == 0 && p && p->params[2].shard_parts == 2 && p->params[2].shard_start == 2 &&
            p->params[2].dense_dims[1] == 8 && p->params[0].shard_parts == 1 && p->params[1].shard_parts == 1,
        "parser: shard ... parts 2 [%s]", rc ? err : "ok");
  rt_prog_free(p);
  free(t);
  free(pb);
  expect_parse_error_in(tb, "shard parts 1", "shard 1 4 4 8", "shard 1 2 4 8 parts 1",
                        ":%d: shard: parts P: expected an integer in [2, 1099511627776], found '1'");
  expect_parse_error_in(tb, "shard parts not dividing LEN", "shard 1 4 4 8", "shard 1 0 4 8 parts 3",
                        ":%d: param proj.weight: shard parts 3 does not divide LEN 4 and DENSE 8 (each is 3 blocks)");
  expect_parse_error_in(tb, "shard parts not dividing DENSE", "shard 1 4 4 8", "shard 1 0 4 6 parts 4",
                        ":%d: param proj.weight: shard parts 4 does not divide LEN 4 and DENSE 6 (each is 4 blocks)");
  expect_parse_error_in(tb, "shard parts past a part's rows", "shard 1 4 4 8", "shard 1 4 4 8 parts 2",
                        ":%d: param proj.weight: shard START 4 + LEN/parts 2 passes a part's 4 dense rows (a shard in "
                        "parts has no padding)");
  expect_parse_error_in(tb, "shard parts without P", "shard 1 4 4 8", "shard 1 2 4 8 parts",
                        ":%d: param proj.weight: 'parts' needs an integer P >= 2");
  expect_parse_error_in(tb, "parts before shard", "shard 1 4 4 8", "parts 2 shard 1 2 4 8",
                        ":%d: param proj.weight: 'parts P' belongs after 'shard DIM START LEN DENSE'");
  expect_parse_error_in(tb, "a dense shape other than the model_param's", "model_param proj.weight [8,8]",
                        "model_param proj.weight [8,6]",
                        "t.prog:25: param proj.weight: its dense shape differs from its model_param line (line 28)");
  /* allreduce */
  expect_parse_error_in(tb, "allreduce tp/R with R not dividing tp", "allreduce tp/2 sum", "allreduce tp/3 sum",
                        ":%d: allreduce: group tp/3: 3 does not divide tp 2");
  expect_parse_error_in(tb, "allreduce tp/0", "allreduce tp/2 sum", "allreduce tp/0 sum",
                        ":%d: allreduce: group 'tp/0': R in tp/R is not an integer in [1, 65536]");
  expect_parse_error_in(tb, "allreduce over an unknown group", "allreduce tp/2 sum", "allreduce pp sum",
                        ":%d: allreduce: unknown group 'pp' (expected tp, tp/R or dp)");
  expect_parse_error_in(tb, "allreduce with an unknown op", "allreduce tp max", "allreduce tp min",
                        ":%d: allreduce: unknown op 'min' (expected sum or max)");
  expect_parse_error_in(tb, "allreduce of part of a float", "allreduce tp/2 sum @6272 512",
                        "allreduce tp/2 sum @6272 510",
                        ":%d: allreduce: 510 bytes is not a whole number of f32 elements");
  expect_parse_error_in(tb, "allreduce leaving the arena", "allreduce tp/2 sum @6272 512",
                        "allreduce tp/2 sum @7552 512",
                        ":%d: allreduce: @7552 + 512 bytes leaves the arena (7616 bytes)");
  expect_parse_error_in(tb, "allreduce leaving the slot", "allreduce tp max $1408 4", "allreduce tp max $1408 68",
                        ":%d: allreduce: $1408 + 68 bytes leaves the slot (1472 bytes)");
  expect_parse_error_in(
      tb, "allreduce with 4 fields", "allreduce tp max $1408 4", "allreduce tp max $1408",
      ":%d: expected 5 fields, found 4 (the line reads 'allreduce tp|tp/R|dp sum|max OPERAND BYTES [f32|bf16]')");
  expect_parse_error_in(tb, "allreduce of gradients after grad_norm",
                        "  allreduce tp sum @1344 32\n  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n",
                        "  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n  allreduce tp sum @1344 32\n",
                        ":69: allreduce of gradients after grad_norm (line 68): the norm needs the summed gradients");
  free(tb);

  /* data parallelism: microbatches is the step's M, each replica's schedule runs M/dp of them */
  char *a = replace(BODY, "mesh tp 1 pp 1 dp 1", "mesh tp 1 pp 1 dp 2");
  char *b = replace(a, "block optimizer\n  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n",
                    "block optimizer\n  allreduce dp sum @832 832\n  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n");
  free(a);
  char *db = replace(b, "  F 0 0\n  F 1 1\n  B 0 0\n  B 1 1\n", "  F 0 0\n  B 0 0\n");
  free(b);
  t = listing(db);
  rc = rt_prog_parse("t.prog", t, strlen(t), &p, err, sizeof err);
  check(rc == 0 && p && p->dp == 2 && p->microbatches == 2 && p->local_microbatches == 1 && p->nentries == 4,
        "parser: a data-parallel listing: microbatches 2 in all, 1 in this replica's schedule [%s]", rc ? err : "ok");
  rt_prog_free(p);
  free(t);
  expect_parse_error_in(db, "a schedule running the step's M micro-batches in one replica", "  F 0 0\n  B 0 0\n",
                        "  F 0 0\n  B 0 0\n  F 1 1\n", ":73: micro-batch: expected an integer in [0, 0], found '1'");
  expect_parse_error_in(db, "microbatches not a multiple of dp", "microbatches 2", "microbatches 3",
                        ":%d: step: microbatches 3 is not a multiple of dp 2");
  expect_parse_error_in(
      db, "allreduce dp over part of the gradients", "allreduce dp sum @832 832", "allreduce dp sum @832 512",
      "param gain (line 24): dp 2, but no 'allreduce dp sum' of the optimizer block sums its gradient "
      "(@1344, 32 bytes) over the replicas");
  free(db);
}

static void test_parser(void) {
  char *t = listing(BODY);
  char err[2048] = "";
  RtProg *p = NULL;
  int rc = rt_prog_parse("t.prog", t, strlen(t), &p, err, sizeof err);
  if (check(rc == 0 && p, "parser: the hand-written listing loads [%s]", rc ? err : "ok")) {
    check(p->nparams == 3 && p->tied == 0 && p->vocab == 16 && p->nslots == 2 && p->blk[RT_BLK_FORWARD].n == 7 &&
              p->blk[RT_BLK_BACKWARD].n == 8 && !p->blk[RT_BLK_WEIGHTS].present && p->blk[RT_BLK_OPTIMIZER].n == 4 &&
              p->nentries == 6 && p->nkernels == 8 && p->params[2].dims[1] == 8 && p->params[1].init == RT_INIT_ONES &&
              p->params[0].std == 0.5 && !strcmp(p->kernels_base, "k") && p->kgeom[0].grid == 1 &&
              p->kgeom[0].block == 1 && p->nbuffers == 12 && p->buffers[0].dtype == PP_I32 &&
              p->buffers[2].dtype == PP_F32 && p->buffers[11].ptr.off == 7552,
          "parser: params, blocks, kernels (with their geometry), buffers and schedule as written");
  }
  rt_prog_free(p);
  free(t);

  /* params in any order are stored by index */
  char *b = replace(BODY,
                    "param 0 emb.weight f32 [16,8] @0 init normal 0.5 decay 1 tied\n"
                    "param 1 gain f32 [8] @512 init ones decay 0\n",
                    "param 1 gain f32 [8] @512 init ones decay 0\n"
                    "param 0 emb.weight f32 [16,8] @0 init normal 0.5 decay 1 tied\n");
  t = listing(b);
  rc = rt_prog_parse("t.prog", t, strlen(t), &p, err, sizeof err);
  check(rc == 0 && p && !strcmp(p->params[0].name, "emb.weight") && p->tied == 0,
        "parser: param lines in any order are stored by index");
  rt_prog_free(p);
  free(t);
  free(b);

  /* a split backward: a weights block and a W entry per micro-batch, each after its B */
  {
    char *w1 = replace(BODY, "block optimizer\n", "block weights\n  zero @7552 4\nend\n\nblock optimizer\n");
    char *split = replace(w1, "  B 0 0\n  B 1 1\n", "  B 0 0\n  B 1 1\n  W 0 0\n  W 1 1\n");
    t = listing(split);
    rc = rt_prog_parse("t.prog", t, strlen(t), &p, err, sizeof err);
    check(rc == 0 && p && p->blk[RT_BLK_WEIGHTS].present && p->blk[RT_BLK_WEIGHTS].n == 1 && p->nentries == 8 &&
              p->sched[5].kind == RT_E_W && p->sched[5].mb == 0 && p->sched[6].slot == 1,
          "parser: a weights block and W entries load [%s]", rc ? err : "ok");
    rt_prog_free(p);
    free(t);
    expect_parse_error("a W entry without a weights block", "  B 1 1\n", "  B 1 1\n  W 0 0\n",
                       "W 0 0: the program has no weights block");
    expect_parse_error_in(split, "W before its B", "  B 0 0\n  B 1 1\n  W 0 0\n", "  W 0 0\n  B 0 0\n  B 1 1\n",
                          "W 0 0 before B 0 (W reads what B computed)");
    expect_parse_error_in(split, "a second W", "  W 1 1\n", "  W 1 1\n  W 1 1\n", "a second W for micro-batch 1");
    expect_parse_error_in(split, "OPT before every W", "  W 1 1\n", "",
                          "OPT before every micro-batch's W ran (1 of 2)");
    expect_parse_error_in(split, "a slot reused before its W", "  F 0 0\n  F 1 1\n  B 0 0\n  B 1 1\n  W 0 0\n  W 1 1\n",
                          "  F 0 0\n  B 0 0\n  F 1 0\n  B 1 0\n  W 0 0\n  W 1 0\n",
                          "F 1 0: slot 0 still holds micro-batch 0 (its W has not run)");
    expect_parse_error_in(split, "W in another slot", "  W 1 1\n", "  W 1 0\n",
                          "W 1 0: micro-batch 1's forward did not run in slot 0");
    free(split);
    free(w1);
  }

  /* what ppc writes for a single-rank program: a peers line and the schedule's name */
  b = replace(BODY, "rank 0 stage 0 tp_rank 0 dp_rank 0\n",
              "rank 0 stage 0 tp_rank 0 dp_rank 0\npeers prev -1 next -1\n");
  char *b2 = replace(b, "schedule\n", "schedule gpipe\n");
  t = listing(b2);
  rc = rt_prog_parse("t.prog", t, strlen(t), &p, err, sizeof err);
  check(rc == 0 && p && p->nentries == 6, "parser: 'peers prev -1 next -1' and 'schedule gpipe' load [%s]",
        rc ? err : "ok");
  rt_prog_free(p);
  free(t);
  free(b);
  free(b2);
  expect_parse_error("a peers line naming the rank itself", "rank 0 stage 0 tp_rank 0 dp_rank 0\n",
                     "rank 0 stage 0 tp_rank 0 dp_rank 0\npeers prev -1 next 0\n",
                     ":8: peers: a rank is not its own pipeline neighbour");
  expect_parse_error("a peers line out of range", "rank 0 stage 0 tp_rank 0 dp_rank 0\n",
                     "rank 0 stage 0 tp_rank 0 dp_rank 0\npeers prev -2 next -1\n",
                     ":8: peers: prev: expected an integer in [-1, 0], found '-2'");
  expect_parse_error("a data-parallel mesh whose replicas' gradients are never summed", "mesh tp 1 pp 1 dp 1",
                     "mesh tp 1 pp 1 dp 2",
                     "param emb.weight (line 23): dp 2, but no 'allreduce dp sum' of the optimizer block sums its "
                     "gradient (@832, 512 bytes) over the replicas");
  expect_parse_error(
      "a pipeline mesh without a peers line", "mesh tp 1 pp 1 dp 1", "mesh tp 1 pp 2 dp 1",
      ":8: expected 'peers prev P next N' (a pipeline-parallel program names its neighbours), found 'step'");
  expect_parse_error("schedule with two words", "schedule\n", "schedule a b\n",
                     ":%d: expected 'schedule' or 'schedule NAME'");
  expect_parse_error("CRLF line ends", "model testlin\n", "model testlin\r\n", ":%d: carriage return");
  /* a listing is text throughout: NUL and control bytes are errors in comments too; bytes >= 0x80 may
   * appear there */
  expect_parse_byte("a NUL byte in a comment", "# two micro-batches in flight", "# two micro-batches\001in flight", 0,
                    ":%d: NUL byte (a listing is text)");
  expect_parse_byte("a NUL byte in the first line's comment", "model testlin\n", "model testlin # \001\n", 0,
                    ":%d: NUL byte (a listing is text)");
  expect_parse_byte("a NUL byte in a comment line after the schedule", "  OPT\nend\n", "  OPT\nend\n# done\001\n", 0,
                    ":%d: NUL byte (a listing is text)");
  expect_parse_byte("a bell character in a comment", "# two micro-batches in flight",
                    "# two micro-batches\001in flight", 7, ":%d: control character 0x07");
  expect_parse_byte("a carriage return in a comment", "# two micro-batches in flight",
                    "# two micro-batches\001in flight", '\r', ":%d: carriage return");
  expect_parse_byte("a byte >= 0x80 in a comment", "# two micro-batches in flight", "# two micro-batches\001in flight",
                    0xe9, NULL);
  expect_parse_error("header order", "mesh tp 1 pp 1 dp 1\nrank",
                     "rank 0 stage 0 tp_rank 0 dp_rank 0\nmesh tp 1 pp 1 dp 1\nrank",
                     ":%d: expected 'mesh tp N pp N dp N [cp N]' (the header lines come in a fixed order)");
  expect_parse_error("no vocab line", "vocab 16\n", "", ":9: expected 'vocab N [ignore_index I]'");
  expect_parse_error("vocab line with a word other than ignore_index", "vocab 16\n", "vocab 16 ignore -100\n",
                     ":%d: expected 'ignore_index', found 'ignore' (the line reads 'vocab N [ignore_index I]')");
  expect_parse_error("an ignore_index past int32", "vocab 16\n", "vocab 16 ignore_index 2147483648\n",
                     ":%d: ignore_index: expected an integer in [-2147483648, 2147483647], found '2147483648'");
  expect_parse_ok("vocab line with ignore_index", "vocab 16\n", "vocab 16 ignore_index -100\n");
  expect_parse_error("s:tokscale without an ignore_index", "$1408:4 i:8 i:16\n", "$1408:4 i:8 i:16 s:tokscale\n",
                     ":%d: kernel xent_fwd: argument 7: s:tokscale weighs a masked loss's rows: the vocab line has no "
                     "ignore_index");
  expect_parse_ok("int runtime scalars of dropout", "$1408:4 i:8 i:16\n", "$1408:4 i:8 i:16 s:seed s:rngctr s:train\n");
  expect_parse_error("allgather of an unknown group", "  loss $1408\n", "  loss $1408\n  allgather xx $128 $384 256\n",
                     "expected 'tp', found 'xx' (the line reads 'allgather tp|cp|dp PART WHOLE BYTES [bf16]')");
  expect_parse_error("zero in a mesh of one data-parallel rank", "arena 7616\n", "zero 2 0\narena 7616\n",
                     "zero 2 0: the dp x cp group of this mesh has 1 ranks, this rank the 0-th");
  expect_parse_error("zero_part before zero", "arena 7616\n", "zero_part @0 208 104 @1664\narena 7616\n",
                     "zero_part before 'zero RANKS RANK'");
  expect_parse_error("allgather dp (ZeRO-1's) in a forward block", "  loss $1408\n",
                     "  loss $1408\n  allgather dp $128 $384 256\n",
                     "'allgather' is not allowed in the forward block (only in the optimizer block)");
  /* context parallelism: `cp C` on the mesh line, `cp_rank C` on the rank line exactly then */
  expect_parse_error("cp 2 whose gradients are never summed over the cp ranks",
                     "mesh tp 1 pp 1 dp 1\nrank 0 stage 0 tp_rank 0 dp_rank 0\n",
                     "mesh tp 1 pp 1 dp 1 cp 2\nrank 0 stage 0 tp_rank 0 dp_rank 0 cp_rank 0\n",
                     "param emb.weight (line 23): dp 1 with cp > 1, but no 'allreduce dp sum' of the optimizer block");
  expect_parse_error("cp 2 without a cp_rank", "mesh tp 1 pp 1 dp 1\n", "mesh tp 1 pp 1 dp 1 cp 2\n",
                     "expected 10 fields, found 8 (the line reads 'rank R stage S tp_rank T dp_rank D [cp_rank C]')");
  expect_parse_error("a cp_rank without cp", "rank 0 stage 0 tp_rank 0 dp_rank 0\n",
                     "rank 0 stage 0 tp_rank 0 dp_rank 0 cp_rank 0\n",
                     "expected 8 fields, found 10 (the line reads 'rank R stage S tp_rank T dp_rank D [cp_rank C]')");
  expect_parse_error("a cp_rank past cp", "mesh tp 1 pp 1 dp 1\nrank 0 stage 0 tp_rank 0 dp_rank 0\n",
                     "mesh tp 1 pp 1 dp 1 cp 2\nrank 0 stage 0 tp_rank 0 dp_rank 0 cp_rank 2\n",
                     "cp_rank: expected an integer in [0, 1], found '2'");
  expect_parse_error("cp 1 written out", "mesh tp 1 pp 1 dp 1\n", "mesh tp 1 pp 1 dp 1 cp 1\n",
                     "cp: expected an integer in [2, 65536], found '1'");
  expect_parse_error("a seq cp does not divide", "mesh tp 1 pp 1 dp 1\nrank 0 stage 0 tp_rank 0 dp_rank 0\n",
                     "mesh tp 1 pp 1 dp 1 cp 3\nrank 0 stage 0 tp_rank 0 dp_rank 0 cp_rank 0\n",
                     "step: seq 4 is not a multiple of cp 3");
  expect_parse_error("allgather cp without context parallelism", "  loss $1408\n",
                     "  loss $1408\n  allgather cp $128 $384 256\n",
                     "allgather cp, but the mesh has cp 1: a group of one rank");
  expect_parse_error("reduce_scatter past its whole's extent", "  loss $1408\n",
                     "  loss $1408\n  reduce_scatter tp $1400 $128 256\n",
                     "reduce_scatter: $1400 + 256 bytes leaves the slot (1472 bytes)");
  expect_parse_error("allgather in the optimizer block", "  grad_norm sumsq",
                     "  allgather tp @0 @512 4\n  grad_norm sumsq",
                     ":%d: 'allgather' is not allowed in the optimizer block");
  expect_parse_error("vocab 0", "vocab 16\n", "vocab 0\n",
                     ":%d: vocab: expected an integer in [1, 2147483647], found '0'");
  expect_parse_error("tied param whose first dim is not the vocab", "vocab 16\n", "vocab 17\n",
                     "param emb.weight: tied, so its first dim 16 must be the vocab 17");
  expect_parse_error("cuda line with a bad target", "cuda sm_90 - - - -", "cuda volta - - - -",
                     ":%d: cuda: 'volta' is not a GPU architecture (sm_80, sm_90, ...)");
  expect_parse_error("cuda line with the cubin alone", "cuda sm_90 - - - -", "cuda sm_90 12 0123456789abcdef - -",
                     ":%d: cuda: the cubin and the PTX come together: both sizes and hashes, or all '-'");
  expect_parse_error("cuda line with a size and no hash", "cuda sm_90 - - - -", "cuda sm_90 12 - 8 0123456789abcdef",
                     ":%d: cuda: the cubin file's size and hash come together: both, or both '-'");
  expect_parse_error("cuda line with a short hash", "cuda sm_90 - - - -", "cuda sm_90 12 0123 8 0123456789abcdef",
                     ":%d: cuda: cubin hash: expected 16 lowercase hex digits or '-', found '0123'");
  expect_parse_error("cuda line of version 2 (hashes without sizes)", "cuda sm_90 - - - -", "cuda sm_90 - -",
                     ":%d: expected 6 fields, found 4 (the line reads 'cuda ARCH CUBIN-BYTES|- CUBIN-HEX16|- "
                     "PTX-BYTES|- PTX-HEX16|-')");
  expect_parse_error("no cuda line", "cuda sm_90 - - - -\n", "",
                     ":14: expected 'cuda ARCH CUBIN-BYTES|- CUBIN-HEX16|- PTX-BYTES|- PTX-HEX16|-' (the header lines "
                     "come in a fixed order)");
  /* the kernel files' sizes and hashes (version 3) */
  expect_parse_error(
      "no object lines", "object cl - -\n", "",
      ":12: expected 'object cl BYTES|- HEX16|-' (the header lines come in a fixed order), found 'cuda'");
  expect_parse_error("object lines out of order", "object cl - -\n", "object so - -\n",
                     ":%d: expected 'cl', found 'so' (the line reads 'object cl BYTES|- HEX16|-')");
  expect_parse_error("an object line of an unknown file", "object cl - -", "object dll - -",
                     ":%d: expected 'cl', found 'dll' (the line reads 'object cl BYTES|- HEX16|-')");
  expect_parse_error("an object line with a size but no hash", "object cl - -", "object cl 100 -",
                     ":%d: object: the cl file's size and hash come together: both, or both '-'");
  expect_parse_error("an object line with a zero size", "object cl - -", "object cl 0 0123456789abcdef",
                     ":%d: object: cl bytes: expected an integer in [1, 2^40] or '-', found '0'");
  expect_parse_error("an object line with an upper-case hash", "object cl - -", "object cl 10 0123456789ABCDEF",
                     ":%d: object: cl hash: expected 16 lowercase hex digits or '-', found '0123456789ABCDEF'");
  expect_parse_error("an object line with a third field", "object cl - -", "object cl 10 0123456789abcdef x",
                     ":%d: expected 4 fields, found 5 (the line reads 'object cl BYTES|- HEX16|-')");
  expect_parse_error("kernel files with a path", "kernels k ", "kernels ../k ",
                     ":%d: kernels: '../k' is not a name (letters, digits, '_')");
  expect_parse_error("regions overlap", "region scratch 6272 1344", "region scratch 6208 1344",
                     "regions slots (line 19) and scratch (line 20) overlap");
  expect_parse_error("region past the arena", "arena 7616", "arena 7600",
                     "region scratch (line 20) ends at byte 7616, past the arena (7600 bytes)");
  expect_parse_error("grads size differs", "region grads   832  832", "region grads   832  768",
                     "region grads (line 16) has 768 bytes, region params 832: they share one layout");
  /* grads may be longer (a tied embedding's gradient after the layout); the moments may not */
  expect_parse_error("adam_m size differs", "region adam_m  1664 832", "region adam_m  1664 768",
                     "region adam_m (line 17) has 768 bytes, region params 832: they share one layout");
  expect_parse_error("missing region", "region adam_v  2496 832\n", "",
                     "region adam_v is missing (every region is given before 'arena')");
  expect_parse_error("unaligned slot size", "region slots   3328 1472 2", "region slots   3328 1480 2",
                     "the bytes of one slot are not a multiple of 64");
  expect_parse_error("param outside the params region", "@576 init normal", "@640 init normal",
                     "param proj.weight: @640 + 256 bytes is not inside the params region [0, 832)");
  expect_parse_error("params overlap", "[8] @512 init ones", "[8] @448 init ones",
                     "params emb.weight (line 23) and gain (line 24) overlap");
  expect_parse_error("duplicate param index", "param 2 proj.weight", "param 1 proj.weight",
                     "param index 1 is given twice");
  expect_parse_error("param index gap", "param 2 proj.weight", "param 5 proj.weight",
                     "param index 5, but there are 3 params");
  expect_parse_error("duplicate checkpoint name", "param 2 proj.weight", "param 2 gain",
                     ":%d: param: checkpoint name 'gain' is already param 1");
  expect_parse_error("bf16 param", "gain f32", "gain bf16",
                     ":%d: param gain: dtype 'bf16': this ppr runs f32 parameters only");
  expect_parse_error("unknown init", "init ones", "init uniform",
                     ":%d: param gain: init 'uniform' (expected normal STD, ones or zeros)");
  expect_parse_error("two tied params", "@576 init normal 0.3 decay 1", "@576 init normal 0.3 decay 1 tied",
                     ":%d: param proj.weight: a second tied param (emb.weight is tied)");
  expect_parse_error("buffer out of the slot", "buffer probs f32 [8,16] $896", "buffer probs f32 [8,16] $1024",
                     ":%d: buffer probs: $1024 + 512 bytes leaves the slot (1472 bytes)");
  expect_parse_error("gemm leading dimension too small", "gemm N N 8 8 16 1 @6272 16", "gemm N N 8 8 16 1 @6272 15",
                     ":%d: gemm: leading dimension of A is 15, less than its 16 columns");
  expect_parse_error("gemm batch stride past the slot", "$128 8 32 @576 8 0 0 $384 8 32 2",
                     "$128 8 32 @576 8 0 0 $384 8 320 2", ":%d: gemm: C: $384 + 1408 bytes leaves the slot");
  expect_parse_error("gemm with 17 fields", "gemm N T 8 8 8 1 @7040 8 0 @576 8 0 0 @7296 8 0 1",
                     "gemm N T 8 8 8 1 @7040 8 0 @576 8 0 0 @7296 8 0",
                     ":%d: expected 18 fields, or 21 with the types, then perhaps a triangle; found 17");
  expect_parse_error("gemm TA X", "gemm N T 8 16", "gemm X T 8 16", ":%d: gemm: TA is 'X' (expected N or T)");
  expect_parse_error("$ operand in the optimizer", "kernel adamw <<<1,1,0>>> @512:32",
                     "kernel adamw <<<1,1,0>>> $512:32",
                     ":%d: kernel adamw: argument 1: '$512:32': $ operands are not allowed in the optimizer block");
  expect_parse_error("unknown scalar", "s:lr s:beta1", "s:lrx s:beta1",
                     ":%d: kernel adamw: argument 7: unknown runtime scalar 's:lrx'");
  expect_parse_error("bad f: value", "f:1\n", "f:1e99\n",
                     ":%d: kernel gain_fwd: argument 6: 'f:1e99' is not a finite float");
  expect_parse_error("bad i: value", "i:8 i:8 f:1", "i:8x i:8 f:1",
                     ":%d: kernel gain_fwd: argument 4: 'i:8x' is not a 64-bit integer");
  expect_parse_error("kernel name", "kernel embed_bwd", "kernel 9embed_bwd",
                     ":%d: kernel: '9embed_bwd' is not a C identifier");
  expect_parse_error("kernel without a geometry", "kernel embed_bwd <<<1,1,0>>>", "kernel embed_bwd",
                     ":%d: kernel embed_bwd: expected the launch geometry <<<GRID,BLOCK,LOCAL>>>, found '$0:32'");
  expect_parse_error("kernel with a block of 3 threads", "kernel embed_bwd <<<1,1,0>>>", "kernel embed_bwd <<<1,3,0>>>",
                     ":%d: kernel embed_bwd: <<<1,3,0>>>: BLOCK is not a power of two in [1, 1024]");
  expect_parse_error("kernel with too much local memory", "kernel embed_bwd <<<1,1,0>>>",
                     "kernel embed_bwd <<<1,1,65540>>>",
                     ":%d: kernel embed_bwd: <<<1,1,65540>>>: LOCAL is not an integer in [0, 65536]");
  expect_parse_error("kernel with two geometries", "kernel adamw <<<1,1,0>>> @512:32",
                     "kernel adamw <<<2,1,0>>> @512:32",
                     ":%d: kernel adamw: launched <<<2,1,0>>> here, <<<1,1,0>>> before (a kernel's geometry is fixed "
                     "by the compiler)");
  expect_parse_error("grad_norm partials too small", "sumsq <<<3,1,0>>> @7552:12 @7568:24",
                     "sumsq <<<3,1,0>>> @7552:8 @7568:24",
                     ":%d: grad_norm: the partials hold 8 bytes; GRID 3 partial sums need 12");
  expect_parse_error("grad_norm table too small", "sumsq <<<3,1,0>>> @7552:12 @7568:24",
                     "sumsq <<<3,1,0>>> @7552:12 @7568:16",
                     ":%d: grad_norm: a table of 16 bytes holds 2 rows: expected a row (8 bytes) a param (3) and GRID "
                     "(3) a multiple of the rows");
  expect_parse_error("grad_norm without its table", "sumsq <<<3,1,0>>> @7552:12 @7568:24", "sumsq <<<3,1,0>>> @7552:12",
                     ":%d: expected 5 fields, found 4 (the line reads 'grad_norm KERNEL <<<GRID,BLOCK,LOCAL>>> "
                     "@PARTIALS:BYTES @TABLE:BYTES')");
  expect_parse_error("batch in the optimizer", "  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n",
                     "  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n  batch - -\n",
                     "'batch' is not allowed in the optimizer block");
  expect_parse_error("grad_norm in the forward", "  loss $1408\n",
                     "  loss $1408\n  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n",
                     "'grad_norm' is not allowed in the forward block (only in the optimizer block)");
  expect_parse_error("no grad_norm", "block optimizer\n  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n",
                     "block optimizer\nend\nblock optimizer2\n", "the optimizer block has no grad_norm");
  expect_parse_ok("gemm tri:out", "@832 8 0 1     # dE", "@832 8 0 1 tri:out     # dE");
  expect_parse_ok("gemm with types and tri:upper", "@832 8 0 1     # dE", "@832 8 0 1 f32 f32 f32 tri:upper     # dE");
  expect_parse_error("gemm tri:diag", "@832 8 0 1     # dE", "@832 8 0 1 tri:diag     # dE",
                     ":%d: gemm: 'tri:diag' (expected tri:out, tri:lower or tri:upper)");
  /* a GEMM's epilogue: its kernel next, C its second argument, each argument its role's extent */
  const char *dy = "@6784 8 0 1      # dy = dlogits E\n";
  expect_parse_ok("gemm epi:dgelu and its kernel", dy,
                  "@6784 8 0 1 epi:dgelu\n  kernel dg <<<1,1,0>>> @7040:256 @6784:256 $384:256\n");
  expect_parse_ok("gemm with types, tri and epi:gelu", dy,
                  "@6784 8 0 1 f32 f32 f32 epi:gelu\n  kernel g <<<1,1,0>>> @7040:256 @6784:256 @512:32\n");
  expect_parse_ok("gemm epi:bias and its kernel", dy,
                  "@6784 8 0 1 epi:bias\n  kernel b <<<1,1,0>>> @6784:256 @512:32\n");
  expect_parse_error("gemm epi:bias, C not its first argument", dy,
                     "@6784 8 0 1 epi:bias\n  kernel b <<<1,1,0>>> @7040:256 @512:32\n",
                     "kernel after gemm epi:bias (line %d): argument 1 is not the GEMM's C");
  expect_parse_error("gemm epi:relu", dy, "@6784 8 0 1 epi:relu\n",
                     ":%d: gemm: 'epi:relu' (expected epi:gelu, epi:dgelu or epi:bias)");
  expect_parse_error("gemm epi: then a gemm", dy,
                     "@6784 8 0 1 epi:gelu\n  gemm N T 8 8 8 1 @7040 8 0 @576 8 0 0 @7296 8 0 1\n",
                     "gemm epi:gelu (line %d) is followed by gemm, not by its kernel");
  expect_parse_error("gemm epi: its kernel's arguments", dy, "@6784 8 0 1 epi:dgelu\n",
                     "kernel after gemm epi:dgelu (line %d): 7 arguments (expected 3)");
  expect_parse_error("gemm epi: a kernel not on C", dy,
                     "@6784 8 0 1 epi:gelu\n  kernel g <<<1,1,0>>> @7040:256 $384:256\n",
                     "kernel after gemm epi:gelu (line %d): argument 2 is not the GEMM's C");
  expect_parse_error("gemm epi: a short bias", dy,
                     "@6784 8 0 1 epi:gelu\n  kernel g <<<1,1,0>>> @7040:256 @6784:256 @512:16\n",
                     "kernel after gemm epi:gelu (line %d): argument 3 (BIAS) is not a pointer to 32 bytes");
  expect_parse_error("gemm epi: batched", "$384 8 32 2      # h_b = x_b P\n", "$384 8 32 2 epi:gelu\n",
                     ":%d: gemm epi:gelu: an epilogue needs BATCH 1, BETA 0, LDC = N and no triangle");
  expect_parse_error(
      "gemm epi: at the block's end",
      "@7296 8 0 1      # dx = dh P^T\n  kernel embed_bwd <<<1,1,0>>> $0:32 @7296:256 @832:512 i:8 i:8\n",
      "@7296 8 0 1 epi:gelu\n", "gemm epi:gelu (line %d) is followed by the block's end, not by its kernel");
  expect_parse_error("gemm, 19 fields", "@832 8 0 1     # dE", "@832 8 0 1 f32     # dE",
                     ":%d: expected 18 fields, or 21 with the types, then perhaps a triangle; found 19");
  expect_parse_error("optimizer block, unknown word", "block optimizer\n", "block optimizer clear\n",
                     ":%d: block optimizer: unknown word 'clear' (expected nothing or clears_grads)");
  expect_parse_error("clears_grads on the forward block", "block forward\n", "block forward clears_grads\n",
                     ":%d: expected 2 fields, found 3 (the line reads 'block forward|backward|weights|optimizer "
                     "[clears_grads]|refresh')");
  expect_parse_ok("block optimizer clears_grads", "block optimizer\n", "block optimizer clears_grads\n");
  expect_parse_error("two forward blocks", "block backward", "block forward",
                     ":50: a second forward block (the first is on line 40)");
  expect_parse_error("block not ended", "  loss $1408\nend\n", "  loss $1408\n", "'block' inside block forward");
  expect_parse_error("B before F", "  F 0 0\n  F 1 1\n  B 0 0\n", "  B 0 0\n  F 0 0\n  F 1 1\n",
                     ":%d: B 0 0 before F 0");
  expect_parse_error("B in the wrong slot", "  B 1 1\n", "  B 1 0\n",
                     ":%d: B 1 0: micro-batch 1's forward did not run in slot 0");
  expect_parse_error("OPT before every B", "  B 1 1\n  OPT\n", "  OPT\n  B 1 1\n",
                     ":%d: OPT before every micro-batch's B ran (1 of 2)");
  expect_parse_error("micro-batch out of range", "  F 1 1\n", "  F 2 1\n",
                     ":%d: micro-batch: expected an integer in [0, 1], found '2'");
  expect_parse_error("no zero_grads", "  zero_grads\n", "", "B 0 0 before zero_grads");
  expect_parse_error("send entry", "  OPT\n", "  OPT\n  send 1\n",
                     "'send' after OPT (OPT is the schedule's last entry)");
  expect_parse_error("text after the schedule", "  OPT\nend\n", "  OPT\nend\nmore\n",
                     "'more' after the schedule's end");
  expect_parse_error("no schedule end", "  OPT\nend\n", "  OPT\n", "ends inside the schedule");

  /* not a listing at all */
  rc = parse_msg("", err, sizeof err);
  check(rc && strstr(err, "t.prog: empty: not a ppr program listing"), "parser: empty file");
  rc = parse_msg("\x7f"
                 "ELF\x02\x01",
                 err, sizeof err);
  check(rc && strstr(err, "t.prog:1: control character 0x02"), "parser: binary garbage [%s]", err);
  rc = parse_msg("hello world\n", err, sizeof err);
  check(rc && strstr(err, "t.prog:1: not a ppr program listing: the first line must be 'ppr-program 5'"),
        "parser: text that is not a listing");
}

/* ---- generation programs (ppc --generate; ppr --generate) ------------------------------------ */

/* BODY's model as a generation program: one sequence of 4, forward only, its logits in the slot. */
static const char *const GEN_T = "model testlin\n"
                                 "mesh tp 1 pp 1 dp 1\n"
                                 "rank 0 stage 0 tp_rank 0 dp_rank 0\n"
                                 "step micro_batch 1 seq 4 microbatches 1 schedule forward\n"
                                 "vocab 16\n"
                                 "kernels k 0123456789abcdef\n"
                                 "object so @SO\n"
                                 "object cl - -\n"
                                 "cuda sm_90 - - - -\n"
                                 "\n"
                                 "region params  0    832\n"
                                 "region grads   832  0\n"
                                 "region adam_m  832  0\n"
                                 "region adam_v  832  0\n"
                                 "region slots   832  384 1\n"
                                 "region scratch 1216 384\n"
                                 "arena 1600\n"
                                 "\n"
                                 "param 0 emb.weight f32 [16,8] @0 init normal 0.5 decay 1 tied\n"
                                 "param 1 gain f32 [8] @512 init ones decay 0\n"
                                 "param 2 proj.weight f32 [8,8] @576 init normal 0.3 decay 1\n"
                                 "\n"
                                 "block forward\n"
                                 "  batch $0 -\n"
                                 "  kernel embed_fwd <<<1,1,0>>> $0:16 @0:512 @1216:128 i:4 i:8\n"
                                 "  gemm N N 4 8 8 1 @1216 8 0 @576 8 0 0 @1344 8 0 1\n"
                                 "  kernel gain_fwd <<<1,1,0>>> @1344:128 @512:32 @1472:128 i:4 i:8 f:1\n"
                                 "  gemm N T 4 16 8 1 @1472 8 0 @0 8 0 0 $64 16 0 1\n"
                                 "  logits $64 1 4 16 0\n"
                                 "end\n"
                                 "\n"
                                 "schedule forward\n"
                                 "  F 0 0\n"
                                 "end\n";
static const char *GEN;

/* The logits after token t: ((E[t] P) * g) E^T (the model has no attention: the last token alone). */
static int greedy_next(const W *w, int t) {
  double y[H], best = -1e300;
  int arg = 0;
  for (int j = 0; j < H; j++) {
    double h = 0;
    for (int k = 0; k < H; k++) h += (double)w->E[t * H + k] * w->P[k * H + j];
    y[j] = h * w->g[j];
  }
  for (int v = 0; v < V; v++) {
    double l = 0;
    for (int j = 0; j < H; j++) l += y[j] * w->E[v * H + j];
    if (l > best) best = l, arg = v;
  }
  return arg;
}

static void test_generate(const W *w) {
  char err[2048] = "";
  char *gl = listing(GEN);
  int rc = parse_msg(gl, err, sizeof err);
  if (!check(rc == 0, "parser: a generation program loads")) printf("  | got: %s\n", err);
  char *t = replace(BODY, "  loss $1408\n", "  loss $1408\n  logits $896 2 4 16 0\n");
  char *l = listing(t);
  rc = parse_msg(l, err, sizeof err);
  if (!check(rc == 0, "parser: a training program's logits line loads")) printf("  | got: %s\n", err);
  free(l);
  free(t);
  struct {
    const char *what, *from, *to, *needle;
  } bad[] = {
      {"micro_batch 2", "micro_batch 1 seq 4", "micro_batch 2 seq 4", "runs one sequence: micro_batch 1, not 2"},
      {"gradients", "region grads   832  0", "region grads   1536 64",
       "has 64 bytes: a generation program has no gradients or moments"},
      {"a backward block", "end\n\nschedule forward\n", "end\n\nblock backward\nend\n\nschedule forward\n",
       "block backward: a generation program (schedule forward) has forward blocks alone"},
      {"a loss", "  logits $64 1 4 16 0\n", "  logits $64 1 4 16 0\n  loss $64\n",
       "loss in a generation program (schedule forward)"},
      {"no logits", "  logits $64 1 4 16 0\n", "", "last virtual stage (chunk 0) has no logits instruction"},
      {"two logits", "  logits $64 1 4 16 0\n", "  logits $64 1 4 16 0\n  logits $64 1 4 16 0\n",
       "a second logits (the first is on line"},
      {"logits in scratch", "  logits $64 1 4 16 0\n", "  logits @1216 1 4 16 0\n",
       "the logits live in the micro-batch's slot"},
      {"logits past the slot", "  logits $64 1 4 16 0\n", "  logits $256 1 4 16 0\n",
       "logits: $256 + 256 bytes leaves the slot"},
      {"logits of another B", "  logits $64 1 4 16 0\n", "  logits $64 2 4 16 0\n", "logits: B"},
      {"logits past the vocabulary", "  logits $64 1 4 16 0\n", "  logits $64 1 4 16 16\n", "logits: VSTART"},
      {"a B entry", "  F 0 0\n", "  F 0 0\n  B 0 0\n", "'B' in a generation program's schedule (forward)"},
      {"OPT", "  F 0 0\n", "  F 0 0\n  OPT\n", "'OPT' in a generation program's schedule"},
      {"no F", "  F 0 0\n", "", "the schedule never runs F 0"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    expect_parse_error_in(GEN, bad[i].what, bad[i].from, bad[i].to, bad[i].needle);

  /* ppr --generate through it, greedily, against the direct computation */
  char d[512], p[600], wp[512];
  make_prog("gen", BODY);
  path(d, sizeof d, "gen");
  snprintf(p, sizeof p, "%s/rank0.gen.prog", d);
  write_bytes(p, gl, strlen(gl));
  free(gl);
  path(wp, sizeof wp, "w.safetensors");
  char args[2048];
  snprintf(args, sizeof args, "%s --init %s --generate 9 --prompt-ids 3,7 --temperature 0 --quiet", d, wp);
  rc = run(args);
  int32_t tok[11] = {3, 7};
  for (int i = 2; i < 11; i++) tok[i] = greedy_next(w, tok[i - 1]);
  char *want = NULL;
  size_t wn = 0;
  FILE *mf = open_memstream(&want, &wn);
  ppr_gen_print(mf, tok, 11, V, NULL); /* a vocabulary of 16: bytes */
  fputc('\n', mf);
  fclose(mf);
  if (!check(rc == 0 && !strcmp(out, want), "ppr --generate 9, greedy: the direct computation's tokens")) show();
  free(want);
  /* the training program has no `logits` line: no rank holds them */
  snprintf(args, sizeof args, "%s --init %s --generate 2 --prompt-ids 3 --quiet", d, wp);
  setenv("PPR_GENERATE_PROGRAM", "train", 1);
  expect_fail("the training program's logits, without a logits line", args, "no rank holds logit 0");
  unsetenv("PPR_GENERATE_PROGRAM");

  /* the sampler: greedy, then draws against softmax(logits / T) over the top k */
  static const float row[5] = {1.0f, 2.0f, 0.5f, 2.0f, -1.0f};
  PprSampler s = {.temperature = 0};
  check(ppr_gen_pick(&s, row, 5) == 1, "sampler: greedy is the argmax, the lowest id among equals");
  static const struct {
    double t;
    int64_t k;
  } cases[] = {{1.0, 0}, {0.5, 0}, {1.0, 2}, {2.0, 3}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    PprSampler q = {.temperature = cases[c].t, .top_k = cases[c].k, .state = 42};
    enum { NDRAW = 100000 };
    int count[5] = {0};
    for (int i = 0; i < NDRAW; i++) count[ppr_gen_pick(&q, row, 5)]++;
    /* the top k by logit (equal ones by id): 1, 3, 0, 2, 4 */
    static const int order[5] = {1, 3, 0, 2, 4};
    int64_t k = cases[c].k ? cases[c].k : 5;
    double p[5] = {0}, z = 0;
    for (int i = 0; i < k; i++) z += p[order[i]] = exp(((double)row[order[i]] - 2.0) / cases[c].t);
    int ok = 1;
    for (int v = 0; v < 5; v++) {
      double e = NDRAW * p[v] / z, sd = sqrt(NDRAW * (p[v] / z) * (1 - p[v] / z)) + 1e-9;
      if (p[v] == 0 ? count[v] != 0 : fabs(count[v] - e) > 5 * sd) ok = 0;
    }
    check(ok, "sampler: temperature %g, top-k %lld: %d draws within 5 sigma of softmax (%d %d %d %d %d)", cases[c].t,
          (long long)cases[c].k, NDRAW, count[0], count[1], count[2], count[3], count[4]);
  }
  PprSampler a = {.temperature = 1, .state = 9}, b = {.temperature = 1, .state = 9};
  int same = 1;
  for (int i = 0; i < 100; i++) same &= ppr_gen_pick(&a, row, 5) == ppr_gen_pick(&b, row, 5);
  check(same, "sampler: one seed, one sequence of draws");
}

/* Every operand of a parsed program, checked element by element against the arena/slot. */
static int brute_bounds(const RtProg *p) {
  for (int b = 0; b < RT_NBLK; b++)
    for (int n = 0; n < p->blk[b].n; n++) {
      const RtInstr *in = &p->blk[b].ins[n];
      if (in->kind == RT_I_GEMM) {
        if ((double)in->m * in->n * (double)in->k * in->batch > 2e6) continue;
        const RtPtr *ops[3] = {&in->p[0], &in->p[1], &in->p[2]};
        int rows[3] = {in->ta ? in->k : in->m, in->tb ? in->n : in->k, in->m};
        int cols[3] = {in->ta ? in->m : in->k, in->tb ? in->k : in->n, in->n};
        int ld[3] = {in->lda, in->ldb, in->ldc};
        int64_t st[3] = {in->sa, in->sb, in->sc};
        for (int o = 0; o < 3; o++) {
          int64_t lim = ops[o]->in_slot ? p->reg[RT_REG_SLOTS].bytes : p->arena, mx = 0;
          for (int bb = 0; bb < in->batch; bb++)
            for (int i = 0; i < rows[o]; i++)
              for (int j = 0; j < cols[o]; j++) {
                int64_t e = ops[o]->off + 4 * (bb * st[o] + (int64_t)i * ld[o] + j) + 4;
                if (e > mx) mx = e;
              }
          if (mx > lim) return 0;
        }
      } else if (in->kind == RT_I_KERNEL) {
        for (int a = 0; a < in->nargs; a++) {
          const RtArg *r = &in->args[a];
          if (r->kind != RT_A_PTR) continue;
          int64_t lim = r->ptr.in_slot ? p->reg[RT_REG_SLOTS].bytes : p->arena;
          if (r->ptr.off + (r->bytes ? r->bytes : 4) > lim) return 0;
        }
      } else {
        int64_t ext = in->kind == RT_I_ZERO || in->kind == RT_I_ALLREDUCE_TIED ? in->bytes
                      : in->kind == RT_I_BATCH                                 ? (int64_t)p->micro_batch * p->seq * 4
                      : in->kind == RT_I_LOGITS                                ? in->lg[0] * in->lg[1] * in->lg[2] * 4
                                                                               : 4;
        for (int k = 0; k < 2; k++) {
          if (!in->p[k].present) continue;
          int64_t lim = in->p[k].in_slot ? p->reg[RT_REG_SLOTS].bytes : p->arena;
          if (in->p[k].off + ext > lim) return 0;
        }
      }
    }
  for (int i = 0; i < p->nparams; i++) {
    const RtParam *q = &p->params[i];
    if (q->off < p->reg[RT_REG_PARAMS].base ||
        q->off + 4 * q->numel > p->reg[RT_REG_PARAMS].base + p->reg[RT_REG_PARAMS].bytes)
      return 0;
  }
  for (int e = 0; e < p->nentries; e++) {
    const RtEntry *en = &p->sched[e];
    if ((en->kind == RT_E_F || en->kind == RT_E_B) && (en->slot >= p->nslots || en->mb >= p->microbatches)) return 0;
    for (int o = 0; en->kind == RT_E_COMM && o < en->nops; o++)
      if (en->op[o].slot >= p->nslots || en->op[o].mb >= p->microbatches || !p->bnd[en->op[o].kind].present) return 0;
  }
  for (int k = 0; k < PP_NBND; k++) {
    const RtBoundary *b = &p->bnd[k];
    if (!b->present) continue;
    int64_t lim = b->ptr.in_slot ? p->reg[RT_REG_SLOTS].bytes : p->arena;
    if (b->ptr.off + b->bytes > lim || b->bytes % 4) return 0;
  }
  return 1;
}

static uint64_t frng = 99;
static unsigned rnd(unsigned n) {
  frng = frng * 6364136223846793005ull + 1442695040888963407ull;
  return (unsigned)((frng >> 33) % n);
}

/* One random edit of s (len *n, capacity cap). */
static void mutate(char *s, size_t *n, size_t cap) {
  static const char *const nums[] = {"0",
                                     "1",
                                     "-1",
                                     "63",
                                     "64",
                                     "4096",
                                     "7616",
                                     "7612",
                                     "1472",
                                     "2147483647",
                                     "2147483648",
                                     "1099511627776",
                                     "9223372036854775807",
                                     "99999999999999999999",
                                     "1e38",
                                     "nan",
                                     "-",
                                     "@",
                                     "$",
                                     "@7616:4",
                                     "$1472",
                                     "i:",
                                     "s:clip",
                                     "f:inf"};
  static const char chars[] = " \n#@$:-.,[]0123456789abcdefNTFBi\t\x01\xff";
  size_t len = *n;
  if (len == 0) return;
  switch (rnd(6)) {
  case 0: s[rnd((unsigned)len)] = chars[rnd(sizeof chars - 1)]; break;
  case 1: { /* delete a range */
    size_t a = rnd((unsigned)len), k = 1 + rnd(20);
    if (a + k > len) k = len - a;
    memmove(s + a, s + a + k, len - a - k);
    *n = len - k;
    break;
  }
  case 2:
  case 3: { /* replace a token with a number-ish */
    size_t a = rnd((unsigned)len);
    while (a > 0 && s[a - 1] != ' ' && s[a - 1] != '\n') a--;
    size_t e = a;
    while (e < len && s[e] != ' ' && s[e] != '\n') e++;
    const char *r = nums[rnd(sizeof nums / sizeof *nums)];
    size_t rl = strlen(r);
    if (len - (e - a) + rl >= cap) break;
    memmove(s + a + rl, s + e, len - e);
    memcpy(s + a, r, rl);
    *n = len - (e - a) + rl;
    break;
  }
  case 4: { /* duplicate a line */
    size_t a = rnd((unsigned)len);
    while (a > 0 && s[a - 1] != '\n') a--;
    size_t e = a;
    while (e < len && s[e] != '\n') e++;
    if (e < len) e++;
    if (len + (e - a) >= cap) break;
    memmove(s + e + (e - a), s + e, len - e);
    memcpy(s + e, s + a, e - a);
    *n = len + (e - a);
    break;
  }
  default: { /* delete a line */
    size_t a = rnd((unsigned)len);
    while (a > 0 && s[a - 1] != '\n') a--;
    size_t e = a;
    while (e < len && s[e] != '\n') e++;
    if (e < len) e++;
    memmove(s + a, s + e, len - e);
    *n = len - (e - a);
    break;
  }
  }
}

static void fuzz_body(const char *what, const char *body, int iters);

static void test_fuzz(void) {
  char err[2048];
  size_t blen = strlen(BODY);
  char *full = listing(BODY);
  size_t flen = strlen(full);
  int ok_trunc = 0, bad_trunc = 0;
  /* every truncation, with the original hash and rehashed */
  for (size_t k = 0; k < flen; k++) {
    RtProg *p = NULL;
    int rc = rt_prog_parse("f.prog", full, k, &p, err, sizeof err);
    if (rc == 0) bad_trunc++;
    rt_prog_free(p);
  }
  for (size_t k = 0; k < blen; k++) {
    char *b = malloc(k + 1);
    memcpy(b, BODY, k);
    b[k] = 0;
    char *t = listing(b);
    RtProg *p = NULL;
    int rc = rt_prog_parse("f.prog", t, strlen(t), &p, err, sizeof err);
    if (rc == 0) {
      ok_trunc++;
      if (!brute_bounds(p)) bad_trunc++;
    } else if (!strstr(err, "f.prog")) {
      bad_trunc++;
    }
    rt_prog_free(p);
    free(t);
    free(b);
  }
  check(bad_trunc == 0 && ok_trunc <= 2,
        "fuzz: %zu + %zu truncations rejected with a message naming the file (%d complete ones load)", flen, blen,
        ok_trunc);

  free(full);
  int iters = 6000;
  if (getenv("TEST_PPR_FUZZ")) iters = atoi(getenv("TEST_PPR_FUZZ")); /* a longer run by hand */
  fuzz_body("the one-rank listing", BODY, iters);
  fuzz_body("pipeline stage 0", STAGE0, iters / 2);
  fuzz_body("pipeline stage 1", STAGE1, iters / 2);
}

/* iters random edits of body: each mutated listing loads in bounds or is rejected by name. */
static void fuzz_body(const char *what, const char *body, int iters) {
  char err[2048];
  size_t blen = strlen(body);
  int loaded = 0, bad = 0;
  size_t cap = blen * 2 + 256;
  char *b = malloc(cap + 1);
  for (int it = 0; it < iters; it++) {
    memcpy(b, body, blen);
    size_t n = blen;
    int edits = 1 + (int)rnd(3);
    for (int e = 0; e < edits; e++) mutate(b, &n, cap);
    b[n] = 0;
    RtProg *p = NULL;
    int rc;
    if (rnd(10) == 0) { /* raw: the hash is stale */
      char *t = malloc(n + 128);
      int hl = header(t, n + 128, body, blen);
      memcpy(t + hl, b, n);
      rc = rt_prog_parse("f.prog", t, (size_t)hl + n, &p, err, sizeof err);
      free(t);
    } else { /* rehashed, with embedded NULs kept (n bytes) */
      char *t = malloc(n + 128);
      int hl = header(t, n + 128, b, n);
      memcpy(t + hl, b, n);
      rc = rt_prog_parse("f.prog", t, (size_t)hl + n, &p, err, sizeof err);
      free(t);
    }
    if (rc == 0) {
      loaded++;
      if (!brute_bounds(p)) {
        bad++;
        if (bad < 3) printf("  | out-of-bounds program loaded:\n%s\n", b);
      }
    } else if (!strstr(err, "f.prog")) {
      bad++;
      if (bad < 3) printf("  | message without the file: %s\n", err);
    }
    rt_prog_free(p);
  }
  free(b);
  check(bad == 0, "fuzz: %d mutated listings of %s: %d load and are in bounds element by element, %d rejected by name",
        iters, what, loaded, iters - loaded);
}

/* ---- main ---------------------------------------------------------------------------------- */

/* ---- chunks of layers: two ranks holding two chunks each (zbv-like), over MPI ---------------- */

/* The model in four virtual stages over pp 2, V 2, placed as ZB-V places them: rank 0 holds
 * vstage 0 (chunk 0: the embedding) and vstage 3 (chunk 1: proj, gain, the tied head and the
 * loss); rank 1 holds vstages 1 and 2, two chunks that pass the hidden state on unchanged (their
 * blocks are empty; each receives into the buffer it sends from). Vstage 1 sends to vstage 2 on
 * the same rank: a message to itself. The loss counts on rank 0, which holds the last vstage. */
static const char *const CHUNK0_T = "model testlin\n"
                                    "mesh tp 1 pp 2 dp 1\n"
                                    "rank 0 stage 0 tp_rank 0 dp_rank 0\n"
                                    "peers prev -1 next 1\n"
                                    "chunk 0 vstage 0 prev -1 next 1\n"
                                    "chunk 1 vstage 3 prev 1 next -1\n"
                                    "step micro_batch 2 seq 4 microbatches 2 schedule zbv\n"
                                    "vocab 16\n"
                                    "kernels k 0123456789abcdef\n"
                                    "object so @SO\n"
                                    "object cl - -\n"
                                    "cuda sm_90 - - - -\n"
                                    "region params  0    832\n"
                                    "region grads   832  832\n"
                                    "region adam_m  1664 832\n"
                                    "region adam_v  2496 832\n"
                                    "region slots   3328 1472 2\n"
                                    "region scratch 6272 1344\n"
                                    "arena 7616\n"
                                    "boundary send_fwd $128 256 [2,4,8]\n"
                                    "boundary recv_bwd $384 256 [2,4,8]\n"
                                    "boundary recv_fwd:1 $128 256 [2,4,8]\n"
                                    "boundary send_bwd:1 @7296 256 [2,4,8]\n"
                                    "param 0 emb.weight f32 [16,8] @0 init normal 0.5 decay 1 tied\n"
                                    "param 1 gain f32 [8] @512 init ones decay 0\n"
                                    "param 2 proj.weight f32 [8,8] @576 init normal 0.3 decay 1\n"
                                    "model_param emb.weight [16,8]\n"
                                    "model_param gain [8]\n"
                                    "model_param proj.weight [8,8]\n"
                                    "block forward\n"
                                    "  batch $0 -\n"
                                    "  kernel embed_fwd <<<1,1,0>>> $0:32 @0:512 $128:256 i:8 i:8\n"
                                    "end\n"
                                    "block backward\n"
                                    "  kernel embed_bwd <<<1,1,0>>> $0:32 $384:256 @832:512 i:8 i:8\n"
                                    "end\n"
                                    "block forward:1\n"
                                    "  batch - $64\n"
                                    "  gemm N N 4 8 8 1 $128 8 32 @576 8 0 0 $384 8 32 2\n"
                                    "  kernel gain_fwd <<<1,1,0>>> $384:256 @512:32 $640:256 i:8 i:8 f:1\n"
                                    "  gemm N T 8 16 8 1 $640 8 0 @0 8 0 0 @6272 16 0 1\n"
                                    "  kernel xent_fwd <<<1,1,0>>> @6272:512 $64:32 $896:512 $1408:4 i:8 i:16\n"
                                    "  loss $1408\n"
                                    "end\n"
                                    "block backward:1\n"
                                    "  seed @7552 0.5\n"
                                    "  kernel xent_bwd <<<1,1,0>>> $896:512 $64:32 @7552 @6272:512 i:8 i:16\n"
                                    "  gemm T N 16 8 8 1 @6272 16 0 $640 8 0 1 @832 8 0 1\n"
                                    "  gemm N N 8 8 16 1 @6272 16 0 @0 8 0 0 @6784 8 0 1\n"
                                    "  kernel gain_bwd <<<1,1,0>>> $384:256 @512:32 @6784:256 @7040:256 @1344:32 i:8 "
                                    "i:8\n"
                                    "  gemm T N 8 8 4 1 $128 8 32 @7040 8 32 1 @1408 8 0 2\n"
                                    "  gemm N T 8 8 8 1 @7040 8 0 @576 8 0 0 @7296 8 0 1\n"
                                    "end\n"
                                    "block optimizer\n"
                                    "  grad_norm sumsq <<<3,1,0>>> @7552:12 @7568:24\n"
                                    "  kernel adamw <<<1,1,0>>> @0:512 @832:512 @1664:512 @2496:512 i:128 i:1 s:lr "
                                    "s:beta1 s:beta2 s:eps s:wd s:bc1 s:bc2 s:clip\n"
                                    "  kernel adamw <<<1,1,0>>> @512:32 @1344:32 @2176:32 @3008:32 i:8 i:0 s:lr "
                                    "s:beta1 s:beta2 s:eps s:wd s:bc1 s:bc2 s:clip\n"
                                    "  kernel adamw <<<1,1,0>>> @576:256 @1408:256 @2240:256 @3072:256 i:64 i:1 s:lr "
                                    "s:beta1 s:beta2 s:eps s:wd s:bc1 s:bc2 s:clip\n"
                                    "end\n"
                                    "schedule zbv\n"
                                    "  zero_grads\n"
                                    "  F 0 0\n"
                                    "  comm send_fwd 0 0\n"
                                    "  comm recv_fwd:1 0 1\n"
                                    "  F:1 0 1\n"
                                    "  B:1 0 1\n"
                                    "  comm send_bwd:1 0 1\n"
                                    "  comm recv_bwd 0 0\n"
                                    "  B 0 0\n"
                                    "  F 1 0\n"
                                    "  comm send_fwd 1 0\n"
                                    "  comm recv_fwd:1 1 1\n"
                                    "  F:1 1 1\n"
                                    "  B:1 1 1\n"
                                    "  comm send_bwd:1 1 1\n"
                                    "  comm recv_bwd 1 0\n"
                                    "  B 1 0\n"
                                    "  OPT\n"
                                    "end\n";

static const char *const CHUNK1_T = "model testlin\n"
                                    "mesh tp 1 pp 2 dp 1\n"
                                    "rank 1 stage 1 tp_rank 0 dp_rank 0\n"
                                    "peers prev 0 next -1\n"
                                    "chunk 0 vstage 1 prev 0 next 1\n"
                                    "chunk 1 vstage 2 prev 1 next 0\n"
                                    "step micro_batch 2 seq 4 microbatches 2 schedule zbv\n"
                                    "vocab 16\n"
                                    "kernels k 0123456789abcdef\n"
                                    "object so @SO\n"
                                    "object cl - -\n"
                                    "cuda sm_90 - - - -\n"
                                    "region params  0 0\n"
                                    "region grads   0 0\n"
                                    "region adam_m  0 0\n"
                                    "region adam_v  0 0\n"
                                    "region slots   0 512 2\n"
                                    "region scratch 1024 64\n"
                                    "arena 1088\n"
                                    "boundary recv_fwd $0 256 [2,4,8]\n"
                                    "boundary send_fwd $0 256 [2,4,8]\n"
                                    "boundary recv_bwd $256 256 [2,4,8]\n"
                                    "boundary send_bwd $256 256 [2,4,8]\n"
                                    "boundary recv_fwd:1 $0 256 [2,4,8]\n"
                                    "boundary send_fwd:1 $0 256 [2,4,8]\n"
                                    "boundary recv_bwd:1 $256 256 [2,4,8]\n"
                                    "boundary send_bwd:1 $256 256 [2,4,8]\n"
                                    "model_param emb.weight [16,8]\n"
                                    "model_param gain [8]\n"
                                    "model_param proj.weight [8,8]\n"
                                    "block forward\n"
                                    "end\n"
                                    "block backward\n"
                                    "end\n"
                                    "block forward:1\n"
                                    "end\n"
                                    "block backward:1\n"
                                    "end\n"
                                    "block optimizer\n"
                                    "  grad_norm sumsq <<<3,1,0>>> @1024:12 @1040:24\n"
                                    "end\n"
                                    "schedule zbv\n"
                                    "  zero_grads\n"
                                    "  comm recv_fwd 0 0\n"
                                    "  F 0 0\n"
                                    "  comm send_fwd 0 0\n"
                                    "  comm recv_fwd:1 0 1\n"
                                    "  F:1 0 1\n"
                                    "  comm send_fwd:1 0 1\n"
                                    "  comm recv_bwd:1 0 1\n"
                                    "  B:1 0 1\n"
                                    "  comm send_bwd:1 0 1\n"
                                    "  comm recv_bwd 0 0\n"
                                    "  B 0 0\n"
                                    "  comm send_bwd 0 0\n"
                                    "  comm recv_fwd 1 0\n"
                                    "  F 1 0\n"
                                    "  comm send_fwd 1 0\n"
                                    "  comm recv_fwd:1 1 1\n"
                                    "  F:1 1 1\n"
                                    "  comm send_fwd:1 1 1\n"
                                    "  comm recv_bwd:1 1 1\n"
                                    "  B:1 1 1\n"
                                    "  comm send_bwd:1 1 1\n"
                                    "  comm recv_bwd 1 0\n"
                                    "  B 1 0\n"
                                    "  comm send_bwd 1 0\n"
                                    "  OPT\n"
                                    "end\n";

static const char *CHUNK0, *CHUNK1;

/* The listing rules of programs with chunks: the chunk lines, ':C' names, per-chunk blocks and
 * boundaries, the schedule's rules per unit (a chunk's micro-batch). */
static void test_chunk_parser(void) {
  char err[2048] = "";
  const char *bodies[2] = {CHUNK0, CHUNK1};
  for (int r = 0; r < 2; r++) {
    char *t = listing(bodies[r]);
    RtProg *p = NULL;
    int rc = rt_prog_parse("t.prog", t, strlen(t), &p, err, sizeof err);
    if (check(rc == 0 && p, "parser: a listing with 2 chunks (rank %d) loads [%s]", r, rc ? err : "ok")) {
      int ok = p->nchunks == 2 && p->chunk[0].vstage == (r ? 1 : 0) && p->chunk[1].vstage == (r ? 2 : 3) &&
               p->chunk[1].prev == 1 && p->chunk[1].next == (r ? 0 : -1) && p->prev == (r ? 0 : -1);
      if (r == 0)
        ok = ok && rt_prog_block(p, 1, RT_BLK_FORWARD)->n == 6 && rt_prog_block(p, 0, RT_BLK_FORWARD)->n == 2 &&
             rt_prog_block(p, 1, RT_BLK_OPTIMIZER) == &p->blk[RT_BLK_OPTIMIZER] &&
             rt_prog_boundary(p, 1, PP_RECV_FWD)->present && !rt_prog_boundary(p, 0, PP_RECV_FWD)->present &&
             p->sched[4].kind == RT_E_F && p->sched[4].chunk == 1 && p->sched[3].op[0].chunk == 1 &&
             p->sched[3].op[0].kind == PP_RECV_FWD;
      else ok = ok && p->chunk[0].next == 1 && rt_prog_boundary(p, 1, PP_SEND_BWD)->bytes == 256;
      check(ok, "parser: rank %d: chunk lines, per-chunk blocks, boundaries and entries as written", r);
    }
    rt_prog_free(p);
    free(t);
  }
  /* a one-chunk program's tags are 2 M and 2 M + 1, as before chunks */
  int same = 1;
  for (int pp = 1; pp <= 4; pp++)
    for (int st = 0; st < pp; st++)
      for (int mb = 0; mb < 40; mb++)
        for (int k = 0; k < PP_NBND; k++) {
          int to_next = k == PP_SEND_FWD || k == PP_RECV_BWD;
          if (to_next ? st == pp - 1 : st == 0) continue; /* no such boundary */
          RtMsg m = rt_boundary_msg(k, mb, st, 5, 7, pp, 1);
          same &= m.tag == 2 * mb + (k == PP_RECV_BWD || k == PP_SEND_BWD) &&
                  m.peer == (k == PP_SEND_FWD || k == PP_RECV_BWD ? 7 : 5);
        }
  check(same, "rt_boundary_msg: without chunks the tags are 2*mb and 2*mb + 1, the peers prev and next");
  /* a send and its receive carry the same tag: vstage v's send_fwd and vstage v+1's recv_fwd */
  int pair = 1;
  for (int pp = 1; pp <= 4; pp++)
    for (int nv = 2; nv <= 4; nv++)
      for (int v = 0; v + 1 < pp * nv; v++)
        for (int mb = 0; mb < 5; mb++) {
          pair &= rt_boundary_msg(PP_SEND_FWD, mb, v, 0, 0, pp, nv).tag ==
                  rt_boundary_msg(PP_RECV_FWD, mb, v + 1, 0, 0, pp, nv).tag;
          pair &= rt_boundary_msg(PP_RECV_BWD, mb, v, 0, 0, pp, nv).tag ==
                  rt_boundary_msg(PP_SEND_BWD, mb, v + 1, 0, 0, pp, nv).tag;
        }
  check(pair, "rt_boundary_msg: with chunks, a message's send and receive have one tag");

  const char *C0 = CHUNK0, *C1 = CHUNK1;
  /* the chunk lines */
  expect_parse_error_in(C0, "a chunk line without next", "chunk 1 vstage 3 prev 1 next -1\n",
                        "chunk 1 vstage 3 prev 1\n", ":%d: chunk 1: expected 'chunk C vstage S prev P next N'");
  expect_parse_error_in(C0, "chunk lines out of order", "chunk 1 vstage 3 prev 1 next -1\n",
                        "chunk 2 vstage 3 prev 1 next -1\n",
                        ":%d: chunk 2: expected chunk 1 (the chunk lines come in order");
  expect_parse_error_in(C0, "a vstage out of range", "chunk 1 vstage 3 prev 1 next -1\n",
                        "chunk 1 vstage 4 prev 1 next -1\n",
                        ":%d: chunk 1: vstage 4 is not in [0, 3] (pp 2 \u00d7 2 chunks)");
  expect_parse_error_in(C0, "a lone chunk 0 line", "chunk 1 vstage 3 prev 1 next -1\n", "",
                        ":9: chunk 0 is the only chunk line: a program with chunks has 2 to 16");
  expect_parse_error_in(C0, "a vstage twice", "chunk 1 vstage 3 prev 1 next -1\n", "chunk 1 vstage 0 prev -1 next 1\n",
                        ":%d: chunk 1: vstage 0 is also chunk 0's (line 9)");
  expect_parse_error_in(C0, "next -1 before the last vstage", "chunk 1 vstage 3 prev 1 next -1\n",
                        "chunk 1 vstage 2 prev 1 next -1\n",
                        ":%d: chunk 1: next -1, but vstage 2 of 4 has a next virtual stage");
  /* names with a chunk */
  expect_parse_error_in(C0, "a chunk suffix past the chunks", "  F:1 0 1\n", "  F:2 0 1\n",
                        ":%d: F:2: chunk 2, but the program has 2 chunks (0 .. 1)");
  expect_parse_error("a chunk suffix in a one-chunk program", "  F 1 1\n", "  F:1 1 1\n",
                     ":%d: F:1: chunk 1, but the program has one chunk (no chunk lines): expected F or F:0");
  expect_parse_error("a bad chunk suffix", "  F 1 1\n", "  F:x 1 1\n", ":%d: 'F:x': expected NAME or NAME:C");
  expect_parse_error_in(C0, "a boundary of a chunk past the chunks", "boundary recv_fwd:1", "boundary recv_fwd:3",
                        ":%d: recv_fwd:3: chunk 3, but the program has 2 chunks");
  expect_parse_error_in(C0, "block optimizer with a chunk", "block optimizer\n", "block optimizer:1\n",
                        ":%d: block optimizer: no ':C'");
  expect_parse_error_in(C0, "a suffix on OPT", "  OPT\n", "  OPT:1\n", ":%d: OPT: no ':C' here");
  /* blocks and boundaries per chunk */
  expect_parse_error_in(C0, "a missing block forward:1", "block forward:1\n", "block weights:1\n",
                        "no forward:1 block before the schedule (every chunk has a forward and a backward block");
  expect_parse_error_in(C0, "a weights block on one chunk only", "block optimizer\n",
                        "block weights:1\nend\nblock optimizer\n",
                        "chunk 1 has a weights block (line %d), chunk 0 has none: either every chunk has a weights "
                        "block or none does");
  expect_parse_error_in(C0, "a second block backward:1", "block optimizer\n",
                        "block backward:1\nend\nblock optimizer\n",
                        ":%d: a second backward:1 block (the first is on line");
  expect_parse_error_in(C0, "a missing boundary of a chunk with a previous vstage",
                        "boundary recv_fwd:1 $128 256 [2,4,8]\n", "",
                        "no 'boundary recv_fwd:1' line before this one: chunk 1 (vstage 3) has a previous "
                        "virtual stage (rank 1)");
  expect_parse_error_in(C0, "a boundary of a chunk toward no vstage", "boundary send_bwd:1 @7296 256 [2,4,8]\n",
                        "boundary send_bwd:1 @7296 256 [2,4,8]\nboundary send_fwd:1 @0 4\n",
                        "boundary send_fwd:1: chunk 1 (vstage 3) has no next virtual stage (prev 1 next -1)");
  expect_parse_error_in(C1, "a boundary of a chunk given twice", "boundary send_bwd:1 $256 256 [2,4,8]\n",
                        "boundary send_bwd:1 $256 256 [2,4,8]\nboundary send_bwd:1 $256 256\n",
                        "boundary send_bwd:1 is given twice (first on line 31)");
  /* the schedule's rules per unit */
  expect_parse_error_in(C0, "a second F of a unit", "  F:1 0 1\n", "  F:1 0 1\n  F:1 0 1\n",
                        ":70: a second F:1 for micro-batch 0 of chunk 1");
  expect_parse_error_in(C0, "an F into a slot another chunk's unit holds", "  B:1 0 1\n", "  F 1 1\n  B:1 0 1\n",
                        ":%d: F:0 1 1: slot 1 still holds micro-batch 0 of chunk 1 (its B has not run)");
  expect_parse_error_in(C0, "recv_fwd into a slot another chunk's unit holds", "  comm recv_fwd:1 0 1\n  F:1 0 1\n",
                        "  comm recv_fwd:1 0 0\n  F:1 0 0\n",
                        ":%d: recv_fwd:1 0 0: slot 0 still holds micro-batch 0 of chunk 0 (its B has not run)");
  expect_parse_error_in(C0, "OPT before a unit's B", "  B:1 1 1\n  comm send_bwd:1 1 1\n", "",
                        ":80: OPT before B:1 1 ran (every chunk's micro-batches come first: 3 of 4 B ran)");
  expect_parse_error_in(
      C1, "OPT before a chunk's message", "  comm send_fwd:1 1 1\n", "",
      ":71: OPT before send_fwd:1 of micro-batch 1 of chunk 1 (every micro-batch's messages come first)");
  expect_parse_error_in(C1, "a chunk's B before its recv_bwd", "  comm recv_bwd:1 0 1\n", "",
                        ":54: B:1 0 1 before recv_bwd:1 0 1 (the gradient of the stage's output");
  expect_parse_error_in(C0, "send_bwd of a chunk from the arena after another B",
                        "  comm send_bwd:1 0 1\n  comm recv_bwd 0 0\n  B 0 0\n",
                        "  comm recv_bwd 0 0\n  B 0 0\n  comm send_bwd:1 0 1\n",
                        "send_bwd:1 0 1: its buffer is in the arena (@7296), so it must follow B:1 0 with no F, B or W "
                        "between");
  expect_parse_error_in(C0, "a comm op of a chunk without that boundary", "  comm send_fwd 0 0\n",
                        "  comm send_fwd:1 0 0\n", ":%d: comm send_fwd:1: chunk 1 has no 'boundary send_fwd:1' line");
}

/* The two ranks of CHUNK0/CHUNK1 train the model as the one-rank program does. */
static void test_chunks_mpi(const W *w) {
  char wp[512], dp[512], gp[512], lp[512], sp[512], tp[512], args[8192];
  path(wp, sizeof wp, "w.safetensors");
  path(dp, sizeof dp, "data.bin");
  path(gp, sizeof gp, "cg.safetensors");
  path(lp, sizeof lp, "clog.jsonl");
  make_pipe("chunks", CHUNK0, CHUNK1);
  double gE[V * H], gg[H], gP[H * H];
  double loss = ref_step(w, data_main, 37, 0, gE, gg, gP);
  snprintf(args, sizeof args, "%s/chunks --init %s --data %s --steps 1 --save-grads %s --log %s", tdir, wp, dp, gp, lp);
  int rc = mpi_run(2, args);
  if (!check(rc == 0 && sane(rc), "mpirun -np 2: two ranks of two chunks each (one sending to itself) train a step")) {
    printf("  | exit %d\n", rc);
    show();
    return;
  }
  W g;
  if (check(read_weights(gp, &g, 1) == 0, "chunks --save-grads: readable")) {
    double e1 = rel_err(g.E, gE, V * H), e2 = rel_err(g.g, gg, H), e3 = rel_err(g.P, gP, H * H);
    check(e1 < 1e-5 && e2 < 1e-5 && e3 < 1e-5, "chunks: gradients equal the direct computation (rel %.1e %.1e %.1e)",
          e1, e2, e3);
  }
  char *log = read_text(lp);
  double l = NAN;
  int step = 0;
  int got = log ? sscanf(records(log), "{\"step\":%d,\"loss\":%lf", &step, &l) : 0;
  check(got == 2 && fabs(l - loss) < 1e-5 * loss,
        "chunks: the loss %.7f (counted on rank 0, which holds the last vstage) equals the direct computation %.7f", l,
        loss);
  free(log);

  path(sp, sizeof sp, "cw.safetensors");
  path(tp, sizeof tp, "ctrace.json");
  snprintf(args, sizeof args,
           "%s/chunks --init %s --data %s --steps 3 --lr 0.01 --clip 0.5 --save %s --trace %s --quiet", tdir, wp, dp,
           sp, tp);
  rc = mpi_run(2, args);
  check(rc == 0 && sane(rc), "mpirun -np 2: chunks: three clipped steps with --save and --trace");
  char *tr = read_text(tp);
  check(tr && strstr(tr, "\"name\":\"F:1 1\",\"cat\":\"compute\"") && strstr(tr, "\"name\":\"B 0\",\"cat\"") &&
            strstr(tr, "\"name\":\"send_bwd:1 0: wait\""),
        "chunks --trace: events name the chunk (F:1 1, B 0, send_bwd:1 0)");
  free(tr);
  path(tp, sizeof tp, "ctrace.svg");
  tr = read_text(tp);
  check(tr && strstr(tr, "<title>f1 [") && strstr(tr, "<title>F1 [") && strstr(tr, "<title>b0 ["),
        "chunks --trace: the SVG draws chunk 1's spans as f/b, chunk 0's as F/B, with their micro-batches");
  free(tr);
  W a, b;
  if (check(read_weights(sp, &a, 0) == 0 && one_rank_three_steps(&b) == 0, "chunks: both --save files readable"))
    check(weights_rel(&a, &b) < 1e-6, "chunks: weights after 3 steps equal the one-rank run's (rel %.1e)",
          weights_rel(&a, &b));

  /* start-up checks of the mesh */
  char *b1 = replace(CHUNK1, "boundary recv_fwd:1 $0 256 [2,4,8]", "boundary recv_fwd:1 $0 128");
  make_pipe("chunks_bytes", CHUNK0, b1);
  free(b1);
  snprintf(args, sizeof args, "%s/chunks_bytes --steps 1", tdir);
  expect_mpi_fail("chunks that disagree on the hidden state's size", 2, args,
                  "rank1.prog sends a 256-byte hidden state to");
  check(strstr(out, "(boundary send_fwd:0), which receives 128 bytes (boundary recv_fwd:1)") != NULL,
        "the message names both chunks' boundaries");
  b1 = replace(CHUNK1, "chunk 1 vstage 2 prev 1 next 0\n", "chunk 1 vstage 2 prev 1 next 1\n");
  make_pipe("chunks_next", CHUNK0, b1);
  free(b1);
  snprintf(args, sizeof args, "%s/chunks_next --steps 1", tdir);
  expect_mpi_fail("a chunk's next that does not hold the next vstage", 2, args,
                  "rank1.prog: chunk 1 (vstage 2): prev 1 next 1, but the ranks of vstages 1 and 3 (tp_rank 0, "
                  "dp_rank 0) are 1 and 0");
  /* each waits for a message the other sends only later (sends do not wait: only receives block) */
  b1 = replace(CHUNK1, "  comm send_fwd 0 0\n  comm recv_fwd:1 0 1\n", "  comm recv_fwd:1 0 1\n  comm send_fwd 0 0\n");
  make_pipe("chunks_stuck", CHUNK0, b1);
  free(b1);
  snprintf(args, sizeof args, "%s/chunks_stuck --steps 1", tdir);
  expect_mpi_fail("chunked schedules whose messages cannot complete", 2, args,
                  "the schedules' messages cannot all complete (with sends that do not wait");
  check(strstr(out, "chunks_stuck/rank1.prog:50: rank 1 waits in 'comm recv_fwd:1 0 1'") != NULL,
        "the message names where the stuck rank waits, with the op's chunk");
}

/* ---- the learning-rate schedules (rt_lr.c) against their closed forms ----------------------- */

static void test_lr(void) {
  char err[512] = "";
  const double pi = 3.14159265358979323846;
  /* lr 1, no warmup, 10 steps: values at the quarter points written out */
  struct {
    RtLrKind kind;
    int64_t warmup, decay;
    double lr_min;
    int64_t t; /* 1-based */
    double want;
  } pts[] = {
      {RT_LR_CONSTANT, 0, 0, 0, 1, 1.0},
      {RT_LR_CONSTANT, 0, 0, 0, 10, 1.0},
      {RT_LR_CONSTANT, 4, 0, 0, 1, 0.25},
      {RT_LR_CONSTANT, 4, 0, 0, 4, 1.0},
      {RT_LR_CONSTANT, 4, 0, 0, 5, 1.0},
      {RT_LR_COSINE, 0, 0, 0, 5, 0.5},
      {RT_LR_COSINE, 0, 0, 0, 10, 0.0},
      {RT_LR_COSINE, 0, 0, 0.2, 10, 0.2},
      {RT_LR_COSINE, 2, 0, 0, 6, 0.5}, /* the decay over steps 3 .. 10: p = 4/8 */
      {RT_LR_COSINE, 2, 0, 0, 1, 0.5}, /* warmup */
      {RT_LR_COSINE, 0, 4, 0.1, 2, 0.1 + 0.9 * 0.5},
      {RT_LR_COSINE, 0, 4, 0.1, 7, 0.1}, /* past the decay: the floor */
      {RT_LR_LINEAR, 0, 0, 0, 5, 0.5},
      {RT_LR_LINEAR, 0, 0, 0.5, 5, 0.75},
      {RT_LR_LINEAR, 0, 0, 0, 10, 0.0},
      {RT_LR_LINEAR, 2, 4, 0, 4, 0.5},
      {RT_LR_WSD, 0, 0, 0, 8, 1.0}, /* the default decay: the last 10 / 5 = 2 steps */
      {RT_LR_WSD, 0, 0, 0, 9, 1 - sqrt(0.5)},
      {RT_LR_WSD, 0, 0, 0, 10, 0.0},
      {RT_LR_WSD, 2, 4, 0.1, 2, 1.0},
      {RT_LR_WSD, 2, 4, 0.1, 6, 1.0},
      {RT_LR_WSD, 2, 4, 0.1, 8, 0.1 + 0.9 * (1 - sqrt(0.5))},
      {RT_LR_WSD, 2, 4, 0.1, 10, 0.1},
  };
  int good = 1;
  for (size_t k = 0; k < sizeof pts / sizeof pts[0]; k++) {
    RtLr s = {.kind = pts[k].kind,
              .lr = 1,
              .lr_min = pts[k].lr_min,
              .warmup = pts[k].warmup,
              .decay = pts[k].decay,
              .steps = 10,
              .have_lr_min = pts[k].lr_min > 0};
    double got = rt_lr_check(&s, err, sizeof err) ? NAN : rt_lr_at(&s, pts[k].t - 1);
    if (!(fabs(got - pts[k].want) < 1e-12)) {
      good = 0;
      printf("  | %s warmup %lld decay %lld lr_min %g: step %lld: lr %.15g, expected %.15g\n", rt_lr_name(pts[k].kind),
             (long long)pts[k].warmup, (long long)pts[k].decay, pts[k].lr_min, (long long)pts[k].t, got, pts[k].want);
    }
  }
  check(good, "lr schedules: %zu points (warmup, constant, cosine, linear, wsd) equal their values",
        sizeof pts / sizeof pts[0]);
  /* every step of a longer run against the formulas (rt_lr.h) */
  double worst = 0;
  for (int kind = RT_LR_CONSTANT; kind <= RT_LR_WSD; kind++) {
    RtLr s = {.kind = (RtLrKind)kind,
              .lr = 3e-4,
              .lr_min = kind == RT_LR_CONSTANT ? 0 : 3e-5,
              .warmup = 100,
              .steps = 1000,
              .have_lr_min = kind != RT_LR_CONSTANT};
    if (!check(rt_lr_check(&s, err, sizeof err) == 0, "lr schedule %s over 1000 steps checks [%s]", rt_lr_name(s.kind),
               err))
      continue;
    int64_t d = kind == RT_LR_WSD ? 200 : kind == RT_LR_CONSTANT ? 0 : 900;
    check(s.decay == d, "%s: the default decay is %lld steps (%lld)", rt_lr_name(s.kind), (long long)d,
          (long long)s.decay);
    for (int64_t t = 1; t <= 1000; t++) {
      double want, p;
      if (t <= 100) want = 3e-4 * (double)t / 100;
      else if (kind == RT_LR_CONSTANT) want = 3e-4;
      else if (kind == RT_LR_WSD) want = t <= 800 ? 3e-4 : 3e-5 + (3e-4 - 3e-5) * (1 - sqrt((double)(t - 800) / 200));
      else {
        p = (double)(t - 100) / 900;
        want = kind == RT_LR_COSINE ? 3e-5 + (3e-4 - 3e-5) * 0.5 * (1 + cos(pi * p)) : 3e-4 - (3e-4 - 3e-5) * p;
      }
      double e = fabs(rt_lr_at(&s, t - 1) - want);
      if (e > worst) worst = e;
    }
  }
  check(worst < 1e-18, "lr schedules: every step of 1000 (warmup 100) equals the closed form (worst %.2e)", worst);
  RtLr z = {.kind = RT_LR_CONSTANT, .lr = 1e-3, .steps = 5};
  check(rt_lr_check(&z, err, sizeof err) == 0 && rt_lr_at(&z, 0) == 1e-3 && rt_lr_at(&z, 4) == 1e-3,
        "the default (constant, no warmup) is --lr at every step");
}

/* Libraries loaded at run time (rt_util_load_lib): a missing one or function is a message, and the
 * cuda device's cuBLASLt and NCCL (loaded as it starts; ppr links neither) resolve every function
 * ppr calls in the toolkit this ppr was built against, callable through the loaded tables. */
static void test_loaded_libraries(void) {
  char err[512] = "";
  void *h = NULL, *slot = NULL;
  const char *const names[] = {"ppr_no_such_function"};
  void *const slots[] = {&slot};
  check(rt_util_load_lib(&h, "libppr-no-such-library.so.7", names, slots, 1, err, sizeof err) == -1 && !h &&
            strstr(err, "libppr-no-such-library.so.7 cannot be loaded ("),
        "a library that is not there: %s", err);
  check(rt_util_load_lib(&h, "libm.so.6", names, slots, 1, err, sizeof err) == -2 && !h &&
            !strcmp(err, "libm.so.6 has no ppr_no_such_function"),
        "a function the library lacks: %s", err);
  const char *const cosine[] = {"cos"};
  double (*cos_fn)(double) = NULL;
  void *const cos_slot[] = {(void *)&cos_fn};
  check(rt_util_load_lib(&h, "libm.so.6", cosine, cos_slot, 1, err, sizeof err) == 0 && h && cos_fn && cos_fn(0) == 1,
        "a library's function loaded and called");
#ifdef PPR_CUDA
  err[0] = 0;
  check(rt_dev_cuda_load_cublaslt(err, sizeof err) == 0 &&
            !strcmp(rt_dev_cuda_blas_status_name(0), "CUBLAS_STATUS_SUCCESS"),
        "cuBLASLt loads with every function the cuda device calls %s", err);
  err[0] = 0;
  check(rt_comm_load_nccl(err, sizeof err) == 0 && rt_comm_nccl_error_name(0)[0],
        "NCCL loads with every function the cuda ranks call %s", err);
#endif
}

int main(int argc, char **argv) {
  (void)argc;
  const char *self = argv[0];
  const char *slash = strrchr(self, '/');
  if (slash) snprintf(ppr, sizeof ppr, "%.*s/ppr", (int)(slash - self), self);
  else snprintf(ppr, sizeof ppr, "./ppr");
  snprintf(tdir, sizeof tdir, "/tmp/test_ppr.XXXXXX");
  if (!mkdtemp(tdir)) {
    perror("mkdtemp");
    printf("0 passed, 1 failed\n");
    return 1;
  }
  struct stat st;
  if (!check(stat(ppr, &st) == 0, "found %s", ppr)) {
    printf("%d passed, %d failed\n", npass, nfail);
    return 1;
  }

  /* the kernels, compiled the way ppc does it */
  char kc[512], cmd[2048];
  path(kc, sizeof kc, "k.c");
  write_bytes(kc, KERNELS, strlen(KERNELS));
  snprintf(cmd, sizeof cmd, "cc -O2 -fopenmp -shared -fPIC -o %s/k.so %s -lm", tdir, kc);
  if (!check(system(cmd) == 0, "hand-written kernels compile: %s", cmd)) {
    printf("%d passed, %d failed\n", npass, nfail);
    return 1;
  }
  /* the bodies name k.so's size and hash, as ppc names the objects it writes */
  path(kc, sizeof kc, "k.so");
  size_t kn = 0;
  char *kso = read_bytes(kc, &kn);
  if (!check(kso != NULL && kn > 0, "read back %s (%zu bytes)", kc, kn)) {
    printf("%d passed, %d failed\n", npass, nfail);
    return 1;
  }
  char so_line[64];
  snprintf(so_line, sizeof so_line, "object so %zu %016llx", kn, (unsigned long long)fnv(kso, kn));
  free(kso);
  BODY = replace(BODY_T, "object so @SO", so_line);
  STAGE0 = replace(STAGE0_T, "object so @SO", so_line);
  STAGE1 = replace(STAGE1_T, "object so @SO", so_line);
  CHUNK0 = replace(CHUNK0_T, "object so @SO", so_line);
  CHUNK1 = replace(CHUNK1_T, "object so @SO", so_line);
  GEN = replace(GEN_T, "object so @SO", so_line);
  make_prog("main", BODY);

  W w;
  for (int i = 0; i < V * H; i++) w.E[i] = (float)(0.5 * (urand() * 2 - 1));
  for (int i = 0; i < H; i++) w.g[i] = (float)(0.5 + urand());
  for (int i = 0; i < H * H; i++) w.P[i] = (float)(0.6 * (urand() * 2 - 1));
  for (int i = 0; i < 37; i++) data_main[i] = (int)(urand() * V);
  for (int i = 0; i < 320; i++) data_cyc[i] = (i * 5 + 3) % V;
  char p[512];
  path(p, sizeof p, "w.safetensors");
  check(write_weights(p, &w, 0, NULL) == 0, "wrote the initial weights");
  path(p, sizeof p, "data.bin");
  write_tokens(p, data_main, 37, 37);
  path(p, sizeof p, "cyc.bin");
  write_tokens(p, data_cyc, 320, 320);

  test_parser();
  test_tp_parser();
  test_fuzz();
  test_gradients(&w);
  test_training();
  test_seed_init();
  test_half_init();
  test_init_errors(&w);
  test_data_errors();
  test_listing_errors();
  test_cli();
  test_lr();
  test_loaded_libraries();
  test_pipeline_mpi(&w);
  test_pipeline_parser();
  test_chunk_parser();
  test_chunks_mpi(&w);
  test_generate(&w);

  free((char *)BODY);
  free((char *)GEN);
  free((char *)CHUNK0);
  free((char *)CHUNK1);
  free((char *)STAGE0);
  free((char *)STAGE1);
  if (!nfail) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", tdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tdir);
  } else {
    printf("note: files kept in %s\n", tdir);
  }
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
