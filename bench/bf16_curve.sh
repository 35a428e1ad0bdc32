#!/bin/sh
# bf16_curve.sh — the loss curve of --precision bf16 against fp32 over a training run on text:
# the same model, seeded weights and data (ppr's built-in text unless --data is given), every
# 20th step's loss of each and their relative difference (docs/perf.md, "bf16").
#
#   sh bench/bf16_curve.sh                               # bench/minimind256.pdl, 200 steps
#   MODEL=examples/tiny.pdl STEPS=400 sh bench/bf16_curve.sh --data tokens.bin
#   BF16_FLAGS=--onednn sh bench/bf16_curve.sh          # the bf16 run's GEMMs through oneDNN
#
# Extra arguments go to both ppr runs. Not a test: make test never runs it.
set -eu
cd "$(dirname "$0")/.."
MODEL=${MODEL:-bench/minimind256.pdl}
STEPS=${STEPS:-200}
BUILD=${BUILD:-build}
[ -n "${BUILD_GIVEN:-}" ] || make -s "$BUILD/ppc" "$BUILD/ppr" >/dev/null
work=$BUILD/bench/bf16_curve
rm -rf "$work"
mkdir -p "$work"
for p in fp32 bf16; do
  "$BUILD/ppc" "$MODEL" --precision $p -o "$work/$p" >/dev/null
  flags=""
  [ $p = bf16 ] && flags=${BF16_FLAGS:-}
  # shellcheck disable=SC2086
  "$BUILD/ppr" "$work/$p" --seed 1 --steps "$STEPS" --lr 1e-3 --clip 1 --quiet --log "$work/$p.jsonl" $flags "$@"
done
python3 - "$work/fp32.jsonl" "$work/bf16.jsonl" "$MODEL" <<'PY'
import json, sys
f = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
print("%s, %d steps: loss every 20th step (and the first)" % (sys.argv[3], len(f)))
print("| step | fp32 loss | bf16 loss | bf16/fp32 - 1 |")
print("|---|---|---|---|")
worst = 0.0
for i in range(len(f)):
    s = i + 1
    if s == 1 or s % 20 == 0:
        r = b[i]["loss"] / f[i]["loss"] - 1
        worst = max(worst, abs(r))
        print("| %d | %.4f | %.4f | %+.2f%% |" % (s, f[i]["loss"], b[i]["loss"], 100 * r))
msf = sorted(x["ms"] for x in f[5:]) or [0]
msb = sorted(x["ms"] for x in b[5:]) or [0]
print("largest difference at those steps: %.2f%% (target: within 2%%); median ms/step fp32 %.1f, bf16 %.1f"
      % (100 * worst, msf[len(msf) // 2], msb[len(msb) // 2]))
PY
