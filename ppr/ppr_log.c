/* ppr_log.c - --log: the run's JSONL, checked and appended across --resume, and its curves as SVG. */
#include "ppr_log.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ppr_state.h"
#include "rt_prog.h"

/* One line of a log: a step's record ({"step": N, ...}) or a start ({"start": N, "run": ID, ...}). */
typedef struct {
  char *text; /* the line, its newline included */
  json_t *o;
  int start; /* 1: a start line */
  int64_t n; /* the step, or the start's step */
} LogLine;

typedef struct {
  LogLine *v;
  int n;
  int partial; /* the last line had no newline and did not parse: a write the run did not finish */
} Log;

static void log_free(Log *lg) {
  for (int k = 0; k < lg->n; k++) {
    free(lg->v[k].text);
    json_decref(lg->v[k].o);
  }
  free(lg->v);
  memset(lg, 0, sizeof *lg);
}

/* One line parsed into l (its text taken). 0, or -1 when it is not a line of a ppr log. */
static int parse_line(char *text, size_t len, LogLine *l) {
  json_error_t je;
  json_t *o = json_loadb(text, len, 0, &je);
  const json_t *st = json_object_get(o, "start"), *sp = json_object_get(o, "step"), *run = json_object_get(o, "run");
  int start = st != NULL;
  const json_t *n = start ? st : sp;
  if (!json_is_object(o) || !json_is_integer(n) || json_integer_value(n) < 0 || (start && !json_is_string(run))) {
    json_decref(o);
    return -1;
  }
  *l = (LogLine){text, o, start, (int64_t)json_integer_value(n)};
  return 0;
}

/* The log at path, each line parsed. 0, or -1 with a message naming the line. */
static int log_read(const char *path, Log *lg, char *err, size_t errlen) {
  memset(lg, 0, sizeof *lg);
  FILE *f = fopen(path, "r");
  if (!f) return RT_FAIL("--log %s: cannot read: %s", path, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int rc = 0, ln = 0, room = 0;
  while (!rc && (len = getline(&line, &cap, f)) >= 0) {
    ln++;
    LogLine l;
    char *text = malloc((size_t)len + 1);
    if (!text) {
      rc = RT_FAIL("out of memory");
      break;
    }
    memcpy(text, line, (size_t)len + 1);
    if (parse_line(text, (size_t)len, &l)) {
      free(text);
      if (line[len - 1] != '\n' && feof(f)) lg->partial = 1;
      else
        rc = RT_FAIL("--log %s:%d: not a line of a ppr log (one JSON object a line: {\"step\": N, ...} or {\"start\": "
                     "N, \"run\": ID, ...})",
                     path, ln);
      continue;
    }
    if (lg->n == room) {
      room = room ? 2 * room : 256;
      LogLine *v = realloc(lg->v, (size_t)room * sizeof *v);
      if (!v) {
        free(l.text);
        json_decref(l.o);
        rc = RT_FAIL("out of memory");
        break;
      }
      lg->v = v;
    }
    lg->v[lg->n++] = l;
  }
  if (!rc && ferror(f)) rc = RT_FAIL("--log %s: read failed: %s", path, strerror(errno));
  free(line);
  fclose(f);
  if (rc) log_free(lg);
  return rc;
}

/* The run of the log's last start line (NULL: none, a log older than start lines). */
static const char *last_run(const Log *lg) {
  for (int k = lg->n - 1; k >= 0; k--)
    if (lg->v[k].start) return json_string_value(json_object_get(lg->v[k].o, "run"));
  return NULL;
}

static int64_t last_step(const Log *lg) {
  int64_t s = 0;
  for (int k = 0; k < lg->n; k++)
    if (!lg->v[k].start && lg->v[k].n > s) s = lg->v[k].n;
  return s;
}

/* 1 when path is a regular file with something in it. */
static int has_content(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

int ppr_log_check(const PprCli *c, char *err, size_t errlen) {
  if (!c->log || !has_content(c->log)) return 0;
  Log lg;
  char why[1024];
  if (log_read(c->log, &lg, why, sizeof why))
    return RT_FAIL("%s: ppr appends to a log of its own run only: remove the file or name another", why);
  const char *run = last_run(&lg);
  int rc = 0;
  if (!c->resume)
    rc = RT_FAIL("--log %s holds a log already (run %s, steps to %lld): a new run starts a new log; remove the file or "
                 "name another (a --resume of that run appends to it)",
                 c->log, run ? run : "unknown", (long long)last_step(&lg));
  else if (run && strcmp(run, c->run_id))
    rc = RT_FAIL("--log %s is the log of run %s; --resume %s continues run %s: name that run's log, or a new file",
                 c->log, run, c->resume, c->run_id);
  log_free(&lg);
  return rc;
}

/* The log rewritten with its lines beyond step `start` dropped (through "<log>.tmp", renamed over it). */
static int log_cut(const char *path, int64_t start, int64_t *dropped, char *err, size_t errlen) {
  Log lg;
  if (log_read(path, &lg, err, errlen)) return -1;
  int keep = 0, rc = 0;
  for (int k = 0; k < lg.n; k++) keep += lg.v[k].n <= start;
  *dropped = 0;
  for (int k = 0; k < lg.n; k++) *dropped += !lg.v[k].start && lg.v[k].n > start;
  if (keep == lg.n && !lg.partial) {
    log_free(&lg);
    return 0;
  }
  size_t len = 0;
  for (int k = 0; k < lg.n; k++) len += lg.v[k].n <= start ? strlen(lg.v[k].text) : 0;
  char *text = malloc(len + 1);
  if (!text) rc = RT_FAIL("out of memory");
  for (int k = 0, at = 0; text && k < lg.n; k++)
    if (lg.v[k].n <= start) at += sprintf(text + at, "%s", lg.v[k].text);
  if (text) text[len] = '\0';
  if (!rc) rc = ppr_state_write(path, text, err, errlen);
  free(text);
  log_free(&lg);
  return rc;
}

int ppr_log_open(const PprCli *c, const char *model, int64_t start, int64_t tokens_per_step, FILE **f, int64_t *dropped,
                 char *err, size_t errlen) {
  *f = NULL;
  *dropped = 0;
  if (has_content(c->log) && log_cut(c->log, start, dropped, err, errlen)) return -1;
  json_t *o = json_object(), *args = json_array();
  char when[32] = "";
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  for (char **a = c->args; args && a && *a; a++) json_array_append_new(args, json_string(*a));
  json_object_set_new(o, "start", json_integer((json_int_t)start));
  json_object_set_new(o, "run", json_string(c->run_id));
  json_object_set_new(o, "model", json_string(model));
  json_object_set_new(o, "tokens_per_step", json_integer((json_int_t)tokens_per_step));
  json_object_set_new(o, "time", json_string(when));
  json_object_set_new(o, "unix_time", json_integer((json_int_t)now));
  json_object_set_new(o, "args", args);
  char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (!line) return RT_FAIL("out of memory");
  int rc = 0;
  if (!(*f = fopen(c->log, "a"))) rc = RT_FAIL("--log %s: cannot open for appending: %s", c->log, strerror(errno));
  else if (fprintf(*f, "%s\n", line) < 0 || fflush(*f) != 0)
    rc = RT_FAIL("--log %s: write failed: %s", c->log, strerror(errno));
  free(line);
  if (rc && *f) {
    fclose(*f);
    *f = NULL;
  }
  return rc;
}

int ppr_log_each(const char *log, int (*fn)(void *ctx, const json_t *rec, double wall), void *ctx, char *err,
                 size_t errlen) {
  Log lg;
  if (log_read(log, &lg, err, errlen)) return -1;
  double t0 = 0;
  int rc = 0;
  for (int k = 0; k < lg.n && !rc; k++) {
    const json_t *o = lg.v[k].o, *e = json_object_get(o, "elapsed_s");
    if (lg.v[k].start) t0 = (double)json_integer_value(json_object_get(o, "unix_time"));
    else rc = fn(ctx, o, t0 + (json_is_number(e) ? json_number_value(e) : 0));
  }
  log_free(&lg);
  return rc;
}

char *ppr_log_svg_path(const char *log) {
  const char *slash = strrchr(log, '/'), *dot = strrchr(log, '.');
  size_t n = dot && (!slash || dot > slash + 1) ? (size_t)(dot - log) : strlen(log);
  char *s = malloc(n + 5);
  if (s) sprintf(s, "%.*s.svg", (int)n, log);
  return s;
}

/* ---- the picture ------------------------------------------------------------------------------ */

/* A series of points (x: tokens). */
typedef struct {
  double *x, *y;
  int n, cap;
} Series;

static int series_add(Series *s, double x, double y) {
  if (!isfinite(x) || !isfinite(y)) return 0;
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 256;
    double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
    if (!nx) return -1;
    s->x = nx;
    double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
    if (!ny) return -1;
    s->y = ny;
    s->cap = cap;
  }
  s->x[s->n] = x;
  s->y[s->n++] = y;
  return 0;
}

static void series_free(Series *s) {
  free(s->x);
  free(s->y);
}

/* An axis: [lo, hi] drawn onto [a, b] pixels, with ticks every `tick`. */
typedef struct {
  double lo, hi, tick;
  double a, b;
} Axis;

static void axis_fit(Axis *ax, double lo, double hi, int from_zero) {
  if (from_zero && lo > 0) lo = 0;
  if (!(hi > lo)) hi = lo + (lo != 0 ? fabs(lo) * 0.1 : 1);
  double raw = (hi - lo) / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
  ax->tick = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  ax->lo = floor(lo / ax->tick) * ax->tick;
  ax->hi = ceil(hi / ax->tick) * ax->tick;
}

static double axis_px(const Axis *ax, double v) { return ax->a + (v - ax->lo) / (ax->hi - ax->lo) * (ax->b - ax->a); }

/* v with a k/M/B suffix (tokens). */
static const char *si(char *b, size_t n, double v) {
  const char *u = "";
  if (fabs(v) >= 1e9) v /= 1e9, u = "B";
  else if (fabs(v) >= 1e6) v /= 1e6, u = "M";
  else if (fabs(v) >= 1e3) v /= 1e3, u = "k";
  snprintf(b, n, "%g%s", v, u);
  return b;
}

static void polyline(FILE *f, const Series *s, const Axis *x, const Axis *y, const char *style) {
  if (s->n == 0) return;
  int every = s->n > 2000 ? (s->n + 1999) / 2000 : 1; /* at most ~2000 points drawn */
  fprintf(f, "<polyline fill=\"none\" %s points=\"", style);
  for (int k = 0; k < s->n; k++)
    if (k % every == 0 || k == s->n - 1) fprintf(f, "%.1f,%.1f ", axis_px(x, s->x[k]), axis_px(y, s->y[k]));
  fputs("\"/>\n", f);
}

static void range(const Series *s, double *lo, double *hi) {
  for (int k = 0; k < s->n; k++) {
    if (s->y[k] < *lo) *lo = s->y[k];
    if (s->y[k] > *hi) *hi = s->y[k];
  }
}

/* The series of the log: loss, val_loss and lr against tokens; resumes' tokens. */
static int log_series(const Log *lg, Series *loss, Series *val, Series *lr, Series *resumes) {
  double per = 0; /* tokens per step, from the last start line before the record */
  int rc = 0;
  for (int k = 0; k < lg->n && !rc; k++) {
    const json_t *o = lg->v[k].o;
    if (lg->v[k].start) {
      per = (double)json_integer_value(json_object_get(o, "tokens_per_step"));
      if (lg->v[k].n > 0) rc = series_add(resumes, (double)lg->v[k].n * per, (double)lg->v[k].n);
      continue;
    }
    const json_t *t = json_object_get(o, "tokens");
    double x = json_is_number(t) ? json_number_value(t) : (double)lg->v[k].n * per;
    const json_t *l = json_object_get(o, "loss"), *v = json_object_get(o, "val_loss"), *r = json_object_get(o, "lr");
    if (json_is_number(l)) rc |= series_add(loss, x, json_number_value(l));
    if (json_is_number(v)) rc |= series_add(val, x, json_number_value(v));
    if (json_is_number(r)) rc |= series_add(lr, x, json_number_value(r));
  }
  return rc;
}

static void draw(FILE *f, const char *title, const Series *loss, const Series *val, const Series *lr,
                 const Series *resumes) {
  enum { W = 860, H = 440, ML = 70, MR = 80, MT = 40, MB = 50 };
  double xhi = 0, ylo = INFINITY, yhi = -INFINITY, lrlo = 0, lrhi = 0;
  for (int k = 0; k < loss->n; k++) xhi = fmax(xhi, loss->x[k]);
  for (int k = 0; k < val->n; k++) xhi = fmax(xhi, val->x[k]);
  range(loss, &ylo, &yhi);
  range(val, &ylo, &yhi);
  range(lr, &lrlo, &lrhi);
  if (!isfinite(ylo)) ylo = 0, yhi = 1;
  Axis x = {.a = ML, .b = W - MR}, y = {.a = H - MB, .b = MT}, yr = {.a = H - MB, .b = MT};
  axis_fit(&x, 0, xhi, 1);
  axis_fit(&y, ylo, yhi, 0);
  axis_fit(&yr, lrlo, lrhi, 1);
  char b[32];
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
          "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, H);
  fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\">", ML);
  for (const char *p = title; *p; p++) /* the title is the model's name: escaped */
    fputs(*p == '<' ? "&lt;" : *p == '&' ? "&amp;" : (char[2]){*p, 0}, f);
  fputs("</text>\n", f);
  for (double v = x.lo; v <= x.hi + x.tick / 2; v += x.tick)
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/><text x=\"%.1f\" y=\"%d\" "
            "text-anchor=\"middle\">%s</text>\n",
            axis_px(&x, v), MT, axis_px(&x, v), H - MB, axis_px(&x, v), H - MB + 16, si(b, sizeof b, v));
  for (double v = y.lo; v <= y.hi + y.tick / 2; v += y.tick)
    fprintf(f,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/><text x=\"%d\" y=\"%.1f\" "
            "text-anchor=\"end\">%.4g</text>\n",
            ML, axis_px(&y, v), W - MR, axis_px(&y, v), ML - 6, axis_px(&y, v) + 4, v);
  for (double v = yr.lo; lr->n && v <= yr.hi + yr.tick / 2; v += yr.tick)
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" fill=\"#888\">%.3g</text>\n", W - MR + 6, axis_px(&yr, v) + 4, v);
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n", ML, MT,
          W - ML - MR, H - MT - MB);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">tokens</text>\n", (ML + W - MR) / 2, H - 12);
  fprintf(f, "<text transform=\"translate(18,%d) rotate(-90)\" text-anchor=\"middle\">loss</text>\n",
          (MT + H - MB) / 2);
  if (lr->n)
    fprintf(f, "<text transform=\"translate(%d,%d) rotate(90)\" text-anchor=\"middle\" fill=\"#888\">lr</text>\n",
            W - 14, (MT + H - MB) / 2);
  for (int k = 0; k < resumes->n; k++)
    fprintf(f,
            "<line class=\"resume\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#c33\" "
            "stroke-dasharray=\"4,3\"/><text x=\"%.1f\" y=\"%d\" fill=\"#c33\">resume @%g</text>\n",
            axis_px(&x, resumes->x[k]), MT, axis_px(&x, resumes->x[k]), H - MB, axis_px(&x, resumes->x[k]) + 3, MT + 12,
            resumes->y[k]);
  polyline(f, lr, &x, &yr, "class=\"lr\" stroke=\"#aaa\" stroke-dasharray=\"5,3\"");
  polyline(f, loss, &x, &y, "class=\"loss\" stroke=\"#1f77b4\" stroke-width=\"1.5\"");
  polyline(f, val, &x, &y, "class=\"val_loss\" stroke=\"#ff7f0e\" stroke-width=\"2\"");
  for (int k = 0; k < val->n; k++)
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#ff7f0e\"/>\n", axis_px(&x, val->x[k]),
            axis_px(&y, val->y[k]));
  fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#1f77b4\">loss (%d)</text>", W - MR - 250, MT - 8, loss->n);
  if (val->n) fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#ff7f0e\">val_loss (%d)</text>", W - MR - 160, MT - 8, val->n);
  if (lr->n) fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#888\">lr</text>", W - MR - 40, MT - 8);
  fputs("\n</svg>\n", f);
}

int ppr_log_plot(const char *log, char *err, size_t errlen) {
  Log lg;
  if (log_read(log, &lg, err, errlen)) return -1;
  Series loss = {0}, val = {0}, lr = {0}, resumes = {0};
  char *path = ppr_log_svg_path(log), *tmp = path ? malloc(strlen(path) + 8) : NULL;
  int rc = log_series(&lg, &loss, &val, &lr, &resumes) || !tmp ? RT_FAIL("out of memory") : 0;
  const char *model = NULL;
  for (int k = 0; k < lg.n && !model; k++)
    if (lg.v[k].start) model = json_string_value(json_object_get(lg.v[k].o, "model"));
  FILE *f = NULL;
  if (!rc) {
    sprintf(tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "w"))) rc = RT_FAIL("%s: cannot create: %s", tmp, strerror(errno));
  }
  if (f) {
    draw(f, model ? model : log, &loss, &val, &lr, &resumes);
    if (ferror(f) | fclose(f)) rc = RT_FAIL("%s: write failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0) rc = RT_FAIL("%s: rename from %s failed: %s", path, tmp, strerror(errno));
    if (rc) unlink(tmp);
  }
  series_free(&loss);
  series_free(&val);
  series_free(&lr);
  series_free(&resumes);
  free(tmp);
  free(path);
  log_free(&lg);
  return rc;
}
