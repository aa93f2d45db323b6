/*
 * mxfp4.cu: the GPU twin of src/mx/mxfp4.c (with the rotations of
 * src/mx/hadamard.c fused in). Fused Hadamard rotation (none, hN, rhN;
 * n = 2..256) + MXFP4 block quantize (1x32, 32x1, 32x32; floor/even/ceil;
 * rne/sr) with row- and column-direction outputs from one read of the input,
 * and the exponent-folded E4M3 form for Hopper's FP8 GEMM. The fold from a
 * packed tensor (mxg_fold), OUTER's re-expression and fix-up and the exact
 * dequantization to BF16 are fold.cu; the FP8 per-tensor quantizer is fp8.cu.
 *
 * Bit-exactness: every scalar step calls include/mxlm/mx_scalar.h (compiled
 * for the device), the butterflies run in mx_fwht's stage order with one
 * final multiply by mx_hadamard_norm(n), and this file is built with
 * --fmad=false so no add/multiply is contracted into an FMA. The shared steps
 * are quant.cuh (block quantizer, telemetry, fold) and hadamard.cuh (FWHT).
 *
 * Kernel shape: one CTA of 256 threads per TR x TC tile of x, staged in shared
 * memory as float (row stride TC+1: conflict-free for both directions). In the
 * row pass a thread owns one 32-element segment of one row (lanes = 32
 * consecutive rows); in the column pass one 32-element segment of one column
 * (lanes = 32 consecutive columns). Rotations up to 32 run in registers inside
 * the segment; larger ones run in shared memory before the pass.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/mx/hadamard.cuh"
#include "cuda/mx/quant.cuh"
#include "cuda/nn/swiglu.cuh"
#include "cuda/ptx.cuh"
#include "mxlm/mx_scalar.h"

namespace {

constexpr int NT = 256;  // threads per CTA

struct Slot {
    int active, l32;           // l32: 32x32 layout
    int rule, sr, sr_tn;       // sr_tn: SR index in the transposed operand's coordinates (mxg_qspec)
    uint64_t seed;
    uint32_t tid;
    int had_n, rnd;
    uint64_t hseed;
    uint32_t rot;
    uint8_t* codes;
    uint8_t* scales;
    uint8_t* e4m3;
    float* fscale;
    unsigned long long* counters;
    mxg_opstats* stats;        // telemetry (NULL: off)
    int outer;                 // fold with OUTER scales (row kernel only)
};

struct QArgs {
    const void* x;
    int rows, cols;
    Slot s[2];  // [0] row direction (blocks along a row), [1] column direction
};

/* The fast quantizer's arithmetic against the scalar definitions on all 2^32 floats
 * (mxg_selftest_round), 8 consecutive floats a step, as a block's values: bad[0] the codes that
 * mx_e2m1_rint_scaled + e2m1_pack8 make (the values times 8 under a scale of 1/8, so the scale inside the fma is
 * exercised) against mx_e2m1_rne, and bad[1] their folded E4M3 bytes (e4m3_table + e4m3_of_codes8, the
 * window's 15 exponents in turn) against mx_e4m3_encode(decode(code) * 2^(d+6)), over |y| < 8 (their
 * domain; other floats stand in as 0 and are not counted); bad[2] e4m3x4 vs mx_e4m3_encode and bad[3]
 * e5m2x4 vs mx_e5m2_encode over the non-NaN floats; bad[4] the device's mx_bf16_from_f32 (cvt.rn.bf16.f32) and
 * bad[5] bf16x2_rn (each float paired with its neighbour, in both halves) against mx_bf16_from_f32_int, over every float. */
__global__ void k_selftest_round(unsigned long long* bad) {
    unsigned long long nb[6] = {0, 0, 0, 0, 0, 0};
    for (uint64_t g = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; g < (1ull << 29); g += (uint64_t)gridDim.x * blockDim.x) {
        float y[8], v[8];
        uint32_t t[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            y[k] = mx_u2f((uint32_t)(8 * g + k));
            if (y[k] == y[k]) {
                nb[2] += (e4m3x4(y[k], 0.0f, 0.0f, 0.0f) & 0xffu) != mx_e4m3_encode(y[k]);
                nb[3] += (e5m2x4(y[k], 0.0f, 0.0f, 0.0f) & 0xffu) != mx_e5m2_encode(y[k]);
            }
            nb[4] += mx_bf16_from_f32(y[k]) != mx_bf16_from_f32_int(y[k]);
            v[k] = fabsf(y[k]) < 8.0f ? y[k] * 8.0f : 0.0f;
            t[k] = mx_e2m1_rint_scaled(fabsf(v[k]), 0.125f);
        }
#pragma unroll
        for (int k = 0; k < 8; k += 2) { /* each float in both halves */
            const uint32_t a = mx_bf16_from_f32_int(y[k]), b = mx_bf16_from_f32_int(y[k + 1]);
            nb[5] += (bf16x2_rn(y[k], y[k + 1]) != (a | b << 16)) + (bf16x2_rn(y[k + 1], y[k]) != (b | a << 16));
        }
        const uint32_t p = e2m1_pack8(t, v);
        nb[0] += e2m1_pack8_mad(t, v) != p; /* QF_OPT_MAD's pack, word for word */
        const int d = -(int)((g >> 3) % 15);
        const float mf = mx_exp2i(d + 6);
        uint32_t lo, hi, o[2];
        e4m3_table(mf, lo, hi);
        e4m3_of_codes8(p, lo, hi, o[0], o[1]);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (!(fabsf(y[k]) < 8.0f)) continue;
            const uint8_t c = mx_e2m1_rne(y[k]), got = (uint8_t)((p >> (4 * k)) & 15u);
            nb[0] += got != c;
            nb[1] += ((o[k >> 2] >> (8 * (k & 3))) & 0xffu) != mx_e4m3_encode(mx_e2m1_decode(c) * mf);
        }
    }
    for (int k = 0; k < 6; k++)
        if (nb[k]) atomicAdd(&bad[k], nb[k]);
}

/* e2m1_rne_fast (quant.cuh) against mx_e2m1_rne on all 2^32 floats (mxg_selftest_e2m1). */
__global__ void k_selftest_e2m1(unsigned long long* bad) {
    unsigned long long nb = 0;
    for (uint64_t u = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; u < (1ull << 32); u += (uint64_t)gridDim.x * blockDim.x) {
        float v = mx_u2f((uint32_t)u);
        nb += e2m1_rne_fast(v) != (uint32_t)mx_e2m1_rne(v);
    }
    if (nb) atomicAdd(bad, nb);
}

/* Block Hadamard of size n (> 32) along one axis of the shared tile, in place:
 * signs first (rhN), then mx_fwht's stages, then the normalization multiply. */
template <int TR, int TC>
__device__ void had_smem(float* xs, int axis, int n, const float* sg, int rnd) {
    constexpr int S = TC + 4;
    if (rnd) {
        for (int e = threadIdx.x; e < TR * TC; e += NT) {
            int r = e / TC, c = e % TC;
            xs[r * S + c] *= axis ? sg[c] : sg[r];
        }
        __syncthreads();
    }
    for (int h = 1; h < n; h <<= 1) {
        for (int p = threadIdx.x; p < TR * TC / 2; p += NT) {
            if (axis == 1) {
                int r = p / (TC / 2), q = p % (TC / 2);
                int j = (q / h) * 2 * h + (q % h);
                float* a = &xs[r * S + j];
                float x0 = a[0], x1 = a[h];
                a[0] = x0 + x1;
                a[h] = x0 - x1;
            } else {
                int c = p % TC, q = p / TC;
                int j = (q / h) * 2 * h + (q % h);
                float* a = &xs[j * S + c];
                float x0 = a[0], x1 = a[h * S];
                a[0] = x0 + x1;
                a[h * S] = x0 - x1;
            }
        }
        __syncthreads();
    }
    const float s = mx_hadamard_norm(n);
    for (int e = threadIdx.x; e < TR * TC; e += NT) {
        int r = e / TC, c = e % TC;
        xs[r * S + c] *= s;
    }
    __syncthreads();
}

/* A staged kernel's end: its block counters (cnt[0..1] row direction, cnt[2..3] column) added to
 * the outputs' counters, by one thread each. Constant indices only: a dynamic index into the
 * parameter struct would copy it to local memory. */
__device__ __forceinline__ void flush_counters(const QArgs& a, const unsigned* cnt) {
    if (threadIdx.x == 0 && a.s[0].counters) {
        if (cnt[0]) atomicAdd(&a.s[0].counters[0], (unsigned long long)cnt[0]);
        if (cnt[1]) atomicAdd(&a.s[0].counters[1], (unsigned long long)cnt[1]);
    }
    if (threadIdx.x == 32 && a.s[1].counters) {
        if (cnt[2]) atomicAdd(&a.s[1].counters[0], (unsigned long long)cnt[2]);
        if (cnt[3]) atomicAdd(&a.s[1].counters[1], (unsigned long long)cnt[3]);
    }
}

template <int TR, int TC> struct Smem {
    static constexpr int S = TC + 4;  /* 16-byte rows; conflict-free float4 row reads, scalar column reads */
    static constexpr size_t xs = 0;
    static constexpr size_t scl_r = xs + sizeof(float) * TR * S;
    static constexpr size_t scl_c = scl_r + TR * (TC / 32);
    static constexpr size_t sg_r = scl_c + TC * (TR / 32);
    static constexpr size_t sg_c = sg_r + sizeof(float) * TC;
    static constexpr size_t cnt = sg_c + sizeof(float) * TR;
    static constexpr size_t total = cnt + 16;
};

/* One direction's pass over the staged tile: DIR 0 blocks of 32 along a row
 * (a thread owns one 32-segment of one row: lanes = 32 consecutive rows), DIR 1
 * blocks of 32 along a column (lanes = 32 consecutive columns). In the terms
 * of the pass, li is the lane-axis index in the tile and bi the block index
 * along the block axis; (gr, gc) the block's first element in x. The two
 * directions differ only in how a segment is read from the tile (float4 rows
 * or scalar columns), the random-bit stride (1 or cols), where the codes and
 * scales go ([rows, cols] or [cols, rows]; 32x32 always [rows, cols]) and
 * their counters (cnt[0..1] or cnt[2..3]). */
template <int DIR, int TR, int TC, bool ST>
__device__ __forceinline__ void quant_pass(const Slot& s, float* xs, uint8_t* scl, const float* sgn,
                                           unsigned* cnt, int r0, int c0, int rows, int cols) {
    constexpr int S = Smem<TR, TC>::S;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* lane axis: rows (DIR 0) or columns (DIR 1); block axis: the other */
    const int LO = DIR ? c0 : r0, LN = DIR ? cols : rows, BO = DIR ? r0 : c0, BN = DIR ? rows : cols;
    const int n = s.had_n;
    if (n > 32) {
        if (DIR == 1) __syncthreads();
        had_smem<TR, TC>(xs, 1 - DIR, n, sgn, s.rnd);
    }
    const int rn = n > 32 ? 0 : n;
    const int use_sign = n <= 32 && s.rnd;
    constexpr int NB = DIR ? TR / 32 : TC / 32, NL = DIR ? TC : TR, NG = (NL / 32) * NB, GPW = (NG + 7) / 8;
    uint32_t pk[GPW][4];
    uint8_t sbk[GPW];
#pragma unroll
    for (int k = 0; k < GPW; k++) {
        int g = k * 8 + warp;
        if (g >= NG) break;
        int bi = g % NB, li = (g / NB) * 32 + lane;
        int gl = LO + li, gb = BO + bi * 32;
        int gr = DIR ? gb : gl, gc = DIR ? gl : gb;
        bool valid = gr < rows && gc < cols;  // warp-uniform for 32x32 (rows % 32 == 0)
        float v[32];
        if (DIR == 0) {
#pragma unroll
            for (int i = 0; i < 32; i += 4) {
                float4 q4 = *(const float4*)&xs[li * S + bi * 32 + i];
                v[i] = q4.x; v[i + 1] = q4.y; v[i + 2] = q4.z; v[i + 3] = q4.w;
            }
            if (use_sign)
#pragma unroll
                for (int i = 0; i < 32; i++) v[i] *= sgn[bi * 32 + i];
        } else {
#pragma unroll
            for (int i = 0; i < 32; i++) {
                float f = xs[(bi * 32 + i) * S + li];
                if (use_sign) f *= sgn[bi * 32 + i];
                v[i] = f;
            }
        }
        fwht_rt(v, rn);
        int clip;
        /* SR index of element (gr + i, gc) (DIR 1) or (gr, gc + i): in x's coordinates, or with sr_tn
         * in those of x^T [cols, rows], the TN operand linear.c quantizes after its transpose */
        const bool tn = DIR && s.sr_tn;
        uint8_t sb = quant32(v, s.rule, s.l32, s.sr, s.seed, s.tid,
                             tn ? (uint64_t)gc * rows + gr : (uint64_t)gr * cols + gc,
                             (DIR && !tn) ? (uint64_t)cols : 1, pk[k], clip);
        sbk[k] = sb;
        scl[li * NB + bi] = sb;
        if (valid && clip && (!s.l32 || lane == 0)) atomicAdd(&cnt[2 * DIR], 1u);
        if (DIR == 0 && valid && s.codes)
            *(uint4*)(s.codes + ((size_t)gl * BN + gb) / 2) = make_uint4(pk[k][0], pk[k][1], pk[k][2], pk[k][3]);
        if (ST) stats_group(s.stats, valid, s.l32, lane, v, pk[k], sb, clip); /* the group loop's break is warp-uniform */
        if (DIR == 1 && s.codes) {
            if (!s.l32) {
                if (valid) *(uint4*)(s.codes + ((size_t)gl * BN + gb) / 2) = make_uint4(pk[k][0], pk[k][1], pk[k][2], pk[k][3]);
            } else if (valid) {  /* 32x32: row-major codes; lanes pair up into bytes */
#pragma unroll
                for (int i = 0; i < 32; i++) {
                    uint32_t nib = (pk[k][i >> 3] >> (4 * (i & 7))) & 15;
                    uint32_t hi = __shfl_down_sync(0xffffffffu, nib, 1);
                    if (!(lane & 1)) s.codes[((size_t)(gr + i) * cols + gc) / 2] = (uint8_t)(nib | (hi << 4));
                }
            }
        }
    }
    __syncthreads();
    if (s.scales) {
        if (!s.l32) {
            for (int e = tid; e < NL * NB; e += NT) {
                int li = e / NB, bi = e % NB;
                if (LO + li < LN && BO + bi * 32 < BN) s.scales[(size_t)(LO + li) * (BN / 32) + BO / 32 + bi] = scl[e];
            }
        } else { /* one scale per 32x32 tile, [rows/32, cols/32] in both directions */
            for (int e = tid; e < (NL / 32) * NB; e += NT) {
                int lg = e / NB, bi = e % NB;
                int tr = DIR ? bi : lg, tc = DIR ? lg : bi;
                if (LO + lg * 32 < LN && BO + bi * 32 < BN)
                    s.scales[(size_t)(r0 / 32 + tr) * (cols / 32) + c0 / 32 + tc] = scl[lg * 32 * NB + bi];
            }
        }
    }
    if (s.e4m3) {
#pragma unroll
        for (int k = 0; k < GPW; k++) {
            int g = k * 8 + warp;
            if (g >= NG) break;
            int bi = g % NB, li = (g / NB) * 32 + lane;
            int gl = LO + li, gb = BO + bi * 32;
            if (gl < LN && gb < BN) {
                int eref = eref_of(&scl[li * NB + (bi & ~3)], 4);
                uint32_t o[8];
                if (fold32(pk[k], sbk[k], eref, o)) atomicAdd(&cnt[2 * DIR + 1], 1u);
                uint4* dst = (uint4*)(s.e4m3 + (size_t)gl * BN + gb);
                dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
                dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
                if ((bi & 3) == 0 && s.fscale) s.fscale[(size_t)(gb / 128) * LN + gl] = mx_exp2i(eref - 6);
            }
        }
    }
}

/* ST: the telemetry variant (a separate instantiation, so that the kernels without it
 * keep their register allocation and speed). */
template <typename T, int TR, int TC, bool ST>
__global__ void __launch_bounds__(NT, 2) k_quant(QArgs a) {
    extern __shared__ float4 smem_raw[];
    using L = Smem<TR, TC>;
    constexpr int S = L::S;
    char* sm = (char*)smem_raw;
    float* xs = (float*)(sm + L::xs);
    uint8_t* scl_r = (uint8_t*)(sm + L::scl_r);  // [TR][TC/32]
    uint8_t* scl_c = (uint8_t*)(sm + L::scl_c);  // [TC][TR/32]
    float* sg_r = (float*)(sm + L::sg_r);        // [TC]
    float* sg_c = (float*)(sm + L::sg_c);        // [TR]
    unsigned* cnt = (unsigned*)(sm + L::cnt);    // [4]

    const int rows = a.rows, cols = a.cols;
    const int r0 = blockIdx.y * TR, c0 = blockIdx.x * TC;
    const int tid = threadIdx.x;
    const T* x = (const T*)a.x;

    if (tid < 4) cnt[tid] = 0;
    if (a.s[0].active)
        for (int j = tid; j < TC; j += NT)
            sg_r[j] = (a.s[0].rnd && c0 + j < cols) ? mx_rh_sign(a.s[0].hseed, a.s[0].rot, (uint64_t)(c0 + j)) : 1.0f;
    if (a.s[1].active)
        for (int j = tid; j < TR; j += NT)
            sg_c[j] = (a.s[1].rnd && r0 + j < rows) ? mx_rh_sign(a.s[1].hseed, a.s[1].rot, (uint64_t)(r0 + j)) : 1.0f;

    /* ---- load the tile: all 16-byte loads in flight, then to shared ---- */
    {
        constexpr int V = 16 / sizeof(T);
        constexpr int NV = TR * TC / V;
        static_assert(NV % NT == 0, "tile");
        constexpr int NL = NV / NT;
        const bool vec_ok = (cols % V) == 0;
        uint4 buf[NL];
#pragma unroll
        for (int j = 0; j < NL; j++) {
            int e = j * NT + tid;
            int r = e / (TC / V), cv = e % (TC / V);
            int gr = r0 + r, gc = c0 + cv * V;
            if (gr < rows && gc + V <= cols && vec_ok) {
                buf[j] = __ldg((const uint4*)(x + (size_t)gr * cols + gc));
            } else {
                T tmp[V];
#pragma unroll
                for (int k = 0; k < V; k++) tmp[k] = (gr < rows && gc + k < cols) ? x[(size_t)gr * cols + gc + k] : (T)0;
                memcpy(&buf[j], tmp, 16);
            }
        }
#pragma unroll
        for (int j = 0; j < NL; j++) {
            int e = j * NT + tid;
            int r = e / (TC / V), cv = e % (TC / V);
            T tmp[V];
            memcpy(tmp, &buf[j], 16);
            float f[8];
#pragma unroll
            for (int k = 0; k < V; k++) f[k] = to_f<T>(tmp[k]);
            float4* dst = (float4*)&xs[r * S + cv * V];
            if (V == 4) {
                dst[0] = make_float4(f[0], f[1], f[2], f[3]);
            } else {
                /* two 16-byte halves; the order alternates so 8 lanes hit 8 distinct bank quads */
                float4 lo = make_float4(f[0], f[1], f[2], f[3]), hi = make_float4(f[4 % V], f[5 % V], f[6 % V], f[7 % V]);
                int h = (cv >> 2) & 1;
                dst[h] = h ? hi : lo;
                dst[h ^ 1] = h ? lo : hi;
            }
        }
    }
    __syncthreads();

    if (a.s[0].active) quant_pass<0, TR, TC, ST>(a.s[0], xs, scl_r, sg_r, cnt, r0, c0, rows, cols);
    if (a.s[1].active) quant_pass<1, TR, TC, ST>(a.s[1], xs, scl_c, sg_c, cnt, r0, c0, rows, cols);
    __syncthreads();
    flush_counters(a, cnt);
}


/* Row-direction 1x32 without staging: one CTA of 128 threads per row, one
 * thread per 32-block (NB blocks per thread), rotation n <= 32 in registers.
 * Supports the OUTER fold (e_ref = the row's largest block exponent) in one
 * pass: the codes stay in registers until the row's maximum is known. */
template <typename T, int NB, bool ST>
__global__ void __launch_bounds__(128) k_qrow(QArgs a, int outer) {
    __shared__ int red[4];
    __shared__ unsigned cnt[2];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int r = blockIdx.x, cols = a.cols, rows = a.rows, nb = cols / 32;
    const int rule = a.s[0].rule, sr = a.s[0].sr, n = a.s[0].had_n, rnd = a.s[0].rnd;
    const uint64_t seed = a.s[0].seed, hseed = a.s[0].hseed;
    const uint32_t tsid = a.s[0].tid, rot = a.s[0].rot;
    uint8_t* codes = a.s[0].codes;
    uint8_t* scales = a.s[0].scales;
    uint8_t* e4m3 = a.s[0].e4m3;
    float* fscale = a.s[0].fscale;
    mxg_opstats* stats = a.s[0].stats;
    if (tid < 2) cnt[tid] = 0;
    __syncthreads();
    const T* xr = (const T*)a.x + (size_t)r * cols;
    uint32_t pk[NB][4];
    uint8_t sbk[NB];
    int emax = -1;
#pragma unroll
    for (int j = 0; j < NB; j++) {
        int b = tid + 128 * j;
        sbk[j] = 0;
        pk[j][0] = pk[j][1] = pk[j][2] = pk[j][3] = 0;
        double sgm = 0.0, erm = 0.0;
        unsigned nf = 0, nc = 0;
        if (b < nb) {
            float v[32];
            constexpr int V = 16 / sizeof(T);
            uint4 u[32 / V];
#pragma unroll
            for (int q = 0; q < 32 / V; q++) u[q] = __ldg((const uint4*)(xr + b * 32) + q);
#pragma unroll
            for (int q = 0; q < 32 / V; q++) {
                T tmp[V];
                memcpy(tmp, &u[q], 16);
#pragma unroll
                for (int k = 0; k < V; k++) v[q * V + k] = to_f<T>(tmp[k]);
            }
            if (rnd) {
                /* mx_rh_sign(hseed, rot, j): one Philox call serves 4 consecutive j */
#pragma unroll
                for (int i = 0; i < 32; i += 4) {
                    uint64_t jj = (uint64_t)(b * 32 + i);
                    uint32_t ctr[4] = {(uint32_t)(jj >> 2), (uint32_t)(jj >> 34), rot, (uint32_t)MX_RNG_SIGN};
                    uint32_t key[2] = {(uint32_t)hseed, (uint32_t)(hseed >> 32)};
                    uint32_t o[4];
                    mx_philox4x32_10(ctr, key, o);
#pragma unroll
                    for (int k = 0; k < 4; k++) v[i + k] *= (o[k] >> 31) ? -1.0f : 1.0f;
                }
            }
            fwht_rt(v, n);
            int clip;
            uint8_t sb = quant32(v, rule, 0, sr, seed, tsid, (uint64_t)r * cols + (uint64_t)b * 32, 1, pk[j], clip);
            sbk[j] = sb;
            if (clip) atomicAdd(&cnt[0], 1u);
            if (codes) *(uint4*)(codes + ((size_t)r * cols + (size_t)b * 32) / 2) = make_uint4(pk[j][0], pk[j][1], pk[j][2], pk[j][3]);
            if (scales) scales[(size_t)r * nb + b] = sb;
            if (sb != MX_E8M0_NAN && (int)sb > emax) emax = sb;
            if (ST && stats) {
                stats32(v, pk[j], sb, sgm, erm, nf);
                nc = clip ? 1u : 0u;
            }
        }
        if (ST && stats) stats_flush(stats, sgm, erm, nf, b < nb ? 1u : 0u, nc); /* all lanes: outside the if */
    }
    if (e4m3) {
        int erow = 0;
        if (outer) {
            emax = warp_max(emax);
            if (lane == 0) red[warp] = emax;
            __syncthreads();
            int m = max(max(red[0], red[1]), max(red[2], red[3]));
            erow = m < 0 ? 0 : m - 127;
            if (tid == 0) fscale[r] = mx_exp2i(erow - 6);
        }
        unsigned oow = 0;
#pragma unroll
        for (int j = 0; j < NB; j++) {
            int b = tid + 128 * j;
            int eref = erow;
            if (!outer) {
                /* the 4 blocks of a 128-chunk sit in 4 consecutive lanes */
                int m = (b < nb && sbk[j] != MX_E8M0_NAN) ? (int)sbk[j] : -1;
                m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
                m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
                eref = m < 0 ? 0 : m - 127;
            }
            if (b < nb) {
                uint32_t o[8];
                oow += fold32(pk[j], sbk[j], eref, o);
                uint4* dst = (uint4*)(e4m3 + (size_t)r * cols + (size_t)b * 32);
                dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
                dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
                if (!outer && (b & 3) == 0 && fscale) fscale[(size_t)(b / 4) * rows + r] = mx_exp2i(eref - 6);
            }
        }
        if (oow) atomicAdd(&cnt[1], oow);
    }
    __syncthreads();
    if (tid == 0 && a.s[0].counters) {
        if (cnt[0]) atomicAdd(&a.s[0].counters[0], (unsigned long long)cnt[0]);
        if (cnt[1]) atomicAdd(&a.s[0].counters[1], (unsigned long long)cnt[1]);
    }
}

/* ---- the fast staged quantizer: RNE, rotation <= 32, 1x32 / 32x1, no telemetry ----
 * The outputs of k_quant for the recipes the trainer runs most (every RNE recipe's operands),
 * in fewer instructions a value and with the loads of the next tile in flight while one is
 * computed. A value's work (qf_quant): the butterflies of its rotation, its share of a tree amax,
 * three fma and three min for its code (mx_e2m1_rint_bits: the block scale, and the rotation's norm
 * where that is a power of two, inside the fma), about two prmt-steps to pack it with its sign, and
 * one more to look up its folded E4M3 byte in the block's register table (e4m3_of_codes8). The
 * rotation size is a template argument (one instantiation each of none, 16, 32: with a run-time
 * size the compiler copied the 32 values between the butterfly stages, 2 instructions a value; the
 * other sizes share one run-time instantiation, QF_RT).
 * One thread owns one 32-block per direction of a TR x TC tile: NT = TR*TC/32
 * threads, each making one row-direction and/or one column-direction block.
 *   persistent  a grid of resident CTAs, each looping over tiles; the tile after the current
 *            one is copied by cp.async into the other of two shared buffers meanwhile
 *   staging  the input type as stored (FP32 or BF16), each 32-block of a staged row padded by
 *            16 bytes and a row 4 blocks wide (BF16: QfSmem's gaps too), so the row pass's 16-byte
 *            reads (lanes = 8 rows x 4 blocks), the column pass's scalar reads (lanes = 32
 *            consecutive columns) and its ldmatrix reads are free of bank conflicts
 *   row pass TC = 128: thread t owns block t % 4 of row t / 4; the 4 blocks of a 128-group sit
 *            in 4 consecutive lanes, so e_ref (VEC128) is two shuffles
 *   col pass BF16 (QF_OPT_LDSM): lane l of warp w owns block l % 4 of column 8 w + l / 4, its 32
 *            values from four transposing ldmatrix reads (not 32 two-byte ones); e_ref as the row
 *            pass's, two shuffles
 *   col pass TR = 128 (FP32): thread t owns block t / TC of column t % TC; the 4 blocks of a column's
 *            128-group meet in shared memory (one barrier)
 * Configurations: both directions 128 x 128 (512 threads), row only 64 x 128, column only
 * 128 x 64 (256 threads). Inputs whose rows are not whole 16-byte chunks take k_quant.
 * Bit for bit k_quant's outputs (the GPU quantizer tests run both on every configuration). */
int g_qfast = 1;  /* mxg_quant_set_fast */

/* The staged tile: each 32-block of a row padded by 16 bytes (both passes read it without bank conflicts).
 * BF16 tiles also: a row's stride 64 bytes past a multiple of 128 and 16 bytes between groups of 32 rows,
 * so that the 8 rows of one of the column pass's ldmatrix reads (2 adjacent rows of each of 4 groups,
 * qf_pass) fall in 8 different 16-byte bank groups. */
template <typename T, int TR, int TC> struct QfSmem {
    static constexpr int BSB = 32 * (int)sizeof(T) + 16;  /* bytes a staged 32-block takes */
    static constexpr int SB0 = (TC / 32) * BSB;
    static constexpr int SB = sizeof(T) == 2 ? SB0 + (12 - SB0 / 16 % 8) % 8 * 16 : SB0; /* bytes a staged row takes */
    static constexpr int GP = sizeof(T) == 2 ? 16 : 0;    /* bytes between groups of 32 rows */
    static_assert(sizeof(T) != 2 || SB % 128 == 64, "QfSmem: a BF16 row's stride is 64 past a multiple of 128");
    static constexpr size_t tile = (size_t)TR * SB + (size_t)(TR / 32) * GP;
    static constexpr size_t xs = 0;                         /* [2][tile] */
    static constexpr size_t sg_r = 2 * tile;                /* [TC] float */
    static constexpr size_t sg_c = sg_r + sizeof(float) * TC;
    static constexpr size_t scl_c = sg_c + sizeof(float) * TR;  /* [TR/32][TC] column blocks' scales */
    static constexpr size_t cnt = (scl_c + TC * (TR / 32) + 15) / 16 * 16;
    static constexpr size_t total = cnt + 16;
};

/* The byte offset of element (r, c) in a staged tile. */
template <typename T, int TR, int TC> __device__ __forceinline__ int qf_at(int r, int c) {
    using L = QfSmem<T, TR, TC>;
    return r * L::SB + (r >> 5) * L::GP + (c >> 5) * L::BSB + (c & 31) * (int)sizeof(T);
}

/* The floats of 16 staged bytes (8 BF16 values or 4 FP32 ones) into v[0..]. */
template <typename T> __device__ __forceinline__ void qf_unpack16(const uint4& u, float* v) {
    if constexpr (sizeof(T) == 2) {
        bf16x2_f32(u.x, v[0], v[1]);
        bf16x2_f32(u.y, v[2], v[3]);
        bf16x2_f32(u.z, v[4], v[5]);
        bf16x2_f32(u.w, v[6], v[7]);
    } else {
        v[0] = mx_u2f(u.x); v[1] = mx_u2f(u.y); v[2] = mx_u2f(u.z); v[3] = mx_u2f(u.w);
    }
}

/* Candidate code paths of the fast kernels (k_qfast; k_qswiglu takes MAD and INV through qf_pass), a bit each of their
 * OPT template argument; QF_OPT is what
 * the trainer and `mxlm bench quant` run. bench/qfast_ab.cu times QF_OPT and each one-bit flip of it on the device,
 * byte for byte against its outputs; a bit that wins there (and passes make test-gpu) joins QF_OPT, and its other
 * branch goes. Each leaves the outputs as they are by construction:
 *   QF_OPT_PF   qf_prefetch: a tile wholly inside x copied from one pointer, no per-chunk bounds (the edge form
 *               spends ~120 of a thread's instructions a tile on addresses and compares: ~2 of the ~24 a value
 *               and direction of the two-direction kernel)
 *   QF_OPT_MAD  qf_quant: the codes packed by e2m1_pack8_mad (six ALU-pipe instructions of eight values on the
 *               multiply-add pipe: the ALU pipe is the one that throttles the kernel, docs/gpu.md). In QF_OPT by
 *               default: noise with the scalar column pass, 1.015-1.043x on the BF16 two-direction and SwiGLU
 *               kernels with LDSM (H100, 2026-12-07)
 *   QF_OPT_INV  qf_quant: the block's 1 / scale as one shift of the scale byte (mx_exp2i's subnormal branch cannot
 *               be taken: the byte is at most 253)
 *   QF_OPT_LDSM qf_pass: a BF16 column pass (TR 128) reads its block by four ldmatrix.x4.trans of value pairs
 *               (the 32 two-byte loads they replace were the kernel's shared-memory queue stalls, mio_throttle and
 *               short_sb: docs/gpu.md), its column's 4 blocks in one lane quad (e_ref by shuffles, no barrier).
 *               In QF_OPT by default (MXLM_QF_OPT=2 builds the scalar column pass): 1.27x on the BF16 column-only
 *               kernel, 1.21x on the issue's two-direction one (H100, 2026-12-07, bench/qfast_ab.cu) */
enum { QF_OPT_PF = 1, QF_OPT_MAD = 2, QF_OPT_INV = 4, QF_OPT_LDSM = 8, QF_OPT_ALL = 15 };
#ifndef MXLM_QF_OPT
#define MXLM_QF_OPT (QF_OPT_LDSM | QF_OPT_MAD)
#endif
constexpr int QF_OPT = MXLM_QF_OPT;

/* The rotation sizes the fast kernels instantiate (the trainer's: none, h16, h32); QF_RT: any size up to 32
 * known at run time (fwht_rt, the norm multiplied in), for the others. */
constexpr int QF_RT = -1;
constexpr bool qf_rot(int n) { return n == 0 || n == 16 || n == 32; }

/* One block quantized in registers: v its 32 values after hN's butterflies (fwht_ct<N>, not yet times
 * nrm = mx_hadamard_norm(N); 1 without rotation). Returns the scale byte (NaN for a block holding NaN or
 * Inf, whose codes are 0) and the packed codes pk of src/mx/mxfp4.c's quantizer applied to fl(v * nrm);
 * clip: amax * inv > 6 (some value saturates). The reference's amax is the max of fl(|v| * nrm), which
 * is fl(max |v| * nrm) (rounding is monotone). Its values y = fl(v * nrm) * inv enter the rounding's fma
 * as |v| * s: with nrm a power of two (N 0, 16) s = nrm * inv, else v is multiplied by nrm first, as the
 * reference, and s = inv. Exact while inv <= 2^100 (scale byte >= 27): a power-of-two scaling then keeps
 * a value normal or leaves it below 2^-26, where the reference's rounded y and the fma's exact one both
 * give code 0 (its sign kept). A tinier block (all zero included) takes the reference's two roundings. */
template <int N, int OPT = QF_OPT>
__device__ __forceinline__ uint8_t qf_quant(float (&v)[32], int rule, uint32_t (&pk)[4], bool& clip) {
    constexpr bool POW2 = N <= 0 || N == 4 || N == 16;   /* QF_RT: v is already normalized (nrm 1) */
    const float nrm = N > 0 ? mx_hadamard_norm(N) : 1.0f;
    if constexpr (!POW2)
#pragma unroll
        for (int i = 0; i < 32; i++) v[i] *= nrm;
    const float amax = POW2 && N > 0 ? amax32(v) * nrm : amax32(v);
    clip = false;
    pk[0] = pk[1] = pk[2] = pk[3] = 0;
    if (!(amax <= 3.4028235e38f)) return (uint8_t)MX_E8M0_NAN;
    const uint8_t sb = mx_e8m0_for_amax(amax, (mx_scale_rule)rule);
    const float inv = (OPT & QF_OPT_INV) ? mx_u2f((uint32_t)(254 - (int)sb) << 23) : mx_exp2i(127 - (int)sb);
    clip = amax * inv > 6.0f;
    /* the codes of the 32 values, 8 at a time, by the rounding `code` (its float's bits) */
    auto pack = [&](auto code) {
#pragma unroll
        for (int w = 0; w < 4; w++) {
            uint32_t t[8];
#pragma unroll
            for (int k = 0; k < 8; k++) t[k] = code(v[8 * w + k]);
            pk[w] = (OPT & QF_OPT_MAD) ? e2m1_pack8_mad(t, &v[8 * w]) : e2m1_pack8(t, &v[8 * w]);
        }
    };
    if (sb >= 27) {
        const float sc = POW2 ? nrm * inv : inv;
        pack([&](float x) { return mx_e2m1_rint_scaled(fabsf(x), sc); });
    } else {
        pack([&](float x) { return mx_e2m1_rint_bits(fabsf((POW2 ? x * nrm : x) * inv)); });
    }
    return sb;
}

/* One direction's block of the staged tile xt (at r0, c0 in x): DIR 0 a 32-block of a row, DIR 1
 * of a column, owned by this thread; N its rotation. Every thread of the CTA calls it (the scalar column
 * pass's e_ref exchange has a barrier; the LDSM one's is two shuffles). */
template <int DIR, int N, typename T, int TR, int TC, int OPT = QF_OPT>
__device__ __forceinline__ void qf_pass(const Slot& s, const char* xt, const float* sgn, uint8_t* scl_c, unsigned* cnt,
                                        int r0, int c0, int rows, int cols) {
    /* LDSM: the transposing reads (QF_OPT_LDSM); lane l of warp w owns block l % 4 of column 8 w + l / 4 */
    constexpr bool LDSM = DIR == 1 && (OPT & QF_OPT_LDSM) && sizeof(T) == 2 && TR == 128;
    const int tid = threadIdx.x, lane = tid & 31;
    const int NB = DIR ? TR / 32 : TC / 32, NL = DIR ? TC : TR;
    const int li = LDSM ? (tid >> 5) * 8 + (lane >> 2) : DIR ? tid % NL : tid / NB;
    const int bi = LDSM ? lane & 3 : DIR ? tid / NL : tid % NB;
    const int gl = (DIR ? c0 : r0) + li, gb = (DIR ? r0 : c0) + bi * 32;
    const int LN = DIR ? cols : rows, BN = DIR ? rows : cols;
    const bool valid = gl < LN && gb < BN;
    float v[32];
    if (DIR == 0) {
#pragma unroll
        for (int i = 0; i < 32; i += 16 / (int)sizeof(T))
            qf_unpack16<T>(*(const uint4*)(xt + qf_at<T, TR, TC>(li, bi * 32 + i)), &v[i]);
    } else if constexpr (LDSM) {
        /* read k, matrix m = lane / 8: its 8 row addresses (lane % 8 = a) are rows 32 (a / 2) + 8 k + 2 m + a % 2
         * at the warp's 8 columns, so that the lanes of quad q receive rows 32 q + 8 k + 2 m and the next one: v[8 k
         * + 2 m] (the low half) and v[8 k + 2 m + 1] of their block (bi = q) */
        const int a = lane & 7, m = lane >> 3;
        const uint32_t p = (uint32_t)__cvta_generic_to_shared(xt + qf_at<T, TR, TC>(32 * (a >> 1) + 2 * m + (a & 1), (tid >> 5) * 8));
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w[4];
            ldsm4t(w, p + k * 8 * QfSmem<T, TR, TC>::SB);
#pragma unroll
            for (int q = 0; q < 4; q++) bf16x2_f32(w[q], v[8 * k + 2 * q], v[8 * k + 2 * q + 1]);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 32; i++) v[i] = to_f<T>(*(const T*)(xt + qf_at<T, TR, TC>(bi * 32 + i, li)));
    }
    if (s.rnd)
#pragma unroll
        for (int i = 0; i < 32; i++) v[i] *= sgn[bi * 32 + i];
    if constexpr (N == QF_RT) fwht_rt(v, s.had_n);
    else fwht_ct<N>(v);
    uint32_t pk[4];
    bool clip;
    const uint8_t sb = qf_quant<N, OPT>(v, s.rule, pk, clip);
    const unsigned nclip = __popc(__ballot_sync(0xffffffffu, valid && clip));
    if (lane == 0 && nclip) atomicAdd(&cnt[2 * DIR], nclip);
    if (s.codes && valid) *(uint4*)(s.codes + ((size_t)gl * BN + gb) / 2) = make_uint4(pk[0], pk[1], pk[2], pk[3]);
    if (s.scales && valid) s.scales[(size_t)gl * (BN / 32) + gb / 32] = sb;
    if (!s.e4m3) return;
    /* e_ref: the largest non-NaN block exponent of the 128-group (4 blocks along the block axis) */
    int m = (valid && sb != MX_E8M0_NAN) ? (int)sb : -1;
    if (DIR == 0 || LDSM) {
        m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
    } else {
        scl_c[bi * TC + li] = (uint8_t)(m < 0 ? MX_E8M0_NAN : m);
        __syncthreads();
        const int g0 = bi & ~3;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const uint8_t o = scl_c[(g0 + q) * TC + li];
            if (o != MX_E8M0_NAN) m = max(m, (int)o);
        }
    }
    const int eref = m < 0 ? 0 : m - 127;
    if (!valid) return;
    uint32_t o[8];
    if (fold32(pk, sb, eref, o)) atomicAdd(&cnt[2 * DIR + 1], 1u);
    uint4* dst = (uint4*)(s.e4m3 + (size_t)gl * BN + gb);
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
    if ((bi & 3) == 0 && s.fscale) s.fscale[(size_t)(gb / 128) * LN + gl] = mx_exp2i(eref - 6);
}

/* A persistent CTA's walk over the tiles: tile t = tr * ntc + tc, then t + gridDim.x, ...; the tile's
 * row and column advanced by the grid's quotient and remainder (worked out once), not divided anew. */
struct TileWalk {
    int tr, tc, ntc, gr, gc;
    __device__ TileWalk(int t, int ntc_) : tr(t / ntc_), tc(t % ntc_), ntc(ntc_), gr(gridDim.x / ntc_), gc(gridDim.x % ntc_) {}
    __device__ void next() {
        tc += gc;
        tr += gr;
        if (tc >= ntc) { tc -= ntc; tr++; }
    }
};

/* Issue the cp.async copies of the tile at (r0, c0) into the staged buffer xt (chunks outside x are
 * zero-filled), one commit group. Thread t copies the 16-byte chunk (r, c) = (t / CPR, (t % CPR) * V) of
 * every RS-row step (CPR chunks a row, RS = NT / CPR rows a step). A tile wholly inside x (all but the
 * last row and column of tiles; a uniform branch) takes one source pointer advanced by RS rows a chunk and
 * no per-chunk bounds (the edge form made a 64-bit address, two compares and a select per chunk: about
 * 120 of a thread's instructions a tile, ~2 a value and direction of the two-direction kernel's ~24). */
template <typename T, int TR, int TC, int OPT = QF_OPT>
__device__ __forceinline__ void qf_prefetch(const T* x, int rows, int cols, int r0, int c0, char* xt) {
    constexpr int V = 16 / sizeof(T), NT = TR * TC / 32, CPR = TC / V, RS = NT / CPR, NL = TR / RS;
    static_assert(NT % CPR == 0 && TR % RS == 0, "qf_prefetch: a step covers whole rows");
    static_assert(RS % 32 == 0 || 32 % RS == 0, "qf_prefetch: a step's rows cross no 32-row group but at its ends");
    const int r = threadIdx.x / CPR, c = (threadIdx.x % CPR) * V;
    const uint32_t dst = (uint32_t)__cvta_generic_to_shared(xt + qf_at<T, TR, TC>(r, c));
    /* step j's bytes past dst: j RS staged rows and the gaps of the 32-row groups they pass */
    auto DSTEP = [](int j) { return (uint32_t)(j * RS * QfSmem<T, TR, TC>::SB + (j * RS >> 5) * QfSmem<T, TR, TC>::GP); };
    if ((OPT & QF_OPT_PF) && r0 + TR <= rows && c0 + TC <= cols) {
        const T* src = x + (size_t)(r0 + r) * cols + c0 + c;
        const size_t step = (size_t)RS * cols;
#pragma unroll
        for (int j = 0; j < NL; j++)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + DSTEP(j)), "l"(src + j * step));
    } else {
#pragma unroll
        for (int j = 0; j < NL; j++) {
            const int rj = r + j * RS;
            const bool in = r0 + rj < rows && c0 + c < cols;
            const T* src = in ? x + (size_t)(r0 + rj) * cols + c0 + c : x;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + DSTEP(j)), "l"(src), "r"(in ? 16 : 0));
        }
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

template <typename T, int TR, int TC, int N, int MINB = ((TR * TC / 32) > 256 ? 1 : 3), int OPT = QF_OPT>
__global__ void __launch_bounds__(TR * TC / 32, MINB) k_qfast(QArgs a) {
    constexpr int NT = TR * TC / 32;
    using L = QfSmem<T, TR, TC>;
    extern __shared__ float4 smem_raw[];
    char* sm = (char*)smem_raw;
    float* sg_r = (float*)(sm + L::sg_r);
    float* sg_c = (float*)(sm + L::sg_c);
    uint8_t* scl_c = (uint8_t*)(sm + L::scl_c);
    unsigned* cnt = (unsigned*)(sm + L::cnt);
    const int rows = a.rows, cols = a.cols, tid = threadIdx.x;
    const int ntc = (cols + TC - 1) / TC, ntiles = ((rows + TR - 1) / TR) * ntc;
    const T* x = (const T*)a.x;
    if (tid < 4) cnt[tid] = 0;
    TileWalk cur(blockIdx.x, ntc), nxt = cur;
    nxt.next();
    int t = blockIdx.x;
    if (t < ntiles) qf_prefetch<T, TR, TC, OPT>(x, rows, cols, cur.tr * TR, cur.tc * TC, sm + L::xs);
    for (int k = 0; t < ntiles; t += gridDim.x, k++) {
        if (t + (int)gridDim.x < ntiles) {
            qf_prefetch<T, TR, TC, OPT>(x, rows, cols, nxt.tr * TR, nxt.tc * TC, sm + L::xs + ((k + 1) & 1) * L::tile);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        const int r0 = cur.tr * TR, c0 = cur.tc * TC;
        if (a.s[0].active && a.s[0].rnd)
            for (int j = tid; j < TC; j += NT)
                sg_r[j] = c0 + j < cols ? mx_rh_sign(a.s[0].hseed, a.s[0].rot, (uint64_t)(c0 + j)) : 1.0f;
        if (a.s[1].active && a.s[1].rnd)
            for (int j = tid; j < TR; j += NT)
                sg_c[j] = r0 + j < rows ? mx_rh_sign(a.s[1].hseed, a.s[1].rot, (uint64_t)(r0 + j)) : 1.0f;
        __syncthreads();
        const char* xt = sm + L::xs + (k & 1) * L::tile;
        /* the row pass needs the 4 blocks of a 128-group across the tile (TC 128), the column pass likewise (TR 128) */
        if constexpr (TC == 128)
            if (a.s[0].active) qf_pass<0, N, T, TR, TC, OPT>(a.s[0], xt, sg_r, scl_c, cnt, r0, c0, rows, cols);
        if constexpr (TR == 128)
            if (a.s[1].active) qf_pass<1, N, T, TR, TC, OPT>(a.s[1], xt, sg_c, scl_c, cnt, r0, c0, rows, cols);
        cur = nxt;
        nxt.next();
        __syncthreads(); /* buffer k & 1 is the next prefetch's target */
    }
    __syncthreads();
    flush_counters(a, cnt);
}

/* The fast kernel's instantiation for a's active directions: their rotation size where they share one of
 * qf_rot's, QF_RT for other sizes up to 32 (or two different ones), -2 where one is larger. */
int qf_rot_of(const QArgs& a) {
    int n = -3;
    for (int d = 0; d < 2; d++) {
        if (!a.s[d].active) continue;
        if (a.s[d].had_n > 32) return -2;
        n = (n == -3 || n == a.s[d].had_n) && qf_rot(a.s[d].had_n) ? a.s[d].had_n : QF_RT;
    }
    return n;
}

/* The fast kernel takes a's outputs: RNE, no 32x32, rotation <= 32, no telemetry, VEC128 fold, and
 * rows of whole 16-byte chunks (cp.async). */
bool qfast_ok(const QArgs& a, mxg_dtype dt) {
    for (int d = 0; d < 2; d++) {
        const Slot& s = a.s[d];
        if (s.active && (s.sr || s.l32 || s.stats || s.outer)) return false;
    }
    if (qf_rot_of(a) < QF_RT) return false;
    const int V = dt == MXG_BF16 ? 8 : 4;
    return (a.s[0].active || a.s[1].active) && a.cols % V == 0 && ((uintptr_t)a.x & 15) == 0;
}

/* A persistent kernel kern(a) of nt threads and smem bytes of dynamic shared memory on st: a grid of its CTAs
 * that fit the device at once (worked out on the first call into *resident, the caller's per kernel, with that
 * shared memory allowed), or fewer where there are fewer tiles; each CTA loops over the tiles. */
template <typename K, typename A>
int launch_persistent(K kern, int nt, size_t smem, int ntiles, int* resident, const A& a, cudaStream_t st) {
    if (!*resident) {
        CU_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        int dev = 0, sms = 0, per = 0;
        CU_TRY(cudaGetDevice(&dev));
        CU_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kern, nt, smem));
        *resident = sms * (per > 0 ? per : 1);
    }
    kern<<<ntiles < *resident ? ntiles : *resident, nt, smem, st>>>(a);
    CU_LAUNCHED();
    return MX_OK;
}

template <typename T, int TR, int TC, int N, int MINB = ((TR * TC / 32) > 256 ? 1 : 3), int OPT = QF_OPT>
int launch_qfast_cfg(const QArgs& a, cudaStream_t st) {
    using L = QfSmem<T, TR, TC>;
    constexpr int NT = TR * TC / 32;
    static int resident = 0; /* CTAs of this kernel that fit the device at once */
    return launch_persistent(k_qfast<T, TR, TC, N, MINB, OPT>, NT, L::total,
                             ((a.rows + TR - 1) / TR) * ((a.cols + TC - 1) / TC), &resident, a, st);
}

/* The two-direction h16 kernel on BF16 without random signs (the trainer's X and dY operands) held to 64
 * registers, two CTAs an SM (its two 40-KB tile buffers allow it; FP32's 72-KB ones do not): 0.187 -> 0.166 ms
 * for both directions' E4M3 of [16384, 4096] on the H200, 0.162 -> 0.150 ms for the codes; with rh16's sign
 * multiplies 0.169 -> 0.180, so those keep one CTA (docs/gpu.md, 2026-12-04). */
template <typename T, int N> int launch_qfast_n(const QArgs& a, cudaStream_t st) {
    if constexpr (N == 16 && sizeof(T) == 2)
        if (a.s[0].active && a.s[1].active && !a.s[0].rnd && !a.s[1].rnd) return launch_qfast_cfg<T, 128, 128, N, 2>(a, st);
    if (a.s[0].active && a.s[1].active) return launch_qfast_cfg<T, 128, 128, N>(a, st);
    if (a.s[0].active) return launch_qfast_cfg<T, 64, 128, N>(a, st);
    return launch_qfast_cfg<T, 128, 64, N>(a, st);
}

/* f(std::integral_constant<int, N>()) for the instantiation of rotation size n (qf_rot_of's): N = n where qf_rot
 * has one, else QF_RT; the fast kernels' launchers dispatch through it. */
template <typename F> int qf_with_rot(int n, F f) {
    switch (n) {
    case 0: return f(std::integral_constant<int, 0>());
    case 16: return f(std::integral_constant<int, 16>());
    case 32: return f(std::integral_constant<int, 32>());
    default: return f(std::integral_constant<int, QF_RT>());
    }
}

template <typename T> int launch_qfast(const QArgs& a, cudaStream_t st) {
    return qf_with_rot(qf_rot_of(a), [&](auto n) { return launch_qfast_n<T, decltype(n)::value>(a, st); });
}

/* ---- the fast one-pass OUTER row quantizer (issue 16: the MXFP4 GEMMs on OUTER scales) ----
 * A lone 1x32 output folded with OUTER scales (e_ref the row's largest non-NaN block exponent, as
 * fold.c's MX_FOLD_OUTER): the fast kernel's staging and block work over tiles of whole rows. A tile is
 * tr = QO_NT / nbr rows (nbr = cols / 32 blocks a row, at most QO_NT), a contiguous run of x, copied by
 * cp.async into one of two shared buffers while the other is computed; thread t owns block t of the tile
 * (row t / nbr): it rotates and quantizes its block (qf_quant; codes in registers), the row's maximum
 * meets in shared memory (one shared atomicMax a warp where the warp lies in one row, one a lane where
 * it spans two), and after a barrier the thread folds its block under the row's e_ref (fold32). Two
 * barriers a tile. Same outputs as k_qrow's OUTER pass (the GPU quantizer tests run both against the
 * CPU). RNE, no telemetry, no random signs (those take k_qrow). */
constexpr int QO_NT = 512;

template <typename T> struct QoSmem {
    static constexpr int BSB = 32 * (int)sizeof(T) + 16; /* bytes a staged 32-block takes (conflict-free rows) */
    static constexpr size_t tile = (size_t)QO_NT * BSB;  /* a tile: at most QO_NT blocks */
    static constexpr size_t xs = 0;                      /* [2][tile] */
    static constexpr size_t rmax = 2 * tile;             /* [2][QO_NT / 4] int: the rows' largest scale byte */
    static constexpr size_t cnt = rmax + 2 * sizeof(int) * (QO_NT / 4);
    static constexpr size_t total = cnt + 16;
};

/* The cp.async copies of the tile starting at element e0 (nblk blocks, contiguous in x; chunks past n
 * zero-filled) into xt, the 16-byte chunks of consecutive threads consecutive; one commit group. */
template <typename T>
__device__ __forceinline__ void qo_prefetch(const T* x, size_t n, size_t e0, int nblk, char* xt) {
    constexpr int V = 16 / sizeof(T), CPB = 32 / V; /* chunks a block */
    using L = QoSmem<T>;
#pragma unroll
    for (int j = 0; j < CPB; j++) {
        const int e = j * QO_NT + threadIdx.x; /* chunk e of the tile: block e / CPB, values (e % CPB) * V.. */
        if (e >= nblk * CPB) break;
        const size_t g = e0 + (size_t)e * V;
        const bool in = g < n;
        const uint32_t dst = (uint32_t)__cvta_generic_to_shared(xt + (e / CPB) * L::BSB + (e % CPB) * 16);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(in ? x + g : x), "r"(in ? 16 : 0));
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

template <typename T, int N, int MINB>
__global__ void __launch_bounds__(QO_NT, MINB) k_qouter(QArgs a) {
    using L = QoSmem<T>;
    extern __shared__ float4 smem_raw[];
    char* sm = (char*)smem_raw;
    int* rmax = (int*)(sm + L::rmax);
    unsigned* cnt = (unsigned*)(sm + L::cnt);
    const Slot& s = a.s[0];
    const int rows = a.rows, cols = a.cols, tid = threadIdx.x, lane = tid & 31;
    const int nbr = cols / 32, tr = QO_NT / nbr, nblk = tr * nbr, ntiles = (rows + tr - 1) / tr;
    const size_t n = (size_t)rows * cols;
    const T* x = (const T*)a.x;
    const int rl = tid / nbr, bi = tid % nbr; /* this thread's block in every tile: row rl, block bi */
    if (tid < 4) cnt[tid] = 0;
    if (tid < QO_NT / 4) rmax[tid] = -1;
    int t = blockIdx.x;
    if (t < ntiles) qo_prefetch<T>(x, n, (size_t)t * tr * cols, nblk, sm + L::xs);
    for (int k = 0; t < ntiles; t += gridDim.x, k++) {
        if (t + (int)gridDim.x < ntiles) {
            qo_prefetch<T>(x, n, (size_t)(t + gridDim.x) * tr * cols, nblk, sm + L::xs + ((k + 1) & 1) * L::tile);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads(); /* the tile's copies (every thread's) and rmax[k & 1]'s reset are in */
        int* rm = rmax + (k & 1) * (QO_NT / 4);
        if (tid < QO_NT / 4) rmax[((k + 1) & 1) * (QO_NT / 4) + tid] = -1; /* the next tile's (last read a tile ago) */
        const int gl = t * tr + rl; /* this block's row in x */
        const bool valid = tid < nblk && gl < rows;
        uint32_t pk[4] = {0, 0, 0, 0};
        uint8_t sb = MX_E8M0_NAN;
        bool clip = false;
        if (tid < nblk) {
            const char* xb = sm + L::xs + (k & 1) * L::tile + tid * L::BSB;
            float v[32];
#pragma unroll
            for (int i = 0; i < 32; i += 16 / (int)sizeof(T)) qf_unpack16<T>(*(const uint4*)(xb + i * (int)sizeof(T)), &v[i]);
            if constexpr (N == QF_RT) fwht_rt(v, s.had_n);
            else fwht_ct<N>(v);
            sb = qf_quant<N>(v, s.rule, pk, clip);
        }
        const unsigned nclip = __popc(__ballot_sync(0xffffffffu, valid && clip));
        if (lane == 0 && nclip) atomicAdd(&cnt[0], nclip);
        if (valid && s.codes) *(uint4*)(s.codes + ((size_t)gl * cols + bi * 32) / 2) = make_uint4(pk[0], pk[1], pk[2], pk[3]);
        if (valid && s.scales) s.scales[(size_t)gl * nbr + bi] = sb;
        /* the row's largest non-NaN scale byte (-1: none) */
        int m = (valid && sb != MX_E8M0_NAN) ? (int)sb : -1;
        /* (rl < QO_NT / 4 as nbr >= 4; an idle thread's rl names no row of the tile and is never read) */
        if (__shfl_sync(0xffffffffu, rl, 0) == __shfl_sync(0xffffffffu, rl, 31)) {
            m = __reduce_max_sync(0xffffffffu, m);
            if (lane == 0) atomicMax(&rm[rl], m);
        } else if (m >= 0) {
            atomicMax(&rm[rl], m);
        }
        __syncthreads(); /* the rows' maxima are in; the buffer's values were all read */
        if (!valid) continue;
        const int mr = rm[rl];
        const int eref = mr < 0 ? 0 : mr - 127;
        uint32_t o[8];
        if (fold32(pk, sb, eref, o)) atomicAdd(&cnt[1], 1u);
        uint4* dst = (uint4*)(s.e4m3 + (size_t)gl * cols + bi * 32);
        dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
        dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
        if (bi == 0 && s.fscale) s.fscale[gl] = mx_exp2i(eref - 6);
    }
    __syncthreads();
    flush_counters(a, cnt);
}

/* k_qouter takes a's output: a lone row-direction 1x32 output folded OUTER, RNE, rotation <= 32 without
 * random signs, no telemetry, at most QO_NT blocks a row, a 16-byte aligned input. */
bool qouter_ok(const QArgs& a) {
    const Slot& s = a.s[0];
    return s.active && !a.s[1].active && s.outer && !s.l32 && !s.sr && !s.stats && !s.rnd && s.had_n <= 32 &&
           a.cols % 128 == 0 && a.cols / 32 <= QO_NT && ((uintptr_t)a.x & 15) == 0;
}

template <typename T, int N> int launch_qouter_n(const QArgs& a, cudaStream_t st) {
    /* BF16's two 40-KB buffers allow two CTAs an SM (at 64 registers), FP32's 72-KB ones one */
    constexpr int MINB = sizeof(T) == 2 ? 2 : 1;
    using L = QoSmem<T>;
    static int resident = 0;
    const int tr = QO_NT / (a.cols / 32);
    return launch_persistent(k_qouter<T, N, MINB>, QO_NT, L::total, (a.rows + tr - 1) / tr, &resident, a, st);
}

template <typename T> int launch_qouter(const QArgs& a, cudaStream_t st) {
    return qf_with_rot(qf_rot_of(a), [&](auto n) { return launch_qouter_n<T, decltype(n)::value>(a, st); });
}

/* ---- quantize-on-produce: the SwiGLU backward's outputs (mxg_quantize_swiglu_bwd) ---- */

/* Two tensors (dgate, dup) made tile by tile in shared memory from gate, up and dh, then each quantized
 * in both directions there by the fast kernel's passes (qf_pass): the bytes that k_qfast makes from the
 * FP32 tensors swiglu.cu's backward writes, which are never written. With BF16 inputs (T = uint16_t: the GPU
 * model's act16) dgate and dup are rounded to BF16 as the BF16 backward stores them (k_swiglu_bwd16) and
 * staged as BF16, so the passes are k_qfast's BF16 ones on the bytes it would read: its bytes. The tiles are
 * staged as the inputs are typed (BF16: two 40-KB tiles, two CTAs an SM under h16, as k_qfast's BF16
 * two-direction kernel; FP32: two 72-KB tiles, one CTA). */
struct QsArgs {
    const void *dh, *gate, *up; /* T [rows, cols] */
    int rows, cols;
    QArgs q[2]; /* [0] dgate, [1] dup: their slots (q[t].x unused) */
};

template <typename T, int TR, int TC> struct QsSmem {
    using F = QfSmem<T, TR, TC>;
    static constexpr size_t tile = F::tile;
    static constexpr size_t xs = 0;                             /* [2][tile]: dgate, dup */
    static constexpr size_t sg = 2 * tile;                      /* [4][128] float: signs of the four outputs */
    static constexpr size_t scl_c = sg + sizeof(float) * 4 * 128;
    static constexpr size_t cnt = (scl_c + TC * (TR / 32) + 15) / 16 * 16;   /* [8]: dgate's four counters, dup's */
    static constexpr size_t total = cnt + 32;
};

/* Ask the 128-byte line holding p into L2 (no register, no wait). */
__device__ __forceinline__ void l2_prefetch(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

/* dgate and dup of 16 bytes of gate, up and dh (4 FP32 values, or 8 BF16 ones rounded to BF16 as k_swiglu_bwd16
 * stores them), as the 16 bytes of each that the staged tile holds. */
__device__ __forceinline__ void qs_values(const float*, const uint4& g, const uint4& u, const uint4& d, uint4& og, uint4& ou) {
    const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w}, dw[4] = {d.x, d.y, d.z, d.w};
    uint32_t a[4], b[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        float dg, du;
        swiglu_d(mx_u2f(gw[q]), mx_u2f(uw[q]), mx_u2f(dw[q]), &dg, &du);
        a[q] = mx_f2u(dg);
        b[q] = mx_f2u(du);
    }
    og = make_uint4(a[0], a[1], a[2], a[3]);
    ou = make_uint4(b[0], b[1], b[2], b[3]);
}
__device__ __forceinline__ void qs_values(const uint16_t*, const uint4& g, const uint4& u, const uint4& d, uint4& og,
                                          uint4& ou) {
    const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w}, dw[4] = {d.x, d.y, d.z, d.w};
    uint32_t a[4], b[4];
#pragma unroll
    for (int q = 0; q < 4; q++) { /* values 2q (the low half) and 2q + 1 */
        float g0, g1, u0, u1, d0, d1, dg0, dg1, du0, du1;
        bf16x2_f32(gw[q], g0, g1);
        bf16x2_f32(uw[q], u0, u1);
        bf16x2_f32(dw[q], d0, d1);
        swiglu_d(g0, u0, d0, &dg0, &du0);
        swiglu_d(g1, u1, d1, &dg1, &du1);
        a[q] = bf16x2_rn(dg0, dg1);
        b[q] = bf16x2_rn(du0, du1);
    }
    og = make_uint4(a[0], a[1], a[2], a[3]);
    ou = make_uint4(b[0], b[1], b[2], b[3]);
}

/* dgate and dup of the tile at (r0, c0) into the staged tiles xg, xu (zero outside x), 16 bytes of each input a
 * thread and step, the loads of H steps' worth issued before any is used: FP32 two halves of 4 (registers are free
 * until the passes, one CTA an SM), BF16 one at a time (two CTAs an SM at 64 registers: three 16-byte loads a
 * thread in flight are enough, and more spill). */
template <typename T>
__device__ __forceinline__ void qs_make(const T* gate, const T* up, const T* dh, int rows, int cols, int r0, int c0,
                                        char* xg, char* xu) {
    constexpr int TR = 128, TC = 128, NT = TR * TC / 32, V = 16 / (int)sizeof(T), LD = TR * TC / V / NT;
    constexpr int H = sizeof(T) == 2 ? LD : 2, PH = LD / H; /* steps, loads a step */
#pragma unroll
    for (int h = 0; h < H; h++) {
        uint4 gv[PH], uv[PH], dv[PH];
#pragma unroll
        for (int j = 0; j < PH; j++) {
            const int e = threadIdx.x + (h * PH + j) * NT, r = e / (TC / V), c = (e % (TC / V)) * V;
            gv[j] = uv[j] = dv[j] = make_uint4(0, 0, 0, 0);
            if (r0 + r < rows && c0 + c < cols) {
                const size_t i = (size_t)(r0 + r) * cols + c0 + c;
                gv[j] = __ldg((const uint4*)(gate + i));
                uv[j] = __ldg((const uint4*)(up + i));
                dv[j] = __ldg((const uint4*)(dh + i));
            }
        }
#pragma unroll
        for (int j = 0; j < PH; j++) {
            const int e = threadIdx.x + (h * PH + j) * NT, r = e / (TC / V), c = (e % (TC / V)) * V;
            uint4 og = make_uint4(0, 0, 0, 0), ou = og;
            if (r0 + r < rows && c0 + c < cols) qs_values(gate, gv[j], uv[j], dv[j], og, ou);
            *(uint4*)(xg + qf_at<T, TR, TC>(r, c)) = og;
            *(uint4*)(xu + qf_at<T, TR, TC>(r, c)) = ou;
        }
    }
}

template <typename T, int TR, int TC, int N, int MINB, int OPT = QF_OPT>
__global__ void __launch_bounds__(TR * TC / 32, MINB) k_qswiglu(QsArgs a) {
    static_assert(TR == 128 && TC == 128, "both passes need whole 128-groups in the tile");
    const T *gate = (const T*)a.gate, *up = (const T*)a.up, *dh = (const T*)a.dh;
    constexpr int NT = TR * TC / 32;
    using L = QsSmem<T, TR, TC>;
    extern __shared__ float4 smem_raw[];
    char* sm = (char*)smem_raw;
    float* sg = (float*)(sm + L::sg);
    uint8_t* scl_c = (uint8_t*)(sm + L::scl_c);
    unsigned* cnt = (unsigned*)(sm + L::cnt);
    const int rows = a.rows, cols = a.cols, tid = threadIdx.x;
    const int ntc = (cols + TC - 1) / TC, ntiles = ((rows + TR - 1) / TR) * ntc;
    if (tid < 8) cnt[tid] = 0;
    TileWalk cur(blockIdx.x, ntc);
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x, cur.next()) {
        const int r0 = cur.tr * TR, c0 = cur.tc * TC;
        for (int k = 0; k < 4; k++) { /* output k: tensor k / 2, direction k % 2 */
            const Slot& s = a.q[k / 2].s[k % 2];
            if (!(s.active && s.rnd)) continue;
            const int n = k % 2 ? TR : TC, o = k % 2 ? r0 : c0, lim = k % 2 ? rows : cols;
            for (int j = tid; j < n; j += NT)
                sg[k * 128 + j] = o + j < lim ? mx_rh_sign(s.hseed, s.rot, (uint64_t)(o + j)) : 1.0f;
        }
        qs_make(gate, up, dh, rows, cols, r0, c0, sm + L::xs, sm + L::xs + L::tile);
        /* and the next tile's inputs asked into L2 while the four passes below run (its loads would otherwise
         * wait for the passes and the passes for the loads, where one CTA holds an SM) */
        if (t + (int)gridDim.x < ntiles) {
            TileWalk nw = cur;
            nw.next();
            const int rn = nw.tr * TR, cn = nw.tc * TC;
            constexpr int LE = 128 / (int)sizeof(T); /* values a 128-byte line holds */
            for (int l = tid; l < TR * (TC / LE); l += NT) {
                const int r = rn + l / (TC / LE), c = cn + (l % (TC / LE)) * LE;
                if (r < rows && c < cols) {
                    const size_t i = (size_t)r * cols + c;
                    l2_prefetch(gate + i);
                    l2_prefetch(up + i);
                    l2_prefetch(dh + i);
                }
            }
        }
        __syncthreads();
        /* a barrier between passes where a column pass exchanges e_ref through scl_c (not with QF_OPT_LDSM's BF16
         * one: then the passes only read the staged tiles, and a warp goes on to the next pass without waiting) */
        constexpr bool XB = !((OPT & QF_OPT_LDSM) && sizeof(T) == 2);
        if (a.q[0].s[0].active) qf_pass<0, N, T, TR, TC, OPT>(a.q[0].s[0], sm + L::xs, sg, scl_c, cnt, r0, c0, rows, cols);
        if (XB) __syncthreads();
        if (a.q[0].s[1].active) qf_pass<1, N, T, TR, TC, OPT>(a.q[0].s[1], sm + L::xs, sg + 128, scl_c, cnt, r0, c0, rows, cols);
        if (XB) __syncthreads();
        if (a.q[1].s[0].active)
            qf_pass<0, N, T, TR, TC, OPT>(a.q[1].s[0], sm + L::xs + L::tile, sg + 256, scl_c, cnt + 4, r0, c0, rows, cols);
        if (XB) __syncthreads();
        if (a.q[1].s[1].active)
            qf_pass<1, N, T, TR, TC, OPT>(a.q[1].s[1], sm + L::xs + L::tile, sg + 384, scl_c, cnt + 4, r0, c0, rows, cols);
        __syncthreads(); /* the tiles and signs are the next tile's */
    }
    __syncthreads();
    flush_counters(a.q[0], cnt);
    flush_counters(a.q[1], cnt + 4);
}

template <typename T, int N, int MINB, int OPT = QF_OPT> int launch_qswiglu_cfg(const QsArgs& a, cudaStream_t st) {
    using L = QsSmem<T, 128, 128>;
    constexpr int NT = 128 * 128 / 32;
    static int resident = 0;
    return launch_persistent(k_qswiglu<T, 128, 128, N, MINB, OPT>, NT, L::total,
                             ((a.rows + 127) / 128) * ((a.cols + 127) / 128), &resident, a, st);
}

/* BF16 h16 without random signs: two CTAs an SM at 64 registers (as k_qfast's BF16 two-direction kernel; ptxas
 * spills 24 bytes there with QF_OPT_LDSM | QF_OPT_MAD, 8 without LDSM; k_qfast none) */
template <typename T, int N> int launch_qswiglu_n(const QsArgs& a, cudaStream_t st) {
    if constexpr (sizeof(T) == 2 && N == 16)
        if (!a.q[0].s[0].rnd && !a.q[0].s[1].rnd && !a.q[1].s[0].rnd && !a.q[1].s[1].rnd)
            return launch_qswiglu_cfg<T, N, 2>(a, st);
    return launch_qswiglu_cfg<T, N, 1>(a, st);
}

/* The four outputs share one rotation (mxg_quantize_swiglu_ok: each tensor's pair through qfast_ok, and
 * the two tensors' rotations alike) */
template <typename T> int launch_qswiglu(const QsArgs& a, cudaStream_t st) {
    return qf_with_rot(qf_rot_of(a.q[0]), [&](auto n) { return launch_qswiglu_n<T, decltype(n)::value>(a, st); });
}

template <typename T, bool ST> int launch_qrow(const QArgs& a, int outer, cudaStream_t st) {
    int nb = a.cols / 32;
    dim3 grid(a.rows);
    if (nb <= 128) k_qrow<T, 1, ST><<<grid, 128, 0, st>>>(a, outer);
    else if (nb <= 256) k_qrow<T, 2, ST><<<grid, 128, 0, st>>>(a, outer);
    else if (nb <= 512) k_qrow<T, 4, ST><<<grid, 128, 0, st>>>(a, outer);
    else k_qrow<T, 8, ST><<<grid, 128, 0, st>>>(a, outer);
    CU_LAUNCHED();
    return MX_OK;
}

template <typename T, int TR, int TC, bool ST> int launch_quant(const QArgs& a, cudaStream_t st) {
    using L = Smem<TR, TC>;
    static bool attr_set = false;
    if (!attr_set) {
        CU_TRY(cudaFuncSetAttribute(k_quant<T, TR, TC, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::total));
        attr_set = true;
    }
    dim3 grid((a.cols + TC - 1) / TC, (a.rows + TR - 1) / TR);
    k_quant<T, TR, TC, ST><<<grid, NT, L::total, st>>>(a);
    CU_LAUNCHED();
    return MX_OK;
}

template <typename T, bool ST> int launch_cfg(const QArgs& a, cudaStream_t st) {
    int n0 = a.s[0].active ? a.s[0].had_n : 0, n1 = a.s[1].active ? a.s[1].had_n : 0;
    if (a.s[0].active && a.s[1].active) return launch_quant<T, 128, 128, ST>(a, st);
    if (a.s[0].active) return n0 > 128 ? launch_quant<T, 64, 256, ST>(a, st) : launch_quant<T, 64, 128, ST>(a, st);
    return n1 > 128 ? launch_quant<T, 256, 64, ST>(a, st) : launch_quant<T, 128, 64, ST>(a, st);
}

bool has_stats(const QArgs& a) { return (a.s[0].active && a.s[0].stats) || (a.s[1].active && a.s[1].stats); }

/* The staged kernel for a's outputs: the telemetry variant only where asked (FP32 input only). */
int launch_cfg_dt(const QArgs& a, mxg_dtype dt, cudaStream_t st) {
    if (dt == MXG_BF16) return launch_cfg<uint16_t, false>(a, st);
    return has_stats(a) ? launch_cfg<float, true>(a, st) : launch_cfg<float, false>(a, st);
}

/* Validate one spec for a direction (dir 0: along rows' direction, 1: along columns). */
int make_slot(const mxg_qspec* sp, const mxg_qout* o, int dir, int rows, int cols, Slot* s) {
    memset(s, 0, sizeof *s);
    int rc = mx_check_shape(rows, cols, sp->layout);
    if (rc) return rc;
    if ((unsigned)sp->scale > MX_SCALE_CEIL || (unsigned)sp->round > MX_ROUND_SR) /* dither: CPU-only so far */
        return mx_fail(MX_EINVAL, "mxg_quantize: scale rule %s or rounding not on the GPU", mx_scale_name(sp->scale));
    int len = dir == 0 ? cols : rows;
    if (sp->had_n && (!mx_hadamard_valid(sp->had_n) || len % sp->had_n))
        return mx_fail(MX_EINVAL, "mxg_quantize: Hadamard h%d along a dimension of %d", sp->had_n, len);
    if (o->e4m3 && len % 128)
        return mx_fail(MX_EINVAL, "mxg_quantize: the folded E4M3 form needs the block axis (%d) a multiple of 128", len);
    s->active = 1;
    s->l32 = sp->layout == MX_LAYOUT_32x32;
    s->rule = sp->scale;
    s->sr = sp->round == MX_ROUND_SR;
    s->sr_tn = dir == 1 && sp->sr_tn;
    s->seed = sp->seed;
    s->tid = sp->tensor_id;
    s->had_n = sp->had_n;
    s->rnd = sp->had_n ? sp->had_random : 0;
    s->hseed = sp->had_seed;
    s->rot = sp->rot_id;
    s->codes = o->codes;
    s->scales = o->scales;
    s->e4m3 = o->e4m3;
    s->fscale = o->fscale;
    s->counters = o->counters;
    s->stats = o->stats;
    s->outer = o->e4m3 && o->fold == MXG_FOLD_OUTER;
    return MX_OK;
}

int spec_dir(const mxg_qspec* sp) {
    if (sp->layout == MX_LAYOUT_1x32) return 0;
    if (sp->layout == MX_LAYOUT_32x1) return 1;
    return sp->had_axis == 0 ? 1 : 0;
}

}  // namespace

extern "C" int mxg_quantize(const void* x, mxg_dtype dt, int rows, int cols, const mxg_qspec* s0, const mxg_qout* o0,
                            const mxg_qspec* s1, const mxg_qout* o1, void* stream) {
    if (!x) return mx_fail(MX_EINVAL, "mxg_quantize: null input");
    if (dt != MXG_F32 && dt != MXG_BF16) return mx_fail(MX_EINVAL, "mxg_quantize: input must be f32 or bf16");
    if ((s0 && !o0) || (s1 && !o1)) return mx_fail(MX_EINVAL, "mxg_quantize: a spec without an output");
    QArgs a;
    memset(&a, 0, sizeof a);
    a.x = x; a.rows = rows; a.cols = cols;
    const mxg_qspec* sp[2] = {s0, s1};
    const mxg_qout* op[2] = {o0, o1};
    for (int k = 0; k < 2; k++) {
        if (!sp[k]) continue;
        int d = spec_dir(sp[k]);
        if (a.s[d].active) return mx_fail(MX_EINVAL, "mxg_quantize: two outputs in the same direction");
        int rc = make_slot(sp[k], op[k], d, rows, cols, &a.s[d]);
        if (rc) return rc;
    }
    if (!a.s[0].active && !a.s[1].active) return MX_OK;
    if (dt != MXG_F32 && has_stats(a)) return mx_fail(MX_EINVAL, "mxg_quantize: telemetry (stats) needs an FP32 input");
    cudaStream_t st = MXG_STREAM(stream);
    /* one row-direction 1x32 output with a register-sized rotation: the unstaged row kernel */
    const bool row_kernel = a.s[0].active && !a.s[1].active && !a.s[0].l32 && a.s[0].had_n <= 32 && cols / 32 <= 1024;
    if ((a.s[0].active && a.s[0].outer && !row_kernel) || (a.s[1].active && a.s[1].outer))
        return mx_fail(MX_EINVAL, "mxg_quantize: the OUTER fold is made in one pass only for a lone 1x32 output with "
                                  "rotation <= 32 and cols <= 32768; use MXG_FOLD_VEC128 or mxg_fold");
    if (g_qfast && qfast_ok(a, dt)) return dt == MXG_BF16 ? launch_qfast<uint16_t>(a, st) : launch_qfast<float>(a, st);
    if (g_qfast && qouter_ok(a)) return dt == MXG_BF16 ? launch_qouter<uint16_t>(a, st) : launch_qouter<float>(a, st);
    if (row_kernel)
        return dt == MXG_BF16 ? launch_qrow<uint16_t, false>(a, a.s[0].outer, st)
               : has_stats(a) ? launch_qrow<float, true>(a, a.s[0].outer, st)
                              : launch_qrow<float, false>(a, a.s[0].outer, st);
    if (a.s[0].active && a.s[1].active && (a.s[0].had_n > 32 || a.s[1].had_n > 32)) {
        QArgs b = a;
        b.s[1].active = 0;
        a.s[0].active = 0;
        int rc = launch_cfg_dt(b, dt, st);
        if (rc) return rc;
    }
    return launch_cfg_dt(a, dt, st);
}

extern "C" int mxg_quantize_swiglu_ok(int rows, int cols, const mxg_qspec* const s[2][2], const mxg_qout* const o[2][2]) {
    if (rows <= 0 || cols <= 0 || rows % 128 || cols % 128) return 0;
    QArgs a;
    int n0 = -1;
    for (int t = 0; t < 2; t++) {
        memset(&a, 0, sizeof a);
        a.x = (const void*)16; /* qfast_ok's alignment check: the inputs are read as float4 here */
        a.rows = rows;
        a.cols = cols;
        for (int d = 0; d < 2; d++) {
            if (!s[t][d] || !o[t][d] || spec_dir(s[t][d]) != d || !o[t][d]->e4m3) return 0;
            if (make_slot(s[t][d], o[t][d], d, rows, cols, &a.s[d]) != MX_OK) return 0;
        }
        if (!qfast_ok(a, MXG_F32)) return 0;
        if (t == 0) n0 = qf_rot_of(a);
        else if (qf_rot_of(a) != n0) return 0;
    }
    return 1;
}

/* mxg_quantize_swiglu_bwd(_bf16): inputs of T, aligned for qs_make's 16-byte loads (a row of a multiple of 128 values keeps
 * every tile's loads aligned) */
template <typename T>
int quantize_swiglu(const T* dh, const T* gate, const T* up, int rows, int cols, const mxg_qspec* const s[2][2],
                    const mxg_qout* const o[2][2], void* stream) {
    if (!dh || !gate || !up) return mx_fail(MX_EINVAL, "mxg_quantize_swiglu_bwd: null input");
    if (((uintptr_t)dh | (uintptr_t)gate | (uintptr_t)up) & 15)
        return mx_fail(MX_EINVAL, "mxg_quantize_swiglu_bwd: inputs must be 16-byte aligned");
    if (!mxg_quantize_swiglu_ok(rows, cols, s, o))
        return mx_fail(MX_EINVAL, "mxg_quantize_swiglu_bwd: %dx%d with these outputs is not the fast kernel's case "
                                  "(both directions of both tensors, folded E4M3, RNE, rotation <= 32, no telemetry, "
                                  "dims multiples of 128)", rows, cols);
    QsArgs a;
    memset(&a, 0, sizeof a);
    a.dh = dh; a.gate = gate; a.up = up; a.rows = rows; a.cols = cols;
    for (int t = 0; t < 2; t++)
        for (int d = 0; d < 2; d++) {
            int rc = make_slot(s[t][d], o[t][d], d, rows, cols, &a.q[t].s[d]);
            if (rc) return rc;
        }
    return launch_qswiglu<T>(a, MXG_STREAM(stream));
}

extern "C" int mxg_quantize_swiglu_bwd(const float* dh, const float* gate, const float* up, int rows, int cols,
                                       const mxg_qspec* const s[2][2], const mxg_qout* const o[2][2], void* stream) {
    return quantize_swiglu<float>(dh, gate, up, rows, cols, s, o, stream);
}

extern "C" int mxg_quantize_swiglu_bwd_bf16(const uint16_t* dh, const uint16_t* gate, const uint16_t* up, int rows,
                                            int cols, const mxg_qspec* const s[2][2], const mxg_qout* const o[2][2],
                                            void* stream) {
    return quantize_swiglu<uint16_t>(dh, gate, up, rows, cols, s, o, stream);
}

extern "C" int mxg_selftest_round(unsigned long long mismatches[6]) {
    unsigned long long* d;
    CU_TRY(cudaMalloc(&d, 6 * sizeof *d));
    CU_TRY(cudaMemset(d, 0, 6 * sizeof *d));
    k_selftest_round<<<132 * 16, 256>>>(d);
    CU_LAUNCHED();
    CU_TRY(cudaMemcpy(mismatches, d, 6 * sizeof *d, cudaMemcpyDeviceToHost));
    CU_TRY(cudaFree(d));
    return MX_OK;
}

extern "C" int mxg_quant_set_fast(int on) {
    const int old = g_qfast;
    g_qfast = on != 0;
    return old;
}

extern "C" int mxg_selftest_e2m1(unsigned long long* mismatches) {
    unsigned long long* d;
    CU_TRY(cudaMalloc(&d, sizeof *d));
    CU_TRY(cudaMemset(d, 0, sizeof *d));
    k_selftest_e2m1<<<132 * 16, 256>>>(d);
    CU_LAUNCHED();
    CU_TRY(cudaMemcpy(mismatches, d, sizeof *d, cudaMemcpyDeviceToHost));
    CU_TRY(cudaFree(d));
    return MX_OK;
}
