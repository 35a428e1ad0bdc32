/* rt_sgemm.h - the cpu device's own f32 GEMM for short products (rt_sgemm.c). */
#ifndef RT_SGEMM_H
#define RT_SGEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "pp_tri.h"

/* The products taken, on a CPU with AVX-512 (measured in place on minimind256 and minimind,
 * docs/perf.md). With op(A) = A, every one whose work (below) is at most RT_SGEMM_MAX_WORK floats, a
 * thread's 64 MiB (the work grows with M x K only when A's rows lie apart and are copied together):
 * attention's short products, which OpenBLAS runs at 70-120 GFLOP/s, and the linear layers' and the
 * head's, of any K and N (in passes over K and groups of columns), up to a tenth faster than
 * OpenBLAS's. With op(A) = A^T short ones, M, N and K up to a sequence of 512, and any with M up to
 * RT_SGEMM_MAX_TM: a weight's gradient (K the step's tokens) packs its whole A transposed, and
 * OpenBLAS runs those faster where M is wider; where it is 256 or less, two or more threads
 * computing it as a team (rt_sgemm_team) make each of op(B)'s panels once, where split by rows each
 * would make all of them and OpenBLAS would run each half at its short-M rate (minimind256 at two
 * threads: its 256 x 256 x 1024 products 2.67-3.01 -> 2.44-2.50 ms a step, 128 x 256 x 1024
 * 1.36-1.42 -> 1.33-1.36; at one thread within 0.2 ms either way; M 704 or 6400: slower,
 * docs/perf.md). */
#define RT_SGEMM_MAX_WORK ((int64_t)1 << 24)
#define RT_SGEMM_MAX_T    512
#define RT_SGEMM_MAX_TM   256

/* Whether rt_sgemm takes an m x n x k product on this CPU (ta: op(A) = A^T; lda: A's rows apart). */
bool rt_sgemm_fits(bool ta, int m, int n, int k, int64_t lda);

/* C = alpha op(A) op(B) + beta C, row-major, op(X) = X^T when its flag is set; C is not read when
 * beta is 0; work: rt_sgemm_work's floats, 64-byte aligned. Only for products rt_sgemm_fits accepts.
 * tri: the products of a triangle alone (pp_tri.h), of a product of which this is the part from row
 * row0 and column col0 on (0, 0 for a whole one): the blocks of 12 rows x 32 columns of C that
 * `out` does not want are skipped, and each block of rows runs over the inner indices that `lower`
 * or `upper` keeps for any of its rows (the others' products are with op(A)'s zeros). */
void rt_sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc, PpTri tri, int row0, int col0, float *work);

/* A member of a team of threads computing one product together: member t of nt, and a barrier
 * over all of them (sync(arg) returns when every member has called it). */
typedef struct {
  int t, nt;
  void (*sync)(void *arg);
  void *arg;
} RtSgemmTeam;

/* rt_sgemm's product (no triangle) computed by a team, each member calling this with the same
 * arguments and one work of rt_sgemm_work's floats: the members share the work (A's packing or
 * copy, op(B)'s panels) evenly, and each computes C's rows it copied A's for (op(A) = A: the
 * step's tokens), or C's columns of the panels it made (op(A) = A^T: a weight's gradient); each
 * element of C is the same chain it is on one thread, so the values do not depend on the team. */
void rt_sgemm_team(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int64_t lda, const float *B,
                   int64_t ldb, float beta, float *C, int64_t ldc, float *work, const RtSgemmTeam *tm);

/* Whether an n-wide op(B) over k inner indices is made into panels in one group and one pass
 * (k up to a pass, and op(B) small enough for the second-level cache): a team sharing C's rows
 * then makes each panel once and waits once. */
bool rt_sgemm_one_group(int n, int k);

/* The floats of work an m x n x k product needs (64-byte aligned): a group of op(B)'s panels, the
 * partial sums of a K longer than a pass, A packed or copied contiguous (ta, or lda past K). */
int64_t rt_sgemm_work(bool ta, int m, int n, int k, int64_t lda);

#endif
