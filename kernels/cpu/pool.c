/* pool.c — the small thread pool a CPU device runs its kernels on (see
 * kernels.h).
 *
 * One job at a time: the caller publishes (fn, arg, ntasks), wakes the
 * workers, takes tasks itself from the same atomic counter, then waits until
 * every worker has left the job. Tasks are claimed one by one so uneven
 * tasks (a short last query block) balance themselves. Workers sleep on a
 * condition variable between jobs: the ops a pool runs take tens of
 * microseconds or more, so a wake-up costs little and idle ranks leave the
 * cores to the ones that work. */
#include "kernels/cpu/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct k_pool {
	int n; /* threads that run a job, the caller included */
	pthread_t *th;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	unsigned long gen; /* bumped per job; workers wait for a new one */
	int busy;          /* workers not yet finished with the current job */
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

static void *worker_main(void *v)
{
	struct worker_arg wa = *(struct worker_arg *)v;
	struct k_pool *p = wa.p;
	unsigned long seen = 0;

	free(v);
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->stop)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->mu);
		take_tasks(p, wa.id);
		pthread_mutex_lock(&p->mu);
		if (--p->busy == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
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
	p->stop = true;
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
	p->busy = p->n - 1;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	take_tasks(p, 0);
	pthread_mutex_lock(&p->mu);
	while (p->busy)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}
