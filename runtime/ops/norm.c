/* norm.c — layer_norm, rms_norm (whole, or distributed: G_OF_STATS) and
 * norm_stats, the distributed norm's per-row sums, on one rank. */
#include <stdbool.h>

#include "runtime/op_runtime.h"

_Static_assert((int)G_NS_SUM == (int)K_NS_SUM && (int)G_NS_CENTRED == (int)K_NS_CENTRED &&
		       (int)G_NS_SQ == (int)K_NS_SQ, "norm_stats modes: graph and kernels agree");

/* A norm whose last axis is split (G_OF_STATS): its weights are this rank's
 * slices, its sums one per row after the weights. */
static dtpc_status check_dist_norm(const struct dtpc_session *s, uint32_t i, const struct g_op *o,
				   int64_t n)
{
	const char *name = op_table[o->kind].name;
	struct ga_norm a = ga_norm_get(o);
	bool ln = o->kind == OP_layer_norm;
	int nw = a.affine ? (ln ? 2 : 1) : 0, ns = ln ? 2 : 1;
	REQUIRE(o->nin == 1 + nw + ns, i, name, "operands");
	REQUIRE(a.width >= n && a.eps > 0, i, name, "width %lld of %lld", (long long)n,
		(long long)a.width);
	for (int k = 1; k <= nw; k++)
		REQUIRE(s->numel[opnd(s, o, k)] == n, i, name, "weight size");
	int64_t rows = row_count(s, opnd(s, o, 0));
	REQUIRE(s->numel[opnd(s, o, 1 + nw)] == rows &&
			(!ln || s->numel[opnd(s, o, 2 + nw)] == 2 * rows), i, name, "sums size");
	return device_can(s, i, s->dv && !s->dv->ops->norm_apply, "distributed norm");
}

static dtpc_status check_norm(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	struct ga_norm a = ga_norm_get(o);
	REQUIRE(same_dims(s, x, out) && nd(s, x) >= 1, i, name, "shapes");
	int64_t n = dims(s, x)[nd(s, x) - 1];
	if (a.stats)
		return check_dist_norm(s, i, o, n);
	int64_t grp = o->kind == OP_rms_norm ? a.group : n;
	REQUIRE(grp > 0 && n % grp == 0, i, name, "group %lld does not divide %lld",
		(long long)grp, (long long)n);
	REQUIRE(a.eps > 0, i, name, "eps");
	int want = a.affine ? (o->kind == OP_layer_norm ? 3 : 2) : 1;
	REQUIRE(o->nin == want, i, name, "operands");
	for (int k = 1; k < want; k++)
		REQUIRE(s->numel[opnd(s, o, k)] == grp, i, name, "weight size");
	return DTPC_OK;
}

static dtpc_status check_norm_stats(struct dtpc_session *s, uint32_t i, const struct g_op *o)
{
	const char *name = op_table[o->kind].name;
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	struct ga_norm_stats a = ga_norm_stats_get(o);
	int64_t rows = row_count(s, x), cols = a.stat == K_NS_CENTRED ? 2 : 1;
	REQUIRE(nd(s, x) >= 1 && nd(s, out) == nd(s, x) && a.width >= 1 &&
			a.stat >= K_NS_SUM && a.stat <= K_NS_SQ &&
			dims(s, out)[nd(s, out) - 1] == cols && s->numel[out] == rows * cols &&
			o->nin == (a.stat == K_NS_CENTRED ? 2 : 1) &&
			(o->nin == 1 || s->numel[opnd(s, o, 1)] == rows),
		i, name, "shapes");
	return device_can(s, i, s->dv && !s->dv->ops->norm_stats, "distributed norm");
}

static dtpc_status run_layer_norm(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	int64_t n = dims(s, x)[nd(s, x) - 1];
	struct ga_norm a = ga_norm_get(o);
	bool aff = a.affine;
	if (a.stats) {
		int k = aff ? 3 : 1;
		DEV(s, o, norm_apply, rt_data(s, x), y, row_count(s, x), n, a.width,
		    (float)a.eps, rt_data(s, opnd(s, o, k)), rt_data(s, opnd(s, o, k + 1)),
		    aff ? rt_data(s, opnd(s, o, 1)) : NULL,
		    aff ? rt_data(s, opnd(s, o, 2)) : NULL);
		return DTPC_OK;
	}
	DEV(s, o, layer_norm, rt_data(s, x), y, n ? s->numel[x] / n : 0, n, (float)a.eps,
	    aff ? rt_data(s, opnd(s, o, 1)) : NULL, aff ? rt_data(s, opnd(s, o, 2)) : NULL);
	return DTPC_OK;
}

static dtpc_status run_rms_norm(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	int64_t n = dims(s, x)[nd(s, x) - 1];
	struct ga_norm a = ga_norm_get(o);
	if (a.stats) {
		bool aff = a.affine;
		DEV(s, o, norm_apply, rt_data(s, x), y, row_count(s, x), n, a.width,
		    (float)a.eps, NULL, rt_data(s, opnd(s, o, aff ? 2 : 1)),
		    aff ? rt_data(s, opnd(s, o, 1)) : NULL, NULL);
		return DTPC_OK;
	}
	DEV(s, o, rms_norm, rt_data(s, x), y, n ? s->numel[x] / n : 0, n, a.group,
	    (float)a.eps, a.affine ? rt_data(s, opnd(s, o, 1)) : NULL);
	return DTPC_OK;
}

static dtpc_status run_norm_stats(struct dtpc_session *s, const struct g_op *o)
{
	uint32_t out = o->out, x = o->nin ? opnd(s, o, 0) : 0;
	float *y = rt_data(s, out);
	struct ga_norm_stats a = ga_norm_stats_get(o);
	DEV(s, o, norm_stats, rt_data(s, x), o->nin == 2 ? rt_data(s, opnd(s, o, 1)) : NULL, y,
	    row_count(s, x), dims(s, x)[nd(s, x) - 1], a.width,
	    (enum k_norm_stat)a.stat);
	return DTPC_OK;
}

const struct op_runtime op_runtime_layer_norm = { check_norm, run_layer_norm };
const struct op_runtime op_runtime_rms_norm = { check_norm, run_rms_norm };
const struct op_runtime op_runtime_norm_stats = { check_norm_stats, run_norm_stats };
