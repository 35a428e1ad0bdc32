#!/bin/sh
# schedules.sh — every pipeline schedule's bubble as ppc predicts it (--emit schedule) and as ppr
# measures it (--trace), in one run on this machine (docs/schedules.md, "Measured").
#
#   sh bench/schedules.sh                      # bench/balanced.pdl at pp 2, 8 micro-batches
#   MODEL=examples/minimind.pdl PP=4 M=8 sh bench/schedules.sh
#   BUILD=DIR sh bench/schedules.sh            # DIR/ppc and DIR/ppr as they are (no make)
#   STEPS=8 SCHEDULES="1f1b zb-h1" sh bench/schedules.sh
#   VPP=3 SCHEDULES=interleaved sh bench/schedules.sh   # chunks per rank of interleaved (zbv: 2)
#
# Each rank runs one thread (OMP_NUM_THREADS=1), PP ranks on this machine. The measured bubble of
# a rank is ppr's: 1 - compute / step time (compute: F, B, W and the optimizer without its
# collectives), the mean over the steps after the first; the table gives the mean over ranks next
# to the prediction (idle share of all ranks' time, messages free). Not a test: make test never
# runs it. Work files (listings, traces, their SVGs) go to BUILD/bench/schedules/.
set -eu
cd "$(dirname "$0")/.."
if [ -n "${BUILD:-}" ]; then b=$BUILD; else b=build && make -s build/ppc build/ppr >/dev/null; fi
MODEL=${MODEL:-bench/balanced.pdl}
PP=${PP:-2}
M=${M:-8}
STEPS=${STEPS:-6}
SCHEDULES=${SCHEDULES:-naive gpipe 1f1b zb-h1 interleaved zbv}
VPP=${VPP:-2}
out=$b/bench/schedules
mkdir -p "$out"
echo "machine: $(nproc) cpus, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
echo "model: $MODEL, pp $PP, $M micro-batches, $STEPS steps (the first not counted), one thread per rank"
printf '%-11s %10s %10s %12s %s\n' schedule predicted measured "step (ms)" "measured per rank"
for s in $SCHEDULES; do
  v=1 # chunks of layers per rank
  case $s in interleaved) v=$VPP ;; zbv) v=2 ;; esac
  "$b/ppc" "$MODEL" --pp "$PP" --microbatches "$M" --schedule "$s" --vpp "$v" --emit schedule >"$out/$s.schedule"
  pred=$(sed -n 's/^step: .*bubble \([0-9.]*\)%.*/\1/p' "$out/$s.schedule")
  rm -rf "$out/$s"
  "$b/ppc" "$MODEL" --pp "$PP" --microbatches "$M" --schedule "$s" --vpp "$v" -o "$out/$s" >/dev/null
  mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 -np "$PP" \
    "$b/ppr" "$out/$s" --steps "$STEPS" --trace "$out/$s.json" >"$out/$s.out" 2>&1 || {
    cat "$out/$s.out"
    exit 1
  }
  ranks=$(sed -n 's/^ppr: bubble .*, mean of steps [0-9.]*: \(.*\) (each step.*/\1/p' "$out/$s.out" |
    sed 's/rank [0-9]*\/s[0-9]* //g; s/,//g')
  meas=$(echo "$ranks" | awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; printf "%.1f", 100 * s / NF }')
  ms=$(awk '/^step [0-9]+\// { split($2, a, "/"); if (a[1] > 1) { for (i = 3; i < NF; i++) if ($(i + 1) == "ms") { t += $i; n++ } } }
    END { if (n) printf "%.1f", t / n }' "$out/$s.out")
  printf '%-11s %9s%% %9s%% %12s %s\n' "$s" "$pred" "$meas" "${ms:--}" "$ranks"
done
