/* ppr_gen.c - text from a model: the autoregressive loop over a program's logits, the samplers, and tokens
 * written as text. */
#include "ppr_gen.h"
#include "ppr_bpe.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- picking a token ----------------------------------------------------------------------- */

/* splitmix64: the next 64 bits of the stream */
static uint64_t next64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static const float *sort_row; /* qsort's comparison reads the row through it (one thread) */

/* larger logits first; equal ones by the lower id */
static int by_logit(const void *a, const void *b) {
  int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
  float x = sort_row[i], y = sort_row[j];
  if (x != y) return x > y ? -1 : 1;
  return i < j ? -1 : i > j;
}

int64_t ppr_gen_pick(PprSampler *s, const float *row, int64_t vocab) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; v++)
    if (row[v] > row[best]) best = v;
  if (s->temperature <= 0) return best;
  int64_t k = s->top_k > 0 && s->top_k < vocab ? s->top_k : vocab;
  int64_t *id = malloc((size_t)vocab * sizeof *id);
  double *w = malloc((size_t)k * sizeof *w);
  if (!id || !w) { /* no memory for the draw: the likeliest token */
    free(id);
    free(w);
    return best;
  }
  for (int64_t v = 0; v < vocab; v++) id[v] = v;
  if (k < vocab) {
    sort_row = row;
    qsort(id, (size_t)vocab, sizeof *id, by_logit);
  }
  /* softmax(logit / T) over the k, in double, from the largest logit (no overflow) */
  double top = row[best], sum = 0;
  for (int64_t i = 0; i < k; i++) sum += w[i] = exp(((double)row[id[i]] - top) / s->temperature);
  double u = (double)(next64(&s->state) >> 11) * 0x1.0p-53 * sum, acc = 0;
  int64_t pick = id[k - 1];
  for (int64_t i = 0; i < k; i++)
    if ((acc += w[i]) > u) {
      pick = id[i];
      break;
    }
  free(id);
  free(w);
  return pick;
}

/* ---- the loop ------------------------------------------------------------------------------ */

int ppr_gen_extend(RtComm *comm, RtExec *x, const RtProg *p, PprSampler *s, int32_t *tok, int n, int count, char *err,
                   size_t errlen) {
  int me = comm ? rt_comm_rank(comm) : 0;
  float *row = me == 0 ? malloc((size_t)p->vocab * sizeof *row) : NULL;
  if (me == 0 && !row) return RT_FAIL("out of memory (a row of %lld logits)", (long long)p->vocab);
  int rc = 0;
  for (int i = 0; i < count && !rc; i++) {
    int w = n + i < p->seq ? n + i : p->seq; /* the window: the last seq tokens */
    rc = rt_exec_next_logits(x, tok + n + i - w, w, row, err, errlen);
    int32_t next = 0;
    if (!rc && me == 0) next = (int32_t)ppr_gen_pick(s, row, p->vocab);
    rt_comm_set_what(comm, "the broadcast of a generated token");
    if (!rc) rt_comm_bcast(comm, &next, sizeof next, 0);
    tok[n + i] = next;
  }
  free(row);
  return rc;
}

/* ---- tokens as text ------------------------------------------------------------------------ */

struct PprTokenizer {
  const char *path;
  PprBpe *bpe; /* a tokenizer.json; else the llm.c table: */
  int64_t n;
  unsigned char **bytes; /* token i: bytes[i][0] its length, then its bytes */
};

#define LLMC_TOKENIZER_MAGIC 20240328

int ppr_gen_tokenizer_open(const char *path, int64_t vocab, PprTokenizer **out, char *err, size_t errlen) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return RT_FAIL("--tokenizer %s: %s", path, strerror(errno));
  int32_t h[256];
  int rc = 0, c;
  PprTokenizer *t = NULL;
  while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\t' || c == '\r') continue;
  if (c == '{') { /* a tokenizer.json */
    fclose(f);
    if (!(t = calloc(1, sizeof *t))) return RT_FAIL("out of memory");
    t->path = path;
    if (ppr_bpe_open(path, &t->bpe, err, errlen)) {
      free(t);
      return -1;
    }
    *out = t;
    return 0;
  }
  rewind(f);
  if (fread(h, sizeof h, 1, f) != 1) rc = RT_FAIL("--tokenizer %s: shorter than llm.c's 1024-byte header", path);
  else if (h[0] != LLMC_TOKENIZER_MAGIC)
    rc = RT_FAIL("--tokenizer %s: not an llm.c tokenizer file (its magic is %d, expected %d)", path, h[0],
                 LLMC_TOKENIZER_MAGIC);
  else if (h[1] != 1 && h[1] != 2) rc = RT_FAIL("--tokenizer %s: version %d (this ppr reads 1 and 2)", path, h[1]);
  else if (h[2] < vocab)
    rc = RT_FAIL("--tokenizer %s: %d tokens, fewer than the model's vocabulary of %lld", path, h[2], (long long)vocab);
  if (!rc) {
    t = calloc(1, sizeof *t);
    if (t) t->bytes = calloc((size_t)h[2], sizeof *t->bytes);
    if (!t || !t->bytes) rc = RT_FAIL("out of memory");
    else t->n = h[2];
  }
  for (int64_t i = 0; !rc && i < t->n; i++) {
    int len = fgetc(f);
    if (len < 0) {
      rc = RT_FAIL("--tokenizer %s: ends at token %lld of %lld", path, (long long)i, (long long)t->n);
      break;
    }
    unsigned char *b = t->bytes[i] = malloc((size_t)len + 1);
    if (!b) {
      rc = RT_FAIL("out of memory");
      break;
    }
    b[0] = (unsigned char)len;
    if (len && fread(b + 1, 1, (size_t)len, f) != (size_t)len)
      rc = RT_FAIL("--tokenizer %s: token %lld: the file ends inside it", path, (long long)i);
  }
  fclose(f);
  if (rc) ppr_gen_tokenizer_close(t);
  else *out = t;
  return rc;
}

int ppr_gen_tokenizer_encodes(const PprTokenizer *t) { return t && t->bpe; }

int ppr_gen_tokenizer_encode(const PprTokenizer *t, const char *text, int64_t vocab, int32_t **ids, int64_t *n,
                             char *err, size_t errlen) {
  *ids = NULL;
  if (!t->bpe)
    return RT_FAIL("--tokenizer %s is an llm.c tokenizer file, which turns tokens into text only: give the model's "
                   "tokenizer.json to encode --prompt, or the ids with --prompt-ids",
                   t->path);
  if (ppr_bpe_encode(t->bpe, text, strlen(text), ids, n, err, errlen)) return -1;
  for (int64_t i = 0; i < *n; i++)
    if ((*ids)[i] >= vocab) {
      RT_FAIL("--prompt through --tokenizer %s: token %d is not below the model's vocabulary of %lld (another "
              "model's tokenizer?)",
              t->path, (int)(*ids)[i], (long long)vocab);
      free(*ids);
      *ids = NULL;
      return -1;
    }
  return 0;
}

void ppr_gen_tokenizer_close(PprTokenizer *t) {
  if (!t) return;
  ppr_bpe_free(t->bpe);
  for (int64_t i = 0; t->bytes && i < t->n; i++) free(t->bytes[i]);
  free(t->bytes);
  free(t);
}

static void put_byte(FILE *f, unsigned char c) {
  if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) fprintf(f, "\\x%02x", c);
  else fputc(c, f);
}

void ppr_gen_print(FILE *f, const int32_t *tok, int n, int64_t vocab, const PprTokenizer *t) {
  char *text;
  size_t len;
  if (t && t->bpe && !ppr_bpe_decode(t->bpe, tok, n, &text, &len)) {
    for (size_t i = 0; i < len; i++) put_byte(f, (unsigned char)text[i]);
    free(text);
    return;
  }
  for (int i = 0; i < n; i++) {
    if (t && tok[i] >= 0 && tok[i] < t->n) {
      const unsigned char *b = t->bytes[tok[i]];
      for (int j = 1; j <= b[0]; j++) put_byte(f, b[j]);
    } else if (!t && vocab <= 256) put_byte(f, (unsigned char)tok[i]);
    else fprintf(f, "%s%d", i ? " " : "", tok[i]);
  }
}
