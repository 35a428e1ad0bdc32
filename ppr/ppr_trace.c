/* ppr_trace.c - --trace: the timelines of all ranks on rank 0, as JSON, SVG and the bubble (ppr_trace.h). */
#include "ppr_trace.h"
#include "pp_timeline.h"
#include "ppr_pack.h"
#include "ppr_world.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *event_cat(RtEventKind kind) {
  switch (kind) {
  case RT_EV_STEP: return "step";
  case RT_EV_F:
  case RT_EV_B:
  case RT_EV_W:
  case RT_EV_OPT: return "compute";
  case RT_EV_POST:
  case RT_EV_WAIT:
  case RT_EV_COLL: return "comm";
  case RT_EV_HOOK: return "save";
  case RT_EV_ZERO: return "zero_grads";
  }
  return "step";
}

/* The measured timeline of the last traced step as SVG beside the JSON (FILE.json -> FILE.svg, any
 * other name gets .svg added): each rank's F, B, W and OPT, from the step's first start on. 0, or
 * a message in world.err. */
static int write_trace_svg(const char *path, const RtProg *p, const RtEvent *const *ev, const int64_t *nev,
                           int64_t step) {
  size_t n = strlen(path);
  int json = n >= 5 && !strcmp(path + n - 5, ".json");
  char *svg = malloc(n + 8);
  PpSpan **span = calloc((size_t)world.nranks, sizeof *span);
  PpLane *lane = calloc((size_t)world.nranks, sizeof *lane);
  if (!svg || !span || !lane) ppr_die("out of memory");
  snprintf(svg, n + 8, "%.*s.svg", (int)(json ? n - 5 : n), path);
  double t0 = INFINITY, t1 = 0;
  for (int r = 0; r < world.nranks; r++) {
    span[r] = calloc((size_t)nev[r] + 1, sizeof **span);
    if (!span[r]) ppr_die("out of memory");
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
  for (int r = 0; r < world.nranks; r++)
    for (int i = 0; i < lane[r].n; i++) span[r][i].t0 -= t0, span[r][i].t1 -= t0;
  int rc = 0;
  FILE *fp = fopen(svg, "w");
  if (!fp)
    rc = rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__, "%s: cannot open for writing: %s", svg,
                    strerror(errno));
  else {
    char title[160], sub[160];
    snprintf(title, sizeof title, "%s: schedule %s, %d ranks, %d micro-batches (measured, ppr --trace)", p->model,
             p->schedule_name, world.nranks, p->local_microbatches);
    snprintf(sub, sizeof sub, "step %lld, %.3f ms from the first compute entry to the last", (long long)step,
             t1 > t0 ? t1 - t0 : 0);
    pp_timeline_svg(fp, title, sub, lane, world.nranks, t1 > t0 ? t1 - t0 : 0, "ms");
    if (fclose(fp) != 0)
      rc = rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__, "%s: write failed: %s", svg, strerror(errno));
    else printf("ppr: trace: %s: the timeline of step %lld\n", svg, (long long)step);
  }
  for (int r = 0; r < world.nranks; r++) free(span[r]);
  free(span);
  free(lane);
  free(svg);
  return rc;
}

/* What rank r sent: its stage, whether its event buffer overflowed, per-step wall and compute
 * times, and its events. */
typedef struct {
  int stage, lost;
  int64_t nsteps, nev;
  const double *wall, *comp;
  const RtEvent *ev;
} RankTrace;

static void unpack_rank(const unsigned char *q, RankTrace *t) {
  t->stage = (int)ppr_get_u64(&q);
  t->lost = ppr_get_u64(&q) != 0;
  t->nsteps = (int64_t)ppr_get_u64(&q);
  t->wall = (const double *)(const void *)q;
  q += (size_t)t->nsteps * 8;
  t->comp = (const double *)(const void *)q;
  q += (size_t)t->nsteps * 8;
  t->nev = (int64_t)ppr_get_u64(&q);
  t->ev = (const RtEvent *)(const void *)q;
}

/* 1 - compute / wall of rank r's k-th traced step */
static double bubble(const RankTrace *t, int64_t k) { return t->wall[k] > 0 ? 1 - t->comp[k] / t->wall[k] : 0.0; }

/* Rank r's mean bubble over its traced steps from k0 on. */
static double mean_bubble(const RankTrace *t, int64_t k0, int64_t ns) {
  double sum = 0;
  for (int64_t k = k0; k < ns; k++) sum += bubble(t, k);
  return ns > k0 ? sum / (double)(ns - k0) : 0.0;
}

/* The Chrome trace: a process per rank (named by its stage), its events on thread 0 and its steps
 * on thread 1; and, as the trace's metadata, the bubble of every rank in each of the ns steps after
 * step `first` (steps first+1 ..), with its mean over them without the first (the warm-up) when
 * there are two or more. */
static void write_json(FILE *fp, const RankTrace *t, int64_t first, int64_t ns) {
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", fp);
  for (int r = 0; r < world.nranks; r++) {
    fprintf(
        fp,
        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d (stage %d)\"}},\n"
        "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}},\n"
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"schedule\"}},\n"
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"steps\"}}",
        r, r, t[r].stage, r, r, r, r);
    for (int64_t i = 0; i < t[r].nev; i++) {
      RtEvent v;
      memcpy(&v, t[r].ev + i, sizeof v);
      v.name[sizeof v.name - 1] = 0;
      fprintf(fp,
              ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
              "\"args\":{\"step\":%d}}",
              v.name, event_cat((RtEventKind)v.kind), v.ts, v.dur, r, v.kind == RT_EV_STEP ? 1 : 0, (int)v.step);
    }
    fputs(r + 1 < world.nranks ? ",\n" : "\n", fp);
  }
  int64_t k0 = ns > 1;
  fprintf(fp,
          "],\n\"ppr_bubble\":{\"what\":\"1 - compute / step time\",\"first_step\":%lld,\"mean_from_step\":%lld,"
          "\"ranks\":[",
          (long long)first + 1, (long long)(first + 1 + k0));
  for (int r = 0; r < world.nranks; r++) {
    fprintf(fp, "%s\n{\"rank\":%d,\"stage\":%d,\"steps\":[", r ? "," : "", r, t[r].stage);
    for (int64_t k = 0; k < ns; k++) fprintf(fp, "%s%.4f", k ? "," : "", bubble(&t[r], k));
    fprintf(fp, "],\"mean\":%.4f}", mean_bubble(&t[r], k0, ns));
  }
  fputs("]}}\n", fp);
}

/* The bubble's one line: each rank's mean over the traced steps (without the first when there are
 * two or more). */
static void print_bubble(const RankTrace *t, int64_t first, int64_t ns, const char *path) {
  int64_t k0 = ns > 1;
  printf("ppr: bubble (1 - compute / step time), mean of steps %lld..%lld:", (long long)(first + 1 + k0),
         (long long)(first + ns));
  for (int r = 0; r < world.nranks; r++)
    printf("%s rank %d/s%d %.3f", r ? "," : "", r, t[r].stage, mean_bubble(&t[r], k0, ns));
  printf(" (each step's: %s, \"ppr_bubble\")\n", path);
  fflush(stdout);
}

/* Rank 0: the gathered blocks written out. 0, or -1 with the message in world.err. */
static int write_all(const RtProg *p, const char *path, const unsigned char *all, const size_t *sizes, int64_t first) {
  char *e = world.err;
  size_t elen = sizeof world.err;
  int n = world.nranks;
  RankTrace *t = calloc((size_t)n, sizeof *t);
  const RtEvent **evs = calloc((size_t)n, sizeof *evs);
  int64_t *nevs = calloc((size_t)n, sizeof *nevs), total = 0, ns = INT64_MAX;
  if (!t || !evs || !nevs) ppr_die("out of memory");
  int lost = 0;
  for (int r = 0, at = 0; r < n; at += (int)sizes[r++]) {
    unpack_rank(all + at, &t[r]);
    evs[r] = t[r].ev;
    nevs[r] = t[r].nev;
    total += t[r].nev;
    lost |= t[r].lost;
    if (t[r].nsteps < ns) ns = t[r].nsteps;
  }
  int rc = 0;
  FILE *fp = fopen(path, "w");
  if (!fp) rc = rt_fail_at(e, elen, __FILE__, __LINE__, "%s: cannot open for writing: %s", path, strerror(errno));
  else {
    write_json(fp, t, first, ns);
    if (fclose(fp) != 0) rc = rt_fail_at(e, elen, __FILE__, __LINE__, "%s: write failed: %s", path, strerror(errno));
  }
  if (!rc) {
    printf("ppr: trace: %s: %lld events of %d rank%s%s\n", path, (long long)total, n, n > 1 ? "s" : "",
           lost ? " (some ranks ran out of memory: events lost)" : "");
    if (ns > 0) rc = write_trace_svg(path, p, evs, nevs, first + ns);
  }
  if (!rc && ns > 0) print_bubble(t, first, ns, path);
  free(t);
  free((void *)evs);
  free(nevs);
  return rc;
}

void ppr_write_trace(const RtProg *p, RtExec *x, const char *path, const double *walls, const double *comps,
                     int64_t first, int64_t nsteps) {
  rt_comm_set_what(world.comm, "--trace: the timelines to rank 0");
  int64_t nev = 0;
  int oom = 0;
  const RtEvent *ev = rt_exec_events(x, &nev, &oom);
  PprBuf b = {0};
  ppr_put_u64(&b, (uint64_t)p->stage);
  ppr_put_u64(&b, (uint64_t)oom);
  ppr_put_u64(&b, (uint64_t)nsteps);
  ppr_put(&b, walls, (size_t)nsteps * sizeof *walls);
  ppr_put(&b, comps, (size_t)nsteps * sizeof *comps);
  ppr_put_u64(&b, (uint64_t)nev);
  ppr_put(&b, ev, (size_t)nev * sizeof *ev);
  ppr_settle(b.oom ? rt_fail_at(world.err, sizeof world.err, __FILE__, __LINE__, "out of memory") : 0);
  unsigned char *all = NULL;
  size_t *sizes = calloc((size_t)world.nranks, sizeof *sizes);
  if (!sizes) ppr_die("out of memory");
  int rc = rt_comm_gather(world.comm, b.b, b.n, &all, sizes, world.err, sizeof world.err);
  free(b.b);
  if (world.me == 0 && !rc) rc = write_all(p, path, all, sizes, first);
  free(all);
  free(sizes);
  ppr_settle_root(rc);
}
