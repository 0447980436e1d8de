/* elementwise.c — activations, broadcasting arithmetic, modulation and
 * strided copies (see kernels.h). All are memory-bound, so the aim is loops
 * the compiler can vectorise: unit or zero strides in the innermost loop and
 * no per-element branching on the operation. */
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec.h"

#include <assert.h>
#include <math.h>
#include <string.h>

void k_gelu(const float *x, float *y, int64_t n, bool tanh_approx)
{
	/* Both forms are rewritten so that negative x does not compute 1 + (a
	 * number near -1): erfc keeps its relative accuracy in the left tail,
	 * and 1 + tanh(u) = 2 / (1 + exp(-2u)) turns the tanh form into a
	 * sigmoid that cannot cancel. The tanh form is vectorised with k_vexp
	 * (vec.h): expf was nearly all of its time. */
	if (tanh_approx) {
		k_vec_gelu_tanh(x, y, n);
	} else {
		for (int64_t i = 0; i < n; i++)
			y[i] = 0.5f * x[i] * erfcf(-x[i] * (float)M_SQRT1_2);
	}
}

/* SiLU: y = x / (1 + exp(-x)) */
void k_silu(const float *x, float *y, int64_t n)
{
	/* For very negative x, exp overflows to inf and x / inf gives the
	 * right limit (-0), so no clamping is needed. */
	k_vec_silu(x, y, n);
}

/* tanh, correctly rounded */
void k_tanh(const float *x, float *y, int64_t n)
{
	/* in double, rounded once: the correctly rounded float32 tanh, which
	 * the CUDA kernel computes the same way (embed.c's rule) */
	for (int64_t i = 0; i < n; i++)
		y[i] = (float)tanh((double)x[i]);
}

/* sigmoid, 1 / (1 + exp(-x)) (torch.sigmoid) */
void k_sigmoid(const float *x, float *y, int64_t n)
{
	/* in double, rounded once, as k_tanh: the float32 result within half
	 * an ulp but where double's own last bits decide a tie, and the CUDA
	 * kernel computes the same expression; exp(-x) overflows to inf for
	 * very negative x, and 1 / inf is the limit 0 */
	for (int64_t i = 0; i < n; i++)
		y[i] = (float)(1.0 / (1.0 + exp(-(double)x[i])));
}

void k_activation(enum k_act act, const float *x, float *y, int64_t n)
{
	switch (act) {
	case K_ACT_GELU:
		k_gelu(x, y, n, false);
		return;
	case K_ACT_GELU_TANH:
		k_gelu(x, y, n, true);
		return;
	case K_ACT_SILU:
		k_silu(x, y, n);
		return;
	}
	assert(!"k_activation: not an activation");
}

#define K_APPLY(x, y) (op == K_ADD ? (x) + (y) : (x) * (y))

/* o = v op s (s_first: s op v) along a row, s one value broadcast. */
static inline __attribute__((always_inline)) void
binary_row_scalar(enum k_binop op, const float *v, float s, bool s_first, float *o, int64_t n)
{
	int64_t i = 0;

	for (; i + VF <= n; i += VF) {
		vf x = vf_load(v + i);

		vf_store(o + i, s_first ? K_APPLY(s, x) : K_APPLY(x, s));
	}
	for (; i < n; i++)
		o[i] = s_first ? K_APPLY(s, v[i]) : K_APPLY(v[i], s);
}

/* One innermost row of k_binary. Always inlined with a constant op, so each
 * caller gets branch-free loops specialised for the op and for which operand
 * is broadcast (stride 0) along the row. */
static inline __attribute__((always_inline)) void
binary_row(enum k_binop op, const float *a, int64_t sa, const float *b, int64_t sb,
	   float *o, int64_t n)
{
	int64_t i = 0;

	if (sa && sb) {
		for (; i + VF <= n; i += VF)
			vf_store(o + i, K_APPLY(vf_load(a + i), vf_load(b + i)));
		for (; i < n; i++)
			o[i] = K_APPLY(a[i], b[i]);
	} else if (sa) {
		binary_row_scalar(op, a, *b, false, o, n);
	} else if (sb) {
		binary_row_scalar(op, b, *a, true, o, n);
	} else {
		float v = K_APPLY(*a, *b);

		for (; i < n; i++)
			o[i] = v;
	}
}
#undef K_APPLY

void k_binary(enum k_binop op, const float *a, const int64_t *ashape,
	      const float *b, const int64_t *bshape, float *out,
	      const int64_t *oshape, int nd)
{
	/* Coalesced iteration space, innermost dimension first: size-1 output
	 * dimensions are dropped and neighbours that both operands step through
	 * alike are merged, so [1, 6, H] * [B, 6, H] runs as B rows of 6H and
	 * the inner loop is as long as the layouts allow. */
	int64_t dim[K_MAX_DIMS], sa[K_MAX_DIMS], sb[K_MAX_DIMS], idx[K_MAX_DIMS];
	int64_t na = 1, nb = 1;
	int d = 0;

	assert(nd >= 0 && nd <= K_MAX_DIMS);
	for (int i = nd - 1; i >= 0; i--) {
		assert(ashape[i] == 1 || ashape[i] == oshape[i]);
		assert(bshape[i] == 1 || bshape[i] == oshape[i]);
		if (oshape[i] == 0)
			return;
		if (oshape[i] == 1)
			continue;
		int64_t ia = ashape[i] == 1 ? 0 : na;
		int64_t ib = bshape[i] == 1 ? 0 : nb;

		if (d > 0 && ia == sa[d - 1] * dim[d - 1] && ib == sb[d - 1] * dim[d - 1]) {
			dim[d - 1] *= oshape[i];
		} else {
			dim[d] = oshape[i];
			sa[d] = ia;
			sb[d] = ib;
			idx[d] = 0;
			d++;
		}
		na *= ashape[i];
		nb *= bshape[i];
	}
	if (d == 0) {
		/* Every dimension is 1: a single element. */
		dim[0] = 1;
		sa[0] = sb[0] = 0;
		d = 1;
	}

	int64_t outer = 1;

	for (int j = 1; j < d; j++)
		outer *= dim[j];
	/* Offsets rather than pointers: stepping a pointer past the end of an
	 * operand and back is undefined even if it is never dereferenced. */
	int64_t oa = 0, ob = 0;

	for (int64_t r = 0; r < outer; r++) {
		if (op == K_ADD)
			binary_row(K_ADD, a + oa, sa[0], b + ob, sb[0], out + r * dim[0], dim[0]);
		else
			binary_row(K_MUL, a + oa, sa[0], b + ob, sb[0], out + r * dim[0], dim[0]);
		for (int j = 1; j < d; j++) {
			oa += sa[j];
			ob += sb[j];
			if (++idx[j] < dim[j])
				break;
			oa -= sa[j] * dim[j];
			ob -= sb[j] * dim[j];
			idx[j] = 0;
		}
	}
}

void k_modulate(const float *x, const float *shift, const float *scale, float *y,
		int64_t B, int64_t S, int64_t H, int64_t s_stride)
{
	assert(s_stride == 0 || s_stride == H);
	/* Per-batch rows are H apart; per-position rows S * H apart. */
	int64_t b_stride = s_stride ? S * H : H;

	for (int64_t bi = 0; bi < B; bi++) {
		for (int64_t s = 0; s < S; s++) {
			const float *sh = shift + bi * b_stride + s * s_stride;
			const float *sc = scale + bi * b_stride + s * s_stride;
			const float *xr = x + (bi * S + s) * H;
			float *yr = y + (bi * S + s) * H;
			int64_t h = 0;

			for (; h + VF <= H; h += VF)
				vf_store(yr + h, vf_load(xr + h) * (1.0f + vf_load(sc + h)) +
							 vf_load(sh + h));
			for (; h < H; h++)
				yr[h] = xr[h] * (1.0f + sc[h]) + sh[h];
		}
	}
}

void k_fill2d(float *dst, int64_t dst_stride, int64_t rows, int64_t cols, float value)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			dst[r * dst_stride + c] = value;
}

void k_copy2d(float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
	      int64_t rows, int64_t cols)
{
	k_copy2d_elems(dst, dst_stride, src, src_stride, rows, cols, sizeof *dst);
}

void k_copy2d_elems(void *dst, int64_t dst_stride, const void *src, int64_t src_stride,
		    int64_t rows, int64_t cols, size_t esize)
{
	/* Empty views may come with NULL pointers, which memcpy must not see. */
	if (rows <= 0 || cols <= 0)
		return;
	if (dst_stride == cols && src_stride == cols) {
		memcpy(dst, src, (size_t)(rows * cols) * esize);
		return;
	}
	for (int64_t r = 0; r < rows; r++)
		memcpy((char *)dst + (size_t)(r * dst_stride) * esize,
		       (const char *)src + (size_t)(r * src_stride) * esize, (size_t)cols * esize);
}
