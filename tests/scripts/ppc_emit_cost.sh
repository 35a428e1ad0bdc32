#!/bin/sh
# ppc_emit_cost.sh [BUILD_DIR] - `ppc --emit cost` counts what the listings say (docs/perf.md,
# "The cost table"): for each case, awk reads every rank's listing of `--emit program` on its own
# and counts a step's kernel launches (the kernel and grad_norm lines), the bytes they span (the
# :BYTES after their pointer arguments, and for grad_norm 4 bytes an element of each owned
# parameter's gradient: a param line without copy or replica), the GEMMs' FLOPs (2·m·n·k·batch, a triangle's products alone) and the bytes
# their A, B and C span; each block as many times as the rank's schedule runs it (its F, B and W
# entries of the block's chunk; the optimizer once, the refresh block not); and the `step` row of
# each rank's section of `--emit cost` must say the same. Last line: "N passed, M failed".
set -u
build=${1:-build}
. tests/scripts/lib/common.sh

# listing.awk: per listing of a --emit program output, "RANK LAUNCHES KBYTES GEMMS FLOPS GBYTES"
cat >"$tmp/listing.awk" <<'EOF'
function rows(m, c,   q) { q = m < c ? m : c; return q * (q + 1) / 2 + (m > c ? m - c : 0) * c }
# pp_tri.h: the products a triangle keeps
function macs(t, m, n, k,   q) {
  q = m < k ? m : k
  if (t == "out") return rows(m, n) * k
  if (t == "lower") return rows(m, k) * n
  if (t == "upper") return (q * k - q * (q - 1) / 2) * n
  return m * n * k
}
# the elements of a gemm operand: BATCH matrices of r x c, LD and STRIDE apart
function span(batch, stride, r, ld, c) { return (batch - 1) * stride + (r - 1) * ld + c }
function size(t) { return t == "bf16" ? 2 : 4 }
function numel(shape,   d, n, i, p) { gsub(/[][]/, "", shape); n = split(shape, d, ","); p = 1; for (i = 1; i <= n; i++) p *= d[i]; return p }
function chunked(name) { return name ~ /:/ ? name : name ":0" }
/^ppr-program/ { split("", L); split("", K); split("", G); split("", F); split("", GB); split("", runs); gbytes_owned = 0; blk = "" }
{ sub(/#.*/, "") }
/^rank / { rank = $2 }
/^param / {
  own = 1
  for (i = 8; i <= NF; i++) if ($i == "copy" || $i == "replica") own = 0
  if (own) gbytes_owned += 4 * numel($5)
}
/^block / { blk = $2 == "optimizer" || $2 == "refresh" ? $2 : chunked($2); next }
# a gemm's epilogue (epi:): its kernel, the next line, moves its bytes but C's (which the GEMM
# spans: the kernel's first argument for epi:bias, else its second) as part of the GEMM, not as a launch
blk != "" && $1 == "kernel" && epi != "" {
  ci = epi == "bias" ? 1 : 2; epi = ""; a = 0
  for (i = 4; i <= NF; i++) if ($i ~ /^[@$][0-9]+:[0-9]+$/) { split($i, x, ":"); if (++a != ci) GB[blk] += x[2] }
  next
}
blk != "" && $1 == "kernel" {
  L[blk]++
  for (i = 4; i <= NF; i++) if ($i ~ /^[@$][0-9]+:[0-9]+$/) { split($i, x, ":"); K[blk] += x[2] }
}
blk != "" && $1 == "grad_norm" {
  L[blk]++
  for (i = 4; i <= NF; i++) if ($i ~ /^[@$][0-9]+:[0-9]+$/) { split($i, x, ":"); K[blk] += x[2] }
  K[blk] += gbytes_owned
}
blk != "" && $1 == "gemm" {
  ta = $2 == "T"; tb = $3 == "T"; m = $4; n = $5; k = $6; batch = $18
  tri = "none"; t[1] = t[2] = t[3] = "f32"
  for (i = 19; i <= NF; i++) if ($i ~ /^tri:/) tri = substr($i, 5)
  for (i = 19; i <= NF; i++) if ($i ~ /^epi:/) epi = substr($i, 5)
  if (NF >= 21 && $19 !~ /^(tri|epi):/) { t[1] = $19; t[2] = $20; t[3] = $21 }
  G[blk]++
  F[blk] += 2 * macs(tri, m, n, k) * batch
  GB[blk] += size(t[1]) * span(batch, $10, ta ? k : m, $9, ta ? m : k)
  GB[blk] += size(t[2]) * span(batch, $13, tb ? n : k, $12, tb ? k : n)
  GB[blk] += size(t[3]) * span(batch, $17, m, $16, n)
}
$1 == "end" && blk != "" { blk = ""; next }
/^schedule/ { sched = 1; next }
sched && $1 ~ /^[FBW](:[0-9]+)?$/ {
  c = $1 ~ /:/ ? substr($1, 3) : 0
  runs[($1 ~ /^F/ ? "forward" : $1 ~ /^B/ ? "backward" : "weights") ":" c]++
}
sched && $1 == "OPT" { runs["optimizer"] = 1 }
sched && $1 == "end" {
  sched = 0; l = kb = g = f = gb = 0
  for (b in runs) { l += runs[b] * L[b]; kb += runs[b] * K[b]; g += runs[b] * G[b]; f += runs[b] * F[b]; gb += runs[b] * GB[b] }
  printf "%d %d %.0f %d %.0f %.0f\n", rank, l, kb, g, f, gb
}
EOF

# cost.awk: per rank section of --emit cost, the same six numbers from its `step` row
cat >"$tmp/cost.awk" <<'EOF'
/^rank [0-9]+:/ { rank = $2; sub(/:/, "", rank) }
$1 == "step" { printf "%d %d %.0f %d %.0f %.0f\n", rank, $2, $3, $4, $5, $6 }
EOF

check() { # check WHAT MODEL FLAGS...: the listings' counts against --emit cost's
  what=$1
  shift
  if ! "$ppc" "$@" --emit program >"$tmp/prog" 2>"$tmp/err" || ! "$ppc" "$@" --emit cost >"$tmp/cost" 2>>"$tmp/err"; then
    bad "$what: ppc failed"
    head -n 5 "$tmp/err"
    return
  fi
  awk -f "$tmp/listing.awk" "$tmp/prog" | sort -n >"$tmp/want" # --emit program: stage by stage
  awk -f "$tmp/cost.awk" "$tmp/cost" | sort -n >"$tmp/got"
  ranks=$(grep -c '^ppr-program' "$tmp/prog")
  if [ -s "$tmp/want" ] && [ "$(wc -l <"$tmp/want")" -eq "$ranks" ] && cmp -s "$tmp/want" "$tmp/got"; then
    ok "$what: $ranks rank(s), launches, kernel bytes, GEMMs, FLOPs and GEMM bytes as the listings count them ($(head -n 1 "$tmp/want" | cut -d' ' -f2-3 | sed 's/ / launches, /') kernel bytes on rank 0)"
  else
    bad "$what: rank launches kernel-bytes gemms flops gemm-bytes: listings vs --emit cost:"
    diff "$tmp/want" "$tmp/got" | head -n 8
  fi
}

check "GPT-2 bf16, B 8, S 1024, one micro-batch" examples/gpt2.pdl --precision bf16 --micro-batch 8 --seq 1024 \
  --microbatches 1
check "tiny, pp 2 x tp 2, 1f1b, 4 micro-batches" examples/tiny.pdl --pp 2 --tp 2 --microbatches 4
check "tiny, pp 2 x dp 2, zb-h1 (weights blocks), attention as GEMMs (triangles), 8 micro-batches" examples/tiny.pdl \
  --pp 2 --dp 2 --schedule zb-h1 --attention gemm --microbatches 8
check "tiny bf16, pp 2, interleaved (2 chunks a rank), 4 micro-batches" examples/tiny.pdl --pp 2 --vpp 2 \
  --schedule interleaved --precision bf16 --microbatches 4

# the roofline of one rank: a row per device, its step time the kernels' plus the GEMMs'
"$ppc" examples/gpt2.pdl --precision bf16 --micro-batch 8 --seq 1024 --microbatches 1 --emit cost >"$tmp/cost"
devs=$(awk '/^  device /{on=1; next} on && NF == 7 {n++; if ($7 - ($5 + $6) > 0.0015 || ($5 + $6) - $7 > 0.0015) n += 100} on && NF != 7 {on=0} END{print n+0}' "$tmp/cost")
if [ "$devs" = 3 ]; then ok "GPT-2: a roofline row for each of 3 devices, step = kernels + GEMMs"; else
  bad "GPT-2: roofline rows: $devs (expected 3, each step = kernels + GEMMs)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
