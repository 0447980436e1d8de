/* shape.c — the shape rules of slice, concat, reshape, param (a shape
 * list, as reshape's) and pad. */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"

static bool shape_slice(struct op_ctx *I, struct ir_op *o, const struct value *v,
			struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	const char *xname = o->nin ? I->m->tensors[o->in[0]].name : "";
	int d;
	if (!norm_dim(I, &v[1], x->nd, &d) || !positive(I, &v[3], "slice length"))
		return false;
	if (v[2].i < 0 || v[2].i > x->d[d] - v[3].i) {
		int64_t end;
		const char *ends = __builtin_add_overflow(v[2].i, v[3].i, &end)
			? arena_printf(I->a, "%" PRId64 " + %" PRId64, v[2].i, v[3].i)
			: arena_printf(I->a, "%" PRId64, end);
		diag_error(I->d, v[2].loc,
			   "slice [%" PRId64 ", %s) is out of bounds: dim %d "
			   "of '%s' has size %" PRId64, v[2].i, ends, d, xname, x->d[d]);
		return false;
	}
	*out = *x;
	out->d[d] = v[3].i;
	o->attr[0] = d;
	o->attr[1] = v[2].i;
	o->attr[2] = v[3].i;
	return true;
}

static bool shape_concat(struct op_ctx *I, struct ir_op *o, const struct value *v,
			 struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	const char *xname = o->nin ? I->m->tensors[o->in[0]].name : "";
	int d;
	if (!norm_dim(I, &v[1], x->nd, &d))
		return false;
	if (o->nin > UINT16_MAX) { /* a graph op's operand count is 16-bit */
		diag_error(I->d, o->loc, "concat of %d tensors: at most %d", o->nin,
			   UINT16_MAX);
		return false;
	}
	*out = *x;
	for (int i = 1; i < o->nin; i++) {
		const struct ir_shape *y = in_shape(I, o->in[i]);
		bool ok = y->nd == x->nd;
		for (int k = 0; ok && k < x->nd; k++)
			ok = k == d || y->d[k] == x->d[k];
		if (!ok) {
			diag_error(I->d, o->in_loc[i],
				   "concat along dim %d: '%s' %s does not match '%s' %s",
				   d, I->m->tensors[o->in[i]].name,
				   shape_str(I->a, y), xname, shape_str(I->a, x));
			diag_hint(I->d, "all dims but the concat dim must be equal");
			return false;
		}
		if (__builtin_add_overflow(out->d[d], y->d[d], &out->d[d])) {
			diag_error(I->d, o->loc, "concat along dim %d: the size overflows", d);
			return false;
		}
	}
	o->attr[0] = d;
	return true;
}

static bool shape_listed(struct op_ctx *I, struct ir_op *o, const struct value *v,
			 struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	const char *xname = o->nin ? I->m->tensors[o->in[0]].name : "";
	const struct value *sv = o->kind == OP_param ? &v[0] : &v[1];
	if (sv->n < 1 || sv->n > IR_MAX_DIMS) {
		diag_error(I->d, sv->loc, "a shape has 1 to %d dims", IR_MAX_DIMS);
		return false;
	}
	out->nd = sv->n;
	for (int i = 0; i < sv->n; i++) {
		if (!positive(I, &sv->items[i], "a shape dim"))
			return false;
		out->d[i] = sv->items[i].i;
	}
	if (shape_numel(out) < 0) {
		diag_error(I->d, sv->loc, "shape is too large");
		return false;
	}
	if (o->kind == OP_reshape && shape_numel(out) != shape_numel(x)) {
		diag_error(I->d, sv->loc,
			   "reshape to %s (%" PRId64 " elements) from '%s' %s "
			   "(%" PRId64 " elements)", shape_str(I->a, out),
			   shape_numel(out), xname, shape_str(I->a, x), shape_numel(x));
		return false;
	}
	o->shape_attr = *out;
	if (o->kind == OP_param)
		ir_add_weight(I, opi, NULL, *out);
	return true;
}

static bool shape_pad(struct op_ctx *I, struct ir_op *o, const struct value *v,
		      struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	int d;
	if (!norm_dim(I, &v[1], x->nd, &d))
		return false;
	for (int k = 2; k <= 3; k++)
		if (v[k].i < 0) {
			diag_error(I->d, v[k].loc, "pad's %s must be at least 0, not %" PRId64,
				   k == 2 ? "before" : "after", v[k].i);
			return false;
		}
	*out = *x;
	if (__builtin_add_overflow(out->d[d], v[2].i, &out->d[d]) ||
	    __builtin_add_overflow(out->d[d], v[3].i, &out->d[d])) {
		diag_error(I->d, o->loc, "pad along dim %d: the size overflows", d);
		return false;
	}
	o->attr[0] = d;
	o->attr[1] = v[2].i;
	o->attr[2] = v[3].i;
	o->eps = v[4].f;
	return true;
}
static void lower_slice(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	g->attr[0] = o->attr[0];
	g->attr[1] = o->attr[1];
	g->attr[2] = o->attr[2];
}

static void lower_concat(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	g->attr[0] = o->attr[0];
}

static void lower_pad(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	g->attr[0] = o->attr[0];
	g->attr[1] = o->attr[1];
	g->attr[2] = o->attr[2];
	g->eps = o->eps;
}


const struct op_compile op_compile_slice = { .shape = shape_slice, .lower = lower_slice };
const struct op_compile op_compile_concat = { .shape = shape_concat, .lower = lower_concat };
const struct op_compile op_compile_param = { .shape = shape_listed };
const struct op_compile op_compile_reshape = { .shape = shape_listed };
const struct op_compile op_compile_pad = { .shape = shape_pad, .lower = lower_pad };
