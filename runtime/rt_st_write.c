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

int rt_st_write(const char *path, int n, const char *const *names, const int *ndims, const int64_t *const *shapes,
                const float *const *data, char *err, size_t errlen) {
  if (!path) {
    rt_util_set_err(err, errlen, "rt_st_write: NULL path");
    return -1;
  }
  if (n < 0 || (n > 0 && (!names || !ndims || !shapes || !data))) {
    rt_util_set_err(err, errlen, "%s: rt_st_write: bad arguments (n = %d, NULL array)", path, n);
    return -1;
  }
  int rc = -1, fd = -1;
  char *tmp = NULL;
  SB hb = {0};
  StIdx *idx = NULL;
  int64_t *numel = NULL;
  unsigned char *chunk = NULL;

  if (n > 0) {
    idx = malloc((size_t)n * sizeof *idx);
    numel = malloc((size_t)n * sizeof *numel);
    if (!idx || !numel) {
      rt_util_set_err(err, errlen, "%s: out of memory", path);
      goto done;
    }
  }
  uint64_t total = 0;
  for (int k = 0; k < n; k++) {
    const char *nm = names[k];
    if (!nm) {
      rt_util_set_err(err, errlen, "%s: tensor %d: NULL name", path, k);
      goto done;
    }
    if (!valid_utf8(nm) || !strcmp(nm, "__metadata__")) {
      rt_util_set_err(err, errlen, "%s: tensor %d: name '" NAME_FMT "' is %s", path, k, nm,
                      strcmp(nm, "__metadata__") ? "not valid UTF-8" : "reserved");
      goto done;
    }
    if (ndims[k] < 0 || ndims[k] > RT_ST_MAX_NDIM) {
      rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': ndim %d out of range 0..%d", path, nm, ndims[k],
                      RT_ST_MAX_NDIM);
      goto done;
    }
    if (ndims[k] > 0 && !shapes[k]) {
      rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL shape for %d dims", path, nm, ndims[k]);
      goto done;
    }
    int zero = 0;
    for (int d = 0; d < ndims[k]; d++) {
      if (shapes[k][d] < 0) {
        rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': negative dim %d = %lld", path, nm, d,
                        (long long)shapes[k][d]);
        goto done;
      }
      zero |= shapes[k][d] == 0;
    }
    int64_t ne = zero ? 0 : 1;
    for (int d = 0; d < ndims[k] && !zero; d++) {
      if (ne > INT64_MAX / 4 / shapes[k][d]) {
        rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': element count overflows", path, nm);
        goto done;
      }
      ne *= shapes[k][d];
    }
    if (ne > 0 && !data[k]) {
      rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL data for %lld elements", path, nm, (long long)ne);
      goto done;
    }
    if ((uint64_t)ne * 4 > (uint64_t)INT64_MAX - total) {
      rt_util_set_err(err, errlen, "%s: total data size overflows", path);
      goto done;
    }
    total += (uint64_t)ne * 4;
    numel[k] = ne;
    idx[k].name = nm;
    idx[k].idx = k;
  }
  if (n > 0) {
    qsort(idx, (size_t)n, sizeof *idx, rt_st_cmp_idx);
    for (int k = 1; k < n; k++)
      if (!strcmp(idx[k - 1].name, idx[k].name)) {
        rt_util_set_err(err, errlen, "%s: duplicate tensor name '" NAME_FMT "' (tensors %d and %d)", path, idx[k].name,
                        idx[k - 1].idx, idx[k].idx);
        goto done;
      }
  }

  /* header JSON; the metadata Hugging Face's loaders expect of a PyTorch checkpoint first */
  sb_puts(&hb, "{\"__metadata__\":{\"format\":\"pt\"}");
  uint64_t off = 0;
  for (int k = 0; k < n; k++) {
    sb_put(&hb, ",", 1);
    sb_json_string(&hb, names[k]);
    sb_puts(&hb, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < ndims[k]; d++) {
      if (d) sb_put(&hb, ",", 1);
      sb_int(&hb, (unsigned long long)shapes[k][d]);
    }
    sb_puts(&hb, "],\"data_offsets\":[");
    sb_int(&hb, off);
    sb_put(&hb, ",", 1);
    off += (uint64_t)numel[k] * 4;
    sb_int(&hb, off);
    sb_puts(&hb, "]}");
  }
  sb_put(&hb, "}", 1);
  while (!hb.oom && hb.len % 8 != 0) sb_put(&hb, " ", 1);
  if (hb.oom) {
    rt_util_set_err(err, errlen, "%s: out of memory building header", path);
    goto done;
  }
  if (hb.len > RT_ST_MAX_HEADER) {
    rt_util_set_err(err, errlen, "%s: header would be %zu bytes, over the %u-byte limit", path, hb.len,
                    RT_ST_MAX_HEADER);
    goto done;
  }

  size_t plen = strlen(path);
  tmp = malloc(plen + 5);
  chunk = malloc(1 << 16);
  if (!tmp || !chunk) {
    rt_util_set_err(err, errlen, "%s: out of memory", path);
    goto done;
  }
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, ".tmp", 5);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    rt_util_set_err(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
    goto done;
  }
  unsigned char lenb[8];
  for (int k = 0; k < 8; k++) lenb[k] = (unsigned char)((uint64_t)hb.len >> (8 * k));
  if (write_all(fd, lenb, 8) || write_all(fd, hb.buf, hb.len)) goto werr;
  for (int k = 0; k < n; k++) {
    int64_t done_el = 0;
    while (done_el < numel[k]) {
      int64_t cnt = numel[k] - done_el;
      if (cnt > (1 << 14)) cnt = 1 << 14;
      for (int64_t e = 0; e < cnt; e++) {
        uint32_t u;
        memcpy(&u, &data[k][done_el + e], 4);
        unsigned char *o = chunk + 4 * e;
        o[0] = (unsigned char)u;
        o[1] = (unsigned char)(u >> 8);
        o[2] = (unsigned char)(u >> 16);
        o[3] = (unsigned char)(u >> 24);
      }
      if (write_all(fd, chunk, (size_t)cnt * 4)) goto werr;
      done_el += cnt;
    }
  }
  if (fsync(fd) != 0) goto werr;
  int cfd = fd;
  fd = -1;
  if (close(cfd) != 0) {
    rt_util_set_err(err, errlen, "%s: close of %s failed: %s", path, tmp, strerror(errno));
    goto done;
  }
  if (rename(tmp, path) != 0) {
    rt_util_set_err(err, errlen, "%s: rename from %s failed: %s", path, tmp, strerror(errno));
    goto done;
  }
  rc = 0;
  goto done;
werr:
  rt_util_set_err(err, errlen, "%s: write to %s failed: %s", path, tmp, strerror(errno));
done:
  if (fd >= 0) close(fd);
  if (rc != 0 && tmp) unlink(tmp);
  free(tmp);
  free(chunk);
  free(hb.buf);
  free(idx);
  free(numel);
  return rc;
}
