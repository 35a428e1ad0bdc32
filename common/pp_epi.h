/* pp_epi.h — a gemm's epilogue, the field `epi:NAME` of a listing's gemm line
 * (docs/stage-format.md): the kernel on the next line is elementwise work over the GEMM's output
 * C that a device may run inside the GEMM (cuBLASLt's epilogues), so that C's elements are not
 * written and read again. Running the two lines one after the other is always correct; the field
 * only says that they may be one. Included by ppc (fuse_elem.c, fuse_gemm.c and fuse_rows.c decide
 * it, cg_program.c prints it,
 * cost.c counts the pair as one GEMM) and ppr (rt_prog_instr.c reads and checks it, the cuda
 * device fuses it). The GEMM is a single one (batch 1), beta 0, C dense (ldc = n); the kernel's
 * pointer arguments, in order, for C[m,n] of element type T:
 *   gelu   D, C[, BIAS]  C[i][j] += BIAS[j] (rounded to T; C keeps it: GELU's saved input),
 *                        D[i][j] = gelu_tanh(C[i][j]); D m·n elements, BIAS n, all of type T
 *   dgelu  D, C, X       D[i][j] = C[i][j] · gelu_tanh'(X[i][j]); D and X m·n elements of T (C's
 *                        contents after the pair are unspecified)
 *   bias   C, BIAS       C[i][j] += BIAS[j] (rounded to T): D is C */
#ifndef PP_EPI_H
#define PP_EPI_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "pp_tri.h"

typedef enum PpEpi { PP_EPI_NONE, PP_EPI_GELU, PP_EPI_DGELU, PP_EPI_BIAS } PpEpi;
#define PP_EPI_COUNT 4

static const char *const pp_epi_names[PP_EPI_COUNT] = {"none", "gelu", "dgelu", "bias"}; /* ORDER PpEpi */

/* ORDER PpEpi, each: the pointer arguments the epilogue's kernel takes (at least, at most), their
 * roles (above), and which of them is D, C, GELU's input matrix (gelu writes it, dgelu reads it)
 * and the bias (-1: none) */
static const int pp_epi_args[PP_EPI_COUNT][2] = {{0, 0}, {2, 3}, {3, 3}, {2, 2}};
static const char *const pp_epi_roles[PP_EPI_COUNT][3] = {
    {"", "", ""}, {"D", "C", "BIAS"}, {"D", "C", "X"}, {"C", "BIAS", ""}};
static const int pp_epi_d[PP_EPI_COUNT] = {-1, 0, 0, 0};
static const int pp_epi_c[PP_EPI_COUNT] = {-1, 1, 1, 0};
static const int pp_epi_aux[PP_EPI_COUNT] = {-1, 1, 2, -1};
static const int pp_epi_bias[PP_EPI_COUNT] = {-1, 2, -1, 1};

static inline const char *pp_epi_name(PpEpi e) { return pp_epi_names[e]; }

/* Whether a GEMM may carry an epilogue: a single product (BATCH 1), BETA 0, C dense, no triangle. */
static inline bool pp_epi_gemm_ok(int64_t batch, double beta, int64_t ldc, int64_t n, PpTri tri) {
  return batch == 1 && beta == 0 && ldc == n && tri == PP_TRI_NONE;
}

/* The epilogue a listing names, or -1 for an unknown name. */
static inline int pp_epi_parse(const char *s) {
  for (int i = 1; i < PP_EPI_COUNT; i++)
    if (!strcmp(s, pp_epi_names[i])) return i;
  return -1;
}

#endif /* PP_EPI_H */
