/* rt_prog_parse.h - what the files of the listing parser share, and only they (rt_prog.c and rt_prog_*.c): the
 * parser's state, its sections, the fields of a line (rt_prog_tok.c) and the line functions of each section. */
#ifndef RT_PROG_PARSE_H
#define RT_PROG_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "rt_prog.h"

/* The limits shared with ppc (ranks, arena, elements, step dims, names) are pp_limits.h's. */
#define MAX_FIELDS 128 /* fields of one line */

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
  H_COMPILE,
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
  H_CKPT_PREFIX, /* optional: checkpoint_prefix PREFIX */
  H_HF_CONFIG,   /* optional: hf_config JSON */
  H_COUNT
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
  int cur_blk, cur_chunk, cap_ins, cap_params, cap_kernels, cap_entries, cap_model, cap_buffers;
  int grad_norm_line;        /* line of the optimizer block's grad_norm, 0 if none yet */
  int stop_at_mesh, stopped; /* rt_prog_read_mesh: the header up to `mesh` only */
  int chunk_lines;           /* the header's chunk lines so far (RtProg.nchunks is set after them) */
  /* schedule bookkeeping, by unit: u = chunk * (local micro-batches) + micro-batch */
  int *slot_holds; /* per slot: the unit whose backward is pending, or -1 */
  int *slot_recv;  /* per slot: the unit whose received input (recv_fwd) waits for its F, or -1 */
  int *slot_done;  /* per slot: the unit whose B ran last in it, until the slot is reused, or -1 */
  unsigned char *fwd_done, *bwd_done, *wgt_done, *ops_done; /* ops_done: bit k = boundary kind k sent/received */
  int *fslot;                                               /* per unit: the slot of its F */
  int last_fb_kind, last_fb_unit; /* the last F, B or W entry (RT_E_F/RT_E_B/RT_E_W), -1 none */
  int need_b;                     /* a recv_bwd into an @ buffer waits for this unit's B, or -1 */
  int need_b_line;
  int nzero, nopt, nbwd, nwgt, schedule_line;
  int split; /* the program has weights blocks: a slot is held from F to W, and every B has its W */
} RtParser;

/* In a parser function (RtParser *s in scope): a NULL from an allocator is "out of memory" with the source location. */
#define S_ALLOC(ptr)                                                                                                   \
  do {                                                                                                                 \
    if (!(ptr)) return rt_fail_at(s->err, s->errlen, __FILE__, __LINE__, "out of memory");                             \
  } while (0)

/* Chunk c's block b and boundary k, to fill in (rt_prog_block, rt_prog_boundary). */
static inline RtBlock *rt_prog_block_w(RtProg *p, int c, int b) { return (RtBlock *)rt_prog_block(p, c, b); }
static inline RtBoundary *rt_prog_boundary_w(RtProg *p, int c, int k) {
  return (RtBoundary *)rt_prog_boundary(p, c, k);
}

/* ---- the fields of a line (rt_prog_tok.c) ------------------------------------------------- */

/* "PATH:LINE: MESSAGE" into the parser's err; returns -1. */
int rt_prog_err(RtParser *s, const char *fmt, ...) RT_FMT(2, 3);
/* A decimal integer in [lo, hi] (an optional '-', digits only); -1 when it is not one. */
int rt_prog_parse_int(const char *t, int64_t lo, int64_t hi, int64_t *out);
int rt_prog_parse_double(const char *t, double *out); /* a finite double; -1 when it is not one */
int rt_prog_parse_float(const char *t, float *out);   /* a finite double that is also finite as a float */
/* Field i: an integer in [lo, hi] (what names it in the message); -1 with the message. */
int rt_prog_want_int(RtParser *s, int i, const char *what, int64_t lo, int64_t hi, int64_t *out);
int rt_prog_want_i32(RtParser *s, int i, const char *what, int64_t lo, int64_t hi, int *out);
int rt_prog_want_word(RtParser *s, int i, const char *word, const char *form); /* field i is word */
int rt_prog_want_nf(RtParser *s, int n, const char *form);                     /* the line has n fields */
int rt_prog_is_ident(const char *t); /* a C identifier of at most 200 characters */
char *rt_prog_strdup(const char *t); /* NULL when out of memory */
/* *arr (of *cap elements of elem bytes) holds at least need; the new elements are zeroed. */
int rt_prog_grow(RtParser *s, void **arr, int *cap, int need, size_t elem);
/* A name with an optional chunk suffix, NAME or NAME:C (C < the program's chunks): *c = C (0
 * without), and the field t (modified) becomes NAME. -1 with the message naming the line. */
int rt_prog_chunk_suffix(RtParser *s, char *t, int *c);
/* @OFF / $OFF; with extent != NULL also @OFF:BYTES / $OFF:BYTES (*extent = 0 when not given). */
int rt_prog_parse_ptr(RtParser *s, const char *t, const char *what, RtPtr *p, int64_t *extent);
/* The bytes [off, off + bytes) must lie inside the arena ('@') or the slot ('$'). */
int rt_prog_check_extent(RtParser *s, const char *what, const RtPtr *p, int64_t bytes);

/* ---- the sections: one line each, and the checks at a section's end ------------------------- */

int rt_prog_header_line(RtParser *s, size_t after); /* rt_prog_header.c; after: the offset past the line */
const char *rt_prog_header_form(int h);             /* the form of header line H_* */
/* rt_prog_layout.c: the regions and the arena, boundaries, params, model_params, buffers */
int rt_prog_region_line(RtParser *s);
int rt_prog_boundary_line(RtParser *s);
int rt_prog_finish_boundaries(RtParser *s);
int rt_prog_param_line(RtParser *s);
int rt_prog_finish_params(RtParser *s);
int rt_prog_model_line(RtParser *s);
int rt_prog_finish_model(RtParser *s);
int rt_prog_buffer_line(RtParser *s);
/* rt_prog_instr.c: an instruction of the current block; the optimizer block's checks at its end */
int rt_prog_instr_line(RtParser *s);
int rt_prog_epi_pending(RtParser *s, const char *what); /* a gemm epi: not followed by its kernel: -1 */
int rt_prog_check_shared_sums(RtParser *s);
int rt_prog_check_dp_sums(RtParser *s);
/* rt_prog_sched.c: the schedule's start, its entries and its end */
int rt_prog_start_schedule(RtParser *s);
int rt_prog_schedule_entry(RtParser *s);
int rt_prog_end_schedule(RtParser *s);

#endif /* RT_PROG_PARSE_H */
