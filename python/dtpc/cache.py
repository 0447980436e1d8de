"""The compiler, run as a subprocess (it is not in the library): ``check``,
``compile``, and ``compile_cached``, which compiles a plan once per set of
everything the graph depends on and keeps the graph in memory and on disk."""
import contextlib
import hashlib
import json
import os
import re
import subprocess
import tempfile
import threading

from ._lib import DtpcError, program
from .runtime import Graph, count


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


@contextlib.contextmanager
def _config_path(config):
    """--config's argument: a path as given, or a mapping (diffusers'
    ``transformer.config``) written to a temporary config.json."""
    if config is None or isinstance(config, (str, bytes, os.PathLike)):
        yield None if config is None else os.fsdecode(config)
        return
    with tempfile.TemporaryDirectory(prefix="dtpc-config-") as folder:
        path = os.path.join(folder, "config.json")
        with open(path, "w") as f:
            f.write(_config_json(config))
        yield path


def _config_json(config):
    try:
        return json.dumps(dict(config), sort_keys=True)
    except (TypeError, ValueError) as e:
        raise DtpcError(f"config: not a JSON object: {e}") from None


def _plan_args(plan, mesh, context, defines, world, config, dtype, expose=()):
    args = []
    if config is not None:
        args += ["--config", config]
    if plan is not None:
        args += ["--plan", plan]
    if mesh is not None:
        args += ["--mesh", mesh]
    if context is not None:
        args += ["--context", context]
    if world is not None:
        args += ["--world", str(world)]
    if dtype is not None:
        args += ["--dtype", dtype]
    for k, v in (defines or {}).items():
        if isinstance(v, bool):  # the language's spelling (fixture.json's true / false)
            v = "true" if v else "false"
        args += ["-D", f"{k}={v}"]
    for glob in expose or ():
        args += ["--expose", glob]
    return args


def check(path, plan=None, mesh=None, context=None, defines=None, world=None, config=None,
          dtype=None):
    """Checks the plans of a .plan file (``plan``: only that one). ``mesh``
    and ``context`` replace the plan's ("ring = 2, tp = 2"); ``config`` (a
    diffusers config.json, its folder, or the config as a dict) and then
    ``defines`` override model parameters ({"seq": 2048}). Errors in the
    plan (and the config) are in the result; a usage or I/O error raises
    DtpcError."""
    with _config_path(config) as cfg:
        p = subprocess.run([program(), "check", os.fspath(path), "--format", "json"]
                           + _plan_args(plan, mesh, context, defines, world, cfg, dtype),
                           capture_output=True, text=True)
    if p.returncode == 2:
        raise DtpcError(p.stderr.strip())
    return CheckResult(json.loads(p.stdout), p.returncode)


def _compile_to(prog, path, out, args):
    """Runs the compiler; a failure raises DtpcError with its located
    diagnostics as text and (errors in the plan) as the JSON list."""
    count("compiles")
    cmd = [prog, os.fspath(path), "-o", os.fspath(out)] + args
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode == 0:
        return
    diagnostics = []
    if p.returncode == 1:
        # the text is for people; the list, from a second run, for programs
        j = subprocess.run(cmd + ["--format", "json"], capture_output=True, text=True)
        try:
            diagnostics = json.loads(j.stdout)["diagnostics"]
        except (ValueError, KeyError):
            pass
    raise DtpcError(p.stderr.strip() or f"dtpc exited with status {p.returncode}",
                    diagnostics=diagnostics)


def compile(path, out, plan=None, mesh=None, context=None, defines=None, config=None,
            dtype=None, expose=None):
    """Compiles one plan of a .plan file to the graph file ``out`` and
    returns it loaded (a Graph). ``expose``: globs whose modules' tensors
    become outputs too (``--expose``, one rank only). Diagnostics raise
    DtpcError with the compiler's text (and ``.diagnostics``, the JSON
    list)."""
    with _config_path(config) as cfg:
        _compile_to(program(), path, out,
                    _plan_args(plan, mesh, context, defines, None, cfg, dtype, expose))
    return Graph.open(out)


# ---- compile_cached ----------------------------------------------------------------------

# `import "x";` outside comments and strings (docs/language.md's lexical rules)
_TOKENS = re.compile(r'#[^\n]*|"(?:[^"\\\n]|\\.)*"|\bimport\s*"((?:[^"\\\n]|\\.)*)"')
_ESCAPES = {'"': '"', "n": "\n", "t": "\t"}


def _plan_files(path):
    """The plan file and every file it imports, transitively: (path, bytes)
    in the order first read. An unreadable file is left to the compiler."""
    seen, order, todo = set(), [], [os.fspath(path)]
    while todo:
        f = todo.pop(0)
        key = os.path.realpath(f)
        if key in seen:
            continue
        seen.add(key)
        try:
            with open(f, "rb") as fh:
                data = fh.read()
        except OSError:
            order.append((f, b""))
            continue
        order.append((f, data))
        for m in _TOKENS.finditer(data.decode("utf-8", "replace")):
            if m.group(1) is not None:
                name = re.sub(r'\\(["nt])', lambda e: _ESCAPES[e.group(1)], m.group(1))
                todo.append(os.path.join(os.path.dirname(f), name))
    return order


_identity = {}


def _program_identity(prog):
    """The program's --version and a hash of its bytes, kept per (path,
    size, mtime): a rebuilt compiler is another compiler."""
    st = os.stat(prog)
    memo = (os.path.realpath(prog), st.st_size, st.st_mtime_ns)
    if memo not in _identity:
        h = hashlib.sha256()
        with open(prog, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        version = subprocess.run([prog, "--version"], capture_output=True, text=True).stdout
        _identity[memo] = (version.strip() + "\0" + h.hexdigest()).encode()
    return _identity[memo]


def _config_bytes(config):
    if config is None:
        return b""
    if not isinstance(config, (str, bytes, os.PathLike)):
        return _config_json(config).encode()
    path = os.fsdecode(config)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b"(unreadable)"  # the compiler says why


def _cache_key(prog, path, plan, mesh, context, config, defines, dtype, expose):
    h = hashlib.sha256()

    def part(tag, data):
        data = data if isinstance(data, bytes) else str(data).encode()
        h.update(tag.encode() + b"\0" + len(data).to_bytes(8, "little") + data)

    part("cache", "dtpc graph cache 1")
    part("program", _program_identity(prog))
    for name, data in _plan_files(path):
        part("file", name)  # the graph's metadata holds the path as given
        part("bytes", data)
    for tag, value in (("plan", plan), ("mesh", mesh), ("context", context), ("dtype", dtype)):
        part(tag, "" if value is None else "=" + str(value))
    part("config", _config_bytes(config))
    for k, v in sorted((str(k), str(v)) for k, v in (defines or {}).items()):
        part("define", f"{k}={v}")
    # in order: the exposed outputs follow the globs' order
    for glob in expose or ():
        part("expose", glob)
    return h.hexdigest()


def cache_folder(folder=None):
    """Where compile_cached keeps graphs: ``folder``, ``$DTPC_CACHE`` or
    ``~/.cache/dtpc/graphs``."""
    return os.fspath(folder or os.environ.get("DTPC_CACHE")
                     or os.path.join(os.path.expanduser("~"), ".cache", "dtpc", "graphs"))


_memory = {}
_memory_lock = threading.Lock()


def compile_cached(path, plan=None, mesh=None, context=None, config=None, defines=None,
                   dtype=None, cache_dir=None, expose=None):
    """A Graph of ``path``'s plan, compiled once: from this process's memory,
    else from the disk cache (``cache_dir``, ``$DTPC_CACHE`` or
    ``~/.cache/dtpc/graphs``), else compiled and written there atomically.
    The key is a hash of the plan file and the files it imports, the dtpc
    program (its version and bytes), and every argument (a ``config``
    mapping or file by its JSON content). Arguments as ``compile``'s."""
    folder = cache_folder(cache_dir)
    prog = program()
    key = _cache_key(prog, path, plan, mesh, context, config, defines, dtype, expose)
    with _memory_lock:
        g = _memory.get((folder, key))
    if g is not None:
        count("cache_memory_hits")
        return g
    file = os.path.join(folder, key + ".graph")
    g = None
    if os.path.exists(file):
        try:
            g = Graph.open(file)
            count("cache_disk_hits")
        except DtpcError:
            g = None  # a damaged entry: compiled again, and replaced
    if g is None:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=key[:16] + ".", suffix=".tmp")
        os.close(fd)
        try:
            with _config_path(config) as cfg:
                _compile_to(prog, path, tmp,
                            _plan_args(plan, mesh, context, defines, None, cfg, dtype, expose))
            os.replace(tmp, file)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        g = Graph.open(file)
    with _memory_lock:
        _memory[(folder, key)] = g
    return g

