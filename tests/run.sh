#!/bin/sh
# run.sh — the test runner: unit programs, then golden cases. Last line: "N passed, M failed".
#
#   sh tests/run.sh BUILD_DIR [--update]
#   TEST_JOBS=N sh tests/run.sh BUILD_DIR   # unit programs and scripts N at a time (default: nproc)
#
# The unit programs and scripts run side by side (each in its own temporary folder), those in
# ALONE after them one at a time (they send signals or wait on clocks); each prints its counts
# and its seconds, in this file's order.
#
# A golden case is tests/golden/NAME.pdl with directives in its comments:
#   # ARGS: --emit ir --tp 2     flags for ppc (default: --emit ir)
#   # MODEL: examples/tiny.pdl   compile this file instead of the case itself
#   # ERROR: text                ppc must fail, and its output must contain text
#   # CHECK: text                the output must contain text
# Its expected output (stdout and stderr, then "exit: N") is tests/golden/NAME.out; --update
# rewrites it. Every case needs an ERROR or CHECK line, so a blind re-bless cannot hide a
# regression. A case where ppc dies by a signal or a sanitizer report always fails.
set -u
# item_name PATH [ARG]: a job's name, its file's (test_pipeline 1/2: test_pipeline.1of2)
item_name() { if [ -n "${2:-}" ]; then echo "$(basename "$1" .sh).$(echo "$2" | sed 's|/|of|')"; else basename "$1" .sh; fi; }
# one unit program or script, as one of the side-by-side jobs: run.sh --item BUILD RESULTS KIND PATH
# [ARG] writes RESULTS/NAME.out (its output) and then RESULTS/NAME.rc ("exit-status seconds")
if [ "${1:-}" = "--item" ]; then
  build=$2 res=$3 kind=$4 path=$5 arg=${6:-}
  name=$(item_name "$path" "$arg")
  start=$(date +%s)
  # shellcheck disable=SC2086
  if [ "$kind" = unit ]; then "$path" $arg; else sh "$path" "$build"; fi >"$res/$name.out" 2>&1
  rc=$?
  echo "$rc $(($(date +%s) - start))" >"$res/$name.rc.tmp" && mv "$res/$name.rc.tmp" "$res/$name.rc"
  exit 0
fi
build=${1:?usage: run.sh BUILD_DIR [--update]}
update=${2:-}
ppc=$build/ppc
pass=0
fail=0
tmp=$(mktemp -d)
pool=""
trap '[ -z "$pool" ] || kill "$pool" 2>/dev/null; rm -rf "$tmp"' EXIT
# fast_unwind_on_malloc=0: whole allocation stacks through Open MPI (built without frame pointers),
# so that tests/lsan-mpi.supp can name its libraries; the suppressions name Open MPI's (and one
# allocation of AddressSanitizer's own thread start) only. intercept_tls_get_addr=0: GCC 12's runtime
# (before LLVM's fix for glibc >= 2.25) reads the two words before a dynamic TLS block whose address
# happens to sit at a certain offset in its page as a header of older glibc's, and LeakSanitizer's
# tracer then faults at exit ("Tracer caught signal 11") in processes with PoCL's and Open MPI's
# dynamic TLS; glibc allocates those blocks with malloc, so they are scanned as heap blocks anyway.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:exitcode=99:fast_unwind_on_malloc=0:intercept_tls_get_addr=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$(pwd)/tests/lsan-mpi.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=99}
# PoCL (the opencl device's driver on this CPU) caches the kernels it compiles, ppc's and CLBlast's:
# the tests keep theirs in the build directory, warm from the second run on (docs/devices.md)
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$(cd "$build" && pwd)/pocl-cache}
mkdir -p "$POCL_CACHE_DIR"

ok() { pass=$((pass + 1)); echo "PASS $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2"; }

# ---- unit programs and scripts: each prints its own "N passed, M failed" last -----------------
# tally KIND NAME RC OUT SECONDS: add a program's or script's counts; its FAIL (and SKIP) lines are shown
tally() {
  last=$(tail -n 1 "$4")
  p=$(echo "$last" | sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed.*/\1/p')
  f=$(echo "$last" | sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed.*/\2/p')
  if [ -z "$p" ]; then
    cat "$4"
    bad "$2" "no result line (exit $3)"
    return
  fi
  grep -E '^(FAIL|not ok|SKIP)' "$4" | head -20
  pass=$((pass + p))
  fail=$((fail + f))
  [ "$3" -ne 0 ] && [ "$f" -eq 0 ] && bad "$2" "exit $3"
  echo "$1 $2: $last ($5 s)"
}

# the scripts that signal ranks or time them against a clock: they run alone
ALONE=" ppr_signals ppr_watchdog pprun multihost "
jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
mkdir -p "$tmp/res"
for t in "$build"/test_*; do
  [ -x "$t" ] || continue
  case $(basename "$t") in
    test_pipeline) printf 'unit %s 0/2\nunit %s 1/2\n' "$t" "$t" ;; # the longest: its meshes in two halves
    *) echo "unit $t" ;;
  esac
done >"$tmp/items"
for t in tests/scripts/*.sh; do [ -f "$t" ] && echo "script $t"; done >>"$tmp/items"
: >"$tmp/side"
: >"$tmp/alone"
while read -r kind path arg; do
  case $ALONE in *" $(basename "$path" .sh) "*) list=alone ;; *) list=side ;; esac
  echo "$kind $path${arg:+ $arg}" >>"$tmp/$list" # no blank at the end: xargs -L would join the next line
done <"$tmp/items"
xargs -L 1 -P "$jobs" sh tests/run.sh --item "$build" "$tmp/res" <"$tmp/side" &
pool=$!
# collect: each job's result in the list's order, as it comes
collect() {
  name=$(item_name "$2" "${3:-}")
  while [ ! -f "$tmp/res/$name.rc" ]; do
    if [ -n "$pool" ] && ! kill -0 "$pool" 2>/dev/null && [ ! -f "$tmp/res/$name.rc" ]; then
      bad "$name" "its job ended without a result"
      return
    fi
    sleep 1
  done
  read -r rc secs <"$tmp/res/$name.rc"
  tally "$1" "$name" "$rc" "$tmp/res/$name.out" "$secs"
}
while read -r kind path arg; do collect "$kind" "$path" "$arg"; done <"$tmp/side"
wait "$pool"
pool=""
while read -r kind path arg; do
  sh tests/run.sh --item "$build" "$tmp/res" "$kind" "$path" $arg </dev/null # mpirun would read the list
  collect "$kind" "$path" "$arg"
done <"$tmp/alone"

# ---- golden cases -----------------------------------------------------------------------------
directive() { sed -n "s/^# $1: //p" "$2"; }

for case in tests/golden/*.pdl; do
  name=$(basename "$case" .pdl)
  want=tests/golden/$name.out
  args=$(directive ARGS "$case" | head -n 1)
  [ -n "$args" ] || args="--emit ir"
  model=$(directive MODEL "$case" | head -n 1)
  [ -n "$model" ] || model=$case
  # shellcheck disable=SC2086
  "$ppc" "$model" $args >"$tmp/got" 2>&1
  rc=$?
  echo "exit: $rc" >>"$tmp/got"
  if [ "$rc" -ge 128 ] || [ "$rc" -eq 99 ] || grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$tmp/got"; then
    cat "$tmp/got"
    bad "$name" "ppc crashed or a sanitizer fired (exit $rc)"
    continue
  fi
  problems=""
  nassert=0
  while IFS= read -r text; do
    [ -n "$text" ] || continue
    nassert=$((nassert + 1))
    [ "$rc" -ne 0 ] || problems="$problems; ppc succeeded but an error was expected"
    grep -qF -- "$text" "$tmp/got" || problems="$problems; missing error text '$text'"
  done <<EOF
$(directive ERROR "$case")
EOF
  while IFS= read -r text; do
    [ -n "$text" ] || continue
    nassert=$((nassert + 1))
    grep -qF -- "$text" "$tmp/got" || problems="$problems; missing '$text'"
  done <<EOF
$(directive CHECK "$case")
EOF
  if [ "$nassert" -le 0 ]; then
    bad "$name" "no # ERROR: or # CHECK: line"
    continue
  fi
  if [ -n "$(directive ERROR "$case")" ] && ! grep -qE '^[^ :]+:[0-9]+:[0-9]+: error: |^ppc: error: ' "$tmp/got"; then
    problems="$problems; no 'file:line:col: error:' line"
  fi
  if [ "$update" = "--update" ]; then
    cp "$tmp/got" "$want"
  elif [ ! -f "$want" ]; then
    problems="$problems; no expected output $want (run make test UPDATE=1)"
  elif ! diff -u "$want" "$tmp/got" >"$tmp/diff"; then
    cat "$tmp/diff"
    problems="$problems; output differs from $want"
  fi
  if [ -n "$problems" ]; then
    bad "$name" "${problems#; }"
  else
    ok "$name"
  fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
