"""flux_typed.py — FluxPipeline on one GPU with torch CUDA tensors in bf16
(tests/gpu/run.sh): a Flux transformer of the real width (24 heads of 128,
joint_attention_dim 4096, pooled 768; 2 double and 4 single blocks), random
weights, 512 x 512 (img_seq 1024, txt_seq 128), 4 steps.

Checks (exit 0 when all pass, 1 on a failure, 77 when torch, diffusers or a
GPU is missing):
  image     dtpc.torch (flux_tp, tp = 1, device cuda, bf16) against the stock
            pipeline in eager bf16: max |diff| of the images <= 2e-2 (and the
            image not flat)
  no-copy   one steady-state step of the dtpc transformer under
            torch.profiler (CUPTI sees every stream of the process, dtpc's
            own included): no Memcpy HtoD / DtoH, and dtpc's kernels were
            seen; the control: the same step with its inputs given from
            host memory shows the host copies
  time      per-step ms (the transformer's forward on the pipeline's own
            arguments, median of 10): dtpc, diffusers eager, torch.compile
            (compile time excluded; not timed past a 120 s compile)
Prints "time: dtpc X ms, eager Y ms, compile Z ms" for the table."""
import os
import statistics
import sys
import time


def skip(why):
    print(f"skip: {why}")
    sys.exit(77)


try:
    import numpy as np
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, \
        FluxTransformer2DModel
except ImportError as e:
    skip(f"needs torch and diffusers: {e}")
if not torch.cuda.is_available():
    skip("torch sees no GPU")

import dtpc.torch  # noqa: E402

DEV, DT = "cuda", torch.bfloat16
STEPS, H = 4, 512
failed = []


def check(name, ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {what}")
    if not ok:
        failed.append(name)


def pipeline():
    torch.manual_seed(0)
    with torch.device(DEV):  # initialised on the GPU: 1.2 B parameters
        tr = FluxTransformer2DModel(in_channels=64, num_layers=2, num_single_layers=4,
                                    attention_head_dim=128, num_attention_heads=24,
                                    joint_attention_dim=4096, pooled_projection_dim=768,
                                    guidance_embeds=False, axes_dims_rope=[16, 56, 56])
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=16,
                        block_out_channels=(32, 32, 32, 32),
                        down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, norm_num_groups=8,
                        layers_per_block=1, use_quant_conv=False, use_post_quant_conv=False,
                        shift_factor=0.1159, scaling_factor=0.3611)
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=None,
                        tokenizer=None, text_encoder_2=None, tokenizer_2=None, transformer=tr)
    return pipe.to(DEV, DT)


def prompt():
    g = torch.Generator().manual_seed(1)
    return dict(prompt_embeds=torch.randn(1, 128, 4096, generator=g).to(DEV, DT),
                pooled_prompt_embeds=torch.randn(1, 768, generator=g).to(DEV, DT))


def image(pipe, calls=None):
    """The pipeline's image (numpy); calls: a list the transformer's arguments
    of each step are appended to."""
    hook = None
    if calls is not None:
        hook = pipe.transformer.register_forward_pre_hook(
            lambda m, a, kw: calls.append(kw), with_kwargs=True)
    try:
        out = pipe(**prompt(), height=H, width=H, num_inference_steps=STEPS, guidance_scale=0,
                   output_type="np", generator=torch.Generator().manual_seed(0))
    finally:
        if hook is not None:
            hook.remove()
    return np.asarray(out.images, dtype=np.float32)


def step_ms(fn, n=10):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def host_copies(fn):
    """(host copies, kernels) CUPTI saw during fn()."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    copies = kernels = 0
    for e in prof.events():
        name = e.name
        if "Memcpy HtoD" in name or "Memcpy DtoH" in name:
            copies += 1
        elif getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA"):
            kernels += 1
    return copies, kernels


def main():
    # the stock pipeline, eager bf16: its image, a step's arguments, its step time
    pipe = pipeline()
    calls = []
    ref = image(pipe, calls)
    args = dict(calls[-1])
    stock = pipe.transformer
    with torch.no_grad():
        eager_ms = step_ms(lambda: stock(**args))

    # torch.compile of the same transformer (compile time excluded, bounded)
    compile_ms = None
    try:
        compiled = torch.compile(stock)
        t0 = time.perf_counter()
        with torch.no_grad():
            compiled(**args)
            torch.cuda.synchronize()
            if time.perf_counter() - t0 < 120:
                compile_ms = step_ms(lambda: compiled(**args))
    except Exception as e:  # a torch without a working inductor here: reported, not failed
        print(f"torch.compile: {type(e).__name__}: {e}")

    # dtpc.torch: the same weights (the stock transformer kept for the above)
    dtpc.torch.parallelize(pipe, "flux_tp", mesh="tp = 1", device="cuda", keep_weights=True)
    got = image(pipe)
    err = float(np.abs(got - ref).max())
    check("image", err <= 2e-2 and ref.std() > 1e-2,
          f"max |dtpc - diffusers eager| {err:.2e} (tol 2e-2), image std {ref.std():.3f}")

    tr = pipe.transformer
    with torch.no_grad():
        dtpc_ms = step_ms(lambda: tr(**args))
        copies, kernels = host_copies(lambda: tr(**args))
        check("no-copy", copies == 0 and kernels > 10,
              f"a steady-state dtpc step: {copies} host copies, {kernels} GPU activities")
        host_args = {k: v.cpu() if torch.is_tensor(v) else v for k, v in args.items()}
        copies, _ = host_copies(lambda: tr(**host_args))
        check("no-copy-control", copies > 0,
              f"the same step from host memory: {copies} host copies (must be > 0)")
    out = tr(**args)[0]  # the pipeline's own call: return_dict=False
    check("outputs", out.is_cuda and out.dtype == DT, f"the output: {out.device}, {out.dtype}")
    print(f"time: dtpc {dtpc_ms:.2f} ms, eager {eager_ms:.2f} ms, compile "
          f"{'-' if compile_ms is None else f'{compile_ms:.2f}'} ms (per step, Flux width, "
          f"2+4 blocks, img_seq 1024, txt_seq 128, bf16)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
