"""minimax_h3_transformer.py TMPDIR — dtpc.torch's MiniMaxH3Transformer3DModel adapter
with the project's Python environment (tests/python.sh): a tiny random-weight
transformer (10 heads x 14 on an 18-wide stream, 12 of each head's channels rotated,
2 blocks, 1 refiner block; weights drawn by dtpc.porting.randomize so that every part
shows) parallelized on 1 rank, Ulysses 2, Ring 2 (both rotations), USP 2 x 2,
Ulysses Anything 4 (10 heads padded to 12) and Ring Anything 4; both outputs of its
MiniMaxH3TransformerOutput (`sample`, `audio_sample`) against the stock module's on
the same weights and inputs within 1e-4 (float32, normwise: max |got - ref| / max
|ref|). Two packed sequences, interleaved as forward allows: 16 rows, batch 1 (the
plain plans need the rows divisible by the degree) and 15 rows, batch 2, one row no
modality fills (the anything modes split them unevenly). The refusals, each a
DtpcError naming the argument; bf16 storage past 256 packed rows refused by the
session. Negative control: one weight perturbed in dtpc's copy only must move both
outputs past 1e-4. Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per
check. Run with PYTHONPATH=python and DTPC_BUILD=BUILD."""
import os
import sys

import torch

import dtpc.porting
import dtpc.torch
from harness import case, mesh_cases, mesh_world, perturbed, raises

tmp = sys.argv[1]
TOL = 1e-4
CACHE = os.path.join(tmp, "cache-minimax-h3")

from diffusers import MiniMaxH3Transformer3DModel  # noqa: E402

CFG = dict(num_attention_heads=10, attention_head_dim=14, hidden_size=18, num_layers=2,
           num_refiner_layers=1, ffn_dim=20, in_channels=3, audio_in_channels=5,
           patch_size=[1, 1, 2], text_dim=7, freq_dim=8, time_embed_hidden_dim=12,
           time_embed_dim=6, rope_freq_dim=2, rope_theta=500.0, norm_eps=1e-6,
           qk_norm_eps=1e-4, final_norm_eps=1e-3)
STOCK = MiniMaxH3Transformer3DModel(**CFG)
dtpc.porting.randomize(STOCK, 0)
STOCK.eval()
g = torch.Generator().manual_seed(5)


def packed(layout, batch, timesteps):
    """Forward's arguments for a packed sequence: layout[i] is row i's modality ("t"
    text, "v" video, "a" audio, "-" none: it stays zeros). Video row k is patch
    (k // 4, k // 2 % 2, k % 2) of a 2 x 2 grid per frame, frame 0 conditioning at
    timestep 0, the rest at the last timestep; text rows at (k, k, k) and timestep 1;
    audio rows at (k, 0, 0)."""
    rows = {c: [i for i, x in enumerate(layout) if x == c] for c in "tva"}
    pos = torch.zeros(len(layout), 3, dtype=torch.long)
    tags = torch.ones(len(layout), dtype=torch.long)  # an empty row reads text's AdaLN row
    tidx = torch.zeros(len(layout), dtype=torch.long)
    last = len(timesteps) - 1
    for k, i in enumerate(rows["v"]):
        pos[i] = torch.tensor([k // 4, k // 2 % 2, k % 2])
        tags[i], tidx[i] = 0, 0 if k < 4 else last
    for k, i in enumerate(rows["a"]):
        pos[i, 0], tags[i], tidx[i] = k, 2, last
    for k, i in enumerate(rows["t"]):
        pos[i], tidx[i] = k, 1
    p = CFG["patch_size"]
    return dict(
        hidden_states=torch.randn(batch, len(rows["v"]), CFG["in_channels"] * p[0] * p[1] * p[2],
                                  generator=g),
        audio_hidden_states=torch.randn(batch, len(rows["a"]), CFG["audio_in_channels"],
                                        generator=g),
        encoder_hidden_states=torch.randn(batch, len(rows["t"]), CFG["text_dim"], generator=g),
        timestep=torch.tensor(timesteps), timestep_indices=tidx, token_tags=tags,
        position_ids=pos, video_indices=torch.tensor(rows["v"]),
        audio_indices=torch.tensor(rows["a"]), text_indices=torch.tensor(rows["t"]))


# 16 rows: 5 text, 8 video (two frames of 2 x 2), 3 audio; 15 rows: 4 text, 6 video,
# 4 audio and one empty row, batch 2, three timesteps
ARGS = {"even": packed("tvvtavvtvvatvvta", 1, [0.0, 0.63]),
        "odd": packed("tavvtv-avtavvat", 2, [0.0, 0.41, 0.9])}
with torch.no_grad():
    REF = {k: STOCK(**v) for k, v in ARGS.items()}


def err(got, ref):
    return float((got - ref).abs().max() / ref.abs().max())


def errors(out, which):
    """(sample, audio_sample) errors of a MiniMaxH3TransformerOutput against the stock's."""
    assert type(out).__name__ == "MiniMaxH3TransformerOutput", type(out)
    ref = REF[which]
    for n in ("sample", "audio_sample"):
        assert tuple(getattr(out, n).shape) == tuple(getattr(ref, n).shape), n
    return err(out.sample, ref.sample), err(out.audio_sample, ref.audio_sample)


def parallel(plan, mesh=None, weights=None, model=STOCK, **kw):
    return dtpc.torch.parallelize(model, plan, mesh=mesh, weights=weights, keep_weights=True,
                                  cache_dir=CACHE, **kw)


# plan, mesh, the packed sequences it takes
MESHES = {"single": ("minimax_h3_single", None, ("even", "odd")),
          "ulysses2": ("minimax_h3_ulysses", "ulysses = 2", ("even",)),
          "ring2": ("minimax_h3_ring", "ring = 2", ("even",)),
          "ring2_alltoall": ("minimax_h3_ring_alltoall", "ring = 2", ("even",)),
          "usp2x2": ("minimax_h3_usp", "ring = 2, ulysses = 2", ("even",)),
          "ulysses_anything4": ("minimax_h3_ulysses_anything", "ulysses = 4", ("odd",)),
          "ring_anything4": ("minimax_h3_ring_anything", "ring = 4", ("odd",))}


def mesh_check(name, plan, mesh, which):
    m = parallel(plan, mesh)
    try:
        line = []
        for w in which:
            e = errors(m(**ARGS[w]), w)
            assert max(e) <= TOL, f"{w}: sample {e[0]:.2e}, audio_sample {e[1]:.2e} > {TOL}"
            line.append(f"{w} {e[0]:.2e} / {e[1]:.2e}")
        # the ranks ran are the mesh's (the mesh string replaced the plan's)
        assert {r.graph.world for r in m._sessions.values()} == {mesh_world(mesh)}
        # return_dict=False: the pair
        got = m(**ARGS[which[0]], return_dict=False)
        assert isinstance(got, tuple) and len(got) == 2, type(got)
        assert err(got[1], REF[which[0]].audio_sample) <= TOL
        print(f"# {name}: (sample / audio_sample) " + ", ".join(line))
    finally:
        m.close()


mesh_cases("minimax_h3", MESHES, mesh_check)


@case
def minimax_h3_control_perturbed_weight():
    # the refiner's output projection: the text rows, which every row attends to,
    # so both outputs must move past 1e-4
    k = "token_refiner.refiner_blocks.0.ff.net.2.weight"
    sd = perturbed(STOCK, k)
    m = parallel("minimax_h3_ulysses", "ulysses = 2", weights=sd)
    try:
        e = errors(m(**ARGS["even"]), "even")
        assert min(e) > TOL, f"{k}[0] + 0.25 moved sample {e[0]:.2e}, audio {e[1]:.2e}: must fail"
        print(f"# control: {k}[0] + 0.25: sample {e[0]:.2e}, audio_sample {e[1]:.2e} "
              f"(must be > {TOL})")
    finally:
        m.close()


@case
def minimax_h3_refusals():
    a = ARGS["even"]
    m = parallel("minimax_h3_single")
    try:
        raises(lambda: m(**a, attention_kwargs={"scale": 0.5}), "attention_kwargs['scale'] = 0.5")
        raises(lambda: m(**dict(a, position_ids=a["position_ids"][:, :2])),
               "position_ids: shape [16, 2]")
        raises(lambda: m(**dict(a, timestep=a["timestep"][None])), "timestep: shape [1, 2]")
        # indices out of range (torch raises; dtpc's kernels would select zeros)
        raises(lambda: m(**dict(a, video_indices=a["video_indices"] + 8)),
               "video_indices: 16 is not a row of the packed sequence", "[0, 16)")
        raises(lambda: m(**dict(a, timestep_indices=a["timestep_indices"] * 2)),
               "timestep_indices: 2 is not an index of timestep")
        raises(lambda: m(**dict(a, token_tags=a["token_tags"] + 1)),
               "token_tags: 3 is not a modality tag")
        raises(lambda: m(**dict(a, text_indices=a["text_indices"].float() + 0.5)),
               "text_indices: 0.5 is not a row")
    finally:
        m.close()
    # 15 rows on plain Ring 2: the compiler's diagnostic, headed by the plan and shape
    m = parallel("minimax_h3_ring", "ring = 2")
    try:
        raises(lambda: m(**ARGS["odd"]), "minimax_h3_ring at batch=2", "seq_len=15")
    finally:
        m.close()


@case
def minimax_h3_bf16_rows_refused():
    # bf16 holds integers exactly up to 256: a bf16 session refuses an index op over
    # more packed rows (the real size runs in float32: docs/models.md), and a bf16
    # transformer runs with dtype="f32"
    bf = MiniMaxH3Transformer3DModel(**CFG).to(torch.bfloat16)
    bf.load_state_dict(STOCK.state_dict())
    a = packed("t" * 4 + "v" * 8 + "a" * 3 + "-" * 243, 1, [0.0, 0.5])
    a = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in a.items()}
    m = parallel("minimax_h3_single", model=bf)
    try:
        raises(lambda: m(**a), "index values up to 257 are not exact in bf16 storage")
    finally:
        m.close()
    # the float32 model of the same (bf16-rounded) weights and inputs; dtpc's output
    # comes back in the transformer's bf16: within 1e-2 (bf16 rounds by 2^-9)
    f32 = MiniMaxH3Transformer3DModel(**CFG)
    f32.load_state_dict({k: v.float() for k, v in bf.state_dict().items()})
    with torch.no_grad():
        ref = f32(**{k: v.float() if v.is_floating_point() else v for k, v in a.items()})
    m = parallel("minimax_h3_single", model=bf, dtype="f32")
    try:
        out = m(**a)
        assert out.sample.dtype == torch.bfloat16, out.sample.dtype
        e = (err(out.sample.float(), ref.sample), err(out.audio_sample.float(), ref.audio_sample))
        assert max(e) <= 1e-2, e
        print(f"# bf16 transformer, dtype='f32', 258 rows: {e[0]:.2e} / {e[1]:.2e}")
    finally:
        m.close()


print("checks done")
