/* rt_mesh.c - the start-up checks that the ranks' listings make one mesh: coordinates, neighbours, boundaries,
 * collectives, ownership, and a deadlock-free schedule. */
#include "rt_mesh.h"

#include "pp_sim.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What each rank tells the others about its listing. Fixed-size fields: every rank runs the
 * same binary, so the layout (padding included, zeroed) is the same. */
typedef struct {
  int32_t rank, stage, tp_rank, dp_rank, tp, pp, dp, prev, next;
  int32_t cp, cp_rank, line; /* context parallelism (cp 1 without); line: dp_rank·cp + cp_rank, a pipeline's */
  int32_t micro_batch, seq, microbatches, tied, shared, nallreduce, nmodel;
  int32_t nchunks;                                                           /* V: 1 without chunk lines */
  int32_t vstage[PP_MAX_CHUNKS], cprev[PP_MAX_CHUNKS], cnext[PP_MAX_CHUNKS]; /* per chunk */
  int64_t vocab, allreduce_bytes;
  int64_t bnd[PP_MAX_CHUNKS][PP_NBND]; /* per chunk: bytes; -1: no such boundary */
  uint64_t model_hash, model_params_hash;
  uint64_t tp_hash, dp_hash, cp_hash; /* the schedule and the tp (dp, cp) collectives in each block, in order */
} Info;

typedef struct {
  char *err;
  size_t errlen, used;
  int n;
} Msgs;

static void add(Msgs *m, const char *fmt, ...) RT_FMT(2, 3);
static void add(Msgs *m, const char *fmt, ...) {
  m->n++;
  if (!m->err || m->used + 1 >= m->errlen) return;
  if (m->used) m->err[m->used++] = '\n';
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(m->err + m->used, m->errlen - m->used, fmt, ap);
  va_end(ap);
  if (k > 0) m->used += (size_t)k;
  if (m->used >= m->errlen) m->used = m->errlen - 1;
  m->err[m->used] = 0;
}

static void prog_path(char *buf, size_t n, const char *dir, int r) {
  size_t dl = strlen(dir);
  snprintf(buf, n, "%s%srank%d.prog", dir, dl && dir[dl - 1] == '/' ? "" : "/", r);
}

static uint64_t fnv_more(uint64_t h, const void *data, size_t n) {
  const unsigned char *b = data;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

static void fill_info(const RtProg *p, Info *in) {
  memset(in, 0, sizeof *in);
  in->rank = p->rank;
  in->stage = p->stage;
  in->tp_rank = p->tp_rank;
  in->dp_rank = p->dp_rank;
  in->tp = p->tp;
  in->pp = p->pp;
  in->dp = p->dp;
  in->cp = p->cp > 1 ? p->cp : 1;
  in->cp_rank = p->cp_rank;
  in->line = p->dp_rank * in->cp + p->cp_rank;
  in->prev = p->prev;
  in->next = p->next;
  in->micro_batch = p->micro_batch;
  in->seq = p->seq;
  in->microbatches = p->microbatches;
  in->tied = p->tied >= 0;
  in->shared = p->nshared > 0;
  in->nmodel = p->nmodel;
  in->vocab = p->vocab;
  in->nchunks = rt_prog_nchunks(p);
  for (int c = 0; c < in->nchunks; c++) {
    /* an RtProg built by hand (nchunks 0) has one chunk: its stage and peers */
    in->vstage[c] = p->nchunks ? p->chunk[c].vstage : p->stage;
    in->cprev[c] = p->nchunks ? p->chunk[c].prev : p->prev;
    in->cnext[c] = p->nchunks ? p->chunk[c].next : p->next;
    for (int k = 0; k < PP_NBND; k++) {
      const RtBoundary *b = rt_prog_boundary(p, c, k);
      in->bnd[c][k] = b->present ? b->bytes : -1;
    }
  }
  const RtBlock *o = &p->blk[RT_BLK_OPTIMIZER];
  for (int i = 0; i < o->n; i++)
    if (o->ins[i].kind == RT_I_ALLREDUCE_TIED) {
      in->nallreduce++;
      in->allreduce_bytes += o->ins[i].bytes;
    }
  in->model_hash = rt_fnv1a64(p->model, strlen(p->model));
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < p->nmodel; i++) {
    const RtModelParam *m = &p->mparams[i];
    h = fnv_more(h, m->name, strlen(m->name) + 1);
    h = fnv_more(h, &m->ndim, sizeof m->ndim);
    h = fnv_more(h, m->dims, (size_t)m->ndim * sizeof *m->dims);
  }
  in->model_params_hash = h;
  /* what the members of a TP (DP) group must run alike: the schedule's entries, and the group's
   * collectives of each block (group, op, size) in order */
  uint64_t sh = 0xcbf29ce484222325ull;
  for (int e = 0; e < p->nentries; e++) {
    const RtEntry *en = &p->sched[e];
    int32_t v[4 + 8] = {(int32_t)en->kind, en->chunk, en->mb, en->nops};
    for (int i = 0; i < en->nops; i++) {
      v[4 + 4 * i] = (int32_t)en->op[i].kind;
      v[5 + 4 * i] = en->op[i].chunk;
      v[6 + 4 * i] = en->op[i].mb;
      v[7 + 4 * i] = en->op[i].slot;
    }
    sh = fnv_more(sh, v, sizeof v);
  }
  uint64_t th = sh, dh = sh, ch = sh;
  for (int c = 0; c < rt_prog_nchunks(p); c++)
    for (int b = 0; b < RT_NBLK; b++) {
      if (c > 0 && rt_blk_program(b)) continue;
      const RtBlock *bk = rt_prog_block(p, c, b);
      for (int i = 0; i < bk->n; i++) {
        const RtInstr *x = &bk->ins[i];
        if (x->kind != RT_I_ALLREDUCE && x->kind != RT_I_ALLGATHER && x->kind != RT_I_REDUCE_SCATTER) continue;
        int64_t v[7] = {c, b, x->kind, x->group, x->sub, x->op, x->bytes};
        if (x->group == RT_G_DP) dh = fnv_more(dh, v, sizeof v);
        else if (x->group == RT_G_CP) ch = fnv_more(ch, v, sizeof v);
        else th = fnv_more(th, v, sizeof v);
      }
    }
  in->tp_hash = th;
  in->dp_hash = dh;
  in->cp_hash = ch;
}

/* "tp_rank T, dp_rank D" and ", cp_rank C" with context parallelism: a pipeline's coordinates */
static const char *pipe_at(const Info *x, char *buf, size_t n) {
  int k = snprintf(buf, n, "tp_rank %d, dp_rank %d", x->tp_rank, x->dp_rank);
  if (x->cp > 1 && k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, ", cp_rank %d", x->cp_rank);
  return buf;
}

/* The rank holding virtual stage v of the pipeline (tp_rank, line), or -1; *chunk its chunk. */
static int vstage_at(const Info *all, int n, int v, int tp_rank, int line, int *chunk) {
  for (int r = 0; r < n; r++)
    for (int c = 0; c < all[r].nchunks; c++)
      if (all[r].vstage[c] == v && all[r].tp_rank == tp_rank && all[r].line == line) {
        *chunk = c;
        return r;
      }
  *chunk = -1;
  return -1;
}

/* With chunks of layers: the virtual stages of each pipeline are a permutation of 0 .. pp·V − 1
 * (each held once: the ranks of a pipeline are pp, each with V in range), and each chunk's prev
 * and next are the ranks holding its neighbouring virtual stages. */
static void check_chunks(const Info *all, int n, const char *dir, Msgs *m) {
  char a[1024], b[1024], w[96];
  for (int r = 0; r < n && m->n < 8; r++) {
    const Info *x = &all[r];
    prog_path(a, sizeof a, dir, r);
    for (int c = 0; c < x->nchunks && m->n < 8; c++) {
      int d, q = vstage_at(all, n, x->vstage[c], x->tp_rank, x->line, &d);
      if (q != r || d != c) {
        prog_path(b, sizeof b, dir, q);
        add(m, "%s: chunk %d's vstage %d is also held by %s (chunk %d) in the pipeline of %s", a, c, x->vstage[c], b, d,
            pipe_at(x, w, sizeof w));
        continue;
      }
      int last = x->pp * x->nchunks - 1, v = x->vstage[c], dc;
      int want_prev = v > 0 ? vstage_at(all, n, v - 1, x->tp_rank, x->line, &dc) : -1;
      int want_next = v < last ? vstage_at(all, n, v + 1, x->tp_rank, x->line, &dc) : -1;
      if (x->cprev[c] != want_prev || x->cnext[c] != want_next)
        add(m, "%s: chunk %d (vstage %d): prev %d next %d, but the ranks of vstages %d and %d (%s) are %d and %d", a, c,
            v, x->cprev[c], x->cnext[c], v - 1, v + 1, pipe_at(x, w, sizeof w), want_prev, want_next);
    }
  }
}

/* The rank at (stage, tp_rank, line), or -1. */
static int rank_at(const Info *all, int n, int stage, int tp_rank, int line) {
  for (int r = 0; r < n; r++)
    if (all[r].stage == stage && all[r].tp_rank == tp_rank && all[r].line == line) return r;
  return -1;
}

static void check_infos(const Info *all, int n, const char *dir, Msgs *m) {
  char a[1024], b[1024], w[96];
  const Info *z = &all[0];
  prog_path(b, sizeof b, dir, 0);
  for (int r = 0; r < n && m->n < 8; r++) {
    const Info *x = &all[r];
    prog_path(a, sizeof a, dir, r);
    if (x->rank != r) add(m, "%s: the listing is rank %d's ('rank %d'), not rank %d's", a, x->rank, x->rank, r);
    if (x->tp != z->tp || x->pp != z->pp || x->dp != z->dp || x->cp != z->cp)
      add(m,
          "%s: mesh tp %d pp %d dp %d cp %d, but %s has tp %d pp %d dp %d cp %d: the listings come from different ppc "
          "runs",
          a, x->tp, x->pp, x->dp, x->cp, b, z->tp, z->pp, z->dp, z->cp);
    if (x->micro_batch != z->micro_batch || x->seq != z->seq || x->microbatches != z->microbatches)
      add(m, "%s: step micro_batch %d seq %d microbatches %d, but %s has micro_batch %d seq %d microbatches %d", a,
          x->micro_batch, x->seq, x->microbatches, b, z->micro_batch, z->seq, z->microbatches);
    if (x->vocab != z->vocab || x->model_hash != z->model_hash)
      add(m, "%s: another model or vocab than %s: the listings come from different ppc runs", a, b);
    if (x->nmodel != z->nmodel || x->model_params_hash != z->model_params_hash)
      add(m, "%s: its model_param lines differ from %s's: the listings come from different ppc runs", a, b);
    if (x->nchunks != z->nchunks)
      add(m, "%s: %d chunk%s of layers, but %s has %d: every rank holds as many", a, x->nchunks,
          x->nchunks == 1 ? "" : "s", b, z->nchunks);
  }
  if (m->n) return;
  for (int r = 0; r < n && m->n < 8; r++) {
    const Info *x = &all[r];
    prog_path(a, sizeof a, dir, r);
    int o = rank_at(all, r, x->stage, x->tp_rank, x->line);
    if (o >= 0) {
      prog_path(b, sizeof b, dir, o);
      add(m, "%s: stage %d %s is also %s's place in the mesh", a, x->stage, pipe_at(x, w, sizeof w), b);
      continue;
    }
    int want_prev = x->stage > 0 ? rank_at(all, n, x->stage - 1, x->tp_rank, x->line) : -1;
    int want_next = x->stage + 1 < x->pp ? rank_at(all, n, x->stage + 1, x->tp_rank, x->line) : -1;
    /* a neighbour missing from the world shows up as a duplicate place of another rank */
    if (x->prev != want_prev || x->next != want_next)
      add(m, "%s: peers prev %d next %d, but the ranks of stages %d and %d (%s) are %d and %d", a, x->prev, x->next,
          x->stage - 1, x->stage + 1, pipe_at(x, w, sizeof w), want_prev, want_next);
  }
  if (m->n) return;
  if (z->nchunks > 1) check_chunks(all, n, dir, m);
  if (m->n) return;
  static const char *const fwd = "hidden state", *const bwd = "hidden-state gradient";
  for (int r = 0; r < n && m->n < 8; r++) {
    const Info *x = &all[r];
    for (int c = 0; c < x->nchunks && m->n < 8; c++) {
      int d = 0, next = x->cnext[c];
      if (next < 0) continue;
      const Info *y = &all[next];
      if (x->nchunks > 1) vstage_at(all, n, x->vstage[c] + 1, x->tp_rank, x->line, &d);
      prog_path(a, sizeof a, dir, r);
      prog_path(b, sizeof b, dir, next);
      char sc[16] = "", sd[16] = ""; /* the boundaries' chunks, as the listings write them */
      if (x->nchunks > 1) snprintf(sc, sizeof sc, ":%d", c), snprintf(sd, sizeof sd, ":%d", d);
      if (x->bnd[c][PP_SEND_FWD] != y->bnd[d][PP_RECV_FWD])
        add(m, "%s sends a %lld-byte %s to %s (boundary send_fwd%s), which receives %lld bytes (boundary recv_fwd%s)",
            a, (long long)x->bnd[c][PP_SEND_FWD], fwd, b, sc, (long long)y->bnd[d][PP_RECV_FWD], sd);
      if (x->bnd[c][PP_RECV_BWD] != y->bnd[d][PP_SEND_BWD])
        add(m, "%s receives a %lld-byte %s from %s (boundary recv_bwd%s), which sends %lld bytes (boundary send_bwd%s)",
            a, (long long)x->bnd[c][PP_RECV_BWD], bwd, b, sc, (long long)y->bnd[d][PP_SEND_BWD], sd);
    }
  }
  /* the TP, DP and cp groups run the same schedule and the same collectives */
  for (int r = 0; r < n && m->n < 8; r++) {
    const Info *x = &all[r];
    prog_path(a, sizeof a, dir, r);
    for (int q = 0; q < r; q++) {
      if (all[q].line == x->line && all[q].stage == x->stage && all[q].tp_hash != x->tp_hash) {
        prog_path(b, sizeof b, dir, q);
        char cr[24] = "";
        if (x->cp > 1) snprintf(cr, sizeof cr, " cp_rank %d", x->cp_rank);
        add(m,
            "%s: its schedule or its 'allreduce tp' instructions differ from %s's (the same TP group, stage %d "
            "dp_rank %d%s): every member must run the same tp collectives (allreduce, allgather, reduce_scatter) in "
            "the same order",
            a, b, x->stage, x->dp_rank, cr);
        break;
      }
      if (all[q].dp_rank == x->dp_rank && all[q].stage == x->stage && all[q].tp_rank == x->tp_rank &&
          all[q].cp_hash != x->cp_hash) {
        prog_path(b, sizeof b, dir, q);
        add(m,
            "%s: its schedule or its 'allgather cp' and 'reduce_scatter cp' instructions differ from %s's (the same cp "
            "group, stage %d tp_rank %d dp_rank %d): every member must run the same collectives in the same order",
            a, b, x->stage, x->tp_rank, x->dp_rank);
        break;
      }
      if (all[q].stage == x->stage && all[q].tp_rank == x->tp_rank && all[q].dp_hash != x->dp_hash) {
        prog_path(b, sizeof b, dir, q);
        add(m,
            "%s: its schedule or its 'allreduce dp' instructions differ from %s's (the same DP group, "
            "stage %d tp_rank %d): every member must run the same collectives in the same order",
            a, b, x->stage, x->tp_rank);
        break;
      }
    }
  }
  /* the embedding groups: ranks with a shared param and the same (tp_rank, line) */
  for (int r = 0; r < n && m->n < 8; r++) {
    const Info *x = &all[r];
    if (!x->shared) continue;
    int first = -1, members = 0;
    for (int q = 0; q < n; q++)
      if (all[q].shared && all[q].tp_rank == x->tp_rank && all[q].line == x->line) {
        if (first < 0) first = q;
        members++;
      }
    prog_path(a, sizeof a, dir, r);
    if (members < 2) {
      add(m, "%s: a param is marked shared, but no other rank (%s) holds a shared param", a, pipe_at(x, w, sizeof w));
      continue;
    }
    const Info *f = &all[first];
    if (x->nallreduce != f->nallreduce || x->allreduce_bytes != f->allreduce_bytes) {
      prog_path(b, sizeof b, dir, first);
      add(m, "%s: %d allreduce_tied of %lld bytes in all, but %s (same embedding group) has %d of %lld", a,
          x->nallreduce, (long long)x->allreduce_bytes, b, f->nallreduce, (long long)f->allreduce_bytes);
    }
  }
}

/* One owned tensor or shard, as a rank tells rank 0: "NAME DIM START LEN DENSE\n" (DIM -1: whole). */
typedef struct {
  int rank, dim;
  long long start, len, dense;
} Piece;

static int cmp_piece(const void *a, const void *b) {
  const Piece *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start ? 1 : x->rank - y->rank;
}

/* Rank 0 checks that every model_param is owned (held, not as a copy or replica) by ranks of
 * dp_rank 0 and cp_rank 0 exactly once: a whole tensor by one rank, or shards along one dim whose rows (padding
 * left out) tile the dense dim, each row owned once. blocks: each rank's owned pieces. */
static void check_owners(const RtProg *p, const unsigned char *blocks, const size_t *sizes, int n, const char *dir,
                         Msgs *m) {
  char a[1024], b[1024];
  Piece *pc = NULL;
  int cap = 0;
  for (int i = 0; i < p->nmodel && m->n < 8; i++) {
    const char *name = p->mparams[i].name;
    size_t nl = strlen(name);
    int count = 0, whole = 0;
    size_t at = 0;
    for (int r = 0; r < n; r++) {
      const char *s = (const char *)blocks + at, *end = s + sizes[r];
      while (s < end) {
        const char *e = memchr(s, '\n', (size_t)(end - s));
        if (!e) break;
        if ((size_t)(e - s) > nl && !memcmp(s, name, nl) && s[nl] == ' ') {
          Piece x = {r, -1, 0, 0, 0};
          int parts = 1;
          if (sscanf(s + nl, " %d %lld %lld %lld %d", &x.dim, &x.start, &x.len, &x.dense, &parts) != 5 || parts < 1)
            RT_INTERNAL("a malformed ownership record");
          while (count + parts > cap) {
            cap = cap ? 2 * cap : 16;
            pc = realloc(pc, (size_t)cap * sizeof *pc);
            if (!pc) RT_INTERNAL("out of memory");
          }
          /* a shard in parts: one piece per part, in dense rows (part b starts at b·DENSE/P) */
          for (int b = 0; b < parts; b++) {
            pc[count] = x;
            pc[count].start = b * (x.dense / parts) + x.start;
            pc[count++].len = x.len / parts;
          }
          whole += x.dim < 0;
        }
        s = e + 1;
      }
      at += sizes[r];
    }
    if (count == 0) {
      add(m, "model_param %s: no rank owns it (held by none, or only as a copy or replica)", name);
      continue;
    }
    if (whole && count > 1) {
      int o = pc[0].rank, second = pc[1].rank;
      prog_path(a, sizeof a, dir, o);
      prog_path(b, sizeof b, dir, second);
      add(m, "model_param %s: owned by %s and %s (all but one must mark it copy or replica)", name, a, b);
      continue;
    }
    if (whole) continue;
    qsort(pc, (size_t)count, sizeof *pc, cmp_piece);
    long long next = 0;
    for (int k = 0; k < count && m->n < 8; k++) {
      const Piece *x = &pc[k];
      prog_path(a, sizeof a, dir, x->rank);
      if (x->dim != pc[0].dim || x->dense != pc[0].dense) {
        prog_path(b, sizeof b, dir, pc[0].rank);
        add(m, "model_param %s: %s shards it along dim %d of %lld rows, %s along dim %d of %lld", name, a, x->dim,
            x->dense, b, pc[0].dim, pc[0].dense);
        break;
      }
      long long end = x->start + x->len < x->dense ? x->start + x->len : x->dense;
      if (x->start > next) {
        add(m, "model_param %s: no rank owns rows [%lld, %lld) of dim %d (held by none, or only as a replica)", name,
            next, x->start, x->dim);
      } else if (x->start < next) {
        prog_path(b, sizeof b, dir, pc[k - 1].rank);
        add(m,
            "model_param %s: rows [%lld, %lld) of dim %d are owned by %s and %s (all but one must mark "
            "their shard replica)",
            name, x->start, next < end ? next : end, x->dim, b, a);
      }
      if (end > next) next = end;
    }
    if (next < pc[0].dense && m->n < 8)
      add(m, "model_param %s: no rank owns rows [%lld, %lld) of dim %d (held by none, or only as a replica)", name,
          next, pc[0].dense, pc[0].dim);
  }
  free(pc);
}

/* Rank 0's messages (m), to every rank: afterwards every rank has the same m. Collective. */
static void verdict(RtComm *c, Msgs *m) {
  uint64_t mlen = rt_comm_rank(c) == 0 && m->n ? m->used + 1 : 0;
  rt_comm_bcast(c, &mlen, sizeof mlen, 0);
  if (!mlen) return;
  char *text = malloc((size_t)mlen);
  if (!text) RT_INTERNAL("out of memory");
  if (rt_comm_rank(c) == 0) memcpy(text, m->err, (size_t)mlen);
  rt_comm_bcast(c, text, (size_t)mlen, 0);
  if (rt_comm_rank(c) != 0) {
    m->n = 0;
    m->used = 0;
    add(m, "%s", text);
  }
  if (!m->n) m->n = 1;
  free(text);
}

/* The comm entries of a schedule as int32: count, then per entry: line, nops, (kind, chunk, mb, slot)... */
static size_t pack_schedule(const RtProg *p, int32_t **out) {
  size_t n = 1;
  for (int e = 0; e < p->nentries; e++)
    if (p->sched[e].kind == RT_E_COMM) n += 2 + 4 * (size_t)p->sched[e].nops;
  int32_t *v = malloc(n * sizeof *v), *q = v + 1;
  if (!v) RT_INTERNAL("out of memory");
  v[0] = 0;
  for (int e = 0; e < p->nentries; e++) {
    const RtEntry *en = &p->sched[e];
    if (en->kind != RT_E_COMM) continue;
    v[0]++;
    *q++ = en->line;
    *q++ = en->nops;
    for (int i = 0; i < en->nops; i++) {
      *q++ = (int32_t)en->op[i].kind;
      *q++ = en->op[i].chunk;
      *q++ = en->op[i].mb;
      *q++ = en->op[i].slot;
    }
  }
  *out = v;
  return n * sizeof *v;
}

typedef struct {
  int line, nops;
  int kind[2], chunk[2], mb[2], slot[2];
} SimEntry;

/* The entry as the listing writes it (with chunks: every op's ":C"). */
static void entry_text(const SimEntry *e, int chunks, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "comm");
  for (int i = 0; i < e->nops && k < n; i++) {
    char c[16] = "";
    if (chunks) snprintf(c, sizeof c, ":%d", e->chunk[i]);
    k += (size_t)snprintf(buf + k, n - k, " %s%s %d %d", pp_boundary_name(e->kind[i]), c, e->mb[i], e->slot[i]);
  }
}

/* Rank 0: runs every rank's comm entries against each other (pp_sim.c: as if every message were a
 * rendezvous, a send completes only once its receive is posted, and the other way round; an entry
 * completes when all its ops have): every message must find its partner, and the ranks must all
 * get to their last entry. Programs with chunks of layers: with sends that never wait
 * (pp_sim_run_eager), the order their schedules are proven for. */
static void check_schedules(const Info *all, const unsigned char *blocks, const size_t *sizes, int n, const char *dir,
                            Msgs *m) {
  SimEntry **ent = calloc((size_t)n, sizeof *ent);
  PpSimBatch **bat = calloc((size_t)n, sizeof *bat);
  PpSimRank *rank = calloc((size_t)n, sizeof *rank);
  int *at = calloc((size_t)n, sizeof *at);
  unsigned char(*done)[2] = calloc((size_t)n, sizeof *done);
  if (!ent || !bat || !rank || !at || !done) RT_INTERNAL("out of memory");
  size_t pos = 0;
  for (int r = 0; r < n; r++) {
    const int32_t *v = (const int32_t *)(const void *)(blocks + pos);
    pos += sizes[r];
    int ne = v[0];
    ent[r] = calloc((size_t)(ne ? ne : 1), sizeof **ent);
    bat[r] = calloc((size_t)(ne ? ne : 1), sizeof **bat);
    if (!ent[r] || !bat[r]) RT_INTERNAL("out of memory");
    const int32_t *q = v + 1;
    for (int e = 0; e < ne; e++) {
      SimEntry *x = &ent[r][e];
      x->line = *q++;
      x->nops = bat[r][e].nops = *q++;
      for (int i = 0; i < x->nops; i++) {
        x->kind[i] = *q++;
        x->chunk[i] = *q++;
        x->mb[i] = *q++;
        x->slot[i] = *q++;
        int c = x->chunk[i] >= 0 && x->chunk[i] < all[r].nchunks ? x->chunk[i] : 0;
        RtMsg msg = rt_boundary_msg(x->kind[i], x->mb[i], all[r].vstage[c], all[r].cprev[c], all[r].cnext[c], all[r].pp,
                                    all[r].nchunks);
        bat[r][e].op[i] = (PpSimOp){.peer = msg.peer, .tag = msg.tag, .send = msg.send};
      }
    }
    rank[r] = (PpSimRank){bat[r], ne};
  }
  int eager = all[0].nchunks > 1;
  if (eager ? pp_sim_run_eager(rank, n, at, done) : pp_sim_run(rank, n, at, done)) {
    if (eager)
      add(m, "the schedules' messages cannot all complete (with sends that do not wait: each rank waits for a "
             "message its neighbour never sends, or a message is never received):");
    else
      add(m, "the schedules' messages cannot all complete (each rank waits for a message its neighbour "
             "does not post at that point, or never posts):");
    int stuck = 0;
    for (int r = 0; r < n && m->n < 9; r++) {
      if (at[r] >= rank[r].n) continue;
      char a[1024], t[200];
      prog_path(a, sizeof a, dir, r);
      entry_text(&ent[r][at[r]], eager, t, sizeof t);
      add(m, "  %s:%d: rank %d waits in '%s'", a, ent[r][at[r]].line, r, t);
      stuck++;
    }
    if (!stuck) add(m, "  every rank gets past its last entry, but a message sent is never received");
  }
  for (int r = 0; r < n; r++) free(ent[r]), free(bat[r]);
  free(ent);
  free(bat);
  free(rank);
  free(at);
  free(done);
}

int rt_mesh_check(RtComm *c, const RtProg *p, const char *dir, int *model_tied, char *err, size_t errlen) {
  int n = rt_comm_size(c);
  if (err && errlen) err[0] = 0;
  Msgs m = {err, errlen, 0, 0};
  Info mine, *all = malloc((size_t)n * sizeof *all);
  if (!all) RT_INTERNAL("out of memory");
  fill_info(p, &mine);
  rt_comm_allgather(c, &mine, all, sizeof mine);
  check_infos(all, n, dir, &m);
  *model_tied = 0;
  for (int r = 0; r < n; r++) *model_tied |= all[r].tied;

  /* message tags (2*MB + 0|1 without chunks; pp_boundary_tag) must fit the MPI library's tag range */
  int ub = rt_comm_tag_ub(c), nch = rt_prog_nchunks(p);
  int64_t top = 2 * ((int64_t)(p->local_microbatches - 1) * nch + nch - 1) + 1; /* the largest tag */
  if (!m.n && top > ub) {
    if (nch > 1)
      add(&m, "%d micro-batches of %d chunks need message tags up to %lld; this MPI library allows %d",
          p->local_microbatches, nch, (long long)top, ub);
    else
      add(&m, "%d micro-batches need message tags up to %lld; this MPI library allows %d", p->local_microbatches,
          (long long)top, ub);
  }

  /* ownership of the model's params (on rank 0, which has the model_param list all share) */
  if (!m.n && p->nmodel > 0) {
    size_t len = 1;
    for (int i = 0; i < p->nparams; i++) len += strlen(p->params[i].name) + 100;
    char *names = malloc(len), *q = names;
    if (!names) RT_INTERNAL("out of memory");
    if (p->dp_rank == 0 && p->cp_rank == 0)
      for (int i = 0; i < p->nparams; i++) {
        const RtParam *x = &p->params[i];
        if (!x->owned) continue;
        if (x->sharded)
          q += sprintf(q, "%s %d %lld %lld %lld %d\n", x->name, x->shard_dim, (long long)x->shard_start,
                       (long long)x->dims[x->shard_dim], (long long)x->shard_dense, x->shard_parts);
        else q += sprintf(q, "%s -1 0 0 0 1\n", x->name);
      }
    unsigned char *blocks = NULL;
    size_t *sizes = calloc((size_t)n, sizeof *sizes);
    if (!sizes) RT_INTERNAL("out of memory");
    char gerr[256] = "";
    int grc = rt_comm_gather(c, names, (size_t)(q - names), &blocks, sizes, gerr, sizeof gerr);
    if (rt_comm_rank(c) == 0) {
      if (grc) add(&m, "%s", gerr);
      else check_owners(p, blocks, sizes, n, dir, &m);
    }
    verdict(c, &m);
    free(blocks);
    free(sizes);
    free(names);
  }
  /* the pipeline's messages: every one matched, in an order that cannot deadlock */
  if (!m.n) {
    int32_t *sched = NULL;
    size_t len = pack_schedule(p, &sched);
    unsigned char *blocks = NULL;
    size_t *sizes = calloc((size_t)n, sizeof *sizes);
    if (!sizes) RT_INTERNAL("out of memory");
    char gerr[256] = "";
    int grc = rt_comm_gather(c, sched, len, &blocks, sizes, gerr, sizeof gerr);
    if (rt_comm_rank(c) == 0) {
      if (grc) add(&m, "%s", gerr);
      else check_schedules(all, blocks, sizes, n, dir, &m);
    }
    verdict(c, &m);
    free(blocks);
    free(sizes);
    free(sched);
  }
  free(all);
  if (m.n) return -1;
  return 0;
}
