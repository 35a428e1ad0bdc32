#!/bin/sh
# ppr_zero.sh BUILD_DIR - ZeRO-1 (--zero 1) changes no bit and keeps 1/Z of the moments: on each
# mesh below the program compiled with --zero 1 runs five clipped AdamW steps (--clip 1: tiny's
# gradient norm is 2.5-3.3, so the clip acts) and gives the losses, the first step's summed
# gradients, the final weights and the AdamW moments of --zero 0 on the same mesh, element for
# element (compare.py at tolerance 0): the reduce-scatter sums each element in the group's rank
# order as the all-reduce does, each rank updates its shard with the same kernel, the gradient
# norm adds the same partials (compiler/fuse_adamw.c, runtime/rt_exec.c). The meshes: dp 2, dp 4,
# tp 2 x pp 2 x dp 2, dp 2 x cp 2 (the group is dp x cp), bf16, and the opencl device. Each
# rank's moments (regions adam_m, adam_v) are at most 1/Z of zero 0's and a shard's padding. A
# checkpoint saved at dp 4 with zero resumes at dp 2 without it and on one rank, and the resumed
# steps' losses are within 1e-5 of the uninterrupted run's (another summation order, as any
# change of mesh; ppr_resume.sh); resumed on its own mesh, the run ends on the same bytes as one
# that was never stopped. A zero compile's generation programs (no optimizer, nothing sharded)
# sample beside its training. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_zero.sh BUILD_DIR}
. tests/scripts/lib/common.sh
. tests/scripts/lib/compare.sh
export PPC_CACHE="$tmp/cache"
needs_python3 ppr_zero
args="--seed 7"

region() { sed -n "s/^region $1 *[0-9][0-9]* \\([0-9][0-9]*\\).*/\\1/p" "$2" | head -n 1; }

# case NAME NP Z "PPC FLAGS" [PPR ARGS]: --zero 1 against --zero 0 on the same mesh; Z: the shards
case_() {
  name=$1 np=$2 z=$3 flags=$4
  shift 4
  for zero in 0 1; do
    # shellcheck disable=SC2086
    if ! "$ppc" examples/tiny.pdl $flags --zero $zero -o "$tmp/z$zero" >"$tmp/ppc.txt" 2>&1; then
      bad "$name, --zero $zero: ppc failed: $(head -n 3 "$tmp/ppc.txt")"
      return
    fi
    run5 "$np" "z$zero" "z$zero" "$@" || { bad "$name, --zero $zero: ppr failed"; return; } # compare.sh
  done
  if same_losses "$tmp/z1.losses" "$tmp/z0.losses" 0 && tensors "$tmp/z1.g.safetensors" "$tmp/z0.g.safetensors" 0 &&
    tensors "$tmp/z1.w.safetensors" "$tmp/z0.w.safetensors" 0 &&
    tensors "$tmp/z1.w.optimizer.safetensors" "$tmp/z0.w.optimizer.safetensors" 0; then
    ok "$name: --zero 1 gives --zero 0's losses, gradients, weights and moments bit for bit"
  else bad "$name: --zero 1 against --zero 0"; fi
  m0=$(region adam_m "$tmp/z0/rank0.prog") m1=$(region adam_m "$tmp/z1/rank0.prog")
  v1=$(region adam_v "$tmp/z1/rank0.prog")
  # a shard: ceil(part / Z) rounded up to 64 bytes' worth (32 elements in bf16), for each of the two parts
  if [ -n "$m1" ] && [ "$m1" = "$v1" ] && [ "$((m1 * z))" -le "$((m0 + 2 * z * 128))" ]; then
    ok "$name: moments $m1 bytes a rank with --zero 1, $m0 without ($z shards)"
  else bad "$name: moments ${m1:-?} bytes a rank with --zero 1 (adam_v ${v1:-?}), ${m0:-?} without ($z shards)"; fi
}

case_ "tiny, dp 2" 2 2 "--dp 2 --microbatches 4"
case_ "tiny, dp 4" 4 4 "--dp 4 --microbatches 4"
case_ "tiny, tp 2 x pp 2 x dp 2" 8 2 "--tp 2 --pp 2 --dp 2 --microbatches 4"
case_ "tiny, dp 2 x cp 2" 4 4 "--dp 2 --cp 2 --microbatches 4"
case_ "tiny, dp 2, bf16" 2 2 "--dp 2 --microbatches 4 --precision bf16"
case_ "tiny, dp 2, opencl" 2 2 "--dp 2 --microbatches 4" --device opencl

# saved at dp 4 with zero after 3 of 6 steps, resumed at dp 2 without it and on one rank
opts="--quiet --lr-schedule cosine --warmup 2 --clip 1.0"
"$ppc" examples/tiny.pdl --dp 4 --microbatches 4 --zero 1 -o "$tmp/d4" >/dev/null 2>&1
"$ppc" examples/tiny.pdl --dp 2 --microbatches 4 -o "$tmp/d2" >/dev/null 2>&1
"$ppc" examples/tiny.pdl --microbatches 4 -o "$tmp/d1" >/dev/null 2>&1
# shellcheck disable=SC2086
expect "dp 4, zero: 6 steps, --save-every 3" $MPIRUN -np 4 "$ppr" "$tmp/d4" --steps 6 $opts --save "$tmp/s4" \
  --save-every 3 --log "$tmp/s4.jsonl"
losses "$tmp/s4.jsonl" | tail -n 3 >"$tmp/s4.tail"
resumed() {
  name=$1
  shift
  # shellcheck disable=SC2086
  rm -f "$tmp/r.jsonl"
  if "$@" --steps 6 $opts --resume "$tmp/s4/step-000003" --log "$tmp/r.jsonl" --save "$tmp/r" >"$tmp/out.txt" 2>&1 &&
    losses "$tmp/r.jsonl" >"$tmp/r.loss" && [ "$(wc -l <"$tmp/r.loss")" -eq 3 ] &&
    paste "$tmp/s4.tail" "$tmp/r.loss" |
    awk '{d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1)) bad = 1} END {exit bad}'; then
    ok "dp 4 with zero -> $name: steps 4 to 6 within 1e-5 of the uninterrupted run"
  else bad "dp 4 with zero -> $name: $(tail -n 2 "$tmp/out.txt") $(paste "$tmp/s4.tail" "$tmp/r.loss" 2>/dev/null | tr '\n' ' ')"; fi
}
resumed "dp 2 without zero" $MPIRUN -np 2 "$ppr" "$tmp/d2"
resumed "one rank" "$ppr" "$tmp/d1"
# the same program resumed: each rank takes its shard of the saved moments; the end is the same bytes
# shellcheck disable=SC2086
if $MPIRUN -np 4 "$ppr" "$tmp/d4" --steps 6 $opts --resume "$tmp/s4/step-000003" --save "$tmp/s4b" >"$tmp/out.txt" 2>&1 &&
  cmp -s "$tmp/s4/step-000006/model.safetensors" "$tmp/s4b/step-000006/model.safetensors" &&
  cmp -s "$tmp/s4/step-000006/trainer/optimizer.safetensors" "$tmp/s4b/step-000006/trainer/optimizer.safetensors"; then
  ok "dp 4 with zero -> itself: 3 + resumed 3 steps, the weights and moments byte-identical to 6 steps"
else bad "dp 4 with zero -> itself: $(tail -n 2 "$tmp/out.txt")"; fi

# the generation programs of a zero compile (no optimizer: nothing sharded) sample beside training
if "$ppc" examples/tiny.pdl --dp 2 --microbatches 2 --zero 1 --generate -o "$tmp/g" >"$tmp/ppc.txt" 2>&1 &&
  $MPIRUN -np 2 "$ppr" "$tmp/g" --steps 2 --quiet --sample-every 2 >"$tmp/out.txt" 2>&1 &&
  grep -q '^sample after step 2: ' "$tmp/out.txt"; then ok "dp 2 with zero and --generate: a sample after step 2"
else bad "dp 2 with zero and --generate: $(tail -n 2 "$tmp/ppc.txt" "$tmp/out.txt")"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
