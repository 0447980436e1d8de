"""qwenimage21_transformer.py TMPDIR — dtpc.torch's QwenImage21Transformer2DModel
adapter with the project's Python environment (tests/python.sh). dtpc models the
cached decode step (kv_cache_mode "cached": every denoising step of
QwenImage21Pipeline but the first), so each case fills a QwenImage21KVCache with the
stock transformer's own first step ("extract") and then calls the dtpc module as
the pipeline calls it at a later step (text to image: img_shapes [[(1, h, w)]],
img_mask the prompt's slots then the target's, return_dict=False), against the
stock module's cached step on the same weights, cache and inputs within 1e-4
(float32, normwise: max |got - ref| / max |ref|). Two tiny random-weight
transformers (dtpc.porting.randomize): 4 heads x 8, 2 blocks, batch 2 (sample 1
pads 3 of 8 text tokens), a 4 x 4 target, on tp 1 (one rank), tp 2, Ulysses 2,
Ring 2 (both rotations), USP 2 x 2 and ring 2 x ulysses 2 x tp 2; and 3 heads x 8,
3 blocks, a 5 x 4 target, 7 text tokens, on tp 3, Ulysses Anything 2 (3 heads
padded to 4) and Ring Anything 3 (20 and 7 tokens split unevenly). The refusals
(the prefill, no cache, condition images), each a DtpcError naming the argument.
Negative control: one weight perturbed in dtpc's copy only must move the output
past 1e-4. Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check. Run
with PYTHONPATH=python and DTPC_BUILD=BUILD."""
import os
import sys

import torch

import dtpc.porting
import dtpc.torch
from harness import case, mesh_cases, mesh_world, perturbed, raises

tmp = sys.argv[1]
TOL = 1e-4
CACHE = os.path.join(tmp, "cache-qwenimage21")

from diffusers import QwenImage21Transformer2DModel  # noqa: E402
from diffusers.models.transformers.transformer_qwenimage21 import QwenImage21KVCache  # noqa: E402

g = torch.Generator().manual_seed(7)


class Model:
    """A stock transformer, a prompt whose cache its own first step filled, and two
    later steps' calls with their stock outputs."""

    def __init__(self, cfg, batch, height, width, txt, pad, seed):
        self.stock = QwenImage21Transformer2DModel(**cfg)
        dtpc.porting.randomize(self.stock, seed)
        self.stock.eval()
        tokens = height * width
        mask = torch.ones(batch, txt, dtype=torch.bool)
        for b, p in enumerate(pad):
            mask[b, txt - p:] = False
        # QwenImage21Pipeline's text-to-image call: no image slot in the prompt, then
        # one per 2 x 2 group of target latents
        img_mask = torch.cat([torch.zeros(batch, txt, dtype=torch.bool),
                              torch.ones(batch, tokens // 4, dtype=torch.bool)], dim=1)
        self.common = dict(
            encoder_hidden_states=torch.randn(batch, txt, cfg["context_in_dim"], generator=g),
            encoder_hidden_states_mask=mask, img_shapes=[[(1, height, width)]] * batch,
            img_mask=img_mask, return_dict=False)
        self.cache = QwenImage21KVCache(cfg["num_layers"])
        latents = lambda: torch.randn(batch, tokens, cfg["in_channels"], generator=g)  # noqa: E731
        with torch.no_grad():
            self.stock(hidden_states=latents(), timestep=torch.ones(batch), kv_cache=self.cache,
                       kv_cache_mode="extract", **self.common)
        self.steps = [self.call(hidden_states=latents(), timestep=torch.full((batch,), t))
                      for t in (0.7, 0.35)]
        with torch.no_grad():
            self.refs = [self.stock(**s)[0] for s in self.steps]

    def call(self, **kw):
        """A later step's arguments: the common ones, the cache, "cached", then kw."""
        return dict(self.common, kv_cache=self.cache, kv_cache_mode="cached", **kw)


EVEN = Model(dict(in_channels=12, out_channels=8, num_layers=2, attention_head_dim=8,
                  num_attention_heads=4, context_in_dim=10, axes_dims_rope=[2, 2, 4]),
             batch=2, height=4, width=4, txt=8, pad=[0, 3], seed=0)
ODD = Model(dict(in_channels=8, out_channels=None, num_layers=3, attention_head_dim=8,
                 num_attention_heads=3, context_in_dim=6, mlp_ratio=2, axes_dims_rope=[4, 2, 2]),
            batch=1, height=5, width=4, txt=7, pad=[2], seed=1)


def err(got, ref):
    return float((got - ref).abs().max() / ref.abs().max())


def parallel(model, plan, mesh, weights=None):
    return dtpc.torch.parallelize(model.stock, plan, mesh=mesh, weights=weights,
                                  keep_weights=True, cache_dir=CACHE)


# name: model, plan, mesh
MESHES = {"tp1": (EVEN, "qwenimage21_tp", "tp = 1"),
          "tp2": (EVEN, "qwenimage21_tp", "tp = 2"),
          "ulysses2": (EVEN, "qwenimage21_ulysses", "ulysses = 2"),
          "ring2": (EVEN, "qwenimage21_ring", "ring = 2"),
          "ring2_alltoall": (EVEN, "qwenimage21_ring_alltoall", "ring = 2"),
          "usp2x2": (EVEN, "qwenimage21_usp", "ring = 2, ulysses = 2"),
          "tp_usp2x2x2": (EVEN, "qwenimage21_tp_usp", "ring = 2, ulysses = 2, tp = 2"),
          "odd_tp3": (ODD, "qwenimage21_tp", "tp = 3"),
          "odd_ulysses_anything2": (ODD, "qwenimage21_ulysses_anything", "ulysses = 2"),
          "odd_ring_anything3": (ODD, "qwenimage21_ring_anything", "ring = 3")}


def mesh_check(name, model, plan, mesh):
    m = parallel(model, plan, mesh)
    try:
        # two later steps on one cache: the same graph, the step's inputs
        e = []
        for s, ref in zip(model.steps, model.refs):
            got = m(**s)
            assert isinstance(got, tuple) and len(got) == 1, type(got)
            assert tuple(got[0].shape) == tuple(ref.shape), got[0].shape
            e.append(err(got[0], ref))
        assert max(e) <= TOL, f"steps: {e} > {TOL}"
        # one shape, on the mesh's ranks (the mesh string replaced the plan's)
        assert [r.graph.world for r in m._sessions.values()] == [mesh_world(mesh)]
        out = m(**dict(model.steps[0], return_dict=True))
        assert type(out).__name__ == "Transformer2DModelOutput", type(out)
        assert err(out.sample, model.refs[0]) <= TOL
        print(f"# {name}: steps {e[0]:.2e}, {e[1]:.2e}")
    finally:
        m.close()


mesh_cases("qwenimage21", MESHES, mesh_check)


@case
def qwenimage21_mask_is_read():
    # sample 1's padded text keys change the stock output (else the checks above
    # prove nothing about the mask), and no mask is all ones, as forward takes it
    s = dict(EVEN.steps[0], encoder_hidden_states_mask=None)
    with torch.no_grad():
        ref = EVEN.stock(**s)[0]
    assert err(ref, EVEN.refs[0]) > 1e-3, err(ref, EVEN.refs[0])
    m = parallel(EVEN, "qwenimage21_ulysses", "ulysses = 2")
    try:
        e = err(m(**s)[0], ref)
        assert e <= TOL, e
    finally:
        m.close()


@case
def qwenimage21_control_perturbed_weight():
    # one output row of block 0's SwiGLU gate: the output must move past 1e-4
    k = "transformer_blocks.0.img_mlp.gate_layer.weight"
    sd = perturbed(EVEN.stock, k)
    m = parallel(EVEN, "qwenimage21_ulysses", "ulysses = 2", weights=sd)
    try:
        e = err(m(**EVEN.steps[0])[0], EVEN.refs[0])
        assert e > TOL, f"{k}[0] + 0.25 moved sample {e:.2e}: must fail 1e-4"
        print(f"# control: {k}[0] + 0.25: {e:.2e} (must be > {TOL})")
    finally:
        m.close()


@case
def qwenimage21_refusals():
    s = EVEN.steps[0]
    m = parallel(EVEN, "qwenimage21_tp", "tp = 1")
    try:
        # the first step (the prefill) and the forward without a cache
        raises(lambda: m(**dict(s, kv_cache_mode="extract")), "kv_cache_mode: 'extract'",
               "cached decode step only")
        raises(lambda: m(**dict(s, kv_cache=None, kv_cache_mode=None)), "kv_cache_mode: None")
        raises(lambda: m(**dict(s, kv_cache=None)), "kv_cache: required")
        raises(lambda: m(**dict(s, kv_cache=QwenImage21KVCache(2))),
               "kv_cache: 0 of its 2 blocks filled")
        # condition images: another grid before the target, their latents, their slots
        raises(lambda: m(**dict(s, img_shapes=[[(1, 2, 2), (1, 4, 4)]] * 2)), "img_shapes: ",
               "condition images are not modelled")
        raises(lambda: m(**dict(s, img_shapes=[[(2, 4, 4)]] * 2)), "img_shapes: ")
        raises(lambda: m(**dict(s, hidden_states=torch.randn(2, 20, 12))),
               "hidden_states: 20 tokens", "4 x 4 grid has 16")
        im = s["img_mask"].clone()
        im[:, 3] = True
        raises(lambda: m(**dict(s, img_mask=im)), "img_mask: not text to image's")
        raises(lambda: m(**dict(s, encoder_hidden_states=s["encoder_hidden_states"][:, :6])),
               "encoder_hidden_states: 6 tokens, the kv_cache holds 8")
        raises(lambda: m(**s, attention_kwargs={"scale": 0.5}), "attention_kwargs['scale'] = 0.5")
    finally:
        m.close()


print("checks done")
