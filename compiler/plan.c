/* plan.c — resolves a plan: its model, mesh, options and rules, and checks
 * the parallel rules of docs/language.md ("What dtpc check catches") that
 * need no data flow.
 *
 * Errors about a rule are located at the rule (that is what a user edits),
 * with notes at the model op and the mesh axis involved. A rule that matches
 * many blocks reports a violation once, naming the first module and how many
 * more share it, instead of once per block. */
#include "plan.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "glob.h"
#include "parse.h"
#include "strmap.h"
#include "graph/graph.h"

const char *const style_names[ST_COUNT] = {
	"colwise", "rowwise", "replicate", "ring", "ulysses", "split", "gather", "fsdp",
};

static const char *const known_axes[] = { "ring", "ulysses", "tp", "cfg", "dp" };
static const char *const ctx_names[] = {
	"convert_to_fp32", "rotate_method", "ulysses_anything", "ring_anything",
	"ring_degree", "ulysses_degree", "tp_degree", "sequence_parallel",
};

/* Rules times the modules each matches, over the whole plan: real plans
 * are far below it (a large DiT: 2,000 modules, 50 rules). 50,000 literal
 * rules on a 50,000-block model took minutes and 10 GB to check; at the
 * cap a check takes about a second and 500 MB. */
#define RULE_PAIRS_MAX (1 << 22)

struct resolver {
	struct arena *a;
	struct diag_ctx *d;
	struct plan_cfg *c;
	int *matched;            /* apply_rule's scratch: one per module */
	struct strmap *by_name;  /* module name -> index, for literal globs */
	int64_t pairs;           /* (rule, module) matches so far */
};

const struct style_use *plan_style(const struct plan_cfg *c, int mi,
				   enum style_kind k)
{
	for (const struct style_use *u = c->styles[mi]; u; u = u->next)
		if (u->kind == k)
			return u;
	return NULL;
}

bool plan_fsdp(const struct plan_cfg *c, int opi)
{
	const struct ir_op *o = &c->model->ops[opi];
	if (o->module_index >= 0 && plan_style(c, o->module_index, ST_FSDP))
		return true;
	for (int mi = o->instance; mi >= 0; mi = c->model->modules[mi].parent)
		if (plan_style(c, mi, ST_FSDP))
			return true;
	return plan_style(c, 0, ST_FSDP) != NULL; /* module 0 is the root */
}

int64_t plan_cp(const struct plan_cfg *c)
{
	return c->ring * c->ulysses;
}

/* Names in a plan's rules are the model's parameters, so packed blocks can
 * follow the model's sizes: rowwise(blocks = [hidden, mlp_hidden]). */
static enum lookup_result model_param(void *ud, const char *name, dtpc_loc loc,
				      struct value *out)
{
	struct resolver *R = ud;
	(void)loc;
	const struct ir_model *m = R->c ? R->c->model : NULL;
	for (int i = 0; m && i < m->nparams; i++)
		if (!strcmp(m->param_names[i], name)) {
			*out = m->params[i];
			return LOOKUP_OK;
		}
	return LOOKUP_UNKNOWN;
}

static const char *const *param_names(void *ud, int *n)
{
	struct resolver *R = ud;
	const struct ir_model *m = R->c ? R->c->model : NULL;
	*n = m ? m->nparams : 0;
	return m ? m->param_names : NULL;
}

static bool const_eval(struct resolver *R, const struct expr *e, struct value *v)
{
	struct eval_ctx ec = { .arena = R->a, .diag = R->d, .lookup = model_param,
			       .ud = R, .candidates = param_names };
	return expr_eval(&ec, e, v);
}

/* ---- mesh and options ------------------------------------------------------ */

static void read_mesh(struct resolver *R, const struct pstmt *s)
{
	struct plan_cfg *c = R->c;
	c->mesh_loc = s->loc;
	for (const struct arg *kv = s->kv; kv; kv = kv->next) {
		bool known = false;
		for (size_t i = 0; i < sizeof known_axes / sizeof *known_axes; i++)
			known |= !strcmp(kv->name, known_axes[i]);
		if (!known) {
			diag_error(R->d, kv->name_loc, "unknown mesh axis '%s'", kv->name);
			const char *best = closest_name(kv->name, known_axes,
							(int)(sizeof known_axes / sizeof *known_axes));
			if (!strcmp(kv->name, "fsdp"))
				/* issue 12 and diffusers' mesh name it as an axis */
				diag_hint(R->d, "fsdp is a style, not an axis: '\"GLOB\" : fsdp;' "
					  "stores the modules' weights split over ring x ulysses");
			else if (best)
				diag_hint(R->d, "did you mean '%s'?", best);
			else
				diag_hint(R->d, "mesh axes are ring, ulysses, tp, cfg and dp");
			continue;
		}
		int dup = -1;
		for (int i = 0; i < c->naxes; i++)
			if (!strcmp(c->axes[i].name, kv->name))
				dup = i;
		if (dup >= 0) {
			diag_error(R->d, kv->name_loc, "mesh axis '%s' is given twice",
				   kv->name);
			diag_note(R->d, c->axes[dup].loc, "first given here");
			continue;
		}
		struct value v;
		if (!const_eval(R, kv->val, &v))
			continue;
		if (v.kind != VAL_INT || v.i < 1 || v.i > 1 << 20) {
			diag_error(R->d, kv->val->loc,
				   "mesh axis '%s' must have a size from 1 to %d, not %s",
				   kv->name, 1 << 20, value_str(R->a, &v));
			continue;
		}
		if (c->naxes == MESH_MAX_AXES)
			continue;
		/* The axes taken so far make at most G_MAX_WORLD ranks, so this
		 * product (<= 2^24 * 2^20) cannot overflow. */
		int64_t world = v.i;
		for (int i = 0; i < c->naxes; i++)
			world *= c->axes[i].size;
		if (world > G_MAX_WORLD) {
			diag_error(R->d, kv->val->loc,
				   "the mesh would have %" PRId64 " ranks: a graph holds at most "
				   "%d (2^24)", world, G_MAX_WORLD);
			continue;
		}
		c->axes[c->naxes++] = (struct mesh_axis){ kv->name, v.i, kv->loc };
	}
}

static int axis_index(const struct plan_cfg *c, const char *name)
{
	for (int i = 0; i < c->naxes; i++)
		if (!strcmp(c->axes[i].name, name))
			return i;
	return -1;
}

static void read_options(struct resolver *R, const struct pstmt *s,
			 bool *seen, int64_t *degree)
{
	struct plan_cfg *c = R->c;
	for (const struct arg *kv = s->kv; kv; kv = kv->next) {
		int k = -1;
		for (int i = 0; i < (int)(sizeof ctx_names / sizeof *ctx_names); i++)
			if (!strcmp(kv->name, ctx_names[i]))
				k = i;
		bool allowed = s->kind == PS_CONTEXT ? k >= 0 && k != CTX_TDEG && k != CTX_SP
						     : k == CTX_TDEG || k == CTX_SP;
		if (!allowed) {
			diag_error(R->d, kv->name_loc, "unknown %s option '%s'",
				   s->kind == PS_CONTEXT ? "context" : "tensor", kv->name);
			const char *best = closest_name(kv->name, ctx_names,
							(int)(sizeof ctx_names / sizeof *ctx_names));
			if (best && strcmp(best, kv->name))
				diag_hint(R->d, "did you mean '%s'?", best);
			else if (s->kind == PS_CONTEXT)
				diag_hint(R->d, "context options: convert_to_fp32, rotate_method, "
					  "ulysses_anything, ring_anything, ring_degree, ulysses_degree");
			else
				diag_hint(R->d, "tensor options: tp_degree, sequence_parallel");
			continue;
		}
		if (seen[k]) {
			diag_error(R->d, kv->name_loc, "option '%s' is given twice", kv->name);
			diag_note(R->d, c->ctx_loc[k], "first given here");
			continue;
		}
		seen[k] = true;
		c->ctx_loc[k] = kv->loc;
		struct value v;
		if (!const_eval(R, kv->val, &v))
			continue;
		switch (k) {
		case CTX_FP32:
		case CTX_UANY:
		case CTX_RANY:
		case CTX_SP:
			if (v.kind != VAL_BOOL) {
				diag_error(R->d, kv->val->loc, "'%s' must be true or false, not %s",
					   kv->name, value_str(R->a, &v));
				break;
			}
			if (k == CTX_FP32)
				c->convert_to_fp32 = v.i;
			else if (k == CTX_UANY)
				c->ulysses_anything = v.i;
			else if (k == CTX_SP)
				c->seq_parallel = v.i;
			else
				c->ring_anything = v.i;
			break;
		case CTX_ROTATE:
			if (v.kind == VAL_STR && !strcmp(v.s, "allgather"))
				c->rotate = ROTATE_ALLGATHER;
			else if (v.kind == VAL_STR && !strcmp(v.s, "alltoall"))
				c->rotate = ROTATE_ALLTOALL;
			else
				diag_error(R->d, kv->val->loc,
					   "rotate_method must be \"allgather\" or \"alltoall\", not %s",
					   value_str(R->a, &v));
			break;
		default:
			if (v.kind != VAL_INT || v.i < 1) {
				diag_error(R->d, kv->val->loc,
					   "'%s' must be a positive integer, not %s", kv->name,
					   value_str(R->a, &v));
				break;
			}
			degree[k] = v.i;
		}
	}
}

/* Plan settings (`NAME = value;`): dtype, the storage dtype of every
 * tensor (docs/language.md). */
static const char *const setting_names[] = { "dtype" };
static const char *const dtype_names[] = { "f32", "bf16", "f16" };
static const enum g_dtype dtype_values[] = { G_DT_F32, G_DT_BF16, G_DT_F16 };

static void read_setting(struct resolver *R, const struct pstmt *s, const struct pstmt **seen)
{
	struct plan_cfg *c = R->c;
	const struct arg *kv = s->kv;
	if (strcmp(kv->name, "dtype")) {
		diag_error(R->d, kv->name_loc, "unknown plan setting '%s'", kv->name);
		const char *best = closest_name(kv->name, setting_names, 1);
		if (best)
			diag_hint(R->d, "did you mean '%s'?", best);
		else
			diag_hint(R->d, "plan settings: dtype = \"f32\" | \"bf16\" | \"f16\"");
		return;
	}
	if (*seen) {
		diag_error(R->d, s->loc, "the dtype is set twice");
		diag_note(R->d, (*seen)->loc, "first set here");
		return;
	}
	*seen = s;
	struct value v;
	if (!const_eval(R, kv->val, &v))
		return;
	for (int i = 0; v.kind == VAL_STR && i < 3; i++)
		if (!strcmp(v.s, dtype_names[i])) {
			c->dtype = dtype_values[i];
			c->dtype_loc = s->loc;
			return;
		}
	diag_error(R->d, kv->val->loc, "dtype must be \"f32\", \"bf16\" or \"f16\", not %s",
		   value_str(R->a, &v));
	const char *best = v.kind == VAL_STR ? closest_name(v.s, dtype_names, 3) : NULL;
	if (best)
		diag_hint(R->d, "did you mean \"%s\"?", best);
}

/* ring_degree / ulysses_degree / tp_degree may restate the mesh, and must
 * then agree with it. */
static void check_degree(struct resolver *R, int k, int64_t deg, int64_t mesh,
			 int ax, const char *axis)
{
	if (!deg || deg == mesh)
		return;
	struct plan_cfg *c = R->c;
	diag_error(R->d, c->ctx_loc[k], "%s = %" PRId64 " disagrees with the mesh, "
		   "where %s = %" PRId64, ctx_names[k], deg, axis, mesh);
	if (ax >= 0)
		diag_note(R->d, c->axes[ax].loc, "mesh axis '%s' is set here", axis);
	else
		diag_note(R->d, c->mesh_loc.file >= 0 ? c->mesh_loc : c->decl->name_loc,
			  "the mesh has no '%s' axis, so its size is 1", axis);
}

static dtpc_loc axis_loc(const struct plan_cfg *c, int ax)
{
	if (ax >= 0)
		return c->axes[ax].loc;
	return c->mesh_loc.file >= 0 ? c->mesh_loc : c->decl->name_loc;
}

static void check_context(struct resolver *R)
{
	struct plan_cfg *c = R->c;
	if (c->ulysses_anything && c->ring_anything) {
		diag_error(R->d, c->ctx_loc[CTX_RANY],
			   "ulysses_anything and ring_anything cannot both be set");
		diag_note(R->d, c->ctx_loc[CTX_UANY], "ulysses_anything is set here");
	} else if (c->ulysses_anything && (c->ulysses < 2 || c->ring != 1)) {
		diag_error(R->d, c->ctx_loc[CTX_UANY],
			   "ulysses_anything needs ulysses > 1 and ring = 1, but the mesh "
			   "has ulysses = %" PRId64 ", ring = %" PRId64, c->ulysses, c->ring);
		diag_note(R->d, axis_loc(c, c->ring != 1 ? c->ax_ring : c->ax_ulysses),
			  "the mesh is set here");
	} else if (c->ring_anything && (c->ring < 2 || c->ulysses != 1)) {
		diag_error(R->d, c->ctx_loc[CTX_RANY],
			   "ring_anything needs ring > 1 and ulysses = 1, but the mesh "
			   "has ring = %" PRId64 ", ulysses = %" PRId64, c->ring, c->ulysses);
		diag_note(R->d, axis_loc(c, c->ulysses != 1 ? c->ax_ulysses : c->ax_ring),
			  "the mesh is set here");
	}
}

/* ring, ulysses, tp and cfg have styles; along another axis (dp) every
 * rank computes what its neighbours compute. That is a waste, not a wrong
 * result, so it is a note at the axis. An axis that gains a style joins
 * `styled`. */
static void note_idle_axes(struct resolver *R)
{
	static const char *const styled[] = { "ring", "ulysses", "tp", "cfg" };
	struct plan_cfg *c = R->c;
	for (int i = 0; i < c->naxes; i++) {
		bool used = false;
		for (size_t k = 0; k < sizeof styled / sizeof *styled; k++)
			used |= !strcmp(c->axes[i].name, styled[k]);
		if (used || c->axes[i].size < 2)
			continue;
		diag_remark(R->d, c->axes[i].loc, "no style splits over '%s': its %" PRId64
			    " ranks along '%s' compute the same result", c->axes[i].name,
			    c->axes[i].size, c->axes[i].name);
		diag_hint(R->d, "styles use ring, ulysses, tp and cfg; set %s = 1 unless the "
			  "copies are wanted", c->axes[i].name);
	}
}

/* The input statement of model input `name` (inputs are written at the top
 * of a model, possibly inside an `if`). */
static const struct mstmt *input_stmt(const struct mstmt *st, const char *name)
{
	for (; st; st = st->next) {
		if (st->kind == MS_INPUT && !strcmp(st->name, name))
			return st;
		if (st->kind == MS_IF) {
			const struct mstmt *r = input_stmt(st->body, name);
			if (!r)
				r = input_stmt(st->orelse, name);
			if (r)
				return r;
		}
	}
	return NULL;
}

/* CFG parallel splits the batch: dim 0 of every model input whose first dim
 * is written as the parameter `batch` (`input x : [batch, seq, hidden]`), so
 * tables such as RoPE's cos/sin ([seq, head_dim]) stay whole even when seq
 * happens to equal the batch. The batch must divide by cfg: each group of
 * ranks runs whole samples (the conditional and the unconditional half of a
 * guidance batch). */
static void cfg_inputs(struct resolver *R)
{
	struct plan_cfg *c = R->c;
	const struct ir_model *m = c->model;
	c->cfg_input = ARENA_ARRAY(R->a, bool, m->ninputs ? m->ninputs : 1);
	if (c->cfg <= 1)
		return;
	int nsplit = 0;
	for (int i = 0; i < m->ninputs; i++) {
		const struct ir_tensor *t = &m->tensors[m->inputs[i]];
		const struct mstmt *st = input_stmt(m->decl->body, t->name);
		c->cfg_input[i] = st && st->dims && st->dims->kind == EX_PATH &&
				  !strcmp(st->dims->s, "batch");
		nsplit += c->cfg_input[i];
	}
	const struct mesh_axis *ax = &c->axes[c->ax_cfg];
	int bi = -1;
	for (int i = 0; i < m->nparams; i++)
		if (!strcmp(m->param_names[i], "batch"))
			bi = i;
	if (!nsplit || bi < 0) {
		diag_error(R->d, ax->loc, "cfg = %" PRId64 " splits the batch, but no input of "
			   "model '%s' has the parameter 'batch' as its first dim", ax->size,
			   m->name);
		diag_note(R->d, m->decl->name_loc, "the model is defined here");
		diag_hint(R->d, "declare the batch as a parameter and write it first: "
			  "input x : [batch, seq, hidden];");
		return;
	}
	int64_t b = m->params[bi].i;
	if (b % ax->size) {
		diag_error(R->d, ax->loc, "cfg = %" PRId64 " does not divide the batch (%" PRId64
			   "): each cfg group runs whole samples", ax->size, b);
		if (m->params[bi].loc.file >= 0)
			diag_note(R->d, m->params[bi].loc, "the batch is set here");
		diag_hint(R->d, "a classifier-free guidance batch holds the conditional and the "
			  "unconditional inputs: a batch of 2 per prompt, cfg = 2");
	}
}

/* ---- rules ----------------------------------------------------------------- */

/* Parses `blocks = [a, b, ...]` of colwise/rowwise. */
static bool read_blocks(struct resolver *R, const struct style *st,
			struct style_use *u)
{
	for (const struct arg *a = st->args; a; a = a->next) {
		if (!a->name || strcmp(a->name, "blocks")) {
			diag_error(R->d, a->loc, "%s takes only 'blocks = [...]'", st->name);
			return false;
		}
		struct value v;
		if (!const_eval(R, a->val, &v))
			return false;
		bool ok = v.kind == VAL_LIST && v.n >= 1;
		for (int i = 0; ok && i < v.n; i++)
			ok = v.items[i].kind == VAL_INT && v.items[i].i >= 1;
		if (!ok) {
			diag_error(R->d, a->val->loc,
				   "blocks must be a list of positive integers, not %s",
				   value_str(R->a, &v));
			return false;
		}
		u->nblocks = v.n;
		u->blocks = ARENA_ARRAY(R->a, int64_t, v.n);
		for (int i = 0; i < v.n; i++)
			u->blocks[i] = v.items[i].i;
	}
	return true;
}

static bool read_dim(struct resolver *R, const struct arg *a, int *dim)
{
	struct value v;
	if (!const_eval(R, a->val, &v))
		return false;
	if (v.kind != VAL_INT || v.i < -IR_MAX_DIMS || v.i >= IR_MAX_DIMS) {
		diag_error(R->d, a->val->loc, "dim must be a small integer, not %s",
			   value_str(R->a, &v));
		return false;
	}
	*dim = (int)v.i;
	return true;
}

/* `out.K` names output K of a module (its index in diffusers' _cp_plan
 * dict); `out` all of them. Any other name: an input port (split only). */
static bool read_out_index(struct resolver *R, const struct arg *a, struct style_use *u)
{
	const char *p = a->val->s;
	if (strncmp(p, "out.", 4)) {
		if (u->kind == ST_SPLIT || !strcmp(p, "out"))
			return true;
		diag_error(R->d, a->val->loc, "gather takes out.K (output K), not '%s'", p);
		return false;
	}
	char *end;
	long k = strtol(p + 4, &end, 10);
	if (*end || p[4] < '0' || p[4] > '9' || k > 1 << 20) {
		diag_error(R->d, a->val->loc, "'%s' is not an output: write out.K, K a number "
			   "from 0", p);
		return false;
	}
	u->out_index = (int)k;
	return true;
}

/* The style's own syntax, before it is applied to any module. */
static bool read_style(struct resolver *R, const struct style *st,
		       struct style_use *u)
{
	int k = -1;
	for (int i = 0; i < ST_COUNT; i++)
		if (!strcmp(st->name, style_names[i]))
			k = i;
	if (k < 0) {
		diag_error(R->d, st->loc, "unknown style '%s'", st->name);
		const char *best = closest_name(st->name, style_names, ST_COUNT);
		if (best)
			diag_hint(R->d, "did you mean '%s'?", best);
		else
			diag_hint(R->d, "styles: colwise, rowwise, replicate, ring, ulysses, "
				  "split(NAME, dim = D), gather(dim = D), fsdp");
		return false;
	}
	u->kind = (enum style_kind)k;
	u->src = st;
	u->out_index = -1;
	switch (u->kind) {
	case ST_COLWISE:
	case ST_ROWWISE:
		return read_blocks(R, st, u);
	case ST_REPLICATE:
	case ST_RING:
	case ST_ULYSSES:
	case ST_FSDP:
		if (st->parens) {
			diag_error(R->d, st->loc, "'%s' takes no arguments", st->name);
			return false;
		}
		return true;
	case ST_SPLIT: {
		const struct arg *name = st->args, *dim = name ? name->next : NULL;
		if (!name || name->name || name->val->kind != EX_PATH || !dim ||
		    !dim->name || strcmp(dim->name, "dim") || dim->next) {
			diag_error(R->d, st->loc, "split is written split(NAME, dim = D)");
			diag_hint(R->d, "NAME is an input of the matched module, or 'out' "
				  "for its output");
			return false;
		}
		u->port = name->val->s;
		return read_out_index(R, name, u) && read_dim(R, dim, &u->dim);
	}
	case ST_GATHER: {
		/* gather(dim = D), or gather(out.K, dim = D) for one output */
		const struct arg *out = st->args && !st->args->name ? st->args : NULL;
		const struct arg *dim = out ? out->next : st->args;
		if ((out && out->val->kind != EX_PATH) || !dim || !dim->name || strcmp(dim->name, "dim") || dim->next) {
			diag_error(R->d, st->loc, "gather is written gather(dim = D), or "
				   "gather(out.K, dim = D) for output K of a module with several");
			return false;
		}
		if (out) {
			u->port = out->val->s;
			if (!read_out_index(R, out, u))
				return false;
		}
		return read_dim(R, dim, &u->dim);
	}
	case ST_COUNT:
		break;
	}
	return false;
}

/* A rule's violation, counted over all the modules it matched. */
struct tally {
	int count;
	int first;    /* module index */
	const char *detail;
};

static const char *and_more(struct resolver *R, int n)
{
	return n > 1 ? arena_printf(R->a, " (and %d more module%s)", n - 1,
				   n > 2 ? "s" : "")
		     : "";
}

static const struct ir_op *mod_op(const struct plan_cfg *c, int mi)
{
	const struct ir_module *m = &c->model->modules[mi];
	return m->kind == MOD_OP ? &c->model->ops[m->op] : NULL;
}

static const char *module_desc(struct resolver *R, int mi)
{
	const struct ir_module *m = &R->c->model->modules[mi];
	switch (m->kind) {
	case MOD_ROOT: return "the model root";
	case MOD_INSTANCE: return "a repeat block";
	case MOD_TUPLE: return "a tuple";
	case MOD_OP: break;
	}
	return arena_printf(R->a, "%s", op_table[mod_op(R->c, mi)->kind].name);
}

/* Does style u fit module mi? Returns NULL, or why not. */
static const char *misfit(struct resolver *R, int mi, const struct style_use *u)
{
	const struct ir_op *o = mod_op(R->c, mi);
	switch (u->kind) {
	case ST_COLWISE:
	case ST_ROWWISE:
		if (!o || o->kind != OP_linear)
			return arena_printf(R->a, "'%s' applies to linear modules, but "
					    "'%s' is %s", style_names[u->kind],
					    R->c->model->modules[mi].name, module_desc(R, mi));
		return NULL;
	case ST_REPLICATE:
		if (!o)
			return arena_printf(R->a, "'replicate' applies to op modules, but "
					    "'%s' is %s", R->c->model->modules[mi].name,
					    module_desc(R, mi));
		return NULL;
	case ST_RING:
	case ST_ULYSSES:
		if (!o || o->kind != OP_attention)
			return arena_printf(R->a, "'%s' applies to attention modules, but "
					    "'%s' is %s", style_names[u->kind],
					    R->c->model->modules[mi].name, module_desc(R, mi));
		return NULL;
	case ST_FSDP: {
		/* the ops it covers: an op module's own, a repeat block's, the
		 * root's every op; a tuple holds no ops */
		const struct ir_module *m = &R->c->model->modules[mi];
		int first = o ? m->op : m->kind == MOD_INSTANCE ? m->first_op : 0;
		int end = o ? m->op + 1 : m->kind == MOD_INSTANCE ? m->end_op :
			  m->kind == MOD_ROOT ? R->c->model->nops : 0;
		for (int i = first; i < end; i++)
			if (R->c->model->ops[i].nweights)
				return NULL;
		return arena_printf(R->a, "'fsdp' shards weights, but '%s' (%s) has none",
				    m->name, module_desc(R, mi));
	}
	/* split and gather fit any module with the port or output they name:
	 * split_misfit and gather_misfit say where not */
	case ST_SPLIT:
	case ST_GATHER:
	case ST_COUNT:
		break;
	}
	return NULL;
}

static bool same_use(const struct style_use *a, const struct style_use *b)
{
	if (a->kind != b->kind || a->nblocks != b->nblocks || a->dim != b->dim ||
	    a->out_index != b->out_index)
		return false;
	for (int i = 0; i < a->nblocks; i++)
		if (a->blocks[i] != b->blocks[i])
			return false;
	return (!a->port && !b->port) || (a->port && b->port && !strcmp(a->port, b->port));
}

/* Two uses on one module conflict when they are both sharding styles of a
 * linear, or the same style with different arguments. split on different
 * inputs, and ring with ulysses (USP), combine. */
static bool conflicts(const struct style_use *a, const struct style_use *b)
{
	bool wa = a->kind <= ST_REPLICATE, wb = b->kind <= ST_REPLICATE;
	if (wa && wb)
		return !same_use(a, b);
	if (a->kind != b->kind)
		return false;
	if (a->kind == ST_SPLIT && strcmp(a->port, b->port))
		return false;
	if (a->kind == ST_GATHER && a->out_index != b->out_index)
		return false; /* gathers of two outputs */
	return !same_use(a, b);
}

static const char *use_str(struct resolver *R, const struct style_use *u)
{
	switch (u->kind) {
	case ST_SPLIT:
		return arena_printf(R->a, "split(%s, dim = %d)", u->port, u->dim);
	case ST_GATHER:
		if (u->out_index >= 0)
			return arena_printf(R->a, "gather(out.%d, dim = %d)", u->out_index, u->dim);
		return arena_printf(R->a, "gather(dim = %d)", u->dim);
	/* the styles written by name, with blocks = [...] where given */
	case ST_COLWISE:
	case ST_ROWWISE:
	case ST_REPLICATE:
	case ST_RING:
	case ST_ULYSSES:
	case ST_FSDP:
	case ST_COUNT:
		break;
	}
	if (u->nblocks) {
		const char *s = "";
		for (int i = 0; i < u->nblocks; i++)
			s = arena_printf(R->a, "%s%s%" PRId64, s, i ? ", " : "", u->blocks[i]);
		return arena_printf(R->a, "%s(blocks = [%s])", style_names[u->kind], s);
	}
	return style_names[u->kind];
}

/* The tensor behind `split(NAME, ...)` on module mi: one of its input ports,
 * or -1 for `out`; -2 when there is no such input. */
static int split_port(const struct plan_cfg *c, int mi, const char *port)
{
	const struct ir_module *m = &c->model->modules[mi];
	if (!strcmp(port, "out") || !strncmp(port, "out.", 4))
		return -1;
	for (int i = 0; i < m->ninputs; i++)
		if (!strcmp(m->inputs[i].name, port))
			return m->inputs[i].tensor;
	return -2;
}

static const char *ports_list(struct resolver *R, int mi)
{
	const struct ir_module *m = &R->c->model->modules[mi];
	const char *s = "";
	for (int i = 0; i < m->ninputs && i < 8; i++)
		s = arena_printf(R->a, "%s%s'%s'", s, i ? ", " : "", m->inputs[i].name);
	return m->ninputs ? s : "none";
}

/* Divisibility of a linear's sharded dim by tp, packed blocks included;
 * *by_tp tells whether tp is to blame (else the blocks do not add up). */
static const char *tp_misfit(struct resolver *R, int mi, const struct style_use *u,
			     bool *by_tp)
{
	*by_tp = true;
	const struct ir_op *o = mod_op(R->c, mi);
	if (!o || o->kind != OP_linear)
		return NULL;
	int64_t tp = R->c->tp;
	bool col = u->kind == ST_COLWISE;
	int64_t dim = col ? o->linear.out : o->linear.in;
	const char *what = col ? "out_features" : "in_features";
	if (u->nblocks) {
		int64_t sum = 0;
		for (int i = 0; i < u->nblocks; i++)
			sum += u->blocks[i];
		if (sum != dim && !(*by_tp = false))
			return arena_printf(R->a, "packed blocks sum to %" PRId64 ", but %s "
					    "of '%s' is %" PRId64, sum, what,
					    R->c->model->modules[mi].name, dim);
		for (int i = 0; i < u->nblocks; i++)
			if (u->blocks[i] % tp)
				return arena_printf(R->a, "packed block %d (%" PRId64 ") of '%s' "
						    "is not divisible by tp = %" PRId64, i,
						    u->blocks[i], R->c->model->modules[mi].name, tp);
		return NULL;
	}
	if (dim % tp)
		return arena_printf(R->a, "%s %" PRId64 " of '%s' is not divisible by "
				    "tp = %" PRId64, what, dim,
				    R->c->model->modules[mi].name, tp);
	return NULL;
}

/* out.K exists; a tuple's outputs are named one by one (as _cp_plan's
 * {0: ..., 1: ...}), so `out` alone on a tuple is an error. */
static const char *which_output(struct resolver *R, int mi, const struct style_use *u,
				const char *style)
{
	const struct ir_module *m = &R->c->model->modules[mi];
	if (u->out_index >= m->noutputs && m->noutputs == 1)
		return arena_printf(R->a, "'%s' has no output %d: its one output is out "
				    "(or out.0)", m->name, u->out_index);
	if (u->out_index >= m->noutputs)
		return arena_printf(R->a, "'%s' has no output %d: its outputs are out.0 to "
				    "out.%d", m->name, u->out_index, m->noutputs - 1);
	if (u->out_index < 0 && m->kind == MOD_TUPLE)
		return arena_printf(R->a, "'%s' is a tuple of %d tensors: name the output, "
				    "%s(out.0, dim = D) to %s(out.%d, dim = D)", m->name,
				    m->noutputs, style, style, m->noutputs - 1);
	return NULL;
}

/* split: the input exists, the dim is in range, and the size divides the
 * context-parallel degree (or, in an anything mode, is at least that). */
static const char *split_misfit(struct resolver *R, int mi, struct style_use *u)
{
	struct plan_cfg *c = R->c;
	const struct ir_module *m = &c->model->modules[mi];
	int t = split_port(c, mi, u->port);
	if (t == -2)
		return arena_printf(R->a, "%s%s%s has no input '%s' (its inputs: %s)",
				    m->name[0] ? "'" : "", m->name[0] ? m->name : "the model root",
				    m->name[0] ? "'" : "", u->port, ports_list(R, mi));
	if (t == -1 && m->noutputs == 0)
		return arena_printf(R->a, "'%s' has no output to split", m->name);
	const char *why = t == -1 ? which_output(R, mi, u, "split") : NULL;
	if (why)
		return why;
	u->port_tensor = t;
	int tt = t >= 0 ? t : m->outputs[u->out_index >= 0 ? u->out_index : 0];
	const struct ir_shape *sh = &c->model->tensors[tt].shape;
	int d = u->dim < 0 ? u->dim + sh->nd : u->dim;
	if (d < 0 || d >= sh->nd)
		return arena_printf(R->a, "dim %d is out of range for '%s' %s", u->dim,
				    c->model->tensors[tt].name, shape_str(R->a, sh));
	u->dim = d;
	int64_t n = plan_cp(c), size = sh->d[d];
	if (n <= 1)
		return NULL;
	bool anything = c->ulysses_anything || c->ring_anything;
	if (!anything && size % n)
		return arena_printf(R->a, "dim %d of '%s' has size %" PRId64 ", not "
				    "divisible by ring * ulysses = %" PRId64, d,
				    c->model->tensors[tt].name, size, n);
	if (anything && size < n)
		return arena_printf(R->a, "dim %d of '%s' has size %" PRId64 ", fewer "
				    "than ring * ulysses = %" PRId64 " ranks", d,
				    c->model->tensors[tt].name, size, n);
	return NULL;
}

static const char *gather_misfit(struct resolver *R, int mi, struct style_use *u)
{
	const struct ir_module *m = &R->c->model->modules[mi];
	if (m->noutputs == 0)
		return arena_printf(R->a, "'%s' has no output to gather", m->name);
	const char *why = which_output(R, mi, u, "gather");
	if (why)
		return why;
	const struct ir_shape *sh =
		&R->c->model->tensors[m->outputs[u->out_index >= 0 ? u->out_index : 0]].shape;
	int d = u->dim < 0 ? u->dim + sh->nd : u->dim;
	if (d < 0 || d >= sh->nd)
		return arena_printf(R->a, "dim %d is out of range for the output %s of '%s'",
				    u->dim, shape_str(R->a, sh), m->name);
	u->dim = d;
	return NULL;
}

static void report_tally(struct resolver *R, const struct style *st,
			 struct tally *t, const char *extra_note, dtpc_loc note_loc)
{
	if (!t->count)
		return;
	diag_error(R->d, st->loc, "%s%s", t->detail, and_more(R, t->count));
	const struct ir_module *m = &R->c->model->modules[t->first];
	if (m->kind == MOD_ROOT)
		diag_note(R->d, m->loc, "model '%s' is defined here", R->c->model->name);
	else
		diag_note(R->d, m->loc, "'%s' is defined here", m->name);
	if (extra_note)
		diag_note(R->d, note_loc, "%s", extra_note);
}

/* A corrected glob for one that matched nothing: its wildcard segments
 * kept, its literal segments replaced by those of the closest module with
 * the same number of segments whose other segments the wildcards match
 * (so "blocks.*.attn.to_outt.0" suggests "blocks.*.attn.to_out.0", not
 * one block's name). NULL when nothing is close. */
static const char *closest_glob(struct resolver *R, const char *glob)
{
	enum { MAXSEG = 32 };
	char buf[256];
	if (strlen(glob) >= sizeof buf || strstr(glob, "**"))
		return NULL;
	const char *seg[MAXSEG];
	int ns = 0;
	strcpy(buf, glob);
	char *save;
	/* strtok_r: strtok's cursor is process-global, shared by threads compiling at once */
	for (char *p = strtok_r(buf, ".", &save); p && ns < MAXSEG; p = strtok_r(NULL, ".", &save))
		seg[ns++] = p;
	bool lit[MAXSEG];
	for (int i = 0; i < ns; i++)
		lit[i] = !seg[i][strcspn(seg[i], "*?[{\\")];
	const struct ir_model *m = R->c->model;
	int best = -1, bd = 99;
	for (int mi = 1; mi < m->nmodules; mi++) {
		char name[256];
		if (strlen(m->modules[mi].name) >= sizeof name)
			continue;
		strcpy(name, m->modules[mi].name);
		const char *ms[MAXSEG];
		int nm = 0;
		for (char *p = strtok_r(name, ".", &save); p && nm < MAXSEG;
		     p = strtok_r(NULL, ".", &save))
			ms[nm++] = p;
		if (nm != ns)
			continue;
		int dist = 0;
		for (int i = 0; i < ns && dist < bd; i++)
			dist += lit[i] ? edit_distance(seg[i], ms[i])
				       : glob_match(seg[i], ms[i]) ? 0 : 99;
		if (dist < bd) {
			bd = dist;
			best = mi;
		}
	}
	int limit = (int)strlen(glob) / 3;
	if (best < 0 || bd == 0 || bd > (limit < 2 ? 2 : limit))
		return NULL;
	char name[256];
	strcpy(name, m->modules[best].name);
	const char *out = "";
	int i = 0;
	for (char *p = strtok_r(name, ".", &save); p; p = strtok_r(NULL, ".", &save), i++)
		out = arena_printf(R->a, "%s%s%s", out, i ? "." : "", lit[i] ? p : seg[i]);
	return out;
}

/* The hint after "glob ... matches no module": the closest glob, else what
 * module names look like (a rule's glob and --expose's alike). */
static void hint_unmatched(struct resolver *R, const char *glob)
{
	const struct ir_model *m = R->c->model;
	const char *best = closest_glob(R, glob);

	if (best)
		diag_hint(R->d, "did you mean \"%s\"?", best);
	else
		diag_hint(R->d, "module names are dotted paths such as \"%s\"; "
			  "'*' matches one segment, '**' any number",
			  m->nmodules > 1 ? m->modules[m->nmodules > 2 ? 2 : 1].name : "blocks.0.attn");
}

static void apply_rule(struct resolver *R, int ri)
{
	struct plan_cfg *c = R->c;
	struct rule *r = &c->rules[ri];
	const struct pstmt *ps = r->stmt;
	char msg[160];
	int errcol = 0;
	if (!glob_check(r->glob, msg, sizeof msg, &errcol)) {
		dtpc_loc l = ps->name_loc;
		/* +1 skips the opening quote (the glob has no escapes that
		 * change its length except \" and \\, rare in globs). */
		l.col += 1 + errcol;
		l.end_col = l.col;
		diag_error(R->d, l, "%s", msg);
		return;
	}
	const struct ir_model *m = c->model;
	/* The glob's literal prefix rejects most modules with one strncmp
	 * (transformer_blocks.* against single_transformer_blocks.*). */
	size_t lit = strcspn(r->glob, "*?[{\\");
	int n = 0;
	int *matched = R->matched;
	if (!r->glob[lit]) {
		/* A glob without wildcards names one module: look it up. */
		if (!R->by_name) {
			R->by_name = strmap_create(R->a, (size_t)m->nmodules);
			for (int i = m->nmodules - 1; i >= 0; i--)
				strmap_put(R->by_name, m->modules[i].name, i);
		}
		int i = strmap_get(R->by_name, r->glob);
		if (i >= 0)
			matched[n++] = i;
	} else {
		for (int i = 0; i < m->nmodules; i++)
			if (!strncmp(r->glob, m->modules[i].name, lit) &&
			    glob_match(r->glob, m->modules[i].name))
				matched[n++] = i;
	}
	r->nmatched = n;
	if ((R->pairs += n) > RULE_PAIRS_MAX) {
		/* once: the rules after this one are not applied */
		if (R->pairs - n <= RULE_PAIRS_MAX) {
			diag_error(R->d, ps->name_loc, "the rules up to this one match "
				   "%" PRId64 " modules in all (a module once per rule), "
				   "more than %d", R->pairs, RULE_PAIRS_MAX);
			diag_hint(R->d, "match many modules with one glob rather "
				  "than one rule each");
		}
		return;
	}
	if (n == 0) {
		diag_error(R->d, ps->name_loc, "glob \"%s\" matches no module of model '%s'",
			   r->glob, m->name);
		/* The hint scans every module; past the error limit it would not
		 * be shown, and thousands of such rules made check quadratic. */
		if (R->d->max_errors && R->d->nerrors > R->d->max_errors)
			return;
		hint_unmatched(R, r->glob);
		return;
	}
	for (const struct style *st = ps->styles; st; st = st->next) {
		struct style_use proto = { .rule = ri };
		if (!read_style(R, st, &proto))
			continue;
		struct tally fit = { 0 }, tpfit = { 0 }, port = { 0 }, conflict = { 0 };
		bool by_tp = true;
		int other_rule = -1;
		for (int k = 0; k < n; k++) {
			int mi = matched[k];
			struct style_use *u = ARENA_NEW(R->a, struct style_use);
			*u = proto;
			const char *why = misfit(R, mi, u);
			if (why) {
				if (!fit.count++) {
					fit.first = mi;
					fit.detail = why;
				}
				continue;
			}
			if ((u->kind == ST_COLWISE || u->kind == ST_ROWWISE) &&
			    (why = tp_misfit(R, mi, u, &by_tp))) {
				if (!tpfit.count++) {
					tpfit.first = mi;
					tpfit.detail = why;
				}
				continue;
			}
			if ((u->kind == ST_SPLIT && (why = split_misfit(R, mi, u))) ||
			    (u->kind == ST_GATHER && (why = gather_misfit(R, mi, u)))) {
				if (!port.count++) {
					port.first = mi;
					port.detail = why;
				}
				continue;
			}
			const struct style_use *clash = NULL;
			for (const struct style_use *e = c->styles[mi]; e; e = e->next)
				if (conflicts(e, u))
					clash = e;
			if (clash) {
				if (!conflict.count++) {
					conflict.first = mi;
					conflict.detail = arena_printf(
						R->a, "'%s' gets '%s' from this rule, but '%s' "
						"from %s", m->modules[mi].name, use_str(R, u),
						use_str(R, clash),
						clash->rule == ri ? "the same rule" : "another");
					other_rule = clash->rule;
				}
				continue;
			}
			bool dup = false;
			for (const struct style_use *e = c->styles[mi]; e; e = e->next)
				dup |= same_use(e, u);
			if (dup)
				continue;
			u->next = c->styles[mi];
			c->styles[mi] = u;
		}
		report_tally(R, st, &fit, NULL, loc_none());
		if (tpfit.count)
			report_tally(R, st, &tpfit,
				     by_tp ? arena_printf(R->a, "tp = %" PRId64 " is set here", c->tp)
					   : NULL,
				     axis_loc(c, c->ax_tp));
		if (port.count)
			report_tally(R, st, &port,
				     proto.kind == ST_SPLIT && plan_cp(c) > 1
					     ? arena_printf(R->a, "the sequence is split over ring "
							    "* ulysses = %" PRId64 " ranks", plan_cp(c))
					     : NULL,
				     c->mesh_loc);
		if (conflict.count) {
			diag_error(R->d, st->loc, "conflicting styles: %s%s", conflict.detail,
				   and_more(R, conflict.count));
			if (other_rule != ri)
				diag_note(R->d, c->rules[other_rule].stmt->loc, "the other rule");
		}
	}
}

/* Context styles need a context-parallel mesh; and on an attention that has
 * one, every context axis of size > 1 must be covered, or its shards would
 * never meet (ring degree > 1 without KV rotation miscomputes silently). */
static void check_cp_styles(struct resolver *R)
{
	struct plan_cfg *c = R->c;
	const struct ir_model *m = c->model;
	bool reported_degree = false;
	struct tally miss[2] = { { 0 }, { 0 } };
	const struct style_use *miss_use[2] = { NULL, NULL };
	for (int mi = 0; mi < m->nmodules; mi++) {
		const struct style_use *ring = plan_style(c, mi, ST_RING);
		const struct style_use *uly = plan_style(c, mi, ST_ULYSSES);
		if (!ring && !uly)
			continue;
		if (plan_cp(c) <= 1) {
			if (reported_degree)
				continue;
			reported_degree = true;
			const struct style_use *u = ring ? ring : uly;
			diag_error(R->d, u->src->loc,
				   "context-parallel style '%s' needs ring * ulysses > 1, but "
				   "the mesh has ring = %" PRId64 ", ulysses = %" PRId64,
				   style_names[u->kind], c->ring, c->ulysses);
			diag_note(R->d, axis_loc(c, c->ax_ring >= 0 ? c->ax_ring : c->ax_ulysses),
				  "the mesh is set here");
			continue;
		}
		for (int k = 0; k < 2; k++) {
			int64_t deg = k == 0 ? c->ring : c->ulysses;
			const struct style_use *have = k == 0 ? ring : uly;
			if (deg <= 1 || have)
				continue;
			if (!miss[k].count++) {
				miss[k].first = mi;
				miss_use[k] = ring ? ring : uly;
			}
		}
	}
	for (int k = 0; k < 2; k++) {
		if (!miss[k].count)
			continue;
		const char *ax = k == 0 ? "ring" : "ulysses";
		int64_t deg = k == 0 ? c->ring : c->ulysses;
		diag_error(R->d, miss_use[k]->src->loc,
			   "attention '%s' is context-parallel but has no '%s' style, "
			   "while the mesh has %s = %" PRId64 "%s",
			   m->modules[miss[k].first].name, ax, ax, deg,
			   and_more(R, miss[k].count));
		diag_note(R->d, axis_loc(c, k == 0 ? c->ax_ring : c->ax_ulysses),
			  "%s = %" PRId64 " is set here", ax, deg);
		diag_hint(R->d, "write \"%s\" : ulysses, ring; (a style whose axis has "
			  "size 1 does nothing)", c->rules[miss_use[k]->rule].glob);
	}
}

/* ---- the plan -------------------------------------------------------------- */

static const struct model *find_model(struct resolver *R, const struct program *prog,
				      const struct pstmt *s)
{
	const char *names[256];
	int n = 0;
	for (const struct model *m = prog->models; m; m = m->next) {
		if (!strcmp(m->name, s->name))
			return m;
		if (n < 256)
			names[n++] = m->name;
	}
	diag_error(R->d, s->name_loc, "unknown model '%s'", s->name);
	const char *best = closest_name(s->name, names, n);
	if (best)
		diag_hint(R->d, "did you mean '%s'?", best);
	return NULL;
}

/* The plan's overrides, then the command line's (-D wins). */
static struct override *overrides(struct resolver *R, const struct pstmt *s,
				  const struct compile_opts *o, int *nov)
{
	int n = o->ndefines;
	for (const struct arg *kv = s ? s->kv : NULL; kv; kv = kv->next)
		n++;
	struct override *ov = ARENA_ARRAY(R->a, struct override, n ? n : 1);
	int k = 0;
	for (const struct arg *kv = s ? s->kv : NULL; kv; kv = kv->next) {
		for (int j = 0; j < k; j++)
			if (!strcmp(ov[j].name, kv->name)) {
				diag_error(R->d, kv->name_loc, "parameter '%s' is overridden twice",
					   kv->name);
				diag_note(R->d, ov[j].val.loc, "first overridden here");
			}
		struct value v;
		if (!const_eval(R, kv->val, &v))
			continue;
		v.loc = kv->loc;
		ov[k++] = (struct override){ .name = kv->name, .val = v };
	}
	for (int i = 0; i < o->ndefines; i++)
		ov[k++] = o->defines[i];
	*nov = k;
	return ov;
}

struct ir_model *plan_model_only(struct arena *a, struct diag_ctx *d,
				 const struct model *m, const struct compile_opts *o)
{
	struct resolver R = { .a = a, .d = d };
	int nov = 0;
	struct override *ov = overrides(&R, NULL, o, &nov);
	return model_instantiate(a, d, m, ov, nov, m->name_loc);
}

/* One option as a statement of its own kind: anything else its text holds
 * (a mesh inside --context) has been reported as a syntax error and is not
 * taken. The statement is copied out alone, without what followed it. */
static struct pstmt *cli_statement(struct resolver *R, const char *text, enum pstmt_kind k)
{
	/* the ';' on a line of its own: a '#' in the option cannot hide it */
	const char *src = arena_printf(R->a, "plan command_line {\n  %s %s\n;\n}\n",
				       k == PS_MESH ? "mesh" : k == PS_CONTEXT ? "context" : "",
				       text);
	struct file_ast ast;
	parse_buffer(R->a, R->d, "<command line>", src, strlen(src), &ast);
	for (const struct pstmt *s = ast.plans ? ast.plans->body : NULL; s; s = s->next)
		if (s->kind == k) {
			struct pstmt *one = ARENA_NEW(R->a, struct pstmt);
			*one = *s;
			one->next = NULL;
			return one;
		}
	return NULL;
}

/* --mesh, then --context, then --dtype (as the setting dtype = "..."). */
static const struct pstmt *cli_statements(struct resolver *R, const struct compile_opts *o)
{
	struct pstmt *mesh = o->mesh ? cli_statement(R, o->mesh, PS_MESH) : NULL;
	struct pstmt *ctx = o->context ? cli_statement(R, o->context, PS_CONTEXT) : NULL;
	struct pstmt *dt = o->dtype ? cli_statement(R, arena_printf(R->a, "dtype = \"%s\"",
								     o->dtype), PS_SETTING)
				    : NULL;
	struct pstmt *head = NULL, **at = &head;
	struct pstmt *each[3] = { mesh, ctx, dt };
	for (int i = 0; i < 3; i++)
		if (each[i]) {
			*at = each[i];
			at = &each[i]->next;
		}
	return head;
}

/* --expose GLOB: where the option's glob is, as a line of its own in a
 * pseudo-file, so that its errors are located like a plan's. */
static dtpc_loc expose_loc(struct resolver *R, const char *glob)
{
	const char *text = arena_printf(R->a, "--expose %s", glob);
	size_t len = strlen(text);
	dtpc_loc l = { .file = diag_add_file(R->d, "<command line>", text, len),
		       .line = 1, .col = 10, .end_line = 1 };
	l.end_col = len > 9 ? (int)len : l.col;
	return l;
}

/* Appends tensor t to the model's outputs under name, unless that name is an
 * output already: the same tensor (two globs, or `output x;` and an exposed
 * x) is one output, another tensor under that name is an error. */
static void expose_tensor(struct resolver *R, int t, const char *name, dtpc_loc loc)
{
	struct ir_model *m = R->c->model;
	for (int i = 0; i < m->noutputs; i++) {
		if (strcmp(m->output_names[i], name))
			continue;
		if (m->outputs[i] != t) {
			diag_error(R->d, loc, "--expose: '%s' is an output of the model already, "
				   "another tensor", name);
			diag_note(R->d, m->output_loc[i], "the output is here");
		}
		return;
	}
	int n = m->noutputs + 1;
	int *no = ARENA_ARRAY(R->a, int, n);
	dtpc_loc *nl = ARENA_ARRAY(R->a, dtpc_loc, n);
	const char **nn = ARENA_ARRAY(R->a, const char *, n);
	memcpy(no, m->outputs, sizeof *no * (size_t)m->noutputs);
	memcpy(nl, m->output_loc, sizeof *nl * (size_t)m->noutputs);
	memcpy(nn, m->output_names, sizeof *nn * (size_t)m->noutputs);
	no[m->noutputs] = t;
	nl[m->noutputs] = loc;
	nn[m->noutputs] = name;
	m->outputs = no;
	m->output_loc = nl;
	m->output_names = nn;
	m->noutputs = n;
	/* the root module's outputs are the model's (layout and lowering read both) */
	m->modules[0].outputs = no;
	m->modules[0].noutputs = n;
}

/* --expose: every module a glob matches gives its tensors as outputs of the
 * graph, named as the module (an op's result), or NAME.K for the K-th of
 * a tuple's elements or of the variables a repeat instance carries out, in
 * the order the instance first updates them (one of them: NAME). Glob by
 * glob, each in module order, after the model's own outputs. One rank only: a tensor inside a
 * parallel region is a shard, and gathering each would change the graph
 * being debugged. */
static void expose_outputs(struct resolver *R, const struct compile_opts *o)
{
	struct plan_cfg *c = R->c;
	struct ir_model *m = c->model;
	for (int gi = 0; gi < o->nexpose; gi++) {
		const char *glob = o->expose[gi];
		dtpc_loc loc = expose_loc(R, glob);
		char msg[160];
		int errcol = 0;
		if (!glob_check(glob, msg, sizeof msg, &errcol)) {
			loc.col += errcol;
			loc.end_col = loc.col;
			diag_error(R->d, loc, "%s", msg);
			continue;
		}
		if (c->world > 1) {
			diag_error(R->d, loc, "--expose needs a graph of one rank (a tensor inside a "
				   "parallel region is a shard): the mesh has %" PRId64 " ranks",
				   c->world);
			if (c->mesh_loc.file >= 0)
				diag_note(R->d, c->mesh_loc, "the mesh is set here");
			diag_hint(R->d, "compile the plan on one rank: --mesh \"%s = 1\"",
				  c->naxes ? c->axes[0].name : "tp");
			continue;
		}
		int matched = 0, tensors = 0;
		for (int mi = 0; mi < m->nmodules; mi++) {
			const struct ir_module *mod = &m->modules[mi];
			if (!glob_match(glob, mod->name))
				continue;
			matched++;
			if (mod->kind == MOD_ROOT)
				continue; /* its outputs are the model's own */
			for (int k = 0; k < mod->noutputs; k++, tensors++)
				expose_tensor(R, mod->outputs[k],
					      mod->noutputs == 1 ? mod->name
					      : arena_printf(R->a, "%s.%d", mod->name, k), loc);
		}
		if (tensors)
			continue;
		if (matched) {
			diag_error(R->d, loc, "--expose \"%s\" matches %s, with no tensor of its "
				   "own to expose", glob, *glob ? "only modules that pass no tensor out"
				   : "the model itself (the root)");
			diag_hint(R->d, "the model's own outputs are outputs already");
			continue;
		}
		int w = 0;
		while (w < m->nweights && !glob_match(glob, m->weights[w].name))
			w++;
		if (w < m->nweights) {
			const struct ir_op *op = &m->ops[m->weights[w].op];
			diag_error(R->d, loc, "--expose \"%s\" matches the weight '%s', not a tensor "
				   "the model computes", glob, m->weights[w].name);
			diag_note(R->d, op->name_loc, "its module '%s' is here", op->module);
			diag_hint(R->d, "expose the module: --expose %s", op->module);
			continue;
		}
		diag_error(R->d, loc, "--expose \"%s\" matches no module of model '%s'", glob,
			   m->name);
		hint_unmatched(R, glob);
	}
}

struct plan_cfg *plan_resolve(struct arena *a, struct diag_ctx *d,
			      const struct program *prog, const struct plan *p,
			      const struct compile_opts *o)
{
	struct plan_cfg *c = ARENA_NEW(a, struct plan_cfg);
	struct resolver R = { .a = a, .d = d, .c = c };
	c->decl = p;
	c->convert_to_fp32 = true; /* diffusers' default */
	c->dtype = G_DT_F32;
	c->dtype_loc = loc_none();
	c->mesh_loc = loc_none();
	for (int i = 0; i < 8; i++)
		c->ctx_loc[i] = loc_none();

	const struct pstmt *model_stmt = NULL, *mesh_stmt = NULL, *dtype_stmt = NULL;
	bool seen[8] = { false };
	int64_t degree[8] = { 0 };
	int nrules = 0;
	/* --mesh and --context are parsed as plan statements of their own
	 * (a pseudo-file "<command line>"), so they get the same checks and
	 * located diagnostics; --mesh replaces the plan's mesh. */
	const struct pstmt *cli = cli_statements(&R, o);
	for (const struct pstmt *s = cli; s; s = s->next)
		if (s->kind == PS_MESH) {
			mesh_stmt = s;
			read_mesh(&R, s);
		} else if (s->kind == PS_SETTING) {
			read_setting(&R, s, &dtype_stmt);
		}
	for (const struct pstmt *s = p->body; s; s = s->next) {
		switch (s->kind) {
		case PS_MODEL:
			if (model_stmt) {
				diag_error(d, s->loc, "plan '%s' names a model twice", p->name);
				diag_note(d, model_stmt->loc, "first named here");
				continue;
			}
			model_stmt = s;
			break;
		case PS_MESH:
			if (mesh_stmt && mesh_stmt->loc.file != s->loc.file && cli)
				continue; /* replaced by --mesh */
			if (mesh_stmt) {
				diag_error(d, s->loc, "plan '%s' has two mesh statements", p->name);
				diag_note(d, mesh_stmt->loc, "the first is here");
				diag_hint(d, "list all axes in one: mesh ring = 2, ulysses = 2;");
				continue;
			}
			mesh_stmt = s;
			read_mesh(&R, s);
			break;
		case PS_CONTEXT:
		case PS_TENSOR:
			read_options(&R, s, seen, degree);
			break;
		case PS_RULE:
			nrules++;
			break;
		case PS_SETTING:
			/* --dtype replaces the plan's */
			if (!(dtype_stmt && dtype_stmt->loc.file != s->loc.file && cli &&
			      !strcmp(s->kv->name, "dtype")))
				read_setting(&R, s, &dtype_stmt);
			break;
		}
	}
	bool cli_seen[8] = { false };
	for (const struct pstmt *s = cli; s; s = s->next)
		if (s->kind == PS_CONTEXT)
			read_options(&R, s, cli_seen, degree);
	for (int i = 0; i < 8; i++)
		seen[i] |= cli_seen[i];
	if (!model_stmt) {
		diag_error(d, p->name_loc, "plan '%s' does not name a model", p->name);
		diag_hint(d, "add 'model NAME;' to the plan");
		return NULL;
	}
	const struct model *md = find_model(&R, prog, model_stmt);
	if (!md)
		return NULL;
	c->model_loc = model_stmt->loc;
	int nov = 0;
	struct override *ov = overrides(&R, model_stmt, o, &nov);
	int before = d->nerrors;
	c->model = model_instantiate(a, d, md, ov, nov, model_stmt->name_loc);
	/* a statement that failed (even on a syntax error reported while
	 * parsing) leaves modules missing */
	bool model_ok = d->nerrors == before && !c->model->nfailed;

	c->ax_ring = axis_index(c, "ring");
	c->ax_ulysses = axis_index(c, "ulysses");
	c->ax_tp = axis_index(c, "tp");
	c->ax_cfg = axis_index(c, "cfg");
	c->ring = c->ax_ring >= 0 ? c->axes[c->ax_ring].size : 1;
	c->ulysses = c->ax_ulysses >= 0 ? c->axes[c->ax_ulysses].size : 1;
	c->tp = c->ax_tp >= 0 ? c->axes[c->ax_tp].size : 1;
	c->cfg = c->ax_cfg >= 0 ? c->axes[c->ax_cfg].size : 1;
	c->world = 1; /* read_mesh kept it within G_MAX_WORLD */
	for (int i = 0; i < c->naxes; i++)
		c->world *= c->axes[i].size;
	if (o->world && o->world != c->world) {
		diag_error(d, mesh_stmt ? mesh_stmt->loc : p->name_loc,
			   "the mesh has %" PRId64 " rank%s, but --world is %" PRId64,
			   c->world, c->world == 1 ? "" : "s", o->world);
		diag_hint(d, "the world size is the product of the mesh axes");
	}
	check_degree(&R, CTX_RDEG, degree[CTX_RDEG], c->ring, c->ax_ring, "ring");
	check_degree(&R, CTX_UDEG, degree[CTX_UDEG], c->ulysses, c->ax_ulysses, "ulysses");
	check_degree(&R, CTX_TDEG, degree[CTX_TDEG], c->tp, c->ax_tp, "tp");
	/* Sequence-parallel TP splits the sequence over tp; a context axis
	 * splits it too, and one dim split by two groups has no lowering. */
	if (c->seq_parallel && c->tp > 1 && plan_cp(c) > 1) {
		diag_error(d, c->ctx_loc[CTX_SP], "sequence_parallel splits the sequence over tp, "
			   "which ring x ulysses (%" PRId64 " ranks) splits already", plan_cp(c));
		diag_note(d, c->ax_ring >= 0 ? c->axes[c->ax_ring].loc : c->axes[c->ax_ulysses].loc,
			  "the context axis is set here");
		diag_hint(d, "use sequence_parallel with tp (and cfg) only");
	}
	check_context(&R);
	note_idle_axes(&R);

	c->styles = ARENA_ARRAY(a, struct style_use *, c->model->nmodules);
	/* Rules over a model that did not instantiate cleanly would only
	 * report the model's errors again (globs matching missing modules). */
	if (!model_ok) {
		c->cfg_input = ARENA_ARRAY(a, bool, c->model->ninputs ? c->model->ninputs : 1);
		return c;
	}
	cfg_inputs(&R);
	c->rules = ARENA_ARRAY(a, struct rule, nrules ? nrules : 1);
	for (const struct pstmt *s = p->body; s; s = s->next)
		if (s->kind == PS_RULE)
			c->rules[c->nrules++] = (struct rule){ .stmt = s, .glob = s->name };
	R.matched = ARENA_ARRAY(a, int, c->model->nmodules);
	for (int i = 0; i < c->nrules; i++)
		apply_rule(&R, i);
	check_cp_styles(&R);
	expose_outputs(&R, o);
	return c;
}
