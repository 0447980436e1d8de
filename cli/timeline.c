/* timeline.c — dtpc timeline: a trace's spans and counters as SVG.
 *
 * Lanes are the (pid, tid) pairs that hold spans, in that order, named by
 * the trace's process_name and thread_name metadata: a merged trace of
 * dtpc run has a process per rank with a compute and a communication row;
 * a per-rank file of an older dtpc had one row per rank. Coordinates are
 * printed with two decimals, so a trace gives the same bytes every time
 * (tests keep an exact golden). */
#include "timeline.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/driver.h"

enum { LEFT = 200, RIGHT = 20, TOP = 20, LANE = 18, GAP = 4, AXIS = 30, CHART = 40 };

/* Rows of a picture (lanes, counter charts) past which it is no longer
 * readable: also what keeps the work linear in the events, which each row's
 * search for its lane or chart walks. A traced run has two lanes a rank. */
enum { MAX_ROWS = 1024 };

/* Times are µs from the trace's start: not negative, finite, and under
 * 10^15 (30 years), so that sums and the scale stay finite. */
#define MAX_TIME 1e15

struct lane {
	double pid, tid;
	const char *pname, *tname; /* from the first name metadata; NULL if none */
};
struct series {
	double pid;
	const char *name; /* the counter's name, then its first argument's */
	const char *arg;
	const char *pname;
};

static void xml_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '&')
			fputs("&amp;", f);
		else if (*s == '<')
			fputs("&lt;", f);
		else if (*s == '>')
			fputs("&gt;", f);
		else if (*s == '"')
			fputs("&quot;", f);
		else
			fputc(*s, f);
	}
}

static double num(const cJSON *e, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(const cJSON *e, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
	return cJSON_IsString(v) ? v->valuestring : "";
}

/* 1, 2 or 5 times a power of ten: about eight ticks over span µs */
static double tick_step(double span)
{
	double raw = span / 8, p = pow(10, floor(log10(raw)));
	return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
}

static const char *color(const char *cat)
{
	return !strcmp(cat, "communication") ? "#e15759" : !strcmp(cat, "compute") ? "#4e79a7"
										 : "#9c9c9c";
}

/* Draws the picture; the events of row r (lanes, then counter charts) are
 * evs[order[start[r]] .. order[start[r + 1] - 1]], in the trace's order. */
static void draw(FILE *f, const cJSON *const *evs, const int *order, const int *start,
		 const struct lane *lanes, int nlanes, const struct series *ser, int nser,
		 double tmax, int width)
{
	double plot = width - LEFT - RIGHT, scale = plot / tmax;
	int axis_y = TOP + nlanes * (LANE + GAP);
	int height = axis_y + AXIS + nser * (CHART + GAP) + 10;
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"font-family=\"sans-serif\" font-size=\"11\">\n", width, height);
	fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", width, height);
	for (int l = 0; l < nlanes; l++) {
		int y = TOP + l * (LANE + GAP);
		const char *p = lanes[l].pname && *lanes[l].pname ? lanes[l].pname : NULL;
		const char *t = lanes[l].tname && *lanes[l].tname ? lanes[l].tname : NULL;
		fprintf(f, "<g class=\"lane\">\n<text x=\"4\" y=\"%d\">", y + LANE - 5);
		if (p && t) {
			xml_text(f, p);
			fputs(" · ", f);
			xml_text(f, t);
		} else if (p || t) {
			xml_text(f, p ? p : t);
		} else {
			fprintf(f, "pid %g tid %g", lanes[l].pid, lanes[l].tid);
		}
		fputs("</text>\n", f);
		for (int k = start[l]; k < start[l + 1]; k++) {
			const cJSON *e = evs[order[k]];
			double ts = num(e, "ts"), dur = num(e, "dur");
			/* a span under a tenth of a pixel still shows */
			fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\">"
				"<title>", LEFT + ts * scale, y, fmax(dur * scale, 0.1), LANE,
				color(str(e, "cat")));
			xml_text(f, str(e, "name"));
			fprintf(f, " (%.3f ms", dur / 1e3);
			const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "args"), "bytes");
			if (cJSON_IsNumber(b))
				fprintf(f, ", %.0f bytes", b->valuedouble);
			fputs(")</title></rect>\n", f);
		}
		fputs("</g>\n", f);
	}
	/* the time axis: ms when a tick is a millisecond or more */
	double step = tick_step(tmax);
	bool ms = step >= 1000;
	fprintf(f, "<g class=\"axis\">\n<line x1=\"%d\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"black\"/>\n",
		LEFT, axis_y, LEFT + plot, axis_y);
	for (int k = 0; k * step <= tmax * (1 + 1e-9); k++) {
		double x = LEFT + k * step * scale;
		fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"black\"/>"
			"<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%g %s</text>\n",
			x, axis_y, x, axis_y + 4, x, axis_y + 16, ms ? k * step / 1e3 : k * step,
			ms ? "ms" : "µs");
	}
	fputs("</g>\n", f);
	for (int c = 0; c < nser; c++) {
		int y = axis_y + AXIS + c * (CHART + GAP);
		double top = 0;
		const int *first = order + start[nlanes + c], *end = order + start[nlanes + c + 1];
		for (const int *k = first; k < end; k++)
			top = fmax(top, num(cJSON_GetObjectItemCaseSensitive(evs[*k], "args"), ser[c].arg));
		fprintf(f, "<g class=\"counter\">\n<text x=\"4\" y=\"%d\">", y + CHART / 2);
		const char *p = ser[c].pname;
		if (p && *p)
			xml_text(f, p);
		else
			fprintf(f, "pid %g", ser[c].pid);
		fputs(" ", f);
		xml_text(f, ser[c].name);
		fprintf(f, "</text>\n<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f</text>\n", LEFT - 4,
			y + 9, top);
		/* a step line: each value holds until the next */
		fprintf(f, "<polyline fill=\"none\" stroke=\"#59a14f\" points=\"%d,%d", LEFT, y + CHART);
		double last = y + CHART;
		for (const int *k = first; k < end; k++) {
			const cJSON *e = evs[*k];
			double x = LEFT + num(e, "ts") * scale;
			double v = num(cJSON_GetObjectItemCaseSensitive(e, "args"), ser[c].arg);
			double yv = y + CHART - (top > 0 ? v / top * CHART : 0);
			fprintf(f, " %.2f,%.2f %.2f,%.2f", x, last, x, yv);
			last = yv;
		}
		fprintf(f, " %.2f,%.2f\"/>\n</g>\n", LEFT + plot, last);
	}
	fputs("</svg>\n", f);
}

/* The file whole, *len its bytes (a NUL among them ends the JSON early,
 * which cJSON then reports); NULL after saying why. */
static char *slurp(const char *path, size_t *len, FILE *err)
{
	/* a regular file: not a device that never ends, nor a FIFO that waits */
	if (!driver_readable(path, err))
		return NULL;
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(err, "dtpc: cannot read '%s': %s\n", path, strerror(errno));
		return NULL;
	}
	size_t n = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
		n += got;
		if (n + 1 == cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb)
				free(buf);
			buf = nb;
		}
	}
	if (buf && ferror(f)) {
		fprintf(err, "dtpc: cannot read '%s': %s\n", path, strerror(errno));
		free(buf);
		buf = NULL;
	} else if (!buf) {
		fprintf(err, "dtpc: %s: out of memory\n", path);
	} else {
		buf[n] = 0;
		*len = n;
	}
	fclose(f);
	return buf;
}

static int by_lane(const void *a, const void *b)
{
	const struct lane *x = a, *y = b;
	return x->pid != y->pid ? (x->pid > y->pid) - (x->pid < y->pid) : (x->tid > y->tid) - (x->tid < y->tid);
}

/* A number of event i that must be a time (see MAX_TIME); says which if not. */
static bool time_ok(const char *path, int i, const cJSON *e, const char *key, FILE *err)
{
	double t = num(e, key);
	if (t >= 0 && t < MAX_TIME)
		return true;
	fprintf(err, "dtpc: %s: event %d ('%s'): %s %g is not a time from 0 to 1e15 µs\n", path,
		i, str(e, "name"), key, t);
	return false;
}

/* A span's lane among the sorted lanes, or -1. */
static int lane_of(const cJSON *e, const struct lane *lanes, int nlanes)
{
	struct lane l = { num(e, "pid"), num(e, "tid"), NULL, NULL };
	const struct lane *hit = bsearch(&l, lanes, (size_t)nlanes, sizeof *lanes, by_lane);
	return hit ? (int)(hit - lanes) : -1;
}

int timeline_svg(const char *path, const char *out, int width, FILE *err)
{
	size_t len = 0;
	char *text = slurp(path, &len, err);
	if (!text)
		return 2;
	/* cJSON takes a NUL for white space, so one is refused here; with
	 * require_null_terminated it refuses what follows the value, up to the
	 * NUL slurp adds (hence len + 1) */
	const char *nul = memchr(text, 0, len), *end = NULL;
	cJSON *root = nul ? NULL : cJSON_ParseWithLengthOpts(text, len + 1, &end, true);
	if (!root) {
		/* where the JSON ends being JSON, by byte: a trace is one long line */
		const char *at = nul ? nul : cJSON_GetErrorPtr();
		fprintf(err, "dtpc: %s: not JSON (at byte %td of %zu)\n", path,
			at && at >= text && at <= text + len ? at - text : (ptrdiff_t)0, len);
		free(text);
		return 2;
	}
	free(text);
	const cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
	if (!cJSON_IsArray(ev)) {
		fprintf(err, "dtpc: %s: not a Chrome trace (no traceEvents array)\n", path);
		cJSON_Delete(root);
		return 2;
	}
	int n = cJSON_GetArraySize(ev), nlanes = 0, nser = 0, rc = 2, i = 0;
	struct lane *lanes = malloc(sizeof *lanes * MAX_ROWS);
	struct series *ser = malloc(sizeof *ser * MAX_ROWS);
	const cJSON **evs = malloc(sizeof *evs * (n ? n : 1));
	int *row = malloc(sizeof *row * (n ? n : 1)), *order = malloc(sizeof *order * (n ? n : 1));
	int *start = calloc(2 * MAX_ROWS + 2, sizeof *start);
	double tmax = 0;
	const cJSON *e;
	if (!lanes || !ser || !evs || !row || !order || !start) {
		fprintf(err, "dtpc: %s: out of memory\n", path);
		goto done;
	}
	cJSON_ArrayForEach(e, ev)
	{
		const char *ph = str(e, "ph");
		evs[i] = e;
		row[i] = -1;
		if (!strcmp(ph, "X")) {
			if (!time_ok(path, i, e, "ts", err) || !time_ok(path, i, e, "dur", err))
				goto done;
			struct lane l = { num(e, "pid"), num(e, "tid"), NULL, NULL };
			int k = 0;
			while (k < nlanes && by_lane(&lanes[k], &l))
				k++;
			if (k == MAX_ROWS) {
				fprintf(err, "dtpc: %s: event %d: more than %d lanes (pid, tid) to draw\n",
					path, i, MAX_ROWS);
				goto done;
			}
			if (k == nlanes)
				lanes[nlanes++] = l;
			tmax = fmax(tmax, num(e, "ts") + num(e, "dur"));
		} else if (!strcmp(ph, "C")) {
			const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args"), *v;
			if (!time_ok(path, i, e, "ts", err))
				goto done;
			cJSON_ArrayForEach(v, a)
			if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) {
				fprintf(err, "dtpc: %s: event %d ('%s'): counter '%s' is not finite\n",
					path, i, str(e, "name"), v->string ? v->string : "");
				goto done;
			}
			if (!a || !a->child || !a->child->string) {
				i++;
				continue;
			}
			struct series s = { num(e, "pid"), str(e, "name"), a->child->string, NULL };
			int k = 0;
			while (k < nser && (ser[k].pid != s.pid || strcmp(ser[k].name, s.name)))
				k++;
			if (k == MAX_ROWS) {
				fprintf(err, "dtpc: %s: event %d: more than %d counters to draw\n", path,
					i, MAX_ROWS);
				goto done;
			}
			if (k == nser)
				ser[nser++] = s;
			row[i] = MAX_ROWS + k; /* chart k: its row once the lanes are counted */
			tmax = fmax(tmax, num(e, "ts"));
		}
		i++;
	}
	/* under a nanosecond the scale and the axis's ticks are not finite */
	if (!nlanes || tmax < 1e-3) {
		fprintf(err, "dtpc: %s: no spans to draw\n", path);
		goto done;
	}
	qsort(lanes, (size_t)nlanes, sizeof *lanes, by_lane);
	/* the names (the first metadata of each wins), then each row's events
	 * in order: a counting sort of the events by row */
	for (i = 0; i < n; i++) {
		e = evs[i];
		if (!strcmp(str(e, "ph"), "X"))
			row[i] = lane_of(e, lanes, nlanes);
		else if (row[i] >= MAX_ROWS)
			row[i] += nlanes - MAX_ROWS;
		start[row[i] + 2]++;
		if (strcmp(str(e, "ph"), "M"))
			continue;
		const char *name = str(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
		double pid = num(e, "pid");
		if (!strcmp(str(e, "name"), "process_name")) {
			for (int k = 0; k < nlanes; k++)
				if (lanes[k].pid == pid && !lanes[k].pname)
					lanes[k].pname = name;
			for (int k = 0; k < nser; k++)
				if (ser[k].pid == pid && !ser[k].pname)
					ser[k].pname = name;
		} else if (!strcmp(str(e, "name"), "thread_name")) {
			int k = lane_of(e, lanes, nlanes);
			if (k >= 0 && !lanes[k].tname)
				lanes[k].tname = name;
		}
	}
	/* start[r + 1]: where row r begins (row -1 holds the other events) */
	for (int k = 1; k <= nlanes + nser + 1; k++)
		start[k] += start[k - 1];
	for (i = 0; i < n; i++)
		order[start[row[i] + 1]++] = i;
	/* each start[r + 1] has moved to where row r ends, which is where row
	 * r + 1 begins: start[r] .. start[r + 1] is row r */
	FILE *f = strcmp(out, "-") ? fopen(out, "w") : stdout;
	if (!f) {
		fprintf(err, "dtpc: cannot write '%s': %s\n", out, strerror(errno));
		goto done;
	}
	draw(f, evs, order, start, lanes, nlanes, ser, nser, tmax, width);
	rc = 0;
	if (f == stdout ? fflush(f) : fclose(f)) {
		fprintf(err, "dtpc: cannot write '%s': %s\n", out, strerror(errno));
		rc = 2;
	}
done:
	free(lanes), free(ser), free(evs), free(row), free(order), free(start);
	cJSON_Delete(root);
	return rc;
}
