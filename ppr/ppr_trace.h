/* ppr_trace.h - --trace (ppr_trace.c): every rank's timeline gathered on rank 0 and written as Chrome
 * trace JSON (with the bubble fraction per rank and step), the last step drawn as SVG beside it, and
 * each rank's mean bubble on stdout. */
#ifndef PPR_TRACE_H
#define PPR_TRACE_H
#include "rt_exec.h"

/* walls/comps: this rank's wall and compute times (ms) of the nsteps steps it ran after step `first`
 * (the steps a --resume started from). Collective; on a failure every rank exits 1. */
void ppr_write_trace(const RtProg *p, RtExec *x, const char *path, const double *walls, const double *comps,
                     int64_t first, int64_t nsteps);

#endif /* PPR_TRACE_H */
