#!/bin/sh
# ppr_vocab_pad.sh BUILD_DIR - the vocabulary padded (train { vocab_pad }, ppc --vocab-pad; the
# default 64): tests/models/tiny_pad.pdl's 250-row tied table becomes 256 rows on one rank (128 a
# rank over tp 2), its head's GEMMs 256 wide, the cross-entropy masking the 6 padded logits. Five
# clipped AdamW steps of each program against the same mesh unpadded (--vocab-pad 1): losses within
# 1e-6 (observed 1.2e-7), first-step gradients within 5e-6 (observed 6.5e-7: the head's GEMMs sum
# 256 columns where they summed 250, in another order), the weights after within 2e-5 (observed
# 1.9e-6: AdamW's m/sqrt(v) turns a gradient's last bits into more of an element whose v is
# small); the checkpoints hold the 250-row tensor. One rank, tp 2, pp 2 (the table on both
# stages, padded alike), bf16 (the same losses here), the opencl device. A padded program starts
# from an unpadded one's checkpoint and the other way round; the listing's `shard` line says the
# padding (not past the last rank's first row); a head with a bias keeps its table unpadded on
# every stage; a bad value is an error. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_vocab_pad.sh BUILD_DIR}
. tests/scripts/lib/common.sh
. tests/scripts/lib/compare.sh
export PPC_CACHE="$tmp/cache"
needs_python3 ppr_vocab_pad
model=tests/models/tiny_pad.pdl
args="--seed 7"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 # one rank as each mesh rank runs ($MPIRUN)

compile() { # DIR ARGS...
  dir=$1
  shift
  "$ppc" "$model" "$@" -o "$tmp/$dir" >"$tmp/ppc.txt" 2>&1 || { cat "$tmp/ppc.txt"; return 1; }
}
# worst: the largest relative error of the last tensors() comparison
worst() { sed -n 's/.* rel=\([^ ]*\) .*/\1/p' "$tmp/cmp.txt" | sort -g | tail -n 1; }
# same TAG REF WHAT: run TAG's losses within 1e-6 of run REF's, its gradients 5e-6, its weights 2e-5
same() {
  if same_losses "$tmp/$1.losses" "$tmp/$2.losses" 1e-6 && tensors "$tmp/$1.g.safetensors" "$tmp/$2.g.safetensors" 5e-6 &&
    wg=$(worst) && tensors "$tmp/$1.w.safetensors" "$tmp/$2.w.safetensors" 2e-5; then
    ok "$3 (gradients $wg, weights $(worst))"
  else bad "$3"; fi
}

# the listings
compile p64 && compile p1 --vocab-pad 1 && compile p100 --vocab-pad 100 && compile t2 --tp 2 &&
  compile t2u --tp 2 --vocab-pad 1 && compile pp2 --pp 2 --microbatches 4 &&
  compile pp2u --pp 2 --microbatches 4 --vocab-pad 1 && compile b64 --precision bf16 &&
  compile b1 --precision bf16 --vocab-pad 1 || bad "ppc failed"
listing() { # WHAT DIR PATTERN: the rank-0 listing has a line matching PATTERN
  if grep -qE -- "$3" "$tmp/$2/rank0.prog"; then ok "$1"; else bad "$1: no line matching '$3'"; fi
}
listing "the default pads the 250 rows to 256" p64 "^param 0 model.embed_tokens.weight f32 \[256,64\] .* shard 0 0 256 250$"
listing "the head's product is 256 wide" p64 "^  gemm N T 32 256 64 .* 256 0 1 .*logits$"
listing "--vocab-pad 100: 300 rows" p100 "^param 0 model.embed_tokens.weight f32 \[300,64\] .* shard 0 0 300 250$"
listing "tp 2: 128 rows a rank" t2 "^param 0 model.embed_tokens.weight f32 \[128,64\] .* shard 0 0 128 250$"
compile t4p100 --tp 4 --vocab-pad 100 &&
  listing "tp 4, --vocab-pad 100: 63 rows a rank (100 would leave rank 3 no row)" t4p100 \
    "^param 0 model.embed_tokens.weight f32 \[63,64\] .* shard 0 0 63 250$"
listing "pp 2: the embedding's stage pads the table" pp2 "^param 0 model.embed_tokens.weight f32 \[256,64\] .* shard 0 0 256 250$"
if grep -qE "^param [0-9]+ model.embed_tokens.weight f32 \[256,64\] .* shard 0 0 256 250$" "$tmp/pp2/rank1.prog"; then
  ok "pp 2: the head's stage pads it alike"
else bad "pp 2: the head's stage pads it alike"; fi
listing "bf16: 256 rows" b64 "^param 0 model.embed_tokens.weight f32 \[256,64\] .* shard 0 0 256 250$"
if grep -q "shard" "$tmp/p1/rank0.prog"; then bad "--vocab-pad 1 pads nothing: a shard line"; else
  ok "--vocab-pad 1 pads nothing"
fi
# a head with a bias is not padded, and the whole model decides: the embedding's stage alike
sed 's/^logits = transpose_sb(linear(rmsnorm(x, norm, eps = 1e-6), embed)).*/param hb: [vocab] as "lm_head.bias" init zeros\
logits = transpose_sb(linear(rmsnorm(x, norm, eps = 1e-6), embed, hb))/' "$model" >"$tmp/hb.pdl"
if grep -q "embed, hb" "$tmp/hb.pdl" && "$ppc" "$tmp/hb.pdl" --pp 2 -o "$tmp/hb" >"$tmp/ppc.txt" 2>&1 &&
  grep -q "^param 0 model.embed_tokens.weight f32 \[250,64\]" "$tmp/hb/rank0.prog" &&
  grep -q "^param 12 model.embed_tokens.weight f32 \[250,64\]" "$tmp/hb/rank1.prog"; then
  ok "a head with a bias: the table unpadded on both stages of pp 2"
else bad "a head with a bias: the table unpadded on both stages of pp 2"; fi
sed 's/microbatches = 2,/microbatches = 2, vocab_pad = 100,/' "$model" >"$tmp/set.pdl"
if "$ppc" "$tmp/set.pdl" -o "$tmp/set" >"$tmp/ppc.txt" 2>&1 && grep -q "shard 0 0 300 250$" "$tmp/set/rank0.prog"; then
  ok "train { vocab_pad = 100 } pads to 300 rows"
else bad "train { vocab_pad = 100 }"; fi

# the runs, each against the same mesh unpadded
run5 1 p1 one && run5 1 p64 pad && same pad one "padded, one rank: as unpadded"
run5 2 t2u t2u && run5 2 t2 t2 && same t2 t2u "padded, tp 2: as unpadded"
run5 2 pp2u pp2u && run5 2 pp2 pp2 && same pp2 pp2u "padded, pp 2 (the tied table on both stages): as unpadded"
run5 1 b1 bone && run5 1 b64 bpad && same bpad bone "padded, bf16: as unpadded"
run5 1 p1 clu --device opencl && run5 1 p64 cl --device opencl && same cl clu "padded, the opencl device: as unpadded"

# checkpoints: each program starts from the other's dense tensors
args=
run5 1 p1 from_pad --init "$tmp/pad.w.safetensors" && run5 1 p64 pad_again --init "$tmp/pad.w.safetensors" &&
  same from_pad pad_again "an unpadded program from a padded run's checkpoint: as the padded program"
run5 1 p64 from_one --init "$tmp/one.w.safetensors" && run5 1 p1 one_again --init "$tmp/one.w.safetensors" &&
  same from_one one_again "a padded program from an unpadded run's checkpoint: as the unpadded program"

# bad values
expect_fail "--vocab-pad 0" "--vocab-pad" "$ppc" "$model" --vocab-pad 0 -o "$tmp/bad"
sed 's/microbatches = 2,/microbatches = 2, vocab_pad = 0,/' "$model" >"$tmp/zero.pdl"
expect_fail "vocab_pad = 0" "zero.pdl:14:66: error: 'vocab_pad' must be between 1" "$ppc" "$tmp/zero.pdl" -o "$tmp/bad"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
