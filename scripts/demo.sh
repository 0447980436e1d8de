#!/bin/sh
# demo.sh BUILD — the quickstart's main job: check every example plan, then
# compile the tiny DiT for ring 2 x ulysses 2 x tp 2 and replay it on 8 local
# ranks, verified against the same model run unsharded on one rank.
set -eu
BUILD=${1:-build}
DTPC="$BUILD/dtpc"
for f in examples/*.plan; do
	printf "== dtpc check %s: " "$f"
	"$DTPC" check "$f" -q && echo "clean ($(grep -c '^plan ' "$f") plans)"
done
echo
echo "== dtpc check examples/tiny_dit.plan --plan tiny_dit_8"
"$DTPC" check examples/tiny_dit.plan --plan tiny_dit_8
echo
echo "== dtpc examples/tiny_dit.plan --plan tiny_dit_8 -o $BUILD/tiny_dit_8.graph -v"
"$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 -o "$BUILD/tiny_dit_8.graph" -v
echo
echo "== dtpc run $BUILD/tiny_dit_8.graph --ranks 8 --verify --steps 5"
"$DTPC" run "$BUILD/tiny_dit_8.graph" --ranks 8 --verify --steps 5
