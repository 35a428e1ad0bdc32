/* prelude_opencl.h - pasted before the generated OpenCL C kernels (kernels_sN.cl): maps the C names the kernel IR's renderer uses onto OpenCL C 1.2. */
/* Rounding as the kernels are written: no product contracted into a sum by the compiler (OpenCL C
 * contracts by default); the renderer writes the fused multiply-adds itself, as fma, the same ones
 * the C kernels' fmaf are (compiler/cg_kir.c), so the devices round alike. */
#pragma OPENCL FP_CONTRACT OFF

typedef long int64_t;
typedef int int32_t;

/* OpenCL C overloads the math functions on float; the renderer writes C's float names. */
#define expf exp
#define logf log
#define tanhf tanh
#define sqrtf sqrt
#define cosf cos
#define sinf sin
#define powf pow

/* The larger of a and b; b when either is NaN (as in C and CUDA). */
static inline float ppk_max(float a, float b) { return a > b ? a : b; }

/* e^x as the C prelude's ppk_exp computes it (there: the method and its accuracy), operation for
 * operation, so that every device gives the same bits (a NaN's payload aside). */
static inline float ppk_exp(float x) {
  float xc = x > -104.0f ? x : -104.0f;
  float t = fma(xc, 1.44269504088896341f, 12582912.0f);
  float fn = t - 12582912.0f;
  uint nb = as_uint(t) - (0x4B400000u - 256u);
  float r = fma(fn, -0.693359375f, xc);
  r = fma(fn, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fma(p, r, 1.3981999507e-3f);
  p = fma(p, r, 8.3334519073e-3f);
  p = fma(p, r, 4.1665795894e-2f);
  p = fma(p, r, 1.6666665459e-1f);
  p = fma(p, r, 5.0000001201e-1f);
  float y = fma(p, r * r, r + 1.0f);
  uint h = nb >> 1;
  y = y * as_float((h - 1u) << 23) * as_float((nb - h - 1u) << 23);
  return x < 89.0f ? y : x + INFINITY;
}

/* bf16 <-> float as the C prelude's ppk_bf16_ld/ppk_bf16_st (there: the rounding), bit for bit. */
static inline float ppk_bf16_ld(ushort h) { return as_float((uint)h << 16); }
static inline ushort ppk_bf16_st(float f) {
  uint u = as_uint(f);
  uint rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
  return (ushort)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
static inline float ppk_bf16_rnd(float x) { return ppk_bf16_ld(ppk_bf16_st(x)); }

/* The opencl device's bf16 GEMM (CLBlast multiplies floats): an operand's n elements from byte off
 * of the arena widened into dst; then C's m x n results of each of nb products (leading dimension
 * ld, stride apart, in elements) rounded back into the arena. Called by ppr, not by a listing. */
__kernel void ppk_widen_bf16(__global const char *arena, long off, __global float *dst, long n) {
  __global const ushort *src = (__global const ushort *)(arena + off);
  for (long i = get_global_id(0); i < n; i += get_global_size(0)) dst[i] = ppk_bf16_ld(src[i]);
}
__kernel void ppk_narrow_bf16(__global char *arena, long off, __global const float *src, long m, long n, long ld,
                              long stride, long nb) {
  __global ushort *dst = (__global ushort *)(arena + off);
  for (long e = get_global_id(0); e < nb * m * n; e += get_global_size(0)) {
    long b = e / (m * n), i = e / n % m, j = e % n, at = b * stride + i * ld + j;
    dst[at] = ppk_bf16_st(src[at]);
  }
}

/* Dropout's draw: the C prelude's ppk_rand (Philox4x32-10; there: what it computes), word for word. */
static inline float ppk_rand(int64_t ctr, int64_t key, int64_t stream) {
  uint c0 = (uint)ctr, c1 = (uint)((ulong)ctr >> 32), c2 = (uint)stream, c3 = (uint)((ulong)stream >> 32),
       k0 = (uint)key, k1 = (uint)((ulong)key >> 32);
  for (int i = 0; i < 10; i++) {
    ulong p0 = (ulong)0xD2511F53u * c0, p1 = (ulong)0xCD9E8D57u * c2;
    c0 = (uint)(p1 >> 32) ^ c1 ^ k0;
    c1 = (uint)p1;
    c2 = (uint)(p0 >> 32) ^ c3 ^ k1;
    c3 = (uint)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (float)(c0 >> 8) * 5.9604644775390625e-8f;
}
