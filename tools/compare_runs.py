#!/usr/bin/env python3
"""Compare the loss curves of two mxlm run directories (metrics.jsonl).

  compare_runs.py RUN_A RUN_B [--identical] [--tol-train X] [--tol-val X]

Prints the mean and the largest difference of the training losses (per
step), the largest difference of the validation losses and the final ones.
With --identical every loss must be the same bits (the JSON text: mxlm writes
%.9g, which round-trips a float). Otherwise two runs of a low-precision
recipe drift apart step by step (a rounding flip changes the next batch's
numbers), so the check is on the mean |train loss difference| (<= tol-train)
and on the final validation loss (|difference| <= tol-val); the largest
per-step differences are reported, not checked. Exit status 0 when the check
holds, 1 otherwise.
Standard library only.
"""
import argparse
import json
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--identical", action="store_true")
    ap.add_argument("--tol-train", type=float, default=0.02)
    ap.add_argument("--tol-val", type=float, default=0.05)
    o = ap.parse_args()
    ta, va = load(o.a)
    tb, vb = load(o.b)
    if sorted(ta) != sorted(tb) or sorted(va) != sorted(vb) or not ta or not va:
        print("FAIL: the runs have different steps (%d/%d training, %d/%d eval lines)" % (len(ta), len(tb), len(va), len(vb)))
        return 1
    if o.identical:
        diff = [s for s in ta if ta[s] != tb[s]] + [s for s in va if va[s] != vb[s]]
        print("%s: %d training losses, %d validation losses, %s" % (
            "PASS" if not diff else "FAIL", len(ta), len(va),
            "all identical" if not diff else "first difference at step %d" % min(diff)))
        return 0 if not diff else 1
    dt = max(abs(float(ta[s]) - float(tb[s])) for s in ta)
    mt = sum(abs(float(ta[s]) - float(tb[s])) for s in ta) / len(ta)
    st = max(ta, key=lambda s: abs(float(ta[s]) - float(tb[s])))
    dv = max(abs(float(va[s]) - float(vb[s])) for s in va)
    last = max(va)
    dfin = abs(float(va[last]) - float(vb[last]))
    ok = mt <= o.tol_train and dfin <= o.tol_val
    # the first steps, before the two runs' rounding flips have compounded: a real difference between the
    # two (a bug, not drift) shows there already
    first = sorted(ta)[:5]
    d5 = max(abs(float(ta[s]) - float(tb[s])) for s in first)
    print("%s: mean |train loss diff| %.4g (tol %g; max %.4g at step %d; first %d steps max %.2g), final val %s vs "
          "%s (step %d, |diff| %.4g, tol %g; max over evals %.4g)" % ("PASS" if ok else "FAIL", mt, o.tol_train, dt,
                                                                      st, len(first), d5, va[last], vb[last], last,
                                                                      dfin, o.tol_val, dv))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
