/* exec.c — one graph op on one rank: kernels, layout moves and collectives.
 *
 * Compute and copies go through the session's device (device.h), never to a
 * kernel directly. Collectives take arena memory; where the device's memory
 * is not the host's and the backend cannot take device memory, the bytes a
 * collective sends are downloaded to the arena's host mirror first and what
 * it received is uploaded after (staging).
 *
 * Local shapes come from the graph's patterns (session.c precomputes them).
 * exec_check() runs before the first op, at session creation, and proves for
 * every op that each kernel stays inside its buffers on this rank; exec_op()
 * then runs without re-checking. A graph that passed the loader but whose
 * ops do not fit together is rejected there with the op named, never run. */
#include "runtime/op_runtime.h"

/* Each op's check and run, from its descriptor (runtime/ops/). */
static const struct op_runtime *const op_runtime[OP_COUNT] = {
#define OP(id, glo, ghi, fl, sig) [OP_##id] = &op_runtime_##id,
#include "graph/ops.def"
#undef OP
};

dtpc_status exec_check(struct dtpc_session *s, uint32_t i)
{
	const struct g_graph *g = s->g;
	const struct g_op *o = &g->ops[i];
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out;
	for (uint32_t k = 0; k < o->nin; k++) {
		uint32_t t = opnd(s, o, (int)k);
		REQUIRE(t != out, i, name, "writes over its own input");
	}
	if (o->scratch >= 0)
		REQUIRE((uint32_t)o->scratch != out, i, name, "scratch is the output");
	/* the loader refused kinds past OP_COUNT */
	const struct op_runtime *d = op_runtime[o->kind];
	if (!d->check)
		return g_raise(DTPC_ERR_FORMAT, "graph op %u: %s cannot run in a graph", i, name);
	return d->check(s, i, o);
}

dtpc_status exec_op(struct dtpc_session *s, uint32_t i)
{
	const struct g_op *o = &s->g->ops[i];
	const struct op_runtime *d = op_runtime[o->kind];
	/* exec_check refused an op without a run at session creation */
	if (!d->run)
		return g_raise(DTPC_ERR_FORMAT, "graph op %u cannot run", i);
	return d->run(s, o);
}
