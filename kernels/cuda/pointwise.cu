/* pointwise.cu — norms, activations, broadcasting arithmetic, modulation,
 * strided copies and fills on the device (see kernels_cuda.h; the meaning of
 * each is that of its k_ counterpart in kernels/cpu/kernels.h).
 *
 * All of these are memory-bound, so the aims are coalesced 16-byte accesses
 * and next to no integer arithmetic per element (64-bit division costs more
 * than the load it indexes). Each kernel comes in a vector width W: W = 16
 * bytes' worth of elements when every pointer and row length lets each
 * thread's chunk start on a 16-byte boundary, else W = 1 for any layout
 * (copy2d: the widest unit up to 16 bytes that the addresses allow).
 * Math is float32 whatever the storage dtype.
 *
 * In-place use (y == x) is safe everywhere the CPU header allows it: every
 * element, pair or chunk is read and written by the same thread, and the
 * norms read a whole row for their statistics before any thread of the warp
 * writes it. */
#include <stdint.h>

#include "kernels/cuda/kc_internal.h"

namespace {

const int THREADS = 256;
const int WARPS = THREADS / 32;

bool aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* ---- activations ------------------------------------------------------------ */

/* Both GELU forms avoid 1 + (a number near -1) for negative x, as k_gelu
 * does: erfc keeps its accuracy in the left tail, and 1 + tanh(u) is
 * rewritten as the sigmoid 2 / (1 + exp(-2u)). */
struct Gelu {
	bool tanh_approx;
	__device__ float operator()(float x) const
	{
		if (tanh_approx) {
			float u = 0.7978845608f * (x + 0.044715f * x * x * x);

			return x / (1.0f + expf(-2.0f * u));
		}
		return 0.5f * x * erfcf(-x * 0.70710678118654752f);
	}
};

/* exp(-x) overflows to inf for very negative x and x / inf is the right
 * limit (-0). */
struct Silu {
	__device__ float operator()(float x) const
	{
		return x / (1.0f + expf(-x));
	}
};

/* in double, rounded once: the correctly rounded float32 tanh, as the CPU
 * kernel (k_tanh) computes it, so the two devices agree bit for bit */
struct Tanh {
	__device__ float operator()(float x) const
	{
		return (float)tanh((double)x);
	}
};

/* 1 / (1 + exp(-x)) in double, rounded once, as k_sigmoid computes it */
struct Sigmoid {
	__device__ float operator()(float x) const
	{
		return (float)(1.0 / (1.0 + exp(-(double)x)));
	}
};

/* n elements as n / W chunks, then the n % W left over one by one. */
template <typename T, int W, typename F>
__global__ void unary_kernel(const T *x, T *y, int64_t n, F f)
{
	int64_t chunks = n / W;

	for (int64_t i = kc_thread(); i < chunks; i += kc_threads()) {
		float v[W];

		kc_load<T, W>(x + i * W, v);
#pragma unroll
		for (int j = 0; j < W; j++)
			v[j] = f(v[j]);
		kc_store<T, W>(y + i * W, v);
	}
	for (int64_t i = chunks * W + kc_thread(); i < n; i += kc_threads())
		y[i] = kc_from_f32<T>(f(kc_to_f32<T>(x[i])));
}

template <typename T, typename F> int unary_t(kc_ctx *c, const void *xv, void *yv, int64_t n, F f)
{
	const T *x = (const T *)xv;
	T *y = (T *)yv;
	const int V = 16 / sizeof(T);

	if (aligned16(x) && aligned16(y))
		unary_kernel<T, V, F>
			<<<kc_blocks_for(c, THREADS * V, n), THREADS, 0, c->stream>>>(x, y, n, f);
	else
		unary_kernel<T, 1, F><<<kc_blocks_for(c, THREADS, n), THREADS, 0, c->stream>>>(x, y, n, f);
	return kc_launched();
}

template <typename F> int unary(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t n, F f)
{
	int st = kc_use_device(c);

	if (st || n <= 0)
		return st;
	switch (t) {
	case KC_F32:
		return unary_t<float>(c, x, y, n, f);
	case KC_BF16:
		return unary_t<__nv_bfloat16>(c, x, y, n, f);
	case KC_F16:
		return unary_t<__half>(c, x, y, n, f);
	}
	return (int)cudaErrorInvalidValue;
}

/* ---- norms ------------------------------------------------------------------ */

/* One warp per row: rows are a few thousand elements, which a warp streams
 * at full width, and the statistics need only shuffles, no shared memory or
 * block barriers. W divides n, so every chunk lies inside the row. Two
 * passes for the variance, as in k_layer_norm (no E[x^2] - mean^2
 * cancellation); the re-reads hit L1. */
template <typename T, int W>
__global__ void layer_norm_kernel(const T *x, T *y, int64_t rows, int64_t n, float eps,
				  const T *w, const T *b)
{
	const int lane = threadIdx.x % 32;
	const int64_t chunks = n / W;

	for (int64_t r = kc_warp(); r < rows; r += kc_warps()) {
		const T *xr = x + r * n;
		T *yr = y + r * n;
		float v[W], sum = 0, sq = 0;

		for (int64_t i = lane; i < chunks; i += 32) {
			kc_load<T, W>(xr + i * W, v);
#pragma unroll
			for (int j = 0; j < W; j++)
				sum += v[j];
		}
		const float mean = warp_sum(sum) / (float)n;

		for (int64_t i = lane; i < chunks; i += 32) {
			kc_load<T, W>(xr + i * W, v);
#pragma unroll
			for (int j = 0; j < W; j++)
				sq += (v[j] - mean) * (v[j] - mean);
		}
		const float rstd = rsqrtf(warp_sum(sq) / (float)n + eps);

		for (int64_t i = lane; i < chunks; i += 32) {
			float g[W], h[W];

			kc_load<T, W>(xr + i * W, v);
			if (w)
				kc_load<T, W>(w + i * W, g);
			if (b)
				kc_load<T, W>(b + i * W, h);
#pragma unroll
			for (int j = 0; j < W; j++) {
				float o = (v[j] - mean) * rstd;

				if (w)
					o *= g[j];
				if (b)
					o += h[j];
				v[j] = o;
			}
			kc_store<T, W>(yr + i * W, v);
		}
	}
}

/* One warp per group of `group` elements (a head, or the whole row); groups
 * of consecutive rows follow one another, so group g starts at g * group. */
template <typename T, int W>
__global__ void rms_norm_kernel(const T *x, T *y, int64_t groups, int64_t group, float eps,
				const T *w)
{
	const int lane = threadIdx.x % 32;
	const int64_t chunks = group / W;

	for (int64_t g = kc_warp(); g < groups; g += kc_warps()) {
		const T *xg = x + g * group;
		T *yg = y + g * group;
		float v[W], sq = 0;

		for (int64_t i = lane; i < chunks; i += 32) {
			kc_load<T, W>(xg + i * W, v);
#pragma unroll
			for (int j = 0; j < W; j++)
				sq += v[j] * v[j];
		}
		const float r = rsqrtf(warp_sum(sq) / (float)group + eps);

		for (int64_t i = lane; i < chunks; i += 32) {
			float s[W];

			kc_load<T, W>(xg + i * W, v);
			if (w)
				kc_load<T, W>(w + i * W, s);
#pragma unroll
			for (int j = 0; j < W; j++)
				v[j] = w ? v[j] * r * s[j] : v[j] * r;
			kc_store<T, W>(yg + i * W, v);
		}
	}
}

/* A norm whose rows (N wide) are split across ranks (k_norm_stats,
 * k_norm_apply): one warp per local row of n, float32 sums; the local parts
 * are short (N / tp), so no vector widths. mode: 0 sum(x), 1 sum(x - c) and
 * sum((x - c)^2) with c = sums[r] / N, 2 sum(x^2). */
template <typename T>
__global__ void norm_stats_kernel(const T *x, const T *sums, T *out, int64_t rows, int64_t n,
				  int64_t N, int mode)
{
	const int lane = threadIdx.x % 32;

	for (int64_t r = kc_warp(); r < rows; r += kc_warps()) {
		const T *xr = x + r * n;
		const float c = mode == 1 ? kc_to_f32<T>(sums[r]) / (float)N : 0.0f;
		float s = 0, sq = 0;

		for (int64_t i = lane; i < n; i += 32) {
			float v = kc_to_f32<T>(xr[i]) - c;

			s += v;
			sq += v * v;
		}
		s = warp_sum(s);
		sq = warp_sum(sq);
		if (lane == 0) {
			if (mode == 1) {
				out[2 * r] = kc_from_f32<T>(s);
				out[2 * r + 1] = kc_from_f32<T>(sq);
			} else {
				out[r] = kc_from_f32<T>(mode == 0 ? s : sq);
			}
		}
	}
}

template <typename T>
__global__ void norm_apply_kernel(const T *x, T *y, int64_t rows, int64_t n, int64_t N, float eps,
				  const T *s1, const T *s2, const T *w, const T *b)
{
	const int lane = threadIdx.x % 32;

	for (int64_t r = kc_warp(); r < rows; r += kc_warps()) {
		float mean = 0, ms;

		if (s1) {
			const float d = kc_to_f32<T>(s2[2 * r]) / (float)N;

			mean = kc_to_f32<T>(s1[r]) / (float)N + d;
			ms = kc_to_f32<T>(s2[2 * r + 1]) / (float)N - d * d;
		} else {
			ms = kc_to_f32<T>(s2[r]) / (float)N;
		}
		const float rstd = rsqrtf(ms + eps);

		for (int64_t i = lane; i < n; i += 32) {
			float o = (kc_to_f32<T>(x[r * n + i]) - mean) * rstd;

			if (w)
				o *= kc_to_f32<T>(w[i]);
			if (b)
				o += kc_to_f32<T>(b[i]);
			y[r * n + i] = kc_from_f32<T>(o);
		}
	}
}

template <typename T>
int norm_stats_t(kc_ctx *c, const void *x, const void *sums, void *out, int64_t rows, int64_t n,
		 int64_t N, int mode)
{
	norm_stats_kernel<T><<<kc_blocks_for(c, WARPS, rows), THREADS, 0, c->stream>>>(
		(const T *)x, (const T *)sums, (T *)out, rows, n, N, mode);
	return kc_launched();
}

template <typename T>
int norm_apply_t(kc_ctx *c, const void *x, void *y, int64_t rows, int64_t n, int64_t N, float eps,
		 const void *s1, const void *s2, const void *w, const void *b)
{
	norm_apply_kernel<T><<<kc_blocks_for(c, WARPS, rows), THREADS, 0, c->stream>>>(
		(const T *)x, (T *)y, rows, n, N, eps, (const T *)s1, (const T *)s2, (const T *)w,
		(const T *)b);
	return kc_launched();
}

/* Whether rows of n elements starting at p stay 16-byte aligned (p may be
 * NULL: an absent weight or bias). */
template <typename T> bool rows_vectorise(const void *p, int64_t n)
{
	return (!p || aligned16(p)) && n % (16 / (int64_t)sizeof(T)) == 0;
}

template <typename T>
int layer_norm_t(kc_ctx *c, const void *xv, void *yv, int64_t rows, int64_t n, float eps,
		 const void *wv, const void *bv)
{
	const T *x = (const T *)xv, *w = (const T *)wv, *b = (const T *)bv;
	T *y = (T *)yv;
	unsigned grid = kc_blocks_for(c, WARPS, rows);

	if (rows_vectorise<T>(x, n) && rows_vectorise<T>(y, n) && rows_vectorise<T>(w, n) &&
	    rows_vectorise<T>(b, n))
		layer_norm_kernel<T, 16 / sizeof(T)>
			<<<grid, THREADS, 0, c->stream>>>(x, y, rows, n, eps, w, b);
	else
		layer_norm_kernel<T, 1><<<grid, THREADS, 0, c->stream>>>(x, y, rows, n, eps, w, b);
	return kc_launched();
}

template <typename T>
int rms_norm_t(kc_ctx *c, const void *xv, void *yv, int64_t groups, int64_t group, float eps,
	       const void *wv)
{
	const T *x = (const T *)xv, *w = (const T *)wv;
	T *y = (T *)yv;
	unsigned grid = kc_blocks_for(c, WARPS, groups);

	if (rows_vectorise<T>(x, group) && rows_vectorise<T>(y, group) &&
	    rows_vectorise<T>(w, group))
		rms_norm_kernel<T, 16 / sizeof(T)>
			<<<grid, THREADS, 0, c->stream>>>(x, y, groups, group, eps, w);
	else
		rms_norm_kernel<T, 1><<<grid, THREADS, 0, c->stream>>>(x, y, groups, group, eps, w);
	return kc_launched();
}

/* ---- binary with broadcasting ------------------------------------------------- */

/* The coalesced iteration space of k_binary: dimensions innermost first,
 * size-1 output dimensions dropped, neighbours that both operands step
 * through alike merged. The output is contiguous over it. */
struct BinSpace {
	int d;
	int64_t dim[KC_MAX_DIMS], sa[KC_MAX_DIMS], sb[KC_MAX_DIMS];
};

template <int OP> __device__ __forceinline__ float apply(float a, float b)
{
	return OP == KC_ADD ? a + b : a * b;
}

/* One dimension (d == 1): operand strides are 1 or 0 (broadcast scalar). */
template <typename T, int OP, int W>
__global__ void binary_flat_kernel(const T *a, int64_t sa, const T *b, int64_t sb, T *out,
				   int64_t n)
{
	int64_t chunks = n / W;

	for (int64_t i = kc_thread(); i < chunks; i += kc_threads()) {
		float va[W], vb[W];

		if (sa)
			kc_load<T, W>(a + i * W, va);
		else
#pragma unroll
			for (int j = 0; j < W; j++)
				va[j] = kc_to_f32<T>(a[0]);
		if (sb)
			kc_load<T, W>(b + i * W, vb);
		else
#pragma unroll
			for (int j = 0; j < W; j++)
				vb[j] = kc_to_f32<T>(b[0]);
#pragma unroll
		for (int j = 0; j < W; j++)
			va[j] = apply<OP>(va[j], vb[j]);
		kc_store<T, W>(out + i * W, va);
	}
	for (int64_t i = chunks * W + kc_thread(); i < n; i += kc_threads())
		out[i] = kc_from_f32<T>(apply<OP>(kc_to_f32<T>(a[i * sa]), kc_to_f32<T>(b[i * sb])));
}

/* Operand offsets of the start of output row r (dimensions 1..d-1). */
__device__ __forceinline__ void row_offsets(const BinSpace &s, int64_t r, int64_t *oa, int64_t *ob)
{
	int64_t a = 0, b = 0;

	for (int j = 1; j < s.d; j++) {
		int64_t q = r / s.dim[j], i = r - q * s.dim[j];

		a += i * s.sa[j];
		b += i * s.sb[j];
		r = q;
	}
	*oa = a;
	*ob = b;
}

/* Several dimensions with long rows: one warp per output row of dim[0]
 * elements, so the index arithmetic is paid once per row. */
template <typename T, int OP>
__global__ void binary_rows_kernel(const T *a, const T *b, T *out, BinSpace s, int64_t rows)
{
	const int lane = threadIdx.x % 32;
	const int64_t n0 = s.dim[0], sa0 = s.sa[0], sb0 = s.sb[0];

	for (int64_t r = kc_warp(); r < rows; r += kc_warps()) {
		int64_t oa, ob;

		row_offsets(s, r, &oa, &ob);
		for (int64_t i = lane; i < n0; i += 32)
			out[r * n0 + i] = kc_from_f32<T>(
				apply<OP>(kc_to_f32<T>(a[oa + i * sa0]), kc_to_f32<T>(b[ob + i * sb0])));
	}
}

/* Several dimensions with short rows (fewer elements than a warp): one
 * thread per element, each finding its own row. */
template <typename T, int OP>
__global__ void binary_any_kernel(const T *a, const T *b, T *out, BinSpace s, int64_t n)
{
	for (int64_t e = kc_thread(); e < n; e += kc_threads()) {
		int64_t r = e / s.dim[0], i = e - r * s.dim[0], oa, ob;

		row_offsets(s, r, &oa, &ob);
		out[e] = kc_from_f32<T>(
			apply<OP>(kc_to_f32<T>(a[oa + i * s.sa[0]]), kc_to_f32<T>(b[ob + i * s.sb[0]])));
	}
}

template <typename T, int OP>
int binary_t(kc_ctx *c, const void *av, const void *bv, void *ov, const BinSpace &s, int64_t n)
{
	const T *a = (const T *)av, *b = (const T *)bv;
	T *out = (T *)ov;
	const int V = 16 / sizeof(T);

	if (s.d == 1) {
		if ((!s.sa[0] || aligned16(a)) && (!s.sb[0] || aligned16(b)) && aligned16(out))
			binary_flat_kernel<T, OP, V><<<kc_blocks_for(c, THREADS * V, n), THREADS, 0,
						       c->stream>>>(a, s.sa[0], b, s.sb[0], out, n);
		else
			binary_flat_kernel<T, OP, 1><<<kc_blocks_for(c, THREADS, n), THREADS, 0,
						       c->stream>>>(a, s.sa[0], b, s.sb[0], out, n);
	} else if (s.dim[0] >= 32) {
		int64_t rows = n / s.dim[0];

		binary_rows_kernel<T, OP>
			<<<kc_blocks_for(c, WARPS, rows), THREADS, 0, c->stream>>>(a, b, out, s, rows);
	} else {
		binary_any_kernel<T, OP>
			<<<kc_blocks_for(c, THREADS, n), THREADS, 0, c->stream>>>(a, b, out, s, n);
	}
	return kc_launched();
}

template <typename T>
int binary_op(kc_ctx *c, enum kc_binop op, const void *a, const void *b, void *out,
	      const BinSpace &s, int64_t n)
{
	return op == KC_ADD ? binary_t<T, KC_ADD>(c, a, b, out, s, n)
			    : binary_t<T, KC_MUL>(c, a, b, out, s, n);
}

/* ---- modulate ------------------------------------------------------------------- */

/* One warp per position (row of H); shift and scale rows are b_stride apart
 * per batch and s_stride per position (0: one row per batch). */
template <typename T, int W>
__global__ void modulate_kernel(const T *x, const T *shift, const T *scale, T *y, int64_t rows,
				int64_t S, int64_t H, int64_t b_stride, int64_t s_stride)
{
	const int lane = threadIdx.x % 32;
	const int64_t chunks = H / W;

	for (int64_t r = kc_warp(); r < rows; r += kc_warps()) {
		int64_t bi = r / S, si = r - bi * S, off = bi * b_stride + si * s_stride;
		const T *sh = shift + off, *sc = scale + off, *xr = x + r * H;
		T *yr = y + r * H;

		for (int64_t i = lane; i < chunks; i += 32) {
			float v[W], p[W], q[W];

			kc_load<T, W>(xr + i * W, v);
			kc_load<T, W>(sc + i * W, p);
			kc_load<T, W>(sh + i * W, q);
#pragma unroll
			for (int j = 0; j < W; j++)
				v[j] = v[j] * (1.0f + p[j]) + q[j];
			kc_store<T, W>(yr + i * W, v);
		}
	}
}

template <typename T>
int modulate_t(kc_ctx *c, const void *xv, const void *shv, const void *scv, void *yv, int64_t B,
	       int64_t S, int64_t H, int64_t s_stride)
{
	const T *x = (const T *)xv, *sh = (const T *)shv, *sc = (const T *)scv;
	T *y = (T *)yv;
	int64_t rows = B * S, b_stride = s_stride ? S * H : H;
	unsigned grid = kc_blocks_for(c, WARPS, rows);

	if (rows_vectorise<T>(x, H) && rows_vectorise<T>(y, H) && rows_vectorise<T>(sh, H) &&
	    rows_vectorise<T>(sc, H))
		modulate_kernel<T, 16 / sizeof(T)><<<grid, THREADS, 0, c->stream>>>(
			x, sh, sc, y, rows, S, H, b_stride, s_stride);
	else
		modulate_kernel<T, 1><<<grid, THREADS, 0, c->stream>>>(x, sh, sc, y, rows, S, H,
								       b_stride, s_stride);
	return kc_launched();
}

/* ---- copy2d ------------------------------------------------------------------------ */

/* One warp per piece of a row, in units U of the widest size (up to 16
 * bytes) that divides both addresses, both pitches and the row width;
 * strides here are in units. A row is cut into pieces of COPY_PIECE units
 * so that a few long rows (a concat or slice along the sequence of one
 * batch: one row of millions of elements) still spread over the whole GPU;
 * each lane issues up to UNROLL loads before its stores, so a warp keeps
 * several 512-byte requests in flight. The views do not overlap
 * (kc_copy2d's contract), hence __restrict__; source rows may overlap each
 * other (src_stride below the row width, 0 to repeat one row), which only
 * reads share. */
const int COPY_UNROLL = 4;
const int64_t COPY_PIECE = 32 * COPY_UNROLL * 16;

template <typename U>
__global__ void copy2d_kernel(U *__restrict__ dst, int64_t dst_stride,
			      const U *__restrict__ src, int64_t src_stride, int64_t rows,
			      int64_t cols, int64_t pieces)
{
	const int lane = threadIdx.x % 32;

	for (int64_t w = kc_warp(); w < rows * pieces; w += kc_warps()) {
		int64_t r = w / pieces, c0 = (w % pieces) * COPY_PIECE;
		int64_t c1 = c0 + COPY_PIECE < cols ? c0 + COPY_PIECE : cols;
		const U *s = src + r * src_stride;
		U *d = dst + r * dst_stride;

		for (int64_t i = c0 + lane; i < c1; i += 32 * COPY_UNROLL) {
			U v[COPY_UNROLL];
#pragma unroll
			for (int j = 0; j < COPY_UNROLL; j++)
				if (i + 32 * j < c1)
					v[j] = s[i + 32 * j];
#pragma unroll
			for (int j = 0; j < COPY_UNROLL; j++)
				if (i + 32 * j < c1)
					d[i + 32 * j] = v[j];
		}
	}
}

template <typename U>
int copy2d_units(kc_ctx *c, void *dst, int64_t dpitch, const void *src, int64_t spitch,
		 int64_t rows, int64_t width)
{
	const int64_t u = (int64_t)sizeof(U), cols = width / u;
	const int64_t pieces = (cols + COPY_PIECE - 1) / COPY_PIECE;

	copy2d_kernel<U><<<kc_blocks_for(c, WARPS, rows * pieces), THREADS, 0, c->stream>>>(
		(U *)dst, dpitch / u, (const U *)src, spitch / u, rows, cols, pieces);
	return kc_launched();
}

/* ---- fill2d ---------------------------------------------------------------------------- */

/* pad's constant, laid out as copy2d: one warp per piece of COPY_PIECE
 * elements of a row (a pad along the sequence of one batch is one long
 * row), lanes striding across it; the value is rounded to T once per
 * thread, the same rounding everywhere (to nearest even). */
template <typename T>
__global__ void fill2d_kernel(T *dst, int64_t dst_stride, int64_t rows, int64_t cols,
			      int64_t pieces, float value)
{
	const T v = kc_from_f32<T>(value);
	const int lane = threadIdx.x % 32;

	for (int64_t w = kc_warp(); w < rows * pieces; w += kc_warps()) {
		int64_t r = w / pieces, c0 = (w % pieces) * COPY_PIECE;
		int64_t c1 = c0 + COPY_PIECE < cols ? c0 + COPY_PIECE : cols;
		T *d = dst + r * dst_stride;

		for (int64_t i = c0 + lane; i < c1; i += 32)
			d[i] = v;
	}
}

template <typename T>
int fill2d_t(kc_ctx *c, void *dst, int64_t dst_stride, int64_t rows, int64_t cols, float value)
{
	const int64_t pieces = (cols + COPY_PIECE - 1) / COPY_PIECE;

	fill2d_kernel<T><<<kc_blocks_for(c, WARPS, rows * pieces), THREADS, 0, c->stream>>>(
		(T *)dst, dst_stride, rows, cols, pieces, value);
	return kc_launched();
}

} // namespace

/* ---- entry points ------------------------------------------------------------------------- */

extern "C" int kc_layer_norm(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t rows,
			     int64_t n, float eps, const void *w, const void *b)
{
	int st = kc_use_device(c);

	if (st || rows <= 0)
		return st;
	if (n < 1)
		return (int)cudaErrorInvalidValue;
	return KC_DISPATCH(t, layer_norm_t, c, x, y, rows, n, eps, w, b);
}

extern "C" int kc_rms_norm(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t rows,
			   int64_t n, int64_t group, float eps, const void *w)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (group < 1 || n % group != 0)
		return (int)cudaErrorInvalidValue;
	if (rows <= 0 || n <= 0)
		return 0;
	return KC_DISPATCH(t, rms_norm_t, c, x, y, rows * (n / group), group, eps, w);
}

extern "C" int kc_norm_stats(kc_ctx *c, enum kc_dtype t, const void *x, const void *sums,
			     void *out, int64_t rows, int64_t n, int64_t N, int mode)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (N < 1 || mode < 0 || mode > 2 || (mode == 1 && !sums))
		return (int)cudaErrorInvalidValue;
	if (rows <= 0)
		return 0;
	return KC_DISPATCH(t, norm_stats_t, c, x, sums, out, rows, n, N, mode);
}

extern "C" int kc_norm_apply(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t rows,
			     int64_t n, int64_t N, float eps, const void *s1, const void *s2,
			     const void *w, const void *b)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (N < 1 || !s2)
		return (int)cudaErrorInvalidValue;
	if (rows <= 0 || n <= 0)
		return 0;
	return KC_DISPATCH(t, norm_apply_t, c, x, y, rows, n, N, eps, s1, s2, w, b);
}

extern "C" int kc_gelu(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t n,
		       bool tanh_approx)
{
	return unary(c, t, x, y, n, Gelu{tanh_approx});
}

extern "C" int kc_silu(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t n)
{
	return unary(c, t, x, y, n, Silu{});
}

extern "C" int kc_tanh(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t n)
{
	return unary(c, t, x, y, n, Tanh{});
}

extern "C" int kc_sigmoid(kc_ctx *c, enum kc_dtype t, const void *x, void *y, int64_t n)
{
	return unary(c, t, x, y, n, Sigmoid{});
}

extern "C" int kc_binary(kc_ctx *c, enum kc_dtype t, enum kc_binop op, const void *a,
			 const int64_t *ashape, const void *b, const int64_t *bshape, void *out,
			 const int64_t *oshape, int nd)
{
	BinSpace s;
	int64_t na = 1, nb = 1, n = 1;
	int st = kc_use_device(c);

	if (st)
		return st;
	if (nd < 0 || nd > KC_MAX_DIMS || (op != KC_ADD && op != KC_MUL))
		return (int)cudaErrorInvalidValue;
	/* The same coalescing as k_binary (see there). */
	s.d = 0;
	for (int i = nd - 1; i >= 0; i--) {
		if ((ashape[i] != 1 && ashape[i] != oshape[i]) ||
		    (bshape[i] != 1 && bshape[i] != oshape[i]) || oshape[i] < 0)
			return (int)cudaErrorInvalidValue;
		if (oshape[i] == 0)
			return 0;
		n *= oshape[i];
		if (oshape[i] == 1)
			continue;
		int64_t ia = ashape[i] == 1 ? 0 : na, ib = bshape[i] == 1 ? 0 : nb;

		if (s.d > 0 && ia == s.sa[s.d - 1] * s.dim[s.d - 1] &&
		    ib == s.sb[s.d - 1] * s.dim[s.d - 1]) {
			s.dim[s.d - 1] *= oshape[i];
		} else {
			s.dim[s.d] = oshape[i];
			s.sa[s.d] = ia;
			s.sb[s.d] = ib;
			s.d++;
		}
		na *= ashape[i];
		nb *= bshape[i];
	}
	if (s.d == 0) {
		/* Every dimension is 1: a single element. */
		s.dim[0] = 1;
		s.sa[0] = s.sb[0] = 0;
		s.d = 1;
	}
	switch (t) {
	case KC_F32:
		return binary_op<float>(c, op, a, b, out, s, n);
	case KC_BF16:
		return binary_op<__nv_bfloat16>(c, op, a, b, out, s, n);
	case KC_F16:
		return binary_op<__half>(c, op, a, b, out, s, n);
	}
	return (int)cudaErrorInvalidValue;
}

extern "C" int kc_modulate(kc_ctx *c, enum kc_dtype t, const void *x, const void *shift,
			   const void *scale, void *y, int64_t B, int64_t S, int64_t H,
			   int64_t s_stride)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (s_stride != 0 && s_stride != H)
		return (int)cudaErrorInvalidValue;
	if (B <= 0 || S <= 0 || H <= 0)
		return 0;
	return KC_DISPATCH(t, modulate_t, c, x, shift, scale, y, B, S, H, s_stride);
}

/* Contiguous views are one cudaMemcpyAsync. Strided ones go to our kernel
 * rather than cudaMemcpy2DAsync: on an H200 the latter packed a Ulysses
 * chunk at under half the rate of a plain copy of the same bytes
 * (bench/gpu/kernel_bench), and it refuses source pitches below the row
 * width, which k_copy2d allows. */
extern "C" int kc_copy2d(kc_ctx *c, size_t elem_bytes, void *dst, int64_t dst_stride,
			 const void *src, int64_t src_stride, int64_t rows, int64_t cols)
{
	int st = kc_use_device(c);

	if (st || rows <= 0 || cols <= 0 || elem_bytes == 0)
		return st;
	const int64_t eb = (int64_t)elem_bytes, width = cols * eb;
	const int64_t dpitch = dst_stride * eb, spitch = src_stride * eb;

	/* one block of bytes: the copy engine's own rate */
	if (rows == 1 || (dst_stride == cols && src_stride == cols)) {
		st = (int)cudaMemcpyAsync(dst, src, (size_t)(rows * width), cudaMemcpyDeviceToDevice,
					  c->stream);
		if (st)
			cudaGetLastError(); /* not for the next kc_launched() to find */
		return st;
	}
	uintptr_t bits = (uintptr_t)dst | (uintptr_t)src | (uintptr_t)dpitch |
			 (uintptr_t)spitch | (uintptr_t)width;

	if (bits % 16 == 0)
		return copy2d_units<uint4>(c, dst, dpitch, src, spitch, rows, width);
	if (bits % 8 == 0)
		return copy2d_units<uint2>(c, dst, dpitch, src, spitch, rows, width);
	if (bits % 4 == 0)
		return copy2d_units<uint32_t>(c, dst, dpitch, src, spitch, rows, width);
	if (bits % 2 == 0)
		return copy2d_units<uint16_t>(c, dst, dpitch, src, spitch, rows, width);
	return copy2d_units<uint8_t>(c, dst, dpitch, src, spitch, rows, width);
}

extern "C" int kc_fill2d(kc_ctx *c, enum kc_dtype t, void *dst, int64_t dst_stride, int64_t rows,
			 int64_t cols, float value)
{
	int st = kc_use_device(c);

	if (st || rows <= 0 || cols <= 0)
		return st;
	if (rows > 1 && dst_stride < cols)
		return (int)cudaErrorInvalidValue;
	return KC_DISPATCH(t, fill2d_t, c, dst, dst_stride, rows, cols, value);
}
