/* fold.c — positions folded into rope_freqs, so they never touch storage.
 *
 * grid_ids and text_ids write integer positions into a tensor of the
 * graph's one storage dtype, which in bf16 holds integers exactly only up
 * to 256 (f16: 2048); diffusers computes positions exactly (QwenImage's
 * text positions reach ~544). Where a rope_freqs reads a generator's whole
 * output directly, the generator is folded into it: the graph's rope_freqs
 * has no ids operand and the generator's attributes (G_OF_GRID,
 * G_OF_TEXT: graph/graph.h), and the device computes the positions in
 * float32 on the fly. A generator left without readers (not an output)
 * is dropped with its tensor. The fold runs in every dtype: a float32
 * graph narrowed at run time (dtpc run --dtype) gets exact positions too,
 * and the ids' memory and op go away.
 *
 * A generator that stays (its ids read by another op, split before a
 * rope_freqs, an output, or text with 6 axes, which leaves no attribute
 * for its first position) still stores its positions: such a plan is
 * refused where they are not exact in its dtype (fold_check_positions,
 * after the layouts say which ids are read whole). */
#include "fold.h"

#include <inttypes.h>
#include <string.h>

#include "arena.h"
#include "graph/op_attrs.h"

/* The text's axes fit beside its first position in the attributes of the
 * rope_freqs it folds into (graph/graph.h: fewer than G_NATTR axes). */
static bool axes_fit(bool grid, int64_t naxes)
{
	return grid || naxes < G_NATTR;
}

/* ---- the plan: which generators stay --------------------------------------------- */

/* The generator op g stays in the graph (fold_positions cannot fold it
 * away): its output is an output, or read by an op other than a rope_freqs
 * that takes it whole (a split in between is a shard op), or its axes do
 * not fit. One nothing reads is dropped. */
static bool stays(const struct plan_cfg *c, const struct layout_result *lay, int g)
{
	const struct ir_model *m = c->model;
	const struct ir_op *o = &m->ops[g];
	bool read = false;

	for (int i = 0; i < m->noutputs; i++)
		if (m->outputs[i] == o->out)
			return true;
	for (int i = 0; i < m->nops; i++)
		for (int k = 0; k < m->ops[i].nin; k++) {
			if (m->ops[i].in[k] != o->out)
				continue;
			read = true;
			if (m->ops[i].kind != OP_rope_freqs)
				return true;
			const struct layout *in = &lay->in[i][k];
			for (int lg = 0; lg < LG_COUNT; lg++)
				if (in->g[lg].kind != LAY_REPL)
					return true;
		}
	return read && !axes_fit(o->kind == OP_grid_ids, o->kind == OP_grid_ids ? 3 : o->text_ids.axes);
}

void fold_check_positions(struct diag_ctx *d, const struct plan_cfg *c,
			  const struct layout_result *lay)
{
	int64_t exact = graph_dtype_exact_ints(c->dtype);

	for (int i = 0; i < c->model->nops; i++) {
		const struct ir_op *o = &c->model->ops[i];
		if (o->kind != OP_grid_ids && o->kind != OP_text_ids)
			continue;
		bool grid = o->kind == OP_grid_ids;
		/* graph_ids_extent's order: frames, height, width or length, first, axes */
		const int64_t pos[3] = {
			grid ? o->grid_ids.frames : o->text_ids.length,
			grid ? o->grid_ids.height : o->text_ids.first,
			grid ? o->grid_ids.width : o->text_ids.axes,
		};
		int64_t ext = graph_ids_extent(grid, pos, o->flag);
		if (ext <= exact || !stays(c, lay, i))
			continue;
		diag_error(d, o->loc, "%s: position %" PRId64 " is not exact in %s storage "
			   "(integers up to %" PRId64 " are)", op_table[o->kind].name, ext,
			   graph_dtype_name(c->dtype), exact);
		diag_note(d, c->dtype_loc, "the storage dtype is set here");
		bool f16_holds = c->dtype == G_DT_BF16 && ext <= graph_dtype_exact_ints(G_DT_F16);
		diag_hint(d, "rope_freqs computes exact positions itself when it alone reads them "
			  "whole; else diffusers' exact positions need f32%s, or fewer positions",
			  f16_holds ? " or f16 (exact up to 2048)" : "");
	}
}

/* ---- the graph ---------------------------------------------------------------------- */

static bool whole(const struct g_tensor *t)
{
	for (int d = 0; d < t->ndim; d++)
		if (t->pattern[d] >= 0)
			return false;
	return true;
}

void fold_drop_ops(struct arena *a, struct g_graph *g, const bool *drop)
{
	uint32_t *map = ARENA_ARRAY(a, uint32_t, g->ntensors);
	bool *gone = ARENA_ARRAY(a, bool, g->ntensors);
	uint32_t nt = 0, no = 0, nopnd = 0;

	for (uint32_t i = 0; i < g->nops; i++)
		gone[g->ops[i].out] |= drop[i];
	struct g_tensor *tensors = ARENA_ARRAY(a, struct g_tensor, g->ntensors);
	uint8_t *dtypes = g->dtypes ? ARENA_ARRAY(a, uint8_t, g->ntensors) : NULL;
	for (uint32_t t = 0; t < g->ntensors; t++) {
		if (gone[t])
			continue;
		map[t] = nt;
		if (dtypes)
			dtypes[nt] = g->dtypes[t];
		tensors[nt++] = g->tensors[t];
	}
	for (uint32_t i = 0; i < g->nops; i++)
		nopnd += drop[i] ? 0 : g->ops[i].nin;
	struct g_op *ops = ARENA_ARRAY(a, struct g_op, g->nops);
	uint32_t *operands = ARENA_ARRAY(a, uint32_t, nopnd ? nopnd : 1);
	nopnd = 0;
	for (uint32_t i = 0; i < g->nops; i++) {
		if (drop[i])
			continue;
		struct g_op o = g->ops[i];
		for (uint32_t k = 0; k < o.nin; k++)
			operands[nopnd + k] = map[g->operands[o.in0 + k]];
		o.in0 = nopnd;
		nopnd += o.nin;
		o.out = map[o.out];
		o.scratch = o.scratch < 0 ? -1 : (int32_t)map[o.scratch];
		ops[no++] = o;
	}
	uint32_t *io = ARENA_ARRAY(a, uint32_t, g->ninputs + g->noutputs + 1);
	for (uint32_t k = 0; k < g->ninputs; k++)
		io[k] = map[g->inputs[k]];
	for (uint32_t k = 0; k < g->noutputs; k++)
		io[g->ninputs + k] = map[g->outputs[k]];
	if (g->nweights) {
		struct g_weight *w = ARENA_ARRAY(a, struct g_weight, g->nweights);
		for (uint32_t k = 0; k < g->nweights; k++) {
			w[k] = g->weights[k];
			w[k].tensor = map[w[k].tensor];
		}
		g->weights = w;
	}
	g->tensors = tensors;
	g->dtypes = dtypes;
	g->ntensors = nt;
	g->ops = ops;
	g->nops = no;
	g->operands = operands;
	g->noperands = nopnd;
	g->inputs = io;
	g->outputs = io + g->ninputs;
}

void fold_positions(struct arena *a, struct g_graph *g)
{
	int32_t *producer = ARENA_ARRAY(a, int32_t, g->ntensors);
	uint32_t *readers = ARENA_ARRAY(a, uint32_t, g->ntensors);
	struct g_op *ops = (struct g_op *)g->ops; /* the lowering's arrays: writable */
	bool folded = false;

	for (uint32_t t = 0; t < g->ntensors; t++)
		producer[t] = -1;
	for (uint32_t i = 0; i < g->nops; i++)
		producer[ops[i].out] = (int32_t)i;
	for (uint32_t i = 0; i < g->nops; i++) {
		struct g_op *o = &ops[i];
		if (o->kind != OP_rope_freqs || o->nin != 1)
			continue;
		uint32_t ids = g->operands[o->in0];
		int32_t p = producer[ids];
		const struct g_op *gen = p < 0 ? NULL : &ops[p];
		if (!gen || (gen->kind != OP_grid_ids && gen->kind != OP_text_ids))
			continue;
		bool grid = gen->kind == OP_grid_ids;
		/* a generator's output is whole (layout.c), and so the table
		 * that reads it directly; the runtime computes whole tables */
		if (!axes_fit(grid, grid ? 3 : ga_text_ids_get(gen).axes) ||
		    !whole(&g->tensors[ids]) || !whole(&g->tensors[o->out]))
			continue;
		struct ga_rope_freqs rf = ga_rope_freqs_get(o);
		if (grid) {
			struct ga_grid_ids gi = ga_grid_ids_get(gen);
			rf.grid = true;
			rf.frames = gi.frames;
			rf.height = gi.height;
			rf.width = gi.width;
			rf.center = gi.center;
		} else {
			rf.text = true;
			rf.first = ga_text_ids_get(gen).first;
		}
		ga_rope_freqs_set(o, rf);
		o->nin = 0;
		folded = true;
	}
	if (folded)
		g->need.caps |= G_CAP_POSITIONS;

	/* generators nothing reads (any more, or ever: fold_check_positions
	 * takes those as gone too) */
	for (uint32_t i = 0; i < g->nops; i++)
		for (uint32_t k = 0; k < ops[i].nin; k++)
			readers[g->operands[ops[i].in0 + k]]++;
	for (uint32_t k = 0; k < g->noutputs; k++)
		readers[g->outputs[k]]++;
	bool *drop = ARENA_ARRAY(a, bool, g->nops), any = false;
	for (uint32_t i = 0; i < g->nops; i++) {
		drop[i] = (ops[i].kind == OP_grid_ids || ops[i].kind == OP_text_ids) &&
			  !readers[ops[i].out];
		any |= drop[i];
	}
	if (any)
		fold_drop_ops(a, g, drop);
}
