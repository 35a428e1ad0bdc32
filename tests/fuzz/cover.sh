#!/bin/sh
# cover.sh — line coverage of what the fuzz targets reach: the coverage build (BUILD/fuzz-cov,
# clang's -fprofile-instr-generate -fcoverage-mapping) runs every input of BUILD/fuzz/corpus/NAME
# (or CORPORA/NAME) and BUILD/fuzz/seeds/NAME once; llvm-profdata and llvm-cov summarise it per
# source file. Written to BUILD/fuzz-cov/fuzz_NAME.txt; the totals are printed.
#
#   sh tests/fuzz/cover.sh BUILD [CLANG [CORPORA]]
set -eu
build=${1:?usage: cover.sh BUILD [CLANG [CORPORA]]}
cc=${2:-clang}
corpora=${3:-$build/fuzz/corpus}
dir=$build/fuzz-cov
sh tests/fuzz/deps.sh "$cc" --cov
v=$("$cc" --version | sed -n 's/.*clang version \([0-9][0-9]*\)\..*/\1/p' | head -n 1)
tool() { if command -v "$1-$v" >/dev/null 2>&1; then echo "$1-$v"; else echo "$1"; fi; }
profdata=$(tool llvm-profdata)
cov=$(tool llvm-cov)
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
# NAME SOURCES...: one target, the sources its report covers
report() {
  name=$1
  shift
  t=${name#fuzz_}
  rm -rf "$dir/$t.prof"
  mkdir -p "$dir/$t.prof" "$corpora/$t"
  LLVM_PROFILE_FILE="$dir/$t.prof/%p.profraw" "$dir/$name" -runs=0 -max_len=1048576 -timeout=600 \
    "$corpora/$t" "$build/fuzz/seeds/$t" >"$dir/$name.log" 2>&1 || {
    tail -n 20 "$dir/$name.log"
    echo "cover: $name failed on its corpus (the log: $dir/$name.log)" >&2
    exit 1
  }
  "$profdata" merge -sparse -o "$dir/$t.profdata" "$dir/$t.prof"/*.profraw
  "$cov" report "$dir/$name" -instr-profile="$dir/$t.profdata" "$@" >"$dir/$name.txt"
  inputs=$(sed -n 's/.*INITED.*corp: \([0-9]*\).*/\1/p' "$dir/$name.log" | tail -n 1)
  echo "$name: ${inputs:-?} inputs; covered:"
  # llvm-cov's columns: file, regions, missed, cover, functions, missed, executed, lines, missed, cover
  awk '$1 != "Filename" && $1 !~ /^-/ && NF >= 10 && $8 > 0 {
         printf "  %-36s lines %7s of %5d   functions %7s   regions %7s\n", $1, $10, $8, $7, $4 }' "$dir/$name.txt"
}
report fuzz_pdl compiler grammar "$build/gen"
report fuzz_listing runtime/rt_prog.c runtime/rt_prog_tok.c runtime/rt_prog_header.c runtime/rt_prog_layout.c \
  runtime/rt_prog_instr.c runtime/rt_prog_sched.c
report fuzz_safetensors runtime/rt_safetensors.c runtime/rt_st_write.c
