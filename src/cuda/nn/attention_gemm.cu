/*
 * attention_gemm.cu: causal GQA attention through cuBLASLt strided-batched
 * GEMMs (the one cuBLASLt layer, ../lt.cuh), a GPU twin of src/nn/attention.c
 * (which also stores the T x T probabilities) and the faster alternative to
 * the FP32 SIMT kernels of attention.cu (which run on CUDA cores). Same
 * results up to the summation order in FP32 mode; in TF32 mode the four
 * score/probability products run on tensor cores with operands rounded to
 * TF32 (10-bit mantissa), accumulation in FP32.
 *
 * Per sequence b (so the T x T scores of one sequence exist at a time, all
 * heads: ws [2, H, T, T] floats), query head h = kvh * g + j (g = H / KV):
 *   forward   S_h = Q_h K_kvh^T;  P = softmax(scale S) causal, lse kept;  O_h = P_h V_kvh
 *   backward  S, P recomputed from lse;  dP_h = dO_h V_kvh^T;  dV_kvh = sum_j P_h^T dO_h;
 *             dS = P (dP - delta) scale;  dQ_h = dS_h K_kvh;  dK_kvh = sum_j dS_h^T Q_h
 * Each GEMM is batched over the KV heads for one j (constant strides); the
 * sums over j run in increasing j (beta 1 after the first): deterministic,
 * no atomics. The masked upper triangle is computed and zeroed (simple, not
 * the causal half of the FLOPs).
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cuda/lt.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/gpu_model.h"

namespace {

int layout(cublasLtMatrixLayout_t* l, uint64_t rows, uint64_t cols, int64_t ld, int batch, long long stride) {
    LT_TRY(cublasLtMatrixLayoutCreate(l, CUDA_R_32F, rows, cols, ld));
    int32_t bc = batch;
    int64_t st = stride;
    LT_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
    LT_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st));
    return MX_OK;
}

/* Row-major C[M,N] (+)= op(A)[M,K] op(B)[K,N] for `batch` matrices at strides sa, sb, sc (elements);
 * ta: A stored [K, M]; tb: B stored [N, K]. As cuBLASLt column-major: D^T = op(B)^T op(A)^T. */
int plan_make(lt_plan* p, cublasLtHandle_t lt) {
    const int ta = p->key.ta, tb = p->key.tb, M = p->key.M, N = p->key.N, K = p->key.K, lda = p->key.lda,
              ldb = p->key.ldb, ldc = p->key.ldc, batch = p->key.batch, tf32 = p->key.flag;
    const long long sa = p->key.sa, sb = p->key.sb, sc = p->key.sc;
    LT_TRY(cublasLtMatmulDescCreate(&p->op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    int rc = layout(&p->la, tb ? K : N, tb ? N : K, ldb, batch, sb);
    if (!rc) rc = layout(&p->lb, ta ? M : K, ta ? K : M, lda, batch, sa);
    if (!rc) rc = layout(&p->lc, N, M, ldc, batch, sc);
    if (rc) return rc;
    cublasStatus_t st = lt_algo_fixed_order(p, lt, LT_WS_BATCHED, 0); /* no split-K */
    if (st != CUBLAS_STATUS_SUCCESS) {
        lt_plan_destroy(p);
        return mx_fail(MX_EINVAL, "cuBLASLt has no batched %s algorithm for %s%s M %d N %d K %d x %d: status %d",
                       tf32 ? "TF32" : "FP32", ta ? "T" : "N", tb ? "T" : "N", M, N, K, batch, (int)st);
    }
    return MX_OK;
}

int gemm_batched(int ta, int tb, int M, int N, int K, const float* A, int lda, long long sa, const float* B, int ldb,
                 long long sb, float* C, int ldc, long long sc, int batch, int accumulate, int tf32, cudaStream_t st) {
    lt_key key = lt_key_zero(LT_BATCHED);
    key.ta = ta; key.tb = tb; key.M = M; key.N = N; key.K = K; key.lda = lda; key.ldb = ldb; key.ldc = ldc;
    key.batch = batch; key.sa = sa; key.sb = sb; key.sc = sc; key.flag = tf32;
    lt_plan* p;
    int rc = lt_plan_get(&p, &key, plan_make);
    if (rc) return rc;
    return lt_matmul(p, accumulate ? 1.0f : 0.0f, A, B, C, LT_WS_BATCHED, st);
}

/* One block per row r of S [H*T, T] (t = r % T): P = exp(scale s - lse) for keys j <= t, 0 above.
 * With `make_lse` the log-sum-exp is computed (max, then the sum of exponentials) and stored;
 * otherwise it is read (the backward's recomputation). */
__global__ void __launch_bounds__(256) k_softmax_causal(float* S, float* lse, int T, float scale, int make_lse) {
    __shared__ float sh[256];
    const size_t r = blockIdx.x;
    const int t = (int)(r % T);
    float* row = S + r * T;
    float L;
    if (make_lse) {
        float m = -INFINITY;
        for (int j = threadIdx.x; j <= t; j += 256) m = fmaxf(m, row[j] * scale);
        m = block_max_tree256(m, sh);
        float l = 0.0f;
        for (int j = threadIdx.x; j <= t; j += 256) l += expf(row[j] * scale - m);
        l = block_sum_tree256(l, sh);
        L = m + logf(l);
        if (threadIdx.x == 0) lse[r] = L;
    } else {
        L = lse[r];
    }
    for (int j = threadIdx.x; j < T; j += 256) row[j] = j <= t ? expf(row[j] * scale - L) : 0.0f;
}

/* dS = P (dP - delta) scale in place of dP (0 above the diagonal: P is 0 there). */
__global__ void __launch_bounds__(256) k_dsoftmax(float* dP, const float* P, const float* delta, int T, float scale) {
    const size_t r = blockIdx.x;
    const float d = delta[r];
    float* dp = dP + r * T;
    const float* p = P + r * T;
    for (int j = threadIdx.x; j < T; j += 256) dp[j] = p[j] * (dp[j] - d) * scale;
}

/* delta[b, h, t] = dout_t . out_t over the head's hd values (a warp per row, fixed butterfly). */
__global__ void k_delta(float* delta, const float* dout, const float* out, int B, int T, int H, int hd) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= B * H * T) return;
    const int t = row % T, bh = row / T, b = bh / H, h = bh % H;
    const size_t base = (size_t)(b * T + t) * H * hd + (size_t)h * hd;
    float s = 0.0f;
    for (int i = lane; i < hd; i += 32) s += dout[base + i] * out[base + i];
    s = warp_sum(s);
    if (lane == 0) delta[row] = s;
}

int check(const char* who, int B, int T, int H, int KV, int hd, const float* ws) {
    if (B <= 0 || T <= 0 || H <= 0 || KV <= 0 || H % KV || hd <= 0 || hd % 4 || !ws)
        return mx_fail(MX_EINVAL, "%s: bad shape B %d T %d H %d/%d hd %d (or no workspace)", who, B, T, H, KV, hd);
    return MX_OK;
}

}  // namespace

extern "C" size_t mxg_attention_gemm_workspace(int T, int H) { return 2 * (size_t)H * T * T; }

extern "C" int mxg_attention_forward_gemm(float* out, float* lse, const float* q, const float* k, const float* v,
                                          int B, int T, int H, int KV, int hd, float* ws, int tf32, void* stream) {
    int rc = check("mxg_attention_forward_gemm", B, T, H, KV, hd, ws);
    if (rc) return rc;
    cudaStream_t st = MXG_STREAM(stream);
    const int g = H / KV, qs = H * hd, ks = KV * hd;
    const long long TT = (long long)T * T;
    const float scale = 1.0f / sqrtf((float)hd);
    float* S = ws; /* [H, T, T] */
    for (int b = 0; b < B && !rc; b++) {
        const float* qb = q + (size_t)b * T * qs;
        const float* kb = k + (size_t)b * T * ks;
        const float* vb = v + (size_t)b * T * ks;
        for (int j = 0; j < g && !rc; j++) /* S_h = Q_h K_kvh^T, h = kvh g + j */
            rc = gemm_batched(0, 1, T, T, hd, qb + j * hd, qs, (long long)g * hd, kb, ks, hd, S + j * TT, T, g * TT,
                              KV, 0, tf32, st);
        if (rc) break;
        k_softmax_causal<<<(unsigned)(H * T), 256, 0, st>>>(S, lse + (size_t)b * H * T, T, scale, 1);
        CU_LAUNCHED();
        for (int j = 0; j < g && !rc; j++) /* O_h = P_h V_kvh */
            rc = gemm_batched(0, 0, T, hd, T, S + j * TT, T, g * TT, vb, ks, hd, out + (size_t)b * T * qs + j * hd, qs,
                              (long long)g * hd, KV, 0, tf32, st);
    }
    return rc;
}

extern "C" int mxg_attention_backward_gemm(float* dq, float* dk, float* dv, float* delta, const float* dout,
                                           const float* out, const float* lse, const float* q, const float* k,
                                           const float* v, int B, int T, int H, int KV, int hd, float* ws, int tf32,
                                           void* stream) {
    int rc = check("mxg_attention_backward_gemm", B, T, H, KV, hd, ws);
    if (rc) return rc;
    cudaStream_t st = MXG_STREAM(stream);
    const int g = H / KV, qs = H * hd, ks = KV * hd;
    const long long TT = (long long)T * T;
    const float scale = 1.0f / sqrtf((float)hd);
    float *P = ws, *dP = ws + (size_t)H * TT; /* [H, T, T] each */
    k_delta<<<(unsigned)(((size_t)B * H * T + 7) / 8), 256, 0, st>>>(delta, dout, out, B, T, H, hd);
    CU_LAUNCHED();
    for (int b = 0; b < B && !rc; b++) {
        const float *qb = q + (size_t)b * T * qs, *kb = k + (size_t)b * T * ks, *vb = v + (size_t)b * T * ks;
        const float* dob = dout + (size_t)b * T * qs;
        float *dqb = dq + (size_t)b * T * qs, *dkb = dk + (size_t)b * T * ks, *dvb = dv + (size_t)b * T * ks;
        for (int j = 0; j < g && !rc; j++) /* S_h again */
            rc = gemm_batched(0, 1, T, T, hd, qb + j * hd, qs, (long long)g * hd, kb, ks, hd, P + j * TT, T, g * TT,
                              KV, 0, tf32, st);
        if (rc) break;
        k_softmax_causal<<<(unsigned)(H * T), 256, 0, st>>>(P, (float*)lse + (size_t)b * H * T, T, scale, 0);
        CU_LAUNCHED();
        for (int j = 0; j < g && !rc; j++) /* dP_h = dO_h V_kvh^T */
            rc = gemm_batched(0, 1, T, T, hd, dob + j * hd, qs, (long long)g * hd, vb, ks, hd, dP + j * TT, T, g * TT,
                              KV, 0, tf32, st);
        for (int j = 0; j < g && !rc; j++) /* dV_kvh (+)= P_h^T dO_h, in increasing j */
            rc = gemm_batched(1, 0, T, hd, T, P + j * TT, T, g * TT, dob + j * hd, qs, (long long)g * hd, dvb, ks, hd,
                              KV, j > 0, tf32, st);
        if (rc) break;
        k_dsoftmax<<<(unsigned)(H * T), 256, 0, st>>>(dP, P, delta + (size_t)b * H * T, T, scale);
        CU_LAUNCHED();
        for (int j = 0; j < g && !rc; j++) /* dQ_h = dS_h K_kvh */
            rc = gemm_batched(0, 0, T, hd, T, dP + j * TT, T, g * TT, kb, ks, hd, dqb + j * hd, qs, (long long)g * hd,
                              KV, 0, tf32, st);
        for (int j = 0; j < g && !rc; j++) /* dK_kvh (+)= dS_h^T Q_h, in increasing j */
            rc = gemm_batched(1, 0, T, hd, T, dP + j * TT, T, g * TT, qb + j * hd, qs, (long long)g * hd, dkb, ks, hd,
                              KV, j > 0, tf32, st);
    }
    return rc;
}
