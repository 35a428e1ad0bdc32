#!/bin/sh
# format_kernel_files.sh — the kernel files a listing names are checked before they are used: ppc
# rebuilds a damaged cache entry (never copies it) and names each file's size and hash in the
# listing ('object so', 'object cl', 'cuda'); ppr refuses a damaged or truncated kernel file with an
# error naming it and the expected and found size or hash, never by dying of a signal.
#
#   sh tests/scripts/format_kernel_files.sh BUILD_DIR        last line: "N passed, M failed"
set -u
build=${1:?usage: format_kernel_files.sh BUILD_DIR}
ppc=$build/ppc
ppr=$build/ppr
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PPC_CACHE="$tmp/cache"
export OMP_NUM_THREADS=1

ok() { pass=$((pass + 1)); echo "PASS $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2"; }
size() { wc -c <"$1" | tr -d ' '; }
# flip one byte of FILE at OFFSET, keeping its size
poke() { printf 'X' | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null; }
# the BYTES field of the listing's 'object EXT' line
listed() { sed -n "s/^object $2 \\([0-9-]*\\) .*/\\1/p" "$1/rank0.prog"; }
# ppc DIR: compile examples/tiny.pdl into DIR (emptied first)
compile() { rm -rf "$1" && "$ppc" examples/tiny.pdl -o "$1" >"$tmp/ppc.out" 2>&1; }
# same DIR1 DIR2: every file of DIR1 is in DIR2 with the same bytes
same() {
  for f in "$1"/*; do
    cmp -s "$f" "$2/$(basename "$f")" || { echo "$(basename "$f") differs"; return 1; }
  done
  return 0
}
# fails_clearly NAME DEVICE NEEDLE...: ppr on $tmp/d exits 1 (not a signal) and says every NEEDLE
fails_clearly() {
  name=$1 dev=$2
  shift 2
  "$ppr" "$tmp/d" --device "$dev" --steps 1 >"$tmp/ppr.out" 2>&1
  rc=$?
  if [ "$rc" -ne 1 ]; then
    bad "$name" "ppr exit $rc, expected 1 (>= 128: killed by a signal): $(head -c 400 "$tmp/ppr.out")"
    return
  fi
  for n in "$@"; do
    if ! grep -qF -- "$n" "$tmp/ppr.out"; then
      bad "$name" "the message lacks '$n': $(head -c 600 "$tmp/ppr.out")"
      return
    fi
  done
  ok "$name"
}

# ---- ppc: the listing names the files; the cache verifies its entries -------------------------
if ! compile "$tmp/d"; then
  bad "ppc compiles examples/tiny.pdl" "$(cat "$tmp/ppc.out")"
  echo "$pass passed, $fail failed"
  exit 1
fi
cp -r "$tmp/d" "$tmp/clean"
so=$tmp/d/kernels_s0.so
cl=$tmp/d/kernels_s0.cl
if [ "$(head -n 1 "$tmp/d/rank0.prog")" = "ppr-program 5" ] && [ "$(listed "$tmp/d" so)" = "$(size "$so")" ] &&
  [ "$(listed "$tmp/d" cl)" = "$(size "$cl")" ]; then
  ok "the listing (format 3) names the sizes of kernels_s0.so and kernels_s0.cl"
else
  bad "the listing names the kernel files' sizes" "$(sed -n '1p;/^object/p' "$tmp/d/rank0.prog")"
fi
if "$ppr" "$tmp/d" --steps 1 --quiet >"$tmp/ppr.out" 2>&1; then
  ok "ppr runs the program it checked"
else
  bad "ppr runs the program" "$(cat "$tmp/ppr.out")"
fi

entry=$(ls "$PPC_CACHE"/*.so 2>/dev/null | head -n 1)
if [ -z "$entry" ]; then
  bad "ppc caches the C object" "no $PPC_CACHE/*.so"
else
  whole=$(size "$entry")
  truncate -s 1000 "$entry"
  if compile "$tmp/d" && why=$(same "$tmp/clean" "$tmp/d") && [ "$(size "$entry")" = "$whole" ]; then
    ok "a truncated cache entry is compiled again (the files equal a clean compile's) and repaired"
  else
    bad "a truncated cache entry is compiled again" "${why:-} $(cat "$tmp/ppc.out"); entry $(size "$entry") bytes, was $whole"
  fi
  poke "$entry" 2000
  if compile "$tmp/d" && why=$(same "$tmp/clean" "$tmp/d") && "$ppr" "$tmp/d" --steps 1 --quiet >"$tmp/ppr.out" 2>&1; then
    ok "a cache entry with one byte changed is compiled again, not copied"
  else
    bad "a cache entry with one byte changed is compiled again" "${why:-} $(cat "$tmp/ppc.out" "$tmp/ppr.out")"
  fi
  if compile "$tmp/d" && why=$(same "$tmp/clean" "$tmp/d"); then
    ok "the repaired cache entry serves the next compile"
  else
    bad "the repaired cache entry serves the next compile" "${why:-} $(cat "$tmp/ppc.out")"
  fi
fi

# ---- ppr: a damaged kernel file in the program's directory is an error, not a crash ------------
want=$(size "$so")
truncate -s 1000 "$so"
fails_clearly "a truncated kernel_s0.so is refused before dlopen" cpu "$so: has 1000 bytes, expected $want" \
  "'object so' line, $tmp/d/rank0.prog:12"
cp "$tmp/clean/kernels_s0.so" "$so"
poke "$so" 4000
fails_clearly "a kernel_s0.so with one byte changed is refused" cpu "$so: its content hash" "expected $(sed -n \
  's/^object so [0-9]* \([0-9a-f]*\)$/\1/p' "$tmp/d/rank0.prog")"
rm "$so"
fails_clearly "a missing kernels_s0.so" cpu "$so: cannot open the kernel file"
cp "$tmp/clean/kernels_s0.so" "$so"

if "$ppr" "$tmp/clean" --device opencl --steps 1 --quiet >"$tmp/ppr.out" 2>&1; then
  want=$(size "$cl")
  truncate -s 500 "$cl"
  fails_clearly "a truncated kernel_s0.cl is refused before the OpenCL build" opencl "$cl: has 500 bytes, expected $want"
  cp "$tmp/clean/kernels_s0.cl" "$cl"
  poke "$cl" 1000
  fails_clearly "a kernel_s0.cl with one byte changed is refused" opencl "$cl: its content hash"
  cp "$tmp/clean/kernels_s0.cl" "$cl"
else
  echo "SKIP the opencl checks: no OpenCL device here ($(head -n 1 "$tmp/ppr.out"))"
fi

if grep -q '^cuda sm_[0-9]* [0-9]' "$tmp/d/rank0.prog" &&
  "$ppr" "$tmp/clean" --device cuda --steps 1 --quiet >"$tmp/ppr.out" 2>&1; then
  cubin=$tmp/d/kernels_s0.cubin
  truncate -s 100 "$cubin"
  fails_clearly "a truncated kernel_s0.cubin is refused before cuModuleLoadData" cuda "$cubin: has 100 bytes, expected"
  cp "$tmp/clean/kernels_s0.cubin" "$cubin"
else
  echo "SKIP the cuda checks: no cubin or no CUDA device here ($(head -n 1 "$tmp/ppr.out"))"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
