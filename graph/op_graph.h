/* op_graph.h — what the graph format says of an op, one descriptor per op
 * (graph/op_graph.c), the third beside the compiler's (compiler/op_compile.h)
 * and the runtime's (runtime/op_runtime.h): the flags it may have and the
 * loader's check of its attributes, the bytes it moves when it
 * communicates, its work on a rank (the cost model's input), and why it is
 * in a graph (dtpc inspect). Its readers
 * dispatch through op_graph[], the table generated from ops.def, so an op
 * of ops.def without its descriptor is a link error naming op_graph_<id>.
 * The op's parameters themselves are graph/op_attrs.h's. */
#ifndef DTPC_OP_GRAPH_H
#define DTPC_OP_GRAPH_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"
#include "graph/op_table.h"

/* What an op does on a rank in one forward pass, in the graph's terms: the
 * cost model (cost/model.c) times it on a hardware profile, the rates and
 * the times being its own. Sizes are elements, not bytes, so the model
 * prices them in the dtype it costs. */
enum op_work_kind {
	OW_NONE,      /* nothing runs (param) */
	OW_GEMM,      /* a matrix product: flops */
	OW_ATTENTION, /* flops over scores (the attention matrix's elements) */
	OW_KERNEL,    /* memory-bound: computes elems elements, moves `moved` at rate's rate */
	OW_COPY,      /* moves `moved` elements, computing none */
	OW_COMM,      /* a collective: the model times its transfers (comm_bytes) and
		       * the executor's copies around them; ring attention's chunks
		       * from queries and the head dims */
};

struct op_work {
	enum op_work_kind kind;
	double flops;  /* OW_GEMM, OW_ATTENTION */
	double scores; /* OW_ATTENTION */
	double elems;  /* OW_KERNEL: the result's elements, each computed */
	double moved;  /* OW_KERNEL, OW_COPY: the elements read and written */
	/* OW_KERNEL: the op whose measured rate its bytes move at (a
	 * profile's op_bytes_per_s key): itself where dtpc calibrate measures
	 * it, else one that does as much per element; OP_COUNT: none, the
	 * profile's memory bandwidth */
	enum op_kind rate;
	/* ring_attention: batch x heads x query rows, q/k's head dim plus
	 * v's, and v's (a chunk of r key rows is 2 queries r head_dims flops) */
	double queries, head_dims, head_dim_v;
};

struct op_graph {
	/* The G_OF_* bits the op has: the loader refuses any other, as
	 * damage or a meaning this reader does not know. */
	uint32_t flags;
	/* graph_load.c, after the checks every op shares (kind, operand
	 * counts and references, group, flags): the attributes that can be
	 * held against the graph alone; the others are held against the
	 * tensors' shapes by the session's op checks (runtime/ops/). False
	 * with the reason raised (G_ERR_FORMAT, graph/error.h; the loader
	 * puts "op i (name): " before it). NULL: nothing to check here. */
	bool (*check)(const struct g_graph *g, const struct g_op *o);
	/* graph_comm_bytes (graph_stats.h): the bytes op o moves for rank in
	 * one forward pass, o->group being a group. NULL: a local op, 0. */
	uint64_t (*comm_bytes)(const struct g_graph *g, const struct g_op *o, uint32_t rank);
	/* The op's work on rank (cost/model.c). Every op has one. */
	struct op_work (*work)(const struct g_graph *g, const struct g_op *o, uint32_t rank);
	/* graph_op_why: why the op is in the graph. NULL: the model's own op,
	 * which communicates nothing. */
	const char *(*why)(const struct g_graph *g, const struct g_op *o);
};

#define OP(id, glo, ghi, fl, sig) extern const struct op_graph op_graph_##id;
#include "graph/ops.def"
#undef OP
extern const struct op_graph *const op_graph[OP_COUNT];

/* Why op o is in the graph, in a line (dtpc inspect): the collectives,
 * reshuffles and fused pairs the compiler inserted say what for; the
 * model's own ops say that they communicate nothing. */
const char *graph_op_why(const struct g_graph *g, const struct g_op *o);

/* For the descriptors: tensor t's bytes on rank (its storage dtype), and
 * the chunk length of pattern p for group index i, summed over blocks
 * (graph_stats.c). */
uint64_t graph_local_bytes(const struct g_graph *g, uint32_t t, uint32_t rank);
int64_t graph_pattern_len(const struct g_graph *g, int32_t p, uint32_t i);
#endif
