/* model.c — instantiation: a model declaration and its parameter values
 * become the flat op list of ir.h, with every shape checked.
 *
 * Scoping (docs/language.md): in `repeat NAME[N]`, a name first assigned outside
 * the repeat is a variable carried through it; a name first assigned inside
 * gets the prefix `NAME.{i}.`. Within one scope a module's name is assigned
 * once; a variable (a model input, or a name an alias `a = b;` bound) may be
 * bound again. `if` branches run in the scope around them. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "ir.h"
#include "op_compile.h"
#include "strmap.h"

#include "graph/graph.h"

int op_lookup(const char *s)
{
	for (int i = 0; i < OP_COUNT; i++)
		if (!(op_table[i].flags & OPF_LOWERED) && !strcmp(op_table[i].name, s))
			return i;
	return -1;
}

/* ---- signatures ---------------------------------------------------------- */

#include "op_sigs.h"

const struct sig *op_sig(int op)
{
	return &sigs[op];
}

/* ---- state --------------------------------------------------------------- */

struct binding {
	int tensor;        /* -1: a repeat or tuple name, or a failed definition */
	dtpc_loc loc;
	struct scope *owner;
	bool failed;       /* its statement had errors: uses stay silent */
	bool variable;     /* an input or alias: may be bound again in its scope */
	bool alias;        /* a new name an alias statement bound */
	bool read;         /* read since (an alias never read is likely a typo) */
	int tuple;         /* a tuple's element count (its name is no tensor) */
	const char *name;  /* as the scope spells it */
};

struct scope {
	struct scope *parent;
	struct strmap *names; /* local path -> index into B.bindings */
	const char *prefix;   /* "blocks.0." */
	int instance;         /* repeat-instance module, -1 at top level */
	int first_tensor;     /* tensors created in this scope have ids >= this */
	const char *index;    /* `repeat NAME[N] as i`: the index's name (NULL: none) */
	int64_t index_value;  /* and this iteration's value, 0 to N - 1 */
	/* Outer variables this instance updated, for its outputs. */
	const char **updated;
	int nupdated, capupdated;
};

struct name_list {
	const char **v;
	int n, cap;
};

/* Upper bound on modules + ops of one model, so a hostile or mistyped
 * `repeat` (nested 10^6 x 10^6) ends with an error instead of eating memory. */
enum { INST_BUDGET = 4000000 };

/* Upper bound on the elements of all tensors and weights of one model
 * (2^48: 1 PiB of float32), checked as each is made. Element counts, byte
 * sizes and arena offsets computed from them later (lower.c, memplan.c, the
 * loader) then stay far from 64-bit overflow. */
#define MODEL_MAX_ELEMS_LOG2 48
static const int64_t MODEL_MAX_ELEMS = (int64_t)1 << MODEL_MAX_ELEMS_LOG2;

struct inst {
	struct arena *a;
	struct diag_ctx *d;
	struct ir_model *m;
	struct binding *bindings;
	int nbindings, capbindings;
	struct strmap *params;  /* name -> index in m->params */
	struct strmap *modules; /* module name -> module index */
	struct scope *cur;
	bool over_budget;
	int64_t elems; /* of all tensors and weights so far: <= MODEL_MAX_ELEMS */
	/* With --config or -D only: which config keys and -D values each
	 * parameter's value comes from (a derived default, from those of the
	 * parameters it reads), and when each parameter was last read, so that
	 * an error a config value causes names the key (blame). */
	struct origin **origins;
	unsigned *read_stamp, stamp;
	struct diag *blamed; /* errors up to it have their notes */
	dtpc_loc use_loc;    /* where -D values are reported: the plan's model statement */
	bool halted;         /* an assert failed: nothing after it is instantiated */
};

struct origin {
	const struct override *ov;
	struct origin *next;
};

#define GROW(a, arr, n, cap)                                                  \
	do {                                                                  \
		if ((n) == (cap)) {                                           \
			int nc_ = (cap) ? (cap) * 2 : 16;                     \
			void *na_ = arena_alloc_raw((a), sizeof *(arr) * (size_t)nc_); \
			if (n)                                                \
				memcpy(na_, (arr), sizeof *(arr) * (size_t)(n)); \
			(arr) = na_;                                          \
			(cap) = nc_;                                          \
		}                                                             \
	} while (0)

const char *shape_str(struct arena *a, const struct ir_shape *s)
{
	char buf[256];
	size_t n = 0;
	buf[n++] = '[';
	for (int i = 0; i < s->nd && n < sizeof buf - 24; i++)
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%" PRId64,
				      i ? ", " : "", s->d[i]);
	buf[n++] = ']';
	buf[n] = 0;
	return arena_strdup(a, buf);
}

int64_t shape_numel(const struct ir_shape *s)
{
	int64_t n = 1;
	for (int i = 0; i < s->nd; i++)
		if (__builtin_mul_overflow(n, s->d[i], &n))
			return -1;
	return n;
}

static int new_tensor(struct inst *I, const char *name, struct ir_shape sh,
		      int producer, dtpc_loc loc)
{
	struct ir_model *m = I->m;
	GROW(I->a, m->tensors, m->ntensors, m->captensors);
	struct ir_tensor *t = &m->tensors[m->ntensors];
	t->name = name;
	t->shape = sh;
	t->producer = producer;
	t->loc = loc;
	return m->ntensors++;
}

static int new_module(struct inst *I, const char *name, enum module_kind k,
		      dtpc_loc loc)
{
	struct ir_model *m = I->m;
	int prev = strmap_get(I->modules, name);
	if (prev >= 0) {
		diag_error(I->d, loc, "duplicate module '%s'", name);
		diag_note(I->d, m->modules[prev].loc, "'%s' was first defined here",
			  name);
		return -1;
	}
	GROW(I->a, m->modules, m->nmodules, m->capmodules);
	struct ir_module *mod = &m->modules[m->nmodules];
	memset(mod, 0, sizeof *mod);
	mod->name = name;
	mod->kind = k;
	mod->loc = loc;
	mod->op = -1;
	mod->parent = I->cur ? I->cur->instance : -1;
	strmap_put(I->modules, name, m->nmodules);
	return m->nmodules++;
}

void ir_add_weight(struct op_ctx *I, int op, const char *suffix, struct ir_shape sh)
{
	struct ir_model *m = I->m;
	struct ir_op *o = &m->ops[op];
	GROW(I->a, m->weights, m->nweights, m->capweights);
	if (!o->nweights)
		o->weight0 = m->nweights;
	o->nweights++;
	struct ir_weight *w = &m->weights[m->nweights++];
	w->name = suffix ? arena_concat(I->a, o->module, ".", suffix, (char *)NULL)
			 : o->module;
	w->shape = sh;
	w->op = op;
}

/* Counts a new tensor or weight against MODEL_MAX_ELEMS; false after an
 * error at loc. */
static bool within_budget(struct inst *I, const char *name, const struct ir_shape *sh,
			  dtpc_loc loc)
{
	int64_t n = shape_numel(sh), total;
	if (n >= 0 && !__builtin_add_overflow(I->elems, n, &total) && total <= MODEL_MAX_ELEMS) {
		I->elems = total;
		return true;
	}
	diag_error(I->d, loc, "'%s' %s is too large: a model holds at most 2^%d elements "
		   "(1 PiB of float32) in all its tensors and weights", name,
		   shape_str(I->a, sh), MODEL_MAX_ELEMS_LOG2);
	return false;
}

/* ---- names --------------------------------------------------------------- */

static struct binding *find_binding(struct inst *I, const char *name)
{
	for (struct scope *s = I->cur; s; s = s->parent) {
		int b = strmap_get(s->names, name);
		if (b >= 0)
			return &I->bindings[b];
	}
	return NULL;
}

static void port_add(struct arena *a, struct ir_module *mod, const char *name,
		     int tensor)
{
	/* by name and tensor: `add(x, x)` has ports a and b, and a tensor read
	 * under two names (an alias) is a port under each */
	for (int i = 0; i < mod->ninputs; i++)
		if (mod->inputs[i].tensor == tensor && !strcmp(mod->inputs[i].name, name))
			return;
	/* Capacity is implicit: 4, then doubling at each power of two. */
	int n = mod->ninputs;
	if (n == 0 || (n >= 4 && !(n & (n - 1)))) {
		struct ir_port *np = ARENA_ARRAY(a, struct ir_port, n ? 2 * n : 4);
		if (mod->ninputs)
			memcpy(np, mod->inputs, sizeof *np * (size_t)mod->ninputs);
		mod->inputs = np;
	}
	mod->inputs[mod->ninputs].name = name;
	mod->inputs[mod->ninputs].tensor = tensor;
	mod->ninputs++;
}

/* A read of a tensor made before a repeat instance started is an input of
 * that instance (and of every instance around it that it also predates):
 * the ports a `split(NAME, ...)` rule on `blocks.0` refers to. */
static void note_read(struct inst *I, const char *name, int tensor)
{
	for (struct scope *s = I->cur; s && s->instance >= 0; s = s->parent)
		if (tensor < s->first_tensor)
			port_add(I->a, &I->m->modules[s->instance], name, tensor);
}

static const char *const *scope_candidates(void *ud, int *n)
{
	struct inst *I = ud;
	struct name_list L = { 0 };
	/* Parameters and every tensor name visible by its local spelling. */
	for (int i = 0; i < I->m->nparams; i++) {
		GROW(I->a, L.v, L.n, L.cap);
		L.v[L.n++] = I->m->param_names[i];
	}
	for (struct scope *s = I->cur; s; s = s->parent) {
		if (s->index) {
			GROW(I->a, L.v, L.n, L.cap);
			L.v[L.n++] = s->index;
		}
		for (int i = 0; i < I->nbindings; i++) {
			if (I->bindings[i].owner != s || I->bindings[i].tensor < 0)
				continue;
			GROW(I->a, L.v, L.n, L.cap);
			L.v[L.n++] = I->bindings[i].name;
		}
	}
	*n = L.n;
	return L.v;
}

/* The index of the innermost repeat that names one `name`, or NULL. */
static const struct scope *index_scope(const struct inst *I, const char *name)
{
	for (const struct scope *s = I->cur; s; s = s->parent)
		if (s->index && !strcmp(s->index, name))
			return s;
	return NULL;
}

static enum lookup_result param_lookup(void *ud, const char *name, dtpc_loc loc,
				       struct value *out)
{
	struct inst *I = ud;
	const struct scope *ix = I->cur ? index_scope(I, name) : NULL;
	if (ix) {
		*out = (struct value){ .kind = VAL_INT, .i = ix->index_value, .loc = loc };
		return LOOKUP_OK;
	}
	int p = strmap_get(I->params, name);
	if (p >= 0) {
		if (I->read_stamp)
			I->read_stamp[p] = I->stamp;
		*out = I->m->params[p];
		/* a parameter whose default failed was reported there */
		return out->kind == VAL_NONE ? LOOKUP_REPORTED : LOOKUP_OK;
	}
	if (I->cur && find_binding(I, name)) {
		diag_error(I->d, loc, "'%s' is a tensor; a number is expected here",
			   name);
		return LOOKUP_REPORTED;
	}
	return LOOKUP_UNKNOWN;
}

static bool is_op(const char *name)
{
	return op_lookup(name) >= 0;
}

static struct eval_ctx eval_ctx(struct inst *I)
{
	return (struct eval_ctx){ .arena = I->a, .diag = I->d,
				  .lookup = param_lookup, .ud = I,
				  .candidates = scope_candidates, .is_op = is_op };
}

/* ---- arguments ----------------------------------------------------------- */

struct bound {
	const struct arg *arg[SIG_MAX];  /* NULL: default */
	const struct arg **var;          /* variadic tensors */
	int nvar;
};

static bool bind_args(struct inst *I, int op, const struct mstmt *st,
		      struct bound *b)
{
	const struct sig *s = op_sig(op);
	const char *opname = op_table[op].name;
	memset(b, 0, sizeof *b);
	int npos = 0, nargs = 0;
	for (const struct arg *a = st->args; a; a = a->next)
		nargs++;
	b->var = ARENA_ARRAY(I->a, const struct arg *, nargs ? nargs : 1);
	bool ok = true, seen_kw = false;
	for (const struct arg *a = st->args; a; a = a->next) {
		int k = -1;
		if (a->name) {
			seen_kw = true;
			for (int i = 0; i < s->n; i++)
				if (!s->p[i].variadic && !strcmp(s->p[i].name, a->name))
					k = i;
			if (k < 0) {
				diag_error(I->d, a->name_loc,
					   "%s() has no argument '%s'", opname, a->name);
				const char *names[SIG_MAX];
				for (int i = 0; i < s->n; i++)
					names[i] = s->p[i].name;
				const char *best = closest_name(a->name, names, s->n);
				if (best)
					diag_hint(I->d, "did you mean '%s'?", best);
				else
					diag_hint(I->d, "%s(%s)", opname,
						  op_table[op].signature);
				ok = false;
				continue;
			}
		} else {
			if (seen_kw) {
				diag_error(I->d, a->loc,
					   "positional argument after a named one");
				ok = false;
				continue;
			}
			if (npos < s->n && s->p[npos].variadic) {
				b->var[b->nvar++] = a;
				continue;
			}
			k = npos++;
			if (k >= s->n) {
				diag_error(I->d, a->loc,
					   "too many arguments to %s(): it takes %d",
					   opname, s->n);
				diag_hint(I->d, "%s(%s)", opname, op_table[op].signature);
				ok = false;
				break;
			}
		}
		if (b->arg[k]) {
			diag_error(I->d, a->loc, "argument '%s' of %s() given twice",
				   s->p[k].name, opname);
			diag_note(I->d, b->arg[k]->loc, "first given here");
			ok = false;
			continue;
		}
		b->arg[k] = a;
	}
	if (!ok)
		return false;
	for (int i = 0; i < s->n; i++) {
		if (s->p[i].variadic) {
			if (b->nvar < 2) {
				diag_error(I->d, st->op_loc,
					   "%s() needs at least two tensors", opname);
				ok = false;
			}
			continue;
		}
		if (!b->arg[i] && !s->p[i].def) {
			diag_error(I->d, st->op_loc, "%s() is missing argument '%s'",
				   opname, s->p[i].name);
			diag_hint(I->d, "%s(%s)", opname, op_table[op].signature);
			ok = false;
		}
	}
	return ok;
}

/* The tensor a name read at loc stands for (a read: see note_read), or -1
 * after a diagnostic (none when its definition failed and was reported). */
static int tensor_ref(struct inst *I, const char *name, dtpc_loc loc)
{
	struct binding *bd = find_binding(I, name);
	if (bd && bd->tensor < 0 && bd->failed)
		return -1; /* its definition failed and was reported */
	if (bd && bd->tuple) {
		diag_error(I->d, loc, "'%s' is a tuple of %d tensors, not a tensor", name,
			   bd->tuple);
		diag_hint(I->d, "name one of them: %s.0 to %s.%d", name, name, bd->tuple - 1);
		return -1;
	}
	if (!bd || bd->tensor < 0) {
		if (strmap_get(I->params, name) >= 0) {
			diag_error(I->d, loc, "'%s' is a model parameter, not a tensor", name);
			return -1;
		}
		diag_error(I->d, loc, "unknown tensor '%s'", name);
		int n = 0;
		const char *const *names = scope_candidates(I, &n);
		const char *best = closest_name(name, names, n);
		if (best)
			diag_hint(I->d, "did you mean '%s'?", best);
		return -1;
	}
	bd->read = true;
	note_read(I, name, bd->tensor);
	return bd->tensor;
}

static int tensor_arg(struct inst *I, const char *opname, const char *pname,
		      const struct arg *a)
{
	if (a->val->kind != EX_PATH) {
		diag_error(I->d, a->val->loc,
			   "argument '%s' of %s() must name a tensor", pname, opname);
		if (a->val->kind == EX_CALL && is_op(a->val->s))
			diag_hint(I->d, "ops do not nest: give the inner op a name of its own "
				  "(%s_out = %s(...);) and pass that name", a->val->s, a->val->s);
		return -1;
	}
	return tensor_ref(I, a->val->s, a->val->loc);
}

/* The constant value of a non-tensor argument (its default if not given),
 * checked against the signature's kind. */
static bool const_arg(struct inst *I, int op, int k, const struct bound *b,
		      struct value *v)
{
	const struct sig_param *p = &op_sig(op)->p[k];
	const struct arg *a = b->arg[k];
	if (!a) {
		memset(v, 0, sizeof *v);
		v->loc = loc_none();
		switch (p->kind) {
		case 'i': v->kind = VAL_INT; v->i = strtoll(p->def, NULL, 10); break;
		case 'f': v->kind = VAL_FLOAT; v->f = strtod(p->def, NULL); break;
		case 'b': v->kind = VAL_BOOL; v->i = !strcmp(p->def, "true"); break;
		default: v->kind = VAL_STR; v->s = p->def; break;
		}
		return true;
	}
	struct eval_ctx c = eval_ctx(I);
	if (!expr_eval(&c, a->val, v))
		return false;
	bool fits;
	switch (p->kind) {
	case 'i': fits = v->kind == VAL_INT; break;
	case 'f':
		fits = v->kind == VAL_FLOAT || v->kind == VAL_INT;
		if (v->kind == VAL_INT) {
			v->kind = VAL_FLOAT;
			v->f = (double)v->i;
		}
		break;
	case 'b': fits = v->kind == VAL_BOOL; break;
	case 's': fits = v->kind == VAL_STR; break;
	default:
		fits = v->kind == VAL_LIST;
		for (int i = 0; fits && i < v->n; i++)
			fits = v->items[i].kind == VAL_INT;
		break;
	}
	if (!fits) {
		static const char *want[128] = {
			['i'] = "an integer", ['f'] = "a number", ['b'] = "true or false",
			['s'] = "a string", ['l'] = "a list of integers",
		};
		diag_error(I->d, a->val->loc, "argument '%s' of %s() must be %s, not %s",
			   p->name, op_table[op].name, want[(int)p->kind],
			   value_str(I->a, v));
		if (p->kind == 'i' && v->kind == VAL_FLOAT)
			diag_hint(I->d, "int(...) makes an integer of a number (toward zero, "
				  "as Python's int)");
		return false;
	}
	return true;
}

/* ---- shape rules ----------------------------------------------------------- */

/* Fills o's attributes and output shape; false after a diagnostic. */
static bool shape_rule(struct inst *I, struct ir_op *o, const struct bound *b,
		       struct ir_shape *out, int opi)
{
	struct value v[SIG_MAX];
	const struct sig *s = op_sig(o->kind);
	for (int k = 0; k < s->n; k++)
		if (s->p[k].kind != 't' && !const_arg(I, o->kind, k, b, &v[k]))
			return false;
	struct op_ctx C = { I->a, I->d, I->m };
	const struct op_compile *c = op_compile[o->kind];
	/* graph-only ops have none: op_lookup never returns them */
	struct diag *mark = I->d->tail;
	bool ok = c->shape && c->shape(&C, o, v, out, opi);
	diag_claim(I->d, mark);
	return ok;
}

/* ---- statements ------------------------------------------------------------ */

static void walk(struct inst *I, const struct mstmt *body);
static void fail_branches(struct inst *I, const struct mstmt *st);

static void define(struct inst *I, struct scope *s, const char *name, int tensor,
		   dtpc_loc loc)
{
	GROW(I->a, I->bindings, I->nbindings, I->capbindings);
	I->bindings[I->nbindings] = (struct binding){ .tensor = tensor, .loc = loc,
						      .owner = s, .name = name };
	strmap_put(s->names, name, I->nbindings++);
}

/* The binding of name in the current scope alone, or NULL. */
static struct binding *local_binding(struct inst *I, const char *name)
{
	int b = strmap_get(I->cur->names, name);
	return b >= 0 ? &I->bindings[b] : NULL;
}

static bool check_unique(struct inst *I, const char *name, dtpc_loc loc,
			 bool assignment)
{
	struct binding *prev = local_binding(I, name);
	if (!prev)
		return true;
	diag_error(I->d, loc, "'%s' is already defined in this scope", name);
	diag_note(I->d, prev->loc, "'%s' was first defined here", name);
	if (assignment)
		diag_hint(I->d, "only a variable (a model input, or a name an alias "
			  "`name = other;` bound) may be bound again, and in a repeat a "
			  "name from outside it; use a new name");
	return false;
}

/* A statement that failed still defines its name, as failed, so that its
 * uses do not report "unknown tensor" again. */
static void define_failed(struct inst *I, const struct mstmt *st, bool update)
{
	I->m->nfailed++;
	if (update || local_binding(I, st->name))
		return;
	define(I, I->cur, st->name, -1, st->name_loc);
	I->bindings[I->nbindings - 1].failed = true;
}

static void do_input(struct inst *I, const struct mstmt *st)
{
	if (I->cur->parent) {
		diag_error(I->d, st->loc, "'input' is only allowed at the top of a model");
		define_failed(I, st, false);
		return;
	}
	if (!check_unique(I, st->name, st->name_loc, false))
		return;
	struct ir_shape sh = { 0 };
	struct eval_ctx c = eval_ctx(I);
	bool ok = true;
	for (const struct expr *e = st->dims; e; e = e->next) {
		struct value v;
		if (sh.nd == IR_MAX_DIMS) {
			diag_error(I->d, e->loc, "a shape has at most %d dims", IR_MAX_DIMS);
			return;
		}
		if (!expr_eval(&c, e, &v)) {
			ok = false;
			continue;
		}
		if (v.kind != VAL_INT || v.i < 1) {
			diag_error(I->d, e->loc, "a dim must be a positive integer, not %s",
				   value_str(I->a, &v));
			ok = false;
			continue;
		}
		sh.d[sh.nd++] = v.i;
	}
	if (!ok || !within_budget(I, st->name, &sh, st->loc)) {
		define_failed(I, st, false);
		return;
	}
	int t = new_tensor(I, st->name, sh, -1, st->name_loc);
	define(I, I->cur, st->name, t, st->name_loc);
	I->bindings[I->nbindings - 1].variable = true;
	struct ir_model *m = I->m;
	int *ni = ARENA_ARRAY(I->a, int, m->ninputs + 1);
	if (m->ninputs)
		memcpy(ni, m->inputs, sizeof *ni * (size_t)m->ninputs);
	ni[m->ninputs++] = t;
	m->inputs = ni;
	port_add(I->a, &m->modules[0], st->name, t);
}

static void record_update(struct inst *I, const char *name)
{
	struct binding *b = find_binding(I, name);
	for (struct scope *s = I->cur; s && s != b->owner; s = s->parent) {
		for (int i = 0; i < s->nupdated; i++)
			if (!strcmp(s->updated[i], name))
				goto next;
		GROW(I->a, s->updated, s->nupdated, s->capupdated);
		s->updated[s->nupdated++] = name;
next:;
	}
}

static void unknown_op(struct inst *I, const struct mstmt *st)
{
	diag_error(I->d, st->op_loc, "unknown op '%s'", st->op);
	const char *names[OP_COUNT + 1];
	int nn = 0;
	for (int i = 0; i < OP_COUNT; i++)
		if (!(op_table[i].flags & OPF_LOWERED))
			names[nn++] = op_table[i].name;
	names[nn++] = "tuple";
	const char *best = closest_name(st->op, names, nn);
	if (best)
		diag_hint(I->d, "did you mean '%s'?", best);
	define_failed(I, st, false);
}

/* Whether assigning name binds an existing variable again rather than
 * defining a new name: a variable carried from outside the current repeat
 * (any name from there, modules included, as before aliases existed), or a
 * variable of this scope (an input or an alias, never a module). */
static bool is_update(struct inst *I, const char *name)
{
	struct binding *prev = find_binding(I, name);
	if (!prev || prev->tuple || (prev->tensor < 0 && !prev->failed))
		return false;
	return prev->owner != I->cur || prev->variable;
}

/* Binds name (is_update said yes) to tensor t: a repeat instance that
 * rebinds a variable from outside it outputs it. */
static void rebind(struct inst *I, const char *name, int t)
{
	record_update(I, name);
	struct binding *b = find_binding(I, name);
	b->tensor = t;
	b->failed = false;
}

/* `name = tuple(a, b, ...);` — a module whose outputs are the tensors a, b,
 * ... themselves (no copy), read as name.0, name.1, ...: what diffusers'
 * modules that return tuples (Wan's rope) are to a _cp_plan, whose
 * split(out.K, ...) and gather(out.K, ...) address output K. */
static void do_tuple(struct inst *I, const struct mstmt *st)
{
	struct binding *prev = find_binding(I, st->name);
	if (prev && prev->owner != I->cur) {
		diag_error(I->d, st->name_loc, "a tuple cannot rebind '%s', a variable from "
			   "outside this repeat", st->name);
		diag_note(I->d, prev->loc, "'%s' was first defined here", st->name);
		define_failed(I, st, false);
		return;
	}
	if (!check_unique(I, st->name, st->name_loc, true))
		return;
	int n = 0;
	bool ok = true;
	for (const struct arg *a = st->args; a; a = a->next) {
		const char *elem = arena_printf(I->a, "%s.%d", st->name, n);
		if (!check_unique(I, elem, st->name_loc, false))
			ok = false;
		n++;
		if (a->name) {
			diag_error(I->d, a->name_loc, "tuple() takes tensors by position, "
				   "not by name");
			ok = false;
		}
	}
	if (n < 2) {
		diag_error(I->d, st->op_loc, "tuple() needs at least two tensors");
		diag_hint(I->d, "another name for one tensor is an alias: %s = %s;", st->name,
			  st->args && st->args->val->kind == EX_PATH ? st->args->val->s : "other");
		ok = false;
	}
	int *outs = ARENA_ARRAY(I->a, int, n ? n : 1);
	int k = 0;
	for (const struct arg *a = st->args; a; a = a->next, k++) {
		outs[k] = tensor_arg(I, "tuple", arena_printf(I->a, "%d", k), a);
		ok &= outs[k] >= 0;
	}
	if (!ok) {
		/* name.K too, so that its readers stay silent */
		for (int i = 0; i < n; i++) {
			const char *elem = arena_printf(I->a, "%s.%d", st->name, i);
			if (!local_binding(I, elem)) {
				define(I, I->cur, elem, -1, st->name_loc);
				I->bindings[I->nbindings - 1].failed = true;
			}
		}
		define_failed(I, st, false);
		return;
	}
	const char *full = arena_concat(I->a, I->cur->prefix, st->name, (char *)NULL);
	define(I, I->cur, st->name, -1, st->name_loc);
	I->bindings[I->nbindings - 1].tuple = n;
	for (int i = 0; i < n; i++)
		define(I, I->cur, arena_printf(I->a, "%s.%d", st->name, i), outs[i],
		       st->name_loc);
	int mi = new_module(I, full, MOD_TUPLE, st->name_loc);
	if (mi < 0)
		return;
	struct ir_module *mod = &I->m->modules[mi];
	mod->outputs = outs;
	mod->noutputs = n;
	/* where its styles apply: after the ops made so far */
	mod->first_op = mod->end_op = I->m->nops;
}

/* `name = other;` — another name for a tensor (no op, no module): binds a
 * new name, or a variable again (the root's `hidden_states = x_embedder;`,
 * as diffusers rebinds hidden_states in forward). */
static void do_alias(struct inst *I, const struct mstmt *st)
{
	int t = tensor_ref(I, st->src, st->src_loc);
	bool update = is_update(I, st->name);
	if (!update && !check_unique(I, st->name, st->name_loc, true))
		return;
	if (t < 0) {
		define_failed(I, st, update);
		return;
	}
	if (update) {
		rebind(I, st->name, t);
		return;
	}
	define(I, I->cur, st->name, t, st->name_loc);
	I->bindings[I->nbindings - 1].variable = true;
	I->bindings[I->nbindings - 1].alias = true;
}

/* A new name an alias bound and nothing read (`hidden_state = x_embedder;`
 * for hidden_states): a note, since a typo on the left of an alias makes a
 * new name instead of an error. Over the bindings the current scope made
 * from index `first` on. */
static void unread_aliases(struct inst *I, int first, struct strmap *seen)
{
	for (int i = first; i < I->nbindings; i++) {
		const struct binding *b = &I->bindings[i];
		if (b->owner != I->cur || !b->alias || b->read)
			continue;
		if (seen) { /* the statement's note once, whichever iteration */
			const char *at = arena_printf(I->a, "%d:%d:%d", b->loc.file, b->loc.line,
						      b->loc.col);
			if (strmap_get(seen, at) >= 0)
				continue;
			strmap_put(seen, at, 1);
		}
		diag_remark(I->d, b->loc, "'%s' is bound here but never read", b->name);
		int n = 0, k = 0;
		const char **names = (const char **)scope_candidates(I, &n);
		for (int j = 0; j < n; j++) /* itself aside */
			if (strcmp(names[j], b->name))
				names[k++] = names[j];
		const char *best = closest_name(b->name, names, k);
		if (best)
			diag_hint(I->d, "a typo of '%s'?", best);
	}
}

/* An if whose condition failed takes no branch: the names its branches
 * define are defined as failed, so that their uses do not cascade into
 * "unknown tensor" errors. */
static void fail_names(struct inst *I, const struct mstmt *body)
{
	for (const struct mstmt *st = body; st; st = st->next) {
		switch (st->kind) {
		case MS_INPUT:
		case MS_ASSIGN:
		case MS_ALIAS:
		case MS_REPEAT:
			if (!find_binding(I, st->name))
				define_failed(I, st, false);
			break;
		case MS_IF:
			fail_branches(I, st);
			break;
		case MS_OUTPUT:
		case MS_ASSERT:
			break;
		}
	}
}

static void fail_branches(struct inst *I, const struct mstmt *st)
{
	fail_names(I, st->body);
	fail_names(I, st->orelse);
}

/* `if COND { ... } else { ... }`: the branch taken runs in the scope around
 * it; the other is parsed (so syntax-checked) but not instantiated. */
static void do_if(struct inst *I, const struct mstmt *st)
{
	struct eval_ctx c = eval_ctx(I);
	struct value v;
	/* !st->count: a syntax error in the condition, reported */
	if (!st->count || !expr_eval(&c, st->count, &v)) {
		fail_branches(I, st);
		return;
	}
	if (v.kind != VAL_BOOL) {
		diag_error(I->d, st->count->loc, "an if condition must be true or false, not %s",
			   value_str(I->a, &v));
		diag_hint(I->d, "compare it: if %s > 0 { ... }",
			  st->count->kind == EX_PATH ? st->count->s : "n");
		fail_branches(I, st);
		return;
	}
	walk(I, v.i ? st->body : st->orelse);
}

/* `assert COND, "message";`: a model refuses parameter values it does not
 * model (Wan's image_dim: image-to-video). The error is at the assert; walk's
 * blame adds a note at each config key or -D the condition read. As Python's
 * assert, a failing one ends the model there: what follows was written for
 * the values the asserts allow, and its errors would only bury the message. */
static void do_assert(struct inst *I, const struct mstmt *st)
{
	struct eval_ctx c = eval_ctx(I);
	struct value v;
	if (!expr_eval(&c, st->count, &v))
		return; /* reported */
	if (v.kind != VAL_BOOL) {
		diag_error(I->d, st->count->loc, "an assert condition must be true or false, not %s",
			   value_str(I->a, &v));
		diag_hint(I->d, "compare it: assert %s > 0, \"...\";",
			  st->count->kind == EX_PATH ? st->count->s : "n");
		return;
	}
	if (!v.i) {
		diag_error(I->d, st->name_loc, "%s", st->src);
		I->halted = true;
	}
}

static void do_assign(struct inst *I, const struct mstmt *st)
{
	if (!st->op) { /* a syntax error, already reported */
		define_failed(I, st, false);
		return;
	}
	if (!strcmp(st->op, "tuple")) {
		do_tuple(I, st);
		return;
	}
	int op = op_lookup(st->op);
	if (op < 0) {
		unknown_op(I, st);
		return;
	}
	bool update = is_update(I, st->name);
	if (!update && !check_unique(I, st->name, st->name_loc, true))
		return;
	struct bound b;
	if (!bind_args(I, op, st, &b)) {
		define_failed(I, st, update);
		return;
	}

	struct ir_model *m = I->m;
	const struct sig *s = op_sig(op);
	int nin = b.nvar;
	for (int k = 0; k < s->n; k++) /* an optional tensor counts when given */
		nin += s->p[k].kind == 't' && !s->p[k].variadic && b.arg[k];
	struct ir_op o = { .kind = (enum op_kind)op, .loc = st->loc, .module_index = -1,
			   .name_loc = st->name_loc, .stmt = st, .update = update,
			   .instance = I->cur->instance };
	o.module = arena_concat(I->a, I->cur->prefix, st->name, (char *)NULL);
	o.in = ARENA_ARRAY(I->a, int, nin);
	o.in_loc = ARENA_ARRAY(I->a, dtpc_loc, nin);
	bool ok = true;
	for (int k = 0; k < s->n; k++) {
		if (s->p[k].kind != 't')
			continue;
		if (s->p[k].variadic) {
			for (int i = 0; i < b.nvar; i++) {
				o.in_loc[o.nin] = b.var[i]->loc;
				o.in[o.nin] = tensor_arg(I, op_table[op].name, "inputs", b.var[i]);
				ok &= o.in[o.nin++] >= 0;
			}
			continue;
		}
		if (!b.arg[k])
			continue;
		o.in_loc[o.nin] = b.arg[k]->loc;
		o.in[o.nin] = tensor_arg(I, op_table[op].name, s->p[k].name, b.arg[k]);
		ok &= o.in[o.nin++] >= 0;
	}
	if (!ok) {
		define_failed(I, st, update);
		return;
	}

	GROW(I->a, m->ops, m->nops, m->capops);
	int opi = m->nops++;
	m->ops[opi] = o;
	struct ir_shape out;
	bool fits = shape_rule(I, &m->ops[opi], &b, &out, opi);
	if (fits && m->ops[opi].kind != OP_param)
		fits = within_budget(I, m->ops[opi].module, &out, st->loc);
	for (int w = 0; fits && w < m->ops[opi].nweights; w++)
		fits = within_budget(I, m->weights[m->ops[opi].weight0 + w].name,
				     &m->weights[m->ops[opi].weight0 + w].shape, st->loc);
	if (!fits) {
		/* Keep the op out of the IR but its name defined, so later uses
		 * do not cascade into "unknown tensor" errors. */
		m->nweights -= m->ops[opi].nweights;
		m->nops--;
		define_failed(I, st, update);
		return;
	}
	struct ir_op *po = &m->ops[opi];
	po->out = new_tensor(I, po->module, out, opi, st->name_loc);
	if (update) {
		rebind(I, st->name, po->out);
		return;
	}
	define(I, I->cur, st->name, po->out, st->name_loc);
	int mi = new_module(I, po->module, MOD_OP, st->name_loc);
	if (mi < 0)
		return;
	struct ir_module *mod = &m->modules[mi];
	mod->op = opi;
	po->module_index = mi;
	const struct sig *sg = op_sig(op);
	for (int i = 0, k = 0; i < po->nin; i++) {
		while (k < sg->n && sg->p[k].kind != 't')
			k++;
		const char *pname = k < sg->n ? sg->p[k].name : "inputs";
		port_add(I->a, mod, pname, po->in[i]);
		if (k < sg->n && !sg->p[k].variadic)
			k++;
	}
	mod->outputs = ARENA_NEW(I->a, int);
	mod->outputs[0] = po->out;
	mod->noutputs = 1;
}

static void do_repeat(struct inst *I, const struct mstmt *st)
{
	struct eval_ctx c = eval_ctx(I);
	struct value n;
	if (!expr_eval(&c, st->count, &n))
		return;
	if (n.kind != VAL_INT || n.i < 0 || n.i > 1000000) {
		diag_error(I->d, st->count->loc,
			   "repeat count must be an integer from 0 to 1000000, not %s",
			   value_str(I->a, &n));
		return;
	}
	if (!check_unique(I, st->name, st->name_loc, false))
		return;
	/* The index is a number of the body's expressions: a parameter or an
	 * outer repeat's index of that name would be hidden by it. */
	if (st->index && (strmap_get(I->params, st->index) >= 0 || index_scope(I, st->index))) {
		diag_error(I->d, st->index_loc, "'%s' is already %s: the index needs a name "
			   "of its own", st->index, strmap_get(I->params, st->index) >= 0
			   ? "a parameter of the model" : "the index of a repeat around this one");
		return;
	}
	define(I, I->cur, st->name, -1, st->name_loc);
	int errors_before = I->d->nerrors;
	/* With an index, iterations may differ (`if i == num_layers - 1`): an
	 * unread alias of any of them is noted, each statement once. */
	struct strmap *seen = st->index ? strmap_create(I->a, 8) : NULL;
	for (int64_t i = 0; i < n.i; i++) {
		if (I->m->nmodules + I->m->nops > INST_BUDGET) {
			diag_error(I->d, st->count->loc,
				   "model is too large: more than %d modules and ops", INST_BUDGET);
			I->over_budget = true;
			return;
		}
		if (I->over_budget)
			return;
		const char *iname = arena_printf(I->a, "%s%s.%" PRId64, I->cur->prefix,
						 st->name, i);
		int mi = new_module(I, iname, MOD_INSTANCE, st->name_loc);
		if (mi < 0)
			return;
		struct scope s = { .parent = I->cur, .names = strmap_create(I->a, 16),
				   .prefix = arena_printf(I->a, "%s.", iname),
				   .instance = mi, .first_tensor = I->m->ntensors,
				   .index = st->index, .index_value = i };
		I->m->modules[mi].first_op = I->m->nops;
		I->cur = &s;
		int first_binding = I->nbindings;
		walk(I, st->body);
		/* without an index, the other iterations run the same statements */
		if ((i == 0 || seen) && !I->halted)
			unread_aliases(I, first_binding, seen);
		I->cur = s.parent;
		struct ir_module *mod = &I->m->modules[mi];
		mod->end_op = I->m->nops;
		mod->noutputs = s.nupdated;
		mod->outputs = ARENA_ARRAY(I->a, int, s.nupdated ? s.nupdated : 1);
		for (int u = 0; u < s.nupdated; u++)
			mod->outputs[u] = find_binding(I, s.updated[u])->tensor;
		/* An error in one iteration would mostly repeat in the rest
		 * (all of them run the same statements, but for the branches
		 * an index takes): report it once and stop. */
		if (I->d->nerrors > errors_before)
			return;
	}
}

static void do_output(struct inst *I, const struct mstmt *st)
{
	if (I->cur->parent) {
		diag_error(I->d, st->loc, "'output' is only allowed at the top of a model");
		return;
	}
	struct ir_model *m = I->m;
	for (const struct pathref *r = st->outputs; r; r = r->next) {
		struct binding *b = find_binding(I, r->name);
		if (b)
			b->read = true;
		if (b && b->tuple) {
			diag_error(I->d, r->loc, "'%s' is a tuple of %d tensors: output them "
				   "one by one", r->name, b->tuple);
			diag_hint(I->d, "output %s_0 = %s.0, ...;", r->name, r->name);
			continue;
		}
		if (!b || b->tensor < 0) {
			if (!b || !b->failed)
				diag_error(I->d, r->loc, "unknown tensor '%s' in output",
					   r->name);
			continue;
		}
		/* outputs are bound and saved by the name written here
		 * (`output sample = proj_out;`): each name once */
		const char *name = r->as ? r->as : r->name;
		dtpc_loc loc = r->as ? r->as_loc : r->loc;
		int dup = -1;
		for (int i = 0; i < m->noutputs; i++)
			if (!strcmp(m->output_names[i], name))
				dup = i;
		if (dup >= 0) {
			diag_error(I->d, loc, "'%s' is an output twice", name);
			diag_note(I->d, m->output_loc[dup], "first listed here");
			continue;
		}
		int *no = ARENA_ARRAY(I->a, int, m->noutputs + 1);
		dtpc_loc *nl = ARENA_ARRAY(I->a, dtpc_loc, m->noutputs + 1);
		const char **nn = ARENA_ARRAY(I->a, const char *, m->noutputs + 1);
		if (m->noutputs) {
			memcpy(no, m->outputs, sizeof *no * (size_t)m->noutputs);
			memcpy(nl, m->output_loc, sizeof *nl * (size_t)m->noutputs);
			memcpy(nn, m->output_names, sizeof *nn * (size_t)m->noutputs);
		}
		no[m->noutputs] = b->tensor;
		nn[m->noutputs] = name;
		nl[m->noutputs++] = loc;
		m->outputs = no;
		m->output_loc = nl;
		m->output_names = nn;
	}
}

/* ---- config provenance ----------------------------------------------------- */

/* The config keys behind the parameters read since stamp `since`, each once,
 * in declaration order. */
static struct origin *origins_read(struct inst *I, unsigned since)
{
	struct origin *list = NULL, **tail = &list;
	for (int p = 0; p < I->m->nparams; p++) {
		if (I->read_stamp[p] < since)
			continue;
		for (const struct origin *o = I->origins[p]; o; o = o->next) {
			bool seen = false;
			for (const struct origin *q = list; q && !seen; q = q->next)
				seen = q->ov == o->ov;
			if (seen)
				continue;
			*tail = ARENA_NEW(I->a, struct origin);
			(*tail)->ov = o->ov;
			tail = &(*tail)->next;
		}
	}
	return list;
}

/* Starts a stretch of evaluation whose errors blame the config keys it
 * reads: returns the stamp to give blame. */
static unsigned blame_begin(struct inst *I)
{
	if (!I->origins)
		return 0;
	I->blamed = I->d->tail;
	return ++I->stamp;
}

/* Each error since blame_begin not yet blamed (an inner statement's are)
 * gets a note at each config key behind the parameters read: "num_heads =
 * 0 comes from the config here", where diffusers' user looks first. */
static void blame(struct inst *I, unsigned since)
{
	if (!I->origins || (!I->d->tail && I->d->head))
		return; /* no --config, or past the error limit */
	struct diag *from = I->blamed ? I->blamed->next : I->d->head;
	I->blamed = I->d->tail;
	struct origin *list = NULL;
	for (struct diag *e = from; e; e = e->next) {
		if (e->level != DIAG_ERROR)
			continue;
		if (!list && !(list = origins_read(I, since)))
			return;
		for (const struct origin *o = list; o; o = o->next) {
			if (o->ov->from_cli)
				diag_note_to(I->d, e, I->use_loc, "%s = %s comes from -D",
					     o->ov->name, value_str(I->a, &o->ov->val));
			else
				diag_note_to(I->d, e, o->ov->val.loc,
					     "%s = %s comes from the config here", o->ov->name,
					     value_str(I->a, &o->ov->val));
		}
	}
}

static void walk(struct inst *I, const struct mstmt *body)
{
	for (const struct mstmt *st = body; st && !I->halted; st = st->next) {
		unsigned since = blame_begin(I);
		switch (st->kind) {
		case MS_INPUT: do_input(I, st); break;
		case MS_ASSIGN: do_assign(I, st); break;
		case MS_REPEAT: do_repeat(I, st); break;
		case MS_OUTPUT: do_output(I, st); break;
		case MS_ALIAS: do_alias(I, st); break;
		case MS_IF: do_if(I, st); break;
		case MS_ASSERT: do_assert(I, st); break;
		}
		blame(I, since);
	}
}

/* ---- parameters -------------------------------------------------------------- */

/* The kind every item of a list has (a number where integers and numbers
 * mix), or VAL_NONE: empty, or of several kinds. */
static enum value_kind item_kind(const struct value *v)
{
	enum value_kind k = VAL_NONE;
	for (int i = 0; i < v->n; i++) {
		enum value_kind x = v->items[i].kind;
		if (x == VAL_LIST || x == VAL_NONE)
			return VAL_NONE;
		if (k == VAL_NONE || k == x)
			k = x;
		else if ((k == VAL_INT || k == VAL_FLOAT) && (x == VAL_INT || x == VAL_FLOAT))
			k = VAL_FLOAT;
		else
			return VAL_NONE;
	}
	return k;
}

/* A parameter's kind in words: "an integer", "a list of integers". */
static const char *kind_words(struct arena *a, const struct value *def)
{
	enum value_kind k = def->kind == VAL_LIST ? item_kind(def) : VAL_NONE;
	if (k != VAL_NONE)
		return arena_printf(a, "a list of %ss", value_kind_name(k));
	return arena_printf(a, "%s %s", def->kind == VAL_INT ? "an" : "a",
			    value_kind_name(def->kind));
}

/* Whether an override v may replace the default def: the same kind (an
 * integer where a number is expected is fine), and for a list whose items
 * share a kind, items of that kind. *out gets v with such integers made
 * numbers. */
static bool fits(struct arena *a, const struct value *def, const struct value *v,
		 struct value *out)
{
	*out = *v;
	/* none (diffusers' None) stands for any kind, and any kind for it:
	 * `image_dim = none` takes 1280, as diffusers' `int | None` */
	if (def->kind == VAL_NULL || v->kind == VAL_NULL)
		return true;
	if (def->kind == VAL_FLOAT && v->kind == VAL_INT) {
		out->kind = VAL_FLOAT;
		out->f = (double)v->i;
		return true;
	}
	if (v->kind != def->kind)
		return false;
	enum value_kind k = def->kind == VAL_LIST ? item_kind(def) : VAL_NONE;
	if (k == VAL_NONE)
		return true;
	out->items = ARENA_ARRAY(a, struct value, v->n ? v->n : 1);
	for (int i = 0; i < v->n; i++)
		if (!fits(a, &(struct value){ .kind = k }, &v->items[i], &out->items[i]))
			return false;
	return true;
}

/* Parameters in declaration order; an override replaces the default, and
 * later defaults see earlier values (`hidden = heads * head_dim`). */
static void bind_params(struct inst *I, const struct model *md,
			struct override *ov, int nov, dtpc_loc use_loc)
{
	struct ir_model *m = I->m;
	int n = 0;
	for (const struct arg *a = md->params; a; a = a->next)
		n++;
	m->param_names = ARENA_ARRAY(I->a, const char *, n);
	m->params = ARENA_ARRAY(I->a, struct value, n);
	I->use_loc = use_loc;
	for (int i = 0; i < nov && !I->origins; i++)
		if (ov[i].from_config || ov[i].from_cli) {
			I->origins = ARENA_ARRAY(I->a, struct origin *, n ? n : 1);
			I->read_stamp = ARENA_ARRAY(I->a, unsigned, n ? n : 1);
		}
	struct eval_ctx c = eval_ctx(I);
	for (const struct arg *a = md->params; a; a = a->next) {
		if (strmap_get(I->params, a->name) >= 0) {
			diag_error(I->d, a->name_loc, "duplicate parameter '%s'", a->name);
			continue;
		}
		struct value v = { 0 }, fit;
		const struct override *use = NULL;
		for (int i = 0; i < nov; i++)
			if (!strcmp(ov[i].name, a->name)) {
				ov[i].used = true;
				use = &ov[i]; /* the last one wins: -D after the plan */
			}
		const struct override *given = use; /* use may become a copy below */
		unsigned since = blame_begin(I);
		bool ok = expr_eval(&c, a->val, &v);
		blame(I, since);
		/* `-D act=none` of a string parameter is the string "none" */
		struct override cli_str;
		if (use && ok && use->from_cli && use->val.kind == VAL_NULL && v.kind == VAL_STR) {
			cli_str = *use;
			cli_str.val.kind = VAL_STR;
			cli_str.val.s = "none";
			use = &cli_str;
		}
		/* An override keeps the parameter's kind: `-D seq=abc` is reported
		 * here, not as a bad shape deep in the model. An integer where a
		 * number is expected is fine. A config's value is checked even
		 * where -D replaces it: the file is wrong all the same. */
		if (use)
			fit = use->val; /* as given where the default failed */
		for (int i = 0; i < nov && ok; i++) {
			const struct override *x = &ov[i];
			if (strcmp(x->name, a->name) || (x != use && !x->from_config))
				continue;
			struct value conv;
			if (fits(I->a, &v, &x->val, &conv)) {
				if (x == use)
					fit = conv;
				continue;
			}
			const char *kind = kind_words(I->a, &v), *def = value_str(I->a, &v);
			if (x->from_config) {
				const struct value *u = &x->val;
				const char *got = x->unfit ? x->unfit
					: arena_printf(I->a, "%s, %s", value_str(I->a, u),
						       kind_words(I->a, u));
				diag_error(I->d, x->val.loc, "config key '%s' is %s; model '%s' takes "
					   "%s (default %s)", a->name, got, md->name, kind, def);
				diag_note(I->d, a->name_loc, "'%s' is declared here", a->name);
			} else {
				diag_error(I->d, x->from_cli ? use_loc : x->val.loc,
					   "%s%s = %s: '%s' is %s in model '%s' (default %s)",
					   x->from_cli ? "-D " : "", a->name,
					   value_str(I->a, &x->val), a->name, kind, md->name, def);
			}
			if (x == use)
				use = NULL;
		}
		if (use)
			v = fit;
		if (!ok && !use)
			v.kind = VAL_NONE;
		if (I->origins) {
			/* the key itself, or (a default) those behind what it read */
			struct origin *o = NULL;
			if (use && (given->from_config || given->from_cli)) {
				o = ARENA_NEW(I->a, struct origin);
				o->ov = given;
			}
			I->origins[m->nparams] = use ? o : origins_read(I, since);
		}
		m->param_names[m->nparams] = a->name;
		m->params[m->nparams] = v;
		strmap_put(I->params, a->name, m->nparams++);
	}
	for (int i = 0; i < nov; i++) {
		if (ov[i].used)
			continue;
		if (ov[i].from_config) {
			/* as diffusers' from_config: a note, and the key is ignored */
			diag_remark(I->d, ov[i].val.loc, "model '%s' has no parameter '%s': the "
				    "config key is ignored", md->name, ov[i].name);
			const char *best = closest_name(ov[i].name, m->param_names, m->nparams);
			if (best)
				diag_hint(I->d, "did you mean '%s'?", best);
			continue;
		}
		dtpc_loc l = ov[i].from_cli ? use_loc : ov[i].val.loc;
		diag_error(I->d, l, "model '%s' has no parameter '%s'%s", md->name,
			   ov[i].name, ov[i].from_cli ? " (from -D)" : "");
		const char *best = closest_name(ov[i].name, m->param_names, m->nparams);
		if (best)
			diag_hint(I->d, "did you mean '%s'?", best);
		diag_note(I->d, md->name_loc, "model '%s' is declared here", md->name);
	}
}

struct ir_model *model_instantiate(struct arena *a, struct diag_ctx *d,
				   const struct model *md, struct override *ov,
				   int nov, dtpc_loc use_loc)
{
	struct ir_model *m = ARENA_NEW(a, struct ir_model);
	m->name = md->name;
	m->decl = md;
	struct inst I = { .a = a, .d = d, .m = m,
			  .params = strmap_create(a, 16),
			  .modules = strmap_create(a, 1024) };
	struct scope root = { .names = strmap_create(a, 64), .prefix = "",
			      .instance = -1 };
	bind_params(&I, md, ov, nov, use_loc);
	I.cur = &root;
	new_module(&I, "", MOD_ROOT, md->name_loc);
	walk(&I, md->body);
	if (!I.halted)
		unread_aliases(&I, 0, NULL);
	m->modules[0].outputs = m->outputs;
	m->modules[0].noutputs = m->noutputs;
	m->modules[0].end_op = m->nops;
	if (m->noutputs == 0 && d->nerrors == 0) {
		diag_error(d, md->name_loc, "model '%s' has no output", md->name);
		diag_hint(d, "add 'output NAME;' at the end of the model");
	}
	return m;
}
