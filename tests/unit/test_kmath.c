/* test_kmath.c — the math of the kernel preludes (kernels/prelude_c.h), which every generated C
 * kernel calls: ppk_exp against e^x in double, over every 64th float (about 67 million, each sign
 * and exponent), and at its edges (0, the overflow and underflow thresholds, subnormal results,
 * infinities, NaN). The bound: 2 ulp of the correctly rounded result where that is normal; 2 ulp
 * of the smallest subnormal (2^-149) below; infinity where e^x rounds past FLT_MAX. Then float -> bf16 (ppk_bf16_st,
 * and the host's pp_bf16_from_f32) against round-to-nearest-even worked out in double, for every
 * bf16 value with the 16 dropped bits at the tie, on either side of it, zero, all ones and random
 * (every sign, exponent, subnormals, the overflow to infinity), and NaN; bf16 -> float exact. The
 * sum tree ppk_tree_sum against the tree written out, bit for bit. The last line is "N passed, M
 * failed". */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "pp_dtype.h"
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

/* float -> bf16, rounded to nearest even, from the values alone: the two bf16 neighbours of |x| (the
 * upper one past the largest finite counts as 2^128, IEEE's rule for overflow), the nearer, the
 * one with an even last bit at a tie. x is not NaN. */
static uint16_t bf16_reference(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
  uint32_t lo = mag & 0xffff0000u, hi = lo + 0x10000u;
  if (mag == lo) return (uint16_t)((sign | lo) >> 16);
  double vx = fabs((double)x), vlo = fabs((double)from_bits(lo));
  double vhi = hi >= 0x7f800000u ? ldexp(1.0, 128) : (double)from_bits(hi);
  uint32_t pick = vx - vlo < vhi - vx ? lo : vx - vlo > vhi - vx ? hi : ((lo >> 16) & 1u) ? hi : lo;
  return (uint16_t)((sign | pick) >> 16);
}

static void test_bf16(void) {
  static const uint32_t low[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
  uint64_t state = 12345;
  long n = 0, bad_dev = 0, bad_host = 0, bad_back = 0;
  uint32_t first = 0;
  for (uint32_t top = 0; top < 0x10000u; top++) {
    if ((top & 0x7fffu) >= 0x7f80u) continue; /* infinities and NaNs: below */
    for (int k = 0; k < 7; k++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      uint32_t u = top << 16 | (k < 6 ? low[k] : (uint32_t)(state >> 48));
      float x = from_bits(u);
      uint16_t want = bf16_reference(x), dev = ppk_bf16_st(x), host = pp_bf16_from_f32(x);
      n++;
      if (dev != want && !bad_dev++) first = u;
      if (host != want && !bad_host++) first = u;
    }
    float w = from_bits(top << 16);
    bad_back += ppk_bf16_ld((uint16_t)top) != w || pp_f32_from_bf16((uint16_t)top) != w;
  }
  check(!bad_dev && !bad_host,
        "float -> bf16 rounds to nearest even: %ld floats, %ld wrong in the kernels' prelude, %ld "
        "in the host's (first 0x%08x)",
        n, bad_dev, bad_host, first);
  check(!bad_back, "bf16 -> float is exact for every finite bf16 (%ld wrong)", bad_back);
  check(ppk_bf16_st(3.4e38f) == 0x7f80u && ppk_bf16_st(-3.4e38f) == 0xff80u && ppk_bf16_st(INFINITY) == 0x7f80u,
        "float -> bf16: past the largest bf16's half ulp, infinity (3.4e38 -> 0x%04x)", ppk_bf16_st(3.4e38f));
  check(ppk_bf16_st(from_bits(0x7f7f7fffu)) == 0x7f7fu, "float -> bf16: just under the overflow midpoint stays finite");
  uint16_t qn = ppk_bf16_st(from_bits(0x7f800001u)), nn = ppk_bf16_st(from_bits(0xffc00000u));
  check((qn & 0x7f80u) == 0x7f80u && (qn & 0x7fu) && (nn & 0x8000u) && (nn & 0x7fu) &&
            pp_bf16_from_f32(from_bits(0x7f800001u)) == qn,
        "float -> bf16: a NaN stays a NaN with its sign, even one whose payload is all in the dropped bits (0x%04x, "
        "0x%04x)",
        qn, nn);
  check(ppk_bf16_st(from_bits(0x00008000u)) == 0x0000u && ppk_bf16_st(from_bits(0x00018000u)) == 0x0002u &&
            ppk_bf16_st(-0.0f) == 0x8000u,
        "float -> bf16: subnormal ties go to even, -0 keeps its sign");
}

/* ppk_rand: Philox4x32-10's first word, its upper 24 bits times 2^-24, for Random123's known
 * answers (kat_vectors: counter, key -> the four words); and u in [0, 1) with mean 1/2 */
static void test_rand(void) {
  static const struct {
    uint32_t c[4], k[2], w0;
  } kat[] = {{{0, 0, 0, 0}, {0, 0}, 0x6627E8D5u},
             {{~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}, 0x408F276Du},
             {{0x243F6A88u, 0x85A308D3u, 0x13198A2Eu, 0x03707344u}, {0xA4093822u, 0x299F31D0u}, 0xD16CFE09u}};
  int ok = 1;
  for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
    int64_t ctr = (int64_t)((uint64_t)kat[i].c[1] << 32 | kat[i].c[0]);
    int64_t stream = (int64_t)((uint64_t)kat[i].c[3] << 32 | kat[i].c[2]);
    int64_t key = (int64_t)((uint64_t)kat[i].k[1] << 32 | kat[i].k[0]);
    ok &= ppk_rand(ctr, key, stream) == (float)(kat[i].w0 >> 8) * 0x1p-24f;
  }
  check(ok, "ppk_rand: Random123's Philox4x32-10 known answers (the first word's upper 24 bits)");
  double sum = 0, lo = 1, hi = 0;
  for (int64_t i = 0; i < 1000000; i++) {
    float u = ppk_rand(i, 7, 3);
    sum += u;
    lo = u < lo ? u : lo;
    hi = u > hi ? u : hi;
  }
  check(lo >= 0 && hi < 1 && fabs(sum / 1e6 - 0.5) < 1e-3, "ppk_rand: 10^6 draws in [%g, %g], mean %.5f", lo, hi,
        sum / 1e6);
}

/* ppk_tree_sum against the tree written out (stage s adds p[t + s] into p[t], s = n/2 .. 1), bit
 * for bit, for every power of two n to 1024 (the last stages run on the halves of a vector in
 * registers from 16 on): floats of many magnitudes and both signs, so that another order of the
 * same sums rounds differently (checked: the left-to-right sum differs somewhere) */
static void test_tree_sum(void) {
  float p[1024], q[1024];
  uint32_t st = 12345u;
  int same = 1, seq_differs = 0;
  for (int n = 1; n <= 1024; n *= 2)
    for (int round = 0; round < 50; round++) {
      for (int i = 0; i < n; i++) {
        st = st * 1664525u + 1013904223u;
        float m = (float)(st >> 8) * 0x1p-24f, e = (float)((st >> 3) % 24) - 12.0f;
        p[i] = q[i] = (st & 1 ? -1.0f : 1.0f) * m * exp2f(e);
      }
      float seq = 0.0f;
      for (int i = 0; i < n; i++) seq += p[i];
      for (int s = n / 2; s > 0; s /= 2)
        for (int t = 0; t < s; t++) q[t] = q[t] + q[t + s];
      float got = ppk_tree_sum(p, n);
      same &= memcmp(&got, &q[0], sizeof got) == 0;
      seq_differs |= seq != q[0];
    }
  check(same, "ppk_tree_sum: the written-out tree's bits for n = 1 .. 1024, 50 draws each");
  check(seq_differs, "ppk_tree_sum: the draws are ones where the order of the sums matters");
}

int main(void) {
  test_bf16();
  test_rand();
  test_tree_sum();
  double worst = 0, worst_sub = 0;
  float wx = 0, wsx = 0, wbig = 0;
  long n = 0, nbig = 0, bad_big = 0;
  /* every 64th bit pattern of the finite floats, each sign: where e^x rounds past FLT_MAX the
   * result must be infinity, elsewhere within the bounds */
  for (int sign = 0; sign < 2; sign++)
    for (uint32_t u = 0; u < 0x7f800000u; u += 64) {
      float x = from_bits(u | (sign ? 0x80000000u : 0));
      float got = ppk_exp(x);
      if (isinf((float)exp((double)x))) {
        nbig++;
        if (!isinf(got)) bad_big++, wbig = x;
        continue;
      }
      double e = ulps(x, got);
      n++;
      if ((float)exp((double)x) >= FLT_MIN) {
        if (e > worst) worst = e, wx = x;
      } else if (e > worst_sub) {
        worst_sub = e, wsx = x;
      }
    }
  check(worst <= 2.0, "ppk_exp: %ld arguments, worst %.3f ulp (at %.9g) where e^x is normal (bound 2)", n, worst, wx);
  check(worst_sub <= 2.0, "ppk_exp: subnormal and zero results within %.3f x 2^-149 (at %.9g; bound 2)", worst_sub,
        wsx);
  check(bad_big == 0, "ppk_exp: infinity for all %ld arguments whose e^x rounds past FLT_MAX (%ld not, one at %.9g)",
        nbig, bad_big, wbig);
  /* the edges exactly: the largest float with a finite e^x and the next; the underflow to 0 */
  float top = 88.72283172607422f;
  check(ppk_exp(top) < INFINITY && isinf(ppk_exp(nextafterf(top, INFINITY))),
        "ppk_exp: finite at %.9g (%g), infinity at the next float", top, ppk_exp(top));
  float z = -103.97207708f; /* -150 ln 2: e^x = 2^-150, half the smallest subnormal */
  check(ppk_exp(nextafterf(z, -INFINITY)) == 0.0f && ppk_exp(nextafterf(z, 0.0f)) == 0x1p-149f,
        "ppk_exp: 0 just below -150 ln 2, 2^-149 just above (%g, %g)", ppk_exp(nextafterf(z, -INFINITY)),
        ppk_exp(nextafterf(z, 0.0f)));
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
