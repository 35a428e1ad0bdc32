/* ir_build.c — AST to typed IR: names and scopes, dim arithmetic, declarations, the repeated
 * layer and the whole-model checks. An op call's checks and shape rule are ir_infer.c's, the mesh
 * and step (and their checks against the model) ir_config.c's. Every error is located in the
 * .pdl source, once per place (ir_build_err). */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

/* ============================================================================================
 * Names
 * ========================================================================================== */

typedef enum BindKind { B_DIM, B_TENSOR, B_PARAM, B_INPUT } BindKind;

typedef struct Bind {
  const char *name;
  BindKind kind;
  int64_t value;      /* B_DIM */
  int node;           /* B_TENSOR, B_PARAM, B_INPUT */
  Loc loc;            /* where it was defined */
  int depth;          /* 0: top level, 1: inside the repeated layer */
  bool poison;        /* B_DIM: its definition failed and was reported; uses stay silent */
  struct Bind *next;  /* the scope stack: the binding made before this one */
  struct Bind *hnext; /* the hash bucket: the next binding of a name with the same hash */
} Bind;

typedef struct Builder {
  Src *src;
  Graph *g;
  Bind *binds;  /* innermost first */
  Bind **table; /* the bindings by name: buckets, each newest first, so lookups find the innermost */
  int nbuckets, nbinds;
  struct CkptSlot {
    uint64_t hash;
    int param;
  } * ckpt; /* the checkpoint names: a hash set (ckpt_find) */
  int nckpt;
  int depth;
  int layer; /* the layer being instantiated, -1 outside */
  Region region;
  const char *loopvar;
  Loc *seen; /* errors already reported: a layer repeats, its errors need not */
  int nseen, capseen;
  const Stmt *last_stmt;
} Builder;

static const char *kind_name(BindKind k) {
  static const char *names[] = {"a dimension", "a tensor", "a parameter", "an input"};
  return names[k];
}

/* A name's hash for the tables below: FNV-1a with its halves folded and mixed, because the low
 * bits alone cluster the probes of names that differ in a layer index. */
static uint64_t name_hash(const char *name) {
  uint64_t h = cg_fnv1a(name, strlen(name));
  return (h ^ (h >> 32)) * 0x9e3779b97f4a7c15ULL >> 16;
}

static unsigned bucket(const Builder *b, const char *name) {
  return (unsigned)(name_hash(name) & (uint64_t)(b->nbuckets - 1));
}

static Bind *lookup(Builder *b, const char *name) {
  if (!b->table) return NULL;
  for (Bind *x = b->table[bucket(b, name)]; x; x = x->hnext)
    if (!strcmp(x->name, name)) return x;
  return NULL;
}

/* Twice the buckets, the bindings put back oldest first, so each bucket stays newest first. */
static void grow_table(Builder *b) {
  free(b->table);
  b->nbuckets = b->nbuckets ? 2 * b->nbuckets : 256;
  b->table = xcalloc((size_t)b->nbuckets, sizeof *b->table);
  Bind **all = xmalloc((size_t)(b->nbinds + 1) * sizeof *all);
  int n = 0;
  for (Bind *x = b->binds; x; x = x->next) all[n++] = x;
  while (n--) {
    unsigned h = bucket(b, all[n]->name);
    all[n]->hnext = b->table[h];
    b->table[h] = all[n];
  }
  free(all);
}

static Bind *bind(Builder *b, const char *name, BindKind kind, Loc loc) {
  Bind *x = xcalloc(1, sizeof *x);
  x->name = name;
  x->kind = kind;
  x->loc = loc;
  x->depth = b->depth;
  x->next = b->binds;
  b->binds = x;
  b->nbinds++;
  if (b->nbinds > 2 * b->nbuckets) grow_table(b);
  else {
    unsigned h = bucket(b, name);
    x->hnext = b->table[h];
    b->table[h] = x;
  }
  return x;
}

/* The parameter with checkpoint name `name`, or -1: a hash set of the names (open addressing over
 * parameter indices; grown at half full). */
static int ckpt_find(Builder *b, const char *name) {
  if (!b->ckpt) return -1;
  uint64_t m = (uint64_t)b->nckpt - 1, hash = name_hash(name);
  for (uint64_t h = hash & m;; h = (h + 1) & m) {
    const struct CkptSlot *t = &b->ckpt[h];
    if (t->param < 0) return -1;
    if (t->hash == hash && !strcmp(b->g->params[t->param].name, name)) return t->param;
  }
}

static void ckpt_put(Builder *b, uint64_t hash, int param) {
  uint64_t m = (uint64_t)b->nckpt - 1, h = hash & m;
  while (b->ckpt[h].param >= 0) h = (h + 1) & m;
  b->ckpt[h] = (struct CkptSlot){hash, param};
}

static void ckpt_add(Builder *b, int param) {
  if (2 * (b->g->nparams + 1) > b->nckpt) { /* grow: every name again, by its hash */
    struct CkptSlot *old = b->ckpt;
    int nold = b->nckpt;
    b->nckpt = b->nckpt ? 2 * b->nckpt : 256;
    b->ckpt = xmalloc((size_t)b->nckpt * sizeof *b->ckpt);
    for (int i = 0; i < b->nckpt; i++) b->ckpt[i].param = -1;
    for (int i = 0; i < nold; i++)
      if (old[i].param >= 0) ckpt_put(b, old[i].hash, old[i].param);
    free(old);
  }
  ckpt_put(b, name_hash(b->g->params[param].name), param);
}

/* Drop the bindings made inside the current layer instantiation. They are the newest of all, so
 * each is the first of its bucket. */
static void unbind_to(Builder *b, Bind *mark) {
  while (b->binds != mark) {
    Bind *x = b->binds;
    b->binds = x->next;
    b->table[bucket(b, x->name)] = x->hnext;
    b->nbinds--;
    free(x);
  }
}

/* Report an error once per source location: the repeated layer would report it per layer. */
void ir_build_err(Builder *b, Loc at, const char *fmt, ...) {
  for (int i = 0; i < b->nseen; i++)
    if (b->seen[i].first == at.first && b->seen[i].last == at.last) {
      b->src->nerrors++;
      return;
    }
  if (b->nseen == b->capseen) {
    b->capseen = b->capseen ? 2 * b->capseen : 16;
    b->seen = xrealloc(b->seen, (size_t)b->capseen * sizeof *b->seen);
  }
  b->seen[b->nseen++] = at;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(b->src, at, "%s", msg);
}

/* A name may be declared once; a tensor name may be rebound (the residual stream x = x + ...). */
static int check_new_name(Builder *b, const char *name, Loc at, BindKind kind) {
  Bind *old = lookup(b, name);
  if (!old) return 0;
  if (kind == B_TENSOR && old->kind == B_TENSOR) return 0;
  if (old->loc.first < 0)
    ir_build_err(b, at, "redefinition of '%s', which is predefined (%s)", name,
                 !strcmp(name, "B")   ? "the micro-batch size"
                 : !strcmp(name, "S") ? "the sequence length"
                                      : "the layer index");
  else {
    ir_build_err(b, at, "redefinition of '%s' (already %s)", name, kind_name(old->kind));
    diag_note(b->src, old->loc, "'%s' was defined here", name);
  }
  return 1;
}

static char *loc_text(Builder *b, Loc at) {
  if (at.first < 0) return xstrdup("?");
  return xstrndup(b->src->text + at.first, (size_t)(at.last - at.first));
}

/* ============================================================================================
 * Integer (dimension) and float (attribute) arithmetic
 * ========================================================================================== */

/* Evaluate a dimension expression; 0 on success. */
int ir_build_eval_int(Builder *b, const Expr *e, int64_t *out) {
  int64_t l, r;
  switch (e->kind) {
  case E_INT: *out = e->ival; return 0;
  case E_NAME: {
    Bind *x = lookup(b, e->name);
    if (!x) {
      ir_build_err(b, e->loc, "undefined name '%s'", e->name);
      return 1;
    }
    if (x->kind != B_DIM) {
      ir_build_err(b, e->loc, "'%s' is %s, not a dimension", e->name, kind_name(x->kind));
      return 1;
    }
    if (x->poison) return 1;
    *out = x->value;
    return 0;
  }
  case E_NEG:
    if (ir_build_eval_int(b, e->lhs, &l)) return 1;
    *out = -l;
    return 0;
  case E_BIN:
    if (ir_build_eval_int(b, e->lhs, &l) || ir_build_eval_int(b, e->rhs, &r)) return 1;
    switch (e->op) {
    case '+':
      if (__builtin_add_overflow(l, r, out)) goto overflow;
      return 0;
    case '-':
      if (__builtin_sub_overflow(l, r, out)) goto overflow;
      return 0;
    case '*':
      if (__builtin_mul_overflow(l, r, out)) goto overflow;
      return 0;
    case '/':
      if (r == 0) {
        ir_build_err(b, e->rhs->loc, "division by zero");
        return 1;
      }
      if (l % r) {
        ir_build_err(b, e->loc, "%lld / %lld is not exact (remainder %lld): dimensions must divide evenly",
                     (long long)l, (long long)r, (long long)(l % r));
        return 1;
      }
      *out = l / r;
      return 0;
    case '%': /* the remainder of a division, 0 <= l % r < |r| (a layer index's parity: l % 2) */
      if (r == 0) {
        ir_build_err(b, e->rhs->loc, "division by zero");
        return 1;
      }
      if (r == -1 || r == 1) *out = 0; /* (INT64_MIN % -1 overflows) */
      else *out = l % r < 0 ? l % r + (r < 0 ? -r : r) : l % r;
      return 0;
    }
    return 1;
  case E_FLOAT: ir_build_err(b, e->loc, "expected an integer, found the number %g", e->fval); return 1;
  case E_CALL: ir_build_err(b, e->loc, "expected an integer, found a call of '%s'", e->name); return 1;
  case E_STR:
  case E_WORD: ir_build_err(b, e->loc, "expected an integer"); return 1;
  case E_RANGE: ir_build_err(b, e->loc, "expected an integer, found a range"); return 1;
  }
  return 1;
overflow:
  ir_build_err(b, e->loc, "integer overflow in dimension arithmetic");
  return 1;
}

static int eval_dim(Builder *b, const Expr *e, int64_t *out) {
  if (ir_build_eval_int(b, e, out)) return 1;
  if (*out <= 0) {
    ir_build_err(b, e->loc, "dimension must be positive, got %lld", (long long)*out);
    return 1;
  }
  return 0;
}

/* Evaluate an attribute value (a float, or a dimension expression); 0 on success. */
int ir_build_eval_float(Builder *b, const Expr *e, double *out) {
  double l, r;
  switch (e->kind) {
  case E_FLOAT: *out = e->fval; return 0;
  case E_INT: *out = (double)e->ival; return 0;
  case E_NAME: {
    int64_t v;
    if (ir_build_eval_int(b, e, &v)) return 1;
    *out = (double)v;
    return 0;
  }
  case E_NEG:
    if (ir_build_eval_float(b, e->lhs, &l)) return 1;
    *out = -l;
    return 0;
  case E_BIN:
    if (e->op == '%') { /* an integer remainder */
      int64_t v;
      if (ir_build_eval_int(b, e, &v)) return 1;
      *out = (double)v;
      return 0;
    }
    if (ir_build_eval_float(b, e->lhs, &l) || ir_build_eval_float(b, e->rhs, &r)) return 1;
    *out = e->op == '+' ? l + r : e->op == '-' ? l - r : e->op == '*' ? l * r : l / r;
    if (!isfinite(*out)) {
      ir_build_err(b, e->loc, "attribute value is not finite");
      return 1;
    }
    return 0;
  case E_CALL:
  case E_STR:
  case E_RANGE:
  case E_WORD: ir_build_err(b, e->loc, "expected a number"); return 1;
  }
  return 1;
}

/* ============================================================================================
 * Tensor expressions: a name's value, or one node per op call (ir_infer.c)
 * ========================================================================================== */

Graph *ir_build_graph(Builder *b) { return b->g; }

static IrNode *N(Builder *b, int id) { return &b->g->nodes[id]; }

/* A node of the layer and region being built. */
int ir_build_node(Builder *b, Op op, Loc loc) {
  int id = ir_add_node(b->g, op, loc);
  N(b, id)->layer = b->layer;
  N(b, id)->region = b->region;
  N(b, id)->dtype = PP_F32;
  return id;
}

/* The repeated layer reads only its own values, its parameters and the hidden state it carries;
 * the code after it reads only the final hidden state: a pipeline boundary passes one tensor. */
static int check_region(Builder *b, const Expr *e, int id) {
  IrNode *n = N(b, id);
  if (n->op == OP_PARAM) {
    if (b->region == REG_LAYER && n->layer < 0) {
      ir_build_err(
          b, e->loc,
          "parameter '%s' is declared outside the repeated layer but used inside it: declare it in the for block",
          e->name);
      return 1;
    }
    return 0;
  }
  if (n->op == OP_INPUT) {
    if (b->region == REG_LAYER) {
      ir_build_err(b, e->loc, "the repeated layer cannot read the input '%s'", e->name);
      return 1;
    }
    return 0;
  }
  return 0;
}

/* The node of a tensor expression, or -1 after reporting. */
int ir_build_tensor(Builder *b, const Expr *e) {
  switch (e->kind) {
  case E_NAME: {
    Bind *x = lookup(b, e->name);
    if (!x) {
      ir_build_err(b, e->loc, "undefined name '%s'", e->name);
      return -1;
    }
    if (x->kind == B_DIM) {
      ir_build_err(b, e->loc, "'%s' is a dimension, not a tensor", e->name);
      return -1;
    }
    if (x->node < 0) return -1; /* its definition failed and was reported */
    if (b->region == REG_POST && x->kind == B_TENSOR && x->depth == -1) {
      ir_build_err(b, e->loc,
                   "'%s' was computed before the repeated layers; after them only the hidden state they carry can "
                   "be read",
                   e->name);
      return -1;
    }
    if (check_region(b, e, x->node)) return -1;
    return x->node;
  }
  case E_BIN: return ir_infer_binary(b, e);
  case E_CALL: return ir_infer_call(b, e);
  case E_INT: ir_build_err(b, e->loc, "expected a tensor, found the integer %lld", (long long)e->ival); return -1;
  case E_FLOAT: ir_build_err(b, e->loc, "expected a tensor, found the number %g", e->fval); return -1;
  case E_NEG: ir_build_err(b, e->loc, "unary '-' does not apply to tensors"); return -1;
  case E_STR:
  case E_RANGE:
  case E_WORD: ir_build_err(b, e->loc, "expected a tensor"); return -1;
  }
  return -1;
}

/* ============================================================================================
 * Declarations
 * ========================================================================================== */

static int eval_shape(Builder *b, const Arg *dims, Shape *s, char **text) {
  s->nd = 0;
  int bad = 0;
  for (const Arg *a = dims; a; a = a->next) {
    if (s->nd == IR_MAX_DIMS) {
      ir_build_err(b, a->val->loc, "more than %d dimensions", IR_MAX_DIMS);
      return 1;
    }
    if (text) text[s->nd] = loc_text(b, a->val->loc);
    bad |= eval_dim(b, a->val, &s->d[s->nd]);
    s->nd++;
  }
  int64_t numel = 1;
  for (int i = 0; !bad && i < s->nd; i++)
    if (__builtin_mul_overflow(numel, s->d[i], &numel) || numel > PP_MAX_NUMEL) {
      ir_build_err(b, dims->val->loc, "the shape has more than 2^40 elements");
      return 1;
    }
  return bad;
}

/* Expand "model.layers.{l}.x" with the layer index; only the loop variable may be named. */
static char *expand_ckpt(Builder *b, const Stmt *s) {
  const char *t = s->ckpt;
  char out[PP_MAX_NAME + 16];
  size_t k = 0;
  int used = 0;
  Loc at = s->ckpt_loc;
  if (!*t) {
    ir_build_err(b, at, "the checkpoint name is empty");
    return NULL;
  }
  for (const char *c = t; *c; c++) {
    if (*c == '{') {
      const char *end = strchr(c, '}');
      if (!end) {
        ir_build_err(b, at, "unclosed '{' in the checkpoint name");
        return NULL;
      }
      size_t n = (size_t)(end - c - 1);
      if (!b->loopvar) {
        ir_build_err(b, at, "'{%.*s}' in a checkpoint name outside the repeated layer", (int)n, c + 1);
        return NULL;
      }
      if (n != strlen(b->loopvar) || strncmp(c + 1, b->loopvar, n)) {
        ir_build_err(b, at, "'{%.*s}' in the checkpoint name: only the layer index {%s} can be substituted", (int)n,
                     c + 1, b->loopvar);
        return NULL;
      }
      k += (size_t)snprintf(out + k, sizeof out - k, "%d", b->layer);
      used = 1;
      c = end;
    } else if (*c == '}') {
      ir_build_err(b, at, "unmatched '}' in the checkpoint name");
      return NULL;
    } else {
      out[k++] = *c;
    }
    if (k > PP_MAX_NAME) {
      if (b->layer >= 0)
        ir_build_err(b, at, "the checkpoint name of layer %d is longer than %d bytes", b->layer, PP_MAX_NAME);
      else ir_build_err(b, at, "the checkpoint name is longer than %d bytes", PP_MAX_NAME);
      return NULL;
    }
  }
  out[k] = 0;
  int64_t bad = pp_name_bad_at(out); /* the rule ppr and safetensors headers share */
  if (bad >= 0) {
    unsigned char c = (unsigned char)out[bad];
    if (c >= 127)
      ir_build_err(b, at, "the checkpoint name has a byte that is not ASCII (0x%02x): names are printable ASCII", c);
    else ir_build_err(b, at, "the checkpoint name has a space, quote, backslash, '#' or control character");
    return NULL;
  }
  if (b->loopvar && !used) {
    ir_build_err(b, at,
                 "inside the repeated layer the checkpoint name must contain {%s}, or every layer would share it",
                 b->loopvar);
    return NULL;
  }
  return xstrdup(out);
}

/* Whether another parameter has checkpoint name `name` (reported against declaration s). */
static bool ckpt_taken(Builder *b, const Stmt *s, const char *name) {
  int other = ckpt_find(b, name);
  if (other < 0) return false;
  ir_build_err(b, s->ckpt_loc, "checkpoint name '%s' is used twice", name);
  diag_note(b->src, b->g->params[other].loc, "by parameter '%s' here", b->g->params[other].var);
  return true;
}

static void decl_param(Builder *b, const Stmt *s) {
  if (check_new_name(b, s->name, s->name_loc, B_PARAM)) return;
  IrParam p = {.layer = b->layer,
               .var = s->name,
               .loc = s->name_loc,
               .role_loc = s->role_loc,
               .node = -1,
               .shard_dim = -1,
               .shard_rep = 1,
               .shard_parts = 1};
  int bad = eval_shape(b, s->dims, &p.shape, p.dim_text);
  if (!s->ckpt) {
    ir_build_err(b, s->name_loc, "parameter '%s' has no checkpoint name: add as \"...\"", s->name);
    bad = 1;
  } else if (!(p.name = expand_ckpt(b, s))) bad = 1;
  if (!s->value) {
    ir_build_err(b, s->name_loc, "parameter '%s' has no initializer: add init normal(std=...), zeros or ones", s->name);
    bad = 1;
  } else {
    const Expr *v = s->value;
    if (v->kind == E_NAME && !strcmp(v->name, "zeros")) p.init = INIT_ZEROS;
    else if (v->kind == E_NAME && !strcmp(v->name, "ones")) p.init = INIT_ONES;
    else if (v->kind == E_CALL && !strcmp(v->name, "normal")) {
      const Arg *a = v->args;
      if (!a || a->next || (a->key && strcmp(a->key, "std"))) {
        ir_build_err(b, v->loc, "normal takes one argument: normal(std=...)");
        bad = 1;
      } else if (ir_build_eval_float(b, a->val, &p.std)) bad = 1;
      else if (!(p.std > 0)) {
        ir_build_err(b, a->val->loc, "the standard deviation must be positive");
        bad = 1;
      }
      p.init = INIT_NORMAL;
    } else {
      ir_build_err(b, v->loc, "unknown initializer (expected normal(std=...), zeros or ones)");
      bad = 1;
    }
  }
  if (s->role) {
    static const char *roles[] = {"replicated", "column", "row", "vocab"};
    int r = 0;
    while (r < 4 && strcmp(roles[r], s->role)) r++;
    if (r == 4) {
      ir_build_err(b, s->role_loc, "unknown tensor-parallel role '%s' (expected column, row, vocab or replicated)",
                   s->role);
      bad = 1;
    } else p.role = (Role)r;
  }
  if (!bad && ckpt_taken(b, s, p.name)) bad = 1;
  if (bad) {
    free(p.name);
    for (int k = 0; k < IR_MAX_DIMS; k++) free(p.dim_text[k]);
    bind(b, s->name, B_PARAM, s->name_loc)->node = -1;
    return;
  }
  Graph *g = b->g;
  if (g->nparams == g->pcap) {
    g->pcap = g->pcap ? 2 * g->pcap : 32;
    g->params = xrealloc(g->params, (size_t)g->pcap * sizeof *g->params);
  }
  int id = ir_build_node(b, OP_PARAM, s->name_loc);
  N(b, id)->shape = p.shape;
  N(b, id)->param = g->nparams;
  N(b, id)->var = s->name;
  p.node = id;
  p.gindex = g->nparams;
  g->params[g->nparams++] = p;
  ckpt_add(b, g->nparams - 1);
  bind(b, s->name, B_PARAM, s->name_loc)->node = id;
}

static void decl_input(Builder *b, const Stmt *s) {
  if (check_new_name(b, s->name, s->name_loc, B_INPUT)) return;
  if (b->depth) {
    ir_build_err(b, s->loc, "inputs are declared outside the repeated layer");
    return;
  }
  if (strcmp(s->dtype, "i32")) {
    ir_build_err(b, s->dtype_loc, "inputs are token ids or labels of type i32, not '%s'", s->dtype);
    return;
  }
  const Arg *d = s->dims;
  if (!d || !d->next || d->next->next || d->val->kind != E_NAME || strcmp(d->val->name, "B") ||
      d->next->val->kind != E_NAME || strcmp(d->next->val->name, "S")) {
    ir_build_err(b, d ? d->val->loc : s->loc, "an input's shape is [B, S] (micro-batch, sequence)");
    return;
  }
  if (b->g->ninputs == 2) {
    ir_build_err(b, s->loc, "a model has at most two inputs: token ids and labels");
    return;
  }
  int id = ir_build_node(b, OP_INPUT, s->name_loc);
  N(b, id)->dtype = PP_I32;
  N(b, id)->shape = (Shape){2, {b->g->cfg.micro_batch, ir_seq_local(&b->g->cfg)}}; /* a rank's positions */
  N(b, id)->param = b->g->ninputs;
  N(b, id)->var = s->name;
  N(b, id)->layout = LAYOUT_BS;
  b->g->inputs[b->g->ninputs++] = (IrInput){.var = s->name, .node = id, .loc = s->name_loc};
  bind(b, s->name, B_INPUT, s->name_loc)->node = id;
}

static void stmts(Builder *b, const Stmt *s);

static void let(Builder *b, const Stmt *s) {
  if (check_new_name(b, s->name, s->name_loc, B_TENSOR)) return;
  int id = ir_build_tensor(b, s->value); /* -1 after an error: the name is bound to a poisoned value */
  Bind *old = lookup(b, s->name);
  if (old) old->node = id; /* rebinding an outer name inside the layer: the carried hidden state */
  else bind(b, s->name, B_TENSOR, s->name_loc)->node = id;
  if (id >= 0 && !N(b, id)->var && N(b, id)->op != OP_PARAM && N(b, id)->op != OP_INPUT) N(b, id)->var = s->name;
}

/* for l in 0..N { body }: the body instantiated per global layer index. A name bound outside
 * the layer and rebound inside is the hidden state the layer carries; exactly one is allowed. */
/* Whether an expression names `name`. Recursion is bounded by AST_MAX_DEPTH. */
static bool names(const Expr *e, const char *name) {
  if (!e) return false;
  if (e->kind == E_NAME && !strcmp(e->name, name)) return true;
  if (names(e->lhs, name) || names(e->rhs, name)) return true;
  for (const Arg *a = e->kind == E_CALL ? e->args : NULL; a; a = a->next)
    if (names(a->val, name)) return true;
  return false;
}

static bool body_names(const Stmt *s, const char *name) {
  for (; s; s = s->next) {
    if (names(s->value, name) || names(s->hi, name) || body_names(s->body, name)) return true;
    for (const Arg *a = s->dims; a; a = a->next)
      if (names(a->val, name)) return true;
    for (const Setting *t = s->settings; t; t = t->next)
      if (names(t->val, name)) return true;
  }
  return false;
}

/* Layers 1..hi-1 of a body that does not read its loop variable (but in checkpoint names) are
 * layer 0 again: its nodes [n0, nnodes) and parameters [p0, nparams) copied, reading the previous
 * layer's hidden state where layer 0 read `carried_in`, with each layer's checkpoint names. The
 * same graph stmts() builds, in the time of a copy. False (nothing done) when layer 0 is not such
 * a block; errors (a checkpoint name too long or used twice) are reported. */
static bool clone_layers(Builder *b, const Stmt *loop, int n0, int p0, int carried_in, Bind *carried, int hi) {
  Graph *g = b->g;
  int n1 = g->nnodes, p1 = g->nparams, nn = n1 - n0, np = p1 - p0;
  if (body_names(loop->body, loop->name) || (g->loss >= n0 && g->loss < n1)) return false;
  const Stmt **decl = xmalloc(((size_t)np + 1) * sizeof *decl);
  int k = 0;
  for (const Stmt *t = loop->body; t && k <= np; t = t->next)
    if (t->kind == S_PARAM) decl[k < np ? k : np] = t, k++;
  if (k != np || (int64_t)nn * hi > INT_MAX / 4 || (int64_t)np * hi > INT_MAX / 4) {
    free(decl);
    return false;
  }
  g->cap = n0 + nn * hi + 64;
  g->nodes = xrealloc(g->nodes, (size_t)g->cap * sizeof *g->nodes);
  g->pcap = p0 + np * hi + 32;
  g->params = xrealloc(g->params, (size_t)g->pcap * sizeof *g->params);
  int out0 = carried->node, prev_out = out0;
  for (int l = 1; l < hi && b->src->nerrors == 0; l++) {
    b->layer = l;
    int base = g->nnodes, pbase = g->nparams;
    for (int j = 0; j < np; j++) {
      char *name = expand_ckpt(b, decl[j]);
      if (!name || ckpt_taken(b, decl[j], name)) {
        free(name);
        break;
      }
      IrParam *q = &g->params[g->nparams];
      *q = g->params[p0 + j];
      q->name = name;
      for (int d = 0; d < IR_MAX_DIMS; d++) q->dim_text[d] = q->dim_text[d] ? xstrdup(q->dim_text[d]) : NULL;
      q->layer = l;
      q->node = q->node - n0 + base;
      q->gindex = g->nparams++;
      ckpt_add(b, q->gindex);
    }
    if (g->nparams != pbase + np) break;
    for (int i = 0; i < nn; i++) {
      IrNode *d = &g->nodes[g->nnodes++];
      *d = g->nodes[n0 + i];
      d->layer = l;
      for (int m = 0; m < d->nin; m++) {
        int v = d->in[m];
        d->in[m] = v >= n0 && v < n1 ? v - n0 + base : v == carried_in ? prev_out : v;
      }
      if (d->op == OP_PARAM) d->param = d->param - p0 + pbase;
    }
    prev_out = out0 - n0 + base;
  }
  carried->node = prev_out;
  free(decl);
  return true;
}

static void layers(Builder *b, const Stmt *s) {
  if (b->depth) {
    ir_build_err(b, s->loc, "the repeated layer cannot be nested");
    return;
  }
  if (b->g->nlayers) {
    ir_build_err(b, s->loc, "a second repeated-layer block: a model has one");
    diag_note(b->src, b->g->layers_loc, "the first is here");
    return;
  }
  int64_t lo, hi;
  if (ir_build_eval_int(b, s->value, &lo) || eval_dim(b, s->hi, &hi)) return;
  if (lo != 0) {
    ir_build_err(b, s->value->loc, "the layer range must start at 0");
    return;
  }
  if (hi > 100000) {
    ir_build_err(b, s->hi->loc, "%lld layers is more than this compiler supports (100000)", (long long)hi);
    return;
  }
  if (check_new_name(b, s->name, s->name_loc, B_DIM)) return;
  b->g->nlayers = (int)hi;
  b->g->layers_loc = (Loc){s->value->loc.first, s->hi->loc.last};

  /* outer tensors visible at entry: a rebinding of one of them is the carried state */
  int nouter = 0;
  for (Bind *x = b->binds; x; x = x->next) nouter += x->kind == B_TENSOR;
  Bind **outer = xcalloc((size_t)nouter + 1, sizeof *outer);
  int *entry = xcalloc((size_t)nouter + 1, sizeof *entry);
  nouter = 0;
  for (Bind *x = b->binds; x; x = x->next)
    if (x->kind == B_TENSOR) outer[nouter] = x, entry[nouter++] = x->node;

  b->depth = 1;
  b->region = REG_LAYER;
  b->loopvar = s->name;
  int errors_before = b->src->nerrors;
  for (int l = 0; l < hi && b->src->nerrors == errors_before; l++) {
    b->layer = l;
    Bind *mark = b->binds;
    Bind *lv = bind(b, s->name, B_DIM, s->name_loc);
    lv->value = l;
    int start[nouter + 1];
    bool poisoned = false; /* a value before the layer failed: check its body once, nothing more */
    for (int i = 0; i < nouter; i++) start[i] = outer[i]->node, poisoned |= start[i] < 0;
    int n0 = b->g->nnodes, p0 = b->g->nparams;
    stmts(b, s->body);
    unbind_to(b, mark);
    if (b->src->nerrors != errors_before || poisoned) break;
    /* which outer names changed in this layer */
    int carried = 0, which = -1;
    for (int i = 0; i < nouter; i++)
      if (outer[i]->node != start[i]) carried++, which = i;
    if (carried != 1) {
      if (carried == 0)
        ir_build_err(b, s->loc,
                     "the repeated layer does not update any tensor defined before it: it must carry the hidden "
                     "state (for example x = x + ...)");
      else
        ir_build_err(b, s->loc,
                     "the repeated layer updates %d tensors defined before it; a pipeline boundary passes exactly "
                     "one hidden state",
                     carried);
      break;
    }
    /* -1: a definition failed and was reported; there is no shape to check */
    if (start[which] < 0 || outer[which]->node < 0) break;
    const Shape *in = &N(b, start[which])->shape, *out = &N(b, outer[which]->node)->shape;
    char s1[96], s2[96];
    if (!ir_shape_eq(in, out) || N(b, start[which])->layout != LAYOUT_SB) {
      ir_build_err(b, s->loc,
                   "the hidden state '%s' enters the layer as %s and leaves as %s: it must be the same [S,B,H] "
                   "tensor",
                   outer[which]->name, ir_shape_str(in, s1, sizeof s1), ir_shape_str(out, s2, sizeof s2));
      break;
    }
    /* every value the layer read from outside must be the carried state */
    for (int i = b->g->nnodes - 1; i >= 0 && N(b, i)->layer == l; i--)
      for (int k = 0; k < N(b, i)->nin; k++) {
        IrNode *src = N(b, N(b, i)->in[k]);
        if (src->op == OP_PARAM || src->op == OP_INPUT || src->layer == l || N(b, i)->in[k] == start[which]) continue;
        ir_build_err(b, N(b, i)->loc,
                     "the repeated layer reads '%s', computed before it; a layer may read only the hidden "
                     "state it carries ('%s')",
                     src->var ? src->var : "a value", outer[which]->name);
      }
    if (l == 0 && b->src->nerrors == errors_before && clone_layers(b, s, n0, p0, start[which], outer[which], (int)hi))
      break;
  }
  /* values computed before the layers are out of reach after them, but the carried state */
  for (int i = 0; i < nouter; i++)
    if (b->src->nerrors == errors_before && outer[i]->node == entry[i]) outer[i]->depth = -1;
  free(outer);
  free(entry);
  b->depth = 0;
  b->layer = -1;
  b->region = REG_POST;
  b->loopvar = NULL;
}

static void stmts(Builder *b, const Stmt *s) {
  for (; s; s = s->next) {
    b->last_stmt = s;
    switch (s->kind) {
    case S_MODEL:
      if (b->depth) {
        ir_build_err(b, s->loc, "'model' belongs at the top of the file");
        break;
      }
      if (pp_name_bad_at(s->name) >= 0) {
        ir_build_err(b, s->name_loc,
                     "the model name must be 1 to %d bytes of printable ASCII without space, quote, backslash or '#'",
                     PP_MAX_NAME);
        break;
      }
      free(b->g->model);
      b->g->model = xstrdup(s->name);
      break;
    case S_DIM: {
      if (check_new_name(b, s->name, s->name_loc, B_DIM)) break;
      int64_t v;
      if (eval_dim(b, s->value, &v)) {
        bind(b, s->name, B_DIM, s->name_loc)->poison = true;
        break;
      }
      bind(b, s->name, B_DIM, s->name_loc)->value = v;
      break;
    }
    case S_INPUT: decl_input(b, s); break;
    case S_PARAM: decl_param(b, s); break;
    case S_LET: let(b, s); break;
    case S_FOR: layers(b, s); break;
    case S_MESH:
    case S_TRAIN:
    case S_CHECKPOINT:
      if (b->depth)
        ir_build_err(b, s->loc, "'%s' belongs outside the repeated layer",
                     s->kind == S_MESH    ? "mesh"
                     : s->kind == S_TRAIN ? "train"
                                          : "checkpoint");
      break;
    }
  }
}

/* ============================================================================================
 * Whole-model checks: uses, the loss, and the mesh against the model (ir_config.c)
 * ========================================================================================== */

static void check_model(Builder *b) {
  Graph *g = b->g;
  Loc end = b->last_stmt ? b->last_stmt->loc : (Loc){0, 0};
  for (int i = 0; i < g->ninputs; i++)
    if (g->inputs[i].use == USE_NONE) ir_build_err(b, g->inputs[i].loc, "input '%s' is never used", g->inputs[i].var);
  if (g->loss < 0) ir_build_err(b, end, "the model has no loss: end it with cross_entropy(logits, labels)");
  ir_config_check(b, end);
}

static char *model_name_from_path(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  const char *dot = strrchr(base, '.');
  size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
  char *name = xstrndup(base, n < PP_MAX_NAME ? n : PP_MAX_NAME);
  for (char *c = name; *c; c++) /* "my model.pdl": a name the listing can carry */
    if (pp_name_bad_at((char[]){*c, 0}) >= 0) *c = '_';
  if (!*name) name = (free(name), xstrdup("model"));
  return name;
}

Graph *ir_build(Src *src, const Ast *ast, const Options *opt) {
  Graph *g = xcalloc(1, sizeof *g);
  g->src = src;
  g->loss = -1;
  g->seed = -1;
  g->npp = 1;
  g->model = model_name_from_path(src->path);
  Builder b = {.src = src, .g = g, .layer = -1, .region = REG_PRE};
  ir_config_resolve(&b, ast, opt, &g->cfg);
  if (g->cfg.seq < 0 && !src->nerrors)
    ir_build_err(&b, ast->stmts ? ast->stmts->loc : (Loc){0, 0},
                 "the sequence length is not set: add 'train { seq = N }' or pass --seq N");
  if (!src->nerrors) {
    bind(&b, "B", B_DIM, NOLOC)->value = g->cfg.micro_batch;
    bind(&b, "S", B_DIM, NOLOC)->value = g->cfg.seq;
    stmts(&b, ast->stmts);
    if (!src->nerrors) check_model(&b);
  }
  unbind_to(&b, NULL);
  free(b.table);
  free(b.ckpt);
  free(b.seen);
  if (src->nerrors || ir_verify(g)) {
    ir_free(g);
    return NULL;
  }
  g->nfwd = g->nnodes; /* all of it is the forward graph */
  return g;
}
