/* attention.c — flash-style attention and the ring merge of partial results
 * (see kernels.h).
 *
 * Work is split into tasks of one batch, one head and one block of ATT_TQ
 * query rows, run on the caller's pool. A task visits the keys in tiles of
 * ATT_TK rows, so what it touches stays in L2 whatever the sequence length:
 * Q^T [D, TQ], one tile of keys and values read in place, the scores S^T
 * [TK, TQ] and the accumulator O [TQ, Dv] — about 270 KiB at head dim 128.
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
	int64_t dvp;       /* Dv rounded up to ATT_NR_MAX: the workspace's row */
	float scale;
	float *ws;         /* per worker: ws_floats each */
	size_t ws_floats;
};

/* Floats of one worker's workspace (attn_isa.h lays it out). */
static size_t attn_ws_floats(int64_t D, int64_t Dv)
{
	int64_t dvp = (Dv + ATT_NR_MAX - 1) / ATT_NR_MAX * ATT_NR_MAX;

	/* Q^T, S^T, a padded V tile, O, max / sum / rescale, a key tail;
	 * rounded to 16 floats so every worker's share stays 64-byte aligned. */
	size_t n = (size_t)(D * ATT_TQ + ATT_TK * ATT_TQ + ATT_TK * dvp + ATT_TQ * dvp +
			    3 * ATT_TQ + ATT_MR_MAX * D);
	return (n + 15) / 16 * 16;
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

size_t k_attention_workspace(int64_t Sq, int64_t Skv, int64_t D, int64_t Dv)
{
	/* Tiles are fixed, so the sequence lengths size nothing. */
	(void)Sq;
	(void)Skv;
	return attn_ws_floats(D, Dv) * sizeof(float);
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
		.dvp = (Dv + ATT_NR_MAX - 1) / ATT_NR_MAX * ATT_NR_MAX,
		.scale = (float)(1.0 / sqrt((double)D)),
		.ws = workspace, .ws_floats = attn_ws_floats(D, Dv),
	};
	int64_t tasks = B * H * ((Sq + ATT_TQ - 1) / ATT_TQ);
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

				for (int64_t d = 0; d < Dv; d++)
					o[d] = wa * o[d] + wb * ob[d];
				lse[li] = ln;
			}
		}
	}
}
