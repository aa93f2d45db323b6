/*
 * gemm.cu: the GEMMs through cuBLASLt (the one handle layer, ../lt.cuh), the
 * GPU twin of src/nn/gemm.c (mx_sgemm_tn).
 *
 * FP32 / BF16 GEMMs (mxg_sgemm, mxg_gemm_bf16: the LM head, the FP32 recipe):
 * row-major C[M,N] (+)= op(A) op(B) with FP32 accumulation and output, no
 * split-K (one fixed order per output: deterministic), no TF32.
 *
 * TN GEMMs (mxg_gemm_tn, mxg_gemm_tn_acc: the linear layer): C[M,N] =
 * A[M,K] B[N,K]^T, both operands row-major with K contiguous (what cuBLASLt's
 * FP8 kernels require on Hopper); mxg_gemm_lin, the linear layer's entry, also
 * takes BF16 operands stored transposed (A [K,M], B [K,N]: no transpose pass). In cuBLASLt's column-major terms that is
 * D^T[N,M] = op(B)[N,K] op(A)[K,M] with transa = T on our B and transb = N
 * on our A. Paths: BF16 x BF16 (baseline and the exact emulation of MXFP4
 * once the operands are dequantized: mxg_gemm_mxfp4_exact); FP8 with
 * per-tensor scales (E4M3 x E4M3, E5M2 x E4M3); FP8 with VEC128_32F or
 * OUTER_VEC_32F scales (the MXFP4 fast path on exponent-folded E4M3
 * operands). FP32 accumulation; FAST_ACCUM off.
 *
 * Guarantees: the products are those of the operands as given; the
 * accumulation order is cuBLASLt's (deterministic for a given algorithm).
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "cuda/lt.cuh"
#include "cuda/nn/gemm.cuh"

namespace {

cudaDataType_t cuda_type(int t) {
    switch (t) {
    case MXG_F32: return CUDA_R_32F;
    case MXG_BF16: return CUDA_R_16BF;
    case MXG_E4M3: return CUDA_R_8F_E4M3;
    default: return CUDA_R_8F_E5M2;
    }
}

/* ---- TN plans (the linear layer) ---- */
int make_plan(lt_plan* p, cublasLtHandle_t lt) {
    const int mode = p->key.mode, at = p->key.at, bt = p->key.bt, ct = p->key.ct, M = p->key.M, N = p->key.N,
              K = p->key.K, a_tr = p->key.ta, b_tr = p->key.tb;
    LT_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    /* our B stored [N,K] (col-major K x N: op T) or, b_tr, [K,N] (N x K: op N); our A stored [M,K]
     * (K x M: op N) or, a_tr, [K,M] (M x K: op T) */
    cublasOperation_t ta = b_tr ? CUBLAS_OP_N : CUBLAS_OP_T, tb = a_tr ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (mode != MXG_SCALE_NONE) {
        int8_t fast = 0;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
        cublasLtMatmulMatrixScale_t sm = mode == MXG_SCALE_TENSOR   ? CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
                                         : mode == MXG_SCALE_VEC128 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                                    : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &sm, sizeof sm));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &sm, sizeof sm));
        /* the pointers are set per call; set placeholders so the heuristic knows scaling is on */
        float* dummy;
        int rc = lt_dummy_scale(&dummy);
        if (rc) return rc;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dummy, sizeof dummy));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dummy, sizeof dummy));
    }
    /* cuBLASLt A = our B (K x N col-major, ld K), B = our A (K x M, ld K), D = N x M (ld N) */
    if (b_tr) LT_TRY(cublasLtMatrixLayoutCreate(&p->la, cuda_type(bt), N, K, N));
    else LT_TRY(cublasLtMatrixLayoutCreate(&p->la, cuda_type(bt), K, N, K));
    if (a_tr) LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, cuda_type(at), M, K, M));
    else LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, cuda_type(at), K, M, K));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, cuda_type(ct), N, M, N));
    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = LT_WS_TN;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t res[1];
    int nres = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || nres < 1)
        return mx_fail(MX_EINVAL, "cuBLASLt has no algorithm for this GEMM (mode %d, types %d x %d -> %d, M %d N %d K %d): status %d",
                       mode, at, bt, ct, M, N, K, (int)st);
    p->algo = res[0].algo;
    return MX_OK;
}

/* ---- FP32 / BF16 plans (the layers) ---- */
/* Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T: cuBLASLt's
 * A is our B (stored [K,N] row-major = [N,K] col-major: no transpose; stored [N,K]: T),
 * its B is our A (stored [M,K] = [K,M] col-major: N; stored [K,M]: T). */
int splan_make(lt_plan* p, cublasLtHandle_t lt) {
    const int ta = p->key.ta, tb = p->key.tb, M = p->key.M, N = p->key.N, K = p->key.K, lda = p->key.lda,
              ldb = p->key.ldb, ldc = p->key.ldc, bf16 = p->key.flag;
    const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    LT_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->la, in, tb ? K : N, tb ? N : K, ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, in, ta ? M : K, ta ? K : M, lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, N, M, ldc));
    /* no split-K; algorithms valid for 16-byte aligned pointers (row offsets of chunks), not only 256 */
    cublasStatus_t st = lt_algo_fixed_order(p, lt, LT_WS_F32, 16);
    if (st != CUBLAS_STATUS_SUCCESS) {
        lt_plan_destroy(p);
        return mx_fail(MX_EINVAL, "cuBLASLt has no FP32 algorithm for %s%s M %d N %d K %d: status %d", ta ? "T" : "N",
                       tb ? "T" : "N", M, N, K, (int)st);
    }
    return MX_OK;
}

}  // namespace

int mxg_gemm_f32acc(int ta, int tb, int M, int N, int K, const void* A, int lda, const void* B, int ldb, float* C,
                    int ldc, int accumulate, int bf16, void* stream) {
    ARG_CHECK(M > 0 && N > 0 && K > 0, "mxg_sgemm: bad shape %d x %d x %d", M, N, K);
    ARG_CHECK(lda >= (ta ? M : K) && ldb >= (tb ? K : N) && ldc >= N, "mxg_sgemm: leading dimension too small");
    ARG_CHECK(!(((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) & 15), "mxg_sgemm: pointers must be 16-byte aligned");
    lt_key k = lt_key_zero(LT_F32);
    k.ta = ta; k.tb = tb; k.M = M; k.N = N; k.K = K; k.lda = lda; k.ldb = ldb; k.ldc = ldc; k.flag = bf16;
    lt_plan* p;
    int rc = lt_plan_get(&p, &k, splan_make);
    if (rc) return rc;
    return lt_matmul(p, accumulate ? 1.0f : 0.0f, A, B, C, LT_WS_F32, MXG_STREAM(stream));
}

extern "C" int mxg_sgemm(int ta, int tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                         float* C, int ldc, int accumulate, void* stream) {
    return mxg_gemm_f32acc(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate, 0, stream);
}

extern "C" int mxg_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
                             int ldb, float* C, int ldc, int accumulate, void* stream) {
    return mxg_gemm_f32acc(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate, 1, stream);
}

extern "C" int mxg_gemm_tn(mxg_scale_mode mode, const void* A, mxg_dtype a_type, const float* a_scale, const void* B,
                           mxg_dtype b_type, const float* b_scale, void* C, mxg_dtype c_type, int M, int N, int K,
                           void* stream) {
    return mxg_gemm_tn_acc(mode, A, a_type, a_scale, B, b_type, b_scale, C, c_type, M, N, K, 0, stream);
}

extern "C" int mxg_gemm_tn_acc(mxg_scale_mode mode, const void* A, mxg_dtype a_type, const float* a_scale,
                               const void* B, mxg_dtype b_type, const float* b_scale, void* C, mxg_dtype c_type, int M,
                               int N, int K, int accumulate, void* stream) {
    return mxg_gemm_lin(mode, A, a_type, 0, a_scale, B, b_type, 0, b_scale, C, c_type, M, N, K, accumulate, NULL, stream);
}

int mxg_gemm_lin(mxg_scale_mode mode, const void* A, mxg_dtype a_type, int a_tr, const float* a_scale, const void* B,
                 mxg_dtype b_type, int b_tr, const float* b_scale, void* C, mxg_dtype c_type, int M, int N, int K,
                 int accumulate, const float* res, void* stream) {
    cublasLtHandle_t lt;
    int rc = lt_get(&lt, NULL); /* the handle first, as always */
    if (rc) return rc;
    if (M <= 0 || N <= 0 || K <= 0) return mx_fail(MX_EINVAL, "mxg_gemm_tn: bad shape %d x %d x %d", M, N, K);
    if (mode == MXG_SCALE_NONE && (a_type != MXG_BF16 || b_type != MXG_BF16))
        return mx_fail(MX_EINVAL, "mxg_gemm_tn: unscaled GEMMs take BF16 operands");
    if (mode != MXG_SCALE_NONE && (a_type < MXG_E4M3 || b_type < MXG_E4M3 || !a_scale || !b_scale))
        return mx_fail(MX_EINVAL, "mxg_gemm_tn: scaled GEMMs take FP8 operands and two scale pointers");
    if (mode != MXG_SCALE_NONE && (((uintptr_t)a_scale | (uintptr_t)b_scale) & 15))
        return mx_fail(MX_EINVAL, "mxg_gemm_tn: scale pointers must be 16-byte aligned (cuBLASLt)");
    if (mode == MXG_SCALE_VEC128 && K % 128) return mx_fail(MX_EINVAL, "mxg_gemm_tn: VEC128 needs K %% 128 == 0");
    if (mode != MXG_SCALE_NONE && (a_tr || b_tr))
        return mx_fail(MX_EINVAL, "mxg_gemm_tn: FP8 operands must be K-contiguous (TN) on Hopper");
    if (res && (accumulate || c_type != MXG_F32 || res == C))
        return mx_fail(MX_EINVAL, "mxg_gemm_tn: a residual input needs an FP32 output of its own, no accumulation");
    lt_key k = lt_key_zero(LT_TN);
    k.mode = mode; k.at = a_type; k.bt = b_type; k.ct = c_type; k.M = M; k.N = N; k.K = K;
    k.ta = a_tr != 0; k.tb = b_tr != 0;
    lt_plan* p;
    rc = lt_plan_get(&p, &k, make_plan);
    if (rc) return rc;
    if (mode != MXG_SCALE_NONE) {
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale, sizeof b_scale));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale, sizeof a_scale));
    }
    if (res) return lt_matmul_res(p, A, B, res, C, LT_WS_TN, MXG_STREAM(stream));
    return lt_matmul(p, accumulate ? 1.0f : 0.0f, A, B, C, LT_WS_TN, MXG_STREAM(stream));
}

extern "C" int mxg_gemm_mxfp4_exact(const mxg_fp4* A, const mxg_fp4* B, uint16_t* wa, uint16_t* wb, void* C,
                                    mxg_dtype c_type, void* stream) {
    int Ka = A->layout == MX_LAYOUT_32x1 ? A->rows : A->cols, M = A->layout == MX_LAYOUT_32x1 ? A->cols : A->rows;
    int Kb = B->layout == MX_LAYOUT_32x1 ? B->rows : B->cols, N = B->layout == MX_LAYOUT_32x1 ? B->cols : B->rows;
    if (Ka != Kb) return mx_fail(MX_EINVAL, "mxg_gemm_mxfp4_exact: reduction dims differ (%d vs %d)", Ka, Kb);
    int rc = mxg_dequant_bf16(A, 1, wa, stream);
    if (!rc) rc = mxg_dequant_bf16(B, 1, wb, stream);
    if (!rc) rc = mxg_gemm_tn(MXG_SCALE_NONE, wa, MXG_BF16, NULL, wb, MXG_BF16, NULL, C, c_type, M, N, Ka, stream);
    return rc;
}
