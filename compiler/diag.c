/* diag.c — locations and diagnostics: "file:line:col: error: ..." with a caret. */
#include <stdarg.h>
#include <stdlib.h>

#include "ppc.h"

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
