/* index.c — rows moved by a runtime index: index_select's gather and
 * index_copy's scatter (the family of runtime/ops/index.c). Pure data
 * movement: elements of any storage dtype are copied as bytes. */
#include <string.h>

#include "kernels/cpu/kernels.h"

/* The row an index value names, or -1: an integer in [0, rows) (NaN and
 * fractions are not). */
static int64_t index_row(float v, int64_t rows)
{
	if (!(v >= 0.0f) || !(v < (float)rows))
		return -1;
	int64_t r = (int64_t)v;
	return (float)r == v && r < rows ? r : -1;
}

void k_index_rows(void *dst, int64_t dst_rows, const void *src, int64_t src_rows,
		  const float *index, int64_t n, int64_t outer, int64_t inner, size_t esize,
		  bool scatter)
{
	size_t row = (size_t)inner * esize;

	if (inner <= 0 || n <= 0)
		return;
	for (int64_t o = 0; o < outer; o++) {
		char *d = (char *)dst + (size_t)(o * (scatter ? dst_rows : n)) * row;
		const char *s = (const char *)src + (size_t)(o * (scatter ? n : src_rows)) * row;

		for (int64_t j = 0; j < n; j++) {
			int64_t r = index_row(index[j], scatter ? dst_rows : src_rows);

			if (scatter) {
				if (r >= 0)
					memcpy(d + (size_t)r * row, s + (size_t)j * row, row);
			} else if (r >= 0) {
				memcpy(d + (size_t)j * row, s + (size_t)r * row, row);
			} else {
				memset(d + (size_t)j * row, 0, row);
			}
		}
	}
}
