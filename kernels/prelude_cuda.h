/* prelude_cuda.h - pasted before the generated CUDA C kernels (kernels_sN.cu, compiled by NVRTC): the C names the kernel IR's renderer uses. */
#ifdef __CUDACC_RTC__
typedef long long int64_t;
typedef int int32_t;
#else
#include <stdint.h>
#endif

/* The larger of a and b; b when either is NaN (as in C and OpenCL C). */
static __device__ __forceinline__ float ppk_max(float a, float b) { return a > b ? a : b; }
