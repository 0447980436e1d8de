"""torchrun_flux.py OUT [--world N | --compare N] — launch mode 3 on the GPUs
(tests/gpu/run.sh). Under torchrun (one process per GPU): the tiny
FluxPipeline of examples/python/flux_pipeline.py with dtpc.torch on
backend="torchrun" (flux_tp, tp = the world) saves each rank's image as
OUT/rank{R}.npy. --world N: mode 1, one process, N local ranks on the CUDA
device, the same plan and mesh: OUT/local.npy. --compare N: every rank's
image equals rank 0's and is within 1e-4 of mode 1's (exit 0), else exit 1."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python"))


def image(world, backend):
    import torch
    import dtpc.torch
    from flux_pipeline import tiny_pipeline
    pipe = tiny_pipeline()
    dtpc.torch.parallelize(pipe, "flux_tp", mesh=f"tp = {world}", backend=backend,
                           device="cuda")
    out = pipe(prompt_embeds=torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(1)),
               pooled_prompt_embeds=torch.randn(1, 32, generator=torch.Generator().manual_seed(2)),
               height=96, width=128, num_inference_steps=2, output_type="np",
               generator=torch.Generator().manual_seed(0))
    return np.asarray(out.images, dtype=np.float32), pipe.transformer.rank


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if sys.argv[2:3] == ["--compare"]:
        n = int(sys.argv[3])
        local = np.load(os.path.join(out, "local.npy"))
        ranks = [np.load(os.path.join(out, f"rank{r}.npy")) for r in range(n)]
        err = float(np.abs(ranks[0] - local).max())
        same = all(np.array_equal(ranks[0], r) for r in ranks)
        print(f"mode 3 vs mode 1: max |diff| {err:.2e} (tol 1e-4); the {n} ranks' images "
              f"{'equal' if same else 'differ'}; image std {float(local.std()):.3f}")
        sys.exit(0 if err <= 1e-4 and same and local.std() > 1e-2 else 1)
    if sys.argv[2:3] == ["--world"]:
        img, _ = image(int(sys.argv[3]), "local")
        np.save(os.path.join(out, "local.npy"), img)
    else:
        img, rank = image(int(os.environ["WORLD_SIZE"]), "torchrun")
        np.save(os.path.join(out, f"rank{rank}.npy"), img)
    print("done")


if __name__ == "__main__":
    main()
