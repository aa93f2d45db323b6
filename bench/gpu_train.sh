#!/bin/sh
# gpu_train.sh: training throughput of the GPU trainer (not a test).
#   bench/gpu_train.sh OUTDIR "PRESET:B:T ..." "RECIPE[/exact] ..." [STEPS]
# One short `mxlm train` per (preset, recipe) on the embedded tiny shards (token
# ids < 4096 fit every preset's vocabulary; the data do not change the speed)
# for the tokens/s, without instrumentation (the peer has none either), then a
# second one with MXLM_GPU_PROFILE=1 for the time split (its CUDA events between
# the parts cost time: until 2026-12-03 the tokens/s came from the
# profiled run) into DIR.prof and DIR.prof.log (PROFILE=0: no second run); then
# bench/train_table.py prints the table (median step time over steps 3..STEPS).
set -u
OUT=$1; CONFIGS=$2; RECIPES=$3; STEPS=${4:-8}
MXLM=${MXLM:-./mxlm}
mkdir -p "$OUT"
for pc in $CONFIGS; do
  p=${pc%%:*}; rest=${pc#*:}; b=${rest%%:*}; t=${rest#*:}
  for rr in $RECIPES; do
    r=${rr%/exact}; g=fast; [ "$rr" != "$r" ] && g=exact
    d="$OUT/$p-$r-$g"
    profs=0; [ "${PROFILE:-1}" = 1 ] && profs="0 1"
    for prof in $profs; do
      [ "$prof" = 1 ] && dd="$d.prof" || dd="$d"
      rm -rf "$dd"
      MXLM_GPU_PROFILE=$prof timeout 300 $MXLM train --device ${DEVICE:-cuda} --preset $p --recipe $r --gemm $g --batch $b \
        --seq $t --steps $STEPS --warmup 1 --eval-every 0 --val-tokens $((b * t)) --out "$dd" --log-every 1 --final-ckpt 0 \
        ${EXTRA:-} > "$dd.log" 2>&1 || echo "$p $r $g (profile $prof): exit $? ($(tail -1 "$dd.log"))"
      [ "$prof" = 1 ] && rm -f "$dd/metrics.jsonl" # its tokens/s are the instrumented ones: not pooled
    done
  done
done
python3 "$(dirname "$0")/train_table.py" "$OUT"
