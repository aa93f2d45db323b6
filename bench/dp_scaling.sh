#!/usr/bin/env bash
# dp_scaling.sh: data-parallel throughput at 1, 2, ... GPUs (NCCL + ZeRO-1, docs/multigpu.md) for the 350m and
# 1b presets, mxfp4-fdw-h16 (fast path) and bf16: tokens/s of the step (median of the run's training lines) and
# the efficiency against linear scaling of the 1-GPU figure. Per-GPU batch fixed (weak scaling).
#   GPUS="1 2" STEPS=30 OUT=dir bench/dp_scaling.sh
set -u
MXLM=${MXLM:-./build/cuda/mxlm}
OUT=${OUT:-build/dp_scaling}
GPUS=${GPUS:-"1 2"}
STEPS=${STEPS:-30}
CFGS=${CFGS:-"350m:8:2048 1b:4:2048"}
RECIPES=${RECIPES:-"mxfp4-fdw-h16 bf16"}
mkdir -p "$OUT"
med() { python3 -c "import json,sys,statistics as s; v=[json.loads(l)['tok_per_s'] for l in open(sys.argv[1]) if '\"tok_per_s\"' in l]; v=v[3:] or v; print(round(s.median(v)))" "$1/metrics.jsonl"; }
printf '| preset | B x T per GPU | recipe | GPUs | tok/s | per GPU | efficiency vs linear |\n|---|---|---|---|---|---|---|\n' > "$OUT/table.md"
for cfg in $CFGS; do
  IFS=: read p b t <<< "$cfg"
  for r in $RECIPES; do
    base=
    for n in $GPUS; do
      d=$OUT/$p-$r-g$n
      rm -rf "$d"
      if [ "$n" = 1 ]; then extra="--nccl 1"; else extra="--gpus $n"; fi
      $MXLM train --preset $p --recipe $r --batch $b --seq $t --steps $STEPS --eval-every 0 --val-tokens $((b*t)) \
        --final-ckpt 0 --recompute 1 --log-every 10 $extra --out "$d" > "$d.log" 2>&1 || { echo "$d failed"; tail -3 "$d.log"; continue; }
      v=$(med "$d"); [ -z "$base" ] && base=$v
      eff=$(python3 -c "print(f'{$v/($base*$n):.3f}')")
      printf '| %s | %s x %s | %s | %s | %s | %s | %s |\n' $p $b $t $r $n $v $((v/n)) $eff | tee -a "$OUT/table.md"
    done
  done
done
