/*
 * fold.cu: the GPU twin of src/mx/fold.c: the exponent-folded E4M3 form of a packed MXFP4 tensor for Hopper's
 * FP8 GEMM (mxg_fold: VEC128 or OUTER scales), the re-expression of a VEC128-folded operand under OUTER scales
 * (mxg_fold_outer_from_vec128, mx_fold_outer_from_vec128's twin), the exact fix-up after a GEMM on OUTER
 * operands (mxg_fold_outer_fixup, fold.c's fixup_side), and the exact dequantization to BF16
 * (mxg_dequant_bf16). The fast quantizer's own fold (qf_pass) is mxfp4.cu's.
 *
 * Bit-exactness: the scalar steps are include/mxlm/mx_scalar.h's and quant.cuh's, in an object built with
 * --fmad=false (mk/cuda.mk).
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/mx/quant.cuh"
#include "cuda/ptx.cuh" /* bf16x2_rn */
#include "mxlm/mx_scalar.h"

namespace {

/* ---- fold / dequant from a packed tensor ---- */

/* Byte offset of stored row i, block kb of t (orientation `dir`), and its scale index. */
struct View {
    const uint8_t* codes;
    const uint8_t* scales;
    int R, K;       // stored rows, block-axis length
    int mode;       // 0: 1x32 / 32x1 (contiguous blocks), 1: 32x32 row-major along rows (dir 0), 2: 32x32 dir 1
    int rows, cols; // original shape
};

/* The scale byte of stored row i, block kb. */
__device__ __forceinline__ uint8_t scale_at(const View& v, int i, int kb) {
    if (v.mode == 0) return v.scales[(size_t)i * (v.K / 32) + kb];
    if (v.mode == 1) return v.scales[(size_t)(i / 32) * (v.cols / 32) + kb];
    return v.scales[(size_t)kb * (v.cols / 32) + i / 32];
}

__device__ __forceinline__ void load_block(const View& v, int i, int kb, uint32_t (&pk)[4], uint8_t& sb) {
    if (v.mode == 0) {
        uint4 u = *(const uint4*)(v.codes + ((size_t)i * v.K + (size_t)kb * 32) / 2);
        pk[0] = u.x; pk[1] = u.y; pk[2] = u.z; pk[3] = u.w;
        sb = scale_at(v, i, kb);
    } else if (v.mode == 1) {  // stored row i = row i of the 32x32 tensor
        uint4 u = *(const uint4*)(v.codes + ((size_t)i * v.cols + (size_t)kb * 32) / 2);
        pk[0] = u.x; pk[1] = u.y; pk[2] = u.z; pk[3] = u.w;
        sb = scale_at(v, i, kb);
    } else {  // stored row i = column i; element kb*32+j at row kb*32+j
        pk[0] = pk[1] = pk[2] = pk[3] = 0;
        for (int j = 0; j < 32; j++) {
            size_t e = (size_t)(kb * 32 + j) * v.cols + i;
            uint32_t nib = (v.codes[e >> 1] >> ((e & 1) * 4)) & 15;
            pk[j >> 3] |= nib << (4 * (j & 7));
        }
        sb = scale_at(v, i, kb);
    }
}

/* One warp per stored row. */
__global__ void k_fold(View v, int outer, uint8_t* e4m3, float* fscale, unsigned long long* counters) {
    int i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (i >= v.R) return;
    int nb = v.K / 32;
    int erow = -1;
    if (outer) {
        for (int kb = lane; kb < nb; kb += 32) {
            uint8_t sb = scale_at(v, i, kb);
            if (sb != MX_E8M0_NAN && (int)sb > erow) erow = sb;
        }
        erow = warp_max(erow);
        erow = erow < 0 ? 0 : erow - 127;
        if (lane == 0) fscale[i] = mx_exp2i(erow - 6);
    }
    unsigned oow = 0;
    for (int kb = lane; kb < nb; kb += 32) {
        uint32_t pk[4]; uint8_t sb;
        load_block(v, i, kb, pk, sb);
        int eref = erow;
        if (!outer) {
            int m = -1;
            for (int q = kb & ~3; q < (kb & ~3) + 4; q++) {
                uint8_t s2 = scale_at(v, i, q);
                if (s2 != MX_E8M0_NAN && (int)s2 > m) m = s2;
            }
            eref = m < 0 ? 0 : m - 127;
            if ((kb & 3) == 0) fscale[(size_t)(kb / 4) * v.R + i] = mx_exp2i(eref - 6);
        }
        uint32_t o[8];
        oow += fold32(pk, sb, eref, o);
        uint4* dst = (uint4*)(e4m3 + (size_t)i * v.K + (size_t)kb * 32);
        dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
        dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
    if (counters && oow) atomicAdd(&counters[1], (unsigned long long)oow);
}

/* mx_e4m3_rescale on the four codes of a word, and of a 16-byte vector, branch-free on the hardware conversions:
 * each code's value times 2^-down in FP32 (exact: down is taken at most 40, where every code already goes to a
 * signed zero), back to E4M3 by RNE (e4m3x4, mx_e4m3_encode's rounding), a NaN code kept as it is (the conversion
 * would drop its sign); *inexact set where a value changed (the decoded result against the exact product).
 * The per-code integer steps had run the re-expression at ~0.9 TB/s (H200, 2026-12-07). */
__device__ __forceinline__ uint32_t rescale_word(uint32_t x, float s, int* inexact) {
    float v[4], b[4];
    e4m3x4_f32(x, v);
#pragma unroll
    for (int q = 0; q < 4; q++) v[q] *= s;
    uint32_t o = e4m3x4(v[0], v[1], v[2], v[3]);
    e4m3x4_f32(o, b);
    int ix = 0;
#pragma unroll
    for (int q = 0; q < 4; q++) ix |= fabsf(v[q] - b[q]) > 0.0f; /* false for NaN */
    const uint32_t nan = __vcmpeq4(x & 0x7f7f7f7fu, 0x7f7f7f7fu);
    *inexact |= ix;
    return (o & ~nan) | (x & nan);
}
__device__ __forceinline__ uint4 rescale_vec(uint4 v, float s, int* inexact) {
    return make_uint4(rescale_word(v.x, s, inexact), rescale_word(v.y, s, inexact), rescale_word(v.z, s, inexact),
                      rescale_word(v.w, s, inexact));
}

/* VEC128 -> OUTER (mx_fold_outer_from_vec128, fold.c: the same steps): a warp per stored row, FO_ROWS rows a CTA.
 * With `staged` the CTA's scales come through shared memory first (for each 128-group its rows' scales are
 * FO_ROWS contiguous floats of fs [K/128][R]: one sector, where each warp reading its own had touched a line per
 * group). Then the row's largest group scale exponent, then each lane re-expresses whole 32-byte blocks
 * (rescale_vec, in registers; a group at the row's exponent is copied) and counts those that
 * rounded. */
constexpr int FO_ROWS = 8;
__global__ void k_fold_outer(const uint8_t* in, const float* __restrict__ fs, int R, int K, uint8_t* out,
                             float* __restrict__ fo, uint8_t* flags, unsigned long long* counters, int staged) {
    extern __shared__ float sfs[]; /* staged: [K/128][FO_ROWS] */
    const int w = threadIdx.x / 32, r0 = blockIdx.x * FO_ROWS, r = r0 + w, lane = threadIdx.x & 31, G = K / 128;
    if (staged) {
        for (int t = threadIdx.x; t < G * FO_ROWS; t += blockDim.x) {
            const int rr = r0 + t % FO_ROWS;
            sfs[t] = rr < R ? fs[(size_t)(t / FO_ROWS) * R + rr] : 1.0f;
        }
        __syncthreads();
    }
    if (r >= R) return;
    const float* sc = staged ? sfs + w : fs + r; /* group g's scale of this row: sc[g * ss] */
    const size_t ss = staged ? FO_ROWS : (size_t)R;
    int er = -1000;
    for (int g = lane; g < G; g += 32) {
        const int e = mx_log2_pow2(sc[g * ss]);
        er = e > er ? e : er;
    }
    er = warp_max(er);
    if (lane == 0) fo[r] = mx_exp2i(er);
    unsigned nr = 0;
    for (int b = lane; b < K / 32; b += 32) {
        const int down = er - mx_log2_pow2(sc[(b / 4) * ss]);
        const uint4* src = (const uint4*)(in + (size_t)r * K + (size_t)b * 32);
        uint4 v0 = src[0], v1 = src[1];
        int inexact = 0;
        if (down) {
            const float s = mx_exp2i(-(down < 40 ? down : 40));
            v0 = rescale_vec(v0, s, &inexact);
            v1 = rescale_vec(v1, s, &inexact);
            nr += (unsigned)inexact;
        }
        if (flags) flags[(size_t)r * (K / 32) + b] = (uint8_t)inexact;
        uint4* dst = (uint4*)(out + (size_t)r * K + (size_t)b * 32);
        dst[0] = v0;
        dst[1] = v1;
    }
    if (counters && nr) atomicAdd(&counters[1], (unsigned long long)nr);
}

/* The exact fix-up after a GEMM on OUTER re-expressed operands (fold.c's fixup_side, the same sums in the same
 * order). side 0: a CTA per row i of A (x = A, y = B), (A - A_o) B^T into C's row i; side 1: a CTA per row i of B
 * (x = B, y = A), A_o (B - B_o)^T into C's column i. A row without a flagged block leaves at once (the usual
 * case); a flagged one lists its blocks in order, stages their exact differences FIX_B at a time in shared
 * memory, and each thread sums, for its own entries e of C, over the list in order before adding once. */
constexpr int FIX_B = 16;
__global__ void k_outer_fix(int side, float* C, int M, int N, int K, const uint8_t* x_v, const float* x_fs,
                            const uint8_t* x_o, const float* x_fo, const uint8_t* x_flag, const uint8_t* y_v,
                            const float* y_fs, const uint8_t* y_o, const float* y_fo) {
    const int i = blockIdx.x, nb = K / 32, R = side ? N : M, other = side ? M : N;
    const uint8_t* flag = x_flag + (size_t)i * nb;
    int mine = 0;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) mine |= flag[b];
    if (!__syncthreads_or(mine)) return;
    extern __shared__ int list[]; /* [K/32]: the flagged blocks in order */
    __shared__ int cnt;
    __shared__ float d[FIX_B][32];
    if (threadIdx.x == 0) {
        int c = 0;
        for (int b = 0; b < nb; b++)
            if (flag[b]) list[c++] = b;
        cnt = c;
    }
    __syncthreads();
    const int nl = cnt;
    for (int e0 = 0; e0 < other; e0 += blockDim.x) {
        const int e = e0 + threadIdx.x;
        float acc = 0.0f;
        for (int q0 = 0; q0 < nl; q0 += FIX_B) {
            const int nq = nl - q0 < FIX_B ? nl - q0 : FIX_B;
            __syncthreads();
            for (int t = threadIdx.x; t < nq * 32; t += blockDim.x) {
                const int k = list[q0 + t / 32] * 32 + (t & 31);
                d[t / 32][t & 31] = mx_fold_vec128_at(x_v, x_fs, R, K, i, k) - mx_fold_outer_at(x_o, x_fo, K, i, k);
            }
            __syncthreads();
            if (e < other)
                for (int q = 0; q < nq; q++)
                    for (int j = 0; j < 32; j++) {
                        const int k = list[q0 + q] * 32 + j;
                        acc += side ? mx_fold_outer_at(y_o, y_fo, K, e, k) * d[q][j]
                                    : d[q][j] * mx_fold_vec128_at(y_v, y_fs, other, K, e, k);
                    }
        }
        if (e < other) C[side ? (size_t)e * N + i : (size_t)i * N + e] += acc;
    }
}

__global__ void k_dequant_bf16(View v, uint16_t* out) {
    int i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (i >= v.R) return;
    for (int kb = lane; kb < v.K / 32; kb += 32) {
        uint32_t pk[4]; uint8_t sb;
        load_block(v, i, kb, pk, sb);
        float sc = mx_e8m0_decode(sb);
        uint32_t w[16];
#pragma unroll
        for (int j = 0; j < 32; j += 2) {
            auto val = [&](int k) { return mx_e2m1_decode((uint8_t)((pk[k >> 3] >> (4 * (k & 7))) & 15)) * sc; };
            w[j / 2] = bf16x2_rn(val(j), val(j + 1));
        }
        uint4* dst = (uint4*)(out + (size_t)i * v.K + (size_t)kb * 32);
#pragma unroll
        for (int q = 0; q < 4; q++) dst[q] = make_uint4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
    }
}

int make_view(const mxg_fp4* t, int axis, View* v) {
    if (!t || !t->codes || !t->scales) return mx_fail(MX_EINVAL, "mxg: empty MXFP4 tensor");
    int rc = mx_check_shape(t->rows, t->cols, t->layout);
    if (rc) return rc;
    v->codes = t->codes; v->scales = t->scales; v->rows = t->rows; v->cols = t->cols;
    if (t->layout == MX_LAYOUT_1x32) { v->mode = 0; v->R = t->rows; v->K = t->cols; }
    else if (t->layout == MX_LAYOUT_32x1) { v->mode = 0; v->R = t->cols; v->K = t->rows; }
    else if (axis) { v->mode = 1; v->R = t->rows; v->K = t->cols; }
    else { v->mode = 2; v->R = t->cols; v->K = t->rows; }
    return MX_OK;
}

}  // namespace

extern "C" int mxg_fold(const mxg_fp4* t, int axis, mxg_fold_mode mode, uint8_t* e4m3, float* fscale,
                        unsigned long long* counters, void* stream) {
    View v;
    int rc = make_view(t, axis, &v);
    if (rc) return rc;
    if (!e4m3 || !fscale) return mx_fail(MX_EINVAL, "mxg_fold: null output");
    if (mode == MXG_FOLD_VEC128 && v.K % 128) return mx_fail(MX_EINVAL, "mxg_fold: VEC128 needs K (%d) a multiple of 128", v.K);
    k_fold<<<(v.R + 7) / 8, 256, 0, MXG_STREAM(stream)>>>(v, mode == MXG_FOLD_OUTER, e4m3, fscale, counters);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_fold_outer_from_vec128(const uint8_t* e4m3, const float* fscale, int R, int K, uint8_t* out,
                                          float* fscale_out, uint8_t* flags, unsigned long long* counters, void* stream) {
    ARG_CHECK(R > 0 && K > 0 && K % 128 == 0, "mxg_fold_outer_from_vec128: shape [%d, %d] (K a multiple of 128)", R, K);
    if (!e4m3 || !fscale || !out || !fscale_out) return mx_fail(MX_EINVAL, "mxg_fold_outer_from_vec128: null pointer");
    if (((uintptr_t)e4m3 | (uintptr_t)out) & 15) return mx_fail(MX_EINVAL, "mxg_fold_outer_from_vec128: codes must be 16-byte aligned");
    const size_t smem = (size_t)(K / 128) * FO_ROWS * sizeof(float);
    const int staged = smem <= 48 * 1024; /* K up to 196,608 */
    k_fold_outer<<<(R + FO_ROWS - 1) / FO_ROWS, 32 * FO_ROWS, staged ? smem : 0, MXG_STREAM(stream)>>>(
        e4m3, fscale, R, K, out, fscale_out, flags, counters, staged);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_fold_outer_fixup(float* C, int M, int N, int K, const uint8_t* a_v, const float* a_fs, const uint8_t* a_o,
                                    const float* a_fo, const uint8_t* a_flag, const uint8_t* b_v, const float* b_fs,
                                    const uint8_t* b_o, const float* b_fo, const uint8_t* b_flag, void* stream) {
    ARG_CHECK(M > 0 && N > 0 && K > 0 && K % 128 == 0 && K <= 262144,
              "mxg_fold_outer_fixup: shape %d x %d x %d (K a multiple of 128, at most 262144)", M, N, K);
    cudaStream_t st = MXG_STREAM(stream);
    const size_t smem = (size_t)(K / 32) * sizeof(int);
    k_outer_fix<<<M, 256, smem, st>>>(0, C, M, N, K, a_v, a_fs, a_o, a_fo, a_flag, b_v, b_fs, b_o, b_fo); /* A's rows */
    CU_LAUNCHED();
    k_outer_fix<<<N, 256, smem, st>>>(1, C, M, N, K, b_v, b_fs, b_o, b_fo, b_flag, a_v, a_fs, a_o, a_fo); /* then B's */
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_dequant_bf16(const mxg_fp4* t, int axis, uint16_t* out, void* stream) {
    View v;
    int rc = make_view(t, axis, &v);
    if (rc) return rc;
    if (!out) return mx_fail(MX_EINVAL, "mxg_dequant_bf16: null output");
    k_dequant_bf16<<<(v.R + 7) / 8, 256, 0, MXG_STREAM(stream)>>>(v, out);
    CU_LAUNCHED();
    return MX_OK;
}
