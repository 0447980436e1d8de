"""diffusers' parallel plans as dtpc plan rules.

diffusers describes a model's parallelism in two class attributes:
``_cp_plan`` (context parallelism: module name -> inputs to split or
outputs to gather) and ``_tp_plan`` (tensor parallelism: module-name glob
-> "colwise" / "rowwise"). ``plan_rules`` transliterates them into the
rules of a dtpc plan, the part of the port users would otherwise write by
hand:

    "blocks.*.attn.to_q" : colwise;                        # _tp_plan
    ""                   : split(hidden_states, dim = 1);  # ContextParallelInput(split_dim=1)
    "proj_out"           : gather(dim = 1);                # ContextParallelOutput(gather_dim=1)

diffusers need not be installed: pass the dicts (or any object carrying
them, such as the model class). Their values may be diffusers' own
ContextParallelInput / ContextParallelOutput or the stand-ins below: only
the attributes are read. ``expected_dims`` is not carried over: dtpc checks
every shape from the model itself. Output K of a module that returns a
tuple (``{0: ContextParallelInput(..., split_output=True)}``, or a list of
ContextParallelOutput) is dtpc's ``out.K`` (a ``tuple(...)`` module). What
has no dtpc spelling (an input given by position, several named outputs)
comes out as a comment to finish by hand, and so does the attention style,
which diffusers takes from its attention backend rather than from the plan.
"""
from dataclasses import dataclass
from typing import Optional

__all__ = ["ContextParallelInput", "ContextParallelOutput", "plan_rules", "print_plan_rules"]


@dataclass(frozen=True)
class ContextParallelInput:
    """diffusers.ContextParallelInput: split an input (or, with
    split_output, the module's output) along split_dim."""
    split_dim: int
    expected_dims: Optional[int] = None
    split_output: bool = False


@dataclass(frozen=True)
class ContextParallelOutput:
    """diffusers.ContextParallelOutput: gather the output along gather_dim."""
    gather_dim: int
    expected_dims: Optional[int] = None


# torch's ParallelStyle classes, which a _tp_plan may hold instead of strings
_TP_STYLES = {"colwise": "colwise", "rowwise": "rowwise",
              "ColwiseParallel": "colwise", "RowwiseParallel": "rowwise"}


def _tp_style(module, value):
    key = value if isinstance(value, str) else type(value).__name__
    if key not in _TP_STYLES:
        raise ValueError(f"_tp_plan[{module!r}]: no dtpc style for {value!r} "
                         "(dtpc has colwise and rowwise)")
    return _TP_STYLES[key]


def _cp_styles(module, value):
    """(styles, comments) of one _cp_plan entry."""
    if isinstance(value, (list, tuple)):
        if len(value) == 1:
            return _cp_styles(module, value[0])
        styles = []
        for k, out in enumerate(value):
            if not hasattr(out, "gather_dim"):
                raise ValueError(f"_cp_plan[{module!r}][{k}]: not a ContextParallelOutput: "
                                 f"{out!r}")
            styles.append(f"gather(out.{k}, dim = {out.gather_dim})")
        return styles, []
    if hasattr(value, "gather_dim"):
        return [f"gather(dim = {value.gather_dim})"], []
    if not isinstance(value, dict):
        raise ValueError(f"_cp_plan[{module!r}]: expected a dict of ContextParallelInput "
                         f"or a ContextParallelOutput, not {value!r}")
    styles, comments = [], []
    outputs = [k for k, v in value.items() if getattr(v, "split_output", False)]
    for port, cpi in value.items():
        if not hasattr(cpi, "split_dim"):
            raise ValueError(f"_cp_plan[{module!r}][{port!r}]: not a ContextParallelInput: {cpi!r}")
        if cpi.split_output and isinstance(port, int):
            styles.append(f"split(out.{port}, dim = {cpi.split_dim})")
        elif cpi.split_output and len(outputs) == 1:
            styles.append(f"split(out, dim = {cpi.split_dim})")
        elif cpi.split_output:
            comments.append(f"{_quote(module)}: output {port!r} split on dim {cpi.split_dim}; "
                            "dtpc names a module's outputs by number: split(out.K, dim = "
                            f"{cpi.split_dim}) with K its position in the tuple")
        elif isinstance(port, int):
            comments.append(f"{_quote(module)}: input {port} (by position) split on dim "
                            f"{cpi.split_dim}: split(NAME, dim = {cpi.split_dim}) with its name")
        else:
            styles.append(f"split({port}, dim = {cpi.split_dim})")
    return styles, comments


def plan_rules(model=None, cp_plan=None, tp_plan=None):
    """The dtpc rules of a diffusers model's plans, as text (one rule per
    module, keys aligned, tensor parallelism first). ``model``: anything
    with ``_cp_plan`` / ``_tp_plan`` attributes (a diffusers model class);
    ``cp_plan`` / ``tp_plan`` given directly take precedence."""
    if cp_plan is None:
        cp_plan = getattr(model, "_cp_plan", None)
    if tp_plan is None:
        tp_plan = getattr(model, "_tp_plan", None)
    rules, comments = [], []
    for module, value in (tp_plan or {}).items():
        rules.append((module, [_tp_style(module, value)]))
    for module, value in (cp_plan or {}).items():
        styles, notes = _cp_styles(module, value)
        if styles:
            rules.append((module, styles))
        comments += notes
    if cp_plan:
        comments.append("diffusers picks the attention's context style from its backend: "
                        "add '\"<attention glob>\" : ulysses, ring;' (a style whose axis "
                        "has size 1 does nothing)")
    width = max((len(_quote(m)) for m, _ in rules), default=0)
    lines = [f"{_quote(m):<{width}} : {', '.join(s)};" for m, s in rules]
    lines += [f"# {c}" for c in comments]
    return "\n".join(lines) + ("\n" if lines else "")


def _quote(module):
    return '"' + module.replace("\\", "\\\\").replace('"', '\\"') + '"'


def print_plan_rules(model=None, cp_plan=None, tp_plan=None):
    """Prints plan_rules(...) on standard output."""
    print(plan_rules(model, cp_plan, tp_plan), end="")
