/* cuda_api.c — the one symbol libdtpc_cuda.so exports (cuda_api.h). */
#include "runtime/cuda/cuda_api.h"

#include "graph/error.h"

__attribute__((visibility("default"))) const struct dtpc_cuda_api dtpc_cuda_api = {
	.version = DTPC_CUDA_API_VERSION,
	.dev_create = cuda_dev_create,
	.dev_count = cuda_dev_count,
	.share_errors = g_error_share,
#ifdef DTPC_HAVE_NCCL
	.nccl_create = nccl_comm_create,
	.nccl_unique_id = nccl_unique_id,
	.nccl_init = nccl_comm_init,
#endif
};
