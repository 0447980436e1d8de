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

__device__ __forceinline__ int64_t gtid()
{
	return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t gstride()
{
	return (int64_t)gridDim.x * blockDim.x;
}

template <typename T>
__global__ void timestep_kernel(const T *t, T *y, int64_t n, int64_t dim, bool flip, float lg,
				float den, float sc, float in)
{
	const int64_t half = dim / 2, per = half + 1; /* half pairs and the pad */

	for (int64_t e = gtid(); e < n * per; e += gstride()) {
		int64_t i = e / per, k = e % per;
		T *row = y + i * dim;

		if (k == half) {
			if (dim % 2)
				row[dim - 1] = kc_from_f32<T>(0.0f);
			continue;
		}
		/* the product rounded to the storage dtype, as diffusers'
		 * `timestep.to(dtype) * 1000` (exact for float) */
		float ts = kc_to_f32<T>(kc_from_f32<T>(__fmul_rn(kc_to_f32<T>(t[i]), in)));
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
	       double shift, double scale, double max_period, double input_scale)
{
	int64_t work = n * (dim / 2 + 1);

	timestep_kernel<T><<<kc_blocks_for(c, THREADS, work), THREADS, 0, c->stream>>>(
		(const T *)t, (T *)y, n, dim, flip, (float)-log(max_period),
		(float)((double)(dim / 2) - shift), (float)scale, (float)input_scale);
	return kc_launched();
}

/* The axes' rotary dimensions, by value (at most 6, the graph's G_NATTR;
 * room for 8). */
struct Axes {
	int64_t d[8];
	int n;
	int64_t width;
};

/* Position a of row r: read from ids, or computed as k_grid_ids /
 * k_text_ids compute it (integers below 2^24: exact in float32). */
template <typename T>
__device__ __forceinline__ float position(const T *ids, const kc_positions &ps, int64_t r,
					  int a, int n)
{
	if (ps.kind == KC_POS_TEXT)
		return (float)(ps.first + r);
	if (ps.kind == KC_POS_IDS)
		return kc_to_f32<T>(ids[r * n + a]);
	int64_t h0 = ps.center ? ps.H - ps.H / 2 : 0, w0 = ps.center ? ps.W - ps.W / 2 : 0;
	return a == 0 ? (float)(r / (ps.H * ps.W)) : a == 1 ? (float)(r / ps.W % ps.H - h0)
							     : (float)(r % ps.W - w0);
}

template <typename T>
__global__ void rope_freqs_kernel(const T *ids, kc_positions ps, T *y, int64_t rows, Axes ax,
				  double theta, bool sine, bool f64)
{
	const int64_t pairs = ax.width / 2;

	for (int64_t e = gtid(); e < rows * pairs; e += gstride()) {
		int64_t r = e / pairs, p = e % pairs, off = 0;
		int a = 0;

		while (p * 2 >= off + ax.d[a]) /* the axis of pair p */
			off += ax.d[a++];
		int64_t d = ax.d[a], j = p - off / 2;
		float pos = position<T>(ids, ps, r, a, ax.n);
		double v;

		if (f64) {
			double fr = 1.0 / pow(theta, (double)(2 * j) / (double)d);
			double ang = (double)pos * fr;

			v = sine ? sin(ang) : cos(ang);
		} else {
			float ex = __fdiv_rn((float)(2 * j), (float)d);
			float pw = __double2float_rn(pow((double)(float)theta, (double)ex));
			float ang = __fmul_rn(pos, __fdiv_rn(1.0f, pw));

			v = sine ? sin((double)ang) : cos((double)ang);
		}
		T o = kc_from_f32<T>(__double2float_rn(v));
		y[r * ax.width + 2 * p] = o;
		y[r * ax.width + 2 * p + 1] = o;
	}
}

template <typename T>
int rope_freqs_t(kc_ctx *c, const void *ids, const kc_positions &ps, void *y, int64_t rows,
		 const Axes &ax, double theta, bool sine, bool f64)
{
	rope_freqs_kernel<T><<<kc_blocks_for(c, THREADS, rows * (ax.width / 2)), THREADS, 0,
			       c->stream>>>((const T *)ids, ps, (T *)y, rows, ax, theta, sine, f64);
	return kc_launched();
}

/* k_ltx_rope_freqs' float32 steps, each rounded as the CPU kernel rounds
 * it (explicit roundings: no contraction nvcc would choose itself) */
struct LtxRope {
	float sc[3], mul[3], start, end, th;
	int64_t n, pad;
};

template <typename T>
__global__ void ltx_rope_freqs_kernel(const T *ids, T *y, int64_t rows, int64_t dim, LtxRope p,
				      bool sine)
{
	const float base[3] = { 20.0f, 2048.0f, 2048.0f };

	for (int64_t e = gtid(); e < rows * (dim / 2); e += gstride()) {
		int64_t r = e / (dim / 2), j = 2 * (e % (dim / 2));
		float t;

		if (j < p.pad) {
			t = sine ? 0.0f : 1.0f;
		} else {
			int64_t k = (j - p.pad) / 6;
			int a = (int)((j - p.pad) / 2 % 3);
			float c = __fmul_rn(kc_to_f32<T>(ids[r * 3 + a]), p.sc[a]);
			c = __fdiv_rn(__fmul_rn(c, p.mul[a]), base[a]);
			float ex = __fsub_rn(__fmul_rn(c, 2.0f), 1.0f);
			float v = p.start;
			if (p.n > 1) {
				float step = __fdiv_rn(__fsub_rn(p.end, p.start), (float)(p.n - 1));
				v = k < p.n / 2 ? __fmaf_rn(step, (float)k, p.start)
						: __fmaf_rn(-step, (float)(p.n - 1 - k), p.end);
			}
			float f = __double2float_rn(pow((double)p.th, (double)v));
			f = __fdiv_rn(__fmul_rn(f, (float)M_PI), 2.0f);
			float ang = __fmul_rn(f, ex);
			t = __double2float_rn(sine ? sin((double)ang) : cos((double)ang));
		}
		T o = kc_from_f32<T>(t);
		y[r * dim + j] = o;
		y[r * dim + j + 1] = o;
	}
}

template <typename T>
int ltx_rope_freqs_t(kc_ctx *c, const void *ids, void *y, int64_t rows, int64_t dim,
		     const LtxRope &p, bool sine)
{
	ltx_rope_freqs_kernel<T><<<kc_blocks_for(c, THREADS, rows * (dim / 2)), THREADS, 0,
				   c->stream>>>((const T *)ids, (T *)y, rows, dim, p, sine);
	return kc_launched();
}

template <typename T>
__global__ void grid_ids_kernel(T *y, int64_t F, int64_t H, int64_t W, int64_t h0, int64_t w0)
{
	for (int64_t i = gtid(); i < F * H * W; i += gstride()) {
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
	for (int64_t i = gtid(); i < length * axes; i += gstride())
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

	for (int64_t i = gtid(); i < n; i += gstride()) {
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
				     double scale, double max_period, double input_scale)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (dim < 1 || n < 0)
		return (int)cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	return KC_DISPATCH(t, timestep_t, c, ts, y, n, dim, flip, shift, scale, max_period,
			   input_scale);
}

extern "C" int kc_rope_freqs(kc_ctx *c, enum kc_dtype t, const void *ids,
			     const struct kc_positions *pos, void *y, int64_t rows, int64_t naxes,
			     const int64_t *axes_dim, double theta, bool sine, bool f64)
{
	Axes ax = {};
	int st = kc_use_device(c);

	if (st)
		return st;
	if (naxes < 1 || naxes > 8 || rows < 0 || (pos->kind == KC_POS_IDS && !ids) ||
	    (pos->kind == KC_POS_GRID &&
	     (naxes != 3 || pos->F < 1 || pos->H < 1 || pos->W < 1 ||
	      rows != pos->F * pos->H * pos->W)))
		return (int)cudaErrorInvalidValue;
	for (int a = 0; a < naxes; a++) {
		if (axes_dim[a] < 2 || axes_dim[a] % 2)
			return (int)cudaErrorInvalidValue;
		ax.d[a] = axes_dim[a];
		ax.width += axes_dim[a];
	}
	ax.n = (int)naxes;
	if (rows == 0)
		return 0;
	return KC_DISPATCH(t, rope_freqs_t, c, ids, *pos, y, rows, ax, theta, sine, f64);
}

extern "C" int kc_ltx_rope_freqs(kc_ctx *c, enum kc_dtype t, const void *ids, void *y,
				 int64_t rows, int64_t dim, const double *scale, int64_t patch_t,
				 int64_t patch, double theta, bool sine)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (dim < 2 || dim % 2 || patch_t < 1 || patch < 1 || !(theta > 0) || theta == 1)
		return (int)cudaErrorInvalidValue;
	LtxRope p = { { (float)scale[0], (float)scale[1], (float)scale[2] },
		      { (float)patch_t, (float)patch, (float)patch },
		      (float)(log(1.0) / log(theta)), (float)(log(theta) / log(theta)),
		      (float)theta, dim / 6, dim % 6 };
	if (rows == 0)
		return 0;
	return KC_DISPATCH(t, ltx_rope_freqs_t, c, ids, y, rows, dim, p, sine);
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
