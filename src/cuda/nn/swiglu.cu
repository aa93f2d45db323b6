/*
 * swiglu.cu: the GPU twin of src/nn/swiglu.c.
 *   forward   h = g * sigmoid(g) * up
 *   backward  dup = dh * g sigmoid(g);  dgate = dh * up * s (1 + g (1 - s)),  s = sigmoid(g)
 * Guarantee: the CPU's expressions in the CPU's order; equal to the CPU up to
 * expf (CUDA's vs glibc's). The _bf16 forms take BF16 tensors (gate, up, dh:
 * the GPU model's act16 storage), widen them exactly, run the same
 * expressions and round the results (RNE): bit for bit the FP32 kernels on
 * the widened inputs, then rounded.
 * Built with --fmad=false (mk/cuda.mk): an add and a multiply are never
 * contracted into an FMA, so an expression written in the CPU's order rounds
 * exactly as the CPU's (built without FMA contraction: C11, x86-64-v2).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/elem.cuh"
#include "cuda/nn/swiglu.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/gpu_model.h"

namespace {

/* ---- SwiGLU ---------------------------------------------------------------------- */

/* The expressions: swiglu.cuh (swiglu_h, swiglu_d), shared with mx/mxfp4.cu's fused quantizer. */

/* One element per thread, any input type (BF16 widened exactly). */
template <typename TO, typename TI>
__global__ void k_swiglu_fwd(TO* __restrict__ h, const TI* __restrict__ gate, const TI* __restrict__ up, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) elem_put(h + i, swiglu_h(elem_get(gate + i), elem_get(up + i)));
}

template <typename TO, typename TI>
__global__ void k_swiglu_bwd(TO* __restrict__ dgate, TO* __restrict__ dup, const TI* __restrict__ dh,
                             const TI* __restrict__ gate, const TI* __restrict__ up, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float dg, du;
    swiglu_d(elem_get(gate + i), elem_get(up + i), elem_get(dh + i), &dg, &du);
    elem_put(dup + i, du);
    elem_put(dgate + i, dg);
}

/* BF16 vectors of 8 (16 bytes): loaded and stored whole (unpack, pack8_bf16: cuda/elem.cuh), over a grid-stride
 * loop; AM: the amax of the outputs (their BF16 values, what an FP8 cast of them reads) into am[0] (h; dgate) and
 * am[1] (dup) by one atomicMax a block (the _amax launches: a grid of 132 x 8 blocks). */
template <bool AM>
__global__ void k_swiglu_fwd16(uint4* __restrict__ h, const uint4* __restrict__ gate, const uint4* __restrict__ up,
                               size_t n8, unsigned* am) {
    unsigned m = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        float g[8], u[8], o[8];
        unpack<uint16_t>(gate[i], g);
        unpack<uint16_t>(up[i], u);
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = swiglu_h(g[j], u[j]);
        const uint4 p = pack8_bf16(o);
        h[i] = p;
        if (AM) m = max(m, amax_bits(p));
    }
    if (AM) block_amax_to(m, am);
}

template <bool AM>
__global__ void k_swiglu_bwd16(uint4* __restrict__ dgate, uint4* __restrict__ dup, const uint4* __restrict__ dh,
                               const uint4* __restrict__ gate, const uint4* __restrict__ up, size_t n8, unsigned* am) {
    unsigned mg = 0, mu = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        float g[8], u[8], d[8], og[8], ou[8];
        unpack<uint16_t>(gate[i], g);
        unpack<uint16_t>(up[i], u);
        unpack<uint16_t>(dh[i], d);
#pragma unroll
        for (int j = 0; j < 8; j++) swiglu_d(g[j], u[j], d[j], &og[j], &ou[j]);
        const uint4 pu = pack8_bf16(ou), pg = pack8_bf16(og);
        dup[i] = pu;
        dgate[i] = pg;
        if (AM) {
            mg = max(mg, amax_bits(pg));
            mu = max(mu, amax_bits(pu));
        }
    }
    if (AM) {
        block_amax_to(mg, am);
        block_amax_to(mu, am + 1);
    }
}

}  // namespace

extern "C" int mxg_swiglu_forward(float* h, const float* gate, const float* up, size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_swiglu_forward: empty");
    k_swiglu_fwd<float, float><<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(h, gate, up, n);
    CU_LAUNCHED();
    return MX_OK;
}

/* The 8-wide kernels where every tensor allows 16-byte vectors, else the one-element ones (am: NULL, or the
 * outputs' amax words, zeroed here first; the 8-wide kernels only, else MX_EINVAL) */
static bool vec16(const uint16_t* const* t, int k, size_t n) {
    for (int i = 0; i < k; i++)
        if (!vec_ok<uint16_t>(t[i], n)) return false;
    return true;
}
/* the 8-wide kernels' grid: a thread a vector, or with the amax 132 x 8 blocks over a grid-stride loop (few atomics) */
static unsigned grid16(size_t n8, bool am) { return am ? 132 * 8 : blocks_for(n8, 256); }

static int swiglu_fwd16(uint16_t* h, const uint16_t* gate, const uint16_t* up, size_t n, float* am, void* stream) {
    cudaStream_t s = MXG_STREAM(stream);
    const uint16_t* t[3] = {h, gate, up};
    if (!vec16(t, 3, n)) {
        ARG_CHECK(!am, "mxg_swiglu_forward_bf16_amax: the tensors must be 16-byte vectors (n %% 8 == 0, aligned)");
        k_swiglu_fwd<uint16_t, uint16_t><<<blocks_for(n, 256), 256, 0, s>>>(h, gate, up, n);
    } else {
        if (am) CU_TRY(cudaMemsetAsync(am, 0, sizeof(float), s));
        (am ? k_swiglu_fwd16<true> : k_swiglu_fwd16<false>)<<<grid16(n / 8, am), 256, 0, s>>>(
            (uint4*)h, (const uint4*)gate, (const uint4*)up, n / 8, (unsigned*)am);
    }
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_swiglu_forward_bf16(uint16_t* h, const uint16_t* gate, const uint16_t* up, size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_swiglu_forward_bf16: empty");
    return swiglu_fwd16(h, gate, up, n, NULL, stream);
}

extern "C" int mxg_swiglu_forward_bf16_amax(uint16_t* h, const uint16_t* gate, const uint16_t* up, size_t n,
                                            float* amax, void* stream) {
    ARG_CHECK(n > 0 && amax, "mxg_swiglu_forward_bf16_amax: empty or no amax");
    return swiglu_fwd16(h, gate, up, n, amax, stream);
}

extern "C" int mxg_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                                   size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_swiglu_backward: empty");
    k_swiglu_bwd<float, float><<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(dgate, dup, dh, gate, up, n);
    CU_LAUNCHED();
    return MX_OK;
}

static int swiglu_bwd16(uint16_t* dgate, uint16_t* dup, const uint16_t* dh, const uint16_t* gate, const uint16_t* up,
                        size_t n, float* am, void* stream) {
    cudaStream_t s = MXG_STREAM(stream);
    const uint16_t* t[5] = {dgate, dup, dh, gate, up};
    if (!vec16(t, 5, n)) {
        ARG_CHECK(!am, "mxg_swiglu_backward_bf16_amax: the tensors must be 16-byte vectors (n %% 8 == 0, aligned)");
        k_swiglu_bwd<uint16_t, uint16_t><<<blocks_for(n, 256), 256, 0, s>>>(dgate, dup, dh, gate, up, n);
    } else {
        if (am) CU_TRY(cudaMemsetAsync(am, 0, 2 * sizeof(float), s));
        (am ? k_swiglu_bwd16<true> : k_swiglu_bwd16<false>)<<<grid16(n / 8, am), 256, 0, s>>>(
            (uint4*)dgate, (uint4*)dup, (const uint4*)dh, (const uint4*)gate, (const uint4*)up, n / 8, (unsigned*)am);
    }
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_swiglu_backward_bf16(uint16_t* dgate, uint16_t* dup, const uint16_t* dh, const uint16_t* gate,
                                        const uint16_t* up, size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_swiglu_backward_bf16: empty");
    return swiglu_bwd16(dgate, dup, dh, gate, up, n, NULL, stream);
}

extern "C" int mxg_swiglu_backward_bf16_amax(uint16_t* dgate, uint16_t* dup, const uint16_t* dh, const uint16_t* gate,
                                             const uint16_t* up, size_t n, float* amax, void* stream) {
    ARG_CHECK(n > 0 && amax, "mxg_swiglu_backward_bf16_amax: empty or no amax");
    return swiglu_bwd16(dgate, dup, dh, gate, up, n, amax, stream);
}
