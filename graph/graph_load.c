/* graph_load.c — the validating, zero-copy loader of .graph files
 * (docs/graph-format.md), and the queries every user of a loaded graph shares.
 *
 * graph_parse checks the whole file before it returns, so that the queries,
 * the executor and the inspector can index every table without checks of
 * their own: after a successful load every index is in range, every block is
 * tiled by its chunks, and every tensor's local piece fits its bytes and the
 * arena. The checks are linear in the file's size (patterns own disjoint chunk
 * ranges, the string blob ends in a NUL), so a hostile file cannot make
 * loading slow either. */
#include "graph/error.h"
#include "graph/graph.h"
#include "graph/op_attrs.h"
#include "graph/op_graph.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/version.h"

struct loader {
	const uint8_t *buf;
	size_t len;
	struct g_graph *g;
	uint64_t table_end; /* where the section table ends */
	uint16_t minor;     /* the file's minor version */
};

/* What this version knows of each section: for the messages, the element
 * size it must have, the largest count the g_graph field can hold, and the
 * minor version from which a file must have it. */
static const struct {
	const char *name;
	uint32_t elem;
	uint64_t max;
	uint16_t since;
} known[GS_COUNT] = {
	[GS_PROGRAM] = { "program", sizeof(struct g_program), 1, 0 },
	[GS_STRTAB] = { "strtab", 1, UINT64_MAX, 0 },
	[GS_STROFF] = { "stroff", sizeof(uint32_t), UINT32_MAX, 0 },
	[GS_META] = { "meta", sizeof(struct g_meta), UINT32_MAX, 0 },
	[GS_AXES] = { "axes", sizeof(struct g_axis), UINT32_MAX, 0 },
	[GS_GROUPS] = { "groups", sizeof(struct g_group), UINT32_MAX, 0 },
	[GS_PATTERNS] = { "patterns", sizeof(struct g_pattern), UINT32_MAX, 0 },
	[GS_CHUNKS] = { "chunks", sizeof(struct g_chunk), UINT64_MAX, 0 },
	[GS_TENSORS] = { "tensors", sizeof(struct g_tensor), UINT32_MAX, 0 },
	[GS_OPS] = { "ops", sizeof(struct g_op), UINT32_MAX, 0 },
	[GS_OPERANDS] = { "operands", sizeof(uint32_t), UINT32_MAX, 0 },
	[GS_INPUTS] = { "inputs", sizeof(uint32_t), UINT32_MAX, 0 },
	[GS_OUTPUTS] = { "outputs", sizeof(uint32_t), UINT32_MAX, 0 },
	[GS_META_ITEMS] = { "meta_items", sizeof(uint64_t), UINT64_MAX, 1 },
	[GS_REQUIRES] = { "requires", sizeof(struct g_requires), 1, 1 },
	[GS_WEIGHTS] = { "weights", sizeof(struct g_weight), UINT32_MAX, 1 },
	[GS_DTYPES] = { "dtypes", 1, UINT32_MAX, 2 },
};

/* Names of the capability bits, for refusals. */
static const struct {
	uint64_t bit;
	const char *name;
} cap_names[] = {
	{ G_CAP_F32, "float32 tensors" },
	{ G_CAP_BF16, "bfloat16 tensors" },
	{ G_CAP_F16, "float16 tensors" },
	{ G_CAP_POSITIONS, "rope_freqs computing its own positions" },
	{ G_CAP_CUDA, "a CUDA device" },
};

static const char *const tensor_kind[] = {
	[GT_INPUT] = "input",
	[GT_WEIGHT] = "weight",
	[GT_ACTIVATION] = "activation",
	[GT_SCRATCH] = "scratch",
};

/* A pattern's split, computed once so that checking a tensor is O(ndim). */
struct pattern_sum {
	int64_t total; /* the sum of all its chunk lengths */
	int64_t max;   /* the largest local size: max over i of sum over b */
};

/* Damage: raises G_ERR_FORMAT (graph/error.h); false, for `return fail(...)`. */
static bool fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static bool fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	g_vraise(G_ERR_FORMAT, -1, fmt, ap);
	va_end(ap);
	return false;
}

/* A graph this runtime is too old for: G_ERR_VERSION, and the message says
 * what to update. */
static bool too_new(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static bool too_new(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	g_vraise(G_ERR_VERSION, -1, fmt, ap);
	va_end(ap);
	return false;
}

/* The bounds check of every reference between tables: "tensor 12: pattern
 * 40 out of range (17 patterns)". Signed, so that a negative int32 index
 * prints as itself. */
static bool in_range(struct loader *l, const char *where, uint64_t at,
		     const char *field, int64_t idx, uint64_t n, const char *what)
{
	if (idx >= 0 && (uint64_t)idx < n)
		return true;
	return fail("%s %" PRIu64 ": %s %" PRId64 " out of range (%" PRIu64 " %s)",
		    where, at, field, idx, n, what);
}

static const char *section_name(uint32_t id, char *buf, size_t n)
{
	if (id && id < GS_COUNT)
		return known[id].name;
	snprintf(buf, n, "id %" PRIu32, id);
	return buf;
}

static bool check_header(struct loader *l)
{
	const struct g_file_header *h = (const void *)l->buf;

	if (l->len < sizeof *h)
		return fail("truncated: %zu bytes, but the header alone has %zu",
			    l->len, sizeof *h);
	if (memcmp(h->magic, GRAPH_MAGIC, sizeof h->magic))
		return fail("not a graph file (bad magic)");
	if (h->probe != G_PROBE)
		return fail("byte order: the probe reads 0x%08" PRIx32
			    " instead of 0x%08x (written on a host of the other byte order?)",
			    h->probe, G_PROBE);
	if (h->major > GRAPH_MAJOR)
		return too_new("graph format %u.%u is newer than this runtime (%d.x); "
			       "recompile the plan or update dtpc",
			       h->major, h->minor, GRAPH_MAJOR);
	if (h->major < GRAPH_MAJOR)
		return fail("graph format %u.%u is older than this runtime (%d.x); "
			    "recompile the plan", h->major, h->minor, GRAPH_MAJOR);
	l->minor = h->minor;
	if (h->file_size > l->len)
		return fail("truncated: the header says %" PRIu64
			    " bytes but the file has %zu", h->file_size, l->len);
	if (h->file_size < l->len)
		return fail("trailing data: the header says %" PRIu64
			    " bytes but the file has %zu", h->file_size, l->len);

	uint64_t sum = graph_checksum(l->buf, l->len);

	if (sum != h->checksum)
		return fail("checksum mismatch: the header says 0x%016" PRIx64
			    ", the contents hash to 0x%016" PRIx64 " (corrupted file)",
			    h->checksum, sum);
	/* A later minor may grow the header; the section table follows it, so
	 * keep it 8-byte aligned. */
	if (h->header_size < sizeof *h || h->header_size % 8)
		return fail("header size %" PRIu32 " is invalid (a multiple of 8, "
			    "at least %zu)", h->header_size, sizeof *h);
	if (h->nsections > G_MAX_SECTIONS)
		return fail("section count %" PRIu32 " out of range (at most %d)",
			    h->nsections, G_MAX_SECTIONS);
	l->table_end = h->header_size + (uint64_t)h->nsections * sizeof(struct g_section);
	if (l->table_end > l->len)
		return fail("truncated: the section table ends at %" PRIu64
			    " but the file has %zu bytes", l->table_end, l->len);
	return true;
}

/* Checks the section table; data[id] and count[id] locate each known one. */
static bool check_sections(struct loader *l, const void **data, uint64_t *count)
{
	const struct g_file_header *h = (const void *)l->buf;
	const struct g_section *tab = (const void *)(l->buf + h->header_size);
	char b1[24], b2[24];

	for (uint32_t i = 0; i < h->nsections; i++) {
		const struct g_section *s = &tab[i];
		const char *name = section_name(s->id, b1, sizeof b1);
		uint64_t end, size;

		if (s->offset % G_ALIGN)
			return fail("section '%s': offset %" PRIu64
				    " is not %d-byte aligned", name, s->offset, G_ALIGN);
		if (__builtin_add_overflow(s->offset, s->size, &end) || end > l->len)
			return fail("section '%s' (offset %" PRIu64 ", %" PRIu64
				    " bytes) ends past the end of the file (%zu bytes)",
				    name, s->offset, s->size, l->len);
		if (s->size && s->offset < l->table_end)
			return fail("section '%s' overlaps the header or the section table",
				    name);
		if (__builtin_mul_overflow(s->count, (uint64_t)s->elem, &size) ||
		    size != s->size)
			return fail("section '%s': size %" PRIu64 " is not count %" PRIu64
				    " x element size %" PRIu32, name, s->size, s->count, s->elem);
		for (uint32_t j = 0; j < i; j++) {
			const struct g_section *o = &tab[j];

			if (s->size && o->size && s->offset < o->offset + o->size &&
			    o->offset < end)
				return fail("section '%s' overlaps section '%s'", name,
					    section_name(o->id, b2, sizeof b2));
		}
		if (!s->id || s->id >= GS_COUNT)
			continue; /* from a newer minor version */
		if (data[s->id])
			return fail("section '%s' appears twice", name);
		if (s->elem != known[s->id].elem)
			return fail("section '%s': element size %" PRIu32
				    ", expected %" PRIu32 " (format %d.%d)", name, s->elem,
				    known[s->id].elem, GRAPH_MAJOR, GRAPH_MINOR);
		if (s->count > known[s->id].max)
			return fail("section '%s': %" PRIu64 " entries, at most %" PRIu64,
				    name, s->count, known[s->id].max);
		data[s->id] = l->buf + s->offset;
		count[s->id] = s->count;
	}
	for (uint32_t id = 1; id < GS_COUNT; id++)
		if (!data[id] && l->minor >= known[id].since)
			return fail("missing section '%s' (format %d.%u has it)",
				    known[id].name, GRAPH_MAJOR, l->minor);
	return true;
}

/* Refuses, before anything else is read, a graph that needs what this
 * runtime lacks: a capability bit it lacks or does not know, an op id past
 * its table. The op bits are checked against the ops in check_op. */
static bool check_requires(struct loader *l)
{
	const struct g_requires *r = &l->g->need;
	uint64_t lack = r->caps & ~graph_runtime_caps();
	char by[48];

	graph_compiler_str(r->compiler, by, sizeof by);
	if (lack & ~(uint64_t)G_CAP_KNOWN)
		return too_new("the graph needs capabilities unknown to this runtime "
			       "(bits 0x%" PRIx64 "); it was compiled by %s: use a newer "
			       "dtpc runtime (this is dtpc " DTPC_VERSION ")",
			       lack & ~(uint64_t)G_CAP_KNOWN, by);
	for (size_t i = 0; i < sizeof cap_names / sizeof cap_names[0]; i++)
		if (lack & cap_names[i].bit)
			return too_new("the graph needs %s, which this runtime (dtpc "
				       DTPC_VERSION ") does not support; it was compiled by %s: "
				       "use a newer dtpc runtime built with it",
				       cap_names[i].name, by);
	if (OP_COUNT < 64 && r->ops >> OP_COUNT)
		return too_new("the graph uses op id %d, unknown to this runtime (dtpc "
			       DTPC_VERSION ", %d ops); it was compiled by %s: use a newer "
			       "dtpc runtime", __builtin_ctzll(r->ops >> OP_COUNT) + OP_COUNT,
			       OP_COUNT, by);
	return true;
}

static bool check_strings(struct loader *l)
{
	const struct g_graph *g = l->g;

	/* With a NUL at the end of the blob, every offset inside it starts a
	 * terminated string: no scan per string. */
	if (g->strtab_size && g->strtab[g->strtab_size - 1])
		return fail("strings: the blob does not end in a NUL, so its last "
			    "string is not terminated");
	for (uint32_t i = 0; i < g->nstrings; i++)
		if (g->stroff[i] >= g->strtab_size)
			return fail("string %" PRIu32 ": offset %" PRIu32
				    " out of range (%" PRIu64 " bytes of strings)",
				    i, g->stroff[i], g->strtab_size);
	return true;
}

/* A list: meta_items[value] is its length n, its items follow. Lists are
 * disjoint and ascending (as patterns' chunks), so that checking them is
 * linear in the file size. */
static bool check_list(struct loader *l, uint32_t i, uint64_t *prev_end)
{
	const struct g_graph *g = l->g;
	const struct g_meta *m = &g->meta[i];
	uint64_t end;

	if (m->value >= g->nmeta_items ||
	    __builtin_add_overflow(m->value + 1, g->meta_items[m->value], &end) ||
	    end > g->nmeta_items)
		return fail("meta %" PRIu32 " ('%s'): list at item %" PRIu64
			    " is past the meta_items table (%" PRIu64 " items)", i,
			    graph_str(g, m->key), m->value, g->nmeta_items);
	if (m->value < *prev_end)
		return fail("meta %" PRIu32 " ('%s'): list at item %" PRIu64
			    " overlaps an earlier one (which ends at %" PRIu64 ")", i,
			    graph_str(g, m->key), m->value, *prev_end);
	*prev_end = end;
	if (m->type == GM_STR_ARRAY)
		for (uint64_t k = m->value + 1; k < end; k++)
			if (!in_range(l, "meta", i, "list string", (int64_t)g->meta_items[k],
				      g->nstrings, "strings"))
				return false;
	return true;
}

static bool check_meta(struct loader *l)
{
	const struct g_graph *g = l->g;
	uint64_t lists_end = 0;
	/* the types of the file's version: 1.0 had 1 to 4 */
	uint32_t last = l->minor ? GM_TYPES - 1 : GM_STR;

	for (uint32_t i = 0; i < g->nmeta; i++) {
		const struct g_meta *m = &g->meta[i];

		if (!in_range(l, "meta", i, "key string", m->key, g->nstrings, "strings"))
			return false;
		/* A type of a later minor than this reader's means nothing to
		 * it and is skipped; in a version it knows, it is damage. */
		if (!m->type || (m->type > last && l->minor <= GRAPH_MINOR))
			return fail("meta %" PRIu32 " ('%s'): unknown type %" PRIu32
				    " (format %d.%u has types 1 to %" PRIu32 ")", i,
				    graph_str(g, m->key), m->type, GRAPH_MAJOR, l->minor,
				    l->minor > GRAPH_MINOR ? (uint32_t)GM_TYPES - 1 : last);
		switch (m->type) {
		case GM_STR:
			if (!in_range(l, "meta", i, "value string", (int64_t)m->value,
				      g->nstrings, "strings"))
				return false;
			break;
		case GM_BOOL:
			if (m->value > 1)
				return fail("meta %" PRIu32 " ('%s'): bool %" PRIu64
					    " (0 or 1)", i, graph_str(g, m->key), m->value);
			break;
		case GM_I64_ARRAY:
		case GM_STR_ARRAY:
			if (!check_list(l, i, &lists_end))
				return false;
			break;
		default: /* any bits are a u64, i64 or f64; later types are skipped */
			break;
		}
	}
	return true;
}

static bool check_axes(struct loader *l, const struct g_program *prog)
{
	struct g_graph *g = l->g;
	uint64_t world = 1;

	if (g->naxes < 1 || g->naxes > G_MAX_AXES)
		return fail("axes: %" PRIu32 " axes, expected 1 to %d", g->naxes,
			    G_MAX_AXES);
	for (uint32_t a = 0; a < g->naxes; a++) {
		if (!in_range(l, "axis", a, "name string", g->axes[a].name, g->nstrings,
			      "strings"))
			return false;
		if (g->axes[a].size < 1)
			return fail("axis %" PRIu32 " ('%s'): size 0", a,
				    graph_str(g, g->axes[a].name));
		/* At most 2^24 * 2^32 before this check: no overflow. */
		world *= g->axes[a].size;
		if (world > G_MAX_WORLD)
			return fail("axes: the world size exceeds %d ranks", G_MAX_WORLD);
	}
	if (prog->world != world)
		return fail("program: world %" PRIu64 ", but the axes make %" PRIu64
			    " ranks", prog->world, world);
	g->world = (uint32_t)world;
	return true;
}

static bool check_groups(struct loader *l)
{
	const struct g_graph *g = l->g;

	for (uint32_t i = 0; i < g->ngroups; i++) {
		const struct g_group *gr = &g->groups[i];
		uint32_t seen = 0;
		uint64_t size = 1;

		if (gr->naxes > g->naxes)
			return fail("group %" PRIu32 ": %" PRIu32
				    " axes, but the mesh has %" PRIu32, i, gr->naxes,
				    g->naxes);
		for (uint32_t k = 0; k < gr->naxes; k++) {
			uint32_t a = gr->axes[k];

			if (!in_range(l, "group", i, "axis", a, g->naxes, "axes"))
				return false;
			if (seen & 1u << a)
				return fail("group %" PRIu32 ": axis %" PRIu32
					    " listed twice", i, a);
			seen |= 1u << a;
			if (g->axes[a].size == 1)
				return fail("group %" PRIu32 ": axis %" PRIu32
					    " ('%s') has size 1 and must not be listed",
					    i, a, graph_str(g, g->axes[a].name));
			size *= g->axes[a].size; /* <= world: checked above */
		}
		if (gr->size != size)
			return fail("group %" PRIu32 ": size %" PRIu32
				    ", but its axes make %" PRIu64, i, gr->size, size);
	}
	return true;
}

static bool check_pattern(struct loader *l, uint32_t p, uint64_t *prev_end,
			  struct pattern_sum *sum)
{
	const struct g_graph *g = l->g;
	const struct g_pattern *pt = &g->patterns[p];

	if (!in_range(l, "pattern", p, "group", pt->group, g->ngroups, "groups"))
		return false;
	if (pt->nblk < 1)
		return fail("pattern %" PRIu32 ": no blocks", p);

	uint32_t n = g->groups[pt->group].size;
	uint64_t end; /* nblk * n < 2^56: no overflow */

	if (__builtin_add_overflow(pt->chunk0, (uint64_t)pt->nblk * n, &end) ||
	    end > g->nchunks)
		return fail("pattern %" PRIu32 ": chunks %" PRIu64 " + %" PRIu32
			    " blocks x %" PRIu32 " are past the chunk table (%" PRIu64
			    " chunks)", p, pt->chunk0, pt->nblk, n, g->nchunks);
	/* Keeps validation linear in the number of chunks. */
	if (pt->chunk0 < *prev_end)
		return fail("pattern %" PRIu32 ": chunks from %" PRIu64
			    " overlap those of an earlier pattern (which end at %" PRIu64
			    ")", p, pt->chunk0, *prev_end);
	*prev_end = end;

	sum->total = 0;
	for (uint32_t b = 0; b < pt->nblk; b++) {
		int64_t start = 0;

		for (uint32_t i = 0; i < n; i++) {
			const struct g_chunk *c = graph_chunk(g, p, b, i);

			if (c->len < 0)
				return fail("pattern %" PRIu32 ": block %" PRIu32
					    " chunk %" PRIu32 ": length %" PRId64, p, b,
					    i, c->len);
			if (c->start != start)
				return fail("pattern %" PRIu32 ": block %" PRIu32
					    " chunk %" PRIu32 " starts at %" PRId64
					    ", expected %" PRId64
					    " (chunks must tile the block)", p, b, i,
					    c->start, start);
			if (__builtin_add_overflow(start, c->len, &start) ||
			    __builtin_add_overflow(sum->total, c->len, &sum->total))
				return fail("pattern %" PRIu32 ": length overflows", p);
		}
	}
	/* Every partial sum is at most total: no overflow. */
	sum->max = 0;
	for (uint32_t i = 0; i < n; i++) {
		int64_t local = 0;

		for (uint32_t b = 0; b < pt->nblk; b++)
			local += graph_chunk(g, p, b, i)->len;
		if (local > sum->max)
			sum->max = local;
	}
	return true;
}

static bool check_tensor(struct loader *l, uint32_t i, const struct pattern_sum *sums)
{
	const struct g_graph *g = l->g;
	const struct g_tensor *t = &g->tensors[i];
	int64_t numel = 1, local = 1;
	uint64_t need, end;

	if (!in_range(l, "tensor", i, "name string", t->name, g->nstrings, "strings"))
		return false;
	if (t->kind < GT_INPUT || t->kind > GT_SCRATCH)
		return fail("tensor %" PRIu32 " ('%s'): unknown kind %u", i,
			    graph_str(g, t->name), t->kind);
	if (t->ndim > G_MAX_DIMS)
		return fail("tensor %" PRIu32 " ('%s'): %u dimensions (at most %d)",
			    i, graph_str(g, t->name), t->ndim, G_MAX_DIMS);
	for (int d = 0; d < t->ndim; d++) {
		int32_t p = t->pattern[d];
		int64_t ld = t->dims[d];

		if (t->dims[d] < 0)
			return fail("tensor %" PRIu32 " ('%s'): dimension %d is %" PRId64,
				    i, graph_str(g, t->name), d, t->dims[d]);
		if (p != -1) {
			if (!in_range(l, "tensor", i, "pattern", p, g->npatterns, "patterns"))
				return false;
			if (sums[p].total != t->dims[d])
				return fail("tensor %" PRIu32 " ('%s'): dimension %d is %"
					    PRId64 ", but pattern %" PRId32 " splits %" PRId64,
					    i, graph_str(g, t->name), d, t->dims[d], p,
					    sums[p].total);
			ld = sums[p].max;
		}
		/* A local dim is at most its global one: only the global
		 * product can overflow. */
		if (__builtin_mul_overflow(numel, t->dims[d], &numel))
			return fail("tensor %" PRIu32 " ('%s'): element count overflows",
				    i, graph_str(g, t->name));
		local *= ld;
	}
	/* its dtype was checked (check_dtypes) */
	enum g_dtype dt = graph_tensor_dtype(g, i);
	if (__builtin_mul_overflow((uint64_t)local, graph_dtype_size(dt), &need) || t->bytes < need)
		return fail("tensor %" PRIu32 " ('%s'): %" PRIu64
			    " bytes, but its largest local piece has %" PRId64 " %s elements",
			    i, graph_str(g, t->name), t->bytes, local, graph_dtype_name(dt));
	if (t->kind == GT_WEIGHT) {
		if (t->offset)
			return fail("tensor %" PRIu32 " ('%s'): a weight with arena "
				    "offset %" PRIu64, i, graph_str(g, t->name), t->offset);
		return true;
	}
	if (t->offset % G_ALIGN)
		return fail("tensor %" PRIu32 " ('%s'): arena offset %" PRIu64
			    " is not %d-byte aligned", i, graph_str(g, t->name),
			    t->offset, G_ALIGN);
	if (__builtin_add_overflow(t->offset, t->bytes, &end) || end > g->arena_bytes)
		return fail("tensor %" PRIu32 " ('%s'): %" PRIu64 " bytes at arena "
			    "offset %" PRIu64 " are past the arena (%" PRIu64 " bytes)",
			    i, graph_str(g, t->name), t->bytes, t->offset,
			    g->arena_bytes);
	return true;
}

/* Format 1.2's dtypes: one known dtype per tensor, each one the graph
 * declares it needs (so that a runtime without it refused the graph). */
static bool check_dtypes(struct loader *l)
{
	const struct g_graph *g = l->g;
	static const uint64_t cap[G_DT_COUNT] = { 0, G_CAP_F32, G_CAP_BF16, G_CAP_F16 };

	if (!g->dtypes)
		return true;
	for (uint32_t t = 0; t < g->ntensors; t++) {
		uint8_t dt = g->dtypes[t];

		if (!dt || dt >= G_DT_COUNT)
			return fail("tensor %" PRIu32 " ('%s'): unknown dtype %u", t,
				    graph_str(g, g->tensors[t].name), dt);
		if (!(g->need.caps & cap[dt]))
			return fail("tensor %" PRIu32 " ('%s') is %s, but the graph's "
				    "requirements do not say so", t,
				    graph_str(g, g->tensors[t].name), graph_dtype_name(dt));
	}
	return true;
}

static bool check_patterns_and_tensors(struct loader *l)
{
	const struct g_graph *g = l->g;
	struct pattern_sum *sums = NULL;
	uint64_t prev_end = 0;
	bool ok = true;

	if (g->npatterns && !(sums = malloc(g->npatterns * sizeof *sums)))
		return fail("out of memory checking %" PRIu32 " patterns",
			    g->npatterns);
	for (uint32_t p = 0; ok && p < g->npatterns; p++)
		ok = check_pattern(l, p, &prev_end, &sums[p]);
	for (uint32_t t = 0; ok && t < g->ntensors; t++)
		ok = check_tensor(l, t, sums);
	free(sums);
	return ok;
}

/* A reference to a tensor: in range, and of the wanted kind (0: any). */
static bool check_ref(struct loader *l, const char *where, uint64_t at,
		      const char *field, int64_t t, int kind)
{
	const struct g_graph *g = l->g;

	if (!in_range(l, where, at, field, t, g->ntensors, "tensors"))
		return false;
	if (kind && g->tensors[t].kind != kind)
		return fail("%s %" PRIu64 ": %s %" PRId64 " ('%s') is of kind %s, "
			    "expected %s", where, at, field, t,
			    graph_str(g, g->tensors[t].name),
			    tensor_kind[g->tensors[t].kind], tensor_kind[kind]);
	return true;
}

static bool check_op(struct loader *l, uint32_t i)
{
	const struct g_graph *g = l->g;
	const struct g_op *op = &g->ops[i];

	if (op->kind >= OP_COUNT)
		return fail("op %" PRIu32 ": unknown kind %u (this runtime knows %d ops)",
			    i, op->kind, OP_COUNT);

	const struct op_info *info = &op_table[op->kind];

	if (!(l->g->need.ops >> op->kind & 1))
		return fail("op %" PRIu32 " (%s): not among the ops the graph says it uses",
			    i, info->name);
	if (info->graph_min >= 0 && op->nin < info->graph_min)
		return fail("op %" PRIu32 " (%s): %u operands, expected at least %d",
			    i, info->name, op->nin, info->graph_min);
	if (info->graph_max >= 0 && op->nin > info->graph_max)
		return fail("op %" PRIu32 " (%s): %u operands, expected at most %d",
			    i, info->name, op->nin, info->graph_max);
	if ((uint64_t)op->in0 + op->nin > g->noperands)
		return fail("op %" PRIu32 " (%s): operands %" PRIu32 " + %u are past "
			    "the operand table (%" PRIu32 ")", i, info->name, op->in0,
			    op->nin, g->noperands);
	if (!check_ref(l, "op", i, "output", op->out, GT_ACTIVATION))
		return false;
	if (op->group != -1 &&
	    !in_range(l, "op", i, "group", op->group, g->ngroups, "groups"))
		return false;
	if ((info->flags & OPF_COMM) && op->group == -1)
		return fail("op %" PRIu32 " (%s) communicates but has no group", i,
			    info->name);
	if (op->scratch != -1 && !check_ref(l, "op", i, "scratch", op->scratch, GT_SCRATCH))
		return false;
	/* the op's own: its flags, and its attributes the graph alone can
	 * refute (graph/op_graph.c) */
	const struct op_graph *d = op_graph[op->kind];
	if (op->flags & ~d->flags)
		return fail("op %" PRIu32 " (%s): flags 0x%x, but %s has only 0x%x",
			    i, info->name, op->flags, info->name, d->flags);
	if (d->check && !d->check(g, op))
		return g_wrap(G_ERR_FORMAT, -1, "op %" PRIu32 " (%s)", i, info->name), false;
	return true;
}

/* The manifest: sorted by name (so unique), each entry naming a weight
 * tensor by that tensor's own name, with its shape; as many entries as
 * weight tensors, so each weight has exactly one. */
static bool check_weights(struct loader *l)
{
	const struct g_graph *g = l->g;
	uint32_t nweight_tensors = 0;

	for (uint32_t t = 0; t < g->ntensors; t++)
		nweight_tensors += g->tensors[t].kind == GT_WEIGHT;
	if (l->minor >= 1 && g->nweights != nweight_tensors)
		return fail("weights: %" PRIu32 " entries for %" PRIu32 " weight tensors",
			    g->nweights, nweight_tensors);
	for (uint32_t i = 0; i < g->nweights; i++) {
		const struct g_weight *w = &g->weights[i];

		if (!in_range(l, "weight", i, "name string", w->name, g->nstrings, "strings") ||
		    !check_ref(l, "weight", i, "tensor", w->tensor, GT_WEIGHT))
			return false;

		const struct g_tensor *t = &g->tensors[w->tensor];
		const char *name = graph_str(g, w->name);

		if (strcmp(name, graph_str(g, t->name)))
			return fail("weight %" PRIu32 " ('%s'): tensor %" PRIu32
				    " is named '%s'", i, name, w->tensor, graph_str(g, t->name));
		if (i && strcmp(graph_str(g, g->weights[i - 1].name), name) >= 0)
			return fail("weight %" PRIu32 " ('%s'): not after '%s' (the manifest "
				    "is sorted by name, names unique)", i, name,
				    graph_str(g, g->weights[i - 1].name));
		if (w->dtype != graph_tensor_dtype(g, w->tensor))
			return fail("weight %" PRIu32 " ('%s'): dtype %" PRIu32
				    ", but its tensor holds %s", i, name, w->dtype,
				    graph_dtype_name(graph_tensor_dtype(g, w->tensor)));
		if (w->ndim != t->ndim)
			return fail("weight %" PRIu32 " ('%s'): %" PRIu32
				    " dimensions, its tensor has %u", i, name, w->ndim, t->ndim);
		for (int d = 0; d < G_MAX_DIMS; d++)
			if (w->shape[d] != (d < t->ndim ? t->dims[d] : 0))
				return fail("weight %" PRIu32 " ('%s'): dimension %d is %"
					    PRId64 ", its tensor's %" PRId64, i, name, d,
					    w->shape[d], d < t->ndim ? t->dims[d] : 0);
	}
	return true;
}

static bool check_program(struct loader *l)
{
	const struct g_graph *g = l->g;

	/* Operands are checked once here, not per op: op ranges may overlap. */
	for (uint32_t i = 0; i < g->noperands; i++)
		if (!check_ref(l, "operand", i, "tensor", g->operands[i], 0))
			return false;
	for (uint32_t i = 0; i < g->nops; i++)
		if (!check_op(l, i))
			return false;
	for (uint32_t i = 0; i < g->ninputs; i++)
		if (!check_ref(l, "input", i, "tensor", g->inputs[i], GT_INPUT))
			return false;
	for (uint32_t i = 0; i < g->noutputs; i++)
		if (!check_ref(l, "output", i, "tensor", g->outputs[i], 0))
			return false;
	return check_weights(l);
}

static bool load(struct loader *l)
{
	const struct g_file_header *h = (const void *)l->buf;
	const void *data[GS_COUNT] = { 0 };
	uint64_t count[GS_COUNT] = { 0 };
	struct g_graph *g = l->g;

	memset(g, 0, sizeof *g);
	if ((uintptr_t)l->buf % 8)
		return fail("misaligned buffer: a graph must be loaded at an "
			    "8-byte aligned address");
	if (!check_header(l) || !check_sections(l, data, count))
		return false;
	if (count[GS_PROGRAM] != 1)
		return fail("section 'program': %" PRIu64 " entries, expected 1",
			    count[GS_PROGRAM]);

	const struct g_program *prog = data[GS_PROGRAM];

	/* Counts fit their fields: check_sections bounded them. */
	g->strtab = data[GS_STRTAB];
	g->strtab_size = count[GS_STRTAB];
	g->stroff = data[GS_STROFF];
	g->nstrings = (uint32_t)count[GS_STROFF];
	g->meta = data[GS_META];
	g->nmeta = (uint32_t)count[GS_META];
	g->axes = data[GS_AXES];
	g->naxes = (uint32_t)count[GS_AXES];
	g->groups = data[GS_GROUPS];
	g->ngroups = (uint32_t)count[GS_GROUPS];
	g->patterns = data[GS_PATTERNS];
	g->npatterns = (uint32_t)count[GS_PATTERNS];
	g->chunks = data[GS_CHUNKS];
	g->nchunks = count[GS_CHUNKS];
	g->tensors = data[GS_TENSORS];
	g->ntensors = (uint32_t)count[GS_TENSORS];
	g->ops = data[GS_OPS];
	g->nops = (uint32_t)count[GS_OPS];
	g->operands = data[GS_OPERANDS];
	g->noperands = (uint32_t)count[GS_OPERANDS];
	g->inputs = data[GS_INPUTS];
	g->ninputs = (uint32_t)count[GS_INPUTS];
	g->outputs = data[GS_OUTPUTS];
	g->noutputs = (uint32_t)count[GS_OUTPUTS];
	g->arena_bytes = prog->arena_bytes;
	g->checksum = h->checksum;
	g->meta_items = data[GS_META_ITEMS];
	g->nmeta_items = count[GS_META_ITEMS];
	g->weights = data[GS_WEIGHTS];
	g->nweights = (uint32_t)count[GS_WEIGHTS];
	g->minor = l->minor;
	g->dtypes = data[GS_DTYPES];
	if (g->dtypes && count[GS_DTYPES] != count[GS_TENSORS])
		return fail("section 'dtypes': %" PRIu64 " entries for %" PRIu64 " tensors",
			    count[GS_DTYPES], count[GS_TENSORS]);
	if (data[GS_REQUIRES]) {
		g->need = *(const struct g_requires *)data[GS_REQUIRES];
	} else {
		/* A 1.0 graph: float32 on any device, its ops (each kind is
		 * checked against OP_COUNT before use). */
		const struct g_op *ops = data[GS_OPS];

		g->need.caps = G_CAP_F32;
		for (uint64_t i = 0; i < count[GS_OPS]; i++)
			if (ops[i].kind < OP_COUNT)
				g->need.ops |= 1ull << ops[i].kind;
	}

	/* In dependency order: each check may use what the earlier ones
	 * proved (strings before names, groups before patterns...); first
	 * whether this runtime can run the graph at all. */
	return check_requires(l) && check_strings(l) && check_meta(l) &&
	       check_axes(l, prog) && check_groups(l) && check_dtypes(l) &&
	       check_patterns_and_tensors(l) &&
	       check_program(l);
}

bool graph_parse(const void *buf, size_t len, struct g_graph *g)
{
	struct loader l = { .buf = buf, .len = len, .g = g };
	bool ok = load(&l);

	if (!ok)
		/* Leave nothing half-checked behind for a caller that
		 * ignores the result. */
		memset(g, 0, sizeof *g);
	return ok;
}


uint64_t graph_runtime_caps(void)
{
#ifdef DTPC_HAVE_CUDA
	return G_CAP_F32 | G_CAP_BF16 | G_CAP_F16 | G_CAP_POSITIONS | G_CAP_CUDA;
#else
	return G_CAP_F32 | G_CAP_BF16 | G_CAP_F16 | G_CAP_POSITIONS;
#endif
}

/* FNV-1a over 64-bit little-endian words (then the tail bytes): each step
 * is a bijection of the state, so any change within one word changes the
 * result, at an eighth of the byte-wise cost (graphs reach tens of MiB). */
uint64_t graph_checksum(const void *buf, size_t len)
{
	const size_t at = offsetof(struct g_file_header, checksum) / 8;
	const uint8_t *p = buf;
	uint64_t h = 0xcbf29ce484222325ull;
	size_t words = len / 8;
	for (size_t k = 0; k < words; k++) {
		uint64_t w;
		memcpy(&w, p + 8 * k, sizeof w);
		h = (h ^ (k == at ? 0 : w)) * 0x100000001b3ull;
	}
	for (size_t i = words * 8; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* ---- queries: the graph is valid, so they index without checks ---------------- */

enum g_dtype graph_tensor_dtype(const struct g_graph *g, uint32_t t)
{
	return g->dtypes ? (enum g_dtype)g->dtypes[t] : G_DT_F32;
}

uint32_t graph_dtype_size(enum g_dtype t)
{
	return t == G_DT_F32 ? 4 : 2;
}

const char *graph_dtype_name(uint32_t t)
{
	static const char *const names[G_DT_COUNT] = { NULL, "f32", "bf16", "f16" };

	return t < G_DT_COUNT ? names[t] : NULL;
}

int64_t graph_dtype_exact_ints(enum g_dtype t)
{
	/* significant bits: 24, 8, 11 */
	return t == G_DT_BF16 ? 256 : t == G_DT_F16 ? 2048 : (int64_t)1 << 24;
}

static int64_t max3(int64_t a, int64_t b, int64_t c)
{
	return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

/* |v|, INT64_MIN's as INT64_MAX (a hostile graph's attribute) */
static int64_t magnitude(int64_t v)
{
	return v >= 0 ? v : v == INT64_MIN ? INT64_MAX : -v;
}

int graph_rope_naxes(const struct g_op *o)
{
	struct ga_rope_freqs a = ga_rope_freqs_get(o);
	int n = 0;

	if (a.grid)
		return 3;
	while (n < G_NATTR - 1 && a.axes_dim[n])
		n++;
	return n;
}

void graph_rope_ids_attr(const struct g_op *o, int64_t rows, int64_t pos[3])
{
	struct ga_rope_freqs a = ga_rope_freqs_get(o);

	pos[0] = a.grid ? a.frames : rows;
	pos[1] = a.grid ? a.height : a.first;
	pos[2] = a.grid ? a.width : graph_rope_naxes(o);
}

int64_t graph_ids_extent(bool grid, const int64_t *pos, bool center)
{
	/* text_ids: first .. first + length - 1 (exec_check and the compiler
	 * keep the sum from overflowing) */
	if (!grid)
		return max3(magnitude(pos[1]), magnitude(pos[1] + pos[0] - 1), 0);
	/* k_grid_ids: frames from 0; centred rows from -(H - H/2) to H/2 - 1 */
	return max3(pos[0] - 1, center ? pos[1] - pos[1] / 2 : pos[1] - 1,
		    center ? pos[2] - pos[2] / 2 : pos[2] - 1);
}

/* A part of ring attention's scratch from *at, its end rounded up to 4
 * bytes so that a float32 part after a 16-bit one is aligned (and a
 * float32 layout has no padding at all, as in files before 1.2). */
static uint64_t ring_part(uint64_t *at, uint64_t bytes)
{
	uint64_t start = *at;

	*at = start > UINT64_MAX - 4 || bytes > UINT64_MAX - 4 - start ? UINT64_MAX
								     : (start + bytes + 3) / 4 * 4;
	return start;
}

uint64_t graph_ring_scratch(uint64_t kv, uint64_t out, uint64_t lse, uint32_t esize,
			    bool fp32_acc, uint64_t at[4])
{
	uint64_t end = 0, b[4];

	if (__builtin_mul_overflow(kv, esize, &b[0]) || __builtin_mul_overflow(out, esize, &b[1]) ||
	    __builtin_mul_overflow(fp32_acc ? out : 0, 4, &b[2]) ||
	    __builtin_mul_overflow(lse, 8, &b[3]))
		return UINT64_MAX;
	for (int i = 0; i < 4 && end != UINT64_MAX; i++)
		at[i] = ring_part(&end, b[i]);
	return end;
}

const char *graph_str(const struct g_graph *g, uint32_t i)
{
	return i < g->nstrings ? g->strtab + g->stroff[i] : "";
}

int64_t graph_meta_find(const struct g_graph *g, const char *key)
{
	for (uint32_t i = 0; i < g->nmeta; i++)
		if (!strcmp(graph_str(g, g->meta[i].key), key))
			return i;
	return -1;
}

uint64_t graph_meta_len(const struct g_graph *g, uint32_t i)
{
	return g->meta_items[g->meta[i].value];
}

const uint64_t *graph_meta_items(const struct g_graph *g, uint32_t i)
{
	return g->meta_items + g->meta[i].value + 1;
}

/* Appends to a snprintf-style buffer: at tracks the length wanted. */
static void put(char *buf, size_t n, size_t *at, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void put(char *buf, size_t n, size_t *at, const char *fmt, ...)
{
	va_list ap;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(*at < n ? buf + *at : NULL, *at < n ? n - *at : 0, fmt, ap);
	va_end(ap);
	*at += k > 0 ? (size_t)k : 0;
}

int graph_meta_text(const struct g_graph *g, uint32_t i, char *buf, size_t n)
{
	const struct g_meta *m = &g->meta[i];
	size_t at = 0;
	double f;

	if (n)
		buf[0] = 0;
	switch (m->type) {
	case GM_U64: put(buf, n, &at, "%" PRIu64, m->value); break;
	case GM_I64: put(buf, n, &at, "%" PRId64, (int64_t)m->value); break;
	case GM_F64:
		memcpy(&f, &m->value, sizeof f);
		put(buf, n, &at, "%.17g", f);
		break;
	case GM_STR: put(buf, n, &at, "%s", graph_str(g, (uint32_t)m->value)); break;
	case GM_BOOL: put(buf, n, &at, "%s", m->value ? "true" : "false"); break;
	case GM_I64_ARRAY:
	case GM_STR_ARRAY: {
		const uint64_t *v = graph_meta_items(g, i);

		put(buf, n, &at, "[");
		for (uint64_t k = 0; k < graph_meta_len(g, i); k++)
			if (m->type == GM_I64_ARRAY)
				put(buf, n, &at, "%s%" PRId64, k ? ", " : "", (int64_t)v[k]);
			else
				put(buf, n, &at, "%s\"%s\"", k ? ", " : "",
				    graph_str(g, (uint32_t)v[k]));
		put(buf, n, &at, "]");
		break;
	}
	default: put(buf, n, &at, "(type %" PRIu32 ")", m->type); break;
	}
	return at > INT32_MAX ? INT32_MAX : (int)at;
}

const struct g_weight *graph_weight_find(const struct g_graph *g, const char *name)
{
	uint32_t lo = 0, hi = g->nweights;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int c = strcmp(graph_str(g, g->weights[mid].name), name);

		if (!c)
			return &g->weights[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const char *graph_compiler_str(uint32_t compiler, char *buf, size_t n)
{
	if (!compiler)
		snprintf(buf, n, "an unknown dtpc");
	else
		snprintf(buf, n, "dtpc %" PRIu32 ".%" PRIu32 ".%" PRIu32, compiler >> 16,
			 compiler >> 8 & 0xff, compiler & 0xff);
	return buf;
}

void graph_coords(const struct g_graph *g, uint32_t rank, uint32_t *coords)
{
	for (uint32_t a = g->naxes; a-- > 0;) {
		coords[a] = rank % g->axes[a].size;
		rank /= g->axes[a].size;
	}
}

uint32_t graph_group_index(const struct g_graph *g, uint32_t group, uint32_t rank)
{
	const struct g_group *gr = &g->groups[group];
	uint32_t c[G_MAX_AXES], index = 0;

	graph_coords(g, rank, c);
	for (uint32_t k = 0; k < gr->naxes; k++)
		index = index * g->axes[gr->axes[k]].size + c[gr->axes[k]];
	return index;
}

uint32_t graph_group_member(const struct g_graph *g, uint32_t group, uint32_t rank,
			    uint32_t index)
{
	const struct g_group *gr = &g->groups[group];
	uint32_t c[G_MAX_AXES], member = 0;

	graph_coords(g, rank, c);
	for (uint32_t k = gr->naxes; k-- > 0;) {
		uint32_t size = g->axes[gr->axes[k]].size;

		c[gr->axes[k]] = index % size;
		index /= size;
	}
	for (uint32_t a = 0; a < g->naxes; a++)
		member = member * g->axes[a].size + c[a];
	return member;
}

const struct g_chunk *graph_chunk(const struct g_graph *g, uint32_t pattern,
				  uint32_t b, uint32_t i)
{
	const struct g_pattern *p = &g->patterns[pattern];

	return &g->chunks[p->chunk0 + (uint64_t)b * g->groups[p->group].size + i];
}

int64_t graph_local_dim(const struct g_graph *g, uint32_t t, int d, uint32_t rank)
{
	int32_t p = g->tensors[t].pattern[d];

	if (p == -1)
		return g->tensors[t].dims[d];

	uint32_t i = graph_group_index(g, g->patterns[p].group, rank);
	int64_t n = 0;

	for (uint32_t b = 0; b < g->patterns[p].nblk; b++)
		n += graph_chunk(g, (uint32_t)p, b, i)->len;
	return n;
}

int64_t graph_local_numel(const struct g_graph *g, uint32_t t, uint32_t rank)
{
	int64_t n = 1;

	for (int d = 0; d < g->tensors[t].ndim; d++)
		n *= graph_local_dim(g, t, d, rank);
	return n;
}
