/* ppr_stop.h - how a run is stopped (ppr_stop.c): SIGTERM, SIGINT or SIGUSR1, or --stop-file, make
 * every rank finish its step, save, and exit PPR_EXIT_STOPPED; a second signal ends the rank at
 * once; a rank whose launcher dies ends too, without saving. */
#ifndef PPR_STOP_H
#define PPR_STOP_H

#define PPR_STOP_BY_FILE 1000 /* the cause rt_comm_request_stop records for --stop-file (no signal's number) */

/* The handlers, unless the signal was ignored when ppr started (a background job of a script);
 * SIGXFSZ ignored, so that a write past the file size limit is an error (EFBIG) naming the file. */
void ppr_stop_catch(void);
/* Under an MPI launcher: this rank ends when the launcher does (PR_SET_PDEATHSIG). */
void ppr_stop_with_launcher(void);
/* --stop-file: when path exists, this rank asks to stop; the ranks agree with the next step's sum. */
void ppr_stop_poll(const char *path);
/* 1 once a signal asked to stop: stdout and stderr may drop what does not fit (a launcher that
 * aborts stops reading them), and a write that would wait is no error. */
int ppr_stop_lossy_output(void);
/* What asked to stop, for messages: "SIGTERM", "SIGINT", "SIGUSR1" or "--stop-file". */
const char *ppr_stop_cause(int sig);

#endif /* PPR_STOP_H */
