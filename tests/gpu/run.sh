#!/bin/sh
# tests/gpu/run.sh [BUILD] — every GPU check of dtpc in one command (at most
# GPU_BUDGET_S, below), on a machine with an NVIDIA GPU. BUILD is a CUDA build
# (make BUILD=build-gpu where nvcc is found), or the folder `make gpu-bundle` made of one
# for a machine that cannot build (BUILD/bundle, or BUILD/bundle.tar.xz,
# unpacked into $TMPDIR first); without BUILD/dtpc the
# script builds with the machine's nvcc first.
#
#  kernels   every CUDA kernel against the CPU kernels (tests/gpu/test_*: fresh
#            random inputs at sizes off the tiles, outputs poisoned with NaN
#            first; f32 <= 1e-5, bf16/f16 <= 1e-2 normwise); test_cuda_data:
#            typed data in device memory in and out on the caller's stream
#            against the host path, bit for bit (one rank and tp = 2)
#  equiv     the equivalence matrix (tests/equiv.sh) with every rank on the
#            CUDA device, N ranks sharing the GPU through the local backend,
#            against the one-rank CPU run (--verify, 1e-5)
#  fixtures  diffusers' tiny Flux and Wan on the CUDA device (1e-5)
#  qwenimage diffusers' tiny Qwen-Image (masked attention, pad) on the CUDA
#            device: every tests/models.sh qwenimage case (one rank, TP,
#            Ulysses, ring, USP, the anything modes) with --verify (against
#            the one-rank CPU run, 1e-5) and against diffusers' sample (1e-5);
#            its control (the mask replaced by ones) must fail
#  qwen21    the same for Qwen-Image 2.1's cached step (tests/models.sh's
#            qwen21 cases, f32 and bf16, and its 5 controls)
#  bf16      the matrix and the fixtures again with every rank storing bf16
#            (--dtype bf16; against the float32 references, 2e-2)
#  graphs    CUDA graph replay on and off give the same outputs
#  nccl      the nccl backend at world 1 (--verify); tests/gpu/test_nccl at
#            world 2 where there are 2 GPUs (a peer that stops);
#            tests/gpu/test_nccl_init (torchrun's entry: the NCCL id carried by
#            the caller, no MPI) at world 1 with the kernels, at world 2 here
#  torchrun  launch mode 3: `torchrun --nproc-per-node N` (N = the GPUs, at
#            most 2) of a tiny FluxPipeline on dtpc.torch's backend "torchrun"
#            against mode 1's image (tests/gpu/torchrun_flux.py)
#  flux-typed a FluxPipeline of Flux's width with random weights, bf16, one GPU,
#            torch CUDA tensors in and out through the typed calls: image within
#            2e-2 of diffusers eager, no host copy in a step (torch.profiler),
#            per-step time against eager and torch.compile (tests/gpu/flux_typed.py)
#  bench     the table: attention vs PyTorch SDPA, GEMM vs cuBLASLt, copies,
#            launch overhead, a full-size Flux block vs PyTorch eager
#
# Ends with "gpu: N passed, N failed, N skipped"; the table is printed last.
# With OUT set (a folder that outlives the run) the logs are left there as
# OUT/gpu-logs.tar.gz and the table as OUT/table.txt, after every section
# (a run cut short still leaves what it did). GPU_BUDGET_S (default 540: a
# lent machine's 600 s a command, less the build's margin) bounds the run:
# a section whose own time limit no longer fits is skipped (one skip,
# named by the section, with the reason); sections run in the order above,
# the kernels first. GPU_SECTIONS="PATTERN..." runs only the sections whose
# titles match (the skipped ones, in a second command).
set -u
BUILD=${1:-build-gpu}
T0=$(date +%s)
# A bundle may travel packed (BUILD/bundle.tar.xz, what gpu-bundle writes
# beside the folder: OpenBLAS alone is 36 MB unpacked, and what a lent GPU
# machine takes is 64 MiB with the working tree): unpack it once.
case $BUILD in
*.tar.xz)
	mkdir -p "${TMPDIR:-/tmp}/dtpc-bundle"
	tar -C "${TMPDIR:-/tmp}/dtpc-bundle" -xJf "$BUILD" || exit 2
	BUILD=${TMPDIR:-/tmp}/dtpc-bundle/bundle
	;;
esac
if [ ! -x "$BUILD/dtpc" ]; then
	echo "== build ($BUILD)"
	make BUILD="$BUILD" -j"$(nproc)" all >"${TMPDIR:-/tmp}/gpu-build.log" 2>&1 ||
		{ tail -30 "${TMPDIR:-/tmp}/gpu-build.log"; exit 2; }
fi
# Libraries a bundle carries, then the large ones the machine has: cuBLASLt
# and NCCL from its CUDA toolkit or from PyTorch's wheels; the build folder
# itself for libdtpc_cuda.so, which tests/gpu/test_cuda_data's sessions load.
LDP="$BUILD/lib:$BUILD"
site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)
for d in "$site"/nvidia/cu13/lib "$site"/nvidia/*/lib /usr/local/cuda/lib64; do
	[ -d "$d" ] && LDP="$LDP:$d"
done
export LD_LIBRARY_PATH="$LDP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
. tests/lib.sh
LOG=$tmp/logs
mkdir -p "$LOG"
TABLE="$LOG/table.txt"
: >"$TABLE"
row() { echo "$*" >>"$TABLE"; }
BUDGET=${GPU_BUDGET_S:-540}
# the logs and the table so far, into OUT
save_out() {
	[ -n "${OUT:-}" ] || return 0
	cp "$TABLE" "$OUT/table.txt"
	tar czf "$OUT/gpu-logs.tar.gz" -C "$LOG" .
}
# section TITLE SECONDS: starts a section that may take SECONDS, or skips it
# (returns 1, one skip counted under TITLE) when they no longer fit the
# budget, or when GPU_SECTIONS (shell patterns, e.g. "torchrun* bench*", for
# a second command after a first one ran out of budget) matches no title
section() {
	save_out
	if [ -n "${GPU_SECTIONS:-}" ]; then
		sc_in=
		set -f # the patterns are matched against titles, not files
		for sc_p in $GPU_SECTIONS; do
			# shellcheck disable=SC2254 # the patterns are the point
			case $1 in $sc_p) sc_in=1 ;; esac
		done
		set +f
		if [ -z "$sc_in" ]; then
			skipped "$1" "not in GPU_SECTIONS ($GPU_SECTIONS)"
			return 1
		fi
	fi
	sc_el=$(($(date +%s) - T0))
	if [ $((sc_el + $2)) -gt "$BUDGET" ]; then
		skipped "$1" "past the budget: ${sc_el} s of ${BUDGET} s used, this section may take $2 s (GPU_BUDGET_S)"
		return 1
	fi
	echo "== $1 ($sc_el s)"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
row "GPU: ${GPU:-none}; $(date -u +%Y-%m-%d)"

# check NAME SECONDS CMD...: exit 0 passes, 77 skips, anything else fails
check() {
	ck_name=$1 ck_t=$2
	shift 2
	timeout "$ck_t" "$@" >"$LOG/$ck_name.log" 2>&1
	ck_rc=$?
	case $ck_rc in
	0) ok; echo "ok   $ck_name" ;;
	77) skipped "$ck_name" "$(tail -1 "$LOG/$ck_name.log")" ;;
	*) bad "$ck_name"; echo "     exit $ck_rc"; grep -v '^ok ' "$LOG/$ck_name.log" | tail -25 ;;
	esac
}

# absorb NAME LOG: a test script's "NAME: N passed, N failed, N skipped" line
absorb() {
	ab=$(sed -n "s/^$1: \([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p" "$2" | tail -1)
	if [ -z "$ab" ]; then
		bad "$1"
		tail -20 "$2"
		return
	fi
	set -- "$1" "$2" $ab
	pass=$((pass + $3))
	fail=$((fail + $4))
	[ "$4" = 0 ] || { failed_names="$failed_names $1"; grep -A12 '^FAIL' "$2" | head -60; }
	echo "$1: $3 passed, $4 failed"
}

if section kernels 120; then
	for t in "$BUILD"/tests/gpu/test_*; do
		[ -x "$t" ] || continue
		check "kernels-$(basename "$t")" 120 "$t"
	done
fi

if section "equivalence matrix on the CUDA device" 240; then
	DTPC_RUN_ARGS="--device cuda" timeout 240 sh tests/equiv.sh "$BUILD" >"$LOG/equiv.log" 2>&1
	absorb equiv "$LOG/equiv.log"
fi
if section "diffusers fixtures on the CUDA device" 120; then
	DTPC_RUN_ARGS="--device cuda" timeout 120 sh tests/fixtures.sh "$BUILD" \
		>"$LOG/fixtures.log" 2>&1
	absorb fixtures "$LOG/fixtures.log"
fi

if section "Qwen-Image (masked attention, pad) on the CUDA device" 180; then
	DTPC_RUN_ARGS="--device cuda --verify" MODELS_ONLY="qwenimage-* control-mask-ignored" \
		timeout 180 sh tests/models.sh "$BUILD" >"$LOG/models-qwenimage.log" 2>&1
	absorb models "$LOG/models-qwenimage.log"
	# a filter that matched nothing would pass: the 12 cases and the control ran
	if [ "$(grep -cE '^ok +(qwenimage-|control-mask-ignored)' "$LOG/models-qwenimage.log")" = 13 ]; then ok; else bad qwenimage-cases-ran; fi
fi

if section "Qwen-Image 2.1 (tanh, the cached keys, masked attention) on the CUDA device" 240; then
	DTPC_RUN_ARGS="--device cuda --verify" MODELS_ONLY="qwen21* control-qwen21*" \
		timeout 240 sh tests/models.sh "$BUILD" >"$LOG/models-qwen21.log" 2>&1
	absorb models "$LOG/models-qwen21.log"
	# the 19 cases (f32 and bf16) and the 5 controls ran
	if [ "$(grep -cE '^ok +(qwen21|control-qwen21)' "$LOG/models-qwen21.log")" = 24 ]; then ok; else bad qwen21-cases-ran; fi
fi

if section "the same in bf16" 360; then
	DTPC_RUN_ARGS="--device cuda --dtype bf16" timeout 240 sh tests/equiv.sh "$BUILD" \
		>"$LOG/equiv-bf16.log" 2>&1
	absorb equiv "$LOG/equiv-bf16.log"
	DTPC_RUN_ARGS="--device cuda --dtype bf16" FIXTURES_TOL=2e-2 timeout 120 \
		sh tests/fixtures.sh "$BUILD" >"$LOG/fixtures-bf16.log" 2>&1
	absorb fixtures "$LOG/fixtures-bf16.log"
fi

if section "CUDA graphs, nccl" 300; then
	"$DTPC" examples/tiny_dit.plan --plan tiny_dit_tp --mesh "tp = 1" -o "$tmp/one.graph" >/dev/null
	for m in on off; do
		check "graph-$m" 60 "$DTPC" run "$tmp/one.graph" --device cuda --cuda-graph $m --steps 3 \
			--verify --allow-seeded --save-outputs "$tmp/$m.st"
		check "graph-$m-bf16" 60 "$DTPC" run "$tmp/one.graph" --device cuda --cuda-graph $m \
			--dtype bf16 --steps 3 --verify
	done
	grep -q "CUDA graph replay" "$LOG/graph-on.log" && ok || bad "graph-on-replays"
	if cmp -s "$tmp/on.st" "$tmp/off.st"; then ok; else bad "graph-on-off-same-outputs"; fi
	check nccl-world1 60 "$DTPC" run "$tmp/one.graph" --backend nccl --steps 3 --verify
	"$DTPC" examples/tiny_dit.plan --plan tiny_dit_8 --mesh "ulysses = 2, tp = 2" -o "$tmp/four.graph" \
		>/dev/null
	if command -v mpirun >/dev/null && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 4 ]; then
		check nccl-world4 120 mpirun -np 4 --allow-run-as-root "$DTPC" run "$tmp/four.graph" \
			--backend nccl --verify
	else
		skipped nccl-world4 "needs mpirun and 4 GPUs"
fi
# the backend's own checks at world 2: asynchronous collectives and a peer
# that stops, named by complete() within the timeout (one GPU per rank)
if command -v mpirun >/dev/null && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
	check nccl-test-world2 120 mpirun -np 2 --allow-run-as-root "$BUILD/tests/gpu/test_nccl"
else
	skipped nccl-test-world2 "needs mpirun and 2 GPUs"
fi
# torchrun's entry, dtpc_comm_nccl_init: 2 processes, the id through a pipe
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
	check nccl-init-world2 120 "$BUILD/tests/gpu/test_nccl_init" 2
else
	skipped nccl-init-world2 "needs 2 GPUs"
fi

fi

# launch mode 3: torchrun of a tiny FluxPipeline (dtpc.torch, backend "torchrun",
# tp = the GPUs, at most 2; NCCL takes one rank per GPU) against mode 1's image
# (the same mesh as local ranks on the GPU): tests/gpu/torchrun_flux.py
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$ngpu" -gt 2 ] && ngpu=2
if ! section "torchrun (launch mode 3)" 420; then
	:
elif [ "$ngpu" -ge 1 ] && python3 -c 'import torch.distributed.run, diffusers' 2>/dev/null; then
	set -- env PYTHONPATH=python DTPC="$DTPC" DTPC_LIB="$BUILD/libdtpc.so" \
		DTPC_CACHE="$tmp/graphs" python3
	check torchrun-mode1 180 "$@" tests/gpu/torchrun_flux.py "$tmp/tr" --world "$ngpu"
	check torchrun-mode3 180 "$@" -m torch.distributed.run --standalone \
		--nproc-per-node "$ngpu" tests/gpu/torchrun_flux.py "$tmp/tr"
	check torchrun-same-image 60 "$@" tests/gpu/torchrun_flux.py "$tmp/tr" --compare "$ngpu"
	tail -1 "$LOG/torchrun-same-image.log"
else
	skipped torchrun-mode3 "needs a GPU and python3 with torch and diffusers"
fi

# torch CUDA tensors through the typed calls (dtpc_session_*_data, the caller's
# stream): a FluxPipeline of Flux's width on one GPU in bf16 against diffusers
# eager (image 2e-2), no host copy in a step (torch.profiler, with its control),
# the step time against eager and torch.compile: tests/gpu/flux_typed.py
if ! section "a Flux pipeline on torch CUDA tensors" 240; then
	:
elif python3 -c 'import torch, diffusers' 2>/dev/null; then
	check flux-typed 240 env PYTHONPATH=python DTPC="$DTPC" DTPC_LIB="$BUILD/libdtpc.so" \
		DTPC_CACHE="$tmp/graphs" CUDA_VISIBLE_DEVICES=0 python3 tests/gpu/flux_typed.py
	grep -E '^(ok|FAIL) ' "$LOG/flux-typed.log"
	row "Flux pipeline step, torch CUDA tensors in and out (one GPU): $(sed -n 's/^time: //p' "$LOG/flux-typed.log")"
else
	skipped flux-typed "needs python3 with torch and diffusers"
fi

bench() {
	bn=$1 bt=$2
	shift 2
	timeout "$bt" "$@" >"$LOG/$bn.log" 2>&1 || echo "bench $bn: exit $? (see $bn.log)"
}
if section benchmarks 300; then
	[ -x "$BUILD/bench/gpu/attn_bench" ] && bench attn 90 "$BUILD/bench/gpu/attn_bench"
	bench sdpa 90 python3 bench/gpu/sdpa_peer.py
	[ -x "$BUILD/bench/gpu/kernel_bench" ] && bench kernel 90 "$BUILD/bench/gpu/kernel_bench"
	"$DTPC" bench/gpu/flux_block.plan --plan flux_block -o "$tmp/fb.graph" >/dev/null
	bench flux_dtpc_graph 90 "$DTPC" run "$tmp/fb.graph" --device cuda --steps 10
	bench flux_dtpc_eager 90 "$DTPC" run "$tmp/fb.graph" --device cuda --steps 10 --cuda-graph off
	bench flux_torch 90 python3 bench/gpu/flux_block_torch.py --dtype f32 --steps 10
	bench flux_dtpc_bf16 90 "$DTPC" run "$tmp/fb.graph" --device cuda --dtype bf16 --steps 10
	bench flux_torch_bf16 90 python3 bench/gpu/flux_block_torch.py --dtype bf16 --steps 10
	# where the block's time goes: a traced step (each op waited for) by op kind
	bench flux_trace 90 "$DTPC" run "$tmp/fb.graph" --device cuda --steps 2 --trace "$tmp/fb.json"
	bench flux_trace_bf16 90 "$DTPC" run "$tmp/fb.graph" --device cuda --dtype bf16 --steps 2 \
		--trace "$tmp/fb16.json"
	for tr in fb fb16; do python3 - "$tmp/$tr.json" >"$LOG/${tr}_ops.log" 2>&1 <<'PY'
import json, sys
spans = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
last = spans[len(spans) // 2:]  # the second step
by = {}
for e in last:
    k = e["name"].split()[0]
    by[k] = by.get(k, 0.0) + e["dur"] / 1000
total = sum(by.values())
print(f"total_ms={total:.2f} " +
      " ".join(f"{k}={v:.2f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])))
PY
	done

	row ""
	row "attention forward (bf16), TFLOP/s: dtpc vs PyTorch SDPA"
	cat "$LOG/attn.log" "$LOG/sdpa.log" 2>/dev/null | grep -E '^(attn|attn_own|sdpa|lse_merge|memcpy_d2d) ' >>"$TABLE"
	row ""
	row "kernels through the runtime vs the library alone"
	grep -E '^(gemm|pack|unpack|copy|norm|rms_norm|layer_norm|launch|replay) ' "$LOG/kernel.log" \
		>>"$TABLE" 2>/dev/null
	row ""
	row "Flux.1 block at full size (1 double block + embedders + output; one GPU):"
	step() { sed -n 's/^time: \([0-9.]*\) ms.*/\1/p' "$LOG/$1.log"; }
	torch_ms() { sed -n 's/^torch_eager dtype=[a-z0-9]* ms=\([0-9.]*\).*/\1/p' "$LOG/$1.log"; }
	row "  f32:  dtpc (CUDA graph) $(step flux_dtpc_graph) ms, dtpc (no graph) $(step flux_dtpc_eager) ms, PyTorch eager $(torch_ms flux_torch) ms"
	row "  bf16: dtpc (CUDA graph) $(step flux_dtpc_bf16) ms, PyTorch eager $(torch_ms flux_torch_bf16) ms"
	row "  f32 by op kind (one traced step, each op waited for, ms): $(cat "$LOG/fb_ops.log")"
	row "  bf16 by op kind: $(cat "$LOG/fb16_ops.log")"
fi
echo
echo "gpu: $pass passed, $fail failed, $skip skipped (in $(($(date +%s) - T0)) s)"
[ -n "$failed_names" ] && echo "failed:$failed_names"
echo
cat "$TABLE"
save_out
[ "$fail" = 0 ]
