/* comm_data.h — deterministic test data for the communication tests (the
 * threads test and the MPI test): byte streams and floats that are never
 * zero, so a collective that delivers nothing or the wrong peer's bytes
 * cannot pass. */
#ifndef DTPC_TEST_COMM_DATA_H
#define DTPC_TEST_COMM_DATA_H
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/comm.h"

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Byte `pos` of stream `src` under `seed`: never zero. */
static uint8_t byte_at(uint64_t seed, uint64_t src, size_t pos)
{
	uint8_t b = (uint8_t)(mix(seed ^ (src << 40) ^ (pos / 8)) >> (8 * (pos % 8)));
	return b ? b : 0x5a;
}

static void fill(void *buf, size_t len, uint64_t seed, uint64_t src)
{
	uint8_t *p = buf;
	for (size_t i = 0; i < len; i++)
		p[i] = byte_at(seed, src, i);
}

/* Bytes of buf that differ from stream src. */
static long wrong_bytes(const void *buf, size_t len, uint64_t seed, uint64_t src)
{
	const uint8_t *p = buf;
	long bad = 0;
	for (size_t i = 0; i < len; i++)
		bad += p[i] != byte_at(seed, src, i);
	return bad;
}

/* Element i of rank r's allreduce input: in [-1, 1], never zero. */
static float float_at(uint64_t seed, int r, size_t i)
{
	uint64_t h = mix(seed ^ ((uint64_t)r << 40) ^ i);
	float f = (float)((h >> 40) + 1) / 16777216.0f;
	return h & 1 ? f : -f;
}
/* A reduce-scatter's pieces on g: counts[i] floats for member i, all
 * `scale` (even) or uneven with member 1's empty; *lo the first element of
 * my piece, *total the elements of all. Returns my piece's size. */
static size_t rs_layout(const struct comm_group *g, size_t scale, int even, size_t *counts,
			size_t *lo, size_t *total)
{
	*lo = *total = 0;
	for (int i = 0; i < g->n; i++) {
		counts[i] = even ? scale : i == 1 ? 0 : scale + 5 * (size_t)i + 1;
		*lo += i < g->me ? counts[i] : 0;
		*total += counts[i];
	}
	return counts[g->me];
}

/* The elements of a reduce-scatter's result (got: this member's piece,
 * elements lo .. lo + mine of every member's float_at input) that miss the
 * float64 sum of the members' inputs by more than (n - 1) float32
 * roundings of their magnitudes. control: the sum without member 0, which
 * every element must miss — the count of those that do not. */
static long rs_wrong(uint64_t seed, const struct comm_group *g, size_t lo, size_t mine,
		     const float *got, int control)
{
	long bad = 0;
	for (size_t e = 0; e < mine; e++) {
		double ref = 0, mag = 0;
		for (int m = control ? 1 : 0; m < g->n; m++) {
			double x = float_at(seed, g->ranks[m], lo + e);
			ref += x;
			mag += fabs(x);
		}
		bad += fabs(got[e] - ref) > (g->n - 1) * (double)FLT_EPSILON * mag;
	}
	return control ? (long)mine - bad : bad;
}

/* All-to-all sizes for sender i, receiver k: uneven, some zero. */
static size_t a2a_count(int i, int k, size_t scale)
{
	return (i * 7 + k * 13) % 5 == 0 ? 0 : scale * (size_t)(1 + i + 2 * k) + 11 * (size_t)k;
}

/* Member me's all-to-all counts and displacements over n members, with
 * gaps between the pieces (5 bytes sent, 3 received) that must stay
 * untouched; the totals go to *stot and *rtot. */
static void a2a_layout(int me, int n, size_t scale, size_t *sc, size_t *sd, size_t *rc,
		       size_t *rd, size_t *stot, size_t *rtot)
{
	*stot = *rtot = 0;
	for (int k = 0; k < n; k++) {
		sc[k] = a2a_count(me, k, scale);
		sd[k] = *stot;
		*stot += sc[k] + 5;
		rc[k] = a2a_count(k, me, scale);
		rd[k] = *rtot;
		*rtot += rc[k] + 3;
	}
}

/* Ring-shift chunk sizes: uneven by origin. */
static size_t chunk_size(int origin, size_t scale)
{
	return scale + 100 * (size_t)origin;
}

/* Point-to-point patterns for exchange_start over n members. */
enum xpattern {
	XP_ALL_PAIRS,   /* every member to every member, itself too */
	XP_PERMUTATION, /* member i to member (5i + 2) mod n only (n prime to 5) */
	XP_N,
};

/* The bytes member i sends member k in pattern p: uneven, some zero-byte
 * messages (sent and received all the same); -1 where i sends k nothing. */
static long xp_bytes(int p, int n, int i, int k, size_t scale)
{
	if (p == XP_PERMUTATION)
		return k == (5 * i + 2) % n ? (long)(scale * (size_t)(1 + i)) + 3 : -1;
	return (i * 7 + k * 13) % 5 == 0 ? 0 : (long)(scale * (size_t)(1 + i + 2 * k) + 11 * (size_t)k);
}

/* The stream a message from world rank `from` to world rank `to` carries. */
static uint64_t xp_stream(int from, int to)
{
	return (uint64_t)from * 64 + (uint64_t)to;
}
#endif
