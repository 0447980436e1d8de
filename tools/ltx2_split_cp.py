#!/usr/bin/env python3
"""ltx2_split_cp.py — what diffusers' LTX-2 _cp_plan makes of rope_type "split"
(docs/models.md, "LTX-2"). Run by hand from the checkout with diffusers:
python3 tools/ltx2_split_cp.py

The plan splits the rope modules' outputs with expected_dims = 3, but split
tables are 4-D ([B, heads, S, head_dim / 2]): the hook leaves them whole (it
warns "split will not be applied") while hidden_states is split on dim 1. So
each rank's attention applies the whole tables to its sequence shard; this
emulates that on one process with tests/fixtures/models/ltx2_split's sizes."""
import json

import torch
from diffusers import LTX2VideoTransformer3DModel
from diffusers.models.transformers.transformer_ltx2 import apply_split_rotary_emb

cfg = json.load(open("tests/fixtures/models/ltx2_split/transformer/config.json"))
m = LTX2VideoTransformer3DModel(**{k: v for k, v in cfg.items() if not k.startswith("_")})
F, H, W, P = 3, 2, 3, 2  # the fixture's latent grid; P context-parallel ranks
coords = m.rope.prepare_video_coords(1, F, H, W, "cpu", fps=24.0)
cos, sin = m.rope(coords)
print("split tables:", list(cos.shape), "(4-D: the _cp_plan's expected_dims = 3 leaves them whole)")
inner = cfg["num_attention_heads"] * cfg["attention_head_dim"]
x = torch.randn(1, F * H * W // P, inner)  # one rank's shard of the queries
try:
    apply_split_rotary_emb(x, (cos, sin))
    print("a shard against the whole tables ran")
except RuntimeError as e:
    print("a shard against the whole tables: RuntimeError:", e)
