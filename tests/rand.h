/* rand.h — the tests' random inputs (C unit tests and GPU tests): splitmix64
 * from a fixed seed, and uniform floats on the odd multiples of 2^-24 in
 * (-1, 1) — never 0, and exactly a float, so float64 references see the
 * same inputs as the kernels. A program that wants another sequence sets
 * rng_state first. Everything is static: each test is its own program. */
#ifndef DTPC_TESTS_RAND_H
#define DTPC_TESTS_RAND_H
#include <stdint.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static inline uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline float urand(void)
{
	return (float)((2.0 * (double)(rng_next() >> 40) + 1.0) / 16777216.0 - 1.0);
}
#endif
