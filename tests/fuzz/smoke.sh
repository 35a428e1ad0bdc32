#!/bin/sh
# smoke.sh — each fuzz target for SECONDS (60) from its seeds and what earlier runs found; fails
# on any crash, sanitizer report, leak or out-of-memory. Built by `make fuzz`; run by
# `make fuzz-smoke`. Last line: "N passed, M failed".
#
#   sh tests/fuzz/smoke.sh BUILD [SECONDS]
#
# The inputs a run finds go to BUILD/fuzz/corpus/NAME (kept between runs), a failing input to
# BUILD/fuzz/crashes/NAME-crash-... (or -leak-, -oom-), the run's log to BUILD/fuzz/NAME.log.
# To reproduce one:  BUILD/fuzz/NAME BUILD/fuzz/crashes/NAME-crash-...
# (fuzz_pdl: PPC_FUZZ_VERBOSE=1 in the environment shows ppc's messages).
#
# First the reproducers of the bugs fuzzing found (tests/fuzz/crashes/), each once.
#
# fuzz_pdl runs in libFuzzer's fork mode: ppc's compile time grows faster than linearly with the
# number of layers and ranks, so an input can take longer than -timeout without being wrong;
# such inputs are set aside (BUILD/fuzz/crashes/NAME-timeout-...) and counted, not failed.
set -u
build=${1:?usage: smoke.sh BUILD [SECONDS]}
secs=${2:-60}
dir=$build/fuzz
pass=0
fail=0
# fuzz_pdl's sources and fuzz_safetensors' round trips are temporary files: in memory where /dev/shm is
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$dir/crashes"
found() { ls "$dir/crashes" | grep -E "^$1-(crash|leak|oom)-" | wc -l; }
# NAME MAX_LEN [libFuzzer flags...]: one target
smoke() {
  name=$1
  maxlen=$2
  shift 2
  bin=$dir/$name
  seeds=$dir/seeds/${name#fuzz_}
  corpus=$dir/corpus/${name#fuzz_}
  if [ ! -x "$bin" ] || [ ! -d "$seeds" ]; then
    fail=$((fail + 1))
    echo "FAIL $name: $bin or $seeds is missing (make fuzz)"
    return
  fi
  mkdir -p "$corpus"
  before=$(found "$name")
  slow_before=$(ls "$dir/crashes" | grep -c "^$name-timeout-")
  "$bin" -max_total_time="$secs" -max_len="$maxlen" -timeout=25 -rss_limit_mb=2048 "$@" \
    -dict="tests/fuzz/${name#fuzz_}.dict" -artifact_prefix="$dir/crashes/$name-" -print_final_stats=1 \
    "$corpus" "$seeds" >"$dir/$name.log" 2>&1
  rc=$?
  slow=$(($(ls "$dir/crashes" | grep -c "^$name-timeout-") - slow_before))
  # the last status line: "#N ... cov: C ft: F corp: ..." (fork mode: "#N: cov: ...")
  last=$(grep -E '^#[0-9]+:?[[:space:]]' "$dir/$name.log" | tail -n 1)
  runs=$(echo "$last" | sed -n 's/^#\([0-9]*\).*/\1/p')
  cov=$(echo "$last" | sed -n 's/.*\(cov: [0-9]* ft: [0-9]*\).*/\1/p')
  # exit 70: the last fork-mode job ended on a timeout, which that mode sets aside
  if { [ "$rc" -ne 0 ] && [ "$rc" -ne 70 ]; } || [ "$(found "$name")" -ne "$before" ] ||
    grep -qE '^==[0-9]+==ERROR|runtime error:|^fuzz_[a-z]*: ' "$dir/$name.log"; then
    fail=$((fail + 1))
    grep -E 'ERROR|runtime error:|^fuzz_[a-z]*: |^    #[0-9]+ ' "$dir/$name.log" | head -n 40
    echo "FAIL $name: exit $rc after ${runs:-?} runs; the input: $(ls -t "$dir"/crashes/"$name"-* 2>/dev/null | head -n 1); the log: $dir/$name.log"
  else
    pass=$((pass + 1))
    echo "PASS $name: ${runs:-?} runs in ${secs}s, ${cov:-cov: ?}, $(ls "$corpus" | wc -l) inputs in $corpus$([ "$slow" -gt 0 ] && echo "; $slow inputs over 25s set aside in $dir/crashes")"
  fi
}
# the reproducers of bugs fuzzing found (tests/fuzz/crashes/NAME-*, NAME without fuzz_), each run
# once: a fixed bug that comes back fails here at once, not by chance in the fuzzing below
for name in fuzz_pdl fuzz_listing fuzz_safetensors; do
  set -- tests/fuzz/crashes/"${name#fuzz_}"-*
  [ -e "$1" ] || continue
  if "$dir/$name" -runs=1 "$@" >"$dir/$name.repro.log" 2>&1; then
    pass=$((pass + 1))
    echo "PASS $name: the reproducers of tests/fuzz/crashes run clean ($#)"
  else
    fail=$((fail + 1))
    grep -E '^fuzz_[a-z]*: |ERROR|runtime error:|^Running: ' "$dir/$name.repro.log" | head -n 20
    echo "FAIL $name: a reproducer of tests/fuzz/crashes fails again (the log: $dir/$name.repro.log)"
  fi
done
smoke fuzz_pdl 4096 -fork=1 -ignore_timeouts=1 -ignore_ooms=0 -ignore_crashes=0
smoke fuzz_listing 65536
smoke fuzz_safetensors 4096
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
