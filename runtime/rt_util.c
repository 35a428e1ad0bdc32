/* rt_util.c - what the runtime's files share: error messages, a monotonic clock, reading a file, loading a
 * library at run time. */
#include "rt_util.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void rt_util_set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

double rt_util_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int rt_util_open_file(const char *path, const char *what, size_t *size, char *err, size_t errlen) {
  *size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    rt_util_set_err(err, errlen, "%s: cannot open%s%s: %s", path, what ? " " : "", what ? what : "", strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rt_util_set_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    rt_util_set_err(err, errlen, "%s: not a regular file%s%s%s", path, what ? " (" : "", what ? what : "",
                    what ? ")" : "");
    close(fd);
    return -1;
  }
  if ((uint64_t)st.st_size >= (uint64_t)SIZE_MAX) {
    rt_util_set_err(err, errlen, "%s: file too large for this address space", path);
    close(fd);
    return -1;
  }
  *size = (size_t)st.st_size;
  return fd;
}

int rt_util_read_fd(int fd, const char *path, void *buf, size_t n, char *err, size_t errlen) {
  unsigned char *b = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      rt_util_set_err(err, errlen, "%s: read failed after %zu of %zu bytes: %s", path, got, n,
                      r < 0 ? strerror(errno) : "unexpected end of file");
      return -1;
    }
    got += (size_t)r;
  }
  return 0;
}

char *rt_util_read_file(const char *path, const char *what, size_t max, size_t *len, char *err, size_t errlen) {
  size_t n;
  *len = 0;
  int fd = rt_util_open_file(path, what, &n, err, errlen);
  if (fd < 0) return NULL;
  if (n > max) {
    rt_util_set_err(err, errlen, "%s: %zu bytes, more than the %zu expected", path, n, max);
    close(fd);
    *len = n;
    return NULL;
  }
  char *buf = malloc(n + 1);
  if (!buf) {
    rt_util_set_err(err, errlen, "%s: out of memory reading %zu bytes", path, n);
    close(fd);
    return NULL;
  }
  if (rt_util_read_fd(fd, path, buf, n, err, errlen)) {
    close(fd);
    free(buf);
    return NULL;
  }
  close(fd);
  buf[n] = 0;
  *len = n;
  return buf;
}

int rt_util_load_lib(void **handle, const char *soname, const char *const *names, void *const *slots, int n, char *err,
                     size_t errlen) {
  if (*handle) return 0;
  void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    rt_util_set_err(err, errlen, "%s cannot be loaded (%s)", soname, e ? e : "dlopen failed");
    return -1;
  }
  for (int i = 0; i < n; i++) {
    void *sym = dlsym(h, names[i]);
    if (!sym) {
      rt_util_set_err(err, errlen, "%s has no %s", soname, names[i]);
      dlclose(h);
      return -2;
    }
    memcpy(slots[i], &sym, sizeof sym);
  }
  *handle = h;
  return 0;
}
