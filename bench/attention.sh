#!/bin/sh
# attention.sh — the step with the fused attention against the step with the GEMM path, on the cpu
# device: one model at a few sequence lengths, the two programs run alternately, PPR_PROFILE's
# per-step time and attention's share of it (the attention_* kernels; on the GEMM path also its
# batched products, attention's alone being batched).
#
#   sh bench/attention.sh                          # minimind256 at its seq 128, 1 and 2 threads
#   sh bench/attention.sh MODEL.pdl "ARGS" ...     # other models or ppc flags ("--seq 2048 --micro-batch 1")
#   THREADS="1 2" PAIRS=3 STEPS=8 sh bench/attention.sh
#
# Not a test. Prints a line a run and a table of medians (docs/perf.md, "The fused attention").
set -eu
cd "$(dirname "$0")/.."
build=${BUILD:-build}
[ -n "${BUILD:-}" ] || make -s build/ppc build/ppr >/dev/null
THREADS=${THREADS:-"1 2"}
PAIRS=${PAIRS:-3}
STEPS=${STEPS:-8}
work=$build/bench/attention
mkdir -p "$work"
[ $# -gt 0 ] || set -- bench/minimind256.pdl ""
echo "machine: $(nproc) cpus, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1); load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# ms PROFILE: "step attention" milliseconds a step from a PPR_PROFILE report
ms() {
  awk '/^ppr profile:/ { sub(/.*per step: /, ""); step = $1 }
    /^  gemm:/ { g = 1; next } /^  kernels:/ { g = 0; k = 1; next } /^  the [0-9]+ slowest/ { k = 0 }
    g && $1 ~ /^(forward|backward|weights)$/ && $7 > 1 { t += $9 }
    k && $1 ~ /^attention_/ { t += $4 } END { printf "%s %.3f", step, t }' "$1"
}
. bench/lib.sh

printf "\n| model | ppc flags | threads | fused ms | gemm ms | fused/gemm | attention fused ms | attention gemm ms |\n|---|---|---|---|---|---|---|---|\n" >"$work/table"
while [ $# -ge 2 ]; do
  model=$1 args=$2
  shift 2
  name=$(basename "$model" .pdl)
  for a in fused gemm; do
    # shellcheck disable=SC2086
    "$build/ppc" "$model" $args --microbatches 1 --attention $a -o "$work/$name.$a" >"$work/ppc.log" 2>&1 ||
      { cat "$work/ppc.log"; exit 1; }
  done
  for t in $THREADS; do
    : >"$work/runs"
    p=0
    while [ $p -lt "$PAIRS" ]; do
      for a in fused gemm; do
        OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t PPR_PROFILE=1 "$build/ppr" "$work/$name.$a" --steps "$STEPS" \
          >/dev/null 2>"$work/prof"
        r=$(ms "$work/prof")
        echo "$name $args threads $t $a: step ${r% *} ms, attention ${r#* } ms"
        echo "$a $r" >>"$work/runs"
      done
      p=$((p + 1))
    done
    fs=$(awk '$1 == "fused" { print $2 }' "$work/runs" | median) gs=$(awk '$1 == "gemm" { print $2 }' "$work/runs" | median)
    fa=$(awk '$1 == "fused" { print $3 }' "$work/runs" | median) ga=$(awk '$1 == "gemm" { print $3 }' "$work/runs" | median)
    echo "| $name | ${args:--} | $t | $fs | $gs | $(awk -v f="$fs" -v g="$gs" 'BEGIN { printf "%.3f", f / g }') | $fa | $ga |" >>"$work/table"
  done
done
cat "$work/table"
