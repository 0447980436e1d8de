"""dtpc.torch: a diffusers pipeline whose transformer runs on dtpc.

A diffusers script gains two lines (and backend="mpi" under mpirun,
backend="torchrun" under torchrun)::

    import dtpc.torch
    pipe = FluxPipeline.from_pretrained("black-forest-labs/FLUX.1-dev", torch_dtype=torch.bfloat16)
    dtpc.torch.parallelize(pipe, "flux_usp", mesh="ring = 2, ulysses = 2")
    image = pipe("a cat", num_inference_steps=28).images[0]

``parallelize`` replaces ``pipe.transformer`` (and Wan 2.2's
``pipe.transformer_2``) by a ``DtpcTransformer``: a ``torch.nn.Module``
whose ``forward`` takes the diffusers class's own arguments and returns what
it returns, and which carries what the pipelines read from their transformer
(``config``, ``dtype``, ``device``, ``cache_context``). Each shape the
pipeline calls it with (Flux batch, img_seq, txt_seq; Wan batch, num_frames,
height, width, txt_seq; Qwen-Image batch, frames, height, width from
``img_shapes``, txt_seq; LTX batch, num_frames, height, width, txt_seq,
rope_interpolation_scale; LTX-2 batch, num_frames, height, width,
audio_num_frames, txt_seq, fps; Helios batch, num_frames, height, width, txt_seq,
short_frames, mid_frames, long_frames, frame_indices; MiniMax-H3 batch,
num_video_tokens, num_audio_tokens, num_text_tokens, seq_len, num_timesteps;
Qwen-Image 2.1's cached decode step batch, height, width, txt_seq) is compiled
once, when first seen: the compiler
checks the plan at that shape first, and a shape it cannot take is a
DtpcError with its located diagnostic before any rank runs. The weights are
bound once per compiled shape, into sessions that live across steps and
calls (dtpc.Ranks). docs/python.md, "With
diffusers", says what is refused and why.
"""
import contextlib
import inspect
import json
import os
import re
import tempfile

import numpy as np
import torch

import dtpc
from dtpc import DtpcError

__all__ = ["parallelize", "DtpcTransformer"]

# The runtime this module stands on: the compile cache (a graph per shape, on disk
# across restarts) and the persistent sessions (weights bound once per shape).
_compile_cached, _models_dir, _Ranks = dtpc.compile_cached, dtpc.models_dir, dtpc.Ranks


def _tensor(x):
    """A torch tensor as it is (detached: dtpc.Ranks takes its dtype and device,
    a CUDA tensor from device memory on CUDA ranks), or a number as a float32
    numpy array."""
    if torch.is_tensor(x):
        return x.detach()
    return np.asarray(x, dtype=np.float32)


def _values(x):
    """x's values as a float32 numpy array (a host copy: for the checks that
    compare values, never for what is bound)."""
    if torch.is_tensor(x):
        return x.detach().to("cpu", torch.float32).numpy()
    return np.asarray(x, dtype=np.float32)


def _must_be_none(args, *names):
    for n in names:
        if args.get(n) is not None:
            raise DtpcError(f"{n}: not modelled by dtpc's model of this transformer "
                            "(docs/python.md, With diffusers)")


def _attention_kwargs(args, name):
    """The attention kwargs the pipelines pass: nothing, or a LoRA scale of 1
    (the weights dtpc binds are what is applied). Anything else changes the
    forward in a way the graph does not."""
    for k, v in (args.get(name) or {}).items():
        if k == "scale" and float(v) == 1.0:
            continue
        if k == "scale":
            raise DtpcError(f"{name}['scale'] = {v}: a LoRA scale other than 1 is not "
                            "modelled (fuse the LoRA at that scale first: pipe.fuse_lora"
                            "(lora_scale=...), then parallelize)")
        raise DtpcError(f"{name}[{k!r}]: not modelled by dtpc (only a LoRA 'scale' of 1 is "
                        "taken)")


def _batch_vector(args, name, batch):
    """timestep / guidance as [B]: a scalar is broadcast as diffusers' embedders do
    (a tensor stays where it is: no host copy per step)."""
    v = _tensor(args[name]).reshape(-1)
    if tuple(v.shape) == (1,):
        return v.expand(batch) if torch.is_tensor(v) else np.full((batch,), v[0], np.float32)
    if tuple(v.shape) != (batch,):
        raise DtpcError(f"{name}: shape {list(v.shape)}, expected [{batch}] (one per sample)")
    return v


def _guidance(config, a, b, inputs, model):
    """A guidance-distilled model's `guidance` input: required where the config
    has the embedder, refused where it has none."""
    if config["guidance_embeds"]:
        if a["guidance"] is None:
            raise DtpcError(f"guidance: required by a guidance-distilled {model} "
                            "(guidance_embeds = true)")
        inputs["guidance"] = _batch_vector(a, "guidance", b)
    elif a["guidance"] is not None:
        raise DtpcError(f"guidance: given, but this {model} has no guidance embedder "
                        "(guidance_embeds = false)")


def _flux(config, a):
    _must_be_none(a, "controlnet_block_samples", "controlnet_single_block_samples")
    _attention_kwargs(a, "joint_attention_kwargs")
    hs, ehs = a["hidden_states"], a["encoder_hidden_states"]
    b = hs.shape[0]
    # 3-d ids are deprecated in diffusers, which takes the first sample's
    img_ids, txt_ids = (a[n][0] if a[n].ndim == 3 else a[n] for n in ("img_ids", "txt_ids"))
    inputs = {"hidden_states": _tensor(hs), "encoder_hidden_states": _tensor(ehs),
              "pooled_projections": _tensor(a["pooled_projections"]),
              "timestep": _batch_vector(a, "timestep", b),
              "img_ids": _tensor(img_ids), "txt_ids": _tensor(txt_ids)}
    _guidance(config, a, b, inputs, "Flux")
    return {"batch": b, "img_seq": hs.shape[1], "txt_seq": ehs.shape[1]}, inputs


def _wan(config, a):
    _attention_kwargs(a, "attention_kwargs")
    hs, ehs, img = a["hidden_states"], a["encoder_hidden_states"], a.get("encoder_hidden_states_image")
    b, _, f, h, w = hs.shape
    defines = {"batch": b, "num_frames": f, "height": h, "width": w, "txt_seq": ehs.shape[1]}
    inputs = {"hidden_states": _tensor(hs), "encoder_hidden_states": _tensor(ehs)}
    t = a["timestep"]
    if torch.is_tensor(t) and t.ndim == 2:
        # Wan 2.2 TI2V (expand_timesteps): a timestep per patch token, [B, S]; the
        # plans that split it with the tokens are wan_ti2v_* (models/wan.plan)
        defines["ts_seq_len"] = t.shape[1]
        inputs["timestep"] = _tensor(t)
    else:
        inputs["timestep"] = _batch_vector(a, "timestep", b)
    if img is not None:
        # image-to-video: the image encoder's tokens (FLF2V: two frames', [2B, S, D])
        if config.get("image_dim") is None:
            raise DtpcError("encoder_hidden_states_image: given, but this transformer has no "
                            "image embedder (image_dim is None)")
        defines["img_seq"] = img.shape[1]
        inputs["encoder_hidden_states_image"] = _tensor(img)
    elif config.get("image_dim") is not None:
        raise DtpcError("encoder_hidden_states_image: required by an image-to-video Wan "
                        "(image_dim is set)")
    return defines, inputs


def _qwenimage(config, a):
    _must_be_none(a, "controlnet_block_samples", "additional_t_cond")
    # diffusers' forward cannot take it either (its time embedder has no guidance input)
    _must_be_none(a, "guidance")
    _attention_kwargs(a, "attention_kwargs")
    hs, ehs, mask = a["hidden_states"], a["encoder_hidden_states"], a["encoder_hidden_states_mask"]
    b = hs.shape[0]
    shapes = a["img_shapes"]
    if shapes is None:
        raise DtpcError("img_shapes: required ([[(frames, height, width)]] per sample)")
    # read as diffusers' QwenEmbedRope reads it: the first sample's grids
    grids = shapes[0] if isinstance(shapes, list) else shapes
    grids = grids if isinstance(grids, list) else [grids]
    if len(grids) != 1:
        raise DtpcError(f"img_shapes: {shapes!r}: dtpc's model takes one image grid per "
                        "sample (not Qwen-Image-Edit's reference images)")
    f, h, w = (int(x) for x in grids[0])
    mask = np.ones(ehs.shape[:2], np.float32) if mask is None else _tensor(mask)
    return ({"batch": b, "frames": f, "height": h, "width": w, "txt_seq": ehs.shape[1]},
            {"hidden_states": _tensor(hs), "encoder_hidden_states": _tensor(ehs),
             "encoder_hidden_states_mask": mask, "timestep": _batch_vector(a, "timestep", b)})


def _ltx(config, a):
    _must_be_none(a, "video_coords")
    _attention_kwargs(a, "attention_kwargs")
    hs, ehs = a["hidden_states"], a["encoder_hidden_states"]
    for n in ("num_frames", "height", "width", "rope_interpolation_scale",
              "encoder_attention_mask"):
        if a[n] is None:
            raise DtpcError(f"{n}: required by dtpc's LTX-Video model (None: unscaled "
                            "coordinates, is not modelled)")
    scale = [float(x) for x in (a["rope_interpolation_scale"].tolist()
                                if torch.is_tensor(a["rope_interpolation_scale"])
                                else a["rope_interpolation_scale"])]
    b = hs.shape[0]
    return ({"batch": b, "num_frames": int(a["num_frames"]), "height": int(a["height"]),
             "width": int(a["width"]), "txt_seq": ehs.shape[1],
             "rope_interpolation_scale": "[" + ",".join(repr(x) for x in scale) + "]"},
            {"hidden_states": _tensor(hs), "encoder_hidden_states": _tensor(ehs),
             "encoder_attention_mask": _tensor(a["encoder_attention_mask"]),
             "timestep": _batch_vector(a, "timestep", b)})


def _same_values(a, name, ref, what):
    """An argument the model takes as another one: None, or those values."""
    if a[name] is None:
        return
    b = ref.shape[0]
    if not np.array_equal(_values(_batch_vector(a, name, b)), _values(ref)):
        raise DtpcError(f"{name}: differs from {what}; dtpc's LTX-2 model takes {name} as "
                        f"{what} (docs/python.md, With diffusers)")


def _coords(a, name, make):
    """video_coords / audio_coords: None, or the ones forward itself would compute
    (what LTX2Pipeline passes); the model makes those from the grid."""
    if a[name] is None:
        return
    want = make()
    got = a[name]
    if tuple(got.shape) != tuple(want.shape) or not torch.equal(
            got.detach().to("cpu", torch.float32), want.to("cpu", torch.float32)):
        raise DtpcError(f"{name}: not the coordinates forward computes from num_frames, "
                        "height, width, fps and audio_num_frames (prepare_video_coords / "
                        "prepare_audio_coords); other coordinates are not modelled")


def _ltx2(config, a):
    _attention_kwargs(a, "attention_kwargs")
    _must_be_none(a, "video_self_attention_mask")
    if a["isolate_modalities"]:
        raise DtpcError("isolate_modalities: True (no audio-video cross-attention) is not "
                        "modelled (LTX2Pipeline: modality_scale=1, audio_modality_scale=1)")
    # STG perturbs the self-attention of the listed blocks that exist (forward skips
    # the other indices: LTX2Pipeline's default [28] on a smaller model is a no-op)
    stg = [i for i in a["spatio_temporal_guidance_blocks"] or []
           if 0 <= i < config["num_layers"]]
    if stg:
        raise DtpcError(f"spatio_temporal_guidance_blocks: {stg}: STG (the perturbed "
                        "self-attention) is not modelled (LTX2Pipeline: stg_scale=0, "
                        "audio_stg_scale=0)")
    hs, ahs = a["hidden_states"], a["audio_hidden_states"]
    ehs, aehs = a["encoder_hidden_states"], a["audio_encoder_hidden_states"]
    for n in ("num_frames", "height", "width", "audio_num_frames"):
        if a[n] is None:
            raise DtpcError(f"{n}: required by dtpc's LTX-2 model (it makes the RoPE "
                            "coordinates from the grid)")
    if aehs.shape[1] != ehs.shape[1]:
        raise DtpcError(f"audio_encoder_hidden_states: {aehs.shape[1]} text tokens, "
                        f"encoder_hidden_states {ehs.shape[1]}: dtpc's model takes one txt_seq "
                        "for both (as LTX2Pipeline passes them)")
    b = hs.shape[0]
    t = a["timestep"]
    if torch.is_tensor(t) and t.ndim == 2 and t.shape[1] != 1:
        raise DtpcError(f"timestep: shape {list(t.shape)}: a timestep per token is not "
                        "modelled (one per sample, [B])")
    ts = _batch_vector(a, "timestep", b)
    # audio_timestep is timestep when None; with use_cross_timestep the cross-attention
    # modulation reads sigma (video: audio_sigma, or sigma) where it reads the timesteps
    _same_values(a, "audio_timestep", ts, "timestep")
    if a["use_cross_timestep"]:
        if a["sigma"] is None:
            raise DtpcError("sigma: required with use_cross_timestep = True (diffusers reads "
                            "it for the cross-attention modulation)")
        _same_values(a, "sigma", ts, "timestep")
        _same_values(a, "audio_sigma", ts, "timestep")
    inputs = {}
    # LTX-2.3's prompt modulation embeds sigma (forward fails without it); the
    # model's one sigma input is audio_sigma too, as forward takes it when None
    if config.get("cross_attn_mod") or config.get("audio_cross_attn_mod"):
        if a["sigma"] is None:
            raise DtpcError("sigma: required with cross_attn_mod / audio_cross_attn_mod "
                            "(LTX-2.3's prompt modulation embeds it)")
        inputs["sigma"] = _batch_vector(a, "sigma", b)
        _same_values(a, "audio_sigma", inputs["sigma"], "sigma")
    fps = float(a["fps"])
    m = a["self"]
    _coords(a, "video_coords", lambda: m.rope.prepare_video_coords(
        b, int(a["num_frames"]), int(a["height"]), int(a["width"]), "cpu", fps=fps))
    _coords(a, "audio_coords", lambda: m.audio_rope.prepare_audio_coords(
        b, int(a["audio_num_frames"]), "cpu"))
    inputs.update({"hidden_states": _tensor(hs), "audio_hidden_states": _tensor(ahs),
                   "encoder_hidden_states": _tensor(ehs),
                   "audio_encoder_hidden_states": _tensor(aehs), "timestep": ts})
    for n in ("encoder_attention_mask", "audio_encoder_attention_mask"):
        if a[n] is None:
            inputs[n] = np.ones((b, ehs.shape[1]), np.float32)
        elif a[n].ndim != 2:
            raise DtpcError(f"{n}: shape {list(a[n].shape)}: a [B, txt_seq] mask (1 keeps a "
                            "token) is modelled, not an additive bias")
        else:
            inputs[n] = _tensor(a[n])
    return ({"batch": b, "num_frames": int(a["num_frames"]), "height": int(a["height"]),
             "width": int(a["width"]), "audio_num_frames": int(a["audio_num_frames"]),
             "txt_seq": ehs.shape[1], "fps": repr(fps)}, inputs)


def _flux2(config, a):
    _must_be_none(a, "kv_cache", "kv_cache_mode")
    if a.get("num_ref_tokens"):
        raise DtpcError(f"num_ref_tokens = {a['num_ref_tokens']}: reference images (Flux.2's "
                        "editing) are not modelled")
    _attention_kwargs(a, "joint_attention_kwargs")
    hs, ehs = a["hidden_states"], a["encoder_hidden_states"]
    b = hs.shape[0]
    # Flux2Pipeline passes the ids per sample [B, S, 4]; [S, 4] is every sample's
    ids = {n: a[n] if a[n].ndim == 3 else a[n].unsqueeze(0).expand(b, -1, -1)
           for n in ("img_ids", "txt_ids")}
    inputs = {"hidden_states": _tensor(hs), "encoder_hidden_states": _tensor(ehs),
              "timestep": _batch_vector(a, "timestep", b),
              "img_ids": _tensor(ids["img_ids"]), "txt_ids": _tensor(ids["txt_ids"])}
    _guidance(config, a, b, inputs, "Flux.2")
    return {"batch": b, "img_seq": hs.shape[1], "txt_seq": ehs.shape[1]}, inputs


def _sd3(config, a):
    _must_be_none(a, "block_controlnet_hidden_states", "skip_layers")
    _attention_kwargs(a, "joint_attention_kwargs")
    hs, ehs = a["hidden_states"], a["encoder_hidden_states"]
    b, _, h, w = hs.shape
    return ({"batch": b, "height": h, "width": w, "txt_seq": ehs.shape[1]},
            {"hidden_states": _tensor(hs), "encoder_hidden_states": _tensor(ehs),
             "pooled_projections": _tensor(a["pooled_projections"]),
             "timestep": _batch_vector(a, "timestep", b)})


def _helios_indices(a, name, frames, b):
    """A frame-index argument as the model takes it, [1, frames]: [1, F] as the Helios
    pipelines pass it, or [B, F] with every row the same (diffusers' tables broadcast;
    rows that differ are not modelled)."""
    idx = a[name]
    if not torch.is_tensor(idx):
        idx = torch.as_tensor(idx)
    if idx.ndim != 2 or idx.shape[0] not in (1, b) or idx.shape[1] != frames:
        raise DtpcError(f"{name}: shape {list(idx.shape)}, expected [1, {frames}] (one "
                        "frame index per latent frame in patches, one row for every sample)")
    if idx.shape[0] > 1:
        rows = _values(idx)
        if not (rows == rows[:1]).all():
            raise DtpcError(f"{name}: its {idx.shape[0]} rows differ: dtpc's Helios model "
                            "takes one row of frame indices for every sample")
        idx = idx[:1]
    return _tensor(idx)


def _helios(config, a):
    _attention_kwargs(a, "attention_kwargs")
    hs, ehs = a["hidden_states"], a["encoder_hidden_states"]
    b, _, f, h, w = hs.shape
    p_t = config["patch_size"][0]
    t = a["timestep"]
    if torch.is_tensor(t) and t.ndim == 2 and t.shape[1] != 1:
        raise DtpcError(f"timestep: shape {list(t.shape)}: a timestep per token is not "
                        "modelled (one per sample, [B])")
    defines = {"batch": b, "num_frames": f, "height": h, "width": w, "txt_seq": ehs.shape[1],
               "frame_indices": "false", "short_frames": 0, "mid_frames": 0,
               "long_frames": 0}
    inputs = {"hidden_states": _tensor(hs), "timestep": _batch_vector(a, "timestep", b),
              "encoder_hidden_states": _tensor(ehs)}
    if a["indices_hidden_states"] is not None:
        # None: forward's arange over the patch frames (frame_indices = false)
        defines["frame_indices"] = "true"
        inputs["indices_hidden_states"] = _helios_indices(a, "indices_hidden_states",
                                                          f // p_t, b)
    for part in ("short", "mid", "long"):
        lat, idx = f"latents_history_{part}", f"indices_latents_history_{part}"
        # forward takes a history only with its indices, and ignores either alone
        if a[lat] is None or a[idx] is None:
            continue
        x = a[lat]
        if x.ndim != 5 or x.shape[0] != b or x.shape[1] != hs.shape[1] or \
                tuple(x.shape[3:]) != (h, w):
            raise DtpcError(f"{lat}: shape {list(x.shape)}, expected [{b}, {hs.shape[1]}, "
                            f"frames, {h}, {w}] (the history on hidden_states' grid: other "
                            "grids are not modelled)")
        defines[f"{part}_frames"] = x.shape[2]
        inputs[lat] = _tensor(x)
        inputs[idx] = _helios_indices(a, idx, x.shape[2] // p_t, b)
    return defines, inputs


def _index_rows(a, name, n, what):
    """An integer argument of MiniMax-H3 (rows of the packed sequence, of the
    timestep table, modality tags) as the model takes it (float32 values, as
    dtpc carries every input), each an integer in [0, n): where torch raises on an
    index out of range, dtpc's kernels select zeros (they cannot report a value
    from the device), so the values are read here (a host copy of seq_len
    values a step)."""
    v = _values(a[name]).reshape(-1)
    bad = v[(v < 0) | (v >= n) | (v != np.round(v))]
    if bad.size:
        raise DtpcError(f"{name}: {bad[0]:g} is not {what} (an integer in [0, {n}))")
    return _tensor(a[name])


def _minimax_h3(config, a):
    _attention_kwargs(a, "attention_kwargs")
    hs, ahs, ehs = a["hidden_states"], a["audio_hidden_states"], a["encoder_hidden_states"]
    pos, t = a["position_ids"], a["timestep"]
    if pos.ndim != 2 or pos.shape[1] != 3:
        raise DtpcError(f"position_ids: shape {list(pos.shape)}, expected [seq_len, 3] (the "
                        "(t, h, w) coordinates of every packed row)")
    if t.ndim != 1:
        raise DtpcError(f"timestep: shape {list(t.shape)}, expected [num_timesteps] (the "
                        "distinct noise levels, which timestep_indices address)")
    seq, nt = pos.shape[0], t.shape[0]
    inputs = {"hidden_states": _tensor(hs), "audio_hidden_states": _tensor(ahs),
              "encoder_hidden_states": _tensor(ehs), "timestep": _tensor(t),
              "position_ids": _tensor(pos),
              "timestep_indices": _index_rows(a, "timestep_indices", nt, "an index of timestep"),
              "token_tags": _index_rows(a, "token_tags", 3,
                                        "a modality tag (0 video, 1 text, 2 audio)")}
    for n in ("video_indices", "audio_indices", "text_indices"):
        inputs[n] = _index_rows(a, n, seq, "a row of the packed sequence (position_ids' rows)")
    return ({"batch": hs.shape[0], "num_video_tokens": hs.shape[1],
             "num_audio_tokens": ahs.shape[1], "num_text_tokens": ehs.shape[1], "seq_len": seq,
             "num_timesteps": nt}, inputs)


def _qwenimage21(config, a):
    _attention_kwargs(a, "attention_kwargs")
    mode, cache = a["kv_cache_mode"], a["kv_cache"]
    if mode != "cached":
        raise DtpcError(f"kv_cache_mode: {mode!r}: dtpc's Qwen-Image 2.1 model is the cached "
                        "decode step only (kv_cache_mode = 'cached', every step after the "
                        "first, with the kv_cache that step filled); the prefill ('extract', "
                        "or no cache at all) is block-causal attention, which it does not "
                        "model (docs/models.md, Qwen-Image 2.1)")
    if cache is None:
        raise DtpcError("kv_cache: required with kv_cache_mode = 'cached' (the "
                        "QwenImage21KVCache the first step filled)")
    hs, ehs = a["hidden_states"], a["encoder_hidden_states"]
    b = hs.shape[0]
    layers = cache.layer_caches
    if len(layers) != config["num_layers"] or any(c.k is None for c in layers):
        raise DtpcError(f"kv_cache: {sum(c.k is not None for c in layers)} of its "
                        f"{len(layers)} blocks filled, the model has {config['num_layers']}: "
                        "the cache of the first step (kv_cache_mode = 'extract') of this "
                        "transformer is required")
    txt = layers[0].k.shape[1]
    shapes = a["img_shapes"]
    grids = list(shapes[0]) if shapes else []
    # diffusers reads the first sample's layout (the samples share it)
    if len(grids) != 1 or len(grids[0]) != 3 or int(grids[0][0]) != 1:
        raise DtpcError(f"img_shapes: {shapes!r}: dtpc's model takes text to image, one target "
                        "grid [(1, height, width)] per sample (condition images are not "
                        "modelled)")
    _, h, w = (int(x) for x in grids[0])
    if hs.shape[1] != h * w:
        raise DtpcError(f"hidden_states: {hs.shape[1]} tokens, the target's {h} x {w} grid has "
                        f"{h * w}: condition images' latents are not modelled")
    if ehs.shape[1] != txt:
        raise DtpcError(f"encoder_hidden_states: {ehs.shape[1]} tokens, the kv_cache holds "
                        f"{txt}: the cache is this prompt's (text to image: the cached prefix "
                        "is the text)")
    # text to image's layout, which the model builds itself: the prompt's slots,
    # none an image, then one per 2 x 2 group of target latents (row 0, as diffusers
    # reads it)
    want = np.concatenate([np.zeros(txt, np.float32), np.ones(h * w // 4, np.float32)])
    got = _values(a["img_mask"][0])
    if got.shape != want.shape or not np.array_equal(got, want):
        raise DtpcError(f"img_mask: not text to image's ({txt} prompt slots with no image, "
                        f"then {h * w // 4} target slots): condition images in the prompt are "
                        "not modelled")
    mask = a["encoder_hidden_states_mask"]
    # block i's [B, txt, heads, head_dim] at columns i * inner (the plan's inputs)
    inputs = {"hidden_states": _tensor(hs), "timestep": _batch_vector(a, "timestep", b),
              "encoder_hidden_states_mask": (np.ones((b, txt), np.float32) if mask is None
                                             else _tensor(mask)),
              "kv_cache_k": _tensor(torch.cat([c.k.flatten(2) for c in layers], dim=2)),
              "kv_cache_v": _tensor(torch.cat([c.v.flatten(2) for c in layers], dim=2))}
    return {"batch": b, "height": h, "width": w, "txt_seq": txt}, inputs


# diffusers class -> (model file of models/, its adapter: call arguments -> shape, inputs)
_FAMILIES = {
    "FluxTransformer2DModel": ("flux.plan", _flux),
    "Flux2Transformer2DModel": ("flux2.plan", _flux2),
    "WanTransformer3DModel": ("wan.plan", _wan),
    # ChronoEdit is Wan's forward with another RoPE: plans over wan.plan's model
    "ChronoEditTransformer3DModel": ("chronoedit.plan", _wan),
    "QwenImageTransformer2DModel": ("qwenimage.plan", _qwenimage),
    "LTXVideoTransformer3DModel": ("ltx.plan", _ltx),
    "LTX2VideoTransformer3DModel": ("ltx2.plan", _ltx2),
    "SD3Transformer2DModel": ("sd3.plan", _sd3),
    "HeliosTransformer3DModel": ("helios.plan", _helios),
    "MiniMaxH3Transformer3DModel": ("minimax_h3.plan", _minimax_h3),
    # the cached decode step only (every denoising step but the first)
    "QwenImage21Transformer2DModel": ("qwenimage21.plan", _qwenimage21),
}
_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
# what forward returns: (module, output class, the graph's outputs in its order); the
# rest return Transformer2DModelOutput's sample
_OUTPUTS = {"LTX2VideoTransformer3DModel": ("diffusers.models.transformers.transformer_ltx2",
                                            "AudioVisualModelOutput", ("sample", "audio_sample")),
            "MiniMaxH3Transformer3DModel": ("diffusers.models.transformers.transformer_minimax_h3",
                                            "MiniMaxH3TransformerOutput",
                                            ("sample", "audio_sample"))}
_SAMPLE = ("diffusers.models.modeling_outputs", "Transformer2DModelOutput", ("sample",))
# the parameter-free modules a pipeline calls on its transformer, kept on the
# DtpcTransformer (LTX2Pipeline: rope.prepare_video_coords, audio_rope.prepare_audio_coords)
_KEEP = {"LTX2VideoTransformer3DModel": ("rope", "audio_rope")}


def _plan_file(plan, class_name):
    """(file, plan name) of `plan`: a plan of the class's model file, "FILE.plan" or
    "FILE.plan:NAME"."""
    path, _, name = plan.rpartition(":") if ".plan:" in plan else (plan, "", None)
    if not path.endswith(".plan"):
        path, name = os.path.join(_models_dir(), _FAMILIES[class_name][0]), plan
    if not os.path.isfile(path):
        raise DtpcError(f"plan: no plan file {path!r}")
    names = re.findall(r"^\s*plan\s+(\w+)", open(path).read(), re.M)
    if name is not None and name not in names:
        raise DtpcError(f"plan: {name!r} is not a plan of {path} (its plans: "
                        f"{', '.join(names)})")
    if name is None and len(names) != 1:
        raise DtpcError(f"plan: {path} holds {len(names)} plans: name one "
                        f"(\"{path}:NAME\"; its plans: {', '.join(names)})")
    return path, name


class DtpcTransformer(torch.nn.Module):
    """A diffusers transformer replaced by dtpc graphs, one per shape it is called
    with. Made by ``parallelize``; the arguments are its."""

    def __init__(self, transformer, plan, mesh=None, context=None, backend=None, device=None,
                 dtype=None, ranks=None, threads=None, weights=None, keep_weights=False,
                 cache_dir=None):
        super().__init__()
        name = type(transformer).__name__
        if name not in _FAMILIES:
            raise DtpcError(f"transformer: {name} is not one of dtpc's models "
                            f"({', '.join(_FAMILIES)})")
        if backend not in (None, "local", "mpi", "torchrun"):
            raise DtpcError(f"backend: {backend!r} is not one of 'local', 'mpi', 'torchrun'")
        self._plan_path, self._plan = _plan_file(plan, name)
        self._adapter = _FAMILIES[name][1]
        self._outputs = _OUTPUTS.get(name, _SAMPLE)
        for n in _KEEP.get(name, ()):
            setattr(self, n, getattr(transformer, n))
        self._signature = inspect.signature(type(transformer).forward)
        self.config = transformer.config
        self._dtype, self._device = transformer.dtype, transformer.device
        self._options = dict(mesh=mesh, context=context, cache_dir=cache_dir,
                             dtype=dtype or _DTYPES.get(self._dtype))
        # device None: the backend's (cuda for torchrun, else cpu)
        self._run = dict(ranks=ranks, backend=backend or "local", device=device,
                         threads=threads)
        self._folder = tempfile.TemporaryDirectory(prefix="dtpc-config-")
        self._config = os.path.join(self._folder.name, "config.json")
        with open(self._config, "w") as f:
            json.dump(dict(transformer.config), f)
        self._sessions = {}  # shape (sorted defines) -> _Ranks, weights bound
        self.cache_name = None
        if weights is not None and not isinstance(weights, dict):
            self._weights = os.fspath(weights)
            if not os.path.exists(self._weights):
                raise DtpcError(f"weights: no file or folder {self._weights!r}")
        else:
            sd = weights if weights is not None else transformer.state_dict()
            lora = [k for k in sd if "lora_" in k or ".base_layer." in k]
            if lora:
                raise DtpcError(f"transformer: LoRA layers are loaded ({lora[0]}): fuse them "
                                "first (pipe.fuse_lora(); pipe.unload_lora_weights())")
            # the tensors themselves, no copy: the source of every later shape's binding
            self._weights = {k: v.detach() for k, v in sd.items()}
        if not keep_weights:
            for p in list(transformer.parameters()) + list(transformer.buffers()):
                p.data = torch.empty(0, dtype=p.dtype, device=p.device)

    @property
    def dtype(self):
        return self._dtype

    @property
    def device(self):
        return self._device

    @property
    def rank(self):
        """This process's rank once a shape has run (under mpirun, MPI's; under
        torchrun, its RANK; local ranks: 0)."""
        # dtpc.Ranks' rank is None for local ranks (all of them are here): the
        # process then acts as rank 0
        rank = next(iter(self._sessions.values())).rank if self._sessions else None
        return 0 if rank is None else rank

    @contextlib.contextmanager
    def cache_context(self, name, **kwargs):
        """What diffusers' CacheMixin.cache_context is to the pipelines: the branch
        ("cond", "uncond") of the calls inside, recorded (dtpc caches nothing across
        steps)."""
        self.cache_name = name
        try:
            yield
        finally:
            self.cache_name = None

    @property
    def encoder_hid_proj(self):
        raise DtpcError("ip_adapter_image: IP-Adapters are not modelled by dtpc's Flux")

    def session(self, defines):
        """The ranks of one shape: compiled (checked first) and the weights bound on
        first use."""
        key = tuple(sorted(defines.items()))
        if key not in self._sessions:
            shape = ", ".join(f"{k}={v}" for k, v in key)
            try:
                graph = _compile_cached(self._plan_path, plan=self._plan, config=self._config,
                                        defines=defines, **self._options)
            except DtpcError as e:
                raise DtpcError(f"{self._plan or self._plan_path} at {shape}:\n{e}") from None
            ranks = _Ranks(graph, **self._run)
            w = self._weights
            if isinstance(w, dict):
                # the tensors this shape's graph reads: a checkpoint holds some that only
                # other shapes read (Helios' patch_short / _mid / _long and
                # history_key_scale, read with the history latents only), as a folder's
                # binding leaves them unread
                names = graph.weights
                w = {k: v for k, v in w.items() if k in names}
            ranks.bind_weights(w)
            self._sessions[key] = ranks
        return self._sessions[key]

    def forward(self, *args, **kwargs):
        bound = self._signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = dict(bound.arguments)
        defines, inputs = self._adapter(self.config, a)
        # the outputs as torch tensors of the transformer's dtype on its device,
        # written there by the sessions (on CUDA ranks: in device memory, on the
        # current stream)
        res = self.session(defines).run(inputs, dtype=self._dtype, device=self._device)
        module, cls, names = self._outputs
        outs = tuple(res[n] for n in names)
        if not a["return_dict"]:
            return outs
        import importlib
        return getattr(importlib.import_module(module), cls)(**dict(zip(names, outs)))

    def extra_repr(self):
        shapes = "; ".join(", ".join(f"{k}={v}" for k, v in key) for key in self._sessions)
        return (f"plan={self._plan or self._plan_path!r}, mesh={self._options['mesh']!r}, "
                f"backend={self._run['backend']!r}, shapes compiled: [{shapes}]")

    def close(self):
        """Ends the sessions (their weights and arenas)."""
        for r in self._sessions.values():
            r.close()
        self._sessions.clear()


def parallelize(pipe_or_transformer, plan, mesh=None, context=None, backend=None, device=None,
                dtype=None, ranks=None, threads=None, weights=None, keep_weights=False,
                cache_dir=None):
    """Runs a diffusers transformer on dtpc.

    ``pipe_or_transformer``: a pipeline (its ``transformer``, and ``transformer_2``
    when it has one, are replaced; the pipeline is returned) or a transformer (the
    DtpcTransformer is returned). ``plan``: a plan of the model file of the
    transformer's class (``"flux_usp"`` in models/flux.plan), a plan file or
    ``"FILE.plan:NAME"``; ``mesh`` / ``context`` replace the plan's. ``backend``:
    ``"local"`` (default: the ranks are threads of this process), ``"mpi"``
    (under mpirun, one rank per process; every process runs the pipeline) or
    ``"torchrun"`` (under torchrun, one rank per process and GPU over NCCL;
    every process runs the pipeline). ``device``: "cpu" or "cuda" (default:
    "cuda" for torchrun, else "cpu").
    ``ranks``, ``threads``: local ranks (default: the graph's world), CPU threads per
    rank. ``dtype``: dtpc's storage dtype ("f32", "bf16"; default: the
    transformer's). ``weights``: the folder the transformer was loaded from (each
    rank reads its slices; for a pipeline, its folder or the transformer's), or a
    mapping name -> tensor; default: the transformer's state_dict. The stock
    transformer's parameters are released unless ``keep_weights``.
    ``cache_dir``: where compiled graphs are kept."""
    opts = dict(mesh=mesh, context=context, backend=backend, device=device, dtype=dtype,
                ranks=ranks, threads=threads, keep_weights=keep_weights, cache_dir=cache_dir)
    if isinstance(pipe_or_transformer, torch.nn.Module):
        return DtpcTransformer(pipe_or_transformer, plan, weights=weights, **opts)
    pipe = pipe_or_transformer
    names = [n for n in ("transformer", "transformer_2") if getattr(pipe, n, None) is not None]
    if not names:
        raise DtpcError(f"pipe_or_transformer: {type(pipe).__name__} has no transformer")
    for n in names:
        w = weights
        if isinstance(weights, (str, os.PathLike)) and os.path.isdir(os.path.join(weights, n)):
            w = os.path.join(weights, n)
        elif len(names) > 1 and weights is not None:
            raise DtpcError(f"weights: {type(pipe).__name__} has {' and '.join(names)}: give "
                            "the pipeline's folder (with a subfolder for each)")
        setattr(pipe, n, DtpcTransformer(getattr(pipe, n), plan, weights=w, **opts))
    return pipe
