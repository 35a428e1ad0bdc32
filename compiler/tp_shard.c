/* tp_shard.c — tensor parallelism (Megatron style) from the parameters' roles: one stage's
 * forward graph rewritten as one TP rank runs it. Every TP rank of a stage runs the same graph
 * on its own shard; what differs per rank (which rows of a table, which kv head) is decided when
 * the listing is written. Values are replicated, split (features or heads) or partial sums:
 *   column-parallel linear   x replicated -> .tp_copy(x) (gradient summed) -> output split
 *   row-parallel linear      x split -> partial -> .tp_reduce (summed) -> replicated (+ bias)
 *   vocab-parallel table     its rows of the table, zeros elsewhere -> .tp_reduce
 *   vocab-parallel logits    split over the vocabulary; cross_entropy reduces max/sum/target
 * Heads follow the split features; kv heads fewer than tp are replicated over tp/kv ranks. A
 * column-parallel linear whose output only chunk(parts = P) reads (GPT-2's fused q, k, v) has its
 * weight split in P parts, each over TP (Megatron's interleaved layout): a rank's output is
 * [q_t | k_t | v_t], and its chunks are the rank's own q, k and v.
 *
 * With sequence parallelism (--sp, Megatron-SP) a value outside attention and the MLP is split
 * along S (its first axis, sequence-first [S,B,...]): rank r holds positions [r·S/tp, (r+1)·S/tp).
 * The row-parallel reduction becomes a reduce-scatter (.tp_scatter), the column-parallel input's
 * .tp_copy an all-gather (.tp_gather, whose gradient is reduce-scattered: the readers' gradients
 * are partial), a replicated value meeting a split one is cut to the rank's positions (.tp_slice,
 * whose gradient is gathered), and the stage-to-stage messages are the rank's positions. A
 * replicated parameter read on split positions (norms, a bias after the reduction) has a partial
 * gradient, summed over the group before the optimizer (grad_reduce). */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

typedef enum Sh { SH_REPL, SH_SPLIT, SH_SEQ } Sh; /* SH_SEQ: split along S (--sp) */

typedef struct T {
  const Graph *g;
  Graph *s;
  int tp;
  int *map;      /* old node -> new node */
  Sh *sh;        /* per new node */
  int *copy_of;  /* per new node: its .tp_copy (with --sp, of a split value: its .tp_gather), -1 */
  int *slice_of; /* per new node: its .tp_slice, -1 */
  bool sp;
  int *kvrep; /* per old param: TP ranks sharing its shard (kv heads < tp), 0 if none */
  bool bad;
} T;

static const IrNode *O(const T *t, int id) { return &t->g->nodes[id]; }
static IrNode *Nn(T *t, int id) { return &t->s->nodes[id]; }

static void grow(T *t) {
  int n = t->s->nnodes;
  t->sh = xrealloc(t->sh, (size_t)(n + 1) * sizeof *t->sh);
  t->copy_of = xrealloc(t->copy_of, (size_t)(n + 1) * sizeof *t->copy_of);
  t->slice_of = xrealloc(t->slice_of, (size_t)(n + 1) * sizeof *t->slice_of);
  t->sh[n - 1] = SH_REPL;
  t->copy_of[n - 1] = -1;
  t->slice_of[n - 1] = -1;
}

/* A new node like old node i (attributes, layer, location) with new inputs and shape. */
static int clone(T *t, int i, int nin, const int *in, Shape shape, Sh sh) {
  int id = ir_add_node(t->s, O(t, i)->op, O(t, i)->loc);
  IrNode *n = Nn(t, id);
  *n = *O(t, i);
  n->nin = nin;
  for (int k = 0; k < nin; k++) n->in[k] = in[k];
  n->shape = shape;
  grow(t);
  t->sh[id] = sh;
  return id;
}

/* A node the pass inserts after `like`, in its layer. */
static int insert(T *t, Op op, int in, int like_old) {
  int id = ir_add(t->s, op, 1, (int[]){in}, Nn(t, in)->shape);
  IrNode *n = Nn(t, id), *src = Nn(t, in);
  n->layout = src->layout;
  n->layer = O(t, like_old)->layer;
  n->region = O(t, like_old)->region;
  n->loc = O(t, like_old)->loc;
  grow(t);
  t->sh[id] = t->sh[in];
  return id;
}

static void fail(T *t, Loc at, const char *msg) {
  diag_error(t->g->src, at, "%s", msg);
  t->bad = true;
}

/* .tp_copy(x): one per value, shared by all its column-parallel readers, so the gradients of
 * q, k and v (or gate and up) are summed once, then reduced once. */
static int tp_copy(T *t, int x, int like_old) {
  if (t->copy_of[x] < 0) {
    int c = insert(t, OP_TP_COPY, x, like_old);
    t->copy_of[x] = c;
  }
  return t->copy_of[x];
}

/* A sequence-split value whole: its .tp_gather, one per value (its readers are column-parallel). */
static int seq_gather(T *t, int x, int like_old) {
  if (t->copy_of[x] < 0) {
    int c = insert(t, OP_TP_GATHER, x, like_old);
    Nn(t, c)->shape.d[0] *= t->tp;
    t->sh[c] = SH_REPL;
    t->copy_of[x] = c;
  }
  return t->copy_of[x];
}

/* A value on the rank's positions: itself when split along S; a replicated sequence-first one cut
 * (.tp_slice, one per value); -1 after an error (split over features, or batch-first). */
static int seq_part(T *t, int x, int like_old, Loc at) {
  if (t->sh[x] == SH_SEQ) return x;
  if (t->sh[x] == SH_SPLIT || Nn(t, x)->layout != LAYOUT_SB) {
    fail(t, at,
         t->sh[x] == SH_SPLIT ? "sequence parallelism: a value split over its features meets one split along the "
                                "sequence"
                              : "sequence parallelism: a batch-first value meets one split along the sequence "
                                "(split values are sequence-first [S,B,...])");
    return -1;
  }
  if (t->slice_of[x] < 0) {
    int c = insert(t, OP_TP_SLICE, x, like_old);
    Nn(t, c)->shape.d[0] /= t->tp;
    t->sh[c] = SH_SEQ;
    t->slice_of[x] = c;
  }
  return t->slice_of[x];
}

/* Replicated parameters read on sequence-split values: their gradients are partial sums. */
static void partial_grads(T *t, const int *in, int from, int nin) {
  for (int k = from; k < nin; k++)
    if (in[k] >= 0 && Nn(t, in[k])->op == OP_PARAM && t->s->params[Nn(t, in[k])->param].shard_dim < 0)
      t->s->params[Nn(t, in[k])->param].grad_reduce = 1;
}

/* The reduction of a row-parallel linear's (or a vocab-parallel embedding's) partial sums: over
 * the group, or with --sp reduce-scattered to the rank's positions of a sequence-first value. */
static int reduce_partial(T *t, int id, int like_old) {
  if (t->sp && Nn(t, id)->layout == LAYOUT_SB) {
    int r = insert(t, OP_TP_SCATTER, id, like_old);
    Nn(t, r)->shape.d[0] /= t->tp;
    t->sh[r] = SH_SEQ;
    return r;
  }
  return insert(t, OP_TP_REDUCE, id, like_old);
}

/* P when every reader of old node lin is a chunk(parts = P), P > 1 (a fused projection, as
 * GPT-2's c_attn: q, k and v side by side); else 1. */
static int chunk_parts(const T *t, int lin) {
  int parts = 0;
  for (int i = lin + 1; i < t->g->nnodes; i++) {
    const IrNode *u = O(t, i);
    for (int k = 0; k < u->nin; k++)
      if (u->in[k] == lin) {
        if (u->op != OP_CHUNK || u->a.parts < 2 || (parts && u->a.parts != parts)) return 1;
        parts = (int)u->a.parts;
      }
  }
  return parts ? parts : 1;
}

/* The parts of a column-parallel parameter (its weight or bias reader's chunk_parts()); -1 after
 * an error: two linears read it, their outputs chunked differently. */
static int param_parts(T *t, int old) {
  const IrParam *q = &t->g->params[O(t, old)->param];
  if (q->role != ROLE_COLUMN) return 1;
  int parts = 0;
  for (int i = old + 1; i < t->g->nnodes; i++) {
    const IrNode *u = O(t, i);
    if ((u->op != OP_LINEAR && u->op != OP_MATMUL) || (u->in[1] != old && (u->nin < 3 || u->in[2] != old))) continue;
    int p = chunk_parts(t, i);
    if (parts && p != parts) {
      fail(t, q->loc,
           "this column-parallel parameter feeds two linears whose outputs are chunked differently: one split "
           "can serve only one of them (give each its own parameter)");
      return -1;
    }
    parts = p;
  }
  return parts ? parts : 1;
}

/* The dimension a parameter's role splits and the local shape, from its first reader. */
static void param(T *t, int old) {
  const IrNode *pn = O(t, old);
  const IrParam *q = &t->g->params[pn->param];
  Graph *s = t->s;
  int pi = ir_copy_param(s, q, pn); /* may move s->params */
  IrParam *c = &s->params[pi];
  grow(t);
  c->shard_dim = -1;
  c->shard_rep = 1;
  c->shard_parts = 1;
  c->grad_reduce = 0;
  int dim = -1;
  if (q->role != ROLE_REPLICATED) {
    dim = 0;
    if (q->shape.nd == 2)
      for (int i = 0; i < t->g->nnodes; i++) {
        const IrNode *u = O(t, i);
        if (u->nin >= 2 && u->in[1] == old && (u->op == OP_LINEAR || u->op == OP_MATMUL)) {
          bool mm = u->op == OP_MATMUL;
          dim = q->role == ROLE_ROW ? (mm ? 0 : 1) : (mm ? 1 : 0);
          break;
        }
      }
  }
  if (dim >= 0) {
    int64_t dense = q->shape.d[dim];
    int64_t local = q->role == ROLE_VOCAB ? vocab_pad_rows(dense, t->tp, t->g->cfg.vocab_pad) : dense / t->tp;
    if (t->kvrep[pn->param]) { /* one kv head per rank, shared by kvrep ranks */
      int64_t heads = t->tp / t->kvrep[pn->param];
      local = dense / heads;
      c->shard_rep = t->kvrep[pn->param];
      c->grad_reduce = 2;
    }
    int parts = param_parts(t, old);
    if (parts < 0) return;
    if (parts > 1) { /* P blocks, each split over TP: the rank's rows of every block */
      if (dense % parts || (dense / parts) % t->tp) {
        diag_error(t->g->src, q->loc,
                   "tensor-parallel degree %d does not divide the %lld rows of each of the %d parts of dimension %d "
                   "(%s) of '%s': its linear's output is read by chunk(parts = %d), and each rank holds its rows of "
                   "every part",
                   t->tp, (long long)(dense / parts), parts, dim, q->dim_text[dim] ? q->dim_text[dim] : "?", q->name,
                   parts);
        t->bad = true;
        return;
      }
      c->shard_parts = parts;
    }
    c->shard_dim = dim;
    c->dense_len = dense;
    c->shape.d[dim] = local;
  }
  Nn(t, c->node)->shape = c->shape;
  t->sh[c->node] = dim >= 0 ? SH_SPLIT : SH_REPL;
  t->map[old] = c->node;
}

/* kv heads fewer than tp: the projections feeding those heads are replicated per head. */
static void find_kv_replication(T *t) {
  for (int i = 0; i < t->g->nnodes; i++) {
    const IrNode *n = O(t, i);
    if (n->op != OP_SPLIT_HEADS || n->a.heads >= t->tp) continue;
    const IrNode *lin = O(t, n->in[0]);
    if (lin->op != OP_LINEAR && lin->op != OP_MATMUL) continue;
    const IrNode *w = O(t, lin->in[1]);
    if (w->op == OP_PARAM && t->g->params[w->param].role == ROLE_COLUMN && t->tp % n->a.heads == 0)
      t->kvrep[w->param] = (int)(t->tp / n->a.heads);
  }
}

static Shape with_last(Shape s, int64_t v) {
  s.d[s.nd - 1] = v;
  return s;
}

static void node(T *t, int i) {
  const IrNode *n = O(t, i);
  int in[6] = {-1, -1, -1, -1, -1, -1};
  for (int k = 0; k < n->nin; k++) in[k] = t->map[n->in[k]];
  Sh s0 = n->nin ? t->sh[in[0]] : SH_REPL;
  Shape x = n->nin ? Nn(t, in[0])->shape : n->shape;
  int id = -1; /* every case sets it or returns */
  switch (n->op) {
  case OP_INPUT:
  case OP_RECV_FORWARD:
    id = ir_add_node(t->s, n->op, n->loc);
    *Nn(t, id) = *n;
    grow(t);
    if (n->op == OP_INPUT) {
      Nn(t, id)->param = t->s->ninputs;
      t->s->inputs[t->s->ninputs] = t->g->inputs[n->param];
      t->s->inputs[t->s->ninputs++].node = id;
    } else if (t->sp) { /* the previous stage's rank sends its positions */
      Nn(t, id)->shape.d[0] /= t->tp;
      t->sh[id] = SH_SEQ;
    }
    t->map[i] = id;
    return;
  case OP_EMBEDDING: {
    const IrParam *q = &t->s->params[Nn(t, in[1])->param];
    id = clone(t, i, 2, in, n->shape, SH_REPL);
    if (q->shard_dim == 0) { /* vocab-parallel: my rows, zeros elsewhere, then summed */
      Nn(t, id)->a.vlocal = q->shape.d[0];
      Nn(t, id)->a.vtotal = q->dense_len;
      id = reduce_partial(t, id, i);
    }
    break;
  }
  case OP_LINEAR:
  case OP_MATMUL: {
    const IrParam *q = &t->s->params[Nn(t, in[1])->param];
    bool lin = n->op == OP_LINEAR;
    int64_t nout = Nn(t, in[1])->shape.d[lin ? 0 : 1];
    if (q->role == ROLE_ROW) {
      if (s0 != SH_SPLIT) {
        fail(t, n->loc,
             "a row-parallel linear needs an input split over its features (the output of a "
             "column-parallel linear); this one is replicated");
        return;
      }
      id = clone(t, i, 2, in, with_last(x, nout), SH_REPL); /* partial sums */
      id = reduce_partial(t, id, i);
      if (n->nin == 3) { /* the bias once, after the reduction */
        int b = ir_add(t->s, OP_ADD_BIAS, 2, (int[]){id, in[2]}, Nn(t, id)->shape);
        Nn(t, b)->layout = Nn(t, id)->layout;
        Nn(t, b)->layer = n->layer, Nn(t, b)->region = n->region, Nn(t, b)->loc = n->loc;
        grow(t);
        t->sh[b] = t->sh[id];
        if (t->sh[b] == SH_SEQ) partial_grads(t, in, 2, 3);
        id = b;
      }
    } else if (q->role == ROLE_COLUMN || q->role == ROLE_VOCAB) {
      if (s0 == SH_SEQ) { /* the whole sequence, gathered; the gradient reduce-scattered */
        in[0] = seq_gather(t, in[0], i);
        id = clone(t, i, n->nin, in, with_last(Nn(t, in[0])->shape, nout), SH_SPLIT);
        break;
      }
      if (s0 != SH_REPL) {
        fail(t, n->loc, "a column-parallel linear needs a replicated input; this one is split by tensor parallelism");
        return;
      }
      if (n->nin == 3 && t->s->params[Nn(t, in[2])->param].shard_dim < 0) {
        fail(t, n->loc, "the bias of a column-parallel linear is split with its outputs: declare it 'tp column'");
        return;
      }
      in[0] = tp_copy(t, in[0], i);
      id = clone(t, i, n->nin, in, with_last(x, nout), SH_SPLIT);
    } else {
      if (s0 == SH_SPLIT) {
        fail(t, n->loc,
             "a replicated linear needs a replicated input; this one is split by tensor parallelism: "
             "make the weight row-parallel ('tp row')");
        return;
      }
      id = clone(t, i, n->nin, in, with_last(x, nout), s0); /* per position: split along S, or not */
      if (s0 == SH_SEQ) partial_grads(t, in, 1, n->nin);
    }
    break;
  }
  case OP_RMSNORM:
  case OP_LAYERNORM:
    if (s0 == SH_SPLIT && x.nd != 4) {
      fail(t, n->loc, "this norm runs over features split by tensor parallelism; normalise a replicated value");
      return;
    }
    id = clone(t, i, n->nin, in, x, s0);
    /* per-head norm weights on split heads (or on split positions): each rank sees its heads (its
     * positions) only, so the gradient is a partial sum: reduced over the TP group before the
     * optimizer */
    if (s0 != SH_REPL)
      for (int k = 1; k < n->nin; k++) t->s->params[Nn(t, in[k])->param].grad_reduce = 1;
    break;
  case OP_SPLIT_HEADS: {
    int64_t D = n->shape.d[3];
    if (s0 == SH_SPLIT && x.d[2] % D) {
      diag_error(t->g->src, n->loc,
                 "tensor parallelism leaves %lld features per rank here, not a whole number of heads of %lld: "
                 "tensor-parallel degree %d must divide the heads",
                 (long long)x.d[2], (long long)D, t->tp);
      t->bad = true;
      return;
    }
    id = clone(t, i, 1, in, (Shape){4, {x.d[0], x.d[1], x.d[2] / D, D}}, s0);
    Nn(t, id)->a.heads = x.d[2] / D;
    break;
  }
  case OP_MERGE_HEADS: id = clone(t, i, 1, in, (Shape){3, {x.d[0], x.d[1], x.d[2] * x.d[3]}}, s0); break;
  case OP_ATTENTION:
    for (int k = 0; k < 3; k++)
      if (t->sh[in[k]] == SH_SEQ) {
        fail(t, n->loc,
             "sequence parallelism: attention reads the whole sequence: its q, k and v must come from "
             "column-parallel linears (which gather it)");
        return;
      }
    for (int k = 1; k < 3; k++)
      if (t->sh[in[k]] != s0) {
        fail(t, n->loc, "query, key and value must all be split over heads, or all replicated");
        return;
      }
    id = clone(t, i, 3, in, x, s0);
    break;
  case OP_ADD:
  case OP_MUL:
    if ((s0 == SH_SEQ) != (t->sh[in[1]] == SH_SEQ)) { /* the replicated side cut to the rank's positions */
      for (int k = 0; k < 2; k++)
        if ((in[k] = seq_part(t, in[k], i, n->loc)) < 0) return;
      s0 = SH_SEQ;
      x = Nn(t, in[0])->shape;
    }
    if (t->sh[in[1]] != s0) {
      fail(t, n->loc, "one operand is split by tensor parallelism and the other is not");
      return;
    }
    id = clone(t, i, 2, in, x, s0);
    break;
  case OP_CHUNK:
    if (s0 == SH_SPLIT) { /* the output of a linear whose weight holds the rank's rows of each part */
      const IrNode *lin = Nn(t, in[0]);
      bool parted = (lin->op == OP_LINEAR || lin->op == OP_MATMUL) && Nn(t, lin->in[1])->op == OP_PARAM &&
                    t->s->params[Nn(t, lin->in[1])->param].shard_parts == n->a.parts;
      if (!parted) {
        fail(t, n->loc,
             "chunk of a value split by tensor parallelism: only the output of a column-parallel linear or "
             "matmul whose every reader is a chunk with the same parts can be split in parts (each rank then "
             "holds its rows of every part); otherwise keep the fused projection replicated");
        return;
      }
    }
    id = clone(t, i, 1, in, with_last(x, x.d[x.nd - 1] / n->a.parts), s0);
    break;
  case OP_TRANSPOSE_SB: {
    if (s0 == SH_SEQ) { /* batch-first values are whole: gathered (ir_transpose.c puts the head's here) */
      int u = insert(t, OP_TP_UNSPLIT, in[0], i);
      Nn(t, u)->shape.d[0] *= t->tp;
      t->sh[u] = s0 = SH_REPL;
      in[0] = u;
      x = Nn(t, u)->shape;
    }
    Shape y = x;
    y.d[0] = x.d[1], y.d[1] = x.d[0];
    id = clone(t, i, 1, in, y, s0);
    break;
  }
  case OP_CROSS_ENTROPY:
    id = clone(t, i, 2, in, n->shape, SH_REPL);
    if (s0 == SH_SPLIT) { /* vocab-parallel: the head's weight is the (tied) vocab table */
      Nn(t, id)->a.vlocal = x.d[2];
      Nn(t, id)->a.vtotal = t->g->vocab;
    }
    break;
  case OP_LOGITS:
    id = clone(t, i, 1, in, x, s0);
    if (s0 == SH_SPLIT) { /* vocab-parallel: each rank holds its columns */
      Nn(t, id)->a.vlocal = x.d[2];
      Nn(t, id)->a.vtotal = t->g->vocab;
    }
    break;
  case OP_SEND_FORWARD:
    if (s0 == SH_SPLIT) {
      fail(t, n->loc, "the hidden state sent to the next stage must be replicated over tensor parallelism");
      return;
    }
    if (t->sp) { /* the rank's positions */
      if ((in[0] = seq_part(t, in[0], i, n->loc)) < 0) return;
      id = clone(t, i, 1, in, Nn(t, in[0])->shape, SH_SEQ);
      break;
    }
    id = clone(t, i, 1, in, x, SH_REPL);
    break;
  case OP_POS_EMBEDDING:
    if (s0 == SH_SPLIT) {
      fail(t, n->loc, "a position-embedding table is replicated over tensor parallelism: drop its 'tp' role");
      return;
    }
    id = clone(t, i, 1, in, n->shape, SH_REPL);
    break;
  /* per position or per element: the input's shape and sharding (rope's heads are split with
   * the features) */
  case OP_ROPE:
    if (s0 == SH_SEQ) {
      fail(t, n->loc,
           "sequence parallelism: rope of a value split along the sequence: rotate q and k, which the "
           "column-parallel linears compute on the whole sequence");
      return;
    }
    id = clone(t, i, 1, in, x, s0);
    break;
  case OP_SILU:
  case OP_GELU:
  case OP_RELU:
  case OP_SCALE:
  case OP_SOFTCAP: id = clone(t, i, n->nin, in, n->nin ? x : n->shape, s0); break;
  case OP_DROPOUT: /* its mask is drawn by the element's index in the whole value: one every rank has */
    if (s0 == SH_SPLIT) {
      fail(t, n->loc,
           "dropout of a value split by tensor parallelism: apply it to a replicated value (after a row-parallel "
           "linear's reduction, as Megatron does), whose elements every rank numbers alike");
      return;
    }
    id = clone(t, i, 1, in, x, s0);
    Nn(t, id)->a.seqshard = s0 == SH_SEQ; /* its elements are numbered from the rank's first position */
    break;
  case OP_PARAM:
    diag_fatal("internal: tp_shard's node() given a parameter: param() shards those");
  /* made by this pass, or by autodiff after it: never in the forward graph it shards */
  OP_CASES_TP:
  OP_CASES_BWD:
  OP_CASES_BWD_ELEM:
    diag_fatal("internal: %s in the graph tp_shard shards: it is made by a later pass", ir_ops[n->op].name);
  }
  if (i == t->g->loss) t->s->loss = id;
  t->map[i] = id;
}

Graph *tp_shard(const Graph *g) {
  T t = {.g = g, .tp = (int)g->cfg.tp, .sp = g->cfg.sp && g->cfg.tp > 1 && !g->infer};
  Graph *s = ir_clone_header(g);
  t.s = s;
  t.map = xmalloc((size_t)g->nnodes * sizeof *t.map);
  t.kvrep = xcalloc((size_t)g->nparams + 1, sizeof *t.kvrep);
  find_kv_replication(&t);
  for (int i = 0; i < g->nnodes && !t.bad; i++) {
    if (g->nodes[i].op == OP_PARAM) param(&t, i);
    else node(&t, i);
  }
  free(t.map);
  free(t.kvrep);
  free(t.sh);
  free(t.copy_of);
  free(t.slice_of);
  if (t.bad || ir_verify(s)) {
    ir_free(s);
    return NULL;
  }
  return s;
}
