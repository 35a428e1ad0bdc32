#!/bin/sh
# ppr_watchdog.sh BUILD_DIR - the watchdog (--timeout): a tp 2 x pp 2 training job whose rank 3 is
# stopped (SIGSTOP) mid-training ends within seconds, non-zero, and every rank that waits says for
# whom; meanwhile the waiting ranks sleep instead of spinning. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_watchdog.sh BUILD_DIR}
. tests/scripts/lib/common.sh
. tests/scripts/lib/stop.sh

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# CPU seconds (utime + stime) of a process, in clock ticks
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

"$build/ppc" examples/tiny.pdl --tp 2 --pp 2 --microbatches 4 -o "$tmp/t2p2" >"$tmp/ppc.txt" 2>&1 || {
  cat "$tmp/ppc.txt"
  bad "ppc examples/tiny.pdl --tp 2 --pp 2"
  echo "$pass passed, $fail failed"
  exit 1
}

# ---- a stalled rank ------------------------------------------------------------------------------
$MPIRUN -np 4 "$build/ppr" "$tmp/t2p2" --steps 1000000 --quiet --timeout 2 --log "$tmp/log.jsonl" >"$tmp/out.txt" 2>&1 &
mp=$!
if wait_lines "$tmp/log.jsonl" 120 3; then
  rank_pids "$mp" >"$tmp/ranks"
  cut -d' ' -f2 "$tmp/ranks" >"$tmp/pids"
  p3=$(sed -n 's/^3 //p' "$tmp/ranks")
  t0=$(now)
  kill -STOP "$p3"
  # the waiting ranks' CPU use from 0.5 s to 1.5 s after the stop (the timeout is 2 s)
  sleep 0.5
  for r in 0 1 2; do eval "c$r=\$(ticks \$(sed -n 's/^$r //p' \"\$tmp/ranks\"))"; done
  ta=$(now)
  sleep 1
  cpu=""
  worst=0
  hz=$(getconf CLK_TCK)
  tb=$(now)
  for r in 0 1 2; do
    eval "a=\$c$r"
    b=$(ticks "$(sed -n "s/^$r //p" "$tmp/ranks")")
    pct=$(awk -v a="$a" -v b="$b" -v hz="$hz" -v s="$ta" -v e="$tb" 'BEGIN { printf "%d", (b - a) / hz / (e - s) * 100 + 0.5 }')
    cpu="$cpu rank $r ${pct}%"
    [ "$pct" -gt "$worst" ] && worst=$pct
  done
  finish 30 # the job ends by itself: 30 s at most
  took=$(elapsed "$t0" "$(now)")
  if [ "$rc" != hung ] && [ "$rc" -ne 0 ] && awk -v t="$took" 'BEGIN { exit !(t < 10) }'; then
    ok "tp 2 x pp 2, rank 3 stopped (SIGSTOP) during training, --timeout 2: the job ends non-zero (exit $rc) ${took} s after the stop"
  else
    bad "tp 2 x pp 2, rank 3 stopped, --timeout 2: the job should end non-zero within 10 s (exit $rc after ${took} s)"
    cat "$tmp/out.txt"
  fi
  # a rank whose own timeout ran out (no "(rank R made none ...)"), and rank 3 among those waited for
  if grep -qE '^ppr: rank [0-2]: error: no progress for [0-9.]+ s: waiting for ' "$tmp/out.txt" &&
    grep -qE '^ppr: rank [0-2]: error: no progress for [0-9.]+ s.*: waiting for ranks? ([0-9]+(, | and ))*3((, | and )[0-9]+)* \(' "$tmp/out.txt"; then
    ok "a rank's timeout runs out and ends the job; the stopped rank 3 is named as the one waited for"
  else
    bad "a rank should print 'ppr: rank R: error: no progress for T s: waiting for rank 3 (...)'"
    cat "$tmp/out.txt"
  fi
  # every waiting rank: whom it waits for, the operation, the step; and where in its listing when
  # in a schedule entry. Rank 3 may be stopped anywhere in a step, so any of the step's waits may
  # be the one: a message of the pipeline, a collective of the listing, the gradient norm's or the
  # loss's sum over the world
  op='(allreduce[a-z_/ 0-9]* of [0-9]+ (floats|bf16 elements)|a sum over the world of [0-9]+ bytes from each rank|(send|recv) of (activations|gradients) (to|from) rank [0-9], micro-batch [0-9]+, (forward|backward))'
  line='^ppr: rank ([0-2]): error: no progress for [0-9.]+ s( \((rank [0-9] made none for [0-9.]+ s: the job ends|another rank.s watchdog ends the job)\))?: waiting for ranks? [0-9][0-9, and]* \('
  n=$(grep -cE "$line$op; ([a-z' ]+, )?step [0-9]+(, [^()]*)?\)\$" "$tmp/out.txt")
  nent=$(grep -cE "schedule entry" "$tmp/out.txt")
  nat=$(grep -cE "$line.*schedule entry [0-9]+[^()]* at [^ ]*/rank\1\.prog:[0-9]+\)\$" "$tmp/out.txt")
  if [ "$n" -eq 3 ] && [ "$nent" -eq "$nat" ] && ! grep -q '^ppr: rank 3: error' "$tmp/out.txt"; then
    ok "each of the 3 waiting ranks says whom it waits for, in which operation and step (and where in its own listing: $nat of them in a schedule entry); the stopped rank says nothing"
  else
    bad "ranks 0, 1 and 2 should each print one 'no progress' line naming the operation and step ($n lines; $nat of the $nent in a schedule entry name their own listing's line)"
    cat "$tmp/out.txt"
  fi
  if [ "$worst" -le 10 ]; then
    ok "the waiting ranks sleep: CPU use 0.5-1.5 s after the stop:$cpu (at most 10% each)"
  else
    bad "the waiting ranks should not spin: CPU use 0.5-1.5 s after the stop:$cpu (over 10%)"
  fi
else
  bad "tp 2 x pp 2 training did not log 3 steps within 120 s"
  cat "$tmp/out.txt"
fi

# ---- the option ----------------------------------------------------------------------------------
"$build/ppr" "$tmp/t2p2" --timeout -1 >"$tmp/opt.txt" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q "ppr: error: --timeout: expected a number in \[0, 1e+09\], found '-1'" "$tmp/opt.txt"; then
  ok "--timeout -1 is refused, naming the option and the range"
else
  bad "--timeout -1 should be refused with its range (exit $rc)"
  cat "$tmp/opt.txt"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
