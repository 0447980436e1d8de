"""Qwen-Image, prompt to image with true CFG, with the transformer on dtpc (Ulysses 2 x TP 2).

    # one process, 4 local ranks (threads); no torchrun
    PYTHONPATH=python python examples/python/qwenimage_pipeline.py --out qwenimage.png
    # one rank per process (as root: mpirun --allow-run-as-root); every process runs the
    # pipeline, rank 0 saves
    mpirun -np 4 env PYTHONPATH=python python examples/python/qwenimage_pipeline.py --mpi

As written it runs a tiny random-weight QwenImagePipeline (no download, a few seconds
on a CPU): the picture is the noise such weights make. The lines marked "real model"
are what Qwen-Image takes instead; the three dtpc lines stay the same. True CFG calls
the transformer twice a step (prompt, negative prompt); a negative prompt of another
length is another shape, compiled once at its first step.
"""
import argparse

import torch
from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, \
    QwenImagePipeline, QwenImageTransformer2DModel

import dtpc.torch


def tiny_pipeline():
    torch.manual_seed(0)
    transformer = QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16,
        num_attention_heads=4, joint_attention_dim=32, axes_dims_rope=(4, 6, 6))
    vae = AutoencoderKLQwenImage(base_dim=24, z_dim=4, dim_mult=[1, 2, 4], num_res_blocks=1,
                                 temperal_downsample=[False, True],
                                 latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
    return QwenImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae,
                             text_encoder=None, tokenizer=None, transformer=transformer)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi", action="store_true", help="a rank of mpirun (backend mpi)")
    ap.add_argument("--out", default="qwenimage.png")
    args = ap.parse_args()

    # real model:
    # pipe = QwenImagePipeline.from_pretrained("Qwen/Qwen-Image", torch_dtype=torch.bfloat16)
    pipe = tiny_pipeline()

    # the plan qwenimage_tp_usp of models/qwenimage.plan on 4 ranks
    dtpc.torch.parallelize(pipe, "qwenimage_tp_usp", mesh="ring = 1, ulysses = 2, tp = 2",
                           backend="mpi" if args.mpi else "local")

    # real model:
    # image = pipe("a coffee shop entrance with a chalkboard sign", negative_prompt=" ",
    #              true_cfg_scale=4.0, height=1328, width=1328, num_inference_steps=50).images[0]
    mask = torch.ones(1, 12, dtype=torch.long)
    mask[0, 10:] = 0  # the text encoder's padding
    image = pipe(prompt_embeds=torch.randn(1, 12, 32), prompt_embeds_mask=mask,
                 negative_prompt_embeds=torch.randn(1, 6, 32),
                 negative_prompt_embeds_mask=torch.ones(1, 6, dtype=torch.long), true_cfg_scale=4.0, height=64, width=96, num_inference_steps=4,
                 generator=torch.Generator().manual_seed(0)).images[0]
    if pipe.transformer.rank == 0:
        image.save(args.out)
        print(f"saved {args.out} ({image.width} x {image.height})")


if __name__ == "__main__":
    main()
