# common.sh — what the ppr_*.sh test scripts share, sourced after they set $build (run.sh runs
# tests/scripts/*.sh alone, so this file is no test): the pass and fail counts and their lines, a
# work directory removed at exit (a script with more to clean up sets its own EXIT trap after),
# the launch of several ranks on a machine with fewer cores, and the checks of a command's outcome.
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MPIRUN="mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1"
ppc=$build/ppc
ppr=$build/ppr

# needs_python3 NAME: a script that reads its results with Python 3 ends here, skipped, where
# there is none
needs_python3() {
  command -v python3 >/dev/null 2>&1 && return 0
  echo "SKIP $1: no python3"
  echo "0 passed, 0 failed"
  exit 0
}
# expect WHAT CMD...: CMD succeeds
expect() {
  what=$1
  shift
  if "$@" >"$tmp/out.txt" 2>&1; then ok "$what"; else
    bad "$what (exit $?)"
    head -n 5 "$tmp/out.txt"
  fi
}
# expect_fail WHAT TEXT CMD...: CMD exits 1 saying TEXT; and, when the script defines
# fail_also (its output in $tmp/out.txt; true when it holds too), fail_also as well, which
# fail_also_says describes in the message
expect_fail() {
  what=$1 want=$2
  shift 2
  "$@" >"$tmp/out.txt" 2>&1
  rc=$?
  if [ "$rc" -eq 1 ] && grep -qF -- "$want" "$tmp/out.txt" && { ! command -v fail_also >/dev/null || fail_also; }
  then ok "$what: $want"; else
    bad "$what: expected exit 1 saying '$want'${fail_also_says:-} (exit $rc)"
    head -n 5 "$tmp/out.txt"
  fi
}
