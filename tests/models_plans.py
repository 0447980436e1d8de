#!/usr/bin/env python3
"""models_plans.py [--models DIR] FIXTURE.json... — models/*.plan's plans
(or DIR/*.plan's) say what the
diffusers class's _cp_plan and _tp_plan say (tests/models.sh; standard
library only: CI has no diffusers).

Each fixture.json holds its class's _cp_plan and _tp_plan as diffusers 0.42.1
defines them (tools/gen_models.py reads them from the class). For the model
file of each class:
  - every plan with a context style (ring / ulysses) holds, for each _cp_plan
    entry, the rule python/dtpc/diffusers.py transliterates it to (the same
    glob, each style of it);
  - every plan with a colwise style holds each _tp_plan entry: the glob with
    that style (PackedRowwiseParallel: rowwise(blocks = ...), PackedColwiseParallel:
    colwise(blocks = ...)).
Exempt entries, the entries a model writes as other rules (EQUIVALENT: its
modules are not diffusers' modules) and the plans of dtpc's own beside the
class's (OWN) are listed below with the reason. Prints one line per plan;
exits 1 on a missing rule.
"""
import importlib.util
import json
import os
import re
import sys

# python/dtpc/diffusers.py alone (the package's __init__ loads numpy and
# libdtpc, which this needs neither of)
_spec = importlib.util.spec_from_file_location(
    "dtpc_diffusers", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                                   "dtpc", "diffusers.py"))
_dd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_dd)
ContextParallelInput, ContextParallelOutput, plan_rules = (
    _dd.ContextParallelInput, _dd.ContextParallelOutput, _dd.plan_rules)

# (class, module, port): why the model's plans do not write it
EXEMPT = {
    ("WanTransformer3DModel", "", "timestep"):
        "Wan 2.2 TI2V's per-token [B, S] timesteps (expected_dims 2): the wan_ti2v_* "
        "plans write it; the others take a [B] timestep, which diffusers does not split",
    ("QwenImageTransformer2DModel", "transformer_blocks.*", "modulate_index"):
        "zero_cond_t's modulate_index, not modelled (zero_cond_t must stay false)",
}

# (class, module, style): the rules a plan writes instead, each (glob, style).
# Helios' _cp_plan splits the inputs of and gathers the outputs of
# HeliosAttention (attn1, attn2) and FeedForward (ffn) modules; dtpc's
# `blocks.N.attn1` is the attention op (ports q, k, v) and `ffn` no module, so
# models/helios.plan splits each input where those modules' ops read it and
# gathers the op whose output the module returns. Its gathers take
# "blocks.*": diffusers' name blocks 0 to 39 (its range(40)).
_HELIOS = "HeliosTransformer3DModel"
_HELIOS_BLOCKS = "blocks.{" + ",".join(str(i) for i in range(40)) + "}"
EQUIVALENT = {
    (_HELIOS, "blocks.*.attn1", "split(hidden_states, dim = 1)"):
        [("blocks.*.attn1.{to_q,to_k,to_v}", "split(x, dim = 1)")],
    (_HELIOS, "blocks.*.attn1", "split(rotary_emb, dim = 1)"):
        [("blocks.*.attn1.{query,key}", "split(cos, dim = 0)"),
         ("blocks.*.attn1.{query,key}", "split(sin, dim = 0)")],
    (_HELIOS, "blocks.*.attn2", "split(hidden_states, dim = 1)"):
        [("blocks.*.attn2.to_q", "split(x, dim = 1)")],
    (_HELIOS, "blocks.*.ffn", "split(hidden_states, dim = 1)"):
        [("blocks.*.ffn.net.0.proj", "split(x, dim = 1)")],
    (_HELIOS, _HELIOS_BLOCKS + ".attn1", "gather(dim = 1)"):
        [("blocks.*.{attn1,attn2}.to_out.0", "gather(dim = 1)")],
    (_HELIOS, _HELIOS_BLOCKS + ".attn2", "gather(dim = 1)"):
        [("blocks.*.{attn1,attn2}.to_out.0", "gather(dim = 1)")],
    (_HELIOS, _HELIOS_BLOCKS + ".ffn", "gather(dim = 1)"):
        [("blocks.*.ffn.net.2", "gather(dim = 1)")],
}

# MiniMax-H3's _cp_plan splits timestep_indices where norm_out
# (MiniMaxH3AdaLayerNormOut) reads it; dtpc's `norm_out` is the modulate op
# (ports x, shift, scale), and the op of norm_out that reads
# timestep_indices is `norm_out.rows`, its index_select (port `index`).
EQUIVALENT[("MiniMaxH3Transformer3DModel", "norm_out", "split(timestep_indices, dim = 0)")] = [
    ("norm_out.rows", "split(index, dim = 0)")]

# (model, plan): plans of dtpc's own beside the class's, held to no rule of it
OWN = {
    ("helios", "helios_usp_sequence"):
        "the sequence split once as Wan's _cp_plan does, not at each attn1 / attn2 / ffn",
}


def cp_objects(entries, cls):
    """The _cp_plan of fixture.json as diffusers' objects (stand-ins), less the
    exempt inputs."""
    cp = {}
    for e in entries:
        if "outputs" in e:
            outs = [ContextParallelOutput(o["gather_dim"], o["expected_dims"]) for o in e["outputs"]]
            cp[e["module"]] = outs[0] if len(outs) == 1 else outs
            continue
        ins = {}
        for i in e["inputs"]:
            if (cls, e["module"], i["port"]) in EXEMPT:
                continue
            ins[i["port"]] = ContextParallelInput(i["split_dim"], i["expected_dims"],
                                                  i["split_output"])
        if ins:
            cp[e["module"]] = ins
    return cp


def split_styles(text):
    """The styles of a rule, split at the commas outside parentheses and
    brackets, whitespace normalised."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [re.sub(r"\s+", " ", s).strip() for s in out if s.strip()]


def plans_of(path):
    """{plan name: {glob: [styles]}} of a plan file (its own plans)."""
    text = re.sub(r"#[^\n]*", "", open(path).read())
    plans = {}
    for m in re.finditer(r"\bplan\s+(\w+)\s*\{(.*?)\n\}", text, re.S):
        rules = {}
        for r in re.finditer(r'"((?:[^"\\]|\\.)*)"\s*:\s*([^;]*);', m.group(2)):
            rules.setdefault(r.group(1), []).extend(split_styles(r.group(2)))
        plans[m.group(1)] = rules
    return plans


def main():
    args, models = sys.argv[1:], "models"
    if args[:1] == ["--models"]:
        models, args = args[1], args[2:]
    seen, ok = set(), True
    for f in args:
        fx = json.load(open(f))
        cls, model = fx["class"], fx["model"]
        if cls in seen:
            continue
        seen.add(cls)
        pp = fx["parallel_plans"]
        cp_text = plan_rules(cp_plan=cp_objects(pp["cp_plan"], cls), tp_plan={})
        want_cp = {}
        for line in cp_text.splitlines():
            r = re.match(r'"((?:[^"\\]|\\.)*)"\s*:\s*(.*);$', line)
            if r:
                want_cp[r.group(1)] = split_styles(r.group(2))
        packed = {"PackedRowwiseParallel": "rowwise(blocks", "PackedColwiseParallel": "colwise(blocks"}
        want_tp = {g: packed.get(s, s) for g, s in pp["tp_plan"].items()}
        plans = plans_of(os.path.join(models, model + ".plan"))
        for name, rules in plans.items():
            if (model, name) in OWN:
                print(f"ok    {models}/{model}.plan plan {name}: dtpc's own, "
                      f"{OWN[(model, name)]}")
                continue
            styles = [s for st in rules.values() for s in st]
            missing = []
            if any(s in ("ring", "ulysses") for s in styles):
                for glob, want in want_cp.items():
                    for s in want:
                        for g, st in EQUIVALENT.get((cls, glob, s), [(glob, s)]):
                            if st not in rules.get(g, []) and f'"{g}" : {st}' not in missing:
                                missing.append(f'"{g}" : {st}')
            if want_tp and any(s == "colwise" for s in styles):
                for glob, want in want_tp.items():
                    have = rules.get(glob, [])
                    if not any(h == want or h.startswith(want) for h in have):
                        missing.append(f'"{glob}" : {want}')
            if missing:
                ok = False
                print(f"FAIL  {models}/{model}.plan plan {name}: missing {'; '.join(missing)}")
            else:
                kinds = [k for k, c in (("_cp_plan", want_cp and any(s in ("ring", "ulysses")
                                                                      for s in styles)),
                                        ("_tp_plan", want_tp and "colwise" in styles)) if c]
                print(f"ok    {models}/{model}.plan plan {name}: "
                      + (f"{' and '.join(kinds)} as {cls} says" if kinds else
                         f"dtpc's own ({cls} has no _cp_plan or _tp_plan)"
                         if not want_cp and not want_tp else
                         "neither context styles nor the class's tensor parallelism"))
    sys.exit(0 if ok else 1)


main()
