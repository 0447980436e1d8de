/* rope.c — rope, rope_freqs (its tables, from ids or positions it
 * computes itself) and ltx_rope_freqs (LTX-Video's), on one rank. */
#include <math.h>
#include <stdbool.h>

#include "runtime/op_runtime.h"

static dtpc_status check_rope(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	uint32_t c = opnd(s, o, 1), sn = opnd(s, o, 2);
	struct ga_rope a = ga_rope_get(o);
	int64_t D = a.head_dim;
	REQUIRE(nd(s, x) == 3 && same_dims(s, x, out) && D > 0 && (a.half || D % 2 == 0) &&
			dims(s, x)[2] % D == 0, i, name, "shapes");
	/* "half": the tables' width R, rotated; interleaved: the head dim;
	 * "split": half of every (local) head's channels */
	int64_t R = a.half && nd(s, c) == 2 ? dims(s, c)[1] : D;
	int64_t width = k_rope_table_width(dims(s, x)[2] / D, R, a.split);
	REQUIRE(R >= 2 && R % 2 == 0 && R <= D, i, name, "rotated channels %lld (even, 2 to %lld)",
		(long long)R, (long long)D);
	for (uint32_t t = c; ; t = sn) {
		REQUIRE(nd(s, t) == 2 && dims(s, t)[0] == dims(s, x)[1] && dims(s, t)[1] == width,
			i, name, "cos/sin must be [%lld, %lld]", (long long)dims(s, x)[1],
			(long long)width);
		if (t == sn)
			break;
	}
	return a.half || a.split ? device_can(s, i, s->dv && !s->dv->ops->rope_half,
					      a.half ? "rope (half)" : "rope (split)")
				 : DTPC_OK;
}

static dtpc_status check_rope_freqs(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	struct ga_rope_freqs a = ga_rope_freqs_get(o);
	if (!o->nin) {
		/* positions computed (the loader saw one generator flag):
		 * the generator's checks, on a whole output */
		const struct g_tensor *t = &s->g->tensors[out];
		int64_t ids[3], rows = 1;
		graph_rope_ids_attr(o, nd(s, out) ? dims(s, out)[0] : 0, ids);
		bool grid = a.grid;
		for (int k = 0; k < (grid ? 3 : 1); k++)
			REQUIRE(ids[k] >= 1 && ids[k] <= (1 << 24) &&
					!__builtin_mul_overflow(rows, ids[k], &rows), i, name,
				"position sizes");
		for (int k = graph_rope_naxes(o); !grid && k < G_NATTR - 1; k++)
			REQUIRE(!a.axes_dim[k], i, name, "axes_dim[%d] after the axes", k);
		REQUIRE(nd(s, out) == 2 && t->pattern[0] == -1 && t->pattern[1] == -1 &&
				dims(s, out)[0] == rows && graph_ids_extent(grid, ids,
					a.center) <= (1 << 24), i, name,
			"the output must be whole, [%lld, width], its positions within 2^24",
			(long long)rows);
	} else {
		REQUIRE(nd(s, x) == 2 && nd(s, out) == 2 && dims(s, out)[0] == dims(s, x)[0],
			i, name, "ids must be [S, axes] and the output [S, width]");
	}
	int64_t n = o->nin ? dims(s, x)[1] : graph_rope_naxes(o), width = 0;
	REQUIRE(n >= 1 && n <= G_NATTR, i, name, "%lld axes (1 to %d)", (long long)n, G_NATTR);
	for (int k = 0; k < n; k++) {
		REQUIRE(a.axes_dim[k] >= 2 && a.axes_dim[k] % 2 == 0 &&
				a.axes_dim[k] <= dims(s, out)[1],
			i, name, "axes_dim[%d] = %lld", k, (long long)a.axes_dim[k]);
		width += a.axes_dim[k];
	}
	REQUIRE(width == dims(s, out)[1], i, name, "axes_dim sums to %lld, the output has %lld",
		(long long)width, (long long)dims(s, out)[1]);
	REQUIRE(a.theta > 0 && isfinite(a.theta), i, name, "theta");
	return DTPC_OK;
}

static dtpc_status run_rope(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	struct ga_rope a = ga_rope_get(o);
	int64_t W = dims(s, x)[2], D = a.head_dim;
	if (a.half || a.split) {
		DEV(s, o, rope_half, rt_data(s, x), W, rt_data(s, opnd(s, o, 1)),
		    rt_data(s, opnd(s, o, 2)), y, W, dims(s, x)[0], dims(s, x)[1], W / D, D,
		    a.split ? D : dims(s, opnd(s, o, 1))[1], a.split);
		return DTPC_OK;
	}
	DEV(s, o, rope, rt_data(s, x), W, rt_data(s, opnd(s, o, 1)), rt_data(s, opnd(s, o, 2)),
	    y, W, dims(s, x)[0], dims(s, x)[1], W / D, D);
	return DTPC_OK;
}

static dtpc_status run_rope_freqs(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	int64_t ids[3];
	graph_rope_ids_attr(o, dims(s, out)[0], ids);
	struct ga_rope_freqs a = ga_rope_freqs_get(o);
	struct dev_positions pos = { a.grid, a.center, ids[0], ids[1], ids[2], ids[1] };
	DEV(s, o, rope_freqs, o->nin ? rt_data(s, x) : NULL, &pos, y, dims(s, out)[0],
	    o->nin ? dims(s, x)[1] : graph_rope_naxes(o), a.axes_dim, a.theta, a.sin, a.f64);
	return DTPC_OK;
}

static dtpc_status check_ltx_rope_freqs(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = opnd(s, o, 0);
	struct ga_ltx_rope_freqs a = ga_ltx_rope_freqs_get(o);
	int64_t dim = a.dim;
	const double *sc = a.scale;
	REQUIRE(nd(s, x) == 2 && dims(s, x)[1] == 3 && nd(s, out) == 2 &&
			dims(s, out)[0] == dims(s, x)[0] && dims(s, out)[1] == dim, i, name,
		"ids must be [S, 3] and the output [S, %lld]", (long long)dim);
	REQUIRE(dim >= 2 && dim % 2 == 0, i, name, "dim %lld (even, at least 2)", (long long)dim);
	REQUIRE(a.patch_t >= 1 && a.patch >= 1, i, name, "patch sizes");
	REQUIRE(a.theta > 0 && a.theta != 1 && isfinite(a.theta) && isfinite(sc[0]) &&
			isfinite(sc[1]) && isfinite(sc[2]), i, name, "theta or scales");
	return DTPC_OK;
}

static dtpc_status run_ltx_rope_freqs(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = opnd(s, o, 0);
	struct ga_ltx_rope_freqs a = ga_ltx_rope_freqs_get(o);
	DEV(s, o, ltx_rope_freqs, rt_data(s, x), rt_data(s, out), dims(s, x)[0], a.dim, a.scale,
	    a.patch_t, a.patch, a.theta, a.sin);
	return DTPC_OK;
}

/* the generator's parameters as its kernel takes them */
static struct k_ltx2_rope ltx2_params(const struct ga_ltx2_rope_freqs *a)
{
	return (struct k_ltx2_rope){ a->dim, a->axes, a->height, a->width, a->patch_t, a->patch,
				     a->scale_t, a->scale_s, a->causal_offset, a->hop_length,
				     a->base_t, a->base_s, a->time_div, a->theta, a->audio,
				     a->f64, a->split };
}

static dtpc_status check_ltx2_rope_freqs(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out;
	struct ga_ltx2_rope_freqs a = ga_ltx2_rope_freqs_get(o);
	const struct g_tensor *t = &s->g->tensors[out];
	REQUIRE(a.dim >= 2 && a.dim % 2 == 0 && (a.axes == 1 || a.axes == 3) &&
			(!a.audio || a.axes == 1), i, name, "dim %lld (even), axes %lld",
		(long long)a.dim, (long long)a.axes);
	REQUIRE(a.frames >= 1 && a.height >= 1 && a.width >= 1 && a.patch_t >= 1 &&
			a.patch >= 1 && a.scale_t >= 1 && a.scale_s >= 1 && a.base_t >= 1 &&
			a.base_s >= 1 && a.hop_length >= 1 && a.time_div > 0 &&
			isfinite(a.time_div) && a.theta > 0 && isfinite(a.theta), i, name,
		"grid, patch, scales, bases or theta");
	struct k_ltx2_rope p = ltx2_params(&a);
	int64_t width = k_ltx2_rope_width(&p);
	int64_t rows = a.audio ? (a.frames + a.patch_t - 1) / a.patch_t
			       : a.frames / a.patch_t * (a.height / a.patch) * (a.width / a.patch);
	REQUIRE(nd(s, out) == 2 && t->pattern[0] == -1 && t->pattern[1] == -1 &&
			dims(s, out)[0] == rows && dims(s, out)[1] == width, i, name,
		"the output must be the whole [%lld, %lld]", (long long)rows, (long long)width);
	return DTPC_OK;
}

static dtpc_status run_ltx2_rope_freqs(struct dtpc_session *s, const struct g_op *o)
{
	struct ga_ltx2_rope_freqs a = ga_ltx2_rope_freqs_get(o);
	struct k_ltx2_rope p = ltx2_params(&a);
	DEV(s, o, ltx2_rope_freqs, &p, rt_data(s, o->out), 0, dims(s, o->out)[0], a.sin);
	return DTPC_OK;
}

const struct op_runtime op_runtime_ltx2_rope_freqs = { check_ltx2_rope_freqs,
						       run_ltx2_rope_freqs };
const struct op_runtime op_runtime_rope = { check_rope, run_rope };
const struct op_runtime op_runtime_ltx_rope_freqs = { check_ltx_rope_freqs, run_ltx_rope_freqs };
const struct op_runtime op_runtime_rope_freqs = { check_rope_freqs, run_rope_freqs };
