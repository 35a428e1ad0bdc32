/* rt_pocl_cache.h - PoCL's kernel cache, proved before PoCL reads it (rt_pocl_cache.c): the opencl
 * device on PoCL checks the files ppr recorded at open, and records them at close. */
#ifndef RT_POCL_CACHE_H
#define RT_POCL_CACHE_H
#include <stddef.h>

/* The recorded files of PoCL's cache folder checked: a program entry holding one whose bytes changed
 * is removed (PoCL builds it again). The entries removed; a one-line note on the first in note. */
int rt_pocl_cache_check(char *note, size_t n);
/* The files of the cache's program entries recorded (size, mtime, hash) for the next check. */
void rt_pocl_cache_record(void);

#endif /* RT_POCL_CACHE_H */
