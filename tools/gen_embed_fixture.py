#!/usr/bin/env python3
"""gen_embed_fixture.py — diffusers' own embeddings, for dtpc's embedding ops.

Run by hand (CI has no torch; the outputs are committed):

    /tmp/peer-venv/bin/python tools/gen_embed_fixture.py

(any Python with torch, diffusers and safetensors). It evaluates, in float32
on the CPU, the pieces of FluxTransformer2DModel, WanTransformer3DModel and
QwenImageTransformer2DModel that dtpc's ops timestep_embedding, rope_freqs,
grid_ids, text_ids, patch_embed and unpatchify compute, through diffusers'
own classes and functions (Timesteps, get_timestep_embedding, FluxPosEmbed,
WanRotaryPosEmbed, QwenEmbedRope, Conv3d as WanTransformer3DModel builds it,
the unpatchify of its forward), and writes into tests/fixtures/:

  embed.inputs.safetensors    the inputs of tests/fixtures/embed.plan;
  embed.weights.safetensors   the patch embeddings' Conv3d weights;
  embed.expected.safetensors  diffusers' results, named as the plan's
                              outputs, in dtpc's layout (RoPE tables
                              [S, sum(axes_dim)] with each rotation pair's
                              value twice, as diffusers' use_real tables);
  embed.rounded.safetensors   the timestep projections again, by the same
                              diffusers code with torch.exp, sin and cos
                              correctly rounded (computed in float64, then
                              rounded to float32): torch's own float32 exp
                              (vectorised, within 1 ulp) misses the correctly
                              rounded value at a few frequencies, which
                              angles of up to 1000 rad (t * 1000) magnify to
                              ~3e-5; dtpc computes the correctly rounded
                              value, so it equals this file exactly.

Positions have no tensor of their own in diffusers (Wan and QwenImage build
them inside): the expected grids are the same index selections applied to
position counters instead of tables (QwenEmbedRope's neg/pos index
concatenation for scale_rope). The metadata records the versions.
"""

import json
import os
import types

import torch
import diffusers
from diffusers.models.embeddings import Timesteps, get_timestep_embedding
from diffusers.models.transformers.transformer_flux import FluxPosEmbed
from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope
from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures")
SEED = 0


def interleave(x):
    """[S, D/2] -> [S, D]: each value twice, as repeat_interleave_real."""
    return x.repeat_interleave(2, dim=1).float().contiguous()


def rounded_torch():
    """torch, but exp, sin and cos of float32 computed in float64 and
    rounded once: the correctly rounded float32 functions."""
    t = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
    for fn in ("exp", "sin", "cos"):
        f = getattr(torch, fn)
        setattr(t, fn, lambda x, f=f: f(x.double()).to(x.dtype))
    return t


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    f32 = torch.float32
    inputs, weights, expected = {}, {}, {}

    # ---- timestep projections -------------------------------------------------
    sigma = torch.tensor([0.0, 0.2513, 0.9173, 1.0], dtype=f32)  # Flux, QwenImage
    t_wan = torch.tensor([999.0, 500.25, 37.5, 1.0], dtype=f32)   # Wan's timesteps
    inputs["sigma"], inputs["t_wan"] = sigma, t_wan
    # Flux: timestep.to(dtype) * 1000, then Timesteps(256, True, 0)
    expected["flux_t"] = Timesteps(256, True, 0)(sigma.to(f32) * 1000)
    # QwenImage: Timesteps(256, True, 0, scale=1000)
    expected["qwen_t"] = Timesteps(256, True, 0, scale=1000)(sigma)
    # Wan: Timesteps(freq_dim, True, 0)
    expected["wan_t"] = Timesteps(256, True, 0)(t_wan)
    # the defaults, an odd width and the other parameters
    expected["odd_t"] = get_timestep_embedding(t_wan, 7)
    expected["odd2_t"] = get_timestep_embedding(t_wan, 9, flip_sin_to_cos=False,
                                                downscale_freq_shift=1, scale=2.5,
                                                max_period=500)

    # the same code with correctly rounded exp / sin / cos
    import diffusers.models.embeddings as emb
    real, emb.torch = emb.torch, rounded_torch()
    try:
        rounded = {
            "flux_t": Timesteps(256, True, 0)(sigma.to(f32) * 1000),
            "qwen_t": Timesteps(256, True, 0, scale=1000)(sigma),
            "wan_t": Timesteps(256, True, 0)(t_wan),
        }
    finally:
        emb.torch = real

    # ---- Flux: FluxPosEmbed over cat(txt_ids, img_ids) ------------------------
    h, w = 6, 8
    img_ids = torch.zeros(h, w, 3)
    img_ids[..., 1] += torch.arange(h)[:, None]
    img_ids[..., 2] += torch.arange(w)[None, :]
    img_ids = img_ids.reshape(h * w, 3)
    txt_ids = torch.rand(5, 3) * 50  # zeros in the pipeline: any float works
    inputs["img_ids"], inputs["txt_ids"] = img_ids, txt_ids
    cos, sin = FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])(torch.cat((txt_ids, img_ids), 0))
    expected["flux_cos"], expected["flux_sin"] = cos, sin

    # ---- Wan: WanRotaryPosEmbed(128, (1, 2, 2), 1024) on a [1, 16, 3, 8, 10] latent
    rope = WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    cos, sin = rope(torch.zeros(1, 16, 3, 8, 10))
    expected["wan_cos"] = cos.reshape(3 * 4 * 5, 128)
    expected["wan_sin"] = sin.reshape(3 * 4 * 5, 128)
    f, hh, ww = torch.meshgrid(torch.arange(3), torch.arange(4), torch.arange(5), indexing="ij")
    expected["wan_grid"] = torch.stack([f, hh, ww], -1).reshape(-1, 3).to(f32)

    # ---- QwenImage: QwenEmbedRope(10000, [16, 56, 56], scale_rope=True) -------
    F, H, W, T = 1, 7, 8, 9
    qrope = QwenEmbedRope(theta=10000, axes_dim=[16, 56, 56], scale_rope=True)
    vid, txt = qrope([(F, H, W)], max_txt_seq_len=T, device=torch.device("cpu"))
    expected["qwen_vid_cos"], expected["qwen_vid_sin"] = interleave(vid.real), interleave(vid.imag)
    expected["qwen_txt_cos"], expected["qwen_txt_sin"] = interleave(txt.real), interleave(txt.imag)
    # the positions those tables were taken at: _compute_video_freqs' index
    # selections applied to the position counters of pos_freqs / neg_freqs
    pos_index = torch.arange(4096)
    neg_index = torch.arange(4096).flip(0) * -1 - 1
    fr = pos_index[0:F]
    hr = torch.cat([neg_index[-(H - H // 2):], pos_index[: H // 2]])
    wr = torch.cat([neg_index[-(W - W // 2):], pos_index[: W // 2]])
    g = torch.stack(torch.meshgrid(fr, hr, wr, indexing="ij"), -1).reshape(-1, 3)
    expected["qwen_grid"] = g.to(f32)
    max_vid_index = max(H // 2, W // 2)  # QwenEmbedRope.forward with scale_rope
    expected["qwen_txt_ids"] = pos_index[max_vid_index:max_vid_index + T, None].expand(T, 3).to(f32)
    # far positions, negative ones included: rope_params on every axis
    big = torch.randint(-4096, 4096, (40, 3))
    inputs["big_ids"] = big.to(f32)
    cols = [qrope.rope_params(big[:, a], d, 10000) for a, d in enumerate([16, 56, 56])]
    expected["qwen_big_cos"] = torch.cat([interleave(c.real) for c in cols], 1)
    expected["qwen_big_sin"] = torch.cat([interleave(c.imag) for c in cols], 1)

    # ---- Wan's patch embedding and unpatchify --------------------------------
    x = torch.randn(2, 4, 3, 6, 10)
    inputs["hidden_states"] = x
    for name, out, patch, bias in (("patch_embedding", 24, (1, 2, 2), True),
                                   ("patch3", 5, (3, 2, 5), False)):
        conv = torch.nn.Conv3d(4, out, kernel_size=patch, stride=patch, bias=bias)
        weights[f"{name}.weight"] = conv.weight.detach().contiguous()
        if bias:
            weights[f"{name}.bias"] = conv.bias.detach().contiguous()
        with torch.no_grad():
            expected[name] = conv(x).flatten(2).transpose(1, 2).contiguous()
    # WanTransformer3DModel.forward's last lines, on proj_out-shaped tokens
    B, C, nf, nh, nw, pt, ph, pw = 2, 4, 3, 6, 10, 1, 2, 2
    tok = torch.randn(B, (nf // pt) * (nh // ph) * (nw // pw), pt * ph * pw * C)
    inputs["tokens"] = tok
    y = tok.reshape(B, nf // pt, nh // ph, nw // pw, pt, ph, pw, -1)
    y = y.permute(0, 7, 1, 4, 2, 5, 3, 6)
    expected["sample"] = y.flatten(6, 7).flatten(4, 5).flatten(2, 3).contiguous()

    meta = {"generator": "tools/gen_embed_fixture.py", "diffusers": diffusers.__version__,
            "torch": torch.__version__, "seed": str(SEED)}
    for kind, d in (("inputs", inputs), ("weights", weights), ("expected", expected),
                    ("rounded", rounded)):
        d = {k: v.to(f32).contiguous() for k, v in d.items()}
        path = os.path.join(OUT, f"embed.{kind}.safetensors")
        save_file(d, path, metadata=meta)
        print(f"{path}: {len(d)} tensors")
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
