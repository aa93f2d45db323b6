/*
 * mx_scalar.h: the scalar definitions of every mxlm number format, shared
 * verbatim by the CPU reference and the CUDA kernels (MX_HD expands to
 * __host__ __device__ under nvcc). One source for both is how the GPU
 * quantizers stay bit-identical to the CPU ones.
 *
 * Everything here works on bit patterns or on float operations that are
 * exact (multiplication by powers of two, Sterbenz subtractions), so the
 * result does not depend on FMA contraction or on the compiler.
 */
#ifndef MXLM_MX_SCALAR_H
#define MXLM_MX_SCALAR_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MX_HD __host__ __device__ __forceinline__
#else
#define MX_HD static inline
#endif

/* ---- float <-> bits ---------------------------------------------------- */

MX_HD uint32_t mx_f2u(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u; memcpy(&u, &f, 4); return u;
#endif
}
MX_HD float mx_u2f(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f; memcpy(&f, &u, 4); return f;
#endif
}

/* 2^e as a float for e in [-149, 127] (subnormals included), exactly. */
MX_HD float mx_exp2i(int e) {
    if (e >= -126) return mx_u2f((uint32_t)(e + 127) << 23);
    return mx_u2f(1u << (e + 149));
}

/* BF16: round-to-nearest-even from float (subnormals kept; overflow to Inf); every NaN becomes the canonical
 * quiet NaN 0x7fff (the hardware conversion's: CUDA's cvt.rn.bf16.f32 and cvt.rn.bf16x2.f32). The integer form
 * is the definition; the device takes the conversion instruction, which the GPU tests check against it for
 * every float. */
MX_HD uint16_t mx_bf16_from_f32_int(float f) {
    uint32_t u = mx_f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
MX_HD uint16_t mx_bf16_from_f32(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    return mx_bf16_from_f32_int(f);
#endif
}
MX_HD float mx_bf16_to_f32(uint16_t h) { return mx_u2f((uint32_t)h << 16); }
MX_HD float mx_round_bf16(float f) { return mx_bf16_to_f32(mx_bf16_from_f32(f)); }

/* ---- Philox4x32-10 (Salmon et al., SC'11; Random123's constants) ------- */

MX_HD void mx_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0; c1 = lo1;
        c2 = hi0 ^ c3 ^ k1; c3 = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* Random-bit domains: the fourth counter word says what the bits are for. */
enum { MX_RNG_SR = 0, MX_RNG_SIGN = 1, MX_RNG_INIT = 2, MX_RNG_DATA = 3, MX_RNG_SAMPLE = 4 /* mxlm sample */ };

/* The 32 random bits of element `index` of stream `stream` (a tensor id or a
 * rotation id) under `seed`, for purpose `domain`. One Philox call serves four
 * consecutive indices: counter = (index/4 low, index/4 high, stream, domain),
 * key = (seed low, seed high); word index%4 is returned. */
MX_HD uint32_t mx_rand_u32(uint64_t seed, uint32_t domain, uint32_t stream, uint64_t index) {
    uint32_t ctr[4] = {(uint32_t)(index >> 2), (uint32_t)(index >> 34), stream, domain};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    mx_philox4x32_10(ctr, key, out);
    return out[index & 3];
}

/* ---- E2M1 (FP4) -------------------------------------------------------- */
/* nibble = sign<<3 | exp<<1 | man, bias 1: magnitudes 0 .5 1 1.5 2 3 4 6. */

MX_HD float mx_e2m1_decode(uint8_t nib) {
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float m = mag[nib & 7];
    return (nib & 8) ? -m : m;
}

/* Round a value already divided by its block scale to the nearest E2M1 code,
 * ties to the even code, saturating to +-6. NaN maps to code 0 (a NaN block
 * carries scale 0xFF, which makes every element NaN). */
MX_HD uint8_t mx_e2m1_rne(float v) {
    uint8_t s = (mx_f2u(v) >> 31) ? 8 : 0;
    float a = v < 0 ? -v : v;
    uint8_t c;
    if (!(a == a)) return 0;
    if (a <= 0.25f) c = 0;
    else if (a < 0.75f) c = 1;
    else if (a <= 1.25f) c = 2;
    else if (a < 1.75f) c = 3;
    else if (a <= 2.5f) c = 4;
    else if (a < 3.5f) c = 5;
    else if (a <= 5.0f) c = 6;
    else c = 7;
    return (uint8_t)(s | c);
}

/* The same rounding as three rounds to an integer, for 0 <= y < 8 (|v| of a finite block once divided by its
 * scale: amax / 2^e < 8 under each rule of mx_e8m0_for_amax). E2M1's grid is uniform in the code on each of
 * [0, 2], [2, 4] and [4, 8): there code = 2y, y + 2, y/2 + 4, and the ties of each line fall where its
 * integer rounding (ties to even) ties, the even code being the value of even mantissa (0.25 -> 0,
 * 0.75 -> 2, 1.25 -> 2, 1.75 -> 4, 2.5 -> 4, 3.5 -> 6, 5 -> 6). The three lines' least is the right one on
 * [0, 8) and rint is monotone, so code = min(rint(2y), rint(y) + 2, rint(y/2) + 4, 7) (7: saturation to 6).
 * Each rint is one rounding of an exact value: fma(y, k, 2^23 + c) rounds k*y + 2^23 + c to the integer
 * 2^23 + c + rint(k*y) (the ulp is 1 on [2^23, 2^24), and c is even, so a tie keeps its parity). The code is
 * the low byte of the least of those floats (its bits are 0x4b000000 + code): no compare chain, no integer
 * step; the GPU's fast quantizer takes y = |v| * 2^-e inside the fma (mx_e2m1_rint_scaled: exact while
 * that power-of-two scaling keeps y normal, and below 2^-26, where every line rounds to 0, it does not matter).
 * Equal to mx_e2m1_rne's magnitude on every float of [0, 8): tests/test_mx.c checks every float of [0.25, 8)
 * and a sample below, the GPU test all 2^32 (mxg_selftest_round). */
MX_HD uint32_t mx_e2m1_rint_scaled(float a, float s) { /* y = a * s, exact: a power-of-two scaling */
    const float l0 = fmaf(a, 2.0f * s, 8388608.0f), l1 = fmaf(a, s, 8388610.0f), l2 = fmaf(a, 0.5f * s, 8388612.0f);
    return mx_f2u(fminf(fminf(l0, l1), fminf(l2, 8388615.0f))); /* no NaN here: fminf is the plain minimum */
}
MX_HD uint32_t mx_e2m1_rint_bits(float y) { return mx_e2m1_rint_scaled(y, 1.0f); }

/* Stochastic rounding: with lo <= |v| < hi the neighbouring grid points,
 * round up with probability (|v|-lo)/(hi-lo). The fraction is exact in
 * float (Sterbenz subtraction, power-of-two divisor); u = (r>>8)*2^-24 is
 * uniform on [0,1) and the value rounds up iff u < fraction. Saturates to 6. */
MX_HD uint8_t mx_e2m1_sr(float v, uint32_t r) {
    uint8_t s = (mx_f2u(v) >> 31) ? 8 : 0;
    float a = v < 0 ? -v : v;
    if (!(a == a)) return 0;
    if (a >= 6.0f) return (uint8_t)(s | 7);
    uint8_t lo;
    float lov, step;
    if (a < 2.0f) { lo = (uint8_t)(a * 2.0f); lov = (float)lo * 0.5f; step = 0.5f; }
    else if (a < 4.0f) { lo = (uint8_t)(a < 3.0f ? 4 : 5); lov = (lo == 4) ? 2.0f : 3.0f; step = 1.0f; }
    else { lo = 6; lov = 4.0f; step = 2.0f; }
    float frac = (a - lov) / step;
    float u = (float)(r >> 8) * (1.0f / 16777216.0f);
    uint8_t c = (uint8_t)(u < frac ? lo + 1 : lo);
    return (uint8_t)(s | c);
}

/* ---- E8M0 (shared scale) ----------------------------------------------- */

#define MX_E8M0_NAN 0xFFu

MX_HD float mx_e8m0_decode(uint8_t b) {
    if (b == MX_E8M0_NAN) return mx_u2f(0x7fc00000u);
    return mx_exp2i((int)b - 127);
}

/* Shared-scale rules: names match the CLI and the docs. dither: floor's exponent, and the scaled
 * values multiplied by 3/4 before rounding (so |x| / 2^e * 3/4 < 6: stochastic rounding never clips),
 * decoded times 4/3 (mx_fp4_scaled): the "dither_scale" of Tseng et al. 2025 (arXiv 2502.20586, their
 * patch of microxcaling's mx_ops.py: A = 3A / 2^(e+2), rounded, times 2^(e+2) / 3). */
typedef enum { MX_SCALE_FLOOR = 0, MX_SCALE_EVEN = 1, MX_SCALE_CEIL = 2, MX_SCALE_DITHER = 3 } mx_scale_rule;

/* The value an MXFP4 element is rounded from: x / 2^e (exact: a power of two), and under dither that
 * times 3/4, one rounding (the same as 3x / 2^(e+2) of the original). inv = 2^-e. */
MX_HD float mx_fp4_prescale(float x, float inv, mx_scale_rule rule) {
    const float v = x * inv;
    return rule == MX_SCALE_DITHER ? v * 0.75f : v;
}

/* The value of a decoded element q (an E2M1 value, +-0..6) under the block scale sc = 2^e: q * sc, exact;
 * under dither q * sc * 4/3 rounded once (computed in double: q * sc * 4 is exact there and the division
 * rounds to double, then to float: with 53 >= 2 * 24 + 2 bits the double rounding is innocuous, so this
 * is the correctly rounded q * 2^(e+2) / 3). */
MX_HD float mx_fp4_scaled(float q, float sc, mx_scale_rule rule) {
    if (rule != MX_SCALE_DITHER) return q * sc;
    return (float)((double)q * (double)sc * 4.0 / 3.0);
}

/* The E8M0 byte for a block whose largest magnitude is `amax` (|x| of every
 * element, NaN/Inf included as they are).
 *   floor: floor(log2 amax) - 2               (OCP MX v1.0)
 *   even:  amax rounded to one mantissa bit (half up), then floor - 2
 *          (torchao / ROCm TE "EVEN")
 *   ceil:  the smallest e with amax / 2^e <= 6 (never clips)
 * Exponents clamp to [-127, 127]. amax NaN or Inf -> 0xFF. amax 0 -> 2^-127.
 * Subnormal amax all land on the -127 clamp, so the biased exponent field is
 * enough (floor(log2) of a subnormal is below -126). */
MX_HD uint8_t mx_e8m0_for_amax(float amax, mx_scale_rule rule) { /* dither: floor's */
    /* written with selects, not branches (the GPU quantizers run it once a block) */
    const uint32_t u = mx_f2u(amax) & 0x7fffffffu, man = u & 0x7fffffu;
    const int eb = (int)(u >> 23);           /* floor(log2 amax) + 127; 0 for zero and subnormals */
    const int up = rule == MX_SCALE_EVEN ? man >= 0x600000u : rule == MX_SCALE_CEIL ? man > 0x400000u : 0;
    const int b = eb + up - 2;               /* e + 127: e = floor + up - 2, at least -127 (never over 127) */
    if (u >= 0x7f800000u) return MX_E8M0_NAN;
    return (uint8_t)(eb == 0 || b < 0 ? 0 : b);
}

/* ---- FP8: E4M3 (OCP "fn": no Inf, max 448, S.1111.111 = NaN) and E5M2 --- */
/* Encoding is round-to-nearest-even with saturation to the largest finite
 * value (CUDA's __NV_SATFINITE); NaN stays NaN; +-Inf saturates too. */

MX_HD uint8_t mx_fp8_encode(float x, int ebits, int mbits, int bias, float maxv, uint8_t nan_code) {
    uint32_t u = mx_f2u(x);
    uint8_t s = (uint8_t)((u >> 24) & 0x80);
    float a = x < 0 ? -x : x;
    if (!(a == a)) return (uint8_t)(s | nan_code);
    if (a >= maxv) a = maxv;
    /* Grid spacing at a: 2^(max(floor(log2 a), emin) - mbits). */
    int emin = 1 - bias;
    uint32_t au = mx_f2u(a);
    int e = (int)(au >> 23) - 127;
    if (au < 0x00800000u) e = -127;
    if (e < emin) e = emin;
    float q = mx_exp2i(e - mbits);
    /* a / q is exact (power of two); round it to an integer, ties to even. */
    float t = a * mx_exp2i(mbits - e);
    float fl = (float)(uint32_t)t;
    float fr = t - fl;
    uint32_t n = (uint32_t)fl;
    if (fr > 0.5f || (fr == 0.5f && (n & 1))) n++;
    /* n * q is the rounded magnitude; re-encode it. */
    float r = (float)n * q;
    if (r > maxv) r = maxv;
    if (r == 0.0f) return s;
    uint32_t ru = mx_f2u(r);
    int re = (int)(ru >> 23) - 127;
    uint32_t code;
    if (re < emin) {                           /* subnormal in the fp8 format */
        code = (uint32_t)(r * mx_exp2i(mbits - emin));
    } else {
        uint32_t man = (ru >> (23 - mbits)) & ((1u << mbits) - 1);
        code = ((uint32_t)(re + bias) << mbits) | man;
    }
    (void)ebits;
    return (uint8_t)(s | code);
}

MX_HD float mx_fp8_decode(uint8_t c, int mbits, int bias) {
    int ebits = 7 - mbits;
    uint32_t e = (c >> mbits) & ((1u << ebits) - 1);
    uint32_t m = c & ((1u << mbits) - 1);
    float v;
    if (e == 0) v = (float)m * mx_exp2i(1 - bias - mbits);
    else v = (float)((1u << mbits) | m) * mx_exp2i((int)e - bias - mbits);
    return (c & 0x80) ? -v : v;
}

#define MX_E4M3_MAX 448.0f
#define MX_E5M2_MAX 57344.0f

/* FP8 current scaling: scale = fmax / amax (fmax the format's largest value: kind 0 E4M3, else E5M2, as
 * mx_fp8_kind), 1 where amax is 0, Inf or NaN, at most FLT_MAX (mx_fp8_scale_for_amax; the GPU's casts compute
 * it from the amax on the device). */
MX_HD float mx_fp8_scale_amax(float amax, int kind) {
    const float fmax = kind == 0 ? MX_E4M3_MAX : MX_E5M2_MAX;
    if (!(amax > 0.0f) || !(amax <= 3.4028235e38f)) return 1.0f;
    const float s = fmax / amax;
    return s <= 3.4028235e38f ? s : 3.4028235e38f;
}

MX_HD uint8_t mx_e4m3_encode(float x) { return mx_fp8_encode(x, 4, 3, 7, MX_E4M3_MAX, 0x7f); }
MX_HD float mx_e4m3_decode(uint8_t c) {
    if ((c & 0x7f) == 0x7f) return mx_u2f(0x7fc00000u);
    return mx_fp8_decode(c, 3, 7);
}
/* The exponent e of a power of two p = 2^e, normal or subnormal (the inverse of mx_exp2i). */
MX_HD int mx_log2_pow2(float p) {
    const uint32_t u = mx_f2u(p) & 0x7fffffffu;
    if (u >> 23) return (int)(u >> 23) - 127;
    int e = -150;
    for (uint32_t m = u; m; m >>= 1) e++;
    return e;
}

/* A folded E4M3 code c re-expressed under a scale 2^down times larger (down >= 0; the fold's VEC128 -> OUTER
 * step, mx_fold_outer_from_vec128): E4M3(decode(c) * 2^-down), round to nearest even, exact where
 * representable; *inexact |= 1 where it is not. NaN keeps its code. Beyond down 31 every code rounds to a
 * zero as at 31 (448 * 2^-31 is below half of E4M3's smallest subnormal), so down is clamped there. */
MX_HD uint8_t mx_e4m3_rescale(uint8_t c, int down, int* inexact) {
    /* = mx_e4m3_encode(mx_e4m3_decode(c) * 2^-down), *inexact set where that rounds (tests/test_fold.c checks
     * every code and shift against that definition), in integer steps: a normal code that stays normal only
     * loses `down` from its exponent field; otherwise the magnitude in units of 2^-9 (E4M3's subnormal step),
     * (8 + m) << (E - 1) or m, is shifted right with ties to even, and a result of 8 units is the smallest
     * normal, code 0x08: the code is the unit count either way. */
    if ((c & 0x7f) == 0x7f || down <= 0) return c;
    const uint32_t s = c & 0x80u, E = (c >> 3) & 15u, m = c & 7u;
    if ((int)E > down) return (uint8_t)(s | ((E - (uint32_t)down) << 3) | m);
    const uint32_t x = E ? 8u + m : m;               /* units of 2^-9 << (E - 1), or units for a subnormal */
    const int k = E ? down - (int)E + 1 : down;      /* the right shift of the unit count, >= 1 */
    if (k > 8) {                                     /* x < 16 <= half of 2^k: to zero */
        if (x) *inexact = 1;
        return (uint8_t)s;
    }
    const uint32_t rem = x & ((1u << k) - 1u), half = 1u << (k - 1);
    uint32_t q = x >> k;
    if (rem > half || (rem == half && (q & 1u))) q++;
    if (rem) *inexact = 1;
    return (uint8_t)(s | q);
}
/* Element k of stored row i of a folded operand [R, K]: its value under VEC128 scales (fs [K/128][R]) or under
 * OUTER ones (fo [R]) (fold.c's fix-up and mxfp4.cu's k_outer_fix). */
MX_HD float mx_fold_vec128_at(const uint8_t* v, const float* fs, int R, int K, int i, int k) {
    return mx_e4m3_decode(v[(size_t)i * K + k]) * fs[(size_t)(k / 128) * R + i];
}
MX_HD float mx_fold_outer_at(const uint8_t* o, const float* fo, int K, int i, int k) {
    return mx_e4m3_decode(o[(size_t)i * K + k]) * fo[i];
}

MX_HD uint8_t mx_e5m2_encode(float x) { return mx_fp8_encode(x, 5, 2, 15, MX_E5M2_MAX, 0x7f); }
MX_HD float mx_e5m2_decode(uint8_t c) {
    if ((c & 0x7c) == 0x7c) {
        if (c & 3) return mx_u2f(0x7fc00000u);
        return (c & 0x80) ? -mx_u2f(0x7f800000u) : mx_u2f(0x7f800000u);
    }
    return mx_fp8_decode(c, 2, 15);
}

/* ---- MXFP8: E4M3 elements, E8M0 scale per 32 (OCP MX v1.0) ------------- */

/* The E8M0 byte of an MXFP8 block with largest magnitude `amax` (finite):
 *   floor: floor(log2 amax) - 8   (OCP; 8 = emax of E4M3; amax/2^e in [256, 512): above 448 saturates)
 *   ceil:  the smallest e with amax / 2^e <= 448 (never clips)
 * (even is not defined for MXFP8 and is treated as floor.) Clamped to [-127, 127]; amax 0 and
 * subnormal amax give -127; NaN or Inf give 0xFF. With amax = m 2^fl, m in [1, 2):
 * amax/2^(fl-8) = m 2^8 <= 448 iff m <= 1.75 (mantissa field <= 0x600000). */
MX_HD uint8_t mx_mxfp8_e8m0_for_amax(float amax, mx_scale_rule rule) {
    uint32_t u = mx_f2u(amax) & 0x7fffffffu;
    if (u >= 0x7f800000u) return MX_E8M0_NAN;
    int e;
    if (u < 0x00800000u) e = -127;
    else {
        int fl = (int)(u >> 23) - 127;
        e = fl - 8 + ((rule == MX_SCALE_CEIL && (u & 0x7fffffu) > 0x600000u) ? 1 : 0);
    }
    if (e < -127) e = -127;
    if (e > 127) e = 127;
    return (uint8_t)(e + 127);
}
/* Element code: E4M3 of x / 2^e (the division by a power of two is exact where it matters:
 * a result below 2^-126 is far below E4M3's 2^-10 rounding midpoint). */
MX_HD uint8_t mx_mxfp8_encode(float x, uint8_t sb) { return mx_e4m3_encode(x * mx_exp2i(127 - (int)sb)); }
/* Decoded value: E4M3(q) * 2^e, exact; scale 0xFF gives NaN. */
MX_HD float mx_mxfp8_decode(uint8_t q, uint8_t sb) { return mx_e4m3_decode(q) * mx_e8m0_decode(sb); }

/* ---- NVFP4: E2M1 elements, E4M3 scale per 16, FP32 tensor scale ------- */
/* Every step is one FP32 operation rounded to nearest even (no contraction possible: the
 * CUDA twin must use IEEE division, i.e. no --use_fast_math / -prec-div=false). */

#define MX_NVFP4_BLOCK 16
#define MX_E4M3_NAN 0x7Fu   /* the scale of a block holding NaN or Inf */

/* S = 2688 / amax_t (2688 = 448 * 6), amax_t the largest finite magnitude of the operand;
 * 1 when amax_t is 0 (or not finite); FLT_MAX where 2688 / amax_t overflows (amax_t below
 * 2688 / FLT_MAX, about 7.9e-36). */
MX_HD float mx_nvfp4_tensor_scale(float amax_t) {
    if (!(amax_t > 0.0f) || !(amax_t <= 3.4028235e38f)) return 1.0f;
    float s = 2688.0f / amax_t;
    if (!(s <= 3.4028235e38f)) s = 3.4028235e38f;
    return s;
}
/* The block scale: sb = E4M3((amax_b / 6) * S) (RNE, subnormals kept, saturating at 448). */
MX_HD uint8_t mx_nvfp4_block_scale(float amax_b, float S) { return mx_e4m3_encode((amax_b / 6.0f) * S); }
/* The element multiplier r = S / sb (sb != 0, not NaN). */
MX_HD float mx_nvfp4_mult(uint8_t sb, float S) { return S / mx_e4m3_decode(sb); }
/* Decoded value: (q * sb) / S (q * sb is exact); sb 0x7F gives NaN; sb 0 gives 0. */
MX_HD float mx_nvfp4_decode(uint8_t q, uint8_t sb, float S) {
    return (mx_e2m1_decode(q) * mx_e4m3_decode(sb)) / S;
}

/* ---- Hadamard ---------------------------------------------------------- */

/* In-place normalized Walsh-Hadamard transform of n values (n a power of two,
 * 2..256): the Sylvester matrix H_n (symmetric, H H^T = I), so y = x H.
 * Butterfly order is fixed: stage h = 1, 2, 4, ...; pair (i, i+h) ->
 * (a+b, a-b). Then one multiplication by 1/sqrt(n) rounded to float (exact
 * for n = 4^k). A GPU twin must use the same stages to stay bit-identical. */
MX_HD float mx_hadamard_norm(int n) {
    switch (n) {
    case 2: return 0.70710678118654752f;
    case 4: return 0.5f;
    case 8: return 0.35355339059327376f;
    case 16: return 0.25f;
    case 32: return 0.17677669529663688f;
    case 64: return 0.125f;
    case 128: return 0.088388347648318440f;
    case 256: return 0.0625f;
    default: return 0.0f;
    }
}

/* The sign (+1 or -1) of position j of rotation stream `rot_id` for rhN. */
MX_HD float mx_rh_sign(uint64_t seed, uint32_t rot_id, uint64_t j) {
    return (mx_rand_u32(seed, MX_RNG_SIGN, rot_id, j) >> 31) ? -1.0f : 1.0f;
}

#endif
