/* driver.c — the pipeline, one pass after another, with -d dumps between. */
#include "driver.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "config.h"
#include "fold.h"
#include "fuse.h"
#include "layout.h"
#include "lower.h"
#include "parse.h"
#include "graph/error.h"
#include "graph/graph_stats.h"
#include "summary.h"

/* ---- dumps --------------------------------------------------------------- */

static void dump_ir(FILE *out, struct arena *a, const struct ir_model *m)
{
	fprintf(out, "# ir: model %s, %d ops, %d tensors, %d weights\n", m->name, m->nops,
		m->ntensors, m->nweights);
	for (int i = 0; i < m->ninputs; i++)
		fprintf(out, "input  %%%d %s %s\n", m->inputs[i], m->tensors[m->inputs[i]].name,
			shape_str(a, &m->tensors[m->inputs[i]].shape));
	for (int i = 0; i < m->nops; i++) {
		const struct ir_op *o = &m->ops[i];
		fprintf(out, "%%%-5d = %-10s", o->out, op_table[o->kind].name);
		for (int k = 0; k < o->nin; k++)
			fprintf(out, "%s%%%d", k ? ", " : " ", o->in[k]);
		fprintf(out, "  %s%s %s\n", o->update ? "~" : "", o->module,
			shape_str(a, &m->tensors[o->out].shape));
	}
	for (int i = 0; i < m->noutputs; i++)
		fprintf(out, "output %%%d %s\n", m->outputs[i], m->output_names[i]);
}

static void dump_styles(FILE *out, const struct plan_cfg *c)
{
	fprintf(out, "# styles: plan %s\n", c->decl->name);
	for (int mi = 0; mi < c->model->nmodules; mi++) {
		if (!c->styles[mi])
			continue;
		fprintf(out, "%-40s", c->model->modules[mi].name[0] ? c->model->modules[mi].name
								    : "\"\"");
		for (const struct style_use *u = c->styles[mi]; u; u = u->next) {
			fprintf(out, " %s", style_names[u->kind]);
			if (u->kind == ST_SPLIT)
				fprintf(out, "(%s, dim = %d)", u->port, u->dim);
			else if (u->kind == ST_GATHER)
				fprintf(out, "(dim = %d)", u->dim);
			else if (u->nblocks)
				fprintf(out, "(%d blocks)", u->nblocks);
		}
		fprintf(out, "\n");
	}
}

static const char *lay_str(struct arena *a, const struct lay_axis *x)
{
	if (x->kind == LAY_REPL)
		return "R";
	if (!x->nblk)
		return arena_printf(a, "S(%d)", x->dim);
	const char *s = "";
	for (int i = 0; i < x->nblk; i++)
		s = arena_printf(a, "%s%s%" PRId64, s, i ? "+" : "", x->blk[i]);
	return arena_printf(a, "S(%d:%s)", x->dim, s);
}

static void dump_layout(FILE *out, struct arena *a, const struct plan_cfg *c,
			const struct layout_result *r)
{
	const struct ir_model *m = c->model;
	/* groups whose axes the mesh lacks are left out, but cp and tp always */
	bool shown[LG_COUNT];
	fprintf(out, "# layout: plan %s (cp = ring x ulysses, tp", c->decl->name);
	for (int g = 0; g < LG_COUNT; g++) {
		shown[g] = g == LG_CP || g == LG_TP || lay_group_size(c, g) > 1;
		if (shown[g] && g != LG_CP && g != LG_TP)
			fprintf(out, ", %s", lay_groups[g].tag);
	}
	fprintf(out, ")\n");
	for (int t = 0; t < m->ntensors; t++) {
		fprintf(out, "%%%-5d", t);
		for (int g = 0; g < LG_COUNT; g++)
			if (shown[g])
				fprintf(out, " %s %-12s", lay_groups[g].tag,
					lay_str(a, &r->tensors[t].g[g]));
		fprintf(out, " %s\n", m->tensors[t].name);
	}
}

bool driver_readable(const char *path, FILE *err)
{
	if (!strcmp(path, "-"))
		return true; /* standard input: the parser reads it */
	struct stat st;
	/* O_NONBLOCK: opening a FIFO must not wait for a writer */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	const char *why = fd < 0 ? strerror(errno)
		: fstat(fd, &st) ? strerror(errno)
		: !S_ISREG(st.st_mode) ? "not a regular file" : NULL;
	if (fd >= 0)
		close(fd);
	if (why)
		fprintf(err, "dtpc: cannot read '%s': %s\n", path, why);
	return !why;
}

/* ---- passes ---------------------------------------------------------------- */

/* Models and plans are declared once across all imported files. */
static void check_declarations(struct diag_ctx *d, const struct program *p)
{
	for (const struct model *m = p->models; m; m = m->next)
		for (const struct model *n = m->next; n; n = n->next)
			if (!strcmp(m->name, n->name)) {
				diag_error(d, n->name_loc, "model '%s' is defined twice", n->name);
				diag_note(d, m->name_loc, "first defined here");
			}
	for (const struct plan *m = p->plans; m; m = m->next)
		for (const struct plan *n = m->next; n; n = n->next)
			if (!strcmp(m->name, n->name)) {
				diag_error(d, n->name_loc, "plan '%s' is defined twice", n->name);
				diag_note(d, m->name_loc, "first defined here");
			}
}

static int finish(const struct check_opts *o, struct diag_ctx *d, cJSON *summaries,
		  FILE *out, FILE *err, int status)
{
	if (o->format == FMT_JSON) {
		diag_print_json(d, out, summaries);
		summaries = NULL;
	} else if (o->format == FMT_SARIF) {
		diag_print_sarif(d, out, status == 0);
	} else {
		if (o->quiet)
			diag_drop_remarks(d);
		diag_print_text(d, err, o->color);
		if (d->nerrors)
			fprintf(err, "%d error%s generated.\n", d->nerrors,
				d->nerrors == 1 ? "" : "s");
		else if (summaries && !o->quiet)
			for (cJSON *s = summaries->child; s; s = s->next)
				summary_print_text(s, out);
	}
	cJSON_Delete(summaries);
	if (status)
		return status;
	return d->nerrors ? 1 : 0;
}

/* --config: its keys join the overrides ahead of -D's, so the plan's
 * `model m(k = v)` < the config < -D. Read once per command, after the
 * plan files (whose indices start at 0: a root plan is file 0). Returns an
 * exit status: 0 to go on, 1 after errors in d, 2 when unreadable. */
static int read_config(struct arena *a, struct diag_ctx *d, struct compile_opts *co, FILE *err)
{
	if (!co->config)
		return 0;
	struct override *ov;
	int n;
	int rc = config_overrides(a, d, co->config, co->defines, co->ndefines, &ov, &n, err);
	if (!rc) {
		co->defines = ov;
		co->ndefines = n;
	}
	return rc;
}

/* ---- the front half: resolve, lay out, check ----------------------------------- */

/* --verify's reference: the same model on one rank (every style becomes a
 * no-op), and the float32 program. */
static void make_one_rank(struct plan_cfg *c)
{
	for (int i = 0; i < c->naxes; i++)
		c->axes[i].size = 1;
	c->ring = c->ulysses = c->tp = c->cfg = c->world = 1;
	c->dtype = G_DT_F32;
}

static bool same_error(const struct diag *x, const struct diag *y)
{
	return x->loc.file == y->loc.file && x->loc.line == y->loc.line &&
	       x->loc.col == y->loc.col && !strcmp(x->msg, y->msg);
}

/* A hint that proposes a context option (diag.context) is tried before it
 * is offered: the plan is checked again with the option added to
 * --context. It stays only if that removes an error and adds none;
 * otherwise it says why the option would not help. from: the first
 * diagnostic of this plan's checks. */
static void try_context_hints(struct arena *a, struct diag *from, const struct program *prog,
			      const struct plan *p, const struct compile_opts *co, bool one_rank)
{
	for (struct diag *e = from; e; e = e->next)
		for (struct diag *h = e->children; h; h = h->next) {
			const char *opt = h->context;
			if (!opt)
				continue;
			struct compile_opts with = *co;
			with.context = co->context ? arena_printf(a, "%s, %s", co->context, opt) : opt;
			struct diag_ctx d2;
			diag_init(&d2, a);
			struct plan_cfg *c = plan_resolve(a, &d2, prog, p, &with);
			if (c && !d2.nerrors && one_rank)
				make_one_rank(c);
			if (c && !d2.nerrors)
				layout_run(a, &d2, c);
			int before = 0;
			for (const struct diag *x = from; x; x = x->next)
				before += x->level == DIAG_ERROR;
			const struct diag *added = NULL;
			for (const struct diag *x = d2.head; x && !added; x = x->next) {
				bool known = x->level != DIAG_ERROR;
				for (const struct diag *y = from; y && !known; y = y->next)
					known = same_error(x, y);
				added = known ? NULL : x;
			}
			if (added || d2.nerrors >= before)
				h->msg = arena_printf(a, "%s would not help: %s", opt,
						      added ? added->msg : "the error stays");
			diag_release(&d2);
		}
}

struct layout_result *check_plan(struct arena *a, struct diag_ctx *d, const struct program *prog,
				 const struct plan *p, const struct compile_opts *co,
				 const struct check_plan_opts *how, struct plan_cfg **cfg)
{
	int before = d->nerrors;
	struct diag *mark = d->tail;
	struct plan_cfg *c = plan_resolve(a, d, prog, p, co);
	if (cfg)
		*cfg = c;
	if (!c)
		return NULL;
	if (how->dumps & DUMP_IR)
		dump_ir(how->out, a, c->model);
	if (how->dumps & DUMP_STYLES)
		dump_styles(how->out, c);
	if (d->nerrors > before)
		return NULL;
	if (how->one_rank)
		make_one_rank(c);
	struct layout_result *lay = layout_run(a, d, c);
	try_context_hints(a, mark ? mark->next : d->head, prog, p, co, how->one_rank);
	/* after the hints, which re-check without it */
	if (d->nerrors == before)
		fold_check_positions(d, c, lay);
	if (how->dumps & DUMP_LAYOUT)
		dump_layout(how->out, a, c, lay);
	return d->nerrors == before ? lay : NULL;
}

/* The passes from a checked layout to a graph ready to serialize, written
 * once for every path that lowers (the compile command, the in-memory
 * graphs of run --verify and cost, the pipeline fuzzer): the lowering, the
 * fold of position generators into rope_freqs, the fusion of a linear and
 * its activation (fuse.c; not with --no-fuse), the memory plan. NULL when
 * the lowering reported an error. */
struct g_graph *driver_lower(struct arena *a, struct diag_ctx *d, struct plan_cfg *c,
			     const struct layout_result *lay, const struct lower_opts *lo)
{
	struct g_graph *g = d->nerrors ? NULL : lower_plan(a, d, c, lay, lo);
	if (!g)
		return NULL;
	fold_positions(a, g);
	if (!lo->no_fuse)
		fuse_linear_act(a, g, lo->fuse_dump);
	memplan_run(a, g);
	return g;
}

/* One plan of `dtpc check`: its passes, and its summary when it is clean. */
static void check_one(const struct check_opts *o, struct arena *a, struct diag_ctx *d,
		      const struct program *prog, const struct plan *p, cJSON *summaries,
		      FILE *out)
{
	struct plan_cfg *c;
	const struct check_plan_opts how = { .dumps = o->dumps, .out = out };
	struct layout_result *lay = check_plan(a, d, prog, p, &o->co, &how, &c);
	if (lay)
		cJSON_AddItemToArray(summaries, summary_build(a, c, lay));
}

/* Ends the line of a plan that was not found with the file's plans, and
 * returns the exit status: a syntax error can swallow a plan's header, so
 * with errors in the file they are the verdict (0 here: the diagnostics
 * decide), else it is a usage error (2). */
static int list_plans(const struct diag_ctx *d, const struct program *prog, FILE *err)
{
	const char *sep = "; plans:";
	for (const struct plan *q = prog->plans; q; q = q->next, sep = ",")
		fprintf(err, "%s %s", sep, q->name);
	fprintf(err, "%s\n", d->nerrors ? " (errors in the file may hide it)" : "");
	return d->nerrors ? 0 : 2;
}

/* What check and compile do first: the file read and parsed, the
 * declarations checked, --config's keys put before -D. -1: go on; else the
 * exit status (2: the file or the config unreadable; 0: the config's
 * errors are diagnostics, printed with the others). */
static int open_program(struct arena *a, struct diag_ctx *d, struct check_opts *o,
			struct program *prog, FILE *err)
{
	if (!driver_readable(o->file, err))
		return 2;
	if (!parse_program(a, d, o->file, prog)) {
		fprintf(err, "dtpc: cannot read '%s': %s\n", o->file, strerror(errno));
		return 2;
	}
	check_declarations(d, prog);
	int config_rc = read_config(a, d, &o->co, err);
	return config_rc ? (config_rc == 2 ? 2 : 0) : -1;
}

int driver_check(const struct check_opts *opts, FILE *out, FILE *err)
{
	struct check_opts with_config = *opts, *o = &with_config;
	struct arena *a = arena_create();
	struct diag_ctx d;
	diag_init(&d, a);
	struct program prog;
	int status = 0;
	cJSON *summaries = cJSON_CreateArray();
	int opened = open_program(a, &d, o, &prog, err);
	if (opened >= 0) {
		status = opened;
		goto done;
	}

	const struct plan *only = NULL;
	if (o->co.plan) {
		for (const struct plan *p = prog.plans; p; p = p->next)
			if (!strcmp(p->name, o->co.plan))
				only = p;
		if (!only) {
			fprintf(err, "dtpc: no plan named '%s' in '%s'", o->co.plan, o->file);
			status = list_plans(&d, &prog, err);
			goto done;
		}
	}
	bool any_plan = false;
	for (const struct plan *p = prog.plans; p; p = p->next)
		any_plan |= p->loc.file == 0;
	if (!any_plan && !only) {
		/* A file of models alone: check each with its defaults. */
		for (const struct model *m = prog.models; m; m = m->next) {
			if (m->loc.file != 0)
				continue;
			struct ir_model *im = plan_model_only(a, &d, m, &o->co);
			if (o->dumps & DUMP_IR)
				dump_ir(out, a, im);
			if (d.nerrors == 0 && !o->quiet && o->format == FMT_TEXT) {
				int64_t el = 0;
				for (int i = 0; i < im->nweights; i++)
					el += shape_numel(&im->weights[i].shape);
				fprintf(out, "model %s: %d ops, %d modules, %d weights "
					"(%" PRId64 " elements); no plan to check\n",
					im->name, im->nops, im->nmodules, im->nweights, el);
			}
		}
		goto done;
	}
	int nchecked = 0;
	for (const struct plan *p = prog.plans; p; p = p->next)
		nchecked += only ? p == only : p->loc.file == 0;
	for (const struct plan *p = prog.plans; p; p = p->next) {
		if (only ? p != only : p->loc.file != 0)
			continue;
		struct diag *mark = d.tail;
		bool fresh = d.head == NULL;
		check_one(o, a, &d, &prog, p, summaries, out);
		/* (past the error limit the tail is gone: nothing more to name) */
		if (nchecked > 1 && (mark || fresh))
			diag_name_remarks(&d, mark, p->name);
	}
done:;
	int rc = finish(o, &d, summaries, out, err, status);
	diag_release(&d);
	arena_free(a);
	return rc;
}

/* ---- compile ----------------------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
	return h;
}

/* Of the plan files read (registered first; not a pseudo-file such as
 * <command line>, nor --config's file, whose values the graph records as
 * parameters): a graph records it, so --verify can tell when its source
 * has changed. */
static uint64_t sources_hash(const struct diag_ctx *d, const struct program *prog)
{
	uint64_t h = 1469598103934665603ull;
	for (int i = 0; i < prog->nfiles && i < d->nfiles; i++)
		if (d->files[i].path[0] != '<')
			h = fnv1a(h, d->files[i].text, d->files[i].len);
	return h;
}

static void report(const struct g_graph *g, size_t len, FILE *out)
{
	fprintf(out, "graph: %zu bytes; %u ops, %u tensors; world %u\n", len, g->nops,
		g->ntensors, g->world);
	/* uneven splits give the first ranks the most: show the first and last */
	uint32_t ranks[2] = { 0, g->world - 1 };
	for (int k = 0; k < (g->world > 1 ? 2 : 1); k++) {
		uint32_t r = ranks[k];
		struct graph_comm_row rows[64];
		int n = 0;
		graph_comm_summary(g, r, rows, &n, 64);
		fprintf(out, "rank %u, per forward pass:\n", r);
		uint64_t total = 0;
		for (int i = 0; i < n; i++) {
			const struct g_group *gr = &g->groups[rows[i].group];
			char axes[64];
			size_t l = 0;
			for (uint32_t a = 0; a < gr->naxes; a++)
				l += (size_t)snprintf(axes + l, sizeof axes - l, "%s%s", a ? "x" : "",
						      graph_str(g, g->axes[gr->axes[a]].name));
			fprintf(out, "  %-15s over %-14s %6d ops %14" PRIu64 " bytes\n",
				op_table[rows[i].kind].name, axes, rows[i].count, rows[i].bytes);
			total += rows[i].bytes;
		}
		fprintf(out, "  %-15s %-19s %6s     %14" PRIu64 " bytes\n", "communication", "", "", total);
		fprintf(out, "  activation arena %" PRIu64 " bytes, weights %" PRIu64 " bytes\n",
			g->arena_bytes, graph_weight_bytes(g, r));
		uint32_t nwg;
		uint64_t sent, whole;
		graph_weight_gathers(g, r, &nwg, &sent, &whole);
		if (nwg)
			fprintf(out, "  fsdp: %u weights all-gathered before their ops, %" PRIu64
				" bytes of the all_gather above; %" PRIu64 " bytes whole\n",
				nwg, sent, whole);
	}
}

static bool write_file(const char *path, const void *buf, size_t len, FILE *err)
{
	/* A device or FIFO is written in place: renaming over it would replace
	 * the node itself (-o /dev/null as root left a regular file there) and
	 * hide the device's own write error (/dev/full). */
	struct stat st;
	if (!stat(path, &st) && !S_ISREG(st.st_mode)) {
		FILE *d = S_ISDIR(st.st_mode) ? NULL : fopen(path, "wb");
		bool done = d && fwrite(buf, 1, len, d) == len;
		if (d && fclose(d))
			done = false;
		if (!done)
			fprintf(err, "dtpc: cannot write '%s': %s\n", path,
				strerror(S_ISDIR(st.st_mode) ? EISDIR : errno));
		return done;
	}
	char *tmp = malloc(strlen(path) + 8);
	if (!tmp)
		return false;
	sprintf(tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "wb");
	bool ok = f && fwrite(buf, 1, len, f) == len;
	if (f && fclose(f))
		ok = false;
	/* rename: a reader never sees half a graph */
	if (ok && rename(tmp, path))
		ok = false;
	if (!ok) {
		fprintf(err, "dtpc: cannot write '%s': %s\n", path, strerror(errno));
		remove(tmp);
	}
	free(tmp);
	return ok;
}

int driver_compile(const struct check_opts *opts, const char *out_path, bool verbose,
		   FILE *out, FILE *err)
{
	struct check_opts with_config = *opts, *o = &with_config;
	struct arena *a = arena_create();
	struct diag_ctx d;
	diag_init(&d, a);
	struct program prog;
	int status = 0;
	cJSON *report_json = NULL; /* -v --format json: printed with the diagnostics */
	int opened = open_program(a, &d, o, &prog, err);
	if (opened >= 0) {
		status = opened;
		goto done;
	}
	const struct plan *p = NULL;
	int nroot = 0;
	for (const struct plan *q = prog.plans; q; q = q->next) {
		if (o->co.plan ? !strcmp(q->name, o->co.plan) : q->loc.file == 0)
			p = p ? p : q;
		nroot += q->loc.file == 0;
	}
	if (!p || (!o->co.plan && nroot > 1)) {
		if (o->co.plan)
			fprintf(err, "dtpc: no plan named '%s' in '%s'", o->co.plan, o->file);
		else if (nroot)
			fprintf(err, "dtpc: '%s' has %d plans of its own; choose one with --plan", o->file,
				nroot);
		else
			fprintf(err, "dtpc: '%s' has no plan to compile", o->file);
		status = list_plans(&d, &prog, err);
		goto done;
	}
	struct plan_cfg *c;
	const struct check_plan_opts how = { .dumps = o->dumps, .out = out };
	struct layout_result *lay = check_plan(a, &d, &prog, p, &o->co, &how, &c);
	/* errors before the plan's own (a model declared twice) stop it too */
	if (!lay || d.nerrors)
		goto done;
	struct lower_opts lo = { .source_path = o->file, .source_hash = sources_hash(&d, &prog),
				 .no_fuse = o->co.no_fuse,
				 .fuse_dump = o->dumps & DUMP_FUSE ? out : NULL };
	struct g_graph *g = driver_lower(a, &d, c, lay, &lo);
	if (!g)
		goto done;
	size_t len = 0;
	void *buf = graph_serialize(g, &len);
	if (!buf) {
		fprintf(err, "dtpc: out of memory serializing the graph\n");
		status = 2;
		goto done;
	}
	/* read back what was written: the loader's checks cover the compiler */
	struct g_graph back;
	if (!graph_parse(buf, len, &back)) {
		fprintf(err, "dtpc: internal error: the graph does not load: %s\n",
			g_error()->msg);
		free(buf);
		status = 2;
		goto done;
	}
	if ((o->dumps & DUMP_GRAPH) && o->dump_graph)
		o->dump_graph(&back, len, out);
	if (!write_file(out_path, buf, len, err))
		status = 2;
	else if (verbose && o->format == FMT_JSON)
		report_json = summary_report(&back, out_path, len);
	else if (verbose)
		report(&back, len, out);
	free(buf);
done:;
	if (o->quiet)
		diag_drop_remarks(&d);
	if (o->format == FMT_JSON) {
		diag_print_json_as(&d, out, "report", report_json);
	} else {
		diag_print_text(&d, err, o->color);
		if (d.nerrors)
			fprintf(err, "%d error%s generated.\n", d.nerrors, d.nerrors == 1 ? "" : "s");
	}
	int rc = status ? status : d.nerrors ? 1 : 0;
	diag_release(&d);
	arena_free(a);
	return rc;
}

void *driver_graph_buffer(const char *source, const char *plan, const char *mesh,
			  const char *context, struct override *defs, int ndefs, const char *config,
			  bool one_rank, size_t *len, uint64_t *source_hash, FILE *err)
{
	struct arena *a = arena_create();
	struct diag_ctx d;
	diag_init(&d, a);
	struct program prog;
	void *buf = NULL;
	if (!parse_program(a, &d, source, &prog)) {
		fprintf(err, "dtpc: cannot read '%s': %s\n", source, strerror(errno));
		goto done;
	}
	const struct plan *p = NULL;
	for (const struct plan *q = prog.plans; q; q = q->next)
		if (!strcmp(q->name, plan))
			p = q;
	if (!p) {
		fprintf(err, "dtpc: '%s' has no plan '%s'\n", source, plan);
		goto done;
	}
	struct compile_opts co = { .defines = defs, .ndefines = ndefs, .mesh = mesh,
				   .context = context, .config = config };
	if (read_config(a, &d, &co, err))
		goto done;
	struct plan_cfg *c;
	const struct check_plan_opts how = { .one_rank = one_rank };
	struct layout_result *lay = check_plan(a, &d, &prog, p, &co, &how, &c);
	if (!lay || d.nerrors)
		goto done;
	struct lower_opts lo = { .source_path = source, .source_hash = sources_hash(&d, &prog) };
	if (source_hash)
		*source_hash = lo.source_hash;
	struct g_graph *g = driver_lower(a, &d, c, lay, &lo);
	if (!g)
		goto done;
	buf = graph_serialize(g, len);
done:
	diag_print_text(&d, err, false);
	diag_release(&d);
	arena_free(a);
	return buf;
}
