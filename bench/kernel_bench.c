/* kernel_bench.c — CPU attention throughput against the GEMM rate.
 *
 * Attention is two matrix products per head (Q·K^T and P·V: 4·Sq·Skv·D
 * flops) plus the softmax; the flash kernel should run close to what sgemm
 * reaches on the same machine. The machine's sgemm rate is OpenBLAS on a
 * square 1024^3 product (compute-bound); the Flux rows are the mid-size
 * Flux's linear layers (1152 tokens, hidden 512). One thread unless the row
 * says 2 (attention on a 2-thread pool, sgemm with 2 OpenBLAS threads).
 * The k_linear rows are the CPU device's float32 GEMM on the same shapes
 * (its own register tiles where the CPU has AVX-512, OpenBLAS elsewhere).
 * Median of 7 repetitions after a warm-up. One-thread rows are timed in the
 * thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so time the machine gives
 * to other tenants is not counted; 2-thread rows can only be wall-clock, and
 * read high on a busy machine.
 *
 * Linear + activation fused (k_linear_act_*) against the pair it replaces
 * (the linear, then the activation over all of y, as the CPU device runs
 * them apart: for bf16, y widened to float32, the activation, rounded
 * back), on the MLP's first layer of the full-size Flux (hidden 3072 ->
 * 12288, GELU tanh form) at m = 256 tokens, one thread: the real 4608
 * tokens take seconds a call here and the fusion saves per row what it
 * saves at any m. Printed as the ratio of the pair's time to the fused one.
 *
 * The bf16 rows run the AMX attention (where the CPU has AMX) on the same
 * random operands rounded to bf16, 1 thread: mid Flux and one step of ring 2
 * on it (576 queries against 576 keys).
 *
 * Prints a table; --json FILE writes the figures. */
#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/median.h"
#include "kernels/cpu/kernels.h"

static clockid_t clock_id = CLOCK_THREAD_CPUTIME_ID;

static double now(void)
{
	struct timespec ts;
	clock_gettime(clock_id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *randn(size_t n, unsigned *seed)
{
	float *p = malloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)rand_r(seed) / (float)RAND_MAX * 2 - 1;
	return p;
}

struct row {
	const char *what;
	long m, n, k;
	double sec, gflops;
};

static double median_of(int reps, void (*fn)(void *), void *arg)
{
	double t[16];
	fn(arg); /* warm-up */
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		fn(arg);
		t[r] = now() - t0;
	}
	return median(t, reps);
}

struct gemm_arg {
	const float *a, *b;
	float *c;
	int m, n, k;
	bool ours; /* k_linear_pool (dtpc's own tiles on AVX-512), else OpenBLAS */
	void *ws;  /* k_linear_workspace(1), as the CPU device passes it */
};

static void run_gemm(void *p)
{
	struct gemm_arg *g = p;

	if (g->ours) {
		k_linear_pool(NULL, g->a, g->b, NULL, g->c, g->m, g->k, g->n, g->ws);
		return;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->m, g->n, g->k, 1, g->a, g->k,
		    g->b, g->k, 0, g->c, g->n);
}

struct attn_arg {
	const float *q, *k, *v;
	float *out, *lse;
	long S, H, D;
	struct k_pool *pool;
	void *ws;
};

static void run_attn(void *p)
{
	struct attn_arg *a = p;
	k_attention_pool(a->pool, a->q, a->H * a->D, a->k, a->H * a->D, a->v, a->H * a->D, NULL, a->out,
			 a->lse, 1, a->S, a->S, a->H, a->D, a->D, a->ws);
}

/* The same operands rounded to bf16, through the AMX kernel (the CPU
 * device's bf16 attention where it can: kernels.h). */
struct attn_bf16_arg {
	uint16_t *q, *k, *v, *out;
	float *lse;
	long S, H, D;
	void *ws;
};

static void run_attn_bf16(void *p)
{
	struct attn_bf16_arg *a = p;
	k_attention_bf16_pool(NULL, a->q, a->H * a->D, a->k, a->H * a->D, a->v, a->H * a->D, a->out,
			      a->lse, 1, a->S, a->S, a->H, a->D, a->D, a->ws);
}

static struct row rows[32];
static int nrows;

struct act_arg {
	enum k_dtype t;
	const void *x, *w, *b;
	void *y;
	float *yf; /* the unfused pair's float32 twin of y (bf16) */
	int m, n, k;
	void *ws;
};

static void run_linear_then_act(void *p)
{
	struct act_arg *a = p;
	int64_t mn = (int64_t)a->m * a->n;

	if (a->t == K_F32) {
		k_linear_pool(NULL, a->x, a->w, a->b, a->y, a->m, a->k, a->n, a->ws);
		k_activation(K_ACT_GELU_TANH, a->y, a->y, mn);
		return;
	}
	k_linear_narrow_pool(NULL, a->t, a->x, a->w, a->b, a->y, a->m, a->k, a->n, a->ws);
	k_convert(a->yf, K_F32, a->y, a->t, mn);
	k_activation(K_ACT_GELU_TANH, a->yf, a->yf, mn);
	k_convert(a->y, a->t, a->yf, K_F32, mn);
}

static void run_linear_act(void *p)
{
	struct act_arg *a = p;

	if (a->t == K_F32)
		k_linear_act_pool(NULL, a->x, a->w, a->b, a->y, a->m, a->k, a->n,
				  K_ACT_GELU_TANH, a->ws);
	else
		k_linear_act_narrow_pool(NULL, a->t, a->x, a->w, a->b, a->y, a->m, a->k, a->n,
					 K_ACT_GELU_TANH, a->ws);
}

/* The pair's time over the fused op's, both rows recorded. */
static double act_rows(const char *pair, const char *fused, enum k_dtype t, int m, int n, int k,
		       unsigned *seed)
{
	size_t e = k_dtype_size(t);
	void *in[3];
	int64_t len[3] = { (int64_t)m * k, (int64_t)n * k, n };

	/* x, w and b in the storage dtype */
	for (int i = 0; i < 3; i++) {
		float *f = randn((size_t)len[i], seed);

		in[i] = malloc((size_t)len[i] * e);
		k_convert(in[i], t, f, K_F32, len[i]);
		free(f);
	}
	size_t ws = t == K_F32 ? k_linear_workspace(1) : k_linear_narrow_workspace(1, m, k, n);
	struct act_arg a = { t, in[0], in[1], in[2], malloc((size_t)m * n * e),
			     malloc((size_t)m * n * 4), m, n, k,
			     aligned_alloc(64, (ws + 63) / 64 * 64) };

	clock_id = CLOCK_THREAD_CPUTIME_ID;
	double t_pair = median_of(5, run_linear_then_act, &a);
	double t_fused = median_of(5, run_linear_act, &a);

	rows[nrows++] = (struct row){ pair, m, n, k, t_pair, 2.0 * m * n * k / t_pair * 1e-9 };
	rows[nrows++] = (struct row){ fused, m, n, k, t_fused, 2.0 * m * n * k / t_fused * 1e-9 };
	for (int i = 0; i < 3; i++)
		free(in[i]);
	free(a.y);
	free(a.yf);
	free(a.ws);
	return t_pair / t_fused;
}

static double gemm_row(const char *what, int m, int n, int k, int threads, bool ours,
		       unsigned *seed)
{
	struct gemm_arg g = { randn((size_t)m * k, seed), randn((size_t)n * k, seed),
			      malloc((size_t)m * n * 4), m, n, k, ours,
			      aligned_alloc(64, k_linear_workspace(1) + 64) };
	openblas_set_num_threads(threads);
	clock_id = threads > 1 ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID;
	double t = median_of(7, run_gemm, &g);
	openblas_set_num_threads(1);
	rows[nrows++] = (struct row){ what, m, n, k, t, 2.0 * m * n * k / t * 1e-9 };
	free((void *)g.a);
	free((void *)g.b);
	free(g.c);
	free(g.ws);
	return rows[nrows - 1].gflops;
}

static double attn_row(const char *what, long S, long H, long D, int threads, unsigned *seed)
{
	struct k_pool *pool = threads > 1 ? k_pool_create(threads) : NULL;
	struct attn_arg a = { randn((size_t)(S * H * D), seed), randn((size_t)(S * H * D), seed),
			      randn((size_t)(S * H * D), seed), malloc((size_t)(S * H * D) * 4),
			      malloc((size_t)(S * H) * 4), S, H, D, pool,
			      aligned_alloc(64, (size_t)threads * k_attention_workspace(S, S, D, D)) };
	clock_id = threads > 1 ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID;
	double t = median_of(5, run_attn, &a);
	rows[nrows++] = (struct row){ what, S, S, D, t, 4.0 * S * S * D * H / t * 1e-9 };
	free((void *)a.q);
	free((void *)a.k);
	free((void *)a.v);
	free(a.out);
	free(a.lse);
	free(a.ws);
	k_pool_free(pool);
	return rows[nrows - 1].gflops;
}

/* A row of the AMX attention, 1 thread; no row where the CPU has no AMX. */
static void attn_bf16_row(const char *what, long S, long H, long D, unsigned *seed)
{
	size_t n = (size_t)(S * H * D);

	if (!k_attention_bf16_available(D, D)) {
		printf("(%s: skipped, no AMX here)\n", what);
		return;
	}
	struct attn_bf16_arg a = { malloc(n * 2), malloc(n * 2), malloc(n * 2), malloc(n * 2),
				   malloc((size_t)(S * H) * 4), S, H, D,
				   aligned_alloc(64, (k_attention_bf16_workspace(S, D, D) + 63) / 64 * 64) };
	uint16_t *ops[3] = { a.q, a.k, a.v };

	for (int i = 0; i < 3; i++) {
		float *f = randn(n, seed);

		k_convert(ops[i], K_BF16, f, K_F32, (int64_t)n);
		free(f);
	}
	clock_id = CLOCK_THREAD_CPUTIME_ID;
	double t = median_of(5, run_attn_bf16, &a);
	rows[nrows++] = (struct row){ what, S, S, D, t, 4.0 * S * S * D * H / t * 1e-9 };
	for (int i = 0; i < 3; i++)
		free(ops[i]);
	free(a.out);
	free(a.lse);
	free(a.ws);
}

int main(int argc, char **argv)
{
	const char *json = argc == 3 && !strcmp(argv[1], "--json") ? argv[2] : NULL;
	unsigned seed = 7;

	double peak = gemm_row("sgemm square (the machine's rate)", 1024, 1024, 1024, 1, false, &seed);
	gemm_row("sgemm Flux qkv (1152 x 512 -> 1536)", 1152, 1536, 512, 1, false, &seed);
	gemm_row("sgemm Flux mlp (1152 x 512 -> 2048)", 1152, 2048, 512, 1, false, &seed);
	gemm_row("sgemm Flux out (1152 x 2560 -> 512)", 1152, 512, 2560, 1, false, &seed);
	gemm_row("sgemm square, 2 threads", 1024, 1024, 1024, 2, false, &seed);
	/* what the CPU device runs: its own tiles where the CPU has AVX-512 */
	gemm_row("k_linear square", 1024, 1024, 1024, 1, true, &seed);
	gemm_row("k_linear Flux qkv (1152 x 512 -> 1536)", 1152, 1536, 512, 1, true, &seed);
	gemm_row("k_linear Flux mlp (1152 x 512 -> 2048)", 1152, 2048, 512, 1, true, &seed);
	gemm_row("k_linear Flux out (1152 x 2560 -> 512)", 1152, 512, 2560, 1, true, &seed);
	double a[4];
	a[0] = attn_row("attention 16 x 64, with LSE", 1024, 16, 64, 1, &seed);
	a[1] = attn_row("attention 16 x 64, with LSE", 2048, 16, 64, 1, &seed);
	a[2] = attn_row("attention 8 x 128, with LSE", 1024, 8, 128, 1, &seed);
	a[3] = attn_row("attention 8 x 128, with LSE", 2048, 8, 128, 1, &seed);
	attn_row("attention mid Flux 8 x 64", 1152, 8, 64, 1, &seed);
	attn_row("attention mid Flux 8 x 64, 2 threads", 1152, 8, 64, 2, &seed);
	attn_bf16_row("attention bf16 (AMX) mid Flux 8 x 64", 1152, 8, 64, &seed);
	attn_bf16_row("attention bf16 (AMX) ring 2 step 8 x 64", 576, 8, 64, &seed);
	double fuse_f32 = act_rows("Flux mlp f32: linear, then gelu_tanh", "Flux mlp f32: linear_act",
				   K_F32, 256, 12288, 3072, &seed);
	double fuse_bf16 = act_rows("Flux mlp bf16: linear, then gelu_tanh",
				    "Flux mlp bf16: linear_act", K_BF16, 256, 12288, 3072, &seed);
	printf("%-40s %6s %6s %5s %10s %8s\n", "kernel (1 thread unless said)", "M/Sq", "N/Skv",
	       "K/D", "ms", "GFLOP/s");
	for (int i = 0; i < nrows; i++)
		printf("%-40s %6ld %6ld %5ld %10.2f %8.1f\n", rows[i].what, rows[i].m, rows[i].n,
		       rows[i].k, rows[i].sec * 1e3, rows[i].gflops);
	printf("attention / square sgemm: D=64 S=1024 %.0f%%, S=2048 %.0f%%; D=128 S=1024 %.0f%%, "
	       "S=2048 %.0f%%\n", 100 * a[0] / peak, 100 * a[1] / peak, 100 * a[2] / peak,
	       100 * a[3] / peak);
	printf("linear + gelu_tanh (Flux mlp 3072 -> 12288, m = 256), the pair's time / fused: "
	       "f32 %.3f, bf16 %.3f\n", fuse_f32, fuse_bf16);
	if (json) {
		FILE *f = fopen(json, "w");
		if (!f)
			return 1;
		fprintf(f, "[\n");
		for (int i = 0; i < nrows; i++)
			fprintf(f, "  {\"kernel\": \"%s\", \"m\": %ld, \"n\": %ld, \"k\": %ld, \"ms\": %.3f, "
				"\"gflops\": %.2f}%s\n", rows[i].what, rows[i].m, rows[i].n, rows[i].k,
				rows[i].sec * 1e3, rows[i].gflops, i + 1 < nrows ? "," : "");
		fprintf(f, "]\n");
		fclose(f);
	}
	return 0;
}
