#!/bin/sh
# kbench.sh BUILD_DIR - bench/kbench.sh, each kernel of a stage alone: one row for each kernel the
# listing launches, in its order, each with the MB its line's buffers span and four positive
# times; and a clear error for a directory without a listing. examples/tiny.pdl, one rank, 2
# threads. Last line: "N passed, M failed".
set -u
build=${1:?usage: kbench.sh BUILD_DIR}
. tests/scripts/lib/common.sh

"$ppc" examples/tiny.pdl -o "$tmp/p" >"$tmp/ppc.txt" 2>&1 || { cat "$tmp/ppc.txt"; bad "ppc examples/tiny.pdl"; }
THREADS=2 BUILD="$build" sh bench/kbench.sh "$tmp/p" 0 2 >"$tmp/k.txt" 2>&1 || { cat "$tmp/k.txt"; bad "kbench.sh ran"; }

# the listing's kernels, each once, in order, with the MB of its first line's extents
awk '$1 == "kernel" && !seen[$2]++ {
    s = 0
    for (i = 3; i <= NF; i++) if ($i ~ /^[$@][0-9]+:[0-9]+$/) { split($i, x, ":"); s += x[2] }
    printf "%s %.2f\n", $2, s / 1e6
  }' "$tmp/p/rank0.prog" >"$tmp/want.txt"
awk '$1 ~ /^k[0-9]+_/ { print $1, $2 }' "$tmp/k.txt" >"$tmp/got.txt"
if [ -s "$tmp/want.txt" ] && cmp -s "$tmp/want.txt" "$tmp/got.txt"; then
  ok "a row for each of the listing's $(wc -l <"$tmp/want.txt") kernels, in order, with its MB"
else
  bad "the rows differ from the listing's kernels (want, got):"
  diff "$tmp/want.txt" "$tmp/got.txt" | head -n 6
fi
notime=$(awk '$1 ~ /^k[0-9]+_/ && !(NF == 6 && $3 >= 0 && $4 >= 0 && $5 >= 0 && $6 >= 0 && $3 $4 $5 $6 ~ /^[0-9.]+$/)' \
  "$tmp/k.txt")
if [ -s "$tmp/got.txt" ] && [ -z "$notime" ]; then ok "every row has its four times"; else
  bad "a row without its four times: $notime"
fi
# the sum row: the rows' times added, positive
sums=$(awk '$1 ~ /^k[0-9]+_/ { for (i = 3; i <= 6; i++) s[i] += $i } $1 == "sum" { for (i = 2; i <= 5; i++) g[i + 1] = $i }
  END { for (i = 3; i <= 6; i++) if (!(g[i] > 0) || g[i] - s[i] > 0.01 * NR || s[i] - g[i] > 0.01 * NR) { print "bad"; exit } }' \
  "$tmp/k.txt")
if grep -q "^sum " "$tmp/k.txt" && [ -z "$sums" ]; then ok "the sum row adds the rows"; else bad "the sum row"; fi

mkdir -p "$tmp/empty"
if BUILD="$build" sh bench/kbench.sh "$tmp/empty" >"$tmp/e.txt" 2>&1; then bad "kbench.sh on a directory without a listing succeeded"
elif grep -q "no listing $tmp/empty/rank0.prog" "$tmp/e.txt"; then ok "a directory without a listing: $(head -n 1 "$tmp/e.txt")"
else bad "a directory without a listing: $(head -n 1 "$tmp/e.txt")"; fi

echo "$pass passed, $fail failed"
