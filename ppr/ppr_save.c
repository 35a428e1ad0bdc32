/* ppr_save.c - the output paths checked before the first step; checkpoints and gradients gathered on
 * rank 0 and written there; a checkpoint checked whole (ppr_save.h). */
#include "ppr_save.h"
#include "ppr_log.h"
#include "ppr_pack.h"
#include "ppr_world.h"
#include "rt_util.h"

#include <dirent.h>
#include <jansson.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    if (rt_ckpt_remove_dir(sub, m, sizeof m))
      rc = rt_fail_at(e, elen, __FILE__, __LINE__, "--keep: cannot remove the earlier checkpoint %s: %s", sub, m);
    free(sub);
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return rc;
}

void ppr_check_outputs(const PprCli *c) {
  static const char *const flags[4] = {"--save", "--save-grads", "--log", "--trace"};
  const char *outs[4] = {c->save, c->save_grads, c->log, c->trace};
  char *e = world.err;
  size_t elen = sizeof world.err;
  int rc = 0;
  for (int k = 0; k < 4 && world.me == 0 && !rc; k++)
    if (outs[k] && k == 0 && c->save_every) rc = check_save_every(outs[k], e, elen);
    else if (outs[k] && k == 0 && !rt_ckpt_is_file_path(outs[k])) rc = check_save_dir(outs[k], e, elen);
    else if (outs[k]) rc = check_output(flags[k], outs[k], e, elen);
  /* --save W.safetensors: the training state beside it */
  if (!rc && world.me == 0 && c->save && rt_ckpt_is_file_path(c->save)) {
    char *so = ppr_state_opt_path(c->save), *ss = ppr_state_json_path(c->save);
    if (!so || !ss) ppr_die("out of memory");
    rc = check_output("--save", so, e, elen) || check_output("--save", ss, e, elen) ? -1 : 0;
    free(so);
    free(ss);
  }
  /* a --save folder copies --tokenizer at each save: readable now, not after the run */
  if (!rc && world.me == 0 && c->save && !rt_ckpt_is_file_path(c->save) && c->tokenizer && access(c->tokenizer, R_OK))
    rc = rt_fail_at(e, elen, __FILE__, __LINE__, "--tokenizer %s: cannot read it (a --save folder gets a copy): %s",
                    c->tokenizer, strerror(errno));
  if (!rc && world.me == 0) rc = ppr_log_check(c, e, elen); /* a log of another run is not appended to */
  if (!rc && world.me == 0 && c->stop_file && access(c->stop_file, F_OK) == 0)
    rc = rt_fail_at(e, elen, __FILE__, __LINE__,
                    "--stop-file %s exists already: remove it (the run would stop after its first step)", c->stop_file);
  ppr_settle(rc);
}

/* ---- gathering params to rank 0 (--save, --save-grads) ----------------------------------- */

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

/* What a param's block says besides its name, dims and values (the listing's `shard` facts). */
enum { SH_SHARDED, SH_DIM, SH_START, SH_DENSE, SH_TIED, SH_PARTS, SH_GROUP, SH_N };

/* What --save writes besides the tensors (NULL for --save-grads: one safetensors file). */
typedef struct {
  int folder;                       /* a checkpoint folder (rt_ckpt_write_dir), else one file */
  int tied_head;                    /* also write the tied embedding as lm_head.weight */
  uint64_t shard_bytes;             /* a folder's shard size */
  const char *hf_config;            /* the listing's: config.json */
  const char *name_or_path, *model; /* config.json's _name_or_path: --model-name, or the model's name */
  int ncopy;                        /* the hub files written (HubFiles) */
  const char *const *copy_name, *const *copy_data;
  const size_t *copy_len;
  /* the training state (rank 0's; NULL: none): trainer_state.json's text, and beside one file
   * the paths of the optimizer file and of trainer_state.json */
  const char *state_json, *opt_path, *state_path;
} SaveOpts;

/* The params this rank owns (none on dp_rank or cp_rank > 0: replicas) into b, in nreg groups: the
 * region's values, then the AdamW moments. Each: name, dims, the SH_ facts, the floats. */
static int pack_params(const RtProg *p, RtExec *x, int region, int nreg, PprBuf *b, char *e, size_t elen) {
  static const int moments[2] = {RT_REG_ADAM_M, RT_REG_ADAM_V};
  static const char *const prefix[3] = {"", "exp_avg.", "exp_avg_sq."};
  int mine = p->dp_rank == 0 && p->cp_rank == 0;
  uint64_t count = 0;
  int64_t most = 1;
  for (int i = 0; i < p->nparams && mine; i++) {
    count += p->params[i].owned;
    if (p->params[i].owned && p->params[i].numel > most) most = p->params[i].numel;
  }
  float *host = malloc((size_t)most * sizeof *host);
  int rc = host ? 0 : rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
  ppr_put_u64(b, count * (uint64_t)nreg);
  for (int g = 0; g < nreg; g++) {
    int reg = g ? moments[g - 1] : region;
    /* ZeRO-1: the summed gradients and the moments are sharded over the data-parallel group: every
     * member takes part in gathering them whole, whether it writes them or not */
    if (p->zero && reg != RT_REG_PARAMS && rt_exec_zero_gather(x, reg, e, elen) && !rc) rc = -1;
    for (int i = 0; i < p->nparams && mine && !rc; i++) {
      const RtParam *q = &p->params[i];
      if (!q->owned) continue;
      size_t pl = strlen(prefix[g]), nl = pl + strlen(q->name);
      ppr_put_u64(b, nl);
      char *name = malloc(nl + 1);
      if (!name) {
        rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
        break;
      }
      sprintf(name, "%s%s", prefix[g], q->name);
      ppr_put(b, name, nl);
      free(name);
      ppr_put_u64(b, (uint64_t)q->ndim);
      ppr_put(b, q->dims, (size_t)q->ndim * sizeof *q->dims);
      int64_t sh[SH_N] = {q->sharded, q->shard_dim, q->shard_start, q->shard_dense, q->tied, q->shard_parts, g};
      ppr_put(b, sh, sizeof sh);
      rc = rt_exec_read_param(x, i, reg, host, e, elen);
      ppr_put(b, host, (size_t)q->numel * sizeof(float));
    }
  }
  rt_exec_zero_release(x);
  free(host);
  if (!rc && b->oom) rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
  return rc;
}

/* A new tensor of the file from a block's facts; a sharded one gets its dense buffer. */
static int new_tensor(OutTensor *t, const char *name, size_t nl, int ndim, const int64_t *dims, const int64_t *sh,
                      const float *data, int64_t numel) {
  t->name = malloc(nl + 1);
  if (!t->name) return -1;
  memcpy(t->name, name, nl);
  t->name[nl] = 0;
  t->ndim = ndim;
  t->tied = (int)sh[SH_TIED];
  t->group = (int)sh[SH_GROUP];
  memcpy(t->shape, dims, (size_t)ndim * sizeof *dims);
  t->data = data;
  if (!sh[SH_SHARDED]) return 0;
  t->sharded = 1;
  t->dim = (int)sh[SH_DIM];
  t->shape[t->dim] = sh[SH_DENSE];
  t->dense = calloc((size_t)(numel / dims[t->dim] * sh[SH_DENSE]) + 1, sizeof *t->dense);
  t->got = calloc((size_t)sh[SH_DENSE], 1);
  t->data = t->dense;
  return t->dense && t->got ? 0 : -1;
}

/* A shard into its dense tensor: local row k of block o is dense row start + k; rows at or past the
 * dense count are padding. In P parts: P times the blocks, each of len/P local and dense/P dense
 * rows (block o of the local tensor is part o % P). */
static void place_shard(OutTensor *t, int ndim, const int64_t *dims, const int64_t *sh, const float *data) {
  int64_t P = sh[SH_PARTS], len = dims[t->dim] / P, start = sh[SH_START], dense = sh[SH_DENSE] / P, outer = P,
          inner = 1;
  for (int d = 0; d < t->dim; d++) outer *= dims[d];
  for (int d = t->dim + 1; d < ndim; d++) inner *= dims[d];
  int64_t real = dense - start < len ? dense - start : len;
  for (int64_t b = 0; b < P; b++)
    for (int64_t k = 0; k < real; k++) t->got[b * dense + start + k] += t->got[b * dense + start + k] < 255;
  for (int64_t o = 0; o < outer; o++)
    memcpy(t->dense + (o * dense + start) * inner, data + o * len * inner, (size_t)(real * inner) * sizeof(float));
}

/* Rank 0: the gathered blocks (sizes[r] bytes from rank r) as the file's tensors, shards assembled
 * and every dense row checked to come from exactly one shard. */
static int unpack_tensors(const unsigned char *all, const size_t *sizes, const char *path, OutTensor *ot, size_t *nout,
                          char *e, size_t elen) {
  int rc = 0;
  size_t at = 0;
  for (int r = 0; r < world.nranks && !rc; at += sizes[r++]) {
    const unsigned char *q = all + at;
    uint64_t cnt = ppr_get_u64(&q);
    for (uint64_t j = 0; j < cnt && !rc; j++) {
      size_t nl = (size_t)ppr_get_u64(&q);
      const char *name = (const char *)q;
      q += (nl + 7) / 8 * 8;
      int ndim = (int)ppr_get_u64(&q);
      int64_t dims[RT_MAX_NDIM], sh[SH_N], numel = 1;
      memcpy(dims, q, (size_t)ndim * 8);
      q += (size_t)ndim * 8;
      memcpy(sh, q, sizeof sh);
      q += sizeof sh;
      const float *data = (const float *)(const void *)q;
      for (int d = 0; d < ndim; d++) numel *= dims[d];
      q += ((size_t)numel * 4 + 7) / 8 * 8;
      OutTensor *t = NULL;
      for (size_t o = 0; o < *nout && !t; o++)
        if (strlen(ot[o].name) == nl && !memcmp(ot[o].name, name, nl)) t = &ot[o];
      if (t && (!t->sharded || !sh[SH_SHARDED] || t->dim != (int)sh[SH_DIM] || t->shape[t->dim] != sh[SH_DENSE]))
        rc = rt_fail_at(e, elen, __FILE__, __LINE__, "%s: tensor %s is owned by two ranks", path, t->name);
      else if (!t && new_tensor(t = &ot[(*nout)++], name, nl, ndim, dims, sh, data, numel))
        rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
      else if (t->sharded) place_shard(t, ndim, dims, sh, data);
    }
  }
  for (size_t o = 0; o < *nout && !rc; o++)
    for (int64_t k = 0; ot[o].sharded && k < ot[o].shape[ot[o].dim] && !rc; k++)
      if (ot[o].got[k] != 1)
        rc = rt_fail_at(e, elen, __FILE__, __LINE__, "%s: row %lld of dim %d of tensor %s is in %d shards", path,
                        (long long)k, ot[o].dim, ot[o].name, ot[o].got[k]);
  return rc;
}

/* The tensors as the writers take them: names, ndims, shapes and data side by side. */
typedef struct {
  const char **names;
  int *ndims;
  const int64_t **shapes;
  const float **data;
  size_t n;
} TensorList;

static void list_add(TensorList *l, const char *name, const OutTensor *t) {
  l->names[l->n] = name;
  l->ndims[l->n] = t->ndim;
  l->shapes[l->n] = t->shape;
  l->data[l->n++] = t->data;
}

/* Rank 0: the weights (group 0; with --save-tied-head the tied embedding as lm_head.weight too),
 * then the moments exp_avg.*, exp_avg_sq.*, written as one file or a checkpoint folder. */
static int write_tensors(const OutTensor *ot, size_t nout, const char *path, const SaveOpts *so, char *e, size_t elen) {
  TensorList w = {calloc(nout + 3, sizeof(char *)), calloc(nout + 3, sizeof(int)), calloc(nout + 3, sizeof(void *)),
                  calloc(nout + 3, sizeof(void *)), 0};
  int rc = w.names && w.ndims && w.shapes && w.data ? 0 : rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
  for (size_t o = 0; o < nout && !rc; o++) {
    if (ot[o].group) continue;
    list_add(&w, ot[o].name, &ot[o]);
    /* the head under its own name too, so that strict loading finds it */
    if (so && so->tied_head && ot[o].tied && strcmp(ot[o].name, "lm_head.weight"))
      list_add(&w, "lm_head.weight", &ot[o]);
  }
  TensorList m = {w.names + w.n, w.ndims + w.n, w.shapes + w.n, w.data + w.n, 0};
  for (int g = 1; g <= 2 && !rc; g++)
    for (size_t o = 0; o < nout; o++)
      if (ot[o].group == g) list_add(&m, ot[o].name, &ot[o]);
  int state = so && so->state_json, nw = (int)w.n, nm = (int)m.n;
  if (!rc && so && so->folder) {
    RtCkptOpts co = {.shard_bytes = so->shard_bytes,
                     .hf_config = so->hf_config,
                     .name_or_path = so->name_or_path,
                     .model = so->model,
                     .ncopy = so->ncopy,
                     .copy_name = so->copy_name,
                     .copy_data = so->copy_data,
                     .copy_len = so->copy_len,
                     .nopt = nm,
                     .opt_names = m.names,
                     .opt_ndims = m.ndims,
                     .opt_shapes = m.shapes,
                     .opt_data = m.data,
                     .state_json = state ? so->state_json : NULL};
    rc = rt_ckpt_write_dir(path, nw, w.names, w.ndims, w.shapes, w.data, &co, e, elen);
  } else if (!rc) { /* one file: the state first, the weights last (a complete weights file has its state) */
    if (state)
      rc = rt_st_write(so->opt_path, nm, m.names, m.ndims, m.shapes, m.data, e, elen) ||
                   ppr_state_write(so->state_path, so->state_json, e, elen)
               ? -1
               : 0;
    if (!rc) rc = rt_st_write(path, nw, w.names, w.ndims, w.shapes, w.data, e, elen);
  }
  free(w.names);
  free(w.ndims);
  free(w.shapes);
  free(w.data);
  return rc;
}

/* Gathers the params this rank owns (not the copies and replicas; dp_rank 0, cp_rank 0 only) on rank
 * 0, which writes them to path: by rank, then param index. The shards of a sharded param (`shard` in
 * the listing) are put together into the dense tensor (padding rows dropped), written under its name
 * where its first shard comes. Collective; every rank returns rank 0's verdict (the message only on
 * rank 0). */
static int save_params(const RtProg *p, RtExec *x, const char *path, int region, const SaveOpts *so, char *e,
                       size_t elen) {
  PprBuf b = {0};
  int rc = pack_params(p, x, region, so && so->state_json ? 3 : 1, &b, e, elen);
  if (!rt_comm_all_ok(world.comm, rc == 0)) { /* some rank could not pack: no gather */
    free(b.b);
    if (!rc) rt_fail_at(e, elen, __FILE__, __LINE__, "another rank ran out of memory");
    return -1;
  }
  unsigned char *all = NULL;
  size_t *sizes = calloc((size_t)world.nranks, sizeof *sizes);
  if (!sizes) ppr_die("out of memory");
  rc = rt_comm_gather(world.comm, b.b, b.n, &all, sizes, e, elen);
  free(b.b);
  if (world.me == 0 && !rc) {
    size_t total = 0, at = 0, nout = 0;
    for (int r = 0; r < world.nranks; r++) total += ppr_get_u64(&(const unsigned char *){all + at}), at += sizes[r];
    OutTensor *ot = calloc(total + 1, sizeof *ot);
    rc = ot ? unpack_tensors(all, sizes, path, ot, &nout, e, elen)
            : rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
    if (!rc) rc = write_tensors(ot, nout, path, so, e, elen);
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
  rt_comm_bcast(world.comm, &verdict, sizeof verdict, 0);
  if (verdict && world.me != 0 && e && elen) e[0] = 0;
  return verdict ? -1 : 0;
}

int ppr_save_grads_hook(void *ctx, RtExec *x, char *e, size_t elen) {
  PprGradSave *g = ctx;
  if (g->done) return 0;
  g->done = 1;
  rt_comm_set_what(world.comm, "--save-grads: the gradients to rank 0");
  return save_params(g->p, x, g->path, RT_REG_GRADS, NULL, e, elen);
}

/* The hub files (rt_ckpt_hub_files) a checkpoint folder gets: the tokenizer's from the folder of a
 * --tokenizer tokenizer.json, else from the folder the weights came from (--resume's, else --init's),
 * as the generation config. Read at the run's first save and kept, so that every later save has
 * them when --keep has removed the folder they came from. */
typedef struct {
  int read, n;
  const char *name[8];
  char *data[8];
  size_t len[8];
} HubFiles;

/* The folder holding the checkpoint at path (a folder, or the folder of a file); NULL: none */
static char *folder_of(const char *path) {
  struct stat st;
  if (!path || stat(path, &st) != 0) return NULL;
  if (S_ISDIR(st.st_mode)) return strdup(path);
  const char *slash = strrchr(path, '/');
  return slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
}

/* dir/name when that is a regular file (malloc'ed), else NULL */
static char *file_in(const char *dir, const char *name) {
  char *f = dir ? malloc(strlen(dir) + strlen(name) + 2) : NULL;
  struct stat st;
  if (f) sprintf(f, "%s/%s", dir, name);
  if (f && stat(f, &st) == 0 && S_ISREG(st.st_mode)) return f;
  free(f);
  return NULL;
}

/* Reads the run's hub files into h once. 0, or -1 with a message. */
static int hub_files(const PprCli *c, HubFiles *h, char *e, size_t elen) {
  if (h->read) return 0;
  h->read = 1;
  size_t tl = c->tokenizer ? strlen(c->tokenizer) : 0;
  int tok_json = tl > 5 && !strcmp(c->tokenizer + tl - 5, ".json"); /* not llm.c's tokenizer file */
  char *weights = folder_of(c->resume ? c->resume : c->init), *tokdir = tok_json ? folder_of(c->tokenizer) : NULL;
  int rc = 0;
  for (int i = 0; rt_ckpt_hub_files[i] && h->n < 8 && !rc; i++) {
    const char *name = rt_ckpt_hub_files[i];
    int tokenizer_file = strncmp(name, "generation_config", 17) != 0;
    char *src = !tokenizer_file || !tok_json      ? file_in(weights, name)
                : !strcmp(name, "tokenizer.json") ? strdup(c->tokenizer)
                                                  : file_in(tokdir, name);
    if (src && !(h->data[h->n] = rt_util_read_file(src, name, (size_t)1 << 31, &h->len[h->n], e, elen))) rc = -1;
    else if (src) h->name[h->n++] = name;
    free(src);
  }
  free(weights);
  free(tokdir);
  return rc;
}

void ppr_save_checkpoint(const PprCli *c, const RtProg *p, RtExec *x, int64_t done, const PprStateData *data_id) {
  size_t n = strlen(c->save);
  char *path = malloc(n + 32), *json = NULL;
  if (!path) ppr_die("out of memory");
  if (c->save_every) snprintf(path, n + 32, "%s/step-%06lld", c->save, (long long)done);
  else snprintf(path, n + 32, "%s", c->save);
  char *opt = ppr_state_opt_path(path), *st = ppr_state_json_path(path);
  if (!opt || !st) ppr_die("out of memory");
  char *e = world.err;
  size_t elen = sizeof world.err;
  int rc = 0, me = world.me;
  if (me == 0 && !(json = ppr_state_json(c, p, data_id, done)))
    rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
  if (!rc && me == 0 && c->save_every && mkdir(c->save, 0777) != 0 && errno != EEXIST)
    rc = rt_fail_at(e, elen, __FILE__, __LINE__, "--save %s: cannot create the folder: %s", c->save, strerror(errno));
  if (!rc && me == 0 && c->save_every) rc = check_save_dir(path, e, elen);
  ppr_settle(rc);
  rt_comm_set_what(world.comm, "--save: the weights to rank 0");
  static HubFiles hub; /* rank 0's, for every save of the run */
  if (me == 0 && !rt_ckpt_is_file_path(path) && hub_files(c, &hub, e, elen)) {
    ppr_print_err(e);
    ppr_exit_all(1);
  }
  SaveOpts so = {.folder = !rt_ckpt_is_file_path(path),
                 .tied_head = c->save_tied_head,
                 .shard_bytes = c->save_shard_size,
                 .hf_config = p->hf_config,
                 .name_or_path = c->model_name,
                 .model = p->model,
                 .ncopy = hub.n,
                 .copy_name = hub.name,
                 .copy_data = (const char *const *)hub.data,
                 .copy_len = hub.len,
                 .state_json = me == 0 ? json : "",
                 .opt_path = opt,
                 .state_path = st};
  if (save_params(p, x, path, RT_REG_PARAMS, &so, e, elen)) { /* rank 0's verdict, on every rank */
    if (me == 0) ppr_print_err(e);
    ppr_exit_all(1);
  }
  if (c->keep) ppr_settle_root(me == 0 ? keep_last(c->save, c->keep, e, elen) : 0); /* rank 0 prunes */
  if (!c->quiet && me == 0 && c->save_every) {
    printf("ppr: saved %s (step %lld)\n", path, (long long)done);
    ppr_flush_stdout();
  }
  free(json);
  free(opt);
  free(st);
  free(path);
}

/* The training state beside ckpt, when it is there: the moments' checksums, trainer_state.json's
 * JSON. Appends what it checked to what. 0, or -1 with the message in world.err. */
static int verify_state(const char *ckpt, char *what, size_t wlen) {
  char *opt = ppr_state_opt_path(ckpt), *st = ppr_state_json_path(ckpt);
  if (!opt || !st) ppr_die("out of memory");
  int rc = 0, n = 0;
  RtStFile *f = NULL;
  if (access(opt, F_OK) == 0) {
    rc = rt_st_open(opt, &f, world.err, sizeof world.err);
    for (int i = 0; !rc && i < rt_st_count(f); i++) rc = rt_st_verify(f, i, world.err, sizeof world.err);
    if (!rc) n = rt_st_has_checksums(f) ? rt_st_count(f) : 0;
    if (!rc)
      snprintf(what + strlen(what), wlen - strlen(what), "; %s: %d tensors, %d with checksums", opt, rt_st_count(f), n);
    rt_st_close(f);
  }
  json_error_t je;
  json_t *j = !rc && access(st, F_OK) == 0 ? json_load_file(st, JSON_REJECT_DUPLICATES, &je) : NULL;
  if (!rc && access(st, F_OK) == 0 && !json_is_object(j))
    rc = rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__, "%s: line %d: not a JSON object: %s", st, je.line,
                    j ? "another value" : je.text);
  else if (j) snprintf(what + strlen(what), wlen - strlen(what), "; %s: JSON", st);
  json_decref(j);
  free(opt);
  free(st);
  return rc;
}

int ppr_verify(const char *ckpt) {
  RtCkpt *c = NULL;
  int n = 0;
  char what[4096] = "";
  int rc = rt_ckpt_open(ckpt, &c, world.err, sizeof world.err);
  if (!rc) rc = rt_ckpt_verify(c, &n, world.err, sizeof world.err);
  if (!rc) rc = verify_state(ckpt, what, sizeof what);
  if (rc) {
    ppr_print_err(world.err);
    rt_ckpt_close(c);
    return 1;
  }
  printf("ppr: --verify %s: %d tensors in %d file%s, %s%s\n", ckpt, rt_ckpt_count(c), rt_ckpt_nfiles(c),
         rt_ckpt_nfiles(c) == 1 ? "" : "s",
         n == rt_ckpt_count(c) ? "every checksum matches"
         : n                   ? "the checksums there match"
                               : "no checksums (another program wrote it): its "
                                 "structure alone was checked",
         what);
  rt_ckpt_close(c);
  return 0;
}
