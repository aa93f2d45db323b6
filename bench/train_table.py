#!/usr/bin/env python3
"""Table of GPU training throughput from the run directories of bench/gpu_train.sh.

Per run: median step time over steps 3.. (steps 1-2 build cuBLASLt plans),
tokens/s, and model FLOP utilisation against the H200's dense BF16 peak
(989.4 TFLOP/s) with FLOPs per token = 6 * (non-embedding parameters + LM head
V*D) + 12 * L * T * D (attention counted dense, the formula of bench/torch_peer.py,
so the two MFU columns compare). The time split comes
from the MXLM_GPU_PROFILE line of the log. Standard library only.
"""
import json
import os
import re
import statistics
import sys

PEAK = 989.4e12


def cfg(run):
    c = {}
    with open(os.path.join(run, "config.txt")) as f:
        for line in f:
            if "=" in line:
                k, v = line.split("=", 1)
                c[k.strip()] = v.strip()
    return c


def main(out):
    rows = []
    for name in sorted(os.listdir(out)):
        run = os.path.join(out, name)
        if not os.path.isdir(run) or not os.path.exists(os.path.join(run, "metrics.jsonl")) or name.endswith(".prof"):
            continue
        c = cfg(run)
        steps = []
        with open(os.path.join(run, "metrics.jsonl")) as f:
            for line in f:
                d = json.loads(line)
                if "loss" in d and "tok_per_s" in d and "step" in d:
                    steps.append(d)
        if len(steps) < 3:
            continue
        B, T, acc = int(c["batch"]), int(c["seq"]), int(c["accum"])
        V, D, L, F = int(c["vocab"]), int(c["dim"]), int(c["layers"]), int(c["ffn"])
        H, KV = int(c["heads"]), int(c["kv-heads"])
        hd = D // H
        nonemb = L * (2 * D + D * H * hd * 2 + 2 * D * KV * hd + 3 * D * F) + D
        tok = B * T * acc
        tps = statistics.median(d["tok_per_s"] for d in steps[2:])
        ms = tok / tps * 1e3
        flops = (6 * (nonemb + V * D) + 12 * L * T * D) * tok
        mfu = flops / (ms / 1e3) / PEAK
        split = ""
        log = run + ".log"
        for lg in (log, run + ".prof.log"):  # the split: the profiled twin's (gpu_train.sh), else the run's own
            for line in open(lg) if os.path.exists(lg) else []:
                if line.startswith("GPU time by part"):
                    split = line.strip()
        mem = ""
        for line in open(log) if os.path.exists(log) else []:
            m = re.match(r"GPU memory: ([0-9.]+) MiB estimated", line)
            if m:
                mem = "%.1f GiB" % (float(m.group(1)) / 1024)
        rows.append((c.get("preset", "?"), c["recipe"], c.get("gemm", "?"), B, T, ms, tps, mfu, mem, split))
    print("| preset | recipe | MXFP4 GEMM | B x T | step ms | tokens/s | MFU | GPU memory (est.) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %d x %d | %.1f | %.0f | %.1f%% | %s |" % (r[0], r[1], r[2], r[3], r[4], r[5], r[6],
                                                                      100 * r[7], r[8]))
    print()
    for r in rows:
        if r[9]:
            print("%s %s %s: %s" % (r[0], r[1], r[2], r[9]))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/bench-train")
