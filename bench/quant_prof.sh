#!/bin/bash
# quant_prof.sh: where the fast MXFP4 quantizer's time goes (issue 16): Nsight Compute over single launches
# of `mxlm bench quant`'s kernels (picked by the kernel's mangled name and its launch index: with --iters 1
# every configuration of the bench launches its fast kernel 4 times, 3 warm-ups and 1 timed), the counters
# as text and the per-instruction source page (SASS, executed instructions and stall samples per
# instruction) as CSV, and the SASS of the profiled kernels. Not a test. Run on the GPU machine from the
# repository root:
#   OUT=$OUT [MXLM=build/cuda/mxlm] [PROFS="name kernel-regex launch-skip ..."] bash bench/quant_prof.sh
# Default PROFS: the BF16 two-direction kernel with E4M3 outputs (the trainer's operands; bench row 4)
# and with codes + scales (the bench's goal row, row 9).
export PATH=/usr/local/cuda/bin:$PATH
MX=${MXLM:-build/cuda/mxlm}
OUT=${OUT:-/tmp/quant-prof}; mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats
   --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters"
M="regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,regex:sm__pipe_.*cycles_active.avg.pct_of_peak_sustained_active,regex:sm__inst_executed_pipe_.*.sum,smsp__inst_executed.sum"
PROFS=${PROFS:-"e4m3 k_qfastItLi128ELi128E 3
codes k_qfastItLi128ELi128E 11"}
while read -r n k s; do
  [ -n "$n" ] || continue
  # shellcheck disable=SC2086
  timeout 150 "$NCU" --kernel-name-base mangled $S --metrics "$M" --import-source no -k "regex:$k" --launch-skip "$s" \
    --launch-count 1 -f -o "/tmp/qp-$n" "$MX" bench quant --iters 1 > "$OUT/run-$n.txt" 2>&1
  echo "$n: ncu rc $?"
  "$NCU" -i "/tmp/qp-$n.ncu-rep" --page details > "$OUT/ncu-$n.txt" 2>&1
  "$NCU" -i "/tmp/qp-$n.ncu-rep" --page source --csv --print-source sass > "$OUT/src-$n.csv" 2>&1
done <<< "$PROFS"
# the SASS of the fast kernels (all instantiations), for instruction counts per element
cuobjdump -sass "$MX" 2> /dev/null | awk '/Function : /{p = ($0 ~ /k_qfast|k_qswiglu/)} p' > "$OUT/qfast.sass"
echo "sass: $(grep -c 'Function :' "$OUT/qfast.sass") functions, $(wc -l < "$OUT/qfast.sass") lines"
for f in "$OUT"/ncu-*.txt; do
  echo "== $f"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A|Executed Instructions  |stalled_[a-z_]*_per_issue_active.ratio +[0-9.]*[1-9]|pipe_[a-z_]*cycles_active|inst_executed_pipe_[a-z_]*.sum +[0-9,]*[1-9]" "$f" |
    awk '$NF+0 >= 0.05 || $0 !~ /stalled|pipe_/' | head -70
done
