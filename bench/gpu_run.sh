#!/usr/bin/env bash
# bench/gpu_run.sh: one device session: GPU tests, benchmarks, sanitizers.
# Usage (on the H200): bench/gpu_run.sh OUTDIR [tests] [bench] [sanitize] (default: all)
# Uses build/cuda/{mxlm,tests/gpu/run} if they run here, else rebuilds them.
set -u
out=${1:-/tmp/mxlm-gpu}; shift
what=${*:-all}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
has() { [[ " $what " == *" $1 "* || " $what " == *" all "* ]]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv; } > "$out/gpu.txt" 2>&1
if ! build/cuda/mxlm --version >/dev/null 2>&1 || ldd build/cuda/tests/gpu/run | grep -q "not found" \
   || ! [ -x build/cuda/tests/gpu/layers ]; then
    echo "binaries do not run here: rebuilding on the device"
    make -j16 build/cuda/mxlm gpu-test-bin > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
fi
if has tests; then
    echo "== make test-gpu (build/cuda/tests/gpu/run)"
    ( time build/cuda/tests/gpu/run ) > "$out/test.log" 2>&1; echo "exit $?" >> "$out/test.log"
    grep -E "GPU:|seed|passed|FAIL|fail |exact|fast|FP8|BF16|window|cases|real|exit" "$out/test.log" | head -70
    echo "== layer tests (build/cuda/tests/gpu/layers)"
    ( time build/cuda/tests/gpu/layers ) > "$out/layers.log" 2>&1; echo "exit $?" >> "$out/layers.log"
    grep -E "FAIL|passed|real|exit" "$out/layers.log"
fi
if has bench; then
    echo "== bench"
    b=build/cuda/mxlm
    { $b info; echo; $b bench hadamard; echo; $b bench quant; echo; $b bench gemm; echo; $b bench gemm --M 8192 --N 8192 --K 8192;
      echo; build/cuda/tests/gpu/layers --bench; } > "$out/bench.log" 2>&1
    cat "$out/bench.log"
fi
if has ncu; then
    echo "== ncu (hardware counters; clocks left alone)"
    secs="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section InstructionStats"
    ncu --clock-control none -k regex:k_qrow --launch-skip 2 --launch-count 1 $secs build/cuda/mxlm bench quant --iters 1 > "$out/ncu_row.txt" 2>&1
    ncu --clock-control none -k regex:k_quant --launch-skip 2 --launch-count 1 $secs build/cuda/mxlm bench hadamard --iters 1 > "$out/ncu_tile.txt" 2>&1
    grep -E "Duration|Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Executed Ipc A|Issue Slots Busy|Stall|No Eligible|Block Limit|Executed Instructions  |Dynamic Shared" "$out/ncu_row.txt" "$out/ncu_tile.txt" | head -60
fi
if has sanitize; then
    echo "== compute-sanitizer"
    flt=("quant[0] " "quant[3] " "quant[4] " "quant[6] " "quant[8] " "quant[13] " "quant-edge" "fp8")
    ( time compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 build/cuda/tests/gpu/run "${flt[@]}" "gemm 256x384x512" ) > "$out/memcheck.log" 2>&1; echo "exit $?" >> "$out/memcheck.log"
    tail -6 "$out/memcheck.log"
    ( time compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 build/cuda/tests/gpu/run "quant[0] " "quant[3] " "quant[4] " "quant[9] " "quant[11] " "quant-edge 7x64" ) > "$out/racecheck.log" 2>&1; echo "exit $?" >> "$out/racecheck.log"
    tail -6 "$out/racecheck.log"
fi
