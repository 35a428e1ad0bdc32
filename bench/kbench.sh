#!/bin/sh
# kbench.sh — each kernel of a compiled stage alone, against the state of the caches (bench/kbench.c):
# hot, cold, and just written by the same thread or by another one, in µs a call.
#
#   sh bench/kbench.sh DIR [RANK] [REPS]   # DIR: ppc -o DIR; RANK's listing (0); best of REPS (10)
#   THREADS=2 sh bench/kbench.sh DIR       # OMP_NUM_THREADS for the kernels (default: nproc)
#   BUILD=DIR2 sh bench/kbench.sh DIR      # DIR2/kbench (default build/; made when missing)
#
# Set beside PPR_PROFILE's per-kernel times of the same stage: a kernel in place near "own" is at
# its floor; near "other", its inputs came from the other core's cache (docs/perf.md). Not a test.
set -eu
dir=${1:?usage: sh bench/kbench.sh DIR [RANK] [REPS]}
rank=${2:-0}
reps=${3:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-build}
prog=$dir/rank$rank.prog
[ -f "$prog" ] || { echo "kbench.sh: no listing $prog (ppc MODEL.pdl -o $dir first)" >&2; exit 2; }
case $build in /*) bin=$build/kbench ;; *) bin=$root/$build/kbench ;; esac
[ -x "$bin" ] || make -s -C "$root" BUILD="$build" "$bin" >/dev/null # make test builds it with its flags
OMP_NUM_THREADS=${THREADS:-$(nproc)} exec "$bin" "$prog" "$reps"
