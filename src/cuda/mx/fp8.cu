/*
 * fp8.cu: the GPU twin of src/mx/fp8.c: amax, FP8 per-tensor quantize
 * (current scaling: scale = fmax / amax, mx_fp8_scale_for_amax; or a given
 * scale) to E4M3 / E5M2, and the FP32 -> BF16 cast (RNE).
 *
 * Bit-exactness: the amax is exact (an integer max over |x|'s bits, NaN
 * above Inf), every scalar step calls include/mxlm/mx_scalar.h (compiled for
 * the device), and this file is built with --fmad=false (mk/cuda.mk), so
 * amax, scale and codes equal the CPU's.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda/common.cuh"
#include "cuda/mx/quant.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/mx_scalar.h"

namespace {

template <typename T> __global__ void k_amax(const T* x, size_t n, unsigned* amax_bits) {
    unsigned m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned b = mx_f2u(to_f<T>(x[i])) & 0x7fffffffu;  // |x| bits: order of uint = order of magnitude; NaN above Inf
        m = max(m, b);
    }
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0 && m) atomicMax(amax_bits, m);
}

__global__ void k_fp8_scale(const unsigned* amax_bits, int kind, const float* given, float* amax, float* scale, float* inv) {
    float am = mx_u2f(*amax_bits);
    if (amax) *amax = am;
    float s;
    if (given) s = *given;
    else {
        /* mx_fp8_scale_for_amax */
        float fmax = kind == MX_FP8_E4M3 ? MX_E4M3_MAX : MX_E5M2_MAX;
        if (!(am > 0.0f) || !(am <= 3.4028235e38f)) s = 1.0f;
        else {
            s = fmax / am;
            if (!(s <= 3.4028235e38f)) s = 3.4028235e38f;
        }
    }
    if (scale) *scale = s;
    if (inv) *inv = 1.0f / s;
}

template <typename T> __global__ void k_fp8_cast(const T* x, size_t n, int kind, const float* scale_p, const float* given, uint8_t* codes) {
    float scale = given ? *given : *scale_p;
    size_t i0 = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 4;
    for (size_t i = i0; i < n; i += (size_t)gridDim.x * blockDim.x * 4) {
        uint32_t w = 0;
        int m = n - i < 4 ? (int)(n - i) : 4;
        for (int k = 0; k < m; k++) {
            float v = to_f<T>(x[i + k]) * scale;
            uint8_t c = kind == MX_FP8_E4M3 ? mx_e4m3_encode(v) : mx_e5m2_encode(v);
            w |= (uint32_t)c << (8 * k);
        }
        if (m == 4 && ((uintptr_t)(codes + i) & 3) == 0) *(uint32_t*)(codes + i) = w;
        else for (int k = 0; k < m; k++) codes[i + k] = (uint8_t)(w >> (8 * k));
    }
}

__global__ void k_to_bf16(const float* x, size_t n, uint16_t* out) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = mx_bf16_from_f32(x[i]);
}

}  // namespace

static unsigned* d_bits = NULL;  // one word of scratch for the amax, kept until mxg_shutdown

void mxg_fp8_release(void) {
    if (d_bits) cudaFree(d_bits);
    d_bits = NULL;
}

extern "C" int mxg_fp8_quantize(const void* x, mxg_dtype dt, size_t n, mx_fp8_kind kind, const float* given_scale,
                                float* amax, float* scale, float* inv_scale, uint8_t* codes, void* stream) {
    if (!d_bits) CU_TRY(cudaMalloc(&d_bits, sizeof(unsigned)));
    if (dt != MXG_F32 && dt != MXG_BF16) return mx_fail(MX_EINVAL, "mxg_fp8_quantize: input must be f32 or bf16");
    if (!scale && !given_scale) return mx_fail(MX_EINVAL, "mxg_fp8_quantize: no scale output");
    cudaStream_t st = MXG_STREAM(stream);
    CU_TRY(cudaMemsetAsync(d_bits, 0, sizeof(unsigned), st));
    int grid = 132 * 8;
    if (dt == MXG_BF16) k_amax<uint16_t><<<grid, 256, 0, st>>>((const uint16_t*)x, n, d_bits);
    else k_amax<float><<<grid, 256, 0, st>>>((const float*)x, n, d_bits);
    CU_LAUNCHED();
    k_fp8_scale<<<1, 1, 0, st>>>(d_bits, (int)kind, given_scale, amax, scale, inv_scale);
    CU_LAUNCHED();
    if (codes) {
        if (dt == MXG_BF16) k_fp8_cast<uint16_t><<<grid, 256, 0, st>>>((const uint16_t*)x, n, (int)kind, scale, given_scale, codes);
        else k_fp8_cast<float><<<grid, 256, 0, st>>>((const float*)x, n, (int)kind, scale, given_scale, codes);
        CU_LAUNCHED();
    }
    return MX_OK;
}

extern "C" int mxg_to_bf16(const float* x, size_t n, uint16_t* out, void* stream) {
    k_to_bf16<<<132 * 8, 256, 0, MXG_STREAM(stream)>>>(x, n, out);
    CU_LAUNCHED();
    return MX_OK;
}
