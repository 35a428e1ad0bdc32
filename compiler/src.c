/* src.c — source files: a model file read whole (or a string, for tests), which diagnostics
 * point into. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ppc.h"

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
