/* ppc.c — the compiler driver: command line, the pass order, and what is written. */
#define _GNU_SOURCE /* renameat2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ppc.h"

static const char usage[] =
    "usage: ppc MODEL.pdl [options]\n"
    "       ppc --from-hf DIR|config.json [-o FILE.pdl]\n"
    "\n"
    "The mesh and the training step (override the model's mesh and train blocks):\n"
    "  --tp N             tensor-parallel degree\n"
    "  --pp N             pipeline-parallel degree\n"
    "  --dp N             data-parallel degree\n"
    "  --cp N             context-parallel degree: each rank of a cp group holds seq/cp consecutive\n"
    "                     positions; attention all-gathers K and V over the group\n"
    "  --micro-batch N    micro-batch size B\n"
    "  --seq N            sequence length S\n"
    "  --microbatches N   micro-batches per step M\n"
    "  --schedule NAME    " SCHED_NAMES ", or auto: the fastest predicted that fits --mem-limit\n"
    "  --vpp V            chunks of layers per rank (interleaved: any; zbv: 2)\n"
    "  --precision P      fp32 (the default) or bf16: activations, their gradients and the weights'\n"
    "                     working copies in bf16; f32 master weights, gradients and AdamW\n"
    "  --sp               sequence parallelism (with --tp): norms, residuals and dropout on S/tp\n"
    "                     positions per rank; all-gather and reduce-scatter in place of the TP\n"
    "                     all-reduces; stage messages tp times smaller\n"
    "  --attention fused|gemm\n"
    "                     attention as fused kernels that keep no S x S scores (the default: the\n"
    "                     forward, a pass of rowsum(dO*O), the keys' and the queries' gradients), or\n"
    "                     as GEMMs around softmax kernels over B x heads x S x S scores\n"
    "  --attention-probs keep|recompute\n"
    "                     with --attention gemm: attention's softmax probabilities saved for the\n"
    "                     backward (B x heads x S x S of the activations' type a layer and\n"
    "                     micro-batch in flight), or recomputed there from the saved log-sum-exp\n"
    "                     (the default: the scores' product again and an exponential a score)\n"
    "  --zero 0|1         1: ZeRO-1, AdamW's moments and update sharded over the data-parallel\n"
    "                     ranks (dp x cp): gradients reduce-scattered, weights all-gathered\n"
    "  --recompute none|selective|full\n"
    "                     what a layer's backward computes again instead of keeping it from the\n"
    "                     forward: nothing (the default); its norms, elementwise work and RoPE\n"
    "                     (selective: the outputs of its GEMMs and attention are kept); or its\n"
    "                     whole forward (full: its input alone is kept). Gradients are the same bits\n"
    "  --recompute-layers A..B\n"
    "                     with --recompute: layers A to B-1 only (the default: every layer)\n"
    "  --vocab-pad N      the vocabulary's rows (the embedding table and the head's logits) padded to\n"
    "                     a multiple of N on each rank (default 64; 1: none): aligned GEMMs, the\n"
    "                     padded logits masked, the checkpoint's tensors unpadded\n"
    "  --mem-limit SIZE   the device memory a rank may use (K, M, G: KiB, MiB, GiB): a plan whose\n"
    "                     arena is larger is an error naming the region and what shrinks it;\n"
    "                     --schedule auto chooses among the schedules that fit\n"
    "\n"
    "Compiling:\n"
    "  --partition NAME   uniform (layers [N*r//p, N*(r+1)//p)) or balanced (by a cost model)\n"
    "  --arch SM          the GPU the CUDA kernels are compiled for: sm_80, sm_89, sm_90 (the\n"
    "                     default) or sm_100; PTX for newer GPUs comes with the cubin\n"
    "  --generate         also the generation programs (ppr --generate, --sample-every): one\n"
    "                     sequence through the forward alone, on the same mesh and stages; with\n"
    "                     --emit program, their listings are printed instead\n"
    "\n"
    "Output (without either, ppc checks the model and says so):\n"
    "  -o DIR             write the compiled stages to DIR (DIR/plan.txt): a new or empty directory,\n"
    "                     or a stage directory of an earlier compile, replaced whole at the end\n"
    "  --emit WHAT        print ast, ir, plan, schedule (the predicted timeline), svg (it drawn),\n"
    "                     program (every rank's listing), the kernel sources in c, opencl or cuda,\n"
    "                     cost (per rank a step's kernel launches and bytes, GEMM FLOPs, and a\n"
    "                     roofline time on H100, H200 and a CPU), or memory (per stage each\n"
    "                     region of its ranks' arena beside Megatron-LM's estimate, and the most\n"
    "                     loaded rank), to stdout\n"
    "\n"
    "Importing (no model file, no other option):\n"
    "  --from-hf PATH     print a .pdl for a Hugging Face config (PATH: its config.json, or the directory\n"
    "                     holding it): Llama, Qwen2, Qwen3, MiniMind or GPT-2; with -o FILE.pdl, write it\n"
    "                     to FILE.pdl instead (-o names the .pdl file here, not a stage directory)\n"
    "\n"
    "  -h, --help         this text\n"
    "  --version          the compiler's version\n";

static void bad_usage(const char *fmt, const char *arg) {
  fputs("ppc: error: ", stderr);
  fprintf(stderr, fmt, arg);
  fputs("\nusage: ppc MODEL.pdl [options]  ('ppc --help' lists them)\n", stderr);
  exit(1);
}

/* --emit: what is printed. ORDER Emit */
typedef enum Emit {
  EMIT_NONE,
  EMIT_AST,
  EMIT_IR,
  EMIT_PLAN,
  EMIT_SCHEDULE,
  EMIT_SVG,
  EMIT_PROGRAM,
  EMIT_C,
  EMIT_OPENCL,
  EMIT_CUDA,
  EMIT_COST,
  EMIT_MEMORY
} Emit;
static const char *const emit_names[] = {"",        "ast", "ir",     "plan", "schedule", "svg",
                                         "program", "c",   "opencl", "cuda", "cost",     "memory"};
#define EMIT_WORDS "ast, ir, plan, schedule, svg, program, c, opencl, cuda, cost or memory" /* for the message */

typedef struct Cli {
  const char *model;
  const char *outdir;  /* -o: the stage directory; with --from-hf, the .pdl file */
  const char *from_hf; /* --from-hf: a Hugging Face config.json or its directory (hf_import.c) */
  Emit emit;
  const char *debug_schedule; /* hidden: corrupt the schedule to test the deadlock proof */
  const char *arch;           /* --arch: the CUDA target */
  bool balanced;              /* --partition balanced */
  int64_t mem_limit;          /* --mem-limit: bytes, 0 for none */
  int vpp;                    /* --vpp: chunks of layers per rank */
  bool generate;              /* --generate: the generation programs too */
  Options opt;
} Cli;

static int64_t parse_count(const char *flag, const char *v) {
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (!*v || *end || errno || n <= 0 || n > PP_MAX_STEP_DIM) {
    fprintf(stderr, "ppc: error: %s expects an integer between 1 and %lld, got '%s'\n", flag,
            (long long)PP_MAX_STEP_DIM, v);
    fputs("usage: ppc MODEL.pdl [options]  ('ppc --help' lists them)\n", stderr);
    exit(1);
  }
  return n;
}

/* --mem-limit: bytes, with an optional K, M or G (binary multiples). */
static int64_t parse_bytes(const char *flag, const char *v) {
  char *end;
  errno = 0;
  double n = strtod(v, &end);
  double mult = !strcmp(end, "")    ? 1
                : !strcmp(end, "K") ? 1 << 10
                : !strcmp(end, "M") ? 1 << 20
                : !strcmp(end, "G") ? 1 << 30
                                    : 0;
  if (!*v || errno || !mult || !(n > 0) || n * mult > (double)PP_MAX_ARENA) {
    fprintf(stderr, "ppc: error: %s expects a size in bytes up to %lld, with an optional K, M or G, got '%s'\n", flag,
            (long long)PP_MAX_ARENA, v);
    fputs("usage: ppc MODEL.pdl [options]  ('ppc --help' lists them)\n", stderr);
    exit(1);
  }
  return (int64_t)(n * mult);
}

/* The command line, through getopt_long: --flag VALUE and --flag=VALUE, options and the model
 * file in any order. */
static Cli parse_args(int argc, char **argv) {
  enum {
    O_TP = 256,
    O_PP,
    O_DP,
    O_CP,
    O_MB,
    O_SEQ,
    O_M,
    O_SCHEDULE,
    O_PRECISION,
    O_SP,
    O_ATT_PROBS,
    O_ATTENTION,
    O_VOCAB_PAD,
    O_RECOMPUTE,
    O_ZERO,
    O_RC_LAYERS,
    O_PARTITION,
    O_ARCH,
    O_EMIT,
    O_VERSION,
    O_DEBUG_SCHEDULE,
    O_MEM_LIMIT,
    O_VPP,
    O_FROM_HF,
    O_GENERATE
  };
  static const struct option longs[] = {
      {"tp", required_argument, NULL, O_TP},
      {"pp", required_argument, NULL, O_PP},
      {"dp", required_argument, NULL, O_DP},
      {"cp", required_argument, NULL, O_CP},
      {"micro-batch", required_argument, NULL, O_MB},
      {"seq", required_argument, NULL, O_SEQ},
      {"microbatches", required_argument, NULL, O_M},
      {"schedule", required_argument, NULL, O_SCHEDULE},
      {"precision", required_argument, NULL, O_PRECISION},
      {"sp", no_argument, NULL, O_SP},
      {"attention-probs", required_argument, NULL, O_ATT_PROBS},
      {"attention", required_argument, NULL, O_ATTENTION},
      {"vocab-pad", required_argument, NULL, O_VOCAB_PAD},
      {"recompute", required_argument, NULL, O_RECOMPUTE},
      {"zero", required_argument, NULL, O_ZERO},
      {"recompute-layers", required_argument, NULL, O_RC_LAYERS},
      {"partition", required_argument, NULL, O_PARTITION},
      {"arch", required_argument, NULL, O_ARCH},
      {"emit", required_argument, NULL, O_EMIT},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, O_VERSION},
      {"debug-schedule", required_argument, NULL, O_DEBUG_SCHEDULE},
      {"mem-limit", required_argument, NULL, O_MEM_LIMIT},
      {"vpp", required_argument, NULL, O_VPP},
      {"from-hf", required_argument, NULL, O_FROM_HF},
      {"generate", no_argument, NULL, O_GENERATE},
      {NULL, 0, NULL, 0},
  };
  Cli c = {.opt = {.tp = -1,
                   .pp = -1,
                   .dp = -1,
                   .micro_batch = -1,
                   .seq = -1,
                   .microbatches = -1,
                   .cp = -1,
                   .precision = -1,
                   .sp = -1,
                   .keep_probs = -1,
                   .att_gemm = -1,
                   .vocab_pad = -1,
                   .recompute = -1,
                   .zero = -1,
                   .rc_lo = -1,
                   .rc_hi = -1},
           .arch = "sm_90",
           .vpp = 1};
  opterr = 0;                /* the messages below name the option as it was written */
  char compile_opt[32] = ""; /* the first option that is not -o or --from-hf */
  for (int o, li = -1; (o = getopt_long(argc, argv, ":ho:", longs, &li)) != -1; li = -1) {
    const char *flag = argv[optind - 1];
    if (o != 'o' && o != O_FROM_HF && o != ':' && o != '?' && !compile_opt[0])
      snprintf(compile_opt, sizeof compile_opt, "--%s", li >= 0 ? longs[li].name : "help");
    switch (o) {
    case 'h': fputs(usage, stdout); exit(0);
    case O_VERSION: printf("ppc %s\n", PPC_VERSION); exit(0);
    case O_TP: c.opt.tp = parse_count("--tp", optarg); break;
    case O_PP: c.opt.pp = parse_count("--pp", optarg); break;
    case O_DP: c.opt.dp = parse_count("--dp", optarg); break;
    case O_CP: c.opt.cp = parse_count("--cp", optarg); break;
    case O_MB: c.opt.micro_batch = parse_count("--micro-batch", optarg); break;
    case O_SEQ: c.opt.seq = parse_count("--seq", optarg); break;
    case O_M: c.opt.microbatches = parse_count("--microbatches", optarg); break;
    case O_SCHEDULE:
      if (!sched_known(optarg) && strcmp(optarg, "auto"))
        bad_usage("--schedule expects " SCHED_NAMES " or auto, got '%s'", optarg);
      c.opt.schedule = optarg;
      break;
    case O_SP: c.opt.sp = 1; break;
    case O_ATT_PROBS:
      c.opt.keep_probs = ir_config_keep_probs(optarg);
      if (c.opt.keep_probs < 0) bad_usage("--attention-probs expects keep or recompute, got '%s'", optarg);
      break;
    case O_ZERO:
      if (strcmp(optarg, "0") && strcmp(optarg, "1")) bad_usage("--zero expects 0 or 1, got '%s'", optarg);
      c.opt.zero = optarg[0] - '0';
      break;
    case O_RECOMPUTE:
      c.opt.recompute = ir_config_recompute(optarg);
      if (c.opt.recompute < 0) bad_usage("--recompute expects " RECOMPUTE_WORDS ", got '%s'", optarg);
      break;
    case O_RC_LAYERS: {
      int lo, hi, end = 0;
      if (sscanf(optarg, "%d..%d%n", &lo, &hi, &end) != 2 || optarg[end] || lo < 0 || lo >= hi)
        bad_usage("--recompute-layers expects a range of layers A..B (layers A to B-1), got '%s'", optarg);
      c.opt.rc_lo = lo, c.opt.rc_hi = hi;
      break;
    }
    case O_ATTENTION:
      c.opt.att_gemm = ir_config_att_gemm(optarg);
      if (c.opt.att_gemm < 0) bad_usage("--attention expects fused or gemm, got '%s'", optarg);
      break;
    case O_VOCAB_PAD: c.opt.vocab_pad = parse_count("--vocab-pad", optarg); break;
    case O_PRECISION:
      c.opt.precision = pp_precision_parse(optarg);
      if (c.opt.precision < 0) bad_usage("--precision expects " PP_PRECISION_NAMES ", got '%s'", optarg);
      break;
    case O_PARTITION:
      if (strcmp(optarg, "uniform") && strcmp(optarg, "balanced"))
        bad_usage("--partition expects uniform or balanced, got '%s'", optarg);
      c.balanced = !strcmp(optarg, "balanced");
      break;
    case O_ARCH:
      if (!cg_arch_known(optarg)) bad_usage("--arch expects " CG_ARCHS ", got '%s'", optarg);
      c.arch = optarg;
      break;
    case O_EMIT: {
      int e = EMIT_AST;
      while (e <= EMIT_MEMORY && strcmp(emit_names[e], optarg)) e++;
      if (e > EMIT_MEMORY) bad_usage("--emit expects " EMIT_WORDS ", got '%s'", optarg);
      c.emit = (Emit)e;
      break;
    }
    case O_DEBUG_SCHEDULE: c.debug_schedule = optarg; break;
    case O_GENERATE: c.generate = true; break;
    case O_MEM_LIMIT: c.mem_limit = parse_bytes("--mem-limit", optarg); break;
    case O_VPP:
      c.vpp = (int)parse_count("--vpp", optarg);
      _Static_assert(SCHED_MAX_CHUNKS == 16, "the message below");
      if (c.vpp > SCHED_MAX_CHUNKS) bad_usage("--vpp expects at most 16 chunks of layers per rank, got '%s'", optarg);
      break;
    case 'o':
      if (!*optarg) bad_usage("-o needs a directory (with --from-hf, a file)%s", "");
      c.outdir = optarg;
      break;
    case O_FROM_HF:
      if (!*optarg) bad_usage("--from-hf needs a config.json or a directory holding one%s", "");
      c.from_hf = optarg;
      break;
    case ':': bad_usage("option '%s' needs a value", flag); break;
    default: /* '?': getopt_long's answer for anything it does not know */
      if (optopt && flag[0] == '-' && flag[1] != '-') bad_usage("unknown option '%s'", (char[]){'-', (char)optopt, 0});
      bad_usage("unknown option '%s'", flag);
    }
  }
  for (int i = optind; i < argc; i++) {
    if (c.model || c.from_hf)
      bad_usage(c.from_hf ? "--from-hf takes no model file ('%s')" : "more than one model file ('%s')", argv[i]);
    c.model = argv[i];
  }
  if (c.from_hf && compile_opt[0]) bad_usage("--from-hf takes no option but -o FILE.pdl, got '%s'", compile_opt);
  if (!c.model && !c.from_hf) bad_usage("no model file given%s", "");
  return c;
}

/* ============================================================================================
 * The stages
 * ========================================================================================== */

/* One pipeline stage as each of its ranks runs it: its graph (split from the model, sharded over
 * tensor parallelism, differentiated) and, when kernels or listings are wanted, its program. */
typedef struct Stage {
  Graph *graph;                /* the rank's: its stage's graph, or with chunks its parameters' */
  Graph *chunk[PP_MAX_CHUNKS]; /* its chunks' graphs (one: graph itself) */
  int nch;
  Program *prog;
} Stage;

/* One stage (or virtual stage) of the partition in plan: split -> shard -> autodiff -> split
 * backward, each once; NULL after a reported error. */
static Graph *build_graph(const Graph *g, const Plan *plan, const Sched *sched, int r, bool backward) {
  Graph *sg = pipe_split(g, plan, r); /* pipe_split.c: the stage, boundaries, params */
  ir_transpose_sink(sg);              /* ir_transpose.c: the head as one product */
  if (g->cfg.tp > 1) {
    Graph *t = tp_shard(sg); /* tp_shard.c: local shapes, collectives, the vocabulary's padding */
    ir_free(sg);
    if (!(sg = t)) return NULL;
  } else vocab_pad(sg, g);         /* vocab_pad.c: the vocabulary's rows padded */
  if (backward && ad_backward(sg)) /* ad_backward.c */
    diag_fatal("internal: stage %d's backward graph does not verify", r);
  if (backward && sched->split) ad_split(sg); /* ad_split.c: the backward as B and W */
  return sg;
}

/* The rank's program from its graphs: fuse and lower -> plan memory. 0, or 1 after an error. */
static int lower_stage(const Graph *g, const Sched *sched, int r, Stage *st) {
  Program *prog = st->prog = fuse_lower(st->graph, st->chunk, st->nch); /* fuse_lower.c: kernels, instructions */
  prog->model = g;
  prog->nslots = sched->st[r].nslots;
  recompute(prog, &g->cfg); /* recompute.c: layers' forwards again in their backward */
  mem_plan(prog);           /* mem_plan.c: the arena */
  if (prog->arena > PP_MAX_ARENA) {
    fprintf(stderr, "ppc: error: stage %d needs an arena of %lld bytes per rank, more than ppr's %lld\n", r,
            (long long)prog->arena, (long long)PP_MAX_ARENA);
    return 1;
  }
  return 0;
}

static void free_stages(Stage *st, int pp) {
  for (int r = 0; st && r < pp; r++) {
    fuse_prog_free(st[r].prog);
    for (int c = 0; c < st[r].nch; c++)
      if (st[r].chunk[c] != st[r].graph) ir_free(st[r].chunk[c]);
    ir_free(st[r].graph);
  }
  free(st);
}

/* The virtual stages of chunks of layers: g cut into pp*V stages by its partition's rule
 * (--partition too), planned, then g's own partition back. */
static Plan *vstage_plan(Graph *g, bool balanced, int V) {
  int64_t pp = g->cfg.pp;
  g->cfg.pp = pp * V;
  pipe_partition(g, balanced); /* pipe_plan.c */
  Plan *p = pipe_plan(g);
  g->cfg.pp = pp;
  pipe_partition(g, balanced);
  return p;
}

/* Every stage: its graph, then (lower) its program. With chunks of layers (sched->V > 1) the
 * layers are cut into pp*V virtual stages by the same rule as stages (vplan: g cut so, then g's
 * own partition back), each built as a stage is, and rank r's program holds the ones sched gives
 * it. `backward` and `lower` say how far (checking the tensor-parallel roles needs only the split
 * and the shard). NULL after a reported error. */
static Stage *build_stages(Graph *g, const Plan *plan, const Plan *vplan, const Sched *sched, bool backward,
                           bool lower) {
  int pp = (int)g->cfg.pp, V = sched->V;
  Stage *st = xcalloc((size_t)pp, sizeof *st);
  Graph **vg = NULL;
  bool ok = true;
  if (V > 1) {
    vg = xcalloc((size_t)(pp * V), sizeof *vg);
    g->cfg.pp = pp * V; /* the graphs of the virtual stages, as vplan cuts g */
    pipe_partition(g, vplan->balanced);
    for (int v = 0; v < pp * V && ok; v++) ok = (vg[v] = build_graph(g, vplan, sched, v, backward)) != NULL;
    g->cfg.pp = pp;
    pipe_partition(g, vplan->balanced);
  }
  for (int r = 0; r < pp && ok; r++) {
    Stage *x = &st[r];
    x->nch = V;
    if (V == 1) {
      ok = (x->graph = x->chunk[0] = build_graph(g, plan, sched, r, backward)) != NULL;
    } else {
      for (int c = 0; c < V; c++) x->chunk[c] = vg[sched_vstage(sched, r, c)], vg[sched_vstage(sched, r, c)] = NULL;
      x->graph = pipe_chunks_rank(g, vplan, sched, r, x->chunk, V); /* pipe_chunks.c: the rank's parameters */
    }
    if (ok && lower) ok = !lower_stage(g, sched, r, x);
  }
  for (int v = 0; vg && v < pp * V; v++) ir_free(vg[v]); /* after an error: the ones no rank took */
  free(vg);
  if (!ok) {
    free_stages(st, pp);
    return NULL;
  }
  return st;
}

/* Every stage's costs (sched_time.c) as lowered for a one-chunk schedule whose backward is split
 * or whole: its slot counts do not matter to them. 0, or 1 after a reported error. */
static int stage_costs(Graph *g, const Plan *plan, int M, bool split, StageCost *cost) {
  int n = (int)g->cfg.pp;
  Sched *s = sched_build(n, 1, M, sched_one_chunk(split)); /* sched.c */
  Stage *st = build_stages(g, plan, NULL, s, true, true);
  for (int r = 0; st && r < n; r++) sched_stage_cost(st[r].prog, 0, &cost[r]);
  free_stages(st, n);
  sched_free(s);
  return !st;
}

/* --schedule auto: every stage lowered twice, its backward whole and split, for the costs of each
 * kind of schedule, and so every virtual stage of two chunks per rank when the layers allow; then
 * sched_choose picks (sched_time.c), and g's schedule and *vpp become its choice. 0, or 1 after an
 * error (*why, the comparison, is set either way once the stages are lowered). */
static int choose_schedule(Graph *g, const Plan *plan, bool balanced, int64_t mem_limit, int *vpp, char **why) {
  int pp = (int)g->cfg.pp, M = (int)(g->cfg.microbatches / g->cfg.dp), rc = 0;
  StageCost *cost[2][2] = {{NULL, NULL}, {NULL, NULL}};
  for (int split = 0; split < 2 && !rc; split++)
    rc = stage_costs(g, plan, M, split, cost[0][split] = xcalloc((size_t)pp, sizeof(StageCost)));
  if (!rc && pp > 1 && g->nlayers >= 2 * pp) { /* two chunks per rank: the virtual stages' costs */
    Plan *vp = vstage_plan(g, balanced, 2);
    g->cfg.pp = 2 * pp;
    pipe_partition(g, balanced);
    for (int split = 0; split < 2 && !rc; split++)
      rc = stage_costs(g, vp, M, split, cost[1][split] = xcalloc((size_t)(2 * pp), sizeof(StageCost)));
    g->cfg.pp = pp;
    pipe_partition(g, balanced);
    pipe_plan_free(vp);
  }
  int k = -1;
  if (!rc) {
    size_t len = 0;
    FILE *w = open_memstream(why, &len);
    if (!w) diag_fatal("out of memory");
    k = sched_choose(pp, M, g->nlayers, (const StageCost *const(*)[2])cost, mem_limit, w, vpp);
    fclose(w);
  }
  for (int i = 0; i < 4; i++) free(cost[i / 2][i % 2]);
  if (rc) return 1;
  if (k < 0) {
    fprintf(stderr, "ppc: error: no schedule fits --mem-limit:\n%s", *why);
    return 1;
  }
  snprintf(g->cfg.schedule, sizeof g->cfg.schedule, "%s", sched_name(k));
  return 0;
}

/* The predicted timeline from every stage's lowered blocks (--emit schedule, --emit svg); with
 * chunks of layers, every virtual stage's from the chunk of the rank that holds it. */
static void print_schedule(const Stage *st, const Sched *sched, const char *model, bool svg) {
  int nv = sched->pp * sched->V;
  StageCost *cost = xcalloc((size_t)nv, sizeof *cost);
  for (int r = 0; r < sched->pp; r++)
    for (int c = 0; c < sched->V; c++) sched_stage_cost(st[r].prog, c, &cost[sched_vstage(sched, r, c)]);
  if (svg) sched_svg(stdout, sched, cost, model); /* sched_time.c */
  else sched_print(stdout, sched, cost);
  free(cost);
}

#define PPC_PLAN_LOWER_LAYERS 1024

/* Per (virtual) stage, one micro-batch's activations on each of its ranks: the lowered slot. */
static int64_t *stage_acts(const Stage *st, const Sched *sched) {
  int nv = sched->pp * sched->V;
  for (int r = 0; r < sched->pp; r++)
    if (!st[r].prog) return NULL;
  int64_t *act = xcalloc((size_t)nv, sizeof *act);
  for (int r = 0; r < sched->pp; r++)
    for (int c = 0; c < sched->V; c++) {
      StageCost cost;
      sched_stage_cost(st[r].prog, c, &cost);
      act[sched_vstage(sched, r, c)] = cost.slot_bytes;
    }
  return act;
}

/* Each stage's kernels in one language, as its ranks compile them (--emit c|opencl|cuda). */
static void print_kernels(const Graph *g, const Stage *st, Lang lang) {
  for (int r = 0; r < g->cfg.pp; r++) {
    char *text = NULL;
    size_t len = 0, cap = 0;
    if (g->cfg.pp > 1)
      cg_append(&text, &len, &cap, "/* ======== stage %d of %lld: kernels_s%d ======== */\n", r, (long long)g->cfg.pp,
                r);
    cg_kernel_source(st[r].prog, lang, &text, &len, &cap);
    fputs(text, stdout);
    free(text);
  }
}

/* Every stage's program, in stage order (freed by the caller). */
static const Program **stage_programs(const Graph *g, const Stage *st) {
  const Program **prog = xcalloc((size_t)g->cfg.pp, sizeof *prog);
  for (int r = 0; r < g->cfg.pp; r++) prog[r] = st[r].prog;
  return prog;
}

static void print_stage_irs(const Graph *g, const Stage *st, const Sched *sched) {
  for (int r = 0; r < g->cfg.pp; r++)
    for (int c = 0; c < st[r].nch; c++) {
      char chunk[64] = "";
      if (st[r].nch > 1) snprintf(chunk, sizeof chunk, ", chunk %d (virtual stage %d)", c, sched_vstage(sched, r, c));
      printf("# ======== stage %d of %lld%s%s ========\n", r, (long long)g->cfg.pp, chunk,
             g->cfg.tp > 1 ? ", as each tensor-parallel rank runs it" : "");
      ir_print(stdout, st[r].chunk[c]);
    }
}

/* Per stage its kernels, per rank its listing (dir NULL: printed), each listing carrying the
 * compile id, a hash over them all (cg_listing_fold): ppr's ranks compare it at start-up. */
static int write_programs(const char *dir, const Graph *g, const Sched *sched, const Stage *st, const char *arch) {
  char cache[4096] = "";
  const char *env = getenv("PPC_CACHE"), *home = getenv("HOME");
  if (env) snprintf(cache, sizeof cache, "%s", env);
  else if (home) snprintf(cache, sizeof cache, "%s/.cache/ppc", home);
  const Config *c = &g->cfg;
  StageFiles *files = xcalloc((size_t)c->pp, sizeof *files); /* cg_program.c, cg_nvrtc.c: sizes, hashes */
  int rc = 0;
  for (int r = 0; r < c->pp && !rc; r++) rc = cg_write_kernels(dir, st[r].prog, cache, arch, &files[r]);
  /* rank ((dp * pp + r) * cp + cp_rank) * tp + tp_rank: in rank order for the id, twice */
  uint64_t id = cg_fnv1a("", 0);
  for (int pass = 0; pass < 2 && !rc; pass++)
    for (int dp = 0; dp < c->dp && !rc; dp++)
      for (int r = 0; r < c->pp && !rc; r++)
        for (int cp = 0; cp < c->cp && !rc; cp++)
          for (int tp = 0; tp < c->tp && !rc; tp++) {
            Coord w = {.tp = tp, .cp = cp, .dp = dp};
            if (pass == 0) id = cg_listing_fold(id, st[r].prog, sched, &w, &files[r]);
            else rc = cg_write(dir, st[r].prog, sched, &w, &files[r], id); /* the listing */
          }
  free(files);
  return rc;
}

/* --generate: the generation programs, of the model built again with one sequence a micro-batch */
typedef struct Gen {
  Graph *g;
  Plan *plan, *vplan;
  Sched *sched;
  Stage *st;
} Gen;

static void free_gen(Gen *x) {
  if (x->g) free_stages(x->st, (int)x->g->cfg.pp);
  sched_free(x->sched);
  pipe_plan_free(x->plan);
  pipe_plan_free(x->vplan);
  ir_free(x->g);
}

/* The generation programs of the training ones (st, on sched): the model built again with one
 * sequence a micro-batch (a replica each), cut into the same stages and chunks, each rank's chunks
 * forward only with .logits in the loss's place (pipe_split.c), on sched_forward's schedule. Each
 * rank's parameters are the training program's, in its order (ppr copies them from one to the
 * other). 0, or 1 after a reported error. */
static int build_gen(const Cli *cli, Src *src, const Ast *ast, const Graph *g, const Sched *sched, const Stage *st,
                     Gen *out) {
  Options o = cli->opt;
  o.tp = g->cfg.tp, o.pp = g->cfg.pp, o.dp = g->cfg.dp, o.seq = g->cfg.seq;
  o.micro_batch = 1;
  o.microbatches = g->cfg.dp;
  o.schedule = g->cfg.schedule;
  o.precision = PP_PREC_FP32;                  /* generation reads the master weights as they are */
  o.sp = 0;                                    /* one sequence, its activations small */
  Graph *gg = out->g = ir_build(src, ast, &o); /* ir_build.c */
  if (!gg) return 1;
  gg->infer = true;
  snprintf(gg->cfg.schedule, sizeof gg->cfg.schedule, "%s", PP_SCHED_FORWARD);
  pipe_partition(gg, cli->balanced);
  out->plan = pipe_plan(gg);
  if (sched->V > 1) out->vplan = vstage_plan(gg, cli->balanced, sched->V);
  out->sched = sched_forward(sched); /* sched.c */
  if (sched_verify(out->sched, src, g->cfg.sched_loc)) return 1;
  if (!(out->st = build_stages(gg, out->plan, out->vplan, out->sched, false, true))) return 1;
  for (int r = 0; r < g->cfg.pp; r++) {
    const Graph *a = st[r].graph, *b = out->st[r].graph;
    bool same = a->nparams == b->nparams;
    for (int i = 0; same && i < a->nparams; i++) same = !strcmp(a->params[i].name, b->params[i].name);
    if (!same) {
      fprintf(stderr,
              "ppc: error: --generate: stage %d of the generation programs holds other parameters than its "
              "training program (the balanced partition of one sequence differs); use --partition uniform\n",
              r);
      return 1;
    }
  }
  return 0;
}

/* DIR: plan.txt, and per rank its program listing (and with gen its generation program); per
 * stage its kernels. dir NULL: print the listings (--emit program; with gen, its listings). */
static int write_outputs(const char *dir, const Graph *g, const Plan *plan, const char *why, const Sched *sched,
                         const Stage *st, const char *arch, const Gen *gen) {
  if (!dir && gen) return write_programs(NULL, gen->g, gen->sched, gen->st, arch);
  char path[4096];
  snprintf(path, sizeof path, "%s/plan.txt", dir ? dir : ".");
  FILE *f = dir ? fopen(path, "w") : NULL;
  if (dir && !f) {
    fprintf(stderr, "ppc: error: cannot write '%s': %s\n", path, strerror(errno));
    return 1;
  }
  if (f) {
    int64_t *act = stage_acts(st, sched);
    pipe_plan_print(f, g, plan, sched, act);
    free(act);
  }
  if (f && why) fputs(why, f);
  if (f && fclose(f)) {
    fprintf(stderr, "ppc: error: cannot write '%s'\n", path);
    return 1;
  }
  int rc = write_programs(dir, g, sched, st, arch);
  if (!rc && gen) rc = write_programs(dir, gen->g, gen->sched, gen->st, arch);
  return rc;
}

/* ============================================================================================
 * -o DIR: a stage directory, replaced whole
 * ========================================================================================== */

/* The names ppc writes into a stage directory: plan.txt, rankN.prog, kernels_sN.EXT, and its
 * temporaries (dot files). */
static bool ppc_wrote(const char *name) {
  if (name[0] == '.') return true;
  if (!strcmp(name, "plan.txt")) return true;
  const char *digits = !strncmp(name, "rank", 4)        ? name + 4
                       : !strncmp(name, "kernels_s", 9) ? name + 9
                       : !strncmp(name, "gen_s", 5)     ? name + 5
                                                        : NULL;
  if (!digits || !(*digits >= '0' && *digits <= '9')) return false;
  while (*digits >= '0' && *digits <= '9') digits++;
  return name[0] == 'r' ? !strcmp(digits, ".prog") || !strcmp(digits, ".gen.prog") : *digits == '.';
}

/* -o DIR must be new, empty, or a stage directory ppc wrote (everything in it is ppc's): anything
 * else is refused before any work, so that a mistyped -o never deletes a user's files. */
static int outdir_check(const char *dir) {
  struct stat st;
  if (stat(dir, &st)) {
    if (errno == ENOENT) return 0;
    fprintf(stderr, "ppc: error: -o '%s': %s\n", dir, strerror(errno));
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) {
    fprintf(stderr, "ppc: error: -o '%s' is a file, not a directory\n", dir);
    return 1;
  }
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "ppc: error: -o '%s': %s\n", dir, strerror(errno));
    return 1;
  }
  int rc = 0, n = 0;
  bool plan = false;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    n++;
    plan |= !strcmp(e->d_name, "plan.txt");
    if (!rc && !ppc_wrote(e->d_name)) {
      fprintf(stderr,
              "ppc: error: -o '%s' holds '%s', which ppc does not write: a stage directory is replaced whole, "
              "so ppc writes only into a new, empty or stage directory (move '%s' or choose another)\n",
              dir, e->d_name, e->d_name);
      rc = 1;
    }
  }
  closedir(d);
  if (!rc && n && !plan) {
    fprintf(stderr, "ppc: error: -o '%s' is not empty and has no plan.txt: it is not a stage directory\n", dir);
    rc = 1;
  }
  return rc;
}

/* Remove a directory ppc made and the files in it (stage directories are flat). */
static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    char path[4096];
    for (struct dirent *e; (e = readdir(d));) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* Write the stages into a fresh directory beside DIR and swap it in at the end: a failed or
 * interrupted compile (a full disk, a bad kernel) leaves DIR as it was, and a finished one leaves
 * no file of an earlier compile (a pp 2 compile after a pp 4 one has no rank4.prog). */
static int write_stage_dir(const char *dir, const Graph *g, const Plan *plan, const char *why, const Sched *sched,
                           const Stage *st, const char *arch, const Gen *gen) {
  char tmp[4096], old[4096 + 8];
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--; /* "stages/" */
  const char *slash = memrchr(dir, '/', n);
  int base = slash ? (int)(slash - dir + 1) : 0;
  if (snprintf(tmp, sizeof tmp, "%.*s.%.*s.ppc-XXXXXX", base, dir, (int)n - base, dir + base) >= (int)sizeof tmp) {
    fprintf(stderr, "ppc: error: -o '%s': the path is too long\n", dir);
    return 1;
  }
  if (!mkdtemp(tmp)) {
    fprintf(stderr, "ppc: error: -o '%s': cannot make a directory beside it (%s): %s\n", dir, tmp, strerror(errno));
    return 1;
  }
  mode_t mask = umask(0);
  umask(mask);
  chmod(tmp, 0777 & ~mask);
  int rc = write_outputs(tmp, g, plan, why, sched, st, arch, gen);
  struct stat sb;
  bool exists = !stat(dir, &sb);
  if (!rc && exists && renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE)) {
    /* no atomic exchange here (an old kernel or file system): DIR aside, the new one in */
    snprintf(old, sizeof old, "%s.old", tmp);
    if (rename(dir, old) || rename(tmp, dir)) {
      fprintf(stderr, "ppc: error: -o '%s': cannot replace it: %s\n", dir, strerror(errno));
      rc = 1;
    } else remove_dir(old);
  } else if (!rc && !exists && rename(tmp, dir)) {
    fprintf(stderr, "ppc: error: -o '%s': cannot rename %s to it: %s\n", dir, tmp, strerror(errno));
    rc = 1;
  }
  remove_dir(tmp); /* after an exchange: the old stages; after a failure: the partial new ones */
  if (rc) fprintf(stderr, "ppc: -o '%s' is %s\n", dir, exists ? "as it was before this compile" : "not written");
  return rc;
}

/* ============================================================================================
 * The pass order. Each pass reports its own errors against the source and returns NULL.
 * ========================================================================================== */

static int compile(const Cli *cli) {
  if (cli->outdir && outdir_check(cli->outdir)) return 1; /* before any work */
  int rc = 1;
  Src *src = src_load(cli->model);        /* diag.c */
  Ast *ast = src ? ast_parse(src) : NULL; /* grammar/parser.y */
  Graph *g = NULL;
  Plan *plan = NULL, *vplan = NULL; /* vplan: the virtual stages, with chunks of layers */
  Sched *sched = NULL;
  Stage *st = NULL;
  Gen gen = {0};    /* --generate */
  char *why = NULL; /* --schedule auto: the comparison and the choice */
  if (!ast) goto out;
  if (cli->emit == EMIT_AST) {
    ast_print(stdout, ast);
    rc = 0;
    goto out;
  }
  if (!(g = ir_build(src, ast, &cli->opt))) goto out; /* ir_build.c: names, shapes, roles */
  pipe_partition(g, cli->balanced);                   /* pipe_plan.c: stage boundaries */
  plan = pipe_plan(g);                                /* pipe_plan.c: layers to stages, params */
  int V = cli->vpp;                                   /* --schedule auto: its choice's */
  if (!strcmp(g->cfg.schedule, "auto") && choose_schedule(g, plan, cli->balanced, cli->mem_limit, &V, &why)) goto out;
  /* each data-parallel replica runs its share of the micro-batches */
  int M = (int)(g->cfg.microbatches / g->cfg.dp);
  char fit[320];
  if (sched_fits(g->cfg.schedule, (int)g->cfg.pp, V, M, g->nlayers, fit, sizeof fit)) { /* sched.c */
    sched_report(src, g->cfg.sched_loc, "%s", fit);
    goto out;
  }
  sched = sched_build((int)g->cfg.pp, V, M, g->cfg.schedule); /* sched.c */
  if (cli->debug_schedule) sched_debug_break(sched, cli->debug_schedule);
  if (sched_verify(sched, src, g->cfg.sched_loc)) goto out; /* sched.c: no rank waits forever */

  /* per stage: split -> shard -> autodiff -> fuse/lower -> memory, as far as the output needs
   * (a dense --emit ir prints the whole model's graph instead; tp > 1 is checked on the stages) */
  bool dense_ir = cli->emit == EMIT_IR && g->cfg.pp == 1 && g->cfg.tp == 1;
  /* the plan states each stage's activations, which take the lowered program: not for a model of
   * more than PPC_PLAN_LOWER_LAYERS layers, whose plan is asked for to see the partition quickly;
   * EMIT_PROGRAM and the kinds after it (the kernel sources, cost) read the lowered programs */
  bool lower = cli->outdir || cli->emit >= EMIT_PROGRAM || cli->mem_limit > 0 || cli->emit == EMIT_SCHEDULE ||
               cli->emit == EMIT_SVG || (cli->emit == EMIT_PLAN && g->nlayers <= PPC_PLAN_LOWER_LAYERS);
  bool backward = lower || (cli->emit == EMIT_IR && !dense_ir);
  if (V > 1) vplan = vstage_plan(g, cli->balanced, V); /* the virtual stages of chunks of layers */
  if ((g->cfg.tp > 1 || backward) && !(st = build_stages(g, plan, vplan, sched, backward, lower))) goto out;
  bool gen_out = cli->generate && (cli->outdir || cli->emit == EMIT_PROGRAM);
  if (gen_out && g->cfg.cp > 1) { /* one sequence, token by token: nothing to split */
    fprintf(stderr, "ppc: error: --generate: the generation programs run without context parallelism; compile them "
                    "from a mesh without cp\n");
    goto out;
  }
  if (gen_out && build_gen(cli, src, ast, g, sched, st, &gen)) goto out; /* the generation programs */
  const Program **prog = st && lower ? stage_programs(g, st) : NULL;
  if (cli->mem_limit > 0 && mem_fit_check(g, prog, cli->mem_limit)) { /* mem_report.c */
    free(prog);
    goto out;
  }

  rc = 0;
  switch (cli->emit) {
  case EMIT_NONE: break;
  case EMIT_AST: break; /* printed above */
  case EMIT_IR:
    if (!dense_ir) print_stage_irs(g, st, sched);
    else if (ad_backward(g)) diag_fatal("internal: the backward graph does not verify"); /* ad_backward.c */
    else ir_print(stdout, g);
    break;
  case EMIT_PLAN: {
    int64_t *act = st ? stage_acts(st, sched) : NULL;
    pipe_plan_print(stdout, g, vplan ? vplan : plan, sched, act);
    if (!act)
      printf("\nactivations: not computed for %d layers (more than %d): --emit schedule, or -o DIR's plan.txt, "
             "states them\n",
             g->nlayers, PPC_PLAN_LOWER_LAYERS);
    free(act);
  }
    if (why) fputs(why, stdout);
    break;
  case EMIT_SCHEDULE:
  case EMIT_SVG:
    if (why && cli->emit == EMIT_SCHEDULE) fputs(why, stdout);
    print_schedule(st, sched, g->model, cli->emit == EMIT_SVG);
    break;
  case EMIT_PROGRAM:
    rc = write_outputs(NULL, g, vplan ? vplan : plan, why, sched, st, cli->arch, gen_out ? &gen : NULL);
    break;
  case EMIT_C: print_kernels(g, st, LANG_C); break;
  case EMIT_OPENCL: print_kernels(g, st, LANG_OPENCL); break;
  case EMIT_CUDA: print_kernels(g, st, LANG_CUDA); break;
  case EMIT_COST: cost_print(stdout, sched, prog); break;            /* cost.c */
  case EMIT_MEMORY: mem_report_print(stdout, g, sched, prog); break; /* mem_report.c */
  }
  free(prog);
  if (!rc && cli->outdir)
    rc = write_stage_dir(cli->outdir, g, vplan ? vplan : plan, why, sched, st, cli->arch, gen_out ? &gen : NULL);
  if (!rc && !cli->emit && !cli->outdir)
    printf("%s: model '%s' checks: %d layers, %d parameter tensors\n", cli->model, g->model, g->nlayers, g->nparams);
out:
  free_gen(&gen);
  if (g) free_stages(st, (int)g->cfg.pp);
  sched_free(sched);
  pipe_plan_free(plan);
  pipe_plan_free(vplan);
  ir_free(g);
  ast_free(ast);
  src_free(src);
  free(why);
  return rc;
}

int main(int argc, char **argv) {
  Cli cli = parse_args(argc, argv);
  if (cli.from_hf) return hf_import(cli.from_hf, cli.outdir); /* hf_import.c: -o is the .pdl file */
  return compile(&cli);
}
