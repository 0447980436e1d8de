/* graph_stats.c — what a graph costs a rank: bytes each collective moves,
 * weight bytes, the activation arena. One implementation for the compile
 * report, `dtpc inspect` and the runtime's trace. */
#include "graph/graph_stats.h"

#include <string.h>

/* In the tensor's storage dtype: what the arena holds, and what a
 * collective moves, except an all-reduce (below). */
static uint64_t local_bytes(const struct g_graph *g, uint32_t t, uint32_t rank)
{
	return (uint64_t)graph_local_numel(g, t, rank) * graph_dtype_size(graph_tensor_dtype(g, t));
}

/* The chunk length of a dim's pattern for group index i (summed over blocks). */
static int64_t pattern_len(const struct g_graph *g, int32_t p, uint32_t i)
{
	int64_t n = 0;
	for (uint32_t b = 0; b < g->patterns[p].nblk; b++)
		n += graph_chunk(g, (uint32_t)p, b, i)->len;
	return n;
}

uint64_t graph_comm_bytes(const struct g_graph *g, uint32_t op, uint32_t rank)
{
	const struct g_op *o = &g->ops[op];
	if (o->group < 0)
		return 0;
	uint32_t P = g->groups[o->group].size;
	uint32_t me = graph_group_index(g, (uint32_t)o->group, rank);
	uint32_t in = g->operands[o->in0];
	switch ((enum op_kind)o->kind) {
	case OP_all_gather:
		/* every other rank's chunk arrives once */
		return local_bytes(g, o->out, rank) - local_bytes(g, in, rank);
	case OP_reduce_scatter: {
		/* every chunk but mine leaves, once, as float32 whatever the
		 * storage (the sum is rounded once, as an all-reduce's) */
		uint64_t all = (uint64_t)graph_local_numel(g, in, rank);
		return 4 * (all - all / (uint64_t)graph_local_dim(g, in, (int)o->attr[0], rank) *
					  (uint64_t)graph_local_dim(g, o->out, (int)o->attr[0], rank));
	}
	case OP_all_reduce:
		/* ring all-reduce: reduce-scatter then all-gather, of float32
		 * whatever the storage (the partial sums are rounded once, after
		 * the sum) */
		return 2 * (uint64_t)graph_local_numel(g, in, rank) * 4 * (P - 1) / P;
	case OP_ulysses_a2a: {
		/* everything but the part that stays on this rank */
		const struct g_tensor *t = &g->tensors[in];
		int last = t->ndim - 1;
		uint64_t bytes = local_bytes(g, in, rank);
		int64_t width = graph_local_dim(g, in, last, rank);
		if (o->attr[0] == 0) {
			const struct g_tensor *ot = &g->tensors[o->out];
			int64_t keep = pattern_len(g, ot->pattern[last], me);
			return width ? bytes / (uint64_t)width * (uint64_t)(width - keep) : 0;
		}
		/* back: my rows of the ring's sequence stay, the rest go */
		int sd = (int)o->attr[2];
		int64_t rows = graph_local_dim(g, in, sd, rank);
		int64_t mine = graph_local_dim(g, o->out, sd, rank);
		return rows ? bytes / (uint64_t)rows * (uint64_t)(rows - mine) : 0;
	}
	case OP_ring_attention: {
		uint32_t k = g->operands[o->in0 + 1], v = g->operands[o->in0 + 2];
		int sd = (int)o->attr[3];
		const struct g_tensor *kt = &g->tensors[k];
		uint64_t mine = local_bytes(g, k, rank) + local_bytes(g, v, rank);
		if (o->nin == 4) /* the mask's rows travel with the keys' */
			mine += local_bytes(g, g->operands[o->in0 + 3], rank);
		int64_t rows = graph_local_dim(g, k, sd, rank);
		uint64_t per_row = rows ? mine / (uint64_t)rows : 0;
		int64_t total = 0;
		for (uint32_t i = 0; i < P; i++)
			total += kt->pattern[sd] >= 0 ? pattern_len(g, kt->pattern[sd], i) : kt->dims[sd];
		if (o->attr[2] == 0) /* all-gather: all other chunks arrive */
			return per_row * (uint64_t)(total - rows);
		/* rotation: P - 1 steps, each passing on the chunk held; the
		 * chunk of the next rank is the one never sent */
		int64_t next = kt->pattern[sd] >= 0
				       ? pattern_len(g, kt->pattern[sd], (me + 1) % P)
				       : kt->dims[sd];
		return per_row * (uint64_t)(total - next);
	}
	case OP_linear:
	case OP_layer_norm:
	case OP_rms_norm:
	case OP_gelu:
	case OP_silu:
	case OP_tanh:
	case OP_add:
	case OP_mul:
	case OP_modulate:
	case OP_slice:
	case OP_concat:
	case OP_rope:
	case OP_attention:
	case OP_param:
	case OP_reshape:
	case OP_timestep_embedding:
	case OP_rope_freqs:
	case OP_ltx_rope_freqs:
	case OP_grid_ids:
	case OP_text_ids:
	case OP_patch_embed:
	case OP_unpatchify:
	case OP_shard:
	case OP_pad:
	case OP_norm_stats:
	case OP_linear_act:
	case OP_COUNT:
		break;
	}
	/* local ops move nothing */
	return 0;
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
			n += local_bytes(g, t, rank);
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
		*whole += local_bytes(g, o->out, rank);
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
