#!/bin/sh
# run.sh — benchmark one training step of ppr against PyTorch eager (see docs/perf.md).
#
#   sh bench/run.sh                       # threads = nproc, 5 warm-up + 20 timed steps
#   THREADS=1 sh bench/run.sh             # another thread count (both sides)
#   THREADS="1 2" sh bench/run.sh         # one table per thread count
#   sh bench/run.sh --rounds 3            # alternate ppr and torch 3 times, pool the steps
#   sh bench/run.sh --steps 50 --models minimind256    # extra flags go to bench/bench.py
#   BUILD=DIR sh bench/run.sh             # use DIR/ppc and DIR/ppr as they are (no make)
#   PPR_PROFILE=1 sh bench/run.sh         # also print ppr's per-instruction profile (stderr)
#
# Not a test: `make test` never runs it. Needs PyTorch under /usr/bin/python3 (1.13 is enough).
# OMP_NUM_THREADS and OPENBLAS_NUM_THREADS are set to the same count for ppr and torch, and
# bench.py calls torch.set_num_threads with it. OPENBLAS_CORETYPE, OPENBLAS_THREAD_TIMEOUT,
# GOMP_SPINCOUNT, OMP_WAIT_POLICY and OMP_PROC_BIND are left as they are in the environment (and
# reported). Work files go to build/bench/.
set -eu
cd "$(dirname "$0")/.."
if [ -n "${BUILD:-}" ]; then
  set -- --build "$BUILD" "$@"
else
  make -s build/ppc build/ppr >/dev/null
fi
THREADS=${THREADS:-$(nproc)}
echo "machine: $(nproc) cpus, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
echo "OPENBLAS_CORETYPE is ${OPENBLAS_CORETYPE+set to '$OPENBLAS_CORETYPE'}${OPENBLAS_CORETYPE-not set}"
status=0
for t in $THREADS; do
  echo
  OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t /usr/bin/python3 bench/bench.py "$@" || status=1
done
exit $status
