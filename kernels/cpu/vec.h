/* vec.h — vector bodies of kernels/cpu shared between its files (not part of
 * the kernels' interface): compiled for AVX-512, AVX2 and the baseline in
 * attention.c and chosen per call like k_vexp. */
#ifndef DTPC_KERNELS_VEC_H
#define DTPC_KERNELS_VEC_H
#include <stdint.h>
#include <string.h>

/* 4 floats (the baseline's vector), loaded and stored through memcpy
 * (vf_load, vf_store: any alignment): a whole vector is read before it is
 * written, so an output may be an input (an in-place add), which a plain
 * loop would have to check before GCC's -O2 vectorised it (it does not:
 * such rows ran a float a cycle). The row kernels of elementwise.c and
 * rope.c, and attention.c's merge, run on it. */
#define VF 4
typedef float vf __attribute__((vector_size(VF * 4)));

static inline __attribute__((always_inline)) vf vf_load(const float *p)
{
	vf v;

	memcpy(&v, p, sizeof v);
	return v;
}

static inline __attribute__((always_inline)) void vf_store(float *p, vf v)
{
	memcpy(p, &v, sizeof v);
}

/* v's pairs swapped, [v1 v0 v3 v2]: GCC's builtin and clang's (the fuzz
 * targets) differ. */
static inline __attribute__((always_inline)) vf vf_swap_pairs(vf v)
{
#ifdef __clang__
	return __builtin_shufflevector(v, v, 1, 0, 3, 2);
#else
	typedef int32_t vi __attribute__((vector_size(VF * 4)));

	return __builtin_shuffle(v, (vi){ 1, 0, 3, 2 });
#endif
}

/* k_gelu's tanh form and k_silu on n floats; y may equal x. */
void k_vec_gelu_tanh(const float *x, float *y, int64_t n);
void k_vec_silu(const float *x, float *y, int64_t n);
#endif
