/*
 * attention_tile.cuh: the common pieces of the flash attention's kernels (attention_flash.cu and the
 * files it dispatches to: attention_flash_fwd.cu, attention_flash_bwd.cu, attention_flash_mma.cu).
 *
 * Math (query head h uses KV head h / (H / KV); scale c = 1 / sqrt(hd); j <= t), as in the CPU
 * reference src/nn/attention.c (mx_attention_forward, mx_attention_backward):
 *   s_tj = c q_t . k_j,  p_tj = exp(s_tj - lse_t),  o_t = sum_j p_tj v_j,
 *   ds_tj = p_tj (do_t . v_j - delta_t),  delta_t = do_t . o_t.
 * Held here (device side, in the order the kernels use them; all in namespace fa):
 *   FaArgs            the one argument struct of every flash kernel
 *   PTX helpers       cp.async (16 / 4 bytes, zero-fill), ex2, BF16 packing, store2 (ldmatrix: cuda/ptx.cuh)
 *   launch order      fa_row / fa_tile / fa_tile_rev / fa_grid (longest causal tiles first)
 *   wgmma             the m64nNk16 wrappers (shared-memory or register A, K- or MN-major B), the
 *                     descriptors and fences (fence_all, fence_frags), the row loads (load_rows;
 *                     load_tile_sw: the 128-byte-swizzled [hd/64][rows][64] tile)
 *   step pieces       the online softmax (fa_mask, fa_softmax, fa_rescale), O += P V (fa_pv), the
 *                     dq kernels' dS (fa_dq_ds), the dk/dv kernels' P^T, dS^T (fa_dkv_pds), the
 *                     rowsum of delta (fa_delta_sum), the stores (fa_fwd_store, fa_dq_store,
 *                     fa_dkv_store): one copy each for the three families (the same sums in the
 *                     same order)
 *   warp-specialized  mbarriers, TMA boxes, setmaxnreg, FA_WS_QTILE / FA_WS_START (the kernels'
 *                     first lines), the stage rings
 * and (host side) the launch helpers (set_smem, wg_launch, by_mt, by_wg_cfg), tma_map and ws_get
 * (defined in attention_flash.cu) and the family entry points (FA_ENTRY) each file defines.
 * Shapes: see FaArgs (q, dout, out, dq [B*T, H*hd]; k, v, dk, dv [B*T, KV*hd]; lse, delta [B, H, T]).
 */
#pragma once

#include <cuda.h> /* CUtensorMap (the encoder comes through the runtime: no libcuda link) */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/ptx.cuh"
#include "mxlm/gpu_model.h"

namespace fa {

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

/* ---- wgmma (sm_90a) --------------------------------------------------------------------------
 * Tiles in the canonical 128-byte-swizzled layout that wgmma reads: [HD/64][rows][64] (128-byte
 * rows, 16-byte chunk c of row r at c ^ (r & 7), tile bases 1024-byte aligned). The accumulator
 * layouts per warp are those of mma.sync (rows 16 w + g, g + 8). */
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
/* reg_fence over N accumulator registers x, or over NK BF16 A fragments f (after a wgmma wait: the
 * compiler must not move their uses above it). */
template <int N>
__device__ __forceinline__ void fence_all(float* x) {
#pragma unroll
    for (int i = 0; i < N; i++) reg_fence(x[i]);
}
template <int NK>
__device__ __forceinline__ void fence_frags(uint32_t (*f)[4]) {
#pragma unroll
    for (int kk = 0; kk < NK; kk++)
#pragma unroll
        for (int e = 0; e < 4; e++) reg_fence(f[kk][e]);
}

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

/* Rows [row0, row0 + ROWS) of g (row stride `stride` elements) into a shared-memory tile at s whose
 * 16-byte chunk c of row r lies at byte off(r, c); rows >= T are zero-filled (cp.async src-size 0,
 * the source not read). All NT threads call it. */
template <int ROWS, int HD, int NT, typename Off>
__device__ __forceinline__ void load_rows(uint32_t s, const bf16* g, int row0, int T, int stride, int tid, Off off) {
    constexpr int CPR = HD / 8, N = ROWS * CPR;
    static_assert(N % NT == 0, "tile not a multiple of the block");
#pragma unroll
    for (int it = 0; it < N / NT; it++) {
        const int i = it * NT + tid, r = i / CPR, c = i % CPR, t = row0 + r;
        const bf16* src = g + (size_t)(t < T ? t : 0) * stride + c * 8;
        cp16(s + off(r, c), src, t < T ? 16 : 0);
    }
}
/* Rows [row0, row0 + ROWS) of g into a [HD/64][ROWS][64] swizzled tile; rows >= T zero-filled. */
template <int ROWS, int HD, int NT>
__device__ __forceinline__ void load_tile_sw(uint32_t s, const bf16* g, int row0, int T, int stride, int tid) {
    load_rows<ROWS, HD, NT>(s, g, row0, T, stride, tid, [](int r, int c) {
        return (uint32_t)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
    });
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

/* ---- step pieces: one copy for every family ------------------------------------------------ */

/* Pieces of the forward's step, shared by its kernels (the accumulator layout per warp: rows r0 + g
 * and r0 + g + 8, 8-column groups nt, columns 2 tig and 2 tig + 1). */
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

/* The dk/dv kernels' elementwise step over NS 8-query groups of one query tile (queries t0 + tl,
 * tl = 8 nt + 2 tig + (e & 1)) for the warp's keys kw + g, kw + g + 8 (S^T, dP^T in the accumulator
 * layout): P^T = 2^(S^T sl2 - L(tl)) (0 for queries before the key), dS^T = P^T (dP^T - Dt[tl]),
 * packed to the BF16 A fragments pa (P^T) and da (dS^T). L(tl) = Lt[tl] log2 e (LN: Lt holds the
 * natural-log lse) or Lt[tl] (Lt already in log2 units). */
template <int NS, bool LN>
__device__ __forceinline__ void fa_dkv_pds(uint32_t (*pa)[4], uint32_t (*da)[4], const float* s, const float* dp,
                                           const float* Lt, const float* Dt, int t0, int kw, int g, int tig, float sl2) {
    const bool diag = t0 < kw + 15; /* some query of the tile precedes some key of the warp */
#pragma unroll
    for (int nt = 0; nt < NS; nt++) {
        float p[4], d[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int tl = nt * 8 + 2 * tig + (e & 1);
            float pe = ex2(fmaf(s[nt * 4 + e], sl2, LN ? -(Lt[tl] * FA_LOG2E) : -Lt[tl]));
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

/* ---- warp-specialized kernels: mbarriers, TMA, setmaxnreg ----------------------------------- */
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
/* A warp-specialized query-tile CTA's coordinates (T, H, KV in scope): its tile qt (fa_tile_rev: the
 * longest first) of BM queries from q0, its (batch, query head) row bh = b H + h, the KV head kh of h
 * and the nkv key tiles of BN up to its last query. */
#define FA_WS_QTILE(BM, BN)                                                                 \
    const int qt = fa_tile_rev(), bh = fa_row(), b = bh / H, h = bh % H, kh = h / (H / KV); \
    const int q0 = qt * BM, nkv = (min(q0 + BM, T) - 1) / BN + 1
/* The start of a warp-specialized kernel (tid in scope): thread 0 runs the barriers' initialization
 * (the arguments) and fences it, the CTA syncs, then the statement that follows runs in the producer
 * warpgroup (threads 0..127). */
#define FA_WS_START(...)                                                        \
    if (tid == 0) {                                                             \
        __VA_ARGS__;                                                            \
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); \
    }                                                                           \
    __syncthreads();                                                            \
    if (tid < 128)
/* A ring of nst stages: "full" barriers of one arrival (the producer's, with the TMA bytes) and
 * "empty" ones of 256 (both consumer warpgroups). */
__device__ __forceinline__ void ws_ring_init(uint32_t full, uint32_t empty, int nst) {
    for (int s = 0; s < nst; s++) {
        mbar_init(full + 8 * s, 1);
        mbar_init(empty + 8 * s, 256);
    }
}

/* ---- host side --------------------------------------------------------------------------- */

template <typename K>
int set_smem(K kern, size_t bytes) {
    CU_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return MX_OK;
}

/* One launch of a flash kernel: its dynamic shared memory set once per instance (ready). */
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
template <int N>
using ic = std::integral_constant<int, N>;
/* A wgmma kernel's configuration as compile-time values for f(HD, NWG, wide, variant): hd (64 or 128),
 * nwg warpgroups (1 or 2) and its size mt as by_mt's two flags. The size (mt): 1 and 2 the 64- and
 * 128-wide streamed tiles (32 and 64 queries for dk/dv), 3 and 4 the same with the variant: the
 * pipelined forward, the dq and dk/dv kernels' fixed operands (Q and dO, K and V) held in registers
 * as A fragments. */
template <typename F>
int by_wg_cfg(int hd, int nwg, int mt, F f) {
    auto g = [&](auto HD, auto NWG) { return by_mt(mt, [&](auto wide, auto var) { return f(HD, NWG, wide, var); }); };
    return hd == 64 ? (nwg == 1 ? g(ic<64>(), ic<1>()) : g(ic<64>(), ic<2>()))
                    : (nwg == 1 ? g(ic<128>(), ic<1>()) : g(ic<128>(), ic<2>()));
}
/* The TMA map of a [B][T][heads hd / 64][64] bf16 tensor (q, dout, out: H heads; k, v: KV heads) in
 * boxes of [rows][64] with the 128-byte swizzle (attention_flash.cu). */
int tma_map(CUtensorMap* m, const void* base, int B, int T, int heads, int hd, int rows);
/* Workspace slot `slot` (0: the FP32 wrappers' BF16 copies; 1: the one-pass backward's dqa and turn
 * counters) of at least `bytes`, grown on demand (attention_flash.cu). */
int ws_get(int slot, size_t bytes, void** p);

/* The family entry points (attention_flash.cu's run_fwd / run_bwd call them), one signature: the
 * shapes in a (T, H, KV; q [B*T, H*hd], k, v [B*T, KV*hd], out / dq [B*T, H*hd], dk, dv [B*T, KV*hd],
 * lse, delta [B, H, T]), the batch B, hd 64 or 128 and the configuration's pair (count n, size mt)
 * of mxg_attention_flash_config (what a kernel does not need it ignores); OutT the output type (bf16
 * or float). FA_ENTRY_INST: a file's explicit instantiations of one of them. */
#define FA_ENTRY(name) \
    template <typename OutT> \
    int name(const FaArgs& a, int B, int hd, int n, int mt, cudaStream_t s)
#define FA_ENTRY_INST(name)                                                   \
    template int name<bf16>(const FaArgs&, int, int, int, int, cudaStream_t); \
    template int name<float>(const FaArgs&, int, int, int, int, cudaStream_t)
/* attention_flash_fwd.cu: the wgmma forward (n 1 or 2 warpgroups; mt 1..4) and the warp-specialized
 * one (mt 1, 2). */
FA_ENTRY(fwd_wg);
FA_ENTRY(fwd_ws);
/* attention_flash_bwd.cu: the wgmma dq and dk/dv kernels (n warpgroups, mt 1..4), the warp-specialized
 * ones (dq mt 1..4, dk/dv mt 1, 2) and the one-pass backward. */
FA_ENTRY(dq_wg);
FA_ENTRY(dkv_wg);
FA_ENTRY(dq_ws);
FA_ENTRY(dkv_ws);
FA_ENTRY(bwd_ws);
/* attention_flash_mma.cu: the mma.sync forward, dq and dk/dv kernels (n 4 or 8 warps, mt 1 or 2). */
FA_ENTRY(fwd_mma);
FA_ENTRY(dq_mma);
FA_ENTRY(dkv_mma);

} // namespace fa
