#!/bin/sh
# cost_accuracy.sh BUILD [local|mpi|both] — how close `dtpc cost` comes to
# `dtpc run` on this machine (issue 11's goal: within 25%). Calibrates a
# profile per backend (dtpc calibrate), then for the equivalence matrix's
# meshes (tests/equiv.sh) on tiny_dit and flux scaled up with -D until a
# step takes >= 50 ms here, prints predicted, measured (`dtpc run --steps 5`,
# the median step) and measured / predicted. Not a test: timings on a shared
# machine are noisy; the figures are recorded in docs/performance.md.
set -u
BUILD=${1:-build}
WHICH=${2:-both}
DTPC=$BUILD/dtpc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MPIRUN="mpirun --oversubscribe --allow-run-as-root --mca btl self,vader"

echo "cost accuracy: $(uname -n), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"

# TINY / FLUX: the example, its plans, and the sizes that make a step >= 50 ms
TINY="examples/tiny_dit.plan tiny_dit_8 tiny_dit_tp -D seq=2048 -D hidden=256 -D heads=8 -D ffn=1024"
FLUX="examples/flux.plan flux_tiny_ring2_ulysses2_tp2 flux_tiny_tp -D img_seq=1024 -D txt_seq=256 -D head_dim=32 -D heads=8"

within=0 outside=0

# one BACKEND PROFILE NAME FILE PLAN MESH CONTEXT DEFINES...
one() {
	o_be=$1 o_hw=$2 o_name=$3 o_file=$4 o_plan=$5 o_mesh=$6 o_ctx=$7
	shift 7
	set -- --plan "$o_plan" --mesh "$o_mesh" ${o_ctx:+--context "$o_ctx"} "$@"
	if ! "$DTPC" "$o_file" "$@" -o "$tmp/g.graph" >"$tmp/out" 2>&1 ||
		! "$DTPC" cost "$o_file" "$@" --hw "$o_hw" --format json >"$tmp/cost.json" 2>>"$tmp/out"; then
		printf "%-6s %-28s compile or cost failed\n" "$o_be" "$o_name"
		sed 's/^/       /' "$tmp/out" | head -5
		return
	fi
	pred=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['step_s'] * 1e3)" "$tmp/cost.json")
	if [ "$o_be" = mpi ]; then
		n=$("$DTPC" inspect "$tmp/g.graph" | sed -n 's/.*(world \([0-9]*\)).*/\1/p')
		$MPIRUN -np "$n" "$DTPC" run "$tmp/g.graph" --backend mpi --steps 5 >"$tmp/run" 2>&1
	else
		"$DTPC" run "$tmp/g.graph" --steps 5 >"$tmp/run" 2>&1
	fi
	meas=$(sed -n 's/^time: \([0-9.]*\) ms per step.*/\1/p' "$tmp/run" | head -1)
	if [ -z "$meas" ]; then
		printf "%-6s %-28s run failed\n" "$o_be" "$o_name"
		sed 's/^/       /' "$tmp/run" | tail -5
		return
	fi
	verdict=$(python3 -c "import sys; r=float(sys.argv[2])/float(sys.argv[1]); print('%.2f %s' % (r, 'within' if 0.75 <= r <= 1.25 else 'OUTSIDE'))" "$pred" "$meas")
	case $verdict in *within) within=$((within + 1)) ;; *) outside=$((outside + 1)) ;; esac
	printf "%-6s %-28s %10.1f %10.1f   %s\n" "$o_be" "$o_name" "$pred" "$meas" "$verdict"
}

# matrix BACKEND PROFILE TAG FILE PLAN TP_PLAN DEFINES...: tests/equiv.sh's meshes
matrix() {
	m_be=$1 m_hw=$2 m_tag=$3 m_file=$4 m_plan=$5 m_tp=$6
	shift 6
	one "$m_be" "$m_hw" "$m_tag-tp2" "$m_file" "$m_tp" "tp = 2" "" "$@"
	one "$m_be" "$m_hw" "$m_tag-tp4" "$m_file" "$m_tp" "tp = 4" "" "$@"
	one "$m_be" "$m_hw" "$m_tag-ulysses2" "$m_file" "$m_plan" "ulysses = 2" "" "$@"
	one "$m_be" "$m_hw" "$m_tag-ulysses4" "$m_file" "$m_plan" "ulysses = 4" "" "$@"
	for rm in allgather alltoall; do
		one "$m_be" "$m_hw" "$m_tag-ring2-$rm" "$m_file" "$m_plan" "ring = 2" "rotate_method = \"$rm\"" "$@"
		one "$m_be" "$m_hw" "$m_tag-ring4-$rm" "$m_file" "$m_plan" "ring = 4" "rotate_method = \"$rm\"" "$@"
	done
	one "$m_be" "$m_hw" "$m_tag-ring2xulysses2" "$m_file" "$m_plan" "ring = 2, ulysses = 2" "" "$@"
	one "$m_be" "$m_hw" "$m_tag-ulysses2xtp2" "$m_file" "$m_plan" "ulysses = 2, tp = 2" "" "$@"
	one "$m_be" "$m_hw" "$m_tag-ring2xulysses2xtp2" "$m_file" "$m_plan" "ring = 2, ulysses = 2, tp = 2" \
		"rotate_method = \"alltoall\"" "$@"
}

for be in local mpi; do
	[ "$WHICH" = both ] || [ "$WHICH" = $be ] || continue
	if [ $be = mpi ] && ! command -v mpirun >/dev/null 2>&1; then
		echo "mpi: skipped (no mpirun)"
		continue
	fi
	hw=$tmp/$be.json
	if [ $be = mpi ]; then
		$MPIRUN -np 4 "$DTPC" calibrate --backend mpi --device cpu -o "$hw" || exit 1
	else
		"$DTPC" calibrate --backend local --device cpu --ranks 4 -o "$hw" || exit 1
	fi
	printf "\n%-6s %-28s %10s %10s   %s\n" backend case "pred ms" "meas ms" "meas/pred"
	# shellcheck disable=SC2086 # TINY / FLUX: words on purpose
	matrix $be "$hw" tiny $TINY
	# shellcheck disable=SC2086
	matrix $be "$hw" flux $FLUX
done
echo
echo "cost accuracy: $within within 25%, $outside outside"
