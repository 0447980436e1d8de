#!/bin/sh
# fuse.sh BUILD — the fusion of a linear and its activation (compiler/fuse.c):
# which pairs it fuses (a golden of -d f), and that a fused graph computes
# the same bits as the unfused one on the CPU, f32 and bf16, on one rank and
# on three. Ends with "fuse: N passed, N failed, N skipped". UPDATE=1
# rewrites the golden (counted as rewritten).
set -u
BUILD=${1:-build}
. tests/lib.sh
PLAN=tests/fuse/fuse.plan

# What is fused: on one rank every linear read only by a gelu (either
# approximation) or a silu; under tp the rowwise linear's output goes to
# its all_reduce first, so `down` stays apart; never up.both (two readers)
# nor head (an output).
for p in one tp; do
	"$DTPC" "$PLAN" --plan "$p" -o "$tmp/$p.graph" -d f >>"$tmp/dump" 2>&1 ||
		{ bad "fuse/compile-$p"; cat "$tmp/dump"; }
done
compare fuse/dump tests/fuse/dump.expected "$tmp/dump"
# --no-fuse leaves no linear_act; the fused graph has one per dump line
"$DTPC" "$PLAN" --plan one --no-fuse -o "$tmp/apart.graph" >/dev/null 2>&1
n_apart=$("$DTPC" inspect "$tmp/apart.graph" | grep -cE '^ +[0-9]+ +linear_act ')
n_fused=$("$DTPC" inspect "$tmp/one.graph" | grep -cE '^ +[0-9]+ +linear_act ')
if [ "$n_apart" = 0 ] && [ "$n_fused" = 8 ]; then ok; else
	bad "fuse/no-fuse: $n_apart linear_act ops with --no-fuse, $n_fused without (want 0 and 8)"
fi

# outputs PLAN_FILE PLAN DTYPE NAME [DTPC OPTIONS...]: the graph's outputs
# (every rank's, gathered) in $tmp/NAME.st
outputs() {
	o_file=$1 o_plan=$2 o_dtype=$3 o_name=$4
	shift 4
	"$DTPC" "$o_file" --plan "$o_plan" --dtype "$o_dtype" "$@" -o "$tmp/$o_name.graph" \
		>"$tmp/$o_name.log" 2>&1 &&
		replay local "$tmp/$o_name.graph" --seed 7 --allow-seeded --save-outputs "$tmp/$o_name.st" \
			>>"$tmp/$o_name.log" 2>&1
}

# Bitwise: fused and unfused outputs are the same file (the same weights
# and inputs by name, --seed 7).
for p in one tp; do
	for dt in f32 bf16; do
		if outputs "$PLAN" "$p" "$dt" "fused-$p-$dt" &&
			outputs "$PLAN" "$p" "$dt" "apart-$p-$dt" --no-fuse; then
			if cmp -s "$tmp/fused-$p-$dt.st" "$tmp/apart-$p-$dt.st"; then ok; else
				bad "fuse/bitwise-$p-$dt: fused and unfused outputs differ"
			fi
		else
			bad "fuse/run-$p-$dt"
			cat "$tmp/fused-$p-$dt.log" "$tmp/apart-$p-$dt.log" 2>/dev/null | tail -20
		fi
	done
done

# Negative control: the comparison sees a wrong activation. The same plan
# with act.gelu's approximation changed to tanh, fused, must not match the
# unfused original (gelu and its tanh form differ by about 1e-3).
sed 's/act.gelu = gelu(up.gelu);/act.gelu = gelu(up.gelu, approximate = "tanh");/' "$PLAN" \
	>"$tmp/wrong.plan"
if cmp -s "$PLAN" "$tmp/wrong.plan"; then
	bad "fuse/negative-control: the sed did not change the plan"
else
	for dt in f32 bf16; do
		if outputs "$tmp/wrong.plan" one "$dt" "wrong-$dt"; then
			if cmp -s "$tmp/wrong-$dt.st" "$tmp/apart-one-$dt.st"; then
				bad "fuse/negative-control-$dt: a changed activation gave the same outputs"
			else ok; fi
		else
			bad "fuse/negative-control-run-$dt"
			tail -20 "$tmp/wrong-$dt.log"
		fi
	done
fi

summary fuse
