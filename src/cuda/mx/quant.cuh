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
/* The same for E5M2 (saturating to +-57344; equal to mx_e5m2_encode on every non-NaN float). */
__device__ __forceinline__ uint32_t e5m2x4(float a, float b, float c, float d) {
    unsigned short lo, hi;
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a));
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c));
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* The 32 packed codes of a finite block: mx_e2m1_code_arith(v[i] * inv). */
__device__ __forceinline__ void codes32(const float (&v)[32], float inv, uint32_t (&pk)[4]) {
#pragma unroll
    for (int w = 0; w < 4; w++) {
        uint32_t p = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) p |= mx_e2m1_code_arith(v[8 * w + i] * inv) << (4 * i);
        pk[w] = p;
    }
}

/* The folded E4M3 bytes of a finite block inside the fold window (its exponent d = e - e_ref in
 * [-14, 0], mf = 2^(d+6)): E4M3(RNE(v*inv) * mf), which is exact there, so it is fold32's table
 * entry for every code (-0 included: copysign keeps the sign of a value that rounds to zero). */
__device__ __forceinline__ void fold32_direct(const float (&v)[32], float inv, float mf, uint32_t (&o)[8]) {
#pragma unroll
    for (int w = 0; w < 8; w++) {
        float f[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float y = v[4 * w + k] * inv;
            f[k] = copysignf(mx_e2m1_mag_arith(y) * mf, y);
        }
        o[w] = e4m3x4(f[0], f[1], f[2], f[3]);
    }
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
 * into 32 E4M3 bytes. Returns 1 if the block lies outside the window (and has
 * a nonzero code). lut[(d+14)*16 + nib] = E4M3(decode(nib) * 2^(d+6)). */
__device__ __forceinline__ int fold32(const uint32_t (&pk)[4], uint8_t sb, int eref, const uint8_t* lut,
                                      uint32_t (&o)[8]) {
    if (sb == MX_E8M0_NAN) {
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = 0x7f7f7f7fu;
        return 0;
    }
    int d = (int)sb - 127 - eref;
    if (d >= -14) {
        const uint8_t* t = lut + (d + 14) * 16;
#pragma unroll
        for (int w = 0; w < 8; w++) {
            uint32_t src = pk[w >> 1] >> (16 * (w & 1));
            o[w] = (uint32_t)t[src & 15] | ((uint32_t)t[(src >> 4) & 15] << 8) | ((uint32_t)t[(src >> 8) & 15] << 16) |
                   ((uint32_t)t[(src >> 12) & 15] << 24);
        }
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

/* Entry i of the fold's table (i < 240): lut[(d+14)*16 + nib] = E4M3(decode(nib) * 2^(d+6)). */
__device__ __forceinline__ uint8_t fold_lut_entry(int i) {
    return mx_e4m3_encode(mx_e2m1_decode((uint8_t)(i & 15)) * mx_exp2i((i >> 4) - 14 + 6));
}

}  // namespace

#endif
