/* rope.cu — the rotary position embedding on the device, the family of
 * runtime/ops/rope.c and of kernels/cpu/rope.c: the tables from positions
 * (kc_rope_freqs, kc_ltx_rope_freqs) and the rotation of q and k (kc_rope).
 *
 * The tables are computed as the CPU's, step by step: float32 steps as IEEE
 * float32 operations (explicit roundings where nvcc could fuse), and exp,
 * pow, sin and cos of a float32 value computed in double and rounded once,
 * so both devices give the correctly rounded float32 result and agree bit
 * for bit; positions are read, and tables written, in the storage dtype, one
 * thread per pair over a grid-stride loop. The rotation is memory-bound:
 * one warp per position, a whole pair per access when pairs are aligned.
 * Math is float32 whatever the storage dtype. */
#include <stdint.h>

#include "kernels/cuda/kc_internal.h"

namespace {

const int THREADS = 256;
const int WARPS = THREADS / 32;

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

	for (int64_t e = kc_thread(); e < rows * pairs; e += kc_threads()) {
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

	for (int64_t e = kc_thread(); e < rows * (dim / 2); e += kc_threads()) {
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

/* k_ltx2_rope_freqs' steps, each rounded as the CPU kernel rounds it */
__device__ float ltx2_coord_dev(const kc_ltx2_rope &p, int a, int64_t g)
{
	float b[2];
	if (a == 0) {
		float pt = (float)p.patch_t, sc = (float)p.scale_t;
		for (int e = 0; e < 2; e++) {
			float x = __fmul_rn((float)g, pt);
			if (e)
				x = __fadd_rn(x, pt);
			float t = __fmul_rn(x, sc);
			t = __fadd_rn(t, (float)p.causal_offset);
			t = __fsub_rn(t, sc);
			t = t < 0.0f ? 0.0f : t;
			if (p.audio)
				t = __fmul_rn(t, (float)p.hop_length);
			b[e] = __fdiv_rn(t, (float)p.time_div);
		}
		return __fdiv_rn(__fdiv_rn(__fadd_rn(b[0], b[1]), 2.0f), (float)p.base_t);
	}
	float ps = (float)p.patch, sc = (float)p.scale_s;
	b[0] = __fmul_rn(__fmul_rn((float)g, ps), sc);
	b[1] = __fmul_rn(__fadd_rn(__fmul_rn((float)g, ps), ps), sc);
	return __fdiv_rn(__fdiv_rn(__fadd_rn(b[0], b[1]), 2.0f), (float)p.base_s);
}

__device__ float ltx2_freq_dev(const kc_ltx2_rope &p, int64_t n, int64_t k)
{
	if (p.f64) {
		double v = 0.0;
		if (n > 1) {
			double step = __ddiv_rn(1.0, (double)(n - 1));
			v = k < n / 2 ? __dmul_rn(step, (double)k)
				      : __dsub_rn(1.0, __dmul_rn(step, (double)(n - 1 - k)));
		}
		return __double2float_rn(__ddiv_rn(__dmul_rn(pow(p.theta, v), M_PI), 2.0));
	}
	float v = 0.0f;
	if (n > 1) {
		float step = __fdiv_rn(1.0f, (float)(n - 1));
		v = k < n / 2 ? __fmaf_rn(step, (float)k, 0.0f)
			      : __fmaf_rn(-step, (float)(n - 1 - k), 1.0f);
	}
	float f = __double2float_rn(pow((double)(float)p.theta, (double)v));
	return __fdiv_rn(__fmul_rn(f, (float)M_PI), 2.0f);
}

template <typename T>
__global__ void ltx2_rope_freqs_kernel(kc_ltx2_rope p, T *y, int64_t lo, int64_t rows, bool sine)
{
	int64_t P = p.axes, n = p.dim / (2 * P), pad = p.dim % (2 * P);
	int64_t nh = p.height / p.patch, nw = p.width / p.patch;

	for (int64_t e = kc_thread(); e < rows * (p.dim / 2); e += kc_threads()) {
		int64_t r = e / (p.dim / 2), j = 2 * (e % (p.dim / 2)), row = lo + r;
		float t;

		if (j < pad) {
			t = sine ? 0.0f : 1.0f;
		} else {
			int64_t k = (j - pad) / (2 * P);
			int a = (int)((j - pad) / 2 % P);
			int64_t g = p.audio ? row : a == 0 ? row / (nh * nw) : a == 1 ? row / nw % nh
											: row % nw;
			float c = ltx2_coord_dev(p, a, g);
			float ex = __fsub_rn(__fmul_rn(c, 2.0f), 1.0f);
			float ang = __fmul_rn(ltx2_freq_dev(p, n, k), ex);
			t = __double2float_rn(sine ? sin((double)ang) : cos((double)ang));
		}
		T o = kc_from_f32<T>(t);
		if (p.split) { /* one of each interleaved pair */
			y[r * (p.dim / 2) + j / 2] = o;
		} else {
			y[r * p.dim + j] = o;
			y[r * p.dim + j + 1] = o;
		}
	}
}

template <typename T>
int ltx2_rope_freqs_t(kc_ctx *c, const kc_ltx2_rope &p, void *y, int64_t lo, int64_t rows,
		      bool sine)
{
	ltx2_rope_freqs_kernel<T><<<kc_blocks_for(c, THREADS, rows * (p.dim / 2)), THREADS, 0,
				    c->stream>>>(p, (T *)y, lo, rows, sine);
	return kc_launched();
}

/* ---- rope ------------------------------------------------------------------------------ */

/* One warp per position (b, s); its lanes walk the pairs of one head at a
 * time, so no division per element. W = 2 loads a pair at once when pairs
 * are aligned to their size. */
template <typename T, int W>
__global__ void rope_kernel(const T *x, int64_t x_stride, const T *cos, const T *sin, T *y,
			    int64_t y_stride, int64_t rows, int64_t S, int64_t heads, int64_t D)
{
	const int lane = threadIdx.x % 32;

	for (int64_t r = kc_warp(); r < rows; r += kc_warps()) {
		const int64_t s = r % S;
		const T *xr = x + r * x_stride, *cr = cos + s * D, *sr = sin + s * D;
		T *yr = y + r * y_stride;

		for (int64_t h = 0; h < heads; h++) {
			for (int64_t i = 2 * lane; i < D; i += 64) {
				float xv[2], cv[2], sv[2], o[2];

				if (W == 2) {
					kc_load<T, 2>(xr + h * D + i, xv);
					kc_load<T, 2>(cr + i, cv);
					kc_load<T, 2>(sr + i, sv);
				} else {
					for (int j = 0; j < 2; j++) {
						xv[j] = kc_to_f32<T>(xr[h * D + i + j]);
						cv[j] = kc_to_f32<T>(cr[i + j]);
						sv[j] = kc_to_f32<T>(sr[i + j]);
					}
				}
				o[0] = xv[0] * cv[0] - xv[1] * sv[0];
				o[1] = xv[1] * cv[1] + xv[0] * sv[1];
				if (W == 2) {
					kc_store<T, 2>(yr + h * D + i, o);
				} else {
					yr[h * D + i] = kc_from_f32<T>(o[0]);
					yr[h * D + i + 1] = kc_from_f32<T>(o[1]);
				}
			}
		}
	}
}

template <typename T>
int rope_t(kc_ctx *c, const void *xv, int64_t x_stride, const void *cv, const void *sv, void *yv,
	   int64_t y_stride, int64_t B, int64_t S, int64_t heads, int64_t D)
{
	const T *x = (const T *)xv, *cs = (const T *)cv, *sn = (const T *)sv;
	T *y = (T *)yv;
	const uintptr_t pair = 2 * sizeof(T);
	int64_t rows = B * S;
	unsigned grid = kc_blocks_for(c, WARPS, rows);
	/* A pair starts at an even element offset from each base pointer (D is
	 * even); the strides keep that so when they are even too. */
	bool vec = ((uintptr_t)x % pair | (uintptr_t)y % pair | (uintptr_t)cs % pair |
		    (uintptr_t)sn % pair) == 0 &&
		   x_stride % 2 == 0 && y_stride % 2 == 0;

	if (vec)
		rope_kernel<T, 2><<<grid, THREADS, 0, c->stream>>>(x, x_stride, cs, sn, y, y_stride,
								    rows, S, heads, D);
	else
		rope_kernel<T, 1><<<grid, THREADS, 0, c->stream>>>(x, x_stride, cs, sn, y, y_stride,
								    rows, S, heads, D);
	return kc_launched();
}

/* rope's "half" and "split" conventions (k_rope_half): one warp per row,
 * lanes over the h = R / 2 pairs (j, j + h) of each head and then over the
 * passed channels R .. D; a pair is read before it is written, so y may be
 * x. per_head: head hh's tables at column hh * h, read by both halves. */
template <typename T>
__global__ void rope_half_kernel(const T *x, int64_t x_stride, const T *cos, const T *sin, T *y,
				 int64_t y_stride, int64_t rows, int64_t S, int64_t heads,
				 int64_t D, int64_t R, bool per_head)
{
	const int lane = threadIdx.x % 32;
	const int64_t h = R / 2, width = per_head ? heads * h : R, second = per_head ? 0 : h;

	for (int64_t r = kc_warp(); r < rows; r += kc_warps()) {
		const int64_t s = r % S;
		const T *xr = x + r * x_stride;
		T *yr = y + r * y_stride;

		for (int64_t hh = 0; hh < heads; hh++) {
			const T *xh = xr + hh * D;
			const T *cr = cos + s * width + (per_head ? hh * h : 0);
			const T *sr = sin + s * width + (per_head ? hh * h : 0);
			T *yh = yr + hh * D;

			for (int64_t j = lane; j < h; j += 32) {
				float x1 = kc_to_f32<T>(xh[j]), x2 = kc_to_f32<T>(xh[j + h]);
				float o1 = x1 * kc_to_f32<T>(cr[j]) - x2 * kc_to_f32<T>(sr[j]);
				float o2 = x2 * kc_to_f32<T>(cr[j + second]) +
					   x1 * kc_to_f32<T>(sr[j + second]);

				yh[j] = kc_from_f32<T>(o1);
				yh[j + h] = kc_from_f32<T>(o2);
			}
			if (yh != xh)
				for (int64_t j = R + lane; j < D; j += 32)
					yh[j] = xh[j];
		}
	}
}

template <typename T>
int rope_half_t(kc_ctx *c, const void *xv, int64_t x_stride, const void *cv, const void *sv,
		void *yv, int64_t y_stride, int64_t B, int64_t S, int64_t heads, int64_t D,
		int64_t R, bool per_head)
{
	int64_t rows = B * S;

	rope_half_kernel<T><<<kc_blocks_for(c, WARPS, rows), THREADS, 0, c->stream>>>(
		(const T *)xv, x_stride, (const T *)cv, (const T *)sv, (T *)yv, y_stride, rows, S,
		heads, D, R, per_head);
	return kc_launched();
}

} // namespace

/* ---- entry points ------------------------------------------------------------------------- */

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

extern "C" int kc_ltx2_rope_freqs(kc_ctx *c, enum kc_dtype t, const struct kc_ltx2_rope *p,
				  void *y, int64_t lo, int64_t rows, bool sine)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (p->dim < 2 || p->dim % 2 || p->axes < 1 || p->patch_t < 1 || p->patch < 1)
		return (int)cudaErrorInvalidValue;
	if (rows == 0)
		return 0;
	return KC_DISPATCH(t, ltx2_rope_freqs_t, c, *p, y, lo, rows, sine);
}

extern "C" int kc_rope(kc_ctx *c, enum kc_dtype t, const void *x, int64_t x_stride,
		       const void *cos, const void *sin, void *y, int64_t y_stride, int64_t B,
		       int64_t S, int64_t heads, int64_t D)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (D % 2 != 0)
		return (int)cudaErrorInvalidValue;
	if (B <= 0 || S <= 0 || heads <= 0 || D <= 0)
		return 0;
	return KC_DISPATCH(t, rope_t, c, x, x_stride, cos, sin, y, y_stride, B, S, heads, D);
}

extern "C" int kc_rope_half(kc_ctx *c, enum kc_dtype t, const void *x, int64_t x_stride,
			    const void *cos, const void *sin, void *y, int64_t y_stride, int64_t B,
			    int64_t S, int64_t heads, int64_t D, int64_t R, bool per_head)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (R < 2 || R % 2 != 0 || R > D || (per_head && R != D))
		return (int)cudaErrorInvalidValue;
	if (B <= 0 || S <= 0 || heads <= 0)
		return 0;
	return KC_DISPATCH(t, rope_half_t, c, x, x_stride, cos, sin, y, y_stride, B, S, heads, D,
			   R, per_head);
}
