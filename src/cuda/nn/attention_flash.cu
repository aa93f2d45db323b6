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
 * Tiling. Two families, the same math and the same fixed orders, picked by the tile configuration
 * (mxg_attention_flash_config; the defaults are the wgmma kernels, measured fastest on the H200):
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
 *   Partial tiles (T not a multiple of a tile): rows past T are zero-filled on load (cp.async
 *   src-size 0), their lse is +inf in the dk/dv kernels (p = 0), and they are never stored.
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
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

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
    void *dq, *dk, *dv;    /* [B*T, H*hd], [B*T, KV*hd] x2, bf16 or float (overwritten) */
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
    const int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, kh = h / (H / KV);
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

template <int HD, int NWG, int BN>
constexpr size_t fwg_smem() { return (size_t)(64 * NWG + 4 * BN) * HD * 2 + 1024; }

template <int HD, int NWG, int BN, typename OutT>
__global__ void __launch_bounds__(NWG * 128) k_fa_fwd_wg(FaArgs a) {
    constexpr int BM = 64 * NWG, NT = NWG * 128, KS = HD / 16, NS = BN / 8, DT = HD / 8;
    extern __shared__ __align__(128) unsigned char smem[]; /* aligned to 1024 below */
    const uint32_t sQ = (smem_u32(smem) + 1023u) & ~1023u, sK = sQ + BM * HD * 2, sV = sK + 2 * BN * HD * 2;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int T = a.T, H = a.H, KV = a.KV;
    const int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, kh = h / (H / KV);
    const int qs = H * HD, ks = KV * HD;
    const bf16* qg = a.q + (size_t)b * T * qs + h * HD;
    const bf16* kg = a.k + (size_t)b * T * ks + kh * HD;
    const bf16* vg = a.v + (size_t)b * T * ks + kh * HD;
    const int q0 = qt * BM, g0 = q0 + wg * 64, r0 = g0 + warp * 16; /* warpgroup's and warp's first rows */
    const int nkv = (min(q0 + BM, T) - 1) / BN + 1;
    const float sl2 = a.sl2;

    load_tile_sw<BM, HD, NT>(sQ, qg, q0, T, qs, tid);
    load_tile_sw<BN, HD, NT>(sK, kg, 0, T, ks, tid);
    load_tile_sw<BN, HD, NT>(sV, vg, 0, T, ks, tid);
    cp_commit();

    float o[DT * 4];
#pragma unroll
    for (int i = 0; i < DT * 4; i++) o[i] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

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
#pragma unroll
        for (int kk = 0; kk < KS; kk++)
            wg_ss<BN>(s, wg_desc(sQ + (kk >> 2) * BM * 128 + wg * 64 * 128 + (kk & 3) * 32, 16, 1024),
                      wg_desc(kb + (kk >> 2) * BN * 128 + (kk & 3) * 32, 16, 1024), kk > 0);
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < NS * 4; i++) reg_fence(s[i]);
        if (j * BN + BN - 1 > r0) {
#pragma unroll
            for (int nt = 0; nt < NS; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = j * BN + nt * 8 + 2 * tig + (e & 1), row = r0 + g + 8 * (e >> 1);
                    if (key > row) s[nt * 4 + e] = -INFINITY;
                }
        }
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
        const float al0 = ex2(m0 - n0), al1 = ex2(m1 - n1);
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
#pragma unroll
        for (int i = 0; i < DT; i++) {
            o[i * 4 + 0] *= al0;
            o[i * 4 + 1] *= al0;
            o[i * 4 + 2] *= al1;
            o[i * 4 + 3] *= al1;
        }
        uint32_t pa[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            pa[kk][0] = pack2(s[8 * kk + 0], s[8 * kk + 1]);
            pa[kk][1] = pack2(s[8 * kk + 2], s[8 * kk + 3]);
            pa[kk][2] = pack2(s[8 * kk + 4], s[8 * kk + 5]);
            pa[kk][3] = pack2(s[8 * kk + 6], s[8 * kk + 7]);
        }
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
            wg_rs_tb<HD>(o, pa[kk], wg_desc(vb + kk * 16 * 128, BN * 128, 1024));
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < DT * 4; i++) reg_fence(o[i]);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) reg_fence(pa[kk][e]);
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float i0 = 1.0f / l0, i1 = 1.0f / l1;
    OutT* og = (OutT*)a.out + (size_t)b * T * qs + h * HD;
    const int ra = r0 + g, rb = ra + 8;
#pragma unroll
    for (int i = 0; i < DT; i++) {
        const int col = i * 8 + 2 * tig;
        if (ra < T) store2<OutT>(og + (size_t)ra * qs + col, o[i * 4 + 0] * i0, o[i * 4 + 1] * i0);
        if (rb < T) store2<OutT>(og + (size_t)rb * qs + col, o[i * 4 + 2] * i1, o[i * 4 + 3] * i1);
    }
    if (tig == 0) {
        if (ra < T) a.lse[(size_t)bh * T + ra] = (m0 + log2f(l0)) * FA_LN2;
        if (rb < T) a.lse[(size_t)bh * T + rb] = (m1 + log2f(l1)) * FA_LN2;
    }
}


/* ---- backward on wgmma: the dq and dk/dv kernels of above, a warpgroup per 64 rows ----------- */

template <int HD, int NWG, int BN>
constexpr size_t dqwg_smem() { return (size_t)(2 * 64 * NWG + 4 * BN) * HD * 2 + 1024; }

/* CTA = (64 NWG queries, b*H + h); K, V stream in tiles of BN keys (two stages).
 * S = Q K^T, dP = dO V^T (shared-memory operands, K-major); dQ += dS K (dS from registers, K read
 * MN-major). */
template <int HD, int NWG, int BN, typename OutT>
__global__ void __launch_bounds__(NWG * 128) k_fa_dq_wg(FaArgs a) {
    constexpr int BM = 64 * NWG, NT = NWG * 128, KS = HD / 16, NS = BN / 8, DT = HD / 8;
    extern __shared__ __align__(128) unsigned char smem[]; /* aligned to 1024 below */
    const uint32_t sQ = (smem_u32(smem) + 1023u) & ~1023u, sG = sQ + BM * HD * 2, sK = sG + BM * HD * 2,
                   sV = sK + 2 * BN * HD * 2;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int T = a.T, H = a.H, KV = a.KV;
    const int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, kh = h / (H / KV);
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

    for (int j = 0; j < nkv; j++) {
        cp_wait_all();
        fence_proxy_async();
        __syncthreads();
        if (j + 1 < nkv) {
            const uint32_t st = ((j + 1) & 1) * BN * HD * 2;
            load_tile_sw<BN, HD, NT>(sK + st, kg, (j + 1) * BN, T, ks, tid);
            load_tile_sw<BN, HD, NT>(sV + st, vg, (j + 1) * BN, T, ks, tid);
        }
        cp_commit();
        if (j * BN > g0 + 63) continue; /* warpgroup-uniform */
        const uint32_t kb = sK + (j & 1) * BN * HD * 2, vb = sV + (j & 1) * BN * HD * 2;
        float s[NS * 4], dp[NS * 4];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const uint32_t ao = (kk >> 2) * BM * 128 + wg * 64 * 128 + (kk & 3) * 32;
            const uint32_t bo = (kk >> 2) * BN * 128 + (kk & 3) * 32;
            wg_ss<BN>(s, wg_desc(sQ + ao, 16, 1024), wg_desc(kb + bo, 16, 1024), kk > 0);
            wg_ss<BN>(dp, wg_desc(sG + ao, 16, 1024), wg_desc(vb + bo, 16, 1024), kk > 0);
        }
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < NS * 4; i++) {
            reg_fence(s[i]);
            reg_fence(dp[i]);
        }
        const bool diag = j * BN + BN - 1 > r0;
        uint32_t da[BN / 16][4];
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
            float d[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = ex2(fmaf(s[nt * 4 + e], sl2, -(e < 2 ? La : Lb)));
                if (diag) {
                    const int key = j * BN + nt * 8 + 2 * tig + (e & 1), row = r0 + g + 8 * (e >> 1);
                    if (key > row) p = 0.0f;
                }
                d[e] = p * (dp[nt * 4 + e] - (e < 2 ? Da : Db));
            }
            da[nt >> 1][(nt & 1) * 2] = pack2(d[0], d[1]);
            da[nt >> 1][(nt & 1) * 2 + 1] = pack2(d[2], d[3]);
        }
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) wg_rs_tb<HD>(acc, da[kk], wg_desc(kb + kk * 16 * 128, BN * 128, 1024));
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < DT * 4; i++) reg_fence(acc[i]);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) reg_fence(da[kk][e]);
    }
    OutT* og = (OutT*)a.dq + (size_t)b * T * qs + h * HD;
    const float sc = a.scale;
#pragma unroll
    for (int i = 0; i < DT; i++) {
        const int col = i * 8 + 2 * tig;
        if (ra < T) store2<OutT>(og + (size_t)ra * qs + col, acc[i * 4 + 0] * sc, acc[i * 4 + 1] * sc);
        if (rb < T) store2<OutT>(og + (size_t)rb * qs + col, acc[i * 4 + 2] * sc, acc[i * 4 + 3] * sc);
    }
}

template <int HD, int NWG, int BM>
constexpr size_t dkvwg_smem() { return (size_t)(2 * 64 * NWG + 4 * BM) * HD * 2 + 4 * BM * sizeof(float) + 1024; }

/* CTA = (64 NWG keys, b*KV + kvh); Q, dO, lse, delta stream in tiles of BM queries over the group's
 * heads (increasing h) and the query tiles from the diagonal on (increasing t).
 * S^T = K Q^T, dP^T = V dO^T (shared-memory operands, K-major); dV += P^T dO, dK += dS^T Q (P^T,
 * dS^T from registers, dO and Q read MN-major). */
template <int HD, int NWG, int BM, typename OutT>
__global__ void __launch_bounds__(NWG * 128) k_fa_dkv_wg(FaArgs a) {
    constexpr int BN = 64 * NWG, NT = NWG * 128, KS = HD / 16, NS = BM / 8, DT = HD / 8;
    static_assert(NT >= BM, "lse/delta rows: one per thread");
    static_assert(BN % BM == 0, "a kv tile starts on a query tile");
    extern __shared__ __align__(128) unsigned char smem[]; /* aligned to 1024 below */
    const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
    const uint32_t sK = base, sV = sK + BN * HD * 2, sQ = sV + BN * HD * 2, sG = sQ + 2 * BM * HD * 2;
    float* Ls = (float*)(smem + (base - smem_u32(smem)) + (size_t)(2 * BN + 4 * BM) * HD * 2); /* [2][BM] */
    float* Ds = Ls + 2 * BM;                                                                   /* [2][BM] */
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int T = a.T, H = a.H, KV = a.KV, G = H / KV;
    const int kt = blockIdx.x, bk = blockIdx.y, b = bk / KV, kh = bk % KV;
    const int qs = H * HD, ks = KV * HD;
    const bf16* kg = a.k + (size_t)b * T * ks + kh * HD;
    const bf16* vg = a.v + (size_t)b * T * ks + kh * HD;
    const int k0 = kt * BN, kg0 = k0 + wg * 64, kw = kg0 + warp * 16;
    const int qt0 = k0 / BM, nq = (T + BM - 1) / BM - qt0, total = G * nq;
    const float sl2 = a.sl2;

    load_tile_sw<BN, HD, NT>(sK, kg, k0, T, ks, tid);
    load_tile_sw<BN, HD, NT>(sV, vg, k0, T, ks, tid);
    auto issue = [&](int it, int st) {
        const int h = kh * G + it / nq, t0 = (qt0 + it % nq) * BM;
        const size_t off = (size_t)b * T * qs + h * HD;
        load_tile_sw<BM, HD, NT>(sQ + st * BM * HD * 2, a.q + off, t0, T, qs, tid);
        load_tile_sw<BM, HD, NT>(sG + st * BM * HD * 2, a.dout + off, t0, T, qs, tid);
        if (tid < BM) {
            const int t = t0 + tid;
            const size_t row = ((size_t)b * H + h) * T + t;
            Ls[st * BM + tid] = t < T ? a.lse[row] * FA_LOG2E : INFINITY;
            Ds[st * BM + tid] = t < T ? a.delta[row] : 0.0f;
        }
    };
    issue(0, 0);
    cp_commit();

    float dk[DT * 4], dv[DT * 4];
#pragma unroll
    for (int i = 0; i < DT * 4; i++) dk[i] = dv[i] = 0.0f;

    for (int it = 0; it < total; it++) {
        cp_wait_all();
        fence_proxy_async();
        __syncthreads();
        if (it + 1 < total) issue(it + 1, (it + 1) & 1);
        cp_commit();
        const int st = it & 1, t0 = (qt0 + it % nq) * BM;
        if (t0 + BM - 1 < kg0) continue; /* warpgroup-uniform: every query before every key */
        const uint32_t qb = sQ + st * BM * HD * 2, gb = sG + st * BM * HD * 2;
        const float* Lt = Ls + st * BM;
        const float* Dt = Ds + st * BM;
        float s[NS * 4], dp[NS * 4];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const uint32_t ao = (kk >> 2) * BN * 128 + wg * 64 * 128 + (kk & 3) * 32;
            const uint32_t bo = (kk >> 2) * BM * 128 + (kk & 3) * 32;
            wg_ss<BM>(s, wg_desc(sK + ao, 16, 1024), wg_desc(qb + bo, 16, 1024), kk > 0);
            wg_ss<BM>(dp, wg_desc(sV + ao, 16, 1024), wg_desc(gb + bo, 16, 1024), kk > 0);
        }
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < NS * 4; i++) {
            reg_fence(s[i]);
            reg_fence(dp[i]);
        }
        const bool diag = t0 < kw + 15; /* some query of the tile precedes some key of the warp */
        uint32_t pa[BM / 16][4], da[BM / 16][4];
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
            float p[4], d[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int tl = nt * 8 + 2 * tig + (e & 1);
                float pe = ex2(fmaf(s[nt * 4 + e], sl2, -Lt[tl]));
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
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            wg_rs_tb<HD>(dv, pa[kk], wg_desc(gb + kk * 16 * 128, BM * 128, 1024));
            wg_rs_tb<HD>(dk, da[kk], wg_desc(qb + kk * 16 * 128, BM * 128, 1024));
        }
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < DT * 4; i++) {
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
    OutT* dkg = (OutT*)a.dk + (size_t)b * T * ks + kh * HD;
    OutT* dvg = (OutT*)a.dv + (size_t)b * T * ks + kh * HD;
    const int ja = kw + g, jb = ja + 8;
    const float sc = a.scale;
#pragma unroll
    for (int i = 0; i < DT; i++) {
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
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < HD / 32; r++) s += ld1(go + lane + 32 * r) * ld1(oo + lane + 32 * r);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
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
    const int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, kh = h / (H / KV);
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
    const int kt = blockIdx.x, bk = blockIdx.y, b = bk / KV, kh = bk % KV;
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
void* g_ws = NULL;
size_t g_ws_bytes = 0;

int default_cfg(int which, int hd) {
    /* measured on the H200 (bench/NOTES.md, 2026-12-01): the wgmma kernels at every shape */
    static const int d64[6] = {1, 2, 1, 1, 1, 2}, d128[6] = {2, 2, 2, 1, 2, 2};
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
    dim3 grid((unsigned)((a.T + BM - 1) / BM), (unsigned)(B * a.H));
    k_fa_fwd<HD, NW, MT, OutT><<<grid, NW * 32, sm, s>>>(a);
    CU_LAUNCHED();
    return MX_OK;
}
template <int HD, int NWG, int BN, typename OutT>
int fwg_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    constexpr size_t sm = fwg_smem<HD, NWG, BN>();
    if (!ready) {
        int rc = set_smem(k_fa_fwd_wg<HD, NWG, BN, OutT>, sm);
        if (rc) return rc;
        ready = 1;
    }
    constexpr int BM = 64 * NWG;
    dim3 grid((unsigned)((a.T + BM - 1) / BM), (unsigned)(B * a.H));
    k_fa_fwd_wg<HD, NWG, BN, OutT><<<grid, NWG * 128, sm, s>>>(a);
    CU_LAUNCHED();
    return MX_OK;
}
template <int HD, int NWG, int BN, typename OutT>
int dqwg_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    constexpr size_t sm = dqwg_smem<HD, NWG, BN>();
    if (!ready) {
        int rc = set_smem(k_fa_dq_wg<HD, NWG, BN, OutT>, sm);
        if (rc) return rc;
        ready = 1;
    }
    constexpr int BM = 64 * NWG;
    dim3 grid((unsigned)((a.T + BM - 1) / BM), (unsigned)(B * a.H));
    k_fa_dq_wg<HD, NWG, BN, OutT><<<grid, NWG * 128, sm, s>>>(a);
    CU_LAUNCHED();
    return MX_OK;
}
template <int HD, int NWG, int BM, typename OutT>
int dkvwg_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    constexpr size_t sm = dkvwg_smem<HD, NWG, BM>();
    if (!ready) {
        int rc = set_smem(k_fa_dkv_wg<HD, NWG, BM, OutT>, sm);
        if (rc) return rc;
        ready = 1;
    }
    constexpr int BN = 64 * NWG;
    dim3 grid((unsigned)((a.T + BN - 1) / BN), (unsigned)(B * a.KV));
    k_fa_dkv_wg<HD, NWG, BM, OutT><<<grid, NWG * 128, sm, s>>>(a);
    CU_LAUNCHED();
    return MX_OK;
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
    dim3 grid((unsigned)((a.T + BM - 1) / BM), (unsigned)(B * a.H));
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
    dim3 grid((unsigned)((a.T + BN - 1) / BN), (unsigned)(B * a.KV));
    k_fa_dkv<HD, NW, MT, OutT><<<grid, NW * 32, sm, s>>>(a);
    CU_LAUNCHED();
    return MX_OK;
}

template <typename OutT>
int run_fwd(const FaArgs& a, int B, int hd, cudaStream_t s) {
    const int nw = g_cfg[0] ? g_cfg[0] : default_cfg(0, hd), mt = g_cfg[1] ? g_cfg[1] : default_cfg(1, hd);
    if (nw == 1 || nw == 2) { /* wgmma: nw warpgroups, mt 1: 64 keys per tile, 2: 128 */
        if (hd == 64) {
            if (nw == 1) return mt == 2 ? fwg_launch<64, 1, 128, OutT>(a, B, s) : fwg_launch<64, 1, 64, OutT>(a, B, s);
            return mt == 2 ? fwg_launch<64, 2, 128, OutT>(a, B, s) : fwg_launch<64, 2, 64, OutT>(a, B, s);
        }
        if (nw == 1) return mt == 2 ? fwg_launch<128, 1, 128, OutT>(a, B, s) : fwg_launch<128, 1, 64, OutT>(a, B, s);
        return mt == 2 ? fwg_launch<128, 2, 128, OutT>(a, B, s) : fwg_launch<128, 2, 64, OutT>(a, B, s);
    }
    if (hd == 64) {
        if (mt == 2) return nw == 8 ? fwd_launch<64, 8, 2, OutT>(a, B, s) : fwd_launch<64, 4, 2, OutT>(a, B, s);
        return nw == 8 ? fwd_launch<64, 8, 1, OutT>(a, B, s) : fwd_launch<64, 4, 1, OutT>(a, B, s);
    }
    return nw == 8 ? fwd_launch<128, 8, 1, OutT>(a, B, s) : fwd_launch<128, 4, 1, OutT>(a, B, s); /* hd 128: MT 1 */
}

template <typename OutT>
int run_bwd(const FaArgs& a, int B, int hd, cudaStream_t s) {
    const int nq = g_cfg[2] ? g_cfg[2] : default_cfg(2, hd), mq = g_cfg[3] ? g_cfg[3] : default_cfg(3, hd);
    const int nk = g_cfg[4] ? g_cfg[4] : default_cfg(4, hd), mk = g_cfg[5] ? g_cfg[5] : default_cfg(5, hd);
    int rc;
    if (nq == 1 || nq == 2) { /* wgmma: nq warpgroups; mq 1: 64 keys a tile, 2: 128 */
        if (hd == 64) {
            if (nq == 1) rc = mq == 2 ? dqwg_launch<64, 1, 128, OutT>(a, B, s) : dqwg_launch<64, 1, 64, OutT>(a, B, s);
            else rc = mq == 2 ? dqwg_launch<64, 2, 128, OutT>(a, B, s) : dqwg_launch<64, 2, 64, OutT>(a, B, s);
        } else {
            if (nq == 1) rc = mq == 2 ? dqwg_launch<128, 1, 128, OutT>(a, B, s) : dqwg_launch<128, 1, 64, OutT>(a, B, s);
            else rc = mq == 2 ? dqwg_launch<128, 2, 128, OutT>(a, B, s) : dqwg_launch<128, 2, 64, OutT>(a, B, s);
        }
    } else if (hd == 64) {
        if (mq == 2) rc = nq == 8 ? dq_launch<64, 8, 2, OutT>(a, B, s) : dq_launch<64, 4, 2, OutT>(a, B, s);
        else rc = nq == 8 ? dq_launch<64, 8, 1, OutT>(a, B, s) : dq_launch<64, 4, 1, OutT>(a, B, s);
    } else {
        rc = nq == 8 ? dq_launch<128, 8, 1, OutT>(a, B, s) : dq_launch<128, 4, 1, OutT>(a, B, s); /* hd 128: MT 1 */
    }
    if (rc) return rc;
    if (nk == 1 || nk == 2) { /* wgmma: nk warpgroups; mk 1: 32 queries a tile, 2: 64 */
        if (hd == 64) {
            if (nk == 1) return mk == 2 ? dkvwg_launch<64, 1, 64, OutT>(a, B, s) : dkvwg_launch<64, 1, 32, OutT>(a, B, s);
            return mk == 2 ? dkvwg_launch<64, 2, 64, OutT>(a, B, s) : dkvwg_launch<64, 2, 32, OutT>(a, B, s);
        }
        if (nk == 1) return mk == 2 ? dkvwg_launch<128, 1, 64, OutT>(a, B, s) : dkvwg_launch<128, 1, 32, OutT>(a, B, s);
        return mk == 2 ? dkvwg_launch<128, 2, 64, OutT>(a, B, s) : dkvwg_launch<128, 2, 32, OutT>(a, B, s);
    }
    if (hd == 64) {
        if (mk == 2) return nk == 8 ? dkv_launch<64, 8, 2, OutT>(a, B, s) : dkv_launch<64, 4, 2, OutT>(a, B, s);
        return nk == 8 ? dkv_launch<64, 8, 1, OutT>(a, B, s) : dkv_launch<64, 4, 1, OutT>(a, B, s);
    }
    return nk == 8 ? dkv_launch<128, 8, 1, OutT>(a, B, s) : dkv_launch<128, 4, 1, OutT>(a, B, s);
}

int check(const char* fn, int B, int T, int H, int KV, int hd) {
    ARG_CHECK(B > 0 && T > 0 && H > 0 && KV > 0 && H % KV == 0, "%s: bad shape B %d T %d H %d KV %d", fn, B, T, H, KV);
    ARG_CHECK(hd == 64 || hd == 128, "%s: head dim %d not supported (64 or 128)", fn, hd);
    ARG_CHECK((long long)B * H <= 65535, "%s: B*H %d too large for the grid", fn, B * H);
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
int ws_get(size_t bytes, void** p) {
    if (bytes > g_ws_bytes) {
        if (g_ws) CU_TRY(cudaFree(g_ws));
        g_ws = NULL;
        g_ws_bytes = 0;
        CU_TRY(cudaMalloc(&g_ws, bytes));
        g_ws_bytes = bytes;
    }
    *p = g_ws;
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
    for (int i = 0; i < 6; i++)
        ARG_CHECK(i % 2 ? (c[i] >= 0 && c[i] <= 2) : (c[i] >= 0 && (c[i] <= 2 || c[i] == 4 || c[i] == 8)),
                  "mxg_attention_flash_config: %s %d (warps 0, 4 or 8; m-tiles 0, 1 or 2)", i % 2 ? "m-tiles" : "warps",
                  c[i]);
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
    rc = delta_launch(delta, dout, out, 1, B, T, H, hd, s);
    if (rc) return rc;
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
    return run_bwd<bf16>(a, B, hd, s);
}

extern "C" int mxg_attention_forward_flash(float* out, float* lse, const float* q, const float* k, const float* v,
                                           int B, int T, int H, int KV, int hd, void* stream) {
    int rc = check("mxg_attention_forward_flash", B, T, H, KV, hd);
    if (rc) return rc;
    cudaStream_t s = MXG_STREAM(stream);
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd;
    void* ws;
    rc = ws_get(mxg_attention_flash_workspace(B, T, H, KV, hd), &ws);
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
    rc = ws_get(mxg_attention_flash_workspace(B, T, H, KV, hd), &ws);
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
    return run_bwd<float>(a, B, hd, s);
}

extern "C" void mxg_attention_flash_shutdown(void) {
    if (g_ws) cudaFree(g_ws);
    g_ws = NULL;
    g_ws_bytes = 0;
}
