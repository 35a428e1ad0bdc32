/* rt_safetensors.c - safetensors reader (header JSON parsed by jansson; F32/F16/BF16/F64 -> f32, slices); the F32
 * writer is rt_st_write.c. */
#include "rt_io.h"
#include "rt_st.h"
#include "rt_util.h"

#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

typedef struct {
  char *name;
  int dtype;
  int ndim;
  int64_t *dims; /* ndim entries; NULL for a scalar */
  int64_t numel;
  uint64_t begin, end; /* byte offsets into the data section */
  int has_sum;         /* the header records its checksum (RT_ST_SUM_KEY) */
  uint64_t sum;
} StTensor;

struct RtStFile {
  char *path;
  unsigned char *base; /* whole file */
  size_t size;
  int mapped; /* base is mmap'ed (else malloc'ed) */
  const unsigned char *data;
  uint64_t datalen;
  int n, cap;
  StTensor *t;
  StIdx *sorted; /* by name, for rt_st_find */
  int sums;      /* every tensor's checksum is in the header */
};

static const char *dtype_name(int dt) {
  switch (dt) {
  case RT_ST_F32: return "F32";
  case RT_ST_F16: return "F16";
  case RT_ST_BF16: return "BF16";
  case RT_ST_F64: return "F64";
  default: return NULL; /* an int: a tensor's dtype before it is known (-1) */
  }
}

static size_t dtype_size(int dt) { return dt == RT_ST_F64 ? 8 : dt == RT_ST_F32 ? 4 : 2; }

static uint64_t rd_le64(const unsigned char *b) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; k--) v = (v << 8) | b[k];
  return v;
}

static uint32_t rd_le32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint16_t rd_le16(const unsigned char *b) { return (uint16_t)(b[0] | b[1] << 8); }

/* ---------------- header JSON ---------------- */

static int json_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Where in the header a jansson error at byte pos is: a scan of the text jansson has read (its
 * syntax valid up to pos), strings skipped whole and brackets counted. */
typedef struct {
  int depth;             /* of the containers open at pos (the header object is depth 1) */
  size_t last_b, last_e; /* the last whole string before pos, quotes included; last_e 0: none */
  size_t key_b, key_e;   /* the header key whose value holds pos; key_e 0: none */
} StWhere;

static StWhere where_in_header(const unsigned char *h, size_t pos) {
  StWhere w = {0};
  size_t kb = 0, ke = 0; /* the last key string at depth 1 */
  int in_value = 0;      /* at depth 1: between a key's ':' and the next ',' */
  for (size_t i = 0; i < pos; i++) {
    unsigned char c = h[i];
    if (c == '"') {
      size_t b = i;
      for (i++; i < pos && h[i] != '"'; i++) i += h[i] == '\\';
      if (i >= pos) break;
      w.last_b = b;
      w.last_e = i + 1;
      if (w.depth == 1 && !in_value) kb = b, ke = i + 1;
    } else if (c == ':' && w.depth == 1) {
      in_value = 1;
      w.key_b = kb, w.key_e = ke;
    } else if (c == ',' && w.depth == 1) {
      in_value = 0;
      w.key_e = 0;
    } else if (c == '{' || c == '[') {
      w.depth++;
    } else if (c == '}' || c == ']') {
      w.depth--;
    }
  }
  return w;
}

/* The text of the JSON string h[b..e) (quotes included), malloc'ed; NULL when there is none. */
static char *json_text(const unsigned char *h, size_t b, size_t e) {
  if (e == 0) return NULL;
  json_t *j = json_loadb((const char *)h + b, e - b, JSON_DECODE_ANY, NULL);
  char *s = json_is_string(j) ? strdup(json_string_value(j)) : NULL;
  json_decref(j);
  return s;
}

/* jansson's complaint about the header h[0..hlen), naming the tensor (or "__metadata__") it is
 * in, and a duplicate key by what it is a duplicate of. */
static void json_fail(const char *path, const unsigned char *h, size_t hlen, const json_error_t *je, char *err,
                      size_t errlen) {
  size_t pos = je->position > 0 && (size_t)je->position <= hlen ? (size_t)je->position : 0;
  StWhere w = where_in_header(h, pos);
  char *key = json_text(h, w.key_b, w.key_e), ctx[256] = "", why[JSON_ERROR_TEXT_LENGTH + 256];
  if (key && !strcmp(key, "__metadata__")) snprintf(ctx, sizeof ctx, "\"__metadata__\": ");
  else if (key) snprintf(ctx, sizeof ctx, "tensor '" NAME_FMT "': ", key);
  snprintf(why, sizeof why, "%s", je->text);
  switch (json_error_code(je)) {
  case json_error_duplicate_key: {
    char *dup = json_text(h, w.last_b, w.last_e);
    if (w.depth == 1 && dup && !strcmp(dup, "__metadata__")) snprintf(why, sizeof why, "duplicate \"__metadata__\"");
    else if (w.depth == 1 && dup) snprintf(why, sizeof why, "duplicate tensor name '" NAME_FMT "'", dup);
    else if (dup) snprintf(why, sizeof why, "duplicate key \"" NAME_FMT "\"", dup);
    free(dup);
    break;
  }
  case json_error_stack_overflow:
    snprintf(why, sizeof why, "nesting deeper than %d levels", JSON_PARSER_MAX_DEPTH);
    break;
  case json_error_invalid_utf8: snprintf(why, sizeof why, "invalid UTF-8: %s", je->text); break;
  case json_error_null_character:
  case json_error_null_byte_in_key: snprintf(why, sizeof why, "\\u0000 (NUL) in string is not supported"); break;
  default:
    if (pos > 0 && h[pos - 1] == 0) snprintf(why, sizeof why, "NUL byte outside a string");
    else if (!je->text[0]) snprintf(why, sizeof why, "out of memory");
    break;
  }
  rt_util_set_err(err, errlen, "%s: header JSON: %s%s (at header byte %zu)", path, ctx, why, pos);
  free(key);
}

/* The "shape" or "data_offsets" of tensor name: an array of at most maxn integers 0..2^63-1. */
static int uint_array(const char *path, const char *name, const char *key, const json_t *a, uint64_t *vals, int maxn,
                      int *count, char *err, size_t errlen) {
  if (!json_is_array(a)) {
    rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': \"%s\" must be an array of integers", path, name, key);
    return -1;
  }
  size_t n = json_array_size(a);
  for (size_t k = 0; k < n; k++) {
    const json_t *v = json_array_get(a, k);
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
      rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': \"%s\" entries must be non-negative integers <= 2^63-1",
                      path, name, key);
      return -1;
    }
    if (k >= (size_t)maxn) {
      rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': \"%s\" has more than %d entries", path, name, key, maxn);
      return -1;
    }
    vals[k] = (uint64_t)json_integer_value(v);
  }
  *count = (int)n;
  return 0;
}

/* "__metadata__": an object of string -> string; only the checksums (read_sums) are used. */
static int check_metadata(const char *path, json_t *m, char *err, size_t errlen) {
  const char *k;
  json_t *v;
  if (!json_is_object(m)) {
    rt_util_set_err(err, errlen, "%s: \"__metadata__\" must be an object of string -> string", path);
    return -1;
  }
  json_object_foreach(m, k, v) {
    if (!json_is_string(v)) {
      rt_util_set_err(err, errlen, "%s: \"__metadata__\" value for key '" NAME_FMT "' must be a string", path, k);
      return -1;
    }
  }
  return 0;
}

static void free_tensor(StTensor *t) {
  free(t->name);
  free(t->dims);
}

/* Checks the entry e of tensor name and appends the tensor to f. */
static int add_tensor(RtStFile *f, const char *path, const char *name, const json_t *e, char *err, size_t errlen) {
  StTensor t;
  memset(&t, 0, sizeof t);
  t.dtype = -1;
  uint64_t dims[RT_ST_MAX_NDIM], offs[2];
  int ndim = -1, noffs = -1;
  if (!json_is_object(e)) {
    rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': expected an object with dtype/shape/data_offsets", path,
                    name);
    return -1;
  }
  const json_t *dt = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape"),
               *off = json_object_get(e, "data_offsets");
  if (dt) {
    const char *s = json_string_value(dt);
    if (!s) {
      rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': \"dtype\" must be a string", path, name);
      return -1;
    }
    if (!strcmp(s, "F32")) t.dtype = RT_ST_F32;
    else if (!strcmp(s, "F16")) t.dtype = RT_ST_F16;
    else if (!strcmp(s, "BF16")) t.dtype = RT_ST_BF16;
    else if (!strcmp(s, "F64")) t.dtype = RT_ST_F64;
    else {
      rt_util_set_err(err, errlen,
                      "%s: tensor '" NAME_FMT "': unsupported dtype \"%.40s\" (supported: F32, F16, BF16, F64)", path,
                      name, s);
      return -1;
    }
  }
  if (shape && uint_array(path, name, "shape", shape, dims, RT_ST_MAX_NDIM, &ndim, err, errlen)) return -1;
  if (off && uint_array(path, name, "data_offsets", off, offs, 2, &noffs, err, errlen)) return -1;
  if (off && noffs != 2) {
    rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': \"data_offsets\" must have 2 entries, found %d", path,
                    name, noffs);
    return -1;
  }
  if (!dt || !shape || !off) {
    rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': missing \"%s\"", path, name,
                    !dt      ? "dtype"
                    : !shape ? "shape"
                             : "data_offsets");
    return -1;
  }
  /* element count: the product of the non-zero dims must fit in int64 even when a zero dim makes
   * the count 0 (so that no product of dims a reader forms, a slice's strides included, overflows) */
  int64_t numel = 1;
  int zero = 0;
  for (int d = 0; d < ndim; d++) {
    if (dims[d] == 0) {
      zero = 1;
      continue;
    }
    if ((uint64_t)numel > (uint64_t)INT64_MAX / dims[d]) {
      rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': shape element count overflows int64", path, name);
      return -1;
    }
    numel *= (int64_t)dims[d];
  }
  if (zero) numel = 0;
  uint64_t esz = dtype_size(t.dtype);
  if ((uint64_t)numel > UINT64_MAX / esz) {
    rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': byte size overflows", path, name);
    return -1;
  }
  uint64_t need = (uint64_t)numel * esz;
  if (offs[1] < offs[0]) {
    rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': data_offsets [%llu, %llu] have end < begin", path, name,
                    (unsigned long long)offs[0], (unsigned long long)offs[1]);
    return -1;
  }
  if (offs[1] - offs[0] != need) {
    char shp[RT_ST_MAX_NDIM * 21 + 3];
    size_t sl = 0;
    shp[sl++] = '[';
    for (int d = 0; d < ndim; d++) {
      int w = snprintf(shp + sl, sizeof shp - sl, "%s%llu", d ? "," : "", (unsigned long long)dims[d]);
      if (w > 0) sl += (size_t)w;
    }
    shp[sl++] = ']';
    shp[sl] = 0;
    rt_util_set_err(err, errlen,
                    "%s: tensor '" NAME_FMT "': data_offsets [%llu, %llu] span %llu bytes but shape %s of %s "
                    "needs %llu bytes",
                    path, name, (unsigned long long)offs[0], (unsigned long long)offs[1],
                    (unsigned long long)(offs[1] - offs[0]), shp, dtype_name(t.dtype), (unsigned long long)need);
    return -1;
  }
  t.ndim = ndim;
  t.numel = numel;
  t.begin = offs[0];
  t.end = offs[1];
  if (f->n == f->cap && f->cap >= INT_MAX / 2) {
    rt_util_set_err(err, errlen, "%s: too many tensors", path);
    return -1;
  }
  if (f->n == f->cap) {
    int nc = f->cap ? f->cap * 2 : 16;
    StTensor *nt = realloc(f->t, (size_t)nc * sizeof *nt);
    if (!nt) goto oom;
    f->t = nt;
    f->cap = nc;
  }
  if (!(t.name = strdup(name))) goto oom;
  if (ndim > 0) {
    if (!(t.dims = malloc((size_t)ndim * sizeof *t.dims))) goto oom;
    for (int d = 0; d < ndim; d++) t.dims[d] = (int64_t)dims[d];
  }
  f->t[f->n++] = t;
  return 0;
oom:
  free_tensor(&t);
  rt_util_set_err(err, errlen, "%s: out of memory", path);
  return -1;
}

/* The checksums of the metadata m (RT_ST_SUM_KEY NAME: RT_ST_SUM_ALGO ":" 16 hex digits): none at
 * all (a file another program wrote), or one for each tensor and none for a tensor the file
 * lacks. 0, or -1 with a message naming the file and the tensor. */
static int read_sums(RtStFile *f, const char *path, json_t *m, char *err, size_t errlen) {
  const size_t kl = strlen(RT_ST_SUM_KEY), al = strlen(RT_ST_SUM_ALGO);
  const char *k;
  json_t *v;
  int nsums = 0;
  json_object_foreach(m, k, v) {
    if (strncmp(k, RT_ST_SUM_KEY, kl)) continue;
    int i = 0;
    while (i < f->n && strcmp(f->t[i].name, k + kl)) i++;
    const char *val = json_string_value(v);
    char *end = NULL;
    uint64_t sum = 0;
    int ok = val && strlen(val) == al + 17 && !strncmp(val, RT_ST_SUM_ALGO ":", al + 1) &&
             strspn(val + al + 1, "0123456789abcdef") == 16;
    if (ok) sum = strtoull(val + al + 1, &end, 16);
    if (i == f->n) {
      rt_util_set_err(err, errlen,
                      "%s: \"__metadata__\" has a checksum for tensor '" NAME_FMT "', which the file lacks", path,
                      k + kl);
      return -1;
    }
    if (!ok) {
      rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': checksum '%.64s' is not %s:<16 hex digits>", path,
                      k + kl, val ? val : "", RT_ST_SUM_ALGO);
      return -1;
    }
    f->t[i].has_sum = 1;
    f->t[i].sum = sum;
    nsums++;
  }
  for (int i = 0; nsums && i < f->n; i++)
    if (!f->t[i].has_sum) {
      rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "' has no checksum, while the file's other tensors do", path,
                      f->t[i].name);
      return -1;
    }
  f->sums = nsums > 0;
  return 0;
}

/* The header h[0..hlen): one JSON object (then only whitespace: the padding) of tensor entries and
 * an optional "__metadata__"; no key twice in any object. */
static int parse_header(RtStFile *f, const char *path, const unsigned char *h, size_t hlen, char *err, size_t errlen) {
  size_t i = 0;
  while (i < hlen && json_ws(h[i])) i++;
  if (i == hlen) {
    rt_util_set_err(err, errlen, "%s: header JSON: header is empty (at header byte %zu)", path, i);
    return -1;
  }
  if (h[i] != '{') {
    rt_util_set_err(err, errlen,
                    "%s: header JSON: header is not a JSON object (starts with byte 0x%02x) (at header byte %zu)", path,
                    h[i], i);
    return -1;
  }
  json_error_t je;
  json_t *root = json_loadb((const char *)h, hlen, JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &je);
  if (!root) {
    json_fail(path, h, hlen, &je, err, errlen);
    return -1;
  }
  for (i = (size_t)je.position; i < hlen && json_ws(h[i]);) i++;
  if (i != hlen) {
    rt_util_set_err(err, errlen, "%s: header JSON: unexpected data after the JSON object (at header byte %zu)", path,
                    i);
    json_decref(root);
    return -1;
  }
  int rc = 0;
  const char *key;
  json_t *v, *meta = NULL;
  json_object_foreach(root, key, v) {
    rc = !strcmp(key, "__metadata__") ? check_metadata(path, v, err, errlen) : add_tensor(f, path, key, v, err, errlen);
    if (rc) break;
    if (!strcmp(key, "__metadata__")) meta = v;
  }
  if (!rc && meta) rc = read_sums(f, path, meta, err, errlen);
  json_decref(root);
  return rc;
}

/* Tensors by the start of their bytes (then the end, then header order). */
typedef struct {
  uint64_t begin, end;
  int idx;
} StSpan;

static int cmp_span(const void *a, const void *b) {
  const StSpan *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

/* No byte of the data section belongs to two tensors. The format requires more -- the tensors,
 * in the order of their offsets, tile the data section exactly -- but holes and trailing bytes
 * change nothing a tensor reads, and are tolerated; the header may list tensors in any order.
 * Empty tensors hold no bytes and overlap nothing. 0, or -1 naming both tensors. */
static int check_overlaps(const RtStFile *f, const char *path, char *err, size_t errlen) {
  if (f->n < 2) return 0;
  StSpan *v = malloc((size_t)f->n * sizeof *v);
  if (!v) {
    rt_util_set_err(err, errlen, "%s: out of memory", path);
    return -1;
  }
  int m = 0;
  for (int i = 0; i < f->n; i++)
    if (f->t[i].end > f->t[i].begin) v[m++] = (StSpan){f->t[i].begin, f->t[i].end, i};
  qsort(v, (size_t)m, sizeof *v, cmp_span);
  int far = -1, rc = 0; /* the span seen so far that reaches furthest */
  for (int k = 0; k < m && !rc; k++) {
    if (far >= 0 && v[k].begin < v[far].end) {
      const StTensor *a = &f->t[v[far].idx < v[k].idx ? v[far].idx : v[k].idx];
      const StTensor *b = &f->t[v[far].idx < v[k].idx ? v[k].idx : v[far].idx];
      rt_util_set_err(err, errlen,
                      "%s: tensors '" NAME_FMT "' (data_offsets [%llu, %llu]) and '" NAME_FMT
                      "' (data_offsets [%llu, %llu]) overlap: every byte of the data belongs to one tensor",
                      path, a->name, (unsigned long long)a->begin, (unsigned long long)a->end, b->name,
                      (unsigned long long)b->begin, (unsigned long long)b->end);
      rc = -1;
    }
    if (far < 0 || v[k].end > v[far].end) far = k;
  }
  free(v);
  return rc;
}

int rt_st_cmp_idx(const void *a, const void *b) {
  const StIdx *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

/* ---------------- reader ---------------- */

void rt_st_close(RtStFile *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++) free_tensor(&f->t[i]);
  free(f->t);
  free(f->sorted);
  if (f->base) {
    if (f->mapped) munmap(f->base, f->size);
    else free(f->base);
  }
  free(f->path);
  free(f);
}

/* Maps (or reads) the whole file into f->base / f->size. */
static int load_file(RtStFile *f, const char *path, char *err, size_t errlen) {
  size_t size;
  int fd = rt_util_open_file(path, NULL, &size, err, errlen);
  if (fd < 0) return -1;
  if (size < 8) {
    rt_util_set_err(err, errlen, "%s: file too small for a safetensors header: %zu bytes, need at least 8", path, size);
    close(fd);
    return -1;
  }
  void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int rc = 0;
  if (m != MAP_FAILED) {
    f->base = m;
    f->mapped = 1;
  } else if (!(f->base = malloc(size))) {
    rt_util_set_err(err, errlen, "%s: out of memory reading %zu bytes", path, size);
    rc = -1;
  } else {
    rc = rt_util_read_fd(fd, path, f->base, size, err, errlen);
  }
  f->size = size;
  close(fd);
  return rc;
}

int rt_st_open(const char *path, RtStFile **out, char *err, size_t errlen) {
  if (out) *out = NULL;
  if (!path || !out) {
    rt_util_set_err(err, errlen, "rt_st_open: NULL %s", path ? "out" : "path");
    return -1;
  }
  RtStFile *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    rt_util_set_err(err, errlen, "%s: out of memory", path);
    return -1;
  }
  if (load_file(f, path, err, errlen)) goto fail;

  uint64_t hlen = rd_le64(f->base);
  uint64_t avail = (uint64_t)f->size - 8;
  if (hlen > RT_ST_MAX_HEADER) {
    rt_util_set_err(err, errlen, "%s: header length %llu exceeds the %u-byte (100 MB) limit (file has %zu bytes)", path,
                    (unsigned long long)hlen, RT_ST_MAX_HEADER, f->size);
    goto fail;
  }
  if (hlen > avail) {
    rt_util_set_err(err, errlen, "%s: truncated: header length %llu exceeds the %llu bytes after the length field",
                    path, (unsigned long long)hlen, (unsigned long long)avail);
    goto fail;
  }
  f->data = f->base + 8 + hlen;
  f->datalen = avail - hlen;
  if (parse_header(f, path, f->base + 8, (size_t)hlen, err, errlen)) goto fail;

  /* all data inside the file */
  uint64_t max_end = 0;
  int max_i = -1;
  for (int i = 0; i < f->n; i++)
    if (f->t[i].end > max_end || max_i < 0) {
      max_end = f->t[i].end;
      max_i = i;
    }
  if (max_i >= 0 && max_end > f->datalen) {
    rt_util_set_err(err, errlen,
                    "%s: truncated: header says %llu bytes of data, file has %llu (tensor '" NAME_FMT
                    "' data_offsets [%llu, %llu])",
                    path, (unsigned long long)max_end, (unsigned long long)f->datalen, f->t[max_i].name,
                    (unsigned long long)f->t[max_i].begin, (unsigned long long)f->t[max_i].end);
    goto fail;
  }

  /* the name index (jansson has made the names unique) */
  if (f->n > 0) {
    f->sorted = malloc((size_t)f->n * sizeof *f->sorted);
    if (!f->sorted) {
      rt_util_set_err(err, errlen, "%s: out of memory", path);
      goto fail;
    }
    for (int i = 0; i < f->n; i++) {
      f->sorted[i].name = f->t[i].name;
      f->sorted[i].idx = i;
    }
    qsort(f->sorted, (size_t)f->n, sizeof *f->sorted, rt_st_cmp_idx);
  }
  if (check_overlaps(f, path, err, errlen)) goto fail;
  *out = f;
  return 0;
fail:
  rt_st_close(f);
  return -1;
}

static const StTensor *get_t(const RtStFile *f, int i) {
  if (!f || i < 0 || i >= f->n) return NULL;
  return &f->t[i];
}

int rt_st_count(const RtStFile *f) { return f ? f->n : 0; }

const char *rt_st_name(const RtStFile *f, int i) {
  const StTensor *t = get_t(f, i);
  return t ? t->name : NULL;
}

int rt_st_find(const RtStFile *f, const char *name) {
  if (!f || !name || f->n == 0) return -1;
  int lo = 0, hi = f->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(name, f->sorted[mid].name);
    if (c == 0) return f->sorted[mid].idx;
    if (c < 0) hi = mid - 1;
    else lo = mid + 1;
  }
  return -1;
}

int rt_st_ndim(const RtStFile *f, int i) {
  const StTensor *t = get_t(f, i);
  return t ? t->ndim : -1;
}

int rt_st_shape(const RtStFile *f, int i, int64_t *dims, int maxdims) {
  const StTensor *t = get_t(f, i);
  if (!t) return -1;
  for (int d = 0; d < t->ndim && d < maxdims && dims; d++) dims[d] = t->dims[d];
  return t->ndim;
}

int64_t rt_st_numel(const RtStFile *f, int i) {
  const StTensor *t = get_t(f, i);
  return t ? t->numel : -1;
}

int rt_st_dtype_id(const RtStFile *f, int i) {
  const StTensor *t = get_t(f, i);
  return t ? t->dtype : -1;
}

const char *rt_st_dtype(const RtStFile *f, int i) {
  const StTensor *t = get_t(f, i);
  return t ? dtype_name(t->dtype) : NULL;
}

static float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* Exact IEEE half -> single (subnormals normalized, inf/nan payload kept). */
static uint32_t f16_bits_to_f32_bits(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  if (exp == 0x1F) return sign | 0x7F800000u | (man << 13);
  if (exp != 0) return sign | ((exp + 112) << 23) | (man << 13);
  if (man == 0) return sign;
  int e = -14; /* value = man * 2^-24 = (man / 2^10) * 2^-14 */
  while (!(man & 0x400)) {
    man <<= 1;
    e--;
  }
  return sign | ((uint32_t)(e + 127) << 23) | ((man & 0x3FF) << 13);
}

/* count elements at src to f32 at dst. F64 values are rounded to the nearest float; a finite one
 * beyond the float range is an error: -1 with *bad its element (inf and nan stay what they are). */
static int convert(int dtype, const unsigned char *src, size_t count, float *dst, size_t *bad) {
  switch (dtype) {
  case RT_ST_F32:
    for (size_t k = 0; k < count; k++) dst[k] = bits_f32(rd_le32(src + 4 * k));
    break;
  case RT_ST_F16:
    for (size_t k = 0; k < count; k++) dst[k] = bits_f32(f16_bits_to_f32_bits(rd_le16(src + 2 * k)));
    break;
  case RT_ST_BF16:
    for (size_t k = 0; k < count; k++) dst[k] = bits_f32((uint32_t)rd_le16(src + 2 * k) << 16);
    break;
  case RT_ST_F64:
    for (size_t k = 0; k < count; k++) {
      uint64_t u = rd_le64(src + 8 * k);
      double x;
      memcpy(&x, &u, sizeof x);
      /* beyond FLT_MAX by more than half an ulp: rounds to inf */
      if (isfinite(x) && fabs(x) >= (double)FLT_MAX + ldexp(1.0, 103)) {
        *bad = k;
        return -1;
      }
      dst[k] = (float)x;
    }
    break;
  }
  return 0;
}

/* The error of a failed convert: element `at` of tensor t (its dense index) as read from src. */
static int range_err(const RtStFile *f, const StTensor *t, int64_t at, const unsigned char *src, char *err,
                     size_t errlen) {
  uint64_t u = rd_le64(src);
  double x;
  memcpy(&x, &u, sizeof x);
  rt_util_set_err(err, errlen,
                  "%s: tensor '" NAME_FMT "': F64 element %lld is %.17g, outside the float32 range (|x| <= %.9g): "
                  "ppr computes in float32",
                  f->path, t->name, (long long)at, x, (double)FLT_MAX);
  return -1;
}

static const StTensor *check_read(const RtStFile *f, int i, const char *fn, char *err, size_t errlen) {
  if (!f) {
    rt_util_set_err(err, errlen, "%s: NULL file", fn);
    return NULL;
  }
  const StTensor *t = get_t(f, i);
  if (!t)
    rt_util_set_err(err, errlen, "%s: %s: tensor index %d out of range (file has %d tensors)", f->path, fn, i, f->n);
  return t;
}

int rt_st_has_checksums(const RtStFile *f) { return f && f->sums; }

int rt_st_verify(const RtStFile *f, int i, char *err, size_t errlen) {
  const StTensor *t = check_read(f, i, "rt_st_verify", err, errlen);
  if (!t) return -1;
  if (!t->has_sum) return 0;
  uint64_t h = XXH3_64bits(f->data + t->begin, (size_t)(t->end - t->begin));
  if (h == t->sum) return 0;
  rt_util_set_err(err, errlen,
                  "%s: tensor '" NAME_FMT "': its bytes do not match the checksum the file records (%s %016llx, "
                  "read %016llx): the file is damaged",
                  f->path, t->name, RT_ST_SUM_ALGO, (unsigned long long)t->sum, (unsigned long long)h);
  return -1;
}

int rt_st_read_f32(const RtStFile *f, int i, float *dst, size_t n, char *err, size_t errlen) {
  const StTensor *t = check_read(f, i, "rt_st_read_f32", err, errlen);
  if (!t) return -1;
  if ((uint64_t)t->numel != (uint64_t)n) {
    rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': destination has %zu elements, tensor has %lld", f->path,
                    t->name, n, (long long)t->numel);
    return -1;
  }
  if (n == 0) return 0;
  if (!dst) {
    rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL destination", f->path, t->name);
    return -1;
  }
  size_t bad = 0;
  if (convert(t->dtype, f->data + t->begin, n, dst, &bad))
    return range_err(f, t, (int64_t)bad, f->data + t->begin + 8 * bad, err, errlen);
  return 0;
}

int rt_st_read_f32_slice(const RtStFile *f, int i, const int64_t *start, const int64_t *len, float *dst, size_t n,
                         char *err, size_t errlen) {
  const StTensor *t = check_read(f, i, "rt_st_read_f32_slice", err, errlen);
  if (!t) return -1;
  int nd = t->ndim;
  if (nd > 0 && (!start || !len)) {
    rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL slice start/len for a %d-dim tensor", f->path,
                    t->name, nd);
    return -1;
  }
  int zero = 0;
  for (int d = 0; d < nd; d++) {
    if (start[d] < 0 || len[d] < 0 || start[d] > t->dims[d] || len[d] > t->dims[d] - start[d]) {
      rt_util_set_err(err, errlen,
                      "%s: tensor '" NAME_FMT "': slice dim %d [%lld, %lld + %lld) out of range for size %lld", f->path,
                      t->name, d, (long long)start[d], (long long)start[d], (long long)len[d], (long long)t->dims[d]);
      return -1;
    }
    zero |= len[d] == 0;
  }
  /* every len <= dim, and with all lens > 0 all dims are > 0 so the product fits like numel */
  int64_t total = 1;
  if (zero) total = 0;
  else
    for (int d = 0; d < nd; d++) total *= len[d];
  if ((uint64_t)total != (uint64_t)n) {
    rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': destination has %zu elements, slice has %lld", f->path,
                    t->name, n, (long long)total);
    return -1;
  }
  if (total == 0) return 0;
  if (!dst) {
    rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL destination", f->path, t->name);
    return -1;
  }
  int64_t stride[RT_ST_MAX_NDIM], idx[RT_ST_MAX_NDIM];
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; d--) {
    stride[d] = s;
    s *= t->dims[d];
    idx[d] = 0;
  }
  size_t es = dtype_size(t->dtype);
  size_t inner = nd > 0 ? (size_t)len[nd - 1] : 1;
  const unsigned char *src = f->data + t->begin;
  for (;;) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off += (start[d] + idx[d]) * stride[d];
    size_t bad = 0;
    if (convert(t->dtype, src + (size_t)off * es, inner, dst, &bad))
      return range_err(f, t, off + (int64_t)bad, src + ((size_t)off + bad) * es, err, errlen);
    dst += inner;
    int d = nd - 2;
    while (d >= 0 && ++idx[d] == len[d]) idx[d--] = 0;
    if (d < 0) break;
  }
  return 0;
}
