/* graph_write.c — serializes a graph into the .graph format
 * (docs/graph-format.md).
 *
 * The file is a header, a section table and one section per table, each at a
 * G_ALIGN-aligned offset, so that the loader can point into the bytes. Every
 * byte is determined by the graph's contents: the buffer starts zeroed (so
 * padding is zero) and unused array slots are cleared, so equal graphs give
 * equal files and equal checksums (the ranks' handshake compares them). */
#include "graph/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/version.h"

/* The format is little-endian and the records are written as they lie in
 * memory: a big-endian writer would need a byte-swapping pass, which no
 * supported host needs. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "graph_write.c writes records natively: little-endian hosts only");

struct out_section {
	uint32_t id, elem;
	const void *data;
	uint64_t count;
};

static uint64_t align_up(uint64_t x)
{
	return (x + G_ALIGN - 1) & ~(uint64_t)(G_ALIGN - 1);
}

/* Slots past ndim / naxes mean nothing, but the copied arrays carry whatever
 * the caller left there: reset them (pattern -1 as for a whole dim, the rest
 * 0), so that equal graphs give equal bytes. The structs have no implicit
 * padding, so nothing else can differ. */
static void canonicalize(uint8_t *file, const struct g_section *tensors,
			 const struct g_section *groups)
{
	struct g_tensor *t = (void *)(file + tensors->offset);
	struct g_group *gr = (void *)(file + groups->offset);

	for (uint64_t i = 0; i < tensors->count; i++)
		for (int d = t[i].ndim; d < G_MAX_DIMS; d++) {
			t[i].pattern[d] = -1;
			t[i].dims[d] = 0;
		}
	for (uint64_t i = 0; i < groups->count; i++)
		for (uint32_t k = gr[i].naxes; k < G_MAX_AXES; k++)
			gr[i].axes[k] = 0;
}

/* DTPC_VERSION "major.minor.patch" as g_requires.compiler packs it. */
static uint32_t compiler_version(void)
{
	unsigned major = 0, minor = 0, patch = 0;

	sscanf(DTPC_VERSION, "%u.%u.%u", &major, &minor, &patch);
	return (major & 0xffff) << 16 | (minor & 0xff) << 8 | (patch & 0xff);
}

/* What a runtime needs: f32 (ring attention's log-sum-exps are float32
 * whatever the storage), each other dtype a tensor has, the caller's other
 * bits, and the ops the program uses. */
static struct g_requires requirements(const struct g_graph *g)
{
	struct g_requires r = {
		.compiler = compiler_version(),
		.caps = g->need.caps | G_CAP_F32,
	};

	for (uint32_t t = 0; t < g->ntensors; t++)
		r.caps |= graph_tensor_dtype(g, t) == G_DT_BF16   ? G_CAP_BF16
			  : graph_tensor_dtype(g, t) == G_DT_F16 ? G_CAP_F16
								 : 0;
	for (uint32_t i = 0; i < g->nops; i++)
		r.ops |= 1ull << g->ops[i].kind;
	return r;
}

struct named {
	const char *name;
	uint32_t tensor;
};

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct named *)a)->name, ((const struct named *)b)->name);
}

/* The weights manifest: every weight tensor by name (sorted, for the
 * binder's bisection), with its full shape. A weight's dims are its
 * checkpoint shape (weights are split once, so dims are global sizes).
 * NULL only when out of memory. */
static struct g_weight *manifest(const struct g_graph *g, uint32_t *n)
{
	struct named *w = malloc((g->ntensors ? g->ntensors : 1) * sizeof *w);
	struct g_weight *m = calloc(g->ntensors ? g->ntensors : 1, sizeof *m);

	*n = 0;
	if (!w || !m) {
		free(w);
		free(m);
		return NULL;
	}
	for (uint32_t t = 0; t < g->ntensors; t++)
		if (g->tensors[t].kind == GT_WEIGHT)
			w[(*n)++] = (struct named){ graph_str(g, g->tensors[t].name), t };
	qsort(w, *n, sizeof *w, by_name);
	for (uint32_t i = 0; i < *n; i++) {
		const struct g_tensor *t = &g->tensors[w[i].tensor];

		m[i].name = t->name;
		m[i].tensor = w[i].tensor;
		m[i].dtype = graph_tensor_dtype(g, w[i].tensor);
		m[i].ndim = t->ndim;
		memcpy(m[i].shape, t->dims, t->ndim * sizeof *t->dims);
	}
	free(w);
	return m;
}

void *graph_serialize(const struct g_graph *g, size_t *len)
{
	const struct g_program prog = {
		.arena_bytes = g->arena_bytes,
		.world = g->world,
	};
	const struct g_requires need = requirements(g);
	uint32_t nweights;
	struct g_weight *weights = manifest(g, &nweights);

	/* a graph made without dtypes is float32 throughout */
	uint8_t *dtypes = malloc(g->ntensors ? g->ntensors : 1);

	if (!weights || !dtypes) {
		free(weights);
		free(dtypes);
		return NULL;
	}
	for (uint32_t t = 0; t < g->ntensors; t++)
		dtypes[t] = (uint8_t)graph_tensor_dtype(g, t);
	/* In id order, so that table[id - 1] is section id. */
	const struct out_section in[] = {
		{ GS_PROGRAM, sizeof prog, &prog, 1 },
		{ GS_STRTAB, 1, g->strtab, g->strtab_size },
		{ GS_STROFF, sizeof *g->stroff, g->stroff, g->nstrings },
		{ GS_META, sizeof *g->meta, g->meta, g->nmeta },
		{ GS_AXES, sizeof *g->axes, g->axes, g->naxes },
		{ GS_GROUPS, sizeof *g->groups, g->groups, g->ngroups },
		{ GS_PATTERNS, sizeof *g->patterns, g->patterns, g->npatterns },
		{ GS_CHUNKS, sizeof *g->chunks, g->chunks, g->nchunks },
		{ GS_TENSORS, sizeof *g->tensors, g->tensors, g->ntensors },
		{ GS_OPS, sizeof *g->ops, g->ops, g->nops },
		{ GS_OPERANDS, sizeof *g->operands, g->operands, g->noperands },
		{ GS_INPUTS, sizeof *g->inputs, g->inputs, g->ninputs },
		{ GS_OUTPUTS, sizeof *g->outputs, g->outputs, g->noutputs },
		{ GS_META_ITEMS, sizeof *g->meta_items, g->meta_items, g->nmeta_items },
		{ GS_REQUIRES, sizeof need, &need, 1 },
		{ GS_WEIGHTS, sizeof *weights, weights, nweights },
		{ GS_DTYPES, 1, dtypes, g->ntensors },
	};
	enum { N = sizeof in / sizeof in[0] };
	struct g_section table[N];
	struct g_file_header h;
	uint64_t pos = sizeof h + sizeof table;

	memset(table, 0, sizeof table);
	for (int i = 0; i < N; i++) {
		pos = align_up(pos);
		table[i].id = in[i].id;
		table[i].elem = in[i].elem;
		table[i].offset = pos;
		table[i].size = in[i].count * in[i].elem;
		table[i].count = in[i].count;
		pos += table[i].size;
	}

	uint8_t *file = calloc(1, pos);

	if (!file) {
		free(weights);
		free(dtypes);
		return NULL;
	}
	memset(&h, 0, sizeof h);
	memcpy(h.magic, GRAPH_MAGIC, sizeof h.magic);
	h.major = GRAPH_MAJOR;
	h.minor = GRAPH_MINOR;
	h.probe = G_PROBE;
	h.header_size = sizeof h;
	h.nsections = N;
	h.file_size = pos;
	memcpy(file, &h, sizeof h);
	memcpy(file + sizeof h, table, sizeof table);
	for (int i = 0; i < N; i++)
		if (table[i].size) /* data may be NULL when empty */
			memcpy(file + table[i].offset, in[i].data, table[i].size);
	free(weights);
	free(dtypes);
	canonicalize(file, &table[GS_TENSORS - 1], &table[GS_GROUPS - 1]);

	h.checksum = graph_checksum(file, pos);
	memcpy(file + offsetof(struct g_file_header, checksum), &h.checksum,
	       sizeof h.checksum);
	*len = pos;
	return file;
}
