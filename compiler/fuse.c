/* fuse.c — a linear and the activation that alone reads it, as one op.
 *
 * A `linear` whose output is read only by a `gelu` (either approximation)
 * or a `silu`, and is not a graph output, becomes a `linear_act` writing
 * the activation's output tensor; the activation op and the linear's
 * output tensor go. The fused op means exactly the pair: the linear's
 * result rounded to the storage dtype, then the activation
 * (graph/graph.h), so a graph computes the same bits with and without
 * the pass (tests/fuse.sh). A device runs the activation in the GEMM's
 * epilogue where it has one (dev_ops.linear_act), saving a write and a
 * read of the intermediate and its arena space.
 *
 * Only what the graph shows is fused: a rowwise linear's partial sums are
 * read by an all_reduce or reduce_scatter first, so it never is. The pair
 * must agree on dtype, dims and split (the activation writes what the
 * linear wrote; a layout change in between would be an op of its own).
 * `dtpc --no-fuse` leaves every pair as it is. */
#include "fuse.h"

#include <string.h>

#include "fold.h"
#include "graph/op_attrs.h"

/* The activation code of a gelu / silu op, or -1 for any other op. */
static int activation(const struct g_op *o)
{
	if (o->kind == OP_gelu)
		return ga_gelu_get(o).tanh ? G_ACT_GELU_TANH : G_ACT_GELU;
	return o->kind == OP_silu ? G_ACT_SILU : -1;
}

static bool same_place(const struct g_graph *g, uint32_t a, uint32_t b)
{
	const struct g_tensor *x = &g->tensors[a], *y = &g->tensors[b];
	if (x->ndim != y->ndim || graph_tensor_dtype(g, a) != graph_tensor_dtype(g, b))
		return false;
	for (int d = 0; d < x->ndim; d++)
		if (x->dims[d] != y->dims[d] || x->pattern[d] != y->pattern[d])
			return false;
	return true;
}

void fuse_linear_act(struct arena *a, struct g_graph *g, FILE *dump)
{
	int32_t *producer = ARENA_ARRAY(a, int32_t, g->ntensors);
	uint32_t *readers = ARENA_ARRAY(a, uint32_t, g->ntensors);
	bool *drop = ARENA_ARRAY(a, bool, g->nops), any = false;
	struct g_op *ops = (struct g_op *)g->ops; /* the lowering's arrays: writable */

	for (uint32_t t = 0; t < g->ntensors; t++)
		producer[t] = -1;
	for (uint32_t i = 0; i < g->nops; i++) {
		producer[ops[i].out] = (int32_t)i;
		for (uint32_t k = 0; k < ops[i].nin; k++)
			readers[g->operands[ops[i].in0 + k]]++;
	}
	for (uint32_t k = 0; k < g->noutputs; k++)
		readers[g->outputs[k]]++;
	for (uint32_t i = 0; i < g->nops; i++) {
		struct g_op *act = &ops[i];
		int code = activation(act);
		if (code < 0 || act->nin != 1)
			continue;
		uint32_t mid = g->operands[act->in0];
		int32_t p = producer[mid];
		if (p < 0 || ops[p].kind != OP_linear || readers[mid] != 1 ||
		    !same_place(g, mid, act->out))
			continue;
		if (dump)
			fprintf(dump, "fuse: linear '%s' + %s '%s' -> linear_act '%s'\n",
				graph_str(g, g->tensors[mid].name),
				code == G_ACT_SILU ? "silu" : code == G_ACT_GELU ? "gelu"
								   : "gelu(tanh)",
				graph_str(g, g->tensors[act->out].name),
				graph_str(g, g->tensors[act->out].name));
		struct ga_linear lin = ga_linear_get(&ops[p]);
		ops[p].kind = OP_linear_act;
		ga_linear_act_set(&ops[p], (struct ga_linear_act){ .bias = lin.bias, .act = code });
		/* the fused op writes the activation's output; the dropped
		 * activation takes the linear's tensor with it */
		ops[p].out = act->out;
		act->out = mid;
		drop[i] = any = true;
	}
	if (any)
		fold_drop_ops(a, g, drop);
}
