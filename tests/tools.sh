#!/bin/sh
# tools.sh BUILD — the everyday tools around the compiler: `check --format
# sarif`, `embed`, `fmt`, the Python package. Ends with
# "tools: N passed, N failed, N skipped" (tests/run.sh absorbs it).
# UPDATE=1 rewrites the goldens under tests/tools/.
set -u
BUILD=${1:-build}
. tests/lib.sh

# check NAME COMMAND...: passes when the command exits 0; shows its output if not
check() {
	name=$1
	shift
	if "$@" >"$tmp/check" 2>&1; then ok; else
		bad "tools/$name"
		head -20 "$tmp/check"
	fi
}

# golden NAME COMMAND...: the command's output and exit status against
# tests/tools/NAME.expected
golden() {
	name=$1
	shift
	"$@" >"$tmp/out" 2>&1
	echo "exit $?" >>"$tmp/out"
	compare "tools/$name" "tests/tools/$name.expected" "$tmp/out"
}

# ---- quiet and named notes; a failure of every rank printed once ----------------------
# A file with two plans: each note names its plan (not with --plan: one
# plan); -q keeps the errors and their notes but drops the standalone notes
# and the summary (negative control: the same file without -q has notes).
golden notes-name-plan "$DTPC" check tests/tools/two-plans.plan
golden notes-one-plan "$DTPC" check tests/tools/two-plans.plan --plan q
golden notes-quiet "$DTPC" check tests/tools/two-plans.plan -q
golden notes-quiet-errors "$DTPC" check tests/diag/tp-ulysses-local-heads.plan -q
golden notes-quiet-compile "$DTPC" tests/tools/two-plans.plan --plan p -q -o "$tmp/p.graph"
# Every rank failing alike is one line naming the ranks; a message that
# differs only by the rank that reports it counts as alike.
"$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 -o "$tmp/t8.graph" -q
printf '{}' >"$tmp/bad.safetensors"
{
	"$DTPC" run "$tmp/t8.graph" --weights "$tmp/bad.safetensors"; echo "exit $?"
	"$DTPC" run "$tmp/t8.graph" --ranks 3; echo "exit $?"
} 2>&1 | sed "s|$tmp|TMP|g" >"$tmp/run-errors.out"
compare tools/run-errors-once tests/tools/run-errors-once.expected "$tmp/run-errors.out"

# ---- progress of dtpc run on a terminal ----------------------------------------------------
# Under a pseudo-terminal (script(1)), rank 0 rewrites one line per step:
# steps done, ms per step, the time left, then "done in"; with stderr a
# file, nothing of it (the negative control: the same run, not a terminal).
if command -v script >/dev/null 2>&1; then
	script -qec "'$DTPC' run '$tmp/t8.graph' --steps 3" /dev/null >"$tmp/tty.out" 2>&1
	# the numbers vary: keep the words
	tr '\r' '\n' <"$tmp/tty.out" | sed 's/\x1b\[K//; s/[0-9][0-9.]*/N/g' | grep '^step' >"$tmp/tty.steps"
	compare tools/run-progress-tty tests/tools/run-progress-tty.expected "$tmp/tty.steps"
else
	skipped tools/run-progress-tty "no script(1) to give dtpc run a terminal"
fi
"$DTPC" run "$tmp/t8.graph" --steps 3 >/dev/null 2>"$tmp/notty.err"
# (the note that the weights and inputs are seeded is the one line there)
check run-progress-not-a-terminal sh -c "test \"\$(grep -vc '^dtpc: note: ' '$tmp/notty.err')\" = 0"

# ---- -d g: the compiled graph as dtpc inspect shows it ------------------------------------
# The pipeline prints it through the printer the program passes
# (check_opts.dump_graph): the same text as `dtpc inspect` of the written
# graph (rank 0), not empty (without the printer it prints nothing).
"$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 -o "$tmp/dg.graph" -q -d g >"$tmp/dg.out" 2>&1
"$DTPC" inspect "$tmp/dg.graph" >"$tmp/dg.inspect" 2>&1
check dump-graph-is-inspect sh -c "grep -q all_reduce '$tmp/dg.out' && cmp '$tmp/dg.out' '$tmp/dg.inspect'"

# ---- inspect --format dot at real sizes ----------------------------------------------------
# The exact DOT of tiny_dit on 8 ranks: collapsed, then block 1 opened with
# only the tp collectives drawn; a block or axis that does not exist and
# --block without dot are refused. A full-size Flux graph (2270 ops):
# collapsed to few nodes (the negative control: --block 3 opens more); the
# full-size Flux, Wan and QwenImage graphs render with Graphviz.
golden dot-collapsed "$DTPC" inspect "$tmp/t8.graph" --format dot
golden dot-block-axis "$DTPC" inspect "$tmp/t8.graph" --format dot --block 1 --axis tp --rank 5
{
	"$DTPC" inspect "$tmp/t8.graph" --format dot --block 7; echo "exit $?"
	"$DTPC" inspect "$tmp/t8.graph" --format dot --axis cfg; echo "exit $?"
	"$DTPC" inspect "$tmp/t8.graph" --block 1; echo "exit $?"
} >"$tmp/dot-errors.out" 2>&1
compare tools/dot-errors tests/tools/dot-errors.expected "$tmp/dot-errors.out"
"$DTPC" examples/flux.plan --plan flux_ring2_ulysses4 -o "$tmp/flux.graph" -q
"$DTPC" inspect "$tmp/flux.graph" --format dot >"$tmp/flux.dot"
"$DTPC" inspect "$tmp/flux.graph" --format dot --block 3 >"$tmp/flux3.dot"
nodes() { grep -c '^  n[0-9]* \[' "$1"; }
check dot-full-size-collapsed test "$(nodes "$tmp/flux.dot")" -lt 100
check dot-full-size-block-opens test "$(nodes "$tmp/flux3.dot")" -gt "$(($(nodes "$tmp/flux.dot") + 20))"
if command -v dot >/dev/null 2>&1; then
	# the three full-size examples (issue 14: readable pictures in under 10 s
	# each, measured in docs/tools.md; the timeout here only stops a hang, a
	# test times nothing), each showing its last block
	for fp in flux:flux_ring2_ulysses2_tp2:single_transformer_blocks.37 \
		wan:wan_ffn_tp2_ulysses4:blocks.39 \
		qwenimage:qwenimage_ring2_ulysses2_tp2:transformer_blocks.59; do
		f=${fp%%:*} rest=${fp#*:}
		p=${rest%%:*} last=${rest#*:}
		"$DTPC" "examples/$f.plan" --plan "$p" -o "$tmp/$f-full.graph" -q
		check "dot-full-size-renders-$f" sh -c "'$DTPC' inspect '$tmp/$f-full.graph' --format dot \
			>'$tmp/$f-full.dot' && timeout 300 dot -Tsvg '$tmp/$f-full.dot' -o '$tmp/$f-full.svg' &&
			grep -q '>$last<' '$tmp/$f-full.svg'"
	done
else
	skipped tools/dot-full-size-renders "Graphviz (dot) is not installed"
fi

# ---- one trace for an MPI job ----------------------------------------------------------------
# Four MPI ranks, ring 2 (rotating) x Ulysses 2: rank 0 writes one trace
# with a process per rank, a row per stream, counters of bytes on the wire
# and of the arena, clocks aligned at a barrier, and ring attention's parts
# as the executor timed them: its steps on the compute row, its K/V shifts
# on the communication row, inside the op (tests/tools/trace_check.py); no
# per-rank files; the checker's negative controls: a rank's clock off by
# 1 s, a rank missing, a compute span on the communication row, the bytes
# counter falling, the arena counter dropped, the attention steps dropped,
# a shift moved out of its op.
if [ -n "${DTPC_SAN:-}" ]; then
	skipped tools/trace-mpi-merged "the sanitizer pass runs no MPI (Open MPI's allocations read as leaks)"
elif command -v mpirun >/dev/null 2>&1 && [ -x "$BUILD/tests/mpi_test_comm_mpi" ]; then
	"$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 --mesh "ring = 1, ulysses = 4, tp = 1" \
		-o "$tmp/u4.graph" -q
	"$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 --mesh "ring = 2, ulysses = 2, tp = 1" \
		--context 'rotate_method = "alltoall"' -o "$tmp/r2u2.graph" -q
	check trace-mpi-merged sh -c "timeout 120 mpirun -np 4 --oversubscribe --allow-run-as-root \
		--mca btl self,vader '$DTPC' run '$tmp/r2u2.graph' --backend mpi --steps 2 \
		--trace '$tmp/mpi.json' >/dev/null && ! ls '$tmp'/mpi.json.rank* 2>/dev/null &&
		python3 tests/tools/trace_check.py '$tmp/mpi.json' 4 --parts"
	for mutation in \
		'[e.update(ts=e["ts"] + 1e6) for e in d["traceEvents"] if e["pid"] == 2 and e["ph"] == "X"]' \
		'd["traceEvents"] = [e for e in d["traceEvents"] if e["pid"] != 3]' \
		'next(e for e in d["traceEvents"] if e.get("cat") == "compute").update(tid=1)' \
		'next(e for e in d["traceEvents"] if e["ph"] == "C" and "sent" in e["args"])["args"].update(sent=1 << 40)' \
		'd["traceEvents"] = [e for e in d["traceEvents"] if e["name"] != "arena"]' \
		'd["traceEvents"] = [e for e in d["traceEvents"] if e.get("args", {}).get("part") != "attention"]' \
		'next(e for e in d["traceEvents"] if e.get("args", {}).get("part") == "kv shift").update(ts=1e9)'; do
		python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
$mutation
json.dump(d, open(sys.argv[2], 'w'))" "$tmp/mpi.json" "$tmp/bad.json" 2>/dev/null
		if python3 tests/tools/trace_check.py "$tmp/bad.json" 4 --parts >/dev/null 2>&1; then
			bad "tools/trace_check.py accepts: $mutation"
		else ok; fi
	done
	# the documented schema (docs/schemas/trace.schema.json): the merged
	# trace; a local run's and the committed one are checked below
	check trace-schema-mpi python3 tests/tools/schema_check.py docs/schemas/trace.schema.json \
		"$tmp/mpi.json"
	for mutation in \
		'd["traceEvents"][5]["ph"] = "B"' \
		'next(e for e in d["traceEvents"] if e["ph"] == "X")["ts"] = "0"' \
		'next(e for e in d["traceEvents"] if e["ph"] == "X")["tid"] = 2' \
		'next(e for e in d["traceEvents"] if e["ph"] == "X")["args"] = {"colour": 1}' \
		'del d["traceEvents"][0]["pid"]'; do
		python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
$mutation
json.dump(d, open(sys.argv[2], 'w'))" "$tmp/mpi.json" "$tmp/bad.json" 2>/dev/null
		if python3 tests/tools/schema_check.py docs/schemas/trace.schema.json "$tmp/bad.json" \
			>/dev/null 2>&1; then
			bad "tools/trace-schema accepts: $mutation"
		else ok; fi
	done
else
	skipped tools/trace-mpi-merged "no mpirun, or a build without MPI"
fi

# ---- an MPI job's failures, printed once by rank 0 --------------------------------------------
# Under mpirun each rank sends rank 0 how it ended; rank 0 prints each
# distinct failure once with its ranks (exactly, as a golden: every rank
# failing to bind alike; a missing file; then, checked by
# tests/tools/failure_lines.py, one rank's bad per-rank file and the others'
# consequence). A rank stopped mid-run (SIGSTOP, by
# tests/tools/stop-rank.sh) does not hang the job: the others time out,
# rank 0 names it as not reporting, each line is printed once, and the job
# ends within a bound.
if [ -n "${DTPC_SAN:-}" ]; then
	skipped tools/mpi-failures-once "the sanitizer pass runs no MPI"
elif command -v mpirun >/dev/null 2>&1 && [ -x "$BUILD/tests/mpi_test_comm_mpi" ]; then
	mpi4() { timeout 120 mpirun -np 4 --oversubscribe --allow-run-as-root --mca btl self,vader "$@"; }
	FX=tests/fixtures
	"$DTPC" $FX/flux.plan --plan flux_fixture_cp --mesh "ring = 2, ulysses = 2" -o "$tmp/cp4.graph" -q
	"$DTPC" shard "$tmp/cp4.graph" --weights $FX/flux.weights.safetensors --out "$tmp/per4" >/dev/null
	cp -r "$tmp/per4" "$tmp/per4bad"
	python3 tests/ckpt.py flatten "$tmp/per4bad/rank-00002-of-00004.safetensors" \
		transformer_blocks.0.attn.to_q.weight
	{
		mpi4 "$DTPC" run "$tmp/u4.graph" --backend mpi --weights "$tmp/bad.safetensors" \
			--timeout 20 2>&1; echo "exit $?"
		mpi4 "$DTPC" run "$tmp/u4.graph" --backend mpi --weights "$tmp/nothing" 2>&1; echo "exit $?"
		# seeded data to save: every rank refuses, exit 2, one line
		mpi4 "$DTPC" run "$tmp/u4.graph" --backend mpi --save-outputs "$tmp/seeded.st" 2>&1
		echo "exit $?"
	} | grep -E '^(dtpc|exit)' | sed "s|$tmp|TMP|g" >"$tmp/mpi-errors.out"
	compare tools/mpi-errors-once tests/tools/mpi-errors-once.expected "$tmp/mpi-errors.out"
	# one rank's bad file: its line, and the others' consequence (where each
	# stops depends on when the failure reaches it: each rank is on exactly
	# one line, each line distinct)
	mpi4 "$DTPC" run "$tmp/cp4.graph" --backend mpi --inputs $FX/flux.inputs.safetensors \
		--weights "$tmp/per4bad" --timeout 20 >"$tmp/one-bad.out" 2>&1
	rc=$?
	check mpi-one-rank-fails sh -c "test $rc = 1 && grep '^dtpc' '$tmp/one-bad.out' | sed 's|$tmp|TMP|g' |
		python3 tests/tools/failure_lines.py 4 2 \"weight or input binding failed: \
TMP/per4bad/rank-00002-of-00004.safetensors: weight 'transformer_blocks.0.attn.to_q.weight' \
has shape [1024], but this rank's slice is [32, 32]\""
	# the checker's negative controls: a rank on two lines, a line twice, a
	# consequence of another rank, a rank missing
	for lines in 'dtpc: ranks 0-1: communication failed: op 5 (x): rank 2 failed: m|dtpc: rank 0: communication failed: op 6 (x): rank 2 failed: m' \
		'dtpc: ranks 0-1: communication failed: op 5 (x): rank 2 failed: m|dtpc: ranks 0-1: communication failed: op 5 (x): rank 2 failed: m' \
		'dtpc: ranks 0-1: communication failed: op 5 (x): rank 1 failed: m' \
		'dtpc: rank 0: communication failed: op 5 (x): rank 2 failed: m'; do
		if printf '%s|dtpc: rank 2: s: m\n' "$lines" | tr '|' '\n' |
			python3 tests/tools/failure_lines.py 3 2 "s: m" >/dev/null 2>&1; then
			bad "tools/failure_lines.py accepts: $lines"
		else ok; fi
	done
	t0=$(date +%s)
	STOPPED_PID="$tmp/stopped.pid" mpi4 -x STOPPED_PID sh tests/tools/stop-rank.sh 3 \
		"$DTPC" run "$tmp/u4.graph" --backend mpi --steps 1000000 --timeout 2 >"$tmp/stop.out" 2>&1
	rc=$? t=$(($(date +%s) - t0))
	[ -s "$tmp/stopped.pid" ] && kill -KILL "$(cat "$tmp/stopped.pid")" 2>/dev/null
	# (less rank 0's note that the weights and inputs are seeded)
	grep '^dtpc' "$tmp/stop.out" | grep -v '^dtpc: note: ' >"$tmp/stop.lines"
	if [ "$rc" = 1 ] && [ "$t" -lt 60 ] &&
		grep -qx 'dtpc: rank 3: communication failed: did not report within 2 s (stopped, stuck or gone)' \
			"$tmp/stop.lines" &&
		[ "$(sort "$tmp/stop.lines" | uniq -d)" = "" ] && ! grep -v '^dtpc: ranks\{0,1\} [0-9]' "$tmp/stop.lines"
	then ok; else
		bad tools/mpi-stopped-rank-named
		echo "  exit $rc after $t s:"
		head -20 "$tmp/stop.out"
	fi
	# the backend alone (tests/mpi/test_comm_mpi.c's ending modes; rank 0
	# prints each rank's end() report): fail() on rank 2 mid-collective
	# reaches every rank; a rank that never arrives is named unreported
	mpi4 "$BUILD/tests/mpi_test_comm_mpi" --fail >"$tmp/fail.out" 2>&1
	rc=$?
	check mpi-fail-reaches-every-rank sh -c "test $rc = 1 && test \"\$(grep -a '^rank' '$tmp/fail.out' |
		sort)\" = \"\$(for r in 0 1 2 3; do
			echo \"rank \$r: rank 2 failed: kernel error: NaN in blocks.3\"; done)\""
	mpi4 "$BUILD/tests/mpi_test_comm_mpi" --timeout >"$tmp/timeout.out" 2>&1
	rc=$?
	check mpi-timeout-names-the-absent sh -c "test $rc = 1 &&
		grep -aqx 'rank 3: (no report)' '$tmp/timeout.out' &&
		test \"\$(grep -ac '^rank [012]: .*timed out after 0.3 s in op 17 (all_reduce blocks.3.attn) of group \[0 1 2 3\]\$' \
			'$tmp/timeout.out')\" = 3"
	# point-to-point: a receive of 8 bytes for a send of 16 fails on the
	# receiver, which tells every rank; so does fail() on a rank another
	# waits to receive from; a rank that never sends is named by the rank
	# waiting to receive from it
	mpi4 "$BUILD/tests/mpi_test_comm_mpi" --exchange-size >"$tmp/xsize.out" 2>&1
	rc=$?
	check mpi-exchange-size-reaches-every-rank sh -c "test $rc = 1 && test \"\$(grep -a '^rank' '$tmp/xsize.out' |
		sort)\" = \"\$(for r in 0 1 2 3; do
			echo \"rank \$r: op 16 (exchange blocks.3.kv) of group [0 1 2 3]: rank 1 expects 8 bytes from rank 0, which sends more\"; done)\""
	mpi4 "$BUILD/tests/mpi_test_comm_mpi" --exchange-fail >"$tmp/xfail.out" 2>&1
	rc=$?
	check mpi-exchange-fail-reaches-every-rank sh -c "test $rc = 1 && test \"\$(grep -a '^rank' '$tmp/xfail.out' |
		sort)\" = \"\$(for r in 0 1 2 3; do
			echo \"rank \$r: rank 3 failed: kernel error: NaN in blocks.3\"; done)\""
	mpi4 "$BUILD/tests/mpi_test_comm_mpi" --exchange-absent >"$tmp/xabsent.out" 2>&1
	rc=$?
	check mpi-exchange-names-the-absent sh -c "test $rc = 1 &&
		grep -aqx 'rank 3: (no report)' '$tmp/xabsent.out' &&
		grep -aqx 'rank 2: rank 2: timed out after 0.3 s in op 16 (exchange blocks.3.kv) of group \[0 1 2 3\], exchanging with ranks \[3\]' \
			'$tmp/xabsent.out'"
else
	skipped tools/mpi-failures-once "no mpirun, or a build without MPI"
fi

# ---- a trace as a picture: dtpc timeline ---------------------------------------------------
# A committed two-rank trace (tests/tools/timeline-small.json, cut from a
# tiny_dit_8 run) gives the exact SVG; tests/tools/timeline_check.py holds
# the picture to the trace (lanes, a rect per span, charts per counter, an
# axis), with negative controls: a rect gone, a lane gone. A fresh local
# run's trace (counters from the runtime) is drawn and checked the same way.
golden timeline-small "$DTPC" timeline tests/tools/timeline-small.json -o - --width 800
golden timeline-errors sh -c "'$DTPC' timeline tests/tools/timeline-small.json; echo exit \$?
	'$DTPC' timeline tests/tools/timeline-small.json -o - --width 10; echo exit \$?
	'$DTPC' timeline tests/tools/two-plans.plan -o -; echo exit \$?
	'$DTPC' timeline /nonexistent.json -o -"
"$DTPC" timeline tests/tools/timeline-small.json -o "$tmp/small.svg"
# hostile traces: each a located error and exit 2, none a hang (a span of
# 5e-324 µs looped in the axis's ticks; /dev/zero and a FIFO were read
# forever or waited for; 20,000 lanes took 27 s, quadratic in the lanes)
mkdir "$tmp/tl" && mkfifo "$tmp/tl/fifo"
x='{"ph": "X", "pid": 0, "tid": 0'
printf '{"traceEvents": [%s, "ts": 0, "dur": 5e-324}]}' "$x" >"$tmp/tl/tiny.json"
printf '{"traceEvents": [%s, "ts": 10, "dur": -5, "name": "a"}]}' "$x" >"$tmp/tl/neg.json"
printf '{"traceEvents": [%s, "ts": 1e999, "dur": 1}]}' "$x" >"$tmp/tl/inf.json"
printf '{"traceEvents": [%s, "ts": 0, "dur": 1}, {"ph": "C", "pid": 0, "ts": 1, "name": "m", "args": {"v": -1e999}}]}' \
	"$x" >"$tmp/tl/counter.json"
printf '{"traceEvents": [%s, "ts": 0, "dur": 1\0}]}' "$x" >"$tmp/tl/nul.json"
python3 -c "import json; json.dump({'traceEvents': [{'ph': 'X', 'pid': i, 'tid': 0, 'ts': i, 'dur': 1}
	for i in range(1025)]}, open('$tmp/tl/lanes.json', 'w'))"
for f in "$tmp/tl" "$tmp/tl/fifo" /dev/zero "$tmp"/tl/*.json; do
	timeout 60 "$DTPC" timeline "$f" -o "$tmp/tl/out.svg"
	echo "exit $?"
done 2>&1 | sed "s|$tmp|TMP|g" >"$tmp/tl.out"
compare tools/timeline-hostile tests/tools/timeline-hostile.expected "$tmp/tl.out"
check timeline-hostile-nothing-written test ! -e "$tmp/tl/out.svg"
# 3 x 10^5 events on the 1024 lanes the limit allows, every lane drawn (the
# drawing is linear in the events: about 1 s here, 44 s when each lane
# searched every event; the timeout only stops a hang, it times nothing)
python3 -c "import json; json.dump({'traceEvents': [{'ph': 'X', 'pid': i % 1024, 'tid': 0, 'ts': i,
	'dur': 1} for i in range(300000)]}, open('$tmp/tl/many.json', 'w'))"
check timeline-many-lanes timeout 300 "$DTPC" timeline "$tmp/tl/many.json" -o "$tmp/tl/many.svg"
check timeline-many-lanes-drawn test "$(grep -o '<g class="lane">' "$tmp/tl/many.svg" | wc -l)" = 1024
check timeline-small-matches python3 tests/tools/timeline_check.py tests/tools/timeline-small.json "$tmp/small.svg"
for mutation in 's.replace(s[s.index("<rect x", 200):s.index("</rect>", 200) + 7], "", 1)' \
	's.replace(s[(i := s.index("<g class=\"lane\">", 800)):s.index("</g>", i) + 5], "", 1)'; do
	python3 -c "import sys
s = open(sys.argv[1]).read()
open(sys.argv[2], 'w').write($mutation)" "$tmp/small.svg" "$tmp/bad.svg"
	if python3 tests/tools/timeline_check.py tests/tools/timeline-small.json "$tmp/bad.svg" >/dev/null 2>&1; then
		bad "tools/timeline_check.py accepts: $mutation"
	else ok; fi
done
"$DTPC" run "$tmp/t8.graph" --trace "$tmp/t8.json" >/dev/null 2>&1
check timeline-run sh -c "'$DTPC' timeline '$tmp/t8.json' -o '$tmp/t8.svg' &&
	python3 tests/tools/timeline_check.py '$tmp/t8.json' '$tmp/t8.svg'"
check trace-schema-local python3 tests/tools/schema_check.py docs/schemas/trace.schema.json \
	"$tmp/t8.json" tests/tools/timeline-small.json
if command -v rsvg-convert >/dev/null 2>&1; then
	check timeline-renders rsvg-convert -o "$tmp/t8.png" "$tmp/t8.svg"
else
	skipped tools/timeline-renders "rsvg-convert is not installed"
fi

# ---- SARIF ----------------------------------------------------------------------------
# Exact text of a result with a related location and a hint, of one from the
# command line (placed on the checked file), and of a clean check.
golden sarif-notes "$DTPC" check tests/diag/context-missing-ring-style.plan --format sarif
golden sarif-command-line "$DTPC" check examples/tiny_dit.plan --plan tiny_dit_8 \
	--mesh "ring = 0, tp = 2" --format sarif
golden sarif-clean "$DTPC" check examples/tiny_dit.plan --format sarif
golden sarif-unreadable "$DTPC" check /nonexistent/x.plan --format sarif
golden sarif-compile-refuses "$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 -o "$tmp/x.graph" \
	--format sarif
# Every diagnostic case and every example: a valid SARIF 2.1.0 log (the
# schema's structure, restated in tests/tools/sarif_check.py: no network
# here), each error with its rule, the exit status that of the text check.
# One validator run over all the logs (--each: a line per log), then a
# check per log: its exit status and its line.
mkdir -p "$tmp/sarif"
for f in tests/diag/*.plan examples/*.plan; do
	args=$(sed -n '1s/^# args: //p' "$f")
	# shellcheck disable=SC2086
	"$DTPC" check "$f" --no-color $args >/dev/null 2>&1
	want=$?
	s="$tmp/sarif/$(echo "$f" | tr / _).json"
	# shellcheck disable=SC2086
	"$DTPC" check "$f" --format sarif $args >"$s" 2>/dev/null
	echo "$f $? $want" >>"$tmp/sarif.status"
done
python3 tests/tools/sarif_check.py --rules --each "$tmp"/sarif/*.json >"$tmp/sarif.why" 2>&1
while read -r f got want; do
	s="$tmp/sarif/$(echo "$f" | tr / _).json"
	if [ "$got" = "$want" ] && grep -qxF "$s: ok" "$tmp/sarif.why"; then ok; else
		bad "tools/sarif/$(basename "$f")"
		echo "  exit $got (text: $want)"
		grep -F "$s: " "$tmp/sarif.why" || tail -5 "$tmp/sarif.why"
	fi
done <"$tmp/sarif.status"
# The validator's negative controls: each breaks one rule of the schema, and
# the validator (one run over the broken logs, --each) names a violation in
# each; a log it has no line for (it stopped) fails too.
"$DTPC" check tests/diag/context-missing-ring-style.plan --format sarif >"$tmp/good.json" 2>/dev/null
mkdir -p "$tmp/sarif-bad"
n=0
for mutation in \
	'del d["version"]' \
	'd["version"] = "2.0.0"' \
	'del d["runs"][0]["tool"]["driver"]["name"]' \
	'del d["runs"][0]["results"][0]["message"]' \
	'd["runs"][0]["results"][0]["level"] = "fatal"' \
	'd["runs"][0]["results"][0]["ruleIndex"] = 0' \
	'd["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0' \
	'd["runs"][0]["results"][0]["relatedLocations"][0]["physicalLocation"]["region"]["colour"] = 1' \
	'd["runs"][0]["tool"]["driver"]["rules"][0]["shortDescription"] = {}' \
	'del d["runs"][0]["invocations"][0]["executionSuccessful"]'; do
	n=$((n + 1))
	python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
$mutation
json.dump(d, open(sys.argv[2], 'w'))" "$tmp/good.json" "$tmp/sarif-bad/$n.json"
	printf '%s\n' "$mutation" >"$tmp/sarif-bad/$n.mutation"
done
python3 tests/tools/sarif_check.py --each "$tmp"/sarif-bad/*.json >"$tmp/sarif-bad.why" 2>&1
for m in "$tmp"/sarif-bad/*.mutation; do
	b="${m%.mutation}.json"
	if grep -F "$b: " "$tmp/sarif-bad.why" | grep -qvxF "$b: ok"; then ok; else
		bad "tools/sarif-validator accepts: $(cat "$m")"
	fi
done

# ---- check --format json against docs/schemas/check.schema.json ------------------------------
# Every example and diagnostic case (one check), then the checker's negative
# controls: each mutation breaks one rule of the schema.
mkdir -p "$tmp/json"
for f in tests/diag/*.plan examples/*.plan; do
	args=$(sed -n '1s/^# args: //p' "$f")
	# shellcheck disable=SC2086
	"$DTPC" check "$f" --format json $args >"$tmp/json/$(basename "$f").json" 2>/dev/null
done
check check-json-schema python3 tests/tools/schema_check.py docs/schemas/check.schema.json \
	"$tmp"/json/*.json
for mutation in \
	'del d["errors"]' \
	'd["summary"][0]["world"] = 0' \
	'd["summary"][0]["context"]["rotate_method"] = "ring"' \
	'd["summary"][0]["attention"][0]["q_tokens_per_rank"] = ["576"]' \
	'd["summary"][0]["mesh"][0]["colour"] = 1' \
	'd["diagnostics"] = [{"severity": "warning", "message": "m"}]'; do
	python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
$mutation
json.dump(d, open(sys.argv[2], 'w'))" "$tmp/json/tiny_dit.plan.json" "$tmp/bad.json"
	if python3 tests/tools/schema_check.py docs/schemas/check.schema.json "$tmp/bad.json" \
		>/dev/null 2>&1; then
		bad "tools/schema-checker accepts: $mutation"
	else ok; fi
done

# ---- dtpc -v --format json against docs/schemas/report.schema.json --------------------------
# Compiles with a report (even and uneven splits, one rank), one with an
# error and one without -v: each valid; then every rank is there, in order,
# and rank 0's and the last rank's rows equal the text report's; then the
# checker's negative controls.
rep() { # rep NAME PLAN-FILE PLAN [OPTIONS...]
	rp_name=$1 rp_file=$2 rp_plan=$3
	shift 3
	"$DTPC" "$rp_file" --plan "$rp_plan" -o "$tmp/rep.graph" --format json "$@" \
		>"$tmp/json/report-$rp_name.json" 2>"$tmp/rep.err"
}
rep tiny8 examples/tiny_dit.plan tiny_dit_8 -v
rep uneven examples/wan.plan wan_tiny_ring_anything3 -v
rep one examples/tiny_dit.plan tiny_dit_8 -v --mesh "ring = 1, ulysses = 1, tp = 1"
rep error examples/tiny_dit.plan tiny_dit_8 -v --mesh "ring = 0"
rep quiet examples/tiny_dit.plan tiny_dit_8
rep fsdp tests/plans/fsdp.plan tiny_fsdp -v --mesh "ring = 3" --context "ring_anything = true"
check report-json-schema python3 tests/tools/schema_check.py docs/schemas/report.schema.json \
	"$tmp"/json/report-*.json
"$DTPC" examples/wan.plan --plan wan_tiny_ring_anything3 -o "$tmp/rep.graph" -v >"$tmp/rep.txt" 2>&1
check report-json-every-rank python3 tests/tools/report_ranks.py "$tmp/json/report-uneven.json" \
	"$tmp/rep.txt" "$tmp/json/report-error.json" "$tmp/json/report-quiet.json"
# its negative controls: a rank missing, a row's bytes changed
for mutation in 'd["report"]["ranks"].pop()' 'd["report"]["ranks"][0]["communication"][0]["bytes"] += 1'; do
	python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
$mutation
json.dump(d, open(sys.argv[2], 'w'))" "$tmp/json/report-uneven.json" "$tmp/bad.json"
	if python3 tests/tools/report_ranks.py "$tmp/bad.json" "$tmp/rep.txt" "$tmp/json/report-error.json" \
		"$tmp/json/report-quiet.json" >/dev/null 2>&1; then
		bad "tools/report_ranks.py accepts: $mutation"
	else ok; fi
done
for mutation in \
	'del d["report"]["ranks"]' \
	'd["report"]["world"] = 0' \
	'd["report"]["ranks"][0]["communication"][0]["op"] = "broadcast"' \
	'd["report"]["ranks"][0]["arena_bytes"] = "1 MiB"' \
	'd["report"]["ranks"][0]["colour"] = 1' \
	'd["summary"] = []'; do
	python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
$mutation
json.dump(d, open(sys.argv[2], 'w'))" "$tmp/json/report-tiny8.json" "$tmp/bad.json"
	if python3 tests/tools/schema_check.py docs/schemas/report.schema.json "$tmp/bad.json" \
		>/dev/null 2>&1; then
		bad "tools/report-schema-checker accepts: $mutation"
	else ok; fi
done

# ---- embed ------------------------------------------------------------------------------
# The generated C's head and tail; the bytes round-trip through a C
# compiler (as .c and as .o, under another symbol), 64-byte aligned; what
# is not a graph, a bad symbol or output name is refused.
"$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 --mesh "ulysses = 2, tp = 2" \
	-o "$tmp/tiny.graph" >/dev/null 2>&1
# (the golden's graph is a fixed file: a compiled one's hash moves with the compiler)
cp tests/unit/graph-1.0.graph "$tmp/fixed.graph"
"$DTPC" embed "$tmp/fixed.graph" -o "$tmp/fixed.c" >"$tmp/embed.log" 2>&1
{ head -n 14 "$tmp/fixed.c"; echo ...; tail -n 3 "$tmp/fixed.c"; cat "$tmp/embed.log"; } >"$tmp/embed.out"
"$DTPC" embed "$tmp/tiny.graph" -o "$tmp/g.c" >"$tmp/embed.log" 2>&1
compare tools/embed-c tests/tools/embed-c.expected "$tmp/embed.out"
cat >"$tmp/dump.c" <<'C'
#include <stdint.h>
#include <stdio.h>
extern const unsigned char SYM[];
extern const size_t SYM_size;
int main(int argc, char **argv)
{
	FILE *f = fopen(argv[1], "wb");
	return !f || fwrite(SYM, 1, SYM_size, f) != SYM_size || fclose(f) || (uintptr_t)SYM % 64;
}
C
check embed-c-roundtrip sh -c "cc -DSYM=dtpc_embedded_graph -DSYM_size=dtpc_embedded_graph_size \
	-o '$tmp/dump' '$tmp/dump.c' '$tmp/g.c' && '$tmp/dump' '$tmp/back' && cmp '$tmp/back' '$tmp/tiny.graph'"
check embed-o-roundtrip sh -c "'$DTPC' embed '$tmp/tiny.graph' -o '$tmp/g.o' --symbol my_graph &&
	test ! -e '$tmp/g.o.embed.c' &&
	cc -DSYM=my_graph -DSYM_size=my_graph_size -o '$tmp/dump2' '$tmp/dump.c' '$tmp/g.o' &&
	'$tmp/dump2' '$tmp/back2' && cmp '$tmp/back2' '$tmp/tiny.graph'"
check embed-example-links-the-graph "$BUILD/examples/embed"
head -c 100 "$tmp/tiny.graph" >"$tmp/cut.graph"
{
	"$DTPC" embed examples/tiny_dit.plan -o "$tmp/x.c"; echo "exit $?"
	"$DTPC" embed "$tmp/cut.graph" -o "$tmp/x.c"; echo "exit $?"
	"$DTPC" embed "$tmp/tiny.graph" -o "$tmp/x.c" --symbol 9lives; echo "exit $?"
	"$DTPC" embed "$tmp/tiny.graph" -o "$tmp/x.c" --symbol int; echo "exit $?"
	"$DTPC" embed "$tmp/tiny.graph" -o "$tmp/x.c" --symbol size_t; echo "exit $?"
	"$DTPC" embed "$tmp/tiny.graph" -o "$tmp/x.s"; echo "exit $?"
	"$DTPC" embed "$tmp/tiny.graph"; echo "exit $?"
	CC=/nonexistent/cc "$DTPC" embed "$tmp/tiny.graph" -o "$tmp/x.o"; echo "exit $?"
	CC=false "$DTPC" embed "$tmp/tiny.graph" -o "$tmp/x.o"; echo "exit $?"
	ls "$tmp" | grep '^x\.' ; echo "no x.* left"
} 2>&1 | sed "s|$tmp|TMP|g" >"$tmp/embed-errors.out"
compare tools/embed-errors tests/tools/embed-errors.expected "$tmp/embed-errors.out"

# ---- fmt ----------------------------------------------------------------------------------
# A file breaking every layout rule against its golden; the golden is its
# own layout (idempotence); --check names a file to change and exits 1, then
# passes once fmt rewrote it; a file that does not parse is left alone;
# the examples and models are in their layout; every test plan that parses keeps its
# tokens (fmt's own check) and its lines, and formats idempotently.
golden fmt-messy "$DTPC" fmt - <tests/tools/fmt-messy.plan
sed '$d' tests/tools/fmt-messy.expected >"$tmp/clean.plan" # less its "exit 0"
check fmt-idempotent sh -c "'$DTPC' fmt - <'$tmp/clean.plan' | cmp - '$tmp/clean.plan'"
cp tests/tools/fmt-messy.plan "$tmp/messy.plan"
{
	"$DTPC" fmt --check "$tmp/messy.plan" "$tmp/clean.plan"; echo "exit $?"
	"$DTPC" fmt "$tmp/messy.plan"; echo "exit $?"
	"$DTPC" fmt --check "$tmp/messy.plan" "$tmp/clean.plan"; echo "exit $?"
	cmp "$tmp/messy.plan" "$tmp/clean.plan" && echo "rewritten as the golden"
	printf 'model m {\n  input x : [1;\n}\n' >"$tmp/broken.plan"
	cp "$tmp/broken.plan" "$tmp/broken.orig"
	"$DTPC" fmt "$tmp/broken.plan"; echo "exit $?"
	cmp "$tmp/broken.plan" "$tmp/broken.orig" && echo "left alone"
	"$DTPC" fmt --check "$tmp/nonexistent.plan"; echo "exit $?"
	"$DTPC" fmt --frob "$tmp/clean.plan"; echo "exit $?"
} 2>&1 | sed "s|$tmp|TMP|g" >"$tmp/fmt-cli.out"
compare tools/fmt-cli tests/tools/fmt-cli.expected "$tmp/fmt-cli.out"
# rewriting through a symbolic link rewrites its target and keeps the link
# (the rename replaced the link with a regular file, the target unformatted),
# and keeps the file's permissions
cp tests/tools/fmt-messy.plan "$tmp/target.plan"
chmod 640 "$tmp/target.plan"
ln -s "$tmp/target.plan" "$tmp/link.plan"
check fmt-through-link sh -c "'$DTPC' fmt '$tmp/link.plan' && test -L '$tmp/link.plan' &&
	cmp '$tmp/target.plan' '$tmp/clean.plan' && test \"\$(stat -c %a '$tmp/target.plan')\" = 640"
# every plan under examples/, models/ (the full diffusers models, when
# the folder exists) and tests/plans/ is in its layout; a folder missing is
# not a failure
plan_dirs=""
for d in examples models tests/plans; do
	[ -d "$d" ] && plan_dirs="$plan_dirs $d/"
done
# shellcheck disable=SC2086
check fmt-check-plan-folders "$DTPC" fmt --check $plan_dirs
for f in tests/diag/*.plan tests/lower/*.plan tests/fixtures/*.plan; do
	[ -f "$f" ] || continue
	"$DTPC" fmt - <"$f" >"$tmp/f1" 2>/dev/null || continue
	"$DTPC" fmt - <"$tmp/f1" >"$tmp/f2"
	if cmp -s "$tmp/f1" "$tmp/f2" && [ "$(grep -c '' "$tmp/f1")" -le "$(grep -c '' "$f")" ]; then ok; else
		bad "tools/fmt/$f"
	fi
done

# ---- Python -------------------------------------------------------------------------------
# The package in python/ with the system Python and Debian's numpy (make
# deps installs python3-numpy): each "ok NAME" / "FAIL NAME" line of the
# script is one check.
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
if ! "$PY" -c 'import numpy' >/dev/null 2>&1; then
	skipped tools/python "numpy is missing for $PY (apt-get install python3-numpy)"
elif nm -D "$BUILD/libdtpc.so" 2>/dev/null | grep -q '__[at]san_init'; then
	# a sanitizer's runtime must be the first library of the process
	skipped tools/python "libdtpc.so is built with a sanitizer: Python cannot load it"
else
	PYTHONPATH=python DTPC_BUILD="$BUILD" "$PY" tests/tools/py_end_to_end.py "$tmp" \
		>"$tmp/py.out" 2>&1
	pass=$((pass + $(grep -c '^ok ' "$tmp/py.out")))
	if grep -q '^FAIL' "$tmp/py.out" || ! grep -q '^ok diffusers_rules_refuse' "$tmp/py.out"; then
		bad tools/python
		grep -v '^ok ' "$tmp/py.out" | head -40
	fi
	# the helper's text for diffusers' Flux and Wan plans (as in diffusers'
	# transformer_flux.py and transformer_wan.py)
	PYTHONPATH=python "$PY" - >"$tmp/rules.out" 2>&1 <<'PYEOF'
from dtpc import ContextParallelInput as In, ContextParallelOutput as Out, print_plan_rules
class FluxTransformer2DModel:
    _cp_plan = {
        "": {"hidden_states": In(split_dim=1, expected_dims=3, split_output=False),
             "encoder_hidden_states": In(split_dim=1, expected_dims=3, split_output=False),
             "img_ids": In(split_dim=0, expected_dims=2, split_output=False),
             "txt_ids": In(split_dim=0, expected_dims=2, split_output=False)},
        "proj_out": Out(gather_dim=1, expected_dims=3),
    }
    _tp_plan = {"transformer_blocks.*.attn.to_q": "colwise",
                "transformer_blocks.*.attn.to_out.0": "rowwise",
                "transformer_blocks.*.ff.net.0.proj": "colwise",
                "transformer_blocks.*.ff.net.2": "rowwise"}
print_plan_rules(FluxTransformer2DModel)
print("--")
print_plan_rules(cp_plan={
    "rope": {0: In(split_dim=1, expected_dims=4, split_output=True),
             1: In(split_dim=1, expected_dims=4, split_output=True)},
    "blocks.0": {"hidden_states": In(split_dim=1, expected_dims=3, split_output=False)},
    "blocks.*": {"encoder_hidden_states": In(split_dim=1, expected_dims=3, split_output=False)},
    "proj_out": Out(gather_dim=1, expected_dims=3),
})
print("--")
print_plan_rules(cp_plan={"pos_embed": [Out(gather_dim=0), Out(gather_dim=1)]})
PYEOF
	compare tools/python-plan-rules tests/tools/python-plan-rules.expected "$tmp/rules.out"
	# the same on every diffusers 0.42.1 class that has a plan, copied as the
	# class has it (PackedColwiseParallel / PackedRowwiseParallel, a dict
	# comprehension over the blocks; a stand-in Flux.2 instance for the packed
	# sizes) and on entries with no dtpc rule, which must come out as comments
	"$PY" tests/tools/plan_rules_cases.py >"$tmp/classes.out" 2>&1
	compare tools/python-plan-rules-classes tests/tools/python-plan-rules-classes.expected \
		"$tmp/classes.out"
	# control: Flux.2's SwiGLU halves as [1, 2] and its ids split on dim 0
	# must change the text
	sed -e 's/PackedCol(\[1, 1\])/PackedCol([1, 2])/' \
		-e '/^    "Flux2Transformer2DModel"/,/^    }),/s/"img_ids": In(split_dim=1/"img_ids": In(split_dim=0/' \
		tests/tools/plan_rules_cases.py >"$tmp/plan_rules_mutated.py"
	DTPC_DIFFUSERS_PY=python/dtpc/diffusers.py "$PY" "$tmp/plan_rules_mutated.py" \
		>"$tmp/classes-mutated.out" 2>&1
	if diff tests/tools/python-plan-rules-classes.expected "$tmp/classes-mutated.out" |
		grep -q 'colwise(blocks = \[64, 128\])' &&
		diff tests/tools/python-plan-rules-classes.expected "$tmp/classes-mutated.out" |
		grep -q 'split(img_ids, dim = 0), split(txt_ids, dim = 1)'; then ok; else
		bad tools/python-plan-rules-classes-control
		echo "  the mutated Flux.2 plans gave the golden text"
	fi
fi

summary tools
