/* embed.c — the shape rules of timestep_embedding, grid_ids, text_ids,
 * patch_embed and unpatchify. */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"
#include "compiler/op_layout.h"

static bool shape_timestep_embedding(struct op_ctx *I, struct ir_op *o, const struct value *v,
				     struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	if (!need_rank(I, o->in[0], o->in_loc[0], 1, IR_MAX_DIMS - 1,
		       "timestep_embedding's input") ||
	    !positive(I, &v[1], "dim"))
		return false;
	/* diffusers divides by half_dim - downscale_freq_shift, and takes
	 * log(max_period): both must be finite (NaN fails too) */
	int64_t half = v[1].i / 2;
	if (half > 0 && !((double)half - v[3].f != 0)) {
		diag_error(I->d, v[3].loc.file >= 0 ? v[3].loc : o->loc,
			   "timestep_embedding with dim %" PRId64 " and downscale_freq_shift "
			   "%g divides by dim / 2 - downscale_freq_shift = 0", v[1].i, v[3].f);
		diag_hint(I->d, "diffusers divides by zero there too; Flux, Wan and "
			  "QwenImage take downscale_freq_shift = 0");
		return false;
	}
	if (!(v[5].f > 0)) {
		diag_error(I->d, v[5].loc.file >= 0 ? v[5].loc : o->loc,
			   "max_period must be positive, not %g", v[5].f);
		return false;
	}
	*out = *x;
	out->d[out->nd++] = v[1].i;
	o->flag = v[2].i;
	o->timestep_embedding.dim = v[1].i;
	o->timestep_embedding.downscale_freq_shift = v[3].f;
	o->timestep_embedding.scale = v[4].f;
	o->timestep_embedding.max_period = v[5].f;
	o->timestep_embedding.input_scale = v[6].f;
	o->timestep_embedding.input_scale_f32 = v[7].i;
	return true;
}

static bool shape_grid_ids(struct op_ctx *I, struct ir_op *o, const struct value *v,
			   struct ir_shape *out, int opi)
{
	const struct sig *s = op_sig(o->kind);
	int64_t n = 1;
	for (int k = 0; k < 3; k++) {
		if (!positive(I, &v[k], s->p[k].name))
			return false;
		if (v[k].i > POS_EXACT) {
			diag_error(I->d, v[k].loc, "%s %" PRId64 " is past 2^24: positions "
				   "would not be exact in float32", s->p[k].name, v[k].i);
			return false;
		}
		if (__builtin_mul_overflow(n, v[k].i, &n)) {
			diag_error(I->d, o->loc, "grid_ids: frames * height * width overflows");
			return false;
		}
	}
	o->grid_ids.frames = v[0].i;
	o->grid_ids.height = v[1].i;
	o->grid_ids.width = v[2].i;
	o->flag = v[3].i;
	*out = (struct ir_shape){ 2, { n, 3 } };
	return true;
}

static bool shape_text_ids(struct op_ctx *I, struct ir_op *o, const struct value *v,
			   struct ir_shape *out, int opi)
{
	const struct sig *s = op_sig(o->kind);
	if (!positive(I, &v[0], "length") || !positive(I, &v[2], "axes"))
		return false;
	for (int k = 3; k < 5; k++)
		if (v[k].i < 0) {
			diag_error(I->d, v[k].loc, "%s must be at least 0, not %" PRId64,
				   s->p[k].name, v[k].i);
			return false;
		}
	/* QwenImage's text follows its image: max_vid_index is the larger
	 * of the grid's height and width (halved, rounding down, with
	 * scale_rope's centred grid) */
	int64_t h = v[5].i ? v[3].i / 2 : v[3].i, w = v[5].i ? v[4].i / 2 : v[4].i;
	int64_t first = v[1].i, end;
	if (__builtin_add_overflow(first, h > w ? h : w, &first) ||
	    __builtin_add_overflow(first, v[0].i, &end) || first < -POS_EXACT ||
	    end > POS_EXACT) {
		diag_error(I->d, o->loc, "text_ids: positions past 2^24 would not be exact "
			   "in float32");
		return false;
	}
	o->text_ids.length = v[0].i;
	o->text_ids.first = first;
	o->text_ids.axes = v[2].i;
	*out = (struct ir_shape){ 2, { v[0].i, v[2].i } };
	return true;
}

static bool shape_patches(struct op_ctx *I, struct ir_op *o, const struct value *v,
			  struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	const char *xname = o->nin ? I->m->tensors[o->in[0]].name : "";
	bool embed = o->kind == OP_patch_embed;
	if (!need_rank(I, o->in[0], o->in_loc[0], embed ? 4 : 3, embed ? 5 : 3,
		       embed ? "patch_embed's input [B, C, H, W] or [B, C, F, H, W]"
			     : "unpatchify's input [B, tokens, features]"))
		return false;
	const struct value *pv = &v[embed ? 2 : 1];
	/* Conv2d (SD3's PatchEmbed) over [B, C, H, W] takes [h, w] and is
	 * the Conv3d of patch [1, h, w] over one frame: the axes of a 2-D
	 * patch start at the height */
	bool conv2d = embed && x->nd == 4;
	int np = conv2d ? 2 : 3, k0 = 3 - np;
	if (pv->n != np) {
		diag_error(I->d, pv->loc, "patch must be a list of %s, not %s",
			   conv2d ? "2 sizes [h, w] for the [B, C, H, W] input of a Conv2d"
			   : embed ? "3 sizes [t, h, w] for the [B, C, F, H, W] input of a Conv3d"
				   : "3 sizes [t, h, w]", value_str(I->a, pv));
		return false;
	}
	int64_t grid[3] = { 1, 1, 1 }, vol = 1;
	o->shape_attr.d[0] = 1;
	for (int k = 0; k < np; k++) {
		if (!positive(I, &pv->items[k], "a patch size"))
			return false;
		o->shape_attr.d[k0 + k] = pv->items[k].i;
		/* patch sizes divide sizes below 2^48: no overflow */
		if (__builtin_mul_overflow(vol, pv->items[k].i, &vol)) {
			diag_error(I->d, pv->loc, "patch is too large");
			return false;
		}
	}
	o->shape_attr.nd = 3;
	static const char *const axis[3] = { "frames", "height", "width" };
	for (int k = 0; k < np; k++) {
		int a = k0 + k;
		int64_t size = embed ? x->d[x->nd - np + k] : v[2 + k].i;
		if (!embed && !positive(I, &v[2 + k], axis[a]))
			return false;
		if (size % pv->items[k].i) {
			diag_error(I->d, pv->items[k].loc.file >= 0 ? pv->items[k].loc : pv->loc,
				   "patch size %" PRId64 " does not divide the %s (%" PRId64 ")%s%s",
				   pv->items[k].i, axis[a], size, embed ? " of " : "",
				   embed ? arena_printf(I->a, "'%s' %s", xname, shape_str(I->a, x))
					 : "");
			return false;
		}
		grid[a] = size / pv->items[k].i;
	}
	/* unpatchify's sizes are the plan's numbers: multiply with care */
	int64_t tokens;
	if (__builtin_mul_overflow(grid[0], grid[1], &tokens) ||
	    __builtin_mul_overflow(tokens, grid[2], &tokens)) {
		diag_error(I->d, o->loc, "%s: the grid of patches is too large",
			   op_table[o->kind].name);
		return false;
	}
	if (embed) {
		if (!positive(I, &v[1], "out channels"))
			return false;
		*out = (struct ir_shape){ 3, { x->d[0], tokens, v[1].i } };
		o->flag = v[3].i;
		/* the weight as the checkpoint stores it: Conv2d's [out, C, h, w],
		 * Conv3d's [out, C, t, h, w] */
		struct ir_shape w = { 2 + np, { v[1].i, x->d[1] } };
		for (int k = 0; k < np; k++)
			w.d[2 + k] = pv->items[k].i;
		ir_add_weight(I, opi, "weight", w);
		if (o->flag)
			ir_add_weight(I, opi, "bias", shape1(v[1].i));
		return true;
	}
	if (x->d[1] != tokens || x->d[2] % vol) {
		diag_error(I->d, o->in_loc[0], "unpatchify of '%s' %s: a %" PRId64 " x %" PRId64
			   " x %" PRId64 " grid of patch %s needs [B, %" PRId64 ", C * %" PRId64 "]",
			   xname, shape_str(I->a, x), v[2].i, v[3].i, v[4].i,
			   value_str(I->a, pv), tokens, vol);
		return false;
	}
	*out = (struct ir_shape){ 5, { x->d[0], x->d[2] / vol, v[2].i, v[3].i, v[4].i } };
	return true;
}
static void lower_timestep_embedding(const struct op_lowered *X, const struct ir_op *o,
				     struct g_op *g)
{
	ga_timestep_embedding_set(g, (struct ga_timestep_embedding){
		.dim = o->timestep_embedding.dim,
		.downscale_freq_shift = o->timestep_embedding.downscale_freq_shift,
		.scale = o->timestep_embedding.scale,
		.max_period = o->timestep_embedding.max_period,
		.input_scale = o->timestep_embedding.input_scale,
		.flip = o->flag,
		.input_scale_f32 = o->timestep_embedding.input_scale_f32 });
}

static void lower_ids(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	if (o->kind == OP_grid_ids)
		ga_grid_ids_set(g, (struct ga_grid_ids){ .frames = o->grid_ids.frames,
							 .height = o->grid_ids.height,
							 .width = o->grid_ids.width, .center = o->flag });
	else
		ga_text_ids_set(g, (struct ga_text_ids){ .length = o->text_ids.length,
							 .first = o->text_ids.first,
							 .axes = o->text_ids.axes });
}

static void lower_unpatchify(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	ga_patch_set(g, (struct ga_patch){
		.patch = { o->shape_attr.d[0], o->shape_attr.d[1], o->shape_attr.d[2] } });
}

static void lower_patch_embed(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	ga_patch_set(g, (struct ga_patch){
		.patch = { o->shape_attr.d[0], o->shape_attr.d[1], o->shape_attr.d[2] },
		.bias = o->flag });
	/* the patches hold exactly the input's elements, regrouped */
	lower_add_scratch(X->L, X->k, arena_printf(X->a, "%s/patches", X->m->tensors[o->out].name),
			  (int64_t)X->tensors[X->in[0]].bytes);
}

static void rule_timestep_embedding(struct opctx *X)
{
	X->out = X->in[0];
}

/* patch_embed and unpatchify regroup frames, height and width into tokens
 * and back: a split along the batch stays, any other is gathered first
 * (split patch_embed's output tokens, gather before unpatchify). */
static void rule_patches(struct opctx *X)
{
	bool embed = X->o->kind == OP_patch_embed;
	for (int g = 0; g < LG_COUNT; g++) {
		struct lay_axis *x = &X->in[0].g[g];
		if (sharded(x) && x->dim != 0)
			need_whole(X, 0, x->dim, g,
				   embed ? "patch_embed cuts whole patches out of frames, height "
					   "and width (split its output's tokens instead: "
					   "split(out, dim = 1))"
					 : "unpatchify moves tokens into frames, height and width "
					   "(gather the tokens before it)");
	}
	X->out = X->in[0];
}

const struct op_compile op_compile_timestep_embedding = { .shape = shape_timestep_embedding,
							  .layout = rule_timestep_embedding,
							  .lower = lower_timestep_embedding };
const struct op_compile op_compile_grid_ids = { .shape = shape_grid_ids, .lower = lower_ids };
const struct op_compile op_compile_text_ids = { .shape = shape_text_ids, .lower = lower_ids };
const struct op_compile op_compile_patch_embed = { .shape = shape_patches,
						   .layout = rule_patches, .lower = lower_patch_embed };
const struct op_compile op_compile_unpatchify = { .shape = shape_patches,
						  .layout = rule_patches, .lower = lower_unpatchify };
