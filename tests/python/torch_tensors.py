"""torch_tensors.py TMPDIR — torch tensors as Ranks' weights and inputs, with
the project's Python environment (tests/python.sh): bf16 weights, float64
inputs, parameters that require grad and non-contiguous views give what
their float32 numpy values give. The typed path (dtpc_session_*_data): bf16
and f16 tensors are handed over as they are (their own memory, no float32
copy), into bf16 / f16 storage give the float32 path's outputs bit for bit,
and run(dtype=, device=) returns torch tensors of that dtype written by the
session (the storage's bits, or converted); a perturbed weight is the
control. CUDA: CUDA tensors into CUDA ranks from device memory, outputs as
CUDA tensors, against the host path bit for bit (skipped without a GPU).
Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check. Run with
PYTHONPATH=python and DTPC_BUILD=BUILD."""
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


def run(weights, x, dtype=None, out_dtype=None, out_device=None, device="cpu"):
    with dtpc.Ranks(G, dtype=dtype, device=device) as r:
        r.bind_weights(weights)
        if out_dtype is None and out_device is None:
            return r.run({"hidden_states": x})["proj_out"]
        return r.run({"hidden_states": x}, dtype=out_dtype, device=out_device)["proj_out"]


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
def bf16_handed_over_as_is():
    # the tensor's own memory, in its dtype: no float32 copy on the way in
    from dtpc.runtime import _Tensor
    w = next(v for v in TORCH_W.values() if v.dim() == 2)
    t = _Tensor("w", w)
    _, ptr, code, where = t.at[-1]
    assert (ptr, code, where) == (w.data_ptr(), 1, 0), (ptr, w.data_ptr(), code, where)
    h = torch.zeros(4, dtype=torch.float16)
    assert _Tensor("h", h).at[-1][1:3] == (h.data_ptr(), 2)
    # float64 is converted (to float32), as before
    assert _Tensor("x", TORCH_X).at[-1][2] == 0


# the float32 path's outputs in bf16 storage (bf16 values: exact in float32)
REF16 = run({k: v.float().numpy() for k, v in TORCH_W.items()},
            TORCH_X.numpy().astype(np.float32), dtype="bf16")


@case
def bf16_storage_typed_equals_float32_path():
    got = run(TORCH_W, TORCH_X.to(torch.bfloat16), dtype="bf16")
    assert np.array_equal(got, REF16), float(np.max(np.abs(got - REF16)))
    # f16 inputs (converted to bf16 storage): against their own float32 values
    x16 = TORCH_X.to(torch.float16)
    want = run({k: v.float().numpy() for k, v in TORCH_W.items()},
               x16.float().numpy(), dtype="bf16")
    got = run(TORCH_W, x16, dtype="bf16")
    assert np.array_equal(got, want), float(np.max(np.abs(got - want)))


@case
def torch_outputs_typed():
    # bf16 out of bf16 storage: the storage's bits (the float32 path's
    # output is those bits widened)
    got = run(TORCH_W, TORCH_X.to(torch.bfloat16), dtype="bf16", out_dtype=torch.bfloat16)
    assert torch.is_tensor(got) and got.dtype == torch.bfloat16 and got.device.type == "cpu"
    assert torch.equal(got.view(torch.int16), torch.from_numpy(REF16).to(torch.bfloat16)
                       .view(torch.int16))
    # f32 storage, bf16 out: the float32 output converted (nearest even, as torch)
    got = run(TORCH_W, TORCH_X, out_dtype=torch.bfloat16)
    assert torch.equal(got.view(torch.int16),
                       torch.from_numpy(REF).to(torch.bfloat16).view(torch.int16))
    # float32 torch out: the numpy output's values
    got = run(TORCH_W, TORCH_X, out_device="cpu")
    assert got.dtype == torch.float32 and np.array_equal(got.numpy(), REF)


@case
def perturbed_typed_weight_differs():
    w = dict(TORCH_W)
    name = next(k for k in w if k.endswith(".weight") and w[k].dim() == 2)
    w[name] = w[name].clone()
    w[name][0, 0] += 0.5
    got = run(w, TORCH_X.to(torch.bfloat16), dtype="bf16")
    assert float(np.max(np.abs(got - REF16))) > 1e-3


@case
def cuda_ranks_cuda_tensors():
    if not torch.cuda.is_available():
        raise Skip("torch sees no GPU")
    why = dtpc._lib.library().dtpc_device_unavailable(1)
    if why:
        raise Skip(f"dtpc cannot compute on the GPU: {why.decode()}")
    xh = TORCH_X.to(torch.bfloat16)
    host = run(TORCH_W, xh, dtype="bf16", device="cuda", out_dtype=torch.bfloat16,
               out_device="cpu")
    w = {k: v.cuda() for k, v in TORCH_W.items()}
    got = run(w, xh.cuda(), dtype="bf16", device="cuda", out_dtype=torch.bfloat16,
              out_device="cuda")
    assert got.is_cuda and got.dtype == torch.bfloat16, (got.device, got.dtype)
    assert torch.equal(got.cpu().view(torch.int16), host.view(torch.int16))
    # on a stream of the caller's
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        got = run(w, xh.cuda(), dtype="bf16", device="cuda", out_dtype=torch.bfloat16,
                  out_device="cuda")
        got = got.cpu()
    assert torch.equal(got.view(torch.int16), host.view(torch.int16))


@case
def cuda_tensors():
    if not torch.cuda.is_available():
        raise Skip("torch sees no GPU")
    w = {k: v.cuda() for k, v in TORCH_W.items()}
    got = run(w, TORCH_X.cuda())
    assert np.array_equal(got, REF), float(np.max(np.abs(got - REF)))


print("checks done")
