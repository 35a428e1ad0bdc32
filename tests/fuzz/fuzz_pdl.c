/* fuzz_pdl.c — libFuzzer target: a .pdl source through all of ppc (front end, every pass) to the
 * rank listings, and each listing ppc writes back through ppr's listing parser.
 *
 * The driver itself (compiler/ppc.c) is linked in, built with -Dmain=ppc_main and, like every
 * compiler source, -Dexit=fuzz_ppc_exit, so that each input runs ppc's real pass order:
 *
 *   ppc INPUT [ARGS] --emit program
 *
 * ARGS come from the input's first "# ARGS: ..." line, as in tests/golden (anything but -o, which
 * would write files); without an --emit there, --emit program. The input is written to an
 * unlinked temporary file and ppc reads it as /proc/self/fd/N.
 *
 * What counts as a bug (the target aborts, and libFuzzer saves the input):
 *   - a sanitizer report (AddressSanitizer, UndefinedBehaviorSanitizer, LeakSanitizer);
 *   - an internal error (a line "ppc: error: internal: ...", diag_fatal's), or flex's fatal error;
 *   - ppc succeeding with --emit program while a listing it printed does not load in ppr's
 *     parser (rt_prog_parse): whatever ppc writes, ppr accepts (common/pp_limits.h).
 * An exit() inside ppc that is not an internal error (bad usage, "too many errors") is an
 * ordinary rejection: fuzz_ppc_exit jumps back here and the memory ppc had allocated is freed
 * (with AddressSanitizer, whose allocator hooks log each allocation made while ppc runs).
 *
 * ppc's stdout (the listings) and stderr (its diagnostics) go to memory; PPC_FUZZ_VERBOSE=1 in
 * the environment copies the diagnostics of each input to stderr (for reproducing a case). */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_prog.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#include <sanitizer/allocator_interface.h>
#endif
#endif

int ppc_main(int argc, char **argv);                    /* compiler/ppc.c, built with -Dmain=ppc_main */
void fuzz_ppc_exit(int code) __attribute__((noreturn)); /* what ppc's exit() calls here */

#define MAX_ARGS 32
#define ERR_CAP  ((size_t)1 << 18)  /* ppc's diagnostics of one input */
#define OUT_CAP  ((size_t)64 << 20) /* ppc's listings of one input; longer: not checked */

static jmp_buf back;
static volatile int in_ppc;
static int verbose;
static int src_fd = -1;
static char src_path[64];
static char *errbuf, *outbuf;
static FILE *errcap, *outcap;
static FILE *real_stdout, *real_stderr;

/* ---- what ppc allocates while it runs, to free after an exit() ------------------------------- */

#ifdef FUZZ_ASAN
#define LOG_CAP ((size_t)1 << 22)
static void *alog[LOG_CAP];
static size_t nlog;
static int log_lost;
static volatile int logging;

static void on_malloc(const volatile void *p, size_t n) {
  (void)n;
  if (!logging) return;
  if (nlog < LOG_CAP) alog[nlog++] = (void *)(uintptr_t)p;
  else log_lost = 1;
}
static void on_free(const volatile void *p) { (void)p; }

static int cmp_ptr(const void *a, const void *b) {
  void *const *pa = a, *const *pb = b;
  uintptr_t x = (uintptr_t)pa[0], y = (uintptr_t)pb[0];
  return x < y ? -1 : x > y;
}

/* Free whatever ppc allocated and still held when it called exit(). */
static void free_abandoned(void) {
  if (log_lost) {
    fprintf(real_stderr, "fuzz_pdl: more than %zu allocations in one run: some are not freed\n", LOG_CAP);
    log_lost = 0;
  }
  qsort(alog, nlog, sizeof *alog, cmp_ptr);
  for (size_t i = 0; i < nlog; i++)
    if ((i == 0 || alog[i] != alog[i - 1]) && __sanitizer_get_ownership(alog[i])) free(alog[i]);
  nlog = 0;
}
#define LOG_START() (nlog = 0, logging = 1)
#define LOG_STOP()  (logging = 0)
#else
static void free_abandoned(void) {}
#define LOG_START() ((void)0)
#define LOG_STOP()  ((void)0)
#endif

void fuzz_ppc_exit(int code) {
  if (!in_ppc) _Exit(code); /* not reached: only ppc's sources call this */
  longjmp(back, 1);
}

/* ---- set-up ---------------------------------------------------------------------------------- */

/* A stream into a fixed buffer, unbuffered: nothing is allocated once it is open. */
static FILE *mem_stream(char **buf, size_t cap) {
  *buf = calloc(1, cap);
  FILE *f = *buf ? fmemopen(*buf, cap, "w") : NULL;
  if (!f || setvbuf(f, NULL, _IONBF, 0)) {
    fprintf(stderr, "fuzz_pdl: cannot open a memory stream\n");
    abort();
  }
  return f;
}

/* Runs ppc on the current source; returns its exit status. *exited: it called exit(). out, err:
 * the NUL-terminated text it printed. */
static int run_ppc(int argc, char **argv, int *exited, size_t *outlen) {
  rewind(errcap);
  rewind(outcap);
  errbuf[0] = 0;
  outbuf[0] = 0;
  real_stdout = stdout;
  real_stderr = stderr;
  stdout = outcap;
  stderr = errcap;
  volatile int rc = 1;
  *exited = 0;
  /* ppc reads its command line with getopt_long, whose state lives in globals: start afresh
   * (glibc: optind 0 also resets its position inside grouped options) */
#ifdef __GLIBC__
  optind = 0;
#else
  optind = 1;
#endif
  LOG_START();
  in_ppc = 1;
  if (setjmp(back) == 0) {
    rc = ppc_main(argc, argv);
  } else {
    *exited = 1;
  }
  in_ppc = 0;
  LOG_STOP();
  stdout = real_stdout;
  stderr = real_stderr;
  long e = ftell(errcap), o = ftell(outcap);
  errbuf[e < 0 ? 0 : (size_t)e < ERR_CAP ? (size_t)e : ERR_CAP - 1] = 0;
  *outlen = o < 0 ? 0 : (size_t)o < OUT_CAP ? (size_t)o : OUT_CAP;
  if (*exited) free_abandoned();
#ifdef FUZZ_ASAN
  nlog = 0;
#endif
  return rc;
}

static void set_source(const uint8_t *data, size_t size) {
  if (ftruncate(src_fd, 0) || pwrite(src_fd, data, size, 0) != (ssize_t)size) {
    perror("fuzz_pdl: writing the source");
    abort();
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  verbose = getenv("PPC_FUZZ_VERBOSE") && atoi(getenv("PPC_FUZZ_VERBOSE")) > 0;
  const char *tmp = getenv("TMPDIR");
  char tpl[4096];
  snprintf(tpl, sizeof tpl, "%s/fuzz_pdl.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  src_fd = mkstemp(tpl);
  if (src_fd < 0 || unlink(tpl)) {
    perror("fuzz_pdl: a temporary file");
    abort();
  }
  snprintf(src_path, sizeof src_path, "/proc/self/fd/%d", src_fd);
  errcap = mem_stream(&errbuf, ERR_CAP);
  outcap = mem_stream(&outbuf, OUT_CAP);
#ifdef FUZZ_ASAN
  __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
#endif
  /* one run first, untracked, so that whatever the C library sets up on first use (stdio,
   * locale, strerror) is not counted as ppc's */
  static const char warm[] = "model \"w\"\ndim v = 8\ndim h = 4\ntrain { micro_batch = 1, seq = 4, microbatches = 1 }\n"
                             "input tokens: i32[B, S]\ninput labels: i32[B, S]\n"
                             "param e: [v, h] as \"e\" init ones\nx = embedding(tokens, e)\n"
                             "loss = cross_entropy(transpose_sb(linear(x, e)), labels)\n";
  set_source((const uint8_t *)warm, sizeof warm - 1);
  char *wargv[] = {"ppc", src_path, "--emit", "program", NULL};
  int exited;
  size_t outlen;
  run_ppc(4, wargv, &exited, &outlen);
  return 0;
}

/* ---- one input ------------------------------------------------------------------------------- */

/* The words of the first "# ARGS: " line into argv[first..], -o and its value left out; returns
 * the new argc. *emit: an --emit was given. */
static int source_args(const char *text, size_t n, char **argv, int argc, char *store, size_t storecap, int *emit) {
  *emit = 0;
  const char *line = NULL, *end = NULL;
  for (size_t i = 0; i + 8 <= n; i++) {
    if ((i == 0 || text[i - 1] == '\n') && !memcmp(text + i, "# ARGS: ", 8)) {
      line = text + i + 8;
      end = memchr(line, '\n', n - (size_t)(line - text));
      if (!end) end = text + n;
      break;
    }
  }
  if (!line) return argc;
  size_t len = (size_t)(end - line) < storecap - 1 ? (size_t)(end - line) : storecap - 1;
  memcpy(store, line, len);
  store[len] = 0;
  int skip_value = 0;
  for (char *w = strtok(store, " \t\r"); w && argc < MAX_ARGS - 3; w = strtok(NULL, " \t\r")) {
    if (skip_value) {
      skip_value = 0;
      continue;
    }
    if (!strcmp(w, "-o")) {
      skip_value = 1;
      continue;
    }
    if (!strncmp(w, "-o=", 3)) continue;
    if (!strncmp(w, "--emit", 6)) *emit = 1;
    argv[argc++] = w;
  }
  return argc;
}

/* Whether a line of text starts with prefix: ppc's own messages start a line, while the source
 * lines it quotes are indented (so a model cannot forge one). A plain loop, not strncmp, which
 * libFuzzer would watch and learn the prefix from. */
static int line_starts(const char *text, const char *prefix) {
  for (const char *l = text; *l; l++) {
    if (l != text && l[-1] != '\n') continue;
    const char *a = l, *b = prefix;
    while (*b && *a == *b) a++, b++;
    if (!*b) return 1;
  }
  return 0;
}

static void fail(const char *why, const char *detail) {
  fprintf(stderr, "fuzz_pdl: %s\n", why);
  if (detail && *detail) fprintf(stderr, "%s\n", detail);
  fprintf(stderr, "---- ppc's diagnostics ----\n%s\n", errbuf);
  abort();
}

/* Each "ppr-program" listing in out[0..n) through ppr's parser. */
static void check_listings(char *out, size_t n) {
  static const char head[] = "ppr-program ";
  char err[4096];
  int k = 0;
  size_t at = 0;
  while (at < n) {
    size_t next = at + 1;
    while (next < n && !(out[next - 1] == '\n' && !strncmp(out + next, head, sizeof head - 1))) next++;
    if (next > n) next = n;
    RtProg *p = NULL;
    err[0] = 0;
    if (rt_prog_parse("emitted.prog", out + at, next - at, &p, err, sizeof err)) {
      char what[128];
      snprintf(what, sizeof what, "listing %d that ppc wrote (bytes %zu..%zu of its output) does not load:", k, at,
               next);
      fprintf(stderr, "---- the listing ----\n%.*s\n", (int)(next - at < 65536 ? next - at : 65536), out + at);
      fail(what, err);
    }
    rt_prog_free(p);
    k++;
    at = next;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  set_source(data, size);
  static char store[4096];
  char *argv[MAX_ARGS + 1] = {"ppc", src_path};
  int emit;
  int argc = source_args((const char *)data, size, argv, 2, store, sizeof store, &emit);
  int program = !emit;
  if (program) {
    argv[argc++] = "--emit";
    argv[argc++] = "program";
  } else {
    for (int i = 2; i < argc; i++)
      if ((!strcmp(argv[i], "--emit") && i + 1 < argc && !strcmp(argv[i + 1], "program")) ||
          !strcmp(argv[i], "--emit=program"))
        program = 1;
  }
  argv[argc] = NULL;
  int exited;
  size_t outlen;
  int rc = run_ppc(argc, argv, &exited, &outlen);
  if (verbose) {
    fputs("---- ppc", stderr);
    for (int i = 1; i < argc; i++) fprintf(stderr, " %s", argv[i]);
    fprintf(stderr, ": %s %d, %zu bytes of output ----\n%s", exited ? "exit()" : "returned", rc, outlen, errbuf);
  }
  if (line_starts(errbuf, "ppc: error: internal") || line_starts(errbuf, "fatal flex scanner"))
    fail("ppc reported an internal error", NULL);
  if (!exited && rc == 0 && program && outlen < OUT_CAP) check_listings(outbuf, outlen);
  return 0;
}
