/* prelude_opencl.h - pasted before the generated OpenCL C kernels (kernels_sN.cl): maps the C names the kernel IR's renderer uses onto OpenCL C 1.2. */
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
