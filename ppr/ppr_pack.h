/* ppr_pack.h - a growing byte buffer for what ranks gather on rank 0 (--save, --trace): every field
 * 8-byte aligned, so the floats and doubles of a gathered block are too. */
#ifndef PPR_PACK_H
#define PPR_PACK_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  unsigned char *b;
  size_t n, cap;
  int oom; /* a put ran out of memory: the buffer is incomplete */
} PprBuf;

static inline void ppr_put(PprBuf *b, const void *data, size_t n) {
  size_t padded = (n + 7) / 8 * 8;
  if (b->oom) return;
  if (b->n + padded > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + padded) cap *= 2;
    unsigned char *nb = realloc(b->b, cap);
    if (!nb) {
      b->oom = 1;
      return;
    }
    b->b = nb;
    b->cap = cap;
  }
  if (n) memcpy(b->b + b->n, data, n);
  memset(b->b + b->n + n, 0, padded - n);
  b->n += padded;
}

static inline void ppr_put_u64(PprBuf *b, uint64_t v) { ppr_put(b, &v, sizeof v); }

static inline uint64_t ppr_get_u64(const unsigned char **q) {
  uint64_t v;
  memcpy(&v, *q, sizeof v);
  *q += 8;
  return v;
}

#endif /* PPR_PACK_H */
