/*
 * lt.cuh: the one cuBLASLt layer of the GPU library: a single handle, one
 * workspace, one plan cache and one shutdown (src/cuda/lt.cu) for every
 * GEMM: the linear layer's TN GEMMs (nn/gemm.cu: BF16, FP8 per-tensor,
 * VEC128 / OUTER scales), the FP32/BF16 GEMMs of the layers (nn/gemm.cu:
 * mxg_sgemm, mxg_gemm_bf16) and the attention's strided-batched GEMMs
 * (nn/attention_gemm.cu). No CPU twin: the library-handle layer.
 *
 * A plan (descriptors + the algorithm cuBLASLt's heuristic picked) is made
 * once per key by the caller's maker, which sets the descriptors; the kinds
 * keep the workspace limits they always chose their algorithms with (the
 * limit enters the heuristic), so every GEMM runs the same algorithm as
 * before the layer was shared. All GEMMs run on the caller's stream; the
 * workspace is shared, so GEMMs must not run concurrently on two streams.
 */
#ifndef MXLM_CUDA_LT_CUH
#define MXLM_CUDA_LT_CUH
#include <cublasLt.h>

#include "cuda/common.cuh"

/* Bytes of the shared workspace (the largest limit below). */
#define LT_WS_BYTES ((size_t)64u << 20)
/* The workspace limit each kind chooses its algorithms with and passes to cublasLtMatmul. */
#define LT_WS_TN ((size_t)64u << 20)      /* linear GEMMs (mxg_gemm_tn_acc) */
#define LT_WS_F32 ((size_t)32u << 20)     /* mxg_sgemm / mxg_gemm_bf16 */
#define LT_WS_BATCHED ((size_t)32u << 20) /* attention's batched GEMMs */

enum lt_kind { LT_TN = 1, LT_F32 = 2, LT_BATCHED = 3 };

/* What identifies a plan (compared bytewise: make it with lt_key_zero, then set what the kind uses). */
struct lt_key {
    int kind;
    int ta, tb, M, N, K, lda, ldb, ldc;
    int batch;
    int mode, at, bt, ct; /* LT_TN: scale mode, operand and output types */
    int flag;             /* LT_F32: BF16 operands; LT_BATCHED: TF32 */
    long long sa, sb, sc; /* LT_BATCHED: strides */
};

struct lt_plan {
    lt_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};

/* Makes p's descriptors and algorithm for p->key (p zeroed except key) with handle lt; on an error
 * it returns it (cleaning up what it made where it always did). */
typedef int (*lt_make_fn)(lt_plan* p, cublasLtHandle_t lt);

lt_key lt_key_zero(int kind);
/* The handle and the workspace (LT_WS_BYTES), created on first use. */
int lt_get(cublasLtHandle_t* lt, void** ws);
/* The cached plan for k, made by `make` on a miss (the oldest plan is evicted when the cache is full). */
int lt_plan_get(lt_plan** out, const lt_key* k, lt_make_fn make);
/* Destroy p's descriptors. */
void lt_plan_destroy(lt_plan* p);
/* The algorithm for p's descriptors: cuBLASLt's first heuristic result under the workspace limit
 * ws_limit, without split-K (one fixed order per output: deterministic), and where min_align > 0
 * valid for A, B, C, D pointers aligned to min_align bytes. Returns the first failing status (or
 * CUBLAS_STATUS_NOT_SUPPORTED when there is no result); p->algo is set on success. */
cublasStatus_t lt_algo_fixed_order(lt_plan* p, cublasLtHandle_t lt, size_t ws_limit, uint32_t min_align);
/* D = C = 1 * op(A) op(B) + beta C with plan p, in cuBLASLt's operand order (its A is our B, its B
 * our A: row-major C^T = op(B)^T op(A)^T), the shared workspace with the kind's limit ws_limit. */
int lt_matmul(const lt_plan* p, float beta, const void* A, const void* B, void* C, size_t ws_limit, cudaStream_t st);
/* D = 1 * op(A) op(B) + Cin (Cin != D, the layout of D: a residual added in the epilogue, one FP32
 * rounding of acc + Cin as a separate add would round it). */
int lt_matmul_res(const lt_plan* p, const void* A, const void* B, const void* Cin, void* D, size_t ws_limit,
                  cudaStream_t st);
/* A device vector of 4096 floats, a placeholder scale pointer for the heuristic query (kept until shutdown). */
int lt_dummy_scale(float** out);
/* Free the plans, the placeholder, the workspace and the handle (made again on the next use). */
void lt_shutdown(void);

#endif
