/* index.cu — rows moved by a runtime index, index_select's gather and
 * index_copy's scatter (k_index_rows of kernels/cpu/kernels.h). One warp
 * per row of the index: it reads the index value (in the storage dtype),
 * checks that it is an integer in range, and copies the row in units U of
 * the widest size up to 16 bytes that the addresses and the row allow. */
#include <stdint.h>

#include "kernels/cuda/kc_internal.h"

namespace {

const int THREADS = 256;
const int WARPS = THREADS / 32;

/* The row an index value names, or -1 (as k_index_rows' index_row). */
__device__ __forceinline__ int64_t index_row(float v, int64_t rows)
{
	if (!(v >= 0.0f) || !(v < (float)rows))
		return -1;
	int64_t r = (int64_t)v;
	return (float)r == v && r < rows ? r : -1;
}

/* Rows in units: dst and src rows of `cols` units. Gather: warp w is dst
 * row (o, j), from src row (o, index[j]), zeros when the index is out of
 * range. Scatter: warp w is src row (o, j), to dst row (o, index[j]),
 * nothing when out of range. */
template <typename T, typename U>
__global__ void index_rows_kernel(U *__restrict__ dst, int64_t dst_rows,
				  const U *__restrict__ src, int64_t src_rows,
				  const T *__restrict__ index, int64_t n, int64_t outer,
				  int64_t cols, bool scatter)
{
	const int lane = threadIdx.x % 32;

	for (int64_t w = kc_warp(); w < outer * n; w += kc_warps()) {
		int64_t o = w / n, j = w % n;
		int64_t r = index_row(kc_to_f32<T>(index[j]), scatter ? dst_rows : src_rows);

		if (scatter) {
			if (r < 0)
				continue;
			U *d = dst + (o * dst_rows + r) * cols;
			const U *s = src + (o * n + j) * cols;
			for (int64_t i = lane; i < cols; i += 32)
				d[i] = s[i];
		} else {
			U *d = dst + (o * n + j) * cols;
			if (r < 0) {
				U z;
				memset(&z, 0, sizeof z);
				for (int64_t i = lane; i < cols; i += 32)
					d[i] = z;
				continue;
			}
			const U *s = src + (o * src_rows + r) * cols;
			for (int64_t i = lane; i < cols; i += 32)
				d[i] = s[i];
		}
	}
}

template <typename U>
struct Units {
	template <typename T>
	static int run(kc_ctx *c, void *dst, int64_t dst_rows, const void *src, int64_t src_rows,
		       const void *index, int64_t n, int64_t outer, int64_t row_bytes,
		       bool scatter)
	{
		index_rows_kernel<T, U><<<kc_blocks_for(c, WARPS, outer * n), THREADS, 0,
					   c->stream>>>((U *)dst, dst_rows, (const U *)src, src_rows,
							(const T *)index, n, outer,
							row_bytes / (int64_t)sizeof(U), scatter);
		return kc_launched();
	}
};

template <typename T>
int index_rows_t(kc_ctx *c, void *dst, int64_t dst_rows, const void *src, int64_t src_rows,
		 const void *index, int64_t n, int64_t outer, int64_t row_bytes, bool scatter)
{
	uintptr_t bits = (uintptr_t)dst | (uintptr_t)src | (uintptr_t)row_bytes;

	if (bits % 16 == 0)
		return Units<uint4>::run<T>(c, dst, dst_rows, src, src_rows, index, n, outer,
					    row_bytes, scatter);
	if (bits % 4 == 0)
		return Units<uint32_t>::run<T>(c, dst, dst_rows, src, src_rows, index, n, outer,
					       row_bytes, scatter);
	if (bits % 2 == 0)
		return Units<uint16_t>::run<T>(c, dst, dst_rows, src, src_rows, index, n, outer,
					       row_bytes, scatter);
	return Units<uint8_t>::run<T>(c, dst, dst_rows, src, src_rows, index, n, outer, row_bytes,
				      scatter);
}

} // namespace

extern "C" int kc_index_rows(kc_ctx *c, enum kc_dtype t, size_t elem_bytes, void *dst,
			     int64_t dst_rows, const void *src, int64_t src_rows, const void *index,
			     int64_t n, int64_t outer, int64_t inner, bool scatter)
{
	int st = kc_use_device(c);

	if (st)
		return st;
	if (n <= 0 || outer <= 0 || inner <= 0 || elem_bytes == 0)
		return 0;
	return KC_DISPATCH(t, index_rows_t, c, dst, dst_rows, src, src_rows, index, n, outer,
			   inner * (int64_t)elem_bytes, scatter);
}
