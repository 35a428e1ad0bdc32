/* ppr_args.c - @FILE arguments, the options a --resume takes from trainer_state.json, and the run's
 * identity. */
#include "ppr_args.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ppr_state.h"
#include "rt_prog.h"

/* The growing argument list. */
typedef struct {
  char **v;
  int n, cap;
} Args;

static int push(Args *a, char *s) {
  if (!s) return -1;
  if (a->n + 1 >= a->cap) {
    int cap = a->cap ? 2 * a->cap : 32;
    char **v = realloc(a->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    a->v = v;
    a->cap = cap;
  }
  a->v[a->n++] = s;
  a->v[a->n] = NULL;
  return 0;
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

/* One line of an @FILE (trimmed, not blank, not a comment) as its one or two arguments. */
static int line_args(Args *a, const char *path, int ln, const char *s, size_t n, char *err, size_t errlen) {
  size_t name = 0;
  while (name < n && s[name] != ' ' && s[name] != '\t') name++;
  if (s[0] != '-' || name == n) return push(a, dup_n(s, n)) ? RT_FAIL("out of memory") : 0;
  if (memchr(s, '=', name))
    return RT_FAIL("@%s:%d: '%.*s': an option's value goes after a space or '=', not both", path, ln, (int)n, s);
  const char *v = s + name;
  while (*v == ' ' || *v == '\t') v++;
  size_t vn = n - (size_t)(v - s);
  if (vn >= 2 && v[0] == '"' && v[vn - 1] == '"') {
    v++;
    vn -= 2;
  } else if (memchr(v, '"', vn))
    return RT_FAIL("@%s:%d: '%.*s': a value with quotes is wholly in double quotes (\"...\")", path, ln, (int)n, s);
  if (push(a, dup_n(s, name)) || push(a, dup_n(v, vn))) return RT_FAIL("out of memory");
  return 0;
}

/* FILE's options appended to a. */
static int file_args(Args *a, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) return RT_FAIL("@%s: cannot read: %s", path, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int rc = 0;
  for (int ln = 1; !rc && (len = getline(&line, &cap, f)) >= 0; ln++) {
    size_t n = (size_t)len;
    if (memchr(line, '\0', n)) rc = RT_FAIL("@%s:%d: a NUL byte: expected text, one option a line", path, ln);
    const char *s = line;
    while (n > 0 && (*s == ' ' || *s == '\t')) s++, n--;
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (rc || n == 0 || s[0] == '#') continue;
    if (s[0] == '@') rc = RT_FAIL("@%s:%d: '%.*s': an @FILE does not name another", path, ln, (int)n, s);
    else rc = line_args(a, path, ln, s, n, err, errlen);
  }
  if (!rc && ferror(f)) rc = RT_FAIL("@%s: read failed: %s", path, strerror(errno));
  free(line);
  fclose(f);
  return rc;
}

int ppr_args_expand(int argc, char **argv, int *oargc, char ***oargv, char *err, size_t errlen) {
  Args a = {0};
  int rc = 0;
  for (int i = 0; i < argc && !rc; i++) {
    /* every argument "@FILE" (a value that begins with '@' is written "--name=@...") */
    if (i > 0 && argv[i][0] == '@' && argv[i][1]) rc = file_args(&a, argv[i] + 1, err, errlen);
    else if (push(&a, argv[i])) rc = RT_FAIL("out of memory");
  }
  if (rc) { /* the strings read from files go too (argv's stay) */
    for (int k = 0; k < a.n; k++) {
      int own = 1;
      for (int i = 0; i < argc && own; i++) own = a.v[k] != argv[i];
      if (own) free(a.v[k]);
    }
    free(a.v);
    return rc;
  }
  *oargc = a.n;
  *oargv = a.v;
  return 0;
}

int ppr_args_saved(const char *ckpt, char ***args, int *nargs, char **run_id, long long *step, char *err,
                   size_t errlen) {
  *args = NULL;
  *step = -1;
  *nargs = 0;
  *run_id = NULL;
  char *path = ppr_state_json_path(ckpt);
  if (!path) return RT_FAIL("out of memory");
  struct stat st;
  json_error_t je;
  json_t *o = stat(path, &st) == 0 ? json_load_file(path, JSON_REJECT_DUPLICATES, &je) : NULL;
  const json_t *list = json_object_get(o, "args"), *id = json_object_get(o, "run_id"), *n = json_object_get(o, "step");
  if (json_is_integer(n)) *step = (long long)json_integer_value(n);
  Args a = {0};
  int rc = 0;
  if (list && !json_is_array(list)) rc = RT_FAIL("%s: \"args\": expected a list of options (\"--name=value\")", path);
  for (size_t k = 0; !rc && k < json_array_size(list); k++) {
    const char *s = json_string_value(json_array_get(list, k));
    if (!s || strncmp(s, "--", 2) || !s[2])
      rc = RT_FAIL("%s: \"args\"[%zu]: expected an option (\"--name=value\")", path, k);
    else if (push(&a, strdup(s))) rc = RT_FAIL("out of memory");
  }
  if (!rc && id && (!json_is_string(id) || !*json_string_value(id)))
    rc = RT_FAIL("%s: \"run_id\": expected the run's identity (a string)", path);
  if (!rc && id && !(*run_id = strdup(json_string_value(id)))) rc = RT_FAIL("out of memory");
  json_decref(o);
  free(path);
  if (rc) {
    for (int k = 0; k < a.n; k++) free(a.v[k]);
    free(a.v);
    return rc;
  }
  *args = a.v;
  *nargs = a.n;
  return 0;
}

char *ppr_args_new_run_id(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char key[512], host[256] = "";
  gethostname(host, sizeof host - 1);
  snprintf(key, sizeof key, "%lld.%09ld %s %ld", (long long)ts.tv_sec, ts.tv_nsec, host, (long)getpid());
  char *id = malloc(17);
  if (id) snprintf(id, 17, "%016llx", (unsigned long long)rt_fnv1a64(key, strlen(key)));
  return id;
}
