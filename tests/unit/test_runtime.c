/* test_runtime.c — the runtime's failure paths and weight binding, through
 * the public API (runtime/dtpc.h), on the tiny DiT compiled in-process.
 *
 * Faults: a rank that exits early, a rank that loaded another graph, a
 * wrong rank count — each must end every rank with a clear error well
 * inside the communicator's timeout (300 ms here; each case must finish in
 * under 5 s). Binding: a missing tensor, a wrong shape, a wrong dtype and a
 * truncated file are errors naming the problem; weights read from a file
 * give exactly the outputs of the same weights generated from a seed.
 * Forged attributes of the embedding ops are refused at session creation.
 * linear_act on a device without the fused entry gives the fused kernel's
 * bits. What a session reports: the tensors of the last file bound that the
 * graph does not use, and each output's non-finite count. Run from the
 * repository root (it reads examples/tiny_dit.plan, tests/fixtures/embed.plan
 * and tests/fuse/fuse.plan). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compiler/driver.h"
#include "runtime/device.h"
#include "graph/graph.h"
#include "graph/op_attrs.h"
#include "runtime/dtpc.h"
#include "graph/graph.h"
#include "runtime/safetensors.h"
#include "runtime/session.h"
#include "tests/local_ranks.h"
#include "tests/unit/unit.h"

enum { TIMEOUT_MS = 300 };

static dtpc_graph *compile(const char *mesh, const char *seq, bool one_rank)
{
	struct override d = { .name = "seq", .from_cli = true };
	d.val.kind = VAL_INT;
	d.val.i = atoi(seq);
	size_t len = 0;
	void *buf = driver_graph_buffer("examples/tiny_dit.plan", "tiny_dit_8", mesh, NULL, &d, 1,
					NULL, one_rank, &len, NULL, stderr);
	dtpc_graph *g = NULL;
	if (buf && dtpc_graph_open_buffer(buf, len, &g))
		g = NULL;
	free(buf);
	return g;
}

enum behaviour { RUN, EXIT_EARLY, WEIGHTS_FILE };

struct job {
	struct local_rank at;
	const dtpc_graph *g;
	enum behaviour how;
	const char *weights;
	dtpc_status st;
	char error[1024];
	float *out; /* copy of output 0 */
	int64_t n;
};

static void *rank_main(void *arg)
{
	struct job *j = arg;
	dtpc_comm *c = NULL;
	dtpc_session *s = NULL;
	if ((j->st = dtpc_comm_local(j->at.w, j->at.rank, &c)))
		goto out;
	if ((j->st = dtpc_session_create(j->g, c, DTPC_DEVICE_CPU, &s)))
		goto out;
	if (j->how == EXIT_EARLY)
		goto out; /* leaves without running: the others must not hang */
	j->st = j->how == WEIGHTS_FILE ? dtpc_session_bind_weights_file(s, j->weights)
				       : dtpc_session_bind_weights_seed(s, 7);
	if (!j->st)
		j->st = dtpc_session_bind_inputs_seed(s, 7);
	if (j->st) {
		/* a rank that cannot start tells the others */
		s->c->ops->fail(s->c, dtpc_last_error());
		goto out;
	}
	if ((j->st = dtpc_session_run(s)))
		goto out;
	const float *data;
	const int64_t *shape;
	int nd;
	dtpc_session_output(s, 0, NULL, &data, &shape, &nd);
	j->n = 1;
	for (int d = 0; d < nd; d++)
		j->n *= shape[d];
	j->out = malloc((size_t)j->n * 4);
	memcpy(j->out, data, (size_t)j->n * 4);
out:
	if (j->st)
		snprintf(j->error, sizeof j->error, "%s", dtpc_last_error());
	dtpc_session_free(s);
	dtpc_comm_free(c);
	return NULL;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs n ranks; graphs[r] per rank; returns seconds taken. */
static double run_ranks(struct job *jobs, int n, const dtpc_graph *const *graphs,
			const enum behaviour *how, const char *weights)
{
	for (int r = 0; r < n; r++)
		jobs[r] = (struct job){ .g = graphs[r], .how = how ? how[r] : RUN, .weights = weights };
	double t0 = now();
	local_ranks(n, TIMEOUT_MS, rank_main, jobs, sizeof jobs[0]);
	return now() - t0;
}

static void free_jobs(struct job *jobs, int n)
{
	for (int r = 0; r < n; r++)
		free(jobs[r].out);
}

static bool all_failed_with(struct job *jobs, int n, const char *needle)
{
	bool any = false;
	for (int r = 0; r < n; r++) {
		if (!jobs[r].st)
			return false;
		any |= strstr(jobs[r].error, needle) != NULL;
	}
	return any;
}

static void faults(const dtpc_graph *g4, const dtpc_graph *other4, const dtpc_graph *g2)
{
	struct job jobs[4];
	const dtpc_graph *same[4] = { g4, g4, g4, g4 };

	enum behaviour early[4] = { RUN, RUN, EXIT_EARLY, RUN };
	double dt = run_ranks(jobs, 4, same, early, NULL);
	bool named = true;
	for (int r = 0; r < 4; r++)
		if (r != 2)
			named &= jobs[r].st == DTPC_ERR_COMM && strstr(jobs[r].error, "2") &&
				 strstr(jobs[r].error, "op ");
	UNIT_CHECK(named && dt < 5, "rank 2 exits early: the others fail naming it and the op "
		   "in %.2f s (rank 0: %s)", dt, jobs[0].error);
	free_jobs(jobs, 4);

	const dtpc_graph *mixed[4] = { g4, g4, other4, g4 };
	dt = run_ranks(jobs, 4, mixed, NULL, NULL);
	UNIT_CHECK(all_failed_with(jobs, 4, "different graph") && dt < 5,
		   "rank 2 loaded another graph: every rank fails in %.2f s (%s)", dt, jobs[0].error);
	free_jobs(jobs, 4);

	const dtpc_graph *two[3] = { g2, g2, g2 };
	dt = run_ranks(jobs, 3, two, NULL, NULL);
	UNIT_CHECK(all_failed_with(jobs, 3, "the graph is for 2 ranks, but the job has 3") && dt < 5,
		   "a 2-rank graph on 3 ranks: every rank fails in %.2f s (%s)", dt, jobs[0].error);
	free_jobs(jobs, 3);
}

/* The full weights of the model, from a one-rank session bound by seed. */
static bool write_weights(const dtpc_graph *g1, const char *path, int variant)
{
	dtpc_local_world *w = NULL;
	dtpc_comm *c = NULL;
	dtpc_session *s = NULL;
	dtpc_local_world_create(1, TIMEOUT_MS, &w);
	dtpc_comm_local(w, 0, &c);
	bool ok = !dtpc_session_create(g1, c, DTPC_DEVICE_CPU, &s) &&
		  !dtpc_session_bind_weights_seed(s, 7);
	struct st_tensor t[256];
	size_t n = 0;
	static int64_t i64[128 * 128];
	for (uint32_t k = 0; ok && k < s->g->ntensors && n < 256; k++) {
		const struct g_tensor *x = &s->g->tensors[k];
		if (x->kind != GT_WEIGHT)
			continue;
		memset(&t[n], 0, sizeof t[n]);
		t[n].name = graph_str(s->g, x->name);
		t[n].dtype = ST_F32;
		t[n].ndim = x->ndim;
		for (int d = 0; d < x->ndim; d++)
			t[n].shape[d] = x->dims[d];
		t[n].data = s->weights[k];
		t[n].nbytes = (size_t)s->numel[k] * 4;
		if (variant && !strcmp(t[n].name, "blocks.1.attn.to_k.weight")) {
			if (variant == 1) /* missing */
				continue;
			if (variant == 2) /* wrong shape */
				t[n].shape[0] /= 2, t[n].nbytes /= 2;
			if (variant == 3) { /* wrong dtype, right shape */
				for (size_t e = 0; e < 128 * 128; e++)
					i64[e] = (int64_t)e;
				t[n].dtype = ST_I64;
				t[n].data = i64;
				t[n].nbytes = sizeof i64;
			}
		}
		n++;
	}
	ok = ok && st_write(path, t, n, NULL, 0);
	dtpc_session_free(s);
	dtpc_comm_free(c);
	dtpc_local_world_free(w);
	return ok;
}

static void binding(const dtpc_graph *g1, const dtpc_graph *g4)
{
	char dir[] = "/tmp/dtpc_runtime_XXXXXX";
	if (!mkdtemp(dir)) {
		UNIT_CHECK(0, "mkdtemp");
		return;
	}
	char path[256];
	struct job seed[4], file[4], bad[4];
	const dtpc_graph *same[4] = { g4, g4, g4, g4 };
	enum behaviour from_file[4] = { WEIGHTS_FILE, WEIGHTS_FILE, WEIGHTS_FILE, WEIGHTS_FILE };

	snprintf(path, sizeof path, "%s/ok.safetensors", dir);
	UNIT_CHECK(write_weights(g1, path, 0), "write the full weights");
	run_ranks(seed, 4, same, NULL, NULL);
	run_ranks(file, 4, same, from_file, path);
	bool equal = !seed[0].st && !file[0].st && seed[0].n == file[0].n &&
		     !memcmp(seed[0].out, file[0].out, (size_t)seed[0].n * 4);
	UNIT_CHECK(equal, "weights from a file (each rank reads its slices) give exactly the "
		   "seeded outputs (%s)", file[0].error);
	free_jobs(seed, 4);
	free_jobs(file, 4);

	static const char *what[] = { NULL, "missing", "wrong shape", "wrong dtype" };
	static const char *needle[] = { NULL, "'blocks.1.attn.to_k.weight' is missing",
					 "has shape [64, 128], but the graph expects [128, 128]",
					 "is I64" };
	for (int v = 1; v <= 3; v++) {
		snprintf(path, sizeof path, "%s/bad%d.safetensors", dir, v);
		write_weights(g1, path, v);
		double dt = run_ranks(bad, 4, same, from_file, path);
		bool ok = true;
		for (int r = 0; r < 4; r++)
			ok &= bad[r].st == DTPC_ERR_BIND || bad[r].st == DTPC_ERR_COMM;
		ok &= bad[0].st == DTPC_ERR_BIND && strstr(bad[0].error, needle[v]);
		UNIT_CHECK(ok && dt < 5, "a %s weight: every rank fails in %.2f s (%s)", what[v], dt,
			   bad[0].error);
		free_jobs(bad, 4);
	}

	/* a file cut short */
	snprintf(path, sizeof path, "%s/ok.safetensors", dir);
	FILE *f = fopen(path, "r+b");
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	fclose(f);
	if (truncate(path, size - 100) == 0) {
		double dt = run_ranks(bad, 4, same, from_file, path);
		bool ok = bad[0].st == DTPC_ERR_FORMAT && strstr(bad[0].error, "ok.safetensors");
		UNIT_CHECK(ok && dt < 5, "a truncated checkpoint: a clear error in %.2f s (%s)", dt,
			   bad[0].error);
		free_jobs(bad, 4);
	} else {
		UNIT_CHECK(0, "truncate");
	}
	for (int v = 1; v <= 3; v++) {
		snprintf(path, sizeof path, "%s/bad%d.safetensors", dir, v);
		remove(path);
	}
	snprintf(path, sizeof path, "%s/ok.safetensors", dir);
	remove(path);
	rmdir(dir);
}

/* A graph whose embedding op was forged (an attribute that no longer fits
 * its tensors, the checksum made right) is refused when the session is made,
 * naming the op and what is wrong, before any kernel runs. */
#define FORGE_ATTR(fn, family, field, v)                 \
	static void fn(struct g_op *o)                  \
	{                                               \
		struct ga_##family a = ga_##family##_get(o); \
		a.field = v;                            \
		ga_##family##_set(o, a);                \
	}
FORGE_ATTR(forge_axis1, rope_freqs, axes_dim[1], 7)
FORGE_ATTR(forge_axis0, rope_freqs, axes_dim[0], 18)
FORGE_ATTR(forge_tdim, timestep_embedding, dim, 255)
FORGE_ATTR(forge_height, grid_ids, height, 5)
FORGE_ATTR(forge_axes, text_ids, axes, 2)
FORGE_ATTR(forge_patch_h, patch, patch[1], 4)
FORGE_ATTR(forge_patch_w, patch, patch[2], 3)
#undef FORGE_ATTR

static void forged_embeddings(void)
{
	static const struct {
		enum op_kind kind;
		void (*forge)(struct g_op *o);
		const char *what;
		const char *want;
	} f[] = {
		{ OP_rope_freqs, forge_axis1, "axes_dim[1] = 7", "(rope_freqs): axes_dim[1] = 7" },
		{ OP_rope_freqs, forge_axis0, "axes_dim[0] = 18", "(rope_freqs): axes_dim sums to" },
		{ OP_timestep_embedding, forge_tdim, "dim = 255",
		  "(timestep_embedding): the output must be" },
		{ OP_grid_ids, forge_height, "height = 5", "(grid_ids): the output must be" },
		{ OP_text_ids, forge_axes, "axes = 2", "(text_ids): the output must be" },
		{ OP_patch_embed, forge_patch_h, "patch h = 4",
		  "(patch_embed): the patch does not divide the grid" },
		{ OP_unpatchify, forge_patch_w, "patch w = 3",
		  "(unpatchify): the patch does not divide the grid" },
	};
	size_t len = 0;
	void *buf = driver_graph_buffer("tests/fixtures/embed.plan", "embed_fixture", NULL, NULL,
					NULL, 0, NULL, false, &len, NULL, stderr);
	UNIT_CHECK(buf, "compile tests/fixtures/embed.plan");
	for (size_t k = 0; buf && k < sizeof f / sizeof f[0]; k++) {
		uint64_t *copy = malloc(len);
		struct g_graph g;
		dtpc_graph *dg = NULL;
		memcpy(copy, buf, len);
		bool found = false;
		if (graph_parse(copy, len, &g))
			for (uint32_t i = 0; i < g.nops && !found; i++)
				if (g.ops[i].kind == f[k].kind) {
					f[k].forge((struct g_op *)&g.ops[i]);
					found = true;
				}
		uint64_t sum = graph_checksum(copy, len);
		memcpy((char *)copy + offsetof(struct g_file_header, checksum), &sum, sizeof sum);
		struct job job;
		bool refused = false;
		if (found && !dtpc_graph_open_buffer(copy, len, &dg)) {
			const dtpc_graph *one[1] = { dg };
			run_ranks(&job, 1, one, NULL, NULL);
			refused = job.st == DTPC_ERR_FORMAT && strstr(job.error, f[k].want);
			free_jobs(&job, 1);
		}
		UNIT_CHECK(refused, "a forged %s %s is refused: \"%s\"",
			   op_table[f[k].kind].name, f[k].what,
			   found && dg ? job.error : "(not loaded)");
		dtpc_graph_free(dg);
		free(copy);
	}
	free(buf);
}

/* A device without masked attention or pad (none today; the CUDA device
 * lacked them before it had its own) refuses
 * a graph with them when the session is made, naming the op: the checks of
 * session creation run again on a CPU session whose device table lacks them.
 * Control: with the CPU's table the same checks pass. */
static void device_refuses_masks(void)
{
	size_t len = 0;
	void *buf = driver_graph_buffer("tests/plans/mask.plan", "joint", "ring = 2", NULL, NULL,
					0, NULL, true, &len, NULL, stderr);
	dtpc_graph *g = NULL;
	dtpc_local_world *w = NULL;
	dtpc_comm *c = NULL;
	dtpc_session *s = NULL;
	bool made = buf && !dtpc_graph_open_buffer(buf, len, &g) &&
		    !dtpc_local_world_create(1, TIMEOUT_MS, &w) && !dtpc_comm_local(w, 0, &c) &&
		    !dtpc_session_create(g, c, DTPC_DEVICE_CPU, &s);
	free(buf);
	UNIT_CHECK(made, "a CPU session for a graph with masked attention and pad");
	if (!made)
		goto out;
	const struct dev_ops *cpu = s->dv->ops;
	struct dev_ops lacking = *cpu;
	lacking.masked_attention = false;
	lacking.fill2d = NULL;
	bool attn = false, pad = false, cpu_ok = true;
	for (uint32_t i = 0; i < s->g->nops; i++) {
		enum op_kind k = (enum op_kind)s->g->ops[i].kind;
		s->dv->ops = cpu;
		cpu_ok &= exec_check(s, i) == DTPC_OK;
		s->dv->ops = &lacking;
		dtpc_status st = exec_check(s, i);
		if (k == OP_attention && s->g->ops[i].nin == 4)
			attn |= st == DTPC_ERR_INVALID &&
				strstr(dtpc_last_error(), "(attention 'blocks.0.attn'): the cpu device "
					"has no key-padding mask on attention yet");
		else if (k == OP_pad)
			pad |= st == DTPC_ERR_INVALID &&
			       strstr(dtpc_last_error(), "(pad 'blocks.0.joint_mask'): the cpu device "
				      "has no pad yet");
		else
			cpu_ok &= st == DTPC_OK;
	}
	s->dv->ops = cpu;
	UNIT_CHECK(cpu_ok, "the CPU device's table passes every op's check");
	UNIT_CHECK(attn, "a device without masked attention refuses the masked attention, naming it");
	UNIT_CHECK(pad, "a device without fill2d refuses pad, naming it");
out:
	dtpc_session_free(s);
	dtpc_comm_free(c);
	dtpc_local_world_free(w);
	dtpc_graph_free(g);
}

/* A masked ring graph changed in place (checksum fixed, so it loads): session
 * creation must refuse what would make a kernel read past a buffer — a mask
 * operand that is not [batch, keys] split like the keys, pads that do not
 * add up — naming the op. Control: the graph as compiled makes a session. */
static void forged_session(void *buf, size_t len, const char *want, const char *what)
{
	struct g_file_header *h = buf;
	h->checksum = graph_checksum(buf, len);
	dtpc_graph *g = NULL;
	if (dtpc_graph_open_buffer(buf, len, &g)) {
		UNIT_CHECK(false, "%s: the forged graph did not load: %s", what, dtpc_last_error());
		return;
	}
	struct job jobs[2];
	const dtpc_graph *both[2] = { g, g };
	run_ranks(jobs, 2, both, NULL, NULL);
	bool ok = want ? jobs[0].st == DTPC_ERR_FORMAT && strstr(jobs[0].error, want)
		       : jobs[0].st == DTPC_OK && jobs[1].st == DTPC_OK;
	UNIT_CHECK(ok, "%s: %s", what, jobs[0].st ? jobs[0].error : "ran");
	free_jobs(jobs, 2);
	dtpc_graph_free(g);
}

static void forged_masks(void)
{
	size_t len = 0;
	void *orig = driver_graph_buffer("tests/plans/mask.plan", "joint", "ring = 2", NULL, NULL,
					 0, NULL, false, &len, NULL, stderr);
	struct g_graph g;
	UNIT_CHECK(orig && graph_parse(orig, len, &g),
		   "compile and parse a masked ring graph");
	if (!orig)
		return;
	/* offsets into the buffer: the parsed graph points into it */
	size_t ring = 0, pad = 0;
	for (uint32_t i = 0; i < g.nops; i++) {
		if (g.ops[i].kind == OP_ring_attention && g.ops[i].nin == 4 && !ring)
			ring = (size_t)((const char *)&g.operands[g.ops[i].in0] - (const char *)orig);
		if (g.ops[i].kind == OP_pad && !pad)
			pad = (size_t)((const char *)&g.ops[i] - (const char *)orig);
	}
	UNIT_CHECK(ring && pad, "the graph has a masked ring attention and a pad");
	if (!ring || !pad) {
		free(orig);
		return;
	}
	void *f = malloc(len);
	memcpy(f, orig, len);
	forged_session(f, len, NULL, "control: the masked ring graph as compiled");
	memcpy(f, orig, len);
	uint32_t *opnd = (uint32_t *)((char *)f + ring);
	opnd[3] = opnd[0]; /* q [B, rows, W] as the mask */
	forged_session(f, len, "the mask must be [batch, keys], split like the keys",
		       "a 3-d tensor as the ring's mask is refused");
	memcpy(f, orig, len);
	struct g_op *po = (struct g_op *)((char *)f + pad);
	struct ga_pad pa = ga_pad_get(po);
	pa.after += 1; /* one more row after than the output holds */
	ga_pad_set(po, pa);
	forged_session(f, len, "(pad)", "pads that do not add up are refused");
	free(f);
	free(orig);
}

/* ---- storage dtypes ------------------------------------------------------------ */

/* y = x W^T + b on [1, 3, 4] in bf16: W the identity (from a BF16
 * checkpoint), b 0 (an F32 one). */
static const char bf16_plan[] =
	"model m {\n  input x : [1, 3, 4];\n  y = linear(x, 4);\n  output y;\n}\n"
	"plan p {\n  model m;\n  dtype = \"bf16\";\n}\n";

static uint16_t top16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return (uint16_t)(u >> 16);
}

static float from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static void storage(void)
{
	char dir[] = "/tmp/dtpc_bf16_XXXXXX", plan[300], wpath[300];
	if (!mkdtemp(dir)) {
		UNIT_CHECK(0, "mkdtemp");
		return;
	}
	snprintf(plan, sizeof plan, "%s/m.plan", dir);
	snprintf(wpath, sizeof wpath, "%s/w.safetensors", dir);
	FILE *f = fopen(plan, "w");
	fputs(bf16_plan, f);
	fclose(f);
	size_t len = 0;
	void *buf = driver_graph_buffer(plan, "p", NULL, NULL, NULL, 0, NULL, false, &len, NULL, stderr);
	dtpc_graph *g = NULL;
	UNIT_CHECK(buf && !dtpc_graph_open_buffer(buf, len, &g) &&
			   !strcmp(dtpc_graph_meta(g, "dtype"), "bf16"),
		   "a plan with dtype = \"bf16\" compiles to a bf16 graph");
	free(buf);
	if (!g)
		return;
	/* the weight: the identity, with one entry off the bf16 grid in the
	 * F32 bias: 1 + 2^-8 (a tie: to even, 1) and 1 + 3 * 2^-8 (to 1 + 2^-6) */
	uint16_t wbits[16] = { 0 };
	for (int i = 0; i < 4; i++)
		wbits[i * 5] = 0x3f80;
	wbits[1] = 0x3c01; /* an odd bf16 value, stored as is */
	float bias[4] = { 0, 0, from_bits(0x3f808000), from_bits(0x3f818000) };
	struct st_tensor t[2] = {
		{ .name = "y.weight", .dtype = ST_BF16, .ndim = 2, .shape = { 4, 4 }, .data = wbits,
		  .nbytes = sizeof wbits },
		{ .name = "y.bias", .dtype = ST_F32, .ndim = 1, .shape = { 4 }, .data = bias,
		  .nbytes = sizeof bias },
	};
	UNIT_CHECK(st_write(wpath, t, 2, NULL, 0), "write a bf16 checkpoint: %s", g_error()->msg);
	dtpc_local_world *w = NULL;
	dtpc_comm *c = NULL;
	dtpc_session *s = NULL;
	dtpc_local_world_create(1, TIMEOUT_MS, &w);
	dtpc_comm_local(w, 0, &c);
	dtpc_status st = dtpc_session_create(g, c, DTPC_DEVICE_CPU, &s);
	UNIT_CHECK(!st && s->dtype == DTPC_BF16 && s->esize == 2,
		   "the session stores the graph's dtype: bf16 (%s)", dtpc_last_error());
	if (st)
		goto out;
	st = dtpc_session_dtype(s, DTPC_F32);
	UNIT_CHECK(st == DTPC_ERR_INVALID && strstr(dtpc_last_error(), "compiled for bf16"),
		   "a wider dtype than the graph's is refused: %s", dtpc_last_error());
	UNIT_CHECK(!dtpc_session_dtype(s, DTPC_F16) && !dtpc_session_dtype(s, DTPC_BF16),
		   "one as narrow is taken (f16, and back to bf16)");
	st = dtpc_session_bind_weights_file(s, wpath);
	int64_t tw = -1, tb = -1;
	for (uint32_t k = 0; k < s->g->ntensors; k++) {
		const char *n = graph_str(s->g, s->g->tensors[k].name);
		tw = !strcmp(n, "y.weight") ? k : tw;
		tb = !strcmp(n, "y.bias") ? k : tb;
	}
	UNIT_CHECK(!st && tw >= 0 && tb >= 0 && !memcmp(s->weights[tw], wbits, sizeof wbits),
		   "a BF16 checkpoint tensor is stored bit for bit");
	const uint16_t *bb = (const uint16_t *)s->weights[tb];
	UNIT_CHECK(!st && bb[2] == 0x3f80 && bb[3] == 0x3f82,
		   "an F32 checkpoint tensor is rounded to nearest even at bind (%04x %04x)",
		   bb[2], bb[3]);
	/* x: row r is (r + 1) * (1 + 2^-9 * k) for column k: all but k = 0 off the grid */
	float x[12];
	for (int r = 0; r < 3; r++)
		for (int k = 0; k < 4; k++)
			x[r * 4 + k] = (float)(r + 1) * (1.0f + (float)k / 512);
	int64_t xs[3] = { 1, 3, 4 };
	st = st ? st : dtpc_session_set_input(s, "x", x, xs, 3);
	st = st ? st : dtpc_session_run(s);
	const float *y = NULL;
	bool grid = !st && !dtpc_session_output(s, 0, NULL, &y, NULL, NULL);
	for (int i = 0; grid && i < 12; i++)
		grid = from_bits((uint32_t)top16(y[i]) << 16) == y[i];
	UNIT_CHECK(grid, "the output reads as float32 on the host, holding bf16 values");
	/* y[0] = x00 + x01 w01 = 1 + 1 * 0x3c01 (x01 = 1 + 2^-9 rounds to 1),
	 * rounded: 1 + 2^-7. y[3] = x03 + b3 = (1 + 3 * 2^-9 -> 1 + 2^-7) +
	 * (1 + 2^-6) = 2 + 3 * 2^-7, a tie between 2 + 2^-6 and 2 + 2^-5: to
	 * even, 2 + 2^-5. Unrounded, x03 would give 2 + 2^-6. */
	UNIT_CHECK(grid && y[0] == from_bits(0x3f810000) && y[3] == 2.03125f,
		   "inputs are rounded at bind, outputs once: y[0] = %.9g, y[3] = %.9g",
		   grid ? y[0] : 0.0, grid ? y[3] : 0.0);
out:
	dtpc_session_free(s);
	dtpc_comm_free(c);
	dtpc_local_world_free(w);
	dtpc_graph_free(g);
	remove(plan);
	remove(wpath);
	rmdir(dir);
}

/* A float32 graph narrowed at run time: text positions up to 257, stored
 * (the ids are an output too, so rope_freqs cannot compute them itself:
 * compiler/fold.c), are refused in bf16 (exact up to 256), naming the op;
 * f16 (to 2048) takes them, the control. */
static const char positions_plan[] =
	"model m(txt = 250) {\n  input x : [1, 4, 8];\n"
	"  tids = text_ids(txt, height = 16, width = 16, center = true);\n"
	"  cos = rope_freqs(tids, [2, 2, 4], precision = \"f32\");\n"
	"  y = linear(x, 8);\n  output y, cos, tids;\n}\nplan p {\n  model m;\n}\n";

/* Plan p of a plan file's text, compiled by the driver (NULL after a
 * failed check, its diagnostics on stderr); *len its size. */
static void *compile_text(const char *text, size_t *len)
{
	char dir[] = "/tmp/dtpc_plan_XXXXXX", plan[300];
	if (!mkdtemp(dir)) {
		UNIT_CHECK(0, "mkdtemp");
		return NULL;
	}
	snprintf(plan, sizeof plan, "%s/m.plan", dir);
	FILE *f = fopen(plan, "w");
	fputs(text, f);
	fclose(f);
	void *buf = driver_graph_buffer(plan, "p", NULL, NULL, NULL, 0, NULL, false, len, NULL, stderr);
	remove(plan);
	rmdir(dir);
	return buf;
}

/* A forged copy of a graph, its checksum made right again so that only the
 * forgery is what the loader can refuse: whether it parses. */
static bool parse_forged(void *forged, size_t len, struct g_graph *g)
{
	((struct g_file_header *)forged)->checksum = graph_checksum(forged, len);
	return graph_parse(forged, len, g);
}

static void narrowed_positions(void)
{
	size_t len = 0;
	void *buf = compile_text(positions_plan, &len);
	dtpc_graph *g = NULL;
	UNIT_CHECK(buf && !dtpc_graph_open_buffer(buf, len, &g), "a float32 graph with text "
		   "positions 8 .. 257 compiles");
	free(buf);
	if (!g)
		return;
	dtpc_local_world *w = NULL;
	dtpc_comm *c = NULL;
	dtpc_session *s = NULL;
	dtpc_local_world_create(1, TIMEOUT_MS, &w);
	dtpc_comm_local(w, 0, &c);
	dtpc_status st = dtpc_session_create(g, c, DTPC_DEVICE_CPU, &s);
	UNIT_CHECK(!st, "its session (%s)", st ? dtpc_last_error() : "ok");
	if (!st) {
		st = dtpc_session_dtype(s, DTPC_BF16);
		UNIT_CHECK(st && strstr(dtpc_last_error(), "text_ids") &&
				   strstr(dtpc_last_error(), "position 257 is not exact in bf16") &&
				   s->dtype == DTPC_F32,
			   "narrowed to bf16 at run time, the positions are refused and the session "
			   "stays float32: %s", dtpc_last_error());
		st = dtpc_session_dtype(s, DTPC_F16);
		UNIT_CHECK(!st && s->dtype == DTPC_F16, "control: f16 holds them (%s)",
			   st ? dtpc_last_error() : "taken");
	}
	dtpc_session_free(s);
	dtpc_comm_free(c);
	dtpc_local_world_free(w);
	dtpc_graph_free(g);
}

/* The same text positions (8 .. 257) read only by rope_freqs: the compiler
 * folds text_ids into it (compiler/fold.c), so the graph has no text_ids,
 * its rope_freqs no operand, the text flag, the first position and
 * requires bit 3, and it narrows to bf16 (positions computed in float32;
 * narrowed_positions is the control: stored, they are refused). Forged
 * without the bit or the flag, the loader refuses it. */
static void folded_positions(void)
{
	/* the ids read by rope_freqs alone */
	char text[sizeof positions_plan];
	memcpy(text, positions_plan, sizeof text);
	char *at = strstr(text, "output y, cos, tids;");
	memcpy(at, "output y, cos;      ", 20);
	size_t len = 0;
	void *buf = compile_text(text, &len);
	struct g_graph g;
	UNIT_CHECK(buf && graph_parse(buf, len, &g), "compile the folded graph");
	if (!buf)
		return;
	size_t op = 0, caps = 0;
	bool text_ids = false;
	for (uint32_t i = 0; i < g.nops; i++) {
		text_ids |= g.ops[i].kind == OP_text_ids;
		if (g.ops[i].kind == OP_rope_freqs)
			op = (size_t)((const char *)&g.ops[i] - (const char *)buf);
	}
	const struct g_op *rf = (const struct g_op *)((char *)buf + op);
	struct ga_rope_freqs ra = ga_rope_freqs_get(rf);
	UNIT_CHECK(op && !text_ids && rf->nin == 0 && rf->flags == G_OF_TEXT && ra.first == 8 &&
			   ra.axes_dim[3] == 0 && (g.need.caps & G_CAP_POSITIONS),
		   "text_ids folded into rope_freqs: no ids, text flag, first position 8, "
		   "requires bit 3");
	const struct g_file_header *h = buf;
	const struct g_section *sec = (const struct g_section *)((char *)buf + h->header_size);
	for (uint32_t k = 0; k < h->nsections; k++)
		if (sec[k].id == GS_REQUIRES)
			caps = sec[k].offset + offsetof(struct g_requires, caps);
	dtpc_graph *dg = NULL;
	UNIT_CHECK(!dtpc_graph_open_buffer(buf, len, &dg), "it loads");
	if (dg) {
		dtpc_local_world *w = NULL;
		dtpc_comm *c = NULL;
		dtpc_session *s = NULL;
		dtpc_local_world_create(1, TIMEOUT_MS, &w);
		dtpc_comm_local(w, 0, &c);
		dtpc_status st = dtpc_session_create(dg, c, DTPC_DEVICE_CPU, &s);
		if (!st)
			st = dtpc_session_dtype(s, DTPC_BF16);
		UNIT_CHECK(!st && s->dtype == DTPC_BF16, "narrowed to bf16, positions to 257 taken "
			   "(computed, not stored): %s", st ? dtpc_last_error() : "ok");
		dtpc_session_free(s);
		dtpc_comm_free(c);
		dtpc_local_world_free(w);
		dtpc_graph_free(dg);
	}
	void *forged = malloc(len);
	memcpy(forged, buf, len);
	*(uint64_t *)((char *)forged + caps) &= ~(uint64_t)G_CAP_POSITIONS;
	UNIT_CHECK(caps && !parse_forged(forged, len, &g) &&
			   strstr(g_error()->msg, "requires does not set their capability bit"),
		   "without requires bit 3 it is refused: %s", g_error()->msg);
	memcpy(forged, buf, len);
	struct g_op *fo = (struct g_op *)((char *)forged + op);
	ra = ga_rope_freqs_get(fo);
	ra.text = false;
	ga_rope_freqs_set(fo, ra);
	UNIT_CHECK(!parse_forged(forged, len, &g) &&
			   strstr(g_error()->msg, "0 operands with position flags 0x0"),
		   "a rope_freqs with neither ids nor a position flag is refused: %s",
		   g_error()->msg);
	free(forged);
	free(buf);
}

/* rope's "split" convention in a graph: the flag it compiles to (and the
 * split table's width), and a forged rope holding both conventions' flags
 * refused by the loader (the control: the same bytes with only the split
 * flag load). */
static void forged_rope_flags(void)
{
	static const char text[] =
		"model m() {\n"
		"  input x : [1, 3, 8];\n"
		"  c = ltx2_rope_freqs(8, 3, axes = 1, modality = \"audio\", part = \"cos\", "
		"rope_type = \"split\");\n"
		"  s = ltx2_rope_freqs(8, 3, axes = 1, modality = \"audio\", part = \"sin\", "
		"rope_type = \"split\");\n"
		"  y = rope(x, c, s, heads = 2, convention = \"split\");\n"
		"  output y;\n"
		"}\n"
		"plan p { model m; mesh tp = 1; }\n";
	size_t len = 0;
	void *buf = compile_text(text, &len);
	struct g_graph g;
	UNIT_CHECK(buf && graph_parse(buf, len, &g), "compile the split rope graph");
	if (!buf)
		return;
	size_t op = 0;
	int64_t width = 0;
	for (uint32_t i = 0; i < g.nops; i++) {
		if (g.ops[i].kind == OP_rope)
			op = (size_t)((const char *)&g.ops[i] - (const char *)buf);
		if (g.ops[i].kind == OP_ltx2_rope_freqs)
			width = g.tensors[g.ops[i].out].dims[1];
	}
	const struct g_op *ro = (const struct g_op *)((char *)buf + op);
	UNIT_CHECK(op && ro->flags == G_OF_SPLIT && ga_rope_get(ro).head_dim == 4 && width == 4,
		   "rope split: flag 0x%x (G_OF_SPLIT 0x%x), head dim 4, tables 4 wide (got %lld)",
		   op ? ro->flags : 0, G_OF_SPLIT, (long long)width);
	void *forged = malloc(len);
	memcpy(forged, buf, len);
	((struct g_op *)((char *)forged + op))->flags |= G_OF_HALF;
	UNIT_CHECK(!parse_forged(forged, len, &g) &&
			   strstr(g_error()->msg, "both conventions' flags"),
		   "a rope with the half and split flags is refused: %s", g_error()->msg);
	free(forged);
	free(buf);
}

/* linear_act on a device without the fused entry (dev_ops.linear_act is
 * optional): the executor runs the device's linear, then the activation in
 * place on the output, the same bits as the CPU's fused kernel for gelu,
 * its tanh form and silu (tests/fuse/fuse.plan's plan one fuses all
 * three; it has no gelu left unfused). Controls: a gelu with one element
 * off by 1 changes the output of the fallback, and not that of the fused
 * kernel (which does not call the device's gelu). */
static int (*cpu_gelu)(struct dev *d, const float *x, float *y, int64_t n, bool tanh_approx);

static int gelu_one_off(struct dev *d, const float *x, float *y, int64_t n, bool tanh_approx)
{
	int r = cpu_gelu(d, x, y, n, tanh_approx);
	if (!r && n)
		y[0] += 1;
	return r;
}

/* Runs s with the device table ops; its output 0, malloc'd, in *out. */
static bool run_with(dtpc_session *s, const struct dev_ops *ops, float **out, int64_t *n)
{
	const struct dev_ops *own = s->dv->ops;
	s->dv->ops = ops;
	dtpc_status st = dtpc_session_run(s);
	s->dv->ops = own;
	const float *data;
	const int64_t *shape;
	int nd;
	if (st || dtpc_session_output(s, 0, NULL, &data, &shape, &nd))
		return false;
	*n = 1;
	for (int d = 0; d < nd; d++)
		*n *= shape[d];
	*out = malloc((size_t)*n * 4);
	memcpy(*out, data, (size_t)*n * 4);
	return true;
}

static void linear_act_fallback(void)
{
	size_t len = 0;
	void *buf = driver_graph_buffer("tests/fuse/fuse.plan", "one", NULL, NULL, NULL, 0, NULL,
					false, &len, NULL, stderr);
	dtpc_graph *g = NULL;
	dtpc_local_world *w = NULL;
	dtpc_comm *c = NULL;
	dtpc_session *s = NULL;
	bool made = buf && !dtpc_graph_open_buffer(buf, len, &g) &&
		    !dtpc_local_world_create(1, TIMEOUT_MS, &w) && !dtpc_comm_local(w, 0, &c) &&
		    !dtpc_session_create(g, c, DTPC_DEVICE_CPU, &s) &&
		    !dtpc_session_bind_weights_seed(s, 7) && !dtpc_session_bind_inputs_seed(s, 7);
	free(buf);
	UNIT_CHECK(made, "a CPU session for the fused plan");
	if (!made)
		goto out;
	int fused = 0;
	for (uint32_t i = 0; i < s->g->nops; i++)
		fused += s->g->ops[i].kind == OP_linear_act;
	const struct dev_ops *cpu = s->dv->ops;
	struct dev_ops lacking = *cpu, lacking_off, fused_off = *cpu;
	lacking.linear_act = NULL;
	lacking_off = lacking;
	cpu_gelu = cpu->gelu;
	lacking_off.gelu = fused_off.gelu = gelu_one_off;
	float *a = NULL, *b = NULL, *x = NULL, *f = NULL;
	int64_t na = 0, nb = 0, nx = 0, nf = 0;
	bool ran = run_with(s, cpu, &a, &na) && run_with(s, &lacking, &b, &nb) &&
		   run_with(s, &lacking_off, &x, &nx) && run_with(s, &fused_off, &f, &nf);
	UNIT_CHECK(ran && cpu->linear_act && fused == 8, "the plan runs with and without the "
		   "device's linear_act (%d linear_act ops)", fused);
	if (ran) {
		UNIT_CHECK(na == nb && !memcmp(a, b, (size_t)na * 4),
			   "without the device's linear_act: bit for bit its fused kernel's output");
		UNIT_CHECK(na == nx && memcmp(a, x, (size_t)na * 4),
			   "control: the fallback's gelu with one element off changes the output");
		UNIT_CHECK(na == nf && !memcmp(a, f, (size_t)na * 4),
			   "control: the fused kernel does not call the device's gelu");
	}
	free(f);
	free(a);
	free(b);
	free(x);
out:
	dtpc_session_free(s);
	dtpc_comm_free(c);
	dtpc_local_world_free(w);
	dtpc_graph_free(g);
}

/* A model with a weight and an input (proj's weight and bias; x) for what a
 * session reports after a bind and after a run. */
static const char reports_plan[] =
	"model m {\n  input x : [1, 4, 8];\n  proj = linear(x, 8);\n  y = gelu(x);\n"
	"  output proj, y;\n}\nplan p {\n  model m;\n}\n";

/* Writes n float32 tensors: names[i] of shape [dims[i]] (1-D, or [1, 4, 8]
 * where dims[i] is 32), from data (enough values for the largest). */
static bool write_tensors(const char *path, const char *const *names, const int *dims, int n,
			  const float *data)
{
	struct st_tensor t[8];
	for (int i = 0; i < n; i++) {
		t[i] = (struct st_tensor){ .name = names[i], .dtype = ST_F32, .data = data,
					   .nbytes = (size_t)dims[i] * 4 };
		if (dims[i] == 32) {
			t[i].ndim = 3;
			t[i].shape[0] = 1, t[i].shape[1] = 4, t[i].shape[2] = 8;
		} else if (dims[i] == 64) {
			t[i].ndim = 2;
			t[i].shape[0] = 8, t[i].shape[1] = 8;
		} else {
			t[i].ndim = 1;
			t[i].shape[0] = dims[i];
		}
	}
	return st_write(path, t, (size_t)n, NULL, 0);
}

/* Output i's non-finite values counted here, from its data. */
static int64_t count_nonfinite(const dtpc_session *s, int i)
{
	const float *data;
	const int64_t *shape;
	int nd;
	int64_t n = 1, bad = 0;
	dtpc_session_output(s, i, NULL, &data, &shape, &nd);
	for (int d = 0; d < nd; d++)
		n *= shape[d];
	for (int64_t k = 0; k < n; k++)
		bad += isnan(data[k]) || isinf(data[k]);
	return bad;
}

/* dtpc_session_unused: the tensors of the last file bound that are no
 * tensor of its kind in the graph, in name order (a weight's name in an
 * inputs file is unused there, and an input's in a weights file), replaced
 * by each file bind, left by the others, emptied by a failed one.
 * dtpc_session_output_nonfinite: NaN and both infinities counted, exactly
 * (gelu keeps each where it is: 3 NaN and 2 Inf in x are 5; the linear
 * spreads them over the 2 rows of 8 that hold them: 16); 0 for finite
 * inputs (the control); refused before a run and out of range. */
static void reports(void)
{
	size_t len = 0;
	void *buf = compile_text(reports_plan, &len);
	dtpc_graph *g = NULL;
	UNIT_CHECK(buf && !dtpc_graph_open_buffer(buf, len, &g), "the reports model compiles");
	free(buf);
	char dir[] = "/tmp/dtpc_reports_XXXXXX", wpath[300], ipath[300], cpath[300];
	if (!g || !mkdtemp(dir)) {
		dtpc_graph_free(g);
		return;
	}
	snprintf(wpath, sizeof wpath, "%s/w.safetensors", dir);
	snprintf(ipath, sizeof ipath, "%s/in.safetensors", dir);
	snprintf(cpath, sizeof cpath, "%s/clean.safetensors", dir);
	/* x: its 32 values, and room for the [8, 8] weight the inputs file holds too */
	float data[64], x[64] = { 0 };
	for (int i = 0; i < 64; i++)
		data[i] = 0.01f * (float)((i * 7) % 17 - 8);
	for (int i = 0; i < 32; i++)
		x[i] = 0.1f * (float)(i % 9 - 4);
	static const char *const wnames[] = { "zz.extra", "proj.weight", "x", "proj.bias", "aa.extra" };
	static const int wdims[] = { 1, 64, 32, 8, 3 };
	static const char *const clean_names[] = { "x" };
	static const int clean_dims[] = { 32 };
	bool wrote = write_tensors(wpath, wnames, wdims, 5, data) &&
		     write_tensors(cpath, clean_names, clean_dims, 1, x);
	/* 3 NaN and 2 Inf, in rows 0 and 2 of x */
	x[1] = NAN, x[6] = INFINITY, x[17] = NAN, x[20] = NAN, x[23] = INFINITY;
	static const char *const inames[] = { "x", "proj.weight", "guidance" };
	static const int idims[] = { 32, 64, 1 };
	wrote = wrote && write_tensors(ipath, inames, idims, 3, x);
	UNIT_CHECK(wrote, "write the weights and inputs files");

	dtpc_local_world *w = NULL;
	dtpc_comm *c = NULL;
	dtpc_session *s = NULL;
	dtpc_local_world_create(1, TIMEOUT_MS, &w);
	dtpc_comm_local(w, 0, &c);
	dtpc_status st = dtpc_session_create(g, c, DTPC_DEVICE_CPU, &s);
	UNIT_CHECK(!st, "its session (%s)", st ? dtpc_last_error() : "ok");
	if (st || !wrote)
		goto out;
	const char *name = "?";
	int64_t count = -1;
	UNIT_CHECK(dtpc_session_unused(s, 0, &name) == 0 && !name, "no file bound: nothing unused");
	UNIT_CHECK(dtpc_session_output_nonfinite(s, 0, &count) == DTPC_ERR_STATE && count == -1,
		   "non-finite count before a run: DTPC_ERR_STATE");

	st = dtpc_session_bind_weights_file(s, wpath);
	const char *n0 = NULL, *n1 = NULL, *n2 = NULL, *n3 = "?", *nm = "?";
	int nw = dtpc_session_unused(s, 0, &n0);
	dtpc_session_unused(s, 1, &n1);
	dtpc_session_unused(s, 2, &n2);
	dtpc_session_unused(s, 3, &n3);
	dtpc_session_unused(s, -1, &nm);
	UNIT_CHECK(!st && nw == 3 && n0 && !strcmp(n0, "aa.extra") && n1 && !strcmp(n1, "x") &&
			   n2 && !strcmp(n2, "zz.extra") && !n3 && !nm &&
			   dtpc_session_unused(s, 0, NULL) == 3,
		   "weights file: unused 'aa.extra', 'x' (an input), 'zz.extra' in name order, NULL "
		   "past either end (%d: %s)", nw, st ? dtpc_last_error() : "bound");
	st = dtpc_session_bind_inputs_file(s, ipath);
	int ni = dtpc_session_unused(s, 0, &n0);
	dtpc_session_unused(s, 1, &n1);
	UNIT_CHECK(!st && ni == 2 && n0 && !strcmp(n0, "guidance") && n1 &&
			   !strcmp(n1, "proj.weight"),
		   "inputs file: the list replaced, 'guidance' and 'proj.weight' (a weight) (%d: %s)",
		   ni, st ? dtpc_last_error() : "bound");
	st = dtpc_session_bind_weights_seed(s, 3);
	UNIT_CHECK(!st && dtpc_session_unused(s, 1, &n1) == 2 && n1 && !strcmp(n1, "proj.weight"),
		   "a seeded bind leaves the list");

	st = dtpc_session_run(s);
	UNIT_CHECK(!st, "run (%s)", st ? dtpc_last_error() : "ok");
	int64_t proj = -1, y = -1;
	const char *o0 = NULL, *o1 = NULL;
	dtpc_session_output(s, 0, &o0, NULL, NULL, NULL);
	dtpc_session_output(s, 1, &o1, NULL, NULL, NULL);
	bool named = o0 && o1 && !strcmp(o0, "proj") && !strcmp(o1, "y");
	UNIT_CHECK(named && !dtpc_session_output_nonfinite(s, 0, &proj) &&
			   !dtpc_session_output_nonfinite(s, 1, &y) && y == 5 && proj == 16 &&
			   y == count_nonfinite(s, 1) && proj == count_nonfinite(s, 0),
		   "non-finite values: y (gelu) %lld of 32, proj (linear) %lld of 32, as counted "
		   "from the data", (long long)y, (long long)proj);
	count = -1;
	UNIT_CHECK(dtpc_session_output_nonfinite(s, 2, &count) == DTPC_ERR_INVALID &&
			   dtpc_session_output_nonfinite(s, -1, &count) == DTPC_ERR_INVALID &&
			   count == -1,
		   "an output out of range: DTPC_ERR_INVALID");
	st = dtpc_session_bind_inputs_file(s, cpath);
	if (!st)
		st = dtpc_session_run(s);
	proj = y = -1;
	UNIT_CHECK(!st && !dtpc_session_output_nonfinite(s, 0, &proj) &&
			   !dtpc_session_output_nonfinite(s, 1, &y) && !proj && !y &&
			   dtpc_session_unused(s, 0, NULL) == 0,
		   "control: finite inputs, no non-finite value, nothing unused (%s)",
		   st ? dtpc_last_error() : "ran");
	/* last: a failed bind marks the rank failed on its communicator */
	char none[320];
	snprintf(none, sizeof none, "%s/none.safetensors", dir);
	int before = dtpc_session_bind_weights_file(s, wpath) ? -1 : dtpc_session_unused(s, 0, NULL);
	st = dtpc_session_bind_inputs_file(s, none);
	UNIT_CHECK(before == 3 && st == DTPC_ERR_IO && dtpc_session_unused(s, 0, &name) == 0 &&
			   !name,
		   "a failed file bind empties the list (3 before; %s)", dtpc_last_error());
out:
	dtpc_session_free(s);
	dtpc_comm_free(c);
	dtpc_local_world_free(w);
	dtpc_graph_free(g);
	remove(wpath);
	remove(ipath);
	remove(cpath);
	rmdir(dir);
}

int main(void)
{
	device_refuses_masks();
	forged_masks();
	dtpc_graph *g4 = compile("ulysses = 2, tp = 2", "64", false);
	dtpc_graph *other4 = compile("ulysses = 2, tp = 2", "128", false);
	dtpc_graph *g2 = compile("ring = 2", "64", false);
	dtpc_graph *g1 = compile("ulysses = 2, tp = 2", "64", true);
	UNIT_CHECK(g4 && other4 && g2 && g1, "compile the tiny DiT graphs");
	if (g4 && other4 && g2 && g1) {
		faults(g4, other4, g2);
		binding(g1, g4);
	}
	storage();
	narrowed_positions();
	folded_positions();
	dtpc_graph_free(g4);
	dtpc_graph_free(other4);
	dtpc_graph_free(g2);
	dtpc_graph_free(g1);
	forged_embeddings();
	forged_rope_flags();
	linear_act_fallback();
	reports();
	return unit_done();
}
