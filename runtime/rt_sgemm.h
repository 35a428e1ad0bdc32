/* rt_sgemm.h - the cpu device's own f32 GEMM for short products (rt_sgemm.c). */
#ifndef RT_SGEMM_H
#define RT_SGEMM_H

#include <stdbool.h>
#include <stdint.h>

/* The products taken: K at most a head's width or a short sequence (a K x 32 panel of B and twelve
 * rows of A stay in the first-level cache), M and N at most 256 (past that OpenBLAS is as fast: the
 * product is then bound by writing C) */
#define RT_SGEMM_MAX_K  128
#define RT_SGEMM_MAX_MN 256

/* Whether rt_sgemm takes an m x n x k product on this CPU. */
bool rt_sgemm_fits(int m, int n, int k);

/* C = alpha op(A) op(B) + beta C, row-major, op(X) = X^T when its flag is set; C is not read when
 * beta is 0; work: rt_sgemm_work's floats, 64-byte aligned. Only for products rt_sgemm_fits accepts. */
void rt_sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc, float *work);

/* The floats of work an m x n x k product needs (64-byte aligned). */
int64_t rt_sgemm_work(int m, int n, int k);

#endif
