#!/bin/bash
# bench/device_round.sh: one device call of a speed round (issues 15/16): carried binaries, the GPU
# tests, the trainer's speed with its time split, optionally the PyTorch peer (bench/peer.sh), the
# attention and layer benchmarks, a short table last. Not a test. Run from the repository root on the GPU machine:
#   OUT=$OUT [DEADLINE=s] PARTS="quant qfastab gemmodes numerics tests sanitize vars bins telseeds outer kprof ab fuse recompute conc speed peer attn attnk layers" CONFIGS="125m:16:1024 ..." RECIPES="bf16 ..." \
#     bash bench/device_round.sh
# Binaries: .device-carry/bins.tar.xz (mxlm, run, layers, attn: made here with
#   make -j2 build/cuda/mxlm build/cuda/tests/gpu/{run,layers,attn}; strip --strip-debug;
#   tar cf - -C <dir> . | xz -9 > .device-carry/bins.tar.xz), else build/cuda/* as they are.
set -u
# Everything is written under W; only r.tgz (all of it) and summary.txt go to $OUT (the device tool
# brings back a few files per call).
RET=${OUT:-/tmp/round}; mkdir -p "$RET"
OUT=${WORK:-/tmp/round-work}; rm -rf "$OUT"; mkdir -p "$OUT"
PARTS=${PARTS:-tests speed}
CONFIGS=${CONFIGS:-125m:16:1024 350m:8:2048 1b:4:2048}
RECIPES=${RECIPES:-bf16 fp8 mxfp4-fdw-h16}
STEPS=${STEPS:-8}
# has PART: PART was asked for and, where DEADLINE (seconds from the start) is set, there is time left to start it
# (a part begun before it may run past it: leave a part's length under the call's limit)
has() { [[ " $PARTS " == *" $1 "* ]] && { [ -z "${DEADLINE:-}" ] || [ -z "${t0:-}" ] || (( $(date +%s) - t0 < DEADLINE )) || { skipped="$skipped $1"; false; }; }; }
skipped=
export PATH=/usr/local/cuda/bin:$PATH
V=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH=$V/nccl/lib:${LD_LIBRARY_PATH:-} NCCL_INC=$V/nccl/include NCCL_LIB=$V/nccl/lib NCCL_NVLS_ENABLE=0
export OMP_WAIT_POLICY=passive
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > "$OUT/gpu.txt"
if [ -f .device-carry/bins.tar.xz ]; then
  mkdir -p /tmp/bins build/cuda/tests/gpu && xz -dc .device-carry/bins.tar.xz | tar xf - -C /tmp/bins
  cp /tmp/bins/mxlm build/cuda/mxlm
  for b in run layers attn; do cp /tmp/bins/$b build/cuda/tests/gpu/$b; done
fi
# The tiny shards: carried in .device-carry/data/ (made here: make build/data/tiny_train.bin; cp
# build/data/tiny* .device-carry/data/) they save the ~4 minutes a fresh machine spends building
# the CPU tree to make them.
if [ ! -f build/data/tiny_train.bin ] && [ -f .device-carry/data/tiny_train.bin ]; then
  mkdir -p build/data && cp .device-carry/data/tiny* build/data/
fi
[ -f build/data/tiny_train.bin ] || make build/data/tiny_train.bin > /dev/null
# tiny_pair LABEL DIR RECIPE "A_ENV A_BIN" "B_ENV B_BIN": the 20-step tiny run (seed 1, eval every 10) of
# RECIPE twice, A and B (an environment assignment or -, and a binary), then whether their losses are
# identical (one line)
tiny_pair() {
  local label=$1 dir=$2 r=$3 a=$4 b=$5 side env bin
  for side in a b; do
    if [ $side = a ]; then read -r env bin <<< "$a"; else read -r env bin <<< "$b"; fi
    [ "$env" = - ] && env=MXLM_UNUSED=0
    env "$env" "$bin" train --device cuda --preset tiny --recipe "$r" --steps 20 --seed 1 --eval-every 10 --final-ckpt 0 \
      --out "$dir/$r-$side" --log-every 10 > "$dir/$r-$side.log" 2>&1 || echo "tiny $r $side: exit $?"
  done
  printf '%s %-18s tiny 20 steps: ' "$label" "$r"
  python3 tools/compare_runs.py "$dir/$r-a" "$dir/$r-b" --identical 2>&1 | tail -1
}
# splits DIR: each profiled run's quantize share and GEMM time (one line a run)
splits() {
  local f
  for f in "$1"/*.prof.log; do
    [ -f "$f" ] || continue
    printf '  %-28s %s\n' "$(basename "$f" .prof.log)" "$(grep -h "GPU time by part" "$f" | sed -E 's/.*\(MXLM_GPU_PROFILE, from step 2, ([0-9.]+ ms) in all\): quantize\/rotate\/transpose ([0-9.]+ ms \([0-9.]+%\)); GEMMs \(linears\) ([0-9.]+ ms).*/all \1, quantize \2, GEMMs \3/')"
  done
}
t0=$(date +%s)
if has quant; then # the quantizer benchmark (issue 16's bar: >= 60% of the copy measured in the same run)
  timeout 240 build/cuda/mxlm bench quant > "$OUT/quant-bench.txt" 2>&1
  echo "quant bench done ($(( $(date +%s) - t0 )) s)"
fi
if has qfastab; then # issue 16: the fast quantizer's candidate code paths (mxfp4.cu's QF_OPT_* bits) against the
  # trainer's, byte for byte and timed against a copy in the same run (bench/qfast_ab.cu, carried in bins.tar.xz)
  timeout 200 /tmp/bins/qfast_ab > "$OUT/qfast-ab.txt" 2>&1 || echo "qfast_ab: exit $?" >> "$OUT/qfast-ab.txt"
  echo "qfast ab done ($(( $(date +%s) - t0 )) s)"
fi
if has gemmodes; then # issue 16: which cuBLASLt FP8 scale-mode pairs (OUTER, VEC128, 128x128 blocks) run, and how fast,
  # at the trainer's linear shapes (bench/gemm_modes.cu, carried in bins.tar.xz)
  timeout 200 /tmp/bins/gemm_modes ${GM_ARGS:-} > "$OUT/gemm-modes.txt" 2>&1 || echo "gemm_modes: exit $?" >> "$OUT/gemm-modes.txt"
  echo "gemm modes done ($(( $(date +%s) - t0 )) s)"
fi
if has numerics; then # the numerics program alone (quantizers, GEMMs against the CPU / FP64)
  timeout 300 build/cuda/tests/gpu/run > "$OUT/numerics.txt" 2>&1
  echo "numerics: $(tail -1 "$OUT/numerics.txt") ($(( $(date +%s) - t0 )) s)"
fi
if has tests; then
  LOGS=$OUT/t bash tests/gpu/run_all.sh > "$OUT/tests.txt" 2>&1
  echo "tests: $(tail -1 "$OUT/tests.txt") ($(( $(date +%s) - t0 )) s)"
fi
if has sanitize; then # issue 15 item 5: compute-sanitizer over training steps with the flash attention (tiny with
  # --heads 2 / 1: head dim 64 / 128, the flash kernels; tiny's own head dim 32 takes the TF32 path), SAN_RUNS of sanitize.sh
  for hv in "2 1" "1 1"; do
    set -- $hv
    OUT_DIR=$OUT/san-h$1 MXLM=build/cuda/mxlm EXTRA="--heads $1 --kv-heads $2" \
      RUNS="${SAN_RUNS:-memcheck:bf16:fast racecheck:bf16:fast memcheck:mxfp4-fdw-h16:fast}" sh tests/gpu/sanitize.sh
  done > "$OUT/sanitize.txt" 2>&1
  echo "sanitize: $(grep -c 'exit 0' "$OUT/sanitize.txt") runs exit 0 of $(grep -c ' exit ' "$OUT/sanitize.txt") ($(( $(date +%s) - t0 )) s)"
fi
if has telseeds; then # the model-telemetry and decode cases of the layers program under other input seeds
  # (MXG_SEED): how often GPU and CPU part (2026-12-02: mxfp4-fdw-sr fast agreed to 3e-8 on one draw and
  # differed by 2% on the next); the summary lines of each
  for s in ${TS_SEEDS:-1 2 3 4 5 6}; do
    MXG_SEED=$s timeout 120 build/cuda/tests/gpu/layers "gpu model telemetry tiny" "gpu decode tiny" 2>&1 |
      grep -E "^\[|operands \(first|first dY|products:|FAIL|passed" | sed "s/^/seed $s: /"
  done > "$OUT/telseeds.txt"
  echo "telseeds: $(grep -c FAIL "$OUT/telseeds.txt") FAIL lines ($(( $(date +%s) - t0 )) s)"
fi
if has ab; then # the 20-step tiny losses of AB_RECIPES, the old binary (.device-carry/old.tar.xz) against the new
  mkdir -p /tmp/old "$OUT/ab" && xz -dc .device-carry/old.tar.xz | tar xf - -C /tmp/old
  for r in ${AB_RECIPES:-fp8 mxfp4-fdw-h16}; do
    tiny_pair "ab (a old, b new)" "$OUT/ab" "$r" "- /tmp/old/mxlm" "- build/cuda/mxlm"
  done > "$OUT/ab.txt"
  echo "ab done ($(( $(date +%s) - t0 )) s)"
fi
if has fuse; then # MXLM_GPU_FUSE_SWIGLU=1 (the SwiGLU backward writes dgate's and dup's MXFP4 operands; off by
  # default until this has passed): the 20-step tiny losses with and without it must be identical, then its speed
  mkdir -p "$OUT/fu"
  export MXLM_GPU_PROFILE=1 # its report counts the fused calls (timing only: the losses do not change)
  for r in ${FU_RECIPES:-mxfp4-fdw-h16 mxfp4-fdw-rh16 mxfp4-fdw-h32 mxfp4-fdw mxfp4-fdw-sr}; do
    tiny_pair "fuse (a off, b on)" "$OUT/fu" "$r" "MXLM_GPU_FUSE_SWIGLU=0 build/cuda/mxlm" "MXLM_GPU_FUSE_SWIGLU=1 build/cuda/mxlm"
    grep -h "SwiGLU backwards that made" "$OUT/fu/$r-b.log" | sed 's/.*(MXLM_GPU_FUSE_SWIGLU)/  fused calls/'
  done > "$OUT/fuse.txt"
  unset MXLM_GPU_PROFILE
  for v in 0 1; do
    MXLM_GPU_FUSE_SWIGLU=$v MXLM=build/cuda/mxlm sh bench/gpu_train.sh "$OUT/sp-fu$v" "$CONFIGS" "${FU_SPEED:-mxfp4-fdw-h16}" \
      "$STEPS" > "$OUT/speed-fu$v.txt" 2>&1
  done
  echo "fuse done ($(( $(date +%s) - t0 )) s)"
fi
if has outer; then # issue 16: MXLM_GPU_OUTER=$OU_B (1, the default: the FP8 GEMMs of fp8 and the MXFP4 fast path with
  # one scale per stored row; fprop: MXFP4's Fprop alone, folded OUTER in the quantizer's one pass) against the model's
  # default (MXLM_GPU_OUTER empty): the OUTER-fold probe's counts on real operands (MXLM_GPU_OOW_PROBE=1, 30 steps of
  # mxfp4-fdw-h16 at 1b and 350m; OU_PROBE=none skips it), the 20-step tiny losses side by side (not identical:
  # cuBLASLt accumulates in another order; an MXFP4 block 14+ binades under its row's largest rounds), then the speed
  # of both
  mkdir -p "$OUT/ou"
  OUV=("" "${OU_B:-1}")
  for cfg in ${OU_PROBE:-1b:4:2048 350m:8:2048}; do
    [ "$cfg" = none ] && break
    IFS=: read -r p b t <<< "$cfg"
    MXLM_GPU_OOW_PROBE=1 timeout 200 build/cuda/mxlm train --device cuda --preset "$p" --recipe mxfp4-fdw-h16 --batch "$b" \
      --seq "$t" --steps 30 --eval-every 0 --val-tokens $((b * t)) --final-ckpt 0 --log-every 10 --out "$OUT/ou/probe-$p" \
      > "$OUT/ou/probe-$p.log" 2>&1
    echo "probe $p: $(grep -h 'OUTER fold probe' "$OUT/ou/probe-$p.log")"
  done > "$OUT/outer.txt"
  for r in ${OU_RECIPES:-mxfp4-fdw-h16 mxfp4-fdw mxfp4-fdw-sr fp8}; do
    for v in 0 1; do
      MXLM_GPU_OUTER=${OUV[$v]} build/cuda/mxlm train --device cuda --preset tiny --recipe "$r" --steps 20 --seed 1 \
        --eval-every 10 --final-ckpt 0 --out "$OUT/ou/$r-$v" --log-every 10 > "$OUT/ou/$r-$v.log" 2>&1 || echo "tiny $r $v: exit $?"
    done
    printf 'outer (a default, b MXLM_GPU_OUTER=%s) %-16s tiny 20 steps: ' "${OUV[1]}" "$r"
    python3 tools/compare_runs.py "$OUT/ou/$r-0" "$OUT/ou/$r-1" --tol-train 0.01 --tol-val 0.01 2>&1 | tail -1
  done >> "$OUT/outer.txt"
  for v in 0 1; do
    MXLM_GPU_OUTER=${OUV[$v]} MXLM=build/cuda/mxlm sh bench/gpu_train.sh "$OUT/sp-ou$v" "$CONFIGS" \
      "${OU_SPEED:-mxfp4-fdw-h16 fp8}" "$STEPS" > "$OUT/speed-ou$v.txt" 2>&1
  done
  echo "outer done ($(( $(date +%s) - t0 )) s)"
fi
if has kprof; then # per-kernel GPU time (Nsight Compute, one metric, kernels serialized: each one's own time) of
  # KP_STEPS steps of each of KP_RECIPES at KP_CONFIGS, then bench/kprof.py's table (largest kernels, split by kind);
  # with KP_AB_ENV="VAR=value ..." each run again under it and kprof.py --against's B - A (a switch's A/B).
  # Our runs' tables keep the training steps' launches alone (kprof.py --train-only: the trainer's forward-only
  # evaluations left out); the peer's ncu run gets KP_PEER_TIMEOUT (torch.compile under ncu: 150 s
  # were too few, 2026-12-03)
  mkdir -p "$OUT/kp"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  KS=${KP_STEPS:-2}
  [ -n "$NCU" ] || { echo "kprof: no ncu on this machine" >> "$OUT/kprof.txt"; KP_CONFIGS=none; }
  for pc in ${KP_CONFIGS:-1b:4:2048}; do
    [ "$pc" = none ] && break
    IFS=: read -r p b t <<< "$pc"
    for r in ${KP_RECIPES:-bf16 fp8 mxfp4-fdw-h16}; do
      timeout "${KP_TIMEOUT:-150}" "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
        --launch-count "${KP_COUNT:-6000}" --log-file "$OUT/kp/$p-$r.csv" \
        build/cuda/mxlm train --device cuda --preset "$p" --recipe "$r" --batch "$b" --seq "$t" --steps "$KS" --warmup 1 \
        --eval-every 0 --val-tokens $((b * t)) --final-ckpt 0 --log-every 1 --out "$OUT/kp/$p-$r" > "$OUT/kp/$p-$r.log" 2>&1 ||
        echo "kprof $p $r: exit $?" >> "$OUT/kprof.txt"
      { echo "== $p $r ($KS steps, ms per step; the training steps' launches alone: --train-only)"
        python3 bench/kprof.py "$OUT/kp/$p-$r.csv" --train-only --top "${KP_TOP:-20}"; } >> "$OUT/kprof.txt" 2>&1
      if [ -n "${KP_AB_ENV:-}" ]; then # the same run under KP_AB_ENV (VAR=value ...), then B - A per kernel and kind
        env $KP_AB_ENV timeout "${KP_TIMEOUT:-150}" "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
          --page raw --launch-count "${KP_COUNT:-6000}" --log-file "$OUT/kp/$p-$r-ab.csv" \
          build/cuda/mxlm train --device cuda --preset "$p" --recipe "$r" --batch "$b" --seq "$t" --steps "$KS" --warmup 1 \
          --eval-every 0 --val-tokens $((b * t)) --final-ckpt 0 --log-every 1 --out "$OUT/kp/$p-$r-ab" > "$OUT/kp/$p-$r-ab.log" 2>&1 ||
          echo "kprof $p $r ($KP_AB_ENV): exit $?" >> "$OUT/kprof.txt"
        { echo "== $p $r: B = $KP_AB_ENV against A = the defaults"
          python3 bench/kprof.py "$OUT/kp/$p-$r.csv" --train-only --top "${KP_TOP:-20}" --against "$OUT/kp/$p-$r-ab.csv"; } \
          >> "$OUT/kprof.txt" 2>&1
      fi
    done
    if [ "${KP_PEER:-1}" = 1 ]; then # the PyTorch peer's kernels over KS steps after its warm-up (torch_peer.py --profile-steps)
      timeout "${KP_PEER_TIMEOUT:-360}" "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
        --profile-from-start off --log-file "$OUT/kp/$p-peer.csv" /opt/torch/.venv/bin/python3 bench/torch_peer.py --preset "$p" \
        --batch "$b" --seq "$t" --steps 2 --profile-steps "$KS" > "$OUT/kp/$p-peer.log" 2>&1 || echo "kprof $p peer: exit $?" >> "$OUT/kprof.txt"
      { echo "== $p PyTorch peer ($KS steps, ms per step)"; python3 bench/kprof.py "$OUT/kp/$p-peer.csv" --steps "$KS" --top "${KP_TOP:-20}"; } \
        >> "$OUT/kprof.txt" 2>&1
    fi
  done
  echo "kprof done ($(( $(date +%s) - t0 )) s)"
fi
if has recompute; then # issue 15's memory bar: bf16 with --recompute 1 (norms and SwiGLU products recomputed in the
  # backward: less memory, the same results) against without, back to back: what it costs in tokens/s
  for v in 0 1; do
    EXTRA="--recompute $v" MXLM=build/cuda/mxlm sh bench/gpu_train.sh "$OUT/sp-rc$v" "$CONFIGS" "${RC_RECIPES:-bf16}" "$STEPS" \
      > "$OUT/speed-rc$v.txt" 2>&1
  done
  echo "recompute done ($(( $(date +%s) - t0 )) s)"
fi
if has conc; then # issue 17's sweep: N 20m runs (32 x 512, CSTEPS steps, CREC) on the one GPU at a time,
  # N = 1, 2, 4, as plain processes (time-sliced) and under MPS where nvidia-cuda-mps-control exists (its
  # daemon is stopped again at the end); the total tokens/s of each (wall time, start-up included)
  mkdir -p "$OUT/conc"
  conc_run() { # LABEL N
    local i s=$(date +%s.%N)
    for ((i = 0; i < $2; i++)); do
      build/cuda/mxlm train --device cuda --preset 20m --recipe "${CREC:-mxfp4-fdw-h16}" --batch 32 --seq 512 \
        --steps "${CSTEPS:-200}" --eval-every 0 --val-tokens 16384 --final-ckpt 0 --log-every 50 \
        --out "$OUT/conc/$1-$2-$i" > "$OUT/conc/$1-$2-$i.log" 2>&1 &
    done
    wait
    python3 -c "import sys; w = $(date +%s.%N) - $s; n = $2 * ${CSTEPS:-200} * 16384
print('conc %-6s %d at a time: %6.1f s wall, %8.0f tok/s in all' % ('$1', $2, w, n / w))"
  }
  { conc_run plain 1; conc_run plain 2; conc_run plain 4
    if command -v nvidia-cuda-mps-control > /dev/null; then
      export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
      mkdir -p /tmp/mps-pipe /tmp/mps-log
      if nvidia-cuda-mps-control -d; then
        sleep 1; conc_run mps 1; conc_run mps 2; conc_run mps 4
        echo quit | nvidia-cuda-mps-control; sleep 1
      else echo "conc: the MPS daemon did not start"; fi
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    else echo "conc: no nvidia-cuda-mps-control"; fi
  } > "$OUT/conc.txt" 2>&1
  echo "conc done ($(( $(date +%s) - t0 )) s)"
fi
if has vars; then # A/B of experiment switches: VARS="NAME:ENV=V[;ENV=V] ..." each a speed table of VAR_RECIPES at
  # CONFIGS with its variables set (speed-var-NAME.txt; the default's is the speed part's)
  for nv in ${VARS:-}; do
    name=${nv%%:*}; envs=${nv#*:}
    env ${envs//;/ } MXLM=build/cuda/mxlm sh bench/gpu_train.sh "$OUT/sp-var-$name" "$CONFIGS" "${VAR_RECIPES:-mxfp4-fdw-h16}" \
      "$STEPS" > "$OUT/speed-var-$name.txt" 2>&1
    echo "var $name done ($(( $(date +%s) - t0 )) s)"
  done
fi
if has bins; then # A/B of binaries: BINS="NAME:FILE.xz ..." (a carried, xz'd trainer, e.g. make_carry.sh mxlm@REV or one
  # built with other compile-time switches), each a speed table of BIN_RECIPES at CONFIGS (speed-bin-NAME.txt)
  for nb in ${BINS:-}; do
    name=${nb%%:*}; xz -dc "${nb#*:}" > "/tmp/mxlm-$name" && chmod +x "/tmp/mxlm-$name"
    MXLM=/tmp/mxlm-$name sh bench/gpu_train.sh "$OUT/sp-bin-$name" "$CONFIGS" "${BIN_RECIPES:-mxfp4-fdw-h16}" "$STEPS" \
      > "$OUT/speed-bin-$name.txt" 2>&1
    echo "bin $name done ($(( $(date +%s) - t0 )) s)"
  done
fi
if has speed; then
  MXLM=build/cuda/mxlm sh bench/gpu_train.sh "$OUT/sp" "$CONFIGS" "$RECIPES" "$STEPS" > "$OUT/speed.txt" 2>&1
  echo "speed done ($(( $(date +%s) - t0 )) s)"
fi
if has peer; then
  PY=/opt/torch/.venv/bin/python PEER_ARGS=--json TAIL=2 sh bench/peer.sh "$CONFIGS" 20 > "$OUT/peer.txt"
  echo "peer done ($(( $(date +%s) - t0 )) s)"
fi
if has attn; then
  timeout 200 build/cuda/tests/gpu/attn --bench > "$OUT/attn-bench.txt" 2>&1
  PYTHONUNBUFFERED=1 timeout 200 /opt/torch/.venv/bin/python bench/attn_peer.py > "$OUT/attn-peer.txt" 2>&1
  echo "attention done ($(( $(date +%s) - t0 )) s)"
fi
if has attnk; then # the attention's kernels one by one (ncu's duration at the boost clock; `attn --kernels [ATTNK_CFG]`)
  timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum build/cuda/tests/gpu/attn --kernels \
    ${ATTNK_CFG:-} > "$OUT/attn-kernels.ncu" 2>&1
  python3 bench/ncu_times.py "$OUT/attn-kernels.ncu" > "$OUT/attn-kernels.txt" 2>&1
  echo "attention kernels done ($(( $(date +%s) - t0 )) s)"
fi
if has layers; then
  timeout 120 build/cuda/tests/gpu/layers --bench > "$OUT/layers-bench.txt" 2>&1
  echo "layers bench done ($(( $(date +%s) - t0 )) s)"
fi
# the summary names what ran: the parts skipped at DEADLINE are dropped from PARTS (and listed)
DEADLINE=
PARTS=" $PARTS "
for p in $skipped; do PARTS=${PARTS// $p / }; done
{
cat "$OUT/gpu.txt"
[ -n "$skipped" ] && echo "skipped at DEADLINE:$skipped"
has quant && cat "$OUT/quant-bench.txt"
has numerics && grep -E "passed|FAIL|2\^32" "$OUT/numerics.txt" | tail -12
has tests && grep -E "passed|FAIL" "$OUT/tests.txt" | tail -12
has sanitize && cat "$OUT/sanitize.txt"
has qfastab && cat "$OUT/qfast-ab.txt"
has gemmodes && cat "$OUT/gemm-modes.txt"
has ab && cat "$OUT/ab.txt"
has conc && cat "$OUT/conc.txt"
has fuse && cat "$OUT/fuse.txt" && grep -hE "^\|" "$OUT/speed-fu0.txt" "$OUT/speed-fu1.txt"
has telseeds && grep -E "FAIL|operands \(first|first dY" "$OUT/telseeds.txt" | tail -24
has outer && cat "$OUT/outer.txt" && echo "default, then MXLM_GPU_OUTER=${OU_B:-1}:" &&
  grep -hE "^\|" "$OUT/speed-ou0.txt" "$OUT/speed-ou1.txt" && grep -h "by GEMM" "$OUT"/sp-ou[01]/*.prof.log 2>/dev/null
has attn && sed -n '/^best per shape/,$p' "$OUT/attn-bench.txt" && grep -E "^\(.*default" "$OUT/attn-peer.txt"
has attnk && cat "$OUT/attn-kernels.txt"
has kprof && grep -E "^==|^by kind|kernels, .* launches|exit|^kprof" "$OUT/kprof.txt"
has recompute && echo "recompute 0, then 1:" && grep -hE "^\|" "$OUT/speed-rc0.txt" "$OUT/speed-rc1.txt"
has speed && grep -E "^\|" "$OUT/speed.txt" && splits "$OUT/sp"
has vars && for nv in ${VARS:-}; do echo "variant ${nv}:"; grep -hE "^\|" "$OUT/speed-var-${nv%%:*}.txt" | grep -v "^| preset\|^|---"; splits "$OUT/sp-var-${nv%%:*}"; done
has bins && for nb in ${BINS:-}; do echo "binary ${nb}:"; grep -hE "^\|" "$OUT/speed-bin-${nb%%:*}.txt" | grep -v "^| preset\|^|---"; splits "$OUT/sp-bin-${nb%%:*}"; done
has peer && cat "$OUT/peer.txt"
} > "$OUT/summary.txt"
(cd "$OUT" && tar czf "$RET/r.tgz" --exclude='*.bin' --exclude='*.ckpt' --exclude='.lock' .)
cp "$OUT/summary.txt" "$RET/summary.txt"
cat "$OUT/summary.txt"
exit 0
