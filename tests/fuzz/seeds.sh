#!/bin/sh
# seeds.sh — the fuzz targets' seed corpora, under BUILD/fuzz/seeds/:
#   pdl/          every model of the tree: examples/, tests/golden/ (a case's # MODEL: under its
#                 # ARGS:), tests/gradcheck/, tests/models/; the examples over a few meshes
#   listing/      the listings BUILD/ppc writes for some of them, one file per rank
#   safetensors/  the small files of tests/fuzz/seeds/safetensors
#
#   sh tests/fuzz/seeds.sh BUILD
set -eu
build=${1:?usage: seeds.sh BUILD}
ppc=$build/ppc
out=$build/fuzz/seeds
rm -rf "$out"
mkdir -p "$out/pdl" "$out/listing" "$out/safetensors"
for f in examples/*.pdl tests/golden/*.pdl tests/gradcheck/*.pdl tests/models/*.pdl; do
  [ -f "$f" ] || continue
  seed=$out/pdl/$(basename "$(dirname "$f")")_$(basename "$f")
  # a golden case that compiles another file (# MODEL:): that file, under the case's # ARGS: line
  model=$(sed -n 's/^# MODEL: //p' "$f" | head -n 1)
  if [ -n "$model" ] && [ -f "$model" ]; then
    { grep '^# ARGS: ' "$f" | head -n 1; cat "$model"; } >"$seed"
  else
    cp "$f" "$seed"
  fi
done
# the examples over meshes, schedules and the other outputs (fuzz_pdl reads the # ARGS: line)
k=0
for args in "--tp 2 --pp 2" "--pp 4 --microbatches 8 --schedule gpipe" "--pp 2 --dp 2 --microbatches 4 --schedule naive" \
  "--tp 2 --dp 2 --microbatches 2" "--pp 3 --partition balanced" "--pp 2 --emit schedule" "--tp 2 --pp 2 --emit plan" \
  "--tp 2 --emit ir" "--pp 2 --emit c"; do
  for f in examples/*.pdl tests/models/*.pdl; do
    [ -f "$f" ] || continue
    k=$((k + 1))
    { echo "# ARGS: $args"; cat "$f"; } >"$out/pdl/mesh$k-$(basename "$f")"
  done
done
cp tests/fuzz/seeds/safetensors/* "$out/safetensors/"
# listings: the small models whole, the example at a few meshes (each rank's listing a file)
n=0
listings() { # NAME MODEL ARGS...
  name=$1
  shift
  if "$ppc" "$@" --emit program >"$out/listing.tmp" 2>/dev/null; then
    awk -v p="$out/listing/$name" '/^ppr-program /{ if (f) close(f); f = sprintf("%s.r%d.prog", p, r++) } { print > f }' \
      "$out/listing.tmp"
    n=$((n + 1))
  else
    echo "fuzz seeds: ppc $* --emit program failed; no listing seeds from it" >&2
  fi
}
for f in tests/gradcheck/*.pdl; do listings "gc_$(basename "$f" .pdl)" "$f"; done
listings tiny examples/tiny.pdl
listings tiny_tp2pp2 examples/tiny.pdl --tp 2 --pp 2
listings tiny_pp4dp2 examples/tiny.pdl --pp 4 --dp 2 --microbatches 8 --schedule gpipe
listings tiny_zbh1 examples/tiny.pdl --pp 2 --schedule zb-h1
listings tiny_interleaved examples/tiny.pdl --pp 2 --vpp 2 --microbatches 4 --schedule interleaved
listings tiny_zbv examples/tiny.pdl --pp 2 --vpp 2 --microbatches 4 --schedule zbv
listings tiny_gen_tp2pp2 examples/tiny.pdl --tp 2 --pp 2 --generate
listings tiny_gen_zbv examples/tiny.pdl --pp 2 --vpp 2 --microbatches 4 --schedule zbv --generate
rm -f "$out/listing.tmp"
echo "fuzz seeds: $(ls "$out/pdl" | wc -l) models, $(ls "$out/listing" | wc -l) listings of $n compiles, $(ls "$out/safetensors" | wc -l) safetensors files in $out"
