#!/usr/bin/env python3
"""Compare the loss curves of two mxlm run directories (metrics.jsonl).

  compare_runs.py RUN_A RUN_B [RUN_A2 RUN_B2 ...] [--identical] [--tol-train X] [--tol-val X] [--tol-first X]

Prints the mean and the largest difference of the training losses (per
step), the largest difference of the validation losses and the final ones.
With --identical every loss must be the same bits (the JSON text: mxlm writes
%.9g, which round-trips a float). Otherwise two runs of a low-precision
recipe drift apart step by step (a rounding flip changes the next batch's
numbers), so the check is on the mean |train loss difference| (<= tol-train)
and on the final validation loss (|difference| <= tol-val); the largest
per-step differences are reported, not checked. With several pairs (the same
recipe over several seeds), each pair gets its line and the check is on the
means over the pairs of the two statistics (one chaotic seed's divergence at a
loss spike does not decide it; a difference every seed shares does); with
--identical every pair must be identical. --tol-first X: also, in every pair, the
largest |train loss difference| over the first 5 steps, before rounding flips
have compounded, at most X (a real difference between the two, a bug rather
than drift, shows there already; the drift statistics need tolerances wide
enough for a chaotic seed). Exit status 0 when the check holds, 1 otherwise.
Standard library only.
"""
import argparse
import json
import os
import sys


def load(run):
    train, val = {}, {}
    with open(run + "/metrics.jsonl") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line, parse_float=str)  # keep the text: bit-level comparison
            if "event" in d or "status" in d:
                continue
            if "loss" in d:
                train[int(d["step"])] = d["loss"]
            elif "val_loss" in d:
                val[int(d["step"])] = d["val_loss"]
    return train, val


def compare(a, b, o):
    """One pair: prints its line; returns (ok, mean |train diff|, final |val diff|), or None when the
    runs cannot be compared."""
    ta, va = load(a)
    tb, vb = load(b)
    if sorted(ta) != sorted(tb) or sorted(va) != sorted(vb) or not ta or not va:
        print("FAIL: the runs have different steps (%d/%d training, %d/%d eval lines)" % (len(ta), len(tb), len(va), len(vb)))
        return None
    if o.identical:
        diff = [s for s in ta if ta[s] != tb[s]] + [s for s in va if va[s] != vb[s]]
        print("%s: %d training losses, %d validation losses, %s" % (
            "PASS" if not diff else "FAIL", len(ta), len(va),
            "all identical" if not diff else "first difference at step %d" % min(diff)))
        return (not diff, 0.0, 0.0, 0.0)
    dt = max(abs(float(ta[s]) - float(tb[s])) for s in ta)
    mt = sum(abs(float(ta[s]) - float(tb[s])) for s in ta) / len(ta)
    st = max(ta, key=lambda s: abs(float(ta[s]) - float(tb[s])))
    dv = max(abs(float(va[s]) - float(vb[s])) for s in va)
    last = max(va)
    dfin = abs(float(va[last]) - float(vb[last]))
    # the first steps, before the two runs' rounding flips have compounded: a real difference between the
    # two (a bug, not drift) shows there already
    first = sorted(ta)[:5]
    d5 = max(abs(float(ta[s]) - float(tb[s])) for s in first)
    ok = mt <= o.tol_train and dfin <= o.tol_val and (o.tol_first is None or d5 <= o.tol_first)
    print("%s: mean |train loss diff| %.4g (tol %g; max %.4g at step %d; first %d steps max %.2g%s), final val %s vs "
          "%s (step %d, |diff| %.4g, tol %g; max over evals %.4g)" % (
              "PASS" if ok else "FAIL", mt, o.tol_train, dt, st, len(first), d5,
              "" if o.tol_first is None else ", tol %g" % o.tol_first, va[last], vb[last], last, dfin, o.tol_val, dv))
    return (ok, mt, dfin, d5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", metavar="RUN", help="RUN_A RUN_B, or several such pairs")
    ap.add_argument("--identical", action="store_true")
    ap.add_argument("--tol-train", type=float, default=0.02)
    ap.add_argument("--tol-val", type=float, default=0.05)
    ap.add_argument("--tol-first", type=float, default=None)
    o = ap.parse_args()
    if len(o.runs) % 2:
        ap.error("runs come in pairs (RUN_A RUN_B ...): %d given" % len(o.runs))
    pairs = [(o.runs[i], o.runs[i + 1]) for i in range(0, len(o.runs), 2)]
    if len(pairs) == 1:
        r = compare(pairs[0][0], pairs[0][1], o)
        return 0 if r and r[0] else 1
    res = []
    for a, b in pairs:
        print("  %s vs %s: " % (os.path.basename(a.rstrip("/")), os.path.basename(b.rstrip("/"))), end="")
        res.append(compare(a, b, o))
    if any(r is None for r in res):
        print("FAIL: a pair could not be compared")
        return 1
    if o.identical:
        ok = all(r[0] for r in res)
        print("%s: %d pairs, %s" % ("PASS" if ok else "FAIL", len(res), "all identical" if ok else "not all identical"))
        return 0 if ok else 1
    mt = sum(r[1] for r in res) / len(res)
    mv = sum(r[2] for r in res) / len(res)
    f5 = max(r[3] for r in res)
    ok = mt <= o.tol_train and mv <= o.tol_val and (o.tol_first is None or f5 <= o.tol_first)
    print("%s: mean over %d pairs: mean |train loss diff| %.4g (tol %g; per pair %s), final |val diff| %.4g (tol %g; "
          "per pair %s)%s" % ("PASS" if ok else "FAIL", len(res), mt, o.tol_train, " ".join("%.4g" % r[1] for r in res),
                              mv, o.tol_val, " ".join("%.4g" % r[2] for r in res),
                              "" if o.tol_first is None else ", first 5 steps max %.2g (tol %g)" % (f5, o.tol_first)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
