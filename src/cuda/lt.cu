/*
 * lt.cu: the one cuBLASLt layer (see lt.cuh): handle, workspace, plan cache,
 * shutdown; and the library's device query (mxg_device_info). No CPU twin:
 * the library-handle layer of the GPU path.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "cuda/lt.cuh"

namespace {

cublasLtHandle_t g_lt = NULL;
void* g_ws = NULL;
float* g_dummy_scale = NULL;  // placeholder scale vector for the heuristic query
/* One cache for all kinds: the sum of the three caches it replaces (TN 128, FP32 64, batched 64);
 * a model step uses ~25 FP32 shapes. */
#define LT_MAX_PLANS 256
lt_plan g_plans[LT_MAX_PLANS];
int g_nplans = 0;

}  // namespace

lt_key lt_key_zero(int kind) {
    lt_key k;
    memset(&k, 0, sizeof k);
    k.kind = kind;
    return k;
}

int lt_get(cublasLtHandle_t* lt, void** ws) {
    if (!g_lt) {
        LT_TRY(cublasLtCreate(&g_lt));
        CU_TRY(cudaMalloc(&g_ws, LT_WS_BYTES));
    }
    *lt = g_lt;
    if (ws) *ws = g_ws;
    return MX_OK;
}

void lt_plan_destroy(lt_plan* p) {
    cublasLtMatmulDescDestroy(p->op);
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
}

int lt_plan_get(lt_plan** out, const lt_key* k, lt_make_fn make) {
    cublasLtHandle_t lt;
    int rc = lt_get(&lt, NULL);
    if (rc) return rc;
    for (int i = 0; i < g_nplans; i++) {
        lt_plan* p = &g_plans[i];
        if (!memcmp(&p->key, k, sizeof *k)) {
            *out = p;
            return MX_OK;
        }
    }
    if (g_nplans == LT_MAX_PLANS) { /* evict the oldest */
        lt_plan_destroy(&g_plans[0]);
        memmove(&g_plans[0], &g_plans[1], sizeof(lt_plan) * (LT_MAX_PLANS - 1));
        g_nplans--;
    }
    lt_plan* p = &g_plans[g_nplans];
    memset(p, 0, sizeof *p);
    p->key = *k;
    rc = make(p, lt);
    if (rc) return rc;
    g_nplans++;
    *out = p;
    return MX_OK;
}

cublasStatus_t lt_algo_fixed_order(lt_plan* p, cublasLtHandle_t lt, size_t ws_limit, uint32_t min_align) {
    cublasLtMatmulPreference_t pref;
    cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    size_t ws = ws_limit;
    uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE; /* no split-K: one fixed order per output */
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red);
    if (min_align) {
        const cublasLtMatmulPreferenceAttributes_t al[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
            st = cublasLtMatmulPreferenceSetAttribute(pref, al[i], &min_align, sizeof min_align);
    }
    cublasLtMatmulHeuristicResult_t res[1];
    int nres = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && nres < 1) st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (st == CUBLAS_STATUS_SUCCESS) p->algo = res[0].algo;
    return st;
}

int lt_matmul(const lt_plan* p, float beta, const void* A, const void* B, void* C, size_t ws_limit, cudaStream_t st) {
    cublasLtHandle_t lt = NULL;
    void* ws = NULL;
    int rc = lt_get(&lt, &ws);
    if (rc) return rc;
    const float alpha = 1.0f;
    LT_TRY(cublasLtMatmul(lt, p->op, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C, p->lc, &p->algo, ws, ws_limit, st));
    return MX_OK;
}

int lt_matmul_res(const lt_plan* p, const void* A, const void* B, const void* Cin, void* D, size_t ws_limit,
                  cudaStream_t st) {
    cublasLtHandle_t lt = NULL;
    void* ws = NULL;
    int rc = lt_get(&lt, &ws);
    if (rc) return rc;
    const float alpha = 1.0f, beta = 1.0f;
    LT_TRY(cublasLtMatmul(lt, p->op, &alpha, B, p->la, A, p->lb, &beta, Cin, p->lc, D, p->lc, &p->algo, ws, ws_limit, st));
    return MX_OK;
}

int lt_dummy_scale(float** out) {
    if (!g_dummy_scale) CU_TRY(cudaMalloc(&g_dummy_scale, 4096 * sizeof(float)));
    *out = g_dummy_scale;
    return MX_OK;
}

void lt_shutdown(void) {
    for (int i = 0; i < g_nplans; i++) lt_plan_destroy(&g_plans[i]);
    g_nplans = 0;
    if (g_dummy_scale) cudaFree(g_dummy_scale);
    g_dummy_scale = NULL;
    if (g_ws) cudaFree(g_ws);
    g_ws = NULL;
    if (g_lt) cublasLtDestroy(g_lt);
    g_lt = NULL;
}

/* The whole library's state: cuBLASLt and the FP8 amax scratch. */
extern "C" void mxg_shutdown(void) {
    lt_shutdown();
    mxg_fp8_release();
}
/* Kept for their callers: the layers and the attention share the one cuBLASLt layer now, so each
 * frees all of it (everything is made again on the next use). */
extern "C" void mxg_layers_shutdown(void) { lt_shutdown(); }
extern "C" void mxg_attention_gemm_shutdown(void) { lt_shutdown(); }

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
