/* attention.c — tiled (flash-style) attention and the ring merge of partial
 * results (see kernels.h).
 *
 * For each batch, head and block of query rows, the key/value rows are
 * visited tile by tile. A tile's scores S = scale Q K^T come from one sgemm
 * that reads q and k in place through their row strides; each row of S is
 * turned into exp(S - running max) while the running max and denominator are
 * updated, the output accumulator is rescaled by exp(old max - new max), and
 * a second sgemm adds P V. Only the block's accumulator, its running max and
 * sum, and one tile of scores live in the workspace, so memory does not grow
 * with the sequence lengths. */
#include "kernels/cpu/kernels.h"

#include <assert.h>
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

/* Tiles clipped to the problem, so short sequences get small workspaces. The
 * one place both k_attention_workspace and k_attention take them from. */
static void attn_tiles(int64_t Sq, int64_t Skv, int64_t *tq, int64_t *tk)
{
	*tq = Sq < K_ATTN_TILE_Q ? Sq : K_ATTN_TILE_Q;
	*tk = Skv < K_ATTN_TILE_KV ? Skv : K_ATTN_TILE_KV;
}

size_t k_attention_workspace(int64_t Sq, int64_t Skv, int64_t D, int64_t Dv)
{
	int64_t tq, tk;

	/* q and k are read in place by sgemm, so D sizes nothing here. */
	(void)D;
	attn_tiles(Sq, Skv, &tq, &tk);
	/* Scores [tq, tk], accumulator [tq, Dv], running max and sum [tq]. */
	return (size_t)(tq * tk + tq * Dv + 2 * tq) * sizeof(float);
}

/* Views shared by every query block of one k_attention call. */
struct attn_args {
	const float *k, *v;	/* this batch and head's first key/value row */
	int64_t q_stride, k_stride, v_stride, out_stride;
	int64_t Skv, D, Dv, tk;
	float scale;
	float *s, *o, *m, *l;	/* workspace: scores, accumulator, max, sum */
};

/* Attention of nq query rows starting at q against all Skv keys; writes nq
 * output rows (out_stride apart) and, when lse != NULL, nq log-denominators. */
static void attn_block(const struct attn_args *A, const float *q, int64_t nq,
		       float *out, float *lse)
{
	float *s = A->s, *o = A->o, *m = A->m, *l = A->l;
	int64_t Dv = A->Dv;

	for (int64_t i = 0; i < nq; i++) {
		m[i] = -INFINITY;
		l[i] = 0.0f;
	}
	/* Zeroed so the first tile's rescale by exp(-inf) = 0 is harmless. */
	memset(o, 0, (size_t)(nq * Dv) * sizeof *o);
	for (int64_t j0 = 0; j0 < A->Skv; j0 += A->tk) {
		int64_t nk = A->Skv - j0 < A->tk ? A->Skv - j0 : A->tk;

		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk,
			    (int)A->D, A->scale, q, (int)A->q_stride,
			    A->k + j0 * A->k_stride, (int)A->k_stride, 0.0f, s, (int)nk);
		for (int64_t i = 0; i < nq; i++) {
			float *si = s + i * nk, *oi = o + i * Dv;
			float mx = m[i], sum = 0.0f;

			for (int64_t j = 0; j < nk; j++)
				mx = si[j] > mx ? si[j] : mx;
			for (int64_t j = 0; j < nk; j++) {
				si[j] = expf(si[j] - mx);
				sum += si[j];
			}
			float alpha = expf(m[i] - mx);

			l[i] = l[i] * alpha + sum;
			m[i] = mx;
			if (alpha != 1.0f) {
				for (int64_t d = 0; d < Dv; d++)
					oi[d] *= alpha;
			}
		}
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nq, (int)Dv,
			    (int)nk, 1.0f, s, (int)nk, A->v + j0 * A->v_stride,
			    (int)A->v_stride, 1.0f, o, (int)Dv);
	}
	for (int64_t i = 0; i < nq; i++) {
		float inv = 1.0f / l[i];
		float *outi = out + i * A->out_stride;

		for (int64_t d = 0; d < Dv; d++)
			outi[d] = o[i * Dv + d] * inv;
		if (lse)
			lse[i] = m[i] + logf(l[i]);
	}
}

void k_attention(const float *q, int64_t q_stride, const float *k, int64_t k_stride,
		 const float *v, int64_t v_stride, float *out, float *lse,
		 int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t D, int64_t Dv,
		 void *workspace)
{
	int64_t tq, tk;

	assert(Sq >= 1 && Skv >= 1 && D >= 1 && Dv >= 1);
	assert(q_stride >= H * D && k_stride >= H * D && v_stride >= H * Dv);
	/* CBLAS takes int leading dimensions. */
	assert(q_stride <= INT_MAX && k_stride <= INT_MAX && v_stride <= INT_MAX);
	attn_tiles(Sq, Skv, &tq, &tk);

	struct attn_args A = {
		.q_stride = q_stride, .k_stride = k_stride, .v_stride = v_stride,
		.out_stride = H * Dv, .Skv = Skv, .D = D, .Dv = Dv, .tk = tk,
		.scale = (float)(1.0 / sqrt((double)D)),
	};

	A.s = workspace;
	A.o = A.s + tq * tk;
	A.m = A.o + tq * Dv;
	A.l = A.m + tq;
	for (int64_t b = 0; b < B; b++) {
		for (int64_t h = 0; h < H; h++) {
			const float *qh = q + b * Sq * q_stride + h * D;

			A.k = k + b * Skv * k_stride + h * D;
			A.v = v + b * Skv * v_stride + h * Dv;
			for (int64_t i0 = 0; i0 < Sq; i0 += tq) {
				int64_t nq = Sq - i0 < tq ? Sq - i0 : tq;

				attn_block(&A, qh + i0 * q_stride, nq,
					   out + (b * Sq + i0) * H * Dv + h * Dv,
					   lse ? lse + (b * H + h) * Sq + i0 : NULL);
			}
		}
	}
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
