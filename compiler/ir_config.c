/* ir_config.c — the mesh and the step: the mesh { } and train { } blocks of the .pdl with the
 * command-line flags on top, and the checks of them against the model (tensor-parallel roles,
 * the data-parallel share of micro-batches, the ranks, one rank's arena, the pipeline depth). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp_json.h"
#include "ppc.h"

/* ============================================================================================
 * Settings: mesh { tp pp dp sp cp } and train { micro_batch seq microbatches schedule precision
 * attention_probs attention recompute recompute_layers vocab_pad }
 * ========================================================================================== */

static int setting_int(Builder *b, const Setting *t, int64_t *out) {
  if (t->val->kind != E_INT) {
    ir_build_err(b, t->val->loc, "'%s' must be a positive integer", t->key);
    return 1;
  }
  if (t->val->ival <= 0 || t->val->ival > PP_MAX_STEP_DIM) {
    ir_build_err(b, t->val->loc, "'%s' must be between 1 and %lld, got %lld", t->key, (long long)PP_MAX_STEP_DIM,
                 (long long)t->val->ival);
    return 1;
  }
  *out = t->val->ival;
  return 0;
}

/* A word-valued setting's word: an identifier (gpipe), a word (1f1b) or a string ("zb-h1"); else NULL */
static const char *word(const Expr *v) {
  return v->kind == E_NAME || v->kind == E_WORD || v->kind == E_STR ? v->name : NULL;
}

static void read_settings(Builder *b, const Stmt *s, Config *c) {
  static const char *mesh_keys[] = {"tp", "pp", "dp", "sp", "cp", "zero"};
  static const char *train_keys[] = {"micro_batch",     "seq",       "microbatches", "schedule",         "precision",
                                     "attention_probs", "attention", "recompute",    "recompute_layers", "vocab_pad"};
  int mesh = s->kind == S_MESH;
  const char **keys = mesh ? mesh_keys : train_keys;
  int nkeys = mesh ? (int)(sizeof mesh_keys / sizeof *mesh_keys) : (int)(sizeof train_keys / sizeof *train_keys);
  for (const Setting *t = s->settings; t; t = t->next) {
    for (const Setting *u = s->settings; u != t; u = u->next)
      if (!strcmp(u->key, t->key)) {
        ir_build_err(b, t->key_loc, "'%s' is set twice", t->key);
        goto next;
      }
    int k = 0;
    while (k < nkeys && strcmp(keys[k], t->key)) k++;
    if (k == nkeys) {
      ir_build_err(b, t->key_loc,
                   mesh ? "unknown mesh setting '%s' (expected tp, pp, dp, sp, cp or zero)"
                        : "unknown train setting '%s' (expected micro_batch, seq, microbatches, schedule, precision, "
                          "attention_probs, attention, recompute, recompute_layers or vocab_pad)",
                   t->key);
      continue;
    }
    if (!mesh && k == 3) {
      const Expr *v = t->val;
      const char *name = word(v);
      if (!name || (!sched_known(name) && strcmp(name, "auto"))) { /* sched.c's table */
        ir_build_err(b, v->loc, "unknown schedule (expected " SCHED_NAMES " or auto)");
        continue;
      }
      snprintf(c->schedule, sizeof c->schedule, "%s", name);
      c->sched_loc = v->loc;
      continue;
    }
    if (mesh && k == 3) { /* sp = true | false (or 1 | 0) */
      const Expr *v = t->val;
      const char *name = v->kind == E_NAME || v->kind == E_WORD ? v->name : NULL;
      int on = name && !strcmp(name, "true") ? 1 : name && !strcmp(name, "false") ? 0 : -1;
      if (v->kind == E_INT && (v->ival == 0 || v->ival == 1)) on = (int)v->ival;
      if (on < 0) {
        ir_build_err(b, v->loc, "sp is true or false (sequence parallelism over the tensor-parallel ranks)");
        continue;
      }
      c->sp = on;
      c->sp_loc = v->loc;
      continue;
    }
    if (!mesh && k == 4) {
      const Expr *v = t->val;
      const char *name = word(v);
      int prec = name ? pp_precision_parse(name) : -1;
      if (prec < 0) {
        ir_build_err(b, v->loc, "unknown precision (expected " PP_PRECISION_NAMES ")");
        continue;
      }
      c->precision = (PpPrecision)prec;
      continue;
    }
    if (!mesh && k == 5) {
      const Expr *v = t->val;
      int keep = word(v) ? ir_config_keep_probs(word(v)) : -1;
      if (keep < 0) {
        ir_build_err(b, v->loc,
                     "attention_probs is keep or recompute (attention's probabilities saved for the "
                     "backward, or recomputed there)");
        continue;
      }
      c->keep_probs = keep;
      c->probs_loc = v->loc;
      continue;
    }
    if (!mesh && k == 6) {
      const Expr *v = t->val;
      int gemm = word(v) ? ir_config_att_gemm(word(v)) : -1;
      if (gemm < 0) {
        ir_build_err(b, v->loc,
                     "attention is fused or gemm (kernels that keep no S x S scores, or GEMMs around softmax "
                     "kernels)");
        continue;
      }
      c->att_gemm = gemm;
      continue;
    }
    if (!mesh && k == 7) {
      const Expr *v = t->val;
      int r = word(v) ? ir_config_recompute(word(v)) : -1;
      if (r < 0) {
        ir_build_err(b, v->loc,
                     "recompute is " RECOMPUTE_WORDS " (what a layer's backward computes again instead of keeping it "
                     "from the forward)");
        continue;
      }
      c->recompute = r;
      continue;
    }
    if (!mesh && k == 8) { /* recompute_layers = A..B: layers A to B-1, as a for loop's range */
      const Expr *v = t->val;
      if (v->kind != E_RANGE || v->lhs->kind != E_INT || v->rhs->kind != E_INT) {
        ir_build_err(b, v->loc, "recompute_layers is a range of layers A..B (integers: layers A to B-1)");
        continue;
      }
      c->rc_lo = (int)(v->lhs->ival < 0 ? -1 : v->lhs->ival > INT32_MAX ? INT32_MAX : v->lhs->ival);
      c->rc_hi = (int)(v->rhs->ival < 0 ? -1 : v->rhs->ival > INT32_MAX ? INT32_MAX : v->rhs->ival);
      c->rc_loc = v->loc;
      continue;
    }
    if (mesh && k == 5) { /* zero = 0 | 1 */
      const Expr *v = t->val;
      if (v->kind != E_INT || (v->ival != 0 && v->ival != 1)) {
        ir_build_err(b, v->loc, "zero is 0 or 1 (1: the optimizer's state sharded over the data-parallel ranks)");
        continue;
      }
      c->zero = (int)v->ival;
      c->zero_loc = v->loc;
      continue;
    }
    int64_t v;
    if (setting_int(b, t, &v)) continue;
    if (!mesh && k == 9) {
      c->vocab_pad = v;
      continue;
    }
    if (mesh && k == 4) {
      c->cp = v, c->cp_loc = t->val->loc;
      continue;
    }
    int64_t *slot[] = {&c->tp, &c->pp, &c->dp, &c->micro_batch, &c->seq, &c->microbatches};
    *slot[(mesh ? 0 : 3) + k] = v;
    if (mesh) *(Loc *[]){&c->tp_loc, &c->pp_loc, &c->dp_loc}[k] = t->val->loc;
  next:;
  }
}

/* checkpoint { optional_prefix = "transformer." }: a prefix of the params' checkpoint names that a
 * checkpoint's names may all lack (the hub's GPT-2 files name `wte.weight` what the model calls
 * `transformer.wte.weight`); ppr --init accepts either (docs/language.md). */
static void read_checkpoint(Builder *b, const Stmt *s, Config *c) {
  for (const Setting *t = s->settings; t; t = t->next) {
    for (const Setting *u = s->settings; u != t; u = u->next)
      if (!strcmp(u->key, t->key)) {
        ir_build_err(b, t->key_loc, "'%s' is set twice", t->key);
        goto next;
      }
    if (strcmp(t->key, "optional_prefix")) {
      ir_build_err(b, t->key_loc, "unknown checkpoint setting '%s' (expected optional_prefix)", t->key);
      continue;
    }
    const Expr *v = t->val;
    if (v->kind != E_STR) {
      ir_build_err(b, v->loc, "optional_prefix is a string: optional_prefix = \"transformer.\"");
      continue;
    }
    size_t n = strlen(v->name);
    if (n == 0 || n > PPC_MAX_PREFIX) {
      ir_build_err(b, v->loc, "optional_prefix must have 1 to %d bytes, not %zu", PPC_MAX_PREFIX, n);
      continue;
    }
    if (pp_name_bad_at(v->name) >= 0) { /* the rule of checkpoint names */
      ir_build_err(b, v->loc,
                   "optional_prefix has a space, quote, backslash, '#', control character or non-ASCII byte: it "
                   "is the start of checkpoint names, which are printable ASCII");
      continue;
    }
    snprintf(c->ckpt_prefix, sizeof c->ckpt_prefix, "%s", v->name);
    c->prefix_loc = v->loc;
  next:;
  }
}

#define HF_CONFIG_TAG "# hf-config: "

int ir_config_hf_json(const Src *src, char **out, Loc *at) {
  *out = NULL;
  const char *t = src->text, *c = NULL;
  for (const char *l = t; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
    if (!strncmp(l, HF_CONFIG_TAG, strlen(HF_CONFIG_TAG))) {
      c = l;
      break;
    }
  if (!c) return 0;
  const char *j = c + strlen(HF_CONFIG_TAG), *e = strchr(j, '\n');
  size_t n = e ? (size_t)(e - j) : strlen(j);
  *at = (Loc){(int)(c - t), (int)(j + n - t)};
  json_t *v = json_loadb(j, n, 0, NULL);
  int prec = pp_json_precision(v); /* every number back, as --from-hf wrote them */
  char *d = json_is_object(v) ? json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(prec)) : NULL;
  json_decref(v);
  if (!d) return -1;
  /* compact and ASCII: a space or '#' can only be inside a string, where \uXXXX reads the same */
  size_t k = 0;
  char *o = xmalloc(6 * strlen(d) + 1);
  for (const char *q = d; *q; q++)
    if (*q == ' ' || *q == '#') k += (size_t)sprintf(o + k, "\\u%04x", (unsigned)*q);
    else o[k++] = *q;
  o[k] = 0;
  free(d);
  *out = o;
  return 0;
}

/* Settings come first, whatever their place in the file: every shape needs B and S. */
void ir_config_resolve(Builder *b, const Ast *ast, const Options *o, Config *c) {
  *c = (Config){.tp = 1,
                .pp = 1,
                .dp = 1,
                .cp = 1,
                .micro_batch = 1,
                .seq = -1,
                .microbatches = 1,
                .vocab_pad = PPC_VOCAB_PAD,
                .tp_loc = NOLOC,
                .pp_loc = NOLOC,
                .dp_loc = NOLOC,
                .cp_loc = NOLOC,
                .sched_loc = NOLOC,
                .probs_loc = NOLOC,
                .rc_lo = 0,
                .rc_hi = INT32_MAX,
                .rc_loc = NOLOC,
                .zero_loc = NOLOC,
                .sp_loc = NOLOC,
                .prefix_loc = NOLOC};
  snprintf(c->schedule, sizeof c->schedule, "1f1b");
  static const char *const block_names[3] = {"mesh", "train", "checkpoint"};
  const Stmt *seen[3] = {0, 0, 0};
  for (const Stmt *s = ast->stmts; s; s = s->next) {
    if (s->kind != S_MESH && s->kind != S_TRAIN && s->kind != S_CHECKPOINT) continue;
    int k = s->kind == S_MESH ? 0 : s->kind == S_TRAIN ? 1 : 2;
    if (seen[k]) {
      ir_build_err(b, s->loc, "a second '%s' block", block_names[k]);
      diag_note(ir_build_graph(b)->src, seen[k]->loc, "the first is here");
      continue;
    }
    seen[k] = s;
    if (k == 2) read_checkpoint(b, s, c);
    else read_settings(b, s, c);
  }
  if (o->tp > 0) c->tp = o->tp, c->tp_loc = NOLOC;
  if (o->pp > 0) c->pp = o->pp, c->pp_loc = NOLOC;
  if (o->dp > 0) c->dp = o->dp, c->dp_loc = NOLOC;
  if (o->cp > 0) c->cp = o->cp, c->cp_loc = NOLOC;
  if (o->micro_batch > 0) c->micro_batch = o->micro_batch;
  if (o->seq > 0) c->seq = o->seq;
  if (o->microbatches > 0) c->microbatches = o->microbatches;
  if (o->schedule) snprintf(c->schedule, sizeof c->schedule, "%s", o->schedule), c->sched_loc = NOLOC;
  if (o->precision >= 0) c->precision = (PpPrecision)o->precision;
  if (o->sp >= 0) c->sp = o->sp, c->sp_loc = NOLOC;
  if (o->keep_probs >= 0) c->keep_probs = o->keep_probs, c->probs_loc = NOLOC;
  if (o->att_gemm >= 0) c->att_gemm = o->att_gemm;
  if (o->vocab_pad > 0) c->vocab_pad = o->vocab_pad;
  if (o->recompute >= 0) c->recompute = o->recompute;
  if (o->zero >= 0) c->zero = o->zero, c->zero_loc = NOLOC;
  if (o->rc_lo >= 0) c->rc_lo = o->rc_lo, c->rc_hi = o->rc_hi, c->rc_loc = NOLOC;
}

int ir_config_att_gemm(const char *name) { return !strcmp(name, "gemm") ? 1 : !strcmp(name, "fused") ? 0 : -1; }

int ir_config_recompute(const char *name) {
  for (int r = 0; r < (int)(sizeof recompute_names / sizeof *recompute_names); r++)
    if (!strcmp(name, recompute_names[r])) return r;
  return -1;
}

int ir_config_keep_probs(const char *name) { return !strcmp(name, "keep") ? 1 : !strcmp(name, "recompute") ? 0 : -1; }

/* ============================================================================================
 * The mesh against the model
 * ========================================================================================== */

/* Which dimension of a parameter its tensor-parallel role splits, from how it is used. */
static void check_roles(Builder *b) {
  Graph *g = ir_build_graph(b);
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
          ir_build_err(b, p->role_loc,
                       "the bias of a row-parallel linear is added once, after the reduction: declare '%s' "
                       "replicated",
                       p->var);
          continue;
        }
        if (p->role == ROLE_VOCAB) dim = 0, why = "vocabulary";
      } else if (n->op == OP_EMBEDDING && k == 1) {
        if (p->role != ROLE_VOCAB) {
          ir_build_err(b, p->role_loc,
                       "an embedding table is split by rows: its role is 'vocab' (or replicated), not '%s'",
                       ir_role_name(p->role));
          continue;
        }
        dim = 0, why = "vocabulary";
      } else {
        ir_build_err(b, p->role_loc,
                     "role '%s' applies to the weight or bias of a linear/matmul or an embedding table, but "
                     "'%s' is used by %s",
                     ir_role_name(p->role), p->var, ir_ops[n->op].name);
        continue;
      }
      if (p->role == ROLE_VOCAB) { /* a vocabulary not divisible by tp is padded: every rank needs a row of it */
        int64_t rows = vocab_pad_rows(p->shape.d[dim], tp, 1);
        if (!vocab_rows_fit(p->shape.d[dim], tp, rows))
          ir_build_err(b, p->loc,
                       "tensor-parallel degree %lld leaves rank %lld no row of %s (%lld), dimension %d of '%s': each "
                       "rank holds %lld rows of the vocabulary",
                       (long long)tp, (long long)(tp - 1), p->dim_text[dim], (long long)p->shape.d[dim], dim, p->name,
                       (long long)rows);
        continue;
      }
      if (tp > 1 && p->shape.d[dim] % tp)
        ir_build_err(b, p->loc,
                     "tensor-parallel degree %lld does not divide %s (%lld), dimension %d of '%s': the %s dimension "
                     "of a %s-parallel %s",
                     (long long)tp, p->dim_text[dim], (long long)p->shape.d[dim], dim, p->name, why,
                     ir_role_name(p->role), k == 2 ? "bias" : "weight");
      (void)why;
    }
  }
  for (int i = 0; i < g->nparams; i++)
    if (!used[i]) ir_build_err(b, g->params[i].loc, "parameter '%s' is never used", g->params[i].var);
  free(used);
}

/* The mesh against the model; end: where a message without a place of its own points. */
void ir_config_check(Builder *b, Loc end) {
  Graph *g = ir_build_graph(b);
  check_roles(b);
  if (g->cfg.ckpt_prefix[0]) { /* a prefix no name has would be a typo */
    size_t n = strlen(g->cfg.ckpt_prefix);
    int any = 0;
    for (int i = 0; i < g->nparams && !any; i++) any = !strncmp(g->params[i].name, g->cfg.ckpt_prefix, n);
    if (!any && g->nparams > 0)
      ir_build_err(b, g->cfg.prefix_loc, "optional_prefix '%s' starts no parameter's checkpoint name",
                   g->cfg.ckpt_prefix);
  }
  char *hf = NULL;
  Loc hf_at = NOLOC;
  if (ir_config_hf_json(g->src, &hf, &hf_at))
    ir_build_err(b, hf_at,
                 "the '# hf-config:' comment is not a JSON object (ppc --from-hf writes it; the listing "
                 "carries it for ppr --save's config.json)");
  free(hf);
  if (g->cfg.microbatches % g->cfg.dp)
    ir_build_err(
        b, g->cfg.dp_loc.first >= 0 ? g->cfg.dp_loc : end,
        "data-parallel degree %lld does not divide the %lld micro-batches of a step: each replica runs an equal share",
        (long long)g->cfg.dp, (long long)g->cfg.microbatches);
  const Config *c = &g->cfg;
  if (c->keep_probs && !c->att_gemm)
    ir_build_err(b, c->probs_loc.first >= 0 ? c->probs_loc : end,
                 "attention_probs = keep applies to attention = gemm: the fused attention (the default) keeps "
                 "no probabilities");
  if (c->zero && c->dp * c->cp < 2)
    ir_build_err(b, c->zero_loc.first >= 0 ? c->zero_loc : end,
                 "zero = 1 shards the optimizer's state over the data-parallel ranks: it needs dp (or cp) > 1");
  if (c->rc_lo != 0 || c->rc_hi != INT32_MAX) { /* recompute_layers: a range of the model's layers */
    Loc at = c->rc_loc.first >= 0 ? c->rc_loc : end;
    if (c->recompute == RECOMPUTE_NONE)
      ir_build_err(b, at, "recompute_layers names the layers to recompute: it needs recompute = selective or full");
    else if (c->rc_lo < 0 || c->rc_lo >= c->rc_hi || c->rc_hi > g->nlayers)
      ir_build_err(b, at, "recompute_layers %d..%d is not a range of the model's layers 0..%d (A..B: layers A to B-1)",
                   c->rc_lo, c->rc_hi, g->nlayers);
  }
  if (c->sp) { /* sequence parallelism: S split over the TP ranks */
    Loc at = c->sp_loc.first >= 0 ? c->sp_loc : end;
    if (c->tp < 2)
      ir_build_err(b, at, "sequence parallelism splits the sequence over the tensor-parallel ranks: it needs tp > 1");
    else if (c->seq % c->tp)
      ir_build_err(b, at, "sequence parallelism splits seq %lld over tp %lld: tp must divide seq", (long long)c->seq,
                   (long long)c->tp);
  }
  if (c->cp > 1) { /* context parallelism: S split over the cp ranks, then (with sp) over the TP ranks */
    Loc at = c->cp_loc.first >= 0 ? c->cp_loc : end;
    if (c->seq % c->cp)
      ir_build_err(b, at, "context parallelism splits seq %lld over cp %lld: cp must divide seq", (long long)c->seq,
                   (long long)c->cp);
    else if (c->sp && (c->seq / c->cp) % c->tp)
      ir_build_err(b, at,
                   "sequence parallelism splits each context-parallel rank's %lld positions over tp %lld: tp must "
                   "divide seq/cp",
                   (long long)(c->seq / c->cp), (long long)c->tp);
  }
  /* each is at most PP_MAX_STEP_DIM (2^20): tp·pp·dp fits 64 bits, and times cp once it is <= 2^16 */
  if (c->tp * c->pp * c->dp > PP_MAX_RANKS || c->tp * c->pp * c->dp * c->cp > PP_MAX_RANKS) {
    Loc at = c->cp_loc.first >= 0   ? c->cp_loc
             : c->dp_loc.first >= 0 ? c->dp_loc
             : c->pp_loc.first >= 0 ? c->pp_loc
             : c->tp_loc.first >= 0 ? c->tp_loc
                                    : end;
    if (c->cp > 1)
      ir_build_err(b, at, "the mesh tp %lld x pp %lld x dp %lld x cp %lld is more than %d ranks", (long long)c->tp,
                   (long long)c->pp, (long long)c->dp, (long long)c->cp, PP_MAX_RANKS);
    else
      ir_build_err(b, at, "the mesh tp %lld x pp %lld x dp %lld is %lld ranks, more than %d", (long long)c->tp,
                   (long long)c->pp, (long long)c->dp, (long long)(c->tp * c->pp * c->dp), PP_MAX_RANKS);
  }
  /* a parameter, its gradient and its two AdamW moments live in one rank's arena */
  for (int i = 0; i < g->nparams; i++) {
    const IrParam *q = &g->params[i];
    int64_t numel = ir_shape_numel(&q->shape), local = q->role == ROLE_REPLICATED ? numel : numel / c->tp;
    if (local > PP_MAX_ARENA / 16) {
      ir_build_err(b, q->loc,
                   "parameter '%s' needs %lld bytes of one rank's memory with its gradient and AdamW moments, "
                   "more than the arena's %lld",
                   q->name, (long long)local * 16, (long long)PP_MAX_ARENA);
      break;
    }
  }
  if (g->cfg.pp > 1 && g->nlayers == 0)
    ir_build_err(b, end, "pipeline degree %lld needs a repeated layer (for l in 0..N { ... }) to partition",
                 (long long)g->cfg.pp);
  else if (g->cfg.pp > g->nlayers && g->nlayers > 0) {
    ir_build_err(b, g->layers_loc,
                 "pipeline degree %lld is greater than the number of layers (%d): every stage needs a layer",
                 (long long)g->cfg.pp, g->nlayers);
    if (g->cfg.pp_loc.first >= 0) diag_note(g->src, g->cfg.pp_loc, "pp is set here");
  }
}
