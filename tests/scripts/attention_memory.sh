#!/bin/sh
# attention_memory.sh BUILD_DIR - the fused attention's memory is linear in the sequence: minimind
# (examples/minimind.pdl) in bf16 at micro-batch 1. The listing's scratch region at seq 4096 is at
# most 4.5 times its size at seq 1024 (the GEMM path's grows with S², 14.7 times); no buffer of the
# fused listing holds S² values; at seq 32768 (one micro-batch) the program compiles and its slots
# and scratch regions are those a line through seq 1024 and 4096 predicts (within 1%).
# Last line: "N passed, M failed".
set -u
build=${1:?usage: attention_memory.sh BUILD_DIR}
. tests/scripts/lib/common.sh
model=examples/minimind.pdl

# region NAME S [FLAGS]: the bytes of the listing's region NAME at sequence S
region() {
  name=$1 seq=$2
  shift 2
  "$ppc" "$model" --precision bf16 --micro-batch 1 --microbatches 1 --seq "$seq" "$@" --emit program \
    >"$tmp/prog.txt" 2>&1 || { cat "$tmp/prog.txt" >&2; echo -1; return; }
  sed -n "s/^region $name *[0-9][0-9]* \([0-9][0-9]*\).*/\1/p" "$tmp/prog.txt" | head -n 1
}

f1=$(region scratch 1024) f4=$(region scratch 4096)
g1=$(region scratch 1024 --attention gemm) g4=$(region scratch 4096 --attention gemm)
if [ "$f1" -gt 0 ] && awk -v a="$f1" -v b="$f4" 'BEGIN { exit !(b <= 4.5 * a) }'; then
  ok "fused: scratch $f1 bytes at seq 1024, $f4 at 4096 ($(awk -v a="$f1" -v b="$f4" 'BEGIN { printf "%.2f", b / a }')x <= 4.5)"
else bad "fused: scratch $f1 bytes at seq 1024, $f4 at 4096"; fi
if [ "$g1" -gt 0 ] && awk -v a="$g1" -v b="$g4" 'BEGIN { exit !(b > 10 * a) }'; then
  ok "gemm: scratch $g1 bytes at seq 1024, $g4 at 4096 ($(awk -v a="$g1" -v b="$g4" 'BEGIN { printf "%.2f", b / a }')x: the S x S scores)"
else bad "gemm: scratch $g1 bytes at seq 1024, $g4 at 4096 (expected the S x S scores' growth)"; fi

# no buffer of the fused listing at seq 4096 has two dimensions of S (a [B*heads, S, S] score matrix)
"$ppc" "$model" --precision bf16 --micro-batch 1 --microbatches 1 --seq 4096 --emit program >"$tmp/p4.txt" 2>&1
big=$(sed -n 's/^buffer \([^ ]*\) [a-z0-9]* \[\([0-9,]*\)\].*/\1 \2/p' "$tmp/p4.txt" |
  awk '{ n = split($2, d, ","); s = 0; for (i = 1; i <= n; i++) s += d[i] == 4096; if (s >= 2) print $1 }' | head -n 3)
if grep -q '^buffer ' "$tmp/p4.txt" && [ -z "$big" ]; then ok "fused at seq 4096: no buffer with two dimensions of 4096"
else bad "fused at seq 4096: buffers of S x S values: ${big:-no buffer lines}"; fi
"$ppc" "$model" --precision bf16 --micro-batch 1 --microbatches 1 --seq 4096 --attention gemm --emit program >"$tmp/g4.txt" 2>&1
if grep -q '^buffer scores[0-9]* bf16 \[[0-9]*,4096,4096\]' "$tmp/g4.txt"; then ok "gemm at seq 4096: its [B*heads,4096,4096] scores buffer (the check above sees one)"
else bad "gemm at seq 4096: no scores buffer of [B*heads,4096,4096]: $(grep -m 3 '^buffer scores' "$tmp/g4.txt")"; fi

# seq 32768: compiles, and its regions lie on the line through seq 1024 and 4096
for name in slots scratch; do
  a=$(region $name 1024) b=$(region $name 4096) c=$(region $name 32768)
  if [ "$c" -gt 0 ] && awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN {
      p = a + (b - a) * (32768 - 1024) / (4096 - 1024); r = c / p; exit !(r > 0.99 && r < 1.01) }'; then
    ok "seq 32768: $name $c bytes, the line through seq 1024 ($a) and 4096 ($b) predicts it"
  else bad "seq 32768: $name $c bytes against the line through $a and $b"; fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
