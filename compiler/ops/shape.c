/* shape.c — the shape rules of slice, concat, reshape, param (a shape
 * list, as reshape's) and pad. */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"
#include "compiler/op_layout.h"

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
	o->slice.dim = d;
	o->slice.start = v[2].i;
	o->slice.length = v[3].i;
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
	o->concat.dim = d;
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
	o->pad.dim = d;
	o->pad.before = v[2].i;
	o->pad.after = v[3].i;
	o->eps = v[4].f;
	return true;
}
static void lower_slice(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	ga_slice_set(g, (struct ga_slice){ .dim = o->slice.dim, .start = o->slice.start,
					   .length = o->slice.length });
}

static void lower_concat(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	ga_dim_set(g, (struct ga_dim){ .dim = o->concat.dim });
}

static void lower_pad(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	ga_pad_set(g, (struct ga_pad){ .dim = o->pad.dim, .before = o->pad.before,
				       .after = o->pad.after, .value = o->eps });
}

static void rule_slice(struct opctx *X)
{
	struct lp *P = X->P;
	int d = (int)X->o->slice.dim;
	int64_t start = X->o->slice.start, len = X->o->slice.length;
	X->out = X->in[0];
	for (int g = 0; g < LG_COUNT; g++) {
		struct lay_axis *x = &X->in[0].g[g];
		struct lay_axis *y = &X->out.g[g];
		if (!sharded(x) || x->dim != d)
			continue;
		/* Slicing whole blocks keeps each rank's chunk of them: the
		 * output holds the sliced blocks, the input stays as it is. */
		int nb;
		const int64_t *b = lay_blocks_of(P, x, dim_size(X, 0, d), &nb);
		int64_t off = 0;
		int first = -1, last = -1;
		for (int i = 0; i < nb; i++) {
			if (off == start)
				first = i;
			off += b[i];
			if (off == start + len)
				last = i;
		}
		if (first < 0 || last < first) {
			need_whole(X, 0, d, g, arena_printf(P->a, "the slice [%" PRId64 ", %" PRId64
							    ") cuts across its shards",
							    start, start + len));
			*y = *x;
			continue;
		}
		y->nblk = last - first + 1 == 1 ? 0 : last - first + 1;
		y->blk = y->nblk ? b + first : NULL;
	}
}

static void rule_concat(struct opctx *X)
{
	struct lp *P = X->P;
	int d = (int)X->o->concat.dim;
	for (int g = 0; g < LG_COUNT; g++) {
		int64_t n = lay_group_size(P->c, g);
		bool any_d = false;
		for (int i = 0; i < X->o->nin; i++) {
			struct lay_axis *x = &X->in[i].g[g];
			any_d |= sharded(x) && x->dim == d;
		}
		struct lay_axis out = REPL;
		if (any_d) {
			/* Concat along the sharded dim: the result is block-sharded,
			 * one block per input (replicated inputs sliced locally when
			 * they divide, gathered otherwise). */
			int total = 0;
			for (int i = 0; i < X->o->nin; i++) {
				struct lay_axis *x = &X->in[i].g[g];
				if (sharded(x) && x->dim != d)
					need_whole(X, i, x->dim, g, "the other inputs are sharded along the concat dim");
				int nb;
				lay_blocks_of(P, x, dim_size(X, i, d), &nb);
				total += nb;
			}
			bool ok = true;
			for (int i = 0; i < X->o->nin; i++) {
				struct lay_axis *x = &X->in[i].g[g];
				if (!sharded(x) && dim_size(X, i, d) % n &&
				    !(g == LG_CP && (P->c->ulysses_anything || P->c->ring_anything)))
					ok = false;
			}
			if (!ok) {
				for (int i = 0; i < X->o->nin; i++)
					need_whole(X, i, d, g, "another input of the concat "
						   "cannot be sharded evenly");
			} else {
				int64_t *blk = ARENA_ARRAY(P->a, int64_t, total);
				int k = 0;
				out = (struct lay_axis){ .kind = LAY_SHARD, .dim = (int8_t)d,
							 .origin = -1 };
				for (int i = 0; i < X->o->nin; i++) {
					struct lay_axis *x = &X->in[i].g[g];
					int nb;
					const int64_t *b = lay_blocks_of(P, x, dim_size(X, i, d), &nb);
					for (int j = 0; j < nb; j++)
						blk[k++] = b[j];
					if (out.origin < 0)
						out.origin = x->origin;
					if (!sharded(x)) /* sliced locally */
						*x = (struct lay_axis){ .kind = LAY_SHARD, .dim = (int8_t)d,
									.origin = -1 };
				}
				out.nblk = total;
				out.blk = blk;
			}
		} else {
			/* Sharded on another dim: all inputs must agree. */
			for (int i = 0; i < X->o->nin; i++) {
				struct lay_axis *x = &X->in[i].g[g];
				if (!sharded(x))
					continue;
				if (!sharded(&out))
					out = *x;
				else if (out.dim != x->dim || !same_blocks(&out, x))
					need_whole(X, i, x->dim, g, "the inputs are sharded differently");
			}
			/* Replicated inputs have the same size along out.dim (not
			 * the concat dim): sliced locally to match. */
			for (int i = 0; sharded(&out) && i < X->o->nin; i++) {
				struct lay_axis *x = &X->in[i].g[g];
				if (!sharded(x))
					*x = out;
			}
		}
		X->out.g[g] = out;
	}
}

/* pad(x, dim, before, after): along a split dim the result is block-split
 * like concat(before-block, x, after-block), the constant blocks made locally
 * on each rank in its chunk's size (Flux's and QwenImage's joint [text, image]
 * sequence: a text mask padded with the image's ones lines up with the
 * joint keys). Pads that would split unevenly outside the anything modes
 * need x whole. Along another dim the split is kept. */
static void rule_pad(struct opctx *X)
{
	struct lp *P = X->P;
	int d = (int)X->o->pad.dim;
	int64_t pads[2] = { X->o->pad.before, X->o->pad.after };
	X->out = X->in[0];
	for (int g = 0; g < LG_COUNT; g++) {
		struct lay_axis *x = &X->in[0].g[g];
		struct lay_axis *y = &X->out.g[g];
		int64_t n = lay_group_size(P->c, g);
		if (!sharded(x) || x->dim != d)
			continue;
		bool anything = g == LG_CP && (P->c->ulysses_anything || P->c->ring_anything);
		if (!anything && (pads[0] % n || pads[1] % n)) {
			need_whole(X, 0, d, g, arena_printf(P->a, "its pads (%" PRId64 " before, %"
							    PRId64 " after) do not split evenly "
							    "over %" PRId64 " ranks", pads[0],
							    pads[1], n));
			*y = REPL;
			continue;
		}
		int nb;
		const int64_t *b = lay_blocks_of(P, x, dim_size(X, 0, d), &nb);
		int64_t *blk = ARENA_ARRAY(P->a, int64_t, nb + 2);
		int k = 0;
		if (pads[0])
			blk[k++] = pads[0];
		for (int i = 0; i < nb; i++)
			blk[k++] = b[i];
		if (pads[1])
			blk[k++] = pads[1];
		y->nblk = k == 1 ? 0 : k;
		y->blk = k == 1 ? NULL : blk;
	}
}

/* The dim of out that holds in's dim d whole, with the same elements before
 * it (what a reshape that adds or drops unit dims, or merges or splits dims
 * on either side of d, keeps in place: diffusers' rope tables [1, S, 1, D]
 * and dtpc's [S, D]); -1 when there is none. */
static int reshape_dim(const struct ir_shape *in, const struct ir_shape *out, int d)
{
	int64_t before = 1, o = 1;
	for (int k = 0; k < d; k++)
		before *= in->d[k];
	for (int k = 0; k < out->nd; k++) {
		if (o == before && out->d[k] == in->d[d])
			return k;
		o *= out->d[k];
		if (o > before)
			break;
	}
	return -1;
}

static void rule_reshape(struct opctx *X)
{
	const struct ir_shape *in = &X->P->m->tensors[X->o->in[0]].shape;
	const struct ir_shape *out = &X->o->shape_attr;
	int to[LG_COUNT];
	for (int g = 0; g < LG_COUNT; g++) {
		struct lay_axis *x = &X->in[0].g[g];
		to[g] = -1;
		if (!sharded(x))
			continue;
		/* Sharding survives a reshape that keeps the sharded dim whole
		 * with the same elements before it: each rank's local elements
		 * stay the same contiguous run. */
		to[g] = x->nblk ? -1 : reshape_dim(in, out, x->dim);
		if (to[g] < 0)
			need_whole(X, 0, x->dim, g, "the reshape moves its sharded dim");
	}
	X->out = X->in[0];
	for (int g = 0; g < LG_COUNT; g++)
		if (to[g] >= 0)
			X->out.g[g].dim = (int8_t)to[g];
}

const struct op_compile op_compile_slice = { .shape = shape_slice, .layout = rule_slice,
					     .lower = lower_slice };
const struct op_compile op_compile_concat = { .shape = shape_concat, .layout = rule_concat,
					      .lower = lower_concat };
const struct op_compile op_compile_param = { .shape = shape_listed };
const struct op_compile op_compile_reshape = { .shape = shape_listed, .layout = rule_reshape };
const struct op_compile op_compile_pad = { .shape = shape_pad, .layout = rule_pad,
					   .lower = lower_pad };
