#!/usr/bin/env bash
# Runs the test runner twice (plain build, then ASan+UBSan build) and prints one
# combined "N passed, N failed" line last. Exit status: 0 only if all passed.
set -u
cd "$(dirname "$0")/.."
# OpenMP threads sleep instead of spinning at barriers: on a busy 2-core machine
# spinning made small tests 100x slower (results do not depend on it).
export OMP_WAIT_POLICY=passive
total_p=0; total_f=0; status=0
run() {  # $1 label, $2 runner, $3 mxlm binary
    echo "== $1"
    local log; log=$(mktemp)
    MXLM_BIN="$3" "$2" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n1)
    rm -f "$log"
    if [ -z "$line" ]; then echo "$1: runner crashed (exit $rc)"; total_f=$((total_f + 1)); status=1; return; fi
    local p f; p=${line%% passed*}; f=${line#*, }; f=${f%% failed}
    total_p=$((total_p + p)); total_f=$((total_f + f))
    [ "$rc" -eq 0 ] || status=1
}
run "plain build" build/cpu/tests/run build/cpu/mxlm
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    run "ASan+UBSan build" build/asan/tests/run build/asan/mxlm
echo "$total_p passed, $total_f failed"
exit $status
