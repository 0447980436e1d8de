/* op_attrs.h — each op's graph parameters, typed and named: the one place
 * that knows which attr[] slot, flag bit or eps holds which parameter of
 * struct g_op (graph/graph.h gives the same table in words, and
 * docs/graph-format.md the file's view of it).
 *
 * Per op (or per family of ops whose parameters mean the same) a struct
 * and a pair: ga_<name>_get(o) reads an op's record, ga_<name>_set(o, a)
 * writes all of its attr[], flags and eps (the slots and bits the op does
 * not use become zero), so a record is either built whole from a struct or
 * changed by get, edit, set. The compiler writes graphs, and the loader, the
 * runtime, the stats and the inspector read them, through these only: no
 * raw attr[N] outside this header. The record layout itself does not change
 * (graph.h pins it). Enumerated values (an activation, a direction) stay
 * int64_t here, so that a check sees a forged value whole rather than
 * truncated into an enum. */
#ifndef DTPC_OP_ATTRS_H
#define DTPC_OP_ATTRS_H
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "graph/graph.h"

/* A float64 parameter travels in an attr[] slot as its bits. */
static inline int64_t ga_bits(double v)
{
	int64_t b;
	memcpy(&b, &v, sizeof b);
	return b;
}

static inline double ga_double(int64_t b)
{
	double v;
	memcpy(&v, &b, sizeof v);
	return v;
}

static inline bool ga_flag(const struct g_op *o, uint32_t bit)
{
	return (o->flags & bit) != 0;
}

static inline uint32_t ga_bit(bool on, uint32_t bit)
{
	return on ? bit : 0;
}

/* What every set starts from: no parameter. */
static inline void ga_clear(struct g_op *o)
{
	memset(o->attr, 0, sizeof o->attr);
	o->flags = 0;
	o->eps = 0;
}

/* ---- linear, patch_embed's bias and linear_act ------------------------------- */

/* linear: bias (G_OF_BIAS): operand 2 is the bias */
struct ga_linear {
	bool bias;
};

static inline struct ga_linear ga_linear_get(const struct g_op *o)
{
	return (struct ga_linear){ .bias = ga_flag(o, G_OF_BIAS) };
}

static inline void ga_linear_set(struct g_op *o, struct ga_linear a)
{
	ga_clear(o);
	o->flags = ga_bit(a.bias, G_OF_BIAS);
}

/* linear_act: a linear and its activation (enum g_act) in one op */
struct ga_linear_act {
	bool bias;
	int64_t act; /* enum g_act */
};

static inline struct ga_linear_act ga_linear_act_get(const struct g_op *o)
{
	return (struct ga_linear_act){ .bias = ga_flag(o, G_OF_BIAS), .act = o->attr[0] };
}

static inline void ga_linear_act_set(struct g_op *o, struct ga_linear_act a)
{
	ga_clear(o);
	o->flags = ga_bit(a.bias, G_OF_BIAS);
	o->attr[0] = a.act;
}

/* ---- layer_norm, rms_norm, norm_stats ---------------------------------------- */

/* layer_norm and rms_norm. stats (G_OF_STATS): a distributed norm, its last
 * axis split over a group, the all-reduced sums its last operands; width
 * is then the whole last axis N. group: rms_norm's elements per normalised
 * group (its N when distributed); 0 for layer_norm. */
struct ga_norm {
	double eps;
	bool affine, stats;
	int64_t group, width;
};

static inline struct ga_norm ga_norm_get(const struct g_op *o)
{
	return (struct ga_norm){ .eps = o->eps,
				 .affine = ga_flag(o, G_OF_AFFINE),
				 .stats = ga_flag(o, G_OF_STATS),
				 .group = o->attr[0],
				 .width = o->attr[1] };
}

static inline void ga_norm_set(struct g_op *o, struct ga_norm a)
{
	ga_clear(o);
	o->eps = a.eps;
	o->flags = ga_bit(a.affine, G_OF_AFFINE) | ga_bit(a.stats, G_OF_STATS);
	o->attr[0] = a.group;
	o->attr[1] = a.width;
}

/* norm_stats: which per-row sums (enum g_norm_stat), and the whole width N
 * the centred sums divide by */
struct ga_norm_stats {
	int64_t width;
	int64_t stat; /* enum g_norm_stat */
};

static inline struct ga_norm_stats ga_norm_stats_get(const struct g_op *o)
{
	return (struct ga_norm_stats){ .width = o->attr[0], .stat = o->attr[1] };
}

static inline void ga_norm_stats_set(struct g_op *o, struct ga_norm_stats a)
{
	ga_clear(o);
	o->attr[0] = a.width;
	o->attr[1] = a.stat;
}

/* ---- pointwise ----------------------------------------------------------------- */

/* gelu: the tanh approximation */
struct ga_gelu {
	bool tanh;
};

static inline struct ga_gelu ga_gelu_get(const struct g_op *o)
{
	return (struct ga_gelu){ .tanh = ga_flag(o, G_OF_TANH) };
}

static inline void ga_gelu_set(struct g_op *o, struct ga_gelu a)
{
	ga_clear(o);
	o->flags = ga_bit(a.tanh, G_OF_TANH);
}

/* add, mul, modulate: bh (G_OF_BH), operand 1 (add, mul) or shift/scale
 * (modulate) are [B, H] over [B, S, H] */
struct ga_bcast {
	bool bh;
};

static inline struct ga_bcast ga_bcast_get(const struct g_op *o)
{
	return (struct ga_bcast){ .bh = ga_flag(o, G_OF_BH) };
}

static inline void ga_bcast_set(struct g_op *o, struct ga_bcast a)
{
	ga_clear(o);
	o->flags = ga_bit(a.bh, G_OF_BH);
}

/* ---- along a dim: slice, pad; concat, shard, all_gather, reduce_scatter ------- */

/* slice: global coordinates; on a sharded dim the slice covers whole blocks */
struct ga_slice {
	int64_t dim, start, length;
};

static inline struct ga_slice ga_slice_get(const struct g_op *o)
{
	return (struct ga_slice){ .dim = o->attr[0], .start = o->attr[1], .length = o->attr[2] };
}

static inline void ga_slice_set(struct g_op *o, struct ga_slice a)
{
	ga_clear(o);
	o->attr[0] = a.dim;
	o->attr[1] = a.start;
	o->attr[2] = a.length;
}

/* pad: rows before and after (global) along dim, filled with value */
struct ga_pad {
	int64_t dim, before, after;
	double value;
};

static inline struct ga_pad ga_pad_get(const struct g_op *o)
{
	return (struct ga_pad){ .dim = o->attr[0], .before = o->attr[1], .after = o->attr[2],
				.value = o->eps };
}

static inline void ga_pad_set(struct g_op *o, struct ga_pad a)
{
	ga_clear(o);
	o->attr[0] = a.dim;
	o->attr[1] = a.before;
	o->attr[2] = a.after;
	o->eps = a.value;
}

/* concat, shard, all_gather, reduce_scatter: the dim they join, cut or sum
 * along; index_select, index_copy: the dim they index */
struct ga_dim {
	int64_t dim;
};

static inline struct ga_dim ga_dim_get(const struct g_op *o)
{
	return (struct ga_dim){ .dim = o->attr[0] };
}

static inline void ga_dim_set(struct g_op *o, struct ga_dim a)
{
	ga_clear(o);
	o->attr[0] = a.dim;
}

/* ---- attention ------------------------------------------------------------------ */

/* rope: the head dim of x (the graph's; the plan's rope gives heads);
 * half: convention "half" (rotate_half over the tables' leading columns,
 * the rest of each head passed through); split: convention "split"
 * (rotate_half over the whole head, per-head tables); neither: interleaved
 * pairs */
struct ga_rope {
	int64_t head_dim;
	bool half, split;
};

static inline struct ga_rope ga_rope_get(const struct g_op *o)
{
	return (struct ga_rope){ .head_dim = o->attr[0], .half = ga_flag(o, G_OF_HALF),
				 .split = ga_flag(o, G_OF_SPLIT) };
}

static inline void ga_rope_set(struct g_op *o, struct ga_rope a)
{
	ga_clear(o);
	o->attr[0] = a.head_dim;
	o->flags = ga_bit(a.half, G_OF_HALF) | ga_bit(a.split, G_OF_SPLIT);
}

/* attention: the head dims of q/k and of v (the plan's attention gives
 * heads) */
struct ga_attention {
	int64_t head_dim, head_dim_v;
};

static inline struct ga_attention ga_attention_get(const struct g_op *o)
{
	return (struct ga_attention){ .head_dim = o->attr[0], .head_dim_v = o->attr[1] };
}

static inline void ga_attention_set(struct g_op *o, struct ga_attention a)
{
	ga_clear(o);
	o->attr[0] = a.head_dim;
	o->attr[1] = a.head_dim_v;
}

/* ulysses_a2a's direction */
enum g_a2a_dir { G_A2A_TO_HEADS, G_A2A_TO_SEQ };

struct ga_ulysses_a2a {
	int64_t direction; /* enum g_a2a_dir */
	int64_t head_dim, seq_dim;
};

static inline struct ga_ulysses_a2a ga_ulysses_a2a_get(const struct g_op *o)
{
	return (struct ga_ulysses_a2a){ .direction = o->attr[0], .head_dim = o->attr[1],
					.seq_dim = o->attr[2] };
}

static inline void ga_ulysses_a2a_set(struct g_op *o, struct ga_ulysses_a2a a)
{
	ga_clear(o);
	o->attr[0] = a.direction;
	o->attr[1] = a.head_dim;
	o->attr[2] = a.seq_dim;
}

/* ring_attention's way of passing K/V around the ring */
enum g_rotate { G_ROT_GATHER, G_ROT_SENDRECV };

/* ring_attention: head dims as attention's, the rotate method (enum
 * g_rotate), the sequence dim; fp32 (G_OF_FP32): merge in float32 */
struct ga_ring_attention {
	int64_t head_dim, head_dim_v;
	int64_t rotate; /* enum g_rotate */
	int64_t seq_dim;
	bool fp32;
};

static inline struct ga_ring_attention ga_ring_attention_get(const struct g_op *o)
{
	return (struct ga_ring_attention){ .head_dim = o->attr[0], .head_dim_v = o->attr[1],
					   .rotate = o->attr[2], .seq_dim = o->attr[3],
					   .fp32 = ga_flag(o, G_OF_FP32) };
}

static inline void ga_ring_attention_set(struct g_op *o, struct ga_ring_attention a)
{
	ga_clear(o);
	o->attr[0] = a.head_dim;
	o->attr[1] = a.head_dim_v;
	o->attr[2] = a.rotate;
	o->attr[3] = a.seq_dim;
	o->flags = ga_bit(a.fp32, G_OF_FP32);
}

/* ---- embeddings and positions ------------------------------------------------------- */

/* timestep_embedding: diffusers' get_timestep_embedding's parameters */
struct ga_timestep_embedding {
	int64_t dim;
	double downscale_freq_shift, scale, max_period, input_scale;
	bool flip;            /* flip_sin_to_cos */
	bool input_scale_f32; /* t * input_scale in float32 whatever the dtype */
};

static inline struct ga_timestep_embedding ga_timestep_embedding_get(const struct g_op *o)
{
	return (struct ga_timestep_embedding){ .dim = o->attr[0],
					       .downscale_freq_shift = ga_double(o->attr[1]),
					       .scale = ga_double(o->attr[2]),
					       .max_period = ga_double(o->attr[3]),
					       .input_scale = ga_double(o->attr[4]),
					       .flip = ga_flag(o, G_OF_FLIP),
					       .input_scale_f32 = ga_flag(o, G_OF_SCALE_F32) };
}

static inline void ga_timestep_embedding_set(struct g_op *o, struct ga_timestep_embedding a)
{
	ga_clear(o);
	o->attr[0] = a.dim;
	o->attr[1] = ga_bits(a.downscale_freq_shift);
	o->attr[2] = ga_bits(a.scale);
	o->attr[3] = ga_bits(a.max_period);
	o->attr[4] = ga_bits(a.input_scale);
	o->flags = ga_bit(a.flip, G_OF_FLIP) | ga_bit(a.input_scale_f32, G_OF_SCALE_F32);
}

/* grid_ids: frames x height x width positions; center: rows and columns
 * centred on 0 */
struct ga_grid_ids {
	int64_t frames, height, width;
	bool center;
};

static inline struct ga_grid_ids ga_grid_ids_get(const struct g_op *o)
{
	return (struct ga_grid_ids){ .frames = o->attr[0], .height = o->attr[1],
				     .width = o->attr[2], .center = ga_flag(o, G_OF_CENTER) };
}

static inline void ga_grid_ids_set(struct g_op *o, struct ga_grid_ids a)
{
	ga_clear(o);
	o->attr[0] = a.frames;
	o->attr[1] = a.height;
	o->attr[2] = a.width;
	o->flags = ga_bit(a.center, G_OF_CENTER);
}

/* text_ids: length rows, every one of its axes at first + row */
struct ga_text_ids {
	int64_t length, first, axes;
};

static inline struct ga_text_ids ga_text_ids_get(const struct g_op *o)
{
	return (struct ga_text_ids){ .length = o->attr[0], .first = o->attr[1],
				     .axes = o->attr[2] };
}

static inline void ga_text_ids_set(struct g_op *o, struct ga_text_ids a)
{
	ga_clear(o);
	o->attr[0] = a.length;
	o->attr[1] = a.first;
	o->attr[2] = a.axes;
}

/* rope_freqs: axes_dim (zero past the axes), theta, the sine table (else
 * the cosine), float64 freqs and angles. With an ids operand its axes are
 * the ids' columns (up to G_NATTR). Without one (G_CAP_POSITIONS) it
 * computes its rows' positions as the generator folded into it
 * (compiler/fold.c) did: grid (3 axes) frames, height, width and center;
 * text (fewer than G_NATTR axes, the leading nonzero axes_dim) every axis
 * of row i at first + i. On record: attr[0 .. axes) axes_dim, then grid's
 * three sizes in attr[3..5] or text's first position in attr[5]. */
struct ga_rope_freqs {
	int64_t axes_dim[G_NATTR];
	double theta;
	bool sin, f64;
	bool grid, text;
	int64_t frames, height, width; /* grid */
	bool center;                   /* grid */
	int64_t first;                 /* text */
};

static inline struct ga_rope_freqs ga_rope_freqs_get(const struct g_op *o)
{
	struct ga_rope_freqs a = { .theta = o->eps,
				   .sin = ga_flag(o, G_OF_SIN),
				   .f64 = ga_flag(o, G_OF_F64),
				   .grid = ga_flag(o, G_OF_GRID),
				   .text = ga_flag(o, G_OF_TEXT),
				   .center = ga_flag(o, G_OF_CENTER) };
	int n = a.grid ? 3 : a.text ? G_NATTR - 1 : G_NATTR;
	for (int k = 0; k < n; k++)
		a.axes_dim[k] = o->attr[k];
	if (a.grid) {
		a.frames = o->attr[3];
		a.height = o->attr[4];
		a.width = o->attr[5];
	} else if (a.text) {
		a.first = o->attr[G_NATTR - 1];
	}
	return a;
}

static inline void ga_rope_freqs_set(struct g_op *o, struct ga_rope_freqs a)
{
	ga_clear(o);
	o->eps = a.theta;
	o->flags = ga_bit(a.sin, G_OF_SIN) | ga_bit(a.f64, G_OF_F64) |
		   ga_bit(a.grid, G_OF_GRID) | ga_bit(a.text, G_OF_TEXT) |
		   ga_bit(a.center, G_OF_CENTER);
	int n = a.grid ? 3 : a.text ? G_NATTR - 1 : G_NATTR;
	for (int k = 0; k < n; k++)
		o->attr[k] = a.axes_dim[k];
	if (a.grid) {
		o->attr[3] = a.frames;
		o->attr[4] = a.height;
		o->attr[5] = a.width;
	} else if (a.text) {
		o->attr[G_NATTR - 1] = a.first;
	}
}

/* ltx_rope_freqs: LTX-Video's rope table: dim, the temporal and spatial
 * patch, the three coordinate scales (rope_interpolation_scale), theta,
 * the sine table (else the cosine) */
struct ga_ltx_rope_freqs {
	int64_t dim, patch_t, patch;
	double scale[3];
	double theta;
	bool sin;
};

static inline struct ga_ltx_rope_freqs ga_ltx_rope_freqs_get(const struct g_op *o)
{
	return (struct ga_ltx_rope_freqs){ .dim = o->attr[0],
					   .patch_t = o->attr[1],
					   .patch = o->attr[2],
					   .scale = { ga_double(o->attr[3]), ga_double(o->attr[4]),
						      ga_double(o->attr[5]) },
					   .theta = o->eps,
					   .sin = ga_flag(o, G_OF_SIN) };
}

static inline void ga_ltx_rope_freqs_set(struct g_op *o, struct ga_ltx_rope_freqs a)
{
	ga_clear(o);
	o->attr[0] = a.dim;
	o->attr[1] = a.patch_t;
	o->attr[2] = a.patch;
	for (int k = 0; k < 3; k++)
		o->attr[3 + k] = ga_bits(a.scale[k]);
	o->eps = a.theta;
	o->flags = ga_bit(a.sin, G_OF_SIN);
}

/* ltx2_rope_freqs: LTX-2's rope table (LTX2AudioVideoRotaryPosEmbed over
 * the coordinates prepare_video_coords / prepare_audio_coords make): the
 * width dim, the axes (3: frame, row, column; 1: the frame only), the grid
 * (frames, height, width; audio: frames only), the patch (patch_t on
 * frames, patch on rows and columns), the VAE scales (scale_t, scale_s),
 * causal_offset, the time divisor (video: fps; audio: sampling_rate, after
 * the hop_length product), the bases (base_t, base_s), theta, float64
 * frequencies, the sine table. Packed: attr[0] dim | axes << 32 | audio <<
 * 40; attr[1] frames | height << 21 | width << 42; attr[2] patch_t | patch
 * << 16 | scale_t << 32 | scale_s << 48; attr[3] causal_offset | hop << 16;
 * attr[4] the float64 bits of the time divisor; attr[5] base_t | base_s <<
 * 32; eps theta; flags G_OF_SIN, G_OF_F64, G_OF_SPLIT (rope_type "split":
 * the table dim / 2 wide, one column per frequency). */
struct ga_ltx2_rope_freqs {
	int64_t dim, axes, frames, height, width, patch_t, patch, scale_t, scale_s;
	int64_t causal_offset, hop_length, base_t, base_s;
	double time_div, theta;
	bool audio, sin, f64, split;
};

static inline struct ga_ltx2_rope_freqs ga_ltx2_rope_freqs_get(const struct g_op *o)
{
	const int64_t m16 = 0xffff, m21 = (1 << 21) - 1;
	return (struct ga_ltx2_rope_freqs){
		.dim = o->attr[0] & 0xffffffff, .axes = (o->attr[0] >> 32) & 0xff,
		.audio = (o->attr[0] >> 40) & 1,
		.frames = o->attr[1] & m21, .height = (o->attr[1] >> 21) & m21,
		.width = (o->attr[1] >> 42) & m21,
		.patch_t = o->attr[2] & m16, .patch = (o->attr[2] >> 16) & m16,
		.scale_t = (o->attr[2] >> 32) & m16, .scale_s = (o->attr[2] >> 48) & m16,
		.causal_offset = o->attr[3] & m16, .hop_length = (o->attr[3] >> 16) & 0xffffffff,
		.time_div = ga_double(o->attr[4]),
		.base_t = o->attr[5] & 0xffffffff, .base_s = (o->attr[5] >> 32) & 0xffffffff,
		.theta = o->eps, .sin = ga_flag(o, G_OF_SIN), .f64 = ga_flag(o, G_OF_F64),
		.split = ga_flag(o, G_OF_SPLIT) };
}

static inline void ga_ltx2_rope_freqs_set(struct g_op *o, struct ga_ltx2_rope_freqs a)
{
	ga_clear(o);
	/* shifted unsigned: scale_s up to 2^16 - 1 and base_s up to 2^32 - 1
	 * fill the top bits, past int64_t's range (the compiler's limits) */
	o->attr[0] = (int64_t)((uint64_t)a.dim | (uint64_t)a.axes << 32 | (uint64_t)a.audio << 40);
	o->attr[1] = (int64_t)((uint64_t)a.frames | (uint64_t)a.height << 21 |
			       (uint64_t)a.width << 42);
	o->attr[2] = (int64_t)((uint64_t)a.patch_t | (uint64_t)a.patch << 16 |
			       (uint64_t)a.scale_t << 32 | (uint64_t)a.scale_s << 48);
	o->attr[3] = (int64_t)((uint64_t)a.causal_offset | (uint64_t)a.hop_length << 16);
	o->attr[4] = ga_bits(a.time_div);
	o->attr[5] = (int64_t)((uint64_t)a.base_t | (uint64_t)a.base_s << 32);
	o->eps = a.theta;
	o->flags = ga_bit(a.sin, G_OF_SIN) | ga_bit(a.f64, G_OF_F64) | ga_bit(a.split, G_OF_SPLIT);
}

/* patch_embed and unpatchify: the patch (t, h, w; t = 1 for a Conv2d's);
 * patch_embed's bias (G_OF_BIAS), operand 2 */
struct ga_patch {
	int64_t patch[3];
	bool bias;
};

static inline struct ga_patch ga_patch_get(const struct g_op *o)
{
	return (struct ga_patch){ .patch = { o->attr[0], o->attr[1], o->attr[2] },
				  .bias = ga_flag(o, G_OF_BIAS) };
}

static inline void ga_patch_set(struct g_op *o, struct ga_patch a)
{
	ga_clear(o);
	for (int k = 0; k < 3; k++)
		o->attr[k] = a.patch[k];
	o->flags = ga_bit(a.bias, G_OF_BIAS);
}
#endif
