/* rt_prof.h - the executor's instruments (rt_prof.c): PPR_PROFILE's per-instruction profile and --trace's timeline. */
#ifndef RT_PROF_H
#define RT_PROF_H

#include <stdint.h>

#include "rt_exec.h"

/*
 * The executor (rt_exec.c) reports what it timed; this file keeps the numbers and prints them.
 * Times are rt_dev_time_ms values: the device's queued work has run when they are taken.
 *
 * PPR_PROFILE=1 (any value but empty or 0): every instruction and schedule entry of every step but
 * the first (warm-up) is timed, by kind, gemm shape and kernel, and a per-step summary is printed
 * on stderr when the executor is closed. --trace: the timeline of every step (RtEvent).
 */
typedef struct RtProf RtProf;

RtProf *rt_prof_new(const RtProg *p, const char *device); /* NULL when out of memory */
void rt_prof_free(RtProf *f);                             /* prints the profile first when profiling */
int rt_prof_profiling(const RtProf *f);

/* the profile (only while profiling) */
void rt_prof_instr(RtProf *f, int chunk, int blk, const RtInstr *in, double ms); /* chunk's block blk */
void rt_prof_zero_grads(RtProf *f, double ms);
void rt_prof_step(RtProf *f, double ms);

/* the trace */
void rt_trace_start(RtProf *f, double t0_ms);
int rt_trace_on(const RtProf *f);
/* Record [t0, t1) as an event of the trace (nothing when not tracing). */
void rt_trace_add(RtProf *f, int kind, int64_t step, double t0, double t1, const char *fmt, ...) RT_FMT(6, 7);
/* An F, B or W (kind RT_EV_F, _B, _W) of chunk's micro-batch mb: named "F 3" (chunk 0), "F:1 3". */
void rt_trace_unit(RtProf *f, int kind, int64_t step, double t0, double t1, int chunk, int mb);
const RtEvent *rt_trace_events(const RtProf *f, int64_t *n, int *oom);

#endif /* RT_PROF_H */
