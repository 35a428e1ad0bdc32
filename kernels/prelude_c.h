/* prelude_c.h - pasted before the generated C kernels (kernels_sN.c): the C names the kernel IR's renderer uses. */
#include <math.h>
#include <stdint.h>

/* The larger of a and b; b when either is NaN. The same comparison in every language, and one
 * that compilers turn into a vector maximum. */
static inline float ppk_max(float a, float b) { return a > b ? a : b; }
