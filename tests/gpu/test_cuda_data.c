/* test_cuda_data.c — typed data in device memory on the CUDA device
 * (dtpc.h: dtpc_session_set_input_data, _bind_weight_data, _output_data
 * with DTPC_DEVICE_CUDA pointers, dtpc_session_stream), against the same
 * calls with host memory, on the tiny DiT compiled here (one rank, and tp =
 * 2 as two local ranks sharing the GPU: each rank cuts its weight slices
 * from the full tensor on the device).
 *
 * Each case binds the same values (bf16 data into bf16 storage, taken as
 * they are; f32 data into bf16 storage, converted on the device) once from
 * host memory and once from device memory on a stream of the caller's, and
 * requires every rank's weight slices byte for byte and the outputs (read
 * typed into device memory and into host memory) bit for bit the host
 * path's. The stream: the input's device buffer is poisoned with NaN and
 * its real values are copied in on the caller's stream behind a large
 * copy, so that a session that did not wait for the stream would read the
 * poison; the outputs are copied out on the stream and read after the
 * stream's synchronization only. Refusals: a host pointer given as device
 * memory, and a wrong byte count, are DTPC_ERR_INVALID naming the tensor.
 * TAP; exit 77 (skip) without a GPU. Run from the repository root (it reads
 * examples/tiny_dit.plan) with libdtpc_cuda.so on LD_LIBRARY_PATH
 * (tests/gpu/run.sh puts the build's there). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "graph/graph.h"
#include "kernels/cpu/kernels.h"
#include "runtime/dtpc.h"
#include "runtime/session.h"
#include "tests/local_ranks.h"
#include "tests/rand.h"
#include "tests/typed.h"
#include "tests/unit/unit.h"

enum { TIMEOUT_MS = 60000, MAXR = 2, MAXT = 256, SKIP = 77 };


/* Per weight and input: the values in dtype on the host and on the GPU. */
struct data {
	dtpc_dtype dtype;
	void *host[MAXT], *dev[MAXT];
	size_t bytes[MAXT];
	uint32_t input; /* the input's tensor */
};

static bool make_data(const struct g_graph *g, dtpc_dtype dt, struct data *D)
{
	memset(D, 0, sizeof *D);
	D->dtype = dt;
	for (uint32_t t = 0; t < g->ntensors && t < MAXT; t++) {
		const struct g_tensor *x = &g->tensors[t];
		if (x->kind != GT_WEIGHT && x->kind != GT_INPUT)
			continue;
		if (x->kind == GT_INPUT)
			D->input = t;
		int64_t n = typed_numel(x);
		float *raw = malloc((size_t)n * 4);
		for (int64_t i = 0; i < n; i++)
			raw[i] = (x->ndim == 2 ? 0.08f : 0.5f) * urand() +
				 (x->kind == GT_WEIGHT && x->ndim == 1 ? 1.0f : 0);
		D->bytes[t] = (size_t)n * typed_esize(dt);
		D->host[t] = malloc(D->bytes[t]);
		k_convert(D->host[t], (enum k_dtype)dt, raw, K_F32, n);
		free(raw);
		if (cudaMalloc(&D->dev[t], D->bytes[t]) ||
		    cudaMemcpy(D->dev[t], D->host[t], D->bytes[t], cudaMemcpyHostToDevice))
			return false;
	}
	return true;
}

static void free_data(struct data *D)
{
	for (int t = 0; t < MAXT; t++) {
		free(D->host[t]);
		if (D->dev[t])
			cudaFree(D->dev[t]);
	}
}

struct rank_out {
	dtpc_status st;
	char error[512];
	void *slices[MAXT];
	size_t slice_bytes[MAXT];
	void *out, *out_f32; /* output 0 in the storage dtype and in float32, host */
	size_t n;
};

struct job {
	struct local_rank at;
	const dtpc_graph *g;
	bool device;
	const struct data *D;
	void *delay; /* device: a large buffer copied on the stream before the input */
	size_t delay_bytes;
	struct rank_out *o;
};

static void *rank_main(void *arg)
{
	struct job *j = arg;
	struct rank_out *o = j->o;
	const struct g_graph *g = &j->g->g;
	const struct data *D = j->D;
	dtpc_comm *c = NULL;
	dtpc_session *s = NULL;
	cudaStream_t stream = NULL;
	void *input = NULL, *dout = NULL, *dout32 = NULL;
	if ((o->st = dtpc_comm_local(j->at.w, j->at.rank, &c)) ||
	    (o->st = dtpc_session_create(j->g, c, DTPC_DEVICE_CUDA, &s)) ||
	    (o->st = dtpc_session_dtype(s, DTPC_BF16)))
		goto out;
	if (j->device && (cudaSetDevice(dtpc_session_gpu(s)) || cudaStreamCreate(&stream))) {
		o->st = DTPC_ERR_DEVICE;
		snprintf(o->error, sizeof o->error, "cudaStreamCreate");
		goto out;
	}
	if (j->device && (o->st = dtpc_session_stream(s, stream)))
		goto out;
	for (uint32_t t = 0; t < g->ntensors && !o->st; t++) {
		const struct g_tensor *x = &g->tensors[t];
		if (x->kind == GT_WEIGHT)
			o->st = dtpc_session_bind_weight_data(
				s, graph_str(g, x->name), j->device ? D->dev[t] : D->host[t],
				D->dtype, j->device ? DTPC_DEVICE_CUDA : DTPC_DEVICE_CPU, x->dims,
				x->ndim);
	}
	const struct g_tensor *xi = &g->tensors[D->input];
	const char *iname = graph_str(g, xi->name);
	if (!o->st && j->device) {
		/* poisoned, then the values copied in on the stream behind a large
		 * copy: the session must wait for the stream to read them */
		bool fail = cudaMalloc(&input, D->bytes[D->input]) ||
			    cudaMemset(input, 0xff, D->bytes[D->input]);
		for (int k = 0; k < 8 && !fail; k++)
			fail = cudaMemcpyAsync(j->delay, (char *)j->delay + j->delay_bytes / 2,
					       j->delay_bytes / 2, cudaMemcpyDeviceToDevice, stream);
		fail = fail || cudaMemcpyAsync(input, D->dev[D->input], D->bytes[D->input],
					       cudaMemcpyDeviceToDevice, stream);
		o->st = fail ? DTPC_ERR_DEVICE : dtpc_session_set_input_data(
							 s, iname, input, D->dtype,
							 DTPC_DEVICE_CUDA, xi->dims, xi->ndim);
	} else if (!o->st) {
		o->st = dtpc_session_set_input_data(s, iname, D->host[D->input], D->dtype,
						    DTPC_DEVICE_CPU, xi->dims, xi->ndim);
	}
	if (o->st) {
		s->c->ops->fail(s->c, dtpc_last_error());
		goto out;
	}
	for (uint32_t t = 0; t < g->ntensors && t < MAXT; t++)
		if (g->tensors[t].kind == GT_WEIGHT) {
			o->slice_bytes[t] = (size_t)s->numel[t] * s->esize;
			o->slices[t] = malloc(o->slice_bytes[t]);
			cudaMemcpy(o->slices[t], s->weights[t], o->slice_bytes[t],
				   cudaMemcpyDeviceToHost);
		}
	if ((o->st = dtpc_session_run(s)))
		goto out;
	int64_t n = 1;
	for (int d = 0; d < g->tensors[g->outputs[0]].ndim; d++)
		n *= s->dims[g->outputs[0]][d];
	o->n = (size_t)n;
	o->out = malloc(o->n * 2);
	o->out_f32 = malloc(o->n * 4);
	if (!j->device) {
		o->st = dtpc_session_output_data(s, 0, o->out, DTPC_BF16, DTPC_DEVICE_CPU, o->n * 2);
		if (!o->st)
			o->st = dtpc_session_output_data(s, 0, o->out_f32, DTPC_F32, DTPC_DEVICE_CPU,
							 o->n * 4);
		goto out;
	}
	/* into device memory on the stream; read in stream order */
	if (cudaMalloc(&dout, o->n * 2) || cudaMalloc(&dout32, o->n * 4)) {
		o->st = DTPC_ERR_DEVICE;
		goto out;
	}
	o->st = dtpc_session_output_data(s, 0, dout, DTPC_BF16, DTPC_DEVICE_CUDA, o->n * 2);
	if (!o->st)
		o->st = dtpc_session_output_data(s, 0, dout32, DTPC_F32, DTPC_DEVICE_CUDA, o->n * 4);
	if (!o->st && (cudaMemcpyAsync(o->out, dout, o->n * 2, cudaMemcpyDeviceToHost, stream) ||
		       cudaMemcpyAsync(o->out_f32, dout32, o->n * 4, cudaMemcpyDeviceToHost,
				       stream) ||
		       cudaStreamSynchronize(stream)))
		o->st = DTPC_ERR_DEVICE;
	/* refusals, naming the tensor */
	if (!o->st && j->at.rank == 0) {
		dtpc_status st = dtpc_session_set_input_data(s, iname, D->host[D->input], D->dtype,
							     DTPC_DEVICE_CUDA, xi->dims, xi->ndim);
		UNIT_CHECK(st == DTPC_ERR_INVALID && strstr(dtpc_last_error(), "not device memory") &&
				   strstr(dtpc_last_error(), iname),
			   "a host pointer given as device memory: DTPC_ERR_INVALID (%s)",
			   dtpc_last_error());
		st = dtpc_session_output_data(s, 0, dout, DTPC_BF16, DTPC_DEVICE_CUDA, o->n * 4);
		UNIT_CHECK(st == DTPC_ERR_INVALID && strstr(dtpc_last_error(), "bytes"),
			   "a wrong byte count for a device output: DTPC_ERR_INVALID (%s)",
			   dtpc_last_error());
	}
	if (j->device)
		dtpc_session_stream(s, NULL);
out:
	if (o->st && !o->error[0])
		snprintf(o->error, sizeof o->error, "%s", dtpc_last_error());
	if (input)
		cudaFree(input);
	if (dout)
		cudaFree(dout);
	if (dout32)
		cudaFree(dout32);
	dtpc_session_free(s);
	dtpc_comm_free(c);
	if (stream)
		cudaStreamDestroy(stream);
	return NULL;
}

static void run_world(const dtpc_graph *g, bool device, const struct data *D, void *delay,
		      size_t delay_bytes, struct rank_out *outs)
{
	int n = dtpc_graph_world(g);
	struct job jobs[MAXR];
	for (int r = 0; r < n; r++) {
		memset(&outs[r], 0, sizeof outs[r]);
		jobs[r] = (struct job){ .g = g, .device = device, .D = D, .delay = delay,
					.delay_bytes = delay_bytes, .o = &outs[r] };
	}
	local_ranks(n, TIMEOUT_MS, rank_main, jobs, sizeof jobs[0]);
}

static void free_outs(struct rank_out *o, int n)
{
	for (int r = 0; r < n; r++) {
		for (int t = 0; t < MAXT; t++)
			free(o[r].slices[t]);
		free(o[r].out);
		free(o[r].out_f32);
	}
}

static void against_host(const dtpc_graph *g, dtpc_dtype given, void *delay, size_t delay_bytes)
{
	int n = dtpc_graph_world(g);
	struct data D;
	char what[96];
	snprintf(what, sizeof what, "%s data in device memory into bf16 storage on %d rank%s",
		 given == DTPC_BF16 ? "bf16" : "f32", n, n > 1 ? "s" : "");
	if (!make_data(&g->g, given, &D)) {
		UNIT_CHECK(0, "%s: device buffers", what);
		free_data(&D);
		return;
	}
	struct rank_out a[MAXR], b[MAXR];
	run_world(g, false, &D, NULL, 0, a);
	run_world(g, true, &D, delay, delay_bytes, b);
	bool ran = true, slices = true, outs = true, outs32 = true, finite = true;
	int nslices = 0;
	for (int r = 0; r < n; r++) {
		ran &= !a[r].st && !b[r].st;
		if (a[r].st || b[r].st) {
			printf("# rank %d: host: %s; device: %s\n", r, a[r].error, b[r].error);
			continue;
		}
		for (int t = 0; t < MAXT; t++)
			if (a[r].slices[t]) {
				nslices++;
				slices &= a[r].slice_bytes[t] == b[r].slice_bytes[t] &&
					  !memcmp(a[r].slices[t], b[r].slices[t], a[r].slice_bytes[t]);
			}
		outs &= a[r].n == b[r].n && !memcmp(a[r].out, b[r].out, a[r].n * 2);
		outs32 &= a[r].n == b[r].n && !memcmp(a[r].out_f32, b[r].out_f32, a[r].n * 4);
		for (size_t i = 0; i < b[r].n; i++)
			finite &= ((const float *)b[r].out_f32)[i] == ((const float *)b[r].out_f32)[i];
	}
	UNIT_CHECK(ran, "%s: host and device paths bind and run", what);
	UNIT_CHECK(ran && slices && nslices > 0, "%s: every rank's %d weight slices are the host "
		   "path's, byte for byte", what, nslices);
	UNIT_CHECK(ran && finite, "%s: the input copied in behind the stream's work was waited "
		   "for (no NaN from the poison)", what);
	UNIT_CHECK(ran && outs, "%s: the bf16 output in device memory is the host path's, bit "
		   "for bit", what);
	UNIT_CHECK(ran && outs32, "%s: the f32 output in device memory is the host path's, bit "
		   "for bit", what);
	free_outs(a, n);
	free_outs(b, n);
	free_data(&D);
}

int main(void)
{
	int ngpu = 0;
	if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) {
		printf("1..0 # SKIP no CUDA device visible\n");
		return SKIP;
	}
	/* a GPU, but dtpc's CUDA library not found, is a failure, not a skip */
	const char *why = dtpc_device_unavailable(DTPC_DEVICE_CUDA);
	UNIT_CHECK(!why, "dtpc computes on the GPU here (%s)", why ? why : "libdtpc_cuda.so loaded");
	if (why)
		return unit_done();
	dtpc_graph *g1 = typed_graph(true), *g2 = typed_graph(false);
	UNIT_CHECK(g1 && g2, "the tiny DiT compiles for one rank and for tp = 2");
	if (!g1 || !g2)
		return unit_done();
	/* 8 x 256 MiB copied on the stream before each input (milliseconds): long
	 * enough that a copy not ordered after them reads the poison */
	size_t delay_bytes = (size_t)512 << 20;
	void *delay = NULL;
	if (cudaMalloc(&delay, delay_bytes)) {
		UNIT_CHECK(0, "a 512 MiB device buffer");
		return unit_done();
	}
	against_host(g1, DTPC_BF16, delay, delay_bytes);
	against_host(g1, DTPC_F32, delay, delay_bytes);
	/* two local ranks on one GPU (rank % GPUs): the data live on GPU 0 */
	if (ngpu == 1) {
		against_host(g2, DTPC_BF16, delay, delay_bytes);
		against_host(g2, DTPC_F32, delay, delay_bytes);
	} else {
		printf("# the tp = 2 cases want one GPU visible (CUDA_VISIBLE_DEVICES=0): rank 1 "
		       "would be on GPU 1, the data on GPU 0\n");
	}
	cudaFree(delay);
	dtpc_graph_free(g1);
	dtpc_graph_free(g2);
	return unit_done();
}
