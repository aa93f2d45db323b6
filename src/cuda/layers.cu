/*
 * layers.cu: the GPU twins of the CPU model layers and of AdamW
 * (include/mxlm/gpu_model.h). First version: FP32 activations, correctness
 * and determinism first, one plain kernel per step in the llm.c style.
 *
 * Compiled with --fmad=false (mk/cuda.mk): an add and a multiply are never
 * contracted into an FMA, so an expression written in the CPU's order rounds
 * exactly as the CPU's (built without FMA contraction: C11, x86-64-v2).
 * No floating-point atomics: every reduction has a fixed order.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "cuda/common.cuh"
#include "mxlm/gpu_model.h"

namespace {

/* Blocks of a 1-D grid over n elements (n > 0). */
inline unsigned blocks_for(size_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

/* ---- fixed-order reductions -------------------------------------------------- */

__device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ double warp_sum_d(double x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. A fixed tree: the same bits on every run. */
__device__ double block_sum_d(double x) {
    __shared__ double part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x = warp_sum_d(x);
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0) part[warp] = x;
    __syncthreads();
    double y = lane < nw ? part[lane] : 0.0;
    return warp_sum_d(y);
}
__device__ float block_max(float x) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x = warp_max(x);
    __syncthreads();
    if (lane == 0) part[warp] = x;
    __syncthreads();
    float y = lane < nw ? part[lane] : -INFINITY;
    return warp_max(y);
}

/* ---- embedding ------------------------------------------------------------------- */

__global__ void k_embed_fwd(float* out, const int32_t* tokens, const float* table, int N, int D) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * D) return;
    size_t n = i / D, c = i % D;
    out[i] = table[(size_t)tokens[n] * D + c];
}

/* Workspace of the backward (ints): count[V], start[V], fill[V], pos[N], sorted[N]. */
__global__ void k_embed_count(int* count, const int32_t* tokens, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) atomicAdd(&count[tokens[n]], 1); /* integer: the result does not depend on order */
}

/* Exclusive prefix sum of count [V] into start [V], one block of 1024: each
 * thread scans a contiguous span, then the span totals are scanned. */
__global__ void k_exclusive_scan(int* start, const int* count, int V) {
    __shared__ int tot[1024];
    const int t = threadIdx.x, span = (V + 1023) / 1024;
    const int a = t * span, b = min(a + span, V);
    int s = 0;
    for (int i = a; i < b; i++) s += count[i];
    tot[t] = s;
    __syncthreads();
    if (t == 0) {
        int run = 0;
        for (int i = 0; i < 1024; i++) { int c = tot[i]; tot[i] = run; run += c; }
    }
    __syncthreads();
    int run = tot[t];
    for (int i = a; i < b; i++) { start[i] = run; run += count[i]; }
}

/* Put every position into its token's bucket (any order inside it). */
__global__ void k_embed_place(int* pos, int* fill, const int* start, const int32_t* tokens, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int v = tokens[n];
    pos[start[v] + atomicAdd(&fill[v], 1)] = n;
}

/* Order each bucket by position: the rank of n is the number of smaller
 * positions in its bucket (positions are distinct: a unique, deterministic result). */
__global__ void k_embed_rank(int* sorted, const int* pos, const int* start, const int* count, const int32_t* tokens,
                             int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int v = tokens[n], s = start[v], c = count[v], r = 0;
    for (int i = 0; i < c; i++) r += pos[s + i] < n;
    sorted[s + r] = n;
}

/* One block per (bucket head i, column tile): dtable[v][c] += dout[n][c] for
 * the bucket's positions in increasing order (the CPU's sequence of adds). */
__global__ void k_embed_accum(float* dtable, const float* dout, const int* sorted, const int* start, const int* count,
                              const int32_t* tokens, int N, int D) {
    int i = blockIdx.x;
    int v = tokens[sorted[i]];
    if (start[v] != i) return; /* not the head of its bucket */
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= D) return;
    float acc = dtable[(size_t)v * D + c];
    for (int j = i; j < i + count[v]; j++) acc += dout[(size_t)sorted[j] * D + c];
    dtable[(size_t)v * D + c] = acc;
}

/* ---- RMSNorm --------------------------------------------------------------------- */

#define RMS_THREADS 256
#define RMS_CHUNK 64 /* tokens per partial dw sum: the CPU's chunk (rmsnorm.c) */

__global__ void k_rmsnorm_fwd(float* out, float* rstd, const float* x, const float* w, int D, float eps) {
    const float* xr = x + (size_t)blockIdx.x * D;
    float* o = out + (size_t)blockIdx.x * D;
    double ss = 0.0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) ss += (double)xr[i] * xr[i];
    ss = block_sum_d(ss);
    float r = (float)(1.0 / sqrt(ss / D + (double)eps));
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int i = threadIdx.x; i < D; i += blockDim.x) o[i] = (xr[i] * r) * w[i];
}

/* dx += r (g w - x c), c = mean(g w x) r^2: one block per token. */
__global__ void k_rmsnorm_bwd_dx(float* dx, const float* dout, const float* x, const float* w, const float* rstd,
                                 int D) {
    const size_t row = (size_t)blockIdx.x * D;
    const float* xr = x + row;
    const float* g = dout + row;
    float* d = dx + row;
    const float r = rstd[blockIdx.x];
    double dot = 0.0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) dot += (double)g[i] * w[i] * xr[i];
    dot = block_sum_d(dot);
    const float c = (float)(dot / D) * r * r;
    for (int i = threadIdx.x; i < D; i += blockDim.x) d[i] += r * (g[i] * w[i] - xr[i] * c);
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

__global__ void k_rmsnorm_bwd_dw_sum(float* dw, const float* part, int nch, int D) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= D) return;
    float acc = dw[i];
    for (int ch = 0; ch < nch; ch++) acc += part[(size_t)ch * D + i];
    dw[i] = acc;
}

/* ---- RoPE ----------------------------------------------------------------------- */

/* One thread per rotated pair (n, head, i < hd/2); dir +1 forward, -1 backward. */
__global__ void k_rope(float* x, const float* cos_t, const float* sin_t, int N, int T, int nh, int hd, int dir) {
    const int h2 = hd / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * nh * h2) return;
    const int i = (int)(idx % h2);
    const size_t nhh = idx / h2; /* n * nh + head */
    const int n = (int)(nhh / nh);
    const float c = cos_t[(size_t)(n % T) * h2 + i], s = sin_t[(size_t)(n % T) * h2 + i];
    float* p = x + nhh * hd;
    const float a = p[i], b = p[i + h2];
    if (dir > 0) {
        p[i] = a * c - b * s;
        p[i + h2] = b * c + a * s;
    } else {
        p[i] = a * c + b * s;
        p[i + h2] = b * c - a * s;
    }
}

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
        for (int e = threadIdx.x; e < ATT_KT * HD; e += blockDim.x) {
            const int jj = e / HD, i = e % HD, j = j0 + jj;
            const size_t src = (size_t)(b * T + j) * ks + kh * HD + i;
            Ks[jj][i] = j < T ? k[src] : 0.0f;
            Vs[jj][i] = j < T ? v[src] : 0.0f;
        }
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
        for (int e = threadIdx.x; e < ATT_KT * HD; e += blockDim.x) {
            const int jj = e / HD, i = e % HD, j = j0 + jj;
            const size_t src = (size_t)(b * T + j) * ks + kh * HD + i;
            Ks[jj][i] = j < T ? k[src] : 0.0f;
            Vs[jj][i] = j < T ? v[src] : 0.0f;
        }
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

/* ---- SwiGLU, add ------------------------------------------------------------------ */

__global__ void k_swiglu_fwd(float* h, const float* gate, const float* up, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i], sg = 1.0f / (1.0f + expf(-g));
    h[i] = g * sg * up[i];
}

__global__ void k_swiglu_bwd(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i], sg = 1.0f / (1.0f + expf(-g)), silu = g * sg;
    dup[i] = dh[i] * silu;
    dgate[i] = dh[i] * up[i] * sg * (1.0f + g * (1.0f - sg));
}

__global__ void k_add(float* y, const float* a, const float* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] + b[i];
}

/* ---- cross-entropy (one block per row) ------------------------------------------------ */

#define XENT_THREADS 1024

/* mode 0: probabilities in place (mx_xent_forward); 1: dlogits = (p - onehot) * scale. */
__global__ void __launch_bounds__(XENT_THREADS) k_xent(float* logits, float* losses, const int32_t* targets, int V,
                                                       float scale, int mode) {
    float* z = logits + (size_t)blockIdx.x * V;
    const int tgt = targets[blockIdx.x];
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, z[i]);
    mx = block_max(mx);
    const float zt = z[tgt] - mx;
    double sum = 0.0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += (double)expf(z[i] - mx);
    sum = block_sum_d(sum);
    const float inv = (float)(1.0 / sum);
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        const float p = expf(z[i] - mx) * inv;
        z[i] = mode ? (p - (i == tgt ? 1.0f : 0.0f)) * scale : p;
    }
    if (threadIdx.x == 0) losses[blockIdx.x] = (float)(log(sum) - (double)zt);
}

__global__ void k_xent_bwd(float* probs, const int32_t* targets, int V, float scale) {
    float* p = probs + (size_t)blockIdx.x * V;
    const int tgt = targets[blockIdx.x];
    for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] = (i == tgt ? p[i] - 1.0f : p[i]) * scale;
}

__global__ void k_mean(float* out, const float* x, int n) {
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i];
    s = block_sum_d(s);
    if (threadIdx.x == 0) *out = (float)(s / n);
}

/* ---- optimizer ------------------------------------------------------------------- */

#define SS_CHUNK 4096 /* mx_sum_squares's chunk (adamw.c) */

/* One thread per chunk, sequential in FP64: the CPU's partial, bit for bit. */
__global__ void k_sumsq_part(double* part, const float* g, size_t n, size_t nch) {
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= nch) return;
    const size_t i1 = (c + 1) * SS_CHUNK < n ? (c + 1) * SS_CHUNK : n;
    double s = 0.0;
    for (size_t i = c * SS_CHUNK; i < i1; i++) s += (double)g[i] * g[i];
    part[c] = s;
}

/* One block of 1024: thread t adds partials t, t+1024, ... in order, then a fixed tree. */
__global__ void k_sumsq_final(double* out, const double* part, size_t nch) {
    double s = 0.0;
    for (size_t c = threadIdx.x; c < nch; c += blockDim.x) s += part[c];
    s = block_sum_d(s);
    if (threadIdx.x == 0) *out = s;
}

__global__ void k_adamw(float* p, const float* g, float* mm, float* vv, size_t n, float b1, float b2, float eps,
                        float flr, float decay, float bc1, float bc2, float gscale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gi = g[i] * gscale;
    const float mi = b1 * mm[i] + (1.0f - b1) * gi;
    const float vi = b2 * vv[i] + (1.0f - b2) * gi * gi;
    mm[i] = mi;
    vv[i] = vi;
    const float mhat = mi / bc1, vhat = vi / bc2;
    p[i] = p[i] * decay - flr * mhat / (sqrtf(vhat) + eps);
}

/* ---- FP32 GEMM through cuBLASLt (own handle; gemm.cu's plans are for BF16/FP8) ---- */


struct SPlan {
    int ta, tb, M, N, K, lda, ldb, ldc;
    int bf16;   /* 1: A and B are BF16 (FP32 accumulation and output) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};
cublasLtHandle_t g_slt = NULL;
void* g_sws = NULL;
const size_t g_sws_size = 32u << 20;
SPlan g_splans[64]; /* a model step uses ~25 shapes */
int g_nsplans = 0;

void splan_destroy(SPlan* p) {
    cublasLtMatmulDescDestroy(p->op);
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
}

/* Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T: cuBLASLt's
 * A is our B (stored [K,N] row-major = [N,K] col-major: no transpose; stored [N,K]: T),
 * its B is our A (stored [M,K] = [K,M] col-major: N; stored [K,M]: T). */
int splan_make(SPlan* p, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, int bf16) {
    memset(p, 0, sizeof *p);
    p->ta = ta; p->tb = tb; p->M = M; p->N = N; p->K = K; p->lda = lda; p->ldb = ldb; p->ldc = ldc; p->bf16 = bf16;
    const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    LT_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->la, in, tb ? K : N, tb ? N : K, ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, in, ta ? M : K, ta ? K : M, lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, N, M, ldc));
    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = g_sws_size;
    uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE; /* no split-K: one fixed order per output */
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red);
    /* algorithms valid for 16-byte aligned pointers (row offsets of chunks), not only 256 */
    const cublasLtMatmulPreferenceAttributes_t al[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t align = 16;
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, al[i], &align, sizeof align);
    cublasLtMatmulHeuristicResult_t res[1];
    int nres = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(g_slt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || nres < 1) {
        splan_destroy(p);
        return mx_fail(MX_EINVAL, "cuBLASLt has no FP32 algorithm for %s%s M %d N %d K %d: status %d", ta ? "T" : "N",
                       tb ? "T" : "N", M, N, K, (int)st);
    }
    p->algo = res[0].algo;
    return MX_OK;
}

int splan_get(SPlan** out, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, int bf16) {
    if (!g_slt) {
        LT_TRY(cublasLtCreate(&g_slt));
        CU_TRY(cudaMalloc(&g_sws, g_sws_size));
    }
    for (int i = 0; i < g_nsplans; i++) {
        SPlan* p = &g_splans[i];
        if (p->ta == ta && p->tb == tb && p->M == M && p->N == N && p->K == K && p->lda == lda && p->ldb == ldb &&
            p->ldc == ldc && p->bf16 == bf16) {
            *out = p;
            return MX_OK;
        }
    }
    if (g_nsplans == 64) { /* evict the oldest */
        splan_destroy(&g_splans[0]);
        memmove(&g_splans[0], &g_splans[1], sizeof(SPlan) * 63);
        g_nsplans--;
    }
    int rc = splan_make(&g_splans[g_nsplans], ta, tb, M, N, K, lda, ldb, ldc, bf16);
    if (rc) return rc;
    *out = &g_splans[g_nsplans++];
    return MX_OK;
}

}  // namespace

/* ---- API --------------------------------------------------------------------------- */

#define ARG_CHECK(cond, ...) do { if (!(cond)) return mx_fail(MX_EINVAL, __VA_ARGS__); } while (0)

extern "C" int mxg_embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D,
                                     void* stream) {
    ARG_CHECK(N > 0 && D > 0, "mxg_embedding_forward: bad shape N %d D %d", N, D);
    k_embed_fwd<<<blocks_for((size_t)N * D, 256), 256, 0, MXG_STREAM(stream)>>>(out, tokens, table, N, D);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" size_t mxg_embedding_backward_workspace(int N, int V) {
    return sizeof(int) * (3 * (size_t)V + 2 * (size_t)N);
}

extern "C" int mxg_embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D, int V,
                                      void* ws, size_t ws_bytes, void* stream) {
    ARG_CHECK(N > 0 && D > 0 && V > 0, "mxg_embedding_backward: bad shape N %d D %d V %d", N, D, V);
    ARG_CHECK(ws && ws_bytes >= mxg_embedding_backward_workspace(N, V), "mxg_embedding_backward: workspace too small");
    cudaStream_t s = MXG_STREAM(stream);
    int* count = (int*)ws;  /* [V] */
    int* start = count + V; /* [V] */
    int* fill = start + V;  /* [V] */
    int* pos = fill + V;    /* [N] */
    int* sorted = pos + N;  /* [N] */
    CU_TRY(cudaMemsetAsync(count, 0, sizeof(int) * (size_t)V, s));
    CU_TRY(cudaMemsetAsync(fill, 0, sizeof(int) * (size_t)V, s));
    k_embed_count<<<blocks_for(N, 256), 256, 0, s>>>(count, tokens, N);
    CU_LAUNCHED();
    k_exclusive_scan<<<1, 1024, 0, s>>>(start, count, V);
    CU_LAUNCHED();
    k_embed_place<<<blocks_for(N, 256), 256, 0, s>>>(pos, fill, start, tokens, N);
    CU_LAUNCHED();
    k_embed_rank<<<blocks_for(N, 256), 256, 0, s>>>(sorted, pos, start, count, tokens, N);
    CU_LAUNCHED();
    dim3 grid((unsigned)N, blocks_for(D, 128));
    k_embed_accum<<<grid, 128, 0, s>>>(dtable, dout, sorted, start, count, tokens, N, D);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int D, float eps,
                                   void* stream) {
    ARG_CHECK(N > 0 && D > 0, "mxg_rmsnorm_forward: bad shape N %d D %d", N, D);
    k_rmsnorm_fwd<<<N, RMS_THREADS, 0, MXG_STREAM(stream)>>>(out, rstd, x, w, D, eps);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" size_t mxg_rmsnorm_backward_workspace(int N, int D) {
    return (size_t)((N + RMS_CHUNK - 1) / RMS_CHUNK) * (size_t)D;
}

extern "C" int mxg_rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                                    const float* rstd, int N, int D, float* ws, void* stream) {
    ARG_CHECK(N > 0 && D > 0 && ws, "mxg_rmsnorm_backward: bad shape N %d D %d or no workspace", N, D);
    cudaStream_t s = MXG_STREAM(stream);
    const int nch = (N + RMS_CHUNK - 1) / RMS_CHUNK;
    k_rmsnorm_bwd_dx<<<N, RMS_THREADS, 0, s>>>(dx, dout, x, w, rstd, D);
    CU_LAUNCHED();
    k_rmsnorm_bwd_dw_part<<<dim3((unsigned)nch, blocks_for(D, 128)), 128, 0, s>>>(ws, dout, x, rstd, N, D);
    CU_LAUNCHED();
    k_rmsnorm_bwd_dw_sum<<<blocks_for(D, 128), 128, 0, s>>>(dw, ws, nch, D);
    CU_LAUNCHED();
    return MX_OK;
}

static int rope(float* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd, int dir,
                void* stream) {
    ARG_CHECK(B > 0 && T > 0 && nh > 0 && hd > 0 && hd % 2 == 0, "mxg_rope: bad shape B %d T %d heads %d hd %d", B, T,
              nh, hd);
    const size_t n = (size_t)B * T * nh * (hd / 2);
    k_rope<<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(x, cos_t, sin_t, B * T, T, nh, hd, dir);
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

extern "C" int mxg_swiglu_forward(float* h, const float* gate, const float* up, size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_swiglu_forward: empty");
    k_swiglu_fwd<<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(h, gate, up, n);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                                   size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_swiglu_backward: empty");
    k_swiglu_bwd<<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(dgate, dup, dh, gate, up, n);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_add(float* y, const float* a, const float* b, size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_add: empty");
    k_add<<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(y, a, b, n);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_xent_forward(float* logits, float* losses, const int32_t* targets, int N, int V, void* stream) {
    ARG_CHECK(N > 0 && V > 0, "mxg_xent_forward: bad shape N %d V %d", N, V);
    k_xent<<<N, XENT_THREADS, 0, MXG_STREAM(stream)>>>(logits, losses, targets, V, 1.0f, 0);
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
    k_xent<<<N, XENT_THREADS, 0, MXG_STREAM(stream)>>>(logits, losses, targets, V, scale, 1);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_mean(const float* x, int n, float* out, void* stream) {
    ARG_CHECK(n > 0, "mxg_mean: empty");
    k_mean<<<1, 1024, 0, MXG_STREAM(stream)>>>(out, x, n);
    CU_LAUNCHED();
    return MX_OK;
}

static int gemm_nt(int ta, int tb, int M, int N, int K, const void* A, int lda, const void* B, int ldb, float* C,
                   int ldc, int accumulate, int bf16, void* stream) {
    ARG_CHECK(M > 0 && N > 0 && K > 0, "mxg_sgemm: bad shape %d x %d x %d", M, N, K);
    ARG_CHECK(lda >= (ta ? M : K) && ldb >= (tb ? K : N) && ldc >= N, "mxg_sgemm: leading dimension too small");
    ARG_CHECK(!(((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) & 15), "mxg_sgemm: pointers must be 16-byte aligned");
    SPlan* p;
    int rc = splan_get(&p, ta, tb, M, N, K, lda, ldb, ldc, bf16);
    if (rc) return rc;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    LT_TRY(cublasLtMatmul(g_slt, p->op, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C, p->lc, &p->algo, g_sws,
                          g_sws_size, MXG_STREAM(stream)));
    return MX_OK;
}

extern "C" int mxg_sgemm(int ta, int tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                         float* C, int ldc, int accumulate, void* stream) {
    return gemm_nt(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate, 0, stream);
}

extern "C" int mxg_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
                             int ldb, float* C, int ldc, int accumulate, void* stream) {
    return gemm_nt(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate, 1, stream);
}

/* The LM head and the loss per chunk of Nc rows (FP32 or BF16 operands, FP32 accumulation):
 * logits GEMM, fused loss kernel, then (training) dxnf = dlogits head and dhead += dlogits^T xnf,
 * with dlogits rounded to BF16 (chunk16) on the BF16 path. Only [Nc, V] logits exist at a time. */
static int head_chunks(const void* xnf, const void* head, int bf16, const int32_t* targets, int N, int D, int V,
                       float scale, float* losses, float* dxnf, float* dhead, float* chunk, uint16_t* chunk16, int Nc,
                       void* stream) {
    const size_t es = bf16 ? 2 : 4; /* bytes per operand element */
    for (int n0 = 0; n0 < N; n0 += Nc) {
        const int nc = N - n0 < Nc ? N - n0 : Nc;
        const void* xc = (const char*)xnf + (size_t)n0 * D * es; /* [nc, D] */
        int rc = gemm_nt(0, 1, nc, V, D, xc, D, head, D, chunk, V, 0, bf16, stream); /* logits [nc, V] */
        if (!rc) rc = mxg_xent_fused(chunk, losses + n0, targets + n0, nc, V, scale, stream);
        const void* dl = chunk; /* dlogits [nc, V] */
        if (!rc && dxnf && bf16) {
            rc = mxg_to_bf16(chunk, (size_t)nc * V, chunk16, stream);
            dl = chunk16;
        }
        if (!rc && dxnf) rc = gemm_nt(0, 0, nc, D, V, dl, V, head, D, dxnf + (size_t)n0 * D, D, 0, bf16, stream);
        if (!rc && dxnf) rc = gemm_nt(1, 0, V, D, nc, dl, V, xc, D, dhead, D, 1, bf16, stream); /* dhead += dl^T x */
        if (rc) return rc;
    }
    return MX_OK;
}

extern "C" int mxg_lm_head_xent_bf16(const uint16_t* xnf, const uint16_t* head, const int32_t* targets, int N, int D,
                                     int V, float scale, float* losses, float* dxnf, float* dhead, float* chunk,
                                     uint16_t* chunk16, int Nc, void* stream) {
    ARG_CHECK(N > 0 && D > 0 && V > 0 && Nc > 0 && !(Nc * D % 8) && !(V % 8),
              "mxg_lm_head_xent_bf16: bad shape N %d D %d V %d chunk %d (Nc*D and V multiples of 8)", N, D, V, Nc);
    return head_chunks(xnf, head, 1, targets, N, D, V, scale, losses, dxnf, dhead, chunk, chunk16, Nc, stream);
}

extern "C" int mxg_lm_head_xent(const float* xnf, const float* head, const int32_t* targets, int N, int D, int V,
                                float scale, float* losses, float* dxnf, float* dhead, float* chunk, int Nc,
                                void* stream) {
    ARG_CHECK(N > 0 && D > 0 && V > 0 && Nc > 0, "mxg_lm_head_xent: bad shape N %d D %d V %d chunk %d", N, D, V, Nc);
    return head_chunks(xnf, head, 0, targets, N, D, V, scale, losses, dxnf, dhead, chunk, NULL, Nc, stream);
}

extern "C" size_t mxg_sum_squares_workspace(size_t n) { return (n + SS_CHUNK - 1) / SS_CHUNK; }

extern "C" int mxg_sum_squares(const float* g, size_t n, double* out, double* ws, void* stream) {
    ARG_CHECK(n > 0 && ws && out, "mxg_sum_squares: empty input or no workspace");
    const size_t nch = mxg_sum_squares_workspace(n);
    cudaStream_t s = MXG_STREAM(stream);
    k_sumsq_part<<<blocks_for(nch, 128), 128, 0, s>>>(ws, g, n, nch);
    CU_LAUNCHED();
    k_sumsq_final<<<1, 1024, 0, s>>>(out, ws, nch);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_adamw_pieces(const mx_piece* pc, int n_pieces, float* params, const float* grads, float* m,
                                float* v, const mx_adamw_config* c, double lr, float gscale, int64_t t,
                                void* stream) {
    ARG_CHECK(t >= 1, "mxg_adamw_update: step %lld (1-based)", (long long)t);
    /* scalars exactly as mx_adamw_update computes them */
    const float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
    const float bc1 = (float)(1.0 - pow(c->beta1, (double)t)), bc2 = (float)(1.0 - pow(c->beta2, (double)t));
    const float flr = (float)lr;
    for (int i = 0; i < n_pieces; i++) {
        const mx_piece* p = &pc[i];
        if (!p->n) continue;
        const float decay = p->decay ? 1.0f - flr * (float)c->weight_decay : 1.0f;
        k_adamw<<<blocks_for(p->n, 256), 256, 0, MXG_STREAM(stream)>>>(
            params + p->full, grads + p->full, m + p->shard, v + p->shard, p->n, b1, b2, eps, flr, decay, bc1, bc2,
            gscale);
        CU_LAUNCHED();
    }
    return MX_OK;
}

extern "C" int mxg_adamw_update(const mx_param_info info[MX_P_COUNT], float* params, const float* grads, float* m,
                                float* v, const mx_adamw_config* c, double lr, float gscale, int64_t t,
                                void* stream) {
    mx_piece pc[MX_P_COUNT];
    for (int i = 0; i < MX_P_COUNT; i++)
        pc[i] = (mx_piece){info[i].offset, info[i].offset, info[i].numel, info[i].offset, info[i].is_matrix};
    return mxg_adamw_pieces(pc, MX_P_COUNT, params, grads, m, v, c, lr, gscale, t, stream);
}

extern "C" void mxg_layers_shutdown(void) {
    for (int i = 0; i < g_nsplans; i++) splan_destroy(&g_splans[i]);
    g_nsplans = 0;
    if (g_sws) cudaFree(g_sws);
    g_sws = NULL;
    if (g_slt) cublasLtDestroy(g_slt);
    g_slt = NULL;
}
