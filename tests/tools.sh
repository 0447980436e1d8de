#!/bin/sh
# tools.sh BUILD — the everyday tools around the compiler: `check --format
# sarif`, `embed`, the Python package, `fmt`. Ends with
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

# ---- SARIF ----------------------------------------------------------------------------
# Exact text of a result with a related location and a hint, of one from the
# command line (placed on the checked file), and of a clean check.
golden sarif-notes "$DTPC" check tests/diag/context-missing-ring-style.plan --format sarif
golden sarif-command-line "$DTPC" check examples/tiny_dit.plan --plan tiny_dit_8 \
	--mesh "ring = 0, tp = 2" --format sarif
golden sarif-clean "$DTPC" check examples/tiny_dit.plan --format sarif
golden sarif-compile-refuses "$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 -o "$tmp/x.graph" \
	--format sarif
# Every diagnostic case and every example: a valid SARIF 2.1.0 log (the
# schema's structure, restated in tests/tools/sarif_check.py: no network
# here), each error with its rule, the exit status that of the text check.
for f in tests/diag/*.plan examples/*.plan; do
	args=$(sed -n '1s/^# args: //p' "$f")
	# shellcheck disable=SC2086
	"$DTPC" check "$f" --no-color $args >/dev/null 2>&1
	want=$?
	# shellcheck disable=SC2086
	"$DTPC" check "$f" --format sarif $args >"$tmp/s.json" 2>/dev/null
	got=$?
	if [ "$got" = "$want" ] && python3 tests/tools/sarif_check.py --rules "$tmp/s.json" \
		>"$tmp/why" 2>&1; then ok; else
		bad "tools/sarif/$(basename "$f")"
		echo "  exit $got (text: $want)"
		cat "$tmp/why"
	fi
done
# The validator's negative controls: each breaks one rule of the schema.
"$DTPC" check tests/diag/context-missing-ring-style.plan --format sarif >"$tmp/good.json" 2>/dev/null
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
	python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
$mutation
json.dump(d, open(sys.argv[2], 'w'))" "$tmp/good.json" "$tmp/bad.json"
	if python3 tests/tools/sarif_check.py "$tmp/bad.json" >/dev/null 2>&1; then
		bad "tools/sarif-validator accepts: $mutation"
	else ok; fi
done

summary tools
