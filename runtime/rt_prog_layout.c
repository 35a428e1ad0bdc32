/* rt_prog_layout.c - what the arena of a listing holds: the regions and the arena's size, the pipeline boundaries,
 * the params (and the model's, model_param), the buffers; each checked against the others. */
#include "rt_prog_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS 4096

/* [D0,D1,...] or [] */
static int parse_shape(RtParser *s, const char *t, int *ndim, int64_t *dims, int64_t *numel) {
  size_t n = strlen(t);
  if (n < 2 || t[0] != '[' || t[n - 1] != ']') return rt_prog_err(s, "shape: expected [D0,D1,...], found '%.60s'", t);
  *ndim = 0;
  *numel = 1;
  if (n == 2) return 0;
  char tmp[256];
  if (n - 2 >= sizeof tmp) return rt_prog_err(s, "shape '%.60s...' is too long", t);
  memcpy(tmp, t + 1, n - 2);
  tmp[n - 2] = 0;
  char *q = tmp;
  for (;;) {
    char *c = strchr(q, ',');
    if (c) *c = 0;
    int64_t d;
    if (*ndim >= RT_MAX_NDIM) return rt_prog_err(s, "shape '%.60s' has more than %d dims", t, RT_MAX_NDIM);
    if (rt_prog_parse_int(q, 1, PP_MAX_NUMEL, &d))
      return rt_prog_err(s, "shape '%.60s': dim '%.30s' is not an integer in [1, 2^40]", t, q);
    if (*numel > PP_MAX_NUMEL / d) return rt_prog_err(s, "shape '%.60s' has more than 2^40 elements", t);
    dims[(*ndim)++] = d;
    *numel *= d;
    if (!c) break;
    q = c + 1;
  }
  return 0;
}

/* ---- regions ------------------------------------------------------------------------------- */

int rt_prog_region_line(RtParser *s) {
  RtProg *g = s->p;
  if (!strcmp(s->f[0], "region")) {
    if (s->nf < 2) return rt_prog_err(s, "expected 'region NAME BASE BYTES'");
    int r = -1;
    for (int i = 0; i < RT_NREG; i++)
      if (!strcmp(s->f[1], rt_region_name(i))) r = i;
    if (r < 0)
      return rt_prog_err(
          s, "unknown region '%.60s' (expected params, grads, adam_m, adam_v, slots, scratch or workspace)", s->f[1]);
    if (s->reg_line[r])
      return rt_prog_err(s, "region %s is given twice (first on line %d)", rt_region_name(r), s->reg_line[r]);
    s->reg_line[r] = s->line;
    if (r == RT_REG_SLOTS) {
      int64_t n;
      if (rt_prog_want_nf(s, 5, "region slots BASE BYTES COUNT") ||
          rt_prog_want_int(s, 2, "region slots: base", 0, PP_MAX_ARENA, &g->reg[r].base) ||
          rt_prog_want_int(s, 3, "region slots: bytes of one slot", 0, PP_MAX_ARENA, &g->reg[r].bytes) ||
          rt_prog_want_int(s, 4, "region slots: count", 1, MAX_SLOTS, &n))
        return -1;
      g->nslots = (int)n;
      if (g->reg[r].bytes % 64) return rt_prog_err(s, "region slots: the bytes of one slot are not a multiple of 64");
    } else {
      char what[64];
      snprintf(what, sizeof what, "region %s: base", rt_region_name(r));
      if (rt_prog_want_nf(s, 4, "region NAME BASE BYTES") ||
          rt_prog_want_int(s, 2, what, 0, PP_MAX_ARENA, &g->reg[r].base))
        return -1;
      snprintf(what, sizeof what, "region %s: bytes", rt_region_name(r));
      if (rt_prog_want_int(s, 3, what, 0, PP_MAX_ARENA, &g->reg[r].bytes)) return -1;
    }
    if (g->reg[r].base % 64)
      return rt_prog_err(s, "region %s: base %lld is not a multiple of 64", rt_region_name(r),
                         (long long)g->reg[r].base);
    return 0;
  }
  if (!strcmp(s->f[0], "zero")) {
    int64_t z, r;
    if (g->zero) return rt_prog_err(s, "a second 'zero' line");
    if (rt_prog_want_nf(s, 3, "zero RANKS RANK") || rt_prog_want_int(s, 1, "zero: ranks", 2, PP_MAX_RANKS, &z) ||
        rt_prog_want_int(s, 2, "zero: rank", 0, z - 1, &r))
      return -1;
    if (z != (int64_t)g->dp * g->cp || r != (int64_t)g->dp_rank * g->cp + g->cp_rank)
      return rt_prog_err(s, "zero %lld %lld: the dp x cp group of this mesh has %d ranks, this rank the %d-th",
                         (long long)z, (long long)r, g->dp * g->cp, g->dp_rank * g->cp + g->cp_rank);
    g->zero = (int)z, g->zrank = (int)r;
    return 0;
  }
  if (!strcmp(s->f[0], "zero_part")) {
    if (!g->zero) return rt_prog_err(s, "zero_part before 'zero RANKS RANK'");
    if (g->nzpart == 2) return rt_prog_err(s, "a third zero_part line (a program has two parts at most)");
    int k = g->nzpart;
    RtPtr a, m;
    if (rt_prog_want_nf(s, 5, "zero_part @PARAMS ELEMENTS SHARD @ADAM_M") ||
        rt_prog_parse_ptr(s, s->f[1], "zero_part", &a, NULL) ||
        rt_prog_want_int(s, 2, "zero_part: elements", 1, PP_MAX_ARENA / 4, &g->zpart[k].n) ||
        rt_prog_want_int(s, 3, "zero_part: shard", 1, PP_MAX_ARENA / 4, &g->zpart[k].shard) ||
        rt_prog_parse_ptr(s, s->f[4], "zero_part", &m, NULL))
      return -1;
    if (a.in_slot || m.in_slot) return rt_prog_err(s, "zero_part: arena offsets @OFF, not slot offsets");
    if (g->zpart[k].n != g->zpart[k].shard * g->zero)
      return rt_prog_err(s, "zero_part: %lld elements are not %d shards of %lld", (long long)g->zpart[k].n, g->zero,
                         (long long)g->zpart[k].shard);
    g->zpart[k].off = a.off, g->zpart[k].moff = m.off;
    g->nzpart++;
    return 0;
  }
  if (!strcmp(s->f[0], "arena")) {
    if (rt_prog_want_nf(s, 2, "arena BYTES") || rt_prog_want_int(s, 1, "arena", 1, PP_MAX_ARENA, &g->arena)) return -1;
    for (int r = 0; r < RT_NREG; r++)
      if (!s->reg_line[r] && r != RT_REG_WORKSPACE && r != RT_REG_COPIES)
        return rt_prog_err(s, "region %s is missing (every region is given before 'arena')", rt_region_name(r));
    int64_t end[RT_NREG];
    for (int r = 0; r < RT_NREG; r++) {
      int64_t total = g->reg[r].bytes;
      if (r == RT_REG_SLOTS) total *= g->nslots; /* <= 2^40 * 4096: no overflow */
      end[r] = g->reg[r].base + total;
      if (end[r] > g->arena)
        return rt_prog_err(s, "region %s (line %d) ends at byte %lld, past the arena (%lld bytes)", rt_region_name(r),
                           s->reg_line[r], (long long)end[r], (long long)g->arena);
    }
    if (g->zero && (g->generate || !g->nzpart))
      return rt_prog_err(s, "'zero' in %s", g->generate ? "a generation program" : "a listing without zero_part lines");
    const RtRegion *pr = &g->reg[RT_REG_PARAMS], *mr = &g->reg[RT_REG_ADAM_M];
    int64_t shards = 0;
    for (int k = 0; k < g->nzpart; k++) { /* each part inside params, its shard inside adam_m, in order */
      int64_t o = g->zpart[k].off, mo = g->zpart[k].moff, n = g->zpart[k].n, sh = g->zpart[k].shard;
      if (o % 64 || o < pr->base || o + 4 * n > pr->base + pr->bytes ||
          (k && o < g->zpart[k - 1].off + 4 * g->zpart[k - 1].n))
        return rt_prog_err(
            s, "zero_part %d: @%lld + %lld floats is not a part of region params [%lld, %lld) after the last", k,
            (long long)o, (long long)n, (long long)pr->base, (long long)(pr->base + pr->bytes));
      if (mo < mr->base || mo + 4 * sh > mr->base + mr->bytes ||
          (k && mo < g->zpart[k - 1].moff + 4 * g->zpart[k - 1].shard))
        return rt_prog_err(
            s, "zero_part %d: @%lld + %lld floats is not a shard of region adam_m [%lld, %lld) after the last", k,
            (long long)mo, (long long)sh, (long long)mr->base, (long long)(mr->base + mr->bytes));
      shards += 4 * sh;
    }
    if (g->zero && (mr->bytes != shards || g->reg[RT_REG_ADAM_V].bytes != shards))
      return rt_prog_err(s, "regions adam_m and adam_v have %lld and %lld bytes: with zero, the %lld of the shards",
                         (long long)mr->bytes, (long long)g->reg[RT_REG_ADAM_V].bytes, (long long)shards);
    for (int r = RT_REG_GRADS; r <= RT_REG_ADAM_V; r++)
      if (g->zero && r != RT_REG_GRADS) continue; /* the moments: checked above */
      else if (g->generate && g->reg[r].bytes)
        return rt_prog_err(s, "region %s (line %d) has %lld bytes: a generation program has no gradients or moments",
                           rt_region_name(r), s->reg_line[r], (long long)g->reg[r].bytes);
      else if (!g->generate && (r == RT_REG_GRADS ? g->reg[r].bytes < g->reg[RT_REG_PARAMS].bytes
                                                  : g->reg[r].bytes != g->reg[RT_REG_PARAMS].bytes))
        return rt_prog_err(s, "region %s (line %d) has %lld bytes, region params %lld: they share one layout%s",
                           rt_region_name(r), s->reg_line[r], (long long)g->reg[r].bytes,
                           (long long)g->reg[RT_REG_PARAMS].bytes,
                           r == RT_REG_GRADS ? " (grads may hold more after it: a tied embedding's gradient)" : "");
    for (int a = 0; a < RT_NREG; a++)
      for (int b = a + 1; b < RT_NREG; b++) {
        if (end[a] == g->reg[a].base || end[b] == g->reg[b].base) continue; /* empty */
        if (g->reg[a].base < end[b] && g->reg[b].base < end[a])
          return rt_prog_err(s, "regions %s (line %d) and %s (line %d) overlap", rt_region_name(a), s->reg_line[a],
                             rt_region_name(b), s->reg_line[b]);
      }
    s->sec = SEC_BOUNDARIES;
    return 0;
  }
  return rt_prog_err(s, "expected 'region ...' or 'arena BYTES' after the header, found '%.60s'", s->f[0]);
}

/* ---- params and buffers -------------------------------------------------------------------- */

#define PARAM_FORM                                                                                                     \
  "param INDEX NAME f32 [SHAPE] @OFF init INIT decay 0|1 [tied] [shared] [copy] [replica] [shard DIM START LEN DENSE " \
  "[parts P]]"

/* `shard DIM START LEN DENSE [parts P]` at field i of a param line: the dense tensor is the local
 * one with dims[DIM] = DENSE; this rank holds rows [START, START + LEN) along DIM, those at or past
 * DENSE padding. LEN is the local dims[DIM]; the shard starts inside the dense tensor. With parts P
 * (a fused projection split in parts, each over TP) LEN and DENSE are P blocks each, and local
 * block b is dense rows [b·DENSE/P + START, b·DENSE/P + START + LEN/P), inside the block: no
 * padding. The fields it takes: 4, or 6 with parts. */
static int shard_clause(RtParser *s, RtParam *q, int i, int *nfields) {
  static const char *const form = "shard DIM START LEN DENSE";
  const char *name = s->f[2];
  if (q->sharded) return rt_prog_err(s, "param %.200s: flag 'shard' given twice", name);
  if (i + 4 >= s->nf) return rt_prog_err(s, "param %.200s: '%s' needs 4 integers", name, form);
  int64_t dim, start, len, dense;
  if (rt_prog_want_int(s, i + 1, "shard: DIM", 0, RT_MAX_NDIM - 1, &dim) ||
      rt_prog_want_int(s, i + 2, "shard: START", 0, PP_MAX_NUMEL, &start) ||
      rt_prog_want_int(s, i + 3, "shard: LEN", 1, PP_MAX_NUMEL, &len) ||
      rt_prog_want_int(s, i + 4, "shard: DENSE", 1, PP_MAX_NUMEL, &dense))
    return -1;
  if (dim >= q->ndim)
    return rt_prog_err(s, "param %.200s: shard DIM %lld, but the param has %d dims", name, (long long)dim, q->ndim);
  if (len != q->dims[dim])
    return rt_prog_err(s, "param %.200s: shard LEN %lld is not the param's dim %lld (%lld)", name, (long long)len,
                       (long long)dim, (long long)q->dims[dim]);
  if (start >= dense)
    return rt_prog_err(s, "param %.200s: shard START %lld is not inside the dense dim %lld of %lld rows", name,
                       (long long)start, (long long)dim, (long long)dense);
  int64_t numel = q->numel / len;
  if (numel > PP_MAX_NUMEL / dense)
    return rt_prog_err(s, "param %.200s: the dense tensor has more than 2^40 elements", name);
  int64_t parts = 1;
  *nfields = 4;
  if (i + 5 < s->nf && !strcmp(s->f[i + 5], "parts")) {
    if (i + 6 >= s->nf) return rt_prog_err(s, "param %.200s: 'parts' needs an integer P >= 2", name);
    if (rt_prog_want_int(s, i + 6, "shard: parts P", 2, PP_MAX_NUMEL, &parts)) return -1;
    if (dense % parts || len % parts)
      return rt_prog_err(s,
                         "param %.200s: shard parts %lld does not divide LEN %lld and DENSE %lld (each is %lld blocks)",
                         name, (long long)parts, (long long)len, (long long)dense, (long long)parts);
    if (start + len / parts > dense / parts)
      return rt_prog_err(s,
                         "param %.200s: shard START %lld + LEN/parts %lld passes a part's %lld dense rows (a shard in "
                         "parts has no padding)",
                         name, (long long)start, (long long)(len / parts), (long long)(dense / parts));
    *nfields = 6;
  }
  q->sharded = 1;
  q->shard_parts = (int)parts;
  q->shard_dim = (int)dim;
  q->shard_start = start;
  q->shard_dense = dense;
  memcpy(q->dense_dims, q->dims, sizeof q->dims);
  q->dense_dims[dim] = dense;
  q->dense_numel = numel * dense;
  return 0;
}

int rt_prog_param_line(RtParser *s) {
  RtProg *g = s->p;
  if (rt_prog_grow(s, (void **)&g->params, &s->cap_params, g->nparams + 1, sizeof *g->params)) return -1;
  RtParam *q = &g->params[g->nparams];
  memset(q, 0, sizeof *q);
  q->line = s->line;
  int64_t idx;
  if (rt_prog_want_int(s, 1, "param: index", 0, INT32_MAX, &idx)) return -1;
  q->index = (int)idx;
  if (s->nf < 10) return rt_prog_err(s, "expected '%s'", PARAM_FORM);
  if (pp_name_bad_at(s->f[2]) >= 0) return rt_prog_err(s, "param: '%.60s' is not a checkpoint name", s->f[2]);
  for (int i = 0; i < g->nparams; i++)
    if (!strcmp(g->params[i].name, s->f[2]))
      return rt_prog_err(s, "param: checkpoint name '%.200s' is already param %d (line %d)", s->f[2], i,
                         g->params[i].line);
  if (strcmp(s->f[3], "f32") != 0)
    return rt_prog_err(s, "param %.200s: dtype '%.60s': this ppr runs f32 parameters only", s->f[2], s->f[3]);
  if (parse_shape(s, s->f[4], &q->ndim, q->dims, &q->numel)) return -1;
  RtPtr p;
  if (rt_prog_parse_ptr(s, s->f[5], "param: offset", &p, NULL)) return -1;
  if (p.in_slot)
    return rt_prog_err(s, "param %.200s: the offset is an arena offset @OFF, not '%.60s'", s->f[2], s->f[5]);
  q->off = p.off;
  const RtRegion *pr = &g->reg[RT_REG_PARAMS];
  if (q->off % 64)
    return rt_prog_err(s, "param %.200s: offset %lld is not a multiple of 64", s->f[2], (long long)q->off);
  if (q->off < pr->base || q->numel * 4 > pr->bytes || q->off - pr->base > pr->bytes - q->numel * 4)
    return rt_prog_err(s, "param %.200s: @%lld + %lld bytes is not inside the params region [%lld, %lld)", s->f[2],
                       (long long)q->off, (long long)(q->numel * 4), (long long)pr->base,
                       (long long)(pr->base + pr->bytes));
  int i = 6;
  if (rt_prog_want_word(s, i++, "init", PARAM_FORM)) return -1;
  if (!strcmp(s->f[i], "normal")) {
    q->init = RT_INIT_NORMAL;
    if (i + 1 >= s->nf || rt_prog_parse_double(s->f[i + 1], &q->std) || q->std < 0)
      return rt_prog_err(s, "param %.200s: init normal needs its standard deviation, a finite number >= 0", s->f[2]);
    i += 2;
  } else if (!strcmp(s->f[i], "ones")) {
    q->init = RT_INIT_ONES;
    i++;
  } else if (!strcmp(s->f[i], "zeros")) {
    q->init = RT_INIT_ZEROS;
    i++;
  } else {
    return rt_prog_err(s, "param %.200s: init '%.60s' (expected normal STD, ones or zeros)", s->f[2], s->f[i]);
  }
  int64_t d;
  if (rt_prog_want_word(s, i++, "decay", PARAM_FORM) || rt_prog_want_int(s, i++, "param: decay", 0, 1, &d)) return -1;
  q->decay = (int)d;
  for (; i < s->nf; i++) { /* flags, in any order, each at most once */
    if (!strcmp(s->f[i], "shard")) {
      int nfields;
      if (shard_clause(s, q, i, &nfields)) return -1;
      i += nfields;
      continue;
    }
    if (!strcmp(s->f[i], "parts"))
      return rt_prog_err(s, "param %.200s: 'parts P' belongs after 'shard DIM START LEN DENSE'", s->f[2]);
    int *flag = !strcmp(s->f[i], "tied")      ? &q->tied
                : !strcmp(s->f[i], "shared")  ? &q->shared
                : !strcmp(s->f[i], "copy")    ? &q->copy
                : !strcmp(s->f[i], "replica") ? &q->replica
                                              : NULL;
    if (!flag)
      return rt_prog_err(s,
                         "param %.200s: unexpected '%.60s' at the end of the line (flags: tied, shared, copy, replica, "
                         "shard DIM START LEN DENSE [parts P])",
                         s->f[2], s->f[i]);
    if (*flag) return rt_prog_err(s, "param %.200s: flag '%s' given twice", s->f[2], s->f[i]);
    *flag = 1;
  }
  if (!q->sharded) {
    q->shard_parts = 1;
    memcpy(q->dense_dims, q->dims, sizeof q->dims);
    q->dense_numel = q->numel;
  }
  if (q->copy && !q->shared)
    return rt_prog_err(s, "param %.200s: 'copy' without 'shared' (a copy is of a tensor another stage owns)", s->f[2]);
  if (q->shared && g->pp == 1)
    return rt_prog_err(s, "param %.200s: shared, but the mesh has one pipeline stage (pp 1)", s->f[2]);
  if (q->shared) g->nshared++;
  q->owned = !q->copy && !q->replica;
  if (q->tied) {
    if (g->tied >= 0)
      return rt_prog_err(s, "param %.200s: a second tied param (%.200s is tied)", s->f[2], g->params[g->tied].name);
    if (q->ndim != 2) return rt_prog_err(s, "param %.200s: a tied param is a [vocab, hidden] matrix", s->f[2]);
    if (q->dense_dims[0] != g->vocab)
      return rt_prog_err(s, "param %.200s: tied, so its first dim %lld must be the vocab %lld", s->f[2],
                         (long long)q->dense_dims[0], (long long)g->vocab);
    g->tied = g->nparams;
  }
  q->name = rt_prog_strdup(s->f[2]);
  S_ALLOC(q->name);
  g->nparams++;
  return 0;
}

static int cmp_param_off(const void *a, const void *b) {
  const RtParam *x = *(const RtParam *const *)a, *y = *(const RtParam *const *)b;
  return x->off < y->off ? -1 : x->off > y->off;
}

static int cmp_param_index(const void *a, const void *b) {
  const RtParam *x = a, *y = b;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* At the end of the param lines: indices 0..n-1 (any order; stored by index), no overlaps. */
int rt_prog_finish_params(RtParser *s) {
  RtProg *g = s->p;
  if (g->nparams == 0) return 0;
  int line = s->line;
  qsort(g->params, (size_t)g->nparams, sizeof *g->params, cmp_param_index);
  for (int i = 0; i < g->nparams; i++) {
    if (g->params[i].index == i) continue;
    s->line = g->params[i].line;
    if (i > 0 && g->params[i].index == g->params[i - 1].index)
      return rt_prog_err(s, "param index %d is given twice (also on line %d)", g->params[i].index,
                         g->params[i - 1].line);
    return rt_prog_err(s, "param index %d, but there are %d params (indices 0..%d, each once)", g->params[i].index,
                       g->nparams, g->nparams - 1);
  }
  s->line = line;
  g->tied = -1;
  for (int i = 0; i < g->nparams; i++)
    if (g->params[i].tied) g->tied = i;
  if (g->nparams < 2) return 0;
  const RtParam **v = malloc((size_t)g->nparams * sizeof *v);
  S_ALLOC(v);
  for (int i = 0; i < g->nparams; i++) v[i] = &g->params[i];
  qsort(v, (size_t)g->nparams, sizeof *v, cmp_param_off);
  for (int i = 1; i < g->nparams; i++)
    if (v[i - 1]->off + v[i - 1]->numel * 4 > v[i]->off) {
      s->line = v[i]->line > v[i - 1]->line ? v[i]->line : v[i - 1]->line;
      int rc = rt_prog_err(s, "params %.200s (line %d) and %.200s (line %d) overlap", v[i - 1]->name, v[i - 1]->line,
                           v[i]->name, v[i]->line);
      free(v);
      return rc;
    }
  free(v);
  return 0;
}

int rt_prog_buffer_line(RtParser *s) {
  if (s->nf < 5) return rt_prog_err(s, "expected 'buffer NAME f32|i32|bf16 [SHAPE] @OFF|$OFF [FLAG...]'");
  if (pp_name_bad_at(s->f[1]) >= 0) return rt_prog_err(s, "buffer: '%.60s' is not a name", s->f[1]);
  int dtype = pp_dtype_parse(s->f[2]);
  if (dtype < 0) return rt_prog_err(s, "buffer %.100s: dtype '%.60s' (expected f32, i32 or bf16)", s->f[1], s->f[2]);
  int ndim;
  int64_t dims[RT_MAX_NDIM], numel;
  RtPtr p;
  char what[160];
  snprintf(what, sizeof what, "buffer %.100s", s->f[1]);
  if (parse_shape(s, s->f[3], &ndim, dims, &numel) || rt_prog_parse_ptr(s, s->f[4], what, &p, NULL) ||
      rt_prog_check_extent(s, what, &p, numel * pp_dtype_bytes(dtype)))
    return -1;
  for (int i = 5; i < s->nf; i++)
    if (pp_name_bad_at(s->f[i]) >= 0)
      return rt_prog_err(s, "buffer %.100s: flag '%.60s' is not a word", s->f[1], s->f[i]);
  RtProg *g = s->p;
  if (rt_prog_grow(s, (void **)&g->buffers, &s->cap_buffers, g->nbuffers + 1, sizeof *g->buffers)) return -1;
  RtBuffer *b = &g->buffers[g->nbuffers];
  b->name = rt_prog_strdup(s->f[1]);
  S_ALLOC(b->name);
  b->dtype = (PpDType)dtype;
  b->ptr = p;
  b->bytes = numel * pp_dtype_bytes(dtype);
  g->nbuffers++;
  return 0;
}

/* ---- pipeline boundaries and the model's params --------------------------------------------- */

/* boundary KIND[:C] OPERAND BYTES [SHAPE [TYPE]] (TYPE f32 when not given) */
int rt_prog_boundary_line(RtParser *s) {
  RtProg *g = s->p;
  static const char *const form = "boundary recv_fwd|send_fwd|recv_bwd|send_bwd[:C] OPERAND BYTES [SHAPE [f32|bf16]]";
  if (s->nf < 4 || s->nf > 6) return rt_prog_err(s, "expected '%s'", form);
  int k = -1, c = 0;
  if (rt_prog_chunk_suffix(s, s->f[1], &c)) return -1;
  for (int i = 0; i < PP_NBND; i++)
    if (!strcmp(s->f[1], pp_boundary_name(i))) k = i;
  if (k < 0)
    return rt_prog_err(s, "boundary: unknown kind '%.60s' (expected recv_fwd, send_fwd, recv_bwd or send_bwd)",
                       s->f[1]);
  RtBoundary *b = rt_prog_boundary_w(g, c, k);
  char what[64];
  if (g->nchunks > 1) snprintf(what, sizeof what, "boundary %s:%d", pp_boundary_name(k), c);
  else snprintf(what, sizeof what, "boundary %s", pp_boundary_name(k));
  if (b->present) return rt_prog_err(s, "%s is given twice (first on line %d)", what, b->line);
  if (rt_prog_parse_ptr(s, s->f[2], what, &b->ptr, NULL) ||
      rt_prog_want_int(s, 3, "boundary: bytes", 4, (int64_t)4 * INT32_MAX, &b->bytes))
    return -1;
  int dt = s->nf == 6 ? pp_dtype_parse(s->f[5]) : PP_F32;
  if (dt != PP_F32 && dt != PP_BF16) return rt_prog_err(s, "%s: type '%.60s' (expected f32 or bf16)", what, s->f[5]);
  if (b->bytes % pp_dtype_bytes(dt))
    return rt_prog_err(s, "%s: %lld bytes is not a whole number of %s elements", what, (long long)b->bytes,
                       pp_dtype_name(dt));
  if (k == PP_RECV_FWD && !b->ptr.in_slot)
    return rt_prog_err(s, "%s: '%.60s': the received hidden state lives in the micro-batch's slot ($OFF)", what,
                       s->f[2]);
  if (rt_prog_check_extent(s, what, &b->ptr, b->bytes)) return -1;
  b->ndim = -1;
  if (s->nf >= 5) {
    int64_t numel;
    if (parse_shape(s, s->f[4], &b->ndim, b->dims, &numel)) return -1;
    if (numel * pp_dtype_bytes(dt) != b->bytes)
      return rt_prog_err(s, "%s: shape %.60s is %lld bytes of %s, not %lld", what, s->f[4],
                         (long long)(numel * pp_dtype_bytes(dt)), pp_dtype_name(dt), (long long)b->bytes);
  }
  /* which neighbour the message goes to or comes from */
  int to_prev = k == PP_RECV_FWD || k == PP_SEND_BWD;
  const RtChunk *ch = &g->chunk[c];
  if ((to_prev ? ch->prev : ch->next) < 0) {
    if (g->nchunks > 1)
      return rt_prog_err(s, "%s: chunk %d (vstage %d) has no %s virtual stage (prev %d next %d)", what, c, ch->vstage,
                         to_prev ? "previous" : "next", ch->prev, ch->next);
    return rt_prog_err(s, "%s: stage %d has no %s stage (peers prev %d next %d)", what, g->stage,
                       to_prev ? "previous" : "next", g->prev, g->next);
  }
  b->present = 1;
  b->line = s->line;
  return 0;
}

/* After the boundary lines: a chunk with a previous (virtual) stage receives its input and sends
 * back its gradient; one with a next stage sends its output and receives that output's gradient.
 * A generation program's chunks send and receive forward only. */
int rt_prog_finish_boundaries(RtParser *s) {
  RtProg *g = s->p;
  for (int c = 0; c < g->nchunks; c++)
    for (int k = 0; k < PP_NBND; k++) {
      int to_prev = k == PP_RECV_FWD || k == PP_SEND_BWD, bwd = k == PP_RECV_BWD || k == PP_SEND_BWD;
      const RtChunk *ch = &g->chunk[c];
      int peer = to_prev ? ch->prev : ch->next;
      const RtBoundary *b = rt_prog_boundary(g, c, k);
      if (g->generate && bwd && b->present) {
        s->line = b->line;
        return rt_prog_err(s, "boundary %s: a generation program (schedule %s) sends and receives forward only",
                           pp_boundary_name(k), PP_SCHED_FORWARD);
      }
      if (peer < 0 || b->present || (g->generate && bwd)) continue;
      if (g->nchunks > 1)
        return rt_prog_err(s,
                           "no 'boundary %s:%d' line before this one: chunk %d (vstage %d) has a %s virtual stage "
                           "(rank %d)",
                           pp_boundary_name(k), c, c, ch->vstage, to_prev ? "previous" : "next", peer);
      return rt_prog_err(s, "no 'boundary %s' line before this one: stage %d has a %s stage (rank %d)",
                         pp_boundary_name(k), g->stage, to_prev ? "previous" : "next", peer);
    }
  return 0;
}

/* model_param NAME [SHAPE] */
int rt_prog_model_line(RtParser *s) {
  RtProg *g = s->p;
  if (rt_prog_want_nf(s, 3, "model_param NAME [SHAPE]")) return -1;
  if (pp_name_bad_at(s->f[1]) >= 0) return rt_prog_err(s, "model_param: '%.60s' is not a checkpoint name", s->f[1]);
  for (int i = 0; i < g->nmodel; i++)
    if (!strcmp(g->mparams[i].name, s->f[1]))
      return rt_prog_err(s, "model_param %.200s is given twice (first on line %d)", s->f[1], g->mparams[i].line);
  if (rt_prog_grow(s, (void **)&g->mparams, &s->cap_model, g->nmodel + 1, sizeof *g->mparams)) return -1;
  RtModelParam *m = &g->mparams[g->nmodel];
  memset(m, 0, sizeof *m);
  int64_t numel;
  if (parse_shape(s, s->f[2], &m->ndim, m->dims, &numel)) return -1;
  m->line = s->line;
  m->name = rt_prog_strdup(s->f[1]);
  S_ALLOC(m->name);
  g->nmodel++;
  return 0;
}

/* After the model_param lines (if any): each of this rank's params is one of them, same shape. */
int rt_prog_finish_model(RtParser *s) {
  RtProg *g = s->p;
  if (g->nmodel == 0) return 0;
  int line = s->line;
  for (int i = 0; i < g->nparams; i++) {
    const RtParam *q = &g->params[i];
    const RtModelParam *m = NULL;
    for (int j = 0; j < g->nmodel && !m; j++)
      if (!strcmp(g->mparams[j].name, q->name)) m = &g->mparams[j];
    s->line = q->line;
    if (!m)
      return rt_prog_err(s, "param %.200s is not one of the model's params (no model_param line names it)", q->name);
    int same = m->ndim == q->ndim;
    for (int d = 0; same && d < q->ndim; d++) same = m->dims[d] == q->dense_dims[d];
    if (!same)
      return rt_prog_err(s, "param %.200s: its %sshape differs from its model_param line (line %d)", q->name,
                         q->sharded ? "dense " : "", m->line);
  }
  s->line = line;
  return 0;
}
