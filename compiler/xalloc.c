/* xalloc.c — the compiler's allocators: malloc, calloc, realloc and strdup that end the compile
 * with "out of memory" instead of returning NULL. */
#define _DEFAULT_SOURCE /* madvise's MADV_HUGEPAGE */
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>

#include "ppc.h"

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
