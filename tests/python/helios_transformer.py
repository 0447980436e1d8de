"""helios_transformer.py TMPDIR — dtpc.torch's HeliosTransformer3DModel adapter with
the project's Python environment (tests/python.sh): a tiny random-weight transformer
(tests/fixtures/models/helios_history's config: 4 heads x 8, 2 blocks, memory
patches, keys amplified per head) parallelized on 1 rank, Ulysses 2 and Ring 2, its
Transformer2DModelOutput's `sample` against the stock module's on the same weights
and inputs within 1e-4 (float32, normwise: max |got - ref| / max |ref|): forward
with the history latents as HeliosPipeline passes them (a 1 x 8 x 16 latent, 2 short
frames with non-contiguous indices, 2 mid, 8 long, indices_hidden_states, a tuple
back) and without them (batch 2, indices None); the refusals, each a DtpcError
naming the argument. Negative control: one weight perturbed in dtpc's copy only
must move the output past 1e-4. Prints "ok NAME", "FAIL NAME: why" or "skip NAME:
why" per check. Run with PYTHONPATH=python and DTPC_BUILD=BUILD."""
import json
import os
import sys

import torch

import dtpc
import dtpc.torch
from harness import case, raises

tmp = sys.argv[1]
TOL = 1e-4
CACHE = os.path.join(tmp, "cache-helios")

from diffusers import HeliosTransformer3DModel  # noqa: E402

cfg = json.load(open("tests/fixtures/models/helios_history/transformer/config.json"))
torch.manual_seed(0)
STOCK = HeliosTransformer3DModel(**{k: v for k, v in cfg.items() if not k.startswith("_")})
# history_key_scale starts at zeros: a random one, so the amplification is exercised
with torch.no_grad():
    for n, p in STOCK.named_parameters():
        if "history_key_scale" in n:
            p.copy_(torch.randn(p.shape))
STOCK.eval()
C, T, D = cfg["in_channels"], 6, cfg["text_dim"]
g = torch.Generator().manual_seed(3)


def randn(*shape):
    return torch.randn(*shape, generator=g)


# with history: HeliosPipeline's call (keep_first_frame: short = prefix + 1x, its
# indices [0, 11] not contiguous), batch 1
HIST = dict(hidden_states=randn(1, C, 1, 8, 16), timestep=torch.tensor([700.0]),
            encoder_hidden_states=randn(1, T, D),
            indices_hidden_states=torch.tensor([[12]]),
            latents_history_short=randn(1, C, 2, 8, 16),
            indices_latents_history_short=torch.tensor([[0, 11]]),
            latents_history_mid=randn(1, C, 2, 8, 16),
            indices_latents_history_mid=torch.tensor([[9, 10]]),
            latents_history_long=randn(1, C, 8, 8, 16),
            indices_latents_history_long=torch.arange(1, 9).unsqueeze(0))
# without history: batch 2, two frames, forward's own frame indices
PLAIN = dict(hidden_states=randn(2, C, 2, 4, 8), timestep=torch.tensor([300.0, 300.0]),
             encoder_hidden_states=randn(2, T, D))
with torch.no_grad():
    REF = {"hist": STOCK(**HIST).sample, "plain": STOCK(**PLAIN).sample}
ARGS = {"hist": HIST, "plain": PLAIN}


def err(got, ref):
    return float((got - ref).abs().max() / ref.abs().max())


def check(out, which, tol=TOL):
    assert type(out).__name__ == "Transformer2DModelOutput", type(out)
    e = err(out.sample, REF[which])
    assert tuple(out.sample.shape) == tuple(REF[which].shape), out.sample.shape
    assert e <= tol, f"{which}: sample {e:.2e} > {tol}"
    return e


def parallel(plan, mesh=None, context=None, weights=None):
    return dtpc.torch.parallelize(STOCK, plan, mesh=mesh, context=context, weights=weights,
                                  keep_weights=True, cache_dir=CACHE)


MESHES = {"single": ("helios_single", None, None),
          "ulysses2": ("helios_ulysses", "ulysses = 2", None),
          "ring2": ("helios_ring", "ring = 2", None)}


def mesh_case(name, plan, mesh, context):
    def fn():
        m = parallel(plan, mesh, context)
        try:
            e = {w: check(m(**ARGS[w]), w) for w in ("hist", "plain")}
            # the pipeline's call style: a tuple back
            got = m(**HIST, return_dict=False)
            assert isinstance(got, tuple) and len(got) == 1, type(got)
            assert err(got[0], REF["hist"]) <= TOL
            print(f"# {name}: with history {e['hist']:.2e}, without {e['plain']:.2e}")
        finally:
            m.close()
    fn.__name__ = f"helios_{name}"
    case(fn)


for n, (p, me, c) in MESHES.items():
    mesh_case(n, p, me, c)


@case
def helios_history_is_read():
    # the history changes the stock output (else the history checks above prove
    # nothing about it), and a history given without its indices is ignored, as
    # forward ignores it
    with torch.no_grad():
        alone = STOCK(**{k: HIST[k] for k in ("hidden_states", "timestep",
                                              "encoder_hidden_states",
                                              "indices_hidden_states")}).sample
    assert err(alone, REF["hist"]) > 1e-2, err(alone, REF["hist"])
    m = parallel("helios_single")
    try:
        kw = dict(HIST, indices_latents_history_long=None)
        with torch.no_grad():
            ref = STOCK(**kw).sample
        assert err(ref, REF["hist"]) > 1e-3
        assert err(m(**kw).sample, ref) <= TOL
        # [B, F] indices with equal rows are the [1, F] ones
        kw = dict(PLAIN, indices_hidden_states=torch.tensor([[0, 1], [0, 1]]))
        assert err(m(**kw).sample, REF["plain"]) <= TOL
    finally:
        m.close()


@case
def helios_control_perturbed_weight():
    # patch_long embeds the long history only: its first output channel off (all
    # channels off alike would be a shift of every channel that the blocks'
    # LayerNorms remove), the output must move past 1e-4
    sd = dict(STOCK.state_dict())
    k = "patch_long.weight"
    sd[k] = sd[k].clone()
    sd[k][0] += 0.25
    m = parallel("helios_ulysses", "ulysses = 2", weights=sd)
    try:
        e = err(m(**HIST).sample, REF["hist"])
        assert e > TOL, f"{k}[0] + 0.25 moved sample {e:.2e}: must fail 1e-4"
        print(f"# control: {k}[0] + 0.25: {e:.2e} (must be > {TOL})")
        # and the no-history forward does not read it
        check(m(**PLAIN), "plain")
    finally:
        m.close()


@case
def helios_refusals():
    m = parallel("helios_single")
    try:
        raises(lambda: m(**PLAIN, attention_kwargs={"scale": 0.5}),
               "attention_kwargs['scale'] = 0.5")
        raises(lambda: m(**dict(PLAIN, indices_hidden_states=torch.tensor([[0, 1], [0, 2]]))),
               "indices_hidden_states: its 2 rows differ")
        raises(lambda: m(**dict(PLAIN, indices_hidden_states=torch.tensor([[0, 1, 2]]))),
               "indices_hidden_states: shape [1, 3]")
        raises(lambda: m(**dict(HIST, indices_latents_history_mid=torch.tensor([9, 10]))),
               "indices_latents_history_mid: shape [2]")
        raises(lambda: m(**dict(HIST, latents_history_short=randn(1, C, 2, 4, 8))),
               "latents_history_short: shape [1, 2, 2, 4, 8]")
        raises(lambda: m(**dict(PLAIN, timestep=torch.full((2, 64), 300.0))),
               "timestep: shape [2, 64]")
        # mid without short: diffusers' UnboundLocalError, the plan's assert
        raises(lambda: m(**dict(HIST, latents_history_short=None)), "need the short one")
    finally:
        m.close()


print("checks done")
