#!/bin/sh
# weights.sh BUILD [mpi] — checkpoints through `dtpc run --weights` and `dtpc shard`,
# on diffusers' tiny Flux (tests/fixtures/flux.*) at tp = 2 and ring = 2 x
# ulysses = 2. The variants are made here from the committed fixture by
# tests/ckpt.py (standard library Python): nothing large is committed.
#
# Positive paths: every output is compared bit for bit (cmp) with a reference
# run. F32 sources — a folder holding the file, 3 shards with an index (as a
# folder and as the index itself), dtpc shard's per-rank folder — equal the
# single-file run exactly: the same float32 values are bound, only read from
# elsewhere. BF16 and F16 sources equal the single-file run on an F32 file of
# the same values rounded to BF16 / F16 (round to nearest even; both widen to
# float32 exactly), which must differ from the unrounded run (the control that
# the rounding and the comparison bite). A checkpoint with an unused 256 GiB
# tensor that is a hole in the file runs as fast as the plain one: nothing
# reads a whole file.
#
# Tensors the graph does not use (in a file, a folder, an index's shards, a
# dtpc shard folder, an inputs file): one note for the run naming them; none
# for the fixture itself, which the graph uses whole.
#
# Hostile paths: each error's exact message and exit status (1: the weights do
# not fit or are malformed; 2: a file cannot be read, or usage).
#
# With mpi: one process per rank under mpirun reads 3 BF16 shards and a
# per-rank folder, each output bit-identical to the local backend's.
#
# Prints "weights: N passed, N failed, N skipped".
set -u
BUILD=${1:-build}
MODE=${2:-local}
FIX=tests/fixtures
. tests/lib.sh
W=$FIX/flux.weights.safetensors
IN=$FIX/flux.inputs.safetensors
ck() { python3 tests/ckpt.py "$@"; }

# same NAME A B: the two output files are identical
same() {
	if cmp -s "$2" "$3"; then ok; else
		bad "$1"
		echo "  $2 and $3 differ"
	fi
}

# run GRAPH WEIGHTS OUT: dtpc run, its outputs saved; a failure is printed
run() {
	"$DTPC" run "$1" --inputs "$IN" --weights "$2" --save-outputs "$3" --timeout 60 \
		>"$tmp/run.log" 2>&1 || { echo "  dtpc run $1 --weights $2:"; sed 's/^/    /' "$tmp/run.log"; }
}

# expect NAME STATUS MESSAGE COMMAND...: the command exits STATUS and prints
# MESSAGE as one whole line
expect() {
	e_name=$1 e_status=$2 e_msg=$3
	shift 3
	"$@" >"$tmp/out" 2>&1
	e_got=$?
	if [ "$e_got" = "$e_status" ] && grep -Fxq -- "$e_msg" "$tmp/out"; then ok; else
		bad "$e_name"
		echo "  expected exit $e_status and the line: $e_msg"
		echo "  got exit $e_got:"
		sed 's/^/    /' "$tmp/out" | head -8
	fi
}

if ! { compile_mesh "$FIX/flux.plan" flux_fixture_tp "tp = 2" "" "$tmp/tp2.graph" -q &&
	compile_mesh "$FIX/flux.plan" flux_fixture_cp "ring = 2, ulysses = 2" \
		'rotate_method = "alltoall"' "$tmp/rxu.graph" -q &&
	compile_mesh "$FIX/flux.plan" flux_fixture_cp "ulysses = 2" "" "$tmp/u2.graph" -q &&
	compile_mesh "$FIX/flux.plan" flux_fixture_fsdp "ring = 2, ulysses = 2" \
		'rotate_method = "alltoall"' "$tmp/fsdp.graph" -q &&
	compile_mesh "$FIX/flux.plan" flux_fixture_tp "tp = 1" "" "$tmp/one.graph" -q; }; then
	bad compile
	summary weights
	exit
fi

# ---- tensors the graph does not use: a note from rank 0 alone ------------------------------
# noted NAME LINE: the last run's log holds LINE, and it is its one note of
# unused tensors (rank 0 speaks for every rank)
noted() {
	if [ "$(grep -c 'this graph does not use' "$tmp/run.log")" = 1 ] &&
		grep -Fxq -- "$2" "$tmp/run.log"; then ok; else
		bad "$1"
		echo "  expected the one note: $2"
		sed 's/^/    /' "$tmp/run.log" | head -5
	fi
}
# unused CHECKPOINT: a copy of the fixture with five tensors it does not use
# (named to sort first: the note names three in name order, then counts)
unused() {
	mkdir -p "$1" && cp "$W" "$1/diffusion_pytorch_model.safetensors" &&
		ck extra "$1/diffusion_pytorch_model.safetensors" a.unused b.unused c.unused \
			d.unused e.unused
}
UNUSED="holds 5 tensors this graph does not use: 'a.unused', 'b.unused', 'c.unused' and 2 more"

if [ "$MODE" = mpi ]; then
	G="$tmp/rxu.graph"
	ck shards "$W" "$tmp/b3" 3 BF16
	"$DTPC" shard "$G" --weights "$tmp/b3" --out "$tmp/per" >/dev/null
	run "$G" "$tmp/b3" "$tmp/local.out"
	for w in b3 per; do
		replay mpi "$G" --inputs "$IN" --weights "$tmp/$w" --save-outputs "$tmp/mpi-$w.out" \
			--timeout 60 >"$tmp/mpi.log" 2>&1 || sed 's/^/    /' "$tmp/mpi.log"
		same "mpi/rxu-$w" "$tmp/local.out" "$tmp/mpi-$w.out"
	done
	unused "$tmp/xfolder" && ck shards "$tmp/xfolder/diffusion_pytorch_model.safetensors" \
		"$tmp/x3" 3 F32
	replay mpi "$G" --inputs "$IN" --weights "$tmp/x3" --timeout 60 >"$tmp/run.log" 2>&1
	noted mpi/unused-once "dtpc: note: --weights '$tmp/x3' $UNUSED"
	summary weights
	exit
fi

# ---- the variants ---------------------------------------------------------------------------
mkdir "$tmp/folder" && cp "$W" "$tmp/folder/diffusion_pytorch_model.safetensors" &&
	echo '{"_class_name": "FluxTransformer2DModel"}' >"$tmp/folder/config.json"
ck shards "$W" "$tmp/s3" 3 F32
ck shards "$W" "$tmp/b3" 3 BF16
ck round "$W" "$tmp/bf16ref.safetensors" BF16
ck convert "$W" "$tmp/f16.safetensors" F16
ck round "$W" "$tmp/f16ref.safetensors" F16
ck sparse "$W" "$tmp/sparse.safetensors" 256

for g in tp2 rxu fsdp; do
	G="$tmp/$g.graph"
	run "$G" "$W" "$tmp/$g.ref"
	run "$G" "$tmp/folder" "$tmp/$g.folder"
	same "$g/folder" "$tmp/$g.ref" "$tmp/$g.folder"
	run "$G" "$tmp/s3" "$tmp/$g.s3"
	same "$g/3-shards" "$tmp/$g.ref" "$tmp/$g.s3"
	run "$G" "$tmp/s3/diffusion_pytorch_model.safetensors.index.json" "$tmp/$g.idx"
	same "$g/the-index-itself" "$tmp/$g.ref" "$tmp/$g.idx"
	"$DTPC" shard "$G" --weights "$W" --out "$tmp/per-$g" >/dev/null
	run "$G" "$tmp/per-$g" "$tmp/$g.per"
	same "$g/dtpc-shard" "$tmp/$g.ref" "$tmp/$g.per"
	# BF16: sharded, and per-rank files cut from the BF16 shards (they stay BF16)
	run "$G" "$tmp/bf16ref.safetensors" "$tmp/$g.bref"
	if cmp -s "$tmp/$g.bref" "$tmp/$g.ref"; then
		bad "$g/bf16-rounding-shows"
	else ok; fi
	run "$G" "$tmp/b3" "$tmp/$g.b3"
	same "$g/3-shards-bf16" "$tmp/$g.bref" "$tmp/$g.b3"
	"$DTPC" shard "$G" --weights "$tmp/b3" --out "$tmp/bper-$g" >/dev/null
	n=$(ck dtypes "$tmp"/bper-$g/rank-00001-of-*.safetensors 2>/dev/null | grep -vc ' BF16$')
	if [ "$n" = 0 ]; then ok; else bad "$g/dtpc-shard-keeps-bf16"; fi
	run "$G" "$tmp/bper-$g" "$tmp/$g.bper"
	same "$g/dtpc-shard-bf16" "$tmp/$g.bref" "$tmp/$g.bper"
done
# FSDP: each rank binds (and dtpc shard cuts) its dim-0 rows of the blocks'
# weights; the gathered copies are exact, so the outputs equal rxu's
same fsdp/equals-rxu "$tmp/rxu.ref" "$tmp/fsdp.ref"
# its negative control: ranks 0 and 1 given each other's rows (files swapped,
# their rank and slice labels too, so the reader takes them) run, and their
# outputs differ: each rank's rows are its own and the gathers order them
P4=$tmp/per-fsdp
mkdir "$tmp/swap" && cp "$P4"/* "$tmp/swap/"
for r in 0 1; do
	o=$((1 - r))
	cp "$P4/rank-0000$o-of-00004.safetensors" "$tmp/swap/rank-0000$r-of-00004.safetensors"
	ck setmeta "$tmp/swap/rank-0000$r-of-00004.safetensors" dtpc.rank $r
	ck setmeta "$tmp/swap/rank-0000$r-of-00004.safetensors" dtpc.slices \
		"$(ck getmeta "$P4/rank-0000$r-of-00004.safetensors" dtpc.slices)"
done
run "$tmp/fsdp.graph" "$tmp/swap" "$tmp/fsdp.swap"
if [ -s "$tmp/fsdp.swap" ] && ! cmp -s "$tmp/fsdp.swap" "$tmp/fsdp.ref"; then ok; else
	bad "fsdp/swapped-rows-show"
fi
run "$tmp/tp2.graph" "$tmp/f16ref.safetensors" "$tmp/f16.ref"
run "$tmp/tp2.graph" "$tmp/f16.safetensors" "$tmp/f16.out"
same tp2/f16 "$tmp/f16.ref" "$tmp/f16.out"
if cmp -s "$tmp/f16.ref" "$tmp/tp2.ref"; then bad tp2/f16-rounding-shows; else ok; fi
# the hole would take minutes to read (and RAM to hold): a run reads only slices
t0=$(date +%s)
run "$tmp/tp2.graph" "$tmp/sparse.safetensors" "$tmp/sparse.out"
same tp2/unused-256GiB-tensor "$tmp/tp2.ref" "$tmp/sparse.out"
if [ $(($(date +%s) - t0)) -lt 20 ]; then ok; else bad tp2/unused-256GiB-tensor-is-not-read; fi

# the tensors nothing uses, in every kind of checkpoint, named once for the
# run's 2 ranks; the negative control: the fixture itself, all of it used
run "$tmp/tp2.graph" "$W" "$tmp/u.out"
if grep -q 'does not use' "$tmp/run.log"; then bad unused/none-when-all-used; else ok; fi
run "$tmp/tp2.graph" "$tmp/sparse.safetensors" "$tmp/u.out"
noted unused/file "dtpc: note: --weights '$tmp/sparse.safetensors' holds 1 tensor this graph does not use: 'zz.unused'"
unused "$tmp/xfolder"
run "$tmp/tp2.graph" "$tmp/xfolder" "$tmp/u.out"
noted unused/folder "dtpc: note: --weights '$tmp/xfolder' $UNUSED"
ck shards "$tmp/xfolder/diffusion_pytorch_model.safetensors" "$tmp/x3" 3 F32
run "$tmp/tp2.graph" "$tmp/x3/diffusion_pytorch_model.safetensors.index.json" "$tmp/u.out"
noted unused/index "dtpc: note: --weights '$tmp/x3/diffusion_pytorch_model.safetensors.index.json' $UNUSED"
# dtpc shard writes the graph's slices alone; a tensor added to each rank's
# file is named once (rank 0's)
"$DTPC" shard "$tmp/tp2.graph" --weights "$W" --out "$tmp/xper" >/dev/null
for f in "$tmp"/xper/rank-*.safetensors; do ck extra "$f" zz.unused; done
run "$tmp/tp2.graph" "$tmp/xper" "$tmp/u.out"
noted unused/per-rank "dtpc: note: --weights '$tmp/xper' holds 1 tensor this graph does not use: 'zz.unused'"
# an input this graph does not take (Flux.1-dev's guidance under a graph without it)
cp "$IN" "$tmp/xin.safetensors" && ck extra "$tmp/xin.safetensors" guidance
"$DTPC" run "$tmp/tp2.graph" --inputs "$tmp/xin.safetensors" --weights "$W" >"$tmp/run.log" 2>&1
noted unused/inputs "dtpc: note: --inputs '$tmp/xin.safetensors' holds 1 tensor this graph does not use: 'guidance'"

# ---- hostile sharded checkpoints ------------------------------------------------------------
Q=transformer_blocks.0.attn.to_q.weight
IDX=diffusion_pytorch_model.safetensors.index.json
S1=diffusion_pytorch_model-00001-of-00003.safetensors
S2=diffusion_pytorch_model-00002-of-00003.safetensors
S3=diffusion_pytorch_model-00003-of-00003.safetensors # holds $Q
G="$tmp/tp2.graph"
R="dtpc: ranks 0-1: weight or input binding failed:"
r() { "$DTPC" run "$G" --inputs "$IN" --timeout 60 --weights "$@"; }

ck shards "$W" "$tmp/drop" 3 F32 --drop $Q
expect missing-from-every-shard 1 "$R $tmp/drop/$IDX does not hold this graph's weights: '$Q' is in none of its 3 shards (1 of 62 weights)" r "$tmp/drop"
ck shards "$W" "$tmp/shape" 3 F32 --reshape $Q
expect mis-shaped 1 "$R $tmp/shape/$IDX does not hold this graph's weights: '$Q' has shape [1024] in $S3, but the graph expects [32, 32] (1 of 62 weights)" r "$tmp/shape"
ck shards "$W" "$tmp/int" 3 F32 --int $Q
expect wrong-dtype 1 "$R $tmp/int/$IDX does not hold this graph's weights: '$Q' is I32 in $S3 (F32, F16, BF16 or F64 convert) (1 of 62 weights)" r "$tmp/int"
ck shards "$W" "$tmp/dup" 3 F32 --dup $Q
expect in-two-shards 1 "dtpc: ranks 0-1: malformed graph or checkpoint: $tmp/dup/$IDX: tensor '$Q' is in two shards, $S1 and $S3" r "$tmp/dup"
ck shards "$W" "$tmp/gone" 3 F32 && rm "$tmp/gone/$S2"
expect shard-file-missing 2 "dtpc: ranks 0-1: I/O error: $tmp/gone/$IDX: weight_map puts 'time_text_embed.text_embedder.linear_1.bias' in $S2: $tmp/gone/$S2: cannot open: No such file or directory" r "$tmp/gone"
ck shards "$W" "$tmp/junk" 3 F32 && printf 'not safetensors' >"$tmp/junk/$S2"
expect damaged-shard 1 "dtpc: ranks 0-1: malformed graph or checkpoint: $tmp/junk/$IDX: weight_map puts 'time_text_embed.text_embedder.linear_1.bias' in $S2: $tmp/junk/$S2: header length 7306634592548843374 runs past the end of the file (15 bytes)" r "$tmp/junk"
# index edits: ../ and absolute paths, a tensor put in the wrong shard, broken JSON
edit() { # edit DIR SED-SCRIPT: a copy of s3 with its index edited
	mkdir "$tmp/$1" && cp "$tmp/s3/"* "$tmp/$1/" && sed -i "$2" "$tmp/$1/$IDX"
}
L=$(grep -n "\"$Q\"" "$tmp/s3/$IDX" | cut -d: -f1)
edit up "/\"$Q\"/s|\"diffusion[^\"]*\"|\"../$S2\"|"
expect index-escapes-up 1 "dtpc: ranks 0-1: malformed graph or checkpoint: $tmp/up/$IDX:$L: weight_map: '$Q' names '../$S2', which leaves the index's folder (a '..' component)" r "$tmp/up"
edit abs "/\"$Q\"/s|\"diffusion[^\"]*\"|\"/etc/passwd\"|"
expect index-absolute 1 "dtpc: ranks 0-1: malformed graph or checkpoint: $tmp/abs/$IDX:$L: weight_map: '$Q' names '/etc/passwd', which is absolute; shard paths are relative to the index's folder" r "$tmp/abs"
edit moved "/\"$Q\"/s|0000[0-9]-of|00001-of|"
expect index-wrong-shard 1 "dtpc: ranks 0-1: malformed graph or checkpoint: $tmp/moved/$IDX: weight_map puts '$Q' in $S1, but it is in $S3" r "$tmp/moved"
edit broken "${L}s|,\$|,,|"
expect index-not-json 1 "dtpc: ranks 0-1: malformed graph or checkpoint: $tmp/broken/$IDX:$L: not valid JSON (at byte $(($(head -n "$L" "$tmp/s3/$IDX" | wc -c) + 0)))" r "$tmp/broken"
edit twice "${L}s|^\(.*\)\$|\1\n\1|"
expect index-tensor-twice 1 "dtpc: ranks 0-1: malformed graph or checkpoint: $tmp/twice/$IDX:$((L + 1)): weight_map: '$Q' appears twice" r "$tmp/twice"
# folders that are not one checkpoint
mkdir "$tmp/two" && cp "$W" "$tmp/two/a.safetensors" && cp "$W" "$tmp/two/b.safetensors"
expect two-files 1 "dtpc: ranks 0-1: malformed graph or checkpoint: $tmp/two: holds 2 safetensors files (a.safetensors, b.safetensors), no index and none is diffusion_pytorch_model.safetensors; give --weights the file to use" r "$tmp/two"
mkdir "$tmp/empty"
expect no-weights 1 "dtpc: ranks 0-1: malformed graph or checkpoint: $tmp/empty: holds no safetensors file, no *.safetensors.index.json and no per-rank files (rank-00000-of-0000N.safetensors)" r "$tmp/empty"
expect missing-path 2 "dtpc: cannot read '$tmp/nothing': No such file or directory" r "$tmp/nothing"

# ---- hostile per-rank folders ----------------------------------------------------------------
P="$tmp/per-tp2"
expect per-rank-other-mesh 1 "dtpc: rank 0: weight or input binding failed: $P/rank-00000-of-00002.safetensors: the same weights cut for another graph (plan flux_fixture_tp, mesh tp=2); this graph (plan flux_fixture_cp, mesh ulysses=2) binds other slices: shard them again with dtpc shard" \
	"$DTPC" run "$tmp/u2.graph" --inputs "$IN" --weights "$P"
expect per-rank-other-world 1 "dtpc: rank 0: weight or input binding failed: $P: sharded for 2 ranks (rank-00000-of-00002.safetensors, ...), but this graph runs on 1; shard the weights for this graph with dtpc shard" \
	"$DTPC" run "$tmp/one.graph" --inputs "$IN" --weights "$P"
mkdir "$tmp/lost" && cp "$P/rank-00000-of-00002.safetensors" "$tmp/lost/"
expect per-rank-file-missing 1 "dtpc: ranks 0-1: malformed graph or checkpoint: $tmp/lost: rank-00001-of-00002.safetensors is missing (1 of the 2 per-rank files are there)" r "$tmp/lost"
mkdir "$tmp/swapped" && cp "$P/rank-00000-of-00002.safetensors" "$tmp/swapped/rank-00001-of-00002.safetensors" &&
	cp "$P/rank-00001-of-00002.safetensors" "$tmp/swapped/rank-00000-of-00002.safetensors"
expect per-rank-renamed 1 "dtpc: rank 0: weight or input binding failed: $tmp/swapped/rank-00000-of-00002.safetensors: holds rank 1's slices, not rank 0's (renamed?)" r "$tmp/swapped"
mkdir "$tmp/forged" && cp "$P"/* "$tmp/forged/" && ck setmeta "$tmp/forged/rank-00000-of-00002.safetensors" dtpc.weights 0123456789abcdef
expect per-rank-other-weights 1 "dtpc: rank 0: weight or input binding failed: $tmp/forged/rank-00000-of-00002.safetensors: sharded from other weights (plan flux_fixture_tp, mesh tp=2): their names or shapes differ from this graph's (plan flux_fixture_tp, mesh tp=2)" r "$tmp/forged"
mkdir "$tmp/reshaped" && cp "$P"/* "$tmp/reshaped/" && ck flatten "$tmp/reshaped/rank-00001-of-00002.safetensors" $Q
expect per-rank-mis-shaped 1 "dtpc: rank 1: weight or input binding failed: $tmp/reshaped/rank-00001-of-00002.safetensors: weight '$Q' has shape [512], but this rank's slice is [16, 32]" r "$tmp/reshaped"
mkdir "$tmp/plain" && cp "$P"/* "$tmp/plain/" && cp "$W" "$tmp/plain/rank-00000-of-00002.safetensors"
expect per-rank-not-from-dtpc-shard 1 "dtpc: rank 0: weight or input binding failed: $tmp/plain/rank-00000-of-00002.safetensors: not written by dtpc shard (no dtpc.shard in its metadata)" r "$tmp/plain"
mkdir "$tmp/mixed" && cp "$P"/* "$W" "$tmp/mixed/"
expect per-rank-mixed 1 "dtpc: ranks 0-1: malformed graph or checkpoint: $tmp/mixed: holds per-rank files (rank-00000-of-00002.safetensors, rank-00001-of-00002.safetensors) and a checkpoint (flux.weights.safetensors); keep them in separate folders" r "$tmp/mixed"
expect per-rank-inputs 2 "dtpc: cannot read '$P': not a regular file" \
	"$DTPC" run "$G" --weights "$P" --inputs "$P"

expect per-rank-verify 2 "dtpc: --verify: '$P' is a per-rank folder (dtpc shard): it holds this graph's slices, not the whole weights the one-rank reference needs; verify with the checkpoint it was cut from" \
	"$DTPC" run "$G" --inputs "$IN" --weights "$P" --verify
# the one-rank reference of --verify reads the shards as the ranks do
if "$DTPC" run "$G" --inputs "$IN" --weights "$tmp/b3" --verify >"$tmp/out" 2>&1; then ok; else
	bad verify-from-bf16-shards
	sed 's/^/    /' "$tmp/out" | head -5
fi

# ---- dtpc shard's own errors -------------------------------------------------------------------
expect shard-needs-out 2 "dtpc: shard needs --weights CHECKPOINT and --out FOLDER" "$DTPC" shard "$G" --weights "$W"
expect shard-out-not-empty 2 "dtpc: shard: --out '$tmp/two' holds 'a.safetensors'; give an empty or new folder (or one sharded before for 2 ranks)" \
	"$DTPC" shard "$G" --weights "$W" --out "$tmp/two"
expect shard-from-per-rank 1 "dtpc: shard: $P is already a per-rank folder; shard the checkpoint it came from" \
	"$DTPC" shard "$G" --weights "$P" --out "$tmp/again"
expect shard-other-model 1 "dtpc: shard: $FIX/wan.weights.safetensors does not hold this graph's weights: 'context_embedder.bias' is missing; 'context_embedder.weight' is missing; 'norm_out.linear.bias' is missing, ... (62 of 62 weights)" \
	"$DTPC" shard "$G" --weights "$FIX/wan.weights.safetensors" --out "$tmp/wan"
# sharding again into its own folder overwrites it
expect shard-again 0 "$P/rank-00001-of-00002.safetensors: 62 tensors, 198864 bytes" "$DTPC" shard "$G" --weights "$W" --out "$P"

summary weights
