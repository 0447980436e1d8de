"""ranks.py TMPDIR — the Python package's runtime and compile cache: Ranks
against Graph.run and `dtpc run`, persistence counted by dtpc.stats,
compile_cached's memory and disk hits and its key, failures that raise
(within the timeout) instead of hanging, a KeyboardInterrupt mid-run that
aborts the local world and joins its ranks, the
refusals and their messages, and MPI ranks against local ones. Prints "ok
NAME", "FAIL NAME: why" or "skip NAME: why" per check (tests/python.sh
counts them). Run with PYTHONPATH=python and DTPC_BUILD=BUILD."""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import _thread

import numpy as np

import dtpc
from harness import Skip, case, raises

tmp = sys.argv[1]
PLAN = "examples/tiny_dit.plan"
HERE = os.path.dirname(os.path.abspath(__file__))
ERR_BIND, ERR_STATE, ERR_MISMATCH = 7, 9, 5


def normwise(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = int.from_bytes(b[:8], "little")
    head = json.loads(b[8:8 + n])
    head.pop("__metadata__", None)
    out = {}
    for k, v in head.items():
        assert v["dtype"] == "F32", v
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype="<f4").reshape(v["shape"])
    return out


CACHE = os.path.join(tmp, "cache")
# ulysses x tp: 4 ranks, both kinds of collectives
G4 = dtpc.compile_cached(PLAN, plan="tiny_dit_8", mesh="ulysses = 2, tp = 2",
                         defines={"seq": 64}, cache_dir=CACHE)
rng = np.random.default_rng(11)
WEIGHTS = {k: rng.standard_normal(s).astype(np.float32) * 0.1 for k, s in G4.weights.items()}
X = rng.standard_normal((1, 64, 128)).astype(np.float32)


@case
def ranks_equal_graph_run_and_cli():
    with dtpc.Ranks(G4) as r:
        assert (r.world, r.rank) == (4, None), (r.world, r.rank)
        r.bind_weights(7)
        mine = r.run(7)["proj_out"]
        other = r.run(8)["proj_out"]
    once = G4.run(inputs=7, weights=7)["proj_out"]
    assert np.array_equal(mine, once), normwise(mine, once)
    g = os.path.join(tmp, "g4.graph")
    shutil.copy(G4.path, g)
    p = subprocess.run([os.path.join(os.environ["DTPC_BUILD"], "dtpc"), "run", g, "--seed", "7",
                        "--allow-seeded", "--save-outputs", os.path.join(tmp, "cli.safetensors")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    cli = read_safetensors(os.path.join(tmp, "cli.safetensors"))["proj_out"]
    assert normwise(mine, cli) < 1e-6, normwise(mine, cli)
    # the comparisons can fail: other inputs give another output
    assert normwise(other, cli) > 1e-2


@case
def second_run_binds_nothing():
    dtpc.reset_stats()
    with dtpc.Ranks(G4) as r:
        assert dtpc.stats["sessions"] == 4, dtpc.stats
        r.bind_weights(WEIGHTS)
        assert dtpc.stats["weight_binds"] == 4 * len(WEIGHTS), dtpc.stats
        first = r.run({"hidden_states": X})["proj_out"]
        before = dict(dtpc.stats)
        second = r.run({"hidden_states": X})["proj_out"]
        changed = r.run({"hidden_states": X * 2})["proj_out"]
        after = dict(dtpc.stats)
    assert after["weight_binds"] == before["weight_binds"], (before, after)
    assert after["sessions"] == before["sessions"] and after["runs"] == before["runs"] + 2, after
    assert np.array_equal(first, second)
    # each run computes: new inputs, a new output (not the last one kept)
    assert normwise(changed, first) > 1e-2
    # the counters do move where sessions and binds happen: Graph.run
    # creates and binds every time
    ref = G4.run(inputs={"hidden_states": X}, weights=WEIGHTS)["proj_out"]
    assert dtpc.stats["sessions"] == after["sessions"] + 4, dtpc.stats
    assert dtpc.stats["weight_binds"] == after["weight_binds"] + 4 * len(WEIGHTS), dtpc.stats
    assert np.array_equal(first, ref)


def write_safetensors(path, tensors):
    head, blob = {}, b""
    for k, a in tensors.items():
        a = np.ascontiguousarray(a, dtype="<f4")
        head[k] = {"dtype": "F32", "shape": list(a.shape),
                   "data_offsets": [len(blob), len(blob) + a.nbytes]}
        blob += a.tobytes()
    h = json.dumps(head).encode()
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + blob)


@case
def nonfinite_outputs_refused():
    # one NaN in one weight: every output a NaN, which a run refuses to
    # hand back as an image, naming the output and the count
    name = sorted(WEIGHTS)[0]
    poisoned = dict(WEIGHTS)
    poisoned[name] = WEIGHTS[name].copy()
    poisoned[name].flat[3] = np.nan
    with dtpc.Ranks(G4) as r:
        r.bind_weights(poisoned)
        e = raises(lambda: r.run({"hidden_states": X}), "output 'proj_out'",
                   "values are NaN or Inf", "allow_nonfinite=True")
        assert " of " in str(e), str(e)
        # the ranks stay usable: the weights fixed, the same ranks run clean
        r.bind_weights({name: WEIGHTS[name]})
        clean = r.run({"hidden_states": X})["proj_out"]
    assert np.isfinite(clean).all()
    with dtpc.Ranks(G4, allow_nonfinite=True) as r:
        r.bind_weights(poisoned)
        out = r.run({"hidden_states": X})["proj_out"]
    assert np.isnan(out).any(), "allow_nonfinite: the NaN outputs come back as they are"
    # control: finite weights raise nothing
    assert np.array_equal(G4.run(inputs={"hidden_states": X}, weights=WEIGHTS)["proj_out"],
                          clean)


@case
def unused_file_tensors_warned():
    import warnings
    ckpt = os.path.join(tmp, "extra.safetensors")
    write_safetensors(ckpt, dict(WEIGHTS, **{"not.in.the.graph": np.ones(3)}))
    inputs = os.path.join(tmp, "extra_inputs.safetensors")
    write_safetensors(inputs, {"hidden_states": X, "guidance": np.ones(1)})
    with dtpc.Ranks(G4) as r, warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r.bind_weights(ckpt)
        r.run(inputs)
    said = [str(x.message) for x in w]
    assert any("'not.in.the.graph'" in m and "does not use" in m for m in said), said
    assert any("'guidance'" in m for m in said), said
    # control: a checkpoint of exactly the graph's tensors warns nothing
    exact = os.path.join(tmp, "exact.safetensors")
    write_safetensors(exact, WEIGHTS)
    with dtpc.Ranks(G4) as r, warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r.bind_weights(exact)
    assert not [x for x in w if "does not use" in str(x.message)], [str(x.message) for x in w]


def stats_of_process(*args):
    """compile_cached in another process: its stats and the graph's hash."""
    code = ("import json, sys, dtpc\n"
            "g = dtpc.compile_cached(*json.loads(sys.argv[1]), **json.loads(sys.argv[2]))\n"
            "print(json.dumps([dtpc.stats, g.hash]))\n")
    p = subprocess.run([sys.executable, "-c", code, json.dumps(args[0]), json.dumps(args[1])],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@case
def compile_cached_memory_then_disk():
    folder = os.path.join(tmp, "c1")
    kw = dict(plan="tiny_dit_tp", mesh="tp = 2", defines={"seq": 32, "heads": 2},
              cache_dir=folder)
    dtpc.reset_stats()
    a = dtpc.compile_cached(PLAN, **kw)
    b = dtpc.compile_cached(PLAN, **kw)
    assert a is b and dtpc.stats["compiles"] == 1 and dtpc.stats["cache_memory_hits"] == 1, \
        dtpc.stats
    # the order of the defines is not part of the key
    kw2 = dict(kw, defines={"heads": 2, "seq": 32})
    assert dtpc.compile_cached(PLAN, **kw2) is a and dtpc.stats["compiles"] == 1
    assert [f for f in os.listdir(folder) if not f.endswith(".graph")] == [], os.listdir(folder)
    st, h = stats_of_process([PLAN], kw)
    assert st["cache_disk_hits"] == 1 and st["compiles"] == 0 and h == a.hash, st
    # control: another folder is another cache
    st, h = stats_of_process([PLAN], dict(kw, cache_dir=os.path.join(tmp, "c2")))
    assert st["cache_disk_hits"] == 0 and st["compiles"] == 1 and h == a.hash, st
    # a damaged entry is compiled again and replaced
    (entry,) = os.listdir(folder)
    with open(os.path.join(folder, entry), "r+b") as f:
        f.truncate(100)
    st, h = stats_of_process([PLAN], kw)
    assert st["compiles"] == 1 and h == a.hash, st
    st, h = stats_of_process([PLAN], kw)
    assert st["cache_disk_hits"] == 1 and st["compiles"] == 0, st


@case
def compile_cached_key():
    folder = os.path.join(tmp, "c3")
    os.makedirs(os.path.join(tmp, "key"))
    main, model = os.path.join(tmp, "key", "main.plan"), os.path.join(tmp, "key", "m.plan")
    with open(model, "w") as f:
        f.write("model m(n = 8) { input x : [1, 4, n]; proj_in = linear(x, n); output proj_in; }\n")
    with open(main, "w") as f:
        f.write('# import "nothing.plan"; (a comment)\nimport "m.plan";\nplan p { model m; }\n')
    dtpc.reset_stats()
    a = dtpc.compile_cached(main, plan="p", cache_dir=folder)
    dtpc.compile_cached(main, plan="p", defines={"n": 8}, cache_dir=folder)
    assert dtpc.stats["compiles"] == 2, dtpc.stats  # a define changes the key
    dtpc.compile_cached(main, plan="p", config={"n": 8}, cache_dir=folder)
    dtpc.compile_cached(main, plan="p", config={"n": 16}, cache_dir=folder)
    assert dtpc.stats["compiles"] == 4, dtpc.stats  # so does a config's content
    # an imported file's bytes are in the key
    with open(model, "a") as f:
        f.write("# changed\n")
    b = dtpc.compile_cached(main, plan="p", cache_dir=folder)
    assert dtpc.stats["compiles"] == 5 and b is not a, dtpc.stats
    assert dtpc.compile_cached(main, plan="p", cache_dir=folder) is b
    assert dtpc.stats["compiles"] == 5, dtpc.stats


@case
def compile_errors_located():
    e = raises(lambda: dtpc.compile_cached(PLAN, plan="tiny_dit_tp", defines={"sq": 64},
                                           cache_dir=CACHE),
               "tiny_dit.plan:41:9: error: model 'tiny_dit' has no parameter 'sq'")
    assert e.diagnostics and e.diagnostics[0]["line"] == 41, e.diagnostics
    raises(lambda: dtpc.compile_cached(PLAN, plan="nope", cache_dir=CACHE),
           "no plan named 'nope'", "tiny_dit_8, tiny_dit_tp")
    raises(lambda: dtpc.compile_cached(PLAN, plan="tiny_dit_tp", defines={"seq": "x"},
                                       cache_dir=CACHE), "'seq' is an integer")
    assert [f for f in os.listdir(CACHE) if f.endswith(".tmp")] == [], os.listdir(CACHE)


@case
def failures_raise_within_timeout():
    start = time.monotonic()
    with dtpc.Ranks(G4, timeout=5) as r:
        # a refused input leaves the sessions usable
        raises(lambda: r.run({"hidden_states": X[:, :32]}), "hidden_states", "[1, 64, 128]",
               status=ERR_BIND)
        raises(lambda: r.bind_weights({"proj_out.weight": np.zeros((3, 3))}), "proj_out.weight",
               status=ERR_BIND)
        some = dict(list(WEIGHTS.items())[1:])
        r.bind_weights(some)
        missing = next(iter(WEIGHTS))
        e = raises(lambda: r.run({"hidden_states": X}), f"weight '{missing}' is not bound",
                   status=ERR_STATE)
        assert e.rank is not None
        raises(lambda: r.run({"hidden_states": X}), "failed earlier")
    took = time.monotonic() - start
    assert took < 5, took
    with dtpc.Ranks(G4, timeout=5) as r:  # the control: all bound, it runs
        r.bind_weights(WEIGHTS)
        r.run({"hidden_states": X})


@case
def default_threads_per_ranks():
    """Ranks made without threads compute with the cores divided by their own
    ranks, whatever other Ranks are alive (a pipeline's two transformers,
    which never run at once). Control: threads=0, the library's default,
    divides the cores by every CPU session alive in the process."""
    cores = os.cpu_count() or 1
    if cores < 2:
        raise Skip("one core: every default is one thread")
    g1 = dtpc.compile_cached(PLAN, plan="tiny_dit_tp", mesh="tp = 1",
                             defines={"seq": 32, "heads": 2}, cache_dir=CACHE)
    with dtpc.Ranks(g1) as a, dtpc.Ranks(g1) as b, dtpc.Ranks(G4) as four:
        assert a.threads == b.threads == [cores], (a.threads, b.threads, cores)
        assert four.threads == [max(1, cores // 4)] * 4, (four.threads, cores)
        with dtpc.Ranks(g1, threads=0) as c:
            assert c.threads == [max(1, cores // 7)], (c.threads, cores)
            assert a.threads == [cores], a.threads
        assert dtpc.Ranks(g1, threads=3).threads == [3]


def rank_threads():
    return [t for t in threading.enumerate() if t.name.startswith("dtpc rank")]


@case
def interrupt_tears_down():
    # attention over 12288 tokens: a run of a second or more here
    g = dtpc.compile_cached(PLAN, plan="tiny_dit_tp", mesh="tp = 2", defines={"seq": 12288},
                            cache_dir=CACHE)
    r = dtpc.Ranks(g, timeout=60)
    r.bind_weights(1)
    start = time.monotonic()
    r.run(1)
    whole = time.monotonic() - start  # an uninterrupted pass
    timer = threading.Timer(0.2, _thread.interrupt_main)
    start = time.monotonic()
    timer.start()
    try:
        r.run(1)
        raise AssertionError("not interrupted")
    except KeyboardInterrupt:
        raised = time.monotonic() - start
        left = rank_threads()
    # the world was aborted and the ranks joined before the interrupt went
    # on: no thread left, and well before the pass would have ended (without
    # the abort the join waits for the pass; without the join threads are left)
    assert not left, left
    assert raised < 0.2 + 0.6 * whole, (raised, whole)
    raises(lambda: r.run(1), "interrupted")
    r.close()


def package_error(env, *statements):
    """What a process with env changed prints running the statements
    (default: a Graph.open), a DtpcError as "DtpcError: message"."""
    body = "".join("    " + line + "\n" for line in statements or ["dtpc.Graph.open('x')"])
    code = ("import dtpc\ntry:\n" + body
            + "except dtpc.DtpcError as e:\n    print('DtpcError:', e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, **env))
    return p.stdout + p.stderr


@case
def refusals():
    before = rank_threads()
    out = package_error({"DTPC_LIB": "/nonexistent/libdtpc.so"})
    assert "DtpcError: DTPC_LIB=/nonexistent/libdtpc.so: no such file" in out and "make" in out, out
    # control: with the library there, the same open fails on the file instead
    out = package_error({})
    assert "DtpcError" in out and "libdtpc" not in out, out
    out = package_error({"DTPC": "/nonexistent/dtpc"}, "dtpc.check('examples/tiny_dit.plan')")
    assert "DtpcError: DTPC=/nonexistent/dtpc: no such file" in out, out
    raises(lambda: dtpc.Ranks(G4, backend="tcp"), "backend 'tcp'")
    raises(lambda: dtpc.Ranks(G4, device="tpu"), "device 'tpu'")
    raises(lambda: dtpc.Ranks(G4, dtype="f64"), "dtype 'f64'")
    raises(lambda: dtpc.Ranks(G4, ranks=2, timeout=5), "the graph is for 4 ranks",
           status=ERR_MISMATCH)
    assert rank_threads() == before, rank_threads()  # the refused world's threads are gone


@case
def cuda_refused_with_reason():
    why = dtpc._lib.library().dtpc_device_unavailable(1)
    if not why:
        raise Skip("this build and machine can compute on CUDA")
    raises(lambda: dtpc.Ranks(G4, device="cuda"), "device 'cuda'", why.decode())


@case
def nccl_entry():
    # torchrun's entry (dtpc_nccl_unique_id, dtpc_comm_nccl_init): its
    # refusals anywhere; on a GPU machine tests/gpu/test_nccl_init runs it
    lib, ERR_INVALID, ERR_COMM = dtpc._lib.library(), 1, 6
    buf, other = ctypes.create_string_buffer(128), ctypes.create_string_buffer(128)
    comm = ctypes.c_void_p()
    raises(lambda: dtpc._lib.call("dtpc_nccl_unique_id", buf, 8), "takes 128 bytes",
           status=ERR_INVALID)
    st = lib.dtpc_nccl_unique_id(buf, 128)
    if st == 0:  # NCCL makes ids without a GPU
        assert lib.dtpc_nccl_unique_id(other, 128) == 0
        assert buf.raw != bytes(128) and buf.raw != other.raw
    else:
        assert st == ERR_COMM and b"no nccl backend" in lib.dtpc_last_error(), st
    for args, words in (((buf, 7, 0, 1), "has 128 bytes, not 7"),
                        ((buf, 128, 2, 2), "rank 2 of a world of 2"),
                        ((buf, 128, -1, 2), "rank -1 of a world of 2"),
                        ((buf, 128, 0, 0), "rank 0 of a world of 0")):
        raises(lambda: dtpc._lib.call("dtpc_comm_nccl_init", *args, 1000, ctypes.byref(comm)),
               words, status=ERR_INVALID)
    if not lib.dtpc_device_unavailable(1):
        raise Skip("a GPU is here: tests/gpu/test_nccl_init makes the communicator")
    start = time.monotonic()
    e = raises(lambda: dtpc._lib.call("dtpc_comm_nccl_init", buf, 128, 0, 1, 1000,
                                      ctypes.byref(comm)), "NCCL: ", status=ERR_COMM)
    assert comm.value is None and time.monotonic() - start < 30, (comm, str(e))
    assert any(w in str(e) for w in ("no CUDA device", "no nccl backend", "cannot load")), str(e)


@case
def storage_dtype():
    with dtpc.Ranks(G4, dtype="bf16") as r:
        r.bind_weights(7)
        half = r.run(7)["proj_out"]
    full = G4.run(inputs=7, weights=7)["proj_out"]
    err = normwise(half, full)
    assert 0 < err < 2e-2, err


@case
def mpi_equals_local():
    if not shutil.which("mpirun"):
        raise Skip("no mpirun")
    why = package_error({}, "import ctypes", "c = ctypes.c_void_p()",
                        "dtpc._lib.call('dtpc_comm_mpi', 1000, ctypes.byref(c))")
    if "has no MPI backend" in why:
        raise Skip("libdtpc is built without MPI")
    g = os.path.join(tmp, "mpi.graph")
    shutil.copy(G4.path, g)
    np.save(os.path.join(tmp, "x.npy"), X)
    np.savez(os.path.join(tmp, "weights.npz"), **WEIGHTS)
    for name in ("good", "bad"):
        # mpirun itself, after an MPI_Abort, now and then stays (-k: killed)
        p = subprocess.run(["timeout", "-k", "5", "30", "mpirun", "-np", "4", "--oversubscribe",
                            "--allow-run-as-root", "--mca", "btl", "self,vader", sys.executable,
                            os.path.join(HERE, "mpi_rank.py"), g, tmp, name],
                           capture_output=True, text=True)
        lines = []
        for r in range(4):
            try:
                with open(os.path.join(tmp, f"{name}-{r}.txt")) as f:
                    lines.append(f.read().strip())
            except OSError:
                pass  # an aborted job's rank may not get to write
        if name == "good":
            assert p.returncode == 0 and len(lines) == 4, (p.stdout, p.stderr)
            want = f"sessions 1, binds {len(WEIGHTS)}, second run binds 0"
            assert all(line.endswith(want) for line in lines), lines
        else:
            # rank 1's input is refused at once; the others' run times out
            # (3 s): they raise, and the first to free its failed
            # communicator ends the job (MPI_Abort), well within the bound
            assert p.returncode != 0, p.returncode
            one = [line for line in lines if line.startswith("rank 1: ")]
            assert one and "DtpcError" in one[0] and \
                "input 'hidden_states' has shape [1, 32, 128]" in one[0], (p.stdout, p.stderr)
            assert any("timed out after 3 s" in line for line in lines if line not in one), lines
    with dtpc.Ranks(G4) as r:
        r.bind_weights(WEIGHTS)
        local = r.run({"hidden_states": X})["proj_out"]
    got = np.load(os.path.join(tmp, "mpi_out.npy"))
    assert np.array_equal(got, local), normwise(got, local)
    assert normwise(got, G4.run(inputs={"hidden_states": X}, weights=7)["proj_out"]) > 1e-2
print("checks done")
