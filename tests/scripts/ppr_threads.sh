#!/bin/sh
# ppr_threads.sh BUILD_DIR - the threads of ranks that share a machine (rt_dev_cpu_share_cores):
# with neither OMP_NUM_THREADS nor OPENBLAS_NUM_THREADS set, each of the NP ranks mpirun starts
# here runs min(the CPUs it may use, max(1, the machine's CPUs / NP)) threads, and the start line
# says so when that is fewer than it would have started; with either variable set, the count is the
# user's and the line says nothing. Thread counts do not change a value: the losses are the same.
# examples/tiny.pdl on a 3-stage pipeline. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_threads.sh BUILD_DIR}
. tests/scripts/lib/common.sh
mpi="mpirun --oversubscribe --allow-run-as-root" # common.sh's MPIRUN without the thread counts it sets
np=3

"$ppc" examples/tiny.pdl --pp $np -o "$tmp/pp" >"$tmp/ppc.txt" 2>&1 || cat "$tmp/ppc.txt"
"$ppc" examples/tiny.pdl -o "$tmp/pp0" >"$tmp/ppc0.txt" 2>&1 || cat "$tmp/ppc0.txt"

# run TAG ENV...: 3 steps on np ranks under env ENV..., the output in TAG.txt, the losses in TAG.losses
run() {
  tag=$1
  shift
  env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS "$@" $mpi -np $np "$ppr" "$tmp/pp" --steps 3 >"$tmp/$tag.txt" 2>&1 ||
    { tail -n 5 "$tmp/$tag.txt"; return 1; }
  sed -n 's/^step [0-9]*\/[0-9]*  loss \([^ ]*\) .*/\1/p' "$tmp/$tag.txt" >"$tmp/$tag.losses"
}

# What the ranks may use (mpirun's binding decides), and what the rule gives
online=$(getconf _NPROCESSORS_ONLN)
visible=$($mpi -np $np sh -c 'echo "${OMPI_COMM_WORLD_RANK:-0} $(nproc)"' | sort -n | sed -n '1s/.* //p') # rank 0's
share=$((online / np))
[ "$share" -ge 1 ] || share=1
[ "$share" -le "$visible" ] || share=$visible

if run auto; then
  line=$(grep -m 1 "ranks over MPI" "$tmp/auto.txt")
  if [ "$share" -lt "$visible" ]; then
    want="; $share thread$([ "$share" -eq 1 ] || echo s) a rank ($np ranks share its machine's CPUs)"
    case $line in
    *"$want"*) ok "$np ranks, $online CPUs, $visible each may use, no thread count set: '$want'" ;;
    *) bad "$np ranks, $online CPUs, $visible each may use, no thread count set: expected '$want' in: $line" ;;
    esac
  else
    case $line in
    *"a rank ("*) bad "$np ranks, $online CPUs, $visible each may use: no fewer threads, yet: $line" ;;
    *) ok "$np ranks, $online CPUs, $visible each may use: a rank keeps its $visible threads, and the line says nothing" ;;
    esac
  fi
else
  bad "$np ranks without a thread count set: ppr failed"
fi

for v in OMP_NUM_THREADS OPENBLAS_NUM_THREADS; do
  if run "$v" "$v=1"; then
    if grep -q "a rank (" "$tmp/$v.txt"; then bad "$v=1: the count is the user's, yet: $(grep -m 1 'a rank (' "$tmp/$v.txt")"
    else ok "$v=1: the user's count, and the start line says nothing of threads"; fi
    if [ -s "$tmp/auto.losses" ] && cmp -s "$tmp/auto.losses" "$tmp/$v.losses"; then
      ok "$v=1: the same losses as with the shared count ($(tr '\n' ' ' <"$tmp/$v.losses"))"
    else bad "$v=1: the losses differ from the shared count's: $(tr '\n' ' ' <"$tmp/$v.losses") against $(tr '\n' ' ' <"$tmp/auto.losses")"; fi
  else
    bad "$v=1: ppr failed"
  fi
done

# OMP_PROC_BIND: libgomp binds ppr's first thread to one CPU as it loads, and OpenBLAS, loading
# after it, counts one CPU. ppr runs itself again to set OpenBLAS's variables (neither set here), and
# that run's threads must still be as many as the CPUs ppr may use, kernels and GEMMs, and run on
# more than one of them (before: all on one CPU, the GEMMs on one thread). One process.
nproc_here=$(nproc)
if [ "$nproc_here" -lt 2 ]; then
  echo "SKIP OMP_PROC_BIND=spread: one CPU here, none to spread the threads over"
elif env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u OPENBLAS_CORETYPE -u OPENBLAS_THREAD_TIMEOUT -u OMP_PLACES \
  OMP_PROC_BIND=spread OMP_DISPLAY_AFFINITY=TRUE OMP_AFFINITY_FORMAT='ppr-affinity %A' \
  "$ppr" "$tmp/pp0" --steps 1 >"$tmp/bind.txt" 2>&1; then
  if grep -q "on cpu (OpenBLAS [^,]*, $nproc_here threads)" "$tmp/bind.txt"; then
    ok "OMP_PROC_BIND=spread, $nproc_here CPUs: the kernels and the GEMMs on $nproc_here threads"
  else bad "OMP_PROC_BIND=spread, $nproc_here CPUs: expected 'on cpu (OpenBLAS ..., $nproc_here threads)' in: $(head -n 1 "$tmp/bind.txt")"; fi
  cpus=$(sed -n 's/^ppr-affinity //p' "$tmp/bind.txt" | sort -u)
  if [ "$(echo "$cpus" | grep -c .)" -ge 2 ]; then
    ok "OMP_PROC_BIND=spread: the threads on CPUs of their own ($(echo $cpus))"
  else bad "OMP_PROC_BIND=spread: the threads reported CPUs '$(echo $cpus)', expected two or more"; fi
else
  bad "OMP_PROC_BIND=spread: ppr failed: $(tail -n 3 "$tmp/bind.txt")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
