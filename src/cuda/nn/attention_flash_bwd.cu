/*
 * attention_flash_bwd.cu: the flash attention's backward on wgmma (sm_90a): the dq and dk/dv
 * kernels, plain and warp-specialized, and the one-pass backward (attention_flash.cu dispatches
 * here; the mma.sync dq and dk/dv kernels are in attention_flash_mma.cu, the delta pre-pass in
 * attention_flash.cu). The CPU reference is mx_attention_backward (src/nn/attention.c).
 *
 * Math (query head h uses KV head h / (H / KV); c = 1 / sqrt(hd); j <= t; lse from the forward):
 *   p_tj = exp(s_tj - lse_t) = 2^(c q_t . k_j log2 e - lse_t log2 e),  dp_tj = do_t . v_j,
 *   ds_tj = p_tj (dp_tj - delta_t),  delta_t = do_t . o_t,
 *   dq_t = c sum_j ds_tj k_j,  dk_j = c sum_{h in group, t} ds_tj q_t,  dv_j = sum_{h in group, t} p_tj do_t
 * Shapes: q, dout, out, dq [B*T, H*hd], k, v, dk, dv [B*T, KV*hd] (bf16; dq, dk, dv bf16 or float),
 * lse, delta [B, H, T] FP32.
 *
 * Kernels:
 *   k_fa_dq_wg   CTA = (64 NWG queries, b*H + h); K, V stream in tiles of 64 or 128 keys;
 *                S, dP, dS = P (dP - delta) in registers, dQ += dS K
 *   k_fa_dq_ws   its step, warp-specialized (TMA producer, two consumer warpgroups; pipelined or
 *                not; delta made from out's tile at the BF16 entry point): the default dq
 *   k_fa_dkv_wg  CTA = (64 NWG keys, b*KV + kvh); Q, dO, lse, delta stream in tiles of 32 or 64
 *                queries over the group's heads and the query tiles from the diagonal on:
 *                dV += P^T dO, dK += dS^T Q
 *   k_fa_dkv_ws  its step, warp-specialized: the default dk/dv
 *   k_fa_bwd_ws  the one pass (dk/dv warps 5): k_fa_dkv_ws with dQ folded in, summed in a fixed order
 * k_fa_dq_wg and k_fa_dkv_wg run one tile loop (wg_tile_loop) and one product helper
 * (fa_two_products); the warp-specialized kernels run their wgmma twins' steps (fa_dq_ds,
 * fa_dkv_step), so each computes the same sums in the same order as its twin.
 */
#include "cuda/nn/attention_tile.cuh"

namespace fa {
namespace {

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

/* The tile loop of the wgmma dq and dk/dv kernels over n steps of streamed tiles in two cp.async
 * stages: next(i) issues step i's loads into stage i & 1 (one group a step); first() (RA: the fixed
 * operands' A fragments) runs once step 0's tiles are in; step(i) runs step i. */
template <typename First, typename Next, typename Step>
__device__ __forceinline__ void wg_tile_loop(int n, First first, Next next, Step step) {
    for (int j = 0; j < n; j++) {
        cp_wait_all();
        fence_proxy_async(); /* this thread's cp.async writes, before the tensor cores read them */
        __syncthreads();
        if (j == 0) first();
        if (j + 1 < n) next(j + 1);
        cp_commit();
        step(j);
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

    auto first = [&]() {
        if (RA) {
            load_afrags_sw<BM, HD>(qf, sQ, wg * 64 + warp * 16, lane);
            load_afrags_sw<BM, HD>(gf, sG, wg * 64 + warp * 16, lane);
        }
    };
    auto next = [&](int j) { /* K, V tile j into stage j & 1 */
        const uint32_t st = (j & 1) * BN * HD * 2;
        load_tile_sw<BN, HD, NT>(sK + st, kg, j * BN, T, ks, tid);
        load_tile_sw<BN, HD, NT>(sV + st, vg, j * BN, T, ks, tid);
    };
    wg_tile_loop(nkv, first, next, [&](int j) {
        if (j * BN > g0 + 63) return; /* warpgroup-uniform */
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
        fence_all<DT * 4>(acc);
        fence_frags<BN / 16>(da);
    });
    fa_dq_store<HD, OutT>(a, acc, b, h, ra, tig);
}

template <int HD, int BN, int NST>
constexpr size_t dqws_smem() { return (size_t)(3 * 128 + 2 * NST * BN) * HD * 2 + 1024 + 8 * (1 + 2 * NST); }

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
    FA_WS_QTILE(BM, BN);
    FA_WS_START(mbar_init(bQ, 1); ws_ring_init(bF, bE, NST)) { /* the producer warpgroup */
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
        fence_all<DT * 4>(acc);
        fence_frags<BN / 16>(da);
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
    fa_dkv_pds<NS, true>(pa, da, s, dp, Lt, Dt, t0, kw, g, tig, sl2);
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

    auto first = [&]() {
        if (RA) {
            load_afrags_sw<BN, HD>(kf, sK, wg * 64 + warp * 16, lane);
            load_afrags_sw<BN, HD>(vf, sV, wg * 64 + warp * 16, lane);
        }
    };
    wg_tile_loop(total, first, [&](int it) { issue(it, it & 1); }, [&](int it) {
        const int st = it & 1, t0 = (qt0 + it % nq) * BM;
        if (t0 + BM - 1 < kg0) return; /* warpgroup-uniform: every query before every key */
        fa_dkv_step<HD, BN, BM, RA>(dk, dv, kf, vf, sK, sV, sQ + st * BM * HD * 2, sG + st * BM * HD * 2, Ls + st * BM,
                                    Ds + st * BM, t0, kw, wg, g, tig, a.sl2);
    });
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
    /* step it's slot s of the ring, its head h and first row t0, once the consumers emptied the slot */
    auto slot = [&](int it, int& s, int& h, int& t0) {
        s = it % NST;
        const int u = it / NST;
        int hg, m;
        dkv_tile<MO>(it, nq, G, qt0, hg, m);
        h = kh * G + hg;
        t0 = m * BM;
        if (u) mbar_wait(r.bE + 8 * s, (u - 1) & 1);
    };
    if (tid == 0) {
        mbar_expect_tx(r.bKV, 2 * BN * HD * 2);
        tma_tile<BN, HD>(r.sK, tk, kh, k0, b, r.bKV);
        tma_tile<BN, HD>(r.sV, tv, kh, k0, b, r.bKV);
        for (int it = 0; it < total; it++) {
            int s, h, t0;
            slot(it, s, h, t0);
            mbar_expect_tx(r.bF + 8 * s, 2 * TB);
            tma_tile<BM, HD>(r.sQ + s * TB, tq, h, t0, b, r.bF + 8 * s);
            tma_tile<BM, HD>(r.sG + s * TB, tg, h, t0, b, r.bF + 8 * s);
        }
    } else if (tid >= 32 && tid < 64) {
        const int lane = tid - 32;
        for (int it = 0; it < total; it++) {
            int s, h, t0;
            slot(it, s, h, t0);
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
    FA_WS_START(dkv_bars_init<NST>(ring)) { /* the producer warpgroup */
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
        fence_all<32>(dq);
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

/* ---- host side --------------------------------------------------------------------------- */

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

} // namespace

/* dq warps 3: the warp-specialized dq kernel over 64-key tiles; mt 1: plain, 2: pipelined, 3 and 4:
 * the same with Q, dO as register A fragments (by_mt: wide = pipelined, variant = RA) */
FA_ENTRY(dq_ws) {
    return by_mt(mt, [&](auto pipe, auto ra) {
        constexpr bool P = decltype(pipe)::value, R = decltype(ra)::value;
        return hd == 64 ? dqws_launch<64, 64, 6, P, R, OutT>(a, B, s) : dqws_launch<128, 64, 4, P, R, OutT>(a, B, s);
    });
}
/* dk,dv warps 3: the warp-specialized dk/dv kernel; mt 1: 32 queries a tile, 2: 64 */
FA_ENTRY(dkv_ws) {
    if (hd == 64) return mt == 1 ? dkvws_launch<64, 32, 6, OutT>(a, B, s) : dkvws_launch<64, 64, 4, OutT>(a, B, s);
    return mt == 1 ? dkvws_launch<128, 32, 4, OutT>(a, B, s) : dkvws_launch<128, 64, 3, OutT>(a, B, s);
}
/* warps 1 or 2: the wgmma dq and dk/dv kernels with nwg warpgroups; mt: by_wg_cfg (64- or 128-key,
 * 32- or 64-query tiles; 3, 4 with the fixed operands in registers) */
FA_ENTRY(dq_wg) {
    return by_wg_cfg(hd, n, mt, [&](auto HD, auto NWG, auto wide, auto ra) {
        return dqwg_launch<decltype(HD)::value, decltype(NWG)::value, decltype(wide)::value ? 128 : 64,
                           decltype(ra)::value, OutT>(a, B, s);
    });
}
FA_ENTRY(dkv_wg) {
    return by_wg_cfg(hd, n, mt, [&](auto HD, auto NWG, auto wide, auto ra) {
        return dkvwg_launch<decltype(HD)::value, decltype(NWG)::value, decltype(wide)::value ? 64 : 32,
                            decltype(ra)::value, OutT>(a, B, s);
    });
}
/* dk,dv warps 5: the one-pass backward */
FA_ENTRY(bwd_ws) {
    return hd == 64 ? bws_launch<64, 4, OutT>(a, B, s) : bws_launch<128, 2, OutT>(a, B, s);
}

FA_ENTRY_INST(dq_wg);
FA_ENTRY_INST(dkv_wg);
FA_ENTRY_INST(dq_ws);
FA_ENTRY_INST(dkv_ws);
FA_ENTRY_INST(bwd_ws);

} // namespace fa
