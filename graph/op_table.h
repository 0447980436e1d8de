/* op_table.h — the op enum and table generated from ops.def, shared by the
 * compiler and the runtime (the graph stores these ids). */
#ifndef DTPC_OP_TABLE_H
#define DTPC_OP_TABLE_H

enum op_flags {
	OPF_WEIGHTS = 1 << 0,
	OPF_LINEAR = 1 << 1,
	OPF_NORM = 1 << 2,
	OPF_POINTWISE = 1 << 3,
	OPF_BCAST = 1 << 4,
	OPF_ATTENTION = 1 << 5,
	OPF_LOWERED = 1 << 6, /* graph-only: inserted by the compiler */
	OPF_COMM = 1 << 7,    /* communicates over its group */
};

enum op_kind {
#define OP(id, lo, hi, glo, ghi, fl, sig) OP_##id,
#include "graph/ops.def"
#undef OP
	OP_COUNT
};

struct op_info {
	const char *name;
	int min_args, max_args;   /* in the language */
	int graph_min, graph_max; /* tensor operands in a graph; -1: any */
	unsigned flags;
	const char *signature;
};
extern const struct op_info op_table[OP_COUNT];
#endif
