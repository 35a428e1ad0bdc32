/* cg_nvrtc.c — a stage's CUDA C compiled with NVRTC: a cubin for the target GPU and PTX for newer ones, cached by a
 * hash of the source, the options and NVRTC's version. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ppc.h"

#ifdef PPC_NVRTC
#include <nvrtc.h>
#endif

static const char *const archs[] = {"sm_80", "sm_89", "sm_90", "sm_100"};

bool cg_arch_known(const char *arch) {
  for (size_t i = 0; i < sizeof archs / sizeof *archs; i++)
    if (!strcmp(arch, archs[i])) return true;
  return false;
}

#ifndef PPC_NVRTC

bool cg_nvrtc_available(void) { return false; }

int cg_nvrtc_files(const char *dir, const char *base, const char *src, size_t len, const char *arch, const char *cache,
                   FileSum *cubin, FileSum *ptx) {
  (void)dir, (void)base, (void)src, (void)len, (void)arch, (void)cache, (void)cubin, (void)ptx;
  diag_fatal("internal: cg_nvrtc in a ppc built without NVRTC");
}

#else

bool cg_nvrtc_available(void) { return true; }

/* Every NVRTC call: on failure the call, where, and NVRTC's message. */
#define NVRTC_CHECK(call)                                                                                              \
  do {                                                                                                                 \
    nvrtcResult rc_ = (call);                                                                                          \
    if (rc_ != NVRTC_SUCCESS) {                                                                                        \
      fprintf(stderr, "ppc: error: NVRTC: %s failed: %s [%s:%d]\n", #call, nvrtcGetErrorString(rc_), __FILE__,         \
              __LINE__);                                                                                               \
      goto fail;                                                                                                       \
    }                                                                                                                  \
  } while (0)

/* A cache entry: the payload's FNV-1a hash (8 bytes, little-endian), then the payload. A file that
 * does not hold its own hash (truncated, corrupted) is no entry. NULL when absent. */
static char *cache_get(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0, k;
  char *b = xmalloc(cap);
  while ((k = fread(b + n, 1, cap - n, f)) > 0)
    if ((n += k) == cap) b = xrealloc(b, cap *= 2);
  fclose(f);
  uint64_t h = 0;
  for (int i = 0; i < 8 && n >= 8; i++) h |= (uint64_t)(unsigned char)b[i] << (8 * i);
  if (n < 8 || h != cg_fnv1a(b + 8, n - 8)) {
    free(b);
    return NULL;
  }
  memmove(b, b + 8, n - 8);
  *len = n - 8;
  return b;
}

static void cache_put(const char *cache, const char *path, const char *data, size_t len) {
  char *b = xmalloc(len + 8);
  uint64_t h = cg_fnv1a(data, len);
  for (int i = 0; i < 8; i++) b[i] = (char)(h >> (8 * i));
  memcpy(b + 8, data, len);
  cg_mkdir_p(cache); /* best effort: a cache that cannot be written only costs time */
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (f) {
    size_t w = fwrite(b, 1, len + 8, f);
    if (fclose(f) || w != len + 8 || rename(tmp, path)) remove(tmp);
  }
  free(b);
}

/* The lines of src that NVRTC's log names ("BASE.cu(LINE): error: ..."), after the log. */
static void print_named_lines(const char *log, const char *name, const char *src) {
  size_t nl = strlen(name);
  int shown = 0;
  for (const char *p = strstr(log, name); p && shown < 5; p = strstr(p + nl, name)) {
    if (p[nl] != '(') continue;
    long line = strtol(p + nl + 1, NULL, 10);
    const char *l = src;
    for (long i = 1; i < line && l; i++) l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL;
    if (!l || line < 1) continue;
    int len = (int)(strchr(l, '\n') ? strchr(l, '\n') - l : (long)strlen(l));
    fprintf(stderr, "  %s:%ld: %.*s\n", name, line, len, l);
    shown++;
  }
}

int cg_nvrtc_files(const char *dir, const char *base, const char *src, size_t len, const char *arch, const char *cache,
                   FileSum *cubin_sum, FileSum *ptx_sum) {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  char opt_arch[64], name[128];
  snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
  snprintf(name, sizeof name, "%s.cu", base);
  /* --fmad=false: no product contracted into a sum; the renderer writes the fused multiply-adds
   * itself (fmaf), the ones the C kernels have, so the devices round alike (compiler/cg_kir.c) */
  const char *opts[] = {opt_arch, "--std=c++17", "--fmad=false"};
  /* the cache key: NVRTC's version, the options and the source */
  char *key = xmalloc(len + 256);
  int kl = snprintf(key, 256, "nvrtc %d.%d|%s|%s|%s|", major, minor, opts[0], opts[1], opts[2]);
  memcpy(key + kl, src, len);
  uint64_t h = cg_fnv1a(key, (size_t)kl + len);
  free(key);
  char cpath[4200] = "", ppath[4200] = "";
  if (cache && *cache) {
    snprintf(cpath, sizeof cpath, "%s/%016llx.cubin", cache, (unsigned long long)h);
    snprintf(ppath, sizeof ppath, "%s/%016llx.ptx", cache, (unsigned long long)h);
  }
  char *cubin = NULL, *ptx = NULL, *log = NULL;
  size_t ncubin = 0, nptx = 0;
  nvrtcProgram prog = NULL;
  int rc = 1;
  if (cpath[0]) {
    cubin = cache_get(cpath, &ncubin);
    ptx = cubin ? cache_get(ppath, &nptx) : NULL;
  }
  if (!cubin || !ptx) {
    free(cubin), free(ptx);
    cubin = ptx = NULL;
    char *text = xmalloc(len + 1);
    memcpy(text, src, len);
    text[len] = 0;
    NVRTC_CHECK(nvrtcCreateProgram(&prog, text, name, 0, NULL, NULL));
    nvrtcResult crc = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof *opts), opts);
    if (crc != NVRTC_SUCCESS) {
      size_t ln = 0;
      nvrtcGetProgramLogSize(prog, &ln);
      log = xmalloc(ln + 1);
      log[0] = 0;
      nvrtcGetProgramLog(prog, log);
      fprintf(stderr, "ppc: error: NVRTC failed to compile %s/%s for %s: %s\n%s", dir, name, arch,
              nvrtcGetErrorString(crc), log);
      print_named_lines(log, name, text);
      free(text);
      goto fail;
    }
    free(text);
    NVRTC_CHECK(nvrtcGetCUBINSize(prog, &ncubin));
    cubin = xmalloc(ncubin ? ncubin : 1);
    NVRTC_CHECK(nvrtcGetCUBIN(prog, cubin));
    NVRTC_CHECK(nvrtcGetPTXSize(prog, &nptx));
    ptx = xmalloc(nptx ? nptx : 1);
    NVRTC_CHECK(nvrtcGetPTX(prog, ptx));
    if (nptx && ptx[nptx - 1] == 0) nptx--; /* the text, without its NUL */
    if (cpath[0]) {
      cache_put(cache, cpath, cubin, ncubin);
      cache_put(cache, ppath, ptx, nptx);
    }
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/%s.cubin", dir, base);
  if (cg_write_file(path, cubin, ncubin)) goto fail;
  snprintf(path, sizeof path, "%s/%s.ptx", dir, base);
  if (cg_write_file(path, ptx, nptx)) goto fail;
  *cubin_sum = (FileSum){.bytes = (int64_t)ncubin, .hash = cg_fnv1a(cubin, ncubin)};
  *ptx_sum = (FileSum){.bytes = (int64_t)nptx, .hash = cg_fnv1a(ptx, nptx)};
  rc = 0;
fail:
  if (prog) nvrtcDestroyProgram(&prog);
  free(cubin);
  free(ptx);
  free(log);
  return rc;
}

#endif

/* The hashes alone (tests/unit/test_nvrtc.c). */
int cg_nvrtc(const char *dir, const char *base, const char *src, size_t len, const char *arch, const char *cache,
             uint64_t *cubin_hash, uint64_t *ptx_hash) {
  FileSum cubin, ptx;
  int rc = cg_nvrtc_files(dir, base, src, len, arch, cache, &cubin, &ptx);
  if (!rc) *cubin_hash = cubin.hash, *ptx_hash = ptx.hash;
  return rc;
}
