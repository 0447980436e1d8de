/* comm_local.c — the local backend: N ranks as threads of one process.
 *
 * A collective is a rendezvous of its group's members, keyed by (group id,
 * ranks[0]). Each member posts its buffers and tag and waits at the arrival
 * barrier (against one deadline); the last to arrive checks that the posts
 * agree. Then every member copies straight from its peers' posted buffers
 * into its own (one memcpy per byte moved), and a last barrier keeps every
 * buffer posted until no peer reads it. A timeout, a diverged or departed
 * peer, or fail() aborts the whole world: the first message wins, every
 * waiter wakes, and every pending or later call returns COMM_FAILED with it.
 *
 * The barriers after arrival have no deadline, on purpose: once all members
 * have arrived, each one only copies, which ends; a member that left early
 * would let its caller free buffers a peer is still reading.
 *
 * Point-to-point exchanges are no rendezvous: each rank lists its started
 * exchanges on the group, every message numbered within its ordered pair
 * (sender, receiver); the i-th send from a to b meets the i-th receive of b
 * from a, and whichever end waits first, finding its partner posted, copies
 * (so a rank in exchange_wait never waits for a peer that is computing).
 *
 * One mutex guards the world's bookkeeping; the copies run outside it. */
#include "runtime/comm.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
	LOCAL_WHAT = 96,     /* bytes of a tag's text kept for messages */
	SUM_BLOCK = 2048,    /* floats summed per pass: the partial sum stays in L1 */
	SUM_ALIGN = 16,      /* allreduce segments start on a cache line */
	LINGER = 50,         /* yields before a barrier sleeps */
};

enum kind { K_ALLGATHERV, K_ALLREDUCE, K_ALLTOALLV, K_REDUCE_SCATTER };
static const char *const kind_name[] = { "allgatherv", "allreduce_f32", "alltoallv",
					 "reduce_scatter_f32" };

/* What a member posts for a collective. Peers read it between the arrival
 * barrier and the last one, while the poster is blocked in the call. */
struct post {
	enum kind kind;
	struct comm_tag tag;
	const void *send;
	void *recv;                      /* allreduce: the buffer */
	const size_t *scounts, *sdispls; /* allgatherv, reduce_scatter: counts, displs */
	const size_t *rcounts, *rdispls;
	size_t n;                        /* allreduce: floats */
};

enum edge { EDGE_OPEN, EDGE_COPYING, EDGE_DONE };

/* One message of a started exchange. A send and its receive change state
 * together, under the world's mutex, by the end that copies. */
struct p2p_msg {
	int peer;
	void *buf;
	size_t bytes;
	uint64_t seq; /* its place among the messages of its ordered pair */
	enum edge state;
};

struct member {
	struct post post;
	uint64_t entered; /* barriers entered */
	struct comm_request *inflight; /* exchanges started and not waited */
};
/* A group's rendezvous; lives as long as the world. */
struct rv {
	struct rv *next;
	int id, n;
	int *ranks;
	char name[64];
	pthread_cond_t cv;
	uint64_t phase; /* barriers completed */
	int arrived;    /* members in the current barrier */
	struct member *m;
	uint64_t *sent, *posted; /* [from * n + to]: messages started, receives started */
};

/* Where a rank is, so a message can say what a missing peer is doing. */
enum where { W_NEW, W_IN, W_OUT, W_GONE };
struct rank_state {
	enum where where;
	uint32_t op;
	char what[LOCAL_WHAT];
	const struct rv *rv;
};

struct comm_local_world {
	pthread_mutex_t mu;
	int n, timeout_ms;
	bool aborted;
	char error[512];
	struct rv *rvs;
	struct rank_state *ranks;
};

struct local {
	struct comm c;
	struct comm_local_world *w;
};

/* A started exchange: its sends, then its receives. */
struct comm_request {
	struct comm_request *next; /* the member's exchanges in flight */
	struct rv *rv;
	int me, nsend, nmsg;
	uint32_t op;
	char what[LOCAL_WHAT];
	struct p2p_msg msg[];
};

static struct local *to_local(struct comm *c)
{
	return (struct local *)c;
}

/* ---- aborting ----------------------------------------------------------------- */

/* Under w->mu: the first message wins; every waiter wakes to see it. */
__attribute__((format(printf, 2, 3)))
static void abort_world(struct comm_local_world *w, const char *fmt, ...)
{
	if (w->aborted)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->error, sizeof w->error, fmt, ap);
	va_end(ap);
	w->aborted = true;
	for (struct rv *rv = w->rvs; rv; rv = rv->next)
		pthread_cond_broadcast(&rv->cv);
}

/* Under w->mu. */
static int failed(struct local *l)
{
	return comm_errorf(&l->c, COMM_FAILED, "%s", l->w->error);
}

/* Appends to a message, cutting at its end. */
struct msg {
	char *buf;
	size_t len, at;
};

__attribute__((format(printf, 2, 3)))
static void msg_add(struct msg *m, const char *fmt, ...)
{
	if (m->at >= m->len)
		return;
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(m->buf + m->at, m->len - m->at, fmt, ap);
	va_end(ap);
	if (k > 0)
		m->at += (size_t)k;
}

/* What rank r is doing, for a message about a peer that did not come. */
static void describe(struct msg *m, const struct comm_local_world *w, int r)
{
	const struct rank_state *s = &w->ranks[r];
	switch (s->where) {
	case W_NEW:
		msg_add(m, "it has made no call");
		break;
	case W_IN:
		msg_add(m, "it is in op %u (%s) of group %s", s->op, s->what, s->rv->name);
		break;
	case W_OUT:
		msg_add(m, "its last call was op %u (%s) of group %s", s->op, s->what, s->rv->name);
		break;
	case W_GONE:
		msg_add(m, "it has freed its comm");
		break;
	}
}

/* Under w->mu: rank r is in (or has just made) call t on rv. */
static void set_where(struct comm_local_world *w, int r, enum where where, const struct rv *rv,
		      uint32_t op, const char *what)
{
	struct rank_state *s = &w->ranks[r];
	s->where = where;
	s->rv = rv;
	s->op = op;
	snprintf(s->what, sizeof s->what, "%s", what);
}

/* ---- rendezvous ----------------------------------------------------------------- */

/* Under w->mu: the rendezvous of g, made at its first use. NULL with c->error
 * set (and, where the ranks disagree, the world aborted). */
static struct rv *find_rv(struct local *l, const struct comm_group *g, int *st)
{
	struct comm_local_world *w = l->w;
	char name[64];
	for (struct rv *rv = w->rvs; rv; rv = rv->next) {
		if (rv->id != g->id || rv->ranks[0] != g->ranks[0])
			continue;
		if (rv->n == g->n && !memcmp(rv->ranks, g->ranks, (size_t)g->n * sizeof *g->ranks))
			return rv;
		/* a rank whose graph differs: nobody can complete this group */
		abort_world(w, "rank %d names group id %d as %s, another member as %s", l->c.rank,
			    g->id, comm_ranks_str(g->ranks, g->n, name, sizeof name), rv->name);
		*st = failed(l);
		return NULL;
	}
	for (int i = 0; i < g->n; i++)
		for (int j = 0; j < i; j++)
			if (g->ranks[i] == g->ranks[j]) {
				*st = comm_errorf(&l->c, COMM_INVALID, "group id %d names rank %d twice",
						  g->id, g->ranks[i]);
				return NULL;
			}
	struct rv *rv = calloc(1, sizeof *rv);
	int *ranks = malloc((size_t)g->n * sizeof *ranks);
	struct member *m = calloc((size_t)g->n, sizeof *m);
	uint64_t *counts = calloc(2 * (size_t)g->n * (size_t)g->n, sizeof *counts);
	pthread_condattr_t attr;
	if (!rv || !ranks || !m || !counts || pthread_condattr_init(&attr)) {
		free(rv);
		free(ranks);
		free(m);
		free(counts);
		abort_world(w, "rank %d: out of memory for group id %d", l->c.rank, g->id);
		*st = failed(l);
		return NULL;
	}
	/* deadlines are on the monotonic clock: a clock step must not fire them */
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&rv->cv, &attr);
	pthread_condattr_destroy(&attr);
	memcpy(ranks, g->ranks, (size_t)g->n * sizeof *ranks);
	rv->id = g->id;
	rv->n = g->n;
	rv->ranks = ranks;
	rv->m = m;
	rv->sent = counts;
	rv->posted = counts + (size_t)g->n * (size_t)g->n;
	comm_ranks_str(ranks, g->n, rv->name, sizeof rv->name);
	rv->next = w->rvs;
	w->rvs = rv;
	return rv;
}

/* The bytes the poster of p (member `self`) sends to member `to`, and the
 * bytes it expects from member `from`. */
static size_t sends(const struct post *p, int self, int to)
{
	switch ((enum kind)p->kind) {
	case K_ALLGATHERV:
		return p->scounts[self];
	case K_ALLTOALLV:
		return p->scounts[to];
	case K_REDUCE_SCATTER:
		return p->scounts[to] * sizeof(float);
	case K_ALLREDUCE:
		break;
	}
	return p->n * sizeof(float);
}

static size_t expects(const struct post *p, int self, int from)
{
	switch ((enum kind)p->kind) {
	case K_ALLGATHERV:
		return p->scounts[from];
	case K_ALLTOALLV:
		return p->rcounts[from];
	case K_REDUCE_SCATTER:
		return p->scounts[self] * sizeof(float);
	case K_ALLREDUCE:
		break;
	}
	return p->n * sizeof(float);
}

/* Under w->mu, by the last to arrive: whether the posts agree (same tag,
 * same kind, matching sizes); if not, the message says who differs. */
static bool posts_agree(const struct rv *rv, struct msg *m)
{
	const struct post *p0 = &rv->m[0].post;
	const char *w0 = comm_what(p0->tag);
	for (int i = 1; i < rv->n; i++) {
		const struct post *p = &rv->m[i].post;
		if (p->tag.op != p0->tag.op || strcmp(comm_what(p->tag), w0)) {
			msg_add(m, "rank %d is at op %u (%s) but rank %d is at op %u (%s) in group %s",
				rv->ranks[i], p->tag.op, comm_what(p->tag), rv->ranks[0], p0->tag.op,
				w0, rv->name);
			return false;
		}
		if (p->kind != p0->kind) {
			msg_add(m, "rank %d calls %s but rank %d calls %s at op %u (%s) in group %s",
				rv->ranks[i], kind_name[p->kind], rv->ranks[0], kind_name[p0->kind],
				p0->tag.op, w0, rv->name);
			return false;
		}
	}
	for (int j = 0; j < rv->n; j++) {
		for (int i = 0; i < rv->n; i++) {
			size_t want = expects(&rv->m[j].post, j, i), sent = sends(&rv->m[i].post, i, j);
			if (want != sent) {
				msg_add(m, "op %u (%s) of group %s: rank %d expects %zu bytes from rank %d, which sends %zu",
					p0->tag.op, w0, rv->name, rv->ranks[j], want, rv->ranks[i], sent);
				return false;
			}
		}
	}
	return true;
}

/* Under w->mu: the first member of rv whose rank freed its comm before
 * entering barrier `phase`, or -1. */
static int departed(const struct comm_local_world *w, const struct rv *rv, uint64_t phase)
{
	for (int i = 0; i < rv->n; i++)
		if (rv->m[i].entered <= phase && w->ranks[rv->ranks[i]].where == W_GONE)
			return i;
	return -1;
}

/* Under w->mu: gives the barrier a moment to complete before sleeping on
 * it; a wake-up through the kernel costs more than a small collective. */
static void linger(struct comm_local_world *w, struct rv *rv, uint64_t phase)
{
	pthread_mutex_unlock(&w->mu);
	for (int i = 0; i < LINGER && __atomic_load_n(&rv->phase, __ATOMIC_ACQUIRE) == phase; i++)
		sched_yield();
	pthread_mutex_lock(&w->mu);
}

/* Under w->mu: the arrival barrier, against the deadline. */
static int arrive(struct local *l, struct rv *rv, int me, const struct timespec *deadline)
{
	struct comm_local_world *w = l->w;
	const struct post *p = &rv->m[me].post;
	uint64_t phase = rv->phase;
	char buf[512];
	struct msg m = { buf, sizeof buf, 0 };

	rv->m[me].entered = phase + 1;
	if (++rv->arrived == rv->n) {
		if (!posts_agree(rv, &m)) {
			abort_world(w, "%s", buf);
			return failed(l);
		}
		rv->arrived = 0;
		__atomic_store_n(&rv->phase, phase + 1, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&rv->cv);
		return COMM_OK;
	}
	bool timed_out = false;
	linger(w, rv, phase);
	while (rv->phase == phase) {
		if (w->aborted)
			return failed(l);
		int gone = departed(w, rv, phase);
		if (gone >= 0 || timed_out) {
			if (gone >= 0) {
				msg_add(&m, "rank %d freed its comm without arriving at op %u (%s) of group %s",
					rv->ranks[gone], p->tag.op, comm_what(p->tag), rv->name);
			} else {
				msg_add(&m, "rank %d: timed out after %g s in op %u (%s) of group %s:",
					l->c.rank, w->timeout_ms / 1000.0, p->tag.op,
					comm_what(p->tag), rv->name);
				const char *sep = " ";
				for (int i = 0; i < rv->n; i++) {
					if (rv->m[i].entered > phase)
						continue;
					msg_add(&m, "%srank %d did not arrive (", sep, rv->ranks[i]);
					describe(&m, w, rv->ranks[i]);
					msg_add(&m, ")");
					sep = "; ";
				}
			}
			abort_world(w, "%s", buf);
			return failed(l);
		}
		timed_out = pthread_cond_timedwait(&rv->cv, &w->mu, deadline) == ETIMEDOUT;
	}
	return COMM_OK;
}

/* Under w->mu: a barrier after arrival (no deadline: see the top). */
static void settle(struct comm_local_world *w, struct rv *rv, int me)
{
	uint64_t phase = rv->phase;
	rv->m[me].entered = phase + 1;
	if (++rv->arrived == rv->n) {
		rv->arrived = 0;
		__atomic_store_n(&rv->phase, phase + 1, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&rv->cv);
		return;
	}
	linger(w, rv, phase);
	while (rv->phase == phase)
		pthread_cond_wait(&rv->cv, &w->mu);
}

/* Posts p for g's collective and waits until every member has. On COMM_OK
 * the caller copies, then calls finish(). */
static int begin(struct local *l, const struct comm_group *g, const struct post *p,
		 struct rv **out)
{
	struct comm_local_world *w = l->w;
	struct timespec deadline = comm_deadline(w->timeout_ms);
	int st = COMM_OK;
	struct rv *rv = NULL;
	pthread_mutex_lock(&w->mu);
	if (w->aborted)
		st = failed(l);
	else
		rv = find_rv(l, g, &st);
	if (rv) {
		set_where(w, l->c.rank, W_IN, rv, p->tag.op, comm_what(p->tag));
		rv->m[g->me].post = *p;
		st = arrive(l, rv, g->me, &deadline);
	}
	pthread_mutex_unlock(&w->mu);
	*out = rv;
	return st;
}

static void finish(struct local *l, struct rv *rv, int me)
{
	struct comm_local_world *w = l->w;
	pthread_mutex_lock(&w->mu);
	settle(w, rv, me);
	w->ranks[l->c.rank].where = W_OUT;
	pthread_mutex_unlock(&w->mu);
}

/* ---- collectives --------------------------------------------------------------- */

static int local_allgatherv(struct comm *c, const struct comm_group *g, struct comm_tag t,
			    const void *send, void *recv, const size_t *counts,
			    const size_t *displs)
{
	struct local *l = to_local(c);
	int st = comm_check_allgatherv(c, g, send, recv, counts, displs);
	if (st)
		return st;
	struct post p = { .kind = K_ALLGATHERV, .tag = t, .send = send, .recv = recv,
			  .scounts = counts, .sdispls = displs };
	struct rv *rv;
	if ((st = begin(l, g, &p, &rv)))
		return st;
	/* start at the next member: the members read different sources at once */
	for (int k = 0; k < g->n; k++) {
		int i = (g->me + k) % g->n;
		char *dst = (char *)recv + displs[i];
		const void *src = rv->m[i].post.send;
		if (counts[i] && dst != src)
			memcpy(dst, src, counts[i]);
	}
	finish(l, rv, g->me);
	return COMM_OK;
}

/* acc = a + b and acc += x, in blocks of 16 so that -O2 vectorises them. The
 * bodies are inlined twice, into an AVX2 build and the baseline one, and the
 * CPU picks at run time. Not target_clones: its ifunc resolver runs while the
 * dynamic loader relocates, before ThreadSanitizer's runtime has started, so a
 * TSan build of anything that links this file could not even load. */
static inline __attribute__((always_inline)) void
sum2_body(float *restrict acc, const float *restrict a, const float *restrict b, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		for (int k = 0; k < 16; k++)
			acc[i + k] = a[i + k] + b[i + k];
	for (; i < n; i++)
		acc[i] = a[i] + b[i];
}

static inline __attribute__((always_inline)) void
add_body(float *restrict acc, const float *restrict x, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		for (int k = 0; k < 16; k++)
			acc[i + k] += x[i + k];
	for (; i < n; i++)
		acc[i] += x[i];
}

__attribute__((target("avx2")))
static void sum2_avx2(float *restrict acc, const float *restrict a, const float *restrict b, size_t n)
{
	sum2_body(acc, a, b, n);
}

__attribute__((target("avx2")))
static void add_avx2(float *restrict acc, const float *restrict x, size_t n)
{
	add_body(acc, x, n);
}

/* __builtin_cpu_supports reads what libgcc's constructor filled in before
 * main: no lazily initialised state shared by the rank threads. */
static void sum2(float *restrict acc, const float *restrict a, const float *restrict b, size_t n)
{
	if (__builtin_cpu_supports("avx2"))
		sum2_avx2(acc, a, b, n);
	else
		sum2_body(acc, a, b, n);
}

static void add(float *restrict acc, const float *restrict x, size_t n)
{
	if (__builtin_cpu_supports("avx2"))
		add_avx2(acc, x, n);
	else
		add_body(acc, x, n);
}

/* Member i's segment of an allreduce of n floats over P members. */
static void segment(size_t n, int P, int i, size_t *lo, size_t *hi)
{
	size_t per = (n + (size_t)P - 1) / (size_t)P;
	size_t chunk = (per + SUM_ALIGN - 1) / SUM_ALIGN * SUM_ALIGN;
	*lo = chunk * (size_t)i < n ? chunk * (size_t)i : n;
	*hi = *lo + chunk < n ? *lo + chunk : n;
}

/* dst[0 .. hi - lo) = the sum over rv's n members, in member order, of
 * their posted buffers (recv, else send) over [lo, hi), in blocks that keep
 * the partial sum in L1: my own terms are read before it lands. */
static const float *member_buf(const struct rv *rv, int i, bool recvs)
{
	return recvs ? rv->m[i].post.recv : rv->m[i].post.send;
}

static void sum_members(const struct rv *rv, int n, bool recvs, size_t lo, size_t hi, float *dst)
{
	float acc[SUM_BLOCK];
	for (size_t b = lo; b < hi; b += SUM_BLOCK) {
		size_t len = hi - b < SUM_BLOCK ? hi - b : SUM_BLOCK;
		sum2(acc, member_buf(rv, 0, recvs) + b, member_buf(rv, 1, recvs) + b, len);
		for (int i = 2; i < n; i++)
			add(acc, member_buf(rv, i, recvs) + b, len);
		memcpy(dst + (b - lo), acc, len * sizeof *dst);
	}
}

/* In place, in two steps. Reduce-scatter: each member sums its own segment
 * over all members' buffers into its buffer's segment; peers meanwhile read
 * only their own segments of it, so nothing they read changes. Gather: each
 * member copies the other segments from their owners' buffers, which nobody
 * writes any more. Every element is summed once, in member order, so all
 * members get the same bits. */
static int local_allreduce_f32(struct comm *c, const struct comm_group *g, struct comm_tag t,
			       float *buf, size_t n)
{
	struct local *l = to_local(c);
	int st = comm_check_group(c, g, "allreduce_f32");
	if (st)
		return st;
	struct post p = { .kind = K_ALLREDUCE, .tag = t, .recv = buf, .n = n };
	struct rv *rv;
	if ((st = begin(l, g, &p, &rv)))
		return st;
	if (g->n > 1) {
		size_t lo, hi;
		segment(n, g->n, g->me, &lo, &hi);
		sum_members(rv, g->n, true, lo, hi, buf + lo);
		pthread_mutex_lock(&l->w->mu);
		settle(l->w, rv, g->me);
		pthread_mutex_unlock(&l->w->mu);
		for (int k = 1; k < g->n; k++) {
			int i = (g->me + k) % g->n;
			size_t ilo, ihi;
			segment(n, g->n, i, &ilo, &ihi);
			if (ihi > ilo)
				memcpy(buf + ilo, (const float *)rv->m[i].post.recv + ilo,
				       (ihi - ilo) * sizeof *buf);
		}
	}
	finish(l, rv, g->me);
	return COMM_OK;
}

/* Each member sums its own piece over every member's send, in group order,
 * in blocks that keep the partial sum in L1; peers only read the sends. */
static int local_reduce_scatter_f32(struct comm *c, const struct comm_group *g,
				    struct comm_tag t, const float *send, float *recv,
				    const size_t *counts)
{
	struct local *l = to_local(c);
	size_t total;
	int st = comm_check_reduce_scatter(c, g, send, recv, counts, &total);
	if (st)
		return st;
	/* every member's counts agree (posts_agree), so my piece starts at
	 * the same place in every member's send */
	struct post p = { .kind = K_REDUCE_SCATTER, .tag = t, .send = send, .recv = recv,
			  .scounts = counts };
	struct rv *rv;
	if ((st = begin(l, g, &p, &rv)))
		return st;
	size_t lo = 0;
	for (int i = 0; i < g->me; i++)
		lo += counts[i];
	size_t hi = lo + counts[g->me];
	if (g->n == 1) {
		memcpy(recv, send, counts[0] * sizeof *recv);
	} else {
		sum_members(rv, g->n, false, lo, hi, recv);
	}
	finish(l, rv, g->me);
	return COMM_OK;
}

static int local_alltoallv(struct comm *c, const struct comm_group *g, struct comm_tag t,
			   const void *send, const size_t *scounts, const size_t *sdispls,
			   void *recv, const size_t *rcounts, const size_t *rdispls)
{
	struct local *l = to_local(c);
	int st = comm_check_alltoallv(c, g, send, scounts, sdispls, recv, rcounts, rdispls);
	if (st)
		return st;
	struct post p = { .kind = K_ALLTOALLV, .tag = t, .send = send, .recv = recv,
			  .scounts = scounts, .sdispls = sdispls, .rcounts = rcounts,
			  .rdispls = rdispls };
	struct rv *rv;
	if ((st = begin(l, g, &p, &rv)))
		return st;
	for (int k = 0; k < g->n; k++) {
		int i = (g->me + k) % g->n;
		const struct post *pi = &rv->m[i].post;
		if (rcounts[i])
			memcpy((char *)recv + rdispls[i],
			       (const char *)pi->send + pi->sdispls[g->me], rcounts[i]);
	}
	finish(l, rv, g->me);
	return COMM_OK;
}

/* ---- point-to-point ------------------------------------------------------------- */

static bool is_send(const struct comm_request *r, const struct p2p_msg *m)
{
	return m < r->msg + r->nsend;
}

static int local_exchange_start(struct comm *c, const struct comm_group *g, struct comm_tag t,
				const struct comm_p2p *sends, int nsend,
				const struct comm_p2p *recvs, int nrecv, struct comm_request **req)
{
	struct local *l = to_local(c);
	struct comm_local_world *w = l->w;
	int st = comm_check_exchange(c, g, sends, nsend, recvs, nrecv);
	if (st)
		return st;
	int nmsg = nsend + nrecv;
	struct comm_request *r = malloc(sizeof *r + (size_t)nmsg * sizeof r->msg[0]);
	if (!r)
		return comm_errorf(c, COMM_FAILED, "rank %d: out of memory", c->rank);
	struct rv *rv = NULL;
	pthread_mutex_lock(&w->mu);
	if (w->aborted)
		st = failed(l);
	else
		rv = find_rv(l, g, &st);
	if (rv) {
		int me = g->me, n = rv->n;
		*r = (struct comm_request){ .rv = rv, .me = me, .nsend = nsend, .nmsg = nmsg,
					    .op = t.op };
		snprintf(r->what, sizeof r->what, "%s", comm_what(t));
		for (int k = 0; k < nmsg; k++) {
			const struct comm_p2p *p = k < nsend ? &sends[k] : &recvs[k - nsend];
			uint64_t *count = k < nsend ? &rv->sent[me * n + p->peer]
						    : &rv->posted[p->peer * n + me];
			r->msg[k] = (struct p2p_msg){ .peer = p->peer, .buf = p->buf,
						      .bytes = p->bytes, .seq = (*count)++ };
		}
		r->next = rv->m[me].inflight;
		rv->m[me].inflight = r;
		set_where(w, c->rank, W_OUT, rv, t.op, r->what);
		pthread_cond_broadcast(&rv->cv);
	}
	pthread_mutex_unlock(&w->mu);
	if (st) {
		free(r);
		return st;
	}
	*req = r;
	return COMM_OK;
}

/* Under w->mu: the other end of message m of r (member r->me's), if its
 * owner has started it; its exchange goes to *other. */
static struct p2p_msg *partner(const struct comm_request *r, const struct p2p_msg *m,
			       struct comm_request **other)
{
	bool send = is_send(r, m);
	for (struct comm_request *q = r->rv->m[m->peer].inflight; q; q = q->next)
		for (int k = send ? q->nsend : 0; k < (send ? q->nmsg : q->nsend); k++)
			if (q->msg[k].peer == r->me && q->msg[k].seq == m->seq) {
				*other = q;
				return &q->msg[k];
			}
	return NULL;
}

/* Under w->mu: copies message m of r into or out of its partner p (of q),
 * unlocking for the copy. False if the two disagree (then the world is
 * aborted). */
static bool copy_msg(struct comm_local_world *w, struct comm_request *r, struct p2p_msg *m,
		     struct comm_request *q, struct p2p_msg *p)
{
	struct rv *rv = r->rv;
	bool send = is_send(r, m);
	struct comm_request *sr = send ? r : q, *rr = send ? q : r;
	struct p2p_msg *sm = send ? m : p, *rm = send ? p : m;
	if (sr->op != rr->op || strcmp(sr->what, rr->what)) {
		abort_world(w, "rank %d is at op %u (%s) but rank %d is at op %u (%s) in group %s",
			    rv->ranks[sr->me], sr->op, sr->what, rv->ranks[rr->me], rr->op, rr->what,
			    rv->name);
		return false;
	}
	if (sm->bytes != rm->bytes) {
		abort_world(w, "op %u (%s) of group %s: rank %d expects %zu bytes from rank %d, which sends %zu",
			    rr->op, rr->what, rv->name, rv->ranks[rr->me], rm->bytes, rv->ranks[sr->me],
			    sm->bytes);
		return false;
	}
	sm->state = rm->state = EDGE_COPYING;
	pthread_mutex_unlock(&w->mu);
	if (rm->bytes)
		memcpy(rm->buf, sm->buf, rm->bytes);
	pthread_mutex_lock(&w->mu);
	sm->state = rm->state = EDGE_DONE;
	pthread_cond_broadcast(&rv->cv);
	return true;
}

/* Under w->mu: the message for an exchange whose peers did not all post
 * their ends (or left) by the deadline. */
static void not_posted(struct msg *out, const struct comm_local_world *w,
		       const struct comm_request *r, int gone, int rank)
{
	const struct rv *rv = r->rv;
	if (gone >= 0) {
		msg_add(out, "rank %d freed its comm without its part of op %u (%s) of group %s",
			rv->ranks[gone], r->op, r->what, rv->name);
		return;
	}
	msg_add(out, "rank %d: timed out after %g s in op %u (%s) of group %s:", rank,
		w->timeout_ms / 1000.0, r->op, r->what, rv->name);
	const char *sep = " ";
	for (int k = 0; k < r->nmsg; k++) {
		const struct p2p_msg *m = &r->msg[k];
		struct comm_request *q;
		if (m->state != EDGE_OPEN || partner(r, m, &q))
			continue;
		int peer = rv->ranks[m->peer];
		msg_add(out, "%srank %d did not post the %s rank %d (", sep, peer,
			is_send(r, m) ? "receive from" : "send to", rank);
		describe(out, w, peer);
		msg_add(out, ")");
		sep = "; ";
	}
}

static int local_exchange_wait(struct comm *c, struct comm_request *r)
{
	struct local *l = to_local(c);
	struct comm_local_world *w = l->w;
	struct rv *rv = r->rv;
	struct timespec deadline = comm_deadline(w->timeout_ms);
	bool timed_out = false;
	char buf[512];
	struct msg out = { buf, sizeof buf, 0 };
	int st = COMM_OK;

	pthread_mutex_lock(&w->mu);
	set_where(w, c->rank, W_IN, rv, r->op, r->what);
	for (;;) {
		if (w->aborted) {
			st = failed(l);
			break;
		}
		bool done = true, copying = false, copied = false;
		int gone = -1;
		for (int k = 0; k < r->nmsg && !copied; k++) {
			struct p2p_msg *m = &r->msg[k], *p;
			struct comm_request *q;
			done = done && m->state == EDGE_DONE;
			copying = copying || m->state == EDGE_COPYING;
			if (m->state != EDGE_OPEN)
				continue;
			if ((p = partner(r, m, &q))) {
				if (!copy_msg(w, r, m, q, p)) {
					st = failed(l);
					goto leave;
				}
				copied = true; /* the lock was let go: look again */
			} else if (gone < 0 && w->ranks[rv->ranks[m->peer]].where == W_GONE) {
				gone = m->peer;
			}
		}
		if (copied)
			continue;
		if (done)
			break;
		if (gone >= 0 || timed_out) {
			not_posted(&out, w, r, gone, c->rank);
			abort_world(w, "%s", buf);
			st = failed(l);
			break;
		}
		bool waiting_for_post = false;
		for (int k = 0; k < r->nmsg; k++)
			waiting_for_post = waiting_for_post || r->msg[k].state == EDGE_OPEN;
		if (copying && !waiting_for_post)
			/* a peer is copying: that ends without a deadline */
			pthread_cond_wait(&rv->cv, &w->mu);
		else
			timed_out = pthread_cond_timedwait(&rv->cv, &w->mu, &deadline) == ETIMEDOUT;
	}
leave:
	/* Leaving: no peer may still be copying into or out of my buffers.
	 * After an abort nobody starts a copy, so this wait ends. */
	for (;;) {
		bool copying = false;
		for (int k = 0; k < r->nmsg; k++)
			copying = copying || r->msg[k].state == EDGE_COPYING;
		if (!copying)
			break;
		pthread_cond_wait(&rv->cv, &w->mu);
	}
	struct comm_request **at = &rv->m[r->me].inflight;
	while (*at != r)
		at = &(*at)->next;
	*at = r->next;
	w->ranks[c->rank].where = W_OUT;
	pthread_mutex_unlock(&w->mu);
	free(r);
	return st;
}

/* ---- the rest --------------------------------------------------------------------- */

static void local_fail(struct comm *c, const char *why)
{
	struct local *l = to_local(c);
	pthread_mutex_lock(&l->w->mu);
	abort_world(l->w, "rank %d failed: %s", c->rank, why);
	pthread_mutex_unlock(&l->w->mu);
}

static void local_free(struct comm *c)
{
	struct local *l = to_local(c);
	struct comm_local_world *w = l->w;
	pthread_mutex_lock(&w->mu);
	w->ranks[c->rank].where = W_GONE;
	/* a peer waiting for this rank fails now rather than at its deadline */
	for (struct rv *rv = w->rvs; rv; rv = rv->next)
		pthread_cond_broadcast(&rv->cv);
	pthread_mutex_unlock(&w->mu);
	free(l);
}

static const struct comm_ops local_ops = {
	.name = "local",
	.allgatherv = local_allgatherv,
	.allreduce_f32 = local_allreduce_f32,
	.alltoallv = local_alltoallv,
	.reduce_scatter_f32 = local_reduce_scatter_f32,
	.exchange_start = local_exchange_start,
	.exchange_wait = local_exchange_wait,
	.fail = local_fail,
	.free = local_free,
};

struct comm_local_world *comm_local_world_create(int n, int timeout_ms)
{
	if (n < 1 || timeout_ms < 1)
		return NULL;
	struct comm_local_world *w = calloc(1, sizeof *w);
	struct rank_state *ranks = calloc((size_t)n, sizeof *ranks);
	if (!w || !ranks) {
		free(w);
		free(ranks);
		return NULL;
	}
	pthread_mutex_init(&w->mu, NULL);
	w->n = n;
	w->timeout_ms = timeout_ms;
	w->ranks = ranks;
	return w;
}

struct comm *comm_local_create(struct comm_local_world *w, int rank)
{
	if (!w || rank < 0 || rank >= w->n)
		return NULL;
	struct local *l = calloc(1, sizeof *l);
	if (!l)
		return NULL;
	l->c = (struct comm){ .ops = &local_ops, .rank = rank, .world = w->n, .device = -1 };
	l->w = w;
	return &l->c;
}

void comm_local_world_abort(struct comm_local_world *w, const char *why)
{
	pthread_mutex_lock(&w->mu);
	abort_world(w, "the local world was aborted: %s", why && *why ? why : "by its owner");
	pthread_mutex_unlock(&w->mu);
}

void comm_local_world_free(struct comm_local_world *w)
{
	if (!w)
		return;
	for (struct rv *rv = w->rvs, *next; rv; rv = next) {
		next = rv->next;
		pthread_cond_destroy(&rv->cv);
		free(rv->ranks);
		free(rv->m);
		free(rv->sent);
		free(rv);
	}
	pthread_mutex_destroy(&w->mu);
	free(w->ranks);
	free(w);
}
