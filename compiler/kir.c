/* kir.c — the kernel IR's builder: a kernel's buffers, scalar arguments, expressions and its tree
 * of statements (loops, temporaries, reductions, conditionals, stores), appended one call at a
 * time; cg_kir.c renders what it builds. */
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

Kernel *kir_new(const char *name, KMode mode, int64_t rows, int block) {
  if (block < 1 || block > KIR_MAX_BLOCK || (block & (block - 1)))
    diag_fatal("internal: kernel %s: %d threads per block is not a power of two up to %d", name, block, KIR_MAX_BLOCK);
  Kernel *k = xcalloc(1, sizeof *k);
  snprintf(k->name, sizeof k->name, "%s", name);
  k->mode = mode;
  k->rows = rows;
  k->block = block;
  k->body = -1;
  k->nopen = 1;
  k->open[0] = -1; /* the row body */
  k->tail[0] = -1;
  k->work = 1;
  return k;
}

void kir_free(Kernel *k) {
  if (!k) return;
  free(k->e);
  free(k->s);
  free(k);
}

/* Whether statement list s holds a loop (a sequential one, or a thread's loop). */
static bool has_loop(const Kernel *k, int s) {
  for (; s >= 0; s = k->s[s].next) {
    const KStmt *st = &k->s[s];
    switch (st->kind) {
    case KS_FOR:
    case KS_TFOR:
    case KS_REDUCE: return true;
    case KS_IF:
      if (has_loop(k, st->body)) return true;
      break;
    case KS_LET:
    case KS_SET:
    case KS_STORE:
    case KS_ASTORE:
    case KS_SYNC: break;
    }
  }
  return false;
}

int kir_flat_rows(const Kernel *k) {
  return k->mode == KM_FLAT && !has_loop(k, k->body) && !k->narrays ? KIR_FLAT_ROWS : 1;
}

KGeom kir_geom(const Kernel *k) {
  int64_t per = (int64_t)k->block * kir_flat_rows(k); /* a flat kernel's rows a block a pass */
  int64_t blocks = k->mode == KM_FLAT ? (k->rows + per - 1) / per : k->rows;
  if (blocks < 1) blocks = 1;
  if (blocks > KIR_MAX_GRID) blocks = KIR_MAX_GRID;
  return (KGeom){blocks, k->block, k->reduces ? (int64_t)k->block * 4 : 0};
}

int kir_block_for(int64_t width) {
  int t = 32;
  while (t < 256 && t < width) t *= 2;
  return t;
}

int kir_buf(Kernel *k, const char *name, DType dtype, bool written) {
  if (k->nbufs == KIR_MAX_BUFS) diag_fatal("internal: kernel %s has too many buffers", k->name);
  KBuf *b = &k->bufs[k->nbufs];
  snprintf(b->name, sizeof b->name, "%s", name);
  b->dtype = dtype;
  b->written = written;
  return k->nbufs++;
}

int kir_e(Kernel *k, KOp op, int a, int b, int c) {
  if (k->ne == k->ecap) {
    k->ecap = k->ecap ? 2 * k->ecap : 64;
    k->e = xrealloc(k->e, (size_t)k->ecap * sizeof *k->e);
  }
  k->e[k->ne] = (KExpr){.op = op, .a = a, .b = b, .c = c};
  return k->ne++;
}

int kir_f(Kernel *k, double f) {
  int e = kir_e(k, K_F, 0, 0, 0);
  k->e[e].f = f;
  return e;
}

int kir_i(Kernel *k, int64_t i) {
  int e = kir_e(k, K_I, 0, 0, 0);
  k->e[e].i = i;
  return e;
}

int kir_row(Kernel *k) { return kir_e(k, K_ROW, 0, 0, 0); }
int kir_ld(Kernel *k, int buf, int idx) { return kir_e(k, k->bufs[buf].dtype == PP_I32 ? K_LDI : K_LD, buf, idx, 0); }

int kir_arg(Kernel *k, int n) {
  if (n >= k->nargs) k->nargs = n + 1;
  return kir_e(k, K_ARG, n, 0, 0);
}

int kir_iarg(Kernel *k, int n) {
  if (n >= k->nargs) k->nargs = n + 1;
  k->arg_int[n] = true;
  return kir_e(k, K_IARG, n, 0, 0);
}

static int is_int_expr(const Kernel *k, int e) { return k->e[e].op >= K_I; }

/* The kind of the innermost open loop or reduction, or -1 at the row body. */
static int enclosing(const Kernel *k, KStmtKind kind) {
  for (int l = k->nopen - 1; l >= 1; l--)
    if (k->s[k->open[l]].kind == kind) return l;
  return -1;
}

static int stmt(Kernel *k, KStmtKind kind) {
  if (k->ns == k->scap) {
    k->scap = k->scap ? 2 * k->scap : 64;
    k->s = xrealloc(k->s, (size_t)k->scap * sizeof *k->s);
  }
  int id = k->ns++;
  k->s[id] = (KStmt){.kind = kind, .body = -1, .next = -1};
  /* append to the innermost open list */
  int lvl = k->nopen - 1;
  if (k->tail[lvl] >= 0) k->s[k->tail[lvl]].next = id;
  else if (lvl == 0) k->body = id;
  else k->s[k->open[lvl]].body = id;
  k->tail[lvl] = id;
  return id;
}

static int new_var(Kernel *k, bool is_int) {
  if (k->nvars == KIR_MAX_VARS) diag_fatal("internal: kernel %s has too many temporaries", k->name);
  k->var_int[k->nvars] = is_int;
  return k->nvars++;
}

/* Which of a, b and c are operand expressions (bits 1, 2, 4); a load's a is its buffer, a
 * variable's or an argument's its number. */
static int operands(KOp op) {
  switch (op) {
  case K_F:
  case K_I:
  case K_ROW:
  case K_ARG:
  case K_IARG:
  case K_V:
  case K_IV: return 0;
  case K_LD:
  case K_LDI:
  case K_ALD: return 2;
  case K_TOF:
  case K_NEG:
  case K_EXP:
  case K_LOG:
  case K_TANH:
  case K_SQRT:
  case K_RSQRT:
  case K_COS:
  case K_SIN:
  case K_RND: return 1;
  case K_ADD:
  case K_SUB:
  case K_MUL:
  case K_DIV:
  case K_MAX:
  case K_POW:
  case K_IADD:
  case K_ISUB:
  case K_IMUL:
  case K_IDIV:
  case K_IMOD:
  case K_IEQ:
  case K_ILT:
  case K_IAND:
  case K_FLT: return 3;
  case K_SEL:
  case K_ISEL:
  case K_RAND: return 7;
  }
  return 7;
}

/* Whether expressions x and y are the same tree (the same text wherever rendered). */
static bool same(const Kernel *k, int x, int y) {
  if (x == y) return true;
  const KExpr *a = &k->e[x], *b = &k->e[y];
  if (a->op != b->op || memcmp(&a->f, &b->f, sizeof a->f) != 0 || a->i != b->i) return false;
  int m = operands(a->op);
  if (!(m & 1) && a->a != b->a) return false; /* a buffer, a variable or an argument */
  return (!(m & 1) || same(k, a->a, b->a)) && (!(m & 2) || same(k, a->b, b->b)) && (!(m & 4) || same(k, a->c, b->c));
}

/* Whether statement s (a set or a store) may change expression x's value: it sets a variable x
 * reads, or stores to a buffer x loads. */
static bool changes(const Kernel *k, const KStmt *s, int x) {
  const KExpr *e = &k->e[x];
  if ((e->op == K_V || e->op == K_IV) && s->kind == KS_SET && s->var == e->a) return true;
  if ((e->op == K_LD || e->op == K_LDI) && s->kind == KS_STORE && s->buf == e->a) return true;
  if (e->op == K_ALD && s->kind == KS_ASTORE && s->buf == e->a) return true;
  int m = operands(e->op);
  return ((m & 1) && changes(k, s, e->a)) || ((m & 2) && changes(k, s, e->b)) || ((m & 4) && changes(k, s, e->c));
}

/* An earlier temporary of the innermost open list holding the same value as `value` would now:
 * the same tree, and no set or store since then that could change it (statements are numbered in
 * the order they are made). Fused ops each build their inputs' values, so one value is often
 * built twice in a kernel (SwiGLU's backward loads the gate and takes its sigmoid for d(up) and
 * for d(gate)); reusing the temporary lets the compiler see one computation. -1 if none. */
static int earlier_let(const Kernel *k, int value) {
  int lvl = k->nopen - 1;
  for (int s = lvl == 0 ? k->body : k->s[k->open[lvl]].body; s >= 0; s = k->s[s].next) {
    const KStmt *t = &k->s[s];
    if (t->kind != KS_LET || t->op == 'v' || !same(k, t->a, value)) continue; /* 'v': kir_var's */
    bool kept = true;
    for (int u = s + 1; u < k->ns && kept; u++)
      if (k->s[u].kind == KS_SET || k->s[u].kind == KS_STORE || k->s[u].kind == KS_ASTORE)
        kept = !changes(k, &k->s[u], value);
    if (kept) return t->var;
  }
  return -1;
}

static int let_new(Kernel *k, int value) {
  bool in = is_int_expr(k, value);
  int v = new_var(k, in);
  int s = stmt(k, KS_LET);
  k->s[s].var = v;
  k->s[s].a = value;
  return kir_e(k, in ? K_IV : K_V, v, 0, 0);
}

int kir_let(Kernel *k, int value) {
  int old = earlier_let(k, value);
  if (old >= 0) return kir_e(k, is_int_expr(k, value) ? K_IV : K_V, old, 0, 0);
  return let_new(k, value);
}

int kir_var(Kernel *k, int value) {
  int e = let_new(k, value);
  k->s[k->ns - 1].op = 'v';
  return e;
}

void kir_set(Kernel *k, int var_expr, char op, int value) {
  int s = stmt(k, KS_SET);
  k->s[s].var = k->e[var_expr].a;
  k->s[s].op = op;
  k->s[s].a = value;
}

/* Whether e is a row offset: the row, a constant, or their product. */
static bool row_offset(const Kernel *k, int e) {
  const KExpr *x = &k->e[e];
  if (x->op == K_ROW || x->op == K_I) return true;
  return x->op == K_IMUL && row_offset(k, x->a) && row_offset(k, x->b);
}

/* A store inside a reduction writes the element of the reduction's own iteration: its index is
 * the loop variable, or a row offset (row_offset) plus the loop variable. The thread that reads an
 * element in a reduction or a shared loop is then the one that wrote it (thread t takes
 * iterations t, t+T, ... in each), so no barrier is needed between them. */
void kir_store(Kernel *k, int buf, int idx, char op, int value) {
  int l = enclosing(k, KS_REDUCE);
  if (l >= 0) {
    int lv = k->s[k->open[l]].lv;
    const KExpr *x = &k->e[idx];
    bool own = (x->op == K_IV && x->a == lv) ||
               (x->op == K_IADD && k->e[x->b].op == K_IV && k->e[x->b].a == lv && row_offset(k, x->a));
    if (!own || l != k->nopen - 1)
      diag_fatal("internal: kernel %s stores inside a reduction elsewhere than at its own element", k->name);
  }
  int s = stmt(k, KS_STORE);
  k->s[s].buf = buf;
  k->s[s].a = idx;
  k->s[s].b = value;
  k->s[s].op = op;
}

int kir_array(Kernel *k, int64_t n) {
  if (k->mode != KM_FLAT) diag_fatal("internal: kernel %s: a private array in a block kernel", k->name);
  if (k->narrays == KIR_MAX_ARRAYS || n < 1)
    diag_fatal("internal: kernel %s: private array %d of %lld", k->name, k->narrays, (long long)n);
  k->arrays[k->narrays] = n;
  return k->narrays++;
}

int kir_ald(Kernel *k, int arr, int idx) {
  if (arr < 0 || arr >= k->narrays) diag_fatal("internal: kernel %s: no private array %d", k->name, arr);
  return kir_e(k, K_ALD, arr, idx, 0);
}

void kir_astore(Kernel *k, int arr, int idx, char op, int value) {
  if (arr < 0 || arr >= k->narrays || (op != '=' && op != '+'))
    diag_fatal("internal: kernel %s: a store to private array %d with '%c'", k->name, arr, op);
  int s = stmt(k, KS_ASTORE);
  k->s[s].buf = arr;
  k->s[s].a = idx;
  k->s[s].b = value;
  k->s[s].op = op;
}

static void open_list(Kernel *k, int s) {
  if (k->nopen == 8) diag_fatal("internal: kernel %s nests too deeply", k->name);
  k->open[k->nopen] = s;
  k->tail[k->nopen] = -1;
  k->nopen++;
}

static int loop(Kernel *k, KStmtKind kind, int extent) {
  int v = new_var(k, true);
  int s = stmt(k, kind);
  k->s[s].var = v;
  k->s[s].a = extent;
  open_list(k, s);
  return kir_e(k, K_IV, v, 0, 0);
}

int kir_for(Kernel *k, int extent) { return loop(k, KS_FOR, extent); }

/* The block's threads share a loop or a reduction only at the block's own level: not inside
 * another shared loop or reduction (their threads have gone separate ways). */
static void check_block_level(Kernel *k, const char *what) {
  if (k->mode != KM_BLOCK) diag_fatal("internal: kernel %s: %s in a flat kernel", k->name, what);
  if (enclosing(k, KS_TFOR) >= 0 || enclosing(k, KS_REDUCE) >= 0)
    diag_fatal("internal: kernel %s: %s inside a shared loop or reduction", k->name, what);
}

int kir_tfor(Kernel *k, int extent) {
  check_block_level(k, "a shared loop");
  return loop(k, KS_TFOR, extent);
}

int kir_reduce(Kernel *k, int extent) {
  check_block_level(k, "a reduction");
  int lv = new_var(k, true);
  int s = stmt(k, KS_REDUCE);
  k->s[s].lv = lv;
  k->s[s].a = extent;
  open_list(k, s);
  k->reduces = true;
  return kir_e(k, K_IV, lv, 0, 0);
}

int kir_reduce_end(Kernel *k, char op, int value) {
  if (k->nopen <= 1 || k->s[k->open[k->nopen - 1]].kind != KS_REDUCE)
    diag_fatal("internal: kir_reduce_end in %s without an open reduction", k->name);
  KStmt *s = &k->s[k->open[k->nopen - 1]];
  s->op = op;
  s->b = value;
  s->var = new_var(k, false);
  int var = s->var;
  k->nopen--;
  return kir_e(k, K_V, var, 0, 0);
}

/* The open reduction, running over row r, fetches row r + 1 of buf (rows ld elements apart) into
 * the cache meanwhile: for a row whose reduction computes (an exponential an element), the next
 * row's reads from memory overlap that work instead of following it. A hint the C renderer writes
 * and the GPU languages do not (a block's threads read a row together, many rows at once). */
void kir_reduce_fetch(Kernel *k, int buf, int64_t ld) {
  if (k->nopen <= 1 || k->s[k->open[k->nopen - 1]].kind != KS_REDUCE)
    diag_fatal("internal: kir_reduce_fetch in %s without an open reduction", k->name);
  if (buf < 0 || buf >= k->nbufs || ld < 1)
    diag_fatal("internal: kir_reduce_fetch in %s: buffer %d, ld %lld", k->name, buf, (long long)ld);
  k->s[k->open[k->nopen - 1]].fetch_buf = buf;
  k->s[k->open[k->nopen - 1]].fetch_ld = ld;
}

void kir_sync(Kernel *k) {
  check_block_level(k, "a barrier");
  stmt(k, KS_SYNC);
}

void kir_if(Kernel *k, int cond) {
  int s = stmt(k, KS_IF);
  k->s[s].a = cond;
  open_list(k, s);
}

void kir_end(Kernel *k) {
  if (k->nopen <= 1) diag_fatal("internal: unbalanced kir_end in %s", k->name);
  if (k->s[k->open[k->nopen - 1]].kind == KS_REDUCE)
    diag_fatal("internal: a reduction in %s closed by kir_end", k->name);
  k->nopen--;
}
