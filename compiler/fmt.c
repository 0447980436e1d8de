/* fmt.c — `dtpc fmt`: one layout for every plan file.
 *
 * Token level, as gofmt and clang-format's simpler modes: the file is
 * scanned into the language's tokens plus its comments and line breaks, then
 * printed again. The author's line breaks stay (so diagnostics keep their
 * line numbers, and a long rule stays broken where it was broken); at most
 * one blank line is kept between lines. Everything else is decided here:
 *
 * - indentation: two spaces per open '{'; a statement continued on the next
 *   line lines up after the innermost bracket still open, else (a rule) with
 *   its first style, else four spaces deeper;
 * - spacing: one space around '=', ':' and binary operators and after ',',
 *   none inside brackets, before ',' ';' or '.', after a unary '-', or
 *   between a name and its '(' or '[';
 * - alignment: in a run of statements of the same kind (assignments,
 *   inputs, rules) with no blank or comment line between,
 *   the '=' or ':' line up (unless one left side is far longer or shorter
 *   than the others); trailing comments line up two spaces after the
 *   longest commented line, up to a blank or comment line.
 *
 * The scanner here mirrors grammar/plan.l's tokens; a file is first parsed
 * with the real parser (one that has syntax errors is not formatted), and
 * the output is scanned again and must hold the same tokens. */
#include "fmt.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arena.h"
#include "ast.h"
#include "diag.h"
#include "driver.h"
#include "parse.h"

enum kind { K_WORD, K_NUM, K_DOTINT, K_STR, K_COMMENT, K_PUNCT };

struct tok {
	enum kind kind;
	const char *s;
	int len;
	int breaks; /* line breaks before the token */
};

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_word(char c, bool first)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && is_digit(c));
}

/* The tokens of plan.l (the longest match, as flex takes it), comments
 * included, into *out (malloc'd); false at what it has no token for. */
static bool scan(const char *t, size_t len, struct tok **out, int *ntok, char *why,
		 size_t whylen)
{
	struct tok *v = NULL;
	int n = 0, cap = 0, breaks = 0;
	size_t i = 0;
	while (i < len) {
		char c = t[i];
		if (c == '\n' || c == ' ' || c == '\t' || c == '\r') {
			breaks += c == '\n';
			i++;
			continue;
		}
		size_t j = i + 1;
		enum kind k = K_PUNCT;
		if (c == '#') {
			k = K_COMMENT;
			while (j < len && t[j] != '\n')
				j++;
			while (j > i + 1 && (t[j - 1] == ' ' || t[j - 1] == '\t' || t[j - 1] == '\r'))
				j--; /* trailing blanks are layout */
		} else if (is_word(c, true)) {
			k = K_WORD;
			while (j < len && is_word(t[j], false))
				j++;
		} else if (c == '.' && i + 1 < len && is_digit(t[i + 1])) {
			k = K_DOTINT;
			while (j < len && is_digit(t[j]))
				j++;
		} else if (is_digit(c)) {
			k = K_NUM;
			while (j < len && is_digit(t[j]))
				j++;
			if (j + 1 < len && t[j] == '.' && is_digit(t[j + 1]))
				for (j++; j < len && is_digit(t[j]);)
					j++;
			size_t e = j + (j < len && (t[j] == 'e' || t[j] == 'E'));
			e += e > j && e < len && (t[e] == '+' || t[e] == '-');
			if (e > j && e < len && is_digit(t[e]))
				for (j = e; j < len && is_digit(t[j]);)
					j++;
		} else if (c == '"') {
			k = K_STR;
			while (j < len && t[j] != '"' && t[j] != '\n')
				j += t[j] == '\\' && j + 1 < len && t[j + 1] != '\n' ? 2 : 1;
			if (j >= len || t[j] != '"') {
				snprintf(why, whylen, "unterminated string");
				free(v);
				return false;
			}
			j++;
		} else if (i + 1 < len && strchr("=!<>/", c) &&
			   t[i + 1] == (c == '/' ? '/' : '=')) {
			j++; /* == != <= >= // */
		} else if (!strchr("{}()[],;:=.+-*/%<>", c)) {
			snprintf(why, whylen, "stray character");
			free(v);
			return false;
		}
		if (n == cap) {
			cap = cap ? 2 * cap : 256;
			v = realloc(v, sizeof *v * (size_t)cap);
			if (!v)
				abort();
		}
		v[n++] = (struct tok){ k, t + i, (int)(j - i), breaks };
		breaks = 0;
		for (i = j; k == K_COMMENT && i < len && t[i] != '\n';)
			i++;
	}
	*out = v;
	*ntok = n;
	return true;
}

/* A one-character punctuation token c ('=' is not '==') */
static bool punct(const struct tok *t, char c)
{
	return t && t->kind == K_PUNCT && t->len == 1 && t->s[0] == c;
}

static bool word(const struct tok *t, const char *w)
{
	return t && t->kind == K_WORD && (size_t)t->len == strlen(w) && !strncmp(t->s, w, (size_t)t->len);
}

/* The keywords that an expression follows (`if -x > 0`, `not (a)`,
 * `assert (a or b), "..."`, `i in [0, 1]`). */
static bool expr_keyword(const struct tok *t)
{
	return word(t, "if") || word(t, "else") || word(t, "and") || word(t, "or") ||
	       word(t, "not") || word(t, "assert") || word(t, "in");
}

/* Whether a token ends an operand: after it, '-' is binary. */
static bool operand_end(const struct tok *t)
{
	return (t->kind == K_WORD && !expr_keyword(t)) || t->kind == K_NUM ||
	       t->kind == K_DOTINT || t->kind == K_STR || punct(t, ')') || punct(t, ']');
}

/* Spaces between two tokens of one line (prev2: the token before prev). */
static int gap(const struct tok *prev2, const struct tok *prev, const struct tok *cur)
{
	if (cur->kind == K_COMMENT)
		return 2;
	if (punct(cur, ',') || punct(cur, ';') || punct(cur, ')') || punct(cur, ']') ||
	    punct(cur, '.') || cur->kind == K_DOTINT || punct(prev, '.') || punct(prev, '(') ||
	    punct(prev, '['))
		return 0;
	if (punct(prev, '-') && !(prev2 && operand_end(prev2)))
		return 0; /* unary minus */
	if ((punct(cur, '(') || punct(cur, '[')) &&
	    ((prev->kind == K_WORD && !expr_keyword(prev)) || punct(prev, ')') || punct(prev, ']')))
		return 0;
	return 1;
}

/* The kinds of one-line statements whose '=' or ':' line up. */
enum align_kind { AL_NONE, AL_ASSIGN, AL_INPUT, AL_RULE };

struct line {
	int first, end;     /* tokens [first, end), a trailing comment included */
	int blank_before;   /* a blank line precedes it */
	int indent;
	bool comment_only;
	bool has_comment;   /* ends with a comment after code */
	bool continued;     /* continues the statement of the line before */
	enum align_kind al;
	int align_at;       /* token index of the '=' or ':' (AL_*) */
	int left_width;     /* width of the code before align_at */
	int pad;            /* spaces added before align_at */
	int code_width;     /* indent + code, padding included */
	int comment_col;    /* column of the trailing comment */
	int depth;
};

struct out {
	char *s;
	size_t n, cap;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->n + n + 1 > o->cap) {
		while (o->n + n + 1 > o->cap)
			o->cap = o->cap ? 2 * o->cap : 4096;
		o->s = realloc(o->s, o->cap);
		if (!o->s)
			abort();
	}
	memcpy(o->s + o->n, s, n);
	o->n += n;
	o->s[o->n] = 0;
}

static void spaces(struct out *o, int n)
{
	for (int i = 0; i < n; i++)
		put(o, " ", 1);
}

/* Width of tokens [a, b) of one line laid out with gap(). */
static int width(const struct tok *v, int a, int b)
{
	int w = 0;
	for (int i = a; i < b; i++)
		w += (i > a ? gap(i - 2 >= a ? &v[i - 2] : NULL, &v[i - 1], &v[i]) : 0) + v[i].len;
	return w;
}

/* Which alignment a line takes part in: one where a statement starts
 * (its continuation lines then follow the padded columns). */
static enum align_kind align_of(const struct tok *v, const struct line *l, bool continued, int *at)
{
	int last = l->end - l->has_comment;
	if (continued || l->comment_only)
		return AL_NONE;
	const struct tok *t = &v[l->first];
	if (t->kind == K_STR && l->first + 1 < l->end && punct(&v[l->first + 1], ':')) {
		*at = l->first + 1;
		return AL_RULE;
	}
	if (word(t, "input") && l->first + 2 < l->end && punct(&v[l->first + 2], ':')) {
		*at = l->first + 2;
		return AL_INPUT;
	}
	static const char *const keywords[] = { "import", "model", "plan", "output", "repeat",
						"mesh", "context", "tensor", "if", "else", "assert" };
	for (size_t k = 0; k < sizeof keywords / sizeof *keywords; k++)
		if (word(t, keywords[k]))
			return AL_NONE;
	for (int i = l->first; i < last; i++) {
		if (punct(&v[i], '=')) {
			*at = i;
			return AL_ASSIGN;
		}
		if (!(v[i].kind == K_WORD || v[i].kind == K_DOTINT || punct(&v[i], '.')))
			return AL_NONE;
	}
	return AL_NONE;
}

/* Indentation, line by line: depth, statement continuation, the open
 * brackets of the statement (the output column after them), the kind of
 * alignment a line takes part in, and its width with its padding. Run twice:
 * the padding is decided between the runs, and continuation lines follow
 * the padded columns of their first line. */
static void walk(const struct tok *v, struct line *lines, int nl)
{
	int depth = 0, stack[256], nstack = 0, stmt_indent = 0, rule_col = -1;
	bool in_stmt = false;
	for (int li = 0; li < nl; li++) {
		struct line *l = &lines[li];
		l->comment_only = v[l->first].kind == K_COMMENT;
		l->has_comment = !l->comment_only && v[l->end - 1].kind == K_COMMENT;
		int d = depth - punct(&v[l->first], '}');
		l->depth = d < 0 ? 0 : d;
		bool continued = l->continued = in_stmt;
		if (!continued)
			l->indent = 2 * l->depth;
		else if (nstack)
			l->indent = stack[(nstack > 256 ? 256 : nstack) - 1];
		else if (rule_col >= 0)
			l->indent = rule_col;
		else
			l->indent = stmt_indent + 4;
		l->al = align_of(v, l, continued, &l->align_at);
		if (l->al != AL_NONE)
			l->left_width = width(v, l->first, l->align_at);
		int col = l->indent, code_end = l->end - l->has_comment;
		for (int i = l->first; i < code_end && !l->comment_only; i++) {
			if (i > l->first)
				col += gap(i - 2 >= l->first ? &v[i - 2] : NULL, &v[i - 1], &v[i]);
			if (l->al != AL_NONE && i == l->align_at)
				col += l->pad;
			if (!in_stmt && !punct(&v[i], '}')) {
				in_stmt = true;
				stmt_indent = l->indent;
				rule_col = -1;
				nstack = 0;
			}
			const struct tok *t = &v[i];
			col += t->len;
			if (punct(t, '(') || punct(t, '[')) {
				/* after the bracket, or a hanging indent if it ends the line */
				int at = i + 1 < code_end ? col : stmt_indent + 4;
				if (nstack < 256)
					stack[nstack] = at;
				nstack++;
			} else if ((punct(t, ')') || punct(t, ']')) && nstack) {
				nstack--;
			} else if (punct(t, ':') && rule_col < 0 && nstack == 0 && i == l->first + 1 &&
				   v[l->first].kind == K_STR) {
				rule_col = i + 1 < code_end ? col + 1 : stmt_indent + 4;
			} else if (punct(t, ';') || punct(t, '{') || punct(t, '}')) {
				in_stmt = false;
				depth += punct(t, '{') - punct(t, '}');
				if (depth < 0)
					depth = 0;
			}
		}
		l->code_width = l->comment_only ? 0 : col;
	}
}

char *fmt_text(const char *text, size_t len, size_t *outlen, char *why, size_t whylen)
{
	int n = 0;
	struct tok *v = NULL;
	if (!scan(text, len, &v, &n, why, whylen))
		return NULL;
	struct line *lines = calloc((size_t)n + 1, sizeof *lines);
	int nl = 0;
	for (int i = 0; i < n; i++) {
		if (i == 0 || v[i].breaks) {
			lines[nl].first = i;
			lines[nl].blank_before = nl > 0 && v[i].breaks > 1;
			nl++;
		}
		lines[nl - 1].end = i + 1;
	}

	walk(v, lines, nl);

	/* alignment runs of '=' / ':'; as gofmt, a left side far longer or
	 * shorter than the run's so far (2.5 times its geometric mean, once
	 * past 40 columns) starts a new run rather than dragging it along */
	for (int a = 0; a < nl;) {
		int b = a + 1, count = 1, prev = lines[a].left_width;
		double lnsum = log(prev + 1);
		while (lines[a].al != AL_NONE && b < nl && !lines[b].blank_before) {
			/* a member's continuation lines belong to it */
			if (lines[b].continued && !lines[b].comment_only) {
				b++;
				continue;
			}
			if (lines[b].al != lines[a].al || lines[b].depth != lines[a].depth)
				break;
			int w = lines[b].left_width;
			double ratio = (w + 1) / exp(lnsum / count);
			if ((w > 40 || prev > 40) && (ratio >= 2.5 || ratio <= 1 / 2.5))
				break;
			lnsum += log(w + 1);
			count++;
			prev = w;
			b++;
		}
		int w = 0;
		for (int i = a; i < b; i++)
			w = lines[i].left_width > w ? lines[i].left_width : w;
		for (int i = a; i < b; i++)
			if (lines[i].al != AL_NONE)
				lines[i].pad = w - lines[i].left_width;
		a = b;
	}
	walk(v, lines, nl);
	/* trailing comments: a section ends at a blank or comment-only line */
	for (int a = 0; a < nl;) {
		int b = a, col = 0;
		while (b < nl && (b == a || (!lines[b].blank_before && !lines[b].comment_only))) {
			if (lines[b].has_comment && lines[b].code_width + 2 > col)
				col = lines[b].code_width + 2;
			if (lines[b].comment_only)
				break;
			b++;
		}
		if (b == a)
			b++;
		for (int i = a; i < b; i++)
			lines[i].comment_col = col;
		a = b;
	}

	struct out o = { 0 };
	put(&o, "", 0); /* an empty file still gets a buffer */
	for (int li = 0; li < nl; li++) {
		const struct line *l = &lines[li];
		if (l->blank_before)
			put(&o, "\n", 1);
		spaces(&o, l->indent);
		int col = l->indent;
		for (int i = l->first; i < l->end; i++) {
			int g = 0;
			if (i > l->first)
				g = gap(i - 2 >= l->first ? &v[i - 2] : NULL, &v[i - 1], &v[i]);
			if (l->al != AL_NONE && i == l->align_at)
				g += l->pad;
			if (v[i].kind == K_COMMENT && i > l->first)
				g = l->comment_col - col;
			spaces(&o, g);
			put(&o, v[i].s, (size_t)v[i].len);
			col += g + v[i].len;
		}
		put(&o, "\n", 1);
	}
	free(lines);

	/* the same tokens, or nothing: a layout bug must never change a plan */
	int m = 0;
	struct tok *w2 = NULL;
	bool same = scan(o.s, o.n, &w2, &m, why, whylen) && m == n;
	for (int i = 0; same && i < n; i++)
		same = v[i].kind == w2[i].kind && v[i].len == w2[i].len &&
		       !memcmp(v[i].s, w2[i].s, (size_t)v[i].len);
	free(w2);
	free(v);
	if (!same) {
		snprintf(why, whylen, "internal error: the layout changed the tokens");
		free(o.s);
		return NULL;
	}
	*outlen = o.n;
	return o.s;
}

/* ---- the command ------------------------------------------------------------ */

static char *slurp(FILE *f, size_t *len)
{
	size_t cap = 1 << 16, n = 0, r;
	char *buf = malloc(cap);
	while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
		n += r;
		if (n + 1 == cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb)
				free(buf);
			buf = nb;
		}
	}
	if (!buf || ferror(f)) {
		free(buf);
		return NULL;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

/* One file: 0 in its layout (or rewritten), 1 to change (check) or not
 * parsing, 2 for I/O. */
static int fmt_file(const char *path, bool check, FILE *out, FILE *err)
{
	bool std = !strcmp(path, "-");
	/* a named file is a regular one: not a device that never ends */
	if (!std && !driver_readable(path, err))
		return 2;
	FILE *f = std ? stdin : fopen(path, "rb");
	size_t len = 0;
	char *text = f ? slurp(f, &len) : NULL;
	if (f && !std)
		fclose(f);
	if (!text) {
		fprintf(err, "dtpc: cannot read '%s': %s\n", path, strerror(errno ? errno : EIO));
		return 2;
	}
	/* the real parser first: a file with syntax errors is not formatted */
	struct arena *a = arena_create();
	struct diag_ctx d;
	diag_init(&d, a);
	struct file_ast ast;
	parse_buffer(a, &d, std ? "<stdin>" : path, text, len, &ast);
	int rc = 0;
	char why[128] = "";
	size_t n = 0;
	char *formatted = NULL;
	if (d.nerrors) {
		diag_print_text(&d, err, false);
		fprintf(err, "dtpc: '%s' is not formatted: it does not parse\n", path);
		rc = 1;
	} else if (!(formatted = fmt_text(text, len, &n, why, sizeof why))) {
		fprintf(err, "dtpc: %s: %s\n", path, why);
		rc = 1;
	} else if (std) {
		rc = fwrite(formatted, 1, n, out) == n ? 0 : 2;
	} else if (n != len || memcmp(formatted, text, n)) {
		if (check) {
			fprintf(out, "%s\n", path);
			rc = 1;
		} else {
			/* write beside and rename: an editor never sees half a file;
			 * beside the link's target, so that a symbolic link stays
			 * one, and with the file's own permissions */
			char *real = realpath(path, NULL);
			char *tmp = real ? arena_printf(a, "%s.fmt-tmp", real) : NULL;
			struct stat st;
			FILE *w = tmp && !stat(real, &st) ? fopen(tmp, "wb") : NULL;
			bool ok = w && !fchmod(fileno(w), st.st_mode & 07777) &&
				  fwrite(formatted, 1, n, w) == n;
			if (w && fclose(w))
				ok = false;
			if (!ok || rename(tmp, real)) {
				fprintf(err, "dtpc: cannot write '%s': %s\n", path, strerror(errno));
				if (tmp)
					remove(tmp);
				rc = 2;
			}
			free(real);
		}
	}
	free(formatted);
	diag_release(&d);
	arena_free(a);
	free(text);
	return rc;
}

static int by_name(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

static int worse(int a, int b)
{
	return a > b ? a : b;
}

/* Every *.plan under a folder, in name order (a stable report). */
static int fmt_dir(const char *dir, bool check, FILE *out, FILE *err)
{
	DIR *dp = opendir(dir);
	if (!dp) {
		fprintf(err, "dtpc: cannot read '%s': %s\n", dir, strerror(errno));
		return 2;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	for (struct dirent *e; (e = readdir(dp));) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			names = realloc(names, cap * sizeof *names);
			if (!names)
				abort();
		}
		size_t l = strlen(dir);
		names[n] = malloc(l + strlen(e->d_name) + 2);
		sprintf(names[n++], "%s%s%s", dir, l && dir[l - 1] == '/' ? "" : "/", e->d_name);
	}
	closedir(dp);
	if (n)
		qsort(names, n, sizeof *names, by_name);
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		size_t l = strlen(names[i]);
		if (stat(names[i], &st) == 0 && S_ISDIR(st.st_mode))
			rc = worse(rc, fmt_dir(names[i], check, out, err));
		else if (l > 5 && !strcmp(names[i] + l - 5, ".plan"))
			rc = worse(rc, fmt_file(names[i], check, out, err));
		free(names[i]);
	}
	free(names);
	return rc;
}

int fmt_main(char **paths, int npaths, bool check, FILE *out, FILE *err)
{
	int rc = 0;
	for (int i = 0; i < npaths; i++) {
		struct stat st;
		if (strcmp(paths[i], "-") && stat(paths[i], &st) == 0 && S_ISDIR(st.st_mode))
			rc = worse(rc, fmt_dir(paths[i], check, out, err));
		else
			rc = worse(rc, fmt_file(paths[i], check, out, err));
	}
	return rc;
}
