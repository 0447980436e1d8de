/* test_abort.c — dtpc_local_world_abort, through the public API on the tiny
 * DiT compiled in-process (run from the repository root): a rank blocked in
 * a collective (the session handshake, then a run's first collective) whose
 * peer never comes returns DTPC_ERR_COMM with the abort's message promptly
 * after another thread aborts the world, though the world's timeout is 20 s;
 * the controls: before the abort the rank is still waiting, and a peer that
 * calls after the abort fails at once. A second abort changes nothing, and
 * everything is freed as usual afterwards. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compiler/driver.h"
#include "runtime/dtpc.h"
#include "tests/unit/unit.h"

enum { TIMEOUT_MS = 20000, WAIT_MS = 300 };
static const double PROMPT_S = 2.0; /* far inside the 20 s timeout */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static dtpc_graph *compile(const char *mesh)
{
	struct override d = { .name = "seq", .from_cli = true };
	d.val.kind = VAL_INT;
	d.val.i = 16;
	size_t len = 0;
	void *buf = driver_graph_buffer("examples/tiny_dit.plan", "tiny_dit_8", mesh, NULL, &d, 1,
					NULL, false, &len, NULL, stderr);
	dtpc_graph *g = NULL;
	if (buf && dtpc_graph_open_buffer(buf, len, &g))
		g = NULL;
	free(buf);
	return g;
}

/* What one rank does: create its session; with `run`, bind and run. */
struct rank {
	const dtpc_graph *g;
	dtpc_comm *c;
	dtpc_session *s;
	bool run;
	dtpc_status st;
	char error[1024];
	atomic_int done;
	double t_done;
};

static void *rank_main(void *arg)
{
	struct rank *r = arg;
	r->st = dtpc_session_create(r->g, r->c, DTPC_DEVICE_CPU, &r->s);
	if (!r->st && r->run) {
		r->st = dtpc_session_bind_weights_seed(r->s, 1);
		if (!r->st)
			r->st = dtpc_session_bind_inputs_seed(r->s, 1);
		if (!r->st)
			r->st = dtpc_session_run(r->s);
	}
	if (r->st)
		snprintf(r->error, sizeof r->error, "%s", dtpc_last_error());
	r->t_done = now();
	atomic_store(&r->done, 1);
	return NULL;
}

static bool has(const char *s, const char *word)
{
	return strstr(s, word) != NULL;
}

/* Rank 0 waits in the handshake for rank 1, which never creates its session. */
static void handshake(const dtpc_graph *g)
{
	dtpc_local_world *w = NULL;
	dtpc_comm *c0 = NULL, *c1 = NULL;
	if (dtpc_local_world_create(2, TIMEOUT_MS, &w) || dtpc_comm_local(w, 0, &c0) ||
	    dtpc_comm_local(w, 1, &c1)) {
		UNIT_CHECK(0, "handshake: world created (%s)", dtpc_last_error());
		return;
	}
	struct rank r0 = { .g = g, .c = c0 };
	pthread_t th;
	pthread_create(&th, NULL, rank_main, &r0);
	usleep(WAIT_MS * 1000);
	UNIT_CHECK(!atomic_load(&r0.done), "handshake: before the abort rank 0 still waits");
	double t0 = now();
	dtpc_local_world_abort(w, "interrupted (test)");
	dtpc_local_world_abort(w, "a second abort"); /* the first message wins */
	pthread_join(th, NULL);
	double dt = r0.t_done - t0;
	UNIT_CHECK(r0.st == DTPC_ERR_COMM && dt < PROMPT_S,
		   "handshake: DTPC_ERR_COMM %.3f s after the abort (status %d)", dt, r0.st);
	UNIT_CHECK(has(r0.error, "the local world was aborted: interrupted (test)") &&
			   !has(r0.error, "second"),
		   "handshake: the abort's message: %s", r0.error);
	/* rank 1 comes after the abort: it fails at once */
	struct rank r1 = { .g = g, .c = c1 };
	t0 = now();
	rank_main(&r1);
	UNIT_CHECK(r1.st == DTPC_ERR_COMM && r1.t_done - t0 < PROMPT_S &&
			   has(r1.error, "aborted: interrupted (test)"),
		   "handshake: a rank calling after the abort fails at once (%d: %s)", r1.st,
		   r1.error);
	dtpc_session_free(r0.s);
	dtpc_session_free(r1.s);
	dtpc_comm_free(c0);
	dtpc_comm_free(c1);
	dtpc_local_world_free(w);
}

/* Both ranks have sessions; rank 0 runs, rank 1 does not: rank 0 waits in
 * its run's first collective. */
static void in_run(const dtpc_graph *g)
{
	dtpc_local_world *w = NULL;
	dtpc_comm *c[2] = { NULL, NULL };
	if (dtpc_local_world_create(2, TIMEOUT_MS, &w) || dtpc_comm_local(w, 0, &c[0]) ||
	    dtpc_comm_local(w, 1, &c[1])) {
		UNIT_CHECK(0, "run: world created (%s)", dtpc_last_error());
		return;
	}
	struct rank r[2] = { { .g = g, .c = c[0], .run = true }, { .g = g, .c = c[1] } };
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, rank_main, &r[i]);
	pthread_join(th[1], NULL); /* rank 1: its session, then nothing */
	UNIT_CHECK(r[1].st == DTPC_OK, "run: both sessions created (%s)", r[1].error);
	usleep(WAIT_MS * 1000);
	UNIT_CHECK(!atomic_load(&r[0].done), "run: before the abort rank 0 still waits in its run");
	double t0 = now();
	dtpc_local_world_abort(w, NULL);
	pthread_join(th[0], NULL);
	double dt = r[0].t_done - t0;
	UNIT_CHECK(r[0].st == DTPC_ERR_COMM && dt < PROMPT_S,
		   "run: DTPC_ERR_COMM %.3f s after the abort (status %d)", dt, r[0].st);
	UNIT_CHECK(has(r[0].error, "the local world was aborted: by its owner"),
		   "run: the abort's message: %s", r[0].error);
	/* the sessions stay freeable, and rank 1's run fails at once */
	dtpc_status st = dtpc_session_bind_weights_seed(r[1].s, 1);
	if (!st)
		st = dtpc_session_bind_inputs_seed(r[1].s, 1);
	if (!st) {
		t0 = now();
		st = dtpc_session_run(r[1].s);
		dt = now() - t0;
	}
	UNIT_CHECK(st == DTPC_ERR_COMM && dt < PROMPT_S,
		   "run: rank 1's run after the abort fails at once (%d, %.3f s)", st, dt);
	for (int i = 0; i < 2; i++) {
		dtpc_session_free(r[i].s);
		dtpc_comm_free(c[i]);
	}
	dtpc_local_world_free(w);
}

int main(void)
{
	/* ulysses = 2: the run's first collective is an all-to-all between the ranks */
	dtpc_graph *g = compile("ulysses = 2");
	UNIT_CHECK(g != NULL, "the tiny DiT on ulysses = 2 compiles");
	if (g) {
		handshake(g);
		in_run(g);
	}
	dtpc_local_world_abort(NULL, "nothing"); /* NULL: no-op */
	UNIT_CHECK(1, "abort of NULL is a no-op");
	dtpc_graph_free(g);
	return unit_done();
}
