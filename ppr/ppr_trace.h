/* ppr_trace.h - --trace (ppr_trace.c): every rank's timeline gathered on rank 0 and written as Chrome
 * trace JSON, the last step drawn as SVG beside it, and the bubble fraction per rank and step. */
#ifndef PPR_TRACE_H
#define PPR_TRACE_H
#include "rt_exec.h"

/* walls/comps: this rank's per-step wall and compute times (ms), nsteps of them. Collective; on a
 * failure every rank exits 1. */
void ppr_write_trace(const RtProg *p, RtExec *x, const char *path, const double *walls, const double *comps,
                     int64_t nsteps);

#endif /* PPR_TRACE_H */
