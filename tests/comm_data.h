/* comm_data.h — deterministic test data for the communication tests (the
 * threads test and the MPI test): byte streams and floats that are never
 * zero, so a collective that delivers nothing or the wrong peer's bytes
 * cannot pass. */
#ifndef DTPC_TEST_COMM_DATA_H
#define DTPC_TEST_COMM_DATA_H
#include <stddef.h>
#include <stdint.h>

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
#endif
