/* shape.c — slice, concat, reshape and pad on one rank: copies. */
#include <stdbool.h>

#include "runtime/op_runtime.h"

/* pad's rows before and after its input on this rank: the whole pads, or
 * along a split dim this rank's chunks of the first and last blocks. */
static void pad_local(const struct dtpc_session *s, const struct g_op *o, int64_t *before,
		      int64_t *after)
{
	const struct g_graph *g = s->g;
	struct ga_pad a = ga_pad_get(o);
	int32_t p = g->tensors[o->out].pattern[a.dim];
	*before = a.before;
	*after = a.after;
	if (p < 0)
		return;
	uint32_t me = graph_group_index(g, g->patterns[p].group, s->rank), nb = g->patterns[p].nblk;
	*before = a.before ? graph_chunk(g, (uint32_t)p, 0, me)->len : 0;
	*after = a.after ? graph_chunk(g, (uint32_t)p, nb - 1, me)->len : 0;
}

static dtpc_status check_slice(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	TRY(check_along_dim(s, i, o));
	struct ga_slice a = ga_slice_get(o);
	int d = (int)a.dim;
	int32_t p = g->tensors[x].pattern[d];
	int64_t start = a.start, len = a.length;
	if (p < 0) {
		REQUIRE(start >= 0 && len == dims(s, out)[d] &&
				start <= dims(s, x)[d] - len, i, name, "bounds");
		return DTPC_OK;
	}
	/* a slice of a sharded dim takes whole blocks */
	uint32_t nb = g->patterns[p].nblk, b0 = 0;
	int64_t at = 0;
	while (b0 < nb && at < start)
		at += block_size(g, p, b0++);
	REQUIRE(at == start, i, name, "the slice does not start at a block");
	uint32_t b1 = b0;
	while (b1 < nb && at < start + len)
		at += block_size(g, p, b1++);
	REQUIRE(at == start + len, i, name, "the slice does not end at a block");
	uint32_t me = graph_group_index(g, g->patterns[p].group, s->rank);
	REQUIRE(chunk_prefix(g, p, b1, me) - chunk_prefix(g, p, b0, me) ==
			dims(s, out)[d], i, name, "local size");
	return DTPC_OK;
}

static dtpc_status check_concat(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out;
	TRY(check_along_dim(s, i, o));
	int d = (int)ga_dim_get(o).dim;
	int64_t sum = 0;
	for (uint32_t k = 0; k < o->nin; k++)
		sum += dims(s, opnd(s, o, (int)k))[d];
	REQUIRE(sum == dims(s, out)[d], i, name, "sizes do not add up");
	return DTPC_OK;
}

static dtpc_status check_pad(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	struct ga_pad a = ga_pad_get(o);
	int d = (int)a.dim;
	REQUIRE(d >= 0 && d < nd(s, out) && nd(s, x) == nd(s, out) && a.before >= 0 &&
			a.after >= 0, i, name, "dim, ranks or pads");
	for (int e = 0; e < nd(s, out); e++)
		REQUIRE(e == d || dims(s, x)[e] == dims(s, out)[e], i, name, "dim %d differs", e);
	int32_t p = g->tensors[out].pattern[d], px = g->tensors[x].pattern[d];
	if (p >= 0) {
		/* split: the pads are the first and the last block */
		uint32_t nb = g->patterns[p].nblk;
		REQUIRE(px >= 0 && g->patterns[px].group == g->patterns[p].group &&
				nb == g->patterns[px].nblk + (a.before > 0) + (a.after > 0) &&
				(!a.before || block_size(g, p, 0) == a.before) &&
				(!a.after || block_size(g, p, nb - 1) == a.after), i, name,
			"the split does not hold the pads as blocks");
	} else {
		REQUIRE(px < 0, i, name, "a split input with a whole output");
	}
	int64_t lb, la;
	pad_local(s, o, &lb, &la);
	REQUIRE(lb + dims(s, x)[d] + la == dims(s, out)[d], i, name, "sizes do not add up");
	return device_can(s, i, s->dv && !s->dv->ops->fill2d, "pad");
}

static dtpc_status exec_slice(struct dtpc_session *s, const struct g_op *o)
{
	const struct g_graph *g = s->g;
	uint32_t x = opnd(s, o, 0), out = o->out;
	struct ga_slice a = ga_slice_get(o);
	int d = (int)a.dim;
	int64_t start = a.start;
	int32_t p = g->tensors[x].pattern[d];
	if (p >= 0) {
		/* the slice begins at a block: skip this rank's earlier chunks */
		uint32_t me = graph_group_index(g, g->patterns[p].group, s->rank), b = 0;
		int64_t at = 0;
		while (at < start)
			at += block_size(g, p, b++);
		start = chunk_prefix(g, p, b, me);
	}
	int64_t in_ = inner(s, x, d);
	DEV(s, o, copy2d, rt_data(s, out), dims(s, out)[d] * in_, el(s, rt_data(s, x), start * in_),
	    dims(s, x)[d] * in_, outer(s, x, d), dims(s, out)[d] * in_);
	return DTPC_OK;
}

static dtpc_status exec_concat(struct dtpc_session *s, const struct g_op *o)
{
	int d = (int)ga_dim_get(o).dim;
	int64_t in_ = inner(s, o->out, d), at = 0;
	for (uint32_t k = 0; k < o->nin; k++) {
		uint32_t t = opnd(s, o, (int)k);
		DEV(s, o, copy2d, el(s, rt_data(s, o->out), at * in_), dims(s, o->out)[d] * in_,
		    rt_data(s, t), dims(s, t)[d] * in_, outer(s, t, d), dims(s, t)[d] * in_);
		at += dims(s, t)[d];
	}
	return DTPC_OK;
}

static dtpc_status run_reshape(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	DEV(s, o, copy, y, rt_data(s, x), bytes(s, s->numel[x]));
	return DTPC_OK;
}

/* pad: the constant rows before and after (this rank's chunks of those
 * blocks along a split dim), x's rows between. */
static dtpc_status exec_pad(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t x = opnd(s, o, 0), out = o->out;
	struct ga_pad a = ga_pad_get(o);
	int d = (int)a.dim;
	int64_t lb, la, in_ = inner(s, out, d), rows = outer(s, out, d);
	int64_t width = dims(s, out)[d] * in_, xw = dims(s, x)[d] * in_;
	float *y = rt_data(s, out);
	pad_local(s, o, &lb, &la);
	if (lb)
		DEV(s, o, fill2d, y, width, rows, lb * in_, (float)a.value);
	DEV(s, o, copy2d, el(s, y, lb * in_), width, rt_data(s, x), xw, rows, xw);
	if (la)
		DEV(s, o, fill2d, el(s, y, lb * in_ + xw), width, rows, la * in_, (float)a.value);
	return DTPC_OK;
}

const struct op_runtime op_runtime_slice = { check_slice, exec_slice };
const struct op_runtime op_runtime_concat = { check_concat, exec_concat };
const struct op_runtime op_runtime_reshape = { check_numel_kept, run_reshape };
const struct op_runtime op_runtime_pad = { check_pad, exec_pad };
