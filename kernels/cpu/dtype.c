/* dtype.c — conversions between the storage dtypes (see kernels.h).
 *
 * bfloat16 is the top half of a float32, so widening is a shift and
 * narrowing rounds the low half away to nearest, ties to even (the
 * rounding PyTorch's .to(torch.bfloat16) does). float16 goes through the
 * compiler's _Float16, whose conversions are IEEE round-to-nearest-even
 * (F16C instructions where the target has them). */
#include "kernels/cpu/kernels.h"

#include <string.h>

__extension__ typedef _Float16 half; /* GCC and Clang have it on x86-64 and arm64 */

size_t k_dtype_size(enum k_dtype t)
{
	return t == K_F32 ? 4 : 2;
}

static uint16_t bf16_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	/* a NaN keeps its sign and stays a (quiet) NaN: rounding its payload
	 * could carry into the exponent and make it an infinity */
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static float f32_of_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

/* One element of dtype t at p, widened. */
static float load(const void *p, enum k_dtype t, int64_t i)
{
	switch (t) {
	case K_F32:
		return ((const float *)p)[i];
	case K_BF16:
		return f32_of_bf16(((const uint16_t *)p)[i]);
	case K_F16:
		return (float)((const half *)p)[i];
	}
	return 0;
}

void k_convert(void *dst, enum k_dtype dt, const void *src, enum k_dtype st, int64_t n)
{
	if (n <= 0)
		return;
	if (dt == st) {
		memmove(dst, src, (size_t)n * k_dtype_size(dt));
		return;
	}
	/* the common cases get loops of their own, which the compiler vectorises */
	if (dt == K_F32 && st == K_BF16) {
		float *d = dst;
		const uint16_t *s = src;

		for (int64_t i = 0; i < n; i++)
			d[i] = f32_of_bf16(s[i]);
		return;
	}
	if (dt == K_BF16 && st == K_F32) {
		uint16_t *d = dst;
		const float *s = src;

		for (int64_t i = 0; i < n; i++)
			d[i] = bf16_of(s[i]);
		return;
	}
	for (int64_t i = 0; i < n; i++) {
		float f = load(src, st, i);

		switch (dt) {
		case K_F32:
			((float *)dst)[i] = f;
			break;
		case K_BF16:
			((uint16_t *)dst)[i] = bf16_of(f);
			break;
		case K_F16:
			((half *)dst)[i] = (half)f;
			break;
		}
	}
}
