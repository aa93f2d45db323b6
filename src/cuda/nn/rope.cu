/*
 * rope.cu: the GPU twin of src/nn/rope.c (the tables are the CPU's,
 * mx_rope_tables, uploaded).
 *   forward   (a, b) -> (a c - b s, b c + a s) on the pairs (i, i + hd/2)
 *   backward  (a, b) -> (a c + b s, b c - a s)
 * Guarantee: bit-identical to the CPU. The _bf16 forms (BF16 tensors, in place):
 * bit for bit the FP32 kernels on the widened values, rounded (RNE).
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
template <typename X>
__global__ void k_rope(X* x, const float* cos_t, const float* sin_t, int N, int T, int nh, int hd, int dir) {
    const int h2 = hd / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * nh * h2) return;
    const int i = (int)(idx % h2);
    const size_t nhh = idx / h2; /* n * nh + head */
    const int n = (int)(nhh / nh);
    const float c = cos_t[(size_t)(n % T) * h2 + i], s = sin_t[(size_t)(n % T) * h2 + i];
    X* p = x + nhh * hd;
    const float a = elem_get(p + i), b = elem_get(p + i + h2);
    if (dir > 0) {
        elem_put(p + i, a * c - b * s);
        elem_put(p + i + h2, b * c + a * s);
    } else {
        elem_put(p + i, a * c + b * s);
        elem_put(p + i + h2, b * c - a * s);
    }
}

}  // namespace

template <typename X>
static int rope(X* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd, int dir, void* stream) {
    ARG_CHECK(B > 0 && T > 0 && nh > 0 && hd > 0 && hd % 2 == 0, "mxg_rope: bad shape B %d T %d heads %d hd %d", B, T,
              nh, hd);
    const size_t n = (size_t)B * T * nh * (hd / 2);
    k_rope<X><<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(x, cos_t, sin_t, B * T, T, nh, hd, dir);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_rope_forward(float* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd,
                                void* stream) {
    return rope(x, cos_t, sin_t, B, T, nh, hd, +1, stream);
}

extern "C" int mxg_rope_backward(float* dx, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd,
                                 void* stream) {
    return rope(dx, cos_t, sin_t, B, T, nh, hd, -1, stream);
}

extern "C" int mxg_rope_forward_bf16(uint16_t* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd,
                                     void* stream) {
    return rope(x, cos_t, sin_t, B, T, nh, hd, +1, stream);
}

extern "C" int mxg_rope_backward_bf16(uint16_t* dx, const float* cos_t, const float* sin_t, int B, int T, int nh,
                                      int hd, void* stream) {
    return rope(dx, cos_t, sin_t, B, T, nh, hd, -1, stream);
}
