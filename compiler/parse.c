/* parse.c — runs the scanner and parser over files and follows imports. */
#include "parse.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "plan.tab.h"
#include "lex.yy.h"

static void init_ast(struct file_ast *ast)
{
	memset(ast, 0, sizeof *ast);
	ast->imports_tail = &ast->imports;
	ast->models_tail = &ast->models;
	ast->plans_tail = &ast->plans;
}

static void parse_registered(struct arena *a, struct diag_ctx *d, int file,
			     struct file_ast *out)
{
	struct parse_ctx P = { .arena = a, .diag = d, .file = file, .ast = out,
			       .line = 1, .col = 1 };
	P.prev_tok = P.cur_tok = loc_none();
	init_ast(out);
	yyscan_t sc;
	if (plan_lex_init_extra(&P, &sc)) {
		diag_error(d, loc_none(), "cannot start the scanner");
		return;
	}
	const struct src_file *f = &d->files[file];
	YY_BUFFER_STATE b = plan__scan_bytes(f->text, (int)f->len, sc);
	plan_parse(sc, &P);
	plan__delete_buffer(b, sc);
	plan_lex_destroy(sc);
}

void parse_buffer(struct arena *a, struct diag_ctx *d, const char *name,
		  const char *text, size_t len, struct file_ast *out)
{
	parse_registered(a, d, diag_add_file(d, name, text, len), out);
}

/* The whole file into the arena (plans, imports, --config); NULL with *why
 * and errno (for the callers of parse_program, which print strerror) set on
 * failure. Only regular
 * files: `import "/dev/zero";` read forever and a FIFO blocked the open (it
 * is opened non-blocking for that reason), and a folder failed with a bare
 * EIO. The size is capped at what the scanner's int length can hold. The
 * root file "-" is standard input, whatever it is (a pipe, a terminal). */
char *read_source(struct arena *a, const char *path, bool std, size_t *len, const char **why)
{
	int fd = std ? dup(STDIN_FILENO) : open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	int e = fd < 0 || fstat(fd, &st) ? errno
		: !std && !S_ISREG(st.st_mode) ? EINVAL
		: S_ISREG(st.st_mode) && st.st_size > INT_MAX - 2 ? EFBIG : 0;
	FILE *f = e ? NULL : fdopen(fd, "rb");
	if (!f) {
		e = e ? e : errno;
		*why = e == EINVAL ? "not a regular file"
			: e == EFBIG ? "larger than 2 GiB" : strerror(e);
		if (fd >= 0)
			close(fd);
		errno = e;
		return NULL;
	}
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	size_t r;
	/* A file that grows while it is read stops at the cap, not later. */
	while (buf && n < (size_t)INT_MAX - 2 &&
	       (r = fread(buf + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb)
				free(buf);
			buf = nb;
		}
	}
	e = !buf ? ENOMEM : ferror(f) ? EIO : n > (size_t)INT_MAX - 2 ? EFBIG : 0;
	*why = e == EFBIG ? "larger than 2 GiB" : e ? strerror(e) : NULL;
	fclose(f);
	if (e) {
		free(buf);
		errno = e;
		return NULL;
	}
	char *text = arena_strndup(a, buf, n);
	free(buf);
	*len = n;
	return text;
}

struct visit {
	const char *path;
	bool done; /* false while its imports are being parsed: a cycle */
	struct visit *next;
	struct visit *parent; /* the file that imported it, for the cycle's chain */
};

/* An import names a file relative to the importing file's folder. */
static const char *resolve(struct arena *a, const char *from, const char *rel)
{
	if (rel[0] == '/')
		return rel;
	const char *slash = strrchr(from, '/');
	if (!slash)
		return rel;
	return arena_printf(a, "%.*s/%s", (int)(slash - from), from, rel);
}

static bool parse_rec(struct arena *a, struct diag_ctx *d, const char *path,
		      dtpc_loc from, struct visit *importer, struct visit **seen,
		      struct program *out)
{
	for (struct visit *v = *seen; v; v = v->next) {
		if (strcmp(v->path, path))
			continue;
		if (!v->done) {
			/* the chain back from the importer to this file */
			const char *chain = path;
			for (struct visit *u = importer; u && u != v->parent; u = u->parent)
				chain = arena_printf(a, "%s -> %s", u->path, chain);
			diag_error(d, from, "import cycle: %s", chain);
			diag_hint(d, "remove one of the imports in the cycle");
		}
		return true;
	}
	size_t len = 0;
	const char *why;
	/* "-" at the root: the plan comes from standard input, and its imports
	 * resolve from the current folder */
	bool std = from.file < 0 && !strcmp(path, "-");
	char *text = read_source(a, path, std, &len, &why);
	if (!text) {
		if (from.file < 0)
			return false;
		diag_error(d, from, "cannot read '%s': %s", path, why);
		return true;
	}
	struct visit *v = ARENA_NEW(a, struct visit);
	v->path = path;
	v->parent = importer;
	v->next = *seen;
	*seen = v;
	struct file_ast ast;
	parse_registered(a, d, diag_add_file(d, std ? "<stdin>" : path, text, len), &ast);
	out->nfiles++;
	for (struct import *im = ast.imports; im; im = im->next)
		parse_rec(a, d, resolve(a, path, im->path), im->loc, v, seen, out);
	v->done = true;
	/* Imported declarations come before the importer's, in import order. */
	struct model **mt = &out->models;
	while (*mt)
		mt = &(*mt)->next;
	*mt = ast.models;
	struct plan **pt = &out->plans;
	while (*pt)
		pt = &(*pt)->next;
	*pt = ast.plans;
	return true;
}

bool parse_program(struct arena *a, struct diag_ctx *d, const char *path,
		   struct program *out)
{
	memset(out, 0, sizeof *out);
	struct visit *seen = NULL;
	return parse_rec(a, d, path, loc_none(), NULL, &seen, out);
}
