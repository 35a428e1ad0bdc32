#!/bin/sh
# ppr_recompute.sh BUILD_DIR - activation recomputation changes no bit: for each mesh below, the
# programs compiled with --recompute selective and --recompute full (and full over a range of
# layers) run five clipped AdamW steps (--clip 1) from the same seed and give the losses, the
# first step's gradients and the final weights of --recompute none on the same mesh, element for
# element (compare.py at tolerance 0): the copies are the forward's own instructions on the same
# inputs (compiler/recompute.c). The meshes: one rank (and full over layers 1..3); pp 4 under 1f1b
# and zb-h1 (W reads what B recomputed); pp 2 under zbv (two chunks a rank); tp 2 with the GEMM
# attention keeping its probabilities; tp 2 x pp 2 with sp; cp 2; bf16; tiny_dropout (the masks
# come from the same counters); the opencl device. And each plan keeps less: full keeps at most a
# quarter of none's slot bytes on minimind at seq 1024, selective less than none. Last line:
# "N passed, M failed".
set -u
build=${1:?usage: ppr_recompute.sh BUILD_DIR}
. tests/scripts/lib/common.sh
. tests/scripts/lib/compare.sh
export PPC_CACHE="$tmp/cache"
needs_python3 ppr_recompute
args="--seed 11"

# case NAME NP MODEL "PPC FLAGS" [PPR ARGS]: none, and each of $modes (MODE or MODE:MORE-FLAGS) alike
modes="selective full"
case_() {
  name=$1 np=$2 model=$3 flags=$4
  shift 4
  i=0
  for rc in none $modes; do
    i=$((i + 1))
    case $rc in *:*) extra=${rc#*:} ;; *) extra= ;; esac
    # shellcheck disable=SC2086
    if ! "$ppc" "$model" $flags --recompute ${rc%%:*} $extra -o "$tmp/r$i" >"$tmp/ppc.txt" 2>&1; then
      bad "$name, --recompute $rc: ppc failed: $(head -n 3 "$tmp/ppc.txt")"
      continue
    fi
    if ! run5 "$np" "r$i" "r$i" "$@"; then # compare.sh
      bad "$name, --recompute $rc: ppr failed"
      continue
    fi
    [ $i -eq 1 ] && continue
    if same_losses "$tmp/r$i.losses" "$tmp/r1.losses" 0 && tensors "$tmp/r$i.g.safetensors" "$tmp/r1.g.safetensors" 0 &&
      tensors "$tmp/r$i.w.safetensors" "$tmp/r1.w.safetensors" 0; then
      ok "$name, --recompute $rc: losses, gradients and weights as none's, bit for bit"
    else bad "$name, --recompute $rc: differs from none"; fi
  done
}

modes="selective full full:--recompute-layers=1..3" # a range: layers 1 and 2 alone
case_ "tiny, one rank" 1 examples/tiny.pdl ""
modes="selective full"
case_ "tiny, pp 4, 1f1b" 4 examples/tiny.pdl "--pp 4 --microbatches 4"
case_ "tiny, pp 4, zb-h1" 4 examples/tiny.pdl "--pp 4 --microbatches 4 --schedule zb-h1"
case_ "tiny, pp 2, zbv (2 chunks a rank)" 2 examples/tiny.pdl "--pp 2 --microbatches 4 --schedule zbv --vpp 2"
case_ "tiny, tp 2, attention gemm, probabilities kept" 2 examples/tiny.pdl "--tp 2 --attention gemm --attention-probs keep"
case_ "tiny, tp 2 x pp 2, sp" 4 examples/tiny.pdl "--tp 2 --pp 2 --sp --microbatches 2"
case_ "tiny, cp 2" 2 examples/tiny.pdl "--cp 2"
case_ "tiny, bf16, pp 2" 2 examples/tiny.pdl "--precision bf16 --pp 2 --microbatches 2"
case_ "tiny_dropout, pp 2" 2 tests/models/tiny_dropout.pdl "--pp 2 --microbatches 2"
case_ "tiny, opencl, pp 2, bf16" 2 examples/tiny.pdl "--pp 2 --microbatches 2 --precision bf16" --device opencl

# the plans: slot bytes a micro-batch on minimind at seq 1024
slot() {
  "$ppc" examples/minimind.pdl --seq 1024 --micro-batch 1 --microbatches 1 --recompute "$1" --emit program 2>/dev/null |
    sed -n 's/^region slots *[0-9][0-9]* \([0-9][0-9]*\).*/\1/p'
}
none=$(slot none) sel=$(slot selective) full=$(slot full)
if [ -n "$none" ] && [ -n "$full" ] && [ -n "$sel" ] && [ "$((full * 4))" -le "$none" ] && [ "$sel" -lt "$none" ]; then
  ok "minimind at seq 1024: slots $none bytes (none), $sel (selective), $full (full, at most a quarter)"
else bad "minimind at seq 1024: slots ${none:-?} (none), ${sel:-?} (selective), ${full:-?} (full)"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
