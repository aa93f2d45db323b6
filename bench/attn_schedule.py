#!/usr/bin/env python3
"""attn_schedule.py: a model (not a measurement) of how the causal flash-attention kernels' CTAs fill the
H200's SMs, in units of one CTA step (one 64-query tile against one key tile). Standard library only.

  python3 bench/attn_schedule.py

1. The dk/dv kernels (one CTA per 128-key tile n, 4 * (T/64 - 2n) steps at GQA group 4): the makespan of
   the launch order against the ideal (total steps / SMs), one CTA per SM: row-major (today's grid: the
   tile in blockIdx.x, so one (batch, kv head) row's tiles go out longest to shortest before the next
   row's), the same with the tiles of a row shortest first, the tiles paired (n, last - n) in one CTA, and
   every row's longest tile first (the grid's dimensions swapped: the tile in blockIdx.y). The same holds
   for the forward and dq kernels (query tile m: m + 1 key tiles). A crude line for the hd-64 wgmma dk/dv
   kernel: 64-key CTAs, three per SM, each at a third of the SM (a CTA alone on an SM runs faster than that,
   so its tail is overstated).
2. The one-pass backward's dQ chain (k_fa_bwd_ws, hd 128: each (head, query tile) piece summed from the
   highest key tile down): with every step the same length, how long CTAs wait for their turn.
Result (2026-12-04; docs/gpu.md, "What we tried"): the chain predicts no waits, so the one-pass kernel's measured slowness is
elsewhere; the row-major launch leaves 1.28-1.30x the ideal makespan at issue 15's T >= 2048 shapes, the
swapped grid 1.02-1.03x (measured since: the swapped grid is the default).
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


def dkv(T, rows, G=4, sms=132, keys=128, per_sm=1):
    nkt, nqt, r = T // keys, T // 64, keys // 64
    steps = [G * (nqt - r * n) for n in range(nkt)]
    slots, speed = sms * per_sm, 1.0 / per_sm
    row_major = [steps[x] for _ in range(rows) for x in range(nkt)]
    shortest_first = [steps[nkt - 1 - x] for _ in range(rows) for x in range(nkt)]
    paired = [steps[x] + steps[nkt - 1 - x] for _ in range(rows) for x in range(nkt // 2)]
    swapped = [steps[x] for x in range(nkt) for _ in range(rows)]
    ideal = rows * sum(steps) / sms
    return ideal, [makespan(w, slots) / speed for w in (row_major, shortest_first, paired, swapped)]


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
    print("dk/dv kernels: makespan in CTA steps (132 SMs), and against the ideal")
    print("%-40s %6s %15s %15s %15s %15s" % ("kernel, shape", "ideal", "row-major", "shortest first", "paired",
                                             "swapped grid"))
    for name, T, rows, keys, per in (("warp-spec. 128 keys, (2, 32/8, 4096, 128)", 4096, 16, 128, 1),
                                     ("warp-spec. 128 keys, (4, 32/8, 2048, 64)", 2048, 32, 128, 1),
                                     ("wgmma 64 keys x3/SM, (4, 32/8, 2048, 64)", 2048, 32, 64, 3)):
        ideal, ms = dkv(T, rows, keys=keys, per_sm=per)
        print("%-40s %6.0f" % (name, ideal) + "".join(" %8.0f (%.2fx)" % (m, m / ideal) for m in ms))
    end, waited = chain_waits()
    print("one-pass backward's chain at (2, 32/8, 4096, 128): makespan %.0f steps, total wait %.0f steps" % (end, waited))
