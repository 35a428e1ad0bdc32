/* ppr_save.h - what ppr writes of a model (ppr_save.c): the output paths checked before the first
 * step, checkpoints (--save, --save-every, --keep) and the gradients of one step (--save-grads),
 * each gathered from the ranks that own the params and written by rank 0. */
#ifndef PPR_SAVE_H
#define PPR_SAVE_H
#include "ppr_cli.h"
#include "ppr_state.h"
#include "rt_exec.h"

/* Rank 0 checks that it can write every output the options name (--save and its training state,
 * --save-grads, --log, --trace), changing nothing, and that --stop-file is not there yet. Collective: on a failure
 * every rank exits 1. */
void ppr_check_outputs(const PprCli *c);

/* --save: the weights and the training state after `done` steps, to --save (with --save-every to its
 * folder step-NNNNNN, then --keep applied). Collective; on a failure every rank exits 1. */
void ppr_save_checkpoint(const PprCli *c, const RtProg *p, RtExec *x, int64_t done, const PprStateData *data_id);

/* --save-grads: rt_exec_step's hook, which writes the gradients of the first step it sees. */
typedef struct {
  const RtProg *p;
  const char *path;
  int done;
} PprGradSave;
int ppr_save_grads_hook(void *ctx, RtExec *x, char *err, size_t errlen);

/* --verify CKPT: a checkpoint (a file, an index, a folder) opened as --init opens it, every tensor's
 * checksum checked, and its training state beside it (the moments' checksums, trainer_state.json's
 * JSON). Prints what it checked; 0, or 1 after an error naming the file and the tensor. */
int ppr_verify(const char *ckpt);

#endif /* PPR_SAVE_H */
