/* comm_mpi.c — the mpi backend: one rank per process (Open MPI).
 *
 * A group becomes a sub-communicator at its first use, made with
 * MPI_Comm_create_group (collective over the members only: the rest of the
 * world is busy elsewhere) and cached by (id, ranks[0]). Every collective is
 * nonblocking MPI polled with MPI_Testall against the deadline; MPI cannot
 * cancel a collective, so a timeout prints what this rank waited for and
 * ends the job with MPI_Abort, as does fail().
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

enum {
	BUSY_MS = 10,         /* polling without sleeping, for a collective's first 10 ms */
	SLEEP_MAX_NS = 50000, /* the longest sleep between polls after that */
	TAG_SHIFT = 1,        /* on a group's communicator */
	MPI_WHAT = 96,
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
	struct mgroup *groups;
	int *ints;      /* the int counts and displacements of a v-collective */
	size_t ints_cap;
};

struct comm_request {
	MPI_Request r[2]; /* receive, send */
	struct mgroup *grp;
	struct comm_tag t;
	char what[MPI_WHAT];
	size_t rbytes;
	int left; /* the world rank we receive from */
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

/* Polls n requests to completion; a timeout ends the job. */
static int wait_all(struct mpi *m, int n, MPI_Request *req, MPI_Status *st, struct comm_tag t,
		    const char *group)
{
	struct timespec deadline = comm_deadline(m->timeout_ms), busy = comm_deadline(BUSY_MS);
	long sleep_ns = 1000;
	for (;;) {
		int done = 0;
		int e = MPI_Testall(n, req, &done, st);
		if (e != MPI_SUCCESS)
			return mpi_failed(m, e, st, n, t, group);
		if (done)
			return COMM_OK;
		if (comm_past(&deadline)) {
			fprintf(stderr, "dtpc: rank %d: timed out after %g s in op %u (%s) of group %s\n",
				m->c.rank, m->timeout_ms / 1000.0, t.op, comm_what(t), group);
			fflush(stderr);
			MPI_Abort(MPI_COMM_WORLD, 1);
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

static int mpi_shift_start(struct comm *c, const struct comm_group *g, struct comm_tag t,
			   const void *send, size_t sbytes, void *recv, size_t rbytes,
			   struct comm_request **out)
{
	struct mpi *m = to_mpi(c);
	struct mgroup *grp;
	int st = comm_check_shift(c, g, send, sbytes, recv, rbytes);
	if (!st && (sbytes > INT_MAX || rbytes > INT_MAX))
		st = comm_errorf(c, COMM_INVALID, "shift: rank %d: %zu bytes exceed MPI's int count",
				 c->rank, sbytes > rbytes ? sbytes : rbytes);
	if (st || (st = get_group(m, g, t, &grp)))
		return st;
	struct comm_request *r = malloc(sizeof *r);
	if (!r)
		return comm_errorf(c, COMM_FAILED, "rank %d: out of memory", c->rank);
	int left = (g->me + g->n - 1) % g->n, right = (g->me + 1) % g->n;
	*r = (struct comm_request){ .grp = grp, .t = t, .rbytes = rbytes, .left = g->ranks[left] };
	snprintf(r->what, sizeof r->what, "%s", comm_what(t));
	r->t.what = r->what;
	/* the group's communicator numbers its members in group order */
	int e = MPI_Irecv(recv, (int)rbytes, MPI_BYTE, left, TAG_SHIFT, grp->comm, &r->r[0]);
	if (e == MPI_SUCCESS)
		e = MPI_Isend(send, (int)sbytes, MPI_BYTE, right, TAG_SHIFT, grp->comm, &r->r[1]);
	if (e != MPI_SUCCESS) {
		free(r);
		return mpi_failed(m, e, NULL, 0, t, grp->name);
	}
	*out = r;
	return COMM_OK;
}

static int mpi_shift_wait(struct comm *c, struct comm_request *r)
{
	struct mpi *m = to_mpi(c);
	MPI_Status st[2];
	int s = wait_all(m, 2, r->r, st, r->t, r->grp->name);
	int got = 0;
	if (!s) {
		MPI_Get_count(&st[0], MPI_BYTE, &got);
		if ((size_t)got != r->rbytes)
			s = comm_errorf(c, COMM_FAILED,
					"op %u (%s) of group %s: rank %d expects %zu bytes from rank %d, which sends %d",
					r->t.op, r->what, r->grp->name, c->rank, r->rbytes, r->left,
					got);
	}
	free(r);
	return s;
}

static void mpi_fail(struct comm *c, const char *why)
{
	fprintf(stderr, "dtpc: rank %d failed: %s\n", c->rank, why);
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

static void mpi_free(struct comm *c)
{
	struct mpi *m = to_mpi(c);
	for (struct mgroup *grp = m->groups, *next; grp; grp = next) {
		next = grp->next;
		MPI_Comm_free(&grp->comm);
		free(grp->ranks);
		free(grp);
	}
	MPI_Comm_free(&m->world);
	if (m->we_init)
		MPI_Finalize();
	free(m->ints);
	free(m);
}

static const struct comm_ops mpi_ops = {
	.name = "mpi",
	.allgatherv = mpi_allgatherv,
	.allreduce_f32 = mpi_allreduce_f32,
	.alltoallv = mpi_alltoallv,
	.shift_start = mpi_shift_start,
	.shift_wait = mpi_shift_wait,
	.fail = mpi_fail,
	.free = mpi_free,
};

struct comm *comm_mpi_create(int timeout_ms, char *err, size_t errlen)
{
	int inited = 0, finalized = 0, provided;
	MPI_Initialized(&inited);
	MPI_Finalized(&finalized);
	if (finalized) {
		snprintf(err, errlen, "MPI was finalized already");
		return NULL;
	}
	/* the runtime calls MPI from one thread at a time, not always the main one */
	if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
		snprintf(err, errlen, "MPI_Init_thread failed");
		return NULL;
	}
	struct mpi *m = calloc(1, sizeof *m);
	if (!m) {
		snprintf(err, errlen, "out of memory");
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
	/* a rank that never starts must not hang the others here either */
	MPI_Request req;
	MPI_Status st;
	MPI_Comm_idup(MPI_COMM_WORLD, &m->world, &req);
	if (wait_all(m, 1, &req, &st, (struct comm_tag){ 0, "startup" }, "[world]")) {
		snprintf(err, errlen, "%s", m->c.error);
		if (m->we_init)
			MPI_Finalize();
		free(m);
		return NULL;
	}
	MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
	return &m->c;
}
#else
#include <stdio.h>

struct comm *comm_mpi_create(int timeout_ms, char *err, size_t errlen)
{
	snprintf(err, errlen, "this build has no MPI backend (dtpc was built without mpicc)");
	return NULL;
}
#endif
