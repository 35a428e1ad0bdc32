/* ppr_tb.c - --tensorboard: TensorBoard event files. A file is TFRecords (a little-endian u64 length,
 * its masked CRC-32C, the data, the data's masked CRC-32C); each record an Event protocol buffer:
 * the first {wall_time, file_version "brain.Event:2"}, then one a step {wall_time, step, summary
 * {value {tag, simple_value}...}} with the tags of --log's keys. */
#include "ppr_tb.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ppr_log.h"
#include "rt_prog.h"

struct PprTb {
  FILE *f;
  char *path;
};

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord frames its records. No
 * maintained C library for it is packaged in Debian 12; the table form is a few lines. */
static uint32_t crc32c(const unsigned char *p, size_t n) {
  static uint32_t table[256];
  if (!table[1])
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      table[i] = c;
    }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

static uint32_t masked_crc(const unsigned char *p, size_t n) {
  uint32_t c = crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* A protocol buffer being built. */
typedef struct {
  unsigned char *b;
  size_t n, cap;
  int oom;
} Buf;

static void put(Buf *o, const void *p, size_t n) {
  if (o->oom) return;
  if (o->n + n > o->cap) {
    size_t cap = o->cap ? 2 * o->cap : 128;
    while (cap < o->n + n) cap *= 2;
    unsigned char *b = realloc(o->b, cap);
    if (!b) {
      o->oom = 1;
      return;
    }
    o->b = b;
    o->cap = cap;
  }
  memcpy(o->b + o->n, p, n);
  o->n += n;
}

static void varint(Buf *o, uint64_t v) {
  unsigned char b[10];
  int n = 0;
  do {
    b[n] = (unsigned char)(v & 0x7F);
    v >>= 7;
    b[n++] |= v ? 0x80 : 0;
  } while (v);
  put(o, b, (size_t)n);
}

/* field's key; wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
static void key(Buf *o, int field, int wire) { varint(o, (uint64_t)field << 3 | (uint64_t)wire); }

static void le(Buf *o, uint64_t v, int bytes) {
  unsigned char b[8];
  for (int k = 0; k < bytes; k++) b[k] = (unsigned char)(v >> (8 * k));
  put(o, b, (size_t)bytes);
}

static void f64(Buf *o, int field, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  key(o, field, 1);
  le(o, u, 8);
}

static void f32(Buf *o, int field, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  key(o, field, 5);
  le(o, u, 4);
}

static void bytes(Buf *o, int field, const void *p, size_t n) {
  key(o, field, 2);
  varint(o, n);
  put(o, p, n);
}

/* One TFRecord of data. 0, or -1 (errno set). */
static int record(FILE *f, const Buf *data) {
  Buf h = {0};
  le(&h, data->n, 8);
  le(&h, masked_crc(h.b, 8), 4);
  unsigned char tail[4];
  uint32_t c = masked_crc(data->b, data->n);
  for (int k = 0; k < 4; k++) tail[k] = (unsigned char)(c >> (8 * k));
  int rc =
      h.oom || fwrite(h.b, 1, h.n, f) != h.n || fwrite(data->b, 1, data->n, f) != data->n || fwrite(tail, 1, 4, f) != 4
          ? -1
          : 0;
  free(h.b);
  return rc;
}

/* Event {wall_time, step, summary {value {tag, simple_value}...}} of the finite scalars. */
static int step_event(FILE *f, const PprTbScalars *s) {
  const struct {
    const char *tag;
    double v;
  } vals[] = {{"loss", s->loss},           {"val_loss", s->val_loss},         {"lr", s->lr},
              {"grad_norm", s->grad_norm}, {"tokens_per_s", s->tokens_per_s}, {"mfu", s->mfu}};
  Buf sum = {0}, ev = {0};
  for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
    if (!isfinite(vals[k].v)) continue;
    Buf v = {0};
    bytes(&v, 1, vals[k].tag, strlen(vals[k].tag));
    f32(&v, 2, (float)vals[k].v);
    bytes(&sum, 1, v.b, v.n);
    sum.oom |= v.oom;
    free(v.b);
  }
  f64(&ev, 1, s->wall_time);
  key(&ev, 2, 0);
  varint(&ev, (uint64_t)s->step);
  bytes(&ev, 5, sum.b, sum.n);
  int rc = sum.oom || ev.oom ? (errno = ENOMEM, -1) : record(f, &ev);
  free(sum.b);
  free(ev.b);
  return rc;
}

static int version_event(FILE *f, double wall) {
  Buf ev = {0};
  f64(&ev, 1, wall);
  bytes(&ev, 3, "brain.Event:2", 13);
  int rc = ev.oom ? (errno = ENOMEM, -1) : record(f, &ev);
  free(ev.b);
  return rc;
}

static double num(const json_t *o, const char *k) {
  const json_t *v = json_object_get(o, k);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

/* ppr_log_each's visitor: one logged step as an event. */
static int log_step(void *ctx, const json_t *rec, double wall) {
  PprTbScalars s = {(int64_t)json_integer_value(json_object_get(rec, "step")),
                    wall,
                    num(rec, "loss"),
                    num(rec, "val_loss"),
                    num(rec, "lr"),
                    num(rec, "grad_norm"),
                    num(rec, "tokens_per_s"),
                    num(rec, "mfu")};
  return step_event(ctx, &s);
}

/* Removes DIR's event files of this run other than keep (an earlier start's). */
static void remove_others(const char *dir, const char *suffix, const char *keep) {
  DIR *d = opendir(dir);
  if (!d) return;
  size_t ns = strlen(suffix);
  for (struct dirent *e; (e = readdir(d));) {
    size_t n = strlen(e->d_name);
    if (n <= ns || strcmp(e->d_name + n - ns, suffix) || !strncmp(e->d_name, keep, strlen(keep))) continue;
    char *p = malloc(strlen(dir) + n + 2);
    if (p) sprintf(p, "%s/%s", dir, e->d_name);
    if (p) unlink(p);
    free(p);
  }
  closedir(d);
}

int ppr_tb_open(const PprCli *c, PprTb **out, char *err, size_t errlen) {
  *out = NULL;
  const char *dir = c->tensorboard;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return RT_FAIL("--tensorboard %s: cannot create the folder: %s", dir, strerror(errno));
  char host[64] = "host", suffix[64], name[160];
  gethostname(host, sizeof host - 1);
  host[strcspn(host, "/")] = '\0';
  double now = (double)time(NULL);
  snprintf(suffix, sizeof suffix, ".ppr.%s", c->run_id);
  snprintf(name, sizeof name, "events.out.tfevents.%.0f.%s%s", now, host, suffix);
  PprTb *tb = calloc(1, sizeof *tb);
  char *tmp = malloc(strlen(dir) + strlen(name) + 8);
  if (tb) tb->path = malloc(strlen(dir) + strlen(name) + 2);
  if (!tb || !tmp || !tb->path) {
    free(tmp);
    ppr_tb_close(tb);
    return RT_FAIL("out of memory");
  }
  sprintf(tb->path, "%s/%s", dir, name);
  sprintf(tmp, "%s/.%s", dir, name);
  int rc = 0;
  FILE *f = fopen(tmp, "wb");
  if (!f) rc = RT_FAIL("--tensorboard: %s: cannot create: %s", tmp, strerror(errno));
  else if (version_event(f, now)) rc = RT_FAIL("--tensorboard: %s: write failed: %s", tmp, strerror(errno));
  if (!rc) err[0] = '\0';
  if (!rc && ppr_log_each(c->log, log_step, f, err, errlen)) /* no message: the visitor's write failed */
    rc = err[0] ? -1 : RT_FAIL("--tensorboard: %s: write failed: %s", tmp, strerror(errno));
  if (f && fclose(f) != 0 && !rc) rc = RT_FAIL("--tensorboard: %s: write failed: %s", tmp, strerror(errno));
  if (!rc && rename(tmp, tb->path) != 0)
    rc = RT_FAIL("--tensorboard: %s: rename from %s failed: %s", tb->path, tmp, strerror(errno));
  if (rc) unlink(tmp);
  free(tmp);
  if (!rc) remove_others(dir, suffix, name);
  if (!rc && !(tb->f = fopen(tb->path, "ab")))
    rc = RT_FAIL("--tensorboard: %s: cannot open for appending: %s", tb->path, strerror(errno));
  if (rc) ppr_tb_close(tb);
  else *out = tb;
  return rc;
}

int ppr_tb_step(PprTb *tb, const PprTbScalars *s, char *err, size_t errlen) {
  if (step_event(tb->f, s) || fflush(tb->f) != 0)
    return RT_FAIL("--tensorboard: %s: write failed: %s", tb->path, strerror(errno));
  return 0;
}

void ppr_tb_close(PprTb *tb) {
  if (!tb) return;
  if (tb->f) fclose(tb->f);
  free(tb->path);
  free(tb);
}
