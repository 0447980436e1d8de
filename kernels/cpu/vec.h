/* vec.h — vector bodies of kernels/cpu shared between its files (not part of
 * the kernels' interface): compiled for AVX-512, AVX2 and the baseline in
 * attention.c and chosen per call like k_vexp. */
#ifndef DTPC_KERNELS_VEC_H
#define DTPC_KERNELS_VEC_H
#include <stdint.h>

/* k_gelu's tanh form and k_silu on n floats; y may equal x. */
void k_vec_gelu_tanh(const float *x, float *y, int64_t n);
void k_vec_silu(const float *x, float *y, int64_t n);
#endif
