/* rt_prog.c - the strict parser of ppr program listings (docs/stage-format.md) into an RtProg. */
#include "rt_prog.h"
#include "rt_util.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The limits shared with ppc (ranks, arena, elements, step dims, names) are pp_limits.h's. */
#define MAX_FIELDS      128               /* fields of one line */
#define MAX_LISTING     ((size_t)1 << 30) /* 1 GiB */
#define MAX_SLOTS       4096
#define MAX_BATCH       ((int64_t)1 << 20) /* gemm BATCH */
#define MAX_KERNEL_FILE ((int64_t)1 << 40) /* bytes of a kernel file (`object`, `cuda` lines) */

/* ---- messages ------------------------------------------------------------------------------ */

int rt_fail_at(char *err, size_t errlen, const char *file, int line, const char *fmt, ...) {
  if (!err || errlen == 0) return -1;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < errlen) snprintf(err + n, errlen - (size_t)n, " [%s:%d]", file, line);
  return -1;
}

uint64_t rt_fnv1a64(const void *data, size_t n) {
  const unsigned char *b = data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

static const char *const region_names[RT_NREG] = {"params", "grads",   "adam_m",   "adam_v",
                                                  "slots",  "scratch", "workspace"};
static const char *const block_names[RT_NBLK] = {"forward", "backward", "optimizer"};
static const char *const scalar_names[RT_NSCALAR] = {"lr", "beta1", "beta2", "eps", "wd", "bc1", "bc2", "clip"};
static const char *const boundary_names[RT_NBND] = {"recv_fwd", "send_fwd", "recv_bwd", "send_bwd"};

const char *rt_region_name(int r) { return r >= 0 && r < RT_NREG ? region_names[r] : "?"; }
const char *rt_block_name(int b) { return b >= 0 && b < RT_NBLK ? block_names[b] : "?"; }
const char *rt_scalar_name(int s) { return s >= 0 && s < RT_NSCALAR ? scalar_names[s] : "?"; }
const char *rt_boundary_name(int k) { return k >= 0 && k < RT_NBND ? boundary_names[k] : "?"; }

static const char *const kernel_file_exts[RT_NKF] = {"so", "cl", "cubin", "ptx"};

const char *rt_kernel_file_ext(int kind) { return kind >= 0 && kind < RT_NKF ? kernel_file_exts[kind] : "?"; }

/* The listing line that names a kernel file's size and hash, for messages. */
static const char *file_sum_line(int kind) {
  return kind == RT_KF_SO ? "'object so'" : kind == RT_KF_CL ? "'object cl'" : "'cuda'";
}

char *rt_kernel_file_read(const RtProg *p, const char *dir, int kind, size_t *len, char *path, size_t pathlen,
                          char *err, size_t errlen) {
  char pbuf[4096];
  if (!path || pathlen == 0) {
    path = pbuf;
    pathlen = sizeof pbuf;
  }
  size_t dl = strlen(dir);
  snprintf(path, pathlen, "%s%s%s.%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", p->kernels_base,
           rt_kernel_file_ext(kind));
  const RtFileSum *want = &p->file[kind < 0 || kind >= RT_NKF ? 0 : kind];
  if (kind < 0 || kind >= RT_NKF || want->bytes < 0) {
    rt_util_set_err(err, errlen,
                    "%s:%d: the listing's %s line names no %s file ('- -': the listing was printed by ppc "
                    "--emit program, or ppc had no NVRTC for a cubin): compile the program with ppc -o DIR",
                    p->path, want->line, file_sum_line(kind), rt_kernel_file_ext(kind));
    return NULL;
  }
  size_t n;
  char *buf = rt_util_read_file(path, "the kernel file named by the listing's 'kernels' line", (size_t)want->bytes, &n,
                                err, errlen);
  if (!buf && n == 0) return NULL;
  if (n != (size_t)want->bytes) {
    free(buf);
    rt_util_set_err(err, errlen,
                    "%s: has %zu bytes, expected %lld (the listing's %s line, %s:%d): the file is damaged "
                    "(truncated?) or from another ppc run; compile the program again",
                    path, n, (long long)want->bytes, file_sum_line(kind), p->path, want->line);
    return NULL;
  }
  char found[17];
  snprintf(found, sizeof found, "%016llx", (unsigned long long)rt_fnv1a64(buf, n));
  if (strcmp(found, want->hash)) {
    free(buf);
    rt_util_set_err(err, errlen,
                    "%s: its content hash (FNV-1a 64 of its %lld bytes) is %s, expected %s (the listing's %s "
                    "line, %s:%d): the file is damaged or from another ppc run; compile the program again",
                    path, (long long)want->bytes, found, want->hash, file_sum_line(kind), p->path, want->line);
    return NULL;
  }
  if (len) *len = n;
  return buf;
}

RtMsg rt_boundary_msg(int kind, int mb, int prev, int next) {
  int fwd = kind == RT_BND_RECV_FWD || kind == RT_BND_SEND_FWD;
  int to_next = kind == RT_BND_SEND_FWD || kind == RT_BND_RECV_BWD;
  return (RtMsg){.send = kind == RT_BND_SEND_FWD || kind == RT_BND_SEND_BWD,
                 .peer = to_next ? next : prev,
                 .tag = 2 * mb + (fwd ? 0 : 1)};
}

/* ---- parser state -------------------------------------------------------------------------- */

enum {
  SEC_HEADER,
  SEC_REGIONS,
  SEC_BOUNDARIES,
  SEC_PARAMS,
  SEC_MODEL,
  SEC_BUFFERS,
  SEC_BLOCKS,
  SEC_BLOCK,
  SEC_SCHEDULE,
  SEC_DONE
};
enum {
  H_VERSION,
  H_COMPILER,
  H_HASH,
  H_MODEL,
  H_MESH,
  H_RANK,
  H_PEERS,
  H_STEP,
  H_VOCAB,
  H_KERNELS,
  H_OBJECT_SO,
  H_OBJECT_CL,
  H_CUDA,
  H_COUNT
};

static const char *const header_forms[H_COUNT] = {
    "ppr-program 3",
    "compiler NAME VERSION",
    "hash HEX16",
    "model NAME",
    "mesh tp N pp N dp N",
    "rank R stage S tp_rank T dp_rank D",
    "peers prev P next N",
    "step micro_batch B seq S microbatches M schedule NAME",
    "vocab N",
    "kernels NAME HEX16",
    "object so BYTES|- HEX16|-",
    "object cl BYTES|- HEX16|-",
    "cuda ARCH CUBIN-BYTES|- CUBIN-HEX16|- PTX-BYTES|- PTX-HEX16|-",
};

typedef struct {
  const char *path;
  const char *text;
  size_t len;
  char *err;
  size_t errlen;
  int line;
  char *f[MAX_FIELDS];
  int nf;
  RtProg *p;
  int sec, hdr;
  int reg_line[RT_NREG];
  int cur_blk, cap_ins, cap_params, cap_kernels, cap_entries, cap_model, cap_buffers;
  int grad_norm_line;        /* line of the optimizer block's grad_norm, 0 if none yet */
  int stop_at_mesh, stopped; /* rt_prog_read_mesh: the header up to `mesh` only */
  /* schedule bookkeeping */
  int *slot_holds; /* per slot: micro-batch whose backward is pending, or -1 */
  int *slot_recv;  /* per slot: micro-batch whose received input (recv_fwd) waits for its F, or -1 */
  int *slot_done;  /* per slot: micro-batch whose B ran last in it, until the slot is reused, or -1 */
  unsigned char *fwd_done, *bwd_done, *ops_done; /* ops_done: bit k = boundary kind k sent/received */
  int *fslot;                                    /* per micro-batch: the slot of its F */
  int last_fb_kind, last_fb_mb;                  /* the last F or B entry (RT_E_F/RT_E_B), -1 none */
  int need_b;                                    /* a recv_bwd into an @ buffer waits for this B, or -1 */
  int need_b_line;
  int nzero, nopt, nbwd, schedule_line;
} P;

static int perr(P *s, const char *fmt, ...) RT_FMT(2, 3);
static int perr(P *s, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rt_util_set_err(s->err, s->errlen, "%s:%d: %s", s->path, s->line, msg);
  return -1;
}

/* ---- tokens -------------------------------------------------------------------------------- */

static int parse_int(const char *t, int64_t lo, int64_t hi, int64_t *out) {
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

static int parse_double(const char *t, double *out) {
  if (!*t) return -1;
  char *end;
  errno = 0;
  double v = strtod(t, &end);
  if (*end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* A finite double that is also finite as a float. */
static int parse_float(const char *t, float *out) {
  double v;
  if (parse_double(t, &v) || fabs(v) > 3.4028234663852886e38) return -1;
  *out = (float)v;
  return 0;
}

static int want_int(P *s, int i, const char *what, int64_t lo, int64_t hi, int64_t *out) {
  if (i >= s->nf)
    return perr(s, "%s: missing (expected an integer in [%lld, %lld])", what, (long long)lo, (long long)hi);
  if (parse_int(s->f[i], lo, hi, out))
    return perr(s, "%s: expected an integer in [%lld, %lld], found '%.60s'", what, (long long)lo, (long long)hi,
                s->f[i]);
  return 0;
}

static int want_i32(P *s, int i, const char *what, int64_t lo, int64_t hi, int *out) {
  int64_t v;
  if (want_int(s, i, what, lo, hi, &v)) return -1;
  *out = (int)v;
  return 0;
}

static int want_word(P *s, int i, const char *word, const char *form) {
  if (i >= s->nf || strcmp(s->f[i], word) != 0)
    return perr(s, "expected '%s', found '%.60s' (the line reads '%s')", word, i < s->nf ? s->f[i] : "end of line",
                form);
  return 0;
}

static int want_nf(P *s, int n, const char *form) {
  if (s->nf != n) return perr(s, "expected %d fields, found %d (the line reads '%s')", n, s->nf, form);
  return 0;
}

static int is_hex16(const char *t) {
  if (strlen(t) != 16) return 0;
  for (int i = 0; i < 16; i++)
    if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f'))) return 0;
  return 1;
}

static int is_ident(const char *t) {
  size_t n = strlen(t);
  if (n == 0 || n > 200) return 0;
  if (!((t[0] >= 'a' && t[0] <= 'z') || (t[0] >= 'A' && t[0] <= 'Z') || t[0] == '_')) return 0;
  for (size_t i = 1; i < n; i++)
    if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z') || (t[i] >= '0' && t[i] <= '9') || t[i] == '_'))
      return 0;
  return 1;
}

static char *dupstr(const char *t) {
  size_t n = strlen(t) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, t, n);
  return d;
}

#define S_ALLOC(ptr)                                                                                                   \
  do {                                                                                                                 \
    if (!(ptr)) return rt_fail_at(s->err, s->errlen, __FILE__, __LINE__, "out of memory");                             \
  } while (0)

static int grow(P *s, void **arr, int *cap, int need, size_t elem) {
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

/* [D0,D1,...] or [] */
static int parse_shape(P *s, const char *t, int *ndim, int64_t *dims, int64_t *numel) {
  size_t n = strlen(t);
  if (n < 2 || t[0] != '[' || t[n - 1] != ']') return perr(s, "shape: expected [D0,D1,...], found '%.60s'", t);
  *ndim = 0;
  *numel = 1;
  if (n == 2) return 0;
  char tmp[256];
  if (n - 2 >= sizeof tmp) return perr(s, "shape '%.60s...' is too long", t);
  memcpy(tmp, t + 1, n - 2);
  tmp[n - 2] = 0;
  char *q = tmp;
  for (;;) {
    char *c = strchr(q, ',');
    if (c) *c = 0;
    int64_t d;
    if (*ndim >= RT_MAX_NDIM) return perr(s, "shape '%.60s' has more than %d dims", t, RT_MAX_NDIM);
    if (parse_int(q, 1, PP_MAX_NUMEL, &d))
      return perr(s, "shape '%.60s': dim '%.30s' is not an integer in [1, 2^40]", t, q);
    if (*numel > PP_MAX_NUMEL / d) return perr(s, "shape '%.60s' has more than 2^40 elements", t);
    dims[(*ndim)++] = d;
    *numel *= d;
    if (!c) break;
    q = c + 1;
  }
  return 0;
}

/* @OFF / $OFF; with extent != NULL also @OFF:BYTES / $OFF:BYTES (*extent = 0 when not given). */
static int parse_ptr(P *s, const char *t, const char *what, RtPtr *p, int64_t *extent) {
  p->present = 1;
  if (t[0] != '@' && t[0] != '$')
    return perr(s, "%s: expected %s, found '%.60s'", what, extent ? "@OFF[:BYTES] or $OFF[:BYTES]" : "@OFF or $OFF", t);
  p->in_slot = t[0] == '$';
  if (p->in_slot && s->sec == SEC_BLOCK && s->cur_blk == RT_BLK_OPTIMIZER)
    return perr(s, "%s: '%.60s': $ operands are not allowed in the optimizer block (it runs outside any slot)", what,
                t);
  char tmp[64];
  size_t n = strlen(t + 1);
  if (n >= sizeof tmp) return perr(s, "%s: operand '%.60s' is too long", what, t);
  memcpy(tmp, t + 1, n + 1);
  char *colon = strchr(tmp, ':');
  if (colon) {
    if (!extent) return perr(s, "%s: '%.60s': no ':BYTES' extent here (expected @OFF or $OFF)", what, t);
    *colon = 0;
  }
  if (parse_int(tmp, 0, PP_MAX_ARENA, &p->off))
    return perr(s, "%s: '%.60s': offset is not an integer in [0, 2^40]", what, t);
  if (p->off % 4) return perr(s, "%s: '%.60s': offset is not a multiple of 4", what, t);
  if (extent) {
    *extent = 0;
    if (colon && parse_int(colon + 1, 1, PP_MAX_ARENA, extent))
      return perr(s, "%s: '%.60s': extent is not an integer in [1, 2^40]", what, t);
  }
  return 0;
}

/* The bytes [off, off + bytes) must lie inside the arena ('@') or the slot ('$'). */
static int check_extent(P *s, const char *what, const RtPtr *p, int64_t bytes) {
  if (!p->present) return 0;
  const RtProg *g = s->p;
  int64_t limit = p->in_slot ? g->reg[RT_REG_SLOTS].bytes : g->arena;
  if (bytes > limit || p->off > limit - bytes)
    return perr(s, "%s: %c%lld + %lld bytes leaves the %s (%lld bytes)", what, p->in_slot ? '$' : '@',
                (long long)p->off, (long long)bytes, p->in_slot ? "slot" : "arena", (long long)limit);
  return 0;
}

/* ---- header -------------------------------------------------------------------------------- */

/* Fields i and i+1: a kernel file's BYTES and HEX (its FNV-1a 64 hash), or '- -' for none. */
static int file_sum(P *s, int i, int kind, const char *key, RtFileSum *out) {
  const char *ext = rt_kernel_file_ext(kind);
  const char *b = s->f[i], *h = s->f[i + 1];
  out->line = s->line;
  if (!strcmp(b, "-") && !strcmp(h, "-")) {
    out->bytes = -1;
    snprintf(out->hash, sizeof out->hash, "-");
    return 0;
  }
  if (!strcmp(b, "-") || !strcmp(h, "-"))
    return perr(s, "%s: the %s file's size and hash come together: both, or both '-'", key, ext);
  if (parse_int(b, 1, MAX_KERNEL_FILE, &out->bytes))
    return perr(s, "%s: %s bytes: expected an integer in [1, 2^40] or '-', found '%.60s'", key, ext, b);
  if (!is_hex16(h)) return perr(s, "%s: %s hash: expected 16 lowercase hex digits or '-', found '%.60s'", key, ext, h);
  memcpy(out->hash, h, 17);
  return 0;
}

static int header_line(P *s, size_t after) {
  RtProg *g = s->p;
  const char *form = header_forms[s->hdr];
  static const char *const keys[H_COUNT] = {"ppr-program", "compiler", "hash",    "model",  "mesh",   "rank", "peers",
                                            "step",        "vocab",    "kernels", "object", "object", "cuda"};
  if (s->hdr == H_PEERS && strcmp(s->f[0], keys[H_PEERS]) != 0) { /* the optional line */
    if (g->pp > 1)
      return perr(s, "expected '%s' (a pipeline-parallel program names its neighbours), found '%.60s'", form, s->f[0]);
    s->hdr = H_STEP;
    form = header_forms[s->hdr];
  }
  if (strcmp(s->f[0], keys[s->hdr]) != 0) {
    if (s->hdr == H_VERSION)
      return perr(s, "not a ppr program listing: the first line must be 'ppr-program %d'", RT_PROG_VERSION);
    return perr(s, "expected '%s' (the header lines come in a fixed order), found '%.60s'", form, s->f[0]);
  }
  int64_t v;
  switch (s->hdr) {
  case H_VERSION:
    if (s->nf != 2 || parse_int(s->f[1], INT64_MIN, INT64_MAX, &v))
      return perr(s, "not a ppr program listing: the first line must be 'ppr-program %d'", RT_PROG_VERSION);
    if (v != RT_PROG_VERSION) {
      rt_util_set_err(s->err, s->errlen, "%s: format version %lld, this ppr reads %d", s->path, (long long)v,
                      RT_PROG_VERSION);
      return -1;
    }
    break;
  case H_COMPILER: {
    if (s->nf < 2) return perr(s, "expected '%s'", form);
    size_t n = 0;
    for (int i = 1; i < s->nf; i++) n += strlen(s->f[i]) + 1;
    g->compiler = malloc(n);
    S_ALLOC(g->compiler);
    g->compiler[0] = 0;
    for (int i = 1; i < s->nf; i++) {
      if (i > 1) strcat(g->compiler, " ");
      strcat(g->compiler, s->f[i]);
    }
    break;
  }
  case H_HASH: {
    if (want_nf(s, 2, form)) return -1;
    if (!is_hex16(s->f[1])) return perr(s, "hash: expected 16 lowercase hex digits, found '%.60s'", s->f[1]);
    g->hash = strtoull(s->f[1], NULL, 16);
    uint64_t h = rt_fnv1a64(s->text + after, s->len - after);
    if (h != g->hash) {
      rt_util_set_err(s->err, s->errlen, "%s: content hash mismatch: edited by hand, or written by another ppc",
                      s->path);
      return -1;
    }
    break;
  }
  case H_MODEL:
    if (want_nf(s, 2, form)) return -1;
    if (pp_name_bad_at(s->f[1]) >= 0) return perr(s, "model: '%.60s' is not a name", s->f[1]);
    g->model = dupstr(s->f[1]);
    S_ALLOC(g->model);
    break;
  case H_MESH:
    if (want_nf(s, 7, form) || want_word(s, 1, "tp", form) || want_word(s, 3, "pp", form) ||
        want_word(s, 5, "dp", form) || want_i32(s, 2, "tp", 1, PP_MAX_RANKS, &g->tp) ||
        want_i32(s, 4, "pp", 1, PP_MAX_RANKS, &g->pp) || want_i32(s, 6, "dp", 1, PP_MAX_RANKS, &g->dp))
      return -1;
    if ((int64_t)g->tp * g->pp * g->dp > PP_MAX_RANKS) return perr(s, "mesh: more than %d ranks", PP_MAX_RANKS);
    if (s->stop_at_mesh) {
      s->stopped = 1;
      return 0;
    }
    break;
  case H_RANK: {
    int64_t nranks = (int64_t)g->tp * g->pp * g->dp;
    if (want_nf(s, 8, form) || want_word(s, 2, "stage", form) || want_word(s, 4, "tp_rank", form) ||
        want_word(s, 6, "dp_rank", form) || want_i32(s, 1, "rank", 0, nranks - 1, &g->rank) ||
        want_i32(s, 3, "stage", 0, g->pp - 1, &g->stage) || want_i32(s, 5, "tp_rank", 0, g->tp - 1, &g->tp_rank) ||
        want_i32(s, 7, "dp_rank", 0, g->dp - 1, &g->dp_rank))
      return -1;
    break;
  }
  case H_PEERS: {
    int64_t nranks = (int64_t)g->tp * g->pp * g->dp;
    int prev, next;
    if (want_nf(s, 5, form) || want_word(s, 1, "prev", form) || want_word(s, 3, "next", form) ||
        want_i32(s, 2, "peers: prev", -1, nranks - 1, &prev) || want_i32(s, 4, "peers: next", -1, nranks - 1, &next))
      return -1;
    if (prev == g->rank || next == g->rank) return perr(s, "peers: a rank is not its own pipeline neighbour");
    if ((g->stage == 0) != (prev < 0))
      return perr(s, "peers: prev %d, but stage %d %s", prev, g->stage,
                  g->stage ? "has a previous stage" : "is the first stage (prev -1)");
    if ((g->stage == g->pp - 1) != (next < 0))
      return perr(s, "peers: next %d, but stage %d of %d %s", next, g->stage, g->pp,
                  g->stage == g->pp - 1 ? "is the last stage (next -1)" : "has a next stage");
    g->prev = prev;
    g->next = next;
    break;
  }
  case H_STEP:
    if (want_nf(s, 9, form) || want_word(s, 1, "micro_batch", form) || want_word(s, 3, "seq", form) ||
        want_word(s, 5, "microbatches", form) || want_word(s, 7, "schedule", form) ||
        want_i32(s, 2, "micro_batch", 1, PP_MAX_STEP_DIM, &g->micro_batch) ||
        want_i32(s, 4, "seq", 1, PP_MAX_STEP_DIM, &g->seq) ||
        want_i32(s, 6, "microbatches", 1, PP_MAX_STEP_DIM, &g->microbatches))
      return -1;
    if ((int64_t)g->micro_batch * g->seq > ((int64_t)1 << 30))
      return perr(s, "step: micro_batch * seq is more than 2^30 tokens");
    if (g->microbatches % g->dp)
      return perr(s,
                  "step: microbatches %d is not a multiple of dp %d (each data-parallel replica runs M/dp "
                  "of the step's micro-batches)",
                  g->microbatches, g->dp);
    g->local_microbatches = g->microbatches / g->dp;
    if (pp_name_bad_at(s->f[8]) >= 0) return perr(s, "step: schedule '%.60s' is not a name", s->f[8]);
    g->schedule_name = dupstr(s->f[8]);
    S_ALLOC(g->schedule_name);
    break;
  case H_VOCAB:
    if (want_nf(s, 2, form) || want_int(s, 1, "vocab", 1, INT32_MAX, &g->vocab)) return -1;
    break;
  case H_KERNELS:
    if (want_nf(s, 3, form)) return -1;
    if (!is_ident(s->f[1]))
      return perr(s,
                  "kernels: '%.60s' is not a name (letters, digits, '_'): the kernel files are NAME.so, NAME.cl, "
                  "NAME.cu in the program's directory",
                  s->f[1]);
    if (!is_hex16(s->f[2])) return perr(s, "kernels: hash: expected 16 lowercase hex digits, found '%.60s'", s->f[2]);
    g->kernels_base = dupstr(s->f[1]);
    S_ALLOC(g->kernels_base);
    memcpy(g->kernels_hash, s->f[2], 17);
    break;
  case H_OBJECT_SO:
  case H_OBJECT_CL: {
    int kind = s->hdr == H_OBJECT_SO ? RT_KF_SO : RT_KF_CL;
    if (want_word(s, 1, rt_kernel_file_ext(kind), form) || want_nf(s, 4, form) ||
        file_sum(s, 2, kind, "object", &g->file[kind]))
      return -1;
    break;
  }
  case H_CUDA:
    if (want_nf(s, 6, form)) return -1;
    if (strncmp(s->f[1], "sm_", 3) || strlen(s->f[1]) > 8 || strlen(s->f[1]) < 5 ||
        strspn(s->f[1] + 3, "0123456789") != strlen(s->f[1] + 3))
      return perr(s, "cuda: '%.60s' is not a GPU architecture (sm_80, sm_90, ...)", s->f[1]);
    if (file_sum(s, 2, RT_KF_CUBIN, "cuda", &g->file[RT_KF_CUBIN]) ||
        file_sum(s, 4, RT_KF_PTX, "cuda", &g->file[RT_KF_PTX]))
      return -1;
    if ((g->file[RT_KF_CUBIN].bytes < 0) != (g->file[RT_KF_PTX].bytes < 0))
      return perr(s, "cuda: the cubin and the PTX come together: both sizes and hashes, or all '-'");
    snprintf(g->cuda_arch, sizeof g->cuda_arch, "%s", s->f[1]);
    break;
  }
  s->hdr++;
  if (s->hdr == H_COUNT) s->sec = SEC_REGIONS;
  return 0;
}

/* ---- regions ------------------------------------------------------------------------------- */

static int region_line(P *s) {
  RtProg *g = s->p;
  if (!strcmp(s->f[0], "region")) {
    if (s->nf < 2) return perr(s, "expected 'region NAME BASE BYTES'");
    int r = -1;
    for (int i = 0; i < RT_NREG; i++)
      if (!strcmp(s->f[1], region_names[i])) r = i;
    if (r < 0)
      return perr(s, "unknown region '%.60s' (expected params, grads, adam_m, adam_v, slots, scratch or workspace)",
                  s->f[1]);
    if (s->reg_line[r]) return perr(s, "region %s is given twice (first on line %d)", region_names[r], s->reg_line[r]);
    s->reg_line[r] = s->line;
    if (r == RT_REG_SLOTS) {
      int64_t n;
      if (want_nf(s, 5, "region slots BASE BYTES COUNT") ||
          want_int(s, 2, "region slots: base", 0, PP_MAX_ARENA, &g->reg[r].base) ||
          want_int(s, 3, "region slots: bytes of one slot", 0, PP_MAX_ARENA, &g->reg[r].bytes) ||
          want_int(s, 4, "region slots: count", 1, MAX_SLOTS, &n))
        return -1;
      g->nslots = (int)n;
      if (g->reg[r].bytes % 64) return perr(s, "region slots: the bytes of one slot are not a multiple of 64");
    } else {
      char what[64];
      snprintf(what, sizeof what, "region %s: base", region_names[r]);
      if (want_nf(s, 4, "region NAME BASE BYTES") || want_int(s, 2, what, 0, PP_MAX_ARENA, &g->reg[r].base)) return -1;
      snprintf(what, sizeof what, "region %s: bytes", region_names[r]);
      if (want_int(s, 3, what, 0, PP_MAX_ARENA, &g->reg[r].bytes)) return -1;
    }
    if (g->reg[r].base % 64)
      return perr(s, "region %s: base %lld is not a multiple of 64", region_names[r], (long long)g->reg[r].base);
    return 0;
  }
  if (!strcmp(s->f[0], "arena")) {
    if (want_nf(s, 2, "arena BYTES") || want_int(s, 1, "arena", 1, PP_MAX_ARENA, &g->arena)) return -1;
    for (int r = 0; r < RT_NREG; r++)
      if (!s->reg_line[r] && r != RT_REG_WORKSPACE)
        return perr(s, "region %s is missing (every region is given before 'arena')", region_names[r]);
    int64_t end[RT_NREG];
    for (int r = 0; r < RT_NREG; r++) {
      int64_t total = g->reg[r].bytes;
      if (r == RT_REG_SLOTS) total *= g->nslots; /* <= 2^40 * 4096: no overflow */
      end[r] = g->reg[r].base + total;
      if (end[r] > g->arena)
        return perr(s, "region %s (line %d) ends at byte %lld, past the arena (%lld bytes)", region_names[r],
                    s->reg_line[r], (long long)end[r], (long long)g->arena);
    }
    for (int r = RT_REG_GRADS; r <= RT_REG_ADAM_V; r++)
      if (g->reg[r].bytes != g->reg[RT_REG_PARAMS].bytes)
        return perr(s, "region %s (line %d) has %lld bytes, region params %lld: they share one layout", region_names[r],
                    s->reg_line[r], (long long)g->reg[r].bytes, (long long)g->reg[RT_REG_PARAMS].bytes);
    for (int a = 0; a < RT_NREG; a++)
      for (int b = a + 1; b < RT_NREG; b++) {
        if (end[a] == g->reg[a].base || end[b] == g->reg[b].base) continue; /* empty */
        if (g->reg[a].base < end[b] && g->reg[b].base < end[a])
          return perr(s, "regions %s (line %d) and %s (line %d) overlap", region_names[a], s->reg_line[a],
                      region_names[b], s->reg_line[b]);
      }
    s->sec = SEC_BOUNDARIES;
    return 0;
  }
  return perr(s, "expected 'region ...' or 'arena BYTES' after the header, found '%.60s'", s->f[0]);
}

/* ---- params and buffers -------------------------------------------------------------------- */

#define PARAM_FORM                                                                                                     \
  "param INDEX NAME f32 [SHAPE] @OFF init INIT decay 0|1 [tied] [shared] [copy] [replica] [shard DIM START LEN DENSE]"

/* `shard DIM START LEN DENSE` at field i of a param line: the dense tensor is the local one with
 * dims[DIM] = DENSE; this rank holds rows [START, START + LEN) along DIM, those at or past DENSE
 * padding. LEN is the local dims[DIM]; the shard starts inside the dense tensor. */
static int shard_clause(P *s, RtParam *q, int i) {
  static const char *const form = "shard DIM START LEN DENSE";
  const char *name = s->f[2];
  if (q->sharded) return perr(s, "param %.200s: flag 'shard' given twice", name);
  if (i + 4 >= s->nf) return perr(s, "param %.200s: '%s' needs 4 integers", name, form);
  int64_t dim, start, len, dense;
  if (want_int(s, i + 1, "shard: DIM", 0, RT_MAX_NDIM - 1, &dim) ||
      want_int(s, i + 2, "shard: START", 0, PP_MAX_NUMEL, &start) ||
      want_int(s, i + 3, "shard: LEN", 1, PP_MAX_NUMEL, &len) ||
      want_int(s, i + 4, "shard: DENSE", 1, PP_MAX_NUMEL, &dense))
    return -1;
  if (dim >= q->ndim)
    return perr(s, "param %.200s: shard DIM %lld, but the param has %d dims", name, (long long)dim, q->ndim);
  if (len != q->dims[dim])
    return perr(s, "param %.200s: shard LEN %lld is not the param's dim %lld (%lld)", name, (long long)len,
                (long long)dim, (long long)q->dims[dim]);
  if (start >= dense)
    return perr(s, "param %.200s: shard START %lld is not inside the dense dim %lld of %lld rows", name,
                (long long)start, (long long)dim, (long long)dense);
  int64_t numel = q->numel / len;
  if (numel > PP_MAX_NUMEL / dense) return perr(s, "param %.200s: the dense tensor has more than 2^40 elements", name);
  q->sharded = 1;
  q->shard_dim = (int)dim;
  q->shard_start = start;
  q->shard_dense = dense;
  memcpy(q->dense_dims, q->dims, sizeof q->dims);
  q->dense_dims[dim] = dense;
  q->dense_numel = numel * dense;
  return 0;
}

static int param_line(P *s) {
  RtProg *g = s->p;
  if (grow(s, (void **)&g->params, &s->cap_params, g->nparams + 1, sizeof *g->params)) return -1;
  RtParam *q = &g->params[g->nparams];
  memset(q, 0, sizeof *q);
  q->line = s->line;
  int64_t idx;
  if (want_int(s, 1, "param: index", 0, INT32_MAX, &idx)) return -1;
  q->index = (int)idx;
  if (s->nf < 10) return perr(s, "expected '%s'", PARAM_FORM);
  if (pp_name_bad_at(s->f[2]) >= 0) return perr(s, "param: '%.60s' is not a checkpoint name", s->f[2]);
  for (int i = 0; i < g->nparams; i++)
    if (!strcmp(g->params[i].name, s->f[2]))
      return perr(s, "param: checkpoint name '%.200s' is already param %d (line %d)", s->f[2], i, g->params[i].line);
  if (strcmp(s->f[3], "f32") != 0)
    return perr(s, "param %.200s: dtype '%.60s': this ppr runs f32 parameters only", s->f[2], s->f[3]);
  if (parse_shape(s, s->f[4], &q->ndim, q->dims, &q->numel)) return -1;
  RtPtr p;
  if (parse_ptr(s, s->f[5], "param: offset", &p, NULL)) return -1;
  if (p.in_slot) return perr(s, "param %.200s: the offset is an arena offset @OFF, not '%.60s'", s->f[2], s->f[5]);
  q->off = p.off;
  const RtRegion *pr = &g->reg[RT_REG_PARAMS];
  if (q->off % 64) return perr(s, "param %.200s: offset %lld is not a multiple of 64", s->f[2], (long long)q->off);
  if (q->off < pr->base || q->numel * 4 > pr->bytes || q->off - pr->base > pr->bytes - q->numel * 4)
    return perr(s, "param %.200s: @%lld + %lld bytes is not inside the params region [%lld, %lld)", s->f[2],
                (long long)q->off, (long long)(q->numel * 4), (long long)pr->base, (long long)(pr->base + pr->bytes));
  int i = 6;
  if (want_word(s, i++, "init", PARAM_FORM)) return -1;
  if (!strcmp(s->f[i], "normal")) {
    q->init = RT_INIT_NORMAL;
    if (i + 1 >= s->nf || parse_double(s->f[i + 1], &q->std) || q->std < 0)
      return perr(s, "param %.200s: init normal needs its standard deviation, a finite number >= 0", s->f[2]);
    i += 2;
  } else if (!strcmp(s->f[i], "ones")) {
    q->init = RT_INIT_ONES;
    i++;
  } else if (!strcmp(s->f[i], "zeros")) {
    q->init = RT_INIT_ZEROS;
    i++;
  } else {
    return perr(s, "param %.200s: init '%.60s' (expected normal STD, ones or zeros)", s->f[2], s->f[i]);
  }
  int64_t d;
  if (want_word(s, i++, "decay", PARAM_FORM) || want_int(s, i++, "param: decay", 0, 1, &d)) return -1;
  q->decay = (int)d;
  for (; i < s->nf; i++) { /* flags, in any order, each at most once */
    if (!strcmp(s->f[i], "shard")) {
      if (shard_clause(s, q, i)) return -1;
      i += 4;
      continue;
    }
    int *flag = !strcmp(s->f[i], "tied")      ? &q->tied
                : !strcmp(s->f[i], "shared")  ? &q->shared
                : !strcmp(s->f[i], "copy")    ? &q->copy
                : !strcmp(s->f[i], "replica") ? &q->replica
                                              : NULL;
    if (!flag)
      return perr(s,
                  "param %.200s: unexpected '%.60s' at the end of the line (flags: tied, shared, copy, replica, "
                  "shard DIM START LEN DENSE)",
                  s->f[2], s->f[i]);
    if (*flag) return perr(s, "param %.200s: flag '%s' given twice", s->f[2], s->f[i]);
    *flag = 1;
  }
  if (!q->sharded) {
    memcpy(q->dense_dims, q->dims, sizeof q->dims);
    q->dense_numel = q->numel;
  }
  if (q->copy && !q->shared)
    return perr(s, "param %.200s: 'copy' without 'shared' (a copy is of a tensor another stage owns)", s->f[2]);
  if (q->shared && g->pp == 1)
    return perr(s, "param %.200s: shared, but the mesh has one pipeline stage (pp 1)", s->f[2]);
  if (q->shared) g->nshared++;
  q->owned = !q->copy && !q->replica;
  if (q->tied) {
    if (g->tied >= 0)
      return perr(s, "param %.200s: a second tied param (%.200s is tied)", s->f[2], g->params[g->tied].name);
    if (q->ndim != 2) return perr(s, "param %.200s: a tied param is a [vocab, hidden] matrix", s->f[2]);
    if (q->dense_dims[0] != g->vocab)
      return perr(s, "param %.200s: tied, so its first dim %lld must be the vocab %lld", s->f[2],
                  (long long)q->dense_dims[0], (long long)g->vocab);
    g->tied = g->nparams;
  }
  q->name = dupstr(s->f[2]);
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
static int finish_params(P *s) {
  RtProg *g = s->p;
  if (g->nparams == 0) return 0;
  int line = s->line;
  qsort(g->params, (size_t)g->nparams, sizeof *g->params, cmp_param_index);
  for (int i = 0; i < g->nparams; i++) {
    if (g->params[i].index == i) continue;
    s->line = g->params[i].line;
    if (i > 0 && g->params[i].index == g->params[i - 1].index)
      return perr(s, "param index %d is given twice (also on line %d)", g->params[i].index, g->params[i - 1].line);
    return perr(s, "param index %d, but there are %d params (indices 0..%d, each once)", g->params[i].index, g->nparams,
                g->nparams - 1);
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
      int rc = perr(s, "params %.200s (line %d) and %.200s (line %d) overlap", v[i - 1]->name, v[i - 1]->line,
                    v[i]->name, v[i]->line);
      free(v);
      return rc;
    }
  free(v);
  return 0;
}

static int buffer_line(P *s) {
  if (s->nf < 5) return perr(s, "expected 'buffer NAME f32|i32 [SHAPE] @OFF|$OFF [FLAG...]'");
  if (pp_name_bad_at(s->f[1]) >= 0) return perr(s, "buffer: '%.60s' is not a name", s->f[1]);
  if (strcmp(s->f[2], "f32") && strcmp(s->f[2], "i32"))
    return perr(s, "buffer %.100s: dtype '%.60s' (expected f32 or i32)", s->f[1], s->f[2]);
  int ndim;
  int64_t dims[RT_MAX_NDIM], numel;
  RtPtr p;
  char what[160];
  snprintf(what, sizeof what, "buffer %.100s", s->f[1]);
  if (parse_shape(s, s->f[3], &ndim, dims, &numel) || parse_ptr(s, s->f[4], what, &p, NULL) ||
      check_extent(s, what, &p, numel * 4))
    return -1;
  for (int i = 5; i < s->nf; i++)
    if (pp_name_bad_at(s->f[i]) >= 0) return perr(s, "buffer %.100s: flag '%.60s' is not a word", s->f[1], s->f[i]);
  RtProg *g = s->p;
  if (grow(s, (void **)&g->buffers, &s->cap_buffers, g->nbuffers + 1, sizeof *g->buffers)) return -1;
  RtBuffer *b = &g->buffers[g->nbuffers];
  b->name = dupstr(s->f[1]);
  S_ALLOC(b->name);
  b->is_int = !strcmp(s->f[2], "i32");
  b->ptr = p;
  b->bytes = numel * 4;
  g->nbuffers++;
  return 0;
}

/* ---- pipeline boundaries and the model's params --------------------------------------------- */

/* boundary KIND OPERAND BYTES [SHAPE] */
static int boundary_line(P *s) {
  RtProg *g = s->p;
  static const char *const form = "boundary recv_fwd|send_fwd|recv_bwd|send_bwd OPERAND BYTES [SHAPE]";
  if (s->nf != 4 && s->nf != 5) return perr(s, "expected '%s'", form);
  int k = -1;
  for (int i = 0; i < RT_NBND; i++)
    if (!strcmp(s->f[1], boundary_names[i])) k = i;
  if (k < 0)
    return perr(s, "boundary: unknown kind '%.60s' (expected recv_fwd, send_fwd, recv_bwd or send_bwd)", s->f[1]);
  RtBoundary *b = &g->bnd[k];
  if (b->present) return perr(s, "boundary %s is given twice (first on line %d)", boundary_names[k], b->line);
  char what[64];
  snprintf(what, sizeof what, "boundary %s", boundary_names[k]);
  if (parse_ptr(s, s->f[2], what, &b->ptr, NULL) ||
      want_int(s, 3, "boundary: bytes", 4, (int64_t)4 * INT32_MAX, &b->bytes))
    return -1;
  if (b->bytes % 4) return perr(s, "%s: %lld bytes is not a whole number of floats", what, (long long)b->bytes);
  if (k == RT_BND_RECV_FWD && !b->ptr.in_slot)
    return perr(s, "%s: '%.60s': the received hidden state lives in the micro-batch's slot ($OFF)", what, s->f[2]);
  if (check_extent(s, what, &b->ptr, b->bytes)) return -1;
  b->ndim = -1;
  if (s->nf == 5) {
    int64_t numel;
    if (parse_shape(s, s->f[4], &b->ndim, b->dims, &numel)) return -1;
    if (numel * 4 != b->bytes)
      return perr(s, "%s: shape %.60s is %lld bytes of f32, not %lld", what, s->f[4], (long long)(numel * 4),
                  (long long)b->bytes);
  }
  /* which neighbour the message goes to or comes from */
  int to_prev = k == RT_BND_RECV_FWD || k == RT_BND_SEND_BWD;
  if ((to_prev ? g->prev : g->next) < 0)
    return perr(s, "%s: stage %d has no %s stage (peers prev %d next %d)", what, g->stage,
                to_prev ? "previous" : "next", g->prev, g->next);
  b->present = 1;
  b->line = s->line;
  return 0;
}

/* After the boundary lines: a stage with a previous stage receives its input and sends back its
 * gradient; one with a next stage sends its output and receives that output's gradient. */
static int finish_boundaries(P *s) {
  RtProg *g = s->p;
  for (int k = 0; k < RT_NBND; k++) {
    int to_prev = k == RT_BND_RECV_FWD || k == RT_BND_SEND_BWD;
    int peer = to_prev ? g->prev : g->next;
    if (peer >= 0 && !g->bnd[k].present)
      return perr(s, "no 'boundary %s' line before this one: stage %d has a %s stage (rank %d)", boundary_names[k],
                  g->stage, to_prev ? "previous" : "next", peer);
  }
  return 0;
}

/* model_param NAME [SHAPE] */
static int model_line(P *s) {
  RtProg *g = s->p;
  if (want_nf(s, 3, "model_param NAME [SHAPE]")) return -1;
  if (pp_name_bad_at(s->f[1]) >= 0) return perr(s, "model_param: '%.60s' is not a checkpoint name", s->f[1]);
  for (int i = 0; i < g->nmodel; i++)
    if (!strcmp(g->mparams[i].name, s->f[1]))
      return perr(s, "model_param %.200s is given twice (first on line %d)", s->f[1], g->mparams[i].line);
  if (grow(s, (void **)&g->mparams, &s->cap_model, g->nmodel + 1, sizeof *g->mparams)) return -1;
  RtModelParam *m = &g->mparams[g->nmodel];
  memset(m, 0, sizeof *m);
  int64_t numel;
  if (parse_shape(s, s->f[2], &m->ndim, m->dims, &numel)) return -1;
  m->line = s->line;
  m->name = dupstr(s->f[1]);
  S_ALLOC(m->name);
  g->nmodel++;
  return 0;
}

/* After the model_param lines (if any): each of this rank's params is one of them, same shape. */
static int finish_model(P *s) {
  RtProg *g = s->p;
  if (g->nmodel == 0) return 0;
  int line = s->line;
  for (int i = 0; i < g->nparams; i++) {
    const RtParam *q = &g->params[i];
    const RtModelParam *m = NULL;
    for (int j = 0; j < g->nmodel && !m; j++)
      if (!strcmp(g->mparams[j].name, q->name)) m = &g->mparams[j];
    s->line = q->line;
    if (!m) return perr(s, "param %.200s is not one of the model's params (no model_param line names it)", q->name);
    int same = m->ndim == q->ndim;
    for (int d = 0; same && d < q->ndim; d++) same = m->dims[d] == q->dense_dims[d];
    if (!same)
      return perr(s, "param %.200s: its %sshape differs from its model_param line (line %d)", q->name,
                  q->sharded ? "dense " : "", m->line);
  }
  s->line = line;
  return 0;
}

/* ---- instructions -------------------------------------------------------------------------- */

/* <<<GRID,BLOCK,LOCAL>>> */
static int parse_geom(P *s, const char *t, const char *what, RtGeom *out) {
  char tmp[96];
  size_t n = strlen(t);
  if (n < 8 || n >= sizeof tmp || strncmp(t, "<<<", 3) || strcmp(t + n - 3, ">>>"))
    return perr(s, "%s: expected the launch geometry <<<GRID,BLOCK,LOCAL>>>, found '%.60s'", what, t);
  memcpy(tmp, t + 3, n - 6);
  tmp[n - 6] = 0;
  char *c1 = strchr(tmp, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
  if (!c1 || !c2) return perr(s, "%s: expected the launch geometry <<<GRID,BLOCK,LOCAL>>>, found '%.60s'", what, t);
  *c1 = *c2 = 0;
  int64_t b;
  if (parse_int(tmp, 1, RT_MAX_GRID, &out->grid))
    return perr(s, "%s: %.60s: GRID is not an integer in [1, 2^31-1]", what, t);
  if (parse_int(c1 + 1, 1, RT_MAX_BLOCK, &b) || (b & (b - 1)))
    return perr(s, "%s: %.60s: BLOCK is not a power of two in [1, %d]", what, t, RT_MAX_BLOCK);
  out->block = (int)b;
  if (parse_int(c2 + 1, 0, RT_MAX_LOCAL, &out->local))
    return perr(s, "%s: %.60s: LOCAL is not an integer in [0, %d]", what, t, RT_MAX_LOCAL);
  return 0;
}

/* The index of kernel NAME, launched with geometry g: every call of a kernel has the same. */
static int kernel_index(P *s, const char *name, const RtGeom *g0) {
  RtProg *g = s->p;
  for (int i = 0; i < g->nkernels; i++)
    if (!strcmp(g->kernels[i], name)) {
      const RtGeom *o = &g->kgeom[i];
      if (o->grid != g0->grid || o->block != g0->block || o->local != g0->local)
        return perr(s,
                    "kernel %.60s: launched <<<%lld,%d,%lld>>> here, <<<%lld,%d,%lld>>> before (a kernel's "
                    "geometry is fixed by the compiler)",
                    name, (long long)g0->grid, g0->block, (long long)g0->local, (long long)o->grid, o->block,
                    (long long)o->local);
      return i;
    }
  int cap = s->cap_kernels;
  if (grow(s, (void **)&g->kernels, &s->cap_kernels, g->nkernels + 1, sizeof *g->kernels)) return -1;
  if (s->cap_kernels != cap) {
    RtGeom *ng = realloc(g->kgeom, (size_t)s->cap_kernels * sizeof *ng);
    S_ALLOC(ng);
    g->kgeom = ng;
  }
  g->kernels[g->nkernels] = dupstr(name);
  S_ALLOC(g->kernels[g->nkernels]);
  g->kgeom[g->nkernels] = *g0;
  return g->nkernels++;
}

static int only_in(P *s, const char *ins, int allow_fwd_bwd, int allow_opt) {
  int b = s->cur_blk;
  if ((b == RT_BLK_OPTIMIZER && !allow_opt) || (b != RT_BLK_OPTIMIZER && !allow_fwd_bwd))
    return perr(s, "'%s' is not allowed in the %s block (only in %s)", ins, block_names[b],
                allow_opt ? "the optimizer block" : "the forward and backward blocks");
  return 0;
}

/* Elements spanned by BATCH row-major matrices of rows x cols with leading dim ld, stride apart. */
static int gemm_operand(P *s, const char *which, const RtPtr *p, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                        int64_t batch) {
  if (ld < cols)
    return perr(s, "gemm: leading dimension of %s is %lld, less than its %lld columns", which, (long long)ld,
                (long long)cols);
  int64_t a, b, e;
  if (__builtin_mul_overflow(rows - 1, ld, &a) || __builtin_mul_overflow(batch - 1, stride, &b) ||
      __builtin_add_overflow(a, b, &e) || __builtin_add_overflow(e, cols, &e) || __builtin_mul_overflow(e, 4, &e))
    return perr(s, "gemm: %s spans more than 2^63 bytes", which);
  char what[32];
  snprintf(what, sizeof what, "gemm: %s", which);
  return check_extent(s, what, p, e);
}

static int parse_gemm(P *s, RtInstr *in) {
  static const char *const form = "gemm TA TB M N K ALPHA A LDA SA B LDB SB BETA C LDC SC BATCH";
  if (want_nf(s, 18, form)) return -1;
  for (int i = 1; i <= 2; i++)
    if (strcmp(s->f[i], "N") && strcmp(s->f[i], "T"))
      return perr(s, "gemm: %s is '%.60s' (expected N or T)", i == 1 ? "TA" : "TB", s->f[i]);
  in->ta = s->f[1][0] == 'T';
  in->tb = s->f[2][0] == 'T';
  if (want_i32(s, 3, "gemm: M", 1, INT_MAX, &in->m) || want_i32(s, 4, "gemm: N", 1, INT_MAX, &in->n) ||
      want_i32(s, 5, "gemm: K", 1, INT_MAX, &in->k))
    return -1;
  if (parse_float(s->f[6], &in->alpha)) return perr(s, "gemm: ALPHA '%.60s' is not a finite number", s->f[6]);
  if (parse_ptr(s, s->f[7], "gemm: A", &in->p[0], NULL) || want_i32(s, 8, "gemm: LDA", 1, INT_MAX, &in->lda) ||
      want_int(s, 9, "gemm: SA", 0, PP_MAX_ARENA, &in->sa) || parse_ptr(s, s->f[10], "gemm: B", &in->p[1], NULL) ||
      want_i32(s, 11, "gemm: LDB", 1, INT_MAX, &in->ldb) || want_int(s, 12, "gemm: SB", 0, PP_MAX_ARENA, &in->sb))
    return -1;
  if (parse_float(s->f[13], &in->beta)) return perr(s, "gemm: BETA '%.60s' is not a finite number", s->f[13]);
  if (parse_ptr(s, s->f[14], "gemm: C", &in->p[2], NULL) || want_i32(s, 15, "gemm: LDC", 1, INT_MAX, &in->ldc) ||
      want_int(s, 16, "gemm: SC", 0, PP_MAX_ARENA, &in->sc) || want_i32(s, 17, "gemm: BATCH", 1, MAX_BATCH, &in->batch))
    return -1;
  int64_t ar = in->ta ? in->k : in->m, ac = in->ta ? in->m : in->k;
  int64_t br = in->tb ? in->n : in->k, bc = in->tb ? in->k : in->n;
  if (gemm_operand(s, "A", &in->p[0], ar, ac, in->lda, in->sa, in->batch) ||
      gemm_operand(s, "B", &in->p[1], br, bc, in->ldb, in->sb, in->batch) ||
      gemm_operand(s, "C", &in->p[2], in->m, in->n, in->ldc, in->sc, in->batch))
    return -1;
  return 0;
}

static int parse_kernel(P *s, RtInstr *in) {
  if (s->nf < 3) return perr(s, "expected 'kernel NAME <<<GRID,BLOCK,LOCAL>>> ARG...'");
  if (!is_ident(s->f[1])) return perr(s, "kernel: '%.60s' is not a C identifier", s->f[1]);
  char what0[96];
  snprintf(what0, sizeof what0, "kernel %.60s", s->f[1]);
  if (parse_geom(s, s->f[2], what0, &in->geom)) return -1;
  if (s->nf - 3 > RT_MAX_KARGS)
    return perr(s, "kernel %.60s: %d arguments, at most %d", s->f[1], s->nf - 3, RT_MAX_KARGS);
  in->kernel = kernel_index(s, s->f[1], &in->geom);
  if (in->kernel < 0) return -1;
  in->nargs = s->nf - 3;
  if (in->nargs) {
    in->args = calloc((size_t)in->nargs, sizeof *in->args);
    S_ALLOC(in->args);
  }
  for (int a = 0; a < in->nargs; a++) {
    const char *t = s->f[a + 3];
    RtArg *x = &in->args[a];
    char what[128];
    snprintf(what, sizeof what, "kernel %.60s: argument %d", s->f[1], a + 1);
    if (t[0] == '@' || t[0] == '$') {
      x->kind = RT_A_PTR;
      /* without an extent, at least the first element must be inside */
      if (parse_ptr(s, t, what, &x->ptr, &x->bytes) || check_extent(s, what, &x->ptr, x->bytes ? x->bytes : 4))
        return -1;
    } else if (!strncmp(t, "f:", 2)) {
      x->kind = RT_A_F32;
      if (parse_float(t + 2, &x->f)) return perr(s, "%s: '%.60s' is not a finite float", what, t);
    } else if (!strncmp(t, "i:", 2)) {
      x->kind = RT_A_I64;
      if (parse_int(t + 2, INT64_MIN, INT64_MAX, &x->i)) return perr(s, "%s: '%.60s' is not a 64-bit integer", what, t);
    } else if (!strncmp(t, "s:", 2)) {
      x->kind = RT_A_SCALAR;
      x->scalar = -1;
      for (int k = 0; k < RT_NSCALAR; k++)
        if (!strcmp(t + 2, scalar_names[k])) x->scalar = k;
      if (x->scalar < 0)
        return perr(s, "%s: unknown runtime scalar '%.60s' (lr, beta1, beta2, eps, wd, bc1, bc2, clip)", what, t);
      if (x->scalar == RT_S_CLIP && (s->cur_blk != RT_BLK_OPTIMIZER || !s->grad_norm_line))
        return perr(s, "%s: s:clip is set by grad_norm: use it in the optimizer block after grad_norm", what);
    } else {
      return perr(s, "%s: '%.60s' (expected @OFF[:BYTES], $OFF[:BYTES], f:FLOAT, i:INT or s:NAME)", what, t);
    }
  }
  return 0;
}

/* grad_norm KERNEL <<<GRID,BLOCK,LOCAL>>> @PARTIALS:BYTES: KERNEL(grad, partials, n) writes GRID
 * partial sums of squares; param i's go to partials + 4*GRID*i. */
static int parse_grad_norm(P *s, RtInstr *in) {
  static const char *const form = "grad_norm KERNEL <<<GRID,BLOCK,LOCAL>>> @PARTIALS:BYTES";
  if (want_nf(s, 4, form)) return -1;
  if (!is_ident(s->f[1])) return perr(s, "grad_norm: '%.60s' is not a C identifier", s->f[1]);
  if (parse_geom(s, s->f[2], "grad_norm", &in->geom)) return -1;
  in->kernel = kernel_index(s, s->f[1], &in->geom);
  if (in->kernel < 0 || parse_ptr(s, s->f[3], "grad_norm: partials", &in->p[0], &in->bytes)) return -1;
  int64_t need = 4 * in->geom.grid * (int64_t)(s->p->nparams ? s->p->nparams : 1);
  if (in->bytes < need)
    return perr(s, "grad_norm: the partials hold %lld bytes; %d params of %lld partial sums need %lld",
                (long long)in->bytes, s->p->nparams, (long long)in->geom.grid, (long long)need);
  return check_extent(s, "grad_norm: partials", &in->p[0], in->bytes);
}

/* At the optimizer block's end: every shared param's gradient is inside one allreduce_tied. */
static int check_shared_sums(P *s) {
  const RtProg *g = s->p;
  const RtBlock *o = &g->blk[RT_BLK_OPTIMIZER];
  int64_t shift = g->reg[RT_REG_GRADS].base - g->reg[RT_REG_PARAMS].base;
  for (int i = 0; i < g->nparams; i++) {
    const RtParam *q = &g->params[i];
    if (!q->shared) continue;
    int64_t a = q->off + shift, e = a + 4 * q->numel;
    int covered = 0;
    for (int n = 0; n < o->n && !covered; n++)
      covered =
          o->ins[n].kind == RT_I_ALLREDUCE_TIED && o->ins[n].p[0].off <= a && o->ins[n].p[0].off + o->ins[n].bytes >= e;
    if (!covered)
      return perr(s,
                  "param %.200s (line %d) is shared, but no allreduce_tied of the optimizer block sums its "
                  "gradient (@%lld, %lld bytes)",
                  q->name, q->line, (long long)a, (long long)(e - a));
  }
  return 0;
}

/* allreduce tp|tp/R|dp sum|max OPERAND BYTES */
static int parse_allreduce(P *s, RtInstr *in) {
  const RtProg *g = s->p;
  static const char *const form = "allreduce tp|tp/R|dp sum|max OPERAND BYTES";
  if (want_nf(s, 5, form)) return -1;
  const char *gr = s->f[1];
  if (!strcmp(gr, "tp")) {
    in->group = RT_G_TP;
  } else if (!strcmp(gr, "dp")) {
    in->group = RT_G_DP;
  } else if (!strncmp(gr, "tp/", 3)) {
    int64_t r;
    if (parse_int(gr + 3, 1, PP_MAX_RANKS, &r))
      return perr(s, "allreduce: group '%.60s': R in tp/R is not an integer in [1, %d]", gr, PP_MAX_RANKS);
    if (g->tp % r)
      return perr(s, "allreduce: group tp/%lld: %lld does not divide tp %d", (long long)r, (long long)r, g->tp);
    in->group = RT_G_TP_SUB;
    in->sub = (int)r;
  } else {
    return perr(s, "allreduce: unknown group '%.60s' (expected tp, tp/R or dp)", gr);
  }
  if (!strcmp(s->f[2], "sum")) in->op = RT_OP_SUM;
  else if (!strcmp(s->f[2], "max")) in->op = RT_OP_MAX;
  else return perr(s, "allreduce: unknown op '%.60s' (expected sum or max)", s->f[2]);
  if (parse_ptr(s, s->f[3], "allreduce", &in->p[0], NULL) ||
      want_int(s, 4, "allreduce: bytes", 4, (int64_t)4 * INT32_MAX, &in->bytes))
    return -1;
  if (in->bytes % 4) return perr(s, "allreduce: %lld bytes is not a whole number of floats", (long long)in->bytes);
  if (check_extent(s, "allreduce", &in->p[0], in->bytes)) return -1;
  const RtRegion *grr = &g->reg[RT_REG_GRADS];
  if (s->cur_blk == RT_BLK_OPTIMIZER && s->grad_norm_line && !in->p[0].in_slot &&
      in->p[0].off < grr->base + grr->bytes && grr->base < in->p[0].off + in->bytes)
    return perr(s, "allreduce of gradients after grad_norm (line %d): the norm needs the summed gradients",
                s->grad_norm_line);
  return 0;
}

/* At the optimizer block's end, with dp > 1: every param's gradient is inside one `allreduce dp
 * sum` (before grad_norm), or the replicas would drift apart. */
static int check_dp_sums(P *s) {
  const RtProg *g = s->p;
  if (g->dp == 1) return 0;
  const RtBlock *o = &g->blk[RT_BLK_OPTIMIZER];
  int64_t shift = g->reg[RT_REG_GRADS].base - g->reg[RT_REG_PARAMS].base;
  for (int i = 0; i < g->nparams; i++) {
    const RtParam *q = &g->params[i];
    int64_t a = q->off + shift, e = a + 4 * q->numel;
    int covered = 0;
    for (int n = 0; n < o->n && !covered; n++) {
      const RtInstr *x = &o->ins[n];
      covered = x->kind == RT_I_ALLREDUCE && x->group == RT_G_DP && x->op == RT_OP_SUM && x->p[0].off <= a &&
                x->p[0].off + x->bytes >= e;
    }
    if (!covered)
      return perr(s,
                  "param %.200s (line %d): dp %d, but no 'allreduce dp sum' of the optimizer block sums its "
                  "gradient (@%lld, %lld bytes) over the replicas",
                  q->name, q->line, g->dp, (long long)a, (long long)(e - a));
  }
  return 0;
}

static int instr_line(P *s) {
  RtProg *g = s->p;
  RtBlock *bk = &g->blk[s->cur_blk];
  if (grow(s, (void **)&bk->ins, &s->cap_ins, bk->n + 1, sizeof *bk->ins)) return -1;
  RtInstr *in = &bk->ins[bk->n];
  memset(in, 0, sizeof *in);
  in->line = s->line;
  const char *op = s->f[0];
  int rc;
  if (!strcmp(op, "batch")) {
    in->kind = RT_I_BATCH;
    rc = only_in(s, op, 1, 0) || want_nf(s, 3, "batch TOKENS LABELS");
    int64_t bytes = (int64_t)g->micro_batch * g->seq * 4;
    for (int i = 0; i < 2 && !rc; i++) {
      const char *what = i ? "batch: labels" : "batch: tokens";
      if (!strcmp(s->f[i + 1], "-")) continue;
      rc = parse_ptr(s, s->f[i + 1], what, &in->p[i], NULL) || check_extent(s, what, &in->p[i], bytes);
    }
  } else if (!strcmp(op, "zero")) {
    in->kind = RT_I_ZERO;
    rc = want_nf(s, 3, "zero DST BYTES") || parse_ptr(s, s->f[1], "zero", &in->p[0], NULL) ||
         want_int(s, 2, "zero: bytes", 1, PP_MAX_ARENA, &in->bytes) || check_extent(s, "zero", &in->p[0], in->bytes);
  } else if (!strcmp(op, "kernel")) {
    in->kind = RT_I_KERNEL;
    rc = parse_kernel(s, in);
  } else if (!strcmp(op, "gemm")) {
    in->kind = RT_I_GEMM;
    rc = parse_gemm(s, in);
  } else if (!strcmp(op, "seed")) {
    in->kind = RT_I_SEED;
    rc = only_in(s, op, 1, 0) || want_nf(s, 3, "seed DST VALUE") || parse_ptr(s, s->f[1], "seed", &in->p[0], NULL) ||
         check_extent(s, "seed", &in->p[0], 4);
    if (!rc && parse_float(s->f[2], &in->value)) rc = perr(s, "seed: VALUE '%.60s' is not a finite number", s->f[2]);
  } else if (!strcmp(op, "loss")) {
    in->kind = RT_I_LOSS;
    rc = only_in(s, op, 1, 0) || want_nf(s, 2, "loss SRC") || parse_ptr(s, s->f[1], "loss", &in->p[0], NULL) ||
         check_extent(s, "loss", &in->p[0], 4);
  } else if (!strcmp(op, "grad_norm")) {
    in->kind = RT_I_GRAD_NORM;
    rc = only_in(s, op, 0, 1) || parse_grad_norm(s, in);
    if (!rc && s->grad_norm_line) rc = perr(s, "a second grad_norm (the first is on line %d)", s->grad_norm_line);
    if (!rc) s->grad_norm_line = s->line;
  } else if (!strcmp(op, "allreduce_tied")) {
    in->kind = RT_I_ALLREDUCE_TIED;
    rc = only_in(s, op, 0, 1) || want_nf(s, 3, "allreduce_tied @OFF BYTES") ||
         parse_ptr(s, s->f[1], "allreduce_tied", &in->p[0], NULL) ||
         want_int(s, 2, "allreduce_tied: bytes", 4, (int64_t)4 * INT32_MAX, &in->bytes) ||
         check_extent(s, "allreduce_tied", &in->p[0], in->bytes);
    const RtRegion *gr = &g->reg[RT_REG_GRADS];
    if (!rc && in->bytes % 4)
      rc = perr(s, "allreduce_tied: %lld bytes is not a whole number of floats", (long long)in->bytes);
    if (!rc && (in->p[0].off < gr->base || in->p[0].off + in->bytes > gr->base + gr->bytes))
      rc = perr(s, "allreduce_tied: @%lld + %lld bytes is not inside the grads region [%lld, %lld)",
                (long long)in->p[0].off, (long long)in->bytes, (long long)gr->base, (long long)(gr->base + gr->bytes));
    if (!rc && s->grad_norm_line)
      rc = perr(s, "allreduce_tied after grad_norm (line %d): the norm needs the summed gradients", s->grad_norm_line);
    if (!rc && !g->nshared) rc = perr(s, "allreduce_tied, but no param is marked shared");
  } else if (!strcmp(op, "allreduce")) {
    in->kind = RT_I_ALLREDUCE;
    rc = parse_allreduce(s, in);
  } else if (!strcmp(op, "block") || !strcmp(op, "schedule")) {
    return perr(s, "'%s' inside block %s (line %d): a block ends with 'end'", op, block_names[s->cur_blk], bk->line);
  } else {
    return perr(s,
                "unknown instruction '%.60s' (expected batch, zero, kernel, gemm, seed, loss, allreduce, "
                "allreduce_tied or grad_norm)",
                op);
  }
  if (rc) {
    free(in->args);
    in->args = NULL;
    return -1;
  }
  bk->n++;
  return 0;
}

/* ---- schedule ------------------------------------------------------------------------------ */

/* The arena bytes [*a, *e) of a comm op's buffer. */
static void op_range(const RtProg *g, const RtCommOp *o, int64_t *a, int64_t *e) {
  const RtBoundary *b = &g->bnd[o->kind];
  int64_t off = b->ptr.off;
  if (b->ptr.in_slot) off += g->reg[RT_REG_SLOTS].base + (int64_t)o->slot * g->reg[RT_REG_SLOTS].bytes;
  *a = off;
  *e = off + b->bytes;
}

/* One op of a comm entry, against the schedule so far (docs/stage-format.md, "The schedule"). */
static int comm_op(P *s, const RtCommOp *o) {
  RtProg *g = s->p;
  int k = o->kind, m = o->mb, sl = o->slot;
  const RtBoundary *b = &g->bnd[k];
  const char *kn = boundary_names[k];
  if (!b->present) return perr(s, "comm %s: this stage has no 'boundary %s' line", kn, kn);
  if (s->ops_done[m] & (1u << k)) return perr(s, "a second %s for micro-batch %d", kn, m);
  int fs = s->fwd_done[m] ? s->fslot[m] : -1;
  if ((k != RT_BND_RECV_FWD) && !s->fwd_done[m]) return perr(s, "%s %d %d before F %d", kn, m, sl, m);
  if (k != RT_BND_RECV_FWD && fs != sl)
    return perr(s, "%s %d %d: micro-batch %d's forward ran in slot %d", kn, m, sl, m, fs);
  switch (k) {
  case RT_BND_RECV_FWD:
    if (s->fwd_done[m]) return perr(s, "recv_fwd %d %d after F %d (the forward reads what it receives)", m, sl, m);
    if (s->slot_holds[sl] >= 0)
      return perr(s, "recv_fwd %d %d: slot %d still holds micro-batch %d (its B has not run)", m, sl, sl,
                  s->slot_holds[sl]);
    if (s->slot_recv[sl] >= 0)
      return perr(s, "recv_fwd %d %d: slot %d already holds the input received for micro-batch %d", m, sl, sl,
                  s->slot_recv[sl]);
    s->slot_recv[sl] = m;
    s->slot_done[sl] = -1;
    break;
  case RT_BND_SEND_FWD:
    if (b->ptr.in_slot) {
      if (s->bwd_done[m]) return perr(s, "send_fwd %d %d after B %d", m, sl, m);
    } else if (s->last_fb_kind != RT_E_F || s->last_fb_mb != m) {
      return perr(s,
                  "send_fwd %d %d: its buffer is in the arena (@%lld), so it must follow F %d with no F or B "
                  "between (blocks reuse the arena's scratch)",
                  m, sl, (long long)b->ptr.off, m);
    }
    break;
  case RT_BND_RECV_BWD:
    if (s->bwd_done[m]) return perr(s, "recv_bwd %d %d after B %d (the backward reads what it receives)", m, sl, m);
    if (!b->ptr.in_slot) {
      if (s->need_b >= 0)
        return perr(s,
                    "recv_bwd %d %d: the gradient received for micro-batch %d (line %d) is still waiting for "
                    "its B in the same buffer",
                    m, sl, s->need_b, s->need_b_line);
      s->need_b = m;
      s->need_b_line = s->line;
    }
    break;
  case RT_BND_SEND_BWD:
    if (!s->bwd_done[m]) return perr(s, "send_bwd %d %d before B %d", m, sl, m);
    if (b->ptr.in_slot) {
      if (s->slot_done[sl] != m) return perr(s, "send_bwd %d %d: slot %d was reused after B %d", m, sl, sl, m);
    } else if (s->last_fb_kind != RT_E_B || s->last_fb_mb != m) {
      return perr(s,
                  "send_bwd %d %d: its buffer is in the arena (@%lld), so it must follow B %d with no F or B "
                  "between (blocks reuse the arena's scratch)",
                  m, sl, (long long)b->ptr.off, m);
    }
    break;
  }
  s->ops_done[m] |= (unsigned char)(1u << k);
  return 0;
}

static int comm_entry(P *s, RtEntry *e) {
  RtProg *g = s->p;
  static const char *const form = "comm OP MICROBATCH SLOT [OP MICROBATCH SLOT]";
  if (s->nf != 4 && s->nf != 7) return perr(s, "expected '%s' (OP: send_fwd, recv_fwd, send_bwd, recv_bwd)", form);
  e->kind = RT_E_COMM;
  e->nops = (s->nf - 1) / 3;
  for (int i = 0; i < e->nops; i++) {
    RtCommOp *o = &e->op[i];
    const char *t = s->f[1 + 3 * i];
    int k = -1;
    for (int j = 0; j < RT_NBND; j++)
      if (!strcmp(t, boundary_names[j])) k = j;
    if (k < 0) return perr(s, "comm: unknown op '%.60s' (expected send_fwd, recv_fwd, send_bwd or recv_bwd)", t);
    o->kind = (RtBoundaryKind)k;
    if (want_i32(s, 2 + 3 * i, "comm: micro-batch", 0, g->local_microbatches - 1, &o->mb) ||
        want_i32(s, 3 + 3 * i, "comm: slot", 0, g->nslots - 1, &o->slot) || comm_op(s, o))
      return -1;
  }
  if (e->nops == 2) { /* posted together: the two buffers must not overlap */
    int64_t a0, e0, a1, e1;
    op_range(g, &e->op[0], &a0, &e0);
    op_range(g, &e->op[1], &a1, &e1);
    if (a0 < e1 && a1 < e0)
      return perr(s, "comm: the buffers of %s %d and %s %d overlap (they are in flight together)",
                  boundary_names[e->op[0].kind], e->op[0].mb, boundary_names[e->op[1].kind], e->op[1].mb);
  }
  return 0;
}

static int schedule_entry(P *s) {
  RtProg *g = s->p;
  if (grow(s, (void **)&g->sched, &s->cap_entries, g->nentries + 1, sizeof *g->sched)) return -1;
  RtEntry *e = &g->sched[g->nentries];
  memset(e, 0, sizeof *e);
  e->line = s->line;
  const char *op = s->f[0];
  if (s->nopt) return perr(s, "'%.60s' after OPT (OPT is the schedule's last entry)", op);
  if (!strcmp(op, "zero_grads")) {
    if (want_nf(s, 1, "zero_grads")) return -1;
    if (s->nzero) return perr(s, "a second zero_grads");
    if (s->nbwd) return perr(s, "zero_grads after a B entry would discard its gradients");
    e->kind = RT_E_ZERO_GRADS;
    s->nzero++;
  } else if (!strcmp(op, "F") || !strcmp(op, "B")) {
    int fwd = op[0] == 'F';
    const char *form = fwd ? "F MICROBATCH SLOT" : "B MICROBATCH SLOT";
    if (want_nf(s, 3, form) || want_i32(s, 1, "micro-batch", 0, g->local_microbatches - 1, &e->mb) ||
        want_i32(s, 2, "slot", 0, g->nslots - 1, &e->slot))
      return -1;
    int m = e->mb, sl = e->slot;
    if (s->need_b >= 0 && (fwd || s->need_b != m))
      return perr(s,
                  "%s %d %d: the gradient received for micro-batch %d (line %d) is in the arena, where this "
                  "block may write: B %d must come first",
                  op, m, sl, s->need_b, s->need_b_line, s->need_b);
    if (fwd) {
      e->kind = RT_E_F;
      if (s->fwd_done[m]) return perr(s, "a second F for micro-batch %d", m);
      if (s->slot_holds[sl] >= 0)
        return perr(s, "F %d %d: slot %d still holds micro-batch %d (its B has not run)", m, sl, sl, s->slot_holds[sl]);
      if (g->bnd[RT_BND_RECV_FWD].present && s->slot_recv[sl] != m) {
        if (s->ops_done[m] & (1u << RT_BND_RECV_FWD))
          return perr(s, "F %d %d: the input of micro-batch %d was received into another slot", m, sl, m);
        return perr(s, "F %d %d before recv_fwd %d %d (the stage's input comes from the previous stage)", m, sl, m, sl);
      }
      if (s->slot_recv[sl] >= 0 && s->slot_recv[sl] != m)
        return perr(s, "F %d %d: slot %d holds the input received for micro-batch %d", m, sl, sl, s->slot_recv[sl]);
      s->fwd_done[m] = 1;
      s->fslot[m] = sl;
      s->slot_holds[sl] = m;
      s->slot_recv[sl] = -1;
      s->slot_done[sl] = -1;
    } else {
      e->kind = RT_E_B;
      if (!s->fwd_done[m]) return perr(s, "B %d %d before F %d", m, sl, m);
      if (s->bwd_done[m]) return perr(s, "a second B for micro-batch %d", m);
      if (s->slot_holds[sl] != m)
        return perr(s, "B %d %d: micro-batch %d's forward did not run in slot %d", m, sl, m, sl);
      if (!s->nzero) return perr(s, "B %d %d before zero_grads", m, sl);
      if (g->bnd[RT_BND_RECV_BWD].present && !(s->ops_done[m] & (1u << RT_BND_RECV_BWD)))
        return perr(s,
                    "B %d %d before recv_bwd %d %d (the gradient of the stage's output comes from the next "
                    "stage)",
                    m, sl, m, sl);
      s->bwd_done[m] = 1;
      s->slot_holds[sl] = -1;
      s->slot_done[sl] = m;
      s->need_b = -1;
      s->nbwd++;
    }
    s->last_fb_kind = e->kind;
    s->last_fb_mb = m;
  } else if (!strcmp(op, "comm")) {
    if (comm_entry(s, e)) return -1;
  } else if (!strcmp(op, "OPT")) {
    if (want_nf(s, 1, "OPT")) return -1;
    if (s->nbwd != g->local_microbatches)
      return perr(s, "OPT before every micro-batch's B ran (%d of %d)", s->nbwd, g->local_microbatches);
    for (int m = 0; m < g->local_microbatches; m++)
      for (int k = 0; k < RT_NBND; k++)
        if (g->bnd[k].present && !(s->ops_done[m] & (1u << k)))
          return perr(s, "OPT before %s of micro-batch %d (every micro-batch's messages come first)", boundary_names[k],
                      m);
    e->kind = RT_E_OPT;
    s->nopt++;
  } else {
    return perr(s,
                "unknown schedule entry '%.60s' (expected zero_grads, F M SLOT, B M SLOT, comm OP M SLOT "
                "[OP M SLOT] or OPT)",
                op);
  }
  g->nentries++;
  return 0;
}

static int start_schedule(P *s) {
  RtProg *g = s->p;
  for (int b = 0; b < RT_NBLK; b++)
    if (!g->blk[b].present)
      return perr(s, "no %s block before the schedule (a training program has all three)", block_names[b]);
  size_t ns = (size_t)g->nslots, nm = (size_t)g->local_microbatches;
  s->slot_holds = malloc(ns * sizeof *s->slot_holds);
  s->slot_recv = malloc(ns * sizeof *s->slot_recv);
  s->slot_done = malloc(ns * sizeof *s->slot_done);
  s->fwd_done = calloc(nm, 1);
  s->bwd_done = calloc(nm, 1);
  s->ops_done = calloc(nm, 1);
  s->fslot = calloc(nm, sizeof *s->fslot);
  S_ALLOC(s->slot_holds);
  S_ALLOC(s->slot_recv);
  S_ALLOC(s->slot_done);
  S_ALLOC(s->fwd_done);
  S_ALLOC(s->bwd_done);
  S_ALLOC(s->ops_done);
  S_ALLOC(s->fslot);
  for (int i = 0; i < g->nslots; i++) s->slot_holds[i] = s->slot_recv[i] = s->slot_done[i] = -1;
  s->last_fb_kind = -1;
  s->last_fb_mb = -1;
  s->need_b = -1;
  s->schedule_line = s->line;
  s->sec = SEC_SCHEDULE;
  return 0;
}

static int end_schedule(P *s) {
  if (!s->nopt) return perr(s, "the schedule has no OPT entry");
  s->sec = SEC_DONE;
  return 0;
}

/* ---- the line loop ------------------------------------------------------------------------- */

static int line(P *s, size_t after) {
  RtProg *g = s->p;
  const char *k = s->f[0];
  switch (s->sec) {
  case SEC_HEADER: return header_line(s, after);
  case SEC_REGIONS: return region_line(s);
  case SEC_BOUNDARIES:
    if (!strcmp(k, "boundary")) return boundary_line(s);
    if (finish_boundaries(s)) return -1;
    s->sec = SEC_PARAMS;
    /* fall through */
  case SEC_PARAMS:
    if (!strcmp(k, "param")) return param_line(s);
    if (!strcmp(k, "boundary")) return perr(s, "boundary after a param line (boundaries come first)");
    if (finish_params(s)) return -1;
    s->sec = SEC_MODEL;
    /* fall through */
  case SEC_MODEL:
    if (!strcmp(k, "model_param")) return model_line(s);
    if (!strcmp(k, "param")) return perr(s, "param after a model_param line (params come first)");
    if (finish_model(s)) return -1;
    s->sec = SEC_BUFFERS;
    /* fall through */
  case SEC_BUFFERS:
    if (!strcmp(k, "buffer")) return buffer_line(s);
    if (!strcmp(k, "param") || !strcmp(k, "model_param"))
      return perr(s, "%s after a buffer line (params come first)", k);
    s->sec = SEC_BLOCKS;
    /* fall through */
  case SEC_BLOCKS:
    if (!strcmp(k, "block")) {
      if (want_nf(s, 2, "block forward|backward|optimizer")) return -1;
      int b = -1;
      for (int i = 0; i < RT_NBLK; i++)
        if (!strcmp(s->f[1], block_names[i])) b = i;
      if (b < 0) return perr(s, "unknown block '%.60s' (expected forward, backward or optimizer)", s->f[1]);
      if (g->blk[b].present)
        return perr(s, "a second %s block (the first is on line %d)", block_names[b], g->blk[b].line);
      g->blk[b].present = 1;
      g->blk[b].line = s->line;
      s->cur_blk = b;
      s->cap_ins = 0;
      s->sec = SEC_BLOCK;
      return 0;
    }
    if (!strcmp(k, "schedule")) {
      if (s->nf > 2 || (s->nf == 2 && pp_name_bad_at(s->f[1]) >= 0))
        return perr(s, "expected 'schedule' or 'schedule NAME'");
      return start_schedule(s);
    }
    return perr(s, "expected 'block NAME' or 'schedule', found '%.60s'", k);
  case SEC_BLOCK:
    if (!strcmp(k, "end")) {
      if (want_nf(s, 1, "end")) return -1;
      if (s->cur_blk == RT_BLK_OPTIMIZER && !s->grad_norm_line) return perr(s, "the optimizer block has no grad_norm");
      if (s->cur_blk == RT_BLK_OPTIMIZER && (check_shared_sums(s) || check_dp_sums(s))) return -1;
      s->sec = SEC_BLOCKS;
      return 0;
    }
    return instr_line(s);
  case SEC_SCHEDULE:
    if (!strcmp(k, "end")) {
      if (want_nf(s, 1, "end")) return -1;
      return end_schedule(s);
    }
    return schedule_entry(s);
  default: return perr(s, "'%.60s' after the schedule's end (the schedule is the last section)", k);
  }
}

static int at_eof(P *s) {
  RtProg *g = s->p;
  if (s->stopped) return 0;
  switch (s->sec) {
  case SEC_HEADER:
    if (s->hdr == H_VERSION) {
      rt_util_set_err(s->err, s->errlen, "%s: empty: not a ppr program listing", s->path);
      return -1;
    }
    rt_util_set_err(s->err, s->errlen, "%s: ends inside the header: expected '%s'", s->path, header_forms[s->hdr]);
    return -1;
  case SEC_REGIONS: rt_util_set_err(s->err, s->errlen, "%s: ends before 'arena BYTES'", s->path); return -1;
  case SEC_BLOCK:
    rt_util_set_err(s->err, s->errlen, "%s: ends inside block %s (line %d): no 'end'", s->path, block_names[s->cur_blk],
                    g->blk[s->cur_blk].line);
    return -1;
  case SEC_SCHEDULE:
    rt_util_set_err(s->err, s->errlen, "%s: ends inside the schedule (line %d): no 'end'", s->path, s->schedule_line);
    return -1;
  case SEC_DONE: return 0;
  default: rt_util_set_err(s->err, s->errlen, "%s: ends without a schedule", s->path); return -1;
  }
}

static int parse_all(P *s) {
  const char *t = s->text;
  size_t len = s->len, pos = 0;
  char *buf = NULL;
  size_t cap = 0;
  int rc = 0;
  while (pos < len && rc == 0 && !s->stopped) {
    s->line++;
    const char *nl = memchr(t + pos, '\n', len - pos);
    size_t end = nl ? (size_t)(nl - t) : len;
    size_t after = nl ? end + 1 : len;
    size_t n = end - pos;
    for (size_t i = pos; i < end; i++) { /* comments included: a listing is text throughout */
      unsigned char c = (unsigned char)t[i];
      if (c == 0) {
        rc = perr(s, "NUL byte (a listing is text)");
        break;
      }
      if (c == '\r') {
        rc = perr(s, "carriage return (lines end with \\n alone)");
        break;
      }
      if (c < ' ' && c != '\t') {
        rc = perr(s, "control character 0x%02x", c);
        break;
      }
    }
    if (rc) break;
    if (n + 1 > cap) {
      cap = n + 1 > 256 ? n + 1 : 256;
      free(buf);
      buf = malloc(cap);
      if (!buf) {
        rc = rt_fail_at(s->err, s->errlen, __FILE__, __LINE__, "out of memory");
        break;
      }
    }
    memcpy(buf, t + pos, n);
    buf[n] = 0;
    char *hash = memchr(buf, '#', n);
    if (hash) *hash = 0;
    s->nf = 0;
    for (char *q = buf; *q;) {
      while (*q == ' ' || *q == '\t') q++;
      if (!*q) break;
      if (s->nf == MAX_FIELDS) {
        rc = perr(s, "more than %d fields", MAX_FIELDS);
        break;
      }
      s->f[s->nf++] = q;
      while (*q && *q != ' ' && *q != '\t') q++;
      if (*q) *q++ = 0;
    }
    pos = after;
    if (rc || s->nf == 0) continue;
    rc = line(s, after);
  }
  free(buf);
  if (rc == 0) rc = at_eof(s);
  return rc;
}

static int parse_text(const char *path, const char *text, size_t len, int stop_at_mesh, RtProg **out, char *err,
                      size_t errlen) {
  *out = NULL;
  if (err && errlen) err[0] = 0;
  RtProg *g = calloc(1, sizeof *g);
  RT_CHECK_ALLOC(g);
  g->tied = -1;
  g->prev = g->next = -1;
  g->path = dupstr(path);
  if (!g->path) {
    free(g);
    return RT_FAIL("out of memory");
  }
  P s;
  memset(&s, 0, sizeof s);
  s.path = path;
  s.text = text;
  s.len = len;
  s.err = err;
  s.errlen = errlen;
  s.p = g;
  s.stop_at_mesh = stop_at_mesh;
  int rc = parse_all(&s);
  free(s.slot_holds);
  free(s.slot_recv);
  free(s.slot_done);
  free(s.fwd_done);
  free(s.bwd_done);
  free(s.ops_done);
  free(s.fslot);
  if (rc) {
    rt_prog_free(g);
    return -1;
  }
  *out = g;
  return 0;
}

int rt_prog_parse(const char *path, const char *text, size_t len, RtProg **out, char *err, size_t errlen) {
  return parse_text(path, text, len, 0, out, err, errlen);
}

static int load(const char *path, int stop_at_mesh, RtProg **out, char *err, size_t errlen) {
  *out = NULL;
  size_t n;
  char *buf = rt_util_read_file(path, NULL, MAX_LISTING, &n, err, errlen);
  if (!buf) {
    if (n > MAX_LISTING)
      rt_util_set_err(err, errlen, "%s: %zu bytes: too large for a listing (at most 1 GiB)", path, n);
    return -1;
  }
  int rc = parse_text(path, buf, n, stop_at_mesh, out, err, errlen);
  free(buf);
  return rc;
}

int rt_prog_load(const char *path, RtProg **out, char *err, size_t errlen) { return load(path, 0, out, err, errlen); }

int rt_prog_read_mesh(const char *path, int *tp, int *pp, int *dp, char *err, size_t errlen) {
  RtProg *g = NULL;
  if (load(path, 1, &g, err, errlen)) return -1;
  *tp = g->tp;
  *pp = g->pp;
  *dp = g->dp;
  rt_prog_free(g);
  return 0;
}

void rt_prog_free(RtProg *p) {
  if (!p) return;
  free(p->path);
  free(p->compiler);
  free(p->model);
  free(p->schedule_name);
  free(p->kernels_base);
  for (int i = 0; i < p->nbuffers; i++) free(p->buffers[i].name);
  free(p->buffers);
  free(p->kgeom);
  for (int i = 0; i < p->nparams; i++) free(p->params[i].name);
  free(p->params);
  for (int i = 0; i < p->nmodel; i++) free(p->mparams[i].name);
  free(p->mparams);
  for (int i = 0; i < p->nkernels; i++) free(p->kernels[i]);
  free(p->kernels);
  for (int b = 0; b < RT_NBLK; b++) {
    for (int i = 0; i < p->blk[b].n; i++) free(p->blk[b].ins[i].args);
    free(p->blk[b].ins);
  }
  free(p->sched);
  free(p);
}
