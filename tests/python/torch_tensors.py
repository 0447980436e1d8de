"""torch_tensors.py TMPDIR — torch tensors as Ranks' weights and inputs, with
the project's Python environment (tests/python.sh): bf16 weights, float64
inputs, parameters that require grad and non-contiguous views give what
their float32 numpy values give. Prints "ok NAME", "FAIL NAME: why" or "skip
NAME: why" per check. Run with PYTHONPATH=python and DTPC_BUILD=BUILD."""
import os
import sys

import numpy as np
import torch

import dtpc
from harness import Skip, case

tmp = sys.argv[1]


G = dtpc.compile_cached("examples/tiny_dit.plan", plan="tiny_dit_tp", mesh="tp = 2",
                        defines={"seq": 64}, cache_dir=os.path.join(tmp, "cache"))
gen = torch.Generator().manual_seed(5)
TORCH_W = {k: torch.randn(s, generator=gen, dtype=torch.float32).to(torch.bfloat16) * 0.1
           for k, s in G.weights.items()}
TORCH_X = torch.randn((1, 64, 128), generator=gen, dtype=torch.float64)


def run(weights, x):
    with dtpc.Ranks(G) as r:
        r.bind_weights(weights)
        return r.run({"hidden_states": x})["proj_out"]


# the values the tensors hold, as numpy float32 (bf16 -> f32 is exact)
REF = run({k: v.float().numpy() for k, v in TORCH_W.items()}, TORCH_X.numpy().astype(np.float32))


@case
def bf16_weights_f64_inputs():
    got = run(TORCH_W, TORCH_X)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32, type(got)
    assert np.array_equal(got, REF), float(np.max(np.abs(got - REF)))


@case
def parameters_and_views():
    # parameters that require grad (a module's state), and a weight held as
    # the transpose of its transpose (not contiguous)
    w = {k: torch.nn.Parameter(v.float(), requires_grad=True) for k, v in TORCH_W.items()}
    name = next(k for k, v in w.items() if v.dim() == 2)
    w[name] = w[name].detach().t().contiguous().t()
    assert not w[name].is_contiguous()
    got = run(w, TORCH_X.float())
    assert np.array_equal(got, REF), float(np.max(np.abs(got - REF)))


@case
def perturbed_weight_differs():
    # the control: the comparisons above can fail
    w = dict(TORCH_W)
    name = next(k for k in w if k.endswith(".weight"))
    w[name] = w[name] + 0.1
    got = run(w, TORCH_X)
    assert float(np.max(np.abs(got - REF))) > 1e-3


@case
def cuda_tensors():
    if not torch.cuda.is_available():
        raise Skip("torch sees no GPU")
    w = {k: v.cuda() for k, v in TORCH_W.items()}
    got = run(w, TORCH_X.cuda())
    assert np.array_equal(got, REF), float(np.max(np.abs(got - REF)))


print("checks done")
