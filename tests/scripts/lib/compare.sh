# compare.sh — what the scripts that compare runs share (sourced after common.sh): the losses of a
# --log file, two lists of losses within a limit, and two safetensors files within a tolerance.

# losses LOG: the losses of a --log file, one per line
losses() { python3 -c 'import json,sys; [print(json.loads(l)["loss"]) for l in open(sys.argv[1])]' "$1"; }
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
