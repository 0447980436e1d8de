#!/bin/sh
# run.sh BUILD [--no-san] — every test of dtpc; ends with
# "N passed, N failed, N skipped".
#
#  unit      BUILD/tests/test_* (TAP; a "# SKIP" check counts as skipped)
#  gpu       BUILD/tests/gpu/test_* (built with nvcc; exit 77: no CUDA device)
#  diag      tests/diag/*.plan: exact diagnostics against *.expected
#  valid     examples/*.plan: clean, summary against tests/valid/*.expected
#  cli       usage errors, --format json, exit statuses, run/inspect;
#            tests/cli/commands.sh: verdicts and exit statuses of the commands
#  config    tests/config.sh: --config config.json, hostile files, precedence
#  lower     tests/lower.sh: lowering goldens, communication volumes, determinism
#  fuse      tests/fuse.sh: linear + activation fusion, bitwise equal to the pair
#  equiv     tests/equiv.sh: N-rank replays against the one-rank model
#  fixtures  tests/fixtures.sh: diffusers' tiny Flux and Wan on N ranks
#  models    tests/models.sh: models/*.plan run from diffusers' folders (config.json,
#            sharded, bf16, pre-sharded) against diffusers' sample on N ranks
#  pipelines tests/pipelines.sh: diffusers' pipelines with dtpc.torch's transformer against
#            the stock images (a venv with torch and diffusers: DTPC_VENV)
#  weights   tests/weights.sh: sharded, BF16/F16 and per-rank checkpoints, and
#            their errors
#  python    tests/python.sh: the Python package (Ranks, compile_cached, stats,
#            torch tensors with the project's venv, pip install of an install)
#  mpi       a subset of equiv and fixtures under mpirun, MPI comm tests
#  fuzz      each libFuzzer target over its corpus, then a short run
#  prop      tests/prop/gen.py: random models and plans, check -> compile -> run
#  tsan      runtime and comm tests and two multi-rank runs under TSan (BUILD-tsan)
#  san       unit to fixtures and prop again, built with ASan + UBSan (BUILD-san);
#            not MPI, fuzzing (the fuzz targets carry ASan and UBSan themselves)
#            or TSan
#
# UPDATE=1 rewrites the golden files from the current output (review the
# diff); rewritten goldens are counted as rewritten, not as passed.
set -u
BUILD=${1:-build}
SAN=${2:-}
# jobs of the builds below, and fuzz and property runs side by side (make
# test passes its own); a count, at least 1
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
case $JOBS in '' | *[!0-9]* | 0) JOBS=1 ;; esac
# the scripts run in both passes skip MPI in the sanitizer pass: Open MPI's
# own allocations read as leaks there
export DTPC_SAN="$SAN"
. tests/lib.sh

# ---- unit ---------------------------------------------------------------------
# One binary per tests/unit/test_*.c: one that is missing (not built, or
# built elsewhere) fails, rather than leaving the loop with nothing to run.
for src in tests/unit/test_*.c; do
	t=$BUILD/tests/$(basename "$src" .c)
	name=unit/$(basename "$t")
	if [ ! -x "$t" ]; then
		bad "$name"
		echo "  $t: not built (from $src)"
		continue
	fi
	if "$t" >"$tmp/unit.out" 2>&1; then
		ok
	else
		bad "$name"
		grep -v '^ok ' "$tmp/unit.out" | head -20
	fi
	# A TAP check marked "# SKIP" did not run: it counts as skipped, not as
	# part of the binary's pass, and says why.
	sed -n 's/^ok [0-9]* - \(.*\) # SKIP \(.*\)/\1: \2/p' "$tmp/unit.out" >"$tmp/unit.skip"
	while IFS= read -r why; do
		skipped "$name" "$why"
	done <"$tmp/unit.skip"
done

# ---- GPU tests (built when nvcc exists): exit 77 means no CUDA device here ----------------
# A build with the CUDA library has a binary per tests/gpu/test_*.c; one
# without it has none to run.
for src in tests/gpu/test_*.c; do
	[ -e "$BUILD/libdtpc_cuda.so" ] || break
	t=$BUILD/tests/gpu/$(basename "$src" .c)
	name=gpu/$(basename "$t")
	if [ ! -x "$t" ]; then
		bad "$name"
		echo "  $t: not built (from $src), though $BUILD/libdtpc_cuda.so is"
		continue
	fi
	"$t" >"$tmp/gpu.out" 2>&1
	case $? in
	0) ok ;;
	77) skipped "$name" "no CUDA device" ;;
	*)
		bad "$name"
		grep -v '^ok ' "$tmp/gpu.out" | head -20
		;;
	esac
done

# ---- golden diagnostics -----------------------------------------------------------
# The first line of a case may hold `# args: ...` (extra dtpc check arguments).
for f in tests/diag/*.plan; do
	[ -f "$f" ] || continue
	args=$(sed -n '1s/^# args: //p' "$f")
	# shellcheck disable=SC2086
	"$DTPC" check "$f" --no-color $args >"$tmp/out" 2>&1
	echo "exit $?" >>"$tmp/out"
	compare "diag/$(basename "$f" .plan)" "${f%.plan}.expected" "$tmp/out"
done

# ---- valid examples ------------------------------------------------------------------
for f in examples/*.plan; do
	name=$(basename "$f" .plan)
	"$DTPC" check "$f" --no-color >"$tmp/out" 2>&1
	echo "exit $?" >>"$tmp/out"
	compare "valid/$name" "tests/valid/$name.expected" "$tmp/out"
done

# ---- command line -----------------------------------------------------------------------
# expect_exit NAME STATUS COMMAND...
# Each command is bounded (timeout 124: a hang fails the check rather than
# the whole run).
expect_exit() {
	name=$1 want=$2
	shift 2
	timeout 120 "$@" >"$tmp/cli" 2>&1
	got=$?
	if [ "$got" = "$want" ]; then ok; else
		bad "cli/$name"
		[ "$got" = 124 ] && echo "  timed out after 120 s (a hang)"
		echo "  expected exit $want, got $got: $*"
		head -5 "$tmp/cli"
	fi
}
expect_exit help 0 "$DTPC" --help
expect_exit version 0 "$DTPC" --version
expect_exit no-args 2 "$DTPC"
expect_exit unknown-command 2 "$DTPC" frobnicate
expect_exit unknown-option 2 "$DTPC" check examples/tiny_dit.plan --frob
expect_exit missing-file 2 "$DTPC" check /nonexistent/x.plan
expect_exit bad-world 2 "$DTPC" check examples/tiny_dit.plan --world zero
expect_exit unknown-plan 2 "$DTPC" check examples/tiny_dit.plan --plan nope
expect_exit world-mismatch 1 "$DTPC" check examples/tiny_dit.plan --plan tiny_dit_8 --world 4
expect_exit world-match 0 "$DTPC" check examples/tiny_dit.plan --plan tiny_dit_8 --world 8
expect_exit define 0 "$DTPC" check examples/tiny_dit.plan -D seq=2048
expect_exit define-bad-param 1 "$DTPC" check examples/tiny_dit.plan -D sq=2048
expect_exit define-indivisible 1 "$DTPC" check examples/tiny_dit.plan -D seq=1022
expect_exit dumps 0 "$DTPC" check examples/tiny_dit.plan -d isl
for f in tests/cli/*.args; do
	[ -f "$f" ] || continue
	# shellcheck disable=SC2046
	"$DTPC" $(cat "$f") >"$tmp/out" 2>&1
	echo "exit $?" >>"$tmp/out"
	compare "cli/$(basename "$f" .args)" "${f%.args}.expected" "$tmp/out"
done
# The runtime's command line: an embedded graph, a trace, saved outputs.
expect_exit embed 0 "$BUILD/examples/embed"
"$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 -D seq=64 -o "$tmp/t.graph" >/dev/null 2>&1
if "$DTPC" run "$tmp/t.graph" --trace "$tmp/trace.json" --allow-seeded --save-outputs "$tmp/out.st" \
	--steps 2 >"$tmp/run" 2>&1 &&
	python3 - "$tmp/trace.json" "$tmp/out.st" <<'PY'
import json, struct, sys
t = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in t if e["ph"] == "X"]
ranks = {e["pid"] for e in spans}
comm = [e for e in spans if e["cat"] == "communication"]
assert ranks == set(range(8)), ranks
assert comm and all(e["args"]["bytes"] > 0 for e in comm if not e["name"].startswith("shard"))
assert all(e["dur"] >= 0 for e in spans)
b = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert h["proj_out"]["shape"] == [1, 64, 128] and h["proj_out"]["dtype"] == "F32", h
PY
then ok; else
	bad "cli/run-trace-save"
	cat "$tmp/run"
fi
expect_exit run-bad-backend 2 "$DTPC" run "$tmp/t.graph" --backend nccl
expect_exit run-missing-graph 2 "$DTPC" run /nonexistent.graph
expect_exit run-not-a-graph 2 "$DTPC" run examples/tiny_dit.plan
expect_exit run-wrong-ranks 1 "$DTPC" run "$tmp/t.graph" --ranks 4 --timeout 5
expect_exit inspect-bad-rank 2 "$DTPC" inspect "$tmp/t.graph" --rank 99
expect_exit compile-needs-plan 2 "$DTPC" examples/flux.plan -o "$tmp/x.graph"

# JSON is well-formed for a clean plan and for a broken one: one Python
# reads every output and prints a line for each (a check per file).
mkdir -p "$tmp/json"
for f in examples/tiny_dit.plan tests/diag/*.plan; do
	[ -f "$f" ] || continue
	args=$(sed -n '1s/^# args: //p' "$f")
	j="$tmp/json/$(echo "$f" | tr / _).json"
	# shellcheck disable=SC2086
	"$DTPC" check "$f" --format json $args >"$j" 2>/dev/null
	echo "$f" >>"$tmp/json.list"
done
python3 - "$tmp"/json/*.json >"$tmp/json.why" 2>&1 <<'PY'
import json, sys
for f in sys.argv[1:]:
    try:
        d = json.load(open(f))
        print(f"{f}: " + ("ok" if "diagnostics" in d else "no diagnostics"))
    except Exception as e:  # as an assert that failed: this file is bad
        print(f"{f}: {e}")
PY
while read -r f; do
	if grep -qxF "$tmp/json/$(echo "$f" | tr / _).json: ok" "$tmp/json.why"; then
		ok
	else
		bad "json/$(basename "$f")"
	fi
done <"$tmp/json.list"

# A sub-suite ends with "NAME: N passed, N failed, N skipped" (after
# "NAME: N rewritten" under UPDATE=1); its counts join ours.
absorb() {
	name=$1 log=$2
	line=$(grep -E "^$name: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$" "$log" | tail -n 1)
	if [ -z "$line" ]; then
		bad "$name/run"
		tail -20 "$log"
		return
	fi
	# shellcheck disable=SC2046
	set -- $(echo "${line#"$name": }" | tr -cd '0-9 ')
	pass=$((pass + $1))
	fail=$((fail + $2))
	skip=$((skip + $3))
	# a skipped check says so here, whichever sub-suite skipped it
	[ "$3" = 0 ] || grep -E '^skip ' "$log"
	[ "$2" = 0 ] || failed_names="$failed_names $name:[see above]"
	r=$(sed -n "s/^$name: \([0-9]*\) rewritten$/\1/p" "$log" | tail -n 1)
	rewritten=$((rewritten + ${r:-0}))
}

# ---- outputs that are devices: written in place (not renamed over), their errors reported ----
# (a device node of our own in $tmp, never the machine's /dev/full; root only)
if [ "$(id -u)" = 0 ] && mknod "$tmp/full" c 1 7 2>/dev/null; then
	"$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 -D seq=64 -o "$tmp/full" >"$tmp/dev" 2>&1
	rc=$?
	if [ $rc = 2 ] && [ -c "$tmp/full" ] && grep -q "No space left" "$tmp/dev"; then ok; else
		bad cli/compile-to-device
		cat "$tmp/dev"
	fi
	"$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 -D seq=64 -o "$tmp/d.graph" >/dev/null 2>&1
	"$DTPC" run "$tmp/d.graph" --allow-seeded --save-outputs "$tmp/full" >"$tmp/dev" 2>&1
	rc=$?
	if [ $rc = 2 ] && [ -c "$tmp/full" ] && grep -q "No space left" "$tmp/dev"; then ok; else
		bad cli/save-outputs-to-device
		cat "$tmp/dev"
	fi
else
	skipped cli/outputs-to-devices "needs root to make a device node"
	skipped cli/outputs-to-devices "needs root to make a device node"
fi

# ---- the commands' verdicts and exit statuses (tests/cli/commands.sh) -------------------------
sh tests/cli/commands.sh "$BUILD" >"$tmp/clicmd" 2>&1
grep -A10 '^FAIL' "$tmp/clicmd" | head -40
absorb clicmd "$tmp/clicmd"

# ---- lowering: goldens, communication volume, determinism ------------------------------------
sh tests/lower.sh "$BUILD" >"$tmp/lower" 2>&1
grep -A40 '^FAIL' "$tmp/lower" | head -60
absorb lower "$tmp/lower"

# ---- fusion: linear + activation, bitwise equal to the pair -----------------------------------
sh tests/fuse.sh "$BUILD" >"$tmp/fuse" 2>&1
grep -A20 '^FAIL' "$tmp/fuse" | head -40
absorb fuse "$tmp/fuse"

# ---- equivalence: N-rank replays against the unsharded model ----------------------------------
sh tests/equiv.sh "$BUILD" >"$tmp/equiv" 2>&1
grep -E '^(ok|FAIL)' "$tmp/equiv" | sed 's/^/  /'
grep -A12 '^FAIL' "$tmp/equiv" | head -60
absorb equiv "$tmp/equiv"
# ---- real-model fixtures: diffusers' tiny Flux and Wan replayed on N ranks -------------------
sh tests/fixtures.sh "$BUILD" >"$tmp/fixtures" 2>&1
grep -E '^(ok|FAIL)' "$tmp/fixtures" | sed 's/^/  /'
grep -A20 '^FAIL' "$tmp/fixtures" | head -60
absorb fixtures "$tmp/fixtures"
# ---- the model library: models/*.plan from diffusers folders against diffusers' sample ------
sh tests/models.sh "$BUILD" >"$tmp/models" 2>&1
grep -E '^(ok|FAIL)' "$tmp/models" | sed 's/^/  /'
grep -A20 '^FAIL' "$tmp/models" | head -60
absorb models "$tmp/models"

# ---- dtpc.torch: diffusers' pipelines on dtpc against the stock ones (tests/pipelines.sh) ----
# (the plain pass only: Python cannot load the sanitizers' libdtpc.so without their runtimes)
if [ -z "$SAN" ]; then
	sh tests/pipelines.sh "$BUILD" >"$tmp/pipelines" 2>&1
	grep -A2 '^FAIL' "$tmp/pipelines" | head -40
	absorb pipelines "$tmp/pipelines"
fi

# ---- checkpoints: sharded, BF16/F16 and per-rank weights; their errors (tests/weights.sh) ----
sh tests/weights.sh "$BUILD" >"$tmp/weights" 2>&1
grep -A8 '^FAIL' "$tmp/weights" | head -60
absorb weights "$tmp/weights"

# ---- tools: SARIF, the JSON schema, embed, fmt, Python (tests/tools.sh) ---------------------
sh tests/tools.sh "$BUILD" >"$tmp/tools" 2>&1
grep -A20 '^FAIL' "$tmp/tools" | head -60
absorb tools "$tmp/tools"

# ---- --config: diffusers' config.json as model parameters (tests/config.sh) -----------------
sh tests/config.sh "$BUILD" >"$tmp/config" 2>&1
grep -A10 '^FAIL' "$tmp/config" | head -40
absorb config "$tmp/config"

# ---- the cost model: dtpc cost / suggest (tests/cost.sh) ------------------------------------
sh tests/cost.sh "$BUILD" >"$tmp/cost" 2>&1
grep -A20 '^FAIL' "$tmp/cost" | head -40
absorb cost "$tmp/cost"

# ---- install: make install into a temporary prefix, a program built with pkg-config ----------
# (the plain pass only: it builds in BUILD)
if [ -z "$SAN" ]; then
	sh tests/install.sh "$BUILD" >"$tmp/install" 2>&1
	grep -A20 '^FAIL' "$tmp/install" | head -40
	absorb install "$tmp/install"
fi

# ---- the Python package: Ranks, the compile cache, torch tensors, pip install (tests/python.sh) --
# (the plain pass only: Python cannot load a sanitizer build's library)
if [ -z "$SAN" ]; then
	sh tests/python.sh "$BUILD" >"$tmp/python" 2>&1
	grep -A20 '^FAIL' "$tmp/python" | head -40
	absorb python "$tmp/python"
fi

# a subset under mpirun (one process per rank; as root in CI; a build without MPI has none)
if [ -z "$SAN" ]; then
	if command -v mpirun >/dev/null 2>&1 && [ -x "$BUILD/tests/mpi_test_comm_mpi" ]; then
		sh tests/equiv.sh "$BUILD" mpi >"$tmp/equiv_mpi" 2>&1
		grep -E '^(ok|FAIL)' "$tmp/equiv_mpi" | sed 's/^/  /'
		grep -A12 '^FAIL' "$tmp/equiv_mpi" | head -40
		absorb equiv "$tmp/equiv_mpi"
		sh tests/fixtures.sh "$BUILD" mpi >"$tmp/fixtures_mpi" 2>&1
		grep -E '^(ok|FAIL)' "$tmp/fixtures_mpi" | sed 's/^/  /'
		absorb fixtures "$tmp/fixtures_mpi"
		sh tests/models.sh "$BUILD" mpi >"$tmp/models_mpi" 2>&1
		grep -E '^(ok|FAIL)' "$tmp/models_mpi" | sed 's/^/  /'
		absorb models "$tmp/models_mpi"
		sh tests/weights.sh "$BUILD" mpi >"$tmp/weights_mpi" 2>&1
		grep -A8 '^FAIL' "$tmp/weights_mpi" | head -30
		absorb weights "$tmp/weights_mpi"
		# a wrong rank count under mpirun: every rank says so, the job ends
		"$DTPC" tests/lower/tiny.plan --plan all --mesh "ulysses = 2, tp = 2" \
			-o "$tmp/m.graph" >/dev/null 2>&1
		if timeout 60 mpirun -np 3 --oversubscribe --allow-run-as-root --mca btl self,vader \
			"$DTPC" run "$tmp/m.graph" --backend mpi --timeout 10 >"$tmp/mpi" 2>&1; then
			bad mpi/wrong-rank-count
		elif grep -q "the graph is for 4 ranks, but the job has 3" "$tmp/mpi"; then ok; else
			bad mpi/wrong-rank-count
			head -10 "$tmp/mpi"
		fi
		if mpirun -np 4 --oversubscribe --allow-run-as-root --mca btl self,vader \
			"$BUILD/tests/mpi_test_comm_mpi" >"$tmp/mpi" 2>&1; then ok; else
			bad mpi/comm
			grep -v '^ok' "$tmp/mpi" | head -20
		fi
	else
		echo "SKIPPED LOUDLY: mpirun not found, the MPI tests did not run"
		bad mpi/missing
	fi
fi

# ---- fuzz -----------------------------------------------------------------------------------
# Each target replays its corpus, then fuzzes for FUZZ_SECONDS (default 10);
# options (-seed=N) and corpus folders follow the name. Every target is built
# and replayed first; then the fuzzing runs go JOBS at a time (a target is one
# process on one core: each still fuzzes FUZZ_SECONDS), counted in order.
fuzz_target() {
	name=$1
	shift
	bin="$BUILD/fuzz/fuzz_$name"
	if ! make -s -j"$JOBS" BUILD="$BUILD" "$bin" >"$tmp/fuzzbuild" 2>&1; then
		echo "fuzz target $name did not build (clang with libFuzzer missing?):"
		tail -20 "$tmp/fuzzbuild"
		bad "fuzz/$name/build"
		return
	fi
	if "$bin" -runs=0 "$@" >"$tmp/fuzz" 2>&1; then ok; else
		bad "fuzz/$name/replay"
		tail -20 "$tmp/fuzz"
	fi
	mkdir -p "$tmp/corpus_$name"
	# the run's command line, for fuzz_runs (the folders have no spaces)
	echo "$name $bin $*" >>"$tmp/fuzz.runs"
}
# fuzz_runs: the runs fuzz_target lined up, JOBS at a time; then a check each.
# A unit's timeout (a hang) is 30 s: the slowest seed, tests/diag's
# rules-match-too-many (4096 blocks to the rule cap), takes 4.7 s alone
# under ASan and went past 10 s beside the other jobs of make test.
fuzz_runs() {
	fr_n=0
	while read -r name bin args; do
		# shellcheck disable=SC2086 # the options and folders split into words
		{
			"$bin" -max_total_time="${FUZZ_SECONDS:-10}" -max_len=65536 -timeout=30 \
				-rss_limit_mb=4096 "$tmp/corpus_$name" $args >"$tmp/fuzz_$name" 2>&1
			echo $? >"$tmp/fuzz_$name.rc"
		} </dev/null &
		fr_n=$((fr_n + 1))
		[ $((fr_n % JOBS)) = 0 ] && wait
	done <"$tmp/fuzz.runs"
	wait
	while read -r name bin args; do
		if [ "$(cat "$tmp/fuzz_$name.rc" 2>/dev/null)" = 0 ]; then ok; else
			bad "fuzz/$name/run"
			tail -30 "$tmp/fuzz_$name"
		fi
	done <"$tmp/fuzz.runs"
}
if [ -z "$SAN" ]; then
	: >"$tmp/fuzz.runs"
	fuzz_target parse examples tests/diag tests/fuzz/parse_corpus
	fuzz_target graph tests/fuzz/graph_corpus
	fuzz_target safetensors tests/fuzz/safetensors_corpus
	fuzz_target config tests/config/cases tests/fuzz/config_corpus
	fuzz_target index tests/fuzz/index_corpus
	fuzz_target rankdir tests/fuzz/rankdir_corpus
	fuzz_target profile hw tests/fuzz/profile_corpus
	# parse -> check -> lower -> serialize -> load -> prepare; a fixed seed so
	# that a run mutates the same way each time
	fuzz_target pipeline -seed=1 examples tests/diag tests/fuzz/pipeline_corpus
	fuzz_runs
fi

# ---- property test: random models and plans through check, compile and run ----------------
# Every plan check accepts must compile and verify on its ranks; every plan it
# refuses must be refused with a located error. Seeded: the same plans each
# run (another seed, fewer plans, under the sanitizers). A failing plan is
# kept under BUILD/prop with the commands that reproduce it.
if [ -n "$SAN" ]; then prop_run="--seed 2 --count 300"; else prop_run="--seed 1 --count 400"; fi
# shellcheck disable=SC2086
python3 tests/prop/gen.py --dtpc "$DTPC" --out "$BUILD/prop" $prop_run --jobs "$JOBS" \
	>"$tmp/prop" 2>&1
grep -v '^prop: [0-9]* passed' "$tmp/prop" | head -60
absorb prop "$tmp/prop"

# ---- ThreadSanitizer: the local backend's ranks are threads of one process -----------------
# The runtime and comm unit tests and two multi-rank replays, built with
# -fsanitize=thread in BUILD-tsan. Only runtime paths: the compiler runs once,
# on one thread, before any rank starts. OpenBLAS is not instrumented, and its
# own worker threads synchronise in ways TSan cannot see: one BLAS thread
# (`dtpc run` also sets one per rank itself, but the unit tests do not).
# tsan_check NAME COMMAND...: passes when the command exits 0 with no report.
tsan_check() {
	name=$1
	shift
	if OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS="exitcode=66 $TSAN_OPTIONS" "$@" >"$tmp/tsan" 2>&1 &&
		! grep -q 'WARNING: ThreadSanitizer' "$tmp/tsan"; then ok; else
		bad "tsan/$name"
		grep -A30 -m1 'WARNING: ThreadSanitizer' "$tmp/tsan" || tail -20 "$tmp/tsan"
	fi
}
if [ -z "$SAN" ]; then
	TB="$BUILD-tsan"
	TSAN_OPTIONS=${TSAN_OPTIONS:-}
	echo "building with TSan ..."
	if make -s -j"$JOBS" TSAN=1 BUILD="$TB" "$TB/dtpc" "$TB/tests/test_comm" "$TB/tests/test_runtime" \
		>"$tmp/tsanbuild" 2>&1; then
		tsan_check test_comm "$TB/tests/test_comm"
		tsan_check test_runtime "$TB/tests/test_runtime"
		"$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 -D seq=64 -o "$tmp/ts1.graph" \
			>/dev/null 2>&1
		tsan_check run-ring2xulysses2xtp2 "$TB/dtpc" run "$tmp/ts1.graph" --verify --steps 2 \
			--timeout 120
		"$DTPC" examples/flux.plan --plan flux_tiny_ring2_ulysses2_tp2 --mesh "ring = 4" \
			--context 'rotate_method = "alltoall"' -o "$tmp/ts2.graph" >/dev/null 2>&1
		tsan_check run-flux-ring4-alltoall "$TB/dtpc" run "$tmp/ts2.graph" --verify \
			--steps 2 --timeout 120
		# two pool threads per rank: the CPU kernels' thread pool under TSan
		tsan_check run-ring2xulysses2xtp2-threads2 "$TB/dtpc" run "$tmp/ts1.graph" --verify \
			--threads 2 --timeout 120
	else
		bad tsan/build
		tail -20 "$tmp/tsanbuild"
	fi
fi

# ---- the same suite under ASan + UBSan ---------------------------------------------------------
# (without MPI and fuzzing: libFuzzer targets carry their own sanitizers). The
# pass checks the goldens: under UPDATE=1 they were rewritten above, once.
if [ -z "$SAN" ]; then
	echo "building with ASan + UBSan ..."
	if make -s -j"$JOBS" SAN=1 BUILD="$BUILD-san" all >"$tmp/sanbuild" 2>&1; then
		UPDATE='' sh "$0" "$BUILD-san" --no-san >"$tmp/san" 2>&1
		grep -E '^(FAIL|prop: .* generated|==|.*runtime error)' "$tmp/san" | head -30
		absorb san "$tmp/san"
	else
		bad san/build
		tail -20 "$tmp/sanbuild"
	fi
fi

[ -n "$failed_names" ] && echo "failed:$failed_names"
if [ -n "$SAN" ]; then
	summary san
else
	[ "${UPDATE:-}" = 1 ] && echo "$rewritten rewritten (UPDATE=1: review git diff tests/)"
	echo "$pass passed, $fail failed, $skip skipped"
	[ "$fail" = 0 ]
fi
