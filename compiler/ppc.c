/* ppc.c — the compiler driver: command line, the pass order, and what is written. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
    "  -o DIR             write the compiled stages to DIR (DIR/plan.txt)\n"
    "  --emit WHAT        print ast, ir, plan, c or cuda (the kernel sources) to stdout\n"
    "  --help             this text\n"
    "  --version          the compiler's version\n";

static void bad_usage(const char *fmt, const char *arg) {
  fputs("ppc: error: ", stderr);
  fprintf(stderr, fmt, arg);
  fputs("\n", stderr);
  fputs(usage, stderr);
  exit(1);
}

typedef struct Cli {
  const char *model;
  const char *outdir;
  const char *emit;
  Options opt;
} Cli;

static int64_t parse_count(const char *flag, const char *v) {
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (!*v || *end || errno || n <= 0 || n > (1 << 20)) {
    fprintf(stderr, "ppc: error: %s expects an integer between 1 and %d, got '%s'\n", flag, 1 << 20, v);
    fputs(usage, stderr);
    exit(1);
  }
  return n;
}

static Cli parse_args(int argc, char **argv) {
  Cli c = {.opt = {-1, -1, -1, -1, -1, -1, NULL}};
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
    int known = k < 6 || !strcmp(name, "-o") || !strcmp(name, "--emit") || !strcmp(name, "--schedule");
    if (!known) bad_usage("unknown option '%s'", a);
    if (!val) bad_usage("option '%s' needs a value", name);
    if (!eq) i++;
    if (k < 6) {
      int64_t *slot[] = {&c.opt.tp, &c.opt.pp, &c.opt.dp, &c.opt.micro_batch, &c.opt.seq, &c.opt.microbatches};
      *slot[k] = parse_count(name, val);
    } else if (!strcmp(name, "-o")) {
      if (!*val) bad_usage("-o needs a directory%s", "");
      c.outdir = val;
    } else if (!strcmp(name, "--emit")) {
      if (strcmp(val, "ast") && strcmp(val, "ir") && strcmp(val, "plan") && strcmp(val, "c") && strcmp(val, "cuda"))
        bad_usage("--emit expects ast, ir, plan, c or cuda, got '%s'", val);
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

/* DIR: plan.txt, the program listing and the kernels; created only after everything compiled. */
static int write_outputs(const char *dir, const Graph *g, const Plan *plan) {
  Program *prog = fuse_lower(g); /* fuse_lower.c: kernels, GEMMs, instructions */
  mem_plan(prog);                /* mem_plan.c: the arena */
  if (mkdir(dir, 0777) && errno != EEXIST) {
    fprintf(stderr, "ppc: error: cannot create '%s': %s\n", dir, strerror(errno));
    prog_free(prog);
    return 1;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/plan.txt", dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "ppc: error: cannot write '%s': %s\n", path, strerror(errno));
    prog_free(prog);
    return 1;
  }
  pp_plan_print(f, g, plan);
  if (fclose(f)) {
    fprintf(stderr, "ppc: error: cannot write '%s'\n", path);
    prog_free(prog);
    return 1;
  }
  char cache[4096] = "";
  const char *env = getenv("PPC_CACHE"), *home = getenv("HOME");
  if (env) snprintf(cache, sizeof cache, "%s", env);
  else if (home) snprintf(cache, sizeof cache, "%s/.cache/ppc", home);
  int rc = cg_write(dir, prog, cache); /* cg_program.c: listing, C and CUDA kernels, .so */
  prog_free(prog);
  return rc;
}

/* The pass order. Each pass reports its own errors against the source and returns NULL. */
static int compile(const Cli *cli) {
  int rc = 1;
  Src *src = src_load(cli->model);
  if (!src) return 1;
  Ast *ast = ast_parse(src);                                  /* grammar/parser.y */
  Graph *g = NULL;
  Plan *plan = NULL;
  if (!ast) goto out;
  if (cli->emit && !strcmp(cli->emit, "ast")) {
    ast_print(stdout, ast);
    rc = 0;
    goto out;
  }
  if (!(g = ir_build(src, ast, &cli->opt))) goto out;        /* ir_build.c: names, shapes, roles */
  if (ad_backward(g)) diag_fatal("internal: the backward graph does not verify"); /* ad_backward.c */
  plan = pp_plan(g);                                          /* pp_plan.c: layers to stages */
  if (cli->emit && !strcmp(cli->emit, "ir")) ir_print(stdout, g);
  if (cli->emit && !strcmp(cli->emit, "plan")) pp_plan_print(stdout, g, plan);
  if (cli->emit && (!strcmp(cli->emit, "c") || !strcmp(cli->emit, "cuda"))) {
    Program *prog = fuse_lower(g);
    char *text = NULL;
    size_t len = 0, cap = 0;
    Lang lang = !strcmp(cli->emit, "c") ? LANG_C : LANG_CUDA;
    cg_render_prelude(lang, &text, &len, &cap);
    for (int i = 0; i < prog->nk; i++) cg_render_kernel(prog->kernels[i], lang, &text, &len, &cap);
    fputs(text, stdout);
    free(text);
    prog_free(prog);
  }
  rc = cli->outdir ? write_outputs(cli->outdir, g, plan) : 0;
  if (!cli->emit && !cli->outdir)
    printf("%s: model '%s' checks: %d layers, %d parameter tensors\n", cli->model, g->model, g->nlayers, g->nparams);
out:
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
