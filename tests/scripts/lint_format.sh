#!/bin/sh
# lint_format.sh — the C sources are in the one style of .clang-format (`make format` applies it).
# The kernels' preludes (kernels/) are left as written: they are pasted into generated code whose
# hashes the listings record.
#
#   sh tests/scripts/lint_format.sh [BUILD_DIR]     last line: "N passed, M failed"
set -u
if ! command -v clang-format >/dev/null 2>&1; then
  echo "FAIL lint_format: clang-format is not installed (apt-get install clang-format)"
  echo "0 passed, 1 failed"
  exit 1
fi
pass=0
fail=0
for f in $(git ls-files 'common/*.[ch]' 'compiler/*.[ch]' 'runtime/*.[ch]' 'ppr/*.[ch]' 'pprun/*.[ch]' 'tests/unit/*.[ch]' \
  'tests/fuzz/*.c' 2>/dev/null); do
  if clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then pass=$((pass + 1))
  else fail=$((fail + 1)); echo "FAIL $f: not in the style of .clang-format (make format)"; fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
