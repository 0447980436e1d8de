/* strmap.c — open addressing, linear probing, FNV-1a. */
#include "strmap.h"

#include <stdint.h>
#include <string.h>

#include "arena.h"

struct slot {
	const char *key;
	uint32_t hash; /* compared before the key: most probes end here */
	int val;
};

struct strmap {
	struct arena *arena;
	struct slot *slots;
	size_t cap, count;
};

static uint32_t hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	/* fold the high bits in: names differ mostly in their last bytes */
	return (uint32_t)(h ^ (h >> 29) ^ (h >> 47));
}

struct strmap *strmap_create(struct arena *a, size_t hint)
{
	struct strmap *m = ARENA_NEW(a, struct strmap);
	m->arena = a;
	m->cap = 8;
	while (m->cap < hint * 4)
		m->cap *= 2;
	m->slots = ARENA_ARRAY(a, struct slot, m->cap);
	return m;
}

static struct slot *find(const struct strmap *m, const char *key, uint32_t h)
{
	size_t i = h & (m->cap - 1);
	while (m->slots[i].key && (m->slots[i].hash != h || strcmp(m->slots[i].key, key)))
		i = (i + 1) & (m->cap - 1);
	return &m->slots[i];
}

int strmap_get(const struct strmap *m, const char *key)
{
	const struct slot *s = find(m, key, hash(key));
	return s->key ? s->val : -1;
}

void strmap_put(struct strmap *m, const char *key, int val)
{
	if ((m->count + 1) * 2 > m->cap) {
		struct slot *old = m->slots;
		size_t oldcap = m->cap;
		m->cap *= 2;
		m->slots = ARENA_ARRAY(m->arena, struct slot, m->cap);
		for (size_t i = 0; i < oldcap; i++)
			if (old[i].key)
				*find(m, old[i].key, old[i].hash) = old[i];
	}
	uint32_t h = hash(key);
	struct slot *s = find(m, key, h);
	if (!s->key) {
		s->key = key;
		s->hash = h;
		m->count++;
	}
	s->val = val;
}
