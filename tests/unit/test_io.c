/* test_io.c - unit tests for runtime/rt_io.h: safetensors round trips, F16/BF16, slices, bad files, fuzzing, token data
 * and batch order. */
#include "rt_io.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  int pass, fail;
  char dir[64];
} T;

#if defined(__GNUC__)
#define T_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define T_PRINTF(a, b)
#endif

static int check(T *t, int ok, const char *fmt, ...) T_PRINTF(3, 4);
static int check(T *t, int ok, const char *fmt, ...) {
  va_list ap;
  printf("%s: ", ok ? "PASS" : "FAIL");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  if (ok) t->pass++;
  else t->fail++;
  return ok;
}

static void tpath(const T *t, const char *name, char *buf, size_t n) { snprintf(buf, n, "%s/%s", t->dir, name); }

static int write_bytes(const char *path, const void *b, size_t n) {
  FILE *fp = fopen(path, "wb");
  if (!fp) return -1;
  size_t w = n ? fwrite(b, 1, n, fp) : 0;
  int rc = fclose(fp);
  return (w == n && rc == 0) ? 0 : -1;
}

static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  *n = 0;
  if (!fp) return NULL;
  size_t cap = 4096, len = 0;
  unsigned char *b = malloc(cap);
  for (;;) {
    if (len == cap) b = realloc(b, cap *= 2);
    size_t r = fread(b + len, 1, cap - len, fp);
    if (r == 0) break;
    len += r;
  }
  fclose(fp);
  *n = len;
  return b;
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Builds a safetensors image: 8-byte length (hlen_field, or the real length if
 * hlen_field == UINT64_MAX), header bytes, data bytes. */
static unsigned char *st_image(const char *hdr, size_t hlen, uint64_t hlen_field, const void *data, size_t dlen,
                               size_t *n) {
  if (hlen_field == UINT64_MAX) hlen_field = hlen;
  *n = 8 + hlen + dlen;
  unsigned char *b = malloc(*n + 1);
  for (int k = 0; k < 8; k++) b[k] = (unsigned char)(hlen_field >> (8 * k));
  memcpy(b + 8, hdr, hlen);
  if (dlen) memcpy(b + 8 + hlen, data, dlen);
  return b;
}

static uint32_t fbits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static float bitsf(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* ------------------------------------------------------------------ */

static void test_roundtrip(T *t) {
  char p[256], tmp[300], err[512] = "";
  tpath(t, "rt.safetensors", p, sizeof p);
  float scal[1] = {3.5f};
  float vec[5] = {1, -2, 0.25f, 1e30f, -1e-30f};
  float mat[6] = {0, 1, 2, 3, 4, 5};
  float t3[24];
  for (int i = 0; i < 24; i++) t3[i] = (float)i * 0.5f - 3.0f;
  t3[3] = NAN;
  t3[4] = -0.0f;
  t3[5] = INFINITY;
  t3[6] = -INFINITY;
  t3[7] = bitsf(0x00000001); /* smallest subnormal */
  t3[8] = 3.4028235e38f;
  float ones[1] = {7};
  const char *names[] = {"scalar",
                         "vec",
                         "mat.weight",
                         "t3",
                         ("quote\"back\\slash\nnl\x01"
                          "ctl/\t"),
                         "utf8 \xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80",
                         "empty0",
                         "empty_mid",
                         "ones"};
  int ndims[] = {0, 1, 2, 3, 2, 1, 1, 3, 4};
  int64_t s_vec[] = {5}, s_mat[] = {2, 3}, s_t3[] = {2, 3, 4}, s_q[] = {3, 2}, s_u[] = {1}, s_e0[] = {0},
          s_em[] = {3, 0, 2}, s_on[] = {1, 1, 1, 1};
  const int64_t *shapes[] = {NULL, s_vec, s_mat, s_t3, s_q, s_u, s_e0, s_em, s_on};
  const float *data[] = {scal, vec, mat, t3, mat, scal, NULL, NULL, ones};
  int64_t numel[] = {1, 5, 6, 24, 6, 1, 0, 0, 1};
  int n = 9;

  int rc = rt_st_write(p, n, names, ndims, shapes, data, err, sizeof err);
  if (!check(t, rc == 0, "roundtrip: write 9 tensors (scalar, zero-size, escaped names) [%s]", rc ? err : "ok")) return;
  snprintf(tmp, sizeof tmp, "%s.tmp", p);
  check(t, !exists(tmp), "roundtrip: no .tmp file left after write");

  size_t fl;
  unsigned char *raw = read_bytes(p, &fl);
  uint64_t hl = 0;
  for (int k = 7; k >= 0; k--) hl = (hl << 8) | raw[k];
  int padok = hl % 8 == 0 && fl >= 8 + hl && raw[8] == '{' && (raw[8 + hl - 1] == '}' || raw[8 + hl - 1] == ' ');
  size_t expect_data = 0;
  for (int i = 0; i < n; i++) expect_data += (size_t)numel[i] * 4;
  check(t, padok && fl == 8 + hl + expect_data, "roundtrip: header length %llu is a multiple of 8, file size %zu",
        (unsigned long long)hl, fl);
  /* what transformers' loaders expect, then the checksums */
  static const char meta[] = "{\"__metadata__\":{\"format\":\"pt\",\"checksum:";
  check(t, fl > 8 + sizeof meta && !memcmp(raw + 8, meta, sizeof meta - 1),
        "roundtrip: the header starts with __metadata__ {\"format\": \"pt\", \"checksum:...}");
  free(raw);

  RtStFile *f = NULL;
  rc = rt_st_open(p, &f, err, sizeof err);
  if (!check(t, rc == 0 && f, "roundtrip: reopen [%s]", rc ? err : "ok")) return;
  check(t, rt_st_count(f) == n, "roundtrip: count %d == %d", rt_st_count(f), n);
  int meta_ok = 1, data_ok = 1;
  for (int i = 0; i < n && i < rt_st_count(f); i++) {
    const char *nm = rt_st_name(f, i);
    if (!nm || strcmp(nm, names[i]) || rt_st_find(f, names[i]) != i) meta_ok = 0;
    if (rt_st_ndim(f, i) != ndims[i] || rt_st_numel(f, i) != numel[i]) meta_ok = 0;
    if (!rt_st_dtype(f, i) || strcmp(rt_st_dtype(f, i), "F32") || rt_st_dtype_id(f, i) != RT_ST_F32) meta_ok = 0;
    int64_t dims[RT_ST_MAX_NDIM];
    if (rt_st_shape(f, i, dims, RT_ST_MAX_NDIM) != ndims[i]) meta_ok = 0;
    for (int d = 0; d < ndims[i]; d++)
      if (dims[d] != shapes[i][d]) meta_ok = 0;
    float *buf = malloc(((size_t)numel[i] + 1) * sizeof *buf);
    if (rt_st_read_f32(f, i, numel[i] ? buf : NULL, (size_t)numel[i], err, sizeof err) != 0) data_ok = 0;
    else if (numel[i] && memcmp(buf, data[i], (size_t)numel[i] * 4) != 0) data_ok = 0;
    free(buf);
  }
  check(t, meta_ok, "roundtrip: names, order, find, ndim, shape, numel, dtype match");
  check(t, data_ok, "roundtrip: data bit-identical (nan, -0, inf, subnormal, max)");
  int64_t d1;
  check(t, rt_st_shape(f, 3, &d1, 1) == 3 && d1 == 2, "roundtrip: rt_st_shape with maxdims < ndim copies a prefix");
  check(t, rt_st_find(f, "nope") == -1 && rt_st_find(f, NULL) == -1 && rt_st_find(f, "") == -1,
        "roundtrip: rt_st_find of absent name is -1");
  check(t,
        rt_st_name(f, -1) == NULL && rt_st_name(f, n) == NULL && rt_st_ndim(f, 99) == -1 &&
            rt_st_shape(f, -5, NULL, 0) == -1 && rt_st_numel(f, n) == -1 && rt_st_dtype(f, n) == NULL,
        "roundtrip: accessors reject bad indices");
  float b6[6];
  err[0] = 0;
  rc = rt_st_read_f32(f, 2, b6, 5, err, sizeof err);
  check(t, rc != 0 && strstr(err, "mat.weight") && strstr(err, "5") && strstr(err, "6") && strstr(err, p),
        "roundtrip: read with wrong element count fails [%s]", err);
  rc = rt_st_read_f32(f, 2, NULL, 6, err, sizeof err);
  check(t, rc != 0 && strstr(err, "NULL"), "roundtrip: read into NULL fails [%s]", err);
  rc = rt_st_read_f32(f, 42, b6, 6, err, sizeof err);
  check(t, rc != 0 && strstr(err, "out of range"), "roundtrip: read of bad index fails [%s]", err);
  rt_st_close(f);

  /* zero tensors */
  rc = rt_st_write(p, 0, NULL, NULL, NULL, NULL, err, sizeof err);
  f = NULL;
  int rc2 = rc == 0 ? rt_st_open(p, &f, err, sizeof err) : -1;
  check(t, rc == 0 && rc2 == 0 && rt_st_count(f) == 0 && rt_st_find(f, "a") == -1,
        "roundtrip: file with zero tensors [%s]", rc || rc2 ? err : "ok");
  rt_st_close(f);
  unlink(p);
}

static void test_write_errors(T *t) {
  char p[256], tmp[300], err[512] = "";
  tpath(t, "werr.safetensors", p, sizeof p);
  snprintf(tmp, sizeof tmp, "%s.tmp", p);
  float x[4] = {1, 2, 3, 4};
  int64_t s2[] = {2}, s4[] = {4}, sneg[] = {-1}, sbig[] = {INT64_MAX / 2, 4};
  const float *dd[] = {x, x};

  /* a good file that must survive failed writes */
  {
    const char *nm[] = {"keep"};
    int nd[] = {1};
    const int64_t *sh[] = {s4};
    rt_st_write(p, 1, nm, nd, sh, dd, err, sizeof err);
  }
  struct {
    const char *label;
    int n;
    const char *names[2];
    int nd[2];
    const int64_t *sh[2];
    const float *data[2];
    const char *expect;
  } cases[] = {
      {"duplicate names", 2, {"a", "a"}, {1, 1}, {s2, s2}, {x, x}, "duplicate tensor name 'a'"},
      {"negative dim", 1, {"neg", 0}, {1, 0}, {sneg, 0}, {x, 0}, "negative dim"},
      {"NULL data", 1, {"nul", 0}, {1, 0}, {s2, 0}, {NULL, 0}, "NULL data"},
      {"NULL name", 1, {NULL, 0}, {1, 0}, {s2, 0}, {x, 0}, "NULL name"},
      {"NULL shape", 1, {"ns", 0}, {1, 0}, {NULL, 0}, {x, 0}, "NULL shape"},
      {"ndim 17", 1, {"big", 0}, {17, 0}, {s2, 0}, {x, 0}, "ndim 17"},
      {"ndim -1", 1, {"neg", 0}, {-1, 0}, {s2, 0}, {x, 0}, "ndim -1"},
      {"element overflow", 1, {"ov", 0}, {2, 0}, {sbig, 0}, {x, 0}, "overflow"},
      {"reserved name", 1, {"__metadata__", 0}, {1, 0}, {s2, 0}, {x, 0}, "reserved"},
      {"invalid UTF-8 name", 1, {"bad\xff", 0}, {1, 0}, {s2, 0}, {x, 0}, "UTF-8"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    err[0] = 0;
    int rc = rt_st_write(p, cases[c].n, cases[c].names, cases[c].nd, cases[c].sh, cases[c].data, err, sizeof err);
    check(t, rc != 0 && strstr(err, cases[c].expect) && strstr(err, p) && !exists(tmp), "write error: %s [%s]",
          cases[c].label, err);
  }
  int rc = rt_st_write(p, -1, NULL, NULL, NULL, NULL, err, sizeof err);
  check(t, rc != 0, "write error: n = -1 [%s]", err);
  rc = rt_st_write(p, 1, NULL, NULL, NULL, NULL, err, sizeof err);
  check(t, rc != 0, "write error: NULL arrays [%s]", err);
  rc = rt_st_write(NULL, 0, NULL, NULL, NULL, NULL, err, sizeof err);
  check(t, rc != 0, "write error: NULL path [%s]", err);
  {
    const char *nm[] = {"x"};
    int nd[] = {1};
    const int64_t *sh[] = {s2};
    rc = rt_st_write("/nonexistent_dir_rt_io_test/x.safetensors", 1, nm, nd, sh, dd, err, sizeof err);
    check(t, rc != 0 && strstr(err, "/nonexistent_dir_rt_io_test/x.safetensors") && strstr(err, "cannot create"),
          "write error: unwritable directory [%s]", err);
    rc = rt_st_write(p, 1, nm, nd, sh, dd, NULL, 0);
    rc = rt_st_write(p, 2, (const char *[]){"d", "d"}, (int[]){1, 1}, (const int64_t *[]){s2, s2}, dd, NULL, 0);
    check(t, rc != 0, "write error: err == NULL does not crash");
  }
  RtStFile *f = NULL;
  rc = rt_st_open(p, &f, err, sizeof err);
  check(t, rc == 0 && rt_st_count(f) == 1 && rt_st_find(f, "x") == 0,
        "write error: failed writes leave the previous file intact [%s]", rc ? err : "ok");
  rt_st_close(f);
  unlink(p);
}

/* Reference half -> float via ldexp (independent of the library's bit twiddling). */
static uint32_t ref_f16(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  if (e == 31) return (uint32_t)sign << 31 | 0x7F800000u | (uint32_t)m << 13;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  float f = (float)(sign ? -v : v);
  return fbits(f);
}

static void test_half(T *t) {
  char p[256], err[512] = "";
  tpath(t, "half.safetensors", p, sizeof p);
  uint16_t f16v[] = {0x0000, 0x8000, 0x3C00, 0xC000, 0x3555, 0x7BFF, 0x0400, 0x0001,
                     0x03FF, 0x8001, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE00};
  float f16e[] = {0.0f,         -0.0f,     1.0f,     -2.0f,     0x1.554p-2f, 65504.0f, 0x1p-14f, 0x1p-24f,
                  0x1.FF8p-15f, -0x1p-24f, INFINITY, -INFINITY, NAN,         NAN,      -NAN};
  uint32_t f16bits_nan[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x7FC00000, 0x7F802000, 0xFFC00000};
  uint16_t bfv[] = {0x3F80, 0xC000, 0x8000, 0x4049, 0x0001, 0x7F80, 0xFF80, 0x7FC0, 0x7F7F, 0x0000};
  float bfe[] = {1.0f, -2.0f, -0.0f, 3.140625f, 0x1p-133f, INFINITY, -INFINITY, NAN, 0x1.FEp127f, 0.0f};
  int nf = 15, nb = 10;
  unsigned char dat[64 + 4 + 8];
  size_t dl = 0;
  for (int i = 0; i < nf; i++) {
    dat[dl++] = (unsigned char)f16v[i];
    dat[dl++] = (unsigned char)(f16v[i] >> 8);
  }
  for (int i = 0; i < nb; i++) {
    dat[dl++] = (unsigned char)bfv[i];
    dat[dl++] = (unsigned char)(bfv[i] >> 8);
  }
  /* F32 at odd (unaligned) offset 50: value -1.5 */
  uint32_t u = fbits(-1.5f);
  for (int k = 0; k < 4; k++) dat[dl++] = (unsigned char)(u >> (8 * k));
  dat[dl++] = 0xAB; /* trailing byte after the last tensor (tolerated) */
  char hdr[1024];
  int hn = snprintf(
      hdr, sizeof hdr,
      " {\n\t\"__metadata__\" : {\"format\": \"pt\", \"note\": \"esc \\\" \\\\ \\u00e9 \\ud83d\\ude00\"},\n"
      "  \"h\\u00e9lf\\ud83d\\ude00\": {\"data_offsets\": [0, 30], \"extra\": [1, {\"x\": null}, true, -1.5e3],"
      " \"shape\": [15], \"dtype\": \"F16\"},\n"
      "  \"bf\" :{\"dtype\":\"BF16\",\"shape\":[2,5],\"data_offsets\":[30,50]},"
      "\"odd\\/f32\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[50,54]}\r\n}  ");
  size_t n;
  unsigned char *img = st_image(hdr, (size_t)hn, UINT64_MAX, dat, dl, &n);
  write_bytes(p, img, n);
  free(img);
  RtStFile *f = NULL;
  int rc = rt_st_open(p, &f, err, sizeof err);
  if (!check(t, rc == 0, "half: open hand-crafted F16/BF16/F32 file (metadata, escapes, unknown key, whitespace) [%s]",
             rc ? err : "ok"))
    return;
  int ih = rt_st_find(f, "h\xc3\xa9lf\xf0\x9f\x98\x80"), ib = rt_st_find(f, "bf"), io = rt_st_find(f, "odd/f32");
  check(t, rt_st_count(f) == 3 && ih == 0 && ib == 1 && io == 2,
        "half: \\u escapes and surrogate pair decoded in names");
  check(t,
        ih >= 0 && !strcmp(rt_st_dtype(f, ih), "F16") && ib >= 0 && !strcmp(rt_st_dtype(f, ib), "BF16") &&
            rt_st_ndim(f, ib) == 2,
        "half: dtypes and shapes");
  float out[16];
  int ok = ih >= 0 && rt_st_read_f32(f, ih, out, 15, err, sizeof err) == 0;
  for (int i = 0; ok && i < nf; i++) {
    if (isnan(f16e[i])) ok = isnan(out[i]) && fbits(out[i]) == f16bits_nan[i];
    else ok = fbits(out[i]) == fbits(f16e[i]);
    if (!ok) printf("  f16 0x%04x -> %a (bits %08x), expected %a\n", f16v[i], out[i], fbits(out[i]), f16e[i]);
  }
  check(t, ok, "half: F16 values (0, -0, 1, -2, 1/3, 65504, min normal, subnormals, inf, -inf, nan payloads)");
  ok = ib >= 0 && rt_st_read_f32(f, ib, out, 10, err, sizeof err) == 0;
  for (int i = 0; ok && i < nb; i++) {
    ok = isnan(bfe[i]) ? isnan(out[i]) && fbits(out[i]) == 0x7FC00000u : fbits(out[i]) == fbits(bfe[i]);
    if (!ok) printf("  bf16 0x%04x -> %a, expected %a\n", bfv[i], out[i], bfe[i]);
  }
  check(t, ok, "half: BF16 values (1, -2, -0, pi, subnormal, inf, -inf, nan, max)");
  ok = io >= 0 && rt_st_read_f32(f, io, out, 1, err, sizeof err) == 0 && out[0] == -1.5f;
  check(t, ok, "half: F32 scalar at an unaligned offset");
  rt_st_close(f);

  /* exhaustive: all 65536 F16 and BF16 bit patterns */
  size_t nall = 65536 * 2 * 2;
  unsigned char *all = malloc(nall);
  for (uint32_t h = 0; h < 65536; h++) {
    all[2 * h] = (unsigned char)h;
    all[2 * h + 1] = (unsigned char)(h >> 8);
    all[131072 + 2 * h] = (unsigned char)h;
    all[131072 + 2 * h + 1] = (unsigned char)(h >> 8);
  }
  hn = snprintf(hdr, sizeof hdr,
                "{\"f16\":{\"dtype\":\"F16\",\"shape\":[256,256],\"data_offsets\":[0,131072]},"
                "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[65536],\"data_offsets\":[131072,262144]}}");
  img = st_image(hdr, (size_t)hn, UINT64_MAX, all, nall, &n);
  write_bytes(p, img, n);
  free(img);
  free(all);
  float *vals = malloc(65536 * sizeof *vals);
  rc = rt_st_open(p, &f, err, sizeof err);
  int bad16 = -1, badbf = -1;
  if (rc == 0 && rt_st_read_f32(f, 0, vals, 65536, err, sizeof err) == 0) {
    bad16 = 0;
    for (uint32_t h = 0; h < 65536; h++)
      if (fbits(vals[h]) != ref_f16((uint16_t)h)) bad16++;
  }
  if (rc == 0 && rt_st_read_f32(f, 1, vals, 65536, err, sizeof err) == 0) {
    badbf = 0;
    for (uint32_t h = 0; h < 65536; h++)
      if (fbits(vals[h]) != h << 16) badbf++;
  }
  check(t, bad16 == 0, "half: all 65536 F16 bit patterns match ldexp reference (%d mismatches)", bad16);
  check(t, badbf == 0, "half: all 65536 BF16 bit patterns convert exactly (%d mismatches)", badbf);
  free(vals);
  rt_st_close(f);
  unlink(p);
}

static void test_slices(T *t) {
  char p[256], err[512] = "";
  tpath(t, "slice.safetensors", p, sizeof p);
  float a[4 * 5 * 6], m[8 * 12], sc[1] = {42};
  for (int i = 0; i < 120; i++) a[i] = (float)i;
  for (int i = 0; i < 96; i++) m[i] = (float)(i * 3 + 1);
  const char *names[] = {"a", "m", "s", "z"};
  int nd[] = {3, 2, 0, 2};
  int64_t sa[] = {4, 5, 6}, sm[] = {8, 12}, sz[] = {3, 0};
  const int64_t *sh[] = {sa, sm, NULL, sz};
  const float *dd[] = {a, m, sc, NULL};
  if (!check(t, rt_st_write(p, 4, names, nd, sh, dd, err, sizeof err) == 0, "slice: write [%s]", err)) return;
  RtStFile *f = NULL;
  if (!check(t, rt_st_open(p, &f, err, sizeof err) == 0, "slice: open [%s]", err)) return;

  struct {
    int64_t st[3], ln[3];
  } sl[] = {
      {{0, 0, 0}, {4, 5, 6}}, {{1, 0, 2}, {2, 5, 2}}, {{3, 4, 5}, {1, 1, 1}},
      {{0, 2, 0}, {4, 1, 6}}, {{2, 1, 3}, {2, 3, 3}}, {{0, 0, 5}, {4, 5, 1}},
  };
  for (size_t c = 0; c < sizeof sl / sizeof sl[0]; c++) {
    int64_t *s0 = sl[c].st, *l0 = sl[c].ln;
    size_t cnt = (size_t)(l0[0] * l0[1] * l0[2]);
    float got[120];
    int rc = rt_st_read_f32_slice(f, 0, s0, l0, got, cnt, err, sizeof err);
    int ok = rc == 0;
    size_t k = 0;
    for (int64_t i = 0; ok && i < l0[0]; i++)
      for (int64_t j = 0; ok && j < l0[1]; j++)
        for (int64_t q = 0; ok && q < l0[2]; q++, k++)
          ok = got[k] == a[((s0[0] + i) * 5 + (s0[1] + j)) * 6 + (s0[2] + q)];
    check(t, ok, "slice: a[%lld:+%lld, %lld:+%lld, %lld:+%lld] matches direct indexing [%s]", (long long)s0[0],
          (long long)l0[0], (long long)s0[1], (long long)l0[1], (long long)s0[2], (long long)l0[2], rc ? err : "ok");
  }
  /* tensor-parallel shards: column split of m [8,12] into 4, then row split into 2 */
  float cat[96];
  int ok = 1;
  for (int r = 0; r < 4; r++) {
    float sh3[24];
    int64_t st2[] = {0, 3 * r}, ln2[] = {8, 3};
    if (rt_st_read_f32_slice(f, 1, st2, ln2, sh3, 24, err, sizeof err)) ok = 0;
    for (int i = 0; i < 8; i++)
      for (int j = 0; j < 3; j++) cat[i * 12 + 3 * r + j] = sh3[i * 3 + j];
  }
  check(t, ok && memcmp(cat, m, sizeof m) == 0, "slice: 4 column shards of [8,12] reassemble the tensor");
  ok = 1;
  for (int r = 0; r < 2; r++) {
    float sh3[48];
    int64_t st2[] = {4 * r, 0}, ln2[] = {4, 12};
    if (rt_st_read_f32_slice(f, 1, st2, ln2, sh3, 48, err, sizeof err) || memcmp(sh3, m + 48 * r, sizeof sh3)) ok = 0;
  }
  check(t, ok, "slice: 2 row shards of [8,12] are contiguous halves");
  float g = 0;
  check(t, rt_st_read_f32_slice(f, 2, NULL, NULL, &g, 1, err, sizeof err) == 0 && g == 42, "slice: scalar slice");
  int64_t z0[] = {1, 0}, zl[] = {0, 6};
  check(t, rt_st_read_f32_slice(f, 1, z0, zl, NULL, 0, err, sizeof err) == 0, "slice: empty slice with n == 0");
  int64_t zs[] = {0, 0}, zzl[] = {3, 0};
  check(t, rt_st_read_f32_slice(f, 3, zs, zzl, NULL, 0, err, sizeof err) == 0, "slice: full slice of zero-size tensor");

  struct {
    int64_t st[3], ln[3];
    size_t n;
    const char *expect, *label;
  } bad[] = {
      {{0, 0, 0}, {5, 1, 1}, 5, "out of range", "len past end"},
      {{4, 0, 0}, {1, 1, 1}, 1, "out of range", "start at end with len 1"},
      {{-1, 0, 0}, {1, 1, 1}, 1, "out of range", "negative start"},
      {{0, 0, 0}, {1, -1, 1}, 1, "out of range", "negative len"},
      {{0, 0, 0}, {2, 2, 2}, 7, "slice has 8", "n mismatch"},
      {{0, 0, INT64_MAX}, {1, 1, INT64_MAX}, 1, "out of range", "huge start/len"},
      {{0, 0, 3}, {1, 1, INT64_MAX}, 1, "out of range", "start + len overflow"},
  };
  for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
    float buf[8];
    err[0] = 0;
    int rc = rt_st_read_f32_slice(f, 0, bad[c].st, bad[c].ln, buf, bad[c].n, err, sizeof err);
    check(t, rc != 0 && strstr(err, bad[c].expect) && strstr(err, "'a'") && strstr(err, p), "slice error: %s [%s]",
          bad[c].label, err);
  }
  float buf[4];
  check(t, rt_st_read_f32_slice(f, 0, NULL, NULL, buf, 1, err, sizeof err) != 0 && strstr(err, "NULL"),
        "slice error: NULL start/len [%s]", err);
  check(t, rt_st_read_f32_slice(f, 9, NULL, NULL, buf, 1, err, sizeof err) != 0 && strstr(err, "out of range"),
        "slice error: bad index [%s]", err);
  check(t, rt_st_read_f32_slice(NULL, 0, NULL, NULL, buf, 1, err, sizeof err) != 0, "slice error: NULL file [%s]", err);
  rt_st_close(f);

  /* slicing F16 / BF16 */
  unsigned char dat[24];
  for (int i = 0; i < 6; i++) { /* F16 i+1, BF16 -(i+1) */
    float v = (float)(i + 1);
    int e = 0;
    frexp(v, &e); /* v = m*2^e, 0.5<=m<1 */
    uint16_t h = (uint16_t)(((e - 1 + 15) << 10) | (uint16_t)((ldexp(v, -(e - 1)) - 1.0) * 1024));
    dat[2 * i] = (unsigned char)h;
    dat[2 * i + 1] = (unsigned char)(h >> 8);
    uint32_t b = fbits(-v) >> 16;
    dat[12 + 2 * i] = (unsigned char)b;
    dat[12 + 2 * i + 1] = (unsigned char)(b >> 8);
  }
  const char *hdr = "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[3,2],\"data_offsets\":[12,24]}}";
  size_t n;
  unsigned char *img = st_image(hdr, strlen(hdr), UINT64_MAX, dat, 24, &n);
  write_bytes(p, img, n);
  free(img);
  ok = rt_st_open(p, &f, err, sizeof err) == 0;
  float o[4] = {0};
  int64_t hs[] = {0, 1}, hl[] = {2, 2}, bs[] = {1, 1}, bl[] = {2, 1};
  ok = ok && rt_st_read_f32_slice(f, 0, hs, hl, o, 4, err, sizeof err) == 0 && o[0] == 2 && o[1] == 3 && o[2] == 5 &&
       o[3] == 6;
  ok = ok && rt_st_read_f32_slice(f, 1, bs, bl, o, 2, err, sizeof err) == 0 && o[0] == -4 && o[1] == -6;
  check(t, ok, "slice: F16 and BF16 slices [%s]", ok ? "ok" : err);
  rt_st_close(f);
  unlink(p);
}

/* Writes img to path and expects rt_st_open to fail with a message naming the
 * file and containing each non-NULL expected substring. */
static void expect_bad(T *t, const char *label, const void *img, size_t n, const char *e1, const char *e2) {
  char p[256], err[512] = "";
  tpath(t, "bad.safetensors", p, sizeof p);
  write_bytes(p, img, n);
  RtStFile *f = (RtStFile *)&f; /* must be overwritten with NULL */
  err[0] = 0;
  int rc = rt_st_open(p, &f, err, sizeof err);
  int ok = rc != 0 && f == NULL && strstr(err, p) && (!e1 || strstr(err, e1)) && (!e2 || strstr(err, e2));
  check(t, ok, "bad file: %s [%s]", label, err);
  if (rc == 0) rt_st_close(f);
  unlink(p);
}

static void expect_bad_hdr(T *t, const char *label, const char *hdr, size_t dlen, const char *e1, const char *e2) {
  unsigned char data[64] = {0};
  size_t n;
  unsigned char *img = st_image(hdr, strlen(hdr), UINT64_MAX, data, dlen, &n);
  expect_bad(t, label, img, n, e1, e2);
  free(img);
}

static void test_bad_files(T *t) {
  char p[256], err[512] = "";
  size_t n;
  unsigned char small[8] = {8, 0, 0, 0, 0, 0, 0, 0};
  expect_bad(t, "empty file", small, 0, "too small", NULL);
  expect_bad(t, "7-byte file (truncated header length)", small, 7, "too small", "7 bytes");
  const char *okh = "{}";
  unsigned char *img = st_image(okh, 2, UINT64_MAX - 5, NULL, 0, &n);
  expect_bad(t, "header length 2^64-6", img, n, "18446744073709551610", "limit");
  free(img);
  img = st_image(okh, 2, 100000001, NULL, 0, &n);
  expect_bad(t, "header length just over 100 MB", img, n, "100000001", "limit");
  free(img);
  img = st_image(okh, 2, 1000, NULL, 0, &n);
  expect_bad(t, "header length beyond end of file", img, n, "header length 1000", "2 bytes");
  free(img);
  img = st_image(okh, 2, 0, NULL, 0, &n);
  expect_bad(t, "header length 0 (empty JSON)", img, n, "empty", NULL);
  free(img);

  const char *V = "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]";
  char h[4096];
  struct {
    const char *label, *hdr, *e1, *e2;
    size_t dlen;
  } cases[] = {
      {"whitespace-only header", "        ", "empty", NULL, 0},
      {"trailing comma in object", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}",
       "string or '}' expected", NULL, 4},
      {"trailing comma in array", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}", "'a'",
       "unexpected token near ']'", 4},
      {"missing colon", "{\"a\" {}}", "':' expected", NULL, 0},
      {"unterminated string", "{\"a\":{\"dtype\":\"F32", "'a'", "premature end of input", 0},
      {"unterminated object", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}",
       "'}' expected near end of file", NULL, 4},
      {"bad escape", "{\"a\\x\":{}}", "invalid escape", NULL, 0},
      {"short \\u escape", "{\"a\\u00\":{}}", "invalid escape", NULL, 0},
      {"non-hex \\u escape", "{\"a\\u00g0\":{}}", "invalid escape", NULL, 0},
      {"lone high surrogate", "{\"\\ud800\":{}}", "invalid Unicode '\\uD800'", NULL, 0},
      {"lone low surrogate", "{\"\\udc00x\":{}}", "invalid Unicode '\\uDC00'", NULL, 0},
      {"high surrogate + non-low", "{\"\\ud800\\u0041\":{}}", "invalid Unicode '\\uD800\\u0041'", NULL, 0},
      {"\\u0000 in name", "{\"a\\u0000b\":{}}", "NUL", NULL, 0},
      {"raw control char in string", "{\"a\tb\":{}}", "control character", NULL, 0},
      {"invalid UTF-8 byte", "{\"a\xff\":{}}", "UTF-8", NULL, 0},
      {"overlong UTF-8", "{\"\xc0\xaf\":{}}", "UTF-8", NULL, 0},
      {"UTF-8 surrogate", "{\"\xed\xa0\x80\":{}}", "UTF-8", NULL, 0},
      {"truncated UTF-8", "{\"\xe2\x98\":{}}", "UTF-8", NULL, 0},
      {"leading zero", "{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", "'a'",
       "invalid token near '0'", 4},
      {"number '1.'", "{\"a\":{\"x\":1.}}", "'a'", "invalid token near '1.'", 0},
      {"number '-'", "{\"a\":{\"x\":-}}", "'a'", "invalid token near '-'", 0},
      {"number '1e'", "{\"a\":{\"x\":1e}}", "'a'", "invalid token near '1e'", 0},
      {"number '.5'", "{\"a\":{\"x\":.5}}", "'a'", "invalid token near '.'", 0},
      {"bad literal", "{\"a\":{\"x\":tru}}", "'a'", "invalid token near 'tru'", 0},
      {"single quotes", "{'a':{}}", "string or '}' expected", NULL, 0},
      {"garbage after object", "{} x", "unexpected data after", NULL, 0},
      {"second object", "{}{}", "unexpected data after", NULL, 0},
      {"non-object: array", "[]", "not a JSON object", NULL, 0},
      {"non-object: string", "\"abc\"", "not a JSON object", NULL, 0},
      {"non-object: number", "123", "not a JSON object", NULL, 0},
      {"non-object: null", "null", "not a JSON object", NULL, 0},
      {"tensor entry not an object", "{\"w\":[1,2]}", "'w'", "expected an object", 0},
      {"tensor entry is a string", "{\"w\":\"F32\"}", "'w'", "expected an object", 0},
      {"unknown dtype I64", "{\"pos_ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", "'pos_ids'",
       "\"I64\"", 8},
      {"unknown dtype F8_E4M3", "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}",
       "unsupported dtype", "F64)", 1},
      {"lowercase dtype", "{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "unsupported dtype",
       "f32", 4},
      {"dtype not a string", "{\"w\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", "'w'", "must be a string",
       4},
      {"missing dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "'w'", "missing \"dtype\"", 4},
      {"missing shape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "'w'", "missing \"shape\"", 4},
      {"missing data_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", "'w'", "missing \"data_offsets\"", 4},
      {"empty tensor entry", "{\"w\":{}}", "'w'", "missing", 0},
      {"duplicate key in entry", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,4]}}",
       "'w'", "duplicate key \"shape\"", 4},
      {"shape not an array", "{\"w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", "'w'",
       "must be an array", 16},
      {"negative shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "'w'", "non-negative", 4},
      {"fractional shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", "'w'", "non-negative",
       8},
      {"exponent shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1e30],\"data_offsets\":[0,4]}}", "'w'", "non-negative",
       4},
      {"shape beyond uint64", "{\"w\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}",
       "'w'", "too big integer", 4},
      {"shape beyond int64", "{\"w\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,4]}}",
       "'w'", "too big integer", 4},
      {"string in shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", "'w'", "non-negative",
       8},
      {"17 dims", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
       "'w'", "more than 16", 4},
      {"shape product overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
       "'w'", "overflow", 4},
      /* a zero dim after dims whose product overflows: refused, not 0 elements (found by fuzzing:
       * tests/fuzz/crashes/safetensors-zero-dim-after-overflowing-dims.safetensors) */
      {"zero dim after an overflowing product",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}}", "'w'", "overflow", 0},
      {"byte size overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,4]}}",
       "'w'", "byte size overflows", 4},
      {"3 data_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", "'w'", "more than 2", 8},
      {"1 data_offset", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", "'w'", "must have 2 entries",
       4},
      {"negative data_offset", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", "'w'",
       "non-negative", 4},
      {"end < begin", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", "'w'", "end < begin", 8},
      {"size/shape mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", "span 12 bytes",
       "needs 16", 16},
      {"F16 size mismatch", "{\"w\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,12]}}", "shape [3] of F16",
       "needs 6", 12},
      {"offsets beyond data", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       "truncated: header says 8 bytes of data, file has 4", "'w'", 4},
      {"offsets far out of range", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1000000,1000004]}}",
       "header says 1000004 bytes", "file has 0", 0},
      {"scalar with zero bytes", "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}}", "'s'", "needs 4",
       0},
      {"duplicate tensor names",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_"
       "offsets\":[0,4]},\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
       "duplicate tensor name 'a'", NULL, 4},
      {"duplicate via escape",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"\\u0061\":{\"dtype\":\"F32\",\"shape\":[1],"
       "\"data_offsets\":[0,4]}}",
       "duplicate tensor name 'a'", NULL, 4},
      {"__metadata__ not an object", "{\"__metadata__\":[]}", "__metadata__", "object", 0},
      {"__metadata__ non-string value", "{\"__metadata__\":{\"k\":1}}", "__metadata__", "'k' must be a string", 0},
      {"__metadata__ nested object", "{\"__metadata__\":{\"k\":{}}}", "__metadata__", "must be a string", 0},
      {"duplicate __metadata__", "{\"__metadata__\":{},\"__metadata__\":{}}", "duplicate \"__metadata__\"", NULL, 0},
      {"duplicate key in __metadata__", "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}",
       "\"__metadata__\": duplicate key \"k\"", NULL, 0},
      {"duplicate key in an ignored value",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":{\"q\":1,\"q\":2}}}", "'w'",
       "duplicate key \"q\"", 4},
      {"number out of range in an ignored value",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1e400}}", "'w'", "real number overflow",
       4},
      {"overlapping tensors",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_"
       "offsets\":[4,12]}}",
       "tensors 'a' (data_offsets [0, 8]) and 'b' (data_offsets [4, 12]) overlap", NULL, 12},
      {"two tensors on the same bytes",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_"
       "offsets\":[0,4]}}",
       "tensors 'a' (data_offsets [0, 4]) and 'b' (data_offsets [0, 4]) overlap", NULL, 4},
      {"overlap listed out of order",
       "{\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_"
       "offsets\":[0,16]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}",
       "tensors 'c' (data_offsets [8, 12]) and 'a' (data_offsets [0, 16]) overlap", NULL, 20},
      {"a tensor inside a long one, not its neighbour",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_"
       "offsets\":[4,8]},\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[24,28]}}",
       "overlap", "'a' (data_offsets [0, 32])", 32},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    expect_bad_hdr(t, cases[c].label, cases[c].hdr, cases[c].dlen, cases[c].e1, cases[c].e2);

  /* deep nesting inside an ignored key: bounded recursion */
  {
    int depth = 100000;
    char *deep = malloc((size_t)depth * 2 + 100);
    size_t l = (size_t)sprintf(deep, "{\"w\":{%s,\"x\":", V);
    for (int i = 0; i < depth; i++) deep[l++] = '[';
    for (int i = 0; i < depth; i++) deep[l++] = ']';
    strcpy(deep + l, "}}");
    expect_bad_hdr(t, "100000-deep nested arrays", deep, 4, "nesting deeper than", NULL);
    free(deep);
    snprintf(h, sizeof h, "{\"w\":{%s,\"x\":[[[[[[[[[[{\"y\":[[[[]]]]}]]]]]]]]]]}}", V);
    unsigned char d4[4] = {0};
    img = st_image(h, strlen(h), UINT64_MAX, d4, 4, &n);
    tpath(t, "nest.safetensors", p, sizeof p);
    write_bytes(p, img, n);
    free(img);
    RtStFile *f = NULL;
    int rc = rt_st_open(p, &f, err, sizeof err);
    check(t, rc == 0 && rt_st_count(f) == 1, "bad file control: moderate nesting in an ignored key is accepted [%s]",
          rc ? err : "ok");
    rt_st_close(f);
    unlink(p);
  }
  /* what the overlap check lets through: any header order, holes, empty tensors anywhere */
  {
    const char *hdr = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                      "\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[2,2]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    float d3[3] = {1.5f, -7.0f, 2.25f}; /* a, a hole, b */
    img = st_image(hdr, strlen(hdr), UINT64_MAX, d3, sizeof d3, &n);
    tpath(t, "order.safetensors", p, sizeof p);
    write_bytes(p, img, n);
    free(img);
    RtStFile *f = NULL;
    float a = 0, b = 0;
    int rc = rt_st_open(p, &f, err, sizeof err);
    int ok = rc == 0 && rt_st_read_f32(f, rt_st_find(f, "a"), &a, 1, err, sizeof err) == 0 &&
             rt_st_read_f32(f, rt_st_find(f, "b"), &b, 1, err, sizeof err) == 0 && a == 1.5f && b == 2.25f;
    check(t, ok, "tensors listed out of order, with a hole and an empty tensor inside another's bytes, open [%s]",
          rc ? err : "ok");
    rt_st_close(f);
    unlink(p);
  }
  /* embedded NUL byte in the header (outside strings) */
  {
    const char raw[] = "{\"a\":{\0}}";
    img = st_image(raw, sizeof raw - 1, UINT64_MAX, NULL, 0, &n);
    expect_bad(t, "NUL byte in header", img, n, "'a'", "NUL byte");
    free(img);
  }
  /* the padding after the object: JSON whitespace, nothing else */
  {
    const char raw[] = "{}  \0 ";
    img = st_image(raw, sizeof raw - 1, UINT64_MAX, NULL, 0, &n);
    expect_bad(t, "NUL byte in the padding", img, n, "unexpected data after", NULL);
    free(img);
    snprintf(h, sizeof h, "{\"w\":{%s}} \t\r\n  ", V);
    unsigned char d4[4] = {0};
    img = st_image(h, strlen(h), UINT64_MAX, d4, 4, &n);
    tpath(t, "pad.safetensors", p, sizeof p);
    write_bytes(p, img, n);
    free(img);
    RtStFile *f = NULL;
    int rc = rt_st_open(p, &f, err, sizeof err);
    check(t, rc == 0 && rt_st_count(f) == 1, "bad file control: whitespace padding after the header object [%s]",
          rc ? err : "ok");
    rt_st_close(f);
    unlink(p);
  }
  /* truncated data / truncated header from a valid written file */
  {
    tpath(t, "good.safetensors", p, sizeof p);
    float x[6] = {1, 2, 3, 4, 5, 6};
    const char *nm[] = {"w"};
    int nd[] = {2};
    int64_t s[] = {2, 3};
    const int64_t *sh[] = {s};
    const float *dd[] = {x};
    rt_st_write(p, 1, nm, nd, sh, dd, err, sizeof err);
    unsigned char *good = read_bytes(p, &n);
    unlink(p);
    expect_bad(t, "truncated data (1 byte short)", good, n - 1, "truncated: header says 24 bytes of data, file has 23",
               "'w'");
    expect_bad(t, "truncated data (all data missing)", good, n - 24, "header says 24 bytes", "file has 0");
    expect_bad(t, "truncated inside the header", good, n - 30, "truncated", "header length");
    free(good);
  }
  /* non-files */
  {
    RtStFile *f = NULL;
    int rc = rt_st_open(t->dir, &f, err, sizeof err);
    check(t, rc != 0 && !f && strstr(err, "not a regular file"), "bad file: directory [%s]", err);
    tpath(t, "does-not-exist", p, sizeof p);
    rc = rt_st_open(p, &f, err, sizeof err);
    check(t, rc != 0 && !f && strstr(err, "cannot open") && strstr(err, p), "bad file: missing file [%s]", err);
    rc = rt_st_open(NULL, &f, err, sizeof err);
    check(t, rc != 0 && !f, "bad file: NULL path [%s]", err);
    rc = rt_st_open(p, NULL, err, sizeof err);
    check(t, rc != 0, "bad file: NULL out [%s]", err);
    rc = rt_st_open(p, &f, NULL, 0);
    check(t, rc != 0 && !f, "bad file: err == NULL does not crash");
    char tiny[10];
    memset(tiny, 'x', sizeof tiny);
    rc = rt_st_open(p, &f, tiny, sizeof tiny);
    check(t, rc != 0 && strlen(tiny) == sizeof tiny - 1, "bad file: message truncated to errlen");
    check(t,
          rt_st_count(NULL) == 0 && rt_st_name(NULL, 0) == NULL && rt_st_find(NULL, "a") == -1 &&
              rt_st_ndim(NULL, 0) == -1 && rt_st_shape(NULL, 0, NULL, 0) == -1 && rt_st_numel(NULL, 0) == -1 &&
              rt_st_dtype(NULL, 0) == NULL && rt_st_dtype_id(NULL, 0) == -1 &&
              rt_st_read_f32(NULL, 0, NULL, 0, err, sizeof err) != 0,
          "bad file: accessors on NULL file");
    rt_st_close(NULL);
  }
}

/* After a successful open of a mutated file: metadata must be self-consistent
 * and every tensor readable (ASan checks that reads stay in bounds). */
static int validate_open(RtStFile *f, size_t fsize) {
  int n = rt_st_count(f);
  if (n < 0) return 0;
  for (int i = 0; i < n; i++) {
    const char *nm = rt_st_name(f, i);
    if (!nm || rt_st_find(f, nm) != i) return 0;
    int nd = rt_st_ndim(f, i);
    int id = rt_st_dtype_id(f, i);
    if (nd < 0 || nd > RT_ST_MAX_NDIM || id < 0 || id > 2 || !rt_st_dtype(f, i)) return 0;
    int64_t dims[RT_ST_MAX_NDIM], prod = 1;
    if (rt_st_shape(f, i, dims, RT_ST_MAX_NDIM) != nd) return 0;
    for (int d = 0; d < nd; d++) {
      if (dims[d] < 0) return 0;
      prod = dims[d] == 0 ? 0 : prod * dims[d];
    }
    int64_t ne = rt_st_numel(f, i);
    int zero = 0;
    for (int d = 0; d < nd; d++) zero |= dims[d] == 0;
    if (ne < 0 || (!zero && ne != prod) || (zero && ne != 0)) return 0;
    if ((uint64_t)ne * (id == RT_ST_F32 ? 4u : 2u) > fsize) return 0;
    float *buf = malloc(((size_t)ne + 1) * sizeof *buf), *buf2 = malloc(((size_t)ne + 1) * sizeof *buf2);
    char err[256];
    int ok = rt_st_read_f32(f, i, buf, (size_t)ne, err, sizeof err) == 0;
    int64_t st[RT_ST_MAX_NDIM] = {0};
    ok = ok && rt_st_read_f32_slice(f, i, st, dims, buf2, (size_t)ne, err, sizeof err) == 0;
    ok = ok && (ne == 0 || memcmp(buf, buf2, (size_t)ne * 4) == 0);
    free(buf);
    free(buf2);
    if (!ok) return 0;
  }
  return 1;
}

typedef struct {
  int cases, failed_clean, opened_valid, bad;
} FuzzStats;

static void fuzz_one(T *t, const char *p, const unsigned char *img, size_t n, FuzzStats *fs) {
  char err[512] = "";
  write_bytes(p, img, n);
  RtStFile *f = (RtStFile *)&f;
  err[0] = 0;
  int rc = rt_st_open(p, &f, err, sizeof err);
  fs->cases++;
  if (rc != 0) {
    if (f == NULL && err[0] && strstr(err, p)) fs->failed_clean++;
    else fs->bad++;
  } else {
    if (f && validate_open(f, n)) fs->opened_valid++;
    else fs->bad++;
    rt_st_close(f);
  }
  (void)t;
}

static void test_fuzz(T *t) {
  char p[256];
  tpath(t, "fuzz.safetensors", p, sizeof p);
  const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"w\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                    "\"b\\u00e9\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]},"
                    "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[14,18]},"
                    "\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[18,18]}}";
  unsigned char data[18];
  for (int i = 0; i < 18; i++) data[i] = (unsigned char)(0x3C + i * 7);
  size_t n;
  unsigned char *img = st_image(hdr, strlen(hdr), UINT64_MAX, data, 18, &n);
  unsigned char *m = malloc(n);

  FuzzStats fs = {0};
  fuzz_one(t, p, img, n, &fs);
  check(t, fs.opened_valid == 1, "fuzz: base file (%zu bytes) opens", n);

  fs = (FuzzStats){0};
  for (size_t pos = 0; pos < n; pos++)
    for (int bit = 0; bit < 8; bit++) {
      memcpy(m, img, n);
      m[pos] ^= (unsigned char)(1u << bit);
      fuzz_one(t, p, m, n, &fs);
    }
  check(t, fs.bad == 0, "fuzz: %d single-bit flips: %d failed cleanly, %d opened valid, %d bad", fs.cases,
        fs.failed_clean, fs.opened_valid, fs.bad);

  fs = (FuzzStats){0};
  static const unsigned char interesting[] = {0,   ' ', '"', '\\', '{', '}', '[',  ']', ',',
                                              ':', '0', '9', '-',  'e', '.', 0x80, 0xFF};
  for (size_t pos = 0; pos < n; pos++)
    for (size_t k = 0; k < sizeof interesting; k++) {
      memcpy(m, img, n);
      m[pos] = interesting[k];
      fuzz_one(t, p, m, n, &fs);
    }
  check(t, fs.bad == 0, "fuzz: %d byte substitutions: %d failed cleanly, %d opened valid, %d bad", fs.cases,
        fs.failed_clean, fs.opened_valid, fs.bad);

  fs = (FuzzStats){0};
  for (size_t len = 0; len < n; len++) fuzz_one(t, p, img, len, &fs);
  check(t, fs.bad == 0 && fs.opened_valid == 0,
        "fuzz: %d truncations (every length < %zu): %d failed cleanly, %d opened, %d bad", fs.cases, n, fs.failed_clean,
        fs.opened_valid, fs.bad);

  fs = (FuzzStats){0};
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  for (int c = 0; c < 3000; c++) {
    memcpy(m, img, n);
    int edits = 1 + (int)((rng >> 33) % 4);
    for (int e = 0; e < edits; e++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      size_t pos = (size_t)(rng >> 33) % n;
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      m[pos] = (unsigned char)(rng >> 56);
    }
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    size_t len = (rng >> 60) == 0 ? (size_t)(rng >> 20) % (n + 1) : n;
    fuzz_one(t, p, m, len, &fs);
  }
  check(t, fs.bad == 0, "fuzz: %d random multi-byte mutations: %d failed cleanly, %d opened valid, %d bad", fs.cases,
        fs.failed_clean, fs.opened_valid, fs.bad);
  /* header-length field mutations */
  fs = (FuzzStats){0};
  for (int k = 0; k < 64; k++) {
    memcpy(m, img, n);
    uint64_t hl = strlen(hdr) ^ (1ull << k);
    for (int b = 0; b < 8; b++) m[b] = (unsigned char)(hl >> (8 * b));
    fuzz_one(t, p, m, n, &fs);
  }
  check(t, fs.bad == 0 && fs.opened_valid == 0, "fuzz: 64 header-length bit flips all fail cleanly (%d bad)", fs.bad);
  free(m);
  free(img);
  unlink(p);
}

/* ------------------------------------------------------------------ */
/* token data                                                          */

static unsigned char *llmc_image(int32_t magic, int32_t version, int32_t count, const uint16_t *tok, size_t ntok,
                                 size_t extra, size_t *n) {
  *n = 1024 + 2 * ntok + extra;
  unsigned char *b = calloc(*n + 1, 1);
  int32_t h[3] = {magic, version, count};
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)((uint32_t)h[i] >> (8 * k));
  for (size_t i = 0; i < ntok; i++) {
    b[1024 + 2 * i] = (unsigned char)tok[i];
    b[1024 + 2 * i + 1] = (unsigned char)(tok[i] >> 8);
  }
  for (size_t i = 0; i < extra; i++) b[1024 + 2 * ntok + i] = 0x5A;
  return b;
}

static void expect_data_bad(T *t, const char *label, const unsigned char *img, size_t n, const char *e1,
                            const char *e2) {
  char p[256], err[512] = "";
  tpath(t, "bad.bin", p, sizeof p);
  write_bytes(p, img, n);
  RtData *d = (RtData *)&d;
  err[0] = 0;
  int rc = rt_data_open(p, &d, err, sizeof err);
  check(t, rc != 0 && d == NULL && strstr(err, p) && (!e1 || strstr(err, e1)) && (!e2 || strstr(err, e2)),
        "data: %s [%s]", label, err);
  if (rc == 0) rt_data_close(d);
  unlink(p);
}

/* Like expect_data_bad, for a file of the given name. */
static void expect_data_named(T *t, const char *label, const char *name, const void *img, size_t n, const char *e1,
                              const char *e2) {
  char p[256], err[512] = "";
  tpath(t, name, p, sizeof p);
  write_bytes(p, img, n);
  RtData *d = (RtData *)&d;
  int rc = rt_data_open(p, &d, err, sizeof err);
  check(t, rc != 0 && d == NULL && strstr(err, p) && (!e1 || strstr(err, e1)) && (!e2 || strstr(err, e2)),
        "data: %s [%s]", label, err);
  if (rc == 0) rt_data_close(d);
  unlink(p);
}

/* Direct computation of the batch order (128-bit to also cover int64 overflow / negative steps). */
static int check_batch(const RtData *d, const int32_t *all, int64_t len, int64_t s, int m, int M, int B, int S) {
  size_t cnt = (size_t)B * (size_t)S;
  int32_t *tk = malloc((cnt + 1) * sizeof *tk), *lb = malloc((cnt + 1) * sizeof *lb);
  tk[cnt] = lb[cnt] = 0x7EADBEEF; /* canaries */
  rt_data_batch(d, s, m, M, B, S, tk, lb);
  int ok = tk[cnt] == 0x7EADBEEF && lb[cnt] == 0x7EADBEEF;
  for (int b = 0; ok && b < B; b++) {
    __int128 start = (((__int128)s * M + m) * B + b) * S;
    for (int i = 0; ok && i < S; i++) {
      __int128 x = (start + i) % len, y = (start + i + 1) % len;
      if (x < 0) x += len;
      if (y < 0) y += len;
      ok = tk[(size_t)b * S + i] == all[(int64_t)x] && lb[(size_t)b * S + i] == all[(int64_t)y];
    }
  }
  free(tk);
  free(lb);
  return ok;
}

static void test_data(T *t) {
  char p[256], err[512] = "";
  tpath(t, "tok.bin", p, sizeof p);
  enum { NT = 1000 };
  uint16_t tok[NT];
  int32_t all[NT];
  uint32_t r = 12345;
  int mx = 0;
  for (int i = 0; i < NT; i++) {
    r = r * 1103515245u + 12345u;
    tok[i] = (uint16_t)((r >> 8) % 50257);
    if (i == 500) tok[i] = 50256;
    all[i] = tok[i];
    if (tok[i] > mx) mx = tok[i];
  }
  size_t n;
  unsigned char *img = llmc_image(RT_DATA_LLMC_MAGIC, 1, NT, tok, NT, 0, &n);
  write_bytes(p, img, n);
  RtData *d = NULL;
  int rc = rt_data_open(p, &d, err, sizeof err);
  check(t, rc == 0 && rt_data_len(d) == NT && rt_data_max_token(d) == 50256,
        "data: llm.c file with %d tokens opens, len %lld, max token %d [%s]", NT, (long long)rt_data_len(d),
        rt_data_max_token(d), rc ? err : "ok");
  if (rc == 0) {
    struct {
      int M, B, S;
    } cfg[] = {{1, 4, 8}, {2, 3, 7}, {4, 2, 64}, {1, 1, 1}, {3, 5, 999}, {1, 2, 1500}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
      int ok = 1;
      for (int64_t s = 0; ok && s < 40; s++)
        for (int m = 0; ok && m < cfg[c].M; m++) ok = check_batch(d, all, NT, s, m, cfg[c].M, cfg[c].B, cfg[c].S);
      check(t, ok, "data: batch order M=%d B=%d S=%d, steps 0..39 (with wrap-around) match direct computation",
            cfg[c].M, cfg[c].B, cfg[c].S);
    }
    int ok = check_batch(d, all, NT, 123456789, 1, 2, 8, 256) &&
             check_batch(d, all, NT, INT64_MAX / 3, 3, 4, 16, 1024) &&
             check_batch(d, all, NT, INT64_MAX, 7, 8, 64, 2048) && check_batch(d, all, NT, -5, 0, 1, 2, 10) &&
             check_batch(d, all, NT, INT64_MIN, 1, 2, 3, 4);
    check(t, ok, "data: batch order for huge / int64-overflowing / negative steps is the exact mod-len position");
    /* spot check of the exact formula without wrap */
    int32_t tk[6], lb[6];
    rt_data_batch(d, 3, 1, 2, 2, 3, tk, lb); /* row b starts at ((3*2+1)*2+b)*3 = 42 + 3b */
    check(t, tk[0] == all[42] && tk[2] == all[44] && lb[2] == all[45] && tk[3] == all[45] && lb[5] == all[48],
          "data: step 3, micro-batch 1 of 2, B=2, S=3 reads rows at 42 and 45");
    int32_t g[2] = {-7, -7};
    rt_data_batch(d, 0, 0, 1, 1, 2, g, NULL);
    int32_t gl[2] = {-7, -7};
    rt_data_batch(d, 0, 0, 1, 1, 2, NULL, gl);
    check(t, g[0] == all[0] && g[1] == all[1] && gl[0] == all[1] && gl[1] == all[2],
          "data: NULL labels / tokens skipped");
    int32_t untouched[4] = {-1, -1, -1, -1};
    rt_data_batch(d, 0, 0, 1, 0, 4, untouched, untouched);
    rt_data_batch(d, 0, 0, 1, 1, 0, untouched, untouched);
    rt_data_batch(d, 0, 0, 1, -3, 4, untouched, untouched);
    rt_data_batch(NULL, 0, 0, 1, 1, 4, untouched, untouched);
    check(t, untouched[0] == -1 && untouched[3] == -1, "data: batch with B<=0, S<=0 or NULL data writes nothing");
  }
  rt_data_close(d);
  free(img);

  /* a loss mask after the tokens (header[3] = 1): masked tokens' labels become the ignore label,
   * counted by rt_data_count, kept by rt_data_slice */
  {
    enum { MT = 97 };
    uint16_t mt[MT];
    for (int i = 0; i < MT; i++) mt[i] = (uint16_t)(i * 7 % 50);
    size_t mn;
    unsigned char *mimg = llmc_image(RT_DATA_LLMC_MAGIC, 1, MT, mt, MT, MT, &mn);
    mimg[12] = 1;
    for (int i = 0; i < MT; i++) mimg[1024 + 2 * MT + i] = (unsigned char)(i % 3 != 0);
    write_bytes(p, mimg, mn);
    RtData *md = NULL, *ms = NULL;
    rc = rt_data_open(p, &md, err, sizeof err);
    check(t, rc == 0 && rt_data_has_mask(md) && rt_data_len(md) == MT, "data: a token file with a loss mask opens [%s]",
          rc ? err : "ok");
    if (rc == 0) {
      enum { B = 3, S = 5, M = 4 };
      int32_t tk[B * S], lb[B * S];
      int okb = 1;
      int64_t want = 0;
      rt_data_set_ignore(md, -7);
      for (int m = 0; m < M; m++) {
        rt_data_batch(md, 2, m, M, B, S, tk, lb);
        for (int b = 0; b < B; b++)
          for (int i = 0; i < S; i++) {
            int64_t pos = (((2 * M + m) * B + b) * S + i + 1) % MT;
            int32_t exp = pos % 3 != 0 ? mt[pos] : -7;
            okb = okb && lb[b * S + i] == exp && tk[b * S + i] == mt[(pos - 1 + MT) % MT];
            want += pos % 3 != 0;
          }
      }
      check(t, okb, "data: a masked token's label is the ignore label, the tokens stay");
      int64_t got = rt_data_count(md, 2, 0, M, M, B, S);
      check(t, got == want, "data: rt_data_count %lld labels counted, expected %lld", (long long)got, (long long)want);
      rc = rt_data_slice(md, 30, 40, "masked", &ms, err, sizeof err);
      int oks = rc == 0 && rt_data_has_mask(ms);
      if (oks) {
        rt_data_batch(ms, 0, 0, 1, 1, 5, tk, lb);
        for (int i = 0; i < 5; i++) oks = oks && lb[i] == ((31 + i) % 3 != 0 ? mt[31 + i] : -7);
      }
      check(t, oks, "data: a slice keeps its part of the mask and the ignore label [%s]", rc ? err : "ok");
    }
    rt_data_close(ms);
    rt_data_close(md);
    free(mimg);
  }

  /* one-token file, token 65535 */
  uint16_t one = 65535;
  img = llmc_image(RT_DATA_LLMC_MAGIC, 1, 1, &one, 1, 0, &n);
  write_bytes(p, img, n);
  free(img);
  rc = rt_data_open(p, &d, err, sizeof err);
  int ok = rc == 0 && rt_data_len(d) == 1 && rt_data_max_token(d) == 65535;
  if (ok) {
    int32_t tk[6], lb[6];
    rt_data_batch(d, 5, 0, 1, 2, 3, tk, lb);
    for (int i = 0; i < 6; i++) ok = ok && tk[i] == 65535 && lb[i] == 65535;
  }
  check(t, ok, "data: single-token llm.c file (token 65535) wraps every read [%s]", rc ? err : "ok");
  rt_data_close(d);

  /* bad llm.c files */
  img = llmc_image(RT_DATA_LLMC_MAGIC, 3, 10, tok, 10, 0, &n);
  expect_data_bad(t, "llm.c version 3", img, n, "unsupported version 3", "expected 1: uint16 tokens, or 2");
  free(img);
  img = llmc_image(RT_DATA_LLMC_MAGIC, 1, 10, tok, 9, 0, &n);
  expect_data_bad(t, "llm.c truncated (9 of 10 tokens)", img, n, "expected 1044 bytes", "file has 1042");
  free(img);
  img = llmc_image(RT_DATA_LLMC_MAGIC, 1, 10, tok, 10, 1, &n);
  expect_data_bad(t, "llm.c trailing byte", img, n, "trailing", "file has 1045");
  free(img);
  img = llmc_image(RT_DATA_LLMC_MAGIC, 1, 0, tok, 0, 0, &n);
  expect_data_bad(t, "llm.c zero token count", img, n, "token count 0", NULL);
  free(img);
  img = llmc_image(RT_DATA_LLMC_MAGIC, 1, -5, tok, 0, 0, &n);
  expect_data_bad(t, "llm.c negative token count", img, n, "token count -5", NULL);
  free(img);
  img = llmc_image(RT_DATA_LLMC_MAGIC, 1, 2147483647, tok, 10, 0, &n);
  expect_data_bad(t, "llm.c count 2^31-1 with 10 tokens", img, n, "expected 4294968318 bytes", "file has 1044");
  free(img);
  img = llmc_image(RT_DATA_LLMC_MAGIC, 1, 10, tok, 10, 0, &n);
  expect_data_bad(t, "llm.c header cut at 100 bytes", img, 100, "at least 1024", "file has 100");
  expect_data_bad(t, "empty file", img, 0, "empty", NULL);
  free(img);

  /* a file that claims to be llm.c (a .bin name, or a date-like first int32) but is not one is an
   * error naming the expected magic, never read as text */
  img = llmc_image(RT_DATA_LLMC_MAGIC + 1, 1, 10, tok, 10, 0, &n);
  expect_data_bad(t, "a .bin file with a wrong magic", img, n, "first int32 20240521", "magic 20240520");
  expect_data_named(t, "a date-like magic, not named .bin", "tok.dat", img, n,
                    "starts like an llm.c file (first int32 20240521)", "magic 20240520");
  free(img);
  img = llmc_image(20240326, 3, 10, tok, 10, 0, &n);
  expect_data_named(t, "an llm.c model checkpoint", "gpt2_124M.txt", img, n,
                    "an llm.c model checkpoint (magic 20240326)", "magic 20240520");
  free(img);
  img = llmc_image(20240328, 2, 10, tok, 10, 0, &n);
  expect_data_named(t, "an llm.c tokenizer", "gpt2_tokenizer.data", img, n, "an llm.c tokenizer (magic 20240328)",
                    "magic 20240520");
  free(img);
  img = llmc_image((int32_t)0x88D83401 /* 20240520 byte-swapped */, 1, 10, tok, 10, 0, &n);
  expect_data_named(t, "a big-endian llm.c token file", "be.tok", img, n, "20240520 big-endian", "little-endian");
  free(img);
  img = llmc_image(RT_DATA_LLMC_MAGIC, 1, 10, tok, 10, 0, &n);
  expect_data_bad(t, "a 3-byte .bin file", img, 3, "3 bytes, too short for an llm.c token file", "magic 20240520");
  expect_data_named(t, "a .BIN name (any case)", "TOK.BIN", "hello world\n", 12, "first int32 1819043176",
                    "magic 20240520");
  free(img);
  {
    char tp[256];
    tpath(t, "short.txt", tp, sizeof tp); /* 3 bytes of the magic, not named .bin: too short to claim llm.c */
    unsigned char m3[3] = {0x88, 0xD8, 0x34};
    write_bytes(tp, m3, 3);
    rc = rt_data_open(tp, &d, err, sizeof err);
    check(t, rc == 0 && rt_data_len(d) == 3, "data: 3-byte file not named .bin is text [%s]", rc ? err : "ok");
    rt_data_close(d);
    unlink(tp);
  }

  /* text */
  unlink(p);
  tpath(t, "tok.txt", p, sizeof p);
  const char *txt = "hello world\n";
  write_bytes(p, txt, strlen(txt));
  rc = rt_data_open(p, &d, err, sizeof err);
  ok = rc == 0 && rt_data_len(d) == 12 && rt_data_max_token(d) == 'w';
  if (ok) {
    int32_t tk[10], lb[10];
    rt_data_batch(d, 1, 1, 2, 2, 5, tk, lb); /* rows at 30 % 12 = 6 and 35 % 12 = 11 */
    const char *e0 = "world", *l0 = "orld\n", *e1 = "\nhell", *l1 = "hello";
    for (int i = 0; i < 5; i++) ok = ok && tk[i] == e0[i] && lb[i] == l0[i] && tk[5 + i] == e1[i] && lb[5 + i] == l1[i];
  }
  check(t, ok, "data: text file bytes are tokens, batch wraps around the end [%s]", rc ? err : "ok");
  rt_data_close(d);
  unsigned char hi[3] = {0x00, 0xFF, 0x80};
  write_bytes(p, hi, 3);
  rc = rt_data_open(p, &d, err, sizeof err);
  check(t, rc == 0 && rt_data_max_token(d) == 255, "data: text bytes >= 128 are tokens up to 255");
  rt_data_close(d);
  unlink(p);

  /* memory */
  const unsigned char emb[] = "abcab";
  rc = rt_data_from_memory(emb, 5, &d, err, sizeof err);
  ok = rc == 0 && rt_data_len(d) == 5 && rt_data_max_token(d) == 'c';
  if (ok) {
    int32_t tk[7], lb[7];
    rt_data_batch(d, 0, 0, 1, 1, 7, tk, lb);
    for (int i = 0; i < 7; i++) ok = ok && tk[i] == emb[i % 5] && lb[i] == emb[(i + 1) % 5];
  }
  check(t, ok, "data: from_memory, a row longer than the data wraps repeatedly [%s]", rc ? err : "ok");
  rt_data_close(d);
  unsigned char magic_mem[8] = {0x28, 0xD3, 0x34, 0x01, 1, 0, 0, 0};
  rc = rt_data_from_memory(magic_mem, 8, &d, err, sizeof err);
  check(t, rc == 0 && rt_data_len(d) == 8, "data: from_memory is always text (no llm.c detection)");
  rt_data_close(d);
  d = (RtData *)&d;
  rc = rt_data_from_memory(emb, 0, &d, err, sizeof err);
  check(t, rc != 0 && d == NULL && strstr(err, "empty"), "data: from_memory with 0 bytes fails [%s]", err);
  rc = rt_data_from_memory(NULL, 5, &d, err, sizeof err);
  check(t, rc != 0 && d == NULL, "data: from_memory with NULL bytes fails [%s]", err);

  /* misc */
  rc = rt_data_open(t->dir, &d, err, sizeof err);
  check(t, rc != 0 && d == NULL && strstr(err, "not a regular file"), "data: directory [%s]", err);
  tpath(t, "missing.bin", p, sizeof p);
  rc = rt_data_open(p, &d, err, sizeof err);
  check(t, rc != 0 && d == NULL && strstr(err, p), "data: missing file [%s]", err);
  rc = rt_data_open(NULL, &d, NULL, 0);
  check(t, rc != 0 && rt_data_len(NULL) == 0 && rt_data_max_token(NULL) == -1, "data: NULL arguments");
  rt_data_close(NULL);
}

/* ---- F64 tensors, checkpoints (index, folder), the folder writer, token files v1/v2 ---------- */

/* A safetensors file of raw tensors: names, dtypes, shapes (1-d: len), bytes. */
typedef struct {
  const char *name, *dtype;
  int64_t len;
  const void *bytes;
  size_t nbytes;
} RawT;

static int write_raw(const char *path, int n, const RawT *r) {
  char hdr[4096];
  size_t k = (size_t)snprintf(hdr, sizeof hdr, "{");
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    k += (size_t)snprintf(hdr + k, sizeof hdr - k,
                          "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],\"data_offsets\":[%llu,%llu]}", i ? "," : "",
                          r[i].name, r[i].dtype, (long long)r[i].len, (unsigned long long)off,
                          (unsigned long long)(off + r[i].nbytes));
    off += r[i].nbytes;
  }
  k += (size_t)snprintf(hdr + k, sizeof hdr - k, "}");
  unsigned char *data = malloc(off + 1);
  for (int i = 0, at = 0; i < n; at += (int)r[i].nbytes, i++) memcpy(data + at, r[i].bytes, r[i].nbytes);
  size_t len;
  unsigned char *img = st_image(hdr, k, UINT64_MAX, data, off, &len);
  int rc = write_bytes(path, img, len);
  free(img);
  free(data);
  return rc;
}

/* Checksums: written for every tensor, verified; a flipped byte of any tensor's data, or two
 * tensors' names swapped, fails naming the tensor; a header's checksums must cover every tensor
 * and only its tensors; a file without them (another program's) opens and verifies. */
static void test_checksums(T *t) {
  char p[256], err[512] = "";
  tpath(t, "sums.safetensors", p, sizeof p);
  float a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, c[1] = {7};
  const char *names[] = {"a", "b", "c"};
  int ndims[] = {1, 1, 1};
  int64_t s3[] = {3}, s1[] = {1};
  const int64_t *shapes[] = {s3, s3, s1};
  const float *data[] = {a, b, c};
  check(t, rt_st_write(p, 3, names, ndims, shapes, data, err, sizeof err) == 0, "sums: write [%s]", err);
  size_t fl;
  unsigned char *raw = read_bytes(p, &fl);
  RtStFile *f = NULL;
  int rc = rt_st_open(p, &f, err, sizeof err), ok = !rc && rt_st_has_checksums(f);
  for (int i = 0; ok && i < 3; i++) ok = rt_st_verify(f, i, err, sizeof err) == 0;
  check(t, ok, "sums: a written file has them and they verify [%s]", err);
  rt_st_close(f);
  for (size_t at = fl - 28; at < fl; at += 4) { /* one byte of each element of each tensor */
    raw[at] ^= 0x10;
    write_bytes(p, raw, fl);
    raw[at] ^= 0x10;
    const char *want = at >= fl - 4 ? "'c'" : at >= fl - 16 ? "'b'" : "'a'";
    rc = rt_st_open(p, &f, err, sizeof err);
    int bad = -1;
    for (int i = 0; !rc && i < 3 && bad < 0; i++)
      if (rt_st_verify(f, i, err, sizeof err)) bad = i;
    check(t, !rc && bad >= 0 && strstr(err, want) && strstr(err, "damaged") && strstr(err, p),
          "sums: a flipped byte at %zu fails naming tensor %s [%s]", at, want, err);
    rt_st_close(f);
  }
  /* a and b's names swapped in the header: each name's bytes are the other's */
  char *h = (char *)raw + 8;
  char *pa = strstr(h, "\"a\":{"), *pb = strstr(h, "\"b\":{");
  pa[1] = 'b', pb[1] = 'a';
  write_bytes(p, raw, fl);
  rc = rt_st_open(p, &f, err, sizeof err);
  int bad = rc ? 1 : rt_st_verify(f, 0, err, sizeof err);
  check(t, !rc && bad && strstr(err, "damaged"), "sums: two tensors' names swapped fail [%s]", err);
  rt_st_close(f);
  free(raw);
  unlink(p);
  float z[2] = {1, 2};
  unsigned char zb[8];
  memcpy(zb, z, sizeof zb);
  write_raw(p, 1, (RawT[]){{"w", "F32", 2, zb, sizeof zb}});
  rc = rt_st_open(p, &f, err, sizeof err);
  check(t, !rc && !rt_st_has_checksums(f) && rt_st_verify(f, 0, err, sizeof err) == 0,
        "sums: a file without checksums opens and verifies [%s]", err);
  rt_st_close(f);
  unlink(p);
  static const char sum[] = "\"xxh3-64:0123456789abcdef\"";
  char hdr[512];
  snprintf(hdr, sizeof hdr,
           "{\"__metadata__\":{\"checksum:x\":%s},\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
           "\"data_offsets\":[0,4]}}",
           sum);
  expect_bad_hdr(t, "a checksum of a tensor the file lacks", hdr, 4, "'x'", "lacks");
  snprintf(hdr, sizeof hdr,
           "{\"__metadata__\":{\"checksum:w\":%s},\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
           "\"data_offsets\":[0,4]},\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
           sum);
  expect_bad_hdr(t, "one tensor without a checksum", hdr, 8, "'v'", "no checksum");
  expect_bad_hdr(t, "a checksum not in its form",
                 "{\"__metadata__\":{\"checksum:w\":\"crc:12\"},\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[0,4]}}",
                 4, "'w'", "16 hex digits");
}

static void test_f64(T *t) {
  char p[256], err[512] = "";
  tpath(t, "f64.safetensors", p, sizeof p);
  double v[5] = {1.5, -0.1, 1e-40, 3.4028234663852886e38, -INFINITY};
  write_raw(p, 1, (RawT[]){{"w", "F64", 5, v, sizeof v}});
  RtStFile *f = NULL;
  float got[5];
  int rc = rt_st_open(p, &f, err, sizeof err);
  rc = rc ? rc : rt_st_read_f32(f, 0, got, 5, err, sizeof err);
  int ok = rc == 0 && !strcmp(rt_st_dtype(f, 0), "F64");
  for (int i = 0; ok && i < 5; i++) ok = got[i] == (float)v[i];
  check(t, ok, "f64: F64 read as the nearest floats (subnormal, FLT_MAX, -inf kept) [%s]", rc ? err : "ok");
  int64_t st = 1, ln = 3;
  float sl[3];
  rc = f ? rt_st_read_f32_slice(f, 0, &st, &ln, sl, 3, err, sizeof err) : -1;
  check(t, rc == 0 && sl[0] == (float)v[1] && sl[2] == (float)v[3], "f64: a slice of an F64 tensor [%s]",
        rc ? err : "ok");
  rt_st_close(f);
  double big[3] = {1, 2, 1e39};
  write_raw(p, 1, (RawT[]){{"layers.0.w", "F64", 3, big, sizeof big}});
  rc = rt_st_open(p, &f, err, sizeof err);
  rc = rc ? rc : rt_st_read_f32(f, 0, got, 3, err, sizeof err);
  check(t, rc != 0 && strstr(err, "'layers.0.w'") && strstr(err, "element 2") && strstr(err, "outside the float32"),
        "f64: a value beyond the float range is an error naming the tensor and element [%s]", err);
  rc = f ? rt_st_read_f32_slice(f, 0, (int64_t[]){2}, (int64_t[]){1}, got, 1, err, sizeof err) : 0;
  check(t, rc != 0 && strstr(err, "element 2"), "f64: ... in a slice too [%s]", err);
  rt_st_close(f);
  unlink(p);
}

/* Writes an index naming tensors -> shard files. */
static void write_index(const char *path, const char *map) {
  char j[2048];
  snprintf(j, sizeof j, "{\"metadata\":{\"total_size\":0},\"weight_map\":{%s}}", map);
  write_bytes(path, j, strlen(j));
}

static void expect_ckpt_bad(T *t, const char *label, const char *path, const char *e1, const char *e2) {
  char err[1024] = "";
  RtCkpt *c = (RtCkpt *)&c;
  int rc = rt_ckpt_open(path, &c, err, sizeof err);
  check(t, rc != 0 && c == NULL && strstr(err, e1) && (!e2 || strstr(err, e2)), "ckpt: %s [%s]", label, err);
  if (rc == 0) rt_ckpt_close(c);
}

static void test_ckpt(T *t) {
  char d[256], p[300], q[300], ip[300], err[1024] = "";
  tpath(t, "ck", d, sizeof d);
  mkdir(d, 0755);
  float a[2] = {1, 2}, b[3] = {3, 4, 5};
  uint16_t h[2] = {0x3c00, 0xc000}; /* F16 1, -2 */
  uint16_t bf[1] = {0x4040};        /* BF16 3 */
  snprintf(p, sizeof p, "%s/s1.safetensors", d);
  snprintf(q, sizeof q, "%s/s2.safetensors", d);
  snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", d);
  write_raw(p, 2, (RawT[]){{"a", "F32", 2, a, sizeof a}, {"h", "F16", 2, h, sizeof h}});
  write_raw(q, 2, (RawT[]){{"b", "F32", 3, b, sizeof b}, {"bf", "BF16", 1, bf, sizeof bf}});
  write_index(ip,
              "\"a\":\"s1.safetensors\",\"h\":\"s1.safetensors\",\"b\":\"s2.safetensors\",\"bf\":\"s2.safetensors\"");
  const char *opens[2] = {ip, d}; /* the index, and the folder holding only it */
  for (int k = 0; k < 2; k++) {
    RtCkpt *c = NULL;
    int rc = rt_ckpt_open(opens[k], &c, err, sizeof err);
    int ok = rc == 0 && rt_ckpt_count(c) == 4 && rt_ckpt_nfiles(c) == 2;
    float v[3] = {0};
    int idx = -1;
    const RtStFile *f = ok ? rt_ckpt_file(c, rt_ckpt_find(c, "b"), &idx) : NULL;
    ok = ok && f && rt_st_read_f32(f, idx, v, 3, err, sizeof err) == 0 && v[0] == 3 && v[2] == 5;
    f = ok ? rt_ckpt_file(c, rt_ckpt_find(c, "h"), &idx) : NULL;
    ok = ok && f && rt_st_read_f32(f, idx, v, 2, err, sizeof err) == 0 && v[0] == 1 && v[1] == -2;
    f = ok ? rt_ckpt_file(c, rt_ckpt_find(c, "bf"), &idx) : NULL;
    ok = ok && f && rt_st_read_f32(f, idx, v, 1, err, sizeof err) == 0 && v[0] == 3;
    ok = ok && rt_ckpt_find(c, "zz") < 0 && rt_ckpt_name(c, 99) == NULL && rt_ckpt_file(c, -1, NULL) == NULL;
    check(t, ok, "ckpt: a sharded checkpoint %s: 4 tensors of 2 shards, F32, F16 and BF16 [%s]",
          k ? "as its folder" : "by its index", rc ? err : "ok");
    rt_ckpt_close(c);
  }
  /* bad indexes */
  write_index(ip,
              "\"a\":\"s1.safetensors\",\"h\":\"s1.safetensors\",\"b\":\"s3.safetensors\",\"bf\":\"s2.safetensors\"");
  expect_ckpt_bad(t, "an index naming a missing shard", ip, "s3.safetensors: cannot open", "a shard named by");
  write_index(ip, "\"a\":\"s1.safetensors\",\"h\":\"s1.safetensors\",\"b\":\"s2.safetensors\"");
  expect_ckpt_bad(t, "a shard's tensor the index does not name", ip, "tensor 'bf' of shard", "not in the index");
  write_index(ip,
              "\"a\":\"s1.safetensors\",\"h\":\"s2.safetensors\",\"b\":\"s2.safetensors\",\"bf\":\"s2.safetensors\"");
  expect_ckpt_bad(t, "a tensor the index puts in the wrong shard", ip, "weight_map puts tensor 'h' in",
                  "does not hold it");
  write_index(ip, "\"a\":\"../s1.safetensors\"");
  expect_ckpt_bad(t, "a shard outside the folder", ip, "tensor 'a': expected the file name of a shard", NULL);
  write_bytes(ip, "{\"weight_map\": [", 16);
  expect_ckpt_bad(t, "an index that is not JSON", ip, "not a checkpoint index: JSON error", NULL);
  write_bytes(ip, "{\"metadata\": {}}", 16);
  expect_ckpt_bad(t, "an index without a weight_map", ip, "non-empty \"weight_map\"", NULL);
  /* a tensor in two shards */
  write_raw(q, 2, (RawT[]){{"b", "F32", 3, b, sizeof b}, {"a", "F32", 2, a, sizeof a}});
  write_index(ip, "\"a\":\"s1.safetensors\",\"h\":\"s1.safetensors\",\"b\":\"s2.safetensors\"");
  expect_ckpt_bad(t, "a tensor in two shards", ip, "tensor 'a' is in two shards", NULL);
  /* a truncated shard */
  write_raw(q, 2, (RawT[]){{"b", "F32", 3, b, sizeof b}, {"bf", "BF16", 1, bf, sizeof bf}});
  truncate(q, 30);
  write_index(ip,
              "\"a\":\"s1.safetensors\",\"h\":\"s1.safetensors\",\"b\":\"s2.safetensors\",\"bf\":\"s2.safetensors\"");
  expect_ckpt_bad(t, "a truncated shard", ip, "s2.safetensors: truncated", "a shard named by");
  unlink(q);
  unlink(ip);
  expect_ckpt_bad(t, "a folder without a checkpoint", d, "a folder without model.safetensors", NULL);
  /* a folder's model.safetensors comes first */
  snprintf(q, sizeof q, "%s/model.safetensors", d);
  rename(p, q);
  RtCkpt *c = NULL;
  int rc = rt_ckpt_open(d, &c, err, sizeof err);
  check(t, rc == 0 && rt_ckpt_count(c) == 2 && rt_ckpt_find(c, "h") >= 0, "ckpt: a folder's model.safetensors [%s]",
        rc ? err : "ok");
  rt_ckpt_close(c);
  rc = rt_ckpt_open(q, &c, err, sizeof err);
  check(t, rc == 0 && rt_ckpt_count(c) == 2, "ckpt: one .safetensors file [%s]", rc ? err : "ok");
  rt_ckpt_close(c);
  unlink(q);
  rmdir(d);
}

/* The file as a NUL-terminated string (NULL if unreadable). */
static char *read_text(const char *path) {
  size_t n;
  unsigned char *b = read_bytes(path, &n);
  char *s = b ? realloc(b, n + 1) : NULL;
  if (s) s[n] = 0;
  else free(b);
  return s;
}

static void test_ckpt_write(T *t) {
  char d[256], p[300], err[1024] = "";
  tpath(t, "out", d, sizeof d);
  enum { N = 5 };
  const char *names[N] = {"emb", "l0.w", "l1.w", "big", "norm"};
  int nd[N] = {2, 1, 1, 1, 0};
  int64_t s0[2] = {4, 5}, s1[1] = {10}, s3[1] = {100};
  const int64_t *sh[N] = {s0, s1, s1, s3, NULL};
  float v[100];
  for (int i = 0; i < 100; i++) v[i] = (float)i * 0.25f;
  const float *data[N] = {v, v + 1, v + 2, v, v + 7};
  /* 80 + 40 + 40 + 400 + 4 bytes with a 100-byte limit: [emb] [l0.w l1.w] [big] [norm] */
  RtCkptOpts o = {.shard_bytes = 100, .hf_config = "{\"model_type\":\"x\",\"name\":\"a\\u0020b\\u0023\",\"r\":0.1}"};
  int rc = rt_ckpt_write_dir(d, N, names, nd, sh, data, &o, err, sizeof err);
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
  char *idx = read_text(p);
  int ok = rc == 0 && idx && strstr(idx, "\"total_size\": 564") &&
           strstr(idx, "\"l1.w\": \"model-00002-of-00004.safetensors\"") &&
           strstr(idx, "\"norm\": \"model-00004-of-00004.safetensors\"");
  check(t, ok, "ckpt write: 4 shards of a 100-byte limit, the index's total_size and weight_map [%s]",
        rc    ? err
        : idx ? idx
              : "no index");
  free(idx);
  snprintf(p, sizeof p, "%s/config.json", d);
  char *cfg = read_text(p);
  check(t,
        cfg && strstr(cfg, "\"name\": \"a b#\"") && strstr(cfg, "\"r\": 0.1,") &&
            strstr(cfg, "\"torch_dtype\": \"float32\""),
        "ckpt write: config.json from the listing's hf_config (escapes decoded, torch_dtype float32) [%s]",
        cfg ? cfg : "none");
  free(cfg);
  RtCkpt *c = NULL;
  rc = rt_ckpt_open(d, &c, err, sizeof err);
  ok = rc == 0 && rt_ckpt_count(c) == N && rt_ckpt_nfiles(c) == 4;
  for (int k = 0; ok && k < N; k++) {
    int i;
    const RtStFile *f = rt_ckpt_file(c, rt_ckpt_find(c, names[k]), &i);
    float got[100];
    int64_t ne = rt_st_numel(f, i);
    ok = f && rt_st_read_f32(f, i, got, (size_t)ne, err, sizeof err) == 0 && !memcmp(got, data[k], (size_t)ne * 4);
  }
  check(t, ok, "ckpt write: the folder reads back, every tensor the same [%s]", rc ? err : "ok");
  rt_ckpt_close(c);
  /* replaced whole: one file now, no config, the old shards gone */
  rc = rt_ckpt_write_dir(d, 2, names, nd, sh, data, NULL, err, sizeof err);
  snprintf(p, sizeof p, "%s/model.safetensors", d);
  char p2[300];
  snprintf(p2, sizeof p2, "%s/model-00001-of-00004.safetensors", d);
  check(t, rc == 0 && exists(p) && !exists(p2), "ckpt write: an earlier checkpoint folder is replaced whole [%s]",
        rc ? err : "ok");
  /* a hub folder: the copies, config.json named after the model, the training state in trainer/ */
  const char *cname[1] = {"tokenizer.json"}, *cdata[1] = {"{\"v\": 1}"};
  size_t clen[1] = {8};
  RtCkptOpts h = {.hf_config = "{\"model_type\":\"x\"}",
                  .model = "m",
                  .ncopy = 1,
                  .copy_name = cname,
                  .copy_data = cdata,
                  .copy_len = clen,
                  .state_json = "{}"};
  rc = rt_ckpt_write_dir(d, 2, names, nd, sh, data, &h, err, sizeof err);
  char p3[300], p4[300];
  snprintf(p2, sizeof p2, "%s/tokenizer.json", d);
  snprintf(p3, sizeof p3, "%s/trainer/trainer_state.json", d);
  snprintf(p4, sizeof p4, "%s/trainer/optimizer.safetensors", d);
  char *tok = read_text(p2);
  snprintf(p, sizeof p, "%s/config.json", d);
  cfg = read_text(p);
  check(t,
        rc == 0 && tok && !strcmp(tok, "{\"v\": 1}") && exists(p3) && exists(p4) && cfg &&
            strstr(cfg, "\"_name_or_path\": \"m\""),
        "ckpt write: a hub folder: the copied tokenizer.json, config.json's _name_or_path, trainer/ [%s]",
        rc ? err : "ok");
  free(tok);
  free(cfg);
  rc = rt_ckpt_write_dir(d, 2, names, nd, sh, data, NULL, err, sizeof err); /* replaced whole, trainer/ too */
  snprintf(p, sizeof p, "%s/model.safetensors", d);
  check(t, rc == 0 && exists(p) && !exists(p2) && !exists(p3), "ckpt write: a hub folder is replaced whole [%s]",
        rc ? err : "ok");
  /* refused: a folder with other files, a trainer/ with other files; a file */
  snprintf(p2, sizeof p2, "%s/notes.txt", d);
  write_bytes(p2, "{}", 2);
  rc = rt_ckpt_write_dir(d, 2, names, nd, sh, data, NULL, err, sizeof err);
  check(t, rc != 0 && strstr(err, "notes.txt, which is not a checkpoint's file") && exists(p2),
        "ckpt write: a folder holding other files is refused, untouched [%s]", err);
  unlink(p2);
  snprintf(p3, sizeof p3, "%s/trainer", d);
  mkdir(p3, 0777);
  snprintf(p2, sizeof p2, "%s/trainer/notes.txt", d);
  write_bytes(p2, "{}", 2);
  rc = rt_ckpt_write_dir(d, 2, names, nd, sh, data, NULL, err, sizeof err);
  check(t, rc != 0 && strstr(err, "notes.txt, which is not a checkpoint's training state") && exists(p2),
        "ckpt write: a trainer/ holding other files is refused, untouched [%s]", err);
  unlink(p2);
  rmdir(p3);
  unlink(p2);
  unlink(p);
  rmdir(d);
  tpath(t, "plain", p, sizeof p);
  write_bytes(p, "x", 1);
  rc = rt_ckpt_write_dir(p, 2, names, nd, sh, data, NULL, err, sizeof err);
  check(t, rc != 0 && strstr(err, "exists and is not a folder"), "ckpt write: a file at the path is refused [%s]", err);
  unlink(p);
  o.hf_config = "[1]";
  rc = rt_ckpt_write_dir(d, 2, names, nd, sh, data, &o, err, sizeof err);
  check(t, rc != 0 && strstr(err, "hf_config is not a JSON object") && !exists(d),
        "ckpt write: a bad hf_config writes nothing [%s]", err);
  check(t,
        rt_ckpt_is_file_path("a/w.safetensors") && !rt_ckpt_is_file_path("a/w") &&
            !rt_ckpt_is_file_path("w.safetensors/"),
        "ckpt write: a path ending in .safetensors is one file, any other a folder");
}

static void test_tokens(T *t) {
  char p[256], err[512] = "";
  tpath(t, "v.bin", p, sizeof p);
  uint32_t tok[6] = {0, 1, 65535, 7, 3, 2};
  RtData *d = NULL;
  int rc = rt_data_write(p, tok, 6, 65536, err, sizeof err);
  size_t n;
  unsigned char *b = read_bytes(p, &n);
  int ok = rc == 0 && b && n == 1024 + 12 && b[4] == 1;
  free(b);
  rc = ok ? rt_data_open(p, &d, err, sizeof err) : -1;
  int32_t tk[5], lb[5];
  if (!rc) rt_data_batch(d, 0, 0, 1, 1, 5, tk, lb);
  ok = ok && !rc && rt_data_len(d) == 6 && rt_data_max_token(d) == 65535 && tk[2] == 65535 && lb[4] == 2;
  check(t, ok, "tokens: a vocabulary of 65536 writes version 1 (uint16), read back [%s]", rc ? err : "ok");
  rc = rt_data_check_vocab(d, "v.bin", 65536, err, sizeof err);
  check(t, rc == 0, "tokens: every token below the vocabulary passes");
  rc = rt_data_check_vocab(d, "v.bin", 1000, err, sizeof err);
  check(t, rc != 0 && !strcmp(err, "v.bin: token 65535 at position 2 is not below the vocabulary's 1000"),
        "tokens: a token at or above the vocabulary is named with its position [%s]", err);
  rt_data_close(d);
  uint32_t big[4] = {70000, 5, 151935, 0};
  rc = rt_data_write(p, big, 4, 151936, err, sizeof err);
  b = read_bytes(p, &n);
  ok = rc == 0 && b && n == 1024 + 16 && b[4] == 2;
  free(b);
  d = NULL;
  rc = ok ? rt_data_open(p, &d, err, sizeof err) : -1;
  if (!rc) rt_data_batch(d, 0, 0, 1, 1, 3, tk, lb);
  ok = ok && !rc && rt_data_max_token(d) == 151935 && tk[0] == 70000 && tk[2] == 151935 && lb[2] == 0;
  check(t, ok, "tokens: a vocabulary of 151936 writes version 2 (uint32), read back [%s]", rc ? err : "ok");
  rc = d ? rt_data_check_vocab(d, "tokens.bin", 65536, err, sizeof err) : -1;
  check(t, rc != 0 && !strcmp(err, "tokens.bin: token 70000 at position 0 is not below the vocabulary's 65536"),
        "tokens: version 2 against a smaller vocabulary [%s]", err);
  rt_data_close(d);
  rc = rt_data_write(p, big, 4, 100000, err, sizeof err);
  check(t, rc != 0 && strstr(err, "token 151935 at position 2 is not below the vocabulary's 100000"),
        "tokens: the writer refuses a token at or above the vocabulary [%s]", err);
  rc = rt_data_write(p, big, 0, 100000, err, sizeof err);
  check(t, rc != 0 && strstr(err, "1 to 2^31-1 tokens"), "tokens: the writer refuses no tokens [%s]", err);
  /* version 2: truncated; a token at 2^31 */
  unsigned char img[1024 + 8] = {0};
  int32_t hdr[3] = {RT_DATA_LLMC_MAGIC, 2, 2};
  memcpy(img, hdr, sizeof hdr);
  img[1024 + 4 + 3] = 0x80; /* token 1 = 2^31 */
  expect_data_bad(t, "version 2 truncated", img, 1024 + 6, "expected 1032 bytes (1024 + 4*2)", "file has 1030");
  expect_data_bad(t, "version 2 token 2^31", img, sizeof img, "token 2147483648 at position 1 is not below 2^31", NULL);
  unlink(p);
}

int main(void) {
  T t = {0, 0, "/tmp/test_io_XXXXXX"};
  if (!mkdtemp(t.dir)) {
    perror("mkdtemp");
    return 2;
  }
  test_roundtrip(&t);
  test_write_errors(&t);
  test_half(&t);
  test_slices(&t);
  test_bad_files(&t);
  test_fuzz(&t);
  test_data(&t);
  test_f64(&t);
  test_checksums(&t);
  test_ckpt(&t);
  test_ckpt_write(&t);
  test_tokens(&t);
  if (rmdir(t.dir) != 0) check(&t, 0, "temporary directory %s left non-empty", t.dir);
  printf("%d passed, %d failed\n", t.pass, t.fail);
  return t.fail ? 1 : 0;
}
