/* diag.h — source files, locations and diagnostics.
 *
 * Every source file read in a compile is registered here; a location is a
 * (file, line, column) range into one of them, so any pass can report
 * `file:line:col: error: ...` with the source line and a caret. Diagnostics are
 * collected rather than printed at once because `--format json` needs them all
 * in one document and the text printer needs the notes attached to their error. */
#ifndef DTPC_DIAG_H
#define DTPC_DIAG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct arena;

/* 1-based lines and columns; col counts characters (UTF-8 code points, as the
 * scanner advances: a tab is one), not bytes. file < 0: no location. */
typedef struct dtpc_loc {
	int file;
	int line, col;
	int end_line, end_col; /* inclusive end of the range */
} dtpc_loc;

enum diag_level { DIAG_ERROR, DIAG_NOTE, DIAG_HINT };

struct diag {
	enum diag_level level;
	dtpc_loc loc;
	const char *msg;
	/* A hint that an option of the plan's context would fix the error:
	 * the option as --context takes it ("ulysses_anything = true"), which
	 * the driver tries before the hint is offered (driver.c). NULL for
	 * every other diagnostic. */
	const char *context;
	/* the compiler source file that reported it (__FILE__): names the
	 * family of checks, a rule of `check --format sarif` */
	const char *origin;
	struct diag *next;     /* next top-level diagnostic */
	struct diag *children; /* notes and hints of an error */
	struct diag *last_child;
};

struct src_file {
	const char *path;
	const char *text;
	size_t len;
	const int *line_start; /* byte offset of each line, [0] = line 1 */
	int nlines;
};

struct diag_ctx {
	struct arena *arena;
	struct src_file *files;
	int nfiles, capfiles;
	struct diag *head, *tail;
	int nerrors;
	int max_errors; /* stop recording past this many errors (0: no limit) */
};

void diag_init(struct diag_ctx *d, struct arena *a);
void diag_release(struct diag_ctx *d);
/* Registers a file's text (kept, not copied); returns its index. */
int diag_add_file(struct diag_ctx *d, const char *path, const char *text,
		  size_t len);

dtpc_loc loc_none(void);

/* diag_error and diag_remark record the calling source file (the rule of
 * SARIF output) through these macros; the functions take it first. */
#define diag_error(d, loc, ...) diag_error_at(__FILE__, d, loc, __VA_ARGS__)
#define diag_remark(d, loc, ...) diag_remark_at(__FILE__, d, loc, __VA_ARGS__)
void diag_error_at(const char *origin, struct diag_ctx *d, dtpc_loc loc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The top-level diagnostics recorded after mark (d->tail before a call;
 * NULL: all) take the calling file as their origin: an op descriptor's
 * checks (compiler/ops/) are the family of the pass that ran them, the
 * shape rules model.c's, the layout rules layout.c's. */
#define diag_claim(d, mark) diag_claim_at(__FILE__, d, mark)
void diag_claim_at(const char *origin, struct diag_ctx *d, struct diag *mark);
/* A note or hint attaches to the most recent error (or remark). */
void diag_note(struct diag_ctx *d, dtpc_loc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A note on error e, which need not be the most recent one. */
void diag_note_to(struct diag_ctx *d, struct diag *e, dtpc_loc loc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void diag_hint(struct diag_ctx *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* A hint proposing the context option `option` (kept, not copied). */
void diag_hint_context(struct diag_ctx *d, const char *option, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A note that stands alone (compiler-inserted collectives): not an error. */
void diag_remark_at(const char *origin, struct diag_ctx *d, dtpc_loc loc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* gcc style: `file:line:col: error: msg`, the source line, a caret line. */
void diag_print_text(const struct diag_ctx *d, FILE *out, bool color);
/* Drops the standalone notes (remarks): `-q` keeps only errors, each with
 * its own notes and hints. */
void diag_drop_remarks(struct diag_ctx *d);
/* Prefixes "in plan NAME: " to the remarks after `from` (NULL: all), so a
 * file with several plans says which one each note is about. */
void diag_name_remarks(struct diag_ctx *d, struct diag *from, const char *plan);
/* `{"diagnostics": [...], "errors": N}` built with cJSON;
 * extra (may be NULL) is a cJSON object merged in as "summary". */
struct cJSON;
void diag_print_json(const struct diag_ctx *d, FILE *out, struct cJSON *extra);
/* The same document with extra (NULL: none) under the key `key`. */
void diag_print_json_as(const struct diag_ctx *d, FILE *out, const char *key,
			struct cJSON *extra);
/* A SARIF 2.1.0 log (sarif.c): one run of dtpc, a rule per family of checks
 * (the pass that reports them), a result per error or remark with its notes
 * as related locations. ran: whether the check ran (not stopped by a usage
 * or I/O error). */
void diag_print_sarif(const struct diag_ctx *d, FILE *out, bool ran);

/* A command-line usage error on stderr ("dtpc: ..." and where to look);
 * returns 2, the exit status of usage and I/O errors. */
int diag_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A 64-bit integer as a JSON number that stays exact: cJSON holds numbers
 * as doubles, so one beyond 2^53 goes in as its decimal text (a raw item,
 * still a number in the document). Every integer that may pass 2^53 is
 * made so. */
struct cJSON *json_int(int64_t v);
struct cJSON *json_uint(uint64_t v);
/* The decimal text of such a number (json_int's, or a plain number). */
const char *json_int_text(const struct cJSON *n, char buf[24]);

/* The length of the well-formed UTF-8 sequence at p, before end (RFC 3629:
 * no overlong forms, no surrogates, nothing above U+10FFFF), or 0. JSON and
 * SARIF must be UTF-8; the plan's scanner and config.json's reader check
 * their text with it. */
int utf8_len(const unsigned char *p, const unsigned char *end);
/* Replaces each byte of s that does not start a well-formed character with
 * '?'; true if there was one. */
bool utf8_repair(char *s);
#endif
