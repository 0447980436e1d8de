#!/bin/sh
# models.sh BUILD [mpi] — the model library (models/*.plan: the whole diffusers
# forward) against diffusers itself. Each fixture of tests/fixtures/models/
# (tools/gen_models.py, run by hand; committed) is a transformer folder as
# save_pretrained writes it (config.json and the safetensors: one file, a
# sharded folder with its index, or bf16), forward's inputs by name and
# diffusers' `sample`. Each case compiles one of the models' plans with
# `--config FOLDER` and the fixture's shape parameters (-D), on a mesh
# (--mesh / --context), runs it with `--weights FOLDER` (or the per-rank
# folder `dtpc shard` writes) and compares `sample` with diffusers'.
#
# Error: normwise max relative error max|out - ref| / max|ref|
# (tests/compare_st.py, as `dtpc run --verify`). Tolerances:
#   float32 1e-5 — both sides compute in float32 in different orders (the
#     blocked GEMMs, SDPA against dtpc's attention, ring / Ulysses merges),
#     a few ulps through these 2- and 3-block models; a modelling mistake
#     (tests/fixtures.sh measured them on the block-level models: a GELU
#     approximation, a LayerNorm eps, a swapped shift / scale) is 1e-5 to 0.6;
#   bf16 2e-2 — diffusers runs the bf16 model in bf16 (its
#     _keep_in_fp32_modules in float32), dtpc stores bf16 and accumulates in
#     float32: the two differ by bf16 roundings (diffusers' own bf16 run is
#     6.5e-3 from its float32 run on the same weights: fixture.json).
# Negative controls: a perturbed weight, and Qwen-Image's mask replaced by
# ones, must each fail the comparison.
#
# MODELS_ONLY (space-separated shell patterns, e.g. "qwenimage-*"): only the
# cases, controls and bound checks whose names match run (the GPU script's
# Qwen-Image on the CUDA device); the others are left out, not counted. The
# plans checks (no run) are not named cases and always run.
#
# Prints one line per case and "models: N passed, N failed, N skipped".
set -u
BUILD=${1:-build}
MODE=${2:-local}
[ "$MODE" = --mpi ] && MODE=mpi
FIX=tests/fixtures/models
. tests/lib.sh

# fixture FIELD CASE: a field of the case's fixture.json ("dtype", or
# "defines": the shape parameters as -D options), both fields read by one
# Python per fixture, the first time a case asks
fixture() {
	fx_dir="$tmp/fixture/$2"
	if [ ! -d "$fx_dir" ]; then
		mkdir -p "$fx_dir"
		python3 - "$FIX/$2/fixture.json" "$fx_dir" <<'PY' || { rm -rf "$fx_dir"; return 1; }
import json, os, sys
d = json.load(open(sys.argv[1]))
# a list without spaces: one word for the shell
defines = " ".join(f"-D {k}={json.dumps(v, separators=(',', ':'))}"
                   for k, v in sorted(d["shape"].items()))
for field, text in (("defines", defines), ("dtype", d["dtype"])):
    with open(os.path.join(sys.argv[2], field), "w") as f:
        print(text, file=f)
PY
	fi
	cat "$fx_dir/$1"
}

# wanted NAME: whether MODELS_ONLY lets NAME run
wanted() {
	[ -z "${MODELS_ONLY:-}" ] && return 0
	set -f # the patterns are not file names
	for w_p in $MODELS_ONLY; do
		# shellcheck disable=SC2254 # the pattern is meant to match
		case $1 in $w_p) set +f; return 0 ;; esac
	done
	set +f
	return 1
}

# run_case NAME FIXTURE PLANFILE PLAN MESH CONTEXT WEIGHTS INPUTS: compiles,
# runs and compares; WEIGHTS "shard" runs from the per-rank folder that
# `dtpc shard` writes from the fixture's folder. Status 0 when within the
# tolerance; the log is in $tmp/out.
run_case() {
	rc_name=$1 rc_fix=$2 rc_file=$3 rc_plan=$4 rc_mesh=$5 rc_ctx=$6 rc_w=$7 rc_in=$8
	rc_g="$tmp/$rc_name.graph"
	rc_o="$tmp/$rc_name.out.safetensors"
	rc_folder="$FIX/$rc_fix/transformer"
	if [ "$(fixture dtype "$rc_fix")" = bf16 ]; then
		rc_tol=2e-2 rc_dtype="--dtype bf16"
	else
		rc_tol=1e-5 rc_dtype=""
	fi
	# shellcheck disable=SC2046,SC2086 # the -D options and --dtype split into words
	compile_mesh "$rc_file" "$rc_plan" "$rc_mesh" "$rc_ctx" "$rc_g" --config "$rc_folder" \
		$rc_dtype $(fixture defines "$rc_fix") >"$tmp/out" 2>&1 || return 1
	if [ "$rc_w" = shard ]; then
		rm -rf "$tmp/$rc_name.ranks"
		"$DTPC" shard "$rc_g" --weights "$rc_folder" --out "$tmp/$rc_name.ranks" \
			>>"$tmp/out" 2>&1 || return 1
		rc_w="$tmp/$rc_name.ranks"
	fi
	replay "$MODE" "$rc_g" --timeout 60 --weights "$rc_w" --inputs "$rc_in" \
		--save-outputs "$rc_o" >>"$tmp/out" 2>&1 || return 1
	python3 tests/compare_st.py "$rc_o" "$FIX/$rc_fix/expected.safetensors" "$rc_tol" \
		>>"$tmp/out" 2>&1
}

# case NAME FIXTURE MODEL PLAN MESH CONTEXT [shard]: a plan of
# models/MODEL.plan, compiled with --dtype as the fixture's, against
# diffusers' sample
case_() {
	c_name=$1 c_fix=$2 c_model=$3 c_plan=$4 c_mesh=$5 c_ctx=$6 c_w=${7:-$FIX/$2/transformer}
	wanted "$c_name" || return 0
	run_case "$c_name" "$c_fix" "models/$c_model.plan" "$c_plan" "$c_mesh" "$c_ctx" "$c_w" \
		"$FIX/$c_fix/inputs.safetensors"
	rc=$?
	err=$(sed -n 's/.*max relative error \([^ ]*\).*/\1/p' "$tmp/out" | sort -g | tail -1)
	what="$c_mesh${c_ctx:+; $c_ctx}${7:+; pre-sharded}"
	if [ $rc = 0 ]; then
		pass=$((pass + 1))
		printf "ok    %-28s %-40s max rel error %s\n" "$c_name" "$what" "$err"
	else
		fail=$((fail + 1))
		printf "FAIL  %-28s %-40s max rel error %s\n" "$c_name" "$what" "${err:-?}"
		sed 's/^/      /' "$tmp/out" | head -20
	fi
}

# control NAME FIXTURE MODEL PLAN MESH WEIGHTS INPUTS: a case that must fail
# the comparison (and only the comparison: compiling and running succeed);
# MODEL is models/MODEL.plan, or a plan file's path
control() {
	wanted "$1" || return 0
	case $3 in */*) c_file=$3 ;; *) c_file=models/$3.plan ;; esac
	if run_case "$1" "$2" "$c_file" "$4" "$5" "" "$6" "$7"; then
		fail=$((fail + 1))
		echo "FAIL  $1: the comparison passed"
	elif grep -q "max relative error" "$tmp/out"; then
		pass=$((pass + 1))
		err=$(sed -n 's/.*max relative error \([^ ]*\).*/\1/p' "$tmp/out" | sort -g | tail -1)
		printf "ok    %-28s %-40s max rel error %s (fails, as it must)\n" "$1" "$5" "$err"
	else
		fail=$((fail + 1))
		echo "FAIL  $1: did not get as far as the comparison"
		sed 's/^/      /' "$tmp/out" | head -20
	fi
}

# safetensors_edit IN OUT TENSOR VALUE: a copy of IN with element 0 of TENSOR
# (F32) increased by VALUE, or with every element set to VALUE when VALUE is
# "=V" (standard library only)
safetensors_edit() {
	python3 - "$@" <<'PY'
import json, struct, sys
src, dst, name, val = sys.argv[1:]
b = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
t = json.loads(b[8:8 + n])[name]
assert t["dtype"] == "F32", t
s, e = (8 + n + o for o in t["data_offsets"])
if val.startswith("="):
    b[s:e] = struct.pack("<f", float(val[1:])) * ((e - s) // 4)
else:
    b[s:s + 4] = struct.pack("<f", struct.unpack("<f", b[s:s + 4])[0] + float(val))
open(dst, "wb").write(bytes(b))
PY
}

# fixtures_present CASE...: every file tools/gen_models.py makes for each case is there
fixtures_present() {
	for f; do
		for x in fixture.json inputs.safetensors expected.safetensors transformer/config.json; do
			if [ ! -f "$FIX/$f/$x" ]; then
				echo "FAIL  $FIX/$f/$x is missing (tools/gen_models.py makes it)"
				fail=$((fail + 1))
			fi
		done
	done
}
fixtures_present flux_dev flux_schnell flux_bf16 flux_bf16_t flux_patch2 wan wan_bf16 wan_patch221 qwenimage \
	qwenimage_frames2 ltx ltx_odd ltx_bf16

# full CMD...: a case of the plain pass only; the sanitizer pass (DTPC_SAN,
# from run.sh) runs the others, one or two per fixture, at a third of the time
full() {
	[ -n "${DTPC_SAN:-}" ] || "$@"
}

# bound NAME WANT FIXTURE MODEL PLAN [-D ...]: the graph binds exactly the
# checkpoint's tensors (names and shapes, from each file's header): no
# diffusers parameter is left out of the model, none is made up. WANT "fail":
# a control that must report the difference.
cat >"$tmp/bound.py" <<'PY'
import glob, json, os, struct, sys
graph = {w["name"]: w["shape"] for w in json.load(open(sys.argv[1]))["weights"]}
ckpt = {}
for f in glob.glob(os.path.join(sys.argv[2], "*.safetensors")):
    with open(f, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        h = json.loads(fh.read(n))
    h.pop("__metadata__", None)
    ckpt.update({k: v["shape"] for k, v in h.items()})
# the checkpoint's tensors a model leaves unbound on purpose (the prefixes
# after the two paths: modules diffusers runs and then drops the output of)
unused = [k for k in ckpt if any(k.startswith(p) for p in sys.argv[3:])]
if sys.argv[3:] and not unused:
    print(f"no tensor of {', '.join(sys.argv[3:])} in the checkpoint")
    sys.exit(1)
for k in unused:
    del ckpt[k]
missing = sorted(set(ckpt) - set(graph))
extra = sorted(set(graph) - set(ckpt))
shape = sorted(k for k in set(ckpt) & set(graph) if ckpt[k] != graph[k])
for what, names in (("not bound", missing), ("not in the checkpoint", extra),
                    ("of another shape", shape)):
    if names:
        print(f"{len(names)} tensors {what}: {', '.join(names[:3])}")
print(f"{len(graph)} weights bound, {len(ckpt)} in the checkpoint")
sys.exit(1 if missing or extra or shape else 0)
PY
bound() {
	b_name=$1 b_want=$2 b_fix=$3 b_model=$4 b_plan=$5
	shift 5
	wanted "$b_name" || return 0
	b_g="$tmp/$b_name.graph"
	# shellcheck disable=SC2046 # the -D options split into words
	if ! "$DTPC" "models/$b_model.plan" --plan "$b_plan" --mesh "tp = 1" \
		--config "$FIX/$b_fix/transformer" $(fixture defines "$b_fix") "$@" -o "$b_g" \
		>"$tmp/out" 2>&1 || ! "$DTPC" inspect "$b_g" --format json >"$tmp/inspect.json" 2>>"$tmp/out"
	then
		fail=$((fail + 1))
		echo "FAIL  $b_name: did not compile"
		sed 's/^/      /' "$tmp/out" | head -10
		return
	fi
	# shellcheck disable=SC2086 # BOUND_UNUSED: prefixes, one word each
	python3 "$tmp/bound.py" "$tmp/inspect.json" "$FIX/$b_fix/transformer" ${BOUND_UNUSED:-} \
		>"$tmp/out" 2>&1
	b_rc=$?
	if [ "$b_want" = fail ] && [ $b_rc = 1 ]; then
		pass=$((pass + 1))
		printf "ok    %-28s %s (fails, as it must)\n" "$b_name" "$(head -1 "$tmp/out")"
	elif [ "$b_want" = ok ] && [ $b_rc = 0 ]; then
		pass=$((pass + 1))
		printf "ok    %-28s %s\n" "$b_name" "$(tail -1 "$tmp/out")"
	else
		fail=$((fail + 1))
		echo "FAIL  $b_name"
		sed 's/^/      /' "$tmp/out" | head -10
	fi
}

AG='rotate_method = "allgather"'
AA='rotate_method = "alltoall"'
if [ "$MODE" = mpi ]; then
	# a subset under mpirun: one process per rank, each reading its slices
	case_ mpi-flux-dev-usp flux_dev flux flux_usp "ring = 2, ulysses = 2" "$AA"
	case_ mpi-qwenimage-ulysses2xtp2 qwenimage qwenimage qwenimage_tp_usp "ulysses = 2, tp = 2" ""
	case_ mpi-wan-ring3-presharded wan wan wan_ring "ring = 3" "$AG" shard
	case_ mpi-ltx-ulysses2xtp2 ltx ltx ltx_tp_usp "ring = 1, ulysses = 2, tp = 2" "$AG"
	case_ mpi-ltx2-usp ltx2 ltx2 ltx2_usp "ring = 2, ulysses = 2" "$AA"
else
	# Flux.1-dev (guidance): 4 heads, 12 image + 8 text tokens
	full case_ flux-dev-1rank flux_dev flux flux_tp "tp = 1" ""
	full case_ flux-dev-tp2 flux_dev flux flux_tp "tp = 2" ""
	full case_ flux-dev-tp4 flux_dev flux flux_tp "tp = 4" ""
	full case_ flux-dev-ulysses2 flux_dev flux flux_ulysses "ulysses = 2" ""
	full case_ flux-dev-ulysses4 flux_dev flux flux_ulysses "ulysses = 4" ""
	full case_ flux-dev-ring2-allgather flux_dev flux flux_ring "ring = 2" "$AG"
	full case_ flux-dev-ring4-alltoall flux_dev flux flux_ring_alltoall "ring = 4" "$AA"
	case_ flux-dev-usp flux_dev flux flux_usp "ring = 2, ulysses = 2" "$AG"
	full case_ flux-dev-ulysses2xtp2 flux_dev flux flux_tp_usp "ulysses = 2, tp = 2" "$AA"
	full case_ flux-dev-ring2xtp2 flux_dev flux flux_tp_usp "ring = 2, tp = 2" "$AA"
	case_ flux-dev-ring2xtp2-presharded flux_dev flux flux_tp_usp "ring = 2, tp = 2" "$AG" shard
	# Flux.1-schnell from a sharded checkpoint: 3 heads, 15 + 7 tokens, batch 2
	full case_ flux-schnell-1rank flux_schnell flux flux_tp "tp = 1" ""
	full case_ flux-schnell-ulysses-any2 flux_schnell flux flux_ulysses_anything "ulysses = 2" \
		"ulysses_anything = true"
	full case_ flux-schnell-ring-any2 flux_schnell flux flux_ring_anything "ring = 2" \
		"ring_anything = true, $AA"
	full case_ flux-schnell-ring-any3 flux_schnell flux flux_ring_anything "ring = 3" \
		"ring_anything = true, $AG"
	case_ flux-schnell-ring-any2-presharded flux_schnell flux flux_ring_anything "ring = 2" \
		"ring_anything = true, $AA" shard
	# Flux.1-dev in bf16 (--dtype bf16): 2 heads, 8 + 4 tokens
	full case_ flux-bf16-1rank flux_bf16 flux flux_tp "tp = 1" ""
	full case_ flux-bf16-tp2 flux_bf16 flux flux_tp "tp = 2" ""
	case_ flux-bf16-usp flux_bf16 flux flux_usp "ring = 2, ulysses = 2" "$AA"
	# the same at t = 0.3721, guidance 3.713, whose products by 1000 bf16
	# rounds (diffusers multiplies in bf16; so does input_scale in bf16)
	full case_ flux-bf16-t-1rank flux_bf16_t flux flux_tp "tp = 1" ""
	case_ flux-bf16-t-ulysses2 flux_bf16_t flux flux_ulysses "ulysses = 2" ""
	# Flux with patch_size 2: 2 heads, 6 + 4 tokens, batch 3
	full case_ flux-patch2-tp2 flux_patch2 flux flux_tp "tp = 2" ""
	full case_ flux-patch2-ulysses2 flux_patch2 flux flux_ulysses "ulysses = 2" ""
	full case_ flux-patch2-ring-any3 flux_patch2 flux flux_ring_anything "ring = 3" \
		"ring_anything = true, $AA"
	# Wan T2V: 3 heads, 3 x 3 x 5 = 45 video + 7 text tokens
	full case_ wan-1rank wan wan wan_single "tp = 1" ""
	full case_ wan-ring3-allgather wan wan wan_ring "ring = 3" "$AG"
	case_ wan-ring3-alltoall wan wan wan_ring_alltoall "ring = 3" "$AA"
	full case_ wan-ulysses-any2 wan wan wan_ulysses_anything "ulysses = 2" "ulysses_anything = true"
	full case_ wan-ring-any2 wan wan wan_ring_anything "ring = 2" "ring_anything = true, $AG"
	full case_ wan-ffn-tp2xulysses-any2 wan wan wan_ffn_tp_ulysses "ulysses = 2, tp = 2" \
		"ulysses_anything = true"
	# Wan with patch (2, 2, 1), no cross_attn_norm: 2 heads, 2 x 2 x 3 = 12 tokens
	full case_ wan-patch221-1rank wan_patch221 wan wan_single "tp = 1" ""
	full case_ wan-patch221-ring2 wan_patch221 wan wan_ring "ring = 2" "$AG"
	full case_ wan-patch221-ulysses2 wan_patch221 wan wan_ulysses "ulysses = 2" ""
	# Wan in bf16 (--dtype bf16): 2 heads, 2 x 2 x 4 = 16 tokens, batch 2
	full case_ wan-bf16-1rank wan_bf16 wan wan_single "tp = 1" ""
	full case_ wan-bf16-ulysses2 wan_bf16 wan wan_usp "ring = 1, ulysses = 2" ""
	full case_ wan-bf16-ring2-allgather wan_bf16 wan wan_usp "ring = 2, ulysses = 1" "$AG"
	full case_ wan-bf16-ring2-alltoall wan_bf16 wan wan_usp "ring = 2, ulysses = 1" "$AA"
	case_ wan-bf16-usp wan_bf16 wan wan_usp "ring = 2, ulysses = 2" "$AA"
	full case_ wan-bf16-ulysses2xffn-tp2-presharded wan_bf16 wan wan_ffn_tp_ulysses \
		"ulysses = 2, tp = 2" "" shard
	# Qwen-Image: 4 heads, 1 x 3 x 4 = 12 image + 8 text tokens, batch 2,
	# sample 1's last 3 text tokens masked
	full case_ qwenimage-1rank qwenimage qwenimage qwenimage_tp "tp = 1" ""
	full case_ qwenimage-tp2 qwenimage qwenimage qwenimage_tp "tp = 2" ""
	full case_ qwenimage-ulysses2 qwenimage qwenimage qwenimage_ulysses "ulysses = 2" ""
	full case_ qwenimage-ulysses4 qwenimage qwenimage qwenimage_ulysses "ulysses = 4" ""
	full case_ qwenimage-ring2-allgather qwenimage qwenimage qwenimage_ring "ring = 2" "$AG"
	full case_ qwenimage-ring4-alltoall qwenimage qwenimage qwenimage_ring_alltoall "ring = 4" "$AA"
	full case_ qwenimage-usp qwenimage qwenimage qwenimage_usp "ring = 2, ulysses = 2" "$AG"
	case_ qwenimage-ulysses2xtp2 qwenimage qwenimage qwenimage_tp_usp "ulysses = 2, tp = 2" ""
	case_ qwenimage-ring-any3 qwenimage qwenimage qwenimage_ring_anything "ring = 3" \
		"ring_anything = true, $AG"
	# Qwen-Image over 2 frames of 5 x 2 patches: 2 heads, 20 + 6 tokens
	full case_ qwenimage-frames2-tp2 qwenimage_frames2 qwenimage qwenimage_tp "tp = 2" ""
	full case_ qwenimage-frames2-ring2 qwenimage_frames2 qwenimage qwenimage_ring_alltoall \
		"ring = 2" "$AA"
	full case_ qwenimage-frames2-ulysses2 qwenimage_frames2 qwenimage qwenimage_ulysses \
		"ulysses = 2" ""
	# LTX-Video: 4 heads x 8 (RoPE over the inner 32: 2 padding entries),
	# 2 x 3 x 4 = 24 video + 8 text tokens, batch 2, sample 1's last 3 text
	# tokens masked; TP slices the RoPE tables by columns with the heads
	full case_ ltx-1rank ltx ltx ltx_single "tp = 1" ""
	full case_ ltx-tp2 ltx ltx ltx_tp "tp = 2" ""
	full case_ ltx-tp4 ltx ltx ltx_tp "tp = 4" ""
	full case_ ltx-ulysses2 ltx ltx ltx_ulysses "ulysses = 2" ""
	full case_ ltx-ulysses4 ltx ltx ltx_ulysses "ulysses = 4" ""
	full case_ ltx-ring2-allgather ltx ltx ltx_ring "ring = 2" "$AG"
	full case_ ltx-ring4-alltoall ltx ltx ltx_ring_alltoall "ring = 4" "$AA"
	case_ ltx-usp ltx ltx ltx_usp "ring = 2, ulysses = 2" "$AG"
	full case_ ltx-ulysses2xtp2 ltx ltx ltx_tp_usp "ring = 1, ulysses = 2, tp = 2" "$AA"
	case_ ltx-ring2xtp2-presharded ltx ltx ltx_tp_usp "ring = 2, ulysses = 1, tp = 2" "$AA" shard
	# LTX-Video's corners: 3 heads x 12, patch 2, norm weights, no q/k/v
	# bias, rope_interpolation_scale at 24 fps; 30 + 7 tokens (the anything
	# modes only)
	full case_ ltx-odd-1rank ltx_odd ltx ltx_single "tp = 1" ""
	full case_ ltx-odd-ulysses-any2 ltx_odd ltx ltx_ulysses_anything "ulysses = 2" \
		"ulysses_anything = true"
	full case_ ltx-odd-ring-any3 ltx_odd ltx ltx_ring_anything "ring = 3" "ring_anything = true, $AG"
	case_ ltx-odd-ring-any4 ltx_odd ltx ltx_ring_anything "ring = 4" "ring_anything = true, $AA"
	# LTX-Video in bf16 (--dtype bf16): 2 heads x 16, 16 + 6 tokens
	full case_ ltx-bf16-1rank ltx_bf16 ltx ltx_single "tp = 1" ""
	full case_ ltx-bf16-tp2 ltx_bf16 ltx ltx_tp "tp = 2" ""
	case_ ltx-bf16-ulysses2 ltx_bf16 ltx ltx_ulysses "ulysses = 2" ""
	full case_ ltx-bf16-ring2-alltoall ltx_bf16 ltx ltx_ring_alltoall "ring = 2" "$AA"

	# every checkpoint tensor bound, each configuration's optional modules too
	for f in flux_dev flux_schnell flux_bf16 flux_patch2; do
		bound "bound-$f" ok $f flux flux_tp
	done
	for f in wan wan_bf16 wan_patch221; do bound "bound-$f" ok $f wan wan_single; done
	for f in qwenimage qwenimage_frames2; do
		bound "bound-$f" ok $f qwenimage qwenimage_tp
	done
	for f in ltx ltx_odd ltx_bf16; do bound "bound-$f" ok $f ltx ltx_single; done
	# control: LTX with norm weights compiled without them leaves them out
	bound control-bound-ltx-no-norm-weights fail ltx_odd ltx ltx_single \
		-D norm_elementwise_affine=false
	# control: Flux.1-dev compiled as schnell leaves its guidance embedder out
	bound control-bound-no-guidance fail flux_dev flux flux_tp -D guidance_embeds=false
	# run so, on Flux.1-dev's folder and inputs, the run names what it leaves
	# unused (once for its 2 ranks): the guidance embedder's 4 tensors, three
	# in name order, and the guidance input; the control: compiled as dev, no note
	if wanted unused-dev-on-schnell; then
		u_w="$FIX/flux_dev/transformer" u_in="$FIX/flux_dev/inputs.safetensors"
		u_note="dtpc: note: --weights '$u_w' holds 4 tensors this graph does not use: 'time_text_embed.guidance_embedder.linear_1.bias', 'time_text_embed.guidance_embedder.linear_1.weight', 'time_text_embed.guidance_embedder.linear_2.bias' and 1 more"
		u_inote="dtpc: note: --inputs '$u_in' holds 1 tensor this graph does not use: 'guidance'"
		for u_g in schnell dev; do
			# shellcheck disable=SC2046 # the -D options split into words
			"$DTPC" models/flux.plan --plan flux_tp --mesh "tp = 2" --config "$u_w" \
				$(fixture defines flux_dev) $([ $u_g = schnell ] && echo -D guidance_embeds=false) \
				-o "$tmp/unused-$u_g.graph" -q >"$tmp/unused-$u_g.out" 2>&1 &&
				"$DTPC" run "$tmp/unused-$u_g.graph" --weights "$u_w" --inputs "$u_in" \
					>>"$tmp/unused-$u_g.out" 2>&1
			echo "exit $?" >>"$tmp/unused-$u_g.out"
		done
		if grep -qx 'exit 0' "$tmp/unused-schnell.out" && grep -Fxq "$u_note" "$tmp/unused-schnell.out" &&
			grep -Fxq "$u_inote" "$tmp/unused-schnell.out" &&
			[ "$(grep -c 'does not use' "$tmp/unused-schnell.out")" = 2 ] &&
			grep -qx 'exit 0' "$tmp/unused-dev.out" && ! grep -q 'does not use' "$tmp/unused-dev.out"
		then
			pass=$((pass + 1))
			printf "ok    %-28s %s\n" unused-dev-on-schnell "guidance_embedder's 4 tensors and guidance noted; none as dev"
		else
			fail=$((fail + 1))
			echo "FAIL  unused-dev-on-schnell"
			sed 's/^/      /' "$tmp/unused-schnell.out" "$tmp/unused-dev.out" | head -10
		fi
	fi

	# the plans say what each class's _cp_plan and _tp_plan say
	# (tests/models_plans.py, against the plans fixture.json recorded)
	if python3 tests/models_plans.py "$FIX"/*/fixture.json >"$tmp/out" 2>&1; then
		pass=$((pass + 1))
		printf "ok    %-28s %s plans\n" "plans-as-diffusers" "$(grep -c '^ok' "$tmp/out")"
	else
		fail=$((fail + 1))
		echo "FAIL  plans-as-diffusers"
		grep -v '^ok' "$tmp/out" | sed 's/^/      /' | head -10
	fi
	# control: Flux's plans without txt_ids' split, Wan's rope split on dim
	# 0, LTX's text mask split on dim 0, Flux.2's img_ids split on dim 0
	mkdir -p "$tmp/mutated"
	# every model as it is; the mutated ones overwrite theirs
	cp models/*.plan "$tmp/mutated/"
	sed 's/, split(txt_ids, dim = 0);/;/' models/flux.plan >"$tmp/mutated/flux.plan"
	sed 's/split(out\.\([01]\), dim = 1)/split(out.\1, dim = 0)/g' models/wan.plan \
		>"$tmp/mutated/wan.plan"
	sed 's/split(img_ids, dim = 1)/split(img_ids, dim = 0)/' models/flux2.plan >"$tmp/mutated/flux2.plan"
	sed 's/split(encoder_attention_mask, dim = 1)/split(encoder_attention_mask, dim = 0)/' \
		models/ltx.plan >"$tmp/mutated/ltx.plan"
	# Qwen-Image 2.1's _tp_plan without its SwiGLU gate_layer
	sed '/"transformer_blocks.\*.img_mlp.gate_layer" *: colwise;/d' models/qwenimage21.plan \
		>"$tmp/mutated/qwenimage21.plan"
	python3 tests/models_plans.py --models "$tmp/mutated" "$FIX"/*/fixture.json >"$tmp/out" 2>&1
	if [ $? = 1 ] && grep -q 'flux.plan plan flux_usp: missing "" : split(txt_ids, dim = 0)' \
		"$tmp/out" && grep -q 'wan.plan plan wan_ring: missing "rope" : split(out.0, dim = 1)' \
		"$tmp/out" && grep -q 'ltx.plan plan ltx_usp: missing "" : split(encoder_attention_mask, dim = 1)' \
		"$tmp/out" && grep -q 'flux2.plan plan flux2_ring: missing "" : split(img_ids, dim = 1)' \
		"$tmp/out" && grep -q 'qwenimage21.plan plan qwenimage21_tp: missing "transformer_blocks.\*.img_mlp.gate_layer" : colwise' \
		"$tmp/out"; then
		pass=$((pass + 1))
		printf "ok    %-28s %s plans missing a rule (fail, as they must)\n" \
			"control-plans-mutated" "$(grep -c '^FAIL' "$tmp/out")"
	else
		fail=$((fail + 1))
		echo "FAIL  control-plans-mutated: the mutated plans were not all refused"
		sed 's/^/      /' "$tmp/out" | head -10
	fi

	# negative controls: a weight off by 0.25 (one element of a per-head
	# QK norm), Qwen-Image's padding unmasked
	mkdir -p "$tmp/perturbed"
	cp "$FIX/flux_dev/transformer/config.json" "$tmp/perturbed/"
	safetensors_edit "$FIX/flux_dev/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed/diffusion_pytorch_model.safetensors" \
		single_transformer_blocks.1.attn.norm_k.weight 0.25
	control control-perturbed-weight flux_dev flux flux_ulysses "ulysses = 2" \
		"$tmp/perturbed" "$FIX/flux_dev/inputs.safetensors"
	safetensors_edit "$FIX/qwenimage/inputs.safetensors" "$tmp/unmasked.safetensors" \
		encoder_hidden_states_mask =1
	control control-mask-ignored qwenimage qwenimage qwenimage_ring "ring = 2" \
		"$FIX/qwenimage/transformer" "$tmp/unmasked.safetensors"
	# LTX: one element of a block's norm_q weight (over the inner dim) off by
	# 0.25; the text mask ignored
	mkdir -p "$tmp/perturbed_ltx"
	cp "$FIX/ltx/transformer/config.json" "$tmp/perturbed_ltx/"
	safetensors_edit "$FIX/ltx/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_ltx/diffusion_pytorch_model.safetensors" \
		transformer_blocks.1.attn1.norm_q.weight 0.25
	control control-ltx-perturbed-weight ltx ltx ltx_tp "tp = 2" "$tmp/perturbed_ltx" \
		"$FIX/ltx/inputs.safetensors"
	safetensors_edit "$FIX/ltx/inputs.safetensors" "$tmp/ltx_unmasked.safetensors" \
		encoder_attention_mask =1
	control control-ltx-mask-ignored ltx ltx ltx_ulysses "ulysses = 2" \
		"$FIX/ltx/transformer" "$tmp/ltx_unmasked.safetensors"
	# LTX's RoPE per head (the inner dim's table cut to one head's width
	# and applied to each head) instead of over the whole inner dim
	sed -e 's/heads = 1);/heads = num_attention_heads);/' \
		-e 's/^  \(rotary_emb\.\(cos\|sin\)\) *= \(reshape(.*);\)$/  \1_all = \3\n  \1 = slice(\1_all, dim = 1, start = 0, length = attention_head_dim);/' \
		models/ltx.plan >"$tmp/ltx_per_head.plan"
	control control-ltx-rope-per-head ltx "$tmp/ltx_per_head.plan" ltx_single "tp = 1" \
		"$FIX/ltx/transformer" "$FIX/ltx/inputs.safetensors"
	# Flux with its timesteps multiplied by 1000 after the frequencies
	# (Timesteps' scale, float32): the same angles without bf16's rounding
	# of t * 1000, which diffusers' bf16 forward has
	sed 's/input_scale = 1000/scale = 1000/' models/flux.plan >"$tmp/unrounded_flux.plan"
	control control-timestep-unrounded flux_bf16_t "$tmp/unrounded_flux.plan" flux_tp \
		"tp = 1" "$FIX/flux_bf16_t/transformer" "$FIX/flux_bf16_t/inputs.safetensors"
fi

# ---- Flux.2: models/flux2.plan (Flux2Transformer2DModel) -----------------------------------
fixtures_present flux2_dev flux2_odd flux2_bf16
if [ "$MODE" = mpi ]; then
	case_ mpi-flux2-dev-ulysses2xtp2 flux2_dev flux2 flux2_tp_usp "ring = 1, ulysses = 2, tp = 2" "$AA"
	case_ mpi-flux2-odd-ring-any3-presharded flux2_odd flux2 flux2_ring_anything "ring = 3" \
		"ring_anything = true, $AG" shard
else
	# Flux.2-dev (guidance): 4 heads x 8, mlp_hidden 96, 12 image + 8 text
	# tokens; tp cuts the packed to_qkv_mlp_proj / linear_in by blocks
	full case_ flux2-dev-1rank flux2_dev flux2 flux2_tp "tp = 1" ""
	full case_ flux2-dev-tp2 flux2_dev flux2 flux2_tp "tp = 2" ""
	case_ flux2-dev-tp4 flux2_dev flux2 flux2_tp "tp = 4" ""
	full case_ flux2-dev-ulysses2 flux2_dev flux2 flux2_ulysses "ulysses = 2" ""
	full case_ flux2-dev-ulysses4 flux2_dev flux2 flux2_ulysses "ulysses = 4" ""
	full case_ flux2-dev-ring2-allgather flux2_dev flux2 flux2_ring "ring = 2" "$AG"
	full case_ flux2-dev-ring4-alltoall flux2_dev flux2 flux2_ring_alltoall "ring = 4" "$AA"
	case_ flux2-dev-usp flux2_dev flux2 flux2_usp "ring = 2, ulysses = 2" "$AG"
	full case_ flux2-dev-ulysses2xtp2 flux2_dev flux2 flux2_tp_usp "ring = 1, ulysses = 2, tp = 2" "$AA"
	full case_ flux2-dev-ring2xtp2 flux2_dev flux2 flux2_tp_usp "ring = 2, ulysses = 1, tp = 2" "$AG"
	full case_ flux2-dev-usp-tp2 flux2_dev flux2 flux2_tp_usp "ring = 2, ulysses = 2, tp = 2" "$AA"
	case_ flux2-dev-tp2-presharded flux2_dev flux2 flux2_tp "tp = 2" "" shard
	# no guidance, 3 heads x 12, mlp_ratio 2.5, patch 2, rope_theta 500,
	# 15 + 7 tokens, batch 2: the anything modes
	full case_ flux2-odd-1rank flux2_odd flux2 flux2_tp "tp = 1" ""
	full case_ flux2-odd-ulysses-any2 flux2_odd flux2 flux2_ulysses_anything "ulysses = 2" \
		"ulysses_anything = true"
	full case_ flux2-odd-ring-any2 flux2_odd flux2 flux2_ring_anything "ring = 2" \
		"ring_anything = true, $AA"
	case_ flux2-odd-ring-any3 flux2_odd flux2 flux2_ring_anything "ring = 3" \
		"ring_anything = true, $AG"
	# CFG parallel over the batch of 2 (the ids' row 0 is gathered over cfg
	# first: a note) with Ring Anything 3 in each group
	full case_ flux2-odd-cfg2xring-any3 flux2_odd flux2 flux2_ring_anything "cfg = 2, ring = 3" \
		"ring_anything = true, $AA"
	# Flux.2-dev in bf16 (--dtype bf16): 2 heads, 8 + 4 tokens
	full case_ flux2-bf16-1rank flux2_bf16 flux2 flux2_tp "tp = 1" ""
	full case_ flux2-bf16-tp2 flux2_bf16 flux2 flux2_tp "tp = 2" ""
	case_ flux2-bf16-usp flux2_bf16 flux2 flux2_usp "ring = 2, ulysses = 2" "$AA"

	for f in flux2_dev flux2_odd flux2_bf16; do bound "bound-$f" ok $f flux2 flux2_tp; done
	# control: Flux.2-dev compiled without guidance leaves its guidance embedder out
	bound control-bound-flux2-no-guidance fail flux2_dev flux2 flux2_tp -D guidance_embeds=false

	# refused NAME PATTERN CHECK-ARGS...: dtpc check of flux2_tp fails with
	# an error at models/flux2.plan matching PATTERN
	refused() {
		r_name=$1 r_pat=$2
		shift 2
		wanted "$r_name" || return 0
		if "$DTPC" check models/flux2.plan --plan flux2_tp --no-color "$@" >"$tmp/out" 2>&1; then
			fail=$((fail + 1))
			echo "FAIL  $r_name: compiled"
		elif grep -q "^models/flux2.plan:[0-9]*:[0-9]*: error: $r_pat" "$tmp/out"; then
			pass=$((pass + 1))
			printf "ok    %-28s %s\n" "$r_name" "$(grep -m1 'error:' "$tmp/out" | cut -c1-90)"
		else
			fail=$((fail + 1))
			echo "FAIL  $r_name: not the error /$r_pat/"
			sed 's/^/      /' "$tmp/out" | head -10
		fi
	}
	# where the class's _tp_plan cannot run, dtpc refuses at compile time, at
	# the rule: 3 heads over tp = 2 (diffusers checks only the blocks, 36
	# and 90, and its processor's unflatten by head_dim fails on a rank's
	# 18 columns), and mlp_hidden 102 over tp = 4 (diffusers refuses it too)
	# shellcheck disable=SC2046 # the -D options split into words
	refused flux2-odd-tp2-refused 'colwise over tp = 2 splits the 3 heads' --mesh "tp = 2" \
		--config "$FIX/flux2_odd/transformer" $(fixture defines flux2_odd)
	# shellcheck disable=SC2046
	refused flux2-packed-block-refused "packed block 0 (102) of 'transformer_blocks.0.ff.linear_in'" \
		--mesh "tp = 4" --config "$FIX/flux2_dev/transformer" $(fixture defines flux2_dev) \
		-D attention_head_dim=10 -D mlp_ratio=2.55 -D "axes_dims_rope=[2,2,2,4]"

	# negative controls: one QK-norm weight of a single block off by 0.25
	# under tp 2 (the packed split); the RoPE at Flux.1's theta 10000 instead
	# of the config's rope_theta 500 (flux2_odd: flux2_dev's RoPE axes of 2
	# have one frequency, 1, whatever theta); the single blocks' SwiGLU
	# gating the up half instead of the gate half
	mkdir -p "$tmp/perturbed_flux2"
	cp "$FIX/flux2_dev/transformer/config.json" "$tmp/perturbed_flux2/"
	safetensors_edit "$FIX/flux2_dev/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_flux2/diffusion_pytorch_model.safetensors" \
		single_transformer_blocks.1.attn.norm_k.weight 0.25
	control control-flux2-perturbed-weight flux2_dev flux2 flux2_tp "tp = 2" \
		"$tmp/perturbed_flux2" "$FIX/flux2_dev/inputs.safetensors"
	sed 's/theta = rope_theta/theta = 10000/' models/flux2.plan >"$tmp/flux2_theta.plan"
	control control-flux2-rope-theta flux2_odd "$tmp/flux2_theta.plan" flux2_tp "tp = 1" \
		"$FIX/flux2_odd/transformer" "$FIX/flux2_odd/inputs.safetensors"
	sed 's/silu(attn.mlp_act_fn.gate);/silu(attn.mlp_act_fn.linear);/' models/flux2.plan \
		>"$tmp/flux2_swiglu.plan"
	control control-flux2-swiglu-halves flux2_dev "$tmp/flux2_swiglu.plan" flux2_tp "tp = 2" \
		"$FIX/flux2_dev/transformer" "$FIX/flux2_dev/inputs.safetensors"

	# every plan of the file at Flux.2-dev's size (the class's defaults),
	# 1024x1024: 4096 image and 512 text tokens
	if "$DTPC" check models/flux2.plan -q --no-color >"$tmp/out" 2>&1; then
		pass=$((pass + 1))
		printf "ok    %-28s %s plans\n" flux2-dev-size-check "$(grep -c '^plan ' models/flux2.plan)"
	else
		fail=$((fail + 1))
		echo "FAIL  flux2-dev-size-check"
		sed 's/^/      /' "$tmp/out" | head -10
	fi
fi

# --- SD3 / SD3.5 (models/sd3.plan; the plans are dtpc's own: the class has no
# _cp_plan or _tp_plan) ----------------------------------------------------------
fixtures_present sd3 sd3_odd sd35_medium sd35_bf16
if [ "$MODE" = mpi ]; then
	case_ mpi-sd3-usp sd3 sd3 sd3_usp "ring = 2, ulysses = 2" "$AA"
	case_ mpi-sd35-medium-ulysses2xtp2 sd35_medium sd3 sd3_tp_usp "ring = 1, ulysses = 2, tp = 2" ""
	case_ mpi-sd3-odd-ring-any3-presharded sd3_odd sd3 sd3_ring_anything "ring = 3" \
		"ring_anything = true, $AG" shard
else
	# SD3: 3 blocks (the last context_pre_only), 4 heads x 6, 4 x 3 = 12
	# image + 8 text tokens
	full case_ sd3-1rank sd3 sd3 sd3_tp "tp = 1" ""
	full case_ sd3-tp2 sd3 sd3 sd3_tp "tp = 2" ""
	full case_ sd3-tp4 sd3 sd3 sd3_tp "tp = 4" ""
	full case_ sd3-ulysses2 sd3 sd3 sd3_ulysses "ulysses = 2" ""
	full case_ sd3-ulysses4 sd3 sd3 sd3_ulysses "ulysses = 4" ""
	full case_ sd3-ring2-allgather sd3 sd3 sd3_ring "ring = 2" "$AG"
	full case_ sd3-ring4-alltoall sd3 sd3 sd3_ring_alltoall "ring = 4" "$AA"
	case_ sd3-usp sd3 sd3 sd3_usp "ring = 2, ulysses = 2" "$AG"
	full case_ sd3-ulysses2xtp2 sd3 sd3 sd3_tp_usp "ring = 1, ulysses = 2, tp = 2" ""
	case_ sd3-ring2xtp2-presharded sd3 sd3 sd3_tp_usp "ring = 2, ulysses = 1, tp = 2" "$AA" shard
	# SD3's corners: 3 heads, 2 blocks, out_channels 6, batch 2, 15 + 7
	# tokens (tp 3 and the anything modes)
	full case_ sd3-odd-1rank sd3_odd sd3 sd3_tp "tp = 1" ""
	full case_ sd3-odd-tp3 sd3_odd sd3 sd3_tp "tp = 3" ""
	full case_ sd3-odd-ulysses-any2 sd3_odd sd3 sd3_ulysses_anything "ulysses = 2" \
		"ulysses_anything = true"
	case_ sd3-odd-ring-any3 sd3_odd sd3 sd3_ring_anything "ring = 3" "ring_anything = true, $AG"
	full case_ sd3-odd-ring-any4 sd3_odd sd3 sd3_ring_anything "ring = 4" "ring_anything = true, $AA"
	# SD3.5 medium-like: qk_norm rms_norm, dual attention on blocks 0 and 1
	# of 3, 4 heads x 6, 16 + 8 tokens
	full case_ sd35-medium-1rank sd35_medium sd3 sd3_tp "tp = 1" ""
	full case_ sd35-medium-tp2 sd35_medium sd3 sd3_tp "tp = 2" ""
	case_ sd35-medium-tp4 sd35_medium sd3 sd3_tp "tp = 4" ""
	full case_ sd35-medium-ulysses2 sd35_medium sd3 sd3_ulysses "ulysses = 2" ""
	case_ sd35-medium-ulysses4 sd35_medium sd3 sd3_ulysses "ulysses = 4" ""
	full case_ sd35-medium-ring2-allgather sd35_medium sd3 sd3_ring "ring = 2" "$AG"
	full case_ sd35-medium-ring4-alltoall sd35_medium sd3 sd3_ring_alltoall "ring = 4" "$AA"
	full case_ sd35-medium-usp sd35_medium sd3 sd3_usp "ring = 2, ulysses = 2" "$AA"
	full case_ sd35-medium-uspxtp2 sd35_medium sd3 sd3_tp_usp "ring = 2, ulysses = 2, tp = 2" "$AG"
	full case_ sd35-medium-ring-any3 sd35_medium sd3 sd3_ring_anything "ring = 3" \
		"ring_anything = true, $AA"
	# SD3.5 in bf16 (--dtype bf16): 2 heads x 16, dual attention on block 0
	full case_ sd35-bf16-1rank sd35_bf16 sd3 sd3_tp "tp = 1" ""
	full case_ sd35-bf16-tp2 sd35_bf16 sd3 sd3_tp "tp = 2" ""
	case_ sd35-bf16-ulysses2 sd35_bf16 sd3 sd3_ulysses "ulysses = 2" ""
	full case_ sd35-bf16-ring2-alltoall sd35_bf16 sd3 sd3_ring_alltoall "ring = 2" "$AA"

	for f in sd3 sd3_odd sd35_medium sd35_bf16; do bound "bound-$f" ok $f sd3 sd3_tp; done
	# controls: SD3.5 compiled without its qk norms, or without its dual
	# attention, leaves their weights out
	bound control-bound-sd35-no-qk-norm fail sd35_medium sd3 sd3_tp -D qk_norm=none
	bound control-bound-sd35-no-dual fail sd35_medium sd3 sd3_tp -D 'dual_attention_layers=[]'

	# negative controls: one element of attn2's norm_q weight off by 0.25;
	# PatchEmbed's positions cropped one row off the centre; the joint
	# attention over [text, image] (Flux's order) instead of SD3's [image,
	# text], the image's output then read from the text's rows
	mkdir -p "$tmp/perturbed_sd35"
	cp "$FIX/sd35_medium/transformer/config.json" "$tmp/perturbed_sd35/"
	safetensors_edit "$FIX/sd35_medium/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_sd35/diffusion_pytorch_model.safetensors" \
		transformer_blocks.1.attn2.norm_q.weight 0.25
	control control-sd35-perturbed-weight sd35_medium sd3 sd3_ulysses "ulysses = 2" \
		"$tmp/perturbed_sd35" "$FIX/sd35_medium/inputs.safetensors"
	sed 's|start = (pos_embed_max_size - height // patch_size) // 2,|start = (pos_embed_max_size - height // patch_size) // 2 + 1,|' \
		models/sd3.plan >"$tmp/sd3_crop_off.plan"
	control control-sd3-crop-off-centre sd3 "$tmp/sd3_crop_off.plan" sd3_tp "tp = 1" \
		"$FIX/sd3/transformer" "$FIX/sd3/inputs.safetensors"
	sed 's/concat(attn\.\(to_[qkv]\), attn\.\(add_[qkv]_proj\), dim = 1)/concat(attn.\2, attn.\1, dim = 1)/' \
		models/sd3.plan >"$tmp/sd3_text_first.plan"
	control control-sd3-text-first sd3 "$tmp/sd3_text_first.plan" sd3_tp "tp = 1" \
		"$FIX/sd3/transformer" "$FIX/sd3/inputs.safetensors"
fi
# --- Helios (models/helios.plan: HeliosTransformer3DModel's forward without
# the history latents; the plans are its _cp_plan, split at attn1 / attn2 /
# ffn and gathered at each) -------------------------------------------------------
fixtures_present helios helios_odd helios_bf16 helios_history helios_history_odd helios_history_bf16
if [ "$MODE" = mpi ]; then
	case_ mpi-helios-usp helios helios helios_usp "ring = 2, ulysses = 2" "$AA"
	case_ mpi-helios-odd-ring3-presharded helios_odd helios helios_ring "ring = 3" "$AG" shard
	case_ mpi-helios-bf16-ulysses2xffn-tp2 helios_bf16 helios helios_ffn_tp_usp \
		"ring = 1, ulysses = 2, tp = 2" ""
	case_ mpi-helios-history-usp helios_history helios helios_usp "ring = 2, ulysses = 2" "$AA"
	case_ mpi-helios-history-odd-ring3-presharded helios_history_odd helios helios_ring \
		"ring = 3" "$AG" shard
else
	# Helios: 4 heads x 8, 2 blocks, 2 x 2 x 4 = 16 tokens, 6 text tokens
	full case_ helios-1rank helios helios helios_single "tp = 1" ""
	full case_ helios-ulysses2 helios helios helios_ulysses "ulysses = 2" ""
	case_ helios-ulysses4 helios helios helios_ulysses "ulysses = 4" ""
	full case_ helios-ring2-allgather helios helios helios_ring "ring = 2" "$AG"
	full case_ helios-ring4-alltoall helios helios helios_ring_alltoall "ring = 4" "$AA"
	case_ helios-usp helios helios helios_usp "ring = 2, ulysses = 2" "$AG"
	full case_ helios-uspxffn-tp2 helios helios helios_ffn_tp_usp \
		"ring = 2, ulysses = 2, tp = 2" "$AA"
	full case_ helios-ring2xffn-tp2-presharded helios helios helios_ffn_tp_usp \
		"ring = 2, ulysses = 1, tp = 2" "$AG" shard
	# Helios' corners: 3 heads x 12, batch 2, 45 tokens, 7 text tokens, no
	# cross_attn_norm, rope_dim (4, 6, 2) at theta 500
	full case_ helios-odd-1rank helios_odd helios helios_single "tp = 1" ""
	full case_ helios-odd-ring3-allgather helios_odd helios helios_ring "ring = 3" "$AG"
	full case_ helios-odd-ulysses3 helios_odd helios helios_ulysses "ulysses = 3" ""
	case_ helios-odd-ulysses-any2 helios_odd helios helios_ulysses_anything "ulysses = 2" \
		"ulysses_anything = true"
	full case_ helios-odd-ring-any2 helios_odd helios helios_ring_anything "ring = 2" \
		"ring_anything = true, $AA"
	full case_ helios-odd-ring-any4 helios_odd helios helios_ring_anything "ring = 4" \
		"ring_anything = true, $AG"
	# Helios in bf16 (--dtype bf16): 2 heads x 16, temporal patch 2, batch 2
	full case_ helios-bf16-1rank helios_bf16 helios helios_single "tp = 1" ""
	full case_ helios-bf16-ulysses2 helios_bf16 helios helios_ulysses "ulysses = 2" ""
	full case_ helios-bf16-ring2-alltoall helios_bf16 helios helios_ring_alltoall "ring = 2" "$AA"
	case_ helios-bf16-usp helios_bf16 helios helios_usp "ring = 2, ulysses = 2" "$AA"
	full case_ helios-bf16-ulysses2xffn-tp2 helios_bf16 helios helios_ffn_tp_usp \
		"ring = 1, ulysses = 2, tp = 2" ""
	# helios_usp_sequence (dtpc's own): the sequence split once at blocks.0
	case_ helios-sequence-usp helios helios helios_usp_sequence "ring = 2, ulysses = 2" "$AA"
	full case_ helios-odd-sequence-ring3 helios_odd helios helios_usp_sequence \
		"ring = 3, ulysses = 1" "$AG"
	full case_ helios-bf16-sequence-ulysses2 helios_bf16 helios helios_usp_sequence \
		"ring = 1, ulysses = 2" ""

	for f in helios helios_bf16; do bound "bound-$f" ok $f helios helios_single; done
	# helios_odd's memory patches (patch_short / _mid / _long) and attn1's
	# history_key_scale are read only with history latents, which the model
	# does not take: its graph leaves those 8 tensors unbound, as diffusers'
	# forward without history leaves them unread
	bound control-bound-helios-odd-history fail helios_odd helios helios_single
	# control: Helios compiled without cross_attn_norm leaves norm2's
	# weights out
	bound control-bound-helios-no-norm2 fail helios helios helios_single -D cross_attn_norm=false

	# negative controls: one element of attn1's norm_k weight off by 0.25;
	# Wan's RoPE axes (head_dim - 4 (head_dim // 6), 2 (head_dim // 6) twice)
	# instead of rope_dim; rope_theta ignored (Wan's 10000)
	mkdir -p "$tmp/perturbed_helios"
	cp "$FIX/helios/transformer/config.json" "$tmp/perturbed_helios/"
	safetensors_edit "$FIX/helios/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_helios/diffusion_pytorch_model.safetensors" \
		blocks.1.attn1.norm_k.weight 0.25
	control control-helios-perturbed-weight helios helios helios_ulysses "ulysses = 2" \
		"$tmp/perturbed_helios" "$FIX/helios/inputs.safetensors"
	sed 's/rope_freqs(rope\.ids, rope_dim,/rope_freqs(rope.ids, [attention_head_dim - 4 * (attention_head_dim \/\/ 6), 2 * (attention_head_dim \/\/ 6), 2 * (attention_head_dim \/\/ 6)],/' \
		models/helios.plan >"$tmp/helios_wan_axes.plan"
	control control-helios-wan-rope-axes helios_odd "$tmp/helios_wan_axes.plan" helios_single \
		"tp = 1" "$FIX/helios_odd/transformer" "$FIX/helios_odd/inputs.safetensors"
	sed 's/theta = rope_theta/theta = 10000/' models/helios.plan >"$tmp/helios_theta.plan"
	control control-helios-theta-ignored helios_odd "$tmp/helios_theta.plan" helios_ring \
		"ring = 3" "$FIX/helios_odd/transformer" "$FIX/helios_odd/inputs.safetensors"

	# --- Helios with its history (HeliosPipeline's chunks: -D short_frames /
	# mid_frames / long_frames, frame_indices; fixture.json has them)
	# helios_history: 4 heads x 8, 4 long + 8 mid + 64 short history tokens
	# before the sample's 32 (108), amplified keys per head, the pipeline's
	# frame indices
	full case_ helios-history-1rank helios_history helios helios_single "tp = 1" ""
	full case_ helios-history-ulysses2 helios_history helios helios_ulysses "ulysses = 2" ""
	case_ helios-history-ulysses4 helios_history helios helios_ulysses "ulysses = 4" ""
	full case_ helios-history-ring2-allgather helios_history helios helios_ring "ring = 2" "$AG"
	case_ helios-history-ring4-alltoall helios_history helios helios_ring_alltoall "ring = 4" "$AA"
	case_ helios-history-usp helios_history helios helios_usp "ring = 2, ulysses = 2" "$AG"
	full case_ helios-history-uspxffn-tp2 helios_history helios helios_ffn_tp_usp \
		"ring = 2, ulysses = 2, tp = 2" "$AG"
	case_ helios-history-sequence-usp helios_history helios helios_usp_sequence \
		"ring = 2, ulysses = 2" "$AA"
	full case_ helios-history-sequence-ulysses4 helios_history helios helios_usp_sequence \
		"ring = 1, ulysses = 4" ""
	# helios_history_odd: 3 heads x 12, batch 2, 1 + 4 + 16 history tokens
	# before 48 (69), a scalar key scale, no guidance_cross_attn
	full case_ helios-history-odd-1rank helios_history_odd helios helios_single "tp = 1" ""
	case_ helios-history-odd-ring3-allgather helios_history_odd helios helios_ring "ring = 3" "$AG"
	full case_ helios-history-odd-ulysses3 helios_history_odd helios helios_ulysses "ulysses = 3" ""
	case_ helios-history-odd-ulysses-any2 helios_history_odd helios helios_ulysses_anything \
		"ulysses = 2" "ulysses_anything = true"
	full case_ helios-history-odd-ring-any2 helios_history_odd helios helios_ring_anything \
		"ring = 2" "ring_anything = true, $AA"
	case_ helios-history-odd-ring-any4 helios_history_odd helios helios_ring_anything \
		"ring = 4" "ring_anything = true, $AG"
	# helios_history_bf16: short and mid history only, zero_history_timestep
	# off, indices_hidden_states None (forward's arange)
	case_ helios-history-bf16-1rank helios_history_bf16 helios helios_single "tp = 1" ""
	full case_ helios-history-bf16-ring2-alltoall helios_history_bf16 helios helios_ring_alltoall \
		"ring = 2" "$AA"
	full case_ helios-history-bf16-sequence-ulysses2 helios_history_bf16 helios \
		helios_usp_sequence "ring = 1, ulysses = 2" ""
	# every checkpoint tensor bound with the three histories; helios_history_bf16
	# has no long history, so patch_long's 2 tensors stay unbound (diffusers'
	# forward does not read them either)
	for f in helios_history helios_history_odd; do
		bound "bound-$(echo $f | tr _ -)" ok $f helios helios_single
	done
	bound control-bound-helios-history-bf16-no-long fail helios_history_bf16 helios helios_single

	# negative controls, each on the history path: one element of patch_long's
	# kernel off by 0.25; the keys not amplified; the history tokens modulated
	# as the sample's (zero_history_timestep ignored); the mid table's mean
	# over 4 instead of 8 tokens; attn2 over every token (guidance_cross_attn
	# ignored); the history's frame indices taken as x positions (t, 0, 0) ->
	# (0, 0, t)
	mkdir -p "$tmp/perturbed_helios_history"
	cp "$FIX/helios_history/transformer/config.json" "$tmp/perturbed_helios_history/"
	safetensors_edit "$FIX/helios_history/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_helios_history/diffusion_pytorch_model.safetensors" \
		patch_long.weight 0.25
	control control-helios-history-perturbed-weight helios_history helios helios_ulysses \
		"ulysses = 2" "$tmp/perturbed_helios_history" "$FIX/helios_history/inputs.safetensors"
	hh() {  # hh NAME SED [FIXTURE]: helios.plan edited by SED, on one rank
		hh_f=${3:-helios_history}
		sed "$2" models/helios.plan >"$tmp/$1.plan"
		control "$1" $hh_f "$tmp/$1.plan" helios_single "tp = 1" "$FIX/$hh_f/transformer" \
			"$FIX/$hh_f/inputs.safetensors"
	}
	hh control-helios-history-keys-not-amplified \
		's/attention(attn1\.query, attn1\.key_amplified,/attention(attn1.query, attn1.key,/'
	hh control-helios-history-sample-modulation 's/ and zero_history_timestep {/ and false {/'
	hh control-helios-history-mid-mean 's/value = 0\.125)/value = 0.25)/'
	hh control-helios-history-cross-attn-all 's/if guidance_cross_attn and/if false and/'
	hh control-helios-history-indices-on-x \
		's/pad(rotary_emb_history_\([a-z]*\)\.t, dim = 2, after = 2)/pad(rotary_emb_history_\1.t, dim = 2, before = 2)/'

	# control of plans-as-diffusers: Helios' plans without the ffn's gather,
	# or with rotary_emb split at the query's rope only
	if wanted control-plans-helios; then
		mkdir -p "$tmp/mutated_helios"
		cp models/*.plan "$tmp/mutated_helios/"
		sed -e '/"blocks\.\*\.ffn\.net\.2" *: gather/d' -e 's/"blocks\.\*\.attn1\.{query,key}"/"blocks.*.attn1.query"/' \
			models/helios.plan >"$tmp/mutated_helios/helios.plan"
		python3 tests/models_plans.py --models "$tmp/mutated_helios" "$FIX"/*/fixture.json \
			>"$tmp/out" 2>&1
		if [ $? = 1 ] && [ "$(grep -c '^FAIL' "$tmp/out")" = 7 ] &&
			grep -q 'helios.plan plan helios_ring: missing "blocks.\*.attn1.{query,key}" : split(cos, dim = 0); "blocks.\*.attn1.{query,key}" : split(sin, dim = 0); "blocks.\*.ffn.net.2" : gather(dim = 1)$' "$tmp/out"
		then
			pass=$((pass + 1))
			printf "ok    %-28s %s\n" control-plans-helios "7 Helios plans missing 3 rules (fail, as they must)"
		else
			fail=$((fail + 1))
			echo "FAIL  control-plans-helios: the mutated plans were not all refused"
			sed 's/^/      /' "$tmp/out" | grep -v '^      ok' | head -10
		fi
	fi
fi

# --- Wan 2.2 TI2V, Wan 2.1 I2V / FLF2V (models/wan.plan at its other configs) ---
fixtures_present wan22_ti2v wan22_ti2v_bf16 wan_i2v wan_flf2v wan22_a14b_low
if [ "$MODE" = mpi ]; then
	case_ mpi-wan22-ti2v-ulysses3 wan22_ti2v wan wan_ti2v_usp "ring = 1, ulysses = 3" ""
	case_ mpi-wan-i2v-usp wan_i2v wan wan_usp "ring = 2, ulysses = 2" "$AA"
else
	# TI2V: per-token timesteps [1, 45] split with the tokens; 3 heads, 45 tokens
	full case_ wan22-ti2v-1rank wan22_ti2v wan wan_single "tp = 1" ""
	full case_ wan22-ti2v-ulysses3 wan22_ti2v wan wan_ti2v_usp "ring = 1, ulysses = 3" ""
	full case_ wan22-ti2v-ring3-allgather wan22_ti2v wan wan_ti2v_usp "ring = 3, ulysses = 1" "$AG"
	case_ wan22-ti2v-ring5-alltoall wan22_ti2v wan wan_ti2v_usp "ring = 5, ulysses = 1" "$AA"
	full case_ wan22-ti2v-usp3x3 wan22_ti2v wan wan_ti2v_usp "ring = 3, ulysses = 3" "$AA"
	full case_ wan22-ti2v-ulysses-any2 wan22_ti2v wan wan_ti2v_ulysses_anything "ulysses = 2" \
		"ulysses_anything = true"
	case_ wan22-ti2v-ring-any4 wan22_ti2v wan wan_ti2v_ring_anything "ring = 4" \
		"ring_anything = true, $AG"
	# a text-to-video plan (no timestep split): the replicated per-token
	# modulation is sliced to each rank's tokens, the same sample
	full case_ wan22-ti2v-t2v-plan-ring3 wan22_ti2v wan wan_ring "ring = 3" "$AG"
	full case_ wan22-ti2v-ffn-tp2xulysses3 wan22_ti2v wan wan_ti2v_ffn_tp_ulysses \
		"ulysses = 3, tp = 2" ""
	# TI2V in bf16: batch 2, 2 heads, 16 tokens
	full case_ wan22-ti2v-bf16-1rank wan22_ti2v_bf16 wan wan_single "tp = 1" ""
	case_ wan22-ti2v-bf16-ulysses2 wan22_ti2v_bf16 wan wan_ti2v_usp "ring = 1, ulysses = 2" ""
	full case_ wan22-ti2v-bf16-usp wan22_ti2v_bf16 wan wan_ti2v_usp "ring = 2, ulysses = 2" "$AA"
	# I2V: image embedder, attn2's image keys (5 image + 512 text tokens), 2
	# heads, 12 tokens, batch 2
	full case_ wan-i2v-1rank wan_i2v wan wan_single "tp = 1" ""
	case_ wan-i2v-ulysses2 wan_i2v wan wan_ulysses "ulysses = 2" ""
	full case_ wan-i2v-ring2-allgather wan_i2v wan wan_ring "ring = 2" "$AG"
	full case_ wan-i2v-ring4-alltoall wan_i2v wan wan_ring_alltoall "ring = 4" "$AA"
	full case_ wan-i2v-usp wan_i2v wan wan_usp "ring = 2, ulysses = 2" "$AG"
	full case_ wan-i2v-ffn-tp2xulysses2 wan_i2v wan wan_ffn_tp_ulysses "ulysses = 2, tp = 2" ""
	case_ wan-i2v-ring-any5 wan_i2v wan wan_ring_anything "ring = 5" "ring_anything = true, $AA"
	full case_ wan-i2v-ring2-presharded wan_i2v wan wan_ring "ring = 2" "$AG" shard
	# FLF2V: two images a sample with pos_embed, 6 image + 509 text tokens of
	# which diffusers' attn2 takes the last 512 as text; 3 heads, 12 tokens
	full case_ wan-flf2v-1rank wan_flf2v wan wan_single "tp = 1" ""
	case_ wan-flf2v-ulysses3 wan_flf2v wan wan_ulysses "ulysses = 3" ""
	full case_ wan-flf2v-ring3-allgather wan_flf2v wan wan_ring "ring = 3" "$AG"
	full case_ wan-flf2v-ulysses-any2 wan_flf2v wan wan_ulysses_anything "ulysses = 2" \
		"ulysses_anything = true"
	full case_ wan-flf2v-ring-any5 wan_flf2v wan wan_ring_anything "ring = 5" \
		"ring_anything = true, $AG"

	# A14B's two experts: one graph, compiled from the high-noise expert's
	# config (`wan`), run with each expert's weights (`wan22_a14b_low`: the
	# same config, other weights) against each one's diffusers sample; the
	# control: the low-noise inputs on the high-noise weights must differ
	if wanted wan22-a14b-two-experts; then
		# shellcheck disable=SC2046 # the -D options split into words
		if compile_mesh models/wan.plan wan_usp "ring = 1, ulysses = 3" "" "$tmp/a14b.graph" \
			--config "$FIX/wan/transformer" $(fixture defines wan) >"$tmp/out" 2>&1; then
			a_res=""
			for a_pair in wan:wan wan22_a14b_low:wan22_a14b_low wan:wan22_a14b_low; do
				a_w=${a_pair%%:*} a_in=${a_pair#*:}
				replay "$MODE" "$tmp/a14b.graph" --timeout 60 --weights "$FIX/$a_w/transformer" \
					--inputs "$FIX/$a_in/inputs.safetensors" --save-outputs "$tmp/a14b.out.safetensors" \
					>>"$tmp/out" 2>&1 &&
					python3 tests/compare_st.py "$tmp/a14b.out.safetensors" \
						"$FIX/$a_in/expected.safetensors" 1e-5 >>"$tmp/out" 2>&1
				a_res="$a_res $?"
			done
		else
			a_res="not compiled"
		fi
		# the crossed run fails at the comparison, not before it
		if [ "$a_res" = " 0 0 1" ] && [ "$(grep -c 'max relative error' "$tmp/out")" = 3 ]; then
			pass=$((pass + 1))
			printf "ok    %-28s %s\n" wan22-a14b-two-experts \
				"one graph, both experts' weights within 1e-5; crossed: fails, as it must"
		else
			fail=$((fail + 1))
			echo "FAIL  wan22-a14b-two-experts: statuses$a_res (want 0 0 1)"
			sed 's/^/      /' "$tmp/out" | head -20
		fi
	fi
	for f in wan22_ti2v wan22_ti2v_bf16 wan_i2v wan_flf2v; do bound "bound-$f" ok $f wan wan_single; done
	# control: I2V compiled without added_kv_proj_dim leaves add_k_proj,
	# add_v_proj and norm_added_k out
	bound control-bound-wan-i2v-no-added-kv fail wan_i2v wan wan_single -D added_kv_proj_dim=none

	# negative controls: one element of attn2.add_k_proj's weight off by
	# 0.25; FLF2V's pos_embed zeroed; the context concatenated text first
	# (the processor's split then takes text rows as the image's); TI2V's
	# first frame at the sample's t (the timestep input as one per sample)
	mkdir -p "$tmp/perturbed_wan_i2v" "$tmp/perturbed_wan_flf2v"
	cp "$FIX/wan_i2v/transformer/config.json" "$tmp/perturbed_wan_i2v/"
	safetensors_edit "$FIX/wan_i2v/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_wan_i2v/diffusion_pytorch_model.safetensors" \
		blocks.1.attn2.add_k_proj.weight 0.25
	control control-wan-i2v-perturbed-add-k wan_i2v wan wan_ulysses "ulysses = 2" \
		"$tmp/perturbed_wan_i2v" "$FIX/wan_i2v/inputs.safetensors"
	cp "$FIX/wan_flf2v/transformer/config.json" "$tmp/perturbed_wan_flf2v/"
	safetensors_edit "$FIX/wan_flf2v/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_wan_flf2v/diffusion_pytorch_model.safetensors" \
		condition_embedder.image_embedder.pos_embed =0
	control control-wan-flf2v-no-pos-embed wan_flf2v wan wan_single "tp = 1" \
		"$tmp/perturbed_wan_flf2v" "$FIX/wan_flf2v/inputs.safetensors"
	sed 's/concat(condition_embedder\.image_embedder\.norm2, condition_embedder\.text_embedder\.linear_2,/concat(condition_embedder.text_embedder.linear_2, condition_embedder.image_embedder.norm2,/' \
		models/wan.plan >"$tmp/wan_text_first.plan"
	control control-wan-i2v-text-first wan_i2v "$tmp/wan_text_first.plan" wan_single "tp = 1" \
		"$FIX/wan_i2v/transformer" "$FIX/wan_i2v/inputs.safetensors"
	if wanted control-wan22-ti2v-one-timestep; then
		python3 - "$FIX/wan22_ti2v/inputs.safetensors" "$tmp/wan22_ti2v_flat.safetensors" <<'PY'
import json, struct, sys
# every token's timestep set to the last token's (the sample's t): the first
# frame's zeros, which the per-token path must carry, are lost
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
t = json.loads(b[8:8 + n])["timestep"]
s, e = (8 + n + o for o in t["data_offsets"])
b[s:e] = b[e - 4:e] * ((e - s) // 4)
open(sys.argv[2], "wb").write(bytes(b))
PY
		control control-wan22-ti2v-one-timestep wan22_ti2v wan wan_ti2v_usp "ring = 1, ulysses = 3" \
			"$FIX/wan22_ti2v/transformer" "$tmp/wan22_ti2v_flat.safetensors"
	fi
fi

# --- ChronoEdit (models/chronoedit.plan: wan.plan's model with rope_temporal_skip_len) ---
fixtures_present chronoedit chronoedit_frames3 chronoedit_bf16
if [ "$MODE" = mpi ]; then
	case_ mpi-chronoedit-usp chronoedit chronoedit chronoedit_usp "ring = 2, ulysses = 2" "$AG"
else
	# two frames at temporal positions 0 and 4, image conditioning; 2 heads, 12 tokens
	full case_ chronoedit-1rank chronoedit chronoedit chronoedit_single "tp = 1" ""
	case_ chronoedit-ulysses2 chronoedit chronoedit chronoedit_ulysses "ulysses = 2" ""
	full case_ chronoedit-ring3-allgather chronoedit chronoedit chronoedit_ring "ring = 3" "$AG"
	full case_ chronoedit-ring4-alltoall chronoedit chronoedit chronoedit_ring_alltoall "ring = 4" "$AA"
	full case_ chronoedit-usp chronoedit chronoedit chronoedit_usp "ring = 2, ulysses = 2" "$AA"
	full case_ chronoedit-ffn-tp2xulysses2 chronoedit chronoedit chronoedit_ffn_tp_ulysses \
		"ulysses = 2, tp = 2" ""
	full case_ chronoedit-ring-any5 chronoedit chronoedit chronoedit_ring_anything "ring = 5" \
		"ring_anything = true, $AG"
	# temporal reasoning (3 frames: Wan's positions); 3 heads, 18 tokens, batch 2
	full case_ chronoedit-frames3-1rank chronoedit_frames3 chronoedit chronoedit_single "tp = 1" ""
	case_ chronoedit-frames3-ulysses3 chronoedit_frames3 chronoedit chronoedit_ulysses "ulysses = 3" ""
	full case_ chronoedit-frames3-ulysses-any2 chronoedit_frames3 chronoedit \
		chronoedit_ulysses_anything "ulysses = 2" "ulysses_anything = true"
	full case_ chronoedit-frames3-ring-any4 chronoedit_frames3 chronoedit chronoedit_ring_anything \
		"ring = 4" "ring_anything = true, $AA"
	# bf16, the second frame's position clamped to rope_max_seq_len - 1
	full case_ chronoedit-bf16-1rank chronoedit_bf16 chronoedit chronoedit_single "tp = 1" ""
	case_ chronoedit-bf16-ring2-allgather chronoedit_bf16 chronoedit chronoedit_ring "ring = 2" "$AG"
	full case_ chronoedit-bf16-ulysses2 chronoedit_bf16 chronoedit chronoedit_ulysses "ulysses = 2" ""

	for f in chronoedit chronoedit_frames3 chronoedit_bf16; do
		bound "bound-$f" ok $f chronoedit chronoedit_single
	done
	# negative controls: Wan's RoPE for the two frames (positions 0, 1: the
	# class's difference from WanTransformer3DModel), on 1 rank and under
	# ring; the second frame one position early (3 for 4: freqs[:skip][-1]
	# read as freqs[skip - 2]). Read without the clamp to rope_max_seq_len,
	# chronoedit_bf16's position 11 is past the 7 positions: a compile error
	mkdir -p "$tmp/chronoedit_wan_rope" "$tmp/chronoedit_early"
	sed 's/if rope_temporal_skip_len != none and num_frames == 2 {/if false {/' models/wan.plan \
		>"$tmp/chronoedit_wan_rope/wan.plan"
	sed 's/else rope_max_seq_len) - 1)/else rope_max_seq_len) - 2)/' \
		models/wan.plan >"$tmp/chronoedit_early/wan.plan"
	cp models/chronoedit.plan "$tmp/chronoedit_wan_rope/"
	cp models/chronoedit.plan "$tmp/chronoedit_early/"
	control control-chronoedit-wan-rope chronoedit "$tmp/chronoedit_wan_rope/chronoedit.plan" \
		chronoedit_single "tp = 1" "$FIX/chronoedit/transformer" "$FIX/chronoedit/inputs.safetensors"
	control control-chronoedit-wan-rope-ring2 chronoedit "$tmp/chronoedit_wan_rope/chronoedit.plan" \
		chronoedit_ring "ring = 2" "$FIX/chronoedit/transformer" "$FIX/chronoedit/inputs.safetensors"
	control control-chronoedit-frame-early chronoedit "$tmp/chronoedit_early/chronoedit.plan" \
		chronoedit_single "tp = 1" "$FIX/chronoedit/transformer" "$FIX/chronoedit/inputs.safetensors"
fi

# --- Qwen-Image 2.1 (models/qwenimage21.plan: the cached decode step; the
# _tp_plan is the class's, the context plans are dtpc's own) ------------------
fixtures_present qwen21 qwen21_odd qwen21_bf16
if [ "$MODE" = mpi ]; then
	case_ mpi-qwen21-usp qwen21 qwenimage21 qwenimage21_usp "ring = 2, ulysses = 2" "$AA"
	case_ mpi-qwen21-ulysses2xtp2 qwen21 qwenimage21 qwenimage21_tp_usp \
		"ring = 1, ulysses = 2, tp = 2" ""
	case_ mpi-qwen21-odd-ring-any3-presharded qwen21_odd qwenimage21 qwenimage21_ring_anything \
		"ring = 3" "ring_anything = true, $AG" shard
else
	# 4 heads x 8, 2 blocks, batch 2 (sample 1 pads 3 of its 8 text
	# tokens), a 3 x 4 target: 12 queries, 8 cached + 12 keys
	full case_ qwen21-1rank qwen21 qwenimage21 qwenimage21_tp "tp = 1" ""
	full case_ qwen21-tp2 qwen21 qwenimage21 qwenimage21_tp "tp = 2" ""
	case_ qwen21-tp4 qwen21 qwenimage21 qwenimage21_tp "tp = 4" ""
	full case_ qwen21-ulysses2 qwen21 qwenimage21 qwenimage21_ulysses "ulysses = 2" ""
	full case_ qwen21-ulysses4 qwen21 qwenimage21 qwenimage21_ulysses "ulysses = 4" ""
	full case_ qwen21-ring2-allgather qwen21 qwenimage21 qwenimage21_ring "ring = 2" "$AG"
	full case_ qwen21-ring4-alltoall qwen21 qwenimage21 qwenimage21_ring_alltoall "ring = 4" "$AA"
	case_ qwen21-usp qwen21 qwenimage21 qwenimage21_usp "ring = 2, ulysses = 2" "$AG"
	full case_ qwen21-ulysses2xtp2 qwen21 qwenimage21 qwenimage21_tp_usp \
		"ring = 1, ulysses = 2, tp = 2" ""
	case_ qwen21-ring2xtp2-presharded qwen21 qwenimage21 qwenimage21_tp_usp \
		"ring = 2, ulysses = 1, tp = 2" "$AA" shard
	# the corners: 3 heads, 3 blocks, mlp_ratio 2, out_channels null, 20
	# queries and 7 cached text tokens (tp 3 and the anything modes)
	full case_ qwen21-odd-1rank qwen21_odd qwenimage21 qwenimage21_tp "tp = 1" ""
	full case_ qwen21-odd-tp3 qwen21_odd qwenimage21 qwenimage21_tp "tp = 3" ""
	full case_ qwen21-odd-ulysses-any2 qwen21_odd qwenimage21 qwenimage21_ulysses_anything \
		"ulysses = 2" "ulysses_anything = true"
	case_ qwen21-odd-ring-any3 qwen21_odd qwenimage21 qwenimage21_ring_anything "ring = 3" \
		"ring_anything = true, $AG"
	full case_ qwen21-odd-ring-any4 qwen21_odd qwenimage21 qwenimage21_ring_anything "ring = 4" \
		"ring_anything = true, $AA"
	# bf16 (--dtype bf16): 2 heads x 16, a 4 x 4 target, 8 text tokens
	full case_ qwen21-bf16-1rank qwen21_bf16 qwenimage21 qwenimage21_tp "tp = 1" ""
	full case_ qwen21-bf16-tp2 qwen21_bf16 qwenimage21 qwenimage21_tp "tp = 2" ""
	case_ qwen21-bf16-ulysses2 qwen21_bf16 qwenimage21 qwenimage21_ulysses "ulysses = 2" ""
	full case_ qwen21-bf16-ring2-alltoall qwen21_bf16 qwenimage21 qwenimage21_ring_alltoall \
		"ring = 2" "$AA"

	# every tensor but txt_in's (the cached step computes txt_in and drops
	# it: the text is in the cache); the control: with nothing left out on
	# purpose, txt_in is reported unbound
	for f in qwen21 qwen21_odd qwen21_bf16; do
		BOUND_UNUSED=txt_in. bound "bound-$f" ok $f qwenimage21 qwenimage21_tp
	done
	bound control-bound-qwen21-txt-in fail qwen21 qwenimage21 qwenimage21_tp

	# negative controls: one element of a block's gate_layer weight off by
	# 0.25; the cached keys taken from the next block's columns; the gates
	# without their tanh; one text token's mask flipped to 0 (the
	# key-padding mask must reach the cached keys); bf16 with 1000 · t
	# rounded to bf16
	mkdir -p "$tmp/perturbed_qwen21"
	cp "$FIX/qwen21/transformer/config.json" "$tmp/perturbed_qwen21/"
	safetensors_edit "$FIX/qwen21/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_qwen21/diffusion_pytorch_model.safetensors" \
		transformer_blocks.1.img_mlp.gate_layer.weight 0.25
	control control-qwen21-perturbed-weight qwen21 qwenimage21 qwenimage21_ulysses "ulysses = 2" \
		"$tmp/perturbed_qwen21" "$FIX/qwen21/inputs.safetensors"
	sed 's/start = i \* num_attention_heads/start = ((i + 1) % num_layers) * num_attention_heads/' \
		models/qwenimage21.plan >"$tmp/qwen21_layer_off.plan"
	control control-qwen21-cache-layer-off qwen21 "$tmp/qwen21_layer_off.plan" qwenimage21_tp \
		"tp = 1" "$FIX/qwen21/transformer" "$FIX/qwen21/inputs.safetensors"
	sed 's/gate\([12]\)_tanh *= tanh(gate[12]);/gate\1_tanh = gate\1;/' \
		models/qwenimage21.plan >"$tmp/qwen21_no_tanh.plan"
	control control-qwen21-no-tanh qwen21 "$tmp/qwen21_no_tanh.plan" qwenimage21_tp "tp = 1" \
		"$FIX/qwen21/transformer" "$FIX/qwen21/inputs.safetensors"
	safetensors_edit "$FIX/qwen21/inputs.safetensors" "$tmp/qwen21_unmasked.safetensors" \
		encoder_hidden_states_mask -1
	control control-qwen21-mask-ignored qwen21 qwenimage21 qwenimage21_ring "ring = 2" \
		"$FIX/qwen21/transformer" "$tmp/qwen21_unmasked.safetensors"
	sed 's/input_scale_f32 = true/input_scale_f32 = false/' models/qwenimage21.plan \
		>"$tmp/qwen21_rounded_t.plan"
	control control-qwen21-bf16-rounded-timestep qwen21_bf16 "$tmp/qwen21_rounded_t.plan" \
		qwenimage21_tp "tp = 1" "$FIX/qwen21_bf16/transformer" "$FIX/qwen21_bf16/inputs.safetensors"

	# ---- LTX-2 (models/ltx2.plan): video and audio streams, both outputs
	# (sample, audio_sample) compared. ltx2: video 4 heads x 6 (24 tokens),
	# audio 2 heads x 6 (10 latents), 8 text tokens; the _cp_plan splits the
	# video and its text, every rank computes the audio whole
	fixtures_present ltx2 ltx2_odd ltx2_bf16
	case_ ltx2-1rank ltx2 ltx2 ltx2_single "tp = 1" ""
	full case_ ltx2-ulysses2 ltx2 ltx2 ltx2_ulysses "ulysses = 2" ""
	case_ ltx2-ulysses4 ltx2 ltx2 ltx2_ulysses "ulysses = 4" ""
	case_ ltx2-ring2-allgather ltx2 ltx2 ltx2_ring "ring = 2" "$AG"
	full case_ ltx2-ring4-alltoall ltx2 ltx2 ltx2_ring_alltoall "ring = 4" "$AA"
	case_ ltx2-usp ltx2 ltx2 ltx2_usp "ring = 2, ulysses = 2" "$AG"
	# the corners (3 heads x 6, patch 2, audio patch_t 2, norm weights, no
	# biases, float32 frequencies, 25 fps; sharded): 12 + 7 tokens, the
	# anything modes
	case_ ltx2-odd-1rank ltx2_odd ltx2 ltx2_single "tp = 1" ""
	case_ ltx2-odd-ulysses-any2 ltx2_odd ltx2 ltx2_ulysses_anything "ulysses = 2" \
		"ulysses_anything = true"
	case_ ltx2-odd-ring-any5 ltx2_odd ltx2 ltx2_ring_anything "ring = 5" "ring_anything = true, $AG"
	case_ ltx2-bf16-1rank ltx2_bf16 ltx2 ltx2_single "tp = 1" ""
	full case_ ltx2-bf16-ring2-alltoall ltx2_bf16 ltx2 ltx2_ring_alltoall "ring = 2" "$AA"
	for f in ltx2 ltx2_odd ltx2_bf16; do bound "bound-$f" ok $f ltx2 ltx2_single; done
	# control: the corners compiled without their norm weights leave them out
	bound control-bound-ltx2-no-norm-weights fail ltx2_odd ltx2 ltx2_single \
		-D norm_elementwise_affine=false
	# negative controls: one element of a block's audio_to_video_attn.norm_k
	# weight off by 0.25; the video RoPE's frame coordinates with the
	# audio's VAE scale 4 instead of vae_scale_factors[0] (8)
	mkdir -p "$tmp/perturbed_ltx2"
	cp "$FIX/ltx2/transformer/config.json" "$tmp/perturbed_ltx2/"
	safetensors_edit "$FIX/ltx2/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_ltx2/diffusion_pytorch_model.safetensors" \
		transformer_blocks.1.audio_to_video_attn.norm_k.weight 0.25
	control control-ltx2-perturbed-weight ltx2 ltx2 ltx2_ulysses "ulysses = 2" \
		"$tmp/perturbed_ltx2" "$FIX/ltx2/inputs.safetensors"
	sed 's/scale_t = vae_scale_factors\[0\], scale_s/scale_t = 4, scale_s/' models/ltx2.plan \
		>"$tmp/ltx2_scale_t.plan"
	control control-ltx2-vae-scale-t ltx2 "$tmp/ltx2_scale_t.plan" ltx2_single "tp = 1" \
		"$FIX/ltx2/transformer" "$FIX/ltx2/inputs.safetensors"
	# rope_type "split" (the released LTX-2's): video 4 heads x 8, audio 2
	# heads x 8, 18 video tokens, 7 audio latents, 12 text tokens, batch 2
	fixtures_present ltx2_split
	case_ ltx2-split-1rank ltx2_split ltx2 ltx2_single "tp = 1" ""
	case_ ltx2-split-ulysses2 ltx2_split ltx2 ltx2_ulysses "ulysses = 2" ""
	case_ ltx2-split-ring3-alltoall ltx2_split ltx2 ltx2_ring_alltoall "ring = 3" "$AA"
	full case_ ltx2-split-ring2-allgather ltx2_split ltx2 ltx2_ring "ring = 2" "$AG"
	case_ ltx2-split-ulysses-any4 ltx2_split ltx2 ltx2_ulysses_anything "ulysses = 4" \
		"ulysses_anything = true"
	full case_ ltx2-split-ring-any4 ltx2_split ltx2 ltx2_ring_anything "ring = 4" \
		"ring_anything = true, $AG"
	bound bound-ltx2_split ok ltx2_split ltx2 ltx2_single
	# controls: the video tables rotated in the audio's 2 head groups
	# instead of the video's 4 (the shapes still fit); one weight perturbed
	sed 's/else num_attention_heads, convention/else audio_num_attention_heads, convention/' \
		models/ltx2.plan >"$tmp/ltx2_split_heads.plan"
	control control-ltx2-split-heads ltx2_split "$tmp/ltx2_split_heads.plan" ltx2_single "tp = 1" \
		"$FIX/ltx2_split/transformer" "$FIX/ltx2_split/inputs.safetensors"
	mkdir -p "$tmp/perturbed_ltx2_split"
	cp "$FIX/ltx2_split/transformer/config.json" "$tmp/perturbed_ltx2_split/"
	safetensors_edit "$FIX/ltx2_split/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_ltx2_split/diffusion_pytorch_model.safetensors" \
		transformer_blocks.0.attn1.to_q.weight 0.25
	control control-ltx2-split-perturbed-weight ltx2_split ltx2 ltx2_ulysses "ulysses = 2" \
		"$tmp/perturbed_ltx2_split" "$FIX/ltx2_split/inputs.safetensors"
	# LTX-2.3 (gated_attn, audio_gated_attn, cross_attn_mod,
	# audio_cross_attn_mod; forward's sigma an input): video 3 heads x 6,
	# audio 3 heads x 4, 9 video tokens, 5 audio latents, 7 text tokens
	fixtures_present ltx2_23
	case_ ltx2-23-1rank ltx2_23 ltx2 ltx2_single "tp = 1" ""
	case_ ltx2-23-ulysses3 ltx2_23 ltx2 ltx2_ulysses "ulysses = 3" ""
	case_ ltx2-23-ring3-allgather ltx2_23 ltx2 ltx2_ring "ring = 3" "$AG"
	full case_ ltx2-23-ring3-alltoall ltx2_23 ltx2 ltx2_ring_alltoall "ring = 3" "$AA"
	case_ ltx2-23-ulysses-any2 ltx2_23 ltx2 ltx2_ulysses_anything "ulysses = 2" \
		"ulysses_anything = true"
	full case_ ltx2-23-ring-any2 ltx2_23 ltx2 ltx2_ring_anything "ring = 2" \
		"ring_anything = true, $AG"
	bound bound-ltx2_23 ok ltx2_23 ltx2 ltx2_single
	# controls: the gates without their factor 2 (sigmoid alone); the
	# prompt modulation embedding the timestep instead of sigma; one element
	# of a block's to_gate_logits weight off by 0.25
	sed 's/= add(\([a-z_0-9.]*\)\.gate_sigmoid, [a-z_0-9.]*\.gate_sigmoid);/= \1.gate_sigmoid;/' \
		models/ltx2.plan >"$tmp/ltx2_gate1.plan"
	control control-ltx2-23-gate-factor ltx2_23 "$tmp/ltx2_gate1.plan" ltx2_single "tp = 1" \
		"$FIX/ltx2_23/transformer" "$FIX/ltx2_23/inputs.safetensors"
	sed 's/timestep_embedding(sigma,/timestep_embedding(timestep,/' models/ltx2.plan \
		>"$tmp/ltx2_no_sigma.plan"
	control control-ltx2-23-timestep-for-sigma ltx2_23 "$tmp/ltx2_no_sigma.plan" ltx2_single \
		"tp = 1" "$FIX/ltx2_23/transformer" "$FIX/ltx2_23/inputs.safetensors"
	mkdir -p "$tmp/perturbed_ltx2_23"
	cp "$FIX/ltx2_23/transformer/config.json" "$tmp/perturbed_ltx2_23/"
	safetensors_edit "$FIX/ltx2_23/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_ltx2_23/diffusion_pytorch_model.safetensors" \
		transformer_blocks.1.video_to_audio_attn.to_gate_logits.weight 0.25
	control control-ltx2-23-perturbed-gate ltx2_23 ltx2 ltx2_ulysses "ulysses = 3" \
		"$tmp/perturbed_ltx2_23" "$FIX/ltx2_23/inputs.safetensors"
fi

# --- MiniMax-H3 (models/minimax_h3.plan: the _cp_plan's plans; two outputs,
# sample and audio_sample, each compared) ------------------------------------
fixtures_present minimax_h3 minimax_h3_odd minimax_h3_bf16
if [ "$MODE" = mpi ]; then
	case_ mpi-minimax-usp minimax_h3 minimax_h3 minimax_h3_usp "ring = 2, ulysses = 2" "$AA"
	case_ mpi-minimax-odd-ring-any3-presharded minimax_h3_odd minimax_h3 minimax_h3_ring_anything \
		"ring = 3" "ring_anything = true, $AG" shard
	case_ mpi-minimax-bf16-ulysses2 minimax_h3_bf16 minimax_h3 minimax_h3_ulysses "ulysses = 2" ""
else
	# 4 heads x 16 (12 channels rotated, 4 passed), 2 blocks, 16 packed rows
	# interleaved (text, video, audio, video), two timesteps
	full case_ minimax-1rank minimax_h3 minimax_h3 minimax_h3_single "tp = 1" ""
	full case_ minimax-ulysses2 minimax_h3 minimax_h3 minimax_h3_ulysses "ulysses = 2" ""
	case_ minimax-ulysses4 minimax_h3 minimax_h3 minimax_h3_ulysses "ulysses = 4" ""
	full case_ minimax-ring2-allgather minimax_h3 minimax_h3 minimax_h3_ring "ring = 2" "$AG"
	case_ minimax-ring4-alltoall minimax_h3 minimax_h3 minimax_h3_ring_alltoall "ring = 4" "$AA"
	case_ minimax-usp minimax_h3 minimax_h3 minimax_h3_usp "ring = 2, ulysses = 2" "$AG"
	# the corners (sharded checkpoint): 3 heads x 14, batch 2, 15 packed
	# rows of which one no modality fills, three timesteps: the anything modes
	full case_ minimax-odd-1rank minimax_h3_odd minimax_h3 minimax_h3_single "tp = 1" ""
	case_ minimax-odd-ulysses-any2 minimax_h3_odd minimax_h3 minimax_h3_ulysses_anything \
		"ulysses = 2" "ulysses_anything = true"
	full case_ minimax-odd-ring-any3 minimax_h3_odd minimax_h3 minimax_h3_ring_anything "ring = 3" \
		"ring_anything = true, $AG"
	case_ minimax-odd-ring-any4-presharded minimax_h3_odd minimax_h3 minimax_h3_ring_anything \
		"ring = 4" "ring_anything = true, $AA" shard
	# bf16 (--dtype bf16; diffusers keeps its five float32 modules)
	full case_ minimax-bf16-1rank minimax_h3_bf16 minimax_h3 minimax_h3_single "tp = 1" ""
	case_ minimax-bf16-ulysses2 minimax_h3_bf16 minimax_h3 minimax_h3_ulysses "ulysses = 2" ""
	full case_ minimax-bf16-ring2-alltoall minimax_h3_bf16 minimax_h3 minimax_h3_ring_alltoall \
		"ring = 2" "$AA"

	for f in minimax_h3 minimax_h3_odd minimax_h3_bf16; do
		bound "bound-$f" ok $f minimax_h3 minimax_h3_single
	done
	# without the token refiner its blocks' tensors are left unbound
	bound control-bound-minimax-no-refiner fail minimax_h3 minimax_h3 minimax_h3_single -D num_refiner_layers=0

	# negative controls: one element of a block's adaln_proj weight off by
	# 0.25 (under ring 2); norm_out's chunks read scale first (as
	# AdaLayerNormContinuous's); SwiGLU's silu on the first half (the value)
	mkdir -p "$tmp/perturbed_minimax"
	cp "$FIX/minimax_h3/transformer/config.json" "$tmp/perturbed_minimax/"
	safetensors_edit "$FIX/minimax_h3/transformer/diffusion_pytorch_model.safetensors" \
		"$tmp/perturbed_minimax/diffusion_pytorch_model.safetensors" \
		transformer_blocks.1.adaln_proj.linear.weight 0.25
	control control-minimax-perturbed-weight minimax_h3 minimax_h3 minimax_h3_ring "ring = 2" \
		"$tmp/perturbed_minimax" "$FIX/minimax_h3/inputs.safetensors"
	sed 's/\(norm_out.shift *= slice(norm_out.rows, dim = 1, start = \)0,/\1hidden_size,/; s/\(norm_out.scale *= slice(norm_out.rows, dim = 1, start = \)hidden_size,/\10,/' \
		models/minimax_h3.plan >"$tmp/minimax_scale_first.plan"
	control control-minimax-norm-out-scale-first minimax_h3 "$tmp/minimax_scale_first.plan" \
		minimax_h3_single "tp = 1" "$FIX/minimax_h3/transformer" "$FIX/minimax_h3/inputs.safetensors"
	sed 's/ff.net.0.act *= silu(ff.net.0.gate);/ff.net.0.act = silu(ff.net.0.value);/' \
		models/minimax_h3.plan >"$tmp/minimax_swiglu_value.plan"
	control control-minimax-swiglu-halves minimax_h3 "$tmp/minimax_swiglu_value.plan" \
		minimax_h3_single "tp = 1" "$FIX/minimax_h3/transformer" "$FIX/minimax_h3/inputs.safetensors"
fi

summary models
