/* linear.c — linear and linear_act on one rank (and param, which never
 * runs: its tensor is a weight). */
#include <stdbool.h>
#include <stddef.h>

#include "runtime/op_runtime.h"

/* linear's bias, or linear_act's */
static bool has_bias(const struct g_op *o)
{
	return o->kind == OP_linear_act ? ga_linear_act_get(o).bias : ga_linear_get(o).bias;
}

static dtpc_status check_linear(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	uint32_t w = opnd(s, o, 1);
	REQUIRE(nd(s, w) == 2 && nd(s, x) >= 1 && nd(s, out) == nd(s, x), i, name, "ranks");
	int64_t K = dims(s, x)[nd(s, x) - 1], N = dims(s, w)[0];
	REQUIRE(dims(s, w)[1] == K, i, name, "input width %lld but the weight has %lld columns",
		(long long)K, (long long)dims(s, w)[1]);
	REQUIRE(dims(s, out)[nd(s, out) - 1] == N && s->numel[out] / (N ? N : 1) ==
			s->numel[x] / (K ? K : 1), i, name, "output shape");
	if (has_bias(o))
		REQUIRE(o->nin == 3 && s->numel[opnd(s, o, 2)] == N, i, name, "bias size");
	else
		REQUIRE(o->nin == 2, i, name, "a third operand without the bias flag");
	return DTPC_OK;
}

static dtpc_status run_linear(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	int64_t K = dims(s, x)[nd(s, x) - 1], N = dims(s, out)[nd(s, out) - 1];
	DEV(s, o, linear, rt_data(s, x), rt_data(s, opnd(s, o, 1)),
	    ga_linear_get(o).bias ? rt_data(s, opnd(s, o, 2)) : NULL, y, K ? s->numel[x] / K : 0,
	    K, N);
	return DTPC_OK;
}

_Static_assert((int)G_ACT_GELU == (int)K_ACT_GELU && (int)G_ACT_GELU_TANH == (int)K_ACT_GELU_TANH &&
		       (int)G_ACT_SILU == (int)K_ACT_SILU, "linear_act's activations: graph and kernels agree");

/* The unfused pair's meaning, act(round(x W^T + b)) (the loader checked
 * the activation): the device's fused entry where it has one, else its linear
 * into y (rounded to the storage dtype) and the activation in place. */
static dtpc_status run_linear_act(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = opnd(s, o, 0);
	float *y = rt_data(s, out);
	int64_t K = dims(s, x)[nd(s, x) - 1], N = dims(s, out)[nd(s, out) - 1];
	struct ga_linear_act a = ga_linear_act_get(o);
	const float *b = a.bias ? rt_data(s, opnd(s, o, 2)) : NULL;
	if (s->dv->ops->linear_act) {
		DEV(s, o, linear_act, rt_data(s, x), rt_data(s, opnd(s, o, 1)), b, y,
		    K ? s->numel[x] / K : 0, K, N, (enum k_act)a.act);
		return DTPC_OK;
	}
	DEV(s, o, linear, rt_data(s, x), rt_data(s, opnd(s, o, 1)), b, y, K ? s->numel[x] / K : 0,
	    K, N);
	if (a.act == G_ACT_SILU)
		DEV(s, o, unary, OP_silu, y, y, s->numel[out]);
	else
		DEV(s, o, gelu, y, y, s->numel[out], a.act == G_ACT_GELU_TANH);
	return DTPC_OK;
}

const struct op_runtime op_runtime_linear = { check_linear, run_linear };
const struct op_runtime op_runtime_linear_act = { check_linear, run_linear_act };

/* param: a learned tensor the compiler made a weight; as an op it has no
 * check and no run, so exec_check refuses it in a graph. */
const struct op_runtime op_runtime_param = { NULL, NULL };
