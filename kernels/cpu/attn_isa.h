/* attn_isa.h — the vector body of the CPU attention and exponential, included
 * by attention.c once per instruction set under `#pragma GCC target`, with
 * VW (floats per vector), MR (rows of the register tile: 2 MR accumulators
 * plus three registers must fit the register file) and ISA (the name suffix)
 * defined. Written with
 * GCC's vector extensions so the one text compiles to AVX-512, AVX2 or the
 * baseline's SSE; attention.c picks the variant at run time.
 *
 * The layout (attention.c's header says why): for one query block of TQ rows,
 * Q^T scaled is packed [D, TQ]; per key tile, scores are computed transposed,
 * S^T [keys, TQ] = K Q^T, so the softmax runs down columns, one query per
 * lane, with no horizontal reduction; then O [TQ, Dv] += P V with P read
 * from S^T. Both products are one register-tiled kernel, C (+)= A B with B's
 * rows vectors and A's elements broadcast through any strides. */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define NAME(x) CAT(x, ISA)
#define V NAME(vf)
#define VU NAME(vfu)
#define VI NAME(vi)
#define NR (2 * VW) /* columns of a register tile */

typedef float V __attribute__((vector_size(VW * 4)));
typedef float VU __attribute__((vector_size(VW * 4), aligned(4)));
typedef int32_t VI __attribute__((vector_size(VW * 4)));

#define INLINE static inline __attribute__((always_inline))

/* x in every lane: x - 0 is x for every x (-0 and NaN too), so the compiler
 * folds it to one broadcast, where 0 + x would cost an add first. */
INLINE V NAME(splat)(float x)
{
	return x - (V){ 0 };
}

/* mask ? yes : no, lane by lane, as bits (a false compare keeps NaN lanes). */
INLINE V NAME(sel)(VI mask, V yes, V no)
{
	return (V)(((VI)yes & mask) | ((VI)no & ~mask));
}

/* e^r for x = n ln2 + r, |r| <= ln2 / 2 (ln2 split in two so n ln2 is
 * exact), with Cephes' degree-6 polynomial; n is returned rounded. */
INLINE V NAME(exp_reduced)(V x, V *n_out)
{
	/* Round to nearest through the float's own rounding: 1.5 2^23 leaves
	 * no fraction bits for |x log2 e| < 2^22. */
	V n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
	V r = x - n * 0.693359375f;

	r = r - n * -2.12194440e-4f;
	V p = NAME(splat)(1.9875691500e-4f);

	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	*n_out = n;
	return p * (r * r) + r + 1.0f;
}

#if VW == 16 && defined(__AVX512F__) /* GCC's target pragma defines it; clang ignores the pragma */
/* AVX-512: e^r from exp_reduced scaled by 2^n in one VSCALEFPS, which
 * rounds once, to inf above the largest float and through the subnormals
 * to 0 below: the value of the two-factor form below, in 12 fewer
 * instructions (the clamps keep inf - inf out of the reduction; min and
 * max return their second operand, x, when it is NaN). */
INLINE V NAME(vexp)(V x)
{
	V n;

	x = (V)_mm512_min_ps(_mm512_set1_ps(89.0f),
			     _mm512_max_ps(_mm512_set1_ps(-105.0f), (__m512)x));
	V y = NAME(exp_reduced)(x, &n);

	return (V)_mm512_scalef_ps((__m512)y, (__m512)n);
}

INLINE V NAME(vexp_softmax)(V x)
{
	return NAME(vexp)(x);
}
#else
/* exp(x): e^r from exp_reduced and 2^n built in the exponent bits as two
 * factors 2^(n/2) 2^(n - n/2), so that the largest results overflow to inf
 * and the smallest fall through the subnormals to 0 as expf does (below
 * -105 even the halfway case rounds to 0). Measured against glibc's expf
 * over [-105, 89] (tests/unit, test_vexp): at most 1 ulp where expf is
 * normal (AVX-512, AVX2 and baseline alike), NaN for NaN, inf for large x,
 * 0 for -inf. */
INLINE V NAME(vexp)(V x)
{
	V n;

	x = NAME(sel)((VI)(x < -105.0f), NAME(splat)(-105.0f), x);
	x = NAME(sel)((VI)(x > 89.0f), NAME(splat)(89.0f), x);
	V y = NAME(exp_reduced)(x, &n);
	VI ni = __builtin_convertvector(n, VI);
	VI h = ni >> 1;

	return y * (V)((h + 127) << 23) * (V)((ni - h + 127) << 23);
}

/* exp(x) for the softmax, where x = score - running max <= 0 (or -inf):
 * the same value as vexp for x >= -87 (so the same 1 ulp), and exp(-87) ~
 * 1.6e-38 below, where 2^n still has a normal exponent and one factor is
 * enough. A weight that small beside the row's largest (1) changes the
 * denominator by under 2^-125 per key: nothing a float can hold. */
INLINE V NAME(vexp_softmax)(V x)
{
	V n;

	x = NAME(sel)((VI)(x < -87.0f), NAME(splat)(-87.0f), x);
	V y = NAME(exp_reduced)(x, &n);

	return y * (V)((__builtin_convertvector(n, VI) + 127) << 23);
}
#endif

void NAME(k_vexp)(const float *x, float *y, int64_t n);
void NAME(k_vexp)(const float *x, float *y, int64_t n)
{
	int64_t i = 0;

	for (; i + VW <= n; i += VW)
		*(VU *)(y + i) = NAME(vexp)(*(const VU *)(x + i));
	if (i < n) {
		/* The tail through a full vector, padded with zeros. */
		float buf[VW] = { 0 };

		for (int64_t j = i; j < n; j++)
			buf[j - i] = x[j];
		*(VU *)buf = NAME(vexp)(*(VU *)buf);
		for (int64_t j = i; j < n; j++)
			y[j] = buf[j - i];
	}
}

/* y = f(x) over n floats, a vector at a time with the tail padded; f is a
 * vector expression of `xv` (y may be x: each vector is read before it is
 * written). */
#define MAP(x, y, n, f)                                                     \
	do {                                                                \
		int64_t i_ = 0;                                             \
		for (; i_ + VW <= (n); i_ += VW) {                          \
			V xv = *(const VU *)((x) + i_);                     \
			*(VU *)((y) + i_) = (f);                            \
		}                                                           \
		if (i_ < (n)) {                                             \
			float b_[VW] = { 0 };                               \
			memcpy(b_, (x) + i_, (size_t)((n) - i_) * 4);       \
			V xv = *(VU *)b_;                                   \
			*(VU *)b_ = (f);                                    \
			memcpy((y) + i_, b_, (size_t)((n) - i_) * 4);       \
		}                                                           \
	} while (0)

/* GELU, tanh form, as k_gelu writes it: x / (1 + exp(-2u)). */
void NAME(k_vec_gelu_tanh)(const float *x, float *y, int64_t n);
void NAME(k_vec_gelu_tanh)(const float *x, float *y, int64_t n)
{
	MAP(x, y, n, xv / (1.0f + NAME(vexp)(-1.5957691216f * (xv + 0.044715f * xv * xv * xv))));
}

/* SiLU: x / (1 + exp(-x)). */
void NAME(k_vec_silu)(const float *x, float *y, int64_t n);
void NAME(k_vec_silu)(const float *x, float *y, int64_t n)
{
	MAP(x, y, n, xv / (1.0f + NAME(vexp)(-xv)));
}

#undef MAP

/* k_activation_rows' vector forms: GELU (tanh) or SiLU on rows x cols of y
 * in place, rows ld apart. */
void NAME(k_vec_act_rows)(enum k_act act, float *y, int64_t ld, int64_t rows, int64_t cols);
void NAME(k_vec_act_rows)(enum k_act act, float *y, int64_t ld, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++) {
		if (act == K_ACT_GELU_TANH)
			NAME(k_vec_gelu_tanh)(y + r * ld, y + r * ld, cols);
		else
			NAME(k_vec_silu)(y + r * ld, y + r * ld, cols);
	}
}

/* C[MR, NR] (+)= A[MR, kc] B[kc, NR]: A(r, k) = a[r ars + k acs], B's rows
 * ldb apart. 2 MR accumulators: enough independent FMAs to cover their
 * latency on two FMA ports, and per step 2 + MR loads for 2 MR FMAs. */
INLINE void NAME(tile)(int64_t kc, const float *a, int64_t ars, int64_t acs, const float *b,
		       int64_t ldb, float *c, int64_t ldc, bool acc)
{
	V c0[MR], c1[MR];

#pragma GCC unroll 16
	for (int r = 0; r < MR; r++)
		c0[r] = c1[r] = (V){ 0 };
	for (int64_t k = 0; k < kc; k++) {
		V b0 = *(const VU *)(b + k * ldb), b1 = *(const VU *)(b + k * ldb + VW);
		const float *ak = a + k * acs;

#pragma GCC unroll 16
		for (int r = 0; r < MR; r++) {
			V ar = NAME(splat)(ak[r * ars]);

			c0[r] += ar * b0;
			c1[r] += ar * b1;
		}
	}
#pragma GCC unroll 16
	for (int r = 0; r < MR; r++) {
		VU *p0 = (VU *)(c + r * ldc), *p1 = (VU *)(c + r * ldc + VW);

		if (acc) {
			*p0 += c0[r];
			*p1 += c1[r];
		} else {
			*p0 = c0[r];
			*p1 = c1[r];
		}
	}
}

/* C[m, n] (+)= A[m, kc] B[kc, n] with m % MR == 0 and n % NR == 0; column
 * panels outside so a panel of B stays in L1 across the row tiles. */
INLINE void NAME(gemm)(int64_t m, int64_t n, int64_t kc, const float *a, int64_t ars,
		       int64_t acs, const float *b, int64_t ldb, float *c, int64_t ldc, bool acc)
{
	for (int64_t j = 0; j < n; j += NR)
		for (int64_t i = 0; i < m; i += MR)
			NAME(tile)(kc, a + i * ars, ars, acs, b + j, ldb, c + i * ldc + j, ldc, acc);
}

/* The head's keys and values (batch b, head h) into the workspace's kp
 * [skv_pad, D] and vp [Skv, Dvr], rows contiguous, K's zero past Skv (the
 * last tile's register tiles read them), V's columns zero past Dv: in place
 * the rows lie H D apart, a stride that puts a tile's rows in a few of L1's
 * and L2's sets. */
static void NAME(attn_pack)(const struct attn_job *J, int64_t b, int64_t h,
			    const struct attn_ws *w)
{
	const int64_t D = J->D, Dv = J->Dv, Dvr = (Dv + NR - 1) / NR * NR;
	const float *k = J->k + b * J->Skv * J->k_stride + h * D;
	const float *v = J->v + b * J->Skv * J->v_stride + h * Dv;

	for (int64_t j = 0; j < J->Skv; j++) {
		memcpy(w->kp + j * D, k + j * J->k_stride, (size_t)D * sizeof *w->kp);
		memcpy(w->vp + j * Dvr, v + j * J->v_stride, (size_t)Dv * sizeof *w->vp);
		memset(w->vp + j * Dvr + Dv, 0, (size_t)(Dvr - Dv) * sizeof *w->vp);
	}
	memset(w->kp + J->Skv * D, 0, (size_t)((J->skv_pad - J->Skv) * D) * sizeof *w->kp);
}

/* One query block (batch b, head h, rows i0 .. i0 + TQ) against all keys,
 * packed by attn_pack. */
static void NAME(attn_block)(const struct attn_job *J, int64_t b, int64_t h, int64_t i0,
			     const struct attn_ws *w)
{
	const int64_t D = J->D, Dv = J->Dv, Dvr = (Dv + NR - 1) / NR * NR;
	const int64_t nq = J->Sq - i0 < ATT_TQ ? J->Sq - i0 : ATT_TQ;
	float *qt = w->qt, *s = w->s, *o = w->o, *m = w->m, *l = w->l, *al = w->alpha;
	const float *q = J->q + (b * J->Sq + i0) * J->q_stride + h * D;

	/* Q^T, scaled once here rather than in every score; query columns
	 * past the block's end are zeros and their results are dropped.
	 * Row by row: the rows lie H D apart, and read down a column they
	 * would fight over a few of L1's sets. */
	const float scale = J->scale; /* a local: the stores to qt could alias J */

	for (int64_t i = 0; i < nq; i++)
		for (int64_t d = 0; d < D; d++)
			qt[d * ATT_TQ + i] = q[i * J->q_stride + d] * scale;
	for (int64_t d = 0; nq < ATT_TQ && d < D; d++)
		for (int64_t i = nq; i < ATT_TQ; i++)
			qt[d * ATT_TQ + i] = 0.0f;
	for (int64_t i = 0; i < ATT_TQ; i++) {
		m[i] = -INFINITY;
		l[i] = 0.0f;
	}
	memset(o, 0, (size_t)(ATT_TQ * Dvr) * sizeof *o);
	for (int64_t j0 = 0; j0 < J->Skv; j0 += ATT_TK) {
		const int64_t nk = J->Skv - j0 < ATT_TK ? J->Skv - j0 : ATT_TK;
		/* Masked keys are left out of the max and get weight 0 (not
		 * exp(-inf - max), which is NaN while every key so far was
		 * masked); a tile of masked keys only is skipped. */
		const float *mk = J->mask ? J->mask + b * J->Skv + j0 : NULL;
		int64_t kept = nk;

		for (int64_t j = 0; mk && j < nk; j++)
			kept -= mk[j] == 0.0f;
		if (!kept)
			continue;

		/* whole register tiles of keys: the rows past Skv are zeros */
		NAME(gemm)((nk + MR - 1) / MR * MR, ATT_TQ, D, w->kp + j0 * D, D, 1, qt, ATT_TQ, s,
			   ATT_TQ, false);
		/* Online softmax down the columns of S^T, VW queries at once and
		 * all TQ / VW column vectors side by side, so the running maxima
		 * and sums are independent chains rather than one. */
		V mx[ATT_TQ / VW], sum[ATT_TQ / VW];

		for (int c = 0; c < ATT_TQ / VW; c++) {
			mx[c] = *(VU *)(m + c * VW);
			sum[c] = (V){ 0 };
		}
		/* without a mask, a loop with no exit but its end, so the maxima
		 * stay in registers */
		for (int64_t j = 0; !mk && j < nk; j++) {
#pragma GCC unroll 16
			for (int c = 0; c < ATT_TQ / VW; c++) {
				V sj = *(VU *)(s + j * ATT_TQ + c * VW);

				mx[c] = NAME(sel)((VI)(sj > mx[c]), sj, mx[c]);
			}
		}
		for (int64_t j = 0; mk && j < nk; j++) {
			if (mk[j] == 0.0f)
				continue;
			for (int c = 0; c < ATT_TQ / VW; c++) {
				V sj = *(VU *)(s + j * ATT_TQ + c * VW);

				mx[c] = NAME(sel)((VI)(sj > mx[c]), sj, mx[c]);
			}
		}
		for (int64_t j = 0; j < nk; j++) {
			if (mk && mk[j] == 0.0f) {
				memset(s + j * ATT_TQ, 0, ATT_TQ * sizeof *s);
				continue;
			}
			for (int c = 0; c < ATT_TQ / VW; c++) {
				VU *sj = (VU *)(s + j * ATT_TQ + c * VW);
				V pj = NAME(vexp_softmax)(*sj - mx[c]);

				*sj = pj;
				sum[c] += pj;
			}
		}
		for (int c = 0; c < ATT_TQ / VW; c++) {
			V a = NAME(vexp_softmax)(*(VU *)(m + c * VW) - mx[c]);

			*(VU *)(al + c * VW) = a;
			*(VU *)(l + c * VW) = *(VU *)(l + c * VW) * a + sum[c];
			*(VU *)(m + c * VW) = mx[c];
		}
		if (j0 > 0) {
			for (int64_t i = 0; i < ATT_TQ; i++) {
				V a = NAME(splat)(al[i]);

				for (int64_t d = 0; d < Dvr; d += VW)
					*(VU *)(o + i * Dvr + d) *= a;
			}
		}
		NAME(gemm)(ATT_TQ, Dvr, nk, s, 1, ATT_TQ, w->vp + j0 * Dvr, Dvr, o, Dvr, true);
	}
	float *out = J->out + (b * J->Sq + i0) * J->H * Dv + h * Dv;

	for (int64_t i = 0; i < nq; i++) {
		/* l = 0: every key masked, an empty row: zeros, and an LSE of
		 * -inf that the ring merge reads as empty (a NaN l stays NaN) */
		float inv = l[i] == 0.0f ? 0.0f : 1.0f / l[i];
		float *oi = out + i * J->H * Dv;
		int64_t d = 0;

		for (; d + VW <= Dv; d += VW)
			*(VU *)(oi + d) = *(VU *)(o + i * Dvr + d) * inv;
		for (; d < Dv; d++)
			oi[d] = o[i * Dvr + d] * inv;
		if (J->lse)
			J->lse[(b * J->H + h) * J->Sq + i0 + i] =
				l[i] == 0.0f ? -INFINITY : m[i] + logf(l[i]);
	}
}

/* Task t: one (batch, head) and its chunk of the query blocks; the head's
 * keys and values are packed once for the chunk. */
static void NAME(attn_task)(void *arg, int64_t t, int worker)
{
	const struct attn_job *J = arg;
	struct attn_ws w = attn_layout(J->ws + (size_t)worker * J->ws_bytes, J->skv_pad, J->D,
				       J->dvp);
	int64_t bh = t / J->chunks, chunk = t % J->chunks, b = bh / J->H, h = bh % J->H;
	int64_t blocks = (J->Sq + ATT_TQ - 1) / ATT_TQ;
	int64_t lo = blocks * chunk / J->chunks, hi = blocks * (chunk + 1) / J->chunks;

	if (lo == hi)
		return;
	NAME(attn_pack)(J, b, h, &w);
	for (int64_t blk = lo; blk < hi; blk++)
		NAME(attn_block)(J, b, h, blk * ATT_TQ, &w);
}

#undef INLINE
#undef NR
#undef VI
#undef VU
#undef V
#undef NAME
#undef CAT
#undef CAT_
