/* ppr_sample.c - --generate and --sample-every (ppr_sample.h). */
#include "ppr_sample.h"
#include "ppr_world.h"
#include "rt_mesh.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ppr_sample_via_train(void) {
  const char *v = getenv("PPR_GENERATE_PROGRAM");
  if (v && *v && strcmp(v, "train") && strcmp(v, "generate")) {
    snprintf(world.err, sizeof world.err, "PPR_GENERATE_PROGRAM=%s: expected generate (the default) or train", v);
    ppr_die(world.err);
  }
  return v && !strcmp(v, "train");
}

int ppr_sample_exists(const char *path, const char *flag) {
  if (access(path, F_OK) == 0) return 0;
  return rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__,
                    "%s: %s: %s samples through the generation programs: compile with ppc --generate", path,
                    strerror(errno), flag);
}

/* The generation program of this rank, checked against its training program p: the same
 * parameters, in the same order. */
static void open_program(const PprCli *c, const RtProg *p, PprSample *g) {
  char *e = world.err, *path = ppr_prog_path(c->dir, world.me, 1);
  size_t elen = sizeof world.err;
  int rc = ppr_sample_exists(path, "--sample-every");
  if (!rc) rc = rt_prog_load(path, &g->p, e, elen);
  if (!rc && (!g->p->generate || g->p->rank != world.me))
    rc = rt_fail_at(e, elen, __FILE__, __LINE__, "%s: not rank %d's generation program (schedule %s)", path, world.me,
                    PP_SCHED_FORWARD);
  for (int i = 0; !rc && i < p->nparams; i++)
    if (g->p->nparams != p->nparams || strcmp(g->p->params[i].name, p->params[i].name) ||
        g->p->params[i].numel != p->params[i].numel)
      rc = rt_fail_at(e, elen, __FILE__, __LINE__,
                      "%s: its parameters are not those of %s (param %d): compile both with one ppc --generate", path,
                      p->path, i);
  ppr_settle(rc);
  int tied = 0;
  if (rt_mesh_check(world.comm, g->p, c->dir, &tied, e, elen)) {
    if (world.me == 0) ppr_print_err(e);
    ppr_exit_all(1);
  }
  free(path);
}

/* --prompt-ids: the ids in q, separated by commas or spaces, into t. 0, or -1 with a message. */
static int prompt_ids(const char *q, int64_t vocab, int32_t *t, int *n) {
  while (*q) {
    if (*q == ',' || *q == ' ') {
      q++;
      continue;
    }
    char *end;
    errno = 0;
    long long v = strtoll(q, &end, 10);
    if (end == q || errno || v < 0 || v >= vocab || (*end && *end != ',' && *end != ' '))
      return rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__,
                        "--prompt-ids: '%.*s' is not a token id below the vocabulary's %lld", (int)strcspn(q, ", "), q,
                        (long long)vocab);
    t[(*n)++] = (int32_t)v, q = end;
  }
  return 0;
}

/* The prompt: --prompt through --tokenizer's tokenizer.json, or its bytes on a byte-level model;
 * --prompt-ids; or the first 8 tokens of d (the training data). */
static void open_prompt(const PprCli *c, const RtProg *p, const RtData *d, PprSample *g) {
  int rc = 0, n = 0;
  size_t cap = c->prompt ? strlen(c->prompt) : c->prompt_ids ? strlen(c->prompt_ids) / 2 + 1 : 8;
  int32_t *t = malloc((cap ? cap : 1) * sizeof *t);
  PPR_CHECK(t != NULL, "out of memory");
  if (c->prompt && g->tok && (ppr_gen_tokenizer_encodes(g->tok) || p->vocab != 256)) {
    int64_t m = 0;
    free(t);
    rc = ppr_gen_tokenizer_encode(g->tok, c->prompt, p->vocab, &t, &m, world.err, sizeof world.err);
    n = (int)m;
  } else if (c->prompt && p->vocab != 256)
    rc = rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__,
                    "--prompt: this model's vocabulary has %lld tokens, not the 256 bytes: give its tokenizer.json "
                    "with --tokenizer to encode the text, or the ids with --prompt-ids",
                    (long long)p->vocab);
  else if (c->prompt) {
    for (const unsigned char *q = (const unsigned char *)c->prompt; *q && !rc; q++)
      if (*q >= p->vocab)
        rc = rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__,
                        "--prompt: byte %u is not below the vocabulary's %lld (its bytes are the tokens; give ids "
                        "with --prompt-ids)",
                        *q, (long long)p->vocab);
      else t[n++] = *q;
  } else if (c->prompt_ids) rc = prompt_ids(c->prompt_ids, p->vocab, t, &n);
  else {
    n = (int)(p->seq < 8 ? p->seq : 8);
    rt_data_batch(d, 0, 0, 1, 1, n, t, NULL);
  }
  if (!rc && n == 0) rc = rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__, "the prompt is empty");
  ppr_settle(rc);
  g->prompt = t;
  g->nprompt = n;
}

void ppr_sample_open(const PprCli *c, const RtProg *p, const RtData *d, RtDevKind kind, PprSample *g) {
  if (c->tokenizer) ppr_settle(ppr_gen_tokenizer_open(c->tokenizer, p->vocab, &g->tok, world.err, sizeof world.err));
  open_prompt(c, p, d, g);
  if (!c->sample_every || g->via_train) return;
  open_program(c, p, g);
  ppr_settle(rt_dev_open(c->device, rt_comm_local_rank(world.comm), &g->dev, world.err, sizeof world.err));
  g->dev->tf32 = c->tf32;
  g->dev->onednn = c->onednn;
  g->dev->lt_epi = c->lt_epilogues;
  g->x = ppr_exec_open(g->p, c->dir, g->dev, kind);
  rt_exec_set_comm(g->x, world.comm);
}

void ppr_sample_print(const PprCli *c, const RtProg *p, RtExec *x, PprSample *g, const char *prefix, int count) {
  int32_t *tok = malloc((size_t)(g->nprompt + count) * sizeof *tok);
  PPR_CHECK(tok != NULL, "out of memory");
  memcpy(tok, g->prompt, (size_t)g->nprompt * sizeof *tok);
  PprSampler s = {.temperature = c->temperature, .top_k = c->top_k, .state = c->sample_seed};
  int rc = ppr_gen_extend(world.comm, x, p, &s, tok, g->nprompt, count, world.err, sizeof world.err);
  if (rc == RT_DEVICE_FAILED) ppr_die(world.err);
  ppr_settle(rc);
  if (world.me == 0) {
    fputs(prefix, stdout);
    ppr_gen_print(stdout, tok, g->nprompt + count, p->vocab, g->tok);
    fputc('\n', stdout);
    ppr_flush_stdout();
  }
  free(tok);
}

void ppr_sample_during(const PprCli *c, const RtProg *p, RtExec *x, PprSample *g, int64_t step) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "sample after step %lld: ", (long long)step);
  if (g->via_train) {
    ppr_sample_print(c, p, x, g, prefix, (int)c->sample_len);
    return;
  }
  int64_t most = 1;
  for (int i = 0; i < p->nparams; i++)
    if (p->params[i].numel > most) most = p->params[i].numel;
  float *buf = malloc((size_t)most * sizeof *buf);
  int rc = buf ? 0 : rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__, "out of memory");
  for (int i = 0; i < p->nparams && !rc; i++)
    rc = rt_exec_read_param(x, i, RT_REG_PARAMS, buf, world.err, sizeof world.err) ||
         rt_exec_write_param(g->x, i, buf, world.err, sizeof world.err);
  free(buf);
  if (rc) ppr_die(world.err);
  ppr_sample_print(c, g->p, g->x, g, prefix, (int)c->sample_len);
}

void ppr_sample_close(PprSample *g) {
  rt_exec_close(g->x);
  rt_dev_close(g->dev);
  rt_prog_free(g->p);
  ppr_gen_tokenizer_close(g->tok);
  free(g->prompt);
  *g = (PprSample){0};
}
