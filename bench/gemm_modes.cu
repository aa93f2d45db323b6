/*
 * gemm_modes.cu: which cuBLASLt FP8 scale-mode pairs exist on this GPU and how fast they run at the
 * trainer's linear shapes (issue 16: the MXFP4 fast path's GEMMs on VEC128 scales run ~1.5x slower
 * than on OUTER ones; a 128x128-block scale for one operand keeps the fold tile-local).
 *
 * Row-major C[M,N] (BF16) = A[M,K] B[N,K]^T with E4M3 operands, FP32 accumulation, FAST_ACCUM off,
 * called as mxg_gemm_tn does (cuBLASLt's A is our B, its B our A). Modes per operand: OUTER
 * (a float per row), VEC128 (a float per row and 128 of K: [K/128][rows]), BLK (a float per
 * 128 x 128 block: [K/128][rows/128]). Prints, per shape and pair, the median of 20 runs in us and
 * TFLOP/s, or "n/a" where cuBLASLt has no algorithm. Timing only: scales are 1, codes random.
 *
 * --algos: instead, for BF16 and FP8 (OUTER x OUTER, VEC128 x VEC128) at each shape, every algorithm cuBLASLt's
 * heuristic offers without split-K (the trainer's preference: lt_algo_fixed_order, up to 16) timed the same way:
 * the heuristic's first (what the trainer runs; the first that runs, where it does not) against the fastest, and
 * how many give the first's output bits (whether a faster one could be chosen without changing a product).
 *
 * Build: nvcc -O2 -gencode=arch=compute_90a,code=sm_90a bench/gemm_modes.cu -lcublasLt -o gemm_modes
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>
#include <algorithm>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } \
    } while (0)

enum { M_OUTER, M_VEC, M_BLK, M_N };
static const char* k_mode_name[M_N] = {"outer", "vec128", "blk128"};
static cublasLtMatmulMatrixScale_t lt_mode(int m) {
    return m == M_OUTER ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
           : m == M_VEC ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                        : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

/* the median of 20 timed runs (after 5) of one algorithm, in us; -1 where it fails */
static double time_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                        cublasLtMatrixLayout_t lc, const cublasLtMatmulAlgo_t* algo, void* A, void* B, void* C, void* ws,
                        size_t wsz) {
    float one = 1, zero = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> t;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < 25; i++) {
        cudaEventRecord(e0);
        st = cublasLtMatmul(lt, op, &one, B, la, A, lb, &zero, C, lc, C, lc, algo, ws, wsz, 0);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        if (st != CUBLAS_STATUS_SUCCESS) break;
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i >= 5) t.push_back(ms);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (st != CUBLAS_STATUS_SUCCESS || t.empty()) return -1;
    std::sort(t.begin(), t.end());
    return 1e3 * t[t.size() / 2];
}

/* The descriptors of C = A B^T (our A in mode ma, our B in mode mb; ma < 0: BF16 unscaled). */
static void make_desc(int M, int N, int K, int ma, int mb, float* sa, float* sb, cublasLtMatmulDesc_t* op_,
                      cublasLtMatrixLayout_t* la, cublasLtMatrixLayout_t* lb, cublasLtMatrixLayout_t* lc) {
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    const cudaDataType_t in = ma < 0 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
    if (ma >= 0) { /* ma < 0: the BF16 GEMM of the same shape, unscaled */
        int8_t fast = 0;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
        cublasLtMatmulMatrixScale_t lta = lt_mode(mb), ltb = lt_mode(ma); /* cuBLASLt's A = our B */
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &lta, sizeof lta);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &ltb, sizeof ltb);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa);
    }
    cublasLtMatrixLayoutCreate(la, in, K, N, K);
    cublasLtMatrixLayoutCreate(lb, in, K, M, K);
    cublasLtMatrixLayoutCreate(lc, CUDA_R_16BF, N, M, N);
    *op_ = op;
}

static void free_desc(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                      cublasLtMatrixLayout_t lc) {
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
}

/* The heuristic's first `want` algorithms for op within wsz bytes of workspace (split_k_free: those without a
 * split-K reduction alone) into res; returns how many (0: none, or the query failed). */
static int heuristic(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                     cublasLtMatrixLayout_t lc, size_t wsz, int split_k_free, int want,
                     cublasLtMatmulHeuristicResult_t* res) {
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz);
    uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE;
    if (split_k_free) cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red);
    int nres = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, want, res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    return st == CUBLAS_STATUS_SUCCESS ? nres : 0;
}

/* time C = A B^T with our A in mode ma and our B in mode mb; returns us or -1 (no algorithm) */
static double run(cublasLtHandle_t lt, int M, int N, int K, int ma, int mb, void* A, void* B, void* C,
                  float* sa, float* sb, void* ws, size_t wsz) {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    make_desc(M, N, K, ma, mb, sa, sb, &op, &la, &lb, &lc);
    cublasLtMatmulHeuristicResult_t res[1];
    const double us = heuristic(lt, op, la, lb, lc, wsz, 0, 1, res) > 0
                          ? time_algo(lt, op, la, lb, lc, &res[0].algo, A, B, C, ws, wsz) : -1;
    free_desc(op, la, lb, lc);
    return us;
}


/* --algos: one shape and mode pair (ma < 0: BF16), every split-K-free algorithm of the heuristic's (up to 16): one
 * line, the first's time, the fastest's and its rank, how many ran and how many gave the first's bytes of C */
static void algos(cublasLtHandle_t lt, const char* what, int M, int N, int K, int ma, int mb, void* A, void* B, void* C,
                  float* sa, float* sb, void* ws, size_t wsz) {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    make_desc(M, N, K, ma, mb, sa, sb, &op, &la, &lb, &lc);
    cublasLtMatmulHeuristicResult_t res[16];
    const int nres = heuristic(lt, op, la, lb, lc, wsz, 1, 16, res);
    const size_t cb = (size_t)M * N * 2;
    std::vector<unsigned char> first(cb), cur(cb);
    double t0 = -1, best = -1;
    int bi = -1, ran = 0, same = 0;
    for (int i = 0; i < nres; i++) {
        const double us = time_algo(lt, op, la, lb, lc, &res[i].algo, A, B, C, ws, wsz);
        if (us < 0) continue;
        /* the reference: the first that ran (the trainer's, unless it failed here) */
        CK(cudaMemcpy(ran == 0 ? first.data() : cur.data(), C, cb, cudaMemcpyDeviceToHost));
        same += ran == 0 || !memcmp(first.data(), cur.data(), cb);
        if (ran++ == 0) t0 = us;
        if (best < 0 || us < best) { best = us; bi = i; }
    }
    const double flop = 2.0 * M * N * K;
    const char* mode = ma < 0 ? "bf16" : ma == M_OUTER ? "fp8 out" : "fp8 vec";
    if (t0 < 0) printf("%-22s %-8s no algorithm\n", what, mode);
    else
        printf("%-22s %-8s first %7.0f us %4.0fT  fastest %7.0f us %4.0fT (#%d, %.3fx)  %2d ran, %2d with the first's bytes\n",
               what, mode, t0, flop / t0 * 1e-6, best, flop / best * 1e-6, bi, t0 / best, ran, same);
    fflush(stdout);
    free_desc(op, la, lb, lc);
}

int main(int argc, char** argv) {
    /* name M N K: the 1b (4 x 2048 tokens) and 350m (8 x 2048) linears, Fprop / Dgrad / Wgrad */
    struct S { const char* name; int M, N, K; };
    std::vector<S> sh = {
        {"1b fprop qkv", 8192, 3072, 2048},  {"1b fprop gate", 8192, 8192, 2048},
        {"1b fprop down", 8192, 2048, 8192}, {"1b dgrad down", 8192, 8192, 2048},
        {"1b dgrad gate", 8192, 2048, 8192}, {"1b wgrad gate", 8192, 2048, 8192},
        {"1b wgrad down", 2048, 8192, 8192}, {"350m fprop qkv", 16384, 2048, 1024},
        {"350m fprop gate", 16384, 3584, 1024}, {"350m fprop down", 16384, 1024, 3584},
        {"350m dgrad gate", 16384, 1024, 3584}, {"350m wgrad gate", 3584, 1024, 16384},
        {"350m wgrad down", 1024, 3584, 16384}, {"ffn 16384x14336x4096", 16384, 14336, 4096},
    };
    const bool algo_mode = argc > 1 && !strcmp(argv[1], "--algos");
    if (argc > 1 && !strcmp(argv[1], "--quick")) sh.resize(3);
    size_t maxe = 0, maxs = 0;
    for (auto& s : sh) {
        maxe = std::max(maxe, (size_t)std::max(s.M, s.N) * s.K);
        maxs = std::max(maxs, (size_t)std::max(s.M, s.N) * (s.K / 128 + 1));
    }
    void *A, *B, *C, *ws;
    float *sa, *sb;
    size_t wsz = 64u << 20;
    CK(cudaMalloc(&A, maxe * 2));
    CK(cudaMalloc(&B, maxe * 2));
    CK(cudaMemset(A, 0x3c, maxe * 2));
    CK(cudaMemset(B, 0x3c, maxe * 2));
    CK(cudaMalloc(&C, maxe * 2 * 4));
    CK(cudaMalloc(&ws, wsz));
    CK(cudaMalloc(&sa, maxs * 4));
    CK(cudaMalloc(&sb, maxs * 4));
    {
        std::vector<unsigned char> h(maxe);
        unsigned x = 12345;
        for (auto& b : h) { x = x * 1664525u + 1013904223u; b = (unsigned char)((x >> 24) & 0x77); } /* |v| < 448, no NaN */
        CK(cudaMemcpy(A, h.data(), maxe, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(B, h.data(), maxe, cudaMemcpyHostToDevice));
        std::vector<float> one(maxs, 1.0f);
        CK(cudaMemcpy(sa, one.data(), maxs * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(sb, one.data(), maxs * 4, cudaMemcpyHostToDevice));
    }
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    if (algo_mode) {
        for (auto& s : sh) {
            algos(lt, s.name, s.M, s.N, s.K, -1, -1, A, B, C, sa, sb, ws, wsz);
            algos(lt, s.name, s.M, s.N, s.K, M_OUTER, M_OUTER, A, B, C, sa, sb, ws, wsz);
            algos(lt, s.name, s.M, s.N, s.K, M_VEC, M_VEC, A, B, C, sa, sb, ws, wsz);
        }
        return 0;
    }
    printf("%-22s %12s", "shape (A x B modes)", "bf16");
    for (int ma = 0; ma < M_N; ma++)
        for (int mb = 0; mb < M_N; mb++) printf(" %14s", (std::string(k_mode_name[ma]).substr(0, 3) + "x" + k_mode_name[mb]).c_str());
    printf("\n");
    for (auto& s : sh) {
        printf("%-22s", s.name);
        double flop = 2.0 * s.M * s.N * s.K;
        double ub = run(lt, s.M, s.N, s.K, -1, -1, A, B, C, sa, sb, ws, wsz);
        printf(" %6.0f %4.0fT", ub, flop / ub * 1e-6);
        for (int ma = 0; ma < M_N; ma++)
            for (int mb = 0; mb < M_N; mb++) {
                double us = run(lt, s.M, s.N, s.K, ma, mb, A, B, C, sa, sb, ws, wsz);
                if (us < 0) printf(" %14s", "n/a");
                else printf(" %7.0f %4.0fT", us, flop / us * 1e-6);
            }
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
