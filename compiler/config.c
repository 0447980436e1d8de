/* config.c — reads a diffusers config.json into model parameter overrides.
 *
 * A small JSON reader of its own rather than cJSON: every diagnostic needs
 * the line and column of what it is about (a key, a value, a stray byte),
 * which cJSON does not keep. It reads RFC 8259 JSON and refuses what
 * diffusers' own json.loads would read differently or what no parameter can
 * hold: NaN and Infinity, integers beyond 64 bits, numbers beyond a double,
 * NUL characters, duplicate keys (json.loads keeps the last one silently),
 * invalid UTF-8 and a byte-order mark. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arena.h"
#include "diag.h"
#include "ir.h"
#include "parse.h"
#include "strmap.h"

struct reader {
	struct arena *a;
	struct diag_ctx *d;
	int file;
	const char *p, *end;
	int line, col;
	bool failed;
};

/* One JSON value as a parameter value: what struct value holds, or why no
 * parameter can take it. */
struct jvalue {
	struct value v;
	const char *unfit;
};

static dtpc_loc here(const struct reader *r)
{
	return (dtpc_loc){ .file = r->file, .line = r->line, .col = r->col,
			   .end_line = r->line, .end_col = r->col };
}

/* Consumes one byte; columns count characters (a UTF-8 continuation byte
 * adds none), as the plan scanner and the caret printer do. */
static void advance(struct reader *r)
{
	unsigned char c = (unsigned char)*r->p++;
	if (c == '\n') {
		r->line++;
		r->col = 1;
	} else if ((c & 0xc0) != 0x80) {
		r->col++;
	}
}

/* The first error only: what follows a syntax error says nothing. */
static bool fail(struct reader *r, dtpc_loc loc, const char *msg)
{
	if (!r->failed)
		diag_error(r->d, loc, "%s", msg);
	r->failed = true;
	return false;
}

static void skip_space(struct reader *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\r' || *r->p == '\n'))
		advance(r);
}

/* What the reader stands on, for "expected X, not Y". */
static const char *found(struct reader *r)
{
	if (r->p >= r->end)
		return "the end of the file";
	unsigned char c = (unsigned char)*r->p;
	if (c >= 0x21 && c < 0x7f)
		return arena_printf(r->a, "'%c'", c);
	return arena_printf(r->a, "byte 0x%02x", c);
}

static int hex4(const char *p)
{
	int v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

static size_t put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* A string at the opening quote; *loc gets its range, quotes included. The
 * decoded text is at most as long as the escaped one. */
static const char *read_string(struct reader *r, dtpc_loc *loc)
{
	*loc = here(r);
	advance(r);
	const char *start = r->p;
	while (r->p < r->end && *r->p != '"')
		r->p += *r->p == '\\' && r->p + 1 < r->end ? 2 : 1;
	char *out = arena_alloc(r->a, (size_t)(r->p - start) + 1), *o = out;
	r->p = start;
	for (;;) {
		if (r->p >= r->end)
			return fail(r, *loc, "unterminated string"), NULL;
		unsigned char c = (unsigned char)*r->p;
		if (c == '"')
			break;
		if (c < 0x20)
			return fail(r, here(r), "a control character in a string "
				    "(write it as an escape such as \\n)"), NULL;
		if (c == '\\') {
			dtpc_loc at = here(r);
			advance(r);
			char e = r->p < r->end ? *r->p : 0;
			const char *simple = strchr("\"\\/bfnrt", e);
			if (e && simple) {
				*o++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
				advance(r);
				continue;
			}
			int cp = e == 'u' && r->end - r->p >= 5 ? hex4(r->p + 1) : -1;
			if (cp < 0)
				return fail(r, at, "invalid escape in a string (JSON has \\\" \\\\ "
					    "\\/ \\b \\f \\n \\r \\t and \\uXXXX)"), NULL;
			for (int i = 0; i < 5; i++)
				advance(r);
			if (cp >= 0xd800 && cp <= 0xdbff) {
				int lo = r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u'
					 ? hex4(r->p + 2) : -1;
				if (lo < 0xdc00 || lo > 0xdfff)
					return fail(r, at, "a \\u escape of a high surrogate without "
						    "its low surrogate"), NULL;
				for (int i = 0; i < 6; i++)
					advance(r);
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			} else if (cp >= 0xdc00 && cp <= 0xdfff) {
				return fail(r, at, "a \\u escape of a low surrogate alone"), NULL;
			}
			if (cp == 0)
				return fail(r, at, "a NUL character (\\u0000) in a string"), NULL;
			o += put_utf8(o, (unsigned)cp);
			continue;
		}
		int n = utf8_len((const unsigned char *)r->p, (const unsigned char *)r->end);
		if (!n)
			return fail(r, here(r), arena_printf(r->a, "byte 0x%02x is not UTF-8 (a config.json "
								       "is UTF-8 text)", c)), NULL;
		for (int i = 0; i < n; i++) {
			*o++ = *r->p;
			advance(r);
		}
	}
	loc->end_line = r->line;
	loc->end_col = r->col;
	advance(r);
	*o = 0;
	return out;
}

/* A number as JSON writes it: an integer without fraction or exponent (as
 * json.loads makes an int), else a number; beyond int64 or a double's
 * range, an error. */
static bool read_number(struct reader *r, struct jvalue *out)
{
	dtpc_loc loc = here(r);
	const char *s = r->p;
	bool integer = true;
	if (*r->p == '-')
		advance(r);
	if (r->p < r->end && *r->p == '0') {
		advance(r);
	} else if (r->p < r->end && *r->p >= '1' && *r->p <= '9') {
		while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
			advance(r);
	} else {
		return fail(r, loc, "a number needs a digit after '-'");
	}
	if (r->p < r->end && *r->p == '.') {
		integer = false;
		advance(r);
		if (r->p >= r->end || *r->p < '0' || *r->p > '9')
			return fail(r, here(r), "a number needs digits after its '.'");
		while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
			advance(r);
	}
	if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
		integer = false;
		advance(r);
		if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
			advance(r);
		if (r->p >= r->end || *r->p < '0' || *r->p > '9')
			return fail(r, here(r), "a number needs digits in its exponent");
		while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
			advance(r);
	}
	loc.end_col = r->col - 1;
	const char *text = arena_strndup(r->a, s, (size_t)(r->p - s));
	out->v.loc = loc;
	errno = 0;
	if (integer) {
		long long i = strtoll(text, NULL, 10);
		if (errno == ERANGE)
			return fail(r, loc, arena_printf(r->a, "integer %s is out of range (a parameter "
							    "holds 64-bit integers)", text));
		out->v.kind = VAL_INT;
		out->v.i = i;
		return true;
	}
	double f = strtod(text, NULL);
	if (!isfinite(f))
		return fail(r, loc, arena_printf(r->a, "number %s is out of range (beyond a "
						    "double)", text));
	out->v.kind = VAL_FLOAT;
	out->v.f = f;
	return true;
}

static bool read_value(struct reader *r, struct jvalue *out, int depth);

/* An object at its '{'. members (NULL for nested objects, which no
 * parameter takes and are only checked): each key and value in order. */
static bool read_object(struct reader *r, int depth, struct override **members, int *n)
{
	dtpc_loc open = here(r);
	advance(r);
	struct strmap *keys = strmap_create(r->a, 16);
	dtpc_loc *key_loc = NULL;
	int cap = 0, count = 0;
	skip_space(r);
	if (r->p < r->end && *r->p == '}') {
		advance(r);
		return true;
	}
	for (;;) {
		skip_space(r);
		if (r->p >= r->end)
			return fail(r, open, "unclosed '{'");
		if (*r->p != '"')
			return fail(r, here(r), arena_printf(r->a, "expected a key (a string in "
							     "double quotes), not %s", found(r)));
		dtpc_loc kl;
		const char *key = read_string(r, &kl);
		if (!key)
			return false;
		for (const char *k = key; *k; k++)
			if ((unsigned char)*k < 0x20 || *k == 0x7f)
				return fail(r, kl, "a key with a control character (no parameter "
					    "has one)");
		int prev = strmap_get(keys, key);
		if (prev >= 0) {
			fail(r, kl, arena_printf(r->a, "duplicate key '%s'", key));
			diag_note(r->d, key_loc[prev], "first given here");
			return false;
		}
		if (count == cap) {
			cap = cap ? 2 * cap : 16;
			dtpc_loc *g = ARENA_ARRAY(r->a, dtpc_loc, cap);
			if (count)
				memcpy(g, key_loc, sizeof *g * (size_t)count);
			key_loc = g;
			if (members) {
				struct override *m = ARENA_ARRAY(r->a, struct override, cap);
				if (count)
					memcpy(m, *members, sizeof *m * (size_t)count);
				*members = m;
			}
		}
		key_loc[count] = kl;
		strmap_put(keys, key, count);
		skip_space(r);
		if (r->p >= r->end || *r->p != ':')
			return fail(r, here(r), arena_printf(r->a, "expected ':' after the key, not %s",
							     found(r)));
		advance(r);
		struct jvalue v = { .v.loc = here(r) };
		if (!read_value(r, &v, depth + 1))
			return false;
		if (members) {
			v.v.loc = kl; /* what a diagnostic about the parameter points at */
			(*members)[count] = (struct override){ .name = key, .val = v.v,
								.from_config = true,
								.unfit = v.unfit };
		}
		count++;
		skip_space(r);
		if (r->p < r->end && *r->p == ',') {
			advance(r);
			continue;
		}
		if (r->p < r->end && *r->p == '}') {
			advance(r);
			break;
		}
		if (r->p >= r->end)
			return fail(r, open, "unclosed '{'");
		return fail(r, here(r), arena_printf(r->a, "expected ',' or '}' after a value, "
						     "not %s", found(r)));
	}
	if (n)
		*n = count;
	return true;
}

/* An array at its '['. A list of scalars is a list value; one that holds
 * lists, objects or nulls is unfit (no parameter is a nested list). */
static bool read_array(struct reader *r, struct jvalue *out, int depth)
{
	dtpc_loc open = here(r);
	advance(r);
	struct value *items = NULL;
	int n = 0, cap = 0;
	skip_space(r);
	if (r->p < r->end && *r->p == ']') {
		advance(r);
		out->v = (struct value){ .kind = VAL_LIST, .items = NULL, .n = 0, .loc = open };
		return true;
	}
	for (;;) {
		struct jvalue item = { .v.loc = here(r) };
		if (!read_value(r, &item, depth + 1))
			return false;
		if (item.unfit || item.v.kind == VAL_LIST)
			out->unfit = "a list of lists";
		else if (item.v.kind == VAL_NULL)
			out->unfit = "a list holding null";
		if (n == cap) {
			cap = cap ? 2 * cap : 8;
			struct value *g = ARENA_ARRAY(r->a, struct value, cap);
			if (n)
				memcpy(g, items, sizeof *g * (size_t)n);
			items = g;
		}
		items[n++] = item.v;
		skip_space(r);
		if (r->p < r->end && *r->p == ',') {
			advance(r);
			skip_space(r);
			continue;
		}
		if (r->p < r->end && *r->p == ']') {
			advance(r);
			break;
		}
		if (r->p >= r->end)
			return fail(r, open, "unclosed '['");
		return fail(r, here(r), arena_printf(r->a, "expected ',' or ']' after a list "
						     "item, not %s", found(r)));
	}
	out->v = (struct value){ .kind = VAL_LIST, .items = items, .n = n, .loc = open };
	return true;
}

static bool word(struct reader *r, const char *w)
{
	size_t n = strlen(w);
	if ((size_t)(r->end - r->p) < n || memcmp(r->p, w, n))
		return false;
	for (size_t i = 0; i < n; i++)
		advance(r);
	return true;
}

static bool read_value(struct reader *r, struct jvalue *out, int depth)
{
	skip_space(r);
	if (depth > CONFIG_MAX_DEPTH)
		return fail(r, here(r), arena_printf(r->a, "values nest deeper than %d",
						     CONFIG_MAX_DEPTH));
	out->v.loc = here(r);
	if (r->p >= r->end)
		return fail(r, here(r), arena_printf(r->a, "expected a value, not %s", found(r)));
	char c = *r->p;
	if (c == '{') {
		out->unfit = "an object";
		return read_object(r, depth, NULL, NULL);
	}
	if (c == '[')
		return read_array(r, out, depth);
	if (c == '"') {
		dtpc_loc l;
		const char *s = read_string(r, &l);
		out->v = (struct value){ .kind = VAL_STR, .s = s, .loc = l };
		return s != NULL;
	}
	if (word(r, "NaN") || word(r, "Infinity") || word(r, "-Infinity"))
		return fail(r, out->v.loc, "NaN and Infinity are not JSON, and no parameter "
			    "takes them");
	if (c == '-' || (c >= '0' && c <= '9'))
		return read_number(r, out);
	if (word(r, "true") || word(r, "false")) {
		out->v.kind = VAL_BOOL;
		out->v.i = c == 't';
		return true;
	}
	if (word(r, "null")) {
		/* diffusers' None, passed as given: from_config hands the class
		 * None, which differs from an absent key where the default is
		 * not None (Wan's out_channels = 16; None means in_channels) */
		out->v.kind = VAL_NULL;
		return true;
	}
	return fail(r, here(r), arena_printf(r->a, "expected a value (a number, string, true, false, null, list "
		    "or object), not %s", found(r)));
}

bool config_parse(struct arena *a, struct diag_ctx *d, const char *name, const char *text,
		  size_t len, struct override **ov, int *n)
{
	struct reader r = { .a = a, .d = d, .file = diag_add_file(d, name, text, len),
			    .p = text, .end = text + len, .line = 1, .col = 1 };
	struct override *members = NULL;
	int count = 0;
	*ov = NULL;
	*n = 0;
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
		return fail(&r, here(&r), "a byte-order mark (diffusers' json.loads refuses "
			    "it too): save the file as UTF-8 without one");
	skip_space(&r);
	if (r.p >= r.end || *r.p != '{')
		return fail(&r, here(&r), arena_printf(a, "a config.json holds one JSON object "
						       "({\"key\": value, ...}), not %s", found(&r)));
	if (!read_object(&r, 0, &members, &count))
		return false;
	skip_space(&r);
	if (r.p < r.end)
		return fail(&r, here(&r), arena_printf(a, "%s after the object: a config.json "
						       "holds one object", found(&r)));
	/* _class_name, _diffusers_version, _name_or_path: about the file, not
	 * arguments of the model */
	int k = 0;
	for (int i = 0; i < count; i++)
		if (members[i].name[0] != '_')
			members[k++] = members[i];
	*ov = members;
	*n = k;
	return true;
}

const char *config_path(struct arena *a, const char *given, FILE *err)
{
	struct stat st;
	const char *path = given;
	if (!stat(given, &st) && S_ISDIR(st.st_mode))
		path = arena_printf(a, "%s%sconfig.json", given,
				    given[strlen(given) - 1] == '/' ? "" : "/");
	const char *why = stat(path, &st) ? strerror(errno)
		: !S_ISREG(st.st_mode) ? "not a regular file"
		: st.st_size > CONFIG_MAX_BYTES ? "larger than 1 MiB (a config.json is a few kilobytes)"
		: NULL;
	if (why) {
		fprintf(err, "dtpc: cannot read '%s': %s\n", path, why);
		return NULL;
	}
	return path;
}

int config_overrides(struct arena *a, struct diag_ctx *d, const char *path,
		     const struct override *defs, int n, struct override **out, int *nout,
		     FILE *err)
{
	struct override *cfg = NULL;
	int ncfg = 0;
	if (path) {
		size_t len = 0;
		const char *why = NULL;
		char *text = read_source(a, path, false, &len, &why);
		if (text && len > CONFIG_MAX_BYTES)
			why = "larger than 1 MiB (a config.json is a few kilobytes)";
		if (!text || why) {
			fprintf(err, "dtpc: cannot read '%s': %s\n", path, why);
			return 2;
		}
		if (!config_parse(a, d, path, text, len, &cfg, &ncfg))
			return 1;
	}
	*out = ARENA_ARRAY(a, struct override, ncfg + n + 1);
	if (ncfg)
		memcpy(*out, cfg, sizeof *cfg * (size_t)ncfg);
	if (n)
		memcpy(*out + ncfg, defs, sizeof *defs * (size_t)n);
	*nout = ncfg + n;
	return 0;
}

int config_check(const char *path, FILE *err)
{
	struct arena *a = arena_create();
	struct diag_ctx d;
	diag_init(&d, a);
	struct override *ov;
	int n;
	int rc = config_overrides(a, &d, path, NULL, 0, &ov, &n, err);
	diag_print_text(&d, err, false);
	diag_release(&d);
	arena_free(a);
	return rc;
}
