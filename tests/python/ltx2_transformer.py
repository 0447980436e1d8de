"""ltx2_transformer.py TMPDIR — dtpc.torch's LTX2VideoTransformer3DModel adapter
with the project's Python environment (tests/python.sh): a tiny random-weight
transformer (tests/fixtures/models/ltx2's config: video 4 heads x 6, audio 2 x 6,
2 layers; 3 x 2 x 4 = 24 video tokens, 10 audio latents, 8 text tokens of which
the second sample's last 3 are padding, batch 2) parallelized on 1 rank, Ulysses
2, Ring 2 (alltoall) and USP 2 x 2, its AudioVisualModelOutput's `sample` and
`audio_sample` against the stock module's on the same weights and inputs within
1e-4 (float32, normwise: max |got - ref| / max |ref|); the call as LTX2Pipeline
makes it (video_coords, audio_coords, sigma, use_cross_timestep, return_dict =
False); rope_type "split" (tests/fixtures/models/ltx2_split's config) on
Ulysses 2; LTX-2.3 (tests/fixtures/models/ltx2_23's config: gated attentions,
prompt modulation from sigma) on Ulysses 3, with the timestep given as sigma as its
control, and with one stream's keys each on 1 rank;
the refusals, each a DtpcError naming the argument. Negative control:
one weight perturbed in dtpc's copy only must move both outputs past 1e-4.
Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check. Run with
PYTHONPATH=python and DTPC_BUILD=BUILD."""
import json
import os
import sys

import torch

import dtpc
import dtpc.torch
from harness import case, raises

tmp = sys.argv[1]
TOL = 1e-4
CACHE = os.path.join(tmp, "cache-ltx2")

from diffusers import LTX2VideoTransformer3DModel  # noqa: E402

B = 2


def stock_model(fixture, seed, **keys):
    """The stock transformer of a fixture's config (keys override it), its random
    weights from seed, and that config."""
    c = json.load(open(f"tests/fixtures/models/{fixture}/transformer/config.json"))
    c.update(keys)
    torch.manual_seed(seed)
    m = LTX2VideoTransformer3DModel(**{k: v for k, v in c.items() if not k.startswith("_")})
    return m.eval(), c


def call(c, seed, f, h, w, a, mask, timestep, **more):
    """forward's arguments for config c: random latents and text (generator seed) on
    the f x h x w latent grid, a audio latents, mask's text tokens for both streams."""
    gen = torch.Generator().manual_seed(seed)
    t = mask.shape[1]
    return dict(hidden_states=torch.randn(B, f * h * w, c["in_channels"], generator=gen),
                audio_hidden_states=torch.randn(B, a, c["audio_in_channels"], generator=gen),
                encoder_hidden_states=torch.randn(B, t, c["caption_channels"], generator=gen),
                audio_encoder_hidden_states=torch.randn(B, t, c["caption_channels"],
                                                        generator=gen),
                timestep=torch.tensor(timestep), encoder_attention_mask=mask,
                audio_encoder_attention_mask=mask, num_frames=f, height=h, width=w, fps=24.0,
                audio_num_frames=a, **more)


STOCK, cfg = stock_model("ltx2", 0)
F, H, W, A, T = 3, 2, 4, 10, 8
mask = torch.ones(B, T)
mask[1, 5:] = 0
ARGS = call(cfg, 3, F, H, W, A, mask, [620.0, 620.0])
with torch.no_grad():
    REF = STOCK(**ARGS)


def err(got, ref):
    return float((got - ref).abs().max() / ref.abs().max())


def check(out, ref=REF, tol=TOL):
    """(sample error, audio_sample error), each asserted within tol."""
    e = err(out.sample, ref.sample), err(out.audio_sample, ref.audio_sample)
    assert type(out).__name__ == "AudioVisualModelOutput", type(out)
    assert e[0] <= tol and e[1] <= tol, f"sample {e[0]:.2e}, audio_sample {e[1]:.2e} > {tol}"
    return e


def parallel(plan, mesh=None, context=None, weights=None):
    return dtpc.torch.parallelize(STOCK, plan, mesh=mesh, context=context, weights=weights,
                                  keep_weights=True, cache_dir=CACHE)


MESHES = {"single": ("ltx2_single", None, None),
          "ulysses2": ("ltx2_ulysses", "ulysses = 2", None),
          "ring2_alltoall": ("ltx2_ring", "ring = 2", 'rotate_method = "alltoall"'),
          "usp_ring2xulysses2": ("ltx2_usp", "ring = 2, ulysses = 2", None)}


def mesh_case(name, plan, mesh, context):
    def fn():
        m = parallel(plan, mesh, context)
        try:
            e = check(m(**ARGS))
            print(f"# {name}: sample {e[0]:.2e}, audio_sample {e[1]:.2e}")
        finally:
            m.close()
    fn.__name__ = f"ltx2_{name}"
    case(fn)


for n, (p, me, c) in MESHES.items():
    mesh_case(n, p, me, c)


@case
def ltx2_as_the_pipeline_calls_it():
    # LTX2Pipeline: coordinates from the transformer's own rope modules (kept on the
    # DtpcTransformer), sigma = timestep, use_cross_timestep, a tuple back
    m = parallel("ltx2_usp", "ring = 2, ulysses = 2")
    try:
        vc = m.rope.prepare_video_coords(B, F, H, W, "cpu", fps=24.0)
        ac = m.audio_rope.prepare_audio_coords(B, A, "cpu")
        kw = dict(ARGS, video_coords=vc, audio_coords=ac, sigma=ARGS["timestep"],
                  use_cross_timestep=True, return_dict=False)
        with torch.no_grad():
            ref = STOCK(**kw)
        got = m(**kw)
        assert isinstance(got, tuple) and len(got) == 2, type(got)
        e = err(got[0], ref[0]), err(got[1], ref[1])
        assert max(e) <= TOL, e
        # the stock model agrees with itself across the two call styles
        assert err(ref[0], REF.sample) <= 1e-6 and err(ref[1], REF.audio_sample) <= 1e-6
    finally:
        m.close()


@case
def ltx2_control_perturbed_weight():
    # the audio self-attention's to_v: the audio directly, the video through the
    # audio-to-video attention; dtpc's copy only
    sd = dict(STOCK.state_dict())
    k = "transformer_blocks.0.audio_attn1.to_v.weight"
    sd[k] = sd[k] + 0.25
    m = parallel("ltx2_ulysses", "ulysses = 2", weights=sd)
    try:
        out = m(**ARGS)
        e = err(out.sample, REF.sample), err(out.audio_sample, REF.audio_sample)
        assert min(e) > TOL, f"{k} + 0.25 moved sample {e[0]:.2e}, audio_sample {e[1]:.2e}: " \
            "both must fail 1e-4"
        print(f"# control: sample {e[0]:.2e}, audio_sample {e[1]:.2e} (must be > {TOL})")
    finally:
        m.close()


@case
def ltx2_split_rope_ulysses2():
    # rope_type "split" (the released LTX-2's config): tests/fixtures/models/ltx2_split's
    # sizes (video 4 heads x 8, audio 2 x 8: its tables' heads as wide as split needs),
    # read from the transformer's config by parallelize
    stock, sc = stock_model("ltx2_split", 1)
    assert stock.config.rope_type == "split"
    smask = torch.ones(B, 12)
    smask[0, 9:] = 0
    args = call(sc, 4, 3, 2, 3, 7, smask, [400.0, 400.0])
    with torch.no_grad():
        ref = stock(**args)
    m = dtpc.torch.parallelize(stock, "ltx2_ulysses", mesh="ulysses = 2", keep_weights=True,
                               cache_dir=CACHE)
    try:
        e = check(m(**args), ref)
        print(f"# split rope, ulysses 2: sample {e[0]:.2e}, audio_sample {e[1]:.2e}")
    finally:
        m.close()


def ltx2_23(**keys):
    """A stock LTX-2.3 transformer (tests/fixtures/models/ltx2_23's config: the per-head
    gates and the prompt modulation from sigma; video 3 heads x 6, audio 3 x 4; keys
    override it), its call (9 video tokens, 5 audio latents, 6 text tokens; sigma on
    the timestep's scale, as LTX2Pipeline passes it (sigma=timestep), but other values,
    so that the model must read it) and its output."""
    stock, c = stock_model("ltx2_23", 2, **keys)
    m3 = torch.ones(B, 6)
    m3[1, 4:] = 0
    args = call(c, 5, 3, 3, 1, 5, m3, [700.0, 300.0], sigma=torch.tensor([450.0, 820.0]))
    with torch.no_grad():
        ref = stock(**args)
    return stock, args, ref


@case
def ltx2_23_ulysses3():
    # controls: dtpc given the timestep as sigma must fail; the refusals of a missing
    # sigma and of an audio_sigma other than sigma
    stock, args, ref = ltx2_23()
    assert stock.config.gated_attn and stock.config.audio_cross_attn_mod
    m = dtpc.torch.parallelize(stock, "ltx2_ulysses", mesh="ulysses = 3", keep_weights=True,
                               cache_dir=CACHE)
    try:
        e = check(m(**args), ref)
        print(f"# LTX-2.3, ulysses 3: sample {e[0]:.2e}, audio_sample {e[1]:.2e}")
        out = m(**dict(args, sigma=args["timestep"]))
        moved = err(out.sample, ref.sample), err(out.audio_sample, ref.audio_sample)
        assert min(moved) > TOL, f"timestep as sigma: sample {moved[0]:.2e}, audio {moved[1]:.2e}"
        print(f"# control, timestep as sigma: sample {moved[0]:.2e}, audio_sample {moved[1]:.2e}")
        raises(lambda: m(**dict(args, sigma=None)), "sigma: required with cross_attn_mod")
        raises(lambda: m(**args, audio_sigma=torch.tensor([450.0, 100.0])),
               "audio_sigma: differs from sigma")
        check(m(**args, audio_sigma=args["sigma"]), ref)
    finally:
        m.close()


@case
def ltx2_23_mixed_keys():
    # one stream's keys each: the video's prompt modulation (which modulates the
    # audio's text keys and values too: the block's cross_attn_adaln is either key)
    # and the audio's gates, on 1 rank
    stock, args, ref = ltx2_23(gated_attn=False, audio_cross_attn_mod=False)
    m = dtpc.torch.parallelize(stock, "ltx2_single", keep_weights=True, cache_dir=CACHE)
    try:
        e = check(m(**args), ref)
        print(f"# LTX-2.3, mixed keys, 1 rank: sample {e[0]:.2e}, audio_sample {e[1]:.2e}")
    finally:
        m.close()


@case
def ltx2_refusals():
    m = parallel("ltx2_single")
    try:
        vc = m.rope.prepare_video_coords(B, F, H, W, "cpu", fps=24.0)
        raises(lambda: m(**ARGS, isolate_modalities=True), "isolate_modalities")
        raises(lambda: m(**ARGS, spatio_temporal_guidance_blocks=[5, 1]),
               "spatio_temporal_guidance_blocks: [1]: STG")
        raises(lambda: m(**ARGS, audio_timestep=torch.tensor([10.0, 620.0])),
               "audio_timestep: differs from timestep")
        raises(lambda: m(**ARGS, use_cross_timestep=True), "sigma: required")
        raises(lambda: m(**ARGS, use_cross_timestep=True, sigma=torch.tensor([0.5, 0.5])),
               "sigma: differs from timestep")
        raises(lambda: m(**ARGS, video_coords=vc * 2), "video_coords: not the coordinates")
        raises(lambda: m(**dict(ARGS, fps=25.0), video_coords=vc),
               "video_coords: not the coordinates")
        raises(lambda: m(**ARGS, video_self_attention_mask=torch.ones(B, 24, 24)),
               "video_self_attention_mask: not modelled")
        raises(lambda: m(**dict(ARGS, timestep=torch.full((B, 24), 620.0))),
               "timestep: shape [2, 24]")
        raises(lambda: m(**dict(ARGS, audio_num_frames=None)), "audio_num_frames: required")
        raises(lambda: m(**dict(ARGS, audio_encoder_hidden_states=torch.randn(B, 5, 8))),
               "audio_encoder_hidden_states: 5 text tokens")
        raises(lambda: m(**dict(ARGS, encoder_attention_mask=torch.zeros(B, 1, T))),
               "encoder_attention_mask: shape [2, 1, 8]")
        raises(lambda: m(**ARGS, attention_kwargs={"scale": 0.5}),
               "attention_kwargs['scale'] = 0.5")
        # taken: what diffusers' forward does not read in this configuration
        same = dict(ARGS, audio_timestep=ARGS["timestep"], sigma=torch.tensor([0.1, 0.1]),
                    perturbation_mask=torch.zeros(B), spatio_temporal_guidance_blocks=[28])
        check(m(**same))
    finally:
        m.close()


print("checks done")
