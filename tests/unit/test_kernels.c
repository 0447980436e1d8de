/* test_kernels.c — the CPU kernels against naive float64 references.
 *
 * Inputs come from a fixed-seed PRNG (uniform in (-1, 1) or normal, never 0)
 * and sizes avoid powers of two and tile multiples, so index slips and tile
 * edges show up as O(1) errors. Two error measures, named at each check:
 *   elementwise  max |x - ref| / max(|ref|, 1e-6), for kernels whose result
 *                is a few roundings of a product (no cancellation);
 *   normwise     max |x - ref| / max |ref|, where a sum of terms may cancel
 *                to near 0 and only the error relative to the terms is
 *                meaningful (dot products, shifts, rotations).
 * lse is compared by absolute error: it is a logarithm, so an absolute error
 * e is a relative error e of the softmax denominator. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/kernels.h"
#include "tests/rand.h"
#include "tests/unit/unit.h"

/* Tolerances; see the header comment for which measure each one uses. */
#define TOL_ELEM 1e-5	/* activations, norms, modulate, rope */
#define TOL_ROUND 1e-7	/* one correctly rounded op: 2^-24 ~ 6e-8 */
#define TOL_GEMM 2e-5	/* linear and attention, reductions up to 512 */
#define TOL_LSE 1e-5	/* absolute, in log space */

/* Standard normal (Box-Muller); 0 is redrawn. */
static float nrand(void)
{
	for (;;) {
		double u1 = (urand() + 1.0) / 2.0, u2 = (urand() + 1.0) / 2.0;
		float z = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));

		if (z != 0.0f)
			return z;
	}
}

static float *fill_u(int64_t n)
{
	float *p = malloc((size_t)n * sizeof *p);

	for (int64_t i = 0; i < n; i++)
		p[i] = urand();
	return p;
}

static float *fill_n(int64_t n)
{
	float *p = malloc((size_t)n * sizeof *p);

	for (int64_t i = 0; i < n; i++)
		p[i] = nrand();
	return p;
}

static float *fill_value(int64_t n, float v)
{
	float *p = malloc((size_t)n * sizeof *p);

	for (int64_t i = 0; i < n; i++)
		p[i] = v;
	return p;
}

static double *dalloc(int64_t n)
{
	return malloc((size_t)n * sizeof(double));
}

/* A NaN anywhere makes the error infinite rather than slip past a max. */
static double err_elem(const float *x, const double *ref, int64_t n)
{
	double worst = 0;

	for (int64_t i = 0; i < n; i++) {
		double e = fabs(x[i] - ref[i]) / fmax(fabs(ref[i]), 1e-6);

		if (isnan(e))
			return INFINITY;
		worst = fmax(worst, e);
	}
	return worst;
}

static double err_norm(const float *x, const double *ref, int64_t n)
{
	double worst = 0, scale = 0;

	for (int64_t i = 0; i < n; i++) {
		double e = fabs(x[i] - ref[i]);

		if (isnan(e))
			return INFINITY;
		worst = fmax(worst, e);
		scale = fmax(scale, fabs(ref[i]));
	}
	return worst / scale;
}

static double err_abs(const float *x, const double *ref, int64_t n)
{
	double worst = 0;

	for (int64_t i = 0; i < n; i++) {
		if (x[i] == ref[i]) /* -inf (an empty row's lse) included */
			continue;
		if (x[i] == ref[i]) /* -inf (an empty row's lse) included */
			continue;
		double e = fabs(x[i] - ref[i]);

		if (isnan(e))
			return INFINITY;
		worst = fmax(worst, e);
	}
	return worst;
}

/* ---- the pool ------------------------------------------------------- */

/* Each task of each job is counted once: jobs back to back (a worker may
 * still be leaving the last one when the next is posted), and jobs after
 * pauses (every worker asleep on the condition variable). */
struct pool_count {
	atomic_int runs[8];
	atomic_int bad_worker;
	int threads;
};

static void pool_count_task(void *arg, int64_t t, int worker)
{
	struct pool_count *c = arg;
	/* a few microseconds of work, so that the workers take some of the
	 * tasks and a caller that did not wait for them would count too few */
	volatile float v = 1.0f;

	for (int i = 0; i < 5000; i++)
		v = v * 0.999f + 0.5f;
	atomic_fetch_add(&c->runs[t], 1);
	if (worker < 0 || worker >= c->threads)
		atomic_fetch_add(&c->bad_worker, 1);
}

static void test_pool(void)
{
	for (int n = 2; n <= 3; n++) {
		struct k_pool *pool = k_pool_create(n);
		struct pool_count c = { .threads = k_pool_threads(pool) };
		int wrong = 0;

		for (int job = 0; job < 3000; job++) {
			int64_t tasks = job % 9; /* 0 to 8: fewer tasks than threads too */

			for (int t = 0; t < 8; t++)
				atomic_store(&c.runs[t], 0);
			if (job % 500 == 499) /* 2 ms: the workers are asleep */
				nanosleep(&(struct timespec){ 0, 2000000 }, NULL);
			k_pool_run(pool, tasks, pool_count_task, &c);
			for (int t = 0; t < 8; t++)
				wrong += atomic_load(&c.runs[t]) != (t < tasks);
		}
		UNIT_CHECK(c.threads == n && wrong == 0 && atomic_load(&c.bad_worker) == 0,
			   "pool of %d: 3000 jobs, every task run once (%d wrong), workers in range",
			   n, wrong);
		k_pool_free(pool);
	}
}

/* ---- linear ---------------------------------------------------------- */

/* threads: 1 for k_linear, more for k_linear_pool on a pool that size. */
static void test_linear_case(int64_t m, int64_t k, int64_t n, bool bias, int threads)
{
	float *x = fill_u(m * k), *w = fill_u(n * k), *b = bias ? fill_u(n) : NULL;
	/* NaN in y proves that without a bias y is written, never read. */
	float *y = fill_value(m * n, NAN);
	double *ref = dalloc(m * n);

	for (int64_t i = 0; i < m; i++) {
		for (int64_t j = 0; j < n; j++) {
			double s = b ? b[j] : 0.0;

			for (int64_t t = 0; t < k; t++)
				s += (double)x[i * k + t] * w[j * k + t];
			ref[i * n + j] = s;
		}
	}
	if (threads == 1) {
		k_linear(x, w, b, y, m, k, n);
	} else {
		struct k_pool *pool = k_pool_create(threads);
		void *ws = aligned_alloc(64, k_linear_workspace(threads) + 64);

		k_linear_pool(pool, x, w, b, y, m, k, n, ws);
		free(ws);
		k_pool_free(pool);
	}
	double e = err_norm(y, ref, m * n);

	UNIT_CHECK(e <= TOL_GEMM,
		   "linear m=%lld k=%lld n=%lld bias=%d, %d thread%s: normwise %.2e <= %.0e",
		   (long long)m, (long long)k, (long long)n, bias, threads, threads > 1 ? "s" : "",
		   e, TOL_GEMM);
	free(x);
	free(w);
	free(b);
	free(y);
	free(ref);
}

/* k_linear_pool with a workspace (several panels of w packed at a time)
 * against k_linear (one panel on the stack): the same bits, on groups of
 * four 64-column panels, the last group of two with a short panel, two
 * k-blocks the second short and a 5-row tail. Control: one weight of the
 * last panel's second k-block changed shows in y. */
static void test_linear_panels(void)
{
	const int64_t m = 23, k = 600, n = 5 * 64 + 44;
	float *x = fill_u(m * k), *w = fill_u(n * k), *b = fill_u(n);
	float *one = fill_value(m * n, NAN), *grouped = fill_value(m * n, NAN);
	void *ws = aligned_alloc(64, k_linear_workspace(1) + 64);

	k_linear(x, w, b, one, m, k, n);
	k_linear_pool(NULL, x, w, b, grouped, m, k, n, ws);
	UNIT_CHECK(memcmp(one, grouped, (size_t)(m * n) * sizeof *one) == 0,
		   "linear %lldx%lldx%lld: panels packed four at a time = one at a time, bit for bit",
		   (long long)m, (long long)k, (long long)n);
	w[(n - 1) * k + 550] += 0.25f;
	k_linear_pool(NULL, x, w, b, grouped, m, k, n, ws);
	UNIT_CHECK(memcmp(one, grouped, (size_t)(m * n) * sizeof *one) != 0,
		   "linear panels control: a weight of the last panel changed shows");
	free(x);
	free(w);
	free(b);
	free(one);
	free(grouped);
	free(ws);
}

/* A few rows (f32_few: w transposed in registers, no panel) against the
 * same rows inside a larger call (the tiles): the same bits, with k and n
 * past whole blocks of 16 and a bias. Control: the last weight (a tail of
 * both) changed shows in the few rows' result. With AVX-512 only: the
 * BLAS promises nothing of the kind. */
static void test_linear_few_rows(void)
{
	const int64_t m = 7, k = 517, n = 301;

	if (k_cpu_isa() != K_ISA_AVX512) {
		/* through the BLAS a row's bits may depend on the call's shape */
		UNIT_CHECK(true, "linear few rows = tile rows # SKIP no AVX-512 tiles here "
				 "(or DTPC_CPU_ISA names a narrower set)");
		return;
	}
	float *x = fill_u(m * k), *w = fill_u(n * k), *b = fill_u(n);
	float *all = fill_value(m * n, NAN), *few = fill_value(3 * n, NAN);

	k_linear(x, w, b, all, m, k, n);
	for (int64_t rows = 1; rows <= 3; rows += 2) {
		k_linear(x + 2 * k, w, b, few, rows, k, n);
		UNIT_CHECK(memcmp(all + 2 * n, few, (size_t)(rows * n) * sizeof *few) == 0,
			   "linear of %lld row%s x %lldx%lld = those rows of a %lld-row call, bit for bit",
			   (long long)rows, rows > 1 ? "s" : "", (long long)k, (long long)n,
			   (long long)m);
	}
	w[n * k - 1] += 0.25f;
	k_linear(x + 2 * k, w, b, few, 1, k, n);
	UNIT_CHECK(memcmp(all + 2 * n, few, (size_t)n * sizeof *few) != 0,
		   "linear few rows control: the last weight changed shows");
	free(x);
	free(w);
	free(b);
	free(all);
	free(few);
}

static void test_linear(void)
{
	test_linear_case(37, 509, 45, true, 1);
	test_linear_case(37, 509, 45, false, 1);
	test_linear_case(1, 3, 7, true, 1);
	/* On a pool: split by rows (the last block short), and a single row
	 * split by columns (blocks of 16s, the last short); each block must
	 * take its own slice of the bias. */
	test_linear_case(3 * 128 + 5, 37, 45, true, 3);
	test_linear_case(1, 37, 3 * 64 + 9, true, 3);
	test_linear_case(2, 37, 300, false, 2);
	/* The AVX-512 tiles' edges (kernels/cpu/linear.c: 6 x 64 tiles,
	 * k-blocks of 512, w packed in 16 x 16 blocks): k one whole block, two
	 * blocks the second short, and k under one 16; n of whole panels and of
	 * four panels the last 8 wide; every row tail 1..5 over 13 and 23
	 * rows. */
	test_linear_case(13, 512, 128, true, 1);
	test_linear_case(23, 600, 200, true, 1);
	test_linear_case(11, 5, 64, false, 1);
	test_linear_case(6, 1, 17, true, 1);
	test_linear_case(2 * 128 + 3, 133, 70, true, 2);
}

/* ---- norms ----------------------------------------------------------- */

static void ref_layer_norm(const float *x, double *y, int64_t rows, int64_t n, double eps,
			   const float *w, const float *b)
{
	for (int64_t r = 0; r < rows; r++) {
		double mean = 0, var = 0;

		for (int64_t i = 0; i < n; i++)
			mean += x[r * n + i];
		mean /= (double)n;
		for (int64_t i = 0; i < n; i++)
			var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
		var /= (double)n;
		for (int64_t i = 0; i < n; i++) {
			double v = (x[r * n + i] - mean) / sqrt(var + eps);

			y[r * n + i] = v * (w ? w[i] : 1.0) + (b ? b[i] : 0.0);
		}
	}
}

static void test_layer_norm(void)
{
	const int64_t rows = 7, n = 203;
	const float eps = 1e-5f;
	float *x = fill_u(rows * n), *w = fill_u(n), *b = fill_u(n);
	float *y = malloc((size_t)(rows * n) * sizeof *y);
	double *ref = dalloc(rows * n);

	ref_layer_norm(x, ref, rows, n, eps, w, b);
	k_layer_norm(x, y, rows, n, eps, w, b);
	double e = err_norm(y, ref, rows * n);

	UNIT_CHECK(e <= TOL_ELEM, "layer_norm affine: normwise %.2e <= %.0e", e, TOL_ELEM);

	ref_layer_norm(x, ref, rows, n, eps, NULL, NULL);
	k_layer_norm(x, y, rows, n, eps, NULL, NULL);
	e = err_norm(y, ref, rows * n);
	UNIT_CHECK(e <= TOL_ELEM, "layer_norm no affine: normwise %.2e <= %.0e", e, TOL_ELEM);

	/* A mean 300 times the spread: float E[x^2] - mean^2 would have no
	 * correct digit left. Also run in place, which the API allows. */
	for (int64_t i = 0; i < rows * n; i++)
		x[i] += 300.0f;
	ref_layer_norm(x, ref, rows, n, eps, w, NULL);
	k_layer_norm(x, x, rows, n, eps, w, NULL);
	e = err_norm(x, ref, rows * n);
	UNIT_CHECK(e <= TOL_ELEM, "layer_norm offset 300, w only, in place: normwise %.2e <= %.0e",
		   e, TOL_ELEM);
	free(x);
	free(w);
	free(b);
	free(y);
	free(ref);
}

static void test_rms_norm_case(int64_t group, bool affine)
{
	const int64_t rows = 5, H = 3, D = 24, n = H * D;
	const float eps = 1e-6f;
	float *x = fill_u(rows * n), *w = affine ? fill_u(group) : NULL;
	float *y = malloc((size_t)(rows * n) * sizeof *y);
	double *ref = dalloc(rows * n);

	for (int64_t g = 0; g < rows * n / group; g++) {
		double sq = 0;

		for (int64_t i = 0; i < group; i++)
			sq += (double)x[g * group + i] * x[g * group + i];
		double r = 1.0 / sqrt(sq / (double)group + eps);

		for (int64_t i = 0; i < group; i++)
			ref[g * group + i] = x[g * group + i] * r * (w ? w[i] : 1.0);
	}
	k_rms_norm(x, y, rows, n, group, eps, w);
	double e = err_elem(y, ref, rows * n);

	UNIT_CHECK(e <= TOL_ELEM, "rms_norm group=%lld of n=%lld affine=%d: elementwise %.2e <= %.0e",
		   (long long)group, (long long)n, affine, e, TOL_ELEM);
	free(x);
	free(w);
	free(y);
	free(ref);
}

static void test_rms_norm(void)
{
	test_rms_norm_case(24, true);	/* per head: group = D */
	test_rms_norm_case(72, true);	/* whole row: group = n */
	test_rms_norm_case(24, false);
}

/* A norm whose row of N is split over P ranks (widths 68, 68, 67 of 203):
 * each part's k_norm_stats, summed over the parts in float (what the
 * all-reduce does), then k_norm_apply on each part, against the float64
 * reference of the whole row. LayerNorm on rows with a mean 300 times their
 * spread (the second pass centres on the reduced mean), RMSNorm on normal
 * rows. Control: a part normalised with its own sums only (no all-reduce)
 * fails the tolerance. */
static void test_dist_norm(void)
{
	enum { P = 3 };
	const int64_t rows = 6, N = 203, width[P] = { 68, 68, 67 };
	const float eps = 1e-5f;
	float *x = fill_u(rows * N), *w = fill_u(N), *b = fill_u(N);
	float *y = malloc((size_t)(rows * N) * sizeof *y), *part = malloc((size_t)(rows * N) * sizeof *part);
	float s1[6], s2[12], p1[P][6], p2[P][12], local[6];
	double *ref = dalloc(rows * N);

	for (int64_t i = 0; i < rows * N; i++)
		x[i] += 300.0f;
	for (int rms = 0; rms < 2; rms++) {
		if (rms)
			for (int64_t i = 0; i < rows * N; i++)
				x[i] = nrand();
		/* the parts as contiguous [rows, width] tensors, as a rank holds them */
		int64_t off = 0;
		float *xp[P], *yp[P];
		for (int p = 0; p < P; p++) {
			xp[p] = part + rows * off;
			yp[p] = y + rows * off;
			for (int64_t r = 0; r < rows; r++)
				memcpy(xp[p] + r * width[p], x + r * N + off, (size_t)width[p] * sizeof *x);
			off += width[p];
		}
		for (int64_t r = 0; r < rows; r++)
			s1[r] = s2[2 * r] = s2[2 * r + 1] = 0;
		if (!rms) {
			for (int p = 0; p < P; p++)
				k_norm_stats(xp[p], NULL, p1[p], rows, width[p], N, K_NS_SUM);
			for (int p = 0; p < P; p++)
				for (int64_t r = 0; r < rows; r++)
					s1[r] += p1[p][r];
		}
		for (int p = 0; p < P; p++)
			k_norm_stats(xp[p], rms ? NULL : s1, p2[p], rows, width[p], N,
				     rms ? K_NS_SQ : K_NS_CENTRED);
		for (int p = 0; p < P; p++)
			for (int64_t r = 0; r < (rms ? 1 : 2) * rows; r++)
				s2[r] += p2[p][r];
		off = 0;
		for (int p = 0; p < P; p++) {
			k_norm_apply(xp[p], yp[p], rows, width[p], N, eps, rms ? NULL : s1, s2, w + off,
				     rms ? NULL : b + off);
			off += width[p];
		}
		/* back to [rows, N] */
		float *whole = malloc((size_t)(rows * N) * sizeof *whole);
		off = 0;
		for (int p = 0; p < P; p++) {
			for (int64_t r = 0; r < rows; r++)
				memcpy(whole + r * N + off, yp[p] + r * width[p], (size_t)width[p] * sizeof *y);
			off += width[p];
		}
		if (rms) {
			for (int64_t r = 0; r < rows; r++) {
				double sq = 0;
				for (int64_t i = 0; i < N; i++)
					sq += (double)x[r * N + i] * x[r * N + i];
				for (int64_t i = 0; i < N; i++)
					ref[r * N + i] = x[r * N + i] / sqrt(sq / (double)N + eps) * w[i];
			}
		} else {
			ref_layer_norm(x, ref, rows, N, eps, w, b);
		}
		double e = err_norm(whole, ref, rows * N);
		UNIT_CHECK(e <= TOL_ELEM, "%s over 3 parts (68, 68, 67 of 203)%s: normwise %.2e <= %.0e",
			   rms ? "rms_norm" : "layer_norm", rms ? "" : ", offset 300", e, TOL_ELEM);
		/* control: part 0 with its own sums only */
		if (!rms)
			for (int64_t r = 0; r < rows; r++)
				local[r] = p1[0][r] * (float)N / (float)width[0];
		k_norm_apply(xp[0], yp[0], rows, width[0], N, eps, rms ? NULL : local, p2[0], w,
			     rms ? NULL : b);
		double ec = 0;
		for (int64_t r = 0; r < rows; r++)
			for (int64_t i = 0; i < width[0]; i++) {
				double d = fabs(yp[0][r * width[0] + i] - ref[r * N + i]);
				ec = d > ec ? d : ec;
			}
		UNIT_CHECK(ec > 100 * TOL_ELEM, "%s control: a part's own sums are off by %.2e",
			   rms ? "rms_norm" : "layer_norm", ec);
		free(whole);
	}
	free(x);
	free(w);
	free(b);
	free(y);
	free(part);
	free(ref);
}

/* ---- activations ----------------------------------------------------- */

static void test_activations(void)
{
	const int64_t n = 1001;
	float *x = fill_n(n), *y = malloc((size_t)n * sizeof *y);
	double *ref = dalloc(n);

	for (int64_t i = 0; i < n; i++)
		ref[i] = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
	k_gelu(x, y, n, false);
	double e = err_elem(y, ref, n);

	UNIT_CHECK(e <= TOL_ELEM, "gelu exact: elementwise %.2e <= %.0e", e, TOL_ELEM);

	for (int64_t i = 0; i < n; i++) {
		double u = sqrt(2.0 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);

		ref[i] = 0.5 * x[i] * (1.0 + tanh(u));
	}
	k_gelu(x, y, n, true);
	e = err_elem(y, ref, n);
	UNIT_CHECK(e <= TOL_ELEM, "gelu tanh: elementwise %.2e <= %.0e", e, TOL_ELEM);

	for (int64_t i = 0; i < n; i++)
		ref[i] = x[i] / (1.0 + exp(-(double)x[i]));
	k_silu(x, y, n);
	e = err_elem(y, ref, n);
	UNIT_CHECK(e <= TOL_ELEM, "silu: elementwise %.2e <= %.0e", e, TOL_ELEM);

	for (int64_t i = 0; i < n; i++)
		ref[i] = tanh((double)x[i]);
	k_tanh(x, y, n);
	e = err_elem(y, ref, n);
	UNIT_CHECK(e <= TOL_ELEM, "tanh: elementwise %.2e <= %.0e", e, TOL_ELEM);
	/* saturated, and odd: exactly +-1 far out, -0 kept */
	float far[3] = { 40.0f, -40.0f, -0.0f }, fy[3];
	k_tanh(far, fy, 3);
	UNIT_CHECK(fy[0] == 1.0f && fy[1] == -1.0f && fy[2] == 0.0f && signbit(fy[2]),
		   "tanh: saturates to +-1 and keeps -0");

	for (int64_t i = 0; i < n; i++)
		ref[i] = 1.0 / (1.0 + exp(-(double)x[i]));
	k_sigmoid(x, y, n);
	e = err_elem(y, ref, n);
	UNIT_CHECK(e <= TOL_ELEM, "sigmoid: elementwise %.2e <= %.0e", e, TOL_ELEM);
	/* the tails: 1 far right, 0 (not NaN: exp overflows to inf) far left,
	 * a half at 0 */
	float tails[3] = { 40.0f, -200.0f, 0.0f }, ty[3];
	k_sigmoid(tails, ty, 3);
	UNIT_CHECK(ty[0] == 1.0f && ty[1] == 0.0f && ty[2] == 0.5f,
		   "sigmoid: 1 and 0 in the tails, 0.5 at 0");
	free(x);
	free(y);
	free(ref);
}

/* ---- broadcasting binary ops ----------------------------------------- */

/* Each output index unravelled and re-raveled into each operand: slow and
 * obviously right. */
static void ref_binary(enum k_binop op, const float *a, const int64_t *as, const float *b,
		       const int64_t *bs, double *out, const int64_t *os, int nd)
{
	int64_t total = 1;

	for (int i = 0; i < nd; i++)
		total *= os[i];
	for (int64_t f = 0; f < total; f++) {
		int64_t rest = f, ia = 0, ib = 0, ma = 1, mb = 1;

		for (int i = nd - 1; i >= 0; i--) {
			int64_t c = rest % os[i];

			rest /= os[i];
			ia += (as[i] == 1 ? 0 : c) * ma;
			ib += (bs[i] == 1 ? 0 : c) * mb;
			ma *= as[i];
			mb *= bs[i];
		}
		out[f] = op == K_ADD ? (double)a[ia] + b[ib] : (double)a[ia] * b[ib];
	}
}

static int64_t numel(const int64_t *s, int nd)
{
	int64_t n = 1;

	for (int i = 0; i < nd; i++)
		n *= s[i];
	return n;
}

/* in_place: out is b's buffer (b must have the output shape). */
static void test_binary_case(const char *what, enum k_binop op, const int64_t *as,
			     const int64_t *bs, const int64_t *os, bool in_place)
{
	float *a = fill_u(numel(as, 3)), *b = fill_u(numel(bs, 3));
	float *out = in_place ? b : malloc((size_t)numel(os, 3) * sizeof *out);
	double *ref = dalloc(numel(os, 3));

	ref_binary(op, a, as, b, bs, ref, os, 3);
	k_binary(op, a, as, b, bs, out, os, 3);
	double e = err_elem(out, ref, numel(os, 3));

	UNIT_CHECK(e <= TOL_ROUND, "binary %s: elementwise %.2e <= %.0e", what, e, TOL_ROUND);
	if (!in_place)
		free(out);
	free(a);
	free(b);
	free(ref);
}

static void test_binary(void)
{
	const int64_t B = 2, S = 5, H = 7;
	const int64_t bsh[3] = { B, S, H }, b1h[3] = { B, 1, H }, one[3] = { 1, 1, 1 };
	const int64_t o6h[3] = { 1, 6, H }, b6h[3] = { B, 6, H }, o1s1[3] = { 1, S, 1 };

	test_binary_case("[B,1,H] + [B,S,H]", K_ADD, b1h, bsh, bsh, false);
	test_binary_case("[B,S,H] * [B,1,H]", K_MUL, bsh, b1h, bsh, false);
	test_binary_case("[1,6,H] * [B,6,H]", K_MUL, o6h, b6h, b6h, false);
	test_binary_case("[B,S,H] + [1] (padded to [1,1,1])", K_ADD, bsh, one, bsh, false);
	test_binary_case("[1] * [B,S,H]", K_MUL, one, bsh, bsh, false);
	test_binary_case("[B,S,H] * [B,S,H]", K_MUL, bsh, bsh, bsh, false);
	test_binary_case("[B,1,H] * [1,S,1] (both broadcast)", K_MUL, b1h, o1s1, bsh, false);
	test_binary_case("[B,1,H] + [B,S,H] into b's buffer", K_ADD, b1h, bsh, bsh, true);
	test_binary_case("[1] + [1]", K_ADD, one, one, one, false);
}

/* ---- modulate, copy2d, rope ------------------------------------------ */

static void test_modulate_case(bool per_position)
{
	const int64_t B = 2, S = 13, H = 19;
	const int64_t rows = per_position ? B * S : B, s_stride = per_position ? H : 0;
	float *x = fill_u(B * S * H), *shift = fill_u(rows * H), *scale = fill_u(rows * H);
	float *y = malloc((size_t)(B * S * H) * sizeof *y);
	double *ref = dalloc(B * S * H);

	for (int64_t b = 0; b < B; b++) {
		for (int64_t s = 0; s < S; s++) {
			int64_t r = per_position ? b * S + s : b;

			for (int64_t h = 0; h < H; h++) {
				int64_t i = (b * S + s) * H + h;

				ref[i] = x[i] * (1.0 + scale[r * H + h]) + shift[r * H + h];
			}
		}
	}
	k_modulate(x, shift, scale, y, B, S, H, s_stride);
	double e = err_norm(y, ref, B * S * H);

	UNIT_CHECK(e <= TOL_ELEM, "modulate shift/scale %s: normwise %.2e <= %.0e",
		   per_position ? "[B,S,H] (s_stride = H)" : "[B,H] (s_stride = 0)", e, TOL_ELEM);
	free(x);
	free(shift);
	free(scale);
	free(y);
	free(ref);
}

static void test_copy2d(void)
{
	const int64_t rows = 9, cols = 13, ss = 31, ds = 17;
	float *src = fill_u(rows * ss);
	float *dst = fill_value(rows * ds, -7.0f);
	bool copied = true, untouched = true;

	/* A column slice of src into a wider-than-needed dst: the gaps
	 * between rows of dst must keep their sentinel. */
	k_copy2d(dst, ds, src + 5, ss, rows, cols);
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t c = 0; c < ds; c++) {
			if (c < cols)
				copied &= dst[r * ds + c] == src[r * ss + 5 + c];
			else
				untouched &= dst[r * ds + c] == -7.0f;
		}
	}
	UNIT_CHECK(copied, "copy2d strided: every element copied exactly");
	UNIT_CHECK(untouched, "copy2d strided: nothing written between destination rows");

	float *dense = fill_value(rows * cols + 1, -7.0f);

	k_copy2d(dense, cols, src, cols, rows, cols);
	UNIT_CHECK(!memcmp(dense, src, (size_t)(rows * cols) * sizeof *src) &&
		   dense[rows * cols] == -7.0f,
		   "copy2d contiguous: exact, and nothing past the end");

	/* An all-to-all pack: a strided column slice into a dense buffer. */
	k_copy2d(dense, cols, src + 5, ss, rows, cols);
	copied = true;
	for (int64_t r = 0; r < rows; r++)
		copied &= !memcmp(dense + r * cols, src + r * ss + 5, (size_t)cols * sizeof *src);
	UNIT_CHECK(copied && dense[rows * cols] == -7.0f,
		   "copy2d pack strided into dense: exact, and nothing past the end");
	free(src);
	free(dst);
	free(dense);
}

static void ref_rope(const float *x, int64_t xs, const float *c, const float *s, double *y,
		     int64_t B, int64_t S, int64_t heads, int64_t D)
{
	for (int64_t b = 0; b < B; b++)
		for (int64_t p = 0; p < S; p++)
			for (int64_t h = 0; h < heads; h++)
				for (int64_t i = 0; i < D; i += 2) {
					const float *xh = x + (b * S + p) * xs + h * D;
					double *yh = y + ((b * S + p) * heads + h) * D;

					yh[i] = (double)xh[i] * c[p * D + i] -
						(double)xh[i + 1] * s[p * D + i];
					yh[i + 1] = (double)xh[i + 1] * c[p * D + i + 1] +
						    (double)xh[i] * s[p * D + i + 1];
				}
}

static void test_rope(void)
{
	const int64_t B = 2, S = 11, heads = 3, D = 10, W = heads * D;
	/* x is the k part of a padded packed qkv buffer; cos and sin are
	 * independent random tables so a swapped index cannot go unnoticed. */
	const int64_t xs = 3 * W + 3;
	float *qkv = fill_u(B * S * xs), *c = fill_u(S * D), *s = fill_u(S * D);
	float *y = malloc((size_t)(B * S * W) * sizeof *y);
	double *ref = dalloc(B * S * W);

	ref_rope(qkv + W, xs, c, s, ref, B, S, heads, D);
	k_rope(qkv + W, xs, c, s, y, W, B, S, heads, D);
	double e = err_norm(y, ref, B * S * W);

	UNIT_CHECK(e <= TOL_ELEM, "rope strided x -> contiguous y: normwise %.2e <= %.0e", e, TOL_ELEM);

	k_rope(qkv + W, xs, c, s, qkv + W, xs, B, S, heads, D);
	for (int64_t r = 0; r < B * S; r++)
		memcpy(y + r * W, qkv + r * xs + W, (size_t)W * sizeof *y);
	e = err_norm(y, ref, B * S * W);
	UNIT_CHECK(e <= TOL_ELEM, "rope in place in the packed buffer: normwise %.2e <= %.0e",
		   e, TOL_ELEM);
	free(qkv);
	free(c);
	free(s);
	free(y);
	free(ref);
}

/* rope's convention "half" (MiniMax-H3's _apply_rotary_emb) in float64:
 * x * cos + cat(-x2, x1) * sin over the R leading channels of each head,
 * the rest of the head as it is */
static void ref_rope_half(const float *x, int64_t xs, const float *c, const float *s, double *y,
			  int64_t B, int64_t S, int64_t heads, int64_t D, int64_t R)
{
	int64_t h2 = R / 2;

	for (int64_t b = 0; b < B; b++)
		for (int64_t p = 0; p < S; p++)
			for (int64_t h = 0; h < heads; h++) {
				const float *xh = x + (b * S + p) * xs + h * D;
				double *yh = y + ((b * S + p) * heads + h) * D;

				for (int64_t j = 0; j < D; j++) {
					if (j >= R) {
						yh[j] = xh[j];
						continue;
					}
					double rot = j < h2 ? -(double)xh[j + h2] : (double)xh[j - h2];
					yh[j] = (double)xh[j] * c[p * R + j] + rot * s[p * R + j];
				}
			}
}

/* k_rope_half in place on q inside the packed buffer qkv (rows xs apart, q
 * at column W = heads * D), q copied out into y: its normwise error
 * against ref */
static double rope_half_in_place(float *qkv, int64_t xs, const float *c, const float *s,
				 float *y, const double *ref, int64_t B, int64_t S, int64_t heads,
				 int64_t D, int64_t R, bool per_head)
{
	int64_t W = heads * D;

	k_rope_half(qkv + W, xs, c, s, qkv + W, xs, B, S, heads, D, R, per_head);
	for (int64_t r = 0; r < B * S; r++)
		memcpy(y + r * W, qkv + r * xs + W, (size_t)W * sizeof *y);
	return err_norm(y, ref, B * S * W);
}

static void test_rope_half(void)
{
	const int64_t B = 2, S = 7, heads = 3, D = 14, R = 10, W = heads * D;
	/* x inside a padded packed buffer, as rope's test; independent random
	 * cos / sin tables (so a pair read from the wrong column shows) */
	const int64_t xs = 3 * W + 1;
	float *qkv = fill_u(B * S * xs), *c = fill_u(S * R), *s = fill_u(S * R);
	float *y = malloc((size_t)(B * S * W) * sizeof *y);
	double *ref = dalloc(B * S * W);

	ref_rope_half(qkv + W, xs, c, s, ref, B, S, heads, D, R);
	k_rope_half(qkv + W, xs, c, s, y, W, B, S, heads, D, R, false);
	double e = err_norm(y, ref, B * S * W);

	UNIT_CHECK(e <= TOL_ELEM, "rope half (R 10 of D 14) strided x -> contiguous y: normwise "
		   "%.2e <= %.0e", e, TOL_ELEM);
	/* control: the interleaved convention over the same channels differs */
	float *yi = malloc((size_t)(B * S * W) * sizeof *yi);
	float *ci = malloc((size_t)(S * D) * sizeof *ci), *si = malloc((size_t)(S * D) * sizeof *si);

	for (int64_t p = 0; p < S; p++)
		for (int64_t j = 0; j < D; j++) {
			ci[p * D + j] = j < R ? c[p * R + j] : 1.0f;
			si[p * D + j] = j < R ? s[p * R + j] : 0.0f;
		}
	k_rope(qkv + W, xs, ci, si, yi, W, B, S, heads, D);
	double ec = err_norm(yi, ref, B * S * W);

	UNIT_CHECK(ec > 100 * TOL_ELEM, "rope half control: interleaved pairs over the same "
		   "channels are off (normwise %.2e > %.0e)", ec, 100 * TOL_ELEM);
	e = rope_half_in_place(qkv, xs, c, s, y, ref, B, S, heads, D, R, false);
	UNIT_CHECK(e <= TOL_ELEM, "rope half in place: normwise %.2e <= %.0e", e, TOL_ELEM);
	free(qkv);
	free(c);
	free(s);
	free(y);
	free(yi);
	free(ci);
	free(si);
	free(ref);
}

/* rope's convention "split" (LTX-2's apply_split_rotary_emb) in float64:
 * head h's first half x1 and second half x2 of D / 2 channels each, its own
 * table columns h * D / 2 .. (h + 1) * D / 2 for both: x1 cos - x2 sin and
 * x2 cos + x1 sin */
static void ref_rope_split(const float *x, int64_t xs, const float *c, const float *s, double *y,
			   int64_t B, int64_t S, int64_t heads, int64_t D)
{
	int64_t r = D / 2, width = heads * r;

	for (int64_t b = 0; b < B; b++)
		for (int64_t p = 0; p < S; p++)
			for (int64_t h = 0; h < heads; h++) {
				const float *xh = x + (b * S + p) * xs + h * D;
				const float *ch = c + p * width + h * r, *sh = s + p * width + h * r;
				double *yh = y + ((b * S + p) * heads + h) * D;

				for (int64_t j = 0; j < r; j++) {
					double x1 = xh[j], x2 = xh[j + r];
					yh[j] = x1 * ch[j] - x2 * sh[j];
					yh[j + r] = x2 * ch[j] + x1 * sh[j];
				}
			}
}

static void test_rope_split(void)
{
	const int64_t B = 2, S = 5, heads = 3, D = 10, W = heads * D, TW = heads * D / 2;
	const int64_t xs = 3 * W + 1; /* q inside a padded packed buffer */
	float *qkv = fill_u(B * S * xs), *c = fill_u(S * TW), *s = fill_u(S * TW);
	float *y = malloc((size_t)(B * S * W) * sizeof *y);
	double *ref = dalloc(B * S * W);

	ref_rope_split(qkv + W, xs, c, s, ref, B, S, heads, D);
	k_rope_half(qkv + W, xs, c, s, y, W, B, S, heads, D, D, true);
	double e = err_norm(y, ref, B * S * W);

	UNIT_CHECK(e <= TOL_ELEM, "rope split (3 heads x 10, per-head tables) strided x -> "
		   "contiguous y: normwise %.2e <= %.0e", e, TOL_ELEM);
	/* control: every head reading head 0's columns (one shared table, as
	 * "half" would) is off */
	float *c0 = malloc((size_t)(S * TW) * sizeof *c0), *s0 = malloc((size_t)(S * TW) * sizeof *s0);
	for (int64_t p = 0; p < S; p++)
		for (int64_t j = 0; j < TW; j++) {
			c0[p * TW + j] = c[p * TW + j % (D / 2)];
			s0[p * TW + j] = s[p * TW + j % (D / 2)];
		}
	k_rope_half(qkv + W, xs, c0, s0, y, W, B, S, heads, D, D, true);
	double ec = err_norm(y, ref, B * S * W);
	UNIT_CHECK(ec > 100 * TOL_ELEM, "rope split control: head 0's tables for every head are "
		   "off (normwise %.2e > %.0e)", ec, 100 * TOL_ELEM);
	e = rope_half_in_place(qkv, xs, c, s, y, ref, B, S, heads, D, D, true);
	UNIT_CHECK(e <= TOL_ELEM, "rope split in place: normwise %.2e <= %.0e", e, TOL_ELEM);
	free(qkv);
	free(c);
	free(s);
	free(c0);
	free(s0);
	free(y);
	free(ref);
}

/* index_select's gather and index_copy's scatter (k_index_rows) against a
 * float64 reference of torch's semantics, on float32 and on 2-byte
 * elements; invalid indices (out of range, fractional, NaN) give zero rows
 * (gather) or leave the row (scatter). */
static void test_index_rows(void)
{
	const int64_t outer = 3, rows = 7, inner = 5, n = 6;
	const float idx[6] = { 4, 0, 6, 2.5f, 9, 1 }; /* 2.5 and 9 invalid */
	float *src = fill_u(outer * rows * inner), *g = malloc((size_t)(outer * n * inner) * 4);
	double *ref = dalloc(outer * n * inner);

	for (int64_t o = 0; o < outer; o++)
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < inner; i++) {
				bool ok = idx[j] == (float)(int64_t)idx[j] && idx[j] >= 0 &&
					  idx[j] < rows;
				ref[(o * n + j) * inner + i] =
					ok ? src[(o * rows + (int64_t)idx[j]) * inner + i] : 0.0;
			}
	k_index_rows(g, n, src, rows, idx, n, outer, inner, sizeof(float), false);
	double e = err_norm(g, ref, outer * n * inner);

	UNIT_CHECK(e == 0, "index_rows gather (2 of 6 indices invalid): exact, normwise %.2e", e);
	/* scatter the gathered rows back into a copy of src: the valid ones
	 * land where they came from, so the copy equals src */
	float *dst = malloc((size_t)(outer * rows * inner) * 4);

	memcpy(dst, src, (size_t)(outer * rows * inner) * 4);
	for (int64_t k = 0; k < outer * n * inner; k++)
		g[k] += 1.0f; /* the scattered rows now differ from src's by 1 */
	k_index_rows(dst, rows, g, n, idx, n, outer, inner, sizeof(float), true);
	double es = 0;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t r = 0; r < rows; r++) {
			bool hit = r == 4 || r == 0 || r == 6 || r == 1;
			for (int64_t i = 0; i < inner; i++) {
				double want = src[(o * rows + r) * inner + i] + (hit ? 1.0 : 0.0);
				double d = fabs(dst[(o * rows + r) * inner + i] - want);
				es = d > es ? d : es;
			}
		}
	UNIT_CHECK(es <= 1e-6, "index_rows scatter: written rows +1, others untouched (max "
		   "diff %.2e)", es);
	/* control: the gather with the index off by one row differs */
	float off[6];

	for (int j = 0; j < 6; j++)
		off[j] = idx[j] == 6 ? 5 : idx[j];
	k_index_rows(g, n, src, rows, off, n, outer, inner, sizeof(float), false);
	double ec = err_norm(g, ref, outer * n * inner);

	UNIT_CHECK(ec > 1e-2, "index_rows control: one index off by a row shows (normwise %.2e)",
		   ec);
	/* 2-byte elements (bf16 / f16 storage) move as bytes */
	uint16_t h[4 * 3], hg[2 * 3];
	const float hi[2] = { 3, 1 };

	for (int k = 0; k < 12; k++)
		h[k] = (uint16_t)(1000 + k);
	k_index_rows(hg, 2, h, 4, hi, 2, 1, 3, 2, false);
	UNIT_CHECK(hg[0] == 1009 && hg[2] == 1011 && hg[3] == 1003 && hg[5] == 1005,
		   "index_rows on 2-byte elements: rows 3 and 1, bit for bit");
	free(src);
	free(g);
	free(dst);
	free(ref);
}

/* ---- attention ------------------------------------------------------- */

struct attn_case {
	int64_t B, Sq, Skv, H, D, Dv;
	const float *q, *k, *v;
	int64_t qs, ks, vs;
	const float *mask; /* [B, Skv] key-padding mask (0: masked) or NULL */
};

/* Softmax over all keys at once, in float64: out [B, Sq, H*Dv], lse [B, H, Sq].
 * Masked keys are left out; a row without keys is zeros with lse -inf. */
static void ref_attention(const struct attn_case *c, double *out, double *lse)
{
	double *p = dalloc(c->Skv);

	for (int64_t b = 0; b < c->B; b++)
		for (int64_t h = 0; h < c->H; h++)
			for (int64_t i = 0; i < c->Sq; i++) {
				const float *qi = c->q + (b * c->Sq + i) * c->qs + h * c->D;
				double mx = -INFINITY, sum = 0;

				for (int64_t j = 0; j < c->Skv; j++) {
					const float *kj = c->k + (b * c->Skv + j) * c->ks + h * c->D;
					double d = 0;

					for (int64_t t = 0; t < c->D; t++)
						d += (double)qi[t] * kj[t];
					p[j] = d / sqrt((double)c->D);
					if (c->mask && c->mask[b * c->Skv + j] == 0.0f)
						p[j] = -INFINITY;
					mx = fmax(mx, p[j]);
				}
				double *oi = out + ((b * c->Sq + i) * c->H + h) * c->Dv;

				if (mx == -INFINITY) {
					lse[(b * c->H + h) * c->Sq + i] = -INFINITY;
					for (int64_t t = 0; t < c->Dv; t++)
						oi[t] = 0;
					continue;
				}
				for (int64_t j = 0; j < c->Skv; j++)
					sum += exp(p[j] - mx);
				lse[(b * c->H + h) * c->Sq + i] = mx + log(sum);
				for (int64_t t = 0; t < c->Dv; t++) {
					double acc = 0;

					for (int64_t j = 0; j < c->Skv; j++)
						acc += exp(p[j] - mx) *
						       c->v[(b * c->Skv + j) * c->vs + h * c->Dv + t];
					oi[t] = acc / sum;
				}
			}
	free(p);
}

/* k_attention with a workspace of exactly the advertised size, so ASan
 * catches any tile that reaches past it. */
static void run_attention(const struct attn_case *c, float *out, float *lse)
{
	void *ws = malloc(k_attention_workspace(c->Sq, c->Skv, c->D, c->Dv));

	k_attention(c->q, c->qs, c->k, c->ks, c->v, c->vs, c->mask, out, lse, c->B, c->Sq, c->Skv,
		    c->H, c->D, c->Dv, ws);
	free(ws);
}

static void check_attention(const char *what, const struct attn_case *c)
{
	int64_t no = c->B * c->Sq * c->H * c->Dv, nl = c->B * c->H * c->Sq;
	float *out = malloc((size_t)no * sizeof *out), *lse = malloc((size_t)nl * sizeof *lse);
	float *out2 = malloc((size_t)no * sizeof *out2);
	double *rout = dalloc(no), *rlse = dalloc(nl);

	ref_attention(c, rout, rlse);
	run_attention(c, out, lse);
	double e = err_norm(out, rout, no), el = err_abs(lse, rlse, nl);

	UNIT_CHECK(e <= TOL_GEMM, "attention %s: out normwise %.2e <= %.0e", what, e, TOL_GEMM);
	UNIT_CHECK(el <= TOL_LSE, "attention %s: lse absolute %.2e <= %.0e", what, el, TOL_LSE);
	run_attention(c, out2, NULL);
	UNIT_CHECK(!memcmp(out, out2, (size_t)no * sizeof *out),
		   "attention %s: lse = NULL gives the same out", what);

	/* On pools of 2 and 3 threads (tasks land on other workers' shares
	 * of the workspace): the same bits as on the calling thread. */
	for (int n = 2; n <= 3; n++) {
		struct k_pool *pool = k_pool_create(n);
		int nt = k_pool_threads(pool);
		void *ws = aligned_alloc(64, (size_t)nt * k_attention_workspace(c->Sq, c->Skv, c->D,
										  c->Dv));
		float *lse2 = malloc((size_t)nl * sizeof *lse2);

		k_attention_pool(pool, c->q, c->qs, c->k, c->ks, c->v, c->vs, c->mask, out2, lse2, c->B,
				 c->Sq, c->Skv, c->H, c->D, c->Dv, ws);
		UNIT_CHECK(nt == n && !memcmp(out, out2, (size_t)no * sizeof *out) &&
				   !memcmp(lse, lse2, (size_t)nl * sizeof *lse),
			   "attention %s: a pool of %d threads gives the same out and lse", what, n);
		free(lse2);
		free(ws);
		k_pool_free(pool);
	}
	free(out);
	free(out2);
	free(lse);
	free(rout);
	free(rlse);
}

/* Negative control: the last key row (a tail of the last tile) changed
 * after the reference was computed must show as an error above the
 * tolerance, or the checks above could pass with keys dropped. */
static void test_attention_control(void)
{
	struct attn_case c = { .B = 1, .Sq = 5, .Skv = K_ATTN_TILE_KV + 1, .H = 1, .D = 64,
			       .Dv = 64 };
	int64_t no = c.Sq * c.Dv, nl = c.Sq;

	c.qs = c.ks = c.vs = 64;
	float *q = fill_u(c.Sq * 64), *k = fill_u(c.Skv * 64), *v = fill_u(c.Skv * 64);
	float *out = malloc((size_t)no * sizeof *out), *lse = malloc((size_t)nl * sizeof *lse);
	double *rout = dalloc(no), *rlse = dalloc(nl);

	c.q = q;
	c.k = k;
	c.v = v;
	ref_attention(&c, rout, rlse);
	for (int64_t d = 0; d < 64; d++) {
		k[(c.Skv - 1) * 64 + d] = q[d] * 8.0f;
		v[(c.Skv - 1) * 64 + d] = 4.0f;
	}
	run_attention(&c, out, lse);
	double e = err_norm(out, rout, no);

	UNIT_CHECK(e > 100 * TOL_GEMM,
		   "attention control: the last key changed shows (normwise %.2e > %.0e)", e,
		   100 * TOL_GEMM);
	free(q);
	free(k);
	free(v);
	free(out);
	free(lse);
	free(rout);
	free(rlse);
}

/* k_vexp against glibc's expf at every 97th float of [-105, 89] (about 11M
 * points, every binade's mantissas), in ulps of expf's result where that
 * is normal, absolutely in the subnormal range, plus the special values.
 * Measured: 1 ulp at most (AVX-512, AVX2 and the baseline alike); the
 * bound checked is 2. Negative control: the same measure sees a result
 * 3 ulps off. */
static double ulp_err(float got, float want)
{
	return fabs((double)got - want) / (double)(nextafterf(fabsf(want), INFINITY) - fabsf(want));
}

static void test_vexp(void)
{
	enum { CHUNK = 4096 };
	float x[CHUNK], y[CHUNK];
	double worst = 0, worst_x = 0, sub = 0;
	int n = 0;
	int32_t lo, hi;
	float flo = -105.0f, fhi = 89.0f;

	memcpy(&lo, &flo, 4);
	memcpy(&hi, &fhi, 4);
	/* Walk the negative floats from -105 up to -0, then 0 up to 89, by bit
	 * pattern: (sign-magnitude) negatives count down. */
	for (int64_t b = -(int64_t)(lo & 0x7fffffff); b <= hi; b += 97) {
		int32_t bits = b < 0 ? (int32_t)(0x80000000u | (uint32_t)-b) : (int32_t)b;

		memcpy(&x[n], &bits, 4);
		if (++n < CHUNK && b + 97 <= hi)
			continue;
		k_vexp(x, y, n);
		for (int i = 0; i < n; i++) {
			float want = expf(x[i]);

			if (want >= 1.17549435e-38f && !isinf(want)) {
				double u = ulp_err(y[i], want);

				if (u > worst) {
					worst = u;
					worst_x = x[i];
				}
			} else if (!isinf(want)) {
				sub = fmax(sub, fabs((double)y[i] - want));
			}
		}
		n = 0;
	}
	UNIT_CHECK(worst <= 2.0, "k_vexp: max error %.2f ulp (at x = %.7g) <= 2 where expf is normal",
		   worst, worst_x);
	UNIT_CHECK(sub <= 2.9e-45, "k_vexp: subnormal results within 2 subnormal steps (%.2g)", sub);

	float sx[6] = { -INFINITY, INFINITY, NAN, 88.8f, 0.0f, -200.0f }, sy[6];

	k_vexp(sx, sy, 6);
	UNIT_CHECK(sy[0] == 0.0f && isinf(sy[1]) && isnan(sy[2]) && isinf(sy[3]) && sy[4] == 1.0f &&
			   sy[5] == 0.0f,
		   "k_vexp: exp(-inf) = 0, exp(inf) = inf, NaN, overflow to inf, exp(0) = 1, "
		   "underflow to 0");
	float w = expf(1.5f), off = w;

	for (int i = 0; i < 3; i++)
		off = nextafterf(off, INFINITY);
	UNIT_CHECK(ulp_err(off, w) > 2.0, "k_vexp control: 3 ulps off measures %.1f ulp > 2",
		   ulp_err(off, w));
}

static void test_attention(void)
{
	/* Separate contiguous q, k, v. */
	struct attn_case c = { .B = 2, .Sq = 37, .Skv = 53, .H = 3, .D = 16, .Dv = 16 };

	c.qs = c.ks = c.H * c.D;
	c.vs = c.H * c.Dv;
	float *q = fill_u(c.B * c.Sq * c.qs), *k = fill_u(c.B * c.Skv * c.ks);
	float *v = fill_u(c.B * c.Skv * c.vs);

	c.q = q;
	c.k = k;
	c.v = v;
	check_attention("B=2 Sq=37 Skv=53 H=3 D=Dv=16", &c);
	free(q);
	free(k);
	free(v);

	/* Self-attention out of one padded packed qkv buffer, Dv != D. */
	struct attn_case p = { .B = 2, .Sq = 29, .Skv = 29, .H = 3, .D = 16, .Dv = 12 };
	int64_t row = 2 * p.H * p.D + p.H * p.Dv + 5;
	float *qkv = fill_u(p.B * p.Sq * row);

	p.q = qkv;
	p.k = qkv + p.H * p.D;
	p.v = qkv + 2 * p.H * p.D;
	p.qs = p.ks = p.vs = row;
	check_attention("packed qkv, padded row stride, D=16 Dv=12", &p);
	free(qkv);

	/* Several query blocks and more than two key tiles, each ending
	 * part-way. q is scaled up so the softmax is peaky and the running
	 * max moves between tiles, which exercises the rescaling. */
	struct attn_case t = { .B = 1, .Sq = K_ATTN_TILE_Q + 21,
			       .Skv = 2 * K_ATTN_TILE_KV + 77, .H = 2, .D = 24, .Dv = 20 };

	t.qs = t.ks = t.H * t.D;
	t.vs = t.H * t.Dv;
	q = fill_u(t.B * t.Sq * t.qs);
	for (int64_t i = 0; i < t.B * t.Sq * t.qs; i++)
		q[i] *= 4.0f;
	k = fill_u(t.B * t.Skv * t.ks);
	v = fill_u(t.B * t.Skv * t.vs);
	t.q = q;
	t.k = k;
	t.v = v;
	check_attention("Sq = TILE_Q + 21, Skv = 2 TILE_KV + 77, D=24 Dv=20", &t);
	free(q);
	free(k);
	free(v);

	/* Head dims 64 and 128 (the models') and 40 (not a multiple of any
	 * vector width, so V goes through the padded copy); lengths that end
	 * one row past a query block, and key tiles ending in a partial
	 * register tile (TILE_KV + 7: 7 % 6 = 1 key in the tail). */
	static const int64_t hd[][4] = {
		/* D, Dv, Sq, Skv */
		{ 64, 64, K_ATTN_TILE_Q + 1, K_ATTN_TILE_KV + 7 },
		{ 128, 128, K_ATTN_TILE_Q + 5, K_ATTN_TILE_KV + 11 },
		{ 40, 40, 2 * K_ATTN_TILE_Q + 1, 2 * K_ATTN_TILE_KV + 5 },
		{ 64, 64, 1, 1 },
	};

	for (size_t i = 0; i < sizeof hd / sizeof hd[0]; i++) {
		struct attn_case e = { .B = 1, .Sq = hd[i][2], .Skv = hd[i][3], .H = 2,
				       .D = hd[i][0], .Dv = hd[i][1] };
		char what[96];

		e.qs = e.ks = e.H * e.D;
		e.vs = e.H * e.Dv;
		q = fill_u(e.B * e.Sq * e.qs);
		for (int64_t j = 0; j < e.B * e.Sq * e.qs; j++)
			q[j] *= 3.0f;
		k = fill_u(e.B * e.Skv * e.ks);
		v = fill_u(e.B * e.Skv * e.vs);
		e.q = q;
		e.k = k;
		e.v = v;
		snprintf(what, sizeof what, "D=%lld Dv=%lld Sq=%lld Skv=%lld", (long long)e.D,
			 (long long)e.Dv, (long long)e.Sq, (long long)e.Skv);
		check_attention(what, &e);
		free(q);
		free(k);
		free(v);
	}

	/* one head's keys and values packed (4 MiB here) and tiles of a few
	 * hundred KiB: nothing that grows with Sq */
	size_t ws = k_attention_workspace(4096, 4096, 128, 128);
	size_t kv = (size_t)4096 * (128 + 128) * sizeof(float);

	UNIT_CHECK(ws >= kv && ws <= kv + (512u << 10) && ws == k_attention_workspace(1, 4096, 128, 128),
		   "attention workspace for 4096 x 4096, D = 128: %zu bytes, the packed head's %zu and "
		   "under 512 KiB of tiles, whatever Sq", ws, kv);
}

/* A key-padding mask [B, Skv] of B = 4 batches: 0 random with its whole
 * first key tile masked (a tile the kernel skips, then the running max
 * starts at the second), 1 all masked (empty rows), 2 random, 3 all kept. */
static float *test_mask(int64_t B, int64_t Skv)
{
	float *m = fill_u(B * Skv);

	for (int64_t b = 0; b < B; b++)
		for (int64_t j = 0; j < Skv; j++) {
			float *x = &m[b * Skv + j];

			*x = b == 1 || (b == 0 && j < K_ATTN_TILE_KV) ? 0.0f
			     : b == 3				   ? 1.0f
								   : (*x < 0.2f ? 0.0f : 2.5f);
		}
	return m;
}

/* Masked attention against the float64 reference (masked scores left
 * out): odd sizes over three key tiles, and empty rows that must be zeros
 * with an lse of -inf, never NaN. Negative control: the same kernel
 * without the mask misses the reference by far. */
static void test_attention_masked(void)
{
	struct attn_case c = { .B = 4, .Sq = 37, .Skv = 2 * K_ATTN_TILE_KV + 23, .H = 2, .D = 24,
			       .Dv = 20 };
	int64_t no = c.B * c.Sq * c.H * c.Dv, nl = c.B * c.H * c.Sq;

	c.qs = c.ks = c.H * c.D;
	c.vs = c.H * c.Dv;
	float *q = fill_u(c.B * c.Sq * c.qs), *k = fill_u(c.B * c.Skv * c.ks);
	float *v = fill_u(c.B * c.Skv * c.vs), *mask = test_mask(c.B, c.Skv);

	for (int64_t i = 0; i < c.B * c.Sq * c.qs; i++)
		q[i] *= 4.0f;
	c.q = q;
	c.k = k;
	c.v = v;
	c.mask = mask;
	check_attention("masked, B=4 Sq=37 Skv=2 TILE_KV+23 D=24 Dv=20", &c);

	float *out = malloc((size_t)no * sizeof *out), *lse = malloc((size_t)nl * sizeof *lse);
	double *rout = dalloc(no), *rlse = dalloc(nl);
	bool empty = true, finite = true;

	run_attention(&c, out, lse);
	for (int64_t i = 0; i < no; i++) {
		finite &= isfinite(out[i]);
		empty &= i / (c.Sq * c.H * c.Dv) != 1 || out[i] == 0.0f;
	}
	for (int64_t i = 0; i < nl; i++)
		empty &= i / (c.H * c.Sq) != 1 || lse[i] == -INFINITY;
	UNIT_CHECK(finite && empty, "masked attention: no NaN or inf out; a batch with every key "
		   "masked gives zeros and lse -inf");

	ref_attention(&c, rout, rlse);
	c.mask = NULL;
	run_attention(&c, out, lse);
	double e = err_norm(out, rout, no);

	UNIT_CHECK(e > 100 * TOL_GEMM, "masked attention control: ignoring the mask shows "
		   "(normwise %.2e > %.0e)", e, 100 * TOL_GEMM);
	free(out);
	free(lse);
	free(rout);
	free(rlse);
	free(q);
	free(k);
	free(v);
	free(mask);
}

/* Ring attention over uneven KV blocks: partial results merged in two orders
 * must match attention over all keys, out and lse; with a mask, each block
 * takes its slice of it, and block 1 (7 keys) is wholly masked for batch 0
 * and batch 1 everywhere (merges of empty blocks and of empty rows). */
static void lse_merge_blocks(bool masked)
{
	const int64_t B = 2, Sq = 37, Skv = 53, H = 3, D = 16, Dv = 16;
	const int64_t len[3] = { 20, 7, 26 }, order[2][3] = { { 0, 1, 2 }, { 1, 2, 0 } };
	const int64_t no = B * Sq * H * Dv, nl = B * H * Sq;
	struct attn_case c = { .B = B, .Sq = Sq, .Skv = Skv, .H = H, .D = D, .Dv = Dv,
			       .qs = H * D, .ks = H * D, .vs = H * Dv };
	float *q = fill_u(B * Sq * H * D), *k = fill_u(B * Skv * H * D);
	float *v = fill_u(B * Skv * H * Dv);
	float *bout[3], *blse[3], *acc[2], *alse[2];
	double *rout = dalloc(no), *rlse = dalloc(nl);
	float *mask = masked ? fill_u(B * Skv) : NULL;
	const char *what = masked ? "masked " : "";

	for (int64_t i = 0; masked && i < B * Skv; i++)
		mask[i] = i >= Skv || (i >= 20 && i < 27) || mask[i] < 0.3f ? 0.0f : 1.0f;
	c.q = q;
	c.k = k;
	c.v = v;
	c.mask = mask;
	ref_attention(&c, rout, rlse);

	/* Each block is its own [B, len, ...] buffer, as a ring step receives
	 * it; the kernel's batch stride is Skv rows, so copy per batch. */
	for (int64_t blk = 0, off = 0; blk < 3; off += len[blk], blk++) {
		struct attn_case cb = c;
		float *kb = malloc((size_t)(B * len[blk] * H * D) * sizeof *kb);
		float *vb = malloc((size_t)(B * len[blk] * H * Dv) * sizeof *vb);
		float *mb = malloc((size_t)(B * len[blk]) * sizeof *mb);

		for (int64_t b = 0; b < B; b++) {
			if (mask)
				memcpy(mb + b * len[blk], mask + b * Skv + off,
				       (size_t)len[blk] * sizeof *mb);
			k_copy2d(kb + b * len[blk] * H * D, H * D, k + (b * Skv + off) * H * D,
				 H * D, len[blk], H * D);
			k_copy2d(vb + b * len[blk] * H * Dv, H * Dv, v + (b * Skv + off) * H * Dv,
				 H * Dv, len[blk], H * Dv);
		}
		cb.Skv = len[blk];
		cb.k = kb;
		cb.v = vb;
		cb.mask = mask ? mb : NULL;
		bout[blk] = malloc((size_t)no * sizeof(float));
		blse[blk] = malloc((size_t)nl * sizeof(float));
		run_attention(&cb, bout[blk], blse[blk]);
		free(kb);
		free(vb);
		free(mb);
	}
	for (int o = 0; o < 2; o++) {
		/* An empty accumulator's out is garbage (NaN here) and must be
		 * ignored, not scaled by 0. */
		acc[o] = fill_value(no, NAN);
		alse[o] = fill_value(nl, -INFINITY);
		/* masked: as exec_ring does, the first block is the accumulator
		 * (an empty row's zeros stay zeros through empty merges) */
		int first = 0;
		if (masked) {
			memcpy(acc[o], bout[order[o][0]], (size_t)no * sizeof(float));
			memcpy(alse[o], blse[order[o][0]], (size_t)nl * sizeof(float));
			first = 1;
		}
		for (int i = first; i < 3; i++)
			k_lse_merge(acc[o], alse[o], bout[order[o][i]], blse[order[o][i]],
				    B, Sq, H, Dv);
		double e = err_norm(acc[o], rout, no), el = err_abs(alse[o], rlse, nl);

		UNIT_CHECK(e <= TOL_GEMM, "%slse_merge blocks 20+7+26 order %lld%lld%lld: out normwise %.2e <= %.0e",
			   what, (long long)order[o][0], (long long)order[o][1], (long long)order[o][2],
			   e, TOL_GEMM);
		UNIT_CHECK(el <= TOL_LSE, "%slse_merge blocks 20+7+26 order %lld%lld%lld: lse absolute %.2e <= %.0e",
			   what, (long long)order[o][0], (long long)order[o][1], (long long)order[o][2],
			   el, TOL_LSE);
	}
	for (int i = 0; i < 3; i++) {
		free(bout[i]);
		free(blse[i]);
	}
	for (int o = 0; o < 2; o++) {
		free(acc[o]);
		free(alse[o]);
	}
	free(q);
	free(k);
	free(v);
	free(mask);
	free(rout);
	free(rlse);
}

static void test_lse_merge_blocks(void)
{
	lse_merge_blocks(false);
	lse_merge_blocks(true);
}

/* Log-denominators 200 apart (exp(200) overflows float) and an empty block. */
static void test_lse_merge_extremes(void)
{
	const int64_t B = 1, Sq = 3, H = 2, Dv = 5, no = B * Sq * H * Dv, nl = B * H * Sq;
	float *out = fill_u(no), *blk = fill_u(no), *keep = malloc((size_t)no * sizeof *keep);
	float *lse = fill_value(nl, 0.0f), *lblk = fill_value(nl, 200.0f);
	double *rout = dalloc(no), *rlse = dalloc(nl);

	for (int64_t i = 0; i < no; i++)
		rout[i] = out[i] * exp(-200.0) + blk[i];
	for (int64_t i = 0; i < nl; i++)
		rlse[i] = 200.0 + log1p(exp(-200.0));
	k_lse_merge(out, lse, blk, lblk, B, Sq, H, Dv);
	double e = err_norm(out, rout, no), el = err_abs(lse, rlse, nl);

	UNIT_CHECK(e <= TOL_ELEM && el <= TOL_LSE,
		   "lse_merge lse 0 with 200: out normwise %.2e <= %.0e, lse absolute %.2e <= %.0e",
		   e, TOL_ELEM, el, TOL_LSE);

	float *nan_blk = fill_value(no, NAN), *empty = fill_value(nl, -INFINITY);
	float *keep_lse = malloc((size_t)nl * sizeof *keep_lse);

	memcpy(keep, out, (size_t)no * sizeof *out);
	memcpy(keep_lse, lse, (size_t)nl * sizeof *lse);
	k_lse_merge(out, lse, nan_blk, empty, B, Sq, H, Dv);
	UNIT_CHECK(!memcmp(out, keep, (size_t)no * sizeof *out) &&
		   !memcmp(lse, keep_lse, (size_t)nl * sizeof *lse),
		   "lse_merge with an empty block (lse -inf, out NaN) leaves the accumulator as is");
	free(keep_lse);
	free(out);
	free(blk);
	free(keep);
	free(lse);
	free(lblk);
	free(nan_blk);
	free(empty);
	free(rout);
	free(rlse);
}

/* ---- embeddings ---------------------------------------------------------- */

/* A float32 angle a carries a relative error of a few 2^-24 from its
 * float32 steps: the bound for sin/cos of it against float64. */
#define EPS32 (1.0 / 16777216.0)

static double ref_timestep(double t, int64_t dim, int64_t j, bool flip, double shift,
			   double scale, double max_period, double input_scale, double *angle)
{
	int64_t half = dim / 2;
	if (j == dim - 1 && dim % 2)
		return *angle = 0;
	bool second = j >= half; /* the second half: cos, or with flip sin */
	int64_t k = second ? j - half : j;
	*angle = scale * t * input_scale * exp(-log(max_period) * (double)k / ((double)half - shift));
	return second != flip ? cos(*angle) : sin(*angle);
}

/* max over elements of |y - ref| / (1e-6 + 8 EPS32 |angle|): at most 1 when
 * every value is its float64 reference up to the float32 angle's rounding */
static double timestep_err(const float *t, const float *y, int64_t n, int64_t dim, bool flip,
			   double shift, double scale, double max_period, double input_scale)
{
	double worst = 0;

	for (int64_t i = 0; i < n; i++)
		for (int64_t j = 0; j < dim; j++) {
			double a, r = ref_timestep(t[i], dim, j, flip, shift, scale, max_period,
						   input_scale, &a);
			double e = fabs(y[i * dim + j] - r) / (1e-6 + 8 * EPS32 * fabs(a));

			worst = isnan(e) ? INFINITY : fmax(worst, e);
		}
	return worst;
}

static void test_timestep_embedding(void)
{
	const int64_t n = 5;
	float *t = fill_u(n);
	static const struct {
		int64_t dim;
		bool flip;
		double shift, scale, max_period, input_scale;
	} c[] = {
		{ 256, true, 0, 1, 10000, 1000 }, /* Flux: t * 1000, Timesteps(256, True, 0) */
		{ 256, true, 0, 1000, 10000, 1 }, /* QwenImage: scale = 1000 */
		{ 33, false, 1, 1, 10000, 1 },    /* the defaults, odd: a zero column */
		{ 10, true, 0.5, 2.5, 77, 3 },
	};
	for (int64_t i = 0; i < n; i++)
		t[i] = fabsf(t[i]);
	for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
		float *y = fill_value(n * c[k].dim, NAN);

		k_timestep_embedding(t, y, n, c[k].dim, c[k].flip, c[k].shift, c[k].scale,
				     c[k].max_period, c[k].input_scale);
		double e = timestep_err(t, y, n, c[k].dim, c[k].flip, c[k].shift, c[k].scale,
					c[k].max_period, c[k].input_scale);
		UNIT_CHECK(e <= 1, "timestep_embedding dim %lld flip %d shift %g scale %g period %g "
			   "input_scale %g: error %.2f of (1e-6 + 8 eps32 |angle|) <= 1",
			   (long long)c[k].dim, c[k].flip, c[k].shift, c[k].scale, c[k].max_period,
			   c[k].input_scale, e);
		if (k == 0) {
			/* negative controls: the reference with shift 1, or sin and
			 * cos swapped, is far off */
			double e1 = timestep_err(t, y, n, c[k].dim, c[k].flip, 1, c[k].scale,
						 c[k].max_period, c[k].input_scale);
			double e2 = timestep_err(t, y, n, c[k].dim, !c[k].flip, c[k].shift,
						 c[k].scale, c[k].max_period, c[k].input_scale);
			UNIT_CHECK(e1 > 100 && e2 > 100, "timestep_embedding control: a wrong shift "
				   "measures %.0f, a wrong flip %.0f (> 100)", e1, e2);
		}
		free(y);
	}
	free(t);
}

static double rope_freqs_err(const float *ids, const float *y, int64_t rows, int64_t naxes,
			     const int64_t *dims, double theta, bool sine, bool f64)
{
	double worst = 0;
	int64_t width = 0;

	for (int64_t a = 0; a < naxes; a++)
		width += dims[a];
	for (int64_t r = 0; r < rows; r++)
		for (int64_t a = 0, off = 0; a < naxes; off += dims[a], a++)
			for (int64_t c = 0; c < dims[a]; c++) {
				/* column c rotates pair c / 2 at theta^(-2 (c/2) / d) */
				double fr = exp(-log(theta) * (double)(c / 2 * 2) / (double)dims[a]);
				double ang = ids[r * naxes + a] * fr;
				double ref = sine ? sin(ang) : cos(ang);
				/* float64: the float32 rounding of the result alone */
				double tol = f64 ? 1.0 * EPS32 : 1e-7 + 8 * EPS32 * fabs(ang);
				double e = fabs(y[r * width + off + c] - ref) / tol;

				worst = isnan(e) ? INFINITY : fmax(worst, e);
			}
	return worst;
}

static void test_rope_freqs(void)
{
	const int64_t rows = 37, naxes = 3, dims[3] = { 2, 10, 6 }, width = 18;
	float *ids = fill_u(rows * naxes), *y = fill_value(rows * width, NAN);

	for (int64_t i = 0; i < rows * naxes; i++) /* positions, fractional and negative */
		ids[i] *= 300;
	for (int f64 = 0; f64 < 2; f64++)
		for (int sine = 0; sine < 2; sine++) {
			k_rope_freqs(ids, y, rows, naxes, dims, 10000, sine, f64);
			double e = rope_freqs_err(ids, y, rows, naxes, dims, 10000, sine, f64);
			UNIT_CHECK(e <= 1, "rope_freqs axes [2, 10, 6] %s %s: error %.2f of the "
				   "float32 bound <= 1", sine ? "sin" : "cos", f64 ? "f64" : "f32", e);
		}
	k_rope_freqs(ids, y, rows, naxes, dims, 256, false, true);
	double e = rope_freqs_err(ids, y, rows, naxes, dims, 256, false, true);
	UNIT_CHECK(e <= 1, "rope_freqs theta 256: error %.2f <= 1", e);
	double bad = rope_freqs_err(ids, y, rows, naxes, dims, 10000, false, true);
	UNIT_CHECK(bad > 100, "rope_freqs control: the theta 10000 reference measures %.0f > 100",
		   bad);
	free(ids);
	free(y);
}

/* The worst error of an LTX table against its float64 formula, in units of
 * the float32 steps' bound; axis_major: a wrong reference that orders the
 * columns axis by axis (as rope_freqs concatenates them), for the control. */
static double ltx_rope_err(const float *ids, const float *y, int64_t rows, int64_t dim,
			   const double *sc, int64_t pt, int64_t p, bool sine, bool axis_major)
{
	const double base[3] = { 20, 2048, 2048 };
	int64_t n = dim / 6, pad = dim % 6;
	double worst = 0;

	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < dim; c++) {
			double ref, tol = EPS32;
			if (c < pad) {
				ref = sine ? 0 : 1;
				tol = 1e-30; /* exact */
			} else {
				int64_t q = (c - pad) / 2, k = axis_major ? q % n : q / 3;
				int64_t a = axis_major ? q / n : q % 3;
				double v = n > 1 ? (double)k / (double)(n - 1) : 0;
				double fr = pow(10000.0, v) * M_PI / 2;
				double g = ids[r * 3 + a] * sc[a] * (double)(a ? p : pt) / base[a];
				double ang = fr * (2 * g - 1);
				ref = sine ? sin(ang) : cos(ang);
				/* each float32 step rounds once; the exponent's
				 * rounding is scaled by ln(theta) ~ 9.2 in the angle
				 * (measured: 5 ulps of it at most) */
				tol = 1e-7 + 8 * EPS32 * fabs(ang);
			}
			double e = fabs(y[r * dim + c] - ref) / tol;

			worst = isnan(e) ? INFINITY : fmax(worst, e);
		}
	return worst;
}

static void test_ltx_rope_freqs(void)
{
	const int64_t F = 3, H = 4, W = 5, rows = F * H * W;
	const double sc[3] = { 8.0 / 25, 32, 32 };
	/* dims: padding 2 (LTX-Video 2B's 2048 % 6), none, 4 with 16
	 * frequencies (torch's fused linspace rounding), all padding */
	const int64_t dims[] = { 38, 36, 100, 4 };
	float *ids = fill_value(rows * 3, 0);

	k_grid_ids(ids, F, H, W, false);
	for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
		float *y = fill_value(rows * dims[i], NAN);
		for (int sine = 0; sine < 2; sine++) {
			k_ltx_rope_freqs(ids, y, rows, dims[i], sc, 2, 1, 10000, sine);
			double e = ltx_rope_err(ids, y, rows, dims[i], sc, 2, 1, sine, false);
			UNIT_CHECK(e <= 1, "ltx_rope_freqs dim %lld %s: error %.2f of the float32 "
				   "bound <= 1", (long long)dims[i], sine ? "sin" : "cos", e);
		}
		if (dims[i] == 38) {
			double bad = ltx_rope_err(ids, y, rows, dims[i], sc, 2, 1, true, true);
			UNIT_CHECK(bad > 100, "ltx_rope_freqs control: columns axis by axis "
				   "measure %.0f > 100", bad);
			bad = ltx_rope_err(ids, y, rows, dims[i], sc, 1, 1, true, false);
			UNIT_CHECK(bad > 100, "ltx_rope_freqs control: the frames' patch 1 "
				   "instead of 2 measures %.0f > 100", bad);
		}
		free(y);
	}
	free(ids);
}

/* LTX-2's table (k_ltx2_rope_freqs) against diffusers'
 * LTX2AudioVideoRotaryPosEmbed in float64, from its own definitions: the
 * patch bounds of prepare_video_coords / prepare_audio_coords, their
 * midpoint over the base, frequencies theta ** (k / (n - 1)) * pi / 2,
 * freqs.transpose(-1, -2).flatten (column pair P * k + a), repeat_interleave
 * and the padding at the front. The worst error in units of the float32
 * steps' bound; the parameters of the reference are its own (a control
 * passes a perturbed copy). */
struct ltx2_ref {
	int64_t dim, axes, frames, height, width, pt, ps, st, ss, co, hop, base_t, base_s;
	double fps, sr, theta;
	bool audio, f32;
};

static double ltx2_bound(const struct ltx2_ref *q, int a, int64_t g, bool end)
{
	if (a == 0) {
		double x = (double)(g + end) * (double)q->pt * (double)q->st + (double)q->co -
			   (double)q->st;
		x = x < 0 ? 0 : x;
		return q->audio ? x * (double)q->hop / q->sr : x / q->fps;
	}
	return (double)(g + end) * (double)q->ps * (double)q->ss;
}

static double ltx2_rope_err(const struct ltx2_ref *q, const float *y, int64_t lo, int64_t rows,
			    bool sine)
{
	int64_t P = q->axes, n = q->dim / (2 * P), pad = q->dim % (2 * P);
	int64_t nh = q->height / q->ps, nw = q->width / q->ps;
	double worst = 0;

	for (int64_t r = 0; r < rows; r++) {
		int64_t row = lo + r;
		int64_t g[3] = { q->audio ? row : row / (nh * nw), row / nw % nh, row % nw };
		for (int64_t c = 0; c < q->dim; c++) {
			double ref, tol;
			if (c < pad) {
				ref = sine ? 0 : 1;
				tol = 1e-30; /* exact */
			} else {
				int64_t pair = (c - pad) / 2, k = pair / P;
				int a = (int)(pair % P);
				double mid = (ltx2_bound(q, a, g[a], false) +
					      ltx2_bound(q, a, g[a], true)) / 2;
				double pos = mid / (double)(a ? q->base_s : q->base_t);
				double fr = pow(q->theta, n > 1 ? (double)k / (double)(n - 1) : 0) *
					    M_PI / 2;
				double ang = fr * (2 * pos - 1);
				ref = sine ? sin(ang) : cos(ang);
				/* the float32 steps: a few roundings of the
				 * coordinate (relative, scaled by fr (2 pos + 1) in
				 * the angle), the frequency's (float32 linspace:
				 * scaled by ln(theta) ~ 9.2) and the angle's, and
				 * sin / cos rounded once */
				tol = 1e-7 + EPS32 * (4 * fr * (2 * pos + 1) +
						      (q->f32 ? 8 : 1) * fabs(ang));
			}
			double e = fabs(y[r * q->dim + c] - ref) / tol;
			worst = isnan(e) ? INFINITY : fmax(worst, e);
		}
	}
	return worst;
}

static void ltx2_run(const struct ltx2_ref *q, float *y, int64_t lo, int64_t rows, bool sine,
		     bool split)
{
	struct k_ltx2_rope p = { q->dim, q->axes, q->height, q->width, q->pt, q->ps, q->st, q->ss,
				 q->co, q->hop, q->base_t, q->base_s, q->audio ? q->sr : q->fps,
				 q->theta, q->audio, !q->f32, split };
	k_ltx2_rope_freqs(&p, y, lo, rows, sine);
}

static void test_ltx2_rope_freqs(void)
{
	/* video 3 axes over an odd grid, patch (3, 2) (5 frames in, 3 frame
	 * patches: the clamp at 0 on the first), dims with padding 4 (40 % 6),
	 * none (42), all padding (4: no frequency) and one frequency (8: n =
	 * 1, linspace's single point); the cross-attention's frame axis only
	 * (axes 1); audio with patch_t 2 over 9 frames (ceil: 5 rows),
	 * causal_offset 0 and 1, float32 frequencies; a row range not from 0 */
	static const struct ltx2_ref cases[] = {
		{ 40, 3, 9, 10, 14, 3, 2, 8, 32, 1, 160, 20, 2048, 24, 16000, 10000, false, false },
		{ 42, 3, 9, 10, 14, 3, 2, 8, 32, 1, 160, 20, 2048, 25, 16000, 10000, false, true },
		{ 4, 3, 3, 5, 7, 1, 1, 8, 32, 1, 160, 20, 2048, 24, 16000, 10000, false, false },
		{ 8, 3, 3, 5, 7, 1, 1, 8, 32, 1, 160, 20, 2048, 24, 16000, 10000, false, false },
		{ 38, 1, 6, 5, 7, 2, 1, 8, 32, 1, 160, 20, 2048, 24, 16000, 10000, false, false },
		{ 30, 1, 9, 1, 1, 2, 1, 4, 32, 1, 160, 20, 2048, 24, 16000, 10000, true, false },
		{ 26, 1, 13, 1, 1, 1, 1, 4, 32, 0, 137, 20, 2048, 24, 22050, 500, true, true },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct ltx2_ref *q = &cases[i];
		int64_t rows = q->audio ? (q->frames + q->pt - 1) / q->pt
					: q->frames / q->pt * (q->height / q->ps) * (q->width / q->ps);
		int64_t lo = i == 1 ? rows / 3 : 0, n = rows - lo;
		float *y = fill_value(n * q->dim, NAN);
		float *ys = fill_value(n * q->dim, NAN);
		for (int sine = 0; sine < 2; sine++) {
			ltx2_run(q, y, lo, n, sine, false);
			double e = ltx2_rope_err(q, y, lo, n, sine);
			UNIT_CHECK(e <= 1, "ltx2_rope_freqs case %zu (%s, dim %lld, axes %lld, rows "
				   "%lld from %lld) %s: error %.2f of the float32 bound <= 1", i,
				   q->audio ? "audio" : "video", (long long)q->dim,
				   (long long)q->axes, (long long)n, (long long)lo,
				   sine ? "sin" : "cos", e);
			/* rope_type "split": the even columns, bit for bit, dim / 2 a
			 * row and nothing past them (ys is NaN-poisoned, dim a row) */
			ltx2_run(q, ys, lo, n, sine, true);
			int64_t bad = 0;
			for (int64_t k = 0; k < n * q->dim; k++) {
				int64_t r = k / (q->dim / 2), col = k % (q->dim / 2);
				bad += k < n * q->dim / 2
					       ? memcmp(&ys[k], &y[r * q->dim + 2 * col], sizeof *y) != 0
					       : !isnan(ys[k]);
			}
			UNIT_CHECK(!bad, "ltx2_rope_freqs case %zu split %s: the interleaved "
				   "table's even columns, %lld entries differ or spill", i,
				   sine ? "sin" : "cos", (long long)bad);
		}
		free(ys);
		/* y holds the sines: each perturbed reference must fail */
		struct ltx2_ref b = *q;
		if (i == 0) {
			b.co = 0;
			UNIT_CHECK(ltx2_rope_err(&b, y, lo, n, true) > 100,
				   "ltx2_rope_freqs control: causal_offset 0 instead of 1 measures "
				   "%.0f > 100", ltx2_rope_err(&b, y, lo, n, true));
			b = *q;
			b.ss = 16;
			UNIT_CHECK(ltx2_rope_err(&b, y, lo, n, true) > 100,
				   "ltx2_rope_freqs control: spatial scale 16 instead of 32 measures "
				   "%.0f > 100", ltx2_rope_err(&b, y, lo, n, true));
			b = *q;
			b.fps = 25;
			UNIT_CHECK(ltx2_rope_err(&b, y, lo, n, true) > 100,
				   "ltx2_rope_freqs control: fps 25 instead of 24 measures %.0f > 100",
				   ltx2_rope_err(&b, y, lo, n, true));
		}
		if (i == 1) {
			b.axes = 1; /* the same width read as one axis: other columns */
			UNIT_CHECK(ltx2_rope_err(&b, y, lo, n, true) > 100,
				   "ltx2_rope_freqs control: one axis instead of three measures %.0f "
				   "> 100", ltx2_rope_err(&b, y, lo, n, true));
			b = *q;
			b.base_t = 21;
			UNIT_CHECK(ltx2_rope_err(&b, y, lo, n, true) > 100,
				   "ltx2_rope_freqs control: base_t 21 instead of 20 measures %.0f "
				   "> 100", ltx2_rope_err(&b, y, lo, n, true));
			UNIT_CHECK(ltx2_rope_err(q, y, 0, n, true) > 100,
				   "ltx2_rope_freqs control: rows from 0 instead of %lld measure %.0f "
				   "> 100", (long long)lo, ltx2_rope_err(q, y, 0, n, true));
		}
		if (i == 5) {
			b.hop = 161;
			UNIT_CHECK(ltx2_rope_err(&b, y, lo, n, true) > 100,
				   "ltx2_rope_freqs control: hop_length 161 instead of 160 measures "
				   "%.0f > 100", ltx2_rope_err(&b, y, lo, n, true));
			b = *q;
			b.pt = 1;
			UNIT_CHECK(ltx2_rope_err(&b, y, lo, n, true) > 100,
				   "ltx2_rope_freqs control: audio patch_t 1 instead of 2 measures "
				   "%.0f > 100", ltx2_rope_err(&b, y, lo, n, true));
		}
		if (i == 6) {
			b.theta = 10000;
			UNIT_CHECK(ltx2_rope_err(&b, y, lo, n, true) > 100,
				   "ltx2_rope_freqs control: theta 10000 instead of 500 measures "
				   "%.0f > 100", ltx2_rope_err(&b, y, lo, n, true));
		}
		free(y);
	}
}

static void test_positions(void)
{
	const int64_t F = 3, H = 5, W = 7;
	float *y = fill_value(F * H * W * 3, NAN);
	bool ok[2] = { true, true };

	for (int center = 0; center < 2; center++) {
		k_grid_ids(y, F, H, W, center);
		/* the tokens of a [F, H, W] grid in row-major order; centred rows
		 * and columns as QwenEmbedRope's cat(neg[-(n - n//2):], pos[:n//2]) */
		int64_t i = 0;
		for (int64_t f = 0; f < F; f++)
			for (int64_t h = 0; h < H; h++)
				for (int64_t w = 0; w < W; w++, i++)
					ok[center] &= y[3 * i] == f &&
						      y[3 * i + 1] == (center ? h - 3 : h) &&
						      y[3 * i + 2] == (center ? w - 4 : w);
	}
	UNIT_CHECK(ok[0] && ok[1], "grid_ids 3 x 5 x 7: (f, h, w) in token order, centred at "
		   "-(n - n/2)");
	float *t = fill_value(11 * 4, NAN);
	bool tok = true;
	k_text_ids(t, 11, -3, 4);
	for (int64_t i = 0; i < 11 * 4; i++)
		tok &= t[i] == (float)(-3 + i / 4);
	UNIT_CHECK(tok, "text_ids 11 x 4 from -3: every column start + i");
	free(y);
	free(t);
}

/* Conv3d with kernel = stride = patch (flattened, transposed) in float64,
 * against k_patchify followed by k_linear. */
static void test_patch_embed(void)
{
	const int64_t B = 2, C = 3, F = 6, H = 10, W = 9, pt = 2, ph = 5, pw = 3, O = 7;
	const int64_t Fp = F / pt, Hp = H / ph, Wp = W / pw, N = Fp * Hp * Wp, K = C * pt * ph * pw;
	float *x = fill_u(B * C * F * H * W), *w = fill_u(O * K), *bias = fill_u(O);
	float *p = fill_value(B * N * K, NAN), *y = fill_value(B * N * O, NAN);
	double *ref = dalloc(B * N * O);

	for (int64_t b = 0; b < B; b++)
		for (int64_t n = 0; n < N; n++)
			for (int64_t o = 0; o < O; o++) {
				int64_t f0 = n / (Hp * Wp) * pt, h0 = n / Wp % Hp * ph, w0 = n % Wp * pw;
				double s = bias[o];
				for (int64_t c = 0; c < C; c++)
					for (int64_t a = 0; a < pt; a++)
						for (int64_t e = 0; e < ph; e++)
							for (int64_t g = 0; g < pw; g++)
								s += (double)w[(((o * C + c) * pt + a) * ph + e) * pw + g] *
								     x[(((b * C + c) * F + f0 + a) * H + h0 + e) * W + w0 + g];
				ref[(b * N + n) * O + o] = s;
			}
	k_patchify(x, p, B, C, F, H, W, pt, ph, pw);
	k_linear(p, w, bias, y, B * N, K, O);
	double e = err_norm(y, ref, B * N * O);
	UNIT_CHECK(e <= TOL_GEMM, "patchify + linear = Conv3d patch (2, 5, 3) of [2, 3, 6, 10, 9]: "
		   "normwise %.2e <= %.0e", e, TOL_GEMM);
	/* control: the patches with one pixel changed give another conv */
	float *q = fill_value(B * N * K, NAN);
	k_patchify(x, q, B, C, F, H, W, pt, ph, pw);
	q[K + 1] += 1; /* one pixel of token 1 */
	k_linear(q, w, bias, y, B * N, K, O);
	e = err_norm(y, ref, B * N * O);
	UNIT_CHECK(e > 100 * TOL_GEMM, "patch_embed control: one pixel off measures %.2e > %.0e",
		   e, 100 * TOL_GEMM);
	free(x);
	free(w);
	free(bias);
	free(p);
	free(q);
	free(y);
	free(ref);
}

/* Wan's unpatchify as PyTorch writes it: [B, F', H', W', pt, ph, pw, C]
 * permuted (0, 7, 1, 4, 2, 5, 3, 6) and flattened, walked by strides. */
static bool unpatchify_matches(const float *x, const float *y, const int64_t *sz)
{
	static const int perm[8] = { 0, 7, 1, 4, 2, 5, 3, 6 };
	int64_t stride[8], n = 1, idx[8] = { 0 };

	for (int d = 7; d >= 0; d--) {
		stride[d] = n;
		n *= sz[d];
	}
	for (int64_t i = 0; i < n; i++) {
		/* i walks the permuted tensor in row-major order */
		int64_t src = 0, r = i;
		for (int d = 7; d >= 0; d--) {
			idx[d] = r % sz[perm[d]];
			r /= sz[perm[d]];
		}
		for (int d = 0; d < 8; d++)
			src += idx[d] * stride[perm[d]];
		if (y[i] != x[src])
			return false;
	}
	return true;
}

static void test_unpatchify(void)
{
	/* B, F', H', W', pt, ph, pw, C */
	const int64_t sz[8] = { 2, 3, 2, 5, 2, 3, 1, 4 };
	const int64_t B = 2, C = 4, F = 6, H = 6, W = 5;
	int64_t n = B * C * F * H * W;
	float *x = fill_u(n), *y = fill_value(n, NAN);

	k_unpatchify(x, y, B, C, F, H, W, 2, 3, 1);
	UNIT_CHECK(unpatchify_matches(x, y, sz), "unpatchify patch (2, 3, 1), C = 4: PyTorch's "
		   "reshape + permute (0, 7, 1, 4, 2, 5, 3, 6), exactly");
	k_unpatchify(x, y, B, C, F, H, W, 3, 2, 1);
	UNIT_CHECK(!unpatchify_matches(x, y, sz), "unpatchify control: patch (3, 2, 1) differs");
	free(x);
	free(y);
}

int main(void)
{
	test_pool();
	test_layer_norm();
	test_rms_norm();
	test_dist_norm();
	test_activations();
	test_binary();
	test_modulate_case(false);
	test_modulate_case(true);
	test_copy2d();
	test_rope();
	test_rope_half();
	test_rope_split();
	test_index_rows();
	/* The vector kernels once per instruction set this CPU can run (the
	 * narrower ones through DTPC_CPU_ISA), so the AVX2 and baseline
	 * variants are checked on an AVX-512 machine too (the linear: its own
	 * tiles with AVX-512, the BLAS without). */
	static const char *const isa[] = { "avx512", "avx2", "base" };

	for (size_t i = 0; i < sizeof isa / sizeof isa[0]; i++) {
		setenv("DTPC_CPU_ISA", isa[i], 1);
		printf("# vector kernels: DTPC_CPU_ISA=%s\n", isa[i]);
		test_linear();
		test_linear_panels();
		test_linear_few_rows();
		test_vexp();
		test_attention();
		test_attention_control();
		test_attention_masked();
	}
	unsetenv("DTPC_CPU_ISA");
	test_lse_merge_blocks();
	test_lse_merge_extremes();
	test_timestep_embedding();
	test_rope_freqs();
	test_ltx_rope_freqs();
	test_ltx2_rope_freqs();
	test_positions();
	test_patch_embed();
	test_unpatchify();
	return unit_done();
}
