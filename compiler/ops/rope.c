/* rope.c — the shape rules of rope, rope_freqs and ltx_rope_freqs. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"
#include "compiler/op_layout.h"
#include "graph/graph.h"

static bool shape_rope(struct op_ctx *I, struct ir_op *o, const struct value *v,
		       struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	const char *xname = o->nin ? I->m->tensors[o->in[0]].name : "";
	if (!need_rank(I, o->in[0], o->in_loc[0], 3, 3, "rope's input") ||
	    !heads_divide(I, x->d[2], &v[3], o->in_loc[0], xname))
		return false;
	bool half = !strcmp(v[4].s, "half");
	if (!half && strcmp(v[4].s, "interleaved")) {
		diag_error(I->d, v[4].loc, "convention must be \"interleaved\" or \"half\", "
			   "not \"%s\"", v[4].s);
		diag_hint(I->d, "\"interleaved\": pairs (2i, 2i + 1) over the whole head (Flux, "
			  "Wan); \"half\": rotate_half over the tables' leading columns of "
			  "each head, the rest passed through (MiniMax-H3)");
		return false;
	}
	int64_t hd = x->d[2] / v[3].i;
	if (!half && hd % 2) {
		diag_error(I->d, v[3].loc, "rope needs an even head dim, got %" PRId64, hd);
		return false;
	}
	/* "half": the tables' width R is the rotated channels (diffusers'
	 * rotary_dim = cos.shape[-1]): even, at most the head dim */
	int64_t r = half ? in_shape(I, o->in[1])->d[in_shape(I, o->in[1])->nd - 1] : hd;
	for (int i = 1; i <= 2; i++) {
		const struct ir_shape *c = in_shape(I, o->in[i]);
		bool ok = c->nd == 2 && c->d[0] == x->d[1] &&
			  (half ? c->d[1] == r && r >= 2 && r % 2 == 0 && r <= hd : c->d[1] == hd);
		if (!ok) {
			diag_error(I->d, o->in_loc[i],
				   half ? "rope's %s must be [%" PRId64 ", R] (sequence, rotated "
					  "channels: R even, 2 to the head dim %" PRId64 ", cos and "
					  "sin alike), but '%s' is %s"
					: "rope's %s must be [%" PRId64 ", %" PRId64 "] "
					  "(sequence, head dim), but '%s' is %s",
				   i == 1 ? "cos" : "sin", x->d[1], hd,
				   I->m->tensors[o->in[i]].name, shape_str(I->a, c));
			return false;
		}
	}
	*out = *x;
	o->heads = v[3].i;
	o->flag = half;
	return true;
}

static bool shape_rope_freqs(struct op_ctx *I, struct ir_op *o, const struct value *v,
			     struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	const char *xname = o->nin ? I->m->tensors[o->in[0]].name : "";
	if (!need_rank(I, o->in[0], o->in_loc[0], 2, 2, "rope_freqs' ids"))
		return false;
	const struct value *ax = &v[1];
	if (ax->n != x->d[1] || ax->n > G_NATTR) {
		diag_error(I->d, ax->loc, "axes_dim has %d entr%s but ids '%s' %s has %" PRId64
			   " axes%s", ax->n, ax->n == 1 ? "y" : "ies", xname,
			   shape_str(I->a, x), x->d[1],
			   ax->n > G_NATTR ? arena_printf(I->a, " (at most %d)", G_NATTR)
					      : "");
		diag_hint(I->d, "one rotary dimension per column of ids, as FluxPosEmbed's "
			  "axes_dim");
		return false;
	}
	int64_t width = 0;
	for (int i = 0; i < ax->n; i++) {
		int64_t d = ax->items[i].i;
		if (d < 2 || d % 2) {
			diag_error(I->d, ax->items[i].loc.file >= 0 ? ax->items[i].loc : ax->loc,
				   "axes_dim[%d] = %" PRId64 ": a rotary dimension is even "
				   "and at least 2", i, d);
			return false;
		}
		if (__builtin_add_overflow(width, d, &width)) {
			diag_error(I->d, ax->loc, "axes_dim's sum overflows");
			return false;
		}
		o->shape_attr.d[i] = d;
	}
	o->shape_attr.nd = ax->n;
	if (!(v[2].f > 0) || v[2].f > 1e300) {
		diag_error(I->d, v[2].loc.file >= 0 ? v[2].loc : o->loc,
			   "theta must be positive and finite, not %g", v[2].f);
		return false;
	}
	if (strcmp(v[3].s, "cos") && strcmp(v[3].s, "sin")) {
		diag_error(I->d, v[3].loc, "part must be \"cos\" or \"sin\", not \"%s\"", v[3].s);
		return false;
	}
	if (strcmp(v[4].s, "f64") && strcmp(v[4].s, "f32")) {
		diag_error(I->d, v[4].loc, "precision must be \"f64\" or \"f32\", not \"%s\"",
			   v[4].s);
		diag_hint(I->d, "\"f64\": freqs and angles in float64 (Flux, Wan); \"f32\": "
			  "in float32 (QwenImage)");
		return false;
	}
	*out = (struct ir_shape){ 2, { x->d[0], width } };
	o->eps = v[2].f;
	o->flag = !strcmp(v[3].s, "sin");
	o->attr[0] = !strcmp(v[4].s, "f64");
	return true;
}

static bool shape_ltx_rope_freqs(struct op_ctx *I, struct ir_op *o, const struct value *v,
				 struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	const char *xname = o->nin ? I->m->tensors[o->in[0]].name : "";
	if (!need_rank(I, o->in[0], o->in_loc[0], 2, 2, "ltx_rope_freqs' ids"))
		return false;
	if (x->d[1] != 3) {
		diag_error(I->d, o->in_loc[0], "ltx_rope_freqs' ids must be [S, 3] (frame, row, "
			   "column), but '%s' is %s", xname, shape_str(I->a, x));
		diag_hint(I->d, "grid_ids(frames, height, width) gives them");
		return false;
	}
	if (v[1].i < 2 || v[1].i % 2) {
		diag_error(I->d, v[1].loc, "ltx_rope_freqs' dim must be even and at least 2 "
			   "(rotation pairs), not %" PRId64, v[1].i);
		return false;
	}
	for (int k = 2; k <= 4; k++)
		if (!isfinite(v[k].f)) {
			diag_error(I->d, v[k].loc.file >= 0 ? v[k].loc : o->loc,
				   "%s must be finite, not %g", op_sig(o->kind)->p[k].name, v[k].f);
			return false;
		}
	for (int k = 5; k <= 6; k++)
		if (!positive(I, &v[k], op_sig(o->kind)->p[k].name))
			return false;
	if (!(v[7].f > 0) || v[7].f == 1 || v[7].f > 1e300) {
		diag_error(I->d, v[7].loc.file >= 0 ? v[7].loc : o->loc,
			   "theta must be positive, finite and not 1 (the frequencies are "
			   "theta ** linspace(log_theta(1), log_theta(theta))), not %g", v[7].f);
		return false;
	}
	if (strcmp(v[8].s, "cos") && strcmp(v[8].s, "sin")) {
		diag_error(I->d, v[8].loc, "part must be \"cos\" or \"sin\", not \"%s\"", v[8].s);
		return false;
	}
	*out = (struct ir_shape){ 2, { x->d[0], v[1].i } };
	o->attr[0] = v[1].i;
	o->attr[1] = v[5].i;
	o->attr[2] = v[6].i;
	o->fattr[0] = v[2].f;
	o->fattr[1] = v[3].f;
	o->fattr[2] = v[4].f;
	o->eps = v[7].f;
	o->flag = !strcmp(v[8].s, "sin");
	return true;
}

static void lower_rope(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	/* the local head dim: the tables' width, whole or, for one head
	 * cut into even chunks, this rank's chunk (layout.c) */
	const struct g_tensor *cos = &X->tensors[X->in[1]];
	if (o->flag) { /* "half": the head dim (whole heads on every rank:
			* rope_tables), the tables' width R */
		ga_rope_set(g, (struct ga_rope){
			.head_dim = X->m->tensors[o->in[0]].shape.d[2] / o->heads, .half = true });
		return;
	}
	ga_rope_set(g, (struct ga_rope){
		.head_dim = cos->pattern[1] >= 0 ? X->pattern_max[cos->pattern[1]] : cos->dims[1] });
}

static void lower_rope_freqs(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	struct ga_rope_freqs a = { .theta = o->eps, .sin = o->flag, .f64 = o->attr[0] };
	for (int k = 0; k < o->shape_attr.nd; k++)
		a.axes_dim[k] = o->shape_attr.d[k];
	ga_rope_freqs_set(g, a);
}

/* The layout rope's cos/sin tables ([S, D]) must have on one axis group,
 * given x's ([B, S, heads * D]) there: rows follow a sequence split; a
 * feature split keeps the tables whole when every rank holds whole heads,
 * and slices their columns like x when there is one head cut into even
 * chunks (each rotation pair then stays on one rank). Any other feature
 * split cuts heads unevenly: x is gathered. */
static struct lay_axis rope_tables(struct opctx *X, enum lay_group g)
{
	struct lp *P = X->P;
	struct lay_axis *x = &X->in[0].g[g];
	int64_t n = lay_group_size(P->c, g);
	struct lay_axis want = REPL;
	if (!sharded(x) || x->dim == 0)
		return want;
	if (x->dim == 1) {
		want = *x;
		want.dim = 0;
		return want;
	}
	int64_t width = dim_size(X, 0, 2), hd = width / X->o->heads;
	int nb;
	const int64_t *b = lay_blocks_of(P, x, width, &nb);
	bool whole = true;
	for (int i = 0; i < nb; i++)
		whole &= b[i] % n == 0 && (b[i] / n) % hd == 0;
	if (whole)
		return want;
	if (!X->o->flag && !x->nblk && width == hd && hd % n == 0 && (hd / n) % 2 == 0) {
		want = *x;
		want.dim = 1;
		return want;
	}
	need_whole(X, 0, 2, g, "its shards would split rope's heads "
		   "into pieces that are not whole heads or even chunks of one head");
	return want;
}

static void lower_ltx_rope_freqs(const struct op_lowered *X, const struct ir_op *o,
				 struct g_op *g)
{
	ga_ltx_rope_freqs_set(g, (struct ga_ltx_rope_freqs){
		.dim = o->attr[0],
		.patch_t = o->attr[1],
		.patch = o->attr[2],
		.scale = { o->fattr[0], o->fattr[1], o->fattr[2] },
		.theta = o->eps,
		.sin = o->flag });
}

static void rule_rope(struct opctx *X)
{
	for (int g = 0; g < LG_COUNT; g++) {
		struct lay_axis want = rope_tables(X, g);
		for (int i = 1; i <= 2; i++) {
			struct lay_axis *t = &X->in[i].g[g];
			if (sharded(t) && !(sharded(&want) && t->dim == want.dim &&
					    same_blocks(t, &want)))
				need_whole(X, i, t->dim, g, "rope's tables must follow "
					   "the shards of its input");
			if (!sharded(t) && sharded(&want)) /* sliced locally */
				*t = want;
		}
	}
	X->out = X->in[0];
}

/* rope_freqs and ltx_rope_freqs: rows follow the ids' split */
static void rule_rope_freqs(struct opctx *X)
{
	for (int g = 0; g < LG_COUNT; g++)
		need_whole(X, 0, 1, g, "a RoPE table reads every axis of a position");
	X->out = X->in[0];
}

const struct op_compile op_compile_rope = { .shape = shape_rope, .layout = rule_rope,
					    .lower = lower_rope };
const struct op_compile op_compile_rope_freqs = { .shape = shape_rope_freqs,
						  .layout = rule_rope_freqs, .lower = lower_rope_freqs };
const struct op_compile op_compile_ltx_rope_freqs = { .shape = shape_ltx_rope_freqs,
						      .layout = rule_rope_freqs,
						      .lower = lower_ltx_rope_freqs };
