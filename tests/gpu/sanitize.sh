#!/bin/sh
# sanitize.sh: compute-sanitizer (memcheck, racecheck) over whole GPU training
# steps (tiny preset, 2 steps, bf16 and mxfp4-fdw-h16 fast and exact) and over
# the quantizer/GEMM test program. Needs a CUDA build and a GPU. Prints each
# tool's ERROR SUMMARY; exit status non-zero if any reports an error. EXTRA:
# more train options, e.g. EXTRA="--heads 2 --kv-heads 1" (head dim 64: the
# flash attention and, for bf16, its BF16 storage).
set -u
MXLM=${MXLM:-./mxlm}
CS=${CS:-compute-sanitizer}
OUT=${OUT_DIR:-build/sanitize}
mkdir -p "$OUT"
rc=0
# RUNS: tool:recipe:gemm triples
RUNS=${RUNS:-"memcheck:bf16:fast memcheck:mxfp4-fdw-h16:fast memcheck:mxfp4-fdw-h16:exact racecheck:bf16:fast racecheck:mxfp4-fdw-h16:fast racecheck:mxfp4-fdw-h16:exact"}
for trg in $RUNS; do
    tool=${trg%%:*}; rg=${trg#*:}; r=${rg%%:*}; g=${rg#*:}
    rm -rf "$OUT/run-$tool-$r-$g"
    timeout ${TMO:-300} $CS --tool $tool --error-exitcode 9 $MXLM train --device cuda --preset tiny --recipe $r --gemm $g --steps 2 \
      --batch 2 --seq 64 --val-tokens 128 --final-ckpt 0 ${EXTRA:-} --out "$OUT/run-$tool-$r-$g" > "$OUT/$tool-$r-$g.log" 2>&1
    e=$?; [ $e -ne 0 ] && rc=1
    printf '%-10s train tiny %-14s %-5s exit %d: %s\n' $tool $r $g $e "$(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/$tool-$r-$g.log" | tail -1)"
done
exit $rc
