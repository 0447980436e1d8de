"""launch.py TMPDIR — launch mode 3 (torchrun) as far as a machine without a
GPU takes it, and Ctrl-C through a dtpc.torch pipeline; with the project's
environment (torch, diffusers, torchrun). Prints "ok NAME", "FAIL NAME: why"
or "skip NAME: why" per check (tests/python.sh counts them).

- Outside torchrun, backend="torchrun" is refused, naming how to launch.
- One `torchrun --nproc-per-node 2` of this script (--torchrun-child): the
  NCCL unique id made by rank 0 (dtpc_nccl_unique_id) reaches rank 1 through
  torchrun's store with the same bytes; without a GPU, Ranks(backend=
  "torchrun") raises DtpcError naming the missing GPU and the fix on every
  rank; device="cpu" under torchrun and backend="local" under torchrun are
  refused on every rank; a rank that never comes makes the others fail
  within the timeout, naming it. The job's own wall time is bounded.
- SIGINT to a process whose 2 local ranks are in a FluxPipeline step (many
  short ops, several seconds): the KeyboardInterrupt reaches the script with
  the rank threads ended (measured: 0.1 s after the SIGINT), and the process
  exits by it. The control: the same with the world's abort disabled
  (dtpc.runtime._LocalRanks.abort a no-op) has not reached the script by
  3 times that (at least 2 s; measured: 9.6 s, the rest of the pass), so
  the check fails without the abort.
- SIGINT to the process group of `mpirun -np 2` (a terminal's Ctrl-C) while
  rank 0 waits in a collective for rank 1: mpirun and both ranks end within
  10 s (measured: 1.2 s; the ranks' timeout is 60 s).

The GPU side of mode 3 (a torchrun of examples/python/flux_pipeline.py
against mode 1's image) is in tests/gpu/run.sh."""
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import dtpc  # noqa: E402
import dtpc.runtime as rt  # noqa: E402
from harness import Skip, case, raises  # noqa: E402

PLAN = "examples/tiny_dit.plan"
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
TIMEOUT = 3.0  # seconds: the Ranks' timeout in the torchrun child


def graph(cache):
    return dtpc.compile_cached(PLAN, plan="tiny_dit_8", mesh="ulysses = 2",
                               defines={"seq": 16}, cache_dir=cache)


def outcome(fn):
    """What fn() raised, as one line: "DtpcError: ..." or "ok"."""
    try:
        fn()
        return "ok"
    except dtpc.DtpcError as e:
        return f"DtpcError: {e}"


# ---- the torchrun child: one rank -----------------------------------------------------------

def torchrun_child(out):
    rank, world = rt.torchrun_env()
    g = graph(os.path.join(out, f"cache{rank}"))
    lines = [f"world {world}"]
    try:
        uid = rt._torchrun_meet(rank, world, None, TIMEOUT)
        lines.append(f"id {hashlib.sha256(uid).hexdigest()} {len(uid)}")
    except dtpc.DtpcError as e:
        lines.append(f"id-error {e}")
    t = time.monotonic()
    lines.append("torchrun " + outcome(lambda: dtpc.Ranks(g, backend="torchrun",
                                                          timeout=TIMEOUT)))
    lines.append(f"torchrun-took {time.monotonic() - t:.2f}")
    lines.append("cpu " + outcome(lambda: dtpc.Ranks(g, backend="torchrun", device="cpu")))
    lines.append("local " + outcome(lambda: dtpc.Ranks(g)))
    # rank 1 does not come: rank 0 waits TIMEOUT, then names it
    if rank == 0:
        t = time.monotonic()
        lines.append("alone " + outcome(lambda: rt._torchrun_meet(rank, world, None, TIMEOUT,
                                                                  make_id=False)))
        lines.append(f"alone-took {time.monotonic() - t:.2f}")
    with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


# ---- the interrupted child: Ctrl-C through a pipeline step -----------------------------

def interrupt_child(abort):
    """A tiny FluxPipeline (12 single-stream blocks) on 2 local ranks (Ulysses 2),
    a step of several seconds made of many short ops: prints "running" as the
    step's run starts, and on the KeyboardInterrupt how many rank threads are
    left before re-raising it."""
    import torch
    import dtpc.torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, \
        FluxTransformer2DModel
    if not abort:  # the negative control
        rt._LocalRanks.abort = lambda self, why: None
    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(
        in_channels=16, num_layers=1, num_single_layers=12, attention_head_dim=16,
        num_attention_heads=4, joint_attention_dim=32, pooled_projection_dim=32,
        axes_dims_rope=[4, 4, 8])
    vae = AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(16, 16),
                        latent_channels=4, norm_num_groups=4, layers_per_block=1)
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=None,
                        tokenizer=None, text_encoder_2=None, tokenizer_2=None,
                        transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    dtpc.torch.parallelize(pipe, "flux_ulysses", mesh="ulysses = 2", threads=1,
                           cache_dir=sys.argv[3])
    run = dtpc.Ranks.run

    def announced(self, inputs, *args, **kwargs):
        print("running", flush=True)
        return run(self, inputs, *args, **kwargs)
    dtpc.Ranks.run = announced
    try:
        # 12288 image tokens: each attention about half a second, the step several
        pipe(prompt_embeds=torch.randn(1, 16, 32), pooled_prompt_embeds=torch.randn(1, 32),
             height=384, width=512, num_inference_steps=1, output_type="latent")
    except KeyboardInterrupt:
        left = [t.name for t in threading.enumerate() if t.name.startswith("dtpc rank")]
        print(f"interrupted; rank threads left: {len(left)}", flush=True)
        raise
    print("not interrupted", flush=True)


def mpi_child(cache):
    """A rank of mpirun -np 2: rank 0 waits in its run's first collective for
    rank 1, which sleeps instead (timeout 60 s)."""
    r = dtpc.Ranks(graph(cache), backend="mpi", timeout=60)
    r.bind_weights(1)
    print(f"ready {os.getpid()}", flush=True)
    if r.rank == 1:
        time.sleep(60)
    r.run(1)


if sys.argv[1:2] == ["--mpi-child"]:
    mpi_child(sys.argv[2])
    sys.exit(0)
if sys.argv[1:2] == ["--torchrun-child"]:
    torchrun_child(sys.argv[2])
    sys.exit(0)
if sys.argv[1:2] == ["--interrupt-child"]:
    interrupt_child(sys.argv[2] == "abort")
    sys.exit(0)


# ---- the checks ---------------------------------------------------------------------------

def read_rank(path):
    out = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition(" ")
            out[k] = v
    return out


@case
def torchrun_refused_outside_torchrun():
    if rt.torchrun_env() is not None:
        raise Skip("this test runs under torchrun's environment")
    g = graph(os.path.join(sys.argv[1], "cache"))
    raises(lambda: dtpc.Ranks(g, backend="torchrun"), "not started by torchrun",
           "torchrun --nproc-per-node N", "backend='local'")
    raises(lambda: dtpc.Ranks(g, backend="nccl"), "'local', 'mpi' or 'torchrun'")


def torchrun_job():
    if not os.access(TORCHRUN, os.X_OK):
        return None, f"no torchrun beside {sys.executable}"
    out = os.path.join(sys.argv[1], "torchrun")
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    cmd = [TORCHRUN, "--standalone", "--nproc-per-node", "2", __file__,
           "--torchrun-child", out]
    t = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        raise AssertionError("torchrun --nproc-per-node 2 ran past 90 s: a rank hangs")
    took = time.monotonic() - t
    files = [os.path.join(out, f"rank{r}.txt") for r in range(2)]
    if p.returncode or not all(map(os.path.exists, files)):
        raise AssertionError(f"torchrun exit {p.returncode}: {p.stderr[-800:]}")
    return [read_rank(f) for f in files], took


JOB = None


def job():
    global JOB
    if JOB is None:
        JOB = torchrun_job()
    ranks, why = JOB
    if ranks is None:
        raise Skip(why)
    return ranks


@case
def torchrun_id_same_bytes():
    ranks = job()
    assert all(r["world"] == "2" for r in ranks), ranks
    if "id-error" in ranks[0]:
        if "no nccl backend" in ranks[0]["id-error"]:
            raise Skip(f"this build has no NCCL: {ranks[0]['id-error']}")
        raise AssertionError(ranks[0]["id-error"])
    ids = [r["id"] for r in ranks]
    assert ids[0] == ids[1] and ids[0].endswith(" 128"), ids
    # the id is fresh (not zeros): a SHA-256 of 128 zero bytes is not it
    assert not ids[0].startswith(hashlib.sha256(bytes(128)).hexdigest()), ids


@case
def torchrun_no_gpu_refused_every_rank():
    if not dtpc._lib.library().dtpc_device_unavailable(1):
        raise Skip("a GPU is visible: tests/gpu/run.sh runs mode 3 on it")
    ranks = job()
    for r in ranks:
        got = r["torchrun"]
        assert got.startswith("DtpcError: backend 'torchrun': rank 0: device 'cuda': "), got
        assert "mpirun -np N" in got and "backend='local'" in got, got
        assert float(r["torchrun-took"]) < TIMEOUT, r["torchrun-took"]


@case
def torchrun_cpu_refused_every_rank():
    for r in job():
        assert r["cpu"].startswith("DtpcError: backend 'torchrun', device 'cpu': "), r["cpu"]
        assert "mpirun -np N" in r["cpu"], r["cpu"]
        assert r["local"].startswith("DtpcError: backend 'local' under torchrun: "), r["local"]
        assert "backend='torchrun'" in r["local"], r["local"]


@case
def torchrun_missing_rank_times_out():
    r = job()[0]
    assert r["alone"].startswith("DtpcError: rank 0: timed out after 3 s waiting for "
                                 "torchrun ranks [1]"), r["alone"]
    assert TIMEOUT - 0.1 < float(r["alone-took"]) < TIMEOUT + 2, r["alone-took"]


def interrupted(abort, wait):
    """A child sent SIGINT half a second into its step: (seconds from the
    SIGINT to its "interrupted" line, None if it did not come within wait;
    its return code, None if it did not end within 20 s more; its output)."""
    cmd = [sys.executable, __file__, "--interrupt-child", "abort" if abort else "no-abort",
           os.path.join(sys.argv[1], "cache")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, when = [], []

    def read():
        for line in p.stdout:
            lines.append(line)
            if line.startswith("interrupted"):
                when.append(time.monotonic())
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120  # imports and the compile
        while not any("running" in x for x in lines):
            if p.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the step did not start: {''.join(lines)[-800:]}")
            time.sleep(0.05)
        time.sleep(0.5)
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        while not when and time.monotonic() < t + wait:
            time.sleep(0.02)
        if not when:
            return None, None, "".join(lines)
        try:
            rc = p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            rc = None
        reader.join(5)
        return when[0] - t, rc, "".join(lines)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@case
def interrupt_pipeline_step():
    took, rc, out = interrupted(True, 15)
    assert took is not None, f"no KeyboardInterrupt 15 s after SIGINT: {out[-800:]}"
    assert "interrupted; rank threads left: 0" in out, out[-800:]
    assert rc == -signal.SIGINT and "KeyboardInterrupt" in out, (rc, out[-800:])
    # the control: without the abort the ranks end their pass (seconds here)
    # before they are joined, so the interrupt comes much later
    wait = max(2.0, 3 * took)
    late, rc, out = interrupted(False, wait)
    assert late is None, f"without the abort: interrupted {late:.2f} s after SIGINT " \
        f"(with it {took:.2f} s)"
    print(f"(interrupted {took:.2f} s after SIGINT; without the abort not within {wait:.1f} s)")


@case
def mpirun_sigint_ends_every_rank():
    import shutil
    if not shutil.which("mpirun"):
        raise Skip("mpirun not found")
    cmd = ["mpirun", "-np", "2", "--oversubscribe", "--allow-run-as-root", "--mca", "btl",
           "self,vader", sys.executable, __file__, "--mpi-child",
           os.path.join(sys.argv[1], "cache-mpi")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        import re
        pids, seen = [], ""
        for line in p.stdout:  # the two ranks' lines may interleave
            seen += line
            pids = [int(x) for x in re.findall(r"ready (\d+)", seen)]
            if len(pids) == 2:
                break
        assert len(pids) == 2, "the ranks did not start"
        time.sleep(0.3)
        t = time.monotonic()
        # what Ctrl-C at a terminal does: SIGINT to mpirun's process group
        # (Open MPI puts each rank in a process group of its own)
        os.killpg(p.pid, signal.SIGINT)
        p.wait(timeout=15)

        def alive():
            left = []
            for pid in pids:
                try:
                    os.kill(pid, 0)
                    left.append(pid)
                except ProcessLookupError:
                    pass
            return left
        while alive() and time.monotonic() < t + 15:
            time.sleep(0.05)
        took = time.monotonic() - t
        assert not alive(), f"ranks {alive()} outlive mpirun by 15 s"
        assert took < 10, took  # the ranks' timeout is 60 s
        print(f"(mpirun and both ranks ended {took:.2f} s after SIGINT)")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


print("checks done")
