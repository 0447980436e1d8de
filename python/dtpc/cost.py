"""The cost model (docs/cost-model.md): ``cost``, a plan's predicted
forward pass on a hardware profile, and ``suggest``, the meshes of a world
ranked. Both run ``dtpc cost`` / ``dtpc suggest --format json`` as a
subprocess, as ``compile_cached`` runs the compiler: the model compiles
plans, and libdtpc (the runtime this package loads) holds no compiler."""
import json
import os
import subprocess

from ._lib import DtpcError, program
from .cache import _config_path, _plan_args


def _run(command, path, hw, args):
    """The program's JSON report; a failure raises DtpcError with its
    message (a plan's located diagnostics, the profile's refusal)."""
    if hw is None:
        raise DtpcError(f"{command} needs hw: a hardware profile's file (hw/*.json)")
    p = subprocess.run([program(), command, os.fspath(path), "--hw", os.fspath(hw),
                        "--format", "json"] + args, capture_output=True, text=True)
    # a report: 0; suggest's where no mesh compiles (its refusals): 1
    return p, json.loads(p.stdout) if p.returncode in (0, 1) and p.stdout.strip() else None


def _diagnostics(path, plan, mesh, context, defines, config, dtype):
    """A plan's errors as ``dtpc check --format json``'s list (the text of
    the failure is for people; the list for programs)."""
    j = subprocess.run([program(), "check", os.fspath(path), "--format", "json"]
                       + _plan_args(plan, mesh, context, defines, None, config, dtype),
                       capture_output=True, text=True)
    try:
        return json.loads(j.stdout)["diagnostics"]
    except (ValueError, KeyError):
        return []


def cost(path, plan=None, mesh=None, context=None, config=None, defines=None, dtype=None, *,
         hw=None):
    """``dtpc cost --format json`` of one plan of a .plan file on the
    profile ``hw`` (a path): a dict, the report (``step_s``, ``bound_by``,
    ``memory_bytes``, ``fits``, ``ranks``: each rank's time by resource,
    FLOPs, communication and memory). ``plan`` may be left out where the
    file has one plan; ``mesh``, ``context``, ``config`` (a path or a dict)
    and ``defines`` as ``dtpc.check`` takes them; ``dtype``: "f32" or
    "bf16" (else the profile's default). A plan that does not compile, or a
    profile refused, raises DtpcError with the located message (and, for the
    plan, ``.diagnostics``)."""
    with _config_path(config) as cfg:
        p, report = _run("cost", path, hw, _plan_args(plan, mesh, context, defines, None, cfg,
                                                      dtype))
        if report is not None:
            return report
        diagnostics = (_diagnostics(path, plan, mesh, context, defines, cfg, dtype)
                       if p.returncode == 1 else [])
    raise DtpcError(p.stderr.strip() or f"dtpc cost exited with status {p.returncode}",
                    diagnostics=diagnostics)


def suggest(path, plan=None, world=None, hw=None, max_mem=None, top=None, context=None,
            config=None, defines=None, dtype=None):
    """``dtpc suggest --format json``: every ring x ulysses x tp mesh of
    ``world`` ranks for the plan, ranked (what fits first, then by predicted
    time): a list of dicts, at most ``top`` (default 10), each with ``mesh``
    (as ``cost``'s mesh takes it), ``name``, ``context``, ``step_s``,
    ``memory_bytes``, ``fits`` and ``reason``. ``max_mem``: the bytes a rank
    may use (default: the profile's). No mesh compiling, a plan that does
    not parse, or a profile refused raises DtpcError with the located
    message."""
    if world is None:
        raise DtpcError("suggest needs world: the number of ranks")
    args = ["--world", str(world)]
    if max_mem is not None:
        args += ["--max-mem", str(max_mem)]
    if top is not None:
        args += ["--top", str(top)]
    with _config_path(config) as cfg:
        p, report = _run("suggest", path, hw,
                         args + _plan_args(plan, None, context, defines, None, cfg, dtype))
    if report is not None and p.returncode == 0:
        return report["meshes"]
    if report is not None:  # no mesh to rank: why each was refused or left out
        lines = [f"refused: {r['name']}{'; context: ' if r['context'] else ''}{r['context']}: "
                 f"{r['why']}" for r in report["refused"]]
        if report["dropped"]:
            lines.append(f"{', '.join(report['unused_axes'])}: not used by plan "
                         f"{report['plan']} ({report['dropped']} meshes with them left out)")
        raise DtpcError("\n".join([f"no mesh of {world} ranks to suggest for plan "
                                   f"{report['plan']}"] + lines))
    raise DtpcError(p.stderr.strip() or f"dtpc suggest exited with status {p.returncode}")
