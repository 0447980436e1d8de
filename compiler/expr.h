/* expr.h — constant expressions: parameters, shapes, options.
 *
 * Values are integers (int64, overflow is an error), floats, strings, bools
 * and lists. Operators and functions follow Python (//, %, comparisons,
 * and/or/not on booleans only, list[i], len, sum, int, ...). `/` between
 * integers must be exact: a shape such as
 * `hidden / heads` that does not divide is a mistake in the model, so it is
 * reported where it is written rather than silently rounded. */
#ifndef DTPC_EXPR_H
#define DTPC_EXPR_H
#include <stdbool.h>
#include <stdint.h>

#include "ast.h"

/* VAL_NONE: no value (an expression that failed); VAL_NULL: the value
 * `none` (diffusers' None, a config.json null). */
enum value_kind { VAL_NONE, VAL_INT, VAL_FLOAT, VAL_STR, VAL_BOOL, VAL_LIST, VAL_NULL };

struct value {
	enum value_kind kind;
	int64_t i;
	double f;
	const char *s;
	struct value *items; /* VAL_LIST */
	int n;
	dtpc_loc loc;        /* where the value was written */
};

/* Resolves a name in an expression. Returns true and sets *out, or returns
 * false after reporting its own error (e.g. a tensor where a number was
 * expected). A NULL lookup result with no error means "unknown name". */
enum lookup_result { LOOKUP_OK, LOOKUP_UNKNOWN, LOOKUP_REPORTED };
typedef enum lookup_result (*expr_lookup_fn)(void *ud, const char *name,
					     dtpc_loc loc, struct value *out);

struct eval_ctx {
	struct arena *arena;
	struct diag_ctx *diag;
	expr_lookup_fn lookup;
	void *ud;
	/* Names offered for "did you mean" after an unknown name. */
	const char *const *(*candidates)(void *ud, int *n);
	/* Whether an unknown function is an op (a nested op call, which gets
	 * its own hint); may be NULL. */
	bool (*is_op)(const char *name);
};

/* The built-in functions of expressions (len, sum, ...). */
enum { EXPR_NFUNCTIONS = 7 };
extern const char *const expr_functions[EXPR_NFUNCTIONS];
/* An EX_BIN operator as written: "+", "//", "and". */
const char *binop_str(int op);

/* Expressions nest at most this deep (operators, negations, lists). */
enum { EXPR_MAX_DEPTH = 256 };

/* Evaluates e; false (after a diagnostic) on error. */
bool expr_eval(struct eval_ctx *c, const struct expr *e, struct value *out);
const char *value_kind_name(enum value_kind k);
/* A value as the language writes it: 3, 1e-05, "tanh", [2, 3]. */
const char *value_str(struct arena *a, const struct value *v);
/* Parses the right side of `-D name=value`: an integer, float, true/false,
 * or else a string. */
struct value value_from_cli(struct arena *a, const char *text);

/* Levenshtein distance, for "did you mean" hints (bounded, small strings). */
int edit_distance(const char *a, const char *b);
/* The closest of n names to s when close enough to be a likely typo. */
const char *closest_name(const char *s, const char *const *names, int n);
#endif
