/* graph_stats.h — per-rank costs of a graph (communication, weights). */
#ifndef DTPC_GRAPH_STATS_H
#define DTPC_GRAPH_STATS_H
#include "graph/graph.h"

/* Bytes rank sends for op `op` in one forward pass, with the standard
 * algorithms: all-gather (P-1)/P of the result, ring all-reduce 2(P-1)/P of
 * the tensor, all-to-all everything not kept, ring attention every KV chunk
 * but one. 0 for local ops. */
uint64_t graph_comm_bytes(const struct g_graph *g, uint32_t op, uint32_t rank);
/* The bytes per element graph_comm_bytes counts for op `op`: its tensors'
 * storage dtype's, or 4 for an all-reduce or a reduce-scatter (they sum in float32). */
uint32_t graph_comm_elem_size(const struct g_graph *g, uint32_t op);
/* The rank's slice of every weight, in bytes. */
uint64_t graph_weight_bytes(const struct g_graph *g, uint32_t rank);

/* The all-gathers of weights (FSDP: a weight stored split, gathered before
 * its op) for one rank: how many, the bytes they send (part of the
 * all_gather rows of graph_comm_summary) and the bytes of the weights they
 * make whole. */
void graph_weight_gathers(const struct g_graph *g, uint32_t rank, uint32_t *count,
			  uint64_t *sent, uint64_t *whole);

/* Communication per (op kind, group) for one rank. */
struct graph_comm_row {
	int kind;
	int group;
	int count;
	uint64_t bytes;
};
void graph_comm_summary(const struct g_graph *g, uint32_t rank,
			struct graph_comm_row *rows, int *nrows, int cap);
#endif
