/* attention.c — flash-style attention and the ring merge of partial results
 * (see kernels.h).
 *
 * Work is split into tasks of one batch, one head and a chunk of its blocks
 * of ATT_TQ query rows, run on the caller's pool. A task first packs its
 * head's keys and values into contiguous rows: in place a head's rows lie
 * H D floats apart, a stride that maps a tile's rows onto a few of L1's and
 * L2's sets; packed once per task rather than read in place (or packed per
 * key tile), the mid Flux attention ran 28% faster (96 -> 123 GFLOP/s a
 * core, Sapphire Rapids). Each query block then visits the keys in tiles of
 * ATT_TK rows: Q^T [D, TQ], a tile of keys and values, the scores S^T [TK,
 * TQ] and the accumulator O [TQ, Dv], about 360 KiB at head dim 128, stay
 * in L2.
 *
 * Scores are computed transposed (S^T = K Q^T): keys are rows, queries are
 * vector lanes, so the running max, the exponentials and the denominators of
 * VW queries advance together with no horizontal reduction, and P V reads P
 * straight from S^T. Both products run on one register-tiled kernel (12 rows
 * by two vectors with AVX-512, 6 with AVX2) rather than sgemm: at these sizes BLAS spends its time
 * packing, and a BLAS call from inside the pool would start BLAS threads of
 * its own. The exponential is a vector polynomial (attn_isa.h), not expf,
 * which took a third of the time of the previous kernel.
 *
 * The vector body (attn_isa.h, with the vector exponential and the
 * activations built on it, vec.h) is compiled three times (AVX-512, AVX2 + FMA, the
 * baseline) and chosen per call by __builtin_cpu_supports: no global state
 * and no ifunc resolver, which ThreadSanitizer's runtime cannot load. */
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec.h"
#include "kernels/cpu/x86.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ATT_MR_MAX 12             /* the most rows of a register tile (AVX-512) */
#define ATT_TQ K_ATTN_TILE_Q      /* a multiple of every MR and NR */
#define ATT_TK K_ATTN_TILE_KV     /* a multiple of every MR */
#define ATT_NR_MAX 32             /* the widest register tile (AVX-512) */

_Static_assert(ATT_TQ % ATT_MR_MAX == 0 && ATT_TQ % ATT_NR_MAX == 0, "query block vs tiles");
_Static_assert(ATT_TK % ATT_MR_MAX == 0, "key tile vs register tile");

/* One k_attention call, shared read-only by its tasks. */
struct attn_job {
	const float *q, *k, *v;
	const float *mask; /* [B, Skv] or NULL */
	float *out, *lse;
	int64_t q_stride, k_stride, v_stride;
	int64_t Sq, Skv, H, D, Dv;
	int64_t dvp;       /* Dv rounded up to ATT_NR_MAX: the packed V's row */
	int64_t skv_pad;   /* Skv rounded up to ATT_MR_MAX: the packed K's rows */
	int64_t chunks;    /* tasks per (batch, head) */
	float scale;
	char *ws;          /* per worker: ws_bytes each */
	size_t ws_bytes;
};

/* In a workspace layout function (w, base, off): the next part, w.field,
 * at base + off (NULL while base is NULL: only measuring), 64-byte
 * aligned. */
#define PART(field, count)                                                      \
	do {                                                                    \
		w.field = (void *)(base ? base + off : NULL);                   \
		off += ((size_t)(count) * sizeof *w.field + 63) / 64 * 64;      \
	} while (0)

/* One worker's workspace, each part 64-byte aligned: Q^T, S^T, O and the
 * softmax's max / sum / rescale of a query block, and the head's keys and
 * values packed (attn_isa.h's attn_pack). */
struct attn_ws {
	float *qt, *s, *o, *m, *l, *alpha, *kp, *vp;
	size_t bytes;
};

static struct attn_ws attn_layout(char *base, int64_t skv_pad, int64_t D, int64_t dvp)
{
	struct attn_ws w = { 0 };
	size_t off = 0;
	PART(qt, D * ATT_TQ);
	PART(s, ATT_TK * ATT_TQ);
	PART(o, ATT_TQ * dvp);
	PART(m, ATT_TQ);
	PART(l, ATT_TQ);
	PART(alpha, ATT_TQ);
	PART(kp, skv_pad * D);
	PART(vp, skv_pad * dvp);
	w.bytes = off;
	return w;
}

static int64_t round_up(int64_t n, int64_t to)
{
	return (n + to - 1) / to * to;
}

/* Tasks per (batch, head): enough for every thread twice over where the
 * heads are few; each task packs its head's keys and values once. */
static int64_t attn_chunks(int64_t BH, int64_t blocks, int threads)
{
	int64_t chunks = BH >= 2 * threads ? 1 : (2 * threads + BH - 1) / BH;

	return chunks < blocks ? chunks : blocks;
}

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#define VW 16
#define MR 12
#define ISA avx512
#include "kernels/cpu/attn_isa.h"
#undef ISA
#undef MR
#undef VW
#pragma GCC pop_options

/* ---- bf16 on AMX ---------------------------------------------------------------- *
 * A task is one (batch, head) and a chunk of its query blocks. It packs the
 * head's keys and values once into the layouts AMX's B tiles read — K as
 * [D/2 pairs][keys] words (a pair of bf16 per key and 32-bit word), V as
 * [keys/2][Dv] words (two consecutive keys' values per column) — then per
 * query block of AB_TQ rows (copied, zero-padded, so tiles never read past
 * q) and key block of AB_TK keys: S = Q Kᵀ on four tiles (2 x 2 blocks of 16)
 * for each half of the keys, the online softmax on S's rows in float32
 * (keys past Skv weigh 0), P rounded to bf16, and P V a 32-column chunk of
 * Dv at a time into O (float32, rescaled by the softmax's correction as each
 * block lands). */
/* GCC only: clang ignores `#pragma GCC target`, so there attn_isa.h's
 * AVX-512 body (whose exponential this uses) is not AVX-512, and the fuzz
 * targets, built with clang, run the float32 path. */
#if !defined(__clang__)
#define HAVE_AMX_ATTENTION 1
#define AMX_T __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,amx-tile,amx-bf16")))
#define AB_TQ 32
/* Keys a block: S in 32-key quarters; the softmax's per-row work (the
 * horizontal max and sum, the correction's expf) is paid once for 128 keys,
 * 22% faster than 64 on mid Flux (1152 tokens, 8 x 64; 10.2 -> 7.9 ms). */
#define AB_TK 128

struct attn_bf16_job {
	const uint16_t *q, *k, *v;
	uint16_t *out;
	float *lse;
	int64_t q_stride, k_stride, v_stride;
	int64_t Sq, Skv, H, D, Dv;
	int64_t chunks;  /* tasks per (batch, head) */
	int64_t skv_pad; /* Skv rounded up to AB_TK */
	float scale;
	char *ws;
	size_t ws_bytes; /* per worker */
};

/* One worker's workspace, in bytes, each part 64-byte aligned. */
struct attn_bf16_ws {
	uint32_t *kp, *vp;
	uint16_t *qb, *pb;
	float *s, *pv, *o, *m, *l, *alpha;
	size_t bytes;
};

static struct attn_bf16_ws attn_bf16_layout(char *base, int64_t skv_pad, int64_t D, int64_t Dv)
{
	struct attn_bf16_ws w = { 0 };
	size_t off = 0;
	PART(kp, D / 2 * skv_pad);
	PART(vp, skv_pad / 2 * Dv);
	PART(qb, AB_TQ * D);
	PART(pb, AB_TQ * AB_TK);
	PART(s, AB_TQ * AB_TK);
	PART(pv, AB_TQ * 32);
	PART(o, AB_TQ * Dv);
	PART(m, AB_TQ);
	PART(l, AB_TQ);
	PART(alpha, AB_TQ);
	w.bytes = off;
	return w;
}

/* The head's keys and values into w's kp and vp, zeros past Skv. */
AMX_T static void attn_bf16_pack(const struct attn_bf16_job *J, const uint16_t *k,
				 const uint16_t *v, const struct attn_bf16_ws *w)
{
	const int64_t P = J->D / 2, sp = J->skv_pad;

	/* K: 16 keys x 16 pairs at a time, a transpose of 32-bit words */
	for (int64_t j0 = 0; j0 < sp; j0 += 16) {
		for (int64_t p0 = 0; p0 < P; p0 += 16) {
			__m512 r[16];

			for (int i = 0; i < 16; i++)
				r[i] = j0 + i < J->Skv
					       ? _mm512_castsi512_ps(_mm512_loadu_si512(
							 k + (j0 + i) * J->k_stride + 2 * p0))
					       : _mm512_setzero_ps();
			k_transpose16(r);
			for (int i = 0; i < 16; i++)
				_mm512_store_si512(w->kp + (p0 + i) * sp + j0, _mm512_castps_si512(r[i]));
		}
	}
	/* V: keys 2p and 2p + 1 interleaved, 32 columns at a time */
	const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
					    40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1,
					    32, 0);
	const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));

	for (int64_t p = 0; p < sp / 2; p++) {
		for (int64_t c = 0; c < J->Dv; c += 32) {
			__m512i a = 2 * p < J->Skv ? _mm512_loadu_si512(v + 2 * p * J->v_stride + c)
						   : _mm512_setzero_si512();
			__m512i b = 2 * p + 1 < J->Skv
					    ? _mm512_loadu_si512(v + (2 * p + 1) * J->v_stride + c)
					    : _mm512_setzero_si512();

			_mm512_storeu_si512(w->vp + p * J->Dv + c, _mm512_permutex2var_epi16(a, lo, b));
			_mm512_storeu_si512(w->vp + p * J->Dv + c + 16,
					    _mm512_permutex2var_epi16(a, hi, b));
		}
	}
}

/* The online softmax of a block's S rows (nv vectors of 16 keys each, km
 * masking the keys past Skv): each row's new max, its correction alpha and
 * sum, and P rounded to bf16 into pb. */
AMX_T __attribute__((always_inline)) static inline void
attn_bf16_softmax(const struct attn_bf16_job *J, const struct attn_bf16_ws *w,
		  const __mmask16 *km, int nv)
{
	const __m512 sc = _mm512_set1_ps(J->scale), ninf = _mm512_set1_ps(-INFINITY);

	for (int64_t r = 0; r < AB_TQ; r++) {
		__m512 sv[AB_TK / 16], mv4 = ninf;

		for (int c = 0; c < nv; c++) {
			sv[c] = _mm512_mask_mul_ps(
				ninf, km[c], _mm512_maskz_load_ps(km[c], w->s + r * AB_TK + 16 * c), sc);
			mv4 = _mm512_max_ps(mv4, sv[c]);
		}
		float mx = fmaxf(w->m[r], _mm512_reduce_max_ps(mv4));
		__m512 mv = _mm512_set1_ps(mx), sum = _mm512_setzero_ps();

		for (int c = 0; c < nv; c++) {
			/* keys past Skv weigh 0 */
			sv[c] = _mm512_maskz_mov_ps(km[c], (__m512)vexp_softmax_avx512(
							    (vf_avx512)_mm512_sub_ps(sv[c], mv)));
			sum = _mm512_add_ps(sum, sv[c]);
		}
		/* the first block: m = -inf, l = 0 and O = 0, any factor */
		float a = w->m[r] == -INFINITY ? 0.0f : expf(w->m[r] - mx);

		w->alpha[r] = a;
		w->l[r] = w->l[r] * a + _mm512_reduce_add_ps(sum);
		w->m[r] = mx;
		for (int c = 0; c < nv; c += 2)
			_mm512_store_si512(w->pb + r * AB_TK + 16 * c,
					   (__m512i)_mm512_cvtne2ps_pbh(sv[c + 1], sv[c]));
	}
}

/* One query block: rows [i0, i0 + nq) of head h, batch b, against every key. */
AMX_T static void attn_bf16_block(const struct attn_bf16_job *J, int64_t b, int64_t h,
				  int64_t i0, const struct attn_bf16_ws *w)
{
	const int64_t D = J->D, Dv = J->Dv, P = D / 2, sp = J->skv_pad;
	const int64_t nq = J->Sq - i0 < AB_TQ ? J->Sq - i0 : AB_TQ;

	for (int64_t r = 0; r < AB_TQ; r++) {
		if (r < nq)
			memcpy(w->qb + r * D, J->q + (b * J->Sq + i0 + r) * J->q_stride + h * D,
			       (size_t)D * 2);
		else
			memset(w->qb + r * D, 0, (size_t)D * 2);
		w->m[r] = -INFINITY;
		w->l[r] = 0.0f;
	}
	memset(w->o, 0, (size_t)(AB_TQ * Dv) * sizeof *w->o);
	for (int64_t j0 = 0; j0 < sp; j0 += AB_TK) {
		const int64_t nk = J->Skv - j0 < AB_TK ? J->Skv - j0 : AB_TK;
		__mmask16 km[AB_TK / 16];

		for (int c = 0; c < AB_TK / 16; c++) {
			int64_t left = nk - 16 * c;

			km[c] = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
		}
		/* S, 32 keys at a time: tiles 4-7 are its 2 x 2 blocks of 16;
		 * quarters wholly past Skv are neither computed nor read (the
		 * softmax's loads are masked), and P V skips them too */
		const int64_t quarters = round_up(nk, 32);

		for (int64_t jh = 0; jh < quarters; jh += 32) {
			k_amx_zero_sums();
			for (int64_t p0 = 0; p0 < P; p0 += 16)
				k_amx_step(w->qb + 2 * p0, w->qb + 16 * D + 2 * p0, D * 2,
					   w->kp + p0 * sp + j0 + jh, w->kp + p0 * sp + j0 + jh + 16,
					   sp * 4);
			k_amx_store_sums(w->s + jh, AB_TK);
		}
		/* a whole block with the vector count a constant: sv stays in
		 * registers; the last, partial one only as far as its keys go */
		if (quarters == AB_TK)
			attn_bf16_softmax(J, w, km, AB_TK / 16);
		else
			attn_bf16_softmax(J, w, km, (int)(quarters / 16));
		/* O = O alpha + P V, 32 columns of Dv at a time, k-steps of 32
		 * keys each */
		for (int64_t c = 0; c < Dv; c += 32) {
			k_amx_zero_sums();
			for (int64_t jh = 0; jh < quarters; jh += 32)
				k_amx_step(w->pb + jh, w->pb + 16 * AB_TK + jh, AB_TK * 2,
					   w->vp + (j0 + jh) / 2 * Dv + c,
					   w->vp + (j0 + jh) / 2 * Dv + c + 16, Dv * 4);
			k_amx_store_sums(w->pv, 32);
			for (int64_t r = 0; r < AB_TQ; r++) {
				__m512 a = _mm512_set1_ps(w->alpha[r]);
				float *o = w->o + r * Dv + c;

				_mm512_store_ps(o, _mm512_fmadd_ps(_mm512_load_ps(o), a,
								   _mm512_load_ps(w->pv + r * 32)));
				_mm512_store_ps(o + 16,
						_mm512_fmadd_ps(_mm512_load_ps(o + 16), a,
								_mm512_load_ps(w->pv + r * 32 + 16)));
			}
		}
	}
	uint16_t *out = J->out + (b * J->Sq + i0) * J->H * Dv + h * Dv;

	for (int64_t r = 0; r < nq; r++) {
		/* l = 0 cannot happen without a mask; kept as k_attention has it */
		const __m512 inv = _mm512_set1_ps(w->l[r] == 0.0f ? 0.0f : 1.0f / w->l[r]);
		const float *o = w->o + r * Dv;

		/* Dv is a multiple of 32; rounded as k_convert rounds */
		for (int64_t d = 0; d < Dv; d += 16)
			_mm256_storeu_si256((__m256i *)(out + r * J->H * Dv + d),
					    k_round_bf16x16(_mm512_mul_ps(_mm512_load_ps(o + d), inv)));
		if (J->lse)
			J->lse[(b * J->H + h) * J->Sq + i0 + r] =
				w->l[r] == 0.0f ? -INFINITY : w->m[r] + logf(w->l[r]);
	}
}

AMX_T static void attn_bf16_task(void *arg, int64_t t, int worker)
{
	const struct attn_bf16_job *J = arg;
	struct attn_bf16_ws w = attn_bf16_layout(J->ws + (size_t)worker * J->ws_bytes, J->skv_pad,
						 J->D, J->Dv);
	int64_t bh = t / J->chunks, chunk = t % J->chunks, b = bh / J->H, h = bh % J->H;
	int64_t blocks = (J->Sq + AB_TQ - 1) / AB_TQ;
	int64_t lo = blocks * chunk / J->chunks, hi = blocks * (chunk + 1) / J->chunks;

	if (lo == hi)
		return;
	attn_bf16_pack(J, J->k + b * J->Skv * J->k_stride + h * J->D,
		       J->v + b * J->Skv * J->v_stride + h * J->Dv, &w);
	k_amx_begin();
	for (int64_t blk = lo; blk < hi; blk++)
		attn_bf16_block(J, b, h, blk * AB_TQ, &w);
	_tile_release();
}
#endif

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define VW 8
#define MR 6
#define ISA avx2
#include "kernels/cpu/attn_isa.h"
#undef ISA
#undef MR
#undef VW
#pragma GCC pop_options
#endif

#define VW 4
#define MR 6
#define ISA base
#include "kernels/cpu/attn_isa.h"
#undef ISA
#undef MR
#undef VW

/* Here because the attention's variants were the first to be dispatched;
 * the GEMM (linear.c) asks it too. */
enum k_isa k_cpu_isa(void)
{
	const char *want = getenv("DTPC_CPU_ISA");
	enum k_isa cap = !want ? K_ISA_AVX512 : !strcmp(want, "avx2") ? K_ISA_AVX2
					      : !strcmp(want, "base") ? K_ISA_BASE : K_ISA_AVX512;

#if defined(__x86_64__) && defined(__GNUC__)
	if (cap >= K_ISA_AVX512 && __builtin_cpu_supports("avx512f"))
		return K_ISA_AVX512;
	if (cap >= K_ISA_AVX2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return K_ISA_AVX2;
#endif
	return K_ISA_BASE;
}

/* One exported function per vector body, each dispatched per call. */
#if defined(__x86_64__) && defined(__GNUC__)
#define DISPATCH(fn, ...)                                   \
	switch (k_cpu_isa()) {                              \
	case K_ISA_AVX512:                                  \
		fn##_avx512(__VA_ARGS__);                   \
		return;                                     \
	case K_ISA_AVX2:                                    \
		fn##_avx2(__VA_ARGS__);                     \
		return;                                     \
	case K_ISA_BASE:                                    \
		fn##_base(__VA_ARGS__);                     \
		return;                                     \
	}
#else
#define DISPATCH(fn, ...) fn##_base(__VA_ARGS__)
#endif

void k_vexp(const float *x, float *y, int64_t n)
{
	DISPATCH(k_vexp, x, y, n);
}

void k_vec_gelu_tanh(const float *x, float *y, int64_t n)
{
	DISPATCH(k_vec_gelu_tanh, x, y, n);
}

void k_vec_silu(const float *x, float *y, int64_t n)
{
	DISPATCH(k_vec_silu, x, y, n);
}

void k_activation_rows(enum k_act act, float *y, int64_t ld, int64_t rows, int64_t cols)
{
	/* the exact GELU is a loop of erfcf: no vector kernel to choose */
	if (act == K_ACT_GELU) {
		for (int64_t r = 0; r < rows; r++)
			k_activation(act, y + r * ld, y + r * ld, cols);
		return;
	}
	DISPATCH(k_vec_act_rows, act, y, ld, rows, cols);
}

size_t k_attention_workspace(int64_t Sq, int64_t Skv, int64_t D, int64_t Dv)
{
	(void)Sq;
	return attn_layout(NULL, round_up(Skv, ATT_MR_MAX), D, round_up(Dv, ATT_NR_MAX)).bytes;
}

void k_attention_pool(struct k_pool *pool, const float *q, int64_t q_stride, const float *k,
		      int64_t k_stride, const float *v, int64_t v_stride, const float *mask,
		      float *out, float *lse, int64_t B, int64_t Sq, int64_t Skv, int64_t H,
		      int64_t D, int64_t Dv, void *workspace)
{
	assert(Sq >= 1 && Skv >= 1 && D >= 1 && Dv >= 1);
	assert(q_stride >= H * D && k_stride >= H * D && v_stride >= H * Dv);

	struct attn_job J = {
		.q = q, .k = k, .v = v, .mask = mask, .out = out, .lse = lse,
		.q_stride = q_stride, .k_stride = k_stride, .v_stride = v_stride,
		.Sq = Sq, .Skv = Skv, .H = H, .D = D, .Dv = Dv,
		.dvp = round_up(Dv, ATT_NR_MAX), .skv_pad = round_up(Skv, ATT_MR_MAX),
		.chunks = attn_chunks(B * H, (Sq + ATT_TQ - 1) / ATT_TQ, k_pool_threads(pool)),
		.scale = (float)(1.0 / sqrt((double)D)),
		.ws = workspace, .ws_bytes = k_attention_workspace(Sq, Skv, D, Dv),
	};
	int64_t tasks = B * H * J.chunks;
	void (*task)(void *, int64_t, int) = attn_task_base;

#if defined(__x86_64__) && defined(__GNUC__)
	switch (k_cpu_isa()) {
	case K_ISA_AVX512:
		task = attn_task_avx512;
		break;
	case K_ISA_AVX2:
		task = attn_task_avx2;
		break;
	case K_ISA_BASE:
		break;
	}
#endif
	k_pool_run(pool, tasks, task, &J);
}

void k_attention(const float *q, int64_t q_stride, const float *k, int64_t k_stride,
		 const float *v, int64_t v_stride, const float *mask, float *out, float *lse,
		 int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t D, int64_t Dv,
		 void *workspace)
{
	k_attention_pool(NULL, q, q_stride, k, k_stride, v, v_stride, mask, out, lse, B, Sq, Skv,
			 H, D, Dv, workspace);
}

bool k_attention_bf16_available(int64_t D, int64_t Dv)
{
#ifdef HAVE_AMX_ATTENTION
	return D % 32 == 0 && Dv % 32 == 0 && D >= 32 && Dv >= 32 && k_amx_available();
#else
	(void)D;
	(void)Dv;
	return false;
#endif
}

#ifdef HAVE_AMX_ATTENTION
size_t k_attention_bf16_workspace(int64_t Skv, int64_t D, int64_t Dv)
{
	return attn_bf16_layout(NULL, round_up(Skv, AB_TK), D, Dv).bytes;
}

void k_attention_bf16_pool(struct k_pool *pool, const uint16_t *q, int64_t q_stride,
			   const uint16_t *k, int64_t k_stride, const uint16_t *v,
			   int64_t v_stride, uint16_t *out, float *lse, int64_t B, int64_t Sq,
			   int64_t Skv, int64_t H, int64_t D, int64_t Dv, void *workspace)
{
	assert(Sq >= 1 && Skv >= 1 && k_attention_bf16_available(D, Dv));
	assert(q_stride >= H * D && k_stride >= H * D && v_stride >= H * Dv);
	struct attn_bf16_job J = {
		.q = q, .k = k, .v = v, .out = out, .lse = lse,
		.q_stride = q_stride, .k_stride = k_stride, .v_stride = v_stride,
		.Sq = Sq, .Skv = Skv, .H = H, .D = D, .Dv = Dv,
		.chunks = attn_chunks(B * H, (Sq + AB_TQ - 1) / AB_TQ, k_pool_threads(pool)),
		.skv_pad = round_up(Skv, AB_TK),
		.scale = (float)(1.0 / sqrt((double)D)),
		.ws = workspace, .ws_bytes = k_attention_bf16_workspace(Skv, D, Dv),
	};

	k_pool_run(pool, B * H * J.chunks, attn_bf16_task, &J);
}
#else
/* never called: k_attention_bf16_available is false here */
size_t k_attention_bf16_workspace(int64_t Skv, int64_t D, int64_t Dv)
{
	(void)Skv, (void)D, (void)Dv;
	return 0;
}

void k_attention_bf16_pool(struct k_pool *pool, const uint16_t *q, int64_t q_stride,
			   const uint16_t *k, int64_t k_stride, const uint16_t *v,
			   int64_t v_stride, uint16_t *out, float *lse, int64_t B, int64_t Sq,
			   int64_t Skv, int64_t H, int64_t D, int64_t Dv, void *workspace)
{
	(void)pool, (void)q, (void)q_stride, (void)k, (void)k_stride, (void)v, (void)v_stride;
	(void)out, (void)lse, (void)B, (void)Sq, (void)Skv, (void)H, (void)workspace;
	assert(k_attention_bf16_available(D, Dv));
}
#endif

void k_lse_merge(float *out, float *lse, const float *out_blk, const float *lse_blk,
		 int64_t B, int64_t Sq, int64_t H, int64_t Dv)
{
	for (int64_t b = 0; b < B; b++) {
		for (int64_t s = 0; s < Sq; s++) {
			for (int64_t h = 0; h < H; h++) {
				int64_t li = (b * H + h) * Sq + s;
				int64_t oi = ((b * Sq + s) * H + h) * Dv;
				float la = lse[li], lb = lse_blk[li];
				float *o = out + oi;
				const float *ob = out_blk + oi;

				/* An empty side contributes nothing; its out may
				 * be uninitialised, and 0 * NaN would leak in. */
				if (lb == -INFINITY)
					continue;
				if (la == -INFINITY) {
					memcpy(o, ob, (size_t)Dv * sizeof *o);
					lse[li] = lb;
					continue;
				}
				/* log(e^a + e^b) without overflow: the larger
				 * term factored out, the smaller one <= 1. */
				float ln = fmaxf(la, lb) + log1pf(expf(-fabsf(la - lb)));
				float wa = expf(la - ln), wb = expf(lb - ln);
				int64_t d = 0;

				for (; d + VF <= Dv; d += VF)
					vf_store(o + d, wa * vf_load(o + d) + wb * vf_load(ob + d));
				for (; d < Dv; d++)
					o[d] = wa * o[d] + wb * ob[d];
				lse[li] = ln;
			}
		}
	}
}
