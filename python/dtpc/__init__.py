"""dtpc from Python: check and compile parallel plans (cached), load graphs,
and replay them on persistent ranks, with numpy arrays or torch tensors in
and numpy arrays out.

- ``compile_cached(path, plan=..., mesh=...)``: a ``Graph``, compiled once
  per plan file, compiler and arguments (in memory, then on disk);
- ``Ranks(graph)``: one session per rank, kept: ``bind_weights`` once,
  ``run`` many times; the ranks are threads of this process (``backend=
  "local"``) or this process is one rank of an MPI job (``"mpi"``);
- ``stats``: the process's counters (compiles, cache hits, weight binds,
  sessions, runs), ``reset_stats()``;
- ``check``, ``compile``, ``Graph.run`` (one pass, ranks created and freed);
- ``plan_rules`` / ``print_plan_rules`` (from ``dtpc.diffusers``): a
  diffusers model's ``_cp_plan`` / ``_tp_plan`` as dtpc plan rules.

The runtime is libdtpc.so, called through ctypes (which releases the GIL
during a foreign call, so local ranks do run at once and meet in their
collectives); the compiler is the ``dtpc`` program, run as a subprocess.
Where they are found: ``dtpc._lib`` (``DTPC_LIB``/``DTPC``, ``DTPC_BUILD``,
the repository's build, an install). docs/python.md is the guide.

Only numpy is needed; torch tensors are taken when torch is there.
"""
from ._lib import DtpcError, models_dir
from .cache import CheckResult, check, compile, compile_cached
from .cost import cost, suggest
from .diffusers import ContextParallelInput, ContextParallelOutput, plan_rules, print_plan_rules
from .runtime import Graph, Ranks, reset_stats, stats

__all__ = ["check", "compile", "compile_cached", "Graph", "Ranks", "DtpcError", "CheckResult",
           "stats", "reset_stats", "models_dir", "plan_rules", "print_plan_rules",
           "ContextParallelInput", "ContextParallelOutput", "cost", "suggest"]
