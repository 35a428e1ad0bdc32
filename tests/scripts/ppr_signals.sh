#!/bin/sh
# ppr_signals.sh BUILD_DIR - SIGTERM and SIGINT stop a training run at a step boundary: every rank
# stops after the same step, --save writes the weights of that step (the same bytes as a run of
# exactly that many steps), --log ends with it, and ppr exits with status 75; a second signal ends
# a rank at once, without saving. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_signals.sh BUILD_DIR}
. tests/scripts/lib/common.sh
. tests/scripts/lib/stop.sh

"$build/ppc" examples/tiny.pdl --tp 2 --pp 2 --microbatches 4 -o "$tmp/t2p2" >"$tmp/ppc.txt" 2>&1 &&
  "$build/ppc" examples/tiny.pdl -o "$tmp/one" >>"$tmp/ppc.txt" 2>&1 || {
  cat "$tmp/ppc.txt"
  bad "ppc examples/tiny.pdl"
  echo "$pass passed, $fail failed"
  exit 1
}
mesh="$MPIRUN -np 4 $build/ppr $tmp/t2p2"

# ---- SIGTERM to one rank of a tp 2 x pp 2 job ---------------------------------------------------
rm -f "$tmp/log.jsonl"
$mesh --steps 1000000 --quiet --save "$tmp/w.safetensors" --log "$tmp/log.jsonl" >"$tmp/out.txt" 2>&1 &
mp=$!
if wait_lines "$tmp/log.jsonl" 120 3; then
  rank_pids "$mp" >"$tmp/ranks"
  cut -d' ' -f2 "$tmp/ranks" >"$tmp/pids"
  kill -TERM "$(sed -n 's/^2 //p' "$tmp/ranks")"
  finish 60
  if [ "$rc" = 75 ]; then
    ok "tp 2 x pp 2, SIGTERM to rank 2: every rank stops at a step boundary, exit status 75"
  else
    bad "tp 2 x pp 2, SIGTERM to rank 2: the job should stop with status 75 (exit $rc)"
  fi
  check_stop "$tmp/out.txt" "$tmp/log.jsonl" "$tmp/w.safetensors" SIGTERM 2 "tp 2 x pp 2, SIGTERM to rank 2" "$mesh"
else
  bad "tp 2 x pp 2 training did not log 3 steps within 120 s"
  cat "$tmp/out.txt"
fi

# ---- SIGTERM to mpirun: Open MPI passes it on, and kills the ranks odls_base_sigkill_timeout seconds
# later (its abort then waits that long twice): longer than a step and a save of tiny take here -----
rm -f "$tmp/log.jsonl"
$MPIRUN --mca odls_base_sigkill_timeout 8 -np 4 "$build/ppr" "$tmp/t2p2" --steps 1000000 --quiet --save "$tmp/w.safetensors" \
  --log "$tmp/log.jsonl" >"$tmp/out.txt" 2>&1 &
mp=$!
if wait_lines "$tmp/log.jsonl" 120 3; then
  rank_pids "$mp" >"$tmp/ranks"
  cut -d' ' -f2 "$tmp/ranks" >"$tmp/pids"
  kill -TERM "$mp"
  finish 60
  if [ "$rc" != hung ] && [ "$rc" -ne 0 ]; then
    ok "tp 2 x pp 2, SIGTERM to mpirun: the job ends (mpirun's status $rc)"
  else
    bad "tp 2 x pp 2, SIGTERM to mpirun: the job should end non-zero (exit $rc)"
  fi
  check_stop "$tmp/out.txt" "$tmp/log.jsonl" "$tmp/w.safetensors" SIGTERM 0 "tp 2 x pp 2, SIGTERM to mpirun" "$mesh"
else
  bad "tp 2 x pp 2 training did not log 3 steps within 120 s"
  cat "$tmp/out.txt"
fi

# ---- Ctrl-C to mpirun's process group, step lines printing: mpirun stops reading the ranks' output
# when it aborts, and sends SIGTERM odls_base_sigkill_timeout seconds later; by then rank 0 is blocked
# writing a step line, and the stop unblocks it (lines that do not fit are dropped) ----------------
rm -f "$tmp/log.jsonl" "$tmp/w.safetensors"
setsid $MPIRUN --mca odls_base_sigkill_timeout 8 -np 4 "$build/ppr" "$tmp/t2p2" --steps 1000000 \
  --save "$tmp/w.safetensors" --log "$tmp/log.jsonl" >"$tmp/out.txt" 2>&1 &
mp=$!
if wait_lines "$tmp/log.jsonl" 120 3; then
  kill -INT "-$mp"
  finish 60
  n=$(last_step "$tmp/log.jsonl")
  $mesh --steps "$n" --quiet --save "$tmp/ref.safetensors" >"$tmp/ref.txt" 2>&1 || cat "$tmp/ref.txt"
  if [ "$rc" != hung ] && [ -f "$tmp/w.safetensors" ] && cmp -s "$tmp/w.safetensors" "$tmp/ref.safetensors"; then
    ok "Ctrl-C to mpirun's group with step lines printing: the checkpoint is byte for byte a run of the log's $n steps"
  else
    bad "Ctrl-C to mpirun's group: the checkpoint should be the weights after the log's step ${n:-none} (exit $rc)"
    grep -v '^step' "$tmp/out.txt" | head -n 5
  fi
  rm -f "$tmp/w.safetensors" "$tmp/ref.safetensors"
else
  bad "tp 2 x pp 2 training did not log 3 steps within 120 s"
  cat "$tmp/out.txt"
fi

# ---- a second signal: the rank ends at once, nothing is saved -------------------------------------
rm -f "$tmp/log.jsonl"
$mesh --steps 1000000 --quiet --save "$tmp/w.safetensors" --log "$tmp/log.jsonl" >"$tmp/out.txt" 2>&1 &
mp=$!
if wait_lines "$tmp/log.jsonl" 120 3; then
  rank_pids "$mp" >"$tmp/ranks"
  cut -d' ' -f2 "$tmp/ranks" >"$tmp/pids"
  kill -STOP "$(sed -n 's/^3 //p' "$tmp/ranks")" # the step cannot end: rank 2 waits for rank 3
  p2=$(sed -n 's/^2 //p' "$tmp/ranks")
  sleep 0.3
  kill -TERM "$p2"
  sleep 0.3
  kill -TERM "$p2"
  finish 30
  if [ "$rc" != hung ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] && [ ! -f "$tmp/w.safetensors" ] &&
    grep -q "exited on signal 15" "$tmp/out.txt"; then
    ok "a second SIGTERM during a step ends the rank at once (signal 15), the job ends (exit $rc), nothing saved"
  else
    bad "a second SIGTERM should end the rank by the signal, without a checkpoint (exit $rc)"
    cat "$tmp/out.txt"
  fi
else
  bad "tp 2 x pp 2 training did not log 3 steps within 120 s"
  cat "$tmp/out.txt"
fi
for p in $(cat "$tmp/pids"); do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done

# ---- SIGINT to a one-rank run (no mpirun; a background job of a script starts with SIGINT ignored,
# which ppr keeps: env gives it the default back) ----------------------------------------------------
rm -f "$tmp/log.jsonl"
env --default-signal=INT "$build/ppr" "$tmp/one" --steps 1000000 --quiet --save "$tmp/w.safetensors" --log "$tmp/log.jsonl" >"$tmp/out.txt" 2>&1 &
mp=$!
if wait_lines "$tmp/log.jsonl" 120 3; then
  kill -INT "$mp"
  finish 60
  if [ "$rc" = 75 ]; then
    ok "one rank, SIGINT: stops at a step boundary, exit status 75"
  else
    bad "one rank, SIGINT: should stop with status 75 (exit $rc)"
  fi
  check_stop "$tmp/out.txt" "$tmp/log.jsonl" "$tmp/w.safetensors" SIGINT 0 "one rank, SIGINT" "$build/ppr $tmp/one"
else
  bad "one-rank training did not log 3 steps within 120 s"
  cat "$tmp/out.txt"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
