#!/bin/sh
# run.sh BUILD — the benchmarks (not tests: they print figures, which are
# recorded by hand with the machine and date in docs/performance.md).
set -eu
BUILD=${1:-build}
echo "machine: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "date:    $(date -u +%Y-%m-%d)"
echo
python3 bench/check_scaling.py "$BUILD"
echo
python3 bench/compile_scaling.py "$BUILD"
echo
python3 bench/runtime_bench.py "$BUILD"
echo
python3 bench/cost_accuracy.py "$BUILD"
