/*
 * attention_flash_fwd.cu: the flash attention's forward on wgmma (sm_90a), plain, pipelined and
 * warp-specialized (attention_flash.cu dispatches here; the mma.sync forward is in
 * attention_flash_mma.cu). The CPU reference is mx_attention_forward (src/nn/attention.c).
 *
 * Math (query head h uses KV head h / (H / KV); c = 1 / sqrt(hd); j <= t), per query row t:
 *   s_tj = c q_t . k_j in the log2 domain (sl2 = c log2 e), online over key tiles of BN:
 *   m = max(m, max_j s_tj sl2),  al = 2^(m_old - m),  p_tj = 2^(s_tj sl2 - m),
 *   l = l al + sum_j p_tj,  O = O al + P V (the pipelined kernels: (O + P V) al, one tile later);
 *   at the end o_t = O / l,  lse_t = (m + log2 l) ln 2 (natural log).
 * Shapes: q, out [B*T, H*hd], k, v [B*T, KV*hd] (bf16; out bf16 or float), lse [B, H, T] FP32.
 *
 * Kernels (CTA = 64 NWG or 128 query rows of one (batch, head) row, q tiles largest-first):
 *   k_fa_fwd_wg   1 or 2 warpgroups, K and V streamed by cp.async in two stages (BN 64 or 128)
 *   k_fa_fwd_wgp  the same, pipelined: S_j issued with P_{j-1} V_{j-1}
 *   k_fa_fwd_ws   warp-specialized: a TMA producer warpgroup, two consumer warpgroups running
 *                 k_fa_fwd_wgp's step (the hd-128 default; the hd-64 default is k_fa_fwd_wg 1x2)
 */
#include "cuda/nn/attention_tile.cuh"

namespace fa {
namespace {

/* ---- forward on wgmma (sm_90a): a warpgroup of 4 warps per 64 query rows ------------------------
 * S = Q K^T: wgmma m64nBNk16, A (Q) and B (K) from shared memory, both K-major;
 * O += P V: wgmma m64nHDk16, A = P (BF16) from registers, B = V MN-major (transposed read).
 * The softmax is the same code as k_fa_fwd's (attention_tile.cuh: fa_softmax). */
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
/* fa_qk issued and waited for, S in registers: the steps that do not overlap it with a P V. */
template <int HD, int BM, int BN>
__device__ __forceinline__ void fa_qk_wait(float* s, uint32_t sQ, uint32_t kb, int wg) {
    wg_fence();
    fa_qk<HD, BM, BN>(s, sQ, kb, wg);
    wg_commit();
    wg_wait0();
    fence_all<BN / 2>(s); /* BN / 8 column groups of 4 */
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
        fa_qk_wait<HD, BM, BN>(s, sQ, kb, wg);
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
        fence_all<DT * 4>(o);
        fence_frags<BN / 16>(pa);
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
        fa_qk_wait<HD, BM, BN>(s, sQ, sK, wg);
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
            fence_all<NS * 4>(s);
            if (j * BN + BN - 1 > r0) fa_mask<NS>(s, j * BN, r0, g, tig);
            fa_softmax<NS>(s, sl2, m0, m1, l0, l1, al0, al1);
            wg_wait0();
            fence_all<DT * 4>(o);
            fence_frags<BN / 16>(pa);
            fa_rescale<DT>(o, al0, al1);
            fa_pack<BN>(pa, s);
        } else if (j == nw) { /* this warpgroup's last P V */
            wg_fence();
            fa_pv<HD, BN>(o, pa, sV + ((j - 1) & 1) * BN * HD * 2);
            wg_commit();
            wg_wait0();
            fence_all<DT * 4>(o);
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
        fence_all<DT * 4>(o);
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
    FA_WS_QTILE(BM, BN);
    FA_WS_START(mbar_init(bQ, 1); ws_ring_init(bFK, bEK, NST); ws_ring_init(bFV, bEV, NST)) { /* the producer */
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
        fa_qk_wait<HD, BM, BN>(s, sQ, sK, wg);
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
        fence_all<NS * 4>(s);
        mbar_arrive(bEK + 8 * sk);
        if (j * BN + BN - 1 > r0) fa_mask<NS>(s, j * BN, r0, g, tig);
        fa_softmax<NS>(s, sl2, m0, m1, l0, l1, al0, al1);
        wg_wait0();
        fence_all<DT * 4>(o);
        fence_frags<BN / 16>(pa);
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
        fence_all<DT * 4>(o);
    }
    fa_fwd_store<HD, OutT>(a, o, l0, l1, m0, m1, b, bh, h, r0, g, tig);
}

/* ---- host side --------------------------------------------------------------------------- */

template <int HD, int NWG, int BN, bool PIPE, typename OutT>
int fwg_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    const dim3 grid = fa_grid(a.T, 64 * NWG, B * a.H);
    return wg_launch(PIPE ? k_fa_fwd_wgp<HD, NWG, BN, OutT> : k_fa_fwd_wg<HD, NWG, BN, OutT>, ready,
                     fwg_smem<HD, NWG, BN>(), grid, NWG * 128, s, a);
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

} // namespace

/* warps 1 or 2: the wgmma forward with nwg warpgroups (q tiles of 64 nwg rows); mt: by_wg_cfg */
FA_ENTRY(fwd_wg) {
    return by_wg_cfg(hd, n, mt, [&](auto HD, auto NWG, auto wide, auto pipe) {
        return fwg_launch<decltype(HD)::value, decltype(NWG)::value, decltype(wide)::value ? 128 : 64,
                          decltype(pipe)::value, OutT>(a, B, s);
    });
}
/* warps 3: the warp-specialized forward; mt 1: 64-key tiles in 4 stages, 2: 128 keys in 2 */
FA_ENTRY(fwd_ws) {
    if (hd == 64) return mt == 1 ? fws_launch<64, 64, 4, OutT>(a, B, s) : fws_launch<64, 128, 3, OutT>(a, B, s);
    return mt == 1 ? fws_launch<128, 64, 4, OutT>(a, B, s) : fws_launch<128, 128, 2, OutT>(a, B, s);
}

FA_ENTRY_INST(fwd_wg);
FA_ENTRY_INST(fwd_ws);

} // namespace fa
