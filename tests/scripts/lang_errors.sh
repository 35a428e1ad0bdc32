#!/bin/sh
# lang_errors.sh BUILD_DIR - the error messages docs/language.md quotes are ppc's own (lang_errors.py:
# each against the compiler's message formats, the --from-hf examples produced by ppc). Last line:
# "N passed, M failed".
set -u
build=${1:?usage: lang_errors.sh BUILD_DIR}
command -v python3 >/dev/null 2>&1 || {
  echo "SKIP lang_errors: no python3"
  echo "0 passed, 0 failed"
  exit 0
}
python3 tests/scripts/lang_errors.py "$build"
