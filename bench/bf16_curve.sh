#!/bin/sh
# bf16_curve.sh — the loss curve of --precision bf16 against fp32 over a training run on text:
# the same model, seeded weights and data, every 20th step's loss of each (and the mean of the 20
# steps up to it) and their relative difference (docs/perf.md, "bf16"). The data: the text of
# /usr/share/common-licenses (every Debian has it; about 1.3 MB), its bytes as tokens, written as an
# llm.c token file; 200 steps of minimind256 read 200 K of them, less than one pass (ppr's built-in
# text, 4 K tokens, would be learnt by heart within the run). Its last tenth is held out: after
# every 20th step both runs evaluate the same VAL_BATCHES micro-batches of it (default 32), the
# validation loss, which does not move with the one batch a step happens to draw.
#
# The learning rate: peak 1e-3, 20 steps of warmup, cosine decay to 1e-4 (SCHEDULE overrides it:
# SCHEDULE="--lr-schedule constant" trains at 1e-3 throughout). A third run, the control, is fp32
# again with its GEMMs through oneDNN (sums in another order, nothing else changed; skipped when
# ppr was built without oneDNN): how far two fp32 runs drift apart by rounding alone.
#
#   sh bench/bf16_curve.sh                               # bench/minimind256.pdl, 200 steps
#   MODEL=examples/tiny.pdl STEPS=400 sh bench/bf16_curve.sh --data tokens.bin
#   BF16_FLAGS=--onednn sh bench/bf16_curve.sh          # the bf16 run's GEMMs through oneDNN
#
# Extra arguments go to every ppr run. Not a test: make test never runs it.
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
SCHEDULE=${SCHEDULE:---lr-schedule cosine --warmup 20 --lr-min 1e-4}
train() { # NAME PRECISION FLAGS...
  name=$1 p=$2
  shift 2
  [ -d "$work/$p" ] || "$BUILD/ppc" "$MODEL" --precision "$p" -o "$work/$p" >/dev/null # the control reuses fp32's
  rm -f "$work/$name.jsonl" # a new run's log
  # shellcheck disable=SC2086
  "$BUILD/ppr" "$work/$p" --seed 1 --data "$work/text.bin" --steps "$STEPS" --lr 1e-3 $SCHEDULE --clip 1 --quiet \
    --val-frac 0.1 --eval-every 20 --val-batches "${VAL_BATCHES:-32}" --log "$work/$name.jsonl" "$@"
}
train fp32 fp32 "$@"
# shellcheck disable=SC2086
train bf16 bf16 ${BF16_FLAGS:-} "$@"
if ! train control fp32 --onednn "$@" 2>"$work/control.err"; then
  echo "no control run: $(head -1 "$work/control.err" 2>/dev/null)"
  rm -f "$work/control.jsonl"
fi
python3 - "$work" "$MODEL" <<'PY'
import json, os, sys
def load(name):
    p = os.path.join(sys.argv[1], name + ".jsonl")
    return [o for o in map(json.loads, open(p)) if "step" in o] if os.path.exists(p) else None
f, b, c = load("fp32"), load("bf16"), load("control")
def mean20(r, i):
    lo = max(0, i - 19)
    return sum(x["loss"] for x in r[lo:i + 1]) / (i + 1 - lo)
def rel(x, y):
    return x / y - 1
print("%s, %d steps: loss every 20th step (and the first); the validation loss after it" % (sys.argv[2], len(f)))
print("| step | fp32 loss | bf16 loss | bf16/fp32 - 1 | 20-step means: bf16/fp32 - 1 | fp32 val | bf16 val "
      "| bf16/fp32 - 1 | control/fp32 - 1: loss | val |")
print("|---|---|---|---|---|---|---|---|---|---|")
worst = {"loss": 0.0, "mean": 0.0, "val": 0.0, "closs": 0.0, "cval": 0.0}
def note(k, v, digits=2):
    worst[k] = max(worst[k], abs(v))
    return "%+.*f%%" % (digits, 100 * v)
for i in range(len(f)):
    s = i + 1
    if s != 1 and s % 20:
        continue
    row = [str(s), "%.4f" % f[i]["loss"], "%.4f" % b[i]["loss"], note("loss", rel(b[i]["loss"], f[i]["loss"])),
           note("mean", rel(mean20(b, i), mean20(f, i)))]
    hv = "val_loss" in f[i] and "val_loss" in b[i]
    row += ["%.4f" % f[i]["val_loss"], "%.4f" % b[i]["val_loss"], note("val", rel(b[i]["val_loss"], f[i]["val_loss"]))] \
        if hv else ["", "", ""]
    row += [note("closs", rel(c[i]["loss"], f[i]["loss"]), 3) if c else "",
            note("cval", rel(c[i]["val_loss"], f[i]["val_loss"]), 3) if c and hv else ""]
    print("| " + " | ".join(row) + " |")
def median_ms(r):
    v = sorted(x["ms"] for x in r[5:]) or [0]
    return v[len(v) // 2]
print("largest bf16/fp32 difference at those steps: loss %.2f%%, 20-step means %.2f%%, validation loss %.2f%% "
      "(target: within 2%%)" % (100 * worst["loss"], 100 * worst["mean"], 100 * worst["val"]))
if c:
    print("the fp32 control against fp32: loss %.3f%%, validation loss %.3f%%" % (100 * worst["closs"], 100 * worst["cval"]))
print("median ms/step: fp32 %.1f, bf16 %.1f" % (median_ms(f), median_ms(b)))
PY
