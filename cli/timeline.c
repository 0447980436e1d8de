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
#include <stdlib.h>
#include <string.h>

enum { LEFT = 200, RIGHT = 20, TOP = 20, LANE = 18, GAP = 4, AXIS = 30, CHART = 40 };

struct lane {
	double pid, tid;
};
struct series {
	double pid;
	const char *name; /* the counter's name, then its first argument's */
	const char *arg;
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

/* The name metadata gives a process (tid < 0) or a row; NULL if none. */
static const char *meta_name(const cJSON *ev, double pid, double tid)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, ev)
	{
		if (strcmp(str(e, "ph"), "M") || num(e, "pid") != pid)
			continue;
		bool proc = !strcmp(str(e, "name"), "process_name");
		if ((tid < 0 && proc) ||
		    (tid >= 0 && !strcmp(str(e, "name"), "thread_name") && num(e, "tid") == tid)) {
			const char *n = str(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
			return *n ? n : NULL;
		}
	}
	return NULL;
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

static void draw(FILE *f, const cJSON *ev, const struct lane *lanes, int nlanes,
		 const struct series *ser, int nser, double tmax, int width)
{
	double plot = width - LEFT - RIGHT, scale = plot / tmax;
	int axis_y = TOP + nlanes * (LANE + GAP);
	int height = axis_y + AXIS + nser * (CHART + GAP) + 10;
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"font-family=\"sans-serif\" font-size=\"11\">\n", width, height);
	fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", width, height);
	for (int l = 0; l < nlanes; l++) {
		int y = TOP + l * (LANE + GAP);
		const char *p = meta_name(ev, lanes[l].pid, -1), *t = meta_name(ev, lanes[l].pid, lanes[l].tid);
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
		const cJSON *e;
		cJSON_ArrayForEach(e, ev)
		{
			if (strcmp(str(e, "ph"), "X") || num(e, "pid") != lanes[l].pid ||
			    num(e, "tid") != lanes[l].tid)
				continue;
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
		const cJSON *e;
		cJSON_ArrayForEach(e, ev)
		if (!strcmp(str(e, "ph"), "C") && num(e, "pid") == ser[c].pid && !strcmp(str(e, "name"), ser[c].name))
			top = fmax(top, num(cJSON_GetObjectItemCaseSensitive(e, "args"), ser[c].arg));
		fprintf(f, "<g class=\"counter\">\n<text x=\"4\" y=\"%d\">", y + CHART / 2);
		const char *p = meta_name(ev, ser[c].pid, -1);
		if (p)
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
		cJSON_ArrayForEach(e, ev)
		{
			if (strcmp(str(e, "ph"), "C") || num(e, "pid") != ser[c].pid ||
			    strcmp(str(e, "name"), ser[c].name))
				continue;
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

static char *slurp(const char *path, FILE *err)
{
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
	fclose(f);
	if (!buf)
		fprintf(err, "dtpc: %s: out of memory\n", path);
	else
		buf[n] = 0;
	return buf;
}

static int by_lane(const void *a, const void *b)
{
	const struct lane *x = a, *y = b;
	return x->pid != y->pid ? (x->pid > y->pid) - (x->pid < y->pid) : (x->tid > y->tid) - (x->tid < y->tid);
}

int timeline_svg(const char *path, const char *out, int width, FILE *err)
{
	char *text = slurp(path, err);
	if (!text)
		return 2;
	cJSON *root = cJSON_Parse(text);
	free(text);
	const cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
	if (!cJSON_IsArray(ev)) {
		fprintf(err, "dtpc: %s: not a Chrome trace (no traceEvents array)\n", path);
		cJSON_Delete(root);
		return 2;
	}
	int n = cJSON_GetArraySize(ev), nlanes = 0, nser = 0, rc = 2;
	struct lane *lanes = malloc(sizeof *lanes * (n ? n : 1));
	struct series *ser = malloc(sizeof *ser * (n ? n : 1));
	double tmax = 0;
	const cJSON *e;
	if (!lanes || !ser) {
		fprintf(err, "dtpc: %s: out of memory\n", path);
		goto done;
	}
	cJSON_ArrayForEach(e, ev)
	{
		const char *ph = str(e, "ph");
		if (!strcmp(ph, "X")) {
			struct lane l = { num(e, "pid"), num(e, "tid") };
			int k = 0;
			while (k < nlanes && by_lane(&lanes[k], &l))
				k++;
			if (k == nlanes)
				lanes[nlanes++] = l;
			tmax = fmax(tmax, num(e, "ts") + num(e, "dur"));
		} else if (!strcmp(ph, "C")) {
			const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args");
			if (!a || !a->child || !a->child->string)
				continue;
			struct series s = { num(e, "pid"), str(e, "name"), a->child->string };
			int k = 0;
			while (k < nser && (ser[k].pid != s.pid || strcmp(ser[k].name, s.name)))
				k++;
			if (k == nser)
				ser[nser++] = s;
			tmax = fmax(tmax, num(e, "ts"));
		}
	}
	if (!nlanes || tmax <= 0) {
		fprintf(err, "dtpc: %s: no spans to draw\n", path);
		goto done;
	}
	qsort(lanes, (size_t)nlanes, sizeof *lanes, by_lane);
	FILE *f = strcmp(out, "-") ? fopen(out, "w") : stdout;
	if (!f) {
		fprintf(err, "dtpc: cannot write '%s': %s\n", out, strerror(errno));
		goto done;
	}
	draw(f, ev, lanes, nlanes, ser, nser, tmax, width);
	rc = 0;
	if (f == stdout ? fflush(f) : fclose(f)) {
		fprintf(err, "dtpc: cannot write '%s': %s\n", out, strerror(errno));
		rc = 2;
	}
done:
	free(lanes), free(ser);
	cJSON_Delete(root);
	return rc;
}
