/* ppr_tb.h - --tensorboard DIR (ppr_tb.c): the run's scalars as TensorBoard event files (TFRecord
 * framing of Event protocol buffers), drawn from --log: at each start the run's file is written
 * again from the log (so a resume's dropped steps go from it too), then each step is appended.
 * Rank 0 alone calls these. docs/ppr.md describes the tags. */
#ifndef PPR_TB_H
#define PPR_TB_H

#include <stddef.h>
#include <stdint.h>

#include "ppr_cli.h"

typedef struct PprTb PprTb;

/* One step's scalars (NAN: absent). */
typedef struct {
  int64_t step;
  double wall_time; /* seconds since the epoch */
  double loss, val_loss, lr, grad_norm, tokens_per_s, mfu;
} PprTbScalars;

/* Opens c->tensorboard for run c->run_id: its event file written from c->log's step records (the
 * log opened for this start already), then kept open for ppr_tb_step. 0, or -1 with a message. */
int ppr_tb_open(const PprCli *c, PprTb **tb, char *err, size_t errlen);
/* Appends one step's scalars (flushed). 0, or -1 with a message naming the file. */
int ppr_tb_step(PprTb *tb, const PprTbScalars *s, char *err, size_t errlen);
void ppr_tb_close(PprTb *tb);

#endif /* PPR_TB_H */
