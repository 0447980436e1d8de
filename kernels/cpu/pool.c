/* pool.c — the small thread pool a CPU device runs its kernels on (see
 * kernels.h).
 *
 * One job at a time: the caller publishes (fn, arg, ntasks), wakes the
 * workers, takes tasks itself from the same atomic counter, then waits until
 * every worker has left the job. Tasks are claimed one by one so uneven
 * tasks (a short last query block) balance themselves.
 *
 * Between jobs a worker polls for the next one for SPIN_NS, and the caller
 * polls for the end of its job as long, before either sleeps on a condition
 * variable. A step is hundreds of jobs a few microseconds apart, and on a
 * virtual machine waking a sleeping thread costs tens of microseconds (the
 * idle vCPU has halted: the host must run it again), paid twice a job (the
 * workers' wake-up, then the caller's when the last worker finishes after
 * it): a 2-task job of 12 us each took 31 us on two threads against 23 us
 * on one (docs/performance.md). The poll is bounded so a rank waiting in a
 * collective, or between steps, still leaves the core to others after it. */
#include "kernels/cpu/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* How long a thread polls before it sleeps: about one wake-up's cost. */
#define SPIN_NS 100000

struct k_pool {
	int n; /* threads that run a job, the caller included */
	pthread_t *th;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	/* Written under mu (so a worker that checks them under mu before it
	 * sleeps cannot miss a change), read without it while polling. */
	atomic_ulong gen; /* bumped per job; workers wait for a new one */
	atomic_int busy;  /* workers not yet finished with the current job */
	atomic_bool stop;
	void (*fn)(void *arg, int64_t task, int worker);
	void *arg;
	int64_t ntasks;
	atomic_llong next; /* the next unclaimed task */
};

struct worker_arg {
	struct k_pool *p;
	int id;
};

static void take_tasks(struct k_pool *p, int worker)
{
	for (;;) {
		int64_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);

		if (t >= p->ntasks)
			return;
		p->fn(p->arg, t, worker);
	}
}

static bool job_posted(struct k_pool *p, unsigned long seen)
{
	return atomic_load_explicit(&p->stop, memory_order_acquire) ||
	       atomic_load_explicit(&p->gen, memory_order_acquire) != seen;
}

static bool job_done(struct k_pool *p, unsigned long unused)
{
	return atomic_load_explicit(&p->busy, memory_order_acquire) == 0;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Polls ready(p, arg) for up to SPIN_NS; false if it did not turn true. */
static bool poll_for(bool (*ready)(struct k_pool *, unsigned long), struct k_pool *p,
		     unsigned long arg)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 1;; i++) {
		if (ready(p, arg))
			return true;
		cpu_relax();
		if (i % 64 == 0) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) >= SPIN_NS)
				return false;
		}
	}
}

/* Polls, then sleeps on cond until ready(p, arg). */
static void wait_for(bool (*ready)(struct k_pool *, unsigned long), struct k_pool *p,
		     unsigned long arg, pthread_cond_t *cond)
{
	if (poll_for(ready, p, arg))
		return;
	pthread_mutex_lock(&p->mu);
	while (!ready(p, arg))
		pthread_cond_wait(cond, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

static void *worker_main(void *v)
{
	struct worker_arg wa = *(struct worker_arg *)v;
	struct k_pool *p = wa.p;
	unsigned long seen = 0;

	free(v);
	for (;;) {
		wait_for(job_posted, p, seen, &p->go);
		if (atomic_load_explicit(&p->stop, memory_order_acquire))
			break;
		seen = atomic_load_explicit(&p->gen, memory_order_acquire);
		take_tasks(p, wa.id);
		if (atomic_fetch_sub_explicit(&p->busy, 1, memory_order_acq_rel) == 1) {
			/* under mu: the caller may be between its check and its sleep */
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done);
			pthread_mutex_unlock(&p->mu);
		}
	}
	return NULL;
}

struct k_pool *k_pool_create(int n)
{
	struct k_pool *p = calloc(1, sizeof *p);

	if (!p)
		return NULL;
	p->n = n < 1 ? 1 : n;
	p->th = calloc((size_t)p->n, sizeof *p->th);
	if (!p->th) {
		free(p);
		return NULL;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	atomic_init(&p->gen, 0);
	atomic_init(&p->busy, 0);
	atomic_init(&p->stop, false);
	atomic_init(&p->next, 0);
	/* Worker 0 is the calling thread; a worker that cannot start only
	 * makes the pool smaller. */
	for (int i = 1; i < p->n; i++) {
		struct worker_arg *wa = malloc(sizeof *wa);

		if (wa)
			*wa = (struct worker_arg){ p, i };
		if (!wa || pthread_create(&p->th[i], NULL, worker_main, wa)) {
			free(wa);
			p->n = i;
			break;
		}
	}
	return p;
}

void k_pool_free(struct k_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	atomic_store_explicit(&p->stop, true, memory_order_release);
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->th[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p->th);
	free(p);
}

int k_pool_threads(const struct k_pool *p)
{
	return p ? p->n : 1;
}

void k_pool_run(struct k_pool *p, int64_t ntasks, void (*fn)(void *arg, int64_t task, int worker),
		void *arg)
{
	if (!p || p->n == 1 || ntasks <= 1) {
		for (int64_t t = 0; t < ntasks; t++)
			fn(arg, t, 0);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->ntasks = ntasks;
	atomic_store_explicit(&p->next, 0, memory_order_relaxed);
	atomic_store_explicit(&p->busy, p->n - 1, memory_order_relaxed);
	/* release: a polling worker that sees the new gen sees the job too */
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	take_tasks(p, 0);
	wait_for(job_done, p, 0, &p->done);
}
