/* embed.cu — the embedding kernels of kernels/cpu/embed.c on the GPU.
 *
 * The same arithmetic as the CPU's, step by step: float32 steps as IEEE
 * float32 operations (no step here is an a * b + c that nvcc could fuse),
 * and exp, pow, sin and cos of a float32 value computed in double and
 * rounded once, so both devices give the correctly rounded float32 result
 * and agree bit for bit. Timesteps and positions are read, and tables
 * written, in the storage dtype. One thread per output element (or pair),
 * over a grid-stride loop. */
#include "kernels/cuda/kc_internal.h"

namespace {

const int THREADS = 256;

template <typename T>
__global__ void timestep_kernel(const void *t, T *y, int64_t n, int64_t dim, bool flip, float lg,
				float den, float sc, float in, bool round_in, bool t_f32)
{
	const int64_t half = dim / 2, per = half + 1; /* half pairs and the pad */

	for (int64_t e = kc_thread(); e < n * per; e += kc_threads()) {
		int64_t i = e / per, k = e % per;
		T *row = y + i * dim;

		if (k == half) {
			if (dim % 2)
				row[dim - 1] = kc_from_f32<T>(0.0f);
			continue;
		}
		/* t_f32: an input's float32 values as bound (embed.c's
		 * cpu_timestep_embedding); round_in: the timestep and the
		 * product rounded to the storage dtype, as diffusers'
		 * `timestep.to(dtype) * 1000` (exact for float), else the
		 * float32 product (QwenImage21's `time_factor * t.float()`) */
		float tv = t_f32 ? ((const float *)t)[i] : kc_to_f32<T>(((const T *)t)[i]);
		if (t_f32 && round_in)
			tv = kc_to_f32<T>(kc_from_f32<T>(tv));
		float ts = __fmul_rn(tv, in);
		if (round_in)
			ts = kc_to_f32<T>(kc_from_f32<T>(ts));
		float ex = __fdiv_rn(__fmul_rn(lg, (float)k), den);
		float fr = __double2float_rn(exp((double)ex));
		float a = __fmul_rn(sc, __fmul_rn(ts, fr));
		float s = __double2float_rn(sin((double)a)), c = __double2float_rn(cos((double)a));

		row[k] = kc_from_f32<T>(flip ? c : s);
		row[half + k] = kc_from_f32<T>(flip ? s : c);
	}
}

template <typename T>
int timestep_t(kc_ctx *c, const void *t, void *y, int64_t n, int64_t dim, bool flip,
	       double shift, double scale, double max_period, double input_scale, bool in_f32,
	       bool t_f32)
{
	int64_t work = n * (dim / 2 + 1);

	timestep_kernel<T><<<kc_blocks_for(c, THREADS, work), THREADS, 0, c->stream>>>(
		t, (T *)y, n, dim, flip, (float)-log(max_period),
		(float)((double)(dim / 2) - shift), (float)scale, (float)input_scale,
		input_scale != 1 && !in_f32, t_f32);
	return kc_launched();
}

template <typename T>
__global__ void grid_ids_kernel(T *y, int64_t F, int64_t H, int64_t W, int64_t h0, int64_t w0)
{
	for (int64_t i = kc_thread(); i < F * H * W; i += kc_threads()) {
		y[3 * i] = kc_from_f32<T>((float)(i / (H * W)));
		y[3 * i + 1] = kc_from_f32<T>((float)(i / W % H - h0));
		y[3 * i + 2] = kc_from_f32<T>((float)(i % W - w0));
	}
}

template <typename T>
int grid_ids_t(kc_ctx *c, void *y, int64_t F, int64_t H, int64_t W, bool center)
{
	grid_ids_kernel<T><<<kc_blocks_for(c, THREADS, F * H * W), THREADS, 0, c->stream>>>(
		(T *)y, F, H, W, center ? H - H / 2 : 0, center ? W - W / 2 : 0);
	return kc_launched();
}

template <typename T>
__global__ void text_ids_kernel(T *y, int64_t length, int64_t first, int64_t axes)
{
	for (int64_t i = kc_thread(); i < length * axes; i += kc_threads())
		y[i] = kc_from_f32<T>((float)(first + i / axes));
}

template <typename T>
int text_ids_t(kc_ctx *c, void *y, int64_t length, int64_t first, int64_t axes)
{
	text_ids_kernel<T><<<kc_blocks_for(c, THREADS, length * axes), THREADS, 0, c->stream>>>(
		(T *)y, length, first, axes);
	return kc_launched();
}

/* (Un)patchify: one thread per element of the [B, C, F, H, W] side, moved
 * to or from its place among the tokens (k_patchify / k_unpatchify). A
 * storage unit U of the element's size: a pure copy. */
struct Grid {
	int64_t B, C, F, H, W, pt, ph, pw;
};

template <typename U>
__global__ void patch_kernel(const U *x, U *y, Grid g, bool to_tokens)
{
	const int64_t Hp = g.H / g.ph, Wp = g.W / g.pw, N = g.F / g.pt * Hp * Wp;
	const int64_t K = g.C * g.pt * g.ph * g.pw, n = g.B * g.C * g.F * g.H * g.W;

	for (int64_t i = kc_thread(); i < n; i += kc_threads()) {
		int64_t w = i % g.W, h = i / g.W % g.H, f = i / (g.W * g.H) % g.F;
		int64_t c = i / (g.W * g.H * g.F) % g.C, b = i / (g.W * g.H * g.F * g.C);
		int64_t tok = (f / g.pt * Hp + h / g.ph) * Wp + w / g.pw;
		int64_t kt = f % g.pt, kh = h % g.ph, kw = w % g.pw;

		if (to_tokens) /* a Conv3d weight's order: (c, kt, kh, kw) */
			y[(b * N + tok) * K + ((c * g.pt + kt) * g.ph + kh) * g.pw + kw] = x[i];
		else /* Wan's: (kt, kh, kw, c), channels innermost */
			y[i] = x[(b * N + tok) * K + ((kt * g.ph + kh) * g.pw + kw) * g.C + c];
	}
}

int patch_launch(kc_ctx *c, enum kc_dtype t, const void *x, void *y, const Grid &g, bool to_tokens)
{
	int64_t n = g.B * g.C * g.F * g.H * g.W;
	unsigned grid = kc_blocks_for(c, THREADS, n);

	if (kc_dtype_size(t) == 4)
		patch_kernel<float><<<grid, THREADS, 0, c->stream>>>((const float *)x, (float *)y, g,
								     to_tokens);
	else
		patch_kernel<unsigned short><<<grid, THREADS, 0, c->stream>>>(
			(const unsigned short *)x, (unsigned short *)y, g, to_tokens);
	return kc_launched();
}

} // namespace

/* ---- entry points ------------------------------------------------------------------------- */

extern "C" int kc_timestep_embedding(kc_ctx *c, enum kc_dtype t, const void *ts, void *y,
				     int64_t n, int64_t dim, bool flip, double shift,
				     double scale, double max_period, double input_scale,
				     bool input_scale_f32, bool t_f32)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (dim < 1 || n < 0)
		return (int)cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	return KC_DISPATCH(t, timestep_t, c, ts, y, n, dim, flip, shift, scale, max_period,
			   input_scale, input_scale_f32, t_f32);
}

extern "C" int kc_grid_ids(kc_ctx *c, enum kc_dtype t, void *y, int64_t F, int64_t H, int64_t W,
			   bool center)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (F < 1 || H < 1 || W < 1)
		return (int)cudaErrorInvalidValue;
	return KC_DISPATCH(t, grid_ids_t, c, y, F, H, W, center);
}

extern "C" int kc_text_ids(kc_ctx *c, enum kc_dtype t, void *y, int64_t length, int64_t first,
			   int64_t axes)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (length < 1 || axes < 1)
		return (int)cudaErrorInvalidValue;
	return KC_DISPATCH(t, text_ids_t, c, y, length, first, axes);
}

static int patch_entry(kc_ctx *c, enum kc_dtype t, const void *x, void *y, Grid g, bool to_tokens)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (g.B < 0 || g.C < 0 || g.pt < 1 || g.ph < 1 || g.pw < 1 || g.F % g.pt || g.H % g.ph ||
	    g.W % g.pw || (t != KC_F32 && t != KC_BF16 && t != KC_F16))
		return (int)cudaErrorInvalidValue;
	if (g.B * g.C * g.F * g.H * g.W == 0)
		return 0;
	return patch_launch(c, t, x, y, g, to_tokens);
}

extern "C" int kc_patchify(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t B,
			   int64_t C, int64_t F, int64_t H, int64_t W, int64_t pt, int64_t ph,
			   int64_t pw)
{
	return patch_entry(c, t, x, y, Grid{B, C, F, H, W, pt, ph, pw}, true);
}

extern "C" int kc_unpatchify(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t B,
			     int64_t C, int64_t F, int64_t H, int64_t W, int64_t pt, int64_t ph,
			     int64_t pw)
{
	return patch_entry(c, t, x, y, Grid{B, C, F, H, W, pt, ph, pw}, false);
}
