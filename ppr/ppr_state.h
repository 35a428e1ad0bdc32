/* ppr_state.h - the training state --save writes beside the weights and --resume reads back (ppr_state.c):
 * where its files go, trainer_state.json written and checked. docs/ppr.md describes them. */
#ifndef PPR_STATE_H
#define PPR_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "ppr_cli.h"
#include "rt_prog.h"

/* What identifies the training data: its name (the file's base name, or "the built-in text") and its
 * size in bytes; with the validation split. */
typedef struct {
  const char *name;
  int64_t bytes;
} PprStateData;

/* The files of checkpoint ckpt (a --save or --resume path): a folder's CKPT/trainer/optimizer.safetensors
 * and CKPT/trainer/trainer_state.json (CKPT/optimizer.safetensors, CKPT/trainer_state.json where an older
 * ppr wrote them there); for CKPT = W.safetensors, W.optimizer.safetensors and W.trainer_state.json
 * beside it. malloc'ed; NULL when out of memory. */
char *ppr_state_opt_path(const char *ckpt);
char *ppr_state_json_path(const char *ckpt);
/* The identity of --data (or the built-in text when c->data is NULL): 0, or -1 with a message. */
int ppr_state_data(const PprCli *c, PprStateData *d, char *err, size_t errlen);
/* trainer_state.json's text after `step` steps (malloc'ed; NULL when out of memory). */
char *ppr_state_json(const PprCli *c, const RtProg *p, const PprStateData *d, int64_t step);
/* Reads path (a trainer_state.json) and checks it against this run: the model, its params' names and
 * shapes, the optimizer settings, the lr schedule, the data and the batch must be the same, and its
 * step at most --steps. *step: the steps it has done. 0, or -1 with a message naming the file and
 * what differs. Nothing is changed. */
int ppr_state_check(const char *path, const PprCli *c, const RtProg *p, const PprStateData *d, int64_t *step, char *err,
                    size_t errlen);
/* Writes text to path through "<path>.tmp", fsync'ed, renamed over path. 0, or -1 with a message. */
int ppr_state_write(const char *path, const char *text, char *err, size_t errlen);

#endif /* PPR_STATE_H */
