#!/usr/bin/env python3
"""dist_check.py RUN_1GPU RUN_NGPU: the first training step of a data-parallel run against the one-GPU run
with the same samples (--accum N): the loss must be the same bits (the JSON text) and the gradient norm
within 1e-6 relative (the ranks' parts are summed in another order). Exit 0 when both hold. Standard library."""
import json
import sys


def first(run):
    with open(run + "/metrics.jsonl") as f:
        for line in f:
            d = json.loads(line, parse_float=str)
            if "loss" in d and "event" not in d and int(d["step"]) == 1:
                return d["loss"], float(d["grad_norm"])
    sys.exit(f"{run}: no step 1")


(la, ga), (lb, gb) = first(sys.argv[1]), first(sys.argv[2])
rel = abs(ga - gb) / max(abs(ga), 1e-30)
ok = la == lb and rel <= 1e-6
print(f"step 1: loss {la} vs {lb}, grad norm {ga} vs {gb} (rel {rel:.2e}): {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
