/* index.c — the shape rules of index_select and index_copy: rows picked or
 * written by a runtime index (a tensor of integer values, float32 as every
 * input: diffusers' torch.index_select / Tensor.index_copy). */
#include <inttypes.h>
#include <stdint.h>

#include "compiler/op_compile.h"
#include "compiler/op_layout.h"

static bool index_vector(struct op_ctx *I, const struct ir_op *o, const char *op)
{
	const struct ir_shape *ix = in_shape(I, o->in[1]);
	if (ix->nd == 1)
		return true;
	diag_error(I->d, o->in_loc[1], "%s's index must be a vector [n], but '%s' is %s", op,
		   I->m->tensors[o->in[1]].name, shape_str(I->a, ix));
	diag_hint(I->d, "reshape it to [n] first");
	return false;
}

/* index_select(x, index, dim): x with dim's size the index's length */
static bool shape_index_select(struct op_ctx *I, struct ir_op *o, const struct value *v,
			       struct ir_shape *out, int opi)
{
	const struct ir_shape *x = in_shape(I, o->in[0]);
	int d;
	if (!norm_dim(I, &v[2], x->nd, &d) || !index_vector(I, o, "index_select"))
		return false;
	*out = *x;
	out->d[d] = in_shape(I, o->in[1])->d[0];
	o->index.dim = d;
	return true;
}

/* index_copy(x, index, src, dim): x's shape; src is x's but on dim, where
 * it has the index's length */
static bool shape_index_copy(struct op_ctx *I, struct ir_op *o, const struct value *v,
			     struct ir_shape *out, int opi)
{
	const struct ir_shape *x = in_shape(I, o->in[0]), *src = in_shape(I, o->in[2]);
	int d;
	if (!norm_dim(I, &v[3], x->nd, &d) || !index_vector(I, o, "index_copy"))
		return false;
	int64_t n = in_shape(I, o->in[1])->d[0];
	bool ok = src->nd == x->nd;
	for (int k = 0; ok && k < x->nd; k++)
		ok = src->d[k] == (k == d ? n : x->d[k]);
	if (!ok) {
		diag_error(I->d, o->in_loc[2], "index_copy along dim %d: src '%s' %s must be x "
			   "'%s' %s with the index's length %" PRId64 " on dim %d", d,
			   I->m->tensors[o->in[2]].name, shape_str(I->a, src),
			   I->m->tensors[o->in[0]].name, shape_str(I->a, x), n, d);
		return false;
	}
	*out = *x;
	o->index.dim = d;
	return true;
}

static void lower_index(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	ga_dim_set(g, (struct ga_dim){ .dim = o->index.dim });
}

/* index_select: the output is split on dim as the index is (each rank picks
 * its rows out of the whole x: diffusers' per-row AdaLN tables under
 * context parallelism), x whole there; without a split index, x's split
 * on another dim is kept and a split of dim itself gathered. */
static void rule_index_select(struct opctx *X)
{
	int d = (int)X->o->index.dim;
	X->out = X->in[0];
	for (int g = 0; g < LG_COUNT; g++) {
		struct lay_axis *x = &X->in[0].g[g], *ix = &X->in[1].g[g];
		if (sharded(ix)) {
			if (sharded(x))
				need_whole(X, 0, x->dim, g, "index_select's rows follow its "
					   "split index: each rank picks from the whole x");
			X->out.g[g] = *ix;
			X->out.g[g].dim = (int8_t)d;
			continue;
		}
		need_whole(X, 0, d, g, "index_select picks rows of the whole dim it indexes");
		X->out.g[g] = *x;
	}
}

/* index_copy: whole (the index addresses every row of x) */
static void rule_index_copy(struct opctx *X)
{
	for (int g = 0; g < LG_COUNT; g++) {
		for (int i = 0; i < X->o->nin; i++) {
			struct lay_axis *t = &X->in[i].g[g];
			if (sharded(t))
				need_whole(X, i, t->dim, g, "index_copy writes rows anywhere in "
					   "x: it runs whole");
		}
		X->out.g[g] = REPL;
	}
}

const struct op_compile op_compile_index_select = { .shape = shape_index_select,
						    .layout = rule_index_select,
						    .lower = lower_index };
const struct op_compile op_compile_index_copy = { .shape = shape_index_copy,
						  .layout = rule_index_copy, .lower = lower_index };
