/* test_typed.c — typed data in and out on the CPU device (runtime/dtpc.h:
 * dtpc_session_set_input_data, _bind_weight_data, _output_data), against
 * the float32 calls bit for bit, on the tiny DiT compiled in-process (one
 * rank, and tensor parallelism on two: each rank's slices cut from the full
 * tensor in its dtype).
 *
 * Each case binds the same values twice — typed (bf16, f16 or f32 data) and
 * as their float32 values through dtpc_session_bind_weight / _set_input —
 * in a storage dtype, and compares every rank's weight slices byte for
 * byte, the outputs through dtpc_session_output, and the typed outputs
 * (dtpc_session_output_data in the storage dtype: the tensor's own bits;
 * in another dtype: converted). Controls: a signalling bf16 NaN stays as
 * it is through the typed call into bf16 storage and is quieted through
 * float32 (so the typed call does not go through float32), and one bit
 * flipped in a typed weight changes the outputs. The refusals (a place,
 * dtype, shape or byte count that does not fit; a stream on the CPU) are
 * DTPC_ERR_INVALID / _BIND / _STATE naming the tensor. Run from the
 * repository root (it reads examples/tiny_dit.plan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/driver.h"
#include "graph/graph.h"
#include "kernels/cpu/kernels.h"
#include "runtime/dtpc.h"
#include "runtime/session.h"
#include "tests/local_ranks.h"
#include "tests/rand.h"
#include "tests/typed.h"
#include "tests/unit/unit.h"

enum { TIMEOUT_MS = 5000, MAXR = 2, MAXT = 256 };

/* The values of a case: per weight / input, the typed data (in dtype) and
 * their float32 values. */
struct data {
	dtpc_dtype dtype;
	void *typed[MAXT];
	float *f32[MAXT];
};


static void make_data(const struct g_graph *g, dtpc_dtype dt, struct data *D)
{
	memset(D, 0, sizeof *D);
	D->dtype = dt;
	for (uint32_t t = 0; t < g->ntensors && t < MAXT; t++) {
		const struct g_tensor *x = &g->tensors[t];
		if (x->kind != GT_WEIGHT && x->kind != GT_INPUT)
			continue;
		int64_t n = typed_numel(x);
		float *raw = malloc((size_t)n * 4);
		float scale = x->kind == GT_WEIGHT && x->ndim == 2 ? 0.08f : 0.5f;
		for (int64_t i = 0; i < n; i++)
			raw[i] = scale * urand() + (x->kind == GT_WEIGHT && x->ndim == 1 ? 1.0f : 0);
		D->typed[t] = malloc((size_t)n * typed_esize(dt));
		k_convert(D->typed[t], (enum k_dtype)dt, raw, K_F32, n);
		D->f32[t] = malloc((size_t)n * 4);
		k_convert(D->f32[t], K_F32, D->typed[t], (enum k_dtype)dt, n);
		free(raw);
	}
}

static void free_data(struct data *D)
{
	for (int t = 0; t < MAXT; t++) {
		free(D->typed[t]);
		free(D->f32[t]);
	}
}

enum how { FLOAT32, TYPED };

/* What one rank did: its weight slices, its outputs (float32 through
 * dtpc_session_output; typed in the storage dtype and in `other`). */
struct rank_out {
	dtpc_status st;
	char error[512];
	void *slices[MAXT];
	size_t slice_bytes[MAXT];
	float *out;
	void *typed_out, *other_out, *arena_out;
	int64_t n;
};

struct job {
	struct local_rank at;
	const dtpc_graph *g;
	dtpc_dtype storage, other;
	enum how how;
	const struct data *D;
	struct rank_out *o;
};

static void *rank_main(void *arg)
{
	struct job *j = arg;
	struct rank_out *o = j->o;
	dtpc_comm *c = NULL;
	dtpc_session *s = NULL;
	const struct g_graph *g = &j->g->g;
	if ((o->st = dtpc_comm_local(j->at.w, j->at.rank, &c)) ||
	    (o->st = dtpc_session_create(j->g, c, DTPC_DEVICE_CPU, &s)) ||
	    (o->st = dtpc_session_dtype(s, j->storage)))
		goto out;
	for (uint32_t t = 0; t < g->ntensors && !o->st; t++) {
		const struct g_tensor *x = &g->tensors[t];
		const char *name = graph_str(g, x->name);
		if (x->kind == GT_WEIGHT)
			o->st = j->how == TYPED
					? dtpc_session_bind_weight_data(s, name, j->D->typed[t],
									j->D->dtype, DTPC_DEVICE_CPU,
									x->dims, x->ndim)
					: dtpc_session_bind_weight(s, name, j->D->f32[t], x->dims,
								   x->ndim);
		else if (x->kind == GT_INPUT)
			o->st = j->how == TYPED
					? dtpc_session_set_input_data(s, name, j->D->typed[t],
								      j->D->dtype, DTPC_DEVICE_CPU,
								      x->dims, x->ndim)
					: dtpc_session_set_input(s, name, j->D->f32[t], x->dims,
								 x->ndim);
	}
	if (o->st) {
		s->c->ops->fail(s->c, dtpc_last_error());
		goto out;
	}
	for (uint32_t t = 0; t < g->ntensors && t < MAXT; t++)
		if (g->tensors[t].kind == GT_WEIGHT) {
			o->slice_bytes[t] = (size_t)s->numel[t] * s->esize;
			o->slices[t] = malloc(o->slice_bytes[t]);
			memcpy(o->slices[t], s->weights[t], o->slice_bytes[t]);
		}
	if ((o->st = dtpc_session_run(s)))
		goto out;
	const float *data;
	const int64_t *shape;
	int nd;
	if ((o->st = dtpc_session_output(s, 0, NULL, &data, &shape, &nd)))
		goto out;
	o->n = 1;
	for (int d = 0; d < nd; d++)
		o->n *= shape[d];
	size_t n = (size_t)o->n;
	o->out = malloc(n * 4);
	memcpy(o->out, data, n * 4);
	o->typed_out = malloc(n * typed_esize(j->storage));
	o->other_out = malloc(n * typed_esize(j->other));
	o->arena_out = malloc(n * typed_esize(j->storage));
	memcpy(o->arena_out, rt_data(s, g->outputs[0]), n * typed_esize(j->storage));
	if ((o->st = dtpc_session_output_data(s, 0, o->typed_out, j->storage, DTPC_DEVICE_CPU,
					      n * typed_esize(j->storage))))
		goto out;
	o->st = dtpc_session_output_data(s, 0, o->other_out, j->other, DTPC_DEVICE_CPU,
					 n * typed_esize(j->other));
out:
	if (o->st)
		snprintf(o->error, sizeof o->error, "%s", dtpc_last_error());
	dtpc_session_free(s);
	dtpc_comm_free(c);
	return NULL;
}

static void run_world(const dtpc_graph *g, dtpc_dtype storage, dtpc_dtype other, enum how how,
		      const struct data *D, struct rank_out *outs)
{
	int n = dtpc_graph_world(g);
	struct job jobs[MAXR];
	for (int r = 0; r < n; r++) {
		memset(&outs[r], 0, sizeof outs[r]);
		jobs[r] = (struct job){ .g = g, .storage = storage, .other = other, .how = how,
					.D = D, .o = &outs[r] };
	}
	local_ranks(n, TIMEOUT_MS, rank_main, jobs, sizeof jobs[0]);
}

static void free_outs(struct rank_out *o, int n)
{
	for (int r = 0; r < n; r++) {
		for (int t = 0; t < MAXT; t++)
			free(o[r].slices[t]);
		free(o[r].out);
		free(o[r].typed_out);
		free(o[r].other_out);
		free(o[r].arena_out);
	}
}

static const char *dname(dtpc_dtype t)
{
	return t == DTPC_F32 ? "f32" : t == DTPC_BF16 ? "bf16" : "f16";
}

/* The typed call against the float32 one, in storage, on g's ranks. */
static void against_float32(const dtpc_graph *g, dtpc_dtype storage, dtpc_dtype given,
			    dtpc_dtype other)
{
	int n = dtpc_graph_world(g);
	struct data D;
	make_data(&g->g, given, &D);
	struct rank_out a[MAXR], b[MAXR];
	run_world(g, storage, other, FLOAT32, &D, a);
	run_world(g, storage, other, TYPED, &D, b);
	bool ran = true, slices = true, outs = true, typed = true, own = true, other_ok = true;
	int nslices = 0;
	for (int r = 0; r < n; r++) {
		ran &= !a[r].st && !b[r].st;
		if (a[r].st || b[r].st) {
			printf("# rank %d: %s / %s\n", r, a[r].error, b[r].error);
			continue;
		}
		for (int t = 0; t < MAXT; t++)
			if (a[r].slices[t]) {
				nslices++;
				slices &= a[r].slice_bytes[t] == b[r].slice_bytes[t] &&
					  !memcmp(a[r].slices[t], b[r].slices[t], a[r].slice_bytes[t]);
			}
		size_t m = (size_t)a[r].n;
		outs &= a[r].n == b[r].n && !memcmp(a[r].out, b[r].out, m * 4);
		typed &= !memcmp(a[r].typed_out, b[r].typed_out, m * typed_esize(storage));
		own &= !memcmp(b[r].typed_out, b[r].arena_out, m * typed_esize(storage));
		/* the other dtype: the float32 output converted */
		void *want = malloc(m * typed_esize(other));
		k_convert(want, (enum k_dtype)other, b[r].out, K_F32, (int64_t)m);
		other_ok &= !memcmp(want, b[r].other_out, m * typed_esize(other));
		free(want);
	}
	char what[96];
	snprintf(what, sizeof what, "%s data into %s storage on %d rank%s", dname(given),
		 dname(storage), n, n > 1 ? "s" : "");
	UNIT_CHECK(ran, "%s: both ways bind and run", what);
	UNIT_CHECK(ran && slices && nslices > 0, "%s: every rank's %d weight slices are the float32 "
		   "call's, byte for byte", what, nslices);
	UNIT_CHECK(ran && outs, "%s: the outputs are the float32 call's, bit for bit", what);
	UNIT_CHECK(ran && typed && own, "%s: dtpc_session_output_data in %s gives the output's "
		   "own bits, as the float32 call's session has them", what, dname(storage));
	UNIT_CHECK(ran && other_ok, "%s: dtpc_session_output_data in %s is the float32 output "
		   "converted", what, dname(other));
	free_outs(a, n);
	free_outs(b, n);
	free_data(&D);
}

/* Controls: the comparisons above can fail. */
static void controls(const dtpc_graph *g1)
{
	const struct g_graph *g = &g1->g;
	struct data D;
	make_data(g, DTPC_BF16, &D);
	uint32_t wt = UINT32_MAX;
	for (uint32_t t = 0; t < g->ntensors && wt == UINT32_MAX; t++)
		if (g->tensors[t].kind == GT_WEIGHT && g->tensors[t].ndim == 2)
			wt = t;
	if (wt == UINT32_MAX) {
		UNIT_CHECK(0, "the tiny DiT has a matrix weight");
		free_data(&D);
		return;
	}
	/* one bit flipped in a typed weight: the outputs differ */
	struct rank_out a[1], b[1];
	run_world(g1, DTPC_BF16, DTPC_F32, TYPED, &D, a);
	((uint16_t *)D.typed[wt])[3] ^= 0x0100;
	run_world(g1, DTPC_BF16, DTPC_F32, TYPED, &D, b);
	bool differ = !a[0].st && !b[0].st && memcmp(a[0].out, b[0].out, (size_t)a[0].n * 4);
	UNIT_CHECK(differ, "control: one bit flipped in a typed weight changes the outputs");
	free_outs(a, 1);
	free_outs(b, 1);
	free_data(&D);

	/* a signalling bf16 NaN: as it is through the typed call, quieted
	 * through float32 (the typed call does not go through float32) */
	dtpc_local_world *w = NULL;
	dtpc_comm *c = NULL;
	dtpc_session *s = NULL;
	dtpc_local_world_create(1, TIMEOUT_MS, &w);
	dtpc_comm_local(w, 0, &c);
	dtpc_status st = dtpc_session_create(g1, c, DTPC_DEVICE_CPU, &s);
	st = st ? st : dtpc_session_dtype(s, DTPC_BF16);
	const struct g_tensor *x = &g->tensors[wt];
	const char *name = graph_str(g, x->name);
	int64_t n = typed_numel(x);
	uint16_t *bits = calloc((size_t)n, 2);
	float *widened = calloc((size_t)n, 4);
	bits[0] = 0x7f81;
	k_convert(widened, K_F32, bits, K_BF16, n);
	uint16_t typed = 0, through = 0;
	if (!st && !(st = dtpc_session_bind_weight_data(s, name, bits, DTPC_BF16, DTPC_DEVICE_CPU,
							 x->dims, x->ndim)))
		typed = ((const uint16_t *)s->weights[wt])[0];
	if (!st && !(st = dtpc_session_bind_weight(s, name, widened, x->dims, x->ndim)))
		through = ((const uint16_t *)s->weights[wt])[0];
	UNIT_CHECK(!st && typed == 0x7f81 && through == 0x7fc1,
		   "a signalling bf16 NaN is stored as it is (%04x) typed, quieted (%04x) through "
		   "float32", typed, through);
	free(bits);
	free(widened);
	dtpc_session_free(s);
	dtpc_comm_free(c);
	dtpc_local_world_free(w);
}

static bool says(dtpc_status st, dtpc_status want, const char *needle)
{
	return st == want && strstr(dtpc_last_error(), needle);
}

/* What is refused, naming the tensor. */
static void refusals(const dtpc_graph *g1)
{
	const struct g_graph *g = &g1->g;
	dtpc_local_world *w = NULL;
	dtpc_comm *c = NULL;
	dtpc_session *s = NULL;
	dtpc_local_world_create(1, TIMEOUT_MS, &w);
	dtpc_comm_local(w, 0, &c);
	if (dtpc_session_create(g1, c, DTPC_DEVICE_CPU, &s)) {
		UNIT_CHECK(0, "a session: %s", dtpc_last_error());
		goto out;
	}
	UNIT_CHECK(dtpc_session_gpu(s) == -1 && dtpc_session_get_dtype(s) == DTPC_F32,
		   "a CPU session: no GPU, the graph's dtype (f32)");
	dtpc_session_dtype(s, DTPC_BF16);
	UNIT_CHECK(dtpc_session_get_dtype(s) == DTPC_BF16, "dtpc_session_get_dtype after "
		   "dtpc_session_dtype: bf16");
	int64_t xs[3] = { 1, 64, 128 }, bad[3] = { 1, 63, 128 };
	uint16_t *x = calloc(64 * 128, 2);
	dtpc_status st = dtpc_session_set_input_data(s, "hidden_states", x, DTPC_BF16,
						     DTPC_DEVICE_CUDA, xs, 3);
	UNIT_CHECK(says(st, DTPC_ERR_INVALID, "input 'hidden_states': CUDA memory given to a "
			"session on the cpu device"), "device memory on a CPU session: "
		   "DTPC_ERR_INVALID naming the input (%s)", dtpc_last_error());
	st = dtpc_session_set_input_data(s, "hidden_states", x, (dtpc_dtype)7, DTPC_DEVICE_CPU,
					 xs, 3);
	UNIT_CHECK(says(st, DTPC_ERR_INVALID, "input 'hidden_states': unknown dtype 7"),
		   "an unknown dtype: DTPC_ERR_INVALID (%s)", dtpc_last_error());
	st = dtpc_session_set_input_data(s, "hidden_states", x, DTPC_BF16, (dtpc_device)5, xs, 3);
	UNIT_CHECK(says(st, DTPC_ERR_INVALID, "unknown place 5"), "an unknown place: "
		   "DTPC_ERR_INVALID (%s)", dtpc_last_error());
	st = dtpc_session_set_input_data(s, "hidden_states", NULL, DTPC_BF16, DTPC_DEVICE_CPU,
					 xs, 3);
	UNIT_CHECK(says(st, DTPC_ERR_INVALID, "'hidden_states': NULL data"), "NULL data: "
		   "DTPC_ERR_INVALID (%s)", dtpc_last_error());
	st = dtpc_session_set_input_data(s, "hidden_states", x, DTPC_BF16, DTPC_DEVICE_CPU, bad,
					 3);
	UNIT_CHECK(says(st, DTPC_ERR_BIND, "input 'hidden_states' has shape [1, 63, 128]"),
		   "a wrong shape: DTPC_ERR_BIND, as the float32 call (%s)", dtpc_last_error());
	st = dtpc_session_bind_weight_data(s, "no.such", x, DTPC_BF16, DTPC_DEVICE_CPU, xs, 3);
	UNIT_CHECK(says(st, DTPC_ERR_BIND, "no weight 'no.such'"), "an unknown weight: "
		   "DTPC_ERR_BIND (%s)", dtpc_last_error());
	uint16_t out[4];
	st = dtpc_session_output_data(s, 0, out, DTPC_BF16, DTPC_DEVICE_CPU, sizeof out);
	UNIT_CHECK(st == DTPC_ERR_STATE, "dtpc_session_output_data before a run: DTPC_ERR_STATE");
	UNIT_CHECK(!dtpc_session_stream(s, NULL), "dtpc_session_stream(NULL) on the CPU: a no-op");
	st = dtpc_session_stream(s, (void *)1);
	UNIT_CHECK(says(st, DTPC_ERR_INVALID, "the cpu device has no streams"), "a stream on the "
		   "CPU: DTPC_ERR_INVALID (%s)", dtpc_last_error());
	/* run once, then the byte count and the index */
	st = dtpc_session_bind_weights_seed(s, 3);
	st = st ? st : dtpc_session_set_input_data(s, "hidden_states", x, DTPC_BF16,
						   DTPC_DEVICE_CPU, xs, 3);
	st = st ? st : dtpc_session_run(s);
	UNIT_CHECK(!st, "seeded weights and a typed input run (%s)", st ? dtpc_last_error() : "");
	size_t want = 64 * 128 * 2;
	void *y = malloc(want);
	st = dtpc_session_output_data(s, 0, y, DTPC_BF16, DTPC_DEVICE_CPU, want - 2);
	UNIT_CHECK(says(st, DTPC_ERR_INVALID, "output 'proj_out': 8192 elements of bf16 are "
			"16384 bytes, not 16382"), "a wrong byte count: DTPC_ERR_INVALID naming the "
		   "output (%s)", dtpc_last_error());
	st = dtpc_session_output_data(s, 0, y, DTPC_BF16, DTPC_DEVICE_CUDA, want);
	UNIT_CHECK(says(st, DTPC_ERR_INVALID, "output 'proj_out': CUDA memory"), "an output to "
		   "device memory on the CPU: DTPC_ERR_INVALID (%s)", dtpc_last_error());
	st = dtpc_session_output_data(s, 1, y, DTPC_BF16, DTPC_DEVICE_CPU, want);
	UNIT_CHECK(st == DTPC_ERR_INVALID, "output 1 of 1: DTPC_ERR_INVALID");
	UNIT_CHECK(!dtpc_session_output_data(s, 0, y, DTPC_BF16, DTPC_DEVICE_CPU, want),
		   "control: the right byte count is taken");
	free(y);
	free(x);
	(void)g;
out:
	dtpc_session_free(s);
	dtpc_comm_free(c);
	dtpc_local_world_free(w);
}

/* A timestep input under bf16 storage: timestep_embedding reads its values
 * as bound (float32), as diffusers' get_timestep_embedding takes
 * `timesteps.float()` of the float32 timestep Wan's, ChronoEdit's and
 * Helios' pipelines pass: 999.37 stays 999.37, where bf16 storage makes it
 * 1000 (the angles of the highest frequencies then move by a radian) —
 * through the float32 call, the typed float32 one, the seeded and the
 * file binds alike (bind_finish), each run's table the float32 kernel's
 * rounded once. Flux's `timestep.to(dtype) * 1000` (input_scale) still
 * rounds the timestep first. Controls: the bf16-rounded timesteps give
 * another table, and float32 storage the unrounded table itself. */
static const char TS_PLAN[] =
	"model ts(batch = 3) {\n"
	"  input timestep : [batch];\n"
	"  input guidance : [batch];\n"
	"  wan = timestep_embedding(timestep, 16, flip_sin_to_cos = true, downscale_freq_shift = 0);\n"
	"  flux = timestep_embedding(guidance, 16, flip_sin_to_cos = true, downscale_freq_shift = 0,\n"
	"                            input_scale = 1000);\n"
	"  output wan;\n"
	"  output flux;\n"
	"}\n"
	"plan ts_one {\n"
	"  model ts();\n"
	"}\n";

/* The table of k_timestep_embedding over t (times scale first, rounded to
 * bf16 when round_in: Flux's), in bf16. */
static void ts_table(const float *t, float scale, bool round_in, uint16_t *y)
{
	float ts[3], f[3 * 16];
	for (int i = 0; i < 3; i++) {
		uint16_t b;
		ts[i] = t[i];
		if (round_in) {
			k_convert(&b, K_BF16, &ts[i], K_F32, 1);
			k_convert(&ts[i], K_F32, &b, K_BF16, 1);
			ts[i] *= scale;
			k_convert(&b, K_BF16, &ts[i], K_F32, 1);
			k_convert(&ts[i], K_F32, &b, K_BF16, 1);
		}
	}
	k_timestep_embedding(ts, f, 3, 16, true, 0, 1, 10000, 1);
	k_convert(y, K_BF16, f, K_F32, 3 * 16);
}

static void timestep_as_bound(void)
{
	char path[] = "/tmp/dtpc-test-typed-XXXXXX";
	int fd = mkstemp(path);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f || fputs(TS_PLAN, f) < 0 || fclose(f)) {
		UNIT_CHECK(0, "the timestep plan written to %s", path);
		return;
	}
	size_t len = 0;
	void *buf = driver_graph_buffer(path, "ts_one", NULL, NULL, NULL, 0, NULL, false, &len,
					NULL, stderr);
	remove(path);
	dtpc_graph *g = NULL;
	if (!buf || dtpc_graph_open_buffer(buf, len, &g)) {
		UNIT_CHECK(0, "the timestep plan compiles (%s)", dtpc_last_error());
		free(buf);
		return;
	}
	free(buf);
	/* not one of them exact in bf16: 999, 999.37 and 614.32 are 1000, 1000
	 * and 616 there (ChronoEdit's UniPC and Helios' timesteps) */
	const float t[3] = { 999.0f, 999.373199f, 614.318115f };
	const float gd[3] = { 0.3721f, 0.003713f, 0.5f };
	int64_t shape[1] = { 3 };
	uint16_t tb[3], want[2][48], rounded[48], got[2][48];
	k_convert(tb, K_BF16, t, K_F32, 3);
	float tr[3];
	k_convert(tr, K_F32, tb, K_BF16, 3);
	ts_table(t, 1, false, want[0]);
	ts_table(gd, 1000, true, want[1]);
	ts_table(tr, 1, false, rounded);
	UNIT_CHECK(memcmp(want[0], rounded, sizeof rounded), "control: the timesteps rounded "
		   "to bf16 give another table");
	for (int how = 0; how < 4; how++) {
		static const char *const hows[] = { "the float32 call", "typed float32 data",
						    "typed bf16 data (the values rounded)",
						    "float32 storage" };
		dtpc_local_world *w = NULL;
		dtpc_comm *c = NULL;
		dtpc_session *s = NULL;
		dtpc_local_world_create(1, TIMEOUT_MS, &w);
		dtpc_comm_local(w, 0, &c);
		dtpc_status st = dtpc_session_create(g, c, DTPC_DEVICE_CPU, &s);
		if (!st && how != 3)
			st = dtpc_session_dtype(s, DTPC_BF16);
		for (int run = 0; run < 2 && !st; run++) {
			/* twice: the second binding replaces the float32 copy */
			const float *tv = run ? t : tr;
			uint16_t tvb[3];
			k_convert(tvb, K_BF16, tv, K_F32, 3);
			if (how == 0 || how == 3)
				st = dtpc_session_set_input(s, "timestep", tv, shape, 1);
			else if (how == 1)
				st = dtpc_session_set_input_data(s, "timestep", tv, DTPC_F32,
								 DTPC_DEVICE_CPU, shape, 1);
			else
				st = dtpc_session_set_input_data(s, "timestep", tvb, DTPC_BF16,
								 DTPC_DEVICE_CPU, shape, 1);
			st = st ? st : dtpc_session_set_input_data(s, "guidance", gd, DTPC_F32,
								   DTPC_DEVICE_CPU, shape, 1);
			st = st ? st : dtpc_session_run(s);
			for (int o = 0; o < 2 && !st; o++)
				st = dtpc_session_output_data(s, o, got[o], DTPC_BF16,
							      DTPC_DEVICE_CPU, sizeof got[o]);
		}
		UNIT_CHECK(!st, "the timestep graph runs twice, %s (%s)", hows[how],
			   st ? dtpc_last_error() : "");
		if (!st && how == 2) {
			UNIT_CHECK(!memcmp(got[0], rounded, sizeof rounded), "bf16 timesteps bound "
				   "as bf16 data: the table of their values");
		} else if (!st) {
			UNIT_CHECK(!memcmp(got[0], want[0], sizeof want[0]), "%s storage, %s: "
				   "timestep_embedding of 999, 999.37, 614.32 as bound (float32), its "
				   "table rounded once", how == 3 ? "float32" : "bf16", hows[how]);
		}
		if (!st && how != 3)
			UNIT_CHECK(!memcmp(got[1], want[1], sizeof want[1]), "bf16 storage, "
				   "%s: input_scale 1000 rounds the timestep and the product to bf16 "
				   "(Flux's `timestep.to(dtype) * 1000`)", hows[how]);
		dtpc_session_free(s);
		dtpc_comm_free(c);
		dtpc_local_world_free(w);
	}
	dtpc_graph_free(g);
}

int main(void)
{
	dtpc_graph *g1 = typed_graph(true), *g2 = typed_graph(false);
	UNIT_CHECK(g1 && g2 && dtpc_graph_world(g1) == 1 && dtpc_graph_world(g2) == 2,
		   "the tiny DiT compiles for one rank and for tp = 2");
	if (!g1 || !g2)
		return unit_done();
	against_float32(g1, DTPC_BF16, DTPC_BF16, DTPC_F32);
	against_float32(g2, DTPC_BF16, DTPC_BF16, DTPC_F16);
	against_float32(g2, DTPC_F16, DTPC_F16, DTPC_BF16);
	against_float32(g1, DTPC_BF16, DTPC_F16, DTPC_F32);
	against_float32(g2, DTPC_F32, DTPC_BF16, DTPC_BF16);
	against_float32(g1, DTPC_BF16, DTPC_F32, DTPC_F16);
	controls(g1);
	refusals(g1);
	timestep_as_bound();
	dtpc_graph_free(g1);
	dtpc_graph_free(g2);
	return unit_done();
}
