/* pp_limits.h — the limits of a compiled program, in one place: ppc refuses a model that exceeds
 * them (with a located error) and ppr refuses a listing that does, so whatever ppc writes, ppr
 * accepts. Included by both. */
#ifndef PP_LIMITS_H
#define PP_LIMITS_H

#include <stdint.h>
#include <string.h>

#define PP_MAX_RANKS    65536              /* tp * pp * dp * cp: ranks of one job */
#define PP_MAX_ARENA    ((int64_t)1 << 40) /* bytes of one rank's arena; offsets, extents, strides */
#define PP_MAX_NUMEL    ((int64_t)1 << 40) /* elements of one tensor */
#define PP_MAX_STEP_DIM ((int64_t)1 << 20) /* micro-batch B, sequence S, micro-batches M, a degree */
#define PP_MAX_NAME     512                /* bytes of a checkpoint, model, kernel or file name */
#define PP_MAX_LAYERS   100000             /* repetitions of the repeated layer */
#define PP_MAX_CHUNKS   16                 /* chunks of layers one rank holds (interleaved, zbv: --vpp) */
#define PP_DROPOUT_MAX  128                /* dropout calls in a model's source (the layer's counted once) */
/* grad_norm's table of the owned gradients (ppr writes it, the kernel reads it): each offset into
 * the gradients' region in units of PP_NORM_UNIT floats (every buffer is 64-byte aligned), i32 */
#define PP_NORM_UNIT 16

/* A name that a listing can carry as one field and a safetensors header as one key: printable
 * ASCII without space, quote, backslash or '#' (a listing's comment), 1 to PP_MAX_NAME bytes. Returns the offset of the
 * first byte that is not allowed, or -1 when the name is good (a length error reports 0 for an
 * empty name and PP_MAX_NAME for a long one). */
static inline int64_t pp_name_bad_at(const char *s) {
  size_t n = strlen(s);
  if (n == 0) return 0;
  if (n > PP_MAX_NAME) return PP_MAX_NAME;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c <= ' ' || c >= 127 || c == '"' || c == '\\' || c == '#') return (int64_t)i;
  }
  return -1;
}

#endif
