/* args.h — the command line's options: each command lists its own in a
 * table and one loop reads them, so that every option of every command is
 * taken, checked and refused in the same words (exit status 2). */
#ifndef DTPC_CLI_ARGS_H
#define DTPC_CLI_ARGS_H
#include <stdbool.h>
#include <stdint.h>

enum cli_kind {
	CLI_END,   /* ends a table */
	CLI_SET,   /* no value: *(bool *)dst = true */
	CLI_CLEAR, /* no value: *(bool *)dst = false */
	CLI_STR,   /* *(const char **)dst = the value */
	CLI_INT,   /* *(int *)dst = an integer in [lo, hi] */
	CLI_I64,   /* *(int64_t *)dst = an integer in [lo, hi] */
	CLI_U64,   /* *(uint64_t *)dst = digits only */
	CLI_REAL,  /* *(double *)dst = a number in [lo, hi] (NaN never) */
	CLI_WORD,  /* *(int *)dst = the index of the value in words */
	CLI_CALL,  /* call(ctx, name, value): 0, or the exit status of an error it reported */
};

struct cli_opt {
	const char *name; /* "--plan", "-o" */
	enum cli_kind kind;
	void *dst;
	/* CLI_INT .. CLI_REAL: the value's form in the error, "--NAME needs
	 * <need>, not 'x'" ("1 to 4096", "a positive integer") */
	const char *need;
	double lo, hi;
	const char *const *words; /* CLI_WORD: NULL-terminated */
	int (*call)(void *ctx, const char *name, const char *value);
	void *ctx;
	bool attached; /* the value may follow the name at once: -DN=V, -dil */
};

/* What is not an option: with `file`, at most one argument (a second is
 * "one <what> at a time ('x')"); with `files`, every such argument, in
 * order, into files[0..*nfiles) (room for argc). A lone "-" is such an
 * argument (standard input where the command reads it). */
struct cli_rest {
	const char **file;
	const char *what;
	const char **files;
	int *nfiles;
	void (*help)(void); /* --help / -h: prints the usage */
	const char *missing; /* with file: the error when none is given */
};

/* Reads argv[first..argc) by table t (ended by CLI_END). Returns -1 when
 * the command goes on, 0 after --help, else the exit status of the usage
 * error it reported (2) or that a callback returned. */
int cli_parse(int argc, char **argv, int first, const struct cli_opt *t,
	      const struct cli_rest *rest);

/* Table entries (designated, so that what a kind does not use is zero). */
#define OPT_SET(n, d) { .name = (n), .kind = CLI_SET, .dst = (d) }
#define OPT_CLEAR(n, d) { .name = (n), .kind = CLI_CLEAR, .dst = (d) }
#define OPT_STR(n, d) { .name = (n), .kind = CLI_STR, .dst = (d) }
#define OPT_NUM(n, k, d, nd, l, h) { .name = (n), .kind = (k), .dst = (d), .need = (nd), .lo = (l), .hi = (h) }
#define OPT_WORD(n, d, w) { .name = (n), .kind = CLI_WORD, .dst = (d), .words = (w) }
#define OPT_CALL(n, f, c) { .name = (n), .kind = CLI_CALL, .call = (f), .ctx = (c) }
#define OPT_CALL_ATTACHED(n, f, c) { .name = (n), .kind = CLI_CALL, .call = (f), .ctx = (c), .attached = true }
#define OPT_END { .name = NULL, .kind = CLI_END }

/* The options of every command that compiles a plan (check, compile, cost,
 * suggest), into co: --plan, --mesh and --context (each the body of one
 * statement of its kind), --config (its path resolved; an unreadable one is
 * exit status 2) and -D NAME=VALUE (co->defines has room for argc). */
struct arena;
struct compile_opts;
struct cli_plan_opts {
	struct arena *a;
	struct compile_opts *co;
};
int cli_opt_mesh(void *ctx, const char *name, const char *value);
int cli_opt_context(void *ctx, const char *name, const char *value);
int cli_opt_config(void *ctx, const char *name, const char *value);
int cli_opt_define(void *ctx, const char *name, const char *value);
/* --expose GLOB, repeatable, into co->expose (room for argc) */
int cli_opt_expose(void *ctx, const char *name, const char *value);
#define OPT_PLAN_OPTIONS(p)                                                                       \
	OPT_STR("--plan", &(p)->co->plan), OPT_CALL("--mesh", cli_opt_mesh, (p)),                    \
		OPT_CALL("--context", cli_opt_context, (p)),                                        \
		OPT_CALL("--config", cli_opt_config, (p)),                                          \
		OPT_CALL_ATTACHED("-D", cli_opt_define, (p))
#endif
