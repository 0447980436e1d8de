/* kc_internal.h — what the CUDA kernel files share: the context, the
 * dtype helpers, grid-stride indices and aligned chunk accesses. Not installed; C++ (nvcc) only. */
#ifndef DTPC_KC_INTERNAL_H
#define DTPC_KC_INTERNAL_H
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/kernels_cuda.h"

struct kc_ctx {
	int device;
	cudaStream_t stream;
	cublasLtHandle_t lt;
	void *lt_ws; /* cuBLASLt workspace */
	size_t lt_ws_bytes;
	int sm_count;
	cudaEvent_t join; /* kc_wait_stream / kc_signal_stream's, made on first use */
};

/* Statuses: cudaError_t values as they are; cuBLAS statuses offset so the
 * two ranges never meet (kc_error_string tells them apart). */
enum { KC_CUBLAS_BASE = 100000 };

/* Storage <-> float32 for the three dtypes. */
template <typename T> __device__ __forceinline__ float kc_to_f32(T v);
template <> __device__ __forceinline__ float kc_to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float kc_to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float kc_to_f32<__half>(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T kc_from_f32(float v);
template <> __device__ __forceinline__ float kc_from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 kc_from_f32<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half kc_from_f32<__half>(float v) { return __float2half(v); }

/* Enough blocks to fill the GPU a few times over; the kernels stride over
 * the rest, so the grid never exceeds its limits however large the tensor. */
static inline unsigned kc_blocks_for(const kc_ctx *c, int64_t per_block, int64_t work)
{
	int64_t need = (work + per_block - 1) / per_block;
	int64_t cap = (int64_t)c->sm_count * 16;

	if (need > cap)
		need = cap;
	return need < 1 ? 1u : (unsigned)need;
}

/* Grid-stride loops: this thread's index in the grid and the grid's thread
 * count; this thread's warp (of 32 threads) in the grid and the grid's warp
 * count. Blocks are whole warps. */
__device__ __forceinline__ int64_t kc_thread(void)
{
	return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t kc_threads(void)
{
	return (int64_t)gridDim.x * blockDim.x;
}

__device__ __forceinline__ int64_t kc_warp(void)
{
	return (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
}

__device__ __forceinline__ int64_t kc_warps(void)
{
	return (int64_t)gridDim.x * (blockDim.x / 32);
}

/* W consecutive elements as one aligned access (16 bytes for the widest W). */
template <typename T, int W> struct alignas(sizeof(T) * W) Chunk {
	T v[W];
};

template <typename T, int W> __device__ __forceinline__ void kc_load(const T *p, float *f)
{
	Chunk<T, W> c = *reinterpret_cast<const Chunk<T, W> *>(p);
#pragma unroll
	for (int i = 0; i < W; i++)
		f[i] = kc_to_f32<T>(c.v[i]);
}

template <typename T, int W> __device__ __forceinline__ void kc_store(T *p, const float *f)
{
	Chunk<T, W> c;
#pragma unroll
	for (int i = 0; i < W; i++)
		c.v[i] = kc_from_f32<T>(f[i]);
	*reinterpret_cast<Chunk<T, W> *>(p) = c;
}

/* fn<T>(...) for the storage type of dtype t. */
#define KC_DISPATCH(t, fn, ...)                                                                    \
	((t) == KC_F32	  ? fn<float>(__VA_ARGS__)                                                 \
	 : (t) == KC_BF16 ? fn<__nv_bfloat16>(__VA_ARGS__)                                         \
	 : (t) == KC_F16  ? fn<__half>(__VA_ARGS__)                                                \
			  : (int)cudaErrorInvalidValue)

/* context.cu: makes c's device current (a rank's thread may have another). */
int kc_use_device(kc_ctx *c);

/* The launch status of the last kernel on this thread (0 when accepted). */
static inline int kc_launched(void)
{
	return (int)cudaGetLastError();
}
#endif
