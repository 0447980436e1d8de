/* rope.c — the rotary position embedding, the family of runtime/ops/rope.c:
 * its tables from positions (FluxPosEmbed's and Wan's per-axis
 * get_1d_rotary_pos_embed, QwenEmbedRope.rope_params, LTX-Video's
 * LTXVideoRotaryPosEmbed) and their application to q and k.
 *
 * The tables follow diffusers' float32 / float64 arithmetic step by step, as
 * embed.c's timestep projection does: each float32 step rounded as torch
 * rounds it, and exp, pow, sin and cos of a float32 value computed in
 * double and rounded once to float32 (the correctly rounded result, which
 * the CUDA kernels compute the same way, so the two devices agree bit for
 * bit). */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec.h"

void k_rope_freqs(const float *ids, float *y, int64_t rows, int64_t naxes,
		  const int64_t *axes_dim, double theta, bool sine, bool f64)
{
	int64_t width = 0;

	for (int64_t a = 0; a < naxes; a++)
		width += axes_dim[a];
	for (int64_t r = 0; r < rows; r++) {
		float *row = y + r * width;

		for (int64_t a = 0; a < naxes; a++) {
			int64_t d = axes_dim[a];
			float pos = ids[r * naxes + a];

			for (int64_t j = 0; j < d / 2; j++) {
				double v;

				if (f64) {
					/* get_1d_rotary_pos_embed, freqs_dtype float64 */
					double fr = 1.0 / pow(theta, (double)(2 * j) / (double)d);
					double ang = (double)pos * fr;

					v = sine ? sin(ang) : cos(ang);
				} else {
					/* QwenEmbedRope.rope_params: all float32 */
					float e = (float)(2 * j) / (float)d;
					float p = (float)pow((double)(float)theta, (double)e);
					float ang = pos * (1.0f / p);

					v = sine ? sin((double)ang) : cos((double)ang);
				}
				row[2 * j] = row[2 * j + 1] = (float)v;
			}
			row += d;
		}
	}
}

/* LTXVideoRotaryPosEmbed's base sizes (the model constructs it with these) */
static const float ltx_rope_base[3] = { 20, 2048, 2048 };

/* torch.linspace(start, end, n)[k] in float32 as torch 2.15's CPU kernel
 * computes it: start + step * k on the first half, end - step * (n - 1 - k)
 * on the second, each rounded once (a fused multiply-add: measured equal to
 * torch for every n up to 800; two roundings differ from n = 16 on) */
static float ltx_linspace(float start, float end, int64_t n, int64_t k)
{
	if (n == 1)
		return start;
	float step = (end - start) / (float)(n - 1);
	return k < n / 2 ? fmaf(step, (float)k, start) : fmaf(-step, (float)(n - 1 - k), end);
}

void k_ltx_rope_freqs(const float *ids, float *y, int64_t rows, int64_t dim,
		      const double scale[3], int64_t patch_t, int64_t patch, double theta,
		      bool sine)
{
	int64_t n = dim / 6, pad = dim % 6;
	/* math.log(1, theta), math.log(theta, theta): Python's float64, then
	 * torch's float32 */
	float start = (float)(log(1.0) / log(theta)), end = (float)(log(theta) / log(theta));
	float th = (float)theta, pi = (float)M_PI;
	float mul[3] = { (float)patch_t, (float)patch, (float)patch };
	float sc[3] = { (float)scale[0], (float)scale[1], (float)scale[2] };

	for (int64_t r = 0; r < rows; r++)
		for (int64_t j = 0; j < pad; j++)
			y[r * dim + j] = sine ? 0.0f : 1.0f;
	/* frequency by frequency: one pow each, whatever the rows */
	for (int64_t k = 0; k < n; k++) {
		float v = ltx_linspace(start, end, n, k);
		float f = (float)pow((double)th, (double)v);
		f = f * pi / 2.0f; /* freqs * math.pi / 2.0 */
		for (int64_t r = 0; r < rows; r++)
			for (int a = 0; a < 3; a++) {
				/* grid * scale * patch / base, then grid * 2 - 1 */
				float c = ids[r * 3 + a] * sc[a];
				c = c * mul[a];
				c = c / ltx_rope_base[a];
				float ang = f * (c * 2.0f - 1.0f);
				float t = (float)(sine ? sin((double)ang) : cos((double)ang));
				float *o = y + r * dim + pad + 2 * (3 * k + a);
				o[0] = o[1] = t;
			}
	}
}

/* torch.linspace(0, 1, n) in float64: the CPU kernel's two halves */
static double ltx2_linspace64(int64_t n, int64_t k)
{
	if (n == 1)
		return 0.0;
	double step = 1.0 / (double)(n - 1);
	return k < n / 2 ? step * (double)k : 1.0 - step * (double)(n - 1 - k);
}

/* the frequency k of n: (theta ** linspace(0, 1, n)[k]) * pi / 2 in the
 * frequencies' dtype, then float32 */
static float ltx2_freq(const struct k_ltx2_rope *p, int64_t n, int64_t k)
{
	if (p->f64)
		return (float)(pow(p->theta, ltx2_linspace64(n, k)) * M_PI / 2.0);
	float v = ltx_linspace(0.0f, 1.0f, n, k);
	float f = (float)pow((double)(float)p->theta, (double)v);
	return f * (float)M_PI / 2.0f;
}

/* the coordinate of axis a at patch index g, as a fraction of the base */
static float ltx2_coord(const struct k_ltx2_rope *p, int a, int64_t g)
{
	float b[2];
	if (a == 0) {
		float pt = (float)p->patch_t, sc = (float)p->scale_t;
		for (int e = 0; e < 2; e++) {
			float x = (float)g * pt;
			if (e)
				x = x + pt;
			float t = x * sc;
			t = t + (float)p->causal_offset;
			t = t - sc;
			t = t < 0.0f ? 0.0f : t;
			if (p->audio)
				t = t * (float)p->hop_length;
			b[e] = t / (float)p->time_div;
		}
		return (b[0] + b[1]) / 2.0f / (float)p->base_t;
	}
	float ps = (float)p->patch, sc = (float)p->scale_s;
	b[0] = ((float)g * ps) * sc;
	b[1] = ((float)g * ps + ps) * sc;
	return (b[0] + b[1]) / 2.0f / (float)p->base_s;
}

void k_ltx2_rope_freqs(const struct k_ltx2_rope *p, float *y, int64_t lo, int64_t rows,
		       bool sine)
{
	int64_t P = p->axes, n = p->dim / (2 * P), pad = p->dim % (2 * P);
	int64_t nh = p->height / p->patch, nw = p->width / p->patch;
	/* one pow per frequency, whatever the rows (recomputed per entry if
	 * there is no room for them) */
	float *fr = n ? malloc((size_t)n * sizeof *fr) : NULL;
	for (int64_t k = 0; fr && k < n; k++)
		fr[k] = ltx2_freq(p, n, k);

	/* "split" keeps one of each interleaved pair (the padding halves:
	 * pad is even, as dim and 2 P are) */
	int64_t width = k_ltx2_rope_width(p), rep = p->split ? 1 : 2;
	if (p->split)
		pad /= 2;
	for (int64_t r = 0; r < rows; r++) {
		int64_t row = lo + r, g[3];
		float *o = y + r * width;
		if (p->audio) {
			g[0] = row;
		} else {
			g[0] = row / (nh * nw);
			g[1] = row / nw % nh;
			g[2] = row % nw;
		}
		for (int64_t j = 0; j < pad; j++)
			o[j] = sine ? 0.0f : 1.0f;
		for (int a = 0; a < P; a++) {
			float c = ltx2_coord(p, a, g[a]);
			float ex = c * 2.0f - 1.0f;
			for (int64_t k = 0; k < n; k++) {
				float ang = (fr ? fr[k] : ltx2_freq(p, n, k)) * ex;
				float t = (float)(sine ? sin((double)ang) : cos((double)ang));
				for (int64_t e = 0; e < rep; e++)
					o[pad + rep * (P * k + a) + e] = t;
			}
		}
	}
	free(fr);
}

void k_rope(const float *x, int64_t x_stride, const float *cos, const float *sin,
	    float *y, int64_t y_stride, int64_t B, int64_t S, int64_t heads, int64_t D)
{
	assert(D % 2 == 0);
	for (int64_t bi = 0; bi < B; bi++) {
		for (int64_t s = 0; s < S; s++) {
			const float *c = cos + s * D, *sn = sin + s * D;
			const float *xr = x + (bi * S + s) * x_stride;
			float *yr = y + (bi * S + s) * y_stride;

			for (int64_t h = 0; h < heads; h++) {
				const float *xh = xr + h * D;
				float *yh = yr + h * D;

				/* Both inputs of a pair are read before either
				 * output is written, so y may be x. Two pairs
				 * at a time: x times cos, plus x's pairs swapped
				 * times sin with the even lanes negated (an
				 * exact negation: the same two products and
				 * one sum per element as one pair at a time). */
				int64_t i = 0;

				for (; i + VF <= D; i += VF) {
					const vf odd = { -1.0f, 1.0f, -1.0f, 1.0f };
					vf xv = vf_load(xh + i);

					vf_store(yh + i, xv * vf_load(c + i) +
								 vf_swap_pairs(xv) * vf_load(sn + i) * odd);
				}
				for (; i < D; i += 2) {
					float x0 = xh[i], x1 = xh[i + 1];

					yh[i] = x0 * c[i] - x1 * sn[i];
					yh[i + 1] = x1 * c[i + 1] + x0 * sn[i + 1];
				}
			}
		}
	}
}

void k_rope_half(const float *x, int64_t x_stride, const float *cos, const float *sin,
		 float *y, int64_t y_stride, int64_t B, int64_t S, int64_t heads, int64_t D,
		 int64_t R, bool per_head)
{
	int64_t h = R / 2, width = k_rope_table_width(heads, R, per_head), second = per_head ? 0 : h;

	assert(R % 2 == 0 && R <= D && (!per_head || R == D));
	for (int64_t bi = 0; bi < B; bi++) {
		for (int64_t s = 0; s < S; s++) {
			const float *xr = x + (bi * S + s) * x_stride;
			float *yr = y + (bi * S + s) * y_stride;

			for (int64_t hh = 0; hh < heads; hh++) {
				const float *xh = xr + hh * D;
				const float *c = cos + s * width + (per_head ? hh * h : 0);
				const float *sn = sin + s * width + (per_head ? hh * h : 0);
				float *yh = yr + hh * D;

				/* x * cos + cat(-x2, x1) * sin: a pair's inputs
				 * are read before its outputs are written, so y
				 * may be x */
				int64_t j = 0;

				for (; j + VF <= h; j += VF) {
					vf x1 = vf_load(xh + j), x2 = vf_load(xh + j + h);

					vf_store(yh + j, x1 * vf_load(c + j) - x2 * vf_load(sn + j));
					vf_store(yh + j + h, x2 * vf_load(c + j + second) +
								     x1 * vf_load(sn + j + second));
				}
				for (; j < h; j++) {
					float x1 = xh[j], x2 = xh[j + h];

					yh[j] = x1 * c[j] - x2 * sn[j];
					yh[j + h] = x2 * c[j + second] + x1 * sn[j + second];
				}
				if (yh != xh)
					memcpy(yh + R, xh + R, (size_t)(D - R) * sizeof *yh);
			}
		}
	}
}
