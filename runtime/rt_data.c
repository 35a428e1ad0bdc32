/* rt_data.c - token data sets (llm.c token files, version 1 uint16 or 2 uint32, or raw-byte text), their writer,
 * and the deterministic batch order. */
#include "rt_io.h"
#include "rt_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LLMC_HEADER_BYTES    1024     /* 256 int32 */
#define LLMC_MODEL_MAGIC     20240326 /* llm.c's model checkpoint (gpt2_124M.bin) */
#define LLMC_TOKENIZER_MAGIC 20240328 /* llm.c's tokenizer (gpt2_tokenizer.bin) */

struct RtData {
  int64_t n;                /* token count */
  int width;                /* 1: one byte per token, 2: uint16, 4: uint32 (little-endian) */
  unsigned char *buf;       /* owned buffer */
  const unsigned char *tok; /* first token inside buf */
  int max_token;
  const unsigned char *mask; /* NULL, or n bytes (0/1): whether token p is a label the loss counts */
  int32_t ignore;            /* the label written for a masked token */
};

static int32_t rd_i32(const unsigned char *b) {
  uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  int32_t v;
  memcpy(&v, &u, sizeof v);
  return v;
}

static uint32_t tok_u32(const RtData *d, int64_t i) {
  if (d->width == 1) return d->tok[i];
  if (d->width == 2) return (uint32_t)(d->tok[2 * i] | d->tok[2 * i + 1] << 8);
  const unsigned char *b = d->tok + 4 * i;
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static int tok_at(const RtData *d, int64_t i) { return (int)tok_u32(d, i); } /* checked below 2^31 at open */

/* The largest token; a version 2 token at or above 2^31 (no vocabulary is that large) is an error. */
static int finish(RtData *d, const char *name, char *err, size_t errlen) {
  uint32_t mx = 0;
  for (int64_t i = 0; i < d->n; i++) {
    uint32_t t = tok_u32(d, i);
    if (t > (uint32_t)INT32_MAX) {
      rt_util_set_err(err, errlen, "%s: token %lu at position %lld is not below 2^31", name, (unsigned long)t,
                      (long long)i);
      return -1;
    }
    if (t > mx) mx = t;
  }
  d->max_token = (int)mx;
  return 0;
}

static int ends_with_bin(const char *name) {
  size_t n = strlen(name);
  if (n < 4 || name[n - 4] != '.') return 0;
  for (int i = 0; i < 3; i++)
    if ((name[n - 3 + i] | 0x20) != "bin"[i]) return 0; /* any case */
  return 1;
}

static int date_like(int64_t v) { return v >= 20000101 && v <= 20991231; } /* YYYYMMDD, as llm.c's magics */

/* A file that is not an llm.c token file but claims to be one: its name ends in ".bin" (llm.c's
 * token files' extension), or its first int32 reads, in either byte order, like an llm.c magic (a
 * date; the first or fourth byte is then 0x01, which no text starts with). 0 when the file is
 * text; else -1 with the message in err. */
static int llmc_impostor(const char *name, const unsigned char *buf, size_t size, char *err, size_t errlen) {
  static const char *const want =
      "expected an llm.c token file: int32 magic 20240520 (little-endian), version 1 (uint16) or 2 (uint32)";
  if (size < 4) {
    if (!ends_with_bin(name)) return 0;
    rt_util_set_err(err, errlen,
                    "%s: %zu bytes, too short for an llm.c token file (%s): a --data file named *.bin is one; "
                    "name a text file otherwise",
                    name, size, want);
    return -1;
  }
  int32_t le = rd_i32(buf);
  int64_t be = (int64_t)((uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | (uint32_t)buf[2] << 8 | buf[3]);
  if (le == LLMC_MODEL_MAGIC || le == LLMC_TOKENIZER_MAGIC) {
    rt_util_set_err(err, errlen, "%s: an llm.c %s (magic %d), not a token file: %s", name,
                    le == LLMC_MODEL_MAGIC ? "model checkpoint" : "tokenizer", (int)le, want);
    return -1;
  }
  if (be == RT_DATA_LLMC_MAGIC) {
    rt_util_set_err(err, errlen, "%s: starts with the llm.c token magic 20240520 big-endian: %s", name, want);
    return -1;
  }
  if (date_like(le) || date_like(be)) {
    rt_util_set_err(err, errlen,
                    "%s: starts like an llm.c file (first int32 %lld) but not with the token file magic: %s", name,
                    (long long)(date_like(le) ? le : be), want);
    return -1;
  }
  if (ends_with_bin(name)) {
    rt_util_set_err(err, errlen,
                    "%s: first int32 %d: %s (a --data file named *.bin is one; name a text file otherwise)", name,
                    (int)le, want);
    return -1;
  }
  return 0;
}

/* Takes ownership of buf (freed on error). */
static int from_buffer(const char *name, unsigned char *buf, size_t size, int detect, RtData **out, char *err,
                       size_t errlen) {
  if (size == 0) {
    rt_util_set_err(err, errlen, "%s: empty token data (0 bytes)", name);
    free(buf);
    return -1;
  }
  RtData *d = calloc(1, sizeof *d);
  if (!d) {
    rt_util_set_err(err, errlen, "%s: out of memory", name);
    free(buf);
    return -1;
  }
  d->buf = buf;
  d->ignore = -100;
  if (detect && size >= 4 && rd_i32(buf) == RT_DATA_LLMC_MAGIC) {
    if (size < LLMC_HEADER_BYTES) {
      rt_util_set_err(err, errlen, "%s: llm.c token file truncated: expected at least %d header bytes, file has %zu",
                      name, LLMC_HEADER_BYTES, size);
      goto fail;
    }
    int32_t version = rd_i32(buf + 4), count = rd_i32(buf + 8);
    if (version != 1 && version != 2) {
      rt_util_set_err(err, errlen,
                      "%s: llm.c token file: unsupported version %d (expected 1: uint16 tokens, or 2: uint32 tokens)",
                      name, (int)version);
      goto fail;
    }
    int w = version == 1 ? 2 : 4;
    if (count <= 0) {
      rt_util_set_err(err, errlen, "%s: llm.c token file: token count %d (expected > 0)", name, (int)count);
      goto fail;
    }
    int32_t masked = rd_i32(buf + 12);
    if (masked != 0 && masked != 1) {
      rt_util_set_err(err, errlen,
                      "%s: llm.c token file: header[3] (the loss-mask flag) is %d: expected 0 (no mask) or 1 (a "
                      "byte per token after the tokens)",
                      name, (int)masked);
      goto fail;
    }
    uint64_t expect = LLMC_HEADER_BYTES + (uint64_t)(w + masked) * (uint64_t)count;
    if ((uint64_t)size != expect) {
      rt_util_set_err(err, errlen,
                      "%s: llm.c token file %s: header says %d tokens%s, expected %llu bytes (%d + %d*%d), "
                      "file has %zu",
                      name, (uint64_t)size < expect ? "truncated" : "has trailing bytes", (int)count,
                      masked ? " and a loss mask" : "", (unsigned long long)expect, LLMC_HEADER_BYTES, w + masked,
                      (int)count, size);
      goto fail;
    }
    d->n = count;
    d->width = w;
    d->tok = buf + LLMC_HEADER_BYTES;
    if (masked) {
      d->mask = d->tok + (size_t)w * (size_t)count;
      for (int64_t i = 0; i < count; i++)
        if (d->mask[i] > 1) {
          rt_util_set_err(err, errlen, "%s: loss mask byte %d at position %lld: expected 0 or 1", name, d->mask[i],
                          (long long)i);
          goto fail;
        }
    }
  } else {
    if (detect && llmc_impostor(name, buf, size, err, errlen)) goto fail;
    if ((uint64_t)size > (uint64_t)INT64_MAX) {
      rt_util_set_err(err, errlen, "%s: too large", name);
      goto fail;
    }
    d->n = (int64_t)size;
    d->width = 1;
    d->tok = buf;
  }
  if (finish(d, name, err, errlen)) goto fail;
  *out = d;
  return 0;
fail:
  rt_data_close(d);
  return -1;
}

int rt_data_open(const char *path, RtData **out, char *err, size_t errlen) {
  if (out) *out = NULL;
  if (!path || !out) {
    rt_util_set_err(err, errlen, "rt_data_open: NULL %s", path ? "out" : "path");
    return -1;
  }
  size_t size;
  unsigned char *buf = (unsigned char *)rt_util_read_file(path, NULL, SIZE_MAX - 1, &size, err, errlen);
  if (!buf) return -1;
  return from_buffer(path, buf, size, 1, out, err, errlen);
}

int rt_data_from_memory(const unsigned char *bytes, size_t n, RtData **out, char *err, size_t errlen) {
  if (out) *out = NULL;
  if (!out || (!bytes && n > 0)) {
    rt_util_set_err(err, errlen, "<memory>: rt_data_from_memory: NULL argument");
    return -1;
  }
  if (n == 0) {
    rt_util_set_err(err, errlen, "<memory>: empty token data (0 bytes)");
    return -1;
  }
  unsigned char *buf = malloc(n);
  if (!buf) {
    rt_util_set_err(err, errlen, "<memory>: out of memory copying %zu bytes", n);
    return -1;
  }
  memcpy(buf, bytes, n);
  return from_buffer("<memory>", buf, n, 0, out, err, errlen);
}

int64_t rt_data_len(const RtData *d) { return d ? d->n : 0; }

int rt_data_max_token(const RtData *d) { return d ? d->max_token : -1; }

int rt_data_is_text(const RtData *d) { return d && d->width == 1; }

int rt_data_check_vocab(const RtData *d, const char *name, int64_t vocab, char *err, size_t errlen) {
  if (!d || d->max_token < vocab) return 0;
  for (int64_t i = 0; i < d->n; i++)
    if (tok_at(d, i) >= vocab) {
      rt_util_set_err(err, errlen, "%s: token %d at position %lld is not below the vocabulary's %lld", name,
                      tok_at(d, i), (long long)i, (long long)vocab);
      return -1;
    }
  return 0;
}

static void put_le32(unsigned char *b, uint32_t v) {
  for (int k = 0; k < 4; k++) b[k] = (unsigned char)(v >> (8 * k));
}

int rt_data_write(const char *path, const uint32_t *tokens, int64_t n, int64_t vocab, char *err, size_t errlen) {
  if (!path || (!tokens && n > 0)) {
    rt_util_set_err(err, errlen, "%s: rt_data_write: NULL argument", path ? path : "(null)");
    return -1;
  }
  if (n <= 0 || n > INT32_MAX || vocab < 1 || vocab > (int64_t)1 << 31) {
    rt_util_set_err(err, errlen,
                    "%s: an llm.c token file holds 1 to 2^31-1 tokens of a vocabulary of 1 to 2^31 (%lld tokens, "
                    "vocabulary %lld)",
                    path, (long long)n, (long long)vocab);
    return -1;
  }
  for (int64_t i = 0; i < n; i++)
    if (tokens[i] >= (uint64_t)vocab) {
      rt_util_set_err(err, errlen, "%s: token %lu at position %lld is not below the vocabulary's %lld", path,
                      (unsigned long)tokens[i], (long long)i, (long long)vocab);
      return -1;
    }
  int w = vocab <= 65536 ? 2 : 4;
  size_t bytes = LLMC_HEADER_BYTES + (size_t)w * (size_t)n;
  unsigned char *b = calloc(bytes, 1);
  size_t pl = strlen(path);
  char *tmp = malloc(pl + 5);
  if (!b || !tmp) {
    free(b);
    free(tmp);
    rt_util_set_err(err, errlen, "%s: out of memory", path);
    return -1;
  }
  put_le32(b, RT_DATA_LLMC_MAGIC);
  put_le32(b + 4, w == 2 ? 1 : 2);
  put_le32(b + 8, (uint32_t)n);
  for (int64_t i = 0; i < n; i++) {
    unsigned char *o = b + LLMC_HEADER_BYTES + (size_t)w * (size_t)i;
    if (w == 2) o[0] = (unsigned char)tokens[i], o[1] = (unsigned char)(tokens[i] >> 8);
    else put_le32(o, tokens[i]);
  }
  memcpy(tmp, path, pl);
  memcpy(tmp + pl, ".tmp", 5);
  int rc = -1, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    rt_util_set_err(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
  } else {
    size_t done = 0;
    while (done < bytes) {
      ssize_t k = write(fd, b + done, bytes - done);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      done += (size_t)k;
    }
    int ok = done == bytes && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok) rt_util_set_err(err, errlen, "%s: write to %s failed: %s", path, tmp, strerror(errno));
    else if (rename(tmp, path) != 0) rt_util_set_err(err, errlen, "%s: rename failed: %s", path, strerror(errno));
    else rc = 0;
    if (rc) unlink(tmp);
  }
  free(b);
  free(tmp);
  return rc;
}

void rt_data_close(RtData *d) {
  if (!d) return;
  free(d->buf);
  free(d);
}

int rt_data_slice(const RtData *d, int64_t start, int64_t n, const char *name, RtData **out, char *err, size_t errlen) {
  *out = NULL;
  if (!d || start < 0 || n < 1 || start > d->n - n) {
    rt_util_set_err(err, errlen, "%s: tokens %lld to %lld of %lld: not a part of the data", name, (long long)start,
                    (long long)(start + n), (long long)(d ? d->n : 0));
    return -1;
  }
  RtData *s = calloc(1, sizeof *s);
  size_t tb = (size_t)n * (size_t)d->width;
  unsigned char *buf = malloc(tb + (d->mask ? (size_t)n : 0));
  if (!s || !buf) {
    free(s);
    free(buf);
    rt_util_set_err(err, errlen, "%s: out of memory", name);
    return -1;
  }
  memcpy(buf, d->tok + (size_t)start * (size_t)d->width, tb);
  if (d->mask) {
    memcpy(buf + tb, d->mask + start, (size_t)n);
    s->mask = buf + tb;
  }
  s->ignore = d->ignore;
  s->n = n;
  s->width = d->width;
  s->buf = buf;
  s->tok = buf;
  if (finish(s, name, err, errlen)) {
    rt_data_close(s);
    return -1;
  }
  *out = s;
  return 0;
}

/* Modular helpers, all operands reduced to [0, m). */
static uint64_t addmod(uint64_t a, uint64_t b, uint64_t m) { return a >= m - b ? a - (m - b) : a + b; }

static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) {
  if (b == 0 || a <= UINT64_MAX / b) return (a * b) % m;
  uint64_t r = 0;
  while (b) {
    if (b & 1) r = addmod(r, a, m);
    a = addmod(a, a, m);
    b >>= 1;
  }
  return r;
}

static uint64_t imod(int64_t x, uint64_t m) {
  int64_t r = x % (int64_t)m;
  return (uint64_t)(r < 0 ? r + (int64_t)m : r);
}

/* ((step*M + m)*B + b)*S mod n, without int64 overflow for any step: (step*M + m)*B, then row b's */
static uint64_t row_base(const RtData *d, int64_t step, int m, int M, int B) {
  uint64_t n = (uint64_t)d->n;
  uint64_t base = mulmod(imod(step, n), imod(M, n), n);
  base = addmod(base, imod(m, n), n);
  return mulmod(base, imod(B, n), n);
}

static uint64_t row_pos(const RtData *d, uint64_t base, int b, int S) {
  uint64_t n = (uint64_t)d->n;
  return mulmod(addmod(base, imod(b, n), n), imod(S, n), n);
}

/* The label token pos makes: the token, or the ignore label where the loss mask leaves it out. */
static int32_t label_at(const RtData *d, uint64_t pos) {
  return d->mask && !d->mask[pos] ? d->ignore : tok_at(d, (int64_t)pos);
}

void rt_data_batch(const RtData *d, int64_t step, int m, int M, int B, int S, int32_t *tokens, int32_t *labels) {
  if (!d || d->n <= 0 || B <= 0 || S <= 0) return;
  uint64_t n = (uint64_t)d->n;
  uint64_t base = row_base(d, step, m, M, B);
  for (int b = 0; b < B; b++) {
    uint64_t pos = row_pos(d, base, b, S);
    for (int i = 0; i <= S; i++) {
      if (i < S && tokens) tokens[(size_t)b * (size_t)S + (size_t)i] = tok_at(d, (int64_t)pos);
      if (i > 0 && labels) labels[(size_t)b * (size_t)S + (size_t)(i - 1)] = label_at(d, pos);
      if (++pos == n) pos = 0;
    }
  }
}

int rt_data_has_mask(const RtData *d) { return d && d->mask; }

void rt_data_set_ignore(RtData *d, int32_t ignore) {
  if (d) d->ignore = ignore;
}

int64_t rt_data_count(const RtData *d, int64_t step, int m0, int n, int M, int B, int S) {
  if (!d || d->n <= 0 || B <= 0 || S <= 0) return 0;
  int64_t cnt = 0;
  for (int m = m0; m < m0 + n; m++) {
    uint64_t base = row_base(d, step, m, M, B);
    for (int b = 0; b < B; b++) {
      uint64_t pos = row_pos(d, base, b, S);
      for (int i = 0; i < S; i++) {
        if (++pos == (uint64_t)d->n) pos = 0; /* label i is token i + 1 of the row */
        cnt += label_at(d, pos) != d->ignore;
      }
    }
  }
  return cnt;
}
