#!/bin/sh
# deps.sh — what the fuzz targets need: clang, and its libFuzzer and sanitizer runtimes (Debian:
# clang, libclang-rt-N-dev for clang N); the line coverage also llvm-profdata and llvm-cov
# (llvm-N). Installed with apt-get when run as root, or says what to install.
#
#   sh tests/fuzz/deps.sh [CLANG] [--cov]
set -u
cc=${1:-clang}
cov=${2:-}
have_cmd() { command -v "$1" >/dev/null 2>&1; }
# the major version of clang, for the versioned Debian packages
major() { "$cc" --version 2>/dev/null | sed -n 's/.*clang version \([0-9][0-9]*\)\..*/\1/p' | head -n 1; }
links() {
  t=$(mktemp -d) || return 1
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$t/t.c"
  "$cc" -fsanitize=fuzzer,address,undefined -o "$t/t" "$t/t.c" >/dev/null 2>&1
  rc=$?
  rm -rf "$t"
  return $rc
}
need=""
if ! have_cmd "$cc"; then
  need="clang"
elif ! links; then
  v=$(major)
  need="libclang-rt-${v:-14}-dev"
fi
if [ "$cov" = "--cov" ]; then
  v=$(major)
  { have_cmd "llvm-profdata-$v" || have_cmd llvm-profdata; } && { have_cmd "llvm-cov-$v" || have_cmd llvm-cov; } ||
    need="$need llvm-${v:-14}"
fi
[ -z "$need" ] && exit 0
if [ "$(id -u)" = 0 ] && have_cmd apt-get; then
  echo "fuzz deps: installing $need"
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086
  apt-get update -qq >/dev/null && apt-get install -y -qq $need >/dev/null || {
    echo "fuzz deps: apt-get install $need failed" >&2; exit 1; }
  if ! links; then # clang was missing: its runtimes may be too (once more, with its version)
    v=$(major)
    have_cmd "$cc" && apt-get install -y -qq "libclang-rt-${v:-14}-dev" >/dev/null 2>&1
    links || { echo "fuzz deps: $cc cannot link -fsanitize=fuzzer,address,undefined" >&2; exit 1; }
  fi
else
  echo "fuzz deps: missing $need; install with: sudo apt-get install $need" >&2
  exit 1
fi
