/* rt_init.c - parameter initialisation: the mesh-independent seeded normal, ones, zeros, or a checkpoint (a safetensors
 * file, a sharded checkpoint's index, a model folder; rt_ckpt.c), its names mapped to the model's. */
#include "rt_exec.h"
#include "rt_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIED_HEAD_NAME "lm_head.weight"

uint64_t rt_splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t tensor_key(uint64_t seed, const char *name) {
  return rt_splitmix64(seed ^ rt_fnv1a64(name, strlen(name)));
}

static float normal_at(uint64_t key, int64_t i, double std) {
  uint64_t a = rt_splitmix64(key + 2 * (uint64_t)i);
  uint64_t b = rt_splitmix64(key + 2 * (uint64_t)i + 1);
  double u1 = (double)((a >> 11) + 1) * 0x1p-53; /* (0, 1] */
  double u2 = (double)(b >> 11) * 0x1p-53;       /* [0, 1) */
  return (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

float rt_init_normal_value(uint64_t seed, const char *name, int64_t i, double std) {
  return normal_at(tensor_key(seed, name), i, std);
}

/* A shard as blocks: `outer` blocks of `len` rows of `inner` elements; local row r of block o is
 * dense row start + r of it (dense rows `dense` per block). A whole tensor is one block; a shard
 * in P parts is P times the blocks, each 1/P of the rows. */
typedef struct {
  int64_t outer, len, inner, start, dense;
} Shard;

static Shard shard_of(const RtParam *q) {
  Shard h = {1, q->numel, 1, 0, q->numel};
  if (!q->sharded) return h;
  h.len = q->dims[q->shard_dim];
  for (int d = 0; d < q->shard_dim; d++) h.outer *= q->dims[d];
  for (int d = q->shard_dim + 1; d < q->ndim; d++) h.inner *= q->dims[d];
  h.start = q->shard_start;
  h.dense = q->shard_dense;
  h.outer *= q->shard_parts;
  h.len /= q->shard_parts;
  h.dense /= q->shard_parts;
  return h;
}

/* Rows of the shard inside the dense tensor (the rest is padding). */
static int64_t real_rows(const Shard *h) {
  int64_t n = h->dense - h->start;
  return n < h->len ? n : h->len;
}

/* The largest param's element count: one host buffer serves them all. */
static int64_t max_numel(const RtProg *p) {
  int64_t n = 1;
  for (int k = 0; k < p->nparams; k++)
    if (p->params[k].numel > n) n = p->params[k].numel;
  return n;
}

int rt_init_seed(const RtProg *p, RtExec *x, uint64_t seed, char *err, size_t errlen) {
  float *v = malloc((size_t)max_numel(p) * sizeof *v);
  RT_CHECK_ALLOC(v);
  for (int k = 0; k < p->nparams; k++) {
    const RtParam *q = &p->params[k];
    /* every local element takes the value of its element of the dense tensor: dense row
     * start + r of block o; padding rows (at or past the dense rows) are 0 */
    Shard h = shard_of(q);
    int64_t real = real_rows(&h);
    memset(v, 0, (size_t)q->numel * sizeof *v);
    uint64_t key = tensor_key(seed, q->name);
    for (int64_t o = 0; o < h.outer; o++)
      for (int64_t r = 0; r < real; r++) {
        float *row = v + (o * h.len + r) * h.inner;
        int64_t di = (o * h.dense + h.start + r) * h.inner;
        switch (q->init) {
        case RT_INIT_NORMAL:
          for (int64_t j = 0; j < h.inner; j++) row[j] = normal_at(key, di + j, q->std);
          break;
        case RT_INIT_ONES:
          for (int64_t j = 0; j < h.inner; j++) row[j] = 1.0f;
          break;
        case RT_INIT_ZEROS: break;
        }
      }
    if (rt_exec_write_param(x, k, v, err, errlen)) {
      free(v);
      return -1;
    }
  }
  free(v);
  return 0;
}

/* Read param q's values (its shard of the dense tensor t of file f, padding rows 0) into dst, the
 * tensor's checksum checked first. */
static int read_param(const RtStFile *f, int t, const RtParam *q, float *dst, char *err, size_t errlen) {
  if (rt_st_verify(f, t, err, errlen)) return -1; /* the whole tensor, whatever part of it this rank reads */
  if (!q->sharded) return rt_st_read_f32(f, t, dst, (size_t)q->numel, err, errlen);
  int64_t start[RT_MAX_NDIM] = {0}, len[RT_MAX_NDIM];
  memcpy(len, q->dims, sizeof len);
  Shard h = shard_of(q);
  int64_t real = real_rows(&h), P = q->shard_parts;
  start[q->shard_dim] = q->shard_start;
  len[q->shard_dim] = real;
  memset(dst, 0, (size_t)q->numel * sizeof *dst);
  if (real == h.len && P == 1) return rt_st_read_f32_slice(f, t, start, len, dst, (size_t)q->numel, err, errlen);
  /* padding rows or parts: read each part's real rows (h.outer / P blocks of them), then spread
   * them over its blocks (block o·P + b of the local tensor is block o of part b) */
  size_t n = (size_t)(h.outer / P * real * h.inner);
  float *tmp = malloc(n ? n * sizeof *tmp : 1);
  RT_CHECK_ALLOC(tmp);
  int rc = 0;
  for (int64_t b = 0; b < P && !rc; b++) {
    start[q->shard_dim] = b * h.dense + q->shard_start;
    rc = rt_st_read_f32_slice(f, t, start, len, tmp, n, err, errlen);
    for (int64_t o = 0; o < h.outer / P && !rc; o++)
      memcpy(dst + (o * P + b) * h.len * h.inner, tmp + o * real * h.inner, (size_t)(real * h.inner) * sizeof *dst);
  }
  free(tmp);
  return rc;
}

/* ---- loading a checkpoint ------------------------------------------------------------------ */

/* A growing message: lines of problems, each starting with the file name. */
typedef struct {
  char *b;
  size_t n, cap;
  int oom;
} Msg;

static void msg_add(Msg *m, const char *fmt, ...) RT_FMT(2, 3);
static void msg_add(Msg *m, const char *fmt, ...) {
  if (m->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(m->b ? m->b + m->n : NULL, m->b ? m->cap - m->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
      m->oom = 1;
      return;
    }
    if (m->b && m->n + (size_t)k < m->cap) {
      m->n += (size_t)k;
      return;
    }
    size_t nc = m->cap ? m->cap * 2 : 1024;
    while (nc < m->n + (size_t)k + 1) nc *= 2;
    char *nb = realloc(m->b, nc);
    if (!nb) {
      m->oom = 1;
      return;
    }
    m->b = nb;
    m->cap = nc;
  }
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *dims) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* A tensor of the checkpoint: its file and its index there. */
typedef struct {
  const RtStFile *f;
  int i;
} CkT;

static CkT ck_at(const RtCkpt *c, int t) {
  CkT r = {NULL, -1};
  r.f = rt_ckpt_file(c, t, &r.i);
  return r;
}

static int same_shape(const RtCkpt *c, int t, int ndim, const int64_t *dims) {
  CkT k = ck_at(c, t);
  int64_t fd[RT_ST_MAX_NDIM];
  int fn = rt_st_shape(k.f, k.i, fd, RT_ST_MAX_NDIM);
  if (fn != ndim) return 0;
  for (int i = 0; i < ndim; i++)
    if (fd[i] != dims[i]) return 0;
  return 1;
}

static void file_shape(const RtCkpt *c, int t, char *buf, size_t n) {
  CkT k = ck_at(c, t);
  int64_t fd[RT_ST_MAX_NDIM];
  int fn = rt_st_shape(k.f, k.i, fd, RT_ST_MAX_NDIM);
  shape_str(buf, n, fn < 0 ? 0 : fn, fd);
}

static int finish_msg(Msg *m, char *err, size_t errlen) {
  int rc = 0;
  if (m->oom) rc = RT_FAIL("out of memory");
  else if (m->n) {
    while (m->n && m->b[m->n - 1] == '\n') m->b[--m->n] = 0;
    rt_util_set_err(err, errlen, "%s", m->b);
    rc = -1;
  }
  free(m->b);
  return rc;
}

/* Is name one of the model's params (the model_param lines, or this rank's params without them)? */
static int model_index(const RtProg *p, const char *name) {
  if (p->nmodel > 0) {
    for (int k = 0; k < p->nmodel; k++)
      if (!strcmp(p->mparams[k].name, name)) return k;
    return -1;
  }
  for (int k = 0; k < p->nparams; k++)
    if (!strcmp(p->params[k].name, name)) return k;
  return -1;
}

static int own_index(const RtProg *p, const char *name) {
  for (int k = 0; k < p->nparams; k++)
    if (!strcmp(p->params[k].name, name)) return k;
  return -1;
}

/* ---- the checkpoint's names against the model's ----------------------------------------- */

/* How the checkpoint names the model's params: as they are, or (strip) those starting with the
 * listing's checkpoint_prefix without it. */
typedef struct {
  const RtProg *p;
  const RtCkpt *c;
  const char *prefix; /* NULL: none */
  size_t plen;
  int strip;
  char buf[PP_MAX_NAME * 2 + 2];
} Names;

/* The checkpoint's tensor for the model's param name, -1 if none. */
static int ck_find(const Names *nm, const char *name) {
  if (nm->strip && !strncmp(name, nm->prefix, nm->plen)) return rt_ckpt_find(nm->c, name + nm->plen);
  return rt_ckpt_find(nm->c, name);
}

/* The model's name for the checkpoint's tensor name: with the prefix when that is a model param. */
static const char *model_name(Names *nm, const char *name) {
  if (!nm->strip) return name;
  snprintf(nm->buf, sizeof nm->buf, "%s%s", nm->prefix, name);
  return model_index(nm->p, nm->buf) >= 0 ? nm->buf : name;
}

/* Known non-parameter buffers of transformers' state dicts: 1 rotary inv_freq, 2 an attention mask
 * (GPT-2's attn.bias and attn.masked_bias); 0 otherwise. */
static int buffer_kind(const char *name) {
  size_t n = strlen(name);
  static const struct {
    const char *suffix;
    int kind;
  } known[] = {{"rotary_emb.inv_freq", 1}, {".attn.bias", 2}, {".attn.masked_bias", 2}};
  for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
    size_t m = strlen(known[k].suffix);
    if (n >= m && !strcmp(name + n - m, known[k].suffix) && (known[k].kind == 2 || n == m || name[n - m - 1] == '.'))
      return known[k].kind;
  }
  return 0;
}

int rt_init_load(const RtProg *p, RtExec *x, const char *path, int model_tied, RtInitInfo *info, char *err,
                 size_t errlen) {
  RtCkpt *c = NULL;
  RtInitInfo none;
  if (!info) info = &none;
  memset(info, 0, sizeof *info);
  if (rt_ckpt_open(path, &c, err, errlen)) return -1;
  Msg m = {0};
  int nt = rt_ckpt_count(c);
  int head = -1; /* lm_head.weight, checked against this rank's tied param */
  Names *nm = calloc(1, sizeof *nm);
  if (!nm) {
    rt_ckpt_close(c);
    return RT_FAIL("out of memory");
  }
  nm->p = p;
  nm->c = c;
  if (p->ckpt_prefix) { /* strip: no checkpoint name has the prefix, and some model name has */
    nm->prefix = p->ckpt_prefix;
    nm->plen = strlen(p->ckpt_prefix);
    int any_ck = 0, any_model = 0;
    for (int t = 0; t < nt && !any_ck; t++) any_ck = !strncmp(rt_ckpt_name(c, t), nm->prefix, nm->plen);
    for (int k = 0; k < p->nmodel && !any_model; k++) any_model = !strncmp(p->mparams[k].name, nm->prefix, nm->plen);
    for (int k = 0; k < p->nparams && !any_model; k++) any_model = !strncmp(p->params[k].name, nm->prefix, nm->plen);
    nm->strip = nt > 0 && !any_ck && any_model;
  }
  info->stripped = nm->strip;

  /* missing tensors (of this rank's params), all in one line */
  int nmiss = 0;
  for (int k = 0; k < p->nparams; k++)
    if (ck_find(nm, p->params[k].name) < 0) nmiss++;
  if (nmiss) {
    msg_add(&m, "%s: %d tensor%s missing:", path, nmiss, nmiss > 1 ? "s" : "");
    for (int k = 0, j = 0; k < p->nparams; k++)
      if (ck_find(nm, p->params[k].name) < 0) msg_add(&m, "%s %s", j++ ? "," : "", p->params[k].name);
    if (nm->strip) msg_add(&m, " (looked up without the prefix '%s', which no tensor of the file has)", nm->prefix);
    msg_add(&m, "\n");
  }
  /* wrong shapes: this rank's params, then the rest of the model */
  for (int k = 0; k < p->nparams; k++) {
    const RtParam *q = &p->params[k];
    int t = ck_find(nm, q->name);
    if (t < 0 || same_shape(c, t, q->ndim, q->dense_dims)) continue;
    char a[256], b[256];
    file_shape(c, t, a, sizeof a);
    shape_str(b, sizeof b, q->ndim, q->dense_dims);
    msg_add(&m, "%s: tensor %s has shape %s, the program's param %d needs %s%s\n", path, rt_ckpt_name(c, t), a, k, b,
            q->sharded ? " (the dense tensor; this rank holds a shard of it)" : "");
  }
  for (int k = 0; k < p->nmodel; k++) {
    const RtModelParam *q = &p->mparams[k];
    int t = ck_find(nm, q->name);
    if (t < 0 || own_index(p, q->name) >= 0 || same_shape(c, t, q->ndim, q->dims)) continue;
    char a[256], b[256];
    file_shape(c, t, a, sizeof a);
    shape_str(b, sizeof b, q->ndim, q->dims);
    msg_add(&m, "%s: tensor %s has shape %s, the model's param (model_param, line %d) is %s\n", path,
            rt_ckpt_name(c, t), a, q->line, b);
  }
  /* extra tensors (not the model's), all in one line; known buffers skipped */
  int nextra = 0;
  for (int t = 0; t < nt; t++) {
    const char *name = model_name(nm, rt_ckpt_name(c, t));
    if (model_index(p, name) >= 0) continue;
    if (model_tied && !strcmp(name, TIED_HEAD_NAME)) {
      if (p->tied >= 0) head = t;
      continue;
    }
    int kind = buffer_kind(name);
    if (kind) {
      info->skipped++;
      info->rotary += kind == 1;
      info->mask += kind == 2;
      continue;
    }
    nextra++;
  }
  if (nextra) {
    msg_add(&m, "%s: %d tensor%s the program has no param for:", path, nextra, nextra > 1 ? "s" : "");
    for (int t = 0, j = 0; t < nt; t++) {
      const char *name = model_name(nm, rt_ckpt_name(c, t));
      if (model_index(p, name) >= 0 || (model_tied && !strcmp(name, TIED_HEAD_NAME)) || buffer_kind(name)) continue;
      msg_add(&m, "%s %s", j++ ? "," : "", rt_ckpt_name(c, t));
    }
    if (!model_tied && rt_ckpt_find(c, TIED_HEAD_NAME) >= 0 && model_index(p, TIED_HEAD_NAME) < 0)
      msg_add(&m, " (%s is accepted only when a param is tied)", TIED_HEAD_NAME);
    msg_add(&m, "\n");
  }
  if (head >= 0) {
    const RtParam *q = &p->params[p->tied];
    if (!same_shape(c, head, q->ndim, q->dense_dims)) {
      char a[256], b[256];
      file_shape(c, head, a, sizeof a);
      shape_str(b, sizeof b, q->ndim, q->dense_dims);
      msg_add(&m, "%s: tensor %s has shape %s, but the head is tied to %s %s\n", path, TIED_HEAD_NAME, a, q->name, b);
      head = -1;
    }
  }
  int rc = finish_msg(&m, err, errlen);
  float *v = rc ? NULL : malloc((size_t)max_numel(p) * sizeof *v);
  if (!rc && !v) rc = RT_FAIL("out of memory");
  for (int k = 0; k < p->nparams && !rc; k++) {
    const RtParam *q = &p->params[k];
    CkT at = ck_at(c, ck_find(nm, q->name));
    rc = read_param(at.f, at.i, q, v, err, errlen) || rt_exec_write_param(x, k, v, err, errlen) ? -1 : 0;
  }
  if (!rc && head >= 0) {
    const RtParam *q = &p->params[p->tied];
    float *e = v;
    float *h = malloc((size_t)q->numel * sizeof *h);
    CkT at = ck_at(c, head);
    if (!h) rc = RT_FAIL("out of memory");
    else
      rc = read_param(at.f, at.i, q, h, err, errlen) ||
                   rt_exec_read_param(x, p->tied, 0, e, err, errlen) /* the same slice as the embedding's */
               ? -1
               : 0;
    Shard sh = shard_of(q);
    for (int64_t i = 0; i < q->numel && !rc; i++) {
      if (h[i] == e[i] || (isnan(h[i]) && isnan(e[i]))) continue;
      /* the element's dense index, for the message */
      int64_t o = i / (sh.len * sh.inner), r = i / sh.inner % sh.len, j = i % sh.inner;
      long long di = (long long)((o * sh.dense + sh.start + r) * sh.inner + j);
      rt_util_set_err(err, errlen,
                      "%s: tensor %s differs from %s at element %lld (%.9g vs %.9g): the head is tied to the "
                      "embedding, so a checkpoint may hold %s only as a copy of it",
                      path, TIED_HEAD_NAME, q->name, di, (double)h[i], (double)e[i], TIED_HEAD_NAME);
      rc = -1;
    }
    free(h);
  }
  free(v);
  free(nm);
  rt_ckpt_close(c);
  return rc;
}

/* ---- --resume: the AdamW moments ------------------------------------------------------------- */

static const char *const moment_prefix[2] = {"exp_avg.", "exp_avg_sq."};

/* The optimizer file's tensor for moment m (0: exp_avg, 1: exp_avg_sq) of param name, -1 if none. */
static int moment_find(const RtStFile *f, int m, const char *name) {
  char buf[PP_MAX_NAME + 16];
  snprintf(buf, sizeof buf, "%s%s", moment_prefix[m], name);
  return rt_st_find(f, buf);
}

static int st_same_shape(const RtStFile *f, int t, int ndim, const int64_t *dims) {
  int64_t fd[RT_ST_MAX_NDIM];
  if (rt_st_shape(f, t, fd, RT_ST_MAX_NDIM) != ndim) return 0;
  for (int i = 0; i < ndim; i++)
    if (fd[i] != dims[i]) return 0;
  return 1;
}

int rt_init_load_moments(const RtProg *p, RtExec *x, const char *path, char *err, size_t errlen) {
  RtStFile *f = NULL;
  if (rt_st_open(path, &f, err, errlen)) return -1;
  Msg m = {0};
  int nm = p->nmodel > 0 ? p->nmodel : p->nparams, matched = 0;
  for (int k = 0; k < nm; k++) {
    const char *name = p->nmodel > 0 ? p->mparams[k].name : p->params[k].name;
    int ndim = p->nmodel > 0 ? p->mparams[k].ndim : p->params[k].ndim;
    const int64_t *dims = p->nmodel > 0 ? p->mparams[k].dims : p->params[k].dense_dims;
    for (int j = 0; j < 2; j++) {
      int t = moment_find(f, j, name);
      char b[256], a[256];
      if (t < 0) {
        msg_add(&m, "%s: tensor %s%s missing (the model's param %s)\n", path, moment_prefix[j], name, name);
        continue;
      }
      matched++;
      if (st_same_shape(f, t, ndim, dims)) continue;
      int64_t fd[RT_ST_MAX_NDIM];
      int fn = rt_st_shape(f, t, fd, RT_ST_MAX_NDIM);
      shape_str(a, sizeof a, fn < 0 ? 0 : fn, fd);
      shape_str(b, sizeof b, ndim, dims);
      msg_add(&m, "%s: tensor %s has shape %s, the model's param %s is %s\n", path, rt_st_name(f, t), a, name, b);
    }
  }
  if (!m.n && matched != rt_st_count(f))
    msg_add(&m, "%s: %d tensors, expected exp_avg.NAME and exp_avg_sq.NAME of the model's %d params (%d)\n", path,
            rt_st_count(f), nm, 2 * nm);
  int rc = finish_msg(&m, err, errlen);
  float *v = rc ? NULL : malloc((size_t)max_numel(p) * sizeof *v);
  if (!rc && !v) rc = RT_FAIL("out of memory");
  for (int k = 0; k < p->nparams && !rc; k++)
    for (int j = 0; j < 2 && !rc; j++)
      rc = read_param(f, moment_find(f, j, p->params[k].name), &p->params[k], v, err, errlen) ||
                   rt_exec_write_region(x, k, j ? RT_REG_ADAM_V : RT_REG_ADAM_M, v, err, errlen)
               ? -1
               : 0;
  free(v);
  rt_st_close(f);
  return rc;
}
