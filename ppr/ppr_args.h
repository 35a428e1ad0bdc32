/* ppr_args.h - what ppr's command line is made of besides its options (ppr_args.c): @FILE arguments
 * (a file of options, one a line), the options a --resume takes from its checkpoint, and the run's
 * identity, which a checkpoint and a --log carry. docs/ppr.md describes them. */
#ifndef PPR_ARGS_H
#define PPR_ARGS_H

#include <stddef.h>

/* argv with each argument "@FILE" replaced by FILE's options: a line "--name value" is the two
 * arguments "--name" and "value" (the rest of the line; in double quotes when it begins or ends with
 * spaces), "--name" or "--name=value" one argument, any other line one argument as it stands (DIR);
 * blank lines and lines whose first non-blank is '#' are skipped. *oargv (and the strings it points
 * to) live as long as the process; a value that begins with '@' is written "--name=@...". 0, or -1 with a message
 * naming the file and line. */
int ppr_args_expand(int argc, char **argv, int *oargc, char ***oargv, char *err, size_t errlen);

/* The options and the run identity that checkpoint ckpt's trainer_state.json recorded ("args": a list
 * of "--name" or "--name=value", "run_id"); none (*nargs 0, *run_id NULL) when the file is absent or
 * predates them, which the state check reports later; *step: its steps done (-1: unknown). 0, or -1
 * with a message naming the file. */
int ppr_args_saved(const char *ckpt, char ***args, int *nargs, char **run_id, long long *step, char *err,
                   size_t errlen);

/* A new run's identity: 16 hex digits from the time, the host and the process (malloc'ed). */
char *ppr_args_new_run_id(void);

#endif /* PPR_ARGS_H */
