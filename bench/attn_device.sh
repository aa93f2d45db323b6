#!/bin/bash
# attn_device.sh: one device call for the flash attention (issue 15): the test program, its benchmark
# and the PyTorch peer in the same run. Run from the repository root on the GPU machine; logs to $OUT.
#   ATTN=build/cuda/tests/gpu/attn (built here, or carried); SKIP_TEST=1 / SKIP_PEER=1 to leave parts out.
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/attn-out}; mkdir -p "$OUT"
ATTN=${ATTN:-build/cuda/tests/gpu/attn}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
if ! "$ATTN" --help >/dev/null 2>&1 && ! [ -x "$ATTN" ]; then
    make -j16 "$ATTN" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
rc=0
# SASS: per flash kernel, the tensor-core and shared-memory matrix instructions and any local memory
cuobjdump --dump-sass "$ATTN" 2>/dev/null | awk '/Function :/ {f=$3; n[f]=1} {if (f ~ /k_fa_/) {if ($0 ~ /HMMA/) h[f]++; if ($0 ~ /HGMMA/) g[f]++; if ($0 ~ /LDSM/) l[f]++; if ($0 ~ /LDL|STL/) s[f]++}} END {for (f in n) if (f ~ /k_fa_/) printf "%s HMMA %d HGMMA %d LDSM %d LDL/STL %d\n", f, h[f], g[f], l[f], s[f]}' | sed -E 's/_ZN[0-9]+_GLOBAL__N__[0-9a-f_]+attention_flash[a-z_]*_cu_[0-9a-f]+//' | sort > "$OUT/sass.txt"
cat "$OUT/sass.txt"
if [ -z "$SKIP_TEST" ]; then
    OMP_WAIT_POLICY=passive timeout 240 "$ATTN" > "$OUT/test.log" 2>&1 || rc=1
    grep -E "^\[|FAIL|passed" "$OUT/test.log" | tail -40
fi
if [ -n "$SANITIZE" ]; then
    timeout 60 compute-sanitizer --tool racecheck "$ATTN" "B3 T17" "B2 T256 H4/4 hd64]" > "$OUT/racecheck.log" 2>&1; echo "racecheck rc $?"; tail -3 "$OUT/racecheck.log"
    timeout 60 compute-sanitizer --tool memcheck "$ATTN" "B3 T17" "B1 T1 " > "$OUT/memcheck.log" 2>&1; echo "memcheck rc $?"; tail -3 "$OUT/memcheck.log"
fi
timeout 200 "$ATTN" --bench > "$OUT/bench.log" 2>&1 || rc=1
if [ -z "$SKIP_PEER" ]; then
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/attn_peer.py > "$OUT/peer.log" 2>&1 || rc=1
fi
cat "$OUT/bench.log"
[ -z "$SKIP_PEER" ] && grep -v -i -E "warn|return F\.|_warn_once" "$OUT/peer.log"
exit $rc
