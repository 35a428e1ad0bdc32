#!/bin/sh
# ppr_outputs.sh BUILD_DIR - the files ppr writes (--save, --save-grads, --log, --trace) are
# checked before anything else runs: a path that cannot be written fails within seconds of the
# start, naming the option and the path, instead of after the last step. Last line:
# "N passed, M failed".
set -u
build=${1:?usage: ppr_outputs.sh BUILD_DIR}
. tests/scripts/lib/common.sh
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

"$build/ppc" examples/tiny.pdl -o "$tmp/one" >"$tmp/ppc.txt" 2>&1 &&
  "$build/ppc" examples/tiny.pdl --tp 2 --pp 2 --microbatches 4 -o "$tmp/t2p2" >>"$tmp/ppc.txt" 2>&1 || {
  cat "$tmp/ppc.txt"
  bad "ppc examples/tiny.pdl"
  echo "$pass passed, $fail failed"
  exit 1
}
mkdir "$tmp/adir"

# run LIMIT WHAT EXPECTED CMD...: CMD (a million steps: minutes of training) must fail (exit 1)
# within LIMIT seconds, its output containing EXPECTED
run() {
  limit=$1 what=$2 want=$3
  shift 3
  t0=$(now)
  timeout 120 "$@" >"$tmp/out.txt" 2>&1
  rc=$?
  took=$(elapsed "$t0" "$(now)")
  if [ "$rc" -eq 1 ] && grep -qF -- "$want" "$tmp/out.txt" && awk -v t="$took" -v l="$limit" 'BEGIN { exit !(t < l) }'; then
    ok "$what: fails in $took s: $want"
  else
    bad "$what: should fail (exit 1) within $limit s saying '$want' (exit $rc after $took s)"
    head -n 5 "$tmp/out.txt"
  fi
}

mkdir "$tmp/adir.safetensors"
for opt in --save --save-grads --log --trace; do
  # --save to a path not ending in .safetensors writes a checkpoint folder (ppr_checkpoints.sh)
  x=x d=adir
  [ "$opt" = --save ] && x=x.safetensors d=adir.safetensors
  run 2 "one rank, $opt /nonexistent/$x" "ppr: error: $opt /nonexistent/$x: cannot open for writing: the directory /nonexistent does not exist" \
    "$build/ppr" "$tmp/one" --steps 1000000 --quiet "$opt" "/nonexistent/$x"
  run 2 "one rank, $opt DIRECTORY" "ppr: error: $opt $tmp/$d: cannot open for writing: it is a directory" \
    "$build/ppr" "$tmp/one" --steps 1000000 --quiet "$opt" "$tmp/$d"
  run 2 "one rank, $opt /etc/passwd/$x" "ppr: error: $opt /etc/passwd/$x: cannot open for writing: Not a directory" \
    "$build/ppr" "$tmp/one" --steps 1000000 --quiet "$opt" "/etc/passwd/$x"
  if [ "$opt" = --save ]; then
    run 2 "one rank, --save /dev/null" "ppr: error: --save /dev/null: cannot write a checkpoint folder: /dev/null: exists and is not a folder" \
      "$build/ppr" "$tmp/one" --steps 1000000 --quiet --save /dev/null
  else
    run 2 "one rank, $opt /dev/null" "ppr: error: $opt /dev/null: cannot open for writing: not a regular file" \
      "$build/ppr" "$tmp/one" --steps 1000000 --quiet "$opt" /dev/null
  fi
  run 10 "tp 2 x pp 2, $opt /nonexistent/$x" "ppr: error: $opt /nonexistent/$x: cannot open for writing: the directory /nonexistent does not exist" \
    $MPIRUN -np 4 "$build/ppr" "$tmp/t2p2" --steps 1000000 --quiet "$opt" "/nonexistent/$x"
  n=$(grep -c "^ppr: error: $opt /nonexistent/$x" "$tmp/out.txt")
  if [ "$n" -eq 1 ]; then
    ok "tp 2 x pp 2, $opt /nonexistent/$x: the message is printed once"
  else
    bad "tp 2 x pp 2, $opt /nonexistent/$x: the message should be printed once ($n times)"
  fi
done
run 2 "--save and --log of one file" "ppr: error: --save and --log name the same file '$tmp/x'" \
  "$build/ppr" "$tmp/one" --steps 1000000 --quiet --save "$tmp/x" --log "$tmp/x"

# --log appends to its own run's log alone: a file of something else, or another run's log, is refused
echo old >"$tmp/old.txt"
run 2 "--log of a file that is no ppr log" "--log $tmp/old.txt:1: not a line of a ppr log" \
  "$build/ppr" "$tmp/one" --steps 1000000 --quiet --log "$tmp/old.txt"
"$build/ppr" "$tmp/one" --steps 1 --quiet --log "$tmp/run1.jsonl" >"$tmp/out.txt" 2>&1 || cat "$tmp/out.txt"
run 2 "--log of another run" "--log $tmp/run1.jsonl holds a log already (run " \
  "$build/ppr" "$tmp/one" --steps 1000000 --quiet --log "$tmp/run1.jsonl"

# what can be written is: an existing empty file, a new file in the current directory
: >"$tmp/log.jsonl"
ppr=$(cd "$build" && pwd)/ppr
if (cd "$tmp" && "$ppr" one --steps 2 --quiet --log log.jsonl --save w.safetensors --save-grads g.safetensors \
  --trace t.json >out.txt 2>&1) && grep -q '"step":2' "$tmp/log.jsonl" && [ -s "$tmp/log.svg" ] &&
  [ -s "$tmp/w.safetensors" ] && [ -s "$tmp/g.safetensors" ] && [ -s "$tmp/t.json" ] &&
  [ -z "$(find "$tmp" -name '.ppr-check-*')" ]; then
  ok "an empty --log file, its .svg, --save, --save-grads, --trace without a directory part are written; no check file is left"
else
  bad "writable paths should be written"
  cat "$tmp/out.txt"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
