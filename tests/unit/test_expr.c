/* test_expr.c — unit tests for the constant-expression evaluator. */
#include <math.h>
#include <string.h>

#include "compiler/arena.h"
#include "compiler/expr.h"
#include "compiler/parse.h"
#include "tests/unit/unit.h"

static struct arena *A;

/* Parses `model m(v = EXPR) {}` and evaluates EXPR with names a = 6, b = 4. */
static enum lookup_result lookup(void *ud, const char *name, dtpc_loc loc,
				 struct value *out)
{
	(void)ud;
	(void)loc;
	memset(out, 0, sizeof *out);
	if (!strcmp(name, "a") || !strcmp(name, "b")) {
		out->kind = VAL_INT;
		out->i = name[0] == 'a' ? 6 : 4;
		return LOOKUP_OK;
	}
	return LOOKUP_UNKNOWN;
}

static bool eval(const char *src, struct value *v, int *nerr)
{
	struct diag_ctx d;
	diag_init(&d, A);
	char *text = arena_printf(A, "model m(v = %s) { }", src);
	struct file_ast ast;
	parse_buffer(A, &d, "t.plan", text, strlen(text), &ast);
	bool ok = false;
	if (d.nerrors == 0 && ast.models && ast.models->params) {
		struct eval_ctx c = { .arena = A, .diag = &d, .lookup = lookup };
		ok = expr_eval(&c, ast.models->params->val, v);
	}
	*nerr = d.nerrors;
	diag_release(&d);
	return ok && d.nerrors == 0;
}

static void int_is(const char *src, int64_t want)
{
	struct value v;
	int e;
	bool ok = eval(src, &v, &e);
	UNIT_CHECK(ok && v.kind == VAL_INT && v.i == want, "%s == %lld (got %lld, %d errors)",
		   src, (long long)want, (long long)v.i, e);
}

static void float_is(const char *src, double want)
{
	struct value v;
	int e;
	bool ok = eval(src, &v, &e);
	UNIT_CHECK(ok && v.kind == VAL_FLOAT && fabs(v.f - want) <= 1e-12 * fabs(want),
		   "%s == %g (got %g)", src, want, v.f);
}

static void fails(const char *src)
{
	struct value v;
	int e;
	bool ok = eval(src, &v, &e);
	UNIT_CHECK(!ok && e > 0, "%s is an error (%d errors)", src, e);
}

int main(void)
{
	A = arena_create();
	int_is("1", 1);
	int_is("1 + 2 * 3", 7);
	int_is("(1 + 2) * 3", 9);
	int_is("10 - 4 - 3", 3);           /* left associative */
	int_is("24 / 4 / 2", 3);
	int_is("-3 + 5", 2);
	int_is("--3", 3);
	int_is("a * b", 24);
	int_is("a * 128 / b", 192);
	int_is("2 * -a", -12);
	int_is("9223372036854775807", INT64_MAX);
	float_is("1e-6", 1e-6);
	float_is("1.5 * 2", 3.0);
	float_is("7.0 / 2", 3.5);
	float_is("a / 4.0", 1.5);
	float_is("-2.5e3", -2500.0);

	struct value v;
	int e;
	UNIT_CHECK(eval("\"tanh\"", &v, &e) && v.kind == VAL_STR && !strcmp(v.s, "tanh"),
		   "string literal");
	UNIT_CHECK(eval("true", &v, &e) && v.kind == VAL_BOOL && v.i == 1, "true");
	UNIT_CHECK(eval("false", &v, &e) && v.kind == VAL_BOOL && v.i == 0, "false");
	UNIT_CHECK(eval("[a, b * 2, 3]", &v, &e) && v.kind == VAL_LIST && v.n == 3 &&
			   v.items[0].i == 6 && v.items[1].i == 8 && v.items[2].i == 3,
		   "list of expressions");
	UNIT_CHECK(eval("[[1, 2], [3]]", &v, &e) && v.n == 2 && v.items[0].n == 2,
		   "nested list");

	fails("7 / 2");                      /* integer division must be exact */
	fails("a / 0");
	fails("1.0 / 0");
	fails("9223372036854775807 + 1");    /* overflow */
	fails("4611686018427387904 * 2");
	fails("-9223372036854775807 - 2");
	fails("99999999999999999999");       /* too large to lex */
	fails("c + 1");                      /* unknown name */
	fails("\"x\" + 1");
	fails("true * 2");
	fails("-\"x\"");
	fails("[1, 2] + 1");

	/* Python's operators: floor division and modulo round toward -inf */
	int_is("7 // 2", 3);
	int_is("-7 // 2", -4);
	int_is("7 // -2", -4);
	int_is("-7 % 3", 2);
	int_is("7 % -3", -2);
	int_is("a // b * b + a % b", 6);
	float_is("7.5 // 2", 3.0);
	float_is("-7.5 % 2", 0.5);
	fails("1 // 0");
	fails("1 % 0");
	fails("(-9223372036854775807 - 1) // -1");  /* INT64_MIN // -1 overflows */
	int_is("(-9223372036854775807 - 1) % -1", 0);
	/* lists: indexing (negative from the end), len, sum, prod, min, max */
	int_is("[16, 56, 56][1]", 56);
	int_is("[1, 2, 3][-1]", 3);
	int_is("[1, 2, 3][-3]", 1);
	int_is("[[1, 2], [3]][0][1]", 2);
	int_is("-[4, 5][0]", -4);                /* indexing binds tighter than '-' */
	int_is("[a, b][b - 3] * 2", 8);
	fails("[1, 2, 3][3]");
	fails("[1, 2, 3][-4]");
	fails("[1, 2][0.5]");
	fails("a[0]");                           /* not a list */
	int_is("len([16, 56, 56])", 3);
	int_is("len([])", 0);
	int_is("sum([16, 56, 56])", 128);
	int_is("prod([1, 2, 2]) * 16", 64);
	float_is("sum([1, 0.5])", 1.5);
	int_is("min([3, 1, 2])", 1);
	int_is("max(a, b, 5)", 6);
	float_is("max(1, 2.5)", 2.5);
	fails("sum(3)");
	fails("len(1, 2)");
	fails("min([])");
	fails("sum([1, \"x\"])");
	fails("prod([4611686018427387904, 2])");
	fails("lenn([1])");                      /* unknown function */
	/* int() truncates toward zero, as Python's */
	int_is("int(3072 * 4.0)", 12288);
	int_is("int(-2.7)", -2);
	int_is("int(a)", 6);
	float_is("float(a) / 4", 1.5);
	fails("int(1e300)");
	fails("int(\"3\")");
	/* comparisons and booleans (booleans only: no truthiness) */
	UNIT_CHECK(eval("a > b and not (a == 7) or false", &v, &e) && v.kind == VAL_BOOL && v.i,
		   "a > b and not (a == 7)");
	UNIT_CHECK(eval("1 == 1.0", &v, &e) && v.i == 1, "1 == 1.0");
	UNIT_CHECK(eval("[1, 2] == [1, 2] and [1] != [2] and \"x\" != 1", &v, &e) && v.i == 1,
		   "== on lists, strings, mixed kinds");
	UNIT_CHECK(eval("a <= 6 and a >= 6 and not (a < 6) and not (a > 6)", &v, &e) && v.i == 1,
		   "<= >= < >");
	UNIT_CHECK(eval("not true or true and false", &v, &e) && v.i == 0,
		   "not binds tighter than and, and than or");
	/* short circuit: the right side is not evaluated */
	UNIT_CHECK(eval("false and [1][5] == 1", &v, &e) && v.i == 0, "false and ... skips");
	UNIT_CHECK(eval("true or [1][5] == 1", &v, &e) && v.i == 1, "true or ... skips");
	fails("true and [1][5] == 1");
	fails("1 and true");
	fails("not 1");
	fails("\"a\" < 1");
	fails("1 < 2 < 3");                       /* comparisons do not chain */
	/* in: an item of a list, compared as == compares */
	UNIT_CHECK(eval("a in [1, 6] and 1.0 in [1] and [2] in [[1], [2]] and \"x\" in [\"x\"]",
			&v, &e) && v.kind == VAL_BOOL && v.i == 1, "in holds");
	UNIT_CHECK(eval("a in [] or 7 in [1, 6] or \"6\" in [6]", &v, &e) && v.kind == VAL_BOOL &&
			   v.i == 0, "in does not hold");
	UNIT_CHECK(eval("not a in [6] or a + 1 in [7] and false", &v, &e) && v.i == 0,
		   "not x in l is not (x in l); in binds tighter than and, + than in");
	fails("a in 6");
	fails("a in \"a6\"");
	fails("1 in [1] in [true]");              /* nor does in */
	/* none (diffusers' None) and Python's conditional expression */
	UNIT_CHECK(eval("none", &v, &e) && v.kind == VAL_NULL, "none");
	UNIT_CHECK(eval("none == none and none != 0 and not (none == [])", &v, &e) && v.i == 1,
		   "none equals only none");
	int_is("a if a > b else b", 6);
	int_is("1 if false else 2 if false else 3", 3);  /* right associative */
	int_is("(b if none != none else a) + 1", 7);
	int_is("2 if true else [1][5]", 2);              /* the other branch is not evaluated */
	fails("1 if 0 else 2");
	fails("none + 1");
	fails("None");                                   /* Python's spelling: a hint */

	/* edit distance and did-you-mean */
	UNIT_CHECK(edit_distance("colwise", "colwise") == 0, "distance to itself");
	UNIT_CHECK(edit_distance("colwse", "colwise") == 1, "one deletion");
	UNIT_CHECK(edit_distance("rowise", "colwise") == 2, "two edits");
	const char *names[] = { "seq", "hidden", "heads" };
	UNIT_CHECK(closest_name("hiden", names, 3) && !strcmp(closest_name("hiden", names, 3), "hidden"),
		   "hiden -> hidden");
	UNIT_CHECK(closest_name("batch", names, 3) == NULL, "no suggestion when far");
	UNIT_CHECK(closest_name("x", (const char *[]){ "q" }, 1) == NULL,
		   "a one-letter name is not a typo of another");

	struct value c = value_from_cli(A, "1024");
	UNIT_CHECK(c.kind == VAL_INT && c.i == 1024, "-D integer");
	c = value_from_cli(A, "1e-5");
	UNIT_CHECK(c.kind == VAL_FLOAT && c.f == 1e-5, "-D float");
	c = value_from_cli(A, "false");
	UNIT_CHECK(c.kind == VAL_BOOL && c.i == 0, "-D bool");
	c = value_from_cli(A, "tanh");
	UNIT_CHECK(c.kind == VAL_STR && !strcmp(c.s, "tanh"), "-D string");
	/* lists, as graphs store list parameters (run --verify passes them back) */
	c = value_from_cli(A, "[1, 2, 2]");
	UNIT_CHECK(c.kind == VAL_LIST && c.n == 3 && c.items[0].kind == VAL_INT &&
			   c.items[2].i == 2, "-D list of integers");
	c = value_from_cli(A, "[[1, 2], [], \"a,b\", 0.5, true]");
	UNIT_CHECK(c.kind == VAL_LIST && c.n == 5 && c.items[0].n == 2 && c.items[1].n == 0 &&
			   c.items[2].kind == VAL_STR && !strcmp(c.items[2].s, "a,b") &&
			   c.items[3].kind == VAL_FLOAT && c.items[4].kind == VAL_BOOL,
		   "-D nested list, empty list, quoted string with a comma");
	c = value_from_cli(A, "[]");
	UNIT_CHECK(c.kind == VAL_LIST && c.n == 0, "-D empty list");
	c = value_from_cli(A, "none");
	UNIT_CHECK(c.kind == VAL_NULL, "-D none");
	c = value_from_cli(A, "[1, x]");
	UNIT_CHECK(c.kind == VAL_STR, "-D list with a bare word stays a string");
	c = value_from_cli(A, "[1, [2]");
	UNIT_CHECK(c.kind == VAL_STR, "-D unbalanced brackets stay a string");
	c = value_from_cli(A, "[1,,2]");
	UNIT_CHECK(c.kind == VAL_STR, "-D empty element stays a string");
	arena_free(A);
	return unit_done();
}
