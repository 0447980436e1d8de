/* graph_stats.c — what a graph costs a rank: bytes each collective moves,
 * weight bytes, the activation arena. One implementation for the compile
 * report, `dtpc inspect` and the runtime's trace. */
#include "graph/graph_stats.h"
#include "graph/op_graph.h"

#include <string.h>

/* In the tensor's storage dtype: what the arena holds, and what a
 * collective moves, except an all-reduce (op_graph.c). */
uint64_t graph_local_bytes(const struct g_graph *g, uint32_t t, uint32_t rank)
{
	return (uint64_t)graph_local_numel(g, t, rank) * graph_dtype_size(graph_tensor_dtype(g, t));
}

int64_t graph_pattern_len(const struct g_graph *g, int32_t p, uint32_t i)
{
	int64_t n = 0;
	for (uint32_t b = 0; b < g->patterns[p].nblk; b++)
		n += graph_chunk(g, (uint32_t)p, b, i)->len;
	return n;
}

uint64_t graph_comm_bytes(const struct g_graph *g, uint32_t op, uint32_t rank)
{
	const struct g_op *o = &g->ops[op];
	/* local ops move nothing */
	if (o->group < 0 || o->kind >= OP_COUNT || !op_graph[o->kind]->comm_bytes)
		return 0;
	return op_graph[o->kind]->comm_bytes(g, o, rank);
}

uint32_t graph_comm_elem_size(const struct g_graph *g, uint32_t op)
{
	const struct g_op *o = &g->ops[op];
	return o->kind == OP_all_reduce || o->kind == OP_reduce_scatter
		       ? 4
		       : graph_dtype_size(graph_tensor_dtype(g, o->out));
}

uint64_t graph_weight_bytes(const struct g_graph *g, uint32_t rank)
{
	uint64_t n = 0;
	for (uint32_t t = 0; t < g->ntensors; t++)
		if (g->tensors[t].kind == GT_WEIGHT)
			n += graph_local_bytes(g, t, rank);
	return n;
}

void graph_weight_gathers(const struct g_graph *g, uint32_t rank, uint32_t *count,
			  uint64_t *sent, uint64_t *whole)
{
	*count = 0;
	*sent = *whole = 0;
	for (uint32_t i = 0; i < g->nops; i++) {
		const struct g_op *o = &g->ops[i];
		if (o->kind != OP_all_gather || o->nin < 1 ||
		    g->tensors[g->operands[o->in0]].kind != GT_WEIGHT)
			continue;
		(*count)++;
		*sent += graph_comm_bytes(g, i, rank);
		*whole += graph_local_bytes(g, o->out, rank);
	}
}

void graph_comm_summary(const struct g_graph *g, uint32_t rank,
			struct graph_comm_row *rows, int *nrows, int cap)
{
	*nrows = 0;
	for (uint32_t i = 0; i < g->nops; i++) {
		const struct g_op *o = &g->ops[i];
		if (o->group < 0 || !(op_table[o->kind].flags & OPF_COMM))
			continue;
		uint64_t b = graph_comm_bytes(g, i, rank);
		int k = 0;
		while (k < *nrows && !(rows[k].kind == o->kind && rows[k].group == o->group))
			k++;
		if (k == *nrows) {
			if (k == cap)
				continue;
			memset(&rows[k], 0, sizeof rows[k]);
			rows[k].kind = o->kind;
			rows[k].group = o->group;
			(*nrows)++;
		}
		rows[k].count++;
		rows[k].bytes += b;
	}
}
