/* dtype.c — conversions between the storage dtypes (see kernels.h).
 *
 * bfloat16 is the top half of a float32, so widening is a shift and
 * narrowing rounds the low half away to nearest, ties to even (the
 * rounding PyTorch's .to(torch.bfloat16) does). float16 is converted by
 * bit arithmetic too, IEEE round-to-nearest-even: the compilers' _Float16
 * is not on every target (clang 14 on x86-64 lacks it). */
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/x86.h"

#include <math.h>
#include <string.h>

size_t k_dtype_size(enum k_dtype t)
{
	return t == K_F32 ? 4 : 2;
}

/* Branch-free, so that the loops below vectorise: a NaN keeps its sign and
 * stays a (quiet) NaN, selected after the add, since rounding its payload
 * could carry into the exponent and make it an infinity. */
static inline __attribute__((always_inline)) uint16_t bf16_of_bits(uint32_t u)
{
	uint32_t r = (u + 0x7fffu + ((u >> 16) & 1)) >> 16, q = (u >> 16) | 0x40;

	return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static uint16_t bf16_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return bf16_of_bits(u);
}

static float f32_of_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

static float f32_of_f16(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
	float f;

	if (e == 0x1f) /* infinity, NaN (payload kept) */
		u = sign | 0x7f800000u | (m << 13);
	else if (e) /* normal: rebias 15 -> 127 */
		u = sign | ((e + 112) << 23) | (m << 13);
	else { /* zero or subnormal: m * 2^-24, exact in float32 */
		f = (float)m * 0x1p-24f;
		memcpy(&u, &f, sizeof u);
		u |= sign;
	}
	memcpy(&f, &u, sizeof f);
	return f;
}

static uint16_t f16_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	u &= 0x7fffffffu;
	if (u > 0x7f800000u) /* NaN stays a quiet NaN */
		return sign | 0x7e00u | (uint16_t)((u >> 13) & 0x3ffu);
	if (u >= 0x477ff000u) /* 65520 and up round to infinity */
		return sign | 0x7c00u;
	if (u < 0x38800000u) { /* below 2^-14: a multiple of 2^-24, rounded to even
				* by nearbyintf (1024 is the smallest normal's code) */
		float a;
		memcpy(&a, &u, sizeof a);
		return sign | (uint16_t)nearbyintf(a * 0x1p24f);
	}
	/* normal: drop 13 mantissa bits to nearest, ties to even (a carry
	 * moves into the exponent, as it should), and rebias 127 -> 15 */
	u += 0xfffu + ((u >> 13) & 1);
	return sign | (uint16_t)((u - (112u << 23)) >> 13);
}

/* bf16 <-> float32 over n elements, in blocks of 16 so that -O2 vectorises
 * them: the bodies are inlined twice, into an AVX2 build and the baseline
 * one (rounding has an AVX-512 loop of its own below), and the CPU picks at
 * run time (as runtime/comm_local.c's sums, and
 * for its reason: no target_clones, whose resolver runs before a
 * sanitizer's runtime has started). */

static inline __attribute__((always_inline)) void
round_bf16_body(uint16_t *restrict d, const float *restrict s, int64_t n)
{
	int64_t i = 0;

	for (; i + 16 <= n; i += 16)
		for (int k = 0; k < 16; k++) {
			uint32_t u;

			memcpy(&u, s + i + k, sizeof u);
			d[i + k] = bf16_of_bits(u);
		}
	for (; i < n; i++)
		d[i] = bf16_of(s[i]);
}

static inline __attribute__((always_inline)) void
widen_bf16_body(float *restrict d, const uint16_t *restrict s, int64_t n)
{
	int64_t i = 0;

	for (; i + 16 <= n; i += 16)
		for (int k = 0; k < 16; k++)
			d[i + k] = f32_of_bf16(s[i + k]);
	for (; i < n; i++)
		d[i] = f32_of_bf16(s[i]);
}

__attribute__((target("avx2"))) static void round_bf16_avx2(uint16_t *restrict d,
							     const float *restrict s, int64_t n)
{
	round_bf16_body(d, s, n);
}

__attribute__((target("avx2"))) static void widen_bf16_avx2(float *restrict d,
							     const uint16_t *restrict s, int64_t n)
{
	widen_bf16_body(d, s, n);
}

/* Rounding on AVX-512: a block of 16 is one vector, through x86.h's
 * rounding (the same bits as bf16_of_bits); GCC 12 vectorises the body
 * above only to AVX2's width. 0.18 -> 0.12 ms for [1152, 512] on a
 * Sapphire Rapids core; widening, a shift, runs at memory speed either way. */
__attribute__((target("avx512f,avx512bw"))) static void
round_bf16_avx512(uint16_t *restrict d, const float *restrict s, int64_t n)
{
	int64_t i = 0;

	for (; i + 16 <= n; i += 16)
		_mm256_storeu_si256((__m256i *)(d + i), k_round_bf16x16(_mm512_loadu_ps(s + i)));
	for (; i < n; i++)
		d[i] = bf16_of(s[i]);
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
		return f32_of_f16(((const uint16_t *)p)[i]);
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
	/* the common cases get loops of their own, vectorised where the CPU
	 * has AVX2 (every bf16 op on the CPU widens and rounds its operands) */
	if (dt == K_F32 && st == K_BF16) {
		if (__builtin_cpu_supports("avx2"))
			widen_bf16_avx2(dst, src, n);
		else
			widen_bf16_body(dst, src, n);
		return;
	}
	if (dt == K_BF16 && st == K_F32) {
		if (__builtin_cpu_supports("avx512bw"))
			round_bf16_avx512(dst, src, n);
		else if (__builtin_cpu_supports("avx2"))
			round_bf16_avx2(dst, src, n);
		else
			round_bf16_body(dst, src, n);
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
			((uint16_t *)dst)[i] = f16_of(f);
			break;
		}
	}
}
