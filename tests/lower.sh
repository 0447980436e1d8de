#!/bin/sh
# lower.sh BUILD — the lowering: goldens of the op list a rank runs, the
# compile report's communication volume against the closed forms, and
# determinism. Ends with "lower: N passed, N failed, N skipped". UPDATE=1
# rewrites goldens (counted as rewritten).
set -u
BUILD=${1:-build}
. tests/lib.sh

# meaning GRAPH RANK: what a rank runs, as `dtpc inspect` prints it: the
# ops, their shapes, inputs and outputs, the collectives with their groups and
# volumes, the weights' slices; without the graph's checksum and the plan's
# source hash, which change with any byte of the plan file (a comment), and
# without what the memory plan decides (the file's size, the arena's size,
# each tensor's offset in it), which a change of the memory plan alone moves
# in every golden. A golden that holds them fails on every such edit and
# trains blind regeneration; tests/unit and the equivalence runs check the
# memory plan itself.
meaning() {
	"$DTPC" inspect "$1" --rank "$2" 2>&1 |
		sed -e 's/^\(graph: \)[0-9]* bytes \(.*\), checksum [0-9a-f]*$/\1\2/' \
			-e '/^  source_hash  /d' \
			-e 's/^\(program: .*\); arena [0-9]* bytes per rank$/\1/' \
			-e 's/^\(  memory: \)arena [0-9.]* [KMG]*i*B (activations and communication buffers), /\1/' \
			-e 's/^\(    %[0-9]* *[a-z]*\) *offset *[0-9]* */\1 /'
}

# golden NAME PLAN MESH CONTEXT RANK DEFINES... (of the plan file $LFILE)
LFILE=tests/lower/tiny.plan
golden() {
	g_name=$1 g_plan=$2 g_mesh=$3 g_ctx=$4 g_rank=$5
	shift 5
	compile_mesh "$LFILE" "$g_plan" "$g_mesh" "$g_ctx" "$tmp/g.graph" "$@" \
		>"$tmp/c" 2>&1 || { bad "lower/$g_name (compile)"; cat "$tmp/c"; return; }
	meaning "$tmp/g.graph" "$g_rank" >"$tmp/out"
	compare "lower/$g_name" "tests/lower/$g_name.expected" "$tmp/out"
}

golden tp tp "tp = 2" "" 0
golden ulysses2 all "ulysses = 2" "" 0
golden ring2-allgather all "ring = 2" 'rotate_method = "allgather"' 1
golden ring2-alltoall all "ring = 2" 'rotate_method = "alltoall"' 1
golden ring2xulysses2 all "ring = 2, ulysses = 2" "" 3
golden tp2xulysses2xring2 all "ring = 2, ulysses = 2, tp = 2" "" 5
golden ulysses-anything3 all "ulysses = 3" "ulysses_anything = true" 2 -D seq=50 -D heads=5 -D hidden=40
golden ring-anything3 all "ring = 3" "ring_anything = true" 2 -D seq=50
# CFG parallel: the batch (dim 0 of the input written [batch, ...]) sharded
# over cfg, the rest of the model on its own ulysses/tp groups, the output
# all-gathered over cfg at the end
golden cfg2xulysses2xtp2 all "cfg = 2, ulysses = 2, tp = 2" "" 5 -D batch=2
# LTX-Video's RoPE over the whole inner dim (tests/lower/ltx_rope.plan):
# its tables sliced by columns with the heads under tp, by rows with the
# sequence under ulysses, locally both times
LFILE=tests/lower/ltx_rope.plan
golden ltx-rope-tp2 tp "tp = 2" "" 1
golden ltx-rope-ulysses2 cp "ulysses = 2" "" 1
# a key-padding mask: gathered for Ulysses, cut to the ring's part of the
# sequence under USP, split like the keys (and rotated with them) for a ring
LFILE=tests/lower/mask.plan
golden mask-ulysses2 cp "ulysses = 2" "" 1
golden mask-ring2-alltoall cp "ring = 2" 'rotate_method = "alltoall"' 1
golden mask-ring2xulysses2 cp "ring = 2, ulysses = 2" "" 3
golden mask-ring-anything3 cp "ring = 3" "ring_anything = true" 2
# the language of diffusers' forward (tests/plans/forward.plan): pos_embed's
# tables sharded where the tuple is written (out.0 to out.3), the rebound
# hidden_states / encoder_hidden_states sharded where they enter
# transformer_blocks.0 (not at the root), final's out.1 gathered, the output
# named sample
LFILE=tests/plans/forward.plan
golden forward-ring2xulysses2 forward_cp "ring = 2, ulysses = 2" "" 3
LFILE=tests/lower/tiny.plan
golden ring2-bf16 all "ring = 2" "" 1 --dtype bf16

# The compile report (-v) of the same plan in f32 and in bf16 (goldens), and
# its figures: bf16 weights are exactly half of f32's; the arena less than
# f32's yet more than half of it (ring attention's log-sum-exps and, under
# convert_to_fp32, its accumulator stay float32).
report() {
	r_dtype=$1
	"$DTPC" tests/lower/tiny.plan --plan all --mesh "ring = 2, tp = 2" --dtype "$r_dtype" \
		-o "$tmp/r.graph" -v >"$tmp/report-$r_dtype" 2>&1 || { bad "report/$r_dtype"; return; }
	compare "lower/report-ring2xtp2-$r_dtype" "tests/lower/report-ring2xtp2-$r_dtype.expected" \
		"$tmp/report-$r_dtype"
}
report f32
report bf16
figure() { sed -n "s/.*activation arena \([0-9]*\) bytes, weights \([0-9]*\) bytes/\1 \2/p" "$1" | head -1; }
set -- $(figure "$tmp/report-f32") $(figure "$tmp/report-bf16")
if [ $# = 4 ] && [ "$4" -eq $(($2 / 2)) ] && [ "$3" -lt "$1" ] && [ "$3" -gt $(($1 / 2)) ]; then
	ok
else
	bad "report/bf16-halves: f32 arena and weights $1 $2, bf16 $3 $4"
fi

# A comment appended to the plan changes the checksum and the source hash (the
# raw inspect output differs: else this check would prove nothing) and not
# the goldens' text.
mkdir -p "$tmp/c1"
cp tests/lower/tiny.plan "$tmp/c1/tiny.plan"
"$DTPC" "$tmp/c1/tiny.plan" --plan all -o "$tmp/c1/a.graph" >/dev/null 2>&1
echo "# a comment changes no lowering" >>"$tmp/c1/tiny.plan"
"$DTPC" "$tmp/c1/tiny.plan" --plan all -o "$tmp/c1/b.graph" >/dev/null 2>&1
if ! "$DTPC" inspect "$tmp/c1/a.graph" >"$tmp/c1/a" 2>&1 ||
	! "$DTPC" inspect "$tmp/c1/b.graph" >"$tmp/c1/b" 2>&1; then
	bad "lower/comment (compile)"
elif cmp -s "$tmp/c1/a" "$tmp/c1/b"; then
	bad "lower/comment: the source hash did not change with the file"
elif [ "$(meaning "$tmp/c1/a.graph" 0)" = "$(meaning "$tmp/c1/b.graph" 0)" ]; then
	ok
else
	bad "lower/comment: a comment in the plan changes the golden text"
	meaning "$tmp/c1/a.graph" 0 >"$tmp/c1/ma"
	meaning "$tmp/c1/b.graph" 0 | diff -u "$tmp/c1/ma" - | head -20
fi

# Communication per rank and forward pass against the closed forms, float32
# (b = 4), tiny DiT: 2 blocks, S = 64 tokens, H = 128 hidden.
# volume NAME PLAN MESH KIND EXPECTED_BYTES DEFINES... (of the plan file $LFILE)
volume() {
	v_name=$1 v_plan=$2 v_mesh=$3 v_kind=$4 v_want=$5
	shift 5
	"$DTPC" "$LFILE" --plan "$v_plan" --mesh "$v_mesh" \
		--context 'rotate_method = "allgather"' -o "$tmp/v.graph" -v "$@" >"$tmp/v" 2>&1
	got=$(awk -v k="$v_kind" '$1 == "rank" && $2 == "0," { r = 1 } r && $1 == k { print $(NF - 1); exit }' "$tmp/v")
	if [ "$got" = "$v_want" ]; then ok; else
		bad "volume/$v_name: $v_kind moved $got bytes, the closed form says $v_want"
		cat "$tmp/v"
	fi
}
S=64 H=128 b=4 L=2
# Ulysses: 4 all-to-alls (q, k, v, out) of (S/P)·H·b, each sending (P-1)/P
for P in 2 4; do
	volume "ulysses$P" all "ulysses = $P" ulysses_a2a $((L * 4 * (S / P) * H * b * (P - 1) / P))
done
# Ring, all-gather: K and V, (P-1) chunks of (S/P)·H·b each
for P in 2 4; do
	volume "ring$P" all "ring = $P" ring_attention $((L * 2 * (S / P) * H * b * (P - 1)))
done
# TP: a ring all-reduce of 2·S·H·b·(T-1)/T per rowwise output (2 per block)
for T in 2 4; do
	volume "tp$T" tp "tp = $T" all_reduce $((L * 2 * 2 * S * H * b * (T - 1) / T))
done
# CFG parallel (batch B = 2 split over C ranks): each rank runs B/C samples,
# so TP's all-reduces carry B/C of the batch; the output's all-gather over
# cfg receives (C-1)/C of B·S·H·b. A bad lowering that ran the whole batch on
# every rank would all-reduce twice the bytes.
B=2
for C in 2; do
	volume "cfg$C" tp "cfg = $C" all_gather $((B * S * H * b * (C - 1) / C)) -D batch=$B
	volume "cfg${C}xtp2" tp "cfg = $C, tp = 2" all_reduce \
		$((L * 2 * 2 * (B / C) * S * H * b * (2 - 1) / 2)) -D batch=$B
	volume "cfg${C}xulysses2" all "cfg = $C, ulysses = 2" ulysses_a2a \
		$((L * 4 * (B / C) * (S / 2) * H * b * (2 - 1) / 2)) -D batch=$B
done

# Sequence-parallel TP (tests/plans/sp.plan, the tiny DiT): each rowwise
# output is reduce-scattered along the sequence, S·H·b·(T-1)/T, and each
# colwise input all-gathered, the same: together the all-reduce's 2·S·H·b·(T-1)/T
# (2 rowwise, 2 gathered inputs per block). Without it: no reduce-scatter.
LFILE=tests/plans/sp.plan
for T in 2 4; do
	volume "sp-tp$T-reduce-scatter" tiny_sp "tp = $T" reduce_scatter $((L * 2 * S * H * b * (T - 1) / T))
	volume "sp-tp$T-all-gather" tiny_sp "tp = $T" all_gather $((L * 2 * S * H * b * (T - 1) / T))
done
golden sp-tp2 tiny_sp "tp = 2" "" 1
LFILE=tests/lower/tiny.plan

# FSDP (tests/plans/fsdp.plan, tiny_fsdp_all: every weight fsdp-sharded,
# nothing else split): each weight is all-gathered once, every rank
# receiving (P-1)/P of it, so the all-gathers move Wb·(P-1)/P and each rank
# stores Wb/P of weights, where W counts the tiny DiT's weights: per block
# 4 linears H×H + H, 2 layer norms 2H, ff F×H + F and H×F + H; proj_out
# H×H + H (F = 512; 413056 floats, all rows divisible by 2 and 4). At
# ulysses = 1 the style does nothing: no all-gather, the whole weights.
LFILE=tests/plans/fsdp.plan
# the graph: each block weight stored as the rank's rows (uneven: 128 and
# 512 rows over 3, rank 2 holds the fewest) and all-gathered into the arena
# just before its op
golden fsdp-ring3 tiny_fsdp "ring = 3" "ring_anything = true" 2
F=512
W=$((L * (4 * (H * H + H) + 4 * H + 2 * F * H + F + H) + H * H + H))
for P in 2 4; do
	volume "fsdp-ulysses$P" tiny_fsdp_all "ulysses = $P" all_gather $((W * b * (P - 1) / P))
	if grep -q "weights $((W * b / P)) bytes" "$tmp/v"; then ok; else
		bad "volume/fsdp-ulysses$P: the weights per rank are not $((W * b / P)) bytes (1/$P)"
		cat "$tmp/v"
	fi
done
volume fsdp-ulysses1 tiny_fsdp_all "ulysses = 1" communication 0
if grep -q '^  all_gather' "$tmp/v" || ! grep -q "weights $((W * b)) bytes" "$tmp/v"; then
	bad "volume/fsdp-ulysses1: fsdp at ring x ulysses = 1 gathered or split weights"
	cat "$tmp/v"
else ok; fi
LFILE=tests/lower/tiny.plan

# Distributed norms (tests/lower/ltx_qk.plan, LTX-Video's q/k RMSNorm over
# the whole inner dim I = 2048 after a colwise to_q / to_k, S = 64 tokens,
# T = 4): each norm all-reduces one float per token, 2·S·b·(T-1)/T, beside
# the rowwise to_out's 2·S·H·b·(T-1)/T; no all-gather at all. Without the
# distributed norm each would all-gather to_q: S·I·b·(T-1)/T. The norm's
# bytes must be at most 1% of that (issue 12: 2/I = 0.1%).
LFILE=tests/lower/ltx_qk.plan
T=4 I=2048
norm=$((2 * S * b * (T - 1) / T)) gathered=$((S * I * b * (T - 1) / T))
volume ltx-qk-norm-tp4 tp "tp = $T" all_reduce $((2 * norm + 2 * S * I * b * (T - 1) / T))
if grep -q '^  all_gather' "$tmp/v"; then
	bad "volume/ltx-qk-norm-tp4: an all-gather is left"
	cat "$tmp/v"
elif [ $((100 * norm)) -le "$gathered" ]; then ok; else
	bad "volume/ltx-qk-norm-tp4: the norm moves $norm bytes, more than 1% of $gathered"
fi
LFILE=tests/lower/tiny.plan

# In bf16 the all-to-alls and ring exchanges move 2 bytes an element; an
# all-reduce still moves float32 (it sums in float32, rounding once after).
volume_bf16() {
	v_name=$1 v_plan=$2 v_mesh=$3 v_kind=$4 v_want=$5
	"$DTPC" tests/lower/tiny.plan --plan "$v_plan" --mesh "$v_mesh" --dtype bf16 \
		--context 'rotate_method = "allgather"' -o "$tmp/v.graph" -v >"$tmp/v" 2>&1
	got=$(awk -v k="$v_kind" '$1 == "rank" && $2 == "0," { r = 1 } r && $1 == k { print $(NF - 1); exit }' "$tmp/v")
	if [ "$got" = "$v_want" ]; then ok; else
		bad "volume/$v_name: $v_kind moved $got bytes, the closed form says $v_want"
		cat "$tmp/v"
	fi
}
volume_bf16 ulysses2-bf16 all "ulysses = 2" ulysses_a2a $((L * 4 * (S / 2) * H * 2 / 2))
volume_bf16 ring2-bf16 all "ring = 2" ring_attention $((L * 2 * (S / 2) * H * 2))
volume_bf16 tp2-bf16 tp "tp = 2" all_reduce $((L * 2 * 2 * S * H * 4 / 2))

# The mask (tests/lower/mask.plan: B = 2, S = 8 + 24 = 32 tokens, W = 32):
# with a ring each chunk of K and V carries its mask rows, so all-gathering
# them moves (P-1)·(S/P)·B·(2W + 1)·b; Ulysses all-gathers the mask, (P-1)/P
# of S·B·b, besides the output's gather, (P-1)/P of S·B·W·b.
LFILE=tests/lower/mask.plan
S=32 B=2 W=32
for P in 2 4; do
	volume "mask-ring$P" cp "ring = $P" ring_attention $(((P - 1) * (S / P) * B * (2 * W + 1) * b))
	volume "mask-ulysses$P" cp "ulysses = $P" all_gather \
		$(((P - 1) * S * B * b / P + (P - 1) * S * B * W * b / P))
done
LFILE=tests/lower/tiny.plan

# Determinism: the same inputs give the same bytes.
"$DTPC" tests/lower/tiny.plan --plan all -o "$tmp/a.graph" >/dev/null 2>&1
"$DTPC" tests/lower/tiny.plan --plan all -o "$tmp/b.graph" >/dev/null 2>&1
if cmp -s "$tmp/a.graph" "$tmp/b.graph"; then ok; else bad "determinism"; fi
"$DTPC" examples/flux.plan --plan flux_ring2_ulysses2_tp2 -o "$tmp/a.graph" >/dev/null 2>&1
"$DTPC" examples/flux.plan --plan flux_ring2_ulysses2_tp2 -o "$tmp/b.graph" >/dev/null 2>&1
if cmp -s "$tmp/a.graph" "$tmp/b.graph"; then ok; else bad "determinism/flux"; fi

# Every plan of every example compiles.
for f in examples/*.plan; do
	for p in $(sed -n 's/^plan \([A-Za-z0-9_]*\).*/\1/p' "$f"); do
		if "$DTPC" "$f" --plan "$p" -o "$tmp/e.graph" >"$tmp/e" 2>&1; then ok; else
			bad "compile/$f/$p"
			head -10 "$tmp/e"
		fi
	done
done
# DOT output renders with Graphviz (the tiny DiT: dot is slow on big graphs).
"$DTPC" tests/lower/tiny.plan --plan all -o "$tmp/t.graph" >/dev/null 2>&1
if command -v dot >/dev/null 2>&1; then
	"$DTPC" inspect "$tmp/t.graph" --format dot >"$tmp/g.dot" &&
		dot -Tsvg "$tmp/g.dot" -o "$tmp/g.svg" 2>"$tmp/dot" && ok || {
		bad "inspect/dot"
		cat "$tmp/dot"
	}
else
	echo "SKIPPED LOUDLY: graphviz (dot) is not installed"
	bad "inspect/dot (graphviz missing)"
fi
summary lower
