#!/bin/sh
# fixtures.sh BUILD [mpi] — real-model fixtures: diffusers' own tiny Flux and Wan
# (weights, inputs and outputs made by diffusers: tools/gen_fixtures.py, run by
# hand; the files in tests/fixtures/ are committed) replayed by dtpc on N ranks
# for many meshes, each output compared with diffusers' output.
#
# Error: normwise max relative error max|out - ref| / max|ref| (as `dtpc run
# --verify`). Tolerance 1e-5: both sides compute in float32 (torch on CPU,
# dtpc's kernels), only in different orders (blocked GEMMs, fused SDPA vs
# dtpc's attention, ring / Ulysses merges), which gives a few float32 ulps
# through these 2-block models (measured 2e-7 to 5e-7 at every mesh, about 20x
# below the tolerance); a real modelling difference is above it (measured with
# the model description mutated): Flux — exact GELU instead of tanh 7e-5,
# LayerNorm eps 1e-5 instead of 1e-6 2.5e-5, AdaLN shift/scale swapped 0.19,
# norm_out's (scale, shift) swapped 0.64; Wan — exact GELU in the text embedder
# 3.4e-4 / in the FFN 1.9e-4, LayerNorm eps 1e-5 1.3e-5, output shift/scale
# swapped 0.43. (An RMSNorm eps of 1e-5 instead of 1e-6, 1.7e-6, is below it.)
#
# Prints one line per case and "fixtures: N passed, N failed, N skipped".
set -u
BUILD=${1:-build}
MODE=${2:-local}
[ "$MODE" = --mpi ] && MODE=mpi
FIX=tests/fixtures
TOL=${FIXTURES_TOL:-1e-5}
. tests/lib.sh

# case NAME MODEL PLAN MESH CONTEXT
case_() {
	c_name=$1 c_model=$2 c_plan=$3 c_mesh=$4 c_ctx=$5
	g="$tmp/$c_name.graph"
	o="$tmp/$c_name.out.safetensors"
	compile_mesh "$FIX/$c_model.plan" "$c_plan" "$c_mesh" "$c_ctx" "$g" >"$tmp/out" 2>&1 &&
		replay "$MODE" "$g" --timeout 60 --weights "$FIX/$c_model.weights.safetensors" \
			--inputs "$FIX/$c_model.inputs.safetensors" --save-outputs "$o" >>"$tmp/out" 2>&1
	rc=$?
	if [ $rc = 0 ]; then
		python3 tests/compare_outputs.py "$o" "$FIX/$c_model.expected.safetensors" "$TOL" >>"$tmp/out" 2>&1
		rc=$?
	fi
	err=$(sed -n 's/.*max relative error \([^ ]*\).*/\1/p' "$tmp/out" | sort -g | tail -1)
	if [ $rc = 0 ]; then
		pass=$((pass + 1))
		printf "ok    %-26s %-36s max rel error %s\n" "$c_name" "$c_mesh${c_ctx:+; $c_ctx}" "$err"
	else
		fail=$((fail + 1))
		printf "FAIL  %-26s %-36s max rel error %s (tolerance %s)\n" "$c_name" \
			"$c_mesh${c_ctx:+; $c_ctx}" "${err:-?}" "$TOL"
		sed 's/^/      /' "$tmp/out" | head -20
	fi
}

for f in flux wan; do
	for x in weights inputs expected; do
		if [ ! -f "$FIX/$f.$x.safetensors" ]; then
			echo "FAIL  $FIX/$f.$x.safetensors is missing (tools/gen_fixtures.py makes it)"
			fail=$((fail + 1))
		fi
	done
done

if [ "$MODE" = mpi ]; then
	# a subset under mpirun: one process per rank
	case_ mpi-flux-ring2xulysses2 flux flux_fixture_cp "ring = 2, ulysses = 2" \
		"rotate_method = \"alltoall\""
	case_ mpi-wan-ulysses2xtp2 wan wan_fixture_cp "ulysses = 2, tp = 2" ""
else
	# Flux: 2 heads x 16, 48 text + 16 image tokens
	case_ flux-1rank flux flux_fixture_tp "tp = 1" ""
	case_ flux-tp2 flux flux_fixture_tp "tp = 2" ""
	case_ flux-ulysses2 flux flux_fixture_cp "ulysses = 2" ""
	case_ flux-ring2-allgather flux flux_fixture_cp "ring = 2" "rotate_method = \"allgather\""
	case_ flux-ring2-alltoall flux flux_fixture_cp "ring = 2" "rotate_method = \"alltoall\""
	case_ flux-ring4-alltoall flux flux_fixture_cp "ring = 4" "rotate_method = \"alltoall\""
	case_ flux-ring2xulysses2 flux flux_fixture_cp "ring = 2, ulysses = 2" \
		"rotate_method = \"alltoall\""
	case_ flux-ring2xtp2 flux flux_fixture_cp "ring = 2, tp = 2" "rotate_method = \"allgather\""
	case_ flux-ring-anything3 flux flux_fixture_cp "ring = 3" \
		"ring_anything = true, rotate_method = \"alltoall\""
	# Wan: 2 heads x 12, 2 blocks, 128 video + 12 text tokens
	case_ wan-1rank wan wan_fixture_tp "tp = 1" ""
	case_ wan-tp2 wan wan_fixture_tp "tp = 2" ""
	case_ wan-ulysses2 wan wan_fixture_cp "ulysses = 2" ""
	case_ wan-ring2-alltoall wan wan_fixture_cp "ring = 2" "rotate_method = \"alltoall\""
	case_ wan-ring2xulysses2 wan wan_fixture_cp "ring = 2, ulysses = 2" \
		"rotate_method = \"allgather\""
	case_ wan-ulysses2xtp2 wan wan_fixture_cp "ulysses = 2, tp = 2" ""
	case_ wan-ring-anything3 wan wan_fixture_cp "ring = 3" \
		"ring_anything = true, rotate_method = \"allgather\""
fi
summary fixtures
