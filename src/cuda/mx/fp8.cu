/*
 * fp8.cu: the GPU twin of src/mx/fp8.c: amax, FP8 per-tensor quantize
 * (current scaling: scale = fmax / amax, mx_fp8_scale_for_amax; or a given
 * scale) to E4M3 / E5M2, and the FP32 -> BF16 cast (RNE).
 *
 * Bit-exactness: the amax is exact (an integer max over |x|'s bits, NaN
 * above Inf), every scalar step calls include/mxlm/mx_scalar.h (compiled for
 * the device), and this file is built with --fmad=false (mk/cuda.mk), so
 * amax, scale and codes equal the CPU's.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda/common.cuh"
#include "cuda/elem.cuh"
#include "cuda/mx/quant.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/mx_scalar.h"

namespace {

/* Loads of 16 bytes where the input allows: Vec, unpack, vec_ok (cuda/elem.cuh). */

/* The largest |x| bits (an integer max: the order of the reads does not matter), one atomicMax
 * per block (per warp had 8k atomics on one word contend at the L2). next_bits: the next call's word
 * (fp8_amax's ring), zeroed here, so that no launch of its own clears it. */
template <typename T> __global__ void k_amax(const T* x, size_t n, unsigned* amax_bits, unsigned* next_bits, int vec) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *next_bits = 0u;
    unsigned m = 0;
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
    if (vec) {
        constexpr int VN = Vec<T>::N;
        const typename Vec<T>::V* xv = (const typename Vec<T>::V*)x;
        for (size_t i = tid; i < n / VN; i += nt) {
            float f[VN];
            unpack<T>(__ldg(xv + i), f);
#pragma unroll
            for (int k = 0; k < VN; k++) m = max(m, mx_f2u(f[k]) & 0x7fffffffu);
        }
    } else {
        for (size_t i = tid; i < n; i += nt) {
            unsigned b = mx_f2u(to_f<T>(x[i])) & 0x7fffffffu;  // |x| bits: order of uint = order of magnitude; NaN above Inf
            m = max(m, b);
        }
    }
    block_amax_to(m, amax_bits);
}

/* The scale a cast multiplies by: the given one (delayed scaling), else mx_fp8_scale_amax of the amax bits
 * (every block of a cast computes it: the same expression, the same float). */
__device__ __forceinline__ float fp8_scale(unsigned bits, int kind, const float* given) {
    return given ? *given : mx_fp8_scale_amax(mx_u2f(bits), kind);
}

/* The scalars of a quantize (amax, scale, 1/scale: each may be NULL) by thread 0 of block 0, and 1/scale over
 * inv_rows[0 .. n_rows) (the GEMM's per-row or per-128 scale vector) by every thread of the grid: the casts'
 * part of what k_fp8_scale does alone where no codes are made. b: the block's index in the grid. */
__device__ __forceinline__ void fp8_put_scales(unsigned bits, float s, size_t b, float* amax, float* scale, float* inv,
                                               float* inv_rows, size_t n_rows) {
    const float iv = 1.0f / s;
    if (b == 0 && threadIdx.x == 0) {
        if (amax) *amax = mx_u2f(bits);
        if (scale) *scale = s;
        if (inv) *inv = iv;
    }
    const size_t nb = (size_t)gridDim.x * gridDim.y, t = b * blockDim.x + threadIdx.x;
    for (size_t i = t; inv_rows && i < n_rows; i += nb * blockDim.x) inv_rows[i] = iv;
}

/* The scalars alone (mxg_fp8_quantize without codes): one block. */
#define FP8_SCALE_THREADS 256
__global__ void k_fp8_scale(const unsigned* amax_bits, int kind, const float* given, float* amax, float* scale, float* inv,
                            float* inv_rows, size_t n_rows) {
    const unsigned bits = *amax_bits;
    fp8_put_scales(bits, fp8_scale(bits, kind, given), 0, amax, scale, inv, inv_rows, n_rows);
}

/* One code of k_fp8_cast's four at once: x * scale by the hardware conversion (hw: the tensor holds no NaN) or
 * by the scalar encoder, the first value in the low byte. */
__device__ __forceinline__ uint32_t fp8_code4(const float (&f)[4], float scale, int kind, bool hw) {
    if (hw)
        return kind == MX_FP8_E4M3 ? e4m3x4(f[0] * scale, f[1] * scale, f[2] * scale, f[3] * scale)
                                   : e5m2x4(f[0] * scale, f[1] * scale, f[2] * scale, f[3] * scale);
    uint32_t w = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float v = f[k] * scale;
        w |= (uint32_t)(kind == MX_FP8_E4M3 ? mx_e4m3_encode(v) : mx_e5m2_encode(v)) << (8 * k);
    }
    return w;
}

/* The codes of x * scale. Where the tensor holds no NaN (its amax bits at most Inf's) the hardware
 * conversion makes them (e4m3x4 / e5m2x4: equal to mx_e4m3/e5m2_encode on every non-NaN float,
 * mxg_selftest_round); a NaN keeps its sign only in the scalar encoder, which runs otherwise. */
struct Fp8Out { /* what a cast writes besides the codes (fp8_put_scales) */
    float *amax, *scale, *inv, *inv_rows;
    size_t n_rows;
};

/* What every cast does first: its scale from the amax bits, whether the hardware conversion may make the codes
 * (hw: no NaN in the tensor), and the scalars (fp8_put_scales; b: the block's index in the grid). */
struct Fp8Scale {
    float scale;
    bool hw;
};
__device__ __forceinline__ Fp8Scale fp8_cast_begin(const unsigned* amax_bits, int kind, const float* given,
                                                   const Fp8Out& so, size_t b) {
    const unsigned bits = *amax_bits;
    const Fp8Scale s = {fp8_scale(bits, kind, given), bits <= 0x7f800000u};
    fp8_put_scales(bits, s.scale, b, so.amax, so.scale, so.inv, so.inv_rows, so.n_rows);
    return s;
}

template <typename T> __global__ void k_fp8_cast(const T* x, size_t n, int kind, const float* given,
                                                 const unsigned* amax_bits, Fp8Out so, uint8_t* codes, int vec) {
    const auto [scale, hw] = fp8_cast_begin(amax_bits, kind, given, so, blockIdx.x);
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
    if (vec) { /* VN elements per thread and step: one 16-byte load, one 4- or 8-byte store */
        constexpr int VN = Vec<T>::N;
        const typename Vec<T>::V* xv = (const typename Vec<T>::V*)x;
        for (size_t i = tid; i < n / VN; i += nt) {
            float f[VN];
            unpack<T>(__ldg(xv + i), f);
            uint32_t w[2] = {0, 0};
#pragma unroll
            for (int k = 0; k < VN; k += 4) {
                const float q[4] = {f[k], f[k + 1], f[k + 2], f[k + 3]};
                w[k >> 2] = fp8_code4(q, scale, kind, hw);
            }
            if (VN == 4) ((uint32_t*)codes)[i] = w[0];
            else ((uint2*)codes)[i] = make_uint2(w[0], w[1]);
        }
        return;
    }
    size_t i0 = tid * 4;
    for (size_t i = i0; i < n; i += nt * 4) {
        uint32_t w = 0;
        int m = n - i < 4 ? (int)(n - i) : 4;
        for (int k = 0; k < m; k++) {
            float v = to_f<T>(x[i + k]) * scale;
            uint8_t c = kind == MX_FP8_E4M3 ? mx_e4m3_encode(v) : mx_e5m2_encode(v);
            w |= (uint32_t)c << (8 * k);
        }
        if (m == 4 && ((uintptr_t)(codes + i) & 3) == 0) *(uint32_t*)(codes + i) = w;
        else for (int k = 0; k < m; k++) codes[i + k] = (uint8_t)(w >> (8 * k));
    }
}

/* k_fp8_cast with the codes written transposed: codes_t [C, R] of x [R, C], a FT x FT tile a CTA (16 x 16
 * threads): each thread casts 4 consecutive values of a row (fp8_code4: k_fp8_cast's bytes), the bytes go
 * through shared memory, and each thread writes 4 consecutive bytes of a row of codes_t. The same bytes as
 * the cast followed by a transpose, from one read of x. codes (NULL: none): the same bytes as stored, [R, C],
 * as well (the operand one GEMM takes as stored and the next transposed: no byte transpose between). */
constexpr int FT = 64;

/* The transposed cast on whole warp tiles (k_fp8_cast_t's bytes where rows % 4 == 0, cols % 16 == 0, x 16-byte
 * and codes 16-byte aligned, codes_t 4-byte aligned: fp8_cast_tw_ok): a warp takes WT_ROWS rows x 16 columns,
 * lane l rows 4l .. 4l + 3 of them. It reads its 4 x 16 values (32 or 64 bytes a row: whole sectors), casts them
 * (fp8_code4), stores each row's 16 codes as one 16-byte word (codes) and transposes its 4 x 16 bytes in registers
 * (4 x 4 byte blocks, 8 prmt each), so that each store of codes_t is 32 lanes x 4 bytes, 128 consecutive bytes of
 * one output row. No shared memory and no barrier (k_fp8_cast_t's 64 x 64 byte tiles wrote 64-byte pieces of the
 * transposed rows after 2-byte loads: ~50% of a copy on the H100, 2026-12-07 kprof). A CTA: WT_WARPS warps side
 * by side. */
constexpr int WT_ROWS = 128, WT_COLS = 16, WT_WARPS = 8;

/* The columns of the 4 x 4 bytes r0 .. r3 (rows; byte k of each is column k): word k = column k, row i in byte i. */
__device__ __forceinline__ void bytes4x4_t(uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3, uint32_t (&c)[4]) {
    const uint32_t t0 = prmt(r0, r1, 0x5140u), t1 = prmt(r2, r3, 0x5140u); /* b0 b0 b1 b1 of rows 0 1, of rows 2 3 */
    const uint32_t t2 = prmt(r0, r1, 0x7362u), t3 = prmt(r2, r3, 0x7362u); /* b2 b2 b3 b3 */
    c[0] = prmt(t0, t1, 0x5410u);
    c[1] = prmt(t0, t1, 0x7632u);
    c[2] = prmt(t2, t3, 0x5410u);
    c[3] = prmt(t2, t3, 0x7632u);
}

template <typename T>
__global__ void __launch_bounds__(32 * WT_WARPS) k_fp8_cast_tw(const T* x, int R, int C, int kind, const float* given,
                                                               const unsigned* amax_bits, Fp8Out so, uint8_t* codes,
                                                               uint8_t* codes_t) {
    const auto [scale, hw] = fp8_cast_begin(amax_bits, kind, given, so, (size_t)blockIdx.y * gridDim.x + blockIdx.x);
    const int lane = threadIdx.x & 31, c0 = (blockIdx.x * WT_WARPS + (threadIdx.x >> 5)) * WT_COLS;
    const int r = blockIdx.y * WT_ROWS + 4 * lane;
    if (c0 >= C || r >= R) return;
    constexpr int VN = Vec<T>::N, NV = WT_COLS / VN; /* values a 16-byte load, loads a row */
    typename Vec<T>::V raw[4][NV];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int k = 0; k < NV; k++) raw[i][k] = __ldg((const typename Vec<T>::V*)(x + (size_t)(r + i) * C + c0) + k);
    uint32_t w[4][4]; /* [row i][word j]: the codes of row r + i, columns c0 + 4j .. c0 + 4j + 3 */
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float f[WT_COLS];
#pragma unroll
        for (int k = 0; k < NV; k++) unpack<T>(raw[i][k], *(float(*)[VN])&f[k * VN]);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float q[4] = {f[4 * j], f[4 * j + 1], f[4 * j + 2], f[4 * j + 3]};
            w[i][j] = fp8_code4(q, scale, kind, hw);
        }
        if (codes) *(uint4*)(codes + (size_t)(r + i) * C + c0) = make_uint4(w[i][0], w[i][1], w[i][2], w[i][3]);
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t col[4];
        bytes4x4_t(w[0][j], w[1][j], w[2][j], w[3][j], col);
#pragma unroll
        for (int k = 0; k < 4; k++) *(uint32_t*)(codes_t + (size_t)(c0 + 4 * j + k) * R + r) = col[k];
    }
}

/* The byte tile [FT][FT + 4] (rows r0.., columns c0.. of a [R, C] tensor) written transposed into out [C, R]:
 * each of the 256 threads writes 4 consecutive bytes of an output row (one 4-byte store where aligned). */
__device__ __forceinline__ void tile_store_t(const uint8_t (*tile)[FT + 4], int r0, int c0, int R, int C, uint8_t* out) {
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    for (int j = ty; j < FT; j += 16) {
        const int c = c0 + j, r = r0 + 4 * tx;
        if (c >= C || r >= R) continue;
        uint32_t w = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) w |= (uint32_t)tile[4 * tx + k][j] << (8 * k);
        uint8_t* dst = out + (size_t)c * R + r;
        if (r + 3 < R && !((uintptr_t)dst & 3)) *(uint32_t*)dst = w;
        else
            for (int k = 0; k < 4 && r + k < R; k++) dst[k] = (uint8_t)(w >> (8 * k));
    }
}

/* The 4 bytes w of row r, columns c .. c + 3 of a [R, C] byte tensor (those inside it; one 4-byte store where
 * aligned). */
__device__ __forceinline__ void store4_row(uint8_t* out, int r, int c, int R, int C, uint32_t w) {
    if (r >= R || c >= C) return;
    uint8_t* dst = out + (size_t)r * C + c;
    if (c + 3 < C && !((uintptr_t)dst & 3)) *(uint32_t*)dst = w;
    else
        for (int k = 0; k < 4 && c + k < C; k++) dst[k] = (uint8_t)(w >> (8 * k));
}

template <typename T>
__global__ void __launch_bounds__(256) k_fp8_cast_t(const T* x, int R, int C, int kind, const float* given,
                                                    const unsigned* amax_bits, Fp8Out so, uint8_t* codes,
                                                    uint8_t* codes_t) {
    __shared__ uint8_t tile[FT][FT + 4];
    const auto [scale, hw] = fp8_cast_begin(amax_bits, kind, given, so, (size_t)blockIdx.y * gridDim.x + blockIdx.x);
    const int r0 = blockIdx.y * FT, c0 = blockIdx.x * FT, tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    for (int i = ty; i < FT; i += 16) {
        const int r = r0 + i, c = c0 + 4 * tx;
        float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (r < R)
            for (int k = 0; k < 4; k++)
                if (c + k < C) f[k] = to_f<T>(x[(size_t)r * C + c + k]);
        const uint32_t w = fp8_code4(f, scale, kind, hw);
        if (codes) store4_row(codes, r, c, R, C, w);
#pragma unroll
        for (int k = 0; k < 4; k++) tile[i][4 * tx + k] = (uint8_t)(w >> (8 * k));
    }
    __syncthreads();
    tile_store_t(tile, r0, c0, R, C, codes_t);
}

/* out [C, R] = in [R, C]^T for bytes (FP8 codes), an FT x FT tile a CTA of 256 threads: 4-byte loads where a
 * row's bytes allow (C % 4 == 0, in 4-byte aligned), then k_fp8_cast_t's transposed stores. A 32 x 32 tile of
 * single bytes (linear.cu's k_transpose) had moved ~1.1 TB/s (H200, 8192 x 8192, 2026-12-03). */
__global__ void __launch_bounds__(256) k_transpose_u8(const uint8_t* __restrict__ in, int R, int C, uint8_t* __restrict__ out) {
    __shared__ uint8_t tile[FT][FT + 4];
    const int r0 = blockIdx.y * FT, c0 = blockIdx.x * FT, tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const bool w4 = C % 4 == 0 && !((uintptr_t)in & 3);
    for (int i = ty; i < FT; i += 16) {
        const int r = r0 + i, c = c0 + 4 * tx;
        uint32_t w = 0;
        if (r < R && w4 && c + 3 < C) w = *(const uint32_t*)(in + (size_t)r * C + c);
        else if (r < R)
            for (int k = 0; k < 4; k++)
                if (c + k < C) w |= (uint32_t)in[(size_t)r * C + c + k] << (8 * k);
        *(uint32_t*)&tile[i][4 * tx] = w;
    }
    __syncthreads();
    tile_store_t(tile, r0, c0, R, C, out);
}

__global__ void k_to_bf16(const float* x, size_t n, uint16_t* out, int vec) {
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
    if (vec) { /* 4 per thread and step: a 16-byte load, an 8-byte store */
        for (size_t i = tid; i < n / 4; i += nt) {
            const float4 v = __ldg((const float4*)x + i);
            ((uint2*)out)[i] = pack4_bf16(v.x, v.y, v.z, v.w);
        }
        return;
    }
    for (size_t i = tid; i < n; i += nt) out[i] = mx_bf16_from_f32(x[i]);
}

}  // namespace

/* The amax words: a ring of FP8_RING (zeroed once), one a quantize, each call's amax kernel zeroing the next
 * call's word (k_amax's next_bits), so that a quantize is two launches (amax, cast) on its stream. A word is
 * used again FP8_RING calls later, long after the cast that read it (the calls of a process share one
 * stream order: the model's stream). */
#define FP8_RING 4
static unsigned* d_bits = NULL;
static unsigned g_ring = 0;

void mxg_fp8_release(void) {
    if (d_bits) cudaFree(d_bits);
    d_bits = NULL;
    g_ring = 0;
}

/* The amax of x into this call's word of the ring (*bits), after the arguments common to the quantizers
 * (fn: the caller, for the message). */
static int fp8_amax(const char* fn, const void* x, mxg_dtype dt, size_t n, const float* scale, const float* given_scale,
                    unsigned** bits, cudaStream_t st) {
    if (!scale && !given_scale) return mx_fail(MX_EINVAL, "%s: no scale output", fn);
    if (dt != MXG_F32 && dt != MXG_BF16) return mx_fail(MX_EINVAL, "mxg_fp8_quantize: input must be f32 or bf16");
    if (!d_bits) {
        CU_TRY(cudaMalloc(&d_bits, FP8_RING * sizeof(unsigned)));
        CU_TRY(cudaMemset(d_bits, 0, FP8_RING * sizeof(unsigned)));
        g_ring = 0;
    }
    unsigned* w = d_bits + g_ring;
    g_ring = (g_ring + 1) % FP8_RING;
    const int vec = dt == MXG_BF16 ? vec_ok<uint16_t>(x, n) : vec_ok<float>(x, n);
    if (dt == MXG_BF16) k_amax<uint16_t><<<132 * 8, 256, 0, st>>>((const uint16_t*)x, n, w, d_bits + g_ring, vec);
    else k_amax<float><<<132 * 8, 256, 0, st>>>((const float*)x, n, w, d_bits + g_ring, vec);
    CU_LAUNCHED();
    *bits = w;
    return MX_OK;
}

/* The grid of the FT x FT byte tiles of a [rows, cols] tensor (k_fp8_cast_t, k_transpose_u8). */
static int ft_grid(const char* fn, int rows, int cols, dim3* grid) {
    ARG_CHECK(rows <= 65535 * FT, "%s: %d rows (at most %d)", fn, rows, 65535 * FT);
    *grid = dim3((unsigned)((cols + FT - 1) / FT), (unsigned)((rows + FT - 1) / FT));
    return MX_OK;
}

/* k_fp8_cast over x[n] with its amax bits at *bits (device) */
static int cast(const void* x, mxg_dtype dt, size_t n, mx_fp8_kind kind, const float* given, const unsigned* bits,
                const Fp8Out& so, uint8_t* codes, cudaStream_t st) {
    const int grid = 132 * 8;
    const int vec = dt == MXG_BF16 ? vec_ok<uint16_t>(x, n) : vec_ok<float>(x, n);
    const int vc = vec && !((uintptr_t)codes & 7); /* the codes' 4- or 8-byte stores */
    if (dt == MXG_BF16)
        k_fp8_cast<uint16_t><<<grid, 256, 0, st>>>((const uint16_t*)x, n, (int)kind, given, bits, so, codes, vc);
    else k_fp8_cast<float><<<grid, 256, 0, st>>>((const float*)x, n, (int)kind, given, bits, so, codes, vc);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_fp8_quantize(const void* x, mxg_dtype dt, size_t n, mx_fp8_kind kind, const float* given_scale,
                                float* amax, float* scale, float* inv_scale, float* inv_rows, size_t n_rows,
                                uint8_t* codes, void* stream) {
    cudaStream_t st = MXG_STREAM(stream);
    unsigned* bits = NULL;
    int rc = fp8_amax("mxg_fp8_quantize", x, dt, n, scale, given_scale, &bits, st);
    if (rc) return rc;
    if (!codes) {
        k_fp8_scale<<<1, inv_rows ? FP8_SCALE_THREADS : 1, 0, st>>>(bits, (int)kind, given_scale, amax, scale, inv_scale,
                                                                   inv_rows, n_rows);
        CU_LAUNCHED();
        return MX_OK;
    }
    const Fp8Out so = {amax, scale, inv_scale, inv_rows, n_rows};
    return cast(x, dt, n, kind, given_scale, bits, so, codes, st);
}

extern "C" int mxg_fp8_quantize_amax(const void* x, mxg_dtype dt, size_t n, mx_fp8_kind kind, const float* known,
                                     float* amax, float* scale, float* inv_scale, float* inv_rows, size_t n_rows,
                                     uint8_t* codes, void* stream) {
    ARG_CHECK(n > 0 && codes && known && scale, "mxg_fp8_quantize_amax: empty, no codes, no amax or no scale");
    ARG_CHECK(dt == MXG_F32 || dt == MXG_BF16, "mxg_fp8_quantize_amax: input must be f32 or bf16");
    const Fp8Out so = {amax, scale, inv_scale, inv_rows, n_rows};
    /* the amax float as the quantizers (and block_amax_to's producers) write it is its |x| bits */
    return cast(x, dt, n, kind, NULL, (const unsigned*)known, so, codes, MXG_STREAM(stream));
}

/* k_fp8_cast_tw takes the cast: whole 4 x 16 pieces of x, its rows and the codes' 16-byte aligned (every row too:
 * cols % 16 == 0), codes_t's rows 4-byte aligned (rows % 4 == 0) */
static bool fp8_cast_tw_ok(const void* x, int rows, int cols, const uint8_t* codes, const uint8_t* codes_t) {
    return rows % 4 == 0 && cols % WT_COLS == 0 && !((uintptr_t)x & 15) && !((uintptr_t)codes & 15) &&
           !((uintptr_t)codes_t & 3);
}

/* k_fp8_cast_t over x [rows, cols] with its amax bits at *bits (device) */
static int cast_t(const char* fn, const void* x, mxg_dtype dt, int rows, int cols, mx_fp8_kind kind, const float* given,
                  const unsigned* bits, const Fp8Out& so, uint8_t* codes, uint8_t* codes_t, cudaStream_t st) {
    dim3 grid;
    int rc = ft_grid(fn, rows, cols, &grid);
    if (rc) return rc;
    if (fp8_cast_tw_ok(x, rows, cols, codes, codes_t)) {
        grid = dim3((unsigned)((cols + WT_WARPS * WT_COLS - 1) / (WT_WARPS * WT_COLS)), (unsigned)((rows + WT_ROWS - 1) / WT_ROWS));
        if (dt == MXG_BF16)
            k_fp8_cast_tw<uint16_t><<<grid, 32 * WT_WARPS, 0, st>>>((const uint16_t*)x, rows, cols, (int)kind, given, bits,
                                                                     so, codes, codes_t);
        else
            k_fp8_cast_tw<float><<<grid, 32 * WT_WARPS, 0, st>>>((const float*)x, rows, cols, (int)kind, given, bits, so,
                                                                  codes, codes_t);
        CU_LAUNCHED();
        return MX_OK;
    }
    if (dt == MXG_BF16)
        k_fp8_cast_t<uint16_t><<<grid, 256, 0, st>>>((const uint16_t*)x, rows, cols, (int)kind, given, bits, so, codes,
                                                     codes_t);
    else k_fp8_cast_t<float><<<grid, 256, 0, st>>>((const float*)x, rows, cols, (int)kind, given, bits, so, codes, codes_t);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_fp8_quantize_t(const void* x, mxg_dtype dt, int rows, int cols, mx_fp8_kind kind,
                                  const float* given_scale, float* amax, float* scale, float* inv_scale,
                                  float* inv_rows, size_t n_rows, uint8_t* codes, uint8_t* codes_t, void* stream) {
    ARG_CHECK(rows > 0 && cols > 0 && codes_t, "mxg_fp8_quantize_t: shape %d x %d or no output", rows, cols);
    dim3 grid;
    int rc = ft_grid("mxg_fp8_quantize_t", rows, cols, &grid);
    if (rc) return rc;
    cudaStream_t st = MXG_STREAM(stream);
    unsigned* bits = NULL;
    rc = fp8_amax("mxg_fp8_quantize_t", x, dt, (size_t)rows * cols, scale, given_scale, &bits, st);
    if (rc) return rc;
    const Fp8Out so = {amax, scale, inv_scale, inv_rows, n_rows};
    return cast_t("mxg_fp8_quantize_t", x, dt, rows, cols, kind, given_scale, bits, so, codes, codes_t, st);
}

extern "C" int mxg_fp8_quantize_t_amax(const void* x, mxg_dtype dt, int rows, int cols, mx_fp8_kind kind,
                                       const float* known, float* amax, float* scale, float* inv_scale, float* inv_rows,
                                       size_t n_rows, uint8_t* codes, uint8_t* codes_t, void* stream) {
    ARG_CHECK(rows > 0 && cols > 0 && codes_t && known && scale, "mxg_fp8_quantize_t_amax: shape %d x %d, no output, "
              "no amax or no scale", rows, cols);
    ARG_CHECK(dt == MXG_F32 || dt == MXG_BF16, "mxg_fp8_quantize_t_amax: input must be f32 or bf16");
    const Fp8Out so = {amax, scale, inv_scale, inv_rows, n_rows};
    /* the amax float as mxg_fp8_quantize writes it is the bits k_amax made (mx_u2f of them) */
    return cast_t("mxg_fp8_quantize_t_amax", x, dt, rows, cols, kind, NULL, (const unsigned*)known, so, codes, codes_t,
                  MXG_STREAM(stream));
}

extern "C" int mxg_fp8_transpose(const uint8_t* in, int rows, int cols, uint8_t* out, void* stream) {
    ARG_CHECK(rows > 0 && cols > 0 && in && out, "mxg_fp8_transpose: shape %d x %d or no buffer", rows, cols);
    dim3 grid;
    int rc = ft_grid("mxg_fp8_transpose", rows, cols, &grid);
    if (rc) return rc;
    k_transpose_u8<<<grid, 256, 0, MXG_STREAM(stream)>>>(in, rows, cols, out);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_to_bf16(const float* x, size_t n, uint16_t* out, void* stream) {
    const int vec = !((uintptr_t)x & 15) && !((uintptr_t)out & 7) && n % 4 == 0;
    k_to_bf16<<<132 * 8, 256, 0, MXG_STREAM(stream)>>>(x, n, out, vec);
    CU_LAUNCHED();
    return MX_OK;
}
