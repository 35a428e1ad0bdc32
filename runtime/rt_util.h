/* rt_util.h - what the runtime's files share: error messages, a monotonic clock, reading a file, loading a library. */
#ifndef RT_UTIL_H
#define RT_UTIL_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define RT_UTIL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RT_UTIL_PRINTF(a, b)
#endif
/* A macro's value as a string: RT_UTIL_STR(CUBLAS_VER_MAJOR) is "13" */
#define RT_UTIL_STR_(x) #x
#define RT_UTIL_STR(x)  RT_UTIL_STR_(x)

/* Formats a message into err[0..errlen) (truncated if needed); nothing when err is NULL or
 * errlen 0. */
void rt_util_set_err(char *err, size_t errlen, const char *fmt, ...) RT_UTIL_PRINTF(3, 4);

/* Where member t of nt starts in n units shared evenly (member t takes [rt_util_share(n, t, nt),
 * rt_util_share(n, t + 1, nt)); the shares differ by at most one unit): the threads' parts of a
 * GEMM, and a team's rows and panels in rt_sgemm. */
static inline int rt_util_share(int64_t n, int t, int nt) { return (int)(n * t / nt); }

/* CLOCK_MONOTONIC in seconds. */
double rt_util_now_s(void);

/* Opens the regular file at path for reading: its descriptor (close it), its byte count in
 * *size. -1 on failure, with "PATH: cannot open[ WHAT]: ...", "PATH: cannot stat: ...", "PATH:
 * not a regular file[ (WHAT)]" or "PATH: file too large for this address space" in err; what
 * (may be NULL) says what the file is. */
int rt_util_open_file(const char *path, const char *what, size_t *size, char *err, size_t errlen);

/* Reads n bytes from fd into buf (a short read or EINTR retried): 0, or -1 with "PATH: read
 * failed after G of N bytes: ..." in err. */
int rt_util_read_fd(int fd, const char *path, void *buf, size_t n, char *err, size_t errlen);

/* The whole of the regular file at path (rt_util_open_file's checks and messages) in a malloc'ed
 * buffer with a NUL after its *len bytes (free it). A file of more than max bytes is not read:
 * NULL with *len its size (> max) and a message that callers may replace; on other failures
 * NULL with *len 0. */
char *rt_util_read_file(const char *path, const char *what, size_t max, size_t *len, char *err, size_t errlen);

/* Loads the shared library soname once (*handle, NULL the first time) and each of its n functions
 * names[i] into the function pointer at slots[i] (a void * slot's bytes): 0; -1 with "SONAME
 * cannot be loaded (...)" in err, or -2 with "SONAME has no NAME" (an older library), *handle
 * still NULL. The libraries of
 * one device only (cuBLASLt, NCCL) load so when that device starts: ppr starts without them. */
int rt_util_load_lib(void **handle, const char *soname, const char *const *names, void *const *slots, int n, char *err,
                     size_t errlen);

#endif /* RT_UTIL_H */
