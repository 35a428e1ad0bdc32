/* test_util.h — small helpers shared by the unit-test programs (each is its own executable). */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp_dtype.h"

/* The whole file as a NUL-terminated string, or NULL. */
static inline char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)(n > 0 ? n : 0) + 1);
  if (n < 0 || fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
  s[n] = 0;
  fclose(f);
  return s;
}

/* How many times what occurs in s (overlaps counted). */
static inline int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

/* The element types of kernel NAME's buffer parameters, in order (PP_F32, PP_I32 or PP_BF16), from
 * its signature in a stage's C kernels csrc ("void NAME(uint16_t *restrict p0, const float
 * *restrict p1, ..."): scratch buffers of different types may share bytes, so the listing's buffer
 * lines cannot tell. Returns how many. */
static inline int test_kernel_types(const char *csrc, const char *name, int *dt, int max) {
  char head[96];
  snprintf(head, sizeof head, "\nvoid %s(", name);
  const char *s = csrc ? strstr(csrc, head) : NULL;
  int n = 0;
  for (s = s ? s + strlen(head) : NULL; s && *s && *s != ')' && n < max;) {
    const char *e = strpbrk(s, ",)");
    if (!e) break;
    if (memchr(s, '*', (size_t)(e - s)))
      dt[n++] = strstr(s, "uint16_t") && strstr(s, "uint16_t") < e ? PP_BF16
                : strstr(s, "int32_t") && strstr(s, "int32_t") < e ? PP_I32
                                                                   : PP_F32;
    s = *e == ',' ? e + 1 : e;
  }
  return n;
}

#endif
