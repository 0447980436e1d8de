#!/usr/bin/env python3
"""gen_fixtures.py — real-model fixtures for tests/fixtures.sh, made by diffusers.

Run by hand (CI has no torch; the outputs are committed):

    python3 -m venv /tmp/dvenv
    /tmp/dvenv/bin/pip install torch diffusers safetensors numpy
    make -j2 && /tmp/dvenv/bin/python tools/gen_fixtures.py [--dtpc build/dtpc]

For each model (diffusers' FluxTransformer2DModel and WanTransformer3DModel at
the tiny configurations diffusers' own tests use) it builds the model with a
seeded random init (torch.manual_seed, then `randomize`: variance-preserving
Linear weights and perturbed norm weights, so that every op shows in the
output), runs diffusers' own forward in float32 on CPU (one thread), and writes
into tests/fixtures/:

  MODEL.weights.safetensors   the state_dict entries that dtpc's model binds,
                              under diffusers' names (the list comes from the
                              compiled graph: `dtpc inspect`), float32;
  MODEL.inputs.safetensors    dtpc's model inputs, taken from inside diffusers'
                              forward with hooks where dtpc takes precomputed
                              tensors (Timesteps(256) output, the RoPE cos/sin
                              tables, Wan's patch-embedded tokens);
  MODEL.expected.safetensors  diffusers' output of the step dtpc's model ends
                              with (`proj_out`, before Wan's unpatchify; Flux
                              has no unpatchify in the transformer).

The metadata of each file records the diffusers / torch versions and the seed.
"""

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import torch
import diffusers
from diffusers import FluxTransformer2DModel, WanTransformer3DModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTDIR = os.path.join(ROOT, "tests", "fixtures")
SEED = 0


def meta(extra):
    m = {
        "generator": "tools/gen_fixtures.py",
        "diffusers": diffusers.__version__,
        "torch": torch.__version__,
        "seed": str(SEED),
    }
    m.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in extra.items()})
    return m


def save_file(tensors, path, metadata):
    """safetensors, float32, written byte-for-byte reproducibly (the safetensors
    package orders the metadata at random): tensors and metadata in name order,
    the header padded with spaces to a multiple of 8."""
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, off = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous().cpu()
        b = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bound_weights(dtpc, plan_file, plan):
    """Names and full shapes of the weights dtpc's model binds: compile the plan
    at one rank and read the weight list of `dtpc inspect`."""
    with tempfile.TemporaryDirectory() as d:
        g = os.path.join(d, "g.graph")
        subprocess.run([dtpc, plan_file, "--plan", plan, "--mesh", "tp = 1", "-o", g],
                       check=True, cwd=ROOT)
        out = subprocess.run([dtpc, "inspect", g], check=True, cwd=ROOT,
                             capture_output=True, text=True).stdout
    names = {}
    on = False
    for line in out.splitlines():
        if line.startswith("  weights"):
            on = True
            continue
        if on:
            m = re.match(r"^    (\S+)\s+\[([0-9, ]*)\]", line)
            if not m:
                break
            names[m.group(1)] = [int(x) for x in m.group(2).split(",") if x.strip()]
    if not names:
        sys.exit("no weights found in `dtpc inspect` output")
    return names


def randomize(model, gen):
    """Re-draw the parameters so that every part of the model shows in the output.

    PyTorch's default Linear init (uniform, std 1/sqrt(3 in)) makes the AdaLN gates
    of a tiny untrained model so small (~0.05) that the blocks barely touch the
    residual stream; a trained model's are of order 1. Linear weights are drawn
    N(0, 1/in) (variance-preserving), biases N(0, 0.1^2). RMSNorm / LayerNorm
    affine weights start at 1 (bias 0): they are made 1 + N(0, 0.2^2) (bias
    N(0, 0.2^2)) so that a norm weight bound to the wrong tensor, or not bound,
    is visible. Other parameters (Wan's scale_shift_table) keep diffusers' init."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear):
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen) / mod.in_features ** 0.5)
                if mod.bias is not None:
                    mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=gen))
            if isinstance(mod, (torch.nn.RMSNorm, torch.nn.LayerNorm)):
                if getattr(mod, "weight", None) is not None:
                    mod.weight.copy_(1 + 0.2 * torch.randn(mod.weight.shape, generator=gen))
                if getattr(mod, "bias", None) is not None:
                    mod.bias.copy_(0.2 * torch.randn(mod.bias.shape, generator=gen))


def save_weights(model, names, path, extra):
    sd = model.state_dict()
    out = {}
    for n, shape in names.items():
        if n not in sd:
            sys.exit(f"dtpc binds '{n}', which diffusers' state_dict does not have")
        t = sd[n].detach().to(torch.float32).contiguous()
        if list(t.shape) != shape:
            sys.exit(f"'{n}': dtpc wants {shape}, diffusers has {list(t.shape)}")
        out[n] = t
    save_file(out, path, metadata=meta(extra))
    unbound = sorted(k for k in sd if k not in names)
    return unbound


def gen_flux(dtpc):
    cfg = dict(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
               attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
               pooled_projection_dim=32, axes_dims_rope=(4, 4, 8))
    img_h, img_w, txt_seq = 4, 4, 48
    torch.manual_seed(SEED)
    model = FluxTransformer2DModel(**cfg).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    randomize(model, gen)

    hidden_states = torch.randn(1, img_h * img_w, cfg["in_channels"], generator=gen)
    encoder_hidden_states = torch.randn(1, txt_seq, cfg["joint_attention_dim"], generator=gen)
    pooled_projections = torch.randn(1, cfg["pooled_projection_dim"], generator=gen)
    timestep = torch.tensor([0.37])
    # img_ids as the pipeline makes them (0, row, col); txt_ids random positions
    # (the pipeline uses zeros, which would leave the text's RoPE untested)
    img_ids = torch.zeros(img_h, img_w, 3)
    img_ids[..., 1] = torch.arange(img_h)[:, None]
    img_ids[..., 2] = torch.arange(img_w)[None, :]
    img_ids = img_ids.reshape(-1, 3)
    txt_ids = 8 * torch.rand(txt_seq, 3, generator=gen)

    cap = {}
    h1 = model.time_text_embed.timestep_embedder.register_forward_pre_hook(
        lambda m, a: cap.__setitem__("timestep_proj", a[0].detach().clone()))
    h2 = model.pos_embed.register_forward_hook(
        lambda m, a, o: cap.__setitem__("rope", (o[0].detach().clone(), o[1].detach().clone())))
    with torch.no_grad():
        out = model(hidden_states=hidden_states, encoder_hidden_states=encoder_hidden_states,
                    pooled_projections=pooled_projections, timestep=timestep,
                    img_ids=img_ids, txt_ids=txt_ids, return_dict=False)[0]
    h1.remove()
    h2.remove()
    cos, sin = cap["rope"]  # [txt + img, head_dim], interleaved (repeat_interleave_real)
    inputs = {
        "hidden_states": hidden_states,
        "encoder_hidden_states": encoder_hidden_states,
        "pooled_projections": pooled_projections,
        "timestep_proj": cap["timestep_proj"],
        "txt_rope_cos": cos[:txt_seq],
        "txt_rope_sin": sin[:txt_seq],
        "img_rope_cos": cos[txt_seq:],
        "img_rope_sin": sin[txt_seq:],
    }
    extra = {"model": "FluxTransformer2DModel", "config": cfg, "timestep": timestep.tolist(),
             "plan": "tests/fixtures/flux.plan"}
    names = bound_weights(dtpc, "tests/fixtures/flux.plan", "flux_fixture_tp")
    unbound = save_weights(model, names, os.path.join(OUTDIR, "flux.weights.safetensors"), extra)
    save_file({k: v.float().contiguous() for k, v in inputs.items()},
              os.path.join(OUTDIR, "flux.inputs.safetensors"), metadata=meta(extra))
    save_file({"proj_out": out.float().contiguous()},
              os.path.join(OUTDIR, "flux.expected.safetensors"), metadata=meta(extra))
    print(f"flux: {len(names)} weights, output {list(out.shape)}, max |out| "
          f"{out.abs().max().item():.4g}; not bound by dtpc: {unbound or 'none'}")


def gen_wan(dtpc):
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
               in_channels=4, out_channels=4, text_dim=16, freq_dim=256, ffn_dim=32,
               num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
               rope_max_seq_len=32)
    frames, height, width, txt_seq = 2, 16, 16, 12
    torch.manual_seed(SEED)
    model = WanTransformer3DModel(**cfg).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    randomize(model, gen)

    x = torch.randn(1, cfg["in_channels"], frames, height, width, generator=gen)
    encoder_hidden_states = torch.randn(1, txt_seq, cfg["text_dim"], generator=gen)
    timestep = torch.tensor([637])

    cap = {}
    hooks = [
        model.condition_embedder.time_embedder.register_forward_pre_hook(
            lambda m, a: cap.__setitem__("timestep_proj_in", a[0].detach().clone())),
        model.rope.register_forward_hook(
            lambda m, a, o: cap.__setitem__("rope", (o[0].detach().clone(), o[1].detach().clone()))),
        model.blocks[0].register_forward_pre_hook(
            lambda m, a: cap.__setitem__("hidden_states", a[0].detach().clone())),
        model.proj_out.register_forward_hook(
            lambda m, a, o: cap.__setitem__("proj_out", o.detach().clone())),
    ]
    with torch.no_grad():
        model(hidden_states=x, timestep=timestep, encoder_hidden_states=encoder_hidden_states,
              return_dict=False)
    for h in hooks:
        h.remove()
    cos, sin = cap["rope"]  # [1, S, 1, head_dim]
    seq = cos.shape[1]
    inputs = {
        "hidden_states": cap["hidden_states"],
        "encoder_hidden_states": encoder_hidden_states,
        "timestep_proj_in": cap["timestep_proj_in"],
        "rope_cos": cos.reshape(seq, -1),
        "rope_sin": sin.reshape(seq, -1),
    }
    out = cap["proj_out"]
    extra = {"model": "WanTransformer3DModel", "config": cfg, "timestep": timestep.tolist(),
             "latents": [1, cfg["in_channels"], frames, height, width],
             "plan": "tests/fixtures/wan.plan"}
    names = bound_weights(dtpc, "tests/fixtures/wan.plan", "wan_fixture_tp")
    unbound = save_weights(model, names, os.path.join(OUTDIR, "wan.weights.safetensors"), extra)
    save_file({k: v.float().contiguous() for k, v in inputs.items()},
              os.path.join(OUTDIR, "wan.inputs.safetensors"), metadata=meta(extra))
    save_file({"proj_out": out.float().contiguous()},
              os.path.join(OUTDIR, "wan.expected.safetensors"), metadata=meta(extra))
    print(f"wan: {len(names)} weights, output {list(out.shape)}, max |out| "
          f"{out.abs().max().item():.4g}; not bound by dtpc: {unbound or 'none'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtpc", default=os.path.join(ROOT, "build", "dtpc"))
    ap.add_argument("models", nargs="*", default=["flux", "wan"])
    a = ap.parse_args()
    torch.set_num_threads(1)  # one deterministic reduction order
    os.makedirs(OUTDIR, exist_ok=True)
    for m in a.models:
        {"flux": gen_flux, "wan": gen_wan}[m](os.path.abspath(a.dtpc))


if __name__ == "__main__":
    main()
