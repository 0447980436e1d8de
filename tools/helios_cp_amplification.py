#!/usr/bin/env python3
"""helios_cp_amplification.py — what diffusers' _cp_plan makes of Helios' is_amplify_history
(docs/models.md, "Helios"). Run by hand from the checkout, with diffusers and
accelerate: python3 tools/helios_cp_amplification.py"""
# What diffusers' _cp_plan makes of is_amplify_history on N ranks: each rank's
# attn1 gets its shard of the sequence and reads history_seq_len =
# shard length - original_context_length. Emulated on one process: the keys
# of each shard scaled as HeliosAttnProcessor scales them on that rank, then
# the attention over the whole sequence (what ring / Ulysses attention computes).
import sys, torch
from safetensors.torch import load_file
from diffusers import HeliosTransformer3DModel
import diffusers.models.transformers.transformer_helios as th
fx = "tests/fixtures/models/helios_history"
m = HeliosTransformer3DModel.from_pretrained(fx + "/transformer").eval()
x = load_file(fx + "/inputs.safetensors")
for k in list(x):
    if k.startswith("indices"): x[k] = x[k].long()
ref = load_file(fx + "/expected.safetensors")["sample"]
orig = th.apply_rotary_emb_transposed
N = [1]
def proc(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None, original_context_length=None):
    q, k, v = th._get_qkv_projections(attn, hidden_states, encoder_hidden_states)
    q = attn.norm_q(q); k = attn.norm_k(k)
    q = q.unflatten(2, (attn.heads, -1)); k = k.unflatten(2, (attn.heads, -1)); v = v.unflatten(2, (attn.heads, -1))
    if rotary_emb is not None:
        q = orig(q, rotary_emb); k = orig(k, rotary_emb)
    if not attn.is_cross_attention and attn.is_amplify_history:
        shards = list(k.tensor_split(N[0], dim=1))
        for r, ks in enumerate(shards):
            h = ks.shape[1] - original_context_length     # the rank-local length
            if h > 0:
                s = 1.0 + torch.sigmoid(attn.history_key_scale) * (attn.max_scale - 1.0)
                if attn.history_scale_mode == "per_head": s = s.view(1, 1, -1, 1)
                shards[r] = torch.cat([ks[:, :h] * s, ks[:, h:]], dim=1)
        k = torch.cat(shards, dim=1)
    o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    o = o.flatten(2, 3).type_as(q)
    return attn.to_out[1](attn.to_out[0](o))
th.HeliosAttnProcessor.__call__ = proc
S = 108; orig_len = 32
for n in (1, 2, 3, 4):
    N[0] = n
    with torch.no_grad():
        out = m(**x, return_dict=False)[0]
    e = ((out - ref).abs().max() / ref.abs().max()).item()
    per = [len(t) for t in torch.arange(S).tensor_split(n)]
    scaled = sum(max(0, p - orig_len) for p in per)
    print(f"N={n}: shard lengths {per}, keys scaled {scaled} of the {S - orig_len} history keys; max rel error vs one device {e:.3g}")
