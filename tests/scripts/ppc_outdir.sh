#!/bin/sh
# ppc_outdir.sh — what `ppc -o DIR` does to DIR: a new directory, an empty one, or a stage
# directory ppc wrote are written whole (nothing of an earlier compile stays); anything else is
# refused before any work; a compile that fails half-way (here: a file-size limit standing in for
# a full disk) leaves DIR exactly as it was and nothing beside it.
#
#   sh tests/scripts/ppc_outdir.sh BUILD_DIR     last line: "N passed, M failed"
set -u
build=${1:?usage: ppc_outdir.sh BUILD_DIR}
ppc=$(cd "$build" && pwd)/ppc
model=$(pwd)/examples/tiny.pdl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PPC_CACHE="$tmp/cache"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2"; }
cd "$tmp" || exit 1
listing() { (cd "$1" && ls -A | sort | tr '\n' ' '); }

# a tp 2 x pp 2 compile, then a pp 1 one into the same directory: only the new files remain
"$ppc" "$model" --tp 2 --pp 2 -o st >out 2>&1 || bad first "$(cat out)"
"$ppc" "$model" -o st/ >out 2>&1 || bad second "$(cat out)"
got=$(listing st)
want="kernels_s0.c kernels_s0.cl kernels_s0.cu kernels_s0.cubin kernels_s0.ptx kernels_s0.so plan.txt rank0.prog "
if [ "$got" = "$want" ]; then ok "recompile replaces the stage directory whole"; else bad recompile "left: $got"; fi

# an empty directory is fine
mkdir empty
if "$ppc" "$model" -o empty >out 2>&1 && [ -f empty/rank0.prog ]; then ok "an empty directory"; else bad empty "$(cat out)"; fi

# a directory holding a file ppc does not write is refused, untouched
mkdir mine && echo keep >mine/notes.txt
if ! "$ppc" "$model" -o mine >out 2>&1 && grep -q "holds 'notes.txt', which ppc does not write" out &&
  [ "$(listing mine)" = "notes.txt " ]; then ok "a foreign file: refused, untouched"
else bad foreign "$(cat out); left: $(listing mine)"; fi
cp -r st st2 && echo x >st2/ckpt.safetensors
if ! "$ppc" "$model" -o st2 >out 2>&1 && grep -q "holds 'ckpt.safetensors'" out && [ -f st2/ckpt.safetensors ]; then
  ok "a checkpoint in a stage directory: refused, kept"
else bad ckpt "$(cat out)"; fi
mkdir other && echo x >other/rank0.prog
if ! "$ppc" "$model" -o other >out 2>&1 && grep -q "has no plan.txt" out; then ok "no plan.txt: not a stage directory"
else bad noplan "$(cat out)"; fi
echo x >afile
if ! "$ppc" "$model" -o afile >out 2>&1 && grep -q "is a file, not a directory" out; then ok "a file"; else bad file "$(cat out)"; fi

# a full disk half-way: the earlier stages stay as they were, no temporary is left beside them
before=$(listing st)
sum=$(cat st/* | cksum)
rm -rf "$PPC_CACHE"
sh -c 'trap "" XFSZ; ulimit -f 40; exec "$0" "$1" --pp 2 -o st' "$ppc" "$model" >out 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "is as it was before this compile" out && [ "$(listing st)" = "$before" ] &&
  [ "$(cat st/* | cksum)" = "$sum" ]; then ok "a failed write leaves the stage directory as it was"
else bad full "exit $rc; $(cat out); left: $(listing st)"; fi
sh -c 'trap "" XFSZ; ulimit -f 40; exec "$0" "$1" -o fresh' "$ppc" "$model" >out 2>&1
if [ $? -eq 1 ] && [ ! -e fresh ] && grep -q "is not written" out; then ok "a failed write of a new directory leaves nothing"
else bad fresh "$(cat out)"; fi
left=$(ls -A | grep -c 'ppc-')
if [ "$left" -eq 0 ]; then ok "no temporary directories left"; else bad temporaries "$(ls -A)"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
