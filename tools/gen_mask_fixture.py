#!/usr/bin/env python3
"""gen_mask_fixture.py — the key-padding mask fixtures of tests/plans/mask.plan,
made with PyTorch's scaled_dot_product_attention. Run by hand (CI has no
torch; the outputs are committed):

    /tmp/peer-venv/bin/python tools/gen_mask_fixture.py

Writes into tests/fixtures/:

  mask_sdpa.inputs.safetensors    model sdpa_mask's inputs: x [4, 16, 48]
                                  (q | k | v, 8 heads of 2) and mask [4, 16]:
                                  batch 0 keeps a random half of its keys
                                  (kept values are any nonzero number, not
                                  only 1), batch 1 none, batch 2 masks its
                                  first 8 keys (the whole chunk of one rank
                                  under ring = 2), batch 3 keeps all;
  mask_sdpa.expected.safetensors  `attn`: SDPA with attn_mask = (mask != 0),
                                  in float64, as float32 — where every key of
                                  a row is masked, this torch's SDPA gives
                                  zeros (checked here; a softmax over all -inf
                                  scores, as older SDPAs computed it, gives
                                  NaN), which is dtpc's documented choice;
  mask_joint.inputs.safetensors   model joint_mask's inputs (QwenImage's joint
                                  [text, image] attention): hidden_states,
                                  encoder_hidden_states and an
                                  encoder_hidden_states_mask with zeros
                                  (batch 1 masks all its text);
  mask_sdpa.unmasked.safetensors,
  mask_joint.unmasked.safetensors the same inputs with masks of ones: the
                                  negative controls of tests/equiv.sh (a run
                                  that ignored the mask).
"""

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import OUTDIR, meta, save_file  # noqa: E402

B, S, H, D = 4, 16, 8, 2


def sdpa_case(g):
    x = torch.randn(B, S, 3 * H * D, generator=g)
    keep = torch.ones(B, S, dtype=torch.bool)
    keep[0] = torch.randperm(S, generator=g) < S // 2
    keep[1] = False
    keep[2, : S // 2] = False
    # nonzero means keep: kept entries get values in [0.5, 2.5)
    mask = torch.where(keep, 0.5 + 2 * torch.rand(B, S, generator=g), torch.zeros(B, S))

    def heads(t):
        return t.reshape(B, S, H, D).transpose(1, 2).to(torch.float64)

    q, k, v = (heads(x[..., i * H * D:(i + 1) * H * D]) for i in range(3))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=(mask != 0)[:, None, None, :])
    # rows without keys: this torch's SDPA gives zeros, dtpc's choice too
    # (a softmax over scores that are all -inf, and older SDPAs, give NaN)
    empty = ~keep.any(dim=1)
    assert not torch.isnan(out).any() and not out[empty].any(), "SDPA: zeros for empty rows"
    naive = torch.softmax(torch.full((S,), float("-inf"), dtype=torch.float64), dim=0)
    assert torch.isnan(naive).all()
    out = out.transpose(1, 2).reshape(B, S, H * D)
    m = meta({"generator": "tools/gen_mask_fixture.py", "model": "sdpa_mask",
              "empty_rows": "zeros (SDPA's and dtpc's)"})
    save_file({"x": x, "mask": mask}, os.path.join(OUTDIR, "mask_sdpa.inputs.safetensors"), m)
    save_file({"x": x, "mask": torch.ones(B, S)},
              os.path.join(OUTDIR, "mask_sdpa.unmasked.safetensors"), m)
    save_file({"attn": out}, os.path.join(OUTDIR, "mask_sdpa.expected.safetensors"), m)


def joint_case(g):
    b, txt, img, hidden = 2, 8, 12, 32
    mask = torch.ones(b, txt)
    mask[0, 5:] = 0  # right padding, as a tokenizer pads
    mask[0, 2] = 0
    mask[1] = 0
    t = {
        "hidden_states": torch.randn(b, img, hidden, generator=g),
        "encoder_hidden_states": torch.randn(b, txt, hidden, generator=g),
        "encoder_hidden_states_mask": mask,
    }
    m = meta({"generator": "tools/gen_mask_fixture.py", "model": "joint_mask"})
    save_file(t, os.path.join(OUTDIR, "mask_joint.inputs.safetensors"), m)
    t["encoder_hidden_states_mask"] = torch.ones(b, txt)
    save_file(t, os.path.join(OUTDIR, "mask_joint.unmasked.safetensors"), m)


if __name__ == "__main__":
    g = torch.Generator().manual_seed(0)
    sdpa_case(g)
    joint_case(g)
