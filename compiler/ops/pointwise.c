/* pointwise.c — the shape rules of gelu, the unary ops (silu, tanh,
 * sigmoid), add, mul and modulate. */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"
#include "compiler/op_layout.h"

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

static bool shape_unary(struct op_ctx *I, struct ir_op *o, const struct value *v,
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
	ga_gelu_set(g, (struct ga_gelu){ .tanh = o->flag });
}

/* Maps output dim d of a broadcasting op to input i's dim, or -1 when input i
 * is broadcast along d. */
static int bdim(struct opctx *X, int i, int d)
{
	const struct ir_shape *o = &X->P->m->tensors[X->o->out].shape;
	const struct ir_shape *s = &X->P->m->tensors[X->o->in[i]].shape;
	/* right-aligned, as model.c broadcasts */
	int k = d - (o->nd - s->nd);
	if (k < 0 || (s->d[k] == 1 && o->d[d] != 1))
		return -1;
	return k;
}

static void rule_pointwise(struct opctx *X)
{
	struct lp *P = X->P;
	for (int g = 0; g < LG_COUNT; g++) {
		/* The output is sharded like the first sharded input; inputs
		 * sharded otherwise are gathered, replicated ones sliced. */
		struct lay_axis out = REPL;
		for (int i = 0; i < X->o->nin; i++) {
			struct lay_axis *x = &X->in[i].g[g];
			if (!sharded(x))
				continue;
			/* the output dim this input dim becomes */
			int od = -1;
			for (int d = 0; d < P->m->tensors[X->o->out].shape.nd; d++)
				if (bdim(X, i, d) == x->dim)
					od = d;
			if (od < 0) {
				need_whole(X, i, x->dim, g, "it is broadcast along its sharded dim");
				continue;
			}
			if (!sharded(&out)) {
				out = *x;
				out.dim = (int8_t)od;
			} else if (out.dim != od || !same_blocks(&out, x)) {
				need_whole(X, i, x->dim, g, "the other operand is sharded differently");
			}
		}
		/* Replicated operands with an extent along the sharded dim are
		 * sliced locally to match (no communication). */
		for (int i = 0; sharded(&out) && i < X->o->nin; i++) {
			struct lay_axis *x = &X->in[i].g[g];
			int k = bdim(X, i, out.dim);
			if (!sharded(x) && k >= 0) {
				*x = out;
				x->dim = (int8_t)k;
			}
		}
		X->out.g[g] = out;
	}
}

const struct op_compile op_compile_gelu = { .shape = shape_gelu, .layout = rule_pointwise,
					    .lower = lower_gelu };
const struct op_compile op_compile_silu = { .shape = shape_unary, .layout = rule_pointwise };
const struct op_compile op_compile_tanh = { .shape = shape_unary, .layout = rule_pointwise };
const struct op_compile op_compile_sigmoid = { .shape = shape_unary, .layout = rule_pointwise };
const struct op_compile op_compile_add = { .shape = shape_broadcast, .layout = rule_pointwise };
const struct op_compile op_compile_mul = { .shape = shape_broadcast, .layout = rule_pointwise };
const struct op_compile op_compile_modulate = { .shape = shape_broadcast,
						.layout = rule_pointwise };
