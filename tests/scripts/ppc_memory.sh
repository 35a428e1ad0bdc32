#!/bin/sh
# ppc_memory.sh BUILD_DIR - `ppc --emit memory` states what -o allocates: for each mesh below,
# every rank's listing (rankN.prog of -o) has the arena and the region bytes (slots: one slot's
# bytes times their count) that --emit memory's table gives for the stage holding that rank, and
# its last line names the rank with the largest arena and its size. --mem-limit refuses exactly
# what does not fit: the most loaded rank's arena less one byte is refused, the arena itself
# compiles. On the cpu device the arena is what a run holds: ppr's peak RSS over a step is at
# least the arena (with bf16, and the GEMM operands widened to fp32 that --emit memory states) and
# at most 1.15 times it (the rest: the libraries, MPI, the step's host copies), in fp32, bf16, with
# --recompute full and with --zero 1 at dp 2.
# Last line: "N passed, M failed".
set -u
build=${1:?usage: ppc_memory.sh BUILD_DIR}
. tests/scripts/lib/common.sh

# compare NAME MODEL FLAGS...: --emit memory against the listings of -o
compare() {
  name=$1 model=$2
  shift 2
  rm -rf "$tmp/out"
  if ! "$ppc" "$model" "$@" -o "$tmp/out" >"$tmp/o.txt" 2>&1 || ! "$ppc" "$model" "$@" --emit memory >"$tmp/mem.txt" 2>&1; then
    bad "$name: ppc failed: $(head -n 3 "$tmp/o.txt" "$tmp/mem.txt")"
    return
  fi
  # per rank from --emit memory: "RANK region bytes" lines and "RANK arena bytes"
  awk '
    /^stage [0-9]+: ranks / {
      sub(/^stage [0-9]+: ranks /, ""); sub(/;.*/, ""); n = split($0, parts, ", "); nr = 0
      for (i = 1; i <= n; i++) {
        if (split(parts[i], ab, "-") == 2) { for (r = ab[1]; r <= ab[2]; r++) ranks[++nr] = r }
        else ranks[++nr] = parts[i]
      }
      next
    }
    /^  [a-z_]+ +[0-9]+ / && nr { for (i = 1; i <= nr; i++) print ranks[i], $1, $2 }
  ' "$tmp/mem.txt" | sort >"$tmp/emit.txt"
  # per rank from its listing: region NAME OFF BYTES [NSLOTS]; arena BYTES
  for f in "$tmp/out"/rank*.prog; do
    r=$(basename "$f" .prog)
    r=${r#rank}
    awk -v r="$r" '
      $1 == "region" { printf "%s %s %.0f\n", r, $2, (NF >= 5 ? $4 * $5 : $4) }
      $1 == "arena" { print r, "arena", $2 }
    ' "$f"
  done | sort >"$tmp/list.txt"
  if [ -s "$tmp/list.txt" ] && cmp -s "$tmp/emit.txt" "$tmp/list.txt"; then
    ok "$name: every rank's regions and arena ($(wc -l <"$tmp/list.txt") figures) as its listing"
  else
    bad "$name: --emit memory against the listings: $(diff "$tmp/emit.txt" "$tmp/list.txt" | head -n 6 | tr '\n' ' ')"
  fi
  # the most loaded rank: the lowest rank of the largest arena
  want=$(awk '$2 == "arena" { if ($3 > best || (($3 == best) && $1 < r)) { best = $3; r = $1 } }
              END { printf "most loaded rank: %d, %.2f GiB", r, best / 1073741824 }' "$tmp/list.txt")
  if [ "$(tail -n 1 "$tmp/mem.txt")" = "$want" ]; then ok "$name: $want"
  else bad "$name: last line '$(tail -n 1 "$tmp/mem.txt")', the listings say '$want'"; fi
  most=$(awk '$2 == "arena" && $3 > m { m = $3 } END { print m }' "$tmp/list.txt")
  if "$ppc" "$model" "$@" --mem-limit "$most" >/dev/null 2>&1 &&
    ! "$ppc" "$model" "$@" --mem-limit "$((most - 1))" >"$tmp/lim.txt" 2>&1 && grep -q "more than --mem-limit" "$tmp/lim.txt"; then
    ok "$name: --mem-limit $most compiles, $((most - 1)) is refused"
  else bad "$name: --mem-limit at the arena ($most) and one byte under: $(head -n 2 "$tmp/lim.txt")"; fi
}

compare "tiny, one rank" examples/tiny.pdl
compare "minimind tp 2 x pp 2 x dp 2, sp, bf16" examples/minimind.pdl --tp 2 --pp 2 --dp 2 --sp --precision bf16 --microbatches 8
compare "minimind pp 4, zbv" examples/minimind.pdl --pp 4 --microbatches 8 --schedule zbv --vpp 2
compare "tiny cp 2 x pp 2, gpipe" examples/tiny.pdl --cp 2 --pp 2 --microbatches 4 --schedule gpipe
compare "gpt2 tp 2, fp32" examples/gpt2.pdl --tp 2 --micro-batch 1 --seq 128 --microbatches 2

# the cpu device: peak RSS against the arena over one step. rss NAME NP [FLAGS]: on NP ranks (each
# its own /usr/bin/time; the most of them against the largest arena). A ppr built with
# AddressSanitizer (make asan) holds its shadow memory and redzones too: then at least the arena.
hi=1.15
if ldd "$ppr" 2>/dev/null | grep -q libasan; then hi=1000; fi
rss() {
  name=$1 np=$2
  shift 2
  rm -rf "$tmp/run"
  "$ppc" examples/minimind.pdl --micro-batch 4 --seq 512 "$@" -o "$tmp/run" >/dev/null 2>&1
  arena=$(cat "$tmp/run"/rank*.prog | awk '$1 == "arena" && $2 > m { m = $2 } END { print m }')
  wide=$("$ppc" examples/minimind.pdl --micro-batch 4 --seq 512 "$@" --emit memory |
    sed -n 's/.*widened to fp32: at most \([0-9]*\) bytes.*/\1/p')
  arena=$((arena + ${wide:-0}))
  if [ "$np" -gt 1 ]; then launch="$MPIRUN -np $np"; else launch=; fi
  # each rank's /usr/bin/time writes its own file (their stderr through mpirun can interleave or be cut)
  rm -f "$tmp"/rss.*
  # shellcheck disable=SC2086,SC2016
  $launch sh -c '/usr/bin/time -o "$0.${OMPI_COMM_WORLD_RANK:-0}" -f "rss %M" "$@"' "$tmp/rss" \
    "$ppr" "$tmp/run" --device cpu --steps 1 --quiet >/dev/null 2>&1
  kb=$(cat "$tmp"/rss.* 2>/dev/null | awk '$1 == "rss" && $2 > m { m = $2 } END { print m }')
  if awk -v a="$arena" -v k="$kb" -v hi="$hi" 'BEGIN { r = k * 1024 / a; exit !(r >= 1 && r <= hi) }'; then
    ok "$name: peak RSS $kb KiB, $(awk -v a="$arena" -v k="$kb" 'BEGIN { printf "%.3f", k * 1024 / a }') times the arena ($arena bytes)"
  else bad "$name: peak RSS ${kb:-?} KiB against an arena of ${arena:-?} bytes (1 to $hi times)"; fi
}
if [ -x /usr/bin/time ]; then
  rss "minimind, fp32, cpu" 1 --microbatches 1
  rss "minimind, bf16, cpu" 1 --microbatches 1 --precision bf16
  rss "minimind, --recompute full, seq 1024, cpu" 1 --microbatches 1 --recompute full --seq 1024
  rss "minimind, dp 2 --zero 1, seq 1024, cpu" 2 --microbatches 2 --dp 2 --zero 1 --seq 1024
else echo "SKIP peak RSS: no /usr/bin/time (Debian's package time)"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
