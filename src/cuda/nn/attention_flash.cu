/*
 * attention_flash.cu: causal grouped-query attention on BF16 tensor cores, forward and backward
 * (the GPU twin of src/nn/attention.c; include/mxlm/gpu_model.h, "flash attention").
 *
 * Math (query head h uses KV head h / (H / KV); scale c = 1 / sqrt(hd); j <= t):
 *   forward   s_tj = c q_t . k_j,  lse_t = log sum_j exp(s_tj) (natural log, as layers.cu),
 *             o_t = sum_j exp(s_tj - lse_t) v_j
 *   backward  p_tj = exp(s_tj - lse_t) (recomputed from lse), dp_tj = do_t . v_j,
 *             delta_t = do_t . o_t (a pre-pass), ds_tj = p_tj (dp_tj - delta_t),
 *             dq_t = c sum_j ds_tj k_j,  dk_j = c sum_{h in group, t} ds_tj q_t,
 *             dv_j = sum_{h in group, t} p_tj do_t
 * The T x T scores are never stored: each CTA keeps one tile of them in registers.
 *
 * Tiling. Three families, the same math and the same fixed orders, picked by the tile configuration
 * (mxg_attention_flash_config; the defaults, measured fastest on the H200: at hd 64 the wgmma forward
 * with the warp-specialized dq and dk/dv kernels, at hd 128 the three warp-specialized kernels):
 *  wgmma (FlashAttention-3's instructions, sm_90a; no warp specialization, no TMA): a warpgroup of
 *   4 warps per 64 rows, 1 or 2 warpgroups per CTA. Tiles live in shared memory in the canonical
 *   128-byte-swizzled layout ([hd/64][rows][64], 16-byte chunk c of row r at c ^ (r & 7)), loaded
 *   by cp.async (two stages of the streamed operand) and read by wgmma through descriptors:
 *   products of two tiles (S = Q K^T, dP = dO V^T, S^T = K Q^T, dP^T = V dO^T) take both operands
 *   from shared memory (K-major); products with a probability tile (O += P V, dQ += dS K,
 *   dV += P^T dO, dK += dS^T Q) take P / dS (BF16) from registers as the A operand and the other
 *   tile MN-major (transposed read).
 *     forward  CTA = (64 NWG query rows, b*H + h); K, V stream in tiles of 64 or 128 keys; online
 *              softmax in the log2 domain on FP32 statistics (m, l per row); q tiles are issued
 *              largest-first (the causal triangle: the last tile has the most keys).
 *     dq       CTA = (64 NWG query rows, b*H + h); K, V stream in tiles of 64 or 128 keys;
 *              S, dP, P = exp(S - lse), dS = P (dP - delta) in registers, dQ += dS K.
 *     dk, dv   CTA = (64 NWG keys, b*KV + kvh); Q, dO, lse and delta stream in tiles of 32 or 64
 *              queries over the group's query heads (increasing h) and the query tiles from the
 *              diagonal on (increasing t): dV += P^T dO, dK += dS^T Q.
 *  mma.sync (FlashAttention-2's manner: m16n8k16 BF16 -> FP32, ldmatrix from the same kind of
 *   XOR-swizzled tiles): NW warps (4 or 8) of 16 MT rows each (MT 1 or 2), the same three kernels
 *   with the same loops; A operands held in registers (Q, or K and V in the dk/dv kernel), the
 *   streamed tiles in chunks of 16 rows.
 *  warp-specialized (FlashAttention-3's structure; the hd-128 defaults): a producer warpgroup whose
 *   thread 0 issues TMA loads into a ring of stages with "full" / "empty" mbarriers, and two consumer
 *   warpgroups (setmaxnreg: 240 registers, 232 in the dk/dv kernels) that wait only for the data they read. The forward runs
 *   the pipelined step (S_j issued with P_{j-1} V_{j-1}, the softmax under the latter); the dk/dv
 *   kernel the wgmma dk/dv step (a producer warp loads lse and delta); the one-pass backward adds dQ
 *   to it (below); the dq kernel k_fa_dq_wg's step, and when it has the forward's BF16 output it
 *   makes delta itself from a third tile (the BF16 entry point: no k_fa_delta pass). Each computes
 *   the same sums in the same order as its wgmma twin (the one-pass kernel's dK, dV at hd 64 apart).
 *  Launch order: the (batch, head) row in blockIdx.x, the tile in blockIdx.y (fa_row / fa_tile),
 *   so that all rows' longest causal tiles are dispatched first.
 *   Partial tiles (T not a multiple of a tile): rows past T are zero-filled on load (cp.async
 *   src-size 0, TMA's out-of-bounds fill), their lse and delta read as 0 in the wgmma and
 *   warp-specialized dk/dv kernels (their q and dout rows are zero, so are their products; +inf, p = 0,
 *   in the mma.sync one), and they are never stored.
 *   The FP32 wrappers round q, k, v (and dout) to BF16 in one pre-pass into a cached scratch
 *   buffer and write FP32 outputs; delta is computed from the FP32 out and dout there (the BF16
 *   entry point computes it from the BF16 out and dout).
 *
 * Determinism: no atomics at all; every sum runs in a fixed order (the MMA k-order, the tiles in
 * increasing index, the group's heads in increasing h, fixed quad butterflies), and no result
 * depends on the launch order of CTAs: two runs give identical bytes.
 *
 * Tolerance: the products see BF16 operands (q, k, v, dout, and P, dS rounded to BF16), FP32
 * accumulation and statistics: against the FP32 CPU attention on the same BF16-rounded inputs
 * the normwise error ||gpu - cpu|| / ||cpu|| is 1.3e-3..3.6e-3 (measured on the H200, every
 * configuration); tests/gpu/test_attention_flash.cu's tolerance is 1e-2 for out, dq, dk, dv and
 * 1e-4 absolute for lse (measured <= 2.2e-6).
 */
#include <cuda.h> /* CUtensorMap (the encoder comes through the runtime: no libcuda link) */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "cuda/common.cuh"
#include "mxlm/gpu_model.h"

namespace {

typedef __nv_bfloat16 bf16;

#define ARG_CHECK(cond, ...) do { if (!(cond)) return mx_fail(MX_EINVAL, __VA_ARGS__); } while (0)
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

/* One struct for every kernel of this file (the fields a kernel does not use are NULL). */
struct FaArgs {
    const bf16 *q, *k, *v; /* q [B*T, H*hd], k, v [B*T, KV*hd] */
    const bf16* dout;      /* [B*T, H*hd] */
    void* out;             /* [B*T, H*hd], bf16 or float */
    float* lse;            /* [B, H, T] (forward writes it, backward reads it) */
    const float* delta;    /* [B, H, T] */
    float* delta_out;      /* the warp-specialized dq kernel's delta, when it makes it (from out, bf16) */
    void *dq, *dk, *dv;    /* [B*T, H*hd], [B*T, KV*hd] x2, bf16 or float (overwritten) */
    float* dqa;            /* the fused backward: dQ's partial sums [B*T, H*hd] (FP32) */
    unsigned* sem;         /* and its tiles' turn counters [B, H, T / 64, 2], zero at the start */
    int T, H, KV;
    float sl2;   /* log2(e) / sqrt(hd): scores into the log2 domain */
    float scale; /* 1 / sqrt(hd) */
};

/* ---- PTX helpers ---------------------------------------------------------------------------- */

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
/* 16 bytes global -> shared; bytes = 0 zero-fills (the source is not read). */
__device__ __forceinline__ void cp16(uint32_t dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
/* 4 bytes global -> shared; bytes = 0 zero-fills. */
__device__ __forceinline__ void cp4(uint32_t dst, const void* src, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void ldsm4(uint32_t r[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm4t(uint32_t r[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
/* c += a b: A 16x16 (row), B 16x8 (col), C 16x8 FP32. */
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
/* Two floats -> bf16x2 (round to nearest even), lo in the low half. */
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

/* A tile of rows x HD bf16 in shared memory: row r at r * HD * 2 bytes, its 16-byte chunk c at
 * chunk c ^ (r & 7), so that the 8 row addresses of an ldmatrix hit 8 different bank groups. */
template <int HD>
__device__ __forceinline__ uint32_t toff(int r, int c) {
    return (uint32_t)(r * HD * 2 + ((c ^ (r & 7)) << 4));
}

/* Rows [row0, row0 + ROWS) of g (row stride `stride` elements) into a swizzled tile; rows >= T
 * are zero-filled. All NT threads call it. */
template <int ROWS, int HD, int NT>
__device__ __forceinline__ void load_tile(uint32_t s, const bf16* g, int row0, int T, int stride, int tid) {
    constexpr int CPR = HD / 8, N = ROWS * CPR;
    static_assert(N % NT == 0, "tile not a multiple of the block");
#pragma unroll
    for (int it = 0; it < N / NT; it++) {
        const int i = it * NT + tid, r = i / CPR, c = i % CPR, t = row0 + r;
        const bf16* src = g + (size_t)(t < T ? t : 0) * stride + c * 8;
        cp16(s + toff<HD>(r, c), src, t < T ? 16 : 0);
    }
}

/* A fragments (16 rows x HD, row-major: the rows are M, HD is K) of rows r0.. of a tile. */
template <int HD>
__device__ __forceinline__ void load_afrags(uint32_t f[HD / 16][4], uint32_t s, int r0, int lane) {
    const int lr = lane & 7, lm = lane >> 3;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        const int row = r0 + (lm & 1) * 8 + lr, ch = ks * 2 + (lm >> 1);
        ldsm4(f[ks], s + toff<HD>(row, ch));
    }
}

template <typename OutT>
__device__ __forceinline__ void store2(OutT* p, float a, float b);
template <>
__device__ __forceinline__ void store2<float>(float* p, float a, float b) {
    *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
template <>
__device__ __forceinline__ void store2<bf16>(bf16* p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}

/* The launch order of every flash kernel: blockIdx.x the (batch, head) row, blockIdx.y the tile, so
 * that the blocks go out tile by tile across all rows. Causal work per tile grows with the query tile
 * and shrinks with the key tile, so the forward and dq kernels take their tile as fa_tile_rev (the
 * highest, longest query tile first) and the dk/dv kernels as fa_tile (key tile 0, the longest,
 * first): every row's longest tiles are dispatched before any row's short ones, and the last wave
 * holds only short tiles (bench/attn_schedule.py: the row-major order left the dk/dv kernels at
 * 1.28-1.48x the ideal makespan, this one 1.02-1.12x). Not the one-pass backward (k_fa_bwd_ws): it
 * keeps the row-major order, so that the FP32 dQ partial sums of the few rows in flight stay in L2. */
__device__ __forceinline__ int fa_row() { return (int)blockIdx.x; }
__device__ __forceinline__ int fa_tile() { return (int)blockIdx.y; }
__device__ __forceinline__ int fa_tile_rev() { return (int)(gridDim.y - 1 - blockIdx.y); }
/* The grid for fa_row / fa_tile: tiles of bt rows over T, one column per (batch, head) row. */
static inline dim3 fa_grid(int T, int bt, int rows) { return dim3((unsigned)rows, (unsigned)((T + bt - 1) / bt)); }

/* ---- forward -------------------------------------------------------------------------------- */

/* MT m-tiles of 16 query rows per warp (MT = 2 halves the shared-memory reads per MMA). */
template <int HD, int NW, int MT>
constexpr size_t fwd_smem() { return (size_t)(16 * MT * NW + 4 * 64) * HD * 2; }

template <int HD, int NW, int MT, typename OutT>
__global__ void __launch_bounds__(NW * 32) k_fa_fwd(FaArgs a) {
    constexpr int WR = 16 * MT, BM = WR * NW, BN = 64, NT = NW * 32, KS = HD / 16, DT = HD / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = smem_u32(smem), sK = sQ + BM * HD * 2, sV = sK + 2 * BN * HD * 2;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int lr = lane & 7, lm = lane >> 3;
    const int T = a.T, H = a.H, KV = a.KV;
    const int qt = fa_tile_rev(), bh = fa_row(), b = bh / H, h = bh % H, kh = h / (H / KV);
    const int qs = H * HD, ks = KV * HD;
    const bf16* qg = a.q + (size_t)b * T * qs + h * HD;
    const bf16* kg = a.k + (size_t)b * T * ks + kh * HD;
    const bf16* vg = a.v + (size_t)b * T * ks + kh * HD;
    const int q0 = qt * BM, r0 = q0 + warp * WR;
    const int nkv = (min(q0 + BM, T) - 1) / BN + 1;
    const float sl2 = a.sl2;

    load_tile<BM, HD, NT>(sQ, qg, q0, T, qs, tid);
    load_tile<BN, HD, NT>(sK, kg, 0, T, ks, tid);
    load_tile<BN, HD, NT>(sV, vg, 0, T, ks, tid);
    cp_commit();

    uint32_t qf[MT][KS][4];
    float o[MT][DT][4];
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
        for (int i = 0; i < DT; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    }

    for (int j = 0; j < nkv; j++) {
        cp_wait_all();
        __syncthreads(); /* tile j is in; every warp is done with tile j - 1 */
        if (j == 0)
#pragma unroll
            for (int mt = 0; mt < MT; mt++) load_afrags<HD>(qf[mt], sQ, warp * WR + mt * 16, lane);
        if (j + 1 < nkv) {
            const uint32_t st = ((j + 1) & 1) * BN * HD * 2;
            load_tile<BN, HD, NT>(sK + st, kg, (j + 1) * BN, T, ks, tid);
            load_tile<BN, HD, NT>(sV + st, vg, (j + 1) * BN, T, ks, tid);
        }
        cp_commit();
        if (j * BN > r0 + WR - 1) continue; /* every key of the tile is after every row of the warp */
        const uint32_t kb = sK + (j & 1) * BN * HD * 2, vb = sV + (j & 1) * BN * HD * 2;
        float s[MT][8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < 8; i++) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t r[4];
                ldsm4(r, kb + toff<HD>(np * 16 + (lm >> 1) * 8 + lr, kk * 2 + (lm & 1)));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma(s[mt][2 * np], qf[mt][kk], r[0], r[1]);
                    mma(s[mt][2 * np + 1], qf[mt][kk], r[2], r[3]);
                }
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int rm = r0 + mt * 16;
            if (j * BN + BN - 1 > rm) { /* the diagonal crosses this m-tile's part of the tile */
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int key = j * BN + nt * 8 + 2 * tig + (e & 1), row = rm + g + 8 * (e >> 1);
                        if (key > row) s[mt][nt][e] = -INFINITY;
                    }
            }
            float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                x0 = fmaxf(x0, fmaxf(s[mt][nt][0], s[mt][nt][1]));
                x1 = fmaxf(x1, fmaxf(s[mt][nt][2], s[mt][nt][3]));
            }
            x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
            x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
            x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
            x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
            /* finite: tile 0 holds key 0 <= every row, so m is finite from the first tile on (an
             * m-tile whose rows all precede the tile keeps its m: max(m, -inf)) */
            const float n0 = fmaxf(m[mt][0], x0 * sl2), n1 = fmaxf(m[mt][1], x1 * sl2);
            const float al0 = ex2(m[mt][0] - n0), al1 = ex2(m[mt][1] - n1);
            m[mt][0] = n0;
            m[mt][1] = n1;
            float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                s[mt][nt][0] = ex2(fmaf(s[mt][nt][0], sl2, -n0));
                s[mt][nt][1] = ex2(fmaf(s[mt][nt][1], sl2, -n0));
                s[mt][nt][2] = ex2(fmaf(s[mt][nt][2], sl2, -n1));
                s[mt][nt][3] = ex2(fmaf(s[mt][nt][3], sl2, -n1));
                ps0 += s[mt][nt][0] + s[mt][nt][1];
                ps1 += s[mt][nt][2] + s[mt][nt][3];
            }
            l[mt][0] = l[mt][0] * al0 + ps0;
            l[mt][1] = l[mt][1] * al1 + ps1;
#pragma unroll
            for (int i = 0; i < DT; i++) {
                o[mt][i][0] *= al0;
                o[mt][i][1] *= al0;
                o[mt][i][2] *= al1;
                o[mt][i][3] *= al1;
            }
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) { /* 16 keys at a time: P (BF16) as the A operand */
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                pa[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
                uint32_t r[4];
                ldsm4t(r, vb + toff<HD>(kk * 16 + (lm & 1) * 8 + lr, dp * 2 + (lm >> 1)));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma(o[mt][2 * dp], pa[mt], r[0], r[1]);
                    mma(o[mt][2 * dp + 1], pa[mt], r[2], r[3]);
                }
            }
        }
    }
    OutT* og = (OutT*)a.out + (size_t)b * T * qs + h * HD;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float l0 = l[mt][0], l1 = l[mt][1];
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        const float i0 = 1.0f / l0, i1 = 1.0f / l1;
        const int ra = r0 + mt * 16 + g, rb = ra + 8;
#pragma unroll
        for (int i = 0; i < DT; i++) {
            const int col = i * 8 + 2 * tig;
            if (ra < T) store2<OutT>(og + (size_t)ra * qs + col, o[mt][i][0] * i0, o[mt][i][1] * i0);
            if (rb < T) store2<OutT>(og + (size_t)rb * qs + col, o[mt][i][2] * i1, o[mt][i][3] * i1);
        }
        if (tig == 0) {
            if (ra < T) a.lse[(size_t)bh * T + ra] = (m[mt][0] + log2f(l0)) * FA_LN2;
            if (rb < T) a.lse[(size_t)bh * T + rb] = (m[mt][1] + log2f(l1)) * FA_LN2;
        }
    }
}

/* wgmma wrappers (generated: the accumulator lists are long) */
__device__ __forceinline__ void wg_ss_n32(float* d, uint64_t a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(a), "l"(b), "r"(acc));
}
__device__ __forceinline__ void wg_ss_n64(float* d, uint64_t a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b), "r"(acc));
}
__device__ __forceinline__ void wg_ss_n128(float* d, uint64_t a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b), "r"(acc));
}
__device__ __forceinline__ void wg_rs_n64_tb(float* d, const uint32_t* a, uint64_t b) {
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
__device__ __forceinline__ void wg_rs_n128_tb(float* d, const uint32_t* a, uint64_t b) {
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

/* the same with B K-major (not transposed) and the accumulate flag: A (Q, dO, K or V fragments) from
 * registers, B a tile read as in wg_ss */
__device__ __forceinline__ void wg_rs_n32(float* d, const uint32_t* a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));
}
__device__ __forceinline__ void wg_rs_n64(float* d, const uint32_t* a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));
}
__device__ __forceinline__ void wg_rs_n128(float* d, const uint32_t* a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));
}

/* m64n64k16 with A and B both MN-major (transposed reads): dQ = dS K from the stored dS^T and K */
__device__ __forceinline__ void wg_ss_n64_tt(float* d, uint64_t a, uint64_t b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b), "r"(acc));
}

/* ---- forward on wgmma (sm_90a): a warpgroup of 4 warps per 64 query rows ------------------------
 * Q, K, V tiles in the canonical 128-byte-swizzled layout that wgmma reads: [HD/64][rows][64]
 * (128-byte rows, 16-byte chunk c of row r at c ^ (r & 7), tile bases 1024-byte aligned).
 * S = Q K^T: wgmma m64nBNk16, A (Q) and B (K) from shared memory, both K-major;
 * O += P V: wgmma m64nHDk16, A = P (BF16) from registers, B = V MN-major (transposed read).
 * The accumulator layouts per warp are those of mma.sync (rows 16 w + g, g + 8): the softmax is
 * the same code as k_fa_fwd's. */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
__device__ __forceinline__ void reg_fence(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void reg_fence(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void wg_ss(float* d, uint64_t a, uint64_t b, int acc) {
    if constexpr (N == 32) wg_ss_n32(d, a, b, acc);
    else if constexpr (N == 64) wg_ss_n64(d, a, b, acc);
    else wg_ss_n128(d, a, b, acc);
}
template <int N>
__device__ __forceinline__ void wg_rs(float* d, const uint32_t* a, uint64_t b, int acc) {
    if constexpr (N == 32) wg_rs_n32(d, a, b, acc);
    else if constexpr (N == 64) wg_rs_n64(d, a, b, acc);
    else wg_rs_n128(d, a, b, acc);
}
template <int N>
__device__ __forceinline__ void wg_rs_tb(float* d, const uint32_t* a, uint64_t b) {
    if constexpr (N == 64) wg_rs_n64_tb(d, a, b);
    else wg_rs_n128_tb(d, a, b);
}

/* Rows [row0, row0 + ROWS) of g into a [HD/64][ROWS][64] swizzled tile; rows >= T zero-filled. */
template <int ROWS, int HD, int NT>
__device__ __forceinline__ void load_tile_sw(uint32_t s, const bf16* g, int row0, int T, int stride, int tid) {
    constexpr int CPR = HD / 8, N = ROWS * CPR;
    static_assert(N % NT == 0, "tile not a multiple of the block");
#pragma unroll
    for (int it = 0; it < N / NT; it++) {
        const int i = it * NT + tid, r = i / CPR, c = i % CPR, t = row0 + r;
        const bf16* src = g + (size_t)(t < T ? t : 0) * stride + c * 8;
        cp16(s + (uint32_t)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4)), src, t < T ? 16 : 0);
    }
}

/* Pieces of the wgmma forward's step, shared by its plain and pipelined kernels (the accumulator
 * layout per warp: rows r0 + g and r0 + g + 8, 8-column groups nt, columns 2 tig and 2 tig + 1). */
/* Causal mask: scores of keys after the row to -inf (keys key0 + 8 nt + 2 tig + (e & 1)). */
template <int NS>
__device__ __forceinline__ void fa_mask(float* s, int key0, int r0, int g, int tig) {
#pragma unroll
    for (int nt = 0; nt < NS; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = key0 + nt * 8 + 2 * tig + (e & 1), row = r0 + g + 8 * (e >> 1);
            if (key > row) s[nt * 4 + e] = -INFINITY;
        }
}
/* Online softmax of one score tile in the log2 domain, in place (s becomes P = 2^(s sl2 - m)):
 * the row maxima m and sums l updated, al = 2^(m_old - m_new), the factor the older O takes. */
template <int NS>
__device__ __forceinline__ void fa_softmax(float* s, float sl2, float& m0, float& m1, float& l0, float& l1,
                                           float& al0, float& al1) {
    float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < NS; nt++) {
        x0 = fmaxf(x0, fmaxf(s[nt * 4 + 0], s[nt * 4 + 1]));
        x1 = fmaxf(x1, fmaxf(s[nt * 4 + 2], s[nt * 4 + 3]));
    }
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
    /* a warp whose rows all precede the tile keeps m (finite from tile 0 on): max(m, -inf) */
    const float n0 = fmaxf(m0, x0 * sl2), n1 = fmaxf(m1, x1 * sl2);
    al0 = ex2(m0 - n0);
    al1 = ex2(m1 - n1);
    m0 = n0;
    m1 = n1;
    float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NS; nt++) {
        s[nt * 4 + 0] = ex2(fmaf(s[nt * 4 + 0], sl2, -n0));
        s[nt * 4 + 1] = ex2(fmaf(s[nt * 4 + 1], sl2, -n0));
        s[nt * 4 + 2] = ex2(fmaf(s[nt * 4 + 2], sl2, -n1));
        s[nt * 4 + 3] = ex2(fmaf(s[nt * 4 + 3], sl2, -n1));
        ps0 += s[nt * 4 + 0] + s[nt * 4 + 1];
        ps1 += s[nt * 4 + 2] + s[nt * 4 + 3];
    }
    l0 = l0 * al0 + ps0;
    l1 = l1 * al1 + ps1;
}
template <int DT>
__device__ __forceinline__ void fa_rescale(float* o, float al0, float al1) {
#pragma unroll
    for (int i = 0; i < DT; i++) {
        o[i * 4 + 0] *= al0;
        o[i * 4 + 1] *= al0;
        o[i * 4 + 2] *= al1;
        o[i * 4 + 3] *= al1;
    }
}
/* P (FP32 accumulator layout) -> BF16 A fragments of the P V product, 16 keys each. */
template <int BN>
__device__ __forceinline__ void fa_pack(uint32_t (*pa)[4], const float* s) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        pa[kk][0] = pack2(s[8 * kk + 0], s[8 * kk + 1]);
        pa[kk][1] = pack2(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = pack2(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = pack2(s[8 * kk + 6], s[8 * kk + 7]);
    }
}
/* S = Q K^T of the warpgroup's 64 rows against one BN-key tile (both from shared memory). */
template <int HD, int BM, int BN>
__device__ __forceinline__ void fa_qk(float* s, uint32_t sQ, uint32_t kb, int wg) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        wg_ss<BN>(s, wg_desc(sQ + (kk >> 2) * BM * 128 + wg * 64 * 128 + (kk & 3) * 32, 16, 1024),
                  wg_desc(kb + (kk >> 2) * BN * 128 + (kk & 3) * 32, 16, 1024), kk > 0);
}
/* O += P V over one BN-key tile (P from registers, V read MN-major). */
template <int HD, int BN>
__device__ __forceinline__ void fa_pv(float* o, const uint32_t (*pa)[4], uint32_t vb) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) wg_rs_tb<HD>(o, pa[kk], wg_desc(vb + kk * 16 * 128, BN * 128, 1024));
}
/* The end of the forward: O / l and the log-sum-exp (natural log) of rows r0 + g, r0 + g + 8. */
template <int HD, typename OutT>
__device__ __forceinline__ void fa_fwd_store(const FaArgs& a, const float* o, float l0, float l1, float m0, float m1,
                                             int b, int bh, int h, int r0, int g, int tig) {
    const int T = a.T, qs = a.H * HD;
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float i0 = 1.0f / l0, i1 = 1.0f / l1;
    OutT* og = (OutT*)a.out + (size_t)b * T * qs + h * HD;
    const int ra = r0 + g, rb = ra + 8;
#pragma unroll
    for (int i = 0; i < HD / 8; i++) {
        const int col = i * 8 + 2 * tig;
        if (ra < T) store2<OutT>(og + (size_t)ra * qs + col, o[i * 4 + 0] * i0, o[i * 4 + 1] * i0);
        if (rb < T) store2<OutT>(og + (size_t)rb * qs + col, o[i * 4 + 2] * i1, o[i * 4 + 3] * i1);
    }
    if (tig == 0) {
        if (ra < T) a.lse[(size_t)bh * T + ra] = (m0 + log2f(l0)) * FA_LN2;
        if (rb < T) a.lse[(size_t)bh * T + rb] = (m1 + log2f(l1)) * FA_LN2;
    }
}

/* A fragments of one warp (16 rows from row r0 of a [HD/64][ROWS][64] swizzled tile, K = HD) for
 * wgmma's register-A form: the mma.sync m16n8k16 A layout, one ldmatrix.x4 per 16 columns. */
template <int ROWS, int HD>
__device__ __forceinline__ void load_afrags_sw(uint32_t (*f)[4], uint32_t s, int r0, int lane) {
    const int lr = lane & 7, lm = lane >> 3, row = r0 + (lm & 1) * 8 + lr;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        const int ch = ks * 2 + (lm >> 1);
        ldsm4(f[ks], s + (uint32_t)((ch >> 3) * ROWS * 128 + row * 128 + (((ch & 7) ^ (row & 7)) << 4)));
    }
}

template <int HD, int NWG, int BN>
constexpr size_t fwg_smem() { return (size_t)(64 * NWG + 4 * BN) * HD * 2 + 1024; }

/* The CTA's geometry, common to the plain and the pipelined kernel. */
#define FA_FWD_WG_SETUP                                                                                          \
    constexpr int BM = 64 * NWG, NT = NWG * 128, NS = BN / 8, DT = HD / 8;                                      \
    extern __shared__ __align__(128) unsigned char smem[]; /* aligned to 1024 below */                          \
    const uint32_t sQ = (smem_u32(smem) + 1023u) & ~1023u, sK = sQ + BM * HD * 2, sV = sK + 2 * BN * HD * 2;   \
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2,          \
              tig = lane & 3;                                                                                   \
    const int T = a.T, H = a.H, KV = a.KV;                                                                      \
    const int qt = fa_tile_rev(), bh = fa_row(), b = bh / H, h = bh % H, kh = h / (H / KV);                     \
    const int qs = H * HD, ks = KV * HD;                                                                        \
    const bf16* qg = a.q + (size_t)b * T * qs + h * HD;                                                         \
    const bf16* kg = a.k + (size_t)b * T * ks + kh * HD;                                                        \
    const bf16* vg = a.v + (size_t)b * T * ks + kh * HD;                                                        \
    const int q0 = qt * BM, g0 = q0 + wg * 64, r0 = g0 + warp * 16; /* warpgroup's and warp's first rows */     \
    const int nkv = (min(q0 + BM, T) - 1) / BN + 1;                                                             \
    const float sl2 = a.sl2;                                                                                    \
    float o[DT * 4];                                                                                            \
    _Pragma("unroll") for (int i = 0; i < DT * 4; i++) o[i] = 0.0f;                                             \
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f

template <int HD, int NWG, int BN, typename OutT>
__global__ void __launch_bounds__(NWG * 128) k_fa_fwd_wg(FaArgs a) {
    FA_FWD_WG_SETUP;
    load_tile_sw<BM, HD, NT>(sQ, qg, q0, T, qs, tid);
    load_tile_sw<BN, HD, NT>(sK, kg, 0, T, ks, tid);
    load_tile_sw<BN, HD, NT>(sV, vg, 0, T, ks, tid);
    cp_commit();
    for (int j = 0; j < nkv; j++) {
        cp_wait_all();
        fence_proxy_async(); /* this thread's cp.async writes, before the tensor cores read them */
        __syncthreads();
        if (j + 1 < nkv) {
            const uint32_t st = ((j + 1) & 1) * BN * HD * 2;
            load_tile_sw<BN, HD, NT>(sK + st, kg, (j + 1) * BN, T, ks, tid);
            load_tile_sw<BN, HD, NT>(sV + st, vg, (j + 1) * BN, T, ks, tid);
        }
        cp_commit();
        if (j * BN > g0 + 63) continue; /* warpgroup-uniform: every key after every row */
        const uint32_t kb = sK + (j & 1) * BN * HD * 2, vb = sV + (j & 1) * BN * HD * 2;
        float s[NS * 4];
        wg_fence();
        fa_qk<HD, BM, BN>(s, sQ, kb, wg);
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < NS * 4; i++) reg_fence(s[i]);
        if (j * BN + BN - 1 > r0) fa_mask<NS>(s, j * BN, r0, g, tig);
        float al0, al1;
        fa_softmax<NS>(s, sl2, m0, m1, l0, l1, al0, al1);
        fa_rescale<DT>(o, al0, al1);
        uint32_t pa[BN / 16][4];
        fa_pack<BN>(pa, s);
        wg_fence();
        fa_pv<HD, BN>(o, pa, vb);
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < DT * 4; i++) reg_fence(o[i]);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) reg_fence(pa[kk][e]);
    }
    fa_fwd_store<HD, OutT>(a, o, l0, l1, m0, m1, b, bh, h, r0, g, tig);
}

/* The pipelined forward (FlashAttention-3's intra-warpgroup overlap): step j issues S_j = Q K_j^T
 * and O += P_{j-1} V_{j-1} together, waits for S_j only, runs the softmax of S_j while the tensor
 * cores do P_{j-1} V_{j-1}, then waits for that and scales O by 2^(m_{j-1} - m_j). The same sums as
 * the plain kernel but O is scaled after adding P_{j-1} V_{j-1} rather than before: (O + PV) al
 * where the plain kernel has O al + PV (rounding differs, not the math). Loads: K_{j+1} and V_j
 * during step j (V_j is read in step j + 1), two stages each. */
template <int HD, int NWG, int BN, typename OutT>
__global__ void __launch_bounds__(NWG * 128) k_fa_fwd_wgp(FaArgs a) {
    FA_FWD_WG_SETUP;
    /* this warpgroup's tiles (<= nkv): with 64-key tiles and two warpgroups the first warpgroup's
     * rows all precede the CTA's last tile; else every warpgroup takes every tile (ALL: known to
     * the compiler, whose wgmma pipelining wants branch-free steps) */
    constexpr bool ALL = NWG * 64 <= BN;
    const int nw = ALL ? nkv : min(nkv, (g0 + 63) / BN + 1);
    uint32_t pa[BN / 16][4];
    float al0, al1;
    load_tile_sw<BM, HD, NT>(sQ, qg, q0, T, qs, tid);
    load_tile_sw<BN, HD, NT>(sK, kg, 0, T, ks, tid);
    cp_commit();
    { /* step 0: S_0 only */
        cp_wait_all();
        fence_proxy_async();
        __syncthreads();
        if (1 < nkv) load_tile_sw<BN, HD, NT>(sK + BN * HD * 2, kg, BN, T, ks, tid);
        load_tile_sw<BN, HD, NT>(sV, vg, 0, T, ks, tid);
        cp_commit();
        float s[NS * 4];
        wg_fence();
        fa_qk<HD, BM, BN>(s, sQ, sK, wg);
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < NS * 4; i++) reg_fence(s[i]);
        if (BN - 1 > r0) fa_mask<NS>(s, 0, r0, g, tig);
        fa_softmax<NS>(s, sl2, m0, m1, l0, l1, al0, al1);
        fa_pack<BN>(pa, s);
    }
    for (int j = 1; j < nkv; j++) {
        cp_wait_all();
        fence_proxy_async();
        __syncthreads();
        if (j + 1 < nkv) load_tile_sw<BN, HD, NT>(sK + ((j + 1) & 1) * BN * HD * 2, kg, (j + 1) * BN, T, ks, tid);
        load_tile_sw<BN, HD, NT>(sV + (j & 1) * BN * HD * 2, vg, j * BN, T, ks, tid);
        cp_commit();
        if (ALL || j < nw) { /* S_j and P_{j-1} V_{j-1} */
            float s[NS * 4];
            wg_fence();
            fa_qk<HD, BM, BN>(s, sQ, sK + (j & 1) * BN * HD * 2, wg);
            wg_commit();
            fa_pv<HD, BN>(o, pa, sV + ((j - 1) & 1) * BN * HD * 2);
            wg_commit();
            wg_wait1();
#pragma unroll
            for (int i = 0; i < NS * 4; i++) reg_fence(s[i]);
            if (j * BN + BN - 1 > r0) fa_mask<NS>(s, j * BN, r0, g, tig);
            fa_softmax<NS>(s, sl2, m0, m1, l0, l1, al0, al1);
            wg_wait0();
#pragma unroll
            for (int i = 0; i < DT * 4; i++) reg_fence(o[i]);
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
                for (int e = 0; e < 4; e++) reg_fence(pa[kk][e]);
            fa_rescale<DT>(o, al0, al1);
            fa_pack<BN>(pa, s);
        } else if (j == nw) { /* this warpgroup's last P V */
            wg_fence();
            fa_pv<HD, BN>(o, pa, sV + ((j - 1) & 1) * BN * HD * 2);
            wg_commit();
            wg_wait0();
#pragma unroll
            for (int i = 0; i < DT * 4; i++) reg_fence(o[i]);
        }
    }
    cp_wait_all();
    fence_proxy_async();
    __syncthreads();
    if (ALL || nw == nkv) {
        wg_fence();
        fa_pv<HD, BN>(o, pa, sV + ((nkv - 1) & 1) * BN * HD * 2);
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < DT * 4; i++) reg_fence(o[i]);
    }
    fa_fwd_store<HD, OutT>(a, o, l0, l1, m0, m1, b, bh, h, r0, g, tig);
}


/* ---- forward, warp-specialized (FlashAttention-3's structure, sm_90a) ---------------------------
 * CTA = 3 warpgroups: a producer (one thread issues TMA loads: Q once, K_j and V_j into an NST-stage
 * ring, each stage with a "full" mbarrier the copies complete and an "empty" one the consumers
 * release) and two consumer warpgroups of 64 query rows each running k_fa_fwd_wgp's step (S_j with
 * P_{j-1} V_{j-1}, the softmax of S_j under the P V product). No block-wide barrier in the loop: a
 * warpgroup waits only for the data it reads, so the two drift apart and one's softmax runs under
 * the other's products. setmaxnreg moves registers from the producer (24) to the consumers (240).
 * TMA reads q, k, v as [B][T][heads * hd / 64][64] (4-d maps, rows past T zero-filled) into the
 * 128-byte-swizzled [hd / 64][rows][64] tiles that wgmma reads. The same sums in the same order as
 * k_fa_fwd_wgp: the same bytes. */
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* One box of a 4-d tensor map (coordinates innermost first) into shared memory, completing on bar. */
__device__ __forceinline__ void tma_load4(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                          uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
                 "%4, %5}], [%6];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}
/* ROWS rows from row0 of head hh (hd HD) of batch b: HD / 64 boxes of [ROWS][64]. */
template <int ROWS, int HD>
__device__ __forceinline__ void tma_tile(uint32_t dst, const CUtensorMap* map, int hh, int row0, int b, uint32_t bar) {
#pragma unroll
    for (int c = 0; c < HD / 64; c++) tma_load4(dst + c * ROWS * 128, map, 0, hh * (HD / 64) + c, row0, b, bar);
}

/* setmaxnreg with an immediate count. The forward and dq kernels' producer warpgroup keeps 24
 * registers, its consumers 240; the dk/dv kernels' producer 40 (at 24 its lse / delta warp and the
 * one-pass kernel's partial-sum warps spilled, ptxas: 8-36 bytes), the consumers 232 (128 x 40 +
 * 256 x 232 = 64,512 of the 65,536). */
#define FA_PRODUCER_REGS 24
#define FA_CONSUMER_REGS 240
#define FA_DKV_PRODUCER_REGS 40
#define FA_DKV_CONSUMER_REGS 232
template <int R>
__device__ __forceinline__ void reg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R) : "memory"); }
template <int R>
__device__ __forceinline__ void reg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R) : "memory"); }
/* A ring of nst stages: "full" barriers of one arrival (the producer's, with the TMA bytes) and
 * "empty" ones of 256 (both consumer warpgroups). */
__device__ __forceinline__ void ws_ring_init(uint32_t full, uint32_t empty, int nst) {
    for (int s = 0; s < nst; s++) {
        mbar_init(full + 8 * s, 1);
        mbar_init(empty + 8 * s, 256);
    }
}

template <int HD, int BN, int NST>
constexpr size_t fws_smem() { return (size_t)(128 + 2 * NST * BN) * HD * 2 + 1024 + 8 * (1 + 4 * NST); }

template <int HD, int BN, int NST, typename OutT>
__global__ void __launch_bounds__(384, 1)
    k_fa_fwd_ws(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                const __grid_constant__ CUtensorMap tv, FaArgs a) {
    constexpr int BM = 128, NS = BN / 8, DT = HD / 8, TB = BN * HD * 2;
    extern __shared__ __align__(128) unsigned char smem[]; /* aligned to 1024 below */
    const uint32_t sQ = (smem_u32(smem) + 1023u) & ~1023u, sK = sQ + BM * HD * 2, sV = sK + NST * TB;
    const uint32_t bQ = sV + NST * TB, bFK = bQ + 8, bFV = bFK + 8 * NST, bEK = bFV + 8 * NST, bEV = bEK + 8 * NST;
    const int tid = threadIdx.x, T = a.T, H = a.H, KV = a.KV;
    const int qt = fa_tile_rev(), bh = fa_row(), b = bh / H, h = bh % H, kh = h / (H / KV);
    const int q0 = qt * BM, nkv = (min(q0 + BM, T) - 1) / BN + 1;
    if (tid == 0) {
        mbar_init(bQ, 1);
        ws_ring_init(bFK, bEK, NST);
        ws_ring_init(bFV, bEV, NST);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (tid < 128) { /* the producer warpgroup */
        reg_dec<FA_PRODUCER_REGS>();
        if (tid == 0) {
            mbar_expect_tx(bQ, BM * HD * 2);
            tma_tile<BM, HD>(sQ, &tq, h, q0, b, bQ);
            for (int j = 0; j < nkv; j++) {
                const int s = j % NST, r = j / NST;
                if (r) mbar_wait(bEK + 8 * s, (r - 1) & 1);
                mbar_expect_tx(bFK + 8 * s, TB);
                tma_tile<BN, HD>(sK + s * TB, &tk, kh, j * BN, b, bFK + 8 * s);
                if (r) mbar_wait(bEV + 8 * s, (r - 1) & 1);
                mbar_expect_tx(bFV + 8 * s, TB);
                tma_tile<BN, HD>(sV + s * TB, &tv, kh, j * BN, b, bFV + 8 * s);
            }
        }
        return;
    }
    reg_inc<FA_CONSUMER_REGS>();
    const int ct = tid - 128, wg = ct >> 7, warp = (ct >> 5) & 3, lane = ct & 31, g = lane >> 2, tig = lane & 3;
    const int r0 = q0 + wg * 64 + warp * 16;
    const float sl2 = a.sl2;
    float o[DT * 4];
#pragma unroll
    for (int i = 0; i < DT * 4; i++) o[i] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f, al0, al1;
    uint32_t pa[BN / 16][4];
    mbar_wait(bQ, 0);
    { /* step 0: S_0 only */
        float s[NS * 4];
        mbar_wait(bFK, 0);
        wg_fence();
        fa_qk<HD, BM, BN>(s, sQ, sK, wg);
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < NS * 4; i++) reg_fence(s[i]);
        mbar_arrive(bEK);
        if (BN - 1 > r0) fa_mask<NS>(s, 0, r0, g, tig);
        fa_softmax<NS>(s, sl2, m0, m1, l0, l1, al0, al1);
        fa_pack<BN>(pa, s);
    }
    for (int j = 1; j < nkv; j++) {
        const int sk = j % NST, sv = (j - 1) % NST;
        float s[NS * 4];
        mbar_wait(bFK + 8 * sk, (j / NST) & 1);
        mbar_wait(bFV + 8 * sv, ((j - 1) / NST) & 1);
        wg_fence();
        fa_qk<HD, BM, BN>(s, sQ, sK + sk * TB, wg);
        wg_commit();
        fa_pv<HD, BN>(o, pa, sV + sv * TB);
        wg_commit();
        wg_wait1();
#pragma unroll
        for (int i = 0; i < NS * 4; i++) reg_fence(s[i]);
        mbar_arrive(bEK + 8 * sk);
        if (j * BN + BN - 1 > r0) fa_mask<NS>(s, j * BN, r0, g, tig);
        fa_softmax<NS>(s, sl2, m0, m1, l0, l1, al0, al1);
        wg_wait0();
#pragma unroll
        for (int i = 0; i < DT * 4; i++) reg_fence(o[i]);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) reg_fence(pa[kk][e]);
        mbar_arrive(bEV + 8 * sv);
        fa_rescale<DT>(o, al0, al1);
        fa_pack<BN>(pa, s);
    }
    {
        const int sv = (nkv - 1) % NST;
        mbar_wait(bFV + 8 * sv, ((nkv - 1) / NST) & 1);
        wg_fence();
        fa_pv<HD, BN>(o, pa, sV + sv * TB);
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < DT * 4; i++) reg_fence(o[i]);
    }
    fa_fwd_store<HD, OutT>(a, o, l0, l1, m0, m1, b, bh, h, r0, g, tig);
}

/* Two products over one K = HD loop, committed as one group: x = A1 B1^T, y = A2 B2^T for the
 * warpgroup's 64 rows of the NA-row A tiles (RA: their register fragments f1, f2 instead), N = the NB
 * rows of the B tiles (all K-major). */
template <int HD, int NA, int NB, bool RA>
__device__ __forceinline__ void fa_two_products(float* x, float* y, const uint32_t (*f1)[4], const uint32_t (*f2)[4],
                                                uint32_t a1, uint32_t a2, uint32_t b1, uint32_t b2, int wg) {
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        const uint32_t ao = (kk >> 2) * NA * 128 + wg * 64 * 128 + (kk & 3) * 32;
        const uint32_t bo = (kk >> 2) * NB * 128 + (kk & 3) * 32;
        if constexpr (RA) {
            wg_rs<NB>(x, f1[kk], wg_desc(b1 + bo, 16, 1024), kk > 0);
            wg_rs<NB>(y, f2[kk], wg_desc(b2 + bo, 16, 1024), kk > 0);
        } else {
            wg_ss<NB>(x, wg_desc(a1 + ao, 16, 1024), wg_desc(b1 + bo, 16, 1024), kk > 0);
            wg_ss<NB>(y, wg_desc(a2 + ao, 16, 1024), wg_desc(b2 + bo, 16, 1024), kk > 0);
        }
    }
    wg_commit();
}

/* ---- backward on wgmma: the dq and dk/dv kernels of above, a warpgroup per 64 rows ----------- */

/* The dq kernels' elementwise step over one BN-key tile (keys key0..) for the warp's rows r0 + g,
 * r0 + g + 8 (lse La, Lb in log2 units, delta Da, Db): P = 2^(S sl2 - lse) (0 for keys after the
 * row), dS = P (dP - delta), packed to BF16 A fragments. */
template <int BN>
__device__ __forceinline__ void fa_dq_ds(uint32_t (*da)[4], const float* s, const float* dp, float La, float Lb,
                                         float Da, float Db, float sl2, int key0, int r0, int g, int tig) {
    const bool diag = key0 + BN - 1 > r0;
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++) {
        float d[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = ex2(fmaf(s[nt * 4 + e], sl2, -(e < 2 ? La : Lb)));
            if (diag) {
                const int key = key0 + nt * 8 + 2 * tig + (e & 1), row = r0 + g + 8 * (e >> 1);
                if (key > row) p = 0.0f;
            }
            d[e] = p * (dp[nt * 4 + e] - (e < 2 ? Da : Db));
        }
        da[nt >> 1][(nt & 1) * 2] = pack2(d[0], d[1]);
        da[nt >> 1][(nt & 1) * 2 + 1] = pack2(d[2], d[3]);
    }
}

/* The dq kernels' end: dQ = c acc (rows ra, ra + 8 of query head h, those before T). */
template <int HD, typename OutT>
__device__ __forceinline__ void fa_dq_store(const FaArgs& a, const float* acc, int b, int h, int ra, int tig) {
    const int T = a.T, qs = a.H * HD, rb = ra + 8;
    OutT* og = (OutT*)a.dq + (size_t)b * T * qs + h * HD;
    const float sc = a.scale;
#pragma unroll
    for (int i = 0; i < HD / 8; i++) {
        const int col = i * 8 + 2 * tig;
        if (ra < T) store2<OutT>(og + (size_t)ra * qs + col, acc[i * 4 + 0] * sc, acc[i * 4 + 1] * sc);
        if (rb < T) store2<OutT>(og + (size_t)rb * qs + col, acc[i * 4 + 2] * sc, acc[i * 4 + 3] * sc);
    }
}

template <int HD, int NWG, int BN>
constexpr size_t dqwg_smem() { return (size_t)(2 * 64 * NWG + 4 * BN) * HD * 2 + 1024; }

/* CTA = (64 NWG queries, b*H + h); K, V stream in tiles of BN keys (two stages).
 * S = Q K^T, dP = dO V^T (shared-memory operands, K-major); dQ += dS K (dS from registers, K read
 * MN-major). */
template <int HD, int NWG, int BN, bool RA, typename OutT>
__global__ void __launch_bounds__(NWG * 128) k_fa_dq_wg(FaArgs a) {
    constexpr int BM = 64 * NWG, NT = NWG * 128, KS = HD / 16, NS = BN / 8, DT = HD / 8;
    extern __shared__ __align__(128) unsigned char smem[]; /* aligned to 1024 below */
    const uint32_t sQ = (smem_u32(smem) + 1023u) & ~1023u, sG = sQ + BM * HD * 2, sK = sG + BM * HD * 2,
                   sV = sK + 2 * BN * HD * 2;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int T = a.T, H = a.H, KV = a.KV;
    const int qt = fa_tile_rev(), bh = fa_row(), b = bh / H, h = bh % H, kh = h / (H / KV);
    const int qs = H * HD, ks = KV * HD;
    const bf16* qg = a.q + (size_t)b * T * qs + h * HD;
    const bf16* gg = a.dout + (size_t)b * T * qs + h * HD;
    const bf16* kg = a.k + (size_t)b * T * ks + kh * HD;
    const bf16* vg = a.v + (size_t)b * T * ks + kh * HD;
    const int q0 = qt * BM, g0 = q0 + wg * 64, r0 = g0 + warp * 16;
    const int nkv = (min(q0 + BM, T) - 1) / BN + 1;
    const float sl2 = a.sl2;

    load_tile_sw<BM, HD, NT>(sQ, qg, q0, T, qs, tid);
    load_tile_sw<BM, HD, NT>(sG, gg, q0, T, qs, tid);
    load_tile_sw<BN, HD, NT>(sK, kg, 0, T, ks, tid);
    load_tile_sw<BN, HD, NT>(sV, vg, 0, T, ks, tid);
    cp_commit();

    const int ra = r0 + g, rb = ra + 8;
    const float La = ra < T ? a.lse[(size_t)bh * T + ra] * FA_LOG2E : 0.0f;
    const float Lb = rb < T ? a.lse[(size_t)bh * T + rb] * FA_LOG2E : 0.0f;
    const float Da = ra < T ? a.delta[(size_t)bh * T + ra] : 0.0f;
    const float Db = rb < T ? a.delta[(size_t)bh * T + rb] : 0.0f;

    float acc[DT * 4];
#pragma unroll
    for (int i = 0; i < DT * 4; i++) acc[i] = 0.0f;
    uint32_t qf[RA ? KS : 1][4], gf[RA ? KS : 1][4]; /* RA: the warp's Q and dO rows as A fragments */

    for (int j = 0; j < nkv; j++) {
        cp_wait_all();
        fence_proxy_async();
        __syncthreads();
        if (RA && j == 0) {
            load_afrags_sw<BM, HD>(qf, sQ, wg * 64 + warp * 16, lane);
            load_afrags_sw<BM, HD>(gf, sG, wg * 64 + warp * 16, lane);
        }
        if (j + 1 < nkv) {
            const uint32_t st = ((j + 1) & 1) * BN * HD * 2;
            load_tile_sw<BN, HD, NT>(sK + st, kg, (j + 1) * BN, T, ks, tid);
            load_tile_sw<BN, HD, NT>(sV + st, vg, (j + 1) * BN, T, ks, tid);
        }
        cp_commit();
        if (j * BN > g0 + 63) continue; /* warpgroup-uniform */
        const uint32_t kb = sK + (j & 1) * BN * HD * 2, vb = sV + (j & 1) * BN * HD * 2;
        float s[NS * 4], dp[NS * 4];
        fa_two_products<HD, BM, BN, RA>(s, dp, qf, gf, sQ, sG, kb, vb, wg); /* S = Q K^T, dP = dO V^T */
        wg_wait0();
#pragma unroll
        for (int i = 0; i < NS * 4; i++) {
            reg_fence(s[i]);
            reg_fence(dp[i]);
        }
        uint32_t da[BN / 16][4];
        fa_dq_ds<BN>(da, s, dp, La, Lb, Da, Db, sl2, j * BN, r0, g, tig);
        wg_fence();
        fa_pv<HD, BN>(acc, da, kb); /* dQ += dS K */
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < DT * 4; i++) reg_fence(acc[i]);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) reg_fence(da[kk][e]);
    }
    fa_dq_store<HD, OutT>(a, acc, b, h, ra, tig);
}

template <int HD, int BN, int NST>
constexpr size_t dqws_smem() { return (size_t)(3 * 128 + 2 * NST * BN) * HD * 2 + 1024 + 8 * (1 + 2 * NST); }

/* delta = rowsum(dout * out) of one row, the one arithmetic of k_fa_delta and the warp-specialized dq
 * kernel (so the same bits): lane l adds the products of columns l, l + 32, .. in that order (a fused
 * multiply-add each), then a fixed butterfly gives every lane the sum. xy(c): column c's (dout, out). */
template <int HD, typename XY>
__device__ __forceinline__ float fa_delta_sum(XY xy, int lane) {
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < HD / 32; r++) {
        const float2 p = xy(lane + 32 * r);
        s = __fmaf_rn(p.x, p.y, s);
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) s += __shfl_xor_sync(0xffffffffu, s, d);
    return s;
}
/* The row from the dq kernel's swizzled BF16 tiles [HD / 64][128 rows][64] (g, o: shared-memory
 * addresses of dout's and out's tiles). */
template <int HD>
__device__ __forceinline__ float fa_delta_row_sw(uint32_t g, uint32_t o, int row, int lane) {
    return fa_delta_sum<HD>(
        [&](int col) {
            const int c = col & 63;
            const uint32_t off = (col >> 6) * 128 * 128 + row * 128 + (((c >> 3) ^ (row & 7)) << 4) + (c & 7) * 2;
            unsigned short x, y;
            asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(x) : "r"(g + off));
            asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(y) : "r"(o + off));
            return make_float2(__uint_as_float((uint32_t)x << 16), __uint_as_float((uint32_t)y << 16));
        },
        lane);
}

/* The warp-specialized dq kernel: k_fa_dq_wg's step (the same sums in the same order) with
 * k_fa_fwd_ws's structure. CTA = (128 queries, b*H + h): the producer's thread 0 loads Q and dO once
 * and K, V tiles of BN keys into a ring of NST stages (one "full" barrier a stage for both, one
 * "empty" of 256 arrivals); consumer warpgroup w owns queries 64 w.. . PIPE: S_{j+1}, dP_{j+1}
 * issued behind dQ_j += dS_j K_j (the elementwise step of j + 1 then waits only for them). RA: the
 * warp's Q and dO rows as register A fragments (S and dP then read only K and V from shared memory:
 * with BN = 64 the two shared-memory operands of a 64 x 64 x 16 product are at the SM's shared-memory
 * rate). */
template <int HD, int BN, int NST, bool PIPE, bool RA, typename OutT>
__global__ void __launch_bounds__(384, 1)
    k_fa_dq_ws(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tg,
               const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
               const __grid_constant__ CUtensorMap to, FaArgs a) {
    constexpr int BM = 128, NS = BN / 8, DT = HD / 8, TB = BN * HD * 2;
    extern __shared__ __align__(128) unsigned char smem[]; /* aligned to 1024 below */
    const uint32_t sQ = (smem_u32(smem) + 1023u) & ~1023u, sG = sQ + BM * HD * 2, sO = sG + BM * HD * 2,
                   sK = sO + BM * HD * 2, sV = sK + NST * TB;
    const bool DL = a.delta_out != NULL; /* delta made here from the out tile (to), not read */
    const uint32_t bQ = sV + NST * TB, bF = bQ + 8, bE = bF + 8 * NST;
    const int tid = threadIdx.x, T = a.T, H = a.H, KV = a.KV;
    const int qt = fa_tile_rev(), bh = fa_row(), b = bh / H, h = bh % H, kh = h / (H / KV);
    const int q0 = qt * BM, nkv = (min(q0 + BM, T) - 1) / BN + 1;
    if (tid == 0) {
        mbar_init(bQ, 1);
        ws_ring_init(bF, bE, NST);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (tid < 128) { /* the producer warpgroup */
        reg_dec<FA_PRODUCER_REGS>();
        if (tid == 0) {
            mbar_expect_tx(bQ, (DL ? 3 : 2) * BM * HD * 2);
            tma_tile<BM, HD>(sQ, &tq, h, q0, b, bQ);
            tma_tile<BM, HD>(sG, &tg, h, q0, b, bQ);
            if (DL) tma_tile<BM, HD>(sO, &to, h, q0, b, bQ);
            for (int j = 0; j < nkv; j++) {
                const int s = j % NST, r = j / NST;
                if (r) mbar_wait(bE + 8 * s, (r - 1) & 1);
                mbar_expect_tx(bF + 8 * s, 2 * TB);
                tma_tile<BN, HD>(sK + s * TB, &tk, kh, j * BN, b, bF + 8 * s);
                tma_tile<BN, HD>(sV + s * TB, &tv, kh, j * BN, b, bF + 8 * s);
            }
        }
        return;
    }
    reg_inc<FA_CONSUMER_REGS>();
    const int ct = tid - 128, wg = ct >> 7, warp = (ct >> 5) & 3, lane = ct & 31, g = lane >> 2, tig = lane & 3;
    const int g0 = q0 + wg * 64, r0 = g0 + warp * 16, ra = r0 + g, rb = ra + 8;
    const int nj = min(nkv, (g0 + 63) / BN + 1); /* this warpgroup's tiles: keys up to its last query */
    const float sl2 = a.sl2;
    const float La = ra < T ? a.lse[(size_t)bh * T + ra] * FA_LOG2E : 0.0f;
    const float Lb = rb < T ? a.lse[(size_t)bh * T + rb] * FA_LOG2E : 0.0f;
    float Da = 0.0f, Db = 0.0f;
    mbar_wait(bQ, 0);
    if (DL) { /* the warp's 16 rows, each summed by the whole warp; rows past T (zero-filled) are not stored */
#pragma unroll 1
        for (int i = 0; i < 16; i++) {
            const float d = fa_delta_row_sw<HD>(sG, sO, wg * 64 + warp * 16 + i, lane);
            if (i == g) Da = d;
            if (i == g + 8) Db = d;
        }
        if (tig == 0) {
            if (ra < T) a.delta_out[(size_t)bh * T + ra] = Da;
            if (rb < T) a.delta_out[(size_t)bh * T + rb] = Db;
        }
    } else {
        Da = ra < T ? a.delta[(size_t)bh * T + ra] : 0.0f;
        Db = rb < T ? a.delta[(size_t)bh * T + rb] : 0.0f;
    }
    float acc[DT * 4];
#pragma unroll
    for (int i = 0; i < DT * 4; i++) acc[i] = 0.0f;
    float s[NS * 4], dp[NS * 4];
    uint32_t da[BN / 16][4];
    uint32_t qf[RA ? HD / 16 : 1][4], gf[RA ? HD / 16 : 1][4]; /* RA: the warp's Q and dO rows */
    auto sp_wait = [&]() { /* S, dP of the last issued group, then dS */
        wg_wait0();
#pragma unroll
        for (int i = 0; i < NS * 4; i++) {
            reg_fence(s[i]);
            reg_fence(dp[i]);
        }
    };
    auto da_fence = [&]() {
#pragma unroll
        for (int i = 0; i < DT * 4; i++) reg_fence(acc[i]);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) reg_fence(da[kk][e]);
    };
    if constexpr (RA) {
        load_afrags_sw<BM, HD>(qf, sQ, wg * 64 + warp * 16, lane);
        load_afrags_sw<BM, HD>(gf, sG, wg * 64 + warp * 16, lane);
    }
    if (PIPE && nj > 0) {
        mbar_wait(bF, 0);
        fa_two_products<HD, BM, BN, RA>(s, dp, qf, gf, sQ, sG, sK, sV, wg); /* S_0, dP_0 */
        sp_wait();
        fa_dq_ds<BN>(da, s, dp, La, Lb, Da, Db, sl2, 0, r0, g, tig);
    }
    for (int j = 0; j < nkv; j++) {
        const int st = j % NST;
        const uint32_t kb = sK + st * TB, vb = sV + st * TB;
        if (j < nj) {
            if constexpr (PIPE) {
                wg_fence();
                fa_pv<HD, BN>(acc, da, kb); /* dQ += dS_j K_j */
                wg_commit();
                if (j + 1 < nj) {
                    const int sn = (j + 1) % NST;
                    mbar_wait(bF + 8 * sn, ((j + 1) / NST) & 1);
                    fa_two_products<HD, BM, BN, RA>(s, dp, qf, gf, sQ, sG, sK + sn * TB, sV + sn * TB, wg);
                    wg_wait1();
                    da_fence();
                    mbar_arrive(bE + 8 * st);
                    sp_wait();
                    fa_dq_ds<BN>(da, s, dp, La, Lb, Da, Db, sl2, (j + 1) * BN, r0, g, tig);
                } else {
                    wg_wait0();
                    da_fence();
                    mbar_arrive(bE + 8 * st);
                }
            } else {
                mbar_wait(bF + 8 * st, (j / NST) & 1);
                fa_two_products<HD, BM, BN, RA>(s, dp, qf, gf, sQ, sG, kb, vb, wg); /* S = Q K^T, dP = dO V^T */
                sp_wait();
                fa_dq_ds<BN>(da, s, dp, La, Lb, Da, Db, sl2, j * BN, r0, g, tig);
                wg_fence();
                fa_pv<HD, BN>(acc, da, kb); /* dQ += dS K */
                wg_commit();
                wg_wait0();
                da_fence();
                mbar_arrive(bE + 8 * st);
            }
        } else { /* past this warpgroup's diagonal: the stage is released once it is full */
            mbar_wait(bF + 8 * st, (j / NST) & 1);
            mbar_arrive(bE + 8 * st);
        }
    }
    fa_dq_store<HD, OutT>(a, acc, b, h, ra, tig);
}

/* One query tile of the dk/dv kernels for the warpgroup's 64 keys (rows wg * 64.. of the BN-key K and
 * V tiles; RA: their A fragments kf, vf in registers): S^T = K Q^T, dP^T = V dO^T (K-major), then
 * P = 2^(S sl2 - lse log2 e) (0 for queries before the key), dS = P (dP - delta), dV += P^T dO,
 * dK += dS^T Q (P^T, dS^T from registers, dO and Q read MN-major). Lt, Dt: the tile's lse, delta. */
struct NoOp {
    __device__ void operator()() const {}
};
/* S^T, dP^T and from them the BF16 fragments of P^T (pa) and dS^T (da); mid() runs while the tensor
 * cores make the products. */
template <int HD, int BN, int BM, bool RA, typename Mid = NoOp>
__device__ __forceinline__ void fa_dkv_sp(uint32_t (*pa)[4], uint32_t (*da)[4], const uint32_t (*kf)[4],
                                          const uint32_t (*vf)[4], uint32_t sK, uint32_t sV, uint32_t qb, uint32_t gb,
                                          const float* Lt, const float* Dt, int t0, int kw, int wg, int g, int tig,
                                          float sl2, Mid mid = Mid()) {
    constexpr int NS = BM / 8;
    float s[NS * 4], dp[NS * 4];
    fa_two_products<HD, BN, BM, RA>(s, dp, kf, vf, sK, sV, qb, gb, wg); /* S^T = K Q^T, dP^T = V dO^T */
    mid();
    wg_wait0();
#pragma unroll
    for (int i = 0; i < NS * 4; i++) {
        reg_fence(s[i]);
        reg_fence(dp[i]);
    }
    const bool diag = t0 < kw + 15; /* some query of the tile precedes some key of the warp */
#pragma unroll
    for (int nt = 0; nt < NS; nt++) {
        float p[4], d[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int tl = nt * 8 + 2 * tig + (e & 1);
            float pe = ex2(fmaf(s[nt * 4 + e], sl2, -(Lt[tl] * FA_LOG2E)));
            if (diag) {
                const int key = kw + g + 8 * (e >> 1);
                if (t0 + tl < key) pe = 0.0f;
            }
            p[e] = pe;
            d[e] = pe * (dp[nt * 4 + e] - Dt[tl]);
        }
        pa[nt >> 1][(nt & 1) * 2] = pack2(p[0], p[1]);
        pa[nt >> 1][(nt & 1) * 2 + 1] = pack2(p[2], p[3]);
        da[nt >> 1][(nt & 1) * 2] = pack2(d[0], d[1]);
        da[nt >> 1][(nt & 1) * 2 + 1] = pack2(d[2], d[3]);
    }
}
/* dV += P^T dO, dK += dS^T Q (issued, not committed). */
template <int HD, int BM>
__device__ __forceinline__ void fa_dkv_acc(float* dk, float* dv, const uint32_t (*pa)[4], const uint32_t (*da)[4],
                                           uint32_t qb, uint32_t gb) {
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) {
        wg_rs_tb<HD>(dv, pa[kk], wg_desc(gb + kk * 16 * 128, BM * 128, 1024));
        wg_rs_tb<HD>(dk, da[kk], wg_desc(qb + kk * 16 * 128, BM * 128, 1024));
    }
}
template <int HD, int BM>
__device__ __forceinline__ void fa_dkv_done(float* dk, float* dv, uint32_t (*pa)[4], uint32_t (*da)[4]) {
#pragma unroll
    for (int i = 0; i < HD / 2; i++) {
        reg_fence(dk[i]);
        reg_fence(dv[i]);
    }
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            reg_fence(pa[kk][e]);
            reg_fence(da[kk][e]);
        }
}
template <int HD, int BN, int BM, bool RA>
__device__ __forceinline__ void fa_dkv_step(float* dk, float* dv, const uint32_t (*kf)[4], const uint32_t (*vf)[4],
                                            uint32_t sK, uint32_t sV, uint32_t qb, uint32_t gb, const float* Lt,
                                            const float* Dt, int t0, int kw, int wg, int g, int tig, float sl2) {
    uint32_t pa[BM / 16][4], da[BM / 16][4];
    fa_dkv_sp<HD, BN, BM, RA>(pa, da, kf, vf, sK, sV, qb, gb, Lt, Dt, t0, kw, wg, g, tig, sl2);
    wg_fence();
    fa_dkv_acc<HD, BM>(dk, dv, pa, da, qb, gb);
    wg_commit();
    wg_wait0();
    fa_dkv_done<HD, BM>(dk, dv, pa, da);
}
/* dK (times the scale) and dV of keys kw + g, kw + g + 8. */
template <int HD, typename OutT>
__device__ __forceinline__ void fa_dkv_store(const FaArgs& a, const float* dk, const float* dv, int b, int kh, int kw,
                                             int g, int tig) {
    const int T = a.T, ks = a.KV * HD;
    OutT* dkg = (OutT*)a.dk + (size_t)b * T * ks + kh * HD;
    OutT* dvg = (OutT*)a.dv + (size_t)b * T * ks + kh * HD;
    const int ja = kw + g, jb = ja + 8;
    const float sc = a.scale;
#pragma unroll
    for (int i = 0; i < HD / 8; i++) {
        const int col = i * 8 + 2 * tig;
        if (ja < T) {
            store2<OutT>(dkg + (size_t)ja * ks + col, dk[i * 4 + 0] * sc, dk[i * 4 + 1] * sc);
            store2<OutT>(dvg + (size_t)ja * ks + col, dv[i * 4 + 0], dv[i * 4 + 1]);
        }
        if (jb < T) {
            store2<OutT>(dkg + (size_t)jb * ks + col, dk[i * 4 + 2] * sc, dk[i * 4 + 3] * sc);
            store2<OutT>(dvg + (size_t)jb * ks + col, dv[i * 4 + 2], dv[i * 4 + 3]);
        }
    }
}

template <int HD, int NWG, int BM>
constexpr size_t dkvwg_smem() { return (size_t)(2 * 64 * NWG + 4 * BM) * HD * 2 + 4 * BM * sizeof(float) + 1024; }

/* CTA = (64 NWG keys, b*KV + kvh); Q, dO, lse, delta stream in tiles of BM queries over the group's
 * heads (increasing h) and the query tiles from the diagonal on (increasing t): fa_dkv_step each. */
template <int HD, int NWG, int BM, bool RA, typename OutT>
__global__ void __launch_bounds__(NWG * 128) k_fa_dkv_wg(FaArgs a) {
    constexpr int BN = 64 * NWG, NT = NWG * 128, KS = HD / 16, DT = HD / 8;
    static_assert(NT >= BM, "lse/delta rows: one per thread");
    static_assert(BN % BM == 0, "a kv tile starts on a query tile");
    extern __shared__ __align__(128) unsigned char smem[]; /* aligned to 1024 below */
    const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
    const uint32_t sK = base, sV = sK + BN * HD * 2, sQ = sV + BN * HD * 2, sG = sQ + 2 * BM * HD * 2;
    float* Ls = (float*)(smem + (base - smem_u32(smem)) + (size_t)(2 * BN + 4 * BM) * HD * 2); /* [2][BM] */
    float* Ds = Ls + 2 * BM;                                                                   /* [2][BM] */
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int T = a.T, H = a.H, KV = a.KV, G = H / KV;
    const int kt = fa_tile(), bk = fa_row(), b = bk / KV, kh = bk % KV;
    const int qs = H * HD, ks = KV * HD;
    const bf16* kg = a.k + (size_t)b * T * ks + kh * HD;
    const bf16* vg = a.v + (size_t)b * T * ks + kh * HD;
    const int k0 = kt * BN, kg0 = k0 + wg * 64, kw = kg0 + warp * 16;
    const int qt0 = k0 / BM, nq = (T + BM - 1) / BM - qt0, total = G * nq;

    load_tile_sw<BN, HD, NT>(sK, kg, k0, T, ks, tid);
    load_tile_sw<BN, HD, NT>(sV, vg, k0, T, ks, tid);
    auto issue = [&](int it, int st) {
        const int h = kh * G + it / nq, t0 = (qt0 + it % nq) * BM;
        const size_t off = (size_t)b * T * qs + h * HD;
        load_tile_sw<BM, HD, NT>(sQ + st * BM * HD * 2, a.q + off, t0, T, qs, tid);
        load_tile_sw<BM, HD, NT>(sG + st * BM * HD * 2, a.dout + off, t0, T, qs, tid);
        if (tid < BM) { /* asynchronous too (a plain load stalled the warpgroup here every tile); rows
                         * past T read as 0: their Q and dO rows are zero, so are their products */
            const int t = t0 + tid;
            const size_t row = ((size_t)b * H + h) * T + (t < T ? t : 0);
            cp4(smem_u32(Ls + st * BM + tid), a.lse + row, t < T ? 4 : 0);
            cp4(smem_u32(Ds + st * BM + tid), a.delta + row, t < T ? 4 : 0);
        }
    };
    issue(0, 0);
    cp_commit();

    float dk[DT * 4], dv[DT * 4];
#pragma unroll
    for (int i = 0; i < DT * 4; i++) dk[i] = dv[i] = 0.0f;
    uint32_t kf[RA ? KS : 1][4], vf[RA ? KS : 1][4]; /* RA: the warp's K and V rows as A fragments */

    for (int it = 0; it < total; it++) {
        cp_wait_all();
        fence_proxy_async();
        __syncthreads();
        if (RA && it == 0) {
            load_afrags_sw<BN, HD>(kf, sK, wg * 64 + warp * 16, lane);
            load_afrags_sw<BN, HD>(vf, sV, wg * 64 + warp * 16, lane);
        }
        if (it + 1 < total) issue(it + 1, (it + 1) & 1);
        cp_commit();
        const int st = it & 1, t0 = (qt0 + it % nq) * BM;
        if (t0 + BM - 1 < kg0) continue; /* warpgroup-uniform: every query before every key */
        fa_dkv_step<HD, BN, BM, RA>(dk, dv, kf, vf, sK, sV, sQ + st * BM * HD * 2, sG + st * BM * HD * 2, Ls + st * BM,
                                    Ds + st * BM, t0, kw, wg, g, tig, a.sl2);
    }
    fa_dkv_store<HD, OutT>(a, dk, dv, b, kh, kw, g, tig);
}

/* The warp-specialized dk/dv kernel (k_fa_fwd_ws's structure): CTA = a producer warpgroup and two
 * consumer warpgroups of 64 keys each (128 keys, b*KV + kvh). The producer's thread 0 loads K, V once
 * and the Q, dO tiles of BM queries by TMA into an NST-stage ring (the same order as k_fa_dkv_wg: the
 * group's heads, then the query tiles from the diagonal on); its warp 1 loads the tiles' lse and
 * delta (0 past T, as there) and arrives on the stage's second full barrier. Consumers wait for a
 * stage, run fa_dkv_step (or skip a tile wholly before their keys) and release it. The same sums
 * in the same order as k_fa_dkv_wg<HD, 2, BM>: the same bytes. */
/* The producer warpgroup of the warp-specialized dk/dv kernels (k_fa_dkv_ws, k_fa_bwd_ws), after
 * setmaxnreg has lowered its registers: thread 0 loads K, V once (bKV) and the Q, dO tiles of BM
 * queries by TMA (bF), warp 1 the tiles' lse and delta (0 past T; bL, 32 arrivals), each into stage
 * it % NST once the consumers released its previous use (bE); the order of k_fa_dkv_wg (the group's
 * heads, then the query tiles from qt0 on), or with MO the query tiles outer, the heads inner
 * (k_fa_bwd_ws: dkv_tile). */
struct DkvRing {
    uint32_t sK, sV, sQ, sG, bKV, bF, bL, bE;
    float *Ls, *Ds;
};
/* Step it of a dk/dv CTA over nq query tiles from qt0 and the group's G heads: its head offset in
 * the group and its query tile. */
template <bool MO>
__device__ __forceinline__ void dkv_tile(int it, int nq, int G, int qt0, int& hg, int& m) {
    hg = MO ? it % G : it / nq;
    m = qt0 + (MO ? it / G : it % nq);
}
template <int HD, int BM, int NST, bool MO = false>
__device__ __forceinline__ void dkv_produce(const CUtensorMap* tq, const CUtensorMap* tg, const CUtensorMap* tk,
                                            const CUtensorMap* tv, const FaArgs& a, const DkvRing& r, int b, int kh,
                                            int k0, int qt0, int nq, int tid) {
    constexpr int BN = 128, TB = BM * HD * 2;
    const int G = a.H / a.KV, total = G * nq;
    if (tid == 0) {
        mbar_expect_tx(r.bKV, 2 * BN * HD * 2);
        tma_tile<BN, HD>(r.sK, tk, kh, k0, b, r.bKV);
        tma_tile<BN, HD>(r.sV, tv, kh, k0, b, r.bKV);
        for (int it = 0; it < total; it++) {
            const int s = it % NST, u = it / NST;
            int hg, m;
            dkv_tile<MO>(it, nq, G, qt0, hg, m);
            const int h = kh * G + hg, t0 = m * BM;
            if (u) mbar_wait(r.bE + 8 * s, (u - 1) & 1);
            mbar_expect_tx(r.bF + 8 * s, 2 * TB);
            tma_tile<BM, HD>(r.sQ + s * TB, tq, h, t0, b, r.bF + 8 * s);
            tma_tile<BM, HD>(r.sG + s * TB, tg, h, t0, b, r.bF + 8 * s);
        }
    } else if (tid >= 32 && tid < 64) {
        const int lane = tid - 32;
        for (int it = 0; it < total; it++) {
            const int s = it % NST, u = it / NST;
            int hg, m;
            dkv_tile<MO>(it, nq, G, qt0, hg, m);
            const int h = kh * G + hg, t0 = m * BM;
            if (u) mbar_wait(r.bE + 8 * s, (u - 1) & 1);
            const size_t row = ((size_t)b * a.H + h) * a.T;
#pragma unroll
            for (int i = lane; i < BM; i += 32) {
                const int t = t0 + i;
                r.Ls[s * BM + i] = t < a.T ? a.lse[row + t] : 0.0f;
                r.Ds[s * BM + i] = t < a.T ? a.delta[row + t] : 0.0f;
            }
            mbar_arrive(r.bL + 8 * s);
        }
    }
}
/* Their barriers (thread 0, before the block's first __syncthreads). */
template <int NST>
__device__ __forceinline__ void dkv_bars_init(const DkvRing& r) {
    mbar_init(r.bKV, 1);
    for (int s = 0; s < NST; s++) {
        mbar_init(r.bF + 8 * s, 1);
        mbar_init(r.bL + 8 * s, 32);
        mbar_init(r.bE + 8 * s, 256);
    }
}

template <int HD, int BM, int NST>
constexpr size_t dkvws_smem() {
    return (size_t)(2 * 128 + 2 * NST * BM) * HD * 2 + 2 * NST * BM * sizeof(float) + 1024 + 8 * (1 + 3 * NST);
}
template <int HD, int BM, int NST, typename OutT>
__global__ void __launch_bounds__(384, 1)
    k_fa_dkv_ws(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tg,
                const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv, FaArgs a) {
    constexpr int BN = 128, DT = HD / 8, TB = BM * HD * 2;
    extern __shared__ __align__(128) unsigned char smem[]; /* aligned to 1024 below */
    const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
    const uint32_t sK = base, sV = sK + BN * HD * 2, sQ = sV + BN * HD * 2, sG = sQ + NST * TB;
    float* Ls = (float*)(smem + (base - smem_u32(smem)) + (size_t)(2 * BN + 2 * NST * BM) * HD * 2); /* [NST][BM] */
    float* Ds = Ls + NST * BM;                                                                        /* [NST][BM] */
    const uint32_t bKV = smem_u32(Ds + NST * BM), bF = bKV + 8, bL = bF + 8 * NST, bE = bL + 8 * NST;
    const DkvRing ring = {sK, sV, sQ, sG, bKV, bF, bL, bE, Ls, Ds};
    const int tid = threadIdx.x, T = a.T, H = a.H, KV = a.KV, G = H / KV;
    const int kt = fa_tile(), bk = fa_row(), b = bk / KV, kh = bk % KV;
    const int k0 = kt * BN, qt0 = k0 / BM, nq = (T + BM - 1) / BM - qt0, total = G * nq;
    if (tid == 0) {
        dkv_bars_init<NST>(ring);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (tid < 128) { /* the producer warpgroup */
        reg_dec<FA_DKV_PRODUCER_REGS>();
        dkv_produce<HD, BM, NST>(&tq, &tg, &tk, &tv, a, ring, b, kh, k0, qt0, nq, tid);
        return;
    }
    reg_inc<FA_DKV_CONSUMER_REGS>();
    const int ct = tid - 128, wg = ct >> 7, warp = (ct >> 5) & 3, lane = ct & 31, g = lane >> 2, tig = lane & 3;
    const int kg0 = k0 + wg * 64, kw = kg0 + warp * 16;
    float dk[DT * 4], dv[DT * 4];
#pragma unroll
    for (int i = 0; i < DT * 4; i++) dk[i] = dv[i] = 0.0f;
    mbar_wait(bKV, 0);
    for (int it = 0; it < total; it++) {
        const int s = it % NST, ph = (it / NST) & 1, t0 = (qt0 + it % nq) * BM;
        /* a warpgroup that skips the tile waits for it too: else it could release the stage's next use
         * before the other one released this one */
        mbar_wait(bF + 8 * s, ph);
        mbar_wait(bL + 8 * s, ph);
        if (t0 + BM - 1 >= kg0) /* warpgroup-uniform: else every query before every key */
            fa_dkv_step<HD, BN, BM, false>(dk, dv, NULL, NULL, sK, sV, sQ + s * TB, sG + s * TB, Ls + s * BM,
                                           Ds + s * BM, t0, kw, wg, g, tig, a.sl2);
        mbar_arrive(bE + 8 * s);
    }
    fa_dkv_store<HD, OutT>(a, dk, dv, b, kh, kw, g, tig);
}

/* ---- backward in one pass (warp-specialized, deterministic) ------------------------------------
 * k_fa_dkv_ws with dQ folded in, so that S and dP are made once (5 products, not the 7 of the dq and
 * dk/dv kernels). CTA = key tile n of 128 keys (two consumer warpgroups of 64) over 64-query tiles m;
 * each step also stores dS^T (BF16, [128 keys][64 queries], swizzled) in shared memory and forms a
 * 64 x 64 piece of dQ_m = dS K: HD 128, warpgroup w the columns 64 w.. over all 128 keys; HD 64, the
 * whole width over its own 64 keys. The pieces of one dQ tile are summed in FP32 in a fixed order,
 * highest key first (HD 128: n = m / 2 down to 0 per column half; HD 64: (n, w) = (m / 2, 1), (m / 2,
 * 0), ... (0, 0)), through a turn counter per tile piece: a warpgroup waits for its turn (ld.acquire),
 * loads the partial sum from dqa as the starting value of its dQ product (the first one starts from
 * 0), stores the result (the last one into dq, scaled) and hands the turn on (st.release). No atomics: the same order every run, the same bytes. The key
 * tiles are launched highest first (blockIdx.x 0 is the last tile), so that a counter only ever
 * waits for a CTA launched before it. At HD 64 a CTA's steps run the query tiles outer and the
 * group's heads inner (dkv_tile<true>; dK, dV summed in that order, not k_fa_dkv_ws's): the piece
 * (h, m) is then step G (m - 2n) + h of key tile n and 2G steps earlier in key tile n + 1, its
 * predecessor, at every m (with the heads outer that lead is 2 steps at the first head). At HD 128
 * the heads stay outer: the partial sums in flight then span fewer heads and stay in L2 (measured
 * on the H200, 2026-12-05: the query tiles outer 3.39 ms against 3.11 at (2, 32/8, 4096, 128), and
 * 1.12 against 1.21 ms at (4, 32/8, 2048, 64)). */
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

template <int HD, int NST>
constexpr size_t bws_smem() { return dkvws_smem<HD, 64, NST>() + 2 * 128 * 64 * 2 + 4 * 64 * 64 * 4 + 8 * 8; }

template <int HD, int NST, typename OutT>
__global__ void __launch_bounds__(384, 1)
    k_fa_bwd_ws(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tg,
                const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv, FaArgs a) {
    constexpr int BN = 128, BM = 64, DT = HD / 8, TB = BM * HD * 2, SB = 128 * 64 * 2;
    extern __shared__ __align__(128) unsigned char smem[]; /* aligned to 1024 below */
    const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
    const uint32_t sK = base, sV = sK + BN * HD * 2, sQ = sV + BN * HD * 2, sG = sQ + NST * TB, sS = sG + NST * TB;
    const uint32_t sP = sS + 2 * SB; /* dQ's partial sums: [warpgroup][2 buffers][64 rows][64 floats] */
    float* Ls = (float*)(smem + (base - smem_u32(smem)) + (size_t)(sP - base) + 4 * 64 * 64 * 4); /* [NST][BM] */
    float* Ds = Ls + NST * BM;                                                            /* [NST][BM] */
    const uint32_t bKV = smem_u32(Ds + NST * BM), bF = bKV + 8, bL = bF + 8 * NST, bE = bL + 8 * NST;
    /* the partial sums' rows: 16-byte chunk c of row r at c ^ (r & 7); their full (count 32: the loading
     * warp) and empty (128: the warpgroup) barriers */
    const uint32_t bPF = bE + 8 * NST, bPE = bPF + 4 * 8;
    const DkvRing ring = {sK, sV, sQ, sG, bKV, bF, bL, bE, Ls, Ds};
    const int tid = threadIdx.x, T = a.T, H = a.H, KV = a.KV, G = H / KV, NQT = (T + BM - 1) / BM;
    const int n = gridDim.x - 1 - blockIdx.x, bk = blockIdx.y, b = bk / KV, kh = bk % KV;
    const int k0 = n * BN, qt0 = k0 / BM, nq = NQT - qt0, total = G * nq, qs = H * HD;
    if (tid == 0) {
        dkv_bars_init<NST>(ring);
        for (int i = 0; i < 4; i++) {
            mbar_init(bPF + 8 * i, 32);
            mbar_init(bPE + 8 * i, 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    /* piece (h, m) of warpgroup w: its turn in the tile's fixed order, its counter, its first column */
    auto piece = [&](int h, int m, int w, unsigned& turn, unsigned*& sem, int& cb) {
        const int nmax = m >> 1;
        turn = HD == 128 ? (unsigned)(nmax - n) : (unsigned)(2 * (nmax - n) + 1 - w);
        sem = a.sem + (((size_t)b * H + h) * NQT + m) * 2 + (HD == 128 ? w : 0);
        cb = HD == 128 ? w * 64 : 0;
    };
    __syncthreads();
    if (tid < 128) { /* the producer warpgroup: k_fa_dkv_ws's, and warps 2, 3 for the partial sums */
        reg_dec<FA_DKV_PRODUCER_REGS>();
        if (tid < 64) {
            dkv_produce<HD, BM, NST, HD == 64>(&tq, &tg, &tk, &tv, a, ring, b, kh, k0, qt0, nq, tid);
        } else { /* warps 2, 3: the partial sums of warpgroup w, once its turn has come */
            const int w = (tid >> 5) - 2, lane = tid & 31;
            for (int it = 0; it < total; it++) {
                int hg, m;
                dkv_tile<HD == 64>(it, nq, G, qt0, hg, m);
                const int q = it & 1, h = kh * G + hg, t0 = m * BM;
                unsigned turn, *sem;
                int cb;
                piece(h, m, w, turn, sem, cb);
                const uint32_t buf = sP + (w * 2 + q) * 64 * 64 * 4, bar = (w * 2 + q) * 8;
                if (it >= 2) mbar_wait(bPE + bar, ((it >> 1) - 1) & 1);
                if (turn) {
                    if (lane == 0)
                        while (ld_acquire(sem) != turn) {
                        }
                    __syncwarp();
                    const float* src = a.dqa + ((size_t)b * T + t0) * qs + h * HD + cb;
                    for (int i = lane; i < 64 * 16; i += 32) { /* 64 rows x 16 chunks of 4 floats */
                        const int r = i >> 4, c = i & 15, t = t0 + r;
                        cp16(buf + r * 256 + ((c ^ (r & 7)) << 4), src + (size_t)(t < T ? r : 0) * qs + c * 4,
                             t < T ? 16 : 0);
                    }
                    cp_commit();
                    cp_wait_all();
                }
                mbar_arrive(bPF + bar);
            }
        }
        return;
    }
    reg_inc<FA_DKV_CONSUMER_REGS>();
    const int ct = tid - 128, wg = ct >> 7, warp = (ct >> 5) & 3, lane = ct & 31, g = lane >> 2, tig = lane & 3;
    const int kw = k0 + wg * 64 + warp * 16, srow = wg * 64 + warp * 16 + g; /* dS^T rows (keys) of this thread */
    float dk[DT * 4], dv[DT * 4];
#pragma unroll
    for (int i = 0; i < DT * 4; i++) dk[i] = dv[i] = 0.0f;
    unsigned* rel = NULL; /* the turn counter to hand on, and its value */
    unsigned rel_v = 0;
    mbar_wait(bKV, 0);
    for (int it = 0; it < total; it++) {
        int hg, m;
        dkv_tile<HD == 64>(it, nq, G, qt0, hg, m);
        const int s = it % NST, ph = (it / NST) & 1, h = kh * G + hg, t0 = m * BM;
        const uint32_t qb = sQ + s * TB, gb = sG + s * TB, sb = sS + (it & 1) * SB;
        mbar_wait(bF + 8 * s, ph);
        mbar_wait(bL + 8 * s, ph);
        uint32_t pa[BM / 16][4], da[BM / 16][4];
        /* the previous step's turn handed on under this step's products (a release store waits for the
         * partial sums' stores: not in the warpgroup's path) */
        auto release = [&]() {
            if ((ct & 127) == 0 && rel) st_release(rel, rel_v);
        };
        fa_dkv_sp<HD, BN, BM, false>(pa, da, NULL, NULL, sK, sV, qb, gb, Ls + s * BM, Ds + s * BM, t0, kw, wg, g, tig,
                                     a.sl2, release);
        /* this piece's turn in the tile's fixed order (the loading warp waited for it): the sum so far,
         * staged in shared memory, is the dQ product's starting value (worked out after the products
         * above, so that none of it is live through them) */
        unsigned turn, *sem;
        int cb;
        piece(h, m, wg, turn, sem, cb);
        const bool first = turn == 0;
        float dq[32];
        {
            const uint32_t buf = sP + (wg * 2 + (it & 1)) * 64 * 64 * 4, bar = (wg * 2 + (it & 1)) * 8;
            mbar_wait(bPF + bar, (it >> 1) & 1);
            const int r0 = warp * 16 + g;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int c = 2 * i + (tig >> 1), o = (tig & 1) * 8;
                float2 va = make_float2(0.0f, 0.0f), vb = va;
                if (!first) {
                    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n"
                                 : "=f"(va.x), "=f"(va.y)
                                 : "r"(buf + r0 * 256 + ((c ^ (r0 & 7)) << 4) + o));
                    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n"
                                 : "=f"(vb.x), "=f"(vb.y)
                                 : "r"(buf + (r0 + 8) * 256 + ((c ^ (r0 & 7)) << 4) + o));
                }
                dq[i * 4 + 0] = va.x;
                dq[i * 4 + 1] = va.y;
                dq[i * 4 + 2] = vb.x;
                dq[i * 4 + 3] = vb.y;
            }
            mbar_arrive(bPE + bar);
        }
#pragma unroll
        for (int nt = 0; nt < BM / 8; nt++) { /* dS^T into [keys][queries] (16-byte chunk nt of row r at nt ^ (r & 7)) */
            const uint32_t o = ((nt ^ (srow & 7)) << 4) + tig * 4;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sb + srow * 128 + o), "r"(da[nt >> 1][(nt & 1) * 2]) : "memory");
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sb + (srow + 8) * 128 + o), "r"(da[nt >> 1][(nt & 1) * 2 + 1])
                         : "memory");
        }
        fence_proxy_async();
        if (HD == 128) bar_sync(1, 256); /* both warpgroups' dS^T stored (HD 64 reads only its own rows) */
        else bar_sync(2 + wg, 128);
        wg_fence();
        fa_dkv_acc<HD, BM>(dk, dv, pa, da, qb, gb);
        if constexpr (HD == 128) {
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++)
                wg_ss_n64_tt(dq, wg_desc(sb + kk * 16 * 128, 128 * 128, 1024),
                             wg_desc(sK + wg * BN * 128 + kk * 16 * 128, BN * 128, 1024), 1);
        } else {
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                wg_ss_n64_tt(dq, wg_desc(sb + (wg * 64 + kk * 16) * 128, 128 * 128, 1024),
                             wg_desc(sK + (wg * 64 + kk * 16) * 128, BN * 128, 1024), 1);
        }
        wg_commit();
        wg_wait0();
        fa_dkv_done<HD, BM>(dk, dv, pa, da);
#pragma unroll
        for (int i = 0; i < 32; i++) reg_fence(dq[i]);
        mbar_arrive(bE + 8 * s);
        const bool last = n == 0 && (HD == 128 || wg == 0);
        const int ra = t0 + warp * 16 + g, rb = ra + 8;
        float* pa0 = a.dqa + ((size_t)b * T + ra) * qs + h * HD + cb;
        float* pb0 = pa0 + (size_t)8 * qs;
        OutT* oa = (OutT*)a.dq + ((size_t)b * T + ra) * qs + h * HD + cb;
        OutT* ob = oa + (size_t)8 * qs;
        const float sc = a.scale;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int col = i * 8 + 2 * tig;
            if (last) {
                if (ra < T) store2<OutT>(oa + col, dq[i * 4 + 0] * sc, dq[i * 4 + 1] * sc);
                if (rb < T) store2<OutT>(ob + col, dq[i * 4 + 2] * sc, dq[i * 4 + 3] * sc);
            } else {
                if (ra < T) __stcg((float2*)(pa0 + col), make_float2(dq[i * 4 + 0], dq[i * 4 + 1]));
                if (rb < T) __stcg((float2*)(pb0 + col), make_float2(dq[i * 4 + 2], dq[i * 4 + 3]));
            }
        }
        bar_sync(2 + wg, 128);
        rel = last ? NULL : sem;
        rel_v = turn + 1;
    }
    if ((ct & 127) == 0 && rel) st_release(rel, rel_v);
    fa_dkv_store<HD, OutT>(a, dk, dv, b, kh, kw, g, tig);
}

/* ---- backward: delta = rowsum(dout * out) ---------------------------------------------------- */

__device__ __forceinline__ float ld1(const float* p) { return *p; }
__device__ __forceinline__ float ld1(const bf16* p) { return __bfloat162float(*p); }

/* A warp per (token, head) row, lanes over hd in a fixed order, a fixed butterfly. */
template <int HD, typename InT>
__global__ void k_fa_delta(float* delta, const InT* dout, const InT* out, int B, int T, int H) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); /* (b*T + t)*H + h */
    const int lane = threadIdx.x & 31;
    if (row >= (size_t)B * T * H) return;
    const int h = (int)(row % H);
    const size_t bt = row / H;
    const int t = (int)(bt % T), b = (int)(bt / T);
    const InT* go = dout + row * HD;
    const InT* oo = out + row * HD;
    const float s = fa_delta_sum<HD>([&](int c) { return make_float2(ld1(go + c), ld1(oo + c)); }, lane);
    if (lane == 0) delta[((size_t)b * H + h) * T + t] = s;
}

/* ---- backward: dq ------------------------------------------------------------------------- */

template <int HD, int NW, int MT>
constexpr size_t dq_smem() { return (size_t)(2 * 16 * MT * NW + 4 * 64) * HD * 2; }

template <int HD, int NW, int MT, typename OutT>
__global__ void __launch_bounds__(NW * 32) k_fa_dq(FaArgs a) {
    constexpr int WR = 16 * MT, BM = WR * NW, BN = 64, NT = NW * 32, KS = HD / 16, DT = HD / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = smem_u32(smem), sG = sQ + BM * HD * 2, sK = sG + BM * HD * 2, sV = sK + 2 * BN * HD * 2;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int lr = lane & 7, lm = lane >> 3;
    const int T = a.T, H = a.H, KV = a.KV;
    const int qt = fa_tile_rev(), bh = fa_row(), b = bh / H, h = bh % H, kh = h / (H / KV);
    const int qs = H * HD, ks = KV * HD;
    const bf16* qg = a.q + (size_t)b * T * qs + h * HD;
    const bf16* gg = a.dout + (size_t)b * T * qs + h * HD;
    const bf16* kg = a.k + (size_t)b * T * ks + kh * HD;
    const bf16* vg = a.v + (size_t)b * T * ks + kh * HD;
    const int q0 = qt * BM, r0 = q0 + warp * WR;
    const int nkv = (min(q0 + BM, T) - 1) / BN + 1;
    const float sl2 = a.sl2;

    load_tile<BM, HD, NT>(sQ, qg, q0, T, qs, tid);
    load_tile<BM, HD, NT>(sG, gg, q0, T, qs, tid);
    load_tile<BN, HD, NT>(sK, kg, 0, T, ks, tid);
    load_tile<BN, HD, NT>(sV, vg, 0, T, ks, tid);
    cp_commit();

    float Lr[MT][2], Dr[MT][2]; /* this thread's rows g, g + 8 of each m-tile */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int row = r0 + mt * 16 + g + 8 * u;
            Lr[mt][u] = row < T ? a.lse[(size_t)bh * T + row] * FA_LOG2E : 0.0f;
            Dr[mt][u] = row < T ? a.delta[(size_t)bh * T + row] : 0.0f;
        }

    uint32_t qf[MT][KS][4], gf[MT][KS][4];
    float acc[MT][DT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < DT; i++) acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0.0f;

    for (int j = 0; j < nkv; j++) {
        cp_wait_all();
        __syncthreads();
        if (j == 0)
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                load_afrags<HD>(qf[mt], sQ, warp * WR + mt * 16, lane);
                load_afrags<HD>(gf[mt], sG, warp * WR + mt * 16, lane);
            }
        if (j + 1 < nkv) {
            const uint32_t st = ((j + 1) & 1) * BN * HD * 2;
            load_tile<BN, HD, NT>(sK + st, kg, (j + 1) * BN, T, ks, tid);
            load_tile<BN, HD, NT>(sV + st, vg, (j + 1) * BN, T, ks, tid);
        }
        cp_commit();
        const uint32_t kb = sK + (j & 1) * BN * HD * 2, vb = sV + (j & 1) * BN * HD * 2;
#pragma unroll
        for (int c = 0; c < BN / 16; c++) { /* 16 keys at a time */
            const int key0 = j * BN + c * 16;
            if (key0 > r0 + WR - 1) continue; /* warp-uniform: all masked */
            float s[MT][2][4], dp[MT][2][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int i = 0; i < 2; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[mt][i][e] = dp[mt][i][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                uint32_t r[4];
                const uint32_t off = toff<HD>(c * 16 + (lm >> 1) * 8 + lr, kk * 2 + (lm & 1));
                ldsm4(r, kb + off);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma(s[mt][0], qf[mt][kk], r[0], r[1]);
                    mma(s[mt][1], qf[mt][kk], r[2], r[3]);
                }
                ldsm4(r, vb + off);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma(dp[mt][0], gf[mt][kk], r[0], r[1]);
                    mma(dp[mt][1], gf[mt][kk], r[2], r[3]);
                }
            }
            uint32_t da[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int rm = r0 + mt * 16;
                const bool diag = key0 + 15 > rm;
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    float d[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float p = ex2(fmaf(s[mt][nt][e], sl2, -Lr[mt][e >> 1]));
                        if (diag) {
                            const int key = key0 + nt * 8 + 2 * tig + (e & 1), row = rm + g + 8 * (e >> 1);
                            if (key > row) p = 0.0f;
                        }
                        d[e] = p * (dp[mt][nt][e] - Dr[mt][e >> 1]);
                    }
                    da[mt][2 * nt] = pack2(d[0], d[1]);
                    da[mt][2 * nt + 1] = pack2(d[2], d[3]);
                }
            }
#pragma unroll
            for (int dd = 0; dd < HD / 16; dd++) {
                uint32_t r[4];
                ldsm4t(r, kb + toff<HD>(c * 16 + (lm & 1) * 8 + lr, dd * 2 + (lm >> 1)));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma(acc[mt][2 * dd], da[mt], r[0], r[1]);
                    mma(acc[mt][2 * dd + 1], da[mt], r[2], r[3]);
                }
            }
        }
    }
    OutT* og = (OutT*)a.dq + (size_t)b * T * qs + h * HD;
    const float sc = a.scale;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int ra = r0 + mt * 16 + g, rb = ra + 8;
#pragma unroll
        for (int i = 0; i < DT; i++) {
            const int col = i * 8 + 2 * tig;
            if (ra < T) store2<OutT>(og + (size_t)ra * qs + col, acc[mt][i][0] * sc, acc[mt][i][1] * sc);
            if (rb < T) store2<OutT>(og + (size_t)rb * qs + col, acc[mt][i][2] * sc, acc[mt][i][3] * sc);
        }
    }
}

/* ---- backward: dk, dv ----------------------------------------------------------------------- */

template <int HD, int NW, int MT>
constexpr size_t dkv_smem() { return (size_t)(2 * 16 * MT * NW + 4 * 64) * HD * 2 + 4 * 64 * sizeof(float); }

template <int HD, int NW, int MT, typename OutT>
__global__ void __launch_bounds__(NW * 32) k_fa_dkv(FaArgs a) {
    constexpr int WR = 16 * MT, BN = WR * NW, BM = 64, NT = NW * 32, KS = HD / 16, DT = HD / 8;
    static_assert(NT >= BM, "lse/delta rows: one per thread");
    static_assert(BN % BM == 0, "a kv tile starts on a query tile");
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sK = smem_u32(smem), sV = sK + BN * HD * 2, sQ = sV + BN * HD * 2, sG = sQ + 2 * BM * HD * 2;
    float* Ls = (float*)(smem + (size_t)(2 * BN + 4 * BM) * HD * 2); /* [2][BM] lse * log2(e) */
    float* Ds = Ls + 2 * BM;                                          /* [2][BM] delta */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int lr = lane & 7, lm = lane >> 3;
    const int T = a.T, H = a.H, KV = a.KV, G = H / KV;
    const int kt = fa_tile(), bk = fa_row(), b = bk / KV, kh = bk % KV;
    const int qs = H * HD, ks = KV * HD;
    const bf16* kg = a.k + (size_t)b * T * ks + kh * HD;
    const bf16* vg = a.v + (size_t)b * T * ks + kh * HD;
    const int k0 = kt * BN, kw = k0 + warp * WR;
    const int qt0 = k0 / BM, nq = (T + BM - 1) / BM - qt0, total = G * nq;
    const float sl2 = a.sl2;

    load_tile<BN, HD, NT>(sK, kg, k0, T, ks, tid);
    load_tile<BN, HD, NT>(sV, vg, k0, T, ks, tid);
    /* stage `st` <- query tile `it` of the (head, tile) sequence */
    auto issue = [&](int it, int st) {
        const int h = kh * G + it / nq, t0 = (qt0 + it % nq) * BM;
        const size_t off = (size_t)b * T * qs + h * HD;
        load_tile<BM, HD, NT>(sQ + st * BM * HD * 2, a.q + off, t0, T, qs, tid);
        load_tile<BM, HD, NT>(sG + st * BM * HD * 2, a.dout + off, t0, T, qs, tid);
        if (tid < BM) {
            const int t = t0 + tid;
            const size_t row = ((size_t)b * H + h) * T + t;
            Ls[st * BM + tid] = t < T ? a.lse[row] * FA_LOG2E : INFINITY;
            Ds[st * BM + tid] = t < T ? a.delta[row] : 0.0f;
        }
    };
    issue(0, 0);
    cp_commit();

    uint32_t kf[MT][KS][4], vf[MT][KS][4];
    float dk[MT][DT][4], dv[MT][DT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < DT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[mt][i][e] = dv[mt][i][e] = 0.0f;

    for (int it = 0; it < total; it++) {
        cp_wait_all();
        __syncthreads();
        if (it == 0)
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                load_afrags<HD>(kf[mt], sK, warp * WR + mt * 16, lane);
                load_afrags<HD>(vf[mt], sV, warp * WR + mt * 16, lane);
            }
        if (it + 1 < total) issue(it + 1, (it + 1) & 1);
        cp_commit();
        const int st = it & 1, t0 = (qt0 + it % nq) * BM;
        if (t0 + BM - 1 < kw) continue; /* every query of the tile is before the warp's keys */
        const uint32_t qb = sQ + st * BM * HD * 2, gb = sG + st * BM * HD * 2;
        const float* Lt = Ls + st * BM;
        const float* Dt = Ds + st * BM;
#pragma unroll
        for (int c = 0; c < BM / 16; c++) { /* 16 queries at a time */
            const int tc = t0 + c * 16;
            if (tc + 15 < kw) continue;
            float s[MT][2][4], dp[MT][2][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int i = 0; i < 2; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[mt][i][e] = dp[mt][i][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                uint32_t r[4];
                const uint32_t off = toff<HD>(c * 16 + (lm >> 1) * 8 + lr, kk * 2 + (lm & 1));
                ldsm4(r, qb + off);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma(s[mt][0], kf[mt][kk], r[0], r[1]);
                    mma(s[mt][1], kf[mt][kk], r[2], r[3]);
                }
                ldsm4(r, gb + off);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma(dp[mt][0], vf[mt][kk], r[0], r[1]);
                    mma(dp[mt][1], vf[mt][kk], r[2], r[3]);
                }
            }
            float Lq[2][2], Dq[2][2]; /* the thread's 4 query columns */
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    Lq[nt][u] = Lt[c * 16 + nt * 8 + 2 * tig + u];
                    Dq[nt][u] = Dt[c * 16 + nt * 8 + 2 * tig + u];
                }
            uint32_t pa[MT][4], da[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int km = kw + mt * 16;
                const bool diag = tc < km + 15; /* some query of the chunk precedes some key */
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    float p[4], d[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int tl = c * 16 + nt * 8 + 2 * tig + (e & 1); /* query within the tile */
                        float pe = ex2(fmaf(s[mt][nt][e], sl2, -Lq[nt][e & 1]));
                        if (diag) {
                            const int key = km + g + 8 * (e >> 1);
                            if (t0 + tl < key) pe = 0.0f;
                        }
                        p[e] = pe;
                        d[e] = pe * (dp[mt][nt][e] - Dq[nt][e & 1]);
                    }
                    pa[mt][2 * nt] = pack2(p[0], p[1]);
                    pa[mt][2 * nt + 1] = pack2(p[2], p[3]);
                    da[mt][2 * nt] = pack2(d[0], d[1]);
                    da[mt][2 * nt + 1] = pack2(d[2], d[3]);
                }
            }
#pragma unroll
            for (int dd = 0; dd < HD / 16; dd++) {
                uint32_t r[4];
                const uint32_t off = toff<HD>(c * 16 + (lm & 1) * 8 + lr, dd * 2 + (lm >> 1));
                ldsm4t(r, gb + off);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma(dv[mt][2 * dd], pa[mt], r[0], r[1]);
                    mma(dv[mt][2 * dd + 1], pa[mt], r[2], r[3]);
                }
                ldsm4t(r, qb + off);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma(dk[mt][2 * dd], da[mt], r[0], r[1]);
                    mma(dk[mt][2 * dd + 1], da[mt], r[2], r[3]);
                }
            }
        }
    }
    OutT* dkg = (OutT*)a.dk + (size_t)b * T * ks + kh * HD;
    OutT* dvg = (OutT*)a.dv + (size_t)b * T * ks + kh * HD;
    const float sc = a.scale;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int ja = kw + mt * 16 + g, jb = ja + 8;
#pragma unroll
        for (int i = 0; i < DT; i++) {
            const int col = i * 8 + 2 * tig;
            if (ja < T) {
                store2<OutT>(dkg + (size_t)ja * ks + col, dk[mt][i][0] * sc, dk[mt][i][1] * sc);
                store2<OutT>(dvg + (size_t)ja * ks + col, dv[mt][i][0], dv[mt][i][1]);
            }
            if (jb < T) {
                store2<OutT>(dkg + (size_t)jb * ks + col, dk[mt][i][2] * sc, dk[mt][i][3] * sc);
                store2<OutT>(dvg + (size_t)jb * ks + col, dv[mt][i][2], dv[mt][i][3]);
            }
        }
    }
}

/* ---- FP32 -> BF16 (up to 4 tensors in one launch) ------------------------------------------ */

struct CvtJobs {
    const float* src[4];
    bf16* dst[4];
    size_t n4[4]; /* elements / 4 */
};
__global__ void k_to_bf16(CvtJobs j) {
    const int y = blockIdx.y; /* selects without a run-time index into the parameter arrays */
    const float4* s = (const float4*)(y == 0 ? j.src[0] : y == 1 ? j.src[1] : y == 2 ? j.src[2] : j.src[3]);
    uint2* d = (uint2*)(y == 0 ? j.dst[0] : y == 1 ? j.dst[1] : y == 2 ? j.dst[2] : j.dst[3]);
    const size_t n = y == 0 ? j.n4[0] : y == 1 ? j.n4[1] : y == 2 ? j.n4[2] : j.n4[3];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = s[i];
        d[i] = make_uint2(pack2(v.x, v.y), pack2(v.z, v.w));
    }
}

/* ---- host side ---------------------------------------------------------------------------- */

/* Tile configuration: warps per CTA and m-tiles (16 rows) per warp of the forward, dq and dk/dv
 * kernels; 0: the default, chosen on the H200 (bench/NOTES.md). */
int g_cfg[6] = {0, 0, 0, 0, 0, 0};
void* g_ws[2] = {NULL, NULL}; /* 0: the FP32 wrappers' BF16 copies; 1: the fused backward's dqa and sem */
size_t g_ws_bytes[2] = {0, 0};

int default_cfg(int which, int hd) {
    /* measured on the H200 (bench/NOTES.md): 2026-12-05 (session 19), the swapped grid, the dk/dv
     * producers' registers and the warp-specialized dq kernel (delta made in it): hd 64 the wgmma
     * forward with the warp-specialized dq (pipelined, Q and dO in registers) and dk/dv kernels; hd 128
     * the warp-specialized forward, dq (Q and dO in registers) and dk/dv kernels */
    static const int d64[6] = {1, 2, 3, 4, 3, 2}, d128[6] = {3, 2, 3, 3, 3, 2};
    return hd == 64 ? d64[which] : d128[which];
}

template <typename K>
int set_smem(K kern, size_t bytes) {
    CU_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return MX_OK;
}

template <int HD, int NW, int MT, typename OutT>
int fwd_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    constexpr size_t sm = fwd_smem<HD, NW, MT>();
    if (!ready) {
        int rc = set_smem(k_fa_fwd<HD, NW, MT, OutT>, sm);
        if (rc) return rc;
        ready = 1;
    }
    constexpr int BM = 16 * MT * NW;
    dim3 grid = fa_grid(a.T, BM, B * a.H);
    k_fa_fwd<HD, NW, MT, OutT><<<grid, NW * 32, sm, s>>>(a);
    CU_LAUNCHED();
    return MX_OK;
}
/* One launch of a wgmma or warp-specialized kernel: its dynamic shared memory set once per instance. */
template <typename K, typename... Args>
int wg_launch(K kern, int& ready, size_t sm, dim3 grid, int threads, cudaStream_t s, Args... args) {
    if (!ready) {
        int rc = set_smem(kern, sm);
        if (rc) return rc;
        ready = 1;
    }
    kern<<<grid, threads, sm, s>>>(args...);
    CU_LAUNCHED();
    return MX_OK;
}
/* A tile setting mt (1..4) as two compile-time flags for f: wide (mt 2, 4: the larger tile) and
 * variant (mt 3, 4); anything else as 4. */
template <typename F>
int by_mt(int mt, F f) {
    switch (mt) {
    case 1: return f(std::false_type(), std::false_type());
    case 2: return f(std::true_type(), std::false_type());
    case 3: return f(std::false_type(), std::true_type());
    default: return f(std::true_type(), std::true_type());
    }
}
template <int HD, int NWG, int BN, bool PIPE, typename OutT>
int fwg_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    const dim3 grid = fa_grid(a.T, 64 * NWG, B * a.H);
    return wg_launch(PIPE ? k_fa_fwd_wgp<HD, NWG, BN, OutT> : k_fa_fwd_wg<HD, NWG, BN, OutT>, ready,
                     fwg_smem<HD, NWG, BN>(), grid, NWG * 128, s, a);
}
template <int HD, int NWG, int BN, bool RA, typename OutT>
int dqwg_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    const dim3 grid = fa_grid(a.T, 64 * NWG, B * a.H);
    return wg_launch(k_fa_dq_wg<HD, NWG, BN, RA, OutT>, ready, dqwg_smem<HD, NWG, BN>(), grid, NWG * 128, s, a);
}
template <int HD, int NWG, int BM, bool RA, typename OutT>
int dkvwg_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    const dim3 grid = fa_grid(a.T, 64 * NWG, B * a.KV);
    return wg_launch(k_fa_dkv_wg<HD, NWG, BM, RA, OutT>, ready, dkvwg_smem<HD, NWG, BM>(), grid, NWG * 128, s, a);
}
/* The TMA maps of the warp-specialized forward: q [B][T][H hd / 64][64] (k, v with KV heads), boxes of
 * [rows][64] bf16 with the 128-byte swizzle; the encoder from the driver through the runtime. */
typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
int tma_map(CUtensorMap* m, const void* base, int B, int T, int heads, int hd, int rows) {
    static EncodeTiled enc = NULL;
    if (!enc) {
        cudaDriverEntryPointQueryResult q;
        void* f = NULL;
        CU_TRY(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !f) return mx_fail(MX_EINVAL, "flash attention: no cuTensorMapEncodeTiled");
        enc = (EncodeTiled)f;
    }
    const cuuint64_t dim[4] = {64, (cuuint64_t)heads * hd / 64, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t stride[3] = {128, (cuuint64_t)heads * hd * 2, (cuuint64_t)T * heads * hd * 2};
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)rows, 1}, es[4] = {1, 1, 1, 1};
    const CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void*)base, dim, stride, box, es,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return mx_fail(MX_EINVAL, "flash attention: cuTensorMapEncodeTiled failed (%d)", (int)r);
    return MX_OK;
}
template <int HD, int BN, int NST, typename OutT>
int fws_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    CUtensorMap tq, tk, tv;
    int rc = tma_map(&tq, a.q, B, a.T, a.H, HD, 128);
    if (!rc) rc = tma_map(&tk, a.k, B, a.T, a.KV, HD, BN);
    if (!rc) rc = tma_map(&tv, a.v, B, a.T, a.KV, HD, BN);
    if (rc) return rc;
    const dim3 grid = fa_grid(a.T, 128, B * a.H);
    return wg_launch(k_fa_fwd_ws<HD, BN, NST, OutT>, ready, fws_smem<HD, BN, NST>(), grid, 384, s, tq, tk, tv, a);
}
/* The maps of the warp-specialized backward kernels: q and dout in boxes of qrows rows, k and v of
 * krows. */
int bwd_maps(const FaArgs& a, int B, int hd, int qrows, int krows, CUtensorMap (&m)[4]) {
    int rc = tma_map(&m[0], a.q, B, a.T, a.H, hd, qrows);
    if (!rc) rc = tma_map(&m[1], a.dout, B, a.T, a.H, hd, qrows);
    if (!rc) rc = tma_map(&m[2], a.k, B, a.T, a.KV, hd, krows);
    if (!rc) rc = tma_map(&m[3], a.v, B, a.T, a.KV, hd, krows);
    return rc;
}
/* The warp-specialized dq kernel: 128 queries, BN keys a tile, and out's map when it makes delta. */
template <int HD, int BN, int NST, bool PIPE, bool RA, typename OutT>
int dqws_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    CUtensorMap m[4], to;
    int rc = bwd_maps(a, B, HD, 128, BN, m);
    if (!rc && a.delta_out) rc = tma_map(&to, a.out, B, a.T, a.H, HD, 128);
    if (rc) return rc;
    if (!a.delta_out) to = m[0]; /* unread */
    const dim3 grid = fa_grid(a.T, 128, B * a.H);
    return wg_launch(k_fa_dq_ws<HD, BN, NST, PIPE, RA, OutT>, ready, dqws_smem<HD, BN, NST>(), grid, 384, s, m[0], m[1],
                     m[2], m[3], to, a);
}
/* dq warps 3: the warp-specialized dq kernel over 64-key tiles; mt 1: plain, 2: pipelined, 3 and 4:
 * the same with Q, dO as register A fragments (by_mt: wide = pipelined, variant = RA) */
template <typename OutT>
int dqws_pick(const FaArgs& a, int B, int hd, int mt, cudaStream_t s) {
    return by_mt(mt, [&](auto pipe, auto ra) {
        constexpr bool P = decltype(pipe)::value, R = decltype(ra)::value;
        return hd == 64 ? dqws_launch<64, 64, 6, P, R, OutT>(a, B, s) : dqws_launch<128, 64, 4, P, R, OutT>(a, B, s);
    });
}
template <int HD, int BM, int NST, typename OutT>
int dkvws_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    CUtensorMap m[4];
    int rc = bwd_maps(a, B, HD, BM, 128, m);
    if (rc) return rc;
    const dim3 grid = fa_grid(a.T, 128, B * a.KV);
    return wg_launch(k_fa_dkv_ws<HD, BM, NST, OutT>, ready, dkvws_smem<HD, BM, NST>(), grid, 384, s, m[0], m[1], m[2],
                     m[3], a);
}
int ws_get(int slot, size_t bytes, void** p);
/* The fused backward (dk,dv warps 5, dq's configuration unused): dqa and the turn counters in
 * workspace slot 1, the counters zeroed here. */
template <int HD, int NST, typename OutT>
int bws_launch(FaArgs a, int B, cudaStream_t s) {
    static int ready = 0;
    ARG_CHECK((long long)B * a.KV <= 65535, "flash attention: B*KV %d too large for the one-pass backward's grid",
              B * a.KV);
    const size_t nqa = (size_t)B * a.T * a.H * HD, nsem = (size_t)B * a.H * ((a.T + 63) / 64) * 2;
    void* w = NULL;
    int rc = ws_get(1, nqa * 4 + nsem * 4, &w);
    if (rc) return rc;
    a.dqa = (float*)w;
    a.sem = (unsigned*)(a.dqa + nqa);
    CU_TRY(cudaMemsetAsync(a.sem, 0, nsem * 4, s));
    CUtensorMap m[4];
    rc = bwd_maps(a, B, HD, 64, 128, m);
    if (rc) return rc;
    const dim3 grid((unsigned)((a.T + 127) / 128), (unsigned)(B * a.KV)); /* row-major: see fa_row */
    return wg_launch(k_fa_bwd_ws<HD, NST, OutT>, ready, bws_smem<HD, NST>(), grid, 384, s, m[0], m[1], m[2], m[3], a);
}
/* dk,dv warps 3: the warp-specialized dk/dv kernel; mt 1: 32 queries a tile, 2: 64 */
template <typename OutT>
int dkvws_pick(const FaArgs& a, int B, int hd, int mt, cudaStream_t s) {
    if (hd == 64) return mt == 1 ? dkvws_launch<64, 32, 6, OutT>(a, B, s) : dkvws_launch<64, 64, 4, OutT>(a, B, s);
    return mt == 1 ? dkvws_launch<128, 32, 4, OutT>(a, B, s) : dkvws_launch<128, 64, 3, OutT>(a, B, s);
}
/* warps 3: the warp-specialized forward; mt 1: 64-key tiles in 4 stages, 2: 128 keys in 2 */
template <typename OutT>
int fws_pick(const FaArgs& a, int B, int hd, int mt, cudaStream_t s) {
    if (hd == 64) return mt == 1 ? fws_launch<64, 64, 4, OutT>(a, B, s) : fws_launch<64, 128, 3, OutT>(a, B, s);
    return mt == 1 ? fws_launch<128, 64, 4, OutT>(a, B, s) : fws_launch<128, 128, 2, OutT>(a, B, s);
}
/* The wgmma kernels' second number (mt): 1 and 2 the 64- and 128-wide streamed tiles (32 and 64
 * queries for dk/dv), 3 and 4 the same with the variant: the pipelined forward, the dq and dk/dv
 * kernels' fixed operands (Q and dO, K and V) held in registers as A fragments. */
template <int HD, int NWG, typename OutT>
int fwg_pick(const FaArgs& a, int B, int mt, cudaStream_t s) {
    return by_mt(mt, [&](auto wide, auto pipe) {
        return fwg_launch<HD, NWG, decltype(wide)::value ? 128 : 64, decltype(pipe)::value, OutT>(a, B, s);
    });
}
template <int HD, int NWG, typename OutT>
int dqwg_pick(const FaArgs& a, int B, int mt, cudaStream_t s) {
    return by_mt(mt, [&](auto wide, auto ra) {
        return dqwg_launch<HD, NWG, decltype(wide)::value ? 128 : 64, decltype(ra)::value, OutT>(a, B, s);
    });
}
template <int HD, int NWG, typename OutT>
int dkvwg_pick(const FaArgs& a, int B, int mt, cudaStream_t s) {
    return by_mt(mt, [&](auto wide, auto ra) {
        return dkvwg_launch<HD, NWG, decltype(wide)::value ? 64 : 32, decltype(ra)::value, OutT>(a, B, s);
    });
}
template <int HD, int NW, int MT, typename OutT>
int dq_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    constexpr size_t sm = dq_smem<HD, NW, MT>();
    if (!ready) {
        int rc = set_smem(k_fa_dq<HD, NW, MT, OutT>, sm);
        if (rc) return rc;
        ready = 1;
    }
    constexpr int BM = 16 * MT * NW;
    dim3 grid = fa_grid(a.T, BM, B * a.H);
    k_fa_dq<HD, NW, MT, OutT><<<grid, NW * 32, sm, s>>>(a);
    CU_LAUNCHED();
    return MX_OK;
}
template <int HD, int NW, int MT, typename OutT>
int dkv_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    constexpr size_t sm = dkv_smem<HD, NW, MT>();
    if (!ready) {
        int rc = set_smem(k_fa_dkv<HD, NW, MT, OutT>, sm);
        if (rc) return rc;
        ready = 1;
    }
    constexpr int BN = 16 * MT * NW;
    dim3 grid = fa_grid(a.T, BN, B * a.KV);
    k_fa_dkv<HD, NW, MT, OutT><<<grid, NW * 32, sm, s>>>(a);
    CU_LAUNCHED();
    return MX_OK;
}

template <typename OutT>
int run_fwd(const FaArgs& a, int B, int hd, cudaStream_t s) {
    const int nw = g_cfg[0] ? g_cfg[0] : default_cfg(0, hd), mt = g_cfg[1] ? g_cfg[1] : default_cfg(1, hd);
    if (nw == 3) return fws_pick<OutT>(a, B, hd, mt, s);
    if (nw == 1 || nw == 2) /* wgmma: nw warpgroups */
        return hd == 64 ? (nw == 1 ? fwg_pick<64, 1, OutT>(a, B, mt, s) : fwg_pick<64, 2, OutT>(a, B, mt, s))
                        : (nw == 1 ? fwg_pick<128, 1, OutT>(a, B, mt, s) : fwg_pick<128, 2, OutT>(a, B, mt, s));
    if (hd == 64) {
        if (mt == 2) return nw == 8 ? fwd_launch<64, 8, 2, OutT>(a, B, s) : fwd_launch<64, 4, 2, OutT>(a, B, s);
        return nw == 8 ? fwd_launch<64, 8, 1, OutT>(a, B, s) : fwd_launch<64, 4, 1, OutT>(a, B, s);
    }
    return nw == 8 ? fwd_launch<128, 8, 1, OutT>(a, B, s) : fwd_launch<128, 4, 1, OutT>(a, B, s); /* hd 128: MT 1 */
}

int delta_launch(float* delta, const void* dout, const void* out, int bf, int B, int T, int H, int hd, cudaStream_t s);
/* The backward's kernels. out16: the BF16 forward output when delta is still to be made from it (the
 * BF16 entry point): by the warp-specialized dq kernel as it loads its tiles, else by k_fa_delta
 * first; NULL when the caller made a.delta. */
template <typename OutT>
int run_bwd(FaArgs a, int B, int hd, const bf16* out16, float* delta, cudaStream_t s) {
    const int nq = g_cfg[2] ? g_cfg[2] : default_cfg(2, hd), mq = g_cfg[3] ? g_cfg[3] : default_cfg(3, hd);
    const int nk = g_cfg[4] ? g_cfg[4] : default_cfg(4, hd), mk = g_cfg[5] ? g_cfg[5] : default_cfg(5, hd);
    int rc;
    if (out16 && nq == 3 && nk != 5) {
        a.out = (void*)out16;
        a.delta_out = delta;
    } else if (out16) {
        rc = delta_launch(delta, a.dout, out16, 1, B, a.T, a.H, hd, s);
        if (rc) return rc;
    }
    if (nk == 5) return hd == 64 ? bws_launch<64, 4, OutT>(a, B, s) : bws_launch<128, 2, OutT>(a, B, s);
    if (nq == 3) {
        rc = dqws_pick<OutT>(a, B, hd, mq, s);
    } else if (nq == 1 || nq == 2) { /* wgmma: nq warpgroups */
        rc = hd == 64 ? (nq == 1 ? dqwg_pick<64, 1, OutT>(a, B, mq, s) : dqwg_pick<64, 2, OutT>(a, B, mq, s))
                      : (nq == 1 ? dqwg_pick<128, 1, OutT>(a, B, mq, s) : dqwg_pick<128, 2, OutT>(a, B, mq, s));
    } else if (hd == 64) {
        if (mq == 2) rc = nq == 8 ? dq_launch<64, 8, 2, OutT>(a, B, s) : dq_launch<64, 4, 2, OutT>(a, B, s);
        else rc = nq == 8 ? dq_launch<64, 8, 1, OutT>(a, B, s) : dq_launch<64, 4, 1, OutT>(a, B, s);
    } else {
        rc = nq == 8 ? dq_launch<128, 8, 1, OutT>(a, B, s) : dq_launch<128, 4, 1, OutT>(a, B, s); /* hd 128: MT 1 */
    }
    if (rc) return rc;
    if (nk == 3) return dkvws_pick<OutT>(a, B, hd, mk, s);
    if (nk == 1 || nk == 2) /* wgmma: nk warpgroups */
        return hd == 64 ? (nk == 1 ? dkvwg_pick<64, 1, OutT>(a, B, mk, s) : dkvwg_pick<64, 2, OutT>(a, B, mk, s))
                        : (nk == 1 ? dkvwg_pick<128, 1, OutT>(a, B, mk, s) : dkvwg_pick<128, 2, OutT>(a, B, mk, s));
    if (hd == 64) {
        if (mk == 2) return nk == 8 ? dkv_launch<64, 8, 2, OutT>(a, B, s) : dkv_launch<64, 4, 2, OutT>(a, B, s);
        return nk == 8 ? dkv_launch<64, 8, 1, OutT>(a, B, s) : dkv_launch<64, 4, 1, OutT>(a, B, s);
    }
    return nk == 8 ? dkv_launch<128, 8, 1, OutT>(a, B, s) : dkv_launch<128, 4, 1, OutT>(a, B, s);
}

int check(const char* fn, int B, int T, int H, int KV, int hd) {
    ARG_CHECK(B > 0 && T > 0 && H > 0 && KV > 0 && H % KV == 0, "%s: bad shape B %d T %d H %d KV %d", fn, B, T, H, KV);
    ARG_CHECK(hd == 64 || hd == 128, "%s: head dim %d not supported (64 or 128)", fn, hd);
    ARG_CHECK((T + 31) / 32 <= 65535, "%s: T %d too long for the grid (tiles in blockIdx.y)", fn, T);
    ARG_CHECK((long long)B * T * H * hd < (1ll << 31), "%s: tensor too large (B*T*H*hd >= 2^31)", fn);
    return MX_OK;
}

FaArgs make_args(int T, int H, int KV, int hd) {
    FaArgs a = {};
    a.T = T;
    a.H = H;
    a.KV = KV;
    a.scale = 1.0f / sqrtf((float)hd);
    a.sl2 = a.scale * FA_LOG2E;
    return a;
}

int delta_launch(float* delta, const void* dout, const void* out, int bf, int B, int T, int H, int hd,
                 cudaStream_t s) {
    const size_t rows = (size_t)B * T * H;
    const unsigned grid = (unsigned)((rows + 7) / 8);
    if (bf) {
        if (hd == 64) k_fa_delta<64, bf16><<<grid, 256, 0, s>>>(delta, (const bf16*)dout, (const bf16*)out, B, T, H);
        else k_fa_delta<128, bf16><<<grid, 256, 0, s>>>(delta, (const bf16*)dout, (const bf16*)out, B, T, H);
    } else {
        if (hd == 64) k_fa_delta<64, float><<<grid, 256, 0, s>>>(delta, (const float*)dout, (const float*)out, B, T, H);
        else k_fa_delta<128, float><<<grid, 256, 0, s>>>(delta, (const float*)dout, (const float*)out, B, T, H);
    }
    CU_LAUNCHED();
    return MX_OK;
}

/* The FP32 wrappers' scratch: grown on demand (cudaFree synchronizes the device). */
int ws_get(int slot, size_t bytes, void** p) {
    if (bytes > g_ws_bytes[slot]) {
        if (g_ws[slot]) CU_TRY(cudaFree(g_ws[slot]));
        g_ws[slot] = NULL;
        g_ws_bytes[slot] = 0;
        CU_TRY(cudaMalloc(&g_ws[slot], bytes));
        g_ws_bytes[slot] = bytes;
    }
    *p = g_ws[slot];
    return MX_OK;
}

int convert(int n, const float* const* src, bf16* const* dst, const size_t* count, cudaStream_t s) {
    CvtJobs j = {};
    size_t mx = 0;
    for (int i = 0; i < n; i++) {
        j.src[i] = src[i];
        j.dst[i] = dst[i];
        j.n4[i] = count[i] / 4;
        mx = count[i] / 4 > mx ? count[i] / 4 : mx;
    }
    unsigned gx = (unsigned)((mx + 255) / 256);
    if (gx > 132 * 16) gx = 132 * 16;
    k_to_bf16<<<dim3(gx, (unsigned)n), 256, 0, s>>>(j);
    CU_LAUNCHED();
    return MX_OK;
}

} // namespace

extern "C" size_t mxg_attention_flash_workspace(int B, int T, int H, int KV, int hd) {
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd;
    return 2 * (2 * nq + 2 * nk) + 256;
}

extern "C" int mxg_attention_flash_config(int fwd_warps, int fwd_mt, int dq_warps, int dq_mt, int dkv_warps,
                                          int dkv_mt) {
    const int c[6] = {fwd_warps, fwd_mt, dq_warps, dq_mt, dkv_warps, dkv_mt};
    for (int i = 0; i < 6; i += 2) {
        ARG_CHECK(c[i] >= 0 && (c[i] <= 3 || c[i] == 4 || c[i] == 8 || (i == 4 && c[i] == 5)),
                  "mxg_attention_flash_config: warps %d (0; 1 or 2 warpgroups; 3 the warp-specialized forward, dq or "
                  "dk,dv kernel; 5 the fused backward (dk,dv); 4 or 8 mma.sync warps)", c[i]);
        ARG_CHECK(c[i + 1] >= 0 && c[i + 1] <= (c[i] >= 3 && !(i == 2 && c[i] == 3) ? 2 : 4),
                  "mxg_attention_flash_config: m-tiles %d with warps %d (0..2; 0..4 for the wgmma kernels and the "
                  "warp-specialized dq)", c[i + 1],
                  c[i]);
    }
    for (int i = 0; i < 6; i++) g_cfg[i] = c[i];
    return MX_OK;
}

extern "C" int mxg_attention_forward_flash_bf16(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                                                const uint16_t* v, int B, int T, int H, int KV, int hd, void* stream) {
    int rc = check("mxg_attention_forward_flash_bf16", B, T, H, KV, hd);
    if (rc) return rc;
    FaArgs a = make_args(T, H, KV, hd);
    a.q = (const bf16*)q;
    a.k = (const bf16*)k;
    a.v = (const bf16*)v;
    a.out = out;
    a.lse = lse;
    return run_fwd<bf16>(a, B, hd, MXG_STREAM(stream));
}

extern "C" int mxg_attention_backward_flash_bf16(uint16_t* dq, uint16_t* dk, uint16_t* dv, float* delta,
                                                 const uint16_t* dout, const uint16_t* out, const float* lse,
                                                 const uint16_t* q, const uint16_t* k, const uint16_t* v, int B, int T,
                                                 int H, int KV, int hd, void* stream) {
    int rc = check("mxg_attention_backward_flash_bf16", B, T, H, KV, hd);
    if (rc) return rc;
    cudaStream_t s = MXG_STREAM(stream);
    FaArgs a = make_args(T, H, KV, hd);
    a.q = (const bf16*)q;
    a.k = (const bf16*)k;
    a.v = (const bf16*)v;
    a.dout = (const bf16*)dout;
    a.lse = (float*)lse;
    a.delta = delta;
    a.dq = dq;
    a.dk = dk;
    a.dv = dv;
    return run_bwd<bf16>(a, B, hd, (const bf16*)out, delta, s);
}

extern "C" int mxg_attention_forward_flash(float* out, float* lse, const float* q, const float* k, const float* v,
                                           int B, int T, int H, int KV, int hd, void* stream) {
    int rc = check("mxg_attention_forward_flash", B, T, H, KV, hd);
    if (rc) return rc;
    cudaStream_t s = MXG_STREAM(stream);
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd;
    void* ws;
    rc = ws_get(0, mxg_attention_flash_workspace(B, T, H, KV, hd), &ws);
    if (rc) return rc;
    bf16 *qb = (bf16*)ws, *kb = qb + nq, *vb = kb + nk;
    const float* src[3] = {q, k, v};
    bf16* dst[3] = {qb, kb, vb};
    const size_t cnt[3] = {nq, nk, nk};
    rc = convert(3, src, dst, cnt, s);
    if (rc) return rc;
    FaArgs a = make_args(T, H, KV, hd);
    a.q = qb;
    a.k = kb;
    a.v = vb;
    a.out = out;
    a.lse = lse;
    return run_fwd<float>(a, B, hd, s);
}

extern "C" int mxg_attention_backward_flash(float* dq, float* dk, float* dv, float* delta, const float* dout,
                                            const float* out, const float* lse, const float* q, const float* k,
                                            const float* v, int B, int T, int H, int KV, int hd, void* stream) {
    int rc = check("mxg_attention_backward_flash", B, T, H, KV, hd);
    if (rc) return rc;
    cudaStream_t s = MXG_STREAM(stream);
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd;
    void* ws;
    rc = ws_get(0, mxg_attention_flash_workspace(B, T, H, KV, hd), &ws);
    if (rc) return rc;
    bf16 *qb = (bf16*)ws, *gb = qb + nq, *kb = gb + nq, *vb = kb + nk;
    const float* src[4] = {q, dout, k, v};
    bf16* dst[4] = {qb, gb, kb, vb};
    const size_t cnt[4] = {nq, nq, nk, nk};
    rc = convert(4, src, dst, cnt, s);
    if (rc) return rc;
    rc = delta_launch(delta, dout, out, 0, B, T, H, hd, s);
    if (rc) return rc;
    FaArgs a = make_args(T, H, KV, hd);
    a.q = qb;
    a.k = kb;
    a.v = vb;
    a.dout = gb;
    a.lse = (float*)lse;
    a.delta = delta;
    a.dq = dq;
    a.dk = dk;
    a.dv = dv;
    return run_bwd<float>(a, B, hd, NULL, NULL, s);
}

extern "C" void mxg_attention_flash_shutdown(void) {
    for (int i = 0; i < 2; i++) {
        if (g_ws[i]) cudaFree(g_ws[i]);
        g_ws[i] = NULL;
        g_ws_bytes[i] = 0;
    }
}
