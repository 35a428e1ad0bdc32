/* rt_st.h - what the safetensors reader (rt_safetensors.c) and writer (rt_st_write.c) share, and only they. */
#ifndef RT_ST_H
#define RT_ST_H

#define NAME_FMT "%.200s" /* tensor names are clipped in messages */

/* Each tensor's checksum, in the header's __metadata__ (whose values are strings):
 * "checksum:NAME": "xxh3-64:<16 hex digits>", XXH3's 64-bit hash of the tensor's bytes in the file. */
#define RT_ST_SUM_KEY  "checksum:"
#define RT_ST_SUM_ALGO "xxh3-64"

/* A tensor's name and its index: sorted by name, the reader's index for rt_st_find and the
 * writer's check that no name comes twice. */
typedef struct {
  const char *name;
  int idx;
} StIdx;

/* qsort's order of StIdx: by name, then by index. */
int rt_st_cmp_idx(const void *a, const void *b);

#endif /* RT_ST_H */
