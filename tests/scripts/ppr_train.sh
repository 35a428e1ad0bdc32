#!/bin/sh
# ppr_train.sh BUILD_DIR - the training loop's schedule, validation and progress: --lr-schedule's lr
# in --log against the closed form; the validation loss equals a training step's loss on exactly
# the validation batches (one rank, pp 2, dp 2, an interleaved program with chunks); the same
# validation loss on every mesh and at every evaluation; --val-frac trains on the head alone;
# evaluating changes nothing of the training; the progress fields. Python 3 (standard library)
# writes the token files and reads the logs. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_train.sh BUILD_DIR}
. tests/scripts/lib/common.sh
export PPC_CACHE="$tmp/cache"
needs_python3 ppr_train

"$build/ppc" examples/tiny.pdl -o "$tmp/one" >"$tmp/ppc.txt" 2>&1 &&
  "$build/ppc" examples/tiny.pdl --pp 2 --microbatches 4 -o "$tmp/pp2" >>"$tmp/ppc.txt" 2>&1 &&
  "$build/ppc" examples/tiny.pdl --dp 2 --microbatches 4 -o "$tmp/dp2" >>"$tmp/ppc.txt" 2>&1 &&
  "$build/ppc" examples/tiny.pdl --pp 2 --vpp 2 --schedule interleaved --microbatches 4 -o "$tmp/il" \
    >>"$tmp/ppc.txt" 2>&1 || {
  cat "$tmp/ppc.txt"
  bad "ppc examples/tiny.pdl"
  echo "$pass passed, $fail failed"
  exit 1
}

# 4000 tokens below tiny's vocabulary (256) as an llm.c token file; --val-frac 0.25 makes its last
# 1000 the validation tail (floor(0.25 * 4000)): tail.bin and head.bin hold the two parts
python3 - "$tmp" <<'PY'
import random, struct, sys
d = sys.argv[1]
random.seed(7)
tok = [random.randrange(256) for _ in range(4000)]
def write(name, t):
    with open(f"{d}/{name}", "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, len(t)] + [0] * 253)))
        f.write(struct.pack(f"<{len(t)}H", *t))
write("all.bin", tok)
write("head.bin", tok[:3000])
write("tail.bin", tok[3000:])
PY

# field LOG KEY [STEP]: the value of KEY in the JSONL line of STEP (default: the first line having KEY)
field() {
  python3 - "$@" <<'PY'
import json, sys
key = sys.argv[2]
step = int(sys.argv[3]) if len(sys.argv) > 3 else None
for line in open(sys.argv[1]):
    o = json.loads(line)
    if key in o and (step is None or o["step"] == step):
        print(repr(o[key]))
        break
PY
}

# run NP DIR LOG ARGS...: ppr (under mpirun when NP > 1) writing LOG; 0 when it succeeded
run() {
  np=$1 dir=$2 log=$3
  shift 3
  rm -f "$tmp/$log" # a new run's log
  if [ "$np" -eq 1 ]; then
    "$ppr" "$tmp/$dir" --log "$tmp/$log" "$@" >"$tmp/out.txt" 2>&1
  else
    $MPIRUN -np "$np" "$ppr" "$tmp/$dir" --log "$tmp/$log" "$@" >"$tmp/out.txt" 2>&1
  fi || {
    head -n 5 "$tmp/out.txt"
    return 1
  }
}

# ---- the validation loss is a forward pass over exactly its batches ----------------------------
# with --val-batches M (the step's micro-batches) and --lr 0, each evaluation's loss is bit for bit
# the loss of a training step whose data are the validation tail (micro-batch i of the step reads
# what validation micro-batch i reads), and the loss of a step of the --val-frac run is that of a
# step on the head alone
for c in "1 one 2" "2 pp2 4" "2 dp2 4" "2 il 4"; do
  set -- $c
  np=$1 dir=$2 m=$3
  if run "$np" "$dir" v.jsonl --data "$tmp/all.bin" --val-frac 0.25 --val-batches "$m" --eval-every 1 --steps 2 \
    --lr 0 && run "$np" "$dir" t.jsonl --data "$tmp/tail.bin" --steps 1 --lr 0 &&
    run "$np" "$dir" h.jsonl --data "$tmp/head.bin" --steps 1 --lr 0; then
    v1=$(field "$tmp/v.jsonl" val_loss 1) v2=$(field "$tmp/v.jsonl" val_loss 2) t=$(field "$tmp/t.jsonl" loss 1)
    if [ -n "$t" ] && [ "$v1" = "$t" ] && [ "$v2" = "$t" ]; then
      ok "$dir: val_loss $v1 (after steps 1 and 2 at --lr 0) is the loss of a step on the validation batches"
    else
      bad "$dir: val_loss $v1, $v2 should equal the loss $t of a step on the validation batches"
    fi
    l=$(field "$tmp/v.jsonl" loss 1) h=$(field "$tmp/h.jsonl" loss 1)
    if [ -n "$h" ] && [ "$l" = "$h" ]; then
      ok "$dir: --val-frac trains on the head: step 1's loss $l is a step's on head.bin"
    else
      bad "$dir: with --val-frac step 1's loss $l should be the loss $h of a step on head.bin"
    fi
  else
    bad "$dir: the validation runs should succeed"
  fi
done

# ---- the same validation batches on every mesh: 5 micro-batches (not a multiple of M) ----------
ref=""
for c in "1 one" "2 pp2" "2 dp2" "2 il"; do
  set -- $c
  if run "$1" "$2" m.jsonl --data "$tmp/all.bin" --val-data "$tmp/tail.bin" --val-batches 5 --steps 0; then
    v=$(field "$tmp/m.jsonl" val_loss 0)
    [ -n "$ref" ] || ref=$v
    if python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(a))" "$v" "$ref"; then
      ok "$2: --steps 0 evaluates the initial weights: val_loss $v (one rank: $ref)"
    else
      bad "$2: val_loss $v should be one rank's $ref"
    fi
  else
    bad "$2: --val-data --val-batches 5 --steps 0 should succeed"
  fi
done

# ---- evaluating changes nothing of the training ----------------------------------------------
for c in "1 one" "2 pp2" "2 il"; do
  set -- $c
  if run "$1" "$2" a.jsonl --steps 4 --lr 3e-3 --val-data "$tmp/tail.bin" --eval-every 1 &&
    run "$1" "$2" b.jsonl --steps 4 --lr 3e-3; then
    a=$(python3 tools/ppr_log.py "$tmp/a.jsonl" loss)
    b=$(python3 tools/ppr_log.py "$tmp/b.jsonl" loss)
    if [ "$a" = "$b" ]; then ok "$2: the losses of 4 steps are the same with --eval-every 1"; else
      bad "$2: evaluating changed the training: $a vs $b"
    fi
  else
    bad "$2: training with and without evaluation should succeed"
  fi
done

# ---- the learning-rate schedules, as the loop applies them -----------------------------------
for c in "constant --warmup 3" "cosine --warmup 2 --lr-min 1e-4" "linear --decay-steps 4" \
  "wsd --warmup 2 --decay-steps 3 --lr-min 1e-5"; do
  # shellcheck disable=SC2086
  rm -f "$tmp/lr.jsonl"
  if run 1 one lr.jsonl --steps 8 --lr 2e-3 --lr-schedule $c --quiet; then
    # shellcheck disable=SC2086
    if python3 - "$tmp/lr.jsonl" $c <<'PY'; then
import math, sys
sys.path.insert(0, "tools"); import ppr_log
kind, args = sys.argv[2], sys.argv[3:]
opt = dict(zip(args[::2], args[1::2]))
lr, n, w = 2e-3, 8, int(opt.get("--warmup", 0))
lo = float(opt.get("--lr-min", 0))
d = int(opt.get("--decay-steps", (n - w) if kind in ("cosine", "linear") else max(1, n // 5)))
def want(t):
    if t <= w:
        return lr * t / w
    if kind == "constant":
        return lr
    if kind == "wsd":
        if t <= n - d:
            return lr
        return lo + (lr - lo) * (1 - math.sqrt(min(1, (t - (n - d)) / d)))
    p = min(1, (t - w) / d)
    return lo + (lr - lo) * (1 + math.cos(math.pi * p)) / 2 if kind == "cosine" else lr - (lr - lo) * p
got = [o["lr"] for o in ppr_log.records(sys.argv[1])]
bad = [(t, g, want(t)) for t, g in enumerate(got, 1) if abs(g - want(t)) > 1e-8 * lr]
print(got)
sys.exit(1 if bad or len(got) != n else 0)
PY
      ok "--lr-schedule $c: every step's lr in --log is the closed form's"
    else
      bad "--lr-schedule $c: the lr in --log differs from the closed form"
    fi
  else
    bad "--lr-schedule $c should run"
  fi
done

# ---- progress: the step line and the JSONL fields --------------------------------------------
if run 1 one p.jsonl --steps 3 --peak-flops 8.3e10 --val-frac 0.1; then
  if grep -qE '^step 3/3  loss [0-9.]+  grad_norm [^ ]+  lr 1\.00e-03  [0-9.]+ ms  [0-9]+ tok/s  mfu [0-9.]+%  elapsed [0-9.]+s  eta [0-9.]+s  val_loss [0-9.]+$' "$tmp/out.txt" &&
    grep -q 'FLOPs per step in GEMMs' "$tmp/out.txt" &&
    python3 -c "
import sys
sys.path.insert(0, 'tools'); import ppr_log
o = ppr_log.records(sys.argv[1])
need = {'step', 'loss', 'grad_norm', 'lr', 'ms', 'tokens_per_s', 'mfu', 'elapsed_s', 'eta_s', 'tokens'}
sys.exit(not (len(o) == 3 and all(need <= set(x) for x in o) and 'val_loss' in o[2] and 'val_loss' not in o[0]
              and o[2]['eta_s'] == 0 and 0 < o[0]['mfu'] < 1))" "$tmp/p.jsonl"; then
    ok "the step line and --log show mfu, elapsed, eta and (after the last step) val_loss"
  else
    bad "the step line or --log lacks the progress fields"
    cat "$tmp/out.txt" "$tmp/p.jsonl"
  fi
else
  bad "--peak-flops --val-frac should run"
fi

# ---- errors that need the data ---------------------------------------------------------------
if "$ppr" "$tmp/one" --data "$tmp/tail.bin" --val-frac 0.01 >"$tmp/out.txt" 2>&1; then
  bad "--val-frac 0.01 of 1000 tokens should fail"
elif grep -q "ppr: error: --val-frac 0.01 of $tmp/tail.bin (1000 tokens): 10 validation tokens and 990 training tokens; each part needs at least a row's seq + 1 = 17" "$tmp/out.txt"; then
  ok "--val-frac leaving too few validation tokens: a clear error"
else
  bad "--val-frac 0.01: the message should say what is too small"
  cat "$tmp/out.txt"
fi
printf 'hello' >"$tmp/short.txt"
python3 -c "
import struct
t = [300] * 40
open('$tmp/big.bin', 'wb').write(struct.pack('<256i', *([20240520, 1, len(t)] + [0] * 253)) + struct.pack('<40H', *t))"
if "$ppr" "$tmp/one" --val-data "$tmp/big.bin" --steps 1 >"$tmp/out.txt" 2>&1; then
  bad "--val-data with tokens past the vocabulary should fail"
elif grep -q "ppr: error: $tmp/big.bin: token 300 at position 0 is not below the vocabulary's 256 (--val-data" "$tmp/out.txt"; then
  ok "--val-data is checked against the vocabulary"
else
  bad "--val-data past the vocabulary: the message should name the file and the token"
  cat "$tmp/out.txt"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
