#!/bin/sh
# peer.sh: the PyTorch peer (bench/torch_peer.py) at the shapes of
# bench/gpu_train.sh, one line each. Needs PyTorch with CUDA.
#   bench/peer.sh "125m:16:1024 350m:8:2048 1b:4:2048" [STEPS]
# PEER_ARGS: more options for torch_peer.py (e.g. --json, the lines bench/speed_record.py reads).
set -u
PY=${PY:-python3}
for pc in $1; do
  p=${pc%%:*}; rest=${pc#*:}; b=${rest%%:*}; t=${rest#*:}
  timeout 240 $PY "$(dirname "$0")/torch_peer.py" --preset $p --batch $b --seq $t --steps ${2:-20} ${PEER_ARGS:-} 2>&1 | tail -${TAIL:-3}
done
