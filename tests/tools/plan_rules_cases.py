#!/usr/bin/env python3
"""plan_rules_cases.py [--verify] — dtpc.diffusers.plan_rules on the
parallel plans of every diffusers 0.42.1 transformer that ships one
(tests/tools.sh compares the text with tests/tools/python-plan-rules-classes.expected).

The plans are written out below as diffusers 0.42.1 defines them
(diffusers/models/transformers/transformer_*.py), with dtpc's stand-ins for
diffusers' classes: the tests run with the system Python, without diffusers.
`--verify`, under a Python that has diffusers 0.42.1 (tools/gen_models.py's
virtual environment), checks that each copy equals the class's own
attributes, and that plan_rules gives the same text for the real class as for
the copy, and for a meta-device Flux2Transformer2DModel of the fixtures'
configuration as for the stand-in instance below.
"""
import importlib.util
import os
import sys

# python/dtpc/diffusers.py alone: the package's __init__ loads numpy and
# libdtpc; DTPC_DIFFUSERS_PY names it for a copy of this file run elsewhere
_spec = importlib.util.spec_from_file_location("dtpc_diffusers", os.environ.get(
    "DTPC_DIFFUSERS_PY", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                      "python", "dtpc", "diffusers.py")))
dd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dd)
In, Out = dd.ContextParallelInput, dd.ContextParallelOutput
PackedCol, PackedRow = dd.PackedColwiseParallel, dd.PackedRowwiseParallel

_MMDIT_ATTN = {
    "transformer_blocks.*.attn.to_q": "colwise",
    "transformer_blocks.*.attn.to_k": "colwise",
    "transformer_blocks.*.attn.to_v": "colwise",
    "transformer_blocks.*.attn.to_out.0": "rowwise",
    "transformer_blocks.*.attn.add_q_proj": "colwise",
    "transformer_blocks.*.attn.add_k_proj": "colwise",
    "transformer_blocks.*.attn.add_v_proj": "colwise",
    "transformer_blocks.*.attn.to_add_out": "rowwise",
}
_ROPE4 = {0: In(split_dim=1, expected_dims=4, split_output=True),
          1: In(split_dim=1, expected_dims=4, split_output=True)}
_LTX_CP = {
    "": {"hidden_states": In(split_dim=1, expected_dims=3, split_output=False),
         "encoder_hidden_states": In(split_dim=1, expected_dims=3, split_output=False),
         "encoder_attention_mask": In(split_dim=1, expected_dims=2, split_output=False)},
    "rope": {0: In(split_dim=1, expected_dims=3, split_output=True),
             1: In(split_dim=1, expected_dims=3, split_output=True)},
    "proj_out": Out(gather_dim=1, expected_dims=3),
}

# class name: (_cp_plan, _tp_plan), as diffusers 0.42.1 has them
CLASSES = {
    "FluxTransformer2DModel": ({
        "": {"hidden_states": In(split_dim=1, expected_dims=3, split_output=False),
             "encoder_hidden_states": In(split_dim=1, expected_dims=3, split_output=False),
             "img_ids": In(split_dim=0, expected_dims=2, split_output=False),
             "txt_ids": In(split_dim=0, expected_dims=2, split_output=False)},
        "proj_out": Out(gather_dim=1, expected_dims=3),
    }, {
        **_MMDIT_ATTN,
        "transformer_blocks.*.ff.net.0.proj": "colwise",
        "transformer_blocks.*.ff.net.2": "rowwise",
        "transformer_blocks.*.ff_context.net.0.proj": "colwise",
        "transformer_blocks.*.ff_context.net.2": "rowwise",
        "single_transformer_blocks.*.attn.to_q": "colwise",
        "single_transformer_blocks.*.attn.to_k": "colwise",
        "single_transformer_blocks.*.attn.to_v": "colwise",
        "single_transformer_blocks.*.proj_mlp": "colwise",
        "single_transformer_blocks.*.proj_out": PackedRow(),
    }),
    "Flux2Transformer2DModel": ({
        "": {"hidden_states": In(split_dim=1, expected_dims=3, split_output=False),
             "encoder_hidden_states": In(split_dim=1, expected_dims=3, split_output=False),
             "img_ids": In(split_dim=1, expected_dims=3, split_output=False),
             "txt_ids": In(split_dim=1, expected_dims=3, split_output=False)},
        "proj_out": Out(gather_dim=1, expected_dims=3),
    }, {
        **_MMDIT_ATTN,
        "transformer_blocks.*.ff.linear_in": PackedCol([1, 1]),
        "transformer_blocks.*.ff.linear_out": "rowwise",
        "transformer_blocks.*.ff_context.linear_in": PackedCol([1, 1]),
        "transformer_blocks.*.ff_context.linear_out": "rowwise",
        "single_transformer_blocks.*.attn.to_qkv_mlp_proj": PackedCol(),
        "single_transformer_blocks.*.attn.to_out": PackedRow(),
    }),
    "QwenImageTransformer2DModel": ({
        "transformer_blocks.0": {
            "hidden_states": In(split_dim=1, expected_dims=3, split_output=False),
            "encoder_hidden_states": In(split_dim=1, expected_dims=3, split_output=False)},
        "transformer_blocks.*": {
            "modulate_index": In(split_dim=1, expected_dims=2, split_output=False),
            "encoder_hidden_states_mask": In(split_dim=1, expected_dims=2, split_output=False)},
        "pos_embed": {0: In(split_dim=0, expected_dims=2, split_output=True),
                      1: In(split_dim=0, expected_dims=2, split_output=True)},
        "proj_out": Out(gather_dim=1, expected_dims=3),
    }, {
        **_MMDIT_ATTN,
        "transformer_blocks.*.img_mlp.net.0.proj": "colwise",
        "transformer_blocks.*.img_mlp.net.2": "rowwise",
        "transformer_blocks.*.txt_mlp.net.0.proj": "colwise",
        "transformer_blocks.*.txt_mlp.net.2": "rowwise",
    }),
    "QwenImage21Transformer2DModel": (None, {
        "transformer_blocks.*.attn.to_q": "colwise",
        "transformer_blocks.*.attn.to_k": "colwise",
        "transformer_blocks.*.attn.to_v": "colwise",
        "transformer_blocks.*.attn.to_out.0": "rowwise",
        "transformer_blocks.*.img_mlp.proj": "colwise",
        "transformer_blocks.*.img_mlp.gate_layer": "colwise",
        "transformer_blocks.*.img_mlp.out": "rowwise",
    }),
    "WanTransformer3DModel": ({
        "rope": _ROPE4,
        "blocks.0": {"hidden_states": In(split_dim=1, expected_dims=3, split_output=False)},
        "proj_out": Out(gather_dim=1, expected_dims=3),
        "": {"timestep": In(split_dim=1, expected_dims=2, split_output=False)},
    }, None),
    "ChronoEditTransformer3DModel": ({
        "rope": _ROPE4,
        "blocks.0": {"hidden_states": In(split_dim=1, expected_dims=3, split_output=False)},
        "proj_out": Out(gather_dim=1, expected_dims=3),
    }, None),
    "HeliosTransformer3DModel": ({
        "blocks.*.attn1": {"hidden_states": In(split_dim=1, expected_dims=3, split_output=False),
                           "rotary_emb": In(split_dim=1, expected_dims=3, split_output=False)},
        "blocks.*.attn2": {"hidden_states": In(split_dim=1, expected_dims=3, split_output=False)},
        "blocks.*.ffn": {"hidden_states": In(split_dim=1, expected_dims=3, split_output=False)},
        **{f"blocks.{i}.attn1": Out(gather_dim=1, expected_dims=3) for i in range(40)},
        **{f"blocks.{i}.attn2": Out(gather_dim=1, expected_dims=3) for i in range(40)},
        **{f"blocks.{i}.ffn": Out(gather_dim=1, expected_dims=3) for i in range(40)},
    }, None),
    "LTXVideoTransformer3DModel": (_LTX_CP, None),
    "LTX2VideoTransformer3DModel": (_LTX_CP, None),
    "MiniMaxH3Transformer3DModel": ({
        "rope": {0: In(split_dim=0, expected_dims=2, split_output=True),
                 1: In(split_dim=0, expected_dims=2, split_output=True)},
        "transformer_blocks.0": {
            "hidden_states": In(split_dim=1, expected_dims=3, split_output=False)},
        "transformer_blocks.*": {
            "adaln_indices": In(split_dim=0, expected_dims=1, split_output=False)},
        "norm_out": {"timestep_indices": In(split_dim=0, expected_dims=1, split_output=False)},
        "proj_out": Out(gather_dim=1, expected_dims=3),
        "audio_proj_out": Out(gather_dim=1, expected_dims=3),
    }, None),
}

# Flux2Transformer2DModel(num_layers=1, num_single_layers=2, attention_head_dim=8,
# num_attention_heads=4, mlp_ratio=3.0) as far as plan_rules looks at it: the
# packed Linears' weight shapes and the blocks Flux2ParallelSelfAttention sets
FLUX2_TINY = dict(heads=4, head_dim=8, mlp_ratio=3.0, num_layers=1, num_single_layers=2)


class _Weight:
    def __init__(self, *shape):
        self.shape = shape


class _Linear:
    def __init__(self, out_features, in_features, **attrs):
        self.weight = _Weight(out_features, in_features)
        self.__dict__.update(attrs)


class Flux2Instance:
    """A stand-in for a Flux2Transformer2DModel instance: its plans and the
    Linears the packed styles name."""
    _cp_plan, _tp_plan = CLASSES["Flux2Transformer2DModel"]

    def __init__(self, heads, head_dim, mlp_ratio, num_layers, num_single_layers):
        inner = heads * head_dim
        mlp = int(inner * mlp_ratio)
        self.modules = {}
        for i in range(num_layers):
            for ff in ("ff", "ff_context"):
                self.modules[f"transformer_blocks.{i}.{ff}.linear_in"] = _Linear(2 * mlp, inner)
        for i in range(num_single_layers):
            self.modules[f"single_transformer_blocks.{i}.attn.to_qkv_mlp_proj"] = _Linear(
                3 * inner + 2 * mlp, inner, _tp_packed_col_blocks=[inner] * 3 + [mlp] * 2)
            self.modules[f"single_transformer_blocks.{i}.attn.to_out"] = _Linear(
                inner, inner + mlp, _tp_packed_row_blocks=[inner, mlp])

    def named_modules(self):
        return iter(self.modules.items())


def print_cases():
    for name, (cp, tp) in CLASSES.items():
        print(f"-- {name}")
        dd.print_plan_rules(cp_plan=cp or {}, tp_plan=tp or {})
    print("-- Flux2Transformer2DModel instance (4 heads x 8, mlp_ratio 3)")
    dd.print_plan_rules(Flux2Instance(**FLUX2_TINY))
    # what has no dtpc rule: a comment naming the key, never an exception
    print("-- untransliterable")
    odd = Flux2Instance(**FLUX2_TINY)
    odd.modules["single_transformer_blocks.1.attn.to_out"] = _Linear(32, 128)  # no blocks
    dd.print_plan_rules(odd, tp_plan={
        "transformer_blocks.*.ff.linear_in": PackedCol([2, 3]),     # 5 does not divide 192
        "single_transformer_blocks.*.attn.to_out": PackedRow(),      # blocks missing on one
        "single_transformer_blocks.*.attn.nothing": PackedCol([1]),  # matches nothing
        "x": "sequence_parallel",
    }, cp_plan={
        "blocks.0": {0: In(split_dim=1), "y": In(split_dim=1)},
        "pos": {"a": In(split_dim=0, split_output=True), "b": In(split_dim=0, split_output=True)},
        "z": "gather",
    })


def verify():
    """The copies above against diffusers' own classes (run by hand)."""
    import diffusers
    import torch
    ok = True

    def norm(v):
        """A plan as plain values: the stand-ins have diffusers' class names"""
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [norm(x) for x in v]
        if isinstance(v, str) or v is None:
            return v
        fields = {k: getattr(v, k) for k in ("split_dim", "gather_dim", "expected_dims",
                                              "split_output", "blocks") if hasattr(v, k)}
        if fields.get("blocks") is not None:
            fields["blocks"] = list(fields["blocks"])
        return (type(v).__name__, sorted(fields.items()))

    for name, (cp, tp) in CLASSES.items():
        cls = getattr(diffusers, name)
        for what, mine in (("_cp_plan", cp), ("_tp_plan", tp)):
            if norm(mine) == norm(getattr(cls, what, None)):
                print(f"ok    {name}.{what}")
            else:
                ok = False
                print(f"FAIL  {name}.{what}: the copy differs from diffusers {diffusers.__version__}")
        if dd.plan_rules(cls) != dd.plan_rules(cp_plan=cp or {}, tp_plan=tp or {}):
            ok = False
            print(f"FAIL  {name}: plan_rules of the class differs from the copy's")
    with torch.device("meta"):
        real = diffusers.Flux2Transformer2DModel(
            num_layers=FLUX2_TINY["num_layers"], num_single_layers=FLUX2_TINY["num_single_layers"],
            attention_head_dim=FLUX2_TINY["head_dim"], num_attention_heads=FLUX2_TINY["heads"],
            mlp_ratio=FLUX2_TINY["mlp_ratio"], axes_dims_rope=[2, 2, 2, 2])
    if dd.plan_rules(real) == dd.plan_rules(Flux2Instance(**FLUX2_TINY)):
        print("ok    Flux2Transformer2DModel instance")
    else:
        ok = False
        print("FAIL  Flux2Transformer2DModel instance: the stand-in's rules differ")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    if sys.argv[1:] == ["--verify"]:
        verify()
    else:
        print_cases()
