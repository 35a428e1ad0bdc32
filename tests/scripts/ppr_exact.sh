#!/bin/sh
# ppr_exact.sh BUILD_DIR - a pipeline changes no sum: every pipeline-only mesh reproduces the
# one-rank run bit for bit. test_pipeline.c requires it of its pipeline-only meshes of tied models
# (tiny, odd5, odd9: every schedule); this script of tests/models/tiny_untied.pdl, an untied head,
# and of tiny beside it, at M = 4 (8 with pp 4): three clipped AdamW steps (--clip 1; tiny's norm
# is 2.5-3.3, so the clip acts) on seeded weights, each schedule's losses, first-step gradients and
# final weights equal to one rank's, element for element (compare.py at tolerance 0). It holds because
# every stage adds each sum in the one-rank program's order: the split backward (zb-h1, zbv)
# accumulates q, k and v's input gradients, which W reads, where they are kept, as one rank does
# (fuse_lower.c); a tied parameter's embedding gradient is summed over the micro-batches apart from
# the head's on every mesh and the two added once (fuse_lower.c, fuse_adamw.c); the gradient norm
# sums each parameter's squares in blocks of its own (rt_exec.c), so the clip factor is the same
# float (the ranks' double sums associate by rank: their last bit could reach it only at a float
# rounding boundary). Tensor, data and context parallelism split sums over ranks and are held to
# limits instead (test_pipeline.c, ppr_masked.sh). Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_exact.sh BUILD_DIR}
. tests/scripts/lib/common.sh
. tests/scripts/lib/compare.sh
export PPC_CACHE="$tmp/cache"
needs_python3 ppr_exact
args="--seed 7"

# run3 NP DIR: three clipped steps of $tmp/DIR on NP ranks: DIR.losses, DIR.g/w.safetensors
run3() {
  # one rank on one thread, as each of the mesh's ranks runs ($MPIRUN): OpenBLAS's AVX2 kernels
  # (a CPU without AVX-512) give a part of C other bits when a GEMM is shared over threads
  if [ "$1" -gt 1 ]; then launch="$MPIRUN -np $1"; else launch="env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1"; fi
  rm -f "$tmp/$2.jsonl" # a new run's log
  # shellcheck disable=SC2086
  $launch "$ppr" "$tmp/$2" $args --steps 3 --clip 1 --quiet --log "$tmp/$2.jsonl" --save-grads "$tmp/$2.g.safetensors" \
    --save "$tmp/$2.w.safetensors" >"$tmp/out.txt" 2>&1 || { tail -n 5 "$tmp/out.txt"; return 1; }
  losses "$tmp/$2.jsonl" >"$tmp/$2.losses"
}

# exact_mesh PP SCHEDULE VPP M: $model on that pipeline against $model on one rank at M
exact_mesh() {
  pp=$1 sched=$2 vpp=$3 M=$4 dir=pp$1_$2
  what="$name: pp $pp $sched (vpp $vpp), M = $M, bit for bit as one rank"
  if ! "$ppc" $model --pp "$pp" --schedule "$sched" --vpp "$vpp" --microbatches "$M" -o "$tmp/$dir" >"$tmp/ppc.txt" 2>&1; then
    bad "$what: ppc failed"
    cat "$tmp/ppc.txt"
    return
  fi
  if run3 "$pp" "$dir" && same_losses "$tmp/$dir.losses" "$tmp/one$M.losses" 0 &&
    tensors "$tmp/$dir.g.safetensors" "$tmp/one$M.g.safetensors" 0 &&
    tensors "$tmp/$dir.w.safetensors" "$tmp/one$M.w.safetensors" 0; then
    ok "$what: losses, first-step gradients and weights after 3 steps"
  else bad "$what"; fi
}

# MODEL: pp, schedule, chunks per rank, micro-batches; tiny's few beside test_pipeline's
for model in tests/models/tiny_untied.pdl examples/tiny.pdl; do
  name=$(basename $model .pdl)
  for M in 4 8; do
    "$ppc" $model --microbatches $M -o "$tmp/one$M" >"$tmp/ppc.txt" 2>&1 && run3 1 one$M ||
      { bad "$name on one rank, M = $M, did not run"; cat "$tmp/ppc.txt"; }
  done
  if [ "$name" = tiny ]; then meshes="2_zbv_2_4 4_gpipe_1_8"; else
    meshes="2_1f1b_1_4 2_gpipe_1_4 2_zb-h1_1_4 2_interleaved_2_4 2_zbv_2_4 4_1f1b_1_8 4_zb-h1_1_8"
  fi
  for mesh in $meshes; do
    # shellcheck disable=SC2046
    exact_mesh $(echo "$mesh" | tr _ ' ')
  done
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
