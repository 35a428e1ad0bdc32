/* prelude_cuda.h - pasted before the generated CUDA C kernels (kernels_sN.cu, compiled by NVRTC): the C names the kernel IR's renderer uses. */
#ifdef __CUDACC_RTC__
typedef long long int64_t;
typedef int int32_t;
#else
#include <stdint.h>
#endif

/* The larger of a and b; b when either is NaN (as in C and OpenCL C). */
static __device__ __forceinline__ float ppk_max(float a, float b) { return a > b ? a : b; }

/* e^x as the C prelude's ppk_exp computes it (there: the method and its accuracy), operation for
 * operation, so that every device gives the same bits (a NaN's payload aside). */
static __device__ __forceinline__ float ppk_exp(float x) {
  float xc = x > -104.0f ? x : -104.0f;
  float t = __fmaf_rn(xc, 1.44269504088896341f, 12582912.0f);
  float fn = __fsub_rn(t, 12582912.0f);
  unsigned nb = __float_as_uint(t) - (0x4B400000u - 256u);
  float r = __fmaf_rn(fn, -0.693359375f, xc);
  r = __fmaf_rn(fn, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = __fmaf_rn(p, r, 1.3981999507e-3f);
  p = __fmaf_rn(p, r, 8.3334519073e-3f);
  p = __fmaf_rn(p, r, 4.1665795894e-2f);
  p = __fmaf_rn(p, r, 1.6666665459e-1f);
  p = __fmaf_rn(p, r, 5.0000001201e-1f);
  float y = __fmaf_rn(p, __fmul_rn(r, r), __fadd_rn(r, 1.0f));
  unsigned h = nb >> 1;
  y = __fmul_rn(__fmul_rn(y, __uint_as_float((h - 1u) << 23)), __uint_as_float((nb - h - 1u) << 23));
  return x < 89.0f ? y : __fadd_rn(x, __int_as_float(0x7f800000));
}

/* bf16 <-> float as the C prelude's ppk_bf16_ld/ppk_bf16_st (there: the rounding), bit for bit
 * (the integer form rather than __float2bfloat16_rn, so that NaN comes out as on every device). */
static __device__ __forceinline__ float ppk_bf16_ld(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
static __device__ __forceinline__ unsigned short ppk_bf16_st(float f) {
  unsigned u = __float_as_uint(f);
  unsigned rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
  return (unsigned short)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
static __device__ __forceinline__ float ppk_bf16_rnd(float x) { return ppk_bf16_ld(ppk_bf16_st(x)); }

/* Dropout's draw: the C prelude's ppk_rand (Philox4x32-10; there: what it computes), word for word. */
static __device__ __forceinline__ float ppk_rand(int64_t ctr, int64_t key, int64_t stream) {
  unsigned int c0 = (unsigned int)ctr, c1 = (unsigned int)((unsigned long long)ctr >> 32), c2 = (unsigned int)stream,
               c3 = (unsigned int)((unsigned long long)stream >> 32), k0 = (unsigned int)key,
               k1 = (unsigned int)((unsigned long long)key >> 32);
  for (int i = 0; i < 10; i++) {
    unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    c0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;
    c1 = (unsigned int)p1;
    c2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
    c3 = (unsigned int)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (float)(c0 >> 8) * 5.9604644775390625e-8f;
}
