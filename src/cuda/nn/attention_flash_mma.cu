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

/* Rows [row0, row0 + ROWS) of g (row stride `stride` elements) into a toff tile; rows >= T are
 * zero-filled. All NT threads call it. */
template <int ROWS, int HD, int NT>
__device__ __forceinline__ void load_tile(uint32_t s, const bf16* g, int row0, int T, int stride, int tid) {
    load_rows<ROWS, HD, NT>(s, g, row0, T, stride, tid, [](int r, int c) { return toff<HD>(r, c); });
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

/* acc += P B over column group dd (16 of HD) of the MT m-tiles, B the 16-row chunk c of tile b read
 * transposed (the chunk's rows are the product's K): O += P V (forward), dQ += dS K (dq),
 * dV += P^T dO and dK += dS^T Q (dk/dv). */
template <int HD, int MT>
__device__ __forceinline__ void mma_acc_chunk(float (*acc)[HD / 8][4], const uint32_t (*p)[4], uint32_t b, int c,
                                              int dd, int lane) {
    const int lr = lane & 7, lm = lane >> 3;
    uint32_t r[4];
    ldsm4t(r, b + toff<HD>(c * 16 + (lm & 1) * 8 + lr, dd * 2 + (lm >> 1)));
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        mma(acc[mt][2 * dd], p[mt], r[0], r[1]);
        mma(acc[mt][2 * dd + 1], p[mt], r[2], r[3]);
    }
}
/* The tile loop of the family's three kernels over n steps of streamed tiles in two stages:
 * next(i) issues step i's loads into stage i & 1 (one cp.async group a step), first() loads the
 * warp's fixed A fragments once step 0's tiles are in, step(i) runs step i. */
template <typename First, typename Next, typename Step>
__device__ __forceinline__ void mma_tile_loop(int n, First first, Next next, Step step) {
    for (int j = 0; j < n; j++) {
        cp_wait_all();
        __syncthreads(); /* step j's tiles are in; every warp is done with step j - 1's */
        if (j == 0) first();
        if (j + 1 < n) next(j + 1);
        cp_commit();
        step(j);
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
    const size_t qo = (size_t)b * T * qs + h * HD, ko = (size_t)b * T * ks + kh * HD; /* the row's q; k, v */
    const int q0 = qt * BM, r0 = q0 + warp * WR;
    const int nkv = (min(q0 + BM, T) - 1) / BN + 1;
    const float sl2 = a.sl2;

    load_tile<BM, HD, NT>(sQ, a.q + qo, q0, T, qs, tid);
    load_tile<BN, HD, NT>(sK, a.k + ko, 0, T, ks, tid);
    load_tile<BN, HD, NT>(sV, a.v + ko, 0, T, ks, tid);
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

    auto first = [&]() {
#pragma unroll
        for (int mt = 0; mt < MT; mt++) load_afrags<HD>(qf[mt], sQ, warp * WR + mt * 16, lane);
    };
    auto next = [&](int j) { /* K, V tile j into stage j & 1 */
        const uint32_t st = (j & 1) * BN * HD * 2;
        load_tile<BN, HD, NT>(sK + st, a.k + ko, j * BN, T, ks, tid);
        load_tile<BN, HD, NT>(sV + st, a.v + ko, j * BN, T, ks, tid);
    };
    mma_tile_loop(nkv, first, next, [&](int j) {
        if (j * BN > r0 + WR - 1) return; /* every key of the tile is after every row of the warp */
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
        for (int mt = 0; mt < MT; mt++) { /* the wgmma forward's softmax (attention_tile.cuh) per m-tile */
            const int rm = r0 + mt * 16;
            if (j * BN + BN - 1 > rm) fa_mask<8>(&s[mt][0][0], j * BN, rm, g, tig); /* the diagonal crosses it */
            float al0, al1;
            fa_softmax<8>(&s[mt][0][0], sl2, m[mt][0], m[mt][1], l[mt][0], l[mt][1], al0, al1);
            fa_rescale<DT>(&o[mt][0][0], al0, al1);
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
            for (int dp = 0; dp < HD / 16; dp++) mma_acc_chunk<HD, MT>(o, pa, vb, kk, dp, lane);
        }
    });
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        fa_fwd_store<HD, OutT>(a, &o[mt][0][0], l[mt][0], l[mt][1], m[mt][0], m[mt][1], b, bh, h, r0 + mt * 16, g, tig);
}

/* ---- backward: dq and dk, dv ------------------------------------------------------------------
 * One tile loop for both kernels (mma_tile_loop, the forward's too): two streamed operands a step
 * in two cp.async stages, the warp's two fixed operands as A fragments in registers (mma_afrags2),
 * and per 16-row chunk of the step's tiles the two products (mma_two_products), the elementwise
 * step (fa_dq_ds, fa_dkv_pds: attention_tile.cuh, the wgmma kernels' own) and the accumulation
 * (mma_acc_chunk). */

/* The two products of one 16-row chunk c of the streamed tiles b1, b2 with the warp's A fragments
 * f1, f2 (MT m-tiles of 16 rows, K = HD), from zero: x = f1 B1^T, y = f2 B2^T (16 columns, two n8
 * halves). dq: S = Q K^T, dP = dO V^T over 16 keys; dk/dv: S^T = K Q^T, dP^T = V dO^T over 16 queries. */
template <int HD, int MT>
__device__ __forceinline__ void mma_two_products(float (*x)[2][4], float (*y)[2][4], const uint32_t (*f1)[HD / 16][4],
                                                 const uint32_t (*f2)[HD / 16][4], uint32_t b1, uint32_t b2, int c,
                                                 int lane) {
    const int lr = lane & 7, lm = lane >> 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) x[mt][i][e] = y[mt][i][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        uint32_t r[4];
        const uint32_t off = toff<HD>(c * 16 + (lm >> 1) * 8 + lr, kk * 2 + (lm & 1));
        ldsm4(r, b1 + off);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            mma(x[mt][0], f1[mt][kk], r[0], r[1]);
            mma(x[mt][1], f1[mt][kk], r[2], r[3]);
        }
        ldsm4(r, b2 + off);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            mma(y[mt][0], f2[mt][kk], r[0], r[1]);
            mma(y[mt][1], f2[mt][kk], r[2], r[3]);
        }
    }
}
/* The warp's two fixed operands as A fragments (MT m-tiles from row r of the resident tiles s1, s2). */
template <int HD, int MT>
__device__ __forceinline__ void mma_afrags2(uint32_t (*f1)[HD / 16][4], uint32_t (*f2)[HD / 16][4], uint32_t s1,
                                            uint32_t s2, int r, int lane) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        load_afrags<HD>(f1[mt], s1, r + mt * 16, lane);
        load_afrags<HD>(f2[mt], s2, r + mt * 16, lane);
    }
}

template <int HD, int NW, int MT>
constexpr size_t dq_smem() { return (size_t)(2 * 16 * MT * NW + 4 * 64) * HD * 2; }

/* dq: CTA = (16 MT NW queries, b*H + h); K, V stream in tiles of 64 keys, in chunks of 16. */
template <int HD, int NW, int MT, typename OutT>
__global__ void __launch_bounds__(NW * 32) k_fa_dq(FaArgs a) {
    constexpr int WR = 16 * MT, BM = WR * NW, BN = 64, NT = NW * 32, KS = HD / 16, DT = HD / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = smem_u32(smem), sG = sQ + BM * HD * 2, sK = sG + BM * HD * 2, sV = sK + 2 * BN * HD * 2;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const int T = a.T, H = a.H, KV = a.KV;
    const int qt = fa_tile_rev(), bh = fa_row(), b = bh / H, h = bh % H, kh = h / (H / KV);
    const int qs = H * HD, ks = KV * HD;
    const size_t qo = (size_t)b * T * qs + h * HD, ko = (size_t)b * T * ks + kh * HD; /* the row's q, dout; k, v */
    const int q0 = qt * BM, r0 = q0 + warp * WR;
    const int nkv = (min(q0 + BM, T) - 1) / BN + 1;
    const float sl2 = a.sl2;

    load_tile<BM, HD, NT>(sQ, a.q + qo, q0, T, qs, tid);
    load_tile<BM, HD, NT>(sG, a.dout + qo, q0, T, qs, tid);
    load_tile<BN, HD, NT>(sK, a.k + ko, 0, T, ks, tid);
    load_tile<BN, HD, NT>(sV, a.v + ko, 0, T, ks, tid);
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

    auto next = [&](int j) { /* K, V tile j into stage j & 1 */
        const uint32_t st = (j & 1) * BN * HD * 2;
        load_tile<BN, HD, NT>(sK + st, a.k + ko, j * BN, T, ks, tid);
        load_tile<BN, HD, NT>(sV + st, a.v + ko, j * BN, T, ks, tid);
    };
    mma_tile_loop(nkv, [&]() { mma_afrags2<HD, MT>(qf, gf, sQ, sG, warp * WR, lane); }, next, [&](int j) {
        const uint32_t kb = sK + (j & 1) * BN * HD * 2, vb = sV + (j & 1) * BN * HD * 2;
#pragma unroll
        for (int c = 0; c < BN / 16; c++) { /* 16 keys at a time */
            const int key0 = j * BN + c * 16;
            if (key0 > r0 + WR - 1) continue; /* warp-uniform: all masked */
            float s[MT][2][4], dp[MT][2][4];
            mma_two_products<HD, MT>(s, dp, qf, gf, kb, vb, c, lane); /* S = Q K^T, dP = dO V^T */
            uint32_t da[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                fa_dq_ds<16>(&da[mt], &s[mt][0][0], &dp[mt][0][0], Lr[mt][0], Lr[mt][1], Dr[mt][0], Dr[mt][1], sl2, key0,
                             r0 + mt * 16, g, tig);
#pragma unroll
            for (int dd = 0; dd < HD / 16; dd++) mma_acc_chunk<HD, MT>(acc, da, kb, c, dd, lane); /* dQ += dS K */
        }
    });
#pragma unroll
    for (int mt = 0; mt < MT; mt++) fa_dq_store<HD, OutT>(a, &acc[mt][0][0], b, h, r0 + mt * 16 + g, tig);
}

template <int HD, int NW, int MT>
constexpr size_t dkv_smem() { return (size_t)(2 * 16 * MT * NW + 4 * 64) * HD * 2 + 4 * 64 * sizeof(float); }

/* dk, dv: CTA = (16 MT NW keys, b*KV + kvh); Q, dO, lse, delta stream in tiles of 64 queries over
 * the group's heads (increasing h) and the query tiles from the diagonal on, in chunks of 16. */
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
    const int T = a.T, H = a.H, KV = a.KV, G = H / KV;
    const int kt = fa_tile(), bk = fa_row(), b = bk / KV, kh = bk % KV;
    const int qs = H * HD, ks = KV * HD;
    const size_t ko = (size_t)b * T * ks + kh * HD; /* the row's k, v */
    const int k0 = kt * BN, kw = k0 + warp * WR;
    const int qt0 = k0 / BM, nq = (T + BM - 1) / BM - qt0, total = G * nq;
    const float sl2 = a.sl2;

    load_tile<BN, HD, NT>(sK, a.k + ko, k0, T, ks, tid);
    load_tile<BN, HD, NT>(sV, a.v + ko, k0, T, ks, tid);
    auto issue = [&](int it) { /* stage it & 1 <- query tile `it` of the (head, tile) sequence */
        const int st = it & 1, h = kh * G + it / nq, t0 = (qt0 + it % nq) * BM;
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
    issue(0);
    cp_commit();

    uint32_t kf[MT][KS][4], vf[MT][KS][4];
    float dk[MT][DT][4], dv[MT][DT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < DT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[mt][i][e] = dv[mt][i][e] = 0.0f;

    mma_tile_loop(total, [&]() { mma_afrags2<HD, MT>(kf, vf, sK, sV, warp * WR, lane); }, issue, [&](int it) {
        const int st = it & 1, t0 = (qt0 + it % nq) * BM;
        if (t0 + BM - 1 < kw) return; /* every query of the tile is before the warp's keys */
        const uint32_t qb = sQ + st * BM * HD * 2, gb = sG + st * BM * HD * 2;
        const float* Lt = Ls + st * BM;
        const float* Dt = Ds + st * BM;
#pragma unroll
        for (int c = 0; c < BM / 16; c++) { /* 16 queries at a time */
            const int tc = t0 + c * 16;
            if (tc + 15 < kw) continue;
            float s[MT][2][4], dp[MT][2][4];
            mma_two_products<HD, MT>(s, dp, kf, vf, qb, gb, c, lane); /* S^T = K Q^T, dP^T = V dO^T */
            uint32_t pa[MT][4], da[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) /* Lt already in log2 units */
                fa_dkv_pds<2, false>(&pa[mt], &da[mt], &s[mt][0][0], &dp[mt][0][0], Lt + c * 16, Dt + c * 16, tc,
                                     kw + mt * 16, g, tig, sl2);
#pragma unroll
            for (int dd = 0; dd < HD / 16; dd++) {
                mma_acc_chunk<HD, MT>(dv, pa, gb, c, dd, lane); /* dV += P^T dO */
                mma_acc_chunk<HD, MT>(dk, da, qb, c, dd, lane); /* dK += dS^T Q */
            }
        }
    });
#pragma unroll
    for (int mt = 0; mt < MT; mt++) fa_dkv_store<HD, OutT>(a, &dk[mt][0][0], &dv[mt][0][0], b, kh, kw + mt * 16, g, tig);
}

/* ---- host side --------------------------------------------------------------------------- */

/* One launch of a kernel of the family: NW warps a CTA, tiles of 16 MT NW rows over T, one grid column
 * per (batch, head) row (H heads for the forward and dq, KV for dk/dv). */
template <int HD, int NW, int MT, typename OutT>
int fwd_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    return wg_launch(k_fa_fwd<HD, NW, MT, OutT>, ready, fwd_smem<HD, NW, MT>(), fa_grid(a.T, 16 * MT * NW, B * a.H),
                     NW * 32, s, a);
}
template <int HD, int NW, int MT, typename OutT>
int dq_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    return wg_launch(k_fa_dq<HD, NW, MT, OutT>, ready, dq_smem<HD, NW, MT>(), fa_grid(a.T, 16 * MT * NW, B * a.H),
                     NW * 32, s, a);
}
template <int HD, int NW, int MT, typename OutT>
int dkv_launch(const FaArgs& a, int B, cudaStream_t s) {
    static int ready = 0;
    return wg_launch(k_fa_dkv<HD, NW, MT, OutT>, ready, dkv_smem<HD, NW, MT>(), fa_grid(a.T, 16 * MT * NW, B * a.KV),
                     NW * 32, s, a);
}
/* hd, warps nw (8, else 4) and m-tiles mt (2 at hd 64, else 1) as compile-time values for f */
template <typename F>
int mma_pick(int hd, int nw, int mt, F f) {
    if (hd == 64) {
        if (mt == 2) return nw == 8 ? f(ic<64>(), ic<8>(), ic<2>()) : f(ic<64>(), ic<4>(), ic<2>());
        return nw == 8 ? f(ic<64>(), ic<8>(), ic<1>()) : f(ic<64>(), ic<4>(), ic<1>());
    }
    return nw == 8 ? f(ic<128>(), ic<8>(), ic<1>()) : f(ic<128>(), ic<4>(), ic<1>()); /* hd 128: MT 1 */
}

} // namespace

/* warps 4 or 8 (nw), m-tiles 1 or 2 (mt; hd 128: 1) */
FA_ENTRY(fwd_mma) {
    return mma_pick(hd, n, mt, [&](auto HD, auto NW, auto MT) {
        return fwd_launch<decltype(HD)::value, decltype(NW)::value, decltype(MT)::value, OutT>(a, B, s);
    });
}
FA_ENTRY(dq_mma) {
    return mma_pick(hd, n, mt, [&](auto HD, auto NW, auto MT) {
        return dq_launch<decltype(HD)::value, decltype(NW)::value, decltype(MT)::value, OutT>(a, B, s);
    });
}
FA_ENTRY(dkv_mma) {
    return mma_pick(hd, n, mt, [&](auto HD, auto NW, auto MT) {
        return dkv_launch<decltype(HD)::value, decltype(NW)::value, decltype(MT)::value, OutT>(a, B, s);
    });
}

FA_ENTRY_INST(fwd_mma);
FA_ENTRY_INST(dq_mma);
FA_ENTRY_INST(dkv_mma);

} // namespace fa
