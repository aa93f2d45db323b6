#!/usr/bin/env python3
"""speed_record.py: the committed speed record (bench/results/speed-YYYY-MM-DD.json) from one
device call's benchmark output. Standard library only.

  speed_record.py --train DIR [--train DIR ...] [--peer FILE] [--attention FILE]
                  [--attn-bench FILE --attn-peer FILE [--attn-config HD=CFG,...]]
                  --commit HASH --gpu NAME [--date YYYY-MM-DD] --out FILE

--train: run directories of bench/gpu_train.sh (one sub-directory per preset/recipe/gemm with
config.txt, metrics.jsonl and the .log beside it holding the MXLM_GPU_PROFILE split); several
directories of the same configuration (repetitions) are pooled: tok_s is the median over all
their steps 3.. (steps 1-2 build cuBLASLt plans). --peer: the JSON lines of bench/torch_peer.py
--json (matched to rows by preset, batch and seq; gives peer_tok_s and peer_mem_gib). --attention:
JSON lines {"shape", "fwd_tflops", "bwd_tflops", "peer_fwd_tflops", "peer_bwd_tflops"}; or, instead,
--attn-bench (the output of `build/cuda/tests/gpu/attn --bench`: one line per shape and tile
configuration) with --attn-peer (bench/attn_peer.py's table: its "default" rows, SDPA's own
dispatch): the rows of the trainer's default configuration per head dimension (--attn-config,
default 64=1x2/3x4/3x2,128=3x2/3x3/3x2: default_cfg in src/cuda/nn/attention_flash.cu).

Record format (the BF16 speed issue): {"date", "commit", "gpu", "rows": [{"preset", "batch",
"seq", "recipe", "gemm", "gpus", "tok_s", "peer_tok_s", "step_ms", "mfu", "gpu_mem_gib",
"peer_mem_gib", "split": {"attention", "quant", "gemm", "head", "elementwise", "optimizer"}}],
"attention": [...]}. split values are fractions of the profiled step. mfu: model FLOPs per token
6 * (non-embedding parameters + V*D) + 12 * L * T * D over the H200's dense BF16 peak 989.4
TFLOP/s, the convention of bench/torch_peer.py and bench/train_table.py. gpu_mem_gib: the
trainer's measured peak ("GPU memory: ... peak" in the log) where printed, else its estimate.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_table import PEAK, cfg  # noqa: E402  (one reader of config.txt, one peak for both tables)
# profiler part (src/cuda model profiler names) -> split key
PARTS = {"quantize/rotate/transpose": "quant", "GEMMs (linears)": "gemm", "attention": "attention",
         "LM head + loss": "head", "norms, RoPE, SwiGLU, residual, embedding": "elementwise",
         "grad norm + AdamW": "optimizer"}


def steps(run):
    out = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                if "loss" in d and "tok_per_s" in d and "step" in d:
                    out.append(d)
    return out


def log_lines(run):
    """The run's log, then (gpu_train.sh since 2026-12-03) its profiled twin's, which has the split."""
    for log in (run + ".log", run + ".prof.log"):
        if os.path.exists(log):
            yield from open(log)


def log_info(run):
    split, mem_peak, mem_est = {}, None, None
    for line in log_lines(run):
        if line.startswith("GPU time by part"):
            for name, share in re.findall(r"[:;] ([^;:]+?) [0-9.]+ ms \(([0-9.]+)%\)", line):
                if name.strip() in PARTS:
                    split[PARTS[name.strip()]] = round(float(share) / 100, 4)
        m = re.search(r"GPU memory: ([0-9.]+) MiB peak", line)
        if m and mem_peak is None:  # the timing run's (its log comes first)
            mem_peak = float(m.group(1)) / 1024
        m = re.match(r"GPU memory: ([0-9.]+) MiB estimated", line)
        if m and mem_est is None:
            mem_est = float(m.group(1)) / 1024
    return split, mem_peak if mem_peak is not None else mem_est


ROW = re.compile(r"^(\(\d+, \d+/\d+, \d+, (\d+)\))\s+(\S+)\s+(?:([A-Za-z]\S*)\s+)?([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)")


def attention_rows(bench, peer, configs):
    """The attention rows: ours at each shape's default configuration against SDPA's default dispatch."""
    want = dict(kv.split("=") for kv in configs.split(","))
    theirs, who = {}, "torch"
    for line in open(peer):
        if line.startswith("torch "):  # attn_peer.py's header: torch version, GPU, cuDNN
            who = line.strip()
        m = ROW.match(line)
        if m and m.group(3) == "default":
            theirs[m.group(1)] = (float(m.group(6)), float(m.group(8)))
    rows = []
    for line in open(bench):
        m = ROW.match(line)
        if not m or m.group(4) is not None or want.get(m.group(2)) != m.group(3) or m.group(1) not in theirs:
            continue
        pf, pb = theirs[m.group(1)]
        rows.append({"shape": m.group(1), "fwd_tflops": float(m.group(6)), "bwd_tflops": float(m.group(8)),
                     "peer_fwd_tflops": pf, "peer_bwd_tflops": pb, "config": m.group(3),
                     "peer": who + ": scaled_dot_product_attention default dispatch, bf16, is_causal, enable_gqa",
                     "convention": "causal FLOPs halved; backward = 2.5x forward FLOPs"})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", action="append", default=[])
    ap.add_argument("--peer")
    ap.add_argument("--attention")
    ap.add_argument("--attn-bench")
    ap.add_argument("--attn-peer")
    ap.add_argument("--attn-config", default="64=1x2/3x4/3x2,128=3x2/3x3/3x2")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    peers = {}
    if a.peer and os.path.exists(a.peer):
        for line in open(a.peer):
            line = line.strip()
            if line.startswith("{"):
                d = json.loads(line)
                peers[(d["preset"], int(d["batch"]), int(d["seq"]))] = d
    pooled = {}
    for top in a.train:
        for name in sorted(os.listdir(top)):
            run = os.path.join(top, name)
            if not os.path.isdir(run) or not os.path.exists(os.path.join(run, "metrics.jsonl")) or name.endswith(".prof"):
                continue
            st = steps(run)
            if len(st) < 3:
                continue
            p = pooled.setdefault(name, {"run": run, "tps": [], "split": [], "mem": []})
            p["tps"].extend(d["tok_per_s"] for d in st[2:])
            split, mem = log_info(run)
            if split:
                p["split"].append(split)
            if mem is not None:
                p["mem"].append(mem)
    rows = []
    for name, p in sorted(pooled.items()):
        c = cfg(p["run"])
        B, T, acc = int(c["batch"]), int(c["seq"]), int(c.get("accum", 1))
        V, D, L, F = int(c["vocab"]), int(c["dim"]), int(c["layers"]), int(c["ffn"])
        H, KV = int(c["heads"]), int(c["kv-heads"])
        hd = D // H
        gpus = int(c.get("gpus", 1))
        nonemb = L * (2 * D + D * H * hd * 2 + 2 * D * KV * hd + 3 * D * F) + D
        tok = B * T * acc * gpus
        tps = statistics.median(p["tps"])
        flops = (6 * (nonemb + V * D) + 12 * L * T * D) * tps
        split = {}
        for k in PARTS.values():
            vals = [s[k] for s in p["split"] if k in s]
            if vals:
                split[k] = round(statistics.median(vals), 4)
        peer = peers.get((c.get("preset", "?"), B, T)) if c["recipe"] == "bf16" else None
        rows.append({"preset": c.get("preset", "?"), "batch": B, "seq": T, "recipe": c["recipe"],
                     "gemm": c.get("gemm", "fast"), "gpus": gpus, "tok_s": round(tps, 1),
                     "peer_tok_s": round(peer["tok_per_s"], 1) if peer else None,
                     "step_ms": round(tok / tps * 1e3, 3), "mfu": round(flops / PEAK / gpus, 4),
                     "gpu_mem_gib": round(statistics.median(p["mem"]), 2) if p["mem"] else None,
                     "peer_mem_gib": round(peer["peak_gib"], 2) if peer and "peak_gib" in peer else None,
                     "split": split})
    att = []
    if a.attention and os.path.exists(a.attention):
        for line in open(a.attention):
            line = line.strip()
            if line.startswith("{"):
                att.append(json.loads(line))
    if a.attn_bench and a.attn_peer:
        att.extend(attention_rows(a.attn_bench, a.attn_peer, a.attn_config))
    rec = {"date": a.date, "commit": a.commit, "gpu": a.gpu, "rows": rows, "attention": att}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    print("%-6s %-14s %-5s %-9s %10s %10s %6s %6s" % ("preset", "recipe", "gemm", "B x T", "tok/s", "peer", "ratio",
                                                    "MFU"))
    for r in rows:
        print("%-6s %-14s %-5s %-9s %10.0f %10s %6s %5.1f%%" % (
            r["preset"], r["recipe"], r["gemm"], "%dx%d" % (r["batch"], r["seq"]), r["tok_s"],
            "%.0f" % r["peer_tok_s"] if r["peer_tok_s"] else "-",
            "%.3f" % (r["tok_s"] / r["peer_tok_s"]) if r["peer_tok_s"] else "-", 100 * r["mfu"]))
    for r in att:
        print("attention %-22s %-12s fwd %6.1f / %6.1f = %.3fx  bwd %6.1f / %6.1f = %.3fx" % (
            r["shape"], r.get("config", ""), r["fwd_tflops"], r["peer_fwd_tflops"], r["fwd_tflops"] / r["peer_fwd_tflops"],
            r["bwd_tflops"], r["peer_bwd_tflops"], r["bwd_tflops"] / r["peer_bwd_tflops"]))


if __name__ == "__main__":
    main()
