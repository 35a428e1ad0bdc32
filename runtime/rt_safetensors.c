/* rt_safetensors.c - safetensors reader (strict JSON header parser; F32/F16/BF16 -> f32, slices) and F32 writer. */
#include "rt_io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define JSON_MAX_DEPTH 64
#define NAME_FMT "%.200s" /* tensor names are clipped in messages */

#if defined(__GNUC__)
#define RT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RT_PRINTF(a, b)
#endif

typedef struct {
    char *name;
    int dtype;
    int ndim;
    int64_t *dims; /* ndim entries; NULL for a scalar */
    int64_t numel;
    uint64_t begin, end; /* byte offsets into the data section */
} StTensor;

typedef struct {
    const char *name;
    int idx;
} StIdx;

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
};

/* JSON parser state. */
typedef struct {
    const unsigned char *s;
    size_t n, pos;
    int depth;
    const char *path;
    char *err;
    size_t errlen;
} JP;

static void set_err(char *err, size_t errlen, const char *fmt, ...) RT_PRINTF(3, 4);
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int jp_fail(JP *p, const char *fmt, ...) RT_PRINTF(2, 3);
static int jp_fail(JP *p, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    set_err(p->err, p->errlen, "%s: header JSON: %s (at header byte %zu)", p->path, msg, p->pos);
    return -1;
}

static const char *dtype_name(int dt) {
    switch (dt) {
    case RT_ST_F32: return "F32";
    case RT_ST_F16: return "F16";
    case RT_ST_BF16: return "BF16";
    default: return NULL;
    }
}

static size_t dtype_size(int dt) { return dt == RT_ST_F32 ? 4 : 2; }

static uint64_t rd_le64(const unsigned char *b) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = (v << 8) | b[k];
    return v;
}

static uint32_t rd_le32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint16_t rd_le16(const unsigned char *b) { return (uint16_t)(b[0] | b[1] << 8); }

/* ---------------- JSON ---------------- */

static void skip_ws(JP *p) {
    while (p->pos < p->n) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int peek(const JP *p) { return p->pos < p->n ? p->s[p->pos] : -1; }

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at s[j..j+4) (caller checked bounds); -1 if not hex. */
static long hex4(const unsigned char *s) {
    long v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(s[k]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Length of a valid UTF-8 sequence at s[0..avail), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t avail) {
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3;
    else if (c >= 0xF0 && c <= 0xF4) len = 4;
    else return 0;
    if (avail < len) return 0;
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F; /* no UTF-16 surrogates */
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F; /* <= U+10FFFF */
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < len; k++)
        if (s[k] < 0x80 || s[k] > 0xBF) return 0;
    return len;
}

static size_t put_utf8(unsigned char *o, unsigned long cp) {
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a JSON string at p->pos (which must be '"') into a malloc'ed,
 * NUL-terminated UTF-8 string. Strings containing NUL (\u0000) are rejected. */
static int parse_string(JP *p, char **out) {
    *out = NULL;
    if (peek(p) != '"') return jp_fail(p, "expected a string");
    size_t i = p->pos + 1;
    while (i < p->n && p->s[i] != '"') i += (p->s[i] == '\\') ? 2 : 1;
    if (i >= p->n) return jp_fail(p, "unterminated string");
    size_t end = i; /* index of the closing quote */
    unsigned char *o = malloc(end - p->pos); /* decoded length <= raw length */
    if (!o) return jp_fail(p, "out of memory");
    size_t olen = 0, j = p->pos + 1;
    while (j < end) {
        unsigned char c = p->s[j];
        if (c < 0x20) {
            p->pos = j;
            free(o);
            return jp_fail(p, "unescaped control character 0x%02x in string", c);
        }
        if (c == '\\') {
            unsigned char e = p->s[j + 1]; /* j + 1 < end by construction of the scan */
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e != 0 && simple) {
                static const char map[] = "\"\\/\b\f\n\r\t";
                o[olen++] = (unsigned char)map[simple - "\"\\/bfnrt"];
                j += 2;
                continue;
            }
            if (e != 'u') {
                p->pos = j;
                free(o);
                return jp_fail(p, "invalid escape '\\%c' in string", e >= 0x20 && e < 0x7F ? e : '?');
            }
            long cp = (j + 6 <= end) ? hex4(p->s + j + 2) : -1;
            if (cp < 0) {
                p->pos = j;
                free(o);
                return jp_fail(p, "invalid \\u escape (need 4 hex digits)");
            }
            j += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                p->pos = j - 6;
                free(o);
                return jp_fail(p, "unpaired low surrogate \\u%04lx", cp);
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                long lo = -1;
                if (j + 6 <= end && p->s[j] == '\\' && p->s[j + 1] == 'u') lo = hex4(p->s + j + 2);
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    p->pos = j - 6;
                    free(o);
                    return jp_fail(p, "unpaired high surrogate \\u%04lx", cp);
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                j += 6;
            }
            if (cp == 0) {
                p->pos = j - 6;
                free(o);
                return jp_fail(p, "\\u0000 (NUL) in string is not supported");
            }
            olen += put_utf8(o + olen, (unsigned long)cp);
            continue;
        }
        size_t sl = utf8_seq(p->s + j, end - j);
        if (sl == 0) {
            p->pos = j;
            free(o);
            return jp_fail(p, "invalid UTF-8 byte 0x%02x in string", c);
        }
        memcpy(o + olen, p->s + j, sl);
        olen += sl;
        j += sl;
    }
    o[olen] = 0;
    p->pos = end + 1;
    *out = (char *)o;
    return 0;
}

/* Validates a JSON number at p->pos. *is_uint is set when it is a plain
 * non-negative integer that fits in uint64 (value in *u). */
static int parse_number(JP *p, int *is_uint, uint64_t *u) {
    int neg = 0, other = 0, overflow = 0;
    uint64_t v = 0;
    *is_uint = 0;
    *u = 0;
    if (peek(p) == '-') { neg = 1; p->pos++; }
    int c = peek(p);
    if (c < '0' || c > '9') return jp_fail(p, "invalid number");
    if (c == '0') {
        p->pos++;
        c = peek(p);
        if (c >= '0' && c <= '9') return jp_fail(p, "leading zero in number");
    } else {
        while ((c = peek(p)) >= '0' && c <= '9') {
            unsigned d = (unsigned)(c - '0');
            if (v > (UINT64_MAX - d) / 10) overflow = 1;
            else v = v * 10 + d;
            p->pos++;
        }
    }
    if (peek(p) == '.') {
        other = 1;
        p->pos++;
        c = peek(p);
        if (c < '0' || c > '9') return jp_fail(p, "invalid number (digit expected after '.')");
        while ((c = peek(p)) >= '0' && c <= '9') p->pos++;
    }
    c = peek(p);
    if (c == 'e' || c == 'E') {
        other = 1;
        p->pos++;
        c = peek(p);
        if (c == '+' || c == '-') p->pos++;
        c = peek(p);
        if (c < '0' || c > '9') return jp_fail(p, "invalid number (digit expected in exponent)");
        while ((c = peek(p)) >= '0' && c <= '9') p->pos++;
    }
    if (!neg && !other && !overflow) {
        *is_uint = 1;
        *u = v;
    }
    return 0;
}

static int parse_literal(JP *p) {
    static const char *const lits[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t l = strlen(lits[k]);
        if (p->n - p->pos >= l && memcmp(p->s + p->pos, lits[k], l) == 0) {
            p->pos += l;
            return 0;
        }
    }
    return jp_fail(p, "invalid literal");
}

static int skip_value(JP *p);

/* Parses an object or array (p->pos at '{' / '['), discarding contents. */
static int skip_container(JP *p) {
    int obj = p->s[p->pos] == '{';
    int close = obj ? '}' : ']';
    if (p->depth >= JSON_MAX_DEPTH) return jp_fail(p, "nesting deeper than %d levels", JSON_MAX_DEPTH);
    p->depth++;
    p->pos++;
    skip_ws(p);
    if (peek(p) == close) {
        p->pos++;
        p->depth--;
        return 0;
    }
    for (;;) {
        skip_ws(p);
        if (obj) {
            char *k;
            if (peek(p) != '"') return jp_fail(p, "expected a string key");
            if (parse_string(p, &k)) return -1;
            free(k);
            skip_ws(p);
            if (peek(p) != ':') return jp_fail(p, "expected ':'");
            p->pos++;
            skip_ws(p);
        }
        if (skip_value(p)) return -1;
        skip_ws(p);
        int c = peek(p);
        if (c == ',') { p->pos++; continue; }
        if (c == close) { p->pos++; break; }
        return jp_fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    p->depth--;
    return 0;
}

static int skip_value(JP *p) {
    int c = peek(p);
    if (c < 0) return jp_fail(p, "unexpected end of header, value expected");
    if (c == '{' || c == '[') return skip_container(p);
    if (c == '"') {
        char *s;
        if (parse_string(p, &s)) return -1;
        free(s);
        return 0;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        int isu;
        uint64_t u;
        return parse_number(p, &isu, &u);
    }
    if (c == 't' || c == 'f' || c == 'n') return parse_literal(p);
    return jp_fail(p, "unexpected character 0x%02x, value expected", (unsigned)c);
}

/* Parses an array of non-negative integers <= INT64_MAX (at most maxn of them). */
static int parse_uint_array(JP *p, const char *tname, const char *key, uint64_t *vals, int maxn,
                            int *count) {
    *count = 0;
    if (peek(p) != '[')
        return jp_fail(p, "tensor '" NAME_FMT "': \"%s\" must be an array of integers", tname, key);
    if (p->depth >= JSON_MAX_DEPTH) return jp_fail(p, "nesting deeper than %d levels", JSON_MAX_DEPTH);
    p->pos++;
    skip_ws(p);
    if (peek(p) == ']') {
        p->pos++;
        return 0;
    }
    for (;;) {
        skip_ws(p);
        int c = peek(p), isu = 0;
        uint64_t u = 0;
        if (c == '-' || (c >= '0' && c <= '9')) {
            if (parse_number(p, &isu, &u)) return -1;
        }
        if (!isu || u > (uint64_t)INT64_MAX)
            return jp_fail(p, "tensor '" NAME_FMT "': \"%s\" entries must be non-negative integers <= 2^63-1",
                           tname, key);
        if (*count >= maxn)
            return jp_fail(p, "tensor '" NAME_FMT "': \"%s\" has more than %d entries", tname, key, maxn);
        vals[(*count)++] = u;
        skip_ws(p);
        c = peek(p);
        if (c == ',') { p->pos++; continue; }
        if (c == ']') { p->pos++; break; }
        return jp_fail(p, "tensor '" NAME_FMT "': \"%s\": expected ',' or ']'", tname, key);
    }
    return 0;
}

static int parse_metadata(JP *p) {
    if (peek(p) != '{') return jp_fail(p, "\"__metadata__\" must be an object of string -> string");
    p->pos++;
    skip_ws(p);
    if (peek(p) == '}') {
        p->pos++;
        return 0;
    }
    for (;;) {
        char *k, *v;
        skip_ws(p);
        if (peek(p) != '"') return jp_fail(p, "\"__metadata__\": expected a string key");
        if (parse_string(p, &k)) return -1;
        skip_ws(p);
        if (peek(p) != ':') {
            free(k);
            return jp_fail(p, "expected ':'");
        }
        p->pos++;
        skip_ws(p);
        if (peek(p) != '"') {
            int r = jp_fail(p, "\"__metadata__\" value for key '" NAME_FMT "' must be a string", k);
            free(k);
            return r;
        }
        free(k);
        if (parse_string(p, &v)) return -1;
        free(v);
        skip_ws(p);
        int c = peek(p);
        if (c == ',') { p->pos++; continue; }
        if (c == '}') { p->pos++; break; }
        return jp_fail(p, "\"__metadata__\": expected ',' or '}'");
    }
    return 0;
}

static void free_tensor(StTensor *t) {
    free(t->name);
    free(t->dims);
}

/* Parses one tensor entry; takes ownership of name. */
static int parse_tensor(JP *p, RtStFile *f, char *name) {
    StTensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = -1;
    uint64_t dims[RT_ST_MAX_NDIM], offs[2];
    int ndim = -1, noffs = -1;
    if (peek(p) != '{') {
        jp_fail(p, "tensor '" NAME_FMT "': expected an object with dtype/shape/data_offsets", name);
        goto fail;
    }
    p->pos++;
    skip_ws(p);
    if (peek(p) == '}') {
        p->pos++;
    } else {
        for (;;) {
            char *k;
            skip_ws(p);
            if (peek(p) != '"') {
                jp_fail(p, "tensor '" NAME_FMT "': expected a string key", name);
                goto fail;
            }
            if (parse_string(p, &k)) goto fail;
            skip_ws(p);
            if (peek(p) != ':') {
                free(k);
                jp_fail(p, "expected ':'");
                goto fail;
            }
            p->pos++;
            skip_ws(p);
            int is_dtype = !strcmp(k, "dtype"), is_shape = !strcmp(k, "shape"),
                is_offs = !strcmp(k, "data_offsets");
            if ((is_dtype && t.dtype >= 0) || (is_shape && ndim >= 0) || (is_offs && noffs >= 0)) {
                jp_fail(p, "tensor '" NAME_FMT "': duplicate key \"%s\"", name, k);
                free(k);
                goto fail;
            }
            free(k);
            if (is_dtype) {
                char *dt;
                if (peek(p) != '"') {
                    jp_fail(p, "tensor '" NAME_FMT "': \"dtype\" must be a string", name);
                    goto fail;
                }
                if (parse_string(p, &dt)) goto fail;
                if (!strcmp(dt, "F32")) t.dtype = RT_ST_F32;
                else if (!strcmp(dt, "F16")) t.dtype = RT_ST_F16;
                else if (!strcmp(dt, "BF16")) t.dtype = RT_ST_BF16;
                else {
                    set_err(p->err, p->errlen,
                            "%s: tensor '" NAME_FMT "': unsupported dtype \"%.40s\" (supported: F32, F16, BF16)",
                            p->path, name, dt);
                    free(dt);
                    goto fail;
                }
                free(dt);
            } else if (is_shape) {
                if (parse_uint_array(p, name, "shape", dims, RT_ST_MAX_NDIM, &ndim)) goto fail;
            } else if (is_offs) {
                if (parse_uint_array(p, name, "data_offsets", offs, 2, &noffs)) goto fail;
                if (noffs != 2) {
                    jp_fail(p, "tensor '" NAME_FMT "': \"data_offsets\" must have 2 entries, found %d", name,
                            noffs);
                    goto fail;
                }
            } else if (skip_value(p)) {
                goto fail;
            }
            skip_ws(p);
            int c = peek(p);
            if (c == ',') { p->pos++; continue; }
            if (c == '}') { p->pos++; break; }
            jp_fail(p, "tensor '" NAME_FMT "': expected ',' or '}'", name);
            goto fail;
        }
    }
    if (t.dtype < 0 || ndim < 0 || noffs < 0) {
        set_err(p->err, p->errlen, "%s: tensor '" NAME_FMT "': missing \"%s\"", p->path, name,
                t.dtype < 0 ? "dtype" : ndim < 0 ? "shape" : "data_offsets");
        goto fail;
    }
    /* element count, overflow-checked (a zero dim makes it 0 regardless of the others) */
    int64_t numel = 1;
    int zero = 0;
    for (int d = 0; d < ndim; d++) zero |= dims[d] == 0;
    if (zero) {
        numel = 0;
    } else {
        for (int d = 0; d < ndim; d++) {
            if ((uint64_t)numel > (uint64_t)INT64_MAX / dims[d]) {
                set_err(p->err, p->errlen, "%s: tensor '" NAME_FMT "': shape element count overflows int64",
                        p->path, name);
                goto fail;
            }
            numel *= (int64_t)dims[d];
        }
    }
    uint64_t esz = dtype_size(t.dtype);
    if ((uint64_t)numel > UINT64_MAX / esz) {
        set_err(p->err, p->errlen, "%s: tensor '" NAME_FMT "': byte size overflows", p->path, name);
        goto fail;
    }
    uint64_t need = (uint64_t)numel * esz;
    if (offs[1] < offs[0]) {
        set_err(p->err, p->errlen,
                "%s: tensor '" NAME_FMT "': data_offsets [%llu, %llu] have end < begin", p->path, name,
                (unsigned long long)offs[0], (unsigned long long)offs[1]);
        goto fail;
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
        set_err(p->err, p->errlen,
                "%s: tensor '" NAME_FMT "': data_offsets [%llu, %llu] span %llu bytes but shape %s of %s "
                "needs %llu bytes",
                p->path, name, (unsigned long long)offs[0], (unsigned long long)offs[1],
                (unsigned long long)(offs[1] - offs[0]), shp, dtype_name(t.dtype), (unsigned long long)need);
        goto fail;
    }
    t.ndim = ndim;
    t.numel = numel;
    t.begin = offs[0];
    t.end = offs[1];
    if (ndim > 0) {
        t.dims = malloc((size_t)ndim * sizeof *t.dims);
        if (!t.dims) {
            set_err(p->err, p->errlen, "%s: out of memory", p->path);
            goto fail;
        }
        for (int d = 0; d < ndim; d++) t.dims[d] = (int64_t)dims[d];
    }
    if (f->n == f->cap) {
        if (f->cap >= INT_MAX / 2) {
            set_err(p->err, p->errlen, "%s: too many tensors", p->path);
            goto fail;
        }
        int nc = f->cap ? f->cap * 2 : 16;
        StTensor *nt = realloc(f->t, (size_t)nc * sizeof *nt);
        if (!nt) {
            set_err(p->err, p->errlen, "%s: out of memory", p->path);
            goto fail;
        }
        f->t = nt;
        f->cap = nc;
    }
    f->t[f->n++] = t;
    return 0;
fail:
    free_tensor(&t);
    return -1;
}

static int parse_header(JP *p, RtStFile *f) {
    int seen_meta = 0;
    skip_ws(p);
    if (p->pos >= p->n) return jp_fail(p, "header is empty");
    if (p->s[p->pos] != '{')
        return jp_fail(p, "header is not a JSON object (starts with byte 0x%02x)", p->s[p->pos]);
    p->pos++;
    p->depth = 1;
    skip_ws(p);
    if (peek(p) == '}') {
        p->pos++;
    } else {
        for (;;) {
            char *key;
            skip_ws(p);
            if (peek(p) != '"') return jp_fail(p, "expected a string key (tensor name)");
            if (parse_string(p, &key)) return -1;
            skip_ws(p);
            if (peek(p) != ':') {
                free(key);
                return jp_fail(p, "expected ':'");
            }
            p->pos++;
            skip_ws(p);
            if (!strcmp(key, "__metadata__")) {
                free(key);
                if (seen_meta) return jp_fail(p, "duplicate \"__metadata__\"");
                seen_meta = 1;
                p->depth++;
                int r = parse_metadata(p);
                p->depth--;
                if (r) return -1;
            } else {
                p->depth++;
                int r = parse_tensor(p, f, key); /* takes key */
                p->depth--;
                if (r) return -1;
            }
            skip_ws(p);
            int c = peek(p);
            if (c == ',') { p->pos++; continue; }
            if (c == '}') { p->pos++; break; }
            return jp_fail(p, "expected ',' or '}'");
        }
    }
    skip_ws(p);
    if (p->pos != p->n) return jp_fail(p, "unexpected data after the JSON object");
    return 0;
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
        set_err(err, errlen, "%s: out of memory", path);
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
            set_err(err, errlen,
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

static int cmp_idx(const void *a, const void *b) {
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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        set_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if (st.st_size < 8) {
        set_err(err, errlen, "%s: file too small for a safetensors header: %lld bytes, need at least 8", path,
                (long long)st.st_size);
        close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        set_err(err, errlen, "%s: file too large for this address space", path);
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) {
        f->base = m;
        f->mapped = 1;
    } else {
        f->base = malloc(size);
        if (!f->base) {
            set_err(err, errlen, "%s: out of memory reading %zu bytes", path, size);
            close(fd);
            return -1;
        }
        size_t got = 0;
        while (got < size) {
            ssize_t r = read(fd, f->base + got, size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                set_err(err, errlen, "%s: read failed after %zu of %zu bytes: %s", path, got, size,
                        r < 0 ? strerror(errno) : "unexpected end of file");
                close(fd);
                return -1;
            }
            got += (size_t)r;
        }
    }
    f->size = size;
    close(fd);
    return 0;
}

int rt_st_open(const char *path, RtStFile **out, char *err, size_t errlen) {
    if (out) *out = NULL;
    if (!path || !out) {
        set_err(err, errlen, "rt_st_open: NULL %s", path ? "out" : "path");
        return -1;
    }
    RtStFile *f = calloc(1, sizeof *f);
    if (!f || !(f->path = malloc(strlen(path) + 1))) {
        free(f);
        set_err(err, errlen, "%s: out of memory", path);
        return -1;
    }
    memcpy(f->path, path, strlen(path) + 1);
    if (load_file(f, path, err, errlen)) goto fail;

    uint64_t hlen = rd_le64(f->base);
    uint64_t avail = (uint64_t)f->size - 8;
    if (hlen > RT_ST_MAX_HEADER) {
        set_err(err, errlen, "%s: header length %llu exceeds the %u-byte (100 MB) limit (file has %zu bytes)",
                path, (unsigned long long)hlen, RT_ST_MAX_HEADER, f->size);
        goto fail;
    }
    if (hlen > avail) {
        set_err(err, errlen, "%s: truncated: header length %llu exceeds the %llu bytes after the length field",
                path, (unsigned long long)hlen, (unsigned long long)avail);
        goto fail;
    }
    f->data = f->base + 8 + hlen;
    f->datalen = avail - hlen;

    JP p = {f->base + 8, (size_t)hlen, 0, 0, path, err, errlen};
    if (parse_header(&p, f)) goto fail;

    /* all data inside the file */
    uint64_t max_end = 0;
    int max_i = -1;
    for (int i = 0; i < f->n; i++)
        if (f->t[i].end > max_end || max_i < 0) {
            max_end = f->t[i].end;
            max_i = i;
        }
    if (max_i >= 0 && max_end > f->datalen) {
        set_err(err, errlen,
                "%s: truncated: header says %llu bytes of data, file has %llu (tensor '" NAME_FMT
                "' data_offsets [%llu, %llu])",
                path, (unsigned long long)max_end, (unsigned long long)f->datalen, f->t[max_i].name,
                (unsigned long long)f->t[max_i].begin, (unsigned long long)f->t[max_i].end);
        goto fail;
    }

    /* name index + duplicate check */
    if (f->n > 0) {
        f->sorted = malloc((size_t)f->n * sizeof *f->sorted);
        if (!f->sorted) {
            set_err(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        for (int i = 0; i < f->n; i++) {
            f->sorted[i].name = f->t[i].name;
            f->sorted[i].idx = i;
        }
        qsort(f->sorted, (size_t)f->n, sizeof *f->sorted, cmp_idx);
        for (int i = 1; i < f->n; i++)
            if (!strcmp(f->sorted[i - 1].name, f->sorted[i].name)) {
                set_err(err, errlen, "%s: duplicate tensor name '" NAME_FMT "' (entries %d and %d)", path,
                        f->sorted[i].name, f->sorted[i - 1].idx, f->sorted[i].idx);
                goto fail;
            }
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

static void convert(int dtype, const unsigned char *src, size_t count, float *dst) {
    switch (dtype) {
    case RT_ST_F32:
        for (size_t k = 0; k < count; k++) dst[k] = bits_f32(rd_le32(src + 4 * k));
        break;
    case RT_ST_F16:
        for (size_t k = 0; k < count; k++) dst[k] = bits_f32(f16_bits_to_f32_bits(rd_le16(src + 2 * k)));
        break;
    default: /* BF16 */
        for (size_t k = 0; k < count; k++) dst[k] = bits_f32((uint32_t)rd_le16(src + 2 * k) << 16);
        break;
    }
}

static const StTensor *check_read(const RtStFile *f, int i, const char *fn, char *err, size_t errlen) {
    if (!f) {
        set_err(err, errlen, "%s: NULL file", fn);
        return NULL;
    }
    const StTensor *t = get_t(f, i);
    if (!t) set_err(err, errlen, "%s: %s: tensor index %d out of range (file has %d tensors)", f->path, fn, i, f->n);
    return t;
}

int rt_st_read_f32(const RtStFile *f, int i, float *dst, size_t n, char *err, size_t errlen) {
    const StTensor *t = check_read(f, i, "rt_st_read_f32", err, errlen);
    if (!t) return -1;
    if ((uint64_t)t->numel != (uint64_t)n) {
        set_err(err, errlen, "%s: tensor '" NAME_FMT "': destination has %zu elements, tensor has %lld", f->path,
                t->name, n, (long long)t->numel);
        return -1;
    }
    if (n == 0) return 0;
    if (!dst) {
        set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL destination", f->path, t->name);
        return -1;
    }
    convert(t->dtype, f->data + t->begin, n, dst);
    return 0;
}

int rt_st_read_f32_slice(const RtStFile *f, int i, const int64_t *start, const int64_t *len, float *dst,
                         size_t n, char *err, size_t errlen) {
    const StTensor *t = check_read(f, i, "rt_st_read_f32_slice", err, errlen);
    if (!t) return -1;
    int nd = t->ndim;
    if (nd > 0 && (!start || !len)) {
        set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL slice start/len for a %d-dim tensor", f->path,
                t->name, nd);
        return -1;
    }
    int zero = 0;
    for (int d = 0; d < nd; d++) {
        if (start[d] < 0 || len[d] < 0 || start[d] > t->dims[d] || len[d] > t->dims[d] - start[d]) {
            set_err(err, errlen,
                    "%s: tensor '" NAME_FMT "': slice dim %d [%lld, %lld + %lld) out of range for size %lld",
                    f->path, t->name, d, (long long)start[d], (long long)start[d], (long long)len[d],
                    (long long)t->dims[d]);
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
        set_err(err, errlen, "%s: tensor '" NAME_FMT "': destination has %zu elements, slice has %lld", f->path,
                t->name, n, (long long)total);
        return -1;
    }
    if (total == 0) return 0;
    if (!dst) {
        set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL destination", f->path, t->name);
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
        convert(t->dtype, src + (size_t)off * es, inner, dst);
        dst += inner;
        int d = nd - 2;
        while (d >= 0 && ++idx[d] == len[d]) idx[d--] = 0;
        if (d < 0) break;
    }
    return 0;
}

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

static int valid_utf8(const char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n) {
        size_t l = utf8_seq((const unsigned char *)s + i, n - i);
        if (!l) return 0;
        i += l;
    }
    return 1;
}

int rt_st_write(const char *path, int n, const char *const *names, const int *ndims,
                const int64_t *const *shapes, const float *const *data, char *err, size_t errlen) {
    if (!path) {
        set_err(err, errlen, "rt_st_write: NULL path");
        return -1;
    }
    if (n < 0 || (n > 0 && (!names || !ndims || !shapes || !data))) {
        set_err(err, errlen, "%s: rt_st_write: bad arguments (n = %d, NULL array)", path, n);
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
            set_err(err, errlen, "%s: out of memory", path);
            goto done;
        }
    }
    uint64_t total = 0;
    for (int k = 0; k < n; k++) {
        const char *nm = names[k];
        if (!nm) {
            set_err(err, errlen, "%s: tensor %d: NULL name", path, k);
            goto done;
        }
        if (!valid_utf8(nm) || !strcmp(nm, "__metadata__")) {
            set_err(err, errlen, "%s: tensor %d: name '" NAME_FMT "' is %s", path, k, nm,
                    strcmp(nm, "__metadata__") ? "not valid UTF-8" : "reserved");
            goto done;
        }
        if (ndims[k] < 0 || ndims[k] > RT_ST_MAX_NDIM) {
            set_err(err, errlen, "%s: tensor '" NAME_FMT "': ndim %d out of range 0..%d", path, nm, ndims[k],
                    RT_ST_MAX_NDIM);
            goto done;
        }
        if (ndims[k] > 0 && !shapes[k]) {
            set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL shape for %d dims", path, nm, ndims[k]);
            goto done;
        }
        int zero = 0;
        for (int d = 0; d < ndims[k]; d++) {
            if (shapes[k][d] < 0) {
                set_err(err, errlen, "%s: tensor '" NAME_FMT "': negative dim %d = %lld", path, nm, d,
                        (long long)shapes[k][d]);
                goto done;
            }
            zero |= shapes[k][d] == 0;
        }
        int64_t ne = zero ? 0 : 1;
        for (int d = 0; d < ndims[k] && !zero; d++) {
            if (ne > INT64_MAX / 4 / shapes[k][d]) {
                set_err(err, errlen, "%s: tensor '" NAME_FMT "': element count overflows", path, nm);
                goto done;
            }
            ne *= shapes[k][d];
        }
        if (ne > 0 && !data[k]) {
            set_err(err, errlen, "%s: tensor '" NAME_FMT "': NULL data for %lld elements", path, nm, (long long)ne);
            goto done;
        }
        if ((uint64_t)ne * 4 > (uint64_t)INT64_MAX - total) {
            set_err(err, errlen, "%s: total data size overflows", path);
            goto done;
        }
        total += (uint64_t)ne * 4;
        numel[k] = ne;
        idx[k].name = nm;
        idx[k].idx = k;
    }
    if (n > 0) {
        qsort(idx, (size_t)n, sizeof *idx, cmp_idx);
        for (int k = 1; k < n; k++)
            if (!strcmp(idx[k - 1].name, idx[k].name)) {
                set_err(err, errlen, "%s: duplicate tensor name '" NAME_FMT "' (tensors %d and %d)", path,
                        idx[k].name, idx[k - 1].idx, idx[k].idx);
                goto done;
            }
    }

    /* header JSON */
    sb_put(&hb, "{", 1);
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        if (k) sb_put(&hb, ",", 1);
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
        set_err(err, errlen, "%s: out of memory building header", path);
        goto done;
    }
    if (hb.len > RT_ST_MAX_HEADER) {
        set_err(err, errlen, "%s: header would be %zu bytes, over the %u-byte limit", path, hb.len,
                RT_ST_MAX_HEADER);
        goto done;
    }

    size_t plen = strlen(path);
    tmp = malloc(plen + 5);
    chunk = malloc(1 << 16);
    if (!tmp || !chunk) {
        set_err(err, errlen, "%s: out of memory", path);
        goto done;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
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
        set_err(err, errlen, "%s: close of %s failed: %s", path, tmp, strerror(errno));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        set_err(err, errlen, "%s: rename from %s failed: %s", path, tmp, strerror(errno));
        goto done;
    }
    rc = 0;
    goto done;
werr:
    set_err(err, errlen, "%s: write to %s failed: %s", path, tmp, strerror(errno));
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
