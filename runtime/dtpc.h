/* dtpc.h — libdtpc, the runtime: load a compiled graph, and on each rank
 * bind weights and inputs, run, read the outputs.
 *
 * Every rank loads the same graph and creates one session with its
 * communicator; sessions check at creation that all ranks loaded the same
 * graph for the same world (a collective: every rank must create its
 * session). Errors return a status; dtpc_last_error() holds the message of
 * the calling thread's last failure and dtpc_last_error_rank() the rank it
 * is about (docs/architecture.md, "Errors").
 *
 * Ownership: objects are created by the ..._create and ..._open calls and
 * freed by the matching ..._free; data passed in is copied (the caller keeps ownership);
 * pointers handed out stay owned by the object and valid as stated. */
#ifndef DTPC_H
#define DTPC_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with -fvisibility=hidden: only what is marked
 * DTPC_API is exported from libdtpc.so. */
#if defined(__GNUC__)
#define DTPC_API __attribute__((visibility("default")))
#else
#define DTPC_API
#endif

typedef enum dtpc_status {
	DTPC_OK = 0,
	DTPC_ERR_INVALID,     /* a bad argument */
	DTPC_ERR_IO,          /* a file could not be read or written */
	DTPC_ERR_FORMAT,      /* a graph or checkpoint is malformed */
	DTPC_ERR_VERSION,     /* a graph from a newer, incompatible dtpc */
	DTPC_ERR_MISMATCH,    /* ranks disagree: graph, world size, rank number */
	DTPC_ERR_COMM,        /* a collective failed: timeout, dead or diverged rank */
	DTPC_ERR_BIND,        /* a weight or input is missing or has the wrong shape/dtype */
	DTPC_ERR_NOMEM,
	DTPC_ERR_STATE,       /* e.g. run before every weight was bound */
	DTPC_ERR_DEVICE,      /* the device failed: a kernel, a copy, device memory */
} dtpc_status;

/* A static string naming the status ("communication failed"). */
DTPC_API const char *dtpc_status_str(dtpc_status s);
/* The calling thread's last error message ("" if none), located by the
 * file, tensor, op or peer it concerns. Valid until the thread's next dtpc
 * call. */
DTPC_API const char *dtpc_last_error(void);
/* The rank that failure is about — the rank of the session or communicator
 * that raised it — or -1 where none is (a graph file, a bad argument, a
 * backend that did not start). The message does not repeat it: a program
 * that runs several ranks names it, as `dtpc run` does ("rank 2: ..."). */
DTPC_API int dtpc_last_error_rank(void);

/* ---- graphs --------------------------------------------------------------- */

typedef struct dtpc_graph dtpc_graph;

/* Maps and validates a .graph file. */
DTPC_API dtpc_status dtpc_graph_open_file(const char *path, dtpc_graph **out);
/* Validates a graph in memory; the bytes are copied. */
DTPC_API dtpc_status dtpc_graph_open_buffer(const void *buf, size_t len, dtpc_graph **out);
DTPC_API void dtpc_graph_free(dtpc_graph *g);
/* Ranks the graph was compiled for. */
DTPC_API int dtpc_graph_world(const dtpc_graph *g);
/* The graph's identity (its checksum), as compared in the handshake. */
DTPC_API uint64_t dtpc_graph_hash(const dtpc_graph *g);
/* Metadata by key ("plan", "model", "mesh", "param.seq", ...), or NULL.
 * Strings are owned by g; numbers are rendered as decimal text into a
 * per-thread buffer, valid until the thread's next metadata call. */
DTPC_API const char *dtpc_graph_meta(const dtpc_graph *g, const char *key);
/* The i-th metadata entry; 0 past the end. */
DTPC_API int dtpc_graph_meta_at(const dtpc_graph *g, int i, const char **key, const char **value);

/* ---- communicators ----------------------------------------------------------- */

typedef struct dtpc_comm dtpc_comm;
typedef struct dtpc_local_world dtpc_local_world;

/* N ranks as threads of this process: one world, then one comm per rank
 * (each used by one thread). timeout_ms bounds every wait (0: 120 s). */
DTPC_API dtpc_status dtpc_local_world_create(int nranks, int timeout_ms, dtpc_local_world **out);
DTPC_API dtpc_status dtpc_comm_local(dtpc_local_world *w, int rank, dtpc_comm **out);
/* Fails the world from outside its ranks (Ctrl-C in the thread that owns
 * them): every rank waiting in a collective of w — the handshake of
 * dtpc_session_create, a collective of dtpc_session_run — returns
 * DTPC_ERR_COMM at once, its dtpc_last_error() holding "the local world was
 * aborted: " and `why` (NULL or "": "by its owner"), and every later
 * collective on w fails the same way; a rank computing between two
 * collectives fails at its next one. As a timeout does, it is for good: the
 * ranks' sessions can be freed, not run again (a run returns DTPC_ERR_COMM).
 * Thread-safe, from any thread (not from a signal handler: it takes a
 * lock), any number of times (the first failure's message wins), from
 * dtpc_local_world_create until dtpc_local_world_free; it frees nothing:
 * each rank then frees its session and comm, and the world is freed last,
 * as always. */
DTPC_API void dtpc_local_world_abort(dtpc_local_world *w, const char *why);
/* Free every rank's comm before the world. */
DTPC_API void dtpc_local_world_free(dtpc_local_world *w);

/* This process's rank of an MPI job (MPI_Init on first use). */
DTPC_API dtpc_status dtpc_comm_mpi(int timeout_ms, dtpc_comm **out);

/* This process's rank of a job with one rank per GPU over NCCL: under
 * mpirun the world is MPI's (the NCCL id is broadcast over MPI), else one
 * rank. Sessions on it must use DTPC_DEVICE_CUDA. A collective that does not
 * finish within timeout_ms (0: 120 s) aborts the job's communicators. */
DTPC_API dtpc_status dtpc_comm_nccl(int timeout_ms, dtpc_comm **out);

/* The nccl backend without MPI, for launchers that start the processes and
 * carry data between them themselves (torchrun, with torch.distributed or
 * its store): rank 0 makes the job's NCCL unique id, the caller hands the
 * same bytes to every rank, and each rank creates its communicator from
 * them with its rank number and the world size. */
#define DTPC_NCCL_UNIQUE_ID_BYTES 128
/* Writes a fresh NCCL unique id (DTPC_NCCL_UNIQUE_ID_BYTES bytes) to out,
 * which holds len >= DTPC_NCCL_UNIQUE_ID_BYTES bytes. Call it on one rank
 * per job. DTPC_ERR_INVALID for a short buffer; DTPC_ERR_COMM where this
 * build has no nccl backend (no NCCL, no CUDA) or NCCL fails. */
DTPC_API dtpc_status dtpc_nccl_unique_id(void *out, size_t len);
/* This process's rank `rank` (0 <= rank < world) of the job whose rank 0
 * made `id` (len == DTPC_NCCL_UNIQUE_ID_BYTES; the bytes are copied, the
 * caller keeps them). Collective: every rank of the world calls it, and it
 * returns once all have joined, or fails after timeout_ms (0: 120 s). The
 * rank's GPU is its node-local rank (LOCAL_RANK, as torchrun sets it, or
 * Open MPI's, else `rank`) modulo the GPUs visible. A collective that does
 * not finish within timeout_ms aborts the job's communicators, as
 * dtpc_comm_nccl's. MPI is not used (not initialized, not finalized).
 * Freed by dtpc_comm_free. DTPC_ERR_INVALID for bad arguments; DTPC_ERR_COMM
 * where this build has no nccl backend, without a GPU, or when NCCL fails. */
DTPC_API dtpc_status dtpc_comm_nccl_init(const void *id, size_t len, int rank, int world,
				 int timeout_ms, dtpc_comm **out);

DTPC_API int dtpc_comm_rank(const dtpc_comm *c);
DTPC_API int dtpc_comm_size(const dtpc_comm *c);
DTPC_API void dtpc_comm_free(dtpc_comm *c);

/* ---- sessions ------------------------------------------------------------------- */

/* Storage dtypes. Accumulation is float32 whatever the storage (GEMMs, norm
 * statistics, softmax, the ring merge's log-sum-exp, all-reduce sums). */
typedef enum dtpc_dtype { DTPC_F32 = 0, DTPC_BF16 = 1, DTPC_F16 = 2 } dtpc_dtype;

/* Devices a session computes on. */
typedef enum dtpc_device { DTPC_DEVICE_CPU = 0, DTPC_DEVICE_CUDA = 1 } dtpc_device;

/* How many devices of a kind this build can use on this machine: 1 for the
 * CPU; for CUDA the GPUs visible (0 when built without CUDA, or with no
 * GPU or driver). */
DTPC_API int dtpc_device_count(dtpc_device dev);
/* Why this build cannot compute on dev here (e.g. "no GPU is visible to this
 * process", or dtpc's CUDA library could not be loaded), or NULL when it
 * can. A static or per-thread string. */
DTPC_API const char *dtpc_device_unavailable(dtpc_device dev);
/* "cpu", "cuda"; NULL for an unknown value. */
DTPC_API const char *dtpc_device_name(dtpc_device dev);

typedef struct dtpc_session dtpc_session;

/* A rank's session: its shapes, weight slices and arena, on `dev`. On
 * CUDA the rank's GPU is the nccl backend's (its node-local rank), else
 * the rank modulo the GPUs visible, so N local ranks may share one GPU; a
 * backend that cannot take device memory (local, mpi) then moves its bytes
 * through host memory. Collective: does the startup handshake (graph hash,
 * world size, rank numbers) with every other rank. g and c must outlive
 * the session. */
DTPC_API dtpc_status dtpc_session_create(const dtpc_graph *g, dtpc_comm *c, dtpc_device dev,
				dtpc_session **out);
DTPC_API void dtpc_session_free(dtpc_session *s);

/* Weights. From a checkpoint by name: a safetensors file, a folder with one
 * (diffusers' diffusion_pytorch_model.safetensors first), a sharded folder
 * or its *.safetensors.index.json, or a folder of per-rank files written by
 * `dtpc shard` (checked to be this graph's weights cut for this rank). Each
 * rank reads only its slices, converting F16/BF16/F64 to float32 and then
 * to the storage dtype (a BF16 tensor into bf16 storage unchanged); names,
 * shapes and dtypes are checked against the graph before any data is read
 * (DTPC_ERR_BIND; a malformed checkpoint DTPC_ERR_FORMAT, an unreadable file
 * DTPC_ERR_IO). A failure marks this rank failed on its communicator, as a
 * failed run does, so that the other ranks do not wait for it.
 * From a seed: every weight's full tensor is a function of (seed, name,
 * element index), so runs on any number of ranks see the same model. From
 * memory: `data` is the full tensor (the rank copies its slice). */
DTPC_API dtpc_status dtpc_session_bind_weights_file(dtpc_session *s, const char *path);
DTPC_API dtpc_status dtpc_session_bind_weights_seed(dtpc_session *s, uint64_t seed);
DTPC_API dtpc_status dtpc_session_bind_weight(dtpc_session *s, const char *name, const float *data,
				     const int64_t *shape, int ndim);

/* Inputs, whole (each rank takes its part as the graph says). */
DTPC_API dtpc_status dtpc_session_bind_inputs_file(dtpc_session *s, const char *path);
DTPC_API dtpc_status dtpc_session_bind_inputs_seed(dtpc_session *s, uint64_t seed);
DTPC_API dtpc_status dtpc_session_set_input(dtpc_session *s, const char *name, const float *data,
				   const int64_t *shape, int ndim);

/* Typed, placed data: a weight's full tensor or an input, whole, as
 * elements of `dtype` in row-major order at `data`, which is host memory
 * (where = DTPC_DEVICE_CPU, on a session on any device) or device memory of
 * the session's GPU (where = DTPC_DEVICE_CUDA, on a CUDA session only: a
 * cudaMalloc'd or managed pointer on dtpc_session_gpu(s), as a torch CUDA
 * tensor's data_ptr() is). Data in the session's storage dtype are taken as
 * they are, bit for bit; another dtype is converted to it (widening exact,
 * narrowing to nearest even), as the float32 binds convert theirs, so that
 * a bf16 tensor given here and the same values given in float32 to
 * dtpc_session_bind_weight / dtpc_session_set_input bind the same bits.
 * Each rank copies its slice of a weight; an input is taken whole.
 * Ownership: the data are copied; the caller keeps them. Host data may be
 * changed or freed once the call returns. Device data are copied on the
 * session's device, ordered after the work the caller's stream
 * (dtpc_session_stream) holds when the call is made, and complete before
 * any work the caller enqueues on that stream after the call: the caller
 * may reuse or free them in stream order, as its own kernels' inputs; with
 * no stream set, the copy is complete when the call returns (and the
 * caller must have finished writing them before the call).
 * Errors: DTPC_ERR_BIND for a name the graph has no weight / input of, or a
 * shape other than the graph's (as the float32 binds); DTPC_ERR_INVALID,
 * naming the tensor, for NULL data, an unknown dtype or place, device memory
 * given to a session whose device takes host memory (the CPU), or a pointer
 * that is not memory of the session's GPU (host memory, another GPU's);
 * DTPC_ERR_DEVICE for a copy that failed; DTPC_ERR_NOMEM. A failed bind
 * leaves the tensor unbound (a run refuses it) and the communicator as it
 * was: the caller may bind again. */
DTPC_API dtpc_status dtpc_session_set_input_data(dtpc_session *s, const char *name,
						 const void *data, dtpc_dtype dtype,
						 dtpc_device where, const int64_t *shape,
						 int ndim);
DTPC_API dtpc_status dtpc_session_bind_weight_data(dtpc_session *s, const char *name,
						   const void *data, dtpc_dtype dtype,
						   dtpc_device where, const int64_t *shape,
						   int ndim);

/* The tensors of the last weights or inputs file bound (the last successful
 * dtpc_session_bind_weights_file or _bind_inputs_file) that the graph does
 * not use: for weights, names that are no weight of the graph (a dev
 * checkpoint's guidance embedder under a schnell graph); for inputs, no
 * input. They were not read, and binding them is no error. Returns how many
 * there are; *name (unless name is NULL) is the i-th in name (strcmp) order,
 * or NULL for an i outside [0, count). The names stay owned by the session,
 * valid until its next file bind or its free. Each file bind replaces the
 * list, a failed one with an empty list; the other binds leave it. */
DTPC_API int dtpc_session_unused(const dtpc_session *s, int i, const char **name);

/* One forward pass. Collective. */
DTPC_API dtpc_status dtpc_session_run(dtpc_session *s);

/* The caller's CUDA stream (a cudaStream_t, as torch's
 * torch.cuda.current_stream().cuda_stream; cudaStreamLegacy, (void *)1,
 * for CUDA's legacy default stream, which torch's default stream is and
 * which torch reports as 0) that the session's device work is ordered
 * with from now on: each run and each device copy of the typed calls
 * (dtpc_session_set_input_data, _bind_weight_data, _output_data) starts
 * after the work enqueued on the stream when the call is made, and work
 * the caller enqueues on the stream after the call starts after it. The
 * session still computes on its own stream (so that its device graphs and
 * collectives are what they were), joined to the caller's by events: no
 * host synchronization, no copy. A run still returns once its forward pass
 * is done. NULL (the default): no stream; device copies are complete when
 * a call returns. The stream must outlive its use: set NULL (or another)
 * before destroying it. A session on the CPU takes NULL only (a no-op);
 * another stream there is DTPC_ERR_INVALID. */
DTPC_API dtpc_status dtpc_session_stream(dtpc_session *s, void *cuda_stream);
/* The GPU (its CUDA ordinal) a session computes on, or -1 on the CPU. */
DTPC_API int dtpc_session_gpu(const dtpc_session *s);
/* The session's storage dtype (dtpc_session_dtype's, or the graph's). */
DTPC_API dtpc_dtype dtpc_session_get_dtype(const dtpc_session *s);

/* From the second run on, record the forward pass once as a device graph
 * (CUDA graphs) and replay it: on by default, used where valid (a CUDA
 * device, no collective that stages through the host, no tracing); a no-op
 * on the CPU. */
DTPC_API void dtpc_session_graphs(dtpc_session *s, int enable);
/* The storage dtype of the session's activations and weights (default: the
 * graph's, which the plan's dtype setting chose), set before any weight or
 * input is bound; it overrides the graph's. The float32 calls round bound
 * weights and inputs to the dtype (to nearest even) and convert outputs
 * back; the typed calls (dtpc_session_set_input_data, _bind_weight_data,
 * _output_data) take and give data in the storage dtype as they are. Every
 * device stores f32, bf16 and f16. The graph's memory plan is sized for its
 * own dtype: a narrower one leaves part of the arena unused, a wider one is
 * refused (DTPC_ERR_INVALID). */
DTPC_API dtpc_status dtpc_session_dtype(dtpc_session *s, dtpc_dtype t);
/* Threads this rank's CPU kernels may use (attention, pointwise ops, norms
 * and the linear layers), n >= 1; the default is the machine's cores
 * divided by the CPU sessions alive in this process, counted again at each
 * kernel (two sessions that never run at once still share the cores: give
 * each its n). No effect on other devices. */
DTPC_API dtpc_status dtpc_session_threads(dtpc_session *s, int n);
/* The threads this rank's CPU kernels use now: dtpc_session_threads's n, or
 * the default as it stands; 1 on a device whose kernels are not the CPU's. */
DTPC_API int dtpc_session_thread_count(const dtpc_session *s);
/* Whether the last run replayed a device graph. */
DTPC_API int dtpc_session_graphed(const dtpc_session *s);

/* Outputs, whole on every rank after a run, in float32 host memory whatever
 * the device and the storage dtype. data stays owned by the session and
 * valid until the next run or free. The float32 host copy is made by the
 * first call for the output after a run that asks for data (on a CUDA
 * session, or in a narrower storage dtype; with data NULL nothing is
 * copied), so that a caller that reads the outputs typed or on the device
 * pays for no host copy; that call can fail with DTPC_ERR_DEVICE. */
DTPC_API int dtpc_session_noutputs(const dtpc_session *s);
DTPC_API dtpc_status dtpc_session_output(const dtpc_session *s, int i, const char **name,
				const float **data, const int64_t **shape, int *ndim);
/* After a run: output i, whole, copied into the caller's buffer dst of
 * `bytes` bytes (exactly the output's elements times the size of dtype),
 * as elements of dtype: the storage dtype's bits as they are, another
 * dtype converted (as dtpc_session_output's float32 is). dst is host memory
 * (where = DTPC_DEVICE_CPU) or device memory of the session's GPU (where =
 * DTPC_DEVICE_CUDA, a CUDA session only). The caller owns dst and its
 * contents; the session keeps no pointer to it. Host copies are complete
 * on return. A device copy runs on the session's device after the work the
 * caller's stream (dtpc_session_stream) holds at the call and before the
 * work the caller enqueues on it after the call — read dst in stream order,
 * or after synchronizing the stream; with no stream it is complete on
 * return. The output stays valid in the session until the next run, and
 * may be read any number of times, in any dtype and place. Errors as
 * dtpc_session_set_input_data's (DTPC_ERR_INVALID for a wrong byte count,
 * naming the output), DTPC_ERR_INVALID for an i out of range, DTPC_ERR_STATE
 * before the first run. */
DTPC_API dtpc_status dtpc_session_output_data(const dtpc_session *s, int i, void *dst,
					      dtpc_dtype dtype, dtpc_device where,
					      size_t bytes);
/* After a run: in *count, how many of output i's values are NaN or infinite
 * (counted on each call, over the whole output). A model with a bad weight
 * or input, or one that overflows the storage dtype, gives them; a caller
 * that saves outputs should refuse them. DTPC_ERR_INVALID for an i out of
 * range, DTPC_ERR_STATE before the first run. */
DTPC_API dtpc_status dtpc_session_output_nonfinite(const dtpc_session *s, int i, int64_t *count);

/* Chrome/Perfetto tracing: with tracing on, every run records one span per
 * op (compute or communication; bytes on communication spans). */
DTPC_API void dtpc_session_trace(dtpc_session *s, int enable);
/* Writes the spans of n sessions (one track per rank) as a Chrome trace
 * JSON file. */
DTPC_API dtpc_status dtpc_trace_write(const char *path, dtpc_session *const *sessions, int n);
/* Collective: every rank of the session's communicator calls it after its
 * runs. The spans of all ranks are gathered, their clocks aligned at a
 * barrier, and rank 0 writes one trace with a track per rank (the other
 * ranks write nothing). Host-memory backends (local, MPI) only. */
DTPC_API dtpc_status dtpc_trace_write_gathered(const char *path, dtpc_session *s);

#ifdef __cplusplus
}
#endif
#endif
