#!/bin/sh
# ppr_keep_probs.sh BUILD_DIR - attention = gemm with attention_probs = keep: the forward's softmax probabilities saved for
# the backward instead of recomputed there (the scores' product again and an exponential a score).
# examples/tiny.pdl on the tiny_minimind fixture: the listing saves a probs buffer per layer and has
# neither the recomputed scores nor the attention_probs kernel; one rank against PyTorch (five
# clipped AdamW steps: losses 1e-5, first-step gradients and final weights 1e-4); the recomputing
# program (the probabilities differ in their last bits: exp(s - max) / sum against exp(s - lse)),
# tp 2 x pp 2, pp 2 zb-h1 and the opencl device against the one rank (losses 1e-6, first-step
# gradients 1e-5, weights after five AdamW steps 1e-4: the recomputing program's own meshes differ
# from its one rank by 2e-5 there); the train block's setting as the flag; a bad value gets an error,
# and so does keep with the fused attention.
# Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_keep_probs.sh BUILD_DIR}
. tests/scripts/lib/common.sh
. tests/scripts/lib/compare.sh
export PPC_CACHE="$tmp/cache"
needs_python3 ppr_keep_probs
fx=tests/fixtures/tiny_minimind model=examples/tiny.pdl
args="--init $fx/weights.safetensors --data $fx/tokens.bin --lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --wd 0.1"

python3 -c 'import json,sys; [print(x) for x in json.load(open(sys.argv[1]))["losses5"]]' "$fx/expected.json" \
  >"$tmp/torch.losses"

"$ppc" "$model" --attention gemm --attention-probs keep -o "$tmp/one" >"$tmp/ppc.txt" 2>&1 || cat "$tmp/ppc.txt"
"$ppc" "$model" --attention gemm -o "$tmp/re" >"$tmp/ppc.txt" 2>&1 || cat "$tmp/ppc.txt"
layers=$(grep -c '^buffer probs[0-9]* f32 \[8,16,16\] .* saved$' "$tmp/one/rank0.prog")
if [ "$layers" = 4 ] && ! grep -q 'attention_probs\|the scores again' "$tmp/one/rank0.prog" &&
  grep -q 'attention_probs' "$tmp/re/rank0.prog" && grep -q 'the scores again' "$tmp/re/rank0.prog"; then
  ok "keep: a saved [8,16,16] probs buffer per layer, no recomputed scores and no attention_probs kernel"
else bad "keep's listing: $layers probs buffers ($(grep -c 'attention_probs' "$tmp/one/rank0.prog") attention_probs)"; fi

if run5 1 one one && same_losses "$tmp/one.losses" "$tmp/torch.losses" 1e-5 &&
  tensors "$tmp/one.g.safetensors" "$fx/grads.safetensors" 1e-4 &&
  tensors "$tmp/one.w.safetensors" "$fx/updated5.safetensors" 1e-4; then
  ok "one rank equals PyTorch: 5 losses 1e-5, gradients and weights 1e-4 ($(tr '\n' ' ' <"$tmp/one.losses"))"
else bad "keep on one rank against PyTorch"; fi
if run5 1 re re && same_losses "$tmp/one.losses" "$tmp/re.losses" 1e-6 &&
  tensors "$tmp/one.g.safetensors" "$tmp/re.g.safetensors" 1e-5 && tensors "$tmp/one.w.safetensors" "$tmp/re.w.safetensors" 1e-4; then
  ok "keep and recompute agree: losses 1e-6, gradients 1e-5, weights 1e-4"
else bad "keep against recompute: $(tr '\n' ' ' <"$tmp/one.losses") against $(tr '\n' ' ' <"$tmp/re.losses")"; fi

for mesh in "4 --tp 2 --pp 2" "2 --pp 2 --schedule zb-h1"; do
  set -- $mesh
  np=$1
  shift
  "$ppc" "$model" --attention gemm --attention-probs keep "$@" -o "$tmp/mesh" >"$tmp/ppc.txt" 2>&1 || cat "$tmp/ppc.txt"
  if run5 "$np" mesh mesh && same_losses "$tmp/mesh.losses" "$tmp/one.losses" 1e-6 &&
    tensors "$tmp/mesh.g.safetensors" "$tmp/one.g.safetensors" 1e-5 &&
    tensors "$tmp/mesh.w.safetensors" "$tmp/one.w.safetensors" 1e-4; then
    ok "$*: the one rank's (losses 1e-6, gradients 1e-5, weights 1e-4: $(tr '\n' ' ' <"$tmp/mesh.losses"))"
  else bad "keep on $*: against one rank"; fi
done

if run5 1 one cl --device opencl && same_losses "$tmp/cl.losses" "$tmp/one.losses" 1e-6 &&
  tensors "$tmp/cl.w.safetensors" "$tmp/one.w.safetensors" 1e-4; then
  ok "the opencl device: the cpu's losses (1e-6) and weights (1e-4)"
else bad "keep on opencl: $(tr '\n' ' ' <"$tmp/cl.losses") against $(tr '\n' ' ' <"$tmp/one.losses")"; fi

# the train block's setting is the flag; the flag overrides it; a bad value is an error at its place
sed 's/^train {/train { attention = gemm, attention_probs = keep,/' "$model" >"$tmp/keep.pdl"
"$ppc" "$tmp/keep.pdl" -o "$tmp/set" >"$tmp/ppc.txt" 2>&1 || cat "$tmp/ppc.txt"
"$ppc" "$tmp/keep.pdl" --attention-probs recompute -o "$tmp/back" >"$tmp/ppc.txt" 2>&1 || cat "$tmp/ppc.txt"
if grep -q '^train { attention = gemm, attention_probs = keep,' "$tmp/keep.pdl" && grep -q '^buffer probs[0-9]* .* saved$' "$tmp/set/rank0.prog" &&
  ! grep -q '^buffer probs[0-9]* .* saved$' "$tmp/back/rank0.prog"; then
  ok "train { attention_probs = keep } keeps them; --attention-probs recompute overrides it"
else bad "the attention_probs setting"; fi
sed 's/^train {/train { attention_probs = always,/' "$model" >"$tmp/bad.pdl"
if ! "$ppc" "$tmp/bad.pdl" >"$tmp/err.txt" 2>&1 && grep -q 'bad.pdl:[0-9]*:[0-9]*: error: attention_probs is keep or recompute' "$tmp/err.txt" &&
  ! "$ppc" "$model" --attention-probs sometimes >"$tmp/err2.txt" 2>&1 &&
  grep -q "attention-probs expects keep or recompute, got 'sometimes'" "$tmp/err2.txt"; then
  ok "a bad value: $(head -n 1 "$tmp/err.txt" | sed "s|$tmp/||")"
else bad "a bad attention_probs: $(cat "$tmp/err.txt" "$tmp/err2.txt")"; fi
sed 's/^train {/train { attention_probs = keep,/' "$model" >"$tmp/fusedkeep.pdl"
if ! "$ppc" "$tmp/fusedkeep.pdl" >"$tmp/err.txt" 2>&1 &&
  grep -q 'fusedkeep.pdl:[0-9]*:[0-9]*: error: attention_probs = keep applies to attention = gemm' "$tmp/err.txt" &&
  ! "$ppc" "$model" --attention-probs keep >"$tmp/err2.txt" 2>&1 &&
  grep -q "error: attention_probs = keep applies to attention = gemm" "$tmp/err2.txt" &&
  ! "$ppc" "$model" --attention flash >"$tmp/err3.txt" 2>&1 &&
  grep -q "attention expects fused or gemm, got 'flash'" "$tmp/err3.txt"; then
  ok "keep with the fused attention: $(head -n 1 "$tmp/err.txt" | sed "s|$tmp/||")"
else bad "keep with the fused attention: $(cat "$tmp/err.txt" "$tmp/err2.txt" "$tmp/err3.txt")"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
