#!/bin/sh
# install.sh BUILD_DIR - `make install PREFIX=DIR` puts ppc, ppr, pprun, their man pages, the tools
# and the examples under DIR, and they work from another directory: compile an example for tp 2,
# train it over mpirun and through pprun, read the log with the installed tool; `man -l` shows each
# page, made from the binary's --help (so every option of --help is in it). Last line:
# "N passed, M failed".
set -u
build=${1:?usage: install.sh BUILD_DIR}
. tests/scripts/lib/common.sh
x=$tmp/prefix
# the make that runs the tests is not this one's parent in its jobs
if env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory install BUILD="$build" PREFIX="$x" \
  >"$tmp/install.txt" 2>&1; then ok "make install PREFIX=$x"; else
  bad "make install PREFIX=$x"
  tail -n 5 "$tmp/install.txt"
fi
want="bin/ppc bin/ppr bin/pprun share/man/man1/ppc.1 share/man/man1/ppr.1 share/man/man1/pprun.1 share/ppr/examples/tiny.pdl share/ppr/tools/ppr_log.py share/ppr/tools/tokenize.py"
missing=""
for f in $want; do [ -s "$x/$f" ] || missing="$missing $f"; done
if [ -z "$missing" ]; then ok "installed: $want"; else bad "not installed:$missing"; fi

mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere" || exit 1
if "$x/bin/ppc" "$x/share/ppr/examples/tiny.pdl" --tp 2 --microbatches 2 -o st >ppc.txt 2>&1 &&
  $MPIRUN -np 2 "$x/bin/ppr" st --steps 2 --quiet --log a.jsonl >ppr.txt 2>&1 &&
  [ "$(python3 "$x/share/ppr/tools/ppr_log.py" a.jsonl step | tr '\n' ' ')" = "1 2 " ]; then
  ok "from another directory: the installed ppc compiles tiny.pdl for tp 2, mpirun runs the installed ppr, ppr_log.py reads its log"
else
  bad "the installed ppc and ppr from another directory"
  tail -n 3 ppc.txt ppr.txt
fi
if "$x/bin/pprun" --dry-run st --steps 1 | grep -qF "$x/bin/ppr st --steps 1" &&
  "$x/bin/pprun" st --steps 1 --quiet --log p.jsonl >pprun.txt 2>&1 && grep -q '^{"step":1,' p.jsonl; then
  ok "the installed pprun starts the ppr beside it"
else
  bad "the installed pprun"
  tail -n 3 pprun.txt
fi
cd - >/dev/null || exit 1

for b in ppc ppr pprun; do
  MANWIDTH=200 man -l "$x/share/man/man1/$b.1" >"$tmp/$b.man" 2>"$tmp/$b.manerr"
  "$build/$b" --help | grep -oE -- '^  (-[a-zA-Z], )?--[a-z][a-z0-9-]*' | grep -oE -- '--[a-z][a-z0-9-]*' >"$tmp/$b.opts"
  absent=""
  while read -r o; do grep -q -- "$o" "$tmp/$b.man" || absent="$absent $o"; done <"$tmp/$b.opts"
  if [ -s "$tmp/$b.man" ] && [ -s "$tmp/$b.opts" ] && [ -z "$absent" ] && grep -q "^NAME" "$tmp/$b.man"; then
    ok "man -l $b.1: NAME, and the $(wc -l <"$tmp/$b.opts") options of $b --help"
  else
    bad "man -l $b.1 should show every option of --help (absent:$absent)"
    head -n 3 "$tmp/$b.manerr"
  fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
