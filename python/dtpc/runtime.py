"""Graphs and the ranks that replay them: ``Graph`` (a loaded graph),
``Ranks`` (one persistent session per rank: sessions, arenas and bound
weights live from one run to the next) and the process's counters,
``stats``."""
import atexit
import contextlib
import ctypes
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import warnings

import numpy as np

from . import _lib
from ._lib import DtpcError, call, f32p, library

# ---- counters ----------------------------------------------------------------------------

stats = {"compiles": 0, "cache_memory_hits": 0, "cache_disk_hits": 0, "weight_binds": 0,
         "sessions": 0, "runs": 0}
_stats_lock = threading.Lock()


def count(name, n=1):
    with _stats_lock:
        stats[name] += n


def reset_stats():
    """Sets every counter of ``dtpc.stats`` to 0 (the same dict)."""
    with _stats_lock:
        for k in stats:
            stats[k] = 0


# ---- arrays ------------------------------------------------------------------------------

# dtpc_dtype by torch's dtype name, by numpy's; dtpc_device as a place
_TORCH_CODES = {"float32": 0, "bfloat16": 1, "float16": 2}
_NUMPY_CODES = {np.dtype(np.float32): 0, np.dtype(np.float16): 2}
_HOST, _CUDA = 0, 1
_STREAM_LEGACY = 1  # cudaStreamLegacy: what torch's default stream (0) is


def _is_torch(x):
    # torch is never imported here: it is there when one of its tensors is
    return type(x).__module__.split(".")[0] == "torch"


class _Tensor:
    """A whole tensor as the typed calls take it (dtpc_session_set_input_data,
    _bind_weight_data): C-ordered, its elements in f32, bf16 or f16 as they
    are (any other dtype converted to float32 where it is: numpy's on the
    host, torch's on its device). A torch CUDA tensor stays in device memory
    for ranks on a GPU (a copy on the GPU for a rank on another GPU than the
    tensor's, the tensor itself for one on its own); ranks on the CPU get it
    in host memory, in its dtype. The arrays stay alive with it."""

    def __init__(self, name, value, gpus=(-1,)):
        self.name = name.encode()
        self.at = {}  # a rank's GPU (-1: the CPU) -> (array, pointer, dtype, place)
        if _is_torch(value):
            torch = sys.modules["torch"]
            t = value.detach()
            code = _TORCH_CODES.get(str(t.dtype)[len("torch."):])
            if code is None:
                t, code = t.to(torch.float32), 0
            t = t.contiguous()
            shape = tuple(t.shape)
            for g in set(gpus):
                if g >= 0 and t.is_cuda:
                    u = t if t.device.index == g else t.to(f"cuda:{g}")
                    self.at[g] = (u, u.data_ptr(), code, _CUDA)
                else:
                    u = t.cpu()
                    self.at[g] = (u, u.data_ptr(), code, _HOST)
        else:
            a = np.asarray(value)
            code = _NUMPY_CODES.get(a.dtype)
            a = np.ascontiguousarray(a if code is not None else a.astype(np.float32))
            shape = a.shape
            for g in set(gpus):
                self.at[g] = (a, a.ctypes.data, 0 if code is None else code, _HOST)
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.ndim = len(shape)
        self.cuda = any(where == _CUDA for _, _, _, where in self.at.values())

    def bind(self, fn, sess, rank):
        """fn (dtpc_session_set_input_data or _bind_weight_data) on a rank's session."""
        _, ptr, code, where = self.at[library().dtpc_session_gpu(sess)]
        call(fn, sess, self.name, ptr, code, where, self.shape, self.ndim, rank=rank)


def _with_stream(job, streams):
    """job with the session ordered on the caller's current stream of its GPU
    (dtpc_session_stream), and unordered again after, so that the session
    never keeps a stream the caller may destroy. streams: {gpu: (torch
    stream, handle)}; empty: job as it is."""
    if not streams:
        return job

    def ordered(s, r):
        lib = library()
        st = streams.get(lib.dtpc_session_gpu(s))
        if st is None:
            return job(s, r)
        call("dtpc_session_stream", s, st[1], rank=r)
        try:
            return job(s, r)
        finally:
            lib.dtpc_session_stream(s, None)
    return ordered


def _torch_outputs(sess, code, cuda, streams):
    """The outputs as torch tensors of dtpc_dtype code, written by the session
    straight into them (dtpc_session_output_data): on the session's GPU when
    cuda and the session is on one (allocated on the caller's stream, and
    written on it), else in host memory."""
    torch = sys.modules["torch"]
    lib = library()
    gpu = lib.dtpc_session_gpu(sess)
    on_gpu = cuda and gpu >= 0
    dtype = {0: torch.float32, 1: torch.bfloat16, 2: torch.float16}[code]
    out = {}
    name, shape, nd = ctypes.c_char_p(), ctypes.POINTER(ctypes.c_int64)(), ctypes.c_int()
    with torch.cuda.stream(streams[gpu][0]) if on_gpu else contextlib.nullcontext():
        for i in range(lib.dtpc_session_noutputs(sess)):
            # data NULL: no float32 host copy is made
            call("dtpc_session_output", sess, i, ctypes.byref(name), None, ctypes.byref(shape),
                 ctypes.byref(nd))
            dims = tuple(shape[d] for d in range(nd.value))
            t = torch.empty(dims, dtype=dtype, device=f"cuda:{gpu}" if on_gpu else "cpu")
            call("dtpc_session_output_data", sess, i, t.data_ptr(), code,
                 _CUDA if on_gpu else _HOST, t.numel() * t.element_size())
            out[name.value.decode()] = t
    return out


def _is_path(src):
    return isinstance(src, (str, bytes, os.PathLike))


def _nonfinite(lib, sess):
    """{output name: NaN and Inf count} of the outputs that have any, after a
    run (dtpc_session_output_nonfinite: what `dtpc run` reports)."""
    bad, n, name = {}, ctypes.c_int64(), ctypes.c_char_p()
    data, shape, nd = f32p(), ctypes.POINTER(ctypes.c_int64)(), ctypes.c_int()
    for i in range(lib.dtpc_session_noutputs(sess)):
        call("dtpc_session_output_nonfinite", sess, i, ctypes.byref(n))
        if n.value:
            call("dtpc_session_output", sess, i, ctypes.byref(name), ctypes.byref(data),
                 ctypes.byref(shape), ctypes.byref(nd))
            size = int(np.prod([shape[d] for d in range(nd.value)], dtype=np.int64))
            bad[name.value.decode()] = (n.value, size)
    return bad


def _torch_nonfinite(outs):
    """_nonfinite's answer for torch outputs in host memory (device memory:
    not checked, as the count would cost a host copy per run)."""
    torch = sys.modules["torch"]
    bad = {}
    for k, v in outs.items():
        if not v.is_cuda:
            n = int((~torch.isfinite(v)).sum())
            if n:
                bad[k] = (n, v.numel())
    return bad


def _unused(lib, sess, limit=3):
    """The names of the last checkpoint or inputs file's tensors the graph
    does not use, as `dtpc run`'s note says them: the first few and how many
    more; None when every tensor was used."""
    name = ctypes.c_char_p()
    n = lib.dtpc_session_unused(sess, 0, ctypes.byref(name))
    if n <= 0:
        return None
    names = []
    for i in range(min(n, limit)):
        lib.dtpc_session_unused(sess, i, ctypes.byref(name))
        names.append(f"'{name.value.decode()}'")
    return ", ".join(names) + (f" and {n - limit} more" if n > limit else "")


def _outputs(lib, sess):
    out = {}
    name, data, shape, nd = ctypes.c_char_p(), f32p(), ctypes.POINTER(ctypes.c_int64)(), \
        ctypes.c_int()
    for i in range(lib.dtpc_session_noutputs(sess)):
        call("dtpc_session_output", sess, i, ctypes.byref(name), ctypes.byref(data),
             ctypes.byref(shape), ctypes.byref(nd))
        dims = tuple(shape[d] for d in range(nd.value))
        count_ = int(np.prod(dims, dtype=np.int64))
        # the session owns the buffer until its next run or free: copy
        out[name.value.decode()] = np.ctypeslib.as_array(data, shape=(count_,)).copy() \
            .reshape(dims)
    return out


# ---- graphs ------------------------------------------------------------------------------

class Graph:
    """A compiled graph, loaded and validated by libdtpc."""

    def __init__(self, handle, path=None, data=None):
        self._h = ctypes.c_void_p(handle)
        self._path, self._data, self._weights = path, data, None

    @classmethod
    def open(cls, path):
        h = ctypes.c_void_p()
        call("dtpc_graph_open_file", os.fsencode(path), ctypes.byref(h))
        return cls(h.value, path=os.fspath(path))

    @classmethod
    def from_bytes(cls, data):
        data = bytes(data)
        h = ctypes.c_void_p()
        call("dtpc_graph_open_buffer", data, len(data), ctypes.byref(h))
        return cls(h.value, data=data)

    def __del__(self):
        lib = _lib.loaded()
        if getattr(self, "_h", None) and self._h.value and lib is not None:
            lib.dtpc_graph_free(self._h)
            self._h = None

    @property
    def path(self):
        """The graph file it was opened from (compile_cached: the cache's
        entry), or None for one opened from bytes."""
        return self._path

    @property
    def world(self):
        """The ranks the graph was compiled for."""
        return library().dtpc_graph_world(self._h)

    @property
    def hash(self):
        return library().dtpc_graph_hash(self._h)

    @property
    def meta(self):
        """The metadata ("plan", "mesh", "param.seq", ...) as a dict of strings."""
        lib, out, i = library(), {}, 0
        k, v = ctypes.c_char_p(), ctypes.c_char_p()
        while lib.dtpc_graph_meta_at(self._h, i, ctypes.byref(k), ctypes.byref(v)):
            out[k.value.decode()] = v.value.decode()
            i += 1
        return out

    @property
    def weights(self):
        """The weights every rank binds, {name: full shape}, from the graph's
        manifest (read by ``dtpc inspect``: it needs the program)."""
        if self._weights is None:
            with tempfile.TemporaryDirectory(prefix="dtpc-graph-") as folder:
                path = self._path
                if path is None:
                    path = os.path.join(folder, "g.graph")
                    with open(path, "wb") as f:
                        f.write(self._data)
                p = subprocess.run([_lib.program(), "inspect", path, "--format", "json"],
                                   capture_output=True, text=True)
            if p.returncode:
                raise DtpcError(f"dtpc inspect {path}: {p.stderr.strip()}")
            self._weights = {w["name"]: tuple(w["shape"]) for w in json.loads(p.stdout)["weights"]}
        return self._weights

    def run(self, inputs=0, weights=0, ranks=None, timeout=120.0, threads=None,
            all_ranks=False, allow_nonfinite=False):
        """One forward pass on ``ranks`` (default: the graph's world) local
        ranks: Ranks created, bound, run and closed. ``inputs``: a dict of
        whole arrays by name, a safetensors path, or an integer seed;
        ``weights``: what ``Ranks.bind_weights`` takes. Returns rank 0's
        outputs, or with ``all_ranks`` one dict per rank."""
        with Ranks(self, ranks, timeout=timeout, threads=threads,
                   allow_nonfinite=allow_nonfinite) as r:
            r.bind_weights(weights)
            return r._run(inputs, all_ranks)


# ---- ranks -------------------------------------------------------------------------------

_DEVICES = {"cpu": 0, "cuda": 1}
_DTYPES = {"f32": 0, "float32": 0, "bf16": 1, "bfloat16": 1, "f16": 2, "float16": 2}
_ERR_COMM = 6


def _dtype_code(dtype):
    # "bf16", "bfloat16", torch.bfloat16 (str: "torch.bfloat16"), np.float16
    name = getattr(dtype, "__name__", None) or str(dtype)
    name = name[len("torch."):] if name.startswith("torch.") else name
    if name not in _DTYPES:
        raise DtpcError(f"dtype {dtype!r}: dtpc stores f32, bf16 or f16")
    return _DTYPES[name]


def _ranks_on_node():
    """This MPI job's ranks on this machine, as the launcher names them (Open
    MPI, MPICH), or 1; `dtpc run --backend mpi` reads the same."""
    for var in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"):
        try:
            return max(1, int(os.environ[var]))
        except (KeyError, ValueError):
            pass
    return 1


def _default_threads(here):
    """A rank's share of this machine's cores among `here` ranks of its job on
    the machine, fixed when the Ranks are made. The library's own default
    (threads=0) divides the cores by every CPU session alive in the process,
    so the Ranks of two models of one pipeline (Wan 2.2's transformer and
    transformer_2), which never run at once, would each get half."""
    return max(1, (os.cpu_count() or 1) // max(1, here))


def _setup(sess, threads, dtype, rank):
    if threads:
        call("dtpc_session_threads", sess, int(threads), rank=rank)
    if dtype is not None:
        call("dtpc_session_dtype", sess, dtype, rank=rank)


def _first_cause(errors):
    """The error to raise of several ranks': a rank's own failure before
    the others' reports of it (communication failures), lowest rank first."""
    errors.sort(key=lambda e: (e.status == _ERR_COMM, e.rank if e.rank is not None else -1))
    return errors[0]


class _LocalRanks:
    """A local world: a thread per rank, each keeping its session until
    stop(); the caller hands each the same job (a function of the session
    and the rank) and collects their answers. The threads hold this object,
    not the Ranks, so that dropping a Ranks closes it."""

    def __init__(self, graph, n, device, threads, dtype, timeout_ms):
        self.graph = graph  # the sessions need it alive
        self.n = n
        self.world = ctypes.c_void_p()
        call("dtpc_local_world_create", n, timeout_ms, ctypes.byref(self.world))
        self.queues = [queue.SimpleQueue() for _ in range(n)]
        self.answers = queue.SimpleQueue()
        self.alive = n
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._serve, args=(r, device, threads, dtype),
                                         name=f"dtpc rank {r}", daemon=True) for r in range(n)]
        for t in self.threads:
            t.start()
        try:
            self._collect()  # every session created, or the first cause raised
        except DtpcError:
            self.stop()  # the threads left have nothing to finish
            raise
        except KeyboardInterrupt:
            self.abort("interrupted (KeyboardInterrupt) while the sessions were created")
            self.stop()
            raise

    def _serve(self, r, device, threads, dtype):
        lib = library()
        comm, sess = ctypes.c_void_p(), ctypes.c_void_p()
        try:
            try:
                call("dtpc_comm_local", self.world, r, ctypes.byref(comm), rank=r)
                call("dtpc_session_create", self.graph._h, comm, device, ctypes.byref(sess),
                     rank=r)
                count("sessions")
                _setup(sess, threads, dtype, r)
            except DtpcError as e:
                self.answers.put((r, None, e))
                return
            self.answers.put((r, None, None))
            while True:
                job = self.queues[r].get()
                if job is None:
                    return
                try:
                    self.answers.put((r, job(sess, r), None))
                except BaseException as e:  # answered, never lost with the thread
                    if not isinstance(e, DtpcError):
                        e = DtpcError(f"rank {r}: {type(e).__name__}: {e}", rank=r)
                    self.answers.put((r, None, e))
        finally:
            lib.dtpc_session_free(sess)
            lib.dtpc_comm_free(comm)
            with self.lock:
                self.alive -= 1
                last = self.alive == 0
            if last:  # whoever leaves last: after stop(join=False) nobody waits for them
                lib.dtpc_local_world_free(self.world)

    def each(self, job):
        # every rank gets the job, even when an interrupt comes between two:
        # one left without it would keep the others waiting in a collective
        # until the timeout
        given, interrupted = 0, False
        while given < self.n:
            try:
                while given < self.n:
                    self.queues[given].put(job)
                    given += 1
            except KeyboardInterrupt:
                interrupted = True
        if interrupted:
            raise KeyboardInterrupt
        return self._collect()

    def _collect(self):
        values, errors, owed = [None] * self.n, [], set(range(self.n))
        while owed:
            try:
                r, value, error = self.answers.get(timeout=0.25)
            except queue.Empty:
                # short waits: a KeyboardInterrupt is taken between them;
                # a thread gone without answering cannot answer any more
                dead = [r for r in owed if not self.threads[r].is_alive()]
                if dead and self.answers.empty():
                    raise DtpcError(f"rank {dead[0]}: its thread ended without an answer",
                                    rank=dead[0]) from None
                continue
            owed.discard(r)
            values[r] = value
            if error is not None:
                errors.append(error)
        if errors:
            raise _first_cause(errors)
        return values

    def abort(self, why):
        """Fails the world (dtpc_local_world_abort): every rank waiting in
        a collective returns at once, one computing at its next collective.
        Under the lock, while a rank is alive: the last one frees the world."""
        with self.lock:
            if self.alive:
                library().dtpc_local_world_abort(self.world, why.encode())

    def stop(self, join=True):
        for q in self.queues:
            q.put(None)
        if join:
            for t in self.threads:
                if t is not threading.current_thread():
                    t.join()


_mpi = None
_mpi_lock = threading.Lock()


def _free_mpi():
    lib = _lib.loaded()
    if _mpi is not None and lib is not None:
        lib.dtpc_comm_free(_mpi)


def _mpi_comm(timeout_ms):
    """This process's rank of the MPI job, one communicator for the life of
    the process: freeing it finalizes MPI, which cannot start again."""
    global _mpi
    with _mpi_lock:
        if _mpi is None:
            c = ctypes.c_void_p()
            call("dtpc_comm_mpi", timeout_ms, ctypes.byref(c))
            _mpi = c
            atexit.register(_free_mpi)
        return _mpi


class _OneRank:
    """This process's one rank of a launched job (mpi, torchrun): its
    session on `comm`, in the caller's thread."""

    def _open(self, graph, comm, device, threads, dtype):
        self.graph = graph
        self.sess = ctypes.c_void_p()
        try:
            call("dtpc_session_create", graph._h, comm, device, ctypes.byref(self.sess),
                 rank=self.rank)
            count("sessions")
            _setup(self.sess, threads, dtype, self.rank)
        except DtpcError:
            self.stop()
            raise

    def each(self, job):
        return [job(self.sess, self.rank)]

    def stop(self, join=True):
        lib = _lib.loaded()
        if self.sess.value and lib is not None:
            lib.dtpc_session_free(self.sess)
        self.sess = ctypes.c_void_p()


class _MpiRank(_OneRank):
    """A rank of `mpirun`: MPI's communicator, shared by the process's
    sessions and freed at exit."""

    def __init__(self, graph, device, threads, dtype, timeout_ms):
        comm = _mpi_comm(timeout_ms)
        lib = library()
        self.rank, self.world = lib.dtpc_comm_rank(comm), lib.dtpc_comm_size(comm)
        self._open(graph, comm, device, threads, dtype)


# ---- torchrun: one rank per GPU, NCCL's id carried by torchrun's store ---------------

_TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_ON_CPU = ("on CPUs launch `mpirun -np N python script.py` with backend='mpi', or run "
           "`python script.py` with backend='local' (the ranks as threads of one process)")
_torchrun_made = 0  # Ranks made by this process: the same sequence on every rank
_NCCL_ID_BYTES = 128


def torchrun_env():
    """(rank, world) of this process under torchrun (RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT set, as torchrun sets them), else None."""
    if not all(os.environ.get(k) for k in _TORCHRUN_ENV):
        return None
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def _torchrun_store(timeout):
    """torchrun's store, as init_process_group("env://") reaches it: a
    client of the TCPStore the agent serves at MASTER_ADDR:MASTER_PORT (no
    process group is made or used), keys under dtpc/ and the restart."""
    from datetime import timedelta
    import torch.distributed as dist
    store, _, _ = next(dist.rendezvous("env://", timeout=timedelta(seconds=timeout)))
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"dtpc/{restart}/", store)


def _torchrun_meet(rank, world, why, timeout, make_id=True):
    """Every rank posts whether it can take part (``why``: its problem, or
    None) and rank 0 the job's NCCL unique id, through torchrun's store, all
    waits bounded by ``timeout`` seconds. Returns the id's bytes on every
    rank; raises DtpcError on every rank when any rank cannot take part (the
    first such rank's problem) or one does not post within the timeout."""
    global _torchrun_made
    from datetime import timedelta
    lib = library()
    key = f"ranks{_torchrun_made}"
    _torchrun_made += 1
    try:
        store = _torchrun_store(timeout)
    except Exception as e:  # torch's own errors: its store cannot be reached
        raise DtpcError(f"rank {rank}: torchrun's store at {os.environ['MASTER_ADDR']}:"
                        f"{os.environ['MASTER_PORT']}: {type(e).__name__}: {e}",
                        rank=rank, status=_ERR_COMM) from None
    if rank == 0 and why is None and make_id:
        buf = ctypes.create_string_buffer(_NCCL_ID_BYTES)
        if lib.dtpc_nccl_unique_id(buf, _NCCL_ID_BYTES):
            why = f"dtpc_nccl_unique_id: {lib.dtpc_last_error().decode()}"
        else:
            store.set(f"{key}/id", buf.raw)
    store.set(f"{key}/status/{rank}", why or "")
    keys = [f"{key}/status/{r}" for r in range(world)]
    try:
        store.wait(keys, timedelta(seconds=timeout))
    except Exception:  # a timeout (torch's DistStoreError): name who did not come
        missing = [r for r, k in enumerate(keys) if not store.check([k])]
        raise DtpcError(f"rank {rank}: timed out after {timeout:g} s waiting for torchrun "
                        f"ranks {missing} to start dtpc's ranks (each rank must create the "
                        "same dtpc.Ranks, in the same order)", rank=rank,
                        status=_ERR_COMM) from None
    for r, k in enumerate(keys):
        problem = store.get(k).decode()
        if problem:
            raise DtpcError(f"backend 'torchrun': rank {r}: {problem}", rank=r,
                            status=_ERR_COMM)
    return store.get(f"{key}/id") if make_id else None


class _TorchrunRank(_OneRank):
    """This process's one rank of a torchrun job on its GPU (LOCAL_RANK):
    its NCCL communicator (dtpc_comm_nccl_init, the id from rank 0 through
    torchrun's store), freed with its session."""

    def __init__(self, graph, device, threads, dtype, timeout_ms):
        self.rank, self.world = torchrun_env()
        self.comm, self.sess = ctypes.c_void_p(), ctypes.c_void_p()
        lib = library()
        why = lib.dtpc_device_unavailable(_DEVICES["cuda"])
        if why:
            why = (f"device 'cuda': {why.decode()}: backend 'torchrun' runs one rank per GPU "
                   f"over NCCL; {_ON_CPU}")
        uid = _torchrun_meet(self.rank, self.world, why, timeout_ms / 1000)
        call("dtpc_comm_nccl_init", uid, len(uid), self.rank, self.world, timeout_ms,
             ctypes.byref(self.comm), rank=self.rank)
        self._open(graph, self.comm, device, threads, dtype)

    def stop(self, join=True):
        super().stop(join)
        lib = _lib.loaded()
        if self.comm.value and lib is not None:
            lib.dtpc_comm_free(self.comm)
        self.comm = ctypes.c_void_p()


_BACKENDS = ("local", "mpi", "torchrun")


class Ranks:
    """Persistent sessions of one graph: create once, bind the weights once,
    run many times.

    ``backend="local"``: ``ranks`` (default: the graph's world) threads of
    this process, each keeping one session until ``close()``; ``rank`` is
    None (every rank is here). ``backend="mpi"``: this process is one rank
    of an MPI job (``mpirun -np N python script.py``), its session in the
    calling thread; ``rank`` is its MPI rank. ``backend="torchrun"``: this
    process is one rank of a torchrun job (``torchrun --nproc-per-node N
    script.py``), on its GPU over NCCL, the NCCL id carried by torchrun's
    store; ``rank`` is torchrun's RANK. ``device``: "cpu" or "cuda" (default:
    "cuda" for torchrun, which takes nothing else, else "cpu");
    ``threads``: CPU threads per rank (default: the machine's cores divided by
    this job's ranks on it, those of these Ranks for "local", the launcher's
    count for "mpi"; 0: the library's default, the cores divided by every CPU
    session alive in the process); ``timeout``: seconds, the bound on every wait for
    another rank; ``dtype``: the storage dtype ("f32", "bf16", "f16"; default
    the graph's). A run whose outputs hold a NaN or an Inf raises DtpcError
    naming them, unless ``allow_nonfinite``; a checkpoint or inputs file with
    tensors the graph does not use warns (UserWarning) naming them."""

    def __init__(self, graph, ranks=None, backend="local", device=None, threads=None,
                 timeout=120.0, dtype=None, allow_nonfinite=False):
        self._impl, self._broken = None, None
        self._allow_nonfinite = allow_nonfinite
        self.graph = graph if isinstance(graph, Graph) else Graph.open(graph)
        if backend not in _BACKENDS:
            raise DtpcError(f"backend {backend!r}: dtpc's Python ranks are 'local', 'mpi' or "
                            "'torchrun'")
        if device is None:
            device = "cuda" if backend == "torchrun" else "cpu"
        if device not in _DEVICES:
            raise DtpcError(f"device {device!r}: dtpc computes on 'cpu' or 'cuda'")
        job = torchrun_env()
        if backend == "torchrun":
            # the same answer on every rank of the job, before any of them waits
            if job is None:
                raise DtpcError("backend 'torchrun': this process was not started by torchrun "
                                f"({', '.join(_TORCHRUN_ENV)} are not all set): launch "
                                "`torchrun --nproc-per-node N script.py`, or use "
                                "backend='local' (one process) or 'mpi' (mpirun)")
            if device != "cuda":
                raise DtpcError(f"backend 'torchrun', device {device!r}: torchrun's mode runs "
                                f"one rank per GPU over NCCL (device='cuda'); {_ON_CPU}",
                                rank=job[0])
            if ranks is not None:
                raise DtpcError("ranks is for the local backend: torchrun's --nproc-per-node "
                                "(and --nnodes) set the ranks")
        elif job is not None and job[1] > 1:
            raise DtpcError(f"backend {backend!r} under torchrun: this process is rank "
                            f"{job[0]} of {job[1]} that torchrun started, and each would run "
                            f"the whole {backend} job: use backend='torchrun' (one rank per "
                            f"GPU); {_ON_CPU}", rank=job[0])
        else:
            why = library().dtpc_device_unavailable(_DEVICES[device])
            if why:
                raise DtpcError(f"device {device!r}: {why.decode()}")
        code = None if dtype is None else _dtype_code(dtype)
        timeout_ms = max(1, int(timeout * 1000))
        if threads is None and device == "cpu":
            threads = _default_threads(_ranks_on_node() if backend == "mpi" else
                                       self.graph.world if ranks is None else int(ranks))
        if backend == "local":
            self.world = self.graph.world if ranks is None else int(ranks)
            self.rank = None
            self._impl = _LocalRanks(self.graph, self.world, _DEVICES[device], threads, code,
                                     timeout_ms)
        elif backend == "mpi":
            if ranks is not None:
                raise DtpcError("ranks is for the local backend: mpirun -np sets the ranks")
            self._impl = _MpiRank(self.graph, _DEVICES[device], threads, code, timeout_ms)
            self.world, self.rank = self._impl.world, self._impl.rank
        else:
            self._impl = _TorchrunRank(self.graph, _DEVICES[device], threads, code, timeout_ms)
            self.world, self.rank = self._impl.world, self._impl.rank
        self._backend = backend
        self._device = device
        # each local rank's GPU (dtpc_session_gpu; -1 on the CPU): where the
        # typed calls find a CUDA tensor's data
        self._gpus = self._each(lambda s, r: library().dtpc_session_gpu(s), breaks=False)

    def _streams(self, tensors, cuda_out=False):
        """{gpu: (torch's current stream there, its handle)} for the ranks' GPUs
        when a call moves device memory (a CUDA tensor in, a CUDA tensor out),
        else {} (host copies are complete when the calls return)."""
        if self._device != "cuda" or not (cuda_out or any(t.cuda for t in tensors)):
            return {}
        torch = sys.modules["torch"]
        streams = {}
        for g in set(self._gpus):
            st = torch.cuda.current_stream(g)
            streams[g] = (st, st.cuda_stream or _STREAM_LEGACY)
        return streams

    def _each(self, job, breaks=True):
        """job on every rank here; a failure that leaves the communicator
        failed (``breaks``) makes these Ranks refuse further work."""
        if self._broken:
            raise DtpcError(f"these ranks failed earlier ({self._broken}): close them and "
                            "create new ones")
        if self._impl is None:
            raise DtpcError("these ranks are closed")
        try:
            return self._impl.each(job)
        except KeyboardInterrupt:
            # the local world is failed from here: the ranks' collectives
            # return at once, each rank ends its pass at its next one, frees
            # its session, and is joined before the interrupt goes on (a
            # second Ctrl-C while joining leaves them to end by themselves).
            # One MPI rank runs in this thread: nothing of it is in flight.
            self._broken = "interrupted"
            impl, self._impl = self._impl, None
            if isinstance(impl, _LocalRanks):
                impl.abort("interrupted (KeyboardInterrupt)")
            impl.stop()
            raise
        except DtpcError as e:
            if breaks or self._backend != "local":  # the other processes went on
                self._broken = str(e)
            raise

    def _nlocal(self):
        return self.world if self.rank is None else 1

    @property
    def threads(self):
        """The CPU threads each rank here computes with now, rank by rank (1 on
        a GPU)."""
        return self._each(lambda s, r: library().dtpc_session_thread_count(s), breaks=False)

    def bind_weights(self, src):
        """``src``: a checkpoint path (a safetensors file, a folder with one,
        a sharded folder or its index, a ``dtpc shard`` folder: each rank
        reads only its slices), an integer seed, or a mapping of full tensors
        by name (numpy arrays or torch tensors, any dtype and device), one
        tensor at a time: each rank copies its slice of it. f32, bf16 and f16
        data are taken in their dtype (bit for bit where it is the storage
        dtype), others converted to float32 first; a torch CUDA tensor given
        to ranks on the GPU is read there, on torch's current stream, with no
        host copy."""
        if hasattr(src, "items"):
            for name, value in src.items():
                t = _Tensor(name, value, self._gpus)
                job = _with_stream(lambda s, r: t.bind("dtpc_session_bind_weight_data", s, r),
                                   self._streams([t]))
                self._each(job, breaks=False)
                count("weight_binds", self._nlocal())
                del t, job  # before the next one is converted: one tensor's copy at a time
            return
        if _is_path(src):
            path = os.fsencode(src)

            def bind(s, r):
                call("dtpc_session_bind_weights_file", s, path, rank=r)
                return _unused(library(), s)
            unused = self._each(bind)[0]
            if unused:
                warnings.warn(f"{os.fsdecode(src)}: tensors the graph does not use: {unused}",
                              stacklevel=2)
        else:
            seed = int(src)
            self._each(lambda s, r: call("dtpc_session_bind_weights_seed", s, seed, rank=r))
        count("weight_binds", len(self.graph.weights) * self._nlocal())

    def run(self, inputs, dtype=None, device=None):
        """One forward pass. ``inputs``: whole tensors by name (numpy or
        torch, any dtype and device, taken as ``bind_weights`` takes its
        tensors: f32 / bf16 / f16 as they are, a CUDA tensor on CUDA ranks
        from device memory; also a safetensors path or an integer seed).
        Returns {name: float32 numpy array}, or with ``dtype`` or ``device``
        (torch's: default torch.float32, "cpu") {name: torch tensor} of that
        dtype on that device, which the session writes straight into (on
        CUDA ranks and a CUDA device: in device memory on torch's current
        stream, no host copy; those outputs are not checked for NaN and Inf,
        as that would cost one). Every rank holds the outputs whole (local:
        rank 0's)."""
        return self._run(inputs, False, dtype, device)

    def _run(self, inputs, all_ranks, dtype=None, device=None):
        as_torch = dtype is not None or device is not None
        if as_torch:
            import torch
            want_dtype = dtype if dtype is not None else torch.float32
            want_device = torch.device(device if device is not None else "cpu")
            code = _TORCH_CODES.get(str(want_dtype)[len("torch."):], 0)
        tensors = []
        if hasattr(inputs, "items"):
            tensors = [_Tensor(k, v, self._gpus) for k, v in inputs.items()]

            def bind(s, r):
                for t in tensors:
                    t.bind("dtpc_session_set_input_data", s, r)
        elif _is_path(inputs):
            path = os.fsencode(inputs)

            def bind(s, r):
                call("dtpc_session_bind_inputs_file", s, path, rank=r)
                return _unused(library(), s)
        else:
            seed = int(inputs)

            def bind(s, r):
                call("dtpc_session_bind_inputs_seed", s, seed, rank=r)
        streams = self._streams(tensors, as_torch and want_device.type == "cuda")
        # inputs on every rank first: one refused leaves the others not
        # waiting in the run for it, and the sessions usable
        unused = self._each(_with_stream(bind, streams), breaks=False)[0]
        if unused:
            warnings.warn(f"{os.fsdecode(inputs)}: tensors the graph does not use: {unused}",
                          stacklevel=3)

        def forward(s, r):
            call("dtpc_session_run", s, rank=r)
            if not (all_ranks or r == 0 or self.rank is not None):
                return None, None
            if as_torch:
                o = _torch_outputs(s, code, want_device.type == "cuda", streams)
                return o, _torch_nonfinite(o)
            return _outputs(library(), s), _nonfinite(library(), s)
        outs = self._each(_with_stream(forward, streams))
        count("runs")
        if as_torch:  # in the caller's thread, on its stream: to what was asked
            outs = [(o if o is None else {k: v.to(device=want_device, dtype=want_dtype)
                                          for k, v in o.items()}, bad) for o, bad in outs]
        # a NaN or an Inf is no image: refused as `dtpc run` refuses it
        # (every rank holds the same outputs, so the first one tells)
        bad = outs[0][1]
        if bad and not self._allow_nonfinite:
            raise DtpcError("; ".join(f"output '{k}': {n} of {size} values are NaN or Inf"
                                      for k, (n, size) in bad.items())
                            + " (allow_nonfinite=True takes them)")
        outs = [o for o, _ in outs]
        return outs if all_ranks else outs[0]

    def close(self):
        """Frees the sessions (the ranks' threads end). Idempotent."""
        impl, self._impl = getattr(self, "_impl", None), None
        if impl is not None:
            impl.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter exit the modules may be gone
            pass
