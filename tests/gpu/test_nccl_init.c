/* test_nccl_init.c — the nccl backend started without MPI, the way torchrun
 * starts it (dtpc_nccl_unique_id and dtpc_comm_nccl_init, dtpc.h):
 *
 *   build/tests/gpu/test_nccl_init [N]        # N ranks (default 1), one GPU each
 *
 * N processes are forked here, each with its own LOCAL_RANK (the variable
 * torchrun sets, which picks the rank's GPU). Rank 0 makes the NCCL unique
 * id and hands the bytes to the others through pipes, as a launcher's store
 * would; each rank makes its communicator from them, checks its rank, world
 * and GPU, and all-reduces a vector of floats in device memory: the sum of
 * every rank's pattern, checked on every rank against a float64 sum (and,
 * the control, against the sum without rank 0's terms, which must differ).
 * Prints TAP from the parent: a line per rank. Exit: 0, 1 on a failure, 77
 * (skip) without NCCL, without a CUDA device or with fewer GPUs than ranks. */
#include <stdio.h>

#ifdef DTPC_HAVE_NCCL
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "runtime/comm.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/dtpc.h"
#include "tests/unit/unit.h"

enum { MAXR = 16, COUNT = 4099, TIMEOUT_MS = 60000, SKIP = 77 };

static float pattern(int rank, size_t i)
{
	return (float)((double)((i * 7 + (size_t)rank * 13) % 101) / 50.0 - 1.0);
}

/* One rank, in its own process: 0 passed, 1 failed, SKIP; why says what. */
static int rank_main(int rank, int world, int id_in, const int *id_out, char *why, size_t len)
{
	char env[16];
	snprintf(env, sizeof env, "%d", rank);
	setenv("LOCAL_RANK", env, 1);
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < world) {
		snprintf(why, len, "%d GPUs for %d ranks", ndev, world);
		return SKIP; /* rank 0 then writes no id: the others read none and skip too */
	}
	unsigned char id[DTPC_NCCL_UNIQUE_ID_BYTES];
	if (rank == 0) {
		if (nccl_unique_id(id)) {
			snprintf(why, len, "%s", g_error()->msg);
			return 1;
		}
		for (int r = 1; r < world; r++)
			if (write(id_out[r], id, sizeof id) != (ssize_t)sizeof id) {
				snprintf(why, len, "writing the id to rank %d", r);
				return 1;
			}
	} else if (read(id_in, id, sizeof id) != (ssize_t)sizeof id) {
		snprintf(why, len, "rank 0 sent no id");
		return SKIP;
	}
	struct comm *c = nccl_comm_init(id, rank, world, TIMEOUT_MS);
	if (!c) {
		snprintf(why, len, "%s", g_error()->msg);
		return 1;
	}
	int status = 1;
	float *h = malloc(COUNT * sizeof *h), *d = NULL;
	if (c->rank != rank || c->world != world || c->device != rank % ndev) {
		snprintf(why, len, "rank %d of %d on GPU %d, not %d of %d on GPU %d", c->rank, c->world,
			 c->device, rank, world, rank % ndev);
		goto out;
	}
	for (size_t i = 0; i < COUNT; i++)
		h[i] = pattern(rank, i);
	if (cudaMalloc((void **)&d, COUNT * sizeof *d) != cudaSuccess ||
	    cudaMemcpy(d, h, COUNT * sizeof *h, cudaMemcpyHostToDevice) != cudaSuccess) {
		snprintf(why, len, "device buffer: %s", cudaGetErrorString(cudaGetLastError()));
		goto out;
	}
	int ranks[MAXR];
	struct comm_group g = comm_world_group(c, ranks);
	int st = c->ops->allreduce_f32(c, &g, (struct comm_tag){ 1, "all_reduce x" }, d, COUNT);
	if (!st)
		st = comm_complete(c);
	if (st || cudaMemcpy(h, d, COUNT * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess) {
		snprintf(why, len, "all-reduce: %s", st ? g_error()->msg : "download failed");
		goto out;
	}
	long wrong = 0, control = 0;
	for (size_t i = 0; i < COUNT; i++) {
		double ref = 0, mag = 0;
		for (int m = 0; m < world; m++) {
			ref += pattern(m, i);
			mag += fabs(pattern(m, i));
		}
		double tol = (world - 1) * (double)FLT_EPSILON * mag;
		wrong += fabs(h[i] - ref) > tol;
		control += fabs(h[i] - (ref - pattern(0, i))) > tol;
	}
	if (wrong)
		snprintf(why, len, "%ld of %d sums wrong", wrong, COUNT);
	else if (control == 0)
		snprintf(why, len, "the control: sums without rank 0's terms pass too");
	else {
		snprintf(why, len, "rank %d of %d on GPU %d: %d sums right", rank, world, c->device, COUNT);
		status = 0;
	}
out:
	cudaFree(d);
	free(h);
	c->ops->free(c);
	return status;
}

int main(int argc, char **argv)
{
	int world = argc > 1 ? atoi(argv[1]) : 1;
	if (world < 1 || world > MAXR) {
		fprintf(stderr, "usage: test_nccl_init [RANKS: 1 to %d]\n", MAXR);
		return 2;
	}
	/* pipes[r]: rank 0 to rank r; results[r]: rank r's message to the parent */
	int pipes[MAXR][2], results[MAXR][2], out[MAXR];
	pid_t pid[MAXR];
	for (int r = 0; r < world; r++)
		if (pipe(pipes[r]) || pipe(results[r])) {
			perror("pipe");
			return 1;
		}
	for (int r = 0; r < world; r++)
		out[r] = pipes[r][1];
	fflush(stdout);
	for (int r = 0; r < world; r++) {
		pid[r] = fork();
		if (pid[r] < 0) {
			perror("fork");
			return 1;
		}
		if (pid[r] == 0) { /* no CUDA before here: the parent never touches it */
			char why[G_ERROR_MSG + 64] = "";
			for (int k = 0; k < world; k++)
				if (k != r)
					close(pipes[k][0]);
			if (r != 0)
				for (int k = 0; k < world; k++)
					close(pipes[k][1]);
			int status = rank_main(r, world, pipes[r][0], out, why, sizeof why);
			if (write(results[r][1], why, strlen(why) + 1) < 0)
				status = 1;
			_exit(status);
		}
	}
	for (int r = 0; r < world; r++)
		close(pipes[r][1]), close(pipes[r][0]), close(results[r][1]);
	int skipped = 0;
	for (int r = 0; r < world; r++) {
		char why[G_ERROR_MSG + 64] = "";
		ssize_t n = read(results[r][0], why, sizeof why - 1);
		why[n > 0 ? n : 0] = 0;
		int ws = 0;
		waitpid(pid[r], &ws, 0);
		int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
		if (code == SKIP) {
			skipped++;
			printf("# rank %d: %s\n", r, why);
		} else {
			UNIT_CHECK(code == 0, "rank %d: %s", r, why[0] ? why : "ended without a word");
		}
	}
	if (skipped == world) {
		printf("# SKIP no run: every rank skipped\n1..0\n");
		return SKIP;
	}
	UNIT_CHECK(skipped == 0, "every rank ran (%d skipped)", skipped);
	return unit_done();
}
#else
int main(void)
{
	printf("# SKIP built without NCCL\n1..0\n");
	return 77;
}
#endif
