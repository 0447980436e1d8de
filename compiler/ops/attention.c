/* attention.c — attention's shape rule; ring_attention exists only in
 * graphs (lower.c: a context-parallel attention over a ring). */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"
#include "compiler/op_layout.h"

static bool shape_attention(struct op_ctx *I, struct ir_op *o, const struct value *v,
			    struct ir_shape *out, int opi)
{
	const struct ir_shape *x = o->nin ? in_shape(I, o->in[0]) : NULL;
	const char *xname = o->nin ? I->m->tensors[o->in[0]].name : "";
	for (int i = 0; i < 3; i++)
		if (!need_rank(I, o->in[i], o->in_loc[i], 3, 3,
			       i == 0 ? "attention's q" : i == 1 ? "attention's k"
								 : "attention's v"))
			return false;
	const struct ir_shape *k = in_shape(I, o->in[1]), *vv = in_shape(I, o->in[2]);
	if (!heads_divide(I, x->d[2], &v[3], o->in_loc[0], xname))
		return false;
	if (k->d[0] != x->d[0] || vv->d[0] != x->d[0]) {
		diag_error(I->d, o->loc, "attention's q, k and v must have the same batch");
		return false;
	}
	if (k->d[2] != x->d[2]) {
		diag_error(I->d, o->in_loc[1],
			   "attention's k width %" PRId64 " differs from q width %" PRId64,
			   k->d[2], x->d[2]);
		return false;
	}
	if (vv->d[1] != k->d[1]) {
		diag_error(I->d, o->in_loc[2],
			   "attention's v has %" PRId64 " positions but k has %" PRId64,
			   vv->d[1], k->d[1]);
		return false;
	}
	if (!heads_divide(I, vv->d[2], &v[3], o->in_loc[2],
			  I->m->tensors[o->in[2]].name))
		return false;
	if (o->nin == 4) {
		/* a key-padding mask: one value per batch and key */
		const struct ir_shape *mk = in_shape(I, o->in[3]);
		if (mk->nd != 2 || mk->d[0] != x->d[0] || mk->d[1] != k->d[1]) {
			diag_error(I->d, o->in_loc[3],
				   "attention's mask must be [%" PRId64 ", %" PRId64 "] "
				   "(batch, keys), but '%s' is %s", x->d[0], k->d[1],
				   I->m->tensors[o->in[3]].name, shape_str(I->a, mk));
			diag_hint(I->d, "a key-padding mask holds one value per key: "
				  "nonzero attends, 0 is masked");
			return false;
		}
	}
	*out = *x;
	out->d[2] = vv->d[2];
	o->heads = v[3].i;
	return true;
}
/* lower.c, an attention on each rank's own heads (a context-parallel one
 * is lower.c's own) */
static void lower_attention(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	ga_attention_set(g, (struct ga_attention){
		.head_dim = X->m->tensors[o->in[0]].shape.d[2] / o->heads,
		.head_dim_v = X->m->tensors[o->in[2]].shape.d[2] / o->heads });
}

static void attention_heads(struct opctx *X, bool cp_style);
static void attention_mask(struct opctx *X, bool cp_style);

/* Over cfg, attention is per sample: q, k, v and the mask split alike on the
 * batch (dim 0), replicated ones sliced locally, any other split gathered. */
static void attention_batch(struct opctx *X, enum lay_group g)
{
	struct lay_axis want = REPL;
	for (int i = 0; i < X->o->nin; i++) {
		struct lay_axis *x = &X->in[i].g[g];
		if (sharded(x) && x->dim != 0)
			need_whole(X, i, x->dim, g, "attention mixes its whole sequence and heads");
		else if (sharded(x) && !sharded(&want))
			want = *x;
	}
	for (int i = 0; sharded(&want) && i < X->o->nin; i++)
		X->in[i].g[g] = want; /* equal, or sliced locally */
	X->out.g[g] = want;
}

static void rule_attention(struct opctx *X)
{
	struct lp *P = X->P;
	const struct plan_cfg *c = P->c;
	bool cp_style = plan_cp(c) > 1 && (mstyle(X, ST_RING) || mstyle(X, ST_ULYSSES));
	struct lay_axis *q = &X->in[0].g[LG_CP], *k = &X->in[1].g[LG_CP], *v = &X->in[2].g[LG_CP];
	if (!cp_style) {
		for (int i = 1; i <= 2; i++) {
			struct lay_axis *x = &X->in[i].g[LG_CP];
			if (!sharded(x) || x->dim != 1)
				continue;
			struct finding *f = lay_find(P, true, X->opi, "kv-sharded");
			if (f) {
				f->msg = arena_printf(P->a, "attention '%s' receives sequence-sharded "
						      "%s ('%s') but has no context-parallel style: "
						      "each rank would attend only to its own shard",
						      X->o->module, i == 1 ? "keys" : "values",
						      lay_tname(P, X->o->in[i]));
				f->hint = arena_printf(P->a, "add a rule such as \"%s\" : ulysses, ring; "
						       "or do not split the inputs that reach its keys",
						       X->o->module);
				if (x->origin >= 0)
					lay_fnote(f, lay_style_loc(P, x->origin, ST_SPLIT),
						  "the sequence is split by this rule");
			}
			*x = REPL; /* report once per attention */
			*(i == 1 ? v : k) = REPL;
			break;
		}
		for (int i = 0; i < 3; i++)
			if (sharded(&X->in[i].g[LG_CP]) && X->in[i].g[LG_CP].dim != 1)
				need_whole(X, i, X->in[i].g[LG_CP].dim, LG_CP,
					   "attention mixes all heads' features");
	} else {
		for (int i = 0; i < 3; i++) {
			struct lay_axis *x = &X->in[i].g[LG_CP];
			if (sharded(x) && x->dim == 1)
				continue;
			struct finding *f = lay_find(P, true, X->opi, "cp-unsharded");
			if (f) {
				const struct style_use *u = mstyle(X, ST_ULYSSES);
				if (!u)
					u = mstyle(X, ST_RING);
				f->loc = u->src->loc;
				f->msg = arena_printf(P->a, "attention '%s' is context-parallel, but "
						      "its %s ('%s') is not split along the sequence",
						      X->o->module, i == 0 ? "query" : i == 1 ? "key" : "value",
						      lay_tname(P, X->o->in[i]));
				f->hint = "split the model inputs that reach q, k and v "
					  "(split(NAME, dim = 1)), or remove ring/ulysses here";
				lay_fnote(f, X->o->loc, "the attention is defined here");
			}
			break;
		}
	}
	/* heads may be split over tp (colwise), nothing else: sequence-parallel
	 * q, k and v are whole along the sequence */
	for (int i = 0; i < 3; i++)
		if (sharded(&X->in[i].g[LG_TP]) && X->in[i].g[LG_TP].dim != 2)
			need_whole(X, i, X->in[i].g[LG_TP].dim, LG_TP,
				   "attention takes its sequence whole over tp");
	attention_heads(X, cp_style);
	attention_mask(X, cp_style);
	X->out.g[LG_CP] = *q;
	(void)k;
	attention_batch(X, LG_CFG);
}

/* A key-padding mask [B, Skv] follows its keys' sequence: a ring attention
 * takes it split like its keys (each rank's mask chunk travels with its key
 * chunk); Ulysses attends over the whole sequence (the ring's part of it
 * with USP), so it takes the mask whole and lower.c cuts the ring's part;
 * a local attention takes it whole. It has no heads: whole over tp. */
static void attention_mask(struct opctx *X, bool cp_style)
{
	if (X->o->nin < 4)
		return;
	const struct plan_cfg *c = X->P->c;
	struct lay_axis *m = &X->in[3].g[LG_CP], want = REPL;
	if (sharded(&X->in[3].g[LG_TP]))
		need_whole(X, 3, X->in[3].g[LG_TP].dim, LG_TP, "an attention mask has no heads to split");
	bool uly = cp_style && c->ulysses > 1 && mstyle(X, ST_ULYSSES);
	if (cp_style && !uly && sharded(&X->in[1].g[LG_CP]) && X->in[1].g[LG_CP].dim == 1)
		want = X->in[1].g[LG_CP];
	if (sharded(m) && !(sharded(&want) && m->dim == want.dim && same_blocks(m, &want)))
		need_whole(X, 3, m->dim, LG_CP,
			   uly ? "Ulysses attends over the whole sequence, so it needs the "
				 "whole mask of its keys"
			   : sharded(&want) ? "the mask must be split like the attention's keys"
					    : "the attention's keys are whole");
	if (!sharded(m) && sharded(&want)) /* sliced locally */
		*m = want;
}

/* Heads per rank: tp shards whole heads (heads % tp), then Ulysses splits the
 * local heads over its ranks ((heads / tp) % ulysses, or padding under
 * ulysses_anything while the padding is smaller than the padded count). */
static void attention_heads(struct opctx *X, bool cp_style)
{
	struct lp *P = X->P;
	const struct plan_cfg *c = P->c;
	int64_t heads = X->o->heads;
	int any_tp = -1;
	for (int i = 0; i < 3; i++)
		if (sharded(&X->in[i].g[LG_TP]) && X->in[i].g[LG_TP].dim == 2)
			any_tp = i;
	X->out.g[LG_TP] = REPL;
	int64_t local = heads;
	if (c->tp > 1 && any_tp >= 0) {
		const struct lay_axis *src = &X->in[any_tp].g[LG_TP];
		bool whole = heads % c->tp == 0 && !src->nblk;
		if (!whole) {
			struct finding *f = lay_find(P, true, X->opi, "tp-heads");
			if (f) {
				if (src->origin >= 0)
					f->loc = lay_style_loc(P, src->origin, ST_COLWISE);
				f->msg = arena_printf(P->a, "colwise over tp = %" PRId64 " splits "
						      "the %" PRId64 " heads of attention '%s' "
						      "unevenly: the local width is not whole heads",
						      c->tp, heads, X->o->module);
				lay_fnote(f, X->o->loc, arena_printf(P->a, "the attention with %" PRId64
								 " heads is defined here", heads));
				lay_fnote(f, c->ax_tp >= 0 ? c->axes[c->ax_tp].loc : loc_none(),
					  "tp is set here");
			}
			/* the error says it all: no gather notes on top */
			for (int i = 0; i < 3; i++)
				X->in[i].g[LG_TP] = REPL;
		} else {
			for (int i = 0; i < 3; i++)
				if (!sharded(&X->in[i].g[LG_TP]))
					X->in[i].g[LG_TP] = X->in[any_tp].g[LG_TP]; /* sliced locally */
			X->out.g[LG_TP] = X->in[0].g[LG_TP];
			local = heads / c->tp;
		}
	}
	if (!cp_style || c->ulysses <= 1 || !mstyle(X, ST_ULYSSES))
		return;
	int64_t u = c->ulysses;
	if (local % u == 0)
		return;
	const struct style_use *us = mstyle(X, ST_ULYSSES);
	if (!c->ulysses_anything) {
		struct finding *f = lay_find(P, true, X->opi, "ulysses-heads");
		if (!f)
			return;
		f->loc = us->src->loc;
		f->msg = arena_printf(P->a, "Ulysses over %" PRId64 " ranks needs the %s"
				      "heads of '%s' (%" PRId64 ") to divide by %" PRId64,
				      u, c->tp > 1 ? "local " : "", X->o->module, local, u);
		if (c->tp > 1)
			f->msg = arena_printf(P->a, "%s (%" PRId64 " heads / tp = %" PRId64 ")",
					      f->msg, heads, c->tp);
		f->hint_context = "ulysses_anything = true";
		f->hint = arena_printf(P->a, "set %s in the context to pad heads, or change the "
				       "mesh", f->hint_context);
		lay_fnote(f, X->o->loc, "the attention is defined here");
		lay_fnote(f, c->axes[c->ax_ulysses].loc, "ulysses is set here");
		return;
	}
	int64_t per = (local + u - 1) / u, pad = per * u - local;
	if (pad < per)
		return;
	struct finding *f = lay_find(P, true, X->opi, "ulysses-pad");
	if (!f)
		return;
	f->loc = us->src->loc;
	f->msg = arena_printf(P->a, "ulysses_anything cannot pad the %" PRId64 " heads of '%s' "
			      "over %" PRId64 " ranks: %" PRId64 " padding head%s not fewer "
			      "than the %" PRId64 " heads per rank", local, X->o->module, u,
			      pad, pad == 1 ? " is" : "s are", per);
	lay_fnote(f, c->ctx_loc[CTX_UANY], "ulysses_anything is set here");
	lay_fnote(f, c->axes[c->ax_ulysses].loc, "ulysses is set here");
}

const struct op_compile op_compile_attention = { .shape = shape_attention,
						 .layout = rule_attention, .lower = lower_attention };
/* graph-only: lower.c makes it */
const struct op_compile op_compile_ring_attention = { 0 };
