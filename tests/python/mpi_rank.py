"""mpi_rank.py GRAPH TMPDIR good|bad — one rank of tests/python/ranks.py's
MPI check (mpirun -np N): Ranks(backend="mpi") binds TMPDIR/weights.npz,
runs TMPDIR/x.npy twice and prints "rank R: sessions S, binds B, second run
binds B2" (rank 0 saves the output as TMPDIR/mpi_out.npy). "bad": rank 1's
input has the wrong shape; every rank prints "rank R: DtpcError: ..."."""
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
        print(f"rank {r.rank}: sessions {dtpc.stats['sessions']}, binds {binds}, "
              f"second run binds {dtpc.stats['weight_binds'] - binds}", flush=True)
except dtpc.DtpcError as e:
    # flushed: the job may be aborted (MPI_Abort) before this process exits
    print(f"rank {rank}: DtpcError: {e}", flush=True)
