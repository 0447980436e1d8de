#!/usr/bin/env python3
"""ltx_rope_vs_torch.py [BUILD] — dtpc's ltx_rope_freqs against diffusers'
LTXVideoRotaryPosEmbed at real widths (run by hand: torch and diffusers; CI
has no torch, and the models fixtures only reach widths of 36).

For each configuration, compiles a one-op plan, runs it with `BUILD/dtpc
run` and prints the largest difference of the cos and sin tables from
diffusers' (torch on this CPU, one thread) and how many entries differ.
Measured (torch 2.15, AVX-512): up to width 96 (16 frequencies) the tables
are within an ulp of torch's (its vectorised sin and cos); at LTX-Video's
widths torch's vectorised float32 pow is an ulp off the correctly rounded
one on a few frequencies (4 of 341 at width 2048), which moves those
columns by up to 2.4e-4 (1e-3 at width 3072; docs/models.md, "Precision").
"""
import os
import subprocess
import sys
import tempfile

import torch
from diffusers.models.transformers.transformer_ltx import LTXVideoRotaryPosEmbed
from safetensors.torch import load_file, save_file

PLAN = """model r(dim = 2048, F = 3, H = 16, W = 24, st = 0.32, ss = 32, pt = 1, p = 1) {
  input x : [1];
  ids = grid_ids(F, H, W);
  c   = ltx_rope_freqs(ids, dim, st, ss, ss, patch_t = pt, patch = p, part = "cos");
  s   = ltx_rope_freqs(ids, dim, st, ss, ss, patch_t = pt, patch = p, part = "sin");
  y   = add(x, x);
  output c, s, y;
}

plan r1 {
  model r;
}
"""

CASES = [  # dim, frames, height, width, scale_t, scale_hw, patch_t, patch
    (2048, 3, 16, 24, 8 / 25, 32, 1, 1),  # LTX-Video 2B
    (4096, 2, 8, 8, 8 / 24, 32, 1, 1),
    (3072, 4, 6, 6, 8 / 25, 32, 1, 1),
    (96, 5, 7, 3, 8 / 25, 32, 1, 1),  # 16 frequencies
    (36, 2, 3, 5, 8 / 24, 32, 2, 2),  # the ltx_odd fixture
    (32, 2, 3, 4, 8 / 25, 32, 1, 1),  # the ltx fixture
]


def main():
    dtpc = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "dtpc")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        plan, graph = os.path.join(tmp, "r.plan"), os.path.join(tmp, "r.graph")
        inp, out = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
        open(plan, "w").write(PLAN)
        save_file({"x": torch.zeros(1)}, inp)
        for dim, F, H, W, st, ss, pt, p in CASES:
            d = [f"dim={dim}", f"F={F}", f"H={H}", f"W={W}", f"st={st!r}", f"ss={ss}",
                 f"pt={pt}", f"p={p}"]
            subprocess.run([dtpc, plan, "--plan", "r1", *sum((["-D", x] for x in d), []),
                            "-o", graph], check=True, capture_output=True)
            subprocess.run([dtpc, "run", graph, "--inputs", inp, "--save-outputs", out],
                           check=True, capture_output=True)
            o = load_file(out)
            cos, sin = LTXVideoRotaryPosEmbed(dim, patch_size=p, patch_size_t=pt)(
                torch.zeros(1, F * H * W, dim), F, H, W, (st, ss, ss))
            dc = (o["c"] - cos[0]).abs().max().item()
            ds = (o["s"] - sin[0]).abs().max().item()
            n = int((o["c"] != cos[0]).sum() + (o["s"] != sin[0]).sum())
            print(f"dim {dim:5d} grid {F} x {H} x {W} scale ({st:.4g}, {ss}, {ss}) patch "
                  f"({pt}, {p}): max |d cos| {dc:.3g}, |d sin| {ds:.3g}; {n} of "
                  f"{2 * cos[0].numel()} entries differ")


if __name__ == "__main__":
    main()
