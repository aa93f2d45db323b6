/*
 * gemm.cu: the GEMM paths through cuBLASLt, and mxg_device_info.
 *
 * All GEMMs are TN: C[M,N] = A[M,K] B[N,K]^T, both operands row-major with K
 * contiguous (what cuBLASLt's FP8 kernels require on Hopper). In cuBLASLt's
 * column-major terms that is D^T[N,M] = op(B)[N,K] op(A)[K,M] with transa = T
 * on our B and transb = N on our A.
 *
 * Paths: BF16 x BF16 (baseline and the exact emulation of MXFP4 once the
 * operands are dequantized); FP8 with per-tensor scales (E4M3 x E4M3, E5M2 x
 * E4M3); FP8 with VEC128_32F or OUTER_VEC_32F scales (the MXFP4 fast path on
 * exponent-folded E4M3 operands). FP32 accumulation; FAST_ACCUM off.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "cuda/common.cuh"


namespace {

cublasLtHandle_t g_lt = NULL;
void* g_ws = NULL;
const size_t g_ws_size = 64u << 20;

struct Plan {
    int used;
    int mode, at, bt, ct, M, N, K;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};
#define MAX_PLANS 128
Plan g_plans[MAX_PLANS];
float* g_dummy_scale = NULL;  // placeholder scale vector for the heuristic query
int g_nplans = 0;

int lt_init(void) {
    if (g_lt) return MX_OK;
    LT_TRY(cublasLtCreate(&g_lt));
    CU_TRY(cudaMalloc(&g_ws, g_ws_size));
    return MX_OK;
}

cudaDataType_t cuda_type(int t) {
    switch (t) {
    case MXG_F32: return CUDA_R_32F;
    case MXG_BF16: return CUDA_R_16BF;
    case MXG_E4M3: return CUDA_R_8F_E4M3;
    default: return CUDA_R_8F_E5M2;
    }
}

int make_plan(Plan* p, int mode, int at, int bt, int ct, int M, int N, int K) {
    memset(p, 0, sizeof *p);
    p->mode = mode; p->at = at; p->bt = bt; p->ct = ct; p->M = M; p->N = N; p->K = K;
    LT_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
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
        if (!g_dummy_scale) CU_TRY(cudaMalloc(&g_dummy_scale, 4096 * sizeof(float)));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g_dummy_scale, sizeof g_dummy_scale));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g_dummy_scale, sizeof g_dummy_scale));
    }
    /* cuBLASLt A = our B (K x N col-major, ld K), B = our A (K x M, ld K), D = N x M (ld N) */
    LT_TRY(cublasLtMatrixLayoutCreate(&p->la, cuda_type(bt), K, N, K));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, cuda_type(at), K, M, K));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, cuda_type(ct), N, M, N));
    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = g_ws_size;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t res[1];
    int nres = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || nres < 1)
        return mx_fail(MX_EINVAL, "cuBLASLt has no algorithm for this GEMM (mode %d, types %d x %d -> %d, M %d N %d K %d): status %d",
                       mode, at, bt, ct, M, N, K, (int)st);
    p->algo = res[0].algo;
    p->used = 1;
    return MX_OK;
}

int get_plan(Plan** out, int mode, int at, int bt, int ct, int M, int N, int K) {
    for (int i = 0; i < g_nplans; i++) {
        Plan* p = &g_plans[i];
        if (p->mode == mode && p->at == at && p->bt == bt && p->ct == ct && p->M == M && p->N == N && p->K == K) {
            *out = p;
            return MX_OK;
        }
    }
    if (g_nplans == MAX_PLANS) {  // evict the oldest
        Plan* p = &g_plans[0];
        cublasLtMatmulDescDestroy(p->op);
        cublasLtMatrixLayoutDestroy(p->la); cublasLtMatrixLayoutDestroy(p->lb); cublasLtMatrixLayoutDestroy(p->lc);
        memmove(&g_plans[0], &g_plans[1], sizeof(Plan) * (MAX_PLANS - 1));
        g_nplans--;
    }
    Plan* p = &g_plans[g_nplans];
    int rc = make_plan(p, mode, at, bt, ct, M, N, K);
    if (rc) return rc;
    g_nplans++;
    *out = p;
    return MX_OK;
}

}  // namespace

extern "C" int mxg_gemm_tn(mxg_scale_mode mode, const void* A, mxg_dtype a_type, const float* a_scale, const void* B,
                           mxg_dtype b_type, const float* b_scale, void* C, mxg_dtype c_type, int M, int N, int K,
                           void* stream) {
    return mxg_gemm_tn_acc(mode, A, a_type, a_scale, B, b_type, b_scale, C, c_type, M, N, K, 0, stream);
}

extern "C" int mxg_gemm_tn_acc(mxg_scale_mode mode, const void* A, mxg_dtype a_type, const float* a_scale,
                               const void* B, mxg_dtype b_type, const float* b_scale, void* C, mxg_dtype c_type, int M,
                               int N, int K, int accumulate, void* stream) {
    int rc = lt_init();
    if (rc) return rc;
    if (M <= 0 || N <= 0 || K <= 0) return mx_fail(MX_EINVAL, "mxg_gemm_tn: bad shape %d x %d x %d", M, N, K);
    if (mode == MXG_SCALE_NONE && (a_type != MXG_BF16 || b_type != MXG_BF16))
        return mx_fail(MX_EINVAL, "mxg_gemm_tn: unscaled GEMMs take BF16 operands");
    if (mode != MXG_SCALE_NONE && (a_type < MXG_E4M3 || b_type < MXG_E4M3 || !a_scale || !b_scale))
        return mx_fail(MX_EINVAL, "mxg_gemm_tn: scaled GEMMs take FP8 operands and two scale pointers");
    if (mode != MXG_SCALE_NONE && (((uintptr_t)a_scale | (uintptr_t)b_scale) & 15))
        return mx_fail(MX_EINVAL, "mxg_gemm_tn: scale pointers must be 16-byte aligned (cuBLASLt)");
    if (mode == MXG_SCALE_VEC128 && K % 128) return mx_fail(MX_EINVAL, "mxg_gemm_tn: VEC128 needs K %% 128 == 0");
    Plan* p;
    rc = get_plan(&p, mode, a_type, b_type, c_type, M, N, K);
    if (rc) return rc;
    if (mode != MXG_SCALE_NONE) {
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale, sizeof b_scale));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale, sizeof a_scale));
    }
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    LT_TRY(cublasLtMatmul(g_lt, p->op, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C, p->lc, &p->algo, g_ws, g_ws_size,
                          MXG_STREAM(stream)));
    return MX_OK;
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

extern "C" void mxg_shutdown(void) {
    for (int i = 0; i < g_nplans; i++) {
        Plan* p = &g_plans[i];
        cublasLtMatmulDescDestroy(p->op);
        cublasLtMatrixLayoutDestroy(p->la); cublasLtMatrixLayoutDestroy(p->lb); cublasLtMatrixLayoutDestroy(p->lc);
    }
    g_nplans = 0;
    if (g_dummy_scale) cudaFree(g_dummy_scale);
    g_dummy_scale = NULL;
    mxg_quant_release();
    if (g_ws) cudaFree(g_ws);
    g_ws = NULL;
    if (g_lt) cublasLtDestroy(g_lt);
    g_lt = NULL;
}

extern "C" int mxg_device_info(char* buf, size_t n) {
    int count = 0, rt = 0, drv = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    if (e != cudaSuccess || count == 0) {
        snprintf(buf, n, "%s (CUDA runtime %d.%d, driver %d.%d)", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device",
                 rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10);
        cudaGetLastError();
        return -1;
    }
    int dev = 0;
    cudaDeviceProp p;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        snprintf(buf, n, "cudaGetDeviceProperties failed");
        return -1;
    }
    size_t lt = cublasLtGetVersion();
    snprintf(buf, n, "%s (sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB), %d device%s; CUDA runtime %d.%d, driver %d.%d; cuBLASLt %zu.%zu.%zu%s",
             p.name, p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024 * 1024),
             p.l2CacheSize >> 20, count, count > 1 ? "s" : "", rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10,
             lt / 10000, lt % 10000 / 100, lt % 100,
             p.major == 9 ? "" : " (the kernels are built for sm_90a: this GPU cannot run them)");
    return p.major == 9 ? 0 : -1;
}
