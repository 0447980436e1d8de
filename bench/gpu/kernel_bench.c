/* kernel_bench.c — the kc_ kernels beside the library calls they wrap, on
 * CUDA device 0.
 *
 *  gemm        kc_linear against cuBLASLt called directly with the same
 *              shapes and configuration (TN, bias epilogue, float32 compute,
 *              32 MiB workspace) with its algorithm chosen once outside the
 *              timing: the ratio is what our wrapper costs (descriptors and
 *              the heuristic on every call). Flux block shapes, bf16 and f32,
 *              plus one small shape where that cost shows.
 *  pack/unpack kc_copy2d of a [4608, 3072] bf16 tensor into / out of 4 column
 *              chunks (Ulysses' all-to-all pack), against the same four
 *              strided copies by cudaMemcpy2DAsync and against one
 *              cudaMemcpyAsync device-to-device of the same bytes (ratio:
 *              ours / memcpy); GB/s count bytes read plus bytes written.
 *  rms_norm/layer_norm  GB/s of x read plus y written.
 *  launch      10,000 launches of a tiny kc_silu (256 elements): µs per op
 *              enqueued one by one, and replayed from a CUDA graph captured
 *              on the context's stream.
 *
 * Each figure: 3 warm-up runs, then the median of 10, each timed by its own
 * pair of CUDA events on the context's stream. One line per case, fields
 * `key=value` after the name, e.g.
 *   gemm bf16 m=4608 k=3072 n=3072 ours_tflops=... cublaslt_tflops=... ratio=... */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cuBLASLt's headers are written for C++ first: in C they test the
 * undefined __cplusplus and declare one function without a prototype. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cuda_runtime_api.h>

#include "kernels/cuda/kernels_cuda.h"
#include "tests/gpu/gpu_util.h"

enum { WARMUP = 3, REPS = 10, LAUNCHES = 10000 };

static cudaStream_t stream;

static void check_lt(cublasStatus_t s, const char *what)
{
	if (s != CUBLAS_STATUS_SUCCESS) {
		fprintf(stderr, "kernel_bench: %s: %s\n", what, cublasLtGetStatusString(s));
		exit(1);
	}
}

/* Median milliseconds of one call of fn(arg) (see the header comment), each
 * waited for before the next is issued. */
static double time_ms(int (*fn)(void *), void *arg)
{
	return time_median_ms(fn, arg, WARMUP, REPS, 1);
}

/* ---- GEMM -------------------------------------------------------------------------- */

struct gemm {
	enum kc_dtype t;
	const void *x, *w, *b;
	void *y;
	int64_t m, k, n;
	/* The direct cuBLASLt call, prepared once. */
	cublasLtHandle_t lt;
	void *ws;
	size_t ws_bytes;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtMatmulAlgo_t algo;
};

static int gemm_ours(void *p)
{
	struct gemm *g = p;

	return kc_linear(ctx, g->t, g->x, g->w, g->b, g->y, g->m, g->k, g->n);
}

static int gemm_direct(void *p)
{
	struct gemm *g = p;
	const float alpha = 1, beta = 0;
	check_lt(cublasLtMatmul(g->lt, g->op, &alpha, g->w, g->la, g->x, g->lb, &beta, g->y, g->ld,
				g->y, g->ld, &g->algo, g->ws, g->ws_bytes, stream),
		 "cublasLtMatmul");
	return 0;
}

/* The same product as kc_linear (see gemm.cu): column-major
 * D [n, m] = A^T . B with A = w as [k, n] and B = x as [k, m]. */
static void gemm_prepare(struct gemm *g)
{
	cudaDataType_t dt = g->t == KC_F32 ? CUDA_R_32F : CUDA_R_16BF;
	int32_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N, bias_type = (int32_t)dt;
	uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t heur;
	int found = 0;

	check_lt(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
	check_lt(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_t,
						sizeof op_t), "transa");
	check_lt(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_n,
						sizeof op_n), "transb");
	check_lt(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
						sizeof epi), "epilogue");
	check_lt(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->b,
						sizeof g->b), "bias");
	check_lt(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
						&bias_type, sizeof bias_type), "bias type");
	check_lt(cublasLtMatrixLayoutCreate(&g->la, dt, (uint64_t)g->k, (uint64_t)g->n, g->k), "A");
	check_lt(cublasLtMatrixLayoutCreate(&g->lb, dt, (uint64_t)g->k, (uint64_t)g->m, g->k), "B");
	check_lt(cublasLtMatrixLayoutCreate(&g->ld, dt, (uint64_t)g->n, (uint64_t)g->m, g->n), "D");
	check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
	check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
						      &g->ws_bytes, sizeof g->ws_bytes),
		 "workspace");
	check_lt(cublasLtMatmulAlgoGetHeuristic(g->lt, g->op, g->la, g->lb, g->ld, g->ld, pref, 1,
						&heur, &found), "heuristic");
	if (found == 0) {
		fprintf(stderr, "kernel_bench: cuBLASLt has no algorithm for m=%lld k=%lld n=%lld\n",
			(long long)g->m, (long long)g->k, (long long)g->n);
		exit(1);
	}
	g->algo = heur.algo;
	cublasLtMatmulPreferenceDestroy(pref);
}

static void gemm_release(struct gemm *g)
{
	cublasLtMatrixLayoutDestroy(g->ld);
	cublasLtMatrixLayoutDestroy(g->lb);
	cublasLtMatrixLayoutDestroy(g->la);
	cublasLtMatmulDescDestroy(g->op);
}

static void bench_gemm(void)
{
	static const int64_t shapes[][3] = {
		{256, 256, 256},	/* small: the wrapper's own cost shows */
		{4608, 3072, 3072},  {4608, 3072, 12288},
		{4608, 3072, 9216},  {4608, 12288, 3072},
	};
	static const enum kc_dtype types[] = {KC_BF16, KC_F32};
	const size_t max_mk = 4608 * 12288, max_nk = 12288 * 3072, max_mn = 4608 * 12288;
	cublasLtHandle_t lt;
	size_t ws_bytes = (size_t)32 << 20;
	void *ws = dev_alloc(ws_bytes);

	check_lt(cublasLtCreate(&lt), "cublasLtCreate");
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		enum kc_dtype t = types[ti];
		void *x = dev_random(t, max_mk), *w = dev_random(t, max_nk), *b = dev_random(t, 12288);
		void *y = dev_alloc(max_mn * kc_dtype_size(t));

		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
			struct gemm g = {.t = t, .x = x, .w = w, .b = b, .y = y, .m = shapes[s][0],
					 .k = shapes[s][1], .n = shapes[s][2], .lt = lt, .ws = ws,
					 .ws_bytes = ws_bytes};
			double flop = 2.0 * (double)g.m * (double)g.k * (double)g.n;

			gemm_prepare(&g);
			double ours = time_ms(gemm_ours, &g), direct = time_ms(gemm_direct, &g);

			printf("gemm %s m=%lld k=%lld n=%lld ours_tflops=%.1f cublaslt_tflops=%.1f "
			       "ratio=%.3f ours_ms=%.4f cublaslt_ms=%.4f\n",
			       dtype_name(t), (long long)g.m, (long long)g.k, (long long)g.n,
			       flop / ours * 1e-9, flop / direct * 1e-9, direct / ours, ours, direct);
			fflush(stdout);
			gemm_release(&g);
		}
		kc_free(ctx, y);
		kc_free(ctx, b);
		kc_free(ctx, w);
		kc_free(ctx, x);
	}
	cublasLtDestroy(lt);
	kc_free(ctx, ws);
}

/* ---- pack / unpack ---------------------------------------------------------------------- */

enum { PACK_ROWS = 4608, PACK_COLS = 3072, PACK_CHUNKS = 4 };

struct pack {
	void *full, *chunks;
};

/* [rows, cols] -> PACK_CHUNKS contiguous [rows, cols / PACK_CHUNKS] blocks. */
static int pack_ours(void *p)
{
	struct pack *k = p;
	const int64_t cw = PACK_COLS / PACK_CHUNKS;

	for (int c = 0; c < PACK_CHUNKS; c++) {
		int st = kc_copy2d(ctx, 2, (char *)k->chunks + (size_t)(c * PACK_ROWS * cw) * 2, cw,
				   (const char *)k->full + (size_t)(c * cw) * 2, PACK_COLS,
				   PACK_ROWS, cw);

		if (st)
			return st;
	}
	return 0;
}

static int unpack_ours(void *p)
{
	struct pack *k = p;
	const int64_t cw = PACK_COLS / PACK_CHUNKS;

	for (int c = 0; c < PACK_CHUNKS; c++) {
		int st = kc_copy2d(ctx, 2, (char *)k->full + (size_t)(c * cw) * 2, PACK_COLS,
				   (const char *)k->chunks + (size_t)(c * PACK_ROWS * cw) * 2, cw,
				   PACK_ROWS, cw);

		if (st)
			return st;
	}
	return 0;
}

static int pack_memcpy2d(void *p)
{
	struct pack *k = p;
	const size_t cw = PACK_COLS / PACK_CHUNKS;

	for (size_t c = 0; c < PACK_CHUNKS; c++) {
		int st = (int)cudaMemcpy2DAsync((char *)k->chunks + c * PACK_ROWS * cw * 2, cw * 2,
						(const char *)k->full + c * cw * 2, PACK_COLS * 2,
						cw * 2, PACK_ROWS, cudaMemcpyDeviceToDevice, stream);

		if (st)
			return st;
	}
	return 0;
}

static int unpack_memcpy2d(void *p)
{
	struct pack *k = p;
	const size_t cw = PACK_COLS / PACK_CHUNKS;

	for (size_t c = 0; c < PACK_CHUNKS; c++) {
		int st = (int)cudaMemcpy2DAsync((char *)k->full + c * cw * 2, PACK_COLS * 2,
						(const char *)k->chunks + c * PACK_ROWS * cw * 2,
						cw * 2, cw * 2, PACK_ROWS, cudaMemcpyDeviceToDevice,
						stream);

		if (st)
			return st;
	}
	return 0;
}

static int pack_memcpy(void *p)
{
	struct pack *k = p;

	return kc_copy(ctx, k->chunks, k->full, (size_t)PACK_ROWS * PACK_COLS * 2);
}

static void bench_pack(void)
{
	struct pack k = {dev_random(KC_BF16, (size_t)PACK_ROWS * PACK_COLS),
			 dev_alloc((size_t)PACK_ROWS * PACK_COLS * 2)};
	const double bytes = 2.0 * PACK_ROWS * PACK_COLS * 2; /* read + write */
	double ours = time_ms(pack_ours, &k), back = time_ms(unpack_ours, &k);
	double lib = time_ms(pack_memcpy2d, &k), lib_back = time_ms(unpack_memcpy2d, &k);
	double base = time_ms(pack_memcpy, &k);

	printf("pack bf16 rows=%d cols=%d chunks=%d ours_gbps=%.0f memcpy2d_gbps=%.0f "
	       "memcpy_gbps=%.0f ratio=%.3f ms=%.4f\n", PACK_ROWS, PACK_COLS, PACK_CHUNKS,
	       bytes / ours * 1e-6, bytes / lib * 1e-6, bytes / base * 1e-6, base / ours, ours);
	printf("unpack bf16 rows=%d cols=%d chunks=%d ours_gbps=%.0f memcpy2d_gbps=%.0f "
	       "memcpy_gbps=%.0f ratio=%.3f ms=%.4f\n", PACK_ROWS, PACK_COLS, PACK_CHUNKS,
	       bytes / back * 1e-6, bytes / lib_back * 1e-6, bytes / base * 1e-6, base / back, back);
	fflush(stdout);
	kc_free(ctx, k.chunks);
	kc_free(ctx, k.full);
}

/* ---- norms ---------------------------------------------------------------------------------- */

struct norm {
	enum kc_dtype t;
	const void *x;
	void *y;
	int64_t rows, n, group;
};

static int rms_norm_op(void *p)
{
	struct norm *q = p;

	return kc_rms_norm(ctx, q->t, q->x, q->y, q->rows, q->n, q->group, 1e-6f, NULL);
}

static int layer_norm_op(void *p)
{
	struct norm *q = p;

	return kc_layer_norm(ctx, q->t, q->x, q->y, q->rows, q->n, 1e-6f, NULL, NULL);
}

static void bench_norms(void)
{
	static const enum kc_dtype types[] = {KC_BF16, KC_F32};
	const int64_t rows = 4608, n = 3072;

	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		enum kc_dtype t = types[ti];
		struct norm q = {t, dev_random(t, (size_t)(rows * n)),
				 dev_alloc((size_t)(rows * n) * kc_dtype_size(t)), rows, n, n};
		const double bytes = 2.0 * (double)(rows * n) * (double)kc_dtype_size(t);
		double ms;

		ms = time_ms(layer_norm_op, &q);
		printf("layer_norm %s rows=%lld n=%lld gbps=%.0f ms=%.4f\n", dtype_name(t),
		       (long long)rows, (long long)n, bytes / ms * 1e-6, ms);
		for (int g = 0; g < 2; g++) {
			q.group = g ? 128 : n;
			ms = time_ms(rms_norm_op, &q);
			printf("rms_norm %s rows=%lld n=%lld group=%lld gbps=%.0f ms=%.4f\n",
			       dtype_name(t), (long long)rows, (long long)n, (long long)q.group,
			       bytes / ms * 1e-6, ms);
		}
		fflush(stdout);
		kc_free(ctx, q.y);
		kc_free(ctx, (void *)q.x);
	}
}

/* ---- launch overhead ---------------------------------------------------------------------------- */

struct launches {
	void *buf;
	cudaGraphExec_t exec;
};

static int silu_many(void *p)
{
	struct launches *l = p;

	for (int i = 0; i < LAUNCHES; i++) {
		int st = kc_silu(ctx, KC_BF16, l->buf, l->buf, 256);

		if (st)
			return st;
	}
	return 0;
}

static int silu_graph(void *p)
{
	struct launches *l = p;

	return (int)cudaGraphLaunch(l->exec, stream);
}

static void bench_launch(void)
{
	struct launches l = {dev_random(KC_BF16, 256), NULL};
	cudaGraph_t graph;
	double eager, graphed;

	eager = time_ms(silu_many, &l);
	check((int)cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
	check(silu_many(&l), "kc_silu under capture");
	check((int)cudaStreamEndCapture(stream, &graph), "end capture");
	check((int)cudaGraphInstantiate(&l.exec, graph, 0), "cudaGraphInstantiate");
	graphed = time_ms(silu_graph, &l);
	printf("launch silu bf16 n=256 ops=%d eager_us_per_op=%.3f graph_us_per_op=%.3f\n",
	       LAUNCHES, eager * 1e3 / LAUNCHES, graphed * 1e3 / LAUNCHES);
	fflush(stdout);
	cudaGraphExecDestroy(l.exec);
	cudaGraphDestroy(graph);
	kc_free(ctx, l.buf);
}

int main(void)
{
	char err[256];

	gpu_util_init("kernel_bench", 0x2545f4914f6cdd1dull, NULL);
	if (kc_device_count() == 0) {
		printf("# SKIP no CUDA device\n");
		return 77;
	}
	if (kc_create(&ctx, 0, err, sizeof err)) {
		fprintf(stderr, "kernel_bench: %s\n", err);
		return 1;
	}
	stream = (cudaStream_t)kc_stream(ctx);
	bench_launch();
	bench_norms();
	bench_pack();
	bench_gemm();
	kc_destroy(ctx);
	return 0;
}
