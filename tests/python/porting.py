"""porting.py TMPDIR — dtpc.porting.compare on two real ports, with the
project's Python environment (tests/python.sh): models/sd3.plan against
SD3Transformer2DModel and models/flux2.plan against Flux2Transformer2DModel
(the tiny configurations and inputs of tests/fixtures/models/) report no
module that differs; the same plans broken by sed (a swapped shift and
scale, a wrong eps) name the module broken, or, where the broken step is
no diffusers module (Flux.2's inline modulation), the first module that
reads it. A tuple's elements named NAME.K; the layout rules, the default
inputs and config, the refusals
and compile_cached's key with expose. Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per
check. Run with PYTHONPATH=python and DTPC_BUILD=BUILD."""
import json
import os
import sys

import numpy as np

import dtpc
from harness import Skip, case
from dtpc import porting

tmp = sys.argv[1]
CACHE = os.path.join(tmp, "porting-cache")


try:
    import diffusers
    import torch
    from safetensors.torch import load_file
    MISSING = None
except ImportError as e:
    MISSING = f"no diffusers here ({e})"


def fixture(name):
    """A fixture's model (its saved weights), config folder, shape
    parameters and inputs."""
    if MISSING:
        raise Skip(MISSING)
    d = os.path.join("tests", "fixtures", "models", name)
    meta = json.load(open(os.path.join(d, "fixture.json")))
    cls = getattr(diffusers, meta["class"])
    return (cls.from_pretrained(os.path.join(d, "transformer")), os.path.join(d, "transformer"),
            meta["shape"], load_file(os.path.join(d, "inputs.safetensors")))


def mutated(model, old, new):
    """models/MODEL.plan with one edit (as sed would make it), in TMPDIR;
    the edit must apply exactly once where it is meant to."""
    text = open(os.path.join("models", model + ".plan")).read()
    n = text.count(old)
    assert n == 1, f"the edit {old!r} occurs {n} times in models/{model}.plan"
    path = os.path.join(tmp, f"{model}-{abs(hash((old, new)))}.plan")
    with open(path, "w") as f:
        f.write(text.replace(old, new))
    return path


def run(name, plan_file, plan, **kw):
    m, cfg, shape, inputs = fixture(name)
    kw.setdefault("inputs", inputs)
    kw.setdefault("config", cfg)
    return porting.compare(m, plan_file, plan=plan, defines=shape, cache_dir=CACHE, **kw)


def clean(r, at_least):
    assert r.ok, f"a correct port differs: {r}\n{r.table()}"
    assert len(r.compared()) >= at_least, f"only {len(r.compared())} compared:\n{r.table()}"


def names(r, want):
    assert r.first is not None, f"the broken port differs nowhere:\n{r.table()}"
    assert r.first.name == want, f"first differing: {r.first.name}, want {want}\n{r}"
    assert r.first.max_rel > r.rtol


SD3_MODULATE = "      norm1           = modulate(norm1.norm, norm1.shift_msa, norm1.scale_msa);"
SD3_NORM2 = "    norm2         = layer_norm(hidden_states, eps = 1e-6, affine = false);"
FLUX2_SINGLE_NORM = "    norm               = layer_norm(hidden_states, eps = eps, affine = false);"
FLUX2_MODULATE = "    norm_hidden_states         = modulate(norm1, shift_msa, scale_msa);"


@case
def sd3_correct():
    r = run("sd3", "models/sd3.plan", "sd3_tp")
    clean(r, 70)
    got = {x.name for x in r.compared()}
    for n in ("pos_embed", "transformer_blocks.0.norm1", "transformer_blocks.2.ff.net.2",
              "norm_out", "proj_out"):
        assert n in got, f"{n} was not compared"


@case
def sd35_correct():
    # qk norms and dual attention (attn2) on blocks 0 and 1; the fixture's
    # own weights (seed None) instead of redrawn ones
    clean(run("sd35_medium", "models/sd3.plan", "sd3_tp", seed=None), 90)


@case
def sd3_swapped_modulate_named():
    # the AdaLayerNormZero blocks' (all but dual attention ones) norm1
    bad = mutated("sd3", SD3_MODULATE, SD3_MODULATE.replace(
        "norm1.shift_msa, norm1.scale_msa", "norm1.scale_msa, norm1.shift_msa"))
    names(run("sd3", bad, "sd3_tp"), "transformer_blocks.0.norm1")


@case
def sd3_wrong_eps_named():
    bad = mutated("sd3", SD3_NORM2, SD3_NORM2.replace("1e-6", "1e-2"))
    names(run("sd3", bad, "sd3_tp"), "transformer_blocks.0.norm2")


@case
def flux2_correct():
    r = run("flux2_dev", "models/flux2.plan", "flux2_tp")
    clean(r, 50)
    got = {x.name for x in r.compared()}
    for n in ("transformer_blocks.0.attn.to_q", "single_transformer_blocks.1.attn.to_out",
              "proj_out"):
        assert n in got, f"{n} was not compared"


@case
def flux2_wrong_eps_named():
    bad = mutated("flux2", FLUX2_SINGLE_NORM, FLUX2_SINGLE_NORM.replace("eps = eps", "eps = 1e-2"))
    names(run("flux2_dev", bad, "flux2_tp"), "single_transformer_blocks.0.norm")


@case
def flux2_swapped_modulate_named():
    # Flux2TransformerBlock modulates inline (no module): the first module
    # that reads the modulated tensor is named
    bad = mutated("flux2", FLUX2_MODULATE, FLUX2_MODULATE.replace("shift_msa, scale_msa",
                                                                  "scale_msa, shift_msa"))
    names(run("flux2_dev", bad, "flux2_tp"), "transformer_blocks.0.attn.to_q")


@case
def default_inputs():
    # N(0, 1) inputs of the plan's shapes and the module's own config, and
    # their control: a wrong eps still named
    clean(run("sd3", "models/sd3.plan", "sd3_tp", inputs=None, config=None), 70)
    bad = mutated("sd3", SD3_NORM2, SD3_NORM2.replace("1e-6", "1e-2"))
    names(run("sd3", bad, "sd3_tp", inputs=None), "transformer_blocks.0.norm2")


@case
def refusals():
    if MISSING:
        raise Skip(MISSING)
    m, cfg, shape, inputs = fixture("flux2_odd")
    try:  # flux2_tp's tp = 4 does not divide this configuration
        porting.compare(m, "models/flux2.plan", plan="flux2_tp", config=cfg, defines=shape,
                        inputs=inputs, cache_dir=CACHE)
        raise AssertionError("compare took a plan that does not check")
    except dtpc.DtpcError as e:
        assert 'mesh="tp = 1"' in str(e), e
    r = porting.compare(m, "models/flux2.plan", plan="flux2_tp", config=cfg, defines=shape,
                        inputs=inputs, mesh="tp = 1", cache_dir=CACHE)
    clean(r, 40)
    try:
        porting.compare(m, "models/flux2.plan", plan="flux2_tp", config=cfg, defines=shape,
                        inputs=inputs, mesh="tp = 1", dtype="bf16", cache_dir=CACHE)
        raise AssertionError("compare ran in bf16")
    except dtpc.DtpcError as e:
        assert "float32" in str(e), e


TUPLE_PLAN = """
model net {
  input hidden_states : [1, 4, 8];
  proj_in  = linear(hidden_states, 8);
  pair.lin = linear(proj_in, 8);
  pair.0   = gelu(pair.lin);
  pair.1   = silu(pair.lin);
  both     = add(pair.0, pair.1);
  proj_out = linear(both, 8);
  output proj_out;
}
plan one { model net; }
"""


@case
def tuple_elements():
    # a module returning a tuple, its elements named NAME.K by the plan; a
    # forward without return_dict; the control: element 1 computed wrongly
    # is named
    if MISSING:
        raise Skip(MISSING)

    class Pair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            y = self.lin(x)
            return torch.nn.functional.gelu(y), torch.nn.functional.silu(y)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj_in, self.pair, self.proj_out = torch.nn.Linear(8, 8), Pair(), \
                torch.nn.Linear(8, 8)

        def forward(self, hidden_states):
            a, b = self.pair(self.proj_in(hidden_states))
            return self.proj_out(a + b)

    good = os.path.join(tmp, "pair.plan")
    bad = os.path.join(tmp, "pair-bad.plan")
    with open(good, "w") as f:
        f.write(TUPLE_PLAN)
    with open(bad, "w") as f:
        f.write(TUPLE_PLAN.replace("pair.1   = silu(", "pair.1   = gelu("))
    r = porting.compare(Net(), good, cache_dir=CACHE)
    got = {x.name: x.verdict for x in r.rows}
    assert r.ok and got.get("pair.0") == got.get("pair.1") == porting.SAME, r.table(True)
    names(porting.compare(Net(), bad, cache_dir=CACHE), "pair.1")


@case
def layout_rules():
    rng = np.random.default_rng(0)
    heads_first = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)  # [B, H, S, D]
    tokens = heads_first.transpose(0, 2, 1, 3).reshape(2, 5, 12)       # [B, S, H*D]
    a, how = porting._align(heads_first, tokens)
    assert a is not None and "heads" in how and np.array_equal(a, tokens), how
    assert porting._row("x", heads_first, tokens, 1e-6).verdict == porting.SAME
    # the control: the heads merged without the transpose differ
    wrong = heads_first.reshape(2, 5, 12)
    assert porting._row("x", heads_first, wrong, 1e-6).verdict == porting.DIFFERS
    a, how = porting._align(rng.standard_normal((2, 8)), np.zeros((2, 1, 8)))
    assert a is not None and how == "reshaped"
    a, how = porting._align(rng.standard_normal((2, 8)), np.zeros((2, 9)))
    assert a is None and "16 elements against 18" in how, how
    a, how = porting._align(rng.standard_normal((6, 4)), np.zeros((4, 6)))
    assert a is None and "no layout rule" in how, how
    # a NaN in dtpc's tensor is a difference, not a max() that drops it
    got = heads_first.copy()
    got[0, 0, 0, 1] = np.nan
    assert porting._row("x", heads_first, got, 1e-6).verdict == porting.DIFFERS


@case
def cache_key_expose():
    from dtpc import cache
    prog = dtpc._lib.program()
    key = lambda e: cache._cache_key(prog, "examples/tiny_dit.plan", None, None, None, None,
                                     None, None, e)
    assert key(None) == key([]) != key(["blocks.0"]) != key(["blocks.1"])
    assert key(["a", "b"]) != key(["b", "a"])  # the outputs follow the globs' order


print("checks done")
