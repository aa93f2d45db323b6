// cuda_emu.h: a host emulation of the CUDA subset used by the GPU layers (src/cuda/nn/*.cu,
// src/cuda/train/adamw.cu) and their tests (tests/gpu/test_<layer>.cu) (scratch tool: checks kernel logic without a GPU).
// Blocks run one after another; a block's threads are OS threads with a barrier for
// __syncthreads and a per-warp barrier for shuffles. Kernels without barriers run
// their threads sequentially.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <barrier>
#include <string>
#include <thread>
#include <vector>
#include <mutex>
#include "mxlm/mx.h"
#include "mxlm/gpu.h"
using std::max;
using std::min;

typedef int cudaError_t;
enum { cudaSuccess = 0 };
typedef void* cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
inline const char* cudaGetErrorString(cudaError_t) { return "emu error"; }
inline cudaError_t cudaMalloc(void** p, size_t n) { *p = malloc(n); return *p ? 0 : 1; }
template <class T> inline cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc((void**)p, n); }
inline cudaError_t cudaFree(void* p) { free(p); return 0; }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { memcpy(d, s, n); return 0; }
inline cudaError_t cudaMemset(void* d, int v, size_t n) { memset(d, v, n); return 0; }
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t) { memset(d, v, n); return 0; }
inline cudaError_t cudaDeviceSynchronize(void) { return 0; }
inline cudaError_t cudaGetLastError(void) { return 0; }

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<>* g_bbar = nullptr;
inline std::vector<std::barrier<>*> g_wbar;
inline double g_shfl[32][32];

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
inline void __syncthreads() { g_bbar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { g_wbar[threadIdx.x >> 5]->arrive_and_wait(); }
template <class T>
inline T emu_shfl(T v, int src) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_shfl[w][l] = (double)v;
    g_wbar[w]->arrive_and_wait();
    T r = (T)g_shfl[w][src & 31];
    g_wbar[w]->arrive_and_wait();
    return r;
}
template <class T> inline T __shfl_sync(unsigned, T v, int src) { return emu_shfl(v, src); }
template <class T> inline T __ldg(const T* p) { return *p; }
inline int __any_sync(unsigned, int v) {
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_shfl[w][l] = v ? 1.0 : 0.0;
    g_wbar[w]->arrive_and_wait();
    int r = 0;
    for (int i = 0; i < 32; i++) r |= g_shfl[w][i] != 0.0;
    g_wbar[w]->arrive_and_wait();
    return r;
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int o) { return emu_shfl(v, (int)(threadIdx.x & 31) ^ o); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
    unsigned o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (o < v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return o;
}
/* CUDA's vector types that the kernels load and store through (16-byte aligned as on the device) */
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }

inline bool emu_sync_free(const char* name) {
    static const char* k[] = {"k_embed_fwd", "k_embed_count", "k_embed_place", "k_embed_rank", "k_embed_accum",
                              "k_rmsnorm_bwd_dw_part", "k_rmsnorm_bwd_dw_sum", "k_rope", "k_swiglu_fwd",
                              "k_swiglu_bwd", "k_add", "k_xent_bwd", "k_adamw", "k_adamw_spans", "k_fp8_cast", "k_to_bf16"};
    for (auto s : k) if (!strcmp(s, name)) return true;
    return false;
}

template <class F, class... A>
void emu_launch(const char* name, F f, dim3 grid, dim3 block, A... args) {
    gridDim = grid;
    blockDim = block;
    const unsigned nt = block.x * block.y * block.z;
    const bool seq = emu_sync_free(name);
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                if (seq) {
                    blockIdx = dim3(bx, by, bz);
                    for (unsigned t = 0; t < nt; t++) { threadIdx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y)); f(args...); }
                    continue;
                }
                std::barrier<> bb((ptrdiff_t)nt);
                g_bbar = &bb;
                std::vector<std::barrier<>*> wb;
                for (unsigned w = 0; w < (nt + 31) / 32; w++) wb.push_back(new std::barrier<>(32));
                g_wbar = wb;
                std::vector<std::thread> th;
                for (unsigned t = 0; t < nt; t++)
                    th.emplace_back([&, t] {
                        blockIdx = dim3(bx, by, bz);
                        threadIdx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
                        f(args...);
                        g_wbar[t >> 5]->arrive_and_drop();
                        g_bbar->arrive_and_drop();
                    });
                for (auto& x : th) x.join();
                for (auto p : wb) delete p;
            }
}

// ---- cuBLASLt: just enough to run the column-major call that mxg_sgemm makes ----
typedef int cublasStatus_t;
enum { CUBLAS_STATUS_SUCCESS = 0 };
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef int cublasComputeType_t;
typedef int cudaDataType_t;
enum { CUBLAS_COMPUTE_32F = 68, CUDA_R_32F = 0 };
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSB
} cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
} cublasLtMatmulPreferenceAttributes_t;
enum { CUBLASLT_REDUCTION_SCHEME_NONE = 0 };
struct EmuDesc { int ta = 0, tb = 0; };
struct EmuLayout { uint64_t rows, cols; int64_t ld; };
typedef EmuDesc* cublasLtMatmulDesc_t;
typedef EmuLayout* cublasLtMatrixLayout_t;
typedef void* cublasLtHandle_t;
typedef void* cublasLtMatmulPreference_t;
struct cublasLtMatmulAlgo_t { int x; };
struct cublasLtMatmulHeuristicResult_t { cublasLtMatmulAlgo_t algo; };
inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = (void*)1; return 0; }
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return 0; }
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, int, int) { *d = new EmuDesc; return 0; }
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return 0; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* v, size_t) {
    int o = *(const int*)v;
    if (a == CUBLASLT_MATMUL_DESC_TRANSA) d->ta = o; else d->tb = o;
    return 0;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, int, uint64_t r, uint64_t c, int64_t ld) {
    if (ld < (int64_t)r) return 7;
    *l = new EmuLayout{r, c, ld};
    return 0;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) { *p = (void*)1; return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t) { return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void*, size_t) { return 0; }
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
    cublasLtMatmulHeuristicResult_t*, int* n) { *n = 1; return 0; }
// Column-major D[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, checking the shapes agree.
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
    cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta, const void* C,
    cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
    const float *a = (const float*)A, *b = (const float*)B;
    float* dd = (float*)D;
    (void)C; (void)ld;
    uint64_t m = d->ta ? la->cols : la->rows, k = d->ta ? la->rows : la->cols;
    uint64_t k2 = d->tb ? lb->cols : lb->rows, n = d->tb ? lb->rows : lb->cols;
    if (k != k2 || lc->rows != m || lc->cols != n) { fprintf(stderr, "emu gemm: shape mismatch\n"); return 7; }
    float al = *(const float*)alpha, be = *(const float*)beta;
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) {
            double s = 0;
            for (uint64_t p = 0; p < k; p++) {
                double av = d->ta ? a[p + i * la->ld] : a[i + p * la->ld];
                double bv = d->tb ? b[j + p * lb->ld] : b[p + j * lb->ld];
                s += av * bv;
            }
            float* o = &dd[i + j * lc->ld];
            *o = (float)(al * s + (be != 0 ? be * *o : 0.0));
        }
    return 0;
}
#include <chrono>
typedef std::chrono::steady_clock::time_point* cudaEvent_t;
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new std::chrono::steady_clock::time_point(); return 0; }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return 0; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) { *e = std::chrono::steady_clock::now(); return 0; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return 0; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = std::chrono::duration<float, std::milli>(*b - *a).count(); return 0; }
// ---- for linear.cu (its copies, the telemetry sums) ----
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) { memcpy(d, s, n); return 0; }
inline double atomicAdd(double* p, double v) { static std::mutex m; std::lock_guard<std::mutex> g(m); double o = *p; *p = o + v; return o; }
// ---- common.cuh's profiling marks: nothing here ----
#define PROF_B(c, s) do {} while (0)
#define PROF_E(c, s) do {} while (0)
enum { PROF_QUANT = 0, PROF_GEMM, PROF_ATTN, PROF_HEAD, PROF_ELEM, PROF_OPT, PROF_N };
inline int g_mxg_prof_gid = -1; /* MXLM_GPU_PROFILE's GEMM id (linear.cu sets it) */
