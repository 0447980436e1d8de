/* embed.c — the embeddings diffusers computes inside a transformer's
 * forward: the sinusoidal timestep projection, the position grids, and the
 * patch (un)embedding's regrouping (RoPE's tables are rope.c's).
 *
 * The tables follow diffusers' float32 / float64 arithmetic step by step
 * (embeddings.py: get_timestep_embedding). Each float32 step
 * is rounded as torch rounds it; where torch calls a transcendental
 * function (exp, pow, sin, cos) of a float32 value, the value is taken to
 * double, the function computed there and the result rounded once to
 * float32 — the correctly rounded float32 result, which torch's float32
 * functions (within 1 ulp) nearly always give too, and which the CUDA
 * kernels compute the same way so the two devices agree bit for bit. */
#include <math.h>

#include "kernels/cpu/kernels.h"

void k_timestep_embedding(const float *t, float *y, int64_t n, int64_t dim, bool flip,
			  double shift, double scale, double max_period, double input_scale)
{
	int64_t half = dim / 2;
	/* torch: -math.log(max_period) * arange(half, float32), then divided
	 * by the Python number half - shift: both scalars become float32 */
	float lg = (float)-log(max_period), den = (float)((double)half - shift);
	float sc = (float)scale, in = (float)input_scale;

	for (int64_t i = 0; i < n; i++) {
		float ts = t[i] * in, *row = y + i * dim;

		for (int64_t k = 0; k < half; k++) {
			float ex = lg * (float)k / den;
			float fr = (float)exp((double)ex);
			float a = sc * (ts * fr);
			float s = (float)sin((double)a), c = (float)cos((double)a);

			row[k] = flip ? c : s;
			row[half + k] = flip ? s : c;
		}
		if (dim % 2)
			row[dim - 1] = 0;
	}
}

void k_grid_ids(float *y, int64_t F, int64_t H, int64_t W, bool center)
{
	/* QwenEmbedRope's scale_rope: rows -(H - H/2) .. H/2 - 1, likewise
	 * columns; frames from 0 */
	int64_t h0 = center ? H - H / 2 : 0, w0 = center ? W - W / 2 : 0;

	for (int64_t f = 0; f < F; f++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t w = 0; w < W; w++) {
				float *p = y + ((f * H + h) * W + w) * 3;

				p[0] = (float)f;
				p[1] = (float)(h - h0);
				p[2] = (float)(w - w0);
			}
}

void k_text_ids(float *y, int64_t length, int64_t first, int64_t axes)
{
	for (int64_t i = 0; i < length; i++)
		for (int64_t a = 0; a < axes; a++)
			y[i * axes + a] = (float)(first + i);
}

void k_patchify(const float *x, float *y, int64_t B, int64_t C, int64_t F, int64_t H,
		int64_t W, int64_t pt, int64_t ph, int64_t pw)
{
	int64_t Hp = H / ph, Wp = W / pw, K = C * pt * ph * pw, N = F / pt * Hp * Wp;

	/* one input row (b, c, f, h) at a time: its pixels go, pw at a time,
	 * to the patches along it */
	for (int64_t b = 0; b < B; b++)
		for (int64_t c = 0; c < C; c++)
			for (int64_t f = 0; f < F; f++)
				for (int64_t h = 0; h < H; h++) {
					const float *src = x + (((b * C + c) * F + f) * H + h) * W;
					int64_t tok = (f / pt * Hp + h / ph) * Wp;
					int64_t k = ((c * pt + f % pt) * ph + h % ph) * pw;
					float *dst = y + (b * N + tok) * K + k;

					for (int64_t wp = 0; wp < Wp; wp++)
						for (int64_t kw = 0; kw < pw; kw++)
							dst[wp * K + kw] = src[wp * pw + kw];
				}
}

void k_unpatchify(const float *x, float *y, int64_t B, int64_t C, int64_t F, int64_t H,
		  int64_t W, int64_t pt, int64_t ph, int64_t pw)
{
	int64_t Hp = H / ph, Wp = W / pw, K = pt * ph * pw * C, N = F / pt * Hp * Wp;

	/* one output row (b, c, f, h) at a time, gathered from its patches */
	for (int64_t b = 0; b < B; b++)
		for (int64_t c = 0; c < C; c++)
			for (int64_t f = 0; f < F; f++)
				for (int64_t h = 0; h < H; h++) {
					float *dst = y + (((b * C + c) * F + f) * H + h) * W;
					int64_t tok = (f / pt * Hp + h / ph) * Wp;
					int64_t k = ((f % pt * ph + h % ph) * pw) * C + c;
					const float *src = x + (b * N + tok) * K + k;

					for (int64_t wp = 0; wp < Wp; wp++)
						for (int64_t kw = 0; kw < pw; kw++)
							dst[wp * pw + kw] = src[wp * K + kw * C];
				}
}
