/* ppr.c - the runtime's command line: each rank loads DIR/rankR.prog, initialises, trains for N steps over MPI,
 * reports, saves. The options and their --help text are ppr_cli.c's; what it writes of a model,
 * ppr_save.c's; the timelines, ppr_trace.c's; generated text, ppr_sample.c's. */
#include "ppr_cli.h"
#include "ppr_sample.h"
#include "ppr_save.h"
#include "ppr_log.h"
#include "ppr_tb.h"
#include "ppr_state.h"
#include "ppr_stop.h"
#include "ppr_trace.h"
#include "ppr_world.h"
#include "rt_dev_cpu.h"
#include "rt_mesh.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

/* Everything one run holds, from the listing to the log. */
typedef struct {
  PprCli c;
  char *path; /* this rank's listing */
  RtProg *p;
  RtExec *x;
  RtDevKind kind;
  int threads, local; /* the cpu device's threads when ranks share the machine; the ranks on it */
  int model_tied;     /* the checkpoint's embedding is also its head (rt_mesh_check) */
  int gen_only;       /* --generate */
  int main_gen;       /* the program is the generation program */
  int64_t start;      /* the steps done before (--resume) */
  PprStateData data_id;
  RtData *d, *dval; /* the training and validation tokens */
  const char *data_name;
  PprSample text;
  FILE *log;
  PprTb *tb;             /* --tensorboard */
  double *walls, *comps; /* --trace: the per-step wall and compute times */
  double step_flops;     /* --peak-flops: the world's GEMM FLOPs in a step */
  int64_t tokens;        /* a step's tokens over all replicas */
} Run;

/* seconds as the step line shows them: 12.3s, 4m05s, 2h03m */
static const char *duration(char *buf, size_t n, double sec) {
  if (!isfinite(sec) || sec < 0) sec = 0;
  if (sec < 60) snprintf(buf, n, "%.1fs", sec);
  else if (sec < 3600) snprintf(buf, n, "%dm%02ds", (int)(sec / 60), (int)sec % 60);
  else snprintf(buf, n, "%lldh%02dm", (long long)(sec / 3600), (int)(sec / 60) % 60);
  return buf;
}

static void json_num(FILE *fp, const char *key, double v, const char *fmt) {
  fprintf(fp, ",\"%s\":", key);
  if (isfinite(v)) fprintf(fp, fmt, v);
  else fputs("null", fp);
}

/* v as --log writes it with fmt, read back: --tensorboard shows the log's numbers */
static double as_logged(double v, const char *fmt) {
  char b[64];
  snprintf(b, sizeof b, fmt, v);
  return isfinite(v) ? strtod(b, NULL) : v;
}

/* ---- start-up ------------------------------------------------------------------------------- */

/* The world size the programs were compiled for, read from rank 0's listing before anything
 * collective: a launcher's other count is an error every rank prints alike. */
static void check_world_size(const Run *r) {
  char *path0 = ppr_prog_path(r->c.dir, 0, r->main_gen);
  if (r->main_gen && ppr_sample_exists(path0, "--generate")) ppr_die(world.err);
  int tp = 0, pp = 0, dp = 0, cp = 0;
  ppr_settle(rt_prog_read_mesh(path0, &tp, &pp, &dp, &cp, world.err, sizeof world.err));
  free(path0);
  if (tp * pp * dp * cp == world.nranks) return;
  char cps[32] = "";
  if (cp > 1) snprintf(cps, sizeof cps, " \u00d7 cp %d", cp);
  fprintf(stderr,
          "ppr: error: %s was compiled for %d ranks (tp %d \u00d7 pp %d \u00d7 dp %d%s) but mpirun started %d ranks\n",
          r->c.dir, tp * pp * dp * cp, tp, pp, dp, cps, world.nranks);
  if (!rt_comm_uses_mpi(world.comm))
    fprintf(stderr, "ppr: error: (no MPI launcher: ppr ran as a 1-rank world; run: mpirun -np %d ppr %s)\n",
            tp * pp * dp * cp, r->c.dir);
  ppr_exit_all(1);
}

/* This rank's listing, checked to be its own and of the kind the options want; the mesh checked
 * across ranks; the communicator's groups. */
static void load_program(Run *r) {
  char *e = world.err;
  size_t elen = sizeof world.err;
  r->path = ppr_prog_path(r->c.dir, world.me, r->main_gen);
  int rc = rt_prog_load(r->path, &r->p, e, elen);
  if (!rc && r->p->rank != world.me)
    rc = rt_fail_at(e, elen, __FILE__, __LINE__,
                    "%s: the listing says 'rank %d': it is rank %d's program, not rank %d's", r->path, r->p->rank,
                    r->p->rank, world.me);
  if (!rc && r->p->generate != r->main_gen)
    rc = rt_fail_at(e, elen, __FILE__, __LINE__, "%s: %s", r->path,
                    r->main_gen ? "not a generation program (schedule " PP_SCHED_FORWARD ")"
                                : "a generation program (schedule " PP_SCHED_FORWARD
                                  "): ppr trains with DIR/rankR.prog");
  ppr_settle(rc);
  char id[64];
  snprintf(id, sizeof id, "compile %s\n", r->p->compile_id);
  ppr_agree(id, "the ranks' programs come from different runs of ppc",
            "a stage directory is written whole by one ppc command: compile it again");
  if (rt_mesh_check(world.comm, r->p, r->c.dir, &r->model_tied, e, elen)) {
    if (world.me == 0) ppr_print_err(e); /* the same verdict on every rank */
    ppr_exit_all(1);
  }
  rt_comm_groups(world.comm, r->p);
}

/* The device (the cpu device's threads shared out first when ranks share this machine), the
 * communicator's use of it, and the executor. */
static void open_device(Run *r) {
  int index = -1;
  r->kind = RT_DEV_CPU;
  r->local = rt_comm_local_size(world.comm);
  if (!rt_dev_parse(r->c.device, &r->kind, &index) && r->kind == RT_DEV_CPU)
    r->threads = rt_dev_cpu_share_cores(r->local);
  ppr_settle(rt_dev_open(r->c.device, rt_comm_local_rank(world.comm), &world.dev, world.err, sizeof world.err));
  world.dev->tf32 = r->c.tf32;
  world.dev->onednn = r->c.onednn;
  world.dev->lt_epi = r->c.lt_epilogues;
  rt_comm_use_device(world.comm, world.dev, r->p); /* cuda: NCCL where it can */
  r->x = ppr_exec_open(r->p, r->c.dir, world.dev, r->kind);
  rt_exec_set_comm(r->x, world.comm);
}

/* --resume: the training state checked against this run, then the weights and the moments. */
static void resume(Run *r) {
  const PprCli *c = &r->c;
  char *rp = ppr_state_json_path(c->resume), *ro = ppr_state_opt_path(c->resume);
  if (!rp || !ro) ppr_die("out of memory");
  int rc = ppr_state_check(rp, c, r->p, &r->data_id, &r->start, world.err, sizeof world.err);
  struct stat st;
  if (!rc && stat(ro, &st) != 0)
    rc = rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__,
                    "%s: %s: --resume expects the AdamW moments --save writes beside the weights", ro, strerror(errno));
  ppr_settle(rc);
  ppr_settle(rt_init_load(r->p, r->x, c->resume, r->model_tied, NULL, world.err, sizeof world.err));
  ppr_settle(rt_init_load_moments(r->p, r->x, ro, world.err, sizeof world.err));
  if (world.me == 0 && !c->quiet)
    printf("ppr: --resume %s: %lld steps done; steps %lld to %lld\n", c->resume, (long long)r->start,
           (long long)r->start + 1, (long long)c->steps);
  if (world.me == 0 && c->resume_notes) /* what this command line changed of the checkpoint's run */
    printf("ppr: --resume: the checkpoint's options, and from this command line:%s\n", c->resume_notes);
  if (world.me == 0) ppr_flush_stdout();
  free(rp);
  free(ro);
}

/* The weights before the first step: --resume's (with the moments), --init's, or --seed's. */
static void load_weights(Run *r) {
  const PprCli *c = &r->c;
  if (!r->gen_only && (c->save || c->resume)) ppr_settle(ppr_state_data(c, &r->data_id, world.err, sizeof world.err));
  if (c->resume && !r->gen_only) {
    resume(r);
    return;
  }
  if (!c->init && !c->resume) {
    ppr_settle(rt_init_seed(r->p, r->x, c->seed, world.err, sizeof world.err));
    return;
  }
  RtInitInfo info; /* --init, or --generate --resume: its weights */
  ppr_settle(
      rt_init_load(r->p, r->x, c->init ? c->init : c->resume, r->model_tied, &info, world.err, sizeof world.err));
  if (world.me == 0 && info.skipped) /* every rank skipped the same: the checkpoint is checked whole */
    printf("ppr: --init: skipped %d non-parameter buffer%s (%s%s%s)\n", info.skipped, info.skipped > 1 ? "s" : "",
           info.rotary ? "rotary inv_freq" : "", info.rotary && info.mask ? ", " : "",
           info.mask ? "attention masks" : "");
  if (world.me == 0 && info.stripped)
    printf("ppr: --init: %s names the params without the prefix '%s' (the listing's checkpoint_prefix)\n", c->init,
           r->p->ckpt_prefix);
}

/* A loss mask in the data needs a loss that can ignore labels: the program's ignore_index, which
 * the masked tokens' labels become. 0, or -1 with the message in world.err. */
static int data_mask(RtData *d, const char *name, const RtProg *p, const char *path) {
  if (!d) return 0;
  if (p->masked) rt_data_set_ignore(d, p->ignore_index);
  else if (rt_data_has_mask(d))
    return rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__,
                      "%s carries a loss mask, but the model's cross_entropy has no ignore_index (%s): write "
                      "cross_entropy(logits, labels, ignore_index = -100)",
                      name, path);
  return 0;
}

/* --val-frac f: the last floor(f * n) tokens of *d become *val, the rest *d (the training batches
 * then read only them). Each part needs a row's seq + 1 tokens. 0, or -1 with the message in world.err. */
static int split_val(RtData **d, RtData **val, const char *name, double f, int seq) {
  int64_t n = rt_data_len(*d), nval = (int64_t)floor((double)n * f), head = n - nval;
  if (nval < seq + 1 || head < seq + 1)
    return rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__,
                      "--val-frac %g of %s (%lld tokens): %lld validation tokens and %lld training tokens; each "
                      "part needs at least a row's seq + 1 = %d",
                      f, name, (long long)n, (long long)nval, (long long)head, seq + 1);
  RtData *h = NULL;
  if (rt_data_slice(*d, head, nval, name, val, world.err, sizeof world.err) ||
      rt_data_slice(*d, 0, head, name, &h, world.err, sizeof world.err))
    return -1;
  rt_data_close(*d);
  *d = h;
  return 0;
}

/* How to make token files for a model: with its tokenizer, from text. */
#define PPR_TOKENIZE_HINT                                                                                              \
  "python3 tools/tokenize.py --tokenizer DIR/tokenizer.json TEXT... writes tokens_train.bin and tokens_val.bin, for "  \
  "--data and --val-data"

/* d's tokens below the model's vocabulary (flag: the option that named it, "" for the built-in
 * text). Text is bytes: not the ids of a model imported from a Hugging Face config (its tokenizer's)
 * unless its vocabulary is the 256 bytes, nor of a vocabulary over 256 that --data names. 0, or -1
 * with a message. */
static int check_vocab(const Run *r, const RtData *d, const char *name, const char *flag) {
  if (rt_data_is_text(d) && r->p->hf_config && r->p->vocab != 256) {
    char what[600];
    if (*flag) snprintf(what, sizeof what, "%s%s is text, whose bytes would be the tokens", flag, name);
    else snprintf(what, sizeof what, "no --data: the built-in text's bytes would be the tokens");
    return rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__,
                      "%s, but %s was compiled from a Hugging Face config (its listing's hf_config): its tokens are "
                      "the ids of the model's tokenizer (%lld of them). Make token files with it: " PPR_TOKENIZE_HINT,
                      what, r->path, (long long)r->p->vocab);
  }
  if (*flag && rt_data_is_text(d) && r->p->vocab > 256) /* bytes as the ids of a larger vocabulary: a mistake */
    return rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__,
                      "%s%s is text, whose bytes would be the tokens, but the model's vocabulary has %lld: tokenize "
                      "it with the model's tokenizer (python3 tools/tokenize.py --tokenizer tokenizer.json %s writes "
                      "llm.c token files; --train-tokenizer makes a tokenizer)",
                      flag, name, (long long)r->p->vocab, name);
  if (!rt_data_check_vocab(d, name, r->p->vocab, world.err, sizeof world.err)) return 0;
  size_t l = strlen(world.err);
  snprintf(world.err + l, sizeof world.err - l, " (%s%s)%s%s", flag, r->path,
           d == r->d && !r->c.data ? "; pass --data" : "",
           r->p->hf_config ? "; a file of other ids than the model's tokenizer's? " PPR_TOKENIZE_HINT : "");
  return -1;
}

/* d holds a row's window: seq tokens and the label after the last (flag: the option that named it).
 * 0, or -1 with a message. */
static int check_window(const Run *r, const RtData *d, const char *name, const char *flag) {
  if (!d || rt_data_len(d) >= r->p->seq + 1) return 0;
  return rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__,
                    "%s%s: %lld tokens, fewer than a row's window of seq + 1 = %d (the model's sequence and the "
                    "label after it; %s)",
                    flag, name, (long long)rt_data_len(d), r->p->seq + 1, r->path);
}

/* The data, unless no step reads it (--val-frac reads its tail), and the validation data. */
static void open_data(Run *r) {
  const PprCli *c = &r->c;
  int want =
      c->steps > r->start || c->val_frac > 0 || ((r->gen_only || c->sample_every) && !c->prompt && !c->prompt_ids);
  r->data_name = !want ? "none (0 steps)" : c->data ? c->data : "the built-in text";
  int rc = 0;
  if (want && c->data) rc = rt_data_open(c->data, &r->d, world.err, sizeof world.err);
  else if (want)
    rc = rt_data_from_memory((const unsigned char *)rt_default_text, rt_default_text_len, &r->d, world.err,
                             sizeof world.err);
  if (!rc && r->d) rc = check_vocab(r, r->d, r->data_name, c->data ? "--data " : "");
  if (!rc && c->val_frac == 0 && c->steps > r->start) /* the steps' rows (a prompt reads 8 tokens at most) */
    rc = check_window(r, r->d, r->data_name, c->data ? "--data " : "");
  if (!rc) rc = data_mask(r->d, r->data_name, r->p, r->path);
  if (!rc && c->val_frac > 0) rc = split_val(&r->d, &r->dval, r->data_name, c->val_frac, r->p->seq);
  if (!rc && c->val_data) {
    rc = rt_data_open(c->val_data, &r->dval, world.err, sizeof world.err);
    if (!rc) rc = check_vocab(r, r->dval, c->val_data, "--val-data ");
    if (!rc) rc = check_window(r, r->dval, c->val_data, "--val-data ");
    if (!rc) rc = data_mask(r->dval, c->val_data, r->p, r->path);
  }
  ppr_settle(rc);
}

/* ---- the run -------------------------------------------------------------------------------- */

/* --generate: the prompt and the tokens after it, alone on stdout (what was run on stderr). */
static void generate(Run *r) {
  const PprCli *c = &r->c;
  if (!c->quiet && world.me == 0) {
    char how[96];
    if (c->temperature <= 0) snprintf(how, sizeof how, "greedy (temperature 0)");
    else if (c->top_k)
      snprintf(how, sizeof how, "temperature %g, top-k %lld, seed %llu", c->temperature, (long long)c->top_k,
               (unsigned long long)c->sample_seed);
    else snprintf(how, sizeof how, "temperature %g, seed %llu", c->temperature, (unsigned long long)c->sample_seed);
    /* on stderr: stdout is the tokens alone, for a pipe */
    fprintf(stderr, "ppr: %s: model %s; %lld tokens after a prompt of %d, %s\n", r->path, r->p->model,
            (long long)c->generate, r->text.nprompt, how);
  }
  ppr_sample_print(c, r->p, r->x, &r->text, "", (int)c->generate);
}

/* The run's first lines: the model, the mesh, the device, the data, the steps; validation; MFU. */
static void print_banner(const Run *r) {
  const PprCli *c = &r->c;
  const RtProg *p = r->p;
  if (c->quiet || world.me != 0) return;
  const char *dev = world.dev->desc;
  long long ntok = (long long)rt_data_len(r->d), steps = (long long)c->steps, tokens = (long long)r->tokens;
  if (world.nranks == 1)
    printf("ppr: %s: model %s, %d params, arena %lld bytes on %s; data %s (%lld tokens); %lld steps of %lld tokens\n",
           r->path, p->model, p->nparams, (long long)p->arena, dev, r->data_name, ntok, steps, tokens);
  else {
    char cps[24] = "", shared[96] = ""; /* cp beside the mesh's others; the threads ppr gave each rank */
    if (p->cp > 1) snprintf(cps, sizeof cps, " cp %d", p->cp);
    if (r->threads)
      snprintf(shared, sizeof shared, "; %d thread%s a rank (%d ranks share its machine's CPUs)", r->threads,
               r->threads == 1 ? "" : "s", r->local);
    printf("ppr: %s: model %s, mesh tp %d pp %d dp %d%s (%d ranks over MPI), %d params in the model; rank 0: %d "
           "params, arena %lld bytes on %s%s; data %s (%lld tokens); %lld steps of %lld tokens\n",
           c->dir, p->model, p->tp, p->pp, p->dp, cps, world.nranks, p->nmodel ? p->nmodel : p->nparams, p->nparams,
           (long long)p->arena, dev, shared, r->data_name, ntok, steps, tokens);
  }
  if (r->dval) {
    char every[64] = "after the last step";
    if (c->eval_every) snprintf(every, sizeof every, "every %lld steps and after the last", (long long)c->eval_every);
    printf("ppr: validation: %s%s (%lld tokens), %lld micro-batches of %d x %d tokens, %s\n",
           c->val_data ? c->val_data : "the last part of ", c->val_data ? "" : r->data_name,
           (long long)rt_data_len(r->dval), (long long)c->val_batches, p->micro_batch, p->seq, every);
  }
  if (r->step_flops > 0)
    printf("ppr: %.4g FLOPs per step in GEMMs (%.4g per token); MFU against %d x %.4g FLOP/s\n", r->step_flops,
           r->step_flops / (double)r->tokens, world.nranks, c->peak_flops);
  ppr_flush_stdout();
}

/* --log, the step's tokens and --peak-flops's FLOPs. */
static void open_outputs(Run *r) {
  const PprCli *c = &r->c;
  int rc = 0;
  int64_t dropped = 0;
  r->tokens = (int64_t)r->p->micro_batch * r->p->seq * r->p->microbatches; /* M: the step's, over all replicas */
  if (c->log && world.me == 0)
    rc = ppr_log_open(c, r->p->model, r->start, r->tokens, &r->log, &dropped, world.err, sizeof world.err);
  if (!rc && c->tensorboard && world.me == 0) rc = ppr_tb_open(c, &r->tb, world.err, sizeof world.err);
  ppr_settle(rc);
  if (dropped && world.me == 0)
    printf("ppr: --log %s: %lld step lines after step %lld dropped (the run went on past its checkpoint)\n", c->log,
           (long long)dropped, (long long)r->start);
  r->step_flops = c->peak_flops > 0 ? rt_comm_sum(world.comm, rt_exec_gemm_flops(r->x)) : 0;
}

/* --trace: the per-step buffers, and every rank's timeline from a common start. */
static void start_trace(Run *r) {
  const PprCli *c = &r->c;
  if (!c->trace) return;
  r->walls = calloc((size_t)c->steps + 1, sizeof *r->walls);
  r->comps = calloc((size_t)c->steps + 1, sizeof *r->comps);
  ppr_settle(r->walls && r->comps ? 0 : rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__, "out of memory"));
  rt_comm_barrier(world.comm); /* the common start of every rank's timeline */
  rt_exec_trace(r->x, rt_now_ms());
}

/* Seconds since the epoch, for --tensorboard's events. */
static double wall_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --log's curves (rank 0): LOG.svg redrawn from the log, at the end (last) and after evaluations at
 * most once a minute (it reads the whole log). A picture that cannot be written is said, and the run
 * goes on. */
static void plot(const PprCli *c, int last) {
  static double drawn = -1e30;
  char m[1024];
  if (!c->log || world.me != 0 || (!last && rt_now_ms() - drawn < 60e3)) return;
  drawn = rt_now_ms();
  if (ppr_log_plot(c->log, m, sizeof m)) {
    fprintf(stderr, "ppr: warning: --log's picture: %s\n", m);
    fflush(stderr);
  }
}

/* What one step measured, for its line and its --log record. */
typedef struct {
  int64_t step; /* 1-based */
  double loss, gnorm, lr, ms, tps, mfu, elapsed, eta, vloss;
  int eval;
} StepReport;

/* The step's line on stdout (rank 0) and its JSON record in --log. */
static void report(const Run *r, const StepReport *s) {
  const PprCli *c = &r->c;
  int every = !c->log_every || s->step % c->log_every == 0 || s->step == r->start + 1 || s->step == c->steps || s->eval;
  if (!c->quiet && every && world.me == 0) {
    char m[32] = "", el[32], et[32], v[32] = "";
    if (r->step_flops > 0) snprintf(m, sizeof m, "  mfu %.2f%%", 100 * s->mfu);
    if (s->eval) snprintf(v, sizeof v, "  val_loss %.4f", s->vloss);
    printf("step %lld/%lld  loss %.4f  grad_norm %.4g  lr %.2e  %.1f ms  %.0f tok/s%s  elapsed %s  eta %s%s\n",
           (long long)s->step, (long long)c->steps, s->loss, s->gnorm, s->lr, s->ms, s->tps, m,
           duration(el, sizeof el, s->elapsed), duration(et, sizeof et, s->eta), v);
    ppr_flush_stdout();
  }
  if (!r->log) return;
  fprintf(r->log, "{\"step\":%lld", (long long)s->step);
  json_num(r->log, "loss", s->loss, "%.9g");
  json_num(r->log, "grad_norm", s->gnorm, "%.9g");
  json_num(r->log, "lr", s->lr, "%.9g");
  json_num(r->log, "ms", s->ms, "%.3f");
  json_num(r->log, "tokens_per_s", s->tps, "%.1f");
  if (r->step_flops > 0) json_num(r->log, "mfu", s->mfu, "%.6f");
  json_num(r->log, "elapsed_s", s->elapsed, "%.3f");
  json_num(r->log, "eta_s", s->eta, "%.3f");
  if (s->eval) json_num(r->log, "val_loss", s->vloss, "%.9g");
  fprintf(r->log, ",\"tokens\":%lld}\n", (long long)(s->step * r->tokens));
  PPR_CHECK(fflush(r->log) == 0, "%s: write failed: %s", c->log, strerror(errno));
  PprTbScalars tb = {s->step,
                     wall_clock(),
                     as_logged(s->loss, "%.9g"),
                     s->eval ? as_logged(s->vloss, "%.9g") : NAN,
                     as_logged(s->lr, "%.9g"),
                     as_logged(s->gnorm, "%.9g"),
                     as_logged(s->tps, "%.1f"),
                     r->step_flops > 0 ? as_logged(s->mfu, "%.6f") : NAN};
  if (r->tb && ppr_tb_step(r->tb, &tb, world.err, sizeof world.err)) ppr_die(world.err);
  if (s->eval) plot(c, s->step == c->steps);
}

/* Evaluation alone (no step to run): the initial or resumed weights' validation loss. */
static void eval_only(const Run *r) {
  double vloss = NAN;
  if (rt_exec_eval(r->x, r->dval, -1, (int)r->c.val_batches, &vloss, world.err, sizeof world.err)) ppr_die(world.err);
  if (!r->c.quiet && world.me == 0) {
    printf("step %lld/%lld  val_loss %.4f\n", (long long)r->start, (long long)r->c.steps, vloss);
    ppr_flush_stdout();
  }
  if (!r->log) return;
  fprintf(r->log, "{\"step\":%lld", (long long)r->start);
  json_num(r->log, "val_loss", vloss, "%.9g");
  fprintf(r->log, ",\"tokens\":%lld}\n", (long long)(r->start * r->tokens));
  PPR_CHECK(fflush(r->log) == 0, "%s: write failed: %s", r->c.log, strerror(errno));
  PprTbScalars tb = {r->start, wall_clock(), NAN, as_logged(vloss, "%.9g"), NAN, NAN, NAN, NAN};
  if (r->tb && ppr_tb_step(r->tb, &tb, world.err, sizeof world.err)) ppr_die(world.err);
  plot(&r->c, 1);
}

/* Step s (0-based) on every rank, its validation and its report. */
static void step(Run *r, int64_t s, PprGradSave *gs, double run_t0) {
  const PprCli *c = &r->c;
  StepReport q = {.step = s + 1, .vloss = NAN, .mfu = NAN};
  double t0 = rt_now_ms();
  RtHyper h = c->h;
  h.lr = q.lr = rt_lr_at(&c->sched, s); /* --lr-schedule */
  int rc = rt_exec_step(r->x, r->d, s, &h, c->save_grads && !gs->done ? ppr_save_grads_hook : NULL, gs, &q.loss,
                        &q.gnorm, world.err, sizeof world.err);
  if (rc == RT_DEVICE_FAILED) ppr_die(world.err); /* this rank's device failed: the job ends */
  if (rc) {                                       /* the --save-grads hook failed: rank 0's verdict, everywhere */
    if (world.me == 0) ppr_print_err(world.err);
    ppr_exit_all(1);
  }
  q.ms = rt_now_ms() - t0;
  q.tps = q.ms > 0 ? (double)r->tokens / (q.ms * 1e-3) : 0;
  if (r->walls) rt_exec_step_times(r->x, &r->walls[s], &r->comps[s]);
  if (r->step_flops > 0 && q.ms > 0) q.mfu = r->step_flops / (q.ms * 1e-3) / (c->peak_flops * world.nranks);
  q.eval = r->dval && ((c->eval_every && (s + 1) % c->eval_every == 0) || s + 1 == c->steps);
  if (q.eval && rt_exec_eval(r->x, r->dval, s, (int)c->val_batches, &q.vloss, world.err, sizeof world.err))
    ppr_die(world.err);
  q.elapsed = (rt_now_ms() - run_t0) * 1e-3;
  q.eta = q.elapsed / (double)(s + 1 - r->start) * (double)(c->steps - s - 1);
  report(r, &q);
  int sample = c->sample_every && ((s + 1) % c->sample_every == 0 || s + 1 == c->steps);
  if (sample && isfinite(q.loss)) ppr_sample_during(c, r->p, r->x, &r->text, s + 1);
  if (isfinite(q.loss)) return;
  if (world.me == 0) { /* the loss is the same on every rank: all stop here */
    snprintf(world.err, sizeof world.err, "step %lld: the loss is %g; stopping (nothing saved)", (long long)(s + 1),
             q.loss);
    ppr_print_err(world.err);
  }
  ppr_exit_all(1);
}

/* The steps from --resume's to --steps, checkpoints as --save-every asks, and the last one; a stop
 * request ends the loop after the step every rank learnt it with. The exit code. */
static int train(Run *r) {
  const PprCli *c = &r->c;
  open_outputs(r);
  print_banner(r);
  start_trace(r);
  PprGradSave gs = {r->p, c->save_grads, 0};
  int64_t done = r->start, saved = -1;
  int stop_sig = 0, stop_rank = -1;
  double run_t0 = rt_now_ms();
  if (c->steps == r->start && r->dval) eval_only(r);
  for (int64_t s = r->start; s < c->steps; s++) {
    ppr_stop_poll(c->stop_file);
    step(r, s, &gs, run_t0);
    done = s + 1;
    if (c->save_every && done % c->save_every == 0 && done < c->steps) {
      ppr_save_checkpoint(c, r->p, r->x, done, &r->data_id);
      saved = done;
    }
    /* a stop request: every rank learnt it with the step's loss, and stops here together */
    if (done < c->steps && rt_comm_stopping(world.comm, &stop_sig, &stop_rank)) break;
  }
  if (r->log) PPR_CHECK(fclose(r->log) == 0, "%s: close failed: %s", c->log, strerror(errno));
  r->log = NULL;
  ppr_tb_close(r->tb);
  r->tb = NULL;
  plot(c, 1);
  if (stop_sig && world.me == 0) {
    printf("ppr: %s on rank %d: stopped after step %lld of %lld%s%s\n", ppr_stop_cause(stop_sig), stop_rank,
           (long long)done, (long long)c->steps, c->save ? "; saving the weights to " : "", c->save ? c->save : "");
    ppr_flush_stdout();
  }
  if (c->save && saved != done) ppr_save_checkpoint(c, r->p, r->x, done, &r->data_id);
  if (c->trace)
    ppr_write_trace(r->p, r->x, c->trace, r->walls + r->start, r->comps + r->start, r->start, done - r->start);
  return stop_sig ? PPR_EXIT_STOPPED : 0;
}

static void run_close(Run *r) {
  free(r->walls);
  free(r->comps);
  ppr_sample_close(&r->text);
  rt_data_close(r->d);
  rt_data_close(r->dval);
  rt_exec_close(r->x);
  rt_dev_close(world.dev);
  world.dev = NULL;
  rt_prog_free(r->p);
  free(r->path);
}

int main(int argc, char **argv) {
  static Run run; /* static: zeroed, and off the stack */
  Run *r = &run;
  rt_dev_cpu_blas_core(argv); /* OpenBLAS's kernels for this CPU (may run ppr again) */
  ppr_cli_parse(argc, argv, &r->c);
  if (r->c.verify) return ppr_verify(r->c.verify);
  ppr_stop_with_launcher();
  /* OpenMP's wait policy is the environment's (libgomp's default unless OMP_WAIT_POLICY or
   * GOMP_SPINCOUNT is set: an idle thread spins a while, then sleeps). The kernels and the GEMMs
   * share one pool (OpenBLAS runs on one thread, rt_dev_cpu.c), so no other pool's threads need the
   * cores between parallel regions; sleeping at once (PASSIVE) makes every region wait for a
   * wake-up. libgomp reads it when ppr loads, before main. */

  world.exit_file = r->c.exit_file;
  if (rt_comm_init(&argc, &argv, &world.comm, world.err, sizeof world.err)) ppr_die(world.err);
  world.me = rt_comm_rank(world.comm);
  world.nranks = rt_comm_size(world.comm);
  rt_comm_set_timeout(world.comm, r->c.timeout);
  rt_comm_set_what(world.comm, "the start-up");
  ppr_stop_catch();
  char *agreed = ppr_cli_agreed(&r->c);
  PPR_CHECK(agreed != NULL, "out of memory");
  /* before anything else collective: ranks that differ end here together */
  ppr_agree(agreed, "the ranks were started with different options", "every rank runs with the same options");
  free(agreed);
  ppr_check_outputs(&r->c); /* the files rank 0 will write, before anything takes time */

  /* --generate: the generation program is the program (PPR_GENERATE_PROGRAM=train: the training one) */
  r->gen_only = r->c.generate > 0;
  r->text.via_train = r->gen_only || r->c.sample_every ? ppr_sample_via_train() : 0;
  r->main_gen = r->gen_only && !r->text.via_train;
  check_world_size(r);
  load_program(r);
  open_device(r);
  load_weights(r);
  open_data(r);
  if (r->gen_only || r->c.sample_every) ppr_sample_open(&r->c, r->p, r->d, r->kind, &r->text);

  int code = 0;
  if (r->gen_only) generate(r);
  else code = train(r);

  run_close(r);
  return ppr_exit(code);
}
