/*
 * attention_flash_mma.cu: the flash attention's mma.sync family (FlashAttention-2's manner:
 * m16n8k16 BF16 -> FP32, ldmatrix from XOR-swizzled tiles): the forward, dq and dk/dv kernels of
 * mxg_attention_flash_config's warps 4 or 8 (no default picks them; attention_flash.cu dispatches
 * here). The CPU references are mx_attention_forward and mx_attention_backward (src/nn/attention.c).
 *
 * Math: the forward's and the backward's of attention_flash_fwd.cu and attention_flash_bwd.cu (the
 * same sums; the tiles differ, so the rounding of the online softmax does):
 *   forward  o_t = sum_j 2^(s_tj sl2 - m) v_j / l (online over 64-key tiles), lse_t = (m + log2 l) ln 2
 *   dq       dq_t = c sum_j p_tj (dp_tj - delta_t) k_j over 64-key tiles in chunks of 16 keys
 *   dk, dv   dk_j = c sum ds_tj q_t, dv_j = sum p_tj do_t over the group's heads and 64-query tiles
 *            in chunks of 16 queries
 * Shapes: q, dout, out, dq [B*T, H*hd], k, v, dk, dv [B*T, KV*hd] (bf16 in; out, dq, dk, dv bf16
 * or float), lse, delta [B, H, T] FP32.
 * NW warps (4 or 8) of 16 MT rows each (MT 1 or 2; 2 at hd 64 only); A operands held in registers
 * (Q, or Q and dO, or K and V), the streamed tiles in two stages of cp.async. Rows past T: zero-filled
 * on load, lse +inf (p = 0) in the dk/dv kernel, never stored.
 */
#include "cuda/nn/attention_tile.cuh"

namespace fa {
namespace {

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

/* ---- host side --------------------------------------------------------------------------- */

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

} // namespace

/* warps 4 or 8 (nw), m-tiles 1 or 2 (mt; hd 128: 1) */
template <typename OutT>
int fwd_mma(const FaArgs& a, int B, int hd, int nw, int mt, cudaStream_t s) {
    if (hd == 64) {
        if (mt == 2) return nw == 8 ? fwd_launch<64, 8, 2, OutT>(a, B, s) : fwd_launch<64, 4, 2, OutT>(a, B, s);
        return nw == 8 ? fwd_launch<64, 8, 1, OutT>(a, B, s) : fwd_launch<64, 4, 1, OutT>(a, B, s);
    }
    return nw == 8 ? fwd_launch<128, 8, 1, OutT>(a, B, s) : fwd_launch<128, 4, 1, OutT>(a, B, s); /* hd 128: MT 1 */
}
template <typename OutT>
int dq_mma(const FaArgs& a, int B, int hd, int nw, int mt, cudaStream_t s) {
    if (hd == 64) {
        if (mt == 2) return nw == 8 ? dq_launch<64, 8, 2, OutT>(a, B, s) : dq_launch<64, 4, 2, OutT>(a, B, s);
        return nw == 8 ? dq_launch<64, 8, 1, OutT>(a, B, s) : dq_launch<64, 4, 1, OutT>(a, B, s);
    }
    return nw == 8 ? dq_launch<128, 8, 1, OutT>(a, B, s) : dq_launch<128, 4, 1, OutT>(a, B, s); /* hd 128: MT 1 */
}
template <typename OutT>
int dkv_mma(const FaArgs& a, int B, int hd, int nw, int mt, cudaStream_t s) {
    if (hd == 64) {
        if (mt == 2) return nw == 8 ? dkv_launch<64, 8, 2, OutT>(a, B, s) : dkv_launch<64, 4, 2, OutT>(a, B, s);
        return nw == 8 ? dkv_launch<64, 8, 1, OutT>(a, B, s) : dkv_launch<64, 4, 1, OutT>(a, B, s);
    }
    return nw == 8 ? dkv_launch<128, 8, 1, OutT>(a, B, s) : dkv_launch<128, 4, 1, OutT>(a, B, s);
}

template int fwd_mma<bf16>(const FaArgs&, int, int, int, int, cudaStream_t);
template int fwd_mma<float>(const FaArgs&, int, int, int, int, cudaStream_t);
template int dq_mma<bf16>(const FaArgs&, int, int, int, int, cudaStream_t);
template int dq_mma<float>(const FaArgs&, int, int, int, int, cudaStream_t);
template int dkv_mma<bf16>(const FaArgs&, int, int, int, int, cudaStream_t);
template int dkv_mma<float>(const FaArgs&, int, int, int, int, cudaStream_t);

} // namespace fa
