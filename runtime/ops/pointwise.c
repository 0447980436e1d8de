/* pointwise.c — gelu, the unary ops (silu, tanh, sigmoid), add, mul and
 * modulate on one rank. */
#include <stdbool.h>

#include "runtime/op_runtime.h"

static dtpc_status check_binary(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out;
	int64_t sh[G_MAX_DIMS];
	REQUIRE(nd(s, out) <= K_MAX_DIMS, i, name, "too many dims");
	for (int k = 0; k < 2; k++)
		REQUIRE(bcast_shape(s, opnd(s, o, k), out, k == 1 && ga_bcast_get(o).bh, sh),
			i, name, "operand %d does not broadcast to the output", k);
	return DTPC_OK;
}

static dtpc_status check_modulate(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	int64_t sh[G_MAX_DIMS];
	REQUIRE(same_dims(s, x, out) && nd(s, out) <= K_MAX_DIMS, i, name, "shapes");
	for (int k = 1; k < 3; k++)
		REQUIRE(bcast_shape(s, opnd(s, o, k), out, ga_bcast_get(o).bh, sh), i, name,
			"shift/scale do not broadcast");
	return DTPC_OK;
}

static dtpc_status run_gelu(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	DEV(s, o, gelu, rt_data(s, x), y, s->numel[x], ga_gelu_get(o).tanh);
	return DTPC_OK;
}

/* ops.def's UNARY ops: the device's kernel of the op */
static dtpc_status run_unary(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	DEV(s, o, unary, (enum op_kind)o->kind, rt_data(s, x), y, s->numel[x]);
	return DTPC_OK;
}

static dtpc_status exec_binary(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t a = opnd(s, o, 0), b = opnd(s, o, 1), out = o->out;
	int64_t as[K_MAX_DIMS], bs[K_MAX_DIMS];
	bcast_shape(s, a, out, false, as);
	bcast_shape(s, b, out, ga_bcast_get(o).bh, bs);
	DEV(s, o, binary, o->kind == OP_add ? K_ADD : K_MUL, rt_data(s, a), as, rt_data(s, b), bs,
	    rt_data(s, out), dims(s, out), nd(s, out));
	return DTPC_OK;
}

/* t is [B, 1, H] against x [B, S, H]. */
static bool per_batch_row(const struct dtpc_session *s, uint32_t t, uint32_t x)
{
	return nd(s, t) == 3 && nd(s, x) == 3 && dims(s, t)[0] == dims(s, x)[0] &&
	       dims(s, t)[1] == 1 && dims(s, t)[2] == dims(s, x)[2];
}

static dtpc_status exec_modulate(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t x = opnd(s, o, 0), shift = opnd(s, o, 1), scale = opnd(s, o, 2), out = o->out;
	const int64_t *xs = dims(s, x);
	/* one row per batch ([B, 1, H], or [B, H] under the flag of version 1.0
	 * graphs) or per position ([B, S, H]): the fused kernel */
	bool per_batch = ga_bcast_get(o).bh || (per_batch_row(s, shift, x) &&
						 per_batch_row(s, scale, x));
	if (nd(s, x) == 3 && (per_batch || (same_dims(s, x, shift) && same_dims(s, x, scale)))) {
		DEV(s, o, modulate, rt_data(s, x), rt_data(s, shift), rt_data(s, scale),
		    rt_data(s, out), xs[0], xs[1], xs[2], per_batch ? 0 : xs[2]);
		return DTPC_OK;
	}
	/* other broadcasts: y = x * scale + x + shift */
	int64_t ss[K_MAX_DIMS], hs[K_MAX_DIMS];
	bcast_shape(s, scale, out, false, ss);
	bcast_shape(s, shift, out, false, hs);
	float *y = rt_data(s, out);
	DEV(s, o, binary, K_MUL, rt_data(s, x), xs, rt_data(s, scale), ss, y, xs, nd(s, x));
	DEV(s, o, binary, K_ADD, y, xs, rt_data(s, x), xs, y, xs, nd(s, x));
	DEV(s, o, binary, K_ADD, y, xs, rt_data(s, shift), hs, y, xs, nd(s, x));
	return DTPC_OK;
}

const struct op_runtime op_runtime_gelu = { check_numel_kept, run_gelu };
const struct op_runtime op_runtime_silu = { check_numel_kept, run_unary };
const struct op_runtime op_runtime_tanh = { check_numel_kept, run_unary };
const struct op_runtime op_runtime_sigmoid = { check_numel_kept, run_unary };
const struct op_runtime op_runtime_add = { check_binary, exec_binary };
const struct op_runtime op_runtime_mul = { check_binary, exec_binary };
const struct op_runtime op_runtime_modulate = { check_modulate, exec_modulate };
