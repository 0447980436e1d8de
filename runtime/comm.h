/* comm.h — communication backends behind one interface.
 *
 * A backend moves bytes between the ranks of a group. Every collective is
 * called by all members of the group with the same (tag, kind) in the same
 * order; a member that does not arrive within the world's timeout, a member
 * that arrives at a different tag (a diverged rank), or a member that failed
 * ends the collective on every rank with DTPC_COMM_FAILED and a message that
 * names the rank and the op. No wait is unbounded. Point-to-point exchanges
 * (exchange_start) involve only the members they name, under the same rules.
 *
 * Backends: `local` (N ranks as threads of one process; the embedded default),
 * `mpi` (one rank per process, Open MPI) and `nccl` (one rank per GPU; its
 * calls return before the GPU has done the work, and complete() waits for
 * it). The vtable's entries are all required except where marked optional. */
#ifndef DTPC_COMM_H
#define DTPC_COMM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "graph/error.h"

/* What a backend's calls return: statuses of graph/error.h, with the
 * message raised into the calling thread's error record (comm_errorf). */
enum comm_status {
	COMM_OK = G_OK,
	COMM_FAILED = G_ERR_COMM,     /* timeout, peer failure, diverged rank */
	COMM_INVALID = G_ERR_INVALID, /* bad arguments (a bug in the caller) */
};

/* A group as one rank sees it: the world ranks of its members in group-index
 * order, and this rank's index. `id` is the same on every member and differs
 * between groups that share members (e.g. the graph's group index); the
 * backend keys its rendezvous on (id, ranks[0]). */
struct comm_group {
	int id;
	int n;
	int me;
	const int *ranks;
};

/* What the collective belongs to, for error messages and divergence checks:
 * every member must pass the same tag. */
struct comm_tag {
	uint32_t op;      /* graph op index (or a caller's sequence number) */
	const char *what; /* e.g. "all_gather blocks.3.attn/k" */
};

struct comm;
struct comm_request;

/* One message of an exchange (exchange_start): to or from member `peer`
 * (a group index) of the group. A send's buf is only read. */
struct comm_p2p {
	int peer;
	void *buf;
	size_t bytes;
};

enum { COMM_END_WHY = 1024 };

/* How one rank's part of a job ended, as rank 0 learns it (ops->end). */
struct comm_end {
	bool reported; /* false: no word from the rank within the timeout */
	int code;      /* the exit status the rank would end with (0: success) */
	int status;    /* the caller's status code, for its report */
	char why[COMM_END_WHY];
};

struct comm_ops {
	const char *name;
	/* The buffers a collective takes may be device memory of the rank's
	 * device (NCCL). When false, a session on a device whose memory the host
	 * cannot address stages every transfer through host memory. */
	bool device_memory;
	/* Optional: called once per session with every group of the graph as
	 * this rank sees it, in graph order, before the first collective; a
	 * backend that needs a communicator per group (NCCL's ncclCommSplit, a
	 * collective over the whole world) makes them here. Every rank calls it
	 * with the same groups in the same order. */
	int (*prepare)(struct comm *c, const struct comm_group *groups, int n);
	/* Gathers every member's `counts[i]` bytes (send: my counts[me] bytes)
	 * into recv at displs[i]. recv may hold send at displs[me] already
	 * (send == recv + displs[me] is allowed). */
	int (*allgatherv)(struct comm *c, const struct comm_group *g, struct comm_tag t,
			  const void *send, void *recv, const size_t *counts,
			  const size_t *displs);
	/* In-place sum of n floats over the group. */
	int (*allreduce_f32)(struct comm *c, const struct comm_group *g, struct comm_tag t,
			     float *buf, size_t n);
	/* Every member passes its whole send: the members' pieces in group
	 * order, piece i of counts[i] floats right after piece i - 1; I receive
	 * into recv (counts[me] floats) the float32 sum over the members of
	 * piece me (local: in group order, as its allreduce_f32, so the bits
	 * are the all-reduce's; mpi and nccl: in their libraries' order).
	 * Counts may differ between pieces (every member passes the same
	 * counts; local checks it): mpi takes them as they are, nccl uses
	 * ncclReduceScatter where all are equal and one grouped ncclReduce per
	 * piece where not. send and recv must not overlap. */
	int (*reduce_scatter_f32)(struct comm *c, const struct comm_group *g, struct comm_tag t,
				  const float *send, float *recv, const size_t *counts);
	/* Member i receives scounts[i] bytes from my send + sdispls[i]; I
	 * receive rcounts[j] bytes from member j into recv + rdispls[j]. */
	int (*alltoallv)(struct comm *c, const struct comm_group *g, struct comm_tag t,
			 const void *send, const size_t *scounts, const size_t *sdispls,
			 void *recv, const size_t *rcounts, const size_t *rdispls);
	/* Point-to-point, grouped: sends[k].bytes from sends[k].buf to member
	 * sends[k].peer, and recvs[k].bytes from member recvs[k].peer into
	 * recvs[k].buf, all started at once. Not a collective: only the members
	 * named take part, and each pair matches in order — the i-th message
	 * this rank sends to member b (over all its exchanges on g) is the i-th
	 * that b receives from it, and both must carry the same tag and size.
	 * A peer appears at most once among the sends and once among the recvs;
	 * a send to myself needs the receive from myself in the same exchange.
	 * Zero-byte messages are allowed (on nccl they move nothing and order
	 * nothing). Returns at once; every buffer stays owned by the transfer
	 * until exchange_wait(req) returns, so the caller computes meanwhile.
	 * Several exchanges may be in flight on a group; each is waited for
	 * once, in any order. Checked before anything is posted (COMM_INVALID):
	 * peers in range, no peer twice, a receive overlapping another buffer
	 * of the exchange, the self pair's sizes. A size or tag mismatch
	 * between two ranks is found at the wait on local (both ends fail) and
	 * mpi (the receiver; a sender of more bytes than the receiver posted
	 * is an MPI truncation); nccl cannot see it (the transfer corrupts or
	 * hangs until the deadline). */
	int (*exchange_start)(struct comm *c, const struct comm_group *g, struct comm_tag t,
			      const struct comm_p2p *sends, int nsend,
			      const struct comm_p2p *recvs, int nrecv, struct comm_request **req);
	/* Host backends: returns once every message of the exchange has
	 * arrived or left (bounded by the timeout, which names the op and the
	 * peers that did not post). Device backends (nccl): orders c->stream
	 * after the transfer and returns; complete() bounds the transfer. */
	int (*exchange_wait)(struct comm *c, struct comm_request *req);
	/* Optional (device backends, whose collectives and exchanges run on a
	 * device stream after they return): waits, bounded by the timeout
	 * (counted afresh from each finished collective), until everything
	 * issued so far has ended on the device. A collective that does not
	 * end fails it with the op, the group and the peers waited for named,
	 * and aborts the communicators. The caller calls it before the host
	 * reads memory a collective wrote, before it waits for the stream
	 * (which could hang on a stopped peer), and at the end of each step.
	 * NULL for host backends, whose calls return when the transfer is
	 * over; comm_complete() calls it where present. */
	int (*complete)(struct comm *c);
	/* Marks this rank failed (the executor hit an error): every other rank's
	 * pending or next collective fails with a message naming this rank. The
	 * calling thread's error record is left as it is: the failure it holds
	 * is the one this rank reports. */
	void (*fail)(struct comm *c, const char *why);
	/* Optional (one process per rank): the end of a job, so that rank 0
	 * reports every rank's failure once. Every rank calls it once after its
	 * work with its exit code (0: success), its status and message; a rank
	 * that failed without fail() is marked failed here. Rank 0 fills
	 * ends[0..world-1] (others pass NULL), waiting at most the timeout for
	 * the others (one that does not report is left unreported: stopped,
	 * stuck or gone), then tells each its verdict. Returns the job's exit
	 * code on every rank — the largest rank's code, 1 if a rank did not
	 * report — or -1 on a rank that heard no verdict from rank 0 in time
	 * (it then speaks for itself). */
	int (*end)(struct comm *c, int code, int status, const char *why, struct comm_end *ends);
	void (*free)(struct comm *c);
};

struct comm {
	const struct comm_ops *ops;
	int rank, world;
	int device;   /* the GPU a device-memory backend is bound to; -1 for host backends */
	void *stream; /* device_memory backends: the compute stream to order after
		       * (cudaStream_t), set by the session before the first collective */
};

/* The world group of c (id -1): for the startup handshake. */
struct comm_group comm_world_group(struct comm *c, int *ranks_buf);

/* ---- for the backends (comm.c) ------------------------------------------------ */

/* Raises status about c's rank (graph/error.h); returns it, for
 * `return comm_errorf(c, COMM_INVALID, ...)`. */
int comm_errorf(struct comm *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The checks a collective makes on its arguments before it waits for anyone:
 * COMM_OK, or COMM_INVALID raised (g must place c's rank at g->me
 * and name only ranks of c's world; the buffers a member reads and writes
 * must not overlap, except allgatherv's send == recv + displs[me]). */
int comm_check_group(struct comm *c, const struct comm_group *g, const char *fn);
int comm_check_allgatherv(struct comm *c, const struct comm_group *g, const void *send,
			  const void *recv, const size_t *counts, const size_t *displs);
int comm_check_alltoallv(struct comm *c, const struct comm_group *g, const void *send,
			 const size_t *scounts, const size_t *sdispls, const void *recv,
			 const size_t *rcounts, const size_t *rdispls);
/* reduce_scatter_f32: no overlap of send (all the pieces) and recv; the
 * float count of the pieces (*total) fits a size_t's bytes. */
int comm_check_reduce_scatter(struct comm *c, const struct comm_group *g, const float *send,
			      const float *recv, const size_t *counts, size_t *total);
int comm_check_exchange(struct comm *c, const struct comm_group *g, const struct comm_p2p *sends,
			int nsend, const struct comm_p2p *recvs, int nrecv);
/* A ring shift (ring attention's KV rotation), as an exchange: send sbytes
 * to member (me + 1) % n and receive rbytes from (me - 1 + n) % n. Wait for
 * it with ops->exchange_wait. */
int comm_shift_start(struct comm *c, const struct comm_group *g, struct comm_tag t,
		     const void *send, size_t sbytes, void *recv, size_t rbytes,
		     struct comm_request **req);
/* ops->complete where the backend has it, else COMM_OK. */
int comm_complete(struct comm *c);
/* The tag's text ("" for NULL). */
const char *comm_what(struct comm_tag t);
/* "[0 2 4 6]", cut to "[0 2 4 ...]" where len is short; returns buf. */
char *comm_ranks_str(const int *ranks, int n, char *buf, size_t len);
/* CLOCK_MONOTONIC: now + ms, and whether that moment has passed. */
struct timespec comm_deadline(int ms);
bool comm_past(const struct timespec *deadline);

/* ---- local: N ranks as threads ---------------------------------------------- */

struct comm_local_world;
/* One shared world for n threads; timeout_ms bounds every wait. */
struct comm_local_world *comm_local_world_create(int n, int timeout_ms);
/* The comm of rank r (each thread takes its own; free each with ops->free). */
struct comm *comm_local_create(struct comm_local_world *w, int rank);
/* From any thread, while w lives: aborts the world as a timeout does (the
 * first message wins): every member waiting in a collective or exchange
 * wakes and fails with COMM_FAILED, and so does every later call. */
void comm_local_world_abort(struct comm_local_world *w, const char *why);
/* After every rank's comm is freed. */
void comm_local_world_free(struct comm_local_world *w);

/* ---- mpi: one rank per process ----------------------------------------------- */

/* NULL when MPI is not available (raised: why). Calls MPI_Init if
 * needed; MPI_Finalize at free. A failure (fail(), a timeout) is sent to
 * rank 0, which passes it on to every rank waiting in a collective, so the
 * ranks stop within the timeout and report through end(). MPI cannot
 * cancel a collective: a job that left one pending (or a rank unheard)
 * ends at free with MPI_Abort from rank 0, after end() has reported. */
struct comm *comm_mpi_create(int timeout_ms);

/* ---- nccl: one rank per GPU --------------------------------------------------- */

/* NULL when NCCL or CUDA is not available (raised: why). Under mpirun
 * the rank, the world and the NCCL unique id come from MPI (the id is
 * broadcast from rank 0); without MPI the world is one rank. The rank's GPU
 * is its node-local rank modulo the GPUs it sees. A collective that does not
 * finish within timeout_ms aborts the communicator (ncclCommAbort) and fails
 * with the op and the group named. */
struct comm *comm_nccl_create(int timeout_ms);
/* dtpc_nccl_unique_id and dtpc_comm_nccl_init (dtpc.h): an id made here
 * (DTPC_NCCL_UNIQUE_ID_BYTES written to out), and a communicator from such
 * an id and the rank and world the caller gives, without MPI (the caller
 * checked them). 0 / a comm on success; -1 / NULL with the failure raised. */
int comm_nccl_unique_id(void *out);
struct comm *comm_nccl_init(const void *id, int rank, int world, int timeout_ms);
#endif
