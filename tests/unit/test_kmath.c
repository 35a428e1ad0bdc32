/* test_kmath.c — the math of the kernel preludes (kernels/prelude_c.h), which every generated C
 * kernel calls: ppk_exp against e^x in double, over every 64th float of its range (about 35
 * million, each sign and exponent), and at its edges (0, the overflow and underflow thresholds,
 * subnormal results, infinities, NaN). The bound: 2 ulp of the correctly rounded result where
 * that is normal; 2 ulp of the smallest subnormal (2^-149) below. The last line is "N passed, M
 * failed". */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "prelude_c.h"

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* |got - e^x| in ulp of the correctly rounded e^x (of 2^-149 where that is subnormal) */
static double ulps(float x, float got) {
  double ref = exp((double)x);
  float r = (float)ref;
  double ulp = r >= FLT_MIN ? (double)(nextafterf(r, INFINITY) - r) : 0x1p-149;
  return fabs((double)got - ref) / ulp;
}

int main(void) {
  double worst = 0, worst_sub = 0;
  float wx = 0, wsx = 0;
  long n = 0;
  /* every 64th bit pattern of the finite floats in [-103.972, 88.7228] */
  for (int sign = 0; sign < 2; sign++)
    for (uint32_t u = 0; u < 0x7f800000u; u += 64) {
      float x = from_bits(u | (sign ? 0x80000000u : 0));
      if (x < -103.972f || x > 88.72283f) continue;
      float got = ppk_exp(x);
      double e = ulps(x, got);
      n++;
      if ((float)exp((double)x) >= FLT_MIN) {
        if (e > worst) worst = e, wx = x;
      } else if (e > worst_sub) {
        worst_sub = e, wsx = x;
      }
    }
  check(worst <= 2.0, "ppk_exp: %ld arguments, worst %.3f ulp (at %.9g) where e^x is normal (bound 2)", n, worst, wx);
  check(worst_sub <= 2.0, "ppk_exp: subnormal results within %.3f x 2^-149 (at %.9g; bound 2)", worst_sub, wsx);
  check(ppk_exp(0.0f) == 1.0f && ppk_exp(-0.0f) == 1.0f, "ppk_exp(0) = 1 exactly");
  check(ppk_exp(1.0f) == (float)2.718281828459045, "ppk_exp(1) = e rounded to float");
  check(isinf(ppk_exp(88.73f)) && isinf(ppk_exp(INFINITY)) && isinf(ppk_exp(1e30f)),
        "ppk_exp: infinity past 88.7228 (FLT_MAX = e^88.7228)");
  check(ppk_exp(88.72f) < INFINITY && ppk_exp(88.72f) > 3.3e38f, "ppk_exp(88.72) = %g, finite", ppk_exp(88.72f));
  check(ppk_exp(-104.0f) == 0.0f && ppk_exp(-INFINITY) == 0.0f && ppk_exp(-1e30f) == 0.0f,
        "ppk_exp: 0 below -103.97 (e^x under half the smallest subnormal)");
  check(ppk_exp(-100.0f) > 0.0f, "ppk_exp(-100) = %g, a subnormal", ppk_exp(-100.0f));
  check(isnan(ppk_exp(NAN)) && isnan(ppk_exp(-NAN)), "ppk_exp(NaN) is NaN");
  /* monotone over a dense stretch around 0, where softmax's weights live */
  int mono = 1;
  float prev = ppk_exp(-20.0f);
  for (float x = -20.0f; x < 20.0f; x = nextafterf(x, 100.0f) + 1e-4f) {
    float y = ppk_exp(x);
    mono &= y >= prev;
    prev = y;
  }
  check(mono, "ppk_exp is non-decreasing on [-20, 20] (sampled every 1e-4)");
  return check_done();
}
