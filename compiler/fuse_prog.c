/* fuse_prog.c — the program the lowering builds: its virtual buffers (mem_plan.c places them),
 * the instructions of its blocks, and freeing it. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

DType fuse_act_dtype(const FuseCtx *c) { return pp_precision_dtype[c->g->cfg.precision]; }

int fuse_prog_vbuf(FuseCtx *c, const char *name, BufClass cls, Shape shape, DType dtype) {
  Program *p = c->p;
  if (p->nvb == p->vcap) {
    p->vcap = p->vcap ? 2 * p->vcap : 128;
    p->vb = xrealloc(p->vb, (size_t)p->vcap * sizeof *p->vb);
  }
  VBuf *b = &p->vb[p->nvb];
  memset(b, 0, sizeof *b);
  snprintf(b->name, sizeof b->name, "%s", name);
  b->cls = cls;
  b->shape = shape;
  b->dtype = dtype;
  b->bytes = ir_shape_numel(&shape) * pp_dtype_bytes(dtype);
  b->param = -1;
  b->chunk = c->chunk;
  b->first = b->last = -1;
  b->view = -1;
  return p->nvb++;
}

Instr *fuse_prog_instr(FuseCtx *c, InstrKind kind, int node) {
  Block *b = c->blk;
  if (b->n == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 128;
    b->ins = xrealloc(b->ins, (size_t)b->cap * sizeof *b->ins);
  }
  Instr *in = &b->ins[b->n++];
  memset(in, 0, sizeof *in);
  in->kind = kind;
  in->node = node;
  in->kernel = -1;
  return in;
}

Operand fuse_prog_ob(int vb, int64_t add) { return (Operand){.kind = 'b', .vb = vb, .add = add}; }

/* The first vocabulary row a TP rank holds: tp_rank * rows, filled in per rank in the listing. */
Operand fuse_prog_vstart(int64_t rows) { return (Operand){.kind = 'v', .i = rows}; }

/* A context-parallel rank's first position (n: seq/cp) or first element (n: a value's elements):
 * cp_rank * n, filled in per rank in the listing. */
Operand fuse_prog_cpstart(int64_t n) { return (Operand){.kind = 'c', .i = n}; }

void fuse_prog_allreduce(FuseCtx *c, int node, int vb, int64_t bytes, const char *group, const char *op,
                         const char *why) {
  Instr *in = fuse_prog_instr(c, I_ALLREDUCE, node);
  in->op[in->nop++] = fuse_prog_ob(vb, 0);
  in->bytes = bytes;
  snprintf(in->group, sizeof in->group, "%s", group);
  in->redop = op;
  in->why = why;
}

/* Sequence (group "tp") or context ("cp") parallelism's collective, an instruction of node: the
 * all-gather of the rank's part src into the whole dst, or the reduce-scatter of the whole's f32
 * partial sums src into the rank's part dst, node round's buffer; a bf16 dst gets the sums in an
 * f32 part first, rounded once after. */
void fuse_prog_seq_coll(FuseCtx *c, int node, bool gather, const char *group, int src, int dst, int round,
                        const char *why) {
  bool rounds = !gather && c->p->vb[dst].dtype != c->p->vb[src].dtype;
  int part = rounds ? fuse_prog_vbuf(c, "scatter_f32", BC_SCRATCH, c->g->nodes[round].shape, c->p->vb[src].dtype) : dst;
  Instr *in = fuse_prog_instr(c, gather ? I_ALLGATHER : I_REDUCE_SCATTER, node);
  snprintf(in->group, sizeof in->group, "%s", group);
  in->op[in->nop++] = fuse_prog_ob(src, 0);
  in->op[in->nop++] = fuse_prog_ob(part, 0);
  in->bytes = c->p->vb[gather ? src : part].bytes;
  in->why = why;
  if (rounds) fuse_rows_round(c, round, part);
}

/* The buffer holding node id's value (aliases resolved), or its parameter's. */
int fuse_prog_buf(FuseCtx *c, int id) {
  int vb = c->p->node_vb[id];
  if (vb < 0) diag_fatal("internal: node %%%d (%s) has no buffer", id, ir_ops[c->g->nodes[id].op].name);
  return vb;
}

/* The gradient buffer of a sink's parameter. */
int fuse_prog_grad(FuseCtx *c, int param) {
  if (param < 0 || param >= c->g->nparams) diag_fatal("internal: no gradient buffer for parameter %d", param);
  return c->grad_vb[param];
}

/* The buffer an embedding's gradient accumulates into: a tied parameter's own when it has one
 * (both halves on this rank, fuse_lower.c), else the parameter's gradient. */
int fuse_prog_emb_grad(FuseCtx *c, int param) {
  int g = fuse_prog_grad(c, param), r = c->pmap ? c->pmap[param] : param;
  return c->p->emb_vb[r] >= 0 ? c->p->emb_vb[r] : g;
}

void fuse_prog_free(Program *p) {
  if (!p) return;
  for (int i = 0; i < p->nk; i++) kir_free(p->kernels[i]);
  free(p->kernels);
  free(p->vb);
  for (int k = 0; k < p->nch; k++) {
    free(p->ch[k].fwd.ins);
    free(p->ch[k].bwd.ins);
    free(p->ch[k].wgt.ins);
  }
  free(p->opt.ins);
  free(p->refresh.ins);
  free(p->copy_vb);
  free(p->emb_vb);
  free(p->node_vb);
  free(p->node_aux);
  free(p->node_probs);
  free(p);
}
