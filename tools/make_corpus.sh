#!/usr/bin/env bash
# Regenerate data/kjv.jsonl.gz, the embedded corpus: the King James Bible from
# Debian's bible-kjv-text package (read with its `bible` program), one chapter a
# JSON line {"text": "..."}, in canonical order; gzip -n so the bytes are reproducible.
# Needs: apt-get install bible-kjv bible-kjv-text
set -euo pipefail
cd "$(dirname "$0")/.."
command -v bible >/dev/null || { echo "install bible-kjv and bible-kjv-text first" >&2; exit 1; }
bible -l1000000 "gen1:1-rev22:21" | awk '
function flush() { if (doc != "") { gsub(/\\/, "\\\\", doc); gsub(/"/, "\\\"", doc); gsub(/\n/, "\\n", doc);
                   printf "{\"text\": \"%s\"}\n", doc } doc = "" }
/^$/ { next }
/^[^ ]/ { flush(); doc = $0 "\n\n"; next }          # chapter heading, e.g. "Genesis 1"
{ sub(/^ +/, ""); doc = doc $0 "\n" }             # verse: "1 In the beginning ..."
END { flush() }' | gzip -n -9 > data/kjv.jsonl.gz
echo "data/kjv.jsonl.gz: $(zcat data/kjv.jsonl.gz | wc -l) documents, $(zcat data/kjv.jsonl.gz | wc -c) bytes"
