/* gemm.cu — kc_linear: y[m, n] = x[m, k] . w[n, k]^T (+ b[n]) through
 * cuBLASLt (see kernels_cuda.h), and kc_linear_act (at the end: why not
 * cuBLASLt's activation epilogues).
 *
 * Row-major to column-major. cuBLASLt is column-major: a row-major [r, c]
 * matrix with row stride c is, read column-major, the [c, r] matrix (its
 * transpose) with leading dimension c, same bytes. So
 *   y (row-major [m, n]) is column-major Y^T [n, m], ld n;
 *   x (row-major [m, k]) is column-major X^T [k, m], ld k;
 *   w (row-major [n, k]) is column-major W^T [k, n], ld k.
 * Transposing y = x W^T gives Y^T = W X^T, a column-major product
 *   D [n, m] = op(A) [n, k] . op(B) [k, m]
 * with A = the bytes of w seen as [k, n] (ld k) and op(A) = A^T = W, and
 * B = the bytes of x seen as [k, m] (ld k) and op(B) = B = X^T. That is the
 * "TN" product, cuBLASLt's best-supported layout. The bias b[n] runs along
 * D's rows (n of them), which is what CUBLASLT_EPILOGUE_BIAS broadcasts over
 * D's columns: b[n] added to every row of y.
 *
 * Precision: CUBLAS_COMPUTE_32F for every dtype — true float32 for float32
 * storage (no TF32, whose 10-bit mantissa would miss a 1e-5 tolerance) and
 * float32 accumulation of bf16/f16 products; alpha and beta are float32,
 * the bias has the storage dtype.
 *
 * cuBLASLt may find no algorithm for a layout (odd leading dimensions of
 * 16-bit types, pointers into the middle of buffers). Then, in order: the
 * product without the epilogue and the bias added by a kernel of ours; our
 * tiled kernel for the whole thing (also used for k = 0, which cuBLASLt
 * does not take). A bias that is not 16-byte aligned skips the epilogue
 * outright: the epilogue may read the bias in vectors, and whether the
 * heuristic weighs the bias pointer's alignment is not something to bet a
 * misaligned-address fault on.
 * Never a silent wrong answer: any other cuBLASLt failure is returned.
 *
 * The algorithm is queried on every call: the heuristic costs microseconds
 * of host time, which a CUDA graph replay does not repeat and which a GEMM
 * of a DiT block (hundreds of microseconds) hides behind the queue.
 *
 * The environment variable DTPC_KC_LINEAR forces a path so tests reach each
 * of them: "unfused" (cuBLASLt without the epilogue, bias by our kernel) or
 * "tiled" (our kernel only). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kc_internal.h"

namespace {

int lt_status(cublasStatus_t s)
{
	return s == CUBLAS_STATUS_SUCCESS ? 0 : KC_CUBLAS_BASE + (int)s;
}

/* The largest power of two dividing the address, capped at the 256 bytes
 * cuBLASLt assumes unless told otherwise. */
uint32_t alignment(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	uint32_t al = 256;

	while (al > 1 && a % al != 0)
		al /= 2;
	return al;
}

/* ---- our kernels ----------------------------------------------------------------- */

const int TILE = 16;

/* 16 x 16 outputs per block, k in steps of 16 through shared memory, float
 * accumulation. Slow next to cuBLASLt but exact in layout for any m, k, n,
 * alignment and bias; only layouts cuBLASLt refuses come here. Tiles are
 * walked by grid-stride loops so the grid stays within its limits. */
template <typename T>
__global__ void linear_tiled_kernel(const T *x, const T *w, const T *b, T *y, int64_t m,
				    int64_t k, int64_t n)
{
	__shared__ float xs[TILE][TILE + 1], ws[TILE][TILE + 1];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int64_t tiles_m = (m + TILE - 1) / TILE, tiles_n = (n + TILE - 1) / TILE;

	for (int64_t tm = blockIdx.x; tm < tiles_m; tm += gridDim.x) {
		for (int64_t tn = blockIdx.y; tn < tiles_n; tn += gridDim.y) {
			const int64_t row = tm * TILE + ty, col = tn * TILE + tx;
			/* Row of w this thread stages: the tile's n index ty. */
			const int64_t wrow = tn * TILE + ty;
			float acc = 0;

			for (int64_t k0 = 0; k0 < k; k0 += TILE) {
				const int64_t kk = k0 + tx;

				xs[ty][tx] = row < m && kk < k ? kc_to_f32<T>(x[row * k + kk]) : 0.0f;
				ws[ty][tx] = wrow < n && kk < k ? kc_to_f32<T>(w[wrow * k + kk]) : 0.0f;
				__syncthreads();
#pragma unroll
				for (int j = 0; j < TILE; j++)
					acc += xs[ty][j] * ws[tx][j];
				__syncthreads();
			}
			if (row < m && col < n)
				y[row * n + col] = kc_from_f32<T>(b ? acc + kc_to_f32<T>(b[col]) : acc);
		}
	}
}

template <typename T>
__global__ void bias_add_kernel(T *y, const T *b, int64_t m, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < m * n;
	     i += (int64_t)gridDim.x * blockDim.x)
		y[i] = kc_from_f32<T>(kc_to_f32<T>(y[i]) + kc_to_f32<T>(b[i % n]));
}

unsigned grid_cap(int64_t need, int64_t cap)
{
	return (unsigned)(need < cap ? (need < 1 ? 1 : need) : cap);
}

template <typename T>
int tiled_t(kc_ctx *c, const void *x, const void *w, const void *b, void *y, int64_t m,
	    int64_t k, int64_t n)
{
	dim3 grid(grid_cap((m + TILE - 1) / TILE, 65535), grid_cap((n + TILE - 1) / TILE, 65535));

	linear_tiled_kernel<T><<<grid, dim3(TILE, TILE), 0, c->stream>>>(
		(const T *)x, (const T *)w, (const T *)b, (T *)y, m, k, n);
	return kc_launched();
}

template <typename T> int bias_add_t(kc_ctx *c, void *y, const void *b, int64_t m, int64_t n)
{
	const int threads = 256;

	bias_add_kernel<T><<<grid_cap((m * n + threads - 1) / threads, (int64_t)c->sm_count * 16),
			     threads, 0, c->stream>>>((T *)y, (const T *)b, m, n);
	return kc_launched();
}

int tiled(kc_ctx *c, enum kc_dtype t, const void *x, const void *w, const void *b, void *y,
	  int64_t m, int64_t k, int64_t n)
{
	switch (t) {
	case KC_F32:
		return tiled_t<float>(c, x, w, b, y, m, k, n);
	case KC_BF16:
		return tiled_t<__nv_bfloat16>(c, x, w, b, y, m, k, n);
	case KC_F16:
		return tiled_t<__half>(c, x, w, b, y, m, k, n);
	}
	return (int)cudaErrorInvalidValue;
}

int bias_add(kc_ctx *c, enum kc_dtype t, void *y, const void *b, int64_t m, int64_t n)
{
	switch (t) {
	case KC_F32:
		return bias_add_t<float>(c, y, b, m, n);
	case KC_BF16:
		return bias_add_t<__nv_bfloat16>(c, y, b, m, n);
	case KC_F16:
		return bias_add_t<__half>(c, y, b, m, n);
	}
	return (int)cudaErrorInvalidValue;
}

/* ---- cuBLASLt ------------------------------------------------------------------------ */

/* The descriptors of one product, destroyed together whatever happens. */
struct LtPlan {
	cublasLtMatmulDesc_t op = NULL;
	cublasLtMatrixLayout_t a = NULL, b = NULL, d = NULL;
	cublasLtMatmulPreference_t pref = NULL;

	~LtPlan()
	{
		if (pref)
			cublasLtMatmulPreferenceDestroy(pref);
		if (d)
			cublasLtMatrixLayoutDestroy(d);
		if (b)
			cublasLtMatrixLayoutDestroy(b);
		if (a)
			cublasLtMatrixLayoutDestroy(a);
		if (op)
			cublasLtMatmulDescDestroy(op);
	}
};

/* y = x w^T (+ bias through the epilogue when bias != NULL) on cuBLASLt.
 * *done is false, and nothing enqueued, when cuBLASLt has no algorithm for
 * this layout; the returned status is nonzero only for real failures. */
int lt_linear(kc_ctx *c, enum kc_dtype t, const void *x, const void *w, const void *bias,
	      void *y, int64_t m, int64_t k, int64_t n, bool *done)
{
	const cudaDataType_t dt = t == KC_F32 ? CUDA_R_32F : t == KC_BF16 ? CUDA_R_16BF : CUDA_R_16F;
	const int32_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N, bias_type = (int32_t)dt;
	const uint32_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
	const uint32_t al_a = alignment(w), al_b = alignment(x), al_d = alignment(y);
	const size_t ws = c->lt_ws_bytes;
	const float alpha = 1.0f, beta = 0.0f;
	cublasLtMatmulHeuristicResult_t heur;
	int found = 0;
	LtPlan p;
	int st;

	*done = false;
#define LT(call)                                          \
	do {                                              \
		if ((st = lt_status(call)) != 0)          \
			return st;                        \
	} while (0)
	LT(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	LT(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t));
	LT(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n));
	LT(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
	if (bias) {
		LT(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
						  sizeof bias));
		LT(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
						  &bias_type, sizeof bias_type));
	}
	/* See the header comment: A = w as [k, n], B = x as [k, m], D = y as
	 * [n, m], all column-major; C is D (beta = 0). */
	LT(cublasLtMatrixLayoutCreate(&p.a, dt, (uint64_t)k, (uint64_t)n, k));
	LT(cublasLtMatrixLayoutCreate(&p.b, dt, (uint64_t)k, (uint64_t)m, k));
	LT(cublasLtMatrixLayoutCreate(&p.d, dt, (uint64_t)n, (uint64_t)m, n));
	LT(cublasLtMatmulPreferenceCreate(&p.pref));
	LT(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
						&ws, sizeof ws));
	/* Tell the heuristic the real alignments (it assumes 256 bytes), so it
	 * offers only kernels that can read these pointers. */
	LT(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
						&al_a, sizeof al_a));
	LT(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
						&al_b, sizeof al_b));
	LT(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
						&al_d, sizeof al_d));
	LT(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
						&al_d, sizeof al_d));
#undef LT
	cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(c->lt, p.op, p.a, p.b, p.d, p.d, p.pref, 1,
							  &heur, &found);

	if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && found == 0))
		return 0;
	if (s != CUBLAS_STATUS_SUCCESS)
		return lt_status(s);
	s = cublasLtMatmul(c->lt, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &heur.algo,
			   c->lt_ws, ws, c->stream);
	if (s == CUBLAS_STATUS_NOT_SUPPORTED)
		return 0;
	if (s != CUBLAS_STATUS_SUCCESS)
		return lt_status(s);
	*done = true;
	return 0;
}

} // namespace

extern "C" int kc_linear(kc_ctx *c, enum kc_dtype t, const void *x, const void *w, const void *b,
			 void *y, int64_t m, int64_t k, int64_t n)
{
	const char *force = getenv("DTPC_KC_LINEAR");
	const bool only_tiled = force && strcmp(force, "tiled") == 0;
	const bool unfused = force && strcmp(force, "unfused") == 0;
	bool done = false;
	int st = kc_use_device(c);

	if (st)
		return st;
	if (m < 0 || k < 0 || n < 0 || (t != KC_F32 && t != KC_BF16 && t != KC_F16))
		return (int)cudaErrorInvalidValue;
	if (m == 0 || n == 0)
		return 0;
	if (k > 0 && !only_tiled) {
		if (b && !unfused && (uintptr_t)b % 16 == 0) {
			st = lt_linear(c, t, x, w, b, y, m, k, n, &done);
			if (st || done)
				return st;
		}
		st = lt_linear(c, t, x, w, NULL, y, m, k, n, &done);
		if (st)
			return st;
		if (done)
			return b ? bias_add(c, t, y, b, m, n) : 0;
	}
	return tiled(c, t, x, w, b, y, m, k, n);
}

/* Not cuBLASLt's GELU epilogues (CUBLASLT_EPILOGUE_GELU, _GELU_BIAS): they
 * transform the float32 sum before it is rounded to the storage dtype, in a
 * GELU form the documentation does not name, so their numbers are not
 * linear's followed by gelu's (what the graph means, and what the CPU
 * device computes bit for bit); and there is no SiLU epilogue. The
 * activation runs as its own kernel on y, which a CUDA graph replays with
 * the GEMM without a host round trip. */
extern "C" int kc_linear_act(kc_ctx *c, enum kc_dtype t, const void *x, const void *w,
			     const void *b, void *y, int64_t m, int64_t k, int64_t n,
			     enum kc_act act)
{
	int st = kc_linear(c, t, x, w, b, y, m, k, n);

	if (st)
		return st;
	switch (act) {
	case KC_ACT_GELU:
		return kc_gelu(c, t, y, y, m * n, false);
	case KC_ACT_GELU_TANH:
		return kc_gelu(c, t, y, y, m * n, true);
	case KC_ACT_SILU:
		return kc_silu(c, t, y, y, m * n);
	}
	return (int)cudaErrorInvalidValue;
}
