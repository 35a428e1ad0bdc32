/* test_nvrtc.c — ppc's CUDA kernels: `ppc -o` compiles every stage's kernels_sN.cu with NVRTC to
 * kernels_sN.cubin (for --arch, sm_90 by default) and kernels_sN.ptx, and names both hashes on the
 * listing's `cuda` line with their sizes. For every example model, dense and on tp 2 / pp 2 meshes,
 * every stage's files are checked against the listing; a second compile, from a cold cache, gives
 * the same bytes; a damaged cache entry is compiled again, never copied; every --arch compiles; and
 * an NVRTC failure (cg_nvrtc on a broken source) is an error that prints NVRTC's log and the
 * generated line it names; the PTX leaves no product to the compiler's contraction (--fmad=false). Without a CUDA
 * toolkit ppc writes `cuda ARCH - - - -` and this test says so. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ppc.h"
#include "test_util.h"

#define CHECK_PRINT_ALL /* every result, as it runs */
#include "check.h"

static const char *const cases[][2] = {
    {"examples/tiny.pdl", ""},
    {"examples/minimind.pdl", ""},
    {"examples/gpt2.pdl", ""},
    {"tests/models/tiny_gpt2.pdl", ""},
    {"examples/tiny.pdl", "--tp 2 --pp 2"},
    {"examples/minimind.pdl", "--tp 2"},
    {"examples/minimind.pdl", "--pp 2"},
    {"examples/minimind.pdl", "--tp 2 --pp 4"},
    {"examples/minimind.pdl", "--tp 8"},        /* kv heads replicated */
    {"tests/models/tiny_pad.pdl", "--tp 4"},    /* a padded vocabulary */
    {"tests/models/tiny_window.pdl", "--cp 2"}, /* a sliding window across the cp ranks */
    {"tests/models/tiny_window.pdl", "--attention gemm"},
    {"tests/models/tiny_softcap.pdl", "--tp 2"}, /* soft-capped scores and logits */
    {"examples/gpt2.pdl", "--tp 2"},
    {"examples/gpt2.pdl", "--pp 2"},
    {"examples/gpt2.pdl", "--tp 2 --pp 3"},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

static char bin[512] = "build";

/* The whole file and its length; NULL when absent. */
static char *file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)(n > 0 ? n : 0) + 1);
  *len = fread(s, 1, (size_t)(n > 0 ? n : 0), f);
  s[*len] = 0;
  fclose(f);
  return s;
}

/* The `cuda` line of DIR/rankR.prog: the arch, the cubin's size and hash, the PTX's ("-" for none). */
static int cuda_line(const char *dir, int rank, char *arch, char *ncubin, char *cubin, char *nptx, char *ptx) {
  char path[1200];
  snprintf(path, sizeof path, "%s/rank%d.prog", dir, rank);
  char *t = slurp(path);
  char *l = t ? strstr(t, "\ncuda ") : NULL;
  int ok = l && sscanf(l, "\ncuda %15s %20s %16s %20s %16s", arch, ncubin, cubin, nptx, ptx) == 5;
  free(t);
  return ok ? 0 : -1;
}

static int same_file(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  char *x = file(a, &na), *y = file(b, &nb);
  int same = x && y && na == nb && !memcmp(x, y, na);
  free(x);
  free(y);
  return same;
}

/* Every stage of a compiled directory: its cubin and PTX exist and hash as its listings say. */
static void check_dir(const char *dir, const char *what, const char *want_arch) {
  char prog[1200], arch[16], hc[17], hp[17], nc[21], np[21];
  int tp = 1, pp = 1, ok = 1, stages = 0;
  char why[2048] = "";
  snprintf(prog, sizeof prog, "%s/rank0.prog", dir);
  char *t = slurp(prog);
  if (!t || sscanf(strstr(t, "\nmesh ") ? strstr(t, "\nmesh ") : "", "\nmesh tp %d pp %d", &tp, &pp) != 2) ok = 0;
  free(t);
  for (int s = 0; s < pp && ok; s++, stages++) {
    if (cuda_line(dir, s * tp, arch, nc, hc, np, hp)) {
      snprintf(why, sizeof why, "stage %d: no cuda line", s);
      ok = 0;
      break;
    }
    const char *ext[2] = {"cubin", "ptx"}, *want[2] = {hc, hp}, *wantn[2] = {nc, np};
    for (int k = 0; k < 2 && ok; k++) {
      char path[1300], sz[32];
      size_t n = 0;
      snprintf(path, sizeof path, "%s/kernels_s%d.%s", dir, s, ext[k]);
      char *b = file(path, &n), h[17];
      snprintf(h, sizeof h, "%016llx", b ? (unsigned long long)cg_fnv1a(b, n) : 0ULL);
      snprintf(sz, sizeof sz, "%zu", n);
      if (!b || n == 0 || strcmp(h, want[k]) || strcmp(sz, wantn[k]) || strcmp(arch, want_arch)) {
        snprintf(why, sizeof why, "stage %d: %s %s (%s bytes, hash %s; the listing says %s bytes, %s for %s)", s, path,
                 b ? "differs" : "missing", sz, h, wantn[k], want[k], arch);
        ok = 0;
      }
      free(b);
    }
  }
  check(ok, "%s: %d stage%s, each with its %s cubin and PTX as the listings name them%s%s", what, stages,
        stages == 1 ? "" : "s", want_arch, ok ? "" : ": ", why);
}

static int ppc(const char *model, const char *flags, const char *dir, const char *env) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && %s %s/ppc %s %s -o %s > %s.log 2>&1", dir, dir, env, bin,
           model, flags, dir, dir);
  return system(cmd);
}

/* cg_nvrtc on a source NVRTC refuses: exit 1, the log, and the generated line it names. */
static void check_failure(void) {
  const char *src =
      "/* a generated source */\nextern \"C\" __global__ void k(float *p) {\n  p[0] = undeclared_name;\n}\n";
  char dir[600], errp[700];
  snprintf(dir, sizeof dir, "%s/nvrtc/broken", bin);
  snprintf(errp, sizeof errp, "%s/err.txt", dir);
  char cmd[1300];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
  if (system(cmd)) return;
  fflush(stderr);
  int saved = dup(2);
  FILE *f = freopen(errp, "w", stderr);
  uint64_t hc = 0, hp = 0;
  int rc = f ? cg_nvrtc(dir, "kernels_s0", src, strlen(src), "sm_90", "", &hc, &hp) : -1;
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char *out = slurp(errp);
  check(rc != 0 && out && strstr(out, "ppc: error: NVRTC failed to compile") && strstr(out, "undeclared_name") &&
            strstr(out, "kernels_s0.cu:3:   p[0] = undeclared_name;"),
        "an NVRTC failure is an error with NVRTC's log and the generated line it names");
  if (!(rc != 0 && out && strstr(out, "kernels_s0.cu:3:"))) printf("  | %s\n", out ? out : "(no output)");
  free(out);
}

int main(int argc, char **argv) {
  (void)argc;
  const char *slash = strrchr(argv[0], '/');
  if (slash) snprintf(bin, sizeof bin, "%.*s", (int)(slash - argv[0]), argv[0]);
  if (!cg_nvrtc_available()) {
    char dir[700], arch[16], hc[17], hp[17], nc[21], np[21];
    snprintf(dir, sizeof dir, "%s/nvrtc/none", bin);
    int ok = !ppc("examples/tiny.pdl", "", dir, "") && !cuda_line(dir, 0, arch, nc, hc, np, hp) && !strcmp(hc, "-") &&
             !strcmp(nc, "-") && !strcmp(hp, "-") && !strcmp(np, "-");
    check(ok, "without a CUDA toolkit ppc writes 'cuda sm_90 - - - -' (no cubins; ppr --device cuda says so)");
    printf("SKIP nvrtc: ppc was built without a CUDA toolkit (nvrtc.h); %d cases not compiled\n", NCASES);
    return check_done();
  }
  for (int i = 0; i < NCASES; i++) {
    char dir[700], what[600];
    snprintf(dir, sizeof dir, "%s/nvrtc/case%d", bin, i);
    snprintf(what, sizeof what, "%s %s", cases[i][0], cases[i][1]);
    if (ppc(cases[i][0], cases[i][1], dir, "")) {
      check(0, "%s: ppc failed (%s.log)", what, dir);
      continue;
    }
    check_dir(dir, what, "sm_90");
  }
  /* no contraction (--fmad=false): every f32 product and sum of the PTX rounds on its own (.rn), so
   * ptxas fuses none; the fused multiply-adds are the renderer's fmaf (fma.rn) */
  {
    int plain = 0, rn = 0, fma = 0;
    for (int i = 0; i < NCASES; i++) {
      char path[800];
      snprintf(path, sizeof path, "%s/nvrtc/case%d/kernels_s0.ptx", bin, i);
      char *t = slurp(path);
      if (!t) continue; /* no PTX: the counts fail below */
      plain += count(t, "mul.f32") + count(t, "add.f32") + count(t, "sub.f32");
      rn += count(t, "mul.rn.f32");
      fma += count(t, "fma.rn.f32");
      free(t);
    }
    check(
        plain == 0 && rn > 0 && fma > 0,
        "the cases' PTX: %d f32 products and sums left to ptxas's contraction (mul.f32, add.f32, sub.f32), %d rounded "
        "apart (mul.rn.f32), %d fused by the renderer (fma.rn.f32)",
        plain, rn, fma);
  }
  /* reproducible: a second compile with an empty cache gives the same bytes */
  {
    char a[700], b[700], env[800], pa[800], pb[800];
    snprintf(a, sizeof a, "%s/nvrtc/case4", bin);
    snprintf(b, sizeof b, "%s/nvrtc/again", bin);
    snprintf(env, sizeof env, "PPC_CACHE=%s/nvrtc/cold-cache", bin);
    int ok = !ppc("examples/tiny.pdl", "--tp 2 --pp 2", b, env);
    const char *files[] = {"rank0.prog",       "rank3.prog",     "kernels_s0.cubin",
                           "kernels_s1.cubin", "kernels_s1.ptx", "kernels_s1.cl"};
    for (size_t k = 0; k < sizeof files / sizeof *files && ok; k++) {
      snprintf(pa, sizeof pa, "%s/%s", a, files[k]);
      snprintf(pb, sizeof pb, "%s/%s", b, files[k]);
      ok = same_file(pa, pb);
      if (!ok) printf("  | %s and %s differ\n", pa, pb);
    }
    check(ok,
          "tiny tp 2 pp 2 compiled again from a cold cache: the listings, cubins, PTX and OpenCL C are the same bytes");
  }
  /* a damaged cache entry (a truncated cubin, a PTX with one byte changed, a truncated C object) is
   * compiled again, never copied: the files equal those of the first compile, into the same
   * directory, and the repaired entries serve the next compile */
  {
    char a[700], saved[700], env[800], cache[750], cmd[4096], pa[800], pb[800];
    snprintf(a, sizeof a, "%s/nvrtc/damaged", bin);
    snprintf(saved, sizeof saved, "%s/nvrtc/damaged-first", bin);
    snprintf(cache, sizeof cache, "%s/nvrtc/damaged-cache", bin);
    snprintf(env, sizeof env, "PPC_CACHE=%s", cache);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", cache, saved);
    int ok = !system(cmd) && !ppc("examples/tiny.pdl", "", a, env);
    snprintf(cmd, sizeof cmd,
             "cp -r %s %s && for f in %s/*.cubin %s/*.so; do truncate -s 100 \"$f\" || exit 1; done && "
             "for f in %s/*.ptx; do printf X | dd of=\"$f\" bs=1 seek=200 conv=notrunc 2>/dev/null || exit 1; done",
             a, saved, cache, cache, cache);
    ok = ok && !system(cmd);
    for (int round = 0; round < 2 && ok; round++) { /* round 0: from the damaged cache; 1: from the repaired one */
      ok = !ppc("examples/tiny.pdl", "", a, env);
      const char *files[] = {"rank0.prog", "kernels_s0.so", "kernels_s0.cubin", "kernels_s0.ptx", "kernels_s0.cl"};
      for (size_t k = 0; k < sizeof files / sizeof *files && ok; k++) {
        snprintf(pa, sizeof pa, "%s/%s", saved, files[k]);
        snprintf(pb, sizeof pb, "%s/%s", a, files[k]);
        ok = same_file(pa, pb);
        if (!ok) printf("  | round %d: %s and %s differ\n", round, pa, pb);
      }
    }
    snprintf(cmd, sizeof cmd, "for f in %s/*.cubin %s/*.so; do [ $(wc -c < \"$f\") -gt 100 ] || exit 1; done", cache,
             cache);
    ok = ok && !system(cmd);
    check(ok,
          "damaged cache entries (cubin and C object truncated, PTX changed) are compiled again: the same files as a "
          "clean compile, and the entries repaired");
  }
  /* every target */
  static const char *const archs[] = {"sm_80", "sm_89", "sm_100"};
  for (int i = 0; i < 3; i++) {
    char dir[700], flags[64], what[128];
    snprintf(dir, sizeof dir, "%s/nvrtc/%s", bin, archs[i]);
    snprintf(flags, sizeof flags, "--arch %s --pp 2", archs[i]);
    snprintf(what, sizeof what, "examples/tiny.pdl --arch %s --pp 2", archs[i]);
    if (ppc("examples/tiny.pdl", flags, dir, "")) check(0, "%s: ppc failed", what);
    else check_dir(dir, what, archs[i]);
  }
  check_failure();
  return check_done();
}
