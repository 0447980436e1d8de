"""Graphs and the ranks that replay them: ``Graph`` (a loaded graph),
``Ranks`` (one persistent session per rank: sessions, arenas and bound
weights live from one run to the next) and the process's counters,
``stats``."""
import atexit
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

def _host_f32(x):
    """x as a C-ordered float32 numpy array in host memory, copied only when
    it must be converted. A torch tensor (of any dtype, on any device) goes
    through torch, which is never imported here: it is there when one is."""
    if type(x).__module__.split(".")[0] == "torch":
        torch = sys.modules["torch"]
        x = x.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()
    return np.ascontiguousarray(x, dtype=np.float32)


class _Tensor:
    """A whole tensor as the API takes it; the array stays alive with it."""

    def __init__(self, name, value):
        self.name = name.encode()
        self.array = _host_f32(value)
        self.data = self.array.ctypes.data_as(f32p)
        self.shape = (ctypes.c_int64 * self.array.ndim)(*self.array.shape)
        self.ndim = self.array.ndim


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


class _MpiRank:
    """This process's one rank: the session in the caller's thread."""

    def __init__(self, graph, device, threads, dtype, timeout_ms):
        self.graph = graph
        comm = _mpi_comm(timeout_ms)
        lib = library()
        self.rank, self.world = lib.dtpc_comm_rank(comm), lib.dtpc_comm_size(comm)
        self.sess = ctypes.c_void_p()
        call("dtpc_session_create", graph._h, comm, device, ctypes.byref(self.sess),
             rank=self.rank)
        count("sessions")
        try:
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


class _TorchrunRank:
    """This process's one rank of a torchrun job on its GPU (LOCAL_RANK):
    its NCCL communicator (dtpc_comm_nccl_init, the id from rank 0 through
    torchrun's store) and its session, in the caller's thread."""

    def __init__(self, graph, device, threads, dtype, timeout_ms):
        self.graph = graph
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
        try:
            call("dtpc_session_create", graph._h, self.comm, device, ctypes.byref(self.sess),
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
        if lib is not None:
            if self.sess.value:
                lib.dtpc_session_free(self.sess)
            if self.comm.value:
                lib.dtpc_comm_free(self.comm)
        self.sess, self.comm = ctypes.c_void_p(), ctypes.c_void_p()


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
    ``threads``: CPU threads per rank (default: the cores shared among this
    process's ranks); ``timeout``: seconds, the bound on every wait for
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

    def bind_weights(self, src):
        """``src``: a checkpoint path (a safetensors file, a folder with one,
        a sharded folder or its index, a ``dtpc shard`` folder: each rank
        reads only its slices), an integer seed, or a mapping of full tensors
        by name (numpy arrays or torch tensors, any dtype and device),
        converted to float32 host memory one tensor at a time: each rank
        copies its slice of it."""
        if hasattr(src, "items"):
            for name, value in src.items():
                t = _Tensor(name, value)
                self._each(lambda s, r: call("dtpc_session_bind_weight", s, t.name, t.data,
                                             t.shape, t.ndim, rank=r), breaks=False)
                count("weight_binds", self._nlocal())
                del t  # before the next one is converted: one tensor's copy at a time
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

    def run(self, inputs):
        """One forward pass. ``inputs``: whole tensors by name (numpy or
        torch, any dtype: converted to float32; also a safetensors path or
        an integer seed). Returns {name: float32 array}: every rank holds the
        outputs whole (local: rank 0's)."""
        return self._run(inputs, False)

    def _run(self, inputs, all_ranks):
        if hasattr(inputs, "items"):
            tensors = [_Tensor(k, v) for k, v in inputs.items()]

            def bind(s, r):
                for t in tensors:
                    call("dtpc_session_set_input", s, t.name, t.data, t.shape, t.ndim, rank=r)
        elif _is_path(inputs):
            path = os.fsencode(inputs)

            def bind(s, r):
                call("dtpc_session_bind_inputs_file", s, path, rank=r)
                return _unused(library(), s)
        else:
            seed = int(inputs)

            def bind(s, r):
                call("dtpc_session_bind_inputs_seed", s, seed, rank=r)
        # inputs on every rank first: one refused leaves the others not
        # waiting in the run for it, and the sessions usable
        unused = self._each(bind, breaks=False)[0]
        if unused:
            warnings.warn(f"{os.fsdecode(inputs)}: tensors the graph does not use: {unused}",
                          stacklevel=3)

        def forward(s, r):
            call("dtpc_session_run", s, rank=r)
            if all_ranks or r == 0 or self.rank is not None:
                return _outputs(library(), s), _nonfinite(library(), s)
            return None, None
        outs = self._each(forward)
        count("runs")
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
