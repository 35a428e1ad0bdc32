/* check.h — the unit tests' check: counts a result, prints a failing one (every one with
 * VERBOSE set, or in a test that defines CHECK_PRINT_ALL before including this); the test ends
 * with check_done(), whose line "N passed, M failed" run.sh tallies. */
#ifndef CHECK_H
#define CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int check_pass, check_fail;

static int check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int check(int ok, const char *fmt, ...) {
  va_list ap;
#ifdef CHECK_PRINT_ALL
  int all = 1;
#else
  int all = getenv("VERBOSE") != NULL;
#endif
  if (!ok || all) {
    printf("%s ", ok ? "PASS" : "FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
  }
  ok ? check_pass++ : check_fail++;
  return ok;
}

static int check_done(void) {
  printf("%d passed, %d failed\n", check_pass, check_fail);
  return check_fail != 0;
}

#endif /* CHECK_H */
