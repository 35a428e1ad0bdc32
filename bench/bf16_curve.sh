#!/bin/sh
# bf16_curve.sh — the loss curve of --precision bf16 against fp32 over a training run on text:
# the same model, seeded weights and data, every 20th step's loss of each (and the mean of the 20
# steps up to it) and their relative difference (docs/perf.md, "bf16"). The data: the text of
# /usr/share/common-licenses (every Debian has it; about 1.3 MB), its bytes as tokens, written as an
# llm.c token file; 200 steps of minimind256 read 200 K of them, less than one pass (ppr's built-in
# text, 4 K tokens, would be learnt by heart within the run).
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
python3 - "$work/text.bin" <<'PY'
import os, struct, sys
data = b""
for root, _, files in sorted(os.walk("/usr/share/common-licenses")):
    for f in sorted(files):
        p = os.path.join(root, f)
        if os.path.isfile(p):
            data += open(p, "rb").read()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *([20240520, 1, len(data)] + [0] * 253)))
    f.write(struct.pack("<%dH" % len(data), *data))
print("data: %d tokens (the bytes of /usr/share/common-licenses)" % len(data))
PY
for p in fp32 bf16; do
  "$BUILD/ppc" "$MODEL" --precision $p -o "$work/$p" >/dev/null
  flags=""
  [ $p = bf16 ] && flags=${BF16_FLAGS:-}
  # shellcheck disable=SC2086
  "$BUILD/ppr" "$work/$p" --seed 1 --data "$work/text.bin" --steps "$STEPS" --lr 1e-3 --clip 1 --quiet \
    --log "$work/$p.jsonl" $flags "$@"
done
python3 - "$work/fp32.jsonl" "$work/bf16.jsonl" "$MODEL" <<'PY'
import json, sys
f = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
print("%s, %d steps: loss every 20th step (and the first)" % (sys.argv[3], len(f)))
print("| step | fp32 loss | bf16 loss | bf16/fp32 - 1 | fp32, mean of 20 | bf16, mean of 20 | bf16/fp32 - 1 |")
print("|---|---|---|---|---|---|---|")
worst, worst_m = 0.0, 0.0
for i in range(len(f)):
    s = i + 1
    if s == 1 or s % 20 == 0:
        r = b[i]["loss"] / f[i]["loss"] - 1
        lo = max(0, i - 19)
        mf = sum(x["loss"] for x in f[lo:i + 1]) / (i + 1 - lo)
        mb = sum(x["loss"] for x in b[lo:i + 1]) / (i + 1 - lo)
        worst, worst_m = max(worst, abs(r)), max(worst_m, abs(mb / mf - 1))
        print("| %d | %.4f | %.4f | %+.2f%% | %.4f | %.4f | %+.2f%% |"
              % (s, f[i]["loss"], b[i]["loss"], 100 * r, mf, mb, 100 * (mb / mf - 1)))
msf = sorted(x["ms"] for x in f[5:]) or [0]
msb = sorted(x["ms"] for x in b[5:]) or [0]
print("largest difference at those steps: %.2f%% (the 20-step means: %.2f%%; target: within 2%%); median ms/step "
      "fp32 %.1f, bf16 %.1f" % (100 * worst, 100 * worst_m, msf[len(msf) // 2], msb[len(msb) // 2]))
PY
