/* embed.c — a program that carries a compiled graph inside itself and runs
 * it on 4 ranks (threads), the way a deployment embeds libdtpc.
 *
 * Built by `make` (build/examples/embed): the tiny DiT compiled for
 * ulysses = 2 x tp = 2 is linked in as data by `dtpc embed`, which defines
 * the two symbols below. Only the public API (runtime/dtpc.h) is used.
 * Weights and inputs come from a seed here; a deployment would call
 * dtpc_session_bind_weights_file with its checkpoint. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/dtpc.h"

extern const unsigned char dtpc_embedded_graph[];
extern const size_t dtpc_embedded_graph_size;

struct rank {
	const dtpc_graph *graph;
	dtpc_local_world *world;
	int id;
	dtpc_status st;
	double checksum; /* of rank 0's first output */
};

static void *run_rank(void *arg)
{
	struct rank *r = arg;
	dtpc_comm *comm = NULL;
	dtpc_session *s = NULL;
	if ((r->st = dtpc_comm_local(r->world, r->id, &comm)) ||
	    (r->st = dtpc_session_create(r->graph, comm, DTPC_DEVICE_CPU, &s)) ||
	    (r->st = dtpc_session_bind_weights_seed(s, 42)) ||
	    (r->st = dtpc_session_bind_inputs_seed(s, 42)) ||
	    (r->st = dtpc_session_run(s))) {
		fprintf(stderr, "rank %d: %s: %s\n", r->id, dtpc_status_str(r->st), dtpc_last_error());
	} else {
		const char *name;
		const float *data;
		const int64_t *shape;
		int nd;
		dtpc_session_output(s, 0, &name, &data, &shape, &nd);
		int64_t n = 1;
		for (int d = 0; d < nd; d++)
			n *= shape[d];
		for (int64_t i = 0; i < n; i++)
			r->checksum += data[i];
		if (r->id == 0)
			printf("rank 0: output '%s' has %lld elements, sum %.6f\n", name, (long long)n,
			       r->checksum);
	}
	dtpc_session_free(s);
	dtpc_comm_free(comm);
	return NULL;
}

int main(void)
{
	dtpc_graph *g = NULL;
	size_t len = dtpc_embedded_graph_size;
	if (dtpc_graph_open_buffer(dtpc_embedded_graph, len, &g)) {
		fprintf(stderr, "embedded graph: %s\n", dtpc_last_error());
		return 1;
	}
	int n = dtpc_graph_world(g);
	printf("embedded graph: %zu bytes (hash %016llx), plan %s, mesh %s, %d ranks\n", len,
	       (unsigned long long)dtpc_graph_hash(g), dtpc_graph_meta(g, "plan"),
	       dtpc_graph_meta(g, "mesh"), n);
	dtpc_local_world *w = NULL;
	if (dtpc_local_world_create(n, 30000, &w)) {
		fprintf(stderr, "%s\n", dtpc_last_error());
		return 1;
	}
	struct rank *ranks = calloc((size_t)n, sizeof *ranks);
	pthread_t *th = calloc((size_t)n, sizeof *th);
	for (int i = 0; i < n; i++) {
		ranks[i] = (struct rank){ .graph = g, .world = w, .id = i };
		pthread_create(&th[i], NULL, run_rank, &ranks[i]);
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		rc |= ranks[i].st != DTPC_OK;
		/* outputs are whole on every rank: all must agree */
		if (!ranks[i].st && ranks[i].checksum != ranks[0].checksum)
			rc = 1;
	}
	printf("%s\n", rc ? "FAILED" : "all ranks agree");
	dtpc_local_world_free(w);
	dtpc_graph_free(g);
	free(ranks);
	free(th);
	return rc;
}
