/* fuzz_safetensors.c — libFuzzer target: bytes as a safetensors file through ppr's reader
 * (runtime/rt_safetensors.c, rt_io.h), and what it accepts back through the writer (rt_st_write.c).
 *
 * The input is written to an unlinked temporary file that the reader opens (and maps) as
 * /proc/self/fd/N. When the file opens, every accessor runs on every tensor, each tensor is read
 * whole and as a slice (the middle third of every dim), and the tensors are written to a second
 * temporary file with rt_st_write and read back.
 *
 * What counts as a bug (the target aborts, and libFuzzer saves the input):
 *   - a sanitizer report;
 *   - a rejection whose message does not name the file (rt_io.h's contract);
 *   - an accepted file whose accessors disagree (count, find, shape, numel), whose data does not
 *     fit in the file, or that cannot be read whole or by slice;
 *   - a checksum check (rt_st_verify) that fails without naming the file;
 *   - a round trip through rt_st_write that changes a name, a shape or a value's bits, or writes a
 *     tensor that fails its own checksum (values compared as the F32 the reader returns). A file the writer refuses is
 * not a bug (the writer is stricter about names than the reader). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_io.h"

static int in_fd = -1, have_dir;
static char in_path[64], out_path[4096];

static void die(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_safetensors: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

static int tmpfile_fd(const char *name) {
  const char *tmp = getenv("TMPDIR");
  char tpl[4096];
  snprintf(tpl, sizeof tpl, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
  int fd = mkstemp(tpl);
  if (fd < 0 || unlink(tpl)) {
    perror("fuzz_safetensors: a temporary file");
    abort();
  }
  return fd;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  in_fd = tmpfile_fd("fuzz_st_in");
  snprintf(in_path, sizeof in_path, "/proc/self/fd/%d", in_fd);
  /* the round trip's file: rt_st_write renames PATH.tmp over PATH, so it needs a real directory
   * entry; a private directory, removed when the fuzzer exits normally */
  const char *tmp = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/fuzz_st.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("fuzz_safetensors: a temporary directory");
    abort();
  }
  snprintf(out_path, sizeof out_path, "%s/out.safetensors", dir);
  have_dir = 1;
  return 0;
}

static void cleanup(void) {
  remove(out_path);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", out_path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0, rmdir(dir);
}

/* The values of tensor i as F32 (numel of them); NULL for none. */
static float *read_all(const RtStFile *f, int i, int64_t numel, char *err, size_t errlen) {
  float *v = malloc(numel ? (size_t)numel * sizeof *v : 1);
  if (!v) die("out of memory", NULL);
  if (rt_st_read_f32(f, i, v, (size_t)numel, err, errlen)) {
    free(v);
    return NULL;
  }
  return v;
}

static void round_trip(const RtStFile *f, int n, float **vals) {
  const char **names = calloc((size_t)n + 1, sizeof *names);
  int *ndims = calloc((size_t)n + 1, sizeof *ndims);
  int64_t(*shapes)[RT_ST_MAX_NDIM] = calloc((size_t)n + 1, sizeof *shapes);
  const int64_t **sp = calloc((size_t)n + 1, sizeof *sp);
  if (!names || !ndims || !shapes || !sp) die("out of memory", NULL);
  for (int i = 0; i < n; i++) {
    names[i] = rt_st_name(f, i);
    ndims[i] = rt_st_shape(f, i, shapes[i], RT_ST_MAX_NDIM);
    sp[i] = shapes[i];
  }
  char err[4096] = "";
  if (rt_st_write(out_path, n, names, ndims, sp, (const float *const *)vals, err, sizeof err) == 0) {
    RtStFile *g = NULL;
    if (rt_st_open(out_path, &g, err, sizeof err)) die("the reader refuses what the writer wrote", err);
    if (rt_st_count(g) != n) die("the round trip changed the tensor count", NULL);
    if (n && !rt_st_has_checksums(g)) die("the writer wrote no checksums", NULL);
    for (int i = 0; i < n; i++) {
      if (rt_st_verify(g, i, err, sizeof err)) die("a written tensor fails its own checksum", err);
      int64_t dims[RT_ST_MAX_NDIM];
      if (strcmp(rt_st_name(g, i), names[i]) || rt_st_dtype_id(g, i) != RT_ST_F32 ||
          rt_st_shape(g, i, dims, RT_ST_MAX_NDIM) != ndims[i] ||
          memcmp(dims, shapes[i], (size_t)ndims[i] * sizeof *dims))
        die("the round trip changed a tensor's name, dtype or shape", names[i]);
      int64_t numel = rt_st_numel(g, i);
      float *v = read_all(g, i, numel, err, sizeof err);
      if (!v) die("the written file's tensor does not read back", err);
      if (numel && memcmp(v, vals[i], (size_t)numel * sizeof *v)) die("the round trip changed a value", names[i]);
      free(v);
    }
    rt_st_close(g);
  } else if (!strstr(err, out_path)) {
    die("the writer's message does not name the file", err);
  }
  remove(out_path);
  free(names);
  free(ndims);
  free(shapes);
  free(sp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (ftruncate(in_fd, 0) || pwrite(in_fd, data, size, 0) != (ssize_t)size) die("cannot write the input", NULL);
  RtStFile *f = NULL;
  char err[4096] = "";
  if (rt_st_open(in_path, &f, err, sizeof err)) {
    if (f) die("rt_st_open failed and returned a file", NULL);
    if (!strstr(err, in_path)) die("a rejection that does not name the file", err);
    return 0;
  }
  if (!f) die("rt_st_open succeeded without a file", NULL);
  int n = rt_st_count(f);
  if (n < 0) die("a negative tensor count", NULL);
  float **vals = calloc((size_t)n + 1, sizeof *vals);
  if (!vals) die("out of memory", NULL);
  for (int i = 0; i < n; i++) {
    const char *name = rt_st_name(f, i), *dt = rt_st_dtype(f, i);
    if (!name || !dt) die("a tensor without a name or a dtype", NULL);
    if (rt_st_find(f, name) != i) die("rt_st_find does not find a tensor by its name", name);
    int id = rt_st_dtype_id(f, i);
    int esize = id == RT_ST_F64 ? 8 : id == RT_ST_F32 ? 4 : id == RT_ST_F16 || id == RT_ST_BF16 ? 2 : 0;
    if (!esize) die("an accepted dtype outside F64, F32, F16, BF16", dt);
    int64_t dims[RT_ST_MAX_NDIM];
    int nd = rt_st_ndim(f, i);
    if (nd < 0 || nd > RT_ST_MAX_NDIM || rt_st_shape(f, i, dims, RT_ST_MAX_NDIM) != nd) die("a bad ndim", name);
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) {
      if (dims[d] < 0) die("a negative dim", name);
      if (dims[d] && numel > INT64_MAX / dims[d]) die("an element count that overflows", name);
      numel *= dims[d];
    }
    if (numel != rt_st_numel(f, i)) die("rt_st_numel is not the product of the shape", name);
    if (numel > (int64_t)size / esize) die("a tensor larger than the file", name);
    if (rt_st_verify(f, i, err, sizeof err) && (!strstr(err, in_path) || !strstr(err, "checksum")))
      die("a checksum failure that does not name the file", err);
    vals[i] = read_all(f, i, numel, err, sizeof err);
    /* F64: a finite value beyond float's range is refused when read, by design */
    if (!vals[i] && id == RT_ST_F64 && strstr(err, "range")) {
      rt_st_close(f);
      for (int k = 0; k < i; k++) free(vals[k]);
      free(vals);
      return 0;
    }
    if (!vals[i]) die("an accepted tensor does not read", err);
    /* the middle third of every dim (at least one element where the dim has one) */
    int64_t start[RT_ST_MAX_NDIM], len[RT_ST_MAX_NDIM], sn = 1;
    for (int d = 0; d < nd; d++) {
      start[d] = dims[d] / 3;
      len[d] = dims[d] - 2 * (dims[d] / 3);
      sn *= len[d];
    }
    float *s = malloc(sn ? (size_t)sn * sizeof *s : 1);
    if (!s) die("out of memory", NULL);
    if (rt_st_read_f32_slice(f, i, start, len, s, (size_t)sn, err, sizeof err)) die("a slice does not read", err);
    /* the slice's first element is the whole tensor's element at start */
    if (sn > 0) {
      int64_t at = 0;
      for (int d = 0; d < nd; d++) at = at * dims[d] + start[d];
      if (memcmp(&s[0], &vals[i][at], sizeof *s)) die("a slice disagrees with the whole tensor", name);
    }
    free(s);
    /* a slice that starts past the end of dim 0 is refused */
    if (nd > 0) {
      start[0] = dims[0];
      len[0] = 1;
      int64_t pn = 1;
      for (int d = 0; d < nd; d++) pn *= len[d];
      float *q = malloc(pn ? (size_t)pn * sizeof *q : 1);
      if (!q) die("out of memory", NULL);
      if (rt_st_read_f32_slice(f, i, start, len, q, (size_t)pn, err, sizeof err) == 0)
        die("a slice past the end reads", name);
      free(q);
    }
  }
  if (n > 0 && n <= 64) round_trip(f, n, vals);
  for (int i = 0; i < n; i++) free(vals[i]);
  free(vals);
  rt_st_close(f);
  return 0;
}

__attribute__((destructor)) static void at_exit_cleanup(void) {
  if (have_dir) cleanup();
}
