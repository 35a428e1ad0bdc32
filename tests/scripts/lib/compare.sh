# compare.sh — what the scripts that compare runs share (sourced after common.sh): the losses of a
# --log file, two lists of losses within a limit, and two safetensors files within a tolerance.

# losses LOG: the losses of a --log file, one per line
losses() { python3 tools/ppr_log.py "$1" loss; }
# same_losses A B LIMIT: the two lists (files, one number a line) are as long and agree to LIMIT relative
same_losses() {
  python3 -c '
import sys
a = [float(x) for x in open(sys.argv[1])]; b = [float(x) for x in open(sys.argv[2])]; l = float(sys.argv[3])
sys.exit(0 if len(a) == len(b) and len(a) > 0 and all(abs(x - y) <= l * abs(y) for x, y in zip(a, b)) else 1)' "$@"
}
# tensors GOT REF TOL: every tensor within TOL (tests/reference/compare.py); its last lines if not
tensors() {
  python3 tests/reference/compare.py "$1" "$2" --tol "$3" >"$tmp/cmp.txt" 2>&1 || {
    tail -n 3 "$tmp/cmp.txt"
    return 1
  }
}
# run5 NP DIR TAG ARGS...: five clipped steps (--clip 1) of the program in $tmp/DIR on NP ranks, with
# the script's $args and then ARGS: TAG.losses (one a line), TAG.g.safetensors (the first step's
# gradients), TAG.w.safetensors (the weights after); ppr's last lines if it fails
run5() {
  np=$1 dir=$2 tag=$3
  shift 3
  if [ "$np" -gt 1 ]; then launch="$MPIRUN -np $np"; else launch=; fi
  rm -f "$tmp/$tag.jsonl" # a new run's log
  # shellcheck disable=SC2086
  $launch "$ppr" "$tmp/$dir" $args --steps 5 --clip 1 --quiet --log "$tmp/$tag.jsonl" \
    --save-grads "$tmp/$tag.g.safetensors" --save "$tmp/$tag.w.safetensors" "$@" >"$tmp/out.txt" 2>&1 ||
    { tail -n 5 "$tmp/out.txt"; return 1; }
  losses "$tmp/$tag.jsonl" >"$tmp/$tag.losses"
}
