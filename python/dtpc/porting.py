"""The porting aid: a diffusers module and a dtpc plan of it, run side by side
on the same random weights and inputs, compared module by module, so that a
port that differs is told *where* (docs/porting.md, "When the comparison
fails: which module").

``compare(module, "models/sd3.plan", config=..., defines=...)`` records every
submodule's output with forward hooks, compiles the plan on one rank with
those modules' tensors as outputs (``--expose``), runs it with the module's
weights, and walks the modules in the order diffusers finished them: the
first whose output differs beyond ``rtol`` is ``.first``, and ``.table()``
lists every module with its verdict. torch is needed (diffusers' module is
a torch module)."""
import inspect
import re
import subprocess

import numpy as np

from ._lib import DtpcError, program
from .cache import _config_path, _plan_args, check, compile_cached
from .runtime import Ranks

# a row's verdicts
SAME, DIFFERS, NOT_COMPARABLE, NOT_IN_PLAN = "same", "differs", "not comparable", "no dtpc op"


class Row:
    """One diffusers module's output against the plan's tensor of that name:
    ``name`` (the diffusers module, ``.K`` for the K-th element of a tuple
    the plan names so), ``verdict``, ``max_abs`` and ``max_rel``
    (max|dtpc - diffusers| / max|diffusers|, normwise as ``dtpc run
    --verify``), the two shapes, and ``how`` (the layout rule that made them
    comparable, or why none did)."""

    def __init__(self, name, verdict, diffusers_shape=None, dtpc_shape=None, max_abs=None,
                 max_rel=None, how=""):
        self.name, self.verdict, self.how = name, verdict, how
        self.diffusers_shape, self.dtpc_shape = diffusers_shape, dtpc_shape
        self.max_abs, self.max_rel = max_abs, max_rel

    def __repr__(self):
        err = "" if self.max_rel is None else f", max_rel={self.max_rel:.3g}"
        return f"Row({self.name!r}, {self.verdict}{err})"


class Comparison:
    """What ``compare`` found: ``rows`` in diffusers' order of completion
    (a module after the modules it calls), ``first`` (the first row that
    differs, or None), ``ok`` (none differs) and ``rtol``."""

    def __init__(self, rows, rtol):
        self.rows, self.rtol = rows, rtol
        self.first = next((r for r in rows if r.verdict == DIFFERS), None)
        self.ok = self.first is None

    def compared(self):
        return [r for r in self.rows if r.verdict in (SAME, DIFFERS)]

    def table(self, all_rows=False):
        """The summary: every compared module (``all_rows``: every module,
        the not comparable and those the plan lacks too), one line each."""
        rows = self.rows if all_rows else self.compared()
        width = max([len(r.name) for r in rows] + [6])
        lines = [f"{'module':<{width}}  {'verdict':<14}  {'max abs':>9}  {'max rel':>9}  shapes"]
        for r in rows:
            err = ("" if r.max_abs is None else f"{r.max_abs:9.3g}  {r.max_rel:9.3g}")
            shapes = "" if r.diffusers_shape is None else _shape(r.diffusers_shape)
            if r.dtpc_shape is not None:
                shapes += f" / {_shape(r.dtpc_shape)}"
            if r.how:
                shapes += f" ({r.how})"
            lines.append(f"{r.name:<{width}}  {r.verdict:<14}  {err:<20}  {shapes}".rstrip())
        return "\n".join(lines)

    def __str__(self):
        n = len(self.compared())
        if self.ok:
            return f"no module differs beyond rtol {self.rtol:g} ({n} compared)"
        f = self.first
        return (f"first module that differs: {f.name}: max abs error {f.max_abs:.3g}, max rel "
                f"{f.max_rel:.3g} > {self.rtol:g} (diffusers {_shape(f.diffusers_shape)}, dtpc "
                f"{_shape(f.dtpc_shape)}{', ' + f.how if f.how else ''}; {n} compared)")


def _shape(s):
    return "[" + ", ".join(str(d) for d in s) + "]"


def randomize(module, seed):
    """Seeded weights that make every part of a tiny model show in its output
    (as tools/gen_models.py's fixtures): every floating parameter N(0, 1/fan_in)
    (a Linear's and Conv's weight by its input width), biases N(0, 0.1^2),
    the affine weights of norms 1 + N(0, 0.2^2) so that a weight bound to the
    wrong tensor shows. Persistent buffers (position tables) keep their
    values."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if not p.is_floating_point():
                continue
            if name.endswith("bias"):
                v = 0.1 * torch.randn(p.shape, generator=gen)
            elif p.ndim == 1:
                # a norm's scale, or a table of one row (a scale_shift_table)
                v = 1 + 0.2 * torch.randn(p.shape, generator=gen)
            else:
                fan_in = int(np.prod(p.shape[1:]))
                v = torch.randn(p.shape, generator=gen) / fan_in ** 0.5
            p.copy_(v.to(p.dtype))


def _plan_ir(path, plan, mesh, config, defines):
    """The plan's inputs {name: shape} and the modules of its ops {name: op
    index}, from ``dtpc check -d i``: the IR's input lines and op lines (a
    variable's update, marked '~', is no module)."""
    with _config_path(config) as cfg:
        p = subprocess.run([program(), "check", str(path), "-q", "-d", "i"]
                           + _plan_args(plan, mesh, None, defines, None, cfg, "f32"),
                           capture_output=True, text=True)
    if p.returncode:
        raise DtpcError(p.stderr.strip() or f"dtpc check exited with status {p.returncode}")
    inputs = {m.group(1): tuple(int(d) for d in m.group(2).split(", ") if d)
              for m in re.finditer(r"^input +%\d+ (\S+) \[([0-9, ]*)\]$", p.stdout, re.M)}
    ops = re.findall(r"^%\d+ += \S+ .*  (~?\S+) \[[0-9, ]*\]$", p.stdout, re.M)
    return inputs, {n: i for i, n in enumerate(ops) if not n.startswith("~")}


def _globs(names, limit=500):
    """Names as few globs of alternatives as the compiler's bound on one
    ({a.b,c.d}: 511 bytes) allows; each glob matches what it lists."""
    out, group = [], []
    for n in sorted(names):
        if group and len(",".join(group + [n])) + 2 > limit:
            out.append(group)
            group = []
        group.append(n)
    if group:
        out.append(group)
    return [g[0] if len(g) == 1 else "{" + ",".join(g) + "}" for g in out]


def _one_rank_mesh(path, plan, config, defines):
    """The plan's mesh with every axis 1 ("tp = 1, ring = 1"), so that its
    rules and checks stay as written; None for a plan without a mesh."""
    r = check(path, plan=plan, config=config, defines=defines)
    if not r.ok or not r.summary:
        why = "; ".join(d.get("message", "") for d in r.diagnostics[:3])
        raise DtpcError(f"dtpc check {path}{' --plan ' + plan if plan else ''}: {why or r.returncode}"
                        " — give compare a mesh of one rank (mesh=\"tp = 1\"), or a plan that "
                        "passes at this configuration")
    axes = r.summary[0].get("mesh") or []
    return ", ".join(f"{a['axis']} = 1" for a in axes) or None


def _prefixes(shape):
    """The running products of a shape's dimensions other than 1: two shapes
    of one numel are one reshape apart (no transposition) when one set holds
    the other."""
    out, n = set(), 1
    for d in shape:
        if d != 1:
            n *= d
            out.add(n)
    return out


def _reshapes(a, b):
    return a.size == b.size and (_prefixes(a.shape) <= _prefixes(b.shape)
                                 or _prefixes(b.shape) <= _prefixes(a.shape))


def _align(ref, got):
    """ref (diffusers') in got's (dtpc's) layout, and the rule applied; None
    and why when no rule fits. The rules: the same shape; a reshape that
    merges or splits neighbouring dimensions (diffusers' [B, D] and dtpc's
    [B, 1, D]; [B, S, H, D] and [B, S, H*D]); diffusers' heads-first [B, H,
    S, D] and dtpc's [B, S, H*D] (transposed, then merged). The rule is
    chosen by the shapes alone, never by the values."""
    if ref.shape == got.shape:
        return ref, ""
    if _reshapes(ref, got):
        return ref.reshape(got.shape), "reshaped"
    if ref.ndim == 4 and ref.size == got.size:
        t = ref.transpose(0, 2, 1, 3)
        if _reshapes(t, got):
            return t.reshape(got.shape), "heads moved: [B, H, S, D] -> [B, S, H*D]"
    if ref.size != got.size:
        return None, f"{ref.size} elements against {got.size}"
    return None, "no layout rule maps one onto the other"


def _pick(elements, got):
    """The element of a diffusers tuple that dtpc's single tensor of that name
    is: the first, if a layout rule fits it (diffusers' norms return the
    normalised tensor first, then their gates), else the only one that fits
    (a block that returns (None, hidden_states))."""
    fits = [i for i, e in enumerate(elements) if e is not None and _align(e, got)[0] is not None]
    if 0 in fits:
        return 0
    return fits[0] if len(fits) == 1 else None


def _row(name, ref, got, rtol):
    aligned, how = _align(ref, got)
    if aligned is None:
        return Row(name, NOT_COMPARABLE, ref.shape, got.shape, how=how)
    diff = np.abs(aligned.astype(np.float64) - got.astype(np.float64))
    scale = float(np.abs(aligned).max()) if aligned.size else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    if not np.isfinite(diff).all():
        max_abs = max_rel = float("inf")
    else:
        max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    return Row(name, DIFFERS if max_rel > rtol else SAME, ref.shape, got.shape, max_abs, max_rel,
               how)


def _host(t):
    import torch
    return t.detach().to(device="cpu", dtype=torch.float32).numpy()


def compare(module, plan_file, plan=None, config=None, defines=None, inputs=None, seed=0,
            rtol=1e-4, dtype="f32", mesh=None, cache_dir=None):
    """Runs diffusers' ``module`` and the plan ``plan`` of ``plan_file`` (one
    rank) on the same weights and inputs and compares every submodule's
    output with the plan's tensor of the same name. Returns a Comparison.

    ``seed``: the module's weights are redrawn (``randomize``) from it; None
    keeps them. ``config`` (a config.json, its folder or a mapping; default
    the module's own ``config`` where it has one) and ``defines`` set the
    plan's parameters as ``compile_cached``'s. ``inputs``: forward's
    arguments by name (tensors, and any others forward takes); by default
    each input of the plan, N(0, 1) of the plan's shape, seeded — give them
    where values matter (a pipeline's timesteps, position ids). ``rtol``: the
    normwise bound, max|dtpc - diffusers| / max|diffusers|. ``mesh``: one of
    one rank replacing the plan's (default: the plan's axes, each 1, where
    the plan passes ``dtpc check`` as it is; context-parallel styles need
    ring · ulysses > 1, so compare a TP plan). Only float32:
    the tolerance of a 16-bit run would hide the difference a port is
    looking for."""
    import torch
    if dtype not in ("f32", "float32"):
        raise DtpcError(f"dtype {dtype!r}: the comparison runs in float32 ('f32')")
    module = module.float().eval()
    if seed is not None:
        randomize(module, seed)
    if config is None and getattr(module, "config", None) is not None:
        config = dict(module.config)
    if mesh is None:
        mesh = _one_rank_mesh(plan_file, plan, config, defines)
    plan_inputs, plan_modules = _plan_ir(plan_file, plan, mesh, config, defines)
    if inputs is None:
        gen = torch.Generator().manual_seed(0 if seed is None else seed)
        inputs = {n: torch.randn(s, generator=gen) for n, s in plan_inputs.items()}
    missing = [n for n in plan_inputs if n not in inputs]
    if missing:
        raise DtpcError(f"inputs: the plan's input {missing[0]!r} is not given")

    order, seen = [], {}

    def hook(name):
        def record(_mod, _args, out):
            if name in seen:  # called again: the first call is the one a plan names
                return
            if isinstance(out, torch.Tensor):
                seen[name] = _host(out)
            elif isinstance(out, (tuple, list)):
                seen[name] = [_host(e) if isinstance(e, torch.Tensor) else None for e in out]
            else:
                return  # a dataclass or None: nothing a plan's tensor can be
            order.append(name)
        return record

    kwargs = dict(inputs)
    if "return_dict" in inspect.signature(module.forward).parameters:
        kwargs["return_dict"] = False
    handles = [m.register_forward_hook(hook(n)) for n, m in module.named_modules() if n]
    try:
        with torch.no_grad():
            module(**kwargs)
    finally:
        for h in handles:
            h.remove()

    # the plan's ops named as a diffusers module, or as element K of one's
    # tuple (NAME.K), become outputs
    wanted = set(order) | {f"{n}.{k}" for n in order if isinstance(seen[n], list)
                           for k in range(len(seen[n]))}
    expose = _globs(wanted & set(plan_modules))
    if not expose:
        raise DtpcError(f"{plan_file}: no module of the plan is named as a module of "
                        f"{type(module).__name__}")
    graph = compile_cached(plan_file, plan=plan, mesh=mesh, config=config, defines=defines,
                           dtype="f32", expose=expose, cache_dir=cache_dir)
    weights = module.state_dict()
    missing = [w for w in graph.weights if w not in weights]
    if missing:
        raise DtpcError(f"the plan binds {len(missing)} weights the module does not have: "
                        + ", ".join(sorted(missing)[:3]))
    feed = {k: inputs[k] for k in plan_inputs}
    with Ranks(graph, ranks=1) as ranks:
        ranks.bind_weights({w: weights[w] for w in graph.weights})
        outs = ranks.run(feed)

    rows = []
    for name in order:
        ref = seen[name]
        later = _later_submodule(name, order, plan_modules)
        if later and name in outs:
            rows.append(Row(name, NOT_COMPARABLE, None, outs[name].shape,
                            how=f"the plan's {name} comes before its {later}"))
            continue
        if not isinstance(ref, list):
            rows.append(_row(name, ref, outs[name], rtol) if name in outs
                        else Row(name, NOT_IN_PLAN, ref.shape))
            continue
        parts = [k for k in range(len(ref)) if f"{name}.{k}" in outs]
        if parts:
            rows += _tuple_rows(name, ref, outs, parts, rtol)
        elif name in outs:
            k = _pick(ref, outs[name])
            if k is None:
                rows.append(Row(name, NOT_COMPARABLE, None, outs[name].shape,
                                how=f"no element of diffusers' {len(ref)}-tuple fits"))
            else:
                rows.append(_row(name if k == 0 else f"{name}[{k}]", ref[k], outs[name], rtol))
        else:
            rows.append(Row(name, NOT_IN_PLAN))
    return Comparison(rows, rtol)


def _later_submodule(name, order, plan_modules):
    """A diffusers submodule of name that the plan computes after its op
    name, or None. A module's output is the last thing it computes, so a
    plan whose `attn` is the attention before `attn.to_out` names by `attn`
    another tensor than diffusers' (Flux.2's attention returns the output
    projection's): they are not compared."""
    at = plan_modules.get(name)
    if at is None:
        return None
    return next((n for n in order if n.startswith(name + ".") and plan_modules.get(n, -1) > at),
                None)


def _tuple_rows(name, ref, outs, parts, rtol):
    """dtpc's NAME.K (an op the plan names as element K of diffusers' tuple
    NAME) against that element."""
    return [_row(f"{name}.{k}", ref[k], outs[f"{name}.{k}"], rtol) if ref[k] is not None
            else Row(f"{name}.{k}", NOT_COMPARABLE, None, outs[f"{name}.{k}"].shape,
                     how="diffusers' element is None") for k in parts]
