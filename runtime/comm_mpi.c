/* comm_mpi.c — the mpi backend: one rank per process (Open MPI).
 *
 * A group becomes a sub-communicator at its first use, made with
 * MPI_Comm_create_group (collective over the members only: the rest of the
 * world is busy elsewhere) and cached by (id, ranks[0]). Every collective is
 * nonblocking MPI polled with MPI_Testall against the deadline.
 *
 * Failures travel on a communicator of their own (`rep`), point to point,
 * so that a job whose collectives are stuck can still say why: a rank that
 * fails (fail(), or a timeout) sends its message to rank 0 (TAG_FAIL);
 * rank 0, polling in its own waits, passes the first failure it hears of
 * on to every rank (TAG_STOP), whose pending and later collectives then
 * fail with it. At the end (end()) every rank sends rank 0 how it ended
 * (TAG_END) and waits for the verdict (TAG_VERDICT), so rank 0 prints each
 * failure once. MPI cannot cancel a collective: a job that left one
 * pending, or a rank that never reported, ends with MPI_Abort from rank 0
 * once the report is out; otherwise every rank finalizes.
 *
 * MPI counts are ints: a member's piece (and its offset) must stay under
 * INT_MAX bytes (allreduce: INT_MAX floats), else COMM_INVALID. A dtpc
 * collective moves one activation, far below that.
 *
 * Built without MPI (the Makefile found no mpicc: no DTPC_HAVE_MPI), the
 * backend is absent and comm_mpi_create says so. */
#include "runtime/comm.h"

#ifdef DTPC_HAVE_MPI

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	BUSY_MS = 10,         /* polling without sleeping, for a collective's first 10 ms */
	STOP_GRACE_MS = 200,  /* a collective's time to end after a failure is heard of */
	SLEEP_MAX_NS = 50000, /* the longest sleep between polls after that */
	MPI_WHAT = 96,
	MPI_WHERE = 160,
	/* on rep */
	TAG_FAIL = 1,         /* rank -> 0: this rank failed (a note's why) */
	TAG_STOP = 2,         /* 0 -> rank: the job failed (the first failure) */
	TAG_END = 3,          /* rank -> 0: how the rank ended */
	TAG_VERDICT = 4,      /* 0 -> rank: the job's exit code; flags */
	N_SENT_FAIL = 1,      /* END: this rank sent a TAG_FAIL */
	N_PENDING = 2,        /* END: a collective of this rank is left pending */
	N_STOPPED = 4,        /* VERDICT: a TAG_STOP was sent to this rank */
	N_ABORT = 8,          /* VERDICT: the job ends with MPI_Abort */
};

/* What TAG_FAIL, TAG_STOP, TAG_END and TAG_VERDICT carry. */
struct note {
	int code, status, flags;
	char why[COMM_END_WHY];
};

struct mgroup {
	struct mgroup *next;
	int id, n;
	int *ranks;
	char name[64];
	MPI_Comm comm;
};

struct mpi {
	struct comm c;
	int timeout_ms;
	bool we_init;
	int tag_ub;
	MPI_Comm world; /* a private duplicate: our messages never meet the caller's */
	MPI_Comm rep;   /* another, for failures and the job's end */
	bool ready;     /* rep exists */
	/* polling without sleeping first, for busy_ms: 0 where this node's
	 * ranks outnumber its cores (a rank that spins takes a core from one
	 * that computes) */
	int busy_ms;
	struct mgroup *groups;
	int *ints;      /* the int counts and displacements of a v-collective */
	size_t ints_cap;
	/* failures: the first one heard of ("rank 3 failed: ..."), "" while none */
	struct note stop;
	bool told;      /* this rank's own failure is sent (or, on rank 0, passed on) */
	bool pending;   /* a collective was left pending: the job cannot finalize */
	bool abort;     /* the verdict: end with MPI_Abort */
	MPI_Request fail_req;  /* rank != 0: its TAG_FAIL */
	struct note fail_note;
	MPI_Request *stop_req; /* rank 0: the TAG_STOP to each rank */
	bool *heard_from;      /* rank 0: the TAG_FAIL of each rank received */
};

/* A started exchange: its receives, then its sends. */
struct comm_request {
	struct mgroup *grp;
	struct comm_tag t;
	char what[MPI_WHAT];
	char where[MPI_WHERE]; /* "[0 1 2 3], exchanging with ranks [1 3]" */
	int nrecv, nmsg;
	MPI_Request *r;        /* [nmsg] */
	MPI_Status *st;        /* [nmsg] */
	size_t *rbytes;        /* [nrecv]: what each receive expects */
	int *from;             /* [nrecv]: the world rank it comes from */
};

static struct mpi *to_mpi(struct comm *c)
{
	return (struct mpi *)c;
}

static int mpi_failed(struct mpi *m, int e, const MPI_Status *st, int n, struct comm_tag t,
		      const char *group)
{
	/* MPI_ERR_IN_STATUS: the request's own error says what went wrong */
	for (int i = 0; e == MPI_ERR_IN_STATUS && i < n; i++)
		if (st[i].MPI_ERROR != MPI_SUCCESS)
			e = st[i].MPI_ERROR;
	char text[MPI_MAX_ERROR_STRING];
	int len = 0;
	MPI_Error_string(e, text, &len);
	return comm_errorf(&m->c, COMM_FAILED, "rank %d: MPI error in op %u (%s) of group %s: %s",
			   m->c.rank, t.op, comm_what(t), group, text);
}

/* ---- failures -------------------------------------------------------------------- */

/* Rank 0: the job failed (why): every other rank hears it once. */
static void stop_all(struct mpi *m, const char *why)
{
	if (m->stop.why[0])
		return;
	snprintf(m->stop.why, sizeof m->stop.why, "%s", why);
	for (int r = 1; r < m->c.world; r++)
		MPI_Isend(&m->stop, (int)sizeof m->stop, MPI_BYTE, r, TAG_STOP, m->rep,
			  &m->stop_req[r]);
}

/* This rank failed (why): rank 0 hears it (rank 0 passes it on itself).
 * Later collectives of this rank fail with it too. */
static void tell(struct mpi *m, const char *why)
{
	if (m->told || !m->ready)
		return;
	m->told = true;
	if (m->c.rank == 0) {
		stop_all(m, why);
		return;
	}
	snprintf(m->fail_note.why, sizeof m->fail_note.why, "%s", why);
	MPI_Isend(&m->fail_note, (int)sizeof m->fail_note, MPI_BYTE, 0, TAG_FAIL, m->rep,
		  &m->fail_req);
	if (!m->stop.why[0])
		snprintf(m->stop.why, sizeof m->stop.why, "%s", why);
}

/* Rank 0: receives the TAG_FAIL of rank `from` (sent, or on its way). */
static void take_fail(struct mpi *m, int from)
{
	struct note n;
	MPI_Recv(&n, (int)sizeof n, MPI_BYTE, from, TAG_FAIL, m->rep, MPI_STATUS_IGNORE);
	m->heard_from[from] = true;
	stop_all(m, n.why);
}

/* Whether the job is known to have failed (m->stop says how): on rank 0
 * a rank's TAG_FAIL, elsewhere rank 0's TAG_STOP, is taken if it came. */
static bool heard(struct mpi *m)
{
	if (!m->ready)
		return false;
	int flag = 0;
	MPI_Status st;
	if (m->c.rank == 0) {
		while (MPI_Iprobe(MPI_ANY_SOURCE, TAG_FAIL, m->rep, &flag, &st) == MPI_SUCCESS && flag)
			take_fail(m, st.MPI_SOURCE);
	} else if (!m->stop.why[0] &&
		   MPI_Iprobe(0, TAG_STOP, m->rep, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
		MPI_Recv(&m->stop, (int)sizeof m->stop, MPI_BYTE, 0, TAG_STOP, m->rep,
			 MPI_STATUS_IGNORE);
		m->stop.flags = 1; /* received: end() need not take it */
	}
	return m->stop.why[0] != 0;
}

/* Polls n requests to completion, until the deadline or until the job is
 * known to have failed; then the requests are left pending. */
static int wait_all(struct mpi *m, int n, MPI_Request *req, MPI_Status *st, struct comm_tag t,
		    const char *group)
{
	struct timespec deadline = comm_deadline(m->timeout_ms), busy = comm_deadline(m->busy_ms);
	struct timespec grace;
	bool stopping = false;
	long sleep_ns = 1000;
	for (;;) {
		int done = 0;
		int e = MPI_Testall(n, req, &done, st);
		if (e != MPI_SUCCESS)
			return mpi_failed(m, e, st, n, t, group);
		if (done)
			return COMM_OK;
		/* a collective every member entered before the failure may be
		 * about to end: it gets a moment, so that the ranks stop where
		 * the failure meets them (the next collective) rather than
		 * wherever their polls happened to be */
		if (!stopping && heard(m)) {
			stopping = true;
			grace = comm_deadline(STOP_GRACE_MS);
		}
		if (stopping && comm_past(&grace)) {
			m->pending = true;
			return comm_errorf(&m->c, COMM_FAILED, "%s", m->stop.why);
		}
		if (comm_past(&deadline)) {
			m->pending = true;
			comm_errorf(&m->c, COMM_FAILED, "rank %d: timed out after %g s in op %u (%s) of group %s",
				    m->c.rank, m->timeout_ms / 1000.0, t.op, comm_what(t), group);
			tell(m, g_error()->msg);
			return COMM_FAILED;
		}
		/* MPI progresses only in our polls: poll hard while a collective
		 * may still be quick, yielding to an oversubscribed peer; then
		 * back off, so that a rank waiting for a slow one idles */
		if (comm_past(&busy)) {
			struct timespec ts = { 0, sleep_ns };
			nanosleep(&ts, NULL);
			sleep_ns = sleep_ns * 2 > SLEEP_MAX_NS ? SLEEP_MAX_NS : sleep_ns * 2;
		} else {
			sched_yield();
		}
	}
}

/* ---- groups ---------------------------------------------------------------------- */

static uint32_t ranks_hash(const int *ranks, int n)
{
	uint32_t h = 2166136261u;
	for (int i = 0; i < n; i++)
		h = (h ^ (uint32_t)ranks[i]) * 16777619u;
	return h;
}

/* The members check in with ranks[0] before MPI_Comm_create_group, which
 * cannot time out: once all have checked in, it cannot hang. The check also
 * catches ranks that define the group differently. */
static int check_in(struct mpi *m, const struct comm_group *g, struct comm_tag t,
		    const char *name, int tag)
{
	int mine[3] = { g->id, g->n, (int)ranks_hash(g->ranks, g->n) }, verdict = 0;
	int st;
	if (g->me == 0) {
		int *all = malloc((size_t)g->n * 3 * sizeof *all);
		MPI_Request *req = malloc((size_t)g->n * sizeof *req);
		MPI_Status *sts = malloc((size_t)g->n * sizeof *sts);
		if (!all || !req || !sts) {
			free(all);
			free(req);
			free(sts);
			return comm_errorf(&m->c, COMM_FAILED, "rank %d: out of memory", m->c.rank);
		}
		for (int i = 1; i < g->n; i++)
			MPI_Irecv(all + 3 * i, 3, MPI_INT, g->ranks[i], tag, m->world, &req[i - 1]);
		st = wait_all(m, g->n - 1, req, sts, t, name);
		for (int i = 1; !st && !verdict && i < g->n; i++)
			if (memcmp(all + 3 * i, mine, sizeof mine))
				verdict = g->ranks[i] + 1;
		for (int i = 1; !st && i < g->n; i++)
			MPI_Isend(&verdict, 1, MPI_INT, g->ranks[i], tag, m->world, &req[i - 1]);
		if (!st)
			st = wait_all(m, g->n - 1, req, sts, t, name);
		free(all);
		free(req);
		free(sts);
	} else {
		MPI_Request req[2];
		MPI_Status sts[2];
		MPI_Isend(mine, 3, MPI_INT, g->ranks[0], tag, m->world, &req[0]);
		MPI_Irecv(&verdict, 1, MPI_INT, g->ranks[0], tag, m->world, &req[1]);
		st = wait_all(m, 2, req, sts, t, name);
	}
	if (st)
		return st;
	if (verdict)
		return comm_errorf(&m->c, COMM_FAILED,
				   "rank %d defines group id %d (%s here) differently, in op %u (%s)",
				   verdict - 1, g->id, name, t.op, comm_what(t));
	return COMM_OK;
}

static int get_group(struct mpi *m, const struct comm_group *g, struct comm_tag t,
		     struct mgroup **out)
{
	char name[64];
	/* after a failure every collective fails at once, as the local backend's */
	if (heard(m))
		return comm_errorf(&m->c, COMM_FAILED, "%s", m->stop.why);
	for (struct mgroup *grp = m->groups; grp; grp = grp->next) {
		if (grp->id != g->id || grp->ranks[0] != g->ranks[0])
			continue;
		if (grp->n != g->n || memcmp(grp->ranks, g->ranks, (size_t)g->n * sizeof *g->ranks))
			return comm_errorf(&m->c, COMM_INVALID,
					   "rank %d: group id %d was %s, is now %s", m->c.rank, g->id,
					   grp->name, comm_ranks_str(g->ranks, g->n, name, sizeof name));
		*out = grp;
		return COMM_OK;
	}
	for (int i = 0; i < g->n; i++)
		for (int j = 0; j < i; j++)
			if (g->ranks[i] == g->ranks[j])
				return comm_errorf(&m->c, COMM_INVALID,
						   "group id %d names rank %d twice", g->id,
						   g->ranks[i]);
	comm_ranks_str(g->ranks, g->n, name, sizeof name);
	/* ids differ between groups that share members: distinct tags for
	 * groups whose check-ins may run at the same time */
	int tag = (int)(((unsigned)g->id + 1u) * 2u % ((unsigned)m->tag_ub - 1u));
	int st = check_in(m, g, t, name, tag);
	if (st)
		return st;
	struct mgroup *grp = calloc(1, sizeof *grp);
	int *ranks = malloc((size_t)g->n * sizeof *ranks);
	if (!grp || !ranks) {
		free(grp);
		free(ranks);
		return comm_errorf(&m->c, COMM_FAILED, "rank %d: out of memory", m->c.rank);
	}
	MPI_Group world, sub;
	MPI_Comm_group(m->world, &world);
	MPI_Group_incl(world, g->n, g->ranks, &sub);
	int e = MPI_Comm_create_group(m->world, sub, tag + 1, &grp->comm);
	MPI_Group_free(&sub);
	MPI_Group_free(&world);
	if (e != MPI_SUCCESS) {
		free(grp);
		free(ranks);
		return mpi_failed(m, e, NULL, 0, t, name);
	}
	MPI_Comm_set_errhandler(grp->comm, MPI_ERRORS_RETURN);
	memcpy(ranks, g->ranks, (size_t)g->n * sizeof *ranks);
	grp->id = g->id;
	grp->n = g->n;
	grp->ranks = ranks;
	memcpy(grp->name, name, sizeof name);
	grp->next = m->groups;
	m->groups = grp;
	*out = grp;
	return COMM_OK;
}

/* Converts k byte counts (or offsets) to MPI's ints at m->ints + at. */
static int to_ints(struct mpi *m, const char *fn, const size_t *v, int k, size_t at)
{
	for (int i = 0; i < k; i++) {
		if (v[i] > INT_MAX)
			return comm_errorf(&m->c, COMM_INVALID,
					   "%s: rank %d: %zu bytes exceed MPI's int count", fn,
					   m->c.rank, v[i]);
		m->ints[at + (size_t)i] = (int)v[i];
	}
	return COMM_OK;
}

static int reserve_ints(struct mpi *m, size_t n)
{
	if (n <= m->ints_cap)
		return COMM_OK;
	int *p = realloc(m->ints, n * sizeof *p);
	if (!p)
		return comm_errorf(&m->c, COMM_FAILED, "rank %d: out of memory", m->c.rank);
	m->ints = p;
	m->ints_cap = n;
	return COMM_OK;
}

/* ---- collectives ------------------------------------------------------------------ */

static int mpi_allgatherv(struct comm *c, const struct comm_group *g, struct comm_tag t,
			  const void *send, void *recv, const size_t *counts, const size_t *displs)
{
	struct mpi *m = to_mpi(c);
	struct mgroup *grp;
	int st = comm_check_allgatherv(c, g, send, recv, counts, displs);
	size_t n = (size_t)g->n;
	if (st || (st = reserve_ints(m, 2 * n)) || (st = to_ints(m, "allgatherv", counts, g->n, 0)) ||
	    (st = to_ints(m, "allgatherv", displs, g->n, n)) || (st = get_group(m, g, t, &grp)))
		return st;
	const void *sbuf = send == (char *)recv + displs[g->me] ? MPI_IN_PLACE : send;
	MPI_Request req;
	MPI_Status mst;
	int e = MPI_Iallgatherv(sbuf, m->ints[g->me], MPI_BYTE, recv, m->ints, m->ints + n,
				MPI_BYTE, grp->comm, &req);
	if (e != MPI_SUCCESS)
		return mpi_failed(m, e, NULL, 0, t, grp->name);
	return wait_all(m, 1, &req, &mst, t, grp->name);
}

static int mpi_allreduce_f32(struct comm *c, const struct comm_group *g, struct comm_tag t,
			     float *buf, size_t n)
{
	struct mpi *m = to_mpi(c);
	struct mgroup *grp;
	int st = comm_check_group(c, g, "allreduce_f32");
	if (!st && n > INT_MAX)
		st = comm_errorf(c, COMM_INVALID, "allreduce_f32: rank %d: %zu floats exceed MPI's int count",
				 c->rank, n);
	if (st || (st = get_group(m, g, t, &grp)))
		return st;
	MPI_Request req;
	MPI_Status mst;
	int e = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, grp->comm, &req);
	if (e != MPI_SUCCESS)
		return mpi_failed(m, e, NULL, 0, t, grp->name);
	return wait_all(m, 1, &req, &mst, t, grp->name);
}

static int mpi_reduce_scatter_f32(struct comm *c, const struct comm_group *g, struct comm_tag t,
				  const float *send, float *recv, const size_t *counts)
{
	struct mpi *m = to_mpi(c);
	struct mgroup *grp;
	size_t total;
	int st = comm_check_reduce_scatter(c, g, send, recv, counts, &total);
	if (st || (st = reserve_ints(m, (size_t)g->n)))
		return st;
	bool equal = true;
	for (int i = 0; i < g->n; i++) {
		if (counts[i] > INT_MAX)
			return comm_errorf(c, COMM_INVALID,
					   "reduce_scatter_f32: rank %d: piece %d's %zu floats exceed MPI's int count",
					   c->rank, i, counts[i]);
		m->ints[i] = (int)counts[i];
		equal = equal && counts[i] == counts[0];
	}
	if ((st = get_group(m, g, t, &grp)))
		return st;
	MPI_Request req;
	MPI_Status mst;
	/* equal pieces take the block variant, which MPI may run differently */
	int e = equal ? MPI_Ireduce_scatter_block(send, recv, m->ints[0], MPI_FLOAT, MPI_SUM,
						  grp->comm, &req)
		      : MPI_Ireduce_scatter(send, recv, m->ints, MPI_FLOAT, MPI_SUM, grp->comm,
					    &req);
	if (e != MPI_SUCCESS)
		return mpi_failed(m, e, NULL, 0, t, grp->name);
	return wait_all(m, 1, &req, &mst, t, grp->name);
}

static int mpi_alltoallv(struct comm *c, const struct comm_group *g, struct comm_tag t,
			 const void *send, const size_t *scounts, const size_t *sdispls,
			 void *recv, const size_t *rcounts, const size_t *rdispls)
{
	struct mpi *m = to_mpi(c);
	struct mgroup *grp;
	int st = comm_check_alltoallv(c, g, send, scounts, sdispls, recv, rcounts, rdispls);
	size_t n = (size_t)g->n;
	if (st || (st = reserve_ints(m, 4 * n)) ||
	    (st = to_ints(m, "alltoallv", scounts, g->n, 0)) ||
	    (st = to_ints(m, "alltoallv", sdispls, g->n, n)) ||
	    (st = to_ints(m, "alltoallv", rcounts, g->n, 2 * n)) ||
	    (st = to_ints(m, "alltoallv", rdispls, g->n, 3 * n)) || (st = get_group(m, g, t, &grp)))
		return st;
	MPI_Request req;
	MPI_Status mst;
	int e = MPI_Ialltoallv(send, m->ints, m->ints + n, MPI_BYTE, recv, m->ints + 2 * n,
			       m->ints + 3 * n, MPI_BYTE, grp->comm, &req);
	if (e != MPI_SUCCESS)
		return mpi_failed(m, e, NULL, 0, t, grp->name);
	return wait_all(m, 1, &req, &mst, t, grp->name);
}

static void free_request(struct comm_request *q)
{
	free(q->r);
	free(q->st);
	free(q->rbytes);
	free(q->from);
	free(q);
}

/* Messages match in order per pair on the group's communicator; the MPI
 * tag is the op's, so that a peer at another op (diverged) never matches
 * and the wait times out naming both. */
static int mpi_exchange_start(struct comm *c, const struct comm_group *g, struct comm_tag t,
			      const struct comm_p2p *sends, int nsend,
			      const struct comm_p2p *recvs, int nrecv, struct comm_request **out)
{
	struct mpi *m = to_mpi(c);
	struct mgroup *grp;
	int st = comm_check_exchange(c, g, sends, nsend, recvs, nrecv);
	for (int k = 0; !st && k < nsend + nrecv; k++) {
		size_t b = k < nsend ? sends[k].bytes : recvs[k - nsend].bytes;
		if (b > INT_MAX)
			st = comm_errorf(c, COMM_INVALID, "exchange: rank %d: %zu bytes exceed MPI's int count",
					 c->rank, b);
	}
	if (st || (st = get_group(m, g, t, &grp)))
		return st;
	int nmsg = nsend + nrecv;
	struct comm_request *q = calloc(1, sizeof *q);
	if (q) {
		q->r = malloc((size_t)(nmsg ? nmsg : 1) * sizeof *q->r);
		q->st = malloc((size_t)(nmsg ? nmsg : 1) * sizeof *q->st);
		q->rbytes = malloc((size_t)(nrecv ? nrecv : 1) * sizeof *q->rbytes);
		q->from = malloc((size_t)(nrecv ? nrecv : 1) * sizeof *q->from);
	}
	if (!q || !q->r || !q->st || !q->rbytes || !q->from) {
		if (q)
			free_request(q);
		return comm_errorf(c, COMM_FAILED, "rank %d: out of memory", c->rank);
	}
	*q = (struct comm_request){ .grp = grp, .t = t, .nrecv = nrecv, .nmsg = nmsg, .r = q->r,
				    .st = q->st, .rbytes = q->rbytes, .from = q->from };
	snprintf(q->what, sizeof q->what, "%s", comm_what(t));
	q->t.what = q->what;
	/* the peers, for a timeout's message */
	int peers[64], np = 0;
	for (int k = 0; k < nmsg && np < 64; k++) {
		int r = g->ranks[k < nrecv ? recvs[k].peer : sends[k - nrecv].peer];
		bool seen = r == c->rank;
		for (int i = 0; i < np; i++)
			seen = seen || peers[i] == r;
		if (!seen)
			peers[np++] = r;
	}
	char who[64];
	snprintf(q->where, sizeof q->where, "%s%s%s", grp->name, np ? ", exchanging with ranks " : "",
		 np ? comm_ranks_str(peers, np, who, sizeof who) : "");
	int tag = (int)(t.op % ((unsigned)m->tag_ub + 1u));
	/* the group's communicator numbers its members in group order;
	 * receives first, so that a send to myself finds its receive */
	int e = MPI_SUCCESS, posted = 0;
	for (int k = 0; k < nrecv && e == MPI_SUCCESS; k++, posted++) {
		q->rbytes[k] = recvs[k].bytes;
		q->from[k] = g->ranks[recvs[k].peer];
		e = MPI_Irecv(recvs[k].buf, (int)recvs[k].bytes, MPI_BYTE, recvs[k].peer, tag,
			      grp->comm, &q->r[k]);
	}
	for (int k = 0; k < nsend && e == MPI_SUCCESS; k++, posted++)
		e = MPI_Isend(sends[k].buf, (int)sends[k].bytes, MPI_BYTE, sends[k].peer, tag,
			      grp->comm, &q->r[nrecv + k]);
	if (e != MPI_SUCCESS) {
		/* what was posted cannot be taken back */
		m->pending = m->pending || posted > 0;
		free_request(q);
		return mpi_failed(m, e, NULL, 0, t, grp->name);
	}
	*out = q;
	return COMM_OK;
}

static int mpi_exchange_wait(struct comm *c, struct comm_request *q)
{
	struct mpi *m = to_mpi(c);
	int s = wait_all(m, q->nmsg, q->r, q->st, q->t, q->where);
	char msg[COMM_END_WHY];
	msg[0] = 0;
	for (int k = 0; k < q->nrecv && !msg[0]; k++) {
		int got = 0, cls = MPI_SUCCESS;
		if (s && q->st[k].MPI_ERROR != MPI_SUCCESS)
			MPI_Error_class(q->st[k].MPI_ERROR, &cls);
		if (s && cls == MPI_ERR_TRUNCATE) {
			snprintf(msg, sizeof msg,
				 "op %u (%s) of group %s: rank %d expects %zu bytes from rank %d, which sends more",
				 q->t.op, q->what, q->grp->name, c->rank, q->rbytes[k], q->from[k]);
		} else if (!s) {
			MPI_Get_count(&q->st[k], MPI_BYTE, &got);
			if ((size_t)got != q->rbytes[k])
				snprintf(msg, sizeof msg,
					 "op %u (%s) of group %s: rank %d expects %zu bytes from rank %d, which sends %d",
					 q->t.op, q->what, q->grp->name, c->rank, q->rbytes[k],
					 q->from[k], got);
		}
	}
	if (s && !m->pending)
		/* an MPI error may leave the exchange's other requests posted */
		for (int k = 0; k < q->nmsg; k++)
			m->pending = m->pending || q->r[k] != MPI_REQUEST_NULL;
	if (msg[0]) {
		/* the sender saw nothing wrong: rank 0 stops every rank */
		s = comm_errorf(c, COMM_FAILED, "%s", msg);
		tell(m, msg);
	}
	free_request(q);
	return s;
}

static void mpi_fail(struct comm *c, const char *why)
{
	char text[COMM_END_WHY];
	snprintf(text, sizeof text, "rank %d failed: %s", c->rank, why);
	tell(to_mpi(c), text);
}

/* Polls one request until done or the deadline; false at the deadline. */
static bool settle(MPI_Request *req, const struct timespec *deadline)
{
	for (;;) {
		int done = 0;
		if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
			return false;
		if (done)
			return true;
		if (comm_past(deadline))
			return false;
		struct timespec ts = { 0, SLEEP_MAX_NS };
		nanosleep(&ts, NULL);
	}
}

static int mpi_end(struct comm *c, int code, int status, const char *why, struct comm_end *ends)
{
	struct mpi *m = to_mpi(c);
	if (code && !heard(m))
		tell(m, why);
	struct note mine = { code, status, (m->told && c->rank ? N_SENT_FAIL : 0) |
					   (m->pending ? N_PENDING : 0), "" };
	snprintf(mine.why, sizeof mine.why, "%s", code ? why : "");
	/* rank 0 waits for the others up to the timeout, after its own wait in a
	 * collective timed out (the others' too): twice the timeout and a
	 * second bound the wait for its verdict */
	struct timespec deadline = comm_deadline(c->rank ? 2 * m->timeout_ms + 1000 : m->timeout_ms);
	if (c->rank) {
		struct note verdict;
		MPI_Request req[2];
		MPI_Isend(&mine, (int)sizeof mine, MPI_BYTE, 0, TAG_END, m->rep, &req[0]);
		MPI_Irecv(&verdict, (int)sizeof verdict, MPI_BYTE, 0, TAG_VERDICT, m->rep, &req[1]);
		if (!settle(&req[1], &deadline)) {
			m->pending = true;
			return -1;
		}
		/* rank 0 has taken this rank's notes before its verdict: they end */
		bool ok = settle(&req[0], &deadline) && (!m->told || settle(&m->fail_req, &deadline));
		if (ok && verdict.flags & N_STOPPED && !m->stop.flags)
			MPI_Recv(&m->stop, (int)sizeof m->stop, MPI_BYTE, 0, TAG_STOP, m->rep,
				 MPI_STATUS_IGNORE);
		m->abort = !ok || verdict.flags & N_ABORT;
		return verdict.code;
	}
	int world = c->world, job = code;
	struct note *notes = calloc((size_t)world, sizeof *notes);
	MPI_Request *req = calloc((size_t)world, sizeof *req);
	if (!notes || !req) {
		free(notes), free(req);
		m->abort = true;
		return 1;
	}
	for (int r = 1; r < world; r++)
		ends[r] = (struct comm_end){ .reported = false };
	ends[0] = (struct comm_end){ .reported = true, .code = code, .status = status };
	snprintf(ends[0].why, sizeof ends[0].why, "%s", mine.why);
	for (int r = 1; r < world; r++)
		MPI_Irecv(&notes[r], (int)sizeof notes[r], MPI_BYTE, r, TAG_END, m->rep, &req[r]);
	int left = world - 1;
	while (left && !comm_past(&deadline)) {
		heard(m);
		for (int r = 1; r < world; r++) {
			int done = 0;
			if (req[r] != MPI_REQUEST_NULL && MPI_Test(&req[r], &done, MPI_STATUS_IGNORE) ==
				MPI_SUCCESS && done) {
				left--;
				ends[r] = (struct comm_end){ .reported = true, .code = notes[r].code,
							     .status = notes[r].status };
				memcpy(ends[r].why, notes[r].why, sizeof ends[r].why);
				/* a TAG_FAIL goes before the TAG_END: take it */
				if (notes[r].flags & N_SENT_FAIL && !m->heard_from[r])
					take_fail(m, r);
			}
		}
		struct timespec ts = { 0, SLEEP_MAX_NS };
		nanosleep(&ts, NULL);
	}
	bool abort = m->pending || left;
	for (int r = 1; r < world; r++) {
		if (!ends[r].reported) {
			job = job > 1 ? job : 1;
			continue;
		}
		job = ends[r].code > job ? ends[r].code : job;
		abort = abort || notes[r].flags & N_PENDING;
	}
	for (int r = 1; r < world; r++) {
		if (!ends[r].reported)
			continue;
		notes[r] = (struct note){ job, 0, (m->stop_req[r] != MPI_REQUEST_NULL ? N_STOPPED : 0) |
					  (abort ? N_ABORT : 0), "" };
		MPI_Isend(&notes[r], (int)sizeof notes[r], MPI_BYTE, r, TAG_VERDICT, m->rep, &req[r]);
	}
	/* every reported rank takes its verdict and its stop: the sends end */
	struct timespec grace = comm_deadline(m->timeout_ms);
	for (int r = 1; r < world; r++)
		if (ends[r].reported && !(settle(&req[r], &grace) &&
		    (m->stop_req[r] == MPI_REQUEST_NULL || settle(&m->stop_req[r], &grace))))
			abort = true;
	m->abort = abort;
	free(notes), free(req);
	return job;
}

static void mpi_free(struct comm *c)
{
	struct mpi *m = to_mpi(c);
	/* a collective left pending cannot be finalized: rank 0 ends the job
	 * (after its report); another rank waits for that, within a bound, and
	 * ends it itself when rank 0 is gone (or never gave a verdict) */
	if (m->pending || m->abort) {
		fflush(stdout);
		fflush(stderr);
		if (c->rank && m->abort) {
			struct timespec ts = { m->timeout_ms / 1000 + 1, 0 };
			nanosleep(&ts, NULL);
		}
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	for (struct mgroup *grp = m->groups, *next; grp; grp = next) {
		next = grp->next;
		MPI_Comm_free(&grp->comm);
		free(grp->ranks);
		free(grp);
	}
	MPI_Comm_free(&m->world);
	MPI_Comm_free(&m->rep);
	if (m->we_init)
		MPI_Finalize();
	free(m->ints);
	free(m->stop_req);
	free(m->heard_from);
	free(m);
}

static const struct comm_ops mpi_ops = {
	.name = "mpi",
	.allgatherv = mpi_allgatherv,
	.allreduce_f32 = mpi_allreduce_f32,
	.alltoallv = mpi_alltoallv,
	.reduce_scatter_f32 = mpi_reduce_scatter_f32,
	.exchange_start = mpi_exchange_start,
	.exchange_wait = mpi_exchange_wait,
	.fail = mpi_fail,
	.end = mpi_end,
	.free = mpi_free,
};

struct comm *comm_mpi_create(int timeout_ms)
{
	int inited = 0, finalized = 0, provided;
	MPI_Initialized(&inited);
	MPI_Finalized(&finalized);
	if (finalized) {
		g_raise(COMM_FAILED, "MPI was finalized already");
		return NULL;
	}
	/* the runtime calls MPI from one thread at a time, not always the main one */
	if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
		g_raise(COMM_FAILED, "MPI_Init_thread failed");
		return NULL;
	}
	struct mpi *m = calloc(1, sizeof *m);
	if (!m) {
		g_raise(COMM_FAILED, "out of memory");
		return NULL;
	}
	m->c = (struct comm){ .ops = &mpi_ops, .device = -1 };
	m->timeout_ms = timeout_ms;
	m->we_init = !inited;
	MPI_Comm_rank(MPI_COMM_WORLD, &m->c.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &m->c.world);
	int *ub, flag = 0;
	MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
	m->tag_ub = flag ? *ub : 32767;
	m->stop_req = malloc((size_t)m->c.world * sizeof *m->stop_req);
	m->heard_from = calloc((size_t)m->c.world, sizeof *m->heard_from);
	if (!m->stop_req || !m->heard_from) {
		g_raise(COMM_FAILED, "out of memory");
		free(m->stop_req), free(m->heard_from), free(m);
		return NULL;
	}
	for (int r = 0; r < m->c.world; r++)
		m->stop_req[r] = MPI_REQUEST_NULL;
	m->fail_req = MPI_REQUEST_NULL;
	/* a rank that never starts must not hang the others here either */
	MPI_Request req[2];
	MPI_Status st[2];
	MPI_Comm_idup(MPI_COMM_WORLD, &m->world, &req[0]);
	MPI_Comm_idup(MPI_COMM_WORLD, &m->rep, &req[1]);
	if (wait_all(m, 2, req, st, (struct comm_tag){ 0, "startup" }, "[world]")) {
		if (m->pending) { /* a duplication left pending: the job cannot finalize */
			fprintf(stderr, "dtpc: %s\n", g_error()->msg);
			fflush(stderr);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		if (m->we_init)
			MPI_Finalize();
		free(m->stop_req), free(m->heard_from), free(m);
		return NULL;
	}
	MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
	MPI_Comm_set_errhandler(m->rep, MPI_ERRORS_RETURN);
	m->ready = true;
	/* the ranks on this node as the launcher tells them (Open MPI, MPICH):
	 * asking MPI would be a collective without a timeout */
	const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	if (!local)
		local = getenv("MPI_LOCALNRANKS");
	long here = local ? strtol(local, NULL, 10) : 0, cores = sysconf(_SC_NPROCESSORS_ONLN);
	m->busy_ms = cores > 0 && here > cores ? 0 : BUSY_MS;
	return &m->c;
}
#else
struct comm *comm_mpi_create(int timeout_ms)
{
	g_raise(COMM_FAILED, "this build has no MPI backend (dtpc was built without mpicc)");
	return NULL;
}
#endif
