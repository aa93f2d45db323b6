/*
 * linear.h: the quantized linear layer on the CPU, Y = X W^T, with a recipe
 * per GEMM (recipe.h). For each GEMM both operands are rotated (if the recipe
 * says so) along that GEMM's reduction dimension, quantized along it, and
 * multiplied in FP32 (the product of dequantized values, accumulated in FP32 -
 * the exact emulation of an MX GEMM). Shapes:
 *   X  [M, K]  (M = tokens)   W [N, K]   Y [M, N]
 * Requirements: for MXFP4 GEMMs the reduction dim and both operand row counts
 * are multiples of 32 (32x32 weights) or the reduction dim is (1x32); a
 * Hadamard size must divide the reduction dim. Violations are errors.
 */
#ifndef MXLM_LINEAR_H
#define MXLM_LINEAR_H
#include <stdint.h>
#include "mxlm/recipe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Telemetry of one GEMM operand, accumulated over calls until reset. */
typedef struct {
    double sig2, err2;            /* sum x^2 and sum (x - Q(x))^2 over the rotated operand */
    int64_t blocks, clipped;      /* MXFP4 blocks, and those with an element beyond +-6 */
    int64_t nonfinite;            /* NaN/Inf elements seen in the operand */
} mx_operand_stats;

typedef struct {
    mx_operand_stats op[3][2];    /* [gemm][operand a, b] */
    /* [gemm]: the product against the product of the unquantized operands, per call (linear.c):
     * sig2 += sum C^2 and err2 += sum (Cq - C)^2, C = A B^T in FP32 and Cq = Q(rot A) Q(rot B)^T, over the
     * finite C; blocks and clipped unused. Its SQNR is 20 log10 of the ratio of the product's norm to the
     * norm of the error this GEMM's own quantization adds to it (its inputs taken as given): for Wgrad the
     * gradient-to-noise ratio of Chmiel et al. 2025 ("FP4 All the Way"), whose criterion is sqrt(3)
     * (4.77 dB). FP32 GEMMs record nothing. */
    mx_operand_stats out[3];
    /* FP8 delayed scaling: amax history (length 4) per [gemm][operand]. */
    float amax_hist[3][2][4];
    int amax_n[3][2];
} mx_linear_state;

typedef struct {
    const mx_recipe* recipe;
    uint64_t seed;        /* run seed: SR bits and rhN signs */
    uint32_t layer_id;    /* distinct per linear layer of the model */
    uint64_t step;        /* training step (SR bits change each step; rhN too with rh=step) */
    mx_linear_state* state; /* optional: telemetry and FP8 delayed-scaling history (NULL: none) */
    int telemetry;        /* 1: accumulate SQNR / clipping stats into state (operands and products) */
} mx_linear_ctx;

/* Y[M,N] = X[M,K] W[N,K]^T (overwrites Y). */
int mx_linear_forward(const mx_linear_ctx* c, const float* X, const float* W, float* Y, int M, int K, int N);
/* dX[M,K] += dY[M,N] W[N,K]   (skipped when dX is NULL)
 * dW[N,K] += dY[M,N]^T X[M,K] (skipped when dW is NULL) */
int mx_linear_backward(const mx_linear_ctx* c, const float* X, const float* W, const float* dY, float* dX, float* dW,
                       int M, int K, int N);

/* One GEMM as the recipe says: C[Ma,Nb] (+)= Q(rot(A))[Ma,R] Q(rot(B))[Nb,R]^T.
 * A is the activation/gradient operand, B the other (the weight for Fprop and
 * Dgrad). `accumulate`: add into C instead of overwriting. Both operands are
 * row-major with the reduction dim R contiguous. */
int mx_gemm_recipe_tn(const mx_linear_ctx* c, mx_gemm_id g, const float* A, const float* B, float* C, int Ma, int Nb,
                      int R, int accumulate);

/* Plain FP32 C[M,N] (+)= A[M,K] B[N,K]^T, OpenMP-parallel, deterministic
 * (each output's sum runs over k in order, whatever the thread count). */
int mx_sgemm_tn(const float* A, const float* B, float* C, int M, int N, int K, int accumulate);

/* SQNR in dB of an operand's stats (inf when exact). */
double mx_stats_sqnr_db(const mx_operand_stats* s);

#ifdef __cplusplus
}
#endif
#endif
