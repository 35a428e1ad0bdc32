/* ppr_bpe.c - tokenizer.json's BPE: added tokens split out, the normalizers, the pre-tokenizers (PCRE2
 * for the regexes, with Unicode properties as the tokenizers package's Oniguruma), the merges by rank,
 * byte fallback; and the decoders back to bytes. */
#include "ppr_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "rt_prog.h"

/* GPT-2's split, which ByteLevel applies when use_regex is true (the tokenizers package's). */
static const char gpt2_split[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef enum { PT_BYTELEVEL, PT_SPLIT, PT_METASPACE } PtKind;
typedef struct {
  PtKind kind;
  pcre2_code *re;       /* Split, ByteLevel with use_regex */
  int removed;          /* Split: the matches go (behavior Removed), else each is a piece (Isolated) */
  int add_prefix_space; /* ByteLevel */
  const char *repl;     /* Metaspace: the space's stand-in */
  int prepend;          /* Metaspace: 0 never, 1 first, 2 always */
  int split;            /* Metaspace: a piece per stand-in */
} PreTok;

typedef enum { NM_NFC, NM_PREPEND, NM_REPLACE } NmKind;
typedef struct {
  NmKind kind;
  const char *a, *b; /* Prepend: a; Replace: a by b */
} Norm;

typedef struct {
  const char *s;
  size_t n;
  int32_t id;
  int lstrip, rstrip;
} Added;

struct PprBpe {
  json_t *root;  /* the file: owns every string below */
  json_t *vocab; /* token -> id */
  json_t *ranks; /* "A\x01B" -> the merge's rank */
  const char **by_id;
  int64_t nid;
  PreTok pre[8];
  int npre;
  Norm norm[8];
  int nnorm;
  Added *added;
  int nadded;
  int byte_fallback, ignore_merges;
  int64_t unk;              /* -1: none */
  int dec_bytes, dec_strip; /* decode: ByteLevel's byte map; else ▁ and <0xXX>, one leading space stripped */
  uint32_t byte_char[256];  /* ByteLevel: byte -> code point */
  int16_t char_byte[324];   /* and back (the code points are below 324) */
};

/* A growing string or list of strings. */
typedef struct {
  char *b;
  size_t n, cap;
} Str;

static int str_add(Str *s, const char *p, size_t n) {
  if (s->n + n + 1 > s->cap) {
    size_t cap = s->cap ? s->cap : 64;
    while (cap < s->n + n + 1) cap *= 2;
    char *b = realloc(s->b, cap);
    if (!b) return -1;
    s->b = b;
    s->cap = cap;
  }
  memcpy(s->b + s->n, p, n);
  s->n += n;
  s->b[s->n] = '\0';
  return 0;
}

typedef struct {
  Str *v;
  int n, cap;
} Pieces;

static int pieces_add(Pieces *p, const char *s, size_t n) {
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    Str *v = realloc(p->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    p->v = v;
    p->cap = cap;
  }
  p->v[p->n] = (Str){0};
  if (str_add(&p->v[p->n], s, n)) return -1;
  p->n++;
  return 0;
}

static void pieces_free(Pieces *p) {
  for (int k = 0; k < p->n; k++) free(p->v[k].b);
  free(p->v);
  *p = (Pieces){0};
}

/* The growing id list. */
typedef struct {
  int32_t *v;
  int64_t n, cap;
} Ids;

static int ids_add(Ids *d, int32_t id) {
  if (d->n == d->cap) {
    int64_t cap = d->cap ? 2 * d->cap : 64;
    int32_t *v = realloc(d->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    d->v = v;
    d->cap = cap;
  }
  d->v[d->n++] = id;
  return 0;
}

static size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

static void put_utf8(Str *s, uint32_t cp, int *oom) {
  char b[4];
  size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  if (n == 1) b[0] = (char)cp;
  else {
    static const unsigned char lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (size_t k = n - 1; k > 0; k--, cp >>= 6) b[k] = (char)(0x80 | (cp & 0x3F));
    b[0] = (char)(lead[n] | cp);
  }
  *oom |= str_add(s, b, n);
}

/* ByteLevel's table (GPT-2's bytes_to_unicode): printable Latin-1 bytes stand for themselves, the
 * others for 256, 257, ... in byte order. */
static void byte_table(PprBpe *t) {
  uint32_t next = 256;
  for (int b = 0; b < 256; b++) {
    int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    t->byte_char[b] = keep ? (uint32_t)b : next++;
  }
  for (size_t k = 0; k < sizeof t->char_byte / sizeof t->char_byte[0]; k++) t->char_byte[k] = -1;
  for (int b = 0; b < 256; b++) t->char_byte[t->byte_char[b]] = (int16_t)b;
}

/* ---- reading the file ------------------------------------------------------------------------ */

static pcre2_code *compile_re(const char *pat, const char *path, const char *where, char *err, size_t errlen) {
  int code;
  PCRE2_SIZE at;
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
  if (!re) {
    PCRE2_UCHAR m[256];
    pcre2_get_error_message(code, m, sizeof m);
    RT_FAIL("%s: %s: the regex does not compile at offset %zu: %s", path, where, (size_t)at, (const char *)m);
  }
  return re;
}

static const char *str_field(const json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

static int pre_one(PprBpe *t, const json_t *o, const char *path, char *err, size_t errlen) {
  const char *type = str_field(o, "type");
  if (t->npre == (int)(sizeof t->pre / sizeof t->pre[0]))
    return RT_FAIL("%s: pre_tokenizer: more than %d steps", path, t->npre);
  PreTok *p = &t->pre[t->npre];
  *p = (PreTok){0};
  if (type && !strcmp(type, "ByteLevel")) {
    const json_t *re = json_object_get(o, "use_regex");
    p->kind = PT_BYTELEVEL;
    p->add_prefix_space = json_is_true(json_object_get(o, "add_prefix_space"));
    if ((!re || json_is_true(re)) && !(p->re = compile_re(gpt2_split, path, "ByteLevel", err, errlen))) return -1;
  } else if (type && !strcmp(type, "Split")) {
    const json_t *pat = json_object_get(o, "pattern");
    const char *beh = str_field(o, "behavior"), *rx = str_field(pat, "Regex"), *lit = str_field(pat, "String");
    if (json_is_true(json_object_get(o, "invert")) || !beh || (strcmp(beh, "Isolated") && strcmp(beh, "Removed")))
      return RT_FAIL("%s: pre_tokenizer Split: behavior '%s'%s not supported (Isolated, Removed)", path,
                     beh ? beh : "?", json_is_true(json_object_get(o, "invert")) ? " with invert" : "");
    p->kind = PT_SPLIT;
    p->removed = !strcmp(beh, "Removed");
    if (rx) p->re = compile_re(rx, path, "pre_tokenizer Split", err, errlen);
    else if (lit) { /* a literal: quoted for the regex */ Str q = {0};
      int oom = str_add(&q, "\\Q", 2) || str_add(&q, lit, strlen(lit)) || str_add(&q, "\\E", 2);
      p->re = oom ? NULL : compile_re(q.b, path, "pre_tokenizer Split", err, errlen);
      free(q.b);
      if (oom) return RT_FAIL("out of memory");
    } else return RT_FAIL("%s: pre_tokenizer Split: expected a pattern {\"Regex\"} or {\"String\"}", path);
    if (!p->re) return -1;
  } else if (type && !strcmp(type, "Metaspace")) {
    const char *ps = str_field(o, "prepend_scheme");
    const json_t *aps = json_object_get(o, "add_prefix_space"), *sp = json_object_get(o, "split");
    p->kind = PT_METASPACE;
    p->repl = str_field(o, "replacement") ? str_field(o, "replacement") : "\xE2\x96\x81";
    p->prepend = ps ? (!strcmp(ps, "always") ? 2 : !strcmp(ps, "first") ? 1 : 0) : (!aps || json_is_true(aps)) ? 2 : 0;
    p->split = !sp || json_is_true(sp);
  } else
    return RT_FAIL("%s: pre_tokenizer '%s' not supported (ByteLevel, Split, Metaspace, Sequence)", path,
                   type ? type : "?");
  t->npre++;
  return 0;
}

static int read_pre(PprBpe *t, const json_t *o, const char *path, char *err, size_t errlen) {
  if (!o || json_is_null(o)) return 0;
  const char *type = str_field(o, "type");
  if (type && !strcmp(type, "Sequence")) {
    const json_t *v;
    size_t k;
    json_array_foreach(json_object_get(o, "pretokenizers"), k, v) if (pre_one(t, v, path, err, errlen)) return -1;
    return 0;
  }
  return pre_one(t, o, path, err, errlen);
}

static int norm_one(PprBpe *t, const json_t *o, const char *path, char *err, size_t errlen) {
  const char *type = str_field(o, "type");
  if (t->nnorm == (int)(sizeof t->norm / sizeof t->norm[0]))
    return RT_FAIL("%s: normalizer: more than %d steps", path, t->nnorm);
  Norm *m = &t->norm[t->nnorm];
  if (type && !strcmp(type, "NFC")) *m = (Norm){NM_NFC, NULL, NULL};
  else if (type && !strcmp(type, "Prepend") && str_field(o, "prepend"))
    *m = (Norm){NM_PREPEND, str_field(o, "prepend"), NULL};
  else if (type && !strcmp(type, "Replace") && str_field(json_object_get(o, "pattern"), "String") &&
           str_field(o, "content"))
    *m = (Norm){NM_REPLACE, str_field(json_object_get(o, "pattern"), "String"), str_field(o, "content")};
  else
    return RT_FAIL("%s: normalizer '%s' not supported (NFC, Prepend, Replace of a string, Sequence)", path,
                   type ? type : "?");
  t->nnorm++;
  return 0;
}

static int read_norm(PprBpe *t, const json_t *o, const char *path, char *err, size_t errlen) {
  if (!o || json_is_null(o)) return 0;
  const char *type = str_field(o, "type");
  if (type && !strcmp(type, "Sequence")) {
    const json_t *v;
    size_t k;
    json_array_foreach(json_object_get(o, "normalizers"), k, v) if (norm_one(t, v, path, err, errlen)) return -1;
    return 0;
  }
  return norm_one(t, o, path, err, errlen);
}

/* The merges, "A B" strings or [A, B] pairs, as ranks. */
static int read_merges(PprBpe *t, const json_t *m, const char *path, char *err, size_t errlen) {
  const json_t *v;
  size_t k;
  Str key = {0};
  int rc = 0;
  json_array_foreach(m, k, v) {
    const char *a, *b;
    size_t na, nb;
    if (json_is_string(v) && strchr(json_string_value(v), ' ')) {
      a = json_string_value(v);
      na = (size_t)(strchr(a, ' ') - a);
      b = a + na + 1;
      nb = strlen(b);
    } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
               json_is_string(json_array_get(v, 1))) {
      a = json_string_value(json_array_get(v, 0));
      b = json_string_value(json_array_get(v, 1));
      na = strlen(a);
      nb = strlen(b);
    } else {
      rc = RT_FAIL("%s: model.merges[%zu]: expected \"A B\" or [\"A\", \"B\"]", path, k);
      break;
    }
    key.n = 0;
    if (str_add(&key, a, na) || str_add(&key, "\x01", 1) || str_add(&key, b, nb) ||
        (!json_object_get(t->ranks, key.b) && json_object_set_new(t->ranks, key.b, json_integer((json_int_t)k)))) {
      rc = RT_FAIL("out of memory");
      break;
    }
  }
  free(key.b);
  return rc;
}

static int read_added(PprBpe *t, const json_t *list, const char *path, char *err, size_t errlen) {
  t->added = calloc(json_array_size(list) + 1, sizeof *t->added);
  if (!t->added) return RT_FAIL("out of memory");
  const json_t *v;
  size_t k;
  json_array_foreach(list, k, v) {
    const char *s = str_field(v, "content");
    const json_t *id = json_object_get(v, "id");
    if (!s || !*s || !json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX)
      return RT_FAIL("%s: added_tokens[%zu]: expected a \"content\" and an \"id\"", path, k);
    if (json_is_true(json_object_get(v, "single_word")))
      return RT_FAIL("%s: added_tokens[%zu] '%s': single_word is not supported", path, k, s);
    t->added[t->nadded++] =
        (Added){s, strlen(s), (int32_t)json_integer_value(id), json_is_true(json_object_get(v, "lstrip")),
                json_is_true(json_object_get(v, "rstrip"))};
  }
  return 0;
}

static void read_decoder(PprBpe *t, const json_t *d) {
  const char *type = str_field(d, "type");
  t->dec_bytes = type && !strcmp(type, "ByteLevel");
  if (type && !strcmp(type, "Metaspace")) t->dec_strip = 1;
  const json_t *v;
  size_t k;
  json_array_foreach(json_object_get(d, "decoders"), k, v) {
    const char *dt = str_field(v, "type");
    if (dt && !strcmp(dt, "ByteLevel")) t->dec_bytes = 1;
    if (dt && !strcmp(dt, "Strip")) t->dec_strip = (int)json_integer_value(json_object_get(v, "start"));
  }
}

/* id -> token, over the vocabulary and the added tokens. */
static int index_ids(PprBpe *t, const char *path, char *err, size_t errlen) {
  const char *k;
  json_t *v;
  int64_t n = 0;
  json_object_foreach(t->vocab, k, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
      return RT_FAIL("%s: model.vocab['%.100s']: expected an id (an integer from 0)", path, k);
    if (json_integer_value(v) + 1 > n) n = json_integer_value(v) + 1;
  }
  for (int a = 0; a < t->nadded; a++)
    if (t->added[a].id + 1 > n) n = t->added[a].id + 1;
  if (!(t->by_id = calloc((size_t)n + 1, sizeof *t->by_id))) return RT_FAIL("out of memory");
  t->nid = n;
  json_object_foreach(t->vocab, k, v) t->by_id[json_integer_value(v)] = k;
  for (int a = 0; a < t->nadded; a++) t->by_id[t->added[a].id] = t->added[a].s;
  return 0;
}

int ppr_bpe_open(const char *path, PprBpe **out, char *err, size_t errlen) {
  *out = NULL;
  json_error_t je;
  PprBpe *t = calloc(1, sizeof *t);
  if (!t) return RT_FAIL("out of memory");
  byte_table(t);
  t->unk = -1;
  int rc = 0;
  if (!(t->root = json_load_file(path, 0, &je)))
    rc = RT_FAIL("%s: not a tokenizer.json: %s (line %d)", path, je.text, je.line);
  const json_t *model = json_object_get(t->root, "model");
  const char *type = str_field(model, "type"), *unk = str_field(model, "unk_token");
  if (!rc && (!type || strcmp(type, "BPE")))
    rc = RT_FAIL("%s: model.type '%s': only BPE models are supported", path, type ? type : "?");
  if (!rc && ((str_field(model, "continuing_subword_prefix") && *str_field(model, "continuing_subword_prefix")) ||
              (str_field(model, "end_of_word_suffix") && *str_field(model, "end_of_word_suffix"))))
    rc = RT_FAIL("%s: model: continuing_subword_prefix and end_of_word_suffix are not supported", path);
  t->vocab = json_object_get(model, "vocab");
  if (!rc && !json_is_object(t->vocab)) rc = RT_FAIL("%s: model.vocab: expected an object of token: id", path);
  t->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
  t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
  if (!rc && !(t->ranks = json_object())) rc = RT_FAIL("out of memory");
  if (!rc) rc = read_merges(t, json_object_get(model, "merges"), path, err, errlen);
  if (!rc) rc = read_added(t, json_object_get(t->root, "added_tokens"), path, err, errlen);
  if (!rc) rc = read_norm(t, json_object_get(t->root, "normalizer"), path, err, errlen);
  if (!rc) rc = read_pre(t, json_object_get(t->root, "pre_tokenizer"), path, err, errlen);
  if (!rc) rc = index_ids(t, path, err, errlen);
  if (!rc && unk) {
    const json_t *u = json_object_get(t->vocab, unk);
    t->unk = json_is_integer(u) ? json_integer_value(u) : -1;
  }
  if (!rc) read_decoder(t, json_object_get(t->root, "decoder"));
  if (rc) ppr_bpe_free(t);
  else *out = t;
  return rc;
}

void ppr_bpe_free(PprBpe *t) {
  if (!t) return;
  for (int k = 0; k < t->npre; k++) pcre2_code_free(t->pre[k].re);
  json_decref(t->ranks);
  json_decref(t->root);
  free(t->by_id);
  free(t->added);
  free(t);
}

int64_t ppr_bpe_size(const PprBpe *t) { return t->nid; }

/* ---- encoding ---------------------------------------------------------------------------------- */

/* The normalizers on s, in place. */
static int normalize(const PprBpe *t, Str *s) {
  for (int k = 0; k < t->nnorm; k++) {
    const Norm *m = &t->norm[k];
    Str o = {0};
    int oom = 0;
    switch (m->kind) {
    case NM_NFC: {
      utf8proc_uint8_t *n = utf8proc_NFC((const utf8proc_uint8_t *)(s->b ? s->b : ""));
      oom = !n || str_add(&o, (const char *)n, strlen((const char *)n));
      free(n);
      break;
    }
    case NM_PREPEND: oom = s->n && (str_add(&o, m->a, strlen(m->a)) || str_add(&o, s->b, s->n)); break;
    case NM_REPLACE:
      for (size_t i = 0, na = strlen(m->a); i < s->n && !oom;)
        if (na && i + na <= s->n && !memcmp(s->b + i, m->a, na)) oom = str_add(&o, m->b, strlen(m->b)), i += na;
        else oom = str_add(&o, s->b + i, 1), i++;
      break;
    }
    if (oom) {
      free(o.b);
      return -1;
    }
    if (!o.b && s->n) continue; /* Prepend of an empty string: unchanged */
    free(s->b);
    *s = o;
  }
  return 0;
}

/* The pieces of s by re: matches and the text between (Isolated), or the text between (Removed). */
static int split_re(const pcre2_code *re, int removed, const Str *s, Pieces *out, char *err, size_t errlen) {
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
  if (!md) return RT_FAIL("out of memory");
  size_t at = 0, last = 0;
  int rc = 0;
  while (at <= s->n) {
    int m = pcre2_match(re, (PCRE2_SPTR)s->b, s->n, at, 0, md, NULL);
    if (m == PCRE2_ERROR_NOMATCH) break;
    if (m < 0) {
      rc = RT_FAIL("the pre-tokenizer's regex failed on the text (PCRE2 error %d)", m);
      break;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (b > last && pieces_add(out, s->b + last, b - last)) rc = RT_FAIL("out of memory");
    if (!rc && e > b && !removed && pieces_add(out, s->b + b, e - b)) rc = RT_FAIL("out of memory");
    if (rc) break;
    last = e;
    at = e > b ? e : e + (e < s->n ? utf8_len((unsigned char)s->b[e]) : 1);
  }
  if (!rc && last < s->n && pieces_add(out, s->b + last, s->n - last)) rc = RT_FAIL("out of memory");
  pcre2_match_data_free(md);
  return rc;
}

/* One pre-tokenizer over the pieces; first: the pieces begin the text (Metaspace's "first"). */
static int pre_apply(const PprBpe *t, const PreTok *p, Pieces *in, int first, char *err, size_t errlen) {
  Pieces out = {0};
  int rc = 0;
  for (int k = 0; k < in->n && !rc; k++) {
    Str *s = &in->v[k];
    Str w = {0};
    int oom = 0;
    switch (p->kind) {
    case PT_BYTELEVEL:
      if (p->add_prefix_space && (!s->n || s->b[0] != ' ')) oom |= str_add(&w, " ", 1);
      oom |= s->n && str_add(&w, s->b, s->n);
      if (oom) break;
      if (p->re) {
        Pieces parts = {0};
        rc = split_re(p->re, 0, &w, &parts, err, errlen);
        for (int j = 0; !rc && j < parts.n; j++) {
          Str m = {0};
          for (size_t i = 0; i < parts.v[j].n; i++) put_utf8(&m, t->byte_char[(unsigned char)parts.v[j].b[i]], &oom);
          oom |= pieces_add(&out, m.b ? m.b : "", m.n);
          free(m.b);
        }
        pieces_free(&parts);
      } else {
        Str m = {0};
        for (size_t i = 0; i < w.n; i++) put_utf8(&m, t->byte_char[(unsigned char)w.b[i]], &oom);
        oom |= pieces_add(&out, m.b ? m.b : "", m.n);
        free(m.b);
      }
      break;
    case PT_SPLIT: rc = split_re(p->re, p->removed, s, &out, err, errlen); break;
    case PT_METASPACE: {
      size_t nr = strlen(p->repl);
      /* the stand-in first, unless the piece begins with one (or with a space, which becomes one) */
      if ((p->prepend == 2 || (p->prepend == 1 && first && k == 0)) && (!s->n || s->b[0] != ' ') &&
          (s->n < nr || memcmp(s->b, p->repl, nr)))
        oom |= str_add(&w, p->repl, nr);
      for (size_t i = 0; i < s->n; i++) oom |= s->b[i] == ' ' ? str_add(&w, p->repl, nr) : str_add(&w, s->b + i, 1);
      if (!p->split) {
        oom |= pieces_add(&out, w.b ? w.b : "", w.n);
        break;
      }
      for (size_t i = 0, from = 0; i <= w.n && !oom; i++) /* a piece begins at each stand-in */
        if (i == w.n || (i > from && i + nr <= w.n && !memcmp(w.b + i, p->repl, nr))) {
          if (i > from) oom |= pieces_add(&out, w.b + from, i - from);
          from = i;
        }
      break;
    }
    }
    free(w.b);
    if (oom && !rc) rc = RT_FAIL("out of memory");
  }
  pieces_free(in);
  *in = out;
  return rc;
}

static int64_t vocab_id(const PprBpe *t, const char *s, size_t n) {
  char stack[256], *k = n < sizeof stack ? stack : malloc(n + 1);
  if (!k) return -2;
  memcpy(k, s, n);
  k[n] = '\0';
  const json_t *v = json_object_get(t->vocab, k);
  if (k != stack) free(k);
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

/* The merge rank of the pair (a, b); -1 when they do not merge. */
static int64_t rank(const PprBpe *t, const char *a, size_t na, const char *b, size_t nb, Str *key) {
  key->n = 0;
  if (str_add(key, a, na) || str_add(key, "\x01", 1) || str_add(key, b, nb)) return -2;
  const json_t *v = json_object_get(t->ranks, key->b);
  return v ? (int64_t)json_integer_value(v) : -1;
}

/* One symbol's ids: its own, or its bytes' (<0xXX>) under byte fallback, or the unknown token's. */
static int symbol_ids(const PprBpe *t, const char *s, size_t n, Ids *ids, char *err, size_t errlen) {
  int64_t id = vocab_id(t, s, n);
  if (id >= 0) return ids_add(ids, (int32_t)id) ? RT_FAIL("out of memory") : 0;
  if (t->byte_fallback) {
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
      char b[8];
      snprintf(b, sizeof b, "<0x%02X>", (unsigned char)s[i]);
      ok = vocab_id(t, b, strlen(b)) >= 0;
    }
    for (size_t i = 0; i < n && ok; i++) {
      char b[8];
      snprintf(b, sizeof b, "<0x%02X>", (unsigned char)s[i]);
      if (ids_add(ids, (int32_t)vocab_id(t, b, strlen(b)))) return RT_FAIL("out of memory");
    }
    if (ok) return 0;
  }
  if (t->unk >= 0) return ids_add(ids, (int32_t)t->unk) ? RT_FAIL("out of memory") : 0;
  return RT_FAIL("no token for '%.*s' (the tokenizer has no byte fallback and no unk_token)", (int)n, s);
}

/* BPE over one piece: its characters merged, the lowest rank (then the leftmost) first. */
static int bpe_piece(const PprBpe *t, const Str *w, Ids *ids, char *err, size_t errlen) {
  if (!w->n) return 0;
  int64_t whole = t->ignore_merges ? vocab_id(t, w->b, w->n) : -1;
  if (whole >= 0) return ids_add(ids, (int32_t)whole) ? RT_FAIL("out of memory") : 0;
  size_t nsym = 0, *at = malloc((w->n + 1) * sizeof *at), *len = malloc((w->n + 1) * sizeof *len);
  Str key = {0};
  int rc = at && len ? 0 : RT_FAIL("out of memory");
  for (size_t i = 0; !rc && i < w->n; i += len[nsym++]) {
    at[nsym] = i;
    len[nsym] = utf8_len((unsigned char)w->b[i]);
    if (i + len[nsym] > w->n) len[nsym] = w->n - i;
  }
  while (!rc && nsym > 1) {
    int64_t best = -1;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < nsym; i++) {
      int64_t r = rank(t, w->b + at[i], len[i], w->b + at[i + 1], len[i + 1], &key);
      if (r == -2) rc = RT_FAIL("out of memory");
      if (r >= 0 && (best < 0 || r < best)) best = r, bi = i;
    }
    if (best < 0 || rc) break;
    len[bi] += len[bi + 1];
    memmove(at + bi + 1, at + bi + 2, (nsym - bi - 2) * sizeof *at);
    memmove(len + bi + 1, len + bi + 2, (nsym - bi - 2) * sizeof *len);
    nsym--;
  }
  for (size_t i = 0; !rc && i < nsym; i++) rc = symbol_ids(t, w->b + at[i], len[i], ids, err, errlen);
  free(at);
  free(len);
  free(key.b);
  return rc;
}

/* A stretch of text without added tokens: normalized, pre-tokenized, each piece by BPE. */
static int encode_text(const PprBpe *t, const char *s, size_t n, int first, Ids *ids, char *err, size_t errlen) {
  Pieces p = {0};
  int rc = pieces_add(&p, s, n) ? RT_FAIL("out of memory") : 0;
  if (!rc && normalize(t, &p.v[0])) rc = RT_FAIL("out of memory");
  for (int k = 0; !rc && k < t->npre; k++) rc = pre_apply(t, &t->pre[k], &p, first, err, errlen);
  for (int k = 0; !rc && k < p.n; k++) rc = bpe_piece(t, &p.v[k], ids, err, errlen);
  pieces_free(&p);
  return rc;
}

/* The longest added token at s[i..n) (-1: none). */
static int added_at(const PprBpe *t, const char *s, size_t n, size_t i) {
  int best = -1;
  for (int a = 0; a < t->nadded; a++)
    if (t->added[a].n <= n - i && !memcmp(s + i, t->added[a].s, t->added[a].n) &&
        (best < 0 || t->added[a].n > t->added[best].n))
      best = a;
  return best;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

int ppr_bpe_encode(const PprBpe *t, const char *text, size_t n, int32_t **out, int64_t *nout, char *err,
                   size_t errlen) {
  Ids ids = {0};
  int rc = 0;
  if (utf8proc_decompose((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)n, NULL, 0, 0) < 0)
    rc = RT_FAIL("the text is not valid UTF-8");
  size_t from = 0;
  for (size_t i = 0; !rc && i <= n;) {
    int a = i < n ? added_at(t, text, n, i) : -1;
    if (i < n && a < 0) {
      i++;
      continue;
    }
    size_t end = i, next = i < n ? i + t->added[a].n : n;
    if (a >= 0 && t->added[a].lstrip)
      while (end > from && is_space(text[end - 1])) end--;
    if (end > from) rc = encode_text(t, text + from, end - from, from == 0, &ids, err, errlen);
    if (!rc && a >= 0 && ids_add(&ids, t->added[a].id)) rc = RT_FAIL("out of memory");
    if (a >= 0 && t->added[a].rstrip)
      while (next < n && is_space(text[next])) next++;
    from = i = next;
    if (a < 0) break;
  }
  if (rc) {
    free(ids.v);
    return -1;
  }
  *out = ids.v;
  *nout = ids.n;
  return 0;
}

/* ---- decoding ---------------------------------------------------------------------------------- */

int ppr_bpe_decode(const PprBpe *t, const int32_t *ids, int64_t n, char **text, size_t *len) {
  Str o = {0};
  int oom = str_add(&o, "", 0);
  for (int64_t k = 0; k < n && !oom; k++) {
    const char *s = ids[k] >= 0 && ids[k] < t->nid ? t->by_id[ids[k]] : NULL;
    unsigned x;
    char b[32];
    if (!s) {
      snprintf(b, sizeof b, "<%d>", (int)ids[k]);
      oom |= str_add(&o, b, strlen(b));
    } else if (t->dec_bytes)
      for (size_t i = 0; s[i];) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t m = utf8proc_iterate((const utf8proc_uint8_t *)s + i, -1, &cp);
        if (m <= 0) m = 1, cp = -1;
        int byte = cp >= 0 && cp < 324 ? t->char_byte[cp] : -1;
        char c = (char)byte;
        oom |= byte >= 0 ? str_add(&o, &c, 1) : str_add(&o, s + i, (size_t)m);
        i += (size_t)m;
      }
    else if (strlen(s) == 6 && sscanf(s, "<0x%2X>", &x) == 1) {
      char c = (char)x;
      oom |= str_add(&o, &c, 1);
    } else
      for (size_t i = 0; s[i];)
        if (!strncmp(s + i, "\xE2\x96\x81", 3)) oom |= str_add(&o, " ", 1), i += 3;
        else oom |= str_add(&o, s + i, 1), i++;
  }
  if (oom) {
    free(o.b);
    return -1;
  }
  size_t strip = 0;
  while ((int)strip < t->dec_strip && strip < o.n && o.b[strip] == ' ') strip++;
  memmove(o.b, o.b + strip, o.n - strip + 1);
  *text = o.b;
  *len = o.n - strip;
  return 0;
}
