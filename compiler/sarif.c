/* sarif.c — `dtpc check --format sarif`: the diagnostics as a SARIF 2.1.0
 * log, the format code-scanning services (GitHub, GitLab, Azure DevOps)
 * read to show errors inline on a change.
 *
 * dtpc's diagnostics carry no codes; what groups them is the pass that
 * reports them (diag_error records its source file), which is also how
 * docs/language.md lists the checks. So a SARIF rule is a family of checks:
 * syntax, imports, declarations, expressions, model, plan, layout, lowering. */
#include <cjson/cJSON.h>
#include <string.h>

#include "diag.h"
#include "graph/version.h"

struct rule {
	const char *id;
	const char *sources; /* compiler files reporting it, space-separated */
	const char *summary;
	const char *detail;
};

static const struct rule rules[] = {
	{ "syntax", "plan.l plan.y lex.yy.c plan.tab.c", "The plan text does not scan or parse",
	  "Unexpected tokens, a missing ';', an unclosed '{', '=' for ':' in a rule, a keyword "
	  "used as a name, unterminated strings, stray characters, integers too large." },
	{ "import", "parse.c", "An import cannot be read or forms a cycle",
	  "An imported file is missing or unreadable, or files import each other." },
	{ "declaration", "driver.c", "A model or plan is declared twice",
	  "Models and plans are declared once across the file and its imports." },
	{ "expression", "expr.c", "An expression does not evaluate",
	  "Unknown names, division by zero, integer overflow, operands of the wrong kind, "
	  "nesting deeper than 256." },
	{ "model", "model.c", "The model does not instantiate",
	  "Unknown ops, tensors and parameters; argument kinds; missing, extra and repeated "
	  "arguments; each op's shape rule; a model past 2^48 elements." },
	{ "plan", "plan.c fold.c", "The plan does not fit its model and mesh",
	  "Mesh sizes and names, context options, tensor-parallel divisibility, Ulysses head "
	  "counts, splits, rules (globs matching nothing, conflicting or misplaced styles); "
	  "as a note, an axis no style splits over." },
	{ "layout", "layout.c", "Sharded tensors meet where the plan does not say how",
	  "An attention given sequence-sharded keys without a context style, a context-parallel "
	  "attention whose inputs are not split along the sequence, a gather of an unsplit "
	  "output; as a note, each collective the compiler inserts on its own." },
	{ "lowering", "lower.c", "The plan cannot be lowered to a graph",
	  "Limits of the graph format, layouts the lowering cannot express." },
	{ "config", "config.c", "The --config file is not JSON a parameter can hold",
	  "Syntax errors, duplicate keys, NaN and Infinity, numbers out of range, invalid UTF-8, "
	  "a byte-order mark, nesting deeper than 32 (a key's wrong kind is a model error)." },
};
#define NRULES (int)(sizeof rules / sizeof rules[0])

/* The rule of the family whose source file reported g (by file name, so the
 * build folder and the #line paths of generated code do not matter). */
static int rule_of(const struct diag *g)
{
	const char *f = g->origin ? g->origin : "";
	const char *slash = strrchr(f, '/');
	f = slash ? slash + 1 : f;
	size_t n = strlen(f);
	for (int i = 0; n && i < NRULES; i++)
		for (const char *s = rules[i].sources; (s = strstr(s, f)); s += n)
			if ((s == rules[i].sources || s[-1] == ' ') && (s[n] == ' ' || !s[n]))
				return i;
	return -1;
}

static cJSON *text_obj(const char *text)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "text", text);
	return o;
}

/* A path as a URI reference (RFC 3986): relative paths stay relative, which
 * code scanning resolves against the checkout; absolute ones become file://
 * URIs. Bytes outside the unreserved set and '/' are percent-encoded. */
static char *path_uri(const char *path)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(path);
	char *u = cJSON_malloc(3 * n + 8), *p = u;
	if (path[0] == '/')
		p = stpcpy(p, "file://");
	for (const unsigned char *s = (const unsigned char *)path; *s; s++) {
		if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		    strchr("-._~/", *s)) {
			*p++ = (char)*s;
		} else {
			*p++ = '%';
			*p++ = hex[*s >> 4];
			*p++ = hex[*s & 15];
		}
	}
	*p = 0;
	return u;
}

/* Files registered under a pseudo-name ("<command line>": --mesh, --context,
 * -D) are no artifact a viewer can open. */
static bool real_file(const struct diag_ctx *d, dtpc_loc loc)
{
	return loc.file >= 0 && loc.file < d->nfiles && d->files[loc.file].path[0] != '<';
}

/* SARIF lines and columns are 1-based like dtpc's; columns count Unicode
 * code points (run.columnKind says so), and endColumn is exclusive where
 * dtpc's end is inclusive. */
static cJSON *location(const struct diag_ctx *d, dtpc_loc loc)
{
	cJSON *l = cJSON_CreateObject();
	cJSON *pl = cJSON_AddObjectToObject(l, "physicalLocation");
	cJSON *al = cJSON_AddObjectToObject(pl, "artifactLocation");
	char *uri = path_uri(d->files[loc.file].path);
	cJSON_AddStringToObject(al, "uri", uri);
	cJSON_free(uri);
	if (loc.line < 1)
		return l;
	cJSON *r = cJSON_AddObjectToObject(pl, "region");
	cJSON_AddNumberToObject(r, "startLine", loc.line);
	if (loc.col > 0)
		cJSON_AddNumberToObject(r, "startColumn", loc.col);
	if (loc.end_line >= loc.line && loc.end_col > 0) {
		cJSON_AddNumberToObject(r, "endLine", loc.end_line);
		cJSON_AddNumberToObject(r, "endColumn", loc.end_col + 1);
	}
	return l;
}

/* "FILE:LINE:COL: " for a location that cannot be a physical one. */
static const char *where(const struct diag_ctx *d, dtpc_loc loc, char *buf, size_t n)
{
	if (loc.file < 0 || loc.file >= d->nfiles)
		return "";
	snprintf(buf, n, "%s:%d:%d: ", d->files[loc.file].path, loc.line, loc.col);
	return buf;
}

/* The message: the diagnostic's own, then each note that has no place of
 * its own in the file and each hint, on lines of their own (related
 * locations carry only the located notes). */
static char *message_text(const struct diag_ctx *d, const struct diag *g)
{
	size_t n = strlen(g->msg) + 300;
	for (const struct diag *c = g->children; c; c = c->next)
		n += strlen(c->msg) + 300;
	char *m = cJSON_malloc(n), buf[256];
	size_t k = (size_t)snprintf(m, n, "%s%s", real_file(d, g->loc) ? "" : where(d, g->loc, buf, sizeof buf),
				    g->msg);
	for (const struct diag *c = g->children; c; c = c->next)
		if (c->level == DIAG_HINT)
			k += (size_t)snprintf(m + k, n - k, "\nhint: %s", c->msg);
		else if (!real_file(d, c->loc))
			k += (size_t)snprintf(m + k, n - k, "\n%snote: %s",
					      where(d, c->loc, buf, sizeof buf), c->msg);
	return m;
}

static cJSON *result(const struct diag_ctx *d, const struct diag *g)
{
	cJSON *r = cJSON_CreateObject();
	int rule = rule_of(g);
	if (rule >= 0) {
		cJSON_AddStringToObject(r, "ruleId", rules[rule].id);
		cJSON_AddNumberToObject(r, "ruleIndex", rule);
	}
	cJSON_AddStringToObject(r, "level", g->level == DIAG_ERROR ? "error" : "note");
	char *m = message_text(d, g);
	cJSON_AddItemToObject(r, "message", text_obj(m));
	cJSON_free(m);
	/* Code scanning refuses a result without a location: one from the
	 * command line (or none) is placed on the checked file as a whole. */
	dtpc_loc at = g->loc;
	if (!real_file(d, at))
		at = (dtpc_loc){ .file = 0 };
	if (real_file(d, at))
		cJSON_AddItemToArray(cJSON_AddArrayToObject(r, "locations"), location(d, at));
	cJSON *rel = NULL;
	int id = 0;
	for (const struct diag *c = g->children; c; c = c->next) {
		if (c->level == DIAG_HINT || !real_file(d, c->loc))
			continue;
		if (!rel)
			rel = cJSON_AddArrayToObject(r, "relatedLocations");
		cJSON *l = location(d, c->loc);
		cJSON_AddNumberToObject(l, "id", id++);
		cJSON_AddItemToObject(l, "message", text_obj(c->msg));
		cJSON_AddItemToArray(rel, l);
	}
	return r;
}

static cJSON *tool(void)
{
	cJSON *t = cJSON_CreateObject();
	cJSON *drv = cJSON_AddObjectToObject(t, "driver");
	cJSON_AddStringToObject(drv, "name", "dtpc");
	cJSON_AddStringToObject(drv, "version", DTPC_VERSION);
	cJSON_AddStringToObject(drv, "semanticVersion", DTPC_VERSION);
	cJSON *rs = cJSON_AddArrayToObject(drv, "rules");
	for (int i = 0; i < NRULES; i++) {
		cJSON *r = cJSON_CreateObject();
		cJSON_AddStringToObject(r, "id", rules[i].id);
		cJSON_AddItemToObject(r, "shortDescription", text_obj(rules[i].summary));
		cJSON_AddItemToObject(r, "fullDescription", text_obj(rules[i].detail));
		cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "defaultConfiguration"), "level",
					"error");
		cJSON_AddItemToArray(rs, r);
	}
	return t;
}

void diag_print_sarif(const struct diag_ctx *d, FILE *out, bool ran)
{
	cJSON *root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "$schema",
				"https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/"
				"sarif-schema-2.1.0.json");
	cJSON_AddStringToObject(root, "version", "2.1.0");
	cJSON *run = cJSON_CreateObject();
	cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "runs"), run);
	cJSON_AddItemToObject(run, "tool", tool());
	cJSON_AddStringToObject(run, "columnKind", "unicodeCodePoints");
	cJSON *inv = cJSON_CreateObject();
	cJSON_AddItemToArray(cJSON_AddArrayToObject(run, "invocations"), inv);
	/* errors in the plan are the check's results, not its failure */
	cJSON_AddBoolToObject(inv, "executionSuccessful", ran);
	if (d->max_errors && d->nerrors > d->max_errors) {
		char buf[64];
		snprintf(buf, sizeof buf, "%d more errors not shown", d->nerrors - d->max_errors);
		cJSON *n = cJSON_CreateObject();
		cJSON_AddStringToObject(n, "level", "warning");
		cJSON_AddItemToObject(n, "message", text_obj(buf));
		cJSON_AddItemToArray(cJSON_AddArrayToObject(inv, "toolExecutionNotifications"), n);
	}
	cJSON *res = cJSON_AddArrayToObject(run, "results");
	for (const struct diag *g = d->head; g; g = g->next)
		cJSON_AddItemToArray(res, result(d, g));
	char *s = cJSON_Print(root);
	if (s) {
		fputs(s, out);
		fputc('\n', out);
		cJSON_free(s);
	}
	cJSON_Delete(root);
}
