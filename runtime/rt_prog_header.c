/* rt_prog_header.c - the header of a listing: its lines in their fixed order, from 'ppr-program N' (the version)
 * and the content hash to the kernel files' sizes and hashes. */
#include "rt_prog_parse.h"
#include "rt_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KERNEL_FILE ((int64_t)1 << 40) /* bytes of a kernel file (`object`, `cuda` lines) */

/* ---- header -------------------------------------------------------------------------------- */

static const char *const header_forms[H_COUNT] = {
    "ppr-program N",
    "compiler NAME VERSION",
    "hash HEX16",
    "compile HEX16",
    "model NAME",
    "mesh tp N pp N dp N [cp N]",
    "rank R stage S tp_rank T dp_rank D [cp_rank C]",
    "peers prev P next N",
    "step micro_batch B seq S microbatches M schedule NAME",
    "vocab N [ignore_index I]",
    "kernels NAME HEX16",
    "object so BYTES|- HEX16|-",
    "object cl BYTES|- HEX16|-",
    "cuda ARCH CUBIN-BYTES|- CUBIN-HEX16|- PTX-BYTES|- PTX-HEX16|-",
    "checkpoint_prefix PREFIX",
    "hf_config JSON",
};

const char *rt_prog_header_form(int h) { return header_forms[h]; }

static int is_hex16(const char *t) {
  if (strlen(t) != 16) return 0;
  for (int i = 0; i < 16; i++)
    if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f'))) return 0;
  return 1;
}

/* Fields i and i+1: a kernel file's BYTES and HEX (its FNV-1a 64 hash), or '- -' for none. */
static int file_sum(RtParser *s, int i, int kind, const char *key, RtFileSum *out) {
  const char *ext = rt_kernel_file_ext(kind);
  const char *b = s->f[i], *h = s->f[i + 1];
  out->line = s->line;
  if (!strcmp(b, "-") && !strcmp(h, "-")) {
    out->bytes = -1;
    snprintf(out->hash, sizeof out->hash, "-");
    return 0;
  }
  if (!strcmp(b, "-") || !strcmp(h, "-"))
    return rt_prog_err(s, "%s: the %s file's size and hash come together: both, or both '-'", key, ext);
  if (rt_prog_parse_int(b, 1, MAX_KERNEL_FILE, &out->bytes))
    return rt_prog_err(s, "%s: %s bytes: expected an integer in [1, 2^40] or '-', found '%.60s'", key, ext, b);
  if (!is_hex16(h))
    return rt_prog_err(s, "%s: %s hash: expected 16 lowercase hex digits or '-', found '%.60s'", key, ext, h);
  memcpy(out->hash, h, 17);
  return 0;
}

/* ---- chunks of layers ------------------------------------------------------------------------ */

static const char *const chunk_form = "chunk C vstage S prev P next N";

/* `chunk C vstage S prev P next N`, the next of the lines after `peers`; what needs the count of
 * chunks (V) is checked by finish_chunks. */
static int chunk_line(RtParser *s) {
  RtProg *g = s->p;
  int c = s->chunk_lines;
  int64_t nranks = rt_prog_nranks(g), v;
  if (c == PP_MAX_CHUNKS) return rt_prog_err(s, "chunk %d: a rank holds at most %d chunks", c, PP_MAX_CHUNKS);
  if (s->nf != 8 || strcmp(s->f[2], "vstage") || strcmp(s->f[4], "prev") || strcmp(s->f[6], "next"))
    return rt_prog_err(s, "chunk %d: expected '%s'", c, chunk_form);
  if (rt_prog_parse_int(s->f[1], 0, INT32_MAX, &v))
    return rt_prog_err(s, "chunk %d: expected '%s': C '%.60s' is not a chunk number", c, chunk_form, s->f[1]);
  if (v != c)
    return rt_prog_err(s, "chunk %lld: expected chunk %d (the chunk lines come in order, C = 0, 1, ...)", (long long)v,
                       c);
  RtChunk *k = &g->chunk[c];
  if (rt_prog_want_i32(s, 3, "chunk: vstage", 0, (int64_t)g->pp * PP_MAX_CHUNKS - 1, &k->vstage) ||
      rt_prog_want_i32(s, 5, "chunk: prev", -1, nranks - 1, &k->prev) ||
      rt_prog_want_i32(s, 7, "chunk: next", -1, nranks - 1, &k->next))
    return -1;
  k->line = s->line;
  s->chunk_lines++;
  return 0;
}

/* After the chunk lines (none: one chunk, the stage and its peers): V >= 2, each vstage in
 * [0, pp·V) and once, prev -1 exactly on vstage 0, next -1 exactly on the last. */
static int finish_chunks(RtParser *s) {
  RtProg *g = s->p;
  int n = s->chunk_lines, line = s->line, rc = 0;
  if (n == 0) {
    g->nchunks = 1;
    g->chunk[0] = (RtChunk){.vstage = g->stage, .prev = g->prev, .next = g->next};
    return 0;
  }
  g->nchunks = n;
  int last = g->pp * n - 1;
  for (int c = 0; c < n && !rc; c++) {
    const RtChunk *k = &g->chunk[c];
    s->line = k->line;
    if (n == 1)
      rc = rt_prog_err(s,
                       "chunk 0 is the only chunk line: a program with chunks has 2 to %d (without chunk lines: one "
                       "chunk, its stage)",
                       PP_MAX_CHUNKS);
    else if (k->vstage > last)
      rc = rt_prog_err(s, "chunk %d: vstage %d is not in [0, %d] (pp %d × %d chunks)", c, k->vstage, last, g->pp, n);
    for (int d = 0; d < c && !rc; d++)
      if (g->chunk[d].vstage == k->vstage)
        rc = rt_prog_err(s, "chunk %d: vstage %d is also chunk %d's (line %d)", c, k->vstage, d, g->chunk[d].line);
    if (!rc && (k->vstage == 0) != (k->prev < 0))
      rc = rt_prog_err(s, "chunk %d: prev %d, but vstage %d %s", c, k->prev, k->vstage,
                       k->vstage ? "has a previous virtual stage" : "is the first virtual stage (prev -1)");
    if (!rc && (k->vstage == last) != (k->next < 0))
      rc = rt_prog_err(s, "chunk %d: next %d, but vstage %d of %d %s", c, k->next, k->vstage, last + 1,
                       k->vstage == last ? "is the last virtual stage (next -1)" : "has a next virtual stage");
  }
  s->line = line;
  return rc;
}

/* `mesh tp N pp N dp N [cp N]`: the world's shape (with stop_at_mesh the parse stops after it). */
static int mesh_line(RtParser *s, const char *form) {
  RtProg *g = s->p;
  g->cp = 1; /* without `cp C` */
  if ((s->nf != 9 && rt_prog_want_nf(s, 7, form)) || rt_prog_want_word(s, 1, "tp", form) ||
      rt_prog_want_word(s, 3, "pp", form) || rt_prog_want_word(s, 5, "dp", form) ||
      rt_prog_want_i32(s, 2, "tp", 1, PP_MAX_RANKS, &g->tp) || rt_prog_want_i32(s, 4, "pp", 1, PP_MAX_RANKS, &g->pp) ||
      rt_prog_want_i32(s, 6, "dp", 1, PP_MAX_RANKS, &g->dp) ||
      (s->nf == 9 && (rt_prog_want_word(s, 7, "cp", form) || rt_prog_want_i32(s, 8, "cp", 2, PP_MAX_RANKS, &g->cp))))
    return -1;
  if ((int64_t)g->tp * g->pp * g->dp * g->cp > PP_MAX_RANKS)
    return rt_prog_err(s, "mesh: more than %d ranks", PP_MAX_RANKS);
  if (s->stop_at_mesh) s->stopped = 1;
  return 0;
}

/* `cuda ARCH CUBIN-BYTES CUBIN-HEX PTX-BYTES PTX-HEX`: the GPU target and its two kernel files. */
static int cuda_line(RtParser *s, const char *form) {
  RtProg *g = s->p;
  if (rt_prog_want_nf(s, 6, form)) return -1;
  if (strncmp(s->f[1], "sm_", 3) || strlen(s->f[1]) > 8 || strlen(s->f[1]) < 5 ||
      strspn(s->f[1] + 3, "0123456789") != strlen(s->f[1] + 3))
    return rt_prog_err(s, "cuda: '%.60s' is not a GPU architecture (sm_80, sm_90, ...)", s->f[1]);
  if (file_sum(s, 2, RT_KF_CUBIN, "cuda", &g->file[RT_KF_CUBIN]) ||
      file_sum(s, 4, RT_KF_PTX, "cuda", &g->file[RT_KF_PTX]))
    return -1;
  if ((g->file[RT_KF_CUBIN].bytes < 0) != (g->file[RT_KF_PTX].bytes < 0))
    return rt_prog_err(s, "cuda: the cubin and the PTX come together: both sizes and hashes, or all '-'");
  snprintf(g->cuda_arch, sizeof g->cuda_arch, "%s", s->f[1]);
  return 0;
}

/* `step micro_batch B seq S microbatches M schedule NAME`: the step's shape, checked against the mesh. */
static int step_line(RtParser *s, const char *form) {
  RtProg *g = s->p;
  if (rt_prog_want_nf(s, 9, form) || rt_prog_want_word(s, 1, "micro_batch", form) ||
      rt_prog_want_word(s, 3, "seq", form) || rt_prog_want_word(s, 5, "microbatches", form) ||
      rt_prog_want_word(s, 7, "schedule", form) ||
      rt_prog_want_i32(s, 2, "micro_batch", 1, PP_MAX_STEP_DIM, &g->micro_batch) ||
      rt_prog_want_i32(s, 4, "seq", 1, PP_MAX_STEP_DIM, &g->seq) ||
      rt_prog_want_i32(s, 6, "microbatches", 1, PP_MAX_STEP_DIM, &g->microbatches))
    return -1;
  if ((int64_t)g->micro_batch * g->seq > ((int64_t)1 << 30))
    return rt_prog_err(s, "step: micro_batch * seq is more than 2^30 tokens");
  if (g->cp > 1 && g->seq % g->cp)
    return rt_prog_err(s, "step: seq %d is not a multiple of cp %d (each context-parallel rank holds seq/cp positions)",
                       g->seq, g->cp);
  if (g->microbatches % g->dp)
    return rt_prog_err(s,
                       "step: microbatches %d is not a multiple of dp %d (each data-parallel replica runs M/dp "
                       "of the step's micro-batches)",
                       g->microbatches, g->dp);
  g->local_microbatches = g->microbatches / g->dp;
  if (pp_name_bad_at(s->f[8]) >= 0) return rt_prog_err(s, "step: schedule '%.60s' is not a name", s->f[8]);
  g->schedule_name = rt_prog_strdup(s->f[8]);
  S_ALLOC(g->schedule_name);
  g->generate = !strcmp(g->schedule_name, PP_SCHED_FORWARD);
  if (g->generate && g->micro_batch != 1)
    return rt_prog_err(s, "step: a generation program (schedule %s) runs one sequence: micro_batch 1, not %d",
                       PP_SCHED_FORWARD, g->micro_batch);
  if (g->generate && g->local_microbatches != 1)
    return rt_prog_err(s,
                       "step: a generation program (schedule %s) runs one micro-batch a replica: microbatches %d "
                       "(dp), not %d",
                       PP_SCHED_FORWARD, g->dp, g->microbatches);
  return 0;
}

/* `rank R stage S tp_rank T dp_rank D [cp_rank C]`: this rank's place in the mesh. */
static int rank_line(RtParser *s, const char *form) {
  RtProg *g = s->p;
  int64_t nranks = rt_prog_nranks(g);
  /* cp_rank: exactly when the mesh has cp > 1 */
  if ((g->cp > 1 && (rt_prog_want_nf(s, 10, form) || rt_prog_want_word(s, 8, "cp_rank", form) ||
                     rt_prog_want_i32(s, 9, "cp_rank", 0, g->cp - 1, &g->cp_rank))) ||
      (g->cp == 1 && rt_prog_want_nf(s, 8, form)) || rt_prog_want_word(s, 2, "stage", form) ||
      rt_prog_want_word(s, 4, "tp_rank", form) || rt_prog_want_word(s, 6, "dp_rank", form) ||
      rt_prog_want_i32(s, 1, "rank", 0, nranks - 1, &g->rank) ||
      rt_prog_want_i32(s, 3, "stage", 0, g->pp - 1, &g->stage) ||
      rt_prog_want_i32(s, 5, "tp_rank", 0, g->tp - 1, &g->tp_rank) ||
      rt_prog_want_i32(s, 7, "dp_rank", 0, g->dp - 1, &g->dp_rank))
    return -1;
  return 0;
}

/* `peers prev P next N`: the pipeline neighbours. */
static int peers_line(RtParser *s, const char *form) {
  RtProg *g = s->p;
  int64_t nranks = rt_prog_nranks(g);
  int prev, next;
  if (rt_prog_want_nf(s, 5, form) || rt_prog_want_word(s, 1, "prev", form) || rt_prog_want_word(s, 3, "next", form) ||
      rt_prog_want_i32(s, 2, "peers: prev", -1, nranks - 1, &prev) ||
      rt_prog_want_i32(s, 4, "peers: next", -1, nranks - 1, &next))
    return -1;
  if (prev == g->rank || next == g->rank) return rt_prog_err(s, "peers: a rank is not its own pipeline neighbour");
  if ((g->stage == 0) != (prev < 0))
    return rt_prog_err(s, "peers: prev %d, but stage %d %s", prev, g->stage,
                       g->stage ? "has a previous stage" : "is the first stage (prev -1)");
  if ((g->stage == g->pp - 1) != (next < 0))
    return rt_prog_err(s, "peers: next %d, but stage %d of %d %s", next, g->stage, g->pp,
                       g->stage == g->pp - 1 ? "is the last stage (next -1)" : "has a next stage");
  g->prev = prev;
  g->next = next;
  return 0;
}

int rt_prog_header_line(RtParser *s, size_t after) {
  RtProg *g = s->p;
  const char *form = header_forms[s->hdr];
  static const char *const keys[H_COUNT] = {"ppr-program", "compiler", "hash",   "compile", "model",
                                            "mesh",        "rank",     "peers",  "step",    "vocab",
                                            "kernels",     "object",   "object", "cuda",    "checkpoint_prefix",
                                            "hf_config"};
  /* the optional lines after `cuda`; then the regions */
  while ((s->hdr == H_CKPT_PREFIX || s->hdr == H_HF_CONFIG) && strcmp(s->f[0], keys[s->hdr]) != 0) s->hdr++;
  if (s->hdr == H_COUNT) {
    s->sec = SEC_REGIONS;
    return rt_prog_region_line(s);
  }
  if (s->hdr == H_PEERS && strcmp(s->f[0], keys[H_PEERS]) != 0) { /* the optional line */
    if (g->pp > 1)
      return rt_prog_err(s, "expected '%s' (a pipeline-parallel program names its neighbours), found '%.60s'", form,
                         s->f[0]);
    s->hdr = H_STEP;
    form = header_forms[s->hdr];
  }
  if (s->hdr == H_STEP) { /* the chunk lines, if any, then the step line */
    if (!strcmp(s->f[0], "chunk")) return chunk_line(s);
    if (finish_chunks(s)) return -1;
  }
  if (strcmp(s->f[0], keys[s->hdr]) != 0) {
    if (s->hdr == H_VERSION)
      return rt_prog_err(s, "not a ppr program listing: the first line must be 'ppr-program %d'", RT_PROG_VERSION);
    return rt_prog_err(s, "expected '%s' (the header lines come in a fixed order), found '%.60s'", form, s->f[0]);
  }
  int64_t v;
  switch (s->hdr) {
  case H_VERSION:
    if (s->nf != 2 || rt_prog_parse_int(s->f[1], INT64_MIN, INT64_MAX, &v))
      return rt_prog_err(s, "not a ppr program listing: the first line must be 'ppr-program %d'", RT_PROG_VERSION);
    if (v != RT_PROG_VERSION) {
      rt_util_set_err(s->err, s->errlen, "%s: format version %lld, this ppr reads %d", s->path, (long long)v,
                      RT_PROG_VERSION);
      return -1;
    }
    break;
  case H_COMPILER: {
    if (s->nf < 2) return rt_prog_err(s, "expected '%s'", form);
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
    if (rt_prog_want_nf(s, 2, form)) return -1;
    if (!is_hex16(s->f[1])) return rt_prog_err(s, "hash: expected 16 lowercase hex digits, found '%.60s'", s->f[1]);
    g->hash = strtoull(s->f[1], NULL, 16);
    uint64_t h = rt_fnv1a64(s->text + after, s->len - after);
    if (h != g->hash) {
      rt_util_set_err(s->err, s->errlen, "%s: content hash mismatch: edited by hand, or written by another ppc",
                      s->path);
      return -1;
    }
    break;
  }
  case H_COMPILE:
    if (rt_prog_want_nf(s, 2, form)) return -1;
    if (!is_hex16(s->f[1])) return rt_prog_err(s, "compile: expected 16 lowercase hex digits, found '%.60s'", s->f[1]);
    memcpy(g->compile_id, s->f[1], 17);
    break;
  case H_MODEL:
    if (rt_prog_want_nf(s, 2, form)) return -1;
    if (pp_name_bad_at(s->f[1]) >= 0) return rt_prog_err(s, "model: '%.60s' is not a name", s->f[1]);
    g->model = rt_prog_strdup(s->f[1]);
    S_ALLOC(g->model);
    break;
  case H_MESH:
    if (mesh_line(s, form)) return -1;
    if (s->stopped) return 0;
    break;
  case H_RANK:
    if (rank_line(s, form)) return -1;
    break;
  case H_PEERS:
    if (peers_line(s, form)) return -1;
    break;
  case H_STEP:
    if (step_line(s, form)) return -1;
    break;
  case H_VOCAB:
    if (s->nf == 4) { /* a cross-entropy with ignore_index */
      if (rt_prog_want_word(s, 2, "ignore_index", form) ||
          rt_prog_want_i32(s, 3, "ignore_index", INT32_MIN, INT32_MAX, &g->ignore_index))
        return -1;
      g->masked = 1;
    } else if (rt_prog_want_nf(s, 2, form)) return -1;
    if (rt_prog_want_int(s, 1, "vocab", 1, INT32_MAX, &g->vocab)) return -1;
    break;
  case H_KERNELS:
    if (rt_prog_want_nf(s, 3, form)) return -1;
    if (!rt_prog_is_ident(s->f[1]))
      return rt_prog_err(
          s,
          "kernels: '%.60s' is not a name (letters, digits, '_'): the kernel files are NAME.so, NAME.cl, "
          "NAME.cu in the program's directory",
          s->f[1]);
    if (!is_hex16(s->f[2]))
      return rt_prog_err(s, "kernels: hash: expected 16 lowercase hex digits, found '%.60s'", s->f[2]);
    g->kernels_base = rt_prog_strdup(s->f[1]);
    S_ALLOC(g->kernels_base);
    memcpy(g->kernels_hash, s->f[2], 17);
    break;
  case H_OBJECT_SO:
  case H_OBJECT_CL: {
    int kind = s->hdr == H_OBJECT_SO ? RT_KF_SO : RT_KF_CL;
    if (rt_prog_want_word(s, 1, rt_kernel_file_ext(kind), form) || rt_prog_want_nf(s, 4, form) ||
        file_sum(s, 2, kind, "object", &g->file[kind]))
      return -1;
    break;
  }
  case H_CUDA:
    if (cuda_line(s, form)) return -1;
    break;
  case H_CKPT_PREFIX:
    if (rt_prog_want_nf(s, 2, form)) return -1;
    if (pp_name_bad_at(s->f[1]) >= 0) return rt_prog_err(s, "checkpoint_prefix: '%.60s' is not a name", s->f[1]);
    g->ckpt_prefix = rt_prog_strdup(s->f[1]);
    S_ALLOC(g->ckpt_prefix);
    break;
  case H_HF_CONFIG: { /* one field: compact JSON, ASCII, spaces and '#' escaped (read by --save) */
    size_t n = strlen(s->f[1]);
    if (rt_prog_want_nf(s, 2, form)) return -1;
    if (n < 2 || s->f[1][0] != '{' || s->f[1][n - 1] != '}')
      return rt_prog_err(s, "hf_config: expected a JSON object in one field, found '%.60s'", s->f[1]);
    g->hf_config = rt_prog_strdup(s->f[1]);
    S_ALLOC(g->hf_config);
    break;
  }
  case H_COUNT: break;
  }
  s->hdr++;
  if (s->hdr == H_COUNT) s->sec = SEC_REGIONS;
  return 0;
}
