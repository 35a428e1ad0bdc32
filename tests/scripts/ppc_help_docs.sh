#!/bin/sh
# ppc_help_docs.sh [BUILD_DIR] - every option `ppc --help` lists is in docs/language.md's command-line
# table (its first column) and README's ppc synopsis (but --from-hf, another form of the command
# that README shows apart), and every option those two name is one ppc has: the option lists in
# the docs cannot drift from the program. Last line: "N passed, M failed".
set -u
build=${1:-build}
. tests/scripts/lib/common.sh
"$ppc" --help | grep -oE '^  (--[a-z0-9-]+|-o)' | sed 's/^  //' | sort -u >"$tmp/help"
sed -n '/^### Command line/,/^### /p' docs/language.md | grep '^|' | cut -d'|' -f2 |
  grep -oE '`(--[a-z0-9-]+|-o)' | tr -d '`' | sort -u >"$tmp/lang"
sed -n '/^    ppc MODEL.pdl/,/^$/p' README.md | grep -oE '\[(--[a-z0-9-]+|-o)' | tr -d '[' | sort -u >"$tmp/readme"
for doc in lang readme; do
  name=$([ $doc = lang ] && echo "docs/language.md's command-line table" || echo "README's ppc synopsis")
  apart=$([ $doc = readme ] && echo --from-hf || echo --none)
  missing=$(comm -23 "$tmp/help" "$tmp/$doc" | grep -v -e '^--help$' -e '^--version$' -e "^$apart\$" | tr '\n' ' ')
  unknown=$(comm -13 "$tmp/help" "$tmp/$doc" | grep -v -e '^--help$' -e '^--version$' | tr '\n' ' ')
  if [ -s "$tmp/help" ] && [ -s "$tmp/$doc" ] && [ -z "$missing" ] && [ -z "$unknown" ]; then
    ok "$name: the $(wc -l <"$tmp/help") options of ppc --help"
  else bad "$name: missing ${missing:-none}; not ppc's: ${unknown:-none}"; fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
