/* diag.c — source files, locations and diagnostics: "file:line:col: error: ..." with a caret. */
#define _DEFAULT_SOURCE /* madvise's MADV_HUGEPAGE */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>

#include "ppc.h"

/* ============================================================================================
 * Memory
 * ========================================================================================== */

static void oom(void) {
  fputs("ppc: error: out of memory\n", stderr);
  exit(1);
}

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) oom();
  return p;
}

void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) oom();
  return p;
}

void *xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p) oom();
#ifdef MADV_HUGEPAGE
  /* the node arrays of a 100,000-layer model: huge pages where the kernel offers them on request,
   * a 512th of the page faults (advice only: failure changes nothing) */
  const uintptr_t huge = (uintptr_t)2 << 20;
  if (n >= 4 * huge) {
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + n) & ~(huge - 1);
    if (e > a) madvise((void *)a, e - a, MADV_HUGEPAGE);
  }
#endif
  return p;
}

char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

char *xstrndup(const char *s, size_t n) {
  char *p = xmalloc(n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

/* ============================================================================================
 * Source files
 * ========================================================================================== */

Src *src_load(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "ppc: error: cannot open '%s': %s\n", path, strerror(errno));
    return NULL;
  }
  size_t cap = 4096, len = 0;
  char *text = xmalloc(cap);
  size_t got;
  while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
    len += got;
    if (len + 1 == cap) text = xrealloc(text, cap *= 2);
    if (len > (size_t)64 << 20) {
      fprintf(stderr, "ppc: error: '%s' is larger than 64 MiB; not a model description\n", path);
      fclose(f);
      free(text);
      return NULL;
    }
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    fprintf(stderr, "ppc: error: cannot read '%s'\n", path);
    free(text);
    return NULL;
  }
  text[len] = 0;
  Src *s = xcalloc(1, sizeof *s);
  s->path = path;
  s->text = text;
  s->len = len;
  return s;
}

Src *src_from_string(const char *path, const char *text) {
  Src *s = xcalloc(1, sizeof *s);
  s->path = path;
  s->text = xstrdup(text);
  s->len = strlen(text);
  return s;
}

void src_free(Src *s) {
  if (!s) return;
  free(s->text);
  free(s);
}

/* ============================================================================================
 * Diagnostics
 * ========================================================================================== */

/* Line (1-based), column (1-based, in bytes) and the line's extent for a byte offset. */
static void locate(const Src *s, int off, int *line, int *col, int *lstart, int *lend) {
  if (off > (int)s->len) off = (int)s->len;
  int l = 1, start = 0;
  for (int i = 0; i < off; i++)
    if (s->text[i] == '\n') l++, start = i + 1;
  int end = start;
  while (end < (int)s->len && s->text[end] != '\n') end++;
  *line = l;
  *col = off - start + 1;
  *lstart = start;
  *lend = end;
}

#define MAX_ERRORS 20  /* then "too many errors": a flood helps nobody */
#define SHOWN      160 /* columns of a long source line shown around the culprit */

static void report(Src *s, Loc at, const char *kind, const char *fmt, va_list ap) {
  fflush(stdout);
  if (at.first < 0) {
    fprintf(stderr, "%s: %s: ", s->path, kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    return;
  }
  int line, col, ls, le;
  locate(s, at.first, &line, &col, &ls, &le);
  fprintf(stderr, "%s:%d:%d: %s: ", s->path, line, col, kind);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  /* the source line (a window of SHOWN columns around the culprit when it is longer), control
   * characters shown as spaces so the caret stays aligned; built in one buffer, written once */
  int from = ls, to = le;
  if (le - ls > SHOWN) {
    from = at.first - SHOWN / 2 > ls ? at.first - SHOWN / 2 : ls;
    to = from + SHOWN < le ? from + SHOWN : le;
  }
  int last = at.last < to ? at.last : to;
  char *buf = xmalloc(2 * (size_t)(to - from) + 32), *b = buf;
  b += sprintf(b, "  %s", from > ls ? "..." : "");
  for (int i = from; i < to; i++) {
    unsigned char c = (unsigned char)s->text[i];
    *b++ = c == '\t' || c >= 32 ? (char)c : ' ';
  }
  b += sprintf(b, "%s\n  %s", to < le ? "..." : "", from > ls ? "   " : "");
  for (int i = from; i < at.first && i < to; i++) *b++ = s->text[i] == '\t' ? '\t' : ' ';
  *b++ = '^';
  for (int i = at.first + 1; i < last; i++) *b++ = '~';
  *b++ = '\n';
  fwrite(buf, 1, (size_t)(b - buf), stderr);
  free(buf);
}

void diag_error(Src *s, Loc at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(s, at, "error", fmt, ap);
  va_end(ap);
  if (++s->nerrors == MAX_ERRORS) diag_fatal("%s: too many errors (%d); stopping", s->path, MAX_ERRORS);
}

void diag_note(Src *s, Loc at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(s, at, "note", fmt, ap);
  va_end(ap);
}

void diag_fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fflush(stdout);
  fputs("ppc: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}
