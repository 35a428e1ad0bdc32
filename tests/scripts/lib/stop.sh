# stop.sh - what the tests of stopping a run and of the watchdog share (sourced after common.sh): the
# background job $mp and its ranks, waits with limits, and the check that a stopped run's checkpoint
# is the weights after the step it names.
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

