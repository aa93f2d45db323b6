#!/usr/bin/env python3
"""bench/kprof.py: per-kernel GPU time from an Nsight Compute CSV (not a test).

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw --log-file F.csv PROGRAM ...
    python3 bench/kprof.py F.csv [--top 25] [--steps N] [--train-only]

Sums gpu__time_duration per kernel name over every launch ncu recorded (ncu runs the kernels one at a time:
the sum is each kernel's own time, without overlap or launch gaps), prints the largest, their share and
launches, and a coarse split by name (GEMM / quantize / attention / LM head / element-wise / optimizer /
other). --steps N divides the totals by N (the profiled steps) for ms per step. --train-only (our trainer's
runs): only the launches of training steps, the evaluations' forward passes left out: the launch sequence is cut
before each embedding forward (`k_embed_fwd`, the first kernel of every forward), the pieces holding an AdamW
launch kept, and --steps set to their number."""
import csv, re, sys, argparse
from collections import defaultdict

# first match wins: the loss and attention before the GEMMs (FlashAttention's kernel names hold "cutlass": until
# 2026-12-03 the peer's flash forward was counted as a GEMM)
CATS = [("LM head + loss", r"xent|lm_head|logit|log_softmax|nll|cross_entropy"),
        ("attention", r"attn|flash|attention|softmax|k_fa_|sdpa"),
        ("GEMM (cuBLASLt)", r"gemm|xmma|cutlass|sm90_|sm80_|nvjet|splitK|cublas"),
        # before the optimizer's: "hadamard" holds "adam" (2026-12-03: k_hadamard_rows was counted as AdamW)
        ("quantize/convert/transpose", r"quant|fold|fp8|e4m3|cast|transpose|to_bf16|broadcast|amax|qswiglu|qrow|qfast|qouter|rotate|"
                                       r"hadamard|ref_blocks|ref_lanes|tensor_scale|block_epilogue"),
        ("optimizer", r"adam|multi_tensor|foreach|l2norm|clip|sum_sq|sumsq|norm_sq|LpNorm|lpnorm"),
        ("element-wise", r"rmsnorm|rope|swiglu|silu|add|embed|residual|mul|copy|fill|memset|triton|elementwise|vectorized")]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--steps", type=float, default=1.0)
    ap.add_argument("--train-only", action="store_true")
    a = ap.parse_args()
    rows = [r for r in csv.reader(open(a.csv, errors="replace")) if r]
    hi = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "gpu__time_duration.sum" in r), None)
    if hi is None:
        sys.exit("kprof: no 'Kernel Name' / 'gpu__time_duration.sum' header in %s" % a.csv)
    h = rows[hi]
    kn, kt = h.index("Kernel Name"), h.index("gpu__time_duration.sum")
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}
    unit = 1e-6
    tot = defaultdict(float)
    cnt = defaultdict(int)
    seq = []  # (name, ms) in launch order
    for r in rows[hi + 1:]:
        if len(r) <= max(kn, kt):
            continue
        if r[kt] in scale:  # the units row
            unit = scale[r[kt]]
            continue
        try:
            t = float(r[kt].replace(",", "")) * unit
        except ValueError:
            continue
        name = r[kn].replace("(anonymous namespace)::", "")
        name = re.sub(r"^void ", "", name)
        name = re.sub(r"\(.*", "", name).strip()[:90]
        seq.append((name, t))
    if a.train_only:
        pieces, cur = [], []
        for name, t in seq:
            if "k_embed_fwd" in name and cur:
                pieces.append(cur)
                cur = []
            cur.append((name, t))
        pieces.append(cur)
        kept = [pc for pc in pieces if any(re.search(r"adam", n, re.I) for n, _ in pc)]
        if not kept:
            sys.exit("kprof: --train-only found no piece with an AdamW launch in %s" % a.csv)
        print("(--train-only: %d of %d forward-led pieces kept, those with an AdamW launch)" % (len(kept), len(pieces)))
        seq = [x for pc in kept for x in pc]
        a.steps = float(len(kept))
    for name, t in seq:
        tot[name] += t
        cnt[name] += 1
    allt = sum(tot.values())
    if not allt:
        sys.exit("kprof: no kernel times in %s" % a.csv)
    per = " per step" if a.steps != 1 else ""
    print("%d kernels, %d launches, %.2f ms%s (kernel time alone, ncu serialized)" % (len(tot), sum(cnt.values()), allt / a.steps, per))
    print("| kernel | launches | ms%s | share | us/launch |" % per)
    print("|---|---|---|---|---|")
    for name, t in sorted(tot.items(), key=lambda kv: -kv[1])[:a.top]:
        print("| %s | %d | %.3f | %.1f%% | %.1f |" % (name, cnt[name] / a.steps, t / a.steps, 100 * t / allt, 1e3 * t / cnt[name]))
    cat = defaultdict(float)
    for name, t in tot.items():
        c = next((c for c, rx in CATS if re.search(rx, name, re.I)), "other")
        cat[c] += t
    print("by kind: " + "; ".join("%s %.2f ms (%.1f%%)" % (c, t / a.steps, 100 * t / allt)
                                  for c, t in sorted(cat.items(), key=lambda kv: -kv[1])))

if __name__ == "__main__":
    main()
