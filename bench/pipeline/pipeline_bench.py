#!/usr/bin/env python3
"""pipeline_bench.py — a FluxPipeline's denoising step through dtpc.torch beside
the stock pipeline on the same CPU, in one run (run by bench/run.sh with the
project venv; needs torch and diffusers).

The pipeline is diffusers' FluxPipeline around the mid-size Flux transformer of
bench/peer (4 double + 4 single blocks, 8 heads x 64, 512 x 512 pixels: 1024
image + 128 text tokens, float32, the seeded init of tools/gen_fixtures.py), no
text encoders (prompt embeds passed in), no VAE (output_type="latent"). A step
is timed from one callback_on_step_end to the next (the transformer, the
scheduler and the pipeline's own work between them); the figure is the median
over steps 2..N (step 1 compiles and binds).

Rows: the configurations a CPU user would pick — one rank with every core
(dtpc's default threads), one rank with one thread, and two ranks of one
thread each (Ulysses 2, Ring 2, TP 2). Each dtpc row is set against the stock pipeline
given the same cores (torch.set_num_threads), timed right before it (the
machine's load drifts: a ratio means something only between neighbours).
Every dtpc run's latents are compared with the stock pipeline's (max |d| /
max |ref|); above 1e-4 the script exits 1. It also counts (dtpc.stats) that
steps 2..N compile nothing and bind no weight.

--dtype bf16: the transformer in bf16 on both sides (the stock pipeline after
.to(torch.bfloat16), dtpc computing in bf16), latents within 2e-2 (the tolerance
of tests/pipelines.py's bf16 comparisons).

The Python overhead: the same graph (compile_cached's entry), the same weights
and the inputs dtpc.torch handed the graph at its last step, under
`dtpc run --steps`: the step through the pipeline against the program's.
"""

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

CFG = dict(patch_size=1, in_channels=64, num_layers=4, num_single_layers=4,
           attention_head_dim=64, num_attention_heads=8, joint_attention_dim=512,
           pooled_projection_dim=256, axes_dims_rope=(16, 24, 24))
PIXELS, TXT = 512, 128  # 512 / 8 (VAE) / 2 (packing) = 32 x 32 = 1024 image tokens
TOLERANCE = {"f32": 1e-4, "bf16": 2e-2}  # tests/pipelines.py's, for its reasons

CORES = os.cpu_count()
# (label, dtpc.torch arguments, threads the stock pipeline gets). The first row
# takes dtpc's default threads, which is every core for one rank.
CONFIGS = [
    (f"1 rank, all {CORES} cores", dict(plan="flux_tp", mesh="tp = 1"), CORES),
    ("1 rank, 1 thread", dict(plan="flux_tp", mesh="tp = 1", threads=1), 1),
    ("Ulysses 2 × 1 thread", dict(plan="flux_ulysses", mesh="ulysses = 2", threads=1), 2),
    ("Ring 2 × 1 thread", dict(plan="flux_ring", mesh="ring = 2", threads=1), 2),
    ("TP 2 × 1 thread", dict(plan="flux_tp", mesh="tp = 2", threads=1), 2),
]
CONFIGS = [c for c in CONFIGS if c[2] <= CORES]  # two ranks want two cores


def make_pipe(dtype):
    import diffusers as d
    import gen_fixtures as gf
    torch.manual_seed(0)
    tr = d.FluxTransformer2DModel(**CFG).eval()
    gf.randomize(tr, torch.Generator().manual_seed(1))
    tr.to(dtype)
    pipe = d.FluxPipeline(scheduler=d.FlowMatchEulerDiscreteScheduler(), vae=None,
                          text_encoder=None, tokenizer=None, text_encoder_2=None,
                          tokenizer_2=None, transformer=tr)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def call_kwargs(steps, dtype):
    gen = torch.Generator().manual_seed(2)
    return dict(prompt_embeds=torch.randn(1, TXT, CFG["joint_attention_dim"],
                                          generator=gen).to(dtype),
                pooled_prompt_embeds=torch.randn(1, CFG["pooled_projection_dim"],
                                                 generator=gen).to(dtype),
                height=PIXELS, width=PIXELS, num_inference_steps=steps, output_type="latent",
                return_dict=False)


def timed_pipeline(pipe, steps, after_first=None):
    dtype = pipe.transformer.dtype
    """(latents, ms of steps 2..N): each step from one step-end callback to the
    next; after_first runs between steps 1 and 2 (outside the timing)."""
    stamps = []

    def cb(p, i, t, kw):
        if i == 0 and after_first:
            after_first()
        stamps.append(time.perf_counter())
        return {}
    with torch.no_grad():
        out = pipe(**call_kwargs(steps, dtype), generator=torch.Generator().manual_seed(3),
                   callback_on_step_end=cb)[0]
    return out.float(), [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]


def rel_err(got, ref):
    return ((got - ref).abs().max() / ref.abs().max()).item()


def dtpc_row(pipe, stock, steps, opts, cache_dir):
    """One dtpc configuration: (latents, step ms, dtpc.stats of steps 2..N, the
    DtpcTransformer, the inputs its graph was given at the last step)."""
    import dtpc
    import dtpc.torch
    dtpc.torch.parallelize(pipe, keep_weights=True, cache_dir=cache_dir, **opts)
    dt = pipe.transformer
    last = {}

    def after_first():
        dtpc.reset_stats()
        # the session exists now (step 1 made it): keep what each run is given
        # (a reference to a dict built for the call, no copy)
        (ranks,) = dt._sessions.values()
        run = ranks.run
        ranks.run = lambda inputs, **kw: last.update(inputs) or run(inputs, **kw)
    try:
        out, ms = timed_pipeline(pipe, steps, after_first)
        return out, ms, dict(dtpc.stats), dt, last
    finally:
        pipe.transformer = stock


def program_step(dtpc_bin, dt, inputs, threads, steps, tmp):
    """`dtpc run --steps` of the graph dtpc.torch ran, its weights and inputs:
    the program's median ms per step (at least 5 steps: its median counts its
    first step)."""
    import gen_fixtures as gf
    (ranks,) = dt._sessions.values()
    w_path, i_path = os.path.join(tmp, "w.safetensors"), os.path.join(tmp, "i.safetensors")
    if not os.path.exists(w_path):
        gf.save_file({n: dt._weights[n].float().contiguous() for n in ranks.graph.weights},
                     w_path, {})
    gf.save_file({n: (a if torch.is_tensor(a) else torch.from_numpy(a)).float().contiguous()
                  for n, a in inputs.items()}, i_path, {})
    r = subprocess.run([dtpc_bin, "run", ranks.graph.path, "--ranks", str(ranks.world),
                        "--threads", str(threads), "--steps", str(max(steps, 5)),
                        "--weights", w_path, "--inputs", i_path],
                       capture_output=True, text=True, cwd=ROOT)
    m = re.search(r"time: ([0-9.]+) ms per step", r.stdout)
    if r.returncode or not m:
        raise SystemExit(f"dtpc run failed ({r.returncode}): {(r.stderr or r.stdout)[-300:]}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=6, help="denoising steps per run (first: warm-up)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="times each row is measured, interleaved; its median is shown")
    ap.add_argument("--only", help="run only the rows whose label contains this")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32",
                    help="the transformer's dtype, stock and dtpc's (dtpc computes in it)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.environ["DTPC_BUILD"] = build
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # diffusers' import: no torchvision
    import diffusers

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    print(f"machine: {os.cpu_count()} cores, {cpu}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"torch {torch.__version__}, diffusers {diffusers.__version__}; dtpc: {build}; "
          f"FluxPipeline, mid-size Flux in {a.dtype}, {PIXELS}x{PIXELS} ({(PIXELS // 16) ** 2} image + {TXT} "
          f"text tokens), {a.steps} steps, median of steps 2..{a.steps}, {a.rounds} round(s)")
    configs = [c for c in CONFIGS if not a.only or a.only in c[0]]
    pipe = make_pipe(torch.bfloat16 if a.dtype == "bf16" else torch.float32)
    stock = pipe.transformer
    results = {c[0]: {"stock": [], "dtpc": [], "program": [], "err": 0.0, "stats": []}
               for c in configs}
    failures = []
    with tempfile.TemporaryDirectory(prefix="dtpc-pipeline-") as tmp:
        for rnd in range(a.rounds):
            for label, opts, threads in configs:
                res = results[label]
                torch.set_num_threads(threads)
                ref, ms = timed_pipeline(pipe, a.steps)
                res["stock"].append(statistics.median(ms))
                out, ms, counted, dt, inputs = dtpc_row(pipe, stock, a.steps, opts,
                                                       os.path.join(tmp, "cache"))
                res["dtpc"].append(statistics.median(ms))
                res["err"] = max(res["err"], rel_err(out, ref))
                res["stats"].append(counted)
                if "1 rank" in label:
                    res["program"].append(program_step(build + "/dtpc", dt, inputs,
                                                       opts.get("threads", CORES), a.steps, tmp))
                dt.close()
                print(f"  round {rnd + 1}, {label}: stock {res['stock'][-1]:.0f} ms, "
                      f"dtpc {res['dtpc'][-1]:.0f} ms"
                      + (f", dtpc run {res['program'][-1]:.0f} ms" if res["program"] else ""),
                      flush=True)

    print()
    print("| configuration | diffusers (same cores) | dtpc.torch | dtpc ÷ diffusers | "
          "`dtpc run --steps` | Python overhead | steps 2..N: compiles, weight binds, "
          "sessions | error vs diffusers |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for label, opts, threads in configs:
        res = results[label]
        s, d = statistics.median(res["stock"]), statistics.median(res["dtpc"])
        prog = f"{statistics.median(res['program']):.0f} ms" if res["program"] else "—"
        over = f"{(d / statistics.median(res['program']) - 1) * 100:+.0f} %" \
            if res["program"] else "—"
        c = [(st["compiles"] + st["cache_memory_hits"] + st["cache_disk_hits"],
              st["weight_binds"], st["sessions"]) for st in res["stats"]]
        worst = max(c)
        print(f"| {label} ({threads} thread{'s' if threads > 1 else ''} for diffusers) | "
              f"{s:.0f} ms | {d:.0f} ms | {d / s:.2f} | {prog} | {over} | "
              f"{worst[0]}, {worst[1]}, {worst[2]} | {res['err']:.1g} |")
        if res["err"] > TOLERANCE[a.dtype]:
            failures.append(f"{label}: latents {res['err']:.2g} from diffusers' "
                            f"(> {TOLERANCE[a.dtype]:g})")
        if worst != (0, 0, 0):
            failures.append(f"{label}: steps 2..N compiled, bound or opened something: {worst}")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
