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

/* The multiply-adds of one m x n x k product that the triangle keeps (each a FLOP pair). */
static inline double pp_tri_macs(PpTri t, int64_t m, int64_t n, int64_t k) {
  double s = 0;
  switch (t) {
  case PP_TRI_NONE: return (double)m * n * k;
  case PP_TRI_OUT: /* row i: min(n, i + 1) elements of k products */
    for (int64_t i = 0; i < m; i++) s += (double)(i + 1 < n ? i + 1 : n) * k;
    return s;
  case PP_TRI_LOWER: /* row i: k' = min(k, i + 1) products for each of n elements */
    for (int64_t i = 0; i < m; i++) s += (double)(i + 1 < k ? i + 1 : k) * n;
    return s;
  case PP_TRI_UPPER: /* row i: k - i products (none past k) */
    for (int64_t i = 0; i < m && i < k; i++) s += (double)(k - i) * n;
    return s;
  }
  return s;
}

#endif /* PP_TRI_H */
