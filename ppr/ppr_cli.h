/* ppr_cli.h - ppr's command line (ppr_cli.c): `ppr DIR [options]`, parsed and checked. */
#ifndef PPR_CLI_H
#define PPR_CLI_H

#include <stdint.h>

#include "rt_lr.h"
#include "rt_exec.h"

typedef struct {
  const char *dir, *init, *data, *save_grads, *save, *log, *trace, *device;
  const char *resume; /* --resume CKPT: the weights, the AdamW moments and the step of a --save */
  uint64_t seed;
  double timeout;
  int have_seed, quiet, tf32, onednn, lt_epilogues;
  int save_tied_head;       /* --save-tied-head: lm_head.weight written too */
  const char *model_name;   /* --model-name: a --save folder's config.json _name_or_path */
  uint64_t save_shard_size; /* --save-shard-size: a checkpoint folder's shard bytes (0: the default, 5 GB) */
  int64_t steps;
  int64_t save_every, keep; /* --save-every N: --save X holds X/step-NNNNNN every N steps; --keep K: the last K */
  RtHyper h;                /* h.lr: the peak learning rate (--lr) */
  RtLr sched;               /* --lr-schedule, --warmup, --lr-min, --decay-steps (checked, the defaults filled in) */
  /* validation: --val-data FILE or --val-frac F (the tail of the training data, then never trained on) */
  const char *val_data;
  double val_frac;     /* 0: none */
  int64_t eval_every;  /* --eval-every: 0 = after the last step only */
  int64_t val_batches; /* --val-batches: micro-batches per evaluation (default 8) */
  double peak_flops;   /* --peak-flops: per rank, FLOP/s; 0: no MFU */
  /* text from the model (the generation programs of ppc --generate; ppr_gen.c) */
  int64_t generate;        /* --generate N: N tokens from the weights, no training; 0: none */
  int64_t sample_every;    /* --sample-every N: a sample after every N steps and the last; 0: none */
  int64_t sample_len;      /* --sample-len: tokens per --sample-every sample (default 64) */
  const char *prompt;      /* --prompt TEXT: its bytes are the tokens; NULL: none */
  const char *prompt_ids;  /* --prompt-ids LIST: token ids; NULL: none */
  const char *tokenizer;   /* --tokenizer FILE: an llm.c tokenizer file, to write tokens as text */
  double temperature;      /* --temperature: 0 greedy (default 1) */
  int64_t top_k;           /* --top-k: 0 the whole vocabulary */
  uint64_t sample_seed;    /* --sample-seed (default 1) */
  const char *verify;      /* --verify CKPT: check a checkpoint's checksums, run nothing */
  const char *stop_file;   /* --stop-file PATH: stop after the step in which PATH appears */
  const char *exit_file;   /* --exit-file PATH: rank 0 writes the exit status there at the end */
  const char *tensorboard; /* --tensorboard DIR: the log's scalars as TensorBoard event files */
  int64_t log_every;       /* --log-every N: a step line every N steps (and the first, the last, evaluations) */
  /* the run: its identity (a new one, or --resume's), its options as a resume takes them ("--name=value",
   * NULL-terminated), those this command line gave (a bit per option: ppr_cli_given), and, under --resume,
   * what this command line changed (", --lr 2e-4 (was 1e-3)"; NULL: nothing) */
  const char *run_id;
  char **argv; /* the arguments (after @FILE and --resume's), which the strings above point into */
  char **args;
  uint64_t given;
  const char *resume_notes;
  long long resume_step; /* --resume: the checkpoint's steps done, as its trainer_state.json says (-1: unknown) */
} PprCli;

/* Parses argv into c, with the defaults of the options not given, and checks the options against
 * each other. --help and --version print on stdout and exit 0; a bad command line prints
 * "ppr: error: ..." and the usage line on stderr and exits 1. */
void ppr_cli_parse(int argc, char **argv, PprCli *c);

/* 1 when flag ("--lr") was on the command line (or in an @FILE of it), not taken from --resume's
 * checkpoint. */
int ppr_cli_given(const PprCli *c, const char *flag);

/* The options every rank must share, as text: a line "--NAME VALUE" each, in one order (values
 * printed exactly). malloc'ed; NULL when out of memory. */
char *ppr_cli_agreed(const PprCli *c);

#endif /* PPR_CLI_H */
