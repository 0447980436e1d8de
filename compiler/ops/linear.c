/* linear.c — linear's shape rule; linear_act, its fusion with an
 * activation, exists only in graphs (compiler/fuse.c). */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"
#include "compiler/op_layout.h"

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
	o->linear.out = v[1].i;
	o->linear.in = in;
	o->flag = v[2].i;
	ir_add_weight(I, opi, "weight", (struct ir_shape){ 2, { v[1].i, in } });
	if (o->flag)
		ir_add_weight(I, opi, "bias", shape1(v[1].i));
	return true;
}
static void rule_linear(struct opctx *X)
{
	struct lp *P = X->P;
	int last = last_dim(X, 0);
	/* every group but tp: the contracted last axis whole, the rest kept */
	for (int g = 0; g < LG_COUNT; g++) {
		if (g == LG_TP)
			continue;
		need_whole(X, 0, last, g, "linear contracts its last axis");
		X->out.g[g] = X->in[0].g[g];
	}
	X->out.g[LG_TP] = REPL;
	if (P->c->tp <= 1)
		return;
	const struct style_use *col = mstyle(X, ST_COLWISE);
	const struct style_use *row = mstyle(X, ST_ROWWISE);
	struct lay_axis *x = &X->in[0].g[LG_TP];
	if (row) {
		/* The local input must be exactly this rank's rows of each block. */
		if (sharded(x) && x->dim == last) {
			int na, nb;
			int64_t size = dim_size(X, 0, last);
			const int64_t *ba = lay_blocks_of(P, x, size, &na);
			struct lay_axis want = { .nblk = row->nblocks, .blk = row->blocks };
			const int64_t *bb = lay_blocks_of(P, &want, size, &nb);
			bool same = na == nb;
			for (int i = 0; same && i < na; i++)
				same = ba[i] == bb[i];
			if (!same)
				need_whole(X, 0, last, LG_TP,
					   "its input is sharded in other blocks than this "
					   "rowwise weight (use rowwise(blocks = [...]))");
		} else if (sharded(x)) {
			need_whole(X, 0, x->dim, LG_TP, "rowwise needs its input "
				   "sharded on the last axis or replicated");
		}
		if (!sharded(x)) /* a replicated input is sliced locally */
			*x = (struct lay_axis){ .kind = LAY_SHARD, .dim = (int8_t)last,
						.nblk = row->nblocks, .blk = row->blocks,
						.origin = row->rule };
		/* partial sums, all-reduced by the style: replicated; under
		 * sequence_parallel reduce-scattered along the sequence */
		if (P->c->seq_parallel && last >= 2)
			X->out.g[LG_TP] = (struct lay_axis){ .kind = LAY_SHARD, .dim = 1,
							     .origin = row->rule };
		return;
	}
	if (sharded(x))
		need_whole(X, 0, x->dim, LG_TP, col ? "colwise needs a replicated input"
						    : "a replicated linear needs its whole input");
	if (col)
		X->out.g[LG_TP] = (struct lay_axis){ .kind = LAY_SHARD, .dim = (int8_t)last,
						     .nblk = col->nblocks, .blk = col->blocks,
					       .origin = col->rule };
}

const struct op_compile op_compile_linear = { .shape = shape_linear, .layout = rule_linear };
/* graph-only: made after the lowering (compiler/fuse.c) */
const struct op_compile op_compile_linear_act = { 0 };
