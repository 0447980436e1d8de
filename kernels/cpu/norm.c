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

void k_layer_norm(const float *x, float *y, int64_t rows, int64_t n, float eps,
		  const float *w, const float *b)
{
	assert(n >= 1);
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * n;
		float *yr = y + r * n;
		double sum = 0, sq = 0;

		for (int64_t i = 0; i < n; i++)
			sum += xr[i];
		double mean = sum / (double)n;

		/* Two passes: E[(x - mean)^2] has no cancellation, unlike
		 * E[x^2] - mean^2. */
		for (int64_t i = 0; i < n; i++) {
			double d = xr[i] - mean;

			sq += d * d;
		}
		double rstd = 1.0 / sqrt(sq / (double)n + eps);

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

void k_rms_norm(const float *x, float *y, int64_t rows, int64_t n, int64_t group,
		float eps, const float *w)
{
	assert(group >= 1 && n % group == 0);
	for (int64_t g = 0; g < rows * (n / group); g++) {
		const float *xg = x + g * group;
		float *yg = y + g * group;
		double sq = 0;

		for (int64_t i = 0; i < group; i++)
			sq += (double)xg[i] * xg[i];
		double r = 1.0 / sqrt(sq / (double)group + eps);

		for (int64_t i = 0; i < group; i++)
			yg[i] = (float)(w ? xg[i] * r * w[i] : xg[i] * r);
	}
}
