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
	bool half = !strcmp(v[4].s, "half"), split = !strcmp(v[4].s, "split");
	if (!half && !split && strcmp(v[4].s, "interleaved")) {
		diag_error(I->d, v[4].loc, "convention must be \"interleaved\", \"half\" or "
			   "\"split\", not \"%s\"", v[4].s);
		diag_hint(I->d, "\"interleaved\": pairs (2i, 2i + 1) over the whole head (Flux, "
			  "Wan); \"half\": rotate_half over the tables' leading columns of "
			  "each head, the rest passed through (MiniMax-H3); \"split\": "
			  "rotate_half over each head with its own tables (LTX-2's rope_type "
			  "\"split\")");
		return false;
	}
	int64_t hd = x->d[2] / v[3].i;
	if (!half && hd % 2) {
		diag_error(I->d, v[3].loc, "rope needs an even head dim, got %" PRId64, hd);
		return false;
	}
	/* "half": the tables' width R is the rotated channels (diffusers'
	 * rotary_dim = cos.shape[-1]): even, at most the head dim; "split":
	 * each head's half-width of frequencies, head after head */
	int64_t r = half ? in_shape(I, o->in[1])->d[in_shape(I, o->in[1])->nd - 1]
		    : split ? x->d[2] / 2 : hd;
	for (int i = 1; i <= 2; i++) {
		const struct ir_shape *c = in_shape(I, o->in[i]);
		bool ok = c->nd == 2 && c->d[0] == x->d[1] &&
			  (half ? c->d[1] == r && r >= 2 && r % 2 == 0 && r <= hd : c->d[1] == r);
		if (!ok) {
			const char *name = I->m->tensors[o->in[i]].name, *part = i == 1 ? "cos" : "sin";
			if (half)
				diag_error(I->d, o->in_loc[i], "rope's %s must be [%" PRId64 ", R] "
					   "(sequence, rotated channels: R even, 2 to the head dim %"
					   PRId64 ", cos and sin alike), but '%s' is %s", part,
					   x->d[1], hd, name, shape_str(I->a, c));
			else if (split)
				diag_error(I->d, o->in_loc[i], "rope's %s must be [%" PRId64 ", %"
					   PRId64 "] (sequence, heads %" PRId64 " x head dim %" PRId64
					   " / 2: each head's own frequencies), but '%s' is %s", part,
					   x->d[1], r, v[3].i, hd, name, shape_str(I->a, c));
			else
				diag_error(I->d, o->in_loc[i], "rope's %s must be [%" PRId64 ", %"
					   PRId64 "] (sequence, head dim), but '%s' is %s", part,
					   x->d[1], hd, name, shape_str(I->a, c));
			return false;
		}
	}
	*out = *x;
	o->heads = v[3].i;
	o->flag = half;
	o->rope.split = split;
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
	o->rope_freqs.f64 = !strcmp(v[4].s, "f64");
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
	o->ltx_rope_freqs.dim = v[1].i;
	o->ltx_rope_freqs.patch_t = v[5].i;
	o->ltx_rope_freqs.patch = v[6].i;
	o->ltx_rope_freqs.scale[0] = v[2].f;
	o->ltx_rope_freqs.scale[1] = v[3].f;
	o->ltx_rope_freqs.scale[2] = v[4].f;
	o->eps = v[7].f;
	o->flag = !strcmp(v[8].s, "sin");
	return true;
}

static void lower_rope(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	/* the local head dim: the tables' width, whole or, for one head
	 * cut into even chunks, this rank's chunk (layout.c) */
	const struct g_tensor *cos = &X->tensors[X->in[1]];
	if (o->flag || o->rope.split) { /* the head dim: whole heads on every
					 * rank (rope_tables) */
		ga_rope_set(g, (struct ga_rope){
			.head_dim = X->m->tensors[o->in[0]].shape.d[2] / o->heads,
			.half = o->flag, .split = o->rope.split });
		return;
	}
	ga_rope_set(g, (struct ga_rope){
		.head_dim = cos->pattern[1] >= 0 ? X->pattern_max[cos->pattern[1]] : cos->dims[1] });
}

static void lower_rope_freqs(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	struct ga_rope_freqs a = { .theta = o->eps, .sin = o->flag, .f64 = o->rope_freqs.f64 };
	for (int k = 0; k < o->shape_attr.nd; k++)
		a.axes_dim[k] = o->shape_attr.d[k];
	ga_rope_freqs_set(g, a);
}

/* The layout rope's cos/sin tables ([S, D]) must have on one axis group,
 * given x's ([B, S, heads * D]) there: rows follow a sequence split; a
 * feature split keeps the tables whole when every rank holds whole heads,
 * and slices their columns like x when there is one head cut into even
 * chunks (each rotation pair then stays on one rank). The "split"
 * convention's tables ([S, heads * D / 2]) are per head: whole heads slice
 * their columns at half x's offsets. Any other feature split cuts heads
 * unevenly: x is gathered. */
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
	if (whole && X->o->rope.split) {
		want = *x;
		want.dim = 1;
		if (x->nblk) {
			int64_t *half = ARENA_ARRAY(P->a, int64_t, nb);
			for (int i = 0; i < nb; i++)
				half[i] = b[i] / 2;
			want.blk = half;
		}
		return want;
	}
	if (whole)
		return want;
	if (!X->o->flag && !X->o->rope.split && !x->nblk && width == hd && hd % n == 0 &&
	    (hd / n) % 2 == 0) {
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
		.dim = o->ltx_rope_freqs.dim,
		.patch_t = o->ltx_rope_freqs.patch_t,
		.patch = o->ltx_rope_freqs.patch,
		.scale = { o->ltx_rope_freqs.scale[0], o->ltx_rope_freqs.scale[1],
			   o->ltx_rope_freqs.scale[2] },
		.theta = o->eps,
		.sin = o->flag });
}

/* ltx2_rope_freqs(dim, frames, height, width, axes, modality, patch_t,
 * patch, scale_t, scale_s, causal_offset, fps, hop_length, sampling_rate,
 * base_t, base_s, theta, precision, part): a generator, its rows the grid's
 * patches. The IR keeps the integers in shape_attr (frames, height, width,
 * patch_t, patch, scale_t, scale_s, causal_offset) and attr (dim, axes,
 * audio, f64), the numbers in fattr (time divisor, base_t, base_s,
 * hop_length) and eps (theta). */
static bool shape_ltx2_rope_freqs(struct op_ctx *I, struct ir_op *o, const struct value *v,
				  struct ir_shape *out, int opi)
{
	const struct sig *sg = op_sig(o->kind);
	bool audio = !strcmp(v[5].s, "audio");
	if (!audio && strcmp(v[5].s, "video")) {
		diag_error(I->d, v[5].loc, "modality must be \"video\" or \"audio\", not \"%s\"",
			   v[5].s);
		return false;
	}
	if (v[0].i < 2 || v[0].i % 2 || v[0].i > 0xffffffff) {
		diag_error(I->d, v[0].loc, "ltx2_rope_freqs' dim must be even and at least 2 "
			   "(rotation pairs), not %" PRId64, v[0].i);
		return false;
	}
	if (v[4].i != 3 && v[4].i != 1) {
		diag_error(I->d, v[4].loc, "axes must be 3 (frame, row, column) or 1 (the frame), "
			   "not %" PRId64, v[4].i);
		return false;
	}
	if (audio && v[4].i != 1) {
		diag_error(I->d, v[4].loc, "audio positions have one axis (the frame): axes = 1");
		return false;
	}
	static const int pos[] = { 1, 2, 3, 6, 7, 8, 9, 14, 15 };
	for (size_t k = 0; k < sizeof pos / sizeof *pos; k++)
		if (!positive(I, &v[pos[k]], sg->p[pos[k]].name))
			return false;
	static const int lim[] = { 1, 2, 3 };
	for (size_t k = 0; k < 3; k++)
		if (v[lim[k]].i >= (1 << 21)) {
			diag_error(I->d, v[lim[k]].loc, "%s %" PRId64 " is past 2^21",
				   sg->p[lim[k]].name, v[lim[k]].i);
			return false;
		}
	for (int k = 6; k <= 10; k++)
		if (v[k].i < 0 || v[k].i > 0xffff) {
			diag_error(I->d, v[k].loc, "%s must be 0 to 65535, not %" PRId64,
				   sg->p[k].name, v[k].i);
			return false;
		}
	static const int wide[] = { 12, 14, 15 }; /* hop_length, base_t, base_s */
	for (size_t k = 0; k < 3; k++)
		if (v[wide[k]].i < 1 || v[wide[k]].i > 0xffffffff) {
			diag_error(I->d, v[wide[k]].loc.file >= 0 ? v[wide[k]].loc : o->loc,
				   "%s must be 1 to 2^32 - 1, not %" PRId64, sg->p[wide[k]].name,
				   v[wide[k]].i);
			return false;
		}
	double div = audio ? v[13].f : v[11].f;
	if (!(div > 0) || !isfinite(div)) {
		diag_error(I->d, audio ? v[13].loc : v[11].loc, "%s must be positive and finite, "
			   "not %g", audio ? "sampling_rate" : "fps", div);
		return false;
	}
	if (!(v[16].f > 0) || v[16].f > 1e300) {
		diag_error(I->d, v[16].loc.file >= 0 ? v[16].loc : o->loc,
			   "theta must be positive and finite, not %g", v[16].f);
		return false;
	}
	if (strcmp(v[17].s, "f64") && strcmp(v[17].s, "f32")) {
		diag_error(I->d, v[17].loc, "precision must be \"f64\" or \"f32\", not \"%s\"",
			   v[17].s);
		return false;
	}
	if (strcmp(v[18].s, "cos") && strcmp(v[18].s, "sin")) {
		diag_error(I->d, v[18].loc, "part must be \"cos\" or \"sin\", not \"%s\"", v[18].s);
		return false;
	}
	bool split = !strcmp(v[19].s, "split");
	if (!split && strcmp(v[19].s, "interleaved")) {
		diag_error(I->d, v[19].loc, "rope_type must be \"interleaved\" or \"split\", "
			   "not \"%s\"", v[19].s);
		diag_hint(I->d, "\"interleaved\": each frequency twice, for rope's pairs; "
			  "\"split\": once, the table dim / 2 wide, for rope(..., convention = "
			  "\"split\")");
		return false;
	}
	int64_t rows = (v[1].i + v[6].i - 1) / v[6].i;
	if (!audio) {
		for (int k = 2; k <= 3; k++)
			if (v[k].i % v[7].i) {
				diag_error(I->d, v[k].loc, "the patch %" PRId64 " must divide %s %"
					   PRId64, v[7].i, sg->p[k].name, v[k].i);
				return false;
			}
		if (v[1].i % v[6].i) {
			diag_error(I->d, v[1].loc, "patch_t %" PRId64 " must divide frames %" PRId64,
				   v[6].i, v[1].i);
			return false;
		}
		rows = v[1].i / v[6].i * (v[2].i / v[7].i) * (v[3].i / v[7].i);
	}
	*out = (struct ir_shape){ 2, { rows, split ? v[0].i / 2 : v[0].i } };
	o->ltx2_rope_freqs.split = split;
	o->ltx2_rope_freqs.dim = v[0].i;
	o->ltx2_rope_freqs.axes = v[4].i;
	o->ltx2_rope_freqs.audio = audio;
	o->ltx2_rope_freqs.f64 = !strcmp(v[17].s, "f64");
	o->shape_attr = (struct ir_shape){ 8, { v[1].i, audio ? 1 : v[2].i, audio ? 1 : v[3].i,
					       v[6].i, v[7].i, v[8].i, v[9].i, v[10].i } };
	o->ltx2_rope_freqs.time_div = div;
	o->ltx2_rope_freqs.base_t = v[14].i;
	o->ltx2_rope_freqs.base_s = v[15].i;
	o->ltx2_rope_freqs.hop_length = v[12].i;
	o->eps = v[16].f;
	o->flag = !strcmp(v[18].s, "sin");
	return true;
}

static void lower_ltx2_rope_freqs(const struct op_lowered *X, const struct ir_op *o,
				  struct g_op *g)
{
	const int64_t *d = o->shape_attr.d;
	ga_ltx2_rope_freqs_set(g, (struct ga_ltx2_rope_freqs){
		.dim = o->ltx2_rope_freqs.dim, .axes = o->ltx2_rope_freqs.axes,
		.audio = o->ltx2_rope_freqs.audio, .f64 = o->ltx2_rope_freqs.f64,
		.frames = d[0], .height = d[1], .width = d[2], .patch_t = d[3], .patch = d[4],
		.scale_t = d[5], .scale_s = d[6], .causal_offset = d[7],
		.time_div = o->ltx2_rope_freqs.time_div, .base_t = o->ltx2_rope_freqs.base_t,
		.base_s = o->ltx2_rope_freqs.base_s, .hop_length = o->ltx2_rope_freqs.hop_length,
		.theta = o->eps, .sin = o->flag, .split = o->ltx2_rope_freqs.split });
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
const struct op_compile op_compile_ltx2_rope_freqs = { .shape = shape_ltx2_rope_freqs,
						       .lower = lower_ltx2_rope_freqs };
