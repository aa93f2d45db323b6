/* gemm.c: the CPU FP32 GEMM every recipe ends in.
 * C[M,N] (+)= A[M,K] B[N,K]^T. B is packed into panels of 8 columns
 * (Bp[panel][k][8]); each output is accumulated over k in order by one thread,
 * so the result does not depend on the number of threads. Returns 0 or
 * MX_ENOMEM. */
#include <stdlib.h>
#include <string.h>

#include "mxlm/linear.h"

typedef float v8 __attribute__((vector_size(32)));

/* C[M,N] (+)= A[M,K] . Bp: 4 rows x 8 columns per tile, k in order. Cloned for
 * AVX2: without FMA contraction (ISO C mode) both clones give the same bits. */
__attribute__((target_clones("avx2", "default")))
static void gemm_packed(const float* A, const float* Bp, float* C, int M, int N, int K, int accumulate) {
    int np = (N + 7) / 8;
    int mb = (M + 3) / 4;
#pragma omp parallel for schedule(static) collapse(2)
    for (int ib = 0; ib < mb; ib++)
        for (int p = 0; p < np; p++) {
            int i0 = ib * 4, rows = M - i0 < 4 ? M - i0 : 4;
            const v8* bp = (const v8*)(Bp + (size_t)p * K * 8);
            v8 acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};
            const float* a0 = A + (size_t)i0 * K;
            const float* a1 = rows > 1 ? a0 + K : a0;
            const float* a2 = rows > 2 ? a0 + 2 * (size_t)K : a0;
            const float* a3 = rows > 3 ? a0 + 3 * (size_t)K : a0;
            for (int k = 0; k < K; k++) {
                v8 b = bp[k];
                acc0 += a0[k] * b;
                acc1 += a1[k] * b;
                acc2 += a2[k] * b;
                acc3 += a3[k] * b;
            }
            v8 acc[4] = {acc0, acc1, acc2, acc3};
            int cols = N - p * 8 < 8 ? N - p * 8 : 8;
            for (int r = 0; r < rows; r++) {
                float* c = C + (size_t)(i0 + r) * N + p * 8;
                for (int j = 0; j < cols; j++) c[j] = accumulate ? c[j] + acc[r][j] : acc[r][j];
            }
        }
}

int mx_sgemm_tn(const float* A, const float* B, float* C, int M, int N, int K, int accumulate) {
    int np = (N + 7) / 8;
    float* Bp = aligned_alloc(32, ((size_t)np * K * 8 * sizeof(float) + 31) / 32 * 32);  // [np, K, 8]
    if (!Bp) return mx_fail(MX_ENOMEM, "sgemm: out of memory packing a %dx%d operand", N, K);
#pragma omp parallel for schedule(static)
    for (int p = 0; p < np; p++) {
        float* dst = Bp + (size_t)p * K * 8;
        for (int k = 0; k < K; k++)
            for (int j = 0; j < 8; j++) {
                int n = p * 8 + j;
                dst[(size_t)k * 8 + j] = n < N ? B[(size_t)n * K + k] : 0.0f;
            }
    }
    gemm_packed(A, Bp, C, M, N, K, accumulate);
    free(Bp);
    return MX_OK;
}
