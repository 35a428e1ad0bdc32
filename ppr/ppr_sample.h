/* ppr_sample.h - the text a run prints (ppr_sample.c): --generate's tokens, and --sample-every's
 * samples during training through the generation programs (DIR/rankR.gen.prog), which get their
 * own device queue and arena and the training program's weights before each sample. */
#ifndef PPR_SAMPLE_H
#define PPR_SAMPLE_H
#include "ppr_cli.h"
#include "ppr_gen.h"
#include "rt_exec.h"

typedef struct {
  RtProg *p; /* the generation program beside a training one (--sample-every) */
  RtDev *dev;
  RtExec *x;
  int via_train; /* PPR_GENERATE_PROGRAM=train: the training program's own forward instead (the tests
                  * check that both give the same tokens) */
  PprTokenizer *tok;
  int32_t *prompt;
  int nprompt;
} PprSample;

/* PPR_GENERATE_PROGRAM: 1 for train, 0 for generate (the default); another value ends the rank. */
int ppr_sample_via_train(void);
/* A generation program's path exists: 0, or -1 with the message in world.err (flag: the option
 * that needs it). */
int ppr_sample_exists(const char *path, const char *flag);
/* The prompt (--prompt's bytes, --prompt-ids, or the first 8 tokens of d), the tokenizer and, for
 * --sample-every, the generation program of this rank on its own device (kind). Collective. */
void ppr_sample_open(const PprCli *c, const RtProg *p, const RtData *d, RtDevKind kind, PprSample *g);
/* count tokens after the prompt through x (p's); printed by rank 0 as "PREFIX<text>\n". Collective. */
void ppr_sample_print(const PprCli *c, const RtProg *p, RtExec *x, PprSample *g, const char *prefix, int count);
/* --sample-every after `step`: the training program's weights into the generation program, then a sample. */
void ppr_sample_during(const PprCli *c, const RtProg *p, RtExec *x, PprSample *g, int64_t step);
void ppr_sample_close(PprSample *g);

#endif /* PPR_SAMPLE_H */
