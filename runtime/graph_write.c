/* graph_write.c — serializes a graph into the .graph format
 * (docs/graph-format.md).
 *
 * The file is a header, a section table and one section per table, each at a
 * G_ALIGN-aligned offset, so that the loader can point into the bytes. Every
 * byte is determined by the graph's contents: the buffer starts zeroed (so
 * padding is zero) and unused array slots are cleared, so equal graphs give
 * equal files and equal checksums (the ranks' handshake compares them). */
#include "runtime/graph.h"

#include <stdlib.h>
#include <string.h>

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

void *graph_serialize(const struct g_graph *g, size_t *len)
{
	const struct g_program prog = {
		.arena_bytes = g->arena_bytes,
		.world = g->world,
	};
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

	if (!file)
		return NULL;
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
	canonicalize(file, &table[GS_TENSORS - 1], &table[GS_GROUPS - 1]);

	h.checksum = graph_checksum(file, pos);
	memcpy(file + offsetof(struct g_file_header, checksum), &h.checksum,
	       sizeof h.checksum);
	*len = pos;
	return file;
}
