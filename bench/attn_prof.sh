#!/bin/bash
# attn_prof.sh: Nsight Compute counters of the flash attention's kernels (issue 15) at the bench's
# shapes: one launch each, picked by name and launch index from `attn --bench` (which runs every
# configuration of its list per shape; -s counts the earlier launches of the same kernel). Logs to $OUT.
export PATH=/usr/local/cuda/bin:$PATH
A=${ATTN:-build/cuda/tests/gpu/attn}
OUT=${OUT:-/tmp/attn-prof}; mkdir -p "$OUT"
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy"
M="regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,regex:sm__pipe_.*cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.sum,smsp__inst_executed.sum"
prof() { # name kernel-regex launch-skip
  timeout 120 ncu --kernel-name-base mangled $S --metrics "$M" -k "regex:$2" --launch-skip "$3" --launch-count 1 "$A" --bench > "$OUT/ncu-$1.txt" 2>&1
  echo "$1 rc $?"
}
while read -r n k s; do [ -n "$n" ] && prof "$n" "$k" "$s"; done <<< "${PROFS:-fwd128 k_fa_fwd_wgILi128ELi2ELi128E13 0}"
for f in "$OUT"/ncu-*.txt; do
  echo "== $f"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Shared Memory|L2 Hit|Executed Ipc A|stalled_[a-z_]*_per_issue_active.ratio +[0-9.]*[1-9]|pipe_[a-z_]*cycles_active" "$f" | awk '$NF+0 >= 0.05 || $0 !~ /stalled|pipe_/' | head -60
done
