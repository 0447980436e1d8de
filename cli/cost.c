/* cost.c — `dtpc cost` and `dtpc suggest`: the command lines and the
 * printing of the cost model (cost/cost.h, libdtpcost; the model and
 * where it is wrong: docs/cost-model.md). */
#include "cost.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "compiler/arena.h"
#include "compiler/config.h"
#include "compiler/driver.h"
#include "compiler/parse.h"
#include "cost/cost.h"
#include "graph/graph.h"

static void print_rank_text(FILE *out, const struct g_graph *g, const struct hw *h, int r,
			    const struct cost_rank *rc)
{
	fprintf(out, "rank %d, per forward pass: %.3f ms\n", r, rc->end * 1e3);
	for (int k = 0; k < COST_F_N; k++)
		fprintf(out, "  %-10s %6d ops %14.4g %s\n", cost_flop_keys[k], rc->nops[k], rc->flops[k],
			k == COST_F_POINTWISE ? "elements" : "FLOP");
	for (int k = 0; k < rc->nrows; k++) {
		const struct cost_comm_row *w = &rc->rows[k];
		char axes[64];
		cost_group_axes(g, w->group, axes, sizeof axes);
		fprintf(out, "  %-14s over %-14s %5d ops %14.0f bytes %9.3f ms (%s)%s", op_table[w->kind].name,
			axes, w->count, w->bytes, w->time * 1e3, w->inter ? h->inter.name : h->intra.name,
			w->hidden > 0 ? "" : "\n");
		if (w->hidden > 0)
			fprintf(out, ", %.3f ms under attention\n", w->hidden * 1e3);
	}
	fprintf(out, "  time:");
	for (int k = 0; k < COST_R_N; k++)
		if (rc->t[k] >= 5e-7) /* what rounds to 0.000 ms says nothing */
			fprintf(out, " %s %.3f ms;", cost_res_names[k], rc->t[k] * 1e3);
	fprintf(out, "\n  memory: activations %.0f, weights %.0f, total %.0f bytes\n", rc->act,
		rc->weights, rc->act + rc->weights);
}

/* ---- the commands ----------------------------------------------------------------------------- */

struct cost_args {
	const char *file, *hw;
	struct compile_opts co; /* --plan, --mesh, --context, --config, -D */
	int dtype, top;
	bool json;
	int64_t world;
	double max_mem;
};

static void cost_usage(void)
{
	puts("usage: dtpc cost FILE.plan --hw PROFILE [--plan P] [--mesh AXES] [--context OPTS]\n"
	     "                 [--config PATH] [-D N=V] [--dtype f32|bf16] [--format text|json]\n"
	     "       dtpc suggest FILE.plan --world N --hw PROFILE [--plan P] [--max-mem BYTES]\n"
	     "                 [--top K] [--config PATH] [-D N=V] [--dtype f32|bf16]\n"
	     "                 [--format text|json]\n"
	     "(docs/cost-model.md)");
}

/* Options of cost and suggest; those of suggest only are refused by cost.
 * -1: go on; else the exit status. */
static int parse_args(struct arena *a, int argc, char **argv, bool suggest, struct cost_args *c)
{
	static const char *const dtypes[] = { "f32", "bf16", NULL };
	static const char *const formats[] = { "text", "json", NULL };
	_Static_assert(DT_F32 == 0 && DT_BF16 == 1, "--dtype's words");
	memset(c, 0, sizeof *c);
	c->dtype = -1;
	c->top = 10;
	c->co.defines = ARENA_ARRAY(a, struct override, argc);
	struct cli_plan_opts po = { a, &c->co };
	int format = 0;
	const struct cli_opt common[] = {
		OPT_PLAN_OPTIONS(&po),
		OPT_STR("--hw", &c->hw),
		OPT_WORD("--dtype", &c->dtype, dtypes),
		OPT_WORD("--format", &format, formats),
	};
	const struct cli_opt suggest_only[] = {
		OPT_NUM("--world", CLI_I64, &c->world, "1 to 4096", 1, 4096),
		OPT_NUM("--max-mem", CLI_REAL, &c->max_mem, "a number of bytes from 1 to 1e30", 1, 1e30),
		OPT_NUM("--top", CLI_INT, &c->top, "an integer from 1 to 1000000000", 1, 1e9),
	};
	enum { NC = sizeof common / sizeof *common, NS = sizeof suggest_only / sizeof *suggest_only };
	struct cli_opt t[NC + NS + 1];
	memcpy(t, common, sizeof common);
	if (suggest)
		memcpy(t + NC, suggest_only, sizeof suggest_only);
	t[NC + (suggest ? NS : 0)] = (struct cli_opt)OPT_END;
	char missing[64];
	snprintf(missing, sizeof missing, "%s needs a plan file", argv[1]);
	int rc = cli_parse(argc, argv, 2, t,
			   &(struct cli_rest){ &c->file, "plan file", .help = cost_usage,
					       .missing = missing });
	if (rc >= 0)
		return rc;
	c->json = format == 1;
	if (!c->hw)
		return diag_usage_error("%s needs --hw PROFILE (a JSON file of hw/)", argv[1]);
	if (suggest && !c->world)
		return diag_usage_error("%s", "suggest needs --world N");
	return -1;
}

/* The plan to cost: --plan, or the file's only plan. NULL after a message. */
static const char *choose_plan(struct arena *a, const struct cost_args *c)
{
	if (c->co.plan)
		return c->co.plan;
	struct diag_ctx d;
	diag_init(&d, a);
	struct program prog;
	const char *name = NULL;
	int n = 0;
	if (parse_program(a, &d, c->file, &prog))
		for (const struct plan *p = prog.plans; p; p = p->next)
			if (p->loc.file == 0 && !n++)
				name = p->name;
	if (d.nerrors)
		diag_print_text(&d, stderr, false);
	else if (n != 1)
		fprintf(stderr, "dtpc: '%s' has %d plans of its own; choose one with --plan\n", c->file,
			n);
	diag_release(&d);
	return n == 1 && !d.nerrors ? name : NULL;
}

static int load_profile(struct arena *a, const struct cost_args *c, struct hw *h, int *dtype)
{
	char why[256];
	if (!strcmp(c->hw, "-")) {
		fprintf(stderr, "dtpc: --hw needs a profile's file, not standard input\n");
		return 2;
	}
	if (!driver_readable(c->hw, stderr) || !driver_readable(c->file, stderr))
		return 2;
	if (!cost_hw_load(a, c->hw, h, why, sizeof why)) {
		fprintf(stderr, "dtpc: %s: %s\n", c->hw, why);
		return 2;
	}
	*dtype = c->dtype >= 0 ? c->dtype : h->default_dtype;
	if (!h->dt[*dtype].present) {
		fprintf(stderr, "dtpc: %s has no rates for %s\n", c->hw, dt_names[*dtype]);
		return 2;
	}
	return 0;
}

/* What cost and suggest do first: their options, the profile and its
 * dtype, the plan. -1: go on; else the exit status (0 after --help). */
static int start(struct arena *a, int argc, char **argv, bool suggest, struct cost_args *c,
		 struct hw *h, int *dtype, const char **plan)
{
	int rc = parse_args(a, argc, argv, suggest, c);
	if (rc >= 0 || (rc = load_profile(a, c, h, dtype)))
		return rc;
	return (*plan = choose_plan(a, c)) ? -1 : 2;
}

/* The compiler's input of c for plan. */
static struct cost_source source(const struct cost_args *c, const char *plan)
{
	return (struct cost_source){ c->file, plan, c->co.config, c->co.defines, c->co.ndefines };
}

/* a report as JSON on standard output, and freed */
static void print_json(cJSON *j)
{
	char *s = cJSON_Print(j);
	if (s)
		printf("%s\n", s);
	free(s);
	cJSON_Delete(j);
}

int cost_main(int argc, char **argv)
{
	struct arena *a = arena_create();
	struct cost_args c;
	struct hw h;
	const char *plan = NULL;
	int dtype = 0, rc = start(a, argc, argv, false, &c, &h, &dtype, &plan);
	void *buf = NULL;
	struct g_graph g;
	struct cost_prediction p = { 0 };
	if (rc >= 0) /* --help, or an error */
		goto out;
	struct cost_source src = source(&c, plan);
	rc = cost_of(&src, c.co.mesh, c.co.context, &h, dtype, stderr, &buf, &g, &p);
	if (rc)
		goto out;
	const struct cost_rank *sl = &p.ranks[p.slowest];
	double mem = cost_peak_memory(&p);
	if (c.json) {
		print_json(cost_report_json(&src, &g, &h, &p));
	} else {
		printf("cost: %s, plan %s, world %d, %s, on %s (%s)\n", c.file, plan, p.world,
		       dt_names[dtype], h.name, h.path);
		if (p.slowest != 0)
			print_rank_text(stdout, &g, &h, 0, &p.ranks[0]);
		print_rank_text(stdout, &g, &h, p.slowest, sl);
		printf("predicted step: %.3f ms (slowest rank %d), bound by %s\n", p.step * 1e3,
		       p.slowest, cost_res_names[p.bound]);
		printf("memory: %.3f GiB per rank of %.3f GiB%s\n", mem / (1 << 30),
		       p.memory_limit / (1 << 30), mem <= p.memory_limit ? "" : ": does not fit");
	}
out:
	free(p.ranks);
	free(buf);
	arena_free(a);
	return rc;
}

int suggest_main(int argc, char **argv)
{
	struct arena *a = arena_create();
	struct cost_args c;
	struct hw h;
	const char *plan = NULL;
	int dtype = 0, rc = start(a, argc, argv, true, &c, &h, &dtype, &plan);
	/* the meshes' diagnostics are not shown: an error in the config
	 * itself is, once, rather than every mesh being refused unexplained */
	int bad;
	if (rc < 0 && c.co.config && (bad = config_check(c.co.config, stderr)))
		rc = bad;
	if (rc >= 0) { /* --help, or an error */
		arena_free(a);
		return rc;
	}
	struct cost_suggestion s;
	struct cost_source src = source(&c, plan);
	if ((rc = cost_suggest(a, &src, c.co.context, &h, dtype, c.world, c.max_mem, &s))) {
		arena_free(a);
		return rc;
	}
	if (c.json) {
		print_json(cost_suggest_json(&src, &h, dtype, c.world, c.top, &s));
		arena_free(a);
		return s.n ? 0 : 1;
	}
	printf("suggest: %s, plan %s, world %" PRId64 ", %s, on %s (%s): %d meshes pass check, "
	       "%d refused\n", c.file, plan, c.world, dt_names[dtype], h.name, h.path,
	       s.n + s.dropped, s.nref);
	for (int i = 0; i < s.n && i < c.top; i++) {
		const struct cost_candidate *x = &s.cand[i];
		printf("%2d. %-30s %10.3f ms %9.3f GiB%s  %s%s%s\n", i + 1, x->mesh, x->step * 1e3,
		       x->mem / (1 << 30), x->fits ? "" : " (does not fit)", x->reason,
		       x->context[0] ? "; context: " : "", x->context);
	}
	if (s.unused) {
		for (int k = 0, first = 1; k < COST_NMESH_AXES; k++)
			if (s.unused >> k & 1) {
				printf("%s%s", first ? "" : ", ", cost_mesh_axes[k]);
				first = 0;
			}
		printf(": not used by plan %s (%d %s with them left out)\n", plan, s.dropped,
		       s.dropped == 1 ? "mesh" : "meshes");
	}
	for (int i = 0; i < s.nref; i++)
		printf("refused: %s%s%s: %s\n", s.ref[i].mesh, s.ref[i].context[0] ? "; context: " : "",
		       s.ref[i].context, s.ref[i].why);
	arena_free(a);
	return s.n ? 0 : 1;
}
