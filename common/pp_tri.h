/* pp_tri.h — a gemm's triangle, the last field `tri:NAME` of a listing's gemm line
 * (docs/stage-format.md): which products of causal attention a device may skip. Included by ppc
 * (fuse_gemm.c writes it, cg_program.c prints it) and ppr (rt_prog_instr.c reads it, the devices
 * and the FLOP counts use it). With i a row of C, j a column and k the inner index, per product:
 *   out    only C's elements j <= i are wanted; the others are left unspecified (written or not);
 *   lower  op(A)[i][k] = 0 for k > i (the program writes those zeros): the products over k <= i;
 *   upper  op(A)[i][k] = 0 for k < i: the products over k >= i.
 * Computing the whole product is a correct implementation of each. */
#ifndef PP_TRI_H
#define PP_TRI_H

#include <stdint.h>
#include <string.h>

typedef enum PpTri { PP_TRI_NONE, PP_TRI_OUT, PP_TRI_LOWER, PP_TRI_UPPER } PpTri;
#define PP_TRI_COUNT 4

static const char *const pp_tri_names[PP_TRI_COUNT] = {"none", "out", "lower", "upper"}; /* ORDER PpTri */

static inline const char *pp_tri_name(PpTri t) { return pp_tri_names[t]; }

/* The triangle a listing names, or -1 for an unknown name. */
static inline int pp_tri_parse(const char *s) {
  for (int i = 1; i < PP_TRI_COUNT; i++)
    if (!strcmp(s, pp_tri_names[i])) return i;
  return -1;
}

/* The sum over rows i < m of min(c, i + 1). */
static inline double pp_tri_rows(int64_t m, int64_t c) {
  double q = (double)(m < c ? m : c);
  return q * (q + 1) / 2 + (double)(m > c ? m - c : 0) * (double)c;
}

/* The multiply-adds of one m x n x k product that the triangle keeps (each a FLOP pair). */
static inline double pp_tri_macs(PpTri t, int64_t m, int64_t n, int64_t k) {
  double q = (double)(m < k ? m : k);
  switch (t) {
  case PP_TRI_NONE: return (double)m * n * k;
  case PP_TRI_OUT: return pp_tri_rows(m, n) * (double)k;   /* row i: min(n, i + 1) elements of k products */
  case PP_TRI_LOWER: return pp_tri_rows(m, k) * (double)n; /* row i: min(k, i + 1) products an element */
  case PP_TRI_UPPER: return (q * (double)k - q * (q - 1) / 2) * (double)n; /* row i < k: k - i products */
  }
  return 0;
}

#endif /* PP_TRI_H */
