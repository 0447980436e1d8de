/* local_ranks.h — a test's ranks as threads of one local world (the C unit
 * and GPU tests that run sessions on N ranks). Everything is static: each
 * test is its own program. */
#ifndef DTPC_TESTS_LOCAL_RANKS_H
#define DTPC_TESTS_LOCAL_RANKS_H
#include <pthread.h>
#include <stddef.h>

#include "runtime/dtpc.h"

/* The first member of a test's job: its world and rank, set by local_ranks. */
struct local_rank {
	dtpc_local_world *w;
	int rank;
};

enum { LOCAL_RANKS_MAX = 16 };

/* Runs body on each of jobs[0..n) (an array of the test's job structs,
 * job_size bytes apart, each beginning with a struct local_rank) as a rank
 * of a fresh local world of n ranks, joins them and frees the world. */
static inline void local_ranks(int n, int timeout_ms, void *(*body)(void *), void *jobs,
			       size_t job_size)
{
	dtpc_local_world *w = NULL;
	pthread_t th[LOCAL_RANKS_MAX];
	dtpc_local_world_create(n, timeout_ms, &w);
	for (int r = 0; r < n && r < LOCAL_RANKS_MAX; r++) {
		struct local_rank *at = (struct local_rank *)((char *)jobs + (size_t)r * job_size);
		at->w = w;
		at->rank = r;
		pthread_create(&th[r], NULL, body, at);
	}
	for (int r = 0; r < n && r < LOCAL_RANKS_MAX; r++)
		pthread_join(th[r], NULL);
	dtpc_local_world_free(w);
}
#endif
