"""diffusers' parallel plans as dtpc plan rules.

diffusers describes a model's parallelism in two class attributes:
``_cp_plan`` (context parallelism: module name -> inputs to split or
outputs to gather) and ``_tp_plan`` (tensor parallelism: module-name glob
-> "colwise" / "rowwise" / a packed style). ``plan_rules`` transliterates
them into the rules of a dtpc plan, the part of the port users would
otherwise write by hand:

    "blocks.*.attn.to_q"    : colwise;                        # "colwise"
    "blocks.*.ff.linear_in" : colwise(blocks = [64, 64]);     # PackedColwiseParallel([1, 1])
    ""                      : split(hidden_states, dim = 1);  # ContextParallelInput(split_dim=1)
    "proj_out"              : gather(dim = 1);                # ContextParallelOutput(gather_dim=1)

diffusers need not be installed: pass the dicts (or any object carrying
them, such as the model class). Their values may be diffusers' own
ContextParallelInput / ContextParallelOutput / PackedColwiseParallel /
PackedRowwiseParallel or the stand-ins below: only the attributes (and, for
the packed styles, the class name) are read. ``expected_dims`` is not
carried over: dtpc checks every shape from the model itself. Output K of a
module that returns a tuple (``{0: ContextParallelInput(...,
split_output=True)}``, or a list of ContextParallelOutput) is dtpc's
``out.K`` (a ``tuple(...)`` module). Keys that differ only in one block
index and have the same styles (a dict comprehension over the blocks) are
one rule, the indexes as alternatives: ``"blocks.{0,1,2}.attn1"``.

A packed style's ``blocks`` are proportions in diffusers (``[1, 1]``: two
equal halves) and sizes in dtpc (``colwise(blocks = [18432, 18432])``), and
``PackedColwiseParallel()`` leaves them to an attribute the model's
``__init__`` sets on the Linear (``_tp_packed_col_blocks``): both need the
module itself, so pass a model *instance* (a meta-device one costs no
memory) for those rules. What has no dtpc spelling, or cannot be known from
what was given (an input given by position, several named outputs, a packed
style without the instance, an unknown style), comes out as a comment that
names the key (``# cannot transliterate "KEY": why``), never an exception,
and so does the attention style, which diffusers takes from its attention
backend rather than from the plan.
"""
import fnmatch
from dataclasses import dataclass
from typing import Optional

__all__ = ["ContextParallelInput", "ContextParallelOutput", "PackedColwiseParallel",
           "PackedRowwiseParallel", "plan_rules", "print_plan_rules"]


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


@dataclass(frozen=True)
class PackedColwiseParallel:
    """diffusers.hooks.tensor_parallel.PackedColwiseParallel: colwise over a
    fused projection, each block of the out dim sharded by itself. blocks:
    proportions (``[1, 1]``), or None for the Linear's _tp_packed_col_blocks."""
    blocks: Optional[tuple] = None


@dataclass(frozen=True)
class PackedRowwiseParallel:
    """diffusers.hooks.tensor_parallel.PackedRowwiseParallel: rowwise over a
    Linear whose input is a concatenation, each block of the in dim sharded
    by itself. blocks: proportions, or None for _tp_packed_row_blocks."""
    blocks: Optional[tuple] = None


class _Untransliterable(Exception):
    """Why a plan entry has no dtpc rule: it becomes a comment."""


# torch's ParallelStyle classes, which a _tp_plan may hold instead of strings
_TP_STYLES = {"colwise": "colwise", "rowwise": "rowwise",
              "ColwiseParallel": "colwise", "RowwiseParallel": "rowwise"}
# diffusers' packed styles: the dtpc style, the weight's dim it shards, the
# Linear's attribute holding the blocks when the style has none
_PACKED = {"PackedColwiseParallel": ("colwise", 0, "_tp_packed_col_blocks"),
           "PackedRowwiseParallel": ("rowwise", 1, "_tp_packed_row_blocks")}


def _is_instance(model):
    """Whether model is a module object (its submodules can be looked at),
    not a class or a mere holder of the plans."""
    return (model is not None and not isinstance(model, type)
            and callable(getattr(model, "named_modules", None)))


def _matching(model, glob):
    """The submodules of model that the _tp_plan glob names: diffusers' `*`
    stands for one segment (a block index)."""
    want = glob.split(".")
    for name, mod in model.named_modules():
        segs = name.split(".")
        if len(segs) == len(want) and all(fnmatch.fnmatchcase(s, w) for s, w in zip(segs, want)):
            yield mod


def _tp_style(glob, value, model):
    name = value if isinstance(value, str) else type(value).__name__
    if name in _TP_STYLES:
        return _TP_STYLES[name]
    if name not in _PACKED:
        raise _Untransliterable(f"no dtpc style for {value!r} (dtpc has colwise and rowwise, "
                                "packed or not)")
    style, dim, attr = _PACKED[name]
    blocks = getattr(value, "blocks", None)
    if not _is_instance(model):
        if blocks:
            why = (f"{name}({list(blocks)}) gives its blocks as proportions, dtpc's "
                   f"{style}(blocks = [...]) as sizes")
        else:
            why = f"{name}() takes its blocks from the Linear's {attr}, set in the model's __init__"
        raise _Untransliterable(why + ": pass a model instance (a meta-device one will do)")
    sizes = set()
    for mod in _matching(model, glob):
        own = blocks or getattr(mod, attr, None)
        if not own:
            raise _Untransliterable(f"{name}() without blocks, and the Linear has no {attr} "
                                    "(diffusers refuses it too)")
        width = mod.weight.shape[dim]
        if width % sum(own):
            raise _Untransliterable(
                f"the blocks {list(own)} add up to {sum(own)}, which does not divide the "
                f"Linear's {'out' if dim == 0 else 'in'}_features {width} (diffusers refuses it too)")
        sizes.add(tuple(b * (width // sum(own)) for b in own))
    if not sizes:
        raise _Untransliterable("the glob matches no module of the model")
    if len(sizes) > 1:
        raise _Untransliterable(f"its modules have different blocks: {sorted(sizes)}")
    return f"{style}(blocks = [{', '.join(str(b) for b in sizes.pop())}])"


def _cp_styles(module, value):
    """(styles, comments) of one _cp_plan entry; raises _Untransliterable when
    the entry is not a _cp_plan value at all."""
    if isinstance(value, (list, tuple)):
        if len(value) == 1:
            return _cp_styles(module, value[0])
        styles = []
        for k, out in enumerate(value):
            if not hasattr(out, "gather_dim"):
                raise _Untransliterable(f"output {k} is not a ContextParallelOutput: {out!r}")
            styles.append(f"gather(out.{k}, dim = {out.gather_dim})")
        return styles, []
    if hasattr(value, "gather_dim"):
        return [f"gather(dim = {value.gather_dim})"], []
    if not isinstance(value, dict):
        raise _Untransliterable("not a dict of ContextParallelInput nor a ContextParallelOutput: "
                                f"{value!r}")
    styles, comments = [], []
    outputs = [k for k, v in value.items() if getattr(v, "split_output", False)]
    for port, cpi in value.items():
        cannot = f"cannot transliterate {_quote(module)}[{port!r}]: "
        if not hasattr(cpi, "split_dim"):
            comments.append(cannot + f"not a ContextParallelInput: {cpi!r}")
        elif cpi.split_output and isinstance(port, int):
            styles.append(f"split(out.{port}, dim = {cpi.split_dim})")
        elif cpi.split_output and len(outputs) == 1:
            styles.append(f"split(out, dim = {cpi.split_dim})")
        elif cpi.split_output:
            comments.append(cannot + f"output {port!r} split on dim {cpi.split_dim}; dtpc names "
                            "a module's outputs by number: split(out.K, dim = "
                            f"{cpi.split_dim}) with K its position in the tuple")
        elif isinstance(port, int):
            comments.append(cannot + f"input {port} (by position) split on dim {cpi.split_dim}: "
                            f"split(NAME, dim = {cpi.split_dim}) with its name")
        else:
            styles.append(f"split({port}, dim = {cpi.split_dim})")
    return styles, comments


def _merge_indexed(rules):
    """Rules whose keys differ in one numeric segment only and whose styles
    are the same (a _cp_plan's `**{f"blocks.{i}.attn1": ... for i in
    range(40)}`) as one rule, the indexes as glob alternatives."""
    groups = []  # [segments, position of the index or None, indexes, styles]
    for module, styles in rules:
        segs = module.split(".")
        for g in groups:
            if g[3] != styles or len(g[0]) != len(segs):
                continue
            diff = [i for i, (a, b) in enumerate(zip(g[0], segs)) if a != b and i != g[1]]
            if g[1] is None and len(diff) == 1 and segs[diff[0]].isdigit() \
                    and g[0][diff[0]].isdigit():
                g[1], g[2] = diff[0], [g[0][diff[0]], segs[diff[0]]]
                break
            if g[1] is not None and not diff and segs[g[1]].isdigit():
                g[2].append(segs[g[1]])
                break
        else:
            groups.append([segs, None, None, styles])
    out = []
    for segs, pos, indexes, styles in groups:
        if pos is not None:
            segs = segs[:pos] + ["{" + ",".join(indexes) + "}"] + segs[pos + 1:]
        out.append((".".join(segs), styles))
    return out


def plan_rules(model=None, cp_plan=None, tp_plan=None):
    """The dtpc rules of a diffusers model's plans, as text (one rule per
    module, keys aligned, tensor parallelism first, then a comment per entry
    that has no rule). ``model``: anything with ``_cp_plan`` / ``_tp_plan``
    attributes (a diffusers model class, or an instance, which the packed
    styles need for their sizes); ``cp_plan`` / ``tp_plan`` given directly
    take precedence."""
    if cp_plan is None:
        cp_plan = getattr(model, "_cp_plan", None)
    if tp_plan is None:
        tp_plan = getattr(model, "_tp_plan", None)
    rules, comments = [], []
    for glob, value in (tp_plan or {}).items():
        try:
            rules.append((glob, [_tp_style(glob, value, model)]))
        except _Untransliterable as e:
            comments.append(f"cannot transliterate {_quote(glob)}: {e}")
    for module, value in (cp_plan or {}).items():
        try:
            styles, notes = _cp_styles(module, value)
        except _Untransliterable as e:
            styles, notes = [], [f"cannot transliterate {_quote(module)}: {e}"]
        if styles:
            rules.append((module, styles))
        comments += notes
    if cp_plan:
        comments.append("diffusers picks the attention's context style from its backend: "
                        "add '\"<attention glob>\" : ulysses, ring;' (a style whose axis "
                        "has size 1 does nothing)")
    rules = _merge_indexed(rules)
    width = max((len(_quote(m)) for m, _ in rules), default=0)
    lines = [f"{_quote(m):<{width}} : {', '.join(s)};" for m, s in rules]
    lines += [f"# {c}" for c in comments]
    return "\n".join(lines) + ("\n" if lines else "")


def _quote(module):
    return '"' + module.replace("\\", "\\\\").replace('"', '\\"') + '"'


def print_plan_rules(model=None, cp_plan=None, tp_plan=None):
    """Prints plan_rules(...) on standard output."""
    print(plan_rules(model, cp_plan, tp_plan), end="")
