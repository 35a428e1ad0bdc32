#!/bin/sh
# tutorial.sh BUILD_DIR - docs/tutorial.md's commands, as written, in one shell (its ```sh blocks in
# order; $T in this script's work folder, build/ as BUILD_DIR): each block must succeed, and what the
# tutorial says they leave must be there: a log of steps 1..150 once each across the resumes, its
# SVG, the checkpoint folder transformers reads, 200 sampled bytes. Last line: "N passed, M failed".
set -u
build=${1:?usage: tutorial.sh BUILD_DIR}
. tests/scripts/lib/common.sh
needs_python3 tutorial
T=$tmp/tut

# the blocks, each ended by a line that records it ran
awk -v T="$T" -v B="$build" '
  /^```sh$/ { on = 1; n++; next }
  /^```$/ && on { on = 0; print "echo \"block " n " done\" >&2"; next }
  on { sub(/^export T=.*/, "export T=" T); gsub(/build\//, B "/"); print }
' docs/tutorial.md >"$tmp/tutorial.sh"
nblocks=$(grep -c '^```sh$' docs/tutorial.md)
if (set -e && . "$tmp/tutorial.sh") >"$tmp/out.txt" 2>"$tmp/err.txt"; then
  ok "docs/tutorial.md: the $nblocks blocks of commands ran"
else
  bad "docs/tutorial.md: a block failed after $(grep -c '^block' "$tmp/err.txt") of $nblocks"
  tail -n 5 "$tmp/err.txt" "$tmp/out.txt"
fi
# (a resume at the checkpoint's own step trains nothing: it adds a validation record, no loss)
if [ "$(python3 tools/ppr_log.py "$T/train.jsonl" step loss | cut -f1 | tr '\n' ' ')" = "$(seq 1 150 | tr '\n' ' ')" ] &&
  [ "$(python3 tools/ppr_log.py "$T/train.jsonl" --starts | wc -l)" -ge 2 ] && grep -q '</svg>' "$T/train.svg"; then
  ok "the log holds steps 1..150 once each over the starts; train.svg drawn"
else bad "the tutorial's log: $(python3 tools/ppr_log.py "$T/train.jsonl" step loss 2>&1 | cut -f1 | tr '\n' ' ')"; fi
if [ -s "$T/run/step-000150/config.json" ] && [ -s "$T/run/step-000150/model.safetensors" ] &&
  grep -q '"LlamaForCausalLM"' "$T/run/step-000150/config.json"; then
  ok "run/step-000150: config.json (LlamaForCausalLM) and model.safetensors"
else bad "run/step-000150 should hold config.json and model.safetensors: $(ls "$T/run" 2>&1 | tr '\n' ' ')"; fi
# (what ran on stderr; the prompt and the sample alone on stdout)
if grep -q '200 tokens after a prompt of 14, temperature 0.8, top-k 20' "$tmp/err.txt" &&
  grep -q '^Permission is ' "$tmp/out.txt" && ! grep -q 'tokens after a prompt' "$tmp/out.txt"; then
  ok "--generate 200 after the prompt's 14 bytes: the sample after the prompt on stdout, what ran on stderr"
else bad "the sample: $(grep -n 'Permission' "$tmp/out.txt" | head -n 2)"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
