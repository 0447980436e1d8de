/* args.c — one loop for every command's options (args.h). */
#include "args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/diag.h"

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
