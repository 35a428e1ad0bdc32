/* ppr_log.h - --log FILE.jsonl (ppr_log.c): one JSON object per step, appended across --resume, a
 * line {"start": STEP, "run": ID, ...} at each start, and the run's curves drawn as FILE.svg. Rank 0
 * alone calls these. docs/ppr.md describes the file. */
#ifndef PPR_LOG_H
#define PPR_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ppr_cli.h"

/* Before anything takes time: c->log may be written by this run. A new run needs a new or empty file;
 * a --resume the log of its own run (c->run_id). 0, or -1 with a message naming the file and why. */
int ppr_log_check(const PprCli *c, char *err, size_t errlen);

/* Opens c->log for appending after step `start` (the steps of an earlier start beyond it are
 * dropped: a checkpoint older than the log's last step) and writes the start line. *dropped: how many
 * step lines went. 0, or -1 with a message. */
int ppr_log_open(const PprCli *c, const char *model, int64_t start, int64_t tokens_per_step, FILE **f, int64_t *dropped,
                 char *err, size_t errlen);

/* Calls fn for each step record of the log, in order, with the wall time of the step's end (its start
 * line's unix_time + elapsed_s; seconds since the epoch). 0; -1 with a message when the log cannot be
 * read; fn's -1 as it is, without one. */
int ppr_log_each(const char *log, int (*fn)(void *ctx, const struct json_t *rec, double wall), void *ctx, char *err,
                 size_t errlen);

/* The log's path with ".jsonl" (or its last extension) replaced by ".svg" (malloc'ed; NULL: out of
 * memory). */
char *ppr_log_svg_path(const char *log);

/* Draws the log's training and validation loss against tokens, the lr on a second axis and each
 * resume as a line, into ppr_log_svg_path(log). 0, or -1 with a message. */
int ppr_log_plot(const char *log, char *err, size_t errlen);

#endif /* PPR_LOG_H */
