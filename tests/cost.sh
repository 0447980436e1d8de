#!/bin/sh
# cost.sh BUILD — `dtpc cost` and `dtpc suggest` (docs/cost-model.md): goldens
# of the text report on small plans, well-formed JSON, closed forms (the
# bytes the cost model charges equal graph_stats' compile report; one
# linear's FLOPs are 2mkn; bf16 halves bytes (not the all-reduce's) and memory), suggest's order,
# profiles that lack a source refused, hostile profiles and command lines
# refused with exit 2 and the field's path. Ends with "cost: N passed, N failed,
# N skipped". UPDATE=1 rewrites goldens (counted as rewritten).
set -u
BUILD=${1:-build}
. tests/lib.sh
CPU=hw/cpu-local.json
have_py=$(command -v python3 >/dev/null 2>&1 && echo 1)

# golden NAME ARGS...: the text report of `dtpc cost ARGS`
golden() {
	gd_name=$1
	shift
	"$DTPC" cost "$@" >"$tmp/out" 2>&1 || { bad "cost/$gd_name (exit $?)"; cat "$tmp/out"; return; }
	compare "cost/$gd_name" "tests/cost/$gd_name.expected" "$tmp/out"
}
golden tiny-usp tests/lower/tiny.plan --plan all --mesh "ring = 2, ulysses = 2" --hw $CPU
golden tiny-tp-mpi tests/lower/tiny.plan --plan tp --hw hw/cpu-mpi.json
golden tiny-ring-rotate tests/lower/tiny.plan --plan all --mesh "ring = 4" \
	--context 'rotate_method = "alltoall"' --hw hw/h100-sxm.json
golden tiny-uneven tests/lower/tiny.plan --plan all --mesh "ring = 3" \
	--context 'ring_anything = true' -D seq=50 --hw hw/h100-ib.json
# 16 ranks on nodes of 8: the ring group spans the two nodes (InfiniBand),
# the Ulysses group stays in one (NVLink)
golden tiny-two-nodes tests/lower/tiny.plan --plan all --mesh "ring = 4, ulysses = 4" \
	-D seq=128 --hw hw/h100-ib.json

# json NAME FILE PYTHON: FILE parsed as JSON into j, then the Python
# expression must hold (skipped without python3).
json_check() {
	if [ -z "$have_py" ]; then
		skipped "cost/$1" "python3 is not installed"
		return
	fi
	if python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($3) else 1)" "$2" \
		>"$tmp/py" 2>&1; then
		ok
	else
		bad "cost/$1"
		cat "$tmp/py"
	fi
}

# Every profile loads, and its JSON output is well formed with a rank each.
for hw in hw/*.json; do
	n=$(basename "$hw" .json)
	if "$DTPC" cost tests/lower/tiny.plan --plan all --hw "$hw" --dtype f32 --format json \
		>"$tmp/$n.json" 2>"$tmp/err"; then
		json_check "json-$n" "$tmp/$n.json" "len(j['ranks']) == j['world'] == 8 and j['step_s'] > 0"
	elif grep -q "has no rates for f32" "$tmp/err"; then
		skipped "cost/json-$n" "the profile has no f32 rates"
	else
		bad "cost/json-$n"
		cat "$tmp/err"
	fi
done

# The bytes charged per collective kind and axis equal the compile report's
# (graph_stats, float32), for the first and the last rank.
bytes_case() {
	bc_name=$1 bc_mesh=$2 bc_ctx=$3
	shift 3
	compile_mesh tests/lower/tiny.plan all "$bc_mesh" "$bc_ctx" "$tmp/b.graph" -v "$@" \
		>"$tmp/report" 2>&1 || { bad "cost/bytes-$bc_name (compile)"; return; }
	if [ -n "$bc_ctx" ]; then
		"$DTPC" cost tests/lower/tiny.plan --plan all --mesh "$bc_mesh" --context "$bc_ctx" "$@" \
			--hw $CPU --format json >"$tmp/b.json" 2>/dev/null
	else
		"$DTPC" cost tests/lower/tiny.plan --plan all --mesh "$bc_mesh" "$@" \
			--hw $CPU --format json >"$tmp/b.json" 2>/dev/null
	fi
	if [ -z "$have_py" ]; then
		skipped "cost/bytes-$bc_name" "python3 is not installed"
		return
	fi
	if python3 - "$tmp/report" "$tmp/b.json" >"$tmp/py" 2>&1 <<'EOF'; then
import json, re, sys
report, j = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
ranks = {int(m.group(1)): m.start() for m in re.finditer(r"^rank (\d+), per forward pass", report, re.M)}
assert len(ranks) >= 1, report
for r, start in ranks.items():
    want = {}
    for m in re.finditer(r"^  (\w+)\s+over (\S+)\s+(\d+) ops\s+(\d+) bytes", report[start:], re.M):
        if (m.group(1), m.group(2)) in want:
            break
        want[(m.group(1), m.group(2))] = int(m.group(4))
    got = {(c["op"], c["axes"]): c["bytes"] for c in j["ranks"][r]["communication"]}
    assert got == want, (r, got, want)
EOF
		ok
	else
		bad "cost/bytes-$bc_name"
		cat "$tmp/py"
	fi
}
bytes_case usp "ring = 2, ulysses = 2, tp = 2" ""
bytes_case ring-rotate "ring = 4" 'rotate_method = "alltoall"'
bytes_case ulysses-anything "ulysses = 3" 'ulysses_anything = true' -D seq=50 -D heads=5 -D hidden=40
bytes_case ring-anything "ring = 3" 'ring_anything = true' -D seq=50

# One linear: 2mkn FLOPs (m = 2 x 24 rows, k = 40, n = 56), half per rank at
# tp 2; its weight memory k n (+ n bias) floats.
"$DTPC" cost tests/cost/one_linear.plan --plan single --hw $CPU --format json >"$tmp/l1.json" 2>/dev/null
"$DTPC" cost tests/cost/one_linear.plan --plan tp2 --hw $CPU --format json >"$tmp/l2.json" 2>/dev/null
json_check linear-2mkn "$tmp/l1.json" \
	"j['ranks'][0]['flops']['linear'] == 2*48*40*56 and j['ranks'][0]['memory_bytes']['weights'] == 4*(40*56+56)"
json_check linear-tp2 "$tmp/l2.json" \
	"all(r['flops']['linear'] == 48*40*56 for r in j['ranks'])"

# The tables and the position grids (tests/cost/tables.plan) are kernels of
# their own, not rope: on a profile of one thread whose memory moves 1e3
# bytes/s and rope 1 byte/s, each moves its result and its operands in
# float32 at memory_bytes_per_s, and counts its result's elements as
# pointwise work. Bytes: timestep_embedding [2, 32] + t [2]; grid_ids and
# text_ids [24, 3]; the two rope_freqs, their positions folded in, [24, 16]
# and [8, 16]; ltx_rope_freqs [24, 48] + pos [24, 3].
if [ -n "$have_py" ]; then
	python3 - $CPU "$tmp/slowrope.json" <<'EOF2'
import json, sys
j = json.load(open(sys.argv[1]))
src = lambda v: {"value": v, "source": "made up by tests/cost.sh"}
j["threads_per_node"] = src(1)
j["dtypes"]["f32"]["memory_bytes_per_s"] = src(1e3)
j["dtypes"]["f32"]["op_bytes_per_s"] = {"rope": src(1)}
json.dump(j, open(sys.argv[2], "w"))
EOF2
	"$DTPC" cost tests/cost/tables.plan --plan single --hw "$tmp/slowrope.json" --format json \
		>"$tmp/tables.json" 2>&1
	json_check tables-not-rope "$tmp/tables.json" \
		"abs(j['ranks'][0]['time_by_resource_s']['memory'] - 4 * (66 + 72 + 72 + 384 + 128 + 1224) / 1e3) < 1e-9 and j['ranks'][0]['flops']['pointwise'] == 64 + 72 + 72 + 384 + 128 + 1152"
else
	skipped cost/tables-not-rope "python3 is not installed"
fi

# Attention: 4 B H Sq Skv D in one rank's attention ops (tiny DiT: 2 blocks,
# S = 64, H x D = 128).
"$DTPC" cost tests/lower/tiny.plan --plan tp --mesh "tp = 1" --hw $CPU --format json \
	>"$tmp/a.json" 2>/dev/null
json_check attention-4bhssd "$tmp/a.json" "j['ranks'][0]['flops']['attention'] == 2*4*64*64*128"

# bf16 halves communication bytes and memory against f32, but for the
# all-reduce, which sums in float32 whatever the dtype (runtime/exec.c).
"$DTPC" cost tests/lower/tiny.plan --plan all --hw hw/h100-sxm.json --dtype f32 --format json \
	>"$tmp/f32.json" 2>/dev/null
"$DTPC" cost tests/lower/tiny.plan --plan all --hw hw/h100-sxm.json --dtype bf16 --format json \
	>"$tmp/bf16.json" 2>/dev/null
if [ -n "$have_py" ] && python3 -c "
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for ra, rb in zip(a['ranks'], b['ranks']):
    assert [c['bytes'] / (1 if c['op'] == 'all_reduce' else 2) for c in ra['communication']] == [c['bytes'] for c in rb['communication']]
    assert any(c['op'] == 'all_reduce' for c in ra['communication'])
    assert ra['memory_bytes']['total'] == 2 * rb['memory_bytes']['total']
" "$tmp/f32.json" "$tmp/bf16.json" >"$tmp/py" 2>&1; then
	ok
elif [ -z "$have_py" ]; then
	skipped cost/bf16-halves "python3 is not installed"
else
	bad cost/bf16-halves
	cat "$tmp/py"
fi

# suggest: ranked by predicted time, the ones that fit first; every mesh of
# the world that compiles is listed (tiny DiT, world 4: 6 meshes, 4 with a
# ring, each with both rotate methods: 10, less ring 1 x ulysses 1 x tp 4,
# refused since the plan's ring and ulysses styles need a context group: 8),
# but for those with an axis the plan splits nothing over (plan tp, with no
# context rules: only tp 4 is listed, the 8 others with ring or ulysses are
# left out, said once); a refused mesh is named with the compiler's first
# error; --max-mem below the weights marks all. Goldens: plan all with a
# --max-mem that only the tp 2 meshes fit (listed first), plan tp.
sugg() {
	"$DTPC" suggest tests/lower/tiny.plan --plan all --world 4 --top 50 "$@" 2>&1
}
sugg --hw $CPU --max-mem 1200000 >"$tmp/sg"
compare cost/suggest-fits-first tests/cost/suggest-fits-first.expected "$tmp/sg"
"$DTPC" suggest tests/lower/tiny.plan --plan tp --world 4 --top 50 --hw $CPU >"$tmp/sg" 2>&1
compare cost/suggest-unused-axes tests/cost/suggest-unused-axes.expected "$tmp/sg"
sugg --hw $CPU >"$tmp/s" || bad "cost/suggest (exit)"
times=$(sed -n 's/^ *[0-9]*\. .* \([0-9.]*\) ms .*/\1/p' "$tmp/s")
if [ "$(echo "$times" | wc -l)" = 8 ] && [ "$(echo "$times" | sort -g)" = "$times" ] &&
	grep -q "8 meshes pass check, 1 refused" "$tmp/s"; then
	ok
else
	bad "cost/suggest-order"
	cat "$tmp/s"
fi
sugg --hw $CPU --max-mem 1000 >"$tmp/s2"
if [ "$(grep -c "(does not fit)" "$tmp/s2")" = 8 ] && grep -q "memory-bound" "$tmp/s2"; then
	ok
else
	bad "cost/suggest-max-mem"
	cat "$tmp/s2"
fi
sugg --hw $CPU --top 3 >"$tmp/s3"
[ "$(grep -c '^ *[0-9]*\. ' "$tmp/s3")" = 3 ] && ok || bad "cost/suggest-top"

# Refusals: a number without its source, no --hw, a dtype the profile lacks.
sed 's/"source": "measured here, docs\/comm.md[^"]*"/"source": ""/' $CPU >"$tmp/nosrc.json"
"$DTPC" cost tests/lower/tiny.plan --plan all --hw "$tmp/nosrc.json" >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q "alpha_s: the value has no source" "$tmp/o" && ok ||
	{ bad "cost/refuse-no-source"; cat "$tmp/o"; }
"$DTPC" cost tests/lower/tiny.plan --plan all >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q "needs --hw" "$tmp/o" && ok || { bad "cost/refuse-no-hw"; cat "$tmp/o"; }
"$DTPC" cost tests/lower/tiny.plan --plan all --hw $CPU --dtype bf16 >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q "no rates for bf16" "$tmp/o" && ok || { bad "cost/refuse-dtype"; cat "$tmp/o"; }
"$DTPC" cost tests/lower/tiny.plan --plan all --mesh "ulysses = 3" --hw $CPU >"$tmp/o" 2>&1
[ $? = 1 ] && grep -q "error" "$tmp/o" && ok || { bad "cost/refuse-plan-error"; cat "$tmp/o"; }

# The calibrated fields read back (docs/cost-model.md, "Ranks that share
# cores"): a profile with a by_ranks table and a by_group table of made-up
# figures; each predicted component must be its closed form with the row
# for the run's rank count (or the nearest, scaled by the cores a rank
# gets), and the profile without the tables must give other figures (the
# negative control: the tables are really read).
if [ -n "$have_py" ]; then
	python3 - $CPU "$tmp/tab" <<'EOF'
import copy, json, sys
j = json.load(open(sys.argv[1]))
src = lambda v: {"value": v, "source": "made up by tests/cost.sh"}
def row(n, peak, fixed, score):
    return {"ranks": src(n), "launch_s": src(1e-9),
            "linear": {"peak_flops": src(peak), "fixed_s": src(fixed)},
            "attention": {"peak_flops": src(2 * peak), "fixed_s": src(0), "score_s": src(score)},
            "memory_bytes_per_s": src(1e9),
            "op_bytes_per_s": {"copy": src(2e9), "layer_norm": src(5e8)}}
f = j["dtypes"]["f32"]
f["by_ranks"] = [row(1, 4e9, 1e-4, 0), row(2, 1e9, 2e-4, 1e-9)]
coll = {"all_gather_alpha_s": 1e-3, "all_gather_busbw": 1e6, "all_reduce_alpha_s": 0,
        "all_reduce_busbw": 1e9, "all_to_all_alpha_s": 0, "all_to_all_busbw": 1e9,
        "p2p_alpha_s": 0, "p2p_busbw": 1e9}
j["links"]["intra"]["by_group"] = [dict({"group": src(2)}, **{k: src(v) for k, v in coll.items()})]
json.dump(j, open(sys.argv[2] + ".json", "w"))
one = copy.deepcopy(j)
one["dtypes"]["f32"]["by_ranks"] = [row(1, 4e9, 1e-4, 0)]
json.dump(one, open(sys.argv[2] + "-one.json", "w"))
bad = copy.deepcopy(j)
del bad["threads_per_node"]
json.dump(bad, open(sys.argv[2] + "-nothreads.json", "w"))
bad = copy.deepcopy(j)
bad["dtypes"]["f32"]["by_ranks"][0]["op_bytes_per_s"]["softmax"] = src(1e9)
json.dump(bad, open(sys.argv[2] + "-badop.json", "w"))
bad = copy.deepcopy(j)
bad["dtypes"]["f32"]["by_ranks"][1]["ranks"] = src(1)
json.dump(bad, open(sys.argv[2] + "-twice.json", "w"))
bad = copy.deepcopy(j)
bad["links"]["intra"]["by_group"][0]["group"] = src(1)
json.dump(bad, open(sys.argv[2] + "-group1.json", "w"))
bad = copy.deepcopy(j)
bad["links"]["intra"]["overlap"] = src(0.5)
json.dump(bad, open(sys.argv[2] + "-overlap.json", "w"))
over = json.load(open(sys.argv[1]))
over["links"]["intra"]["overlap"] = src(1)
json.dump(over, open(sys.argv[2] + "-overlap1.json", "w"))
# a GPU-like node of 10 SMs whose send/recv kernel holds 4 of them
over["sms"] = src(10)
over["links"]["intra"]["p2p_ctas"] = src(4)
json.dump(over, open(sys.argv[2] + "-ctas.json", "w"))
bad = copy.deepcopy(j)
bad["links"]["intra"]["p2p_ctas"] = src(8)
json.dump(bad, open(sys.argv[2] + "-nosms.json", "w"))
bad["sms"] = src(8)
json.dump(bad, open(sys.argv[2] + "-allsms.json", "w"))
EOF
	L=tests/cost/one_linear.plan
	"$DTPC" cost $L --plan single --hw "$tmp/tab.json" --format json >"$tmp/t1.json" 2>/dev/null
	"$DTPC" cost $L --plan tp2 --hw "$tmp/tab.json" --format json >"$tmp/t2.json" 2>/dev/null
	"$DTPC" cost $L --plan tp2 --hw "$tmp/tab-one.json" --format json >"$tmp/t3.json" 2>/dev/null
	"$DTPC" cost $L --plan tp2 --hw $CPU --format json >"$tmp/t4.json" 2>/dev/null
	near() { echo "abs($1 - ($2)) <= 1e-9 * abs($2)"; }
	lin="j['ranks'][0]['time_by_resource_s']['linear']"
	# world 1: row 1; world 2: row 2, and the all-gather from by_group's row
	json_check table-rank1 "$tmp/t1.json" "$(near "$lin" "1e-4 + 2*48*40*56 / 4e9")"
	json_check table-rank2 "$tmp/t2.json" "$(near "$lin" "2e-4 + 48*40*56 / 1e9") and $(near "j['ranks'][0]['communication'][0]['time_s']" "1e-3 + 5376 / 1e6")"
	# world 2 from row 1 alone: each rank has one of the 2 cores, not both
	json_check table-nearest "$tmp/t3.json" "$(near "$lin" "1e-4 + 48*40*56 / (4e9 / 2)")"
	json_check table-control "$tmp/t4.json" "not ($(near "$lin" "2e-4 + 48*40*56 / 1e9"))"
	# attention's per-score term: tiny DiT, 4 heads of 32, so the scores are
	# the FLOPs / (4 x 32); world 1 (row 1: no score term), world 2 (row 2)
	att="j['ranks'][0]['time_by_resource_s']['attention']"
	fl="j['ranks'][0]['flops']['attention']"
	"$DTPC" cost tests/lower/tiny.plan --plan tp --mesh "tp = 1" --hw "$tmp/tab.json" \
		--format json >"$tmp/t5.json" 2>/dev/null
	json_check table-attention "$tmp/t5.json" "$(near "$att" "$fl / 8e9")"
	"$DTPC" cost tests/lower/tiny.plan --plan all --mesh "ulysses = 2" --hw "$tmp/tab.json" \
		--format json >"$tmp/t6.json" 2>/dev/null
	json_check table-score "$tmp/t6.json" "$(near "$att" "$fl / 2e9 + $fl / 128 * 1e-9")"
	# a link without overlap (the CPU backends copy a ring shift when a rank
	# waits for it) hides nothing of the rotation; the same profile with
	# overlap hides some (the control)
	for o in "$CPU":"== 0" "$tmp/tab-overlap1.json":"> 0"; do
		"$DTPC" cost tests/lower/tiny.plan --plan all --mesh "ring = 4" \
			--context 'rotate_method = "alltoall"' --hw "${o%%:*}" --format json >"$tmp/t7.json" 2>/dev/null
		json_check "overlap${o#*:}" "$tmp/t7.json" "sum(c['hidden_s'] for c in j['ranks'][0]['communication']) ${o#*:} and j['ranks'][0]['comm_hidden_s'] ${o#*:}"
	done
	# the SMs a ring transfer holds slow the attention under it: each of
	# the steps of tiny DiT's two ring attentions adds min(T, a / (1 - f))
	# x f, T a step's transfer, a a chunk's attention (the attention
	# without them over the chunks), f = n / 10 of the SMs, n the channels
	# NCCL gives one send/recv (src/enqueue.cc) of a profile with 4 per
	# peer: halved to 1 for 4 ranks, to 2 for 2; no more than one per
	# 64 KiB; doubled while a channel's part passes 16 MiB. Cases: MESH
	# SEQ N (a step of ring 2 at seq 4096: 2 MiB; at seq 8: 4 KiB; of
	# ring 4 at seq 131072: 32 MiB)
	for c in "4 64 1" "2 4096 2" "2 8 1" "4 131072 2"; do
		set -- $c
		for p in overlap1 ctas; do
			"$DTPC" cost tests/lower/tiny.plan --plan all --mesh "ring = $1" -D seq=$2 \
				--context 'rotate_method = "alltoall"' --hw "$tmp/tab-$p.json" --format json \
				>"$tmp/t8-$p.json" 2>/dev/null
		done
		A=$(python3 -c "import json,sys; print(repr(json.load(open(sys.argv[1]))['ranks'][0]['time_by_resource_s']['attention']))" "$tmp/t8-overlap1.json")
		k=$((2 * ($1 - 1)))
		T="[c['time_s'] for c in j['ranks'][0]['communication'] if c['op'] == 'ring_attention'][0] / $k"
		json_check "sm-share (ring $1, seq $2)" "$tmp/t8-ctas.json" "$(near "$att" "$A + $k * min($T, $A / (2 * $1) / (1 - $3 / 10)) * $3 / 10") and $att > $A"
	done
	# the host waits at no collective (the nccl backend returns once a
	# collective is enqueued; a ring shift makes the compute stream wait on
	# an event): a GPU profile predicts what the same profile without sms
	# (a CPU-like node, where nothing is relaunched) does, for collectives
	# (tp: all-gathers, all-reduces) and a ring with exposed steps (either
	# rotate method); p2p_ctas goes with sms, and no all-to-all is used (the
	# nccl backend's copy of the own piece is charged on a GPU only)
	python3 - hw/h100-sxm.json "$tmp/gpu" <<'EOF2'
import json, sys
j = json.load(open(sys.argv[1]))
del j["links"]["intra"]["p2p_ctas"]
json.dump(j, open(sys.argv[2] + ".json", "w"))
del j["sms"]
json.dump(j, open(sys.argv[2] + "-nosms.json", "w"))
EOF2
	for m in "tp/tp = 4/" "all/ring = 4/alltoall" "all/ring = 4/allgather"; do
		pl=${m%%/*} mesh=${m#*/} rot=${m##*/}
		mesh=${mesh%/*}
		for f in gpu gpu-nosms; do
			set -- --plan "$pl" --mesh "$mesh" -D seq=512 --hw "$tmp/$f.json" --format json
			[ -n "$rot" ] && set -- "$@" --context "rotate_method = \"$rot\""
			"$DTPC" cost tests/lower/tiny.plan "$@" >"$tmp/hw-$f.json" 2>"$tmp/o" || cat "$tmp/o"
		done
		step=$(python3 -c "import json,sys; print(repr(json.load(open(sys.argv[1]))['step_s']))" "$tmp/hw-gpu-nosms.json")
		json_check "no-host-wait ($m)" "$tmp/hw-gpu.json" "$(near "j['step_s']" "$step") and any(c['time_s'] > c['hidden_s'] for c in j['ranks'][0]['communication'])"
	done
	# a lone send/recv moves no more than its channels: with a channel's
	# bytes per second given (1 MB/s, far below the link), each step of
	# ring 2 (2 ring attentions, one step of 2 MiB each) on n = 2 channels
	# takes alpha + bytes / (2 x 1 MB/s); without the field (the control)
	# the link's bandwidth alone
	python3 - "$tmp/tab-ctas.json" "$tmp/tab-chan" <<'EOF2'
import json, sys
j = json.load(open(sys.argv[1]))
j["links"]["intra"]["p2p_channel_bytes_per_s"] = {"value": 1e6, "source": "made up by tests/cost.sh"}
json.dump(j, open(sys.argv[2] + ".json", "w"))
del j["links"]["intra"]["p2p_ctas"]
json.dump(j, open(sys.argv[2] + "-noctas.json", "w"))
EOF2
	for p in ctas chan; do
		"$DTPC" cost tests/lower/tiny.plan --plan all --mesh "ring = 2" -D seq=4096 \
			--context 'rotate_method = "alltoall"' --hw "$tmp/tab-$p.json" --format json \
			>"$tmp/t9-$p.json" 2>/dev/null
	done
	R="[c for c in j['ranks'][0]['communication'] if c['op'] == 'ring_attention'][0]"
	AL=$(python3 -c "import json,sys; print(repr(json.load(open(sys.argv[1]))['links']['intra']['alpha_s']['value']))" "$tmp/tab-chan.json")
	json_check channel-bw "$tmp/t9-chan.json" "$(near "$R['time_s']" "2 * $AL + $R['bytes'] / (2 * 1e6)") and $R['bytes'] == 2 * 2048 * 256 * 4"
	json_check channel-bw-control "$tmp/t9-ctas.json" "not ($(near "$R['time_s']" "2 * $AL + $R['bytes'] / (2 * 1e6)"))"
	"$DTPC" cost $L --plan single --hw "$tmp/tab-chan-noctas.json" >"$tmp/o" 2>&1
	[ $? = 2 ] && grep -q "p2p_channel_bytes_per_s needs p2p_ctas" "$tmp/o" && ok ||
		{ bad "cost/table-refuse-channel-bw"; cat "$tmp/o"; }
	for b in nothreads:"needs threads_per_node" badop:"softmax: not a kernel" \
		twice:"1 is given twice" group1:"a group of 2 ranks or more" overlap:"overlap: 1" \
		nosms:"p2p_ctas: 8 needs the profile's sms" allsms:"fewer than them (8)"; do
		"$DTPC" cost $L --plan single --hw "$tmp/tab-${b%%:*}.json" >"$tmp/o" 2>&1
		[ $? = 2 ] && grep -q "${b#*:}" "$tmp/o" && ok || { bad "cost/table-refuse-${b%%:*}"; cat "$tmp/o"; }
	done
else
	skipped cost/tables "python3 is not installed"
fi

# Hostile profiles (docs/cost-model.md, "Profiles"): each is refused with
# exit 2 and a message that names the field's path, never a crash, a hang,
# or inf/NaN in a prediction; a key not in the format is refused (but for
# '_' comments). From hw/h100-ib.json (GPU, two links) and
# hw/this-cpu-calibrated.json (the tables); CASE is the file's name, then
# the message expected (grep -F).
if [ -n "$have_py" ]; then
	python3 - "$tmp/hostile" <<'EOF2'
import copy, json, os, sys
d = sys.argv[1]
os.mkdir(d)
gpu = json.load(open("hw/h100-ib.json"))
cpu = json.load(open("hw/this-cpu-calibrated.json"))
src = lambda v: {"value": v, "source": "tests/cost.sh"}
def case(name, base, path, v, raw=None):
    j = copy.deepcopy(base)
    o = j
    for k in path[:-1]:
        o = o[k]
    if v is None:
        del o[path[-1]]
    else:
        o[path[-1]] = v
    text = json.dumps(j)
    if raw:  # a value JSON can write and Python cannot
        text = text.replace('"@RAW@"', raw)
    open(os.path.join(d, name + ".json"), "w").write(text)
V = lambda *p: p + ("value",)
case("inf-peak", gpu, V("dtypes", "bf16", "linear", "peak_flops"), "@RAW@", "1e999")
case("tiny-peak", gpu, V("dtypes", "bf16", "linear", "peak_flops"), 1e-308)
case("zero-bw", gpu, V("dtypes", "bf16", "memory_bytes_per_s"), 0)
case("huge-launch", gpu, V("launch_s"), 1e308)
case("neg-alpha", gpu, V("links", "inter", "alpha_s"), -1e-6)
case("tiny-busbw", gpu, V("links", "inter", "all_to_all_busbw"), 1e-308)
case("zero-memory", gpu, V("memory_bytes"), 0)
case("rpn-half", gpu, V("ranks_per_node"), 0.5)
case("rpn-huge", gpu, V("ranks_per_node"), 1e10)
case("sms-zero", gpu, V("sms"), 0)
case("ctas-frac", gpu, V("links", "intra", "p2p_ctas"), 2.5)
case("str-value", gpu, V("launch_s"), "4e-6")
case("bare-number", gpu, ("launch_s",), 4e-6)
case("opbw-array", gpu, ("dtypes", "bf16", "op_bytes_per_s"), [src(1e9)])
case("opbw-number", gpu, ("dtypes", "bf16", "op_bytes_per_s"), 5)
case("dtypes-array", gpu, ("dtypes",), [])
case("linear-array", gpu, ("dtypes", "bf16", "linear"), [1])
case("links-array", gpu, ("links",), [gpu["links"]["intra"]])
case("no-intra", gpu, ("links", "intra"), None)
case("no-dtypes", gpu, ("dtypes",), None)
open(os.path.join(d, "root-array.json"), "w").write(json.dumps([gpu]))
case("threads-zero", cpu, V("threads_per_node"), 0)
case("threads-frac", cpu, V("threads_per_node"), 3.7)
case("ranks-huge", cpu, V("dtypes", "f32", "by_ranks", 1, "ranks"), 1e10)
case("byranks-empty", cpu, ("dtypes", "f32", "by_ranks"), [])
case("byranks-row", cpu, ("dtypes", "f32", "by_ranks", 1), 7)
case("bygroup-zero", cpu, V("links", "intra", "by_group", 0, "group"), 0)
case("bygroup-work", cpu, V("links", "intra", "by_group", 0, "ranks_at_work"), 0.5)
# a misspelt optional field would be ignored unseen: every unknown key is refused
case("misspelt", gpu, ("links", "intra", "p2p_cta"), src(8))
case("number-extra", gpu, ("launch_s", "unit"), "s")
case("row-extra", cpu, ("dtypes", "f32", "by_ranks", 0, "rank"), src(1))
case("root-extra", gpu, ("ranks_per_nodes",), src(8))
# a key's control bytes are escaped: the message stays one line
case("key-newline", gpu, ("links", "intra", "p2p\nctas"), src(8))
# raw bytes: not JSON, or JSON the reader must not take at face value
text = json.dumps(gpu)
raw = {"empty": "", "trailing": "{\"name\": \"x\"} x", "nul": text[:40] + "\0" + text[40:],
       "garbage": "\x7fELF\x02\x01",
       "deep": "[" * 2000 + "]" * 2000,
       "dup-key": text.replace('"launch_s": {', '"launch_s": {"value": 1, "source": "x"}, "launch_s": {', 1),
       "dup-value": text.replace('"launch_s": {"value": ', '"launch_s": {"value": 1e-9, "value": ', 1),
       "line3": '{\n  "name": "x",\n  "ranks_per_node" {}\n}\n',
       "big": " " * (1 << 20) + text}
for k, t in raw.items():
    open(os.path.join(d, k + ".json"), "w").write(t)
# at the edges of the ranges: accepted, and every figure finite
edge = copy.deepcopy(gpu)
for k in ("linear", "attention"):
    edge["dtypes"]["bf16"][k]["peak_flops"] = src(1)
    edge["dtypes"]["bf16"][k]["fixed_s"] = src(1e6)
edge["launch_s"] = src(1e6)
edge["links"]["inter"]["all_to_all_busbw"] = src(1)
edge["links"]["intra"]["alpha_s"] = src(1e6)
edge["memory_bytes"] = src(1e30)
# keys that begin with '_' are comments, as in a config.json
edge["_note"] = "tests/cost.sh"
edge["links"]["intra"]["_why"] = {"value": "x"}
json.dump(edge, open(os.path.join(d, "edge.json"), "w"))
# a node of 8 and no inter-node link: a 16-rank mesh cannot be costed
nointer = copy.deepcopy(gpu)
del nointer["links"]["inter"]
json.dump(nointer, open(os.path.join(d, "no-inter.json"), "w"))
EOF2
	H=$tmp/hostile
	for b in \
		inf-peak:"dtypes.bf16.linear.peak_flops: a rate per second from 1 to 1e30, not a number beyond a double's range" \
		tiny-peak:"dtypes.bf16.linear.peak_flops: a rate per second from 1 to 1e30, not 1e-308" \
		zero-bw:"dtypes.bf16.memory_bytes_per_s: a rate per second from 1 to 1e30, not 0" \
		huge-launch:"launch_s: a time in seconds from 0 to 1e6, not 1e+308" \
		neg-alpha:"links.inter.alpha_s: a time in seconds from 0 to 1e6, not -1e-06" \
		tiny-busbw:"links.inter.all_to_all_busbw: a rate per second from 1 to 1e30, not 1e-308" \
		zero-memory:"memory_bytes: a number of bytes from 1 to 1e30, not 0" \
		rpn-half:"ranks_per_node: an integer from 1 to 1048576, not 0.5" \
		rpn-huge:"ranks_per_node: an integer from 1 to 1048576, not 1e+10" \
		sms-zero:"sms: an integer from 1 to 1048576, not 0" \
		ctas-frac:"links.intra.p2p_ctas: an integer from 0 to 1048576, not 2.5" \
		str-value:"launch_s: no number as value" \
		bare-number:"launch_s: not an object" \
		opbw-array:"dtypes.bf16.op_bytes_per_s: needs an object" \
		opbw-number:"dtypes.bf16.op_bytes_per_s: needs an object" \
		dtypes-array:"dtypes: needs an object" \
		linear-array:"dtypes.bf16.linear: needs an object" \
		links-array:"links: needs an object" \
		no-intra:"links.intra: missing" \
		no-dtypes:"dtypes: missing" \
		root-array:"needs an object of the profile's fields" \
		threads-zero:"threads_per_node: an integer from 1 to 1048576, not 0" \
		threads-frac:"threads_per_node: an integer from 1 to 1048576, not 3.7" \
		ranks-huge:"dtypes.f32.by_ranks[1].ranks: an integer from 1 to 1048576, not 1e+10" \
		byranks-empty:"dtypes.f32.by_ranks: needs an array of 1 to 64 rows" \
		byranks-row:"dtypes.f32.by_ranks[1]: needs an object" \
		bygroup-zero:"links.intra.by_group[0].group: a group of 2 ranks or more, up to 1048576, not 0" \
		bygroup-work:"links.intra.by_group[0].ranks_at_work: an integer from 1 to 1048576, not 0.5" \
		misspelt:"links.intra.p2p_cta: not a field of a profile here" \
		number-extra:"launch_s.unit: not a field of a profile here" \
		row-extra:"dtypes.f32.by_ranks[0].rank: not a field of a profile here" \
		root-extra:"ranks_per_nodes: not a field of a profile here" \
		key-newline:"links.intra.p2p\\x0actas: not a field of a profile here" \
		empty:"line 1, column 1: not valid JSON" \
		trailing:"line 1, column 15: not valid JSON" \
		nul:"line 1, column 41: not valid JSON (a NUL byte)" \
		garbage:"line 1, column 1: not valid JSON" \
		deep:"line 1, column 1001: nested deeper than the JSON reader's limit" \
		dup-key:"launch_s: the key is given twice" \
		dup-value:"launch_s.value: the key is given twice" \
		line3:"line 3, column 20: not valid JSON" \
		big:"larger than 1 MiB"; do
		timeout 20 "$DTPC" cost tests/lower/tiny.plan --plan all --hw "$H/${b%%:*}.json" >"$tmp/o" 2>&1
		rc=$?
		[ $rc = 2 ] && grep -qF "$H/${b%%:*}.json: ${b#*:}" "$tmp/o" && ok ||
			{ bad "cost/hostile-${b%%:*} (exit $rc)"; cat "$tmp/o"; }
	done
	# the ranges' edges load, and every number of the prediction is finite
	# (cJSON writes inf and NaN as null); on 16 ranks both links are used
	"$DTPC" cost tests/lower/tiny.plan --plan all --mesh "ring = 4, ulysses = 4" -D seq=128 \
		--hw "$H/edge.json" --format json >"$tmp/edge.json" 2>"$tmp/o" || cat "$tmp/o"
	json_check hostile-edge "$tmp/edge.json" "'null' not in open(sys.argv[1]).read() and j['step_s'] > 1e6 and j['memory_limit_bytes'] == 1e30 and any(c['link'] != j['ranks'][0]['communication'][0]['link'] for c in j['ranks'][0]['communication'])"
	# 16 ranks on nodes of 8 without links.inter: cost and suggest refuse
	# (exit 2), and the same mesh within one node is costed (the control)
	"$DTPC" cost tests/lower/tiny.plan --plan all --mesh "ring = 4, ulysses = 4" -D seq=128 \
		--hw "$H/no-inter.json" >"$tmp/o" 2>&1
	rc=$?
	[ $rc = 2 ] && grep -qF "links.inter: missing, and a group of the 16 ranks crosses nodes of 8" "$tmp/o" &&
		ok || { bad "cost/hostile-no-inter (exit $rc)"; cat "$tmp/o"; }
	"$DTPC" suggest tests/lower/tiny.plan --plan all --world 16 -D seq=128 \
		--hw "$H/no-inter.json" >"$tmp/o" 2>&1
	rc=$?
	[ $rc = 2 ] && grep -qF "links.inter: missing" "$tmp/o" &&
		ok || { bad "cost/hostile-no-inter-suggest (exit $rc)"; cat "$tmp/o"; }
	"$DTPC" cost tests/lower/tiny.plan --plan all --mesh "ring = 2, ulysses = 4" -D seq=128 \
		--hw "$H/no-inter.json" >"$tmp/o" 2>&1 && ok ||
		{ bad "cost/hostile-no-inter-control"; cat "$tmp/o"; }
else
	skipped cost/hostile "python3 is not installed"
fi

# Hostile command lines: exit 2 and the option named.
for c in \
	"suggest --world 0":"--world needs 1 to 4096, not '0'" \
	"suggest --world 100000":"--world needs 1 to 4096, not '100000'" \
	"suggest --world 4 --top 0":"--top needs an integer from 1 to 1000000000, not '0'" \
	"suggest --world 4 --top -1":"--top needs an integer from 1 to 1000000000, not '-1'" \
	"suggest --world 4 --max-mem -5":"--max-mem needs a number of bytes from 1 to 1e30, not '-5'" \
	"suggest --world 4 --max-mem 1e31":"--max-mem needs a number of bytes from 1 to 1e30, not '1e31'" \
	"suggest --world 4 --max-mem nan":"--max-mem needs a number of bytes from 1 to 1e30, not 'nan'" \
	"cost --dtype fp8":"--dtype is f32 or bf16, not 'fp8'" \
	"cost --world 4":"unknown option '--world'" \
	"cost --hw -":"--hw needs a profile's file, not standard input" \
	"cost --hw hw":"cannot read 'hw': not a regular file"; do
	set -- ${c%%:*}
	cmd=$1
	shift
	case "$*" in *--hw*) ;; *) set -- "$@" --hw $CPU ;; esac
	"$DTPC" "$cmd" tests/lower/tiny.plan --plan all "$@" >"$tmp/o" 2>&1
	rc=$?
	[ $rc = 2 ] && grep -qF -- "${c#*:}" "$tmp/o" && ok || { bad "cost/cli ($c, exit $rc)"; cat "$tmp/o"; }
done
# calibrate: --ranks out of range, and an -o it cannot write, refused at
# once (before a minute of measuring)
for c in "--ranks 1":"--ranks needs 2 to 16, not '1'" "--ranks 17":"--ranks needs 2 to 16, not '17'" \
	"--ranks abc":"--ranks needs 2 to 16, not 'abc'" \
	"-o $tmp/no/such/dir.json":"cannot write $tmp/no/such/dir.json: No such file or directory" \
	"-o $tmp":"cannot write $tmp: a directory"; do
	case "${c%%:*}" in -o*) set -- ${c%%:*} --ranks 2 ;; *) set -- ${c%%:*} -o "$tmp/c.json" ;; esac
	timeout 5 "$DTPC" calibrate --backend local --device cpu --quick "$@" >"$tmp/o" 2>&1
	rc=$?
	[ $rc = 2 ] && grep -qF -- "${c#*:}" "$tmp/o" && ok || { bad "cost/calibrate-cli ($c, exit $rc)"; cat "$tmp/o"; }
done

# Published orderings (issue 11, docs/performance.md): Flux.1 at 1024², 4
# GPUs, `dtpc suggest` with every mesh and rotate method. A model output,
# not a timing. order PROFILE: "ok" where, for each rotate method, Ulysses 4
# < Ulysses 2 x Ring 2 < Ring 4 (the figures: xDiT on 4 H100, 1.63 / 1.80 /
# 1.98 s; diffusers on L20, 281 / 324 / 351 ms per step), else the ranks.
order() {
	"$DTPC" suggest examples/flux.plan --plan flux_ring2_ulysses2_tp2 --world 4 --top 20 \
		--hw "$1" 2>&1 | awk '
		/^ *[0-9]+\. ring / {
			m = $3 "x" $6 "x" $9
			t = $10
			r = /rotate_method = "alltoall"/ ? "alltoall" : /rotate_method = "allgather"/ ? "allgather" : "-"
			if (m == "1x4x1") u = t
			else if (m == "2x2x1") h[r] = t
			else if (m == "4x1x1") g[r] = t
		}
		END {
			ok = u != "" && h["alltoall"] != "" && h["allgather"] != ""
			for (r in h) {
				if (!(u + 0 < h[r] + 0 && h[r] + 0 < g[r] + 0))
					ok = 0
				out = out " " r ": ulysses 4 " u ", 2x2 " h[r] ", ring 4 " g[r] ";"
			}
			print ok ? "ok" : "wrong:" out
		}'
}
o=$(order hw/l20-pcie.json)
[ "$o" = ok ] && ok || bad "cost/order-l20 ($o)"
# negative control: an L20 whose all-to-all is 20x slower ranks Ulysses 4 last
if [ -n "$have_py" ]; then
	python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
j["links"]["intra"]["all_to_all_busbw"]["value"] /= 20
json.dump(j, sys.stdout)' hw/l20-pcie.json >"$tmp/l20-slow-a2a.json"
	o=$(order "$tmp/l20-slow-a2a.json")
	case $o in wrong:*) ok ;; *) bad "cost/order-control ($o)" ;; esac
else
	skipped cost/order-control "python3 is not installed"
fi
# H100: the model does not reproduce xDiT's order (with rotation it ranks
# Ring 4 first; with all-gathers Ring 4 before 2 x 2: docs/cost-model.md,
# "Where it is known to be wrong"); this fails when that changes, so that
# the docs are revisited with it.
case $(order hw/h100-sxm.json) in
wrong:*) ok ;;
*) bad "cost/order-h100 (now reproduced: update docs/cost-model.md and docs/performance.md)" ;;
esac
# The sensitivity docs/performance.md states: with a send/recv channel
# limited to 10.3 or 20.6 GB/s (NCCL's sizing: 2 channels per NVLink of
# 20.6 GB/s), the rotation ranks Ulysses 4 < 2 x 2 < Ring 4 as xDiT
# measured; the profile as shipped (no such limit) does not (the control)
if [ -n "$have_py" ]; then
	for c in 10.3e9:ok 20.6e9:ok 0:wrong; do
		python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
if float(sys.argv[2]) > 0:
    j["links"]["intra"]["p2p_channel_bytes_per_s"] = {"value": float(sys.argv[2]), "source": "tests/cost.sh"}
json.dump(j, sys.stdout)' hw/h100-sxm.json "${c%%:*}" >"$tmp/h100-chan.json"
		# the rotation's three times (order prints them only where some
		# method is out of order: the all-gather is in every case here;
		# should that change, this fails and the docs are revisited)
		o=$(order "$tmp/h100-chan.json" | sed -n 's/.*alltoall: ulysses 4 \([0-9.]*\), 2x2 \([0-9.]*\), ring 4 \([0-9.]*\);.*/\1 \2 \3/p')
		if [ -z "$o" ]; then
			bad "cost/h100-channel-${c%%:*} (no rotation figures)"
		elif echo "$o" | awk '{ exit !($1 < $2 && $2 < $3) }'; then
			[ "${c#*:}" = ok ] && ok || bad "cost/h100-channel-control ($o)"
		else
			[ "${c#*:}" = wrong ] && ok || bad "cost/h100-channel-${c%%:*} ($o)"
		fi
	done
else
	skipped cost/h100-channel "python3 is not installed"
fi

# dtpc calibrate (tiny sizes: --quick): a profile with a source on every
# number, the calibration's stamp in each, that `cost` loads; per-kind α.
calib_check() {
	cc_name=$1 cc_json=$2 cc_rows=$3 cc_groups=$4 cc_work=$5
	json_check "$cc_name-sources" "$cc_json" "all(('dtpc calibrate on ' in x['source']) for x in (lambda f: f(f, j))(lambda f, o: [o] if isinstance(o, dict) and 'value' in o else sum((f(f, v) for v in (o.values() if isinstance(o, dict) else o if isinstance(o, list) else [])), [])) ) and all(j['links']['intra'][k + '_alpha_s']['value'] >= 0 for k in ('all_gather', 'all_reduce', 'all_to_all', 'p2p'))"
	# the tables' schema (calib_check NAME JSON ROWS GROUPS WORK): a row per
	# rank count of ROWS with the threads dtpc run gives such a rank, every
	# rate > 0, the compute fits through the origin (fixed_s 0:
	# docs/cost-model.md, Calibration) and every kernel's bytes per second
	# (lse_merge, which only a ring attention runs, where the row has 2 ranks
	# or more); a by_group row per group size of GROUPS with the four
	# collectives and the ranks at work, WORK (local: a world of as many
	# threads as the group; mpi: the whole job, cut into groups of a size
	# that divides it: a graph's mesh)
	json_check "$cc_name-schema" "$cc_json" "(lambda v, C, t, g: [v(r['ranks']) for r in t] == $cc_rows and all(v(r['threads_per_rank']) == max(1, C // v(r['ranks'])) and v(r['linear']['peak_flops']) > 0 and v(r['attention']['peak_flops']) > 0 and v(r['linear']['fixed_s']) == v(r['attention']['fixed_s']) == 0 and min(v(r['attention']['score_s']), v(r['launch_s'])) >= 0 and sorted(r['op_bytes_per_s']) == sorted(['layer_norm', 'rms_norm', 'gelu', 'silu', 'add', 'mul', 'modulate', 'rope', 'copy'] + (['lse_merge'] if v(r['ranks']) > 1 else [])) and all(v(x) > 0 for x in r['op_bytes_per_s'].values()) for r in t) and [v(r['group']) for r in g] == $cc_groups and all(v(r[k + '_busbw']) > 0 and v(r[k + '_alpha_s']) >= 0 for r in g for k in ('all_gather', 'all_reduce', 'all_to_all', 'p2p')) and all(v(r['ranks_at_work']) == $cc_work for r in g))(lambda o: o['value'], j['threads_per_node']['value'], j['dtypes']['f32']['by_ranks'], j['links']['intra']['by_group'])"
	"$DTPC" cost tests/lower/tiny.plan --plan all --hw "$cc_json" --format json >"$tmp/cal-cost.json" 2>"$tmp/o" &&
		json_check "$cc_name-loads" "$tmp/cal-cost.json" "j['step_s'] > 0" ||
		{ bad "cost/$cc_name-loads"; cat "$tmp/o"; }
}
if "$DTPC" calibrate --backend local --device cpu --ranks 3 --quick -o "$tmp/cal.json" >"$tmp/o" 2>&1; then
	calib_check calibrate-local "$tmp/cal.json" "[1, 2, 3]" "[2, 3]" "v(r['group'])"
else
	bad "cost/calibrate-local"
	cat "$tmp/o"
fi
# the build has the mpi backend wherever mpicc (and so mpirun) exists
if [ -n "${DTPC_SAN:-}" ]; then
	skipped cost/calibrate-mpi "the sanitizer pass runs no MPI (Open MPI's allocations read as leaks)"
elif command -v mpirun >/dev/null 2>&1; then
	if mpirun -np 3 --oversubscribe --allow-run-as-root --mca btl self,vader \
		"$DTPC" calibrate --backend mpi --device cpu --quick -o "$tmp/calm.json" >"$tmp/o" 2>&1; then
		calib_check calibrate-mpi "$tmp/calm.json" "[3]" "[3]" 3
	else
		bad "cost/calibrate-mpi"
		cat "$tmp/o"
	fi
else
	skipped cost/calibrate-mpi "no mpirun"
fi
"$DTPC" calibrate --backend nccl --device cpu -o "$tmp/x.json" >"$tmp/o" 2>&1
[ $? = 2 ] && grep -q "local or mpi" "$tmp/o" && ok || { bad "cost/calibrate-refuse"; cat "$tmp/o"; }

summary cost
