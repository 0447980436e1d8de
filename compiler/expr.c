/* expr.c — evaluation of constant expressions. */
#include "expr.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

const char *value_kind_name(enum value_kind k)
{
	static const char *names[] = { "nothing", "integer", "number", "string",
				       "boolean", "list", "none" };
	return names[k];
}

const char *binop_str(int op)
{
	switch (op) {
	case BIN_FLOORDIV: return "//";
	case BIN_EQ: return "==";
	case BIN_NE: return "!=";
	case BIN_LE: return "<=";
	case BIN_GE: return ">=";
	case BIN_AND: return "and";
	case BIN_OR: return "or";
	case BIN_IN: return "in";
	case '+': return "+";
	case '-': return "-";
	case '*': return "*";
	case '/': return "/";
	case '%': return "%";
	case '<': return "<";
	case '>': return ">";
	}
	return "?";
}

static double num(const struct value *v)
{
	return v->kind == VAL_INT ? (double)v->i : v->f;
}

static bool is_num(const struct value *v)
{
	return v->kind == VAL_INT || v->kind == VAL_FLOAT;
}

/* Python's equality: numbers by value (1 == 1.0), lists element-wise, and
 * values of different kinds are never equal. */
static bool equal(const struct value *a, const struct value *b)
{
	if (is_num(a) && is_num(b))
		return a->kind == VAL_INT && b->kind == VAL_INT ? a->i == b->i : num(a) == num(b);
	if (a->kind != b->kind)
		return false;
	switch (a->kind) {
	case VAL_STR: return !strcmp(a->s, b->s);
	case VAL_BOOL: return a->i == b->i;
	case VAL_NULL: return true;
	case VAL_LIST:
		if (a->n != b->n)
			return false;
		for (int i = 0; i < a->n; i++)
			if (!equal(&a->items[i], &b->items[i]))
				return false;
		return true;
	case VAL_NONE:
	case VAL_INT:
	case VAL_FLOAT: break;
	}
	return false;
}

/* ==, !=, <, >, <=, >=, in: a boolean. Order needs numbers; `in` a list
 * (Python's `i in dual_attention_layers`, items compared as by ==). */
static bool compare(struct eval_ctx *c, const struct expr *e, const struct value *a,
		    const struct value *b, struct value *out)
{
	out->kind = VAL_BOOL;
	out->loc = e->loc;
	if (e->op == BIN_EQ || e->op == BIN_NE) {
		out->i = equal(a, b) == (e->op == BIN_EQ);
		return true;
	}
	if (e->op == BIN_IN) {
		if (b->kind != VAL_LIST) {
			diag_error(c->diag, b->loc, "'in' needs a list on its right, not %s",
				   value_str(c->arena, b));
			return false;
		}
		out->i = false;
		for (int k = 0; k < b->n && !out->i; k++)
			out->i = equal(a, &b->items[k]);
		return true;
	}
	if (!is_num(a) || !is_num(b)) {
		const struct value *bad = is_num(a) ? b : a;
		diag_error(c->diag, bad->loc, "'%s' needs numbers, not %s", binop_str(e->op),
			   value_str(c->arena, bad));
		return false;
	}
	bool ints = a->kind == VAL_INT && b->kind == VAL_INT;
	int cmp = ints ? (a->i > b->i) - (a->i < b->i) : (num(a) > num(b)) - (num(a) < num(b));
	switch (e->op) {
	case '<': out->i = cmp < 0; break;
	case '>': out->i = cmp > 0; break;
	case BIN_LE: out->i = cmp <= 0; break;
	default: out->i = cmp >= 0; break;
	}
	return true;
}

static bool arith(struct eval_ctx *c, const struct expr *e,
		  const struct value *a, const struct value *b, struct value *out)
{
	if (e->op == BIN_EQ || e->op == BIN_NE || e->op == '<' || e->op == '>' ||
	    e->op == BIN_LE || e->op == BIN_GE || e->op == BIN_IN)
		return compare(c, e, a, b, out);
	bool num_a = is_num(a), num_b = is_num(b);
	if (!num_a || !num_b) {
		const struct value *bad = num_a ? b : a;
		diag_error(c->diag, bad->loc, "'%s' needs numbers, not a %s", binop_str(e->op),
			   value_kind_name(bad->kind));
		return false;
	}
	out->loc = e->loc;
	if (a->kind == VAL_INT && b->kind == VAL_INT) {
		int64_t r = 0;
		bool ovf = false;
		out->kind = VAL_INT;
		switch (e->op) {
		case '+': ovf = __builtin_add_overflow(a->i, b->i, &r); break;
		case '-': ovf = __builtin_sub_overflow(a->i, b->i, &r); break;
		case '*': ovf = __builtin_mul_overflow(a->i, b->i, &r); break;
		case BIN_FLOORDIV:
		case '%':
			if (b->i == 0) {
				diag_error(c->diag, b->loc, "division by zero");
				return false;
			}
			if (a->i == INT64_MIN && b->i == -1) {
				ovf = e->op == BIN_FLOORDIV;
				break; /* r = 0: the remainder */
			}
			/* Python's: the quotient rounds down, the remainder takes
			 * the divisor's sign */
			r = a->i % b->i;
			if (r && (r < 0) != (b->i < 0))
				r += b->i;
			if (e->op == BIN_FLOORDIV)
				r = (a->i - r) / b->i;
			break;
		default:
			if (b->i == 0) {
				diag_error(c->diag, b->loc, "division by zero");
				return false;
			}
			if (a->i == INT64_MIN && b->i == -1) {
				ovf = true;
				break;
			}
			if (a->i % b->i) {
				diag_error(c->diag, e->loc,
					   "%" PRId64 " / %" PRId64 " is not a whole number",
					   a->i, b->i);
				diag_hint(c->diag, "integer division must be exact; "
					  "write a float (e.g. 7.0 / 2) for a fraction");
				return false;
			}
			r = a->i / b->i;
		}
		if (ovf) {
			diag_error(c->diag, e->loc, "integer overflow");
			return false;
		}
		out->i = r;
		return true;
	}
	double x = num(a), y = num(b);
	out->kind = VAL_FLOAT;
	switch (e->op) {
	case '+': out->f = x + y; break;
	case '-': out->f = x - y; break;
	case '*': out->f = x * y; break;
	default:
		if (y == 0) {
			diag_error(c->diag, b->loc, "division by zero");
			return false;
		}
		if (e->op == BIN_FLOORDIV) {
			out->f = floor(x / y);
		} else if (e->op == '%') {
			out->f = fmod(x, y);
			if (out->f != 0 && (out->f < 0) != (y < 0))
				out->f += y;
		} else {
			out->f = x / y;
		}
	}
	/* inf reached the graph as an eps or scale that every rank then
	 * computed with; a plan's numbers stay finite, as its integers do. */
	if (!isfinite(out->f)) {
		diag_error(c->diag, e->loc, "number overflow");
		return false;
	}
	return true;
}

/* Evaluation recurses over the tree; a bounded depth keeps a generated
 * expression (a default of 50,000 `+`s) from overflowing the stack. */
static bool eval(struct eval_ctx *c, const struct expr *e, struct value *out, int depth);

/* `and` / `or` take booleans only: Python's truthiness of 0 or [] would
 * hide a parameter of the wrong kind. */
static bool want_bool(struct eval_ctx *c, const struct expr *e, const struct value *v)
{
	if (v->kind == VAL_BOOL)
		return true;
	diag_error(c->diag, v->loc, "'%s' needs true or false, not %s", binop_str(e->op),
		   value_str(c->arena, v));
	return false;
}

const char *const expr_functions[EXPR_NFUNCTIONS] = {
	"len", "sum", "prod", "min", "max", "int", "float",
};

/* The built-in functions: len, sum, prod, min and max of a list (min and max
 * also of two or more numbers, as Python's), int() of a number (toward zero,
 * as Python's), float(). */
static bool call(struct eval_ctx *c, const struct expr *e, struct value *out, int depth)
{
	int f = -1;
	for (int i = 0; i < EXPR_NFUNCTIONS; i++)
		if (!strcmp(e->s, expr_functions[i]))
			f = i;
	if (f < 0) {
		diag_error(c->diag, e->loc, "unknown function '%s'", e->s);
		const char *best = closest_name(e->s, expr_functions, EXPR_NFUNCTIONS);
		if (c->is_op && c->is_op(e->s))
			diag_hint(c->diag, "ops do not nest: give the inner op a name of its "
				  "own (%s_out = %s(...);) and pass that name", e->s, e->s);
		else if (best)
			diag_hint(c->diag, "did you mean '%s'?", best);
		else
			diag_hint(c->diag, "functions: len, sum, prod, min, max, int, float");
		return false;
	}
	int n = 0;
	for (const struct expr *x = e->items; x; x = x->next)
		n++;
	struct value *args = ARENA_ARRAY(c->arena, struct value, n ? n : 1);
	bool ok = true;
	int k = 0;
	for (const struct expr *x = e->items; x; x = x->next)
		ok &= eval(c, x, &args[k++], depth + 1);
	if (!ok)
		return false;
	const char *name = expr_functions[f];
	bool of_list = f <= 4 && !(f >= 3 && n >= 2);
	if (n != 1 && !(f >= 3 && n >= 2)) {
		diag_error(c->diag, e->loc, "%s() takes %s, not %d argument%s", name,
			   f >= 3 && f <= 4 ? "a list or two or more numbers" : "one argument",
			   n, n == 1 ? "" : "s");
		return false;
	}
	const struct value *items = args;
	int ni = n;
	if (of_list) {
		if (args[0].kind != VAL_LIST) {
			diag_error(c->diag, args[0].loc, "%s() needs a list, not %s", name,
				   value_str(c->arena, &args[0]));
			return false;
		}
		items = args[0].items;
		ni = args[0].n;
	}
	out->loc = e->loc;
	if (f == 0) { /* len */
		out->kind = VAL_INT;
		out->i = ni;
		return true;
	}
	for (int i = 0; i < ni; i++)
		if (!is_num(&items[i])) {
			diag_error(c->diag, of_list ? args[0].loc : items[i].loc,
				   "%s() needs numbers, not %s", name,
				   value_str(c->arena, &items[i]));
			return false;
		}
	if (f == 5 || f == 6) { /* int, float */
		double x = num(&items[0]);
		if (f == 6) {
			out->kind = VAL_FLOAT;
			out->f = x;
			return true;
		}
		out->kind = VAL_INT;
		if (items[0].kind == VAL_INT) {
			out->i = items[0].i;
			return true;
		}
		/* 2^63 is the first double past int64 */
		if (!(x > -9223372036854775808.0 && x < 9223372036854775808.0)) {
			diag_error(c->diag, e->loc, "int(%g) does not fit in an integer", x);
			return false;
		}
		out->i = (int64_t)x; /* toward zero, as Python's int() */
		return true;
	}
	if (ni == 0 && f >= 3) {
		diag_error(c->diag, e->loc, "%s() of an empty list", name);
		return false;
	}
	bool ints = true;
	for (int i = 0; i < ni; i++)
		ints &= items[i].kind == VAL_INT;
	if (f >= 3) { /* min, max: the element itself, kind kept */
		int best = 0;
		for (int i = 1; i < ni; i++) {
			const struct value *x = &items[i], *y = &items[best];
			bool less = ints ? x->i < y->i : num(x) < num(y);
			bool more = ints ? x->i > y->i : num(x) > num(y);
			if (f == 3 ? less : more)
				best = i;
		}
		*out = items[best];
		out->loc = e->loc;
		return true;
	}
	/* sum, prod */
	out->kind = ints ? VAL_INT : VAL_FLOAT;
	out->i = f == 2;
	out->f = f == 2;
	for (int i = 0; i < ni; i++) {
		if (ints && (f == 1 ? __builtin_add_overflow(out->i, items[i].i, &out->i)
				    : __builtin_mul_overflow(out->i, items[i].i, &out->i))) {
			diag_error(c->diag, e->loc, "integer overflow");
			return false;
		}
		if (!ints)
			out->f = f == 1 ? out->f + num(&items[i]) : out->f * num(&items[i]);
	}
	if (!ints && !isfinite(out->f)) {
		diag_error(c->diag, e->loc, "number overflow");
		return false;
	}
	return true;
}

bool expr_eval(struct eval_ctx *c, const struct expr *e, struct value *out)
{
	return eval(c, e, out, 0);
}

/* Reported at the node past the limit, once per too-deep subtree. */
static bool too_deep(struct eval_ctx *c, const struct expr *e, int depth)
{
	if (depth < EXPR_MAX_DEPTH)
		return false;
	diag_error(c->diag, e->loc, "expression nested too deeply (limit %d)", EXPR_MAX_DEPTH);
	diag_hint(c->diag, "split it into parameters, each using the previous ones");
	return true;
}

static bool eval(struct eval_ctx *c, const struct expr *e, struct value *out, int depth)
{
	memset(out, 0, sizeof *out);
	out->loc = e->loc;
	switch (e->kind) {
	case EX_INT:
		out->kind = VAL_INT;
		out->i = e->i;
		return true;
	case EX_FLOAT:
		out->kind = VAL_FLOAT;
		out->f = e->f;
		return true;
	case EX_STR:
		out->kind = VAL_STR;
		out->s = e->s;
		return true;
	case EX_BOOL:
		out->kind = VAL_BOOL;
		out->i = e->i;
		return true;
	case EX_NONE:
		out->kind = VAL_NULL;
		return true;
	case EX_COND: {
		/* Python's `a if c else b`: only the branch taken is evaluated */
		struct value c0;
		if (too_deep(c, e, depth) || !eval(c, e->cond, &c0, depth + 1))
			return false;
		if (c0.kind != VAL_BOOL) {
			diag_error(c->diag, e->cond->loc, "'if' needs true or false, not %s",
				   value_str(c->arena, &c0));
			return false;
		}
		if (!eval(c, c0.i ? e->a : e->b, out, depth + 1))
			return false;
		out->loc = e->loc;
		return true;
	}
	case EX_PATH: {
		enum lookup_result r = c->lookup ? c->lookup(c->ud, e->s, e->loc, out)
						 : LOOKUP_UNKNOWN;
		if (r == LOOKUP_OK) {
			out->loc = e->loc;
			return true;
		}
		if (r == LOOKUP_UNKNOWN) {
			diag_error(c->diag, e->loc, "unknown name '%s'", e->s);
			if (!strcmp(e->s, "None") || !strcmp(e->s, "null"))
				diag_hint(c->diag, "the language writes None as none");
			else if (c->candidates) {
				int n = 0;
				const char *const *names = c->candidates(c->ud, &n);
				const char *best = closest_name(e->s, names, n);
				if (best)
					diag_hint(c->diag, "did you mean '%s'?", best);
			}
		}
		return false;
	}
	case EX_LIST: {
		if (too_deep(c, e, depth))
			return false;
		int n = 0;
		for (const struct expr *x = e->items; x; x = x->next)
			n++;
		out->kind = VAL_LIST;
		out->n = n;
		out->items = ARENA_ARRAY(c->arena, struct value, n);
		int k = 0;
		bool ok = true;
		for (const struct expr *x = e->items; x; x = x->next)
			ok &= eval(c, x, &out->items[k++], depth + 1);
		return ok;
	}
	case EX_NEG: {
		struct value a;
		if (too_deep(c, e, depth) || !eval(c, e->a, &a, depth + 1))
			return false;
		if (a.kind == VAL_INT && a.i != INT64_MIN) {
			out->kind = VAL_INT;
			out->i = -a.i;
		} else if (a.kind == VAL_FLOAT) {
			out->kind = VAL_FLOAT;
			out->f = -a.f;
		} else if (a.kind == VAL_INT) { /* -INT64_MIN */
			diag_error(c->diag, e->loc, "integer overflow");
			return false;
		} else {
			diag_error(c->diag, e->loc, "cannot negate %s", value_str(c->arena, &a));
			return false;
		}
		return true;
	}
	case EX_NOT: {
		struct value a;
		if (too_deep(c, e, depth) || !eval(c, e->a, &a, depth + 1))
			return false;
		if (a.kind != VAL_BOOL) {
			diag_error(c->diag, e->a->loc, "'not' needs true or false, not %s",
				   value_str(c->arena, &a));
			return false;
		}
		out->kind = VAL_BOOL;
		out->i = !a.i;
		return true;
	}
	case EX_BIN: {
		struct value a, b;
		if (too_deep(c, e, depth))
			return false;
		if (e->op == BIN_AND || e->op == BIN_OR) {
			/* Python's short circuit: `n > 0 and l[n - 1] == 2` */
			if (!eval(c, e->a, &a, depth + 1) || !want_bool(c, e, &a))
				return false;
			if (a.i == (e->op == BIN_OR)) {
				*out = a;
				out->loc = e->loc;
				return true;
			}
			if (!eval(c, e->b, &b, depth + 1) || !want_bool(c, e, &b))
				return false;
			*out = b;
			out->loc = e->loc;
			return true;
		}
		bool ok = eval(c, e->a, &a, depth + 1);
		ok &= eval(c, e->b, &b, depth + 1);
		return ok && arith(c, e, &a, &b, out);
	}
	case EX_INDEX: {
		struct value a, b;
		if (too_deep(c, e, depth))
			return false;
		bool ok = eval(c, e->a, &a, depth + 1);
		ok &= eval(c, e->b, &b, depth + 1);
		if (!ok)
			return false;
		if (a.kind != VAL_LIST) {
			diag_error(c->diag, e->a->loc, "only a list can be indexed, not %s",
				   value_str(c->arena, &a));
			return false;
		}
		if (b.kind != VAL_INT) {
			diag_error(c->diag, e->b->loc, "a list index must be an integer, not %s",
				   value_str(c->arena, &b));
			return false;
		}
		/* negative indexes count from the end, as in Python */
		int64_t k = b.i < 0 ? b.i + a.n : b.i;
		if (k < 0 || k >= a.n) {
			diag_error(c->diag, e->b->loc, "index %" PRId64 " is out of range for "
				   "%s (%d element%s)", b.i, value_str(c->arena, &a), a.n,
				   a.n == 1 ? "" : "s");
			diag_hint(c->diag, "indexes run from 0 to %d, or from -%d to -1",
				  a.n - 1, a.n);
			return false;
		}
		*out = a.items[k];
		out->loc = e->loc;
		return true;
	}
	case EX_CALL:
		return too_deep(c, e, depth) ? false : call(c, e, out, depth);
	}
	return false;
}

const char *value_str(struct arena *a, const struct value *v)
{
	switch (v->kind) {
	case VAL_INT: return arena_printf(a, "%" PRId64, v->i);
	case VAL_FLOAT: {
		/* as Python prints it: 4.0, not 4, which reads as an integer */
		const char *s = arena_printf(a, "%g", v->f);
		return strpbrk(s, ".en") ? s : arena_printf(a, "%s.0", s);
	}
	case VAL_STR: return arena_printf(a, "\"%s\"", v->s);
	case VAL_BOOL: return v->i ? "true" : "false";
	case VAL_NULL: return "none";
	case VAL_LIST: {
		const char *s = "[";
		for (int i = 0; i < v->n; i++)
			s = arena_printf(a, "%s%s%s", s, i ? ", " : "",
					 value_str(a, &v->items[i]));
		return arena_printf(a, "%s]", s);
	}
	case VAL_NONE: break;
	}
	return "nothing";
}

/* A -D value is read as the plan language would read it: strtoll and
 * strtod alone also took " 4", "0x10", "nan" and "inf" (a NaN eps checked
 * clean and failed every rank), and saturated 99999999999999999999 to
 * INT64_MAX. Anything else stays a string, which the parameter's kind then
 * refuses with the value shown. */
static struct value list_from_cli(struct arena *a, const char *text, size_t len);

struct value value_from_cli(struct arena *a, const char *text)
{
	struct value v = { .loc = loc_none() };
	size_t len = strlen(text);
	/* a list as the language writes it, and as graphs store list
	 * parameters: `-D patch_size=[1,2,2]`, which run --verify passes back */
	if (len >= 2 && text[0] == '[' && text[len - 1] == ']') {
		v = list_from_cli(a, text + 1, len - 2);
		if (v.kind == VAL_LIST)
			return v;
	}
	char *end;
	const char *digits = text + (*text == '-');
	bool plain = isdigit((unsigned char)*digits) && !strpbrk(text, "xX");
	errno = 0;
	long long i = strtoll(text, &end, 10);
	if (plain && !*end && errno != ERANGE) {
		v.kind = VAL_INT;
		v.i = i;
		return v;
	}
	double f = strtod(text, &end);
	if (plain && !*end && isfinite(f)) {
		v.kind = VAL_FLOAT;
		v.f = f;
		return v;
	}
	if (!strcmp(text, "none")) {
		v.kind = VAL_NULL;
		return v;
	}
	if (!strcmp(text, "true") || !strcmp(text, "false")) {
		v.kind = VAL_BOOL;
		v.i = text[0] == 't';
		return v;
	}
	v.kind = VAL_STR;
	v.s = arena_strdup(a, text);
	return v;
}

/* The elements of a list's text (without its brackets), each read as
 * value_from_cli reads a value, a "quoted" one as a string; VAL_NONE if the
 * brackets or quotes do not match (the caller then keeps it a string). */
static struct value list_from_cli(struct arena *a, const char *text, size_t len)
{
	struct value v = { .kind = VAL_LIST, .loc = loc_none() };
	size_t i = 0;
	while (i < len && text[i] == ' ')
		i++;
	if (i == len)
		return v; /* [] */
	int cap = 0;
	for (size_t start = i;; start = ++i) {
		int depth = 0;
		bool quoted = false;
		for (; i < len && (quoted || depth || text[i] != ','); i++) {
			if (text[i] == '"' && (i == start || text[i - 1] != '\\'))
				quoted = !quoted;
			else if (!quoted)
				depth += (text[i] == '[') - (text[i] == ']');
			if (depth < 0)
				return (struct value){ .kind = VAL_NONE };
		}
		if (quoted || depth)
			return (struct value){ .kind = VAL_NONE };
		size_t b = start, e = i;
		while (b < e && text[b] == ' ')
			b++;
		while (e > b && text[e - 1] == ' ')
			e--;
		if (b == e)
			return (struct value){ .kind = VAL_NONE };
		if (v.n == cap) {
			cap = cap ? 2 * cap : 8;
			struct value *ni = ARENA_ARRAY(a, struct value, cap);
			if (v.n)
				memcpy(ni, v.items, sizeof *ni * (size_t)v.n);
			v.items = ni;
		}
		struct value *x = &v.items[v.n++];
		if (text[b] == '"' && e - b >= 2 && text[e - 1] == '"') {
			*x = (struct value){ .kind = VAL_STR, .loc = loc_none(),
					     .s = arena_strndup(a, text + b + 1, e - b - 2) };
		} else {
			*x = value_from_cli(a, arena_strndup(a, text + b, e - b));
			if (x->kind == VAL_STR)
				return (struct value){ .kind = VAL_NONE }; /* a bare word */
		}
		if (i >= len)
			return v;
	}
}

int edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 63 || lb > 63)
		return 99;
	int row[64];
	for (size_t j = 0; j <= lb; j++)
		row[j] = (int)j;
	for (size_t i = 1; i <= la; i++) {
		int diag = row[0];
		row[0] = (int)i;
		for (size_t j = 1; j <= lb; j++) {
			int up = row[j];
			int best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

const char *closest_name(const char *s, const char *const *names, int n)
{
	const char *best = NULL;
	int bd = 99;
	for (int i = 0; i < n; i++) {
		int d = edit_distance(s, names[i]);
		if (d < bd) {
			bd = d;
			best = names[i];
		}
	}
	/* Close enough to be a typo: at most a third of the word. */
	int limit = (int)strlen(s) / 3;
	if (limit < 1)
		limit = 1;
	return bd <= limit && bd < (int)strlen(s) ? best : NULL;
}
