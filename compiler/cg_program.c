/* cg_program.c — writes a stage: the program listing ppr executes, the kernels rendered to C and
 * CUDA, and the C kernels compiled to a shared object (cached by a hash of source + command). */
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

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 14695981039346656037ULL; /* FNV-1a 64 offset basis */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h;
}

static const char *region_name[6] = {"params", "grads", "adam_m", "adam_v", "slots", "scratch"};

static void operand(Buf *b, const Program *p, const Operand *o) {
  switch (o->kind) {
  case 'b': {
    const VBuf *v = &p->vb[o->vb];
    if (v->cls == BC_SLOT) OUT(b, " $%lld", (long long)(v->off + o->add));
    else OUT(b, " @%lld", (long long)(p->region_off[v->cls] + v->off + o->add));
    break;
  }
  case 'f': OUT(b, " f:%.9g", o->f); break;
  case 'i': OUT(b, " i:%lld", (long long)o->i); break;
  case 's': OUT(b, " s:%s", o->s); break;
  default: OUT(b, " -"); break;
  }
}

static void comment(Buf *b, const Program *p, const Instr *in) {
  if (in->node < 0) {
    OUT(b, "\n");
    return;
  }
  const IrNode *n = &p->g->nodes[in->node];
  OUT(b, "    # %%%d %s", in->node, ir_ops[n->op].name);
  if (n->layer >= 0) OUT(b, " L%d", n->layer);
  if (n->var && !n->bwd) OUT(b, " %s", n->var);
  if (n->gparam >= 0) OUT(b, " -> grad %s", p->g->params[n->gparam].name);
  OUT(b, "\n");
}

static void block(Buf *b, const Program *p, const Block *blk) {
  OUT(b, "block %s\n", blk->name);
  for (int i = 0; i < blk->n; i++) {
    const Instr *in = &blk->ins[i];
    OUT(b, "  ");
    switch (in->kind) {
    case I_KERNEL:
      OUT(b, "kernel %s", p->kernels[in->kernel]->name);
      for (int k = 0; k < in->nop; k++) operand(b, p, &in->op[k]);
      break;
    case I_GEMM:
      OUT(b, "gemm %c %c %lld %lld %lld %g", in->ta, in->tb, (long long)in->m, (long long)in->n, (long long)in->k,
          in->alpha);
      operand(b, p, &in->op[0]);
      OUT(b, " %lld %lld", (long long)in->lda, (long long)in->sa);
      operand(b, p, &in->op[1]);
      OUT(b, " %lld %lld %g", (long long)in->ldb, (long long)in->sb, in->beta);
      operand(b, p, &in->op[2]);
      OUT(b, " %lld %lld %lld", (long long)in->ldc, (long long)in->sc, (long long)in->batch);
      break;
    case I_BATCH:
      OUT(b, "batch");
      operand(b, p, &in->op[0]);
      operand(b, p, &in->op[1]);
      break;
    case I_ZERO:
      OUT(b, "zero");
      operand(b, p, &in->op[0]);
      OUT(b, " %lld", (long long)in->bytes);
      break;
    case I_SEED:
      OUT(b, "seed");
      operand(b, p, &in->op[0]);
      OUT(b, " %.9g", in->value);
      break;
    case I_LOSS:
      OUT(b, "loss");
      operand(b, p, &in->op[0]);
      break;
    case I_GRADNORM: OUT(b, "grad_norm"); break;
    }
    comment(b, p, in);
  }
  OUT(b, "end\n\n");
}

static const char *init_name(const IrParam *q, char *buf, size_t n) {
  if (q->init == INIT_ZEROS) return "zeros";
  if (q->init == INIT_ONES) return "ones";
  snprintf(buf, n, "normal %.9g", q->std);
  return buf;
}

/* A parameter read both by an embedding and by a linear/matmul: the tied head. */
static bool tied(const Graph *g, int param) {
  int uses = 0;
  for (int i = 0; i < g->nfwd; i++)
    for (int k = 0; k < g->nodes[i].nin; k++)
      if (g->nodes[i].in[k] == g->params[param].node)
        uses |= g->nodes[i].op == OP_EMBEDDING ? 1 : (g->nodes[i].op == OP_LINEAR || g->nodes[i].op == OP_MATMUL) ? 2 : 0;
  return uses == 3;
}

/* The listing body: everything after the hash line. */
static void listing_body(Buf *b, const Program *p, const char *so_name, uint64_t src_hash) {
  const Graph *g = p->g;
  const Config *c = &g->cfg;
  char sb[96], ib[48];
  OUT(b, "model %s\n", g->model);
  OUT(b, "mesh tp %lld pp %lld dp %lld\n", (long long)c->tp, (long long)c->pp, (long long)c->dp);
  OUT(b, "rank 0 stage 0 tp_rank 0 dp_rank 0\n");
  OUT(b, "step micro_batch %lld seq %lld microbatches %lld schedule %s\n", (long long)c->micro_batch,
      (long long)c->seq, (long long)c->microbatches, c->schedule);
  int64_t vocab = 0;
  for (int i = 0; i < g->nfwd; i++)
    if (g->nodes[i].op == OP_EMBEDDING) vocab = g->nodes[g->nodes[i].in[1]].shape.d[0];
  OUT(b, "vocab %lld\n", (long long)vocab);
  OUT(b, "kernels %s %016llx\n\n", so_name, (unsigned long long)src_hash);
  for (int r = 0; r < 6; r++) {
    OUT(b, "region %-8s %lld %lld", region_name[r], (long long)p->region_off[r], (long long)p->region_bytes[r]);
    if (r == BC_SLOT) OUT(b, " %d", p->nslots);
    OUT(b, "\n");
  }
  OUT(b, "arena %lld\n\n", (long long)p->arena);
  for (int i = 0; i < p->nvb; i++) {
    const VBuf *v = &p->vb[i];
    if (v->cls != BC_PARAM) continue;
    const IrParam *q = &g->params[v->param];
    OUT(b, "param %d %s f32 %s @%lld init %s decay %d%s\n", v->param, q->name, shape_str(&q->shape, sb, sizeof sb),
        (long long)(p->region_off[BC_PARAM] + v->off), init_name(q, ib, sizeof ib), q->shape.nd >= 2,
        tied(g, v->param) ? " tied" : "");
  }
  OUT(b, "\n");
  for (int i = 0; i < p->nvb; i++) {
    const VBuf *v = &p->vb[i];
    if (v->cls != BC_SLOT && v->cls != BC_SCRATCH) continue;
    OUT(b, "buffer %s %s %s %c%lld%s\n", v->name, v->is_int ? "i32" : "f32", shape_str(&v->shape, sb, sizeof sb),
        v->cls == BC_SLOT ? '$' : '@', (long long)(v->cls == BC_SLOT ? v->off : p->region_off[BC_SCRATCH] + v->off),
        v->cls == BC_SLOT ? " saved" : "");
  }
  OUT(b, "\n");
  block(b, p, &p->fwd);
  block(b, p, &p->bwd);
  block(b, p, &p->opt);
  OUT(b, "schedule\n  zero_grads\n");
  for (int m = 0; m < c->microbatches; m++) OUT(b, "  F %d 0\n  B %d 0\n", m, m);
  OUT(b, "  OPT\nend\n");
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

static int write_file(const char *path, const char *s, size_t n) { return write_file_q(path, s, n, false); }

static void mkdir_p(const char *dir) {
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

static int copy_file(const char *from, const char *to, bool quiet) {
  FILE *f = fopen(from, "rb");
  if (!f) return 1;
  Buf b = {0};
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (b.len + n + 1 > b.cap) {
      b.cap = (b.len + n + 1) * 2;
      b.s = xrealloc(b.s, b.cap);
    }
    memcpy(b.s + b.len, chunk, n);
    b.len += n;
  }
  fclose(f);
  int rc = write_file_q(to, b.s ? b.s : "", b.len, quiet);
  free(b.s);
  return rc;
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

/* The C kernels as a shared object, from the cache when the same source was compiled before. */
static int compile_so(const char *dir, const char *csrc_path, const char *so_path, const Buf *src, const char *cache) {
  const char *cc = getenv("PPC_CC") ? getenv("PPC_CC") : "cc";
  const char *flags = getenv("PPC_CFLAGS") ? getenv("PPC_CFLAGS") : "-O3 -march=native -fopenmp";
  Buf key = {0};
  OUT(&key, "%s|%s|%s", cc, flags, src->s);
  uint64_t h = fnv1a(key.s, key.len);
  free(key.s);
  char cached[4200] = "";
  if (cache && *cache) {
    snprintf(cached, sizeof cached, "%s/%016llx.so", cache, (unsigned long long)h);
    if (access(cached, R_OK) == 0 && copy_file(cached, so_path, false) == 0) return 0;
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
  if (cached[0]) {
    mkdir_p(cache);
    copy_file(so_path, cached, true); /* best effort: a cache that cannot be written only costs time */
  }
  return 0;
}

static void kernel_sources(const Program *p, Lang lang, Buf *b) {
  cg_render_prelude(lang, &b->s, &b->len, &b->cap);
  for (int i = 0; i < p->nk; i++) cg_render_kernel(p->kernels[i], lang, &b->s, &b->len, &b->cap);
}

int cg_write(const char *dir, const Program *p, const char *cache) {
  char path[4200], so[4200];
  Buf c = {0}, cu = {0}, body = {0}, all = {0};
  int rc = 1;
  kernel_sources(p, LANG_C, &c);
  uint64_t h = fnv1a(c.s, c.len);
  OUT(&c, "const char ppk_source_hash[] = \"%016llx\";\n", (unsigned long long)h);
  kernel_sources(p, LANG_CUDA, &cu);
  OUT(&cu, "extern \"C\" __device__ const char ppk_source_hash[] = \"%016llx\";\n", (unsigned long long)h);
  snprintf(path, sizeof path, "%s/kernels_s0.c", dir);
  if (write_file(path, c.s, c.len)) goto out;
  snprintf(so, sizeof so, "%s/kernels_s0.so", dir);
  if (compile_so(dir, path, so, &c, cache)) goto out;
  snprintf(path, sizeof path, "%s/kernels_s0.cu", dir);
  if (write_file(path, cu.s, cu.len)) goto out;
  listing_body(&body, p, "kernels_s0.so", h);
  OUT(&all, "ppr-program 1\ncompiler ppc %s\nhash %016llx\n", PPC_VERSION,
      (unsigned long long)fnv1a(body.s, body.len));
  OUT(&all, "%s", body.s);
  snprintf(path, sizeof path, "%s/rank0.prog", dir);
  rc = write_file(path, all.s, all.len);
out:
  free(c.s);
  free(cu.s);
  free(body.s);
  free(all.s);
  return rc;
}
