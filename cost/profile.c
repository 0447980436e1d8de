/* profile.c — the hardware profile loader (profile.h; the format and its
 * refusals: docs/cost-model.md, "Profiles"). */
#include "cost/profile.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compiler/parse.h"

const char *const dt_names[DT_N] = { "f32", "bf16" };
const char *const mop_keys[M_N] = { "layer_norm", "rms_norm", "gelu", "silu", "add",
				    "mul", "modulate", "rope", "copy", "lse_merge" };
const char *const coll_keys[CO_N] = { "all_gather_busbw", "all_reduce_busbw",
				      "all_to_all_busbw", "p2p_busbw" };
const char *const coll_alpha_keys[CO_N] = { "all_gather_alpha_s", "all_reduce_alpha_s",
					    "all_to_all_alpha_s", "p2p_alpha_s" };

/* What a number of a profile may be: each kind's range keeps every time the
 * model computes from it finite (a rate of at least 1 per second, a time of
 * at most 1e6 s, a count of at most 2^20) and every count an integer. */
enum numkind { N_TIME, N_RATE, N_BYTES, N_COUNT, N_COUNT0, N_GROUP, N_FLAG };
static const struct {
	double lo, hi;
	bool integer;
	const char *what;
} num_kinds[] = {
	[N_TIME] = { 0, 1e6, false, "a time in seconds from 0 to 1e6" },
	[N_RATE] = { 1, 1e30, false, "a rate per second from 1 to 1e30" },
	[N_BYTES] = { 1, 1e30, false, "a number of bytes from 1 to 1e30" },
	[N_COUNT] = { 1, 1 << 20, true, "an integer from 1 to 1048576" },
	[N_COUNT0] = { 0, 1 << 20, true, "an integer from 0 to 1048576" },
	[N_GROUP] = { 2, 1 << 20, true, "a group of 2 ranks or more, up to 1048576" },
	[N_FLAG] = { 0, 1, true, "1 (transfers run under compute) or 0" },
};

/* The fields each object of a profile may have (docs/cost-model.md); any
 * other is refused, as a misspelt optional field would otherwise be ignored
 * unseen, but for those whose name begins with '_' (comments, as in a
 * config.json). A link and a by_group row also have each collective's
 * bandwidth and α (coll_keys, coll_alpha_keys). */
static const char *const root_keys[] = { "name", "description", "calibration",
					 "ranks_per_node", "threads_per_node", "memory_bytes",
					 "launch_s", "sms", "default_dtype", "dtypes", "links", NULL };
static const char *const dtypes_keys[] = { "f32", "bf16", NULL };
static const char *const dtype_keys[] = { "linear", "attention", "memory_bytes_per_s",
					  "op_bytes_per_s", "by_ranks", NULL };
static const char *const row_keys[] = { "ranks", "launch_s", "threads_per_rank", "linear",
					"attention", "memory_bytes_per_s", "op_bytes_per_s", NULL };
static const char *const rate_keys[] = { "peak_flops", "fixed_s", "score_s", NULL };
static const char *const links_keys[] = { "intra", "inter", NULL };
static const char *const link_keys[] = { "name", "alpha_s", "overlap", "p2p_ctas",
					 "p2p_channel_bytes_per_s", "by_group", NULL };
static const char *const group_keys[] = { "group", "ranks_at_work", NULL };
static const char *const number_keys[] = { "value", "source", NULL };

/* s as a message or a report shows it: control bytes escaped (\x0a), so
 * that an error stays one line whatever a key or a name holds. */
static const char *shown(const char *s, char *buf, size_t n)
{
	size_t k = 0;
	for (; *s && k + 5 < n; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c == 0x7f)
			k += (size_t)snprintf(buf + k, n - k, "\\x%02x", c);
		else
			buf[k++] = (char)c;
	}
	buf[k] = 0;
	return buf;
}

static bool coll_key(const char *k)
{
	for (int c = 0; c < CO_N; c++)
		if (!strcmp(k, coll_keys[c]) || !strcmp(k, coll_alpha_keys[c]))
			return true;
	return false;
}

static bool known(const cJSON *obj, const char *const *keys, bool colls, const char *where,
		  char *err, size_t n)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, obj) {
		bool ok = e->string[0] == '_' || (colls && coll_key(e->string));
		for (int k = 0; keys[k] && !ok; k++)
			ok = !strcmp(e->string, keys[k]);
		if (!ok) {
			char key[64];
			snprintf(err, n, "%s%s: not a field of a profile here (docs/cost-model.md)",
				 where, shown(e->string, key, sizeof key));
			return false;
		}
	}
	return true;
}

/* A number of a profile is {"value": x, "source": "..."}: a number without
 * its source is refused, so none can enter unexplained; its value must be
 * of its kind. Errors name the field's path (where + key). */
static bool num(const cJSON *obj, const char *key, enum numkind kind, double *out,
		const char *where, char *err, size_t n)
{
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(obj, key);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "value");
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "source");
	if (!cJSON_IsObject(o) || !cJSON_IsNumber(v)) {
		snprintf(err, n, "%s%s: %s; needs {\"value\": number, \"source\": text}", where, key,
			 !o ? "missing" : !cJSON_IsObject(o) ? "not an object" : "no number as value");
		return false;
	}
	if (!cJSON_IsString(s) || !s->valuestring[0]) {
		snprintf(err, n, "%s%s: the value has no source", where, key);
		return false;
	}
	char w[160];
	snprintf(w, sizeof w, "%s%s.", where, key);
	if (!known(o, number_keys, false, w, err, n))
		return false;
	double x = v->valuedouble;
	if (!(x >= num_kinds[kind].lo && x <= num_kinds[kind].hi) ||
	    (num_kinds[kind].integer && x != floor(x))) {
		/* JSON's 1e999 reads as inf: say so rather than print "inf" */
		char got[48] = "a number beyond a double's range";
		if (isfinite(x))
			snprintf(got, sizeof got, "%g", x);
		snprintf(err, n, "%s%s: %s, not %s", where, key, num_kinds[kind].what, got);
		return false;
	}
	*out = x;
	return true;
}

/* As num, for an optional field: keeps *out where the field is absent. */
static bool opt_num(const cJSON *obj, const char *key, enum numkind kind, double *out,
		    const char *where, char *err, size_t n)
{
	return !cJSON_HasObjectItem(obj, key) || num(obj, key, kind, out, where, err, n);
}

/* obj.key must be an object (or, where !need, absent: *out NULL). */
static bool object(const cJSON *obj, const char *key, bool need, const cJSON **out,
		   const char *where, char *err, size_t n)
{
	*out = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (cJSON_IsObject(*out) || (!*out && !need))
		return true;
	snprintf(err, n, "%s%s: %s", where, key, *out ? "needs an object" : "missing");
	return false;
}

/* obj.key, where present, must be an array of 1 to MAX_TABLE rows, each an
 * object. */
static bool table(const cJSON *obj, const char *key, const cJSON **out, const char *where,
		  char *err, size_t n)
{
	*out = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!*out)
		return true;
	int rows = cJSON_GetArraySize(*out);
	if (!cJSON_IsArray(*out) || rows < 1 || rows > MAX_TABLE) {
		snprintf(err, n, "%s%s: needs an array of 1 to %d rows%s", where, key, MAX_TABLE,
			 cJSON_IsArray(*out) ? "" : " (not an array)");
		return false;
	}
	const cJSON *e;
	int k = 0;
	cJSON_ArrayForEach(e, *out) {
		if (!cJSON_IsObject(e)) {
			snprintf(err, n, "%s%s[%d]: needs an object", where, key, k);
			return false;
		}
		k++;
	}
	return true;
}

/* A table row's key (by_ranks' rank count, by_group's group size): an
 * integer of `kind` that no earlier row (seen[0..nseen)) gave. */
static bool row_key(const cJSON *row, const char *key, enum numkind kind, const int *seen,
		    int nseen, int *out, const char *where, char *err, size_t n)
{
	double v;
	if (!num(row, key, kind, &v, where, err, n))
		return false;
	*out = (int)v;
	for (int k = 0; k < nseen; k++)
		if (seen[k] == *out) {
			snprintf(err, n, "%s%s: %d is given twice", where, key, *out);
			return false;
		}
	return true;
}

/* α (or the link's alpha_s) and bus bandwidth of each collective kind,
 * from the link itself or a by_group row. */
static bool load_colls(const cJSON *j, double alpha_default, double *alpha, double *busbw,
		       const char *where, char *err, size_t n)
{
	for (int c = 0; c < CO_N; c++) {
		alpha[c] = alpha_default;
		if (!opt_num(j, coll_alpha_keys[c], N_TIME, &alpha[c], where, err, n) ||
		    !num(j, coll_keys[c], N_RATE, &busbw[c], where, err, n))
			return false;
	}
	return true;
}

static bool load_link(const cJSON *j, struct link *l, const char *which, char *err, size_t n)
{
	if (!j)
		return true;
	char where[96];
	snprintf(where, sizeof where, "links.%s.", which);
	if (!known(j, link_keys, true, where, err, n))
		return false;
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
	shown(cJSON_IsString(name) ? name->valuestring : which, l->name, sizeof l->name);
	double alpha;
	if (!num(j, "alpha_s", N_TIME, &alpha, where, err, n))
		return false;
	/* a calibrated profile (dtpc calibrate) has an α per collective kind;
	 * a datasheet profile one for all */
	if (!load_colls(j, alpha, l->alpha, l->busbw, where, err, n))
		return false;
	double overlap = 1;
	if (!opt_num(j, "overlap", N_FLAG, &overlap, where, err, n))
		return false;
	l->overlap = overlap == 1;
	l->p2p_ctas = 0;
	l->channel_bw = 0;
	if (!opt_num(j, "p2p_ctas", N_COUNT0, &l->p2p_ctas, where, err, n) ||
	    !opt_num(j, "p2p_channel_bytes_per_s", N_RATE, &l->channel_bw, where, err, n))
		return false;
	if (l->channel_bw > 0 && !(l->p2p_ctas > 0)) {
		snprintf(err, n, "%sp2p_channel_bytes_per_s needs p2p_ctas (the channels it is "
			 "multiplied by)", where);
		return false;
	}
	const cJSON *bg, *e;
	if (!table(j, "by_group", &bg, where, err, n))
		return false;
	cJSON_ArrayForEach(e, bg) {
		struct group_row *g = &l->groups[l->ngroups];
		int *gs = &l->group_size[l->ngroups];
		snprintf(where, sizeof where, "links.%s.by_group[%d].", which, l->ngroups);
		if (!known(e, group_keys, true, where, err, n) ||
		    !row_key(e, "group", N_GROUP, l->group_size, l->ngroups, gs, where, err, n))
			return false;
		if (!load_colls(e, alpha, g->alpha, g->busbw, where, err, n))
			return false;
		g->at_work = *gs;
		if (!opt_num(e, "ranks_at_work", N_COUNT, &g->at_work, where, err, n))
			return false;
		l->ngroups++;
	}
	l->present = true;
	return true;
}

static bool load_rate(const cJSON *x, const char *key, struct rate *r, const char *where,
		      char *err, size_t n)
{
	const cJSON *j;
	char w[128];
	snprintf(w, sizeof w, "%s%s.", where, key);
	r->score = 0;
	return object(x, key, true, &j, where, err, n) && known(j, rate_keys, false, w, err, n) &&
	       num(j, "peak_flops", N_RATE, &r->peak, w, err, n) &&
	       num(j, "fixed_s", N_TIME, &r->fixed, w, err, n) &&
	       opt_num(j, "score_s", N_TIME, &r->score, w, err, n);
}

/* linear, attention, memory_bytes_per_s and op_bytes_per_s of a dtype or
 * of a by_ranks row (where: "dtypes.f32." or "dtypes.f32.by_ranks[2].") */
static bool load_rates(const cJSON *x, struct rates *r, const char *where, char *err, size_t n)
{
	char w[128];
	if (!load_rate(x, "linear", &r->linear, where, err, n) ||
	    !load_rate(x, "attention", &r->attention, where, err, n))
		return false;
	double bw;
	const cJSON *ob, *e;
	if (!num(x, "memory_bytes_per_s", N_RATE, &bw, where, err, n) ||
	    !object(x, "op_bytes_per_s", false, &ob, where, err, n))
		return false;
	snprintf(w, sizeof w, "%sop_bytes_per_s.", where);
	cJSON_ArrayForEach(e, ob) {
		int k = 0;
		while (k < M_N && strcmp(e->string, mop_keys[k]))
			k++;
		if (k == M_N) {
			char key[64];
			snprintf(err, n, "%s%s: not a kernel the model knows (layer_norm, rms_norm, "
				 "gelu, silu, add, mul, modulate, rope, copy, lse_merge)", w,
				 shown(e->string, key, sizeof key));
			return false;
		}
	}
	r->mem_bw = bw;
	for (int k = 0; k < M_N; k++) {
		r->op_bw[k] = bw;
		if (!opt_num(ob, mop_keys[k], N_RATE, &r->op_bw[k], w, err, n))
			return false;
	}
	return true;
}

/* A CPU profile's table of rates by ranks at work on the node. */
static bool load_table(const cJSON *x, struct dt_profile *dp, double launch, const char *dt,
		       char *err, size_t n)
{
	const cJSON *tab, *e;
	char where[96];
	snprintf(where, sizeof where, "dtypes.%s.", dt);
	if (!table(x, "by_ranks", &tab, where, err, n))
		return false;
	cJSON_ArrayForEach(e, tab) {
		struct rates *row = &dp->rows[dp->nrows];
		int *rr = &dp->row_ranks[dp->nrows];
		snprintf(where, sizeof where, "dtypes.%s.by_ranks[%d].", dt, dp->nrows);
		if (!known(e, row_keys, false, where, err, n) ||
		    !row_key(e, "ranks", N_COUNT, dp->row_ranks, dp->nrows, rr, where, err, n))
			return false;
		row->launch = launch;
		if (!load_rates(e, row, where, err, n) ||
		    !opt_num(e, "launch_s", N_TIME, &row->launch, where, err, n))
			return false;
		dp->nrows++;
	}
	return true;
}

static int by_key(const void *x, const void *y)
{
	return strcmp((*(const cJSON *const *)x)->string, (*(const cJSON *const *)y)->string);
}

/* A key given twice in one object: cJSON keeps both and reads the first, so
 * the second would be silently ignored. path holds the object's path. */
static bool unique_keys(const cJSON *j, char *path, size_t len, char *err, size_t n)
{
	size_t at = strlen(path);
	int count = cJSON_GetArraySize(j), k = 0;
	char key[64];
	if (cJSON_IsObject(j) && count > 1) {
		/* sorted, so that a large object costs k log k, not k^2 */
		const cJSON **keys = malloc(sizeof *keys * (size_t)count);
		if (!keys) {
			snprintf(err, n, "out of memory");
			return false;
		}
		for (const cJSON *e = j->child; e; e = e->next)
			keys[k++] = e;
		qsort(keys, (size_t)count, sizeof *keys, by_key);
		const char *twice = NULL;
		for (k = 1; k < count && !twice; k++)
			if (!strcmp(keys[k - 1]->string, keys[k]->string))
				twice = keys[k]->string;
		if (twice)
			snprintf(err, n, "%s%s%s: the key is given twice", path, at ? "." : "",
				 shown(twice, key, sizeof key));
		free(keys);
		if (twice)
			return false;
	}
	k = 0;
	for (const cJSON *e = j->child; e; e = e->next, k++) {
		if (cJSON_IsObject(j))
			snprintf(path + at, len - at, "%s%s", at ? "." : "",
				 shown(e->string, key, sizeof key));
		else
			snprintf(path + at, len - at, "[%d]", k);
		if (!unique_keys(e, path, len, err, n))
			return false;
		path[at] = 0;
	}
	return true;
}

/* Where a profile that does not parse goes wrong: the line and column of
 * cJSON's stop; past its nesting limit, say so. */
static void json_error(const char *text, const char *stop, char *err, size_t n)
{
	int line = 1, col = 1, depth = 0;
	bool str = false;
	for (const char *p = text; p < stop; p++) {
		line += *p == '\n';
		col = *p == '\n' ? 1 : col + 1;
		if (str && *p == '\\' && p + 1 < stop)
			p++, col++;
		else if (*p == '"')
			str = !str;
		else if (!str)
			depth += (*p == '[' || *p == '{') - (*p == ']' || *p == '}');
	}
	snprintf(err, n, "line %d, column %d: %s", line, col,
		 depth >= CJSON_NESTING_LIMIT ? "nested deeper than the JSON reader's limit"
					      : "not valid JSON");
}

/* A profile is a few kilobytes (a calibrated one under 100 kB): a larger
 * file is not read. */
enum { HW_MAX_BYTES = 1 << 20 };

bool cost_hw_load(struct arena *a, const char *path, struct hw *h, char *err, size_t n)
{
	struct stat st;
	size_t len = 0;
	const char *why = NULL;
	char *text = stat(path, &st) || st.st_size <= HW_MAX_BYTES
			     ? read_source(a, path, false, &len, &why) : NULL;
	if (!why && len > HW_MAX_BYTES) /* it grew */
		text = NULL;
	if (!text) {
		memset(h, 0, sizeof *h);
		snprintf(err, n, "%s", why ? why : "larger than 1 MiB (a profile is a few kilobytes)");
		return false;
	}
	return cost_hw_parse(text, len, path, h, err, n);
}

bool cost_hw_parse(const char *text, size_t len, const char *path, struct hw *h, char *err,
		   size_t n)
{
	memset(h, 0, sizeof *h);
	h->path = path;
	const char *nul = memchr(text, 0, len), *stop = NULL;
	cJSON *j = nul ? NULL : cJSON_ParseWithLengthOpts(text, len, &stop, false);
	/* the value must be the whole text but for white space */
	while (j && stop < text + len && *stop && strchr(" \t\r\n", *stop))
		stop++;
	if (!j || stop != text + len) {
		json_error(text, nul ? nul : stop ? stop : text + len, err, n);
		if (nul)
			snprintf(err + strlen(err), n - strlen(err), " (a NUL byte)");
		cJSON_Delete(j);
		return false;
	}
	char path_buf[256] = "";
	bool ok = false;
	if (!cJSON_IsObject(j)) {
		snprintf(err, n, "needs an object of the profile's fields (docs/cost-model.md)");
		goto out;
	}
	if (!unique_keys(j, path_buf, sizeof path_buf, err, n) ||
	    !known(j, root_keys, false, "", err, n))
		goto out;
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
	shown(cJSON_IsString(name) ? name->valuestring : path, h->name, sizeof h->name);
	double rpn, tpn = 0;
	if (!num(j, "ranks_per_node", N_COUNT, &rpn, "", err, n) ||
	    !num(j, "memory_bytes", N_BYTES, &h->memory, "", err, n) ||
	    !num(j, "launch_s", N_TIME, &h->launch, "", err, n) ||
	    !opt_num(j, "threads_per_node", N_COUNT, &tpn, "", err, n) ||
	    !opt_num(j, "sms", N_COUNT, &h->sms, "", err, n))
		goto out;
	h->ranks_per_node = (int)rpn;
	h->threads_per_node = (int)tpn;
	const cJSON *dts;
	if (!object(j, "dtypes", true, &dts, "", err, n) ||
	    !known(dts, dtypes_keys, false, "dtypes.", err, n))
		goto out;
	for (int d = 0; d < DT_N; d++) {
		const cJSON *x;
		if (!object(dts, dt_names[d], false, &x, "dtypes.", err, n))
			goto out;
		if (!x)
			continue;
		char where[64];
		snprintf(where, sizeof where, "dtypes.%s.", dt_names[d]);
		h->dt[d].base.launch = h->launch;
		if (!known(x, dtype_keys, false, where, err, n) ||
		    !load_rates(x, &h->dt[d].base, where, err, n) ||
		    !load_table(x, &h->dt[d], h->launch, dt_names[d], err, n))
			goto out;
		if (h->dt[d].nrows && !h->threads_per_node) {
			snprintf(err, n, "dtypes.%s.by_ranks: a table of ranks sharing a node's cores "
				 "needs threads_per_node", dt_names[d]);
			goto out;
		}
		h->dt[d].present = true;
	}
	const cJSON *dd = cJSON_GetObjectItemCaseSensitive(j, "default_dtype");
	h->default_dtype = -1;
	for (int d = 0; d < DT_N; d++)
		if (cJSON_IsString(dd) && !strcmp(dd->valuestring, dt_names[d]) && h->dt[d].present)
			h->default_dtype = d;
	if (h->default_dtype < 0) {
		snprintf(err, n, "default_dtype: must name one of the profile's dtypes (%s%s%s)",
			 h->dt[DT_F32].present ? "f32" : "",
			 h->dt[DT_F32].present && h->dt[DT_BF16].present ? ", " : "",
			 h->dt[DT_BF16].present ? "bf16" : "");
		goto out;
	}
	const cJSON *links, *intra, *inter;
	if (!object(j, "links", true, &links, "", err, n) ||
	    !known(links, links_keys, false, "links.", err, n) ||
	    !object(links, "intra", true, &intra, "links.", err, n) ||
	    !object(links, "inter", false, &inter, "links.", err, n) ||
	    !load_link(intra, &h->intra, "intra", err, n) ||
	    !load_link(inter, &h->inter, "inter", err, n))
		goto out;
	for (int k = 0; k < 2; k++) {
		const struct link *l = k ? &h->inter : &h->intra;
		if (l->p2p_ctas > 0 && !(l->p2p_ctas < h->sms)) {
			snprintf(err, n, "links.%s.p2p_ctas: %g needs the profile's sms, and fewer "
				 "than them (%g)", k ? "inter" : "intra", l->p2p_ctas, h->sms);
			goto out;
		}
	}
	ok = true;
out:
	cJSON_Delete(j);
	return ok;
}

