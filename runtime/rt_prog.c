/* rt_prog.c - the strict parser of ppr program listings (docs/stage-format.md) into an RtProg: the entry points, the
 * line loop and each line's dispatch to its section (rt_prog_header.c, rt_prog_layout.c, rt_prog_instr.c,
 * rt_prog_sched.c); the names, failure messages, kernel files and pipeline messages of rt_prog.h. */
#include "rt_prog.h"
#include "rt_prog_parse.h"
#include "rt_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LISTING ((size_t)1 << 30) /* 1 GiB */

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

_Static_assert(RT_NREG == PP_NREGIONS, "RT_REG_* are the arena's regions, in pp_regions.h's order");
static const char *const block_names[RT_NBLK] = {"forward", "backward", "weights", "optimizer", "refresh"};
static const char *const scalar_names[] = {"lr",  "beta1", "beta2",    "eps",  "wd",     "bc1",
                                           "bc2", "clip",  "tokscale", "seed", "rngctr", "train"};
_Static_assert(sizeof scalar_names / sizeof scalar_names[0] == RT_NSCALAR, "a name for every RT_S_*");

const char *rt_region_name(int r) { return pp_region_name(r); }
const char *rt_block_name(int b) { return b >= 0 && b < RT_NBLK ? block_names[b] : "?"; }
const char *rt_scalar_name(int s) { return s >= 0 && s < RT_NSCALAR ? scalar_names[s] : "?"; }

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

RtMsg rt_boundary_msg(int kind, int mb, int vstage, int prev, int next, int pp, int nchunks) {
  PpBoundary k = (PpBoundary)kind;
  return (RtMsg){.send = pp_boundary_is_send(k),
                 .peer = pp_boundary_to_next(k) ? next : prev,
                 .tag = pp_boundary_tag(k, mb, pp_boundary_link(k, vstage, pp), nchunks)};
}

const char *rt_prog_block_label(const RtProg *p, int c, int b, char *buf, size_t n) {
  if (p->nchunks > 1 && !rt_blk_program(b)) snprintf(buf, n, "%s:%d", rt_block_name(b), c);
  else snprintf(buf, n, "%s", rt_block_name(b));
  return buf;
}

/* ---- the line loop ------------------------------------------------------------------------- */

static int line(RtParser *s, size_t after) {
  RtProg *g = s->p;
  const char *k = s->f[0];
  switch (s->sec) {
  case SEC_HEADER: return rt_prog_header_line(s, after);
  case SEC_REGIONS: return rt_prog_region_line(s);
  case SEC_BOUNDARIES:
    if (!strcmp(k, "boundary")) return rt_prog_boundary_line(s);
    if (rt_prog_finish_boundaries(s)) return -1;
    s->sec = SEC_PARAMS;
    /* fall through */
  case SEC_PARAMS:
    if (!strcmp(k, "param")) return rt_prog_param_line(s);
    if (!strcmp(k, "boundary")) return rt_prog_err(s, "boundary after a param line (boundaries come first)");
    if (rt_prog_finish_params(s)) return -1;
    s->sec = SEC_MODEL;
    /* fall through */
  case SEC_MODEL:
    if (!strcmp(k, "model_param")) return rt_prog_model_line(s);
    if (!strcmp(k, "param")) return rt_prog_err(s, "param after a model_param line (params come first)");
    if (rt_prog_finish_model(s)) return -1;
    s->sec = SEC_BUFFERS;
    /* fall through */
  case SEC_BUFFERS:
    if (!strcmp(k, "buffer")) return rt_prog_buffer_line(s);
    if (!strcmp(k, "param") || !strcmp(k, "model_param"))
      return rt_prog_err(s, "%s after a buffer line (params come first)", k);
    s->sec = SEC_BLOCKS;
    /* fall through */
  case SEC_BLOCKS:
    if (!strcmp(k, "block")) {
      if (s->nf == 3 && !strcmp(s->f[1], "optimizer")) {
        if (strcmp(s->f[2], PP_OPT_CLEARS_GRADS))
          return rt_prog_err(s, "block optimizer: unknown word '%.60s' (expected nothing or %s)", s->f[2],
                             PP_OPT_CLEARS_GRADS);
        g->opt_clears_grads = 1;
      } else if (rt_prog_want_nf(s, 2, "block forward|backward|weights|optimizer [" PP_OPT_CLEARS_GRADS "]|refresh"))
        return -1;
      int b = -1, c = 0;
      int has_suffix = strchr(s->f[1], ':') != NULL;
      if (rt_prog_chunk_suffix(s, s->f[1], &c)) return -1;
      for (int i = 0; i < RT_NBLK; i++)
        if (!strcmp(s->f[1], block_names[i])) b = i;
      if (b < 0)
        return rt_prog_err(s, "unknown block '%.60s' (expected forward, backward, weights, optimizer or refresh)",
                           s->f[1]);
      if (rt_blk_program(b) && has_suffix)
        return rt_prog_err(s, "block %s: no ':C' (one %s block per program, not a chunk's)", block_names[b],
                           block_names[b]);
      if (g->generate && b != RT_BLK_FORWARD)
        return rt_prog_err(s, "block %s: a generation program (schedule %s) has forward blocks alone", s->f[1],
                           PP_SCHED_FORWARD);
      RtBlock *bk = rt_prog_block_w(g, c, b);
      char name[32];
      if (bk->present)
        return rt_prog_err(s, "a second %s block (the first is on line %d)", rt_prog_block_label(g, c, b, name, 32),
                           bk->line);
      bk->present = 1;
      bk->line = s->line;
      s->cur_blk = b;
      s->cur_chunk = c;
      s->cap_ins = 0;
      s->sec = SEC_BLOCK;
      return 0;
    }
    if (!strcmp(k, "schedule")) {
      if (s->nf > 2 || (s->nf == 2 && pp_name_bad_at(s->f[1]) >= 0))
        return rt_prog_err(s, "expected 'schedule' or 'schedule NAME'");
      return rt_prog_start_schedule(s);
    }
    return rt_prog_err(s, "expected 'block NAME' or 'schedule', found '%.60s'", k);
  case SEC_BLOCK:
    if (!strcmp(k, "end")) {
      if (rt_prog_want_nf(s, 1, "end") || rt_prog_epi_pending(s, "the block's end")) return -1;
      if (s->cur_blk == RT_BLK_OPTIMIZER && !s->grad_norm_line)
        return rt_prog_err(s, "the optimizer block has no grad_norm");
      if (s->cur_blk == RT_BLK_OPTIMIZER && (rt_prog_check_shared_sums(s) || rt_prog_check_dp_sums(s))) return -1;
      s->sec = SEC_BLOCKS;
      return 0;
    }
    return rt_prog_instr_line(s);
  case SEC_SCHEDULE:
    if (!strcmp(k, "end")) {
      if (rt_prog_want_nf(s, 1, "end")) return -1;
      return rt_prog_end_schedule(s);
    }
    return rt_prog_schedule_entry(s);
  default: return rt_prog_err(s, "'%.60s' after the schedule's end (the schedule is the last section)", k);
  }
}

static int at_eof(RtParser *s) {
  RtProg *g = s->p;
  if (s->stopped) return 0;
  switch (s->sec) {
  case SEC_HEADER:
    if (s->hdr >= H_CKPT_PREFIX) { /* past the required lines: the regions are next */
      rt_util_set_err(s->err, s->errlen, "%s: ends before 'arena BYTES'", s->path);
      return -1;
    }
    if (s->hdr == H_VERSION) {
      rt_util_set_err(s->err, s->errlen, "%s: empty: not a ppr program listing", s->path);
      return -1;
    }
    rt_util_set_err(s->err, s->errlen, "%s: ends inside the header: expected '%s'", s->path,
                    rt_prog_header_form(s->hdr));
    return -1;
  case SEC_REGIONS: rt_util_set_err(s->err, s->errlen, "%s: ends before 'arena BYTES'", s->path); return -1;
  case SEC_BLOCK: {
    char name[32];
    rt_util_set_err(s->err, s->errlen, "%s: ends inside block %s (line %d): no 'end'", s->path,
                    rt_prog_block_label(g, s->cur_chunk, s->cur_blk, name, sizeof name),
                    rt_prog_block(g, s->cur_chunk, s->cur_blk)->line);
    return -1;
  }
  case SEC_SCHEDULE:
    rt_util_set_err(s->err, s->errlen, "%s: ends inside the schedule (line %d): no 'end'", s->path, s->schedule_line);
    return -1;
  case SEC_DONE: return 0;
  default: rt_util_set_err(s->err, s->errlen, "%s: ends without a schedule", s->path); return -1;
  }
}

static int parse_all(RtParser *s) {
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
        rc = rt_prog_err(s, "NUL byte (a listing is text)");
        break;
      }
      if (c == '\r') {
        rc = rt_prog_err(s, "carriage return (lines end with \\n alone)");
        break;
      }
      if (c < ' ' && c != '\t') {
        rc = rt_prog_err(s, "control character 0x%02x", c);
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
        rc = rt_prog_err(s, "more than %d fields", MAX_FIELDS);
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
  g->nchunks = 1;
  g->chunk[0].prev = g->chunk[0].next = -1;
  g->path = rt_prog_strdup(path);
  if (!g->path) {
    free(g);
    return RT_FAIL("out of memory");
  }
  RtParser s;
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
  free(s.wgt_done);
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

int rt_prog_read_mesh(const char *path, int *tp, int *pp, int *dp, int *cp, char *err, size_t errlen) {
  RtProg *g = NULL;
  if (load(path, 1, &g, err, errlen)) return -1;
  *tp = g->tp;
  *pp = g->pp;
  *dp = g->dp;
  *cp = g->cp;
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
  free(p->ckpt_prefix);
  free(p->hf_config);
  for (int i = 0; i < p->nbuffers; i++) free(p->buffers[i].name);
  free(p->buffers);
  free(p->kgeom);
  for (int i = 0; i < p->nparams; i++) free(p->params[i].name);
  free(p->params);
  for (int i = 0; i < p->nmodel; i++) free(p->mparams[i].name);
  free(p->mparams);
  for (int i = 0; i < p->nkernels; i++) free(p->kernels[i]);
  free(p->kernels);
  for (int c = 0; c < PP_MAX_CHUNKS; c++)
    for (int b = 0; b < RT_NBLK; b++) {
      if (c > 0 && rt_blk_program(b)) continue;
      const RtBlock *bk = rt_prog_block(p, c, b);
      for (int i = 0; i < bk->n; i++) free(bk->ins[i].args);
      free(bk->ins);
    }
  free(p->sched);
  free(p);
}
