/* linear.c — linear's shape rule; linear_act, its fusion with an
 * activation, exists only in graphs (compiler/fuse.c). */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"

static bool shape_linear(struct op_ctx *I, struct ir_op *o, const struct value *v,
			 struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	if (!need_rank(I, o->in[0], o->in_loc[0], 1, IR_MAX_DIMS, "linear's input") ||
	    !positive(I, &v[1], "out features"))
		return false;
	*out = *x;
	int64_t in = x->d[x->nd - 1];
	out->d[x->nd - 1] = v[1].i;
	o->attr[0] = v[1].i;
	o->attr[1] = in;
	o->flag = v[2].i;
	ir_add_weight(I, opi, "weight", (struct ir_shape){ 2, { v[1].i, in } });
	if (o->flag)
		ir_add_weight(I, opi, "bias", shape1(v[1].i));
	return true;
}

const struct op_compile op_compile_linear = { .shape = shape_linear };
/* graph-only: made after the lowering (compiler/fuse.c) */
const struct op_compile op_compile_linear_act = { 0 };
