/* args.c — one loop for every command's options (args.h). */
#include "args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/arena.h"
#include "compiler/config.h"
#include "compiler/diag.h"
#include "compiler/plan.h"

/* "a, b or c" */
static void word_list(const char *const *w, char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = 0;
	for (int i = 0; w[i] && at < len; i++) {
		const char *sep = i == 0 ? "" : w[i + 1] ? ", " : " or ";
		int n = snprintf(buf + at, len - at, "%s%s", sep, w[i]);
		at += n > 0 ? (size_t)n : 0;
	}
}

/* One option's value into its destination; -1 when taken. */
static int take(const struct cli_opt *a, const char *v)
{
	char *end = NULL;
	errno = 0;
	switch (a->kind) {
	case CLI_STR:
		*(const char **)a->dst = v;
		return -1;
	case CLI_INT:
	case CLI_I64: {
		long long n = strtoll(v, &end, 10);
		if (!*v || *end || errno || (double)n < a->lo || (double)n > a->hi)
			break;
		if (a->kind == CLI_INT)
			*(int *)a->dst = (int)n;
		else
			*(int64_t *)a->dst = n;
		return -1;
	}
	case CLI_U64: {
		unsigned long long n = strtoull(v, &end, 10);
		if (!*v || v[strspn(v, "0123456789")] || errno)
			break;
		*(uint64_t *)a->dst = n;
		return -1;
	}
	case CLI_REAL: {
		double x = strtod(v, &end);
		if (!*v || *end || !(x >= a->lo && x <= a->hi))
			break;
		*(double *)a->dst = x;
		return -1;
	}
	case CLI_WORD: {
		for (int i = 0; a->words[i]; i++)
			if (!strcmp(v, a->words[i])) {
				*(int *)a->dst = i;
				return -1;
			}
		char list[256];
		word_list(a->words, list, sizeof list);
		return diag_usage_error("%s is %s, not '%s'", a->name, list, v);
	}
	case CLI_CALL: {
		int rc = a->call(a->ctx, a->name, v);
		return rc ? rc : -1;
	}
	case CLI_END:
	case CLI_SET:
	case CLI_CLEAR:
		break;
	}
	return diag_usage_error("%s needs %s, not '%s'", a->name, a->need, v);
}

int cli_parse(int argc, char **argv, int first, const struct cli_opt *t,
	       const struct cli_rest *rest)
{
	for (int i = first; i < argc; i++) {
		const char *s = argv[i];
		if (s[0] != '-' || !s[1]) {
			if (rest->files) {
				rest->files[(*rest->nfiles)++] = s;
			} else if (*rest->file) {
				return diag_usage_error("one %s at a time ('%s')", rest->what, s);
			} else {
				*rest->file = s;
			}
			continue;
		}
		if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
			rest->help();
			return 0;
		}
		const struct cli_opt *a = t;
		const char *v = NULL;
		for (; a->kind != CLI_END; a++) {
			size_t n = strlen(a->name);
			if (!strncmp(s, a->name, n) && (!s[n] || a->attached)) {
				v = s[n] ? s + n : NULL;
				break;
			}
		}
		if (a->kind == CLI_END)
			return diag_usage_error("unknown option '%s'", s);
		if (a->kind == CLI_SET || a->kind == CLI_CLEAR) {
			*(bool *)a->dst = a->kind == CLI_SET;
			continue;
		}
		if (!v && !(v = i + 1 < argc ? argv[++i] : NULL))
			return diag_usage_error("option '%s' needs a value", s);
		int rc = take(a, v);
		if (rc >= 0)
			return rc;
	}
	if (rest->missing && !*rest->file)
		return diag_usage_error("%s", rest->missing);
	return -1;
}

/* --mesh and --context each give the body of one statement of their own
 * kind. A ';' or a brace outside strings and comments would end it and
 * smuggle in others: a mesh through --context, or rules that would be
 * dropped unread. */
static bool one_statement(const char *text)
{
	for (const char *p = text; *p; p++) {
		if (*p == '"') {
			/* a string ends at its quote or, unterminated, at the line */
			for (p++; *p && *p != '"' && *p != '\n'; p++)
				p += *p == '\\' && p[1];
		} else if (*p == '#') {
			p += strcspn(p, "\n");
		} else if (strchr(";{}", *p)) {
			return false;
		}
		if (!*p)
			break;
	}
	return true;
}

int cli_opt_mesh(void *ctx, const char *name, const char *v)
{
	struct cli_plan_opts *p = ctx;
	(void)name;
	p->co->mesh = v;
	return one_statement(v) ? 0
				: diag_usage_error("--mesh takes the axes of one mesh statement, such "
						   "as --mesh \"ring = 2, tp = 2\", not '%s'", v);
}

int cli_opt_context(void *ctx, const char *name, const char *v)
{
	struct cli_plan_opts *p = ctx;
	(void)name;
	p->co->context = v;
	return one_statement(v) ? 0
				: diag_usage_error("--context takes the options of one context "
						   "statement, such as --context 'rotate_method = "
						   "\"alltoall\"', not '%s'", v);
}

int cli_opt_config(void *ctx, const char *name, const char *v)
{
	struct cli_plan_opts *p = ctx;
	(void)name;
	p->co->config = config_path(p->a, v, stderr);
	return p->co->config ? 0 : 2; /* unreadable, as a plan file */
}

int cli_opt_define(void *ctx, const char *name, const char *v)
{
	struct cli_plan_opts *p = ctx;
	(void)name;
	const char *eq = strchr(v, '=');
	if (!eq || eq == v)
		return diag_usage_error("-D needs NAME=VALUE, not '%s'", v);
	struct override *d = &p->co->defines[p->co->ndefines++];
	d->name = arena_strndup(p->a, v, (size_t)(eq - v));
	d->val = value_from_cli(p->a, eq + 1);
	d->from_cli = true;
	return 0;
}

int cli_opt_expose(void *ctx, const char *name, const char *v)
{
	struct cli_plan_opts *p = ctx;
	(void)name;
	p->co->expose[p->co->nexpose++] = v;
	return 0;
}
