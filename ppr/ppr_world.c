/* ppr_world.c - this rank in the world, and how failures end the job (ppr_world.h). */
#include "ppr_world.h"
#include "pp_stagedir.h"
#include "ppr_state.h"
#include "ppr_stop.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

PprWorld world;

void ppr_print_err(const char *msg) {
  const char *p = msg;
  do {
    const char *nl = strchr(p, '\n');
    int n = nl ? (int)(nl - p) : (int)strlen(p);
    fprintf(stderr, "ppr: error: %.*s\n", n, p);
    p = nl ? nl + 1 : NULL;
  } while (p && *p);
  fflush(stderr);
}

/* --exit-file: code and a newline, through ppr_state_write's temporary file renamed over it (a
 * reader sees all or nothing); a failure is reported, the code kept. */
static void write_exit_file(int code) {
  if (!world.exit_file || world.me != 0) return;
  char text[16], e[4400];
  snprintf(text, sizeof text, "%d\n", code);
  if (ppr_state_write(world.exit_file, text, e, sizeof e)) fprintf(stderr, "ppr: error: --exit-file: %s\n", e);
}

int ppr_exit(int code) {
  fflush(stdout);
  fflush(stderr);
  write_exit_file(code);
  rt_comm_finalize(world.comm);
  return code;
}

_Noreturn void ppr_exit_all(int code) {
  fflush(stdout);
  fflush(stderr);
  rt_dev_close(world.dev); /* its queue drained and its objects released before the libraries unload */
  world.dev = NULL;
  exit(ppr_exit(code));
}

_Noreturn void ppr_die(const char *msg) {
  ppr_print_err(msg);
  if (world.nranks > 1) rt_comm_abort(world.comm, 1);
  ppr_exit_all(1);
}

/* Rank 0 prints each distinct message of all[] (sizes[r] bytes from rank r, 0: none) once. */
static void print_distinct(const unsigned char *all, const size_t *sizes) {
  size_t at = 0;
  for (int r = 0; r < world.nranks; r++) {
    const char *m = (const char *)all + at;
    int seen = sizes[r] == 0;
    for (size_t q = 0, k = 0; k < (size_t)r && !seen; q += sizes[k], k++)
      seen = sizes[k] == sizes[r] && !memcmp(all + q, m, sizes[r]);
    if (!seen) ppr_print_err(m);
    at += sizes[r];
  }
}

void ppr_settle(int rc) {
  if (world.nranks == 1) {
    if (rc) ppr_die(world.err);
    return;
  }
  if (rt_comm_all_ok(world.comm, rc == 0)) return;
  size_t n = rc ? strlen(world.err) + 1 : 0;
  unsigned char *all = NULL;
  size_t *sizes = calloc((size_t)world.nranks, sizeof *sizes);
  char gerr[256];
  if (!sizes || rt_comm_gather(world.comm, world.err, n, &all, sizes, gerr, sizeof gerr)) {
    if (world.me == 0) ppr_print_err(rc ? world.err : "a rank failed (no memory for its message)");
    ppr_exit_all(1);
  }
  if (world.me == 0) print_distinct(all, sizes);
  free(all);
  free(sizes);
  ppr_exit_all(1);
}

void ppr_settle_root(int rc) {
  int32_t verdict = world.me == 0 ? rc : 0;
  rt_comm_bcast(world.comm, &verdict, sizeof verdict, 0);
  if (!verdict) return;
  if (world.me == 0) ppr_print_err(world.err);
  ppr_exit_all(1);
}

void ppr_flush_stdout(void) {
  if (fflush(stdout) == 0) return;
  if ((errno == EAGAIN || errno == EWOULDBLOCK) && ppr_stop_lossy_output()) { /* ppr_stop.c: dropped */
    clearerr(stdout);
    return;
  }
  PPR_CHECK(0, "stdout: write failed: %s", strerror(errno));
}

char *ppr_prog_path(const char *dir, int r, int gen) {
  size_t dl = strlen(dir);
  char *path = malloc(dl + 48);
  PPR_CHECK(path != NULL, "out of memory");
  int n = sprintf(path, "%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/");
  sprintf(path + n, gen ? PP_GEN_PROG_FMT : PP_PROG_FMT, r);
  return path;
}

/* An OpenCL driver's kernel cache is shared by a host's processes, and PoCL's fails a program that
 * two of them build at once (CL_BUILD_PROGRAM_FAILURE with an empty log; pocl/pocl#1480, #430): on
 * opencl a host's ranks load one after another, local rank 0 first, each later one finding what
 * the earlier built in the cache. */
RtExec *ppr_exec_open(const RtProg *p, const char *dir, RtDev *dev, RtDevKind kind) {
  RtExec *x = NULL;
  if (kind != RT_DEV_OPENCL) {
    ppr_settle(rt_exec_open(p, dir, dev, &x, world.err, sizeof world.err));
    return x;
  }
  int rc = 0, local = rt_comm_local_rank(world.comm);
  for (int turn = 0;; turn++) {
    if (local == turn) rc = rt_exec_open(p, dir, dev, &x, world.err, sizeof world.err);
    if (rt_comm_all_ok(world.comm, local <= turn)) break; /* every rank of every host has had its turn */
  }
  ppr_settle(rc);
  return x;
}

/* The first line where a and b differ, as "--NAME": its values' starts in *va, *vb (to the
 * newline). 0 when they agree. */
static int first_difference(const char *a, const char *b, const char **va, const char **vb) {
  while (*a || *b) {
    size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
    if (la != lb || memcmp(a, b, la)) {
      *va = a, *vb = b;
      return 1;
    }
    a += la + (a[la] == '\n'), b += lb + (b[lb] == '\n');
  }
  return 0;
}

void ppr_agree(const char *text, const char *what, const char *hint) {
  if (world.nranks == 1) return;
  rt_comm_set_what(world.comm, "the start-up: what every rank must share");
  unsigned char *all = NULL;
  size_t *sizes = calloc((size_t)world.nranks, sizeof *sizes);
  if (!sizes) ppr_die("out of memory");
  int rc = rt_comm_gather(world.comm, text, strlen(text) + 1, &all, sizes, world.err, sizeof world.err);
  for (int r = 1, at = (int)(sizes[0]); world.me == 0 && !rc && r < world.nranks; at += (int)sizes[r++]) {
    const char *va, *vb;
    if (!first_difference(text, (const char *)all + at, &va, &vb)) continue;
    int nl = (int)strcspn(va, " \n"), a = (int)strcspn(va, "\n"), b = (int)strcspn(vb, "\n");
    rc = rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__,
                    "%s: %.*s is '%.*s' on rank 0 but '%.*s' on rank %d (%s)", what, nl, va, a > nl ? a - nl - 1 : 0,
                    va + (a > nl ? nl + 1 : a), b > nl ? b - nl - 1 : 0, vb + (b > nl ? nl + 1 : b), r, hint);
  }
  free(all);
  free(sizes);
  ppr_settle_root(rc);
}
