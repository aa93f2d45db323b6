/*
 * gpu_model.h: the GPU twins of the CPU model layers (model.h, one file per layer in src/nn/)
 * and of the optimizer (adamw.h, src/train/adamw.c), the quantized linear layer (linear.h) and
 * the whole model (mx_llama) that the trainer runs with --device cuda. CUDA build only
 * (-DMXLM_CUDA); implemented in the files of src/cuda/nn/ and src/cuda/train/ (each the
 * twin of the src/nn/ or src/train/ file of the same name).
 *
 * Conventions (as gpu.h): every tensor pointer is device memory; `stream` is
 * a cudaStream_t (NULL: the default stream); work is asynchronous; functions
 * return 0 (MX_OK) or a negative mx_err with a message (mx_last_error()),
 * never exit or print. Shapes and in-place / accumulate semantics are those
 * of the CPU function of the same name (model.h), except where stated.
 *
 * Precision: FP32 activations and FP32 (or FP64) statistics (BF16
 * activations are not done). The layer files are compiled with
 * --fmad=false so that elementwise expressions round as the CPU's.
 *
 * Determinism: no floating-point atomics (except the telemetry sums, which
 * feed nothing back into the training); every reduction has a fixed order
 * (fixed trees or sequential loops), so two runs give the same bytes.
 * Bit-identical to the CPU by construction (same operations in the
 * same order): embedding (both), RoPE (both), RMSNorm dw, AdamW, the
 * per-chunk partials of the sum of squares. The rest differs from the CPU
 * only in summation order and in expf/logf (CUDA's are within 2 ulp):
 * tests/gpu/test_<layer>.cu state the tolerances.
 */
#ifndef MXLM_GPU_MODEL_H
#define MXLM_GPU_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/decode.h"
#include "mxlm/gpu.h"
#include "mxlm/adamw.h"
#include "mxlm/model.h"

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
/* The same with out rounded to BF16 (RNE): out[i] == mx_bf16_from_f32(what mxg_rmsnorm_forward
 * writes), bit for bit (the GPU model's storage of a norm output that only BF16 GEMMs read). */
int mxg_rmsnorm_forward_bf16(uint16_t* out, float* rstd, const float* x, const float* w, int N, int D, float eps,
                             void* stream);
/* The _amax forms: the same outputs, and their amax as stored (as mxg_fp8_quantize would compute it of out: an FP8
 * cast of the norm output takes it, mxg_fp8_quantize_amax) into *amax, a device float. */
int mxg_rmsnorm_forward_amax(float* out, float* rstd, const float* x, const float* w, int N, int D, float eps,
                             float* amax, void* stream);
int mxg_rmsnorm_forward_bf16_amax(uint16_t* out, float* rstd, const float* x, const float* w, int N, int D, float eps,
                                  float* amax, void* stream);
/* Floats of workspace for mxg_rmsnorm_backward: ceil(N/64) * D. */
size_t mxg_rmsnorm_backward_workspace(int N, int D);
/* dx += ..., dw += ... (dw: partial sums over the CPU's 64-token chunks,
 * then added in chunk order: bit-identical to the CPU). ws [ceil(N/64), D]. */
int mxg_rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                         int N, int D, float* ws, void* stream);
/* The same, and the amax of dx as it leaves (as mxg_fp8_quantize would compute it of dx: the FP8 Dgrad that casts
 * the residual gradient takes it, mxg_linear_ctx.dy_amax) into *amax, a device float. */
int mxg_rmsnorm_backward_amax(float* dx, float* dw, const float* dout, const float* x, const float* w,
                              const float* rstd, int N, int D, float* ws, float* amax, void* stream);
/* The backward's kernels (tests, benchmark): 0 the two-pass kernels (the default: faster on the H200),
 * 1 one pass over the inputs where D % 4 == 0 and D <= 4096; the same dw bits either way. Not
 * thread-safe. */
int mxg_rmsnorm_config(int fused);

/* ---- RoPE (HF rotate-half; tables from mx_rope_tables, copied to the device) */

int mxg_rope_forward(float* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd, void* stream);
int mxg_rope_backward(float* dx, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd, void* stream);
/* BF16 tensors in place: bit for bit the FP32 forms on the widened values, rounded (RNE). */
int mxg_rope_forward_bf16(uint16_t* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd,
                          void* stream);
int mxg_rope_backward_bf16(uint16_t* dx, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd,
                           void* stream);
/* The same, and the amax of dx as stored (as mxg_fp8_quantize would compute it: the FP8 Dgrad that casts dq or dk
 * takes it, mxg_linear_ctx.dy_amax) into *amax, a device float. */
int mxg_rope_backward_bf16_amax(uint16_t* dx, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd,
                                float* amax, void* stream);

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

/* The same through cuBLASLt strided-batched GEMMs (src/cuda/nn/attention_gemm.cu): per
 * sequence the [H, T, T] scores exist in ws (mxg_attention_gemm_workspace
 * floats: 2 H T T); tf32: the four products on TF32 tensor cores (operands
 * rounded to a 10-bit mantissa), else FP32. Same outputs and lse as the
 * kernels above up to the summation order (FP32); deterministic. */
size_t mxg_attention_gemm_workspace(int T, int H);
int mxg_attention_forward_gemm(float* out, float* lse, const float* q, const float* k, const float* v, int B, int T,
                               int H, int KV, int hd, float* ws, int tf32, void* stream);
int mxg_attention_backward_gemm(float* dq, float* dk, float* dv, float* delta, const float* dout, const float* out,
                                const float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                                int KV, int hd, float* ws, int tf32, void* stream);
void mxg_attention_gemm_shutdown(void);

/* ---- causal GQA flash attention on BF16 tensor cores (src/cuda/nn/attention_flash.cu) ---- */

/* The same attention with BF16 operands on the tensor cores (wgmma by default, mma.sync m16n8k16
 * as the alternative), FP32 accumulation and softmax statistics; the T x T scores are never
 * stored. hd 64 or 128, any T >= 1, any H / KV ratio. lse [B, H, T]: as mxg_attention_forward's
 * (natural log of the sum of exp of the scaled scores), FP32. Deterministic (no atomics, fixed
 * orders); against the FP32 attention on the same BF16-rounded inputs 1.3e-3..3.6e-3 normwise
 * (measured; tolerance 1e-2: the file's first comment).
 * BF16 entry points: q [B*T, H*hd], k, v [B*T, KV*hd], out [B*T, H*hd], all bf16 bits. */
int mxg_attention_forward_flash_bf16(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                                     const uint16_t* v, int B, int T, int H, int KV, int hd, void* stream);
/* dq [B*T, H*hd], dk, dv [B*T, KV*hd] bf16, OVERWRITTEN; delta [B, H, T] FP32 scratch
 * (rowwise dout . out); lse from the forward. */
int mxg_attention_backward_flash_bf16(uint16_t* dq, uint16_t* dk, uint16_t* dv, float* delta, const uint16_t* dout,
                                      const uint16_t* out, const float* lse, const uint16_t* q, const uint16_t* k,
                                      const uint16_t* v, int B, int T, int H, int KV, int hd, void* stream);
/* FP32 interfaces, the signatures of mxg_attention_forward / _backward: q, k, v (and dout) are
 * rounded to BF16 in one pre-pass into an internal scratch buffer (mxg_attention_flash_workspace
 * bytes, grown on demand, kept until mxg_attention_flash_shutdown; calls must be ordered on one
 * stream); out, dq, dk, dv FP32 (dq, dk, dv OVERWRITTEN); delta from the FP32 out and dout. */
int mxg_attention_forward_flash(float* out, float* lse, const float* q, const float* k, const float* v, int B, int T,
                                int H, int KV, int hd, void* stream);
int mxg_attention_backward_flash(float* dq, float* dk, float* dv, float* delta, const float* dout, const float* out,
                                 const float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                                 int KV, int hd, void* stream);
size_t mxg_attention_flash_workspace(int B, int T, int H, int KV, int hd);
void mxg_attention_flash_shutdown(void);
/* Tuning (the benchmark and the tests): per kernel (forward, dq, dk/dv) a count and a size; 0 keeps
 * the default (measured on the H200: hd 64 the wgmma forward and the warp-specialized dq and dk/dv,
 * 1x2 / 3x4 / 3x2; hd 128 the warp-specialized kernels, 3x2 / 3x3 / 3x2). Count 1 or 2: the wgmma kernel with that
 * many warpgroups (64 rows each); size 1 or 2: the streamed tile, 64 or 128 keys (forward, dq) or 32
 * or 64 queries (dk/dv); size 3 or 4: the same tiles, the forward pipelined (S_j issued with
 * P_{j-1} V_{j-1}), dq / dk,dv with their fixed operands as register A fragments. Count 3 (forward,
 * dq, dk/dv): the warp-specialized kernel (a TMA producer warpgroup, two consumer warpgroups; size 1 or
 * 2 as for count 1 or 2, but dq: 64-key tiles, 2 pipelined: S, dP of the next tile issued behind
 * the dQ product, 3 and 4 the same with Q, dO as register A fragments; the same sums as the wgmma
 * dq kernel over 64 keys). Count 5 (dk/dv): the backward in one pass (dq's setting unused; dQ summed
 * in a fixed order through turn counters, its FP32 partial sums in a second internal buffer of
 * B*T*H*hd floats kept until mxg_attention_flash_shutdown, also for the BF16 entry point). Count 4
 * or 8: the mma.sync kernel with that many warps; size 1 or 2: m-tiles of 16 rows per warp (2 taken
 * for hd 64 only). Results differ in rounding between configurations (the tile sizes change the
 * online softmax's grouping), never between runs. Not thread-safe. */
int mxg_attention_flash_config(int fwd_warps, int fwd_mt, int dq_warps, int dq_mt, int dkv_warps, int dkv_mt);

/* ---- SwiGLU, residual ----------------------------------------------------- */

int mxg_swiglu_forward(float* h, const float* gate, const float* up, size_t n, void* stream);
/* BF16 gate, up in, h out: bit for bit mxg_swiglu_forward on the widened inputs, h rounded (RNE). */
int mxg_swiglu_forward_bf16(uint16_t* h, const uint16_t* gate, const uint16_t* up, size_t n, void* stream);
int mxg_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t n,
                        void* stream);
/* BF16 dh, gate, up in, dgate, dup out: bit for bit mxg_swiglu_backward on the widened inputs, rounded (RNE). */
int mxg_swiglu_backward_bf16(uint16_t* dgate, uint16_t* dup, const uint16_t* dh, const uint16_t* gate,
                             const uint16_t* up, size_t n, void* stream);
/* The _amax forms: the same outputs, and the amax of the BF16 outputs (as mxg_fp8_quantize would compute it: an
 * FP8 cast of them takes it, mxg_fp8_quantize_amax) into amax[0] (h; dgate) and amax[1] (dup), device floats.
 * The tensors must allow 16-byte vectors (n % 8 == 0, aligned), else MX_EINVAL. */
int mxg_swiglu_forward_bf16_amax(uint16_t* h, const uint16_t* gate, const uint16_t* up, size_t n, float* amax,
                                 void* stream);
int mxg_swiglu_backward_bf16_amax(uint16_t* dgate, uint16_t* dup, const uint16_t* dh, const uint16_t* gate,
                                  const uint16_t* up, size_t n, float* amax, void* stream);
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
/* The same, dlogits rounded to BF16 (RNE) into dlogits16 [N, V]; logits are left unchanged:
 * dlogits16[i] == mx_bf16_from_f32(what mxg_xent_fused writes), bit for bit. dlogits16 == (uint16_t*)logits
 * writes them over the logits instead (row r's V BF16 values in the first half of row r's FP32 bytes, so a
 * leading dimension of 2V; the same bytes), no second buffer. */
int mxg_xent_fused_bf16(const float* logits, uint16_t* dlogits16, float* losses, const int32_t* targets, int N, int V,
                        float scale, void* stream);
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

/* The same GEMM with BF16 A and B (FP32 accumulation and C). */
int mxg_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                  float* C, int ldc, int accumulate, void* stream);
/* mxg_lm_head_xent on BF16 operands (tensor cores): xnf [N, D] and head
 * [V, D] in BF16, the dlogits chunk rounded to BF16 over the FP32 logits chunk
 * itself (mxg_xent_fused_bf16 in place) for the two backward GEMMs; logits,
 * softmax, losses, dxnf and dhead in FP32. */
int mxg_lm_head_xent_bf16(const uint16_t* xnf, const uint16_t* head, const int32_t* targets, int N, int D, int V,
                          float scale, float* losses, float* dxnf, float* dhead, float* chunk, int Nc, void* stream);

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
/* The same, and for each tensor kind k with copy[k] non-NULL its updated weights rounded to BF16 (RNE)
 * into copy[k] ([numel]): the bytes mxg_to_bf16 makes of them (copy NULL: none). */
int mxg_adamw_update_bf16(const mx_param_info info[MX_P_COUNT], float* params, const float* grads, float* m, float* v,
                          const mx_adamw_config* c, double lr, float gscale, int64_t t, uint16_t* const copy[MX_P_COUNT],
                          void* stream);

/* The optimizer over spans that need not be one array (the model's gradients shared with its activations:
 * mxg_llama_create_dist's share_grads): span i updates p[0..n) from g with its moments m, v, and p16 (NULL:
 * none) the updated weights in BF16; decay 1 for the tensors that take weight decay (matrices). */
typedef struct mxg_span {
    float* p;
    const float* g;
    float* m;
    float* v;
    uint16_t* p16;
    size_t n;
    int decay;
    unsigned* amax; /* NULL, or raised (atomicMax) to the largest |p| bits of the updated span (mx_f2u(p) &
                       0x7fffffff: k_amax's, NaN above Inf); the caller zeroes it before the update */
} mxg_span;
typedef struct mxg_span_table mxg_span_table; /* the spans on the device, with their block and chunk starts */
int mxg_span_table_create(mxg_span_table** out, const mxg_span* spans, int n);
void mxg_span_table_free(mxg_span_table* t);
/* Doubles of workspace mxg_sum_squares_spans takes: the spans' chunks of 4096 (at most ceil(total / 4096)
 * plus one per span). */
size_t mxg_span_table_chunks(const mxg_span_table* t);
/* *out (device double) = sum over the spans of g^2: each span in chunks of 4096 from its start, in FP64
 * as mxg_sum_squares's (a span's chunks bit-identical to mx_sum_squares of that span), then the chunks'
 * partials in order in mxg_sum_squares's fixed tree. One array given as one span: mxg_sum_squares's bits. */
int mxg_sum_squares_spans(const mxg_span_table* t, double* out, double* ws, void* stream);
/* mxg_adamw_update over the spans in one launch: element for element the same arithmetic (the same bits). */
int mxg_adamw_spans(const mxg_span_table* t, const mx_adamw_config* c, double lr, float gscale, int64_t step,
                    void* stream);

/* Release the FP32 GEMM handle and plans (optional at exit). */
void mxg_layers_shutdown(void);

/* ---- the quantized linear layer (src/cuda/nn/linear.cu): the twin of linear.h ---- */

/* Scratch of the linear layers (transposed operands, codes, scales), sized
 * for operands of up to max_elems elements; one per model. bf16_only: only the
 * BF16 operand buffers (a model whose every GEMM takes BF16 operands, as
 * mx_act16_applies); a GEMM of another format is then refused. */
typedef struct mxg_linws mxg_linws;
int mxg_linws_create(mxg_linws** ws, size_t max_elems, int bf16_only);
void mxg_linws_free(mxg_linws* ws);
size_t mxg_linws_bytes(size_t max_elems, int bf16_only);
/* Test hook: the packed MXFP4 operand (0: a, 1: b) of the last exact-path
 * MXFP4 GEMM (device pointers into the workspace; mx.h layout 1x32 or 32x32
 * of the TN operand [rows, R]). */
int mxg_linws_last_fp4(const mxg_linws* ws, int operand, mxg_fp4* t);
/* Blocks with a clipped element, and blocks outside the E4M3 fold window,
 * counted since the workspace was made (synchronous). */
int mxg_linws_counters(const mxg_linws* ws, unsigned long long out[2]);
/* MXLM_GPU_OOW_PROBE=1 (linear.cu; issue 16's measurement for an OUTER-folded fast path): whether it is on,
 * and per GEMM and operand the fast-path MXFP4 blocks quantized since the start and those an OUTER fold (one
 * scale per stored row) would hold outside its window, written to buf (0: probe off or nothing counted) */
int mxg_linear_oow_probe(void);
int mxg_linear_oow_report(char* buf, size_t n);
/* The device counters themselves (mxg_qout.counters), for a quantizer outside the linear that makes its
 * operands (mxg_dyq). */
unsigned long long* mxg_linws_device_counters(mxg_linws* ws);

typedef struct {
    const mx_recipe* recipe;
    uint64_t seed, step;  /* as mx_linear_ctx: the same SR bits and rhN signs */
    uint32_t layer_id;
    int exact;            /* MXFP4: 1 exact emulation (dequantize to BF16), 0 fast (E4M3 fold + FP8 GEMM) */
    mxg_linws* ws;
    mxg_opstats* tele;    /* device [3][2] ([gemm][operand a, b]): telemetry of this linear's quantized
                             operands added to it, as mx_linear_ctx.telemetry into state->op (NULL: off) */
    const uint16_t* x16;  /* NULL, or X (the layer input) rounded to BF16 as stored, made once by the caller for
                             the linears that read the same X: Fprop's operand a and Wgrad's b use it where
                             their format is BF16 instead of converting X again (the same values) */
    const uint16_t* dy16; /* NULL, or dY rounded to BF16 as stored (the backward): Dgrad's and Wgrad's operand a
                             where their format is BF16 */
    const uint16_t* w16;  /* NULL, or W rounded to BF16 as stored (made once per weight update by the caller):
                             Fprop's and Dgrad's operand b where their format is BF16 */
    uint16_t* out16;      /* NULL, or where the product goes in BF16 (the RNE of the FP32 result) instead of its
                             FP32 buffer: Y in the forward, dX in the backward (dx_acc 0); BF16 GEMMs only */
    const float* res;     /* NULL, or the forward's Y = res + X W^T in the GEMM's epilogue (res FP32 [M, N], not
                             Y): the same single rounding as the product followed by an add */
    int dw_first;         /* 1: dW = its product (the caller's gradient buffer was not zeroed), 0: dW += */
    int x_same;           /* Sharing X's fast-path MXFP4 operands (and FP8 codes) between the linears that read the same X
                             (q/k/v, gate/up); the model's default. 0: off (each linear quantizes X itself); 1: on, X is new
                             (quantize it and keep Fprop's operand a and Wgrad's operand b); 2: on, X is the
                             tensor the previous linear of this workspace read, unchanged: those operands are
                             reused where they are the same bytes (RNE, no random rotation, no telemetry, the
                             same shape and spec) */
    mxg_opstats* gout;    /* device [3] ([gemm]): telemetry of this linear's products added to it, as
                             mx_linear_state.out (linear.h): sig2 += sum C^2, err2 += sum (Cq - C)^2 with C the
                             FP32 product of the unquantized operands as stored and Cq the recipe's product,
                             made again into a buffer of its own (the GEMM's own output is untouched); FP32
                             GEMMs record nothing; NULL: off. Near the end of the struct, so that initializers
                             that stop before it leave it off */
    const struct mxg_dyq* dyq; /* NULL, or dY's fast-path MXFP4 operands made already (the backward): Dgrad's and
                             Wgrad's operand a are taken from it instead of quantizing dY */
    int outer_scales;     /* MXG_OUTER_* bits: the FP8 GEMMs of the fp8 recipe (MXG_OUTER_FP8) and of the MXFP4
                             fast path (MXG_OUTER_MXFP4) take one float scale per stored row (MXG_SCALE_OUTER: the
                             kernels cuBLASLt runs fastest on Hopper, accumulating as precisely as its VEC128 ones);
                             fp8: the per-tensor multiplier broadcast to every row (the same products); MXFP4: the
                             VEC128 operands re-expressed (mxg_fold_outer_from_vec128) and the blocks that rounded
                             fixed up after the GEMM (mxg_fold_outer_fixup: as exact as VEC128). Without a bit:
                             VEC128 scales. MXG_OUTER_MXFP4_FPROP (without MXG_OUTER_MXFP4): the MXFP4 fast
                             path's Fprop alone on OUTER scales, both operands folded so by the quantizer in one pass
                             (e_ref the row's largest block exponent; a block more than 14 binades below it rounds
                             in E4M3 and is counted, as VEC128's do: no fix-up), Dgrad and Wgrad on VEC128.
                             MXG_OUTER_MXFP4_ROUND (without MXG_OUTER_MXFP4): the fast path's other GEMMs on OUTER
                             scales too, their VEC128 operands re-expressed and a block that rounds counted, no
                             fix-up (the Fprop policy; BF16 outputs allowed). The model's: MXG_OUTER_FP8 |
                             MXG_OUTER_MXFP4_FPROP unless MXLM_GPU_OUTER says otherwise (gpu.md: =1 both with the
                             fix-up, =round Fprop one-pass and the rest re-expressed, =fp8 MXFP4 all on VEC128,
                             =0 neither) */
    const struct mxg_wq* wq; /* NULL, or W's Fprop and Dgrad operands made once after the last update
                             (mxg_linear_weight_operands): operand b of those GEMMs is taken from it where its
                             spec, fold and W are this call's (and there is no telemetry), instead of quantizing W */
    float* x8s;           /* NULL, or device float[8] of the caller's for this linear's X (one per layer and input: q/k/v
                             share one): an FP8 Fprop's cast of X writes X's amax, scale and 1/scale there, and the
                             backward's FP8 Wgrad, where Fprop was FP8 too, casts X^T from that amax without computing
                             it again (mxg_fp8_quantize_t_amax: the same bytes, one pass over X fewer). The caller
                             keeps X unchanged from the forward to the backward (as Wgrad needs it anyway) */
    const float* x_amax;  /* NULL, or the amax (device, as mxg_fp8_quantize writes one) of the tensor an FP8 Fprop
                             quantizes as operand a (X, or x16 where X is absent), made by X's producer: the cast alone */
    const float* dy_amax; /* the same for an FP8 Dgrad's operand a (dY, or dy16 where dY is absent) */
    uint8_t* x8t;         /* NULL, or the caller's device bytes [K, M] for X^T's FP8 codes (with x8s, one per layer and
                             input as x8s): an FP8 Fprop that casts X (x8s_amax's conditions, no telemetry) writes them
                             in the same pass as X's codes (mxg_fp8_quantize_t: the bytes Wgrad's cast of X^T makes) and
                             sets *x8t_made; Wgrad takes them as its operand b where *x8t_made is set (one pass over X
                             fewer). The caller keeps X unchanged from the forward to the backward, as for x8s */
    int* x8t_made;        /* with x8t: the caller's host flag (the caller clears it before the forward) */
    int outer_min;        /* with MXG_OUTER_MXFP4_ROUND: only the Dgrad / Wgrad GEMMs C [Ma, Nb] with Ma Nb / (Ma + Nb)
                             >= outer_min re-expressed and on OUTER scales, the rest on VEC128 (0: all) */
} mxg_linear_ctx;
enum { MXG_OUTER_FP8 = 1, MXG_OUTER_MXFP4 = 2, MXG_OUTER_MXFP4_FPROP = 4, MXG_OUTER_MXFP4_ROUND = 8 }; /* mxg_linear_ctx.outer_scales */

/* Dgrad's and Wgrad's operand a (dY [M, N] as stored) made in the fast path's folded form by whoever
 * produced dY (the MLP's SwiGLU backward: mxg_quantize_swiglu_bwd): [0] Dgrad's, the row-direction output
 * of dY, [1] Wgrad's, its column-direction output (dY^T's TN operand), with the specs they were made with
 * (mxg_linear_dy_specs; the linear checks them against its own). Device buffers of M * N bytes and
 * (M * N / 128) floats each. */
typedef struct mxg_dyq {
    const uint8_t* e4m3[2];
    const float* fscale[2];
    mxg_qspec spec[2];
} mxg_dyq;
/* 1, with the two specs, when the fast path would quantize dY [M, N] of this linear's Dgrad and Wgrad
 * itself (MXFP4 both, RNE, rotation <= 32, no telemetry, not --gemm exact, N and M multiples of 128), so
 * that a given mxg_dyq can stand in; 0 otherwise. */
int mxg_linear_dy_specs(const mxg_linear_ctx* c, int M, int N, mxg_qspec spec[2]);

/* A weight's GEMM operands made once per update (issue 16: "weights quantized once per optimizer step"):
 * [0] Fprop's operand b (W [N, K] as stored), [1] Dgrad's (W^T, [K, N] in the TN layout), on the fast MXFP4
 * path (folded E4M3 and float scales, the specs and folds they were made with) or fp8's (E4M3 codes under the
 * per-tensor scale of amax(W), the OUTER scale vector: one float a row, for both). The caller owns the
 * buffers: q8[k] [N * K] bytes, fs[k] floats (mxg_linear_weight_fs), sc [16] floats. valid[k] 0: that GEMM
 * quantizes W itself. Device pointers; w the W they were made from. */
typedef struct mxg_wq {
    int valid[2];
    int fmt;                  /* MX_FMT_MXFP4 or MX_FMT_FP8 */
    int fold[2];              /* MXFP4: 1 OUTER, 0 VEC128 (fp8: always the OUTER scale vector) */
    const float* w;
    int n, k;
    mxg_qspec spec[2];
    uint8_t* q8[2];
    float* fs[2];
    float* sc;                /* fp8: amax, scale, -, -, inv_scale (mxg_fp8_quantize's slots) */
} mxg_wq;
/* Floats fs[k] of an mxg_wq of W [n, k_] needs (the larger of every form either GEMM may keep). */
size_t mxg_linear_weight_fs(int n, int k_);
/* W's operands into q (its buffers set by the caller) for the linear c (its recipe, step, layer): from one read
 * of W where both GEMMs take MXFP4 on the fast path with VEC128 folds (the two-direction quantizer), else one
 * quantize each; fp8: the amax and cast once, then the codes transposed. Sets q->valid[k] where GEMM k's path
 * would quantize W this way (the same bytes); neither where the recipe takes none (MX_OK, nothing made). */
/* w_amax: NULL, or W's amax (device, as mxg_fp8_quantize writes one) made by the update (mxg_span.amax): fp8's
 * cast without an amax pass of its own (the same bytes; counted in mxg_linear_amax_hits). */
int mxg_linear_weight_operands(const mxg_linear_ctx* c, const float* W, int N, int K, const float* w_amax, mxg_wq* q,
                               void* stream);
/* How many GEMM operands the linears have taken from an mxg_wq so far (the process's count; tests). */
long long mxg_linear_wq_hits(void);
/* How many FP8 operands were cast without an amax pass of their own (from mxg_linear_ctx.x8s, x_amax or dy_amax;
 * the process's count; tests). */
long long mxg_linear_amax_hits(void);
/* How many Wgrad operands were taken from X^T's codes made by the Fprop (mxg_linear_ctx.x8t; tests). */
long long mxg_linear_x8t_hits(void);

/* One GEMM as the recipe says: C[Ma,Nb] (+)= Q(rot(A'))[Ma,R] Q(rot(B'))[Nb,R]^T
 * where A' = A (a_t 0: stored [Ma, R]) or A^T (a_t 1: stored [R, Ma]), B' likewise.
 * Errors for what the GPU does not do: FP8 delayed scaling, a rotation on a
 * non-MXFP4 GEMM. */
int mxg_gemm_recipe_tn(const mxg_linear_ctx* c, mx_gemm_id g, const float* A, int a_t, const float* B, int b_t,
                       float* C, int Ma, int Nb, int R, int accumulate, void* stream);
/* Y[M,N] = X[M,K] W[N,K]^T;  dX[M,K] += dY W (dX NULL: skipped);  dW[N,K] += dY^T X. */
int mxg_linear_forward(const mxg_linear_ctx* c, const float* X, const float* W, float* Y, int M, int K, int N,
                       void* stream);
int mxg_linear_backward(const mxg_linear_ctx* c, const float* X, const float* W, const float* dY, float* dX, float* dW,
                        int M, int K, int N, void* stream);
/* The same with dX = (not +=) its product when dx_acc is 0 (the first of the linears that read one
 * input: no zeroed buffer needed). */
int mxg_linear_backward_acc(const mxg_linear_ctx* c, const float* X, const float* W, const float* dY, float* dX,
                            float* dW, int M, int K, int N, int dx_acc, void* stream);

/* ---- the whole model on the GPU (src/cuda/nn/llama.cu): the twin of mx_llama ---- */

typedef struct mxg_llama mxg_llama;

typedef struct {
    int64_t params, grads, adam, acts, scratch, total; /* device bytes */
} mxg_mem_estimate;
/* Device memory the model needs for micro-batches of B x T. recompute: the
 * RMSNorm outputs and the SwiGLU product are recomputed in the backward
 * instead of being kept per layer. */
void mxg_llama_estimate(const mx_model_config* cfg, const mx_recipe* recipe, int B, int T, int recompute, int act16,
                        int attn, int share_grads, mxg_mem_estimate* e);
/* Attention implementations of the GPU model. */
enum { MXG_ATTN_SIMT = 0, MXG_ATTN_GEMM = 1, MXG_ATTN_TF32 = 2, MXG_ATTN_FLASH = 3 };
/* Allocate everything on the current GPU (weights zero: upload them). An
 * out-of-memory error names the allocation, its size and the preset.
 * act16: where the three GEMMs read BF16 operands (mx_act16_possible: bf16, fp8, MXFP4 outside the reference
 * form; ignored elsewhere), BF16 storage as a PyTorch autocast step keeps it: the RMSNorm outputs, the SwiGLU
 * product and gradients, the GEMM outputs gate, up, dhid and, with the flash attention, q, k, v, ao, dao, dq,
 * dk, dv (rounded to BF16: the CPU model's mx_llama.act16 rounds at the same points; a BF16 GEMM reads the same
 * values as from FP32, a quantized GEMM quantizes the BF16 ones), and for BF16 GEMMs the linears' weights once
 * per update; the residual stream, the norms' statistics, the weights of quantized GEMMs and every
 * accumulation stay FP32. The model then refuses telemetry (it needs the FP32 values). */
/* The act16 the trainer and `mxlm eval` ask for: 1 wherever BF16 storage can serve (mx_act16_possible: the BF16
 * recipes, and the FP8 and fast-path MXFP4 ones, which then quantize the BF16 activations). */
int mxg_llama_act16_default(const mx_recipe* r);
/* How many times (layers x backwards, in this process) the MLP's SwiGLU backward made dgate's and dup's
 * operands itself (the default; MXLM_GPU_FUSE_SWIGLU=0 turns it off; docs/gpu.md): a test's proof that the fused
 * path ran. */
long long mxg_llama_fused_swiglu_calls(void);
int mxg_llama_create(mxg_llama** out, const mx_model_config* cfg, const mx_recipe* recipe, int bf16_first,
                     int bf16_last, uint64_t seed, int B, int T, int exact, int recompute, int act16, int attn);
void mxg_llama_free(mxg_llama* g);
/* Host <-> device copies of the FP32 master weights ([n_params], the layout
 * of mx_param_layout) and the AdamW moments ([mxg_llama_shard_size]: n_params
 * unless data-parallel; m, v may be NULL). */
int mxg_llama_upload(mxg_llama* g, const float* params, const float* m, const float* v);
int mxg_llama_download(const mxg_llama* g, float* params, float* m, float* v);
int mxg_llama_download_grads(mxg_llama* g, float* grads);
/* Zero the gradients: the linears' weight gradients lazily (the next backward's Wgrad GEMMs write
 * them instead of adding: no pass over them), the rest now. */
int mxg_llama_zero_grad(mxg_llama* g);
/* Forward + backward of one micro-batch (tokens, targets: host [B, T]):
 * grads += d(sum of token losses * grad_scale)/dparams, *loss = mean loss.
 * `step` as mx_llama.step (SR bits). Synchronous (returns the loss). */
int mxg_llama_forward_backward(mxg_llama* g, const int32_t* tokens, const int32_t* targets, uint64_t step,
                               float grad_scale, float* loss);
/* Forward only (evaluation): *loss = mean cross-entropy; optional per-token
 * losses [B*T] to the host. */
int mxg_llama_loss(mxg_llama* g, const int32_t* tokens, const int32_t* targets, uint64_t step, float* loss,
                   float* token_losses);
/* Logits [rows, V] of the first `rows` positions of the last forward are
 * not kept (chunked head); this recomputes them for tokens [B, T]: out [B*T, V]
 * host (tests and interop checks; allocates a [B*T, V] device buffer). */
int mxg_llama_logits(mxg_llama* g, const int32_t* tokens, uint64_t step, float* out);
/* sum of squares of all gradients (deterministic, FP64). */
int mxg_llama_grad_sumsq(mxg_llama* g, double* out);
/* AdamW on every tensor (mx_adamw_update's twin: bit-identical). */
int mxg_llama_adamw(mxg_llama* g, const mx_adamw_config* c, double lr, float gscale, int64_t t);
/* The LM head's GEMMs on BF16 operands (1, the default unless every GEMM of
 * the recipe is fp32) or in FP32 (0: what the CPU model does). */
int mxg_llama_set_head_bf16(mxg_llama* g, int on);
/* Test hooks: set one element of the weights (which 0) or gradients (1). */
int mxg_llama_poke(mxg_llama* g, int which, size_t offset, float value);
/* With MXLM_GPU_PROFILE=1 in the environment (read by mxg_llama_create) the
 * GPU work is timed by part with CUDA events; this writes one line of the
 * totals so far and returns 1 (0 when profiling is off). */
int mxg_profile_report(char* buf, size_t n);
/* Free and total memory of the current GPU in bytes. */
int mxg_mem_info(int64_t* free_b, int64_t* total_b);
/* Peak device memory allocated by this process so far (cudaMemGetInfo based). */
int64_t mxg_llama_device_bytes(const mxg_llama* g);
/* Per-GEMM quantization telemetry (the twin of mx_llama.telemetry and lstate[].op).
 * on: the device totals of every block linear are zeroed, and the forward/backward
 * calls that follow add the statistics of each quantized operand to them (mxg_opstats,
 * computed on the GPU); off: they stop adding (the totals are kept). */
int mxg_llama_set_telemetry(mxg_llama* g, int on);
/* The totals since the last mxg_llama_set_telemetry(g, 1), copied into
 * lstate[mx_linear_id(l, j)].op for every block linear (lstate: host, [n_layers * 7];
 * only .op is written). Synchronous. */
int mxg_llama_telemetry_read(mxg_llama* g, mx_linear_state* lstate);
/* The linear-layer workspace (test hook: last quantized operands). */
mxg_linws* mxg_llama_linws(mxg_llama* g);

/* ---- data parallelism over NCCL (src/cuda/train/dist.cu; docs/multigpu.md) ----
 * One process per GPU. NCCL is loaded at run time (libnccl.so.2 on the loader
 * path, or MXLM_NCCL=/path): builds without NCCL compile and run single-GPU. */
#define MXG_NCCL_ID_BYTES 128
typedef struct mxg_comm mxg_comm;
/* Load NCCL (once); 0 on success, else -1 with the reason in why. */
int mxg_nccl_load(char* why, size_t n);
int mxg_nccl_version(void); /* e.g. 22803; 0 when not loaded */
/* cudaSetDevice(index) with a message naming the GPU count. */
int mxg_select_device(int index);
int mxg_comm_unique_id(unsigned char id[MXG_NCCL_ID_BYTES]);
/* Collective: every rank calls it with the same id (on its own GPU, set first). */
int mxg_comm_create(mxg_comm** c, int rank, int world, const unsigned char id[MXG_NCCL_ID_BYTES]);
void mxg_comm_free(mxg_comm* c, int abort);
int mxg_comm_rank(const mxg_comm* c);
int mxg_comm_world(const mxg_comm* c);
/* Host exchange (synchronous, collective): all[world][bytes] gets every rank's
 * `mine` in rank order; bytes a multiple of 8, world*bytes <= 4096. */
int mxg_comm_allgather_host(mxg_comm* c, const void* mine, void* all, size_t bytes);
/* In place over buf [n] (n a multiple of world), on `stream`: reduce-scatter
 * (sum; this rank's part is buf + rank*n/world) and all-gather (from that
 * part). Calls between mxg_comm_group(c, 1) and (c, 0) go out as one. */
int mxg_comm_reduce_scatter(mxg_comm* c, float* buf, size_t n, void* stream);
int mxg_comm_all_gather(mxg_comm* c, float* buf, size_t n, void* stream);
int mxg_comm_group(mxg_comm* c, int begin);

/* The model over a communicator (ZeRO-1): create it with mxg_llama_create_dist.
 * Every rank holds the full FP32 weights and gradients; the AdamW moments are
 * sharded: rank r owns part r of every tensor slice (each layer's slice of a
 * per-layer tensor, split in `world` equal parts) and keeps m, v for those
 * parts only, packed ([mxg_llama_shard_size] floats). The last micro-batch of
 * a step (mxg_llama_set_sync(g, 1)) reduce-scatters each layer's gradients on
 * a second stream as soon as the backward has produced them; grad_sumsq sums
 * the owned parts over all ranks; adamw updates the owned parts and
 * all-gathers the weights. upload/download move the packed moments. With
 * comm NULL this is mxg_llama_create. */
/* mxg_adamw_update over parts (the same arithmetic, element by element). */
int mxg_adamw_pieces(const mx_piece* p, int n_pieces, float* params, const float* grads, float* m, float* v,
                     const mx_adamw_config* c, double lr, float gscale, int64_t t, void* stream);
int mxg_llama_create_dist(mxg_llama** out, const mx_model_config* cfg, const mx_recipe* recipe, int bf16_first,
                          int bf16_last, uint64_t seed, int B, int T, int exact, int recompute, int act16, int attn,
                          int share_grads, mxg_comm* comm);
/* share_grads (one GPU, comm NULL; the trainer's default with --accum 1: docs/gpu.md): the weight gradients of
 * the block linears and the embedding live in activation memory that the backward has read for the last time
 * (block l's gate and up products, the residual stream), the rest in a smaller gradient buffer: at 1b, 4 x 2048,
 * 4.5 GiB less. The same values (the gradient norm from per-slice chunks: mxg_sum_squares_spans). The price: one
 * backward per zero_grad (forward_backward refuses a second, which would add to gradients the forward has
 * overwritten) and the gradients readable only until the next forward (download_grads, grad_sumsq, adamw and
 * poke refuse them after it). The bytes placed in activation memory (-1: not sharing): */
int64_t mxg_llama_shared_grad_bytes(const mxg_llama* g);
size_t mxg_llama_shard_size(const mxg_llama* g);
/* Rank `rank`'s owned parts of a full [n_params] host array <-> its packed
 * shard [shard_size] (to_full 0: full -> shard; 1: shard -> full). */
int mxg_llama_shard_copy(const mxg_llama* g, int rank, float* full, float* shard, int to_full);
int mxg_llama_set_sync(mxg_llama* g, int on);

/* ---- decoding with a key/value cache on the GPU (src/cuda/nn/decode.cu, the twin of src/nn/decode.c) ----
 * mxg_kv_create uploads the host model's weights (m: shape, recipes, seed, step, head_bf16; the head rounded
 * to BF16 where head_bf16, as decode.c rounds it) and makes a cache of cap positions; the recipe must be one
 * the GPU runs (exact: MXFP4 GEMMs by the exact emulation, else the fast path). mxg_llama_decode is
 * mx_llama_decode on the GPU: n tokens at positions pos .. pos+n-1, logits (host memory) [n, V] (all) or
 * [V]. mxg_generate is mx_generate with it (the same sampler on the host). The logits equal the CPU's up to
 * the accumulation order of the GEMMs and the GPU's expf. */
typedef struct mxg_kv_cache mxg_kv_cache;
int mxg_kv_create(mxg_kv_cache** out, const mx_llama* m, int cap, int exact);
void mxg_kv_free(mxg_kv_cache* c);
int mxg_llama_decode(mxg_kv_cache* c, const int32_t* tokens, int n, float* logits, int all);
int mxg_generate(const mx_llama* m, const int32_t* prompt, int n_prompt, int n_new, const mx_sample_opts* o,
                 int32_t stop_id, int32_t* out, int* n_out, int exact);

#ifdef __cplusplus
}
#endif
#endif
