/* norm.c — LayerNorm and RMSNorm (see kernels.h).
 *
 * Statistics are accumulated in double: activations of diffusion transformers
 * carry large per-channel offsets, and a float running sum over a few thousand
 * of them loses the digits the variance lives in. The normalisation itself is
 * also done in double and rounded once, so y does not inherit the rounding of
 * a float mean when |mean| is much larger than the spread.
 *
 * The loops run on vectors of 8 doubles (GCC's vector extensions), compiled
 * twice: for AVX-512, one register each, and for the baseline, where GCC
 * splits them; k_cpu_isa picks per call. Written as scalars at -O2 they ran
 * at about 4 cycles an element on a Sapphire Rapids core, the mid-size Flux's
 * norms 4% of its float32 step and 11% of its bf16 one at TP 2. */
#include "kernels/cpu/kernels.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* Vectors of 8 doubles. A sum is kept in one, 8 partial sums, so the
 * additions do not wait on each other as one running sum's would. */
#define LANES 8

typedef double vd __attribute__((vector_size(LANES * 8)));
typedef float vf __attribute__((vector_size(LANES * 4)));

#define INLINE static inline __attribute__((always_inline))

/* GCC warns that a 64-byte vector passed or returned by value has another
 * ABI without AVX-512; these helpers are always inlined, so none is. */
#pragma GCC diagnostic ignored "-Wpsabi"

INLINE vd load(const float *x)
{
	vf v;

	memcpy(&v, x, sizeof v);
	return __builtin_convertvector(v, vd);
}

/* The partial sums added up, in order, after t (the tail's sum). */
INLINE double sum_lanes(vd s, double t)
{
	for (int l = 0; l < LANES; l++)
		t += s[l];
	return t;
}

INLINE double sum_x(const float *x, int64_t n)
{
	vd s = { 0 };
	double t = 0;
	int64_t i = 0;

	for (; i + LANES <= n; i += LANES)
		s += load(x + i);
	for (; i < n; i++)
		t += x[i];
	return sum_lanes(s, t);
}

/* sum (x - c)^2 */
INLINE double sum_sq(const float *x, int64_t n, double c)
{
	vd s = { 0 };
	double t = 0;
	int64_t i = 0;

	for (; i + LANES <= n; i += LANES) {
		vd d = load(x + i) - c;

		s += d * d;
	}
	for (; i < n; i++)
		t += (x[i] - c) * (x[i] - c);
	return sum_lanes(s, t);
}

/* y = (x - mean) r, times w and plus b where given, rounded once. */
INLINE void norm_row(const float *x, float *y, int64_t n, double mean, double r, const float *w,
		     const float *b)
{
	int64_t i = 0;

	for (; i + LANES <= n; i += LANES) {
		vd v = (load(x + i) - mean) * r;

		if (w)
			v *= load(w + i);
		if (b)
			v += load(b + i);
		vf o = __builtin_convertvector(v, vf);

		memcpy(y + i, &o, sizeof o);
	}
	for (; i < n; i++) {
		double v = (x[i] - mean) * r;

		if (w)
			v *= w[i];
		if (b)
			v += b[i];
		y[i] = (float)v;
	}
}

INLINE void layer_norm_body(const float *x, float *y, int64_t rows, int64_t n, float eps,
			    const float *w, const float *b)
{
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * n;
		double mean = sum_x(xr, n) / (double)n;
		/* Two passes: E[(x - mean)^2] has no cancellation, unlike
		 * E[x^2] - mean^2. */
		double rstd = 1.0 / sqrt(sum_sq(xr, n, mean) / (double)n + eps);

		norm_row(xr, y + r * n, n, mean, rstd, w, b);
	}
}

INLINE void rms_norm_body(const float *x, float *y, int64_t rows, int64_t n, int64_t group,
			  float eps, const float *w)
{
	for (int64_t g = 0; g < rows * (n / group); g++) {
		const float *xg = x + g * group;
		double r = 1.0 / sqrt(sum_sq(xg, group, 0.0) / (double)group + eps);

		norm_row(xg, y + g * group, group, 0.0, r, w, NULL);
	}
}

INLINE void norm_stats_body(const float *x, const float *sums, float *out, int64_t rows,
			    int64_t n, int64_t N, enum k_norm_stat mode)
{
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

INLINE void norm_apply_body(const float *x, float *y, int64_t rows, int64_t n, int64_t N,
			    float eps, const float *s1, const float *s2, const float *w,
			    const float *b)
{
	for (int64_t r = 0; r < rows; r++) {
		double mean = 0, ms;

		if (s1) {
			double d = (double)s2[2 * r] / (double)N;

			mean = (double)s1[r] / (double)N + d;
			ms = (double)s2[2 * r + 1] / (double)N - d * d;
		} else {
			ms = (double)s2[r] / (double)N;
		}
		norm_row(x + r * n, y + r * n, n, mean, 1.0 / sqrt(ms + eps), w, b);
	}
}

/* fn_avx512 and fn_base around fn_body, and fn picking one per call (the
 * baseline's vd arguments and returns never cross a call: all inlined). */
#if defined(__x86_64__) && defined(__GNUC__)
#define VARIANTS(fn, params, args)                                                  \
	__attribute__((target("avx512f"))) static void fn##_avx512 params          \
	{                                                                           \
		fn##_body args;                                                     \
	}                                                                           \
	static void fn##_base params                                                \
	{                                                                           \
		fn##_body args;                                                     \
	}                                                                           \
	static void fn params                                                       \
	{                                                                           \
		if (k_cpu_isa() == K_ISA_AVX512)                                    \
			fn##_avx512 args;                                           \
		else                                                                \
			fn##_base args;                                             \
	}
#else
#define VARIANTS(fn, params, args)                                                  \
	static void fn params                                                       \
	{                                                                           \
		fn##_body args;                                                     \
	}
#endif

VARIANTS(layer_norm, (const float *x, float *y, int64_t rows, int64_t n, float eps,
		      const float *w, const float *b), (x, y, rows, n, eps, w, b))
VARIANTS(rms_norm, (const float *x, float *y, int64_t rows, int64_t n, int64_t group, float eps,
		    const float *w), (x, y, rows, n, group, eps, w))
VARIANTS(norm_stats, (const float *x, const float *sums, float *out, int64_t rows, int64_t n,
		      int64_t N, enum k_norm_stat mode), (x, sums, out, rows, n, N, mode))
VARIANTS(norm_apply, (const float *x, float *y, int64_t rows, int64_t n, int64_t N, float eps,
		      const float *s1, const float *s2, const float *w, const float *b),
	 (x, y, rows, n, N, eps, s1, s2, w, b))

void k_layer_norm(const float *x, float *y, int64_t rows, int64_t n, float eps,
		  const float *w, const float *b)
{
	assert(n >= 1);
	layer_norm(x, y, rows, n, eps, w, b);
}

void k_rms_norm(const float *x, float *y, int64_t rows, int64_t n, int64_t group,
		float eps, const float *w)
{
	assert(group >= 1 && n % group == 0);
	rms_norm(x, y, rows, n, group, eps, w);
}

void k_norm_stats(const float *x, const float *sums, float *out, int64_t rows, int64_t n,
		  int64_t N, enum k_norm_stat mode)
{
	assert(N >= 1);
	norm_stats(x, sums, out, rows, n, N, mode);
}

void k_norm_apply(const float *x, float *y, int64_t rows, int64_t n, int64_t N, float eps,
		  const float *s1, const float *s2, const float *w, const float *b)
{
	assert(N >= 1);
	norm_apply(x, y, rows, n, N, eps, s1, s2, w, b);
}
