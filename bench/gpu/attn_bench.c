/* attn_bench.c — kc_attention (bf16 forward) throughput and kc_lse_merge
 * bandwidth on CUDA device 0.
 *
 * Attention: B = 1, H * D = 3072 (H = 24 at D = 128, 48 at D = 64),
 * Sq = Skv = S for S in 1024 .. 16384; flops = 4 B H S^2 D (two GEMMs).
 * Each case twice: `attn`, kc_attention as it dispatches by default (cuDNN's
 * fused attention where the build has cuDNN and it takes the shape), and
 * `attn_own`, its own kernel (DTPC_KC_ATTENTION=own); then `attn f32` at
 * D = 128, S = 4096 (the generic f32 path, the only one f32 has).
 * Merge: B = 1, 4096 tokens, 24 heads of 128, bf16; bytes = out read and
 * written, out_blk read, both lse read and lse written; shown beside a
 * device-to-device cudaMemcpy of the out tensor (bytes = read + write).
 * Each figure: 3 warm-up runs, then the median of 10, each timed by its own
 * pair of CUDA events on the context's stream.
 *
 * One line per case, fields `key=value` after the name:
 *   attn bf16 d=128 s=4096 b=1 h=24 tflops=... ms=...
 *   attn_own bf16 d=128 s=4096 b=1 h=24 tflops=... ms=...
 *   attn f32 d=128 s=4096 b=1 h=24 tflops=... ms=...
 *   lse_merge bf16 s=4096 h=24 dv=128 gbps=... ms=...
 *   memcpy_d2d bytes=... gbps=... ms=...
 * bench/gpu/sdpa_peer.py prints PyTorch's figures in the same format. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/kernels_cuda.h"
#include "tests/gpu/gpu_util.h"

enum { WARMUP = 3, REPS = 10 };

static void *dev_random_bf16(size_t n)
{
	return dev_random(KC_BF16, n);
}

/* What one timed run does. */
struct job {
	int kind; /* 0 attention, 1 merge, 2 memcpy */
	enum kc_dtype t; /* attention's */
	void *q, *k, *v, *out, *out2;
	float *lse, *lse2;
	int64_t S, H, D;
	size_t bytes;
};

static int run_job(void *p)
{
	const struct job *j = p;
	int st;

	if (j->kind == 0)
		st = kc_attention(ctx, j->t, j->q, j->H * j->D, j->k, j->H * j->D, j->v,
				  j->H * j->D, NULL, j->out, j->lse, 1, j->S, j->S, j->H, j->D, j->D,
				  NULL);
	else if (j->kind == 1)
		st = kc_lse_merge(ctx, KC_BF16, j->out, j->lse, j->out2, j->lse2, 1, j->S, j->H,
				  j->D);
	else
		st = kc_copy(ctx, j->out, j->out2, j->bytes);
	check(st, "launch");
	return 0;
}

/* Median milliseconds of REPS runs after WARMUP, issued back to back. */
static double time_job(struct job *j)
{
	return time_median_ms(run_job, j, WARMUP, REPS, 0);
}

int main(void)
{
	static const int64_t seqs[] = { 1024, 2048, 4096, 8192, 16384 };
	static const int64_t dims[] = { 64, 128 };
	const int64_t HD = 3072, SMAX = 16384;
	char err[256];

	gpu_util_init("attn_bench", 0x5851f42d4c957f2dull, NULL);
	if (kc_device_count() == 0) {
		printf("# SKIP no CUDA device\n");
		return 77;
	}
	check(kc_create(&ctx, 0, err, sizeof err), err);

	/* one set of operands at the largest size; smaller cases use prefixes */
	struct job j = { 0 };
	j.q = dev_random_bf16((size_t)(SMAX * HD));
	j.k = dev_random_bf16((size_t)(SMAX * HD));
	j.v = dev_random_bf16((size_t)(SMAX * HD));
	j.out = dev_alloc((size_t)(SMAX * HD) * 2);
	j.lse = dev_alloc((size_t)SMAX * (size_t)(HD / 64) * sizeof(float));
	j.t = KC_BF16;
	for (size_t di = 0; di < 2; di++) {
		for (size_t si = 0; si < sizeof seqs / sizeof seqs[0]; si++) {
			j.D = dims[di];
			j.H = HD / j.D;
			j.S = seqs[si];
			double flops = 4.0 * (double)j.H * (double)j.S * (double)j.S * (double)j.D;
			for (int own = 0; own < 2; own++) {
				if (own)
					setenv("DTPC_KC_ATTENTION", "own", 1);
				else
					unsetenv("DTPC_KC_ATTENTION");
				double ms = time_job(&j);

				printf("%s bf16 d=%lld s=%lld b=1 h=%lld tflops=%.1f ms=%.3f\n",
				       own ? "attn_own" : "attn", (long long)j.D, (long long)j.S,
				       (long long)j.H, flops / ms * 1e-9, ms);
				fflush(stdout);
			}
		}
	}
	unsetenv("DTPC_KC_ATTENTION");
	kc_free(ctx, j.q);
	kc_free(ctx, j.k);
	kc_free(ctx, j.v);
	kc_free(ctx, j.out);
	kc_free(ctx, j.lse);

	/* f32: the generic path, at one size */
	struct job f = { .kind = 0, .t = KC_F32, .S = 4096, .D = 128 };
	f.H = HD / f.D;
	f.q = dev_random(KC_F32, (size_t)(f.S * HD));
	f.k = dev_random(KC_F32, (size_t)(f.S * HD));
	f.v = dev_random(KC_F32, (size_t)(f.S * HD));
	f.out = dev_alloc((size_t)(f.S * HD) * 4);
	f.lse = dev_alloc((size_t)(f.S * f.H) * sizeof(float));
	{
		double ms = time_job(&f);
		double flops = 4.0 * (double)f.H * (double)f.S * (double)f.S * (double)f.D;

		printf("attn f32 d=%lld s=%lld b=1 h=%lld tflops=%.1f ms=%.3f\n", (long long)f.D,
		       (long long)f.S, (long long)f.H, flops / ms * 1e-9, ms);
		fflush(stdout);
	}
	kc_free(ctx, f.q);
	kc_free(ctx, f.k);
	kc_free(ctx, f.v);
	kc_free(ctx, f.out);
	kc_free(ctx, f.lse);

	/* merge: lse in [-4, 4) on both sides, so every row mixes both */
	struct job m = { .kind = 1, .S = 4096, .H = 24, .D = 128 };
	size_t n = (size_t)(m.S * m.H * m.D), nrow = (size_t)(m.S * m.H);
	float *hl = xmalloc(nrow * sizeof *hl);
	m.out = dev_random_bf16(n);
	m.out2 = dev_random_bf16(n);
	m.lse = dev_alloc(nrow * sizeof(float));
	m.lse2 = dev_alloc(nrow * sizeof(float));
	for (int side = 0; side < 2; side++) {
		for (size_t i = 0; i < nrow; i++)
			hl[i] = (float)(8.0 * (double)(rng_next() >> 40) / 16777216.0 - 4.0);
		check(kc_upload(ctx, side ? m.lse2 : m.lse, hl, nrow * sizeof *hl), "kc_upload");
	}
	free(hl);
	double ms = time_job(&m);
	double bytes = 3.0 * (double)n * 2.0 + 3.0 * (double)nrow * sizeof(float);
	printf("lse_merge bf16 s=%lld h=%lld dv=%lld gbps=%.1f ms=%.4f\n", (long long)m.S,
	       (long long)m.H, (long long)m.D, bytes / ms * 1e-6, ms);

	struct job c = { .kind = 2, .out = m.out, .out2 = m.out2, .bytes = n * 2 };
	ms = time_job(&c);
	printf("memcpy_d2d bytes=%zu gbps=%.1f ms=%.4f\n", c.bytes,
	       2.0 * (double)c.bytes / ms * 1e-6, ms);
	kc_free(ctx, m.out);
	kc_free(ctx, m.out2);
	kc_free(ctx, m.lse);
	kc_free(ctx, m.lse2);
	kc_destroy(ctx);
	return 0;
}
