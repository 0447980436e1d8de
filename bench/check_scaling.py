#!/usr/bin/env python3
"""check_scaling.py BUILD — how long `dtpc check` takes.

1. The Flux example (every plan in the file, and the full-size plan alone).
2. Generated plans of N explicit blocks (no `repeat`, so parser, instantiation,
   rule matching and layout all see N * 12 statements), N up to 10,000: the
   time per block must stay flat if checking is linear in the plan's size.

Prints a table; writes build/bench/check.json. Times are the best of a few runs
of the whole process (start-up included), measured with time.perf_counter."""
import json
import os
import subprocess
import sys
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
DTPC = os.path.join(BUILD, "dtpc")
OUT = os.path.join(BUILD, "bench")
os.makedirs(OUT, exist_ok=True)


def best_of(args, runs=5):
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        dt = time.perf_counter() - t0
        if r.returncode != 0:
            sys.exit(f"{' '.join(args)} failed ({r.returncode}):\n{r.stderr.decode()}")
        best = min(best, dt)
    return best


BLOCK = """  norm1_{i}         = layer_norm(hidden_states);
  blocks.{i}.attn.to_q     = linear(norm1_{i}, hidden);
  blocks.{i}.attn.to_k     = linear(norm1_{i}, hidden);
  blocks.{i}.attn.to_v     = linear(norm1_{i}, hidden);
  blocks.{i}.attn          = attention(blocks.{i}.attn.to_q, blocks.{i}.attn.to_k, blocks.{i}.attn.to_v, heads = heads);
  blocks.{i}.attn.to_out.0 = linear(blocks.{i}.attn, hidden);
  h{i}a                    = add(h{p}, blocks.{i}.attn.to_out.0);
  norm2_{i}                = layer_norm(h{i}a);
  blocks.{i}.ff.net.0.proj = linear(norm2_{i}, ffn);
  blocks.{i}.ff.act        = gelu(blocks.{i}.ff.net.0.proj, approximate = "tanh");
  blocks.{i}.ff.net.2      = linear(blocks.{i}.ff.act, hidden);
  h{i}                     = add(h{i}a, blocks.{i}.ff.net.2);
"""


def generate(n):
    """A flat DiT of n blocks. The residual stream is renamed each block
    (h0, h1, ...) since a top-level name is assigned once."""
    lines = ["model flat(batch = 1, seq = 1024, hidden = 128, heads = 8, ffn = 512) {",
             "  input h_in : [batch, seq, hidden];",
             "  h_start = add(h_in, h_in);"]
    for i in range(n):
        blk = BLOCK.format(i=i, p=(i - 1) if i else "_start")
        blk = blk.replace("layer_norm(hidden_states)", f"layer_norm(h{(i - 1) if i else '_start'})")
        lines.append(blk)
    lines += [f"  proj_out = linear(h{n - 1}, hidden);", "  output proj_out;", "}",
              "plan flat_8 {",
              "  model flat;",
              "  mesh ring = 2, ulysses = 2, tp = 2;",
              '  "blocks.*.attn.to_{q,k,v}" : colwise;',
              '  "blocks.*.attn.to_out.0"   : rowwise;',
              '  "blocks.*.ff.net.0.proj"   : colwise;',
              '  "blocks.*.ff.net.2"        : rowwise;',
              '  "blocks.*.attn"            : ulysses, ring;',
              '  ""                         : split(h_in, dim = 1);',
              '  "proj_out"                 : gather(dim = 1);',
              "}"]
    path = os.path.join(OUT, f"flat_{n}.plan")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path, os.path.getsize(path)


results = {"flux": {}, "scaling": []}
flux_all = best_of([DTPC, "check", "examples/flux.plan", "-q"])
results["flux"]["all_plans_ms"] = flux_all * 1e3
print(f"dtpc check examples/flux.plan (all plans): {flux_all * 1e3:.1f} ms")
one = best_of([DTPC, "check", "examples/flux.plan", "--plan", "flux_ring2_ulysses2_tp2", "-q"])
results["flux"]["one_plan_ms"] = one * 1e3
print(f"dtpc check examples/flux.plan --plan flux_ring2_ulysses2_tp2 (19 + 38 blocks): {one * 1e3:.1f} ms")
startup = best_of([DTPC, "--version"])
print(f"process start-up (dtpc --version):        {startup * 1e3:.1f} ms")
results["startup_ms"] = startup * 1e3

print(f"\n{'blocks':>7} {'statements':>10} {'bytes':>10} {'check ms':>9} {'us/block':>9}")
for n in (625, 1250, 2500, 5000, 10000):
    path, size = generate(n)
    t = best_of([DTPC, "check", path, "-q"], runs=3)
    row = {"blocks": n, "statements": n * 12 + 4, "bytes": size, "ms": t * 1e3,
           "us_per_block": t * 1e6 / n}
    results["scaling"].append(row)
    print(f"{n:>7} {row['statements']:>10} {size:>10} {t * 1e3:>9.1f} {row['us_per_block']:>9.1f}")

# The same through `repeat`: instantiation and checks without the parser.
print(f"\n{'repeat':>7} {'check ms':>9} {'us/block':>9}   (examples/tiny_dit.plan, -D nblocks)")
results["repeat"] = []
src = open("examples/tiny_dit.plan").read()
src = src.replace("ffn = 512)", "ffn = 512, nblocks = 2)").replace("repeat blocks[2]", "repeat blocks[nblocks]")
rep = os.path.join(OUT, "tiny_dit_repeat.plan")
with open(rep, "w") as f:
    f.write(src)
for n in (625, 1250, 2500, 5000, 10000):
    t = best_of([DTPC, "check", rep, "--plan", "tiny_dit_8", "-q", "-D", f"nblocks={n}"], runs=3)
    results["repeat"].append({"blocks": n, "ms": t * 1e3, "us_per_block": t * 1e6 / n})
    print(f"{n:>7} {t * 1e3:>9.1f} {t * 1e6 / n:>9.1f}")

with open(os.path.join(OUT, "check.json"), "w") as f:
    json.dump(results, f, indent=2)
print(f"\nwrote {os.path.join(OUT, 'check.json')}")
