/* pprun.c - the launcher: `pprun [launcher options] STAGES [ppr options]` starts
 * `mpirun -np N ppr STAGES ...` with N read from the stage directory, and makes a stop safe: the
 * terminal's Ctrl-C (or SIGTERM, SIGHUP, SIGUSR1 to pprun) becomes one stop request that every rank
 * sees (ppr --stop-file), so the ranks finish their step, save and exit 75; mpirun runs in its own
 * process group, so the terminal's signal reaches pprun alone, and gets the time a save needs
 * before it may kill a rank (odls_base_sigkill_timeout). A second Ctrl-C ends the job at once. */
#include "pp_stagedir.h"
#include "rt_prog.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage[] =
    "usage: pprun [launcher options] STAGES [ppr options]\n"
    "\n"
    "Starts mpirun -np N ppr STAGES [ppr options], N the rank count ppc compiled STAGES for.\n"
    "Ctrl-C (SIGINT), SIGTERM, SIGHUP or SIGUSR1 to pprun: every rank finishes its step, --save\n"
    "and --trace are written, and the exit status is 75; a second one ends the job at once.\n"
    "\n"
    "Launcher options:\n"
    "  -H HOSTS, --host HOSTS      mpirun's hosts (host:slots,...)\n"
    "  --hostfile FILE             mpirun's hostfile\n"
    "  --mpirun-arg ARG            one more argument for mpirun (repeat it for more)\n"
    "  --grace SECONDS             how long mpirun lets a rank end after mpirun itself is sent\n"
    "                              SIGTERM, before it kills it (default: 10 plus the checkpoint's\n"
    "                              size at 100 MB/s)\n"
    "  --dry-run                   print the command and exit\n"
    "  -h, --help                  this text\n"
    "  --version                   pprun's version\n"
    "\n"
    "Environment: MPIRUN (default mpirun), PPR (default the ppr beside pprun, else ppr).\n";

static volatile sig_atomic_t nstops; /* the stop signals pprun has had */
static volatile sig_atomic_t child;  /* mpirun's pid (its process group) */
static char stop_path[4200];         /* ppr's --stop-file */
static char exit_path[4200];         /* ppr's --exit-file */

_Noreturn static void fail(const char *fmt, const char *a, const char *b) {
  fputs("pprun: error: ", stderr);
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
  exit(1);
}

/* The first signal: the stop file (every rank looks for it before each step). The second: SIGKILL
 * to mpirun's group, at once (mpirun's own abort waits twice its kill timeout). Async-signal-safe. */
static void on_signal(int sig) {
  (void)sig;
  int n = ++nstops;
  if (n == 1) {
    int fd = open(stop_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
    static const char m[] = "pprun: stopping after the current step (again: end the job now, without saving)\n";
    ssize_t w = write(STDERR_FILENO, m, sizeof m - 1);
    (void)w;
  } else if (child > 0) kill(-child, SIGKILL); /* the ranks follow their launcher (PR_SET_PDEATHSIG) */
}

/* The ranks and the bytes --save writes (the owned params' values and two AdamW moments, f32). */
static int read_stages(const char *dir, int64_t *bytes) {
  char err[4096], path[4400];
  int tp, pp, dp, cp;
  snprintf(path, sizeof path, "%s/" PP_PROG_FMT, dir, 0);
  if (rt_prog_read_mesh(path, &tp, &pp, &dp, &cp, err, sizeof err)) fail("%s%s", err, "");
  int n = tp * pp * dp * cp;
  *bytes = 0;
  for (int r = 0; r < n; r++) {
    RtProg *p = NULL;
    snprintf(path, sizeof path, "%s/" PP_PROG_FMT, dir, r);
    if (rt_prog_load(path, &p, err, sizeof err)) fail("%s%s", err, "");
    for (int i = 0; i < p->nparams; i++)
      if (p->params[i].owned && p->dp_rank == 0 && p->cp_rank == 0) *bytes += p->params[i].numel * 4 * 3;
    rt_prog_free(p);
  }
  return n;
}

/* The ppr beside this pprun (argv0's folder), else ppr on PATH. */
static const char *ppr_path(const char *argv0, char *buf, size_t n) {
  const char *env = getenv("PPR");
  if (env && *env) return env;
  const char *slash = strrchr(argv0, '/');
  if (slash && snprintf(buf, n, "%.*s/ppr", (int)(slash - argv0), argv0) < (int)n && access(buf, X_OK) == 0) return buf;
  return "ppr";
}

typedef struct {
  const char *av[256];
  int n;
} Args;

static void add(Args *a, const char *s) {
  if (a->n + 2 >= (int)(sizeof a->av / sizeof a->av[0])) fail("%s%s", "too many arguments", "");
  a->av[a->n++] = s;
  a->av[a->n] = NULL;
}

/* mpirun's exit status as pprun's: its code, or 128 + the signal that ended it. */
static int wait_child(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) fail("waitpid: %s%s", strerror(errno), "");
  return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
}

/* The job's status: mpirun's when it failed (an abort: a rank's own failure, a signal), else what
 * rank 0 wrote to --exit-file (mpirun does not pass a rank's status on without aborting). */
static int exit_code(int mpirun_code, const char *dir) {
  if (mpirun_code) return mpirun_code;
  FILE *f = fopen(exit_path, "r");
  int code = -1;
  if (f && fscanf(f, "%d", &code) != 1) code = -1;
  if (f) fclose(f);
  if (code >= 0 && code < 256) return code;
  fprintf(stderr,
          "pprun: error: rank 0 left no exit status in %s (are the hosts sharing %s? set TMPDIR to a "
          "folder they share)\n",
          exit_path, dir);
  return 1;
}

/* The stop signals, caught. */
static void catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  static const int sigs[4] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
  for (int k = 0; k < 4; k++) sigaction(sigs[k], &sa, NULL);
}

int main(int argc, char **argv) {
  Args m = {0};
  char npbuf[16], gbuf[32], pprbuf[4096];
  const char *mpirun = getenv("MPIRUN") && *getenv("MPIRUN") ? getenv("MPIRUN") : "mpirun";
  double grace = -1;
  int dry = 0, hosts = 0, i = 1;
  Args extra = {0};
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(o, "-h") || !strcmp(o, "--help")) return fputs(usage, stdout), 0;
    else if (!strcmp(o, "--version")) return printf("pprun %s\n", RT_PPR_VERSION), 0;
    else if (!strcmp(o, "--dry-run")) dry = 1;
    else if (!v) fail("%s needs a value%s", o, "");
    else if (!strcmp(o, "-H") || !strcmp(o, "--host") || !strcmp(o, "--hostfile")) {
      add(&extra, o), add(&extra, v), i++, hosts = 1;
    } else if (!strcmp(o, "--mpirun-arg")) add(&extra, v), i++;
    else if (!strcmp(o, "--grace")) {
      char *end;
      grace = strtod(v, &end);
      if (*end || !*v || grace < 1 || grace > 1e7) fail("--grace: expected seconds from 1, found '%s'%s", v, "");
      i++;
    } else fail("unknown launcher option '%s' (ppr's options come after STAGES)%s", o, "");
  }
  if (i >= argc) fail("no STAGES directory%s%s", "", "\nusage: pprun [launcher options] STAGES [ppr options]");
  const char *stages = argv[i++];
  int64_t bytes = 0;
  int n = read_stages(stages, &bytes);
  if (grace < 0) grace = 10 + (double)bytes / 100e6;
  snprintf(npbuf, sizeof npbuf, "%d", n);
  snprintf(gbuf, sizeof gbuf, "%.0f", grace);
  add(&m, mpirun), add(&m, "-np"), add(&m, npbuf);
  if (geteuid() == 0) add(&m, "--allow-run-as-root");
  if (!hosts) add(&m, "--oversubscribe"); /* one machine: as many ranks as the stages need */
  add(&m, "--mca"), add(&m, "odls_base_sigkill_timeout"), add(&m, gbuf);
  /* a rank's exit 75 (stopped) is not a failure to abort the job over: mpirun's abort waits out
   * the kill timeout for ranks that are ending on their own */
  add(&m, "--mca"), add(&m, "orte_abort_on_non_zero_status"), add(&m, "0");
  for (int k = 0; k < extra.n; k++) add(&m, extra.av[k]);
  add(&m, ppr_path(argv[0], pprbuf, sizeof pprbuf)), add(&m, stages);
  for (; i < argc; i++) add(&m, argv[i]);
  const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/pprun-XXXXXX", tmp);
  if (!dry && !mkdtemp(dir)) fail("%s: cannot create a folder: %s", dir, strerror(errno));
  snprintf(stop_path, sizeof stop_path, "%s/stop", dir);
  snprintf(exit_path, sizeof exit_path, "%s/exit", dir);
  add(&m, "--stop-file"), add(&m, stop_path), add(&m, "--exit-file"), add(&m, exit_path);
  if (dry) {
    for (int k = 0; k < m.n; k++) printf("%s%s", k ? " " : "", m.av[k]);
    printf("\n");
    return 0;
  }
  catch_signals();
  pid_t pid = fork();
  if (pid < 0) fail("fork: %s%s", strerror(errno), "");
  if (pid == 0) { /* mpirun: its own process group (the terminal's signals are pprun's), no stdin; a
                   * stop when pprun dies (SIGTERM: mpirun passes it to the ranks) */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1) _exit(1);
    int fd = open("/dev/null", O_RDONLY);
    if (fd >= 0) dup2(fd, STDIN_FILENO);
    signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL), signal(SIGHUP, SIG_DFL), signal(SIGUSR1, SIG_DFL);
    execvp(m.av[0], (char *const *)m.av);
    fprintf(stderr, "pprun: error: %s: cannot run: %s\n", m.av[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid); /* also here: whichever of the two runs first */
  child = pid;
  int code = exit_code(wait_child(pid), dir);
  unlink(stop_path);
  unlink(exit_path);
  rmdir(dir);
  return code;
}
