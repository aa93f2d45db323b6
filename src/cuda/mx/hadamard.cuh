/*
 * hadamard.cuh: the register FWHT of the GPU quantizers, the device form of
 * src/mx/hadamard.c's mx_fwht for n <= 32: the butterflies in mx_fwht's stage
 * order, then one multiply by mx_hadamard_norm(n); bit-exact with the CPU in
 * an object built with --fmad=false. (Rotations larger than 32 run in shared
 * memory inside the staged quantizer, mxfp4.cu's had_smem.) No standalone
 * GPU rotation exists, hence no hadamard.cu.
 */
#ifndef MXLM_CUDA_MX_HADAMARD_CUH
#define MXLM_CUDA_MX_HADAMARD_CUH
#include <cuda_runtime.h>

#include "mxlm/mx_scalar.h"

namespace {

/* mx_fwht on each n-group of 32 register values (n <= 32). */
template <int N> __device__ __forceinline__ void fwht_reg(float (&v)[32]) {
#pragma unroll
    for (int h = 1; h < N; h <<= 1)
#pragma unroll
        for (int i = 0; i < 32; i += 2 * h)
#pragma unroll
            for (int j = i; j < i + h; j++) {
                float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
    const float s = mx_hadamard_norm(N);
#pragma unroll
    for (int i = 0; i < 32; i++) v[i] *= s;
}

__device__ __forceinline__ void fwht_rt(float (&v)[32], int n) {
    switch (n) {
    case 2: fwht_reg<2>(v); break;
    case 4: fwht_reg<4>(v); break;
    case 8: fwht_reg<8>(v); break;
    case 16: fwht_reg<16>(v); break;
    case 32: fwht_reg<32>(v); break;
    default: break;
    }
}

}  // namespace

#endif
