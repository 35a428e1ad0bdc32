#!/bin/sh
# ppr_profile.sh BUILD_DIR - PPR_PROFILE's kernel bytes (runtime/rt_prof.c): the MB a step its
# kernels' buffer arguments span is the listing's (each kernel line's extents, the forward and
# backward blocks once a micro-batch, the optimizer's once a step), a kernel's MB a call is its
# line's, and each GB/s is those bytes over the time printed beside them. examples/tiny.pdl, one
# rank, 3 steps. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_profile.sh BUILD_DIR}
. tests/scripts/lib/common.sh

"$ppc" examples/tiny.pdl -o "$tmp/p" >"$tmp/ppc.txt" 2>&1 || { cat "$tmp/ppc.txt"; bad "ppc examples/tiny.pdl"; }
PPR_PROFILE=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$ppr" "$tmp/p" --steps 3 --quiet >"$tmp/run.txt" 2>&1 ||
  { tail -n 5 "$tmp/run.txt"; bad "ppr with PPR_PROFILE=1"; }

# the listing's kernel lines as "BLOCK KERNEL BYTES", BYTES the sum of the line's extents
# ($OFF:BYTES, @OFF:BYTES)
awk '/^block / { blk = $2 } /^end/ { blk = "" }
  blk != "" && $1 == "kernel" {
    s = 0
    for (i = 3; i <= NF; i++) if ($i ~ /^[$@][0-9]+:[0-9]+$/) { split($i, x, ":"); s += x[2] }
    print blk, $2, s
  }' "$tmp/p/rank0.prog" >"$tmp/lines.txt"
mb=$(sed -n 's/^step micro_batch [0-9]* seq [0-9]* microbatches \([0-9]*\) .*/\1/p' "$tmp/p/rank0.prog")
want=$(awk -v mb="$mb" '{ b[$1] += $3 } END { printf "%.6f", ((b["forward"] + b["backward"]) * mb + b["optimizer"]) / 1e6 }' \
  "$tmp/lines.txt")
got=$(sed -n 's/^  kernels: \([0-9.]*\) MB per step spanned.*/\1/p' "$tmp/run.txt")
if [ -n "$got" ] && awk -v g="$got" -v w="$want" 'BEGIN { exit !(g - w < 0.05001 && w - g < 0.05001) }'; then
  ok "the kernels' MB a step: $got printed, $want from the listing ($mb micro-batches)"
else
  bad "the kernels' MB a step: '$got' printed, $want from the listing ($mb micro-batches)"
  sed -n '/kernels:/,/slowest/p' "$tmp/run.txt" | head -n 3
fi

# each of the slowest kernels: MB a call from its line (one line a kernel for the optimizer's,
# called once a step), GB/s from MB a call and µs a call
awk '/the [0-9]+ slowest kernels:/ { on = 1; next } on && $1 ~ /^k[0-9]+_/ { print $1, $5, $6, $7 }' "$tmp/run.txt" \
  >"$tmp/slow.txt"
n=$(wc -l <"$tmp/slow.txt")
if [ "$n" -ge 1 ]; then ok "$n kernels in the table of the slowest"; else bad "no table of the slowest kernels"; fi
bad_rate=$(awk '$2 >= 0.5 && $3 >= 0.5 { r = $3 / $2 * 1e3; if (r - $4 > 0.01 * $4 + 0.1 || $4 - r > 0.01 * $4 + 0.1) print }' "$tmp/slow.txt")
if [ -z "$bad_rate" ]; then ok "GB/s = MB a call / µs a call on every row of at least 0.5 µs and 0.5 MB"; else
  bad "GB/s against MB a call / µs a call: $bad_rate"
fi
adam=$(awk '$1 == "optimizer" && $2 ~ /_adamw$/ { print $2; exit }' "$tmp/lines.txt")
line_mb=$(awk -v k="$adam" '$2 == k { printf "%.3f", $3 / 1e6; exit }' "$tmp/lines.txt")
prof_mb=$(awk -v k="$adam" '$1 == k { print $3 }' "$tmp/slow.txt")
if [ -z "$prof_mb" ]; then
  echo "SKIP $adam is not among the slowest kernels"
elif [ "$prof_mb" = "$line_mb" ]; then ok "$adam: $prof_mb MB a call, as its line's extents"; else
  bad "$adam: $prof_mb MB a call printed, its line's extents $line_mb"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
