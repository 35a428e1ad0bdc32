/* pp_sim.h — the proof that a pipeline's messages all complete, one simulation for ppc (every
 * stage of a schedule it compiles) and ppr (every rank's listing, on rank 0 at start-up). */
#ifndef PP_SIM_H
#define PP_SIM_H

/* One message a rank posts: to or from `peer` (-1, or out of range: no such rank), with `tag`. */
typedef struct PpSimOp {
  int peer, tag, send;
} PpSimOp;

/* Operations posted together and waited for together: one, or a send and a receive. */
typedef struct PpSimBatch {
  PpSimOp op[2];
  int nops;
} PpSimBatch;

typedef struct PpSimRank {
  const PpSimBatch *b; /* the rank's batches in program order (compute between them never blocks) */
  int n;
} PpSimRank;

/* Every rank's batches run against each other as rendezvous: an operation completes when its peer
 * has the matching one (same tag, the other direction, this rank as its peer) in the batch it is
 * at; a batch completes when all of its operations have, and its rank moves on. Returns 0 when
 * every rank gets past its last batch; else 1, with at[r] the batch rank r is blocked in (n for a
 * rank that finished) and done[r][k] whether operation k of it completed. at and done: nranks
 * entries each. */
int pp_sim_run(const PpSimRank *rank, int nranks, int *at, unsigned char (*done)[2]);
/* The same with sends that never wait (ppr's MPI transport leaves them in flight): a send completes
 * when posted, a receive once its peer has posted the matching send, at that batch or before;
 * every send must be received by the end. Returns 0, or 1 with at and done as above. */
int pp_sim_run_eager(const PpSimRank *rank, int nranks, int *at, unsigned char (*done)[2]);

#endif /* PP_SIM_H */
