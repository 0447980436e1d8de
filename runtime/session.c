/* session.c — libdtpc's public API: graphs, communicators, sessions. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/error.h"
#include "graph/graph_file.h"
#include "runtime/safetensors.h"
#include "runtime/session.h"
#include "runtime/weights.h"

/* dtpc_status is graph/error.h's status, value for value */
#define SAME(x) _Static_assert((int)DTPC_##x == (int)G_##x, "dtpc_status DTPC_" #x)
SAME(OK);
SAME(ERR_INVALID);
SAME(ERR_IO);
SAME(ERR_FORMAT);
SAME(ERR_VERSION);
SAME(ERR_MISMATCH);
SAME(ERR_COMM);
SAME(ERR_BIND);
SAME(ERR_NOMEM);
SAME(ERR_STATE);
SAME(ERR_DEVICE);
#undef SAME

const char *dtpc_last_error(void)
{
	return g_error()->msg;
}

int dtpc_last_error_rank(void)
{
	return g_error()->rank;
}

const char *dtpc_status_str(dtpc_status s)
{
	switch (s) {
	case DTPC_OK: return "ok";
	case DTPC_ERR_INVALID: return "invalid argument";
	case DTPC_ERR_IO: return "I/O error";
	case DTPC_ERR_FORMAT: return "malformed graph or checkpoint";
	case DTPC_ERR_VERSION: return "incompatible graph version";
	case DTPC_ERR_MISMATCH: return "ranks disagree";
	case DTPC_ERR_COMM: return "communication failed";
	case DTPC_ERR_BIND: return "weight or input binding failed";
	case DTPC_ERR_NOMEM: return "out of memory";
	case DTPC_ERR_STATE: return "invalid state";
	case DTPC_ERR_DEVICE: return "device error";
	}
	return "unknown status";
}

double rt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- graphs ----------------------------------------------------------------- */

dtpc_status dtpc_graph_open_file(const char *path, dtpc_graph **out)
{
	*out = NULL;
	struct graph_file f;
	if (!graph_file_open(&f, path))
		return g_wrap(g_error()->status, -1, "%s", path);
	dtpc_graph *g = calloc(1, sizeof *g);
	if (!g) {
		graph_file_close(&f);
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	}
	g->g = f.g;
	g->mem = f.map;
	g->len = f.len;
	g->mapped = true;
	*out = g;
	return DTPC_OK;
}

dtpc_status dtpc_graph_open_buffer(const void *buf, size_t len, dtpc_graph **out)
{
	*out = NULL;
	if (!buf && len)
		return g_raise(DTPC_ERR_INVALID, "NULL graph buffer");
	dtpc_graph *g = calloc(1, sizeof *g);
	/* a private, aligned copy: the caller's buffer may be anywhere */
	void *mem = NULL;
	if (!g || posix_memalign(&mem, 64, len ? len : 1)) {
		free(g);
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	}
	if (len)
		memcpy(mem, buf, len);
	if (!graph_parse(mem, len, &g->g)) {
		free(mem);
		free(g);
		return g_wrap(g_error()->status, -1, "graph buffer");
	}
	g->mem = mem;
	g->len = len;
	*out = g;
	return DTPC_OK;
}

void dtpc_graph_free(dtpc_graph *g)
{
	if (!g)
		return;
	if (g->mapped) {
		struct graph_file f = { .g = g->g, .map = g->mem, .len = g->len };
		graph_file_close(&f);
	} else {
		free(g->mem);
	}
	free(g);
}

int dtpc_graph_world(const dtpc_graph *g)
{
	return (int)g->g.world;
}

uint64_t dtpc_graph_hash(const dtpc_graph *g)
{
	return g->g.checksum;
}

int dtpc_graph_meta_at(const dtpc_graph *g, int i, const char **key, const char **value)
{
	if (i < 0 || (uint32_t)i >= g->g.nmeta)
		return 0;
	const struct g_meta *m = &g->g.meta[i];
	*key = graph_str(&g->g, m->key);
	if (m->type == GM_STR) {
		*value = graph_str(&g->g, (uint32_t)m->value);
		return 1;
	}
	/* numbers, bools and lists as text (a list past the buffer is cut) */
	static _Thread_local char text[4096];
	graph_meta_text(&g->g, (uint32_t)i, text, sizeof text);
	*value = text;
	return 1;
}

const char *dtpc_graph_meta(const dtpc_graph *g, const char *key)
{
	const char *k, *v;
	for (int i = 0; dtpc_graph_meta_at(g, i, &k, &v); i++)
		if (!strcmp(k, key))
			return v;
	return NULL;
}

/* ---- communicators ------------------------------------------------------------ */

enum { DEFAULT_TIMEOUT_MS = 120000 };

dtpc_status dtpc_local_world_create(int nranks, int timeout_ms, dtpc_local_world **out)
{
	*out = NULL;
	if (nranks < 1 || nranks > 4096)
		return g_raise(DTPC_ERR_INVALID, "a local world has 1 to 4096 ranks, not %d", nranks);
	dtpc_local_world *w = calloc(1, sizeof *w);
	if (!w || !(w->w = comm_local_world_create(nranks, timeout_ms > 0 ? timeout_ms
									   : DEFAULT_TIMEOUT_MS))) {
		free(w);
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	}
	*out = w;
	return DTPC_OK;
}

dtpc_status dtpc_comm_local(dtpc_local_world *w, int rank, dtpc_comm **out)
{
	*out = NULL;
	dtpc_comm *c = calloc(1, sizeof *c);
	if (!c || !(c->impl = comm_local_create(w->w, rank))) {
		free(c);
		return g_raise(DTPC_ERR_INVALID, "rank %d is not in the local world", rank);
	}
	*out = c;
	return DTPC_OK;
}

void dtpc_local_world_abort(dtpc_local_world *w, const char *why)
{
	if (w)
		comm_local_world_abort(w->w, why);
}

void dtpc_local_world_free(dtpc_local_world *w)
{
	if (!w)
		return;
	comm_local_world_free(w->w);
	free(w);
}

/* A backend's comm as the API hands it out; impl NULL: it failed, as raised. */
static dtpc_status comm_out(struct comm *impl, const char *backend, dtpc_comm **out)
{
	if (!impl)
		return g_wrap(DTPC_ERR_COMM, -1, "%s", backend);
	dtpc_comm *c = calloc(1, sizeof *c);
	if (!c) {
		impl->ops->free(impl);
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	}
	c->impl = impl;
	*out = c;
	return DTPC_OK;
}

dtpc_status dtpc_comm_mpi(int timeout_ms, dtpc_comm **out)
{
	*out = NULL;
	struct comm *impl = comm_mpi_create(timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS);
	return comm_out(impl, "MPI", out);
}

/* cuda_load.c says why when this build or machine has no nccl backend */
dtpc_status dtpc_comm_nccl(int timeout_ms, dtpc_comm **out)
{
	*out = NULL;
	struct comm *impl = comm_nccl_create(timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS);
	return comm_out(impl, "NCCL", out);
}

dtpc_status dtpc_nccl_unique_id(void *out, size_t len)
{
	if (!out || len < DTPC_NCCL_UNIQUE_ID_BYTES)
		return g_raise(DTPC_ERR_INVALID, "an NCCL unique id takes %d bytes; the buffer has %zu",
				DTPC_NCCL_UNIQUE_ID_BYTES, out ? len : 0);
	if (comm_nccl_unique_id(out))
		return g_wrap(DTPC_ERR_COMM, -1, "NCCL");
	return DTPC_OK;
}

dtpc_status dtpc_comm_nccl_init(const void *id, size_t len, int rank, int world, int timeout_ms,
				dtpc_comm **out)
{
	*out = NULL;
	if (!id || len != DTPC_NCCL_UNIQUE_ID_BYTES)
		return g_raise(DTPC_ERR_INVALID, "an NCCL unique id has %d bytes, not %zu",
				DTPC_NCCL_UNIQUE_ID_BYTES, id ? len : 0);
	if (world < 1 || rank < 0 || rank >= world)
		return g_raise(DTPC_ERR_INVALID, "rank %d of a world of %d ranks", rank, world);
	struct comm *impl = comm_nccl_init(id, rank, world,
					   timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS);
	return comm_out(impl, "NCCL", out);
}

int dtpc_device_count(dtpc_device dev)
{
	switch (dev) {
	case DTPC_DEVICE_CPU:
		return 1;
	case DTPC_DEVICE_CUDA:
		return dev_cuda_count();
	}
	return 0;
}

const char *dtpc_device_unavailable(dtpc_device dev)
{
	switch (dev) {
	case DTPC_DEVICE_CPU:
		return NULL;
	case DTPC_DEVICE_CUDA:
		return dev_cuda_unavailable();
	}
	return "unknown device";
}

const char *dtpc_device_name(dtpc_device dev)
{
	switch (dev) {
	case DTPC_DEVICE_CPU:
		return "cpu";
	case DTPC_DEVICE_CUDA:
		return "cuda";
	}
	return NULL;
}

int dtpc_comm_rank(const dtpc_comm *c)
{
	return c->impl->rank;
}

int dtpc_comm_size(const dtpc_comm *c)
{
	return c->impl->world;
}

void dtpc_comm_free(dtpc_comm *c)
{
	if (!c)
		return;
	c->impl->ops->free(c->impl);
	free(c);
}

/* ---- sessions -------------------------------------------------------------------- */

float *rt_data(const struct dtpc_session *s, uint32_t t)
{
	const struct g_tensor *x = &s->g->tensors[t];
	if (x->kind == GT_WEIGHT)
		return s->weights[t];
	return (float *)((char *)s->arena + x->offset);
}

/* Every rank sends what it loaded; all must agree, or nobody runs. */
struct hello {
	uint64_t magic, checksum;
	uint32_t world, rank;
};

/* The handshake's exchange: through device memory for a backend that takes
 * only that (NCCL), else through host memory. */
static dtpc_status exchange_hello(struct dtpc_session *s, const struct hello *mine,
				  struct hello *all, const size_t *counts, const size_t *displs)
{
	struct comm *c = s->c;
	size_t world = (size_t)c->world, bytes = world * sizeof *mine;
	int *ranks = malloc(world * sizeof *ranks);
	if (!ranks)
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	struct comm_group wg = comm_world_group(c, ranks);
	struct comm_tag t = { UINT32_MAX, "startup handshake" };
	dtpc_status st = DTPC_OK;
	if (!c->ops->device_memory || s->dv->ops->host_memory) {
		if (c->ops->allgatherv(c, &wg, t, mine, all, counts, displs))
			st = g_wrap(DTPC_ERR_COMM, s->rank, "startup handshake");
		free(ranks);
		return st;
	}
	char *d = s->dv->ops->alloc(s->dv, bytes);
	if (!d || s->dv->ops->upload(s->dv, d + displs[s->rank], mine, sizeof *mine))
		st = g_wrap(DTPC_ERR_DEVICE, s->rank, "startup handshake");
	else if (c->ops->allgatherv(c, &wg, t, d + displs[s->rank], d, counts, displs) ||
		 comm_complete(c))
		st = g_wrap(DTPC_ERR_COMM, s->rank, "startup handshake");
	else if (s->dv->ops->download(s->dv, all, d, bytes))
		st = g_wrap(DTPC_ERR_DEVICE, s->rank, "startup handshake");
	if (d)
		s->dv->ops->free(s->dv, d);
	free(ranks);
	return st;
}

static dtpc_status handshake(struct dtpc_session *s)
{
	struct comm *c = s->c;
	size_t world = (size_t)c->world;
	struct hello mine = { 0x64747063484c4f21ull, s->g->checksum, s->g->world, s->rank };
	struct hello *all = calloc(world, sizeof *all);
	size_t *counts = malloc(2 * world * sizeof *counts), *displs = counts + world;
	if (!all || !counts) {
		free(all);
		free(counts);
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < world; i++) {
		counts[i] = sizeof mine;
		displs[i] = i * sizeof mine;
	}
	dtpc_status st = exchange_hello(s, &mine, all, counts, displs);
	free(counts);
	if (st) {
		free(all);
		return st;
	}
	for (int i = 0; i < c->world && !st; i++) {
		if (all[i].magic != mine.magic)
			st = g_raise(DTPC_ERR_MISMATCH, "rank %d is not a dtpc session", i);
		else if (all[i].checksum != mine.checksum)
			st = g_raise(DTPC_ERR_MISMATCH,
				      "rank %d loaded a different graph (checksum %016llx; rank %u "
				      "has %016llx)", i, (unsigned long long)all[i].checksum, s->rank,
				      (unsigned long long)mine.checksum);
		else if (all[i].world != mine.world || all[i].rank != (uint32_t)i)
			st = g_raise(DTPC_ERR_MISMATCH, "rank %d says it is rank %u of %u", i,
				      all[i].rank, all[i].world);
	}
	free(all);
	return st;
}

/* The storage dtype of the graph's tensors: this runtime keeps one dtype
 * for all of a session's data, so a graph that mixes them is refused. */
static dtpc_status graph_dtype(const struct g_graph *g, dtpc_dtype *out)
{
	enum g_dtype first = g->ntensors ? graph_tensor_dtype(g, 0) : G_DT_F32;
	for (uint32_t t = 1; t < g->ntensors; t++)
		if (graph_tensor_dtype(g, t) != first)
			return g_raise(DTPC_ERR_VERSION, "tensor '%s' is %s but tensor '%s' is %s: "
					"this runtime stores all of a graph's tensors in one dtype",
					graph_str(g, g->tensors[t].name),
					graph_dtype_name(graph_tensor_dtype(g, t)),
					graph_str(g, g->tensors[0].name), graph_dtype_name(first));
	*out = first == G_DT_BF16 ? DTPC_BF16 : first == G_DT_F16 ? DTPC_F16 : DTPC_F32;
	return DTPC_OK;
}

static size_t dtype_size(dtpc_dtype t)
{
	return t == DTPC_F32 ? 4 : 2;
}

static const char *dtype_name(dtpc_dtype t);

dtpc_status session_prepare(struct dtpc_session *s)
{
	const struct g_graph *g = s->g;
	uint32_t n = g->ntensors;
	dtpc_status dst = graph_dtype(g, &s->graph_dtype);
	if (dst)
		return dst;
	/* the graph's dtype until dtpc_session_dtype narrows it */
	s->dtype = s->graph_dtype;
	s->esize = dtype_size(s->dtype);
	s->dims = calloc(n ? n : 1, sizeof *s->dims);
	s->numel = calloc(n ? n : 1, sizeof *s->numel);
	s->weights = calloc(n ? n : 1, sizeof *s->weights);
	s->bound = calloc(n ? n : 1, sizeof *s->bound);
	s->timestep = calloc(n ? n : 1, sizeof *s->timestep);
	s->wide = calloc(n ? n : 1, sizeof *s->wide);
	s->groups = calloc(g->ngroups ? g->ngroups : 1, sizeof *s->groups);
	uint64_t nmem = 0;
	for (uint32_t i = 0; i < g->ngroups; i++)
		nmem += g->groups[i].size;
	s->members = calloc(nmem ? nmem : 1, sizeof *s->members);
	if (!s->dims || !s->numel || !s->weights || !s->bound || !s->timestep || !s->wide ||
	    !s->groups || !s->members)
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < g->nops; i++) {
		const struct g_op *o = &g->ops[i];
		uint32_t x = o->nin ? g->operands[o->in0] : 0;
		if ((op_table[o->kind].flags & OPF_WIDE_INPUT) && o->nin && x < n &&
		    g->tensors[x].kind == GT_INPUT)
			s->timestep[x] = true;
	}
	for (uint32_t t = 0; t < n; t++) {
		int64_t e = 1;
		for (int d = 0; d < g->tensors[t].ndim; d++) {
			s->dims[t][d] = graph_local_dim(g, t, d, s->rank);
			e *= s->dims[t][d];
		}
		s->numel[t] = e;
	}
	int *m = s->members;
	s->max_group = 1;
	for (uint32_t i = 0; i < g->ngroups; i++) {
		struct comm_group *cg = &s->groups[i];
		cg->id = (int)i;
		cg->n = (int)g->groups[i].size;
		if (g->groups[i].size > s->max_group)
			s->max_group = g->groups[i].size;
		cg->me = (int)graph_group_index(g, i, s->rank);
		for (int k = 0; k < cg->n; k++)
			m[k] = (int)graph_group_member(g, i, s->rank, (uint32_t)k);
		cg->ranks = m;
		m += cg->n;
	}
	for (uint32_t i = 0; i < g->nops; i++) {
		dtpc_status st = exec_check(s, i);
		if (st)
			return st;
	}
	return DTPC_OK;
}

static dtpc_status make_device(struct dtpc_session *s, dtpc_device dev)
{
	if (dev == DTPC_DEVICE_CPU) {
		if (s->c->ops->device_memory)
			return g_raise_rank(DTPC_ERR_INVALID, s->rank, "the %s backend needs the "
					    "CUDA device", s->c->ops->name);
		s->dv = dev_cpu_create();
		return s->dv ? DTPC_OK : g_raise(DTPC_ERR_NOMEM, "out of memory");
	}
	const char *no = dev_cuda_unavailable();
	if (no)
		return g_raise_rank(DTPC_ERR_INVALID, s->rank, "no CUDA device: %s", no);
	int n = dev_cuda_count();
	int ordinal = s->c->device >= 0 ? s->c->device : (int)(s->rank % (uint32_t)n);
	if (!(s->dv = dev_cuda_create(ordinal)))
		return g_wrap(DTPC_ERR_DEVICE, s->rank, "GPU %d", ordinal);
	return DTPC_OK;
}

/* A forward pass may be recorded as a device graph when nothing in it
 * waits on the host: no collective (they block on the host to keep their
 * deadlines). */
static bool graphable(const struct g_graph *g)
{
	for (uint32_t i = 0; i < g->nops; i++)
		if (op_table[g->ops[i].kind].flags & OPF_COMM)
			return false;
	return true;
}

/* Storage in a narrower dtype than float32: the device stores t from now
 * on, and the session gets the float32 buffer it converts through (bound
 * data, outputs, all-reduce sums) for the largest tensor (scratch aside). */
static dtpc_status narrow_storage(struct dtpc_session *s, dtpc_dtype t)
{
	const struct dev_ops *d = s->dv->ops;
	if (!d->set_dtype || !d->convert)
		return g_raise(DTPC_ERR_INVALID, "the %s device stores float32 only", d->name);
	int64_t most = 1;
	for (uint32_t i = 0; i < s->g->ntensors; i++)
		if (s->g->tensors[i].kind != GT_SCRATCH && s->numel[i] > most)
			most = s->numel[i];
	if (!s->widen && !(s->widen = d->alloc(s->dv, (size_t)most * 4)))
		return g_wrap(DTPC_ERR_NOMEM, s->rank, "no device memory for a %lld-element "
			      "float32 buffer", (long long)most);
	if (s->staged && !s->widen_host && !(s->widen_host = malloc((size_t)most * 4)))
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	if (d->set_dtype(s->dv, t))
		return g_reraise(DTPC_ERR_DEVICE, s->rank);
	return DTPC_OK;
}

static dtpc_status setup(struct dtpc_session *s, dtpc_device dev)
{
	dtpc_status st = make_device(s, dev);
	if (!st)
		st = session_prepare(s);
	if (st)
		return st;
	const struct dev_ops *d = s->dv->ops;
	size_t arena = s->g->arena_bytes ? s->g->arena_bytes : 64;
	if (!(s->arena = d->alloc(s->dv, arena)))
		return g_wrap(DTPC_ERR_NOMEM, s->rank, "cannot allocate the %llu-byte arena on "
			      "the %s device", (unsigned long long)arena, d->name);
	s->host = s->arena;
	if (!d->host_memory && !(s->host = malloc(arena)))
		return g_raise(DTPC_ERR_NOMEM, "cannot allocate the %llu-byte host mirror",
				(unsigned long long)arena);
	s->staged = !d->host_memory && !s->c->ops->device_memory;
	if (s->dtype != DTPC_F32 && (st = narrow_storage(s, s->dtype)))
		return st;
	if (s->workspace_bytes && !(s->workspace = d->alloc(s->dv, s->workspace_bytes)))
		return g_wrap(DTPC_ERR_NOMEM, s->rank, "cannot allocate the attention workspace");
	s->cbufs = malloc(4 * s->max_group * sizeof *s->cbufs);
	s->rowbuf = malloc(s->max_group * sizeof *s->rowbuf);
	if (!s->cbufs || !s->rowbuf)
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	s->outputs = calloc(s->g->noutputs ? s->g->noutputs : 1, sizeof *s->outputs);
	s->fetched = calloc(s->g->noutputs ? s->g->noutputs : 1, sizeof *s->fetched);
	if (!s->outputs || !s->fetched)
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	s->graphs = d->graphs && graphable(s->g);
	if (s->c->ops->device_memory)
		s->c->stream = d->stream(s->dv);
	if (s->c->ops->prepare && s->c->ops->prepare(s->c, s->groups, (int)s->g->ngroups))
		return g_reraise(DTPC_ERR_COMM, s->rank);
	return DTPC_OK;
}

dtpc_status dtpc_session_create(const dtpc_graph *G, dtpc_comm *c, dtpc_device dev,
				dtpc_session **out)
{
	*out = NULL;
	if (!G || !c)
		return g_raise(DTPC_ERR_INVALID, "NULL graph or communicator");
	if (dev != DTPC_DEVICE_CPU && dev != DTPC_DEVICE_CUDA)
		return g_raise(DTPC_ERR_INVALID, "unknown device %d", (int)dev);
	if ((uint32_t)c->impl->world != G->g.world) {
		dtpc_status st = g_raise_rank(DTPC_ERR_MISMATCH, c->impl->rank,
					      "the graph is for %u ranks, but the job has %d",
					      G->g.world, c->impl->world);
		/* tell the others, so they fail now rather than at a timeout */
		c->impl->ops->fail(c->impl, g_error()->msg);
		return st;
	}
	struct dtpc_session *s = calloc(1, sizeof *s);
	if (!s)
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	s->g = &G->g;
	s->c = c->impl;
	s->rank = (uint32_t)c->impl->rank;
	s->epoch = rt_now();
	dtpc_status st = setup(s, dev);
	if (st)
		c->impl->ops->fail(c->impl, g_error()->msg);
	else
		st = handshake(s);
	if (st) {
		/* the failure, not what freeing a half-made session may raise */
		struct g_error keep = *g_error();
		dtpc_session_free(s);
		*g_error_record() = keep;
		return st;
	}
	*out = s;
	return DTPC_OK;
}

void dtpc_session_free(dtpc_session *s)
{
	if (!s)
		return;
	/* also frees a session that session_prepare alone filled in */
	for (uint32_t t = 0; s->dv && s->weights && t < s->g->ntensors; t++)
		if (s->weights[t])
			s->dv->ops->free(s->dv, s->weights[t]);
	for (uint32_t t = 0; s->dv && s->wide && t < s->g->ntensors; t++)
		if (s->wide[t])
			s->dv->ops->free(s->dv, s->wide[t]);
	if (s->dv) {
		if (s->arena)
			s->dv->ops->free(s->dv, s->arena);
		if (s->workspace)
			s->dv->ops->free(s->dv, s->workspace);
		if (s->host != s->arena)
			free(s->host);
		if (s->widen)
			s->dv->ops->free(s->dv, s->widen);
		free(s->widen_host);
		s->dv->ops->destroy(s->dv);
	}
	for (uint32_t i = 0; s->outputs && i < s->g->noutputs; i++)
		free(s->outputs[i]);
	free(s->outputs);
	free(s->fetched);
	free(s->weights);
	free(s->cbufs);
	free(s->rowbuf);
	free(s->dims);
	free(s->numel);
	free(s->bound);
	free(s->timestep);
	free(s->wide);
	free(s->unused);
	free(s->groups);
	free(s->members);
	free(s->events);
	free(s);
}

/* ---- binding ------------------------------------------------------------------------ */

static int64_t find_tensor(const struct dtpc_session *s, const char *name, int kind)
{
	for (uint32_t t = 0; t < s->g->ntensors; t++)
		if (s->g->tensors[t].kind == kind && !strcmp(graph_str(s->g, s->g->tensors[t].name), name))
			return t;
	return -1;
}

/* For each local index of dim d, the global index (the rank's chunks of
 * every block, in block order). Caller frees. */
static int64_t *global_index(const struct dtpc_session *s, uint32_t t, int d)
{
	const struct g_graph *g = s->g;
	int64_t n = s->dims[t][d];
	int64_t *map = malloc(sizeof *map * (size_t)(n ? n : 1));
	if (!map)
		return NULL;
	int32_t p = g->tensors[t].pattern[d];
	if (p < 0) {
		for (int64_t i = 0; i < n; i++)
			map[i] = i;
		return map;
	}
	uint32_t me = graph_group_index(g, g->patterns[p].group, s->rank);
	uint32_t gs = g->groups[g->patterns[p].group].size;
	int64_t k = 0, base = 0;
	for (uint32_t b = 0; b < g->patterns[p].nblk; b++) {
		const struct g_chunk *c = graph_chunk(g, (uint32_t)p, b, me);
		for (int64_t i = 0; i < c->len; i++)
			map[k++] = base + c->start + i;
		for (uint32_t i = 0; i < gs; i++)
			base += graph_chunk(g, (uint32_t)p, b, i)->len;
	}
	return map;
}

/* Calls fn(local linear index, global linear index) over a tensor's local
 * elements, with the global tensor row-major over dims[]. */
static dtpc_status each_element(const struct dtpc_session *s, uint32_t t,
				void (*fn)(void *ud, int64_t local, int64_t global), void *ud)
{
	const struct g_tensor *x = &s->g->tensors[t];
	int64_t *map[G_MAX_DIMS] = { NULL };
	dtpc_status st = DTPC_OK;
	for (int d = 0; d < x->ndim; d++)
		if (!(map[d] = global_index(s, t, d)))
			st = g_raise(DTPC_ERR_NOMEM, "out of memory");
	int64_t idx[G_MAX_DIMS] = { 0 };
	for (int64_t l = 0; !st && l < s->numel[t]; l++) {
		int64_t gl = 0;
		for (int d = 0; d < x->ndim; d++)
			gl = gl * x->dims[d] + map[d][idx[d]];
		fn(ud, l, gl);
		for (int d = x->ndim - 1; d >= 0; d--) {
			if (++idx[d] < s->dims[t][d])
				break;
			idx[d] = 0;
		}
	}
	for (int d = 0; d < x->ndim; d++)
		free(map[d]);
	return st;
}

static uint64_t splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

struct gen {
	float *dst;
	uint64_t key;
	float scale, offset;
};

/* Uniform in [-1, 1), a pure function of (seed, name, global index). */
static void gen_element(void *ud, int64_t local, int64_t global)
{
	struct gen *G = ud;
	uint64_t r = splitmix(G->key ^ splitmix((uint64_t)global));
	float u = (float)((double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0);
	G->dst[local] = G->offset + G->scale * u;
}

/* Scales that keep activations O(1) through many blocks: a [out, in]
 * matrix gets 1/sqrt(in); a norm's weight is near 1; biases and other
 * parameters are small. */
static void gen_scale(const struct g_tensor *x, const char *name, float *scale, float *offset)
{
	size_t n = strlen(name);
	bool weight = n > 7 && !strcmp(name + n - 7, ".weight");
	*offset = 0;
	if (weight && x->ndim == 2) {
		*scale = 1.0f / sqrtf((float)(x->dims[1] ? x->dims[1] : 1));
	} else if (weight && x->ndim == 1) {
		*offset = 1;
		*scale = 0.1f;
	} else {
		*scale = 0.1f;
	}
}

/* Binding writes a weight's or an input's local elements, in float32, to
 * host memory, then bind_finish() makes them the device's: a weight's slice
 * gets device memory of its own (in the storage dtype); an input lives in
 * the arena. Where the device's memory is the host's and the storage is
 * float32, the target is the tensor's own memory and nothing moves; else it
 * is a float32 staging copy, uploaded and rounded to the storage dtype (to
 * nearest even: a bf16 checkpoint's values come through unchanged). */
static bool bind_direct(const struct dtpc_session *s)
{
	return s->dv->ops->host_memory && s->dtype == DTPC_F32;
}

/* The float32 copy of input t that a timestep_embedding op reads under a
 * narrower storage (session.h's wide), made on first use; *w NULL where
 * none is kept. */
static dtpc_status wide_target(struct dtpc_session *s, uint32_t t, float **w)
{
	*w = NULL;
	if (s->dtype == DTPC_F32 || !s->timestep[t])
		return DTPC_OK;
	size_t n = (size_t)(s->numel[t] ? s->numel[t] : 1);
	if (!s->wide[t] && !(s->wide[t] = s->dv->ops->alloc(s->dv, n * 4)))
		return g_wrap(DTPC_ERR_NOMEM, -1, "no memory for input '%s' in float32 on the %s "
			      "device", graph_str(s->g, s->g->tensors[t].name), s->dv->ops->name);
	*w = s->wide[t];
	return DTPC_OK;
}

static dtpc_status bind_target(struct dtpc_session *s, uint32_t t, float **host)
{
	const struct g_tensor *x = &s->g->tensors[t];
	size_t n = (size_t)(s->numel[t] ? s->numel[t] : 1);
	if (x->kind == GT_WEIGHT && !s->weights[t] &&
	    !(s->weights[t] = s->dv->ops->alloc(s->dv, n * s->esize)))
		return g_wrap(DTPC_ERR_NOMEM, -1, "no memory for weight '%s' on the %s device",
			      graph_str(s->g, x->name), s->dv->ops->name);
	*host = bind_direct(s) ? rt_data(s, t) : malloc(n * 4);
	if (!*host)
		return g_raise(DTPC_ERR_NOMEM, "out of memory for %s '%s'",
				x->kind == GT_WEIGHT ? "weight" : "input", graph_str(s->g, x->name));
	return DTPC_OK;
}

/* Moves what bind_target's memory holds to the tensor when st is
 * DTPC_OK, frees a staging copy either way; returns st or the move's
 * failure. */
static dtpc_status bind_finish(struct dtpc_session *s, uint32_t t, float *host, dtpc_status st)
{
	if (bind_direct(s)) {
		s->bound[t] = !st;
		return st;
	}
	const struct dev_ops *d = s->dv->ops;
	int64_t n = s->numel[t];
	float *to = rt_data(s, t);
	int fail = 0;
	float *w = NULL;
	if (!st)
		st = wide_target(s, t, &w);
	if (!st && d->host_memory) {
		fail = d->convert(s->dv, to, s->dtype, host, DTPC_F32, n);
		if (w)
			memcpy(w, host, (size_t)n * 4);
	} else if (!st) {
		/* a narrower dtype: up in float32, rounded on the device (a
		 * timestep input's float32 copy is where it goes up) */
		float *up = s->dtype == DTPC_F32 ? to : w ? w : s->widen;
		fail = d->upload(s->dv, up, host, (size_t)n * 4) ||
		       (up != to && d->convert(s->dv, to, s->dtype, up, DTPC_F32, n));
	}
	if (fail)
		st = g_wrap(DTPC_ERR_DEVICE, -1, "binding '%s'", graph_str(s->g, s->g->tensors[t].name));
	free(host);
	s->bound[t] = !st;
	return st;
}

static dtpc_status gen_tensor(struct dtpc_session *s, uint32_t t, uint64_t seed, float *dst)
{
	const struct g_tensor *x = &s->g->tensors[t];
	const char *name = graph_str(s->g, x->name);
	struct gen G = { .dst = dst, .key = splitmix(seed) ^ name_hash(name) };
	if (x->kind == GT_WEIGHT) {
		gen_scale(x, name, &G.scale, &G.offset);
	} else {
		G.scale = 1;
	}
	return each_element(s, t, gen_element, &G);
}

dtpc_status dtpc_session_bind_weights_seed(dtpc_session *s, uint64_t seed)
{
	for (uint32_t t = 0; t < s->g->ntensors; t++) {
		if (s->g->tensors[t].kind != GT_WEIGHT)
			continue;
		float *h;
		dtpc_status st = bind_target(s, t, &h);
		if (!st)
			st = bind_finish(s, t, h, gen_tensor(s, t, seed, h));
		if (st)
			return st;
	}
	return DTPC_OK;
}

dtpc_status dtpc_session_bind_inputs_seed(dtpc_session *s, uint64_t seed)
{
	for (uint32_t i = 0; i < s->g->ninputs; i++) {
		uint32_t t = s->g->inputs[i];
		float *h;
		dtpc_status st = bind_target(s, t, &h);
		if (!st)
			st = bind_finish(s, t, h, gen_tensor(s, t, seed ^ 0x696e707574ull, h));
		if (st)
			return st;
	}
	return DTPC_OK;
}

struct from_full {
	float *dst;
	const float *src;
};

static void copy_element(void *ud, int64_t local, int64_t global)
{
	struct from_full *F = ud;
	F->dst[local] = F->src[global];
}

static const char *dims_str(char *buf, size_t n, const int64_t *dims, int ndim)
{
	size_t k = 0;
	buf[0] = 0;
	for (int d = 0; d < ndim && k < n - 24; d++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)dims[d]);
	return buf;
}

static dtpc_status check_shape(const struct dtpc_session *s, uint32_t t, const int64_t *shape,
			       int ndim, const char *what)
{
	const struct g_tensor *x = &s->g->tensors[t];
	bool ok = ndim == x->ndim;
	for (int d = 0; ok && d < ndim; d++)
		ok = shape[d] == x->dims[d];
	if (ok)
		return DTPC_OK;
	char got[128], want[128];
	return g_raise(DTPC_ERR_BIND, "%s '%s' has shape [%s], but the graph expects [%s]", what,
			graph_str(s->g, x->name), dims_str(got, sizeof got, shape, ndim),
			dims_str(want, sizeof want, x->dims, x->ndim));
}

dtpc_status dtpc_session_bind_weight(dtpc_session *s, const char *name, const float *data,
				     const int64_t *shape, int ndim)
{
	int64_t t = find_tensor(s, name, GT_WEIGHT);
	if (t < 0)
		return g_raise(DTPC_ERR_BIND, "the graph has no weight '%s'", name);
	dtpc_status st = check_shape(s, (uint32_t)t, shape, ndim, "weight");
	if (st)
		return st;
	float *h;
	if ((st = bind_target(s, (uint32_t)t, &h)))
		return st;
	struct from_full F = { h, data };
	return bind_finish(s, (uint32_t)t, h, each_element(s, (uint32_t)t, copy_element, &F));
}

dtpc_status dtpc_session_set_input(dtpc_session *s, const char *name, const float *data,
				   const int64_t *shape, int ndim)
{
	int64_t t = find_tensor(s, name, GT_INPUT);
	if (t < 0)
		return g_raise(DTPC_ERR_BIND, "the graph has no input '%s'", name);
	dtpc_status st = check_shape(s, (uint32_t)t, shape, ndim, "input");
	if (st)
		return st;
	float *h;
	if ((st = bind_target(s, (uint32_t)t, &h)))
		return st;
	memcpy(h, data, (size_t)s->numel[t] * 4);
	return bind_finish(s, (uint32_t)t, h, DTPC_OK);
}

/* ---- typed data: inputs, weights and outputs in a dtype and a place ---------------- */

static bool known_dtype(dtpc_dtype t)
{
	return t == DTPC_F32 || t == DTPC_BF16 || t == DTPC_F16;
}

/* That the caller's data can be read or written where it says it is: host
 * memory on any session, device memory only on a session on a device whose
 * memory the host cannot address, and then memory of the session's GPU. */
static dtpc_status check_place(const struct dtpc_session *s, const char *what, const char *name,
			       const void *p, dtpc_dtype dt, dtpc_device where)
{
	const struct dev_ops *d = s->dv->ops;
	if (!p)
		return g_raise(DTPC_ERR_INVALID, "%s '%s': NULL data", what, name);
	if (!known_dtype(dt))
		return g_raise(DTPC_ERR_INVALID, "%s '%s': unknown dtype %d (DTPC_F32, DTPC_BF16 "
				"or DTPC_F16)", what, name, (int)dt);
	if (where == DTPC_DEVICE_CPU)
		return DTPC_OK;
	if (where != DTPC_DEVICE_CUDA)
		return g_raise(DTPC_ERR_INVALID, "%s '%s': unknown place %d (DTPC_DEVICE_CPU: host "
				"memory, DTPC_DEVICE_CUDA: the session's GPU)", what, name, (int)where);
	if (d->host_memory || !d->device_pointer)
		return g_raise(DTPC_ERR_INVALID, "%s '%s': CUDA memory given to a session on the "
				"%s device, which takes host memory (DTPC_DEVICE_CPU)", what, name,
				d->name);
	if (d->device_pointer(s->dv, p))
		return g_wrap(DTPC_ERR_INVALID, s->rank, "%s '%s'", what, name);
	return DTPC_OK;
}

/* The one sharded dim of a tensor's local part of the full tensor (dim -1:
 * the whole), and the counts around it: outer rows of `whole` elements, of
 * which the rank's part is ranges of `inner`-element runs. */
struct part {
	struct ckpt_slice sl;
	int64_t outer, inner, full, whole, local;
};

static dtpc_status part_of(const struct dtpc_session *s, uint32_t t, struct part *p)
{
	const struct g_tensor *x = &s->g->tensors[t];
	p->sl = (struct ckpt_slice){ .dim = -1 };
	if (x->kind == GT_WEIGHT && !ckpt_slice(s->g, t, s->rank, &p->sl))
		return g_raise(DTPC_ERR_BIND, "weight '%s' is split along several dims",
				graph_str(s->g, x->name));
	p->outer = p->inner = p->full = 1;
	for (int d = 0; d < x->ndim; d++) {
		p->full *= x->dims[d];
		if (p->sl.dim >= 0 && d < p->sl.dim)
			p->outer *= x->dims[d];
		if (p->sl.dim >= 0 && d > p->sl.dim)
			p->inner *= x->dims[d];
	}
	p->whole = p->sl.dim >= 0 ? x->dims[p->sl.dim] * p->inner : 0;
	p->local = p->sl.dim >= 0 ? s->dims[t][p->sl.dim] * p->inner : 0;
	return DTPC_OK;
}

/* The rank's part of the full tensor src into dst, elements of es bytes
 * (host memory). */
static void gather_host(const struct part *p, void *dst, const void *src, size_t es, int64_t n)
{
	if (p->sl.dim < 0) {
		memcpy(dst, src, (size_t)n * es);
		return;
	}
	char *to = dst;
	for (int64_t o = 0; o < p->outer; o++)
		for (int r = 0; r < p->sl.n; r++) {
			size_t len = (size_t)(p->sl.len[r] * p->inner) * es;
			memcpy(to, (const char *)src + (size_t)(o * p->whole + p->sl.start[r] *
								 p->inner) * es, len);
			to += len;
		}
}

/* The same in device memory, elements of es bytes: the storage dtype's,
 * or float32's (a timestep input's copy), copy2d moving es / esize storage
 * elements for each. */
static int gather_dev(const struct dtpc_session *s, const struct part *p, void *dst,
		      const void *src, size_t es)
{
	const struct dev_ops *d = s->dv->ops;
	int64_t at = 0, k = (int64_t)(es / s->esize);
	for (int r = 0; r < p->sl.n; r++) {
		size_t off = (size_t)at * es, from = (size_t)(p->sl.start[r] * p->inner) * es;
		if (d->copy2d(s->dv, (float *)(void *)((char *)dst + off), p->local * k,
			      (const float *)(const void *)((const char *)src + from), p->whole * k,
			      p->outer, p->sl.len[r] * p->inner * k))
			return 1;
		at += p->sl.len[r] * p->inner;
	}
	return 0;
}

/* Host data in dtype dt: the rank's part gathered, converted to dtype tt
 * (the storage dtype; float32 for a timestep input's copy) unless it is
 * that already, and moved to the tensor's memory. */
static dtpc_status put_host(struct dtpc_session *s, uint32_t t, const struct part *p,
			    void *to, dtpc_dtype tt, const void *data, dtpc_dtype dt)
{
	const struct dev_ops *d = s->dv->ops;
	size_t n = (size_t)s->numel[t], es = dtype_size(dt), ts = dtype_size(tt);
	const void *part = data;
	void *gathered = NULL, *converted = NULL;
	dtpc_status st = DTPC_OK;
	bool same = dt == tt;
	/* gathered straight into the tensor where it is host memory of this dtype */
	if (p->sl.dim >= 0) {
		void *into = same && d->host_memory ? to : (gathered = malloc(n ? n * es : 1));
		if (!into)
			return g_raise(DTPC_ERR_NOMEM, "out of memory");
		gather_host(p, into, data, es, (int64_t)n);
		part = into;
	}
	int fail = 0;
	if (d->host_memory) {
		if (!same)
			fail = d->convert(s->dv, to, tt, part, dt, (int64_t)n);
		else if (part != to)
			memcpy(to, part, n * es);
	} else {
		if (!same && (converted = malloc(n ? n * ts : 1)))
			k_convert(converted, (enum k_dtype)tt, part, (enum k_dtype)dt, (int64_t)n);
		if (!same && !converted)
			st = g_raise(DTPC_ERR_NOMEM, "out of memory");
		else if (s->stream && d->wait_stream(s->dv, s->stream))
			fail = 1;
		else
			fail = d->upload(s->dv, to, same ? part : converted, n * ts);
	}
	if (fail)
		st = g_wrap(DTPC_ERR_DEVICE, s->rank, "binding '%s'",
			    graph_str(s->g, s->g->tensors[t].name));
	free(gathered);
	free(converted);
	return st;
}

/* Device data (the session's GPU) in dtype dt, into dtype tt as put_host:
 * copied or converted on the device's stream, after the caller's stream's
 * work so far and before its later work (or, with no stream, complete on
 * return). */
static dtpc_status put_device(struct dtpc_session *s, uint32_t t, const struct part *p,
			      void *to, dtpc_dtype tt, const void *data, dtpc_dtype dt)
{
	const struct dev_ops *d = s->dv->ops;
	void *tmp = NULL;
	const void *src = data;
	int fail = s->stream && d->wait_stream(s->dv, s->stream);
	/* a part of a tensor of another dtype: the whole converted, then cut */
	if (!fail && p->sl.dim >= 0 && dt != tt) {
		fail = !(tmp = d->alloc(s->dv, (size_t)p->full * dtype_size(tt))) ||
		       d->convert(s->dv, tmp, tt, data, dt, p->full);
		src = tmp;
		dt = tt;
	}
	if (!fail)
		fail = p->sl.dim >= 0 ? gather_dev(s, p, to, src, dtype_size(tt))
				      : d->convert(s->dv, to, tt, src, dt, s->numel[t]);
	if (!fail)
		fail = s->stream && !tmp ? d->signal_stream(s->dv, s->stream) : d->sync(s->dv);
	if (tmp)
		d->free(s->dv, tmp);
	if (fail)
		return g_wrap(DTPC_ERR_DEVICE, s->rank, "binding '%s'",
			      graph_str(s->g, s->g->tensors[t].name));
	return DTPC_OK;
}

static dtpc_status bind_data(struct dtpc_session *s, const char *name, int kind,
			     const void *data, dtpc_dtype dt, dtpc_device where,
			     const int64_t *shape, int ndim)
{
	const char *what = kind == GT_WEIGHT ? "weight" : "input";
	int64_t t = find_tensor(s, name, kind);
	if (t < 0)
		return g_raise(DTPC_ERR_BIND, "the graph has no %s '%s'", what, name);
	dtpc_status st = check_shape(s, (uint32_t)t, shape, ndim, what);
	if (!st)
		st = check_place(s, what, name, data, dt, where);
	struct part p;
	if (!st)
		st = part_of(s, (uint32_t)t, &p);
	size_t n = (size_t)(s->numel[t] ? s->numel[t] : 1);
	if (!st && kind == GT_WEIGHT && !s->weights[t] &&
	    !(s->weights[t] = s->dv->ops->alloc(s->dv, n * s->esize)))
		st = g_wrap(DTPC_ERR_NOMEM, -1, "no memory for weight '%s' on the %s device", name,
			    s->dv->ops->name);
	if (st)
		return st;
	void *to = rt_data(s, (uint32_t)t);
	st = where == DTPC_DEVICE_CPU ? put_host(s, (uint32_t)t, &p, to, s->dtype, data, dt)
				      : put_device(s, (uint32_t)t, &p, to, s->dtype, data, dt);
	/* a timestep input under a narrower storage: its float32 copy too */
	float *w = NULL;
	if (!st && kind == GT_INPUT)
		st = wide_target(s, (uint32_t)t, &w);
	if (!st && w)
		st = where == DTPC_DEVICE_CPU ? put_host(s, (uint32_t)t, &p, w, DTPC_F32, data, dt)
					      : put_device(s, (uint32_t)t, &p, w, DTPC_F32, data, dt);
	s->bound[t] = !st;
	return st;
}

dtpc_status dtpc_session_set_input_data(dtpc_session *s, const char *name, const void *data,
					dtpc_dtype dtype, dtpc_device where,
					const int64_t *shape, int ndim)
{
	return bind_data(s, name, GT_INPUT, data, dtype, where, shape, ndim);
}

dtpc_status dtpc_session_bind_weight_data(dtpc_session *s, const char *name, const void *data,
					  dtpc_dtype dtype, dtpc_device where,
					  const int64_t *shape, int ndim)
{
	return bind_data(s, name, GT_WEIGHT, data, dtype, where, shape, ndim);
}

dtpc_status dtpc_session_output_data(const dtpc_session *cs, int i, void *dst, dtpc_dtype dt,
				     dtpc_device where, size_t bytes)
{
	struct dtpc_session *s = (struct dtpc_session *)cs; /* the caller's; const as the API has it */
	const struct dev_ops *d = s->dv->ops;
	if (i < 0 || (uint32_t)i >= s->g->noutputs)
		return g_raise(DTPC_ERR_INVALID, "output %d of %u", i, s->g->noutputs);
	if (!s->ran)
		return g_raise(DTPC_ERR_STATE, "no run yet");
	uint32_t t = s->g->outputs[i];
	const char *name = graph_str(s->g, s->g->tensors[t].name);
	dtpc_status st = check_place(s, "output", name, dst, dt, where);
	if (st)
		return st;
	size_t n = (size_t)s->numel[t];
	if (bytes != n * dtype_size(dt))
		return g_raise(DTPC_ERR_INVALID, "output '%s': %zu elements of %s are %zu bytes, "
				"not %zu", name, n, dtype_name(dt), n * dtype_size(dt), bytes);
	const void *from = rt_data(s, t);
	bool same = dt == s->dtype;
	int fail = s->stream && d->wait_stream(s->dv, s->stream);
	if (!fail && where != DTPC_DEVICE_CPU) {
		/* on the device's stream; a plain copy when the dtypes agree */
		fail = d->convert(s->dv, dst, dt, from, s->dtype, (int64_t)n) ||
		       (s->stream ? d->signal_stream(s->dv, s->stream) : d->sync(s->dv));
	} else if (!fail && d->host_memory && same) {
		memcpy(dst, from, n * s->esize);
	} else if (!fail && d->host_memory) {
		fail = d->convert(s->dv, dst, dt, from, s->dtype, (int64_t)n);
	} else if (!fail && same) {
		fail = d->download(s->dv, dst, from, n * s->esize);
	} else if (!fail) {
		/* down in the storage dtype (as narrow as it is), converted on the host */
		void *tmp = malloc(n ? n * s->esize : 1);
		if (!tmp)
			return g_raise(DTPC_ERR_NOMEM, "out of memory");
		if (!(fail = d->download(s->dv, tmp, from, n * s->esize)))
			k_convert(dst, (enum k_dtype)dt, tmp, (enum k_dtype)s->dtype, (int64_t)n);
		free(tmp);
	}
	if (fail)
		return g_wrap(DTPC_ERR_DEVICE, s->rank, "output '%s'", name);
	return DTPC_OK;
}

dtpc_status dtpc_session_stream(dtpc_session *s, void *cuda_stream)
{
	const struct dev_ops *d = s->dv->ops;
	if (cuda_stream && (!d->wait_stream || !d->signal_stream))
		return g_raise(DTPC_ERR_INVALID, "the %s device has no streams: a session on it "
				"takes NULL", d->name);
	s->stream = cuda_stream;
	return DTPC_OK;
}

dtpc_dtype dtpc_session_get_dtype(const dtpc_session *s)
{
	return s->dtype;
}

int dtpc_session_gpu(const dtpc_session *s)
{
	return s->dv->ops->ordinal ? s->dv->ops->ordinal(s->dv) : -1;
}

/* A per-rank folder (dtpc shard): made for this graph's world, this rank's
 * file there, and its metadata naming this graph's weights and slices. */
static dtpc_status open_rank_file(const dtpc_session *s, struct ckpt *c)
{
	if (ckpt_nshards(c) != s->g->world) {
		char name[64];
		ckpt_rank_name(0, ckpt_nshards(c), name, sizeof name);
		return g_raise(DTPC_ERR_BIND, "%s: sharded for %u ranks (%s, ...), but this graph "
				"runs on %u; shard the weights for this graph with dtpc shard",
				ckpt_path(c), ckpt_nshards(c), name, s->g->world);
	}
	if (!ckpt_open_rank(c, s->rank))
		return g_error()->status;
	struct ckpt_expect e;
	ckpt_expect_of(s->g, s->rank, &e);
	if (!ckpt_check_rank_file(ckpt_rank_file(c), ckpt_path(c), &e))
		return g_error()->status;
	return DTPC_OK;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* name among the n sorted names */
static bool in_names(const char *name, const char **names, size_t n)
{
	return n && bsearch(&name, names, n, sizeof *names, cmp_name);
}

/* Keeps, for dtpc_session_unused, the names of c's tensors that are no
 * tensor of `kind` in the graph: the rest of a larger variant's checkpoint
 * (Flux dev's guidance embedder under a schnell graph) or an input this
 * graph does not take is bound without complaint, and the caller may say
 * so. c's names come in name order, and so do these. */
static dtpc_status keep_unused(struct dtpc_session *s, const struct ckpt *c, int kind)
{
	const struct g_graph *g = s->g;
	const char **mine = malloc(sizeof *mine * (g->ntensors + 1));
	if (!mine)
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	size_t n = 0;
	for (uint32_t t = 0; t < g->ntensors; t++)
		if (g->tensors[t].kind == kind)
			mine[n++] = graph_str(g, g->tensors[t].name);
	qsort(mine, n, sizeof *mine, cmp_name);
	size_t count = 0, bytes = 0;
	for (size_t i = 0; i < ckpt_count(c); i++)
		if (!in_names(ckpt_name_at(c, i), mine, n)) {
			count++;
			bytes += strlen(ckpt_name_at(c, i)) + 1;
		}
	/* one block: the pointers, then the names they point at */
	char **names = count ? malloc(count * sizeof *names + bytes) : NULL;
	if (count && !names) {
		free(mine);
		return g_raise(DTPC_ERR_NOMEM, "out of memory");
	}
	char *at = (char *)(names + count);
	size_t k = 0;
	for (size_t i = 0; i < ckpt_count(c); i++) {
		const char *name = ckpt_name_at(c, i);
		if (in_names(name, mine, n))
			continue;
		size_t len = strlen(name) + 1;
		names[k++] = memcpy(at, name, len);
		at += len;
	}
	free(mine);
	s->unused = names;
	s->nunused = (int)count;
	return DTPC_OK;
}

/* Reads each tensor of `kind` by name from a checkpoint (runtime/weights.h):
 * this rank's slice only (one sharded dim at most, read as ranges of that
 * dim), or from a per-rank folder the rank's file's tensor whole. */
static dtpc_status bind_file(dtpc_session *s, const char *path, int kind)
{
	struct ckpt *c = NULL;
	free(s->unused);
	s->unused = NULL;
	s->nunused = 0;
	if (!ckpt_open(&c, path))
		return g_error()->status;
	const char *what = kind == GT_WEIGHT ? "weight" : "input";
	bool ranked = ckpt_kind(c) == CKPT_RANKS;
	dtpc_status st = DTPC_OK;
	if (ranked && kind != GT_WEIGHT)
		st = g_raise(DTPC_ERR_BIND, "%s: a folder of per-rank weights (dtpc shard) holds no "
			      "inputs", path);
	else if (ranked)
		st = open_rank_file(s, c);
	/* every weight against the headers before any data is read */
	else if (kind == GT_WEIGHT && !ckpt_check_manifest(s->g, c))
		st = g_error()->status;
	for (uint32_t t = 0; t < s->g->ntensors && !st; t++) {
		const struct g_tensor *x = &s->g->tensors[t];
		if (x->kind != kind)
			continue;
		const char *name = graph_str(s->g, x->name), *fpath = ckpt_path(c);
		const struct st_file *f = NULL;
		const struct st_tensor *e = ckpt_find(c, name, &f, &fpath);
		if (!e) {
			st = g_raise(DTPC_ERR_BIND, "%s: %s '%s' is missing", fpath, what, name);
			break;
		}
		/* a rank's file holds its slice; a checkpoint the whole tensor */
		const int64_t *want = ranked ? s->dims[t] : x->dims;
		if (e->ndim != x->ndim || memcmp(e->shape, want, (size_t)x->ndim * sizeof *want)) {
			char got[128], exp[128];
			st = g_raise(DTPC_ERR_BIND, "%s: %s '%s' has shape [%s], but %s [%s]", fpath,
				      what, name, dims_str(got, sizeof got, e->shape, e->ndim),
				      ranked ? "this rank's slice is" : "the graph expects",
				      dims_str(exp, sizeof exp, want, x->ndim));
			break;
		}
		if (!ckpt_float_dtype(e->dtype)) {
			st = g_raise(DTPC_ERR_BIND, "%s: %s '%s' is %s; F32, F16, BF16 or F64 "
				      "(converted to float32) are accepted", fpath, what, name,
				      st_dtype_name(e->dtype));
			break;
		}
		struct ckpt_slice sl = { .dim = -1 };
		if (!ranked && !ckpt_slice(s->g, t, s->rank, &sl)) {
			st = g_raise(DTPC_ERR_BIND, "%s '%s' is split along several dims", what, name);
			break;
		}
		float *h;
		if ((st = bind_target(s, t, &h)))
			break;
		if (!st_read_f32(f, e, sl.dim, sl.start, sl.len, sl.n, h))
			st = g_wrap(g_error()->status, -1, "%s", fpath);
		st = bind_finish(s, t, h, st);
	}
	if (!st)
		st = keep_unused(s, c, kind);
	ckpt_close(c);
	return st;
}

/* A rank that cannot bind its own file (a per-rank file of another graph, a
 * damaged shard only it reads) will not run: it is marked failed, so that
 * the other ranks' first collective fails at once naming it, rather than
 * waiting out the timeout for it. */
static dtpc_status bind_file_or_fail(dtpc_session *s, const char *path, int kind)
{
	dtpc_status st = bind_file(s, path, kind);
	if (st)
		s->c->ops->fail(s->c, g_error()->msg);
	return st;
}

dtpc_status dtpc_session_bind_weights_file(dtpc_session *s, const char *path)
{
	return bind_file_or_fail(s, path, GT_WEIGHT);
}

dtpc_status dtpc_session_bind_inputs_file(dtpc_session *s, const char *path)
{
	return bind_file_or_fail(s, path, GT_INPUT);
}

/* ---- running -------------------------------------------------------------------------- */

void rt_trace_part(struct dtpc_session *s, uint32_t op, enum trace_part part, uint32_t step,
		   double t0, double t1, uint64_t bytes)
{
	if (s->nevents == s->capevents) {
		size_t nc = s->capevents ? s->capevents * 2 : 1024;
		struct trace_event *ne = realloc(s->events, nc * sizeof *ne);
		if (!ne)
			return; /* tracing is best effort; the run goes on */
		s->events = ne;
		s->capevents = nc;
	}
	s->events[s->nevents++] = (struct trace_event){ op, t0 - s->epoch, t1 - s->epoch, bytes,
							part, step };
}

static void trace_add(struct dtpc_session *s, uint32_t op, double t0, double t1)
{
	rt_trace_part(s, op, TRACE_OP, 0, t0, t1, 0);
}

static dtpc_status run_ops(dtpc_session *s)
{
	/* traced spans on an asynchronous device cover the op's execution
	 * (its collectives waited for first, bounded: see finish_run) */
	bool wait = s->tracing && !s->dv->ops->host_memory;
	for (uint32_t i = 0; i < s->g->nops; i++) {
		double t0 = s->tracing ? rt_now() : 0;
		dtpc_status st = exec_op(s, i);
		if (!st && wait && comm_complete(s->c))
			st = g_wrap(DTPC_ERR_COMM, s->rank, "op %u (%s)", i,
				    op_table[s->g->ops[i].kind].name);
		if (!st && wait && s->dv->ops->sync(s->dv))
			st = g_wrap(DTPC_ERR_DEVICE, s->rank, "op %u (%s)", i,
				    op_table[s->g->ops[i].kind].name);
		if (st)
			return st;
		if (s->tracing)
			trace_add(s, i, t0, rt_now());
	}
	return DTPC_OK;
}

/* The second run is recorded as a device graph and replayed; later runs
 * replay it. The first runs plainly so that one-time work (a GEMM library's
 * choices, kernels loaded on first use) stays out of the recording. */
static dtpc_status run_graph(dtpc_session *s)
{
	const struct dev_ops *d = s->dv->ops;
	if (!s->graph_ready) {
		if (d->capture_begin(s->dv))
			return g_reraise(DTPC_ERR_DEVICE, s->rank);
		dtpc_status st = run_ops(s);
		/* end the capture whatever happened, so the stream is usable */
		if (d->capture_end(s->dv) && !st)
			st = g_reraise(DTPC_ERR_DEVICE, s->rank);
		if (st)
			return st;
		s->graph_ready = true;
	}
	if (d->replay(s->dv))
		return g_reraise(DTPC_ERR_DEVICE, s->rank);
	return DTPC_OK;
}

/* The end of a run: a device backend's collectives may still run on the
 * stream: they are waited for first, bounded by the timeout — a stream sync
 * would wait for ever on a peer that stopped. This ends the step's
 * communication; then the device's work. The outputs stay where the run
 * left them, in the storage dtype: dtpc_session_output makes an output's
 * float32 host copy when first asked (fetch_output), the typed reads
 * (dtpc_session_output_data) read the tensor itself. */
static dtpc_status finish_run(dtpc_session *s)
{
	const struct dev_ops *d = s->dv->ops;
	if (comm_complete(s->c))
		return g_reraise(DTPC_ERR_COMM, s->rank);
	if (d->sync(s->dv))
		return g_reraise(DTPC_ERR_DEVICE, s->rank);
	for (uint32_t i = 0; i < s->g->noutputs; i++)
		s->fetched[i] = false;
	return DTPC_OK;
}

/* Output i in float32 on the host, where dtpc_session_output reads it: the
 * tensor itself where the device's memory is the host's and the storage is
 * float32; else the host mirror for float32, or a copy of its own (a
 * narrower tensor's slot has no room for float32). */
static dtpc_status fetch_output(dtpc_session *s, uint32_t i)
{
	const struct dev_ops *d = s->dv->ops;
	if (bind_direct(s) || s->fetched[i])
		return DTPC_OK;
	uint32_t t = s->g->outputs[i];
	size_t n = (size_t)s->numel[t];
	float *from = rt_data(s, t), *to = (float *)((char *)s->host + s->g->tensors[t].offset);
	if (s->dtype != DTPC_F32) {
		if (!s->outputs[i] && !(s->outputs[i] = malloc((n ? n : 1) * 4)))
			return g_raise(DTPC_ERR_NOMEM, "out of memory");
		to = s->outputs[i];
	}
	int fail;
	if (s->dtype == DTPC_F32)
		fail = d->download(s->dv, to, from, n * 4);
	else if (d->host_memory)
		fail = d->convert(s->dv, to, DTPC_F32, from, s->dtype, (int64_t)n);
	else
		fail = d->convert(s->dv, s->widen, DTPC_F32, from, s->dtype, (int64_t)n) ||
		       d->download(s->dv, to, s->widen, n * 4);
	if (fail)
		return g_wrap(DTPC_ERR_DEVICE, s->rank, "output '%s'",
			      graph_str(s->g, s->g->tensors[t].name));
	s->fetched[i] = true;
	return DTPC_OK;
}

dtpc_status dtpc_session_run(dtpc_session *s)
{
	for (uint32_t t = 0; t < s->g->ntensors; t++) {
		int k = s->g->tensors[t].kind;
		if ((k == GT_WEIGHT || k == GT_INPUT) && !s->bound[t]) {
			dtpc_status st = g_raise(DTPC_ERR_STATE, "%s '%s' is not bound",
						  k == GT_WEIGHT ? "weight" : "input",
						  graph_str(s->g, s->g->tensors[t].name));
			s->c->ops->fail(s->c, g_error()->msg);
			return st;
		}
	}
	s->replayed = s->graphs && s->runs > 0 && !s->tracing;
	dtpc_status st = DTPC_OK;
	/* after the caller's stream's work so far (dtpc_session_stream) */
	if (s->stream && s->dv->ops->wait_stream(s->dv, s->stream))
		st = g_reraise(DTPC_ERR_DEVICE, s->rank);
	if (!st)
		st = s->replayed ? run_graph(s) : run_ops(s);
	if (!st)
		st = finish_run(s);
	if (!st && s->stream && s->dv->ops->signal_stream(s->dv, s->stream))
		st = g_reraise(DTPC_ERR_DEVICE, s->rank);
	if (st) {
		if (st != DTPC_ERR_COMM)
			s->c->ops->fail(s->c, g_error()->msg);
		return st;
	}
	s->runs++;
	s->ran = true;
	return DTPC_OK;
}

static const char *dtype_name(dtpc_dtype t)
{
	return t == DTPC_F32 ? "f32" : t == DTPC_BF16 ? "bf16" : "f16";
}

/* Re-proves every op at the session's current dtype (ring attention's
 * scratch holds parts of both widths). */
static dtpc_status recheck(struct dtpc_session *s)
{
	for (uint32_t i = 0; i < s->g->nops; i++) {
		dtpc_status st = exec_check(s, i);
		if (st)
			return st;
	}
	return DTPC_OK;
}

dtpc_status dtpc_session_dtype(dtpc_session *s, dtpc_dtype t)
{
	const struct dev_ops *d = s->dv->ops;
	if (t == s->dtype)
		return DTPC_OK;
	if (t != DTPC_F32 && t != DTPC_BF16 && t != DTPC_F16)
		return g_raise(DTPC_ERR_INVALID, "unknown dtype %d", (int)t);
	for (uint32_t i = 0; i < s->g->ntensors; i++)
		if (s->bound[i])
			return g_raise(DTPC_ERR_STATE, "the dtype is set before any weight or input "
					"is bound");
	/* the memory plan is sized for the graph's dtype: narrower fits */
	if (dtype_size(t) > dtype_size(s->graph_dtype))
		return g_raise(DTPC_ERR_INVALID, "the graph was compiled for %s storage; its "
				"memory plan has no room for %s: compile the plan with dtype = "
				"\"%s\" (or dtpc compile --dtype %s)", dtype_name(s->graph_dtype),
				dtype_name(t), dtype_name(t), dtype_name(t));
	/* back to float32 (from a narrower dtype set before) needs no buffers */
	dtpc_status st = t != DTPC_F32 ? narrow_storage(s, t) : DTPC_OK;
	if (!st && t == DTPC_F32 && d->set_dtype(s->dv, t))
		st = g_reraise(DTPC_ERR_DEVICE, s->rank);
	if (st)
		return st;
	dtpc_dtype was = s->dtype;
	s->dtype = t;
	s->esize = dtype_size(t);
	if ((st = recheck(s))) {
		s->dtype = was;
		s->esize = dtype_size(was);
		d->set_dtype(s->dv, was);
	}
	return st;
}

dtpc_status dtpc_session_threads(dtpc_session *s, int n)
{
	if (n < 1 || n > 4096)
		return g_raise(DTPC_ERR_INVALID, "threads per rank: 1 to 4096, not %d", n);
	if (s->dv->ops->threads)
		s->dv->ops->threads(s->dv, n);
	return DTPC_OK;
}

int dtpc_session_thread_count(const dtpc_session *s)
{
	return s->dv->ops->thread_count ? s->dv->ops->thread_count(s->dv) : 1;
}

void dtpc_session_graphs(dtpc_session *s, int enable)
{
	s->graphs = enable && s->dv->ops->graphs && graphable(s->g);
}

int dtpc_session_graphed(const dtpc_session *s)
{
	return s->replayed;
}

int dtpc_session_noutputs(const dtpc_session *s)
{
	return (int)s->g->noutputs;
}

dtpc_status dtpc_session_output(const dtpc_session *s, int i, const char **name,
				const float **data, const int64_t **shape, int *ndim)
{
	if (i < 0 || (uint32_t)i >= s->g->noutputs)
		return g_raise(DTPC_ERR_INVALID, "output %d of %u", i, s->g->noutputs);
	if (!s->ran)
		return g_raise(DTPC_ERR_STATE, "no run yet");
	uint32_t t = s->g->outputs[i];
	/* the float32 host copy is made on the first ask after a run: the
	 * session is the caller's, const here only as the API has it */
	dtpc_status st = data ? fetch_output((struct dtpc_session *)s, (uint32_t)i) : DTPC_OK;
	if (st)
		return st;
	if (name)
		*name = graph_str(s->g, s->g->tensors[t].name);
	if (data)
		*data = s->dtype != DTPC_F32 ? s->outputs[i]
					     : (const float *)((const char *)s->host +
							       s->g->tensors[t].offset);
	if (shape)
		*shape = s->dims[t];
	if (ndim)
		*ndim = s->g->tensors[t].ndim;
	return DTPC_OK;
}

dtpc_status dtpc_session_output_nonfinite(const dtpc_session *s, int i, int64_t *count)
{
	const float *data;
	const int64_t *shape;
	int nd;
	dtpc_status st = dtpc_session_output(s, i, NULL, &data, &shape, &nd);
	if (st)
		return st;
	int64_t n = 1, bad = 0;
	for (int d = 0; d < nd; d++)
		n *= shape[d];
	for (int64_t k = 0; k < n; k++)
		bad += !isfinite(data[k]);
	*count = bad;
	return DTPC_OK;
}

int dtpc_session_unused(const dtpc_session *s, int i, const char **name)
{
	if (name)
		*name = i >= 0 && i < s->nunused ? s->unused[i] : NULL;
	return s->nunused;
}

void dtpc_session_trace(dtpc_session *s, int enable)
{
	s->tracing = enable != 0;
}
