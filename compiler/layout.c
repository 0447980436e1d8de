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
#include "op_compile.h"
#include "op_layout.h"
#include "strmap.h"

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
struct finding *lay_find(struct lp *P, bool error, int opi, const char *kind)
{
	const struct ir_op *o = &P->m->ops[opi];
	return find_key(P, error, opi, arena_printf(P->a, "%p/%s", (const void *)o->stmt, kind),
			o->loc);
}

void lay_fnote(struct finding *f, dtpc_loc loc, const char *text)
{
	if (f->nn < 3) {
		f->nloc[f->nn] = loc;
		f->ntext[f->nn++] = text;
	}
}

const char *lay_tname(struct lp *P, int t)
{
	return P->m->tensors[t].name;
}

const char *lay_human_bytes(struct arena *a, int64_t b)
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
dtpc_loc lay_style_loc(struct lp *P, int rule, enum style_kind k)
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
void lay_gather(struct lp *P, int opi, int t, enum lay_group g, const char *why,
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
	struct finding *f = lay_find(P, false, opi,
				     arena_printf(P->a, "gather%d/%p", (int)g,
					      prod >= 0 ? (const void *)P->m->ops[prod].stmt
							: (const void *)lay_tname(P, t)));
	if (!f)
		return;
	const struct plan_cfg *c = P->c;
	int64_t n = lay_group_size(c, g);
	int64_t bytes = shape_numel(&P->m->tensors[t].shape) * graph_dtype_size(c->dtype);
	f->msg = arena_printf(P->a, "all-gather of '%s' %s over %s (%" PRId64
			      " ranks) inserted before '%s': %s; %s in %s",
			      lay_tname(P, t), shape_str(P->a, &P->m->tensors[t].shape),
			      lay_groups[g].name, n, P->m->ops[opi].module, why,
			      lay_human_bytes(P->a, bytes),
			      c->dtype == G_DT_F32 ? "float32" : graph_dtype_name(c->dtype));
	if (origin >= 0)
		lay_fnote(f, lay_style_loc(P, origin, origin_style(g)),
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

/* Blocks of x as a list (one block = the whole dim of size `size`). */
const int64_t *lay_blocks_of(struct lp *P, const struct lay_axis *x,
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
			diag_hint_context(P->d, f->hint_context, "%s", f->hint);
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
		/* an op without a rule (the generators, param, graph-only ops)
		 * produces a whole tensor */
		const struct op_compile *oc = op_compile[o->kind];
		if (oc->layout) {
			struct diag *mark = d->tail;
			oc->layout(&X);
			diag_claim(d, mark);
		} else
			X.out = whole;
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
			lay_gather(&P, -1, t, g, "outputs are returned whole", x->origin);
			if (!report)
				continue;
			bool tp = g == LG_TP;
			diag_remark(d, m->output_loc[i],
				    "output '%s' is still %s-sharded at the end of the model; "
				    "an all-gather of %s is inserted", m->output_names[i],
				    tp ? "tp" : g == LG_CP ? "sequence" : "cfg",
				    lay_human_bytes(a, shape_numel(&m->tensors[t].shape) *
						    graph_dtype_size(c->dtype)));
			if (x->origin >= 0)
				diag_note(d, lay_style_loc(&P, x->origin, origin_style(g)),
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
