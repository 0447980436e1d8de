/* index.c — index_select and index_copy on one rank: rows moved by a
 * runtime index (the device's index_rows). */
#include <stdbool.h>

#include "runtime/op_runtime.h"

/* x and out (index_select; index_copy: src and x) equal but on dim d, where
 * the second has the index's length; the indexed rows' values exact in the
 * storage dtype (an index input is rounded to it when bound). */
static dtpc_status check_index(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	bool scatter = o->kind == OP_index_copy;
	uint32_t out = o->out, x = opnd(s, o, 0), idx = opnd(s, o, 1);
	uint32_t picked = scatter ? opnd(s, o, 2) : out;
	int d = (int)ga_dim_get(o).dim;
	REQUIRE(d >= 0 && d < nd(s, x) && nd(s, idx) == 1 && nd(s, picked) == nd(s, x) &&
			nd(s, out) == nd(s, x), i, name, "dim or ranks");
	for (int e = 0; e < nd(s, x); e++)
		REQUIRE(dims(s, picked)[e] == (e == d ? dims(s, idx)[0] : dims(s, x)[e]) &&
				(!scatter || dims(s, out)[e] == dims(s, x)[e]),
			i, name, "dim %d: %s", e, scatter ? "src must be x's shape with the index's "
							    "length on dim, out x's"
							  : "out must be x's shape with the "
							    "index's length on dim");
	enum g_dtype gd = s->dtype == DTPC_BF16 ? G_DT_BF16
			  : s->dtype == DTPC_F16 ? G_DT_F16 : G_DT_F32;
	int64_t top = dims(s, x)[d] - 1;
	REQUIRE(top <= graph_dtype_exact_ints(gd), i, name,
		"index values up to %lld are not exact in %s storage (integers up to %lld are)",
		(long long)top, graph_dtype_name(gd), (long long)graph_dtype_exact_ints(gd));
	return device_can(s, i, s->dv && !s->dv->ops->index_rows, name);
}

static dtpc_status run_index_select(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = opnd(s, o, 0), idx = opnd(s, o, 1);
	int d = (int)ga_dim_get(o).dim;
	DEV(s, o, index_rows, rt_data(s, out), dims(s, out)[d], rt_data(s, x), dims(s, x)[d],
	    rt_data(s, idx), dims(s, idx)[0], outer(s, x, d), inner(s, x, d), false);
	return DTPC_OK;
}

/* out = x, then src's rows at the index's rows */
static dtpc_status run_index_copy(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = opnd(s, o, 0), idx = opnd(s, o, 1), src = opnd(s, o, 2);
	int d = (int)ga_dim_get(o).dim;
	DEV(s, o, copy, rt_data(s, out), rt_data(s, x), bytes(s, s->numel[x]));
	DEV(s, o, index_rows, rt_data(s, out), dims(s, out)[d], rt_data(s, src), dims(s, src)[d],
	    rt_data(s, idx), dims(s, idx)[0], outer(s, x, d), inner(s, x, d), true);
	return DTPC_OK;
}

const struct op_runtime op_runtime_index_select = { check_index, run_index_select };
const struct op_runtime op_runtime_index_copy = { check_index, run_index_copy };
