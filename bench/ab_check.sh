#!/bin/bash
# bench/ab_check.sh: before/after check of a change that must not alter the GPU's
# numerics or slow a step (a refactor), on one GPU, in one device call. Not a test.
#   bench/ab_check.sh OUT OLD_MXLM NEW_MXLM ["PRESET:B:T ..."] ["RECIPE ..."] [REPS]
# 1. For each recipe (default bf16 fp8 mxfp4-fdw-h16): 20 steps of `tiny` on the
#    embedded corpus, seed 1, evaluation every 10 steps, with each binary; every
#    training and validation loss must be the same bits (tools/compare_runs.py
#    --identical).
# 2. bench/gpu_train.sh at PRESET (default 125m:16:1024) with each binary, REPS
#    times (default 2) in the order A B A B, so clock drift falls on both; the
#    training losses of A and B must again be identical; then one table of the
#    median tokens/s per (binary, recipe) over all repetitions, and B/A.
set -u
OUT=$1; A=$2; B=$3; CONFIGS=${4:-125m:16:1024}; RECIPES=${5:-bf16 fp8 mxfp4-fdw-h16}; REPS=${6:-2}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
pass=0; fail=0
check() { if "$@"; then pass=$((pass+1)); else fail=$((fail+1)); fi; }
for r in $RECIPES; do
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    "$bin" train --device ${DEVICE:-cuda} --preset tiny --recipe "$r" --steps 20 --seed 1 --eval-every 10 --final-ckpt 0 \
      --out "$OUT/tiny-$r-$side" --log-every 10 > "$OUT/tiny-$r-$side.log" 2>&1 || echo "tiny $r $side: exit $?"
  done
  printf '%-16s tiny 20 steps, A vs B: ' "$r"
  check python3 "$here/../tools/compare_runs.py" "$OUT/tiny-$r-A" "$OUT/tiny-$r-B" --identical
done
for rep in $(seq 1 "$REPS"); do
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    MXLM=$bin sh "$here/gpu_train.sh" "$OUT/speed-$side-$rep" "$CONFIGS" "$RECIPES" > "$OUT/speed-$side-$rep.txt" 2>&1
  done
done
python3 - "$OUT" "$REPS" <<'EOF'
import json, os, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def losses(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [l for l in (json.loads(x, parse_float=str) for x in f if x.strip()) if "loss" in l and "step" in l]
def tps(run):  # tokens/s of steps 3.. (steps 1-2 build cuBLASLt plans), as bench/train_table.py
    return [float(l["tok_per_s"]) for l in losses(run)[2:] if "tok_per_s" in l]
ok = True
rows = {}
for rep in range(1, reps + 1):
    da, db = os.path.join(out, "speed-A-%d" % rep), os.path.join(out, "speed-B-%d" % rep)
    for name in sorted(os.listdir(da)):
        ra, rb = os.path.join(da, name), os.path.join(db, name)
        if not os.path.exists(os.path.join(ra, "metrics.jsonl")):
            continue
        la, lb = [l["loss"] for l in losses(ra)], [l["loss"] for l in losses(rb)]
        if la != lb:
            ok = False
            print("FAIL %s rep %d: training losses differ between A and B" % (name, rep))
        rows.setdefault(name, ([], []))
        rows[name][0].extend(tps(ra)); rows[name][1].extend(tps(rb))
print("%-28s %12s %12s %7s" % ("run (median of steps 3..)", "A tok/s", "B tok/s", "B/A"))
for name, (ta, tb) in sorted(rows.items()):
    if ta and tb:
        ma, mb = statistics.median(ta), statistics.median(tb)
        print("%-28s %12.0f %12.0f %7.3f" % (name, ma, mb, mb / ma))
if not rows:
    ok = False
    print("FAIL: no speed runs finished")
print("speed runs: training losses %s" % ("identical" if ok else "DIFFER"))
sys.exit(0 if ok else 1)
EOF
rc=$?; if [ $rc -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
