"""Where dtpc's files are, libdtpc.so loaded through ctypes, and the error
every failure raises.

First match wins, for the library and the program alike:

1. ``DTPC_LIB`` (the library) and ``DTPC`` (the program): paths, taken as
   given (a path that does not exist is an error, not a reason to look on);
2. ``DTPC_BUILD``: a build folder (``make BUILD=...``) holding both;
3. the repository's ``build/``, when this package is imported from a
   checkout (``python/dtpc`` beside ``runtime/dtpc.h``);
4. an install (``make install PREFIX=...``): pkg-config's ``libdir`` and
   ``prefix`` of ``dtpc``, then the loader's path (the library) and
   ``PATH`` (the program).
"""
import ctypes
import ctypes.util
import os
import shutil
import subprocess
import threading


class DtpcError(Exception):
    """A failure of libdtpc (``status``, the message, ``rank``) or of the
    dtpc program (``diagnostics``: the compiler's JSON list, when it gave
    one)."""

    def __init__(self, message, status=None, rank=None, diagnostics=None):
        super().__init__(message)
        self.status = status
        self.rank = rank
        self.diagnostics = diagnostics if diagnostics is not None else []


DtpcError.__module__ = "dtpc"  # as its users name it (tracebacks, pickling)


_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
# a checkout, not site-packages: python/dtpc sits beside the runtime's header
_IN_REPO = os.path.isfile(os.path.join(_REPO, "runtime", "dtpc.h"))

_HOW = ("build it with `make` in the repository, install it with `make install PREFIX=...`, "
        "or set DTPC_BUILD to a build folder")


def _pkg_config(variable):
    if not shutil.which("pkg-config"):
        return None
    p = subprocess.run(["pkg-config", f"--variable={variable}", "dtpc"], capture_output=True,
                       text=True)
    if p.returncode:
        return None
    return p.stdout.strip() or None


def _locate(env, name, installed):
    """(path, how it was found) of one of dtpc's files; path None when none
    was found, with the places looked at as the second element."""
    if os.environ.get(env):
        path = os.environ[env]
        if not os.path.exists(path):
            raise DtpcError(f"{env}={path}: no such file ({_HOW})")
        return path, env
    looked = []
    folders = [("DTPC_BUILD", os.environ.get("DTPC_BUILD"))]
    if _IN_REPO:
        folders.append(("the repository's build", os.path.join(_REPO, "build")))
    for how, folder in folders:
        if folder:
            path = os.path.join(folder, name)
            if os.path.exists(path):
                return path, how
            looked.append(path)
    path = installed()
    if path:
        return path, "installed"
    return None, looked


def _installed_lib():
    libdir = _pkg_config("libdir")
    # the loader's path: LD_LIBRARY_PATH's folders by name (find_library
    # gives the soname alone there), then the loader's cache
    for folder in [libdir] + os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if folder and os.path.exists(os.path.join(folder, "libdtpc.so")):
            return os.path.join(folder, "libdtpc.so")
    return ctypes.util.find_library("dtpc")


def _installed_program():
    prefix = _pkg_config("prefix")
    if prefix and os.access(os.path.join(prefix, "bin", "dtpc"), os.X_OK):
        return os.path.join(prefix, "bin", "dtpc")
    return shutil.which("dtpc")


def _missing(what, env, looked):
    where = ", ".join(looked + ["pkg-config dtpc", "the loader's path" if env == "DTPC_LIB"
                                else "PATH"])
    return DtpcError(f"cannot find {what} (looked in {where}): {_HOW}, or set {env}")


def program():
    """The dtpc program's path (the compiler, run as a subprocess)."""
    path, how = _locate("DTPC", "dtpc", _installed_program)
    if not path:
        raise _missing("the dtpc program", "DTPC", how)
    return path


def models_dir():
    """The folder of the model library's plans (``models/*.plan``):
    ``$DTPC_MODELS``, the repository's ``models/`` beside this package, or an
    install's ``PREFIX/share/dtpc/models``."""
    if os.environ.get("DTPC_MODELS"):
        return os.environ["DTPC_MODELS"]
    if _IN_REPO:
        return os.path.join(_REPO, "models")
    prefix = _pkg_config("prefix")
    if not prefix:
        found = shutil.which("dtpc")
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(found))) if found else None
    path = prefix and os.path.join(prefix, "share", "dtpc", "models")
    if not path or not os.path.isdir(path):
        raise DtpcError("cannot find the model library's plans (models/*.plan): install dtpc "
                        "with `make install PREFIX=...` or set DTPC_MODELS to a folder of them")
    return path


_p = ctypes.c_void_p
_pp = ctypes.POINTER(ctypes.c_void_p)
_i64p = ctypes.POINTER(ctypes.c_int64)
f32p = ctypes.POINTER(ctypes.c_float)
_SIGNATURES = {
    "dtpc_status_str": (ctypes.c_char_p, [ctypes.c_int]),
    "dtpc_last_error": (ctypes.c_char_p, []),
    "dtpc_last_error_rank": (ctypes.c_int, []),
    "dtpc_graph_open_file": (ctypes.c_int, [ctypes.c_char_p, _pp]),
    "dtpc_graph_open_buffer": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, _pp]),
    "dtpc_graph_free": (None, [_p]),
    "dtpc_graph_world": (ctypes.c_int, [_p]),
    "dtpc_graph_hash": (ctypes.c_uint64, [_p]),
    "dtpc_graph_meta_at": (ctypes.c_int, [_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                          ctypes.POINTER(ctypes.c_char_p)]),
    "dtpc_local_world_create": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, _pp]),
    "dtpc_comm_local": (ctypes.c_int, [_p, ctypes.c_int, _pp]),
    "dtpc_local_world_abort": (None, [_p, ctypes.c_char_p]),
    "dtpc_local_world_free": (None, [_p]),
    "dtpc_comm_mpi": (ctypes.c_int, [ctypes.c_int, _pp]),
    "dtpc_nccl_unique_id": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]),
    "dtpc_comm_nccl_init": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_int, ctypes.c_int, _pp]),
    "dtpc_comm_rank": (ctypes.c_int, [_p]),
    "dtpc_comm_size": (ctypes.c_int, [_p]),
    "dtpc_comm_free": (None, [_p]),
    "dtpc_device_unavailable": (ctypes.c_char_p, [ctypes.c_int]),
    "dtpc_session_create": (ctypes.c_int, [_p, _p, ctypes.c_int, _pp]),
    "dtpc_session_free": (None, [_p]),
    "dtpc_session_threads": (ctypes.c_int, [_p, ctypes.c_int]),
    "dtpc_session_thread_count": (ctypes.c_int, [_p]),
    "dtpc_session_dtype": (ctypes.c_int, [_p, ctypes.c_int]),
    "dtpc_session_bind_weights_file": (ctypes.c_int, [_p, ctypes.c_char_p]),
    "dtpc_session_bind_weights_seed": (ctypes.c_int, [_p, ctypes.c_uint64]),
    "dtpc_session_bind_weight": (ctypes.c_int, [_p, ctypes.c_char_p, f32p, _i64p, ctypes.c_int]),
    "dtpc_session_bind_inputs_file": (ctypes.c_int, [_p, ctypes.c_char_p]),
    "dtpc_session_bind_inputs_seed": (ctypes.c_int, [_p, ctypes.c_uint64]),
    "dtpc_session_set_input": (ctypes.c_int, [_p, ctypes.c_char_p, f32p, _i64p, ctypes.c_int]),
    "dtpc_session_set_input_data": (ctypes.c_int, [_p, ctypes.c_char_p, _p, ctypes.c_int,
                                                   ctypes.c_int, _i64p, ctypes.c_int]),
    "dtpc_session_bind_weight_data": (ctypes.c_int, [_p, ctypes.c_char_p, _p, ctypes.c_int,
                                                     ctypes.c_int, _i64p, ctypes.c_int]),
    "dtpc_session_output_data": (ctypes.c_int, [_p, ctypes.c_int, _p, ctypes.c_int,
                                                ctypes.c_int, ctypes.c_size_t]),
    "dtpc_session_stream": (ctypes.c_int, [_p, _p]),
    "dtpc_session_gpu": (ctypes.c_int, [_p]),
    "dtpc_session_get_dtype": (ctypes.c_int, [_p]),
    "dtpc_session_run": (ctypes.c_int, [_p]),
    "dtpc_session_noutputs": (ctypes.c_int, [_p]),
    "dtpc_session_output_nonfinite": (ctypes.c_int, [_p, ctypes.c_int,
                                                     ctypes.POINTER(ctypes.c_int64)]),
    "dtpc_session_unused": (ctypes.c_int, [_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
    "dtpc_session_output": (ctypes.c_int, [_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                           ctypes.POINTER(f32p), ctypes.POINTER(_i64p),
                                           ctypes.POINTER(ctypes.c_int)]),
}

_lib = None
_lib_lock = threading.Lock()


def library():
    """libdtpc.so, loaded once with its functions' signatures."""
    global _lib
    with _lib_lock:
        if _lib is None:
            path, how = _locate("DTPC_LIB", "libdtpc.so", _installed_lib)
            if not path:
                raise _missing("libdtpc.so", "DTPC_LIB", how)
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise DtpcError(f"cannot load {path} (found by {how}): {e}") from None
            for name, (res, args) in _SIGNATURES.items():
                f = getattr(lib, name)
                f.restype, f.argtypes = res, args
            _lib = lib
        return _lib


def loaded():
    """The library if it was loaded, else None (for finalizers, which must
    not load it)."""
    return _lib


def call(fn, *args, rank=None):
    """Calls a status-returning function; raises with this thread's last
    error (libdtpc keeps it per thread, so it is read on the same one)."""
    lib = library()
    st = getattr(lib, fn)(*args)
    if st:
        why = lib.dtpc_last_error().decode()
        name = lib.dtpc_status_str(st).decode()
        # the rank the failure is about, as libdtpc records it, where the
        # caller did not say (the message never names it)
        if rank is None and lib.dtpc_last_error_rank() >= 0:
            rank = lib.dtpc_last_error_rank()
        where = f"rank {rank}: " if rank is not None else ""
        raise DtpcError(f"{where}{fn}: {name}: {why}", status=st, rank=rank)
