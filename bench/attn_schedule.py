#!/usr/bin/env python3
"""attn_schedule.py: a model (not a measurement) of how the causal flash-attention kernels' CTAs fill the
H200's SMs, in units of one CTA step (one 64-query tile against one key tile). Standard library only.

  python3 bench/attn_schedule.py

1. The dk/dv kernels (one CTA per 128-key tile n, 4 * (T/64 - 2n) steps at GQA group 4): the makespan of
   the launch order against the ideal (total steps / SMs), one CTA per SM; and with the tiles paired
   (n, last - n) in one CTA, which gives every CTA the same number of steps.
2. The one-pass backward's dQ chain (k_fa_bwd_ws, hd 128: each (head, query tile) piece summed from the
   highest key tile down): with every step the same length, how long CTAs wait for their turn.
Session 18 (bench/NOTES.md): the chain predicts no waits, so the one-pass kernel's measured slowness is
elsewhere; the launch order's imbalance is ~1.25-1.3x the ideal at both of issue 15's T >= 2048 shapes.
"""
import heapq


def makespan(works, sms=132):
    """CTAs dispatched in list order onto free SMs (one CTA per SM), each taking its work in steps."""
    free = [0.0] * sms
    heapq.heapify(free)
    end = 0.0
    for w in works:
        t = heapq.heappop(free) + w
        end = max(end, t)
        heapq.heappush(free, t)
    return end


def dkv(T, rows, G=4, sms=132):
    nkt, nqt = T // 128, T // 64
    steps = [G * (nqt - 2 * n) for n in range(nkt)]
    longest_first = [steps[x] for _ in range(rows) for x in range(nkt)]
    shortest_first = [steps[nkt - 1 - x] for _ in range(rows) for x in range(nkt)]
    paired = [steps[x] + steps[nkt - 1 - x] for _ in range(rows) for x in range(nkt // 2)]
    ideal = rows * sum(steps) / sms
    return ideal, makespan(longest_first, sms), makespan(shortest_first, sms), makespan(paired, sms)


def chain_waits(T=4096, G=4, rows=16, sms=132, split=0.5):
    """k_fa_bwd_ws's order: CTA n (launched highest n first) takes each piece's turn mid-step, after
    CTA n + 1 handed it on (at its next step's start: deferred); returns (makespan, total wait)."""
    nkt, nqt = T // 128, T // 64
    rel, free, end, waited = {}, [0.0] * sms, 0.0, 0.0
    heapq.heapify(free)
    for y in range(rows):
        for x in range(nkt):
            n, t, prev = nkt - 1 - x, heapq.heappop(free), None
            for h in range(G):
                for m in range(2 * n, nqt):
                    if prev:
                        rel[prev] = t
                    mid = t + split
                    if n < m >> 1:
                        r = rel[(y, h, m, n + 1)]
                        waited += max(0.0, r - mid)
                        mid = max(mid, r)
                    t, prev = mid + 1 - split, (y, h, m, n)
            rel[prev] = t
            end = max(end, t)
            heapq.heappush(free, t)
    return end, waited


if __name__ == "__main__":
    print("dk/dv kernels (steps of one CTA; one CTA per SM, 132 SMs)")
    print("%-28s %8s %14s %15s %8s" % ("shape", "ideal", "longest first", "shortest first", "paired"))
    for name, T, rows in (("(2, 32/8, 4096, 128)", 4096, 16), ("(4, 32/8, 2048, 64)", 2048, 32)):
        ideal, lf, sf, pr = dkv(T, rows)
        print("%-28s %8.0f %8.0f (%.2fx) %9.0f (%.2fx) %4.0f (%.2fx)" % (name, ideal, lf, lf / ideal, sf, sf / ideal, pr,
                                                                        pr / ideal))
    end, waited = chain_waits()
    print("one-pass backward's chain at (2, 32/8, 4096, 128): makespan %.0f steps, total wait %.0f steps" % (end, waited))
