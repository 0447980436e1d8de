"""dtpc from Python: check and compile parallel plans, load graphs, replay
them on a local world, get the outputs as numpy arrays.

The runtime is libdtpc.so, called through ctypes: ``Graph`` wraps a loaded
graph and ``Graph.run`` replays it on N ranks, each a Python thread calling
``dtpc_session_run`` (ctypes releases the GIL during a foreign call, so the
ranks do run at once and meet in their collectives). The compiler is not in
the library: ``check`` and ``compile`` run the ``dtpc`` program as a
subprocess and read its JSON.

Where the files are found, first match wins:

- ``DTPC_LIB`` (the library) and ``DTPC`` (the program), paths;
- ``DTPC_BUILD``, a build folder holding both (``make BUILD=...``);
- the repository's ``build/`` beside this package (``python/dtpc``);
- installed: ``libdtpc.so`` on the loader's path, ``dtpc`` on ``PATH``.

``plan_rules`` / ``print_plan_rules`` (from ``dtpc.diffusers``) turn a diffusers model's
``_cp_plan`` / ``_tp_plan`` into dtpc plan rules.

Only numpy is needed (no torch). Arrays are float32, C-ordered; others are
converted.
"""
import ctypes
import ctypes.util
import json
import os
import shutil
import subprocess
import threading

import numpy as np

from .diffusers import ContextParallelInput, ContextParallelOutput, plan_rules, print_plan_rules

__all__ = ["check", "compile", "Graph", "DtpcError", "CheckResult", "plan_rules",
           "print_plan_rules", "ContextParallelInput", "ContextParallelOutput"]

_REPO_BUILD = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "build")


def _find(env, name, fallback):
    if os.environ.get(env):
        return os.environ[env]
    for folder in (os.environ.get("DTPC_BUILD"), _REPO_BUILD):
        if folder and os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return fallback()


def _program():
    p = _find("DTPC", "dtpc", lambda: shutil.which("dtpc"))
    if not p:
        raise DtpcError("cannot find the dtpc program: set DTPC or DTPC_BUILD")
    return p


class DtpcError(Exception):
    """A failure of libdtpc (status, message, rank) or of the dtpc program."""

    def __init__(self, message, status=None, rank=None):
        super().__init__(message)
        self.status = status
        self.rank = rank


# ---- the compiler, as a subprocess -------------------------------------------------------

class CheckResult:
    """``dtpc check --format json``: ``ok``, ``errors`` (a count),
    ``diagnostics`` and ``summary`` (the JSON's lists, docs/language.md) and
    the program's ``returncode``."""

    def __init__(self, doc, returncode):
        self.diagnostics = doc.get("diagnostics", [])
        self.errors = doc.get("errors", 0)
        self.summary = doc.get("summary", [])
        self.returncode = returncode
        self.ok = returncode == 0

    def __repr__(self):
        return f"CheckResult(ok={self.ok}, errors={self.errors})"


def _plan_args(plan, mesh, context, defines, world, config):
    args = []
    if config is not None:
        args += ["--config", os.fspath(config)]
    if plan is not None:
        args += ["--plan", plan]
    if mesh is not None:
        args += ["--mesh", mesh]
    if context is not None:
        args += ["--context", context]
    if world is not None:
        args += ["--world", str(world)]
    for k, v in (defines or {}).items():
        args += ["-D", f"{k}={v}"]
    return args


def check(path, plan=None, mesh=None, context=None, defines=None, world=None, config=None):
    """Checks the plans of a .plan file (``plan``: only that one). ``mesh``
    and ``context`` replace the plan's ("ring = 2, tp = 2"); ``config`` (a
    diffusers config.json or its folder) and then ``defines`` override model
    parameters ({"seq": 2048}). Errors in the plan (and the config) are in
    the result; a usage or I/O error raises DtpcError."""
    p = subprocess.run([_program(), "check", os.fspath(path), "--format", "json"]
                       + _plan_args(plan, mesh, context, defines, world, config),
                       capture_output=True, text=True)
    if p.returncode == 2:
        raise DtpcError(p.stderr.strip())
    return CheckResult(json.loads(p.stdout), p.returncode)


def compile(path, out, plan=None, mesh=None, context=None, defines=None, config=None):
    """Compiles one plan of a .plan file to the graph file ``out`` and
    returns it loaded (a Graph). Diagnostics raise DtpcError with the
    compiler's text."""
    p = subprocess.run([_program(), os.fspath(path), "-o", os.fspath(out)]
                       + _plan_args(plan, mesh, context, defines, None, config),
                       capture_output=True, text=True)
    if p.returncode:
        raise DtpcError(p.stderr.strip())
    return Graph.open(out)


# ---- the runtime, through ctypes ---------------------------------------------------------

_lib = None
_lib_lock = threading.Lock()
_p = ctypes.c_void_p
_pp = ctypes.POINTER(ctypes.c_void_p)
_i64p = ctypes.POINTER(ctypes.c_int64)
_f32p = ctypes.POINTER(ctypes.c_float)
_SIGNATURES = {
    "dtpc_status_str": (ctypes.c_char_p, [ctypes.c_int]),
    "dtpc_last_error": (ctypes.c_char_p, []),
    "dtpc_graph_open_file": (ctypes.c_int, [ctypes.c_char_p, _pp]),
    "dtpc_graph_open_buffer": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, _pp]),
    "dtpc_graph_free": (None, [_p]),
    "dtpc_graph_world": (ctypes.c_int, [_p]),
    "dtpc_graph_hash": (ctypes.c_uint64, [_p]),
    "dtpc_graph_meta_at": (ctypes.c_int, [_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                          ctypes.POINTER(ctypes.c_char_p)]),
    "dtpc_local_world_create": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, _pp]),
    "dtpc_comm_local": (ctypes.c_int, [_p, ctypes.c_int, _pp]),
    "dtpc_local_world_free": (None, [_p]),
    "dtpc_comm_free": (None, [_p]),
    "dtpc_session_create": (ctypes.c_int, [_p, _p, ctypes.c_int, _pp]),
    "dtpc_session_free": (None, [_p]),
    "dtpc_session_threads": (ctypes.c_int, [_p, ctypes.c_int]),
    "dtpc_session_bind_weights_file": (ctypes.c_int, [_p, ctypes.c_char_p]),
    "dtpc_session_bind_weights_seed": (ctypes.c_int, [_p, ctypes.c_uint64]),
    "dtpc_session_bind_weight": (ctypes.c_int, [_p, ctypes.c_char_p, _f32p, _i64p, ctypes.c_int]),
    "dtpc_session_bind_inputs_file": (ctypes.c_int, [_p, ctypes.c_char_p]),
    "dtpc_session_bind_inputs_seed": (ctypes.c_int, [_p, ctypes.c_uint64]),
    "dtpc_session_set_input": (ctypes.c_int, [_p, ctypes.c_char_p, _f32p, _i64p, ctypes.c_int]),
    "dtpc_session_run": (ctypes.c_int, [_p]),
    "dtpc_session_noutputs": (ctypes.c_int, [_p]),
    "dtpc_session_output": (ctypes.c_int, [_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                           ctypes.POINTER(_f32p), ctypes.POINTER(_i64p),
                                           ctypes.POINTER(ctypes.c_int)]),
}


def _library():
    global _lib
    with _lib_lock:
        if _lib is None:
            path = _find("DTPC_LIB", "libdtpc.so", lambda: ctypes.util.find_library("dtpc"))
            if not path:
                raise DtpcError("cannot find libdtpc.so: set DTPC_LIB or DTPC_BUILD")
            lib = ctypes.CDLL(path)
            for name, (res, args) in _SIGNATURES.items():
                f = getattr(lib, name)
                f.restype, f.argtypes = res, args
            _lib = lib
        return _lib


def _call(fn, *args, rank=None):
    """Calls a status-returning function; raises with this thread's last
    error (libdtpc keeps it per thread, so it is read on the same one)."""
    lib = _library()
    st = getattr(lib, fn)(*args)
    if st:
        why = lib.dtpc_last_error().decode()
        name = lib.dtpc_status_str(st).decode()
        where = f"rank {rank}: " if rank is not None else ""
        raise DtpcError(f"{where}{fn}: {name}: {why}", status=st, rank=rank)


def _f32(a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    shape = (ctypes.c_int64 * a.ndim)(*a.shape)
    return a, a.ctypes.data_as(_f32p), shape


class Graph:
    """A compiled graph, loaded and validated by libdtpc."""

    def __init__(self, handle):
        self._h = ctypes.c_void_p(handle)

    @classmethod
    def open(cls, path):
        h = ctypes.c_void_p()
        _call("dtpc_graph_open_file", os.fsencode(path), ctypes.byref(h))
        return cls(h.value)

    @classmethod
    def from_bytes(cls, data):
        data = bytes(data)
        h = ctypes.c_void_p()
        _call("dtpc_graph_open_buffer", data, len(data), ctypes.byref(h))
        return cls(h.value)

    def __del__(self):
        if getattr(self, "_h", None) and self._h.value and _lib is not None:
            _lib.dtpc_graph_free(self._h)
            self._h = None

    @property
    def world(self):
        """The ranks the graph was compiled for."""
        return _library().dtpc_graph_world(self._h)

    @property
    def hash(self):
        return _library().dtpc_graph_hash(self._h)

    @property
    def meta(self):
        """The metadata ("plan", "mesh", "param.seq", ...) as a dict of strings."""
        lib, out, i = _library(), {}, 0
        k, v = ctypes.c_char_p(), ctypes.c_char_p()
        while lib.dtpc_graph_meta_at(self._h, i, ctypes.byref(k), ctypes.byref(v)):
            out[k.value.decode()] = v.value.decode()
            i += 1
        return out

    def run(self, inputs=0, weights=0, ranks=None, timeout=120.0, threads=None,
            all_ranks=False):
        """One forward pass on ``ranks`` (default: the graph's world) local
        ranks, each a thread. ``inputs``: a dict of whole arrays by name, a
        safetensors path, or an integer seed; ``weights``: the same (a dict
        holds full tensors: each rank takes its slice; a path may also be a
        diffusers folder, a sharded one or its index, or a ``dtpc shard``
        folder). Seeded tensors depend
        only on (seed, name, element), so runs on any number of ranks see the
        same model. ``threads``: CPU threads per rank (default: the cores
        shared among the ranks). Returns rank 0's outputs, a dict of arrays
        (every rank holds them whole), or with ``all_ranks`` one dict per rank.
        Raises DtpcError naming the first failing rank."""
        lib = _library()
        n = self.world if ranks is None else int(ranks)
        world = ctypes.c_void_p()
        _call("dtpc_local_world_create", n, max(1, int(timeout * 1000)), ctypes.byref(world))
        results = [None] * n
        errors = [None] * n
        # keep the converted arrays alive until every rank has copied them
        inputs = _prepare(inputs)
        weights = _prepare(weights)

        def rank_main(r):
            comm, sess = ctypes.c_void_p(), ctypes.c_void_p()
            try:
                _call("dtpc_comm_local", world, r, ctypes.byref(comm), rank=r)
                _call("dtpc_session_create", self._h, comm, 0, ctypes.byref(sess), rank=r)
                if threads:
                    _call("dtpc_session_threads", sess, int(threads), rank=r)
                _bind(sess, weights, "dtpc_session_bind_weights_file",
                      "dtpc_session_bind_weights_seed", "dtpc_session_bind_weight", r)
                _bind(sess, inputs, "dtpc_session_bind_inputs_file",
                      "dtpc_session_bind_inputs_seed", "dtpc_session_set_input", r)
                _call("dtpc_session_run", sess, rank=r)
                results[r] = _outputs(lib, sess)
            except DtpcError as e:
                errors[r] = e
            finally:
                lib.dtpc_session_free(sess)
                lib.dtpc_comm_free(comm)

        ts = [threading.Thread(target=rank_main, args=(r,)) for r in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        lib.dtpc_local_world_free(world)
        for e in errors:
            if e is not None:
                raise e
        return results if all_ranks else results[0]


def _prepare(src):
    if isinstance(src, dict):
        return {k: _f32(v) for k, v in src.items()}
    if isinstance(src, (str, bytes, os.PathLike)):
        return os.fsencode(src)
    return int(src)


def _bind(sess, src, from_file, from_seed, one, rank):
    if isinstance(src, dict):
        for name, (a, data, shape) in src.items():
            _call(one, sess, name.encode(), data, shape, a.ndim, rank=rank)
    elif isinstance(src, bytes):
        _call(from_file, sess, src, rank=rank)
    else:
        _call(from_seed, sess, src, rank=rank)


def _outputs(lib, sess):
    out = {}
    name, data, shape, nd = ctypes.c_char_p(), _f32p(), _i64p(), ctypes.c_int()
    for i in range(lib.dtpc_session_noutputs(sess)):
        _call("dtpc_session_output", sess, i, ctypes.byref(name), ctypes.byref(data),
              ctypes.byref(shape), ctypes.byref(nd))
        dims = tuple(shape[d] for d in range(nd.value))
        count = int(np.prod(dims, dtype=np.int64))
        # the session owns the buffer until its next run or free: copy
        out[name.value.decode()] = np.ctypeslib.as_array(data, shape=(count,)).copy().reshape(dims)
    return out
