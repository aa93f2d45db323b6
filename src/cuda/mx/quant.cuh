/*
 * quant.cuh: the device steps shared by the MXFP4 quantizer kernels
 * (mxfp4.cu) and the FP8 ones (fp8.cu), written once: the input load
 * (FP32 / BF16 -> float), the branch-free E2M1 rounding, the per-block
 * quantizer step (amax, E8M0 scale, RNE/SR codes, clip flag), the telemetry
 * sums of a block and their warp flush, and the fold of a block into E4M3
 * under a reference exponent. No CPU twin of its own: these are the steps of
 * src/mx/mxfp4.c's quantizer (every scalar step calls include/mxlm/mx_scalar.h,
 * compiled for the device), bit-exact with it in an object built with
 * --fmad=false (mk/cuda.mk).
 */
#ifndef MXLM_CUDA_MX_QUANT_CUH
#define MXLM_CUDA_MX_QUANT_CUH
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/common.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/mx_scalar.h"

namespace {

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<uint16_t>(uint16_t v) { return mx_bf16_to_f32(v); }

/* mx_e2m1_rne without branches (a divergent if-chain per element costs the
 * warp every path its lanes take): the code is the number of RNE thresholds
 * that |v| passes, ties as in mx_e2m1_rne (0.25 -> 0, 0.75 -> 1, 1.25 -> 1,
 * 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4); NaN -> 0. Equal to mx_e2m1_rne on all
 * 2^32 inputs: checked exhaustively by mxg_selftest_e2m1 (tests/gpu). */
__device__ __forceinline__ uint32_t e2m1_rne_fast(float v) {
    float a = fabsf(v);
    uint32_t c = (uint32_t)(a > 0.25f) + (uint32_t)(a >= 0.75f) + (uint32_t)(a > 1.25f) + (uint32_t)(a >= 1.75f) +
                 (uint32_t)(a > 2.5f) + (uint32_t)(a >= 3.5f) + (uint32_t)(a > 5.0f);
    c |= (mx_f2u(v) >> 28) & 8u;
    return a == a ? c : 0u;
}

/* NaN-propagating max (PTX max.NaN): the amax of a block is NaN or Inf exactly when the block holds one. */
__device__ __forceinline__ float fmax_nan(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

/* Four floats to four E4M3 bytes (the first in the low byte) by the hardware conversion (RNE,
 * saturating to +-448). Equal to mx_e4m3_encode on every non-NaN float (mxg_selftest_round); NaN
 * gives 0x7f whatever its sign. */
__device__ __forceinline__ uint32_t e4m3x4(float a, float b, float c, float d) {
    unsigned short lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c));
    return (uint32_t)lo | ((uint32_t)hi << 16);
}
/* Four E4M3 bytes (the first in the low byte) to their four values, exactly, by the hardware conversion (E4M3 to
 * FP16 pairs, then FP16 to FP32). */
__device__ __forceinline__ void e4m3x4_f32(uint32_t w, float (&v)[4]) {
    uint32_t lo, hi;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"((unsigned short)(w & 0xffffu)));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"((unsigned short)(w >> 16)));
    asm("{.reg .f16 a, b;\n mov.b32 {a, b}, %2;\n cvt.f32.f16 %0, a;\n cvt.f32.f16 %1, b;\n}" : "=f"(v[0]), "=f"(v[1]) : "r"(lo));
    asm("{.reg .f16 a, b;\n mov.b32 {a, b}, %2;\n cvt.f32.f16 %0, a;\n cvt.f32.f16 %1, b;\n}" : "=f"(v[2]), "=f"(v[3]) : "r"(hi));
}
/* The same for E5M2 (saturating to +-57344; equal to mx_e5m2_encode on every non-NaN float). */
__device__ __forceinline__ uint32_t e5m2x4(float a, float b, float c, float d) {
    unsigned short lo, hi;
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a));
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c));
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* PTX prmt in its generic mode: byte i of the result is byte (s >> 4i) & 7 of the pair {b, a} (a's bytes
 * 0-3, b's 4-7), or with bit 3 of that nibble set the selected byte's sign bit over all 8 bits. Only the
 * low 16 bits of s are read. */
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
    return r;
}

/* The two BF16 values of a 32-bit word as floats (the first in the low half): exact. */
__device__ __forceinline__ void bf16x2_f32(uint32_t w, float& lo, float& hi) {
    lo = mx_u2f(w << 16);
    hi = mx_u2f(w & 0xffff0000u);
}

/* Eight E2M1 codes packed into a word as src/mx/mxfp4.c packs them (value k in bits 4k..4k+3): magnitude
 * k the low byte of t[k] (mx_e2m1_rint_bits / _scaled's float: 0x4b000000 + code), its sign bit (bit 3 of the
 * nibble) the sign bit of v[k], as mx_e2m1_rne takes it (-0 and a negative value that rounds to 0 give
 * 8). By bytes: the even values' and the odd values' magnitudes gathered by prmt, the odd ones shifted up a
 * nibble, and the signs (e2m1_signs8). */
__device__ __forceinline__ uint32_t e2m1_signs8(const float* v);
__device__ __forceinline__ uint32_t e2m1_pack8(const uint32_t* t, const float* v) {
    const uint32_t ev = prmt(prmt(t[0], t[2], 0x0040u), prmt(t[4], t[6], 0x4000u), 0x7610u);
    const uint32_t od = prmt(prmt(t[1], t[3], 0x0040u), prmt(t[5], t[7], 0x4000u), 0x7610u);
    return (od << 4) | ev | e2m1_signs8(v);
}

/* The sign bits of eight values at bit 3 of nibble k = value k (the bits e2m1_pack8's magnitudes leave clear):
 * prmt's sign replication makes a byte of each sign, the even values' in one word and the odd values' in
 * another, each masked to its nibble's bit 3. */
__device__ __forceinline__ uint32_t e2m1_signs8(const float* v) {
    const uint32_t se = prmt(prmt(mx_f2u(v[0]), mx_f2u(v[2]), 0x00fbu), prmt(mx_f2u(v[4]), mx_f2u(v[6]), 0xfb00u), 0x7610u);
    const uint32_t so = prmt(prmt(mx_f2u(v[1]), mx_f2u(v[3]), 0x00fbu), prmt(mx_f2u(v[5]), mx_f2u(v[7]), 0xfb00u), 0x7610u);
    return (se & 0x08080808u) | (so & 0x80808080u);
}

/* e2m1_pack8's word with the magnitudes gathered by integer multiply-adds instead of prmt (a candidate of the fast
 * kernels, mxfp4.cu's QF_OPT_MAD: it moves six ALU-pipe instructions of eight values to the multiply-add pipe).
 * t[k] = 0x4b000000 + code_k, so sum_k 16^k t[k] = sum_k 16^k code_k + 0xfb000000 (mod 2^32: 0x4b000000 * 16 =
 * 0xb0000000, and 0x4b000000 * 16^k = 0 for k >= 2), with no carry between nibbles (every code <= 7); the signs
 * (e2m1_signs8) take bit 3 of each nibble, which no magnitude sets, so one three-input add joins them and removes
 * the constant. Equal to e2m1_pack8 (mxg_selftest_round compares the two on its 2^29 words,
 * eight consecutive floats each). */
__device__ __forceinline__ uint32_t e2m1_pack8_mad(const uint32_t* t, const float* v) {
    const uint32_t m01 = t[1] * 16u + t[0], m23 = t[3] * 16u + t[2], m45 = t[5] * 16u + t[4], m67 = t[7] * 16u + t[6];
    const uint32_t m = (m67 * 256u + m45) * 65536u + (m23 * 256u + m01);
    return m + 0x05000000u + e2m1_signs8(v); /* 0x05000000 = -0xfb000000 */
}

/* The fold's table for one block: byte c of {hi, lo} = E4M3(decode(c) * mf) for the magnitudes c = 0..7
 * (mf = 2^(d+6) inside the window d in [-14, 0]: every product exact and an E4M3 value). */
__device__ __forceinline__ void e4m3_table(float mf, uint32_t& lo, uint32_t& hi) {
    lo = e4m3x4(0.0f, 0.5f * mf, mf, 1.5f * mf);
    hi = e4m3x4(2.0f * mf, 3.0f * mf, 4.0f * mf, 6.0f * mf);
}

/* The E4M3 bytes of eight packed codes p under a block's table (e4m3_table): o0 values 0-3, o1 values 4-7
 * (value k in byte k % 4). The magnitudes pick their bytes by prmt (the sign bits masked off: prmt reads a
 * set bit 3 as "replicate"); the sign of nibble k is bit 7 of byte k / 2 of p for k odd, of p << 4 for k
 * even, which prmt's sign replication spreads into byte k % 4; E4M3 is sign-magnitude, so the sign bit
 * ORs in (-0 included: 0x80). Equal to mx_e4m3_encode(mx_e2m1_decode(code) * mf): mxg_selftest_round. */
__device__ __forceinline__ void e4m3_of_codes8(uint32_t p, uint32_t lo, uint32_t hi, uint32_t& o0, uint32_t& o1) {
    const uint32_t m = p & 0x77777777u, q = p << 4;
    o0 = prmt(lo, hi, m) | (prmt(p, q, 0x9d8cu) & 0x80808080u);
    o1 = prmt(lo, hi, m >> 16) | (prmt(p, q, 0xbfaeu) & 0x80808080u);
}

/* The NaN-propagating amax of 32 values as a tree (5 dependent steps, not 32). */
__device__ __forceinline__ float amax32(const float (&v)[32]) {
    float m[16];
#pragma unroll
    for (int i = 0; i < 16; i++) m[i] = fmax_nan(fabsf(v[2 * i]), fabsf(v[2 * i + 1]));
#pragma unroll
    for (int i = 0; i < 8; i++) m[i] = fmax_nan(m[i], m[i + 8]);
#pragma unroll
    for (int i = 0; i < 4; i++) m[i] = fmax_nan(m[i], m[i + 4]);
    m[0] = fmax_nan(m[0], m[2]);
    m[1] = fmax_nan(m[1], m[3]);
    return fmax_nan(m[0], m[1]);
}

/* Quantize 32 values (already rotated) into packed codes; returns the scale
 * byte. l32: the 32 lanes of the warp form one 32x32 tile (amax and NaN
 * shared). SR bits for element i come from index base + i*stride. */
__device__ __forceinline__ uint8_t quant32(const float (&v)[32], int rule, int l32, int sr, uint64_t seed,
                                           uint32_t tid, uint64_t base, uint64_t stride, uint32_t (&pk)[4],
                                           int& clip) {
    float amax = 0.0f;
    int bad = 0;
#pragma unroll
    for (int i = 0; i < 32; i++) {
        float a = fabsf(v[i]);
        if (!(a <= 3.4028235e38f)) bad = 1;
        else amax = fmaxf(amax, a);
    }
    if (l32) {
        amax = warp_max(amax);
        bad = __any_sync(0xffffffffu, bad);
    }
    pk[0] = pk[1] = pk[2] = pk[3] = 0;
    clip = 0;
    if (bad) return (uint8_t)MX_E8M0_NAN;
    uint8_t sb = mx_e8m0_for_amax(amax, (mx_scale_rule)rule);
    float inv = mx_exp2i(127 - (int)sb);
    if (sr) {
        uint32_t rb[32];
        if (stride == 1) {
            /* base is a multiple of 4: one Philox call serves 4 elements (mx_rand_u32's rule) */
#pragma unroll
            for (int i = 0; i < 32; i += 4) {
                uint64_t idx = base + (uint64_t)i;
                uint32_t ctr[4] = {(uint32_t)(idx >> 2), (uint32_t)(idx >> 34), tid, (uint32_t)MX_RNG_SR};
                uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
                uint32_t out[4];
                mx_philox4x32_10(ctr, key, out);
                rb[i] = out[0]; rb[i + 1] = out[1]; rb[i + 2] = out[2]; rb[i + 3] = out[3];
            }
        } else {
#pragma unroll
            for (int i = 0; i < 32; i++) rb[i] = mx_rand_u32(seed, MX_RNG_SR, tid, base + (uint64_t)i * stride);
        }
#pragma unroll
        for (int i = 0; i < 32; i++) pk[i >> 3] |= (uint32_t)mx_e2m1_sr(v[i] * inv, rb[i]) << (4 * (i & 7));
    } else {
#pragma unroll
        for (int i = 0; i < 32; i++) pk[i >> 3] |= e2m1_rne_fast(v[i] * inv) << (4 * (i & 7));
    }
    /* an element beyond 6 after scaling <=> amax * inv > 6 (scaling by a power of two is monotone) */
    clip = amax * inv > 6.0f;
    if (l32) clip = __any_sync(0xffffffffu, clip);
    return sb;
}

/* Telemetry of one quantized group: the rotated values v, their codes pk and
 * scale byte sb (Q(x) = decode(code) * 2^(sb-127), NaN for a NaN block, as
 * mx_dequantize_fp4) added to the thread's sums (linear.c's accumulate_stats). */
__device__ __forceinline__ void stats32(const float (&v)[32], const uint32_t (&pk)[4], uint8_t sb, double& sg,
                                        double& er, unsigned& nf) {
    const float sc = mx_e8m0_decode(sb);
#pragma unroll
    for (int i = 0; i < 32; i++) {
        const float x = v[i];
        if (!(fabsf(x) <= 3.4028235e38f)) { nf++; continue; }
        const float q = mx_e2m1_decode((uint8_t)((pk[i >> 3] >> (4 * (i & 7))) & 15u)) * sc;
        const double d = (double)x - (double)q;
        sg += (double)x * (double)x;
        er += d * d;
    }
}

/* Warp-reduce the lanes' telemetry and add it to *st (lane 0, atomics). Every
 * lane of the warp must call it. */
__device__ void stats_flush(mxg_opstats* st, double sg, double er, unsigned nf, unsigned nb, unsigned nc) {
    sg = warp_sum(sg);
    er = warp_sum(er);
    nf = warp_sum(nf);
    nb = warp_sum(nb);
    nc = warp_sum(nc);
    if ((threadIdx.x & 31) == 0) {
        if (sg != 0.0) atomicAdd(&st->sig2, sg);
        if (er != 0.0) atomicAdd(&st->err2, er);  /* NaN too */
        if (nb) atomicAdd(&st->blocks, (unsigned long long)nb);
        if (nc) atomicAdd(&st->clipped, (unsigned long long)nc);
        if (nf) atomicAdd(&st->nonfinite, (unsigned long long)nf);
    }
}

/* The telemetry of one group of a staged pass (k_quant): its sums if `valid`, its block and
 * clipped block once per block (lane 0 of a 32x32 tile), flushed by the whole warp. No-op
 * without st. Every lane of the warp must call it. */
__device__ __forceinline__ void stats_group(mxg_opstats* st, bool valid, int l32, int lane, const float (&v)[32],
                                            const uint32_t (&pk)[4], uint8_t sb, int clip) {
    if (!st) return;
    double sgm = 0.0, erm = 0.0;
    unsigned nf = 0, nb = 0, nc = 0;
    if (valid) {
        stats32(v, pk, sb, sgm, erm, nf);
        if (!l32 || lane == 0) { nb = 1; nc = clip ? 1u : 0u; }
    }
    stats_flush(st, sgm, erm, nf, nb, nc);
}

/* Fold one block: codes pk with scale byte sb under reference exponent eref
 * into 32 E4M3 bytes, E4M3(decode(nib) * 2^(d+6)) with d = sb - 127 - eref
 * (inside the window d >= -14 from the block's register table, e4m3_of_codes8).
 * Returns 1 if the block lies outside the window (and has a nonzero code). */
__device__ __forceinline__ int fold32(const uint32_t (&pk)[4], uint8_t sb, int eref, uint32_t (&o)[8]) {
    if (sb == MX_E8M0_NAN) {
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = 0x7f7f7f7fu;
        return 0;
    }
    int d = (int)sb - 127 - eref;
    if (d >= -14) {
        uint32_t lo, hi;
        e4m3_table(mx_exp2i(d + 6), lo, hi);
#pragma unroll
        for (int w = 0; w < 4; w++) e4m3_of_codes8(pk[w], lo, hi, o[2 * w], o[2 * w + 1]);
        return 0;
    }
    int e = d + 6 < -149 ? -149 : d + 6;
    float m = mx_exp2i(e);
    int nz = 0;
#pragma unroll
    for (int w = 0; w < 8; w++) {
        uint32_t src = pk[w >> 1] >> (16 * (w & 1));
        uint32_t acc = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint8_t nib = (uint8_t)((src >> (4 * k)) & 15);
            nz |= nib & 7;
            acc |= (uint32_t)mx_e4m3_encode(mx_e2m1_decode(nib) * m) << (8 * k);
        }
        o[w] = acc;
    }
    return nz != 0;
}

__device__ __forceinline__ int eref_of(const uint8_t* sc, int n) {
    int m = -1;
    for (int i = 0; i < n; i++)
        if (sc[i] != MX_E8M0_NAN && (int)sc[i] > m) m = sc[i];
    return m < 0 ? 0 : m - 127;
}

}  // namespace

#endif
