/* arena.c — chunked bump allocator (see arena.h for why). */
#include "arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct chunk {
	struct chunk *next;
	size_t size, used;
	max_align_t data[];
};

struct arena {
	struct chunk *head;
	size_t total;
};

enum { CHUNK_MIN = 64 * 1024 };

static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p) {
		fprintf(stderr, "dtpc: out of memory (%zu bytes)\n", n);
		abort();
	}
	return p;
}

struct arena *arena_create(void)
{
	struct arena *a = xmalloc(sizeof *a);
	a->head = NULL;
	a->total = 0;
	return a;
}

void arena_free(struct arena *a)
{
	if (!a)
		return;
	for (struct chunk *c = a->head, *n; c; c = n) {
		n = c->next;
		free(c);
	}
	free(a);
}

void *arena_alloc(struct arena *a, size_t n)
{
	void *p = arena_alloc_raw(a, n);
	memset(p, 0, n);
	return p;
}

void *arena_alloc_raw(struct arena *a, size_t n)
{
	const size_t align = sizeof(max_align_t);
	n = (n + align - 1) / align * align;
	if (n == 0)
		n = align;
	struct chunk *c = a->head;
	if (!c || c->size - c->used < n) {
		size_t size = n > CHUNK_MIN ? n : CHUNK_MIN;
		if (c && size < c->size * 2 && c->size < 16u * 1024 * 1024)
			size = c->size * 2;
		c = xmalloc(sizeof *c + size);
		c->size = size;
		c->used = 0;
		c->next = a->head;
		a->head = c;
	}
	void *p = (char *)c->data + c->used;
	c->used += n;
	a->total += n;
	return p;
}

char *arena_strndup(struct arena *a, const char *s, size_t n)
{
	char *d = arena_alloc(a, n + 1);
	memcpy(d, s, n);
	d[n] = 0;
	return d;
}

char *arena_strdup(struct arena *a, const char *s)
{
	return arena_strndup(a, s, strlen(s));
}

char *arena_printf(struct arena *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *d = arena_alloc(a, (size_t)n + 1);
	va_start(ap, fmt);
	vsnprintf(d, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return d;
}

char *arena_concat(struct arena *a, ...)
{
	va_list ap;
	size_t n = 0;
	va_start(ap, a);
	for (const char *s; (s = va_arg(ap, const char *));)
		n += strlen(s);
	va_end(ap);
	char *d = arena_alloc(a, n + 1), *o = d;
	va_start(ap, a);
	for (const char *s; (s = va_arg(ap, const char *));) {
		size_t k = strlen(s);
		memcpy(o, s, k);
		o += k;
	}
	va_end(ap);
	*o = 0;
	return d;
}
