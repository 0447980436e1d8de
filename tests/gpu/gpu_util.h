/* gpu_util.h — helpers shared by the GPU tests (tests/gpu/test_*.c) and
 * the GPU benchmarks (bench/gpu/NAME.c). Each of those is its own program
 * (see the Makefile), so everything here is static, and a program leaves
 * unused what it does not need (static inline: no unused warnings).
 *
 * A program calls gpu_util_init() first thing in main: its name (error
 * messages on stderr begin with it), its PRNG seed, and optionally how a
 * failed kc_ or CUDA runtime call ends it (a TAP test reports "not ok"
 * first; NULL: a message on stderr and exit status 1). `ctx` is the
 * program's one context, which the device helpers use.
 *
 *   rng_next, urand     tests/rand.h: splitmix64 and uniform floats in (-1, 1)
 *   round_to,           a dtype's values on the host (the CPU kernels'
 *   to_storage, ...     k_convert: round to nearest even)
 *   check, dev_alloc,   a kc_ status checked; device buffers (uninitialised,
 *   dev_random          or random in (-1, 1) with bf16/f16 by truncation)
 *   xmalloc             malloc or exit
 *   normwise_error      ||got - ref||_2 / ||ref||_2 and the worst element
 *   time_median_ms      the median of timed calls (cli/median.c), each
 *                       between its own pair of CUDA events */
#ifndef DTPC_TESTS_GPU_UTIL_H
#define DTPC_TESTS_GPU_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cli/median.h"
#include "tests/rand.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels_cuda.h"

static kc_ctx *ctx;

static const char *gu_prog = "gpu";
static void (*gu_on_fail)(const char *what, int st);

/* prog: the program's name for messages; seed: the PRNG's starting state;
 * on_fail: called with what failed and its status (it must not return), or
 * NULL. */
static inline void gpu_util_init(const char *prog, uint64_t seed,
				 void (*on_fail)(const char *what, int st))
{
	gu_prog = prog;
	rng_state = seed;
	gu_on_fail = on_fail;
}

/* ---- random numbers ---- */


/* ---- storage dtypes on the host: the CPU kernels' conversions (round to
 * nearest even), so that host and device agree on what a dtype holds ---- */

_Static_assert((int)KC_F32 == (int)K_F32 && (int)KC_BF16 == (int)K_BF16 &&
		       (int)KC_F16 == (int)K_F16,
	       "kc_dtype and k_dtype name the dtypes alike");

static inline const char *dtype_name(enum kc_dtype t)
{
	return t == KC_F32 ? "f32" : t == KC_BF16 ? "bf16" : "f16";
}

/* x rounded to dtype t, as a float. */
static inline float round_to(enum kc_dtype t, float x)
{
	uint16_t h[2];
	float y;

	k_convert(h, (enum k_dtype)t, &x, K_F32, 1);
	k_convert(&y, K_F32, h, (enum k_dtype)t, 1);
	return y;
}

/* n floats into dtype t at dst (exact when they were rounded to t). */
static inline void to_storage(enum kc_dtype t, const float *src, void *dst, size_t n)
{
	k_convert(dst, (enum k_dtype)t, src, K_F32, (int64_t)n);
}

static inline void from_storage(enum kc_dtype t, const void *src, float *dst, size_t n)
{
	k_convert(dst, K_F32, src, (enum k_dtype)t, (int64_t)n);
}

/* ---- memory and statuses: any failure ends the program with the reason ---- */

static inline void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "%s: out of host memory\n", gu_prog);
		exit(1);
	}
	return p;
}

/* st: a kc_ status, or a CUDA runtime one cast to int; what: the call. */
static inline void check(int st, const char *what)
{
	if (st) {
		if (gu_on_fail)
			gu_on_fail(what, st);
		fprintf(stderr, "%s: %s: %s\n", gu_prog, what, kc_error_string(st));
		exit(1);
	}
}

static inline void *dev_alloc(size_t bytes)
{
	void *p;

	check(kc_alloc(ctx, &p, bytes), "kc_alloc");
	return p;
}

/* A new device buffer of n values uniform in (-1, 1), from urand, in dtype
 * t: f32 as drawn, bf16 and f16 by truncating the float's bits (only the
 * spread of the values matters; f16 so is not a faithful value). */
static inline void *dev_random(enum kc_dtype t, size_t n)
{
	size_t es = kc_dtype_size(t);
	unsigned char *h = xmalloc(n * es);
	void *d = dev_alloc(n * es);

	for (size_t i = 0; i < n; i++) {
		float f = urand();
		uint32_t u;

		memcpy(&u, &f, 4);
		if (t == KC_F32) {
			memcpy(h + 4 * i, &u, 4);
		} else {
			uint16_t b = (uint16_t)(u >> 16);

			memcpy(h + 2 * i, &b, 2);
		}
	}
	check(kc_upload(ctx, d, h, n * es), "kc_upload");
	free(h);
	return d;
}

/* ---- comparison ---- */

/* The normwise relative error of got against ref: ||got - ref||_2 /
 * ||ref||_2, or ||got - ref||_2 where ref is all 0. Returns the index of
 * the first non-finite element of got (a NaN there: an element never
 * written), with *rel infinite, *worst that index and *ref_sq 0; else n,
 * with *rel, *worst (the index of the largest |got - ref|, 0 when n is 0)
 * and *ref_sq (the sum of ref^2). */
static inline size_t normwise_error(const float *got, const float *ref, size_t n, double *rel,
				    size_t *worst, double *ref_sq)
{
	double num = 0.0, den = 0.0, wd = -1.0;
	size_t wi = 0;

	for (size_t i = 0; i < n; i++) {
		if (!isfinite(got[i])) {
			*rel = INFINITY;
			*worst = i;
			*ref_sq = 0.0;
			return i;
		}
		double d = (double)got[i] - (double)ref[i];

		num += d * d;
		den += (double)ref[i] * ref[i];
		if (fabs(d) > wd) {
			wd = fabs(d);
			wi = i;
		}
	}
	*rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
	*worst = wi;
	*ref_sq = den;
	return n;
}

/* ---- timing ---- */

enum { GU_MAX_REPS = 64 };

/* Median milliseconds of reps calls of fn(arg) (at most GU_MAX_REPS) after
 * warmup untimed ones, each timed call between its own pair of CUDA events
 * on the context's stream; fn returns a kc_ status. wait_each: 1 waits for
 * each timed call before issuing the next (what issuing a call costs the
 * host shows wherever it exceeds the device's time); 0 issues them all
 * after waiting for the warm-up, then waits once. */
static inline double time_median_ms(int (*fn)(void *), void *arg, int warmup, int reps,
				    int wait_each)
{
	cudaStream_t s = (cudaStream_t)kc_stream(ctx);
	cudaEvent_t ev[2 * GU_MAX_REPS];
	float ms[GU_MAX_REPS];

	if (reps < 1 || reps > GU_MAX_REPS) {
		fprintf(stderr, "%s: time_median_ms: %d repetitions (1 to %d)\n", gu_prog, reps,
			GU_MAX_REPS);
		exit(1);
	}
	for (int i = 0; i < 2 * reps; i++)
		check((int)cudaEventCreate(&ev[i]), "cudaEventCreate");
	for (int i = 0; i < warmup; i++)
		check(fn(arg), "warm-up");
	if (!wait_each)
		check(kc_sync(ctx), "warm-up");
	for (int i = 0; i < reps; i++) {
		check((int)cudaEventRecord(ev[2 * i], s), "cudaEventRecord");
		check(fn(arg), "timed run");
		check((int)cudaEventRecord(ev[2 * i + 1], s), "cudaEventRecord");
		if (wait_each)
			check((int)cudaEventSynchronize(ev[2 * i + 1]), "cudaEventSynchronize");
	}
	check(kc_sync(ctx), "timed runs");
	for (int i = 0; i < reps; i++)
		check((int)cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]),
		      "cudaEventElapsedTime");
	for (int i = 0; i < 2 * reps; i++)
		cudaEventDestroy(ev[i]);
	double d[GU_MAX_REPS];
	for (int i = 0; i < reps; i++)
		d[i] = (double)ms[i];
	return median(d, reps);
}

#endif
