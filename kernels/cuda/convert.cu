/* convert.cu — elements from one storage dtype to another (kernels_cuda.h):
 * a session computing in bf16 or f16 reduces through float32 and hands its
 * outputs to the host through it. One read and one write per element,
 * rounding to nearest even, in a grid-stride loop. */
#include "kernels/cuda/kc_internal.h"

namespace {

template <typename D, typename S>
__global__ void convert_k(D *__restrict__ dst, const S *__restrict__ src, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		dst[i] = kc_from_f32<D>(kc_to_f32<S>(src[i]));
}

template <typename D>
int convert_to(kc_ctx *c, D *dst, enum kc_dtype st, const void *src, int64_t n)
{
	const int threads = 256;
	int64_t need = (n + threads - 1) / threads, cap = (int64_t)c->sm_count * 16;
	unsigned blocks = (unsigned)(need < cap ? need : cap);
	switch (st) {
	case KC_F32:
		convert_k<<<blocks, threads, 0, c->stream>>>(dst, (const float *)src, n);
		return kc_launched();
	case KC_BF16:
		convert_k<<<blocks, threads, 0, c->stream>>>(dst, (const __nv_bfloat16 *)src, n);
		return kc_launched();
	case KC_F16:
		convert_k<<<blocks, threads, 0, c->stream>>>(dst, (const __half *)src, n);
		return kc_launched();
	}
	return (int)cudaErrorInvalidValue;
}

} // namespace

extern "C" int kc_convert(kc_ctx *c, enum kc_dtype dt, void *dst, enum kc_dtype st,
			  const void *src, int64_t n)
{
	int s = kc_use_device(c);
	if (s || n <= 0)
		return s;
	if (dt == st)
		return kc_copy(c, dst, src, (size_t)n * kc_dtype_size(dt));
	switch (dt) {
	case KC_F32:
		return convert_to(c, (float *)dst, st, src, n);
	case KC_BF16:
		return convert_to(c, (__nv_bfloat16 *)dst, st, src, n);
	case KC_F16:
		return convert_to(c, (__half *)dst, st, src, n);
	}
	return (int)cudaErrorInvalidValue;
}
