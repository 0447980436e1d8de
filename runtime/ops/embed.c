/* embed.c — timestep_embedding, grid_ids, text_ids, patch_embed and
 * unpatchify on one rank. */
#include <math.h>
#include <stdbool.h>

#include "runtime/op_runtime.h"

static dtpc_status check_timestep_embedding(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	struct ga_timestep_embedding a = ga_timestep_embedding_get(o);
	int64_t dim = a.dim;
	REQUIRE(dim > 0 && nd(s, out) == nd(s, x) + 1 && nd(s, out) <= G_MAX_DIMS &&
			dims(s, out)[nd(s, x)] == dim, i, name, "the output must be [..., %lld]",
		(long long)dim);
	for (int d = 0; d < nd(s, x); d++)
		REQUIRE(dims(s, out)[d] == dims(s, x)[d], i, name, "dim %d differs", d);
	/* as the compiler checks them: a finite divisor and logarithm */
	REQUIRE(dim < 2 || (double)(dim / 2) - a.downscale_freq_shift != 0, i, name,
		"dim / 2 - downscale_freq_shift is 0");
	REQUIRE(a.max_period > 0 && isfinite(a.max_period) && isfinite(a.downscale_freq_shift) &&
			isfinite(a.scale) && isfinite(a.input_scale), i, name, "shift, scale, max_period or input_scale");
	return DTPC_OK;
}

static dtpc_status check_ids(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out;
	bool grid = o->kind == OP_grid_ids;
	struct ga_grid_ids gi = grid ? ga_grid_ids_get(o) : (struct ga_grid_ids){ 0 };
	struct ga_text_ids ti = grid ? (struct ga_text_ids){ 0 } : ga_text_ids_get(o);
	/* the sizes and positions as graph_ids_extent takes them */
	int64_t pos[3] = { grid ? gi.frames : ti.length, grid ? gi.height : ti.first,
			   grid ? gi.width : ti.axes };
	int64_t rows = 1, cols = grid ? 3 : ti.axes, end;
	for (int k = 0; k < (grid ? 3 : 1); k++)
		REQUIRE(pos[k] >= 1 && pos[k] <= (1 << 24) &&
				!__builtin_mul_overflow(rows, pos[k], &rows), i, name,
			"sizes");
	REQUIRE(grid || (cols >= 1 && !__builtin_add_overflow(ti.first, ti.length, &end)),
		i, name, "axes or positions");
	REQUIRE(nd(s, out) == 2 && dims(s, out)[0] == rows && dims(s, out)[1] == cols, i, name,
		"the output must be [%lld, %lld], whole", (long long)rows, (long long)cols);
	/* the positions exact in the storage dtype (the compiler's check,
	 * again for a graph narrowed at run time) */
	enum g_dtype gd = s->dtype == DTPC_BF16 ? G_DT_BF16
			  : s->dtype == DTPC_F16 ? G_DT_F16 : G_DT_F32;
	int64_t ext = graph_ids_extent(grid, pos, gi.center);
	REQUIRE(ext <= graph_dtype_exact_ints(gd), i, name,
		"position %lld is not exact in %s storage (integers up to %lld are)",
		(long long)ext, graph_dtype_name(gd), (long long)graph_dtype_exact_ints(gd));
	return DTPC_OK;
}

/* The [B, C, F, H, W] of patch_embed's input or unpatchify's output: a
 * [B, C, H, W] one (a Conv2d's) is one frame. */
static void patch_grid(struct dtpc_session *s, uint32_t t, int64_t g[5])
{
	const int64_t *d = dims(s, t);
	bool one_frame = nd(s, t) == 4;
	for (int k = 0, j = 0; k < 5; k++)
		g[k] = one_frame && k == 2 ? 1 : d[j++];
}

static dtpc_status check_patches(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	bool embed = o->kind == OP_patch_embed;
	uint32_t grid = embed ? x : out, toks = embed ? out : x;
	struct ga_patch a = ga_patch_get(o);
	int64_t pt = a.patch[0], ph = a.patch[1], pw = a.patch[2], vol = 1, n = 1, k;
	/* patch_embed over [B, C, H, W] (Conv2d): one frame, patch (1, h, w) */
	bool conv2d = embed && nd(s, grid) == 4;
	int64_t g[5];
	REQUIRE((nd(s, grid) == 5 || (conv2d && pt == 1)) && nd(s, toks) == 3 &&
			dims(s, grid)[0] == dims(s, toks)[0],
		i, name, "shapes");
	patch_grid(s, grid, g);
	for (int d = 0; d < 3; d++) {
		REQUIRE(a.patch[d] >= 1 && g[2 + d] % a.patch[d] == 0 &&
				!__builtin_mul_overflow(vol, a.patch[d], &vol) &&
				!__builtin_mul_overflow(n, g[2 + d] / a.patch[d], &n),
			i, name, "the patch does not divide the grid");
	}
	REQUIRE(dims(s, toks)[1] == n && !__builtin_mul_overflow(vol, dims(s, grid)[1], &k),
		i, name, "%lld tokens for a grid of %lld patches",
		(long long)dims(s, toks)[1], (long long)n);
	if (!embed) {
		REQUIRE(dims(s, x)[2] == k, i, name, "features %lld, not %lld",
			(long long)dims(s, x)[2], (long long)k);
		return DTPC_OK;
	}
	uint32_t w = opnd(s, o, 1);
	int64_t N = dims(s, out)[2];
	/* the weight as the checkpoint stores it: [out, C, h, w] for a Conv2d */
	const int64_t *wd = dims(s, w);
	if (conv2d)
		REQUIRE(nd(s, w) == 4 && wd[0] == N && wd[1] == g[1] && wd[2] == ph &&
				wd[3] == pw, i, name, "the weight must be [%lld, %lld, %lld, %lld]",
			(long long)N, (long long)g[1], (long long)ph, (long long)pw);
	else
		REQUIRE(nd(s, w) == 5 && wd[0] == N && wd[1] == g[1] && wd[2] == pt &&
				wd[3] == ph && wd[4] == pw, i, name,
			"the weight must be [%lld, %lld, %lld, %lld, %lld]", (long long)N,
			(long long)g[1], (long long)pt, (long long)ph, (long long)pw);
	if (a.bias)
		REQUIRE(o->nin == 3 && s->numel[opnd(s, o, 2)] == N, i, name, "bias size");
	else
		REQUIRE(o->nin == 2, i, name, "a third operand without the bias flag");
	REQUIRE(scratch_floats(s, o) >= s->numel[x], i, name, "scratch too small");
	return DTPC_OK;
}

static dtpc_status run_timestep_embedding(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	struct ga_timestep_embedding a = ga_timestep_embedding_get(o);
	/* an input's float32 copy where the storage is narrower (session.h's
	 * wide): the timesteps as bound, as diffusers embeds them */
	float *w = s->dtype != DTPC_F32 && s->wide ? s->wide[x] : NULL;
	DEV(s, o, timestep_embedding, w ? w : rt_data(s, x), y, s->numel[x], a.dim, a.flip,
	    a.downscale_freq_shift, a.scale, a.max_period, a.input_scale, a.input_scale_f32,
	    w != NULL);
	return DTPC_OK;
}

static dtpc_status run_grid_ids(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out;
	float *y = rt_data(s, out);
	struct ga_grid_ids a = ga_grid_ids_get(o);
	DEV(s, o, grid_ids, y, a.frames, a.height, a.width, a.center);
	return DTPC_OK;
}

static dtpc_status run_text_ids(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out;
	float *y = rt_data(s, out);
	struct ga_text_ids a = ga_text_ids_get(o);
	DEV(s, o, text_ids, y, a.length, a.first, a.axes);
	return DTPC_OK;
}

static dtpc_status run_patch_embed(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	/* the patches, then one GEMM by the weight as [out, C t h w] */
	int64_t xs[5];
	patch_grid(s, x, xs);
	float *p = scratch(s, o);
	int64_t K = s->numel[x] / (dims(s, out)[1] ? dims(s, out)[1] : 1) /
		    (xs[0] ? xs[0] : 1);
	struct ga_patch a = ga_patch_get(o);
	DEV(s, o, patchify, rt_data(s, x), p, xs[0], xs[1], xs[2], xs[3], xs[4], a.patch[0],
	    a.patch[1], a.patch[2]);
	DEV(s, o, linear, p, rt_data(s, opnd(s, o, 1)), a.bias ? rt_data(s, opnd(s, o, 2)) : NULL, y,
	    xs[0] * dims(s, out)[1], K, dims(s, out)[2]);
	return DTPC_OK;
}

static dtpc_status run_unpatchify(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	const int64_t *ys = dims(s, out);
	struct ga_patch a = ga_patch_get(o);
	DEV(s, o, unpatchify, rt_data(s, x), y, ys[0], ys[1], ys[2], ys[3], ys[4], a.patch[0],
	    a.patch[1], a.patch[2]);
	return DTPC_OK;
}

const struct op_runtime op_runtime_timestep_embedding = { check_timestep_embedding, run_timestep_embedding };
const struct op_runtime op_runtime_grid_ids = { check_ids, run_grid_ids };
const struct op_runtime op_runtime_text_ids = { check_ids, run_text_ids };
const struct op_runtime op_runtime_patch_embed = { check_patches, run_patch_embed };
const struct op_runtime op_runtime_unpatchify = { check_patches, run_unpatchify };
