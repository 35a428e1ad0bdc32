#!/bin/sh
# hf_import.sh — `ppc --from-hf`: every config under tests/hf/ that is not an err_* case gives a
# .pdl that compiles as it is, plans (`--emit plan`), and plans for tp 2 x pp 2; -o writes the same
# text as stdout through a temporary file (none left, an existing file replaced, a directory
# refused); the `# hf-config:` line is the config as read (compared as JSON by python3, when there).
#
#   sh tests/scripts/hf_import.sh BUILD_DIR     last line: "N passed, M failed"
set -u
build=${1:?usage: hf_import.sh BUILD_DIR}
ppc=$(cd "$build" && pwd)/ppc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PPC_CACHE="$tmp/cache"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2"; }

for cfg in tests/hf/*/ tests/hf/*.json; do
  cfg=${cfg%/}
  name=$(basename "$cfg" .json)
  case "$name" in err_*) continue ;; esac
  pdl=$tmp/$name.pdl
  if ! "$ppc" --from-hf "$cfg" -o "$pdl" >"$tmp/out" 2>&1; then
    bad "$name generate" "$(cat "$tmp/out")"
    continue
  fi
  "$ppc" --from-hf "$cfg" >"$tmp/stdout" 2>&1
  if cmp -s "$pdl" "$tmp/stdout"; then ok "$name: -o writes what stdout shows"; else bad "$name -o" "differs from stdout"; fi
  if "$ppc" "$pdl" >"$tmp/out" 2>&1; then ok "$name compiles"; else bad "$name compile" "$(cat "$tmp/out")"; fi
  if "$ppc" "$pdl" --emit plan >"$tmp/out" 2>&1; then ok "$name --emit plan"; else bad "$name plan" "$(cat "$tmp/out")"; fi
  if "$ppc" "$pdl" --emit plan --tp 2 --pp 2 >"$tmp/out" 2>&1; then ok "$name --emit plan --tp 2 --pp 2"; else
    bad "$name tp2 pp2" "$(head -3 "$tmp/out")"; fi
  if command -v python3 >/dev/null 2>&1; then
    json=$cfg
    [ -d "$cfg" ] && json=$cfg/config.json
    if python3 -c 'import json, sys
line = [l for l in open(sys.argv[1]) if l.startswith("# hf-config: ")][0]
sys.exit(json.loads(line[len("# hf-config: "):]) != json.load(open(sys.argv[2])))' "$pdl" "$json"; then
      ok "$name: # hf-config: is the config"
    else bad "$name hf-config" "the # hf-config: line is not the config as read"; fi
  fi
done

# -o: an existing file is replaced, no temporary is left beside it, a directory is refused
echo old >"$tmp/o.pdl"
"$ppc" --from-hf tests/hf/gpt2 -o "$tmp/o.pdl" >"$tmp/out" 2>&1
if grep -q '^model "gpt2"' "$tmp/o.pdl" && [ -z "$(ls -A "$tmp" | grep ppc-)" ]; then ok "-o replaces a file, no temporary left"
else bad "-o replace" "$(cat "$tmp/out"; ls -A "$tmp")"; fi
mkdir "$tmp/d"
if "$ppc" --from-hf tests/hf/gpt2 -o "$tmp/d" >"$tmp/out" 2>&1; then bad "-o directory" "accepted"
elif grep -q "with --from-hf, -o names the .pdl file" "$tmp/out" && [ -z "$(ls -A "$tmp/d")" ]; then ok "-o a directory is refused"
else bad "-o directory" "$(cat "$tmp/out")"; fi
# a failed import writes nothing
if "$ppc" --from-hf tests/hf/err_missing.json -o "$tmp/none.pdl" >"$tmp/out" 2>&1 || [ -e "$tmp/none.pdl" ]; then
  bad "failed import" "exit 0 or a file written"
else ok "a failed import writes no file"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
