/* parse.h — reading plan files into ASTs (the driver around grammar/plan.y). */
#ifndef DTPC_PARSE_H
#define DTPC_PARSE_H
#include "ast.h"

struct arena;

/* State shared by the scanner and the parser of one file. */
struct parse_ctx {
	struct arena *arena;
	struct diag_ctx *diag;
	int file;
	struct file_ast *ast;
	/* Scanner position (1-based) and the last two tokens, so a syntax error
	 * can point just after the token that should have been followed by ';'. */
	int line, col;
	dtpc_loc prev_tok, cur_tok;
	char cur_text[48], prev_text[48];
	bool cur_is_keyword, prev_is_keyword;
	/* Open braces, innermost last: an unexpected end of file names the '{'
	 * that is still open. */
	dtpc_loc braces[64];
	int nbraces;
};

/* One parsed file set: the root file and everything it imports. */
struct program {
	struct model *models;
	struct plan *plans;
	int nfiles;
};

/* Parses the file at path and, recursively, its imports (relative to the
 * importing file; each file once; cycles are an error). Diagnostics go to
 * d. Returns false only when the root file cannot be read (exit status 2). */
bool parse_program(struct arena *a, struct diag_ctx *d, const char *path,
		   struct program *out);
/* Parses one in-memory buffer (no imports followed): the fuzz target's
 * entry point. */
void parse_buffer(struct arena *a, struct diag_ctx *d, const char *name,
		  const char *text, size_t len, struct file_ast *out);
/* A whole regular file (std: standard input, whatever it is) into the arena,
 * at most 2 GiB; NULL with *why (and errno) set when it cannot be read. */
char *read_source(struct arena *a, const char *path, bool std, size_t *len,
		  const char **why);
#endif
