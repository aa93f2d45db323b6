/*
 * swiglu.cu: the GPU twin of src/nn/swiglu.c.
 *   forward   h = g * sigmoid(g) * up
 *   backward  dup = dh * g sigmoid(g);  dgate = dh * up * s (1 + g (1 - s)),  s = sigmoid(g)
 * Guarantee: the CPU's expressions in the CPU's order; equal to the CPU up to
 * expf (CUDA's vs glibc's).
 * Built with --fmad=false (mk/cuda.mk): an add and a multiply are never
 * contracted into an FMA, so an expression written in the CPU's order rounds
 * exactly as the CPU's (built without FMA contraction: C11, x86-64-v2).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/gpu_model.h"

namespace {

/* ---- SwiGLU ---------------------------------------------------------------------- */

__device__ __forceinline__ void put(float* p, float v) { *p = v; }
__device__ __forceinline__ void put(uint16_t* p, float v) { *p = mx_bf16_from_f32(v); } /* RNE */

template <typename TO> __global__ void k_swiglu_fwd(TO* h, const float* gate, const float* up, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i], sg = 1.0f / (1.0f + expf(-g));
    put(h + i, g * sg * up[i]);
}

template <typename TO>
__global__ void k_swiglu_bwd(TO* dgate, TO* dup, const float* dh, const float* gate, const float* up, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i], sg = 1.0f / (1.0f + expf(-g)), silu = g * sg;
    put(dup + i, dh[i] * silu);
    put(dgate + i, dh[i] * up[i] * sg * (1.0f + g * (1.0f - sg)));
}

}  // namespace

extern "C" int mxg_swiglu_forward(float* h, const float* gate, const float* up, size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_swiglu_forward: empty");
    k_swiglu_fwd<float><<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(h, gate, up, n);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_swiglu_forward_bf16(uint16_t* h, const float* gate, const float* up, size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_swiglu_forward_bf16: empty");
    k_swiglu_fwd<uint16_t><<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(h, gate, up, n);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                                   size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_swiglu_backward: empty");
    k_swiglu_bwd<float><<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(dgate, dup, dh, gate, up, n);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_swiglu_backward_bf16(uint16_t* dgate, uint16_t* dup, const float* dh, const float* gate,
                                        const float* up, size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_swiglu_backward_bf16: empty");
    k_swiglu_bwd<uint16_t><<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(dgate, dup, dh, gate, up, n);
    CU_LAUNCHED();
    return MX_OK;
}
