#!/bin/sh
# scripts/cost_same.sh OLD NEW [OUT]: `dtpc cost` (text and json) and
# `dtpc suggest` of every plan of models/*.plan and examples/*.plan on
# hw/h100-sxm.json from two dtpc programs, compared byte for byte (the
# outputs and the exit status): a refactoring of the cost model must not
# change a prediction. Prints one line per difference and a count; exit 1
# on any difference. Suggest runs on a world of 8, the profile's node.
old=${1:?usage: cost_same.sh OLD NEW [OUT]} new=${2:?usage: cost_same.sh OLD NEW [OUT]}
out=${3:-${TMPDIR:-/tmp}/cost_same.$$}
mkdir -p "$out"
hw=hw/h100-sxm.json
n=0 diff=0
run() { # tag, command words...: both programs' stdout, stderr and status
	tag=$1; shift
	"$old" "$@" >"$out/$tag.old" 2>&1; echo "rc $?" >>"$out/$tag.old"
	"$new" "$@" >"$out/$tag.new" 2>&1; echo "rc $?" >>"$out/$tag.new"
	n=$((n + 1))
	if ! cmp -s "$out/$tag.old" "$out/$tag.new"; then
		echo "differs: $*"
		diff=$((diff + 1))
	fi
}
for f in models/*.plan examples/*.plan; do
	for p in $(sed -n 's/^plan \([A-Za-z0-9_]*\).*/\1/p' "$f"); do
		tag=$(basename "$f" .plan).$p
		run "$tag.text" cost "$f" --plan "$p" --hw "$hw"
		run "$tag.json" cost "$f" --plan "$p" --hw "$hw" --format json
		run "$tag.bf16" cost "$f" --plan "$p" --hw "$hw" --dtype bf16
		run "$tag.suggest" suggest "$f" --plan "$p" --hw "$hw" --world 8
	done
done
echo "cost_same: $n runs, $diff differ (outputs in $out)"
[ "$diff" = 0 ]
