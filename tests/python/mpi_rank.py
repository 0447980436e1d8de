"""mpi_rank.py GRAPH TMPDIR good|bad — one rank of tests/python/ranks.py's
MPI check (mpirun -np N): Ranks(backend="mpi") binds TMPDIR/weights.npz,
runs TMPDIR/x.npy twice and writes "rank R: sessions S, binds B, second run
binds B2" to TMPDIR/MODE-R.txt (rank 0 saves the output as
TMPDIR/mpi_out.npy). "bad": rank 1's input has the wrong shape; every rank
that gets to it writes "rank R: DtpcError: ...". Files, not standard output:
mpirun interleaves the ranks' lines."""
import os
import sys

import numpy as np

import dtpc

graph, tmp, mode = sys.argv[1:4]
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1"))
weights = dict(np.load(os.path.join(tmp, "weights.npz")))
x = np.load(os.path.join(tmp, "x.npy"))
try:
    with dtpc.Ranks(dtpc.Graph.open(graph), backend="mpi", timeout=3) as r:
        assert r.rank == rank, (r.rank, rank)
        if mode == "bad" and r.rank == 1:
            x = x[:, :32]
        r.bind_weights(weights)
        binds = dtpc.stats["weight_binds"]
        r.run({"hidden_states": x})
        out = r.run({"hidden_states": x})["proj_out"]
        if r.rank == 0:
            np.save(os.path.join(tmp, "mpi_out.npy"), out)
        said = (f"rank {r.rank}: sessions {dtpc.stats['sessions']}, binds {binds}, "
                f"second run binds {dtpc.stats['weight_binds'] - binds}")
except dtpc.DtpcError as e:
    said = f"rank {rank}: DtpcError: {e}"
# at once: the job may be aborted (MPI_Abort) before this process exits
with open(os.path.join(tmp, f"{mode}-{rank}.txt"), "w") as f:
    f.write(said + "\n")
