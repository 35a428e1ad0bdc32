/* ir_build.c — AST to typed IR: names and scopes, dim arithmetic, the repeated layer, shape
 * and layout inference, and the checks of the mesh against the model (tensor-parallel roles,
 * pipeline depth). Every error is located in the .pdl source. */
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
__attribute__((format(printf, 3, 4))) static void err(Builder *b, Loc at, const char *fmt, ...) {
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
    err(b, at, "redefinition of '%s', which is predefined (%s)", name,
        !strcmp(name, "B")   ? "the micro-batch size"
        : !strcmp(name, "S") ? "the sequence length"
                             : "the layer index");
  else {
    err(b, at, "redefinition of '%s' (already %s)", name, kind_name(old->kind));
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
static int eval_int(Builder *b, const Expr *e, int64_t *out) {
  int64_t l, r;
  switch (e->kind) {
  case E_INT: *out = e->ival; return 0;
  case E_NAME: {
    Bind *x = lookup(b, e->name);
    if (!x) {
      err(b, e->loc, "undefined name '%s'", e->name);
      return 1;
    }
    if (x->kind != B_DIM) {
      err(b, e->loc, "'%s' is %s, not a dimension", e->name, kind_name(x->kind));
      return 1;
    }
    if (x->poison) return 1;
    *out = x->value;
    return 0;
  }
  case E_NEG:
    if (eval_int(b, e->lhs, &l)) return 1;
    *out = -l;
    return 0;
  case E_BIN:
    if (eval_int(b, e->lhs, &l) || eval_int(b, e->rhs, &r)) return 1;
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
        err(b, e->rhs->loc, "division by zero");
        return 1;
      }
      if (l % r) {
        err(b, e->loc, "%lld / %lld is not exact (remainder %lld): dimensions must divide evenly", (long long)l,
            (long long)r, (long long)(l % r));
        return 1;
      }
      *out = l / r;
      return 0;
    }
    return 1;
  case E_FLOAT: err(b, e->loc, "expected an integer, found the number %g", e->fval); return 1;
  case E_CALL: err(b, e->loc, "expected an integer, found a call of '%s'", e->name); return 1;
  case E_STR:
  case E_WORD: err(b, e->loc, "expected an integer"); return 1;
  }
  return 1;
overflow:
  err(b, e->loc, "integer overflow in dimension arithmetic");
  return 1;
}

static int eval_dim(Builder *b, const Expr *e, int64_t *out) {
  if (eval_int(b, e, out)) return 1;
  if (*out <= 0) {
    err(b, e->loc, "dimension must be positive, got %lld", (long long)*out);
    return 1;
  }
  return 0;
}

static int eval_float(Builder *b, const Expr *e, double *out) {
  double l, r;
  switch (e->kind) {
  case E_FLOAT: *out = e->fval; return 0;
  case E_INT: *out = (double)e->ival; return 0;
  case E_NAME: {
    int64_t v;
    if (eval_int(b, e, &v)) return 1;
    *out = (double)v;
    return 0;
  }
  case E_NEG:
    if (eval_float(b, e->lhs, &l)) return 1;
    *out = -l;
    return 0;
  case E_BIN:
    if (eval_float(b, e->lhs, &l) || eval_float(b, e->rhs, &r)) return 1;
    *out = e->op == '+' ? l + r : e->op == '-' ? l - r : e->op == '*' ? l * r : l / r;
    if (!isfinite(*out)) {
      err(b, e->loc, "attribute value is not finite");
      return 1;
    }
    return 0;
  case E_CALL:
  case E_STR:
  case E_WORD: err(b, e->loc, "expected a number"); return 1;
  }
  return 1;
}

/* ============================================================================================
 * Settings: mesh { tp pp dp } and train { micro_batch seq microbatches schedule }
 * ========================================================================================== */

static const char *schedules[] = {"naive", "gpipe", "1f1b"};

static int setting_int(Builder *b, const Setting *t, int64_t *out) {
  if (t->val->kind != E_INT) {
    err(b, t->val->loc, "'%s' must be a positive integer", t->key);
    return 1;
  }
  if (t->val->ival <= 0 || t->val->ival > PP_MAX_STEP_DIM) {
    err(b, t->val->loc, "'%s' must be between 1 and %lld, got %lld", t->key, (long long)PP_MAX_STEP_DIM,
        (long long)t->val->ival);
    return 1;
  }
  *out = t->val->ival;
  return 0;
}

static void read_settings(Builder *b, const Stmt *s, Config *c) {
  static const char *mesh_keys[] = {"tp", "pp", "dp"};
  static const char *train_keys[] = {"micro_batch", "seq", "microbatches", "schedule"};
  int mesh = s->kind == S_MESH;
  const char **keys = mesh ? mesh_keys : train_keys;
  int nkeys = mesh ? 3 : 4;
  for (const Setting *t = s->settings; t; t = t->next) {
    for (const Setting *u = s->settings; u != t; u = u->next)
      if (!strcmp(u->key, t->key)) {
        err(b, t->key_loc, "'%s' is set twice", t->key);
        goto next;
      }
    int k = 0;
    while (k < nkeys && strcmp(keys[k], t->key)) k++;
    if (k == nkeys) {
      err(b, t->key_loc,
          mesh ? "unknown mesh setting '%s' (expected tp, pp or dp)"
               : "unknown train setting '%s' (expected micro_batch, seq, microbatches or schedule)",
          t->key);
      continue;
    }
    if (!mesh && k == 3) {
      const Expr *v = t->val;
      const char *name = v->kind == E_NAME || v->kind == E_WORD || v->kind == E_STR ? v->name : NULL;
      int ok = 0;
      for (int i = 0; name && i < 3; i++) ok |= !strcmp(name, schedules[i]);
      if (!ok) {
        err(b, v->loc, "unknown schedule (expected naive, gpipe or 1f1b)");
        continue;
      }
      snprintf(c->schedule, sizeof c->schedule, "%s", name);
      c->sched_loc = v->loc;
      continue;
    }
    int64_t v;
    if (setting_int(b, t, &v)) continue;
    int64_t *slot[] = {&c->tp, &c->pp, &c->dp, &c->micro_batch, &c->seq, &c->microbatches};
    *slot[(mesh ? 0 : 3) + k] = v;
    if (mesh) *(Loc *[]){&c->tp_loc, &c->pp_loc, &c->dp_loc}[k] = t->val->loc;
  next:;
  }
}

/* Settings come first, whatever their place in the file: every shape needs B and S. */
static void resolve_config(Builder *b, const Ast *ast, const Options *o, Config *c) {
  *c = (Config){.tp = 1,
                .pp = 1,
                .dp = 1,
                .micro_batch = 1,
                .seq = -1,
                .microbatches = 1,
                .tp_loc = NOLOC,
                .pp_loc = NOLOC,
                .dp_loc = NOLOC,
                .sched_loc = NOLOC};
  snprintf(c->schedule, sizeof c->schedule, "1f1b");
  const Stmt *seen[2] = {0, 0};
  for (const Stmt *s = ast->stmts; s; s = s->next) {
    if (s->kind != S_MESH && s->kind != S_TRAIN) continue;
    int k = s->kind == S_TRAIN;
    if (seen[k]) {
      err(b, s->loc, "a second '%s' block", k ? "train" : "mesh");
      diag_note(b->src, seen[k]->loc, "the first is here");
      continue;
    }
    seen[k] = s;
    read_settings(b, s, c);
  }
  if (o->tp > 0) c->tp = o->tp, c->tp_loc = NOLOC;
  if (o->pp > 0) c->pp = o->pp, c->pp_loc = NOLOC;
  if (o->dp > 0) c->dp = o->dp, c->dp_loc = NOLOC;
  if (o->micro_batch > 0) c->micro_batch = o->micro_batch;
  if (o->seq > 0) c->seq = o->seq;
  if (o->microbatches > 0) c->microbatches = o->microbatches;
  if (o->schedule) snprintf(c->schedule, sizeof c->schedule, "%s", o->schedule), c->sched_loc = NOLOC;
}

/* ============================================================================================
 * Tensor expressions: one node per op call, with its shape, dtype and layout
 * ========================================================================================== */

static int tensor(Builder *b, const Expr *e);

static IrNode *N(Builder *b, int id) { return &b->g->nodes[id]; }

static int new_node(Builder *b, Op op, Loc loc) {
  int id = ir_add_node(b->g, op, loc);
  N(b, id)->layer = b->layer;
  N(b, id)->region = b->region;
  N(b, id)->dtype = DT_F32;
  return id;
}

static const char *sh(const Shape *s, char *buf) { return ir_shape_str(s, buf, 96); }

/* The value must be a parameter (its gradient is what training is for). */
static int want_param(Builder *b, const Expr *e, int id, const char *what, const char *op) {
  if (N(b, id)->op == OP_PARAM) return 0;
  err(b, e->loc, "%s of %s must be a parameter", what, op);
  return 1;
}

static int want_rank(Builder *b, const Expr *e, int id, int nd, const char *what, const char *op) {
  char s1[96];
  if (N(b, id)->shape.nd == nd) return 0;
  err(b, e->loc, "%s of %s must have %d dimension%s, got %s", what, op, nd, nd == 1 ? "" : "s",
      sh(&N(b, id)->shape, s1));
  return 1;
}

static int want_f32(Builder *b, const Expr *e, int id, const char *op) {
  if (N(b, id)->dtype == DT_F32) return 0;
  err(b, e->loc, "%s expects a float tensor; this is an integer input", op);
  return 1;
}

static int want_layout(Builder *b, const Expr *e, int id, Layout want, const char *op) {
  if (N(b, id)->layout == want) return 0;
  if (want == LAYOUT_SB)
    err(b, e->loc, "%s works on sequence-first activations [S,B,...]%s", op,
        N(b, id)->layout == LAYOUT_BS ? "; this one is batch-first (after transpose_sb)" : "");
  else
    err(b, e->loc, "%s expects batch-first logits [B,S,V]%s", op,
        N(b, id)->layout == LAYOUT_SB ? "; these are sequence-first [S,B,V]: apply transpose_sb first" : "");
  return 1;
}

/* The input must be a declared input; its use (token ids or labels) is fixed by the first op. */
static int want_input(Builder *b, const Expr *e, int id, InputUse use, const char *op) {
  if (N(b, id)->op != OP_INPUT) {
    err(b, e->loc, "%s takes %s: an input declared as i32[B, S]", op, use == USE_TOKENS ? "token ids" : "labels");
    return 1;
  }
  IrInput *in = &b->g->inputs[N(b, id)->param];
  if (in->use != USE_NONE && in->use != use) {
    err(b, e->loc, "input '%s' is already used as %s", in->var, in->use == USE_TOKENS ? "token ids" : "labels");
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
    if (eval_int(b, val, &v)) return 1;
    if (!strcmp(key, "heads")) c->a.heads = v;
    if (!strcmp(key, "index")) c->a.index = v;
    if (!strcmp(key, "parts")) c->a.parts = v;
  } else {
    double v;
    if (eval_float(b, val, &v)) return 1;
    if (!strcmp(key, "eps")) c->a.eps = v;
    if (!strcmp(key, "theta")) c->a.theta = v;
    if (!strcmp(key, "scale")) c->a.scale = v;
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
        if (names[0]) err(b, a->key_loc, "%s has no attribute '%s' (it takes: %s)", info->name, a->key, names);
        else err(b, a->key_loc, "%s takes no attributes, got '%s'", info->name, a->key);
        bad = 1;
        continue;
      }
      if (c->has[k]) {
        err(b, a->key_loc, "attribute '%s' given twice", a->key);
        bad = 1;
        continue;
      }
      if (type == 'b') {
        err(b, a->key_loc, "'%s' is a flag: write it alone, without '='", a->key);
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
          err(b, a->val->loc, "flag '%s' given twice", key);
          bad = 1;
        }
        c->has[k] = 1;
        if (!strcmp(key, "causal")) c->a.causal = true;
        continue;
      }
    }
    if (c->npos == 4 || c->npos >= info->max_in) {
      err(b, a->val->loc, "too many inputs: %s takes %s%d", info->name, info->min_in == info->max_in ? "" : "at most ",
          info->max_in);
      return 1;
    }
    c->pos[c->npos++] = a->val;
  }
  if (c->npos < info->min_in) {
    err(b, e->loc, "%s takes %s%d input%s, got %d", info->name, info->min_in == info->max_in ? "" : "at least ",
        info->min_in, info->min_in == 1 ? "" : "s", c->npos);
    return 1;
  }
  for (int k = 0; attr_spec(info->attrs, k, key, &type, &opt); k++)
    if (!opt && !c->has[k]) {
      err(b, e->loc, "%s needs the attribute %s=", info->name, key);
      bad = 1;
    }
  if (bad) return 1;
  for (int i = 0; i < c->npos; i++)
    if ((c->in[i] = tensor(b, c->pos[i])) < 0) return 1;
  return 0;
}

static void set_defaults(Call *c) {
  if (c->op == OP_RMSNORM && !c->has[0]) c->a.eps = 1e-6;
  if (c->op == OP_LAYERNORM && !c->has[0]) c->a.eps = 1e-5;
  if (c->op == OP_ROPE && !c->has[0]) c->a.theta = 10000.0;
}

/* Shape, dtype and layout of one op; returns the node or -1 after reporting. */
static int infer(Builder *b, Call *c) {
  const Expr *e = c->e, **p = c->pos;
  const char *op = ir_ops[c->op].name;
  int *in = c->in;
  const Config *cfg = &b->g->cfg;
  char s1[96], s2[96];
  Shape out = {0};
  Layout lay = LAYOUT_NONE;

  for (int i = 0; i < c->npos; i++) {
    bool ids = (c->op == OP_EMBEDDING && i == 0) || (c->op == OP_CROSS_ENTROPY && i == 1);
    if (N(b, in[i])->op == OP_INPUT && !ids) {
      err(b, p[i]->loc, "'%s' is an integer input: only embedding (token ids) and cross_entropy (labels) read inputs",
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
    out = (Shape){3, {cfg->seq, cfg->micro_batch, N(b, in[1])->shape.d[1]}};
    lay = LAYOUT_SB;
    b->g->vocab = N(b, in[1])->shape.d[0];
    break;
  }
  case OP_POS_EMBEDDING: {
    if (want_param(b, p[0], in[0], "the table", op) || want_rank(b, p[0], in[0], 2, "the table", op)) return -1;
    int64_t npos = N(b, in[0])->shape.d[0];
    if (cfg->seq > npos) {
      err(b, e->loc, "the sequence length S=%lld exceeds the %lld positions of the table", (long long)cfg->seq,
          (long long)npos);
      return -1;
    }
    out = (Shape){3, {cfg->seq, cfg->micro_batch, N(b, in[0])->shape.d[1]}};
    lay = LAYOUT_SB;
    break;
  }
  case OP_LINEAR:
  case OP_MATMUL: {
    int lin = c->op == OP_LINEAR;
    if (want_param(b, p[1], in[1], "the weight", op) || want_rank(b, p[1], in[1], 2, "the weight", op)) return -1;
    const Shape *x = &N(b, in[0])->shape, *w = &N(b, in[1])->shape;
    if (x->nd < 1) {
      err(b, p[0]->loc, "%s needs a tensor with a feature dimension", op);
      return -1;
    }
    int64_t k = lin ? w->d[1] : w->d[0], n = lin ? w->d[0] : w->d[1];
    if (x->d[x->nd - 1] != k) {
      err(b, e->loc, "shape mismatch in %s: the input %s has %lld features but the weight %s expects %lld (%s)", op,
          sh(x, s1), (long long)x->d[x->nd - 1], sh(w, s2), (long long)k,
          lin ? "linear weights are [out, in]" : "matmul weights are [in, out]");
      return -1;
    }
    if (c->npos == 3) {
      const Shape *bs = &N(b, in[2])->shape;
      if (want_param(b, p[2], in[2], "the bias", op)) return -1;
      if (bs->nd != 1 || bs->d[0] != n) {
        err(b, p[2]->loc, "shape mismatch in %s: the bias is %s, expected [%lld]", op, sh(bs, s1), (long long)n);
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
        err(b, p[i]->loc, "shape mismatch in %s: %s is %s but the input %s normalises over its last dimension", op,
            what, sh(w, s1), sh(x, s2));
        return -1;
      }
    }
    if (c->a.eps <= 0) {
      err(b, e->loc, "eps must be positive");
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
      err(b, p[0]->loc, "rope needs an even head dimension, got %lld", (long long)x->d[3]);
      return -1;
    }
    if (c->a.theta <= 0) {
      err(b, e->loc, "theta must be positive");
      return -1;
    }
    out = *x;
    lay = LAYOUT_SB;
    break;
  }
  case OP_SPLIT_HEADS: {
    const Shape *x = &N(b, in[0])->shape;
    if (want_rank(b, p[0], in[0], 3, "the input", op)) return -1;
    if (c->a.heads <= 0 || x->d[2] % c->a.heads) {
      err(b, e->loc, "split_heads: %lld heads do not divide the %lld features of %s", (long long)c->a.heads,
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
      err(b, e->loc, "shape mismatch in attention: key %s and value %s differ", sh(k, s1), sh(v, s2));
      return -1;
    }
    if (q->d[0] != k->d[0] || q->d[1] != k->d[1] || q->d[3] != k->d[3]) {
      err(b, e->loc, "shape mismatch in attention: query %s and key %s must agree in S, B and head size", sh(q, s1),
          sh(k, s2));
      return -1;
    }
    if (q->d[2] % k->d[2]) {
      err(b, e->loc, "the %lld key/value heads must divide the %lld query heads (grouped-query attention)",
          (long long)k->d[2], (long long)q->d[2]);
      return -1;
    }
    int64_t tp = cfg->tp;
    if (tp > 1 && q->d[2] % tp) {
      err(b, e->loc, "tensor-parallel degree %lld does not divide the %lld query heads", (long long)tp,
          (long long)q->d[2]);
      return -1;
    }
    if (tp > 1 && k->d[2] % tp && tp % k->d[2]) {
      err(b, e->loc, "tensor-parallel degree %lld neither divides the %lld key/value heads nor is a multiple of them",
          (long long)tp, (long long)k->d[2]);
      return -1;
    }
    if (!c->has[1]) c->a.scale = 1.0 / sqrt((double)q->d[3]);
    if (!(c->a.scale > 0)) {
      err(b, e->loc, "scale must be positive");
      return -1;
    }
    out = *q;
    lay = LAYOUT_SB;
    break;
  }
  case OP_SILU:
  case OP_GELU:
  case OP_RELU:
    out = N(b, in[0])->shape;
    lay = N(b, in[0])->layout;
    break;
  case OP_ADD:
  case OP_MUL: {
    const Shape *x = &N(b, in[0])->shape, *y = &N(b, in[1])->shape;
    if (!ir_shape_eq(x, y)) {
      err(b, e->loc, "shape mismatch in '%c': %s vs %s", c->op == OP_ADD ? '+' : '*', sh(x, s1), sh(y, s2));
      return -1;
    }
    Layout lx = N(b, in[0])->layout, ly = N(b, in[1])->layout;
    if (lx && ly && lx != ly) {
      err(b, e->loc, "layout mismatch in '%c': one side is sequence-first, the other batch-first",
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
      err(b, e->loc, "chunk: %lld parts do not divide the last dimension of %s", (long long)c->a.parts, sh(x, s1));
      return -1;
    }
    if (c->a.index < 0 || c->a.index >= c->a.parts) {
      err(b, e->loc, "chunk: index %lld is outside 0..%lld", (long long)c->a.index, (long long)c->a.parts - 1);
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
      err(b, p[0]->loc, "transpose_sb needs an activation with [S,B] or [B,S] leading axes");
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
    if (b->g->loss >= 0) {
      err(b, e->loc, "a second loss: the model must have exactly one cross_entropy");
      diag_note(b->src, N(b, b->g->loss)->loc, "the first is here");
      return -1;
    }
    out = (Shape){0, {0}};
    lay = LAYOUT_NONE;
    break;
  }
  /* not callable (a '.' name): tensor() makes calls of the ops above only */
  case OP_INPUT:
  case OP_PARAM:
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
  case OP_ADD_BIAS: diag_fatal("internal: a call of %s, which the language cannot call", op);
  }
  int64_t numel = 1;
  for (int i = 0; i < out.nd; i++)
    if (__builtin_mul_overflow(numel, out.d[i], &numel) || numel > PP_MAX_NUMEL) {
      err(b, e->loc, "the result of %s would have more than 2^40 elements", op);
      return -1;
    }
  int id = new_node(b, c->op, e->loc);
  IrNode *n = N(b, id);
  n->nin = c->npos;
  memcpy(n->in, c->in, sizeof n->in[0] * (size_t)c->npos);
  n->shape = out;
  n->layout = lay;
  n->a = c->a;
  if (c->op == OP_CROSS_ENTROPY) b->g->loss = id;
  return id;
}

/* The repeated layer reads only its own values, its parameters and the hidden state it carries;
 * the code after it reads only the final hidden state: a pipeline boundary passes one tensor. */
static int check_region(Builder *b, const Expr *e, int id) {
  IrNode *n = N(b, id);
  if (n->op == OP_PARAM) {
    if (b->region == REG_LAYER && n->layer < 0) {
      err(b, e->loc,
          "parameter '%s' is declared outside the repeated layer but used inside it: declare it in the for block",
          e->name);
      return 1;
    }
    return 0;
  }
  if (n->op == OP_INPUT) {
    if (b->region == REG_LAYER) {
      err(b, e->loc, "the repeated layer cannot read the input '%s'", e->name);
      return 1;
    }
    return 0;
  }
  return 0;
}

static int tensor(Builder *b, const Expr *e) {
  switch (e->kind) {
  case E_NAME: {
    Bind *x = lookup(b, e->name);
    if (!x) {
      err(b, e->loc, "undefined name '%s'", e->name);
      return -1;
    }
    if (x->kind == B_DIM) {
      err(b, e->loc, "'%s' is a dimension, not a tensor", e->name);
      return -1;
    }
    if (x->node < 0) return -1; /* its definition failed and was reported */
    if (b->region == REG_POST && x->kind == B_TENSOR && x->depth == -1) {
      err(b, e->loc,
          "'%s' was computed before the repeated layers; after them only the hidden state they carry can "
          "be read",
          e->name);
      return -1;
    }
    if (check_region(b, e, x->node)) return -1;
    return x->node;
  }
  case E_BIN: {
    if (e->op != '+' && e->op != '*') {
      err(b, e->loc, "'%c' does not apply to tensors: only + and * do", e->op);
      return -1;
    }
    Call c = {.e = e, .op = e->op == '+' ? OP_ADD : OP_MUL, .npos = 2, .pos = {e->lhs, e->rhs}};
    if ((c.in[0] = tensor(b, e->lhs)) < 0 || (c.in[1] = tensor(b, e->rhs)) < 0) return -1;
    return infer(b, &c);
  }
  case E_CALL: {
    Op op = ir_op_lookup(e->name);
    if (op == OP__COUNT) {
      err(b, e->name_loc, "unknown op '%s'", e->name);
      return -1;
    }
    Call c = {.e = e, .op = op};
    if (read_call(b, e, &c)) return -1;
    set_defaults(&c);
    return infer(b, &c);
  }
  case E_INT: err(b, e->loc, "expected a tensor, found the integer %lld", (long long)e->ival); return -1;
  case E_FLOAT: err(b, e->loc, "expected a tensor, found the number %g", e->fval); return -1;
  case E_NEG: err(b, e->loc, "unary '-' does not apply to tensors"); return -1;
  case E_STR:
  case E_WORD: err(b, e->loc, "expected a tensor"); return -1;
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
      err(b, a->val->loc, "more than %d dimensions", IR_MAX_DIMS);
      return 1;
    }
    if (text) text[s->nd] = loc_text(b, a->val->loc);
    bad |= eval_dim(b, a->val, &s->d[s->nd]);
    s->nd++;
  }
  int64_t numel = 1;
  for (int i = 0; !bad && i < s->nd; i++)
    if (__builtin_mul_overflow(numel, s->d[i], &numel) || numel > PP_MAX_NUMEL) {
      err(b, dims->val->loc, "the shape has more than 2^40 elements");
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
    err(b, at, "the checkpoint name is empty");
    return NULL;
  }
  for (const char *c = t; *c; c++) {
    if (*c == '{') {
      const char *end = strchr(c, '}');
      if (!end) {
        err(b, at, "unclosed '{' in the checkpoint name");
        return NULL;
      }
      size_t n = (size_t)(end - c - 1);
      if (!b->loopvar) {
        err(b, at, "'{%.*s}' in a checkpoint name outside the repeated layer", (int)n, c + 1);
        return NULL;
      }
      if (n != strlen(b->loopvar) || strncmp(c + 1, b->loopvar, n)) {
        err(b, at, "'{%.*s}' in the checkpoint name: only the layer index {%s} can be substituted", (int)n, c + 1,
            b->loopvar);
        return NULL;
      }
      k += (size_t)snprintf(out + k, sizeof out - k, "%d", b->layer);
      used = 1;
      c = end;
    } else if (*c == '}') {
      err(b, at, "unmatched '}' in the checkpoint name");
      return NULL;
    } else {
      out[k++] = *c;
    }
    if (k > PP_MAX_NAME) {
      if (b->layer >= 0) err(b, at, "the checkpoint name of layer %d is longer than %d bytes", b->layer, PP_MAX_NAME);
      else err(b, at, "the checkpoint name is longer than %d bytes", PP_MAX_NAME);
      return NULL;
    }
  }
  out[k] = 0;
  int64_t bad = pp_name_bad_at(out); /* the rule ppr and safetensors headers share */
  if (bad >= 0) {
    unsigned char c = (unsigned char)out[bad];
    if (c >= 127) err(b, at, "the checkpoint name has a byte that is not ASCII (0x%02x): names are printable ASCII", c);
    else err(b, at, "the checkpoint name has a space, quote, backslash, '#' or control character");
    return NULL;
  }
  if (b->loopvar && !used) {
    err(b, at, "inside the repeated layer the checkpoint name must contain {%s}, or every layer would share it",
        b->loopvar);
    return NULL;
  }
  return xstrdup(out);
}

/* Whether another parameter has checkpoint name `name` (reported against declaration s). */
static bool ckpt_taken(Builder *b, const Stmt *s, const char *name) {
  int other = ckpt_find(b, name);
  if (other < 0) return false;
  err(b, s->ckpt_loc, "checkpoint name '%s' is used twice", name);
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
               .shard_rep = 1};
  int bad = eval_shape(b, s->dims, &p.shape, p.dim_text);
  if (!s->ckpt) {
    err(b, s->name_loc, "parameter '%s' has no checkpoint name: add as \"...\"", s->name);
    bad = 1;
  } else if (!(p.name = expand_ckpt(b, s))) bad = 1;
  if (!s->value) {
    err(b, s->name_loc, "parameter '%s' has no initializer: add init normal(std=...), zeros or ones", s->name);
    bad = 1;
  } else {
    const Expr *v = s->value;
    if (v->kind == E_NAME && !strcmp(v->name, "zeros")) p.init = INIT_ZEROS;
    else if (v->kind == E_NAME && !strcmp(v->name, "ones")) p.init = INIT_ONES;
    else if (v->kind == E_CALL && !strcmp(v->name, "normal")) {
      const Arg *a = v->args;
      if (!a || a->next || (a->key && strcmp(a->key, "std"))) {
        err(b, v->loc, "normal takes one argument: normal(std=...)");
        bad = 1;
      } else if (eval_float(b, a->val, &p.std)) bad = 1;
      else if (!(p.std > 0)) {
        err(b, a->val->loc, "the standard deviation must be positive");
        bad = 1;
      }
      p.init = INIT_NORMAL;
    } else {
      err(b, v->loc, "unknown initializer (expected normal(std=...), zeros or ones)");
      bad = 1;
    }
  }
  if (s->role) {
    static const char *roles[] = {"replicated", "column", "row", "vocab"};
    int r = 0;
    while (r < 4 && strcmp(roles[r], s->role)) r++;
    if (r == 4) {
      err(b, s->role_loc, "unknown tensor-parallel role '%s' (expected column, row, vocab or replicated)", s->role);
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
  int id = new_node(b, OP_PARAM, s->name_loc);
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
    err(b, s->loc, "inputs are declared outside the repeated layer");
    return;
  }
  if (strcmp(s->dtype, "i32")) {
    err(b, s->dtype_loc, "inputs are token ids or labels of type i32, not '%s'", s->dtype);
    return;
  }
  const Arg *d = s->dims;
  if (!d || !d->next || d->next->next || d->val->kind != E_NAME || strcmp(d->val->name, "B") ||
      d->next->val->kind != E_NAME || strcmp(d->next->val->name, "S")) {
    err(b, d ? d->val->loc : s->loc, "an input's shape is [B, S] (micro-batch, sequence)");
    return;
  }
  if (b->g->ninputs == 2) {
    err(b, s->loc, "a model has at most two inputs: token ids and labels");
    return;
  }
  int id = new_node(b, OP_INPUT, s->name_loc);
  N(b, id)->dtype = DT_I32;
  N(b, id)->shape = (Shape){2, {b->g->cfg.micro_batch, b->g->cfg.seq}};
  N(b, id)->param = b->g->ninputs;
  N(b, id)->var = s->name;
  N(b, id)->layout = LAYOUT_BS;
  b->g->inputs[b->g->ninputs++] = (IrInput){.var = s->name, .node = id, .loc = s->name_loc};
  bind(b, s->name, B_INPUT, s->name_loc)->node = id;
}

static void stmts(Builder *b, const Stmt *s);

static void let(Builder *b, const Stmt *s) {
  if (check_new_name(b, s->name, s->name_loc, B_TENSOR)) return;
  int id = tensor(b, s->value); /* -1 after an error: the name is bound to a poisoned value */
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
    err(b, s->loc, "the repeated layer cannot be nested");
    return;
  }
  if (b->g->nlayers) {
    err(b, s->loc, "a second repeated-layer block: a model has one");
    diag_note(b->src, b->g->layers_loc, "the first is here");
    return;
  }
  int64_t lo, hi;
  if (eval_int(b, s->value, &lo) || eval_dim(b, s->hi, &hi)) return;
  if (lo != 0) {
    err(b, s->value->loc, "the layer range must start at 0");
    return;
  }
  if (hi > 100000) {
    err(b, s->hi->loc, "%lld layers is more than this compiler supports (100000)", (long long)hi);
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
        err(b, s->loc,
            "the repeated layer does not update any tensor defined before it: it must carry the hidden "
            "state (for example x = x + ...)");
      else
        err(b, s->loc,
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
      err(b, s->loc,
          "the hidden state '%s' enters the layer as %s and leaves as %s: it must be the same [S,B,H] "
          "tensor",
          outer[which]->name, sh(in, s1), sh(out, s2));
      break;
    }
    /* every value the layer read from outside must be the carried state */
    for (int i = b->g->nnodes - 1; i >= 0 && N(b, i)->layer == l; i--)
      for (int k = 0; k < N(b, i)->nin; k++) {
        IrNode *src = N(b, N(b, i)->in[k]);
        if (src->op == OP_PARAM || src->op == OP_INPUT || src->layer == l || N(b, i)->in[k] == start[which]) continue;
        err(b, N(b, i)->loc,
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
        err(b, s->loc, "'model' belongs at the top of the file");
        break;
      }
      if (pp_name_bad_at(s->name) >= 0) {
        err(b, s->name_loc,
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
      if (b->depth) err(b, s->loc, "'%s' belongs outside the repeated layer", s->kind == S_MESH ? "mesh" : "train");
      break;
    }
  }
}

/* ============================================================================================
 * Whole-model checks: uses, the loss, and the mesh against the model
 * ========================================================================================== */

/* Which dimension of a parameter its tensor-parallel role splits, from how it is used. */
static void check_roles(Builder *b) {
  Graph *g = b->g;
  int64_t tp = g->cfg.tp;
  int *used = xcalloc((size_t)g->nparams + 1, sizeof *used);
  for (int i = 0; i < g->nnodes; i++) {
    IrNode *n = &g->nodes[i];
    for (int k = 0; k < n->nin; k++) {
      IrNode *src = &g->nodes[n->in[k]];
      if (src->op != OP_PARAM) continue;
      IrParam *p = &g->params[src->param];
      used[src->param] = 1;
      if (p->role == ROLE_REPLICATED) continue;
      int dim = -1;
      const char *why = NULL;
      int lin = n->op == OP_LINEAR, mm = n->op == OP_MATMUL;
      if ((lin || mm) && k == 1) {
        if (p->role == ROLE_COLUMN) dim = lin ? 0 : 1, why = "output";
        if (p->role == ROLE_ROW) dim = lin ? 1 : 0, why = "input";
        if (p->role == ROLE_VOCAB) dim = lin ? 0 : 1, why = "vocabulary";
      } else if ((lin || mm) && k == 2) {
        if (p->role == ROLE_COLUMN) dim = 0, why = "output";
        if (p->role == ROLE_ROW) {
          err(b, p->role_loc,
              "the bias of a row-parallel linear is added once, after the reduction: declare '%s' "
              "replicated",
              p->var);
          continue;
        }
        if (p->role == ROLE_VOCAB) dim = 0, why = "vocabulary";
      } else if (n->op == OP_EMBEDDING && k == 1) {
        if (p->role != ROLE_VOCAB) {
          err(b, p->role_loc, "an embedding table is split by rows: its role is 'vocab' (or replicated), not '%s'",
              role_name(p->role));
          continue;
        }
        dim = 0, why = "vocabulary";
      } else {
        err(b, p->role_loc,
            "role '%s' applies to the weight or bias of a linear/matmul or an embedding table, but "
            "'%s' is used by %s",
            role_name(p->role), p->var, ir_ops[n->op].name);
        continue;
      }
      if (p->role == ROLE_VOCAB) continue; /* a vocabulary not divisible by tp is padded */
      if (tp > 1 && p->shape.d[dim] % tp)
        err(b, p->loc,
            "tensor-parallel degree %lld does not divide %s (%lld), dimension %d of '%s': the %s dimension "
            "of a %s-parallel %s",
            (long long)tp, p->dim_text[dim], (long long)p->shape.d[dim], dim, p->name, why, role_name(p->role),
            k == 2 ? "bias" : "weight");
      (void)why;
    }
  }
  for (int i = 0; i < g->nparams; i++)
    if (!used[i]) err(b, g->params[i].loc, "parameter '%s' is never used", g->params[i].var);
  free(used);
}

static void check_model(Builder *b) {
  Graph *g = b->g;
  Loc end = b->last_stmt ? b->last_stmt->loc : (Loc){0, 0};
  for (int i = 0; i < g->ninputs; i++)
    if (g->inputs[i].use == USE_NONE) err(b, g->inputs[i].loc, "input '%s' is never used", g->inputs[i].var);
  if (g->loss < 0) err(b, end, "the model has no loss: end it with cross_entropy(logits, labels)");
  check_roles(b);
  if (g->cfg.microbatches % g->cfg.dp)
    err(b, g->cfg.dp_loc.first >= 0 ? g->cfg.dp_loc : end,
        "data-parallel degree %lld does not divide the %lld micro-batches of a step: each replica runs an equal share",
        (long long)g->cfg.dp, (long long)g->cfg.microbatches);
  const Config *c = &g->cfg;
  if (c->tp * c->pp * c->dp > PP_MAX_RANKS) { /* each is at most PP_MAX_STEP_DIM: no overflow */
    Loc at = c->dp_loc.first >= 0   ? c->dp_loc
             : c->pp_loc.first >= 0 ? c->pp_loc
             : c->tp_loc.first >= 0 ? c->tp_loc
                                    : end;
    err(b, at, "the mesh tp %lld x pp %lld x dp %lld is %lld ranks, more than %d", (long long)c->tp, (long long)c->pp,
        (long long)c->dp, (long long)(c->tp * c->pp * c->dp), PP_MAX_RANKS);
  }
  /* a parameter, its gradient and its two AdamW moments live in one rank's arena */
  for (int i = 0; i < g->nparams; i++) {
    const IrParam *q = &g->params[i];
    int64_t numel = ir_shape_numel(&q->shape), local = q->role == ROLE_REPLICATED ? numel : numel / c->tp;
    if (local > PP_MAX_ARENA / 16) {
      err(b, q->loc,
          "parameter '%s' needs %lld bytes of one rank's memory with its gradient and AdamW moments, "
          "more than the arena's %lld",
          q->name, (long long)local * 16, (long long)PP_MAX_ARENA);
      break;
    }
  }
  if (g->cfg.pp > 1 && g->nlayers == 0)
    err(b, end, "pipeline degree %lld needs a repeated layer (for l in 0..N { ... }) to partition",
        (long long)g->cfg.pp);
  else if (g->cfg.pp > g->nlayers && g->nlayers > 0) {
    err(b, g->layers_loc, "pipeline degree %lld is greater than the number of layers (%d): every stage needs a layer",
        (long long)g->cfg.pp, g->nlayers);
    if (g->cfg.pp_loc.first >= 0) diag_note(b->src, g->cfg.pp_loc, "pp is set here");
  }
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
  resolve_config(&b, ast, opt, &g->cfg);
  if (g->cfg.seq < 0 && !src->nerrors)
    err(&b, ast->stmts ? ast->stmts->loc : (Loc){0, 0},
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
