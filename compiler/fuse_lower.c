/* fuse_lower.c — lowers the forward+backward graph to a program: elementwise chains fused into
 * single kernels, norms/rope/softmax/attention as row kernels, matrix products as GEMMs (with
 * transpose_sb folded into batched strides), and the optimizer. Buffers are virtual here;
 * mem_plan.c places them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

typedef struct Ctx {
  Program *p;
  const Graph *g;
  Block *blk;
  int *nusers;    /* per node: how many nodes read it */
  int *user;      /* per node: its (last) user */
  bool *saved;    /* per forward node: read by the backward */
  bool *inlined;  /* per node: computed inside its consumer's kernel, no buffer */
  Layout *phys;   /* per node: the physical order of its buffer's two leading axes */
  bool *att_done; /* per attention node: its backward is lowered */
  char **bodies;  /* rendered kernel bodies, for deduplication */
} Ctx;

static const IrNode *N(const Ctx *c, int id) { return &c->g->nodes[id]; }

/* ============================================================================================
 * Buffers and instructions
 * ========================================================================================== */

static int vbuf(Ctx *c, const char *name, BufClass cls, Shape shape, bool is_int) {
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
  b->is_int = is_int;
  b->bytes = ir_shape_numel(&shape) * 4;
  b->param = -1;
  b->first = b->last = -1;
  b->alias = -1;
  return p->nvb++;
}

static Instr *instr(Ctx *c, InstrKind kind, int node) {
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

static Operand ob(int vb, int64_t add) { return (Operand){.kind = 'b', .vb = vb, .add = add}; }

/* The first vocabulary row a TP rank holds: tp_rank * rows, filled in per rank in the listing. */
static Operand vstart(int64_t rows) { return (Operand){.kind = 'v', .i = rows}; }

static void allreduce(Ctx *c, int node, int vb, int64_t bytes, const char *group, const char *op, const char *why) {
  Instr *in = instr(c, I_ALLREDUCE, node);
  in->op[in->nop++] = ob(vb, 0);
  in->bytes = bytes;
  snprintf(in->group, sizeof in->group, "%s", group);
  in->redop = op;
  in->why = why;
}

/* The buffer holding node id's value (aliases resolved), or its parameter's. */
static int buf_of(Ctx *c, int id) {
  int vb = c->p->node_vb[id];
  if (vb < 0) diag_fatal("internal: node %%%d (%s) has no buffer", id, ir_ops[N(c, id)->op].name);
  return vb;
}

/* The gradient buffer of a sink's parameter. */
static int grad_buf(Ctx *c, int param) {
  for (int i = 0; i < c->p->nvb; i++)
    if (c->p->vb[i].cls == BC_GRAD && c->p->vb[i].param == param) return i;
  diag_fatal("internal: no gradient buffer for parameter %d", param);
}

/* ============================================================================================
 * Kernel calls: a kernel under construction and the operands of its call
 * ========================================================================================== */

typedef struct KCall {
  Kernel *k;
  Operand ops[MAX_OPERANDS];
  int node_of[KIR_MAX_BUFS]; /* which IR node (or -1 - vbuf) each buffer parameter is */
  int nscal;
  int node;
} KCall;

/* A kernel with a row per thread: n elements (or columns), 256 threads per block. */
static KCall kc_flat(const char *name, int64_t n, int node) {
  KCall kc = {.k = kir_new(name, KM_FLAT, n, 256), .node = node};
  return kc;
}

/* A kernel with a row per block: the block's threads share the row's width. */
static KCall kc_block(const char *name, int64_t rows, int64_t width, int node) {
  KCall kc = {.k = kir_new(name, KM_BLOCK, rows, kir_block_for(width)), .node = node};
  return kc;
}

/* A buffer parameter for bytes [add, ...) of a virtual buffer (deduplicated per kernel). */
static int kc_vbuf_at(Ctx *c, KCall *kc, int vb, int64_t add, bool written) {
  for (int i = 0; i < kc->k->nbufs; i++)
    if (kc->ops[i].vb == vb && kc->ops[i].add == add) {
      if (written) kc->k->bufs[i].written = true;
      return i;
    }
  char name[8];
  snprintf(name, sizeof name, "p%d", kc->k->nbufs);
  int b = kir_buf(kc->k, name, c->p->vb[vb].is_int, written);
  kc->ops[b] = ob(vb, add);
  return b;
}

static int kc_vbuf(Ctx *c, KCall *kc, int vb, bool written) { return kc_vbuf_at(c, kc, vb, 0, written); }

static int kc_node(Ctx *c, KCall *kc, int node, bool written) { return kc_vbuf(c, kc, buf_of(c, node), written); }

/* A float scalar argument: a literal or a runtime scalar. */
static int kc_scalar(KCall *kc, Operand o) {
  int n = kc->nscal++;
  kc->ops[KIR_MAX_BUFS + n] = o;
  return kir_arg(kc->k, n);
}

/* An int64 argument whose value may differ per rank ('v': tensor-parallel rank times o.i). */
static int kc_iscalar(KCall *kc, Operand o) {
  int n = kc->nscal++;
  kc->ops[KIR_MAX_BUFS + n] = o;
  return kir_iarg(kc->k, n);
}

/* Render and deduplicate by body: the program's index of the kernel. */
static int kc_register(Ctx *c, Kernel *k) {
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
static void kc_emit(Ctx *c, KCall *kc) {
  int found = kc_register(c, kc->k);
  Instr *in = instr(c, I_KERNEL, kc->node);
  in->kernel = found;
  const Kernel *kk = c->p->kernels[found];
  for (int i = 0; i < kk->nbufs; i++) in->op[in->nop++] = kc->ops[i];
  for (int i = 0; i < kc->nscal; i++) in->op[in->nop++] = kc->ops[KIR_MAX_BUFS + i];
}

/* ============================================================================================
 * Elementwise values: a fused producer's expression is rebuilt inside its consumer
 * ========================================================================================== */

/* Ops computed one element at a time from the same element of each input (elem_expr below): a
 * single-use one is fused into its consumer's kernel. */
static bool elementwise(Op op) {
  switch (op) {
  case OP_ADD:
  case OP_MUL:
  case OP_SILU:
  case OP_GELU:
  case OP_RELU:
  case OP_SILU_DX:
  case OP_GELU_DX:
  case OP_RELU_DX: return true;
  /* leaves, views, rows, reductions, GEMMs, collectives and pipeline boundaries */
  case OP_INPUT:
  case OP_PARAM:
  case OP_EMBEDDING:
  case OP_POS_EMBEDDING:
  case OP_LINEAR:
  case OP_MATMUL:
  case OP_RMSNORM:
  case OP_LAYERNORM:
  case OP_ROPE:
  case OP_SPLIT_HEADS:
  case OP_MERGE_HEADS:
  case OP_ATTENTION:
  case OP_CHUNK:
  case OP_TRANSPOSE_SB:
  case OP_CROSS_ENTROPY:
  case OP_SEED:
  case OP_CE_DX:
  case OP_EMBEDDING_DW:
  case OP_POS_EMBEDDING_DW:
  case OP_LINEAR_DX:
  case OP_LINEAR_DW:
  case OP_MATMUL_DX:
  case OP_MATMUL_DW:
  case OP_BIAS_DB:
  case OP_RMSNORM_DX:
  case OP_RMSNORM_DW:
  case OP_LAYERNORM_DX:
  case OP_LAYERNORM_DW:
  case OP_ROPE_DX:
  case OP_ATTENTION_DQ:
  case OP_ATTENTION_DK:
  case OP_ATTENTION_DV:
  case OP_CONCAT:
  case OP_PARAM_GRAD:
  case OP_RECV_FORWARD:
  case OP_SEND_FORWARD:
  case OP_RECV_BACKWARD:
  case OP_SEND_BACKWARD:
  case OP_TP_COPY:
  case OP_TP_REDUCE:
  case OP_ALLREDUCE:
  case OP_ADD_BIAS: return false;
  }
  return false;
}

static int sigmoid(Kernel *k, int x) {
  return kir_e(k, K_DIV, kir_f(k, 1), kir_e(k, K_ADD, kir_f(k, 1), kir_e(k, K_EXP, kir_e(k, K_NEG, x, 0, 0), 0, 0), 0),
               0);
}

#define GELU_C 0.7978845608028654 /* sqrt(2/pi) */

static int val(Ctx *c, KCall *kc, int node, int idx);

/* The value of an elementwise op at flat index idx, from its inputs' values. */
static int elem_expr(Ctx *c, KCall *kc, int node, int idx) {
  Kernel *k = kc->k;
  const IrNode *n = N(c, node);
  int a = val(c, kc, n->in[0], idx);
  int b = n->nin > 1 ? val(c, kc, n->in[1], idx) : -1;
  switch (n->op) {
  case OP_ADD: return kir_e(k, K_ADD, a, b, 0);
  case OP_MUL: return kir_e(k, K_MUL, a, b, 0);
  case OP_SILU: {
    int x = kir_let(k, a);
    return kir_e(k, K_MUL, x, sigmoid(k, x), 0);
  }
  case OP_GELU: {
    /* 0.5 x (1 + tanh(c (x + 0.044715 x^3))) */
    int x = kir_let(k, a);
    int x3 = kir_e(k, K_MUL, x, kir_e(k, K_MUL, x, x, 0), 0);
    int u = kir_e(k, K_MUL, kir_f(k, GELU_C), kir_e(k, K_ADD, x, kir_e(k, K_MUL, kir_f(k, 0.044715), x3, 0), 0), 0);
    return kir_e(k, K_MUL, kir_e(k, K_MUL, kir_f(k, 0.5), x, 0),
                 kir_e(k, K_ADD, kir_f(k, 1), kir_e(k, K_TANH, u, 0, 0), 0), 0);
  }
  case OP_RELU: return kir_e(k, K_MAX, kir_f(k, 0), a, 0); /* ppk_max(0, x): x when x is NaN, as torch.relu */
  case OP_SILU_DX: {
    /* dy * s * (1 + x (1 - s)), s = sigmoid(x) */
    int dy = kir_let(k, a), x = kir_let(k, b);
    int s = kir_let(k, sigmoid(k, x));
    int t = kir_e(k, K_ADD, kir_f(k, 1), kir_e(k, K_MUL, x, kir_e(k, K_SUB, kir_f(k, 1), s, 0), 0), 0);
    return kir_e(k, K_MUL, dy, kir_e(k, K_MUL, s, t, 0), 0);
  }
  case OP_GELU_DX: {
    /* dy * (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2)), t = tanh(c (x + 0.044715 x^3)) */
    int dy = kir_let(k, a), x = kir_let(k, b);
    int x2 = kir_let(k, kir_e(k, K_MUL, x, x, 0));
    int u = kir_e(k, K_MUL, kir_f(k, GELU_C),
                  kir_e(k, K_ADD, x, kir_e(k, K_MUL, kir_f(k, 0.044715), kir_e(k, K_MUL, x2, x, 0), 0), 0), 0);
    int t = kir_let(k, kir_e(k, K_TANH, u, 0, 0));
    int d1 = kir_e(k, K_MUL, kir_f(k, 0.5), kir_e(k, K_ADD, kir_f(k, 1), t, 0), 0);
    int du = kir_e(k, K_MUL, kir_f(k, GELU_C),
                   kir_e(k, K_ADD, kir_f(k, 1), kir_e(k, K_MUL, kir_f(k, 3 * 0.044715), x2, 0), 0), 0);
    int d2 = kir_e(k, K_MUL, kir_e(k, K_MUL, kir_f(k, 0.5), x, 0),
                   kir_e(k, K_MUL, kir_e(k, K_SUB, kir_f(k, 1), kir_e(k, K_MUL, t, t, 0), 0), du, 0), 0);
    return kir_e(k, K_MUL, dy, kir_e(k, K_ADD, d1, d2, 0), 0);
  }
  case OP_RELU_DX: /* x > 0 ? dy : 0: no gradient at x = 0, as in PyTorch */
    return kir_e(k, K_SEL, kir_e(k, K_FLT, kir_f(k, 0), b, 0), a, kir_f(k, 0));
  /* not elementwise(): lowered by their own kernels, never built into another's */
  case OP_INPUT:
  case OP_PARAM:
  case OP_EMBEDDING:
  case OP_POS_EMBEDDING:
  case OP_LINEAR:
  case OP_MATMUL:
  case OP_RMSNORM:
  case OP_LAYERNORM:
  case OP_ROPE:
  case OP_SPLIT_HEADS:
  case OP_MERGE_HEADS:
  case OP_ATTENTION:
  case OP_CHUNK:
  case OP_TRANSPOSE_SB:
  case OP_CROSS_ENTROPY:
  case OP_SEED:
  case OP_CE_DX:
  case OP_EMBEDDING_DW:
  case OP_POS_EMBEDDING_DW:
  case OP_LINEAR_DX:
  case OP_LINEAR_DW:
  case OP_MATMUL_DX:
  case OP_MATMUL_DW:
  case OP_BIAS_DB:
  case OP_RMSNORM_DX:
  case OP_RMSNORM_DW:
  case OP_LAYERNORM_DX:
  case OP_LAYERNORM_DW:
  case OP_ROPE_DX:
  case OP_ATTENTION_DQ:
  case OP_ATTENTION_DK:
  case OP_ATTENTION_DV:
  case OP_CONCAT:
  case OP_PARAM_GRAD:
  case OP_RECV_FORWARD:
  case OP_SEND_FORWARD:
  case OP_RECV_BACKWARD:
  case OP_SEND_BACKWARD:
  case OP_TP_COPY:
  case OP_TP_REDUCE:
  case OP_ALLREDUCE:
  case OP_ADD_BIAS: break;
  }
  diag_fatal("internal: %s is not elementwise", ir_ops[n->op].name);
}

static int val(Ctx *c, KCall *kc, int node, int idx) {
  if (c->inlined[node]) return elem_expr(c, kc, node, idx);
  return kir_ld(kc->k, kc_node(c, kc, node, false), idx);
}

/* ============================================================================================
 * GEMMs: activations as matrices of rows; a transposed-in-memory operand becomes batches
 * ========================================================================================== */

typedef struct View {
  int vb;
  int64_t rows_per_batch_ld; /* leading dimension */
  int64_t base, stride;      /* byte offset of batch 0 and elements between batches */
} View;

/* An activation [d0, d1, F] stored as [d0,d1] (flipped = false) or [d1,d0] (flipped = true). */
static View act_view(Ctx *c, int node, bool batched, int64_t d0, int64_t d1, int64_t F) {
  bool flipped =
      c->phys[node] != N(c, node)->layout && c->phys[node] != LAYOUT_NONE && N(c, node)->layout != LAYOUT_NONE;
  View v = {.vb = buf_of(c, node)};
  if (!batched) v.rows_per_batch_ld = F;
  else if (!flipped) v.rows_per_batch_ld = d1 * F, v.stride = F;
  else v.rows_per_batch_ld = F, v.stride = d0 * F;
  (void)d1;
  return v;
}

static bool flipped(Ctx *c, int node) {
  Layout l = N(c, node)->layout, ph = c->phys[node];
  return l != LAYOUT_NONE && ph != LAYOUT_NONE && l != ph;
}

static void gemm(Ctx *c, int node, char ta, char tb, int64_t m, int64_t n, int64_t k, View A, View B, View C,
                 double beta, int64_t batch) {
  Instr *in = instr(c, I_GEMM, node);
  in->ta = ta, in->tb = tb;
  in->m = m, in->n = n, in->k = k;
  in->alpha = 1;
  in->beta = beta;
  in->op[0] = ob(A.vb, A.base), in->lda = A.rows_per_batch_ld, in->sa = A.stride;
  in->op[1] = ob(B.vb, B.base), in->ldb = B.rows_per_batch_ld, in->sb = B.stride;
  in->op[2] = ob(C.vb, C.base), in->ldc = C.rows_per_batch_ld, in->sc = C.stride;
  in->nop = 3;
  in->batch = batch;
}

static View param_view(int vb, int64_t ld) { return (View){.vb = vb, .rows_per_batch_ld = ld}; }

/* linear/matmul and their gradients. Activation rows are d0*d1 (or all leading dims). */
static void lower_gemm(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  bool lin = n->op == OP_LINEAR || n->op == OP_LINEAR_DX || n->op == OP_LINEAR_DW;
  int act_in = n->op == OP_LINEAR || n->op == OP_MATMUL ? n->in[0] : n->in[0]; /* x, or dy */
  const Shape *xs = &N(c, act_in)->shape;
  int64_t F_in = xs->d[xs->nd - 1];
  int64_t R = ir_shape_numel(xs) / F_in;
  /* batching is needed when any activation operand is stored transposed */
  bool any_flip = flipped(c, act_in) || (n->op != OP_LINEAR_DW && n->op != OP_MATMUL_DW && c->phys[id] != n->layout &&
                                         c->phys[id] != LAYOUT_NONE && n->layout != LAYOUT_NONE);
  if ((n->op == OP_LINEAR_DW || n->op == OP_MATMUL_DW) && flipped(c, n->in[1])) any_flip = true;
  int64_t d0 = xs->nd >= 3 ? xs->d[0] : R, d1 = xs->nd >= 3 ? R / xs->d[0] : 1;
  int64_t batch = any_flip ? d1 : 1, M = any_flip ? d0 : R;
  switch (n->op) {
  case OP_LINEAR:
  case OP_MATMUL: {
    const Shape *w = &N(c, n->in[1])->shape;
    int64_t K = F_in, Nn = lin ? w->d[0] : w->d[1];
    View X = act_view(c, n->in[0], any_flip, d0, d1, K);
    View W = param_view(buf_of(c, n->in[1]), w->d[1]);
    View Y = act_view(c, id, any_flip, d0, d1, Nn);
    /* a flipped output: the view must treat it as stored [d1,d0] */
    if (any_flip) {
      bool fo = c->phys[id] != n->layout && c->phys[id] != LAYOUT_NONE;
      Y = (View){.vb = buf_of(c, id), .rows_per_batch_ld = fo ? Nn : d1 * Nn, .stride = fo ? d0 * Nn : Nn};
    }
    gemm(c, id, 'N', lin ? 'T' : 'N', M, Nn, K, X, W, Y, 0, batch);
    if (n->nin == 3) { /* bias, broadcast over rows: element r takes bias r mod N */
      KCall kc = kc_flat("bias_add", R * Nn, id);
      Kernel *k = kc.k;
      int y = kc_node(c, &kc, id, true), b = kc_node(c, &kc, n->in[2], false);
      kir_store(k, y, kir_row(k), '+', kir_ld(k, b, kir_e(k, K_IMOD, kir_row(k), kir_i(k, Nn), 0)));
      kc_emit(c, &kc);
    }
    break;
  }
  case OP_LINEAR_DX:
  case OP_MATMUL_DX: {
    /* dx[R,K] = dy[R,N] . W[N,K]  (linear)  or  dy . W[K,N]^T (matmul) */
    const Shape *w = &N(c, n->in[1])->shape;
    int64_t Nn = F_in, K = lin ? w->d[1] : w->d[0];
    View DY = act_view(c, n->in[0], any_flip, d0, d1, Nn);
    View W = param_view(buf_of(c, n->in[1]), w->d[1]);
    View DX = act_view(c, id, any_flip, d0, d1, K);
    gemm(c, id, 'N', lin ? 'N' : 'T', M, K, Nn, DY, W, DX, 0, batch);
    break;
  }
  case OP_LINEAR_DW:
  case OP_MATMUL_DW: {
    /* linear: dW[N,K] += dy^T x; matmul: dW[K,N] += x^T dy; batches accumulate into one dW */
    int x = n->in[1];
    int64_t Nn = F_in, K = N(c, x)->shape.d[N(c, x)->shape.nd - 1];
    View DY = act_view(c, n->in[0], any_flip, d0, d1, Nn);
    View X = act_view(c, x, any_flip, d0, d1, K);
    int g = grad_buf(c, n->gparam);
    if (lin) gemm(c, id, 'T', 'N', Nn, K, M, DY, X, param_view(g, K), 1, batch);
    else gemm(c, id, 'T', 'N', K, Nn, M, X, DY, param_view(g, Nn), 1, batch);
    break;
  }
  /* lower_node() calls this for the GEMM ops above only */
  case OP_INPUT:
  case OP_PARAM:
  case OP_EMBEDDING:
  case OP_POS_EMBEDDING:
  case OP_RMSNORM:
  case OP_LAYERNORM:
  case OP_ROPE:
  case OP_SPLIT_HEADS:
  case OP_MERGE_HEADS:
  case OP_ATTENTION:
  case OP_SILU:
  case OP_GELU:
  case OP_RELU:
  case OP_ADD:
  case OP_MUL:
  case OP_CHUNK:
  case OP_TRANSPOSE_SB:
  case OP_CROSS_ENTROPY:
  case OP_SEED:
  case OP_CE_DX:
  case OP_EMBEDDING_DW:
  case OP_POS_EMBEDDING_DW:
  case OP_BIAS_DB:
  case OP_RMSNORM_DX:
  case OP_RMSNORM_DW:
  case OP_LAYERNORM_DX:
  case OP_LAYERNORM_DW:
  case OP_ROPE_DX:
  case OP_ATTENTION_DQ:
  case OP_ATTENTION_DK:
  case OP_ATTENTION_DV:
  case OP_SILU_DX:
  case OP_GELU_DX:
  case OP_RELU_DX:
  case OP_CONCAT:
  case OP_PARAM_GRAD:
  case OP_RECV_FORWARD:
  case OP_SEND_FORWARD:
  case OP_RECV_BACKWARD:
  case OP_SEND_BACKWARD:
  case OP_TP_COPY:
  case OP_TP_REDUCE:
  case OP_ALLREDUCE:
  case OP_ADD_BIAS: diag_fatal("internal: %s is not a GEMM", ir_ops[n->op].name);
  }
}

/* ============================================================================================
 * Row kernels
 * ========================================================================================== */

static int idx2(Kernel *k, int row, int64_t width, int j) {
  return kir_e(k, K_IADD, kir_e(k, K_IMUL, row, kir_i(k, width), 0), j, 0);
}

static int64_t last_dim(const Shape *s) { return s->nd ? s->d[s->nd - 1] : 1; }

/* A plain elementwise node (not fused into a consumer): out[r] = f(inputs[r]). */
static void lower_elementwise(Ctx *c, int id) {
  const char *name = ir_ops[N(c, id)->op].name;
  KCall kc = kc_flat(name + (name[0] == '.'), ir_shape_numel(&N(c, id)->shape), id);
  int out = kc_node(c, &kc, id, true);
  int v = elem_expr(c, &kc, id, kir_row(kc.k));
  kir_store(kc.k, out, kir_row(kc.k), '=', v);
  kc_emit(c, &kc);
}

static void lower_param_grad(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  KCall kc = kc_flat("param_grad", ir_shape_numel(&n->shape), id);
  int g = kc_vbuf(c, &kc, grad_buf(c, n->gparam), true);
  kir_store(kc.k, g, kir_row(kc.k), '+', val(c, &kc, n->in[0], kir_row(kc.k)));
  kc_emit(c, &kc);
}

static void lower_embedding(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  int64_t S = n->shape.d[0], B = n->shape.d[1], H = n->shape.d[2];
  KCall kc = kc_block("embedding", S * B, H, id);
  Kernel *k = kc.k;
  int y = kc_node(c, &kc, id, true), ids = kc_node(c, &kc, n->in[0], false), w = kc_node(c, &kc, n->in[1], false);
  int r = kir_row(k);
  int s = kir_let(k, kir_e(k, K_IDIV, r, kir_i(k, B), 0)), b = kir_let(k, kir_e(k, K_IMOD, r, kir_i(k, B), 0));
  int tok = kir_let(k, kir_ld(k, ids, kir_e(k, K_IADD, kir_e(k, K_IMUL, b, kir_i(k, S), 0), s, 0)));
  if (n->a.vlocal) { /* vocab-parallel: my rows of the table, zeros for the others' */
    int v0 = kc_iscalar(&kc, vstart(n->a.vlocal));
    int loc = kir_let(k, kir_e(k, K_ISUB, tok, v0, 0));
    int mine = kir_let(
        k, kir_e(k, K_IAND, kir_e(k, K_ILT, kir_i(k, -1), loc, 0), kir_e(k, K_ILT, loc, kir_i(k, n->a.vlocal), 0), 0));
    int j = kir_tfor(k, kir_i(k, H));
    kir_store(
        k, y, idx2(k, r, H, j), '=',
        kir_e(k, K_SEL, mine, kir_ld(k, w, idx2(k, kir_e(k, K_ISEL, mine, loc, kir_i(k, 0)), H, j)), kir_f(k, 0)));
    kir_end(k);
  } else {
    int j = kir_tfor(k, kir_i(k, H));
    kir_store(k, y, idx2(k, r, H, j), '=', kir_ld(k, w, idx2(k, tok, H, j)));
    kir_end(k);
  }
  k->work = H;
  kc_emit(c, &kc);
}

static void lower_embedding_dw(Ctx *c, int id) {
  /* column-parallel scatter: row j of the kernel owns column j of dW, so no two rows collide */
  const IrNode *n = N(c, id);
  const Shape *dy = &N(c, n->in[1])->shape;
  int64_t S = dy->d[0], B = dy->d[1], H = dy->d[2];
  KCall kc = kc_flat("embedding_dw", H, id);
  Kernel *k = kc.k;
  int g = kc_vbuf(c, &kc, grad_buf(c, n->gparam), true), ids = kc_node(c, &kc, n->in[0], false),
      d = kc_node(c, &kc, n->in[1], false);
  int r = kir_row(k);
  int p = kir_for(k, kir_i(k, S * B));
  int s = kir_e(k, K_IDIV, p, kir_i(k, B), 0), b = kir_e(k, K_IMOD, p, kir_i(k, B), 0);
  int tok = kir_let(k, kir_ld(k, ids, kir_e(k, K_IADD, kir_e(k, K_IMUL, b, kir_i(k, S), 0), s, 0)));
  if (n->a.vlocal) { /* vocab-parallel: only my rows */
    int v0 = kc_iscalar(&kc, vstart(n->a.vlocal));
    int loc = kir_let(k, kir_e(k, K_ISUB, tok, v0, 0));
    kir_if(k,
           kir_e(k, K_IAND, kir_e(k, K_ILT, kir_i(k, -1), loc, 0), kir_e(k, K_ILT, loc, kir_i(k, n->a.vlocal), 0), 0));
    kir_store(k, g, idx2(k, loc, H, r), '+', kir_ld(k, d, idx2(k, p, H, r)));
    kir_end(k);
  } else {
    kir_store(k, g, idx2(k, tok, H, r), '+', kir_ld(k, d, idx2(k, p, H, r)));
  }
  kir_end(k);
  k->work = S * B;
  kc_emit(c, &kc);
}

static void lower_pos_embedding(Ctx *c, int id, bool grad) {
  const IrNode *n = N(c, id);
  const Shape *sh = grad ? &N(c, n->in[0])->shape : &n->shape;
  int64_t S = sh->d[0], B = sh->d[1], H = sh->d[2];
  KCall kc = kc_block(grad ? "pos_embedding_dw" : "pos_embedding", grad ? S : S * B, H, id);
  Kernel *k = kc.k;
  int r = kir_row(k);
  if (!grad) {
    int y = kc_node(c, &kc, id, true), w = kc_node(c, &kc, n->in[0], false);
    int s = kir_let(k, kir_e(k, K_IDIV, r, kir_i(k, B), 0));
    int j = kir_tfor(k, kir_i(k, H));
    kir_store(k, y, idx2(k, r, H, j), '=', kir_ld(k, w, idx2(k, s, H, j)));
    kir_end(k);
    k->work = H;
  } else { /* row s: dW[s, j] += sum over b of dy[s, b, j], the b in order */
    int g = kc_vbuf(c, &kc, grad_buf(c, n->gparam), true), d = kc_node(c, &kc, n->in[0], false);
    int j = kir_tfor(k, kir_i(k, H));
    int acc = kir_let(k, kir_f(k, 0));
    int b = kir_for(k, kir_i(k, B));
    kir_set(k, acc, '+', kir_ld(k, d, idx2(k, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, B), 0), b, 0), H, j)));
    kir_end(k);
    kir_store(k, g, idx2(k, r, H, j), '+', acc);
    kir_end(k);
    k->work = B * H;
  }
  kc_emit(c, &kc);
}

/* rmsnorm / layernorm forward: a row of D per block; saves rstd (and the mean) per row. */
static void lower_norm(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  bool rms = n->op == OP_RMSNORM;
  int64_t D = last_dim(&n->shape), R = ir_shape_numel(&n->shape) / D;
  KCall kc = kc_block(rms ? "rmsnorm" : "layernorm", R, D, id);
  Kernel *k = kc.k;
  int y = kc_node(c, &kc, id, true), w = kc_node(c, &kc, n->in[1], false);
  int st = kc_vbuf(c, &kc, c->p->node_aux[id], true);
  int bb = rms ? -1 : kc_node(c, &kc, n->in[2], false);
  int r = kir_row(k);
  int mean = kir_f(k, 0);
  if (!rms) {
    int j = kir_reduce(k, kir_i(k, D));
    int sum = kir_reduce_end(k, '+', val(c, &kc, n->in[0], idx2(k, r, D, j)));
    mean = kir_let(k, kir_e(k, K_DIV, sum, kir_f(k, (double)D), 0));
  }
  int j = kir_reduce(k, kir_i(k, D));
  int xv = kir_let(k, kir_e(k, K_SUB, val(c, &kc, n->in[0], idx2(k, r, D, j)), mean, 0));
  int ss = kir_reduce_end(k, '+', kir_e(k, K_MUL, xv, xv, 0));
  int rstd = kir_let(
      k, kir_e(k, K_RSQRT, kir_e(k, K_ADD, kir_e(k, K_DIV, ss, kir_f(k, (double)D), 0), kir_f(k, n->a.eps), 0), 0, 0));
  if (rms) kir_store(k, st, r, '=', rstd);
  else {
    kir_store(k, st, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), '=', mean);
    kir_store(k, st, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), kir_i(k, 1), 0), '=', rstd);
  }
  j = kir_tfor(k, kir_i(k, D));
  int xh = kir_e(k, K_MUL, kir_e(k, K_SUB, val(c, &kc, n->in[0], idx2(k, r, D, j)), mean, 0), rstd, 0);
  int out = kir_e(k, K_MUL, xh, kir_ld(k, w, j), 0);
  if (!rms) out = kir_e(k, K_ADD, out, kir_ld(k, bb, j), 0);
  kir_store(k, y, idx2(k, r, D, j), '=', out);
  kir_end(k);
  k->work = 3 * D;
  kc_emit(c, &kc);
}

/* rmsnorm_dx / layernorm_dx: a row of D per block, from dy, x, w and the saved statistics. */
static void lower_norm_dx(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  bool rms = n->op == OP_RMSNORM_DX;
  int64_t D = last_dim(&n->shape), R = ir_shape_numel(&n->shape) / D;
  KCall kc = kc_block(rms ? "rmsnorm_dx" : "layernorm_dx", R, D, id);
  Kernel *k = kc.k;
  int dx = kc_node(c, &kc, id, true), x = kc_node(c, &kc, n->in[1], false), w = kc_node(c, &kc, n->in[2], false);
  int st = kc_vbuf(c, &kc, c->p->node_aux[n->fwd], false);
  int r = kir_row(k);
  int rstd, mean = kir_f(k, 0);
  if (rms) rstd = kir_let(k, kir_ld(k, st, r));
  else {
    mean = kir_let(k, kir_ld(k, st, kir_e(k, K_IMUL, r, kir_i(k, 2), 0)));
    rstd = kir_let(k, kir_ld(k, st, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), kir_i(k, 1), 0)));
  }
  /* g = dy*w, xhat = (x - mean) * rstd; sums of g*xhat (and g) over the row */
  int j = kir_reduce(k, kir_i(k, D));
  int gv = kir_let(k, kir_e(k, K_MUL, val(c, &kc, n->in[0], idx2(k, r, D, j)), kir_ld(k, w, j), 0));
  int xh = kir_e(k, K_MUL, kir_e(k, K_SUB, kir_ld(k, x, idx2(k, r, D, j)), mean, 0), rstd, 0);
  int sgx = kir_reduce_end(k, '+', kir_e(k, K_MUL, gv, xh, 0));
  int mgx = kir_let(k, kir_e(k, K_DIV, sgx, kir_f(k, (double)D), 0));
  int mg = kir_f(k, 0);
  if (!rms) {
    j = kir_reduce(k, kir_i(k, D));
    int sg = kir_reduce_end(k, '+', kir_e(k, K_MUL, val(c, &kc, n->in[0], idx2(k, r, D, j)), kir_ld(k, w, j), 0));
    mg = kir_let(k, kir_e(k, K_DIV, sg, kir_f(k, (double)D), 0));
  }
  j = kir_tfor(k, kir_i(k, D));
  int gv2 = kir_e(k, K_MUL, val(c, &kc, n->in[0], idx2(k, r, D, j)), kir_ld(k, w, j), 0);
  int xh2 = kir_e(k, K_MUL, kir_e(k, K_SUB, kir_ld(k, x, idx2(k, r, D, j)), mean, 0), rstd, 0);
  /* rms: rstd (g - xhat mean(g xhat)); layer: rstd (g - mean(g) - xhat mean(g xhat)) */
  int inner = kir_e(k, K_SUB, gv2, kir_e(k, K_MUL, xh2, mgx, 0), 0);
  if (!rms) inner = kir_e(k, K_SUB, inner, mg, 0);
  kir_store(k, dx, idx2(k, r, D, j), '=', kir_e(k, K_MUL, rstd, inner, 0));
  kir_end(k);
  k->work = 4 * D;
  kc_emit(c, &kc);
}

/* rmsnorm_dw / layernorm_dw: column sums over rows: dw[j] += sum_r dy * xhat. */
static void lower_norm_dw(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  bool rms = n->op == OP_RMSNORM_DW;
  const Shape *xs = &N(c, n->in[1])->shape;
  int64_t D = last_dim(xs), R = ir_shape_numel(xs) / D;
  KCall kc = kc_flat(rms ? "rmsnorm_dw" : "layernorm_dw", D, id);
  Kernel *k = kc.k;
  int g = kc_vbuf(c, &kc, grad_buf(c, n->gparam), true), x = kc_node(c, &kc, n->in[1], false);
  int st = kc_vbuf(c, &kc, c->p->node_aux[n->fwd], false);
  int r = kir_row(k);
  int acc = kir_let(k, kir_f(k, 0));
  int i = kir_for(k, kir_i(k, R));
  int mean = rms ? kir_f(k, 0) : kir_ld(k, st, kir_e(k, K_IMUL, i, kir_i(k, 2), 0));
  int rstd =
      rms ? kir_ld(k, st, i) : kir_ld(k, st, kir_e(k, K_IADD, kir_e(k, K_IMUL, i, kir_i(k, 2), 0), kir_i(k, 1), 0));
  int xh = kir_e(k, K_MUL, kir_e(k, K_SUB, kir_ld(k, x, idx2(k, i, D, r)), mean, 0), rstd, 0);
  kir_set(k, acc, '+', kir_e(k, K_MUL, val(c, &kc, n->in[0], idx2(k, i, D, r)), xh, 0));
  kir_end(k);
  kir_store(k, g, r, '+', acc);
  k->work = 3 * R;
  kc_emit(c, &kc);
}

/* bias gradient: db[j] += sum over rows of dy[r, j] */
static void lower_bias_db(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  const Shape *ds = &N(c, n->in[0])->shape;
  int64_t Nn = last_dim(ds), R = ir_shape_numel(ds) / Nn;
  KCall kc = kc_flat("bias_db", Nn, id);
  Kernel *k = kc.k;
  int g = kc_vbuf(c, &kc, grad_buf(c, n->gparam), true);
  int acc = kir_let(k, kir_f(k, 0));
  int i = kir_for(k, kir_i(k, R));
  kir_set(k, acc, '+', val(c, &kc, n->in[0], idx2(k, i, Nn, kir_row(k))));
  kir_end(k);
  kir_store(k, g, kir_row(k), '+', acc);
  k->work = R;
  kc_emit(c, &kc);
}

/* rotate-half RoPE at position s, or its inverse (the gradient) */
static void lower_rope(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  bool inv = n->op == OP_ROPE_DX;
  const Shape *sh = &n->shape;
  int64_t S = sh->d[0], B = sh->d[1], H = sh->d[2], D = sh->d[3], half = D / 2;
  /* one row per position s: the angle's cosine and sine are computed once per (s, j) and used
   * for all B*H heads at that position */
  KCall kc = kc_block(inv ? "rope_dx" : "rope", S, half, id);
  Kernel *k = kc.k;
  int y = kc_node(c, &kc, id, true);
  int s = kir_row(k);
  int j = kir_tfor(k, kir_i(k, half));
  /* inv_freq = 1 / theta^(2j/D), angle = s * inv_freq, in float32 as the reference */
  int fr = kir_e(
      k, K_DIV, kir_f(k, 1),
      kir_e(k, K_POW, kir_f(k, n->a.theta),
            kir_e(k, K_DIV, kir_e(k, K_TOF, kir_e(k, K_IMUL, kir_i(k, 2), j, 0), 0, 0), kir_f(k, (double)D), 0), 0),
      0);
  int ang = kir_let(k, kir_e(k, K_MUL, kir_e(k, K_TOF, s, 0, 0), fr, 0));
  int co = kir_let(k, kir_e(k, K_COS, ang, 0, 0)), si = kir_let(k, kir_e(k, K_SIN, ang, 0, 0));
  int bh = kir_for(k, kir_i(k, B * H));
  int row = kir_e(k, K_IADD, kir_e(k, K_IMUL, s, kir_i(k, B * H), 0), bh, 0);
  int i0 = kir_let(k, idx2(k, row, D, j)), i1 = kir_let(k, kir_e(k, K_IADD, i0, kir_i(k, half), 0));
  int a = kir_let(k, val(c, &kc, n->in[0], i0)), b = kir_let(k, val(c, &kc, n->in[0], i1));
  if (!inv) {
    kir_store(k, y, i0, '=', kir_e(k, K_SUB, kir_e(k, K_MUL, a, co, 0), kir_e(k, K_MUL, b, si, 0), 0));
    kir_store(k, y, i1, '=', kir_e(k, K_ADD, kir_e(k, K_MUL, b, co, 0), kir_e(k, K_MUL, a, si, 0), 0));
  } else {
    kir_store(k, y, i0, '=', kir_e(k, K_ADD, kir_e(k, K_MUL, a, co, 0), kir_e(k, K_MUL, b, si, 0), 0));
    kir_store(k, y, i1, '=', kir_e(k, K_SUB, kir_e(k, K_MUL, b, co, 0), kir_e(k, K_MUL, a, si, 0), 0));
  }
  kir_end(k);
  kir_end(k);
  k->work = half * (40 + 6 * B * H);
  kc_emit(c, &kc);
}

/* ============================================================================================
 * Attention as GEMMs (as llm.c's cuBLAS path): the scores of each (batch, query head) are an
 * S x S matrix, QK^T and PV strided batched GEMMs over the [S,B,H,D] activations, the softmax a
 * kernel between them. Grouped-query heads by strides: query head h = g*R + r reads kv head g, so
 * for each r < R one GEMM covers the B*HK pairs (b, g), stepping R heads in q and one in k, v.
 * ========================================================================================== */

/* An attention operand: a buffer, its first element for r = 0, the elements added per r, the
 * leading dimension and the elements between batches (b, g). */
typedef struct AttOp {
  int vb;
  int64_t at, per_r, ld, stride;
} AttOp;

/* q-shaped [S,B,HQ,D] (q, o, do, dq), kv-shaped [S,B,HK,D] (k, v, dk, dv), scores [B*HQ,S,S] */
static AttOp att_q(int vb, int64_t B, int64_t HQ, int64_t D, int64_t R) { return (AttOp){vb, 0, D, B * HQ * D, R * D}; }
static AttOp att_kv(int vb, int64_t B, int64_t HK, int64_t D) { return (AttOp){vb, 0, 0, B * HK * D, D}; }
static AttOp att_s(int vb, int64_t S, int64_t R) { return (AttOp){vb, 0, S * S, S, R * S * S}; }

static View att_view(AttOp o, int r) {
  return (View){.vb = o.vb, .rows_per_batch_ld = o.ld, .base = 4 * (o.at + r * o.per_r), .stride = o.stride};
}

/* C = alpha op(A) op(B) for each r < R, batched over the B*HK pairs; acc: C is kv-shaped and the
 * R query heads of a group add into it in order (the first overwrites). */
static void att_gemm(Ctx *c, int node, int64_t R, int64_t batch, char ta, char tb, int64_t m, int64_t n, int64_t k,
                     double alpha, AttOp A, AttOp B, AttOp C, bool acc, const char *why) {
  for (int r = 0; r < R; r++) {
    gemm(c, node, ta, tb, m, n, k, att_view(A, r), att_view(B, r), att_view(C, r), acc && r > 0 ? 1 : 0, batch);
    c->blk->ins[c->blk->n - 1].alpha = alpha;
    c->blk->ins[c->blk->n - 1].why = why;
  }
}

/* Row r = (b*HQ + h)*S + i of the scores: query position i sees keys [0, i] when causal. */
static int att_keys(Kernel *k, int64_t S, bool causal) {
  int i = kir_e(k, K_IMOD, kir_row(k), kir_i(k, S), 0);
  return kir_let(k, causal ? kir_e(k, K_IADD, i, kir_i(k, 1), 0) : kir_i(k, S));
}

static void lower_attention(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  int fwd = n->op == OP_ATTENTION ? id : n->fwd;
  const IrNode *f = N(c, fwd);
  const Shape *qs = &N(c, f->in[0])->shape, *kvs = &N(c, f->in[1])->shape;
  int64_t S = qs->d[0], B = qs->d[1], HQ = qs->d[2], HK = kvs->d[2], D = qs->d[3], R = HQ / HK, batch = B * HK;
  bool causal = f->a.causal;
  AttOp q = att_q(buf_of(c, f->in[0]), B, HQ, D, R), kk = att_kv(buf_of(c, f->in[1]), B, HK, D),
        v = att_kv(buf_of(c, f->in[2]), B, HK, D);
  int lse = c->p->node_aux[fwd]; /* [B,HQ,S]: the log-sum-exp of each query's scores */
  Shape ss = {3, {B * HQ, S, S}};
  if (n->op == OP_ATTENTION) {
    AttOp p = att_s(vbuf(c, "scores", BC_SCRATCH, ss, false), S, R);
    att_gemm(c, id, R, batch, 'N', 'T', S, S, D, f->a.scale, q, kk, p, false, "scores = scale Q K^T");
    /* the causal softmax of each row, in place; its log-sum-exp saved for the backward */
    KCall kc = kc_block("attention_softmax", B * HQ * S, S, id);
    Kernel *k = kc.k;
    int P = kc_vbuf(c, &kc, p.vb, true), L = kc_vbuf(c, &kc, lse, true);
    int r = kir_row(k), nk = att_keys(k, S, causal);
    int j = kir_reduce(k, nk);
    int m = kir_reduce_end(k, 'M', kir_ld(k, P, idx2(k, r, S, j)));
    j = kir_reduce(k, nk);
    int l = kir_reduce_end(k, '+', kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, P, idx2(k, r, S, j)), m, 0), 0, 0));
    kir_store(k, L, r, '=', kir_e(k, K_ADD, m, kir_e(k, K_LOG, l, 0, 0), 0));
    int inv = kir_let(k, kir_e(k, K_DIV, kir_f(k, 1), l, 0));
    j = kir_tfor(k, kir_i(k, S));
    int e = kir_e(k, K_MUL, kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, P, idx2(k, r, S, j)), m, 0), 0, 0), inv, 0);
    kir_store(k, P, idx2(k, r, S, j), '=', kir_e(k, K_SEL, kir_e(k, K_ILT, j, nk, 0), e, kir_f(k, 0)));
    kir_end(k);
    k->work = 4 * S;
    kc_emit(c, &kc);
    att_gemm(c, id, R, batch, 'N', 'N', S, D, S, 1, p, v, att_q(buf_of(c, id), B, HQ, D, R), false, "O = P V");
    return;
  }
  /* the backward: all three gradients at the first of the three nodes */
  if (c->att_done[fwd]) return;
  c->att_done[fwd] = true;
  int gq = -1, gk = -1, gv = -1;
  for (int i = id; i < c->g->nnodes; i++)
    if (N(c, i)->fwd == fwd) {
      if (N(c, i)->op == OP_ATTENTION_DQ) gq = i;
      if (N(c, i)->op == OP_ATTENTION_DK) gk = i;
      if (N(c, i)->op == OP_ATTENTION_DV) gv = i;
    }
  if (gq < 0 || gk < 0 || gv < 0) diag_fatal("internal: attention %%%d lacks one of its gradients", fwd);
  AttOp dout = att_q(buf_of(c, n->in[3]), B, HQ, D, R);
  AttOp p = att_s(vbuf(c, "probs", BC_SCRATCH, ss, false), S, R),
        dp = att_s(vbuf(c, "dscores", BC_SCRATCH, ss, false), S, R);
  att_gemm(c, id, R, batch, 'N', 'T', S, S, D, f->a.scale, q, kk, p, false, "the scores again: scale Q K^T");
  {
    /* P = exp(s - lse): the forward's probabilities from its saved log-sum-exp */
    KCall kc = kc_block("attention_probs", B * HQ * S, S, id);
    Kernel *k = kc.k;
    int P = kc_vbuf(c, &kc, p.vb, true), L = kc_vbuf(c, &kc, lse, false);
    int r = kir_row(k), nk = att_keys(k, S, causal);
    int l = kir_let(k, kir_ld(k, L, r));
    int j = kir_tfor(k, kir_i(k, S));
    int e = kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, P, idx2(k, r, S, j)), l, 0), 0, 0);
    kir_store(k, P, idx2(k, r, S, j), '=', kir_e(k, K_SEL, kir_e(k, K_ILT, j, nk, 0), e, kir_f(k, 0)));
    kir_end(k);
    k->work = 2 * S;
    kc_emit(c, &kc);
  }
  att_gemm(c, id, R, batch, 'N', 'T', S, S, D, 1, dout, v, dp, false, "dP = dO V^T");
  att_gemm(c, id, R, batch, 'T', 'N', S, D, S, 1, p, dout, att_kv(buf_of(c, gv), B, HK, D), true, "dV = P^T dO");
  {
    /* dS = scale P (dP - delta), delta = the row's sum of P dP (= dO . O) */
    KCall kc = kc_block("attention_dscores", B * HQ * S, S, id);
    Kernel *k = kc.k;
    int P = kc_vbuf(c, &kc, p.vb, false), G = kc_vbuf(c, &kc, dp.vb, true);
    int r = kir_row(k), nk = att_keys(k, S, causal);
    int j = kir_reduce(k, nk);
    int delta =
        kir_reduce_end(k, '+', kir_e(k, K_MUL, kir_ld(k, P, idx2(k, r, S, j)), kir_ld(k, G, idx2(k, r, S, j)), 0));
    j = kir_tfor(k, kir_i(k, S));
    int pv = kir_let(k, kir_ld(k, P, idx2(k, r, S, j)));
    int ds = kir_e(k, K_MUL, kir_e(k, K_MUL, kir_f(k, f->a.scale), pv, 0),
                   kir_e(k, K_SUB, kir_ld(k, G, idx2(k, r, S, j)), delta, 0), 0);
    kir_store(k, G, idx2(k, r, S, j), '=', ds);
    kir_end(k);
    k->work = 3 * S;
    kc_emit(c, &kc);
  }
  att_gemm(c, id, R, batch, 'N', 'N', S, D, S, 1, dp, kk, att_q(buf_of(c, gq), B, HQ, D, R), false, "dQ = dS K");
  att_gemm(c, id, R, batch, 'T', 'N', S, D, S, 1, dp, q, att_kv(buf_of(c, gk), B, HK, D), true, "dK = dS^T Q");
}

static void lower_chunk(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  int64_t w = last_dim(&n->shape), R = ir_shape_numel(&n->shape) / w, P = n->a.parts, I = n->a.index;
  KCall kc = kc_block("chunk", R, w, id);
  Kernel *k = kc.k;
  int y = kc_node(c, &kc, id, true);
  int r = kir_row(k);
  int j = kir_tfor(k, kir_i(k, w));
  int src = kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, P * w), 0), kir_e(k, K_IADD, kir_i(k, I * w), j, 0), 0);
  kir_store(k, y, idx2(k, r, w, j), '=', val(c, &kc, n->in[0], src));
  kir_end(k);
  k->work = w;
  kc_emit(c, &kc);
}

static void lower_concat(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  int64_t P = n->a.parts, w = last_dim(&n->shape) / P, R = ir_shape_numel(&n->shape) / (w * P);
  KCall kc = kc_block("concat", R, w, id);
  Kernel *k = kc.k;
  int y = kc_node(c, &kc, id, true);
  int r = kir_row(k);
  for (int part = 0; part < P; part++) {
    int j = kir_tfor(k, kir_i(k, w));
    int dst = kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, P * w), 0), kir_e(k, K_IADD, kir_i(k, part * w), j, 0), 0);
    kir_store(k, y, dst, '=', n->in[part] < 0 ? kir_f(k, 0) : val(c, &kc, n->in[part], idx2(k, r, w, j)));
    kir_end(k);
  }
  k->work = w * P;
  kc_emit(c, &kc);
}

static void lower_transpose(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  const Shape *out = &n->shape; /* [d1, d0, F...] from [d0, d1, F...] */
  int64_t A = out->d[0], Bd = out->d[1], F = ir_shape_numel(out) / (A * Bd);
  KCall kc = kc_block("transpose_sb", A * Bd, F, id);
  Kernel *k = kc.k;
  int y = kc_node(c, &kc, id, true), x = kc_node(c, &kc, n->in[0], false);
  int r = kir_row(k);
  int a = kir_e(k, K_IDIV, r, kir_i(k, Bd), 0), b = kir_e(k, K_IMOD, r, kir_i(k, Bd), 0);
  int src = kir_let(k, kir_e(k, K_IADD, kir_e(k, K_IMUL, b, kir_i(k, A), 0), a, 0));
  int j = kir_tfor(k, kir_i(k, F));
  kir_store(k, y, idx2(k, r, F, j), '=', kir_ld(k, x, idx2(k, src, F, j)));
  kir_end(k);
  k->work = F;
  kc_emit(c, &kc);
}

/* cross-entropy forward: per row (a block each) the log-sum-exp (saved) and the loss; then the
 * mean over rows. With vocab-parallel logits each rank sees its columns: the row maximum, the
 * sum of exponentials and the target logit are reduced over the TP group between three kernels;
 * [B,S,V] is never gathered. Padded columns (past the real vocabulary) do not count. */
static void lower_ce(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  const Shape *ls = &N(c, n->in[0])->shape;
  int64_t V = ls->d[2], R = ls->d[0] * ls->d[1], VL = n->a.vlocal;
  int rowloss = vbuf(c, "rowloss", BC_SCRATCH, (Shape){1, {R}}, false);
  if (!VL) {
    KCall kc = kc_block("cross_entropy", R, V, id);
    Kernel *k = kc.k;
    int lg = kc_node(c, &kc, n->in[0], false), lab = kc_node(c, &kc, n->in[1], false);
    int st = kc_vbuf(c, &kc, c->p->node_aux[id], true), rl = kc_vbuf(c, &kc, rowloss, true);
    int r = kir_row(k);
    int j = kir_reduce(k, kir_i(k, V));
    int m = kir_reduce_end(k, 'M', kir_ld(k, lg, idx2(k, r, V, j)));
    j = kir_reduce(k, kir_i(k, V));
    int se = kir_reduce_end(k, '+', kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, lg, idx2(k, r, V, j)), m, 0), 0, 0));
    int lse = kir_let(k, kir_e(k, K_ADD, m, kir_e(k, K_LOG, se, 0, 0), 0));
    kir_store(k, st, r, '=', lse);
    int t = kir_ld(k, lab, r);
    kir_store(k, rl, r, '=', kir_e(k, K_SUB, lse, kir_ld(k, lg, idx2(k, r, V, t)), 0));
    k->work = 3 * V;
    kc_emit(c, &kc);
  } else {
    int mx = vbuf(c, "ce_max", BC_SCRATCH, (Shape){1, {R}}, false);
    int sums = vbuf(c, "ce_sums", BC_SCRATCH, (Shape){2, {R, 2}}, false);
    /* 1: my columns' maximum, then the maximum over the group */
    KCall k1 = kc_block("ce_vp_max", R, VL, id);
    Kernel *k = k1.k;
    int lg = kc_node(c, &k1, n->in[0], false), m = kc_vbuf(c, &k1, mx, true);
    int v0 = kc_iscalar(&k1, vstart(VL));
    int r = kir_row(k);
    int j = kir_reduce(k, kir_i(k, VL));
    int real = kir_e(k, K_ILT, kir_e(k, K_IADD, v0, j, 0), kir_i(k, n->a.vtotal), 0);
    int acc = kir_reduce_end(k, 'M', kir_e(k, K_SEL, real, kir_ld(k, lg, idx2(k, r, VL, j)), kir_f(k, -3.0e38)));
    kir_store(k, m, r, '=', acc);
    k->work = VL;
    kc_emit(c, &k1);
    allreduce(c, id, mx, R * 4, "tp", "max", "vocab-parallel cross-entropy: the row maximum over all columns");
    /* 2: my columns' sum of exponentials and, if the label is mine, its logit; then summed */
    KCall k2 = kc_block("ce_vp_sums", R, VL, id);
    k = k2.k;
    lg = kc_node(c, &k2, n->in[0], false);
    int lab = kc_node(c, &k2, n->in[1], false);
    m = kc_vbuf(c, &k2, mx, false);
    int sm = kc_vbuf(c, &k2, sums, true);
    v0 = kc_iscalar(&k2, vstart(VL));
    r = kir_row(k);
    int mr = kir_let(k, kir_ld(k, m, r));
    j = kir_reduce(k, kir_i(k, VL));
    real = kir_e(k, K_ILT, kir_e(k, K_IADD, v0, j, 0), kir_i(k, n->a.vtotal), 0);
    int se = kir_reduce_end(k, '+',
                            kir_e(k, K_SEL, real,
                                  kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, lg, idx2(k, r, VL, j)), mr, 0), 0, 0),
                                  kir_f(k, 0)));
    int loc = kir_let(k, kir_e(k, K_ISUB, kir_ld(k, lab, r), v0, 0));
    int mine =
        kir_let(k, kir_e(k, K_IAND, kir_e(k, K_ILT, kir_i(k, -1), loc, 0), kir_e(k, K_ILT, loc, kir_i(k, VL), 0), 0));
    kir_store(k, sm, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), '=', se);
    kir_store(
        k, sm, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), kir_i(k, 1), 0), '=',
        kir_e(k, K_SEL, mine, kir_ld(k, lg, idx2(k, r, VL, kir_e(k, K_ISEL, mine, loc, kir_i(k, 0)))), kir_f(k, 0)));
    k->work = 2 * VL;
    kc_emit(c, &k2);
    allreduce(c, id, sums, R * 8, "tp", "sum",
              "vocab-parallel cross-entropy: sums of exponentials and the target logit");
    /* 3: log-sum-exp (saved for the backward) and the row's loss, a row per thread */
    KCall k3 = kc_flat("ce_vp_loss", R, id);
    k = k3.k;
    m = kc_vbuf(c, &k3, mx, false);
    sm = kc_vbuf(c, &k3, sums, false);
    int st = kc_vbuf(c, &k3, c->p->node_aux[id], true), rl = kc_vbuf(c, &k3, rowloss, true);
    r = kir_row(k);
    int lse = kir_let(k, kir_e(k, K_ADD, kir_ld(k, m, r),
                               kir_e(k, K_LOG, kir_ld(k, sm, kir_e(k, K_IMUL, r, kir_i(k, 2), 0)), 0, 0), 0));
    kir_store(k, st, r, '=', lse);
    kir_store(
        k, rl, r, '=',
        kir_e(k, K_SUB, lse, kir_ld(k, sm, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 2), 0), kir_i(k, 1), 0)), 0));
    kc_emit(c, &k3);
  }
  /* the mean over the rows: one block */
  KCall mc = kc_block("mean", 1, R, id);
  Kernel *mk = mc.k;
  int out = kc_node(c, &mc, id, true), src = kc_vbuf(c, &mc, rowloss, false);
  int i = kir_reduce(mk, kir_i(mk, R));
  int acc = kir_reduce_end(mk, '+', kir_ld(mk, src, i));
  kir_store(mk, out, kir_i(mk, 0), '=', kir_e(mk, K_DIV, acc, kir_f(mk, (double)R), 0));
  mk->work = R;
  kc_emit(c, &mc);
  Instr *in = instr(c, I_LOSS, id);
  in->op[in->nop++] = ob(buf_of(c, id), 0);
}

/* dlogits = (softmax - onehot) * dloss / rows */
static void lower_ce_dx(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  const Shape *ls = &n->shape;
  int64_t V = ls->d[2], R = ls->d[0] * ls->d[1];
  KCall kc = kc_block("cross_entropy_dx", R, V, id);
  Kernel *k = kc.k;
  int dl = kc_node(c, &kc, id, true), lg = kc_node(c, &kc, n->in[0], false), lab = kc_node(c, &kc, n->in[1], false),
      seed = kc_node(c, &kc, n->in[2], false), st = kc_vbuf(c, &kc, c->p->node_aux[n->fwd], false);
  int r = kir_row(k);
  int scale = kir_let(k, kir_e(k, K_DIV, kir_ld(k, seed, kir_i(k, 0)), kir_f(k, (double)R), 0));
  int lse = kir_let(k, kir_ld(k, st, r));
  int t = kir_let(k, kir_ld(k, lab, r));
  /* vocab-parallel: column j is global column v0 + j; padded columns get no gradient */
  int v0 = n->a.vlocal ? kc_iscalar(&kc, vstart(n->a.vlocal)) : kir_i(k, 0);
  int j = kir_tfor(k, kir_i(k, V));
  int gj = kir_let(k, kir_e(k, K_IADD, v0, j, 0));
  int p = kir_e(k, K_EXP, kir_e(k, K_SUB, kir_ld(k, lg, idx2(k, r, V, j)), lse, 0), 0, 0);
  int oh = kir_e(k, K_SEL, kir_e(k, K_IEQ, gj, t, 0), kir_f(k, 1), kir_f(k, 0));
  int g = kir_e(k, K_MUL, kir_e(k, K_SUB, p, oh, 0), scale, 0);
  if (n->a.vlocal) g = kir_e(k, K_SEL, kir_e(k, K_ILT, gj, kir_i(k, n->a.vtotal), 0), g, kir_f(k, 0));
  kir_store(k, dl, idx2(k, r, V, j), '=', g);
  kir_end(k);
  k->work = 3 * V;
  kc_emit(c, &kc);
}

/* ============================================================================================
 * The optimizer: AdamW per parameter, weight decay on parameters of rank >= 2
 * ========================================================================================== */

/* The gradient norm: the sum of squares of each parameter's gradient the rank owns, by a kernel
 * of NORM_BLOCKS blocks, each the sum over its contiguous part of the gradient, into NORM_BLOCKS
 * partials per parameter; ppr launches it for the owned parameters and adds the partials in
 * double, in parameter order (grad_norm in the listing). */
#define NORM_BLOCKS 64
static void grad_norm(Ctx *c) {
  Kernel *k = kir_new("sumsq", KM_BLOCK, NORM_BLOCKS, 256);
  int x = kir_buf(k, "p0", false, false), out = kir_buf(k, "p1", false, true);
  int n = kir_iarg(k, 0);
  int part = kir_let(k, kir_e(k, K_IDIV, kir_e(k, K_IADD, n, kir_i(k, NORM_BLOCKS - 1), 0), kir_i(k, NORM_BLOCKS), 0));
  int start = kir_let(k, kir_e(k, K_IMUL, kir_row(k), part, 0));
  int left = kir_let(k, kir_e(k, K_ISUB, n, start, 0));
  int j = kir_reduce(k, kir_e(k, K_ISEL, kir_e(k, K_ILT, left, part, 0), left, part));
  int v = kir_let(k, kir_ld(k, x, kir_e(k, K_IADD, start, j, 0)));
  int sum = kir_reduce_end(k, '+', kir_e(k, K_MUL, v, v, 0));
  kir_store(k, out, kir_row(k), '=', sum);
  k->work = 1 << 20;
  Instr *in = instr(c, I_GRADNORM, -1);
  in->kernel = kc_register(c, k);
  int partials = vbuf(c, "norm_partials", BC_SCRATCH, (Shape){2, {c->g->nparams, NORM_BLOCKS}}, false);
  in->op[in->nop++] = ob(partials, 0);
}

static void lower_adamw(Ctx *c) {
  Program *p = c->p;
  c->blk = &p->opt;
  /* a parameter with a copy on another stage (the tied embedding and head): sum the gradients */
  for (int i = 0; i < c->g->nparams; i++) {
    if (!c->g->params[i].shared) continue;
    Instr *in = instr(c, I_ALLREDUCE_TIED, -1);
    in->op[in->nop++] = ob(grad_buf(c, i), 0);
    in->bytes = ir_shape_numel(&c->g->params[i].shape) * 4;
  }
  /* gradients that are partial sums over tensor-parallel ranks */
  for (int i = 0; i < c->g->nparams; i++) {
    const IrParam *q = &c->g->params[i];
    if (!q->grad_reduce) continue;
    char group[16];
    snprintf(group, sizeof group, q->grad_reduce == 1 ? "tp" : "tp/%d", q->shard_rep);
    allreduce(c, -1, grad_buf(c, i), ir_shape_numel(&q->shape) * 4, group, "sum",
              q->grad_reduce == 1 ? "a replicated weight applied to split heads: each rank saw its heads only"
                                  : "a kv head replicated over ranks: each saw its own query heads");
  }
  /* data parallelism: every replica's gradients summed (each already carries 1/microbatches) */
  if (c->g->cfg.dp > 1) {
    int first = -1;
    for (int b = 0; b < p->nvb && first < 0; b++)
      if (p->vb[b].cls == BC_GRAD) first = b;
    if (first >= 0) allreduce(c, -1, first, -1, "dp", "sum", "data parallelism: the replicas' gradients");
  }
  grad_norm(c);
  /* each parameter's four buffers, found in one pass over the buffers (a scan per parameter was
   * quadratic in the number of layers) */
  int np = c->g->nparams, *bufs = xmalloc(((size_t)4 * np + 1) * sizeof *bufs);
  for (int i = 0; i < 4 * np; i++) bufs[i] = -1;
  for (int b = 0; b < p->nvb; b++) {
    int i = p->vb[b].param, k = p->vb[b].cls == BC_PARAM    ? 0
                                : p->vb[b].cls == BC_GRAD   ? 1
                                : p->vb[b].cls == BC_ADAM_M ? 2
                                : p->vb[b].cls == BC_ADAM_V ? 3
                                                            : -1;
    if (i >= 0 && i < np && k >= 0) bufs[4 * i + k] = b;
  }
  for (int i = 0; i < c->g->nparams; i++) {
    int vp = bufs[4 * i], vg = bufs[4 * i + 1], vm = bufs[4 * i + 2], vv = bufs[4 * i + 3];
    const IrParam *q = &c->g->params[i];
    KCall kc = kc_flat("adamw", ir_shape_numel(&q->shape), -1);
    Kernel *k = kc.k;
    int P = kc_vbuf(c, &kc, vp, true), G = kc_vbuf(c, &kc, vg, false), M = kc_vbuf(c, &kc, vm, true),
        V = kc_vbuf(c, &kc, vv, true);
    int lr = kc_scalar(&kc, (Operand){.kind = 's', .s = "lr"});
    int b1 = kc_scalar(&kc, (Operand){.kind = 's', .s = "beta1"});
    int b2 = kc_scalar(&kc, (Operand){.kind = 's', .s = "beta2"});
    int eps = kc_scalar(&kc, (Operand){.kind = 's', .s = "eps"});
    int wd = kc_scalar(&kc, q->shape.nd >= 2 ? (Operand){.kind = 's', .s = "wd"} : (Operand){.kind = 'f', .f = 0});
    int bc1 = kc_scalar(&kc, (Operand){.kind = 's', .s = "bc1"});
    int bc2 = kc_scalar(&kc, (Operand){.kind = 's', .s = "bc2"});
    int clip = kc_scalar(&kc, (Operand){.kind = 's', .s = "clip"});
    int r = kir_row(k);
    int g = kir_let(k, kir_e(k, K_MUL, kir_ld(k, G, r), clip, 0));
    int m = kir_let(k, kir_e(k, K_ADD, kir_e(k, K_MUL, b1, kir_ld(k, M, r), 0),
                             kir_e(k, K_MUL, kir_e(k, K_SUB, kir_f(k, 1), b1, 0), g, 0), 0));
    int v = kir_let(k, kir_e(k, K_ADD, kir_e(k, K_MUL, b2, kir_ld(k, V, r), 0),
                             kir_e(k, K_MUL, kir_e(k, K_SUB, kir_f(k, 1), b2, 0), kir_e(k, K_MUL, g, g, 0), 0), 0));
    kir_store(k, M, r, '=', m);
    kir_store(k, V, r, '=', v);
    int mh = kir_e(k, K_DIV, m, bc1, 0), vh = kir_e(k, K_DIV, v, bc2, 0);
    int pd =
        kir_let(k, kir_e(k, K_MUL, kir_ld(k, P, r), kir_e(k, K_SUB, kir_f(k, 1), kir_e(k, K_MUL, lr, wd, 0), 0), 0));
    kir_store(k, P, r, '=',
              kir_e(k, K_SUB, pd,
                    kir_e(k, K_MUL, lr, kir_e(k, K_DIV, mh, kir_e(k, K_ADD, kir_e(k, K_SQRT, vh, 0, 0), eps, 0), 0), 0),
                    0));
    k->work = 12;
    kc_emit(c, &kc);
  }
  free(bufs);
}

/* ============================================================================================
 * Analysis and the driver
 * ========================================================================================== */

static bool gemm_reader(Op op) {
  return op == OP_LINEAR || op == OP_MATMUL || op == OP_LINEAR_DX || op == OP_MATMUL_DX || op == OP_LINEAR_DW ||
         op == OP_MATMUL_DW;
}

static bool is_alias(Op op) {
  return op == OP_SPLIT_HEADS || op == OP_MERGE_HEADS || op == OP_TP_COPY || op == OP_TP_REDUCE || op == OP_ALLREDUCE;
}

static void analyse(Ctx *c) {
  const Graph *g = c->g;
  int nn = g->nnodes;
  c->nusers = xcalloc((size_t)nn, sizeof(int));
  c->user = xcalloc((size_t)nn, sizeof(int));
  c->saved = xcalloc((size_t)nn, sizeof(bool));
  c->inlined = xcalloc((size_t)nn, sizeof(bool));
  c->phys = xcalloc((size_t)nn, sizeof(Layout));
  c->att_done = xcalloc((size_t)nn, sizeof(bool));
  for (int i = 0; i < nn; i++) {
    const IrNode *n = N(c, i);
    for (int k = 0; k < n->nin; k++) {
      if (n->in[k] < 0) continue;
      c->nusers[n->in[k]]++;
      c->user[n->in[k]] = i;
      if (n->bwd && !N(c, n->in[k])->bwd) c->saved[n->in[k]] = true;
    }
    if (n->fwd >= 0) c->saved[n->fwd] = true;
  }
  /* an alias of a saved value keeps its source alive too */
  for (int i = nn - 1; i >= 0; i--)
    if (c->saved[i] && is_alias(N(c, i)->op)) c->saved[N(c, i)->in[0]] = true;
  for (int i = 0; i < nn; i++) c->phys[i] = N(c, i)->layout;
  /* fusion: a single-use elementwise op is computed inside its consumer */
  for (int i = 0; i < nn; i++) {
    const IrNode *n = N(c, i);
    if (!elementwise(n->op) || c->nusers[i] != 1 || c->saved[i]) continue;
    const IrNode *u = N(c, c->user[i]);
    if (u->bwd != n->bwd) continue;
    bool ok = elementwise(u->op) || u->op == OP_PARAM_GRAD || u->op == OP_RMSNORM || u->op == OP_LAYERNORM ||
              u->op == OP_RMSNORM_DX || u->op == OP_LAYERNORM_DX || u->op == OP_RMSNORM_DW ||
              u->op == OP_LAYERNORM_DW || u->op == OP_BIAS_DB || u->op == OP_CHUNK;
    /* the consumer must read this input by its own flat index: not the x of a norm gradient */
    if ((u->op == OP_RMSNORM_DX || u->op == OP_LAYERNORM_DX || u->op == OP_RMSNORM_DW || u->op == OP_LAYERNORM_DW) &&
        u->in[0] != i)
      ok = false;
    c->inlined[i] = ok;
  }
}

/* Which transposes are free: the producer, a GEMM, writes transposed; or every reader is a GEMM. */
static bool transpose_is_free(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  int src = n->in[0];
  if (n->shape.nd != 3) return false; /* GEMM views cover [d0, d1, F] activations only */
  if (gemm_reader(N(c, src)->op) && N(c, src)->op != OP_LINEAR_DW && N(c, src)->op != OP_MATMUL_DW &&
      c->nusers[src] == 1 && !c->saved[src])
    return true;
  for (int i = id + 1; i < c->g->nnodes; i++)
    for (int k = 0; k < N(c, i)->nin; k++)
      if (N(c, i)->in[k] == id && !gemm_reader(N(c, i)->op)) return false;
  return c->nusers[id] > 0;
}

static void assign_buffers(Ctx *c) {
  const Graph *g = c->g;
  Program *p = c->p;
  int nn = g->nnodes;
  p->node_vb = xmalloc((size_t)nn * sizeof(int));
  p->node_aux = xmalloc((size_t)nn * sizeof(int));
  for (int i = 0; i < nn; i++) p->node_vb[i] = p->node_aux[i] = -1;
  static const BufClass pc[4] = {BC_PARAM, BC_GRAD, BC_ADAM_M, BC_ADAM_V};
  for (int cls = 0; cls < 4; cls++)
    for (int i = 0; i < g->nparams; i++) {
      int vb = vbuf(c, g->params[i].name, pc[cls], g->params[i].shape, false);
      p->vb[vb].param = i;
      if (cls == 0) p->node_vb[g->params[i].node] = vb;
    }
  for (int i = 0; i < nn; i++) {
    const IrNode *n = N(c, i);
    char name[40];
    snprintf(name, sizeof name, "%s%d", n->bwd ? "g" : "t", i);
    if (n->var && !n->bwd) snprintf(name, sizeof name, "%.24s.%d", n->var, i);
    if (n->op == OP_PARAM || n->gparam >= 0 || c->inlined[i]) continue;
    if (n->op == OP_INPUT) {
      p->node_vb[i] = vbuf(c, n->var, BC_SLOT, n->shape, true);
      continue;
    }
    if (is_alias(n->op)) {
      p->node_vb[i] = p->node_vb[n->in[0]];
      c->phys[i] = c->phys[n->in[0]];
      continue;
    }
    /* pipeline boundaries: received values live from their block's start, sent ones to its end */
    if (n->op == OP_SEND_FORWARD || n->op == OP_SEND_BACKWARD) {
      int vb = p->node_vb[n->in[0]];
      p->node_vb[i] = vb;
      p->vb[vb].pin_end = true;
      p->bnd[n->op == OP_SEND_FORWARD ? 1 : 3] = vb;
      continue;
    }
    if (n->op == OP_RECV_FORWARD || n->op == OP_RECV_BACKWARD) {
      bool f = n->op == OP_RECV_FORWARD;
      int vb = vbuf(c, f ? "recv_forward" : "recv_backward", f ? BC_SLOT : BC_SCRATCH, n->shape, false);
      p->vb[vb].pin_start = true;
      p->node_vb[i] = vb;
      p->bnd[f ? 0 : 2] = vb;
      continue;
    }
    if (n->op == OP_TRANSPOSE_SB && transpose_is_free(c, i)) {
      int src = n->in[0];
      if (gemm_reader(N(c, src)->op) && c->nusers[src] == 1 && N(c, src)->op != OP_LINEAR_DW) c->phys[src] = n->layout;
      p->node_vb[i] = p->node_vb[src];
      c->phys[i] = c->phys[src];
      /* a saved alias keeps the bytes it shares alive until the backward */
      if (!n->bwd && c->saved[i]) p->vb[p->node_vb[i]].cls = BC_SLOT;
      continue;
    }
    bool slot = !n->bwd && c->saved[i];
    p->node_vb[i] = vbuf(c, name, slot ? BC_SLOT : BC_SCRATCH, n->shape, false);
    /* saved statistics */
    int64_t R = n->shape.nd ? ir_shape_numel(&n->shape) / last_dim(&n->shape) : 1;
    Shape aux = {0};
    if (n->op == OP_RMSNORM) aux = (Shape){1, {R}};
    if (n->op == OP_LAYERNORM) aux = (Shape){1, {2 * R}};
    if (n->op == OP_CROSS_ENTROPY) {
      const Shape *ls = &N(c, n->in[0])->shape;
      aux = (Shape){1, {ls->d[0] * ls->d[1]}};
    }
    if (n->op == OP_ATTENTION) aux = (Shape){1, {n->shape.d[0] * n->shape.d[1] * n->shape.d[2]}}; /* lse [B,HQ,S] */
    if (aux.nd) {
      snprintf(name, sizeof name, "stats%d", i);
      p->node_aux[i] = vbuf(c, name, c->saved[i] ? BC_SLOT : BC_SCRATCH, aux, false);
    }
  }
  /* transposes the producer writes: its buffer keeps the logical shape, stored flipped */
  for (int i = 0; i < nn; i++)
    if (N(c, i)->op == OP_TRANSPOSE_SB && p->node_vb[i] == p->node_vb[N(c, i)->in[0]] && p->node_vb[i] >= 0)
      c->phys[i] = c->phys[N(c, i)->in[0]];
}

static void lower_node(Ctx *c, int id) {
  const IrNode *n = N(c, id);
  if (c->inlined[id]) return;
  switch (n->op) {
  case OP_INPUT:
  case OP_PARAM:
  case OP_SPLIT_HEADS:
  case OP_MERGE_HEADS: break;
  case OP_RECV_FORWARD:
  case OP_SEND_FORWARD:
  case OP_RECV_BACKWARD:
  case OP_SEND_BACKWARD: break; /* the schedule's */
  case OP_EMBEDDING: lower_embedding(c, id); break;
  case OP_EMBEDDING_DW: lower_embedding_dw(c, id); break;
  case OP_POS_EMBEDDING: lower_pos_embedding(c, id, false); break;
  case OP_POS_EMBEDDING_DW: lower_pos_embedding(c, id, true); break;
  case OP_LINEAR:
  case OP_MATMUL:
  case OP_LINEAR_DX:
  case OP_MATMUL_DX:
  case OP_LINEAR_DW:
  case OP_MATMUL_DW: lower_gemm(c, id); break;
  case OP_BIAS_DB: lower_bias_db(c, id); break;
  case OP_RMSNORM:
  case OP_LAYERNORM: lower_norm(c, id); break;
  case OP_RMSNORM_DX:
  case OP_LAYERNORM_DX: lower_norm_dx(c, id); break;
  case OP_RMSNORM_DW:
  case OP_LAYERNORM_DW: lower_norm_dw(c, id); break;
  case OP_ROPE:
  case OP_ROPE_DX: lower_rope(c, id); break;
  case OP_ATTENTION:
  case OP_ATTENTION_DQ:
  case OP_ATTENTION_DK:
  case OP_ATTENTION_DV: lower_attention(c, id); break;
  case OP_SILU:
  case OP_GELU:
  case OP_RELU:
  case OP_ADD:
  case OP_MUL:
  case OP_SILU_DX:
  case OP_GELU_DX:
  case OP_RELU_DX: lower_elementwise(c, id); break;
  case OP_CHUNK: lower_chunk(c, id); break;
  case OP_CONCAT: lower_concat(c, id); break;
  case OP_TRANSPOSE_SB:
    if (c->p->node_vb[id] != c->p->node_vb[n->in[0]]) lower_transpose(c, id);
    break;
  case OP_CROSS_ENTROPY: lower_ce(c, id); break;
  case OP_CE_DX: lower_ce_dx(c, id); break;
  case OP_SEED: {
    Instr *in = instr(c, I_SEED, id);
    in->op[in->nop++] = ob(buf_of(c, id), 0);
    in->value = 1.0 / (double)c->g->cfg.microbatches;
    break;
  }
  case OP_PARAM_GRAD: lower_param_grad(c, id); break;
  case OP_TP_COPY: break; /* identity forward */
  case OP_TP_REDUCE:
    allreduce(c, id, buf_of(c, id), ir_shape_numel(&n->shape) * 4, "tp", "sum",
              n->in[0] >= 0 && N(c, n->in[0])->op == OP_EMBEDDING ? "vocab-parallel embedding: rows from every rank"
                                                                  : "row-parallel linear: partial sums");
    break;
  case OP_ALLREDUCE:
    allreduce(c, id, buf_of(c, id), ir_shape_numel(&n->shape) * 4, "tp", "sum",
              "the input of column-parallel linears: its gradient is summed over the ranks");
    break;
  case OP_ADD_BIAS: {
    int64_t Nn = last_dim(&n->shape), R = ir_shape_numel(&n->shape) / Nn;
    KCall kc = kc_flat("add_bias", R * Nn, id); /* element r takes bias r mod N */
    Kernel *k = kc.k;
    int y = kc_node(c, &kc, id, true), b = kc_node(c, &kc, n->in[1], false);
    int r = kir_row(k);
    kir_store(k, y, r, '=',
              kir_e(k, K_ADD, val(c, &kc, n->in[0], r), kir_ld(k, b, kir_e(k, K_IMOD, r, kir_i(k, Nn), 0)), 0));
    kc_emit(c, &kc);
    break;
  }
  }
}

Program *fuse_lower(const Graph *g) {
  Program *p = xcalloc(1, sizeof *p);
  p->g = g;
  p->fwd.name = "forward";
  p->bwd.name = "backward";
  p->opt.name = "optimizer";
  p->nslots = 1;
  for (int i = 0; i < 4; i++) p->bnd[i] = -1;
  Ctx c = {.p = p, .g = g};
  analyse(&c);
  assign_buffers(&c);
  c.blk = &p->fwd;
  /* the batch: token ids and labels of this micro-batch */
  if (g->ninputs) {
    Instr *in = instr(&c, I_BATCH, -1);
    in->nop = 2;
    in->op[0] = in->op[1] = (Operand){.kind = '-'};
    for (int i = 0; i < g->ninputs; i++) in->op[g->inputs[i].use == USE_LABELS] = ob(p->node_vb[g->inputs[i].node], 0);
  }
  for (int i = 0; i < g->nnodes; i++) {
    c.blk = N(&c, i)->bwd ? &p->bwd : &p->fwd;
    lower_node(&c, i);
  }
  lower_adamw(&c);
  for (int i = 0; i < p->nk; i++) free(c.bodies[i]);
  free(c.bodies);
  free(c.nusers);
  free(c.user);
  free(c.saved);
  free(c.inlined);
  free(c.phys);
  free(c.att_done);
  return p;
}

void fuse_prog_free(Program *p) {
  if (!p) return;
  for (int i = 0; i < p->nk; i++) kir_free(p->kernels[i]);
  free(p->kernels);
  free(p->vb);
  free(p->fwd.ins);
  free(p->bwd.ins);
  free(p->opt.ins);
  free(p->node_vb);
  free(p->node_aux);
  free(p);
}
