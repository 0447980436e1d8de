/* comm_nccl.c — the nccl backend: one rank per GPU, buffers in device memory.
 *
 * Every communicator is NCCL's non-blocking kind (ncclConfig_t.blocking = 0),
 * so no NCCL call can hold this thread: a call returns ncclSuccess or
 * ncclInProgress, and we poll ncclCommGetAsyncError against a deadline.
 *
 * Collectives are asynchronous: each is enqueued on the compute stream
 * (c->stream) and returns once NCCL has accepted it, with an event recorded
 * after it in a list of pending work. complete() polls that list in order —
 * the event and the communicator's async error — each entry against a
 * deadline that starts when the one before it ended, so the host never
 * blocks on a stream that a stopped peer could hold forever. Exchanges (the
 * ring shift among them) run on a side stream after the point of the
 * compute stream where they start; exchange_wait makes the compute stream
 * wait for the transfer's event (no host wait) and lists the point as
 * pending. A wait that passes its deadline, and any NCCL or CUDA error,
 * aborts every communicator (ncclCommAbort: the kernels queued end) and
 * marks the backend failed: every later call fails at once with the first
 * message. NCCL cannot tell the peers; they see their own deadline pass (or
 * NCCL's remote error), so every rank ends bounded.
 *
 * The world communicator comes from ncclCommInitRankConfig (the unique id
 * travels over MPI under mpirun); prepare() splits it into one communicator
 * per graph group of two or more members (ncclCommSplit, a collective over
 * the world); groups of one member need none (their collectives are device
 * copies). docs/comm.md, "The nccl backend", has the whole story. */
#include "runtime/comm.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/dtpc.h"

#ifdef DTPC_HAVE_NCCL
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
/* nccl.h and the CUDA headers it includes are not -Wundef and
 * -Wstrict-prototypes clean (C++ tests, `f()` declarations) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

enum {
	BUSY_POLLS = 100,       /* a wait's first polls only yield: small collectives are quick */
	SLEEP_MIN_NS = 20000,   /* then it sleeps, 20 µs doubling ... */
	SLEEP_MAX_NS = 1000000, /* ... up to 1 ms */
	SETUP_MIN_MS = 30000,   /* making a communicator takes seconds: never wait less */
	NAME = 64,
	WHAT = 96,
	MSG = 512,
	PENDING = 64,           /* collectives in flight before one is waited for */
};

/* What a wait is about, for its messages. */
struct op {
	char label[WHAT + 32]; /* "op 17 (all_gather h)" */
	const char *group;     /* "[0 2 4 6]" */
	char wait[NAME];       /* the members this rank waits for: "[2 4 6]", or "" */
};

/* Work issued and not yet seen to end: an event after it on c->stream. */
struct pending {
	cudaEvent_t ev;   /* made once, reused */
	ncclComm_t *slot; /* its communicator, polled for errors; NULL for none */
	struct op o;      /* o.group points at group */
	char group[NAME];
};

/* A graph group's communicator, by group id. */
struct ngroup {
	ncclComm_t comm; /* NULL for a group of one member, or once aborted */
	int n;
	int *ranks;      /* NULL: no group with this id was prepared */
	char name[NAME]; /* "[0 2 4 6]" */
	char cname[NAME + 32]; /* NCCL's commName, for NCCL_DEBUG lines */
};

struct nccl {
	struct comm c;
	int timeout_ms;
	bool mpi_init;     /* we called MPI_Init_thread: we call MPI_Finalize */
	ncclComm_t world;  /* NULL once aborted */
	char world_name[NAME];
	struct ngroup *groups;
	int ngroups;
	cudaStream_t own;  /* c->stream until the session sets its compute stream */
	cudaStream_t side; /* exchanges, so the compute stream runs on meanwhile */
	cudaEvent_t ready; /* the point of c->stream an exchange starts after */
	struct pending pend[PENDING]; /* a ring: the oldest at head */
	int head, npend;
	bool failed;
	char why[MSG];     /* the first failure, which every later call reports */
};

struct comm_request {
	cudaEvent_t done;  /* on the side stream, after the exchange's transfer */
	ncclComm_t *slot;  /* the group's communicator; NULL for a group of one */
	char label[WHAT + 32];
	char group[NAME];
	char wait[NAME];
};

static struct nccl *to_nccl(struct comm *c)
{
	return (struct nccl *)c;
}

static cudaStream_t stream_of(struct nccl *n)
{
	return (cudaStream_t)n->c.stream;
}

static int setup_ms(const struct nccl *n)
{
	return n->timeout_ms > SETUP_MIN_MS ? n->timeout_ms : SETUP_MIN_MS;
}

/* ---- waiting --------------------------------------------------------------------- */

struct backoff {
	int polls;
	long ns;
};

static void pause_poll(struct backoff *b)
{
	if (++b->polls <= BUSY_POLLS) {
		sched_yield();
		return;
	}
	struct timespec ts = { 0, b->ns };
	nanosleep(&ts, NULL);
	b->ns = b->ns * 2 > SLEEP_MAX_NS ? SLEEP_MAX_NS : b->ns * 2;
}

/* ---- failure ---------------------------------------------------------------------- */

static void abort_comm(ncclComm_t *slot)
{
	if (slot && *slot) {
		ncclCommAbort(*slot);
		*slot = NULL;
	}
}

/* Records msg as the backend's failure (the first one wins) and aborts
 * *slot and then every other communicator — work of any of them may be
 * queued on the stream behind the failed one, and an abort ends its
 * kernels. The pending list is dropped: nothing will wait for it. */
static void mark_failed(struct nccl *n, ncclComm_t *slot, const char *msg)
{
	if (!n->failed) {
		n->failed = true;
		snprintf(n->why, sizeof n->why, "%s", msg);
	}
	abort_comm(slot);
	abort_comm(&n->world);
	for (int i = 0; i < n->ngroups; i++)
		abort_comm(&n->groups[i].comm);
	n->npend = 0;
}

/* mark_failed, then raises msg as COMM_FAILED. */
static int failed_with(struct nccl *n, ncclComm_t *slot, const char *msg)
{
	mark_failed(n, slot, msg);
	return comm_errorf(&n->c, COMM_FAILED, "%s", msg);
}

static int fail_fast(struct nccl *n)
{
	return comm_errorf(&n->c, COMM_FAILED, "%s", n->why);
}

static int nccl_failed(struct nccl *n, ncclComm_t *slot, const struct op *o, ncclResult_t r)
{
	/* NCCL's detail, read before the abort frees the communicator */
	const char *detail = ncclGetLastError(slot ? *slot : NULL);
	char msg[MSG];
	snprintf(msg, sizeof msg, "rank %d: NCCL error in %s of group %s: %s%s%s%s", n->c.rank,
		 o->label, o->group, ncclGetErrorString(r), detail && *detail ? " (" : "",
		 detail ? detail : "", detail && *detail ? ")" : "");
	return failed_with(n, slot, msg);
}

static int cuda_failed(struct nccl *n, ncclComm_t *slot, const struct op *o, const char *call,
		       cudaError_t e)
{
	cudaGetLastError(); /* clears a non-sticky error: it is reported here */
	char msg[MSG];
	snprintf(msg, sizeof msg, "rank %d: CUDA error in %s of group %s: %s: %s (%s)", n->c.rank,
		 o->label, o->group, call, cudaGetErrorName(e), cudaGetErrorString(e));
	return failed_with(n, slot, msg);
}

static int timed_out(struct nccl *n, ncclComm_t *slot, const struct op *o, int ms, bool on_gpu)
{
	char msg[MSG];
	if (!*o->wait)
		snprintf(msg, sizeof msg,
			 "rank %d: timed out after %d ms in %s of group %s: GPU %d did not get to the end "
			 "of it (no other rank takes part)",
			 n->c.rank, ms, o->label, o->group, n->c.device);
	else
		snprintf(msg, sizeof msg,
			 "rank %d: timed out after %d ms in %s of group %s waiting for ranks %s (%s); "
			 "aborted this rank's NCCL communicators",
			 n->c.rank, ms, o->label, o->group, o->wait,
			 on_gpu ? "the transfer was on the GPU and did not finish"
				: "NCCL had not yet set the transfer up with them");
	return failed_with(n, slot, msg);
}

/* Polls what was issued on *slot (slot NULL: no communicator) to its end:
 * first until NCCL has put it on the GPU (a non-blocking communicator may
 * return before), then — with ev — until ev, recorded on s after it (or
 * already, when recorded), has passed. Without ev it returns once the work
 * is on the GPU. */
static int settle(struct nccl *n, ncclComm_t *slot, cudaStream_t s, cudaEvent_t ev,
		  bool recorded, const struct op *o, int ms)
{
	struct timespec deadline = comm_deadline(ms);
	struct backoff b = { 0, SLEEP_MIN_NS };
	for (;;) {
		ncclResult_t a = ncclSuccess;
		if (slot) {
			ncclResult_t r = ncclCommGetAsyncError(*slot, &a);
			if (r != ncclSuccess)
				a = r;
			if (a != ncclSuccess && a != ncclInProgress)
				return nccl_failed(n, slot, o, a);
		}
		if (a == ncclSuccess && !recorded) {
			if (!ev)
				return COMM_OK;
			cudaError_t e = cudaEventRecord(ev, s);
			if (e != cudaSuccess)
				return cuda_failed(n, slot, o, "cudaEventRecord", e);
			recorded = true;
		}
		if (recorded) {
			cudaError_t e = cudaEventQuery(ev);
			if (e == cudaSuccess)
				return COMM_OK;
			if (e != cudaErrorNotReady)
				return cuda_failed(n, slot, o, "waiting for the transfer", e);
		}
		if (comm_past(&deadline))
			return timed_out(n, slot, o, ms, recorded);
		pause_poll(&b);
	}
}

/* ---- pending work -------------------------------------------------------------------- */

/* Waits for the oldest pending entry to end (bounded) and drops it. */
static int retire_oldest(struct nccl *n)
{
	struct pending *p = &n->pend[n->head];
	struct op o = p->o;
	o.group = p->group;
	int st = settle(n, p->slot, NULL, p->ev, true, &o, n->timeout_ms);
	if (st)
		return st; /* failed_with dropped the list */
	n->head = (n->head + 1) % PENDING;
	n->npend--;
	return COMM_OK;
}

/* Work for o on *slot is on c->stream (NCCL has accepted it): an event
 * after it joins the pending list, whose oldest entry is waited for first
 * when the list is full. */
static int issued(struct nccl *n, ncclComm_t *slot, const struct op *o)
{
	int st;
	if (n->npend == PENDING && (st = retire_oldest(n)))
		return st;
	struct pending *p = &n->pend[(n->head + n->npend) % PENDING];
	cudaError_t e = cudaEventRecord(p->ev, stream_of(n));
	if (e != cudaSuccess)
		return cuda_failed(n, slot, o, "cudaEventRecord", e);
	p->slot = slot;
	p->o = *o;
	snprintf(p->group, sizeof p->group, "%s", o->group);
	n->npend++;
	return COMM_OK;
}

/* NCCL has taken o's work on *slot (polled until it has: a non-blocking
 * communicator wants its last call done before the next) and it is listed
 * pending; the host goes on while the GPU runs it. */
static int accepted(struct nccl *n, ncclComm_t *slot, const struct op *o)
{
	int st = settle(n, slot, stream_of(n), NULL, false, o, n->timeout_ms);
	return st ? st : issued(n, slot, o);
}

static int nccl_complete(struct comm *c)
{
	struct nccl *n = to_nccl(c);
	if (n->failed)
		return fail_fast(n);
	cudaError_t e = cudaSetDevice(n->c.device);
	if (e != cudaSuccess) {
		struct op o = { .label = "complete", .group = n->world_name };
		return cuda_failed(n, NULL, &o, "cudaSetDevice", e);
	}
	int st = COMM_OK;
	while (n->npend && !(st = retire_oldest(n)))
		;
	return st;
}

/* The first error of a sequence of NCCL calls (ncclInProgress is none). */
static ncclResult_t first_error(ncclResult_t sofar, ncclResult_t r)
{
	return sofar != ncclSuccess && sofar != ncclInProgress ? sofar : r;
}

static bool nccl_error(ncclResult_t r)
{
	return r != ncclSuccess && r != ncclInProgress;
}

/* ---- groups ---------------------------------------------------------------------- */

/* The communicator a collective on g runs on. */
struct target {
	ncclComm_t *slot; /* NULL: a group of one, no communicator */
	const char *name;
};

static int find_target(struct nccl *n, const struct comm_group *g, const char *fn,
		       struct target *out)
{
	char here[NAME];
	if (g->id == -1) {
		bool world = g->n == n->c.world;
		for (int i = 0; world && i < g->n; i++)
			world = g->ranks[i] == i;
		if (!world)
			return comm_errorf(&n->c, COMM_INVALID,
					   "%s: rank %d: group id -1 is the world %s in rank order, not %s",
					   fn, n->c.rank, n->world_name,
					   comm_ranks_str(g->ranks, g->n, here, sizeof here));
		*out = (struct target){ &n->world, n->world_name };
		return COMM_OK;
	}
	if (g->id < 0 || g->id >= n->ngroups || !n->groups[g->id].ranks)
		return comm_errorf(&n->c, COMM_INVALID,
				   "%s: rank %d: group id %d was not prepared (prepare() must name every group first)",
				   fn, n->c.rank, g->id);
	struct ngroup *ng = &n->groups[g->id];
	if (ng->n != g->n || memcmp(ng->ranks, g->ranks, (size_t)g->n * sizeof *g->ranks))
		return comm_errorf(&n->c, COMM_INVALID,
				   "%s: rank %d: group id %d is %s here but was prepared as %s", fn,
				   n->c.rank, g->id, comm_ranks_str(g->ranks, g->n, here, sizeof here),
				   ng->name);
	*out = (struct target){ ng->n > 1 ? &ng->comm : NULL, ng->name };
	return COMM_OK;
}

static void op_init(struct op *o, struct comm_tag t, const char *group)
{
	snprintf(o->label, sizeof o->label, "op %u (%.*s)", t.op, WHAT, comm_what(t));
	o->group = group;
	o->wait[0] = 0;
}

/* The members other than me, or with ring set my two neighbours. More
 * than LISTED ranks never fit the text, which then ends in "...". */
enum { LISTED = NAME / 2 };

static void op_waits_for(struct op *o, const struct comm_group *g, bool ring)
{
	int who[LISTED], k = 0;
	if (ring) {
		int left = g->ranks[(g->me + g->n - 1) % g->n], right = g->ranks[(g->me + 1) % g->n];
		if (g->n > 1)
			who[k++] = left;
		if (g->n > 2)
			who[k++] = right;
	} else {
		for (int i = 0; i < g->n && k < LISTED; i++)
			if (i != g->me)
				who[k++] = g->ranks[i];
	}
	if (k)
		comm_ranks_str(who, k, o->wait, sizeof o->wait);
}

/* NCCL takes any pointer the rank's GPU can address; host memory the
 * driver does not know would fault on the GPU, so it is refused here. */
static int check_ptr(struct nccl *n, const char *fn, const char *which, const void *p,
		     size_t bytes)
{
	if (!bytes)
		return COMM_OK;
	struct cudaPointerAttributes a;
	cudaError_t e = cudaPointerGetAttributes(&a, p);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return comm_errorf(&n->c, COMM_INVALID, "%s: rank %d: %s (%p): %s", fn, n->c.rank,
				   which, p, cudaGetErrorString(e));
	}
	if (a.type == cudaMemoryTypeUnregistered)
		return comm_errorf(&n->c, COMM_INVALID,
				   "%s: rank %d: %s (%p) is host memory; the nccl backend takes device memory of GPU %d",
				   fn, n->c.rank, which, p, n->c.device);
	if (a.type == cudaMemoryTypeDevice && a.device != n->c.device)
		return comm_errorf(&n->c, COMM_INVALID,
				   "%s: rank %d: %s (%p) is memory of GPU %d, not of this rank's GPU %d",
				   fn, n->c.rank, which, p, a.device, n->c.device);
	return COMM_OK;
}

/* The first byte a member's pieces select in buf (NULL when none). */
static const char *first_piece(const void *buf, const size_t *counts, const size_t *displs, int k,
			       size_t *bytes)
{
	for (int i = 0; i < k; i++)
		if (counts[i]) {
			*bytes = counts[i];
			return (const char *)buf + displs[i];
		}
	*bytes = 0;
	return NULL;
}

/* Every call starts here: the calling thread may not be the one that made c. */
static int begin(struct nccl *n, const struct op *o)
{
	cudaError_t e = cudaSetDevice(n->c.device);
	if (e != cudaSuccess)
		return cuda_failed(n, NULL, o, "cudaSetDevice", e);
	return COMM_OK;
}

/* What every collective does once its arguments are checked: fails at
 * once after an earlier failure, else names itself and the ranks it waits
 * for (o) and begins (begin()). */
static int start_collective(struct nccl *n, const struct comm_group *g, struct comm_tag t,
			    const struct target *tg, struct op *o)
{
	if (n->failed)
		return fail_fast(n);
	op_init(o, t, tg->name);
	op_waits_for(o, g, false);
	return begin(n, o);
}

/* ---- collectives ------------------------------------------------------------------ */

static int nccl_allgatherv(struct comm *c, const struct comm_group *g, struct comm_tag t,
			   const void *send, void *recv, const size_t *counts, const size_t *displs)
{
	struct nccl *n = to_nccl(c);
	struct target tg;
	int st = comm_check_allgatherv(c, g, send, recv, counts, displs);
	if (st || (st = find_target(n, g, "allgatherv", &tg)))
		return st;
	char *r = recv;
	int me = g->me;
	bool in_place = send == r + displs[me];
	size_t rbytes;
	const char *rfirst = first_piece(recv, counts, displs, g->n, &rbytes);
	if ((!in_place && (st = check_ptr(n, "allgatherv", "send", send, counts[me]))) ||
	    (st = check_ptr(n, "allgatherv", "recv", rfirst, rbytes)))
		return st;
	struct op o;
	if ((st = start_collective(n, g, t, &tg, &o)))
		return st;
	cudaStream_t s = stream_of(n);
	bool equal = counts[0] > 0, contiguous = true;
	for (int i = 0; i < g->n; i++) {
		equal = equal && counts[i] == counts[0];
		contiguous = contiguous && displs[i] == (size_t)i * counts[0];
	}
	cudaError_t e = cudaSuccess;
	if (tg.slot && equal) {
		/* Equal pieces (the same on every member, since counts are):
		 * NCCL's own all-gather, into recv or, where this member's
		 * layout has gaps, into scratch placed afterwards. */
		size_t count = counts[0];
		void *tmp = NULL;
		if (!contiguous && (e = cudaMallocAsync(&tmp, count * (size_t)g->n, s)) != cudaSuccess)
			return cuda_failed(n, tg.slot, &o, "cudaMallocAsync", e);
		ncclResult_t res = ncclAllGather(send, contiguous ? recv : tmp, count, ncclInt8,
						 *tg.slot, s);
		if (nccl_error(res)) {
			if (tmp)
				cudaFreeAsync(tmp, s);
			return nccl_failed(n, tg.slot, &o, res);
		}
		if (!contiguous) {
			/* the copies may only follow the all-gather on the stream */
			if ((st = settle(n, tg.slot, s, NULL, false, &o, n->timeout_ms)))
				return st;
			for (int i = 0; i < g->n && e == cudaSuccess; i++)
				e = cudaMemcpyAsync(r + displs[i], (char *)tmp + (size_t)i * count, count,
						    cudaMemcpyDeviceToDevice, s);
			cudaError_t fe = cudaFreeAsync(tmp, s);
			if (e != cudaSuccess || (e = fe) != cudaSuccess)
				return cuda_failed(n, tg.slot, &o, "placing the gathered pieces", e);
		}
		return accepted(n, tg.slot, &o);
	}
	if (!in_place && counts[me] &&
	    (e = cudaMemcpyAsync(r + displs[me], send, counts[me], cudaMemcpyDeviceToDevice, s)) !=
		    cudaSuccess)
		return cuda_failed(n, tg.slot, &o, "cudaMemcpyAsync of my own piece", e);
	if (tg.slot) {
		/* NCCL has no all-gather-v: a send to and a receive from each peer,
		 * as one group so they progress together */
		ncclResult_t res = ncclGroupStart();
		for (int k = 0; k < g->n; k++) {
			if (k == me)
				continue;
			if (counts[me])
				res = first_error(res, ncclSend(send, counts[me], ncclInt8, k, *tg.slot, s));
			if (counts[k])
				res = first_error(res, ncclRecv(r + displs[k], counts[k], ncclInt8, k,
								*tg.slot, s));
		}
		res = first_error(res, ncclGroupEnd());
		if (nccl_error(res))
			return nccl_failed(n, tg.slot, &o, res);
	}
	return accepted(n, tg.slot, &o);
}

static int nccl_allreduce_f32(struct comm *c, const struct comm_group *g, struct comm_tag t,
			      float *buf, size_t count)
{
	struct nccl *n = to_nccl(c);
	struct target tg;
	int st = comm_check_group(c, g, "allreduce_f32");
	if (st || (st = find_target(n, g, "allreduce_f32", &tg)) ||
	    (st = check_ptr(n, "allreduce_f32", "buf", buf, count * sizeof *buf)))
		return st;
	struct op o;
	if ((st = start_collective(n, g, t, &tg, &o)))
		return st;
	cudaStream_t s = stream_of(n);
	if (tg.slot && count) {
		ncclResult_t res = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, *tg.slot, s);
		if (nccl_error(res))
			return nccl_failed(n, tg.slot, &o, res);
	}
	return accepted(n, tg.slot, &o);
}

/* Equal pieces: NCCL's own reduce-scatter. Uneven ones (a sequence that
 * does not split evenly): one ncclReduce per piece, rooted at its member,
 * grouped so they progress together; each member moves the same bytes as
 * a reduce-scatter would, and no scratch is needed. */
static int nccl_reduce_scatter_f32(struct comm *c, const struct comm_group *g, struct comm_tag t,
				   const float *send, float *recv, const size_t *counts)
{
	struct nccl *n = to_nccl(c);
	struct target tg;
	size_t total;
	int st = comm_check_reduce_scatter(c, g, send, recv, counts, &total);
	if (st || (st = find_target(n, g, "reduce_scatter_f32", &tg)) ||
	    (st = check_ptr(n, "reduce_scatter_f32", "send", send, total * sizeof *send)) ||
	    (st = check_ptr(n, "reduce_scatter_f32", "recv", recv, counts[g->me] * sizeof *recv)))
		return st;
	struct op o;
	if ((st = start_collective(n, g, t, &tg, &o)))
		return st;
	cudaStream_t s = stream_of(n);
	if (!tg.slot) {
		/* a group of one: my piece is the sum */
		cudaError_t e = cudaSuccess;
		if (counts[0] && (e = cudaMemcpyAsync(recv, send, counts[0] * sizeof *recv,
						      cudaMemcpyDeviceToDevice, s)) != cudaSuccess)
			return cuda_failed(n, tg.slot, &o, "cudaMemcpyAsync of my own piece", e);
		return accepted(n, tg.slot, &o);
	}
	bool equal = true;
	for (int i = 0; i < g->n; i++)
		equal = equal && counts[i] == counts[0];
	ncclResult_t res = ncclSuccess;
	if (equal && counts[0]) {
		res = ncclReduceScatter(send, recv, counts[0], ncclFloat32, ncclSum, *tg.slot, s);
	} else if (!equal) {
		res = ncclGroupStart();
		size_t at = 0;
		for (int i = 0; i < g->n; i++) {
			/* recvbuff is only written on the root */
			if (counts[i])
				res = first_error(res, ncclReduce(send + at, recv, counts[i], ncclFloat32,
								  ncclSum, i, *tg.slot, s));
			at += counts[i];
		}
		res = first_error(res, ncclGroupEnd());
	}
	if (nccl_error(res))
		return nccl_failed(n, tg.slot, &o, res);
	return accepted(n, tg.slot, &o);
}

static int nccl_alltoallv(struct comm *c, const struct comm_group *g, struct comm_tag t,
			  const void *send, const size_t *scounts, const size_t *sdispls,
			  void *recv, const size_t *rcounts, const size_t *rdispls)
{
	struct nccl *n = to_nccl(c);
	struct target tg;
	int me = g ? g->me : 0;
	int st = comm_check_alltoallv(c, g, send, scounts, sdispls, recv, rcounts, rdispls);
	if (st || (st = find_target(n, g, "alltoallv", &tg)))
		return st;
	if (scounts[me] != rcounts[me])
		return comm_errorf(c, COMM_INVALID,
				   "alltoallv: rank %d sends itself %zu bytes but expects %zu", c->rank,
				   scounts[me], rcounts[me]);
	size_t sb, rb;
	const char *sfirst = first_piece(send, scounts, sdispls, g->n, &sb);
	const char *rfirst = first_piece(recv, rcounts, rdispls, g->n, &rb);
	if ((st = check_ptr(n, "alltoallv", "send", sfirst, sb)) ||
	    (st = check_ptr(n, "alltoallv", "recv", rfirst, rb)))
		return st;
	struct op o;
	if ((st = start_collective(n, g, t, &tg, &o)))
		return st;
	cudaStream_t s = stream_of(n);
	const char *sp = send;
	char *rp = recv;
	cudaError_t e;
	if (rcounts[me] && (e = cudaMemcpyAsync(rp + rdispls[me], sp + sdispls[me], rcounts[me],
					       cudaMemcpyDeviceToDevice, s)) != cudaSuccess)
		return cuda_failed(n, tg.slot, &o, "cudaMemcpyAsync of my own piece", e);
	if (tg.slot) {
		/* a zero count is skipped on both ends: the sender's count to
		 * me is my count from it */
		ncclResult_t res = ncclGroupStart();
		for (int k = 0; k < g->n; k++) {
			if (k == me)
				continue;
			if (scounts[k])
				res = first_error(res, ncclSend(sp + sdispls[k], scounts[k], ncclInt8, k,
								*tg.slot, s));
			if (rcounts[k])
				res = first_error(res, ncclRecv(rp + rdispls[k], rcounts[k], ncclInt8, k,
								*tg.slot, s));
		}
		res = first_error(res, ncclGroupEnd());
		if (nccl_error(res))
			return nccl_failed(n, tg.slot, &o, res);
	}
	return accepted(n, tg.slot, &o);
}

/* The peers of an exchange other than me, as ranks: "[1 3]". */
static void op_exchanges_with(struct op *o, const struct comm_group *g, const struct comm_p2p *m,
			      int k, const struct comm_p2p *m2, int k2)
{
	int who[LISTED], w = 0;
	for (int i = 0; i < k + k2 && w < LISTED; i++) {
		int peer = i < k ? m[i].peer : m2[i - k].peer;
		bool seen = peer == g->me;
		for (int j = 0; j < w; j++)
			seen = seen || who[j] == g->ranks[peer];
		if (!seen)
			who[w++] = g->ranks[peer];
	}
	o->wait[0] = 0;
	if (w)
		comm_ranks_str(who, w, o->wait, sizeof o->wait);
}

/* The message with myself, if any (comm_check_exchange saw both ends). */
static const struct comm_p2p *to_self(const struct comm_p2p *m, int k, int me)
{
	for (int i = 0; i < k; i++)
		if (m[i].peer == me)
			return &m[i];
	return NULL;
}

/* An exchange runs on the side stream after the point of c->stream where
 * it was started (the buffers to send are ready there), so the compute
 * stream goes on (ring attention on the chunk it holds) meanwhile.
 * exchange_start returns once NCCL has taken the transfer; exchange_wait
 * orders c->stream after it. Zero-byte messages are skipped on both ends
 * (NCCL needs no empty message). NCCL cannot check that the two ends of a
 * pair agree on the size: a mismatch corrupts the receive or hangs until
 * complete()'s deadline. */
static int nccl_exchange_start(struct comm *c, const struct comm_group *g, struct comm_tag t,
			       const struct comm_p2p *sends, int nsend,
			       const struct comm_p2p *recvs, int nrecv, struct comm_request **out)
{
	struct nccl *n = to_nccl(c);
	struct target tg;
	int st = comm_check_exchange(c, g, sends, nsend, recvs, nrecv);
	if (st || (st = find_target(n, g, "exchange", &tg)))
		return st;
	for (int k = 0; k < nsend + nrecv; k++) {
		bool send = k < nsend;
		const struct comm_p2p *m = send ? &sends[k] : &recvs[k - nsend];
		if ((st = check_ptr(n, "exchange", send ? "send" : "recv", m->buf, m->bytes)))
			return st;
	}
	if (n->failed)
		return fail_fast(n);
	struct comm_request *q = calloc(1, sizeof *q);
	if (!q)
		return comm_errorf(c, COMM_FAILED, "rank %d: out of memory", c->rank);
	struct op o;
	op_init(&o, t, tg.name);
	op_exchanges_with(&o, g, sends, nsend, recvs, nrecv);
	memcpy(q->label, o.label, sizeof q->label);
	snprintf(q->group, sizeof q->group, "%s", tg.name);
	memcpy(q->wait, o.wait, sizeof q->wait);
	q->slot = tg.slot;
	if ((st = begin(n, &o)))
		goto fail;
	cudaError_t e;
	if ((e = cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming)) != cudaSuccess) {
		q->done = NULL;
		st = cuda_failed(n, tg.slot, &o, "cudaEventCreateWithFlags", e);
		goto fail;
	}
	if ((e = cudaEventRecord(n->ready, stream_of(n))) != cudaSuccess ||
	    (e = cudaStreamWaitEvent(n->side, n->ready, 0)) != cudaSuccess) {
		st = cuda_failed(n, tg.slot, &o, "ordering the exchange after the compute stream", e);
		goto fail;
	}
	const struct comm_p2p *self = to_self(sends, nsend, g->me);
	if (self && self->bytes &&
	    (e = cudaMemcpyAsync(to_self(recvs, nrecv, g->me)->buf, self->buf, self->bytes,
				 cudaMemcpyDeviceToDevice, n->side)) != cudaSuccess) {
		st = cuda_failed(n, tg.slot, &o, "cudaMemcpyAsync to myself", e);
		goto fail;
	}
	if (tg.slot) {
		/* the group's communicator numbers its members in group order */
		ncclResult_t res = ncclGroupStart();
		for (int k = 0; k < nsend; k++)
			if (sends[k].peer != g->me && sends[k].bytes)
				res = first_error(res, ncclSend(sends[k].buf, sends[k].bytes, ncclInt8,
								sends[k].peer, *tg.slot, n->side));
		for (int k = 0; k < nrecv; k++)
			if (recvs[k].peer != g->me && recvs[k].bytes)
				res = first_error(res, ncclRecv(recvs[k].buf, recvs[k].bytes, ncclInt8,
								recvs[k].peer, *tg.slot, n->side));
		res = first_error(res, ncclGroupEnd());
		if (nccl_error(res)) {
			st = nccl_failed(n, tg.slot, &o, res);
			goto fail;
		}
		/* NCCL wants its last call on a non-blocking communicator
		 * complete before the next one */
		if ((st = settle(n, tg.slot, n->side, NULL, false, &o, n->timeout_ms)))
			goto fail;
	}
	if ((e = cudaEventRecord(q->done, n->side)) != cudaSuccess) {
		st = cuda_failed(n, tg.slot, &o, "cudaEventRecord", e);
		goto fail;
	}
	*out = q;
	return COMM_OK;
fail:
	if (q->done)
		cudaEventDestroy(q->done);
	free(q);
	return st;
}

/* No host wait: c->stream waits for the transfer's event, and the point
 * after that is pending (complete() bounds it). The event may be destroyed
 * at once: CUDA keeps it until the wait has used it. */
static int nccl_exchange_wait(struct comm *c, struct comm_request *q)
{
	struct nccl *n = to_nccl(c);
	struct op o;
	memcpy(o.label, q->label, sizeof o.label);
	o.group = q->group;
	memcpy(o.wait, q->wait, sizeof o.wait);
	int st;
	cudaError_t e;
	if (n->failed)
		st = fail_fast(n);
	else if (!(st = begin(n, &o))) {
		if ((e = cudaStreamWaitEvent(stream_of(n), q->done, 0)) != cudaSuccess)
			st = cuda_failed(n, q->slot, &o, "cudaStreamWaitEvent", e);
		else
			st = issued(n, q->slot, &o);
	}
	cudaEventDestroy(q->done);
	free(q);
	return st;
}

/* ---- communicators ---------------------------------------------------------------- */

/* Ends a communicator: gracefully (ncclCommFinalize, polled, then
 * ncclCommDestroy) while the backend is healthy, else — or when that
 * fails or times out — with ncclCommAbort. */
static void close_comm(struct nccl *n, ncclComm_t *slot, const char *group)
{
	if (!*slot)
		return;
	if (!n->failed) {
		struct op o;
		snprintf(o.label, sizeof o.label, "free (ncclCommFinalize)");
		o.group = group;
		o.wait[0] = 0;
		ncclResult_t r = ncclCommFinalize(*slot);
		if (nccl_error(r))
			nccl_failed(n, slot, &o, r);
		else if (!settle(n, slot, NULL, NULL, false, &o, setup_ms(n))) {
			ncclCommDestroy(*slot);
			*slot = NULL;
		}
	}
	if (*slot) {
		ncclCommAbort(*slot);
		*slot = NULL;
	}
}

static void release_groups(struct nccl *n)
{
	for (int i = 0; i < n->ngroups; i++) {
		close_comm(n, &n->groups[i].comm, n->groups[i].name);
		free(n->groups[i].ranks);
	}
	free(n->groups);
	n->groups = NULL;
	n->ngroups = 0;
}

static bool same_groups(const struct nccl *n, const struct comm_group *gs, int k)
{
	int prepared = 0;
	for (int i = 0; i < n->ngroups; i++)
		prepared += n->groups[i].ranks != NULL;
	if (prepared != k)
		return false;
	for (int i = 0; i < k; i++) {
		const struct ngroup *ng = gs[i].id < n->ngroups ? &n->groups[gs[i].id] : NULL;
		if (!ng || !ng->ranks || ng->n != gs[i].n ||
		    memcmp(ng->ranks, gs[i].ranks, (size_t)gs[i].n * sizeof *gs[i].ranks))
			return false;
	}
	return true;
}

/* One ncclCommSplit of the world: members of a group instance share the
 * color (its smallest world rank, which no other instance of the group
 * contains) and are ordered by their index in it. */
static int split(struct nccl *n, const struct comm_group *g, struct ngroup *ng)
{
	int color = g->ranks[0];
	for (int i = 1; i < g->n; i++)
		if (g->ranks[i] < color)
			color = g->ranks[i];
	struct op o;
	snprintf(o.label, sizeof o.label, "prepare (ncclCommSplit of group id %d)", g->id);
	o.group = ng->name;
	o.wait[0] = 0;
	op_waits_for(&o, g, false);
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	cfg.commName = ng->cname;
	ncclResult_t r = ncclCommSplit(n->world, color, g->me, &ng->comm, &cfg);
	if (nccl_error(r))
		return nccl_failed(n, &n->world, &o, r);
	/* NCCL's split runs as a job of the parent: poll the world until it
	 * is done and has stored the new communicator */
	int ms = setup_ms(n);
	struct timespec deadline = comm_deadline(ms);
	struct backoff b = { 0, SLEEP_MIN_NS };
	for (;;) {
		ncclResult_t a = ncclSuccess;
		r = ncclCommGetAsyncError(n->world, &a);
		if (r != ncclSuccess)
			a = r;
		if (nccl_error(a))
			return nccl_failed(n, &n->world, &o, a);
		if (a == ncclSuccess && __atomic_load_n(&ng->comm, __ATOMIC_ACQUIRE))
			break;
		if (comm_past(&deadline))
			/* aborting the parent also aborts a child still being made */
			return timed_out(n, &n->world, &o, ms, false);
		pause_poll(&b);
	}
	return settle(n, &ng->comm, NULL, NULL, false, &o, ms);
}

static int nccl_prepare(struct comm *c, const struct comm_group *gs, int k)
{
	struct nccl *n = to_nccl(c);
	int maxid = -1, st;
	if (k < 0 || (k && !gs))
		return comm_errorf(c, COMM_INVALID, "prepare: rank %d: %d groups at %p", c->rank, k,
				   (const void *)gs);
	for (int i = 0; i < k; i++) {
		if ((st = comm_check_group(c, &gs[i], "prepare")))
			return st;
		if (gs[i].id < 0)
			return comm_errorf(c, COMM_INVALID,
					   "prepare: rank %d: group %d has id %d (graph groups have ids >= 0)",
					   c->rank, i, gs[i].id);
		for (int j = 0; j < i; j++)
			if (gs[j].id == gs[i].id)
				return comm_errorf(c, COMM_INVALID,
						   "prepare: rank %d: groups %d and %d share id %d",
						   c->rank, j, i, gs[i].id);
		for (int a = 0; a < gs[i].n; a++)
			for (int b = 0; b < a; b++)
				if (gs[i].ranks[a] == gs[i].ranks[b])
					return comm_errorf(c, COMM_INVALID,
							   "prepare: rank %d: group id %d names rank %d twice",
							   c->rank, gs[i].id, gs[i].ranks[a]);
		if (gs[i].id > maxid)
			maxid = gs[i].id;
	}
	if (n->failed)
		return fail_fast(n);
	if (same_groups(n, gs, k))
		return COMM_OK;
	struct op o;
	snprintf(o.label, sizeof o.label, "prepare");
	o.group = n->world_name;
	o.wait[0] = 0;
	if ((st = begin(n, &o)) || (st = nccl_complete(c)))
		return st; /* the pending work names the communicators it ran on */
	release_groups(n);
	if (n->failed)
		return fail_fast(n);
	n->groups = calloc((size_t)maxid + 1, sizeof *n->groups);
	if (!n->groups && maxid >= 0)
		return comm_errorf(c, COMM_FAILED, "rank %d: out of memory", c->rank);
	n->ngroups = maxid + 1;
	/* every rank splits for every group in the same order: each split is
	 * a collective over the world */
	for (int i = 0; i < k; i++) {
		const struct comm_group *g = &gs[i];
		struct ngroup *ng = &n->groups[g->id];
		ng->ranks = malloc((size_t)g->n * sizeof *ng->ranks);
		if (!ng->ranks)
			return comm_errorf(c, COMM_FAILED, "rank %d: out of memory", c->rank);
		memcpy(ng->ranks, g->ranks, (size_t)g->n * sizeof *ng->ranks);
		ng->n = g->n;
		comm_ranks_str(g->ranks, g->n, ng->name, sizeof ng->name);
		snprintf(ng->cname, sizeof ng->cname, "dtpc group %d %s", g->id, ng->name);
		if (g->n > 1 && (st = split(n, g, ng)))
			return st;
	}
	return COMM_OK;
}

static void nccl_fail(struct comm *c, const char *why)
{
	struct nccl *n = to_nccl(c);
	char msg[MSG];
	snprintf(msg, sizeof msg, "rank %d failed: %s", c->rank, why);
	/* NCCL cannot tell the peers: aborting ends whatever of ours they
	 * wait on, so they see an error or their deadline */
	mark_failed(n, &n->world, msg);
	fprintf(stderr, "dtpc: %s\n", n->why);
	fflush(stderr);
}

static void nccl_free(struct comm *c)
{
	struct nccl *n = to_nccl(c);
	cudaSetDevice(c->device);
	release_groups(n);
	close_comm(n, &n->world, n->world_name);
	for (int i = 0; i < PENDING; i++)
		cudaEventDestroy(n->pend[i].ev);
	cudaEventDestroy(n->ready);
	cudaStreamDestroy(n->side);
	cudaStreamDestroy(n->own);
	if (n->mpi_init)
		MPI_Finalize();
	free(n);
}

static const struct comm_ops nccl_ops = {
	.name = "nccl",
	.device_memory = true,
	.prepare = nccl_prepare,
	.allgatherv = nccl_allgatherv,
	.allreduce_f32 = nccl_allreduce_f32,
	.reduce_scatter_f32 = nccl_reduce_scatter_f32,
	.alltoallv = nccl_alltoallv,
	.exchange_start = nccl_exchange_start,
	.exchange_wait = nccl_exchange_wait,
	.complete = nccl_complete,
	.fail = nccl_fail,
	.free = nccl_free,
};

/* ---- startup ---------------------------------------------------------------------- */

/* Polls an MPI request: 0 done, 1 past the deadline, 2 an MPI error. */
static int mpi_wait(MPI_Request *req, int ms)
{
	struct timespec deadline = comm_deadline(ms);
	struct backoff b = { 0, SLEEP_MIN_NS };
	for (;;) {
		int done = 0;
		if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
			return 2;
		if (done)
			return 0;
		if (comm_past(&deadline))
			return 1;
		pause_poll(&b);
	}
}

/* This rank's GPU, streams and events: false with the failure raised. */
static bool local_setup(struct nccl *n)
{
	int ndev = 0, rank = n->c.rank;
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev < 1) {
		g_raise(COMM_FAILED, "rank %d: no CUDA device (%s)", rank,
			 e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
		return false;
	}
	/* ranks of one node take its GPUs in turn, by their node-local rank:
	 * Open MPI's, or torchrun's LOCAL_RANK */
	const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
	if (!lr)
		lr = getenv("LOCAL_RANK");
	int local = lr ? atoi(lr) : rank;
	n->c.device = (local < 0 ? 0 : local) % ndev;
	/* own: ordered with the legacy default stream, like a caller's plain
	 * cudaMemcpy; side: ordered only by the events we make it wait on */
	const char *step = "cudaSetDevice";
	e = cudaSetDevice(n->c.device);
	if (e == cudaSuccess) {
		step = "cudaStreamCreate";
		e = cudaStreamCreate(&n->own);
	}
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&n->side, cudaStreamNonBlocking);
	if (e == cudaSuccess) {
		step = "cudaEventCreateWithFlags";
		e = cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming);
	}
	for (int i = 0; i < PENDING && e == cudaSuccess; i++)
		e = cudaEventCreateWithFlags(&n->pend[i].ev, cudaEventDisableTiming);
	if (e != cudaSuccess) {
		g_raise(COMM_FAILED, "rank %d: GPU %d of %d: %s: %s", rank, n->c.device, ndev, step,
			 cudaGetErrorString(e));
		return false;
	}
	n->c.stream = n->own;
	return true;
}

/* The job's unique id, made on rank 0. */
static bool make_id(ncclUniqueId *id)
{
	ncclResult_t r = ncclGetUniqueId(id);
	if (r != ncclSuccess) {
		g_raise(COMM_FAILED, "rank 0: ncclGetUniqueId: %s (%s)", ncclGetErrorString(r),
			 ncclGetLastError(NULL));
		return false;
	}
	return true;
}

/* Every rank learns whether all set up, then the unique id from rank 0.
 * *pending: an MPI operation is still under way (it timed out). */
static bool share_id(struct nccl *n, bool ok, ncclUniqueId *id, bool *pending)
{
	int ms = setup_ms(n), first_bad = ok ? n->c.world : n->c.rank, w;
	MPI_Request req;
	MPI_Iallreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req);
	if ((w = mpi_wait(&req, ms))) {
		*pending = w == 1;
		if (w == 1)
			g_raise(COMM_FAILED, "rank %d: timed out after %d ms waiting for every rank of %d to start the nccl backend",
				 n->c.rank, ms, n->c.world);
		else
			g_raise(COMM_FAILED, "rank %d: MPI error waiting for every rank of %d to start the nccl backend",
				 n->c.rank, n->c.world);
		return false;
	}
	if (!ok)
		return false; /* raised already */
	if (first_bad < n->c.world) {
		g_raise(COMM_FAILED, "rank %d: rank %d could not start the nccl backend (its own message says why)",
			 n->c.rank, first_bad);
		return false;
	}
	MPI_Ibcast(id, (int)sizeof *id, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
	if ((w = mpi_wait(&req, ms))) {
		*pending = w == 1;
		g_raise(COMM_FAILED, "rank %d: %s the NCCL unique id from rank 0", n->c.rank,
			 w == 1 ? "timed out waiting for" : "MPI error receiving");
		return false;
	}
	return true;
}

/* ncclCommInitRankConfig, non-blocking, polled against the setup deadline. */
static bool init_world(struct nccl *n, ncclUniqueId id)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	cfg.commName = "dtpc world";
	int ms = setup_ms(n);
	ncclResult_t r = ncclCommInitRankConfig(&n->world, n->c.world, id, n->c.rank, &cfg);
	struct timespec deadline = comm_deadline(ms);
	struct backoff b = { 0, SLEEP_MIN_NS };
	while (!nccl_error(r) && n->world) {
		ncclResult_t a = ncclSuccess, q = ncclCommGetAsyncError(n->world, &a);
		r = q != ncclSuccess ? q : a;
		if (r == ncclSuccess)
			return true;
		if (r == ncclInProgress && comm_past(&deadline)) {
			g_raise(COMM_FAILED, "rank %d: timed out after %d ms making the NCCL communicator of %d ranks on GPU %d "
				 "(a rank did not arrive, or NCCL could not connect); aborted it",
				 n->c.rank, ms, n->c.world, n->c.device);
			ncclCommAbort(n->world);
			n->world = NULL;
			return false;
		}
		pause_poll(&b);
	}
	const char *detail = ncclGetLastError(n->world);
	g_raise(COMM_FAILED, "rank %d: ncclCommInitRankConfig (%d ranks, GPU %d): %s%s%s%s",
		 n->c.rank, n->c.world, n->c.device, ncclGetErrorString(nccl_error(r) ? r : ncclInternalError),
		 detail && *detail ? " (" : "", detail ? detail : "", detail && *detail ? ")" : "");
	if (n->world)
		ncclCommAbort(n->world);
	n->world = NULL;
	return false;
}

/* Rank `rank` of `world`, before its GPU is set up; NULL: out of memory. */
static struct nccl *nccl_new(int rank, int world, int timeout_ms)
{
	struct nccl *n = calloc(1, sizeof *n);
	if (!n)
		return NULL;
	n->c = (struct comm){ .ops = &nccl_ops, .rank = rank, .world = world, .device = -1 };
	n->timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
	int ranks[LISTED], listed = world < LISTED ? world : LISTED;
	for (int i = 0; i < listed; i++)
		ranks[i] = i;
	comm_ranks_str(ranks, listed, n->world_name, sizeof n->world_name);
	return n;
}

/* Frees a backend that did not start: what local_setup made of it. */
static void nccl_discard(struct nccl *n)
{
	for (int i = 0; i < PENDING; i++)
		if (n->pend[i].ev)
			cudaEventDestroy(n->pend[i].ev);
	if (n->ready)
		cudaEventDestroy(n->ready);
	if (n->side)
		cudaStreamDestroy(n->side);
	if (n->own)
		cudaStreamDestroy(n->own);
	free(n);
}

struct comm *nccl_comm_create(int timeout_ms)
{
	int inited = 0, finalized = 0, provided;
	MPI_Initialized(&inited);
	MPI_Finalized(&finalized);
	bool use_mpi = inited || getenv("OMPI_COMM_WORLD_SIZE");
	if (use_mpi && finalized) {
		g_raise(COMM_FAILED, "MPI was finalized already");
		return NULL;
	}
	/* the runtime calls the backend from one thread at a time, not always the main one */
	if (use_mpi && !inited &&
	    MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
		g_raise(COMM_FAILED, "MPI_Init_thread failed");
		return NULL;
	}
	int rank = 0, world = 1;
	if (use_mpi) {
		MPI_Comm_rank(MPI_COMM_WORLD, &rank);
		MPI_Comm_size(MPI_COMM_WORLD, &world);
	}
	struct nccl *n = nccl_new(rank, world, timeout_ms);
	if (!n) {
		g_raise(COMM_FAILED, "out of memory");
		if (use_mpi && !inited)
			MPI_Finalize();
		return NULL;
	}
	n->mpi_init = use_mpi && !inited;
	ncclUniqueId id;
	memset(&id, 0, sizeof id);
	bool pending = false;
	bool ok = local_setup(n) && (rank != 0 || make_id(&id));
	if (use_mpi && world > 1)
		ok = share_id(n, ok, &id, &pending);
	if (ok && init_world(n, id))
		return &n->c;
	/* MPI_Finalize would wait for a collective that never completes */
	bool finalize = n->mpi_init && !pending;
	nccl_discard(n);
	if (finalize)
		MPI_Finalize();
	return NULL;
}

_Static_assert(sizeof(ncclUniqueId) == DTPC_NCCL_UNIQUE_ID_BYTES, "dtpc.h's size of the id");

int nccl_unique_id(void *out)
{
	ncclUniqueId id;
	if (!make_id(&id))
		return -1;
	memcpy(out, &id, sizeof id);
	return 0;
}

/* Without MPI: the caller carried the id to every rank (torchrun). */
struct comm *nccl_comm_init(const void *id, int rank, int world, int timeout_ms)
{
	struct nccl *n = nccl_new(rank, world, timeout_ms);
	if (!n) {
		g_raise(COMM_FAILED, "out of memory");
		return NULL;
	}
	ncclUniqueId uid;
	memcpy(&uid, id, sizeof uid);
	if (local_setup(n) && init_world(n, uid))
		return &n->c;
	nccl_discard(n);
	return NULL;
}
#endif
