/* norm.c — the shape rules of layer_norm and rms_norm; norm_stats (a
 * distributed norm's sums) exists only in graphs. */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"
#include "compiler/op_layout.h"

static bool shape_norm(struct op_ctx *I, struct ir_op *o, const struct value *v,
		       struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	const char *xname = o->nin ? I->m->tensors[o->in[0]].name : "";
	if (!need_rank(I, o->in[0], o->in_loc[0], 1, IR_MAX_DIMS, "a norm's input"))
		return false;
	/* written so that NaN fails too: the runtime refuses it */
	if (!(v[1].f > 0)) {
		diag_error(I->d, v[1].loc, "eps must be positive");
		return false;
	}
	int64_t h = x->d[x->nd - 1];
	int64_t g = h;
	bool affine = o->kind == OP_layer_norm ? v[2].i : v[3].i;
	if (o->kind == OP_rms_norm && v[2].i != 0) {
		g = v[2].i;
		if (g < 1 || h % g) {
			diag_error(I->d, v[2].loc,
				   "rms_norm group dim %" PRId64 " does not divide the "
				   "last axis (%" PRId64 ") of '%s'", g, h, xname);
			return false;
		}
	}
	*out = *x;
	o->eps = v[1].f;
	o->norm.group = g;
	o->flag = affine;
	if (affine) {
		ir_add_weight(I, opi, "weight", shape1(g));
		if (o->kind == OP_layer_norm)
			ir_add_weight(I, opi, "bias", shape1(g));
	}
	return true;
}
/* lower.c, a whole norm (a distributed one is lower.c's own) */
static void lower_layer_norm(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	ga_norm_set(g, (struct ga_norm){ .eps = o->eps, .affine = o->flag });
}

static void lower_rms_norm(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	ga_norm_set(g, (struct ga_norm){ .eps = o->eps, .affine = o->flag, .group = o->norm.group });
}

/* A norm over the whole last axis (LTX-Video's and Wan's q/k norm after a
 * colwise to_q) whose last axis tp splits in one block: each rank sums its
 * part of every row, the sums are all-reduced (1 float per row for rms_norm,
 * 2 for layer_norm) and each rank normalises its part — instead of gathering
 * the tensor. Reported once per statement. */
static bool distribute_norm(struct opctx *X, const struct lay_axis *x, int last)
{
	struct lp *P = X->P;
	int64_t width = dim_size(X, 0, last);
	if (x->nblk || (X->o->kind == OP_rms_norm && X->o->norm.group != width) ||
	    P->no_dist[X->opi])
		return false;
	P->res->dist_norm[X->opi] = true;
	struct finding *f = lay_find(P, false, X->opi, "dist-norm");
	if (!f)
		return true;
	const struct ir_shape *sh = &P->m->tensors[X->o->in[0]].shape;
	int64_t rows = shape_numel(sh) / width, es = graph_dtype_size(P->c->dtype);
	int ns = X->o->kind == OP_layer_norm ? 3 : 1; /* sum(x), then the centred pair */
	f->msg = arena_printf(P->a, "%s '%s' normalises its last axis (%" PRId64 "), which tp "
			      "splits, from per-row sums: an all-reduce over tp of %s (%d float%s per "
			      "row, in float32) instead of an all-gather of %s",
			      op_table[X->o->kind].name, X->o->module, width,
			      lay_human_bytes(P->a, rows * ns * 4), ns, ns > 1 ? "s" : "",
			      lay_human_bytes(P->a, shape_numel(sh) * es));
	if (x->origin >= 0)
		lay_fnote(f, lay_style_loc(P, x->origin, ST_COLWISE), "the sharding comes from this rule");
	return true;
}

static void rule_norm(struct opctx *X)
{
	struct lp *P = X->P;
	int last = last_dim(X, 0);
	int64_t size = X->o->norm.group;
	for (int g = 0; g < LG_COUNT; g++) {
		struct lay_axis *x = &X->in[0].g[g];
		int64_t n = lay_group_size(P->c, g);
		if (!sharded(x) || x->dim != last)
			continue;
		/* Normalising groups of `size` elements commutes with sharding when
		 * every rank holds whole groups of every block (per-head norm). */
		int nb;
		const int64_t *b = lay_blocks_of(P, x, dim_size(X, 0, last), &nb);
		bool whole = true;
		for (int i = 0; i < nb; i++)
			whole &= b[i] % n == 0 && (b[i] / n) % size == 0;
		if (!whole && !(g == LG_TP && distribute_norm(X, x, last)))
			need_whole(X, 0, last, g,
				   arena_printf(P->a, "%s normalises groups of %" PRId64
						" elements of the last axis",
						op_table[X->o->kind].name, size));
	}
	X->out = X->in[0];
}

const struct op_compile op_compile_layer_norm = { .shape = shape_norm, .layout = rule_norm,
						  .lower = lower_layer_norm };
const struct op_compile op_compile_rms_norm = { .shape = shape_norm, .layout = rule_norm,
						.lower = lower_rms_norm };
/* graph-only: lower.c makes it for a norm over a split last axis */
const struct op_compile op_compile_norm_stats = { 0 };
