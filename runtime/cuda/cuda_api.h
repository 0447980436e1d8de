/* cuda_api.h — what libdtpc_cuda.so offers the runtime.
 *
 * The CUDA device and the nccl backend live in a library of their own,
 * opened by runtime/cuda_load.c the first time a session asks for a GPU: a
 * program that computes on the CPU (every `dtpc check`, the CPU runtime)
 * never maps cuBLASLt, cuDNN and NCCL, which cost a start-up of 0.4 s. The
 * library exports this one table. Its functions fail as the runtime's do:
 * false, NULL or a status, with the failure raised (graph/error.h). */
#ifndef DTPC_CUDA_API_H
#define DTPC_CUDA_API_H
#include <stddef.h>
#include <stdint.h>

struct dev;
struct comm;
struct g_error;

/* Raised whenever the table changes, so a stale library is refused. */
#define DTPC_CUDA_API_VERSION 4u

struct dtpc_cuda_api {
	uint32_t version;
	struct dev *(*dev_create)(int ordinal);
	int (*dev_count)(void);
	/* these three NULL when the library was built without NCCL */
	struct comm *(*nccl_create)(int timeout_ms);
	/* dtpc_nccl_unique_id, dtpc_comm_nccl_init: runtime/comm.h's
	 * comm_nccl_unique_id and comm_nccl_init */
	int (*nccl_unique_id)(void *out);
	struct comm *(*nccl_init)(const void *id, int rank, int world, int timeout_ms);
	/* Called once, first: the library raises into the loader's error
	 * record from then on (graph/error.h's g_error_share), so that its
	 * failures reach dtpc_last_error(). */
	void (*share_errors)(struct g_error *(*record)(void));
};

/* The implementations (device_cuda.c, comm_nccl.c); the GPU tests call them
 * directly. */
struct dev *cuda_dev_create(int ordinal);
int cuda_dev_count(void);
struct comm *nccl_comm_create(int timeout_ms);
int nccl_unique_id(void *out);
struct comm *nccl_comm_init(const void *id, int rank, int world, int timeout_ms);
#endif
