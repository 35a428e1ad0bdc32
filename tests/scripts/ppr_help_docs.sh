#!/bin/sh
# ppr_help_docs.sh [BUILD_DIR] - every option `ppr --help` lists is in docs/ppr.md's options tables
# (the first column of the tables under "## Options"), once, and every option those tables name
# is one ppr --help lists; and every long option ppr's parser takes (ppr/ppr_cli.c's table) is
# in --help: the option list in the docs cannot drift from the program. Last line: "N passed, M failed".
set -u
build=${1:-build}
. tests/scripts/lib/common.sh
# --help's option lines: two spaces, then the option(s) and the argument, two or more spaces, the text
"$ppr" --help | grep -E '^  -' | awk -F'  +' '{print $2}' | grep -oE -- '--?[a-z0-9][a-z0-9-]*' |
  sort -u >"$tmp/help"
# the tables' first column, from "## Options" to the next "## " heading
awk '/^## /{on = /^## Options/} on' docs/ppr.md | grep '^|' | cut -d'|' -f2 |
  grep -oE -- '`--?[a-z0-9][a-z0-9-]*' | tr -d '`' | sort >"$tmp/rows"
sort -u "$tmp/rows" >"$tmp/doc"
missing=$(comm -23 "$tmp/help" "$tmp/doc" | tr '\n' ' ')
unknown=$(comm -13 "$tmp/help" "$tmp/doc" | tr '\n' ' ')
twice=$(uniq -d "$tmp/rows" | tr '\n' ' ')
if [ -s "$tmp/help" ] && [ -s "$tmp/doc" ] && [ -z "$missing" ] && [ -z "$unknown" ] && [ -z "$twice" ]; then
  ok "docs/ppr.md's options tables: the $(wc -l <"$tmp/help") options of ppr --help, a row each"
else bad "docs/ppr.md's options tables: missing ${missing:-none}; not ppr's: ${unknown:-none}; in two rows: ${twice:-none}"; fi
# the parser's long options ({"name", required_argument|no_argument, ...} in ppr_cli.c)
grep -oE '\{"[a-z0-9-]+", (required|no)_argument' ppr/ppr_cli.c | cut -d'"' -f2 | sed 's/^/--/' |
  sort -u >"$tmp/parsed"
hidden=$(comm -23 "$tmp/parsed" "$tmp/help" | tr '\n' ' ')
if [ -s "$tmp/parsed" ] && [ -z "$hidden" ]; then ok "ppr --help: the $(wc -l <"$tmp/parsed") long options ppr parses"
else bad "ppr --help: options ppr parses but --help does not list: ${hidden:-none (no option table found)}"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
