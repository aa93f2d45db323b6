#!/bin/bash
# run_all.sh: every GPU test of `make test-gpu`, in its order, on built binaries:
#   MXLM=build/cuda/mxlm GPU_RUN=build/cuda/tests/gpu/run GPU_LAYERS=build/cuda/tests/gpu/layers \
#   GPU_ATTN=build/cuda/tests/gpu/attn bash tests/gpu/run_all.sh
# (the defaults are those paths; `make test-gpu` builds them first). The numerics program (quantizers,
# GEMMs), the layer/model program, the flash attention program, then the trainer scripts curves.sh, telemetry.sh and dist.sh (NCCL:
# libnccl.so.2 on the loader path, NCCL_INC/NCCL_LIB for its ABI check). A summary line per part,
# then "N passed, N failed" counting the parts; exit 1 if any part fails. curves.sh runs in the background
# beside the three programs (SERIAL=1: after them, one part at a time).
set -u
MXLM=${MXLM:-build/cuda/mxlm}
GPU_RUN=${GPU_RUN:-build/cuda/tests/gpu/run}
GPU_LAYERS=${GPU_LAYERS:-build/cuda/tests/gpu/layers}
GPU_ATTN=${GPU_ATTN:-build/cuda/tests/gpu/attn}
LOGS=${LOGS:-build/test-gpu}
mkdir -p "$LOGS"
pass=0; fail=0; summary=""
count() { # $1 name, $2 exit status: the part's own last "N passed, N failed" line goes into the summary
  local name=$1 rc=$2
  local last; last=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$LOGS/$name.log" | tail -1)
  if [ $rc -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); grep -E "FAIL" "$LOGS/$name.log" | head -20; fi
  summary="$summary$(printf '%-10s %s (exit %d)' "$name" "${last:-no summary}" $rc)\n"
}
part() { # $1 name, then the command
  local name=$1; shift
  "$@" > "$LOGS/$name.log" 2>&1
  count "$name" $?
}
# curves.sh (mostly CPU training runs) goes in the background from the start, beside the GPU programs
# (SERIAL=1: one part after the other, as before); its line keeps its place in the summary
if [ "${SERIAL:-0}" = 1 ]; then
  part numerics "$GPU_RUN" ${T:-}
  part layers env OMP_WAIT_POLICY=passive "$GPU_LAYERS" ${T:-}
  part attention env OMP_WAIT_POLICY=passive "$GPU_ATTN" ${T:-}
  part curves env MXLM="$MXLM" sh tests/gpu/curves.sh
else
  env MXLM="$MXLM" sh tests/gpu/curves.sh > "$LOGS/curves.log" 2>&1 &
  curves_pid=$!
  part numerics "$GPU_RUN" ${T:-}
  part layers env OMP_WAIT_POLICY=passive "$GPU_LAYERS" ${T:-}
  part attention env OMP_WAIT_POLICY=passive "$GPU_ATTN" ${T:-}
  wait $curves_pid
  count curves $?
fi
part telemetry env MXLM="$MXLM" sh tests/gpu/telemetry.sh
part dist env MXLM="$MXLM" bash tests/gpu/dist.sh
printf "$summary"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
