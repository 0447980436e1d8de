/* fuzz_graph.c — libFuzzer target: the .graph loader (graph/graph_load.c).
 *
 * Each input is parsed twice: as it is, which exercises the header checks
 * (almost every mutation dies at the checksum there), and with its size and
 * checksum fields fixed up, so that mutations reach the section and table
 * checks. Whatever loads, every query is then run over every tensor, op and
 * group for a few ranks: a graph that graph_parse accepts must be safe to
 * query, so any crash or sanitizer report here is a loader bug. Then a
 * session is prepared for rank 0 (local shapes, groups and every op's
 * checks, without a communicator): a loaded graph whose ops do not fit
 * together must be rejected there, never read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "runtime/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void query(const struct g_graph *g, uint32_t rank)
{
	uint32_t c[G_MAX_AXES];
	volatile uint64_t sink = 0;

	graph_coords(g, rank, c);
	for (uint32_t i = 0; i < g->nstrings; i++)
		sink += strlen(graph_str(g, i));
	for (uint32_t gr = 0; gr < g->ngroups; gr++) {
		uint32_t me = graph_group_index(g, gr, rank);

		if (me >= g->groups[gr].size ||
		    graph_group_member(g, gr, rank, me) != rank)
			abort();
		for (uint32_t i = 0; i < g->groups[gr].size && i < 64; i++)
			if (graph_group_member(g, gr, rank, i) >= g->world)
				abort();
	}
	for (uint32_t t = 0; t < g->ntensors; t++) {
		const struct g_tensor *tn = &g->tensors[t];

		for (int d = 0; d < tn->ndim; d++)
			if (graph_local_dim(g, t, d, rank) > tn->dims[d])
				abort();
		/* The loader's promise: the local piece fits the bytes. */
		if ((uint64_t)graph_local_numel(g, t, rank) * sizeof(float) > tn->bytes)
			abort();
	}
	for (uint32_t o = 0; o < g->nops; o++) {
		const struct g_op *op = &g->ops[o];

		for (uint32_t k = 0; k < op->nin; k++)
			sink += (uint64_t)graph_local_numel(g, g->operands[op->in0 + k], rank);
		sink += (uint64_t)graph_local_numel(g, op->out, rank);
		if (op->group >= 0)
			sink += graph_group_index(g, (uint32_t)op->group, rank);
	}
	for (uint32_t i = 0; i < g->ninputs; i++)
		sink += (uint64_t)graph_local_numel(g, g->inputs[i], rank);
	for (uint32_t i = 0; i < g->noutputs; i++)
		sink += (uint64_t)graph_local_numel(g, g->outputs[i], rank);
	(void)sink;
}

static void parse_and_query(const uint8_t *buf, size_t size, uint32_t seed)
{
	struct g_graph g;
	if (!graph_parse(buf, size, &g)) {
		if (!g_error()->msg[0])
			abort(); /* every rejection says why */
		return;
	}
	query(&g, 0);
	query(&g, g.world - 1);
	query(&g, seed % g.world);
	struct dtpc_session *s = calloc(1, sizeof *s);
	if (!s)
		return;
	s->g = &g;
	s->rank = seed % g.world;
	session_prepare(s);
	dtpc_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* malloc'd memory is aligned as graph_parse requires; keep one byte so
	 * that an empty input still gets a real pointer. */
	uint8_t *buf = malloc(size + 1);
	uint32_t seed = 0;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	for (size_t i = 0; i < size && i < 64; i++)
		seed = seed * 31 + data[i];
	parse_and_query(buf, size, seed);
	if (size >= sizeof(struct g_file_header)) {
		struct g_file_header h;

		memcpy(&h, buf, sizeof h);
		h.file_size = size;
		memcpy(buf, &h, sizeof h);
		h.checksum = graph_checksum(buf, size);
		memcpy(buf, &h, sizeof h);
		parse_and_query(buf, size, seed);
	}
	free(buf);
	return 0;
}
