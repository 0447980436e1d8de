/* memplan.c — the static memory plan: one arena per rank.
 *
 * Every input, activation and scratch tensor lives in [def, last] over op
 * indices: inputs for the whole run (they stay bound between runs), outputs
 * to the end, scratch only during its op. A linear scan over ops frees what died before the op and
 * places what it defines at the lowest fitting offset (first fit over a
 * coalescing free list). Sizes are each tensor's largest size over ranks, so
 * one plan serves every rank. Two tensors overlap in memory only if their
 * live ranges do not: an op never writes its output over its own inputs. */
#include <string.h>

#include "arena.h"
#include "lower.h"

struct span {
	uint64_t off, size;
};

struct freelist {
	struct span *v;
	size_t n, cap;
	uint64_t top; /* end of the highest span ever handed out */
	struct arena *a;
};

static uint64_t align_up(uint64_t x)
{
	return (x + G_ALIGN - 1) / G_ALIGN * G_ALIGN;
}

/* Offsets and the top stay below the sum of every tensor's aligned size,
 * which lower.c keeps under 2^63: this arithmetic cannot overflow. */
static uint64_t fl_take(struct freelist *f, uint64_t size)
{
	size = align_up(size ? size : 1);
	for (size_t i = 0; i < f->n; i++) {
		if (f->v[i].size < size)
			continue;
		uint64_t off = f->v[i].off;
		f->v[i].off += size;
		f->v[i].size -= size;
		if (!f->v[i].size) {
			memmove(&f->v[i], &f->v[i + 1], sizeof *f->v * (f->n - i - 1));
			f->n--;
		}
		return off;
	}
	/* grow the arena; a free span at its end is extended, not skipped */
	if (f->n && f->v[f->n - 1].off + f->v[f->n - 1].size == f->top) {
		uint64_t off = f->v[f->n - 1].off;
		f->top = off + size;
		f->n--;
		return off;
	}
	uint64_t off = f->top;
	f->top += size;
	return off;
}

static void fl_give(struct freelist *f, uint64_t off, uint64_t size)
{
	size = align_up(size ? size : 1);
	size_t i = 0;
	while (i < f->n && f->v[i].off < off)
		i++;
	if (f->n == f->cap) {
		size_t nc = f->cap ? f->cap * 2 : 64;
		struct span *nv = arena_alloc(f->a, sizeof *nv * nc);
		if (f->n)
			memcpy(nv, f->v, sizeof *nv * f->n);
		f->v = nv;
		f->cap = nc;
	}
	memmove(&f->v[i + 1], &f->v[i], sizeof *f->v * (f->n - i));
	f->v[i] = (struct span){ off, size };
	f->n++;
	/* coalesce with the neighbours */
	if (i + 1 < f->n && f->v[i].off + f->v[i].size == f->v[i + 1].off) {
		f->v[i].size += f->v[i + 1].size;
		memmove(&f->v[i + 1], &f->v[i + 2], sizeof *f->v * (f->n - i - 2));
		f->n--;
	}
	if (i > 0 && f->v[i - 1].off + f->v[i - 1].size == f->v[i].off) {
		f->v[i - 1].size += f->v[i].size;
		memmove(&f->v[i], &f->v[i + 1], sizeof *f->v * (f->n - i - 1));
		f->n--;
	}
}

void memplan_run(struct arena *a, struct g_graph *g)
{
	struct g_tensor *T = (struct g_tensor *)g->tensors;
	uint32_t n = g->ntensors, nops = g->nops;
	int64_t *def = arena_alloc(a, sizeof *def * (n ? n : 1));
	int64_t *last = arena_alloc(a, sizeof *last * (n ? n : 1));
	for (uint32_t t = 0; t < n; t++) {
		def[t] = T[t].kind == GT_INPUT ? -1 : (int64_t)nops;
		/* outputs are read after the run; inputs stay bound for the
		 * next run, so neither is ever overwritten */
		last[t] = (T[t].flags & G_TF_OUTPUT) || T[t].kind == GT_INPUT ? (int64_t)nops : -1;
	}
	for (uint32_t i = 0; i < nops; i++) {
		const struct g_op *o = &g->ops[i];
		if (def[o->out] > i)
			def[o->out] = i;
		for (uint32_t k = 0; k < o->nin; k++) {
			uint32_t t = g->operands[o->in0 + k];
			if (last[t] < i)
				last[t] = i;
		}
		if (o->scratch >= 0) {
			def[o->scratch] = i;
			last[o->scratch] = i;
		}
	}
	/* Step k (from -1, the inputs, to nops - 1) first frees the tensors
	 * last read before op k, then places those op k defines: bucket
	 * def + 1 for placing, last + 2 for freeing (outputs never freed). */
	uint64_t nb = (uint64_t)nops + 3;
	int64_t *put_head = arena_alloc(a, sizeof *put_head * nb);
	int64_t *free_head = arena_alloc(a, sizeof *free_head * nb);
	int64_t *put_next = arena_alloc(a, sizeof *put_next * (n ? n : 1));
	int64_t *free_next = arena_alloc(a, sizeof *free_next * (n ? n : 1));
	for (uint64_t i = 0; i < nb; i++)
		put_head[i] = free_head[i] = -1;
	for (uint32_t t = 0; t < n; t++) {
		if (T[t].kind == GT_WEIGHT || def[t] == nops)
			continue; /* weights live outside the arena; unproduced: no room */
		if (last[t] < def[t])
			last[t] = def[t]; /* produced, never read: live at its op */
		put_next[t] = put_head[def[t] + 1];
		put_head[def[t] + 1] = t;
		free_next[t] = free_head[last[t] + 2];
		free_head[last[t] + 2] = t;
	}
	struct freelist f = { .a = a };
	for (uint64_t s = 0; s <= nops; s++) {
		for (int64_t t = free_head[s]; t >= 0; t = free_next[t])
			fl_give(&f, T[t].offset, T[t].bytes);
		for (int64_t t = put_head[s]; t >= 0; t = put_next[t])
			T[t].offset = fl_take(&f, T[t].bytes);
	}
	g->arena_bytes = f.top;
}
