/* gemm.cuh: the FP32-accumulating GEMM behind mxg_sgemm and mxg_gemm_bf16 (nn/gemm.cu), for
 * callers that pick the operand type at run time (the LM head, nn/xent.cu). */
#ifndef MXLM_CUDA_NN_GEMM_CUH
#define MXLM_CUDA_NN_GEMM_CUH
/* Row-major C[M,N] (+)= op(A) op(B); ta: A stored [K,M]; tb: B stored [N,K]; bf16: A and B BF16
 * (else FP32); FP32 accumulation and output, no split-K, 16-byte aligned pointers. */
int mxg_gemm_f32acc(int ta, int tb, int M, int N, int K, const void* A, int lda, const void* B, int ldb, float* C,
                    int ldc, int accumulate, int bf16, void* stream);
#endif
