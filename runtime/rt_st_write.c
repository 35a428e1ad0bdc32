/* rt_st_write.c - the safetensors writer: F32 tensors, the header JSON escaped and padded, written to PATH.tmp,
 * fsync'ed and renamed over PATH (rt_io.h). */
#include "rt_io.h"
#include "rt_st.h"
#include "rt_util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* ---------------- writer ---------------- */

typedef struct {
  char *buf;
  size_t len, cap;
  int oom;
} SB;

static void sb_put(SB *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + n + 1) {
      if (nc > SIZE_MAX / 2) {
        b->oom = 1;
        return;
      }
      nc *= 2;
    }
    char *nb = realloc(b->buf, nc);
    if (!nb) {
      b->oom = 1;
      return;
    }
    b->buf = nb;
    b->cap = nc;
  }
  memcpy(b->buf + b->len, s, n);
  b->len += n;
  b->buf[b->len] = 0;
}

static void sb_puts(SB *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_int(SB *b, unsigned long long v) {
  char tmp[24];
  int w = snprintf(tmp, sizeof tmp, "%llu", v);
  if (w > 0) sb_put(b, tmp, (size_t)w);
}

static void sb_json_string(SB *b, const char *s) {
  sb_put(b, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    switch (*c) {
    case '"': sb_put(b, "\\\"", 2); break;
    case '\\': sb_put(b, "\\\\", 2); break;
    case '\b': sb_put(b, "\\b", 2); break;
    case '\f': sb_put(b, "\\f", 2); break;
    case '\n': sb_put(b, "\\n", 2); break;
    case '\r': sb_put(b, "\\r", 2); break;
    case '\t': sb_put(b, "\\t", 2); break;
    default:
      if (*c < 0x20) {
        char tmp[8];
        snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)*c);
        sb_put(b, tmp, 6);
      } else {
        sb_put(b, (const char *)c, 1);
      }
    }
  }
  sb_put(b, "\"", 1);
}

static int write_all(int fd, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* s is UTF-8 as the reader takes it (jansson's check, made by json_string). */
static int valid_utf8(const char *s) {
  json_t *j = json_string(s);
  int ok = j != NULL;
  json_decref(j);
  return ok;
}

/* The tensors' names, ranks, dims and data checked as rt_st_write promises; numel[k] each one's
 * element count. 0, or -1 with a message naming the file and the tensor. */
static int check_tensors(const char *path, int n, const char *const *names, const int *ndims,
                         const int64_t *const *shapes, const float *const *data, int64_t *numel, char *err,
                         size_t errlen) {
  uint64_t total = 0;
  for (int k = 0; k < n; k++) {
    const char *nm = names[k];
    if (!nm) return rt_util_set_err(err, errlen, "%s: tensor %d: NULL name", path, k), -1;
    if (!valid_utf8(nm) || !strcmp(nm, "__metadata__"))
      return rt_util_set_err(err, errlen, "%s: tensor %d: name '" NAME_FMT "' is %s", path, k, nm,
                             strcmp(nm, "__metadata__") ? "not valid UTF-8" : "reserved"),
             -1;
    if (ndims[k] < 0 || ndims[k] > RT_ST_MAX_NDIM)
      return rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': ndim %d out of range 0..%d", path, nm, ndims[k],
                             RT_ST_MAX_NDIM),
             -1;
    if (ndims[k] > 0 && !shapes[k])
      return rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL shape for %d dims", path, nm, ndims[k]), -1;
    int zero = 0;
    for (int d = 0; d < ndims[k]; d++) {
      if (shapes[k][d] < 0)
        return rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': negative dim %d = %lld", path, nm, d,
                               (long long)shapes[k][d]),
               -1;
      zero |= shapes[k][d] == 0;
    }
    int64_t ne = zero ? 0 : 1;
    for (int d = 0; d < ndims[k] && !zero; d++) {
      if (ne > INT64_MAX / 4 / shapes[k][d])
        return rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': element count overflows", path, nm), -1;
      ne *= shapes[k][d];
    }
    if (ne > 0 && !data[k])
      return rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL data for %lld elements", path, nm,
                             (long long)ne),
             -1;
    if ((uint64_t)ne * 4 > (uint64_t)INT64_MAX - total)
      return rt_util_set_err(err, errlen, "%s: total data size overflows", path), -1;
    total += (uint64_t)ne * 4;
    numel[k] = ne;
  }
  return 0;
}

/* No name twice. 0, or -1 with a message naming both tensors. */
static int check_unique(const char *path, int n, const char *const *names, char *err, size_t errlen) {
  if (n <= 0) return 0;
  StIdx *idx = malloc((size_t)n * sizeof *idx);
  if (!idx) return rt_util_set_err(err, errlen, "%s: out of memory", path), -1;
  for (int k = 0; k < n; k++) idx[k] = (StIdx){names[k], k};
  qsort(idx, (size_t)n, sizeof *idx, rt_st_cmp_idx);
  int rc = 0;
  for (int k = 1; k < n && !rc; k++)
    if (!strcmp(idx[k - 1].name, idx[k].name))
      rc = (rt_util_set_err(err, errlen, "%s: duplicate tensor name '" NAME_FMT "' (tensors %d and %d)", path,
                            idx[k].name, idx[k - 1].idx, idx[k].idx),
            -1);
  free(idx);
  return rc;
}

/* Elements [from, from + cnt) of x as the file stores them: little-endian F32, into out. */
static void le_f32(const float *x, int64_t from, int64_t cnt, unsigned char *out) {
  for (int64_t e = 0; e < cnt; e++) {
    uint32_t u;
    memcpy(&u, &x[from + e], 4);
    unsigned char *o = out + 4 * e;
    o[0] = (unsigned char)u;
    o[1] = (unsigned char)(u >> 8);
    o[2] = (unsigned char)(u >> 16);
    o[3] = (unsigned char)(u >> 24);
  }
}

#define CHUNK_EL (1 << 14) /* elements converted at a time */

/* The checksum of a tensor's bytes in the file (rt_st_checksum's). */
static uint64_t tensor_sum(const float *x, int64_t numel, unsigned char *chunk, XXH3_state_t *st) {
  XXH3_64bits_reset(st);
  for (int64_t at = 0; at < numel; at += CHUNK_EL) {
    int64_t cnt = numel - at < CHUNK_EL ? numel - at : CHUNK_EL;
    le_f32(x, at, cnt, chunk);
    XXH3_64bits_update(st, chunk, (size_t)cnt * 4);
  }
  return XXH3_64bits_digest(st);
}

/* The header JSON: the metadata Hugging Face's loaders expect of a PyTorch checkpoint, each
 * tensor's checksum (RT_ST_SUM_KEY), then the tensors with their offsets; space-padded to 8. */
static void build_header(SB *hb, int n, const char *const *names, const int *ndims, const int64_t *const *shapes,
                         const int64_t *numel, const uint64_t *sums) {
  sb_puts(hb, "{\"__metadata__\":{\"format\":\"pt\"");
  for (int k = 0; k < n; k++) {
    char val[48];
    snprintf(val, sizeof val, RT_ST_SUM_ALGO ":%016llx", (unsigned long long)sums[k]);
    sb_put(hb, ",", 1);
    SB kb = {0};
    sb_puts(&kb, RT_ST_SUM_KEY);
    sb_puts(&kb, names[k]);
    sb_json_string(hb, kb.oom ? "" : kb.buf);
    hb->oom |= kb.oom;
    free(kb.buf);
    sb_put(hb, ":", 1);
    sb_json_string(hb, val);
  }
  sb_put(hb, "}", 1);
  uint64_t off = 0;
  for (int k = 0; k < n; k++) {
    sb_put(hb, ",", 1);
    sb_json_string(hb, names[k]);
    sb_puts(hb, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < ndims[k]; d++) {
      if (d) sb_put(hb, ",", 1);
      sb_int(hb, (unsigned long long)shapes[k][d]);
    }
    sb_puts(hb, "],\"data_offsets\":[");
    sb_int(hb, off);
    sb_put(hb, ",", 1);
    off += (uint64_t)numel[k] * 4;
    sb_int(hb, off);
    sb_puts(hb, "]}");
  }
  sb_put(hb, "}", 1);
  while (!hb->oom && hb->len % 8 != 0) sb_put(hb, " ", 1);
}

/* The header's length, the header, then the tensors' bytes, to fd. 0, or -1 (errno says why). */
static int write_body(int fd, const SB *hb, int n, const float *const *data, const int64_t *numel,
                      unsigned char *chunk) {
  unsigned char lenb[8];
  for (int k = 0; k < 8; k++) lenb[k] = (unsigned char)((uint64_t)hb->len >> (8 * k));
  if (write_all(fd, lenb, 8) || write_all(fd, hb->buf, hb->len)) return -1;
  for (int k = 0; k < n; k++)
    for (int64_t at = 0; at < numel[k]; at += CHUNK_EL) {
      int64_t cnt = numel[k] - at < CHUNK_EL ? numel[k] - at : CHUNK_EL;
      le_f32(data[k], at, cnt, chunk);
      if (write_all(fd, chunk, (size_t)cnt * 4)) return -1;
    }
  return fsync(fd);
}

/* hb's file through PATH.tmp, fsync'ed and renamed over path; on error the temporary is removed. */
static int write_file(const char *path, const SB *hb, int n, const float *const *data, const int64_t *numel,
                      unsigned char *chunk, char *err, size_t errlen) {
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 5);
  if (!tmp) return rt_util_set_err(err, errlen, "%s: out of memory", path), -1;
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, ".tmp", 5);
  int rc = -1, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) rt_util_set_err(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
  else {
    int w = write_body(fd, hb, n, data, numel, chunk), werrno = errno;
    if (close(fd) != 0 && !w) rt_util_set_err(err, errlen, "%s: close of %s failed: %s", path, tmp, strerror(errno));
    else if (w) rt_util_set_err(err, errlen, "%s: write to %s failed: %s", path, tmp, strerror(werrno));
    else if (rename(tmp, path) != 0)
      rt_util_set_err(err, errlen, "%s: rename from %s failed: %s", path, tmp, strerror(errno));
    else rc = 0;
  }
  if (rc) unlink(tmp);
  free(tmp);
  return rc;
}

int rt_st_write(const char *path, int n, const char *const *names, const int *ndims, const int64_t *const *shapes,
                const float *const *data, char *err, size_t errlen) {
  if (!path) return rt_util_set_err(err, errlen, "rt_st_write: NULL path"), -1;
  if (n < 0 || (n > 0 && (!names || !ndims || !shapes || !data)))
    return rt_util_set_err(err, errlen, "%s: rt_st_write: bad arguments (n = %d, NULL array)", path, n), -1;
  SB hb = {0};
  int64_t *numel = malloc(((size_t)n + 1) * sizeof *numel);
  uint64_t *sums = malloc(((size_t)n + 1) * sizeof *sums);
  unsigned char *chunk = malloc(CHUNK_EL * 4);
  XXH3_state_t *st = XXH3_createState();
  int rc = numel && sums && chunk && st ? 0 : (rt_util_set_err(err, errlen, "%s: out of memory", path), -1);
  if (!rc) rc = check_tensors(path, n, names, ndims, shapes, data, numel, err, errlen);
  if (!rc) rc = check_unique(path, n, names, err, errlen);
  for (int k = 0; k < n && !rc; k++) sums[k] = tensor_sum(data[k], numel[k], chunk, st);
  if (!rc) build_header(&hb, n, names, ndims, shapes, numel, sums);
  if (!rc && hb.oom) rc = (rt_util_set_err(err, errlen, "%s: out of memory building header", path), -1);
  if (!rc && hb.len > RT_ST_MAX_HEADER)
    rc = (rt_util_set_err(err, errlen, "%s: header would be %zu bytes, over the %u-byte limit", path, hb.len,
                          RT_ST_MAX_HEADER),
          -1);
  if (!rc) rc = write_file(path, &hb, n, data, numel, chunk, err, errlen);
  XXH3_freeState(st);
  free(chunk);
  free(hb.buf);
  free(sums);
  free(numel);
  return rc;
}
