/* error.c — the calling thread's error record (error.h). */
#include "graph/error.h"

#include <stdio.h>
#include <string.h>

static _Thread_local struct g_error own = { .rank = -1 };

static struct g_error *own_record(void)
{
	return &own;
}

/* own_record, unless g_error_share pointed it at another library's */
static struct g_error *(*record)(void) = own_record;

struct g_error *g_error_record(void)
{
	return record();
}

void g_error_share(struct g_error *(*r)(void))
{
	record = r;
}

const struct g_error *g_error(void)
{
	return record();
}

int g_vraise(int st, int rank, const char *fmt, va_list ap)
{
	struct g_error *e = record();
	e->status = st;
	e->rank = rank;
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	return st;
}

int g_raise(int st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	g_vraise(st, -1, fmt, ap);
	va_end(ap);
	return st;
}

int g_raise_rank(int st, int rank, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	g_vraise(st, rank, fmt, ap);
	va_end(ap);
	return st;
}

int g_wrap(int st, int rank, const char *fmt, ...)
{
	struct g_error *e = record();
	char below[sizeof e->msg];
	memcpy(below, e->msg, sizeof below);
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof e->msg)
		snprintf(e->msg + n, sizeof e->msg - (size_t)n, ": %s", below);
	e->status = st;
	if (rank >= 0)
		e->rank = rank;
	return st;
}

int g_reraise(int st, int rank)
{
	struct g_error *e = record();
	e->status = st;
	if (rank >= 0)
		e->rank = rank;
	return st;
}
