#!/bin/sh
# ppr_signals.sh BUILD_DIR - SIGTERM and SIGINT stop a training run at a step boundary: every rank
# stops after the same step, --save writes the weights of that step (the same bytes as a run of
# exactly that many steps), --log ends with it, and ppr exits with status 75; a second signal ends
# a rank at once, without saving. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_signals.sh BUILD_DIR}
. tests/scripts/lib/common.sh
mp=
cleanup() {
  [ -n "$mp" ] && kill -9 "$mp" 2>/dev/null
  for p in $(cat "$tmp/pids" 2>/dev/null); do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

rank_pids() {
  for p in $(pgrep -P "$1"); do
    r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$r" ] && echo "$r $p"
  done
}

# wait (up to $2 s, while process $mp runs) until file $1 has at least $3 lines
wait_lines() {
  i=0
  while [ "$(cat "$1" 2>/dev/null | wc -l)" -lt "$3" ]; do
    i=$((i + 1))
    { [ "$i" -gt $(($2 * 10)) ] || ! kill -0 "$mp" 2>/dev/null; } && return 1
    sleep 0.1
  done
}

# wait for $mp (at most $1 s, then kill it): its exit status in $rc ("hung" when killed)
finish() {
  i=0
  while kill -0 "$mp" 2>/dev/null && [ "$i" -lt $(($1 * 10)) ]; do
    sleep 0.1
    i=$((i + 1))
  done
  hung=0
  if kill -0 "$mp" 2>/dev/null; then
    hung=1
    kill -9 "$mp" 2>/dev/null
  fi
  wait "$mp"
  rc=$?
  [ "$hung" -eq 1 ] && rc=hung
  mp=
}

last_step() { sed -n 's/^{"step":\([0-9]*\),.*/\1/p' "$1" | tail -n 1; }

# $1: a run's output, $2 its log, $3 its checkpoint, $4 the signal, $5 the rank, $6 what ran;
# $7 the ppr command (without --steps) that makes the reference of the same number of steps
check_stop() {
  n=$(last_step "$2")
  if [ -n "$n" ] && grep -q "^ppr: $4 on rank $5: stopped after step $n of 1000000; saving the weights to $3\$" "$1"; then
    ok "$6: 'ppr: $4 on rank $5: stopped after step $n of 1000000', the step --log ends with"
  else
    bad "$6: the output should say 'ppr: $4 on rank $5: stopped after step N' with N the log's last step (${n:-none})"
    cat "$1"
    return
  fi
  $7 --steps "$n" --quiet --save "$tmp/ref.safetensors" >"$tmp/ref.txt" 2>&1 || cat "$tmp/ref.txt"
  if [ -f "$3" ] && [ ! -f "$3.tmp" ] && cmp -s "$3" "$tmp/ref.safetensors" &&
    $7 --init "$3" --steps 0 --quiet >"$tmp/init.txt" 2>&1; then
    ok "$6: the checkpoint is a safetensors file that --init reads, byte for byte a run of exactly $n steps"
  else
    bad "$6: the checkpoint should be the weights after step $n (a valid safetensors file)"
    ls -l "$3" "$3.tmp" "$tmp/ref.safetensors" 2>&1
    cat "$tmp/init.txt"
  fi
  rm -f "$3" "$tmp/ref.safetensors"
}

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

# ---- SIGTERM to mpirun: Open MPI passes it on after odls_base_sigkill_timeout seconds, and kills
# the ranks that many seconds later ------------------------------------------------------------------
rm -f "$tmp/log.jsonl"
$MPIRUN --mca odls_base_sigkill_timeout 3 -np 4 "$build/ppr" "$tmp/t2p2" --steps 1000000 --quiet --save "$tmp/w.safetensors" \
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
