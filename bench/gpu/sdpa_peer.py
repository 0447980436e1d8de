#!/usr/bin/env python3
"""sdpa_peer.py: PyTorch's scaled_dot_product_attention on the cases of
attn_bench.c, as the figure to compare kc_attention with.

bf16, layout [B, H, S, D], B = 1, H * D = 3072, S = 1024 .. 16384; flops =
4 B H S^2 D. Each case is timed with the default backend selection and
with the flash and cuDNN backends forced (torch.nn.attention.sdpa_kernel);
a backend PyTorch refuses for the case prints `unavailable`. The default
selection's backend is named from the kernels the profiler sees it launch.
Timing as in attn_bench.c: 3 warm-up calls, then the median of 10, each
timed by its own pair of CUDA events.

One line per case and backend:
  sdpa bf16 d=128 s=4096 b=1 h=24 backend=default(flash) tflops=... ms=...
"""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

WARMUP, REPS = 3, 10
SEQS = (1024, 2048, 4096, 8192, 16384)
DIMS = (64, 128)
HD = 3072


def median_ms(fn):
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(REPS)]
    for start, stop in events:
        start.record()
        fn()
        stop.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(stop) for start, stop in events)


def default_backend(q, k, v):
    """The backend the default selection ran, from its kernels' names."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(q, k, v)
        torch.cuda.synchronize()
    names = " ".join(e.key.lower() for e in prof.key_averages())
    for tag, label in (("cudnn", "cudnn"), ("flash", "flash"), ("fmha", "efficient"),
                       ("efficient", "efficient"), ("cutlass", "efficient")):
        if tag in names:
            return label
    return "math"


def main():
    if not torch.cuda.is_available():
        print("# SKIP no CUDA device")
        return 77
    torch.manual_seed(0)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    for d in DIMS:
        h = HD // d
        for s in SEQS:
            q, k, v = (torch.rand(1, h, s, d, device="cuda", dtype=torch.bfloat16) * 2 - 1
                       for _ in range(3))
            flops = 4.0 * h * s * s * d
            try:
                label = f"default({default_backend(q, k, v)})"
            except Exception as e:  # the profiler is only for the label
                label = "default(unknown)"
                print(f"# profiler: {e}", file=sys.stderr)
            runs = [(label, None), ("flash", SDPBackend.FLASH_ATTENTION),
                    ("cudnn", SDPBackend.CUDNN_ATTENTION)]
            for name, backend in runs:
                def call():
                    F.scaled_dot_product_attention(q, k, v)

                try:
                    if backend is None:
                        ms = median_ms(call)
                    else:
                        with sdpa_kernel(backend):
                            ms = median_ms(call)
                except RuntimeError as e:
                    print(f"sdpa bf16 d={d} s={s} b=1 h={h} backend={name} unavailable")
                    print(f"# {name}: {str(e).splitlines()[0]}", file=sys.stderr)
                    continue
                print(f"sdpa bf16 d={d} s={s} b=1 h={h} backend={name} "
                      f"tflops={flops / ms * 1e-9:.1f} ms={ms:.3f}", flush=True)
            del q, k, v
    return 0


if __name__ == "__main__":
    sys.exit(main())
