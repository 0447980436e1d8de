"""Flux, prompt to image, with the transformer on dtpc (Ring 2 x Ulysses 2).

    # one process, 4 local ranks (threads); no torchrun
    PYTHONPATH=python python examples/python/flux_pipeline.py --out flux.png
    # one rank per process (as root: mpirun --allow-run-as-root); every process runs the
    # pipeline, rank 0 saves
    mpirun -np 4 env PYTHONPATH=python python examples/python/flux_pipeline.py --mpi
    # one rank per process and GPU (4 GPUs), over NCCL: every process runs the pipeline
    PYTHONPATH=python torchrun --nproc-per-node 4 examples/python/flux_pipeline.py --torchrun

As written it runs a tiny random-weight FluxPipeline (no download, a few seconds on a
CPU): the picture is the noise such weights make. The lines marked "real model" are
what FLUX.1-dev takes instead; the three dtpc lines stay the same.
"""
import argparse

import torch
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, \
    FluxTransformer2DModel

import dtpc.torch


def tiny_pipeline():
    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(
        in_channels=16, num_layers=1, num_single_layers=2, attention_head_dim=16,
        num_attention_heads=4, joint_attention_dim=32, pooled_projection_dim=32,
        axes_dims_rope=[4, 4, 8])
    vae = AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(16, 16),
                        latent_channels=4, norm_num_groups=4, layers_per_block=1,
                        use_quant_conv=False, use_post_quant_conv=False,
                        shift_factor=0.0609, scaling_factor=1.5035)
    return FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=None,
                        tokenizer=None, text_encoder_2=None, tokenizer_2=None,
                        transformer=transformer)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi", action="store_true", help="a rank of mpirun (backend mpi)")
    ap.add_argument("--torchrun", action="store_true",
                    help="a rank of torchrun, on its GPU (backend torchrun)")
    ap.add_argument("--out", default="flux.png")
    args = ap.parse_args()

    # real model:
    # pipe = FluxPipeline.from_pretrained("black-forest-labs/FLUX.1-dev",
    #                                     torch_dtype=torch.bfloat16)
    pipe = tiny_pipeline()

    # the plan flux_usp of models/flux.plan, on 4 ranks; checked at the first shape
    dtpc.torch.parallelize(pipe, "flux_usp", mesh="ring = 2, ulysses = 2",
                           backend="mpi" if args.mpi else "torchrun" if args.torchrun
                           else "local")

    # real model:
    # image = pipe("a tiny astronaut hatching from an egg on the moon", height=1024,
    #              width=1024, guidance_scale=3.5, num_inference_steps=28).images[0]
    image = pipe(prompt_embeds=torch.randn(1, 16, 32), pooled_prompt_embeds=torch.randn(1, 32),
                 height=96, width=128, num_inference_steps=4,
                 generator=torch.Generator().manual_seed(0)).images[0]
    if pipe.transformer.rank == 0:
        image.save(args.out)
        print(f"saved {args.out} ({image.width} x {image.height})")


if __name__ == "__main__":
    main()
