#!/usr/bin/env bash
# bench/cpu_train.sh: CPU training throughput of the `tiny` preset per recipe.
# Usage: bench/cpu_train.sh [steps=20] [threads=2] [recipes...]
# Prints a Markdown table: recipe, tokens/s over the training steps (the
# summary's tok_per_s: training time only, evaluation excluded), last loss.
set -eu
cd "$(dirname "$0")/.."
steps=${1:-20}; threads=${2:-2}; shift 2 2>/dev/null || shift $#
recipes=${*:-"fp32 bf16 fp8 mxfp4-f mxfp4-fd mxfp4-fdw mxfp4-fdw-sr mxfp4-fdw-rh16 mxfp4-fdw-h16 mxfp4-fdw-h32"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| recipe | tok/s | loss at step $steps |"
echo "|---|---|---|"
for r in $recipes; do
    OMP_NUM_THREADS=$threads ./mxlm train --preset tiny --recipe "$r" --steps "$steps" --eval-every 0 \
        --val-tokens 1024 --out "$tmp/$r" > "$tmp/$r.log" 2>&1 || { echo "| $r | failed | |"; continue; }
    tps=$(sed -n 's/.*"tok_per_s":\([0-9.e+]*\).*/\1/p' "$tmp/$r/summary.json")
    loss=$(grep "\"step\":$steps,\"tokens\":[0-9]*,\"loss\"" "$tmp/$r/metrics.jsonl" | sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p')
    printf '| %s | %.0f | %s |\n' "$r" "$tps" "$loss"
done
