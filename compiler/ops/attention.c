/* attention.c — attention's shape rule; ring_attention exists only in
 * graphs (lower.c: a context-parallel attention over a ring). */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "compiler/op_compile.h"

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
	o->attr[0] = v[3].i;
	return true;
}
/* lower.c, an attention on each rank's own heads (a context-parallel one
 * is lower.c's own) */
static void lower_attention(const struct op_lowered *X, const struct ir_op *o, struct g_op *g)
{
	g->attr[0] = X->m->tensors[o->in[0]].shape.d[2] / o->attr[0];
	g->attr[1] = X->m->tensors[o->in[2]].shape.d[2] / o->attr[0];
}


const struct op_compile op_compile_attention = { .shape = shape_attention,
						    .lower = lower_attention };
/* graph-only: lower.c makes it */
const struct op_compile op_compile_ring_attention = { 0 };
