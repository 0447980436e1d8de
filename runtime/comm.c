/* comm.c — what the communication backends share: the world group, argument
 * checks, error text, deadlines. */
#include "runtime/comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct comm_group comm_world_group(struct comm *c, int *ranks_buf)
{
	for (int i = 0; i < c->world; i++)
		ranks_buf[i] = i;
	return (struct comm_group){ .id = -1, .n = c->world, .me = c->rank, .ranks = ranks_buf };
}

int comm_errorf(struct comm *c, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	g_vraise(status, c->rank, fmt, ap);
	va_end(ap);
	return status;
}

int comm_check_group(struct comm *c, const struct comm_group *g, const char *fn)
{
	if (!g || !g->ranks || g->n < 1 || g->n > c->world)
		return comm_errorf(c, COMM_INVALID, "%s: rank %d: malformed group", fn, c->rank);
	if (g->me < 0 || g->me >= g->n || g->ranks[g->me] != c->rank)
		return comm_errorf(c, COMM_INVALID,
				   "%s: rank %d is not member %d of group id %d", fn, c->rank,
				   g->me, g->id);
	for (int i = 0; i < g->n; i++)
		if (g->ranks[i] < 0 || g->ranks[i] >= c->world)
			return comm_errorf(c, COMM_INVALID,
					   "%s: group id %d names rank %d of a world of %d", fn,
					   g->id, g->ranks[i], c->world);
	return COMM_OK;
}

/* The bytes [lo, hi) of a buffer that counts/displs select; lo == hi when
 * they select nothing. */
static void span(const size_t *counts, const size_t *displs, int n, size_t *lo, size_t *hi)
{
	*lo = SIZE_MAX;
	*hi = 0;
	for (int i = 0; i < n; i++) {
		if (!counts[i])
			continue;
		if (displs[i] < *lo)
			*lo = displs[i];
		if (displs[i] + counts[i] > *hi)
			*hi = displs[i] + counts[i];
	}
	if (*lo > *hi)
		*lo = *hi;
}

static bool overlap(const void *a, size_t alen, const void *b, size_t blen)
{
	uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
	return alen && blen && pa < pb + blen && pb < pa + alen;
}

int comm_check_allgatherv(struct comm *c, const struct comm_group *g, const void *send,
			  const void *recv, const size_t *counts, const size_t *displs)
{
	int st = comm_check_group(c, g, "allgatherv");
	if (st)
		return st;
	const char *r = recv;
	if (send == r + displs[g->me])
		return COMM_OK;
	size_t lo, hi;
	span(counts, displs, g->n, &lo, &hi);
	if (overlap(send, counts[g->me], r + lo, hi - lo))
		return comm_errorf(c, COMM_INVALID,
				   "allgatherv: rank %d: send overlaps recv (and is not recv + displs[me])",
				   c->rank);
	return COMM_OK;
}

int comm_check_alltoallv(struct comm *c, const struct comm_group *g, const void *send,
			 const size_t *scounts, const size_t *sdispls, const void *recv,
			 const size_t *rcounts, const size_t *rdispls)
{
	int st = comm_check_group(c, g, "alltoallv");
	if (st)
		return st;
	size_t slo, shi, rlo, rhi;
	span(scounts, sdispls, g->n, &slo, &shi);
	span(rcounts, rdispls, g->n, &rlo, &rhi);
	if (overlap((const char *)send + slo, shi - slo, (const char *)recv + rlo, rhi - rlo))
		return comm_errorf(c, COMM_INVALID,
				   "alltoallv: rank %d: send overlaps recv (peers read send while recv fills)",
				   c->rank);
	return COMM_OK;
}

int comm_check_reduce_scatter(struct comm *c, const struct comm_group *g, const float *send,
			      const float *recv, const size_t *counts, size_t *total)
{
	int st = comm_check_group(c, g, "reduce_scatter_f32");
	if (st)
		return st;
	size_t n = 0;
	for (int i = 0; i < g->n; i++) {
		if (counts[i] > SIZE_MAX / sizeof(float) - n)
			return comm_errorf(c, COMM_INVALID,
					   "reduce_scatter_f32: rank %d: the pieces' counts overflow at piece %d",
					   c->rank, i);
		n += counts[i];
	}
	if ((n && !send) || (counts[g->me] && !recv))
		return comm_errorf(c, COMM_INVALID, "reduce_scatter_f32: rank %d: NULL buffer", c->rank);
	if (overlap(send, n * sizeof *send, recv, counts[g->me] * sizeof *recv))
		return comm_errorf(c, COMM_INVALID,
				   "reduce_scatter_f32: rank %d: send overlaps recv (peers read send while recv fills)",
				   c->rank);
	*total = n;
	return COMM_OK;
}

/* One side of an exchange: peers in range and none twice. */
static int check_side(struct comm *c, const struct comm_group *g, const struct comm_p2p *m, int k,
		      const char *side)
{
	if (k < 0 || (k && !m))
		return comm_errorf(c, COMM_INVALID, "exchange: rank %d: %d %s at %p", c->rank, k,
				   side, (const void *)m);
	for (int i = 0; i < k; i++) {
		if (m[i].peer < 0 || m[i].peer >= g->n)
			return comm_errorf(c, COMM_INVALID,
					   "exchange: rank %d: %s %d names member %d of group id %d of %d members",
					   c->rank, side, i, m[i].peer, g->id, g->n);
		if (m[i].bytes && !m[i].buf)
			return comm_errorf(c, COMM_INVALID, "exchange: rank %d: %s %d: NULL buffer of %zu bytes",
					   c->rank, side, i, m[i].bytes);
		for (int j = 0; j < i; j++)
			if (m[j].peer == m[i].peer)
				return comm_errorf(c, COMM_INVALID,
						   "exchange: rank %d: %s %d and %d both name member %d",
						   c->rank, side, j, i, m[i].peer);
	}
	return COMM_OK;
}

int comm_check_exchange(struct comm *c, const struct comm_group *g, const struct comm_p2p *sends,
			int nsend, const struct comm_p2p *recvs, int nrecv)
{
	int st = comm_check_group(c, g, "exchange");
	if (st || (st = check_side(c, g, sends, nsend, "send")) ||
	    (st = check_side(c, g, recvs, nrecv, "recv")))
		return st;
	/* a receive is written while the other buffers are read or written */
	for (int i = 0; i < nrecv; i++) {
		for (int j = 0; j < i; j++)
			if (overlap(recvs[i].buf, recvs[i].bytes, recvs[j].buf, recvs[j].bytes))
				return comm_errorf(c, COMM_INVALID,
						   "exchange: rank %d: recvs from members %d and %d overlap",
						   c->rank, recvs[j].peer, recvs[i].peer);
		for (int j = 0; j < nsend; j++)
			if (overlap(recvs[i].buf, recvs[i].bytes, sends[j].buf, sends[j].bytes))
				return comm_errorf(c, COMM_INVALID,
						   "exchange: rank %d: the recv from member %d overlaps the send to member %d",
						   c->rank, recvs[i].peer, sends[j].peer);
	}
	/* the pair with myself is complete here, so it is checked here */
	const struct comm_p2p *out = NULL, *in = NULL;
	for (int i = 0; i < nsend; i++)
		out = sends[i].peer == g->me ? &sends[i] : out;
	for (int i = 0; i < nrecv; i++)
		in = recvs[i].peer == g->me ? &recvs[i] : in;
	if ((out != NULL) != (in != NULL))
		return comm_errorf(c, COMM_INVALID,
				   "exchange: rank %d (member %d) %s itself without %s itself in the same exchange",
				   c->rank, g->me, out ? "sends to" : "receives from",
				   out ? "receiving from" : "sending to");
	if (out && out->bytes != in->bytes)
		return comm_errorf(c, COMM_INVALID,
				   "exchange: rank %d sends itself %zu bytes but expects %zu", c->rank,
				   out->bytes, in->bytes);
	return COMM_OK;
}

int comm_shift_start(struct comm *c, const struct comm_group *g, struct comm_tag t,
		     const void *send, size_t sbytes, void *recv, size_t rbytes,
		     struct comm_request **req)
{
	int st = comm_check_group(c, g, "shift");
	if (st)
		return st;
	struct comm_p2p out = { (g->me + 1) % g->n, (void *)send, sbytes };
	struct comm_p2p in = { (g->me + g->n - 1) % g->n, recv, rbytes };
	return c->ops->exchange_start(c, g, t, &out, 1, &in, 1, req);
}

int comm_complete(struct comm *c)
{
	return c->ops->complete ? c->ops->complete(c) : COMM_OK;
}

const char *comm_what(struct comm_tag t)
{
	return t.what ? t.what : "";
}

char *comm_ranks_str(const int *ranks, int n, char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = 0;
	for (int i = 0; i < n; i++) {
		char item[16];
		int k = snprintf(item, sizeof item, "%s%d", i ? " " : "[", ranks[i]);
		/* keep room for " ...]" and the NUL */
		if (at + (size_t)k + 6 > len) {
			snprintf(buf + at, len - at, "%s", i ? " ...]" : "[...]");
			return buf;
		}
		memcpy(buf + at, item, (size_t)k + 1);
		at += (size_t)k;
	}
	snprintf(buf + at, len - at, "%s", n ? "]" : "[]");
	return buf;
}

struct timespec comm_deadline(int ms)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_sec += ms / 1000;
	t.tv_nsec += (long)(ms % 1000) * 1000000;
	if (t.tv_nsec >= 1000000000) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000;
	}
	return t;
}

bool comm_past(const struct timespec *deadline)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec > deadline->tv_sec ||
	       (t.tv_sec == deadline->tv_sec && t.tv_nsec >= deadline->tv_nsec);
}
