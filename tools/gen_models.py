#!/usr/bin/env python3
"""gen_models.py — whole-model fixtures for tests/models.sh, made by diffusers.

Run by hand (CI has no torch; the outputs are committed):

    python3 -m venv /tmp/dvenv
    /tmp/dvenv/bin/pip install torch diffusers safetensors numpy accelerate
    /tmp/dvenv/bin/python tools/gen_models.py [CASE...]

(accelerate: diffusers' from_pretrained needs it for classes with
`_keep_in_fp32_modules`, such as Wan.)

Each case is a tiny random-weight configuration of a diffusers transformer
(FluxTransformer2DModel as Flux.1-dev and Flux.1-schnell,
Flux2Transformer2DModel, WanTransformer3DModel (text-to-video; Wan 2.2 TI2V, Wan 2.1
I2V / FLF2V), ChronoEditTransformer3DModel,
QwenImageTransformer2DModel, LTXVideoTransformer3DModel,
SD3Transformer2DModel as SD3 and SD3.5), built with
a seeded init that makes every op show in the output (`randomize` of
tools/gen_fixtures.py, plus diffusers' own RMSNorm, which that misses), saved
as a user finds such a model in a pipeline's folder: `save_pretrained` into
tests/fixtures/models/<case>/transformer/ (config.json and the safetensors;
one case sharded with an index, one in bf16). Next to it, in <case>/:

  inputs.safetensors    forward's tensor arguments under their names, float32
                        (the bf16 case: the bf16 values it was run with);
  expected.safetensors  `sample`, diffusers' forward on the CPU (one thread),
                        float32 (the bf16 case: computed in bf16, widened);
  fixture.json          the case: class, dtype, dtpc's shape parameters (-D),
                        the non-tensor forward arguments, the class's
                        _cp_plan and _tp_plan, seed and versions.

Sizes are chosen so that token and head counts do not all divide the mesh
degrees the tests use (3 heads, 15 or 45 image tokens, 7 text tokens) in some
cases, and divide them in others (plain ring and Ulysses need that).
"""

import argparse
import json
import os
import shutil
import sys

import torch
import diffusers
from diffusers import (FluxTransformer2DModel, LTXVideoTransformer3DModel, QwenImageTransformer2DModel,
                       WanTransformer3DModel)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import randomize, save_file  # noqa: E402  (one init, one writer)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTDIR = os.path.join(ROOT, "tests", "fixtures", "models")
SEED = 20


def perturb_norms(model, gen):
    """Norm weights that `randomize` leaves at 1 (diffusers' own RMSNorm class,
    used by QwenImage's txt_norm and its QK norms): 1 + N(0, 0.2^2), biases
    N(0, 0.2^2), so that a norm weight bound to the wrong tensor shows."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, diffusers.models.normalization.RMSNorm):
                if getattr(mod, "weight", None) is not None:
                    mod.weight.copy_(1 + 0.2 * torch.randn(mod.weight.shape, generator=gen))
                if getattr(mod, "bias", None) is not None:
                    mod.bias.copy_(0.2 * torch.randn(mod.bias.shape, generator=gen))


def build(cls, cfg):
    torch.manual_seed(SEED)
    model = cls(**cfg).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    randomize(model, gen)
    perturb_norms(model, gen)
    return model, gen


def flux_inputs(cfg, gen, batch, img_h, img_w, txt_seq, guidance, times=None):
    """times: (timestep, guidance) values instead of random ones (the bf16
    case: values whose product by 1000 bf16 holds, since diffusers multiplies
    in the model's dtype and dtpc in float32)."""
    # img_ids as the pipeline makes them (0, row, col); txt_ids random integer
    # positions (the pipeline's zeros would leave the text's RoPE untested)
    img_ids = torch.zeros(img_h, img_w, 3)
    img_ids[..., 1] = torch.arange(img_h)[:, None]
    img_ids[..., 2] = torch.arange(img_w)[None, :]
    x = {
        "hidden_states": torch.randn(batch, img_h * img_w, cfg["in_channels"], generator=gen),
        "encoder_hidden_states": torch.randn(batch, txt_seq, cfg["joint_attention_dim"], generator=gen),
        "pooled_projections": torch.randn(batch, cfg["pooled_projection_dim"], generator=gen),
        # in [0, 1] as the pipeline passes them (forward multiplies by 1000)
        "timestep": torch.rand(batch, generator=gen),
        "img_ids": img_ids.reshape(-1, 3),
        "txt_ids": torch.randint(0, 9, (txt_seq, 3), generator=gen).float(),
    }
    if guidance:
        x["guidance"] = 1 + 4 * torch.rand(batch, generator=gen)
    if times:
        x["timestep"] = torch.full((batch,), times[0])
        if guidance:
            x["guidance"] = torch.full((batch,), times[1])
    shape = {"batch": batch, "img_seq": img_h * img_w, "txt_seq": txt_seq}
    return x, shape, {}


def wan_inputs(cfg, gen, batch, frames, height, width, txt_seq):
    x = {
        "hidden_states": torch.randn(batch, cfg["in_channels"], frames, height, width, generator=gen),
        "timestep": torch.randint(0, 1000, (batch,), generator=gen).float(),
        "encoder_hidden_states": torch.randn(batch, txt_seq, cfg["text_dim"], generator=gen),
    }
    shape = {"batch": batch, "num_frames": frames, "height": height, "width": width, "txt_seq": txt_seq}
    return x, shape, {}


def padded_mask(batch, txt_seq, pad):
    """The text mask of a batch whose sample b ends in pad[b] padded tokens
    (as a tokenizer pads): 1 for a token, 0 for padding."""
    mask = torch.ones(batch, txt_seq)
    for b, p in enumerate(pad):
        if p:
            mask[b, txt_seq - p:] = 0
    return mask


def qwen_inputs(cfg, gen, batch, frames, height, width, txt_seq, pad):
    """height, width: img_shapes in patches; pad[b]: padded text tokens of
    sample b (at the end, as a tokenizer pads)."""
    mask = padded_mask(batch, txt_seq, pad)
    x = {
        "hidden_states": torch.randn(batch, frames * height * width, cfg["in_channels"], generator=gen),
        "encoder_hidden_states": torch.randn(batch, txt_seq, cfg["joint_attention_dim"], generator=gen),
        "encoder_hidden_states_mask": mask,
        "timestep": torch.rand(batch, generator=gen),
    }
    shape = {"batch": batch, "frames": frames, "height": height, "width": width, "txt_seq": txt_seq}
    return x, shape, {"img_shapes": [[frames, height, width]] * batch}


def ltx_inputs(cfg, gen, batch, frames, height, width, txt_seq, pad, scale=None):
    """frames, height, width: the latent grid in patches (forward's
    num_frames, height, width); pad[b]: padded text tokens of sample b (at the
    end); scale: rope_interpolation_scale, LTXPipeline's (8 / 25, 32, 32) at
    25 frames per second when None (the model's default: not a -D)."""
    mask = padded_mask(batch, txt_seq, pad)
    x = {
        "hidden_states": torch.randn(batch, frames * height * width, cfg["in_channels"], generator=gen),
        "encoder_hidden_states": torch.randn(batch, txt_seq, cfg["caption_channels"], generator=gen),
        "timestep": torch.randint(0, 1000, (batch,), generator=gen).float(),
        "encoder_attention_mask": mask,
    }
    shape = {"batch": batch, "num_frames": frames, "height": height, "width": width, "txt_seq": txt_seq}
    if scale is not None:
        shape["rope_interpolation_scale"] = list(scale)
    return x, shape, {"num_frames": frames, "height": height, "width": width,
                      "rope_interpolation_scale": list(scale or (8 / 25, 32, 32))}


CASES = {
    # Flux.1-dev: guidance embedder; 4 heads (tp 2 and 4, ulysses 2 and 4), 12
    # image and 8 text tokens (split 2 and 4 ways)
    "flux_dev": dict(
        cls=FluxTransformer2DModel, model="flux",
        cfg=dict(patch_size=1, in_channels=4, num_layers=1, num_single_layers=2,
                 attention_head_dim=8, num_attention_heads=4, joint_attention_dim=24,
                 pooled_projection_dim=20, guidance_embeds=True, axes_dims_rope=[2, 2, 4]),
        inputs=lambda cfg, gen: flux_inputs(cfg, gen, batch=1, img_h=3, img_w=4, txt_seq=8,
                                            guidance=True)),
    # Flux.1-schnell: no guidance; 3 heads, 15 image and 7 text tokens (only
    # the anything modes split them), batch 2, saved in shards with an index
    "flux_schnell": dict(
        cls=FluxTransformer2DModel, model="flux", shard="40KB",
        cfg=dict(patch_size=1, in_channels=4, out_channels=6, num_layers=2, num_single_layers=1,
                 attention_head_dim=8, num_attention_heads=3, joint_attention_dim=16,
                 pooled_projection_dim=12, guidance_embeds=False, axes_dims_rope=[2, 2, 4]),
        inputs=lambda cfg, gen: flux_inputs(cfg, gen, batch=2, img_h=3, img_w=5, txt_seq=7,
                                            guidance=False)),
    # Flux.1-dev in bf16 (saved and run in bf16): timestep 0.5 and guidance
    # 2, whose products by 1000 bf16 holds
    "flux_bf16": dict(
        cls=FluxTransformer2DModel, model="flux", dtype=torch.bfloat16,
        cfg=dict(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                 attention_head_dim=8, num_attention_heads=2, joint_attention_dim=12,
                 pooled_projection_dim=12, guidance_embeds=True, axes_dims_rope=[2, 2, 4]),
        inputs=lambda cfg, gen: flux_inputs(cfg, gen, batch=1, img_h=2, img_w=4, txt_seq=4,
                                            guidance=True, times=(0.5, 2.0))),
    # the same at a timestep and guidance whose products by 1000 bf16 rounds
    # (0.3721 -> 0.37109375 bound, x 1000 = 371.09 -> 372; 3.713 -> 3.71875,
    # x 1000 = 3718.75 -> 3712): diffusers' bf16 forward embeds the rounded
    # products, as dtpc's input_scale does in 16-bit storage
    "flux_bf16_t": dict(
        cls=FluxTransformer2DModel, model="flux", dtype=torch.bfloat16,
        cfg=dict(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                 attention_head_dim=8, num_attention_heads=2, joint_attention_dim=12,
                 pooled_projection_dim=12, guidance_embeds=True, axes_dims_rope=[2, 2, 4]),
        inputs=lambda cfg, gen: flux_inputs(cfg, gen, batch=1, img_h=2, img_w=4, txt_seq=4,
                                            guidance=True, times=(0.3721, 3.713))),
    # Wan 2.1 T2V: 3 heads x 12 (RoPE axes 4, 4, 4), latent 4 x 3 x 6 x 10 ->
    # 3 x 3 x 5 = 45 tokens, 7 text tokens
    "wan": dict(
        cls=WanTransformer3DModel, model="wan",
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=3, attention_head_dim=12, in_channels=4,
                 out_channels=4, text_dim=16, freq_dim=32, ffn_dim=40, num_layers=2,
                 cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=32),
        inputs=lambda cfg, gen: wan_inputs(cfg, gen, batch=1, frames=3, height=6, width=10,
                                           txt_seq=7)),
    # Wan in bf16 (weights saved in bf16, diffusers' forward in bf16 on the
    # CPU): 2 heads x 16 (axes 6, 4, 6 — head_dim // 6 rounds down), 2 x 4 x 8
    # latents -> 16 tokens, batch 2
    "wan_bf16": dict(
        cls=WanTransformer3DModel, model="wan", dtype=torch.bfloat16,
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=3,
                 out_channels=5, text_dim=12, freq_dim=16, ffn_dim=48, num_layers=2,
                 cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=16),
        inputs=lambda cfg, gen: wan_inputs(cfg, gen, batch=2, frames=2, height=4, width=8,
                                           txt_seq=6)),
    # Qwen-Image: 4 heads x 8 (axes 2, 2, 4), img_shapes (1, 3, 4) -> 12
    # tokens (an odd height: centred positions -2..0), 8 text tokens of which
    # sample 1 pads the last 3 (the mask)
    "qwenimage": dict(
        cls=QwenImageTransformer2DModel, model="qwenimage",
        cfg=dict(patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=8,
                 num_attention_heads=4, joint_attention_dim=20, axes_dims_rope=[2, 2, 4]),
        inputs=lambda cfg, gen: qwen_inputs(cfg, gen, batch=2, frames=1, height=3, width=4,
                                            txt_seq=8, pad=[0, 3])),
    # other corners a reviewer's configuration may take: Flux with patch_size
    # 2 (packed 2x2 latents: proj_out 4 x in_channels wide), batch 3, RoPE
    # axes (4, 2, 2)
    "flux_patch2": dict(
        cls=FluxTransformer2DModel, model="flux",
        cfg=dict(patch_size=2, in_channels=8, num_layers=1, num_single_layers=1,
                 attention_head_dim=8, num_attention_heads=2, joint_attention_dim=8,
                 pooled_projection_dim=8, guidance_embeds=True, axes_dims_rope=[4, 2, 2]),
        inputs=lambda cfg, gen: flux_inputs(cfg, gen, batch=3, img_h=2, img_w=3, txt_seq=4,
                                            guidance=True)),
    # Wan with a temporal patch (2, 2, 1), head_dim 18 (RoPE axes 6, 6, 6),
    # no cross_attn_norm (norm2 is the identity)
    "wan_patch221": dict(
        cls=WanTransformer3DModel, model="wan",
        cfg=dict(patch_size=[2, 2, 1], num_attention_heads=2, attention_head_dim=18, in_channels=2,
                 out_channels=3, text_dim=8, freq_dim=20, ffn_dim=24, num_layers=1,
                 cross_attn_norm=False, rope_max_seq_len=16),
        inputs=lambda cfg, gen: wan_inputs(cfg, gen, batch=1, frames=4, height=4, width=3,
                                           txt_seq=3)),
    # Qwen-Image over 2 frames of 5 x 2 patches (an odd height centred:
    # -3..1), text from max(5 // 2, 2 // 2) = 2, the last 2 text tokens masked
    "qwenimage_frames2": dict(
        cls=QwenImageTransformer2DModel, model="qwenimage",
        cfg=dict(patch_size=2, in_channels=8, out_channels=3, num_layers=1, attention_head_dim=8,
                 num_attention_heads=2, joint_attention_dim=12, axes_dims_rope=[2, 2, 4]),
        inputs=lambda cfg, gen: qwen_inputs(cfg, gen, batch=1, frames=2, height=5, width=2,
                                            txt_seq=6, pad=[2])),
    # LTX-Video: 4 heads x 8 (inner 32: RoPE's 32 % 6 = 2 entries of padding
    # in front, 5 frequencies), 2 x 3 x 4 latents -> 24 tokens, 8 text tokens
    # of which sample 1 pads the last 3, batch 2
    "ltx": dict(
        cls=LTXVideoTransformer3DModel, model="ltx",
        cfg=dict(in_channels=8, out_channels=6, num_attention_heads=4, attention_head_dim=8,
                 cross_attention_dim=32, num_layers=2, caption_channels=12),
        inputs=lambda cfg, gen: ltx_inputs(cfg, gen, batch=2, frames=2, height=3, width=4,
                                           txt_seq=8, pad=[0, 3])),
    # LTX-Video's other corners: 3 heads x 12 (inner 36, no padding), patch
    # sizes 2 (the RoPE coordinates' scale), norm1 / norm2 with weights,
    # attention without q/k/v biases, rope_interpolation_scale at 24 frames
    # per second, 2 x 3 x 5 latents -> 30 tokens, 7 text tokens (2 padded)
    "ltx_odd": dict(
        cls=LTXVideoTransformer3DModel, model="ltx",
        cfg=dict(in_channels=4, out_channels=5, patch_size=2, patch_size_t=2, num_attention_heads=3,
                 attention_head_dim=12, cross_attention_dim=36, num_layers=2, caption_channels=10,
                 norm_elementwise_affine=True, attention_bias=False),
        inputs=lambda cfg, gen: ltx_inputs(cfg, gen, batch=1, frames=2, height=3, width=5,
                                           txt_seq=7, pad=[2], scale=(8 / 24, 32, 32))),
    # LTX-Video in bf16: 2 heads x 16, 2 x 2 x 4 latents -> 16 tokens, 6 text
    # tokens (the last 2 padded)
    "ltx_bf16": dict(
        cls=LTXVideoTransformer3DModel, model="ltx", dtype=torch.bfloat16,
        cfg=dict(in_channels=6, out_channels=6, num_attention_heads=2, attention_head_dim=16,
                 cross_attention_dim=32, num_layers=2, caption_channels=8),
        inputs=lambda cfg, gen: ltx_inputs(cfg, gen, batch=1, frames=2, height=2, width=4,
                                           txt_seq=6, pad=[2])),
}



# ---- Flux.2 (Flux2Transformer2DModel) ------------------------------------------------------
from diffusers import Flux2Transformer2DModel  # noqa: E402  (this section's class)


def flux2_inputs(cfg, gen, batch, img_h, img_w, txt_seq, guidance, times=None):
    """Forward's tensors as Flux2Pipeline passes them: ids [B, S, 4], the same
    for every sample; img_ids (0, row, col, 0) as the pipeline makes them,
    txt_ids random integer positions on all four axes (the pipeline's (0, 0,
    0, l) would leave three of the text's axes untested). times: (timestep,
    guidance) instead of random values (bf16: products by 1000 that bf16
    holds)."""
    axes = len(cfg.get("axes_dims_rope", (32, 32, 32, 32)))
    img_ids = torch.zeros(img_h, img_w, axes)
    img_ids[..., 1] = torch.arange(img_h)[:, None]
    img_ids[..., 2] = torch.arange(img_w)[None, :]
    txt_ids = torch.randint(0, 9, (txt_seq, axes), generator=gen).float()
    x = {
        "hidden_states": torch.randn(batch, img_h * img_w, cfg["in_channels"], generator=gen),
        "encoder_hidden_states": torch.randn(batch, txt_seq, cfg["joint_attention_dim"], generator=gen),
        # in [0, 1] as the pipeline passes them (forward multiplies by 1000)
        "timestep": torch.rand(batch, generator=gen),
        "img_ids": img_ids.reshape(1, -1, axes).expand(batch, -1, -1).contiguous(),
        "txt_ids": txt_ids.reshape(1, -1, axes).expand(batch, -1, -1).contiguous(),
    }
    if guidance:
        x["guidance"] = 1 + 4 * torch.rand(batch, generator=gen)
    if times:
        x["timestep"] = torch.full((batch,), times[0])
        if guidance:
            x["guidance"] = torch.full((batch,), times[1])
    return x, {"batch": batch, "img_seq": img_h * img_w, "txt_seq": txt_seq}, {}


CASES.update({
    # Flux.2-dev (guidance): 4 heads x 8 (RoPE axes 2, 2, 2, 2), mlp_ratio 3
    # (mlp_hidden 96), 1 double + 2 single blocks, 12 image and 8 text tokens
    # (tp 2 and 4, ulysses 2 and 4, ring 2 and 4)
    "flux2_dev": dict(
        cls=Flux2Transformer2DModel, model="flux2",
        cfg=dict(patch_size=1, in_channels=4, num_layers=1, num_single_layers=2,
                 attention_head_dim=8, num_attention_heads=4, joint_attention_dim=24,
                 timestep_guidance_channels=32, mlp_ratio=3.0, axes_dims_rope=[2, 2, 2, 2],
                 guidance_embeds=True),
        inputs=lambda cfg, gen: flux2_inputs(cfg, gen, batch=1, img_h=3, img_w=4, txt_seq=8,
                                             guidance=True)),
    # no guidance, 3 heads x 12 (axes 4, 2, 2, 4), mlp_ratio 2.5 (mlp_hidden
    # 90), patch_size 2 with out_channels 5, rope_theta 500, eps 1e-5, 1 + 1
    # blocks, 15 image and 7 text tokens (the anything modes), batch 2
    "flux2_odd": dict(
        cls=Flux2Transformer2DModel, model="flux2",
        cfg=dict(patch_size=2, in_channels=8, out_channels=5, num_layers=1, num_single_layers=1,
                 attention_head_dim=12, num_attention_heads=3, joint_attention_dim=10,
                 timestep_guidance_channels=16, mlp_ratio=2.5, axes_dims_rope=[4, 2, 2, 4],
                 rope_theta=500, eps=1e-5, guidance_embeds=False),
        inputs=lambda cfg, gen: flux2_inputs(cfg, gen, batch=2, img_h=3, img_w=5, txt_seq=7,
                                             guidance=False)),
    # Flux.2-dev in bf16 (saved and run in bf16): 2 heads x 8, timestep 0.5
    # and guidance 2, 8 image + 4 text tokens
    "flux2_bf16": dict(
        cls=Flux2Transformer2DModel, model="flux2", dtype=torch.bfloat16,
        cfg=dict(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                 attention_head_dim=8, num_attention_heads=2, joint_attention_dim=12,
                 timestep_guidance_channels=32, mlp_ratio=3.0, axes_dims_rope=[2, 2, 2, 2],
                 guidance_embeds=True),
        inputs=lambda cfg, gen: flux2_inputs(cfg, gen, batch=1, img_h=2, img_w=4, txt_seq=4,
                                             guidance=True, times=(0.5, 2.0))),
})


# --- SD3 / SD3.5 (SD3Transformer2DModel) ----------------------------------------
from diffusers import SD3Transformer2DModel  # noqa: E402  (this section's class)


def sd3_inputs(cfg, gen, batch, height, width, txt_seq):
    """height, width: the latent's (forward's [B, C, H, W]); timesteps in
    [0, 1000) as StableDiffusion3Pipeline passes them (no factor in forward)."""
    x = {
        "hidden_states": torch.randn(batch, cfg["in_channels"], height, width, generator=gen),
        "encoder_hidden_states": torch.randn(batch, txt_seq, cfg["joint_attention_dim"], generator=gen),
        "pooled_projections": torch.randn(batch, cfg["pooled_projection_dim"], generator=gen),
        "timestep": 1000 * torch.rand(batch, generator=gen),
    }
    shape = {"batch": batch, "height": height, "width": width, "txt_seq": txt_seq}
    return x, shape, {}


CASES.update({
    # SD3 (no qk norm): 3 blocks (a middle one and the context_pre_only
    # last), 4 heads x 6, an 8 x 6 latent -> 4 x 3 = 12 tokens cropped from a
    # 7 x 7 position grid (offsets 1, 2), 8 text tokens
    "sd3": dict(
        cls=SD3Transformer2DModel, model="sd3",
        cfg=dict(sample_size=8, patch_size=2, in_channels=4, num_layers=3, attention_head_dim=6,
                 num_attention_heads=4, joint_attention_dim=20, caption_projection_dim=24,
                 pooled_projection_dim=12, out_channels=4, pos_embed_max_size=7),
        inputs=lambda cfg, gen: sd3_inputs(cfg, gen, batch=1, height=8, width=6, txt_seq=8)),
    # SD3's odd corners: 3 heads x 8, 2 blocks, out_channels 6, batch 2, a
    # 6 x 10 latent -> 15 tokens, 7 text tokens (only the anything modes and
    # tp 3 split them)
    "sd3_odd": dict(
        cls=SD3Transformer2DModel, model="sd3",
        cfg=dict(sample_size=6, patch_size=2, in_channels=3, num_layers=2, attention_head_dim=8,
                 num_attention_heads=3, joint_attention_dim=10, caption_projection_dim=24,
                 pooled_projection_dim=8, out_channels=6, pos_embed_max_size=6),
        inputs=lambda cfg, gen: sd3_inputs(cfg, gen, batch=2, height=6, width=10, txt_seq=7)),
    # SD3.5 medium-like: qk_norm rms_norm, dual attention (attn2,
    # SD35AdaLayerNormZeroX) on blocks 0 and 1 of 3, 4 heads x 6, an 8 x 8
    # latent -> 16 tokens, 8 text tokens
    "sd35_medium": dict(
        cls=SD3Transformer2DModel, model="sd3",
        cfg=dict(sample_size=8, patch_size=2, in_channels=4, num_layers=3, attention_head_dim=6,
                 num_attention_heads=4, joint_attention_dim=16, caption_projection_dim=24,
                 pooled_projection_dim=12, out_channels=4, pos_embed_max_size=6,
                 dual_attention_layers=(0, 1), qk_norm="rms_norm"),
        inputs=lambda cfg, gen: sd3_inputs(cfg, gen, batch=1, height=8, width=8, txt_seq=8)),
    # SD3.5 (qk norm, dual attention on block 0) in bf16: 2 heads x 16, 2
    # blocks, 16 + 6 tokens
    "sd35_bf16": dict(
        cls=SD3Transformer2DModel, model="sd3", dtype=torch.bfloat16,
        cfg=dict(sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=16,
                 num_attention_heads=2, joint_attention_dim=12, caption_projection_dim=32,
                 pooled_projection_dim=8, out_channels=4, pos_embed_max_size=4,
                 dual_attention_layers=(0,), qk_norm="rms_norm"),
        inputs=lambda cfg, gen: sd3_inputs(cfg, gen, batch=1, height=8, width=8, txt_seq=6)),
})


# --- Helios (HeliosTransformer3DModel), forward without the history latents ----
from diffusers import HeliosTransformer3DModel  # noqa: E402  (this section's class)


def helios_inputs(cfg, gen, batch, frames, height, width, txt_seq):
    """forward's tensor arguments without the history latents and their
    indices (None: models/helios.plan models that forward); timesteps in
    [0, 1000) as the Helios pipelines pass them."""
    x = {
        "hidden_states": torch.randn(batch, cfg["in_channels"], frames, height, width, generator=gen),
        "timestep": 1000 * torch.rand(batch, generator=gen),
        "encoder_hidden_states": torch.randn(batch, txt_seq, cfg["text_dim"], generator=gen),
    }
    shape = {"batch": batch, "num_frames": frames, "height": height, "width": width, "txt_seq": txt_seq}
    return x, shape, {}


CASES.update({
    # Helios: 4 heads x 8 (rope_dim 2, 2, 4), latent 2 x 4 x 8 -> 2 x 2 x 4
    # = 16 tokens, 6 text tokens (every plain ring / Ulysses degree 2 and 4
    # divides them); no memory patches, so every tensor is bound
    "helios": dict(
        cls=HeliosTransformer3DModel, model="helios",
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=4, attention_head_dim=8, in_channels=4,
                 out_channels=4, text_dim=12, freq_dim=16, ffn_dim=40, num_layers=2,
                 rope_dim=[2, 2, 4], has_multi_term_memory_patch=False),
        inputs=lambda cfg, gen: helios_inputs(cfg, gen, batch=1, frames=2, height=4, width=8,
                                              txt_seq=6)),
    # Helios' corners: 3 heads x 12 (rope_dim 4, 6, 2, theta 500), latent 3 x
    # 6 x 10 -> 45 tokens (ring 3 and the anything modes), 7 text tokens,
    # batch 2, out_channels 5, no cross_attn_norm, eps 1e-5; with the memory
    # patches and the amplified history keys, which the forward without
    # history does not read (bound-helios-odd's control)
    "helios_odd": dict(
        cls=HeliosTransformer3DModel, model="helios",
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=3, attention_head_dim=12, in_channels=2,
                 out_channels=5, text_dim=10, freq_dim=20, ffn_dim=24, num_layers=2,
                 cross_attn_norm=False, eps=1e-5, rope_dim=[4, 6, 2], rope_theta=500.0,
                 has_multi_term_memory_patch=True, is_amplify_history=True),
        inputs=lambda cfg, gen: helios_inputs(cfg, gen, batch=2, frames=3, height=6, width=10,
                                              txt_seq=7)),
    # Helios in bf16: 2 heads x 16 (rope_dim 6, 4, 6), temporal patch 2
    # (patch 2, 2, 2), latent 4 x 4 x 8 -> 2 x 2 x 4 = 16 tokens, batch 2
    "helios_bf16": dict(
        cls=HeliosTransformer3DModel, model="helios", dtype=torch.bfloat16,
        cfg=dict(patch_size=[2, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=3,
                 out_channels=3, text_dim=12, freq_dim=16, ffn_dim=48, num_layers=2,
                 rope_dim=[6, 4, 6], has_multi_term_memory_patch=False),
        inputs=lambda cfg, gen: helios_inputs(cfg, gen, batch=2, frames=4, height=4, width=8,
                                              txt_seq=6)),
})

# --- Helios with its history (HeliosPipeline's chunks): short / mid / long
# history latents and the frame indices, as models/helios.plan's -D
# short_frames / mid_frames / long_frames / frame_indices model them


def helios_history_inputs(cfg, gen, batch, frames, height, width, txt_seq, short, mid, long_,
                          frame_indices):
    """forward's arguments as HeliosPipeline passes them at a chunk: the
    history latents [B, C, F_h, H, W] (short = the prefix frame and the 1x
    history, mid 2x, long 4x) and each one's frame indices, [1, F] long
    tensors split from one arange as the pipeline's keep_first_frame does
    (prefix, long, mid, 1x, sample; the short indices are the prefix's and the
    1x's, not contiguous); indices_hidden_states None without frame_indices
    (forward's arange from 0)."""
    pt = cfg["patch_size"][0]
    x, shape, extra = helios_inputs(cfg, gen, batch, frames, height, width, txt_seq)
    sizes = [1, long_ // pt, mid // pt, short // pt - 1, frames // pt]
    idx = torch.arange(0, sum(sizes)).split(sizes)
    ind = {"short": torch.cat([idx[0], idx[3]]), "mid": idx[2], "long": idx[1]}
    for name, f in (("short", short), ("mid", mid), ("long", long_)):
        if f:
            x[f"latents_history_{name}"] = torch.randn(batch, cfg["in_channels"], f, height, width,
                                                       generator=gen)
            x[f"indices_latents_history_{name}"] = ind[name].unsqueeze(0)
    if frame_indices:
        x["indices_hidden_states"] = idx[4].unsqueeze(0)
    shape.update(short_frames=short, mid_frames=mid, long_frames=long_,
                 frame_indices=frame_indices)
    return x, shape, extra


CASES.update({
    # Helios at a chunk: 4 heads x 8, latent 1 x 8 x 16 -> 32 tokens after
    # 8 long (4), 2 mid (8) and 2 short (64) history tokens: 108 (ring /
    # Ulysses 2 and 4 divide every part); amplified history keys per head,
    # guidance_cross_attn and zero_history_timestep (the defaults), the
    # pipeline's indices
    "helios_history": dict(
        cls=HeliosTransformer3DModel, model="helios",
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=4, attention_head_dim=8, in_channels=2,
                 out_channels=2, text_dim=12, freq_dim=16, ffn_dim=40, num_layers=2,
                 rope_dim=[2, 2, 4], is_amplify_history=True, history_scale_mode="per_head"),
        inputs=lambda cfg, gen: helios_history_inputs(cfg, gen, batch=1, frames=1, height=8, width=16,
                                                      txt_seq=6, short=2, mid=2, long_=8,
                                                      frame_indices=True)),
    # the corners: 3 heads x 12 (rope_dim 4, 6, 2, theta 500), batch 2,
    # latent 3 x 8 x 8 -> 48 tokens after 1 long, 4 mid, 16 short: 69 (ring 3,
    # the anything modes); a scalar history_key_scale, no guidance_cross_attn
    # (attn2 reads every token), no cross_attn_norm
    "helios_history_odd": dict(
        cls=HeliosTransformer3DModel, model="helios",
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=3, attention_head_dim=12, in_channels=2,
                 out_channels=3, text_dim=10, freq_dim=20, ffn_dim=24, num_layers=2,
                 cross_attn_norm=False, eps=1e-5, rope_dim=[4, 6, 2], rope_theta=500.0,
                 guidance_cross_attn=False, is_amplify_history=True, history_scale_mode="scalar"),
        inputs=lambda cfg, gen: helios_history_inputs(cfg, gen, batch=2, frames=3, height=8, width=8,
                                                      txt_seq=7, short=1, mid=2, long_=4,
                                                      frame_indices=True)),
    # bf16: 2 heads x 16, short and mid history only (16 + 2 tokens before
    # the sample's 16), zero_history_timestep off (every token the sample's
    # modulation), no key amplification, indices_hidden_states None (forward's
    # arange: batch 1, since forward then expands it over the batch and the
    # [1, F] history tables no longer concatenate with it)
    "helios_history_bf16": dict(
        cls=HeliosTransformer3DModel, model="helios", dtype=torch.bfloat16,
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=3,
                 out_channels=3, text_dim=12, freq_dim=16, ffn_dim=48, num_layers=2,
                 rope_dim=[6, 4, 6], zero_history_timestep=False),
        inputs=lambda cfg, gen: helios_history_inputs(cfg, gen, batch=1, frames=2, height=4, width=8,
                                                      txt_seq=6, short=2, mid=2, long_=0,
                                                      frame_indices=False)),
})

# --- Wan 2.2 TI2V, Wan 2.1 I2V / FLF2V (WanTransformer3DModel at its other configs) ---


def wan22_inputs(cfg, gen, batch, frames, height, width, txt_seq, per_token=False, img_seq=None,
                 images=1):
    """per_token: a [B, S] timestep as WanPipeline's expand_timesteps (Wan
    2.2 TI2V) makes it: 0 on the first latent frame's tokens (the
    conditioning image), the sample's t elsewhere. img_seq: CLIP image
    tokens, `images` of them a sample (FLF2V: 2, the first and last frame)."""
    x, shape, extra = wan_inputs(cfg, gen, batch, frames, height, width, txt_seq)
    p_t, p_h, p_w = cfg["patch_size"]
    if per_token:
        grid = (frames // p_t, height // p_h, width // p_w)
        t = x["timestep"][:, None, None, None].expand(batch, *grid).clone()
        t[:, 0] = 0
        x["timestep"] = t.reshape(batch, -1)
        shape["ts_seq_len"] = grid[0] * grid[1] * grid[2]
    if img_seq:
        x["encoder_hidden_states_image"] = torch.randn(images * batch, img_seq, cfg["image_dim"],
                                                       generator=gen)
        shape["img_seq"] = img_seq
    return x, shape, extra


CASES.update({
    # Wan 2.2 TI2V: per-token timesteps [1, 45], 3 heads x 12, in/out 6 (the
    # 5B's 48-channel latents, scaled down), latent 3 x 6 x 10 -> 45 tokens
    "wan22_ti2v": dict(
        cls=WanTransformer3DModel, model="wan",
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=3, attention_head_dim=12, in_channels=6,
                 out_channels=6, text_dim=16, freq_dim=32, ffn_dim=40, num_layers=2,
                 cross_attn_norm=True, rope_max_seq_len=32),
        inputs=lambda cfg, gen: wan22_inputs(cfg, gen, batch=1, frames=3, height=6, width=10,
                                             txt_seq=7, per_token=True)),
    # A14B's low-noise expert (transformer_2): the `wan` case's config,
    # weights drawn again, its own inputs; tests/models.sh binds this and
    # `wan`'s weights to one graph
    "wan22_a14b_low": dict(
        cls=WanTransformer3DModel, model="wan", cfg=CASES["wan"]["cfg"],
        init=lambda model, gen: (randomize(model, gen), perturb_norms(model, gen)),
        inputs=lambda cfg, gen: wan_inputs(cfg, gen, batch=1, frames=3, height=6, width=10,
                                           txt_seq=7)),
    # TI2V in bf16, batch 2: 2 heads x 16, 2 x 4 x 8 -> 16 tokens
    "wan22_ti2v_bf16": dict(
        cls=WanTransformer3DModel, model="wan", dtype=torch.bfloat16,
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=4,
                 out_channels=4, text_dim=12, freq_dim=16, ffn_dim=48, num_layers=2,
                 cross_attn_norm=True, rope_max_seq_len=16),
        inputs=lambda cfg, gen: wan22_inputs(cfg, gen, batch=2, frames=2, height=4, width=8,
                                             txt_seq=6, per_token=True)),
    # Wan 2.1 I2V: the image embedder (image_dim 10) and attn2's add_k_proj /
    # add_v_proj over 5 image tokens; diffusers' processor takes the last 512
    # context tokens as text, so the text is 512 tokens (text_dim 4); 2 heads
    # x 8, in_channels 9 (the 36 of I2V, scaled), batch 2, 2 x 4 x 6 -> 12 tokens
    "wan_i2v": dict(
        cls=WanTransformer3DModel, model="wan",
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=8, in_channels=9,
                 out_channels=4, text_dim=4, freq_dim=16, ffn_dim=24, num_layers=2,
                 cross_attn_norm=True, rope_max_seq_len=16, image_dim=10, added_kv_proj_dim=16),
        inputs=lambda cfg, gen: wan22_inputs(cfg, gen, batch=2, frames=2, height=4, width=6,
                                             txt_seq=512, img_seq=5)),
    # Wan 2.1 FLF2V: two images a sample with pos_embed (pos_embed_seq_len
    # 2 x 3), 509 text tokens: the processor's last 512 of the 515 context
    # tokens hold 3 image tokens, as diffusers splits them; 3 heads x 6 (axes 2, 2, 2),
    # 3 x 4 x 4 -> 12 tokens
    "wan_flf2v": dict(
        cls=WanTransformer3DModel, model="wan",
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=3, attention_head_dim=6, in_channels=5,
                 out_channels=3, text_dim=4, freq_dim=8, ffn_dim=16, num_layers=1,
                 cross_attn_norm=False, rope_max_seq_len=8, image_dim=6, added_kv_proj_dim=18,
                 pos_embed_seq_len=6),
        # WanImageEmbedding's pos_embed starts at zeros: drawn N(0, 1) so that it shows
        init=lambda model, gen: model.condition_embedder.image_embedder.pos_embed.data.copy_(
            torch.randn(model.condition_embedder.image_embedder.pos_embed.shape, generator=gen)),
        inputs=lambda cfg, gen: wan22_inputs(cfg, gen, batch=1, frames=3, height=4, width=4,
                                             txt_seq=509, img_seq=3, images=2)),
})


# --- ChronoEdit (ChronoEditTransformer3DModel: models/chronoedit.plan over wan.plan) ---
from diffusers import ChronoEditTransformer3DModel  # noqa: E402  (this section's class)

CASES.update({
    # the edit without temporal reasoning: two latent frames at temporal
    # positions 0 and rope_temporal_skip_len - 1 = 4; image conditioning (3
    # image + 512 text tokens), 2 heads x 8 (axes 4, 2, 2), 2 x 6 x 4 -> 12 tokens
    "chronoedit": dict(
        cls=ChronoEditTransformer3DModel, model="chronoedit",
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=8, in_channels=7,
                 out_channels=4, text_dim=4, freq_dim=16, ffn_dim=24, num_layers=2,
                 cross_attn_norm=True, rope_max_seq_len=16, image_dim=6, added_kv_proj_dim=16,
                 rope_temporal_skip_len=5),
        inputs=lambda cfg, gen: wan22_inputs(cfg, gen, batch=1, frames=2, height=6, width=4,
                                             txt_seq=512, img_seq=3)),
    # temporal reasoning: 3 frames take Wan's positions 0, 1, 2; 3 heads x 6
    # (axes 2, 2, 2), batch 2, 3 x 4 x 6 -> 18 tokens, no cross_attn_norm
    "chronoedit_frames3": dict(
        cls=ChronoEditTransformer3DModel, model="chronoedit",
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=3, attention_head_dim=6, in_channels=5,
                 out_channels=3, text_dim=4, freq_dim=8, ffn_dim=16, num_layers=1,
                 cross_attn_norm=False, rope_max_seq_len=8, image_dim=4, added_kv_proj_dim=18,
                 rope_temporal_skip_len=8),
        inputs=lambda cfg, gen: wan22_inputs(cfg, gen, batch=2, frames=3, height=4, width=6,
                                             txt_seq=512, img_seq=2)),
    # bf16, two frames with rope_temporal_skip_len 12 past rope_max_seq_len 7
    # (the second frame at position 6); 2 heads x 12 (axes 4, 4, 4), 2 x 4 x 8
    # -> 16 tokens
    "chronoedit_bf16": dict(
        cls=ChronoEditTransformer3DModel, model="chronoedit", dtype=torch.bfloat16,
        cfg=dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=12, in_channels=4,
                 out_channels=4, text_dim=4, freq_dim=16, ffn_dim=32, num_layers=2,
                 cross_attn_norm=True, rope_max_seq_len=7, image_dim=6, added_kv_proj_dim=24,
                 rope_temporal_skip_len=12),
        inputs=lambda cfg, gen: wan22_inputs(cfg, gen, batch=1, frames=2, height=4, width=8,
                                             txt_seq=512, img_seq=3)),
})


# --- Qwen-Image 2.1 (QwenImage21Transformer2DModel) ------------------------------
from diffusers.models.transformers.transformer_qwenimage21 import (  # noqa: E402  (this section's)
    QwenImage21KVCache, QwenImage21Transformer2DModel)


def qwen21_inputs(cfg, gen, batch, height, width, txt_seq, pad):
    """Text to image (no condition images): a txt_seq-token prompt (sample b
    pads its last pad[b]), a height x width target in latent tokens. The
    cache inputs are filled by qwen21_forward: diffusers' own first step."""
    x = {
        "hidden_states": torch.randn(batch, height * width, cfg["in_channels"], generator=gen),
        "encoder_hidden_states": torch.randn(batch, txt_seq, cfg["context_in_dim"], generator=gen),
        "encoder_hidden_states_mask": padded_mask(batch, txt_seq, pad),
        "timestep": torch.rand(batch, generator=gen),
        # the first step's latents and timestep: the cache must not depend on them
        "prefill_hidden_states": torch.randn(batch, height * width, cfg["in_channels"], generator=gen),
    }
    shape = {"batch": batch, "height": height, "width": width, "txt_seq": txt_seq}
    return x, shape, {"img_shapes": [[[1, height, width]]] * batch, "kv_cache_mode": "cached"}


def qwen21_forward(m, args, x):
    """QwenImage21Pipeline's steps with its default use_kv_cache: step 0 with
    kv_cache_mode "extract" fills the cache, a later step decodes from it
    ("cached"; what models/qwenimage21.plan is). The cache goes into the
    fixture's inputs x as kv_cache_k / _v [B, txt_seq, num_layers * inner]
    (block i's K at columns i * inner ...), from the first run (the case's
    dtype; the bf16 case's float32 rerun keeps it). The decode is checked against the
    same step run without a cache (the full block-causal prefill)."""
    batch, txt_seq = args["encoder_hidden_states"].shape[:2]
    tokens = args["hidden_states"].shape[1]
    # the pipeline's image_pad_mask of text to image: no image slot in the
    # prompt, then one per 2 x 2 group of target latents (append_target_slots)
    img_mask = torch.cat([torch.zeros(batch, txt_seq, dtype=torch.bool),
                          torch.ones(batch, tokens // 4, dtype=torch.bool)], dim=1)
    common = dict(encoder_hidden_states=args["encoder_hidden_states"],
                  encoder_hidden_states_mask=args["encoder_hidden_states_mask"].bool(),
                  img_shapes=args["img_shapes"], img_mask=img_mask, return_dict=False)
    cache = QwenImage21KVCache(len(m.transformer_blocks))
    m(hidden_states=args["prefill_hidden_states"], timestep=torch.ones_like(args["timestep"]),
      kv_cache=cache, kv_cache_mode="extract", **common)
    sample = m(hidden_states=args["hidden_states"], timestep=args["timestep"], kv_cache=cache,
               kv_cache_mode="cached", **common)[0]
    full = m(hidden_states=args["hidden_states"], timestep=args["timestep"], **common)[0][:, txt_seq:]
    err = rel_error(sample, full)
    assert err < (2e-2 if sample.dtype == torch.bfloat16 else 1e-5), f"cached vs full step: {err}"
    x.setdefault("kv_cache_k", torch.cat([c.k.flatten(2) for c in cache.layer_caches], dim=2))
    x.setdefault("kv_cache_v", torch.cat([c.v.flatten(2) for c in cache.layer_caches], dim=2))
    return sample


CASES.update({
    # 4 heads x 8 (axes 2, 2, 4), 2 blocks, a 3 x 4 target (an odd height:
    # centred rows -2..0; frame position 8), 8 text tokens of which sample 1
    # pads the last 3, in_channels 12, out_channels 8
    "qwen21": dict(
        cls=QwenImage21Transformer2DModel, model="qwenimage21", forward=qwen21_forward,
        cfg=dict(in_channels=12, out_channels=8, num_layers=2, attention_head_dim=8,
                 num_attention_heads=4, context_in_dim=10, axes_dims_rope=[2, 2, 4]),
        inputs=lambda cfg, gen: qwen21_inputs(cfg, gen, batch=2, height=3, width=4, txt_seq=8,
                                              pad=[0, 3])),
    # the odd corners: 3 heads x 8, 3 blocks, mlp_ratio 2, a 5 x 4 target ->
    # 20 tokens, 7 text tokens (only the anything modes and tp 3 split them)
    "qwen21_odd": dict(
        cls=QwenImage21Transformer2DModel, model="qwenimage21", forward=qwen21_forward,
        cfg=dict(in_channels=8, out_channels=None, num_layers=3, attention_head_dim=8,
                 num_attention_heads=3, context_in_dim=6, mlp_ratio=2, axes_dims_rope=[4, 2, 2]),
        inputs=lambda cfg, gen: qwen21_inputs(cfg, gen, batch=1, height=5, width=4, txt_seq=7,
                                              pad=[2])),
    # bf16: 2 heads x 16, 2 blocks, a 4 x 4 target, 8 text tokens
    "qwen21_bf16": dict(
        cls=QwenImage21Transformer2DModel, model="qwenimage21", forward=qwen21_forward,
        dtype=torch.bfloat16,
        cfg=dict(in_channels=8, out_channels=8, num_layers=2, attention_head_dim=16,
                 num_attention_heads=2, context_in_dim=8, axes_dims_rope=[4, 4, 8]),
        inputs=lambda cfg, gen: qwen21_inputs(cfg, gen, batch=1, height=4, width=4, txt_seq=8,
                                              pad=[1])),
})


# ---- LTX-2 (LTX2VideoTransformer3DModel) ---------------------------------------------------
from diffusers import LTX2VideoTransformer3DModel  # noqa: E402  (this section's class)


def ltx2_inputs(cfg, gen, batch, frames, height, width, audio_frames, txt_seq, pad, fps=24.0):
    """frames, height, width: the latent grid (forward's num_frames, height,
    width); audio_frames: forward's audio_num_frames; pad[b]: padded text
    tokens of sample b (at the end; the same mask for both streams, as
    LTX2Pipeline passes it); fps: forward's."""
    pt, p, apt = cfg.get("patch_size_t", 1), cfg.get("patch_size", 1), cfg.get("audio_patch_size_t", 1)
    tokens = (frames // pt) * (height // p) * (width // p)
    mask = padded_mask(batch, txt_seq, pad)
    cc = cfg.get("caption_channels", 3840)
    x = {
        "hidden_states": torch.randn(batch, tokens, cfg["in_channels"], generator=gen),
        "audio_hidden_states": torch.randn(batch, -(-audio_frames // apt), cfg["audio_in_channels"],
                                           generator=gen),
        "encoder_hidden_states": torch.randn(batch, txt_seq, cc, generator=gen),
        "audio_encoder_hidden_states": torch.randn(batch, txt_seq, cc, generator=gen),
        "timestep": torch.randint(0, 1000, (batch,), generator=gen).float(),
        "encoder_attention_mask": mask,
        "audio_encoder_attention_mask": mask.clone(),
    }
    if cfg.get("cross_attn_mod") or cfg.get("audio_cross_attn_mod"):
        # LTX-2.3's prompt modulation reads forward's sigma: LTX2Pipeline
        # passes its timestep (0-1000) there; drawn apart from the timestep
        # so that a model reading the wrong one fails
        x["sigma"] = torch.randint(0, 1000, (batch,), generator=gen).float()
    shape = {"batch": batch, "num_frames": frames, "height": height, "width": width,
             "audio_num_frames": audio_frames, "txt_seq": txt_seq}
    if fps != 24.0:
        shape["fps"] = fps
    return x, shape, {"num_frames": frames, "height": height, "width": width,
                      "audio_num_frames": audio_frames, "fps": fps}


def ltx2_forward(m, args, x):
    sample, audio = m(**args, return_dict=False)
    return {"sample": sample, "audio_sample": audio}


CASES.update({
    # video 4 heads x 6 (inner 24: 4 frequencies per axis), audio 2 heads x
    # 6 (inner 12, the cross-attention width: 6 frequencies of one axis), 2
    # blocks, 3 x 2 x 4 latents -> 24 video tokens (frame 0's clamped time), 10
    # audio latents, 8 text tokens of which sample 1 pads the last 3, batch 2
    "ltx2": dict(
        cls=LTX2VideoTransformer3DModel, model="ltx2", forward=ltx2_forward,
        cfg=dict(in_channels=8, out_channels=6, num_attention_heads=4, attention_head_dim=6,
                 cross_attention_dim=24, audio_in_channels=6, audio_out_channels=5,
                 audio_num_attention_heads=2, audio_attention_head_dim=6,
                 audio_cross_attention_dim=12, num_layers=2, caption_channels=8),
        inputs=lambda cfg, gen: ltx2_inputs(cfg, gen, batch=2, frames=3, height=2, width=4,
                                            audio_frames=10, txt_seq=8, pad=[0, 3])),
    # the odd corners: video 3 heads x 6 (inner 18), audio 3 heads x 4
    # (12), patch 2 on the video (the coordinates' patch bounds), audio
    # patch_t 2 over 7 audio frames (4 latents), norms with weights, no q/k/v
    # biases, feed-forwards without biases, float32 RoPE frequencies, 25 fps,
    # 4 x 6 x 4 latents -> 12 video tokens, 7 text tokens (2 padded), sharded
    "ltx2_odd": dict(
        cls=LTX2VideoTransformer3DModel, model="ltx2", forward=ltx2_forward, shard="60KB",
        cfg=dict(in_channels=4, out_channels=None, patch_size=2, patch_size_t=2,
                 num_attention_heads=3, attention_head_dim=6, cross_attention_dim=18,
                 audio_in_channels=5, audio_out_channels=3, audio_patch_size_t=2,
                 audio_num_attention_heads=3, audio_attention_head_dim=4,
                 audio_cross_attention_dim=12, num_layers=2, caption_channels=6,
                 norm_elementwise_affine=True, attention_bias=False, ff_bias=False,
                 audio_ff_bias=False, rope_double_precision=False),
        inputs=lambda cfg, gen: ltx2_inputs(cfg, gen, batch=1, frames=4, height=6, width=4,
                                            audio_frames=7, txt_seq=7, pad=[2], fps=25.0)),
    # rope_type "split" (the released LTX-2's): video 4 heads x 8 (inner 32:
    # 5 frequencies per axis, one padding column per table row), audio 2
    # heads x 8 (16: the cross-attention tables' 4 and 2 heads of 4 and 8
    # columns), 3 x 2 x 3 latents -> 18 video tokens, 7 audio latents, 12
    # text tokens (sample 1 pads 5; the _cp_plan splits the text too), batch 2
    "ltx2_split": dict(
        cls=LTX2VideoTransformer3DModel, model="ltx2", forward=ltx2_forward,
        cfg=dict(in_channels=6, out_channels=5, num_attention_heads=4, attention_head_dim=8,
                 cross_attention_dim=32, audio_in_channels=5, audio_out_channels=4,
                 audio_num_attention_heads=2, audio_attention_head_dim=8,
                 audio_cross_attention_dim=16, num_layers=2, caption_channels=8,
                 rope_type="split"),
        inputs=lambda cfg, gen: ltx2_inputs(cfg, gen, batch=2, frames=3, height=2, width=3,
                                            audio_frames=7, txt_seq=12, pad=[0, 5])),
    # LTX-2.3: the per-head gates of every attention (gated_attn,
    # audio_gated_attn) and the prompt modulation from sigma (cross_attn_mod,
    # audio_cross_attn_mod: 9 time-embedding params, prompt_adaln). Video 3
    # heads x 6 (inner 18), audio 3 heads x 4 (12), 3 x 3 x 1 latents -> 9
    # video tokens, 5 audio latents, 6 text tokens (sample 1 pads 2), batch 2
    "ltx2_23": dict(
        cls=LTX2VideoTransformer3DModel, model="ltx2", forward=ltx2_forward,
        cfg=dict(in_channels=5, out_channels=3, num_attention_heads=3, attention_head_dim=6,
                 cross_attention_dim=18, audio_in_channels=4, audio_out_channels=3,
                 audio_num_attention_heads=3, audio_attention_head_dim=4,
                 audio_cross_attention_dim=12, num_layers=2, caption_channels=7,
                 gated_attn=True, audio_gated_attn=True, cross_attn_mod=True,
                 audio_cross_attn_mod=True),
        inputs=lambda cfg, gen: ltx2_inputs(cfg, gen, batch=2, frames=3, height=3, width=1,
                                            audio_frames=5, txt_seq=6, pad=[0, 2])),
    # bf16: video 2 heads x 16, audio 2 heads x 8, 2 x 2 x 4 latents, 6
    # audio latents, 6 text tokens (the last 2 padded)
    "ltx2_bf16": dict(
        cls=LTX2VideoTransformer3DModel, model="ltx2", forward=ltx2_forward, dtype=torch.bfloat16,
        cfg=dict(in_channels=6, out_channels=6, num_attention_heads=2, attention_head_dim=16,
                 cross_attention_dim=32, audio_in_channels=4, audio_out_channels=4,
                 audio_num_attention_heads=2, audio_attention_head_dim=8,
                 audio_cross_attention_dim=16, num_layers=2, caption_channels=8),
        inputs=lambda cfg, gen: ltx2_inputs(cfg, gen, batch=1, frames=2, height=2, width=4,
                                            audio_frames=6, txt_seq=6, pad=[2])),
})


# --- MiniMax-H3 (models/minimax_h3.plan) -----------------------------------------
from diffusers import MiniMaxH3Transformer3DModel  # noqa: E402  (this section's class)


def minimax_keep_fp32(name):
    """Whether a parameter is one of MiniMaxH3Transformer3DModel's
    _keep_in_fp32_modules, matched as diffusers' loader matches them (a
    component of the name)."""
    return any(k in name.split(".") for k in MiniMaxH3Transformer3DModel._keep_in_fp32_modules)


def minimax_save(model, dtype):
    """The release's mixed checkpoint: the _keep_in_fp32_modules' parameters
    in float32 (at full precision, not rounded through bf16), the rest in the
    case's dtype."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if dtype == torch.float32 or not minimax_keep_fp32(n):
                p.data = p.data.to(dtype)


def minimax_load(cls, folder, dt):
    """from_pretrained(folder, torch_dtype=dt) as diffusers 0.42.1 loads this
    class (its low_cpu_mem_usage path, which needs accelerate): the
    _keep_in_fp32_modules' parameters in float32, the rest in dt, the
    computed rope.inv_freq buffer float32 ("rope" is in the list)."""
    from safetensors.torch import load_file
    m = cls.from_config(cls.load_config(folder))
    sd = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            sd.update(load_file(os.path.join(folder, f)))
    m.load_state_dict(sd, strict=True)
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.data = sd[n].to(torch.float32 if minimax_keep_fp32(n) else dt)
    return m


def minimax_inputs(cfg, gen, batch, layout, timesteps, frames, grid, empty=()):
    """A packed sequence in forward's layout: `layout` the modality of each
    row in order ("t" text, "v" video, "a" audio; "-" a row no modality
    fills, which stays zeros), video rows the (frame, row, col) of a
    frames x grid patch grid (frame 0 the conditioning frame, at
    timestep_indices 0), audio rows at (index, 0, 0), text rows at (0, 0,
    0) + their index on every axis; `timesteps` the distinct values."""
    pt, ph, pw = cfg["patch_size"]
    tv = [i for i, c in enumerate(layout) if c == "v"]
    ta = [i for i, c in enumerate(layout) if c == "a"]
    tt = [i for i, c in enumerate(layout) if c == "t"]
    seq = len(layout)
    assert len(tv) == frames * grid[0] * grid[1]
    pos = torch.zeros(seq, 3, dtype=torch.long)
    tags = torch.zeros(seq, dtype=torch.long)
    tidx = torch.zeros(seq, dtype=torch.long)
    for k, i in enumerate(tv):
        f, r, c = k // (grid[0] * grid[1]), k // grid[1] % grid[0], k % grid[1]
        pos[i] = torch.tensor([f, r, c])
        tags[i] = 0
        tidx[i] = 0 if f == 0 else len(timesteps) - 1
    for k, i in enumerate(ta):
        pos[i] = torch.tensor([k, 0, 0])
        tags[i] = 2
        tidx[i] = len(timesteps) - 1
    for k, i in enumerate(tt):
        pos[i] = torch.tensor([k, k, k])
        tags[i] = 1
        tidx[i] = min(1, len(timesteps) - 1)
    for i, c in enumerate(layout):
        if c == "-":
            tags[i] = 1
    x = {
        "hidden_states": torch.randn(batch, len(tv), cfg["in_channels"] * pt * ph * pw, generator=gen),
        "audio_hidden_states": torch.randn(batch, len(ta), cfg["audio_in_channels"], generator=gen),
        "encoder_hidden_states": torch.randn(batch, len(tt), cfg["text_dim"], generator=gen),
        "timestep": torch.tensor(timesteps, dtype=torch.float32),
        "timestep_indices": tidx,
        "token_tags": tags,
        "position_ids": pos,
        "video_indices": torch.tensor(tv, dtype=torch.long),
        "audio_indices": torch.tensor(ta, dtype=torch.long),
        "text_indices": torch.tensor(tt, dtype=torch.long),
    }
    shape = {"batch": batch, "num_video_tokens": len(tv), "num_audio_tokens": len(ta),
             "num_text_tokens": len(tt), "seq_len": seq, "num_timesteps": len(timesteps)}
    return x, shape, {}


def minimax_forward(m, args, x):
    """Both outputs, by MiniMaxH3TransformerOutput's names."""
    video, audio = m(**args, return_dict=False)
    return {"sample": video, "audio_sample": audio}


_MINIMAX = dict(cls=MiniMaxH3Transformer3DModel, model="minimax_h3", forward=minimax_forward,
                save=minimax_save, load=minimax_load)
CASES.update({
    # 4 heads x 16 (inner 64 on a 24-wide stream), rope_freq_dim 2 (12 of each
    # head's 16 channels rotated, 4 passed through), 2 blocks, 1 refiner
    # block; 16 packed rows (4 text, 2 x 2 x 2 video patches of which frame 0
    # conditions at timestep 0, 4 audio) interleaved, two timesteps
    "minimax_h3": dict(
        **_MINIMAX,
        cfg=dict(num_attention_heads=4, attention_head_dim=16, hidden_size=24, num_layers=2,
                 num_refiner_layers=1, ffn_dim=40, in_channels=4, audio_in_channels=6,
                 patch_size=[1, 2, 2], text_dim=12, freq_dim=16, time_embed_hidden_dim=20,
                 time_embed_dim=10, rope_freq_dim=2, rope_theta=10000.0),
        inputs=lambda cfg, gen: minimax_inputs(cfg, gen, batch=1, layout="ttttvvvvaaaavvvv",
                                               timesteps=[0.0, 0.63], frames=2, grid=(2, 2))),
    # the odd corners, sharded: 3 heads x 14 (12 rotated, 2 passed), patch
    # (1, 1, 2), 3 blocks, 2 refiner blocks, batch 2, eps of their own; 15
    # packed rows (3 text, 6 video, 5 audio and one row no modality fills),
    # three timesteps
    "minimax_h3_odd": dict(
        **_MINIMAX, shard="30KB",
        cfg=dict(num_attention_heads=3, attention_head_dim=14, hidden_size=18, num_layers=3,
                 num_refiner_layers=2, ffn_dim=20, in_channels=3, audio_in_channels=5,
                 patch_size=[1, 1, 2], text_dim=7, freq_dim=8, time_embed_hidden_dim=12,
                 time_embed_dim=6, rope_freq_dim=2, rope_theta=500.0, norm_eps=1e-6,
                 qk_norm_eps=1e-4, final_norm_eps=1e-3),
        inputs=lambda cfg, gen: minimax_inputs(cfg, gen, batch=2, layout="tavvvtaav-avvta",
                                               timesteps=[0.0, 0.41, 0.9], frames=2,
                                               grid=(1, 3))),
    # bf16 with the release's float32 modules (proj_in, audio_proj_in,
    # time_embedder, proj_out, audio_proj_out stored and run in float32 by
    # diffusers): 2 heads x 16, 2 blocks, 12 packed rows
    "minimax_h3_bf16": dict(
        **_MINIMAX, dtype=torch.bfloat16,
        cfg=dict(num_attention_heads=2, attention_head_dim=16, hidden_size=24, num_layers=2,
                 num_refiner_layers=1, ffn_dim=32, in_channels=4, audio_in_channels=6,
                 patch_size=[1, 2, 2], text_dim=12, freq_dim=16, time_embed_hidden_dim=20,
                 time_embed_dim=10, rope_freq_dim=2),
        inputs=lambda cfg, gen: minimax_inputs(cfg, gen, batch=1, layout="ttttvvvvaaaa",
                                               timesteps=[0.5], frames=1, grid=(2, 2))),
})


def parallel_plans(cls):
    """The class's _cp_plan and _tp_plan as JSON (tests/models_plans.py checks
    that models/*.plan writes them): a _cp_plan entry's inputs by port (a
    name, or an output's position), its outputs' gather dims; a _tp_plan
    style by name, or by its class (PackedRowwiseParallel)."""
    def cp_value(v):
        if isinstance(v, (list, tuple)):
            return {"outputs": [{"gather_dim": o.gather_dim, "expected_dims": o.expected_dims}
                                for o in v]}
        if hasattr(v, "gather_dim"):
            return {"outputs": [{"gather_dim": v.gather_dim, "expected_dims": v.expected_dims}]}
        return {"inputs": [{"port": p, "split_dim": i.split_dim, "expected_dims": i.expected_dims,
                            "split_output": i.split_output} for p, i in v.items()]}
    cp = [dict(module=m, **cp_value(v)) for m, v in (getattr(cls, "_cp_plan", None) or {}).items()]
    tp = {m: v if isinstance(v, str) else type(v).__name__
          for m, v in (getattr(cls, "_tp_plan", None) or {}).items()}
    return {"cp_plan": cp, "tp_plan": tp}


def meta(name, case, shape, extra_args):
    return {
        "generator": "tools/gen_models.py",
        "case": name,
        "class": case["cls"].__name__,
        "model": case["model"],
        "dtype": "bf16" if case.get("dtype") == torch.bfloat16 else "f32",
        "sharded": bool(case.get("shard")),
        "shape": shape,
        "forward_args": extra_args,
        "parallel_plans": parallel_plans(case["cls"]),
        "seed": SEED,
        "diffusers": diffusers.__version__,
        "torch": torch.__version__,
    }


def rel_error(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def gen(name):
    """Saves the model, then runs the folder as a user would load it
    (`from_pretrained(..., torch_dtype=...)`; in bf16 this keeps diffusers'
    `_keep_in_fp32_modules`, e.g. Wan's time embedder, in float32)."""
    case = CASES[name]
    model, g = build(case["cls"], case["cfg"])
    if "init" in case:  # parameters `randomize` leaves at diffusers' init (zeros)
        case["init"](model, g)
    x, shape, extra_args = case["inputs"](case["cfg"], g)
    dtype = case.get("dtype", torch.float32)
    d = os.path.join(OUTDIR, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    kw = {"max_shard_size": case["shard"]} if case.get("shard") else {}
    if "save" in case:  # a checkpoint of mixed dtypes, as the release ships it
        case["save"](model, dtype)
    else:
        model.to(dtype)
    model.save_pretrained(os.path.join(d, "transformer"), safe_serialization=True, **kw)

    def run(dt):
        if "load" in case:  # a class whose from_pretrained needs what the venv lacks
            m = case["load"](case["cls"], os.path.join(d, "transformer"), dt).eval()
        else:
            m = case["cls"].from_pretrained(os.path.join(d, "transformer"), torch_dtype=dt).eval()
        args = {k: (v.to(dt) if v.is_floating_point() else v) for k, v in x.items()}
        if "img_shapes" in extra_args:
            args["img_shapes"] = [tuple(s) for s in extra_args["img_shapes"]]
        for k in ("num_frames", "height", "width", "audio_num_frames", "fps"):
            if k in extra_args:
                args[k] = extra_args[k]
        if "rope_interpolation_scale" in extra_args:
            args["rope_interpolation_scale"] = tuple(extra_args["rope_interpolation_scale"])
        with torch.no_grad():
            if "forward" in case:  # a case whose forward is more than one call
                return case["forward"](m, args, x)
            return m(**args, return_dict=False)[0]

    # a dict: several outputs by name (LTX-2's and MiniMax-H3's sample and
    # audio_sample)
    outs = run(dtype)
    outs = outs if isinstance(outs, dict) else {"sample": outs}
    sample = outs["sample"]
    m = meta(name, case, shape, extra_args)
    if dtype != torch.float32:
        # the bf16 inputs it ran on are what the fixture stores (exact in f32);
        # how far bf16 is from float32 on the same (bf16-rounded) weights
        x = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in x.items()}
        ref = run(torch.float32)
        ref = ref if isinstance(ref, dict) else {"sample": ref}
        m["bf16_vs_f32_max_rel_error"] = round(max(rel_error(outs[k], ref[k]) for k in outs), 6)
    # the safetensors' metadata: the case without its plans (fixture.json has them)
    flat = {k: v if isinstance(v, str) else json.dumps(v) for k, v in m.items()
            if k != "parallel_plans"}
    save_file({k: v.float() for k, v in x.items()}, os.path.join(d, "inputs.safetensors"), flat)
    save_file({k: v.float() for k, v in outs.items()}, os.path.join(d, "expected.safetensors"), flat)
    with open(os.path.join(d, "fixture.json"), "w") as f:
        json.dump(m, f, indent=2, sort_keys=True)
        f.write("\n")
    files = [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs]
    size = sum(os.path.getsize(f) for f in files)
    print(f"{name}: sample {list(sample.shape)}, max |sample| {sample.abs().max().item():.4g}, "
          f"{size // 1024} KiB in {len(files)} files")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*", help=f"of {', '.join(CASES)} (default: all)")
    a = ap.parse_args()
    for c in a.cases:
        if c not in CASES:
            ap.error(f"unknown case '{c}' (cases: {', '.join(CASES)})")
    torch.set_num_threads(1)  # one deterministic reduction order
    os.makedirs(OUTDIR, exist_ok=True)
    for c in a.cases or CASES:
        gen(c)


if __name__ == "__main__":
    main()

