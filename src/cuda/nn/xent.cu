/*
 * xent.cu: the GPU twin of src/nn/xent.c: softmax cross-entropy, its mean,
 * and the LM head's chunk loop (the head GEMMs and the loss per chunk of rows,
 * as src/nn/llama.c's head does in one piece).
 *   loss_n = log(sum_i exp(z_i - max)) - (z_t - max)   (the sum in FP64; two passes over a row: k_xent)
 *   dlogits = (softmax(z) - onehot(t)) * scale
 * Guarantee: deterministic (fixed-order block reductions, no float atomics);
 * equal to the CPU up to expf.
 * Built with --fmad=false (mk/cuda.mk): an add and a multiply are never
 * contracted into an FMA, so an expression written in the CPU's order rounds
 * exactly as the CPU's (built without FMA contraction: C11, x86-64-v2).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/elem.cuh"
#include "cuda/nn/gemm.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/gpu_model.h"

namespace {

/* ---- cross-entropy (one block per row) ------------------------------------------------ */

#define XENT_THREADS 1024

/* mode 0: probabilities in place (mx_xent_forward); 1: dlogits = (p - onehot) * scale, in place or,
 * with out16, rounded to BF16 (RNE) into out16 (row r at out16 + r * ld16) and the logits left as they were
 * (the head's backward GEMMs read BF16: one pass instead of an FP32 write and a conversion). out16 may be
 * the logits themselves (ld16 = 2V: row r's BF16 dlogits in the first half of its FP32 logits' bytes): the
 * last pass then goes by chunks of W = VW * blockDim.x columns with a barrier between a chunk's reads and its
 * writes, so that no write lands on a logit not yet read (chunk i0's writes cover the FP32 columns [i0/2,
 * (i0 + W)/2), all read by then; later chunks read columns >= i0 + W).
 *
 * Two passes over the row (the CPU's three: max, sum, probabilities): the first keeps per thread a running
 * max m_t of its columns and s_t = sum of (double) expf(z_i - m_t), rescaled by exp(m_old - m_new) in FP64
 * when m_t grows; then M = max_t m_t and sum = sum_t s_t exp(m_t - M) (FP64, fixed-order block sums). The
 * second writes p_i = expf(z_i - M) * (float)(1 / sum) as the CPU does; the loss is log(sum) - (z_t - M).
 * Against the CPU's sum of expf(z_i - M) the terms differ by the FP32 rounding of expf(z_i - m_t) (an ulp
 * of a term, as CUDA's expf against glibc's): inv may differ by an ulp, the loss by ~1e-8 relative.
 * Non-finite rows stay non-finite (NaN propagates through s_t; a +Inf logit gives Inf - Inf = NaN, as on
 * the CPU). VW = 4: 16-byte loads (V % 4 == 0, the row and out16 aligned), else VW = 1. */
template <int VW> __device__ __forceinline__ void xent_load(const float* p, float (&v)[VW]) {
    if constexpr (VW == 4) unpack<float>(*(const float4*)p, v);
    else v[0] = *p;
}

template <int VW>
__global__ void __launch_bounds__(XENT_THREADS) k_xent(float* logits, float* losses, const int32_t* targets, int V,
                                                       float scale, int mode, uint16_t* out16, size_t ld16) {
    float* z = logits + (size_t)blockIdx.x * V;
    const int tgt = targets[blockIdx.x];
    const float ztv = z[tgt]; /* read before any thread writes the row (the reductions below are barriers) */
    const int W = VW * (int)blockDim.x;
    float m = -INFINITY;
    double s = 0.0;
    for (int i = VW * (int)threadIdx.x; i < V; i += W) {
        float v[VW];
        xent_load<VW>(z + i, v);
        float lm = v[0];
#pragma unroll
        for (int j = 1; j < VW; j++) lm = fmaxf(lm, v[j]);
        if (lm > m) { /* from -Inf: s is 0 (or NaN) and exp(-Inf) = 0 */
            s *= exp((double)m - (double)lm);
            m = lm;
        }
        const float r = m == -INFINITY ? 0.0f : m; /* all -Inf so far: their terms are expf(-Inf) = 0 */
#pragma unroll
        for (int j = 0; j < VW; j++) s += (double)expf(v[j] - r);
    }
    const float mx = block_max_warps(m);
    const double sum = block_sum_warps_d(s * exp((double)m - (double)mx));
    const float zt = ztv - mx;
    const float inv = (float)(1.0 / sum);
    const bool inplace = out16 == (const uint16_t*)logits; /* uniform: every thread takes the barriers or none */
    for (int i0 = 0; i0 < V; i0 += W) {
        const int i = i0 + VW * (int)threadIdx.x;
        float d[VW];
        if (i < V) {
            float v[VW];
            xent_load<VW>(z + i, v);
#pragma unroll
            for (int j = 0; j < VW; j++) {
                const float p = expf(v[j] - mx) * inv;
                d[j] = mode ? (p - (i + j == tgt ? 1.0f : 0.0f)) * scale : p;
            }
        }
        if (inplace) __syncthreads();
        if (i < V) {
            if constexpr (VW == 4) {
                if (out16) {
                    *(uint2*)(out16 + (size_t)blockIdx.x * ld16 + i) = pack4_bf16(d[0], d[1], d[2], d[3]);
                } else {
                    *(float4*)(z + i) = make_float4(d[0], d[1], d[2], d[3]);
                }
            } else {
                if (out16) out16[(size_t)blockIdx.x * ld16 + i] = mx_bf16_from_f32(d[0]);
                else z[i] = d[0];
            }
        }
    }
    if (threadIdx.x == 0) losses[blockIdx.x] = (float)(log(sum) - (double)zt);
}

/* k_xent over N rows, 16-byte accesses where V, the logits and out16 allow them */
void xent_launch(float* logits, float* losses, const int32_t* targets, int N, int V, float scale, int mode,
                 uint16_t* out16, size_t ld16, cudaStream_t st) {
    const bool vec = V % 4 == 0 && !((uintptr_t)logits & 15) && (!out16 || (!((uintptr_t)out16 & 7) && ld16 % 4 == 0));
    if (vec) k_xent<4><<<N, XENT_THREADS, 0, st>>>(logits, losses, targets, V, scale, mode, out16, ld16);
    else k_xent<1><<<N, XENT_THREADS, 0, st>>>(logits, losses, targets, V, scale, mode, out16, ld16);
}

__global__ void k_xent_bwd(float* probs, const int32_t* targets, int V, float scale) {
    float* p = probs + (size_t)blockIdx.x * V;
    const int tgt = targets[blockIdx.x];
    for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] = (i == tgt ? p[i] - 1.0f : p[i]) * scale;
}

__global__ void k_mean(float* out, const float* x, int n) {
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i];
    s = block_sum_warps_d(s);
    if (threadIdx.x == 0) *out = (float)(s / n);
}

}  // namespace

extern "C" int mxg_xent_forward(float* logits, float* losses, const int32_t* targets, int N, int V, void* stream) {
    ARG_CHECK(N > 0 && V > 0, "mxg_xent_forward: bad shape N %d V %d", N, V);
    xent_launch(logits, losses, targets, N, V, 1.0f, 0, nullptr, 0, MXG_STREAM(stream));
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_xent_backward(float* probs, const int32_t* targets, int N, int V, float scale, void* stream) {
    ARG_CHECK(N > 0 && V > 0, "mxg_xent_backward: bad shape N %d V %d", N, V);
    k_xent_bwd<<<N, 256, 0, MXG_STREAM(stream)>>>(probs, targets, V, scale);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_xent_fused(float* logits, float* losses, const int32_t* targets, int N, int V, float scale,
                              void* stream) {
    ARG_CHECK(N > 0 && V > 0, "mxg_xent_fused: bad shape N %d V %d", N, V);
    xent_launch(logits, losses, targets, N, V, scale, 1, nullptr, 0, MXG_STREAM(stream));
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_xent_fused_bf16(const float* logits, uint16_t* dlogits, float* losses, const int32_t* targets,
                                   int N, int V, float scale, void* stream) {
    ARG_CHECK(N > 0 && V > 0, "mxg_xent_fused_bf16: bad shape N %d V %d", N, V);
    const size_t ld16 = dlogits == (const uint16_t*)logits ? 2 * (size_t)V : (size_t)V; /* in place: see k_xent */
    xent_launch((float*)logits, losses, targets, N, V, scale, 1, dlogits, ld16, MXG_STREAM(stream));
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_mean(const float* x, int n, float* out, void* stream) {
    ARG_CHECK(n > 0, "mxg_mean: empty");
    k_mean<<<1, 1024, 0, MXG_STREAM(stream)>>>(out, x, n);
    CU_LAUNCHED();
    return MX_OK;
}

static int head_chunks(const void* xnf, const void* head, int bf16, const int32_t* targets, int N, int D, int V,
                       float scale, float* losses, float* dxnf, float* dhead, float* chunk, int Nc, void* stream) {
    const size_t es = bf16 ? 2 : 4; /* bytes per operand element */
    for (int n0 = 0; n0 < N; n0 += Nc) {
        const int nc = N - n0 < Nc ? N - n0 : Nc;
        const void* xc = (const char*)xnf + (size_t)n0 * D * es; /* [nc, D] */
        int rc = mxg_gemm_f32acc(0, 1, nc, V, D, xc, D, head, D, chunk, V, 0, bf16, stream); /* logits [nc, V] */
        /* dlogits [nc, V] in place: FP32, or BF16 over the logits' own bytes (row r in the first half of row
         * r's FP32 logits: leading dimension 2V) */
        const int ldl = bf16 ? 2 * V : V;
        if (!rc && dxnf && bf16) rc = mxg_xent_fused_bf16(chunk, (uint16_t*)chunk, losses + n0, targets + n0, nc, V, scale, stream);
        else if (!rc) rc = mxg_xent_fused(chunk, losses + n0, targets + n0, nc, V, scale, stream);
        if (!rc && dxnf) rc = mxg_gemm_f32acc(0, 0, nc, D, V, chunk, ldl, head, D, dxnf + (size_t)n0 * D, D, 0, bf16, stream);
        if (!rc && dxnf) rc = mxg_gemm_f32acc(1, 0, V, D, nc, chunk, ldl, xc, D, dhead, D, 1, bf16, stream); /* dhead += dl^T x */
        if (rc) return rc;
    }
    return MX_OK;
}

extern "C" int mxg_lm_head_xent_bf16(const uint16_t* xnf, const uint16_t* head, const int32_t* targets, int N, int D,
                                     int V, float scale, float* losses, float* dxnf, float* dhead, float* chunk,
                                     int Nc, void* stream) {
    ARG_CHECK(N > 0 && D > 0 && V > 0 && Nc > 0 && !(Nc * D % 8) && !(V % 8),
              "mxg_lm_head_xent_bf16: bad shape N %d D %d V %d chunk %d (Nc*D and V multiples of 8)", N, D, V, Nc);
    return head_chunks(xnf, head, 1, targets, N, D, V, scale, losses, dxnf, dhead, chunk, Nc, stream);
}

extern "C" int mxg_lm_head_xent(const float* xnf, const float* head, const int32_t* targets, int N, int D, int V,
                                float scale, float* losses, float* dxnf, float* dhead, float* chunk, int Nc,
                                void* stream) {
    ARG_CHECK(N > 0 && D > 0 && V > 0 && Nc > 0, "mxg_lm_head_xent: bad shape N %d D %d V %d chunk %d", N, D, V, Nc);
    return head_chunks(xnf, head, 0, targets, N, D, V, scale, losses, dxnf, dhead, chunk, Nc, stream);
}
