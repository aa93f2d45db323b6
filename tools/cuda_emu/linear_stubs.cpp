// linear_stubs.cpp: for emulating src/cuda/nn/linear.cu (tools/cuda_emu/README.md): the BF16 GEMM of the linear layer
// and the FP32 one as FP64 sums rounded once (cuBLASLt stand-ins; FP8 codes with per-tensor, VEC128 or OUTER scales
// too), the fast-path quantizers as stubs that fail (the reference-form path, block_gemm, runs here; FP8 with the
// emulated fp8.cu linked beside), the profiling hook empty.
#include <stdio.h>
#include <string.h>
#include "mxlm/gpu.h"
#include "mxlm/mx.h"
#include "mxlm/mx_scalar.h"
#include "mxlm/gpu_model.h"
int g_mxg_prof = 0;
typedef void* cudaStream_t;
void mxg_prof_mark(int, int, cudaStream_t) {}
static float ld(const void* p, mxg_dtype t, size_t i) { return t == MXG_BF16 ? mx_bf16_to_f32(((const uint16_t*)p)[i]) : ((const float*)p)[i]; }
/* An operand's value: BF16, FP32, or an FP8 code (E4M3 / E5M2) without its scale */
static double ldq(const void* p, mxg_dtype t, size_t i) {
    if (t == MXG_E4M3) return mx_e4m3_decode(((const uint8_t*)p)[i]);
    if (t == MXG_E5M2) return mx_e5m2_decode(((const uint8_t*)p)[i]);
    return ld(p, t, i);
}
/* operand scale of row r at reduction index k: TENSOR one float, VEC128 [K/128, rows] (rows contiguous), OUTER one
 * per row; NONE 1 */
static double scl(mxg_scale_mode m, const float* s, int rows, int r, int k) {
    if (m == MXG_SCALE_TENSOR) return s[0];
    if (m == MXG_SCALE_VEC128) return s[(size_t)(k / 128) * rows + r];
    if (m == MXG_SCALE_OUTER) return s[r];
    return 1.0;
}
/* C[M,N] = A'[M,K] B'[N,K]^T, A' = A [M,K] or (a_tr) A stored [K,M]; FP64 sums rounded once; FP8 operands (not
 * transposed, as linear.cu passes them) with their scales (session 16) */
int mxg_gemm_lin(mxg_scale_mode mode, const void* A, mxg_dtype at, int a_tr, const float* as, const void* B, mxg_dtype bt,
                 int b_tr, const float* bs, void* C, mxg_dtype ct, int M, int N, int K, int acc, const float* res, void* stream) {
    const int q8 = at == MXG_E4M3 || at == MXG_E5M2;
    if (mode == MXG_SCALE_NONE ? (at != MXG_BF16 || bt != MXG_BF16) : (!q8 || a_tr || b_tr))
        return mx_fail(MX_EINVAL, "emu gemm: BF16, or FP8 with scales");
    if (res && (acc || ct != MXG_F32 || res == C)) return mx_fail(MX_EINVAL, "emu gemm: res");
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += ldq(A, at, a_tr ? (size_t)k * M + i : (size_t)i * K + k) * scl(mode, as, M, i, k) *
                     ldq(B, bt, b_tr ? (size_t)k * N + j : (size_t)j * K + k) * scl(mode, bs, N, j, k);
            size_t o = (size_t)i * N + j;
            if (ct == MXG_BF16) { ((uint16_t*)C)[o] = mx_bf16_from_f32((float)s); continue; }
            float v = (float)s;
            float* c = (float*)C;
            if (res) c[o] = res[o] + v; else if (acc) c[o] = c[o] + v; else c[o] = v;
        }
    return 0;
}
int mxg_sgemm(int ta, int tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc, int acc, void*) {
    /* row-major: C[M,N] = op(A)[M,K] op(B)[K,N]; ta: A stored [K,M]; tb: B stored [N,K] (as linear.cu calls it with !b_t) */
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += a * b;
            }
            C[(size_t)i * ldc + j] = acc ? C[(size_t)i * ldc + j] + (float)s : (float)s;
        }
    return 0;
}
__attribute__((weak)) int mxg_to_bf16(const float* x, size_t n, uint16_t* out, void*) { for (size_t i = 0; i < n; i++) out[i] = mx_bf16_from_f32(x[i]); return 0; }
int mxg_quantize(const void*, mxg_dtype, int, int, const mxg_qspec*, const mxg_qout*, const mxg_qspec*, const mxg_qout*, void*) { return mx_fail(MX_EINVAL, "emu: mxg_quantize stub"); }
int mxg_dequant_bf16(const mxg_fp4*, int, uint16_t*, void*) { return mx_fail(MX_EINVAL, "emu: dequant stub"); }
/* (weak: the emulated src/cuda/mx/fp8.cu, linked too, takes their place) */
__attribute__((weak)) int mxg_fp8_quantize(const void*, mxg_dtype, size_t, mx_fp8_kind, const float*, float*, float*, float*,
                                           float*, size_t, uint8_t*, void*) { return mx_fail(MX_EINVAL, "emu: fp8 stub"); }
__attribute__((weak)) int mxg_fp8_quantize_t(const void*, mxg_dtype, int, int, mx_fp8_kind, const float*, float*, float*,
                                             float*, float*, size_t, uint8_t*, uint8_t*, void*) {
    return mx_fail(MX_EINVAL, "emu: fp8 stub");
}
/* the MXFP4 fast path's folds (mx/mxfp4.cu: inline PTX) */
int mxg_fold(const mxg_fp4*, int, mxg_fold_mode, uint8_t*, float*, unsigned long long*, void*) { return mx_fail(MX_EINVAL, "emu: fold stub"); }
int mxg_fold_outer_from_vec128(const uint8_t*, const float*, int, int, uint8_t*, float*, uint8_t*, unsigned long long*, void*) {
    return mx_fail(MX_EINVAL, "emu: fold stub");
}
int mxg_fold_outer_fixup(float*, int, int, int, const uint8_t*, const float*, const uint8_t*, const float*, const uint8_t*,
                         const uint8_t*, const float*, const uint8_t*, const float*, const uint8_t*, void*) {
    return mx_fail(MX_EINVAL, "emu: fold stub");
}
