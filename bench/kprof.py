#!/usr/bin/env python3
"""bench/kprof.py: per-kernel GPU time from an Nsight Compute CSV (not a test).

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw --log-file F.csv PROGRAM ...
    python3 bench/kprof.py F.csv [--top 25] [--steps N] [--train-only] [--against B.csv]

Sums gpu__time_duration per kernel name over every launch ncu recorded (ncu runs the kernels one at a time:
the sum is each kernel's own time, without overlap or launch gaps), prints the largest, their share and
launches, and a coarse split by name (GEMM / quantize / attention / LM head / element-wise / optimizer /
other). --steps N divides the totals by N (the profiled steps) for ms per step. --train-only (our trainer's
runs): only the launches of training steps, the evaluations' forward passes left out: the launch sequence is cut
before each embedding forward (`k_embed_fwd`, the first kernel of every forward), the pieces holding an AdamW
launch kept, and --steps set to their number. --against B.csv: a second run's CSV read the same way, and instead
the kernels whose time per step differs most between the two (B - A) and the difference by kind: an A/B of one
switch in two ncu runs."""
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

def load(path, train_only, steps):
    """(ms per kernel name, launches per name, the steps divided by, a note) of one ncu CSV."""
    rows = [r for r in csv.reader(open(path, errors="replace")) if r]
    hi = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "gpu__time_duration.sum" in r), None)
    if hi is None:
        sys.exit("kprof: no 'Kernel Name' / 'gpu__time_duration.sum' header in %s" % path)
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
    note = ""
    if train_only:
        pieces, cur = [], []
        for name, t in seq:
            if "k_embed_fwd" in name and cur:
                pieces.append(cur)
                cur = []
            cur.append((name, t))
        pieces.append(cur)
        kept = [pc for pc in pieces if any(re.search(r"adam", n, re.I) for n, _ in pc)]
        if not kept:
            sys.exit("kprof: --train-only found no piece with an AdamW launch in %s" % path)
        note = "(--train-only: %d of %d forward-led pieces kept, those with an AdamW launch)" % (len(kept), len(pieces))
        seq = [x for pc in kept for x in pc]
        steps = float(len(kept))
    for name, t in seq:
        tot[name] += t
        cnt[name] += 1
    if not sum(tot.values()):
        sys.exit("kprof: no kernel times in %s" % path)
    return tot, cnt, steps, note

def kinds(tot):
    cat = defaultdict(float)
    for name, t in tot.items():
        c = next((c for c, rx in CATS if re.search(rx, name, re.I)), "other")
        cat[c] += t
    return cat

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--steps", type=float, default=1.0)
    ap.add_argument("--train-only", action="store_true")
    ap.add_argument("--against", metavar="B.csv", help="a second run's CSV: per-kernel and per-kind B - A, largest first")
    a = ap.parse_args()
    tot, cnt, steps, note = load(a.csv, a.train_only, a.steps)
    if note:
        print(note)
    allt = sum(tot.values())
    per = " per step" if steps != 1 else ""
    if a.against:
        tb, cb, sb, nb = load(a.against, a.train_only, a.steps)
        if nb:
            print(nb)
        allb = sum(tb.values())
        print("A %s: %.2f ms%s; B %s: %.2f ms%s (kernel time alone, ncu serialized)" % (a.csv, allt / steps, per, a.against,
                                                                                        allb / sb, per))
        print("| kernel | A ms%s | B ms%s | B - A |" % (per, per))
        print("|---|---|---|---|")
        names = set(tot) | set(tb)
        d = {n: tb.get(n, 0.0) / sb - tot.get(n, 0.0) / steps for n in names}
        for n in sorted(names, key=lambda n: -abs(d[n]))[:a.top]:
            print("| %s | %.3f | %.3f | %+.3f |" % (n, tot.get(n, 0.0) / steps, tb.get(n, 0.0) / sb, d[n]))
        ka, kb = kinds(tot), kinds(tb)
        print("by kind, B - A: " + "; ".join("%s %+.2f ms" % (c, kb.get(c, 0.0) / sb - ka.get(c, 0.0) / steps)
                                             for c in sorted(set(ka) | set(kb))))
        return
    print("%d kernels, %d launches, %.2f ms%s (kernel time alone, ncu serialized)" % (len(tot), sum(cnt.values()), allt / steps, per))
    print("| kernel | launches | ms%s | share | us/launch |" % per)
    print("|---|---|---|---|---|")
    for name, t in sorted(tot.items(), key=lambda kv: -kv[1])[:a.top]:
        print("| %s | %d | %.3f | %.1f%% | %.1f |" % (name, cnt[name] / steps, t / steps, 100 * t / allt, 1e3 * t / cnt[name]))
    cat = kinds(tot)
    print("by kind: " + "; ".join("%s %.2f ms (%.1f%%)" % (c, t / steps, 100 * t / allt)
                                  for c, t in sorted(cat.items(), key=lambda kv: -kv[1])))

if __name__ == "__main__":
    main()
