/*
 * gpu_model.h: the GPU twins of the CPU model layers (model.h, one file per layer in src/nn/)
 * and of the optimizer (train.h, src/train/adamw.c). CUDA build only
 * (-DMXLM_CUDA); implemented in src/cuda/layers.cu. Issue 6, in progress.
 *
 * Conventions (as gpu.h): every tensor pointer is device memory; `stream` is
 * a cudaStream_t (NULL: the default stream); work is asynchronous; functions
 * return 0 (MX_OK) or a negative mx_err with a message (mx_last_error()),
 * never exit or print. Shapes and in-place / accumulate semantics are those
 * of the CPU function of the same name (model.h), except where stated.
 *
 * Precision: FP32 activations and FP32 (or FP64) statistics in this first
 * version; BF16 activations come later. layers.cu is compiled with
 * --fmad=false so that elementwise expressions round as the CPU's.
 *
 * Determinism: no floating-point atomics anywhere; every reduction has a
 * fixed order (fixed trees or sequential loops), so two runs give the same
 * bytes. Bit-identical to the CPU by construction (same operations in the
 * same order): embedding (both), RoPE (both), RMSNorm dw, AdamW, the
 * per-chunk partials of the sum of squares. The rest differs from the CPU
 * only in summation order and in expf/logf (CUDA's are within 2 ulp):
 * tests/gpu/test_layers.cu states the tolerances.
 */
#ifndef MXLM_GPU_MODEL_H
#define MXLM_GPU_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/model.h"
#include "mxlm/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- embedding ------------------------------------------------------------ */

/* out[n] = table[tokens[n]]. out [N, D], tokens [N] (in [0, V): not checked
 * on the device), table [V, D]. */
int mxg_embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D, void* stream);
/* Bytes of workspace for mxg_embedding_backward. */
size_t mxg_embedding_backward_workspace(int N, int V);
/* dtable[tokens[n]] += dout[n], added in increasing n per vocabulary row
 * (the CPU's order: bit-identical). Integer atomics only (counts); the
 * positions of each token are put in increasing order by rank, then one
 * block per (token, column tile) adds them sequentially. Cost grows with
 * the square of the largest count of one token (fine for text; a batch of
 * one repeated token is the slow case). ws: device, >= the size above. */
int mxg_embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D, int V, void* ws,
                           size_t ws_bytes, void* stream);

/* ---- RMSNorm (eps as configured, statistics in FP64 as the CPU) ---------- */

int mxg_rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int D, float eps,
                        void* stream);
/* Floats of workspace for mxg_rmsnorm_backward: ceil(N/64) * D. */
size_t mxg_rmsnorm_backward_workspace(int N, int D);
/* dx += ..., dw += ... (dw: partial sums over the CPU's 64-token chunks,
 * then added in chunk order: bit-identical to the CPU). ws [ceil(N/64), D]. */
int mxg_rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                         int N, int D, float* ws, void* stream);

/* ---- RoPE (HF rotate-half; tables from mx_rope_tables, copied to the device) */

int mxg_rope_forward(float* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd, void* stream);
int mxg_rope_backward(float* dx, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd, void* stream);

/* ---- causal GQA attention (flash-style: T x T scores never stored) ------- */

/* out [B*T, H*hd], lse [B, H, T] (log-sum-exp of each query's scaled
 * scores, kept for the backward), q [B*T, H*hd], k, v [B*T, KV*hd].
 * hd must be a multiple of 32 and <= 128. One block per (batch, head, tile
 * of 8 queries), a warp per query, keys in tiles of 32 through shared
 * memory, online softmax. */
int mxg_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                          int KV, int hd, void* stream);
/* dq, dk, dv OVERWRITTEN. Recomputes the probabilities from q, k and lse.
 * delta [B, H, T] is scratch (rowwise dout . out). dq: a warp per query;
 * dk, dv: a warp per key, looping over the query heads of its KV head and
 * the queries in a fixed order (no atomics). */
int mxg_attention_backward(float* dq, float* dk, float* dv, float* delta, const float* dout, const float* out,
                           const float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                           int KV, int hd, void* stream);

/* ---- SwiGLU, residual ----------------------------------------------------- */

int mxg_swiglu_forward(float* h, const float* gate, const float* up, size_t n, void* stream);
int mxg_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t n,
                        void* stream);
/* y = a + b (y may alias a or b). */
int mxg_add(float* y, const float* a, const float* b, size_t n, void* stream);

/* ---- cross-entropy and the LM head ---------------------------------------- */

/* Twins of mx_xent_forward / mx_xent_backward (one block per row): logits
 * [N, V] -> probabilities in place, losses [N]. */
int mxg_xent_forward(float* logits, float* losses, const int32_t* targets, int N, int V, void* stream);
int mxg_xent_backward(float* probs, const int32_t* targets, int N, int V, float scale, void* stream);
/* Both in one kernel: logits [N, V] -> dlogits = (softmax - onehot) * scale
 * in place, losses [N]. */
int mxg_xent_fused(float* logits, float* losses, const int32_t* targets, int N, int V, float scale, void* stream);
/* Mean of x [n] summed in FP64 in a fixed order (one block), to *out
 * (device float). */
int mxg_mean(const float* x, int n, float* out, void* stream);

/* Row-major FP32 GEMM through cuBLASLt (FP32 compute, no TF32, no split-K
 * reduction schemes: deterministic): C[M,N] = op(A)[M,K] op(B)[K,N]
 * (+ C when accumulate). ta: A is stored [K, M]; tb: B is stored [N, K].
 * lda/ldb/ldc: row strides in elements. A, B, C 16-byte aligned. */
int mxg_sgemm(int ta, int tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C,
              int ldc, int accumulate, void* stream);

/* The LM head and the loss over row chunks of Nc tokens, so that only a
 * [Nc, V] block of logits exists at a time:
 *   logits = xnf[chunk] head^T; losses; dlogits = (softmax - onehot) * scale;
 *   dxnf[chunk] = dlogits head (overwritten); dhead += dlogits^T xnf[chunk].
 * xnf [N, D], head [V, D], targets [N], losses [N], dxnf [N, D] (NULL: loss
 * only, dhead untouched), dhead [V, D], chunk [Nc, V] scratch. Nc * D must
 * be a multiple of 4 (16-byte aligned chunk rows for the GEMMs). */
int mxg_lm_head_xent(const float* xnf, const float* head, const int32_t* targets, int N, int D, int V, float scale,
                     float* losses, float* dxnf, float* dhead, float* chunk, int Nc, void* stream);

/* ---- optimizer ------------------------------------------------------------- */

/* Doubles of workspace for mxg_sum_squares: ceil(n / 4096). */
size_t mxg_sum_squares_workspace(size_t n);
/* *out (device double) = sum g^2: per-4096 chunk sums in FP64 exactly as
 * mx_sum_squares (bit-identical partials), then one block adds the partials
 * in a fixed tree (deterministic; may differ from the CPU's sequential sum
 * in the last bits). ws [ceil(n/4096)] doubles. */
int mxg_sum_squares(const float* g, size_t n, double* out, double* ws, void* stream);
/* mx_adamw_update on device arrays laid out as `info` (mx_param_layout):
 * params, grads, m, v [n_params]. Bit-identical to the CPU. */
int mxg_adamw_update(const mx_param_info info[MX_P_COUNT], float* params, const float* grads, float* m, float* v,
                     const mx_adamw_config* c, double lr, float gscale, int64_t t, void* stream);

/* Release the FP32 GEMM handle and plans (optional at exit). */
void mxg_layers_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif
