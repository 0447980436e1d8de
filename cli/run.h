/* run.h — the `dtpc run` command. */
#ifndef DTPC_RUN_H
#define DTPC_RUN_H
#include <stdbool.h>
#include <stdint.h>

#include "runtime/dtpc.h"

enum run_backend { RUN_LOCAL, RUN_MPI, RUN_NCCL };

struct run_opts {
	const char *graph;
	int ranks;            /* local: ranks to start (default: the graph's world) */
	uint64_t seed;
	const char *weights;  /* safetensors, or NULL for seeded weights */
	const char *inputs;
	const char *save_outputs;
	const char *trace;
	bool verify;
	double tolerance;     /* --verify's bound on the max relative error */
	int steps;
	int threads;          /* CPU threads per rank (0: cores / ranks of the process) */
	int timeout_ms;
	enum run_backend backend;
	dtpc_device device;   /* where every rank computes (nccl: CUDA) */
	bool cuda_graph;      /* replay steps after the first as CUDA graphs */
	dtpc_dtype dtype;     /* storage dtype of every rank's session... */
	bool dtype_set;       /* ...where --dtype was given, else the graph's */
	bool tolerance_set;   /* --tolerance given (else 2e-2 for a 16-bit dtype) */
	bool progress;        /* rank 0 shows steps done and the time left (a terminal) */
	bool allow_seeded;    /* --save-outputs of seeded weights or inputs */
	bool allow_nonfinite; /* NaN or Inf in an output is no failure */
};

/* Exit statuses: 0 ok, 1 the run or the verification failed, 2 usage/I/O. */
int run_local(const struct run_opts *o);
/* One rank per process: MPI on the CPU, or NCCL (under mpirun or alone). */
int run_mpi(const struct run_opts *o);
#endif
