/* ppc.c — the compiler driver: command line, the pass order, and what is written. */
#define _GNU_SOURCE /* renameat2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ppc.h"

static const char usage[] =
    "usage: ppc MODEL.pdl [options]\n"
    "\n"
    "  --tp N             tensor-parallel degree (overrides the mesh block)\n"
    "  --pp N             pipeline-parallel degree\n"
    "  --dp N             data-parallel degree\n"
    "  --micro-batch N    micro-batch size B (overrides the train block)\n"
    "  --seq N            sequence length S\n"
    "  --microbatches N   micro-batches per step M\n"
    "  --schedule NAME    naive, gpipe or 1f1b\n"
    "  --partition NAME   uniform (layers [N*r//p, N*(r+1)//p)) or balanced (by a cost model)\n"
    "  --arch SM          the GPU the CUDA kernels are compiled for: sm_80, sm_89, sm_90 (the\n"
    "                     default) or sm_100; PTX for newer GPUs comes with the cubin\n"
    "  -o DIR             write the compiled stages to DIR (DIR/plan.txt): a new or empty directory,\n"
    "                     or a stage directory of an earlier compile, replaced whole at the end\n"
    "  --emit WHAT        print ast, ir, plan, schedule, program (every rank's listing), or the\n"
    "                     kernel sources in c, opencl or cuda, to stdout\n"
    "  --help             this text\n"
    "  --version          the compiler's version\n";

static void bad_usage(const char *fmt, const char *arg) {
  fputs("ppc: error: ", stderr);
  fprintf(stderr, fmt, arg);
  fputs("\nusage: ppc MODEL.pdl [options]  ('ppc --help' lists them)\n", stderr);
  exit(1);
}

typedef struct Cli {
  const char *model;
  const char *outdir;
  const char *emit;
  const char *debug_schedule; /* hidden: corrupt the schedule to test the deadlock proof */
  const char *arch;           /* --arch: the CUDA target */
  bool balanced;              /* --partition balanced */
  Options opt;
} Cli;

static int64_t parse_count(const char *flag, const char *v) {
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (!*v || *end || errno || n <= 0 || n > (1 << 20)) {
    fprintf(stderr, "ppc: error: %s expects an integer between 1 and %d, got '%s'\n", flag, 1 << 20, v);
    fputs("usage: ppc MODEL.pdl [options]  ('ppc --help' lists them)\n", stderr);
    exit(1);
  }
  return n;
}

static Cli parse_args(int argc, char **argv) {
  Cli c = {.opt = {-1, -1, -1, -1, -1, -1, NULL}, .arch = "sm_90"};
  static const char *counts[] = {"--tp", "--pp", "--dp", "--micro-batch", "--seq", "--microbatches"};
  for (int i = 1; i < argc; i++) {
    char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(usage, stdout); exit(0); }
    if (!strcmp(a, "--version")) { printf("ppc %s\n", PPC_VERSION); exit(0); }
    if (a[0] != '-' || !a[1]) {
      if (c.model) bad_usage("more than one model file ('%s')", a);
      c.model = a;
      continue;
    }
    /* --flag VALUE or --flag=VALUE */
    char name[32];
    const char *val = NULL, *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    if (len >= sizeof name) bad_usage("unknown option '%s'", a);
    memcpy(name, a, len);
    name[len] = 0;
    if (eq) val = eq + 1;
    else if (i + 1 < argc) val = argv[i + 1];
    int k = 0;
    while (k < 6 && strcmp(counts[k], name)) k++;
    int known = k < 6 || !strcmp(name, "-o") || !strcmp(name, "--emit") || !strcmp(name, "--schedule") ||
                !strcmp(name, "--debug-schedule") || !strcmp(name, "--partition") || !strcmp(name, "--arch");
    if (!known) bad_usage("unknown option '%s'", a);
    if (!val) bad_usage("option '%s' needs a value", name);
    if (!eq) i++;
    if (k < 6) {
      int64_t *slot[] = {&c.opt.tp, &c.opt.pp, &c.opt.dp, &c.opt.micro_batch, &c.opt.seq, &c.opt.microbatches};
      *slot[k] = parse_count(name, val);
    } else if (!strcmp(name, "--partition")) {
      if (strcmp(val, "uniform") && strcmp(val, "balanced"))
        bad_usage("--partition expects uniform or balanced, got '%s'", val);
      c.balanced = !strcmp(val, "balanced");
    } else if (!strcmp(name, "--arch")) {
      if (!cg_arch_known(val)) bad_usage("--arch expects " CG_ARCHS ", got '%s'", val);
      c.arch = val;
    } else if (!strcmp(name, "--debug-schedule")) {
      c.debug_schedule = val;
    } else if (!strcmp(name, "-o")) {
      if (!*val) bad_usage("-o needs a directory%s", "");
      c.outdir = val;
    } else if (!strcmp(name, "--emit")) {
      if (strcmp(val, "ast") && strcmp(val, "ir") && strcmp(val, "plan") && strcmp(val, "c") && strcmp(val, "opencl") &&
          strcmp(val, "cuda") && strcmp(val, "schedule") && strcmp(val, "program"))
        bad_usage("--emit expects ast, ir, plan, schedule, program, c, opencl or cuda, got '%s'", val);
      c.emit = val;
    } else {
      if (strcmp(val, "naive") && strcmp(val, "gpipe") && strcmp(val, "1f1b"))
        bad_usage("--schedule expects naive, gpipe or 1f1b, got '%s'", val);
      c.opt.schedule = val;
    }
  }
  if (!c.model) bad_usage("no model file given%s", "");
  return c;
}

/* Which parameters are tied (an embedding table that is also a head) and, with pp > 1, which
 * have a copy on another stage; the lowest stage holding one owns it. */
static void mark_params(Graph *sg, const Plan *plan) {
  for (int i = 0; i < sg->nparams; i++) {
    IrParam *q = &sg->params[i];
    const ParamStages *s = &plan->param[q->gindex];
    q->tied = s->tied;
    q->shared = s->count > 1;
    q->copy = q->shared && sg->stage > s->first;
  }
}

/* One stage as each of its ranks runs it: split from the model, sharded over tensor parallelism,
 * differentiated. NULL after a located error. */
static Graph *stage_graph(const Graph *g, const Plan *plan, int r, bool backward) {
  Graph *sg = pp_split(g, r);               /* pp_split.c: the stage, its boundary nodes */
  mark_params(sg, plan);
  if (g->cfg.tp > 1) {                      /* tp_shard.c: local shapes, collectives */
    Graph *t = tp_shard(sg);
    ir_free(sg);
    if (!(sg = t)) return NULL;
  }
  if (backward && ad_backward(sg)) diag_fatal("internal: stage %d's backward graph does not verify", r); /* ad_backward.c */
  return sg;
}

/* DIR: plan.txt, and per rank its program listing; per stage its kernels. dir NULL: print the
 * listings (--emit program). */
static int write_outputs(const char *dir, const Graph *g, const Plan *plan, const Sched *sched, const char *arch) {
  char path[4096];
  snprintf(path, sizeof path, "%s/plan.txt", dir ? dir : ".");
  FILE *f = dir ? fopen(path, "w") : NULL;
  if (dir && !f) {
    fprintf(stderr, "ppc: error: cannot write '%s': %s\n", path, strerror(errno));
    return 1;
  }
  if (f) pp_plan_print(f, g, plan);
  if (f && fclose(f)) {
    fprintf(stderr, "ppc: error: cannot write '%s'\n", path);
    return 1;
  }
  char cache[4096] = "";
  const char *env = getenv("PPC_CACHE"), *home = getenv("HOME");
  if (env) snprintf(cache, sizeof cache, "%s", env);
  else if (home) snprintf(cache, sizeof cache, "%s/.cache/ppc", home);
  const Config *c = &g->cfg;
  int rc = 0;
  for (int r = 0; r < c->pp && !rc; r++) {
    Graph *sg = stage_graph(g, plan, r, true);
    if (!sg) return 1;
    Program *prog = fuse_lower(sg);         /* fuse_lower.c: kernels, GEMMs, instructions */
    prog->model = g;
    prog->nslots = sched->st[r].nslots;
    mem_plan(prog);                         /* mem_plan.c: the arena */
    if (prog->arena > PP_MAX_ARENA) {
      fprintf(stderr, "ppc: error: stage %d needs an arena of %lld bytes per rank, more than ppr's %lld\n", r,
              (long long)prog->arena, (long long)PP_MAX_ARENA);
      rc = 1;
    }
    StageFiles files;                       /* cg_program.c, cg_nvrtc.c: the stage's kernels */
    if (!rc) rc = cg_write_kernels(dir, prog, cache, arch, &files);
    for (int dp = 0; dp < c->dp && !rc; dp++)
      for (int tp = 0; tp < c->tp && !rc; tp++) {
        int rank = (int)((dp * c->pp + r) * c->tp + tp);
        prog->tp_rank = tp, prog->dp_rank = dp;
        rc = cg_write(dir, prog, sched, rank, &files); /* cg_program.c: the listing */
      }
    prog_free(prog);
    ir_free(sg);
  }
  return rc;
}

static void print_stage_irs(const Graph *g, const Plan *plan) {
  for (int r = 0; r < g->cfg.pp; r++) {
    Graph *sg = stage_graph(g, plan, r, true);
    if (!sg) return;
    printf("# ======== stage %d of %lld%s ========\n", r, (long long)g->cfg.pp,
           g->cfg.tp > 1 ? ", as each tensor-parallel rank runs it" : "");
    ir_print(stdout, sg);
    ir_free(sg);
  }
}

/* ============================================================================================
 * -o DIR: a stage directory, replaced whole
 * ========================================================================================== */

/* The names ppc writes into a stage directory: plan.txt, rankN.prog, kernels_sN.EXT, and its
 * temporaries (dot files). */
static bool ppc_wrote(const char *name) {
  if (name[0] == '.') return true;
  if (!strcmp(name, "plan.txt")) return true;
  const char *digits = !strncmp(name, "rank", 4) ? name + 4 : !strncmp(name, "kernels_s", 9) ? name + 9 : NULL;
  if (!digits || !(*digits >= '0' && *digits <= '9')) return false;
  while (*digits >= '0' && *digits <= '9') digits++;
  return name[0] == 'r' ? !strcmp(digits, ".prog") : *digits == '.';
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
      fprintf(stderr, "ppc: error: -o '%s' holds '%s', which ppc does not write: a stage directory is replaced whole, "
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
static int write_stage_dir(const char *dir, const Graph *g, const Plan *plan, const Sched *sched, const char *arch) {
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
  int rc = write_outputs(tmp, g, plan, sched, arch);
  struct stat st;
  bool exists = !stat(dir, &st);
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

/* The pass order. Each pass reports its own errors against the source and returns NULL. */
static int compile(const Cli *cli) {
  int rc = 1;
  if (cli->outdir && outdir_check(cli->outdir)) return 1;
  Src *src = src_load(cli->model);
  if (!src) return 1;
  Ast *ast = ast_parse(src);                                  /* grammar/parser.y */
  Graph *g = NULL;
  Plan *plan = NULL;
  Sched *sched = NULL;
  if (!ast) goto out;
  if (cli->emit && !strcmp(cli->emit, "ast")) {
    ast_print(stdout, ast);
    rc = 0;
    goto out;
  }
  if (!(g = ir_build(src, ast, &cli->opt))) goto out;        /* ir_build.c: names, shapes, roles */
  bool dense_ir = cli->emit && !strcmp(cli->emit, "ir") && g->cfg.pp == 1 && g->cfg.tp == 1;
  if (dense_ir && ad_backward(g)) diag_fatal("internal: the backward graph does not verify"); /* ad_backward.c */
  pp_partition(g, cli->balanced);                             /* pp_plan.c: stage boundaries */
  plan = pp_plan(g);                                          /* pp_plan.c: layers to stages */
  /* each data-parallel replica runs its share of the micro-batches */
  sched = sched_build((int)g->cfg.pp, (int)(g->cfg.microbatches / g->cfg.dp), g->cfg.schedule); /* sched.c */
  if (cli->debug_schedule) sched_debug_break(sched, cli->debug_schedule);
  if (sched_verify(sched, src, g->cfg.sched_loc)) goto out;                     /* sched.c: no rank waits forever */
  for (int r = 0; r < g->cfg.pp && g->cfg.tp > 1; r++) { /* tensor-parallel roles must be consistent */
    Graph *sg = stage_graph(g, plan, r, false);
    if (!sg) goto out;
    ir_free(sg);
  }
  if (cli->emit && !strcmp(cli->emit, "ir")) {
    if (dense_ir) ir_print(stdout, g);
    else print_stage_irs(g, plan);
  }
  if (cli->emit && !strcmp(cli->emit, "schedule")) sched_print(stdout, sched);
  if (cli->emit && !strcmp(cli->emit, "plan")) pp_plan_print(stdout, g, plan);
  if (cli->emit && (!strcmp(cli->emit, "c") || !strcmp(cli->emit, "opencl") || !strcmp(cli->emit, "cuda"))) {
    Lang lang = !strcmp(cli->emit, "c") ? LANG_C : !strcmp(cli->emit, "opencl") ? LANG_OPENCL : LANG_CUDA;
    for (int r = 0; r < g->cfg.pp; r++) { /* each stage's kernels, as its ranks compile them */
      Graph *sg = stage_graph(g, plan, r, true);
      if (!sg) goto out;
      Program *prog = fuse_lower(sg);
      char *text = NULL;
      size_t len = 0, cap = 0;
      if (g->cfg.pp > 1) cg_append(&text, &len, &cap, "/* ======== stage %d of %lld: kernels_s%d ======== */\n", r,
                                   (long long)g->cfg.pp, r);
      cg_kernel_source(prog, lang, &text, &len, &cap);
      fputs(text, stdout);
      free(text);
      prog_free(prog);
      ir_free(sg);
    }
  }
  if (cli->emit && !strcmp(cli->emit, "program")) rc = write_outputs(NULL, g, plan, sched, cli->arch);
  else rc = cli->outdir ? write_stage_dir(cli->outdir, g, plan, sched, cli->arch) : 0;
  if (!cli->emit && !cli->outdir)
    printf("%s: model '%s' checks: %d layers, %d parameter tensors\n", cli->model, g->model, g->nlayers, g->nparams);
out:
  sched_free(sched);
  pp_plan_free(plan);
  ir_free(g);
  ast_free(ast);
  src_free(src);
  return rc;
}

int main(int argc, char **argv) {
  Cli cli = parse_args(argc, argv);
  return compile(&cli);
}
