/* kernel_bench.c — CPU attention throughput against the GEMM rate.
 *
 * Attention is two matrix products per head (Q·K^T and P·V: 4·Sq·Skv·D
 * flops) plus the softmax; the tiled kernel should run close to what sgemm
 * reaches on the same machine. One thread (as each rank runs), best of a
 * few repetitions. Prints a table; --json FILE writes the figures. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/kernels.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
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

static double best_of(int reps, void (*fn)(void *), void *arg)
{
	double best = 1e30;
	fn(arg); /* warm-up */
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		fn(arg);
		double dt = now() - t0;
		best = dt < best ? dt : best;
	}
	return best;
}

struct gemm_arg {
	const float *a, *b;
	float *c;
	int m, n, k;
};

static void run_gemm(void *p)
{
	struct gemm_arg *g = p;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->m, g->n, g->k, 1, g->a, g->k,
		    g->b, g->k, 0, g->c, g->n);
}

struct attn_arg {
	const float *q, *k, *v;
	float *out, *lse;
	long S, H, D;
	void *ws;
};

static void run_attn(void *p)
{
	struct attn_arg *a = p;
	k_attention(a->q, a->H * a->D, a->k, a->H * a->D, a->v, a->H * a->D, a->out, a->lse, 1,
		    a->S, a->S, a->H, a->D, a->D, a->ws);
}

int main(int argc, char **argv)
{
	const char *json = argc == 3 && !strcmp(argv[1], "--json") ? argv[2] : NULL;
	openblas_set_num_threads(1);
	unsigned seed = 7;
	struct row rows[16];
	int n = 0;
	int sizes[] = { 512, 1024, 2048 };
	for (int i = 0; i < 3; i++) {
		int s = sizes[i];
		struct gemm_arg g = { randn((size_t)s * 128, &seed), randn((size_t)s * 128, &seed),
				      malloc((size_t)s * s * 4), s, s, 128 };
		double t = best_of(5, run_gemm, &g);
		rows[n++] = (struct row){ "sgemm (S x 128) . (S x 128)^T", s, s, 128, t,
					  2.0 * s * s * 128 / t * 1e-9 };
		free((void *)g.a);
		free((void *)g.b);
		free(g.c);
	}
	for (int i = 0; i < 3; i++) {
		long S = sizes[i], H = 4, D = 128;
		struct attn_arg a = { randn((size_t)(S * H * D), &seed), randn((size_t)(S * H * D), &seed),
				      randn((size_t)(S * H * D), &seed), malloc((size_t)(S * H * D) * 4),
				      malloc((size_t)(S * H) * 4), S, H, D,
				      malloc(k_attention_workspace(S, S, D, D)) };
		double t = best_of(3, run_attn, &a);
		rows[n++] = (struct row){ "attention, 4 heads x 128, with LSE", S, S, D, t,
					  4.0 * S * S * D * H / t * 1e-9 };
		free((void *)a.q);
		free((void *)a.k);
		free((void *)a.v);
		free(a.out);
		free(a.lse);
		free(a.ws);
	}
	printf("%-38s %6s %6s %5s %10s %8s\n", "kernel (1 thread)", "M/Sq", "N/Skv", "K/D", "ms", "GFLOP/s");
	for (int i = 0; i < n; i++)
		printf("%-38s %6ld %6ld %5ld %10.2f %8.1f\n", rows[i].what, rows[i].m, rows[i].n,
		       rows[i].k, rows[i].sec * 1e3, rows[i].gflops);
	printf("attention / sgemm at S = 2048: %.0f%%\n", 100 * rows[5].gflops / rows[2].gflops);
	if (json) {
		FILE *f = fopen(json, "w");
		if (!f)
			return 1;
		fprintf(f, "[\n");
		for (int i = 0; i < n; i++)
			fprintf(f, "  {\"kernel\": \"%s\", \"m\": %ld, \"n\": %ld, \"k\": %ld, \"ms\": %.3f, "
				"\"gflops\": %.2f}%s\n", rows[i].what, rows[i].m, rows[i].n, rows[i].k,
				rows[i].sec * 1e3, rows[i].gflops, i + 1 < n ? "," : "");
		fprintf(f, "]\n");
		fclose(f);
	}
	return 0;
}
