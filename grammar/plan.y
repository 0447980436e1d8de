/* plan.y — the grammar of the plan language (docs/language.md).
 *
 * A reentrant pure parser with locations. Each statement rule has an error
 * production that resynchronises at ';', so one file reports all its syntax
 * errors. The AST lives in the compile's arena, so a discarded semantic value
 * needs no %destructor: nothing is freed piecemeal. */
%require "3.8"
%define api.pure full
%define api.prefix {plan_}
%define api.location.type {dtpc_loc}
%define parse.error custom
%locations
%expect 0
%param {yyscan_t scanner}
%parse-param {struct parse_ctx *P}

%code requires {
#include "compiler/ast.h"
#include "compiler/parse.h"
#ifndef YY_TYPEDEF_YY_SCANNER_T
#define YY_TYPEDEF_YY_SCANNER_T
typedef void *yyscan_t;
#endif
/* Spans are (file, first line:col, last line:col); an empty rule gets the
 * point just after the previous symbol. */
#define YYLLOC_DEFAULT(Cur, Rhs, N)                                      \
	do {                                                             \
		if (N) {                                                 \
			(Cur).file = YYRHSLOC(Rhs, 1).file;              \
			(Cur).line = YYRHSLOC(Rhs, 1).line;              \
			(Cur).col = YYRHSLOC(Rhs, 1).col;                \
			(Cur).end_line = YYRHSLOC(Rhs, N).end_line;      \
			(Cur).end_col = YYRHSLOC(Rhs, N).end_col;        \
		} else {                                                 \
			(Cur).file = YYRHSLOC(Rhs, 0).file;              \
			(Cur).line = (Cur).end_line = YYRHSLOC(Rhs, 0).end_line; \
			(Cur).col = (Cur).end_col = YYRHSLOC(Rhs, 0).end_col; \
		}                                                        \
	} while (0)
}

%code provides {
/* flex's bison-bridge spells the types without the prefix. */
#ifndef YYSTYPE
#define YYSTYPE PLAN_STYPE
#define YYLTYPE PLAN_LTYPE
#endif
int plan_lex(PLAN_STYPE *yylval, PLAN_LTYPE *yylloc, yyscan_t scanner);
}

%code {
#include <ctype.h>
#include <string.h>

#include "compiler/arena.h"

/* bison's own default, spelled out because the overflow message names it. */
#define YYMAXDEPTH 10000

static struct expr *mkexpr(struct parse_ctx *P, enum expr_kind k, dtpc_loc loc)
{
	struct expr *e = ARENA_NEW(P->arena, struct expr);
	e->kind = k;
	e->loc = loc;
	return e;
}

static struct expr *mkbin(struct parse_ctx *P, int op, struct expr *a,
			  struct expr *b, dtpc_loc loc)
{
	struct expr *e = mkexpr(P, EX_BIN, loc);
	e->op = op;
	e->a = a;
	e->b = b;
	return e;
}

static struct arg *mkarg(struct parse_ctx *P, const char *name, dtpc_loc nloc,
			 struct expr *val, dtpc_loc loc)
{
	struct arg *a = ARENA_NEW(P->arena, struct arg);
	a->name = name;
	a->name_loc = nloc;
	a->val = val;
	a->loc = loc;
	return a;
}

static struct mstmt *mkmstmt(struct parse_ctx *P, enum mstmt_kind k,
			     dtpc_loc loc, const char *name, dtpc_loc nloc)
{
	struct mstmt *s = ARENA_NEW(P->arena, struct mstmt);
	s->kind = k;
	s->loc = loc;
	s->name = name;
	s->name_loc = nloc;
	return s;
}

static struct pstmt *mkpstmt(struct parse_ctx *P, enum pstmt_kind k,
			     dtpc_loc loc, struct arg *kv)
{
	struct pstmt *s = ARENA_NEW(P->arena, struct pstmt);
	s->kind = k;
	s->loc = loc;
	s->kv = kv;
	return s;
}

static void yyerror(const dtpc_loc *loc, yyscan_t scanner,
		    struct parse_ctx *P, const char *msg)
{
	(void)scanner;
	/* The only message that reaches here is bison's stack overflow (syntax
	 * errors go to yyreport_syntax_error): say what the user can change. */
	if (!strcmp(msg, "memory exhausted")) {
		diag_error(P->diag, *loc, "nesting too deep: more than %d open "
			   "brackets, blocks and operators", YYMAXDEPTH);
		diag_hint(P->diag, "give inner parts names of their own, or flatten them");
		return;
	}
	diag_error(P->diag, *loc, "%s", msg);
}

/* Appends in O(1): lists are {head, tail} pairs while being built. */
#define APPEND(L, x)                          \
	do {                                  \
		if ((L).tail)                 \
			(L).tail->next = (x); \
		else                          \
			(L).head = (x);       \
		(L).tail = (x);               \
	} while (0)
#define ONE(L, x) ((L).head = (L).tail = (x))

/* A statement kept although it lacks its ';' (the error productions ending
 * in `error`): bison stays quiet until three tokens have been shifted after
 * an error, which hid a second missing ';' right after the first one. When
 * the lookahead starts the next statement, the parser resumes there, so it
 * is safe to report the next error at once; any other lookahead is left to
 * the `error ';'` productions (reporting it now would report it twice). */
#define RESUME_IF(starts)             \
	do {                          \
		if (starts)           \
			yyerrok;      \
	} while (0)
#define STARTS_DECL(t) ((t) == IMPORT || (t) == MODEL || (t) == PLAN || (t) == END)
#define STARTS_MSTMT(t)                                                        \
	((t) == INPUT || (t) == OUTPUT || (t) == REPEAT || (t) == IDENT ||     \
	 (t) == IF || (t) == ASSERT ||                                         \
	 (t) == MESH || (t) == CONTEXT || (t) == TENSOR || (t) == '}')
#define STARTS_PSTMT(t)                                                        \
	((t) == MODEL || (t) == MESH || (t) == CONTEXT || (t) == TENSOR ||     \
	 (t) == STRING || (t) == '}')
}

%union {
	int64_t i;
	double f;
	const char *s;
	struct expr *e;
	struct { struct expr *head, *tail; } el;
	struct { struct arg *head, *tail; } al;
	struct arg *a;
	struct { struct mstmt *head, *tail; } ml;
	struct mstmt *m;
	struct { struct pstmt *head, *tail; } pl;
	struct pstmt *p;
	struct { struct style *head, *tail; } sl;
	struct style *st;
	struct { struct pathref *head, *tail; } rl;
	struct pathref *r;
	struct model *model;
	struct plan *plan;
}

%token END 0 "end of file"
%token <i> INT "integer"
%token <s> DOTINT "'.' and a number"
%token <f> FLOAT "number"
%token <s> IDENT "identifier"
%token <s> STRING "string"
%token IMPORT "'import'" MODEL "'model'" PLAN "'plan'" INPUT "'input'"
%token OUTPUT "'output'" REPEAT "'repeat'" MESH "'mesh'"
%token CONTEXT "'context'" TENSOR "'tensor'" IF "'if'" ELSE "'else'"
%token ASSERT "'assert'" AS "'as'" IN "'in'"
%token AND "'and'" OR "'or'" NOT "'not'" NONE "'none'" TRUE "'true'" FALSE "'false'"
%token EQ "'=='" NE "'!='" LE "'<='" GE "'>='" FLOORDIV "'//'"

/* Python's precedence; comparisons do not chain (a < b < c is an error). */
%right IF ELSE
%left OR
%left AND
%precedence NOT
%nonassoc EQ NE '<' '>' LE GE IN
%left '+' '-'
%left '*' '/' FLOORDIV '%'
%precedence NEG
%precedence '['

%type <e> expr
%type <el> exprs
%type <al> kvlist opt_params args opt_args
%type <a> kv arg
%type <ml> mstmts
%type <m> mstmt ifstmt else_opt
%type <pl> pstmts
%type <p> pstmt
%type <sl> styles
%type <st> style
%type <rl> paths
%type <r> outref
%type <s> path name
%type <model> model
%type <plan> plan

%%

/* file := { 'import' STRING ';' | model | plan } */
file:
	%empty
|	file decl
;

decl:
	IMPORT STRING ';' {
		struct import *im = ARENA_NEW(P->arena, struct import);
		im->path = $2;
		im->loc = @2;
		*P->ast->imports_tail = im;
		P->ast->imports_tail = &im->next;
	}
|	IMPORT STRING error {
		/* only the ';' is missing: the import is kept */
		struct import *im = ARENA_NEW(P->arena, struct import);
		im->path = $2;
		im->loc = @2;
		*P->ast->imports_tail = im;
		P->ast->imports_tail = &im->next;
		RESUME_IF(STARTS_DECL(yychar));
	}
|	model { *P->ast->models_tail = $1; P->ast->models_tail = &$1->next; }
|	plan { *P->ast->plans_tail = $1; P->ast->plans_tail = &$1->next; }
|	error ';'
|	error '}'
|	error {
		/* Resumes at the next 'import', 'model' or 'plan' without
		 * consuming it: bison reduces here by default and then drops
		 * one token at a time until a declaration can start. Without
		 * this, a stray token after a model's '}' discarded everything
		 * up to the next ';', the next plan's header included, and
		 * `check --plan p` then found no plan 'p'. */
	}
;

/* model := 'model' IDENT [ '(' IDENT '=' expr { ',' ... } ')' ] '{' { mstmt } '}' */
model:
	MODEL IDENT opt_params '{' mstmts '}' {
		$$ = ARENA_NEW(P->arena, struct model);
		$$->name = $2;
		$$->loc = @$;
		$$->name_loc = @2;
		$$->params = $3.head;
		$$->body = $5.head;
	}
;

opt_params:
	%empty { $$.head = $$.tail = NULL; }
|	'(' ')' { $$.head = $$.tail = NULL; }
|	'(' kvlist ')' { $$ = $2; }
;

kvlist:
	kv { ONE($$, $1); }
|	kvlist ',' kv { $$ = $1; APPEND($$, $3); }
;

kv:
	IDENT '=' expr { $$ = mkarg(P, $1, @1, $3, @$); }
;

mstmts:
	%empty { $$.head = $$.tail = NULL; }
|	mstmts mstmt { $$ = $1; if ($2) APPEND($$, $2); }
;

/* mstmt := 'input' IDENT ':' '[' expr { ',' expr } ']' ';'
 *        | path '=' IDENT '(' [ arg { ',' arg } ] ')' ';'
 *        | 'repeat' path '[' expr ']' [ 'as' IDENT ] '{' { mstmt } '}'
 *        | 'output' path { ',' path } ';'
 *        | 'assert' expr ',' STRING ';' */
mstmt:
	INPUT name ':' '[' exprs ']' ';' {
		$$ = mkmstmt(P, MS_INPUT, @$, $2, @2);
		$$->dims = $5.head;
	}
|	path '=' IDENT '(' opt_args ')' ';' {
		$$ = mkmstmt(P, MS_ASSIGN, @$, $1, @1);
		$$->op = $3;
		$$->op_loc = @3;
		$$->args = $5.head;
	}
|	path '=' IDENT '(' opt_args ')' error {
		/* The statement is complete but its ';' is missing: keep it, so
		 * the names it defines do not cascade into more errors. */
		$$ = mkmstmt(P, MS_ASSIGN, @$, $1, @1);
		$$->op = $3;
		$$->op_loc = @3;
		$$->args = $5.head;
		RESUME_IF(STARTS_MSTMT(yychar));
	}
|	path '=' path ';' {
		$$ = mkmstmt(P, MS_ALIAS, @$, $1, @1);
		$$->src = $3;
		$$->src_loc = @3;
	}
|	path '=' path error {
		$$ = mkmstmt(P, MS_ALIAS, @$, $1, @1);
		$$->src = $3;
		$$->src_loc = @3;
		RESUME_IF(STARTS_MSTMT(yychar));
	}
|	path '=' error ';' {
		/* A broken right-hand side: the name is still defined (as
		 * failed) so that its uses do not cascade. */
		$$ = mkmstmt(P, MS_ASSIGN, @$, $1, @1);
	}
|	INPUT name ':' '[' exprs ']' error {
		$$ = mkmstmt(P, MS_INPUT, @$, $2, @2);
		$$->dims = $5.head;
		RESUME_IF(STARTS_MSTMT(yychar));
	}
|	REPEAT path '[' expr ']' '{' mstmts '}' {
		$$ = mkmstmt(P, MS_REPEAT, @$, $2, @2);
		$$->count = $4;
		$$->body = $7.head;
	}
|	REPEAT path '[' expr ']' AS IDENT '{' mstmts '}' {
		/* the iteration's index, a number in the body's expressions */
		$$ = mkmstmt(P, MS_REPEAT, @$, $2, @2);
		$$->count = $4;
		$$->body = $9.head;
		$$->index = $7;
		$$->index_loc = @7;
	}
|	OUTPUT paths ';' {
		$$ = mkmstmt(P, MS_OUTPUT, @$, NULL, @1);
		$$->outputs = $2.head;
	}
|	OUTPUT paths error {
		$$ = mkmstmt(P, MS_OUTPUT, @$, NULL, @1);
		$$->outputs = $2.head;
		RESUME_IF(STARTS_MSTMT(yychar));
	}
|	ifstmt
|	ASSERT expr ',' STRING ';' {
		$$ = mkmstmt(P, MS_ASSERT, @$, NULL, @1);
		$$->count = $2;
		$$->src = $4;
		$$->src_loc = @4;
	}
|	ASSERT expr ',' STRING error {
		$$ = mkmstmt(P, MS_ASSERT, @$, NULL, @1);
		$$->count = $2;
		$$->src = $4;
		$$->src_loc = @4;
		RESUME_IF(STARTS_MSTMT(yychar));
	}
|	ASSERT expr ';' {
		/* Python's message is optional; here it is what the user reads
		 * when the model refuses a value, so it is required. */
		diag_error(P->diag, @3, "an assert needs a message after its condition");
		diag_hint(P->diag, "say what is not modelled: assert COND, \"...\";");
		$$ = NULL;
	}
|	ASSERT error ';' { $$ = NULL; }
|	error ';' { $$ = NULL; }
;

/* ifstmt := 'if' expr '{' { mstmt } '}' [ 'else' ( '{' { mstmt } '}' | ifstmt ) ] */
ifstmt:
	IF expr '{' mstmts '}' else_opt {
		$$ = mkmstmt(P, MS_IF, @$, NULL, @2);
		$$->count = $2;
		$$->body = $4.head;
		$$->orelse = $6;
	}
|	IF error '{' mstmts '}' else_opt {
		/* a broken condition: neither branch is taken (the error is
		 * reported), but both are parsed */
		$$ = mkmstmt(P, MS_IF, @$, NULL, @1);
		$$->body = $4.head;
		$$->orelse = $6;
	}
;

/* An else branch is a list of statements; `else if` is one MS_IF. */
else_opt:
	%empty { $$ = NULL; }
|	ELSE '{' mstmts '}' { $$ = $3.head; /* empty: as if absent */ }
|	ELSE ifstmt { $$ = $2; }
;

paths:
	outref { ONE($$, $1); }
|	paths ',' outref { $$ = $1; APPEND($$, $3); }
;

/* outref := path | name '=' path  (the output's name, then the tensor) */
outref:
	path {
		$$ = ARENA_NEW(P->arena, struct pathref);
		$$->name = $1;
		$$->loc = @1;
	}
|	name '=' path {
		$$ = ARENA_NEW(P->arena, struct pathref);
		$$->name = $3;
		$$->loc = @3;
		$$->as = $1;
		$$->as_loc = @1;
	}
;

/* path := IDENT { '.' ( IDENT | INT ) }
 * The plan-only keywords mesh, context and tensor are names inside models. */
path:
	name { $$ = $1; }
|	path '.' name { $$ = arena_concat(P->arena, $1, ".", $3, (char *)NULL); }
|	path DOTINT { $$ = arena_concat(P->arena, $1, ".", $2, (char *)NULL); }
;

name:
	IDENT { $$ = $1; }
|	MESH { $$ = "mesh"; }
|	CONTEXT { $$ = "context"; }
|	TENSOR { $$ = "tensor"; }
;

opt_args:
	%empty { $$.head = $$.tail = NULL; }
|	args
;

args:
	arg { ONE($$, $1); }
|	args ',' arg { $$ = $1; APPEND($$, $3); }
;

/* arg := expr | IDENT '=' expr */
arg:
	expr { $$ = mkarg(P, NULL, @1, $1, @$); }
|	IDENT '=' expr { $$ = mkarg(P, $1, @1, $3, @$); }
;

/* expr := INT | FLOAT | STRING | 'true' | 'false' | 'none' | path | '[' [ expr {',' expr} ] ']'
 *       | expr ('+'|'-'|'*'|'/'|'//'|'%') expr | '-' expr | '(' expr ')'
 *       | expr ('=='|'!='|'<'|'>'|'<='|'>='|'in') expr | expr ('and'|'or') expr
 *       | 'not' expr | expr '[' expr ']' | IDENT '(' [ expr { ',' expr } ] ')'
 *       | expr 'if' expr 'else' expr */
expr:
	INT { $$ = mkexpr(P, EX_INT, @$); $$->i = $1; }
|	FLOAT { $$ = mkexpr(P, EX_FLOAT, @$); $$->f = $1; }
|	STRING { $$ = mkexpr(P, EX_STR, @$); $$->s = $1; }
|	TRUE { $$ = mkexpr(P, EX_BOOL, @$); $$->i = 1; }
|	FALSE { $$ = mkexpr(P, EX_BOOL, @$); $$->i = 0; }
|	NONE { $$ = mkexpr(P, EX_NONE, @$); }
|	expr IF expr ELSE expr {
		$$ = mkexpr(P, EX_COND, @$);
		$$->a = $1;
		$$->cond = $3;
		$$->b = $5;
	}
|	path { $$ = mkexpr(P, EX_PATH, @$); $$->s = $1; }
|	'[' ']' { $$ = mkexpr(P, EX_LIST, @$); }
|	'[' exprs ']' { $$ = mkexpr(P, EX_LIST, @$); $$->items = $2.head; }
|	expr '+' expr { $$ = mkbin(P, '+', $1, $3, @$); }
|	expr '-' expr { $$ = mkbin(P, '-', $1, $3, @$); }
|	expr '*' expr { $$ = mkbin(P, '*', $1, $3, @$); }
|	expr '/' expr { $$ = mkbin(P, '/', $1, $3, @$); }
|	expr FLOORDIV expr { $$ = mkbin(P, BIN_FLOORDIV, $1, $3, @$); }
|	expr '%' expr { $$ = mkbin(P, '%', $1, $3, @$); }
|	expr EQ expr { $$ = mkbin(P, BIN_EQ, $1, $3, @$); }
|	expr NE expr { $$ = mkbin(P, BIN_NE, $1, $3, @$); }
|	expr '<' expr { $$ = mkbin(P, '<', $1, $3, @$); }
|	expr '>' expr { $$ = mkbin(P, '>', $1, $3, @$); }
|	expr LE expr { $$ = mkbin(P, BIN_LE, $1, $3, @$); }
|	expr GE expr { $$ = mkbin(P, BIN_GE, $1, $3, @$); }
|	expr IN expr { $$ = mkbin(P, BIN_IN, $1, $3, @$); }
|	expr AND expr { $$ = mkbin(P, BIN_AND, $1, $3, @$); }
|	expr OR expr { $$ = mkbin(P, BIN_OR, $1, $3, @$); }
|	NOT expr { $$ = mkexpr(P, EX_NOT, @$); $$->a = $2; }
|	expr '[' expr ']' { $$ = mkexpr(P, EX_INDEX, @$); $$->a = $1; $$->b = $3; }
|	IDENT '(' ')' { $$ = mkexpr(P, EX_CALL, @$); $$->s = $1; }
|	IDENT '(' exprs ')' { $$ = mkexpr(P, EX_CALL, @$); $$->s = $1; $$->items = $3.head; }
|	'-' expr %prec NEG { $$ = mkexpr(P, EX_NEG, @$); $$->a = $2; }
|	'(' expr ')' { $$ = $2; $$->loc = @$; }
;

exprs:
	expr { ONE($$, $1); }
|	exprs ',' expr { $$ = $1; APPEND($$, $3); }
;

/* plan := 'plan' IDENT '{' { pstmt } '}' */
plan:
	PLAN IDENT '{' pstmts '}' {
		$$ = ARENA_NEW(P->arena, struct plan);
		$$->name = $2;
		$$->loc = @$;
		$$->name_loc = @2;
		$$->body = $4.head;
	}
;

pstmts:
	%empty { $$.head = $$.tail = NULL; }
|	pstmts pstmt { $$ = $1; if ($2) APPEND($$, $2); }
;

/* pstmt := 'model' IDENT [ '(' IDENT '=' expr { ',' ... } ')' ] ';'
 *        | 'mesh' IDENT '=' INT { ',' IDENT '=' INT } ';'
 *        | 'context' IDENT '=' expr { ',' IDENT '=' expr } ';'
 *        | 'tensor' IDENT '=' expr { ',' IDENT '=' expr } ';'
 *        | IDENT '=' expr ';'                  (a setting: dtype = "bf16";)
 *        | STRING ':' style { ',' style } ';' */
pstmt:
	MODEL IDENT opt_params ';' {
		$$ = mkpstmt(P, PS_MODEL, @$, $3.head);
		$$->name = $2;
		$$->name_loc = @2;
	}
|	MODEL IDENT opt_params error {
		$$ = mkpstmt(P, PS_MODEL, @$, $3.head);
		$$->name = $2;
		$$->name_loc = @2;
		RESUME_IF(STARTS_PSTMT(yychar));
	}
|	MESH kvlist ';' { $$ = mkpstmt(P, PS_MESH, @$, $2.head); }
|	MESH kvlist error {
		$$ = mkpstmt(P, PS_MESH, @$, $2.head);
		RESUME_IF(STARTS_PSTMT(yychar));
	}
|	CONTEXT kvlist ';' { $$ = mkpstmt(P, PS_CONTEXT, @$, $2.head); }
|	CONTEXT kvlist error {
		$$ = mkpstmt(P, PS_CONTEXT, @$, $2.head);
		RESUME_IF(STARTS_PSTMT(yychar));
	}
|	TENSOR kvlist ';' { $$ = mkpstmt(P, PS_TENSOR, @$, $2.head); }
|	TENSOR kvlist error {
		$$ = mkpstmt(P, PS_TENSOR, @$, $2.head);
		RESUME_IF(STARTS_PSTMT(yychar));
	}
|	kv ';' { $$ = mkpstmt(P, PS_SETTING, @$, $1); }
|	kv error {
		$$ = mkpstmt(P, PS_SETTING, @$, $1);
		RESUME_IF(STARTS_PSTMT(yychar));
	}
|	STRING ':' styles ';' {
		$$ = mkpstmt(P, PS_RULE, @$, NULL);
		$$->name = $1;
		$$->name_loc = @1;
		$$->styles = $3.head;
	}
|	STRING ':' styles error {
		$$ = mkpstmt(P, PS_RULE, @$, NULL);
		$$->name = $1;
		$$->name_loc = @1;
		$$->styles = $3.head;
		RESUME_IF(STARTS_PSTMT(yychar));
	}
|	error ';' { $$ = NULL; }
;

styles:
	style { ONE($$, $1); }
|	styles ',' style { $$ = $1; APPEND($$, $3); }
;

/* style := IDENT [ '(' [ arg { ',' arg } ] ')' ]
 * (colwise, rowwise, replicate, ring, ulysses, split, gather: the names are
 * checked in plan.c, so a misspelt style gets a "did you mean" rather than a
 * bare syntax error) */
style:
	IDENT {
		$$ = ARENA_NEW(P->arena, struct style);
		$$->name = $1;
		$$->loc = @$;
	}
|	IDENT '(' opt_args ')' {
		$$ = ARENA_NEW(P->arena, struct style);
		$$->name = $1;
		$$->loc = @$;
		$$->parens = true;
		$$->args = $3.head;
	}
;

%%

/* Syntax errors name what was found and what would have fitted, and add a
 * hint for the mistakes people make: a missing ';' (pointed at the end of the
 * statement, not at the next line), an unclosed '{' at end of file, '=' for ':'
 * in a rule, a keyword used as a name, a quoted style. */
static int yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner,
				 struct parse_ctx *P)
{
	(void)scanner;
	yysymbol_kind_t exp[32];
	int n = yypcontext_expected_tokens(ctx, exp, 32);
	yysymbol_kind_t got = yypcontext_token(ctx);
	dtpc_loc at = *yypcontext_location(ctx);
	bool want_semi = false, want_ident = false, want_colon = false, want_brace = false;
	for (int i = 0; i < n; i++) {
		/* Character tokens have generated kind names: compare spellings. */
		want_semi |= !strcmp(yysymbol_name(exp[i]), "';'");
		want_ident |= exp[i] == YYSYMBOL_IDENT;
		want_colon |= !strcmp(yysymbol_name(exp[i]), "':'");
		want_brace |= !strcmp(yysymbol_name(exp[i]), "'{'");
	}

	char found[96];
	if (got == YYSYMBOL_YYEOF)
		snprintf(found, sizeof found, "end of file");
	else if (got == YYSYMBOL_IDENT || got == YYSYMBOL_INT ||
		 got == YYSYMBOL_FLOAT)
		snprintf(found, sizeof found, "%s '%s'", yysymbol_name(got),
			 P->cur_text);
	else if (got == YYSYMBOL_STRING)
		snprintf(found, sizeof found, "string %s", P->cur_text);
	else
		snprintf(found, sizeof found, "%s", yysymbol_name(got));

	/* Where a name fits, the keywords that are also names are noise. */
	int k = 0;
	for (int i = 0; i < n; i++)
		if (!want_ident || (exp[i] != YYSYMBOL_MESH && exp[i] != YYSYMBOL_CONTEXT &&
				    exp[i] != YYSYMBOL_TENSOR))
			exp[k++] = exp[i];
	n = k;
	/* After an operand every binary operator fits: "an operator" says it
	 * in two words instead of seventeen. */
	static const char *const ops[] = { "'+'", "'-'", "'*'", "'/'", "'%'", "'<'", "'>'",
					   "'['", "'=='", "'!='", "'<='", "'>='", "'//'",
					   "'and'", "'or'", "'if'", "'in'" };
	int nops = 0;
	for (int i = 0; i < n; i++)
		for (size_t j = 0; j < sizeof ops / sizeof *ops; j++)
			nops += !strcmp(yysymbol_name(exp[i]), ops[j]);
	const char *names[32];
	k = 0;
	for (int i = 0; i < n; i++) {
		bool op = false;
		for (size_t j = 0; j < sizeof ops / sizeof *ops; j++)
			op |= !strcmp(yysymbol_name(exp[i]), ops[j]);
		if (!op || nops < 8)
			names[k++] = yysymbol_name(exp[i]);
	}
	if (nops >= 8)
		names[k++] = "an operator";
	char expected[256] = "";
	size_t len = 0;
	for (int i = 0; i < k && len < sizeof expected; i++)
		len += (size_t)snprintf(expected + len, sizeof expected - len,
					"%s%s", i == 0 ? "" : i == k - 1 ? " or " : ", ", names[i]);

	/* A statement that runs into the next line lacks its ';': point just
	 * after the last token of the statement, as gcc does. */
	if (want_semi && got != YYSYMBOL_YYEOF && P->prev_tok.file >= 0 &&
	    P->prev_tok.end_line < at.line) {
		dtpc_loc after = P->prev_tok;
		after.line = after.end_line;
		after.col = after.end_col = after.end_col + 1;
		diag_error(P->diag, after, "expected ';' at the end of the statement, found %s",
			   found);
		diag_hint(P->diag, "every statement ends with ';'");
		return 0;
	}
	if (n > 0)
		diag_error(P->diag, at, "unexpected %s, expected %s", found, expected);
	else
		diag_error(P->diag, at, "unexpected %s", found);

	if (!strcmp(P->prev_text, "elif"))
		diag_hint(P->diag, "write 'else if' (elif is not a keyword)");
	else if (got == YYSYMBOL_YYEOF && P->nbraces > 0 &&
	    P->nbraces <= (int)(sizeof P->braces / sizeof P->braces[0]))
		diag_note(P->diag, P->braces[P->nbraces - 1],
			  "this '{' is not closed");
	else if (!strcmp(yysymbol_name(got), "':'") && want_brace)
		diag_hint(P->diag, "a block is written in braces: if COND { ... } else { ... }");
	else if (!strcmp(yysymbol_name(got), "'='") && want_colon)
		diag_hint(P->diag, "a rule maps a glob to styles: \"GLOB\" : style, ...;");
	else if (got == YYSYMBOL_STRING && want_ident)
		diag_hint(P->diag, "names and styles are bare words, not strings (colwise, not \"colwise\")");
	else if (want_ident && got >= YYSYMBOL_IMPORT && got <= YYSYMBOL_FALSE)
		diag_hint(P->diag, "%s is a keyword and cannot be used as a name",
			  yysymbol_name(got));
	else if (!strcmp(yysymbol_name(got), "'='") && P->prev_is_keyword)
		diag_hint(P->diag, "'%s' is a keyword and cannot be used as a name",
			  P->prev_text);
	else if (want_semi && got != YYSYMBOL_YYEOF)
		diag_hint(P->diag, "is a ';' or ',' missing before %s?", found);
	else if (!strcmp(yysymbol_name(got), "'('") && P->prev_text[0] &&
		 !P->prev_is_keyword && (isalpha((unsigned char)P->prev_text[0]) ||
					 P->prev_text[0] == '_'))
		diag_hint(P->diag, "ops do not nest: give the inner op a name of its own "
			  "(%s_out = %s(...);) and pass that name", P->prev_text, P->prev_text);
	else if (n == 1 && got != YYSYMBOL_YYEOF)
		diag_hint(P->diag, "is %s missing before %s?", expected, found);
	return 0;
}
