#!/bin/sh
# config.sh BUILD — --config: diffusers' config.json as model parameters.
#
#  cases     every tests/config/cases/*.json through `dtpc check
#            tests/config/tiny.plan --config FILE`: the exact diagnostics and
#            summaries against tests/config/cases.expected (ok.json sets an
#            integer, a number, a boolean, a list and a string, skips the
#            _keys, keeps a null; the others are the hostile files and
#            the wrong kinds, each a located error or, for unknown keys, a note)
#  order     the plan's `model m(k = v)` < the config < -D
#  files     a folder holding config.json; missing, not a file, over 1 MiB:
#            exit 2 as an unreadable plan
#  commands  compile (the graph records the values; --verify recompiles with
#            them), --format json and sarif (valid logs, a rule per error),
#            cost and suggest
#  refuse    models/*.plan's asserts: a fixture's config with one key set to
#            a value the model does not implement is one located error naming
#            the key; the fixtures' own configs compile
# Ends with "config: N passed, N failed, N skipped"; UPDATE=1 rewrites the golden.
set -u
BUILD=${1:-build}
. tests/lib.sh
PLAN=tests/config/tiny.plan

# ---- cases: one golden for all -------------------------------------------------------------
for f in tests/config/cases/*.json; do
	echo "== $(basename "$f")"
	"$DTPC" check "$PLAN" --no-color --config "$f" 2>&1
	echo "exit $?"
done >"$tmp/cases"
compare config/cases tests/config/cases.expected "$tmp/cases"
# the same cases as SARIF (each error with its rule: config.c's own is
# `config`) and as --format json (docs/schemas/check.schema.json), with the
# text check's exit status; one validator run over the SARIF logs (--each: a
# line per log), a check per case
mkdir -p "$tmp/json" "$tmp/sarif"
for f in tests/config/cases/*.json; do
	n=$(basename "$f" .json)
	"$DTPC" check "$PLAN" --no-color --config "$f" >/dev/null 2>&1
	want=$?
	"$DTPC" check "$PLAN" --format sarif --config "$f" >"$tmp/sarif/$n.json" 2>/dev/null
	got=$?
	"$DTPC" check "$PLAN" --format json --config "$f" >"$tmp/json/$n.json" 2>/dev/null
	echo "$n $got $? $want" >>"$tmp/sarif.status"
done
python3 tests/tools/sarif_check.py --rules --each "$tmp"/sarif/*.json >"$tmp/sarif.why" 2>&1
while read -r n got gotj want; do
	if [ "$got" = "$want" ] && [ "$gotj" = "$want" ] &&
		grep -qxF "$tmp/sarif/$n.json: ok" "$tmp/sarif.why"; then ok; else
		bad "config/sarif/$n"
		echo "  exit $got, json $gotj (text: $want)"
		grep -F "$tmp/sarif/$n.json: " "$tmp/sarif.why" || tail -5 "$tmp/sarif.why"
	fi
done <"$tmp/sarif.status"
if python3 tests/tools/schema_check.py docs/schemas/check.schema.json "$tmp"/json/*.json \
	>"$tmp/why" 2>&1; then ok; else
	bad config/json-schema
	head -20 "$tmp/why"
fi

# expect NAME STATUS PATTERN COMMAND...: the exit status, and PATTERN
# (grep -E) in the output
expect() {
	e_name=$1 e_want=$2 e_pat=$3
	shift 3
	"$@" >"$tmp/out" 2>&1
	e_got=$?
	if [ "$e_got" = "$e_want" ] && grep -qE "$e_pat" "$tmp/out"; then ok; else
		bad "config/$e_name"
		echo "  expected exit $e_want and /$e_pat/, got $e_got: $*"
		head -8 "$tmp/out"
	fi
}
# refute NAME PATTERN: PATTERN is not in the last command's output
refute() {
	if grep -qE "$2" "$tmp/out"; then
		bad "config/$1"
		echo "  /$2/ should not be in:"
		head -8 "$tmp/out"
	else ok; fi
}

# ---- order: plan < config < -D ----------------------------------------------------------------
# the plan sets seq = 16 and out_channels = 4; the config seq = 4 and
# out_channels = null (none, as from_config passes None: it replaces the
# plan's 4); -D num_attention_heads wins over the config
printf '{"seq": 4, "out_channels": null, "num_attention_heads": 4}\n' >"$tmp/order.json"
expect order-config-over-plan 0 'model tiny\(batch = 1, seq = 4, num_attention_heads = 6, .*out_channels = none\)' \
	"$DTPC" check "$PLAN" --config "$tmp/order.json" -D num_attention_heads=6
expect order-plan-alone 0 'model tiny\(batch = 1, seq = 16, num_attention_heads = 2,' \
	"$DTPC" check "$PLAN"
# a wrong kind in the config is an error even where -D replaces the value
# (the file is wrong all the same); -D's own kind is checked as ever
printf '{"seq": 4.5}\n' >"$tmp/bad.json"
expect order-kind-checked 1 "bad.json:1:2: error: config key 'seq' is 4.5, a number; model 'tiny' takes an integer" \
	"$DTPC" check "$PLAN" --no-color --config "$tmp/bad.json" -D seq=8
expect order-d-kind 1 "error: -D seq = \"x\": 'seq' is an integer" \
	"$DTPC" check "$PLAN" --no-color --config tests/config/cases/ok.json -D seq=x

# ---- files ----------------------------------------------------------------------------------------
expect folder 0 'axes_dims = \[3, 5, 7\], activation = "tanh"' \
	"$DTPC" check "$PLAN" --config tests/config/folder
expect folder-slash 0 'axes_dims = \[3, 5, 7\]' "$DTPC" check "$PLAN" --config tests/config/folder/
expect missing 2 "^dtpc: cannot read '$tmp/none.json': No such file" \
	"$DTPC" check "$PLAN" --config "$tmp/none.json"
expect folder-without 2 "^dtpc: cannot read 'tests/config/cases/config.json': No such file" \
	"$DTPC" check "$PLAN" --config tests/config/cases
expect not-regular 2 "^dtpc: cannot read '/dev/null': not a regular file" \
	"$DTPC" check "$PLAN" --config /dev/null
python3 -c 'import sys; open(sys.argv[1], "w").write("{\"seq\": 4" + " " * (1 << 20) + "}")' "$tmp/big.json"
expect too-large 2 "cannot read '$tmp/big.json': larger than 1 MiB" \
	"$DTPC" check "$PLAN" --config "$tmp/big.json"
expect needs-value 2 "option '--config' needs a value" "$DTPC" check "$PLAN" --config

# ---- commands ---------------------------------------------------------------------------------------
g=$tmp/t.graph
expect compile 0 'graph: .* world 2' "$DTPC" "$PLAN" --config tests/config/folder -o "$g" -v
expect compile-records 0 'param.axes_dims +\[3, 5, 7\]' "$DTPC" inspect "$g"
# the one-rank reference gets the parameters from the graph, lists and
# strings included; the config file is not part of the source hash
expect compile-verify 0 'output table .*#wrong 0 of 105: ok' "$DTPC" run "$g" --verify
expect compile-bad 1 'cases/nan.json:2:10: error: NaN and Infinity' \
	"$DTPC" "$PLAN" --no-color --config tests/config/cases/nan.json -o "$tmp/n.graph"
if [ -e "$tmp/n.graph" ]; then bad config/compile-bad-wrote; else ok; fi
"$DTPC" check "$PLAN" --format json --config tests/config/cases/wrong-kind.json >"$tmp/j.json" 2>&1
if python3 - "$tmp/j.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
e = d["diagnostics"][0]
assert d["errors"] == 3, d["errors"]
assert e["file"].endswith("cases/wrong-kind.json") and (e["line"], e["column"]) == (2, 3), e
assert "num_attention_heads" in e["message"] and "an integer" in e["message"], e
assert e["notes"][0]["file"] == "tests/config/tiny.plan", e["notes"]
PY
then ok; else bad config/json-format; fi
expect cost 0 'predicted step' "$DTPC" cost "$PLAN" --hw hw/cpu-local.json --config tests/config/folder
expect cost-bad 1 'cases/duplicate-key.json:4:3: error: duplicate key' \
	"$DTPC" cost "$PLAN" --hw hw/cpu-local.json --config tests/config/cases/duplicate-key.json
expect suggest 0 '^suggest: .* [1-9][0-9]* meshes pass check' \
	"$DTPC" suggest "$PLAN" --world 2 --hw hw/cpu-local.json --config tests/config/folder
# suggest hides each mesh's diagnostics, but not the config's own
expect suggest-bad 1 'cases/bom.json:1:1: error: a byte-order mark' \
	"$DTPC" suggest "$PLAN" --world 2 --hw hw/cpu-local.json --config tests/config/cases/bom.json
refute suggest-bad-ran '^suggest:'

# ---- models refuse what they do not model ---------------------------------------------------
# Each models/*.plan with a fixture's config.json (tests/fixtures/models/) in
# which one key takes a value the model file does not implement (or diffusers
# cannot run): exactly one error, at the model's assert with its message, and
# a note at the key in the config. Controls: every fixture's own config
# compiles, and the keys diffusers 0.42.1 takes without effect (Wan's qk_norm
# and pos_embed_seq_len, Qwen-Image's guidance_embeds) are not refused.
FIX=tests/fixtures/models
# model_config FIXTURE KEY JSON: the fixture's config with KEY set, as
# $tmp/model/config.json; the -D options of its shapes in $defines
model_config() {
	mkdir -p "$tmp/model"
	defines=$(python3 - "$FIX/$1" "$2" "$3" "$tmp/model/config.json" <<'PY'
import json, sys
fix, key, val, out = sys.argv[1:]
cfg = json.load(open(fix + "/transformer/config.json"))
if key != "-":
    cfg[key] = json.loads(val)
json.dump(cfg, open(out, "w"), indent=2)
shape = json.load(open(fix + "/fixture.json"))["shape"]
print(" ".join(f"-D {k}={json.dumps(v, separators=(',', ':'))}" for k, v in sorted(shape.items())))
PY
)
}
# model_check MODEL: dtpc check of the model's first plan on one rank
model_check() {
	m_plan=$(sed -n 's/^plan \([a-z0-9_]*\) {$/\1/p' "models/$1.plan" | head -1)
	# shellcheck disable=SC2086 # the -D options split into words
	"$DTPC" check "models/$1.plan" --plan "$m_plan" --mesh "tp = 1" --no-color -q \
		--config "$tmp/model" $defines >"$tmp/out" 2>&1
}
# refuses FIXTURE MODEL KEY JSON MESSAGE (a grep -E pattern)
refuses() {
	model_config "$1" "$3" "$4"
	model_check "$2"
	r_got=$?
	if [ "$r_got" = 1 ] &&
		grep -qE "^models/$2\.plan:[0-9]+:3: error: $5" "$tmp/out" &&
		grep -qE "/config\.json:[0-9]+:3: note: $3 = .* comes from the config here" "$tmp/out" &&
		grep -qx '1 error generated.' "$tmp/out"; then ok; else
		bad "config/refuse/$1/$3=$4"
		echo "  expected one error /$5/ with a note at '$3', got exit $r_got:"
		head -12 "$tmp/out"
	fi
}
# takes FIXTURE MODEL KEY JSON (KEY "-": the fixture's own config)
takes() {
	model_config "$1" "$3" "$4"
	if model_check "$2"; then ok; else
		bad "config/take/$1/$3=$4"
		head -12 "$tmp/out"
	fi
}
for f in flux_dev flux_schnell flux_bf16 flux_patch2; do takes "$f" flux - -; done
for f in wan wan_bf16 wan_patch221; do takes "$f" wan - -; done
for f in qwenimage qwenimage_frames2; do takes "$f" qwenimage - -; done
refuses flux_dev flux axes_dims_rope '[2, 2, 2]' 'sum\(axes_dims_rope\) must be attention_head_dim'
refuses flux_dev flux axes_dims_rope '[2, 2, 2, 2]' 'axes_dims_rope must have 3 entries'
refuses wan wan added_kv_proj_dim 16 'added_kv_proj_dim needs image tokens'
takes wan wan image_dim 12
refuses wan wan patch_size '[2, 2]' 'patch_size must have 3 entries'
refuses wan wan rope_max_seq_len 4 'the patch grid is longer than rope_max_seq_len'
takes wan wan qk_norm '"rms_norm"'
takes wan wan pos_embed_seq_len 514
refuses qwenimage qwenimage zero_cond_t true 'zero_cond_t .* is not modelled'
refuses qwenimage qwenimage use_additional_t_cond true 'use_additional_t_cond .* is not modelled'
refuses qwenimage qwenimage use_layer3d_rope true 'use_layer3d_rope .* is not modelled'
refuses qwenimage qwenimage axes_dims_rope '[2, 2, 2]' 'sum\(axes_dims_rope\) must be attention_head_dim'
refuses qwenimage qwenimage axes_dims_rope '[2, 2, 2, 2]' 'axes_dims_rope must have 3 entries'
takes qwenimage qwenimage guidance_embeds true
for f in ltx ltx_odd ltx_bf16; do takes "$f" ltx - -; done
refuses ltx ltx activation_fn '"gelu"' 'only activation_fn = "gelu-approximate" is modelled'
refuses ltx ltx qk_norm '"rms_norm"' 'LTXAttention supports only qk_norm = "rms_norm_across_heads"'
refuses ltx ltx cross_attention_dim 16 'cross_attention_dim must be num_attention_heads \* attention_head_dim'
# LTX-2: the exact diagnostic, at the line of its assert (found by the
# assert's first line, ASSERT), for each key models/ltx2.plan refuses
# refuses_exact FIXTURE MODEL KEY JSON ASSERT MESSAGE
refuses_exact() {
	model_config "$1" "$3" "$4"
	model_check "$2"
	r_got=$?
	r_line=$(grep -nF "  $5" "models/$2.plan" | cut -d: -f1)
	if [ "$r_got" = 1 ] && [ "$(echo "$r_line" | wc -w)" = 1 ] &&
		[ "$(head -1 "$tmp/out")" = "models/$2.plan:$r_line:3: error: $6" ] &&
		grep -qE "/config\.json:[0-9]+:3: note: $3 = .* comes from the config here" "$tmp/out" &&
		grep -qx '1 error generated.' "$tmp/out"; then ok; else
		bad "config/refuse/$1/$3=$4"
		echo "  expected models/$2.plan:$r_line:3: error: $6, with a note at '$3', got exit $r_got:"
		head -12 "$tmp/out"
	fi
}
for f in ltx2 ltx2_odd ltx2_bf16 ltx2_split ltx2_23; do takes "$f" ltx2 - -; done
refuses_exact ltx2 ltx2 activation_fn '"gelu"' 'assert activation_fn ==' \
	'only activation_fn = "gelu-approximate" is modelled (the feed-forwards'"'"' GELU tanh)'
refuses_exact ltx2 ltx2 qk_norm '"rms_norm"' 'assert qk_norm ==' \
	'LTX2Attention supports only qk_norm = "rms_norm_across_heads"'
refuses_exact ltx2 ltx2 rope_type '"halves"' 'assert rope_type == "interleaved" or rope_type' \
	'rope_type must be "interleaved" or "split" (LTX2AudioVideoRotaryPosEmbed'"'"'s two)'
# split on the ltx2 fixture: the cross-attention tables' 4 video heads over
# its 12 columns are 3 wide (diffusers raises too: RuntimeError, the
# tables' reshape into 4 heads)
refuses_exact ltx2 ltx2 rope_type '"split"' 'assert rope_type != "split"' \
	'rope_type "split" rotates the two halves of each head: the head dims, and audio_cross_attention_dim over 2 * num_attention_heads and 2 * audio_num_attention_heads (the cross-attention tables'"'"' heads), must be even (diffusers raises too)'
# LTX-2.3's keys, each alone on the LTX-2 fixture (ltx2_23 has the four):
# taken; its prompt modulation without prompt_adaln is refused
for k in gated_attn audio_gated_attn cross_attn_mod audio_cross_attn_mod; do
	takes ltx2 ltx2 $k true
done
refuses_exact ltx2_23 ltx2 use_prompt_adaln_single false \
	'assert not (cross_attn_mod or audio_cross_attn_mod) or use_prompt_adaln_single' \
	'cross_attn_mod / audio_cross_attn_mod with use_prompt_adaln_single = false (the static prompt tables without prompt_adaln) is not modelled'
refuses_exact ltx2 ltx2 use_prompt_embeddings false 'assert use_prompt_embeddings' \
	'use_prompt_embeddings = false (no caption projections) is not modelled'
refuses_exact ltx2 ltx2 use_keyframes_abs_pos_embedding true \
	'assert not use_keyframes_abs_pos_embedding' \
	'use_keyframes_abs_pos_embedding (forward'"'"'s video_keyframes_mask) is not modelled'
refuses_exact ltx2 ltx2 cross_attention_dim 16 'assert cross_attention_dim ==' \
	'cross_attention_dim must be num_attention_heads * attention_head_dim: attn2'"'"'s keys are the caption projection'"'"'s output'
refuses_exact ltx2 ltx2 audio_cross_attention_dim 8 'assert audio_cross_attention_dim ==' \
	'audio_cross_attention_dim must be audio_num_attention_heads * audio_attention_head_dim: the audio cross-attentions'"'"' keys and the cross-attention RoPE are that wide'
for v in '[8, 32, 16]' '[8, 32]'; do
	refuses_exact ltx2 ltx2 vae_scale_factors "$v" 'assert len(vae_scale_factors)' \
		'vae_scale_factors must be [frames, height, width] with one spatial scale'
done
refuses_exact ltx2_odd ltx2 base_height 1024 'assert base_height == base_width' \
	'base_height != base_width is not modelled'
refuses_exact ltx2 ltx2 inner_dim 48 'assert inner_dim ==' \
	'inner_dim and audio_inner_dim are heads * head_dim (__init__'"'"'s locals), not keys to set'
# taken: without STG blocks the perturbed processor computes the default
# one's attention, and without prompt modulation (the ltx2 fixture's)
# nothing reads use_prompt_adaln_single
takes ltx2 ltx2 perturbed_attn true
takes ltx2 ltx2 use_prompt_adaln_single false
for f in flux2_dev flux2_odd flux2_bf16; do takes "$f" flux2 - -; done
refuses flux2_dev flux2 axes_dims_rope '[2, 2, 2]' 'sum\(axes_dims_rope\) must be attention_head_dim'

# SD3 / SD3.5 (models/sd3.plan)
for f in sd3 sd3_odd sd35_medium sd35_bf16; do takes "$f" sd3 - -; done
refuses sd3 sd3 qk_norm '"layer_norm"' 'qk_norm other than none and "rms_norm" is not modelled'
refuses sd3 sd3 caption_projection_dim 16 'caption_projection_dim must be num_attention_heads \* attention_head_dim'
refuses sd3 sd3 pos_embed_max_size null 'PatchEmbed without pos_embed_max_size'
refuses sd3 sd3 pos_embed_max_size 3 'the latent is larger than pos_embed_max_size patches'
takes sd3 sd3 sample_size 64

# Helios (models/helios.plan): the keys that act on history tokens only are
# taken without history (helios, helios_odd, helios_bf16) and modelled with
# it (the helios_history fixtures: -D short_frames / mid_frames / long_frames)
for f in helios helios_odd helios_bf16 helios_history helios_history_odd helios_history_bf16; do
	takes "$f" helios - -
done
refuses helios_history helios has_multi_term_memory_patch false 'history latents need has_multi_term_memory_patch'
refuses helios_history helios patch_size '[1, 4, 4]' 'long_frames, height and width must be multiples of patch_long'
refuses helios_history_odd helios patch_size '[2, 2, 2]' 'short_frames must be a multiple of patch_size'
refuses helios helios added_kv_proj_dim 16 'added_kv_proj_dim is not modelled'
refuses helios helios history_scale_mode '"per_token"' 'history_scale_mode must be "scalar" or "per_head"'
refuses helios helios patch_size '[2, 2]' 'patch_size must have 3 entries'
refuses helios helios rope_dim '[2, 2, 2]' 'rope_dim must have 3 entries .* that add up to attention_head_dim'
refuses helios helios rope_dim '[2, 2, 2, 2]' 'rope_dim must have 3 entries'
takes helios helios qk_norm '"rms_norm"'
takes helios helios guidance_cross_attn false
takes helios helios zero_history_timestep false
takes helios helios is_amplify_history true
takes helios helios history_scale_mode '"scalar"'
takes helios helios has_multi_term_memory_patch true
# Wan 2.2 TI2V, Wan 2.1 I2V / FLF2V (models/wan.plan at its other configs)
for f in wan22_ti2v wan22_ti2v_bf16 wan_i2v wan_flf2v; do takes "$f" wan - -; done
refuses wan_i2v wan added_kv_proj_dim 12 'added_kv_proj_dim must be num_attention_heads \* attention_head_dim'
refuses wan_flf2v wan pos_embed_seq_len 4 'pos_embed_seq_len must be 2 \* img_seq'

# ChronoEdit (models/chronoedit.plan over wan.plan's model)
for f in chronoedit chronoedit_frames3 chronoedit_bf16; do takes "$f" chronoedit - -; done
# chrono_refuses KEY JSON MESSAGE [-D ...]: refuses, for chronoedit.plan's
# plans, whose asserts are those of the model they instantiate (wan.plan's)
chrono_refuses() {
	c_key=$1 c_val=$2 c_msg=$3
	shift 3
	model_config chronoedit "$c_key" "$c_val"
	defines="$defines $*"
	model_check chronoedit
	c_got=$?
	if [ "$c_got" = 1 ] && grep -qE "^models/wan\.plan:[0-9]+:3: error: $c_msg" "$tmp/out" &&
		grep -qE "/config\.json:[0-9]+:3: note: $c_key = .* comes from the config here" "$tmp/out" &&
		grep -qx '1 error generated.' "$tmp/out"; then ok; else
		bad "config/refuse/chronoedit/$c_key=$c_val"
		echo "  expected one error /$c_msg/ with a note at '$c_key', got exit $c_got:"
		head -12 "$tmp/out"
	fi
}
# ts_seq_len is a shape (-D), not a key: the error's note is at the -D
model_config wan22_ti2v - -
defines="$defines -D ts_seq_len=44"
model_check wan
if [ $? = 1 ] && grep -qE '^models/wan\.plan:[0-9]+:3: error: ts_seq_len \(a \[batch, ts_seq_len\] timestep, Wan 2\.2 TI2V\) must be the number of patch tokens' "$tmp/out" &&
	grep -q 'note: ts_seq_len = 44 comes from -D' "$tmp/out" && grep -qx '1 error generated.' "$tmp/out"; then ok; else
	bad "config/refuse/wan22_ti2v/-D ts_seq_len=44"
	head -12 "$tmp/out"
fi
chrono_refuses rope_temporal_skip_len 0 'rope_temporal_skip_len must be at least 1'
chrono_refuses patch_size '[2, 2, 2]' "ChronoEdit's two-frame RoPE needs patch_size\[0\] == 1"
# head_dim 10 (added_kv_proj_dim following it by -D): 10 // 3 = 3 is not
# Wan's 2 · (10 // 6) = 2
chrono_refuses attention_head_dim 10 \
	'ChronoEdit \(rope_temporal_skip_len\) with attention_head_dim % 6 >= 3 is not modelled' \
	-D added_kv_proj_dim=20

# Qwen-Image 2.1 (models/qwenimage21.plan; context_in_dim sizes txt_in,
# which the cached step runs and drops: taken without effect)
for f in qwen21 qwen21_odd qwen21_bf16; do takes "$f" qwenimage21 - -; done
refuses qwen21 qwenimage21 causal_condition false 'causal_condition = false has no KV cache'
refuses qwen21 qwenimage21 patch_size 2 'patch_size other than 1 is not modelled'
refuses qwen21 qwenimage21 axes_dims_rope '[2, 2, 2]' 'sum\(axes_dims_rope\) must be attention_head_dim'
refuses qwen21 qwenimage21 axes_dims_rope '[2, 2, 2, 2]' 'axes_dims_rope must have 3 entries'
takes qwen21 qwenimage21 context_in_dim 99


# MiniMax-H3 (models/minimax_h3.plan)
for f in minimax_h3 minimax_h3_odd minimax_h3_bf16; do takes "$f" minimax_h3 - -; done
refuses minimax_h3 minimax_h3 patch_size '[2, 2]' 'patch_size must have 3 entries'
refuses minimax_h3 minimax_h3 rope_freq_dim 3 '6 \* rope_freq_dim must be at most attention_head_dim'

summary config
