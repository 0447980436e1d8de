/* ir.h — the instantiated model: tensors, ops, weights and module names.
 *
 * A model declaration plus parameter values instantiates to a flat SSA list
 * of ops over tensors with static shapes. Module names are the dotted PyTorch
 * names (`blocks.3.attn.to_q`); the plan's globs match them. */
#ifndef DTPC_IR_H
#define DTPC_IR_H
#include <stdbool.h>
#include <stdint.h>

#include "diag.h"
#include "expr.h"

#include "graph/op_table.h"

/* The op a plan names s, or -1 (graph-only ops are not nameable). */
int op_lookup(const char *s);

enum { IR_MAX_DIMS = 8 };

struct ir_shape {
	int nd;
	int64_t d[IR_MAX_DIMS];
};

struct ir_tensor {
	const char *name; /* module name of the producing op, or input name */
	struct ir_shape shape;
	int producer;     /* op index, -1 for a model input */
	dtpc_loc loc;
};

struct ir_weight {
	const char *name; /* PyTorch name: blocks.0.attn.to_q.weight */
	struct ir_shape shape;
	int op;
};

struct ir_op {
	enum op_kind kind;
	const char *module; /* dotted name; for a variable update, that of the variable */
	bool update;        /* assigns a carried variable: not a named module */
	dtpc_loc loc, name_loc;
	const struct mstmt *stmt;
	int *in;            /* tensor indices */
	dtpc_loc *in_loc;   /* where each input was written */
	int nin;
	int out;
	/* The op's own parameters, one view per op that has them, named as
	 * the op (an op reads and writes only its own). The graph's op of
	 * the same kind keeps its own (graph/op_attrs.h): the plan's view
	 * may differ. */
	union {
		struct { int64_t out, in; } linear;       /* features */
		struct { int64_t group; } norm;           /* layer_norm, rms_norm: elements per group */
		struct { int64_t dim, start, length; } slice;
		struct { int64_t dim; } concat;
		struct { int64_t dim; } index;            /* index_select, index_copy */
		struct { int64_t dim, before, after; } pad; /* eps: the value */
		struct {
			int64_t dim;
			bool input_scale_f32;
			double downscale_freq_shift, scale, max_period, input_scale;
		} timestep_embedding;                     /* flag: flip_sin_to_cos */
		struct { bool f64; } rope_freqs;          /* precision; eps: theta; flag: sin */
		struct { bool split; } rope;              /* convention "split"; flag: "half" */
		struct {
			int64_t dim, patch_t, patch;
			double scale[3];                  /* t, h, w */
		} ltx_rope_freqs;                         /* eps: theta; flag: sin */
		struct {
			int64_t dim, axes;
			bool audio, f64, split; /* split: rope_type "split" */
			double time_div;                  /* the frame rate's divisor */
			int64_t base_t, base_s, hop_length;
		} ltx2_rope_freqs; /* shape_attr: frames, height, width, patch_t, patch,
				    * scale_t, scale_s, causal_offset; eps: theta; flag: sin */
		struct { int64_t frames, height, width; } grid_ids; /* flag: center */
		struct { int64_t length, first, axes; } text_ids;   /* first: the first position */
	};
	/* rope, attention: the plan's heads (their graph ops hold the head
	 * dim instead, ga_rope / ga_attention) */
	int64_t heads;
	double eps;         /* norms: eps; rope_freqs, ltx_rope_freqs: theta; pad: the value */
	bool flag;          /* bias / affine / gelu tanh / flip_sin_to_cos / sin / center */
	/* param / reshape target; rope_freqs: axes_dim; patch_embed, unpatchify: patch */
	struct ir_shape shape_attr;
	int weight0, nweights;
	int instance;       /* innermost repeat instance module, -1 at top level */
	int module_index;   /* its module, -1 for a variable update */
};

/* MOD_TUPLE: `name = tuple(a, b);` — its outputs are a and b themselves; its
 * styles apply where it is written (first_op = end_op: after the ops before). */
enum module_kind { MOD_ROOT, MOD_OP, MOD_INSTANCE, MOD_TUPLE };

/* A tensor entering a module under the name the module's code used for it. */
struct ir_port {
	const char *name;
	int tensor;
};

struct ir_module {
	const char *name;
	enum module_kind kind;
	int op;         /* MOD_OP */
	dtpc_loc loc;
	struct ir_port *inputs;
	int ninputs;
	int *outputs;   /* tensors leaving (op: its result; instance: carried vars;
			 * tuple: its elements) */
	int noutputs;
	int first_op, end_op; /* MOD_INSTANCE: ops [first_op, end_op); MOD_TUPLE: both
			       * the op count where it is written */
	int parent;           /* enclosing repeat instance, -1 at top level */
};

struct ir_model {
	const char *name;
	const struct model *decl;
	/* Parameter values after overrides, in declaration order. */
	const char **param_names;
	struct value *params;
	int nparams;

	struct ir_tensor *tensors;
	int ntensors, captensors;
	struct ir_op *ops;
	int nops, capops;
	struct ir_weight *weights;
	int nweights, capweights;
	struct ir_module *modules;
	int nmodules, capmodules;
	int *inputs, ninputs;
	int *outputs, noutputs;
	const char **output_names; /* as the output statement names them */
	dtpc_loc *output_loc;
	int nfailed; /* statements that failed (their errors were reported) */
};

struct strmap;
struct program;

/* An override of a model parameter: from a plan's `model m(k = v)`, a
 * --config file's key (config.c) or -D. */
struct override {
	const char *name;
	struct value val;
	bool from_cli;
	/* a key of --config: val.loc is the key; VAL_NONE is JSON null (the
	 * parameter keeps its value), unless unfit says why no parameter can
	 * take the value ("an object") */
	bool from_config;
	const char *unfit;
	bool used;
};

/* Instantiates a model with overrides (the plan's, then the command line's).
 * Errors go to d; the result is usable as far as it got (may be partial). */
struct ir_model *model_instantiate(struct arena *a, struct diag_ctx *d,
				   const struct model *m, struct override *ov,
				   int nov, dtpc_loc use_loc);
const char *shape_str(struct arena *a, const struct ir_shape *s);
int64_t shape_numel(const struct ir_shape *s);
#endif
