/* ppc.h — every structure of the ppc compiler, grouped by the file that owns it. */
#ifndef PPC_H
#define PPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pp_dtype.h"    /* common/: element types, their names and sizes */
#include "pp_limits.h"   /* common/: the limits ppr accepts */
#include "pp_regions.h"  /* common/: the arena's regions and their names */
#include "pp_boundary.h" /* common/: the pipeline messages ppr sends, their peers and tags */
#include "pp_stagedir.h" /* common/: the files of a stage directory */
#include "pp_tri.h"      /* common/: a gemm's triangle (causal attention) */
#include "pp_epi.h"      /* common/: a gemm's epilogue (its next kernel) */
#include "pp_gemm.h"     /* common/: the elements a gemm operand spans */

#define PPC_VERSION "0.1.0"
/* How ppc compiles the C kernels (PPC_CFLAGS overrides it): -fno-trapping-math and -fno-math-errno
 * let the compiler vectorise selects, conversions and sqrtf (the kernels read neither the
 * floating-point exception flags nor errno, so no result changes); on x86-64,
 * -mprefer-vector-width=512 lets GCC use the 512-bit registers of an AVX-512 CPU, which it does
 * not by default (the kernels' loops are elementwise or sum into fixed partial arrays, so the
 * width changes no bit: minimind256's kernels 33 -> 28 ms a step, the cross-entropy 7.1 -> 4.8;
 * a CPU without AVX-512 ignores it); -fprefetch-loop-arrays has GCC prefetch ahead of a loop's
 * streams, which the hardware prefetcher does not do far enough when each element costs an
 * exponential (minimind's attention_probs, reading 16 MB from memory: 68 -> 27 ms a step; no value
 * changes); -ffp-contract=off has every multiply and add round as the kernel IR writes them (the
 * renderer writes fmaf where it wants a fused one: cg_kir.c): with contraction GCC picks which product of an
 * expression to fuse by the code around it, so an unrelated change to a kernel (or a program split
 * otherwise, a norm's gradient stored with += on one mesh and added by an add kernel on another)
 * moved the bits (bench/journal/perf-history.md, seventeenth part) */
#if defined(__x86_64__)
#define PPC_KERNEL_VECTOR_FLAGS " -mprefer-vector-width=512"
#else
#define PPC_KERNEL_VECTOR_FLAGS ""
#endif
#define PPC_KERNEL_CFLAGS                                                                                              \
  "-O3 -march=native -ffp-contract=off -fno-trapping-math -fno-math-errno -fprefetch-loop-arrays "                     \
  "-fopenmp" PPC_KERNEL_VECTOR_FLAGS

/* ============================================================================================
 * src.c, diag.c, xalloc.c — source files, locations and diagnostics; the allocators
 * ========================================================================================== */

typedef struct Loc {
  int first, last; /* byte offsets [first, last) into the source text; first < 0: no location */
} Loc;

#define NOLOC ((Loc){-1, -1})

typedef struct Src {
  const char *path; /* as given on the command line: printed in every diagnostic */
  char *text;       /* the whole file, NUL-terminated */
  size_t len;       /* bytes in text */
  int nerrors;      /* errors reported against this file so far */
} Src;

Src *src_load(const char *path);                          /* NULL + message on failure */
Src *src_from_string(const char *path, const char *text); /* for tests */
void src_free(Src *s);
void diag_error(Src *s, Loc at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_note(Src *s, Loc at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn)); /* "ppc: error: " */
/* xalloc.c: out of memory ends the compile */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* ============================================================================================
 * ast.c, grammar/parser.y — the syntax tree
 * ========================================================================================== */

typedef enum ExprKind {
  E_INT,   /* ival */
  E_FLOAT, /* fval */
  E_NAME,  /* name: a dim, tensor, param or input; or a flag attribute inside a call */
  E_WORD,  /* name: a digit-led word such as 1f1b (setting values only) */
  E_STR,   /* name: the string's contents */
  E_BIN,   /* op in "+-*_/", lhs, rhs */
  E_NEG,   /* -lhs */
  E_CALL,  /* name(args) */
  E_RANGE, /* lhs..rhs (setting values only: recompute_layers) */
} ExprKind;

typedef struct Arg Arg;
#define AST_MAX_DEPTH 1000 /* nesting of an expression: every pass over it recurses this deep at most */

typedef struct Expr {
  ExprKind kind;
  Loc loc;      /* the whole expression */
  int depth;    /* 1 for a leaf; 1 + its deepest operand's (the parser keeps it <= AST_MAX_DEPTH) */
  int64_t ival; /* E_INT */
  double fval;  /* E_FLOAT */
  char *name;   /* E_NAME, E_WORD, E_STR, E_CALL (callee) */
  Loc name_loc; /* E_CALL: the callee's name */
  char op;      /* E_BIN */
  struct Expr *lhs, *rhs;
  Arg *args; /* E_CALL */
} Expr;

struct Arg {
  char *key;   /* keyword argument name, NULL for a positional one */
  Loc key_loc; /* the keyword */
  Expr *val;
  Arg *next;
  Arg *tail; /* the parser's: on a list's first node, its last (appending is O(1)) */
};

typedef enum StmtKind {
  S_MODEL,      /* model "name" */
  S_DIM,        /* dim name = value */
  S_INPUT,      /* input name: dtype[dims] */
  S_PARAM,      /* param name: [dims] as "ckpt" init value tp role */
  S_LET,        /* name = value */
  S_FOR,        /* for name in lo..hi { body } */
  S_MESH,       /* mesh { settings } */
  S_TRAIN,      /* train { settings } */
  S_CHECKPOINT, /* checkpoint { settings }: how checkpoint files name the params */
} StmtKind;

typedef struct Setting {
  char *key;
  Loc key_loc;
  Expr *val;
  struct Setting *next;
  struct Setting *tail; /* the parser's: on a list's first node, its last */
} Setting;

typedef struct Stmt {
  StmtKind kind;
  Loc loc;    /* the whole statement's first token .. last token */
  char *name; /* declared / bound / loop variable name; S_MODEL: the model name */
  Loc name_loc;
  Expr *value; /* S_DIM, S_LET: the value; S_PARAM: init; S_FOR: lo */
  Expr *hi;    /* S_FOR: the upper bound */
  Arg *dims;   /* S_INPUT, S_PARAM: the shape, positional args */
  char *dtype; /* S_INPUT */
  Loc dtype_loc;
  char *ckpt; /* S_PARAM: the checkpoint-name template */
  Loc ckpt_loc;
  char *role; /* S_PARAM: tp role, NULL when not given */
  Loc role_loc;
  Setting *settings; /* S_MESH, S_TRAIN, S_CHECKPOINT */
  struct Stmt *body; /* S_FOR */
  struct Stmt *next;
  struct Stmt *tail; /* the parser's: on a list's first node, its last */
} Stmt;

typedef struct Ast {
  Stmt *stmts;
} Ast;

Ast *ast_parse(Src *src); /* NULL after reporting syntax errors */
void ast_free(Ast *a);
void ast_free_expr(Expr *e);
void ast_free_args(Arg *a);
void ast_free_stmts(Stmt *s);
void ast_free_settings(Setting *s);
void ast_print(FILE *f, const Ast *a);

/* constructors used by the grammar's actions */
Expr *ast_expr(ExprKind k, Loc loc);
Arg *ast_arg(char *key, Loc key_loc, Expr *val);
Stmt *ast_stmt(StmtKind k, Loc loc);
Setting *ast_setting(char *key, Loc key_loc, Expr *val);

/* ============================================================================================
 * ir.c — the typed graph
 * ========================================================================================== */

/* One enumerator per line of ops.def, the ops kind by kind: the ops of a kind are one range of
 * values. A switch over Op has no default: a new op that misses a pass's rule is a compile error
 * (-Wswitch-enum), docs/adding-an-op.md. OP_CASES_<KIND> is the case label of every op of a kind
 * (a GNU case range), for a switch where they share one rule: `OP_CASES_BWD: diag_fatal(...);`. */
#include "ops.def"
#define OP__ENUM(e, name, mn, mx, attrs, doc) OP_##e,
#define OP__ONE(e, name, mn, mx, attrs, doc)  +1
#define OP__NONE(e, name, mn, mx, attrs, doc)
#define OP__LEAF(M)     OP_TABLE(M, OP__NONE, OP__NONE, OP__NONE, OP__NONE, OP__NONE, OP__NONE)
#define OP__FWD(M)      OP_TABLE(OP__NONE, M, OP__NONE, OP__NONE, OP__NONE, OP__NONE, OP__NONE)
#define OP__FWD_ELEM(M) OP_TABLE(OP__NONE, OP__NONE, M, OP__NONE, OP__NONE, OP__NONE, OP__NONE)
#define OP__BWD(M)      OP_TABLE(OP__NONE, OP__NONE, OP__NONE, M, OP__NONE, OP__NONE, OP__NONE)
#define OP__BWD_ELEM(M) OP_TABLE(OP__NONE, OP__NONE, OP__NONE, OP__NONE, M, OP__NONE, OP__NONE)
#define OP__PP(M)       OP_TABLE(OP__NONE, OP__NONE, OP__NONE, OP__NONE, OP__NONE, M, OP__NONE)
#define OP__TP(M)       OP_TABLE(OP__NONE, OP__NONE, OP__NONE, OP__NONE, OP__NONE, OP__NONE, M)
#define OP__ALL(M)      OP__LEAF(M) OP__FWD(M) OP__FWD_ELEM(M) OP__BWD(M) OP__BWD_ELEM(M) OP__PP(M) OP__TP(M)

typedef enum Op { OP__ALL(OP__ENUM) } Op;

/* Where the range of each kind starts, and how many ops there are (OP__N): ints outside enum Op,
 * so that no switch over Op needs a case for them. */
enum {
  OP__AT_FWD = 0 OP__LEAF(OP__ONE),
  OP__AT_FWD_ELEM = OP__AT_FWD OP__FWD(OP__ONE),
  OP__AT_BWD = OP__AT_FWD_ELEM OP__FWD_ELEM(OP__ONE),
  OP__AT_BWD_ELEM = OP__AT_BWD OP__BWD(OP__ONE),
  OP__AT_PP = OP__AT_BWD_ELEM OP__BWD_ELEM(OP__ONE),
  OP__AT_TP = OP__AT_PP OP__PP(OP__ONE),
  OP__N = OP__AT_TP OP__TP(OP__ONE)
};
#define OP__COUNT         ((int)OP__N)
#define OP_CASES_LEAF     case 0 ... OP__AT_FWD - 1
#define OP_CASES_FWD      case OP__AT_FWD ... OP__AT_FWD_ELEM - 1
#define OP_CASES_FWD_ELEM case OP__AT_FWD_ELEM ... OP__AT_BWD - 1
#define OP_CASES_BWD      case OP__AT_BWD ... OP__AT_BWD_ELEM - 1
#define OP_CASES_BWD_ELEM case OP__AT_BWD_ELEM ... OP__AT_PP - 1
#define OP_CASES_PP       case OP__AT_PP ... OP__AT_TP - 1
#define OP_CASES_TP       case OP__AT_TP ... OP__N - 1

typedef struct OpInfo {
  const char *name; /* surface name; '.' prefix: not callable from the language */
  int min_in, max_in;
  const char *attrs; /* "eps:f?,causal:b?" */
  const char *doc;
} OpInfo;

extern const OpInfo ir_ops[OP__COUNT];
Op ir_op_lookup(const char *name); /* OP__COUNT if unknown or internal */

typedef PpDType DType; /* PP_F32, PP_I32, PP_BF16 (pp_dtype.h) */

#define IR_MAX_DIMS 6
typedef struct Shape {
  int nd;
  int64_t d[IR_MAX_DIMS];
} Shape;

typedef enum Role { ROLE_REPLICATED, ROLE_COLUMN, ROLE_ROW, ROLE_VOCAB } Role;
typedef enum InitKind { INIT_NORMAL, INIT_ZEROS, INIT_ONES } InitKind;

typedef enum Region { REG_PRE, REG_LAYER, REG_POST } Region;
typedef enum Layout { LAYOUT_NONE, LAYOUT_SB, LAYOUT_BS } Layout; /* [S,B,...] or [B,S,...] */

typedef struct IrAttrs {
  double eps, theta, scale; /* scale 0: 1/sqrt(head_dim); the scale op: its constant (by) */
  double offset;            /* rmsnorm: added to the weight, x*rsqrt(mean(x^2)+eps)*(w+offset) (Gemma's 1) */
  double cap;               /* softcap: cap*tanh(x/cap); attention's softcap: of its scores (0: none) */
  int64_t heads, index, parts;
  bool causal;
  int64_t window; /* attention: a query sees the window positions ending at its own (causal); 0: all */
  bool llama3;    /* rope: Llama-3 frequency scaling by factor, low/high_freq_factor, original_max_pos */
  double factor, low_freq_factor, high_freq_factor;
  int64_t original_max_pos;
  int64_t vlocal, vtotal; /* vocab-parallel embedding/cross-entropy: rows per TP rank, real vocabulary */
  double p;               /* dropout: the probability of dropping an element */
  int64_t dropid;         /* dropout: the op's number in the model (its masks' stream), 0, 1, ... */
  bool seqshard;          /* dropout of a sequence-parallel value: its elements are a rank's part of S */
  bool masked;            /* cross_entropy with ignore_index: labels equal to it count for nothing */
  int64_t ignore_index;
} IrAttrs;

/* The share of an S-long sequence's (query, key) pairs that causal attention with a sliding window
 * of W < S positions sees (the cost models'; without a window they take a half) */
static inline double ir_attention_seen(int64_t S, int64_t W) {
  return ((double)W * (double)(W + 1) / 2 + (double)(S - W) * (double)W) / ((double)S * (double)S);
}

typedef struct IrNode {
  Op op;
  int nin;
  int in[6]; /* producer node ids (.concat: -1 for a part with no gradient) */
  Shape shape;
  DType dtype;
  IrAttrs a;
  int layer;       /* global layer index; -1 outside the repeated layer */
  Region region;   /* before, inside or after the repeated layers */
  Layout layout;   /* which axes lead an activation */
  int param;       /* OP_PARAM: index into Graph.params; OP_INPUT: index into Graph.inputs */
  const char *var; /* the .pdl name this value was bound to, or NULL (not owned) */
  Loc loc;
  bool bwd;   /* made by the autodiff pass: runs in the backward block */
  bool wgt;   /* a backward node only weight gradients need: W of a split backward (ad_split.c) */
  int fwd;    /* a backward node: the forward node whose saved statistics it reads, or -1 */
  int gparam; /* accumulates into this parameter's gradient (a sink), or -1 */
} IrNode;

typedef struct IrParam {
  char *name;      /* global checkpoint name, template expanded */
  const char *var; /* .pdl variable (not owned) */
  Shape shape;
  char *dim_text[IR_MAX_DIMS]; /* the source text of each dimension, for messages */
  Role role;
  InitKind init;
  double std;        /* INIT_NORMAL */
  int layer;         /* global layer index; -1 outside the repeated layer */
  int node;          /* its OP_PARAM node */
  bool tied;         /* read by an embedding and by a head: one tensor, two uses */
  int gindex;        /* its index in the whole model's params (a stage's or a shard's param keeps it) */
  bool shared;       /* a copy lives on another pipeline stage too: gradients are summed */
  bool copy;         /* not this tensor's owner (the lowest stage holding it owns it) */
  int shard_dim;     /* tensor parallelism: the split dimension, -1 when replicated */
  int64_t dense_len; /* that dimension's dense size (the local size is shape.d[shard_dim]) */
  int shard_rep;     /* TP ranks holding the same shard (kv heads replicated when tp > kv heads); 1 */
  int shard_parts;   /* the split dim is this many blocks (a fused projection read by chunk(parts = P)), each
                      * split over TP on its own: the rank holds its rows of every block; 1 */
  int grad_reduce;   /* 0, or the group its gradient is summed over: 1 TP group, 2 ranks sharing a shard */
  Loc loc;           /* the declaration */
  Loc role_loc;
} IrParam;

/* AdamW's weight decay applies to the matrices (rank >= 2), not to norms' scales or biases. */
static inline bool ir_param_decays(const IrParam *q) { return q->shape.nd >= 2; }

typedef enum InputUse { USE_NONE, USE_TOKENS, USE_LABELS } InputUse;

typedef struct IrInput {
  const char *var;
  InputUse use;
  int node;
  Loc loc;
} IrInput;

/* The mesh and step shape: the .pdl's mesh/train blocks with command-line flags on top; the
 * checkpoint block's prefix a checkpoint's names may all lack (ppr --init). */
#define PPC_MAX_PREFIX 64
/* train { recompute }: what a layer's backward computes again rather than keeping it from the
 * forward (recompute.c). ORDER Recompute */
typedef enum Recompute { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } Recompute;
static const char *const recompute_names[] = {"none", "selective", "full"};
#define RECOMPUTE_WORDS "none, selective or full"

typedef struct Config {
  int64_t tp, pp, dp;
  int64_t cp; /* context parallelism: each rank of a cp group holds seq/cp consecutive positions */
  int64_t micro_batch, seq, microbatches;
  char schedule[16];
  PpPrecision precision; /* the activations' type (pp_dtype.h) */
  bool sp;               /* sequence parallelism: [S,B,H] outside attention and MLP split over TP along S */
  bool keep_probs;   /* attention_probs = keep: the softmax's probabilities saved for the backward, not recomputed */
  bool att_gemm;     /* attention = gemm: GEMMs around softmax kernels (S x S scores); else fused (fuse_attn.c) */
  int64_t vocab_pad; /* vocab_pad = N: a vocabulary table's rows padded to a multiple of N (vocab_pad.c) */
  int zero;          /* 1: the optimizer's state sharded over the data-parallel group (dp x cp ranks): ZeRO-1 */
  Loc zero_loc;
  int recompute; /* Recompute: what the layers in [rc_lo, rc_hi) run again in their backward (recompute.c) */
  int rc_lo, rc_hi;
  Loc rc_loc;                 /* recompute_layers; NOLOC for the flag or the default (every layer) */
  Loc tp_loc, pp_loc, dp_loc; /* where the value came from; NOLOC for a flag or default */
  Loc cp_loc;
  Loc sp_loc;
  Loc sched_loc;
  Loc probs_loc;                        /* attention_probs in the train block; NOLOC for the flag or the default */
  char ckpt_prefix[PPC_MAX_PREFIX + 1]; /* checkpoint { optional_prefix }: "" for none */
  Loc prefix_loc;
} Config;

/* The positions one rank's values hold: seq/cp (context parallelism splits the sequence into cp
 * runs of consecutive positions; cp rank r holds [r·seq/cp, (r+1)·seq/cp)); seq without it. */
static inline int64_t ir_seq_local(const Config *c) { return c->cp > 1 ? c->seq / c->cp : c->seq; }

typedef struct Graph {
  Src *src;
  char *model; /* model name */
  IrNode *nodes;
  int nnodes, cap;
  IrParam *params;
  int nparams, pcap;
  IrInput inputs[4];
  int ninputs;
  int loss;       /* the loss node, -1 if none */
  int nlayers;    /* the repeated layer's trip count; 0 when there is no for block */
  Loc layers_loc; /* the for block's range */
  Config cfg;
  int stage, npp;       /* this graph is pipeline stage `stage` of npp (pipe_split.c); 0 of 1: the whole model */
  int64_t vocab;        /* rows of the token-embedding table: token ids and labels are below it */
  int ndropout;         /* dropout ops of the model: their dropid are 0 .. ndropout-1 */
  bool loss_masked;     /* the loss's cross_entropy has an ignore_index (the listing's vocab line) */
  int64_t ignore_index; /* the label that counts for nothing, when loss_masked */
  int *bounds;          /* pp+1 layer boundaries of the stages (pipe_partition); NULL: N*r//p */
  int nfwd;             /* nodes [0, nfwd) are the forward graph; the rest, the backward */
  int seed;             /* the backward-seed node, -1 before autodiff */
  int *grad;            /* per forward node: its (summed) gradient node, -1 if none */
  bool infer;           /* a generation program's: forward only, .logits in the loss's place (pipe_split.c) */
} Graph;

int ir_add_node(Graph *g, Op op, Loc loc);
int ir_add(Graph *g, Op op, int nin, const int *in, Shape shape); /* a node made by a pass */
/* Append a copy of parameter q (strings duplicated) with a PARAM node like `like`; its index. */
int ir_copy_param(Graph *dst, const IrParam *q, const IrNode *like);
/* A new graph with g's header and no node or parameter: its source, model name, configuration,
 * layers, vocabulary, loss settings, stage boundaries, stage; no loss or seed node yet (-1). The
 * graphs made from another (a stage, its TP shard, a rank's chunks) start here. */
Graph *ir_clone_header(const Graph *g);
int64_t ir_shape_numel(const Shape *s);
int ir_shape_eq(const Shape *a, const Shape *b);
char *ir_shape_str(const Shape *s, char *buf, size_t n); /* "[16,2,64]" */
void ir_print(FILE *f, const Graph *g);
void ir_free(Graph *g);
int ir_verify(const Graph *g); /* 0 when every node's inputs precede it and shapes are set */
const char *ir_role_name(Role r);

/* ============================================================================================
 * ir_build.c, ir_config.c, ir_infer.c — AST to typed IR: names, dims, shapes, the repeated layer,
 * tensor-parallel roles
 * ========================================================================================== */

typedef struct Options {
  int64_t tp, pp, dp, micro_batch, seq, microbatches; /* -1: not given on the command line */
  int64_t cp;                                         /* --cp N; -1: not given */
  const char *schedule;                               /* NULL: not given */
  int precision;                                      /* PpPrecision; -1: not given */
  int sp;                                             /* --sp: 1; -1: not given */
  int keep_probs;                                     /* --attention-probs keep: 1, recompute: 0; -1: not given */
  int att_gemm;                                       /* --attention gemm: 1, fused: 0; -1: not given */
  int64_t vocab_pad;                                  /* --vocab-pad N; -1: not given */
  int zero;                                           /* --zero N: 0 or 1; -1: not given */
  int recompute;                                      /* --recompute: a Recompute; -1: not given */
  int rc_lo, rc_hi;                                   /* --recompute-layers A..B; -1: not given */
} Options;

Graph *ir_build(Src *src, const Ast *ast, const Options *opt); /* NULL after reporting errors */

/* The builder's state is ir_build.c's; ir_config.c and ir_infer.c build through these. */
typedef struct Builder Builder;
Graph *ir_build_graph(Builder *b);
void ir_build_err(Builder *b, Loc at, const char *fmt, ...) __attribute__((format(printf, 3, 4))); /* once a place */
int ir_build_node(Builder *b, Op op, Loc loc);                  /* in the layer and region being built */
int ir_build_tensor(Builder *b, const Expr *e);                 /* its node; -1 after reporting */
int ir_build_eval_int(Builder *b, const Expr *e, int64_t *out); /* 0, or 1 after reporting */
int ir_build_eval_float(Builder *b, const Expr *e, double *out);
/* ir_config.c: the mesh and the step (the .pdl's blocks, flags on top); their checks against the model */
void ir_config_resolve(Builder *b, const Ast *ast, const Options *o, Config *c);
/* attention_probs' value: keep 1, recompute 0, anything else -1 (the train setting and ppc's flag) */
int ir_config_keep_probs(const char *name);
/* attention's value: gemm 1, fused 0, anything else -1 (the train setting and ppc's flag) */
int ir_config_att_gemm(const char *name);
/* recompute's value: a Recompute, or -1 (the train setting and ppc's flag) */
int ir_config_recompute(const char *name);
void ir_config_check(Builder *b, Loc end);
/* The .pdl's `# hf-config: JSON` comment (ppc --from-hf's), re-serialised for the listing's
 * `hf_config` line: compact, ASCII, spaces and '#' as \u escapes (*out malloc'd; NULL without the
 * comment). -1 when the comment is not a JSON object (*at: where it is). */
int ir_config_hf_json(const Src *src, char **out, Loc *at); /* end: where a message without a place of its own points */
/* ir_infer.c: an op call checked against the op table; its result's shape, dtype and layout */
int ir_infer_call(Builder *b, const Expr *e);   /* name(args): its node; -1 after reporting */
int ir_infer_binary(Builder *b, const Expr *e); /* a + b, a * b */

/* ============================================================================================
 * tp_shard.c — tensor parallelism: a stage's graph as one TP rank runs it (local shapes) with
 * the collectives the math needs
 * ========================================================================================== */

Graph *tp_shard(const Graph *g); /* NULL after reporting a located error */

/* vocab_pad.c — the vocabulary's rows padded to a multiple of cfg.vocab_pad */
#define PPC_VOCAB_PAD 64                                        /* train { vocab_pad }'s default */
int64_t vocab_pad_rows(int64_t dense, int64_t tp, int64_t pad); /* a rank's rows of a vocab table */
bool vocab_rows_fit(int64_t dense, int64_t tp, int64_t rows);   /* the last rank starts inside it */
/* tp 1: stage graph g's vocab tables' rows and what reads them, the CE's real vocabulary; model, the
 * whole model's graph, decides which tables are padded */
void vocab_pad(Graph *g, const Graph *model);

/* ir_transpose.c: transpose_sb(linear(x, W)) as linear(transpose_sb(x), W): the head as one product */
void ir_transpose_sink(Graph *g);

/* ============================================================================================
 * ad_backward.c — compile-time autodiff: the backward graph from the forward graph and the loss
 * ========================================================================================== */

int ad_backward(Graph *g); /* appends the backward nodes; 0 on success */
/* ad_split.c — the backward as B and W: marks wgt on every backward node that the gradient sent to
 * the previous stage does not need (weight gradients and what only they read). */
void ad_split(Graph *g);

/* ============================================================================================
 * kir.c, cg_kir.c — the kernel IR: a kernel is a grid of blocks of threads. A flat kernel gives each
 * thread one row (an element); a block kernel gives each block one row, whose threads share the
 * row's loops (KS_TFOR) and reductions (KS_REDUCE). The statements are a small tree (loops,
 * scalar temporaries, reductions, loads and stores) over expressions, built by kir.c; one renderer
 * (cg_kir.c) prints it as C, OpenCL C or CUDA C, differing by a language table.
 * ========================================================================================== */

typedef enum KOp {
  /* float-valued */
  K_F,
  K_LD,
  K_ARG,
  K_V,
  K_TOF,
  K_ADD,
  K_SUB,
  K_MUL,
  K_DIV,
  K_MAX,
  K_NEG,
  K_EXP,
  K_LOG,
  K_TANH,
  K_SQRT,
  K_RSQRT,
  K_COS,
  K_SIN,
  K_POW,
  K_SEL,  /* a ? b : c, a an int condition */
  K_RND,  /* a rounded to bf16 and widened back: a bf16 value computed inside another kernel */
  K_RAND, /* a uniform float in [0, 1), a multiple of 2^-24: Philox4x32-10 of counter a, key b, stream c (ints) */
  K_ALD,  /* element b of the thread's private array a (kir_array) */
  /* int-valued (int64) */
  K_I,
  K_ROW,
  K_LDI,
  K_IV,
  K_IARG,
  K_IADD,
  K_ISUB,
  K_IMUL,
  K_IDIV,
  K_IMOD,
  K_IEQ,
  K_ILT,
  K_IAND,
  K_ISEL,
  K_FLT, /* a < b of two floats: an int condition */
} KOp;

typedef struct KExpr {
  KOp op;
  int a, b, c; /* operand expressions; K_LD/K_LDI: a = buffer, b = index; K_V/K_IV: a = variable */
  double f;    /* K_F */
  int64_t i;   /* K_I */
} KExpr;

/* KS_FOR: a loop every thread runs whole. KS_TFOR (block kernels): a loop whose iterations the
 * block's threads share (thread t takes t, t+T, ...). KS_REDUCE (block kernels): the sum or
 * maximum over j in [0, extent) of a value, computed as the GPU does it: thread t folds
 * j = t, t+T, ... in order, then a tree over the T partials (t += t + s for s = T/2 .. 1); every
 * thread gets the result. The order is fixed by T alone, so the result is deterministic. */
/* KS_SYNC: a barrier over the block's threads, after which each sees the others' stores to global
 * memory before it (nothing in C, whose block is one thread's loop). KS_ASTORE: a store to an
 * element of the thread's private array (kir_array), as KS_STORE to a buffer. */
typedef enum KStmtKind { KS_FOR, KS_TFOR, KS_REDUCE, KS_LET, KS_SET, KS_STORE, KS_IF, KS_SYNC, KS_ASTORE } KStmtKind;

typedef struct KStmt {
  KStmtKind kind;
  int var;  /* KS_FOR/KS_TFOR: the loop variable; KS_LET/KS_SET: the temporary; KS_REDUCE: the result */
  int lv;   /* KS_REDUCE: the loop variable */
  int a, b; /* loops: extent a; KS_LET/KS_SET: value a; KS_STORE, KS_ASTORE: index a, value b; KS_IF: cond a;
             * KS_REDUCE: extent a, the folded value b (read after the body) */
  int buf;  /* KS_STORE: the buffer; KS_ASTORE: the private array */
  char op;  /* KS_SET, KS_STORE: '=' assign, '+' accumulate, 'M' maximum; KS_REDUCE: '+' or 'M' */
  int body; /* loops, KS_IF, KS_REDUCE: first statement inside, -1 if none */
  int next; /* the next statement in the same list, -1 at the end */
  /* KS_REDUCE: while it runs over row r, row r + 1 of buffer fetch_buf (row i from element
   * i * fetch_ld on) is fetched into the cache: a hint, no value depends on it; fetch_ld 0: none */
  int fetch_buf;
  int64_t fetch_ld;
} KStmt;

typedef struct KBuf {
  char name[16];
  DType dtype; /* PP_I32: token ids, labels; PP_BF16: loaded as float, stored rounded to nearest even */
  bool written;
  bool reread; /* written, and read by the kernel only where it wrote it first (a value it stores and reads
                * back): what the buffer held before the kernel does not matter (recompute.c) */
} KBuf;

typedef enum KMode {
  KM_FLAT,  /* one row per thread: rows are elements (or columns) */
  KM_BLOCK, /* one row per block: its threads share the row's KS_TFOR loops and KS_REDUCEs */
} KMode;

#define KIR_MAX_BUFS   12
#define KIR_MAX_ARRAYS 12    /* private arrays of a kernel (kir_array) */
#define KIR_MAX_VARS   128   /* temporaries and loop variables of a kernel */
#define KIR_MAX_BLOCK  1024  /* threads per block: a power of two up to this */
#define KIR_MAX_GRID   65536 /* blocks launched at most; grid-stride loops cover any more rows */
/* a loop-free flat kernel's thread takes this many rows a pass, a block apart (each warp's accesses
 * stay contiguous): kir_flat_rows */
#define KIR_FLAT_ROWS 4
typedef struct Kernel {
  char name[48];
  KMode mode;
  int64_t rows; /* the rows the grid covers */
  int block;    /* threads per block T, a power of two */
  int64_t work; /* rough operations per row, for the C renderer's parallel threshold */
  KBuf bufs[KIR_MAX_BUFS];
  int nbufs;
  int nargs;        /* scalar arguments after the buffers */
  bool arg_int[16]; /* argument n is an int64 (else a float) */
  KExpr *e;
  int ne, ecap;
  KStmt *s;
  int ns, scap;
  int body;  /* first statement of the row body */
  int nvars; /* temporaries and loop variables */
  bool var_int[KIR_MAX_VARS];
  int open[8], nopen; /* statement lists being appended to (builder state) */
  int tail[8];
  bool reduces;                   /* has a KS_REDUCE: needs T floats of local (shared) memory */
  int64_t arrays[KIR_MAX_ARRAYS]; /* the floats of each private array: per thread, per row */
  int narrays;
} Kernel;

/* The launch geometry of a kernel: blocks, threads per block, local (shared) memory bytes. */
typedef struct KGeom {
  int64_t grid;
  int block;
  int64_t local;
} KGeom;

Kernel *kir_new(const char *name, KMode mode, int64_t rows, int block);
void kir_free(Kernel *k);
KGeom kir_geom(const Kernel *k);
/* A flat kernel's rows a thread takes a pass: KIR_FLAT_ROWS where its row is a few loads and
 * stores (no loop), so that they are in flight together; 1 where a row loops (fewer threads would
 * each run a longer loop). */
int kir_flat_rows(const Kernel *k);
int kir_block_for(int64_t width); /* threads for a row of width: 32..256, a power of two */
int kir_buf(Kernel *k, const char *name, DType dtype, bool written);
int kir_e(Kernel *k, KOp op, int a, int b, int c); /* an expression node */
int kir_f(Kernel *k, double f);
int kir_i(Kernel *k, int64_t i);
int kir_row(Kernel *k);
int kir_ld(Kernel *k, int buf, int idx);
int kir_arg(Kernel *k, int n);     /* float scalar argument n */
int kir_iarg(Kernel *k, int n);    /* int64 scalar argument n */
int kir_let(Kernel *k, int value); /* a new temporary = value (or an earlier one holding it); its read expr */
int kir_var(Kernel *k, int value); /* a new temporary = value, never shared: one that kir_set changes */
void kir_set(Kernel *k, int var_expr, char op, int value);
void kir_store(Kernel *k, int buf, int idx, char op, int value);
/* A private array of n floats, a flat kernel's: each thread's own, declared anew for each row it
 * computes (a tile of a fused attention's operands and accumulators). Its elements are read with
 * kir_ald and written with kir_astore ('=' or '+'); their contents do not outlive the row. */
int kir_array(Kernel *k, int64_t n);
int kir_ald(Kernel *k, int arr, int idx);
void kir_astore(Kernel *k, int arr, int idx, char op, int value);
int kir_for(Kernel *k, int extent);                    /* opens a loop; returns the loop variable's expr */
int kir_tfor(Kernel *k, int extent);                   /* opens a loop shared by the block's threads */
int kir_reduce(Kernel *k, int extent);                 /* opens a reduction's body; returns its loop variable */
int kir_reduce_end(Kernel *k, char op, int value);     /* closes it; returns the result (a temporary) */
void kir_reduce_fetch(Kernel *k, int buf, int64_t ld); /* the open reduction fetches buf's next row */
void kir_if(Kernel *k, int cond);                      /* opens a conditional */
void kir_sync(Kernel *k); /* a barrier: the block's stores so far before what follows (KS_SYNC) */
void kir_end(Kernel *k);  /* closes the innermost loop or conditional */

/* ORDER Lang: the language tables of cg_kir.c */
typedef enum Lang { LANG_C, LANG_OPENCL, LANG_CUDA } Lang;
/* Render one kernel; the text is appended to *out (a growing NUL-terminated buffer). */
void cg_render_kernel(const Kernel *k, Lang lang, char **out, size_t *len, size_t *cap);
void cg_render_prelude(Lang lang, char **out, size_t *len, size_t *cap);
const char *cg_lang_name(Lang lang); /* "c", "opencl", "cuda": the --emit word */
void cg_append(char **out, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ============================================================================================
 * fuse_*.c — the graph to a program: fused kernels, GEMMs and runtime instructions over virtual
 * buffers; mem_plan.c places the buffers; cg_program.c writes the listing
 * ========================================================================================== */

/* ORDER BufClass: the arena's regions, in the order they lie in it: common/pp_regions.h, which names them */
typedef enum BufClass {
  BC_PARAM,
  BC_GRAD,
  BC_ADAM_M,
  BC_ADAM_V,
  BC_COPY, /* --precision bf16: the parameters' working copies, refreshed from the f32 values */
  BC_SLOT,
  BC_SCRATCH,
  BC_WORKSPACE,
  BC__COUNT
} BufClass;
#define MEM_ALIGN       64                  /* every buffer's offset in the arena is a multiple of it (mem_plan.c) */
#define WORKSPACE_BYTES ((int64_t)32 << 20) /* a GEMM library's workspace: cuBLASLt's 32 MiB for Hopper */

typedef struct VBuf {
  char name[40];
  int64_t bytes;
  BufClass cls;
  DType dtype;
  Shape shape;
  int param;       /* BC_PARAM/BC_GRAD/...: the parameter (the rank's, Program.g) */
  int chunk;       /* BC_SLOT: the chunk of layers whose slot layout holds it (0 without chunks) */
  int64_t off;     /* placed offset within its region (mem_plan.c) */
  int first, last; /* BC_SCRATCH: first and last instruction (global numbering) that touch it */
  bool pin_start;  /* live from the start of the block it is first used in (a received value) */
  bool pin_end;    /* live to the end of the block it is last used in (a value sent after it) */
  int view;        /* -1, or a parameter-class buffer: this one is a view that starts where that one is
                    * placed and runs over the buffers after it in its region (mem_plan.c) */
  bool tail;       /* BC_GRAD: a tied parameter's embedding gradient, placed after every part (mem_plan.c) */
} VBuf;

typedef enum InstrKind {
  I_KERNEL,
  I_GEMM,
  I_BATCH,
  I_ZERO,
  I_SEED,
  I_LOSS,
  I_LOGITS,
  I_GRADNORM,
  I_ALLREDUCE_TIED,
  I_ALLREDUCE,
  I_ALLGATHER,     /* sequence parallelism: op[0] this rank's part (bytes), op[1] the whole, in rank order */
  I_REDUCE_SCATTER /* op[0] the whole (tp x bytes) summed over the group, op[1] this rank's part (bytes) */
} InstrKind;

typedef struct Operand {
  char kind; /* 'b' buffer (+ byte offset), 'f' float, 'i' int, 's' runtime scalar, '-' none; 'v' int
              * times the listing's tp_rank, 'c' int times its cp_rank */
  int vb;
  int64_t add;  /* bytes past the buffer's start */
  int64_t zadd; /* 'b': bytes past that per ZeRO rank (its index in the dp x cp group): its shard */
  double f;
  int64_t i;
  const char *s;
} Operand;

#define MAX_OPERANDS 20
typedef struct Instr {
  InstrKind kind;
  int kernel;               /* I_KERNEL: index into Program.kernels */
  Operand op[MAX_OPERANDS]; /* I_KERNEL: buffers then scalars; I_GEMM: A, B, C; others: their operands */
  int nop;
  char ta, tb; /* I_GEMM */
  PpTri tri;   /* I_GEMM: the products a device may skip (causal attention), PP_TRI_NONE */
  PpEpi epi;   /* I_GEMM: the next instruction, a kernel, may run inside it (pp_epi.h), PP_EPI_NONE */
  int64_t m, n, k, lda, sa, ldb, sb, ldc, sc, batch;
  double alpha, beta;
  int64_t bytes;     /* I_ZERO */
  double value;      /* I_SEED */
  char group[16];    /* I_ALLREDUCE: tp, tp/R (runs of R TP ranks sharing a shard), dp; I_ALLGATHER,
                      * I_REDUCE_SCATTER: tp (sequence parallelism) or cp (context parallelism) */
  const char *redop; /* I_ALLREDUCE: sum or max */
  const char *why;   /* a comment for the listing (a string constant), or NULL */
  int node;          /* the IR node it implements, for the listing's comments; -1 */
} Instr;

typedef struct Block {
  const char *name;
  Instr *ins;
  int n, cap;
} Block;

/* One chunk of layers of a rank's program: a stage, or with chunks (interleaved, zbv) one of the
 * rank's virtual stages. Its instructions' node numbers are its graph's. */
typedef struct ProgChunk {
  const Graph *g;
  Block fwd, bwd, wgt; /* wgt: the weight gradients of a split backward (W), else empty */
  int bnd[PP_NBND];    /* the boundary buffers, by PpBoundary; -1 for none */
} ProgChunk;

typedef struct Program {
  const Graph *g;     /* the rank's: its stage, its parameters (each once, whichever chunks read it) */
  const Graph *model; /* the whole model: its dense parameters are listed in every program */
  VBuf *vb;
  int nvb, vcap;
  Kernel **kernels;
  int nk, kcap;
  ProgChunk ch[PP_MAX_CHUNKS];
  int nch;
  Block opt;             /* once per step, over every parameter */
  bool opt_clears_grads; /* opt leaves the whole grads region zero (PP_OPT_CLEARS_GRADS) */
  Block refresh;         /* the working copies from the values (bf16): run by ppr whenever the values were set */
  int *copy_vb;          /* per rank parameter: its working copy's buffer (BC_COPY), or -1 (fp32) */
  int *emb_vb;           /* per rank parameter: a tied one's embedding-gradient buffer (fuse_lower.c), or -1 */
  int64_t region_off[BC__COUNT], region_bytes[BC__COUNT]; /* per BufClass; BC_SLOT: bytes of one slot */
  int nslots;
  /* ZeRO-1 (mem_zero_ranks > 1): per part of the parameters' regions, its view in the params and
   * adam_m regions (-1: an empty part) and the elements of its shard (the listing's zero_part) */
  int zview[2][2];
  int64_t zshard[2];
  int64_t arena;
  int *node_vb;    /* per IR node of the chunk being lowered: its buffer, -1 for none */
  int *node_aux;   /* per IR node: its saved-statistics buffer, -1 */
  int *node_probs; /* per attention node: its probabilities saved for the backward (attention_probs = keep), -1 */
} Program;

/* The rank's program from its chunks' graphs (one: its stage's; rank is then that graph too) and
 * the rank's graph of parameters (pipe_chunks.c), whose indices the buffers and the optimizer use. */
Program *fuse_lower(const Graph *rank, Graph *const *chunk, int nch);
void mem_plan(Program *p);
/* recompute.c: train { recompute }: each layer of [c->rc_lo, c->rc_hi) of the program's chunks runs
 * (part of) its forward again at the start of its backward; what it no longer keeps leaves the slot */
void recompute(Program *p, const Config *c);
int64_t mem_region_total(const Program *p, int region);
/* ZeRO-1 (cfg.zero): the ranks sharing a part's optimizer state (dp x cp; 1 without zero), and the
 * elements of a part of n elements each of them owns (a multiple of the buffers' alignment unit;
 * the part's buffers are padded to zero_ranks times it) */
int mem_zero_ranks(const Program *p);
int64_t mem_zero_shard(const Program *p, int64_t n); /* its bytes in the arena: slots times nslots */
/* The elements a parameter's buffer takes in each of its regions (params, grads, adam_m, adam_v,
 * copies): numel rounded up to a unit that puts a working copy at its value's element offset. */
int64_t mem_param_elems(const Program *p, int64_t numel);
/* The part of the parameters' regions parameter i's buffers lie in: 0 for the decayed parameters,
 * placed first, 1 for the rest; fuse_adamw.c runs one AdamW kernel a part. */
int mem_param_part(const Program *p, int i);
void fuse_prog_free(Program *p);

/* The lowering's state, shared by its files: fuse_lower.c (what is fused, every value's buffer,
 * each node's lowering in order), fuse_prog.c, fuse_kc.c, fuse_elem.c, fuse_gemm.c, fuse_rows.c
 * and fuse_adamw.c. */
#define FUSE_MAX_ROPE 8 /* kinds of RoPE (theta, scaling, sizes) in one chunk */

typedef struct FuseCtx {
  Program *p;
  const Graph *g;      /* the graph being lowered: a chunk's; the rank's for the optimizer */
  int chunk;           /* the chunk being lowered */
  int *pmap;           /* per parameter of g: the rank's parameter */
  Block *blk;          /* the block being appended to */
  int *nusers;         /* per node: how many nodes read it */
  int *user;           /* per node: its (last) user */
  bool *saved;         /* per forward node: read by the backward */
  bool *inlined;       /* per node: computed inside its consumer's kernel, no buffer */
  bool *merged;        /* per node: written by an earlier one's kernel (fuse_elem_lower, fuse_rows_col_sum) */
  bool *normed;        /* per add: computed and stored by the norm that reads it first (fuse_rows_norm) */
  int *norm_rope;      /* per norm: the rope its kernel turns its output by before storing it, or -1 */
  int *acc;            /* per dx GEMM and add: the earlier value whose buffer the GEMM adds into, or -1 */
  int *into;           /* per attention gradient: the concat whose part its kernel writes (fuse_attn.c), or -1 */
  bool *biased;        /* per linear: its bias added by its readers' kernels (fuse_elem_val), no pass of its own */
  Layout *phys;        /* per node: the physical order of its buffer's two leading axes */
  bool *att_done;      /* per attention node: its backward is lowered */
  unsigned char *wide; /* per node: kept in f32 in a bf16 program: WIDE_SUM | WIDE_PARTIAL (fuse_lower.c) */
  int *grad_vb;        /* per parameter: its gradient buffer */
  char **bodies;       /* rendered kernel bodies, for deduplication */
  int rope_tab[FUSE_MAX_ROPE]; /* the chunk's RoPE tables (fuse_rows_rope): the first rope node of each kind */
  int rope_vb[FUSE_MAX_ROPE];  /* and each table's buffer */
  int nrope;
} FuseCtx;

/* fuse_prog.c: the program's virtual buffers and instructions */
int fuse_prog_vbuf(FuseCtx *c, const char *name, BufClass cls, Shape shape, DType dtype);
DType fuse_act_dtype(const FuseCtx *c);          /* activations' and their gradients' type: the precision's */
DType fuse_value_dtype(const FuseCtx *c, int i); /* node i's value's type, stored or computed inside a kernel */
Instr *fuse_prog_instr(FuseCtx *c, InstrKind kind, int node); /* appended to c->blk */
Operand fuse_prog_ob(int vb, int64_t add);                    /* a buffer from byte add on */
Operand fuse_prog_vstart(int64_t rows); /* the first vocabulary row a TP rank holds: rank * rows */
Operand fuse_prog_cpstart(int64_t n);   /* a context-parallel rank's first position (or element): rank * n */
void fuse_prog_allreduce(FuseCtx *c, int node, int vb, int64_t bytes, const char *group, const char *op,
                         const char *why);
/* an all-gather (reduce-scatter) over "tp" or "cp": src the rank's part (the whole's f32 partial
 * sums), dst the whole (the part: node round's buffer, rounded into from f32 when it is bf16) */
void fuse_prog_seq_coll(FuseCtx *c, int node, bool gather, const char *group, int src, int dst, int round,
                        const char *why);
int fuse_prog_buf(FuseCtx *c, int id);         /* the buffer of node id's value (or its parameter's) */
int fuse_prog_grad(FuseCtx *c, int param);     /* a parameter's gradient buffer */
int fuse_prog_emb_grad(FuseCtx *c, int param); /* an embedding's gradient: a tied one's own buffer, or the grad */

/* fuse_kc.c: a kernel call, a kernel under construction and the operands of its call */
typedef struct KCall {
  Kernel *k;
  Operand ops[MAX_OPERANDS]; /* the buffers (by parameter), then from KIR_MAX_BUFS on the scalars */
  int nscal;
  int node;
} KCall;
KCall fuse_kc_flat(const char *name, int64_t n, int node);                     /* a row per thread */
KCall fuse_kc_block(const char *name, int64_t rows, int64_t width, int node);  /* a row per block */
int fuse_kc_vbuf_at(FuseCtx *c, KCall *kc, int vb, int64_t add, bool written); /* its buffer parameter */
int fuse_kc_vbuf(FuseCtx *c, KCall *kc, int vb, bool written);
int fuse_kc_node(FuseCtx *c, KCall *kc, int node, bool written); /* node's buffer as a parameter */
int fuse_kc_scalar(KCall *kc, Operand o);                        /* a float argument */
int fuse_kc_iscalar(KCall *kc, Operand o);                       /* an int64 argument */
int fuse_kc_rscalar(KCall *kc, const char *name);                /* an int64 runtime scalar, once a kernel */
int fuse_kc_gpos(FuseCtx *c, KCall *kc, int s);                  /* local position s's global one: + cp_rank·seq/cp */
int fuse_kc_register(FuseCtx *c, Kernel *k);                     /* the program's kernel of that body: its index */
void fuse_kc_emit(FuseCtx *c, KCall *kc);                        /* registers the kernel and calls it */

/* fuse_elem.c: elementwise ops (ops.def's FWD_ELEM and BWD_ELEM) */
bool fuse_elem_is(Op op);
int fuse_elem_expr(FuseCtx *c, KCall *kc, int node, int idx); /* its value at flat index idx */
int fuse_elem_val(FuseCtx *c, KCall *kc, int node, int idx);  /* fused: its expression; else loaded */
void fuse_elem_lower(FuseCtx *c, int id);                     /* a kernel of its own */

/* fuse_gemm.c, fuse_rows.c, fuse_adamw.c: the lowering of node id, of the optimizer */
void fuse_gemm_linear(FuseCtx *c, int id); /* linear, matmul */
/* node id's product plus a bias slice (buffer bias from byte add), as the epilogue (epi:bias) of
 * the GEMM just emitted where it may be one */
void fuse_gemm_bias(FuseCtx *c, int id, int bias, int64_t add, int64_t R, int64_t N);
void fuse_gemm_linear_dx(FuseCtx *c, int id);
void fuse_gemm_linear_dw(FuseCtx *c, int id);
void fuse_gemm_attention(FuseCtx *c, int id); /* attention and its three gradients, as GEMMs (attention = gemm) */
void fuse_attn_lower(FuseCtx *c, int id);     /* attention and its three gradients, fused (fuse_attn.c) */
/* the gradient nodes dQ, dK, dV of attention node fwd, made together from node id on (fuse_attn.c) */
void fuse_attn_grads(FuseCtx *c, int id, int fwd, int *gq, int *gk, int *gv);
void fuse_rows_embedding(FuseCtx *c, int id);
void fuse_rows_embedding_dw(FuseCtx *c, int id);
void fuse_rows_pos_embedding(FuseCtx *c, int id, bool grad);
void fuse_rows_round(FuseCtx *c, int id, int vb); /* a collective's f32 sum (vb) rounded into node id's buffer */
void fuse_rows_norm(FuseCtx *c, int id);          /* rmsnorm, layernorm */
void fuse_rows_norm_dx(FuseCtx *c, int id);
void fuse_rows_col_sum(FuseCtx *c, int id); /* bias_db, rmsnorm_dw, layernorm_dw (with a partner: one pass) */
void fuse_rows_rope(FuseCtx *c, int id);    /* rope, rope_dx */
void fuse_rows_chunk(FuseCtx *c, int id);
void fuse_rows_concat(FuseCtx *c, int id);
void fuse_rows_transpose(FuseCtx *c, int id);
void fuse_rows_ce(FuseCtx *c, int id);
void fuse_rows_logits(FuseCtx *c, int id, int node); /* `logits`: where node's logits are */
void fuse_rows_ce_dx(FuseCtx *c, int id);
int fuse_rows_ce_fused(const FuseCtx *c, int ce); /* its CE_DX when one kernel does both, or -1 */
double fuse_rows_seed(const FuseCtx *c);          /* the gradient seed: 1 / micro-batches */
void fuse_rows_param_grad(FuseCtx *c, int id);
void fuse_rows_add_bias(FuseCtx *c, int id);
/* A part of the parameters' regions (mem_param_part): views of it in the params, grads, adam_m,
 * adam_v and copies regions (vb[4] = -1 without working copies), n elements each, the padding
 * between its parameters included (AdamW keeps padding zero: its gradient, moments and value are
 * zero); decays: whether its parameters take weight decay (all alike); n = 0: an empty part. */
typedef struct AdamPart {
  int64_t n;
  int vb[5];
  bool decays;
  int64_t shard; /* ZeRO-1: the elements of the part each rank of the dp x cp group owns (n = Z x shard, the
                  * moments' views shard long); n without zero */
  int svb[5];    /* ZeRO-1: views of shard elements at the part's start, of the params, grads and copies
                  * (an operand's zadd moves them to the rank's shard); -1 otherwise */
} AdamPart;
void fuse_adamw_parts(FuseCtx *c, AdamPart parts[2]); /* the two parts' views, made once */
void fuse_adamw(FuseCtx *c, const AdamPart parts[2]);
/* A training program below fp32 keeps working copies of its parameters in the activations' type. */
bool fuse_keeps_copies(const Graph *g);
void fuse_adamw_refresh(FuseCtx *c, const AdamPart parts[2]); /* the working copies from the values */

/* ============================================================================================
 * sched.c — the pipeline schedule of every rank, and its compile-time deadlock proof
 * ========================================================================================== */

typedef enum SchedKind { SE_F, SE_B, SE_W, SE_COMM } SchedKind; /* W: weight gradients of a split backward */

typedef struct CommOp {
  PpBoundary kind;
  int mb, slot;
  int chunk;      /* the rank's chunk of layers whose boundary this is (0 without chunks) */
  int peer, link; /* the other rank; which link between the two (pp_boundary_tag) */
} CommOp;

typedef struct SchedEntry {
  SchedKind kind;
  int chunk, mb, slot; /* SE_F, SE_B, SE_W: the chunk of layers, micro-batch and activation slot */
  CommOp ops[2];       /* SE_COMM: one operation, or a send and a receive issued together */
  int nops;
} SchedEntry;

#define SCHED_MAX_CHUNKS PP_MAX_CHUNKS /* --vpp at most */
typedef struct StageSched {
  SchedEntry *e;
  int n, cap;
  int nslots; /* its activation slots (with chunks: one pool, a slot holding any chunk's) */
} StageSched;

typedef struct Sched {
  int pp, M;
  int V;       /* chunks of layers per rank: virtual stage c·pp + r is rank r's chunk c */
  bool vshape; /* ... or, two chunks in a V, virtual stages r and 2·pp-1-r (zbv) */
  char kind[16];
  bool split;     /* the backward runs as B (activation gradients, sent on) and W (weight gradients) */
  bool fwd_only;  /* a generation program's (sched_forward): forwards alone, no backward */
  StageSched *st; /* per stage */
} Sched;

#define SCHED_NAMES "naive, gpipe, 1f1b, zb-h1, interleaved, zbv" /* sched.c's table, for messages */
bool sched_known(const char *kind);
bool sched_splits(const char *kind);     /* a schedule with W entries */
bool sched_chunked(const char *kind);    /* a schedule whose ranks hold --vpp chunks of layers */
const char *sched_one_chunk(bool split); /* the table's first one-chunk schedule with (or without) W */
/* NULL when the schedule can run pp ranks of V chunks over M micro-batches and nlayers layers;
 * else why not, and what would (in why). */
const char *sched_fits(const char *kind, int pp, int V, int M, int nlayers, char *why, size_t n);
/* A generation program's schedule (PP_SCHED_FORWARD) for the stages and chunks of train: one
 * micro-batch through each rank's chunks in order, forward only, with its messages. */
Sched *sched_forward(const Sched *train);
int sched_count(void); /* the schedules of the table, for --schedule auto */
const char *sched_name(int i);
Sched *sched_build(int pp, int V, int M, const char *kind);
int sched_vstage(const Sched *s, int r, int chunk); /* rank r's chunk as a virtual stage */
int sched_rank_of(const Sched *s, int v);           /* the rank holding virtual stage v */
int sched_verify(const Sched *s, Src *src, Loc at); /* 0, or reports the ranks and entries that block */
/* An error about the schedule: located at the train block's schedule setting; from a flag or the
 * default, "ppc: error: FILE: ...". */
void sched_report(Src *src, Loc at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
char sched_letter(SchedKind k); /* F, B, W */
void sched_entry_str(const Sched *s, const SchedEntry *e, char *buf, size_t n);
void sched_free(Sched *s);
void sched_debug_break(Sched *s, const char *how); /* --debug-schedule: corrupt on purpose */

/* sched_time.c — predicted timelines. Costs are flop-equivalents: flops + SCHED_BYTE_WEIGHT x bytes. */
#define SCHED_BYTE_WEIGHT 8.0
typedef struct StageCost {
  double f, b, w;        /* one micro-batch's forward, backward (B) and weight gradients (W) */
  int64_t slot_bytes;    /* one micro-batch's activations */
  int64_t state_bytes;   /* the parameters' regions: weights, gradients, moments, working copies */
  int64_t scratch_bytes; /* the scratch region and the workspace */
} StageCost;
typedef struct SchedPrediction {
  double step;         /* predicted step time, flop-equivalents */
  double bubble;       /* idle share of all ranks' time */
  int64_t peak_bytes;  /* the most activation bytes a rank holds */
  int64_t peak_memory; /* the most device memory a rank needs: its parameters' regions, scratch, activations */
} SchedPrediction;
void sched_stage_cost(const Program *p, int chunk, StageCost *c); /* from a chunk's lowered blocks */
double sched_kernel_flops(const Kernel *k);                       /* a launch's: its rows times its rough work a row */
double sched_gemm_flops(const Instr *in); /* 2·m·n·k·batch, of a triangle (tri) its products alone */
SchedPrediction sched_predict(const Sched *s, const StageCost *cost);
void sched_print(FILE *f, const Sched *s, const StageCost *cost);                  /* --emit schedule */
void sched_svg(FILE *f, const Sched *s, const StageCost *cost, const char *model); /* --emit svg */
/* --schedule auto: the table's schedules predicted with the stages' costs, cost[chunks][split]:
 * [0] per stage, [1] per virtual stage of two chunks per rank (NULL: not considered); [.][0] the
 * backward whole, [.][1] as B and W. The fastest that fits (nlayers, M) and whose most device
 * memory on a rank (SchedPrediction.peak_memory) fits mem_limit (0: none) is chosen. Writes the comparison and the
 * choice to why; the schedule's index (*vpp its chunks per rank), or -1. */
int sched_choose(int pp, int M, int nlayers, const StageCost *const cost[2][2], int64_t mem_limit, FILE *why, int *vpp);

/* A file's size and FNV-1a hash as it was written; bytes -1: not written ('- -' in a listing). */
typedef struct FileSum {
  int64_t bytes;
  uint64_t hash;
} FileSum;

/* What a stage's listings say of its kernel files: the `kernels`, `object` and `cuda` lines. */
typedef struct StageFiles {
  char name[32];      /* kernels_sN: the files' base name */
  uint64_t hash;      /* of the C source; every file carries it */
  const char *arch;   /* the CUDA target */
  FileSum so, cl;     /* NAME.so and NAME.cl */
  FileSum cubin, ptx; /* NAME.cubin and NAME.ptx (NVRTC ran) */
} StageFiles;

/* The stage's kernels in every language (and the C compiled, cached under cc_cache; the CUDA
 * compiled by NVRTC when ppc has it) into dir, with the size and hash of each file in *out; dir
 * NULL: only out's name and hash. 0 on success. */
int cg_write_kernels(const char *dir, const Program *p, const char *cc_cache, const char *arch, StageFiles *out);
/* A rank's coordinates but its stage: rank = ((dp·pp + stage)·cp + cp_rank)·tp + tp_rank. */
typedef struct Coord {
  int tp, cp, dp;
} Coord;
/* rankR.prog of the rank at w of p's stage, its `compile` line compile_id; dir NULL: the listing to
 * stdout. 0 on success. */
int cg_write(const char *dir, const Program *p, const Sched *s, const Coord *w, const StageFiles *f,
             uint64_t compile_id);
/* The compile id: FNV-1a 64 over every rank's listing (without its header and `compile` line), in
 * rank order, from the offset basis: id folded with the listing of the rank at w. */
uint64_t cg_listing_fold(uint64_t id, const Program *p, const Sched *s, const Coord *w, const StageFiles *f);
uint64_t cg_fnv1a_more(uint64_t h, const char *s, size_t n); /* FNV-1a 64 continued from h */
/* the world rank at w on stage */
int cg_rank(const Config *c, const Coord *w, int stage);
/* the rank's index in the ZeRO-1 group (dp x cp); 0 without zero */
int cg_zero_rank(const Graph *g, const Coord *w);
/* not owned at w: another rank holds the same values */
bool cg_replica(const IrParam *q, const Coord *w);
/* the param line's `replica` flag: cg_replica, but with ZeRO-1 no dp or cp rank is one */
bool cg_listed_replica(const Graph *g, const IrParam *q, const Coord *w);
/* The bytes a buffer operand may touch, its offset to its buffer's end: the `:BYTES` the listing
 * writes after a kernel's pointer argument; 0 for an operand that is no buffer. */
int64_t cg_extent(const Program *p, const Operand *o);
/* A stage's kernels in one language: the prelude, then every kernel. */
void cg_kernel_source(const Program *p, Lang lang, char **out, size_t *len, size_t *cap);
uint64_t cg_fnv1a(const char *s, size_t n);                   /* FNV-1a 64 */
int cg_write_file(const char *path, const char *s, size_t n); /* through a temporary; 0, or a message */
void cg_mkdir_p(const char *dir);

/* cost.c — --emit cost: per rank (every stage's program prog[stage], at each of its coordinates),
 * one training step's kernel launches and bytes, GEMM FLOPs and bytes, their roofline time on a
 * table of devices, and the kernels spanning the most bytes. */
void cost_print(FILE *f, const Sched *s, const Program *const *prog);

/* mem_report.c — --emit memory: per stage (prog[stage]) the arena of each of its ranks, region by
 * region, beside Megatron-LM's estimate, and the most loaded rank; --mem-limit: 0 when every
 * rank's arena fits limit bytes, else 1 after an error naming the rank, its largest region and
 * the options that shrink it. */
void mem_report_print(FILE *f, const Graph *model, const Sched *s, const Program *const *prog);
int mem_fit_check(const Graph *model, const Program *const *prog, int64_t limit);

/* ============================================================================================
 * cg_nvrtc.c — a stage's CUDA C compiled with NVRTC: a cubin for the target GPU and PTX for
 * newer ones, cached by a hash of the source, the options and NVRTC's version
 * ========================================================================================== */

#define CG_ARCHS "sm_80, sm_89, sm_90 or sm_100" /* the --arch values, for messages */
bool cg_arch_known(const char *arch);
bool cg_nvrtc_available(void); /* ppc was built with NVRTC */
/* DIR/BASE.cubin and DIR/BASE.ptx from the CUDA source src (the text of DIR/BASE.cu) for arch;
 * their sizes and FNV-1a hashes in *cubin and *ptx. 0, or 1 after printing NVRTC's log and the
 * generated lines it names. */
int cg_nvrtc_files(const char *dir, const char *base, const char *src, size_t len, const char *arch, const char *cache,
                   FileSum *cubin, FileSum *ptx);
/* The same with the hashes alone. */
int cg_nvrtc(const char *dir, const char *base, const char *src, size_t len, const char *arch, const char *cache,
             uint64_t *cubin_hash, uint64_t *ptx_hash);

/* ============================================================================================
 * pipe_plan.c — the partition of layers and parameters over pipeline stages
 * ========================================================================================== */

typedef struct StageInfo {
  int layer_start, layer_end; /* [start, end) */
  bool has_embedding, has_final_norm, has_head, has_loss;
  int64_t nparams;      /* elements of the dense parameters the stage owns */
  int64_t nparams_rank; /* elements one tensor-parallel rank of the stage holds */
  double cost;          /* predicted compute (pipe_node_cost) */
} StageInfo;

/* Which stages hold a parameter of the model (a tied embedding is on the first and the last). */
typedef struct ParamStages {
  int first, last; /* the lowest and highest stage holding it, -1 when none */
  int count;       /* how many stages hold it */
  bool tied;       /* read by an embedding and by a head */
} ParamStages;

typedef struct Plan {
  int pp;
  bool balanced; /* --partition balanced */
  StageInfo *stages;
  ParamStages *param;  /* per parameter of the model */
  int *held, *held_at; /* the parameters stage r holds, in index order: held[held_at[r] .. held_at[r+1]) */
} Plan;

int pipe_layer_start(int nlayers, int rank, int pp); /* N*r//p */
void pipe_partition(Graph *g, bool balanced);        /* the stage boundaries: uniform or by cost */
void pipe_balance(const double *layer, int n, double pre, double post, int pp, int *bounds);
double pipe_node_cost(const Graph *g, const IrNode *n); /* forward + backward, in flop-equivalents */
int pipe_stage_of_node(const Graph *g, int pp, const IrNode *n);
/* stage's forward graph with its boundary nodes; its parameters marked tied, shared, copy */
Graph *pipe_split(const Graph *g, const Plan *plan, int stage);
Plan *pipe_plan(const Graph *g);
/* s: the schedule when its ranks hold chunks of layers (the plan's stages are then virtual stages,
 * g cut into as many), else NULL */
/* act: per (virtual) stage, one micro-batch's activation bytes on each of its ranks (the lowered
 * slot), or NULL */
void pipe_plan_print(FILE *f, const Graph *g, const Plan *p, const struct Sched *s, const int64_t *act);
void pipe_plan_free(Plan *p);

/* pipe_chunks.c: the graph of rank r's parameters when it holds chunks of layers (the virtual
 * stages of vplan, as s places them): each tensor once, shared and owned between ranks. */
Graph *pipe_chunks_rank(const Graph *model, const Plan *vplan, const struct Sched *s, int r, Graph *const *chunk,
                        int nch);

/* ---- hf_import.c: ppc --from-hf -------------------------------------------------------------
 * A readable .pdl for the Hugging Face config at path (a config.json, or the directory holding
 * one): Llama, Qwen2, Qwen3, MiniMind or GPT-2 (docs/language.md, "Importing a Hugging Face
 * config"). Written to out through a temporary file renamed over it, or to stdout when out is
 * NULL. 0, or 1 after an error reported on stderr as `ppc: error: PATH: field 'X': expected ...,
 * got ...`. */
int hf_import(const char *path, const char *out);

#endif
