/* pp_dtype.h — the element types of a compiled program's buffers, in one place: their names in a
 * listing, their sizes, and bf16's conversions on the host. Included by ppc and ppr.
 *
 * bf16 is the upper half of an IEEE float32: float -> bf16 rounds to nearest, ties to even, on the
 * 16 bits dropped (carrying into the exponent, so that the largest floats round to infinity); a NaN
 * stays a NaN (quietened). bf16 -> float is exact. The kernel preludes (kernels/prelude_*.h)
 * compute the same function on every device, bit for bit. */
#ifndef PP_DTYPE_H
#define PP_DTYPE_H

#include <stdint.h>
#include <string.h>

typedef enum PpDType { PP_F32, PP_I32, PP_BF16 } PpDType;
#define PP_DTYPE_COUNT 3

static const char *const pp_dtype_names[PP_DTYPE_COUNT] = {"f32", "i32", "bf16"}; /* ORDER PpDType */
static const int pp_dtype_sizes[PP_DTYPE_COUNT] = {4, 4, 2};                      /* ORDER PpDType */

static inline const char *pp_dtype_name(PpDType t) { return pp_dtype_names[t]; }
static inline int64_t pp_dtype_bytes(PpDType t) { return pp_dtype_sizes[t]; }

/* The type a listing names, or -1 for an unknown name. */
static inline int pp_dtype_parse(const char *s) {
  for (int i = 0; i < PP_DTYPE_COUNT; i++)
    if (!strcmp(s, pp_dtype_names[i])) return i;
  return -1;
}

/* A program's precision (ppc --precision, the train block's `precision`): the element type of its
 * activations, their gradients and the parameters' working copies. Parameters (the master
 * copies), their gradients and the optimizer's moments are f32 in every precision. */
typedef enum PpPrecision { PP_PREC_FP32, PP_PREC_BF16 } PpPrecision;
#define PP_PRECISION_COUNT 2
#define PP_PRECISION_NAMES "fp32 or bf16"
static const char *const pp_precision_names[PP_PRECISION_COUNT] = {"fp32", "bf16"}; /* ORDER PpPrecision */
static const PpDType pp_precision_dtype[PP_PRECISION_COUNT] = {PP_F32, PP_BF16};    /* ORDER PpPrecision */

static inline int pp_precision_parse(const char *s) {
  for (int i = 0; i < PP_PRECISION_COUNT; i++)
    if (!strcmp(s, pp_precision_names[i])) return i;
  return -1;
}

static inline uint16_t pp_bf16_from_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN: quiet, sign kept */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float pp_f32_from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

#endif
