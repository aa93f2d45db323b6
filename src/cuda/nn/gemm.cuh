/* gemm.cuh: the FP32-accumulating GEMM behind mxg_sgemm and mxg_gemm_bf16 (nn/gemm.cu), for
 * callers that pick the operand type at run time (the LM head, nn/xent.cu), and the linear layer's
 * GEMM entry (nn/linear.cu). */
#ifndef MXLM_CUDA_NN_GEMM_CUH
#define MXLM_CUDA_NN_GEMM_CUH
#include "mxlm/gpu.h"
/* Row-major C[M,N] (+)= op(A) op(B); ta: A stored [K,M]; tb: B stored [N,K]; bf16: A and B BF16
 * (else FP32); FP32 accumulation and output, no split-K, 16-byte aligned pointers. */
int mxg_gemm_f32acc(int ta, int tb, int M, int N, int K, const void* A, int lda, const void* B, int ldb, float* C,
                    int ldc, int accumulate, int bf16, void* stream);
/* The linear layer's GEMM: C[M,N] (+)= A'[M,K] B'[N,K]^T as mxg_gemm_tn_acc, where A' = A (stored
 * [M,K]) or, a_tr, A^T (A stored [K,M]), and B' likewise (b_tr: B stored [K,N]). Transposed
 * operands are BF16 only (mode MXG_SCALE_NONE: FP8 on Hopper is TN only). res (NULL: none): C =
 * res + A' B'^T, res FP32 [M,N] beside an FP32 C (accumulate 0): the residual add in the epilogue. */
int mxg_gemm_lin(mxg_scale_mode mode, const void* A, mxg_dtype a_type, int a_tr, const float* a_scale, const void* B,
                 mxg_dtype b_type, int b_tr, const float* b_scale, void* C, mxg_dtype c_type, int M, int N, int K,
                 int accumulate, const float* res, void* stream);
#endif
