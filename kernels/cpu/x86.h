/* x86.h — small AVX-512 and AMX building blocks the CPU kernels share
 * (linear.c's packing of w, attention.c's packing of keys for AMX, the bf16
 * roundings of linear.c's epilogue and dtype.c's conversions, the AMX
 * configuration and block step of linear.c and attention.c). Each carries its own
 * target attribute, so the including file needs no -m flags. */
#ifndef DTPC_KERNELS_X86_H
#define DTPC_KERNELS_X86_H
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdint.h>

/* 16 rows of 16 floats, transposed in registers: out[l] holds the l-th float
 * of every row. */
__attribute__((target("avx512f"), always_inline)) static inline void k_transpose16(__m512 r[16])
{
	__m512 t[16];

	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
	}
	for (int i = 0; i < 16; i += 4) {
		r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
		r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
		r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
		r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
	}
	/* each 128-bit lane of r[4g + q] now holds floats 4 lane + q of rows
	 * 4g .. 4g + 3: gather the lanes of the four groups */
	for (int q = 0; q < 4; q++) {
		__m512 a = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88);   /* lanes 0, 2 | 0, 2 */
		__m512 b = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88);
		__m512 c = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xdd);   /* lanes 1, 3 | 1, 3 */
		__m512 d = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xdd);

		t[q] = _mm512_shuffle_f32x4(a, b, 0x88);      /* lane 0 of each group */
		t[8 + q] = _mm512_shuffle_f32x4(a, b, 0xdd);  /* lane 2 */
		t[4 + q] = _mm512_shuffle_f32x4(c, d, 0x88);  /* lane 1 */
		t[12 + q] = _mm512_shuffle_f32x4(c, d, 0xdd); /* lane 3 */
	}
	for (int i = 0; i < 16; i++)
		r[i] = t[i];
}

/* 16 floats rounded to bf16 as k_convert rounds them (to nearest, ties to
 * even; a NaN stays a quiet NaN of its sign). */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline __m256i
k_round_bf16x16(__m512 v)
{
	__m512i u = _mm512_castps_si512(v);
	__m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_srli_epi32(
		_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
	__m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));

	r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, nan);
	return _mm512_cvtepi32_epi16(r);
}

/* ---- AMX: eight tiles of 16 rows x 64 bytes; tiles 0-1 hold A's two row
 * blocks, 2-3 B's two column blocks, 4-7 the 2 x 2 blocks of float32
 * sums. Only where k_amx_available says so. */
#define K_AMX_T __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

/* Loads the configuration on the calling thread (_tile_release() when
 * done). Not _tile_loadconfig: GCC 12 declares its operand a single byte, so
 * the stores of colsb and rows were dropped as dead (seen in the object
 * code; ldtilecfg then faulted on a configuration of zeros). */
__attribute__((always_inline)) static inline void k_amx_begin(void)
{
	struct {
		uint8_t palette, start_row, reserved[14];
		uint16_t colsb[16];
		uint8_t rows[16];
	} cfg = { .palette = 1 };

	for (int t = 0; t < 8; t++) {
		cfg.colsb[t] = 64;
		cfg.rows[t] = 16;
	}
	__asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

/* Sums 4-7 set to zero. */
K_AMX_T __attribute__((always_inline)) static inline void k_amx_zero_sums(void)
{
	_tile_zero(4);
	_tile_zero(5);
	_tile_zero(6);
	_tile_zero(7);
}

/* Sums 4-7 += A B for one depth of 32 bf16 (16 pairs): A's row blocks at a0
 * and a1 (rows lda bytes apart, 32 bf16 a row), B's column blocks at b0 and
 * b1 (16 pair-words a row, rows ldb bytes apart); sum 4 + 2 i + j is A
 * block i times B block j. */
K_AMX_T __attribute__((always_inline)) static inline void
k_amx_step(const void *a0, const void *a1, int64_t lda, const void *b0, const void *b1,
	   int64_t ldb)
{
	_tile_loadd(0, a0, lda);
	_tile_loadd(1, a1, lda);
	_tile_loadd(2, b0, ldb);
	_tile_loadd(3, b1, ldb);
	_tile_dpbf16ps(4, 0, 2);
	_tile_dpbf16ps(5, 0, 3);
	_tile_dpbf16ps(6, 1, 2);
	_tile_dpbf16ps(7, 1, 3);
}

/* Sums 4-7 into dst's first 32 rows and columns (rows ld floats apart). */
K_AMX_T __attribute__((always_inline)) static inline void k_amx_store_sums(float *dst, int64_t ld)
{
	_tile_stored(4, dst, ld * 4);
	_tile_stored(5, dst + 16, ld * 4);
	_tile_stored(6, dst + 16 * ld, ld * 4);
	_tile_stored(7, dst + 16 * ld + 16, ld * 4);
}

#endif
#endif
