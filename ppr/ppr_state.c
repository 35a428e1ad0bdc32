/* ppr_state.c - trainer_state.json: what --save writes with the AdamW moments (the step
 * count, the settings and the identity a resumed run must match), and --resume's check of it. */
#include "ppr_state.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pp_json.h"

#define STATE_FORMAT "ppr-trainer-state 1"

/* ckpt's companion file: CKPT/trainer/NAME for a folder (CKPT/NAME in a folder of an older ppr,
 * where only that one is there), W.SUFFIX for W.safetensors. */
static char *state_path(const char *ckpt, const char *name, const char *suffix) {
  size_t n = strlen(ckpt);
  char *s = malloc(n + strlen(RT_CKPT_TRAINER_DIR) + strlen(name) + strlen(suffix) + 3);
  if (!s) return NULL;
  if (rt_ckpt_is_file_path(ckpt)) {
    sprintf(s, "%.*s%s", (int)(n - strlen(".safetensors")), ckpt, suffix);
    return s;
  }
  while (n > 1 && ckpt[n - 1] == '/') n--;
  sprintf(s, "%.*s/%s", (int)n, ckpt, name);
  struct stat st;
  int older = stat(s, &st) == 0;
  sprintf(s, "%.*s/%s/%s", (int)n, ckpt, RT_CKPT_TRAINER_DIR, name);
  if (older && stat(s, &st) != 0) sprintf(s, "%.*s/%s", (int)n, ckpt, name);
  return s;
}

char *ppr_state_opt_path(const char *ckpt) {
  return state_path(ckpt, RT_CKPT_OPTIMIZER_NAME, ".optimizer.safetensors");
}

char *ppr_state_json_path(const char *ckpt) { return state_path(ckpt, RT_CKPT_STATE_NAME, ".trainer_state.json"); }

int ppr_state_data(const PprCli *c, PprStateData *d, char *err, size_t errlen) {
  if (!c->data) {
    d->name = "the built-in text";
    d->bytes = (int64_t)rt_default_text_len;
    return 0;
  }
  struct stat st;
  if (stat(c->data, &st) != 0) return RT_FAIL("%s: cannot read: %s", c->data, strerror(errno));
  const char *slash = strrchr(c->data, '/');
  d->name = slash ? slash + 1 : c->data;
  d->bytes = (int64_t)st.st_size;
  return 0;
}

static json_t *shape_json(int ndim, const int64_t *dims) {
  json_t *a = json_array();
  for (int i = 0; a && i < ndim; i++) json_array_append_new(a, json_integer((json_int_t)dims[i]));
  return a;
}

/* The run's state as an object (NULL when out of memory). */
static json_t *state_object(const PprCli *c, const RtProg *p, const PprStateData *d, int64_t step) {
  json_t *o = json_object(), *params = json_object(), *opt = json_object(), *lr = json_object(), *data = json_object(),
         *batch = json_object();
  if (!o || !params || !opt || !lr || !data || !batch) {
    json_decref(o);
    json_decref(params);
    json_decref(opt);
    json_decref(lr);
    json_decref(data);
    json_decref(batch);
    return NULL;
  }
  json_object_set_new(o, "format", json_string(STATE_FORMAT));
  json_object_set_new(o, "step", json_integer((json_int_t)step));
  json_object_set_new(o, "model", json_string(p->model));
  int nm = p->nmodel > 0 ? p->nmodel : p->nparams;
  for (int k = 0; k < nm; k++)
    if (p->nmodel > 0)
      json_object_set_new(params, p->mparams[k].name, shape_json(p->mparams[k].ndim, p->mparams[k].dims));
    else json_object_set_new(params, p->params[k].name, shape_json(p->params[k].ndim, p->params[k].dense_dims));
  json_object_set_new(o, "params", params);
  json_object_set_new(opt, "type", json_string("adamw"));
  json_object_set_new(opt, "beta1", json_real(c->h.beta1));
  json_object_set_new(opt, "beta2", json_real(c->h.beta2));
  json_object_set_new(opt, "eps", json_real(c->h.eps));
  json_object_set_new(opt, "weight_decay", json_real(c->h.wd));
  json_object_set_new(opt, "clip", c->h.use_clip ? json_real(c->h.clip) : json_null());
  json_object_set_new(o, "optimizer", opt);
  json_object_set_new(lr, "schedule", json_string(rt_lr_name(c->sched.kind)));
  json_object_set_new(lr, "lr", json_real(c->sched.lr));
  json_object_set_new(lr, "lr_min", json_real(c->sched.lr_min));
  json_object_set_new(lr, "warmup", json_integer((json_int_t)c->sched.warmup));
  json_object_set_new(lr, "decay_steps", json_integer((json_int_t)c->sched.decay));
  /* wsd's decay starts at steps - decay_steps: the total counts there alone */
  json_object_set_new(lr, "steps", c->sched.kind == RT_LR_WSD ? json_integer((json_int_t)c->sched.steps) : json_null());
  json_object_set_new(o, "lr_schedule", lr);
  char id[32];
  char *key = malloc(strlen(d->name) + 32);
  if (key) sprintf(key, "%s:%lld", d->name, (long long)d->bytes);
  snprintf(id, sizeof id, "%016llx", key ? (unsigned long long)rt_fnv1a64(key, strlen(key)) : 0ull);
  free(key);
  json_object_set_new(data, "name", json_string(d->name));
  json_object_set_new(data, "bytes", json_integer((json_int_t)d->bytes));
  json_object_set_new(data, "id", json_string(id));
  json_object_set_new(data, "val_frac", json_real(c->val_frac));
  json_object_set_new(data, "next_step", json_integer((json_int_t)step));
  json_object_set_new(o, "data", data);
  json_object_set_new(batch, "micro_batch", json_integer(p->micro_batch));
  json_object_set_new(batch, "seq", json_integer(p->seq));
  json_object_set_new(batch, "microbatches", json_integer(p->microbatches));
  json_object_set_new(o, "batch", batch);
  json_object_set_new(o, "rng", json_null()); /* --seed only initialises: no random state after */
  json_object_set_new(o, "run_id", json_string(c->run_id));
  json_t *args = json_array();
  for (char **a = c->args; args && a && *a; a++) json_array_append_new(args, json_string(*a));
  json_object_set_new(o, "args", args);
  return o;
}

char *ppr_state_json(const PprCli *c, const RtProg *p, const PprStateData *d, int64_t step) {
  json_t *o = state_object(c, p, d, step);
  if (!o) return NULL;
  char *t = rt_ckpt_json_text(o); /* as the checkpoint's other JSON files (rt_ckpt.c) */
  json_decref(o);
  return t;
}

/* The option that sets key of section sec of the state (NULL: none, the program's: DIR's). */
static const char *key_flag(const char *sec, const char *key) {
  static const char *const flags[][3] = {
      {"optimizer", "beta1", "--beta1"},     {"optimizer", "beta2", "--beta2"},
      {"optimizer", "eps", "--eps"},         {"optimizer", "weight_decay", "--wd"},
      {"optimizer", "clip", "--clip"},       {"lr_schedule", "schedule", "--lr-schedule"},
      {"lr_schedule", "lr", "--lr"},         {"lr_schedule", "lr_min", "--lr-min"},
      {"lr_schedule", "warmup", "--warmup"}, {"lr_schedule", "decay_steps", "--decay-steps"},
      {"lr_schedule", "steps", "--steps"},   {"data", "name", "--data"},
      {"data", "bytes", "--data"},           {"data", "id", "--data"},
      {"data", "val_frac", "--val-frac"}};
  for (size_t k = 0; key && k < sizeof flags / sizeof flags[0]; k++)
    if (!strcmp(flags[k][0], sec) && !strcmp(flags[k][1], key)) return flags[k][2];
  return NULL;
}

static char *value_text(const json_t *v) {
  return v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(pp_json_precision(v))) : NULL;
}

/* The first key of section `sec` whose value differs between saved and now, unless this command line
 * gave the option that sets it (then it is the change the user asked for): a message naming the
 * option and the value that continues the checkpoint's run. */
static int differs(const char *path, const char *sec, const json_t *saved, const json_t *now, const PprCli *c,
                   char *err, size_t errlen) {
  const json_t *a = json_object_get(saved, sec), *b = json_object_get(now, sec);
  if (json_equal(a, b)) return 0;
  const char *key = NULL, *k;
  json_t *v;
  if (json_is_object(a) && json_is_object(b)) {
    json_object_foreach((json_t *)b, k, v) {
      const char *f = key_flag(sec, k);
      if (!key && !json_equal(v, json_object_get(a, k)) && !(f && ppr_cli_given(c, f))) key = k;
    }
    json_object_foreach((json_t *)a, k, v) if (!key && !json_object_get(b, k)) key = k;
    if (!key) return 0;
  }
  const json_t *x = key ? json_object_get(a, key) : a, *y = key ? json_object_get(b, key) : b;
  char *xs = value_text(x), *ys = value_text(y);
  const char *flag = key_flag(sec, key);
  if (flag && !strcmp(flag, "--data"))
    RT_FAIL("%s: the checkpoint's data.%s is %.200s, this run's is %.200s: the data changed since; give --data again "
            "to go on with it as it is now",
            path, key, xs ? xs : "absent", ys ? ys : "absent");
  else if (flag)
    RT_FAIL("%s: the checkpoint's %s.%s is %.200s, this run's would be %.200s: give %s %.200s to go on with the "
            "checkpoint's, or %s with the value you want",
            path, sec, key, xs ? xs : "absent", ys ? ys : "absent", flag, xs ? xs : "", flag);
  else
    RT_FAIL("%s: the checkpoint's %s%s%s is %.200s, this run's is %.200s: --resume needs DIR compiled for the "
            "checkpoint's model and batch",
            path, sec, key ? "." : "", key ? key : "", xs ? xs : "absent", ys ? ys : "absent");
  free(xs);
  free(ys);
  return -1;
}

int ppr_state_check(const char *path, const PprCli *c, const RtProg *p, const PprStateData *d, int64_t *step, char *err,
                    size_t errlen) {
  json_error_t je;
  json_t *saved = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!saved) {
    struct stat st;
    if (stat(path, &st) != 0)
      return RT_FAIL("%s: %s: --resume expects the training state --save writes beside the weights", path,
                     strerror(errno));
    return RT_FAIL("%s: not valid JSON: %s (line %d)", path, je.text, je.line);
  }
  int rc = 0;
  json_t *f = json_object_get(saved, "format"), *s = json_object_get(saved, "step");
  if (!json_is_string(f) || strcmp(json_string_value(f), STATE_FORMAT))
    rc = RT_FAIL("%s: expected \"format\": \"%s\" (a trainer_state.json of ppr --save)", path, STATE_FORMAT);
  else if (!json_is_integer(s) || json_integer_value(s) < 0)
    rc = RT_FAIL("%s: expected \"step\": a count of steps done (an integer >= 0)", path);
  else if (json_integer_value(s) > c->steps)
    rc = RT_FAIL("%s: the checkpoint has done %lld steps, more than --steps %lld (--steps counts the total, the "
                 "resumed run's steps included)",
                 path, (long long)json_integer_value(s), (long long)c->steps);
  json_t *now = rc ? NULL : state_object(c, p, d, rc ? 0 : json_integer_value(s));
  if (!rc && !now) rc = RT_FAIL("out of memory");
  static const char *const secs[] = {"model", "params", "optimizer", "lr_schedule", "data", "batch"};
  for (size_t k = 0; k < sizeof secs / sizeof secs[0] && !rc; k++)
    rc = differs(path, secs[k], saved, now, c, err, errlen);
  if (!rc) *step = (int64_t)json_integer_value(s);
  json_decref(now);
  json_decref(saved);
  return rc;
}

int ppr_state_write(const char *path, const char *text, char *err, size_t errlen) {
  size_t n = strlen(path);
  char *tmp = malloc(n + 8);
  if (!tmp) return RT_FAIL("out of memory");
  sprintf(tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), rc = 0;
  if (fd < 0) rc = RT_FAIL("%s: cannot create: %s", tmp, strerror(errno));
  size_t len = strlen(text), done = 0;
  while (!rc && done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) rc = RT_FAIL("%s: write failed: %s", tmp, strerror(errno));
    else done += (size_t)w;
  }
  if (!rc && fsync(fd) != 0) rc = RT_FAIL("%s: fsync failed: %s", tmp, strerror(errno));
  if (fd >= 0 && close(fd) != 0 && !rc) rc = RT_FAIL("%s: close failed: %s", tmp, strerror(errno));
  if (!rc && rename(tmp, path) != 0) rc = RT_FAIL("%s: rename from %s failed: %s", path, tmp, strerror(errno));
  if (rc && fd >= 0) unlink(tmp);
  free(tmp);
  return rc;
}
