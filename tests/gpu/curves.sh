#!/bin/sh
# curves.sh: 100-step loss curves of the GPU trainer against the CPU trainer
# (tiny preset, the embedded corpus, the same seed), for bf16, fp8 and
# mxfp4-fdw-h16 (fast GEMM path), and the GPU's determinism (two runs, the
# same bits). Needs a CUDA build (./mxlm from make cuda, or MXLM=path) and a GPU.
# Tolerances (nats): mean |train loss difference| over the steps <= TOL_TRAIN,
# |final validation loss difference| <= TOL_VAL (tools/compare_runs.py).
set -u
MXLM=${MXLM:-./mxlm}
OUT=${OUT_DIR:-build/curves}
STEPS=${STEPS:-100}
TOL_TRAIN=${TOL_TRAIN:-0.04}
TOL_VAL=${TOL_VAL:-0.03}
rm -rf "$OUT"; mkdir -p "$OUT"
pass=0; fail=0
check() { if "$@"; then pass=$((pass+1)); else fail=$((fail+1)); fi; }
for r in bf16 fp8 mxfp4-fdw-h16; do
  for d in cpu cuda; do
    OMP_WAIT_POLICY=passive $MXLM train --preset tiny --recipe $r --steps $STEPS --seed 1 --device $d \
      --out "$OUT/$r-$d" --log-every 50 > "$OUT/$r-$d.log" 2>&1 || { echo "run $r $d failed:"; tail -3 "$OUT/$r-$d.log"; }
    tail -1 "$OUT/$r-$d.log" | head -c 0
  done
  printf '%-16s GPU vs CPU: ' $r; check python3 tools/compare_runs.py "$OUT/$r-cpu" "$OUT/$r-cuda" --tol-train $TOL_TRAIN --tol-val $TOL_VAL
done
$MXLM train --preset tiny --recipe mxfp4-fdw-h16 --steps $STEPS --seed 1 --device cuda --out "$OUT/again" \
  --log-every 50 > "$OUT/again.log" 2>&1
printf '%-16s GPU twice:  ' mxfp4-fdw-h16; check python3 tools/compare_runs.py "$OUT/mxfp4-fdw-h16-cuda" "$OUT/again" --identical
for r in bf16 fp8 mxfp4-fdw-h16; do grep -h "^budget\|^converged" "$OUT/$r-cpu.log" "$OUT/$r-cuda.log" | sed "s/^/  $r: /"; done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
