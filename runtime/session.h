/* session.h — the runtime's internals shared by session.c and exec.c. */
#ifndef DTPC_SESSION_H
#define DTPC_SESSION_H
#include <stdbool.h>

#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/dtpc.h"
#include "graph/graph.h"

struct dtpc_graph {
	struct g_graph g;
	void *mem;    /* the bytes: a mapping or a malloc'd copy */
	size_t len;
	bool mapped;
};

struct dtpc_comm {
	struct comm *impl;
};

struct dtpc_local_world {
	struct comm_local_world *w;
};

/* One span of a traced run: an op, or a part of one that the executor
 * times on its own (ring attention: each step's attention on the compute
 * row, each K/V transfer on the communication row), so that a trace shows
 * the two overlap. */
enum trace_part { TRACE_OP, TRACE_COMPUTE, TRACE_COMM };
struct trace_event {
	uint32_t op;
	double t0, t1; /* seconds since the session's epoch */
	uint64_t bytes; /* TRACE_COMM: the bytes this rank sent in it */
	uint32_t part;  /* enum trace_part */
	uint32_t step;  /* a part's step within its op */
};

struct dtpc_session {
	const struct g_graph *g;
	struct comm *c;
	uint32_t rank;
	struct dev *dv;              /* computes; owns arena, weights, workspace */
	float *arena;                /* device memory */
	void *host;                  /* the arena's host mirror (the arena itself
				      * where the device's memory is the host's):
				      * inputs are written and outputs read here */
	bool staged;                 /* collectives go through the host mirror */
	dtpc_dtype graph_dtype;      /* the graph's tensors' dtype (its memory plan's) */
	dtpc_dtype dtype;            /* storage dtype of every arena tensor and weight:
				      * the graph's, or a narrower one the caller set */
	size_t esize;                /* its bytes per element */
	float *widen;                /* narrower dtypes: a float32 device buffer
				      * for the largest tensor (binding, outputs,
				      * all-reduce sums) */
	float *widen_host;           /* and its host twin, for staged all-reduces */
	float **outputs;             /* per graph output, where the storage is not
				      * float32: its float32 copy on the host */
	bool *fetched;               /* per graph output: its float32 host copy
				      * (outputs, or the host mirror) is the last
				      * run's (made by dtpc_session_output on demand) */
	void *stream;                /* the caller's stream (dtpc_session_stream),
				      * or NULL: none */
	size_t max_group;            /* the largest group's size */
	size_t *cbufs;               /* 4 x max_group: collectives' counts */
	int64_t *rowbuf;             /* max_group: ring chunks' rows */
	bool graphs;                 /* replay forward passes as device graphs */
	bool graph_ready;            /* captured: later runs replay */
	bool replayed;               /* the last run replayed the graph */
	unsigned runs;
	int64_t (*dims)[G_MAX_DIMS]; /* local shape of every tensor */
	int64_t *numel;
	float **weights;             /* per tensor: this rank's slice (device
				      * memory), or NULL */
	bool *bound;                 /* per tensor: weight or input bound */
	bool *timestep;              /* per tensor: an input an OPF_WIDE_INPUT op
				      * (timestep_embedding) reads */
	float **wide;                /* per such input, where the storage is
				      * narrower: its values as bound, in float32
				      * (device memory), which the op reads:
				      * diffusers' get_timestep_embedding takes
				      * `timesteps.float()` of what the pipeline
				      * passes (Wan's float32 timestep 999.37, not
				      * bf16's 1000); else NULL */
	char **unused;               /* the last file bind's tensors that the graph
				      * does not use, in name order (one block:
				      * the pointers, then the names) */
	int nunused;
	struct comm_group *groups;   /* per graph group, as this rank sees it */
	int *members;
	void *workspace;             /* attention tiles */
	size_t workspace_bytes;
	bool ran;

	bool tracing;
	double epoch;
	struct trace_event *events;
	size_t nevents, capevents;
};

double rt_now(void);
/* Tracing: records a part of op (t0, t1 from rt_now()). */
void rt_trace_part(struct dtpc_session *s, uint32_t op, enum trace_part part, uint32_t step,
		   double t0, double t1, uint64_t bytes);

/* Local shapes, groups and the per-op checks of exec_check for s->rank,
 * without a communicator or an arena (also what the graph fuzzer exercises
 * on hostile graphs that pass the loader). */
dtpc_status session_prepare(struct dtpc_session *s);
/* Proves op i safe on this rank and sizes the attention workspace (exec.c). */
dtpc_status exec_check(struct dtpc_session *s, uint32_t i);
/* Runs op i of the graph on this rank (exec.c). */
dtpc_status exec_op(struct dtpc_session *s, uint32_t i);
/* A tensor's data on this rank: its arena slot or its weight slice. */
float *rt_data(const struct dtpc_session *s, uint32_t t);
#endif
