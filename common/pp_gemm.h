/* pp_gemm.h — the elements a GEMM operand spans, as ppc's cost table and ppr's devices count
 * them: BATCH stored matrices of ROWS x COLS, leading dimension LD and STRIDE elements apart.
 * Included by both. */
#ifndef PP_GEMM_H
#define PP_GEMM_H

#include <stdint.h>

static inline int64_t pp_gemm_span(int64_t batch, int64_t stride, int64_t rows, int64_t ld, int64_t cols) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

#endif /* PP_GEMM_H */
