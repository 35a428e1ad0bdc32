/* ppr_stop.c - stop requests (ppr_stop.h). A handler only records the request (rt_comm_request_stop);
 * the ranks agree on it with the step's loss sum (rt_comm_stopping), so all stop after one step. */
#include "ppr_stop.h"
#include "ppr_world.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

static const int stop_sigs[3] = {SIGTERM, SIGINT, SIGUSR1};
static char stop_note[3][160]; /* what rank 0's handler writes (async-signal-safe: prepared) */

const char *ppr_stop_cause(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGTERM ? "SIGTERM" : "--stop-file";
}

static int launched; /* an MPI launcher started this rank: its stdout is the launcher's (a pty of mpirun's) */

/* A launcher that aborts the job stops reading its ranks' output (Open MPI's mpirun does, on SIGTERM
 * or Ctrl-C, with a pseudo-terminal per rank): a rank blocked writing a step line would never reach
 * its save. After a stop request, writes to stdout and stderr do not wait when they go to a pipe, a
 * socket or the launcher's terminal; a line that does not fit is dropped (ppr_flush_stdout). The
 * user's own terminal keeps blocking writes (its flags are the shell's too). */
static void unblock_output(void) {
  for (int fd = STDOUT_FILENO; fd <= STDERR_FILENO; fd++) {
    struct stat st;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && fstat(fd, &st) == 0 &&
        (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || (S_ISCHR(st.st_mode) && launched)))
      fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  }
}

static void on_stop_signal(int sig) {
  if (rt_comm_stop_requested()) { /* the second: end now, as the signal would have */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  rt_comm_request_stop(sig);
  unblock_output();
  if (world.me != 0) return; /* once for the job: a launcher passes its signal to every rank */
  for (int k = 0; k < 3; k++)
    if (stop_sigs[k] == sig) {
      ssize_t w = write(STDERR_FILENO, stop_note[k], strlen(stop_note[k]));
      (void)w;
    }
}

/* Open MPI's and the PMI launchers' variables: without them ppr's parent is a shell. */
static int under_launcher(void) { return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK"); }

void ppr_stop_catch(void) {
  launched = under_launcher();
  for (int k = 0; k < 3; k++)
    snprintf(stop_note[k], sizeof stop_note[k],
             "ppr: rank %d: %s: stopping after this step (a second signal ends the rank now, without saving)\n",
             world.me, ppr_stop_cause(stop_sigs[k]));
  struct sigaction sa, was;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int k = 0; k < 3; k++) {
    PPR_CHECK(sigaction(stop_sigs[k], NULL, &was) == 0, "sigaction: %s", strerror(errno));
    if (was.sa_handler == SIG_IGN) continue; /* ignored when ppr started: kept so */
    PPR_CHECK(sigaction(stop_sigs[k], &sa, NULL) == 0, "sigaction: %s", strerror(errno));
  }
  signal(SIGXFSZ, SIG_IGN);
}

void ppr_stop_with_launcher(void) {
  if (!under_launcher()) return; /* a shell's child: the shell may leave it running (nohup) */
  pid_t parent = getppid();
  PPR_CHECK(prctl(PR_SET_PDEATHSIG, SIGKILL) == 0, "prctl(PR_SET_PDEATHSIG): %s", strerror(errno));
  if (getppid() != parent) _exit(1); /* the launcher died before the request took */
}

void ppr_stop_poll(const char *path) {
  if (path && !rt_comm_stop_requested() && access(path, F_OK) == 0) rt_comm_request_stop(PPR_STOP_BY_FILE);
}

int ppr_stop_lossy_output(void) { return rt_comm_stop_requested() > 0; }
