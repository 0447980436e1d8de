/* linear.c — the Linear layer on OpenBLAS (see kernels.h). */
#include "kernels/cpu/kernels.h"

#include <assert.h>
#include <cblas.h>
#include <limits.h>
#include <string.h>

void k_linear(const float *x, const float *w, const float *b, float *y,
	      int64_t m, int64_t k, int64_t n)
{
	/* CBLAS takes int dimensions; a layer this large would be a plan bug. */
	assert(m >= 0 && k >= 0 && n >= 0);
	assert(m <= INT_MAX && k <= INT_MAX && n <= INT_MAX);
	/* Uneven context-parallel splits can leave a rank no rows, and CBLAS
	 * rejects a leading dimension of 0 before it looks at the sizes. */
	if (m == 0 || n == 0)
		return;
	/* Seeding y with the bias lets sgemm add it for free through beta = 1
	 * instead of a second pass over y. */
	if (b) {
		for (int64_t i = 0; i < m; i++)
			memcpy(y + i * n, b, (size_t)n * sizeof *y);
	}
	int ld = k > 0 ? (int)k : 1;

	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k,
		    1.0f, x, ld, w, ld, b ? 1.0f : 0.0f, y, (int)n);
}
