#!/bin/sh
# pprun.sh BUILD_DIR - the launcher: it starts mpirun with the rank count of the stage directory;
# Ctrl-C (SIGINT to its process group, as a terminal sends it) stops every rank after one step,
# saves the weights of that step and exits 75, also with two busy loops beside it (PPRUN_RUNS
# runs, default 3); a second Ctrl-C ends the job at once; ranks end with their launcher; a run's
# own failure is pprun's exit status. Last line: "N passed, M failed".
set -u
build=${1:?usage: pprun.sh BUILD_DIR}
. tests/scripts/lib/common.sh
. tests/scripts/lib/stop.sh
runs=${PPRUN_RUNS:-3}
pprun=$build/pprun
busy=
stop_busy() {
  for b in $busy; do kill "$b" 2>/dev/null; done
  busy=
}
trap 'stop_busy; cleanup' EXIT

"$ppc" examples/tiny.pdl --tp 2 --pp 2 --microbatches 4 -o "$tmp/t2p2" >"$tmp/ppc.txt" 2>&1 || {
  cat "$tmp/ppc.txt"
  bad "ppc examples/tiny.pdl"
  echo "$pass passed, $fail failed"
  exit 1
}
mesh="$MPIRUN -np 4 $ppr $tmp/t2p2"
# the processes of $tmp/pids still running (a zombie has ended: this machine's init may not reap it)
alive() {
  n=0
  for p in $(cat "$tmp/pids"); do
    kill -0 "$p" 2>/dev/null && [ "$(ps -o stat= -p "$p" | cut -c1)" != Z ] && n=$((n + 1))
  done
  echo "$n"
}

if "$pprun" --dry-run "$tmp/t2p2" --steps 3 >"$tmp/dry.txt" 2>&1 && grep -q -- "-np 4 .*$ppr $tmp/t2p2 --steps 3 --stop-file " "$tmp/dry.txt"; then
  ok "--dry-run: mpirun -np 4 (the stage directory's tp 2 x pp 2), ppr, its options, --stop-file"
else
  bad "--dry-run should show mpirun -np 4 ... ppr STAGES --steps 3 --stop-file"
  cat "$tmp/dry.txt"
fi

# every option of pprun --help in docs/reliability.md's pprun section
"$pprun" --help | grep -E '^  -' | grep -oE -- '--?[a-zA-Z][a-z-]*' | sort -u >"$tmp/help"
awk '/^### pprun/{on = 1; next} /^##/{on = 0} on' docs/reliability.md | grep -oE -- '`--?[a-zA-Z][a-z-]*' | tr -d '`' |
  sort -u >"$tmp/doc"
missing=$(comm -23 "$tmp/help" "$tmp/doc" | tr '\n' ' ')
if [ -s "$tmp/help" ] && [ -z "$missing" ]; then
  ok "docs/reliability.md's pprun section names the $(wc -l <"$tmp/help") options of pprun --help"
else
  bad "docs/reliability.md's pprun section lacks options of pprun --help: $missing"
fi

# ---- Ctrl-C: SIGINT to pprun's process group (mpirun has its own), under load -------------------
for b in 1 2; do
  sh -c 'while :; do :; done' &
  busy="$busy $!"
done
good=0
for k in $(seq 1 "$runs"); do
  rm -f "$tmp/log.jsonl" "$tmp/w.safetensors"
  setsid "$pprun" "$tmp/t2p2" --steps 1000000 --quiet --save "$tmp/w.safetensors" --log "$tmp/log.jsonl" \
    >"$tmp/out.txt" 2>&1 &
  mp=$!
  if wait_lines "$tmp/log.jsonl" 120 3; then
    kill -INT "-$mp"
    finish 120
    before=$fail
    [ "$rc" = 75 ] || bad "run $k: Ctrl-C to pprun: exit status 75 expected (exit $rc)"
    # every rank looks for the stop file: the first in rank order that saw it is named
    check_stop "$tmp/out.txt" "$tmp/log.jsonl" "$tmp/w.safetensors" --stop-file "[0-3]" "run $k: Ctrl-C to pprun" "$mesh" \
      >"$tmp/check.txt"
    cat "$tmp/check.txt"
    grep -q '^FAIL' "$tmp/check.txt" || [ "$fail" -ne "$before" ] || good=$((good + 1))
  else
    bad "run $k: tp 2 x pp 2 under pprun did not log 3 steps within 120 s"
    cat "$tmp/out.txt"
  fi
done
stop_busy
[ "$good" -eq "$runs" ] && ok "Ctrl-C to pprun with two busy loops: $good of $runs runs saved the step they name, exit 75"

# ---- a second Ctrl-C: the job ends at once, its ranks with it ---------------------------------------
rm -f "$tmp/log.jsonl" "$tmp/w.safetensors"
setsid "$pprun" "$tmp/t2p2" --steps 1000000 --quiet --save "$tmp/w.safetensors" --log "$tmp/log.jsonl" \
  >"$tmp/out.txt" 2>&1 &
mp=$!
if wait_lines "$tmp/log.jsonl" 120 3; then
  mpirun_pid=$(pgrep -P "$mp" | head -n 1)
  rank_pids "$mpirun_pid" >"$tmp/ranks"
  cut -d' ' -f2 "$tmp/ranks" >"$tmp/pids"
  kill -STOP "$(sed -n 's/^3 //p' "$tmp/ranks")" # the step cannot end: rank 2 waits for rank 3
  kill -INT "-$mp"
  sleep 0.5
  kill -INT "-$mp"
  finish 20
  for i in $(seq 1 50); do # the ranks' ends, SIGKILL's, may take a moment on a loaded machine: up to 10 s
    left=$(alive)
    [ "$left" -eq 0 ] && break
    sleep 0.2
  done
  if [ "$rc" != hung ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] && [ "$left" -eq 0 ] && [ ! -f "$tmp/w.safetensors" ]; then
    ok "a second Ctrl-C ends the job at once (exit $rc), no rank left, nothing saved"
  else
    bad "a second Ctrl-C should end the job and its ranks (exit $rc, $left ranks left)"
    cat "$tmp/out.txt"
  fi
else
  bad "tp 2 x pp 2 under pprun did not log 3 steps within 120 s"
  cat "$tmp/out.txt"
fi

# ---- kill -9 mpirun: its ranks end within seconds, without saving ----------------------------------
rm -f "$tmp/log.jsonl" "$tmp/w.safetensors"
$mesh --steps 1000000 --quiet --save "$tmp/w.safetensors" --log "$tmp/log.jsonl" >"$tmp/out.txt" 2>&1 &
mp=$!
if wait_lines "$tmp/log.jsonl" 120 3; then
  rank_pids "$mp" >"$tmp/ranks"
  cut -d' ' -f2 "$tmp/ranks" >"$tmp/pids"
  kill -9 "$mp"
  i=0 left=4
  while [ "$left" -gt 0 ] && [ "$i" -lt 50 ]; do
    sleep 0.1
    i=$((i + 1)) left=$(alive)
  done
  if [ "$left" -eq 0 ] && [ ! -f "$tmp/w.safetensors" ]; then
    ok "kill -9 mpirun: its 4 ranks end within $((i / 10)).$((i % 10)) s, nothing saved"
  else
    bad "kill -9 mpirun: $left ranks still run after 5 s"
  fi
  wait "$mp" 2>/dev/null
  mp=
else
  bad "tp 2 x pp 2 did not log 3 steps within 120 s"
  cat "$tmp/out.txt"
fi

# ---- a run's own failure is pprun's status; a stale stop file is refused -------------------------
"$pprun" "$tmp/t2p2" --steps 1 --data "$tmp/none.bin" >"$tmp/out.txt" 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "none.bin" "$tmp/out.txt"; then ok "a missing --data under pprun: exit 1, the file named"
else
  bad "a missing --data under pprun should exit 1 naming it (exit $rc)"
  cat "$tmp/out.txt"
fi
touch "$tmp/stop"
expect_fail "--stop-file that exists at the start" "--stop-file $tmp/stop exists already" \
  "$ppr" "$tmp/t2p2" --steps 1 --stop-file "$tmp/stop"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
