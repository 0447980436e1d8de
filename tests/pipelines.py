"""pipelines.py — dtpc.torch against diffusers' own pipelines (tests/pipelines.sh runs it).

Tiny random-weight FluxPipeline (dev with guidance, schnell with true CFG),
QwenImagePipeline (true CFG: two calls, text masks, the negative prompt of another
length), WanPipeline (CFG: two calls), WanImageToVideoPipeline and ChronoEditPipeline
(a tiny CLIP image encoder: the image path), HeliosPipeline (two chunks, the second
over the first's history), LTXPipeline and LTX2Pipeline (batched CFG: batch
2; LTX-2's frames and waveform both),
components built from small configs under torch.manual_seed, no text encoders
(prompt_embeds passed directly), 2 steps. Each family's stock pipeline makes the
reference image (output_type="np", float32); each case replaces the transformer
with dtpc.torch.parallelize(pipe, PLAN, mesh=..., context=...) and runs the same
pipeline call.

Tolerance: max |image - stock image| <= 1e-4 (float32; the images are in [0, 1]).
dtpc and torch compute in float32 in different orders: the transformer outputs
differ by a few ulps (tests/models.sh: 1e-5 normwise), which the scheduler and the
VAE carry into the image (measured: 1e-7 to 7e-7); the perturbed weights below move
it by 5e-4 to 0.2. bf16: 2e-2 (both sides round to bf16 in different places; the
bf16 images themselves are quantized to 2^-7 near 1).

Negative controls: one weight perturbed in dtpc's copy only (weights= a mapping)
must move each family's image beyond the tolerance (Wan's and LTX's in bf16 too;
the image families' through the image path, Helios' through the history's);
every reference image must vary (std > 1e-2: a saturated VAE would make every
comparison pass).

Launch mode 2: one mpirun -np 2 runs a mesh of four families, each rank the whole
pipeline; each rank's image against the stock one, and the ranks' images equal.

Prints "ok NAME ...", "FAIL NAME ..." or "skip NAME: WHY" per check; with --list
only the names (no torch needed). --mpi-child runs MPI_CASES as a rank of mpirun.
`pipelines.py FAMILY ... [mpi]` runs only those families' checks (and the MPI
cases with "mpi"), for work on one family; pipelines.sh runs them all.
"""
import copy
import os
import sys
import tempfile
import time

TOL = 1e-4
TOL_BF16 = 2e-2
# each bf16 transformer call of a pipeline against the stock bf16 call on the same
# inputs, normwise: both round to bf16 (2^-8 relative) in different places, measured
# 5e-3 to 6e-3 apart (each as far from a float64 forward); a timestep rounded to bf16
# (999 -> 1000, 833 -> 832) moves ChronoEdit's calls by 3e-2 to 4e-2
TOL_BF16_CALL = 1.5e-2
AG = 'rotate_method = "allgather"'
AA = 'rotate_method = "alltoall"'

# family -> [(case, plan, mesh, context)]: each mesh through the mesh= / context=
# overrides of a plan of the model's file
CASES = {
    "flux_dev": [
        ("tp2", "flux_tp", "tp = 2", None),
        ("tp4", "flux_tp", "tp = 4", None),
        ("ulysses2", "flux_ulysses", "ulysses = 2", None),
        ("ulysses4", "flux_ulysses", "ulysses = 4", None),
        ("ring2-allgather", "flux_ring", "ring = 2", AG),
        ("ring4-alltoall", "flux_ring", "ring = 4", AA),
        ("usp", "flux_usp", "ring = 2, ulysses = 2", None),
        ("ulysses2xtp2", "flux_tp_usp", "ulysses = 2, tp = 2", None),
        ("ring2xulysses2xtp2", "flux_tp_usp", "ring = 2, ulysses = 2, tp = 2", None),
    ],
    # 3 heads, 15 image and 7 text tokens: the anything modes
    "flux_schnell": [
        ("ulysses-any2", "flux_ulysses_anything", "ulysses = 2", None),
        ("ring-any4-alltoall", "flux_ring_anything", "ring = 4", None),
        ("ring-any2-alltoall", "flux_ring_anything", "ring = 2", None),
        ("ring-any3-allgather", "flux_ring_anything", "ring = 3", "ring_anything = true, " + AG),
    ],
    # 3 heads, 15 image tokens, 7 and 5 text tokens
    "qwenimage": [
        ("tp3", "qwenimage_tp", "tp = 3", None),
        ("ulysses-any2", "qwenimage_ulysses_anything", "ulysses = 2", None),
        ("ring-any2-alltoall", "qwenimage_ring_anything", "ring = 2", "ring_anything = true, " + AA),
        ("ring-any3-allgather", "qwenimage_ring_anything", "ring = 3", None),
    ],
    # 3 heads, 3 x 2 x 3 = 18 video tokens, 7 text tokens
    "wan": [
        ("ring3-alltoall", "wan_ring", "ring = 3", AA),
        ("ring2-allgather", "wan_ring", "ring = 2", AG),
        ("ulysses3", "wan_ulysses", "ulysses = 3", None),
        ("usp-ring2xulysses3", "wan_usp", "ring = 2, ulysses = 3", None),
        ("ulysses-any2", "wan_ulysses_anything", "ulysses = 2", None),
        ("ffn-tp2xulysses3", "wan_ffn_tp_ulysses", "ulysses = 3, tp = 2", None),
    ],
    # Wan 2.2 TI2V's per-token timesteps (WanPipeline(expand_timesteps=True)): the
    # same tiny Wan, 18 tokens, the timesteps split with them (wan_ti2v_* plans)
    "wan_ti2v": [
        ("usp-ring2xulysses3", "wan_ti2v_usp", "ring = 2, ulysses = 3", None),
        ("ulysses-any2", "wan_ti2v_ulysses_anything", "ulysses = 2", None),
        ("ring-any4", "wan_ti2v_ring_anything", "ring = 4", "ring_anything = true, " + AG),
    ],
    # WanImageToVideoPipeline, Wan 2.1 I2V: 2 heads, 18 video tokens, the image
    # encoder's 5 tokens before 512 text tokens in attn2
    "wan_i2v": [
        ("1rank", "wan_single", None, None),
        ("ulysses2", "wan_ulysses", "ulysses = 2", None),
        ("ring2-allgather", "wan_ring", "ring = 2", AG),
        ("ring3-alltoall", "wan_ring", "ring = 3", AA),
        ("usp-ring3xulysses2", "wan_usp", "ring = 3, ulysses = 2", None),
        ("ffn-tp2xulysses2", "wan_ffn_tp_ulysses", "ulysses = 2, tp = 2", None),
        ("ring-any4", "wan_ring_anything", "ring = 4", None),
    ],
    # ChronoEditPipeline's edit: wan_i2v's transformer as ChronoEdit's, 2 latent frames
    # (the image and its edit, ChronoEdit's RoPE), 2 x 2 x 3 = 12 tokens
    "chronoedit": [
        ("1rank", "chronoedit_single", None, None),
        ("ulysses2", "chronoedit_ulysses", "ulysses = 2", None),
        ("ring2-allgather", "chronoedit_ring", "ring = 2", None),
        ("ring3-alltoall", "chronoedit_ring_alltoall", "ring = 3", None),
        ("usp", "chronoedit_usp", "ring = 2, ulysses = 2", None),
        ("ring-any5", "chronoedit_ring_anything", "ring = 5", None),
    ],
    # HeliosPipeline: two chunks of 64 tokens, each after its 4 long, 8 mid and 64 short
    # history tokens (140 in attn1), 4 heads
    "helios": [
        ("1rank", "helios_single", None, None),
        ("ulysses2", "helios_ulysses", "ulysses = 2", None),
        ("ring2-allgather", "helios_ring", "ring = 2", None),
        ("ring4-alltoall", "helios_ring_alltoall", "ring = 4", None),
        ("usp", "helios_usp", "ring = 2, ulysses = 2", None),
        ("ring-any3", "helios_ring_anything", "ring = 3", None),
        ("sequence-ulysses4", "helios_usp_sequence", "ring = 1, ulysses = 4", None),
    ],
    # 4 heads, 3 x 8 x 8 = 192 video tokens, 8 text tokens (2 masked), batch 2 (CFG)
    "ltx": [
        ("tp2", "ltx_tp", "tp = 2", None),
        ("ulysses2", "ltx_ulysses", "ulysses = 2", None),
        ("ring2-alltoall", "ltx_ring", "ring = 2", AA),
        ("usp", "ltx_usp", "ring = 2, ulysses = 2", None),
        ("ring2xtp2", "ltx_tp_usp", "ring = 2, ulysses = 1, tp = 2", None),
        ("cfg2xulysses2", "ltx_usp", "cfg = 2, ulysses = 2", None),
    ],
    # LTX2Pipeline (batched CFG: batch 2; video and audio): tests/fixtures/models/ltx2's
    # transformer (4 heads, audio 2), 2 x 8 x 12 = 192 video tokens, 9 audio latents,
    # 8 text tokens (2 padding); the frames and the waveform compared
    "ltx2": [
        ("ulysses2", "ltx2_ulysses", "ulysses = 2", None),
        ("usp", "ltx2_usp", "ring = 2, ulysses = 2", None),
    ],
    # Flux2Pipeline (guidance-distilled): 3 heads, 5 x 3 = 15 image tokens, 7 text
    # tokens: the anything modes and tp over the packed projections
    "flux2": [
        ("tp3", "flux2_tp", "tp = 3", None),
        ("ulysses-any2", "flux2_ulysses_anything", "ulysses = 2", None),
        ("ring-any3-alltoall", "flux2_ring_anything", "ring = 3", "ring_anything = true, " + AA),
        ("ring-any2-allgather", "flux2_ring_anything", "ring = 2", "ring_anything = true, " + AG),
    ],
    # StableDiffusion3Pipeline, CFG batched (negative and positive in one call of
    # batch 2): 3 heads, an 8 x 10 latent = 4 x 5 = 20 image tokens, 7 text tokens
    "sd3": [
        ("tp3", "sd3_tp", "tp = 3", None),
        ("ulysses-any2", "sd3_ulysses_anything", "ulysses = 2", None),
        ("ring-any3-alltoall", "sd3_ring_anything", "ring = 3", "ring_anything = true, " + AA),
        ("cfg2xring-any2", "sd3_ring_anything", "cfg = 2, ring = 2", None),
        ("ring-any2xtp3", "sd3_tp_usp", "ring = 2, ulysses = 1, tp = 3", "ring_anything = true"),
    ],
}
# the weight each family's negative control perturbs (in dtpc's copy only)
PERTURB = {"flux_dev": "single_transformer_blocks.1.attn.norm_k.weight",
           "flux_schnell": "transformer_blocks.0.attn.to_k.weight",
           "qwenimage": "transformer_blocks.1.img_mlp.net.2.weight",
           "wan": "blocks.1.attn1.to_out.0.weight",
           "wan_ti2v": "blocks.1.attn1.to_out.0.weight",
           # the image's path: the image tokens' bias (a uniform shift of add_k_proj's
           # weight would not do: the embedder's last LayerNorm leaves each token's
           # channels summing to 0)
           "wan_i2v": "condition_embedder.image_embedder.norm2.bias",
           "chronoedit": "condition_embedder.image_embedder.norm2.bias",
           # the history's path: the amplification of attn1's history keys
           "helios": "blocks.0.attn1.history_key_scale",
           "ltx": "transformer_blocks.0.attn2.to_v.weight",
           "ltx2": "transformer_blocks.0.audio_attn1.to_v.weight",
           "sd3": "transformer_blocks.0.attn.to_add_out.weight",
           "flux2": "single_transformer_blocks.1.attn.to_qkv_mlp_proj.weight"}
# the cache_context names of a run's calls (2 steps): which CFG branch each call is
CACHE_NAMES = {"flux_dev": ["cond"] * 2, "flux_schnell": ["cond", "uncond"] * 2,
               "qwenimage": ["cond", "uncond"] * 2, "wan": ["cond", "uncond"] * 2,
               "wan_ti2v": ["cond", "uncond"] * 2, "wan_i2v": ["cond", "uncond"] * 2,
               # ChronoEditPipeline calls its transformer outside any cache_context
               "chronoedit": [None] * 4, "helios": ["cond", "uncond"] * 4,
               "ltx": ["cond_uncond"] * 2, "ltx2": ["cond_uncond"] * 2, "sd3": [None] * 2,
               "flux2": [None] * 2}
# the bf16 comparison's control where the perturbed weight moves the image past 2e-2
BF16_CONTROL = ("wan", "ltx")
# the families whose bf16 calls are compared one by one too (bf16_calls): ChronoEdit's
# frames hardly move with its transformer's bf16 error (4e-5 from float32), so its
# image check alone would pass a timestep rounded to bf16 (1.95e-2 at 2e-2)
BF16_CALLS = ("chronoedit", "helios")
# launch mode 2, in one mpirun -np 2
MPI_CASES = [("flux_dev", "ulysses2-mpi", "flux_ulysses", "ulysses = 2", None),
             ("qwenimage", "ring-any2-mpi", "qwenimage_ring_anything", "ring = 2", None),
             ("wan", "ring2-mpi", "wan_ring", "ring = 2", AA),
             ("ltx", "cfg2-mpi", "ltx_tp", "cfg = 2", None),
             ("sd3", "cfg2-mpi", "sd3_tp", "cfg = 2", None),
             ("flux2", "ulysses-any2-mpi", "flux2_ulysses_anything", "ulysses = 2", None)]
PERSIST = ["persist-second-step", "persist-second-resolution"]
REFUSALS = ["refuse-unknown-plan", "refuse-plan-unnamed", "refuse-shape", "refuse-lora-scale",
            "refuse-controlnet", "refuse-unknown-class", "refuse-ip-adapter-embeds",
            "refuse-backend", "refuse-weights-missing"]
OTHER = ["flux_dev-weights-released", "flux_dev-from-folder", "wan22-two-transformers",
         "chronoedit-temporal-reasoning"]
EXAMPLES = ["flux", "qwenimage", "wan"]


def names():
    out = []
    for fam, cases in CASES.items():
        out.append(f"{fam}-reference")
        out += [f"{fam}-{c[0]}" for c in cases]
        out += [f"{fam}-cache-context", f"{fam}-control-perturbed", f"{fam}-bf16-{cases[0][0]}"]
        out += [f"{fam}-bf16-control-perturbed"] if fam in BF16_CONTROL else []
        out += [f"{fam}-bf16-calls", f"{fam}-bf16-calls-control-rounded-timestep"] \
            if fam in BF16_CALLS else []
    return (out + OTHER + REFUSALS + PERSIST + [f"example-{e}" for e in EXAMPLES]
            + [f"{c[0]}-{c[1]}" for c in MPI_CASES])


# ---- the pipelines ---------------------------------------------------------------------

def build(fam, dtype=None):
    """(pipe, call kwargs) of a family: random weights under a fixed seed."""
    import torch
    import diffusers as d
    torch.manual_seed(0)
    if fam in ("flux_dev", "flux_schnell"):
        dev = fam == "flux_dev"
        tr = d.FluxTransformer2DModel(
            patch_size=1, in_channels=4, num_layers=1 if dev else 2, num_single_layers=2 if dev else 1,
            attention_head_dim=8, num_attention_heads=4 if dev else 3, joint_attention_dim=24,
            pooled_projection_dim=20, axes_dims_rope=[2, 2, 4], guidance_embeds=dev)
        vae = d.AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(4,),
                              layers_per_block=1, latent_channels=1, norm_num_groups=1,
                              use_quant_conv=False, use_post_quant_conv=False,
                              shift_factor=0.0609, scaling_factor=1.5035)
        pipe = d.FluxPipeline(scheduler=d.FlowMatchEulerDiscreteScheduler(), vae=vae,
                              text_encoder=None, tokenizer=None, text_encoder_2=None,
                              tokenizer_2=None, transformer=tr)
        if dev:  # 8 x 12 pixels: 4 x 6 = 24 image tokens, 8 text tokens, guidance 3.5
            kw = dict(prompt_embeds=torch.randn(1, 8, 24), pooled_prompt_embeds=torch.randn(1, 20),
                      height=8, width=12, guidance_scale=3.5)
        else:  # 2 prompts, 6 x 10 pixels: 15 image tokens, 7 text; true CFG (two calls)
            kw = dict(prompt_embeds=torch.randn(2, 7, 24), pooled_prompt_embeds=torch.randn(2, 20),
                      negative_prompt_embeds=torch.randn(2, 7, 24),
                      negative_pooled_prompt_embeds=torch.randn(2, 20), true_cfg_scale=2.0,
                      height=6, width=10)
    elif fam == "qwenimage":
        tr = d.QwenImageTransformer2DModel(
            patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=8,
            num_attention_heads=3, joint_attention_dim=16, guidance_embeds=False,
            axes_dims_rope=(2, 2, 4))
        vae = d.AutoencoderKLQwenImage(base_dim=24, z_dim=4, dim_mult=[1, 2, 4], num_res_blocks=1,
                                       temperal_downsample=[False, True],
                                       latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
        pipe = d.QwenImagePipeline(scheduler=d.FlowMatchEulerDiscreteScheduler(), vae=vae,
                                   text_encoder=None, tokenizer=None, transformer=tr)
        mask = torch.ones(1, 7, dtype=torch.long)
        mask[0, 5:] = 0
        # 24 x 40 pixels: 3 x 5 = 15 patches; 7 text tokens (2 padding), 5 negative ones
        kw = dict(prompt_embeds=torch.randn(1, 7, 16), prompt_embeds_mask=mask,
                  negative_prompt_embeds=torch.randn(1, 5, 16),
                  negative_prompt_embeds_mask=torch.ones(1, 5, dtype=torch.long),
                  true_cfg_scale=3.0, height=24, width=40)
    elif fam in ("wan", "wan22", "wan_ti2v"):
        vae = d.AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                                 temperal_downsample=[False, True, True])
        tr = d.WanTransformer3DModel(
            patch_size=(1, 2, 2), num_attention_heads=3, attention_head_dim=12, in_channels=16,
            out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32, num_layers=2,
            cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=32)
        # Wan 2.2 A14B: transformer_2 below the boundary's timestep (another seed's weights)
        tr2 = d.WanTransformer3DModel(**tr.config) if fam == "wan22" else None
        pipe = d.WanPipeline(tokenizer=None, text_encoder=None, vae=vae, transformer=tr,
                             transformer_2=tr2, boundary_ratio=0.5 if tr2 else None,
                             scheduler=d.FlowMatchEulerDiscreteScheduler(shift=7.0),
                             expand_timesteps=fam == "wan_ti2v")
        # 9 frames of 32 x 48: latent 3 x 4 x 6, 3 x 2 x 3 = 18 tokens; CFG (two calls)
        kw = dict(prompt_embeds=torch.randn(1, 7, 32), negative_prompt_embeds=torch.randn(1, 7, 32),
                  guidance_scale=4.0, height=32, width=48, num_frames=9)
    elif fam in ("wan_i2v", "chronoedit"):
        vae = d.AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                                 temperal_downsample=[False, True, True])
        # Wan 2.1 I2V's conditioning: the image encoder's tokens (image_dim) through the
        # image embedder and attn2's added k / v (added_kv_proj_dim = the inner dim), the
        # VAE's latents of the image and 4 mask channels concatenated on channels
        # (in_channels 16 + 4 + 16); 2 heads x 12, so that ulysses 2 needs no padding
        cls = d.WanTransformer3DModel if fam == "wan_i2v" else d.ChronoEditTransformer3DModel
        tr = cls(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                 in_channels=36, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32,
                 num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                 rope_max_seq_len=32, image_dim=10, added_kv_proj_dim=24)
        # a tiny CLIP image encoder: the pipelines refuse image_embeds beside the image
        # they also need (check_inputs: "Cannot forward both"), so the encoder path runs;
        # its penultimate layer's 2 x 2 patches and class token: 5 tokens of image_dim
        from transformers import CLIPImageProcessorPil, CLIPVisionConfig, CLIPVisionModel
        enc = CLIPVisionModel(CLIPVisionConfig(hidden_size=10, intermediate_size=16,
                                               num_hidden_layers=2, num_attention_heads=2,
                                               image_size=14, patch_size=7))
        proc = CLIPImageProcessorPil(size={"shortest_edge": 14},
                                     crop_size={"height": 14, "width": 14})
        parts = dict(tokenizer=None, text_encoder=None, image_encoder=enc, image_processor=proc,
                     vae=vae, transformer=tr)
        if fam == "wan_i2v":
            pipe = d.WanImageToVideoPipeline(
                scheduler=d.FlowMatchEulerDiscreteScheduler(shift=7.0), **parts)
        else:
            # ChronoEdit's scheduler (flow UniPC, the model card's): temporal reasoning
            # trims the multistep history it keeps
            pipe = d.ChronoEditPipeline(scheduler=d.UniPCMultistepScheduler(
                prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0), **parts)
        from PIL import Image
        g = torch.Generator().manual_seed(2)
        img = Image.fromarray(torch.randint(0, 256, (32, 48, 3), generator=g,
                                            dtype=torch.uint8).numpy())
        # 512 text tokens, as the pipelines pad them: the processor splits the context at
        # shape[1] - 512, so fewer would leave the image attention no keys. 9 frames
        # (ChronoEdit: 5, its edit) of 32 x 48: latent 3 (2) x 4 x 6, 18 (12) tokens.
        # Guidance 1.5: at 4 this tiny model's frames swing with the bf16 rounding (the
        # stock bf16 frames 5e-2 from its float32 ones, dtpc's bf16 0.15 from them with
        # each call within 5e-3 of the stock bf16 call, normwise)
        kw = dict(image=img, prompt_embeds=torch.randn(1, 512, 32),
                  negative_prompt_embeds=torch.randn(1, 512, 32), guidance_scale=1.5,
                  height=32, width=48, num_frames=9 if fam == "wan_i2v" else 5)
    elif fam == "helios":
        import json
        here = os.path.dirname(os.path.abspath(__file__))
        cfg = json.load(open(os.path.join(here, "fixtures", "models", "helios_history",
                                          "transformer", "config.json")))
        # tests/fixtures/models/helios_history's transformer (4 heads x 8, memory patches,
        # keys amplified per head) on the Wan VAE's 16 latent channels
        cfg = dict({k: v for k, v in cfg.items() if not k.startswith("_")}, in_channels=16,
                   out_channels=16)
        # base_dim 8: at 3 the decoder's upsampling blocks have one channel (3 // 2), whose
        # RMS norm (F.normalize over the channels) is sign(x): latents moved by 1e-4 (a
        # bf16 rounding) either left the frames alone or flipped a sign, moving them by
        # 9e-3 to 4e-2 (the stock bf16 frames were 9.0e-3 from float32 by one such flip,
        # dtpc's 3.5e-2 by another, with every call as close). At 8 the decode is smooth:
        # latents moved by 4e-3 move the frames by 4e-3. The VAE is drawn first.
        vae = d.AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                                 temperal_downsample=[False, True, True])
        tr = d.HeliosTransformer3DModel(**cfg)
        # HeliosPipeline's one-stage schedule (the pyramid's stages are
        # HeliosPyramidPipeline's), shifted by the chunk's token count (mu)
        pipe = d.HeliosPipeline(tokenizer=None, text_encoder=None, vae=vae,
                                scheduler=d.HeliosScheduler(stages=1, use_dynamic_shifting=True),
                                transformer=tr)
        # 64 x 128 pixels: latent 8 x 16; chunks of 2 latent frames (5 pixel frames), 10
        # frames: two chunks, the second over the first's history. history_sizes [8, 2, 1]:
        # long 8 frames (4 x 8 x 8 patches: 4 tokens), mid 2 (8), short 1 + 1 with
        # keep_first_frame's prefix (64), before the chunk's 64: 140 tokens
        kw = dict(prompt_embeds=torch.randn(1, 7, 12), negative_prompt_embeds=torch.randn(1, 7, 12),
                  guidance_scale=1.5, height=64, width=128, num_frames=10,
                  num_latent_frames_per_chunk=2, history_sizes=[8, 2, 1])
    elif fam == "ltx":
        tr = d.LTXVideoTransformer3DModel(
            in_channels=8, out_channels=8, patch_size=1, patch_size_t=1, num_attention_heads=4,
            attention_head_dim=8, cross_attention_dim=32, num_layers=1, caption_channels=32)
        vae = d.AutoencoderKLLTXVideo(
            in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8, 8, 8, 8),
            decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
            decoder_layers_per_block=(1, 1, 1, 1, 1),
            spatio_temporal_scaling=(True, True, False, False),
            decoder_spatio_temporal_scaling=(True, True, False, False),
            decoder_inject_noise=(False, False, False, False, False),
            upsample_residual=(False, False, False, False), upsample_factor=(1, 1, 1, 1),
            timestep_conditioning=False, patch_size=1, patch_size_t=1, encoder_causal=True,
            decoder_causal=False)
        pipe = d.LTXPipeline(scheduler=d.FlowMatchEulerDiscreteScheduler(), vae=vae,
                             text_encoder=None, tokenizer=None, transformer=tr)
        mask = torch.ones(1, 8)
        mask[0, 6:] = 0
        # 9 frames of 32 x 32: latent 3 x 8 x 8 = 192 tokens; batched CFG (batch 2)
        kw = dict(prompt_embeds=torch.randn(1, 8, 32), prompt_attention_mask=mask,
                  negative_prompt_embeds=torch.randn(1, 8, 32),
                  negative_prompt_attention_mask=torch.ones(1, 8), guidance_scale=3.0,
                  height=32, width=32, num_frames=9)
    elif fam == "ltx2":
        import json
        from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors
        from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder
        here = os.path.dirname(os.path.abspath(__file__))
        cfg = json.load(open(os.path.join(here, "fixtures", "models", "ltx2", "transformer",
                                          "config.json")))
        # the pipeline denoises what the transformer returns: out = in channels
        cfg = dict({k: v for k, v in cfg.items() if not k.startswith("_")}, out_channels=8,
                   audio_out_channels=6)
        tr = d.LTX2VideoTransformer3DModel(**cfg)
        vae = d.AutoencoderKLLTX2Video(
            in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8, 8, 8, 8),
            decoder_block_out_channels=(8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
            decoder_layers_per_block=(1, 1, 1, 1), patch_size=1,
            upsample_residual=(False, False, False), upsample_factor=(1, 1, 1))
        # 2 latent channels x 12 / 4 mel bins = the transformer's 6 audio channels
        avae = d.AutoencoderKLLTX2Audio(base_channels=6, output_channels=2, ch_mult=(1, 2),
                                        num_res_blocks=1, in_channels=2, latent_channels=2,
                                        mel_bins=12)
        conn = LTX2TextConnectors(
            caption_channels=8, text_proj_in_factor=2, video_connector_num_attention_heads=2,
            video_connector_attention_head_dim=4, video_connector_num_layers=1,
            video_connector_num_learnable_registers=None, audio_connector_num_attention_heads=2,
            audio_connector_attention_head_dim=4, audio_connector_num_layers=1,
            audio_connector_num_learnable_registers=None)
        voc = LTX2Vocoder(in_channels=24, hidden_channels=8, out_channels=2,
                          upsample_kernel_sizes=[4, 4], upsample_factors=[2, 2],
                          resnet_kernel_sizes=[3], resnet_dilations=[[1]],
                          output_sampling_rate=16000)
        pipe = d.LTX2Pipeline(scheduler=d.FlowMatchEulerDiscreteScheduler(), vae=vae,
                              audio_vae=avae, text_encoder=None, tokenizer=None,
                              connectors=conn, transformer=tr, vocoder=voc)
        mask = torch.ones(1, 8)
        mask[0, :2] = 0  # Gemma pads on the left
        # 9 frames of 64 x 96 at 24 fps: latent 2 x 8 x 12 = 192 tokens, 9 audio latents;
        # prompt_embeds: 2 stacked layers of 8 channels (the connectors' input)
        kw = dict(prompt_embeds=torch.randn(1, 8, 16), prompt_attention_mask=mask,
                  negative_prompt_embeds=torch.randn(1, 8, 16),
                  negative_prompt_attention_mask=torch.ones(1, 8), guidance_scale=3.0,
                  height=64, width=96, num_frames=9, frame_rate=24.0,
                  # plain CFG: STG and modality isolation guidance make calls dtpc
                  # refuses (their perturbed / isolated forwards are not modelled)
                  stg_scale=0.0, audio_stg_scale=0.0, modality_scale=1.0,
                  audio_modality_scale=1.0)
    elif fam == "flux2":
        tr = d.Flux2Transformer2DModel(
            patch_size=1, in_channels=16, num_layers=1, num_single_layers=2, attention_head_dim=8,
            num_attention_heads=3, joint_attention_dim=12, timestep_guidance_channels=32,
            mlp_ratio=3.0, axes_dims_rope=[2, 2, 2, 2], guidance_embeds=True)
        vae = d.AutoencoderKLFlux2(
            in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",),
            up_block_types=("UpDecoderBlock2D",), block_out_channels=(4,), layers_per_block=1,
            latent_channels=4, norm_num_groups=1, use_quant_conv=False,
            use_post_quant_conv=False, mid_block_add_attention=False)
        pipe = d.Flux2Pipeline(scheduler=d.FlowMatchEulerDiscreteScheduler(), vae=vae,
                               text_encoder=None, tokenizer=None, transformer=tr)
        # 10 x 6 pixels: 5 x 3 = 15 image tokens (2 x 2 latents packed), 7 text tokens
        kw = dict(prompt_embeds=torch.randn(1, 7, 12), height=10, width=6, guidance_scale=3.5)
    elif fam == "sd3":
        tr = d.SD3Transformer2DModel(
            sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8,
            num_attention_heads=3, joint_attention_dim=12, caption_projection_dim=24,
            pooled_projection_dim=8, out_channels=4, pos_embed_max_size=6)
        vae = d.AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(4,),
                              layers_per_block=1, latent_channels=4, norm_num_groups=1,
                              use_quant_conv=False, use_post_quant_conv=False,
                              shift_factor=0.0609, scaling_factor=1.5035)
        pipe = d.StableDiffusion3Pipeline(
            transformer=tr, scheduler=d.FlowMatchEulerDiscreteScheduler(), vae=vae,
            text_encoder=None, tokenizer=None, text_encoder_2=None, tokenizer_2=None,
            text_encoder_3=None, tokenizer_3=None)
        # 8 x 10 pixels (VAE factor 1): 20 image tokens; 7 text tokens; CFG batched
        kw = dict(prompt_embeds=torch.randn(1, 7, 12), pooled_prompt_embeds=torch.randn(1, 8),
                  negative_prompt_embeds=torch.randn(1, 7, 12),
                  negative_pooled_prompt_embeds=torch.randn(1, 8), guidance_scale=4.0,
                  height=8, width=10)
    else:
        raise ValueError(fam)
    if dtype is not None:
        # Wan's VAE stays float32, as its model card loads it (in bf16 it alone moves the
        # frames by 0.1)
        # (ChronoEdit's and Helios' VAE is Wan's; the image encoder stays float32 as
        # the model cards load it)
        (tr if fam.startswith("wan") or fam in ("chronoedit", "helios") else pipe).to(dtype)
        # as from_pretrained(torch_dtype=...) loads it: the class's _keep_in_fp32_modules
        # (Wan's time embedder, norms, scale_shift_table) stay float32
        keep = tr._keep_in_fp32_modules or []
        if fam == "helios":
            # Helios keeps history_key_scale float32, and then diffusers' processor
            # fails (float32 amplified keys against bf16 queries in the attention:
            # "Expected query, key, and value to have the same dtype"): bf16 here
            keep = [k for k in keep if k != "history_key_scale"]
        for n, p in tr.named_parameters():
            if any(k in n.split(".") for k in keep):
                p.data = p.data.float()
        kw = {k: v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v
              for k, v in kw.items()}
    kw.update(num_inference_steps=2, output_type="np")
    pipe.set_progress_bar_config(disable=True)
    return pipe, kw


def image(pipe, kw):
    """The pipeline's final image (or video frames) as float32 numpy."""
    import numpy as np
    import torch
    out = pipe(**kw, generator=torch.Generator().manual_seed(1))
    img = np.asarray(out.images if hasattr(out, "images") else out.frames, dtype=np.float32)
    if getattr(out, "audio", None) is not None:
        # LTX2Pipeline: the waveform too (in [-1, 1]), after the frames, one array to compare
        return np.concatenate([img.ravel(), np.asarray(out.audio.float(), np.float32).ravel()])
    return img


def dtpc_image(pipe, kw, plan, mesh, context, **opts):
    """The image with the transformer on dtpc; the stock one is put back after."""
    import dtpc.torch
    stock = pipe.transformer
    try:
        dtpc.torch.parallelize(pipe, plan, mesh=mesh, context=context,
                               keep_weights=opts.pop("keep_weights", True), **opts)
        return image(pipe, kw)
    finally:
        pipe.transformer = stock


# ---- the checks --------------------------------------------------------------------------

def report(name, ok, what=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {what}".rstrip(), flush=True)


def skip(name, why):
    print(f"skip {name}: {why}", flush=True)


def attempt(name, fn):
    """Runs a check: fn returns (passed, text); an exception is a failure."""
    try:
        ok, what = fn()
    except Exception as e:  # any error is this check's failure, reported with its text
        ok, what = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    report(name, ok, what)


def compare(got, ref, tol):
    import numpy as np
    err = float(np.abs(got - ref).max()) if got.shape == ref.shape else float("inf")
    return err <= tol, f"max |image - stock| {err:.2e} (tol {tol:g})"


def families(only):
    import torch
    for fam, cases in CASES.items():
        if only and fam not in only:
            continue
        t0 = time.time()
        pipe, kw = build(fam)
        ref = image(pipe, kw)
        std = float(ref.std())
        report(f"{fam}-reference", std > 1e-2, f"image {list(ref.shape)}, std {std:.3f}")
        for case, plan, mesh, ctx in cases:
            attempt(f"{fam}-{case}",
                    lambda: compare(dtpc_image(pipe, kw, plan, mesh, ctx), ref, TOL))
        def cache_context():
            import dtpc.torch
            names_ = []
            stock = pipe.transformer
            m = dtpc.torch.parallelize(stock, plan, mesh=mesh, context=ctx, keep_weights=True)
            m.register_forward_pre_hook(lambda mod, args: names_.append(mod.cache_name))
            pipe.transformer = m
            try:
                image(pipe, kw)
            finally:
                pipe.transformer = stock
            return names_ == CACHE_NAMES[fam], f"calls in {names_} (want {CACHE_NAMES[fam]})"
        plan, mesh, ctx = cases[0][1:]
        attempt(f"{fam}-cache-context", cache_context)

        # negative control: one weight of dtpc's copy off by 0.25 per element
        sd = dict(pipe.transformer.state_dict())
        sd[PERTURB[fam]] = sd[PERTURB[fam]] + 0.25

        def control():
            ok, what = compare(dtpc_image(pipe, kw, plan, mesh, ctx, weights=sd), ref, TOL)
            return not ok, what + f", {PERTURB[fam]} + 0.25 (must fail)"
        attempt(f"{fam}-control-perturbed", control)

        # bf16: the stock pipeline cast to bf16 against dtpc in bf16 (its default for a
        # bf16 transformer), on the family's first mesh
        bpipe, bkw = build(fam, torch.bfloat16)

        def bf16(weights=None):
            bref = image(bpipe, bkw)
            got = dtpc_image(bpipe, bkw, plan, mesh, ctx, weights=weights)
            ok, what = compare(got, bref, TOL_BF16)
            stock_off = float(abs(bref - ref).max())
            if ok or stock_off <= TOL_BF16:
                return ok, what + f" (the float32 image is {stock_off:.1e} away)"
            # the stock bf16 image is itself beyond the tolerance of the float32 one
            # (Helios on a Sapphire Rapids CPU: docs/python.md): dtpc's is held to
            # the float32 image instead
            ok32, what32 = compare(got, ref, TOL_BF16)
            return ok32, (what + f"; the stock bf16 image is itself {stock_off:.1e} from the "
                          "float32 one, so against that: " + what32.replace("stock", "float32"))
        attempt(f"{fam}-bf16-{cases[0][0]}", bf16)
        if fam in BF16_CONTROL:
            bsd = dict(bpipe.transformer.state_dict())
            bsd[PERTURB[fam]] = bsd[PERTURB[fam]] + 0.25

            def bf16_control():
                ok, what = bf16(bsd)
                return not ok, what + f", {PERTURB[fam]} + 0.25 (must fail)"
            attempt(f"{fam}-bf16-control-perturbed", bf16_control)
        if fam in BF16_CALLS:
            attempt(f"{fam}-bf16-calls", lambda: bf16_calls(bpipe, bkw, plan, mesh, ctx))

            # control: dtpc handed the timesteps rounded to bf16 (what its bf16 storage
            # did to them before timestep_embedding read its input's float32 copy)
            def calls_control():
                ok, what = bf16_calls(bpipe, bkw, plan, mesh, ctx, round_timestep=True)
                return not ok, what + ", the timesteps rounded to bf16 (must fail)"
            attempt(f"{fam}-bf16-calls-control-rounded-timestep", calls_control)
        if fam == "flux_dev":
            others(pipe, kw, ref)
        if fam == "chronoedit":
            attempt("chronoedit-temporal-reasoning", lambda: temporal_reasoning(pipe, kw))
        print(f"# {fam}: {time.time() - t0:.1f} s", flush=True)


def bf16_calls(pipe, kw, plan, mesh, context, round_timestep=False):
    """Each transformer call of the stock bf16 pipeline, its inputs as the pipeline passes
    them (dtypes included: ChronoEdit's UniPC timesteps are int64, Helios' float64, Wan's
    float32; none of them bf16), run again by dtpc: the worst normwise distance of
    dtpc's output from the stock call's. round_timestep: dtpc is given the timesteps
    rounded to bf16 (the control)."""
    import dtpc.torch
    import torch
    calls = []

    def pre(mod, args, kwargs):
        calls.append({k: v.detach().clone() if torch.is_tensor(v) else v
                      for k, v in kwargs.items()})

    def post(mod, args, kwargs, out):
        calls[-1]["_out"] = (out[0] if isinstance(out, tuple) else out.sample).detach().clone()
    stock = pipe.transformer
    hooks = [stock.register_forward_pre_hook(pre, with_kwargs=True),
             stock.register_forward_hook(post, with_kwargs=True)]
    try:
        image(pipe, kw)
    finally:
        for h in hooks:
            h.remove()
    # the stock transformer in float32, for calls where its own bf16 output is beyond
    # the tolerance of it (Helios' calls with history on a Sapphire Rapids CPU:
    # docs/python.md); there dtpc's bf16 output is held to the float32 forward
    f32 = copy.deepcopy(stock).float()
    m = dtpc.torch.parallelize(stock, plan, mesh=mesh, context=context, keep_weights=True)
    worst, worst32, stock_off = 0.0, 0.0, []

    def dist(a, b):
        return float((a - b).norm() / b.norm())
    for c in calls:
        want = c.pop("_out").double()
        c32 = {k: v.float() if torch.is_tensor(v) and v.dtype == torch.bfloat16 else v
               for k, v in c.items()}
        out = f32(**c32)
        ref = (out[0] if isinstance(out, tuple) else out.sample).double()
        if round_timestep:
            c["timestep"] = c["timestep"].to(torch.bfloat16).float()
        got = m(**c)[0].double()
        if dist(want, ref) <= TOL_BF16_CALL:
            worst = max(worst, dist(got, want))
        else:
            stock_off.append(dist(want, ref))
            worst32 = max(worst32, dist(got, ref))
    ts = sorted({float(c["timestep"].reshape(-1)[0]) for c in calls})
    what = (f"{len(calls)} calls (timesteps {', '.join(f'{t:g}' for t in ts)}), worst "
            f"|dtpc - stock bf16| / |stock bf16| {worst:.2e} (tol {TOL_BF16_CALL:g})")
    if stock_off:
        what += (f"; {len(stock_off)} stock bf16 calls {min(stock_off):.1e} to "
                 f"{max(stock_off):.1e} from their float32 forward, dtpc's bf16 within "
                 f"{worst32:.2e} of it")
    return max(worst, worst32) <= TOL_BF16_CALL, what


def temporal_reasoning(pipe, kw):
    """ChronoEditPipeline's temporal reasoning: the first step over 9 frames (3 latent
    frames: Wan's RoPE), the second over the image and the edit (2: ChronoEdit's), two
    shapes of one DtpcTransformer; the frames against the stock pipeline's."""
    import dtpc.torch
    kw = dict(kw, num_frames=9, enable_temporal_reasoning=True, num_temporal_reasoning_steps=1)
    ref = image(pipe, kw)
    stock = pipe.transformer
    m = dtpc.torch.parallelize(stock, "chronoedit_ulysses", mesh="ulysses = 2", keep_weights=True)
    pipe.transformer = m
    try:
        ok, what = compare(image(pipe, kw), ref, TOL)
    finally:
        pipe.transformer = stock
    frames = sorted(dict(k)["num_frames"] for k in m._sessions)
    return ok and frames == [2, 3], f"{what} on ulysses 2; latent frames compiled {frames} " \
        "(want [2, 3])"


def others(pipe, kw, ref):
    import copy
    import numpy as np
    import dtpc
    import dtpc.torch
    import torch

    def released():
        stock = pipe.transformer
        pipe.transformer = copy.deepcopy(stock)
        t = pipe.transformer
        try:
            dtpc.torch.parallelize(pipe, "flux_ulysses", mesh="ulysses = 2")
            left = sum(p.numel() for p in t.parameters())
            ok, what = compare(image(pipe, kw), ref, TOL)
            return ok and left == 0, f"{what}; stock parameters left: {left} elements"
        finally:
            pipe.transformer = stock
    attempt("flux_dev-weights-released", released)

    def from_folder():
        with tempfile.TemporaryDirectory() as d:
            pipe.transformer.save_pretrained(d)
            return compare(dtpc_image(pipe, kw, "flux_usp", "ring = 2, ulysses = 2", None,
                                      weights=d), ref, TOL)
    attempt("flux_dev-from-folder", from_folder)


    def wan22():
        wpipe, wkw = build("wan22")
        wref = image(wpipe, wkw)
        stock = wpipe.transformer, wpipe.transformer_2
        # from the pipeline's folder: transformer/ and transformer_2/, each rank its slices
        with tempfile.TemporaryDirectory() as d:
            for n, t in zip(("transformer", "transformer_2"), stock):
                t.save_pretrained(os.path.join(d, n))
            dtpc.torch.parallelize(wpipe, "wan_ring", mesh="ring = 3", weights=d,
                                   keep_weights=True)
            got = image(wpipe, wkw)
        ok, what = compare(got, wref, TOL)
        both = all(type(t).__name__ == "DtpcTransformer"
                   for t in (wpipe.transformer, wpipe.transformer_2))
        # control: transformer_2's weights matter (the stock pipeline with transformer as both)
        wpipe.transformer, wpipe.transformer_2 = stock[0], stock[0]
        off = float(abs(image(wpipe, wkw) - wref).max())
        return ok and both and off > TOL, f"{what}; both replaced, from the pipeline's " \
            f"folder: {both}; transformer_2 " \
            f"as transformer moves the image by {off:.1e} (must be > tol)"
    attempt("wan22-two-transformers", wan22)

    def example(e):
        import importlib.util
        from PIL import Image
        spec = importlib.util.spec_from_file_location(
            e, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                            "python", f"{e}_pipeline.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, f"{e}.png")
            argv, sys.argv = sys.argv, [e, "--out", out]
            try:
                mod.main()
            finally:
                sys.argv = argv
            a = np.asarray(Image.open(out), dtype=np.float32) / 255
        return a.ndim == 3 and a.std() > 1e-2, f"PNG {a.shape[1]} x {a.shape[0]}, std {a.std():.3f}"
    for e in EXAMPLES:
        attempt(f"example-{e}", lambda: example(e))

    # refusals: each a DtpcError with the documented words
    def refused(name, words, fn):
        def run():
            try:
                fn()
            except dtpc.DtpcError as e:
                return all(w in str(e) for w in words), str(e).splitlines()[0][:150]
            return False, "not refused"
        attempt(name, run)

    refused("refuse-unknown-plan", ["plan: 'flux_nope' is not a plan of", "flux_usp"],
            lambda: dtpc.torch.parallelize(pipe.transformer, "flux_nope", keep_weights=True))
    refused("refuse-plan-unnamed", ["flux.plan holds 8 plans: name one"],
            lambda: dtpc.torch.parallelize(pipe.transformer, os.path.join(
                dtpc.torch._models_dir(), "flux.plan"), keep_weights=True))
    refused("refuse-backend", ["backend: 'nccl' is not one of 'local', 'mpi'"],
            lambda: dtpc.torch.parallelize(pipe.transformer, "flux_usp", backend="nccl",
                                           keep_weights=True))
    refused("refuse-weights-missing", ["weights: no file or folder '/nonexistent'"],
            lambda: dtpc.torch.parallelize(pipe.transformer, "flux_usp", weights="/nonexistent",
                                           keep_weights=True))
    # 15 image tokens (6 x 10 pixels) on a ring of 2 without ring_anything
    refused("refuse-shape", ["flux_ring at batch=1, img_seq=15, txt_seq=8",
                             "not divisible by ring * ulysses = 2"],
            lambda: dtpc_image(pipe, dict(kw, height=6, width=10), "flux_ring", "ring = 2", None))
    refused("refuse-lora-scale", ["joint_attention_kwargs['scale'] = 0.5"],
            lambda: dtpc_image(pipe, dict(kw, joint_attention_kwargs={"scale": 0.5}),
                               "flux_ulysses", "ulysses = 2", None))
    m = dtpc.torch.parallelize(pipe.transformer, "flux_ulysses", mesh="ulysses = 2",
                               keep_weights=True)
    args = dict(hidden_states=torch.randn(1, 24, 4), encoder_hidden_states=torch.randn(1, 8, 24),
                pooled_projections=torch.randn(1, 20), timestep=torch.tensor([0.5]),
                img_ids=torch.zeros(24, 3), txt_ids=torch.zeros(8, 3),
                guidance=torch.tensor([3.5]))
    refused("refuse-controlnet", ["controlnet_block_samples: not modelled"],
            lambda: m(**args, controlnet_block_samples=[torch.zeros(1, 24, 32)]))
    refused("refuse-ip-adapter-embeds", ["joint_attention_kwargs['ip_adapter_image_embeds']"],
            lambda: m(**args, joint_attention_kwargs={"ip_adapter_image_embeds": [None]}))
    refused("refuse-unknown-class", ["transformer: Linear is not one of dtpc's models"],
            lambda: dtpc.torch.parallelize(torch.nn.Linear(2, 2), "flux_usp"))

    # persistence: counted by the runtime API's counters, when it is there
    if not hasattr(dtpc, "Ranks"):
        for n in PERSIST:
            skip(n, "dtpc.Ranks not present")
        return

    def delta(before, keys):
        return {k: dtpc.stats[k] - before[k] for k in keys}

    def second_step():
        m(**args)
        before = dict(dtpc.stats)
        m(**args)
        grew = delta(before, ("compiles", "cache_memory_hits", "cache_disk_hits",
                              "weight_binds", "sessions", "runs"))
        ok = grew.pop("runs") >= 1 and not any(grew.values())
        return ok, f"a second step: {grew} (all 0; runs grew)"
    attempt("persist-second-step", second_step)

    def second_resolution():
        small = dict(args, hidden_states=torch.randn(1, 12, 4), img_ids=torch.zeros(12, 3))
        graphs = ("compiles", "cache_memory_hits", "cache_disk_hits")
        before = dict(dtpc.stats)
        m(**small)
        first = delta(before, graphs + ("weight_binds",))
        before = dict(dtpc.stats)
        m(**small)
        second = delta(before, graphs + ("weight_binds",))
        ok = sum(first[k] for k in graphs) == 1 and first["weight_binds"] > 0 and \
            not any(second.values())
        return ok, f"12 tokens: first step {first} (one graph, weights bound), second {second} (0)"
    attempt("persist-second-resolution", second_resolution)


def mpi():
    """Launch mode 2: one mpirun -np 2 runs MPI_CASES, every rank the whole pipeline with
    backend="mpi"; each rank's image against the stock one (computed by each rank as
    well), and the ranks' images equal."""
    import shutil
    import subprocess
    import numpy as np
    names_ = [f"{fam}-{case}" for fam, case, *_ in MPI_CASES]
    if not shutil.which("mpirun"):
        for n in names_:
            skip(n, "mpirun not found")
        return
    with tempfile.TemporaryDirectory() as d:
        cmd = ["mpirun", "-np", "2", "--oversubscribe", "--allow-run-as-root", "--mca", "btl",
               "self,vader", sys.executable, __file__, "--mpi-child", d]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            why = f"mpirun exit {p.returncode}: {p.stderr.strip()[-300:]}"
        except subprocess.TimeoutExpired:
            why = "mpirun ran past 300 s"
        for n in names_:
            files = [os.path.join(d, f"{n}.rank{r}.npz") for r in range(2)]
            if not all(map(os.path.exists, files)):
                report(n, False, why)
                continue
            res = [np.load(f) for f in files]
            oks = [compare(r["got"], r["ref"], TOL) for r in res]
            same = all(np.array_equal(res[0]["got"], r["got"]) for r in res)
            report(n, all(o for o, _ in oks) and same,
                   f"{oks[0][1]} on both ranks; the ranks' images {'equal' if same else 'differ'}")


def mpi_child(d):
    import numpy as np
    import dtpc.torch
    for fam, case, plan, mesh, ctx in MPI_CASES:
        pipe, kw = build(fam)
        ref = image(pipe, kw)
        dtpc.torch.parallelize(pipe, plan, mesh=mesh, context=ctx, backend="mpi")
        got = image(pipe, kw)
        np.savez(os.path.join(d, f"{fam}-{case}.rank{pipe.transformer.rank}.npz"), got=got,
                 ref=ref)


def main():
    if sys.argv[1:2] == ["--list"]:
        print("\n".join(names()))
        return
    if sys.argv[1:2] == ["--mpi-child"]:
        mpi_child(sys.argv[2])
        return
    # FAMILY ...: those families' checks only (flux_dev's hold the others: refusals,
    # persistence, examples), "mpi" the MPI cases; none: all (what pipelines.sh runs)
    only = sys.argv[1:]
    unknown = [n for n in only if n not in CASES and n != "mpi"]
    if unknown:
        sys.exit(f"pipelines.py: {', '.join(unknown)}: not a family ({', '.join(CASES)}) "
                 "nor mpi")
    import diffusers
    diffusers.utils.logging.set_verbosity_error()
    families(only)
    if not only or "mpi" in only:
        mpi()


if __name__ == "__main__":
    main()
