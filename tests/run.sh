#!/bin/sh
# run.sh — the test runner: unit programs, then golden cases. Last line: "N passed, M failed".
#
#   sh tests/run.sh BUILD_DIR [--update]
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
build=${1:?usage: run.sh BUILD_DIR [--update]}
update=${2:-}
ppc=$build/ppc
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
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
# tally KIND NAME RC OUT: add a program's or script's counts; its FAIL (and SKIP) lines are shown
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
  echo "$1 $2: $last"
}

for t in "$build"/test_*; do
  [ -x "$t" ] || continue
  "$t" >"$tmp/unit.out" 2>&1
  tally unit "$(basename "$t")" $? "$tmp/unit.out"
done

# tests/scripts/NAME.sh BUILD_DIR
for t in tests/scripts/*.sh; do
  [ -f "$t" ] || continue
  sh "$t" "$build" >"$tmp/script.out" 2>&1
  tally script "$(basename "$t" .sh)" $? "$tmp/script.out"
done

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
