#!/bin/sh
# ppr_integrity.sh BUILD_DIR - what must agree or be whole: ranks started with different options,
# or with a stage of another compile, end within seconds, naming the option (or the compile ids),
# both values and the rank; a token file shorter than one row's window is an error; a
# checkpoint's flipped byte fails --resume and --verify naming the tensor; a save removes the
# temporary folder a killed save left; a write past `ulimit -f` is an error that leaves nothing;
# a damaged file of PoCL's kernel cache is rebuilt, not loaded. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_integrity.sh BUILD_DIR}
. tests/scripts/lib/common.sh

"$ppc" examples/tiny.pdl --pp 2 -o "$tmp/pp2" >"$tmp/ppc.txt" 2>&1 && "$ppc" examples/tiny.pdl -o "$tmp/one" >>"$tmp/ppc.txt" 2>&1 || {
  cat "$tmp/ppc.txt"
  bad "ppc examples/tiny.pdl"
  echo "$pass passed, $fail failed"
  exit 1
}

# ---- the ranks' options: one MPMD launch, rank 1 with another value ----------------------------
for case in "--steps 3|--steps 4|--steps|3|4" "--lr 1e-3|--lr 2e-3|--lr|0.001|0.002" "--seed 1|--seed 2|--seed|1|2" \
  "--steps 2|--steps 2 --save-every 1 --save $tmp/x|--save|-|$tmp/x"; do
  a=$(echo "$case" | cut -d'|' -f1) b=$(echo "$case" | cut -d'|' -f2) opt=$(echo "$case" | cut -d'|' -f3)
  va=$(echo "$case" | cut -d'|' -f4) vb=$(echo "$case" | cut -d'|' -f5)
  start=$(date +%s)
  # shellcheck disable=SC2086 # the options are words
  timeout 60 $MPIRUN -np 1 "$ppr" "$tmp/pp2" $a : -np 1 "$ppr" "$tmp/pp2" $b >"$tmp/out.txt" 2>&1
  rc=$? took=$(($(date +%s) - start))
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$took" -le 10 ] &&
    grep -qF -- "$opt is '$va' on rank 0 but '$vb' on rank 1" "$tmp/out.txt"; then
    ok "ranks started with $a and $b: an error naming $opt and both values in ${took} s"
  else
    bad "ranks started with $a and $b should fail naming $opt (exit $rc, ${took} s)"
    head -n 5 "$tmp/out.txt"
  fi
done

# ---- a stage from another compile: rank 1's listing and kernels from a model with another eps -------
sed 's/eps = 1e-6)$/eps = 1e-5)/' examples/tiny.pdl >"$tmp/eps.pdl"
if "$ppc" "$tmp/eps.pdl" --pp 2 -o "$tmp/eps" >"$tmp/ppc.txt" 2>&1; then
  cp -r "$tmp/pp2" "$tmp/mixed"
  cp "$tmp/eps/rank1.prog" "$tmp/eps/kernels_s1".* "$tmp/mixed/"
  start=$(date +%s)
  timeout 60 $MPIRUN -np 2 "$ppr" "$tmp/mixed" --steps 1 >"$tmp/out.txt" 2>&1
  rc=$? took=$(($(date +%s) - start))
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$took" -le 10 ] &&
    grep -q "come from different runs of ppc: compile is '[0-9a-f]*' on rank 0 but '[0-9a-f]*' on rank 1" "$tmp/out.txt"; then
    ok "rank 1's stage from a compile with another eps: an error naming the compile ids in ${took} s"
  else
    bad "rank 1's stage from another compile should fail naming the compile ids (exit $rc, ${took} s)"
    head -n 5 "$tmp/out.txt"
  fi
else
  bad "ppc $tmp/eps.pdl"
  cat "$tmp/ppc.txt"
fi

# ---- a token file shorter than a row's window ---------------------------------------------------
printf 'abc' >"$tmp/short.txt"
expect_fail "--data of 3 tokens (tiny's window: seq 16 + 1)" "fewer than a row's window of seq + 1 = 17" \
  "$ppr" "$tmp/one" --data "$tmp/short.txt" --steps 1

# ---- checksums: a flipped byte of the weights or of the moments --------------------------------
if "$ppr" "$tmp/one" --steps 2 --quiet --save "$tmp/ck" >"$tmp/out.txt" 2>&1 &&
  "$ppr" --verify "$tmp/ck" >"$tmp/v.txt" 2>&1 && grep -q "every checksum matches" "$tmp/v.txt"; then
  ok "--verify of a fresh checkpoint: $(head -n 1 "$tmp/v.txt" | cut -c1-100)"
else
  bad "--verify of a fresh checkpoint should pass"
  cat "$tmp/out.txt" "$tmp/v.txt"
fi
for f in model.safetensors trainer/optimizer.safetensors; do
  rm -rf "$tmp/bad" && cp -r "$tmp/ck" "$tmp/bad"
  size=$(wc -c <"$tmp/bad/$f")
  printf '\377' | dd of="$tmp/bad/$f" bs=1 seek=$((size - 9)) conv=notrunc 2>/dev/null
  expect_fail "--verify: a flipped byte in $f" "do not match the checksum" "$ppr" --verify "$tmp/bad"
  expect_fail "--resume: a flipped byte in $f" "the file is damaged" "$ppr" "$tmp/one" --steps 3 --resume "$tmp/bad"
done

# ---- a killed save's temporary folder goes with the next save; a live writer's stays ----------------
mkdir -p "$tmp/run"
"$ppr" "$tmp/one" --steps 2 --quiet --save "$tmp/run/a" >/dev/null 2>&1
mkdir "$tmp/run/b.tmp-AbC123" "$tmp/run/c.tmp-XyZ789" "$tmp/run/d.tmp-Live00"
touch "$tmp/run/b.tmp-AbC123/.ppr-writing" "$tmp/run/b.tmp-AbC123/model.safetensors"
flock "$tmp/run/d.tmp-Live00/.ppr-writing" sleep 30 &
holder=$!
sleep 0.5
"$ppr" "$tmp/one" --steps 2 --quiet --save "$tmp/run/e" >"$tmp/out.txt" 2>&1
if [ ! -e "$tmp/run/b.tmp-AbC123" ] && [ -d "$tmp/run/c.tmp-XyZ789" ] && [ -d "$tmp/run/d.tmp-Live00" ] && [ -d "$tmp/run/e" ]; then
  ok "a save removes a dead writer's NAME.tmp-XXXXXX folder, keeps a live writer's and one not ppr's"
else
  bad "a save should remove the dead writer's folder only"
  ls -la "$tmp/run"
fi
kill "$holder" 2>/dev/null

# ---- a write past the file size limit: an error naming the file, nothing left ----------------------
for out in big.safetensors bigdir; do
  (
    ulimit -f 100
    exec "$ppr" "$tmp/one" --steps 1 --quiet --save "$tmp/$out"
  ) >"$tmp/out.txt" 2>&1
  rc=$?
  left=$(ls -d "$tmp/$out"* "$tmp/big."* 2>/dev/null | head -n 1)
  if [ "$rc" -eq 1 ] && grep -q "File too large" "$tmp/out.txt" && [ -z "$left" ]; then
    ok "ulimit -f 100, --save $out: exit 1 naming the file ($(cut -c1-70 "$tmp/out.txt" | head -n 1)...), nothing left"
  else
    bad "ulimit -f 100, --save $out: exit 1 with 'File too large' and no file left expected (exit $rc, left: ${left:-none})"
    cat "$tmp/out.txt"
  fi
done

# ---- PoCL's kernel cache: a damaged shared object is rebuilt, not loaded (a copy of the tests' cache)
if "$ppr" "$tmp/one" --device opencl --steps 0 >/dev/null 2>&1; then
  mkdir -p "$tmp/pocl"
  [ -d "${POCL_CACHE_DIR:-}" ] && cp -r "$POCL_CACHE_DIR/." "$tmp/pocl/"
  export POCL_CACHE_DIR="$tmp/pocl"
  rm -f "$tmp/pocl/.ppr-manifest"
  # the first run records the cache; then every adamw kernel truncated, recorded (then unrecorded)
  for how in recorded unrecorded; do
    "$ppr" "$tmp/one" --device opencl --steps 1 --quiet >"$tmp/out.txt" 2>&1 || cat "$tmp/out.txt"
    find "$tmp/pocl" -path '*adamw*' -name '*.so' -exec truncate -s 100 {} \;
    [ "$how" = unrecorded ] && rm -f "$tmp/pocl/.ppr-manifest"
    "$ppr" "$tmp/one" --device opencl --steps 1 --quiet >"$tmp/out.txt" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q "^ppr: note: PoCL's kernel cache: .*adamw.*: removed .*, which PoCL builds again" "$tmp/out.txt"; then
      ok "PoCL's cache, a truncated $how kernel: a one-line note, the entry rebuilt, the step runs"
    else
      bad "PoCL's cache, a truncated $how kernel should be rebuilt with a note (exit $rc)"
      tail -n 3 "$tmp/out.txt"
    fi
  done
else
  echo "SKIP PoCL's cache: no opencl device"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
