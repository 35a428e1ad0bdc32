/* pp_boundary.h — the pipeline's messages, one set of rules for ppc (its schedules and their
 * proof, the listing it writes) and ppr (the listing it reads, the messages it sends, its start-up
 * check): which boundary a message crosses, its direction, its peer and its tag. */
#ifndef PP_BOUNDARY_H
#define PP_BOUNDARY_H

/* The four boundaries of a stage, also the ops of a `comm` entry: fwd is the hidden state [S,B,H]
 * sent from a stage to the next, bwd its gradient sent back. ORDER: pp_boundary_name's table,
 * the listing's boundary lines; a send and its matching receive differ in the lowest bit. */
typedef enum PpBoundary { PP_RECV_FWD, PP_SEND_FWD, PP_RECV_BWD, PP_SEND_BWD, PP_NBND } PpBoundary;

static inline const char *pp_boundary_name(int k) {
  static const char *const names[PP_NBND] = {"recv_fwd", "send_fwd", "recv_bwd", "send_bwd"};
  return k >= 0 && k < PP_NBND ? names[k] : "?";
}
static inline int pp_boundary_is_send(PpBoundary k) { return k == PP_SEND_FWD || k == PP_SEND_BWD; }
static inline int pp_boundary_is_fwd(PpBoundary k) { return k == PP_RECV_FWD || k == PP_SEND_FWD; }
/* The peer is the next stage for a forward send and a backward receive, else the previous one. */
static inline int pp_boundary_to_next(PpBoundary k) { return k == PP_SEND_FWD || k == PP_RECV_BWD; }
/* What the peer posts for this message: a send's receive, a receive's send. */
static inline PpBoundary pp_boundary_match(PpBoundary k) { return (PpBoundary)(k ^ 1); }
/* The message tag: 2 (mb·links + link) for micro-batch mb's hidden state, + 1 for its gradient.
 * link: which of the links between the same two ranks the message crosses (with chunks of layers,
 * the chunk of the lower of the two virtual stages it joins; 0 of links = 1 without chunks, where
 * the tag is 2 mb or 2 mb + 1). */
static inline int pp_boundary_tag(PpBoundary k, int mb, int link, int links) {
  return 2 * (mb * links + link) + (pp_boundary_is_fwd(k) ? 0 : 1);
}
/* The link of a message across boundary k of virtual stage v (of a pipeline of pp ranks): the
 * lower of the two virtual stages it joins, divided by pp (the chunk that virtual stage is of its
 * rank's, numbered in the pipeline's order); 0 without chunks of layers (v < pp). */
static inline int pp_boundary_link(PpBoundary k, int v, int pp) { return (pp_boundary_to_next(k) ? v : v - 1) / pp; }

#endif /* PP_BOUNDARY_H */
