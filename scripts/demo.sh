#!/bin/sh
# demo.sh BUILD — the quickstart's main job: check every example plan and
# print what each plan does (world, mesh, rules, styles, heads and tokens
# per rank). Fails if any example has an error.
set -eu
BUILD=${1:-build}
status=0
for f in examples/*.plan; do
	echo "== dtpc check $f"
	"$BUILD/dtpc" check "$f" || status=1
	echo
done
[ "$status" = 0 ] && echo "all examples check clean" || echo "some examples have errors"
exit $status
