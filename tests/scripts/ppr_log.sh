#!/bin/sh
# ppr_log.sh BUILD_DIR - a run a person drives: --resume takes the run's options from the checkpoint
# (an option given again replaces it, said on stdout), --log appends across resumes with each step
# once, LOG.svg draws what the log holds, @FILE holds options, --log-every thins the step lines, and
# --trace after a resume covers the steps it ran. tiny on one rank and on tp 2 x pp 2. Last line:
# "N passed, M failed".
set -u
build=${1:?usage: ppr_log.sh BUILD_DIR}
. tests/scripts/lib/common.sh
. tests/scripts/lib/compare.sh
. tests/scripts/lib/stop.sh
needs_python3 ppr_log

"$ppc" examples/tiny.pdl --microbatches 2 -o "$tmp/one" >"$tmp/ppc.txt" 2>&1 &&
  "$ppc" examples/tiny.pdl --tp 2 --pp 2 --microbatches 2 -o "$tmp/mesh" >>"$tmp/ppc.txt" 2>&1 &&
  "$ppc" examples/tiny.pdl --microbatches 4 -o "$tmp/mb4" >>"$tmp/ppc.txt" 2>&1 || {
  cat "$tmp/ppc.txt"
  bad "ppc examples/tiny.pdl"
  echo "$pass passed, $fail failed"
  exit 1
}

# the run's options, kept in a file: a cosine schedule (every step's lr differs), validation every 4
cat >"$tmp/run.args" <<EOF
# the run
--steps 12
--lr 3e-3
--lr-schedule cosine
--warmup 2
--decay-steps 10
--clip 1
--val-frac 0.1
--eval-every 4
--save-every 4
--quiet
EOF

# segments NAME LAUNCH...: the uninterrupted run (NAME-ref); the same run stopped (--stop-file, as
# pprun's Ctrl-C) after its fifth step or later, resumed from step 4 with --resume alone (the log's
# steps after 4 dropped), and from step 8 with --resume and --log-every: one log
segments() {
  name=$1
  shift
  d=$tmp/$name
  expect "$name: 12 steps straight (@run.args)" "$@" "$ppr" "$tmp/$DIR" @"$tmp/run.args" --save "$d-ref" \
    --log "$d-ref.jsonl"
  "$@" "$ppr" "$tmp/$DIR" @"$tmp/run.args" --save "$d" --log "$d.jsonl" --tensorboard "$d.tb" \
    --stop-file "$d.stop" >"$tmp/out.txt" 2>&1 &
  mp=$!
  wait_lines "$d.jsonl" 120 6 # the start line and 5 steps: step-000004 is saved
  touch "$d.stop"
  finish 120
  k=$(last_step "$d.jsonl")
  if { [ "$rc" = 75 ] && [ -d "$d/step-$(printf %06d "$k")" ]; } || [ "$rc" = 0 ]; then
    ok "$name: the same run, stopped after step $k (exit $rc)"
  else bad "$name: the stopped run: exit $rc, last step ${k:-none}"; fi
  expect "$name: --resume step-000004 alone" "$@" "$ppr" "$tmp/$DIR" --resume "$d/step-000004"
  if grep -q "^ppr: --log $d.jsonl: $((k - 4)) step lines after step 4 dropped" "$tmp/out.txt" &&
    ! grep -q "from this command line" "$tmp/out.txt"
  then ok "$name: the resume changed nothing and said the log's steps 5..$k went"
  else bad "$name: the resume's lines: $(head -n 3 "$tmp/out.txt")"; fi
  expect "$name: --resume step-000008 --log-every 2 --trace" "$@" "$ppr" "$tmp/$DIR" --resume "$d/step-000008" \
    --log-every 2 --trace "$d.trace.json"
  losses "$d.jsonl" >"$d.loss"
  losses "$d-ref.jsonl" >"$d-ref.loss"
  if python3 - "$d.jsonl" "$d-ref.jsonl" <<'PY'; then
import sys
sys.path.insert(0, "tools"); import ppr_log
got, ref = ppr_log.records(sys.argv[1]), ppr_log.records(sys.argv[2])
starts = [(s["start"], s["run"]) for s in ppr_log.starts(sys.argv[1])]
key = lambda r: (r["step"], r["loss"], r.get("val_loss"), r["lr"], r["tokens"])
sys.exit(not ([r["step"] for r in got] == list(range(1, 13)) and list(map(key, got)) == list(map(key, ref))
              and [s for s, _ in starts] == [0, 4, 8] and len({r for _, r in starts}) == 1))
PY
    ok "$name: the one log holds steps 1..12 once each, equal to the straight run's (loss, val_loss, lr), starts 0, 4, 8 of one run"
  else bad "$name: the log after two resumes: $(cut -c1-60 "$d.jsonl" | tr '\n' ' ')"; fi
  if python3 - "$d.tb" "$d.jsonl" <<'PY'; then
import glob, struct, sys
sys.path[:0] = ["tools", "tests/scripts/lib"]; import ppr_log, tfevents
files = glob.glob(sys.argv[1] + "/events.out.tfevents.*")
ev = tfevents.events(files[0])
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
rec = ppr_log.records(sys.argv[2])
want = [(r["step"], {k: f32(r[k]) for k in ("loss", "val_loss", "lr", "grad_norm", "tokens_per_s") if k in r})
        for r in rec]
got = [(e["step"], e["values"]) for e in ev[1:]]
sys.exit(not (len(files) == 1 and ev[0].get("file_version") == "brain.Event:2" and got == want))
PY
    ok "$name: --tensorboard: one event file, steps 1..12 once each with the log's loss, val_loss, lr, grad_norm, tokens/s (CRCs checked)"
  else bad "$name: --tensorboard's events should be the log's steps"; fi
  if cmp -s "$d-ref/step-000012/model.safetensors" "$d/step-000012/model.safetensors" &&
    cmp -s "$d-ref/step-000012/trainer/optimizer.safetensors" "$d/step-000012/trainer/optimizer.safetensors"; then
    ok "$name: the weights and moments after step 12 byte-identical to the straight run's"
  else bad "$name: the weights and moments after step 12 differ from the straight run's"; fi
}
DIR=one segments one
DIR=mesh segments mesh $MPIRUN -np 4
cp "$tmp/out.txt" "$tmp/out.mesh.txt"

d=$tmp/one
"$ppr" "$tmp/one" --resume "$d/step-000008" --log-every 3 --log "$tmp/every.jsonl" --save "$tmp/every" >"$tmp/out.txt" 2>&1
if [ "$(grep -o '^step [0-9]*/12' "$tmp/out.txt" | tr '\n' ' ')" = "" ] && grep -q -- "--quiet" "$d/step-000008/trainer/trainer_state.json"
then ok "--quiet is the run's: a resume keeps it"
else bad "a resume should keep --quiet: $(head -n 3 "$tmp/out.txt")"; fi
"$ppr" "$tmp/one" @"$tmp/run.args" --steps 9 --save "$tmp/le" --log "$tmp/le.jsonl" >/dev/null 2>&1
sed -i 's/^--quiet$//' "$tmp/run.args"
"$ppr" "$tmp/one" @"$tmp/run.args" --log-every 5 --save-every 0 >"$tmp/out.txt" 2>&1
if [ "$(grep -o '^step [0-9]*/12' "$tmp/out.txt" | tr '\n' ' ')" = "step 1/12 step 4/12 step 5/12 step 8/12 step 10/12 step 12/12 " ]
then ok "--log-every 5: step lines 1, 5, 10, the evaluations (4, 8) and the last"
else bad "--log-every 5: $(grep -o '^step [0-9]*/12' "$tmp/out.txt" | tr '\n' ' ')"; fi

# trainer_state.json keeps the options a resume takes; not --trace, --device, --timeout
python3 - "$d/step-000012/trainer/trainer_state.json" "$d" <<'PY' && ok "trainer_state.json: the run's options (--steps=12, --lr=3e-3, --log-every=2 ...), not --trace" || bad "trainer_state.json's args"
import json, sys
s = json.load(open(sys.argv[1]))
a = s["args"]
want = ["--steps=12", "--lr=3e-3", "--lr-schedule=cosine", "--warmup=2", "--decay-steps=10", "--clip=1",
        "--val-frac=0.1", "--eval-every=4", "--save-every=4", "--quiet", "--save=" + sys.argv[2],
        "--log=" + sys.argv[2] + ".jsonl", "--log-every=2", "--tensorboard=" + sys.argv[2] + ".tb"]
sys.exit(not (sorted(a) == sorted(want) and len(s["run_id"]) == 16))
PY

# the SVG: every step's loss, every validation, the two resumes
if python3 - "$d.svg" "$d.jsonl" <<'PY'; then
import re, sys
sys.path.insert(0, "tools"); import ppr_log
svg = open(sys.argv[1]).read()
pts = lambda cls: re.search(r'class="%s"[^>]*points="([^"]*)"' % cls, svg).group(1).split()
loss, val = pts("loss"), pts("val_loss")
rec = ppr_log.records(sys.argv[2])
xs = [float(p.split(",")[0]) for p in loss]
sys.exit(not (len(loss) == len(rec) == 12 and len(val) == 3 and svg.count('class="resume"') == 2
              and xs == sorted(xs) and len(set(xs)) == 12 and svg.rstrip().endswith("</svg>")))
PY
  ok "LOG.svg: 12 loss points in token order, 3 validations, 2 resumes marked"
else bad "LOG.svg should draw the log's 12 steps, 3 validations and 2 resumes"; fi

# the trace of the last resume: steps 9..12 alone
if python3 -c '
import json, sys
b = json.load(open(sys.argv[1]))["ppr_bubble"]
sys.exit(not (b["first_step"] == 9 and all(len(r["steps"]) == 4 for r in b["ranks"]) and len(b["ranks"]) == 4))' \
  "$tmp/mesh.trace.json" && grep -q "^ppr: bubble (1 - compute / step time), mean of steps 10..12: rank 0/s0 " "$tmp/out.mesh.txt"
then
  ok "--trace after --resume step-000008: the bubble of steps 9..12 alone, every rank"
else bad "--trace after a resume should cover steps 9..12"; fi

# refused: a new run into a run's log, another run's checkpoint into it, options a resume cannot change
expect_fail "a new run into an existing log" "--log $d.jsonl holds a log already (run " "$ppr" "$tmp/one" --steps 3 \
  --log "$d.jsonl" --save "$tmp/never"
"$ppr" "$tmp/one" --steps 4 --quiet --save "$tmp/other" --save-every 2 >/dev/null 2>&1
expect_fail "another run's checkpoint into this log" "is the log of run " "$ppr" "$tmp/one" --resume \
  "$tmp/other/step-000002" --log "$d.jsonl"
expect_fail "DIR with another batch" "--resume needs DIR compiled for the checkpoint's model and batch" "$ppr" \
  "$tmp/mb4" --resume "$d/step-000004" --save "$tmp/never"
expect_fail "a bad @FILE line" "@$tmp/bad.args:2: '--lr=1 2': an option's value goes after a space or '=', not both" \
  sh -c "printf '%s\n' '--steps 3' '--lr=1 2' >'$tmp/bad.args'; '$ppr' '$tmp/one' @'$tmp/bad.args'"
expect_fail "a missing @FILE" "@$tmp/none.args: cannot read" "$ppr" "$tmp/one" @"$tmp/none.args"
printf -- '--steps 3\n--lr \0\n' >"$tmp/nul.args"
expect_fail "an @FILE with a NUL byte" "@$tmp/nul.args:2: a NUL byte" "$ppr" "$tmp/one" @"$tmp/nul.args"
cp "$d.jsonl" "$tmp/garbage.jsonl"
head -c 3000 /dev/urandom | tr '\n' x >>"$tmp/garbage.jsonl"
printf '\n{"step":99}\n' >>"$tmp/garbage.jsonl"
expect_fail "a log with bytes that are no JSON" "--log $tmp/garbage.jsonl:" "$ppr" "$tmp/one" --resume "$d/step-000008" \
  --log "$tmp/garbage.jsonl" --save "$tmp/never"

# a log cut short (a killed writer's last line without its newline) is healed by the next resume
head -c -20 "$tmp/le.jsonl" >"$tmp/cut.jsonl"
expect "a resume onto a log whose last line was cut" "$ppr" "$tmp/one" --resume "$tmp/le/step-000008" --steps 10 \
  --log "$tmp/cut.jsonl"
if [ "$(python3 tools/ppr_log.py "$tmp/cut.jsonl" step | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 10 " ]; then
  ok "the cut line dropped, steps 1..10 once"
else bad "the log after a cut line: $(python3 tools/ppr_log.py "$tmp/cut.jsonl" step | tr '\n' ' ')"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
