#!/bin/bash
# bench/study_commit.sh: the runs a device call of bench/study_round.sh brought back ($OUT/S-runs.tgz) into the
# committed study directory, then the report rendered again. Not a test. Run from the repository root:
#   bash bench/study_commit.sh PATH/study20m-runs.tgz        (or study60m-runs.tgz, study125m-runs.tgz)
# Each finished run of the archive that docs/results/<study>/ does not hold yet is copied as the committed runs are
# (config.txt, summary.json, tokenizer.txt; metrics.jsonl and train.log as gzip -9 -n, so the bytes do not depend on
# the time), the archive's study.txt replaces the committed one, and `mxlm study report` (build/cpu/mxlm, made if
# missing) writes results.md, paired.json and the figures there again. A run already committed is left as it is
# (a second copy of the same run would have other bytes only in its log); one without a summary.json is skipped.
# Prints what it added; git add / commit are left to you.
set -euo pipefail
cd "$(dirname "$0")/.."
TGZ=${1:?usage: bash bench/study_commit.sh PATH/study20m-runs.tgz}
[ -f "$TGZ" ] || { echo "study_commit: $TGZ: no such file" >&2; exit 2; }
case $(basename "$TGZ") in
  study20m-runs.tgz) S=study20m R=docs/results/study-20m-16m-h200 ;;
  study60m-runs.tgz) S=study60m R=docs/results/study-60m-33m-h200 ;;
  study125m-runs.tgz) S=study125m R=docs/results/study-125m-100m ;;
  *) echo "study_commit: $TGZ: expected study20m-, study60m- or study125m-runs.tgz" >&2; exit 2 ;;
esac
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
tar xzf "$TGZ" -C "$W"
[ -d "$W/$S" ] || { echo "study_commit: $TGZ holds no $S/" >&2; exit 2; }
added=0
for d in "$W/$S"/*/; do
  n=$(basename "$d")
  [ -f "$d/summary.json" ] || { echo "skipped $n (no summary.json: not finished)"; continue; }
  [ -e "$R/$n" ] && continue
  mkdir -p "$R/$n"
  cp "$d/config.txt" "$d/summary.json" "$d/tokenizer.txt" "$R/$n/"
  gzip -9 -n -c "$d/metrics.jsonl" > "$R/$n/metrics.jsonl.gz"
  [ ! -f "$d/train.log" ] || gzip -9 -n -c "$d/train.log" > "$R/$n/train.log.gz"
  echo "added $R/$n"
  added=$((added + 1))
done
[ ! -f "$W/$S/study.txt" ] || cp "$W/$S/study.txt" "$R/study.txt"
[ -x build/cpu/mxlm ] || make -j"$(nproc)" build/cpu/mxlm > /dev/null
build/cpu/mxlm study report "$R" > "$W/report.log" 2>&1 || { cat "$W/report.log"; exit 1; }
echo "study_commit: $added run(s) added; $(ls -d "$R"/*/ | wc -l) runs in $R; report rendered again ($R/results.md)"
