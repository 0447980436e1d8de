/* op_compile.h — what the compiler needs of an op, one descriptor per op
 * (compiler/ops/<family>.c), and the helpers the families share. The
 * passes dispatch through op_compile[], the table generated from ops.def
 * (op_compile.c), so an op of ops.def without its descriptor is a link
 * error naming op_compile_<id>. Internal to the compiler library. */
#ifndef DTPC_OP_COMPILE_H
#define DTPC_OP_COMPILE_H
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "diag.h"
#include "expr.h"
#include "ir.h"
#include "graph/graph.h"
#include "graph/op_attrs.h"
#include "graph/op_table.h"

/* ---- the language's signatures (generated from ops.def: op_sigs.h) ------- */

/* SIG_MAX, the most arguments of any op's signature */
#include "op_sig_max.h"

struct sig_param {
	char name[24];
	char kind;       /* t i f b s l */
	const char *def; /* default as written in ops.def, or NULL */
	bool variadic;
};

struct sig {
	struct sig_param p[SIG_MAX];
	int n;
};

const struct sig *op_sig(int op);

/* ---- the descriptor ------------------------------------------------------- */

/* What a shape rule sees of the instantiation (model.c): the arena, the
 * diagnostics and the model so far (tensors, and weights it adds). */
struct op_ctx {
	struct arena *a;
	struct diag_ctx *d;
	struct ir_model *m;
};

/* What an op's lowering sees (lower.c): the graph op it became, its
 * operands, and the graph's tensors and patterns so far. */
struct lower;
struct opctx;
struct op_lowered {
	struct lower *L;                /* for lower_add_scratch */
	struct arena *a;
	const struct ir_model *m;
	const struct g_tensor *tensors; /* the graph's tensors so far */
	const int64_t *pattern_max;     /* per graph pattern: its largest local length */
	const int *in;                  /* the graph op's operands */
	int k;                          /* and its index */
};

struct op_compile {
	/* model.c: checks op o's arguments (v[k]: the constant value of
	 * signature parameter k, its default if not given; tensors are o->in),
	 * fills o's attributes and *out, and adds its weights (ir_add_weight);
	 * false after a diagnostic. NULL for graph-only ops (OPF_LOWERED),
	 * which plans cannot name. */
	bool (*shape)(struct op_ctx *I, struct ir_op *o, const struct value *v,
		      struct ir_shape *out, int opi);
	/* layout.c: the layouts op X->o accepts of its inputs (X->in, as they
	 * come: gathers and local slices recorded through need_whole) and the
	 * layout of its output (X->out); compiler/op_layout.h. NULL: the
	 * output is whole and the inputs are taken as they are. */
	void (*layout)(struct opctx *X);
	/* lower.c, op o lowered as one local graph op g (lower.c's own
	 * lowerings: linear's styles, a context-parallel attention, a
	 * distributed norm, param as a weight): g's attributes and flags from
	 * o's, and its scratch. NULL: none beyond the operands. */
	void (*lower)(const struct op_lowered *X, const struct ir_op *o, struct g_op *g);
};

#define OP(id, glo, ghi, fl, sig) extern const struct op_compile op_compile_##id;
#include "graph/ops.def"
#undef OP
extern const struct op_compile *const op_compile[OP_COUNT];

/* A weight of op opi named after its module (suffix: "weight", "bias";
 * NULL: the module's own name, as param's). */
void ir_add_weight(struct op_ctx *I, int opi, const char *suffix, struct ir_shape sh);

/* A scratch tensor of `bytes` (in elements of the dtype) for graph op k. */
void lower_add_scratch(struct lower *L, int k, const char *name, int64_t bytes);

/* ---- shape-rule helpers ---------------------------------------------------- */

/* Positions are float32: integers up to 2^24 are exact. */
static const int64_t POS_EXACT = (int64_t)1 << 24;

static inline struct ir_shape shape1(int64_t a)
{
	return (struct ir_shape){ .nd = 1, .d = { a } };
}

static inline const struct ir_shape *in_shape(struct op_ctx *I, int t)
{
	return &I->m->tensors[t].shape;
}

/* A dim index as PyTorch takes it (negative counts from the end). */
static inline bool norm_dim(struct op_ctx *I, const struct value *v, int nd, int *out)
{
	int64_t d = v->i < 0 ? v->i + nd : v->i;
	if (d < 0 || d >= nd) {
		diag_error(I->d, v->loc, "dim %" PRId64 " is out of range for a %d-d tensor",
			   v->i, nd);
		return false;
	}
	*out = (int)d;
	return true;
}

static inline bool positive(struct op_ctx *I, const struct value *v, const char *what)
{
	if (v->i >= 1)
		return true;
	diag_error(I->d, v->loc, "%s must be at least 1, not %" PRId64, what, v->i);
	return false;
}

/* add/mul/modulate: PyTorch's broadcasting, dims aligned from the right,
 * each pair equal or one of them 1. Never by guessing from sizes: a
 * per-batch [B, H] vector over [B, S, H] is written [B, 1, H] in the model
 * (a reshape), so the meaning never depends on whether B == S. */
static inline bool broadcast(struct op_ctx *I, const struct ir_shape *a,
		      const struct ir_shape *b, struct ir_shape *out)
{
	(void)I;
	int nd = a->nd > b->nd ? a->nd : b->nd;
	out->nd = nd;
	for (int i = 0; i < nd; i++) {
		int ia = a->nd - nd + i, ib = b->nd - nd + i;
		int64_t x = ia >= 0 ? a->d[ia] : 1, y = ib >= 0 ? b->d[ib] : 1;
		if (x != y && x != 1 && y != 1)
			return false;
		out->d[i] = x == 1 ? y : x;
	}
	return true;
}

static inline bool need_rank(struct op_ctx *I, int t, dtpc_loc loc, int lo, int hi,
		      const char *what)
{
	int nd = in_shape(I, t)->nd;
	if (nd >= lo && nd <= hi)
		return true;
	if (lo == hi)
		diag_error(I->d, loc, "%s must be %d-d, but '%s' is %s", what, lo,
			   I->m->tensors[t].name, shape_str(I->a, in_shape(I, t)));
	else
		diag_error(I->d, loc, "%s must have %d to %d dims, but '%s' is %s",
			   what, lo, hi, I->m->tensors[t].name,
			   shape_str(I->a, in_shape(I, t)));
	return false;
}

static inline bool heads_divide(struct op_ctx *I, int64_t width, const struct value *h,
			 dtpc_loc wloc, const char *wname)
{
	if (!positive(I, h, "heads"))
		return false;
	if (width % h->i == 0)
		return true;
	diag_error(I->d, wloc, "width %" PRId64 " of '%s' is not divisible by %" PRId64
		   " heads", width, wname, h->i);
	diag_note(I->d, h->loc, "heads given here");
	return false;
}

#endif
