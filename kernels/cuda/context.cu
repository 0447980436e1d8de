/* context.cu — the CUDA context (device, stream, cuBLASLt handle and GEMM
 * workspace), device memory, copies and the status strings (see
 * kernels_cuda.h).
 *
 * Every entry point (here and in the kernel files) makes the context's
 * device current first through kc_use_device: ranks run on threads of their
 * own, and a thread's current device starts at 0 whatever device its rank's
 * context lives on. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/kc_internal.h"

/* cuBLASLt picks among more kernels with a larger workspace; 32 MiB covers
 * what its heuristics ask for on Hopper at the sizes of a DiT block. */
static const size_t LT_WORKSPACE = (size_t)32 << 20;

/* A failed runtime call also leaves its error as the thread's last error,
 * which the next kc_launched() would take for its own launch's: clear it
 * once returned here (a sticky error stays sticky, as it should). */
static int status(cudaError_t e)
{
	if (e != cudaSuccess)
		cudaGetLastError();
	return (int)e;
}

/* Declared in kc_internal.h (the C header does not export it). cudaSetDevice only when the device differs, as it is not needed
 * otherwise and costs more than the query; neither is refused during a
 * stream capture. */
int kc_use_device(kc_ctx *c)
{
	int cur;

	if (cudaGetDevice(&cur) == cudaSuccess && cur == c->device)
		return 0;
	return status(cudaSetDevice(c->device));
}

/* attention_cudnn.cu: frees the context's cuDNN handle and plans. */
void kc_cudnn_release(kc_ctx *c);

extern "C" size_t kc_dtype_size(enum kc_dtype t)
{
	return t == KC_F32 ? 4 : 2;
}

extern "C" const char *kc_error_string(int status)
{
	if (status == 0)
		return "";
	if (status >= KC_CUBLAS_BASE)
		return cublasLtGetStatusString((cublasStatus_t)(status - KC_CUBLAS_BASE));
	return cudaGetErrorString((cudaError_t)status);
}

extern "C" int kc_device_count(void)
{
	int n = 0;

	/* Without a driver this fails. */
	return status(cudaGetDeviceCount(&n)) == 0 ? n : 0;
}

extern "C" int kc_create(kc_ctx **out, int ordinal, char *err, size_t errlen)
{
	kc_ctx *c = (kc_ctx *)calloc(1, sizeof *c);
	const char *what;
	int st;

	*out = NULL;
	if (!c) {
		snprintf(err, errlen, "out of host memory");
		return (int)cudaErrorMemoryAllocation;
	}
	c->device = ordinal;
	if ((st = status(cudaSetDevice(ordinal))) != 0) {
		what = "cudaSetDevice";
		goto fail;
	}
	if ((st = status(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount,
						ordinal))) != 0) {
		what = "cudaDeviceGetAttribute(multiprocessor count)";
		goto fail;
	}
	/* Non-blocking: the legacy default stream, which other libraries in the
	 * process may use, must not serialise with the rank's work. */
	if ((st = status(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking))) != 0) {
		what = "cudaStreamCreateWithFlags";
		goto fail;
	}
	{
		cublasStatus_t bs = cublasLtCreate(&c->lt);

		if (bs != CUBLAS_STATUS_SUCCESS) {
			st = KC_CUBLAS_BASE + (int)bs;
			c->lt = NULL;
			what = "cublasLtCreate";
			goto fail;
		}
	}
	if ((st = status(cudaMalloc(&c->lt_ws, LT_WORKSPACE))) != 0) {
		c->lt_ws = NULL;
		what = "cudaMalloc(cuBLASLt workspace)";
		goto fail;
	}
	c->lt_ws_bytes = LT_WORKSPACE;
	*out = c;
	return 0;
fail:
	snprintf(err, errlen, "CUDA device %d: %s: %s", ordinal, what, kc_error_string(st));
	kc_destroy(c);
	return st;
}

extern "C" void kc_destroy(kc_ctx *c)
{
	if (!c)
		return;
	kc_use_device(c);
	if (c->stream)
		cudaStreamSynchronize(c->stream);
	kc_cudnn_release(c);
	if (c->join)
		cudaEventDestroy(c->join);
	if (c->lt_ws)
		cudaFree(c->lt_ws);
	if (c->lt)
		cublasLtDestroy(c->lt);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	free(c);
	/* It reports nothing, so it leaves no error behind either. */
	cudaGetLastError();
}

extern "C" void *kc_stream(kc_ctx *c)
{
	return (void *)c->stream;
}

extern "C" int kc_sync(kc_ctx *c)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	/* A kernel's fault is sticky and reported by the synchronisation; a
	 * launch error nobody collected is still pending in the thread's last
	 * error. */
	st = status(cudaStreamSynchronize(c->stream));
	if (st)
		return st;
	return (int)cudaGetLastError();
}

extern "C" int kc_alloc(kc_ctx *c, void **p, size_t bytes)
{
	int st = kc_use_device(c);

	*p = NULL;
	if (st || bytes == 0)
		return st;
	st = status(cudaMalloc(p, bytes));
	if (st)
		*p = NULL;
	return st;
}

extern "C" void kc_free(kc_ctx *c, void *p)
{
	if (!p)
		return;
	kc_use_device(c);
	status(cudaFree(p));
}

/* A copy on the stream, then a wait: ordered after the stream's earlier work
 * and complete (pageable host memory included) when it returns. */
static int copy_sync(kc_ctx *c, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
	int st = kc_use_device(c);

	if (st || bytes == 0)
		return st;
	st = status(cudaMemcpyAsync(dst, src, bytes, kind, c->stream));
	if (st)
		return st;
	return status(cudaStreamSynchronize(c->stream));
}

extern "C" int kc_upload(kc_ctx *c, void *dst, const void *src, size_t bytes)
{
	return copy_sync(c, dst, src, bytes, cudaMemcpyHostToDevice);
}

extern "C" int kc_download(kc_ctx *c, void *dst, const void *src, size_t bytes)
{
	return copy_sync(c, dst, src, bytes, cudaMemcpyDeviceToHost);
}

extern "C" int kc_copy(kc_ctx *c, void *dst, const void *src, size_t bytes)
{
	int st = kc_use_device(c);

	if (st || bytes == 0)
		return st;
	return status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

/* The context's event, made on first use (timing off: a record and a wait
 * cost no more than a launch). */
static int join_event(kc_ctx *c)
{
	int st = kc_use_device(c);

	if (st || c->join)
		return st;
	st = status(cudaEventCreateWithFlags(&c->join, cudaEventDisableTiming));
	if (st)
		c->join = NULL;
	return st;
}

/* `waiter` waits for what `done` holds so far */
static int order(kc_ctx *c, cudaStream_t waiter, cudaStream_t done)
{
	int st = join_event(c);

	if (st)
		return st;
	if ((st = status(cudaEventRecord(c->join, done))) != 0)
		return st;
	return status(cudaStreamWaitEvent(waiter, c->join, 0));
}

extern "C" int kc_wait_stream(kc_ctx *c, void *stream)
{
	return order(c, c->stream, (cudaStream_t)stream);
}

extern "C" int kc_signal_stream(kc_ctx *c, void *stream)
{
	return order(c, (cudaStream_t)stream, c->stream);
}

extern "C" int kc_device_pointer(kc_ctx *c, const void *p, char *err, size_t errlen)
{
	cudaPointerAttributes a;
	int st = kc_use_device(c);

	if (st) {
		snprintf(err, errlen, "%s", kc_error_string(st));
		return st;
	}
	if ((st = status(cudaPointerGetAttributes(&a, p))) != 0) {
		snprintf(err, errlen, "cudaPointerGetAttributes: %s", kc_error_string(st));
		return st;
	}
	if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
		snprintf(err, errlen, "%p is %s, not device memory", p,
			 a.type == cudaMemoryTypeHost ? "pinned host memory" : "host memory");
		return (int)cudaErrorInvalidValue;
	}
	if (a.type == cudaMemoryTypeDevice && a.device != c->device) {
		snprintf(err, errlen, "%p is memory of GPU %d, not of the session's GPU %d", p,
			 a.device, c->device);
		return (int)cudaErrorInvalidDevice;
	}
	return 0;
}

extern "C" int kc_memset(kc_ctx *c, void *p, int value, size_t bytes)
{
	int st = kc_use_device(c);

	if (st || bytes == 0)
		return st;
	return status(cudaMemsetAsync(p, value, bytes, c->stream));
}
