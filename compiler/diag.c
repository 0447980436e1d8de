/* diag.c — the line map and the diagnostic printers. */
#include "diag.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

void diag_init(struct diag_ctx *d, struct arena *a)
{
	memset(d, 0, sizeof *d);
	d->arena = a;
	d->max_errors = 200;
}

void diag_release(struct diag_ctx *d)
{
	free(d->files);
	d->files = NULL;
}

int diag_add_file(struct diag_ctx *d, const char *path, const char *text,
		  size_t len)
{
	if (d->nfiles == d->capfiles) {
		d->capfiles = d->capfiles ? d->capfiles * 2 : 8;
		d->files = realloc(d->files, sizeof *d->files * (size_t)d->capfiles);
		if (!d->files)
			abort();
	}
	int nl = 1;
	for (size_t i = 0; i < len; i++)
		nl += text[i] == '\n';
	int *ls = ARENA_ARRAY(d->arena, int, nl);
	int k = 0;
	ls[k++] = 0;
	for (size_t i = 0; i < len; i++)
		if (text[i] == '\n')
			ls[k++] = (int)(i + 1);
	struct src_file *f = &d->files[d->nfiles];
	f->path = arena_strdup(d->arena, path);
	f->text = text;
	f->len = len;
	f->line_start = ls;
	f->nlines = nl;
	return d->nfiles++;
}

dtpc_loc loc_none(void)
{
	return (dtpc_loc){ .file = -1 };
}

static struct diag *add(struct diag_ctx *d, enum diag_level lv, dtpc_loc loc,
			const char *fmt, va_list ap)
{
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	char *m = arena_alloc(d->arena, (size_t)n + 1);
	vsnprintf(m, (size_t)n + 1, fmt, ap2);
	va_end(ap2);
	struct diag *g = ARENA_NEW(d->arena, struct diag);
	g->level = lv;
	g->loc = loc;
	g->msg = m;
	return g;
}

static void push_top(struct diag_ctx *d, struct diag *g)
{
	if (d->tail)
		d->tail->next = g;
	else
		d->head = g;
	d->tail = g;
}

/* Past max_errors the errors are still counted (exit status, summary) but no
 * longer stored: a generated plan with one mistake per block must not print
 * ten thousand screens. */
static bool over_limit(const struct diag_ctx *d)
{
	return d->max_errors && d->nerrors > d->max_errors;
}

void diag_error_at(const char *origin, struct diag_ctx *d, dtpc_loc loc, const char *fmt, ...)
{
	d->nerrors++;
	if (over_limit(d)) {
		d->tail = NULL; /* later notes have nothing to attach to */
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	struct diag *g = add(d, DIAG_ERROR, loc, fmt, ap);
	va_end(ap);
	g->origin = origin;
	push_top(d, g);
}

void diag_remark_at(const char *origin, struct diag_ctx *d, dtpc_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	struct diag *g = add(d, DIAG_NOTE, loc, fmt, ap);
	va_end(ap);
	g->origin = origin;
	push_top(d, g);
}

static void attach_to(struct diag *t, struct diag *g)
{
	if (t->last_child)
		t->last_child->next = g;
	else
		t->children = g;
	t->last_child = g;
}

static void attach(struct diag_ctx *d, struct diag *g)
{
	struct diag *t = d->tail;
	if (!t) {
		if (over_limit(d))
			return;
		push_top(d, g);
		return;
	}
	attach_to(t, g);
}

void diag_note_to(struct diag_ctx *d, struct diag *e, dtpc_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	attach_to(e, add(d, DIAG_NOTE, loc, fmt, ap));
	va_end(ap);
}

void diag_note(struct diag_ctx *d, dtpc_loc loc, const char *fmt, ...)
{
	if (over_limit(d))
		return;
	va_list ap;
	va_start(ap, fmt);
	attach(d, add(d, DIAG_NOTE, loc, fmt, ap));
	va_end(ap);
}

static void hint(struct diag_ctx *d, const char *option, const char *fmt, va_list ap)
{
	if (over_limit(d))
		return;
	struct diag *h = add(d, DIAG_HINT, loc_none(), fmt, ap);
	h->context = option;
	attach(d, h);
}

void diag_hint(struct diag_ctx *d, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	hint(d, NULL, fmt, ap);
	va_end(ap);
}

void diag_hint_context(struct diag_ctx *d, const char *option, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	hint(d, option, fmt, ap);
	va_end(ap);
}

static const char *level_name[] = { "error", "note", "hint" };
static const char *level_color[] = { "\033[1;31m", "\033[1;36m", "\033[1;32m" };

/* The byte offset of character column col (1-based) in s[0..n). */
static size_t col_offset(const char *s, size_t n, int col)
{
	size_t i = 0;
	for (int c = 1; i < n; i++) {
		if (((unsigned char)s[i] & 0xc0) == 0x80)
			continue;
		if (c++ == col)
			break;
	}
	return i;
}

/* The source line of loc, then a caret under its first column and '~' under
 * the rest of the range on that line. Columns count UTF-8 characters; tabs
 * in the source are copied into the caret line so the caret lines up
 * whatever the tab width. A line longer than SNIPPET_WIDTH characters (a
 * minified JSON file is one line) shows that many around the column,
 * with "..." where it is cut. */
enum { SNIPPET_WIDTH = 120, SNIPPET_BEFORE = 40 };

static void print_snippet(const struct diag_ctx *d, FILE *out, dtpc_loc loc)
{
	if (loc.file < 0 || loc.file >= d->nfiles || loc.line < 1)
		return;
	const struct src_file *f = &d->files[loc.file];
	if (loc.line > f->nlines)
		return;
	const char *s = f->text + f->line_start[loc.line - 1];
	const char *e = f->text + f->len;
	size_t n = 0;
	int chars = 0;
	while (s + n < e && s[n] != '\n' && s[n] != '\r')
		chars += ((unsigned char)s[n++] & 0xc0) != 0x80;
	int c0 = loc.col < 1 ? 1 : loc.col;
	int c1 = loc.end_line == loc.line && loc.end_col >= c0 ? loc.end_col : c0;
	int first = 1, last = chars;
	if (chars > SNIPPET_WIDTH) {
		first = c0 > SNIPPET_BEFORE ? c0 - SNIPPET_BEFORE : 1;
		last = first + SNIPPET_WIDTH - 1;
		if (last > chars) {
			last = chars;
			first = chars - SNIPPET_WIDTH + 1;
		}
	}
	size_t b0 = col_offset(s, n, first), b1 = col_offset(s, n, last + 1);
	const char *cut = first > 1 ? "..." : "";
	fprintf(out, "%5d | %s%.*s%s\n", loc.line, cut, (int)(b1 - b0), s + b0,
		last < chars ? "..." : "");
	fprintf(out, "      | %s", first > 1 ? "   " : "");
	int col = first;
	for (size_t i = b0; i < b1 && col < c0; i++) {
		if (((unsigned char)s[i] & 0xc0) == 0x80)
			continue;
		fputc(s[i] == '\t' ? '\t' : ' ', out);
		col++;
	}
	fputc('^', out);
	for (int i = col + 1; i <= c1 && i <= last; i++)
		fputc('~', out);
	fputc('\n', out);
}

static void print_one(const struct diag_ctx *d, FILE *out, const struct diag *g,
		      bool color)
{
	const char *bold = color ? "\033[1m" : "", *reset = color ? "\033[0m" : "";
	const char *lc = color ? level_color[g->level] : "";
	if (g->level == DIAG_HINT) {
		fprintf(out, "%shint:%s %s\n", lc, reset, g->msg);
		return;
	}
	if (g->loc.file >= 0)
		fprintf(out, "%s%s:%d:%d:%s ", bold, d->files[g->loc.file].path,
			g->loc.line, g->loc.col, reset);
	fprintf(out, "%s%s:%s %s\n", lc, level_name[g->level], reset, g->msg);
	print_snippet(d, out, g->loc);
}

void diag_print_text(const struct diag_ctx *d, FILE *out, bool color)
{
	for (const struct diag *g = d->head; g; g = g->next) {
		print_one(d, out, g, color);
		for (const struct diag *c = g->children; c; c = c->next)
			print_one(d, out, c, color);
	}
	if (d->max_errors && d->nerrors > d->max_errors)
		fprintf(out, "dtpc: %d more errors not shown\n",
			d->nerrors - d->max_errors);
}

void diag_drop_remarks(struct diag_ctx *d)
{
	struct diag **link = &d->head;
	d->tail = NULL;
	while (*link) {
		if ((*link)->level == DIAG_NOTE) {
			*link = (*link)->next;
			continue;
		}
		d->tail = *link;
		link = &(*link)->next;
	}
}

void diag_name_remarks(struct diag_ctx *d, struct diag *from, const char *plan)
{
	for (struct diag *g = from ? from->next : d->head; g; g = g->next)
		if (g->level == DIAG_NOTE)
			g->msg = arena_printf(d->arena, "in plan %s: %s", plan, g->msg);
}

/* 2^53: every integer up to it is exact in a double */
#define EXACT_IN_DOUBLE (INT64_C(1) << 53)

cJSON *json_int(int64_t v)
{
	if (v >= -EXACT_IN_DOUBLE && v <= EXACT_IN_DOUBLE)
		return cJSON_CreateNumber((double)v);
	char buf[24];
	snprintf(buf, sizeof buf, "%" PRId64, v);
	return cJSON_CreateRaw(buf);
}

cJSON *json_uint(uint64_t v)
{
	if (v <= (uint64_t)EXACT_IN_DOUBLE)
		return cJSON_CreateNumber((double)v);
	char buf[24];
	snprintf(buf, sizeof buf, "%" PRIu64, v);
	return cJSON_CreateRaw(buf);
}

const char *json_int_text(const cJSON *n, char buf[24])
{
	if (cJSON_IsRaw(n))
		return n->valuestring;
	snprintf(buf, 24, "%.0f", cJSON_IsNumber(n) ? n->valuedouble : 0);
	return buf;
}

int utf8_len(const unsigned char *p, const unsigned char *end)
{
	unsigned c = p[0];
	int n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
		: c >= 0xf0 && c <= 0xf4 ? 4 : 0;
	if (!n || end - p < n)
		return 0;
	for (int i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) ||
	    (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f))
		return 0;
	return n;
}

bool utf8_repair(char *s)
{
	bool bad = false;
	const unsigned char *end = (const unsigned char *)s + strlen(s);
	for (unsigned char *u = (unsigned char *)s; *u;) {
		int n = utf8_len(u, end);
		if (n) {
			u += n;
			continue;
		}
		bad = true;
		*u++ = '?';
	}
	return bad;
}

/* A file name or a message (which may quote one) as a JSON string: bytes
 * that are not UTF-8 (a file name is any bytes) become '?' there. */
static cJSON *json_text(const char *s)
{
	char *copy = strdup(s);
	if (!copy)
		return cJSON_CreateString(s);
	utf8_repair(copy);
	cJSON *j = cJSON_CreateString(copy);
	free(copy);
	return j;
}

static cJSON *json_one(const struct diag_ctx *d, const struct diag *g)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "severity", level_name[g->level]);
	if (g->loc.file >= 0) {
		cJSON_AddItemToObject(o, "file", json_text(d->files[g->loc.file].path));
		cJSON_AddNumberToObject(o, "line", g->loc.line);
		cJSON_AddNumberToObject(o, "column", g->loc.col);
		cJSON_AddNumberToObject(o, "end_line", g->loc.end_line);
		cJSON_AddNumberToObject(o, "end_column", g->loc.end_col);
	}
	cJSON_AddItemToObject(o, "message", json_text(g->msg));
	if (g->children) {
		cJSON *notes = cJSON_AddArrayToObject(o, "notes");
		for (const struct diag *c = g->children; c; c = c->next)
			cJSON_AddItemToArray(notes, json_one(d, c));
	}
	return o;
}

void diag_print_json(const struct diag_ctx *d, FILE *out, struct cJSON *extra)
{
	diag_print_json_as(d, out, "summary", extra);
}

void diag_print_json_as(const struct diag_ctx *d, FILE *out, const char *key,
			struct cJSON *extra)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(root, "diagnostics");
	for (const struct diag *g = d->head; g; g = g->next)
		cJSON_AddItemToArray(arr, json_one(d, g));
	cJSON_AddNumberToObject(root, "errors", d->nerrors);
	if (extra)
		cJSON_AddItemToObject(root, key, extra);
	char *s = cJSON_Print(root);
	if (s) {
		fputs(s, out);
		fputc('\n', out);
		cJSON_free(s);
	}
	cJSON_Delete(root);
}

int diag_usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "dtpc: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n(try 'dtpc --help')\n");
	va_end(ap);
	return 2;
}

void diag_claim_at(const char *origin, struct diag_ctx *d, struct diag *mark)
{
	for (struct diag *g = mark ? mark->next : d->head; g; g = g->next)
		g->origin = origin;
}
