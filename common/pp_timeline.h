/* pp_timeline.h — a pipeline timeline drawn as SVG, one row per rank: shared by ppc (the timeline
 * its cost model predicts, --emit svg) and ppr (the one --trace measures), so that the two pictures
 * of a schedule are drawn alike and can be laid side by side. */
#ifndef PP_TIMELINE_H
#define PP_TIMELINE_H

#include <stdio.h>

/* One piece of a rank's work: [t0, t1) in the timeline's unit. kind: 'F' forward, 'B' backward
 * (activation gradients, or the whole backward when it is not split), 'W' weight gradients,
 * 'O' the optimizer step; 'f', 'b', 'w' the same for a rank's odd chunks of layers (drawn
 * lighter); mb: the micro-batch, -1 for none. */
typedef struct PpSpan {
  double t0, t1;
  char kind;
  int mb;
} PpSpan;

typedef struct PpLane {
  const PpSpan *span;
  int n;
} PpLane;

/* Writes the SVG document: a title, one lane per rank over [0, total], coloured spans with their
 * micro-batch numbers, the idle time left white, an axis in unit. */
void pp_timeline_svg(FILE *f, const char *title, const char *subtitle, const PpLane *lane, int nlanes, double total,
                     const char *unit);

#endif /* PP_TIMELINE_H */
