/* rt_prog_tok.c - the fields of a listing line for the parser's sections: its messages, integers, numbers, words,
 * names, operands (@OFF, $OFF) and their bounds, and the parser's growing arrays. */
#include "rt_prog_parse.h"
#include "rt_util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages ------------------------------------------------------------------------------ */

int rt_prog_err(RtParser *s, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rt_util_set_err(s->err, s->errlen, "%s:%d: %s", s->path, s->line, msg);
  return -1;
}

/* ---- tokens -------------------------------------------------------------------------------- */

int rt_prog_parse_int(const char *t, int64_t lo, int64_t hi, int64_t *out) {
  const char *q = t;
  int neg = 0;
  if (*q == '-') {
    neg = 1;
    q++;
  }
  if (!*q) return -1;
  uint64_t v = 0;
  for (; *q; q++) {
    if (*q < '0' || *q > '9') return -1;
    if (v > ((uint64_t)INT64_MAX + 1 - (uint64_t)(*q - '0')) / 10) return -1;
    v = v * 10 + (uint64_t)(*q - '0');
  }
  int64_t r;
  if (neg) r = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
  else if (v > (uint64_t)INT64_MAX) return -1;
  else r = (int64_t)v;
  if (r < lo || r > hi) return -1;
  *out = r;
  return 0;
}

int rt_prog_parse_double(const char *t, double *out) {
  if (!*t) return -1;
  char *end;
  errno = 0;
  double v = strtod(t, &end);
  if (*end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* A finite double that is also finite as a float. */
int rt_prog_parse_float(const char *t, float *out) {
  double v;
  if (rt_prog_parse_double(t, &v) || fabs(v) > 3.4028234663852886e38) return -1;
  *out = (float)v;
  return 0;
}

int rt_prog_want_int(RtParser *s, int i, const char *what, int64_t lo, int64_t hi, int64_t *out) {
  if (i >= s->nf)
    return rt_prog_err(s, "%s: missing (expected an integer in [%lld, %lld])", what, (long long)lo, (long long)hi);
  if (rt_prog_parse_int(s->f[i], lo, hi, out))
    return rt_prog_err(s, "%s: expected an integer in [%lld, %lld], found '%.60s'", what, (long long)lo, (long long)hi,
                       s->f[i]);
  return 0;
}

int rt_prog_want_i32(RtParser *s, int i, const char *what, int64_t lo, int64_t hi, int *out) {
  int64_t v;
  if (rt_prog_want_int(s, i, what, lo, hi, &v)) return -1;
  *out = (int)v;
  return 0;
}

int rt_prog_want_word(RtParser *s, int i, const char *word, const char *form) {
  if (i >= s->nf || strcmp(s->f[i], word) != 0)
    return rt_prog_err(s, "expected '%s', found '%.60s' (the line reads '%s')", word,
                       i < s->nf ? s->f[i] : "end of line", form);
  return 0;
}

int rt_prog_want_nf(RtParser *s, int n, const char *form) {
  if (s->nf != n) return rt_prog_err(s, "expected %d fields, found %d (the line reads '%s')", n, s->nf, form);
  return 0;
}

int rt_prog_is_ident(const char *t) {
  size_t n = strlen(t);
  if (n == 0 || n > 200) return 0;
  if (!((t[0] >= 'a' && t[0] <= 'z') || (t[0] >= 'A' && t[0] <= 'Z') || t[0] == '_')) return 0;
  for (size_t i = 1; i < n; i++)
    if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z') || (t[i] >= '0' && t[i] <= '9') || t[i] == '_'))
      return 0;
  return 1;
}

char *rt_prog_strdup(const char *t) {
  size_t n = strlen(t) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, t, n);
  return d;
}

int rt_prog_grow(RtParser *s, void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap) return 0;
  int nc = *cap ? *cap * 2 : 16;
  while (nc < need) nc *= 2;
  void *na = realloc(*arr, (size_t)nc * elem);
  S_ALLOC(na);
  memset((char *)na + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
  *arr = na;
  *cap = nc;
  return 0;
}

int rt_prog_chunk_suffix(RtParser *s, char *t, int *c) {
  *c = 0;
  char *colon = strchr(t, ':');
  if (!colon) return 0;
  int64_t v;
  if (rt_prog_parse_int(colon + 1, 0, PP_MAX_CHUNKS - 1, &v) || colon[1] == '-')
    return rt_prog_err(s, "'%.60s': expected NAME or NAME:C, C a chunk (0 .. %d)", t, PP_MAX_CHUNKS - 1);
  if (v >= s->p->nchunks) {
    if (s->p->nchunks == 1)
      return rt_prog_err(s,
                         "%.60s: chunk %lld, but the program has one chunk (no chunk lines): expected %.*s or %.*s:0",
                         t, (long long)v, (int)(colon - t), t, (int)(colon - t), t);
    return rt_prog_err(s, "%.60s: chunk %lld, but the program has %d chunks (0 .. %d)", t, (long long)v, s->p->nchunks,
                       s->p->nchunks - 1);
  }
  *colon = 0;
  *c = (int)v;
  return 0;
}

/* @OFF / $OFF; with extent != NULL also @OFF:BYTES / $OFF:BYTES (*extent = 0 when not given). */
int rt_prog_parse_ptr(RtParser *s, const char *t, const char *what, RtPtr *p, int64_t *extent) {
  p->present = 1;
  if (t[0] != '@' && t[0] != '$')
    return rt_prog_err(s, "%s: expected %s, found '%.60s'", what,
                       extent ? "@OFF[:BYTES] or $OFF[:BYTES]" : "@OFF or $OFF", t);
  p->in_slot = t[0] == '$';
  if (p->in_slot && s->sec == SEC_BLOCK && rt_blk_program(s->cur_blk))
    return rt_prog_err(s, "%s: '%.60s': $ operands are not allowed in the %s block (it runs outside any slot)", what, t,
                       rt_block_name(s->cur_blk));
  char tmp[64];
  size_t n = strlen(t + 1);
  if (n >= sizeof tmp) return rt_prog_err(s, "%s: operand '%.60s' is too long", what, t);
  memcpy(tmp, t + 1, n + 1);
  char *colon = strchr(tmp, ':');
  if (colon) {
    if (!extent) return rt_prog_err(s, "%s: '%.60s': no ':BYTES' extent here (expected @OFF or $OFF)", what, t);
    *colon = 0;
  }
  if (rt_prog_parse_int(tmp, 0, PP_MAX_ARENA, &p->off))
    return rt_prog_err(s, "%s: '%.60s': offset is not an integer in [0, 2^40]", what, t);
  if (p->off % 4) return rt_prog_err(s, "%s: '%.60s': offset is not a multiple of 4", what, t);
  if (extent) {
    *extent = 0;
    if (colon && rt_prog_parse_int(colon + 1, 1, PP_MAX_ARENA, extent))
      return rt_prog_err(s, "%s: '%.60s': extent is not an integer in [1, 2^40]", what, t);
  }
  return 0;
}

/* The bytes [off, off + bytes) must lie inside the arena ('@') or the slot ('$'). */
int rt_prog_check_extent(RtParser *s, const char *what, const RtPtr *p, int64_t bytes) {
  if (!p->present) return 0;
  const RtProg *g = s->p;
  int64_t limit = p->in_slot ? g->reg[RT_REG_SLOTS].bytes : g->arena;
  if (bytes > limit || p->off > limit - bytes)
    return rt_prog_err(s, "%s: %c%lld + %lld bytes leaves the %s (%lld bytes)", what, p->in_slot ? '$' : '@',
                       (long long)p->off, (long long)bytes, p->in_slot ? "slot" : "arena", (long long)limit);
  return 0;
}
