/* pool.c — the small thread pool a CPU device runs its kernels on (see
 * kernels.h).
 *
 * One job at a time: the caller publishes (fn, arg, ntasks), wakes the
 * workers, takes tasks itself from the same atomic counter, then waits until
 * every worker has left the job. Tasks are claimed one by one so uneven
 * tasks (a short last query block) balance themselves.
 *
 * Waiting, for a job (a worker) or for the workers (the caller), first
 * spins up to SPIN_US on the atomic it waits for, then sleeps on a
 * condition variable, so idle ranks leave the cores to the ones that work.
 * A wake-up through the kernel took 50-60 us a job on a 2-vCPU KVM guest
 * (two 0.5 us tasks: 54 us; two 563 us tasks: 626 us), against a mid Flux
 * step's 250-odd jobs: 5 % of its two-thread step. The spin is left out
 * while the pools of the process hold more threads than there are cores,
 * where a spinning thread would hold a core that another one needs. */
#include "kernels/cpu/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define SPIN_US 100

struct k_pool {
	int n; /* threads that run a job, the caller included */
	pthread_t *th;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	atomic_ulong gen;  /* bumped per job; workers wait for a new one */
	atomic_int busy;   /* workers not yet finished with the current job */
	bool stop;
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

/* Threads of every pool alive in the process, callers included, and the
 * cores (asked once: sysconf reads a file each time). */
static atomic_int pool_threads, cores;

static bool may_spin(void)
{
	return atomic_load_explicit(&pool_threads, memory_order_relaxed) <=
	       atomic_load_explicit(&cores, memory_order_relaxed);
}

/* Spins while *gen == seen (or *busy != 0 when gen is NULL), up to SPIN_US;
 * whether the wait ended. Acquire: what the job's publisher (or the last
 * worker) wrote before the store is visible after it. */
static bool spin(const atomic_ulong *gen, unsigned long seen, const atomic_int *busy)
{
	struct timespec t0, t;

	if (!may_spin())
		return false;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 1;; i++) {
		if (gen ? atomic_load_explicit(gen, memory_order_acquire) != seen
			: atomic_load_explicit(busy, memory_order_acquire) == 0)
			return true;
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
		if (i % 64 == 0) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) >
			    SPIN_US * 1000L)
				return false;
		}
	}
}

static void *worker_main(void *v)
{
	struct worker_arg wa = *(struct worker_arg *)v;
	struct k_pool *p = wa.p;
	unsigned long seen = 0;

	free(v);
	for (;;) {
		if (!spin(&p->gen, seen, NULL)) {
			pthread_mutex_lock(&p->mu);
			while (!p->stop && atomic_load(&p->gen) == seen)
				pthread_cond_wait(&p->go, &p->mu);
			bool stop = p->stop;

			pthread_mutex_unlock(&p->mu);
			if (stop)
				break;
		}
		seen = atomic_load_explicit(&p->gen, memory_order_acquire);
		take_tasks(p, wa.id);
		/* the caller may be asleep on done: signalled under the mutex,
		 * after the count it checks before it sleeps */
		pthread_mutex_lock(&p->mu);
		if (atomic_fetch_sub_explicit(&p->busy, 1, memory_order_release) == 1)
			pthread_cond_signal(&p->done);
		pthread_mutex_unlock(&p->mu);
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
	atomic_init(&p->next, 0);
	atomic_init(&p->gen, 0);
	atomic_init(&p->busy, 0);
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
	if (!atomic_load(&cores)) {
		long online = sysconf(_SC_NPROCESSORS_ONLN);

		atomic_store(&cores, online < 1 ? 1 : online > 4096 ? 4096 : (int)online);
	}
	atomic_fetch_add(&pool_threads, p->n);
	return p;
}

void k_pool_free(struct k_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->th[i], NULL);
	atomic_fetch_sub(&pool_threads, p->n);
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
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	take_tasks(p, 0);
	if (spin(NULL, 0, &p->busy))
		return;
	pthread_mutex_lock(&p->mu);
	while (atomic_load_explicit(&p->busy, memory_order_acquire))
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}
