/* op_table.h — the op enum and table generated from ops.def, shared by the
 * compiler and the runtime (the graph stores these ids). */
#ifndef DTPC_OP_TABLE_H
#define DTPC_OP_TABLE_H

/* The values are not in graph files (ops are, by id): they may change. */
enum op_flags {
	OPF_LOWERED = 1 << 0, /* graph-only: inserted by the compiler */
	OPF_COMM = 1 << 1,    /* communicates over its group */
	OPF_UNARY = 1 << 2,   /* unary pointwise, no parameters (ops.def's UNARY) */
	/* reads its first operand, where that is a graph input, in float32
	 * whatever the storage dtype: the values as bound (session.h's wide) */
	OPF_WIDE_INPUT = 1 << 3,
};

enum op_kind {
#define OP(id, glo, ghi, fl, sig) OP_##id,
#include "graph/ops.def"
#undef OP
	OP_COUNT
};

struct op_info {
	const char *name;
	int graph_min, graph_max; /* tensor operands in a graph; -1: any */
	unsigned flags;
	const char *signature;
};
extern const struct op_info op_table[OP_COUNT];
#endif
