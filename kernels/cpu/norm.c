/* norm.c — LayerNorm and RMSNorm (see kernels.h).
 *
 * Statistics are accumulated in double: activations of diffusion transformers
 * carry large per-channel offsets, and a float running sum over a few thousand
 * of them loses the digits the variance lives in. The normalisation itself is
 * also done in double and rounded once, so y does not inherit the rounding of
 * a float mean when |mean| is much larger than the spread. */
#include "kernels/cpu/kernels.h"

#include <assert.h>
#include <math.h>

/* Partial sums kept apart so the additions do not wait on each other: one
 * running double sum is bound by the adder's latency, not its throughput. */
#define LANES 8

static double sum_x(const float *x, int64_t n)
{
	double s[LANES] = { 0 }, t = 0;
	int64_t i = 0;

	for (; i + LANES <= n; i += LANES)
		for (int l = 0; l < LANES; l++)
			s[l] += x[i + l];
	for (; i < n; i++)
		t += x[i];
	for (int l = 0; l < LANES; l++)
		t += s[l];
	return t;
}

/* sum (x - c)^2 */
static double sum_sq(const float *x, int64_t n, double c)
{
	double s[LANES] = { 0 }, t = 0;
	int64_t i = 0;

	for (; i + LANES <= n; i += LANES)
		for (int l = 0; l < LANES; l++)
			s[l] += (x[i + l] - c) * (x[i + l] - c);
	for (; i < n; i++)
		t += (x[i] - c) * (x[i] - c);
	for (int l = 0; l < LANES; l++)
		t += s[l];
	return t;
}

void k_layer_norm(const float *x, float *y, int64_t rows, int64_t n, float eps,
		  const float *w, const float *b)
{
	assert(n >= 1);
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * n;
		float *yr = y + r * n;
		double mean = sum_x(xr, n) / (double)n;
		/* Two passes: E[(x - mean)^2] has no cancellation, unlike
		 * E[x^2] - mean^2. */
		double rstd = 1.0 / sqrt(sum_sq(xr, n, mean) / (double)n + eps);

		/* One loop per case, so none branches per element. */
		if (w && b) {
			for (int64_t i = 0; i < n; i++)
				yr[i] = (float)((xr[i] - mean) * rstd * w[i] + b[i]);
		} else if (w) {
			for (int64_t i = 0; i < n; i++)
				yr[i] = (float)((xr[i] - mean) * rstd * w[i]);
		} else if (b) {
			for (int64_t i = 0; i < n; i++)
				yr[i] = (float)((xr[i] - mean) * rstd + b[i]);
		} else {
			for (int64_t i = 0; i < n; i++)
				yr[i] = (float)((xr[i] - mean) * rstd);
		}
	}
}

void k_rms_norm(const float *x, float *y, int64_t rows, int64_t n, int64_t group,
		float eps, const float *w)
{
	assert(group >= 1 && n % group == 0);
	for (int64_t g = 0; g < rows * (n / group); g++) {
		const float *xg = x + g * group;
		float *yg = y + g * group;
		double r = 1.0 / sqrt(sum_sq(xg, group, 0.0) / (double)group + eps);

		if (w) {
			for (int64_t i = 0; i < group; i++)
				yg[i] = (float)(xg[i] * r * w[i]);
		} else {
			for (int64_t i = 0; i < group; i++)
				yg[i] = (float)(xg[i] * r);
		}
	}
}

void k_norm_stats(const float *x, const float *sums, float *out, int64_t rows, int64_t n,
		  int64_t N, enum k_norm_stat mode)
{
	assert(N >= 1);
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * n;

		if (mode == K_NS_SUM) {
			out[r] = (float)sum_x(xr, n);
		} else if (mode == K_NS_SQ) {
			out[r] = (float)sum_sq(xr, n, 0.0);
		} else {
			double c = (double)sums[r] / (double)N;

			out[2 * r] = (float)(sum_x(xr, n) - c * (double)n);
			out[2 * r + 1] = (float)sum_sq(xr, n, c);
		}
	}
}

void k_norm_apply(const float *x, float *y, int64_t rows, int64_t n, int64_t N, float eps,
		  const float *s1, const float *s2, const float *w, const float *b)
{
	assert(N >= 1);
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * n;
		float *yr = y + r * n;
		double mean = 0, ms;

		if (s1) {
			double d = (double)s2[2 * r] / (double)N;

			mean = (double)s1[r] / (double)N + d;
			ms = (double)s2[2 * r + 1] / (double)N - d * d;
		} else {
			ms = (double)s2[r] / (double)N;
		}
		double rstd = 1.0 / sqrt(ms + eps);

		for (int64_t i = 0; i < n; i++) {
			double v = (xr[i] - mean) * rstd;
			if (w)
				v *= w[i];
			if (b)
				v += b[i];
			yr[i] = (float)v;
		}
	}
}
