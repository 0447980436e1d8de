# lib.sh — what the test scripts share (sourced, POSIX sh): a temporary
# folder, pass/fail/skip/rewrite counters, golden comparison, and compiling a
# plan for a mesh and replaying it on its ranks. Callers set BUILD first.
#
# Counting is honest: a check that did not run is "skipped", a golden that
# UPDATE=1 overwrote is "rewritten" (it was compared with nothing), and
# neither is ever counted as passed.
DTPC="$BUILD/dtpc"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
skip=0
rewritten=0
failed_names=""

# python3, found once: a version manager's shim on the PATH (pyenv's is a
# bash script) spends about 0.1 s finding the interpreter at every start,
# and the suite starts Python hundreds of times. The function runs the
# interpreter the shim would have run; without one, python3 stays as it is.
if dtpc_python=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) &&
	[ -x "$dtpc_python" ]; then
	python3() { "$dtpc_python" "$@"; }
fi

# dtpc_venv_python: the interpreter of the project's Python environment (torch,
# diffusers: python/requirements-test.txt), which `make deps` makes at
# ${DTPC_VENV:-$HOME/.cache/dtpc/venv}; prints nothing when there is none, or
# one left unfinished (no stamp), so that a test can count itself skipped.
dtpc_venv_python() {
	dv_venv=${DTPC_VENV:-$HOME/.cache/dtpc/venv}
	if [ -x "$dv_venv/bin/python" ] && [ -s "$dv_venv/.dtpc-stamp" ]; then
		echo "$dv_venv/bin/python"
	fi
}

ok() { pass=$((pass + 1)); }
# skipped NAME WHY: a check that could not run here
skipped() {
	skip=$((skip + 1))
	echo "skip $1: $2"
}
bad() {
	fail=$((fail + 1))
	failed_names="$failed_names $1"
	echo "FAIL: $1"
}

# compare NAME EXPECTED_FILE ACTUAL_FILE (UPDATE=1 rewrites EXPECTED_FILE)
compare() {
	if [ "${UPDATE:-}" = 1 ]; then
		cmp -s "$3" "$2" || echo "rewrote $2"
		cp "$3" "$2"
		rewritten=$((rewritten + 1))
	elif diff -u "$2" "$3" >"$3.diff" 2>&1; then
		ok
	else
		bad "$1"
		head -40 "$3.diff"
	fi
}

# compile_mesh FILE PLAN MESH CONTEXT GRAPH [DTPC OPTIONS...]: the plan
# compiled with --mesh MESH and, if not empty, --context CONTEXT.
compile_mesh() {
	cm_file=$1 cm_plan=$2 cm_mesh=$3 cm_ctx=$4 cm_graph=$5
	shift 5
	if [ -n "$cm_ctx" ]; then
		"$DTPC" "$cm_file" --plan "$cm_plan" --mesh "$cm_mesh" --context "$cm_ctx" "$@" \
			-o "$cm_graph"
	else
		"$DTPC" "$cm_file" --plan "$cm_plan" --mesh "$cm_mesh" "$@" -o "$cm_graph"
	fi
}

# replay MODE GRAPH [RUN OPTIONS...]: `dtpc run` on the graph's ranks, as
# threads (MODE local) or one MPI process each (MODE mpi).
replay() {
	rp_mode=$1 rp_graph=$2
	shift 2
	if [ "$rp_mode" = mpi ]; then
		rp_n=$("$DTPC" inspect "$rp_graph" | sed -n 's/.*(world \([0-9]*\)).*/\1/p')
		mpirun -np "$rp_n" --oversubscribe --allow-run-as-root --mca btl self,vader \
			"$DTPC" run "$rp_graph" --backend mpi "$@"
	else
		# shellcheck disable=SC2086 # DTPC_RUN_ARGS: extra options, e.g. the
		# GPU script's "--device cuda"
		"$DTPC" run "$rp_graph" "$@" ${DTPC_RUN_ARGS:-}
	fi
}

# summary NAME: the closing lines run.sh absorbs ("NAME: N rewritten" only
# under UPDATE=1, then "NAME: N passed, N failed, N skipped"); the status of
# the script.
summary() {
	[ "${UPDATE:-}" = 1 ] && echo "$1: $rewritten rewritten"
	echo "$1: $pass passed, $fail failed, $skip skipped"
	[ "$fail" = 0 ]
}
