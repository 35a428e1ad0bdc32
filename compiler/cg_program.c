/* cg_program.c — writes a stage: the program listing ppr executes, the kernels rendered to C,
 * OpenCL C and CUDA C, and the C kernels compiled to a shared object (cached by a hash of source +
 * command, each cache entry carrying its own size and hash). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ppc.h"

typedef struct Buf {
  char *s;
  size_t len, cap;
} Buf;

#define OUT(b, ...) cg_append(&(b)->s, &(b)->len, &(b)->cap, __VA_ARGS__)

uint64_t cg_fnv1a(const char *s, size_t n) {
  uint64_t h = 14695981039346656037ULL; /* FNV-1a 64 offset basis */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h;
}

_Static_assert(BC__COUNT == PP_NREGIONS, "BufClass is the arena's regions, in pp_regions.h's order");

/* A GEMM's operand types, A B C, after its fields where one is not f32 (none: all three f32). */
static void gemm_types(Buf *b, const Program *p, const Instr *in) {
  DType t[3];
  bool f32 = true;
  for (int k = 0; k < 3; k++) t[k] = p->vb[in->op[k].vb].dtype, f32 &= t[k] == PP_F32;
  if (!f32) OUT(b, " %s %s %s", pp_dtype_name(t[0]), pp_dtype_name(t[1]), pp_dtype_name(t[2]));
}

int64_t cg_extent(const Program *p, const Operand *o) {
  return o->kind == 'b' ? p->vb[o->vb].bytes - o->add : 0; /* from the operand's offset to its buffer's end */
}

/* One operand; w: the coordinates of the rank whose listing it is (a vocabulary shard's first row,
 * a context-parallel rank's first position). */
static void operand_x(Buf *b, const Program *p, const Coord *w, const Operand *o, bool extent) {
  switch (o->kind) {
  case 'b': {
    const VBuf *v = &p->vb[o->vb];
    int64_t add = o->add + o->zadd * cg_zero_rank(p->g, w); /* a ZeRO-1 shard: this rank's */
    if (v->cls == BC_SLOT) OUT(b, " $%lld", (long long)(v->off + add));
    else OUT(b, " @%lld", (long long)(p->region_off[v->cls] + v->off + add));
    if (extent) OUT(b, ":%lld", (long long)cg_extent(p, o)); /* the bytes a kernel may touch */
    break;
  }
  case 'f': OUT(b, " f:%.9g", o->f); break;
  case 'v': OUT(b, " i:%lld", (long long)(o->i * w->tp)); break; /* this rank's first vocabulary row */
  case 'c': OUT(b, " i:%lld", (long long)(o->i * w->cp)); break; /* this rank's first position, or element */
  case 'i': OUT(b, " i:%lld", (long long)o->i); break;
  case 's': OUT(b, " s:%s", o->s); break;
  default: OUT(b, " -"); break;
  }
}

static void operand(Buf *b, const Program *p, const Coord *w, const Operand *o) { operand_x(b, p, w, o, false); }

/* A name's chunk in a program with chunks of layers: ":C" (every chunk's, 0 too); "" without. */
static const char *chunk_sfx(const Program *p, int chunk, char *buf, size_t n) {
  if (p->nch > 1) snprintf(buf, n, ":%d", chunk);
  else buf[0] = 0;
  return buf;
}

/* g: the graph whose nodes the block's instructions implement (its chunk's; the rank's) */
static void comment(Buf *b, const Graph *g, const Instr *in) {
  if (in->node < 0) {
    if (in->why) OUT(b, "    # %s", in->why);
    OUT(b, "\n");
    return;
  }
  const IrNode *n = &g->nodes[in->node];
  OUT(b, "    # %%%d %s", in->node, ir_ops[n->op].name);
  if (n->layer >= 0) OUT(b, " L%d", n->layer);
  if (n->var && !n->bwd) OUT(b, " %s", n->var);
  if (n->gparam >= 0) OUT(b, " -> grad %s", g->params[n->gparam].name);
  if (in->why && in->kind != I_ALLREDUCE) OUT(b, ": %s", in->why);
  OUT(b, "\n");
}

static void block(Buf *b, const Program *p, const Graph *gr, int chunk, const Coord *w, const Block *blk) {
  char cs[16];
  OUT(b, "block %s%s%s\n", blk->name, blk == &p->opt || blk == &p->refresh ? "" : chunk_sfx(p, chunk, cs, sizeof cs),
      blk == &p->opt && p->opt_clears_grads ? " " PP_OPT_CLEARS_GRADS : "");
  for (int i = 0; i < blk->n; i++) {
    const Instr *in = &blk->ins[i];
    OUT(b, "  ");
    switch (in->kind) {
    case I_KERNEL: {
      const Kernel *k = p->kernels[in->kernel];
      KGeom g = kir_geom(k);
      OUT(b, "kernel %s <<<%lld,%d,%lld>>>", k->name, (long long)g.grid, g.block, (long long)g.local);
      for (int a = 0; a < in->nop; a++) operand_x(b, p, w, &in->op[a], true);
      break;
    }
    case I_GEMM:
      OUT(b, "gemm %c %c %lld %lld %lld %g", in->ta, in->tb, (long long)in->m, (long long)in->n, (long long)in->k,
          in->alpha);
      operand(b, p, w, &in->op[0]);
      OUT(b, " %lld %lld", (long long)in->lda, (long long)in->sa);
      operand(b, p, w, &in->op[1]);
      OUT(b, " %lld %lld %g", (long long)in->ldb, (long long)in->sb, in->beta);
      operand(b, p, w, &in->op[2]);
      OUT(b, " %lld %lld %lld", (long long)in->ldc, (long long)in->sc, (long long)in->batch);
      gemm_types(b, p, in);
      if (in->tri != PP_TRI_NONE) OUT(b, " tri:%s", pp_tri_name(in->tri));
      if (in->epi != PP_EPI_NONE) OUT(b, " epi:%s", pp_epi_name(in->epi));
      break;
    case I_BATCH:
      OUT(b, "batch");
      operand(b, p, w, &in->op[0]);
      operand(b, p, w, &in->op[1]);
      break;
    case I_ZERO:
      OUT(b, "zero");
      operand(b, p, w, &in->op[0]);
      OUT(b, " %lld", (long long)in->bytes);
      break;
    case I_SEED:
      OUT(b, "seed");
      operand(b, p, w, &in->op[0]);
      OUT(b, " %.9g", in->value);
      break;
    case I_LOSS:
      OUT(b, "loss");
      operand(b, p, w, &in->op[0]);
      break;
    case I_LOGITS: /* B S VLOCAL VSTART */
      OUT(b, "logits");
      operand(b, p, w, &in->op[0]);
      for (int a = 1; a < 5; a++)
        OUT(b, " %lld", (long long)(in->op[a].kind == 'v' ? in->op[a].i * w->tp : in->op[a].i));
      if (p->vb[in->op[0].vb].dtype != PP_F32) OUT(b, " %s", pp_dtype_name(p->vb[in->op[0].vb].dtype));
      break;
    case I_GRADNORM: {
      const Kernel *k = p->kernels[in->kernel];
      KGeom g = kir_geom(k);
      OUT(b, "grad_norm %s <<<%lld,%d,%lld>>>", k->name, (long long)g.grid, g.block, (long long)g.local);
      operand_x(b, p, w, &in->op[0], true);
      operand_x(b, p, w, &in->op[1], true);
      break;
    }
    case I_ALLREDUCE:
      OUT(b, "allreduce %s %s", in->group, in->redop);
      operand(b, p, w, &in->op[0]);
      /* bytes -1: the gradients, the params' layout (a tied embedding's gradient after it is zero then) */
      OUT(b, " %lld", (long long)(in->bytes >= 0 ? in->bytes : p->region_bytes[BC_PARAM]));
      if (p->vb[in->op[0].vb].dtype != PP_F32) OUT(b, " %s", pp_dtype_name(p->vb[in->op[0].vb].dtype));
      if (in->why) OUT(b, "    # %s\n", in->why);
      else comment(b, gr, in);
      continue;
    case I_ALLGATHER:
    case I_REDUCE_SCATTER:
      OUT(b, "%s %s", in->kind == I_ALLGATHER ? "allgather" : "reduce_scatter", in->group);
      operand(b, p, w, &in->op[0]);
      operand(b, p, w, &in->op[1]);
      OUT(b, " %lld", (long long)in->bytes);
      if (p->vb[in->op[0].vb].dtype != PP_F32) OUT(b, " %s", pp_dtype_name(p->vb[in->op[0].vb].dtype));
      break;
    case I_ALLREDUCE_TIED:
      OUT(b, "allreduce_tied");
      operand(b, p, w, &in->op[0]);
      OUT(b, " %lld", (long long)in->bytes);
      break;
    }
    comment(b, gr, in);
  }
  OUT(b, "end\n\n");
}

static const char *init_name(const IrParam *q, char *buf, size_t n) {
  if (q->init == INIT_ZEROS) return "zeros";
  if (q->init == INIT_ONES) return "ones";
  snprintf(buf, n, "normal %.9g", q->std);
  return buf;
}

/* The listing body: everything after the hash line. */
static void schedule(Buf *b, const Program *p, const Sched *s, int stage) {
  const StageSched *st = &s->st[stage];
  char cs[2][16];
  OUT(b, "schedule %s\n%s", s->kind, s->fwd_only ? "" : "  zero_grads\n");
  for (int i = 0; i < st->n; i++) {
    const SchedEntry *e = &st->e[i];
    if (e->kind != SE_COMM) {
      OUT(b, "  %c%s %d %d\n", sched_letter(e->kind), chunk_sfx(p, e->chunk, cs[0], sizeof cs[0]), e->mb, e->slot);
      continue;
    }
    OUT(b, "  comm");
    for (int k = 0; k < e->nops; k++)
      OUT(b, " %s%s %d %d", pp_boundary_name(e->ops[k].kind), chunk_sfx(p, e->ops[k].chunk, cs[k], sizeof cs[k]),
          e->ops[k].mb, e->ops[k].slot);
    OUT(b, "\n");
  }
  OUT(b, "%send\n", s->fwd_only ? "" : "  OPT\n");
}

/* The rank at w on stage pp: a listing's own, and its pipeline neighbours (the same dp, cp and tp on
 * the previous and next stage); rank = ((dp·pp + stage)·cp + cp_rank)·tp + tp_rank. */
int cg_rank(const Config *c, const Coord *w, int pp) {
  return (int)(((w->dp * c->pp + pp) * c->cp + w->cp) * c->tp + w->tp);
}

/* replica: another rank holds the same values (a pipeline copy, a replicated tensor on TP rank > 0,
 * a shared kv head, any data-parallel replica but the first, any context-parallel rank but the
 * first): it counts once in the gradient norm and is saved once */
bool cg_replica(const IrParam *q, const Coord *w) {
  return q->copy || (q->shard_dim < 0 && w->tp != 0) || (q->shard_rep > 1 && w->tp % q->shard_rep) || w->dp != 0 ||
         w->cp != 0;
}

/* The listing's replica flag: with ZeRO-1 every rank of the dp x cp group holds a shard of each
 * parameter's summed gradient, so none of them is a replica for the gradient norm (ppr saves from
 * dp rank 0, cp rank 0 alone either way) */
bool cg_listed_replica(const Graph *g, const IrParam *q, const Coord *w) {
  return cg_replica(q, g->cfg.zero ? &(Coord){.tp = w->tp} : w);
}

int cg_zero_rank(const Graph *g, const Coord *w) { return g->cfg.zero ? (int)(w->dp * g->cfg.cp + w->cp) : 0; }

/* What the listing says of a kernel file: its bytes and FNV-1a hash; '- -' for none. */
static void file_sum_out(Buf *b, const FileSum *f) {
  if (f->bytes < 0) OUT(b, " - -");
  else OUT(b, " %lld %016llx", (long long)f->bytes, (unsigned long long)f->hash);
}

static void listing_body(Buf *b, const Program *p, const Sched *s, int rank, const Coord *w, const StageFiles *f) {
  const Graph *g = p->g;
  const Config *c = &g->cfg;
  char sb[96], ib[48];
  int stage = g->stage;
  OUT(b, "model %s\n", g->model);
  OUT(b, "mesh tp %lld pp %lld dp %lld", (long long)c->tp, (long long)c->pp, (long long)c->dp);
  if (c->cp > 1) OUT(b, " cp %lld", (long long)c->cp); /* without: cp 1 */
  OUT(b, "\nrank %d stage %d tp_rank %d dp_rank %d", rank, stage, w->tp, w->dp);
  if (c->cp > 1) OUT(b, " cp_rank %d", w->cp);
  OUT(b, "\npeers prev %d next %d\n", stage > 0 ? cg_rank(c, w, stage - 1) : -1,
      stage + 1 < c->pp ? cg_rank(c, w, stage + 1) : -1);
  /* with chunks of layers, each chunk's virtual stage and the ranks holding the ones around it */
  for (int k = 0; p->nch > 1 && k < p->nch; k++) {
    int v = sched_vstage(s, stage, k), nv = s->pp * s->V;
    OUT(b, "chunk %d vstage %d prev %d next %d\n", k, v, v > 0 ? cg_rank(c, w, sched_rank_of(s, v - 1)) : -1,
        v + 1 < nv ? cg_rank(c, w, sched_rank_of(s, v + 1)) : -1);
  }
  OUT(b, "step micro_batch %lld seq %lld microbatches %lld schedule %s\n", (long long)c->micro_batch, (long long)c->seq,
      (long long)c->microbatches, c->schedule);
  OUT(b, "vocab %lld", (long long)g->vocab);
  if (g->loss_masked) OUT(b, " ignore_index %lld", (long long)g->ignore_index);
  OUT(b, "\n");
  OUT(b, "kernels %s %016llx\n", f->name, (unsigned long long)f->hash);
  /* each kernel file's size and hash, which ppr checks before it loads the file; '- -' for none
   * (--emit program writes no files; a ppc without NVRTC no cubin) */
  OUT(b, "object so");
  file_sum_out(b, &f->so);
  OUT(b, "\nobject cl");
  file_sum_out(b, &f->cl);
  OUT(b, "\ncuda %s", f->arch);
  file_sum_out(b, &f->cubin);
  file_sum_out(b, &f->ptx);
  OUT(b, "\n");
  /* how checkpoint files name the params (ppr --init, --save): the optional prefix, the config */
  if (c->ckpt_prefix[0]) OUT(b, "checkpoint_prefix %s\n", c->ckpt_prefix);
  char *hf = NULL;
  Loc hf_at;
  if (!ir_config_hf_json(g->src, &hf, &hf_at) && hf) OUT(b, "hf_config %s\n", hf);
  free(hf);
  OUT(b, "\n");
  for (int r = 0; r < BC__COUNT; r++) {
    if (r == BC_COPY && !p->region_bytes[r]) continue; /* fp32: no working copies */
    OUT(b, "region %-9s %lld %lld", pp_region_name(r), (long long)p->region_off[r], (long long)p->region_bytes[r]);
    if (r == BC_SLOT) OUT(b, " %d", p->nslots);
    OUT(b, "\n");
  }
  /* ZeRO-1: the group's size and this rank's place in it; per part of the parameters' regions, its
   * start in the params region, its elements (padded to Z shards), a shard's, and where this
   * rank's shard of its moments starts in adam_m (adam_v alike) */
  if (mem_zero_ranks(p) > 1) {
    OUT(b, "zero %d %d\n", mem_zero_ranks(p), cg_zero_rank(p->g, w));
    for (int k = 0; k < 2; k++) {
      if (p->zview[k][0] < 0) continue;
      const VBuf *v = &p->vb[p->zview[k][0]], *m = &p->vb[p->zview[k][1]];
      OUT(b, "zero_part @%lld %lld %lld @%lld\n", (long long)(p->region_off[BC_PARAM] + v->off),
          (long long)ir_shape_numel(&v->shape), (long long)p->zshard[k],
          (long long)(p->region_off[BC_ADAM_M] + m->off));
    }
  }
  OUT(b, "arena %lld\n", (long long)p->arena);
  OUT(b, "\n");
  char cs[16];
  for (int ch = 0; ch < p->nch; ch++)
    for (int k = 0; k < PP_NBND; k++) {
      int vb = p->ch[ch].bnd[k];
      if (vb < 0) continue;
      OUT(b, "boundary %s%s", pp_boundary_name(k), chunk_sfx(p, ch, cs, sizeof cs));
      operand(b, p, w, &(Operand){.kind = 'b', .vb = vb});
      OUT(b, " %lld %s", (long long)p->vb[vb].bytes, ir_shape_str(&p->vb[vb].shape, sb, sizeof sb));
      OUT(b, "%s%s\n", p->vb[vb].dtype != PP_F32 ? " " : "",
          p->vb[vb].dtype != PP_F32 ? pp_dtype_name(p->vb[vb].dtype) : "");
    }
  for (int i = 0; i < p->nvb; i++) {
    const VBuf *v = &p->vb[i];
    if (v->cls != BC_PARAM || v->view >= 0) continue;
    const IrParam *q = &g->params[v->param];
    bool replica = cg_listed_replica(g, q, w);
    OUT(b, "param %d %s f32 %s @%lld init %s decay %d%s%s%s%s", v->param, q->name,
        ir_shape_str(&q->shape, sb, sizeof sb), (long long)(p->region_off[BC_PARAM] + v->off),
        init_name(q, ib, sizeof ib), ir_param_decays(q), q->tied ? " tied" : "", q->shared ? " shared" : "",
        q->copy ? " copy" : "", replica ? " replica" : "");
    if (q->shard_dim >= 0) { /* rows [start, start+len) of dimension dim; past the dense size: padding */
      int64_t len = q->shape.d[q->shard_dim], block = len / q->shard_parts; /* parts: start inside each part */
      OUT(b, " shard %d %lld %lld %lld", q->shard_dim, (long long)((w->tp / q->shard_rep) * block), (long long)len,
          (long long)q->dense_len);
      if (q->shard_parts > 1) OUT(b, " parts %d", q->shard_parts);
    }
    OUT(b, "\n");
  }
  /* every dense parameter of the model, so any rank can check a checkpoint's names and shapes */
  for (int i = 0; i < p->model->nparams; i++)
    OUT(b, "model_param %s %s\n", p->model->params[i].name, ir_shape_str(&p->model->params[i].shape, sb, sizeof sb));
  OUT(b, "\n");
  for (int i = 0; i < p->nvb; i++) {
    const VBuf *v = &p->vb[i];
    if ((v->cls != BC_SLOT && v->cls != BC_SCRATCH && v->cls != BC_COPY) || v->view >= 0) continue;
    OUT(b, "buffer %s %s %s %c%lld%s\n", v->cls == BC_COPY ? g->params[v->param].name : v->name,
        pp_dtype_name(v->dtype), ir_shape_str(&v->shape, sb, sizeof sb), v->cls == BC_SLOT ? '$' : '@',
        (long long)(v->cls == BC_SLOT ? v->off : p->region_off[v->cls] + v->off),
        v->cls == BC_SLOT   ? " saved"
        : v->cls == BC_COPY ? " working"
                            : "");
  }
  OUT(b, "\n");
  for (int k = 0; k < p->nch; k++) {
    const ProgChunk *ch = &p->ch[k];
    block(b, p, ch->g, k, w, &ch->fwd);
    if (!s->fwd_only) block(b, p, ch->g, k, w, &ch->bwd); /* a generation program: the forward alone */
    if (s->split) block(b, p, ch->g, k, w, &ch->wgt);     /* the W entries' block */
  }
  if (!s->fwd_only) block(b, p, p->g, 0, w, &p->opt);
  if (!s->fwd_only && p->refresh.n) block(b, p, p->g, 0, w, &p->refresh);
  schedule(b, p, s, stage);
}

/* Write through a temporary and rename: a reader never sees half a file. */
static int write_file_q(const char *path, const char *s, size_t n, bool quiet) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    if (!quiet) fprintf(stderr, "ppc: error: cannot write '%s': %s\n", tmp, strerror(errno));
    return 1;
  }
  size_t w = fwrite(s, 1, n, f);
  if (fclose(f) || w != n || rename(tmp, path)) {
    if (!quiet) fprintf(stderr, "ppc: error: cannot write '%s'\n", path);
    remove(tmp);
    return 1;
  }
  return 0;
}

int cg_write_file(const char *path, const char *s, size_t n) { return write_file_q(path, s, n, false); }
#define write_file cg_write_file

void cg_mkdir_p(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s", dir);
  for (char *c = p + 1; *c; c++)
    if (*c == '/') {
      *c = 0;
      mkdir(p, 0777);
      *c = '/';
    }
  mkdir(p, 0777);
}

/* The whole file into *b (b->s NUL-terminated); 0, or 1 when it cannot be read (nothing printed). */
static int read_all(const char *path, Buf *b) {
  *b = (Buf){0};
  FILE *f = fopen(path, "rb");
  if (!f) return 1;
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (b->len + n + 1 > b->cap) {
      b->cap = (b->len + n + 1) * 2;
      b->s = xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, chunk, n);
    b->len += n;
  }
  int bad = ferror(f);
  fclose(f);
  if (!b->s) b->s = xmalloc(1);
  b->s[b->len] = 0;
  if (bad) {
    free(b->s);
    *b = (Buf){0};
    return 1;
  }
  return 0;
}

static uint64_t get_le64(const char *s) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)(unsigned char)s[i] << (8 * i);
  return v;
}

static void put_le64(char *s, uint64_t v) {
  for (int i = 0; i < 8; i++) s[i] = (char)(v >> (8 * i));
}

/* A cache entry: the payload's size and its FNV-1a hash (8 bytes each, little-endian), then the
 * payload. An entry that does not match its own header (truncated, overwritten, half-written) is
 * damaged: it is compiled again and replaced, never copied. true with the payload in *out. */
#define CACHE_HEADER 16

static bool cache_get(const char *path, Buf *out) {
  Buf e;
  if (read_all(path, &e)) return false;
  bool ok = e.len >= CACHE_HEADER && get_le64(e.s) == e.len - CACHE_HEADER &&
            get_le64(e.s + 8) == cg_fnv1a(e.s + CACHE_HEADER, e.len - CACHE_HEADER);
  if (!ok) {
    free(e.s);
    return false;
  }
  memmove(e.s, e.s + CACHE_HEADER, e.len - CACHE_HEADER);
  e.len -= CACHE_HEADER;
  *out = e;
  return true;
}

/* Best effort, through a temporary and rename: a cache that cannot be written only costs time. */
static void cache_put(const char *cache, const char *path, const char *data, size_t len) {
  char *e = xmalloc(len + CACHE_HEADER);
  put_le64(e, len);
  put_le64(e + 8, cg_fnv1a(data, len));
  memcpy(e + CACHE_HEADER, data, len);
  cg_mkdir_p(cache);
  write_file_q(path, e, len + CACHE_HEADER, true);
  free(e);
}

static int run(char *const argv[]) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execvp(argv[0], argv);
    _exit(127);
  }
  int st;
  if (waitpid(pid, &st, 0) < 0) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A file's size and hash as the listing names them. */
static FileSum file_sum(const char *s, size_t n) { return (FileSum){.bytes = (int64_t)n, .hash = cg_fnv1a(s, n)}; }

/* The C kernels as a shared object, from the cache when the same source was compiled before and
 * the entry is whole (cache_get); the size and hash of the object written in *sum. */
static int compile_so(const char *dir, const char *csrc_path, const char *so_path, const Buf *src, const char *cache,
                      FileSum *sum) {
  const char *cc = getenv("PPC_CC") ? getenv("PPC_CC") : "cc";
  const char *flags = getenv("PPC_CFLAGS") ? getenv("PPC_CFLAGS") : PPC_KERNEL_CFLAGS;
  Buf key = {0};
  /* "so 2": entries with a size-and-hash header, never confused with the bare objects of before */
  OUT(&key, "so 2|%s|%s|%s", cc, flags, src->s);
  uint64_t h = cg_fnv1a(key.s, key.len);
  free(key.s);
  char cached[4200] = "";
  if (cache && *cache) {
    snprintf(cached, sizeof cached, "%s/%016llx.so", cache, (unsigned long long)h);
    Buf e;
    if (cache_get(cached, &e)) {
      int rc = write_file(so_path, e.s, e.len);
      *sum = file_sum(e.s, e.len);
      free(e.s);
      return rc;
    }
  }
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s/.kernels.%d.so", dir, (int)getpid());
  /* split the flags into words */
  char fl[512];
  snprintf(fl, sizeof fl, "%s", flags);
  char *argv[40];
  int na = 0;
  argv[na++] = (char *)cc;
  for (char *t = strtok(fl, " "); t && na < 30; t = strtok(NULL, " ")) argv[na++] = t;
  argv[na++] = "-shared";
  argv[na++] = "-fPIC";
  argv[na++] = "-o";
  argv[na++] = tmp;
  argv[na++] = (char *)csrc_path;
  argv[na++] = "-lm";
  argv[na] = NULL;
  int rc = run(argv);
  if (rc != 0) {
    fprintf(stderr, "ppc: error: compiling the C kernels failed (%s %s ... %s): exit %d\n", cc, flags, csrc_path, rc);
    remove(tmp);
    return 1;
  }
  if (rename(tmp, so_path)) {
    fprintf(stderr, "ppc: error: cannot write '%s': %s\n", so_path, strerror(errno));
    return 1;
  }
  /* the object as the compiler wrote it: its size and hash for the listing, and the cache entry */
  Buf o;
  if (read_all(so_path, &o)) {
    fprintf(stderr, "ppc: error: cannot read back '%s' to name its size and hash in the listing: %s\n", so_path,
            strerror(errno));
    return 1;
  }
  *sum = file_sum(o.s, o.len);
  if (cached[0]) cache_put(cache, cached, o.s, o.len);
  free(o.s);
  return 0;
}

void cg_kernel_source(const Program *p, Lang lang, char **out, size_t *len, size_t *cap) {
  cg_render_prelude(lang, out, len, cap);
  for (int i = 0; i < p->nk; i++) cg_render_kernel(p->kernels[i], lang, out, len, cap);
}

static void kernel_sources(const Program *p, Lang lang, Buf *b) { cg_kernel_source(p, lang, &b->s, &b->len, &b->cap); }

/* Every stage's kernels in each language, next to its listings: kernels_sN.c (compiled to
 * kernels_sN.so), kernels_sN.cl and kernels_sN.cu (compiled by NVRTC to kernels_sN.cubin and .ptx
 * when ppc has NVRTC). Each carries the hash of the C source, which the listing's `kernels` line
 * names: the C and CUDA as a symbol, the OpenCL C as its first line. The size and hash of each file
 * the listings name (the shared object, the OpenCL C, the cubin and the PTX) as it is written, in
 * *out. dir NULL: only the name and the source's hash (--emit program). */
int cg_write_kernels(const char *dir, const Program *p, const char *cache, const char *arch, StageFiles *out) {
  char path[4200], so[4200];
  Buf c = {0}, cl = {0}, cu = {0};
  int rc = 1;
  *out = (StageFiles){.arch = arch, .so.bytes = -1, .cl.bytes = -1, .cubin.bytes = -1, .ptx.bytes = -1};
  snprintf(out->name, sizeof out->name, p->g->infer ? PP_GEN_KERNELS_FMT : PP_KERNELS_FMT, p->g->stage);
  kernel_sources(p, LANG_C, &c);
  out->hash = cg_fnv1a(c.s, c.len);
  unsigned long long h = (unsigned long long)out->hash;
  OUT(&c, "const char ppk_source_hash[] = \"%016llx\";\n", h);
  OUT(&cl, "/* ppk_source_hash %016llx */\n", h);
  kernel_sources(p, LANG_OPENCL, &cl);
  kernel_sources(p, LANG_CUDA, &cu);
  OUT(&cu, "extern \"C\" __device__ const char ppk_source_hash[] = \"%016llx\";\n", h);
  if (!dir) {
    rc = 0;
    goto out;
  }
  snprintf(path, sizeof path, "%s/%s.c", dir, out->name);
  snprintf(so, sizeof so, "%s/%s.so", dir, out->name);
  if (write_file(path, c.s, c.len) || compile_so(dir, path, so, &c, cache, &out->so)) goto out;
  snprintf(path, sizeof path, "%s/%s.cl", dir, out->name);
  if (write_file(path, cl.s, cl.len)) goto out;
  out->cl = file_sum(cl.s, cl.len);
  snprintf(path, sizeof path, "%s/%s.cu", dir, out->name);
  if (write_file(path, cu.s, cu.len)) goto out;
  if (cg_nvrtc_available() && cg_nvrtc_files(dir, out->name, cu.s, cu.len, arch, cache, &out->cubin, &out->ptx))
    goto out;
  rc = 0;
out:
  free(c.s);
  free(cl.s);
  free(cu.s);
  return rc;
}

uint64_t cg_fnv1a_more(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h;
}

uint64_t cg_listing_fold(uint64_t id, const Program *p, const Sched *s, const Coord *w, const StageFiles *f) {
  Buf body = {0};
  listing_body(&body, p, s, cg_rank(&p->g->cfg, w, p->g->stage), w, f);
  id = cg_fnv1a_more(id, body.s, body.len);
  free(body.s);
  return id;
}

/* rankR.prog, the listing of the rank at w of the stage whose kernels f names; dir NULL: to stdout. */
int cg_write(const char *dir, const Program *p, const Sched *s, const Coord *w, const StageFiles *f,
             uint64_t compile_id) {
  Buf body = {0}, all = {0};
  int rank = cg_rank(&p->g->cfg, w, p->g->stage);
  OUT(&body, "compile %016llx\n", (unsigned long long)compile_id);
  listing_body(&body, p, s, rank, w, f);
  OUT(&all, "ppr-program %d\ncompiler ppc %s\nhash %016llx\n", PP_PROG_VERSION, PPC_VERSION,
      (unsigned long long)cg_fnv1a(body.s, body.len));
  OUT(&all, "%s", body.s);
  int rc;
  if (!dir) { /* --emit program */
    rc = fputs(all.s, stdout) < 0;
  } else {
    char path[4200];
    int n = snprintf(path, sizeof path, "%s/", dir);
    snprintf(path + n, sizeof path - (size_t)n, p->g->infer ? PP_GEN_PROG_FMT : PP_PROG_FMT, rank);
    rc = write_file(path, all.s, all.len);
  }
  free(body.s);
  free(all.s);
  return rc;
}
