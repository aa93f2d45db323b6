/*
 * rmsnorm.cu: the GPU twin of src/nn/rmsnorm.c.
 *   y = x * r * w,  r = 1 / sqrt(mean(x^2) + eps)  (the sum of squares in FP64)
 *   dx += r * (dy*w - x * r^2 * mean(dy*w*x)),  dw += sum_n dy * x * r
 * Guarantee: deterministic (fixed-order block sums, no float atomics); dw in
 * the CPU's chunks of 64 tokens.
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

/* ---- RMSNorm --------------------------------------------------------------------- */

#define RMS_THREADS 256
#define RMS_CHUNK 64 /* tokens per partial dw sum: the CPU's chunk (rmsnorm.c) */



/* am (NULL: none): the amax of the outputs as stored into *am (one atomicMax a block; zeroed by the launcher). */
template <typename TO>
__global__ void k_rmsnorm_fwd(TO* out, float* rstd, const float* x, const float* w, int D, float eps, unsigned* am) {
    const float* xr = x + (size_t)blockIdx.x * D;
    TO* o = out + (size_t)blockIdx.x * D;
    double ss = 0.0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) ss += (double)xr[i] * xr[i];
    ss = block_sum_warps_d(ss);
    float r = (float)(1.0 / sqrt(ss / D + (double)eps));
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    unsigned m = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        const float y = (xr[i] * r) * w[i];
        elem_put(o + i, y);
        if (am) m = max(m, stored_abs_bits(TO(), y));
    }
    if (am) block_amax_to(m, am);
}

/* The same forward, a warp per token with 16-byte loads (D % 4 == 0; x, w and out aligned): the FP64 sum of
 * squares in the lanes' order, then the same expressions (out bit for bit k_rmsnorm_fwd's unless the two
 * FP64 sums round to different floats r: the tests' tolerance for rstd). */
#define RMS_FWD_ROWS 8 /* warps (tokens) per block */
__device__ __forceinline__ void rms_put4(float* o, float a, float b, float c, float d) {
    *(float4*)o = make_float4(a, b, c, d);
}
__device__ __forceinline__ void rms_put4(uint16_t* o, float a, float b, float c, float d) {
    *(uint2*)o = pack4_bf16(a, b, c, d);
}
template <typename TO>
__global__ void __launch_bounds__(RMS_FWD_ROWS * 32) k_rmsnorm_fwd_warp(TO* out, float* rstd, const float* x,
                                                                        const float* w, int N, int D, float eps,
                                                                        unsigned* am) {
    const int n = blockIdx.x * RMS_FWD_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31, D4 = D / 4;
    unsigned m = 0;
    if (n < N) { /* (no return: the block's amax below has barriers) */
        const float4* x4 = (const float4*)(x + (size_t)n * D);
        const float4* w4 = (const float4*)w;
        double ss = 0.0;
        for (int i = lane; i < D4; i += 32) {
            const float4 v = x4[i];
            ss += (double)v.x * v.x;
            ss += (double)v.y * v.y;
            ss += (double)v.z * v.z;
            ss += (double)v.w * v.w;
        }
        ss = warp_sum(ss);
        const float r = (float)(1.0 / sqrt(ss / D + (double)eps));
        if (lane == 0) rstd[n] = r;
        TO* o = out + (size_t)n * D;
        for (int i = lane; i < D4; i += 32) {
            const float4 v = x4[i], g = w4[i];
            const float y0 = (v.x * r) * g.x, y1 = (v.y * r) * g.y, y2 = (v.z * r) * g.z, y3 = (v.w * r) * g.w;
            rms_put4(o + 4 * i, y0, y1, y2, y3);
            if (am)
                m = max(max(m, max(stored_abs_bits(TO(), y0), stored_abs_bits(TO(), y1))),
                        max(stored_abs_bits(TO(), y2), stored_abs_bits(TO(), y3)));
        }
    }
    if (am) block_amax_to(m, am);
}

/* am (NULL: none): the outputs' amax word, zeroed here first */
template <typename TO>
int rms_fwd_launch(TO* out, float* rstd, const float* x, const float* w, int N, int D, float eps, float* am,
                   cudaStream_t s) {
    const size_t oal = sizeof(TO) == 4 ? 15 : 7;
    if (am) CU_TRY(cudaMemsetAsync(am, 0, sizeof(float), s));
    if (D % 4 == 0 && !(((uintptr_t)x | (uintptr_t)w) & 15) && !((uintptr_t)out & oal))
        k_rmsnorm_fwd_warp<TO><<<(N + RMS_FWD_ROWS - 1) / RMS_FWD_ROWS, RMS_FWD_ROWS * 32, 0, s>>>(out, rstd, x, w, N, D,
                                                                                                 eps, (unsigned*)am);
    else
        k_rmsnorm_fwd<TO><<<N, RMS_THREADS, 0, s>>>(out, rstd, x, w, D, eps, (unsigned*)am);
    CU_LAUNCHED();
    return MX_OK;
}

/* dx += r (g w - x c), c = mean(g w x) r^2: one block per token. am (NULL: none; in every dx kernel): raised to
 * the largest |dx| bits written (k_amax's: the amax an FP8 cast of dx would compute), one atomicMax a block. */
__global__ void k_rmsnorm_bwd_dx(float* dx, const float* dout, const float* x, const float* w, const float* rstd,
                                 int D, unsigned* am) {
    const size_t row = (size_t)blockIdx.x * D;
    const float* xr = x + row;
    const float* g = dout + row;
    float* d = dx + row;
    const float r = rstd[blockIdx.x];
    double dot = 0.0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) dot += (double)g[i] * w[i] * xr[i];
    dot = block_sum_warps_d(dot);
    const float c = (float)(dot / D) * r * r;
    unsigned m = 0u;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        const float v = d[i] + r * (g[i] * w[i] - xr[i] * c);
        d[i] = v;
        m = max(m, stored_abs_bits(0.0f, v));
    }
    if (am) block_amax_to(m, am);
}

/* The same dx pass a warp per token with 16-byte loads (D % 4 == 0, D / 4 <= 32 V; dx, dout, x, w aligned):
 * the row's dout and x held in registers from the dot to the update (each read once, all of a lane's loads
 * issued together), the dot's FP64 sum in the lanes' order then warp_sum, then k_rmsnorm_bwd_dx's expressions
 * (dx bit for bit its own unless the two FP64 dots round to different floats: as k_rmsnorm_fwd_warp against
 * k_rmsnorm_fwd). A block of 256 threads per token had left dx at ~2.9 TB/s (125m, H200, 2026-12-03). */
#define RMS_DXW_ROWS 8 /* warps (tokens) per block */
template <int V>
__global__ void __launch_bounds__(RMS_DXW_ROWS * 32) k_rmsnorm_bwd_dx_warp(float* __restrict__ dx,
                                                                            const float* __restrict__ dout,
                                                                            const float* __restrict__ x,
                                                                            const float* __restrict__ w,
                                                                            const float* __restrict__ rstd, int N,
                                                                            int D, unsigned* am) {
    const int n = blockIdx.x * RMS_DXW_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31, D4 = D / 4;
    unsigned m = 0u;
    if (n < N) { /* (no return: the block's amax below has barriers) */
        const float4* g4 = (const float4*)(dout + (size_t)n * D);
        const float4* x4 = (const float4*)(x + (size_t)n * D);
        const float4* w4 = (const float4*)w;
        float4 gv[V], xv[V];
#pragma unroll
        for (int j = 0; j < V; j++) {
            const int i = lane + 32 * j;
            gv[j] = xv[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (i < D4) {
                gv[j] = g4[i];
                xv[j] = x4[i];
            }
        }
        double dot = 0.0;
#pragma unroll
        for (int j = 0; j < V; j++) {
            const int i = lane + 32 * j;
            if (i < D4) {
                const float4 wv = __ldg(w4 + i);
                dot += (double)gv[j].x * wv.x * xv[j].x;
                dot += (double)gv[j].y * wv.y * xv[j].y;
                dot += (double)gv[j].z * wv.z * xv[j].z;
                dot += (double)gv[j].w * wv.w * xv[j].w;
            }
        }
        dot = warp_sum(dot);
        const float r = rstd[n], c = (float)(dot / D) * r * r;
        float4* d4 = (float4*)(dx + (size_t)n * D);
#pragma unroll
        for (int j = 0; j < V; j++) {
            const int i = lane + 32 * j;
            if (i < D4) {
                const float4 wv = __ldg(w4 + i);
                float4 dv = d4[i];
                dv.x += r * (gv[j].x * wv.x - xv[j].x * c);
                dv.y += r * (gv[j].y * wv.y - xv[j].y * c);
                dv.z += r * (gv[j].z * wv.z - xv[j].z * c);
                dv.w += r * (gv[j].w * wv.w - xv[j].w * c);
                d4[i] = dv;
                m = max(m, amax_bits(dv));
            }
        }
    }
    if (am) block_amax_to(m, am);
}

/* The dx pass: the warp kernel where its conditions hold (V the smallest of 2, 4, 8, 16 with D / 4 <= 32 V),
 * else a block per token. */
void rms_bwd_dx_launch(float* dx, const float* dout, const float* x, const float* w, const float* rstd, int N, int D,
                       unsigned* am, cudaStream_t s) {
    const int D4 = D / 4, nb = (N + RMS_DXW_ROWS - 1) / RMS_DXW_ROWS, nt = RMS_DXW_ROWS * 32;
    const int ok = D % 4 == 0 && D4 <= 32 * 16 && !(((uintptr_t)dx | (uintptr_t)dout | (uintptr_t)x | (uintptr_t)w) & 15);
    if (ok && D4 <= 64) k_rmsnorm_bwd_dx_warp<2><<<nb, nt, 0, s>>>(dx, dout, x, w, rstd, N, D, am);
    else if (ok && D4 <= 128) k_rmsnorm_bwd_dx_warp<4><<<nb, nt, 0, s>>>(dx, dout, x, w, rstd, N, D, am);
    else if (ok && D4 <= 256) k_rmsnorm_bwd_dx_warp<8><<<nb, nt, 0, s>>>(dx, dout, x, w, rstd, N, D, am);
    else if (ok) k_rmsnorm_bwd_dx_warp<16><<<nb, nt, 0, s>>>(dx, dout, x, w, rstd, N, D, am);
    else k_rmsnorm_bwd_dx<<<N, RMS_THREADS, 0, s>>>(dx, dout, x, w, rstd, D, am);
}

/* part[ch, i] = sum over the chunk's tokens in order of g x r (float, as the CPU). */
__global__ void k_rmsnorm_bwd_dw_part(float* part, const float* dout, const float* x, const float* rstd, int N,
                                      int D) {
    const int i = blockIdx.y * blockDim.x + threadIdx.x, ch = blockIdx.x;
    if (i >= D) return;
    const int n1 = min((ch + 1) * RMS_CHUNK, N);
    float pw = 0.0f;
    for (int n = ch * RMS_CHUNK; n < n1; n++) pw += dout[(size_t)n * D + i] * x[(size_t)n * D + i] * rstd[n];
    part[(size_t)ch * D + i] = pw;
}

/* The backward in one pass over the inputs (dx and dw's chunk partials; D % 4 == 0, D <= 4096): one
 * block per chunk of RMS_CHUNK tokens, RMS_GROUP rows at a time: a warp per row makes its dot (FP64),
 * then the block updates the rows' dx and adds each row to the chunk's dw partials in token order,
 * reading the rows a second time from the cache instead of memory. The expressions and the order of
 * the partial sums are k_rmsnorm_bwd_dx's and k_rmsnorm_bwd_dw_part's (dw bit for bit the same); the dot
 * sums in another order (FP64, then rounded to float: the same dx but for a rare last bit). */
#define RMS_GROUP 8
#define RMS_FUSED_V 4 /* float4 columns per thread: D <= 4 * 4 * RMS_THREADS */
__global__ void __launch_bounds__(RMS_THREADS) k_rmsnorm_bwd_fused(float* __restrict__ dx, float* __restrict__ part,
                                                                   const float* __restrict__ dout,
                                                                   const float* __restrict__ x,
                                                                   const float* __restrict__ w,
                                                                   const float* __restrict__ rstd, int N, int D,
                                                                   unsigned* am) {
    __shared__ float cs[RMS_GROUP];
    unsigned amb = 0u; /* the largest |dx| bits written (the row loop below is m's) */
    const int ch = blockIdx.x, n0 = ch * RMS_CHUNK, n1 = min(n0 + RMS_CHUNK, N);
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, D4 = D / 4;
    const float4* w4 = (const float4*)w;
    float4 pw[RMS_FUSED_V];
#pragma unroll
    for (int j = 0; j < RMS_FUSED_V; j++) pw[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int r0 = n0; r0 < n1; r0 += RMS_GROUP) {
        const int n = r0 + wp;
        if (wp < RMS_GROUP && n < n1) {
            const float4* g4 = (const float4*)(dout + (size_t)n * D);
            const float4* x4 = (const float4*)(x + (size_t)n * D);
            double dot = 0.0;
            for (int i = lane; i < D4; i += 32) {
                const float4 gv = g4[i], wv = w4[i], xv = x4[i];
                dot += (double)gv.x * wv.x * xv.x;
                dot += (double)gv.y * wv.y * xv.y;
                dot += (double)gv.z * wv.z * xv.z;
                dot += (double)gv.w * wv.w * xv.w;
            }
            dot = warp_sum(dot);
            if (lane == 0) cs[wp] = (float)(dot / D);
        }
        __syncthreads();
        const int r1 = min(r0 + RMS_GROUP, n1);
        for (int m = r0; m < r1; m++) {
            const float r = rstd[m], c = cs[m - r0] * r * r;
            const float4* g4 = (const float4*)(dout + (size_t)m * D);
            const float4* x4 = (const float4*)(x + (size_t)m * D);
            float4* d4 = (float4*)(dx + (size_t)m * D);
#pragma unroll
            for (int j = 0; j < RMS_FUSED_V; j++) {
                const int i = threadIdx.x + j * RMS_THREADS;
                if (i >= D4) break;
                const float4 gv = g4[i], xv = x4[i], wv = w4[i];
                float4 dv = d4[i];
                dv.x += r * (gv.x * wv.x - xv.x * c);
                dv.y += r * (gv.y * wv.y - xv.y * c);
                dv.z += r * (gv.z * wv.z - xv.z * c);
                dv.w += r * (gv.w * wv.w - xv.w * c);
                d4[i] = dv;
                amb = max(amb, amax_bits(dv));
                pw[j].x += gv.x * xv.x * r;
                pw[j].y += gv.y * xv.y * r;
                pw[j].z += gv.z * xv.z * r;
                pw[j].w += gv.w * xv.w * r;
            }
        }
        __syncthreads();
    }
    float4* p4 = (float4*)(part + (size_t)ch * D);
#pragma unroll
    for (int j = 0; j < RMS_FUSED_V; j++) {
        const int i = threadIdx.x + j * RMS_THREADS;
        if (i < D4) p4[i] = pw[j];
    }
    if (am) block_amax_to(amb, am);
}

/* 0: the two-pass kernels (the default), 1: the one-pass backward where it applies (mxg_rmsnorm_config).
 * Measured on the H200 (layers --bench, N 8192, D 768, 2026-12-02): one pass 0.080 ms, two passes 0.057 ms
 * (one block of 8 warps per 64 tokens keeps too few loads in flight), so two passes stay the default. */
int g_rms_fused = 0;

/* dw[i] += the chunks' partials in chunk order (the CPU's); the loads 16 at a time before their adds (one
 * thread per column: each add waits on the last, the loads need not). */
#define RMS_SUM_BATCH 16
__global__ void k_rmsnorm_bwd_dw_sum(float* dw, const float* part, int nch, int D) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= D) return;
    float acc = dw[i];
    int ch = 0;
    for (; ch + RMS_SUM_BATCH <= nch; ch += RMS_SUM_BATCH) {
        float v[RMS_SUM_BATCH];
#pragma unroll
        for (int j = 0; j < RMS_SUM_BATCH; j++) v[j] = part[(size_t)(ch + j) * D + i];
#pragma unroll
        for (int j = 0; j < RMS_SUM_BATCH; j++) acc += v[j];
    }
    for (; ch < nch; ch++) acc += part[(size_t)ch * D + i];
    dw[i] = acc;
}

}  // namespace

extern "C" int mxg_rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int D, float eps,
                                   void* stream) {
    ARG_CHECK(N > 0 && D > 0, "mxg_rmsnorm_forward: bad shape N %d D %d", N, D);
    return rms_fwd_launch<float>(out, rstd, x, w, N, D, eps, NULL, MXG_STREAM(stream));
}

extern "C" int mxg_rmsnorm_forward_bf16(uint16_t* out, float* rstd, const float* x, const float* w, int N, int D,
                                        float eps, void* stream) {
    ARG_CHECK(N > 0 && D > 0, "mxg_rmsnorm_forward_bf16: bad shape N %d D %d", N, D);
    return rms_fwd_launch<uint16_t>(out, rstd, x, w, N, D, eps, NULL, MXG_STREAM(stream));
}

extern "C" int mxg_rmsnorm_forward_amax(float* out, float* rstd, const float* x, const float* w, int N, int D,
                                        float eps, float* amax, void* stream) {
    ARG_CHECK(N > 0 && D > 0 && amax, "mxg_rmsnorm_forward_amax: bad shape N %d D %d or no amax", N, D);
    return rms_fwd_launch<float>(out, rstd, x, w, N, D, eps, amax, MXG_STREAM(stream));
}

extern "C" int mxg_rmsnorm_forward_bf16_amax(uint16_t* out, float* rstd, const float* x, const float* w, int N, int D,
                                             float eps, float* amax, void* stream) {
    ARG_CHECK(N > 0 && D > 0 && amax, "mxg_rmsnorm_forward_bf16_amax: bad shape N %d D %d or no amax", N, D);
    return rms_fwd_launch<uint16_t>(out, rstd, x, w, N, D, eps, amax, MXG_STREAM(stream));
}

extern "C" int mxg_rmsnorm_config(int fused) {
    ARG_CHECK(fused == 0 || fused == 1, "mxg_rmsnorm_config: fused %d (0 or 1)", fused);
    g_rms_fused = fused;
    return MX_OK;
}

extern "C" size_t mxg_rmsnorm_backward_workspace(int N, int D) {
    return (size_t)((N + RMS_CHUNK - 1) / RMS_CHUNK) * (size_t)D;
}

/* am (NULL: none): dx's amax word, zeroed here first */
static int rms_bwd(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd, int N,
                   int D, float* ws, unsigned* am, cudaStream_t s) {
    if (am) CU_TRY(cudaMemsetAsync(am, 0, sizeof(unsigned), s));
    const int nch = (N + RMS_CHUNK - 1) / RMS_CHUNK;
    const int fused = g_rms_fused && D % 4 == 0 && D <= 4 * RMS_FUSED_V * RMS_THREADS &&
                      !(((uintptr_t)dx | (uintptr_t)dout | (uintptr_t)x | (uintptr_t)w | (uintptr_t)ws) & 15);
    if (fused) {
        k_rmsnorm_bwd_fused<<<nch, RMS_THREADS, 0, s>>>(dx, ws, dout, x, w, rstd, N, D, am);
        CU_LAUNCHED();
    } else {
        rms_bwd_dx_launch(dx, dout, x, w, rstd, N, D, am, s);
        CU_LAUNCHED();
        k_rmsnorm_bwd_dw_part<<<dim3((unsigned)nch, blocks_for(D, 128)), 128, 0, s>>>(ws, dout, x, rstd, N, D);
        CU_LAUNCHED();
    }
    k_rmsnorm_bwd_dw_sum<<<blocks_for(D, 128), 128, 0, s>>>(dw, ws, nch, D);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                                    const float* rstd, int N, int D, float* ws, void* stream) {
    ARG_CHECK(N > 0 && D > 0 && ws, "mxg_rmsnorm_backward: bad shape N %d D %d or no workspace", N, D);
    return rms_bwd(dx, dw, dout, x, w, rstd, N, D, ws, NULL, MXG_STREAM(stream));
}

extern "C" int mxg_rmsnorm_backward_amax(float* dx, float* dw, const float* dout, const float* x, const float* w,
                                         const float* rstd, int N, int D, float* ws, float* amax, void* stream) {
    ARG_CHECK(N > 0 && D > 0 && ws && amax, "mxg_rmsnorm_backward_amax: bad shape N %d D %d, no workspace or no amax",
              N, D);
    return rms_bwd(dx, dw, dout, x, w, rstd, N, D, ws, (unsigned*)amax, MXG_STREAM(stream));
}
