/*
 * hadamard.cuh: the register FWHT of the GPU quantizers, the device form of
 * src/mx/hadamard.c's mx_fwht for n <= 32: the butterflies in mx_fwht's stage
 * order, then one multiply by mx_hadamard_norm(n); bit-exact with the CPU in
 * an object built with --fmad=false. (Rotations larger than 32 run in shared
 * memory inside the staged quantizer, mxfp4.cu's had_smem.) The standalone
 * rotation of the formats without a fused one (NVFP4, MXFP8) is hadamard.cu.
 */
#ifndef MXLM_CUDA_MX_HADAMARD_CUH
#define MXLM_CUDA_MX_HADAMARD_CUH
#include <cuda_runtime.h>

#include "mxlm/mx_scalar.h"

namespace {

/* One butterfly stage of mx_fwht (distance H) on the 32 register values. */
template <int H> __device__ __forceinline__ void fwht_stage(float (&v)[32]) {
#pragma unroll
    for (int i = 0; i < 32; i += 2 * H)
#pragma unroll
        for (int j = 0; j < H; j++) {
            const float a = v[i + j], b = v[i + j + H];
            v[i + j] = a + b;
            v[i + j + H] = a - b;
        }
}

/* mx_fwht on each n-group of 32 register values for a run-time n in {0, 2, 4, ..., 32} (0: none):
 * the stages of distance h < n in mx_fwht's order, each behind a uniform branch, then one multiply
 * by mx_hadamard_norm(n). Each stage is its own template, so every index is a constant before the
 * front end decides where v lives: written as a loop over h (h <<= 1), or as a switch over sizes,
 * the front end kept v in local memory in the quantizer kernels (seen in their PTX). */
__device__ __forceinline__ void fwht_rt(float (&v)[32], int n) {
    if (n > 1) fwht_stage<1>(v);
    if (n > 2) fwht_stage<2>(v);
    if (n > 4) fwht_stage<4>(v);
    if (n > 8) fwht_stage<8>(v);
    if (n > 16) fwht_stage<16>(v);
    if (n > 1) {
        const float s = mx_hadamard_norm(n);
#pragma unroll
        for (int i = 0; i < 32; i++) v[i] *= s;
    }
}

/* mx_fwht's butterflies for a compile-time n in {0, 2, 4, ..., 32} (0: none), without the final multiply by
 * mx_hadamard_norm(n), which the fast quantizer applies itself (qf_quant: folded into the block scale where
 * the norm is a power of two). The same stages in the same order as fwht_rt. */
template <int N> __device__ __forceinline__ void fwht_ct(float (&v)[32]) {
    static_assert(N == 0 || (N >= 2 && N <= 32 && (N & (N - 1)) == 0), "fwht_ct: n in {0, 2, ..., 32}");
    if constexpr (N > 1) fwht_stage<1>(v);
    if constexpr (N > 2) fwht_stage<2>(v);
    if constexpr (N > 4) fwht_stage<4>(v);
    if constexpr (N > 8) fwht_stage<8>(v);
    if constexpr (N > 16) fwht_stage<16>(v);
}

}  // namespace

#endif
