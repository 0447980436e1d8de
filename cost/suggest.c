/* suggest.c — suggest's mesh enumeration and ranking (cost.h): every
 * ring x ulysses x tp mesh of a world compiled and predicted, ranked by
 * what fits and then by time, each with why it takes that time; the
 * refused meshes with the compiler's first error. docs/cost-model.md. */
#include "cost/cost.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/arena.h"

/* What fits first, then by predicted time; ties by memory, then by name,
 * so that the order is the same on every run. */
static int by_time(const void *x, const void *y)
{
	const struct cost_candidate *a = x, *b = y;
	if (a->fits != b->fits)
		return a->fits ? -1 : 1;
	if (a->step != b->step)
		return (a->step > b->step) - (a->step < b->step);
	if (a->mem != b->mem)
		return (a->mem > b->mem) - (a->mem < b->mem);
	int m = strcmp(a->mesh, b->mesh);
	return m ? m : strcmp(a->context, b->context);
}

/* Why a mesh takes the time it does: its bounding resource, and the
 * conditions a user chooses a mesh by. */
static void explain(const struct cost_prediction *p, double mem, double limit, char *buf, size_t n)
{
	const struct cost_rank *sl = &p->ranks[p->slowest];
	double comm = sl->t[COST_R_INTRA] + sl->t[COST_R_INTER];
	size_t l = (size_t)snprintf(buf, n, "%s-bound",
				    p->bound == COST_R_INTRA || p->bound == COST_R_INTER ? "communication"
				    : p->bound == COST_R_MEM ? "memory-bandwidth"
				    : p->bound == COST_R_LAUNCH ? "launch"
				    : p->bound == COST_R_WAIT ? "imbalance" : "compute");
	if (p->bound != COST_R_INTRA && p->bound != COST_R_INTER && comm > 0)
		l += (size_t)snprintf(buf + l, n - l, ", comm %.0f%%", 100 * comm / p->step);
	if (sl->hidden > 0 && l < n)
		l += (size_t)snprintf(buf + l, n - l, ", %.0f%% of comm hidden",
				      100 * sl->hidden / (sl->hidden + comm));
	if (sl->t[COST_R_WAIT] > 0.02 * p->step && l < n)
		l += (size_t)snprintf(buf + l, n - l, ", uneven split (waits %.0f%%)",
				      100 * sl->t[COST_R_WAIT] / p->step);
	if (mem > limit && l < n)
		snprintf(buf + l, n - l, ", memory-bound: needs %.4g MiB", mem / (1 << 20));
}

const char *const cost_mesh_axes[COST_NMESH_AXES] = { "ring", "ulysses", "tp" };

/* The axes of cost_mesh_axes that g splits nothing over (bit k: cost_mesh_axes[k]):
 * an axis of size 2 or more that no op's group and no tensor's split
 * lists only repeats the same work on more ranks. */
static unsigned unused_axes(const struct g_graph *g)
{
	bool used[G_MAX_AXES] = { false };
	for (uint32_t i = 0; i < g->nops; i++)
		if (g->ops[i].group >= 0)
			for (uint32_t k = 0; k < g->groups[g->ops[i].group].naxes; k++)
				used[g->groups[g->ops[i].group].axes[k]] = true;
	for (uint32_t p = 0; p < g->npatterns; p++)
		for (uint32_t k = 0; k < g->groups[g->patterns[p].group].naxes; k++)
			used[g->groups[g->patterns[p].group].axes[k]] = true;
	unsigned mask = 0;
	for (uint32_t a = 0; a < g->naxes; a++)
		for (int k = 0; k < COST_NMESH_AXES; k++)
			if (g->axes[a].size > 1 && !used[a] && !strcmp(graph_str(g, g->axes[a].name),
								       cost_mesh_axes[k]))
				mask |= 1u << k;
	return mask;
}

/* The first error of a compiler's diagnostics (text), or their first line. */
static const char *first_error(struct arena *a, const char *text)
{
	const char *line = strstr(text, ": error: ");
	if (!line)
		line = text;
	while (line > text && line[-1] != '\n')
		line--;
	size_t n = strcspn(line, "\n");
	return n ? arena_printf(a, "%.*s", (int)n, line) : "(no diagnostic)";
}


int cost_suggest(struct arena *a, const struct cost_source *src, const char *context,
		 const struct hw *h, int dtype, int64_t world, double max_mem,
		 struct cost_suggestion *out)
{
	int cap = 64, n = 0, nref = 0, refcap = 16, dropped = 0;
	unsigned unused = 0;
	struct cost_candidate *cand = ARENA_ARRAY(a, struct cost_candidate, cap);
	struct cost_refusal *ref = ARENA_ARRAY(a, struct cost_refusal, refcap);
	memset(out, 0, sizeof *out);
	/* every ring x ulysses x tp of the world; with a ring both rotate
	 * methods; an anything mode only where the plain mesh is refused (where
	 * it divides, it gives the same graph) */
	static const char *const anything[] = { NULL, "ulysses_anything = true",
						"ring_anything = true",
						"ulysses_anything = true, ring_anything = true" };
	for (long long r = 1; r <= world; r++)
		for (long long u = 1; r * u <= world; u++) {
			if (world % (r * u))
				continue;
			long long t = world / (r * u);
			const char *mesh = arena_printf(a, "ring = %lld, ulysses = %lld, tp = %lld", r, u, t);
			const char *name = arena_printf(a, "ring %lld x ulysses %lld x tp %lld", r, u, t);
			for (int rot = 0; rot < (r > 1 ? 2 : 1); rot++) {
				const char *rm = r > 1 ? (rot ? "rotate_method = \"alltoall\""
							      : "rotate_method = \"allgather\"")
						       : NULL;
				bool done = false;
				const char *why = NULL;
				for (int k = 0; k < 4 && !done; k++) {
					const char *parts[3] = { context, rm, anything[k] };
					const char *ctx = NULL;
					for (int q = 0; q < 3; q++)
						if (parts[q])
							ctx = ctx ? arena_printf(a, "%s, %s", ctx, parts[q])
								  : parts[q];
					void *buf = NULL;
					struct g_graph g;
					struct cost_prediction p = { 0 };
					/* the diagnostics, for the plain mesh's refusal */
					char *diag = NULL;
					size_t dlen = 0;
					FILE *err = open_memstream(&diag, &dlen);
					int crc = cost_of(src, mesh, ctx, h, dtype, err ? err : stderr, &buf, &g,
							  &p);
					if (err)
						fclose(err);
					if (!why && crc == 1)
						why = first_error(a, diag ? diag : "");
					free(diag);
					if (crc == 2) /* no mesh of the world can be costed */
						return 2;
					if (crc)
						continue;
					done = true;
					unsigned idle = unused_axes(&g);
					if (idle) {
						unused |= idle;
						dropped++;
					} else {
						if (n == cap) {
							struct cost_candidate *m =
								ARENA_ARRAY(a, struct cost_candidate, 2 * cap);
							memcpy(m, cand, sizeof *cand * (size_t)cap);
							cand = m;
							cap *= 2;
						}
						struct cost_candidate *x = &cand[n++];
						double limit = max_mem > 0 ? max_mem : p.memory_limit;
						x->mesh = name;
						x->spec = mesh;
						x->context = ctx ? ctx : "";
						x->step = p.step;
						x->mem = cost_peak_memory(&p);
						x->fits = x->mem <= limit;
						explain(&p, x->mem, limit, x->reason, sizeof x->reason);
					}
					free(p.ranks);
					free(buf);
				}
				if (done)
					continue;
				if (nref == refcap) {
					struct cost_refusal *m = ARENA_ARRAY(a, struct cost_refusal, 2 * refcap);
					memcpy(m, ref, sizeof *ref * (size_t)refcap);
					ref = m;
					refcap *= 2;
				}
				ref[nref++] = (struct cost_refusal){ name, rm ? rm : "", why };
			}
		}
	qsort(cand, (size_t)n, sizeof *cand, by_time);
	*out = (struct cost_suggestion){ cand, n, ref, nref, dropped, unused };
	return 0;
}

cJSON *cost_suggest_json(const struct cost_source *src, const struct hw *h, int dtype,
			 int64_t world, int top, const struct cost_suggestion *s)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "file", src->file);
	cJSON_AddStringToObject(j, "plan", src->plan);
	cJSON_AddStringToObject(j, "hw", h->name);
	cJSON_AddStringToObject(j, "hw_file", h->path);
	cJSON_AddStringToObject(j, "dtype", dt_names[dtype]);
	cJSON_AddNumberToObject(j, "world", (double)world);
	cJSON_AddNumberToObject(j, "passed", s->n + s->dropped);
	cJSON_AddNumberToObject(j, "dropped", s->dropped);
	cJSON *un = cJSON_AddArrayToObject(j, "unused_axes");
	for (int k = 0; k < COST_NMESH_AXES; k++)
		if (s->unused >> k & 1)
			cJSON_AddItemToArray(un, cJSON_CreateString(cost_mesh_axes[k]));
	cJSON *ms = cJSON_AddArrayToObject(j, "meshes");
	for (int i = 0; i < s->n && i < top; i++) {
		const struct cost_candidate *c = &s->cand[i];
		cJSON *x = cJSON_CreateObject();
		cJSON_AddStringToObject(x, "name", c->mesh);
		cJSON_AddStringToObject(x, "mesh", c->spec);
		cJSON_AddStringToObject(x, "context", c->context);
		cJSON_AddNumberToObject(x, "step_s", c->step);
		cJSON_AddNumberToObject(x, "memory_bytes", c->mem);
		cJSON_AddBoolToObject(x, "fits", c->fits);
		cJSON_AddStringToObject(x, "reason", c->reason);
		cJSON_AddItemToArray(ms, x);
	}
	cJSON *rf = cJSON_AddArrayToObject(j, "refused");
	for (int i = 0; i < s->nref; i++) {
		cJSON *x = cJSON_CreateObject();
		cJSON_AddStringToObject(x, "name", s->ref[i].mesh);
		cJSON_AddStringToObject(x, "context", s->ref[i].context);
		cJSON_AddStringToObject(x, "why", s->ref[i].why);
		cJSON_AddItemToArray(rf, x);
	}
	return j;
}
