/*
 * attention.cu: causal GQA attention in FP32 SIMT kernels (CUDA cores,
 * flash-style: the scores are never stored, the log-sum-exp per query is
 * kept), a GPU twin of src/nn/attention.c (attention_gemm.cu is the other:
 * cuBLASLt batched GEMMs).
 *   forward   o_t = sum_{j <= t} softmax_j(q_t . k_j * scale) v_j   (online softmax)
 *   backward  delta_t = do_t . o_t;  p = exp(s - lse);  ds = p (do_t . v_j - delta_t) scale;
 *             dq_t = sum_j ds k_j;  dk_j = sum_t ds q_t;  dv_j = sum_t p do_t
 * Guarantee: deterministic (every sum in a fixed order, no atomics); equal to
 * the CPU up to the summation order of the softmax (tolerance: tests/gpu).
 *
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

/* ---- attention ------------------------------------------------------------------- */

#define ATT_QW 8  /* warps per block: query rows (forward, dq) or key rows (dk, dv) */
#define ATT_KT 32 /* keys (forward, dq) or queries (dk, dv) per shared-memory tile: one per lane */

/* q . k in the CPU's order (i = 0 .. hd-1, from 0.0f). */
template <int HD>
__device__ __forceinline__ float dot_hd(const float* a, const float* b) {
    float acc = 0.0f;
#pragma unroll 8
    for (int i = 0; i < HD; i++) acc += a[i] * b[i];
    return acc;
}

/* Forward: block (query tile of ATT_QW, b*H + h); warp w owns query t = tile*ATT_QW + w;
 * lane l scores key j0 + l of each tile; the output dims lane + 32 r live in registers. */
/* K and V rows j0 .. j0 + ATT_KT - 1 of sequence b, KV head kh (row stride ks), into the block's tiles
 * (zero past T): the forward's and dq's tile loop. */
template <int HD>
__device__ __forceinline__ void load_kv_tile(float (*Ks)[HD + 1], float (*Vs)[HD + 1], const float* k, const float* v,
                                             int b, int T, int j0, int ks, int kh) {
    for (int e = threadIdx.x; e < ATT_KT * HD; e += blockDim.x) {
        const int jj = e / HD, i = e % HD, j = j0 + jj;
        const size_t src = (size_t)(b * T + j) * ks + kh * HD + i;
        Ks[jj][i] = j < T ? k[src] : 0.0f;
        Vs[jj][i] = j < T ? v[src] : 0.0f;
    }
}

template <int R>
__global__ void __launch_bounds__(ATT_QW * 32) k_attn_fwd(float* out, float* lse, const float* q, const float* k,
                                                         const float* v, int T, int H, int KV, float scale) {
    constexpr int HD = 32 * R;
    __shared__ float Ks[ATT_KT][HD + 1];
    __shared__ float Vs[ATT_KT][HD + 1];
    __shared__ float Qs[ATT_QW][HD];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int bh = blockIdx.y, b = bh / H, h = bh % H, kh = h / (H / KV);
    const int qs = H * HD, ks = KV * HD;
    const int t0 = blockIdx.x * ATT_QW, t = t0 + warp, tlast = min(t0 + ATT_QW, T) - 1;
    if (t < T)
        for (int i = lane; i < HD; i += 32) Qs[warp][i] = q[(size_t)(b * T + t) * qs + h * HD + i];
    float m = -INFINITY, l = 0.0f, o[R];
#pragma unroll
    for (int r = 0; r < R; r++) o[r] = 0.0f;
    for (int j0 = 0; j0 <= tlast; j0 += ATT_KT) {
        __syncthreads(); /* the previous tile is no longer read (and Qs is written) */
        load_kv_tile<HD>(Ks, Vs, k, v, b, T, j0, ks, kh);
        __syncthreads();
        if (t >= T || j0 > t) continue; /* the whole warp: t is per warp */
        const int j = j0 + lane;
        float s = -INFINITY;
        if (j <= t) s = dot_hd<HD>(Qs[warp], Ks[lane]) * scale;
        const float mnew = fmaxf(m, warp_max(s)); /* finite: key j0 <= t is in the tile */
        const float p = j <= t ? expf(s - mnew) : 0.0f;
        const float alpha = expf(m - mnew); /* 0 on the first tile (m = -inf) */
        l = l * alpha + warp_sum(p);
#pragma unroll
        for (int r = 0; r < R; r++) o[r] *= alpha;
        const int jn = min(ATT_KT, t - j0 + 1);
        for (int jj = 0; jj < jn; jj++) {
            const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
            for (int r = 0; r < R; r++) o[r] += pj * Vs[jj][lane + 32 * r];
        }
        m = mnew;
    }
    if (t >= T) return;
    const float inv = 1.0f / l;
#pragma unroll
    for (int r = 0; r < R; r++) out[(size_t)(b * T + t) * qs + h * HD + lane + 32 * r] = o[r] * inv;
    if (lane == 0) lse[(size_t)bh * T + t] = m + logf(l);
}

/* delta[b, h, t] = dout_t . out_t (a warp per row, fixed butterfly). */
template <int R>
__global__ void k_attn_delta(float* delta, const float* dout, const float* out, int B, int T, int H) {
    constexpr int HD = 32 * R;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= B * H * T) return;
    const int t = row % T, bh = row / T, b = bh / H, h = bh % H;
    const size_t base = (size_t)(b * T + t) * H * HD + h * HD;
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < R; r++) s += dout[base + lane + 32 * r] * out[base + lane + 32 * r];
    s = warp_sum(s);
    if (lane == 0) delta[row] = s;
}

/* dq: as the forward, with p = exp(s - lse), dp = dout_t . v_j, ds = p (dp - delta) scale,
 * dq_t = sum_j ds_j k_j (overwritten). */
template <int R>
__global__ void __launch_bounds__(ATT_QW * 32) k_attn_bwd_dq(float* dq, const float* dout, const float* lse,
                                                            const float* delta, const float* q, const float* k,
                                                            const float* v, int T, int H, int KV, float scale) {
    constexpr int HD = 32 * R;
    __shared__ float Ks[ATT_KT][HD + 1];
    __shared__ float Vs[ATT_KT][HD + 1];
    __shared__ float Qs[ATT_QW][HD];
    __shared__ float Gs[ATT_QW][HD]; /* dout rows */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int bh = blockIdx.y, b = bh / H, h = bh % H, kh = h / (H / KV);
    const int qs = H * HD, ks = KV * HD;
    const int t0 = blockIdx.x * ATT_QW, t = t0 + warp, tlast = min(t0 + ATT_QW, T) - 1;
    float L = 0.0f, Dt = 0.0f;
    if (t < T) {
        for (int i = lane; i < HD; i += 32) {
            Qs[warp][i] = q[(size_t)(b * T + t) * qs + h * HD + i];
            Gs[warp][i] = dout[(size_t)(b * T + t) * qs + h * HD + i];
        }
        L = lse[(size_t)bh * T + t];
        Dt = delta[(size_t)bh * T + t];
    }
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    for (int j0 = 0; j0 <= tlast; j0 += ATT_KT) {
        __syncthreads();
        load_kv_tile<HD>(Ks, Vs, k, v, b, T, j0, ks, kh);
        __syncthreads();
        if (t >= T || j0 > t) continue;
        const int j = j0 + lane;
        float ds = 0.0f;
        if (j <= t) {
            const float p = expf(dot_hd<HD>(Qs[warp], Ks[lane]) * scale - L);
            const float dp = dot_hd<HD>(Gs[warp], Vs[lane]);
            ds = p * (dp - Dt) * scale;
        }
        const int jn = min(ATT_KT, t - j0 + 1);
        for (int jj = 0; jj < jn; jj++) {
            const float d = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] += d * Ks[jj][lane + 32 * r];
        }
    }
    if (t >= T) return;
#pragma unroll
    for (int r = 0; r < R; r++) dq[(size_t)(b * T + t) * qs + h * HD + lane + 32 * r] = acc[r];
}

/* dk, dv: block (key tile of ATT_QW, b*KV + kh); warp w owns key j; for each query head
 * of the group (in order) and each tile of ATT_KT queries t >= j (in order), lane l takes
 * query t0 + l: dv_j += p dout_t, dk_j += ds q_t (overwritten at the end). */
template <int R>
__global__ void __launch_bounds__(ATT_QW * 32) k_attn_bwd_dkv(float* dk, float* dv, const float* dout,
                                                             const float* lse, const float* delta, const float* q,
                                                             const float* k, const float* v, int T, int H, int KV,
                                                             float scale) {
    constexpr int HD = 32 * R;
    __shared__ float Qs[ATT_KT][HD + 1];
    __shared__ float Gs[ATT_KT][HD + 1];
    __shared__ float Ls[ATT_KT], Ds[ATT_KT];
    __shared__ float Kw[ATT_QW][HD], Vw[ATT_QW][HD];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int bk = blockIdx.y, b = bk / KV, kh = bk % KV, G = H / KV;
    const int qs = H * HD, ks = KV * HD;
    const int jfirst = blockIdx.x * ATT_QW, j = jfirst + warp;
    if (j < T)
        for (int i = lane; i < HD; i += 32) {
            Kw[warp][i] = k[(size_t)(b * T + j) * ks + kh * HD + i];
            Vw[warp][i] = v[(size_t)(b * T + j) * ks + kh * HD + i];
        }
    float gk[R], gv[R];
#pragma unroll
    for (int r = 0; r < R; r++) gk[r] = gv[r] = 0.0f;
    for (int h = kh * G; h < (kh + 1) * G; h++) {
        const size_t bh = (size_t)b * H + h;
        for (int t0 = jfirst; t0 < T; t0 += ATT_KT) {
            __syncthreads();
            for (int e = threadIdx.x; e < ATT_KT * HD; e += blockDim.x) {
                const int tt = e / HD, i = e % HD, t = t0 + tt;
                const size_t src = (size_t)(b * T + t) * qs + h * HD + i;
                Qs[tt][i] = t < T ? q[src] : 0.0f;
                Gs[tt][i] = t < T ? dout[src] : 0.0f;
            }
            if (threadIdx.x < ATT_KT) {
                const int t = t0 + threadIdx.x;
                Ls[threadIdx.x] = t < T ? lse[bh * T + t] : 0.0f;
                Ds[threadIdx.x] = t < T ? delta[bh * T + t] : 0.0f;
            }
            __syncthreads();
            if (j >= T || t0 + ATT_KT - 1 < j) continue; /* no query of the tile sees key j */
            const int t = t0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (t < T && t >= j) {
                p = expf(dot_hd<HD>(Qs[lane], Kw[warp]) * scale - Ls[lane]);
                const float dp = dot_hd<HD>(Gs[lane], Vw[warp]);
                ds = p * (dp - Ds[lane]) * scale;
            }
            const int tt0 = max(0, j - t0), tt1 = min(ATT_KT, T - t0);
            for (int tt = tt0; tt < tt1; tt++) {
                const float pt = __shfl_sync(0xffffffffu, p, tt), dt = __shfl_sync(0xffffffffu, ds, tt);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    gv[r] += pt * Gs[tt][lane + 32 * r];
                    gk[r] += dt * Qs[tt][lane + 32 * r];
                }
            }
        }
    }
    if (j >= T) return;
#pragma unroll
    for (int r = 0; r < R; r++) {
        dk[(size_t)(b * T + j) * ks + kh * HD + lane + 32 * r] = gk[r];
        dv[(size_t)(b * T + j) * ks + kh * HD + lane + 32 * r] = gv[r];
    }
}

}  // namespace

static int attn_check(const char* fn, int B, int T, int H, int KV, int hd) {
    ARG_CHECK(B > 0 && T > 0 && H > 0 && KV > 0 && H % KV == 0, "%s: bad shape B %d T %d H %d KV %d", fn, B, T, H, KV);
    ARG_CHECK(hd % 32 == 0 && hd >= 32 && hd <= 128, "%s: head dim %d not supported (a multiple of 32, <= 128)", fn,
              hd);
    ARG_CHECK((long long)B * H <= 65535 && (long long)B * KV <= 65535, "%s: B*H %d too large for the grid", fn, B * H);
    return MX_OK;
}

extern "C" int mxg_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int B,
                                     int T, int H, int KV, int hd, void* stream) {
    int rc = attn_check("mxg_attention_forward", B, T, H, KV, hd);
    if (rc) return rc;
    const float scale = 1.0f / sqrtf((float)hd);
    dim3 grid(blocks_for(T, ATT_QW), (unsigned)(B * H));
    cudaStream_t s = MXG_STREAM(stream);
    switch (hd / 32) {
    case 1: k_attn_fwd<1><<<grid, ATT_QW * 32, 0, s>>>(out, lse, q, k, v, T, H, KV, scale); break;
    case 2: k_attn_fwd<2><<<grid, ATT_QW * 32, 0, s>>>(out, lse, q, k, v, T, H, KV, scale); break;
    case 3: k_attn_fwd<3><<<grid, ATT_QW * 32, 0, s>>>(out, lse, q, k, v, T, H, KV, scale); break;
    default: k_attn_fwd<4><<<grid, ATT_QW * 32, 0, s>>>(out, lse, q, k, v, T, H, KV, scale); break;
    }
    CU_LAUNCHED();
    return MX_OK;
}

template <int R>
static void attn_bwd_launch(float* dq, float* dk, float* dv, float* delta, const float* dout, const float* out,
                            const float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                            int KV, float scale, cudaStream_t s) {
    const int rows = B * H * T;
    k_attn_delta<R><<<blocks_for(rows, 8), 256, 0, s>>>(delta, dout, out, B, T, H);
    k_attn_bwd_dq<R><<<dim3(blocks_for(T, ATT_QW), (unsigned)(B * H)), ATT_QW * 32, 0, s>>>(dq, dout, lse, delta, q, k,
                                                                                          v, T, H, KV, scale);
    k_attn_bwd_dkv<R><<<dim3(blocks_for(T, ATT_QW), (unsigned)(B * KV)), ATT_QW * 32, 0, s>>>(dk, dv, dout, lse, delta,
                                                                                            q, k, v, T, H, KV, scale);
}

extern "C" int mxg_attention_backward(float* dq, float* dk, float* dv, float* delta, const float* dout,
                                      const float* out, const float* lse, const float* q, const float* k,
                                      const float* v, int B, int T, int H, int KV, int hd, void* stream) {
    int rc = attn_check("mxg_attention_backward", B, T, H, KV, hd);
    if (rc) return rc;
    const float scale = 1.0f / sqrtf((float)hd);
    cudaStream_t s = MXG_STREAM(stream);
    switch (hd / 32) {
    case 1: attn_bwd_launch<1>(dq, dk, dv, delta, dout, out, lse, q, k, v, B, T, H, KV, scale, s); break;
    case 2: attn_bwd_launch<2>(dq, dk, dv, delta, dout, out, lse, q, k, v, B, T, H, KV, scale, s); break;
    case 3: attn_bwd_launch<3>(dq, dk, dv, delta, dout, out, lse, q, k, v, B, T, H, KV, scale, s); break;
    default: attn_bwd_launch<4>(dq, dk, dv, delta, dout, out, lse, q, k, v, B, T, H, KV, scale, s); break;
    }
    CU_LAUNCHED();
    return MX_OK;
}
