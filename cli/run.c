/* run.c — `dtpc run FILE.graph`: replay a graph on N ranks (threads of this
 * process, or MPI processes), optionally checked against the same model run
 * unsharded on one rank. */
#include "run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/arena.h"
#include "compiler/driver.h"
#include "graph/error.h"
#include "median.h"
#include "runtime/dtpc.h"
#include "runtime/safetensors.h"
#include "runtime/session.h"
#include "runtime/weights.h"

struct rank_job {
	const struct run_opts *o;
	const dtpc_graph *g;
	dtpc_local_world *world;
	dtpc_comm *comm; /* MPI: given; local: made by the thread */
	int rank;
	dtpc_session *s;
	dtpc_status st;
	char error[1024];
	double *step_ms;
	bool speaks; /* rank 0 of the run (not --verify's reference): its notes
		      * stand for every rank's */
};

/* The runtime's messages do not name the rank (dtpc_last_error_rank() is
 * it): the report names the ranks itself, and identical failures of
 * several ranks then read as one. */
static void job_fail(struct rank_job *j, dtpc_status st)
{
	j->st = st;
	snprintf(j->error, sizeof j->error, "%s", dtpc_last_error());
}

/* A failure outside the ranks' jobs (the graph, the world, a trace), at the
 * rank it is about where it has one. */
static void say_failure(void)
{
	int rank = dtpc_last_error_rank();
	if (rank >= 0)
		fprintf(stderr, "dtpc: rank %d: %s\n", rank, dtpc_last_error());
	else
		fprintf(stderr, "dtpc: %s\n", dtpc_last_error());
}

/* --threads, or under MPI the cores divided by the ranks on this node (Open
 * MPI and MPICH name them): the session's own default only sees the ranks
 * of its process. 0: that default. */
static int threads_per_rank(const struct run_opts *o)
{
	if (o->threads || o->backend == RUN_LOCAL)
		return o->threads;
	const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	if (!local)
		local = getenv("MPI_LOCALNRANKS");
	long n = local ? strtol(local, NULL, 10) : 0, cores = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 && cores / n > 1 ? (int)(cores / n) : 1;
}

/* The progress line, rewritten in place: steps done, the last step's time,
 * and the rest estimated at the mean so far (the first step, which warms
 * caches and allocates, weighs less as steps accumulate). */
static void show_progress(int done, int steps, double last_ms, double done_ms)
{
	fprintf(stderr, "\rstep %d/%d", done, steps);
	if (done) {
		double left_s = done_ms / done * (steps - done) / 1e3;
		fprintf(stderr, "  %.1f ms/step  ", last_ms);
		if (done == steps)
			fprintf(stderr, "done in %.1fs", done_ms / 1e3);
		else if (left_s >= 60)
			fprintf(stderr, "~%dm%02ds left", (int)(left_s / 60), (int)left_s % 60);
		else
			fprintf(stderr, "~%.1fs left", left_s);
	}
	/* erase what a longer line before left behind */
	fputs("\033[K", stderr);
	fflush(stderr);
}

/* The tensors of the file just bound that the graph does not use, named
 * once for the run (by rank 0): a checkpoint of another variant (Flux dev's
 * under a schnell graph) or an input the graph does not take binds without
 * an error, and reads as if it had been used. */
static void note_unused(const struct rank_job *j, const char *flag, const char *path)
{
	const char *name;
	int n = dtpc_session_unused(j->s, 0, &name);
	if (!j->speaks || !n)
		return;
	char show[256];
	fprintf(stderr, "dtpc: note: %s '%s' holds %d tensor%s this graph does not use: ", flag,
		path, n, n == 1 ? "" : "s");
	enum { NAMED = 3 };
	for (int i = 0; i < n && i < NAMED; i++) {
		dtpc_session_unused(j->s, i, &name);
		fprintf(stderr, "%s'%s'", i ? ", " : "", st_show(name, show, sizeof show));
	}
	if (n > NAMED)
		fprintf(stderr, " and %d more", n - NAMED);
	fputc('\n', stderr);
}

/* One rank: session, weights, inputs, K forward passes. */
static void *rank_main(void *arg)
{
	struct rank_job *j = arg;
	const struct run_opts *o = j->o;
	dtpc_status st;
	if (!j->comm && (st = dtpc_comm_local(j->world, j->rank, &j->comm)))
		return job_fail(j, st), NULL;
	if ((st = dtpc_session_create(j->g, j->comm, o->device, &j->s)))
		return job_fail(j, st), NULL;
	dtpc_session_graphs(j->s, o->cuda_graph);
	if (threads_per_rank(o) && (st = dtpc_session_threads(j->s, threads_per_rank(o)))) {
		job_fail(j, st);
		dtpc_session_free(j->s);
		j->s = NULL;
		return NULL;
	}
	st = o->dtype_set ? dtpc_session_dtype(j->s, o->dtype) : DTPC_OK;
	if (!st)
		st = o->weights ? dtpc_session_bind_weights_file(j->s, o->weights)
				: dtpc_session_bind_weights_seed(j->s, o->seed);
	if (!st && o->weights)
		note_unused(j, "--weights", o->weights);
	if (!st)
		st = o->inputs ? dtpc_session_bind_inputs_file(j->s, o->inputs)
			       : dtpc_session_bind_inputs_seed(j->s, o->seed);
	if (!st && o->inputs)
		note_unused(j, "--inputs", o->inputs);
	if (st) {
		/* the other ranks must not wait for this one */
		job_fail(j, st);
		dtpc_session_free(j->s);
		j->s = NULL;
		return NULL;
	}
	dtpc_session_trace(j->s, o->trace != NULL);
	/* rank 0 speaks for all: the collectives keep the ranks in step */
	bool progress = j->rank == 0 && o->progress;
	double done_ms = 0;
	if (progress)
		show_progress(0, o->steps, 0, 0);
	for (int k = 0; k < o->steps; k++) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		if ((st = dtpc_session_run(j->s))) {
			if (progress)
				fputc('\n', stderr);
			return job_fail(j, st), NULL;
		}
		clock_gettime(CLOCK_MONOTONIC, &b);
		j->step_ms[k] = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) * 1e-6;
		done_ms += j->step_ms[k];
		if (progress)
			show_progress(k + 1, o->steps, j->step_ms[k], done_ms);
	}
	if (progress)
		fputc('\n', stderr);
	return NULL;
}

/* How an output compares with the reference, as nccl-tests reports it: the
 * normwise max relative error max |a - b| / max |ref| (elementwise ratios
 * blow up where the reference crosses zero, which says nothing about the
 * parallel program), and the count of wrong elements beside it, so one bad
 * element is not lost in the norm. Comparisons are written so that NaN fails
 * them: a non-finite element in either tensor is always wrong. */
struct compare {
	double err;      /* normwise; NaN if an element is not finite */
	int64_t nwrong;  /* |a - b| > tol * max |ref|, plus every non-finite one */
	int64_t nonfinite;
	int64_t first;   /* index of the first wrong element, -1 if none */
};

static struct compare compare_outputs(const float *a, const float *ref, int64_t n, double tol)
{
	double num = 0, den = 0;
	for (int64_t i = 0; i < n; i++)
		if (isfinite(a[i]) && isfinite(ref[i])) {
			num = fmax(num, fabs((double)a[i] - (double)ref[i]));
			den = fmax(den, fabs((double)ref[i]));
		}
	struct compare c = { .err = den > 0 ? num / den : num, .first = -1 };
	double bound = tol * (den > 0 ? den : 1);
	for (int64_t i = 0; i < n; i++) {
		bool finite = isfinite(a[i]) && isfinite(ref[i]);
		if (finite && fabs((double)a[i] - (double)ref[i]) <= bound)
			continue;
		c.nonfinite += !finite;
		if (c.nwrong++ == 0)
			c.first = i;
	}
	/* the norm of a tensor that holds a NaN or an infinity is not finite */
	if (c.nonfinite)
		c.err = NAN;
	return c;
}

static int64_t numel(const int64_t *shape, int nd)
{
	int64_t n = 1;
	for (int d = 0; d < nd; d++)
		n *= shape[d];
	return n;
}

/* A parameter's record in the graph (lower.c's meta_value) as the value it
 * was (a list of mixed items, recorded as its text, comes back a string);
 * false for a type this version does not know. */
static bool meta_value(struct arena *a, const struct g_graph *g, uint32_t i, struct value *v)
{
	const struct g_meta *m = &g->meta[i];
	*v = (struct value){ .loc = loc_none() };
	switch (m->type) {
	case GM_U64:
	case GM_I64: v->kind = VAL_INT; v->i = (int64_t)m->value; return true;
	case GM_F64: v->kind = VAL_FLOAT; memcpy(&v->f, &m->value, sizeof v->f); return true;
	case GM_BOOL: v->kind = VAL_BOOL; v->i = m->value != 0; return true;
	case GM_STR: v->kind = VAL_STR; v->s = graph_str(g, (uint32_t)m->value); return true;
	case GM_I64_ARRAY:
	case GM_STR_ARRAY: {
		const uint64_t *items = graph_meta_items(g, i);
		v->kind = VAL_LIST;
		v->n = (int)graph_meta_len(g, i);
		v->items = ARENA_ARRAY(a, struct value, v->n + 1);
		for (int k = 0; k < v->n; k++)
			v->items[k] = m->type == GM_I64_ARRAY
				? (struct value){ .kind = VAL_INT, .i = (int64_t)items[k] }
				: (struct value){ .kind = VAL_STR, .s = graph_str(g, (uint32_t)items[k]) };
		return true;
	}
	}
	return false;
}

/* The one-rank reference: recompile the plan with every axis 1. */
static int verify(const struct run_opts *o, const dtpc_graph *g, dtpc_session *s)
{

	const char *src = dtpc_graph_meta(g, "source"), *plan = dtpc_graph_meta(g, "plan");
	if (!src || !plan) {
		fprintf(stderr, "dtpc: --verify: the graph does not name its source plan\n");
		return 2;
	}
	if (!strcmp(src, "-")) {
		fprintf(stderr, "dtpc: --verify: the graph was compiled from standard input, which "
			"cannot be read again; compile it from a file to verify\n");
		return 2;
	}
	/* the parameters the graph was compiled with (--config's among them),
	 * as -D, from their typed records: the text of a list or of a string
	 * such as "4" reads back as another kind */
	struct arena *a = arena_create();
	int n = 0;
	const struct g_graph *gg = &g->g;
	struct value none = { .kind = VAL_NONE };
	for (uint32_t i = 0; i < gg->nmeta; i++)
		if (!strcmp(graph_str(gg, gg->meta[i].key), "params_none"))
			meta_value(a, gg, i, &none);
	struct override *defs = ARENA_ARRAY(a, struct override,
					    gg->nmeta + 1 + (none.kind == VAL_LIST ? none.n : 0));
	/* the parameters that are none (diffusers' None), listed by name */
	for (int k = 0; none.kind == VAL_LIST && k < none.n; k++)
		defs[n++] = (struct override){ .name = none.items[k].s, .from_cli = true,
					       .val = { .kind = VAL_NULL, .loc = loc_none() } };
	for (uint32_t i = 0; i < gg->nmeta; i++) {
		const char *key = graph_str(gg, gg->meta[i].key);
		if (strncmp(key, "param.", 6))
			continue;
		defs[n].name = arena_strdup(a, key + 6);
		if (!meta_value(a, gg, i, &defs[n].val))
			continue;
		/* a list of numbers (LTX's rope_interpolation_scale) is recorded
		 * as its text: read it back as -D reads it (a string parameter
		 * whose value starts with '[' would come back a list, refused by
		 * the kind check rather than taken) */
		if (defs[n].val.kind == VAL_STR && defs[n].val.s[0] == '[')
			defs[n].val = value_from_cli(a, defs[n].val.s);
		defs[n].from_cli = true;
		n++;
	}
	size_t len = 0;
	uint64_t hash = 0;
	const char *mesh = dtpc_graph_meta(g, "mesh"), *ctx = dtpc_graph_meta(g, "context");
	void *buf = driver_graph_buffer(src, plan, mesh && strcmp(mesh, "(none)") ? mesh : NULL,
					   ctx, defs, n, NULL, true, &len, &hash, stderr);
	arena_free(a);
	const char *want = dtpc_graph_meta(g, "source_hash");
	if (buf && want && strtoull(want, NULL, 10) != hash) {
		fprintf(stderr, "dtpc: --verify: '%s' has changed since the graph was compiled; "
			"recompile it to verify\n", src);
		free(buf);
		return 2;
	}
	if (!buf) {
		fprintf(stderr, "dtpc: --verify: cannot compile the one-rank reference of '%s' from '%s'\n",
			plan, src);
		return 2;
	}
	dtpc_graph *rg = NULL;
	dtpc_status st = dtpc_graph_open_buffer(buf, len, &rg);
	free(buf);
	double *ms = calloc(1, sizeof *ms);
	/* the reference is the plain CPU program, whatever the run's device */
	struct run_opts ro = *o;
	ro.steps = 1;
	ro.trace = NULL;
	ro.progress = false;
	ro.device = DTPC_DEVICE_CPU;
	ro.dtype_set = false; /* driver_graph_buffer's one-rank graph is float32 */
	ro.backend = RUN_LOCAL;
	struct rank_job j = { .o = &ro, .g = rg, .rank = 0, .step_ms = ms };
	if (!st)
		st = dtpc_local_world_create(1, o->timeout_ms, &j.world);
	if (st) {
		fprintf(stderr, "dtpc: --verify: %s\n", dtpc_last_error());
		dtpc_graph_free(rg);
		free(ms);
		return 2;
	}
	rank_main(&j);
	int rc = 0;
	/* a 16-bit storage (the graph's or --dtype) against the float32
	 * reference: bf16 keeps 8 bits */
	const char *gdt = dtpc_graph_meta(g, "dtype");
	bool narrow = o->dtype_set ? o->dtype != DTPC_F32 : gdt && strcmp(gdt, "f32");
	double tol = o->tolerance_set || !narrow ? o->tolerance : 2e-2;
	if (j.st) {
		fprintf(stderr, "dtpc: --verify: the reference failed: %s\n", j.error);
		rc = 1;
	}
	for (int i = 0; !rc && i < dtpc_session_noutputs(s); i++) {
		const char *name;
		const float *out, *ref = NULL;
		const int64_t *shape, *rshape = NULL;
		int nd, rnd = 0;
		dtpc_session_output(s, i, &name, &out, &shape, &nd);
		for (int k = 0; k < dtpc_session_noutputs(j.s); k++) {
			const char *rn;
			dtpc_session_output(j.s, k, &rn, &ref, &rshape, &rnd);
			if (!strcmp(rn, name))
				break;
			ref = NULL;
		}
		if (!ref || rnd != nd || numel(rshape, rnd) != numel(shape, nd)) {
			fprintf(stderr, "dtpc: --verify: output '%s' has no counterpart in the reference\n",
				name);
			rc = 1;
			break;
		}
		int64_t count = numel(shape, nd);
		struct compare c = compare_outputs(out, ref, count, tol);
		bool ok = c.nwrong == 0;
		printf("verify: output %-24s max relative error %.3g (tolerance %.0e), "
		       "#wrong %" PRId64 " of %" PRId64, name, c.err, tol, c.nwrong, count);
		if (c.nonfinite)
			printf(" (%" PRId64 " not finite)", c.nonfinite);
		if (c.first >= 0) {
			/* a NaN's sign bit depends on how it arose: print it unsigned */
			double x = out[c.first], r = ref[c.first];
			printf(", first at index %" PRId64 ": %.9g, reference %.9g", c.first,
			       isnan(x) ? NAN : x, isnan(r) ? NAN : r);
		}
		printf(": %s\n", ok ? "ok" : "FAILED");
		if (!ok)
			rc = 1;
	}
	dtpc_session_free(j.s);
	dtpc_comm_free(j.comm);
	dtpc_local_world_free(j.world);
	dtpc_graph_free(rg);
	free(ms);
	return rc;
}

static int save_outputs(const char *path, dtpc_session *s)
{
	int n = dtpc_session_noutputs(s);
	struct st_tensor *t = calloc((size_t)(n ? n : 1), sizeof *t);
	for (int i = 0; t && i < n; i++) {
		const float *data;
		const int64_t *shape;
		dtpc_session_output(s, i, &t[i].name, &data, &shape, &t[i].ndim);
		t[i].dtype = ST_F32;
		for (int d = 0; d < t[i].ndim; d++)
			t[i].shape[d] = shape[d];
		t[i].data = data;
		t[i].nbytes = (size_t)numel(shape, t[i].ndim) * 4;
	}
	const char *meta[] = { "format", "dtpc outputs" };
	bool ok = t && st_write(path, t, (size_t)n, meta, 1);
	if (!ok)
		fprintf(stderr, "dtpc: --save-outputs: %s\n", t ? g_error()->msg : "out of memory");
	free(t);
	return ok ? 0 : 2;
}

/* An output path is tried before the forward pass, not after it: an existing
 * file must be writable, a new one creatable (it is not left behind). A FIFO
 * must have a reader already: O_NONBLOCK fails at once (ENXIO) where a plain
 * open would wait for one for ever. */
static bool writable(const char *path, FILE *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0666);
	bool created = fd >= 0;
	if (fd < 0 && errno == EEXIST)
		fd = open(path, O_WRONLY | O_NONBLOCK);
	if (fd < 0) {
		fprintf(err, "dtpc: cannot write '%s': %s\n", path,
			errno == ENXIO ? "a FIFO that no process reads" : strerror(errno));
		return false;
	}
	/* a FIFO's reader sees its end when the last writer closes: this one
	 * stays open until dtpc exits, or the write after the run would find
	 * the reader gone and wait for ever */
	struct stat st;
	if (fstat(fd, &st) || !S_ISFIFO(st.st_mode))
		close(fd);
	if (created)
		unlink(path);
	return true;
}

/* --weights: a file, or a folder (a sharded checkpoint, or per-rank files)
 * that can be listed; what the folder holds is the runtime's to judge. */
static bool weights_readable(const char *path, FILE *err)
{
	struct stat st;
	if (stat(path, &st) || !S_ISDIR(st.st_mode))
		return driver_readable(path, err);
	DIR *d = opendir(path);
	if (!d) {
		fprintf(err, "dtpc: cannot read '%s': %s\n", path, strerror(errno));
		return false;
	}
	closedir(d);
	return true;
}

/* --verify's one-rank reference binds the whole weights: a per-rank folder
 * holds only the slices of the graph it was cut for. */
static bool verify_weights_ok(const struct run_opts *o, FILE *err)
{
	struct ckpt *ck = NULL;
	/* a checkpoint that does not open is refused when it is bound */
	bool ranked = o->verify && o->weights && ckpt_open(&ck, o->weights) &&
		      ckpt_kind(ck) == CKPT_RANKS;
	ckpt_close(ck);
	if (ranked)
		fprintf(err, "dtpc: --verify: '%s' is a per-rank folder (dtpc shard): it holds "
			"this graph's slices, not the whole weights the one-rank reference needs; "
			"verify with the checkpoint it was cut from\n", o->weights);
	return !ranked;
}

/* An output that is a regular file this run reads (the graph, the inputs,
 * a weights file) or the other output: writing it would destroy what it
 * reads, or one output the other. Devices (/dev/null twice) are fine. */
static bool same_regular_file(const char *out, const char *in)
{
	struct stat a, b;
	return out && in && !stat(out, &a) && S_ISREG(a.st_mode) && !stat(in, &b) &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static bool clobbers(const char *out, const char *in, const char *what, FILE *err)
{
	if (!same_regular_file(out, in))
		return false;
	fprintf(err, "dtpc: cannot write '%s': it is %s\n", out, what);
	return true;
}

static bool outputs_apart(const struct run_opts *o, const char *trace, const char *save,
			  FILE *err)
{
	const char *outs[] = { trace, save };
	for (int k = 0; k < 2; k++)
		if (clobbers(outs[k], o->graph, "the graph this run reads", err) ||
		    clobbers(outs[k], o->inputs, "the --inputs this run reads", err) ||
		    clobbers(outs[k], o->weights, "the --weights this run reads", err))
			return false;
	/* the two outputs: by name before either exists, by file after; a
	 * device (/dev/null) takes both */
	struct stat st;
	bool device = trace && !stat(trace, &st) && !S_ISREG(st.st_mode);
	if (trace && save && !device && (!strcmp(trace, save) || same_regular_file(trace, save))) {
		fprintf(err, "dtpc: --trace and --save-outputs name the same file '%s'\n", trace);
		return false;
	}
	return true;
}

/* Every file this rank reads or writes, checked before any work: a missing
 * or unwritable file is an I/O error (exit status 2), whatever the backend.
 * trace: this rank's trace path, or NULL. The message goes to err. */
static bool files_ok(const struct run_opts *o, const char *trace, bool saves, FILE *err)
{
	return outputs_apart(o, trace, saves ? o->save_outputs : NULL, err) &&
	       driver_readable(o->graph, err) &&
	       (!o->weights || weights_readable(o->weights, err)) && verify_weights_ok(o, err) &&
	       (!o->inputs || driver_readable(o->inputs, err)) &&
	       (!trace || writable(trace, err)) &&
	       (!saves || !o->save_outputs || writable(o->save_outputs, err));
}

/* jobs: the ranks timed here (all of them locally, one under MPI). */
static void report_time(const struct run_opts *o, struct rank_job *jobs, int n, int world,
			const char *backend)
{
	/* a step takes as long as its slowest rank */
	double *worst = calloc((size_t)o->steps, sizeof *worst);
	if (!worst)
		return;
	for (int k = 0; k < o->steps; k++)
		for (int r = 0; r < n; r++)
			worst[k] = jobs[r].step_ms[k] > worst[k] ? jobs[r].step_ms[k] : worst[k];
	double first = worst[0];
	printf("time: %.2f ms per step (median of %d; first %.2f ms) on %d %s rank%s",
	       median(worst, o->steps), o->steps, first, world, backend, world == 1 ? "" : "s");
	if (o->device != DTPC_DEVICE_CPU)
		printf(", %s device%s", dtpc_device_name(o->device),
		       jobs[0].s && dtpc_session_graphed(jobs[0].s) ? ", CUDA graph replay" : "");
	printf("\n");
	free(worst);
}

static bool same_failure(const struct rank_job *x, const struct rank_job *y)
{
	return x->st == y->st && !strcmp(x->error, y->error);
}

/* Each distinct failure once, with the ranks that report it ("ranks 0-3,
 * 6"): a binding error every rank hits must not fill the screen with copies.
 * In rank order, so the first rank to fail says why and the others report
 * the consequence. Returns the exit status: 2 if any is an I/O error, 1 if
 * any other, 0 if none. */
static int report_failures(const struct rank_job *jobs, int n)
{
	int rc = 0;
	for (int r = 0; r < n; r++) {
		if (!jobs[r].st)
			continue;
		rc = jobs[r].st == DTPC_ERR_IO || rc == 2 ? 2 : 1;
		bool seen = false;
		for (int q = 0; q < r && !seen; q++)
			seen = same_failure(&jobs[q], &jobs[r]);
		if (seen)
			continue;
		int count = 0;
		for (int q = r; q < n; q++)
			count += same_failure(&jobs[q], &jobs[r]);
		fprintf(stderr, "dtpc: rank%s ", count > 1 ? "s" : "");
		/* the ranks as runs: 0-3, 6 */
		const char *sep = "";
		for (int q = r; q < n; q++) {
			if (!same_failure(&jobs[q], &jobs[r]))
				continue;
			int end = q;
			while (end + 1 < n && same_failure(&jobs[end + 1], &jobs[r]))
				end++;
			fprintf(stderr, end > q ? "%s%d-%d" : "%s%d", sep, q, end);
			sep = ", ";
			q = end;
		}
		fprintf(stderr, ": %s: %s\n", dtpc_status_str(jobs[r].st), jobs[r].error);
	}
	return rc;
}

/* Whether the graph has a tensor of kind: a graph without weights (or
 * inputs) has none to seed. */
static bool graph_holds(const dtpc_graph *g, int kind)
{
	for (uint32_t t = 0; t < g->g.ntensors; t++)
		if (g->g.tensors[t].kind == kind)
			return true;
	return false;
}

/* Seeded weights or inputs (no --weights, no --inputs): announced (note:
 * rank 0 speaks), and refused for --save-outputs without --allow-seeded,
 * since a file of the outputs of random weights or inputs reads as a
 * model's result. False, with the message in why, when refused. */
static bool seeded_ok(const struct run_opts *o, const dtpc_graph *g, bool note, char *why,
		      size_t size)
{
	bool w = !o->weights && graph_holds(g, GT_WEIGHT), in = !o->inputs && graph_holds(g, GT_INPUT);
	if (!w && !in)
		return true;
	const char *what = w && in ? "the weights and the inputs" : w ? "the weights" : "the inputs";
	const char *missing = w && in ? "no --weights, no --inputs" : w ? "no --weights" : "no --inputs";
	if (o->save_outputs && !o->allow_seeded) {
		snprintf(why, size, "--save-outputs: %s are seeded random values (%s), so the "
			 "outputs are no model's; give %s, or --allow-seeded to save them", what,
			 missing, w && in ? "--weights and --inputs" : w ? "--weights" : "--inputs");
		return false;
	}
	if (note)
		fprintf(stderr, "dtpc: note: %s are seeded random values (--seed %" PRIu64 "; %s)\n",
			what, o->seed, missing);
	return true;
}

/* Each output that holds a NaN or an infinity, with their count (rank 0's
 * outputs are every rank's): the run failed (1), unless --allow-nonfinite
 * makes it a note. A NaN weight or input, or an overflow, must not pass for
 * a result. */
static int outputs_finite(const struct run_opts *o, const dtpc_session *s)
{
	int rc = 0;
	for (int i = 0; i < dtpc_session_noutputs(s); i++) {
		const char *name;
		const int64_t *shape;
		int nd;
		int64_t bad = 0;
		dtpc_session_output(s, i, &name, NULL, &shape, &nd);
		dtpc_session_output_nonfinite(s, i, &bad);
		if (!bad)
			continue;
		fprintf(stderr, "dtpc: %s: output '%s': %" PRId64 " of %" PRId64 " values are NaN or "
			"Inf%s\n", o->allow_nonfinite ? "note" : "error", name, bad, numel(shape, nd),
			o->allow_nonfinite ? " (--allow-nonfinite)" : "");
		rc = o->allow_nonfinite ? rc : 1;
	}
	return rc;
}

int run_local(const struct run_opts *o)
{
	if (!files_ok(o, o->trace, true, stderr))
		return 2;
	dtpc_graph *g = NULL;
	if (dtpc_graph_open_file(o->graph, &g)) {
		say_failure();
		return 2;
	}
	char why[512];
	if (!seeded_ok(o, g, true, why, sizeof why)) {
		fprintf(stderr, "dtpc: %s\n", why);
		dtpc_graph_free(g);
		return 2;
	}
	int n = o->ranks ? o->ranks : dtpc_graph_world(g);
	dtpc_local_world *w = NULL;
	if (dtpc_local_world_create(n, o->timeout_ms, &w)) {
		say_failure();
		dtpc_graph_free(g);
		return 2;
	}
	struct rank_job *jobs = calloc((size_t)n, sizeof *jobs);
	pthread_t *th = calloc((size_t)n, sizeof *th);
	double *ms = calloc((size_t)n * (size_t)o->steps, sizeof *ms);
	if (!jobs || !th || !ms) {
		fprintf(stderr, "dtpc: out of memory\n");
		return 2;
	}
	for (int r = 0; r < n; r++) {
		jobs[r] = (struct rank_job){ .o = o, .g = g, .world = w, .rank = r, .speaks = r == 0,
					     .step_ms = ms + (size_t)r * (size_t)o->steps };
		if (pthread_create(&th[r], NULL, rank_main, &jobs[r])) {
			fprintf(stderr, "dtpc: cannot start rank %d's thread\n", r);
			return 2;
		}
	}
	for (int r = 0; r < n; r++)
		pthread_join(th[r], NULL);
	int rc = report_failures(jobs, n);
	if (!rc) {
		const char *name;
		const int64_t *shape;
		int nd;
		for (int i = 0; i < dtpc_session_noutputs(jobs[0].s); i++) {
			dtpc_session_output(jobs[0].s, i, &name, NULL, &shape, &nd);
			printf("output %s [", name);
			for (int d = 0; d < nd; d++)
				printf("%s%" PRId64, d ? ", " : "", shape[d]);
			printf("]\n");
		}
		report_time(o, jobs, n, n, "local");
		if (o->trace) {
			dtpc_session **ss = calloc((size_t)n, sizeof *ss);
			for (int r = 0; ss && r < n; r++)
				ss[r] = jobs[r].s;
			if (!ss || dtpc_trace_write(o->trace, ss, n)) {
				say_failure();
				rc = 2;
			}
			free(ss);
		}
		/* non-finite outputs are not saved; --verify still says where
		 * they stand against the reference */
		int nonfinite = outputs_finite(o, jobs[0].s);
		if (!rc && !nonfinite && o->save_outputs)
			rc = save_outputs(o->save_outputs, jobs[0].s);
		if (!rc && o->verify)
			rc = verify(o, g, jobs[0].s);
		rc = rc ? rc : nonfinite;
	}
	for (int r = 0; r < n; r++) {
		dtpc_session_free(jobs[r].s);
		dtpc_comm_free(jobs[r].comm);
	}
	dtpc_local_world_free(w);
	dtpc_graph_free(g);
	free(jobs);
	free(th);
	free(ms);
	return rc;
}

/* Under MPI: how this rank ended, to rank 0 (comm_ops.end), which prints
 * each failure once with the ranks that report it — and names ranks that
 * did not report. Returns the job's exit code on every rank. A backend
 * without end (nccl), or a rank that heard no verdict, speaks for itself. */
static int end_job(struct comm *c, struct rank_job *j, int code)
{
	struct comm_end *ends = c->rank == 0 && c->ops->end ? calloc((size_t)c->world, sizeof *ends)
							     : NULL;
	int job = c->ops->end && (c->rank != 0 || ends)
			  ? c->ops->end(c, code, j->st, j->error, ends) : -1;
	if (job < 0) {
		if (j->st)
			fprintf(stderr, "dtpc: rank %d: %s: %s%s\n", j->rank, dtpc_status_str(j->st),
				j->error, c->ops->end ? " (no word from rank 0, which reports the job)" : "");
		free(ends);
		return code;
	}
	if (ends && job) {
		struct rank_job *all = calloc((size_t)c->world, sizeof *all);
		for (int r = 0; all && r < c->world; r++) {
			all[r].rank = r;
			all[r].st = ends[r].reported ? (dtpc_status)ends[r].status : DTPC_ERR_COMM;
			if (ends[r].reported)
				memcpy(all[r].error, ends[r].why, sizeof all[r].error);
			else
				snprintf(all[r].error, sizeof all[r].error, "did not report within %g s "
					 "(stopped, stuck or gone)", j->o->timeout_ms / 1000.0);
		}
		if (all)
			report_failures(all, c->world);
		free(all);
	}
	free(ends);
	return job;
}

int run_mpi(const struct run_opts *o)
{
	dtpc_comm *c = NULL;
	bool nccl = o->backend == RUN_NCCL;
	if (nccl ? dtpc_comm_nccl(o->timeout_ms, &c) : dtpc_comm_mpi(o->timeout_ms, &c)) {
		say_failure();
		return 2;
	}
	int rank = dtpc_comm_rank(c), rc = 0;
	/* MPI: one trace, gathered to rank 0; NCCL's buffers are the GPU's, so
	 * each rank writes its own (FILE.rankN.json) */
	char trace[4096];
	snprintf(trace, sizeof trace, "%s.rank%d.json", o->trace ? o->trace : "", rank);
	const char *my_trace = !o->trace ? NULL : nccl ? trace : rank == 0 ? o->trace : NULL;
	double *ms = calloc((size_t)o->steps, sizeof *ms);
	dtpc_graph *g = NULL;
	dtpc_status gst = DTPC_OK;
	bool seeds = true; /* seeded_ok: nothing refused */
	struct rank_job j = { .o = o, .comm = c, .rank = rank, .speaks = rank == 0, .step_ms = ms };
	/* a file this rank cannot read or write, or the graph, fails this rank
	 * as a binding would: reported with the others' (rank 0 alone writes
	 * the outputs) */
	char *msg = NULL;
	size_t len = 0;
	FILE *err = open_memstream(&msg, &len);
	bool files = err && files_ok(o, my_trace, rank == 0, err);
	if (err)
		fclose(err);
	if (!files) {
		j.st = DTPC_ERR_IO;
		/* less files_ok's "dtpc: " and newline */
		snprintf(j.error, sizeof j.error, "%.*s", len > 7 ? (int)len - 7 : 0,
			 msg ? msg + 6 : "");
	} else if ((gst = dtpc_graph_open_file(o->graph, &g))) {
		job_fail(&j, gst);
	} else if (!(seeds = seeded_ok(o, g, rank == 0, j.error, sizeof j.error))) {
		j.st = DTPC_ERR_INVALID;
	} else {
		j.g = g;
		rank_main(&j);
	}
	free(msg);
	/* the exit status: 2 for an I/O error, a graph that cannot be loaded
	 * or seeded outputs to save */
	rc = end_job(c->impl, &j, !j.st ? 0 : j.st == DTPC_ERR_IO || gst || !seeds ? 2 : 1);
	if (!rc && o->trace) {
		if (nccl ? dtpc_trace_write(trace, &j.s, 1) : dtpc_trace_write_gathered(o->trace, j.s)) {
			say_failure();
			rc = 2;
		}
	}
	if (!rc && rank == 0) {
		report_time(o, &j, 1, dtpc_comm_size(c), nccl ? "NCCL" : "MPI");
		int nonfinite = outputs_finite(o, j.s);
		if (!nonfinite && o->save_outputs)
			rc = save_outputs(o->save_outputs, j.s);
		if (!rc && o->verify)
			rc = verify(o, g, j.s);
		rc = rc ? rc : nonfinite;
	}
	dtpc_session_free(j.s);
	dtpc_graph_free(g);
	dtpc_comm_free(c);
	free(ms);
	return rc;
}
