#!/bin/bash
# bench/study_round.sh: one device call of the study's sweeps (issues 17 and 47). Not a test. The study resumes: each call
# trains for at most BUDGET seconds, then brings back every finished run, and the next call carries
# those back in and goes on. Run from the repository root on the GPU machine:
#   OUT=$OUT SIZE=20m|60m|125m BUDGET=480 PARALLEL=4 [RECIPES=...] [SEEDS=1,2,3] [EXTEND=1] [CKPT=N] [DATA_ONLY=1] \
#     bash bench/study_round.sh
# SIZE=20m (default): preset 20m, 1000 steps x 32 x 512 = 16.4M tokens, evaluation and telemetry every 100
#   steps, the 15 recipes of item 2 and the formats issue's four (nvfp4, nvfp4-nvidia, mxfp8, mxfp4-tseng) as extra rows. SIZE=60m (item 4, the second size): preset 60m, 2000 steps x 16 x 1024 =
#   32.8M tokens (0.52 per non-embedding parameter), every 200 steps, the decisive subset. SIZE=125m (issue 47):
#   preset 125m, 6104 steps x 16 x 1024 = 100.0M tokens, evaluation and telemetry every 610 steps (10% of the
#   budget), issue 47's six recipes (bf16 seed 1 as a reference: RECIPES=bf16 SEEDS=1), from four training shards
#   (59.6M distinct tokens: 1.68 passes in expectation, the windows being drawn at random). All: 1M validation
#   tokens per evaluation, the same seeds for every recipe, the trainer's default schedule (peak LR 3e-3, warmup
#   steps/20, cosine to 0.1x).
# EXTEND=1 adds --extend (runs that ended above their target are trained on to the did-not-converge limit;
# without checkpoints, which are not carried, from step 0).
# CKPT=N adds --ckpt-every N --keep-ckpts 1: a run cut off by BUDGET leaves its checkpoint on the machine (the
# trainer also writes one at the step boundary after the time limit's SIGTERM), so a next call made while the
# machine is still warm (runs/ is git-ignored and stays) goes on from it instead of from step 0.
# Carried (git-ignored .device-carry/, named in the device call's `carry`; S = study20m or study60m):
#   mxlm.xz                 the CUDA build's binary (xz -9 of a stripped build/cuda/mxlm); BIN=NAME takes
#                           .device-carry/NAME instead (e.g. mxlm-2c82275q.xz, bench/make_carry.sh's mxlm@REV)
#   study20m-train.bin.xz   mxlm prep --encoding r50k_base --train-pattern 'build/study20m/train_%06d.bin'
#                           --val-fraction 0 ../shared/corpus/train-00.jsonl.zst ../shared/corpus/train-01.jsonl.zst
#                           (one shard, 28.8M tokens, sha256 bad5a90a...), xz'd
#   study60m-train.bin.xz   the same with train-00, -01 and -02 into build/study60m/ (44.3M tokens, sha256
#                           b7304b32...), cut to its first 35M tokens (the header's count set to 35,000,000;
#                           sha256 d940fe11...; 37.9 MB xz'd, so that it fits a call with the tracked tree:
#                           each run samples 32.8M tokens' windows from it; leave the 20m files out of a 60m call)
#   study125m-train-K.bin.xz  K = 0..3: train-0K of ../shared/corpus as one shard each (bench/make_carry.sh
#                           study125m: sha256 148eb5e4 / 6e7c6500 / 255b58c3 / bd80aa92...), ~15.5 MB each:
#                           more than one call carries with the tree, so a first call carries shards 0 and 1 with
#                           DATA_ONLY=1 (unpacked into build/study125m/, which stays on the warm machine), and the
#                           next, made at once, carries 2 and 3 and the validation file and trains; a call finding
#                           all four in build/study125m/ needs none of them
#   study20m-val.bin        the same from ../shared/corpus/val.jsonl.zst with --train-pattern
#                           build/study20m/val.bin (1.27M tokens: the whole validation set; both sizes)
#   S-runs.tgz              optional: runs finished by earlier calls and not yet committed to docs/results/
#                           (the committed ones, study-20m-16m-h200/ and study-60m-33m-h200/, are copied
#                           into runs/ from the tracked tree, which every call has)
# Brings back $OUT/S-runs.tgz (every finished run: config.txt, metrics.jsonl, summary.json, train.log,
# tokenizer.txt, and study.txt; no checkpoints (ckpt-*.bin, ~660 MB per 20m run): an unfinished run starts
# again next call), $OUT/study-run.log and the report of what is finished ($OUT/report.md). Unpack it over
# runs/ here and commit the run directories (issue 17 asks for them in docs/results/).
set -u
RET=${OUT:-/tmp/study-out}
mkdir -p "$RET"
C=.device-carry
SIZE=${SIZE:-20m}
case $SIZE in
  20m) ARGS="--preset 20m --steps 1000 --batch 32 --seq 512 --eval-every 100 --telemetry-every 100"
       ALL=fp8,bf16,mxfp4-f,mxfp4-fd,mxfp4-fdw,mxfp4-f-sr,mxfp4-fd-sr,mxfp4-fdw-sr,mxfp4-f-rh16,mxfp4-fd-rh16,mxfp4-fdw-rh16,mxfp4-fdw-h16,mxfp4-fdw-h32,mxfp4-fdw-h16-2d,mxfp4-fdw-h16-even,nvfp4,nvfp4-nvidia,mxfp8,mxfp4-tseng ;;
  60m) ARGS="--preset 60m --steps 2000 --batch 16 --seq 1024 --eval-every 200 --telemetry-every 200"
       ALL=fp8,mxfp4-fd,mxfp4-fdw,mxfp4-fdw-sr,mxfp4-fdw-rh16,mxfp4-fdw-h16 ;;
  125m) ARGS="--preset 125m --steps 6104 --batch 16 --seq 1024 --eval-every 610 --telemetry-every 610"
       ALL=fp8,mxfp4-fd,mxfp4-fdw,mxfp4-fdw-rh16,mxfp4-fdw-h16,mxfp4-fdw-h32 ;;
  *) echo "study_round: SIZE=$SIZE: 20m, 60m or 125m" >&2; exit 2 ;;
esac
# a smoke test of a round on the CPU: SMOKE_ARGS="--steps 4 --batch 2 --seq 64 ..." replaces the trainer options
# after the preset's, DEVICE=cpu and VAL_TOKENS=N (fewer validation tokens); runs/ and the results go where a
# device call's would
[ -n "${SMOKE_ARGS:-}" ] && ARGS="${ARGS%% --steps*} $SMOKE_ARGS"
S=study$SIZE
D=runs/$S
RECIPES=${RECIPES:-$ALL}
SEEDS=${SEEDS:-1,2,3}
P=${PARALLEL:-4}
# (the training file only when build/$S has none yet: a call on a still-warm machine need not carry it)
BIN=${BIN:-mxlm.xz}
mkdir -p build/$S runs /tmp/sr
if [ "$SIZE" = 125m ]; then
  # the four shards: each unpacked where carried and not yet here (into a part file first: a call cut off while
  # unpacking leaves no half shard for the next to take)
  for k in 0 1 2 3; do
    t=build/$S/train_00000$k.bin
    if [ ! -f "$t" ] && [ -f "$C/$S-train-$k.bin.xz" ]; then
      xz -dc "$C/$S-train-$k.bin.xz" > "$t.part" && mv "$t.part" "$t" || { echo "study_round: $C/$S-train-$k.bin.xz" >&2; exit 2; }
    fi
  done
  have=$(ls build/$S/train_00000[0-3].bin 2> /dev/null | wc -l)
  echo "study_round: $have of 4 training shards in build/$S/" | tee "$RET/data.txt"
  [ "${DATA_ONLY:-0}" = 1 ] && exit 0
  [ "$have" = 4 ] || { echo "study_round: carry the missing shards (see the header)" >&2; exit 2; }
  need="$BIN study20m-val.bin"
else
  [ "${DATA_ONLY:-0}" = 1 ] && { echo "study_round: DATA_ONLY is for SIZE=125m" >&2; exit 2; }
  need="$BIN $( [ -f build/$S/train_000000.bin ] || echo $S-train.bin.xz ) study20m-val.bin"
fi
for f in $need; do
  [ -f "$C/$f" ] || { echo "study_round: $C/$f missing (see the header)" >&2; exit 2; }
done
xz -dc "$C/$BIN" > /tmp/sr/mxlm && chmod +x /tmp/sr/mxlm
[ "$SIZE" = 125m ] || [ -f build/$S/train_000000.bin ] || xz -dc "$C/$S-train.bin.xz" > build/$S/train_000000.bin
cp "$C/study20m-val.bin" build/$S/val.bin
# the finished runs: those committed in docs/results (the tracked tree comes with every call: nothing to
# carry for them), then those of a carried $S-runs.tgz (runs finished since, not yet committed)
case $SIZE in
  20m) R=docs/results/study-20m-16m-h200 ;;
  60m) R=docs/results/study-60m-33m-h200 ;;
  125m) R=docs/results/study-125m-100m ;;
esac
mkdir -p "$D"
for r in "$R"/*/; do
  [ -f "$r/summary.json" ] || continue
  n=$(basename "$r"); [ -e "$D/$n" ] && continue
  mkdir -p "$D/$n" && cp "$r"/config.txt "$r"/summary.json "$r"/tokenizer.txt "$D/$n/" &&
    gzip -dc "$r/metrics.jsonl.gz" > "$D/$n/metrics.jsonl" &&
    { [ ! -f "$r/train.log.gz" ] || gzip -dc "$r/train.log.gz" > "$D/$n/train.log"; } || { echo "study_round: $r" >&2; exit 2; }
done
[ -f "$D/study.txt" ] || [ ! -f "$R/study.txt" ] || cp "$R/study.txt" "$D/study.txt"
[ -f "$C/$S-runs.tgz" ] && tar xzf "$C/$S-runs.tgz" -C runs
export OMP_WAIT_POLICY=passive
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > "$RET/gpu.txt"
# P runs at a time on the one GPU (slot i gets the i-th entry of CUDA_VISIBLE_DEVICES: all 0), under MPS
# where the machine has it (MPS=0 turns it off): plain processes are time-sliced, so several 20m runs
# only share the GPU's time (1 / 2 / 4 at a time: 351k / 368k / 387k tok/s in all), while MPS runs their
# kernels side by side (354k / 436k / 469k; H200, 2026-12-02, bench/device_round.sh PARTS=conc)
DEVS=0; for ((i = 1; i < P; i++)); do DEVS="$DEVS,0"; done
mps=0
if [ "${MPS:-1}" = 1 ] && [ "$P" -gt 1 ] && command -v nvidia-cuda-mps-control > /dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p /tmp/mps-pipe /tmp/mps-log
  nvidia-cuda-mps-control -d && mps=1 && sleep 1
fi
echo "MPS: $mps" >> "$RET/gpu.txt"
t0=$(date +%s)
CUDA_VISIBLE_DEVICES=$DEVS timeout "${BUDGET:-480}" /tmp/sr/mxlm study run --parallel "$P" --out "$D" \
  --machine "$(head -1 "$RET/gpu.txt") x1, $P runs at a time" --recipes "$RECIPES" --seeds "$SEEDS" \
  $ARGS --train "build/$S/train_*.bin" --val build/$S/val.bin \
  --val-tokens ${VAL_TOKENS:-1048576} --device ${DEVICE:-cuda} ${EXTEND:+--extend} ${CKPT:+--ckpt-every $CKPT --keep-ckpts 1} > "$RET/study-run.log" 2>&1
echo "study run: exit $? after $(( $(date +%s) - t0 )) s" | tee -a "$RET/study-run.log"
# the trainers end with the study (SIGTERM) after writing a checkpoint at their next step boundary: let them
for ((i = 0; i < 60; i++)); do pgrep -f " train .*--recipe " > /dev/null || break; sleep 1; done
[ $mps = 1 ] && { echo quit | nvidia-cuda-mps-control; sleep 1; }
# the finished runs (their metrics end with a final status), without checkpoints
fin=$(python3 - "$D" <<'EOF'
import json, os, sys
d = sys.argv[1]
def status(r):
    last = None
    m = os.path.join(d, r, "metrics.jsonl")
    for line in open(m, errors="replace") if os.path.isfile(m) else []:
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if "status" in o:
            last = o["status"]
    return last
# an extension (--extend, from step 0) cut off by the time limit: the run it was to replace goes back
for r in sorted(os.listdir(d)) if os.path.isdir(d) else []:
    if r.endswith(".short") and status(r[:-6]) not in ("converged", "budget", "diverged"):
        import shutil
        shutil.rmtree(os.path.join(d, r[:-6]), ignore_errors=True)
        os.rename(os.path.join(d, r), os.path.join(d, r[:-6]))
for r in sorted(os.listdir(d)) if os.path.isdir(d) else []:
    if status(r) in ("converged", "budget", "diverged"):
        print(os.path.join(os.path.basename(d), r))
EOF
)
n=$(echo "$fin" | grep -c . || true)
echo "finished runs: $n" | tee -a "$RET/study-run.log"
if [ "$n" -gt 0 ]; then
  (cd runs && tar czf "$RET/$S-runs.tgz" --exclude='ckpt-*' --exclude='*.ckpt' --exclude='*.part' --exclude='.lock' \
     $( [ -f $S/study.txt ] && echo $S/study.txt ) $fin)
  /tmp/sr/mxlm study report "$D" > "$RET/report.md" 2>&1 || true
  tail -40 "$RET/report.md"
fi
