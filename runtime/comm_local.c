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
	LOCAL_SHIFTS = 8,    /* shifts a member may have started and not waited, per group */
	LOCAL_WHAT = 96,     /* bytes of a tag's text kept for messages */
	SUM_BLOCK = 2048,    /* floats summed per pass: the partial sum stays in L1 */
	SUM_ALIGN = 16,      /* allreduce segments start on a cache line */
	LINGER = 50,         /* yields before a barrier sleeps */
};

enum kind { K_ALLGATHERV, K_ALLREDUCE, K_ALLTOALLV };
static const char *const kind_name[] = { "allgatherv", "allreduce_f32", "alltoallv" };

/* What a member posts for a collective. Peers read it between the arrival
 * barrier and the last one, while the poster is blocked in the call. */
struct post {
	enum kind kind;
	struct comm_tag tag;
	const void *send;
	void *recv;                      /* allreduce: the buffer */
	const size_t *scounts, *sdispls; /* allgatherv: counts, displs */
	const size_t *rcounts, *rdispls;
	size_t n;                        /* allreduce: floats */
};

enum edge { EDGE_OPEN, EDGE_COPYING, EDGE_DONE };

/* One started shift of a member. The transfer into it (from the left
 * neighbour's slot of the same seq) is copied by whichever end waits first,
 * so a rank in shift_wait never waits for a neighbour that is computing. */
struct shift_slot {
	uint64_t seq;
	uint32_t op;
	char what[LOCAL_WHAT];
	const void *send;
	void *recv;
	size_t sbytes, rbytes;
	enum edge in;
	bool busy; /* started and not yet waited */
};

struct member {
	struct post post;
	uint64_t entered; /* barriers entered */
	uint64_t nshift;  /* shifts started */
	struct shift_slot shift[LOCAL_SHIFTS];
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

struct comm_request {
	struct rv *rv;
	int me;
	uint64_t seq;
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
	pthread_condattr_t attr;
	if (!rv || !ranks || !m || pthread_condattr_init(&attr)) {
		free(rv);
		free(ranks);
		free(m);
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
	comm_ranks_str(ranks, g->n, rv->name, sizeof rv->name);
	rv->next = w->rvs;
	w->rvs = rv;
	return rv;
}

/* The bytes the poster of p (member `self`) sends to member `to`, and the
 * bytes it expects from member `from`. */
static size_t sends(const struct post *p, int self, int to)
{
	switch (p->kind) {
	case K_ALLGATHERV:
		return p->scounts[self];
	case K_ALLTOALLV:
		return p->scounts[to];
	default:
		return p->n * sizeof(float);
	}
}

static size_t expects(const struct post *p, int from)
{
	switch (p->kind) {
	case K_ALLGATHERV:
		return p->scounts[from];
	case K_ALLTOALLV:
		return p->rcounts[from];
	default:
		return p->n * sizeof(float);
	}
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
			size_t want = expects(&rv->m[j].post, i), sent = sends(&rv->m[i].post, i, j);
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
		/* the partial sum lives in L1: my own terms are read before it lands */
		float acc[SUM_BLOCK];
		for (size_t b = lo; b < hi; b += SUM_BLOCK) {
			size_t len = hi - b < SUM_BLOCK ? hi - b : SUM_BLOCK;
			sum2(acc, (const float *)rv->m[0].post.recv + b,
			     (const float *)rv->m[1].post.recv + b, len);
			for (int i = 2; i < g->n; i++)
				add(acc, (const float *)rv->m[i].post.recv + b, len);
			memcpy(buf + b, acc, len * sizeof *buf);
		}
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

/* ---- shift --------------------------------------------------------------------- */

static struct shift_slot *slot(struct rv *rv, int i, uint64_t seq)
{
	return &rv->m[i].shift[seq % LOCAL_SHIFTS];
}

static bool started(const struct rv *rv, int i, uint64_t seq)
{
	return rv->m[i].nshift > seq;
}

static int local_shift_start(struct comm *c, const struct comm_group *g, struct comm_tag t,
			     const void *send, size_t sbytes, void *recv, size_t rbytes,
			     struct comm_request **req)
{
	struct local *l = to_local(c);
	struct comm_local_world *w = l->w;
	int st = comm_check_shift(c, g, send, sbytes, recv, rbytes);
	if (st)
		return st;
	struct comm_request *r = malloc(sizeof *r);
	if (!r)
		return comm_errorf(c, COMM_FAILED, "rank %d: out of memory", c->rank);
	struct rv *rv = NULL;
	pthread_mutex_lock(&w->mu);
	if (w->aborted)
		st = failed(l);
	else
		rv = find_rv(l, g, &st);
	if (rv) {
		struct member *m = &rv->m[g->me];
		struct shift_slot *s = slot(rv, g->me, m->nshift);
		if (s->busy) {
			st = comm_errorf(c, COMM_INVALID,
					 "shift: rank %d has %d shifts on group %s not waited",
					 c->rank, LOCAL_SHIFTS, rv->name);
		} else {
			*s = (struct shift_slot){ .seq = m->nshift, .op = t.op, .send = send,
						  .recv = recv, .sbytes = sbytes, .rbytes = rbytes,
						  .in = EDGE_OPEN, .busy = true };
			snprintf(s->what, sizeof s->what, "%s", comm_what(t));
			*r = (struct comm_request){ .rv = rv, .me = g->me, .seq = m->nshift };
			m->nshift++;
			set_where(w, c->rank, W_OUT, rv, t.op, s->what);
			pthread_cond_broadcast(&rv->cv);
		}
	}
	pthread_mutex_unlock(&w->mu);
	if (st) {
		free(r);
		return st;
	}
	*req = r;
	return COMM_OK;
}

/* Under w->mu: copies shift `seq` from member `from` to member `to` (both
 * started, edge open), unlocking for the copy. False if the two disagree
 * (then the world is aborted). */
static bool copy_edge(struct comm_local_world *w, struct rv *rv, int from, int to, uint64_t seq)
{
	struct shift_slot *src = slot(rv, from, seq), *dst = slot(rv, to, seq);
	if (src->op != dst->op || strcmp(src->what, dst->what)) {
		abort_world(w, "rank %d is at op %u (%s) but rank %d is at op %u (%s) in group %s",
			    rv->ranks[from], src->op, src->what, rv->ranks[to], dst->op, dst->what,
			    rv->name);
		return false;
	}
	if (src->sbytes != dst->rbytes) {
		abort_world(w, "op %u (%s) of group %s: rank %d expects %zu bytes from rank %d, which sends %zu",
			    dst->op, dst->what, rv->name, rv->ranks[to], dst->rbytes,
			    rv->ranks[from], src->sbytes);
		return false;
	}
	dst->in = EDGE_COPYING;
	pthread_mutex_unlock(&w->mu);
	memcpy(dst->recv, src->send, dst->rbytes);
	pthread_mutex_lock(&w->mu);
	dst->in = EDGE_DONE;
	pthread_cond_broadcast(&rv->cv);
	return true;
}

/* Under w->mu: the state of the edge into member i's shift `seq`. */
static enum edge edge_into(struct rv *rv, int i, uint64_t seq)
{
	struct shift_slot *s = slot(rv, i, seq);
	/* a slot is reused only after its edge is done */
	return s->seq == seq ? s->in : EDGE_DONE;
}

static int local_shift_wait(struct comm *c, struct comm_request *r)
{
	struct local *l = to_local(c);
	struct comm_local_world *w = l->w;
	struct rv *rv = r->rv;
	int me = r->me, n = rv->n;
	int left = (me + n - 1) % n, right = (me + 1) % n;
	uint64_t seq = r->seq;
	struct shift_slot *mine = slot(rv, me, seq);
	struct timespec deadline = comm_deadline(w->timeout_ms);
	bool timed_out = false;
	char buf[512];
	struct msg m = { buf, sizeof buf, 0 };
	int st = COMM_OK;

	pthread_mutex_lock(&w->mu);
	set_where(w, c->rank, W_IN, rv, mine->op, mine->what);
	for (;;) {
		if (w->aborted) {
			st = failed(l);
			break;
		}
		bool in_ready = started(rv, left, seq), out_ready = started(rv, right, seq);
		if (in_ready && mine->in == EDGE_OPEN) {
			if (!copy_edge(w, rv, left, me, seq)) {
				st = failed(l);
				break;
			}
			continue;
		}
		if (out_ready && edge_into(rv, right, seq) == EDGE_OPEN) {
			if (!copy_edge(w, rv, me, right, seq)) {
				st = failed(l);
				break;
			}
			continue;
		}
		if (mine->in == EDGE_DONE && out_ready && edge_into(rv, right, seq) == EDGE_DONE)
			break;
		if (in_ready && out_ready) {
			/* a neighbour is copying: that ends without a deadline */
			pthread_cond_wait(&rv->cv, &w->mu);
			continue;
		}
		int gone = -1;
		if (!in_ready && w->ranks[rv->ranks[left]].where == W_GONE)
			gone = left;
		else if (!out_ready && w->ranks[rv->ranks[right]].where == W_GONE)
			gone = right;
		if (gone >= 0 || timed_out) {
			if (gone >= 0)
				msg_add(&m, "rank %d freed its comm without starting op %u (%s) of group %s",
					rv->ranks[gone], mine->op, mine->what, rv->name);
			else
				msg_add(&m, "rank %d: timed out after %g s in op %u (%s) of group %s:",
					c->rank, w->timeout_ms / 1000.0, mine->op, mine->what,
					rv->name);
			const char *sep = " ";
			for (int k = 0; gone < 0 && k < 2; k++) {
				int i = k ? right : left;
				if (started(rv, i, seq) || (k && left == right))
					continue;
				msg_add(&m, "%srank %d did not start it (", sep, rv->ranks[i]);
				describe(&m, w, rv->ranks[i]);
				msg_add(&m, ")");
				sep = "; ";
			}
			abort_world(w, "%s", buf);
			st = failed(l);
			break;
		}
		timed_out = pthread_cond_timedwait(&rv->cv, &w->mu, &deadline) == ETIMEDOUT;
	}
	/* Leaving: no neighbour may still be copying into or out of my buffers.
	 * After an abort nobody starts a copy, so this wait ends. */
	while (mine->in == EDGE_COPYING ||
	       (started(rv, right, seq) && edge_into(rv, right, seq) == EDGE_COPYING))
		pthread_cond_wait(&rv->cv, &w->mu);
	mine->busy = false;
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
	failed(l);
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
	.shift_start = local_shift_start,
	.shift_wait = local_shift_wait,
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

void comm_local_world_free(struct comm_local_world *w)
{
	if (!w)
		return;
	for (struct rv *rv = w->rvs, *next; rv; rv = next) {
		next = rv->next;
		pthread_cond_destroy(&rv->cv);
		free(rv->ranks);
		free(rv->m);
		free(rv);
	}
	pthread_mutex_destroy(&w->mu);
	free(w->ranks);
	free(w);
}
