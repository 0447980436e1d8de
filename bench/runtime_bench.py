#!/usr/bin/env python3
"""runtime_bench.py BUILD — the runtime's benchmarks:

1. replay overhead: a graph of 20,000 tiny ops (4 floats each), ns per op;
2. end-to-end step time of the tiny DiT (seq 1024) on 1, 2 and 4 local ranks;
3. CPU attention against the GEMM rate (build/bench/kernel_bench);
4. collective bandwidth of the local backend against memcpy, and of the MPI
   backend and Open MPI's own collectives (build/bench/comm_bench).

Prints the tables; writes build/bench/runtime.json."""
import json
import os
import re
import subprocess
import sys

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
DTPC = os.path.join(BUILD, "dtpc")
OUT = os.path.join(BUILD, "bench")
os.makedirs(OUT, exist_ok=True)
res = {}


def run(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode:
        sys.exit(f"{' '.join(args)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def step_ms(out):
    return float(re.search(r"time: ([0-9.]+) ms per step", out).group(1))


# 1. replay overhead
g = os.path.join(OUT, "replay.graph")
run([DTPC, "bench/replay.plan", "-o", g])
ops = int(re.search(r"program: (\d+) ops", run([DTPC, "inspect", g])).group(1))
ms = step_ms(run([DTPC, "run", g, "--steps", "21"]))
res["replay"] = {"ops": ops, "ms_per_step": ms, "ns_per_op": ms * 1e6 / ops}
print(f"replay overhead: {ops} ops of 4 floats, {ms:.3f} ms per step = "
      f"{ms * 1e6 / ops:.0f} ns per op (silu kernel included)")

# 2. end to end
print(f"\n{'ranks':>5} {'mesh':<28} {'ms per step':>12}   tiny DiT, seq 1024, 2 blocks, hidden 128")
res["tiny_dit"] = []
for ranks, plan, mesh in ((1, "tiny_dit_tp", "tp = 1"), (2, "tiny_dit_8", "ulysses = 2"),
                          (4, "tiny_dit_8", "ulysses = 2, tp = 2"),
                          (4, "tiny_dit_8", "ring = 4")):
    g = os.path.join(OUT, f"tiny_{ranks}.graph")
    run([DTPC, "examples/tiny_dit.plan", "--plan", plan, "--mesh", mesh, "-D", "seq=1024",
         "-o", g])
    ms = step_ms(run([DTPC, "run", g, "--steps", "11"]))
    res["tiny_dit"].append({"ranks": ranks, "mesh": mesh, "ms": ms})
    print(f"{ranks:>5} {mesh:<28} {ms:>12.2f}")

# 3. kernels
print()
out = run([os.path.join(OUT, "kernel_bench"), "--json", os.path.join(OUT, "kernels.json")])
print(out, end="")
res["kernels"] = json.load(open(os.path.join(OUT, "kernels.json")))

# 4. collectives
print()
out = run([os.path.join(OUT, "comm_bench"), "--json", os.path.join(OUT, "comm_local.json")])
print(out, end="")
res["comm_local"] = json.load(open(os.path.join(OUT, "comm_local.json")))
for n in (2, 4):
    print()
    path = os.path.join(OUT, f"comm_mpi{n}.json")
    out = run(["mpirun", "-np", str(n), "--oversubscribe", "--allow-run-as-root",
               "--mca", "btl", "self,vader", os.path.join(OUT, "comm_bench"), "--mpi",
               "--json", path])
    print(out, end="")
    res[f"comm_mpi{n}"] = json.load(open(path))
with open(os.path.join(OUT, "runtime.json"), "w") as f:
    json.dump(res, f, indent=2)
print(f"\nwrote {os.path.join(OUT, 'runtime.json')}")
