/*
 * rope.cu: the GPU twin of src/nn/rope.c (the tables are the CPU's,
 * mx_rope_tables, uploaded).
 *   forward   (a, b) -> (a c - b s, b c + a s) on the pairs (i, i + hd/2)
 *   backward  (a, b) -> (a c + b s, b c - a s)
 * Guarantee: bit-identical to the CPU. The _bf16 forms (BF16 tensors, in place):
 * bit for bit the FP32 kernels on the widened values, rounded (RNE). The backward's _amax
 * form: the same outputs and their amax as stored (what an FP8 cast of them computes).
 * Built with --fmad=false (mk/cuda.mk): an add and a multiply are never
 * contracted into an FMA, so an expression written in the CPU's order rounds
 * exactly as the CPU's (built without FMA contraction: C11, x86-64-v2).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/elem.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/gpu_model.h"

namespace {

/* ---- RoPE ----------------------------------------------------------------------- */

/* One thread per rotated pair (n, head, i < hd/2); dir +1 forward, -1 backward. X float, or BF16
 * (widened exactly, the FP32 expressions, rounded: act16's q, k, dq, dk). */
__device__ __forceinline__ void rope_pair(float a, float b, float c, float s, int dir, float& ya, float& yb) {
    if (dir > 0) {
        ya = a * c - b * s;
        yb = b * c + a * s;
    } else {
        ya = a * c + b * s;
        yb = b * c - a * s;
    }
}

/* am (NULL: none; both kernels): raised to the largest |y| bits stored, one atomicMax a block. */
template <typename X>
__global__ void k_rope(X* x, const float* cos_t, const float* sin_t, int N, int T, int nh, int hd, int dir,
                       unsigned* am) {
    const int h2 = hd / 2;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned m = 0u;
    if (idx < (size_t)N * nh * h2) { /* (no return: the block's amax below has barriers) */
        const int i = (int)(idx % h2);
        const size_t nhh = idx / h2; /* n * nh + head */
        const int n = (int)(nhh / nh);
        const float c = cos_t[(size_t)(n % T) * h2 + i], s = sin_t[(size_t)(n % T) * h2 + i];
        X* p = x + nhh * hd;
        float ya, yb;
        rope_pair(elem_get(p + i), elem_get(p + i + h2), c, s, dir, ya, yb);
        elem_put(p + i, ya);
        elem_put(p + i + h2, yb);
        m = max(stored_abs_bits(X(), ya), stored_abs_bits(X(), yb));
    }
    if (am) block_amax_to(m, am);
}

/* The same per pair, a thread per P = Vec<X>::N consecutive pairs (16-byte loads of both halves and of the
 * tables; hd/2 % P == 0, x and the tables 16-byte aligned): the bytes of k_rope. */
template <typename X>
__global__ void k_rope_vec(X* x, const float* cos_t, const float* sin_t, int N, int T, int nh, int hd, int dir,
                           unsigned* am) {
    constexpr int P = Vec<X>::N;
    typedef typename Vec<X>::V VX;
    const int h2 = hd / 2, g2 = h2 / P;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned m = 0u;
    if (idx < (size_t)N * nh * g2) { /* (no return: the block's amax below has barriers) */
        const int i = (int)(idx % g2) * P;
        const size_t nhh = idx / g2; /* n * nh + head */
        const int n = (int)(nhh / nh);
        const float4* c4 = (const float4*)(cos_t + (size_t)(n % T) * h2 + i);
        const float4* s4 = (const float4*)(sin_t + (size_t)(n % T) * h2 + i);
        float c[P], s[P], a[P], b[P], ya[P], yb[P];
#pragma unroll
        for (int q = 0; q < P / 4; q++) {
            unpack<float>(c4[q], *(float (*)[4])(c + 4 * q));
            unpack<float>(s4[q], *(float (*)[4])(s + 4 * q));
        }
        X* p = x + nhh * hd;
        unpack<X>(*(const VX*)(p + i), a);
        unpack<X>(*(const VX*)(p + i + h2), b);
#pragma unroll
        for (int j = 0; j < P; j++) rope_pair(a[j], b[j], c[j], s[j], dir, ya[j], yb[j]);
        VX oa, ob;
        if constexpr (P == 8) {
            oa = pack8_bf16(ya);
            ob = pack8_bf16(yb);
        } else {
            oa = make_float4(ya[0], ya[1], ya[2], ya[3]);
            ob = make_float4(yb[0], yb[1], yb[2], yb[3]);
        }
        *(VX*)(p + i) = oa;
        *(VX*)(p + i + h2) = ob;
        m = max(amax_bits(oa), amax_bits(ob));
    }
    if (am) block_amax_to(m, am);
}

}  // namespace

/* am (NULL: none): the outputs' amax word, zeroed here first */
template <typename X>
static int rope(X* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd, int dir, float* am,
                void* stream) {
    ARG_CHECK(B > 0 && T > 0 && nh > 0 && hd > 0 && hd % 2 == 0, "mxg_rope: bad shape B %d T %d heads %d hd %d", B, T,
              nh, hd);
    const size_t n = (size_t)B * T * nh * (hd / 2);
    constexpr int P = Vec<X>::N;
    cudaStream_t st = MXG_STREAM(stream);
    if (am) CU_TRY(cudaMemsetAsync(am, 0, sizeof(float), st));
    if ((hd / 2) % P == 0 && vec_ok<X>(x, (size_t)hd) && vec_ok<float>(cos_t, 4) && vec_ok<float>(sin_t, 4))
        k_rope_vec<X><<<blocks_for(n / P, 256), 256, 0, st>>>(x, cos_t, sin_t, B * T, T, nh, hd, dir, (unsigned*)am);
    else
        k_rope<X><<<blocks_for(n, 256), 256, 0, st>>>(x, cos_t, sin_t, B * T, T, nh, hd, dir, (unsigned*)am);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_rope_forward(float* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd,
                                void* stream) {
    return rope(x, cos_t, sin_t, B, T, nh, hd, +1, NULL, stream);
}

extern "C" int mxg_rope_backward(float* dx, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd,
                                 void* stream) {
    return rope(dx, cos_t, sin_t, B, T, nh, hd, -1, NULL, stream);
}

extern "C" int mxg_rope_forward_bf16(uint16_t* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd,
                                     void* stream) {
    return rope(x, cos_t, sin_t, B, T, nh, hd, +1, NULL, stream);
}

extern "C" int mxg_rope_backward_bf16(uint16_t* dx, const float* cos_t, const float* sin_t, int B, int T, int nh,
                                      int hd, void* stream) {
    return rope(dx, cos_t, sin_t, B, T, nh, hd, -1, NULL, stream);
}

extern "C" int mxg_rope_backward_bf16_amax(uint16_t* dx, const float* cos_t, const float* sin_t, int B, int T, int nh,
                                           int hd, float* amax, void* stream) {
    ARG_CHECK(amax, "mxg_rope_backward_bf16_amax: no amax");
    return rope(dx, cos_t, sin_t, B, T, nh, hd, -1, amax, stream);
}
