#!/usr/bin/env bash
# kill_stress.sh: SIGKILL `mxlm train` at random moments, resume each time,
# and check the end result against an uninterrupted run (docs/reliability.md).
# A longer, randomised companion of tests/test_reliability.c's deterministic
# chain; not part of `make test`.
#
#   tests/kill_stress.sh [KILLS=100] [MXLM=./mxlm] [SEED=1]
#
# A micro model on the embedded corpus (build/data, made by `make`), 40 steps,
# a checkpoint after every step, --keep 2. Each invocation slows one point of
# the checkpoint writer down (MXLM_TEST_CRASH=POINT@*:sleep=MS, POINT chosen at
# random among the open/mid/written/synced/renamed points) so that many kills
# land inside a checkpoint write, then is killed after a random 0-250 ms.
# After every kill: every ckpt-N.bin in the directory must be complete (magic,
# end marker, CRC-32; checked with python3's zlib), and the next --resume must
# start (exit 137 when killed again, 0 when it finished). At the end: the
# training and validation losses equal the uninterrupted run's, bit for bit.
set -u
KILLS=${1:-100}
MXLM=${2:-./mxlm}
RANDOM=${3:-1}
export OMP_WAIT_POLICY=passive
cd "$(dirname "$0")/.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
ARGS="--preset tiny --dim 32 --layers 1 --heads 1 --kv-heads 1 --ffn 64 --context 16 --batch 2 --val-tokens 256
      --recipe mxfp4-fdw-h16 --steps 40 --ckpt-every 1 --eval-every 10 --keep 2 --threads 2"
$MXLM train $ARGS --out "$W/ref" > "$W/ref.log" 2>&1 || { echo "reference run failed"; cat "$W/ref.log"; exit 1; }

valid_all() {  # every ckpt-N.bin complete and matching its CRC
    python3 - "$1" <<'EOF'
import os, re, sys, zlib
d = sys.argv[1]; bad = 0
for n in sorted(os.listdir(d)):
    if not re.fullmatch(r"ckpt-\d{8}\.bin", n): continue
    b = open(os.path.join(d, n), "rb").read()
    ok = len(b) > 28 and b[:8] == b"MXLMCKP1" and b[-8:] == b"MXLMEND1" and \
         zlib.crc32(b[:-12]) == int.from_bytes(b[-12:-8], "little")
    if not ok: print("invalid checkpoint:", n); bad += 1
sys.exit(1 if bad else 0)
EOF
}

points=(ckpt-open ckpt-mid ckpt-written ckpt-synced ckpt-renamed)
kills=0; runs=0; finished=0; in_write=0; restarts=0
while [ $kills -lt "$KILLS" ]; do
    resume=""; [ $runs -gt 0 ] && resume="--resume"
    p=${points[$((RANDOM % ${#points[@]}))]}
    MXLM_TEST_CRASH="$p@*:sleep=$((5 + RANDOM % 20))" $MXLM train $ARGS --out "$W/run" $resume > "$W/run.log" 2>&1 &
    pid=$!
    sleep "0.$(printf '%03d' $((RANDOM % 250)))"
    kill -9 $pid 2>/dev/null
    { wait $pid; } 2>/dev/null; rc=$?
    runs=$((runs + 1))
    grep -q "removed .* temporary file" "$W/run.log" && in_write=$((in_write + 1))
    grep -q "restarting from step 0" "$W/run.log" && restarts=$((restarts + 1))
    if [ $rc -eq 137 ]; then kills=$((kills + 1))
    elif [ $rc -ne 0 ]; then echo "run $runs: exit $rc"; cat "$W/run.log"; exit 1
    else finished=$((finished + 1)); rm -rf "$W/run"; runs=0; continue   # finished before the kill: start over
    fi
    valid_all "$W/run" || { echo "after kill $kills (slowed $p)"; exit 1; }
done
$MXLM train $ARGS --out "$W/run" --resume > "$W/end.log" 2>&1 || { echo "final resume failed"; cat "$W/end.log"; exit 1; }
ext() { grep -o '"loss":[^,]*\|"val_loss":[^,}]*' "$1/metrics.jsonl"; }
if cmp -s <(ext "$W/ref") <(ext "$W/run"); then
    echo "kill_stress: $kills kills ($finished runs finished before their kill and were started over); $in_write resumes" \
         "found the temporary of a checkpoint write the kill had cut, $restarts restarted a run killed before its first" \
         "checkpoint; every checkpoint valid after every kill; $(ext "$W/run" | wc -l) losses bit-identical"
else
    echo "kill_stress: losses differ"; diff <(ext "$W/ref") <(ext "$W/run") | head; exit 1
fi
