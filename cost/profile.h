/* profile.h — hardware profiles (the JSON files of hw/) as the cost model
 * (cost.h, libdtpcost) reads them and `dtpc calibrate` writes them: the
 * format and what the loader refuses are in docs/cost-model.md, "Profiles".
 * Apart from the model so that a fuzz target (tests/fuzz/fuzz_profile.c)
 * can feed the loader without the compiler. */
#ifndef DTPC_COST_PROFILE_H
#define DTPC_COST_PROFILE_H

#include <stdbool.h>
#include <stddef.h>

struct arena;

enum { DT_F32, DT_BF16, DT_N };
extern const char *const dt_names[DT_N];

/* Time of one kernel of W FLOPs: fixed + W / peak (an α–β model of compute:
 * small kernels do not fill the device), plus, for attention, a cost per
 * score (the softmax's exponentials; 0 where not measured). */
struct rate {
	double peak, fixed, score;
};

/* The memory-bound kernels whose bytes per second a profile may give
 * apart (the keys of "op_bytes_per_s", written by dtpc calibrate); the
 * others, and these where absent, move at memory_bytes_per_s. */
enum mop { M_LAYER_NORM, M_RMS_NORM, M_GELU, M_SILU, M_ADD, M_MUL, M_MODULATE, M_ROPE,
	   M_COPY, M_LSE_MERGE, M_N };
extern const char *const mop_keys[M_N];

/* The rates of one rank: a profile's own (times the rank's share of a CPU
 * node's cores), or a by_ranks row's, measured with that many ranks at work. */
struct rates {
	struct rate linear, attention;
	double op_bw[M_N]; /* bytes/s of each memory-bound kernel */
	double mem_bw;     /* memory_bytes_per_s: a kernel's without a rate of its own */
	double launch;     /* an op never takes less */
};

enum { MAX_TABLE = 64 };

struct dt_profile {
	bool present;
	struct rates base;
	/* by_ranks: each rank's rates while row_ranks[k] ranks of a node
	 * compute at once (dtpc calibrate on a CPU) */
	int nrows;
	int row_ranks[MAX_TABLE];
	struct rates rows[MAX_TABLE];
};

enum coll { CO_AG, CO_AR, CO_A2A, CO_P2P, CO_N };
/* each collective's bus bandwidth and α keys in a link or a by_group row */
extern const char *const coll_keys[CO_N], *const coll_alpha_keys[CO_N];

/* A by_group row: a group size's collectives as measured with only its
 * members at work. */
struct group_row {
	double alpha[CO_N], busbw[CO_N];
	double at_work; /* the ranks at work on the node while it was measured */
};

struct link {
	bool present;
	char name[96];
	double alpha[CO_N]; /* seconds per collective (or per ring step), by kind */
	double busbw[CO_N]; /* nccl-tests bus bandwidth, bytes/s */
	bool overlap;       /* a ring step's transfer runs while the rank computes */
	double p2p_ctas;    /* NCCL's send/recv channels per peer, one CTA each (0: none) */
	double channel_bw;  /* bytes/s one send/recv channel moves (0: not limited) */
	int ngroups;
	int group_size[MAX_TABLE];
	struct group_row groups[MAX_TABLE];
};

struct hw {
	char name[160];
	const char *path;
	int ranks_per_node;
	int threads_per_node; /* CPU profiles: the ranks of a node share these */
	double memory;        /* per GPU, or per node for a CPU profile */
	double launch;        /* an op never takes less */
	double sms;           /* a GPU's streaming multiprocessors (0: not a GPU profile) */
	int default_dtype;
	struct dt_profile dt[DT_N];
	struct link intra, inter;
};

/* A profile from its JSON text (len bytes; path names it in h). false:
 * refused, with the field's JSON path and why on err. Every number of an
 * accepted profile is within its kind's range (docs/cost-model.md), so
 * that no prediction from it is infinite or NaN. */
bool cost_hw_parse(const char *text, size_t len, const char *path, struct hw *h, char *err,
		   size_t n);
/* cost_hw_parse of a file (at most 1 MiB), read into a. */
bool cost_hw_load(struct arena *a, const char *path, struct hw *h, char *err, size_t n);
#endif
