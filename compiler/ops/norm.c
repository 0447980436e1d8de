/* norm.c — the shape rules of layer_norm and rms_norm; norm_stats (a
 * distributed norm's sums) exists only in graphs. */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"

static bool shape_norm(struct op_ctx *I, struct ir_op *o, const struct value *v,
		       struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	const char *xname = o->nin ? I->m->tensors[o->in[0]].name : "";
	if (!need_rank(I, o->in[0], o->in_loc[0], 1, IR_MAX_DIMS, "a norm's input"))
		return false;
	/* written so that NaN fails too: the runtime refuses it */
	if (!(v[1].f > 0)) {
		diag_error(I->d, v[1].loc, "eps must be positive");
		return false;
	}
	int64_t h = x->d[x->nd - 1];
	int64_t g = h;
	bool affine = o->kind == OP_layer_norm ? v[2].i : v[3].i;
	if (o->kind == OP_rms_norm && v[2].i != 0) {
		g = v[2].i;
		if (g < 1 || h % g) {
			diag_error(I->d, v[2].loc,
				   "rms_norm group dim %" PRId64 " does not divide the "
				   "last axis (%" PRId64 ") of '%s'", g, h, xname);
			return false;
		}
	}
	*out = *x;
	o->eps = v[1].f;
	o->attr[0] = g;
	o->flag = affine;
	if (affine) {
		ir_add_weight(I, opi, "weight", shape1(g));
		if (o->kind == OP_layer_norm)
			ir_add_weight(I, opi, "bias", shape1(g));
	}
	return true;
}
/* lower.c, a whole norm (a distributed one is lower.c's own) */
static void lower_layer_norm(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	g->eps = o->eps;
	g->flags |= o->flag ? G_OF_AFFINE : 0;
}

static void lower_rms_norm(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	g->eps = o->eps;
	g->attr[0] = o->attr[0];
	g->flags |= o->flag ? G_OF_AFFINE : 0;
}


const struct op_compile op_compile_layer_norm = { .shape = shape_norm,
						    .lower = lower_layer_norm };
const struct op_compile op_compile_rms_norm = { .shape = shape_norm, .lower = lower_rms_norm };
/* graph-only: lower.c makes it for a norm over a split last axis */
const struct op_compile op_compile_norm_stats = { 0 };
