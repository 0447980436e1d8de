/* rope.c — rope, rope_freqs (its tables, from ids or positions it
 * computes itself) and ltx_rope_freqs (LTX-Video's), on one rank. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "runtime/op_runtime.h"

static dtpc_status check_rope(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	uint32_t c = opnd(s, o, 1), sn = opnd(s, o, 2);
	int64_t D = o->attr[0];
	REQUIRE(nd(s, x) == 3 && same_dims(s, x, out) && D > 0 && D % 2 == 0 &&
			dims(s, x)[2] % D == 0, i, name, "shapes");
	for (uint32_t t = c; ; t = sn) {
		REQUIRE(nd(s, t) == 2 && dims(s, t)[0] == dims(s, x)[1] && dims(s, t)[1] == D,
			i, name, "cos/sin must be [%lld, %lld]", (long long)dims(s, x)[1],
			(long long)D);
		if (t == sn)
			break;
	}
	return DTPC_OK;
}

static dtpc_status check_rope_freqs(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	if (!o->nin) {
		/* positions computed (the loader saw one generator flag):
		 * the generator's checks, on a whole output */
		const struct g_tensor *t = &s->g->tensors[out];
		int64_t ids[3], rows = 1;
		graph_rope_ids_attr(o, nd(s, out) ? dims(s, out)[0] : 0, ids);
		bool grid = o->flags & G_OF_GRID;
		for (int k = 0; k < (grid ? 3 : 1); k++)
			REQUIRE(ids[k] >= 1 && ids[k] <= (1 << 24) &&
					!__builtin_mul_overflow(rows, ids[k], &rows), i, name,
				"position sizes");
		for (int k = graph_rope_naxes(o); !grid && k < G_NATTR - 1; k++)
			REQUIRE(!o->attr[k], i, name, "attr[%d] after the axes", k);
		REQUIRE(nd(s, out) == 2 && t->pattern[0] == -1 && t->pattern[1] == -1 &&
				dims(s, out)[0] == rows && graph_ids_extent(grid, ids,
					o->flags & G_OF_CENTER) <= (1 << 24), i, name,
			"the output must be whole, [%lld, width], its positions within 2^24",
			(long long)rows);
	} else {
		REQUIRE(nd(s, x) == 2 && nd(s, out) == 2 && dims(s, out)[0] == dims(s, x)[0],
			i, name, "ids must be [S, axes] and the output [S, width]");
	}
	int64_t n = o->nin ? dims(s, x)[1] : graph_rope_naxes(o), width = 0;
	REQUIRE(n >= 1 && n <= G_NATTR, i, name, "%lld axes (1 to %d)", (long long)n, G_NATTR);
	for (int k = 0; k < n; k++) {
		REQUIRE(o->attr[k] >= 2 && o->attr[k] % 2 == 0 && o->attr[k] <= dims(s, out)[1],
			i, name, "axes_dim[%d] = %lld", k, (long long)o->attr[k]);
		width += o->attr[k];
	}
	REQUIRE(width == dims(s, out)[1], i, name, "axes_dim sums to %lld, the output has %lld",
		(long long)width, (long long)dims(s, out)[1]);
	REQUIRE(o->eps > 0 && isfinite(o->eps), i, name, "theta");
	return DTPC_OK;
}

static dtpc_status run_rope(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	int64_t W = dims(s, x)[2], D = o->attr[0];
	DEV(s, o, rope, rt_data(s, x), W, rt_data(s, opnd(s, o, 1)), rt_data(s, opnd(s, o, 2)),
	    y, W, dims(s, x)[0], dims(s, x)[1], W / D, D);
	return DTPC_OK;
}

static dtpc_status run_rope_freqs(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	int64_t ids[3];
	graph_rope_ids_attr(o, dims(s, out)[0], ids);
	struct dev_positions pos = { o->flags & G_OF_GRID, o->flags & G_OF_CENTER, ids[0],
				     ids[1], ids[2], ids[1] };
	DEV(s, o, rope_freqs, o->nin ? rt_data(s, x) : NULL, &pos, y, dims(s, out)[0],
	    o->nin ? dims(s, x)[1] : graph_rope_naxes(o), o->attr, o->eps,
	    o->flags & G_OF_SIN, o->flags & G_OF_F64);
	return DTPC_OK;
}

static dtpc_status check_ltx_rope_freqs(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = opnd(s, o, 0);
	int64_t dim = o->attr[0];
	double sc[3];
	memcpy(sc, &o->attr[3], sizeof sc);
	REQUIRE(nd(s, x) == 2 && dims(s, x)[1] == 3 && nd(s, out) == 2 &&
			dims(s, out)[0] == dims(s, x)[0] && dims(s, out)[1] == dim, i, name,
		"ids must be [S, 3] and the output [S, %lld]", (long long)dim);
	REQUIRE(dim >= 2 && dim % 2 == 0, i, name, "dim %lld (even, at least 2)", (long long)dim);
	REQUIRE(o->attr[1] >= 1 && o->attr[2] >= 1, i, name, "patch sizes");
	REQUIRE(o->eps > 0 && o->eps != 1 && isfinite(o->eps) && isfinite(sc[0]) &&
			isfinite(sc[1]) && isfinite(sc[2]), i, name, "theta or scales");
	return DTPC_OK;
}

static dtpc_status run_ltx_rope_freqs(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = opnd(s, o, 0);
	double sc[3];
	memcpy(sc, &o->attr[3], sizeof sc);
	DEV(s, o, ltx_rope_freqs, rt_data(s, x), rt_data(s, out), dims(s, x)[0], o->attr[0], sc,
	    o->attr[1], o->attr[2], o->eps, o->flags & G_OF_SIN);
	return DTPC_OK;
}

const struct op_runtime op_runtime_rope = { check_rope, run_rope };
const struct op_runtime op_runtime_ltx_rope_freqs = { check_ltx_rope_freqs, run_ltx_rope_freqs };
const struct op_runtime op_runtime_rope_freqs = { check_rope_freqs, run_rope_freqs };
