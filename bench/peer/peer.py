#!/usr/bin/env python3
"""peer.py — dtpc beside diffusers on PyTorch's CPU backend, same model, same
weights, same inputs (run by bench/peer/run.sh, which makes the virtualenv).

The model is diffusers' FluxTransformer2DModel at a mid size (4 double + 4
single blocks, 8 heads x 64, 1024 image + 128 text tokens, float32), with the
seeded variance-preserving init of tools/gen_fixtures.py. Its weights and the
model inputs (taken inside diffusers' forward, as the fixtures do) go to
safetensors files that dtpc binds by name; bench/peer/flux_mid.plan is the same
model in dtpc's language.

Rows: one rank with 1 and 2 threads; Ulysses 2 and Ring 2 (diffusers' context
parallelism over gloo, one process per rank, one thread each; dtpc's local
backend and, where mpirun exists, its MPI backend). Each figure is the median
of 5 steps after a warm-up (dtpc: `dtpc run --steps 5`, whose median includes
its first step); a CP step is timed between barriers, the slowest rank's. Every
dtpc output is compared with diffusers' one-rank output (max |d| / max |ref|).

diffusers' context parallelism refuses the CPU as shipped; this script patches
it in memory (and says so): modeling_utils computes
`rank % torch.accelerator.device_count()`, which is 0 without a GPU, and ring
attention needs the LSE, which the native backend refuses to return.
"""

import argparse
import json
import os
import platform
import re
import statistics
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gen_fixtures as gf  # noqa: E402  (save_file, bound_weights, randomize)

PLAN = os.path.join(HERE, "flux_mid.plan")
CFG = dict(patch_size=1, in_channels=64, num_layers=4, num_single_layers=4,
           attention_head_dim=64, num_attention_heads=8, joint_attention_dim=512,
           pooled_projection_dim=256, axes_dims_rope=(16, 24, 24))
IMG_H, IMG_W, TXT = 32, 32, 128
STEPS = 5


def make_model():
    from diffusers import FluxTransformer2DModel
    torch.manual_seed(0)
    model = FluxTransformer2DModel(**CFG).eval()
    gf.randomize(model, torch.Generator().manual_seed(1))
    return model


def make_inputs():
    gen = torch.Generator().manual_seed(2)
    img_ids = torch.zeros(IMG_H, IMG_W, 3)
    img_ids[..., 1] = torch.arange(IMG_H)[:, None]
    img_ids[..., 2] = torch.arange(IMG_W)[None, :]
    return dict(
        hidden_states=torch.randn(1, IMG_H * IMG_W, CFG["in_channels"], generator=gen),
        encoder_hidden_states=torch.randn(1, TXT, CFG["joint_attention_dim"], generator=gen),
        pooled_projections=torch.randn(1, CFG["pooled_projection_dim"], generator=gen),
        timestep=torch.tensor([0.37]),
        img_ids=img_ids.reshape(-1, 3),
        txt_ids=8 * torch.rand(TXT, 3, generator=gen),
        return_dict=False)


def timed_steps(step, barrier=None):
    """Median of STEPS timed calls after one warm-up; returns (ms, output)."""
    out = step()
    times = []
    for _ in range(STEPS):
        if barrier:
            barrier()
        t0 = time.perf_counter()
        out = step()
        if barrier:
            barrier()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, out


def patch_cp_for_cpu():
    """The two in-memory patches that let diffusers' context parallelism run on
    the CPU; returns what was patched."""
    import diffusers.models.attention_dispatch as ad
    notes = []
    if torch.accelerator.device_count() == 0:
        torch.accelerator.device_count = lambda: 1
        notes.append("torch.accelerator.device_count() -> 1 (modeling_utils takes "
                     "rank % device_count(), 0 on a CPU machine)")
    native = ad._native_attention_forward_op

    def forward_op(ctx, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                   scale=None, enable_gqa=False, return_lse=False, _save_ctx=True,
                   _parallel_config=None):
        out = native(ctx, query, key, value, attn_mask, dropout_p, is_causal, scale,
                     enable_gqa, False, _save_ctx, _parallel_config)
        if not return_lse:
            return out
        # the LSE in diffusers' model layout [B, S, H], from the scores
        q, k = query.permute(0, 2, 1, 3), key.permute(0, 2, 1, 3)
        s = scale if scale is not None else q.shape[-1] ** -0.5
        lse = torch.logsumexp((q @ k.transpose(-1, -2)) * s, dim=-1)
        return out, lse.permute(0, 2, 1).contiguous()

    ad._native_attention_forward_op = forward_op
    notes.append("the native attention backend returns the LSE (computed from the "
                 "scores) where it refuses return_lse=True")
    return notes


def cp_worker(rank, mode, tmp, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    from diffusers import ContextParallelConfig
    notes = patch_cp_for_cpu()
    model = make_model()
    model.load_state_dict(torch.load(os.path.join(tmp, "state.pt")))
    cfg = ContextParallelConfig(ulysses_degree=2) if mode == "ulysses" else \
        ContextParallelConfig(ring_degree=2)
    model.enable_parallelism(config=cfg)
    inputs = make_inputs()
    with torch.no_grad():
        times, out = timed_steps(lambda: model(**inputs)[0], dist.barrier)
    t = torch.tensor(times)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        # a plain tensor: the gathered output is an async collective's
        torch.save({"ms": t.tolist(), "out": torch.from_numpy(out.numpy().copy()), "notes": notes},
                   os.path.join(tmp, f"cp_{mode}.pt"))
    dist.destroy_process_group()


def openblas_core():
    """The kernel set OpenBLAS picks in this environment (a fresh process:
    it chooses once, when it is loaded)."""
    code = ("import ctypes; f = ctypes.CDLL('libopenblas.so.0').openblas_get_corename; "
            "f.restype = ctypes.c_char_p; print(f().decode())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def load_st(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        s, e = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(b[8 + n + s:8 + n + e]), dtype=torch.float32) \
            .reshape(v["shape"])
    return out


def rel_err(got, ref):
    return ((got - ref).abs().max() / ref.abs().max()).item()


def dtpc_run(cmd, out_path, ref):
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        return None, f"failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-300:]}"
    m = re.search(r"time: ([0-9.]+) ms per step", r.stdout)
    err = rel_err(load_st(out_path)["proj_out"], ref)
    return float(m.group(1)), f"{err:.2g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtpc", default=os.path.join(ROOT, "build", "dtpc"))
    a = ap.parse_args()
    dtpc = os.path.abspath(a.dtpc)
    tmp = tempfile.mkdtemp(prefix="dtpc-peer-")
    try:
        run(dtpc, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(dtpc, tmp):
    import diffusers
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    print(f"machine: {os.cpu_count()} cores, {cpu}; {time.strftime('%Y-%m-%d')}")
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads by default), "
          f"diffusers {diffusers.__version__}; dtpc: {dtpc}")
    print(f"OpenBLAS kernels dtpc gets: {openblas_core()} (OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', 'unset')}; on a CPU OpenBLAS does not "
          f"recognise it falls back to old kernels: see docs/performance.md)")

    # --- the model, its weights and inputs for dtpc ------------------------
    model = make_model()
    inputs = make_inputs()
    cap = {}
    h1 = model.time_text_embed.timestep_embedder.register_forward_pre_hook(
        lambda m, x: cap.__setitem__("timestep_proj", x[0].detach().clone()))
    h2 = model.pos_embed.register_forward_hook(
        lambda m, x, o: cap.__setitem__("rope", (o[0].detach().clone(), o[1].detach().clone())))
    torch.set_num_threads(1)
    with torch.no_grad():
        ref = model(**inputs)[0]
    h1.remove()
    h2.remove()
    cos, sin = cap["rope"]
    names = gf.bound_weights(dtpc, PLAN, "flux_mid_tp")
    w_path, i_path = os.path.join(tmp, "w.safetensors"), os.path.join(tmp, "i.safetensors")
    sd = model.state_dict()
    gf.save_file({n: sd[n] for n in names}, w_path, {})
    gf.save_file({"hidden_states": inputs["hidden_states"],
                  "encoder_hidden_states": inputs["encoder_hidden_states"],
                  "pooled_projections": inputs["pooled_projections"],
                  "timestep_proj": cap["timestep_proj"],
                  "txt_rope_cos": cos[:TXT], "txt_rope_sin": sin[:TXT],
                  "img_rope_cos": cos[TXT:], "img_rope_sin": sin[TXT:]}, i_path, {})
    torch.save(sd, os.path.join(tmp, "state.pt"))

    # --- PyTorch -------------------------------------------------------------
    peer = {}
    for t in (1, 2):
        torch.set_num_threads(t)
        with torch.no_grad():
            ms, out = timed_steps(lambda: model(**inputs)[0])
        peer[f"1 rank, {t} thread{'s' if t > 1 else ''}"] = (statistics.median(ms), rel_err(out, ref))
    notes = []
    for i, mode in enumerate(("ulysses", "ring")):
        mp.spawn(cp_worker, args=(mode, tmp, 29500 + os.getpid() % 1000 + i), nprocs=2)
        r = torch.load(os.path.join(tmp, f"cp_{mode}.pt"))
        peer[mode] = (statistics.median(r["ms"]), rel_err(r["out"], ref))
        notes = r["notes"]
    for n in notes:
        print(f"patched diffusers in memory: {n}")

    # --- dtpc ----------------------------------------------------------------
    graphs = {}
    for key, plan, mesh in (("1", "flux_mid_tp", "tp = 1"), ("ulysses", "flux_mid_cp", "ulysses = 2"),
                            ("ring", "flux_mid_cp", "ring = 2")):
        graphs[key] = os.path.join(tmp, f"{key}.graph")
        subprocess.run([dtpc, PLAN, "--plan", plan, "--mesh", mesh, "-o", graphs[key]],
                       check=True, cwd=ROOT)
    o_path = os.path.join(tmp, "o.safetensors")
    common = ["--steps", str(STEPS), "--weights", w_path, "--inputs", i_path,
              "--save-outputs", o_path]
    mpirun = shutil.which("mpirun")
    rows = []
    for label, key in (("1 rank, 1 thread", "1"), ("1 rank, 2 threads", "1")):
        t = "1" if "1 thread" in label else "2"
        ms, err = dtpc_run([dtpc, "run", graphs[key], "--ranks", "1", "--threads", t] + common,
                           o_path, ref)
        rows.append((label, peer[label], [(f"`dtpc run --ranks 1 --threads {t}`", ms, err)]))
    for label, key in (("Ulysses 2", "ulysses"), ("Ring 2", "ring")):
        runs = [("local",) + dtpc_run([dtpc, "run", graphs[key]] + common, o_path, ref)]
        if mpirun:
            runs.append(("MPI",) + dtpc_run(
                [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", dtpc, "run",
                 graphs[key], "--backend", "mpi"] + common, o_path, ref))
        rows.append((label, peer[key], runs))

    print()
    print("| run | diffusers / PyTorch | dtpc | dtpc ÷ peer | dtpc error vs diffusers |")
    print("|---|---:|---:|---:|---:|")
    for label, (pms, perr), runs in rows:
        ok = [r for r in runs if r[1] is not None]
        d = " / ".join(f"{ms:.0f} ms ({how})" for how, ms, _ in ok) or "failed"
        ratio = " / ".join(f"{ms / pms:.2f}" for _, ms, _ in ok) or "—"
        errs = " / ".join(e for _, _, e in runs)
        print(f"| {label} | {pms:.0f} ms (error {perr:.1g}) | {d} | {ratio} | {errs} |")


if __name__ == "__main__":
    main()
