#!/usr/bin/env python3
"""ncu_times.py: the kernel durations of an `ncu --metrics gpu__time_duration.sum` log of `attn --kernels`
(bench/device_round.sh's attnk part), one line a launch, grouped by the program's shapes (each group
starts at its k_fill launches: the configuration at the four bench shapes, then the one-pass backward).
Not a test. Usage: python3 bench/ncu_times.py LOG"""
import re
import sys

SHAPES = ["(8, 12/4, 1024, 64)", "(4, 16/8, 2048, 64)", "(4, 32/8, 2048, 64)", "(2, 32/8, 4096, 128)"]
UNIT = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def main(path):
    launches, name = [], None
    for line in open(path, errors="replace"):
        if ", Context " in line and ", Device " in line:
            m = re.match(r"\s*(?:void )?(.+?)\(.*\) \(([\d, ]+)\)x\(([\d, ]+)\), Context", line)
            name = (m.group(1), m.group(2).replace(" ", "")) if m else (line.strip()[:80], "?")
        elif "gpu__time_duration.sum" in line and name:
            f = line.split()
            launches.append((name[0], name[1], float(f[-1].replace(",", "")) * UNIT.get(f[-2], float("nan"))))
            name = None
    groups, cur = [], None
    for n, g, us in launches:
        if "k_fill" in n:
            if cur is None or cur[1]:
                cur = [[], []]
                groups.append(cur)
            continue
        if cur is not None:
            cur[1].append((n, g, us))
    print("attention kernels (ncu gpu__time_duration, --clock-control none), us:")
    for i, (_, ks) in enumerate(groups):
        label = SHAPES[i % 4] + (" one-pass backward" if i >= 4 else "")
        print(label)
        for n, g, us in ks:
            short = re.sub(r"^.*::", "", n.split("(")[0]).replace("__nv_bfloat16", "bf16")
            print("    %-58s grid %-12s %9.1f" % (short[:58], g, us))
    if not launches:
        print("no launches found in", path)


if __name__ == "__main__":
    main(sys.argv[1])
