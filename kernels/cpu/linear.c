/* linear.c — the Linear layer on the BLAS (see kernels.h). */
#include "kernels/cpu/kernels.h"

#include <assert.h>
#include <cblas.h>
#include <limits.h>
#include <string.h>

/* Columns [j0, j0 + nn) of y's rows [i0, i0 + mm): one sgemm on views of x,
 * w and b, y's rows n apart. */
static void linear_block(const float *x, const float *w, const float *b, float *y, int64_t i0,
			 int64_t mm, int64_t j0, int64_t nn, int64_t k, int64_t n)
{
	float *yb = y + i0 * n + j0;

	/* Seeding y with the bias lets sgemm add it in its own pass over y
	 * (beta = 1) instead of a second pass after it. */
	if (b) {
		for (int64_t i = 0; i < mm; i++)
			memcpy(yb + i * n, b + j0, (size_t)nn * sizeof *y);
	}
	int ld = k > 0 ? (int)k : 1;

	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)mm, (int)nn, (int)k, 1.0f,
		    x + i0 * k, ld, w + j0 * k, ld, b ? 1.0f : 0.0f, yb, (int)n);
}

void k_linear(const float *x, const float *w, const float *b, float *y,
	      int64_t m, int64_t k, int64_t n)
{
	k_linear_pool(NULL, x, w, b, y, m, k, n);
}

struct linear_job {
	const float *x, *w, *b;
	float *y;
	int64_t m, k, n, rows, cols; /* the block each task takes */
};

static void linear_task(void *arg, int64_t t, int worker)
{
	const struct linear_job *J = arg;
	int64_t i0 = J->rows < J->m ? t * J->rows : 0, j0 = J->rows < J->m ? 0 : t * J->cols;
	int64_t mm = J->m - i0 < J->rows ? J->m - i0 : J->rows;
	int64_t nn = J->n - j0 < J->cols ? J->n - j0 : J->cols;

	linear_block(J->x, J->w, J->b, J->y, i0, mm, j0, nn, J->k, J->n);
}

/* Rows of a task when a layer is split by rows: fewer and each sgemm's
 * packing of w is amortised over too few rows. */
#define LINEAR_MIN_ROWS 64

void k_linear_pool(struct k_pool *pool, const float *x, const float *w, const float *b,
		   float *y, int64_t m, int64_t k, int64_t n)
{
	/* CBLAS takes int dimensions; a layer this large would be a plan bug. */
	assert(m >= 0 && k >= 0 && n >= 0);
	assert(m <= INT_MAX && k <= INT_MAX && n <= INT_MAX);
	/* Uneven context-parallel splits can leave a rank no rows, and CBLAS
	 * rejects a leading dimension of 0 before it looks at the sizes. */
	if (m == 0 || n == 0)
		return;
	int64_t T = k_pool_threads(pool);
	/* One block per thread: by rows where there are enough, else (the
	 * modulation layers' single row) by columns, in multiples of 16. */
	struct linear_job J = { x, w, b, y, m, k, n, m, n };

	if (T > 1 && m >= T * LINEAR_MIN_ROWS)
		J.rows = (m + T - 1) / T;
	else if (T > 1 && n >= T * 64)
		J.cols = ((n + T - 1) / T + 15) / 16 * 16;
	int64_t tasks = J.rows < m ? (m + J.rows - 1) / J.rows : (n + J.cols - 1) / J.cols;

	k_pool_run(pool, tasks, linear_task, &J);
}
