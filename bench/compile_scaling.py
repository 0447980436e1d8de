#!/usr/bin/env python3
"""compile_scaling.py BUILD — `dtpc PLAN -o GRAPH` time and graph size for
plans of 1,250 to 10,000 blocks on meshes of 8 to 1,024 ranks.

The graph stores the SPMD program once plus per-rank tables only where ranks
differ (the split patterns), so its size must grow with ops + ranks, not
ops x ranks: compare the rows of one block count across rank counts.
Writes build/bench/compile.json."""
import json
import os
import subprocess
import sys
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
DTPC = os.path.join(BUILD, "dtpc")
OUT = os.path.join(BUILD, "bench")
os.makedirs(OUT, exist_ok=True)
MESHES = {8: "ring = 2, ulysses = 2, tp = 2",
          64: "ring = 4, ulysses = 4, tp = 4",
          1024: "ring = 8, ulysses = 8, tp = 16"}

rows = []
print(f"{'blocks':>7} {'ranks':>6} {'ops':>8} {'compile ms':>11} {'graph bytes':>12} {'bytes/op':>9}")
for blocks in (1250, 2500, 5000, 10000):
    for ranks, mesh in MESHES.items():
        graph = os.path.join(OUT, "scaling.graph")
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            r = subprocess.run([DTPC, "bench/scaling_dit.plan", "--mesh", mesh,
                                "-D", f"nblocks={blocks}", "-o", graph],
                               capture_output=True, text=True)
            best = min(best, time.perf_counter() - t0)
            if r.returncode:
                sys.exit(r.stderr)
        size = os.path.getsize(graph)
        info = subprocess.run([DTPC, "inspect", graph], capture_output=True, text=True).stdout
        ops = int(info.split("program: ")[1].split(" ops")[0])
        rows.append({"blocks": blocks, "ranks": ranks, "ops": ops, "ms": best * 1e3,
                     "bytes": size})
        print(f"{blocks:>7} {ranks:>6} {ops:>8} {best * 1e3:>11.0f} {size:>12} {size / ops:>9.0f}")
with open(os.path.join(OUT, "compile.json"), "w") as f:
    json.dump(rows, f, indent=2)
print(f"wrote {os.path.join(OUT, 'compile.json')}")
