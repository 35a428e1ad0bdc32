/* ir.c — the typed graph: the op table, node storage, shapes and the --emit ir printer. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

#define OP__INFO(e, name, mn, mx, attrs, doc) [OP_##e] = {name, mn, mx, attrs, doc},
const OpInfo ir_ops[OP__COUNT] = {OP__ALL(OP__INFO)};
#undef OP__INFO

Op ir_op_lookup(const char *name) {
  for (int i = 0; i < OP__COUNT; i++)
    if (ir_ops[i].name[0] != '.' && strcmp(ir_ops[i].name, name) == 0) return (Op)i;
  return OP__COUNT;
}

const char *ir_role_name(Role r) {
  static const char *names[] = {"replicated", "column", "row", "vocab"};
  return names[r];
}

int ir_add_node(Graph *g, Op op, Loc loc) {
  if (g->nnodes == g->cap) {
    g->cap = g->cap ? g->cap * 2 : 64;
    g->nodes = xrealloc(g->nodes, (size_t)g->cap * sizeof *g->nodes);
  }
  IrNode *n = &g->nodes[g->nnodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->loc = loc;
  n->layer = -1;
  n->param = -1;
  n->fwd = -1;
  n->gparam = -1;
  return g->nnodes++;
}

int ir_copy_param(Graph *dst, const IrParam *q, const IrNode *like) {
  if (dst->nparams == dst->pcap) {
    dst->pcap = dst->pcap ? 2 * dst->pcap : 32;
    dst->params = xrealloc(dst->params, (size_t)dst->pcap * sizeof *dst->params);
  }
  int pi = dst->nparams++;
  IrParam *c = &dst->params[pi];
  *c = *q;
  c->name = xstrdup(q->name);
  for (int d = 0; d < IR_MAX_DIMS; d++) c->dim_text[d] = q->dim_text[d] ? xstrdup(q->dim_text[d]) : NULL;
  int id = ir_add_node(dst, OP_PARAM, like->loc);
  dst->nodes[id] = *like;
  dst->nodes[id].param = pi;
  dst->params[pi].node = id;
  return pi;
}

int ir_add(Graph *g, Op op, int nin, const int *in, Shape shape) {
  int id = ir_add_node(g, op, NOLOC);
  IrNode *n = &g->nodes[id];
  n->nin = nin;
  for (int k = 0; k < nin; k++) n->in[k] = in[k];
  n->shape = shape;
  n->dtype = PP_F32;
  return id;
}

int64_t ir_shape_numel(const Shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->nd; i++) n *= s->d[i];
  return n;
}

int ir_shape_eq(const Shape *a, const Shape *b) {
  if (a->nd != b->nd) return 0;
  for (int i = 0; i < a->nd; i++)
    if (a->d[i] != b->d[i]) return 0;
  return 1;
}

char *ir_shape_str(const Shape *s, char *buf, size_t n) {
  char tmp[IR_MAX_DIMS * 21 + 4], *t = tmp; /* "[d0,d1,...]" without printf: plans print millions */
  *t++ = '[';
  for (int i = 0; i < s->nd && i < IR_MAX_DIMS; i++) {
    if (i) *t++ = ',';
    char digits[24];
    int k = 0;
    uint64_t v = s->d[i] < 0 ? (uint64_t)0 - (uint64_t)s->d[i] : (uint64_t)s->d[i];
    do digits[k++] = (char)('0' + v % 10);
    while (v /= 10);
    if (s->d[i] < 0) *t++ = '-';
    while (k) *t++ = digits[--k];
  }
  *t++ = ']';
  size_t len = (size_t)(t - tmp) < n ? (size_t)(t - tmp) : n - 1;
  memcpy(buf, tmp, len);
  buf[len] = 0;
  return buf;
}

int ir_verify(const Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = &g->nodes[i];
    if (n->nin < ir_ops[n->op].min_in || n->nin > ir_ops[n->op].max_in) return 1;
    for (int k = 0; k < n->nin; k++)
      if ((n->in[k] < 0 && n->op != OP_CONCAT) || n->in[k] >= i) return 1;
    if (n->shape.nd < 0 || n->shape.nd > IR_MAX_DIMS) return 1;
    for (int k = 0; k < n->shape.nd; k++)
      if (n->shape.d[k] <= 0) return 1;
  }
  return 0;
}

Graph *ir_clone_header(const Graph *g) {
  Graph *s = xcalloc(1, sizeof *s);
  s->src = g->src;
  s->model = xstrdup(g->model);
  s->cfg = g->cfg;
  s->nlayers = g->nlayers;
  s->layers_loc = g->layers_loc;
  s->vocab = g->vocab;
  s->loss_masked = g->loss_masked;
  s->ignore_index = g->ignore_index;
  s->infer = g->infer;
  s->loss = s->seed = -1;
  s->stage = g->stage;
  s->npp = g->npp;
  if (g->bounds) {
    s->bounds = xmalloc((size_t)(g->cfg.pp + 1) * sizeof *s->bounds);
    memcpy(s->bounds, g->bounds, (size_t)(g->cfg.pp + 1) * sizeof *s->bounds);
  }
  return s;
}

void ir_free(Graph *g) {
  if (!g) return;
  for (int i = 0; i < g->nparams; i++) {
    free(g->params[i].name);
    for (int k = 0; k < IR_MAX_DIMS; k++) free(g->params[i].dim_text[k]);
  }
  free(g->params);
  free(g->nodes);
  free(g->grad);
  free(g->bounds);
  free(g->model);
  free(g);
}

/* ============================================================================================
 * --emit ir
 *
 *   %12 = linear %11, %9                 f32[16,2,64]   L0  h        tiny.pdl:31
 * ========================================================================================== */

static int loc_line(const Src *s, Loc at) {
  int line = 1;
  for (int i = 0; i < at.first && i < (int)s->len; i++) line += s->text[i] == '\n';
  return line;
}

/* The attributes the op declares, in its declared order: " eps=1e-06 causal". */
static void print_attrs(FILE *f, const IrNode *n) {
  const char *spec = ir_ops[n->op].attrs;
  while (*spec) {
    const char *end = strchr(spec, ',');
    size_t len = end ? (size_t)(end - spec) : strlen(spec);
    char key[32];
    size_t klen = (size_t)(strchr(spec, ':') - spec);
    memcpy(key, spec, klen);
    key[klen] = 0;
    if (!strcmp(key, "eps")) fprintf(f, " eps=%g", n->a.eps);
    else if (!strcmp(key, "theta")) fprintf(f, " theta=%g", n->a.theta);
    else if (!strcmp(key, "scale")) fprintf(f, " scale=%g", n->a.scale);
    else if (!strcmp(key, "by")) fprintf(f, " by=%.9g", n->a.scale);
    else if (!strcmp(key, "cap")) fprintf(f, " cap=%g", n->a.cap);
    else if (!strcmp(key, "softcap")) {
      if (n->a.cap > 0) fprintf(f, " softcap=%g", n->a.cap);
    } else if (!strcmp(key, "offset")) {
      if (n->a.offset != 0) fprintf(f, " offset=%g", n->a.offset);
    } else if (!strcmp(key, "heads")) fprintf(f, " heads=%lld", (long long)n->a.heads);
    else if (!strcmp(key, "index")) fprintf(f, " index=%lld", (long long)n->a.index);
    else if (!strcmp(key, "parts")) fprintf(f, " parts=%lld", (long long)n->a.parts);
    else if (!strcmp(key, "window")) {
      if (n->a.window) fprintf(f, " window=%lld", (long long)n->a.window);
    } else if (!strcmp(key, "p")) fprintf(f, " p=%g id=%lld", n->a.p, (long long)n->a.dropid);
    else if (!strcmp(key, "ignore_index")) {
      if (n->a.masked) fprintf(f, " ignore_index=%lld", (long long)n->a.ignore_index);
    } else if (!strcmp(key, "causal")) {
      if (n->a.causal) fputs(" causal", f);
    } else if (!strcmp(key, "llama3")) {
      if (n->a.llama3)
        fprintf(f, " llama3 factor=%g low_freq_factor=%g high_freq_factor=%g original_max_pos=%lld", n->a.factor,
                n->a.low_freq_factor, n->a.high_freq_factor, (long long)n->a.original_max_pos);
    }
    spec += len + (end ? 1 : 0);
  }
}

static const char *init_str(const IrParam *p, char *buf, size_t n) {
  if (p->init == INIT_ZEROS) return "zeros";
  if (p->init == INIT_ONES) return "ones";
  snprintf(buf, n, "normal(std=%g)", p->std);
  return buf;
}

void ir_print(FILE *f, const Graph *g) {
  const Config *c = &g->cfg;
  char sb[96], ib[48], tb[160];
  fprintf(f, "# ir of model '%s': %d layers, B=%lld S=%lld, %d nodes, %d parameters\n", g->model, g->nlayers,
          (long long)c->micro_batch, (long long)c->seq, g->nnodes, g->nparams);
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = &g->nodes[i];
    int k = 0;
    if (g->grad && i == g->nfwd)
      fprintf(f, "# backward: one vector-Jacobian rule per op, from %s\n",
              g->seed >= 0 ? "the seed" : "the gradient received from the next stage");
    if (n->op == OP_INPUT) {
      const IrInput *in = &g->inputs[n->param];
      k = snprintf(tb, sizeof tb, "input %s (%s)", in->var,
                   in->use == USE_TOKENS   ? "token ids"
                   : in->use == USE_LABELS ? "labels"
                                           : "unused");
    } else if (n->op == OP_PARAM) {
      const IrParam *p = &g->params[n->param];
      k = snprintf(tb, sizeof tb, "param \"%s\" %s %s", p->name, ir_role_name(p->role), init_str(p, ib, sizeof ib));
    } else {
      k = snprintf(tb, sizeof tb, "%s", ir_ops[n->op].name);
      for (int j = 0; j < n->nin && k < (int)sizeof tb; j++)
        k += n->in[j] < 0 ? snprintf(tb + k, sizeof tb - (size_t)k, "%s zeros", j ? "," : "")
                          : snprintf(tb + k, sizeof tb - (size_t)k, "%s %%%d", j ? "," : "", n->in[j]);
    }
    fprintf(f, "%%%-4d = %s", i, tb);
    if (n->op != OP_INPUT && n->op != OP_PARAM) print_attrs(f, n);
    fprintf(f, " : %s%s", n->dtype == PP_I32 ? "i32" : "f32", ir_shape_str(&n->shape, sb, sizeof sb));
    if (n->layer >= 0) fprintf(f, "  L%d", n->layer);
    if (n->var) fprintf(f, "  %s", n->var);
    if (n->fwd >= 0) fprintf(f, "  stats of %%%d", n->fwd);
    if (n->gparam >= 0) fprintf(f, "  += grad \"%s\"", g->params[n->gparam].name);
    if (n->op == OP_SEED) fprintf(f, "  = 1/%lld", (long long)c->microbatches);
    if (n->loc.first >= 0) fprintf(f, "  @%d", loc_line(g->src, n->loc));
    fputc('\n', f);
  }
  if (g->loss >= 0) fprintf(f, "loss %%%d\n", g->loss);
}
