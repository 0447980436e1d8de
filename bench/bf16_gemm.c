/* bf16_gemm.c — the bf16 GEMM on the CPU, two ways (docs/performance.md):
 *   tiles  k_linear_narrow_tiles_pool: 256x256 tiles of x and w widened to
 *          float32, one OpenBLAS sgemm per tile;
 *   dot    k_linear_narrow_pool where the CPU has AVX-512 BF16: bf16 dot
 *          products with float32 accumulation (vdpbf16ps, tiles of 6 rows x
 *          64 columns over panels of w packed in k-pairs), what the CPU
 *          device runs there;
 * and float32 sgemm on the same shape for scale. One thread (the device
 * splits a layer into one such GEMM per thread), a Flux-sized layer by
 * default: y[m, n] = x[m, k] w[n, k]^T with k = n = 3072.
 *
 *   build/bench/bf16_gemm [M K N] */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/kernels.h"

/* This thread's CPU time: other work on a shared machine does not count
 * (it still shares the caches and memory bandwidth). */
static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
	int64_t m = argc > 3 ? atoll(argv[1]) : 512, k = argc > 3 ? atoll(argv[2]) : 3072,
		n = argc > 3 ? atoll(argv[3]) : 3072;

	openblas_set_num_threads(1);
	float *xf = malloc((size_t)(m * k) * 4), *wf = malloc((size_t)(n * k) * 4);
	float *yf = malloc((size_t)(m * n) * 4);
	uint16_t *x = malloc((size_t)(m * k) * 2), *w = malloc((size_t)(n * k) * 2);
	uint16_t *y = malloc((size_t)(m * n) * 2), *y2 = malloc((size_t)(m * n) * 2);
	void *ws = malloc(k_linear_narrow_workspace(1, m, k, n));

	for (int64_t i = 0; i < m * k; i++)
		xf[i] = (float)rand() / RAND_MAX - 0.5f;
	for (int64_t i = 0; i < n * k; i++)
		wf[i] = (float)rand() / RAND_MAX - 0.5f;
	k_convert(x, K_BF16, xf, K_F32, m * k);
	k_convert(w, K_BF16, wf, K_F32, n * k);
	double flop = 2.0 * (double)m * (double)k * (double)n, best[3] = { 1e30, 1e30, 1e30 };

	for (int rep = 0; rep < 3; rep++) {
		double t = now();

		k_linear_narrow_tiles_pool(NULL, K_BF16, x, w, NULL, y, m, k, n, ws);
		best[0] = fmin(best[0], now() - t);
		if (k_bf16_dot_available()) {
			t = now();
			k_linear_narrow_pool(NULL, K_BF16, x, w, NULL, y2, m, k, n, ws);
			best[1] = fmin(best[1], now() - t);
		}
		t = now();
		k_linear(xf, wf, NULL, yf, m, k, n);
		best[2] = fmin(best[2], now() - t);
	}
	int64_t differ = 0;

	for (int64_t i = 0; i < m * n; i++) {
		float a, b;

		k_convert(&a, K_F32, y + i, K_BF16, 1);
		k_convert(&b, K_F32, y2 + i, K_BF16, 1);
		/* one bf16 ulp apart at most: both round a float32 sum */
		differ += k_bf16_dot_available() &&
			  fabsf(a - b) > 0x1p-7f * fmaxf(fabsf(a), fabsf(b)) * 1.01f;
	}
	printf("bf16 GEMM %lldx%lldx%lld, one thread (best of 3, thread CPU time)\n", (long long)m, (long long)k,
	       (long long)n);
	printf("  tiles (widen 256x256 tiles + sgemm)  %8.1f ms  %6.1f GFLOP/s\n", 1e3 * best[0],
	       flop / best[0] * 1e-9);
	if (k_bf16_dot_available())
		printf("  dot (vdpbf16ps, f32 accumulation)    %8.1f ms  %6.1f GFLOP/s\n",
		       1e3 * best[1], flop / best[1] * 1e-9);
	else
		printf("  dot: this CPU has no AVX-512 BF16\n");
	printf("  f32 sgemm (for scale)                %8.1f ms  %6.1f GFLOP/s\n", 1e3 * best[2],
	       flop / best[2] * 1e-9);
	printf("  results more than a bf16 ulp apart: %lld of %lld\n", (long long)differ,
	       (long long)(m * n));
	free(xf);
	free(wf);
	free(yf);
	free(x);
	free(w);
	free(y);
	free(y2);
	free(ws);
	return differ != 0;
}
