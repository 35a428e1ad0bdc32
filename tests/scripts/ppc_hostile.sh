#!/bin/sh
# ppc_hostile.sh — ppc against inputs built to hurt it: deep and long expressions, floods of
# errors, huge statement and argument counts, the largest model the language allows, a layer
# body that names its loop variable. Each must end in a clear error or a result, by itself
# (never a signal), within a time limit generous enough for a sanitizer build on a loaded
# machine yet far below what quadratic work would take (the inputs are sized for that).
#
#   sh tests/scripts/ppc_hostile.sh BUILD_DIR     last line: "N passed, M failed"
set -u
build=${1:?usage: ppc_hostile.sh BUILD_DIR}
ppc=$build/ppc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2"; }
limit=${HOSTILE_TIMEOUT:-60}

# run NAME WANT_EXIT TEXT ARGS...: ppc within the limit, its exit code, TEXT in its output
run() {
  name=$1 want=$2 text=$3
  shift 3
  start=$(date +%s)
  timeout "$limit" "$ppc" "$@" >"$tmp/$name.out" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  if [ "$rc" -eq 124 ]; then bad "$name" "more than $limit s"; return; fi
  if [ "$rc" -ge 128 ] || grep -qE 'AddressSanitizer|runtime error:' "$tmp/$name.out"; then
    tail -n 20 "$tmp/$name.out"
    bad "$name" "died (exit $rc)"
    return
  fi
  if [ "$rc" -ne "$want" ]; then bad "$name" "exit $rc, expected $want"; return; fi
  if ! grep -qF -- "$text" "$tmp/$name.out"; then
    head -c 600 "$tmp/$name.out"
    bad "$name" "no '$text' in the output"
    return
  fi
  ok "$name ($secs s)"
}

gen() { python3 -c "$1" >"$tmp/$2"; }

# 150,000 '+' terms (300 KB, one line): a located depth error, not a stack overflow
gen "print('train { seq = 1 } dim a = 1' + '+1' * 150000)" plus.pdl
run plus 1 "expression nested too deeply" "$tmp/plus.pdl"

# 20,000 nested parentheses
gen "print('train { seq = 1 } dim a = ' + '(' * 20000 + '1' + ')' * 20000)" parens.pdl
run parens 1 "nested too deeply" "$tmp/parens.pdl"

# 5,000 ';' on one line: 20 errors, then a stop; each shows a window of the line, not all of it
gen "print(';' * 5000)" semis.pdl
run semis 1 "too many errors (20)" "$tmp/semis.pdl"
bytes=$(wc -c <"$tmp/semis.out")
lines=$(grep -c ': error: ' "$tmp/semis.out")
if [ "$bytes" -le 16384 ] && [ "$lines" -le 21 ]; then ok "semis: $lines error lines, $bytes bytes"
else bad semis "$lines error lines, $bytes bytes of output"; fi

# 200,000 statements before a real model
gen "print(''.join('dim d%d = %d\n' % (i, i + 1) for i in range(200000)))" stmts.pdl
cat examples/tiny.pdl >>"$tmp/stmts.pdl"
run stmts 0 "checks: 4 layers" "$tmp/stmts.pdl"

# 100,000 arguments to an op that takes two
gen "print(open('examples/tiny.pdl').read().replace('x = embedding(tokens, embed)', 'x = embedding(' + ', '.join(['tokens'] * 100000) + ')'))" args.pdl
run args 1 "error: too many inputs: embedding takes 2" "$tmp/args.pdl"

# 100,000 layers, the most the language allows: checked, planned and partitioned
sed 's/^dim layers *= .*/dim layers = 100000/' examples/tiny.pdl >"$tmp/l100k.pdl"
run layers_check 0 "checks: 100000 layers, 1100002 parameter tensors" "$tmp/l100k.pdl"
run layers_plan 0 "model.layers.99999.mlp.down_proj.weight" "$tmp/l100k.pdl" --emit plan
run layers_plan_pp 0 "stage 999: layers [99900, 100000)" "$tmp/l100k.pdl" --emit plan --pp 1000 --tp 2
run layers_balanced 0 "stage 7:" "$tmp/l100k.pdl" --emit plan --pp 8 --partition balanced
sed 's/^dim layers *= .*/dim layers = 100001/' examples/tiny.pdl >"$tmp/l100k1.pdl"
run layers_over 1 "100001 layers is more than this compiler supports (100000)" "$tmp/l100k1.pdl"

# a layer body that names its loop variable is built layer by layer; one that does not is built
# once and copied: both must give the same graph
sed 's/^for l in 0..layers {/& dim unused = l + 1/' examples/tiny.pdl >"$tmp/named.pdl"
for mesh in "" "--tp 2 --pp 2"; do
  # shellcheck disable=SC2086
  if "$ppc" examples/tiny.pdl --emit ir $mesh >"$tmp/copied.ir" 2>&1 && "$ppc" "$tmp/named.pdl" --emit ir $mesh >"$tmp/named.ir" 2>&1 &&
    cmp -s "$tmp/named.ir" "$tmp/copied.ir"; then ok "copied layers equal built ones${mesh:+ ($mesh)}"
  else bad "copied layers${mesh:+ ($mesh)}" "the graphs differ: diff $tmp/named.ir $tmp/copied.ir"; fi
done

# a mesh larger than ppr runs writes nothing
run ranks 1 "is 65537 ranks, more than 65536" examples/tiny.pdl --dp 65537 --microbatches 65537 -o "$tmp/ranks"
if [ -e "$tmp/ranks" ]; then bad ranks_nothing "wrote $tmp/ranks"; else ok "ranks: nothing written"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
