#!/bin/sh
# ab.sh — one build's training step against another's on the cpu device: the same model, flags,
# weights and data compiled by each build's ppc and run by its ppr, the two alternately, each run
# PPR_PROFILE's per-step time and the share of it in kernels (not GEMMs); a table of medians.
#
#   sh bench/ab.sh BUILD_A BUILD_B                        # minimind256 and minimind, 1 and 2 threads
#   sh bench/ab.sh BUILD_A BUILD_B MODEL.pdl "ARGS" ...   # other models or ppc flags ("--precision bf16")
#   THREADS="1 2" PAIRS=3 STEPS=8 sh bench/ab.sh ...
#
# A build is a directory holding ppc and ppr (a worktree's build/ of another commit: `git worktree
# add /tmp/base HEAD~1 && make -C /tmp/base`). Not a test. The weights are each build's --seed 1
# init; both builds must initialise alike (the first step's losses are printed side by side).
set -eu
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
A=$1 B=$2
shift 2
THREADS=${THREADS:-"1 2"}
PAIRS=${PAIRS:-3}
STEPS=${STEPS:-8}
work=build/bench/ab
mkdir -p "$work"
[ $# -gt 0 ] || set -- bench/minimind256.pdl "" examples/minimind.pdl ""
echo "machine: $(nproc) cpus, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "A: $A  B: $B"

# ms PROFILE: "step kernels" milliseconds a step from a PPR_PROFILE report
ms() {
  awk '/^ppr profile:/ { sub(/.*per step: /, ""); step = $1 }
    /by instruction:/ { for (i = 1; i <= NF; i++) if ($i == "kernel") k = $(i + 1) }
    END { printf "%s %s", step, k }' "$1"
}
. bench/lib.sh

printf "\n| model | ppc flags | threads | A ms | B ms | B/A | A kernels %% | B kernels %% |\n|---|---|---|---|---|---|---|---|\n" >"$work/table"
while [ $# -ge 2 ]; do
  model=$1 args=$2
  shift 2
  name=$(basename "$model" .pdl)
  for side in A B; do
    build=$A
    [ $side = B ] && build=$B
    # shellcheck disable=SC2086
    "$build/ppc" "$model" $args -o "$work/$name.$side" >"$work/ppc.log" 2>&1 || { cat "$work/ppc.log"; exit 1; }
  done
  for t in $THREADS; do
    : >"$work/A.runs" && : >"$work/B.runs"
    p=0
    while [ $p -lt "$PAIRS" ]; do
      for side in A B; do
        build=$A
        [ $side = B ] && build=$B
        rm -f "$work/$side.jsonl" # a new run's log
        PPR_PROFILE=1 OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$build/ppr" "$work/$name.$side" --seed 1 \
          --steps "$STEPS" --clip 1 --quiet --log "$work/$side.jsonl" >"$work/$side.out" 2>"$work/$side.prof" ||
          { tail -n 3 "$work/$side.out" "$work/$side.prof"; exit 1; }
        r=$(ms "$work/$side.prof")
        loss=$(sed -n 's/^{"step":1,"loss":\([0-9.e+-]*\).*/\1/p' "$work/$side.jsonl")
        echo "$name $args threads $t $side: step ms, kernel ms $r; step-1 loss $loss"
        echo "$r" >>"$work/$side.runs"
      done
      p=$((p + 1))
    done
    a=$(cut -d' ' -f1 "$work/A.runs" | median) b=$(cut -d' ' -f1 "$work/B.runs" | median)
    ak=$(cut -d' ' -f2 "$work/A.runs" | median) bk=$(cut -d' ' -f2 "$work/B.runs" | median)
    awk -v n="$name" -v f="$args" -v t="$t" -v a="$a" -v b="$b" -v ak="$ak" -v bk="$bk" 'BEGIN {
      printf "| %s | %s | %s | %.1f | %.1f | %.3f | %.0f%% | %.0f%% |\n", n, f, t, a, b, b / a, 100 * ak / a, 100 * bk / b }' \
      >>"$work/table"
  done
done
cat "$work/table"
