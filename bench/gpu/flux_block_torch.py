"""flux_block_torch.py — the peer of dtpc's Flux block benchmark: the model of
examples/blocks/flux.plan with one double-stream block and no single-stream block
(embedders, one FluxTransformerBlock, norm_out, proj_out), written with plain
PyTorch ops the way diffusers' FluxTransformerBlock computes it, run eagerly on
the GPU with the same sizes and dtype (random weights: only time is compared).

usage: flux_block_torch.py [--dtype f32|bf16] [--steps N]
prints: torch_eager dtype=f32 ms=...
"""
import argparse
import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--dtype", default="f32")
ap.add_argument("--steps", type=int, default=10)
a = ap.parse_args()
dt = {"f32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
# f32 GEMMs as dtpc's: full float32, no TF32
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
B, S, T, H, D = 1, 4096, 512, 24, 128
C = H * D
g = torch.Generator(device=dev).manual_seed(0)


def W(o, i):
    return (torch.rand(o, i, device=dev, generator=g, dtype=torch.float32) * 2 - 1).mul_(i ** -0.5).to(dt)


def b(o):
    return (torch.rand(o, device=dev, generator=g, dtype=torch.float32) * 0.2 - 0.1).to(dt)


def lin(x, w):
    return F.linear(x, w[0], w[1])


p = {n: (W(o, i), b(o)) for n, o, i in [
    ("x_emb", C, 64), ("ctx_emb", C, 4096), ("t1", C, 256), ("t2", C, C), ("p1", C, 768), ("p2", C, C),
    ("n1", 6 * C, C), ("n1c", 6 * C, C), ("q", C, C), ("k", C, C), ("v", C, C), ("aq", C, C), ("ak", C, C),
    ("av", C, C), ("out", C, C), ("aout", C, C), ("ff1", 4 * C, C), ("ff2", C, 4 * C), ("ffc1", 4 * C, C),
    ("ffc2", C, 4 * C), ("no", 2 * C, C), ("po", 64, C)]}
rms = {n: torch.ones(D, device=dev, dtype=dt) for n in ["q", "k", "aq", "ak"]}
hs = torch.rand(B, S, 64, device=dev, dtype=dt)
ehs = torch.rand(B, T, 4096, device=dev, dtype=dt)
pooled = torch.rand(B, 768, device=dev, dtype=dt)
tproj = torch.rand(B, 256, device=dev, dtype=dt)
cos = torch.rand(T + S, D, device=dev, dtype=dt)
sin = torch.rand(T + S, D, device=dev, dtype=dt)


def rope(x):  # [B, L, H, D], interleaved pairs
    x2 = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * cos[None, :, None, :] + x2 * sin[None, :, None, :]


def ada(temb, w, x):
    m = lin(F.silu(temb), w)[:, None, :].chunk(6, dim=-1)
    n = F.layer_norm(x, (C,), eps=1e-6) * (1 + m[1]) + m[0]
    return n, m


def heads(x):
    return x.view(B, -1, H, D)


def forward():
    img = lin(hs, p["x_emb"])
    txt = lin(ehs, p["ctx_emb"])
    temb = lin(F.silu(lin(tproj, p["t1"])), p["t2"]) + lin(F.silu(lin(pooled, p["p1"])), p["p2"])
    n1, m = ada(temb, p["n1"], img)
    n1c, mc = ada(temb, p["n1c"], txt)
    q = F.rms_norm(heads(lin(n1, p["q"])), (D,), rms["q"], 1e-6)
    k = F.rms_norm(heads(lin(n1, p["k"])), (D,), rms["k"], 1e-6)
    v = heads(lin(n1, p["v"]))
    aq = F.rms_norm(heads(lin(n1c, p["aq"])), (D,), rms["aq"], 1e-6)
    ak = F.rms_norm(heads(lin(n1c, p["ak"])), (D,), rms["ak"], 1e-6)
    av = heads(lin(n1c, p["av"]))
    q, k, v = rope(torch.cat([aq, q], 1)), rope(torch.cat([ak, k], 1)), torch.cat([av, v], 1)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    o = o.transpose(1, 2).reshape(B, T + S, C)
    img = img + m[2] * lin(o[:, T:], p["out"])
    n2 = F.layer_norm(img, (C,), eps=1e-6) * (1 + m[4]) + m[3]
    img = img + m[5] * lin(F.gelu(lin(n2, p["ff1"]), approximate="tanh"), p["ff2"])
    txt = txt + mc[2] * lin(o[:, :T], p["aout"])
    n2c = F.layer_norm(txt, (C,), eps=1e-6) * (1 + mc[4]) + mc[3]
    txt = txt + mc[5] * lin(F.gelu(lin(n2c, p["ffc1"]), approximate="tanh"), p["ffc2"])
    mo = lin(F.silu(temb), p["no"])[:, None, :].chunk(2, dim=-1)
    return lin(F.layer_norm(img, (C,), eps=1e-6) * (1 + mo[0]) + mo[1], p["po"])


with torch.no_grad():
    for _ in range(3):
        forward()
    torch.cuda.synchronize()
    ts = []
    for _ in range(a.steps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        forward()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1))
ts.sort()
print(f"torch_eager dtype={a.dtype} ms={ts[len(ts) // 2]:.3f}")
