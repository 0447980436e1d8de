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
				       "boolean", "list" };
	return names[k];
}

static bool arith(struct eval_ctx *c, const struct expr *e,
		  const struct value *a, const struct value *b, struct value *out)
{
	bool num_a = a->kind == VAL_INT || a->kind == VAL_FLOAT;
	bool num_b = b->kind == VAL_INT || b->kind == VAL_FLOAT;
	if (!num_a || !num_b) {
		const struct value *bad = num_a ? b : a;
		diag_error(c->diag, bad->loc, "'%c' needs numbers, not a %s", e->op,
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
	double x = a->kind == VAL_INT ? (double)a->i : a->f;
	double y = b->kind == VAL_INT ? (double)b->i : b->f;
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
		out->f = x / y;
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
	case EX_PATH: {
		enum lookup_result r = c->lookup ? c->lookup(c->ud, e->s, e->loc, out)
						 : LOOKUP_UNKNOWN;
		if (r == LOOKUP_OK) {
			out->loc = e->loc;
			return true;
		}
		if (r == LOOKUP_UNKNOWN) {
			diag_error(c->diag, e->loc, "unknown name '%s'", e->s);
			if (c->candidates) {
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
		} else {
			diag_error(c->diag, e->loc, "cannot negate a %s",
				   value_kind_name(a.kind));
			return false;
		}
		return true;
	}
	case EX_BIN: {
		struct value a, b;
		if (too_deep(c, e, depth))
			return false;
		bool ok = eval(c, e->a, &a, depth + 1);
		ok &= eval(c, e->b, &b, depth + 1);
		return ok && arith(c, e, &a, &b, out);
	}
	}
	return false;
}

const char *value_str(struct arena *a, const struct value *v)
{
	switch (v->kind) {
	case VAL_INT: return arena_printf(a, "%" PRId64, v->i);
	case VAL_FLOAT: return arena_printf(a, "%g", v->f);
	case VAL_STR: return arena_printf(a, "\"%s\"", v->s);
	case VAL_BOOL: return v->i ? "true" : "false";
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
struct value value_from_cli(struct arena *a, const char *text)
{
	struct value v = { .loc = loc_none() };
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
	if (!strcmp(text, "true") || !strcmp(text, "false")) {
		v.kind = VAL_BOOL;
		v.i = text[0] == 't';
		return v;
	}
	v.kind = VAL_STR;
	v.s = arena_strdup(a, text);
	return v;
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
