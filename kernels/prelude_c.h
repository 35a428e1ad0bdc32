/* prelude_c.h - pasted before the generated C kernels (kernels_sN.c): the C names the kernel IR's renderer uses. */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* The larger of a and b; b when either is NaN. The same comparison in every language, and one
 * that compilers turn into a vector maximum. */
static inline float ppk_max(float a, float b) { return a > b ? a : b; }

/* A block reduction's sum tree over its n partials (n a power of two): stage s adds p[t + s] into
 * p[t] for t < s, s = n/2 down to 1, the pairs and the order of the GPU's tree. The stages of 16
 * or more run on 16-float vectors (GNU C vector extension; a CPU with narrower registers gets them
 * split); the last four (8, 4, 2, 1) on the halves of the last vector, in registers: run through
 * memory, each of those stages stored a vector and loaded its halves back, and a row's reduction
 * waited on it (a 256-wide rmsnorm 15-25% of its time, the attention's dscores a third). Each sum
 * rounds as written: the kernels are compiled without contraction (-ffp-contract=off), so no
 * product before the tree is fused into its sums. */
typedef float ppk_v16 __attribute__((vector_size(64), aligned(4)));
typedef float ppk_v8 __attribute__((vector_size(32), aligned(4)));
typedef float ppk_v4 __attribute__((vector_size(16), aligned(4)));
static inline __attribute__((always_inline)) float ppk_tree_sum(float *p, int n) {
  int s = n / 2;
  if (n < 16) {
    for (; s > 0; s >>= 1)
      for (int t = 0; t < s; t++) p[t] = p[t] + p[t + s];
    return p[0];
  }
  for (; s >= 16; s >>= 1)
    for (int t = 0; t < s; t += 16) {
      ppk_v16 a, b;
      memcpy(&a, p + t, sizeof a);
      memcpy(&b, p + t + s, sizeof b);
      a += b;
      memcpy(p + t, &a, sizeof a);
    }
  ppk_v16 a;
  ppk_v8 l8, h8;
  ppk_v4 l4, h4;
  memcpy(&a, p, sizeof a);
  memcpy(&l8, &a, sizeof l8);
  memcpy(&h8, (char *)&a + sizeof l8, sizeof h8);
  l8 += h8; /* stage 8 */
  memcpy(&l4, &l8, sizeof l4);
  memcpy(&h4, (char *)&l8 + sizeof l4, sizeof h4);
  l4 += h4;                                     /* stage 4 */
  float x0 = l4[0] + l4[2], x1 = l4[1] + l4[3]; /* stage 2 */
  return x0 + x1;                               /* stage 1 */
}

/* e^x in float, in a form compilers vectorise (no call, no branch, no libm rounding function):
 * x = n·ln2 + r with n = x·log2(e) rounded to nearest (by a fused multiply-add onto 1.5·2^23, whose
 * ulp is 1: n is in the sum's low bits and comes out of them exact) and r from ln2 in two parts
 * (Cody–Waite), so |r| <= ln2/2; e^r by Cephes' polynomial 1 + r + r²·P(r), P of degree 5, in
 * fused multiply-adds; then 2^n as 2^floor(n/2)·2^(n - floor(n/2)), each from exponent bits: the
 * first product is exact, the second rounds once, so results down to the smallest subnormal come
 * out correctly rounded from the polynomial's. x is first raised to -104 (e^-104 rounds to 0 by
 * the same arithmetic; a NaN becomes -104 there); from 89 on (past ln FLT_MAX = 88.72) and for a
 * NaN the result is x + infinity, chosen at the end: the exponent's arithmetic is unsigned, so
 * what it makes of such an x is defined and thrown away. (x clamped to [-104, 89] and returned for
 * a NaN gave the same values, but GCC 12 compiled the two clamps and the NaN test to twice the
 * compares and blends: cross-entropy's kernel 16% and SiLU's 20% slower.) Within 2 ulp of the
 * correctly rounded e^x over the normal range, 0 exactly where e^x is under half the smallest
 * subnormal, infinity where it rounds past FLT_MAX (tests/unit/test_kmath.c measures it over every
 * 64th float), and the same bits on every device but a NaN's payload: the OpenCL and CUDA
 * preludes compute it alike. */
static inline float ppk_exp(float x) {
  float xc = x > -104.0f ? x : -104.0f;                  /* a NaN: -104 */
  float t = fmaf(xc, 1.44269504088896341f, 12582912.0f); /* 1.5·2^23 + n, n in [-150, 128] below 89 */
  float fn = t - 12582912.0f;
  uint32_t nb;
  memcpy(&nb, &t, sizeof nb);
  nb -= 0x4B400000u - 256u; /* n + 256 */
  float r = fmaf(fn, -0.693359375f, xc);
  r = fmaf(fn, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  float y = fmaf(p, r * r, r + 1.0f);
  uint32_t h = nb >> 1, e1 = (h - 1u) << 23, e2 = (nb - h - 1u) << 23; /* 2^floor(n/2), 2^(n - floor(n/2)) */
  float s1, s2;
  memcpy(&s1, &e1, sizeof s1);
  memcpy(&s2, &e2, sizeof s2);
  y = y * s1 * s2;
  return x < 89.0f ? y : x + INFINITY;
}

/* bf16 <-> float: a bf16 is the upper 16 bits of a float. Loads widen exactly; stores round to
 * nearest, ties to even, on the 16 bits dropped (the largest floats round to infinity), and keep a
 * NaN a NaN (quietened, its sign kept). Branch-free, so loops over them vectorise; the OpenCL and
 * CUDA preludes compute the same bits (common/pp_dtype.h: the host's copy). */
static inline float ppk_bf16_ld(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline uint16_t ppk_bf16_st(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
/* x as a bf16 holds it: a bf16 value computed inside the kernel that reads it (fused), rounded as
 * its own kernel would have stored it. */
static inline float ppk_bf16_rnd(float x) { return ppk_bf16_ld(ppk_bf16_st(x)); }

/* Dropout's draw: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC
 * 2011) of the 128-bit counter (ctr, stream), low words first, under the 64-bit key; the first word
 * of the result, its upper 24 bits times 2^-24: a uniform float in [0, 1), exact. Integer
 * arithmetic alone, so every device (the OpenCL and CUDA preludes) and tests/reference/philox.py
 * draw the same number. */
static inline float ppk_rand(int64_t ctr, int64_t key, int64_t stream) {
  uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)((uint64_t)ctr >> 32), c2 = (uint32_t)stream,
           c3 = (uint32_t)((uint64_t)stream >> 32), k0 = (uint32_t)key, k1 = (uint32_t)((uint64_t)key >> 32);
  for (int i = 0; i < 10; i++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    c1 = (uint32_t)p1;
    c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c3 = (uint32_t)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (float)(c0 >> 8) * 5.9604644775390625e-8f;
}
