/* op_layout.h — the layout pass's state and the helpers the op families'
 * layout rules share (layout.c, compiler/ops/). Internal to the compiler. */
#ifndef DTPC_OP_LAYOUT_H
#define DTPC_OP_LAYOUT_H
#include <stdbool.h>
#include <stdint.h>

#include "layout.h"

struct strmap;

/* A layout error or note, reported once per model statement. */
struct finding {
	bool error;
	int op, count;
	dtpc_loc loc;
	const char *msg, *hint;
	const char *hint_context; /* the context option the hint proposes, or NULL */
	dtpc_loc nloc[3];
	const char *ntext[3];
	int nn;
	struct finding *next;
};

/* The layout pass (layout.c): the plan, the layouts so far, its findings. */
struct lp {
	struct arena *a;
	struct diag_ctx *d;
	const struct plan_cfg *c;
	const struct ir_model *m;
	struct layout *L;
	struct layout_result *res;
	struct strmap *keys;
	struct finding **byidx;
	int nfind, capfind;
	struct finding *head, **tail;
	uint8_t *gathered; /* per tensor: bit g set once gathered over group g */
	const bool *no_dist; /* per op: a norm not to distribute (see layout_run) */
	bool report;         /* the pass whose findings are reported */
};

/* replicated over a group */
static const struct lay_axis REPL = { .kind = LAY_REPL, .dim = -1, .origin = -1 };

/* The first finding of its kind at a model statement is kept; later ones
 * (the same statement in other repeat instances) only count. */
struct finding *lay_find(struct lp *P, bool error, int opi, const char *kind);

void lay_fnote(struct finding *f, dtpc_loc loc, const char *text);

const char *lay_tname(struct lp *P, int t);

const char *lay_human_bytes(struct arena *a, int64_t b);

/* Where a rule writes a style of this kind (the rule itself if absent). */
dtpc_loc lay_style_loc(struct lp *P, int rule, enum style_kind k);

/* Records a gather of tensor t (consumed by op opi) over group g. */
void lay_gather(struct lp *P, int opi, int t, enum lay_group g, const char *why,
		int origin);

/* Blocks of x as a list (one block = the whole dim of size `size`). */
const int64_t *lay_blocks_of(struct lp *P, const struct lay_axis *x,
			     int64_t size, int *n);

static inline bool same_blocks(const struct lay_axis *a, const struct lay_axis *b)
{
	if (a->nblk != b->nblk)
		return false;
	for (int i = 0; i < a->nblk; i++)
		if (a->blk[i] != b->blk[i])
			return false;
	return true;
}

static inline bool sharded(const struct lay_axis *x)
{
	return x->kind == LAY_SHARD;
}

struct opctx {
	struct lp *P;
	int opi;
	const struct ir_op *o;
	struct layout *in;
	struct layout out;
};

static inline int64_t dim_size(struct opctx *X, int i, int dim)
{
	return X->P->m->tensors[X->o->in[i]].shape.d[dim];
}

static inline int last_dim(struct opctx *X, int i)
{
	return X->P->m->tensors[X->o->in[i]].shape.nd - 1;
}

/* Sequence-parallel TP's own split: the sequence (dim 1) over tp, which
 * its all-gathers before a colwise linear undo (no note: the style's
 * collective, as rowwise's all-reduce). */
static inline bool sp_split(const struct plan_cfg *c, enum lay_group g, int dim)
{
	return c->seq_parallel && g == LG_TP && dim == 1;
}

/* Input i must not be sharded on `dim` in group g: gather it. */
static inline void need_whole(struct opctx *X, int i, int dim, enum lay_group g, const char *why)
{
	struct lay_axis *x = &X->in[i].g[g];
	if (!sharded(x) || x->dim != dim)
		return;
	if (sp_split(X->P->c, g, dim)) {
		X->P->gathered[X->o->in[i]] |= (uint8_t)(1u << g);
		*x = REPL;
		return;
	}
	lay_gather(X->P, X->opi, X->o->in[i], g, why, x->origin);
	*x = REPL;
}

static inline const struct style_use *mstyle(struct opctx *X, enum style_kind k)
{
	int mi = X->o->module_index;
	return mi >= 0 ? plan_style(X->P->c, mi, k) : NULL;
}

#endif
