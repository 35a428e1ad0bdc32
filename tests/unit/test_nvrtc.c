/* test_nvrtc.c — compiles every stage's generated CUDA kernels (the kernels_sN.cu that ppc -o
 * writes) of every example, dense and on sharded meshes, with NVRTC for sm_90; an error prints
 * the log and the offending source lines. Without a CUDA toolkit it says so and skips. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#ifndef PPC_NO_CUDA
#include <nvrtc.h>
#endif

static const char *const cases[][2] = {
    {"examples/tiny.pdl", ""},
    {"examples/minimind.pdl", ""},
    {"examples/gpt2.pdl", ""},
    {"tests/models/tiny_gpt2.pdl", ""},
    {"examples/tiny.pdl", "--tp 2 --pp 2"},
    {"examples/minimind.pdl", "--tp 2 --pp 4"},
    {"examples/minimind.pdl", "--tp 8"},      /* kv heads replicated */
    {"tests/models/tiny_pad.pdl", "--tp 4"},  /* a padded vocabulary */
    {"examples/gpt2.pdl", "--tp 2 --pp 3"},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

#ifdef PPC_NO_CUDA
int main(void) {
  printf("SKIP nvrtc: no CUDA toolkit (nvrtc.h) was found at build time; %d cases not compiled\n", NCASES);
  printf("0 passed, 0 failed, %d skipped\n", NCASES);
  return 0;
}
#else

#define NVRTC_CHECK(call)                                                                  \
  do {                                                                                     \
    nvrtcResult rc_ = (call);                                                              \
    if (rc_ != NVRTC_SUCCESS) {                                                            \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, nvrtcGetErrorString(rc_)); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

__attribute__((unused)) static char *slurp_command(const char *cmd) {
  FILE *p = popen(cmd, "r");
  if (!p) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *s = malloc(cap);
  size_t n;
  while (s && (n = fread(s + len, 1, cap - len - 1, p)) > 0) {
    len += n;
    if (len + 1 == cap) s = realloc(s, cap *= 2);
  }
  int st = pclose(p);
  if (!s || st != 0) {
    free(s);
    return NULL;
  }
  s[len] = 0;
  return s;
}

/* "kernels.cu(123): error ..." — print the source around each line the log names */
static void show_lines(const char *log, const char *src) {
  for (const char *p = strstr(log, "kernels.cu("); p; p = strstr(p + 1, "kernels.cu(")) {
    int line = atoi(p + 11), l = 1;
    const char *s = src;
    while (*s && l < line - 2) l += *s++ == '\n';
    for (int k = 0; k < 5 && *s; k++) {
      const char *e = strchr(s, '\n');
      int n = e ? (int)(e - s) : (int)strlen(s);
      fprintf(stderr, "%5d | %.*s\n", l + k, n, s);
      s = e ? e + 1 : s + n;
    }
  }
}

static int compile(const char *name, const char *src) {
  nvrtcProgram prog;
  NVRTC_CHECK(nvrtcCreateProgram(&prog, src, "kernels.cu", 0, NULL, NULL));
  const char *opts[] = {"--gpu-architecture=sm_90", "--std=c++17"};
  nvrtcResult rc = nvrtcCompileProgram(prog, 2, opts);
  size_t loglen = 0;
  nvrtcGetProgramLogSize(prog, &loglen);
  char *log = malloc(loglen + 1);
  nvrtcGetProgramLog(prog, log);
  log[loglen] = 0;
  int bad = rc != NVRTC_SUCCESS;
  size_t cubin = 0;
  if (!bad) bad = nvrtcGetCUBINSize(prog, &cubin) != NVRTC_SUCCESS || cubin == 0;
  if (bad) {
    fprintf(stderr, "NVRTC failed for %s: %s\n%s\n", name, nvrtcGetErrorString(rc), log);
    show_lines(log, src);
  }
  free(log);
  nvrtcDestroyProgram(&prog);
  if (!bad) printf("PASS nvrtc %s: %zu-byte cubin for sm_90\n", name, cubin);
  return bad;
}

int main(int argc, char **argv) {
  (void)argc;
  int pass = 0, fail = 0;
  char bin[512] = "build";
  const char *slash = strrchr(argv[0], '/');
  if (slash) snprintf(bin, sizeof bin, "%.*s", (int)(slash - argv[0]), argv[0]);
  for (int i = 0; i < NCASES; i++) {
    char cmd[8192], name[1024], dir[1024];
    snprintf(dir, sizeof dir, "%s/nvrtc/case%d", bin, i);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s/.. && %s/ppc %s %s -o %s > /dev/null", dir, dir, bin,
             cases[i][0], cases[i][1], dir);
    if (system(cmd) != 0) {
      printf("FAIL nvrtc %s %s: '%s' failed\n", cases[i][0], cases[i][1], cmd);
      fail++;
      continue;
    }
    for (int st = 0;; st++) {
      char path[1200];
      snprintf(path, sizeof path, "%s/kernels_s%d.cu", dir, st);
      char *src = slurp(path);
      if (!src) {
        if (st == 0) printf("FAIL nvrtc %s %s: no %s\n", cases[i][0], cases[i][1], path), fail++;
        break;
      }
      snprintf(name, sizeof name, "%s %s stage %d", cases[i][0], cases[i][1], st);
      if (compile(name, src)) {
        printf("FAIL nvrtc %s\n", name);
        fail++;
      } else {
        pass++;
      }
      free(src);
    }
  }
  printf("%d passed, %d failed\n", pass, fail);
  return fail != 0;
}
#endif
