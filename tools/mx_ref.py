#!/usr/bin/env python3
"""An independent reference of mxlm's numerics, in pure Python (no numpy),
written from docs/numerics.md and the OCP MX v1.0 text, not from the C code:
exact rational arithmetic (fractions.Fraction) for every rounding decision,
brute-force nearest-value search for E2M1/E4M3/E5M2, float32 emulated with
struct round trips (double rounding of a single float32 +,-,* through double
is innocuous, 53 >= 2*24+2).

  python3 tools/mx_ref.py --mxlm ./mxlm [--cases N] [--seed S]

generates random matrices (with outliers, zero and NaN blocks), runs
`mxlm quant` on each configuration (MXFP4: every layout, scale rule and rounding;
FP8 e4m3/e5m2; NVFP4: 1x16, 16x1, 16x16 with rne and sr; MXFP8: 1x32, 32x1 with
floor and ceil) and compares the output bit for bit.
Exit status 0 when all match; the last line is "N passed, N failed".
"""
import argparse
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
from fractions import Fraction

def f32(x):
    """Round a Python float to float32 (RNE); overflow gives +-Inf."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)

def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]

# ---- Philox4x32-10 (Salmon et al. 2011) -----------------------------------------
M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF

def philox(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK, p1 & MASK, ((p0 >> 32) ^ c3 ^ k1) & MASK, p0 & MASK
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return c0, c1, c2, c3

assert philox((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0)) == \
    (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)

def rand_u32(seed, domain, stream, index):
    out = philox((index >> 2 & MASK, index >> 34 & MASK, stream, domain), (seed & MASK, seed >> 32 & MASK))
    return out[index & 3]

# ---- formats ----------------------------------------------------------------------
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]

def e2m1_rne(v):
    """Nearest grid value of v (a Fraction), ties to the even code, saturating."""
    a = abs(v)
    best = min(range(8), key=lambda i: (abs(a - Fraction(E2M1[i])), i & 1))
    q = E2M1[best]
    return -q if v < 0 else q

def e2m1_sr(v, r):
    a = abs(v)
    if a >= 6:
        q = 6.0
    else:
        lo = max(g for g in E2M1 if g <= a)
        hi = min(g for g in E2M1 if g > a)
        frac = (a - Fraction(lo)) / Fraction(hi - lo)
        u = Fraction(r >> 8, 1 << 24)
        q = hi if u < frac else lo
    return -q if v < 0 else q

def fp8_values(ebits, mbits, bias, e4m3):
    vals = {}
    for c in range(128):
        e, m = c >> mbits, c & ((1 << mbits) - 1)
        if e4m3 and c == 0x7F:
            continue
        if not e4m3 and e == (1 << ebits) - 1:
            continue
        v = (m / (1 << mbits)) * 2.0 ** (1 - bias) if e == 0 else (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
        vals[c] = v
    return vals

FP8 = {"e4m3": fp8_values(4, 3, 7, True), "e5m2": fp8_values(5, 2, 15, False)}
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}

def fp8_round(x, kind):
    if math.isnan(x):
        return x
    vals = FP8[kind]
    a = min(abs(x), FP8_MAX[kind])  # saturate (SATFINITE), Inf included
    fa = Fraction(a)
    best = min(vals, key=lambda c: (abs(fa - Fraction(vals[c])), c & 1))
    return math.copysign(vals[best], x)

# ---- shared scale -------------------------------------------------------------------
def floor_log2(a):
    m, e = math.frexp(a)  # a = m 2^e, m in [0.5, 1)
    return e - 1

def scale_exp(amax, rule):
    if amax == 0:
        return -127
    fl = floor_log2(amax)
    if rule == "floor":
        e = fl - 2
    elif rule == "even":
        m = Fraction(amax) / Fraction(2) ** fl  # [1, 2)
        e = fl + (1 if m >= Fraction(7, 4) else 0) - 2
    else:  # ceil: the smallest e with amax / 2^e <= 6
        e = fl - 3
        while Fraction(amax) / Fraction(2) ** e > 6:
            e += 1
    return max(-127, min(127, e))

def quant_block(vals, rule, rnd, rbits):
    if any(math.isnan(v) or math.isinf(v) for v in vals):
        return [math.nan] * len(vals)
    amax = max(abs(v) for v in vals)
    e = scale_exp(amax, rule)
    s = Fraction(2) ** e
    out = []
    for i, v in enumerate(vals):
        fv = Fraction(v) / s
        q = e2m1_rne(fv) if rnd == "rne" else e2m1_sr(fv, rbits[i])
        # FP4 keeps the sign of a value that rounds to zero (code 0x8 is -0)
        out.append(math.copysign(float(Fraction(abs(q)) * s), v))
    return out

# ---- NVFP4 (docs/numerics.md "NVFP4"): every step one float32 operation (double rounding of a
# single float32 / or * through double is innocuous too) ----------------------------------------
FLT_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]

def nvfp4_tensor_scale(X):
    finite = [abs(v) for row in X for v in row if math.isfinite(v)]
    amax = max(finite) if finite else 0.0
    if amax == 0:
        return 1.0
    S = f32(2688.0 / amax)
    return FLT_MAX if math.isinf(S) else S

def nvfp4_block(vals, S, rnd, rbits):
    if any(math.isnan(v) or math.isinf(v) for v in vals):
        return [math.nan] * len(vals)
    amax = max(abs(v) for v in vals)
    sb = fp8_round(f32(f32(amax / 6.0) * S), "e4m3")
    if sb == 0:
        return [0.0] * len(vals)
    r = f32(S / sb)
    out = []
    for i, v in enumerate(vals):
        w = f32(v * r)
        q = e2m1_rne(Fraction(w)) if rnd == "rne" else e2m1_sr(Fraction(w), rbits[i])
        out.append(math.copysign(f32(f32(abs(q) * sb) / S), w))
    return out

# ---- MXFP8 (OCP MX v1.0): E4M3 elements, E8M0 scale per 32 ---------------------------------------
def mxfp8_scale_exp(amax, rule):
    if amax == 0:
        return -127
    if rule == "floor":
        e = floor_log2(amax) - 8
    else:  # ceil: the smallest e with amax / 2^e <= 448
        e = floor_log2(amax) - 10
        while Fraction(amax) / Fraction(2) ** e > 448:
            e += 1
    return max(-127, min(127, e))

def mxfp8_block(vals, rule):
    if any(math.isnan(v) or math.isinf(v) for v in vals):
        return [math.nan] * len(vals)
    e = mxfp8_scale_exp(max(abs(v) for v in vals), rule)
    return [f32(fp8_round(v * 2.0 ** -e, "e4m3") * 2.0 ** e) for v in vals]

# ---- Hadamard (float32 butterflies, stages h = 1, 2, 4, ...; then one multiply) -----
def fwht32(x):
    n = len(x)
    x = list(x)
    h = 1
    while h < n:
        for i in range(0, n, 2 * h):
            for j in range(i, i + h):
                a, b = x[j], x[j + h]
                x[j], x[j + h] = f32(a + b), f32(a - b)
        h *= 2
    norm = f32(1.0 / math.sqrt(n))
    return [f32(v * norm) for v in x]

def rotate(X, R, C, axis, n, rnd, seed, rot_id):
    X = [row[:] for row in X]
    length = C if axis == 1 else R
    sign = [(-1.0 if rand_u32(seed, 1, rot_id, j) >> 31 else 1.0) if rnd else 1.0 for j in range(length)]
    for o in range(R if axis == 1 else C):
        for j0 in range(0, length, n):
            if axis == 1:
                seg = [f32(X[o][j0 + k] * sign[j0 + k]) for k in range(n)]
                X[o][j0:j0 + n] = fwht32(seg)
            else:
                seg = fwht32([f32(X[j0 + k][o] * sign[j0 + k]) for k in range(n)])
                for k in range(n):
                    X[j0 + k][o] = seg[k]
    return X

def reference(X, R, C, fmt, layout, rule, rnd, had, seed, tid):
    if had != "none":
        r = had.startswith("r")
        n = int(had[2:] if r else had[1:])
        X = rotate(X, R, C, 0 if layout in ("32x1", "16x1") else 1, n, r, seed, 0)
    Y = [[0.0] * C for _ in range(R)]
    if fmt in FP8:
        # amax is NaN (so not finite: scale 1) if any element is NaN, whatever its position
        amax = math.nan if any(math.isnan(v) for row in X for v in row) else max(abs(v) for row in X for v in row)
        scale = f32(FP8_MAX[fmt] / amax) if amax > 0 and math.isfinite(amax) else 1.0
        inv = f32(1.0 / scale)
        for i in range(R):
            for j in range(C):
                Y[i][j] = f32(fp8_round(f32(X[i][j] * scale), fmt) * inv)
        return Y
    B = 16 if fmt == "nvfp4" else 32
    blocks = []
    if layout in ("1x32", "1x16"):
        blocks = [[(i, j0 + k) for k in range(B)] for i in range(R) for j0 in range(0, C, B)]
    elif layout in ("32x1", "16x1"):
        blocks = [[(i0 + k, j) for k in range(B)] for j in range(C) for i0 in range(0, R, B)]
    else:
        blocks = [[(i0 + a, j0 + b) for a in range(B) for b in range(B)]
                  for i0 in range(0, R, B) for j0 in range(0, C, B)]
    S = nvfp4_tensor_scale(X) if fmt == "nvfp4" else None
    for blk in blocks:
        vals = [X[i][j] for i, j in blk]
        rb = [rand_u32(seed, 0, tid, i * C + j) for i, j in blk] if rnd == "sr" else None
        if fmt == "nvfp4":
            qs = nvfp4_block(vals, S, rnd, rb)
        elif fmt == "mxfp8":
            qs = mxfp8_block(vals, rule)
        else:
            qs = quant_block(vals, rule, rnd, rb)
        for (i, j), q in zip(blk, qs):
            Y[i][j] = q
    return Y

def gen(R, C, rng):
    X = [[f32(rng.gauss(0, 1) * (40.0 if rng.random() < 0.01 else 1.0)) for _ in range(C)] for _ in range(R)]
    kind = rng.random()
    if kind < 0.3 and C >= 32:
        for j in range(32):
            X[0][j] = 0.0  # a zero block (1x32) / a mostly-zero tile
    if kind > 0.8:
        X[R - 1][C - 1] = math.nan
    # exact ties and values at the scale-rule boundaries
    X[R // 2][0] = f32(7.0 * 2.0 ** rng.randint(-10, 10))
    X[R // 2][C - 1] = f32(0.25 * 2.0 ** rng.randint(-3, 3))
    return X

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mxlm", default="./mxlm")
    ap.add_argument("--cases", type=int, default=24)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    configs = []
    for layout in ("1x32", "32x1", "32x32"):
        for rule in ("floor", "even", "ceil"):
            for rnd in ("rne", "sr"):
                configs.append(("mxfp4", layout, rule, rnd))
    configs += [("e4m3", "1x32", "floor", "rne"), ("e5m2", "1x32", "floor", "rne")]
    for layout in ("1x16", "16x1", "16x16"):
        for rnd in ("rne", "sr"):
            configs.append(("nvfp4", layout, "-", rnd))
    for layout in ("1x32", "32x1"):
        for rule in ("floor", "ceil"):
            configs.append(("mxfp8", layout, rule, "rne"))
    passed = failed = 0
    with tempfile.TemporaryDirectory() as d:
        for case in range(args.cases):
            fmt, layout, rule, rnd = configs[case % len(configs)]
            had = rng.choice(["none", "h16", "h32", "rh16", "h64"])
            R, C = {"1x32": (rng.choice([1, 3, 32]), 64), "32x1": (64, rng.choice([1, 5, 32])),
                    "32x32": (32 * rng.choice([1, 2]), 64), "1x16": (rng.choice([1, 3, 16]), 48),
                    "16x1": (48, rng.choice([1, 5, 16])), "16x16": (16 * rng.choice([1, 2]), 48)}[layout]
            if had != "none":
                n = int(had.lstrip("rh"))
                along = R if layout in ("32x1", "16x1") else C
                if along % n:
                    had = "h16" if along % 16 == 0 else "none"
            seed, tid = rng.randrange(1 << 40), rng.randrange(1 << 20)
            X = gen(R, C, rng)
            src, dst = os.path.join(d, "x.f32"), os.path.join(d, "y.f32")
            with open(src, "wb") as f:
                f.write(struct.pack("<%df" % (R * C), *[v for row in X for v in row]))
            cmd = [args.mxlm, "quant", "--rows", str(R), "--cols", str(C), "--format", fmt]
            if fmt in ("mxfp4", "nvfp4", "mxfp8"):
                cmd += ["--layout", layout]
            if fmt in ("mxfp4", "mxfp8"):
                cmd += ["--scale", rule]
            if fmt in ("mxfp4", "nvfp4"):
                cmd += ["--round", rnd]
            cmd += ["--hadamard", had, "--seed", str(seed), "--tensor-id", str(tid), "--in", src, "--out", dst]
            res = subprocess.run(cmd, capture_output=True, text=True)
            desc = " ".join(cmd[2:-4])
            if res.returncode != 0:
                print("FAIL %s: exit %d: %s" % (desc, res.returncode, res.stderr.strip()))
                failed += 1
                continue
            with open(dst, "rb") as f:
                got = struct.unpack("<%df" % (R * C), f.read())
            want = [v for row in reference(X, R, C, fmt, layout, rule, rnd, had, seed, tid) for v in row]
            bad = [i for i in range(R * C) if not (bits(got[i]) == bits(want[i]) or (got[i] != got[i] and want[i] != want[i]))]
            if bad:
                i = bad[0]
                print("FAIL %s: %d of %d differ; first at %d: got %r want %r (input %r)" %
                      (desc, len(bad), R * C, i, got[i], want[i], X[i // C][i % C]))
                failed += 1
            else:
                print("ok   %s" % desc)
                passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
