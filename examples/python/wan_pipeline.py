"""Wan 2.1 text to video with the transformer on dtpc (Ring 2 x Ulysses 2).

    # one process, 4 local ranks (threads); no torchrun
    PYTHONPATH=python python examples/python/wan_pipeline.py --out wan.png
    # one rank per process (as root: mpirun --allow-run-as-root); every process runs the
    # pipeline, rank 0 saves
    mpirun -np 4 env PYTHONPATH=python python examples/python/wan_pipeline.py --mpi

As written it runs a tiny random-weight WanPipeline (no download, a few seconds on a
CPU) and saves the frames side by side in one PNG (the real model: export_to_video).
The lines marked "real model" are what Wan 2.1 T2V 14B takes instead; the three dtpc
lines stay the same. Wan 2.2 A14B's second transformer (transformer_2) is replaced
too.
"""
import argparse

import numpy as np
import torch
from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline, \
    WanTransformer3DModel
from PIL import Image

import dtpc.torch


def tiny_pipeline():
    torch.manual_seed(0)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=12, in_channels=16,
        out_channels=16, text_dim=32, freq_dim=256, ffn_dim=64, num_layers=2,
        cross_attn_norm=True, rope_max_seq_len=32)
    vae = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True])
    return WanPipeline(tokenizer=None, text_encoder=None, vae=vae, transformer=transformer,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi", action="store_true", help="a rank of mpirun (backend mpi)")
    ap.add_argument("--out", default="wan.png")
    args = ap.parse_args()

    # real model:
    # vae = AutoencoderKLWan.from_pretrained("Wan-AI/Wan2.1-T2V-14B-Diffusers", subfolder="vae",
    #                                        torch_dtype=torch.float32)
    # pipe = WanPipeline.from_pretrained("Wan-AI/Wan2.1-T2V-14B-Diffusers", vae=vae,
    #                                    torch_dtype=torch.bfloat16)
    pipe = tiny_pipeline()

    # the plan wan_usp of models/wan.plan on 4 ranks; each CFG branch is a call
    dtpc.torch.parallelize(pipe, "wan_usp", mesh="ring = 2, ulysses = 2",
                           backend="mpi" if args.mpi else "local")

    # real model:
    # frames = pipe("a cat walks on the grass, realistic", negative_prompt="blurry",
    #               height=480, width=832, num_frames=81, guidance_scale=5.0).frames[0]
    # export_to_video(frames, "wan.mp4", fps=16)   # from diffusers.utils
    frames = pipe(prompt_embeds=torch.randn(1, 12, 32), negative_prompt_embeds=torch.randn(1, 12, 32),
                  guidance_scale=5.0, height=64, width=64, num_frames=5, num_inference_steps=4,
                  generator=torch.Generator().manual_seed(0)).frames[0]
    if pipe.transformer.rank == 0:
        strip = np.concatenate(list(frames), axis=1)  # [H, F * W, 3] in [0, 1]
        Image.fromarray((strip * 255).round().astype(np.uint8)).save(args.out)
        print(f"saved {args.out}: {len(frames)} frames of {frames.shape[2]} x {frames.shape[1]}")


if __name__ == "__main__":
    main()
