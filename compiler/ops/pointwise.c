/* pointwise.c — the shape rules of gelu, silu, add, mul and modulate. */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"

static bool shape_gelu(struct op_ctx *I, struct ir_op *o, const struct value *v,
		       struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	if (strcmp(v[1].s, "none") && strcmp(v[1].s, "tanh")) {
		diag_error(I->d, v[1].loc,
			   "approximate must be \"none\" or \"tanh\", not \"%s\"",
			   v[1].s);
		return false;
	}
	o->flag = !strcmp(v[1].s, "tanh");
	*out = *x;
	return true;
}

static bool shape_silu(struct op_ctx *I, struct ir_op *o, const struct value *v,
		       struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	*out = *x;
	return true;
}

static bool shape_broadcast(struct op_ctx *I, struct ir_op *o, const struct value *v,
			    struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	const char *xname = o->nin ? I->m->tensors[o->in[0]].name : "";
	*out = *x;
	for (int i = 1; i < o->nin; i++) {
		struct ir_shape r;
		const struct ir_shape *y = in_shape(I, o->in[i]);
		bool ok = broadcast(I, out, y, &r);
		if (ok && o->kind == OP_modulate && r.nd == out->nd)
			for (int k = 0; k < r.nd; k++)
				ok &= r.d[k] == out->d[k];
		if (!ok || (o->kind == OP_modulate && r.nd != out->nd)) {
			diag_error(I->d, o->in_loc[i],
				   "%s() cannot broadcast '%s' %s with '%s' %s",
				   op_table[o->kind].name,
				   I->m->tensors[o->in[i]].name, shape_str(I->a, y),
				   xname, shape_str(I->a, x));
			diag_hint(I->d, "shapes broadcast as in PyTorch, aligned from the "
				  "right; reshape a per-batch [B, H] to [B, 1, H] to "
				  "apply it over a sequence");
			return false;
		}
		if (o->kind != OP_modulate)
			*out = r;
	}
	return true;
}
static void lower_gelu(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	g->flags |= o->flag ? G_OF_TANH : 0;
}


const struct op_compile op_compile_gelu = { .shape = shape_gelu, .lower = lower_gelu };
const struct op_compile op_compile_silu = { .shape = shape_silu };
const struct op_compile op_compile_add = { .shape = shape_broadcast };
const struct op_compile op_compile_mul = { .shape = shape_broadcast };
const struct op_compile op_compile_modulate = { .shape = shape_broadcast };
