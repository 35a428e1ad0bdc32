/* rt_data.c - token data sets (llm.c uint16 token files or raw-byte text) and the deterministic batch order. */
#include "rt_io.h"
#include "rt_util.h"

#include <stdlib.h>
#include <string.h>

#define LLMC_HEADER_BYTES    1024     /* 256 int32 */
#define LLMC_MODEL_MAGIC     20240326 /* llm.c's model checkpoint (gpt2_124M.bin) */
#define LLMC_TOKENIZER_MAGIC 20240328 /* llm.c's tokenizer (gpt2_tokenizer.bin) */

struct RtData {
  int64_t n;                /* token count */
  int width;                /* 1: one byte per token, 2: uint16 little-endian */
  unsigned char *buf;       /* owned buffer */
  const unsigned char *tok; /* first token inside buf */
  int max_token;
};

static int32_t rd_i32(const unsigned char *b) {
  uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  int32_t v;
  memcpy(&v, &u, sizeof v);
  return v;
}

static int tok_at(const RtData *d, int64_t i) {
  if (d->width == 1) return d->tok[i];
  return d->tok[2 * i] | d->tok[2 * i + 1] << 8;
}

static void finish(RtData *d) {
  int mx = 0;
  for (int64_t i = 0; i < d->n; i++) {
    int t = tok_at(d, i);
    if (t > mx) mx = t;
  }
  d->max_token = mx;
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
  static const char *const want = "expected an llm.c token file: int32 magic 20240520 (little-endian), version 1";
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
  if (detect && size >= 4 && rd_i32(buf) == RT_DATA_LLMC_MAGIC) {
    if (size < LLMC_HEADER_BYTES) {
      rt_util_set_err(err, errlen, "%s: llm.c token file truncated: expected at least %d header bytes, file has %zu",
                      name, LLMC_HEADER_BYTES, size);
      goto fail;
    }
    int32_t version = rd_i32(buf + 4), count = rd_i32(buf + 8);
    if (version != 1) {
      rt_util_set_err(err, errlen, "%s: llm.c token file: unsupported version %d (expected 1)", name, (int)version);
      goto fail;
    }
    if (count <= 0) {
      rt_util_set_err(err, errlen, "%s: llm.c token file: token count %d (expected > 0)", name, (int)count);
      goto fail;
    }
    uint64_t expect = LLMC_HEADER_BYTES + 2 * (uint64_t)count;
    if ((uint64_t)size != expect) {
      rt_util_set_err(err, errlen,
                      "%s: llm.c token file %s: header says %d tokens, expected %llu bytes (%d + 2*%d), "
                      "file has %zu",
                      name, (uint64_t)size < expect ? "truncated" : "has trailing bytes", (int)count,
                      (unsigned long long)expect, LLMC_HEADER_BYTES, (int)count, size);
      goto fail;
    }
    d->n = count;
    d->width = 2;
    d->tok = buf + LLMC_HEADER_BYTES;
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
  finish(d);
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

void rt_data_close(RtData *d) {
  if (!d) return;
  free(d->buf);
  free(d);
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

void rt_data_batch(const RtData *d, int64_t step, int m, int M, int B, int S, int32_t *tokens, int32_t *labels) {
  if (!d || d->n <= 0 || B <= 0 || S <= 0) return;
  uint64_t n = (uint64_t)d->n;
  /* ((step*M + m)*B + b)*S mod n, without int64 overflow for any step */
  uint64_t base = mulmod(imod(step, n), imod(M, n), n);
  base = addmod(base, imod(m, n), n);
  base = mulmod(base, imod(B, n), n);
  for (int b = 0; b < B; b++) {
    uint64_t pos = mulmod(addmod(base, imod(b, n), n), imod(S, n), n);
    for (int i = 0; i <= S; i++) {
      int32_t t = tok_at(d, (int64_t)pos);
      if (i < S && tokens) tokens[(size_t)b * (size_t)S + (size_t)i] = t;
      if (i > 0 && labels) labels[(size_t)b * (size_t)S + (size_t)(i - 1)] = t;
      if (++pos == n) pos = 0;
    }
  }
}
