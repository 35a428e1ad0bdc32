/* rt_st.h - what the safetensors reader (rt_safetensors.c) and writer (rt_st_write.c) share, and only they. */
#ifndef RT_ST_H
#define RT_ST_H

#define NAME_FMT "%.200s" /* tensor names are clipped in messages */

/* A tensor's name and its index: sorted by name, the reader's index for rt_st_find and the
 * writer's check that no name comes twice. */
typedef struct {
  const char *name;
  int idx;
} StIdx;

/* qsort's order of StIdx: by name, then by index. */
int rt_st_cmp_idx(const void *a, const void *b);

#endif /* RT_ST_H */
