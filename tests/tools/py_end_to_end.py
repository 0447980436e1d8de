"""py_end_to_end.py TMPDIR — the Python package end to end: check, compile,
load, run a local world, compare 2 ranks with 1, errors, and the diffusers
helper's rules checked by dtpc. Prints "ok NAME" or "FAIL NAME: why" per
check (tests/tools.sh counts them). Run with PYTHONPATH=python and
DTPC_BUILD=BUILD."""
import os
import sys
import traceback

import numpy as np

import dtpc
from dtpc import ContextParallelInput, ContextParallelOutput

tmp = sys.argv[1]
PLAN = "examples/tiny_dit.plan"


def case(fn):
    try:
        fn()
        print(f"ok {fn.__name__}")
    except Exception:
        print(f"FAIL {fn.__name__}: {traceback.format_exc(limit=3)}")
    return fn


def normwise(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@case
def check_clean_and_broken():
    r = dtpc.check(PLAN)
    assert r.ok and r.errors == 0 and len(r.summary) == 2, r
    bad = dtpc.check(PLAN, plan="tiny_dit_8", world=4)
    assert not bad.ok and bad.errors == 1 and bad.diagnostics[0]["line"] > 0, bad.diagnostics
    try:
        dtpc.check(PLAN, plan="nope")
        raise AssertionError("an unknown plan is a usage error")
    except dtpc.DtpcError as e:
        assert "no plan named 'nope'" in str(e), e


@case
def check_with_config():
    # the config's seq replaces the plan's; -D's heads replaces the config's
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w") as f:
        f.write('{"_class_name": "TinyDiT", "seq": 32, "heads": 2}\n')
    r = dtpc.check(PLAN, plan="tiny_dit_8", config=tmp, defines={"heads": 8})
    params = r.summary[0]["parameters"]
    assert r.ok and params["seq"] == 32 and params["heads"] == 8, (r.diagnostics, params)
    with open(cfg, "w") as f:
        f.write('{"seq": 32.0}\n')
    bad = dtpc.check(PLAN, plan="tiny_dit_8", config=cfg)
    d = bad.diagnostics[0]
    assert not bad.ok and d["file"] == cfg and (d["line"], d["column"]) == (1, 2), d


X = np.random.default_rng(3).standard_normal((1, 64, 128)).astype(np.float32)
graphs = {}


def graph(name, plan, mesh):
    if name not in graphs:
        graphs[name] = dtpc.compile(PLAN, os.path.join(tmp, name + ".graph"), plan=plan,
                                    mesh=mesh, defines={"seq": 64})
    return graphs[name]


@case
def compile_and_load():
    g = graph("tp2", "tiny_dit_tp", "tp = 2")
    assert g.world == 2 and g.meta["plan"] == "tiny_dit_tp" and g.meta["mesh"] == "tp=2", g.meta
    again = dtpc.Graph.from_bytes(open(os.path.join(tmp, "tp2.graph"), "rb").read())
    assert again.hash == g.hash and again.world == 2
    try:
        dtpc.compile(PLAN, os.path.join(tmp, "x.graph"), plan="tiny_dit_8", defines={"seq": 63})
        raise AssertionError("an indivisible sequence compiles")
    except dtpc.DtpcError as e:
        assert "error" in str(e), e


def two_against_one(name2, plan, mesh):
    # the same model unsharded (tiny_dit_tp's styles do nothing at tp = 1)
    one = graph("one", "tiny_dit_tp", "tp = 1")
    two = graph(name2, plan, mesh)
    assert one.world == 1 and two.world == 2
    ref = one.run(inputs={"hidden_states": X}, weights=7)["proj_out"]
    outs = two.run(inputs={"hidden_states": X}, weights=7, all_ranks=True)
    assert ref.shape == (1, 64, 128) and ref.dtype == np.float32, (ref.shape, ref.dtype)
    assert np.array_equal(outs[0]["proj_out"], outs[1]["proj_out"]), "ranks disagree"
    err = normwise(outs[0]["proj_out"], ref)
    assert err < 1e-5, err
    # the comparison can fail: other weights give another output
    other = one.run(inputs={"hidden_states": X}, weights=8)["proj_out"]
    assert normwise(other, ref) > 1e-2


@case
def tp2_equals_one_rank():
    two_against_one("tp2", "tiny_dit_tp", "tp = 2")


@case
def ulysses2_equals_one_rank():
    two_against_one("ulysses2", "tiny_dit_8", "ulysses = 2")


@case
def seeded_bindings():
    g = graph("tp2", "tiny_dit_tp", "tp = 2")
    a = g.run(inputs=5, weights=7, threads=1)["proj_out"]
    b = graph("one", "tiny_dit_tp", "tp = 1").run(inputs=5, weights=7)["proj_out"]
    assert normwise(a, b) < 1e-5


@case
def binding_error_names_rank():
    g = graph("tp2", "tiny_dit_tp", "tp = 2")
    try:
        g.run(inputs={"no_such_input": X}, timeout=10)
        raise AssertionError("an unknown input binds")
    except dtpc.DtpcError as e:
        assert e.status == 7 and e.rank is not None and "no_such_input" in str(e), str(e)
    try:
        g.run(inputs={"hidden_states": X[:, :32]}, timeout=10)
        raise AssertionError("a wrong shape binds")
    except dtpc.DtpcError as e:
        assert e.status == 7, str(e)


@case
def diffusers_rules_check_clean():
    # tiny_dit's plan as diffusers would spell it; the rules, completed with
    # the attention style the helper asks for, give tiny_dit_8's styles
    class TinyDiT:
        _tp_plan = {"blocks.*.attn.to_{q,k,v}": "colwise", "blocks.*.attn.to_out.0": "rowwise",
                    "blocks.*.ff.net.0.proj": "colwise", "blocks.*.ff.net.2": "rowwise"}
        _cp_plan = {"": {"hidden_states": ContextParallelInput(split_dim=1, expected_dims=3)},
                    "proj_out": ContextParallelOutput(gather_dim=1, expected_dims=3)}
    rules = dtpc.plan_rules(TinyDiT)
    text = open(PLAN).read()
    model = text[text.index("model tiny_dit("):text.index("plan tiny_dit_8")]
    path = os.path.join(tmp, "from_diffusers.plan")
    with open(path, "w") as f:
        f.write(model + "plan from_diffusers {\n  model tiny_dit(seq = 1024);\n"
                "  mesh ring = 2, ulysses = 2, tp = 2;\n"
                + "".join("  " + line + "\n" for line in rules.splitlines())
                + '  "blocks.*.attn" : ulysses, ring;\n}\n')
    mine = dtpc.check(path)
    assert mine.ok, (rules, mine.diagnostics)
    hand = dtpc.check(PLAN, plan="tiny_dit_8")
    for key in ("styles_by_op", "attention", "inserted_gathers"):
        assert mine.summary[0][key] == hand.summary[0][key], key


@case
def diffusers_rules_refuse_unknown_style():
    # no rule, a comment naming the key (the rest of the plan still comes out)
    rules = dtpc.plan_rules(tp_plan={"x": "sequence_parallel", "y": "colwise"})
    assert rules.splitlines() == [
        '"y" : colwise;',
        "# cannot transliterate \"x\": no dtpc style for 'sequence_parallel' "
        "(dtpc has colwise and rowwise, packed or not)"], rules
