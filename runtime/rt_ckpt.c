/* rt_ckpt.c - checkpoints as Hugging Face keeps them: one safetensors file, a sharded checkpoint's index
 * (model.safetensors.index.json) or a model folder, read as one set of tensors; and the folder written
 * (model.safetensors, or shards and their index, and config.json) through a temporary folder and a rename. */
#include "pp_json.h"
#include "rt_io.h"
#include "rt_st.h"
#include "rt_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_NAME  "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define CONFIG_NAME "config.json"

struct RtCkpt {
  char *path; /* as given */
  int nfiles;
  RtStFile **files;
  char **fnames; /* per file: its path */
  int n;         /* tensors, over all files */
  StIdx *sorted; /* by name; idx: the tensor's index into at[] */
  struct {
    int file, idx;
  } * at;
};

/* ---------------- helpers ---------------- */

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

static char *join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  size_t k = a;
  if (a && dir[a - 1] != '/') p[k++] = '/';
  memcpy(p + k, name, b + 1);
  return p;
}

/* The directory part of path ("." for none), malloc'ed. */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return strdup(".");
  if (slash == path) return strdup("/");
  char *d = malloc((size_t)(slash - path) + 1);
  if (!d) return NULL;
  memcpy(d, path, (size_t)(slash - path));
  d[slash - path] = 0;
  return d;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---------------- reading ---------------- */

void rt_ckpt_close(RtCkpt *c) {
  if (!c) return;
  for (int i = 0; i < c->nfiles; i++) {
    rt_st_close(c->files[i]);
    free(c->fnames[i]);
  }
  free(c->files);
  free(c->fnames);
  free(c->sorted);
  free(c->at);
  free(c->path);
  free(c);
}

/* Adds the file at fpath (opened) to c; its index in c->files. */
static int add_file(RtCkpt *c, const char *fpath, const char *shown, char *err, size_t errlen) {
  RtStFile **nf = realloc(c->files, (size_t)(c->nfiles + 1) * sizeof *nf);
  if (nf) c->files = nf;
  char **nn = realloc(c->fnames, (size_t)(c->nfiles + 1) * sizeof *nn);
  if (nn) c->fnames = nn;
  if (!nf || !nn) {
    rt_util_set_err(err, errlen, "%s: out of memory", c->path);
    return -1;
  }
  c->fnames[c->nfiles] = strdup(fpath);
  c->files[c->nfiles] = NULL;
  if (!c->fnames[c->nfiles]) {
    rt_util_set_err(err, errlen, "%s: out of memory", c->path);
    return -1;
  }
  c->nfiles++;
  if (rt_st_open(fpath, &c->files[c->nfiles - 1], err, errlen)) {
    if (shown) { /* a shard of an index: say which index named it */
      size_t l = strlen(err);
      if (l + 64 < errlen) snprintf(err + l, errlen - l, " (a shard named by %s)", shown);
    }
    return -1;
  }
  return c->nfiles - 1;
}

/* The merged name table: every tensor of every file, sorted by name; a name in two files is an error. */
static int build_table(RtCkpt *c, char *err, size_t errlen) {
  int n = 0;
  for (int f = 0; f < c->nfiles; f++) n += rt_st_count(c->files[f]);
  c->n = n;
  c->sorted = malloc((size_t)(n + 1) * sizeof *c->sorted);
  c->at = malloc((size_t)(n + 1) * sizeof *c->at);
  if (!c->sorted || !c->at) {
    rt_util_set_err(err, errlen, "%s: out of memory", c->path);
    return -1;
  }
  int k = 0;
  for (int f = 0; f < c->nfiles; f++)
    for (int i = 0; i < rt_st_count(c->files[f]); i++, k++) {
      c->at[k].file = f;
      c->at[k].idx = i;
      c->sorted[k].name = rt_st_name(c->files[f], i);
      c->sorted[k].idx = k;
    }
  qsort(c->sorted, (size_t)n, sizeof *c->sorted, rt_st_cmp_idx);
  for (int i = 1; i < n; i++)
    if (!strcmp(c->sorted[i - 1].name, c->sorted[i].name)) {
      rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "' is in two shards: %s and %s", c->path, c->sorted[i].name,
                      c->fnames[c->at[c->sorted[i - 1].idx].file], c->fnames[c->at[c->sorted[i].idx].file]);
      return -1;
    }
  return 0;
}

/* A sharded checkpoint's index: {"metadata": {...}, "weight_map": {tensor: shard file}}; the shards
 * lie beside it. Every shard named is opened once; each tensor of the map is in its shard, and each
 * tensor of a shard is in the map under that shard. */
static int open_index(RtCkpt *c, const char *ipath, char *err, size_t errlen) {
  size_t size;
  char *text = rt_util_read_file(ipath, NULL, RT_ST_MAX_HEADER, &size, err, errlen);
  if (!text) return -1;
  json_error_t je;
  json_t *root = json_loadb(text, size, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!root) {
    rt_util_set_err(err, errlen, "%s: not a checkpoint index: JSON error at line %d: %s", ipath, je.line, je.text);
    return -1;
  }
  int rc = -1;
  char *dir = dir_of(ipath), *fp = NULL;
  json_t *wm = json_object_get(root, "weight_map");
  const char *key;
  json_t *v;
  if (!dir) {
    rt_util_set_err(err, errlen, "%s: out of memory", ipath);
    goto done;
  }
  if (!json_is_object(root) || !json_is_object(wm) || json_object_size(wm) == 0) {
    rt_util_set_err(err, errlen,
                    "%s: not a checkpoint index: expected a JSON object with a non-empty \"weight_map\" object "
                    "(tensor name -> shard file)",
                    ipath);
    goto done;
  }
  json_object_foreach(wm, key, v) {
    const char *s = json_string_value(v);
    if (!s || !*s || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, "..")) {
      rt_util_set_err(err, errlen,
                      "%s: weight_map: tensor '" NAME_FMT "': expected the file name of a shard beside the index "
                      "(no '/'), found %s%.200s%s",
                      ipath, key, s ? "'" : "", s ? s : "a non-string", s ? "'" : "");
      goto done;
    }
    int known = 0;
    for (int f = 0; f < c->nfiles && !known; f++) known = !strcmp(strrchr(c->fnames[f], '/') + 1, s);
    if (known) continue;
    free(fp);
    fp = join(dir, s);
    if (!fp) {
      rt_util_set_err(err, errlen, "%s: out of memory", ipath);
      goto done;
    }
    if (add_file(c, fp, ipath, err, errlen) < 0) goto done;
  }
  /* the map and the shards agree */
  json_object_foreach(wm, key, v) {
    const char *s = json_string_value(v);
    int f = 0;
    while (strcmp(strrchr(c->fnames[f], '/') + 1, s)) f++;
    if (rt_st_find(c->files[f], key) < 0) {
      rt_util_set_err(err, errlen, "%s: weight_map puts tensor '" NAME_FMT "' in %s, which does not hold it", ipath,
                      key, c->fnames[f]);
      goto done;
    }
  }
  for (int f = 0; f < c->nfiles; f++)
    for (int i = 0; i < rt_st_count(c->files[f]); i++) {
      const char *name = rt_st_name(c->files[f], i);
      const char *s = json_string_value(json_object_get(wm, name));
      if (!s) {
        rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "' of shard %s is not in the index's weight_map", ipath,
                        name, c->fnames[f]);
        goto done;
      }
      if (strcmp(strrchr(c->fnames[f], '/') + 1, s)) {
        rt_util_set_err(err, errlen, "%s: tensor '" NAME_FMT "' is in two shards: %s and %s (the weight_map's)", ipath,
                        name, c->fnames[f], s);
        goto done;
      }
    }
  rc = 0;
done:
  json_decref(root);
  free(dir);
  free(fp);
  return rc;
}

int rt_ckpt_open(const char *path, RtCkpt **out, char *err, size_t errlen) {
  if (out) *out = NULL;
  if (!path || !out) {
    rt_util_set_err(err, errlen, "rt_ckpt_open: NULL %s", path ? "out" : "path");
    return -1;
  }
  RtCkpt *c = calloc(1, sizeof *c);
  if (!c || !(c->path = strdup(path))) {
    free(c);
    rt_util_set_err(err, errlen, "%s: out of memory", path);
    return -1;
  }
  int rc;
  if (is_dir(path)) { /* a model folder: its model.safetensors, else its index */
    char *single = join(path, SINGLE_NAME), *index = join(path, INDEX_NAME);
    if (!single || !index) {
      rt_util_set_err(err, errlen, "%s: out of memory", path);
      rc = -1;
    } else if (is_file(single)) {
      rc = add_file(c, single, NULL, err, errlen) < 0;
    } else if (is_file(index)) {
      rc = open_index(c, index, err, errlen);
    } else {
      rt_util_set_err(err, errlen,
                      "%s: a folder without %s or %s: expected a checkpoint (a .safetensors file, an index, or "
                      "a model folder)",
                      path, SINGLE_NAME, INDEX_NAME);
      rc = -1;
    }
    free(single);
    free(index);
  } else if (ends_with(path, ".json")) {
    rc = open_index(c, path, err, errlen);
  } else {
    rc = add_file(c, path, NULL, err, errlen) < 0;
  }
  if (!rc) rc = build_table(c, err, errlen);
  if (rc) {
    rt_ckpt_close(c);
    return -1;
  }
  *out = c;
  return 0;
}

int rt_ckpt_count(const RtCkpt *c) { return c ? c->n : 0; }

const char *rt_ckpt_name(const RtCkpt *c, int i) {
  if (!c || i < 0 || i >= c->n) return NULL;
  return rt_st_name(c->files[c->at[i].file], c->at[i].idx);
}

int rt_ckpt_find(const RtCkpt *c, const char *name) {
  if (!c || !name) return -1;
  int lo = 0, hi = c->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, r = strcmp(name, c->sorted[mid].name);
    if (r == 0) return c->sorted[mid].idx;
    if (r < 0) hi = mid - 1;
    else lo = mid + 1;
  }
  return -1;
}

const RtStFile *rt_ckpt_file(const RtCkpt *c, int i, int *idx) {
  if (!c || i < 0 || i >= c->n) return NULL;
  if (idx) *idx = c->at[i].idx;
  return c->files[c->at[i].file];
}

int rt_ckpt_nfiles(const RtCkpt *c) { return c ? c->nfiles : 0; }

int rt_ckpt_verify(const RtCkpt *c, int *nsummed, char *err, size_t errlen) {
  int n = 0;
  for (int k = 0; k < c->nfiles; k++) {
    if (!rt_st_has_checksums(c->files[k])) continue;
    for (int i = 0; i < rt_st_count(c->files[k]); i++, n++)
      if (rt_st_verify(c->files[k], i, err, errlen)) return -1;
  }
  if (nsummed) *nsummed = n;
  return 0;
}

/* ---------------- writing a folder ---------------- */

const char *const rt_ckpt_hub_files[] = {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                         "special_tokens_map.json", NULL};

static int hub_file(const char *name) {
  for (int i = 0; rt_ckpt_hub_files[i]; i++)
    if (!strcmp(name, rt_ckpt_hub_files[i])) return 1;
  return 0;
}

/* The files a checkpoint folder holds (what --save writes; the training state beside the weights
 * in an older folder): a folder of only these may be replaced. */
static int ckpt_entry(const char *name) {
  if (!strcmp(name, SINGLE_NAME) || !strcmp(name, INDEX_NAME) || !strcmp(name, CONFIG_NAME) || hub_file(name) ||
      !strcmp(name, RT_CKPT_OPTIMIZER_NAME) || !strcmp(name, RT_CKPT_STATE_NAME) || !strcmp(name, RT_CKPT_TRAINER_DIR))
    return 1;
  unsigned a, b;
  int end = 0;
  return sscanf(name, "model-%5u-of-%5u.safetensors%n", &a, &b, &end) == 2 && name[end] == 0;
}

/* Removes the entries of a checkpoint folder (or a temporary one of ours), its trainer/ with its
 * files, then the folder. */
static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        char *p = join(dir, e->d_name);
        if (p && !strcmp(e->d_name, RT_CKPT_TRAINER_DIR) && is_dir(p)) remove_tree(p);
        else if (p) unlink(p);
        free(p);
      }
    closedir(d);
  }
  rmdir(dir);
}

/* Whether name may be in a checkpoint's trainer/ folder */
static int trainer_entry(const char *name) {
  return !strcmp(name, RT_CKPT_OPTIMIZER_NAME) || !strcmp(name, RT_CKPT_STATE_NAME);
}

/* Folder path holds only what entry() accepts (what: what they are, for the message); a checkpoint
 * folder's trainer/ in turn only the training state. 0, or -1 with a message. */
static int only_entries(const char *path, int (*entry)(const char *), const char *what, char *err, size_t errlen) {
  DIR *d = opendir(path);
  if (!d) {
    rt_util_set_err(err, errlen, "%s: cannot read the folder: %s", path, strerror(errno));
    return -1;
  }
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) && !rc) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (!entry(e->d_name)) {
      rt_util_set_err(err, errlen,
                      "%s: the folder holds %.200s, which is not %s: ppr replaces a checkpoint folder whole, so it "
                      "writes only a new folder or one holding a checkpoint alone",
                      path, e->d_name, what);
      rc = -1;
    } else if (entry == ckpt_entry && !strcmp(e->d_name, RT_CKPT_TRAINER_DIR)) {
      char *sub = join(path, e->d_name);
      if (sub && is_dir(sub)) rc = only_entries(sub, trainer_entry, "a checkpoint's training state", err, errlen);
      free(sub);
    }
  }
  closedir(d);
  return rc;
}

int rt_ckpt_check_dir(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT) return 0;
    rt_util_set_err(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    rt_util_set_err(err, errlen,
                    "%s: exists and is not a folder (a --save path not ending in .safetensors is a checkpoint folder)",
                    path);
    return -1;
  }
  return only_entries(path, ckpt_entry, "a checkpoint's file", err, errlen);
}

int rt_ckpt_remove_dir(const char *path, char *err, size_t errlen) {
  if (rt_ckpt_check_dir(path, err, errlen)) return -1;
  remove_tree(path);
  if (!is_dir(path)) return 0;
  rt_util_set_err(err, errlen, "%s: cannot remove the folder: %s", path, strerror(errno));
  return -1;
}

/* Writes n bytes to path (a new file in our temporary folder), fsync'ed. */
static int write_bytes(const char *path, const char *text, size_t n, char *err, size_t errlen) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    rt_util_set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    return -1;
  }
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, text + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  int ok = done == n && fsync(fd) == 0;
  if (close(fd) != 0) ok = 0;
  if (!ok) rt_util_set_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
  return ok ? 0 : -1;
}

static int write_text(const char *path, const char *text, char *err, size_t errlen) {
  return write_bytes(path, text, strlen(text), err, errlen);
}

/* JSON as transformers writes it (rt_io.h). */
char *rt_ckpt_json_text(const json_t *v) {
  char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(pp_json_precision(v)));
  if (!s) return NULL;
  size_t n = strlen(s);
  char *t = realloc(s, n + 2);
  if (!t) {
    free(s);
    return NULL;
  }
  t[n] = '\n';
  t[n + 1] = 0;
  return t;
}

#define WRITER_LOCK ".ppr-writing" /* in a temporary folder: locked (flock) while its writer lives */

/* The writer's lock in its temporary folder tmp: the file, held locked until it closes the fd (a
 * dead writer's lock is free). The fd, or -1. */
static int lock_writer(const char *tmp) {
  char *lp = join(tmp, WRITER_LOCK);
  int fd = lp ? open(lp, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) : -1;
  if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) close(fd), fd = -1;
  free(lp);
  return fd;
}

/* The temporary folders NAME.tmp-XXXXXX in dir that a writer killed during a save left: those with
 * a writer's lock that nobody holds. Others (a writer alive, a folder not ours) stay. */
static void remove_stale(const char *dir) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    const char *t = strstr(e->d_name, ".tmp-");
    if (!t || strlen(t) != 11) continue;
    char *sub = join(dir, e->d_name), *lp = sub ? join(sub, WRITER_LOCK) : NULL;
    int fd = lp ? open(lp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) remove_tree(sub);
    if (fd >= 0) close(fd);
    free(lp);
    free(sub);
  }
  if (d) closedir(d);
}

int rt_ckpt_write_dir(const char *path, int n, const char *const *names, const int *ndims, const int64_t *const *shapes,
                      const float *const *data, const RtCkptOpts *o, char *err, size_t errlen) {
  if (!path || n < 0 || (n > 0 && (!names || !ndims || !shapes))) {
    rt_util_set_err(err, errlen, "%s: rt_ckpt_write_dir: bad arguments", path ? path : "(null)");
    return -1;
  }
  if (rt_ckpt_check_dir(path, err, errlen)) return -1;
  uint64_t limit = o && o->shard_bytes ? o->shard_bytes : RT_CKPT_SHARD_DEFAULT;
  json_t *cfg = NULL;
  if (o && o->hf_config) {
    json_error_t je;
    cfg = json_loads(o->hf_config, 0, &je);
    if (!json_is_object(cfg)) {
      json_decref(cfg);
      rt_util_set_err(err, errlen, "%s: the listing's hf_config is not a JSON object: %s", path, je.text);
      return -1;
    }
    json_object_set_new(cfg, "torch_dtype", json_string("float32")); /* what the files hold */
    const char *own = json_string_value(json_object_get(cfg, "_name_or_path"));
    const char *name = o->name_or_path ? o->name_or_path : own && *own ? NULL : o->model;
    if (name) json_object_set_new(cfg, "_name_or_path", json_string(name));
  }
  /* the shards: tensors in order, a new shard when the next would pass the limit */
  int *shard = calloc((size_t)n + 1, sizeof *shard), nshards = 1;
  uint64_t *bytes = calloc((size_t)n + 1, sizeof *bytes), total = 0, cur = 0;
  char *dir = dir_of(path), *tmp = NULL, *old = NULL, *fp = NULL, *text = NULL, *trainer = NULL;
  json_t *index = NULL;
  int rc = -1, made = 0, lock = -1;
  if (!shard || !bytes || !dir) goto oom;
  for (int k = 0; k < n; k++) {
    uint64_t b = 4;
    for (int d = 0; d < ndims[k]; d++) b *= (uint64_t)shapes[k][d];
    bytes[k] = b;
    total += b;
    if (cur > 0 && cur + b > limit) nshards++, cur = 0;
    shard[k] = nshards - 1;
    cur += b;
  }
  /* the temporary folder beside path */
  size_t pl = strlen(path);
  tmp = malloc(pl + 32);
  old = malloc(pl + 32);
  if (!tmp || !old) goto oom;
  while (pl > 1 && path[pl - 1] == '/') pl--;
  snprintf(tmp, pl + 32, "%.*s.tmp-XXXXXX", (int)pl, path);
  if (!mkdtemp(tmp)) {
    rt_util_set_err(err, errlen, "%s: cannot create a temporary folder in %s: %s", path, dir, strerror(errno));
    goto done;
  }
  made = 1;
  lock = lock_writer(tmp);
  remove_stale(dir);      /* after our own lock is held: never a live writer's folder */
  mode_t mask = umask(0); /* mkdtemp's 0700, made what a new folder gets */
  umask(mask);
  chmod(tmp, 0777 & ~mask);
  index = json_object();
  json_t *wm = json_object();
  json_t *meta = json_object();
  if (!index || !wm || !meta) {
    json_decref(wm);
    json_decref(meta);
    goto oom;
  }
  json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
  json_object_set_new(index, "metadata", meta);
  json_object_set_new(index, "weight_map", wm);
  for (int s = 0, first = 0; s < nshards; s++) {
    int last = first;
    while (last < n && shard[last] == s) last++;
    char fname[64];
    if (nshards == 1) snprintf(fname, sizeof fname, SINGLE_NAME);
    else snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, nshards);
    free(fp);
    if (!(fp = join(tmp, fname))) goto oom;
    if (rt_st_write(fp, last - first, names + first, ndims + first, shapes + first, data + first, err, errlen))
      goto done;
    for (int k = first; k < last; k++) json_object_set_new(wm, names[k], json_string(fname));
    first = last;
  }
  if (nshards > 1) {
    free(fp);
    free(text);
    if (!(fp = join(tmp, INDEX_NAME)) || !(text = rt_ckpt_json_text(index))) goto oom;
    if (write_text(fp, text, err, errlen)) goto done;
  }
  if (cfg) {
    free(fp);
    free(text);
    if (!(fp = join(tmp, CONFIG_NAME)) || !(text = rt_ckpt_json_text(cfg))) goto oom;
    if (write_text(fp, text, err, errlen)) goto done;
  }
  for (int i = 0; o && i < o->ncopy; i++) {
    free(fp);
    if (!(fp = join(tmp, o->copy_name[i]))) goto oom;
    if (write_bytes(fp, o->copy_data[i], o->copy_len[i], err, errlen)) goto done;
  }
  if (o && o->state_json) { /* into trainer/ */
    free(fp);
    fp = NULL;
    if (!(trainer = join(tmp, RT_CKPT_TRAINER_DIR)) || !(fp = join(trainer, RT_CKPT_OPTIMIZER_NAME))) goto oom;
    if (mkdir(trainer, 0777) != 0) {
      rt_util_set_err(err, errlen, "%s: cannot create: %s", trainer, strerror(errno));
      goto done;
    }
    if (rt_st_write(fp, o->nopt, o->opt_names, o->opt_ndims, o->opt_shapes, o->opt_data, err, errlen)) goto done;
    free(fp);
    if (!(fp = join(trainer, RT_CKPT_STATE_NAME))) goto oom;
    if (write_text(fp, o->state_json, err, errlen)) goto done;
  }
  /* the lock goes (a checkpoint folder holds a checkpoint's files alone); the fd keeps it held */
  free(fp);
  if (!(fp = join(tmp, WRITER_LOCK))) goto oom;
  unlink(fp);
  /* swap it in: an earlier checkpoint folder moves aside, then goes */
  int had = is_dir(path);
  if (had) {
    snprintf(old, pl + 32, "%.*s.old-XXXXXX", (int)pl, path);
    if (!mkdtemp(old) || rmdir(old) != 0 || rename(path, old) != 0) {
      rt_util_set_err(err, errlen, "%s: cannot move the earlier checkpoint aside: %s", path, strerror(errno));
      goto done;
    }
  }
  if (rename(tmp, path) != 0) {
    rt_util_set_err(err, errlen, "%s: rename from %s failed: %s", path, tmp, strerror(errno));
    if (had) rename(old, path);
    goto done;
  }
  made = 0;
  if (had) remove_tree(old);
  rc = 0;
  goto done;
oom:
  rt_util_set_err(err, errlen, "%s: out of memory", path);
done:
  if (made) remove_tree(tmp);
  if (lock >= 0) close(lock);
  json_decref(index);
  json_decref(cfg);
  free(shard);
  free(bytes);
  free(dir);
  free(tmp);
  free(old);
  free(fp);
  free(text);
  free(trainer);
  return rc;
}

int rt_ckpt_is_file_path(const char *path) { return path && ends_with(path, ".safetensors"); }
