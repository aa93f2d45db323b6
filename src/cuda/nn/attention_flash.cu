/*
 * attention_flash.cu: causal grouped-query attention on BF16 tensor cores, forward and backward
 * (the GPU twin of src/nn/attention.c: mx_attention_forward / mx_attention_backward are the
 * references; include/mxlm/gpu_model.h, "flash attention"). This file holds the entry points
 * (mxg_attention_*_flash*), the tile configuration and its dispatch (run_fwd, run_bwd), the
 * delta pre-pass (k_fa_delta), the FP32 -> BF16 pre-pass (k_to_bf16), the TMA maps and the
 * scratch; the kernels are in
 *   attention_flash_fwd.cu  the wgmma forward: k_fa_fwd_wg, k_fa_fwd_wgp, k_fa_fwd_ws
 *   attention_flash_bwd.cu  the wgmma backward: k_fa_dq_wg, k_fa_dq_ws, k_fa_dkv_wg, k_fa_dkv_ws,
 *                           k_fa_bwd_ws (one pass)
 *   attention_flash_mma.cu  the mma.sync family: k_fa_fwd, k_fa_dq, k_fa_dkv
 *   attention_tile.cuh      their common pieces (PTX and wgmma helpers, tile loads, the softmax
 *                           and dS steps, the stores, mbarriers and TMA, the launch helpers)
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
#include <math.h>

#include "cuda/nn/attention_tile.cuh"

namespace fa {
namespace {

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
 * kernels; 0: the default, chosen on the H200 (docs/gpu.md). */
int g_cfg[6] = {0, 0, 0, 0, 0, 0};
void* g_ws[2] = {NULL, NULL}; /* 0: the FP32 wrappers' BF16 copies; 1: the fused backward's dqa and sem */
size_t g_ws_bytes[2] = {0, 0};

int default_cfg(int which, int hd) {
    /* measured on the H200 (docs/gpu.md): 2026-12-05, the swapped grid, the dk/dv
     * producers' registers and the warp-specialized dq kernel (delta made in it): hd 64 the wgmma
     * forward with the warp-specialized dq (pipelined, Q and dO in registers) and dk/dv kernels; hd 128
     * the warp-specialized forward, dq (Q and dO in registers) and dk/dv kernels */
    static const int d64[6] = {1, 2, 3, 4, 3, 2}, d128[6] = {3, 2, 3, 3, 3, 2};
    return hd == 64 ? d64[which] : d128[which];
}

} // namespace

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

namespace {

template <typename OutT>
int run_fwd(const FaArgs& a, int B, int hd, cudaStream_t s) {
    const int nw = g_cfg[0] ? g_cfg[0] : default_cfg(0, hd), mt = g_cfg[1] ? g_cfg[1] : default_cfg(1, hd);
    if (nw == 3) return fwd_ws<OutT>(a, B, hd, nw, mt, s);
    if (nw == 1 || nw == 2) return fwd_wg<OutT>(a, B, hd, nw, mt, s); /* wgmma: nw warpgroups */
    return fwd_mma<OutT>(a, B, hd, nw, mt, s);                        /* mma.sync: nw warps */
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
    if (nk == 5) return bwd_ws<OutT>(a, B, hd, nk, mk, s);
    if (nq == 3) rc = dq_ws<OutT>(a, B, hd, nq, mq, s);
    else if (nq == 1 || nq == 2) rc = dq_wg<OutT>(a, B, hd, nq, mq, s); /* wgmma: nq warpgroups */
    else rc = dq_mma<OutT>(a, B, hd, nq, mq, s);                        /* mma.sync: nq warps */
    if (rc) return rc;
    if (nk == 3) return dkv_ws<OutT>(a, B, hd, nk, mk, s);
    if (nk == 1 || nk == 2) return dkv_wg<OutT>(a, B, hd, nk, mk, s); /* wgmma: nk warpgroups */
    return dkv_mma<OutT>(a, B, hd, nk, mk, s);                        /* mma.sync: nk warps */
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
/* The FP32 wrappers' pre-pass: n FP32 tensors src[i] of count[i] elements rounded to BF16 into
 * workspace slot 0, one after the other (dst[i]: tensor i's copy). */
int to_bf16(int n, const float* const* src, const size_t* count, bf16** dst, int B, int T, int H, int KV, int hd,
            cudaStream_t s) {
    void* ws;
    int rc = ws_get(0, mxg_attention_flash_workspace(B, T, H, KV, hd), &ws);
    if (rc) return rc;
    dst[0] = (bf16*)ws;
    for (int i = 1; i < n; i++) dst[i] = dst[i - 1] + count[i - 1];
    return convert(n, src, dst, count, s);
}

} // namespace
} // namespace fa

using namespace fa;

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
    const float* src[3] = {q, k, v};
    const size_t cnt[3] = {nq, nk, nk};
    bf16* b16[3]; /* q, k, v */
    rc = to_bf16(3, src, cnt, b16, B, T, H, KV, hd, s);
    if (rc) return rc;
    FaArgs a = make_args(T, H, KV, hd);
    a.q = b16[0];
    a.k = b16[1];
    a.v = b16[2];
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
    const float* src[4] = {q, dout, k, v};
    const size_t cnt[4] = {nq, nq, nk, nk};
    bf16* b16[4]; /* q, dout, k, v */
    rc = to_bf16(4, src, cnt, b16, B, T, H, KV, hd, s);
    if (rc) return rc;
    rc = delta_launch(delta, dout, out, 0, B, T, H, hd, s);
    if (rc) return rc;
    FaArgs a = make_args(T, H, KV, hd);
    a.q = b16[0];
    a.k = b16[2];
    a.v = b16[3];
    a.dout = b16[1];
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
