/* ppr.c - the runtime's command line: each rank loads DIR/rankR.prog, initialises, trains for N steps over MPI,
 * reports, saves. The options and their --help text are ppr_cli.c's. */
#include "pp_timeline.h"
#include "ppr_cli.h"
#include "ppr_gen.h"
#include "ppr_state.h"
#include "rt_comm.h"
#include "rt_dev.h"
#include "rt_mesh.h"
#include "rt_exec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ERRLEN       65536
#define EXIT_STOPPED 75 /* SIGTERM or SIGINT stopped the run at a step boundary (sysexits' EX_TEMPFAIL) */

static char err[ERRLEN];
static RtComm *comm; /* the world: MPI under mpirun, else this process alone */
static RtDev *dev;   /* this rank's device (--device) */
static int me, nranks;

/* Every line of the message gets the prefix. */
static void print_err(const char *msg) {
  const char *p = msg;
  do {
    const char *nl = strchr(p, '\n');
    int n = nl ? (int)(nl - p) : (int)strlen(p);
    fprintf(stderr, "ppr: error: %.*s\n", n, p);
    p = nl ? nl + 1 : NULL;
  } while (p && *p);
  fflush(stderr);
}

/* Every rank ends here together (a decision all of them made): MPI_Finalize, then exit. */
_Noreturn static void exit_all(int code) {
  fflush(stdout);
  fflush(stderr);
  rt_dev_close(dev); /* its queue drained and its objects released before the libraries unload */
  dev = NULL;
  rt_comm_finalize(comm);
  exit(code);
}

/* A failure of this rank alone: the message, then the whole job ends (MPI_Abort). */
_Noreturn static void die(const char *msg) {
  print_err(msg);
  if (nranks > 1) rt_comm_abort(comm, 1);
  exit_all(1);
}

/* A step every rank takes: rc is this rank's result, its message in err. When any rank failed,
 * rank 0 prints each distinct message once (in rank order) and every rank exits 1. */
static void settle(int rc) {
  if (nranks == 1) {
    if (rc) die(err);
    return;
  }
  if (rt_comm_all_ok(comm, rc == 0)) return;
  size_t n = rc ? strlen(err) + 1 : 0;
  unsigned char *all = NULL;
  size_t *sizes = calloc((size_t)nranks, sizeof *sizes);
  char gerr[256];
  if (!sizes || rt_comm_gather(comm, err, n, &all, sizes, gerr, sizeof gerr)) {
    if (me == 0) print_err(rc ? err : "a rank failed (no memory for its message)");
    exit_all(1);
  }
  if (me == 0) {
    size_t at = 0;
    for (int r = 0; r < nranks; r++) {
      const char *m = (const char *)all + at;
      int seen = sizes[r] == 0;
      for (size_t q = 0, k = 0; k < (size_t)r && !seen; q += sizes[k], k++)
        seen = sizes[k] == sizes[r] && !memcmp(all + q, m, sizes[r]);
      if (!seen) print_err(m);
      at += sizes[r];
    }
  }
  free(all);
  free(sizes);
  exit_all(1);
}

/* rt_exec_open on every rank, settled. An OpenCL driver's kernel cache is shared by a host's
 * processes, and PoCL's fails a program that two of them build at once (CL_BUILD_PROGRAM_FAILURE
 * with an empty log; pocl/pocl#1480, #430): on opencl a host's ranks load one after another,
 * local rank 0 first, each later one finding what the earlier built in the cache. */
static RtExec *exec_open(const RtProg *p, const char *dir, RtDev *dev, RtDevKind kind) {
  RtExec *x = NULL;
  if (kind != RT_DEV_OPENCL) {
    settle(rt_exec_open(p, dir, dev, &x, err, sizeof err));
    return x;
  }
  int rc = 0, local = rt_comm_local_rank(comm);
  for (int turn = 0;; turn++) {
    if (local == turn) rc = rt_exec_open(p, dir, dev, &x, err, sizeof err);
    if (rt_comm_all_ok(comm, local <= turn)) break; /* every rank of every host has had its turn */
  }
  settle(rc);
  return x;
}

#define CHECK_IO(cond, ...)                                                                                            \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      rt_fail_at(err, sizeof err, __FILE__, __LINE__, __VA_ARGS__);                                                    \
      die(err);                                                                                                        \
    }                                                                                                                  \
  } while (0)

/* ---- output files, checked before the first step ---------------------------------------------- */

/* flag's path will be written (created, or replaced through a temporary file in its directory):
 * its directory exists and takes new files, and the path, if it exists, is a writable regular
 * file. Nothing is changed. 0, or -1 with a message naming the option and the path. */
static int check_output(const char *flag, const char *path, char *e, size_t elen) {
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return rt_fail_at(e, elen, __FILE__, __LINE__, "%s %s: cannot open for writing: it is a directory", flag, path);
    if (!S_ISREG(st.st_mode))
      return rt_fail_at(e, elen, __FILE__, __LINE__, "%s %s: cannot open for writing: not a regular file", flag, path);
    int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC); /* no O_TRUNC: the file stays as it is */
    if (fd < 0)
      return rt_fail_at(e, elen, __FILE__, __LINE__, "%s %s: cannot open for writing: %s", flag, path, strerror(errno));
    close(fd);
  } else if (errno != ENOENT) {
    return rt_fail_at(e, elen, __FILE__, __LINE__, "%s %s: cannot open for writing: %s", flag, path, strerror(errno));
  }
  size_t n = strlen(path);
  char *dir = malloc(n + 32);
  if (!dir) return rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
  const char *slash = strrchr(path, '/');
  if (!slash) strcpy(dir, ".");
  else if (slash == path) strcpy(dir, "/");
  else snprintf(dir, n + 1, "%.*s", (int)(slash - path), path);
  int rc = 0;
  if (stat(dir, &st) != 0)
    rc = rt_fail_at(e, elen, __FILE__, __LINE__, "%s %s: cannot open for writing: the directory %s %s", flag, path, dir,
                    errno == ENOENT ? "does not exist" : strerror(errno));
  else if (!S_ISDIR(st.st_mode))
    rc = rt_fail_at(e, elen, __FILE__, __LINE__, "%s %s: cannot open for writing: %s is not a directory", flag, path,
                    dir);
  else { /* a file made and removed: the test that counts (permissions, a read-only file system, quota) */
    size_t dl = strlen(dir);
    snprintf(dir + dl, 32, "/.ppr-check-XXXXXX");
    int fd = mkstemp(dir);
    dir[dl] = 0;
    if (fd < 0)
      rc = rt_fail_at(e, elen, __FILE__, __LINE__, "%s %s: cannot open for writing: cannot create files in %s: %s",
                      flag, path, dir, strerror(errno));
    else {
      dir[dl] = '/';
      close(fd);
      unlink(dir);
    }
  }
  free(dir);
  return rc;
}

/* --save DIR (a checkpoint folder): absent or a checkpoint folder (rt_ckpt_check_dir), and its
 * parent directory exists and takes new folders (it is written beside itself and renamed). */
static int check_save_dir(const char *path, char *e, size_t elen) {
  char m[1024];
  if (rt_ckpt_check_dir(path, m, sizeof m))
    return rt_fail_at(e, elen, __FILE__, __LINE__, "--save %s: cannot write a checkpoint folder: %s", path, m);
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  const char *slash = NULL;
  for (size_t i = 0; i < n; i++)
    if (path[i] == '/') slash = path + i;
  char *probe = malloc(n + 32);
  if (!probe) return rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
  if (!slash) snprintf(probe, n + 32, ".");
  else snprintf(probe, n + 32, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  struct stat st;
  int rc = 0;
  if (stat(probe, &st) != 0 || !S_ISDIR(st.st_mode))
    rc = rt_fail_at(e, elen, __FILE__, __LINE__, "--save %s: cannot write a checkpoint folder: %s %s", path, probe,
                    stat(probe, &st) != 0 && errno == ENOENT ? "does not exist" : "is not a directory");
  else { /* a folder made and removed: permissions, a read-only file system */ size_t dl = strlen(probe);
    snprintf(probe + dl, n + 32 - dl, "/.ppr-check-XXXXXX");
    if (!mkdtemp(probe))
      rc = rt_fail_at(e, elen, __FILE__, __LINE__,
                      "--save %s: cannot write a checkpoint folder: cannot create "
                      "folders in %.*s: %s",
                      path, (int)dl, probe, strerror(errno));
    else rmdir(probe);
  }
  free(probe);
  return rc;
}

/* --save X --save-every N: X is absent or a folder (of checkpoint folders X/step-NNNNNN) that takes new
 * folders; when absent, its parent directory takes new folders. Nothing is changed. */
static int check_save_every(const char *path, char *e, size_t elen) {
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno != ENOENT)
      return rt_fail_at(e, elen, __FILE__, __LINE__, "--save %s: cannot write: %s", path, strerror(errno));
    return check_save_dir(path, e, elen); /* absent: its parent is probed */
  }
  if (!S_ISDIR(st.st_mode))
    return rt_fail_at(e, elen, __FILE__, __LINE__,
                      "--save %s: exists and is not a folder (with --save-every, --save names a folder of "
                      "checkpoint folders step-NNNNNN)",
                      path);
  size_t n = strlen(path);
  char *probe = malloc(n + 32);
  if (!probe) return rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
  snprintf(probe, n + 32, "%s/.ppr-check-XXXXXX", path);
  int rc = 0;
  if (!mkdtemp(probe))
    rc = rt_fail_at(e, elen, __FILE__, __LINE__, "--save %s: cannot create folders in it: %s", path, strerror(errno));
  else rmdir(probe);
  free(probe);
  return rc;
}

/* Is name a --save-every checkpoint folder's name, step-NNNNNN (6 or more digits)? */
static int step_dir_name(const char *name) {
  size_t n = strlen(name);
  return n >= 11 && !strncmp(name, "step-", 5) && strspn(name + 5, "0123456789") == n - 5;
}

/* qsort's order of step folder names: by step (the number), then by name */
static int cmp_step(const void *a, const void *b) {
  const char *x = *(const char *const *)a, *y = *(const char *const *)b;
  size_t nx = strlen(x), ny = strlen(y);
  return nx != ny ? (nx < ny ? -1 : 1) : strcmp(x, y);
}

/* --keep K: removes the checkpoint folders step-NNNNNN of dir but the last K (by step); only folders
 * holding a checkpoint's files alone (rt_ckpt_check_dir) are removed. 0, or -1 with a message. */
static int keep_last(const char *dir, int64_t keep, char *e, size_t elen) {
  DIR *d = opendir(dir);
  if (!d) return rt_fail_at(e, elen, __FILE__, __LINE__, "--keep: %s: cannot read: %s", dir, strerror(errno));
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  for (struct dirent *de; !rc && (de = readdir(d));) {
    if (!step_dir_name(de->d_name)) continue;
    if (n == cap) {
      char **nn = realloc(names, (cap = cap ? cap * 2 : 16) * sizeof *names);
      if (!nn) {
        rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
        break;
      }
      names = nn;
    }
    if (!(names[n++] = strdup(de->d_name))) rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
  }
  closedir(d);
  if (!rc) qsort(names, n, sizeof *names, cmp_step);
  for (size_t i = 0; !rc && n > (size_t)keep && i < n - (size_t)keep; i++) {
    char *sub = malloc(strlen(dir) + strlen(names[i]) + 2), m[1024];
    if (!sub) {
      rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
      break;
    }
    sprintf(sub, "%s/%s", dir, names[i]);
    DIR *sd = rt_ckpt_check_dir(sub, m, sizeof m) ? NULL : opendir(sub);
    if (!sd && !m[0]) snprintf(m, sizeof m, "%s", strerror(errno));
    for (struct dirent *de; sd && (de = readdir(sd));) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      char *f = malloc(strlen(sub) + strlen(de->d_name) + 2);
      if (f) {
        sprintf(f, "%s/%s", sub, de->d_name);
        unlink(f);
      }
      free(f);
    }
    if (sd) closedir(sd);
    if (!sd || rmdir(sub) != 0)
      rc = rt_fail_at(e, elen, __FILE__, __LINE__, "--keep: cannot remove the earlier checkpoint %s: %s", sub,
                      sd ? strerror(errno) : m);
    free(sub);
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return rc;
}

/* ---- SIGTERM and SIGINT: stop at the end of the step ------------------------------------------- */

static char stop_note[2][160]; /* what rank 0's handler writes (async-signal-safe: prepared) */

static void on_stop_signal(int sig) {
  if (rt_comm_stop_requested()) { /* the second: end now, as the signal would have */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  rt_comm_request_stop(sig);
  if (me == 0) { /* once for the job: mpirun passes its SIGTERM to every rank */
    const char *m = stop_note[sig == SIGINT];
    ssize_t w = write(STDERR_FILENO, m, strlen(m));
    (void)w;
  }
}

static void catch_stop_signals(void) {
  for (int k = 0; k < 2; k++)
    snprintf(stop_note[k], sizeof stop_note[k],
             "ppr: rank %d: %s: stopping after this step (a second signal ends the rank now, without saving)\n", me,
             k ? "SIGINT" : "SIGTERM");
  struct sigaction sa, was;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  static const int sigs[2] = {SIGTERM, SIGINT};
  for (int k = 0; k < 2; k++) {
    CHECK_IO(sigaction(sigs[k], NULL, &was) == 0, "sigaction: %s", strerror(errno));
    if (was.sa_handler == SIG_IGN) continue; /* ignored when ppr started (a background job of a script): kept so */
    CHECK_IO(sigaction(sigs[k], &sa, NULL) == 0, "sigaction: %s", strerror(errno));
  }
}

/* ---- gathering params to rank 0 (--save, --save-grads) ----------------------------------- */

/* A growing byte buffer; every field is 8-byte aligned, so the floats of a gathered block are too. */
typedef struct {
  unsigned char *b;
  size_t n, cap;
  int oom;
} Buf;

static void put(Buf *b, const void *data, size_t n) {
  size_t padded = (n + 7) / 8 * 8;
  if (b->oom) return;
  if (b->n + padded > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + padded) cap *= 2;
    unsigned char *nb = realloc(b->b, cap);
    if (!nb) {
      b->oom = 1;
      return;
    }
    b->b = nb;
    b->cap = cap;
  }
  if (n) memcpy(b->b + b->n, data, n);
  memset(b->b + b->n + n, 0, padded - n);
  b->n += padded;
}

static void put_u64(Buf *b, uint64_t v) { put(b, &v, sizeof v); }

static uint64_t get_u64(const unsigned char **q) {
  uint64_t v;
  memcpy(&v, *q, sizeof v);
  *q += 8;
  return v;
}

/* One tensor of the file rank 0 writes: a whole param as gathered, or a dense tensor assembled
 * from the shards of several ranks. */
typedef struct {
  char *name;
  int ndim, sharded, dim, tied;
  int group; /* 0: the values (or gradients); 1, 2: the AdamW moments exp_avg, exp_avg_sq */
  int64_t shape[RT_MAX_NDIM];
  const float *data;  /* a whole param: inside the gathered blocks */
  float *dense;       /* sharded: the assembled tensor (malloc'd) */
  unsigned char *got; /* sharded: per dense row along dim, how many shards brought it */
} OutTensor;

/* Gathers the params this rank owns (not the copies and replicas; dp_rank 0, cp_rank 0 only) on rank 0, which
 * writes them to path: by rank, then param index. The shards of a sharded param (`shard` in the
 * listing) are put together into the dense tensor (padding rows dropped), written under its name
 * where its first shard comes. Collective; every rank returns rank 0's verdict (the message only
 * on rank 0). */
/* What --save writes besides the tensors (NULL for --save-grads: one safetensors file). */
typedef struct {
  int folder;            /* a checkpoint folder (rt_ckpt_write_dir), else one file */
  int tied_head;         /* also write the tied embedding as lm_head.weight */
  uint64_t shard_bytes;  /* a folder's shard size */
  const char *hf_config; /* the listing's: config.json */
  /* the training state (rank 0's; NULL: none): trainer_state.json's text, and beside one file
   * the paths of the optimizer file and of trainer_state.json */
  const char *state_json, *opt_path, *state_path;
} SaveOpts;

static int save_params(const RtProg *p, RtExec *x, const char *path, int region, const SaveOpts *so, char *e,
                       size_t elen) {
  Buf b = {0};
  uint64_t count = 0;
  int64_t most = 1;
  if (p->dp_rank == 0 && p->cp_rank == 0)
    for (int i = 0; i < p->nparams; i++) {
      count += p->params[i].owned;
      if (p->params[i].owned && p->params[i].numel > most) most = p->params[i].numel;
    }
  float *host = malloc((size_t)most * sizeof *host);
  int rc = host ? 0 : rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
  /* the regions: the values (or gradients), and with the training state the AdamW moments */
  int nreg = so && so->state_json ? 3 : 1;
  static const int moments[2] = {RT_REG_ADAM_M, RT_REG_ADAM_V};
  static const char *const prefix[3] = {"", "exp_avg.", "exp_avg_sq."};
  put_u64(&b, count * (uint64_t)nreg);
  for (int g = 0; g < nreg && !rc; g++)
    for (int i = 0; i < p->nparams && p->dp_rank == 0 && p->cp_rank == 0 && !rc; i++) {
      const RtParam *q = &p->params[i];
      if (!q->owned) continue;
      size_t nl = strlen(prefix[g]) + strlen(q->name);
      char *name = malloc(nl + 1);
      if (!name) {
        rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
        break;
      }
      sprintf(name, "%s%s", prefix[g], q->name);
      put_u64(&b, nl);
      put(&b, name, nl);
      free(name);
      put_u64(&b, (uint64_t)q->ndim);
      put(&b, q->dims, (size_t)q->ndim * sizeof *q->dims);
      int64_t shard[7] = {q->sharded, q->shard_dim, q->shard_start, q->shard_dense, q->tied, q->shard_parts, g};
      put(&b, shard, sizeof shard);
      rc = rt_exec_read_param(x, i, g ? moments[g - 1] : region, host, e, elen);
      put(&b, host, (size_t)q->numel * sizeof(float));
    }
  free(host);
  if (!rc && b.oom) rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
  if (!rt_comm_all_ok(comm, rc == 0)) { /* some rank could not pack: no gather */
    free(b.b);
    if (!rc) rt_fail_at(e, elen, __FILE__, __LINE__, "another rank ran out of memory");
    return -1;
  }
  unsigned char *all = NULL;
  size_t *sizes = calloc((size_t)nranks, sizeof *sizes);
  if (!sizes) die("out of memory");
  rc = rt_comm_gather(comm, b.b, b.n, &all, sizes, e, elen);
  free(b.b);
  if (me == 0 && !rc) {
    size_t total = 0, at = 0, nout = 0;
    for (int r = 0; r < nranks; r++) total += get_u64(&(const unsigned char *){all + at}), at += sizes[r];
    OutTensor *ot = calloc(total + 1, sizeof *ot);
    if (!ot) rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
    at = 0;
    for (int r = 0; r < nranks && !rc; r++) {
      const unsigned char *q = all + at;
      uint64_t cnt = get_u64(&q);
      for (uint64_t j = 0; j < cnt && !rc; j++) {
        size_t nl = (size_t)get_u64(&q);
        const char *name = (const char *)q;
        q += (nl + 7) / 8 * 8;
        int ndim = (int)get_u64(&q);
        int64_t dims[RT_MAX_NDIM];
        memcpy(dims, q, (size_t)ndim * 8);
        q += (size_t)ndim * 8;
        int64_t sh[7];
        memcpy(sh, q, sizeof sh);
        q += sizeof sh;
        const float *data = (const float *)(const void *)q;
        int64_t numel = 1;
        for (int d = 0; d < ndim; d++) numel *= dims[d];
        q += ((size_t)numel * 4 + 7) / 8 * 8;
        OutTensor *t = NULL;
        for (size_t o = 0; o < nout && !t; o++)
          if (strlen(ot[o].name) == nl && !memcmp(ot[o].name, name, nl)) t = &ot[o];
        if (t && (!t->sharded || !sh[0] || t->dim != (int)sh[1] || t->shape[t->dim] != sh[3])) {
          rc = rt_fail_at(e, elen, __FILE__, __LINE__, "%s: tensor %s is owned by two ranks", path, t->name);
          break;
        }
        if (!t) { /* a new tensor of the file */
          t = &ot[nout++];
          t->name = malloc(nl + 1);
          if (!t->name) {
            rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
            break;
          }
          memcpy(t->name, name, nl);
          t->name[nl] = 0;
          t->ndim = ndim;
          t->tied = (int)sh[4];
          t->group = (int)sh[6];
          memcpy(t->shape, dims, sizeof dims);
          t->data = data;
          if (sh[0]) {
            t->sharded = 1;
            t->dim = (int)sh[1];
            t->shape[t->dim] = sh[3];
            t->dense = calloc((size_t)(numel / dims[t->dim] * sh[3]) + 1, sizeof *t->dense);
            t->got = calloc((size_t)sh[3], 1);
            if (!t->dense || !t->got) {
              rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
              break;
            }
            t->data = t->dense;
          }
        }
        if (!t->sharded) continue;
        /* place the shard: local row k of block o is dense row start + k; rows at or past
         * the dense count are padding. In P parts: P times the blocks, each of len/P local and
         * dense/P dense rows (block o of the local tensor is part o % P) */
        int64_t P = sh[5], len = dims[t->dim] / P, start = sh[2], dense = sh[3] / P, outer = P, inner = 1;
        for (int d = 0; d < t->dim; d++) outer *= dims[d];
        for (int d = t->dim + 1; d < ndim; d++) inner *= dims[d];
        int64_t real = dense - start < len ? dense - start : len;
        for (int64_t b = 0; b < P; b++)
          for (int64_t k = 0; k < real; k++) t->got[b * dense + start + k] += t->got[b * dense + start + k] < 255;
        for (int64_t o = 0; o < outer; o++)
          memcpy(t->dense + (o * dense + start) * inner, data + o * len * inner,
                 (size_t)(real * inner) * sizeof(float));
      }
      at += sizes[r];
    }
    for (size_t o = 0; o < nout && !rc; o++)
      for (int64_t k = 0; ot[o].sharded && k < ot[o].shape[ot[o].dim] && !rc; k++)
        if (ot[o].got[k] != 1)
          rc = rt_fail_at(e, elen, __FILE__, __LINE__, "%s: row %lld of dim %d of tensor %s is in %d shards", path,
                          (long long)k, ot[o].dim, ot[o].name, ot[o].got[k]);
    if (!rc) {
      const char **names = calloc(nout + 3, sizeof *names);
      int *ndims = calloc(nout + 3, sizeof *ndims);
      const int64_t **shapes = calloc(nout + 3, sizeof *shapes);
      const float **data = calloc(nout + 3, sizeof *data);
      if (!names || !ndims || !shapes || !data) rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
      size_t nw = 0;
      for (size_t o = 0; o < nout && !rc; o++) {
        if (ot[o].group) continue;
        names[nw] = ot[o].name;
        ndims[nw] = ot[o].ndim;
        shapes[nw] = ot[o].shape;
        data[nw++] = ot[o].data;
        if (so && so->tied_head && ot[o].tied && strcmp(ot[o].name, "lm_head.weight")) {
          /* the head under its own name too, so that strict loading finds it */
          names[nw] = "lm_head.weight";
          ndims[nw] = ot[o].ndim;
          shapes[nw] = ot[o].shape;
          data[nw++] = ot[o].data;
        }
      }
      /* the moments after the weights: exp_avg.*, then exp_avg_sq.* */
      size_t nopt = 0;
      for (int g = 1; g <= 2; g++)
        for (size_t o = 0; o < nout && !rc; o++)
          if (ot[o].group == g) {
            names[nw + nopt] = ot[o].name;
            ndims[nw + nopt] = ot[o].ndim;
            shapes[nw + nopt] = ot[o].shape;
            data[nw + nopt++] = ot[o].data;
          }
      int state = so && so->state_json;
      if (!rc && so && so->folder) {
        RtCkptOpts co = {.shard_bytes = so->shard_bytes,
                         .hf_config = so->hf_config,
                         .nopt = (int)nopt,
                         .opt_names = names + nw,
                         .opt_ndims = ndims + nw,
                         .opt_shapes = shapes + nw,
                         .opt_data = data + nw,
                         .state_json = state ? so->state_json : NULL};
        rc = rt_ckpt_write_dir(path, (int)nw, names, ndims, shapes, data, &co, e, elen);
      } else if (!rc) {
        /* one file: the state first, the weights last (a complete weights file has its state) */
        if (state)
          rc = rt_st_write(so->opt_path, (int)nopt, names + nw, ndims + nw, shapes + nw, data + nw, e, elen) ||
                       ppr_state_write(so->state_path, so->state_json, e, elen)
                   ? -1
                   : 0;
        if (!rc) rc = rt_st_write(path, (int)nw, names, ndims, shapes, data, e, elen);
      }
      free(names);
      free(ndims);
      free(shapes);
      free(data);
    }
    for (size_t o = 0; ot && o < nout; o++) {
      free(ot[o].name);
      free(ot[o].dense);
      free(ot[o].got);
    }
    free(ot);
  }
  free(all);
  free(sizes);
  int32_t verdict = rc;
  rt_comm_bcast(comm, &verdict, sizeof verdict, 0);
  if (verdict && me != 0 && e && elen) e[0] = 0;
  return verdict ? -1 : 0;
}

typedef struct {
  const RtProg *p;
  const char *path;
  int done;
} GradSave;

static int save_grads_hook(void *ctx, RtExec *x, char *e, size_t elen) {
  GradSave *g = ctx;
  if (g->done) return 0;
  g->done = 1;
  rt_comm_set_what(comm, "--save-grads: the gradients to rank 0");
  return save_params(g->p, x, g->path, RT_REG_GRADS, NULL, e, elen);
}

static void json_num(FILE *fp, const char *key, double v, const char *fmt) {
  fprintf(fp, ",\"%s\":", key);
  if (isfinite(v)) fprintf(fp, fmt, v);
  else fputs("null", fp);
}

/* --save: the weights and the training state after `done` steps, to --save (with --save-every to its
 * folder step-NNNNNN, then --keep applied). Collective; on a failure every rank exits 1. */
static void save_checkpoint(const PprCli *c, const RtProg *p, RtExec *x, int64_t done, const PprStateData *data_id) {
  size_t n = strlen(c->save);
  char *path = malloc(n + 32), *json = NULL;
  if (!path) die("out of memory");
  if (c->save_every) snprintf(path, n + 32, "%s/step-%06lld", c->save, (long long)done);
  else snprintf(path, n + 32, "%s", c->save);
  char *opt = ppr_state_opt_path(path), *st = ppr_state_json_path(path);
  if (!opt || !st) die("out of memory");
  int rc = 0;
  if (me == 0 && !(json = ppr_state_json(c, p, data_id, done)))
    rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__, "out of memory");
  if (!rc && me == 0 && c->save_every && mkdir(c->save, 0777) != 0 && errno != EEXIST)
    rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__, "--save %s: cannot create the folder: %s", c->save,
                    strerror(errno));
  if (!rc && me == 0 && c->save_every) rc = check_save_dir(path, err, sizeof err);
  settle(rc);
  rt_comm_set_what(comm, "--save: the weights to rank 0");
  SaveOpts so = {.folder = !rt_ckpt_is_file_path(path),
                 .tied_head = c->save_tied_head,
                 .shard_bytes = c->save_shard_size,
                 .hf_config = p->hf_config,
                 .state_json = me == 0 ? json : "",
                 .opt_path = opt,
                 .state_path = st};
  if (save_params(p, x, path, RT_REG_PARAMS, &so, err, sizeof err)) {
    if (me == 0) print_err(err);
    exit_all(1);
  }
  if (c->keep) { /* rank 0 prunes; every rank learns its verdict */
    int32_t verdict = me == 0 ? keep_last(c->save, c->keep, err, sizeof err) : 0;
    rt_comm_bcast(comm, &verdict, sizeof verdict, 0);
    if (verdict) {
      if (me == 0) print_err(err);
      exit_all(1);
    }
  }
  if (!c->quiet && me == 0 && c->save_every) {
    printf("ppr: saved %s (step %lld)\n", path, (long long)done);
    CHECK_IO(fflush(stdout) == 0, "stdout: write failed: %s", strerror(errno));
  }
  free(json);
  free(opt);
  free(st);
  free(path);
}

/* ---- --trace: every rank's timeline on rank 0, and the bubble ------------------------------ */

static const char *event_cat(int kind) {
  switch (kind) {
  case RT_EV_F:
  case RT_EV_B:
  case RT_EV_W:
  case RT_EV_OPT: return "compute";
  case RT_EV_POST:
  case RT_EV_WAIT:
  case RT_EV_COLL: return "comm";
  case RT_EV_HOOK: return "save";
  case RT_EV_ZERO: return "zero_grads";
  default: return "step";
  }
}

/* The measured timeline of the last traced step as SVG beside the JSON (FILE.json -> FILE.svg, any
 * other name gets .svg added): each rank's F, B, W and OPT, from the step's first start on. 0, or
 * a message in err. */
static int write_trace_svg(const char *path, const RtProg *p, const RtEvent *const *ev, const int64_t *nev,
                           int64_t step) {
  size_t n = strlen(path);
  int json = n >= 5 && !strcmp(path + n - 5, ".json");
  char *svg = malloc(n + 8);
  PpSpan **span = calloc((size_t)nranks, sizeof *span);
  PpLane *lane = calloc((size_t)nranks, sizeof *lane);
  if (!svg || !span || !lane) die("out of memory");
  snprintf(svg, n + 8, "%.*s.svg", (int)(json ? n - 5 : n), path);
  double t0 = INFINITY, t1 = 0;
  for (int r = 0; r < nranks; r++) {
    span[r] = calloc((size_t)nev[r] + 1, sizeof **span);
    if (!span[r]) die("out of memory");
    for (int64_t i = 0; i < nev[r]; i++) {
      RtEvent v;
      memcpy(&v, ev[r] + i, sizeof v);
      if (v.step != step || (v.kind != RT_EV_F && v.kind != RT_EV_B && v.kind != RT_EV_W && v.kind != RT_EV_OPT))
        continue;
      char kind = v.kind == RT_EV_F ? 'F' : v.kind == RT_EV_B ? 'B' : v.kind == RT_EV_W ? 'W' : 'O';
      if (kind != 'O' && v.chunk % 2) kind = (char)(kind - 'A' + 'a'); /* a rank's odd chunks: drawn lighter */
      int mb = kind == 'O' ? -1 : v.mb;
      span[r][lane[r].n++] = (PpSpan){v.ts / 1000, (v.ts + v.dur) / 1000, kind, mb};
      if (v.ts / 1000 < t0) t0 = v.ts / 1000;
      if ((v.ts + v.dur) / 1000 > t1) t1 = (v.ts + v.dur) / 1000;
    }
    lane[r].span = span[r];
  }
  for (int r = 0; r < nranks; r++)
    for (int i = 0; i < lane[r].n; i++) span[r][i].t0 -= t0, span[r][i].t1 -= t0;
  int rc = 0;
  FILE *fp = fopen(svg, "w");
  if (!fp)
    rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__, "%s: cannot open for writing: %s", svg, strerror(errno));
  else {
    char title[160], sub[160];
    snprintf(title, sizeof title, "%s: schedule %s, %d ranks, %d micro-batches (measured, ppr --trace)", p->model,
             p->schedule_name, nranks, p->local_microbatches);
    snprintf(sub, sizeof sub, "step %lld, %.3f ms from the first compute entry to the last", (long long)step,
             t1 > t0 ? t1 - t0 : 0);
    pp_timeline_svg(fp, title, sub, lane, nranks, t1 > t0 ? t1 - t0 : 0, "ms");
    if (fclose(fp) != 0)
      rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__, "%s: write failed: %s", svg, strerror(errno));
    else printf("ppr: trace: %s: the timeline of step %lld\n", svg, (long long)step);
  }
  for (int r = 0; r < nranks; r++) free(span[r]);
  free(span);
  free(lane);
  free(svg);
  return rc;
}

/* walls/comps: this rank's per-step wall and compute times (ms). Collective. */
static void write_trace(const RtProg *p, RtExec *x, const char *path, const double *walls, const double *comps,
                        int64_t nsteps) {
  rt_comm_set_what(comm, "--trace: the timelines to rank 0");
  int64_t nev = 0;
  int oom = 0;
  const RtEvent *ev = rt_exec_events(x, &nev, &oom);
  Buf b = {0};
  put_u64(&b, (uint64_t)p->stage);
  put_u64(&b, (uint64_t)oom);
  put_u64(&b, (uint64_t)nsteps);
  put(&b, walls, (size_t)nsteps * sizeof *walls);
  put(&b, comps, (size_t)nsteps * sizeof *comps);
  put_u64(&b, (uint64_t)nev);
  put(&b, ev, (size_t)nev * sizeof *ev);
  int rc = b.oom ? rt_fail_at(err, sizeof err, __FILE__, __LINE__, "out of memory") : 0;
  settle(rc);
  unsigned char *all = NULL;
  size_t *sizes = calloc((size_t)nranks, sizeof *sizes);
  if (!sizes) die("out of memory");
  rc = rt_comm_gather(comm, b.b, b.n, &all, sizes, err, sizeof err);
  free(b.b);
  FILE *fp = NULL;
  if (me == 0 && !rc) {
    fp = fopen(path, "w");
    if (!fp)
      rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__, "%s: cannot open for writing: %s", path, strerror(errno));
  }
  if (me == 0 && !rc) {
    /* the per-rank blocks: stage, oom, steps, walls, comps, events */
    const double **w = calloc((size_t)nranks, sizeof *w), **cp = calloc((size_t)nranks, sizeof *cp);
    int *stage = calloc((size_t)nranks, sizeof *stage);
    const RtEvent **evs = calloc((size_t)nranks, sizeof *evs);
    int64_t *nevs = calloc((size_t)nranks, sizeof *nevs);
    int64_t total = 0, lost = 0, ns = nsteps;
    if (!w || !cp || !stage || !evs || !nevs) die("out of memory");
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", fp);
    size_t at = 0;
    for (int r = 0; r < nranks; r++) {
      const unsigned char *q = all + at;
      stage[r] = (int)get_u64(&q);
      lost += get_u64(&q) != 0;
      int64_t n = (int64_t)get_u64(&q);
      w[r] = (const double *)(const void *)q;
      q += (size_t)n * 8;
      cp[r] = (const double *)(const void *)q;
      q += (size_t)n * 8;
      if (n < ns) ns = n;
      int64_t ne = (int64_t)get_u64(&q);
      const RtEvent *e = (const RtEvent *)(const void *)q;
      evs[r] = e;
      nevs[r] = ne;
      fprintf(
          fp,
          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d (stage %d)\"}},\n"
          "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}},\n"
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"schedule\"}},\n"
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"steps\"}}",
          r, r, stage[r], r, r, r, r);
      for (int64_t i = 0; i < ne; i++) {
        RtEvent v;
        memcpy(&v, e + i, sizeof v);
        v.name[sizeof v.name - 1] = 0;
        fprintf(fp,
                ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
                "\"args\":{\"step\":%d}}",
                v.name, event_cat(v.kind), v.ts, v.dur, r, v.kind == RT_EV_STEP ? 1 : 0, (int)v.step);
      }
      total += ne;
      at += sizes[r];
      fputs(r + 1 < nranks ? ",\n" : "\n", fp);
    }
    fputs("]}\n", fp);
    if (fclose(fp) != 0)
      rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__, "%s: write failed: %s", path, strerror(errno));
    if (!rc) {
      printf("ppr: trace: %s: %lld events of %d rank%s%s\n", path, (long long)total, nranks, nranks > 1 ? "s" : "",
             lost ? " (some ranks ran out of memory: events lost)" : "");
      if (ns > 0) rc = write_trace_svg(path, p, evs, nevs, ns);
    }
    if (!rc) {
      printf("ppr: bubble fraction per rank, 1 - compute / step time (compute: F, B, W, and OPT without its "
             "collectives):\n");
      printf("  %-10s", "step");
      for (int r = 0; r < nranks; r++) {
        char h[32];
        snprintf(h, sizeof h, "rank %d/s%d", r, stage[r]);
        printf(" %11s", h);
      }
      printf("\n");
      for (int64_t k = 0; k < ns; k++) {
        printf("  %-10lld", (long long)(k + 1));
        for (int r = 0; r < nranks; r++) printf(" %11.3f", w[r][k] > 0 ? 1 - cp[r][k] / w[r][k] : 0.0);
        printf("\n");
      }
      for (int from = 0; from < 2; from++) {
        if (from == 1 && ns < 2) break;
        printf("  %-10s", from ? "mean 2.." : "mean");
        for (int r = 0; r < nranks; r++) {
          double sum = 0;
          for (int64_t k = from; k < ns; k++) sum += w[r][k] > 0 ? 1 - cp[r][k] / w[r][k] : 0.0;
          printf(" %11.3f", ns > from ? sum / (double)(ns - from) : 0.0);
        }
        printf("\n");
      }
      fflush(stdout);
    }
    free((void *)w);
    free((void *)cp);
    free(stage);
    free((void *)evs);
    free(nevs);
  }
  free(all);
  free(sizes);
  int32_t verdict = rc;
  rt_comm_bcast(comm, &verdict, sizeof verdict, 0);
  if (verdict) {
    if (me == 0) print_err(err);
    exit_all(1);
  }
}

/* ---- main ---------------------------------------------------------------------------------- */

/* seconds as the step line shows them: 12.3s, 4m05s, 2h03m */
static const char *duration(char *buf, size_t n, double sec) {
  if (!isfinite(sec) || sec < 0) sec = 0;
  if (sec < 60) snprintf(buf, n, "%.1fs", sec);
  else if (sec < 3600) snprintf(buf, n, "%dm%02ds", (int)(sec / 60), (int)sec % 60);
  else snprintf(buf, n, "%lldh%02dm", (long long)(sec / 3600), (int)(sec / 60) % 60);
  return buf;
}

/* A loss mask in the data needs a loss that can ignore labels: the program's ignore_index, which
 * the masked tokens' labels become. 0, or -1 with the message in err. */
static int data_mask(RtData *d, const char *name, const RtProg *p, const char *path) {
  if (!d) return 0;
  if (p->masked) rt_data_set_ignore(d, p->ignore_index);
  else if (rt_data_has_mask(d))
    return rt_fail_at(err, sizeof err, __FILE__, __LINE__,
                      "%s carries a loss mask, but the model's cross_entropy has no ignore_index (%s): write "
                      "cross_entropy(logits, labels, ignore_index = -100)",
                      name, path);
  return 0;
}

/* --val-frac f: the last floor(f * n) tokens of *d become *val, the rest *d (the training batches
 * then read only them). Each part needs a row's seq + 1 tokens. 0, or -1 with the message in err. */
static int split_val(RtData **d, RtData **val, const char *name, double f, int seq) {
  int64_t n = rt_data_len(*d), nval = (int64_t)floor((double)n * f), head = n - nval;
  if (nval < seq + 1 || head < seq + 1)
    return rt_fail_at(err, sizeof err, __FILE__, __LINE__,
                      "--val-frac %g of %s (%lld tokens): %lld validation tokens and %lld training tokens; each "
                      "part needs at least a row's seq + 1 = %d",
                      f, name, (long long)n, (long long)nval, (long long)head, seq + 1);
  RtData *h = NULL;
  if (rt_data_slice(*d, head, nval, name, val, err, sizeof err) ||
      rt_data_slice(*d, 0, head, name, &h, err, sizeof err))
    return -1;
  rt_data_close(*d);
  *d = h;
  return 0;
}

/* DIR/rankR.prog, or with gen DIR/rankR.gen.prog (pp_stagedir.h) */
static char *prog_path(const char *dir, int r, int gen) {
  size_t dl = strlen(dir);
  char *path = malloc(dl + 48);
  CHECK_IO(path != NULL, "out of memory");
  int n = sprintf(path, "%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/");
  sprintf(path + n, gen ? PP_GEN_PROG_FMT : PP_PROG_FMT, r);
  return path;
}

/* ---- text from the model (--generate, --sample-every) ---------------------------------------- */

/* The generation programs where --generate and --sample-every run: DIR/rankR.gen.prog, its own
 * device queue and arena, the training program's weights copied in before each sample. With
 * PPR_GENERATE_PROGRAM=train, the training program itself instead (its forward's `logits`): the
 * tests check that both give the same tokens. */
typedef struct {
  RtProg *p;
  RtDev *dev;
  RtExec *x;
  int via_train; /* PPR_GENERATE_PROGRAM=train */
  PprTokenizer *tok;
  int32_t *prompt;
  int nprompt;
} Gen;

static int via_train(void) {
  const char *v = getenv("PPR_GENERATE_PROGRAM");
  if (v && *v && strcmp(v, "train") && strcmp(v, "generate")) {
    snprintf(err, sizeof err, "PPR_GENERATE_PROGRAM=%s: expected generate (the default) or train", v);
    die(err);
  }
  return v && !strcmp(v, "train");
}

/* A generation program's path exists: 0, or -1 with the message (flag: the option that needs it). */
static int gen_exists(const char *path, const char *flag) {
  if (access(path, F_OK) == 0) return 0;
  return rt_fail_at(err, sizeof err, __FILE__, __LINE__,
                    "%s: %s: %s samples through the generation programs: compile with ppc --generate", path,
                    strerror(errno), flag);
}

/* The generation program of this rank, checked against its training program p: the same
 * parameters, in the same order. */
static void gen_open(const PprCli *c, const RtProg *p, Gen *g) {
  char *path = prog_path(c->dir, me, 1);
  int rc = gen_exists(path, "--sample-every");
  if (!rc) rc = rt_prog_load(path, &g->p, err, sizeof err);
  if (!rc && (!g->p->generate || g->p->rank != me))
    rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__, "%s: not rank %d's generation program (schedule %s)", path, me,
                    PP_SCHED_FORWARD);
  for (int i = 0; !rc && i < p->nparams; i++)
    if (g->p->nparams != p->nparams || strcmp(g->p->params[i].name, p->params[i].name) ||
        g->p->params[i].numel != p->params[i].numel)
      rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__,
                      "%s: its parameters are not those of %s (param %d): compile both with one ppc --generate", path,
                      p->path, i);
  settle(rc);
  int tied = 0;
  if (rt_mesh_check(comm, g->p, c->dir, &tied, err, sizeof err)) {
    if (me == 0) print_err(err);
    exit_all(1);
  }
  free(path);
}

/* The prompt: --prompt's bytes, --prompt-ids, or the first 8 tokens of d (the training data). */
static void gen_prompt(const PprCli *c, const RtProg *p, const RtData *d, Gen *g) {
  int rc = 0, n = 0;
  size_t cap = c->prompt ? strlen(c->prompt) : c->prompt_ids ? strlen(c->prompt_ids) / 2 + 1 : 8;
  int32_t *t = malloc((cap ? cap : 1) * sizeof *t);
  CHECK_IO(t != NULL, "out of memory");
  if (c->prompt) {
    for (const unsigned char *q = (const unsigned char *)c->prompt; *q && !rc; q++)
      if (*q >= p->vocab)
        rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__,
                        "--prompt: byte %u is not below the vocabulary's %lld (its bytes are the tokens; give ids "
                        "with --prompt-ids)",
                        *q, (long long)p->vocab);
      else t[n++] = *q;
  } else if (c->prompt_ids) {
    for (const char *q = c->prompt_ids; *q && !rc;) {
      if (*q == ',' || *q == ' ') {
        q++;
        continue;
      }
      char *end;
      errno = 0;
      long long v = strtoll(q, &end, 10);
      if (end == q || errno || v < 0 || v >= p->vocab || (*end && *end != ',' && *end != ' '))
        rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__,
                        "--prompt-ids: '%.*s' is not a token id below the vocabulary's %lld", (int)strcspn(q, ", "), q,
                        (long long)p->vocab);
      else t[n++] = (int32_t)v, q = end;
    }
  } else {
    n = (int)(p->seq < 8 ? p->seq : 8);
    rt_data_batch(d, 0, 0, 1, 1, n, t, NULL);
  }
  if (!rc && n == 0) rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__, "the prompt is empty");
  settle(rc);
  g->prompt = t;
  g->nprompt = n;
}

/* count tokens after the prompt, through x (p's); printed by rank 0 as "PREFIX<text>\n". */
static void gen_sample(const PprCli *c, const RtProg *p, RtExec *x, Gen *g, const char *prefix, int count) {
  int32_t *tok = malloc((size_t)(g->nprompt + count) * sizeof *tok);
  CHECK_IO(tok != NULL, "out of memory");
  memcpy(tok, g->prompt, (size_t)g->nprompt * sizeof *tok);
  PprSampler s = {.temperature = c->temperature, .top_k = c->top_k, .state = c->sample_seed};
  int rc = ppr_gen_extend(comm, x, p, &s, tok, g->nprompt, count, err, sizeof err);
  if (rc == -2) die(err);
  settle(rc);
  if (me == 0) {
    fputs(prefix, stdout);
    ppr_gen_print(stdout, tok, g->nprompt + count, p->vocab, g->tok);
    fputc('\n', stdout);
    CHECK_IO(fflush(stdout) == 0, "stdout: write failed: %s", strerror(errno));
  }
  free(tok);
}

/* --sample-every: the training program's weights into the generation program, then a sample. */
static void gen_during(const PprCli *c, const RtProg *p, RtExec *x, Gen *g, int64_t step) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "sample after step %lld: ", (long long)step);
  if (g->via_train) {
    gen_sample(c, p, x, g, prefix, (int)c->sample_len);
    return;
  }
  int64_t most = 1;
  for (int i = 0; i < p->nparams; i++)
    if (p->params[i].numel > most) most = p->params[i].numel;
  float *buf = malloc((size_t)most * sizeof *buf);
  int rc = buf ? 0 : rt_fail_at(err, sizeof err, __FILE__, __LINE__, "out of memory");
  for (int i = 0; i < p->nparams && !rc; i++)
    rc = rt_exec_read_param(x, i, RT_REG_PARAMS, buf, err, sizeof err) ||
         rt_exec_write_param(g->x, i, buf, err, sizeof err);
  free(buf);
  if (rc) die(err);
  gen_sample(c, g->p, g->x, g, prefix, (int)c->sample_len);
}

int main(int argc, char **argv) {
  PprCli c;
  int rc;
  rt_dev_cpu_blas_core(argv); /* OpenBLAS's kernels for this CPU (may run ppr again) */
  ppr_cli_parse(argc, argv, &c);
  /* OpenMP's wait policy is the environment's (libgomp's default unless OMP_WAIT_POLICY or
   * GOMP_SPINCOUNT is set: an idle thread spins a while, then sleeps). The kernels and the GEMMs
   * share one pool (OpenBLAS runs on one thread, rt_dev_cpu.c), so no other pool's threads need
   * the cores between parallel regions; sleeping at once (PASSIVE) made every region wait for a
   * wake-up: 1.5-16x slower steps at 2 threads (bench/journal/perf-history.md, ninth part). libgomp reads it when
   * ppr loads, before main. */

  if (rt_comm_init(&argc, &argv, &comm, err, sizeof err)) die(err);
  me = rt_comm_rank(comm);
  nranks = rt_comm_size(comm);
  rt_comm_set_timeout(comm, c.timeout);
  rt_comm_set_what(comm, "the start-up");
  catch_stop_signals();

  /* the files rank 0 will write, before anything takes time */
  rc = 0;
  static const char *const out_flags[4] = {"--save", "--save-grads", "--log", "--trace"};
  const char *outs[4] = {c.save, c.save_grads, c.log, c.trace};
  for (int k = 0; k < 4 && me == 0 && !rc; k++)
    if (outs[k] && k == 0 && c.save_every) rc = check_save_every(outs[k], err, sizeof err);
    else if (outs[k] && k == 0 && !rt_ckpt_is_file_path(outs[k])) rc = check_save_dir(outs[k], err, sizeof err);
    else if (outs[k]) rc = check_output(out_flags[k], outs[k], err, sizeof err);
  /* --save W.safetensors: the training state beside it */
  if (!rc && me == 0 && c.save && rt_ckpt_is_file_path(c.save)) {
    char *so = ppr_state_opt_path(c.save), *ss = ppr_state_json_path(c.save);
    if (!so || !ss) die("out of memory");
    rc = check_output("--save", so, err, sizeof err) || check_output("--save", ss, err, sizeof err) ? -1 : 0;
    free(so);
    free(ss);
  }
  settle(rc);

  /* --generate: the generation program is the program (PPR_GENERATE_PROGRAM=train: the training one) */
  Gen gen = {0};
  int gen_only = c.generate > 0;
  gen.via_train = gen_only || c.sample_every ? via_train() : 0;
  int main_gen = gen_only && !gen.via_train;

  /* the world size the programs were compiled for, before anything collective */
  char *path0 = prog_path(c.dir, 0, main_gen);
  if (main_gen && gen_exists(path0, "--generate")) die(err);
  int tp = 0, pp = 0, dp = 0, cp = 0;
  settle(rt_prog_read_mesh(path0, &tp, &pp, &dp, &cp, err, sizeof err)); /* the same file: printed once */
  if (tp * pp * dp * cp != nranks) {
    char cps[32] = "";
    if (cp > 1) snprintf(cps, sizeof cps, " \u00d7 cp %d", cp);
    fprintf(
        stderr,
        "ppr: error: %s was compiled for %d ranks (tp %d \u00d7 pp %d \u00d7 dp %d%s) but mpirun started %d ranks\n",
        c.dir, tp * pp * dp * cp, tp, pp, dp, cps, nranks);
    if (!rt_comm_uses_mpi(comm))
      fprintf(stderr, "ppr: error: (no MPI launcher: ppr ran as a 1-rank world; run: mpirun -np %d ppr %s)\n",
              tp * pp * dp * cp, c.dir);
    free(path0);
    exit_all(1);
  }
  free(path0);

  char *path = prog_path(c.dir, me, main_gen);
  RtProg *p = NULL;
  rc = rt_prog_load(path, &p, err, sizeof err);
  if (!rc && p->rank != me) {
    snprintf(err, sizeof err, "%s: the listing says 'rank %d': it is rank %d's program, not rank %d's", path, p->rank,
             p->rank, me);
    rc = -1;
  }
  if (!rc && p->generate != main_gen) {
    snprintf(err, sizeof err, "%s: %s", path,
             main_gen ? "not a generation program (schedule " PP_SCHED_FORWARD ")"
                      : "a generation program (schedule " PP_SCHED_FORWARD "): ppr trains with DIR/rankR.prog");
    rc = -1;
  }
  settle(rc);
  int model_tied = 0;
  if (rt_mesh_check(comm, p, c.dir, &model_tied, err, sizeof err)) {
    if (me == 0) print_err(err); /* the same verdict on every rank */
    exit_all(1);
  }
  rt_comm_groups(comm, p);
  /* the cpu device's threads, when ranks share this machine: before it opens */
  RtDevKind kind = RT_DEV_CPU;
  int index = -1, local = rt_comm_local_size(comm);
  int threads = !rt_dev_parse(c.device, &kind, &index) && kind == RT_DEV_CPU ? rt_dev_cpu_share_cores(local) : 0;
  settle(rt_dev_open(c.device, rt_comm_local_rank(comm), &dev, err, sizeof err));
  dev->tf32 = c.tf32;
  dev->onednn = c.onednn;
  rt_comm_use_device(comm, dev, p); /* cuda: NCCL where it can */
  RtExec *x = exec_open(p, c.dir, dev, kind);
  rt_exec_set_comm(x, comm);

  /* --resume: the state checked against this run, then the weights and the moments, before any step */
  int64_t start = 0;
  PprStateData data_id = {0};
  if (!gen_only && (c.save || c.resume)) settle(ppr_state_data(&c, &data_id, err, sizeof err));
  if (c.resume && !gen_only) {
    char *rp = ppr_state_json_path(c.resume), *ro = ppr_state_opt_path(c.resume);
    if (!rp || !ro) die("out of memory");
    rc = ppr_state_check(rp, &c, p, &data_id, &start, err, sizeof err);
    if (!rc) {
      struct stat st;
      if (stat(ro, &st) != 0)
        rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__,
                        "%s: %s: --resume expects the AdamW moments --save writes beside the weights", ro,
                        strerror(errno));
    }
    settle(rc);
    settle(rt_init_load(p, x, c.resume, model_tied, NULL, err, sizeof err));
    settle(rt_init_load_moments(p, x, ro, err, sizeof err));
    if (me == 0 && !c.quiet) {
      printf("ppr: --resume %s: %lld steps done; steps %lld to %lld\n", c.resume, (long long)start,
             (long long)start + 1, (long long)c.steps);
      CHECK_IO(fflush(stdout) == 0, "stdout: write failed: %s", strerror(errno));
    }
    free(rp);
    free(ro);
  } else if (c.init || c.resume) { /* --generate --resume: its weights */
    RtInitInfo info;
    settle(rt_init_load(p, x, c.init ? c.init : c.resume, model_tied, &info, err, sizeof err));
    if (me == 0 && info.skipped) /* every rank skipped the same: the checkpoint is checked whole */
      printf("ppr: --init: skipped %d non-parameter buffer%s (%s%s%s)\n", info.skipped, info.skipped > 1 ? "s" : "",
             info.rotary ? "rotary inv_freq" : "", info.rotary && info.mask ? ", " : "",
             info.mask ? "attention masks" : "");
    if (me == 0 && info.stripped)
      printf("ppr: --init: %s names the params without the prefix '%s' (the listing's checkpoint_prefix)\n", c.init,
             p->ckpt_prefix);
  } else settle(rt_init_seed(p, x, c.seed, err, sizeof err));

  /* the data, unless no step reads it (--val-frac reads its tail), and the validation data */
  RtData *d = NULL, *dval = NULL;
  int want_data = c.steps > start || c.val_frac > 0 || ((gen_only || c.sample_every) && !c.prompt && !c.prompt_ids);
  const char *data_name = !want_data ? "none (0 steps)" : c.data ? c.data : "the built-in text";
  rc = 0;
  if (want_data && c.data) rc = rt_data_open(c.data, &d, err, sizeof err);
  else if (want_data)
    rc = rt_data_from_memory((const unsigned char *)rt_default_text, rt_default_text_len, &d, err, sizeof err);
  if (!rc && d && rt_data_check_vocab(d, data_name, p->vocab, err, sizeof err)) {
    size_t l = strlen(err);
    snprintf(err + l, sizeof err - l, " (%s)%s", path, c.data ? "" : "; pass --data");
    rc = -1;
  }
  if (!rc) rc = data_mask(d, data_name, p, path);
  if (!rc && c.val_frac > 0) rc = split_val(&d, &dval, data_name, c.val_frac, p->seq);
  if (!rc && c.val_data) {
    rc = rt_data_open(c.val_data, &dval, err, sizeof err);
    if (!rc && rt_data_check_vocab(dval, c.val_data, p->vocab, err, sizeof err)) {
      size_t l = strlen(err);
      snprintf(err + l, sizeof err - l, " (--val-data; %s)", path);
      rc = -1;
    }
    if (!rc) rc = data_mask(dval, c.val_data, p, path);
  }
  settle(rc);

  /* text from the model: the prompt, the tokenizer, the generation program beside a training one */
  if (gen_only || c.sample_every) {
    gen_prompt(&c, p, d, &gen);
    if (c.tokenizer) settle(ppr_gen_tokenizer_open(c.tokenizer, p->vocab, &gen.tok, err, sizeof err));
  }
  if (c.sample_every && !gen.via_train) {
    gen_open(&c, p, &gen);
    settle(rt_dev_open(c.device, rt_comm_local_rank(comm), &gen.dev, err, sizeof err));
    gen.dev->tf32 = c.tf32;
    gen.dev->onednn = c.onednn;
    gen.x = exec_open(gen.p, c.dir, gen.dev, kind);
    rt_exec_set_comm(gen.x, comm);
  }
  if (gen_only) {
    if (!c.quiet && me == 0) {
      char how[96];
      if (c.temperature <= 0) snprintf(how, sizeof how, "greedy (temperature 0)");
      else if (c.top_k)
        snprintf(how, sizeof how, "temperature %g, top-k %lld, seed %llu", c.temperature, (long long)c.top_k,
                 (unsigned long long)c.sample_seed);
      else snprintf(how, sizeof how, "temperature %g, seed %llu", c.temperature, (unsigned long long)c.sample_seed);
      printf("ppr: %s: model %s; %lld tokens after a prompt of %d, %s\n", path, p->model, (long long)c.generate,
             gen.nprompt, how);
      CHECK_IO(fflush(stdout) == 0, "stdout: write failed: %s", strerror(errno));
    }
    gen_sample(&c, p, x, &gen, "", (int)c.generate);
    rt_data_close(d);
    rt_exec_close(x);
    rt_dev_close(dev);
    dev = NULL;
    rt_prog_free(p);
    free(path);
    ppr_gen_tokenizer_close(gen.tok);
    free(gen.prompt);
    rt_comm_finalize(comm);
    return 0;
  }

  FILE *log = NULL;
  rc = 0;
  if (c.log && me == 0) {
    log = fopen(c.log, "w");
    if (!log)
      rc = rt_fail_at(err, sizeof err, __FILE__, __LINE__, "%s: cannot open for writing: %s", c.log, strerror(errno));
  }
  settle(rc);

  int64_t tokens = (int64_t)p->micro_batch * p->seq * p->microbatches; /* M: the step's, over all replicas */
  if (!c.quiet && me == 0) {
    char cps[24] = ""; /* context parallelism's degree beside the mesh's others */
    if (p->cp > 1) snprintf(cps, sizeof cps, " cp %d", p->cp);
    if (nranks == 1)
      printf("ppr: %s: model %s, %d params, arena %lld bytes on %s; data %s (%lld tokens); %lld steps of %lld "
             "tokens\n",
             path, p->model, p->nparams, (long long)p->arena, dev->desc, data_name, (long long)rt_data_len(d),
             (long long)c.steps, (long long)tokens);
    else {
      char shared[96] = ""; /* the threads ppr gave each rank, when it did */
      if (threads)
        snprintf(shared, sizeof shared, "; %d thread%s a rank (%d ranks share its machine's CPUs)", threads,
                 threads == 1 ? "" : "s", local);
      printf("ppr: %s: model %s, mesh tp %d pp %d dp %d%s (%d ranks over MPI), %d params in the model; rank 0: %d "
             "params, arena %lld bytes on %s%s; data %s (%lld tokens); %lld steps of %lld tokens\n",
             c.dir, p->model, p->tp, p->pp, p->dp, cps, nranks, p->nmodel ? p->nmodel : p->nparams, p->nparams,
             (long long)p->arena, dev->desc, shared, data_name, (long long)rt_data_len(d), (long long)c.steps,
             (long long)tokens);
    }
    if (dval) {
      char every[64] = "after the last step";
      if (c.eval_every) snprintf(every, sizeof every, "every %lld steps and after the last", (long long)c.eval_every);
      printf("ppr: validation: %s%s (%lld tokens), %lld micro-batches of %d x %d tokens, %s\n",
             c.val_data ? c.val_data : "the last part of ", c.val_data ? "" : data_name, (long long)rt_data_len(dval),
             (long long)c.val_batches, p->micro_batch, p->seq, every);
    }
    CHECK_IO(fflush(stdout) == 0, "stdout: write failed: %s", strerror(errno));
  }
  /* --peak-flops: the step's GEMM FLOPs over the world (every rank's share, from its program) */
  double step_flops = c.peak_flops > 0 ? rt_comm_sum(comm, rt_exec_gemm_flops(x)) : 0;
  if (step_flops > 0 && !c.quiet && me == 0) {
    printf("ppr: %.4g FLOPs per step in GEMMs (%.4g per token); MFU against %d x %.4g FLOP/s\n", step_flops,
           step_flops / (double)tokens, nranks, c.peak_flops);
    CHECK_IO(fflush(stdout) == 0, "stdout: write failed: %s", strerror(errno));
  }
  double *walls = NULL, *comps = NULL;
  if (c.trace) {
    walls = calloc((size_t)c.steps + 1, sizeof *walls);
    comps = calloc((size_t)c.steps + 1, sizeof *comps);
    settle(walls && comps ? 0 : rt_fail_at(err, sizeof err, __FILE__, __LINE__, "out of memory"));
    rt_comm_barrier(comm); /* the common start of every rank's timeline */
    rt_exec_trace(x, rt_now_ms());
  }
  GradSave gs = {p, c.save_grads, 0};
  int64_t done = start, saved = -1;
  int stop_sig = 0, stop_rank = -1;
  double run_t0 = rt_now_ms();
  if (c.steps == start && dval) { /* evaluation alone: the initial (or resumed) weights */
    double vloss = NAN;
    if (rt_exec_eval(x, dval, -1, (int)c.val_batches, &vloss, err, sizeof err)) die(err);
    if (!c.quiet && me == 0) {
      printf("step %lld/%lld  val_loss %.4f\n", (long long)start, (long long)c.steps, vloss);
      CHECK_IO(fflush(stdout) == 0, "stdout: write failed: %s", strerror(errno));
    }
    if (log) {
      fprintf(log, "{\"step\":%lld", (long long)start);
      json_num(log, "val_loss", vloss, "%.9g");
      fputs("}\n", log);
      CHECK_IO(fflush(log) == 0, "%s: write failed: %s", c.log, strerror(errno));
    }
  }
  for (int64_t s = start; s < c.steps; s++) {
    double t0 = rt_now_ms(), loss = 0, gnorm = 0;
    RtHyper h = c.h;
    h.lr = rt_lr_at(&c.sched, s); /* --lr-schedule */
    int rc = rt_exec_step(x, d, s, &h, c.save_grads && !gs.done ? save_grads_hook : NULL, &gs, &loss, &gnorm, err,
                          sizeof err);
    if (rc == -2) die(err); /* this rank's device failed: the job ends */
    if (rc) {               /* the --save-grads hook failed, and every rank learns rank 0's verdict */
      if (me == 0) print_err(err);
      exit_all(1);
    }
    double ms = rt_now_ms() - t0;
    double tps = ms > 0 ? (double)tokens / (ms * 1e-3) : 0;
    if (walls) rt_exec_step_times(x, &walls[s], &comps[s]);
    double mfu = step_flops > 0 && ms > 0 ? step_flops / (ms * 1e-3) / (c.peak_flops * nranks) : NAN;
    /* validation, every --eval-every steps and after the last */
    double vloss = NAN;
    int eval = dval && ((c.eval_every && (s + 1) % c.eval_every == 0) || s + 1 == c.steps);
    if (eval && rt_exec_eval(x, dval, s, (int)c.val_batches, &vloss, err, sizeof err)) die(err);
    int sample = c.sample_every && ((s + 1) % c.sample_every == 0 || s + 1 == c.steps);
    double elapsed = (rt_now_ms() - run_t0) * 1e-3, eta = elapsed / (double)(s + 1 - start) * (double)(c.steps - s - 1);
    if (!c.quiet && me == 0) {
      char m[32] = "", el[32], et[32], v[32] = "";
      if (step_flops > 0) snprintf(m, sizeof m, "  mfu %.2f%%", 100 * mfu);
      if (eval) snprintf(v, sizeof v, "  val_loss %.4f", vloss);
      printf("step %lld/%lld  loss %.4f  grad_norm %.4g  lr %.2e  %.1f ms  %.0f tok/s%s  elapsed %s  eta %s%s\n",
             (long long)(s + 1), (long long)c.steps, loss, gnorm, h.lr, ms, tps, m, duration(el, sizeof el, elapsed),
             duration(et, sizeof et, eta), v);
      CHECK_IO(fflush(stdout) == 0, "stdout: write failed: %s", strerror(errno));
    }
    if (log) {
      fprintf(log, "{\"step\":%lld", (long long)(s + 1));
      json_num(log, "loss", loss, "%.9g");
      json_num(log, "grad_norm", gnorm, "%.9g");
      json_num(log, "lr", h.lr, "%.9g");
      json_num(log, "ms", ms, "%.3f");
      json_num(log, "tokens_per_s", tps, "%.1f");
      if (step_flops > 0) json_num(log, "mfu", mfu, "%.6f");
      json_num(log, "elapsed_s", elapsed, "%.3f");
      json_num(log, "eta_s", eta, "%.3f");
      if (eval) json_num(log, "val_loss", vloss, "%.9g");
      fputs("}\n", log);
      CHECK_IO(fflush(log) == 0, "%s: write failed: %s", c.log, strerror(errno));
    }
    if (sample && isfinite(loss)) gen_during(&c, p, x, &gen, s + 1);
    if (!isfinite(loss)) { /* the loss is the same on every rank: all stop here */
      if (me == 0) {
        snprintf(err, sizeof err, "step %lld: the loss is %g; stopping (nothing saved)", (long long)(s + 1), loss);
        print_err(err);
      }
      exit_all(1);
    }
    done = s + 1;
    if (c.save_every && done % c.save_every == 0 && done < c.steps) {
      save_checkpoint(&c, p, x, done, &data_id);
      saved = done;
    }
    /* a signal: every rank learnt it with the step's loss, and stops here together */
    if (done < c.steps && rt_comm_stopping(comm, &stop_sig, &stop_rank)) break;
  }
  if (log) CHECK_IO(fclose(log) == 0, "%s: close failed: %s", c.log, strerror(errno));
  if (stop_sig && me == 0) {
    printf("ppr: %s on rank %d: stopped after step %lld of %lld%s%s\n", stop_sig == SIGINT ? "SIGINT" : "SIGTERM",
           stop_rank, (long long)done, (long long)c.steps, c.save ? "; saving the weights to " : "",
           c.save ? c.save : "");
    CHECK_IO(fflush(stdout) == 0, "stdout: write failed: %s", strerror(errno));
  }
  if (c.save && saved != done) save_checkpoint(&c, p, x, done, &data_id);
  if (c.trace) write_trace(p, x, c.trace, walls, comps, done);

  free(walls);
  free(comps);
  rt_exec_close(gen.x);
  rt_dev_close(gen.dev);
  rt_prog_free(gen.p);
  ppr_gen_tokenizer_close(gen.tok);
  free(gen.prompt);
  rt_data_close(d);
  rt_data_close(dval);
  rt_exec_close(x);
  rt_dev_close(dev);
  dev = NULL;
  rt_prog_free(p);
  free(path);
  rt_comm_finalize(comm);
  return stop_sig ? EXIT_STOPPED : 0;
}
