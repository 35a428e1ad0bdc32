/* ir_infer.c — one op call: its arguments checked against the op table (inputs, attributes and
 * their defaults), then the shape, dtype and layout of its result by the op's rule, with a located
 * error for every call that breaks it. */
#include <math.h>
#include <string.h>

#include "ppc.h"

static IrNode *N(Builder *b, int id) { return &ir_build_graph(b)->nodes[id]; }

static const char *sh(const Shape *s, char *buf) { return ir_shape_str(s, buf, 96); }

/* The value must be a parameter (its gradient is what training is for). */
static int want_param(Builder *b, const Expr *e, int id, const char *what, const char *op) {
  if (N(b, id)->op == OP_PARAM) return 0;
  ir_build_err(b, e->loc, "%s of %s must be a parameter", what, op);
  return 1;
}

static int want_rank(Builder *b, const Expr *e, int id, int nd, const char *what, const char *op) {
  char s1[96];
  if (N(b, id)->shape.nd == nd) return 0;
  ir_build_err(b, e->loc, "%s of %s must have %d dimension%s, got %s", what, op, nd, nd == 1 ? "" : "s",
               sh(&N(b, id)->shape, s1));
  return 1;
}

static int want_f32(Builder *b, const Expr *e, int id, const char *op) {
  if (N(b, id)->dtype == PP_F32) return 0;
  ir_build_err(b, e->loc, "%s expects a float tensor; this is an integer input", op);
  return 1;
}

static int want_layout(Builder *b, const Expr *e, int id, Layout want, const char *op) {
  if (N(b, id)->layout == want) return 0;
  if (want == LAYOUT_SB)
    ir_build_err(b, e->loc, "%s works on sequence-first activations [S,B,...]%s", op,
                 N(b, id)->layout == LAYOUT_BS ? "; this one is batch-first (after transpose_sb)" : "");
  else
    ir_build_err(b, e->loc, "%s expects batch-first logits [B,S,V]%s", op,
                 N(b, id)->layout == LAYOUT_SB ? "; these are sequence-first [S,B,V]: apply transpose_sb first" : "");
  return 1;
}

/* The input must be a declared input; its use (token ids or labels) is fixed by the first op. */
static int want_input(Builder *b, const Expr *e, int id, InputUse use, const char *op) {
  if (N(b, id)->op != OP_INPUT) {
    ir_build_err(b, e->loc, "%s takes %s: an input declared as i32[B, S]", op,
                 use == USE_TOKENS ? "token ids" : "labels");
    return 1;
  }
  IrInput *in = &ir_build_graph(b)->inputs[N(b, id)->param];
  if (in->use != USE_NONE && in->use != use) {
    ir_build_err(b, e->loc, "input '%s' is already used as %s", in->var,
                 in->use == USE_TOKENS ? "token ids" : "labels");
    return 1;
  }
  in->use = use;
  return 0;
}

typedef struct Call {
  const Expr *e;
  Op op;
  const Expr *pos[4]; /* positional tensor arguments */
  int in[4];
  int npos;
  IrAttrs a;
  int has[8]; /* per attribute index in the op's spec: given */
} Call;

/* Parse "eps:f?,causal:b?" entry k: its key, type and whether it is optional. */
static int attr_spec(const char *spec, int k, char *key, char *type, int *optional) {
  for (int i = 0; *spec; i++) {
    const char *end = strchr(spec, ',');
    size_t len = end ? (size_t)(end - spec) : strlen(spec);
    if (i == k) {
      size_t klen = (size_t)(strchr(spec, ':') - spec);
      memcpy(key, spec, klen);
      key[klen] = 0;
      *type = spec[klen + 1];
      *optional = spec[len - 1] == '?';
      return 1;
    }
    spec += len + (end ? 1 : 0);
  }
  return 0;
}

static void attr_names(const char *spec, char *out, size_t n) {
  char key[32], type;
  int opt;
  out[0] = 0;
  for (int k = 0; attr_spec(spec, k, key, &type, &opt); k++)
    snprintf(out + strlen(out), n - strlen(out), "%s%s", k ? ", " : "", key);
}

static int set_attr(Builder *b, Call *c, int k, const char *key, char type, const Expr *val) {
  if (type == 'b') return 0; /* flags carry no value; handled by the caller */
  if (type == 'i') {
    int64_t v;
    if (ir_build_eval_int(b, val, &v)) return 1;
    if (!strcmp(key, "heads")) c->a.heads = v;
    if (!strcmp(key, "index")) c->a.index = v;
    if (!strcmp(key, "parts")) c->a.parts = v;
    if (!strcmp(key, "original_max_pos")) c->a.original_max_pos = v;
    if (!strcmp(key, "window")) { /* 0: none (a window that depends on the layer: Gemma 2's) */
      if (v < 0) {
        ir_build_err(b, val->loc, "attention's window is %lld: expected a number of positions (0: none)", (long long)v);
        c->has[k] = 1;
        return 1;
      }
      c->a.window = v;
    }
    if (!strcmp(key, "ignore_index")) {
      if (v < INT32_MIN || v > INT32_MAX) {
        ir_build_err(b, val->loc, "ignore_index %lld is not a 32-bit label (labels are int32)", (long long)v);
        return 1;
      }
      c->a.masked = true;
      c->a.ignore_index = v;
    }
  } else {
    double v;
    if (ir_build_eval_float(b, val, &v)) return 1;
    if (!strcmp(key, "eps")) c->a.eps = v;
    if (!strcmp(key, "theta")) c->a.theta = v;
    if (!strcmp(key, "scale") || !strcmp(key, "by")) c->a.scale = v;
    if (!strcmp(key, "offset")) c->a.offset = v;
    if (!strcmp(key, "cap") || !strcmp(key, "softcap")) {
      if (!(v > 0) || !isfinite(v)) {
        ir_build_err(b, val->loc, "%s is %g: expected a positive number (the largest magnitude it lets through)", key,
                     v);
        c->has[k] = 1;
        return 1;
      }
      c->a.cap = v;
    }
    if (!isfinite(v)) {
      ir_build_err(b, val->loc, "%s is %g: expected a finite number", key, v);
      c->has[k] = 1;
      return 1;
    }
    if (!strcmp(key, "factor")) c->a.factor = v;
    if (!strcmp(key, "low_freq_factor")) c->a.low_freq_factor = v;
    if (!strcmp(key, "high_freq_factor")) c->a.high_freq_factor = v;
    if (!strcmp(key, "p")) {
      if (!(v >= 0 && v < 1)) {
        ir_build_err(b, val->loc, "dropout's p is %g: expected 0 <= p < 1 (the probability of dropping an element)", v);
        c->has[k] = 1; /* given, if wrong: no second error saying it is missing */
        return 1;
      }
      c->a.p = v;
    }
  }
  c->has[k] = 1;
  return 0;
}

/* Sort a call's arguments into tensors and attributes, checking names, arity and presence. */
static int read_call(Builder *b, const Expr *e, Call *c) {
  const OpInfo *info = &ir_ops[c->op];
  char key[32], type, names[128];
  int opt, bad = 0;
  attr_names(info->attrs, names, sizeof names);
  for (const Arg *a = e->args; a; a = a->next) {
    if (a->key) {
      int k = 0;
      while (attr_spec(info->attrs, k, key, &type, &opt) && strcmp(key, a->key)) k++;
      if (!attr_spec(info->attrs, k, key, &type, &opt)) {
        if (names[0]) ir_build_err(b, a->key_loc, "%s has no attribute '%s' (it takes: %s)", info->name, a->key, names);
        else ir_build_err(b, a->key_loc, "%s takes no attributes, got '%s'", info->name, a->key);
        bad = 1;
        continue;
      }
      if (c->has[k]) {
        ir_build_err(b, a->key_loc, "attribute '%s' given twice", a->key);
        bad = 1;
        continue;
      }
      if (type == 'b') {
        ir_build_err(b, a->key_loc, "'%s' is a flag: write it alone, without '='", a->key);
        bad = 1;
        continue;
      }
      bad |= set_attr(b, c, k, key, type, a->val);
      continue;
    }
    /* a bare name that is one of the op's flags */
    if (a->val->kind == E_NAME) {
      int k = 0, flag = 0;
      while (attr_spec(info->attrs, k, key, &type, &opt)) {
        if (type == 'b' && !strcmp(key, a->val->name)) {
          flag = 1;
          break;
        }
        k++;
      }
      if (flag) {
        if (c->has[k]) {
          ir_build_err(b, a->val->loc, "flag '%s' given twice", key);
          bad = 1;
        }
        c->has[k] = 1;
        if (!strcmp(key, "causal")) c->a.causal = true;
        if (!strcmp(key, "llama3")) c->a.llama3 = true;
        continue;
      }
    }
    if (c->npos == 4 || c->npos >= info->max_in) {
      ir_build_err(b, a->val->loc, "too many inputs: %s takes %s%d", info->name,
                   info->min_in == info->max_in ? "" : "at most ", info->max_in);
      return 1;
    }
    c->pos[c->npos++] = a->val;
  }
  if (c->npos < info->min_in) {
    ir_build_err(b, e->loc, "%s takes %s%d input%s, got %d", info->name,
                 info->min_in == info->max_in ? "" : "at least ", info->min_in, info->min_in == 1 ? "" : "s", c->npos);
    return 1;
  }
  for (int k = 0; attr_spec(info->attrs, k, key, &type, &opt); k++)
    if (!opt && !c->has[k]) {
      ir_build_err(b, e->loc, "%s needs the attribute %s=", info->name, key);
      bad = 1;
    }
  if (bad) return 1;
  for (int i = 0; i < c->npos; i++)
    if ((c->in[i] = ir_build_tensor(b, c->pos[i])) < 0) return 1;
  return 0;
}

static void set_defaults(Call *c) {
  if (c->op == OP_RMSNORM && !c->has[0]) c->a.eps = 1e-6;
  if (c->op == OP_LAYERNORM && !c->has[0]) c->a.eps = 1e-5;
  if (c->op == OP_ROPE && !c->has[0]) c->a.theta = 10000.0;
}

/* rope's Llama-3 frequency scaling: the flag llama3 and its four attributes, all or none (the
 * attributes are has[2..5] in ROPE_ATTRS). 0, or 1 after reporting. */
static int rope_scaling(Builder *b, const Call *c) {
  static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_pos"};
  for (int k = 0; k < 4; k++) {
    if (c->a.llama3 && !c->has[2 + k]) {
      ir_build_err(b, c->e->loc, "rope with llama3 scaling needs the attribute %s=", keys[k]);
      return 1;
    }
    if (!c->a.llama3 && c->has[2 + k]) {
      ir_build_err(b, c->e->loc, "rope's %s= belongs to the llama3 frequency scaling: add the flag llama3", keys[k]);
      return 1;
    }
  }
  if (!c->a.llama3) return 0;
  const char *bad = c->a.factor <= 0            ? "factor must be positive"
                    : c->a.low_freq_factor <= 0 ? "low_freq_factor must be positive"
                    : c->a.high_freq_factor <= c->a.low_freq_factor
                        ? "high_freq_factor must be greater than low_freq_factor"
                    : c->a.original_max_pos <= 0 ? "original_max_pos must be positive"
                                                 : NULL;
  if (bad) ir_build_err(b, c->e->loc, "%s", bad);
  return bad != NULL;
}

/* Shape, dtype and layout of one op; returns the node or -1 after reporting. */
static int infer(Builder *b, Call *c) {
  const Expr *e = c->e, **p = c->pos;
  const char *op = ir_ops[c->op].name;
  int *in = c->in;
  Graph *g = ir_build_graph(b);
  const Config *cfg = &g->cfg;
  char s1[96], s2[96];
  Shape out = {0};
  Layout lay = LAYOUT_NONE;

  for (int i = 0; i < c->npos; i++) {
    bool ids = (c->op == OP_EMBEDDING && i == 0) || (c->op == OP_CROSS_ENTROPY && i == 1);
    if (N(b, in[i])->op == OP_INPUT && !ids) {
      ir_build_err(b, p[i]->loc,
                   "'%s' is an integer input: only embedding (token ids) and cross_entropy (labels) read inputs",
                   N(b, in[i])->var);
      return -1;
    }
    if (N(b, in[i])->op != OP_INPUT && want_f32(b, p[i], in[i], op)) return -1;
  }

  switch (c->op) {
  case OP_EMBEDDING: {
    if (want_input(b, p[0], in[0], USE_TOKENS, op) || want_param(b, p[1], in[1], "the table", op) ||
        want_rank(b, p[1], in[1], 2, "the table", op))
      return -1;
    out = (Shape){3, {ir_seq_local(cfg), cfg->micro_batch, N(b, in[1])->shape.d[1]}};
    lay = LAYOUT_SB;
    g->vocab = N(b, in[1])->shape.d[0];
    break;
  }
  case OP_POS_EMBEDDING: {
    if (want_param(b, p[0], in[0], "the table", op) || want_rank(b, p[0], in[0], 2, "the table", op)) return -1;
    int64_t npos = N(b, in[0])->shape.d[0];
    if (cfg->seq > npos) {
      ir_build_err(b, e->loc, "the sequence length S=%lld exceeds the %lld positions of the table", (long long)cfg->seq,
                   (long long)npos);
      return -1;
    }
    out = (Shape){3, {ir_seq_local(cfg), cfg->micro_batch, N(b, in[0])->shape.d[1]}};
    lay = LAYOUT_SB;
    break;
  }
  case OP_LINEAR:
  case OP_MATMUL: {
    int lin = c->op == OP_LINEAR;
    if (want_param(b, p[1], in[1], "the weight", op) || want_rank(b, p[1], in[1], 2, "the weight", op)) return -1;
    const Shape *x = &N(b, in[0])->shape, *w = &N(b, in[1])->shape;
    if (x->nd < 1) {
      ir_build_err(b, p[0]->loc, "%s needs a tensor with a feature dimension", op);
      return -1;
    }
    int64_t k = lin ? w->d[1] : w->d[0], n = lin ? w->d[0] : w->d[1];
    if (x->d[x->nd - 1] != k) {
      ir_build_err(b, e->loc,
                   "shape mismatch in %s: the input %s has %lld features but the weight %s expects %lld (%s)", op,
                   sh(x, s1), (long long)x->d[x->nd - 1], sh(w, s2), (long long)k,
                   lin ? "linear weights are [out, in]" : "matmul weights are [in, out]");
      return -1;
    }
    if (c->npos == 3) {
      const Shape *bs = &N(b, in[2])->shape;
      if (want_param(b, p[2], in[2], "the bias", op)) return -1;
      if (bs->nd != 1 || bs->d[0] != n) {
        ir_build_err(b, p[2]->loc, "shape mismatch in %s: the bias is %s, expected [%lld]", op, sh(bs, s1),
                     (long long)n);
        return -1;
      }
    }
    out = *x;
    out.d[out.nd - 1] = n;
    lay = N(b, in[0])->layout;
    break;
  }
  case OP_RMSNORM:
  case OP_LAYERNORM: {
    const Shape *x = &N(b, in[0])->shape;
    for (int i = 1; i < c->npos; i++) {
      const char *what = i == 1 ? "the weight" : "the bias";
      if (want_param(b, p[i], in[i], what, op)) return -1;
      const Shape *w = &N(b, in[i])->shape;
      if (x->nd < 1 || w->nd != 1 || w->d[0] != x->d[x->nd - 1]) {
        ir_build_err(b, p[i]->loc, "shape mismatch in %s: %s is %s but the input %s normalises over its last dimension",
                     op, what, sh(w, s1), sh(x, s2));
        return -1;
      }
    }
    if (c->a.eps <= 0) {
      ir_build_err(b, e->loc, "eps must be positive");
      return -1;
    }
    out = *x;
    lay = N(b, in[0])->layout;
    break;
  }
  case OP_ROPE: {
    const Shape *x = &N(b, in[0])->shape;
    if (want_layout(b, p[0], in[0], LAYOUT_SB, op) || want_rank(b, p[0], in[0], 4, "the input", op)) return -1;
    if (x->d[3] % 2) {
      ir_build_err(b, p[0]->loc, "rope needs an even head dimension, got %lld", (long long)x->d[3]);
      return -1;
    }
    if (c->a.theta <= 0) {
      ir_build_err(b, e->loc, "theta must be positive");
      return -1;
    }
    if (rope_scaling(b, c)) return -1;
    out = *x;
    lay = LAYOUT_SB;
    break;
  }
  case OP_SPLIT_HEADS: {
    const Shape *x = &N(b, in[0])->shape;
    if (want_rank(b, p[0], in[0], 3, "the input", op)) return -1;
    if (c->a.heads <= 0 || x->d[2] % c->a.heads) {
      ir_build_err(b, e->loc, "split_heads: %lld heads do not divide the %lld features of %s", (long long)c->a.heads,
                   (long long)x->d[2], sh(x, s1));
      return -1;
    }
    out = (Shape){4, {x->d[0], x->d[1], c->a.heads, x->d[2] / c->a.heads}};
    lay = N(b, in[0])->layout;
    break;
  }
  case OP_MERGE_HEADS: {
    const Shape *x = &N(b, in[0])->shape;
    if (want_rank(b, p[0], in[0], 4, "the input", op)) return -1;
    out = (Shape){3, {x->d[0], x->d[1], x->d[2] * x->d[3]}};
    lay = N(b, in[0])->layout;
    break;
  }
  case OP_ATTENTION: {
    static const char *what[] = {"the query", "the key", "the value"};
    for (int i = 0; i < 3; i++)
      if (want_rank(b, p[i], in[i], 4, what[i], op) || want_layout(b, p[i], in[i], LAYOUT_SB, op)) return -1;
    const Shape *q = &N(b, in[0])->shape, *k = &N(b, in[1])->shape, *v = &N(b, in[2])->shape;
    if (!ir_shape_eq(k, v)) {
      ir_build_err(b, e->loc, "shape mismatch in attention: key %s and value %s differ", sh(k, s1), sh(v, s2));
      return -1;
    }
    if (q->d[0] != k->d[0] || q->d[1] != k->d[1] || q->d[3] != k->d[3]) {
      ir_build_err(b, e->loc, "shape mismatch in attention: query %s and key %s must agree in S, B and head size",
                   sh(q, s1), sh(k, s2));
      return -1;
    }
    if (q->d[2] % k->d[2]) {
      ir_build_err(b, e->loc, "the %lld key/value heads must divide the %lld query heads (grouped-query attention)",
                   (long long)k->d[2], (long long)q->d[2]);
      return -1;
    }
    int64_t tp = cfg->tp;
    if (tp > 1 && q->d[2] % tp) {
      ir_build_err(b, e->loc, "tensor-parallel degree %lld does not divide the %lld query heads", (long long)tp,
                   (long long)q->d[2]);
      return -1;
    }
    if (tp > 1 && k->d[2] % tp && tp % k->d[2]) {
      ir_build_err(b, e->loc,
                   "tensor-parallel degree %lld neither divides the %lld key/value heads nor is a multiple of them",
                   (long long)tp, (long long)k->d[2]);
      return -1;
    }
    if (c->a.cap > 0 && cfg->att_gemm) {
      ir_build_err(b, e->loc, "softcap applies to attention = fused (the GEMM path's softmax kernels do not cap)");
      return -1;
    }
    if (c->a.window && !c->a.causal) {
      ir_build_err(b, e->loc, "a sliding window needs causal attention: add the flag causal");
      return -1;
    }
    if (!c->has[1]) c->a.scale = 1.0 / sqrt((double)q->d[3]);
    if (!(c->a.scale > 0)) {
      ir_build_err(b, e->loc, "scale must be positive");
      return -1;
    }
    out = *q;
    lay = LAYOUT_SB;
    break;
  }
  case OP_SILU:
  case OP_GELU:
  case OP_RELU:
  case OP_SCALE:
  case OP_SOFTCAP:
    out = N(b, in[0])->shape;
    lay = N(b, in[0])->layout;
    break;
  case OP_DROPOUT:
    out = N(b, in[0])->shape;
    lay = N(b, in[0])->layout;
    if (g->ndropout >= PP_DROPOUT_MAX) {
      ir_build_err(b, e->loc, "more than %d dropout calls in the model", PP_DROPOUT_MAX);
      return -1;
    }
    c->a.dropid = g->ndropout++; /* in the order of the source: the same op on every stage */
    break;
  case OP_ADD:
  case OP_MUL: {
    const Shape *x = &N(b, in[0])->shape, *y = &N(b, in[1])->shape;
    if (!ir_shape_eq(x, y)) {
      ir_build_err(b, e->loc, "shape mismatch in '%c': %s vs %s", c->op == OP_ADD ? '+' : '*', sh(x, s1), sh(y, s2));
      return -1;
    }
    Layout lx = N(b, in[0])->layout, ly = N(b, in[1])->layout;
    if (lx && ly && lx != ly) {
      ir_build_err(b, e->loc, "layout mismatch in '%c': one side is sequence-first, the other batch-first",
                   c->op == OP_ADD ? '+' : '*');
      return -1;
    }
    out = *x;
    lay = lx ? lx : ly;
    break;
  }
  case OP_CHUNK: {
    const Shape *x = &N(b, in[0])->shape;
    if (c->a.parts <= 0 || x->nd < 1 || x->d[x->nd - 1] % c->a.parts) {
      ir_build_err(b, e->loc, "chunk: %lld parts do not divide the last dimension of %s", (long long)c->a.parts,
                   sh(x, s1));
      return -1;
    }
    if (c->a.index < 0 || c->a.index >= c->a.parts) {
      ir_build_err(b, e->loc, "chunk: index %lld is outside 0..%lld", (long long)c->a.index, (long long)c->a.parts - 1);
      return -1;
    }
    out = *x;
    out.d[out.nd - 1] /= c->a.parts;
    lay = N(b, in[0])->layout;
    break;
  }
  case OP_TRANSPOSE_SB: {
    Layout l = N(b, in[0])->layout;
    if (l == LAYOUT_NONE) {
      ir_build_err(b, p[0]->loc, "transpose_sb needs an activation with [S,B] or [B,S] leading axes");
      return -1;
    }
    out = N(b, in[0])->shape;
    int64_t t = out.d[0];
    out.d[0] = out.d[1];
    out.d[1] = t;
    lay = l == LAYOUT_SB ? LAYOUT_BS : LAYOUT_SB;
    break;
  }
  case OP_CROSS_ENTROPY: {
    if (want_input(b, p[1], in[1], USE_LABELS, op) || want_rank(b, p[0], in[0], 3, "the logits", op) ||
        want_layout(b, p[0], in[0], LAYOUT_BS, op))
      return -1;
    if (g->loss >= 0) {
      ir_build_err(b, e->loc, "a second loss: the model must have exactly one cross_entropy");
      diag_note(g->src, N(b, g->loss)->loc, "the first is here");
      return -1;
    }
    out = (Shape){0, {0}};
    lay = LAYOUT_NONE;
    break;
  }
  /* not callable (a '.' name): ir_infer_call() finds the ops above only */
  OP_CASES_LEAF:
  OP_CASES_BWD:
  OP_CASES_BWD_ELEM:
  OP_CASES_PP:
  OP_CASES_TP:
    diag_fatal("internal: a call of %s, which the language cannot call", op);
  }
  int64_t numel = 1;
  for (int i = 0; i < out.nd; i++)
    if (__builtin_mul_overflow(numel, out.d[i], &numel) || numel > PP_MAX_NUMEL) {
      ir_build_err(b, e->loc, "the result of %s would have more than 2^40 elements", op);
      return -1;
    }
  int id = ir_build_node(b, c->op, e->loc);
  IrNode *n = N(b, id);
  n->nin = c->npos;
  memcpy(n->in, c->in, sizeof n->in[0] * (size_t)c->npos);
  n->shape = out;
  n->layout = lay;
  n->a = c->a;
  if (c->op == OP_CROSS_ENTROPY) {
    g->loss = id;
    g->loss_masked = c->a.masked;
    g->ignore_index = c->a.ignore_index;
  }
  return id;
}

/* a + b, a * b */
int ir_infer_binary(Builder *b, const Expr *e) {
  if (e->op != '+' && e->op != '*') {
    ir_build_err(b, e->loc, "'%c' does not apply to tensors: only + and * do", e->op);
    return -1;
  }
  Call c = {.e = e, .op = e->op == '+' ? OP_ADD : OP_MUL, .npos = 2, .pos = {e->lhs, e->rhs}};
  if ((c.in[0] = ir_build_tensor(b, e->lhs)) < 0 || (c.in[1] = ir_build_tensor(b, e->rhs)) < 0) return -1;
  return infer(b, &c);
}

/* name(args) */
int ir_infer_call(Builder *b, const Expr *e) {
  Op op = ir_op_lookup(e->name);
  if (op == OP__COUNT) {
    ir_build_err(b, e->name_loc, "unknown op '%s'", e->name);
    return -1;
  }
  Call c = {.e = e, .op = op};
  if (read_call(b, e, &c)) return -1;
  set_defaults(&c);
  return infer(b, &c);
}
