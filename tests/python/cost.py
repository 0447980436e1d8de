"""cost.py TMPDIR — dtpc.cost and dtpc.suggest (python/dtpc/cost.py)
against the program: dtpc.cost equals `dtpc cost --format json` for plans,
meshes, contexts, defines, configs and dtypes; dtpc.suggest equals `dtpc
suggest --format json`'s meshes, which agree with the text report's ranking
and with dtpc.cost of each mesh; refusals (a bad profile, an unknown plan, a
plan error, no mesh to suggest, no profile) raise DtpcError with the
located message, each beside a negative control that does not raise.
Prints "ok NAME", "FAIL NAME: why" per check (tests/python.sh counts them).
Run with PYTHONPATH=python and DTPC_BUILD=BUILD."""
import json
import os
import re
import subprocess
import sys

import dtpc
from harness import case, raises
from dtpc._lib import program

tmp = sys.argv[1]
TINY = "examples/tiny_dit.plan"
CPU = "hw/cpu-local.json"
H100 = "hw/h100-sxm.json"


def program_json(*args):
    p = subprocess.run([program(), *args, "--format", "json"], capture_output=True, text=True)
    assert p.returncode == 0, (args, p.returncode, p.stderr)
    return json.loads(p.stdout)


# (file, keyword arguments of dtpc.cost, the same as the program's options)
COSTS = [
    (TINY, dict(plan="tiny_dit_8", hw=CPU), []),
    (TINY, dict(plan="tiny_dit_tp", hw=CPU), ["--plan", "tiny_dit_tp"]),
    (TINY, dict(plan="tiny_dit_8", mesh="ring = 2, ulysses = 2", hw=CPU),
     ["--mesh", "ring = 2, ulysses = 2"]),
    (TINY, dict(plan="tiny_dit_8", context='rotate_method = "alltoall"', defines={"seq": 128},
                dtype="bf16", hw=H100),
     ["--context", 'rotate_method = "alltoall"', "-D", "seq=128", "--dtype", "bf16"]),
    ("models/flux.plan", dict(plan="flux_usp", hw=H100), ["--plan", "flux_usp"]),
]


@case
def cost_equals_program():
    for f, kw, args in COSTS:
        hw = kw["hw"]
        if not args or args[0] != "--plan":
            args = ["--plan", kw["plan"]] + args
        mine = dtpc.cost(f, **kw)
        theirs = program_json("cost", f, "--hw", hw, *args)
        assert mine == theirs, (f, kw)
        assert mine["world"] == len(mine["ranks"]) and mine["step_s"] > 0, mine
    # negative control: the comparison tells two reports apart (another dtype)
    a = dtpc.cost(TINY, plan="tiny_dit_8", hw=H100, dtype="f32")
    b = program_json("cost", TINY, "--plan", "tiny_dit_8", "--hw", H100, "--dtype", "bf16")
    assert a != b and a["step_s"] != b["step_s"], "f32 and bf16 reports alike"


@case
def cost_only_plan_and_config():
    # a file of one plan needs no plan; a config as a dict as dtpc.check takes it
    one = os.path.join(tmp, "one.plan")
    with open(TINY) as f:
        text = f.read()
    with open(one, "w") as f:
        f.write(re.sub(r"\nplan tiny_dit_tp \{.*?\n\}\n", "\n", text, flags=re.S))
    assert dtpc.cost(one, hw=CPU) == dtpc.cost(one, plan="tiny_dit_8", hw=CPU)
    raises(lambda: dtpc.cost(TINY, hw=CPU), "2 plans of its own", "--plan")
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w") as f:
        json.dump({"seq": 128}, f)
    by_path = dtpc.cost(TINY, plan="tiny_dit_8", config=cfg, hw=CPU)
    assert by_path == dtpc.cost(TINY, plan="tiny_dit_8", config={"seq": 128}, hw=CPU)
    assert by_path == program_json("cost", TINY, "--plan", "tiny_dit_8", "--hw", CPU,
                                   "--config", cfg)
    # negative control: the config is applied (a shorter sequence, a shorter step)
    assert by_path["step_s"] < dtpc.cost(TINY, plan="tiny_dit_8", hw=CPU)["step_s"]


@case
def suggest_equals_program():
    for f, plan, world, hw in ((TINY, "tiny_dit_8", 4, CPU), (TINY, "tiny_dit_8", 8, H100),
                               ("models/flux.plan", "flux_usp", 8, H100)):
        mine = dtpc.suggest(f, plan, world, hw, top=50)
        theirs = program_json("suggest", f, "--plan", plan, "--world", str(world), "--hw", hw,
                              "--top", "50")
        assert mine == theirs["meshes"] and mine, (f, plan, world)
        # the text report ranks the same meshes, in the same order, at the same times
        text = subprocess.run([program(), "suggest", f, "--plan", plan, "--world", str(world),
                               "--hw", hw, "--top", "50"], capture_output=True, text=True).stdout
        rows = re.findall(r"^ *\d+\. (.*?) +(\d+\.\d+) ms", text, flags=re.M)
        assert [(m["name"], f"{m['step_s'] * 1e3:.3f}") for m in mine] == rows, (mine, rows)
        assert all(a["step_s"] <= b["step_s"] for a, b in zip(mine, mine[1:]) if a["fits"] ==
                   b["fits"]), "not ranked by time"
    # each suggestion is dtpc.cost of its mesh and context
    for m in dtpc.suggest(TINY, "tiny_dit_8", 4, CPU, top=3):
        c = dtpc.cost(TINY, plan="tiny_dit_8", mesh=m["mesh"], context=m["context"] or None,
                      hw=CPU)
        assert c["step_s"] == m["step_s"] and c["memory_bytes"] == m["memory_bytes"], (m, c)
    # top and max_mem
    assert len(dtpc.suggest(TINY, "tiny_dit_8", 4, CPU, top=2)) == 2
    tight = dtpc.suggest(TINY, "tiny_dit_8", 4, CPU, max_mem=1)
    assert tight and not any(m["fits"] for m in tight), tight
    assert all(m["fits"] for m in dtpc.suggest(TINY, "tiny_dit_8", 4, CPU))


@case
def refusals():
    bad = os.path.join(tmp, "bad-hw.json")
    with open(CPU) as f:
        profile = json.load(f)
    profile["ranks_per_nodes"] = profile.pop("ranks_per_node")
    with open(bad, "w") as f:
        json.dump(profile, f)
    raises(lambda: dtpc.cost(TINY, plan="tiny_dit_8", hw=bad), bad,
           "ranks_per_nodes: not a field of a profile here")
    raises(lambda: dtpc.suggest(TINY, "tiny_dit_8", 4, bad), "not a field of a profile")
    raises(lambda: dtpc.cost(TINY, plan="tiny_dit_8", hw=os.path.join(tmp, "none.json")),
           "none.json")
    raises(lambda: dtpc.cost(TINY, plan="tiny_dit_8"), "needs hw")
    raises(lambda: dtpc.suggest(TINY, "tiny_dit_8", None, CPU), "needs world")
    raises(lambda: dtpc.cost(TINY, plan="nope", hw=CPU), "has no plan 'nope'")
    raises(lambda: dtpc.suggest(TINY, "nope", 4, CPU), "has no plan 'nope'")
    # a plan that does not compile: located, with the JSON list
    e = raises(lambda: dtpc.cost(TINY, plan="tiny_dit_8", mesh="ring = 3, ulysses = 2, tp = 2",
                                 hw=CPU), "tiny_dit.plan:", "error:")
    assert e.diagnostics and e.diagnostics[0]["severity"] == "error", e.diagnostics
    # every mesh of the world refused: each one's first error
    raises(lambda: dtpc.suggest(TINY, "tiny_dit_8", 4, CPU, defines={"heads": 3, "seq": 9}),
           "no mesh of 4 ranks", "refused: ", "error:")
    # negative controls: the same calls with the poison taken out
    profile["ranks_per_node"] = profile.pop("ranks_per_nodes")
    with open(bad, "w") as f:
        json.dump(profile, f)
    assert dtpc.cost(TINY, plan="tiny_dit_8", hw=bad)["world"] == 8
    assert dtpc.suggest(TINY, "tiny_dit_8", 4, bad)
    assert dtpc.cost(TINY, plan="tiny_dit_8", mesh="ring = 2, ulysses = 2, tp = 2",
                     hw=CPU)["world"] == 8
    assert dtpc.suggest(TINY, "tiny_dit_8", 4, CPU, defines={"heads": 4, "seq": 16})


print("checks done")
