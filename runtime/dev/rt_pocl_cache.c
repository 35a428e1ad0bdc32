/* rt_pocl_cache.c - PoCL's kernel cache proved before PoCL reads it (rt_pocl_cache.h). PoCL loads the
 * shared objects of its cache (DIR/XX/HASH/KERNEL/GEOMETRY/KERNEL.so) with dlopen, so a damaged one
 * ends the process with a signal. A manifest DIR/.ppr-manifest records each file's size, mtime and
 * XXH3 hash as ppr last saw it; at open every recorded file whose size or mtime changed is hashed,
 * and a program entry DIR/XX/HASH holding a file that no longer matches is removed (PoCL builds it
 * again); so is the entry of a shared object the manifest does not hold whose ELF headers are not
 * inside the file (a truncated one). */
#include "rt_pocl_cache.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MANIFEST  ".ppr-manifest"
#define MAX_DEPTH 8 /* DIR/XX/HASH/KERNEL/GEOMETRY/FILE is 5 */

typedef struct {
  char *rel; /* the path under the cache folder */
  long long size, mtime_ns;
  unsigned long long hash;
} Entry;

typedef struct {
  Entry *e;
  int n, cap;
} Manifest;

/* PoCL's cache folder: $POCL_CACHE_DIR, else $XDG_CACHE_HOME/pocl/kcache, else ~/.cache/pocl/kcache. */
static int cache_dir(char *buf, size_t n) {
  const char *d = getenv("POCL_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
  if (d && *d) return snprintf(buf, n, "%s", d) < (int)n ? 0 : -1;
  if (x && *x) return snprintf(buf, n, "%s/pocl/kcache", x) < (int)n ? 0 : -1;
  if (h && *h) return snprintf(buf, n, "%s/.cache/pocl/kcache", h) < (int)n ? 0 : -1;
  return -1;
}

static long long mtime_ns(const struct stat *st) {
  return (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

/* The XXH3 hash of a file's bytes; 0 with *ok 0 when it cannot be read. */
static unsigned long long hash_file(const char *path, int *ok) {
  FILE *f = fopen(path, "rb");
  XXH3_state_t *st = XXH3_createState();
  unsigned char buf[1 << 16];
  *ok = f && st;
  if (*ok) XXH3_64bits_reset(st);
  for (size_t n; *ok && (n = fread(buf, 1, sizeof buf, f)) > 0;) XXH3_64bits_update(st, buf, n);
  if (f && ferror(f)) *ok = 0;
  unsigned long long h = *ok ? XXH3_64bits_digest(st) : 0;
  if (f) fclose(f);
  XXH3_freeState(st);
  return h;
}

static void add(Manifest *m, const char *rel, long long size, long long mt, unsigned long long hash) {
  if (m->n == m->cap) {
    int cap = m->cap ? 2 * m->cap : 1024;
    Entry *e = realloc(m->e, (size_t)cap * sizeof *e);
    if (!e) return;
    m->e = e, m->cap = cap;
  }
  char *r = strdup(rel);
  if (r) m->e[m->n++] = (Entry){r, size, mt, hash};
}

static int by_rel(const void *a, const void *b) { return strcmp(((const Entry *)a)->rel, ((const Entry *)b)->rel); }

static void free_manifest(Manifest *m) {
  for (int i = 0; i < m->n; i++) free(m->e[i].rel);
  free(m->e);
  *m = (Manifest){0};
}

/* The manifest's lines "SIZE MTIME_NS HASH16 RELPATH"; a line not in that form is skipped. */
static void load(const char *dir, Manifest *m) {
  char path[4200], line[4400];
  snprintf(path, sizeof path, "%s/" MANIFEST, dir);
  FILE *f = fopen(path, "r");
  while (f && fgets(line, sizeof line, f)) {
    long long size, mt;
    unsigned long long h;
    int at = 0;
    line[strcspn(line, "\n")] = 0;
    if (sscanf(line, "%lld %lld %16llx %n", &size, &mt, &h, &at) == 3 && at > 0 && line[at] && !strstr(line + at, ".."))
      add(m, line + at, size, mt, h);
  }
  if (f) fclose(f);
}

/* Removes a folder and what it holds (depth-limited; the cache's own layout). */
static void remove_tree(const char *path, int depth) {
  DIR *d = depth < MAX_DEPTH ? opendir(path) : NULL;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char sub[4200];
    struct stat st;
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(sub, depth + 1);
    else unlink(sub);
  }
  if (d) closedir(d);
  rmdir(path);
}

/* The lock that orders the ranks of a machine on the manifest; its fd, or -1. */
static int lock_manifest(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/" MANIFEST ".lock", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0 && flock(fd, LOCK_EX) != 0) close(fd), fd = -1;
  return fd;
}

/* What walk does with each file of a program entry (rel: its path under dir). */
typedef void (*Visit)(const char *dir, const char *rel, const char *full, const struct stat *st, void *ctx);

/* Every regular file inside the program entries under dir/rel (depth: rel's components), visited. */
static void walk(const char *dir, const char *rel, int depth, Visit visit, void *ctx) {
  char path[4200];
  snprintf(path, sizeof path, "%s%s%s", dir, *rel ? "/" : "", rel);
  DIR *d = depth < MAX_DEPTH ? opendir(path) : NULL;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue; /* ., .., the manifest and its lock */
    char sub[4200], full[4400];
    struct stat st;
    snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
    snprintf(full, sizeof full, "%s/%s", dir, sub);
    if (lstat(full, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) walk(dir, sub, depth + 1, visit, ctx);
    else if (S_ISREG(st.st_mode) && depth >= 2) visit(dir, sub, full, &st, ctx); /* inside DIR/XX/HASH */
  }
  if (d) closedir(d);
}

typedef struct {
  const Manifest *old;
  Manifest *m;
} Record;

/* A file into the new manifest, its hash taken from the old one when its size and mtime are the same. */
static void record_file(const char *dir, const char *rel, const char *full, const struct stat *st, void *ctx) {
  (void)dir;
  Record *r = ctx;
  Entry key = {.rel = (char *)rel};
  const Entry *was = r->old->n ? bsearch(&key, r->old->e, (size_t)r->old->n, sizeof key, by_rel) : NULL;
  int ok = 1;
  unsigned long long h =
      was && was->size == (long long)st->st_size && was->mtime_ns == mtime_ns(st) ? was->hash : hash_file(full, &ok);
  if (ok) add(r->m, rel, (long long)st->st_size, mtime_ns(st), h);
}

/* A shared object whose ELF header, program headers and section table lie inside the file (what
 * dlopen reads first): a truncated one is not. */
static int elf_whole(const char *path, long long size) {
  Elf64_Ehdr h;
  FILE *f = fopen(path, "rb");
  int ok = f && size >= (long long)sizeof h && fread(&h, sizeof h, 1, f) == 1 && !memcmp(h.e_ident, ELFMAG, SELFMAG) &&
           h.e_ident[EI_CLASS] == ELFCLASS64 && h.e_phentsize == sizeof(Elf64_Phdr) &&
           (unsigned long long)h.e_phoff + (unsigned long long)h.e_phnum * h.e_phentsize <= (unsigned long long)size &&
           (unsigned long long)h.e_shoff + (unsigned long long)h.e_shnum * h.e_shentsize <= (unsigned long long)size;
  for (int i = 0; ok && i < h.e_phnum; i++) {
    Elf64_Phdr ph;
    ok = fseek(f, (long)(h.e_phoff + (unsigned long long)i * sizeof ph), SEEK_SET) == 0 &&
         fread(&ph, sizeof ph, 1, f) == 1 && ph.p_offset + ph.p_filesz <= (unsigned long long)size;
  }
  if (f) fclose(f);
  return ok;
}

/* The program entry DIR/XX/HASH of a file's path rel under dir, into buf; 0, or -1 for none. */
static int entry_of(const char *dir, const char *rel, char *buf, size_t n) {
  const char *slash = strchr(rel, '/'), *end = slash ? strchr(slash + 1, '/') : NULL;
  if (!end) return -1;
  snprintf(buf, n, "%s/%.*s", dir, (int)(end - rel), rel);
  return 0;
}

typedef struct {
  const Manifest *m;
  Manifest doomed; /* the entries to remove (rel: the entry's folder) */
  char *note;
  size_t n;
} Check;

/* The entry of a damaged file goes; the first one is the note. */
static void doom(Check *c, const char *dir, const char *rel, const char *why) {
  char entry[4200];
  if (entry_of(dir, rel, entry, sizeof entry)) return;
  for (int i = 0; i < c->doomed.n; i++)
    if (!strcmp(c->doomed.e[i].rel, entry)) return;
  if (!c->doomed.n)
    snprintf(c->note, c->n, "PoCL's kernel cache: %s/%s %s: removed %s, which PoCL builds again", dir, rel, why, entry);
  add(&c->doomed, entry, 0, 0, 0);
}

/* A file the manifest does not hold: a shared object that is not whole goes. */
static void check_unrecorded(const char *dir, const char *rel, const char *full, const struct stat *st, void *ctx) {
  Check *c = ctx;
  Entry key = {.rel = (char *)rel};
  size_t len = strlen(rel);
  if (c->m->n && bsearch(&key, c->m->e, (size_t)c->m->n, sizeof key, by_rel)) return;
  if (len > 3 && !strcmp(rel + len - 3, ".so") && !elf_whole(full, (long long)st->st_size))
    doom(c, dir, rel, "is not a whole shared object (truncated?)");
}

int rt_pocl_cache_check(char *note, size_t n) {
  char dir[4096];
  note[0] = 0;
  if (cache_dir(dir, sizeof dir)) return 0;
  int fd = lock_manifest(dir);
  Manifest m = {0};
  load(dir, &m);
  if (m.n) qsort(m.e, (size_t)m.n, sizeof *m.e, by_rel);
  Check c = {&m, {0}, note, n};
  for (int i = 0; i < m.n; i++) { /* the recorded files: the same size and mtime, or the same bytes */
    char path[4200];
    struct stat st;
    int ok;
    snprintf(path, sizeof path, "%s/%s", dir, m.e[i].rel);
    if (stat(path, &st) != 0) continue; /* gone: PoCL builds it again */
    if ((long long)st.st_size == m.e[i].size && mtime_ns(&st) == m.e[i].mtime_ns) continue;
    if ((long long)st.st_size == m.e[i].size && hash_file(path, &ok) == m.e[i].hash && ok) continue;
    doom(&c, dir, m.e[i].rel, "has other bytes than ppr recorded");
  }
  walk(dir, "", 0, check_unrecorded, &c);
  for (int i = 0; i < c.doomed.n; i++) remove_tree(c.doomed.e[i].rel, 0);
  int removed = c.doomed.n;
  free_manifest(&c.doomed);
  free_manifest(&m);
  if (fd >= 0) close(fd);
  return removed;
}

void rt_pocl_cache_record(void) {
  char dir[4096], path[4200], tmp[4300];
  if (cache_dir(dir, sizeof dir)) return;
  int fd = lock_manifest(dir);
  Manifest old = {0}, m = {0};
  load(dir, &old);
  if (old.n) qsort(old.e, (size_t)old.n, sizeof *old.e, by_rel);
  walk(dir, "", 0, record_file, &(Record){&old, &m});
  snprintf(path, sizeof path, "%s/" MANIFEST, dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  for (int i = 0; f && i < m.n; i++)
    fprintf(f, "%lld %lld %016llx %s\n", m.e[i].size, m.e[i].mtime_ns, m.e[i].hash, m.e[i].rel);
  if (f && fclose(f) == 0) rename(tmp, path);
  else if (f) unlink(tmp);
  free_manifest(&old);
  free_manifest(&m);
  if (fd >= 0) close(fd);
}
