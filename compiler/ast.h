/* ast.h — the syntax tree of plan files, as the parser builds it.
 *
 * Lists are singly linked through `next` (the parser appends in O(1) with a
 * tail pointer, so a generated plan of 10^5 statements parses in linear time).
 * All nodes live in the compile's arena. */
#ifndef DTPC_AST_H
#define DTPC_AST_H
#include <stdbool.h>
#include <stdint.h>

#include "diag.h"

enum expr_kind {
	EX_INT, EX_FLOAT, EX_STR, EX_BOOL, EX_PATH, EX_LIST, EX_BIN, EX_NEG,
	EX_NOT,   /* `not a` (operand in a) */
	EX_INDEX, /* a[b]: a list, b an integer index (negative from the end) */
	EX_CALL,  /* s(items...): len, sum, prod, min, max, int, float */
	EX_NONE,  /* none: diffusers' None, a config.json null */
	EX_COND,  /* a if cond else b */
};

/* EX_BIN operators: the one-character ones by their character, the others
 * from 256 on. */
enum {
	BIN_FLOORDIV = 256, /* // */
	BIN_EQ,             /* == */
	BIN_NE,             /* != */
	BIN_LE,             /* <= */
	BIN_GE,             /* >= */
	BIN_AND,            /* and */
	BIN_OR,             /* or */
	BIN_IN,             /* in: an item of a list */
};

struct expr {
	enum expr_kind kind;
	dtpc_loc loc;
	int64_t i;          /* EX_INT, EX_BOOL */
	double f;           /* EX_FLOAT */
	const char *s;      /* EX_STR text, EX_PATH dotted name, EX_CALL function */
	int op;             /* EX_BIN: '+', '-', '*', '/', '%', '<', '>' or BIN_* */
	struct expr *a, *b; /* EX_BIN / EX_INDEX / EX_COND operands, EX_NEG / EX_NOT operand in a */
	struct expr *cond;  /* EX_COND */
	struct expr *items; /* EX_LIST elements, EX_CALL arguments */
	struct expr *next;  /* sibling in a list */
};

/* `name = value` (keyword argument, parameter, option) or a positional value. */
struct arg {
	const char *name; /* NULL when positional */
	dtpc_loc name_loc;
	struct expr *val;
	dtpc_loc loc;
	struct arg *next;
};

enum mstmt_kind { MS_INPUT, MS_ASSIGN, MS_REPEAT, MS_OUTPUT, MS_ALIAS, MS_IF, MS_ASSERT };

struct pathref {
	const char *name;
	dtpc_loc loc;
	const char *as;  /* `output as = name`: the output's name (NULL: name) */
	dtpc_loc as_loc;
	struct pathref *next;
};

struct mstmt {
	enum mstmt_kind kind;
	dtpc_loc loc;
	const char *name; /* input name, assigned path, repeat name, alias */
	dtpc_loc name_loc;
	struct expr *dims;       /* MS_INPUT */
	const char *op;          /* MS_ASSIGN */
	dtpc_loc op_loc;
	struct arg *args;        /* MS_ASSIGN */
	struct expr *count;      /* MS_REPEAT count, MS_IF / MS_ASSERT condition */
	struct mstmt *body;      /* MS_REPEAT, MS_IF's taken-when-true branch */
	const char *index;       /* MS_REPEAT `as i`: the iteration's index (NULL: none) */
	dtpc_loc index_loc;
	struct mstmt *orelse;    /* MS_IF's else branch (an `else if` is one MS_IF) */
	struct pathref *outputs; /* MS_OUTPUT */
	const char *src;         /* MS_ALIAS: the name on the right; MS_ASSERT: the message */
	dtpc_loc src_loc;
	struct mstmt *next;
};

struct model {
	const char *name;
	dtpc_loc loc, name_loc;
	struct arg *params;
	struct mstmt *body;
	struct model *next;
};

enum pstmt_kind { PS_MODEL, PS_MESH, PS_CONTEXT, PS_TENSOR, PS_RULE, PS_SETTING };

struct style {
	const char *name;
	dtpc_loc loc;
	bool parens;
	struct arg *args;
	struct style *next;
};

struct pstmt {
	enum pstmt_kind kind;
	dtpc_loc loc;
	const char *name; /* model name (PS_MODEL), glob (PS_RULE) */
	dtpc_loc name_loc;
	struct arg *kv;   /* overrides, mesh axes, options; a setting's one */
	struct style *styles;
	struct pstmt *next;
};

struct plan {
	const char *name;
	dtpc_loc loc, name_loc;
	struct pstmt *body;
	struct plan *next;
};

struct import {
	const char *path;
	dtpc_loc loc;
	struct import *next;
};

/* One parsed file. */
struct file_ast {
	struct import *imports, **imports_tail;
	struct model *models, **models_tail;
	struct plan *plans, **plans_tail;
};
#endif
