/* fuse_kc.c — kernel calls: a kernel under construction and the operands of its call (buffers,
 * then scalars); a kernel is registered once per body and called by an instruction. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

/* A kernel with a row per thread: n elements (or columns), 256 threads per block. */
KCall fuse_kc_flat(const char *name, int64_t n, int node) {
  KCall kc = {.k = kir_new(name, KM_FLAT, n, 256), .node = node};
  return kc;
}

/* A kernel with a row per block: the block's threads share the row's width. */
KCall fuse_kc_block(const char *name, int64_t rows, int64_t width, int node) {
  KCall kc = {.k = kir_new(name, KM_BLOCK, rows, kir_block_for(width)), .node = node};
  return kc;
}

/* A buffer parameter for bytes [add, ...) of a virtual buffer (deduplicated per kernel). */
int fuse_kc_vbuf_at(FuseCtx *c, KCall *kc, int vb, int64_t add, bool written) {
  for (int i = 0; i < kc->k->nbufs; i++)
    if (kc->ops[i].vb == vb && kc->ops[i].add == add) {
      if (written) kc->k->bufs[i].written = true;
      return i;
    }
  char name[8];
  snprintf(name, sizeof name, "p%d", kc->k->nbufs);
  int b = kir_buf(kc->k, name, c->p->vb[vb].dtype, written);
  kc->ops[b] = fuse_prog_ob(vb, add);
  return b;
}

int fuse_kc_vbuf(FuseCtx *c, KCall *kc, int vb, bool written) { return fuse_kc_vbuf_at(c, kc, vb, 0, written); }

int fuse_kc_node(FuseCtx *c, KCall *kc, int node, bool written) {
  return fuse_kc_vbuf(c, kc, fuse_prog_buf(c, node), written);
}

/* A float scalar argument: a literal or a runtime scalar. */
int fuse_kc_scalar(KCall *kc, Operand o) {
  int n = kc->nscal++;
  kc->ops[KIR_MAX_BUFS + n] = o;
  return kir_arg(kc->k, n);
}

/* An int64 argument whose value may differ per rank ('v': tensor-parallel rank times o.i; 'c':
 * context-parallel rank times o.i). */
int fuse_kc_iscalar(KCall *kc, Operand o) {
  int n = kc->nscal++;
  kc->ops[KIR_MAX_BUFS + n] = o;
  return kir_iarg(kc->k, n);
}

/* The global position of the rank's local position s: s plus cp_rank·seq/cp under context
 * parallelism (an argument filled in per rank in the listing), else s itself. */
int fuse_kc_gpos(FuseCtx *c, KCall *kc, int s) {
  const Config *g = &c->g->cfg;
  if (g->cp < 2) return s;
  return kir_e(kc->k, K_IADD, fuse_kc_iscalar(kc, fuse_prog_cpstart(ir_seq_local(g))), s, 0);
}

/* An int64 runtime scalar (s:NAME), one argument however often the kernel reads it. */
int fuse_kc_rscalar(KCall *kc, const char *name) {
  for (int n = 0; n < kc->nscal; n++) {
    const Operand *o = &kc->ops[KIR_MAX_BUFS + n];
    if (o->kind == 's' && !strcmp(o->s, name) && kc->k->arg_int[n]) return kir_iarg(kc->k, n);
  }
  return fuse_kc_iscalar(kc, (Operand){.kind = 's', .s = name});
}

/* Render and deduplicate by body: the program's index of the kernel. */
int fuse_kc_register(FuseCtx *c, Kernel *k) {
  char base[32];
  snprintf(base, sizeof base, "%.31s", k->name);
  snprintf(k->name, sizeof k->name, "K");
  char *body = NULL;
  size_t len = 0, cap = 0;
  cg_render_kernel(k, LANG_C, &body, &len, &cap); /* its header names the geometry too */
  Program *p = c->p;
  for (int i = 0; i < p->nk; i++)
    if (!strcmp(c->bodies[i], body) &&
        !strncmp(p->kernels[i]->name + strcspn(p->kernels[i]->name, "_") + 1, base, strlen(base))) {
      free(body);
      kir_free(k);
      return i;
    }
  if (p->nk == p->kcap) {
    p->kcap = p->kcap ? 2 * p->kcap : 64;
    p->kernels = xrealloc(p->kernels, (size_t)p->kcap * sizeof *p->kernels);
    c->bodies = xrealloc(c->bodies, (size_t)p->kcap * sizeof *c->bodies);
  }
  snprintf(k->name, sizeof k->name, "k%d_%s", p->nk, base);
  c->bodies[p->nk] = body;
  p->kernels[p->nk++] = k;
  return p->nk - 1;
}

/* Register the kernel and call it. */
void fuse_kc_emit(FuseCtx *c, KCall *kc) {
  int found = fuse_kc_register(c, kc->k);
  Instr *in = fuse_prog_instr(c, I_KERNEL, kc->node);
  in->kernel = found;
  const Kernel *kk = c->p->kernels[found];
  for (int i = 0; i < kk->nbufs; i++) in->op[in->nop++] = kc->ops[i];
  for (int i = 0; i < kc->nscal; i++) in->op[in->nop++] = kc->ops[KIR_MAX_BUFS + i];
}
