#!/bin/bash
# bench/make_carry.sh: make, on the development machine, the git-ignored files that device calls carry
# (.device-carry/, named in the device tool's `carry`), from a fresh checkout. Not a test. Run from the
# repository root:
#   bash bench/make_carry.sh [bins] [study20m] [study60m] [study125m] [mxlm@REV]      (default: the first three)
# bins      build/cuda/{mxlm, tests/gpu/run, layers, attn} (make; nvcc for sm_90a), bench/gemm_modes.cu and
#           bench/qfast_ab.cu (with the C library's objects of build/cpu), stripped:
#           .device-carry/bins.tar.xz (bench/device_round.sh), .device-carry/mxlm.xz (bench/study_round.sh),
#           .device-carry/data/ (the tiny shards: saves a fresh device machine building the CPU tree)
# mxlm@REV  .device-carry/mxlm-REV.xz: the trainer of commit REV, built in a git worktree (/tmp/mxlm-wt-REV): a
#           study's runs go on with the binary already checked on the GPU while a newer build waits for its tests
#           (study_round.sh takes .device-carry/mxlm.xz: copy it over for the call)
# study20m  .device-carry/study20m-train.bin.xz (train-00 + train-01 of ../shared/corpus, r50k_base, one
#           shard of 28.8M tokens) and .device-carry/study20m-val.bin (all of val.jsonl.zst, 1.27M tokens)
# study60m  .device-carry/study60m-train.bin.xz (train-00..02, 44.3M tokens, cut to its first 35M so that a
#           call fits 64 MiB) and the same validation file
# study125m .device-carry/study125m-train-K.bin.xz, K = 0..3: train-0K of ../shared/corpus, one shard each (59.6M
#           tokens in all, ~15.5 MB each xz'd: two device calls carry them, two shards each, to a warm machine:
#           bench/study_round.sh SIZE=125m DATA_ONLY=1), and the same validation file
# Each file is checked against the sha256 the study's runs were made with (bench/study_round.sh's header),
# so a changed tokenizer or corpus stops here rather than pairing new runs with old ones.
# Needs: the Debian packages of the README (libzstd-dev, zlib1g-dev), xz-utils, nvcc for bins, node/npm for
# the rank files (tools/fetch_tokenizers.sh). Time on a 2-core machine: bins ~5 min, study60m's xz ~2 min.
set -euo pipefail
cd "$(dirname "$0")/.."
C=.device-carry
PARTS=${*:-bins study20m study60m}
has() { [[ " $PARTS " == *" $1 "* ]]; }
mkdir -p "$C"
prep_r50k() { # PATTERN CORPUS-FILE...: one r50k_base token set of the corpus files, no validation split
  local pat=$1; shift
  build/cpu/mxlm prep --replace --encoding r50k_base --train-pattern "$pat" --val-fraction 0 "${@/#/../shared/corpus/}" \
    > /tmp/make_carry_prep.log 2>&1 || { cat /tmp/make_carry_prep.log; exit 1; }
}
check() { # FILE SHA256-PREFIX
  local s; s=$(sha256sum "$1" | cut -c1-8)
  [ "$s" = "$2" ] || { echo "make_carry: $1 has sha256 $s..., the study's runs were made with $2..." >&2; exit 1; }
}
if has bins; then
  make -j"$(nproc)" build/cuda/mxlm build/cuda/tests/gpu/run build/cuda/tests/gpu/layers build/cuda/tests/gpu/attn \
    build/data/tiny_train.bin > /tmp/make_carry_build.log 2>&1 || { tail -20 /tmp/make_carry_build.log; exit 1; }
  rm -rf /tmp/make_carry_bins && mkdir -p /tmp/make_carry_bins
  cp build/cuda/mxlm build/cuda/tests/gpu/{run,layers,attn} /tmp/make_carry_bins/
  # the cuBLASLt scale-mode probe (device_round.sh PARTS=gemmodes)
  "${NVCC:-nvcc}" -O2 -gencode=arch=compute_90a,code=sm_90a bench/gemm_modes.cu -lcublasLt -o /tmp/make_carry_bins/gemm_modes
  # the fast quantizer's candidate code paths against the trainer's (device_round.sh PARTS=qfastab)
  make -j"$(nproc)" build/cpu/mxlm > /dev/null
  "${NVCC:-nvcc}" -std=c++17 -O3 --fmad=false -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -DMXLM_CUDA \
    bench/qfast_ab.cu build/cpu/src/mx/*.o build/cpu/src/util/*.o -lzstd -lz -lgomp -o /tmp/make_carry_bins/qfast_ab
  strip --strip-debug /tmp/make_carry_bins/*
  # -9: its 64-MiB window sees the four binaries' shared (already compressed) device code once: 11 MB, where -6
  # gave 43 (over a device call's 64 MiB with the tree)
  tar cf - -C /tmp/make_carry_bins . | xz -T0 -9 > "$C/bins.tar.xz"
  xz -T0 -9 -c /tmp/make_carry_bins/mxlm > "$C/mxlm.xz"
  mkdir -p "$C/data" && cp build/data/tiny* "$C/data/"
  echo "bins: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include || echo ' + uncommitted changes')"
fi
for part in $PARTS; do
  case $part in mxlm@*) ;; *) continue ;; esac
  rev=${part#mxlm@}; wt=/tmp/mxlm-wt-$rev
  [ -d "$wt" ] || git worktree add --detach "$wt" "$rev" > /dev/null
  make -C "$wt" -j"$(nproc)" build/cuda/mxlm > /tmp/make_carry_$rev.log 2>&1 || { tail -20 /tmp/make_carry_$rev.log; exit 1; }
  strip --strip-debug -o /tmp/make_carry_mxlm_$rev "$wt/build/cuda/mxlm"
  xz -T0 -9 -c /tmp/make_carry_mxlm_$rev > "$C/mxlm-$rev.xz"
  echo "mxlm@$rev: $C/mxlm-$rev.xz"
done
if has study20m || has study60m || has study125m; then
  [ -f data/tokenizers/r50k_base.tiktoken ] || bash tools/fetch_tokenizers.sh > /dev/null
  [ -x build/cpu/mxlm ] || make -j"$(nproc)" build/cpu/mxlm > /dev/null
  mkdir -p build/study20m
  prep_r50k build/study20m/val.bin val.jsonl.zst
  check build/study20m/val.bin 938afb3d
  cp build/study20m/val.bin "$C/study20m-val.bin"
fi
if has study20m; then
  prep_r50k 'build/study20m/train_%06d.bin' train-00.jsonl.zst train-01.jsonl.zst
  check build/study20m/train_000000.bin bad5a90a
  xz -T0 -9 -c build/study20m/train_000000.bin > "$C/study20m-train.bin.xz"
fi
if has study60m; then
  mkdir -p build/study60m
  prep_r50k 'build/study60m/train_%06d.bin' train-00.jsonl.zst train-01.jsonl.zst train-02.jsonl.zst
  check build/study60m/train_000000.bin b7304b32
  # the first 35,000,000 tokens: the header's count (int32 at byte 8) set, the file cut after them
  python3 - build/study60m/train_000000.bin <<'EOF'
import struct, sys
p, n = sys.argv[1], 35000000
with open(p, "r+b") as f:
    magic, ver, have = struct.unpack("<iii", f.read(12))
    assert magic == 20240520 and ver == 1 and have >= n, (magic, ver, have)
    f.seek(8); f.write(struct.pack("<i", n)); f.truncate(256 * 4 + 2 * n)
EOF
  check build/study60m/train_000000.bin d940fe11
  xz -T0 -9 -c build/study60m/train_000000.bin > "$C/study60m-train.bin.xz"
fi
if has study125m; then
  mkdir -p build/study125m
  sums=(148eb5e4 6e7c6500 255b58c3 bd80aa92) # the sha256 prefixes the 125m runs are made with
  for k in 0 1 2 3; do
    prep_r50k build/study125m/train_00000$k.bin train-0$k.jsonl.zst
    check build/study125m/train_00000$k.bin "${sums[$k]}"
    xz -T0 -9 -c build/study125m/train_00000$k.bin > "$C/study125m-train-$k.bin.xz"
  done
fi
ls -la "$C"
# what each kind of call carries, with the tracked tree, against the device tool's 64 MiB
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
fits() { # LABEL FILE...
  local n=$tracked f
  for f in "${@:2}"; do [ -e "$C/$f" ] && n=$((n + $(du -cb "$C/$f" | tail -1 | cut -f1))); done
  printf '%-34s %6.1f MiB of 64%s\n' "$1" "$(awk -v n=$n 'BEGIN { print n / 1048576 }')" "$( [ $n -le 67108864 ] || echo ': TOO LARGE')"
}
fits "tests (device_round.sh)" bins.tar.xz data
fits "study 20m (study_round.sh)" mxlm.xz study20m-train.bin.xz study20m-val.bin
fits "study 60m (study_round.sh)" mxlm.xz study60m-train.bin.xz study20m-val.bin
fits "study 125m, data call (DATA_ONLY=1)" mxlm.xz study125m-train-0.bin.xz study125m-train-1.bin.xz
fits "study 125m, run call" mxlm.xz study125m-train-2.bin.xz study125m-train-3.bin.xz study20m-val.bin
