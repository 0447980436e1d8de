#!/bin/sh
# commands.sh BUILD — verdicts and exit statuses of the commands, where a
# golden case cannot express them (quoted arguments, files made on the fly):
# `run --verify` fails on a NaN (and counts it); `run` names each output
# holding NaN or Inf (exit 1), seeded weights or inputs (refusing to save
# their outputs) and an input the graph does not take; a missing or
# unreadable file is an I/O error (2) before any work, worded alike by every
# command; an output that cannot be written is found before the forward
# pass; --mesh and --context take one statement of their own kind; cost's
# in-memory compile tries a context hint as check does. Ends with
# "clicmd: N passed, N failed, N skipped". inspect's JSON keeps 64-bit values exact.
set -u
BUILD=${1:-build}
. tests/lib.sh

# expect NAME STATUS PATTERN COMMAND...: the exit status, and PATTERN
# (grep -E) in the output
expect() {
	e_name=$1 e_want=$2 e_pat=$3
	shift 3
	"$@" >"$tmp/out" 2>&1
	e_got=$?
	if [ "$e_got" = "$e_want" ] && grep -qE "$e_pat" "$tmp/out"; then ok; else
		bad "clicmd/$e_name"
		echo "  expected exit $e_want and /$e_pat/, got $e_got: $*"
		head -5 "$tmp/out"
	fi
}

cat >"$tmp/m.plan" <<'PLAN'
model m { input x : [1, 4, 8]; proj_in = linear(x, 8); y = gelu(proj_in); output y; }
plan p { model m; mesh tp = 2; "proj_in" : colwise; }
PLAN
"$DTPC" "$tmp/m.plan" -o "$tmp/m.graph" >/dev/null 2>&1 || bad clicmd/compile
# weights with one NaN in a bias: every output element it reaches is NaN
python3 - "$tmp" <<'PY'
import json, struct, sys
def save(path, tensors):
    hdr, blob = {}, b""
    for name, shape, vals in tensors:
        b = struct.pack("<%df" % len(vals), *vals)
        hdr[name] = {"dtype": "F32", "shape": shape,
                     "data_offsets": [len(blob), len(blob) + len(b)]}
        blob += b
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + blob)
w = [0.01 * i for i in range(64)]
bias = [0.0] * 8
save(sys.argv[1] + "/good.safetensors", [("proj_in.weight", [8, 8], w), ("proj_in.bias", [8], bias)])
bias[3] = float("nan")
save(sys.argv[1] + "/nan.safetensors", [("proj_in.weight", [8, 8], w), ("proj_in.bias", [8], bias)])
bias[3] = float("inf")
save(sys.argv[1] + "/inf.safetensors", [("proj_in.weight", [8, 8], w), ("proj_in.bias", [8], bias)])
# inputs: x alone, and x with a tensor the graph does not take
x = [0.1 * ((7 * i) % 13 - 6) for i in range(32)]
save(sys.argv[1] + "/x.safetensors", [("x", [1, 4, 8], x)])
save(sys.argv[1] + "/xg.safetensors", [("guidance", [1], [3.5]), ("x", [1, 4, 8], x)])
PY
g="$tmp/m.graph"
expect verify-ok 0 '#wrong 0 of 32: ok' "$DTPC" run "$g" --weights "$tmp/good.safetensors" --verify
expect verify-nan 1 'error nan .*#wrong 4 of 32 \(4 not finite\), first at index 3: nan.*FAILED' \
	"$DTPC" run "$g" --weights "$tmp/nan.safetensors" --verify
# ---- what a run ran on ------------------------------------------------------------------
# Non-finite outputs: each named with its count, exit 1, not saved;
# --allow-nonfinite makes them a note. The column the NaN (or infinite) bias
# feeds is 4 of the 32 values. Negative control: the good weights, no line.
GX="--inputs $tmp/x.safetensors"
# shellcheck disable=SC2086
expect nonfinite-nan 1 "^dtpc: error: output 'y': 4 of 32 values are NaN or Inf\$" \
	"$DTPC" run "$g" --weights "$tmp/nan.safetensors" $GX
# shellcheck disable=SC2086
expect nonfinite-inf 1 "^dtpc: error: output 'y': 4 of 32 values are NaN or Inf\$" \
	"$DTPC" run "$g" --weights "$tmp/inf.safetensors" $GX
# shellcheck disable=SC2086
expect nonfinite-allowed 0 "^dtpc: note: output 'y': 4 of 32 values are NaN or Inf \(--allow-nonfinite\)\$" \
	"$DTPC" run "$g" --weights "$tmp/nan.safetensors" $GX --allow-nonfinite
# shellcheck disable=SC2086
expect nonfinite-none 0 "^time:" "$DTPC" run "$g" --weights "$tmp/good.safetensors" $GX
if grep -q 'NaN or Inf' "$tmp/out"; then bad clicmd/nonfinite-none-said; else ok; fi
# shellcheck disable=SC2086
expect nonfinite-not-saved 1 "4 of 32 values are NaN or Inf" \
	"$DTPC" run "$g" --weights "$tmp/nan.safetensors" $GX --save-outputs "$tmp/nan.st"
if [ -e "$tmp/nan.st" ]; then bad clicmd/nonfinite-not-saved-file; else ok; fi
# shellcheck disable=SC2086
expect nonfinite-saved-allowed 0 "^time:" "$DTPC" run "$g" --weights "$tmp/nan.safetensors" $GX \
	--allow-nonfinite --save-outputs "$tmp/nan.st"
if python3 - "$tmp/nan.st" <<'PY'
import json, math, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
s, e = json.loads(b[8:8 + n])["y"]["data_offsets"]
v = struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
assert sum(not math.isfinite(x) for x in v) == 4, v
PY
then ok; else bad clicmd/nonfinite-saved-allowed-holds-4; fi
expect verify-nan-named 1 "^dtpc: error: output 'y': 4 of 32 values are NaN or Inf\$" \
	"$DTPC" run "$g" --weights "$tmp/nan.safetensors" --verify
# Seeded weights or inputs: a note says which and the seed; --save-outputs
# of them is refused (exit 2, nothing written) unless --allow-seeded.
# Negative control: both files given, no note, saved.
expect seeded-save-refused 2 "^dtpc: --save-outputs: the weights and the inputs are seeded random values \(no --weights, no --inputs\), so the outputs are no model's; give --weights and --inputs, or --allow-seeded to save them\$" \
	"$DTPC" run "$g" --save-outputs "$tmp/s.st"
if [ -e "$tmp/s.st" ]; then bad clicmd/seeded-save-refused-file; else ok; fi
expect seeded-inputs-save-refused 2 "the inputs are seeded random values \(no --inputs\).*give --inputs, or --allow-seeded" \
	"$DTPC" run "$g" --weights "$tmp/good.safetensors" --save-outputs "$tmp/s.st"
expect seeded-save-allowed 0 "^dtpc: note: the weights and the inputs are seeded random values \(--seed 1; no --weights, no --inputs\)\$" \
	"$DTPC" run "$g" --allow-seeded --save-outputs "$tmp/s.st"
if [ -s "$tmp/s.st" ]; then ok; else bad clicmd/seeded-save-allowed-file; fi
expect seeded-note 0 "^dtpc: note: the inputs are seeded random values \(--seed 9; no --inputs\)\$" \
	"$DTPC" run "$g" --weights "$tmp/good.safetensors" --seed 9
# shellcheck disable=SC2086
expect seeded-none 0 "^time:" "$DTPC" run "$g" --weights "$tmp/good.safetensors" $GX \
	--save-outputs "$tmp/f.st"
if grep -q 'seeded' "$tmp/out" || [ ! -s "$tmp/f.st" ]; then bad clicmd/seeded-none-said; else ok; fi
# a graph without weights seeds none: its inputs alone are seeded, or none
printf 'model w { input x : [1, 4, 8]; y = gelu(x); output y; }\nplan p { model w; }\n' >"$tmp/w.plan"
"$DTPC" "$tmp/w.plan" -o "$tmp/w.graph" >/dev/null 2>&1 || bad clicmd/compile-weightless
expect seeded-weightless 0 "^dtpc: note: the inputs are seeded random values \(--seed 1; no --inputs\)\$" \
	"$DTPC" run "$tmp/w.graph"
# shellcheck disable=SC2086
expect seeded-weightless-none 0 "^time:" "$DTPC" run "$tmp/w.graph" $GX --save-outputs "$tmp/w.st"
if grep -q 'seeded' "$tmp/out"; then bad clicmd/seeded-weightless-none-said; else ok; fi
# An input the graph does not take: one note for the run's 2 ranks; none
# without it (the negative control: nonfinite-none's run had x alone)
expect unused-input 0 "^dtpc: note: --inputs '$tmp/xg.safetensors' holds 1 tensor this graph does not use: 'guidance'\$" \
	"$DTPC" run "$g" --weights "$tmp/good.safetensors" --inputs "$tmp/xg.safetensors"
if [ "$(grep -c 'does not use' "$tmp/out")" = 1 ]; then ok; else bad clicmd/unused-input-once; fi
expect missing-weights 2 "cannot read '$tmp/none': No such file" \
	"$DTPC" run "$g" --weights "$tmp/none"
expect missing-inputs 2 "cannot read '$tmp/none'" "$DTPC" run "$g" --inputs "$tmp/none"
expect inputs-folder 2 "cannot read '$tmp': not a regular file" "$DTPC" run "$g" --inputs "$tmp"
# a folder reads the same for every command
expect run-folder 2 "^dtpc: cannot read '$tmp': not a regular file" "$DTPC" run "$tmp"
expect check-folder 2 "^dtpc: cannot read '$tmp': not a regular file" "$DTPC" check "$tmp"
expect inspect-folder 2 "^dtpc: cannot read '$tmp': not a regular file" "$DTPC" inspect "$tmp"
# unwritable outputs stop the run before its forward pass ("time:" is printed after it)
expect bad-trace 2 "cannot write '$tmp/no/t.json'" "$DTPC" run "$g" --trace "$tmp/no/t.json"
expect bad-save 2 "cannot write '$tmp/no/o.st'" "$DTPC" run "$g" --allow-seeded --save-outputs "$tmp/no/o.st"
if grep -q '^time:' "$tmp/out"; then bad clicmd/bad-save-ran; else ok; fi
expect run-help 0 '^usage: dtpc' "$DTPC" run --help
expect inspect-help 0 '^usage: dtpc' "$DTPC" inspect --help
# inspect's JSON: 64-bit values exact (source_hash passes 2^53)
"$DTPC" inspect "$g" --format json >"$tmp/i.json" 2>&1
"$DTPC" inspect "$g" >"$tmp/i.txt" 2>&1
if python3 - "$tmp/i.json" "$tmp/i.txt" <<'PY'
import json, re, sys
meta = json.load(open(sys.argv[1]))["meta"]
text = open(sys.argv[2]).read()
want = int(re.search(r"source_hash\s+(\d+)", text).group(1))
assert meta["source_hash"] == want, (meta["source_hash"], want)
PY
then ok; else bad clicmd/inspect-json-int64; fi

# --mesh and --context: one statement each, of their own kind
tiny="examples/tiny_dit.plan --plan tiny_dit_8"
# shellcheck disable=SC2086
expect context-with-mesh 2 "^dtpc: --context takes the options of one context statement" \
	"$DTPC" check $tiny --context 'rotate_method = "alltoall"; mesh tp = 2'
# shellcheck disable=SC2086
expect mesh-with-rule 2 "^dtpc: --mesh takes the axes of one mesh statement" \
	"$DTPC" check $tiny --mesh 'tp = 2; "blocks.*" : colwise'
# without the ';' it is a syntax error, and the mesh is not taken from --context
# shellcheck disable=SC2086
expect context-mesh-unseparated 1 "^1 error generated" \
	"$DTPC" check $tiny --context 'rotate_method = "alltoall" mesh tp = 2'
# a ';' inside a string or a comment ends nothing
# shellcheck disable=SC2086
expect context-string-semicolon 1 "rotate_method must be" \
	"$DTPC" check $tiny --context 'rotate_method = "all;gather" # ;'
# ---- the in-memory compiles (cost, run --verify) check a plan as check does
# (check_plan): a context hint is tried before it is offered, the same words
# as check's golden (before, cost offered ulysses_anything untried)
expect cost-hint-tried 1 "^hint: ulysses_anything = true would not help: ulysses_anything cannot pad the 6 heads of 'attn' over 4 ranks" \
	"$DTPC" cost tests/diag/tp-ulysses-heads.plan --hw hw/h100-sxm.json
if grep -q 'set ulysses_anything' "$tmp/out"; then bad clicmd/cost-hint-untried; else ok; fi
# ---- a plan on standard input ("-"): located as <stdin>, imports from the current folder
expect stdin-check 0 '^checked$' \
	sh -c "\"$DTPC\" check - --plan tiny_dit_8 -q <examples/tiny_dit.plan && echo checked"
printf 'model m {\n  input x : [1, 4, 8];\n  y = lineer(x, 8);\n  output y;\n}\n' >"$tmp/typo.plan"
expect stdin-error-located 1 '^<stdin>:3:7: error: unknown op' \
	sh -c "\"$DTPC\" check - <\"$tmp/typo.plan\""
expect stdin-compile 0 '^compiled$' \
	sh -c "\"$DTPC\" - --plan tiny_dit_8 -o \"$tmp/in.graph\" <examples/tiny_dit.plan && echo compiled"
expect stdin-verify-refused 2 'compiled from standard input' "$DTPC" run "$tmp/in.graph" --verify

# ---- a FIFO as a checkpoint, an index or a rank's file: refused, not waited on
# (each blocked in open() for a writer that never came)
mkdir "$tmp/ff" "$tmp/ff/ranks"
mkfifo "$tmp/ff/w.safetensors" "$tmp/ff/model.safetensors.index.json" \
	"$tmp/ff/ranks/rank-00000-of-00002.safetensors" "$tmp/ff/ranks/rank-00001-of-00002.safetensors"
expect shard-weights-fifo 2 "w.safetensors: not a regular file" \
	timeout 20 "$DTPC" shard "$g" --weights "$tmp/ff/w.safetensors" --out "$tmp/ff/out"
expect shard-index-fifo 2 "index.json: not a regular file" \
	timeout 20 "$DTPC" shard "$g" --weights "$tmp/ff/model.safetensors.index.json" --out "$tmp/ff/out"
expect run-rank-file-fifo 2 "rank-00000-of-00002.safetensors: not a regular file" \
	timeout 20 "$DTPC" run "$g" --weights "$tmp/ff/ranks"

# ---- outputs that are FIFOs or files the run reads
# a FIFO without a reader: refused (open waited for one for ever); with one,
# written (the check's open and close ended the reader's stream, and the
# write after the run then waited for ever)
mkfifo "$tmp/ff/out"
expect run-trace-fifo-no-reader 2 "cannot write '$tmp/ff/out': a FIFO that no process reads" \
	timeout 20 "$DTPC" run "$g" --trace "$tmp/ff/out"
# The reader opens the FIFO without waiting for a writer and says so (the file
# ready) before the run starts: a `cat` started in the background may not
# have reached its open() when the run checks for a reader, and the run is
# then right to refuse. Until the run's writer arrives, a read finds no
# writer and returns nothing: the reader waits for the first bytes, then for
# the end.
cat >"$tmp/ff/reader.py" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
open(sys.argv[3], "w").close()
got, end = b"", time.monotonic() + 20
while time.monotonic() < end:
    try:
        b = os.read(fd, 1 << 16)
    except BlockingIOError:
        b = None
    if b:
        got += b
    elif b == b"" and got:
        break
    else:
        time.sleep(0.01)
open(sys.argv[2], "wb").write(got)
PY
expect run-save-fifo-reader 0 "^time:" sh -c "python3 '$tmp/ff/reader.py' '$tmp/ff/out' '$tmp/ff/got' '$tmp/ff/ready' &
	i=0; while [ ! -e '$tmp/ff/ready' ] && [ \$i -lt 2000 ]; do sleep 0.01; i=\$((i+1)); done
	timeout 20 '$DTPC' run '$g' --allow-seeded --save-outputs '$tmp/ff/out'; s=\$?; wait; exit \$s"
# what came through the FIFO is what a file gets
"$DTPC" run "$g" --allow-seeded --save-outputs "$tmp/ff/plain.st" >/dev/null 2>&1
if python3 tests/compare_st.py "$tmp/ff/got" "$tmp/ff/plain.st" 0 >/dev/null 2>&1; then ok; else
	bad clicmd/run-save-fifo-reader-whole
fi
cp "$g" "$tmp/ff/g.orig"
expect run-save-over-graph 2 "cannot write '$g': it is the graph this run reads" \
	"$DTPC" run "$g" --allow-seeded --save-outputs "$g"
if cmp -s "$g" "$tmp/ff/g.orig"; then ok; else bad clicmd/run-save-over-graph-kept; fi
expect run-trace-over-weights 2 "it is the --weights this run reads" \
	"$DTPC" run "$g" --weights "$tmp/good.safetensors" --trace "$tmp/good.safetensors"
expect run-trace-save-same 2 "^dtpc: --trace and --save-outputs name the same file" \
	"$DTPC" run "$g" --trace "$tmp/ff/same" --allow-seeded --save-outputs "$tmp/ff/same"
expect run-trace-save-devnull 0 "^time:" \
	"$DTPC" run "$g" --trace /dev/null --allow-seeded --save-outputs /dev/null

# ---- a file name that is not UTF-8: JSON output stays UTF-8 ('?' for the bad
# byte); text keeps the bytes
bad_name="$tmp/ff/b$(printf '\377')d.plan"
printf 'model m { input x : [1, 4, 8]; y = gelu(x) output y; }\n' >"$bad_name"
"$DTPC" check "$bad_name" --format json >"$tmp/ff/j.json" 2>/dev/null
if python3 - "$tmp/ff/j.json" <<'PY2'
import json, sys
d = json.loads(open(sys.argv[1], "rb").read().decode("utf-8"))
assert d["diagnostics"][0]["file"].endswith("/b?d.plan"), d
PY2
then ok; else bad clicmd/json-file-name-not-utf8; fi

# ---- the first sweep's leftovers (docs/reliability.md), now holding
# fmt read /dev/zero until memory ran out; check FIFO blocked in fopen
expect fmt-dev-zero 2 "cannot read '/dev/zero': not a regular file" timeout 20 "$DTPC" fmt /dev/zero
mkfifo "$tmp/ff/p.plan"
expect check-fifo 2 "not a regular file" timeout 20 "$DTPC" check "$tmp/ff/p.plan"
# compiling a file whose only plan has a syntax error: its located error
# and exit 1 (was "has no plan to compile", exit 2)
printf 'model m { input x : [1, 4, 8]; y = gelu(x) output y; }\nplan p { model m; mesh tp = 1; }\n' \
	>"$tmp/ff/syn.plan"
expect compile-syntax-error 1 "syn.plan:1:44: error: unexpected 'output'" \
	"$DTPC" "$tmp/ff/syn.plan" -o "$tmp/ff/syn.graph"
# -D seq=4.0 on an integer parameter shows the value as given
expect define-float-for-integer 1 "D seq = 4\.0: 'seq' is an integer" \
	"$DTPC" check examples/tiny_dit.plan --plan tiny_dit_8 -D seq=4.0

# ---- inspect: why each op is there, for every kind a graph holds -------------------------
# Graphs that hold, between them, every kind of ops.def but param (which no
# graph holds: the loader refuses it); each kind's explanation in inspect's
# JSON, against tests/cli/inspect-why.expected. A kind none of them has, or a
# kind given another's explanation, fails.
: >"$tmp/why.list"
for pp in "examples/flux.plan flux_ring2_ulysses2_fsdp" "examples/flux.plan flux_tiny_tp" \
	"tests/config/tiny.plan tiny_tp" "examples/ltx.plan ltx_tiny_tp" \
	"examples/qwenimage.plan qwenimage_ring2_ulysses2_tp2" "examples/wan.plan wan_tiny_usp_ffn_tp" \
	"tests/plans/sp.plan qknorm_sp" "tests/fixtures/embed.plan embed_fixture" \
	"tests/plans/tanh.plan tp" "tests/plans/sigmoid.plan sigmoid_tp" \
	"models/ltx2.plan ltx2_single" "tests/plans/index.plan cp"; do
	# shellcheck disable=SC2086 # file and plan
	set -- $pp
	if "$DTPC" "$1" --plan "$2" -o "$tmp/why.graph" >"$tmp/why.out" 2>&1 &&
		"$DTPC" inspect "$tmp/why.graph" --format json >"$tmp/why_$2.json" 2>&1; then
		echo "$tmp/why_$2.json" >>"$tmp/why.list"
	else
		bad "clicmd/inspect-why ($1 $2)"
		tail -3 "$tmp/why.out"
	fi
done
# shellcheck disable=SC2046 # one JSON file a line, no spaces
python3 - graph/ops.def $(cat "$tmp/why.list") >"$tmp/why.txt" 2>&1 <<'PY'
import json, re, sys
kinds = re.findall(r"^(?:OP|UNARY)\((\w+),", open(sys.argv[1]).read(), re.M)
seen = {}
for f in sys.argv[2:]:
    for rank in json.load(open(f))["ranks"]:
        for o in rank["ops"]:
            seen.setdefault(o["kind"], set()).add(o["why"])
for k in kinds:
    if k != "param":
        for w in sorted(seen.get(k, {"(in none of the graphs)"})):
            print(f"{k}: {w}")
PY
compare clicmd/inspect-why tests/cli/inspect-why.expected "$tmp/why.txt"

# --expose: a repeat's tensors as outputs equal those of the same model with
# its blocks written out (flat_one's explicit outputs), bit for bit on the
# same seeded weights; the control, another seed, must differ. An empty
# glob names the root (a golden case cannot pass one).
E=tests/cli/expose.plan
if "$DTPC" $E --plan one -o "$tmp/e.graph" --expose 'transformer_blocks.*.ff' \
	--expose transformer_blocks.1 --expose transformer_blocks.0.attn.to_out.0 >/dev/null 2>&1 &&
	"$DTPC" $E --plan flat_one -o "$tmp/f.graph" >/dev/null 2>&1 &&
	"$DTPC" run "$tmp/e.graph" --allow-seeded --save-outputs "$tmp/e.st" >/dev/null 2>&1 &&
	"$DTPC" run "$tmp/f.graph" --allow-seeded --save-outputs "$tmp/f.st" >/dev/null 2>&1 &&
	python3 tests/compare_st.py "$tmp/e.st" "$tmp/f.st" 0 >"$tmp/out" 2>&1; then ok; else
	bad clicmd/expose-equals-explicit-outputs
	cat "$tmp/out"
fi
"$DTPC" run "$tmp/e.graph" --seed 2 --allow-seeded --save-outputs "$tmp/e2.st" >/dev/null 2>&1
if python3 tests/compare_st.py "$tmp/e2.st" "$tmp/f.st" 1e-3 >/dev/null 2>&1; then
	bad clicmd/control-expose-other-seed
else ok; fi
expect expose-root 1 'error: --expose "" matches the model itself' "$DTPC" check $E --plan one --expose ''

summary clicmd
