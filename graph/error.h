/* error.h — the one error convention of the graph library and the runtime.
 *
 * As Lua raises every error through luaD_throw, every layer here (the graph
 * loader, safetensors and checkpoints, the comm backends, the devices, the
 * sessions) fails in one way: it raises into the calling thread's error
 * record — a status, the rank the failure is about and a message — and
 * returns the status (or false / NULL: "see the record"). A
 * caller that adds what it knows (the rank, the op, the file) wraps the
 * record in place (g_wrap) rather than copying text between buffers. The
 * public API reads the record: dtpc_status is this enum value for value
 * (runtime/dtpc.h), dtpc_last_error() is g_error()->msg and
 * dtpc_last_error_rank() g_error()->rank.
 *
 * The record is per thread: N local ranks are N threads, each with its own.
 * What ranks share (the local world's record of which rank failed and why)
 * stays data of the backend, raised into a rank's record when that rank's
 * wait ends. */
#ifndef DTPC_GRAPH_ERROR_H
#define DTPC_GRAPH_ERROR_H
#include <stdarg.h>

/* The statuses, value for value runtime/dtpc.h's dtpc_status (session.c
 * asserts it). They travel as int, as Lua's error codes do: the graph
 * library names them G_*, the runtime its public DTPC_* names, and neither
 * enum converts into the other. */
enum g_status {
	G_OK = 0,
	G_ERR_INVALID,  /* a bad argument */
	G_ERR_IO,       /* a file could not be read or written */
	G_ERR_FORMAT,   /* a graph or checkpoint is malformed */
	G_ERR_VERSION,  /* a graph from a newer, incompatible dtpc */
	G_ERR_MISMATCH, /* ranks disagree: graph, world size, rank number */
	G_ERR_COMM,     /* a collective failed: timeout, dead or diverged rank */
	G_ERR_BIND,     /* a weight or input is missing or has the wrong shape/dtype */
	G_ERR_NOMEM,
	G_ERR_STATE,    /* e.g. run before every weight was bound */
	G_ERR_DEVICE,   /* the device failed: a kernel, a copy, device memory */
};

enum { G_ERROR_MSG = 1024 };

struct g_error {
	int status; /* G_OK before the thread's first failure */
	/* The rank the failure is about (the session's or communicator's that
	 * raised it), -1 where none is (a graph file, a bad argument). The
	 * message does not repeat it, so that a report naming the ranks itself
	 * (dtpc run) reads identical failures of several ranks as one. */
	int rank;
	char msg[G_ERROR_MSG]; /* located: the path, tensor, op or peer it concerns */
};

/* Sets the calling thread's record (rank -1) and returns st, for
 * `return g_raise(G_ERR_FORMAT, "tensor %u: ...", i)`. */
int g_raise(int st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The same, about rank. */
int g_raise_rank(int st, int rank, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The va_list form, for a layer's own raising helper. */
int g_vraise(int st, int rank, const char *fmt, va_list ap);
/* Adds context to the failure just raised below: the message becomes
 * "<fmt>: <message>", the status st, and the rank `rank` unless that is -1
 * (the record's stays). Returns st. */
int g_wrap(int st, int rank, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The failure just raised below, unchanged but for its status, now st,
 * and its rank, now `rank` unless that is -1. Returns st. */
int g_reraise(int st, int rank);
/* The calling thread's record: valid until its next raise. */
const struct g_error *g_error(void);

/* For a library loaded apart that links its own copy of this module
 * (libdtpc_cuda.so, runtime/cuda/cuda_api.h): from now on its raises go to
 * the record that `record` returns, the loading library's g_error_record,
 * so that a process has one record per thread. */
struct g_error *g_error_record(void);
void g_error_share(struct g_error *(*record)(void));
#endif
