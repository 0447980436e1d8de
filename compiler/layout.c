/* layout.c — layout propagation and the layout checks of docs/language.md
 * ("What dtpc check catches").
 *
 * One forward pass over the ops (they are in dependency order). Each op
 * states which input layouts it accepts; where an input does not fit, the
 * pass either slices it locally (replicated -> sharded costs nothing) or
 * records a gather, which it reports as a note with its size. Findings in a
 * repeated block are reported once per model statement, with a count. */
#include "layout.h"

#include <inttypes.h>
#include <string.h>

#include "arena.h"
#include "strmap.h"

struct finding {
	bool error;
	int op, count;
	dtpc_loc loc;
	const char *msg, *hint;
	dtpc_loc nloc[3];
	const char *ntext[3];
	int nn;
	struct finding *next;
};

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

const struct lay_group_info lay_groups[LG_COUNT] = {
	[LG_CP] = { "ring x ulysses", "cp", 2, { "ring", "ulysses" } },
	[LG_TP] = { "tp", "tp", 1, { "tp" } },
	[LG_CFG] = { "cfg", "cfg", 1, { "cfg" } },
};

int64_t lay_group_size(const struct plan_cfg *c, enum lay_group g)
{
	int64_t n = 1;
	for (int i = 0; i < c->naxes; i++)
		for (int k = 0; k < lay_groups[g].naxes; k++)
			if (!strcmp(c->axes[i].name, lay_groups[g].axes[k]))
				n *= c->axes[i].size;
	return n;
}

/* The style whose rule a group's sharding comes from, for notes. */
static enum style_kind origin_style(enum lay_group g)
{
	return g == LG_TP ? ST_COLWISE : ST_SPLIT;
}

int64_t layout_local(int64_t size, int64_t n, int64_t r)
{
	return size / n + (r < size % n ? 1 : 0);
}

static const struct lay_axis REPL = { .kind = LAY_REPL, .dim = -1, .origin = -1 };

/* The first finding under a key is kept, at loc; later ones only count. */
static struct finding *find_key(struct lp *P, bool error, int opi, const char *key,
				dtpc_loc loc)
{
	int k = strmap_get(P->keys, key);
	if (k >= 0) {
		P->byidx[k]->count++;
		return NULL;
	}
	struct finding *f = ARENA_NEW(P->a, struct finding);
	f->error = error;
	f->op = opi;
	f->count = 1;
	f->loc = loc;
	*P->tail = f;
	P->tail = &f->next;
	if (P->nfind == P->capfind) {
		P->capfind = P->capfind ? P->capfind * 2 : 32;
		struct finding **nb = ARENA_ARRAY(P->a, struct finding *, P->capfind);
		if (P->nfind)
			memcpy(nb, P->byidx, sizeof *nb * (size_t)P->nfind);
		P->byidx = nb;
	}
	P->byidx[P->nfind] = f;
	strmap_put(P->keys, key, P->nfind++);
	return f;
}

/* The first finding of its kind at a model statement is kept; later ones
 * (the same statement in other repeat instances) only count. */
static struct finding *find(struct lp *P, bool error, int opi, const char *kind)
{
	const struct ir_op *o = &P->m->ops[opi];
	return find_key(P, error, opi, arena_printf(P->a, "%p/%s", (const void *)o->stmt, kind),
			o->loc);
}

static void fnote(struct finding *f, dtpc_loc loc, const char *text)
{
	if (f->nn < 3) {
		f->nloc[f->nn] = loc;
		f->ntext[f->nn++] = text;
	}
}

static const char *tname(struct lp *P, int t)
{
	return P->m->tensors[t].name;
}

static const char *human_bytes(struct arena *a, int64_t b)
{
	if (b >= 1 << 30)
		return arena_printf(a, "%.1f GiB", (double)b / (1 << 30));
	if (b >= 1 << 20)
		return arena_printf(a, "%.1f MiB", (double)b / (1 << 20));
	if (b >= 1 << 10)
		return arena_printf(a, "%.1f KiB", (double)b / (1 << 10));
	return arena_printf(a, "%" PRId64 " B", b);
}

/* Where a rule writes a style of this kind (the rule itself if absent). */
static dtpc_loc style_loc(struct lp *P, int rule, enum style_kind k)
{
	if (rule < 0)
		return loc_none();
	const struct pstmt *ps = P->c->rules[rule].stmt;
	for (const struct style *st = ps->styles; st; st = st->next)
		if (!strcmp(st->name, style_names[k]))
			return st->loc;
	return ps->loc;
}

/* Records a gather of tensor t (consumed by op opi) over group g. */
static void gather(struct lp *P, int opi, int t, enum lay_group g, const char *why,
		   int origin)
{
	/* One gather serves every consumer of the same tensor. */
	uint8_t bit = (uint8_t)(1u << g);
	if (P->gathered[t] & bit)
		return;
	P->gathered[t] |= bit;
	struct lay_event *e = ARENA_NEW(P->a, struct lay_event);
	e->group = g;
	e->op = opi;
	e->tensor = t;
	e->why = why;
	e->next = P->res->events;
	P->res->events = e;
	P->res->nevents++;
	if (opi < 0)
		return;
	/* one note per statement pair, not per repeat block */
	int prod = P->m->tensors[t].producer;
	struct finding *f = find(P, false, opi,
				 arena_printf(P->a, "gather%d/%p", (int)g,
					      prod >= 0 ? (const void *)P->m->ops[prod].stmt
							: (const void *)tname(P, t)));
	if (!f)
		return;
	const struct plan_cfg *c = P->c;
	int64_t n = lay_group_size(c, g);
	int64_t bytes = shape_numel(&P->m->tensors[t].shape) * graph_dtype_size(c->dtype);
	f->msg = arena_printf(P->a, "all-gather of '%s' %s over %s (%" PRId64
			      " ranks) inserted before '%s': %s; %s in %s",
			      tname(P, t), shape_str(P->a, &P->m->tensors[t].shape),
			      lay_groups[g].name, n, P->m->ops[opi].module, why,
			      human_bytes(P->a, bytes),
			      c->dtype == G_DT_F32 ? "float32" : graph_dtype_name(c->dtype));
	if (origin >= 0)
		fnote(f, style_loc(P, origin, origin_style(g)),
		      "the sharding comes from this rule");
}

/* ---- effective input layouts ------------------------------------------------ */

static void apply_split(struct lp *P, struct lay_axis *cp, const struct style_use *u)
{
	(void)P;
	if (cp->kind == LAY_SHARD)
		return;
	*cp = (struct lay_axis){ .kind = LAY_SHARD, .dim = (int8_t)u->dim,
				 .origin = u->rule };
}

static void splits_of(struct lp *P, int mi, int t, struct lay_axis *cp)
{
	for (const struct style_use *u = P->c->styles[mi]; u; u = u->next)
		if (u->kind == ST_SPLIT && u->port_tensor == t)
			apply_split(P, cp, u);
}

/* t as op opi sees it: `split(NAME, ...)` on the op's module or on an
 * enclosing repeat instance shards the input on its way in. */
static struct layout view(struct lp *P, int opi, int t)
{
	struct layout l = P->L[t];
	if (plan_cp(P->c) <= 1)
		return l;
	const struct ir_op *o = &P->m->ops[opi];
	if (o->module_index >= 0)
		splits_of(P, o->module_index, t, &l.g[LG_CP]);
	for (int i = o->instance; i >= 0; i = P->m->modules[i].parent)
		splits_of(P, i, t, &l.g[LG_CP]);
	return l;
}

/* ---- helpers over one axis group ------------------------------------------ */

static bool same_blocks(const struct lay_axis *a, const struct lay_axis *b)
{
	if (a->nblk != b->nblk)
		return false;
	for (int i = 0; i < a->nblk; i++)
		if (a->blk[i] != b->blk[i])
			return false;
	return true;
}

static bool sharded(const struct lay_axis *x)
{
	return x->kind == LAY_SHARD;
}

/* Blocks of x as a list (one block = the whole dim of size `size`). */
static const int64_t *blocks_of(struct lp *P, const struct lay_axis *x,
				int64_t size, int *n)
{
	if (x->nblk) {
		*n = x->nblk;
		return x->blk;
	}
	int64_t *b = ARENA_NEW(P->a, int64_t);
	b[0] = size;
	*n = 1;
	return b;
}

/* ---- per-op rules -------------------------------------------------------------- */

struct opctx {
	struct lp *P;
	int opi;
	const struct ir_op *o;
	struct layout *in;
	struct layout out;
};

static int64_t dim_size(struct opctx *X, int i, int dim)
{
	return X->P->m->tensors[X->o->in[i]].shape.d[dim];
}

static int last_dim(struct opctx *X, int i)
{
	return X->P->m->tensors[X->o->in[i]].shape.nd - 1;
}

/* Sequence-parallel TP's own split: the sequence (dim 1) over tp, which
 * its all-gathers before a colwise linear undo (no note: the style's
 * collective, as rowwise's all-reduce). */
static bool sp_split(const struct plan_cfg *c, enum lay_group g, int dim)
{
	return c->seq_parallel && g == LG_TP && dim == 1;
}

/* Input i must not be sharded on `dim` in group g: gather it. */
static void need_whole(struct opctx *X, int i, int dim, enum lay_group g, const char *why)
{
	struct lay_axis *x = &X->in[i].g[g];
	if (!sharded(x) || x->dim != dim)
		return;
	if (sp_split(X->P->c, g, dim)) {
		X->P->gathered[X->o->in[i]] |= (uint8_t)(1u << g);
		*x = REPL;
		return;
	}
	gather(X->P, X->opi, X->o->in[i], g, why, x->origin);
	*x = REPL;
}

static const struct style_use *mstyle(struct opctx *X, enum style_kind k)
{
	int mi = X->o->module_index;
	return mi >= 0 ? plan_style(X->P->c, mi, k) : NULL;
}

static void rule_linear(struct opctx *X)
{
	struct lp *P = X->P;
	int last = last_dim(X, 0);
	/* every group but tp: the contracted last axis whole, the rest kept */
	for (int g = 0; g < LG_COUNT; g++) {
		if (g == LG_TP)
			continue;
		need_whole(X, 0, last, g, "linear contracts its last axis");
		X->out.g[g] = X->in[0].g[g];
	}
	X->out.g[LG_TP] = REPL;
	if (P->c->tp <= 1)
		return;
	const struct style_use *col = mstyle(X, ST_COLWISE);
	const struct style_use *row = mstyle(X, ST_ROWWISE);
	struct lay_axis *x = &X->in[0].g[LG_TP];
	if (row) {
		/* The local input must be exactly this rank's rows of each block. */
		if (sharded(x) && x->dim == last) {
			int na, nb;
			int64_t size = dim_size(X, 0, last);
			const int64_t *ba = blocks_of(P, x, size, &na);
			struct lay_axis want = { .nblk = row->nblocks, .blk = row->blocks };
			const int64_t *bb = blocks_of(P, &want, size, &nb);
			bool same = na == nb;
			for (int i = 0; same && i < na; i++)
				same = ba[i] == bb[i];
			if (!same)
				need_whole(X, 0, last, LG_TP,
					   "its input is sharded in other blocks than this "
					   "rowwise weight (use rowwise(blocks = [...]))");
		} else if (sharded(x)) {
			need_whole(X, 0, x->dim, LG_TP, "rowwise needs its input "
				   "sharded on the last axis or replicated");
		}
		if (!sharded(x)) /* a replicated input is sliced locally */
			*x = (struct lay_axis){ .kind = LAY_SHARD, .dim = (int8_t)last,
						.nblk = row->nblocks, .blk = row->blocks,
						.origin = row->rule };
		/* partial sums, all-reduced by the style: replicated; under
		 * sequence_parallel reduce-scattered along the sequence */
		if (P->c->seq_parallel && last >= 2)
			X->out.g[LG_TP] = (struct lay_axis){ .kind = LAY_SHARD, .dim = 1,
							     .origin = row->rule };
		return;
	}
	if (sharded(x))
		need_whole(X, 0, x->dim, LG_TP, col ? "colwise needs a replicated input"
						    : "a replicated linear needs its whole input");
	if (col)
		X->out.g[LG_TP] = (struct lay_axis){ .kind = LAY_SHARD, .dim = (int8_t)last,
						     .nblk = col->nblocks, .blk = col->blocks,
					       .origin = col->rule };
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
	if (x->nblk || (X->o->kind == OP_rms_norm && X->o->attr[0] != width) ||
	    P->no_dist[X->opi])
		return false;
	P->res->dist_norm[X->opi] = true;
	struct finding *f = find(P, false, X->opi, "dist-norm");
	if (!f)
		return true;
	const struct ir_shape *sh = &P->m->tensors[X->o->in[0]].shape;
	int64_t rows = shape_numel(sh) / width, es = graph_dtype_size(P->c->dtype);
	int ns = X->o->kind == OP_layer_norm ? 3 : 1; /* sum(x), then the centred pair */
	f->msg = arena_printf(P->a, "%s '%s' normalises its last axis (%" PRId64 "), which tp "
			      "splits, from per-row sums: an all-reduce over tp of %s (%d float%s per "
			      "row, in float32) instead of an all-gather of %s",
			      op_table[X->o->kind].name, X->o->module, width,
			      human_bytes(P->a, rows * ns * 4), ns, ns > 1 ? "s" : "",
			      human_bytes(P->a, shape_numel(sh) * es));
	if (x->origin >= 0)
		fnote(f, style_loc(P, x->origin, ST_COLWISE), "the sharding comes from this rule");
	return true;
}

static void rule_norm(struct opctx *X)
{
	struct lp *P = X->P;
	int last = last_dim(X, 0);
	int64_t size = X->o->attr[0]; /* elements per normalised group */
	for (int g = 0; g < LG_COUNT; g++) {
		struct lay_axis *x = &X->in[0].g[g];
		int64_t n = lay_group_size(P->c, g);
		if (!sharded(x) || x->dim != last)
			continue;
		/* Normalising groups of `size` elements commutes with sharding when
		 * every rank holds whole groups of every block (per-head norm). */
		int nb;
		const int64_t *b = blocks_of(P, x, dim_size(X, 0, last), &nb);
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

/* Maps output dim d of a broadcasting op to input i's dim, or -1 when input i
 * is broadcast along d. */
static int bdim(struct opctx *X, int i, int d)
{
	const struct ir_shape *o = &X->P->m->tensors[X->o->out].shape;
	const struct ir_shape *s = &X->P->m->tensors[X->o->in[i]].shape;
	/* right-aligned, as model.c broadcasts */
	int k = d - (o->nd - s->nd);
	if (k < 0 || (s->d[k] == 1 && o->d[d] != 1))
		return -1;
	return k;
}

static void rule_pointwise(struct opctx *X)
{
	struct lp *P = X->P;
	for (int g = 0; g < LG_COUNT; g++) {
		/* The output is sharded like the first sharded input; inputs
		 * sharded otherwise are gathered, replicated ones sliced. */
		struct lay_axis out = REPL;
		for (int i = 0; i < X->o->nin; i++) {
			struct lay_axis *x = &X->in[i].g[g];
			if (!sharded(x))
				continue;
			/* the output dim this input dim becomes */
			int od = -1;
			for (int d = 0; d < P->m->tensors[X->o->out].shape.nd; d++)
				if (bdim(X, i, d) == x->dim)
					od = d;
			if (od < 0) {
				need_whole(X, i, x->dim, g, "it is broadcast along its sharded dim");
				continue;
			}
			if (!sharded(&out)) {
				out = *x;
				out.dim = (int8_t)od;
			} else if (out.dim != od || !same_blocks(&out, x)) {
				need_whole(X, i, x->dim, g, "the other operand is sharded differently");
			}
		}
		/* Replicated operands with an extent along the sharded dim are
		 * sliced locally to match (no communication). */
		for (int i = 0; sharded(&out) && i < X->o->nin; i++) {
			struct lay_axis *x = &X->in[i].g[g];
			int k = bdim(X, i, out.dim);
			if (!sharded(x) && k >= 0) {
				*x = out;
				x->dim = (int8_t)k;
			}
		}
		X->out.g[g] = out;
	}
}

static void rule_slice(struct opctx *X)
{
	struct lp *P = X->P;
	int d = (int)X->o->attr[0];
	int64_t start = X->o->attr[1], len = X->o->attr[2];
	X->out = X->in[0];
	for (int g = 0; g < LG_COUNT; g++) {
		struct lay_axis *x = &X->in[0].g[g];
		struct lay_axis *y = &X->out.g[g];
		if (!sharded(x) || x->dim != d)
			continue;
		/* Slicing whole blocks keeps each rank's chunk of them: the
		 * output holds the sliced blocks, the input stays as it is. */
		int nb;
		const int64_t *b = blocks_of(P, x, dim_size(X, 0, d), &nb);
		int64_t off = 0;
		int first = -1, last = -1;
		for (int i = 0; i < nb; i++) {
			if (off == start)
				first = i;
			off += b[i];
			if (off == start + len)
				last = i;
		}
		if (first < 0 || last < first) {
			need_whole(X, 0, d, g, arena_printf(P->a, "the slice [%" PRId64 ", %" PRId64
							    ") cuts across its shards",
							    start, start + len));
			*y = *x;
			continue;
		}
		y->nblk = last - first + 1 == 1 ? 0 : last - first + 1;
		y->blk = y->nblk ? b + first : NULL;
	}
}

static void rule_concat(struct opctx *X)
{
	struct lp *P = X->P;
	int d = (int)X->o->attr[0];
	for (int g = 0; g < LG_COUNT; g++) {
		int64_t n = lay_group_size(P->c, g);
		bool any_d = false;
		for (int i = 0; i < X->o->nin; i++) {
			struct lay_axis *x = &X->in[i].g[g];
			any_d |= sharded(x) && x->dim == d;
		}
		struct lay_axis out = REPL;
		if (any_d) {
			/* Concat along the sharded dim: the result is block-sharded,
			 * one block per input (replicated inputs sliced locally when
			 * they divide, gathered otherwise). */
			int total = 0;
			for (int i = 0; i < X->o->nin; i++) {
				struct lay_axis *x = &X->in[i].g[g];
				if (sharded(x) && x->dim != d)
					need_whole(X, i, x->dim, g, "the other inputs are sharded along the concat dim");
				int nb;
				blocks_of(P, x, dim_size(X, i, d), &nb);
				total += nb;
			}
			bool ok = true;
			for (int i = 0; i < X->o->nin; i++) {
				struct lay_axis *x = &X->in[i].g[g];
				if (!sharded(x) && dim_size(X, i, d) % n &&
				    !(g == LG_CP && (P->c->ulysses_anything || P->c->ring_anything)))
					ok = false;
			}
			if (!ok) {
				for (int i = 0; i < X->o->nin; i++)
					need_whole(X, i, d, g, "another input of the concat "
						   "cannot be sharded evenly");
			} else {
				int64_t *blk = ARENA_ARRAY(P->a, int64_t, total);
				int k = 0;
				out = (struct lay_axis){ .kind = LAY_SHARD, .dim = (int8_t)d,
							 .origin = -1 };
				for (int i = 0; i < X->o->nin; i++) {
					struct lay_axis *x = &X->in[i].g[g];
					int nb;
					const int64_t *b = blocks_of(P, x, dim_size(X, i, d), &nb);
					for (int j = 0; j < nb; j++)
						blk[k++] = b[j];
					if (out.origin < 0)
						out.origin = x->origin;
					if (!sharded(x)) /* sliced locally */
						*x = (struct lay_axis){ .kind = LAY_SHARD, .dim = (int8_t)d,
									.origin = -1 };
				}
				out.nblk = total;
				out.blk = blk;
			}
		} else {
			/* Sharded on another dim: all inputs must agree. */
			for (int i = 0; i < X->o->nin; i++) {
				struct lay_axis *x = &X->in[i].g[g];
				if (!sharded(x))
					continue;
				if (!sharded(&out))
					out = *x;
				else if (out.dim != x->dim || !same_blocks(&out, x))
					need_whole(X, i, x->dim, g, "the inputs are sharded differently");
			}
			/* Replicated inputs have the same size along out.dim (not
			 * the concat dim): sliced locally to match. */
			for (int i = 0; sharded(&out) && i < X->o->nin; i++) {
				struct lay_axis *x = &X->in[i].g[g];
				if (!sharded(x))
					*x = out;
			}
		}
		X->out.g[g] = out;
	}
}

/* pad(x, dim, before, after): along a split dim the result is block-split
 * like concat(before-block, x, after-block), the constant blocks made locally
 * on each rank in its chunk's size (Flux's and QwenImage's joint [text, image]
 * sequence: a text mask padded with the image's ones lines up with the
 * joint keys). Pads that would split unevenly outside the anything modes
 * need x whole. Along another dim the split is kept. */
static void rule_pad(struct opctx *X)
{
	struct lp *P = X->P;
	int d = (int)X->o->attr[0];
	int64_t pads[2] = { X->o->attr[1], X->o->attr[2] };
	X->out = X->in[0];
	for (int g = 0; g < LG_COUNT; g++) {
		struct lay_axis *x = &X->in[0].g[g];
		struct lay_axis *y = &X->out.g[g];
		int64_t n = lay_group_size(P->c, g);
		if (!sharded(x) || x->dim != d)
			continue;
		bool anything = g == LG_CP && (P->c->ulysses_anything || P->c->ring_anything);
		if (!anything && (pads[0] % n || pads[1] % n)) {
			need_whole(X, 0, d, g, arena_printf(P->a, "its pads (%" PRId64 " before, %"
							    PRId64 " after) do not split evenly "
							    "over %" PRId64 " ranks", pads[0],
							    pads[1], n));
			*y = REPL;
			continue;
		}
		int nb;
		const int64_t *b = blocks_of(P, x, dim_size(X, 0, d), &nb);
		int64_t *blk = ARENA_ARRAY(P->a, int64_t, nb + 2);
		int k = 0;
		if (pads[0])
			blk[k++] = pads[0];
		for (int i = 0; i < nb; i++)
			blk[k++] = b[i];
		if (pads[1])
			blk[k++] = pads[1];
		y->nblk = k == 1 ? 0 : k;
		y->blk = k == 1 ? NULL : blk;
	}
}

/* The layout rope's cos/sin tables ([S, D]) must have on one axis group,
 * given x's ([B, S, heads * D]) there: rows follow a sequence split; a
 * feature split keeps the tables whole when every rank holds whole heads,
 * and slices their columns like x when there is one head cut into even
 * chunks (each rotation pair then stays on one rank). Any other feature
 * split cuts heads unevenly: x is gathered. */
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
	int64_t width = dim_size(X, 0, 2), hd = width / X->o->attr[0];
	int nb;
	const int64_t *b = blocks_of(P, x, width, &nb);
	bool whole = true;
	for (int i = 0; i < nb; i++)
		whole &= b[i] % n == 0 && (b[i] / n) % hd == 0;
	if (whole)
		return want;
	if (!x->nblk && width == hd && hd % n == 0 && (hd / n) % 2 == 0) {
		want = *x;
		want.dim = 1;
		return want;
	}
	need_whole(X, 0, 2, g, "its shards would split rope's heads "
		   "into pieces that are not whole heads or even chunks of one head");
	return want;
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
			struct finding *f = find(P, true, X->opi, "kv-sharded");
			if (f) {
				f->msg = arena_printf(P->a, "attention '%s' receives sequence-sharded "
						      "%s ('%s') but has no context-parallel style: "
						      "each rank would attend only to its own shard",
						      X->o->module, i == 1 ? "keys" : "values",
						      tname(P, X->o->in[i]));
				f->hint = arena_printf(P->a, "add a rule such as \"%s\" : ulysses, ring; "
						       "or do not split the inputs that reach its keys",
						       X->o->module);
				if (x->origin >= 0)
					fnote(f, style_loc(P, x->origin, ST_SPLIT),
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
			struct finding *f = find(P, true, X->opi, "cp-unsharded");
			if (f) {
				const struct style_use *u = mstyle(X, ST_ULYSSES);
				if (!u)
					u = mstyle(X, ST_RING);
				f->loc = u->src->loc;
				f->msg = arena_printf(P->a, "attention '%s' is context-parallel, but "
						      "its %s ('%s') is not split along the sequence",
						      X->o->module, i == 0 ? "query" : i == 1 ? "key" : "value",
						      tname(P, X->o->in[i]));
				f->hint = "split the model inputs that reach q, k and v "
					  "(split(NAME, dim = 1)), or remove ring/ulysses here";
				fnote(f, X->o->loc, "the attention is defined here");
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
	int64_t heads = X->o->attr[0];
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
			struct finding *f = find(P, true, X->opi, "tp-heads");
			if (f) {
				if (src->origin >= 0)
					f->loc = style_loc(P, src->origin, ST_COLWISE);
				f->msg = arena_printf(P->a, "colwise over tp = %" PRId64 " splits "
						      "the %" PRId64 " heads of attention '%s' "
						      "unevenly: the local width is not whole heads",
						      c->tp, heads, X->o->module);
				fnote(f, X->o->loc, arena_printf(P->a, "the attention with %" PRId64
								 " heads is defined here", heads));
				fnote(f, c->ax_tp >= 0 ? c->axes[c->ax_tp].loc : loc_none(),
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
		struct finding *f = find(P, true, X->opi, "ulysses-heads");
		if (!f)
			return;
		f->loc = us->src->loc;
		f->msg = arena_printf(P->a, "Ulysses over %" PRId64 " ranks needs the %s"
				      "heads of '%s' (%" PRId64 ") to divide by %" PRId64,
				      u, c->tp > 1 ? "local " : "", X->o->module, local, u);
		if (c->tp > 1)
			f->msg = arena_printf(P->a, "%s (%" PRId64 " heads / tp = %" PRId64 ")",
					      f->msg, heads, c->tp);
		f->hint = "set ulysses_anything = true in the context to pad heads, "
			  "or change the mesh";
		fnote(f, X->o->loc, "the attention is defined here");
		fnote(f, c->axes[c->ax_ulysses].loc, "ulysses is set here");
		return;
	}
	int64_t per = (local + u - 1) / u, pad = per * u - local;
	if (pad < per)
		return;
	struct finding *f = find(P, true, X->opi, "ulysses-pad");
	if (!f)
		return;
	f->loc = us->src->loc;
	f->msg = arena_printf(P->a, "ulysses_anything cannot pad the %" PRId64 " heads of '%s' "
			      "over %" PRId64 " ranks: %" PRId64 " padding head%s not fewer "
			      "than the %" PRId64 " heads per rank", local, X->o->module, u,
			      pad, pad == 1 ? " is" : "s are", per);
	fnote(f, c->ctx_loc[CTX_UANY], "ulysses_anything is set here");
	fnote(f, c->axes[c->ax_ulysses].loc, "ulysses is set here");
}

/* The dim of out that holds in's dim d whole, with the same elements before
 * it (what a reshape that adds or drops unit dims, or merges or splits dims
 * on either side of d, keeps in place: diffusers' rope tables [1, S, 1, D]
 * and dtpc's [S, D]); -1 when there is none. */
static int reshape_dim(const struct ir_shape *in, const struct ir_shape *out, int d)
{
	int64_t before = 1, o = 1;
	for (int k = 0; k < d; k++)
		before *= in->d[k];
	for (int k = 0; k < out->nd; k++) {
		if (o == before && out->d[k] == in->d[d])
			return k;
		o *= out->d[k];
		if (o > before)
			break;
	}
	return -1;
}

static void rule_reshape(struct opctx *X)
{
	const struct ir_shape *in = &X->P->m->tensors[X->o->in[0]].shape;
	const struct ir_shape *out = &X->o->shape_attr;
	int to[LG_COUNT];
	for (int g = 0; g < LG_COUNT; g++) {
		struct lay_axis *x = &X->in[0].g[g];
		to[g] = -1;
		if (!sharded(x))
			continue;
		/* Sharding survives a reshape that keeps the sharded dim whole
		 * with the same elements before it: each rank's local elements
		 * stay the same contiguous run. */
		to[g] = x->nblk ? -1 : reshape_dim(in, out, x->dim);
		if (to[g] < 0)
			need_whole(X, 0, x->dim, g, "the reshape moves its sharded dim");
	}
	X->out = X->in[0];
	for (int g = 0; g < LG_COUNT; g++)
		if (to[g] >= 0)
			X->out.g[g].dim = (int8_t)to[g];
}

/* timestep_embedding and rope_freqs compute each row (a timestep, a
 * position) on its own: the output is split as the input's rows are. A
 * position's axes are read together: ids split along them are gathered. */
static void rule_rows(struct opctx *X)
{
	if (X->o->kind == OP_rope_freqs)
		for (int g = 0; g < LG_COUNT; g++)
			need_whole(X, 0, 1, g, "rope_freqs reads every axis of a position");
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

/* ---- driver ------------------------------------------------------------------ */

int *layout_module_ends(struct arena *a, const struct plan_cfg *c, int *next_end)
{
	const struct ir_model *m = c->model;
	int *ends_at = ARENA_ARRAY(a, int, m->nops + 1);
	for (int i = 0; i <= m->nops; i++)
		ends_at[i] = -1;
	for (int mi = 0; mi < m->nmodules; mi++) {
		enum module_kind k = m->modules[mi].kind;
		if ((k != MOD_INSTANCE && k != MOD_TUPLE) || !c->styles[mi])
			continue;
		next_end[mi] = ends_at[m->modules[mi].end_op];
		ends_at[m->modules[mi].end_op] = mi;
	}
	return ends_at;
}

/* gather(dim = D) on a module none of whose outputs is split along D over
 * ring x ulysses would do nothing: an error at the style (once per rule),
 * unless the mesh has no context axes (a plan reused across meshes). */
static void gather_nothing(struct lp *P, int mi, const struct style_use *u, const int *outs,
			   int n)
{
	const struct lay_axis *other = NULL;
	for (int i = 0; i < n; i++)
		if (sharded(&P->L[outs[i]].g[LG_CP]))
			other = &P->L[outs[i]].g[LG_CP];
	struct finding *f = find_key(P, true, -1, arena_printf(P->a, "gather/%d", u->rule),
				     u->src->loc);
	if (!f)
		return;
	f->msg = arena_printf(P->a, "gather(%sdim = %d) on '%s' does nothing: its output is not "
			      "split along dim %d over ring x ulysses",
			      u->out_index >= 0 ? arena_printf(P->a, "out.%d, ", u->out_index) : "",
			      u->dim, P->m->modules[mi].name, u->dim);
	if (other)
		f->hint = arena_printf(P->a, "its output is split along dim %d: gather(%sdim = %d)",
				       other->dim, u->out_index >= 0 ? arena_printf(P->a, "out.%d, ",
										    u->out_index) : "",
				       other->dim);
	else
		f->hint = "remove the gather; only context-parallel splits are gathered";
}

static void module_out_styles(struct lp *P, int mi, const int *outs, int n)
{
	const struct plan_cfg *c = P->c;
	for (const struct style_use *u = c->styles[mi]; u; u = u->next) {
		bool gathered = false;
		for (int i = 0; i < n; i++) {
			if (u->out_index >= 0 && u->out_index != i)
				continue; /* split / gather of another output */
			struct lay_axis *x = &P->L[outs[i]].g[LG_CP];
			if (u->kind == ST_SPLIT && u->port_tensor == -1 && plan_cp(c) > 1)
				apply_split(P, x, u);
			else if (u->kind == ST_GATHER && sharded(x) && x->dim == u->dim) {
				*x = REPL;
				gathered = true;
			}
		}
		if (u->kind == ST_GATHER && !gathered && plan_cp(c) > 1)
			gather_nothing(P, mi, u, u->out_index >= 0 ? outs + u->out_index : outs,
				       u->out_index >= 0 ? 1 : n);
	}
	struct layout *after = ARENA_ARRAY(P->a, struct layout, n ? n : 1);
	for (int i = 0; i < n; i++)
		after[i] = P->L[outs[i]];
	P->res->module_out[mi] = after;
}

static void emit(struct lp *P)
{
	for (struct finding *f = P->head; f; f = f->next) {
		const char *more = "";
		if (f->count > 1)
			more = arena_printf(P->a, " (and in %d more repeat block%s)",
					    f->count - 1, f->count > 2 ? "s" : "");
		if (f->error)
			diag_error(P->d, f->loc, "%s%s", f->msg, more);
		else
			diag_remark(P->d, f->loc, "%s%s", f->msg, more);
		for (int i = 0; i < f->nn; i++)
			if (f->nloc[i].file >= 0)
				diag_note(P->d, f->nloc[i], "%s", f->ntext[i]);
		if (f->hint)
			diag_hint(P->d, "%s", f->hint);
	}
}

static struct layout_result *layout_pass(struct arena *a, struct diag_ctx *d,
					 const struct plan_cfg *c, bool *no_dist, bool report);

/* A distributed norm pays off when its output stays split over tp (q/k
 * norms before a tp attention); where its output is all-gathered over tp
 * anyway, gathering its input is as cheap and needs no all-reduce. So a
 * first pass, unreported, finds those norms, and the reported pass gathers
 * before them. */
struct layout_result *layout_run(struct arena *a, struct diag_ctx *d,
				 const struct plan_cfg *c)
{
	bool *no_dist = ARENA_ARRAY(a, bool, c->model->nops ? c->model->nops : 1);
	if (lay_group_size(c, LG_TP) > 1 && layout_pass(a, d, c, no_dist, false))
		return layout_pass(a, d, c, no_dist, true);
	return layout_pass(a, d, c, no_dist, true);
}

/* One pass; unreported, it marks in no_dist the distributed norms whose
 * output was all-gathered over tp. */
static struct layout_result *layout_pass(struct arena *a, struct diag_ctx *d,
					 const struct plan_cfg *c, bool *no_dist, bool report)
{
	const struct ir_model *m = c->model;
	struct layout_result *res = ARENA_NEW(a, struct layout_result);
	struct lp P = { .a = a, .d = d, .c = c, .m = m, .res = res,
			.keys = strmap_create(a, 64), .no_dist = no_dist, .report = report };
	P.tail = &P.head;
	P.L = ARENA_ARRAY(a, struct layout, m->ntensors ? m->ntensors : 1);
	P.gathered = ARENA_ARRAY(a, uint8_t, m->ntensors ? m->ntensors : 1);
	res->tensors = P.L;
	res->produced = ARENA_ARRAY(a, struct layout, m->ntensors ? m->ntensors : 1);
	res->in = ARENA_ARRAY(a, struct layout *, m->nops ? m->nops : 1);
	res->dist_norm = ARENA_ARRAY(a, bool, m->nops ? m->nops : 1);
	res->module_out = ARENA_ARRAY(a, struct layout *, m->nmodules ? m->nmodules : 1);
	struct layout whole;
	for (int g = 0; g < LG_COUNT; g++)
		whole.g[g] = REPL;
	for (int t = 0; t < m->ntensors; t++)
		P.L[t] = res->produced[t] = whole;
	if (plan_cp(c) > 1)
		for (int i = 0; i < m->ninputs; i++)
			splits_of(&P, 0, m->inputs[i], &P.L[m->inputs[i]].g[LG_CP]);
	/* cfg splits the batch: dim 0 of the inputs plan.c found (c->cfg_input) */
	if (lay_group_size(c, LG_CFG) > 1)
		for (int i = 0; i < m->ninputs; i++)
			if (c->cfg_input[i])
				P.L[m->inputs[i]].g[LG_CFG] = (struct lay_axis){
					.kind = LAY_SHARD, .dim = 0, .origin = -1 };

	/* Repeat instances and tuples whose outputs carry split/gather styles,
	 * by the op index at which they end (inner ones first). */
	int *next_end = ARENA_ARRAY(a, int, m->nmodules);
	int *ends_at = layout_module_ends(a, c, next_end);
	for (int mi = ends_at[0]; mi >= 0; mi = next_end[mi])
		module_out_styles(&P, mi, m->modules[mi].outputs, m->modules[mi].noutputs);

	for (int opi = 0; opi < m->nops; opi++) {
		const struct ir_op *o = &m->ops[opi];
		struct opctx X = { .P = &P, .opi = opi, .o = o };
		X.in = ARENA_ARRAY(a, struct layout, o->nin);
		for (int i = 0; i < o->nin; i++)
			X.in[i] = view(&P, opi, o->in[i]);
		switch (o->kind) {
		case OP_linear: rule_linear(&X); break;
		case OP_layer_norm:
		case OP_rms_norm: rule_norm(&X); break;
		case OP_gelu:
		case OP_silu:
		case OP_add:
		case OP_mul:
		case OP_modulate: rule_pointwise(&X); break;
		case OP_slice: rule_slice(&X); break;
		case OP_concat: rule_concat(&X); break;
		case OP_rope: rule_rope(&X); break;
		case OP_attention: rule_attention(&X); break;
		case OP_reshape: rule_reshape(&X); break;
		case OP_pad: rule_pad(&X); break;
		case OP_timestep_embedding:
		case OP_rope_freqs: rule_rows(&X); break;
		case OP_patch_embed:
		case OP_unpatchify: rule_patches(&X); break;
		case OP_grid_ids:
		case OP_text_ids:
		case OP_param:
		case OP_shard:
		case OP_all_gather:
		case OP_all_reduce:
		case OP_norm_stats:
		case OP_reduce_scatter:
		case OP_ulysses_a2a:
		case OP_ring_attention:
		case OP_linear_act: /* made after the layouts (fuse.c) */
		case OP_COUNT: X.out = whole; break;
		}
		res->in[opi] = X.in;
		P.L[o->out] = X.out;
		res->produced[o->out] = X.out;
		if (o->module_index >= 0)
			module_out_styles(&P, o->module_index, &o->out, 1);
		for (int mi = ends_at[opi + 1]; mi >= 0; mi = next_end[mi])
			module_out_styles(&P, mi, m->modules[mi].outputs,
					  m->modules[mi].noutputs);
	}
	module_out_styles(&P, 0, m->outputs, m->noutputs);

	/* Outputs leave replicated: the runtime hands back whole tensors. A
	 * batch split by cfg is gathered as the style means to (no remark). */
	for (int i = 0; i < m->noutputs; i++) {
		int t = m->outputs[i];
		for (int g = 0; g < LG_COUNT; g++) {
			struct lay_axis *x = &P.L[t].g[g];
			/* the style's own gather (as rowwise's all-reduce): lowered
			 * where the output leaves, not an inserted collective */
			if (!sharded(x) || (g == LG_CFG && x->dim == 0) || sp_split(c, g, x->dim))
				continue;
			gather(&P, -1, t, g, "outputs are returned whole", x->origin);
			if (!report)
				continue;
			bool tp = g == LG_TP;
			diag_remark(d, m->output_loc[i],
				    "output '%s' is still %s-sharded at the end of the model; "
				    "an all-gather of %s is inserted", m->output_names[i],
				    tp ? "tp" : g == LG_CP ? "sequence" : "cfg",
				    human_bytes(a, shape_numel(&m->tensors[t].shape) *
						   graph_dtype_size(c->dtype)));
			if (x->origin >= 0)
				diag_note(d, style_loc(&P, x->origin, origin_style(g)),
					  "the sharding comes from this rule");
			/* A carried variable has no module of its own: its
			 * repeat block's output is what a rule can gather. A
			 * model input has no producing op: the root gathers it. */
			int prod = m->tensors[t].producer;
			const struct ir_op *po = prod >= 0 ? &m->ops[prod] : NULL;
			int mi = !po ? 0 : po->module_index >= 0 ? po->module_index : po->instance;
			if (tp)
				diag_hint(d, "end the tensor-parallel path with a rowwise linear, "
					  "which returns replicated outputs");
			else if (g == LG_CP && mi >= 0)
				diag_hint(d, "gather it explicitly: \"%s\" : gather(dim = %d);",
					  m->modules[mi].name, x->dim);
		}
	}
	if (report) {
		emit(&P);
		return res;
	}
	bool any = false;
	for (int opi = 0; opi < m->nops; opi++)
		if (res->dist_norm[opi] && (P.gathered[m->ops[opi].out] & (1u << LG_TP)))
			any = no_dist[opi] = true;
	return any ? res : NULL;
}
