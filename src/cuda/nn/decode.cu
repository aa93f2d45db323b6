/*
 * decode.cu: the twin of src/nn/decode.c on the GPU: the model one chunk of tokens at a time with a
 * key/value cache in device memory, for `mxlm sample --device cuda`. The same steps in the same order
 * as mx_llama_decode, each by the GPU layer of the trainer (embedding, RMSNorm, the recipe's linear
 * layer, RoPE from the CPU's tables, SwiGLU, the residual adds), and the attention of the new rows
 * over the cache by k_attend below, which computes decode.c's attend term by term (the dot products
 * in order over i, the softmax with a sequential max and sum, the output accumulated over j in order:
 * one thread per output element, no atomics). The head: FP32, or BF16-rounded operands (head_bf16) with
 * FP32 accumulation, as decode.c. The sampler is the CPU's (mx_sample_pick): the logits come back to the
 * host. The logits equal the CPU's up to the GEMMs' accumulation order (cuBLASLt) and the GPU's expf;
 * tests/gpu/test_llama.cu compares them and the cache against the one-call forward.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "mxlm/decode.h"
#include "mxlm/gpu_model.h"
#include "mxlm/linear_plan.h"

struct mxg_kv_cache {
    const mx_llama* m;   /* the host model: shape, recipes, seed, step, head_bf16 (read only) */
    int cap, pos, exact;
    uint64_t step;
    float* params;       /* [n_params] the weights on the device (the head BF16-rounded when head_bf16) */
    float *k, *v;        /* [L, cap, KD] keys after RoPE, values */
    float *cos_t, *sin_t; /* [cap, hd/2] */
    /* scratch for up to cap rows */
    int32_t* tok;        /* [cap] */
    float *x, *xn, *xmid, *rstd, *q, *ao, *gate, *up, *hid, *tmp, *logits; /* [cap, D] .. [cap, V] */
    float *padx, *pady;  /* [round_up(cap, DECODE_ROWS), max dim]: a linear's operand and output, padded (lin) */
    mxg_linws* ws;
};

namespace {

/* decode.c's attend for new row t (position p = p0 + t), head h: the thread's output element i. One block
 * per (t, h), hd threads; the scores of keys 0..p in sc [n * H, cap] (global scratch, one row per block). */
__global__ void k_attend(float* __restrict__ out, float* __restrict__ sc, const float* __restrict__ q,
                         const float* __restrict__ K, const float* __restrict__ V, int p0, int H, int KV, int hd, int cap) {
    const int t = blockIdx.x / H, h = blockIdx.x % H, kh = h / (H / KV), p = p0 + t;
    const int qs = H * hd, ks = KV * hd;
    const float* qt = q + (size_t)t * qs + h * hd;
    float* row = sc + (size_t)blockIdx.x * cap;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int j = threadIdx.x; j <= p; j += blockDim.x) { /* score j: the sum over i in order, then scaled */
        const float* kj = K + (size_t)j * ks + kh * hd;
        float s = 0.0f;
        for (int i = 0; i < hd; i++) s += qt[i] * kj[i];
        row[j] = s * scale;
    }
    __syncthreads();
    __shared__ float s_inv;
    if (threadIdx.x == 0) { /* the max and the sum in order over j, as the CPU */
        float mx = -INFINITY;
        for (int j = 0; j <= p; j++) mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
        for (int j = 0; j <= p; j++) {
            float e = expf(row[j] - mx);
            row[j] = e;
            sum += e;
        }
        s_inv = 1.0f / sum;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < hd; i += blockDim.x) { /* the output: prob(j) = e_j * inv, accumulated over j */
        float o = 0.0f;
        for (int j = 0; j <= p; j++) o += (row[j] * s_inv) * V[(size_t)j * ks + kh * hd + i];
        out[(size_t)t * qs + h * hd + i] = o;
    }
}

/* x[i] = round_bf16(x[i]) (the head's operand, as decode.c's mx_bf16_fakequant). */
__global__ void k_round_bf16(float* x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = mx_round_bf16(x[i]);
}

#define CHK(x) do { int rc_ = (x); if (rc_) return rc_; } while (0)
#define P(t) (c->params + m->info[t].offset)

/* cuBLASLt's FP8 kernels with VEC128 scales (the MXFP4 fast path) have no algorithm for a row count
 * that is not a multiple of 16 (measured on the H200: M 1, 9, 13 refused); the trainer's M = B x T always
 * is one, a decode chunk seldom. lin() runs such a chunk padded with zero rows to the next multiple: every
 * recipe's quantizer works along K within a row or takes an amax over the operand, which zero rows leave
 * as they are, and the GEMM's row r depends on rows r of the operands only, so rows 0..M-1 are those of
 * the unpadded product. */
constexpr int DECODE_ROWS = 16;

int round_rows(int n) { return (n + DECODE_ROWS - 1) / DECODE_ROWS * DECODE_ROWS; }

int lin(mxg_kv_cache* c, int l, int j, const float* X, const float* W, float* Y, int M, int K, int N) {
    const mx_llama* m = c->m;
    mxg_linear_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.recipe = mx_llama_block_recipe(m, l);
    ctx.seed = m->seed;
    ctx.step = c->step;
    ctx.layer_id = mx_linear_id(l, j);
    ctx.exact = c->exact;
    ctx.ws = c->ws;
    const int Mp = round_rows(M);
    if (Mp == M) return mxg_linear_forward(&ctx, X, W, Y, M, K, N, NULL);
    CU_TRY(cudaMemcpyAsync(c->padx, X, (size_t)M * K * 4, cudaMemcpyDeviceToDevice, 0));
    CU_TRY(cudaMemsetAsync(c->padx + (size_t)M * K, 0, (size_t)(Mp - M) * K * 4, 0));
    CHK(mxg_linear_forward(&ctx, c->padx, W, c->pady, Mp, K, N, NULL));
    CU_TRY(cudaMemcpyAsync(Y, c->pady, (size_t)M * N * 4, cudaMemcpyDeviceToDevice, 0));
    return MX_OK;
}

}  // namespace

extern "C" void mxg_kv_free(mxg_kv_cache* c) {
    if (!c) return;
    cudaFree(c->params); cudaFree(c->k); cudaFree(c->v); cudaFree(c->cos_t); cudaFree(c->sin_t); cudaFree(c->tok);
    cudaFree(c->x); cudaFree(c->xn); cudaFree(c->xmid); cudaFree(c->rstd); cudaFree(c->q); cudaFree(c->ao);
    cudaFree(c->gate); cudaFree(c->up); cudaFree(c->hid); cudaFree(c->tmp); cudaFree(c->logits);
    cudaFree(c->padx); cudaFree(c->pady);
    mxg_linws_free(c->ws);
    free(c);
}

extern "C" int mxg_kv_create(mxg_kv_cache** out, const mx_llama* m, int cap, int exact) {
    *out = NULL;
    const mx_model_config* cf = &m->cfg;
    if (cap <= 0 || cap > cf->seq_len)
        return mx_fail(MX_EINVAL, "decode: %d positions requested, the model's context is %d", cap, cf->seq_len);
    for (int l = 0; l < cf->n_layers; l++)
        for (int g = 0; g < 3; g++)
            if (mx_gemm_gpu_refusal(mx_llama_block_recipe(m, l), (mx_gemm_id)g))
                return mx_fail(MX_EINVAL, "decode: recipe %s: the GPU does not run it (sample with --device cpu)",
                               m->recipe.name);
    mxg_kv_cache* c = (mxg_kv_cache*)calloc(1, sizeof *c);
    if (!c) return mx_fail(MX_ENOMEM, "decode: out of host memory");
    c->m = m;
    c->cap = cap;
    c->exact = exact;
    c->step = m->step;
    const int D = cf->dim, H = cf->n_heads, KV = cf->n_kv_heads, hd = D / H, F = cf->ffn, V = cf->vocab;
    const int QD = H * hd, KD = KV * hd, h2 = hd / 2, W = F > QD ? (F > D ? F : D) : (QD > D ? QD : D);
    const size_t kv = (size_t)cf->n_layers * cap * KD;
    int rc = MX_OK;
#define DA(p, n)                                                                                                    \
    do {                                                                                                           \
        if (!rc && cudaMalloc((void**)&(p), (size_t)(n)) != cudaSuccess) {                                        \
            cudaGetLastError();                                                                                    \
            rc = mx_fail(MX_ENOMEM, "decode: GPU out of memory (%s, %.1f MiB)", #p, (double)(n) / 1048576.0);      \
        }                                                                                                          \
    } while (0)
    DA(c->params, m->n_params * 4);
    DA(c->k, kv * 4);
    DA(c->v, kv * 4);
    DA(c->cos_t, (size_t)cap * h2 * 4);
    DA(c->sin_t, (size_t)cap * h2 * 4);
    DA(c->tok, (size_t)cap * 4);
    DA(c->x, (size_t)cap * D * 4);
    DA(c->xn, (size_t)cap * D * 4);
    DA(c->xmid, (size_t)cap * D * 4);
    DA(c->rstd, (size_t)cap * 4);
    DA(c->q, (size_t)cap * QD * 4);
    DA(c->ao, (size_t)cap * QD * 4 + (size_t)cap * H * cap * 4); /* then the attention's scores [cap * H, cap] */
    DA(c->gate, (size_t)cap * F * 4);
    DA(c->up, (size_t)cap * F * 4);
    DA(c->hid, (size_t)cap * F * 4);
    DA(c->tmp, (size_t)cap * W * 4);
    DA(c->logits, (size_t)cap * V * 4);
    DA(c->padx, (size_t)round_rows(cap) * W * 4);
    DA(c->pady, (size_t)round_rows(cap) * W * 4);
#undef DA
    size_t wmax = (size_t)round_rows(cap) * W;
    const size_t wts[3] = {(size_t)QD * D, (size_t)F * D, (size_t)KD * D};
    for (int i = 0; i < 3; i++) wmax = wts[i] > wmax ? wts[i] : wmax;
    if (!rc) rc = mxg_linws_create(&c->ws, wmax, 0);
    /* the weights (the head rounded to BF16 on the host, as decode.c rounds it, when head_bf16) and the
     * RoPE tables of the CPU */
    float* tab = rc ? NULL : (float*)malloc((size_t)cap * h2 * 2 * sizeof(float));
    if (!rc && !tab) rc = mx_fail(MX_ENOMEM, "decode: out of host memory");
    if (!rc) {
        mx_rope_tables(tab, tab + (size_t)cap * h2, cap, hd, cf->rope_theta);
        if (cudaMemcpy(c->cos_t, tab, (size_t)cap * h2 * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(c->sin_t, tab + (size_t)cap * h2, (size_t)cap * h2 * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(c->params, m->params, m->n_params * 4, cudaMemcpyHostToDevice) != cudaSuccess)
            rc = mx_fail(MX_EIO, "decode: copy to the GPU failed");
    }
    free(tab);
    if (!rc && m->head_bf16) {
        const size_t nh = m->info[MX_P_HEAD].numel;
        k_round_bf16<<<(unsigned)((nh + 255) / 256 < 4096 ? (nh + 255) / 256 : 4096), 256>>>(
            c->params + m->info[MX_P_HEAD].offset, nh);
        if (cudaGetLastError() != cudaSuccess) rc = mx_fail(MX_EIO, "decode: kernel launch failed");
    }
    if (rc) { mxg_kv_free(c); return rc; }
    *out = c;
    return MX_OK;
}

extern "C" int mxg_llama_decode(mxg_kv_cache* c, const int32_t* tokens, int n, float* logits, int all) {
    const mx_llama* m = c->m;
    const mx_model_config* cf = &m->cfg;
    const int D = cf->dim, L = cf->n_layers, V = cf->vocab, F = cf->ffn, H = cf->n_heads, KV = cf->n_kv_heads;
    const int hd = D / H, QD = H * hd, KD = KV * hd, h2 = hd / 2;
    CHK(mx_decode_check(m, c->pos, c->cap, tokens, n));
    const int p0 = c->pos;
    const size_t N = (size_t)n;
    CU_TRY(cudaMemcpy(c->tok, tokens, N * 4, cudaMemcpyHostToDevice));
    CHK(mxg_embedding_forward(c->x, c->tok, P(MX_P_EMBED), n, D, NULL));
    float* sc = c->ao + (size_t)c->cap * QD; /* the attention's scores */
    for (int l = 0; l < L; l++) {
        float* kc = c->k + ((size_t)l * c->cap + p0) * KD; /* [n, KD] this layer's new keys */
        float* vc = c->v + ((size_t)l * c->cap + p0) * KD;
        CHK(mxg_rmsnorm_forward(c->xn, c->rstd, c->x, P(MX_P_ATTN_NORM) + (size_t)l * D, n, D, cf->norm_eps, NULL));
        CHK(lin(c, l, MX_LIN_Q, c->xn, P(MX_P_WQ) + (size_t)l * QD * D, c->q, n, D, QD));
        CHK(lin(c, l, MX_LIN_K, c->xn, P(MX_P_WK) + (size_t)l * KD * D, kc, n, D, KD));
        CHK(lin(c, l, MX_LIN_V, c->xn, P(MX_P_WV) + (size_t)l * KD * D, vc, n, D, KD));
        /* positions p0 .. p0+n-1: the tables from row p0 on, B = 1, T = n */
        CHK(mxg_rope_forward(c->q, c->cos_t + (size_t)p0 * h2, c->sin_t + (size_t)p0 * h2, 1, n, H, hd, NULL));
        CHK(mxg_rope_forward(kc, c->cos_t + (size_t)p0 * h2, c->sin_t + (size_t)p0 * h2, 1, n, KV, hd, NULL));
        k_attend<<<(unsigned)(n * H), hd < 128 ? hd : 128>>>(c->ao, sc, c->q, c->k + (size_t)l * c->cap * KD,
                                                             c->v + (size_t)l * c->cap * KD, p0, H, KV, hd, c->cap);
        CU_LAUNCHED();
        CHK(lin(c, l, MX_LIN_O, c->ao, P(MX_P_WO) + (size_t)l * D * QD, c->tmp, n, QD, D));
        CHK(mxg_add(c->xmid, c->x, c->tmp, N * D, NULL));
        CHK(mxg_rmsnorm_forward(c->xn, c->rstd, c->xmid, P(MX_P_FFN_NORM) + (size_t)l * D, n, D, cf->norm_eps, NULL));
        CHK(lin(c, l, MX_LIN_GATE, c->xn, P(MX_P_WGATE) + (size_t)l * F * D, c->gate, n, D, F));
        CHK(lin(c, l, MX_LIN_UP, c->xn, P(MX_P_WUP) + (size_t)l * F * D, c->up, n, D, F));
        CHK(mxg_swiglu_forward(c->hid, c->gate, c->up, N * F, NULL));
        CHK(lin(c, l, MX_LIN_DOWN, c->hid, P(MX_P_WDOWN) + (size_t)l * D * F, c->tmp, n, F, D));
        CHK(mxg_add(c->x, c->xmid, c->tmp, N * D, NULL));
    }
    CHK(mxg_rmsnorm_forward(c->xn, c->rstd, c->x, P(MX_P_FINAL_NORM), n, D, cf->norm_eps, NULL));
    const int r0 = all ? 0 : n - 1, rows = n - r0; /* the head is row-local: only the rows wanted */
    float* xr = c->xn + (size_t)r0 * D;
    if (m->head_bf16) { /* the head's operands rounded to BF16 (the head itself at create), FP32 accumulation */
        k_round_bf16<<<(unsigned)(((size_t)rows * D + 255) / 256), 256>>>(xr, (size_t)rows * D);
        CU_LAUNCHED();
    }
    /* logits[rows, V] = xr[rows, D] head[V, D]^T in FP32 (no TF32), as the trainer's FP32 linears */
    CHK(mxg_sgemm(0, 1, rows, V, D, xr, D, P(MX_P_HEAD), D, c->logits, V, 0, NULL));
    CU_TRY(cudaMemcpy(logits, c->logits, (size_t)rows * V * 4, cudaMemcpyDeviceToHost));
    c->pos += n;
    return MX_OK;
}

static int gpu_decode(void* cache, const int32_t* tokens, int n, float* logits, int all) {
    return mxg_llama_decode((mxg_kv_cache*)cache, tokens, n, logits, all);
}

extern "C" int mxg_generate(const mx_llama* m, const int32_t* prompt, int n_prompt, int n_new, const mx_sample_opts* o,
                            int32_t stop_id, int32_t* out, int* n_out, int exact) {
    *n_out = 0;
    int rc = mx_generate_check(m, n_prompt, n_new);
    if (rc || n_new == 0) return rc;
    mxg_kv_cache* kv = NULL;
    if ((rc = mxg_kv_create(&kv, m, n_prompt + n_new, exact))) return rc;
    rc = mx_generate_loop(m, gpu_decode, kv, prompt, n_prompt, n_new, o, stop_id, out, n_out); /* mx_generate's */
    mxg_kv_free(kv);
    return rc;
}
