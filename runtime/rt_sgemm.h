/* rt_sgemm.h - the cpu device's own f32 GEMM for short products (rt_sgemm.c). */
#ifndef RT_SGEMM_H
#define RT_SGEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "pp_tri.h"

/* The products taken: M and N up to a sequence of 512, K up to a head's width or such a sequence
 * (attention's products; measured in place on minimind256 and minimind, where OpenBLAS runs them at
 * 70-120 GFLOP/s). The 1024-row products of the linear layers stay with OpenBLAS, which runs them
 * about as fast. */
#define RT_SGEMM_MAX_K  512
#define RT_SGEMM_MAX_MN 512

/* Whether rt_sgemm takes an m x n x k product on this CPU. */
bool rt_sgemm_fits(int m, int n, int k);

/* C = alpha op(A) op(B) + beta C, row-major, op(X) = X^T when its flag is set; C is not read when
 * beta is 0; work: rt_sgemm_work's floats, 64-byte aligned. Only for products rt_sgemm_fits accepts.
 * tri: the products of a triangle alone (pp_tri.h), of a product of which this is the part from row
 * row0 and column col0 on (0, 0 for a whole one): the blocks of 12 rows x 32 columns of C that
 * `out` does not want are skipped, and each block of rows runs over the inner indices that `lower`
 * or `upper` keeps for any of its rows (the others' products are with op(A)'s zeros). */
void rt_sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc, PpTri tri, int row0, int col0, float *work);

/* The floats of work an m x n x k product needs (64-byte aligned). */
int64_t rt_sgemm_work(int m, int n, int k);

#endif
