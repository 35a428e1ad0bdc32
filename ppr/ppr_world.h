/* ppr_world.h - what ppr's parts share (ppr_world.c): this rank in the world, its device, the message
 * buffer, and the ways a collective step ends: settled by all ranks, failed on one, or left together. */
#ifndef PPR_WORLD_H
#define PPR_WORLD_H
#include "rt_comm.h"
#include "rt_dev.h"
#include "rt_exec.h"
#include "rt_prog.h"

#define PPR_ERRLEN       65536
#define PPR_EXIT_STOPPED 75 /* a stop request ended the run at a step boundary (sysexits' EX_TEMPFAIL) */

typedef struct {
  RtComm *comm; /* MPI under mpirun, else this process alone */
  RtDev *dev;   /* this rank's device (--device); closed by ppr_exit_all */
  int me, nranks;
  const char *exit_file; /* --exit-file: rank 0 writes the exit status there (ppr_exit) */
  char err[PPR_ERRLEN];  /* the message of the last failure */
} PprWorld;

extern PprWorld world;

/* msg on stderr, every line prefixed "ppr: error: ". */
void ppr_print_err(const char *msg);
/* Every rank ends here together (a decision all of them made): the device closed, MPI finalised, exit. */
_Noreturn void ppr_exit_all(int code);
/* The run's exit status written to --exit-file (rank 0), then MPI finalised; code is returned. */
int ppr_exit(int code);
/* A failure of this rank alone: the message, then the whole job ends (MPI_Abort). */
_Noreturn void ppr_die(const char *msg);
/* A step every rank takes: rc is this rank's result, its message in world.err. When any rank failed,
 * rank 0 prints each distinct message once (in rank order) and every rank exits 1. */
void ppr_settle(int rc);
/* A verdict rank 0 reached alone (rc, its message in world.err there), learnt by every rank: on a
 * failure rank 0 prints it and every rank exits 1. */
void ppr_settle_root(int rc);
/* text (lines "NAME VALUE": ppr_cli_agreed's options, the listing's compile id) compared across the
 * ranks in one gather: a line that differs from rank 0's is an error "WHAT: NAME is 'A' on rank 0
 * but 'B' on rank R (HINT)", and every rank exits 1. */
void ppr_agree(const char *text, const char *what, const char *hint);
/* stdout flushed; a failed write ends this rank with a message. */
void ppr_flush_stdout(void);

/* DIR/rankR.prog, or with gen DIR/rankR.gen.prog (pp_stagedir.h); malloc'ed. */
char *ppr_prog_path(const char *dir, int r, int gen);
/* rt_exec_open on every rank, settled. */
RtExec *ppr_exec_open(const RtProg *p, const char *dir, RtDev *dev, RtDevKind kind);

/* cond, or this rank ends with a message naming the source line (ppr_die). */
#define PPR_CHECK(cond, ...)                                                                                           \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__, __VA_ARGS__);                                        \
      ppr_die(world.err);                                                                                              \
    }                                                                                                                  \
  } while (0)

#endif /* PPR_WORLD_H */
