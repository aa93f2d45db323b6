/*
 * adamw.cu: the GPU twin of src/train/adamw.c.
 *   sum of squares  the CPU's chunks of 4096 in FP64 (one thread each, the values staged
 *                   coalesced through shared memory), then the
 *                   chunks' partials in a fixed tree
 *   AdamW           m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *                   p = p decay - lr mhat / (sqrt(vhat) + eps), the CPU's scalars
 * Guarantee: bit-identical per chunk partial and per update (the CPU's order);
 * the final sum of the partials in the GPU's fixed order.
 *   spans           both over a table of arrays (mxg_span_table: the model's gradients where they
 *                   share memory with its activations), one launch each, the same per-element
 *                   update and per-chunk partials (chunks from each span's start)
 * Built with --fmad=false (mk/cuda.mk): an add and a multiply are never
 * contracted into an FMA, so an expression written in the CPU's order rounds
 * exactly as the CPU's (built without FMA contraction: C11, x86-64-v2).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/gpu_model.h"

namespace {

/* ---- optimizer ------------------------------------------------------------------- */

#define SS_CHUNK 4096 /* mx_sum_squares's chunk (adamw.c) */

/* One thread per chunk, sequential in FP64: the CPU's partial, bit for bit. The chunks are read
 * coalesced: each step, a warp loads the next 32 values of each of its 32 chunks (one 128-byte load per
 * chunk, all 32 issued before any is used: the warp's loads are in flight together), stages them in shared
 * memory, then every thread adds its own chunk's 32 in order (a thread walking its own 16 KiB chunk alone
 * had read at ~1 TB/s; loads issued one at a time between the stores to shared memory, ~0.5 TB/s at 125m).
 * sumsq_chunk: the calling thread's chunk is gp[i0 .. i1) (i1 - i0 <= SS_CHUNK; i1 <= i0: none); every
 * thread of the block calls it. */
#define SS_BLOCK 128
__device__ double sumsq_chunk(const float* gp, size_t i0, size_t i1) {
    __shared__ float sl[SS_BLOCK][33];
    __shared__ const float* rb[SS_BLOCK]; /* each thread's chunk (its first value) and length, for the warp's loads */
    __shared__ int rn[SS_BLOCK];
    const int t = threadIdx.x, lane = t & 31, w0 = t & ~31;
    const int cnt = i1 > i0 ? (int)(i1 - i0) : 0;
    rb[t] = cnt ? gp + i0 : gp;
    rn[t] = cnt;
    __syncwarp();
    double s = 0.0;
    for (int k = 0; k < SS_CHUNK; k += 32) {
        float v[32];
#pragma unroll
        for (int j = 0; j < 32; j++) /* chunk w0 + j's values k .. k + 31, no store in between */
            v[j] = k + lane < rn[w0 + j] ? __ldg(rb[w0 + j] + k + lane) : 0.0f;
#pragma unroll
        for (int j = 0; j < 32; j++) sl[w0 + j][lane] = v[j];
        __syncwarp();
        for (int j = 0; j < 32; j++)
            if (k + j < cnt) {
                const float x = sl[t][j];
                s += (double)x * x;
            }
        __syncwarp();
    }
    return s;
}

__global__ void __launch_bounds__(SS_BLOCK) k_sumsq_part(double* part, const float* g, size_t n, size_t nch) {
    const size_t c = (size_t)blockIdx.x * SS_BLOCK + threadIdx.x;
    const size_t i0 = c * SS_CHUNK, i1 = c < nch ? ((c + 1) * SS_CHUNK < n ? (c + 1) * SS_CHUNK : n) : 0;
    const double s = sumsq_chunk(g, i0, i1);
    if (c < nch) part[c] = s;
}

/* One block of 1024: thread t adds partials t, t+1024, ... in order, then a fixed tree. */
__global__ void k_sumsq_final(double* out, const double* part, size_t nch) {
    double s = 0.0;
    for (size_t c = threadIdx.x; c < nch; c += blockDim.x) s += part[c];
    s = block_sum_warps_d(s);
    if (threadIdx.x == 0) *out = s;
}

/* Element i of one tensor: the CPU's update (mx_adamw_update's expressions in its order); p16 (NULL:
 * none): the updated weight rounded to BF16 (RNE) as well, the bytes mxg_to_bf16 makes of p. Returns the
 * updated weight. */
__device__ __forceinline__ float adamw_elem(float* p, const float* g, float* mm, float* vv, uint16_t* p16, size_t i,
                                            float b1, float b2, float eps, float flr, float decay, float bc1,
                                            float bc2, float gscale) {
    const float gi = g[i] * gscale;
    const float mi = b1 * mm[i] + (1.0f - b1) * gi;
    const float vi = b2 * vv[i] + (1.0f - b2) * gi * gi;
    mm[i] = mi;
    vv[i] = vi;
    const float mhat = mi / bc1, vhat = vi / bc2;
    const float pn = p[i] * decay - flr * mhat / (sqrtf(vhat) + eps);
    p[i] = pn;
    if (p16) p16[i] = mx_bf16_from_f32(pn);
    return pn;
}

__global__ void k_adamw(float* p, const float* g, float* mm, float* vv, size_t n, float b1, float b2, float eps,
                        float flr, float decay, float bc1, float bc2, float gscale, uint16_t* p16) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) adamw_elem(p, g, mm, vv, p16, i, b1, b2, eps, flr, decay, bc1, bc2, gscale);
}

/* ---- spans (mxg_span_table): one launch over arrays that are not one ---- */

/* A span on the device with its first AdamW block (b0, blocks of ADAMW_BLOCK) and its first sum-of-squares
 * chunk (c0, chunks of SS_CHUNK): the spans' ranges laid end to end. */
#define ADAMW_BLOCK 256 /* adamw_pieces' k_adamw blocks */
struct SpanDev {
    mxg_span s;
    size_t b0, c0;
};

/* The span holding unit u (a block, or with chunks a chunk) of the concatenation: the last span whose start
 * is <= u (an empty span has the start of the next one, so it is never picked while that one holds u). */
__device__ int span_of(const SpanDev* sp, int ns, size_t u, int chunks) {
    int lo = 0, hi = ns - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if ((chunks ? sp[mid].c0 : sp[mid].b0) <= u) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* k_sumsq_part over the spans: chunk c's partial is its span's chunk's (c - c0), sumsq_chunk of the same
 * values in the same order. */
__global__ void __launch_bounds__(SS_BLOCK) k_sumsq_spans_part(double* part, const SpanDev* sp, int ns, size_t nch) {
    const size_t c = (size_t)blockIdx.x * SS_BLOCK + threadIdx.x;
    size_t i0 = 0, i1 = 0;
    const float* gp = NULL;
    if (c < nch) {
        const SpanDev* d = &sp[span_of(sp, ns, c, 1)];
        gp = d->s.g;
        i0 = (c - d->c0) * SS_CHUNK;
        i1 = i0 + SS_CHUNK < d->s.n ? i0 + SS_CHUNK : d->s.n;
    }
    const double s = sumsq_chunk(gp, i0, i1);
    if (c < nch) part[c] = s;
}

/* k_adamw over the spans: block b updates ADAMW_BLOCK elements of its span (b - b0), adamw_elem each, and
 * where the span has an amax word, raises it to the block's largest |p| bits (one atomicMax a block: the block
 * lies in one span, so the test is the same for all its threads). */
__global__ void k_adamw_spans(const SpanDev* sp, int ns, float b1, float b2, float eps, float flr, float decay_m,
                              float bc1, float bc2, float gscale) {
    const SpanDev* d = &sp[span_of(sp, ns, blockIdx.x, 0)];
    const size_t i = (size_t)(blockIdx.x - d->b0) * blockDim.x + threadIdx.x;
    unsigned a = 0u;
    if (i < d->s.n)
        a = mx_f2u(adamw_elem(d->s.p, d->s.g, d->s.m, d->s.v, d->s.p16, i, b1, b2, eps, flr,
                              d->s.decay ? decay_m : 1.0f, bc1, bc2, gscale)) & 0x7fffffffu;
    if (d->s.amax) block_amax_to(a, d->s.amax);
}

/* The update's scalars exactly as mx_adamw_update computes them (decay_m: a matrix's weight decay factor). */
struct AdamScalars {
    float b1, b2, eps, bc1, bc2, flr, decay_m;
};
AdamScalars adam_scalars(const mx_adamw_config* c, double lr, int64_t t) {
    AdamScalars a;
    a.b1 = (float)c->beta1;
    a.b2 = (float)c->beta2;
    a.eps = (float)c->eps;
    a.bc1 = (float)(1.0 - pow(c->beta1, (double)t));
    a.bc2 = (float)(1.0 - pow(c->beta2, (double)t));
    a.flr = (float)lr;
    a.decay_m = 1.0f - a.flr * (float)c->weight_decay;
    return a;
}

int adamw_pieces(const mx_piece* pc, int n_pieces, float* params, const float* grads, float* m, float* v,
                 const mx_adamw_config* c, double lr, float gscale, int64_t t, uint16_t* const* copy, void* stream) {
    ARG_CHECK(t >= 1, "mxg_adamw_update: step %lld (1-based)", (long long)t);
    const AdamScalars a = adam_scalars(c, lr, t);
    for (int i = 0; i < n_pieces; i++) {
        const mx_piece* p = &pc[i];
        if (!p->n) continue;
        k_adamw<<<blocks_for(p->n, ADAMW_BLOCK), ADAMW_BLOCK, 0, MXG_STREAM(stream)>>>(
            params + p->full, grads + p->full, m + p->shard, v + p->shard, p->n, a.b1, a.b2, a.eps, a.flr,
            p->decay ? a.decay_m : 1.0f, a.bc1, a.bc2, gscale, copy ? copy[i] : NULL);
        CU_LAUNCHED();
    }
    return MX_OK;
}

}  // namespace

extern "C" size_t mxg_sum_squares_workspace(size_t n) { return (n + SS_CHUNK - 1) / SS_CHUNK; }

extern "C" int mxg_sum_squares(const float* g, size_t n, double* out, double* ws, void* stream) {
    ARG_CHECK(n > 0 && ws && out, "mxg_sum_squares: empty input or no workspace");
    const size_t nch = mxg_sum_squares_workspace(n);
    cudaStream_t s = MXG_STREAM(stream);
    k_sumsq_part<<<blocks_for(nch, SS_BLOCK), SS_BLOCK, 0, s>>>(ws, g, n, nch);
    CU_LAUNCHED();
    k_sumsq_final<<<1, 1024, 0, s>>>(out, ws, nch);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_adamw_pieces(const mx_piece* pc, int n_pieces, float* params, const float* grads, float* m,
                                float* v, const mx_adamw_config* c, double lr, float gscale, int64_t t,
                                void* stream) {
    return adamw_pieces(pc, n_pieces, params, grads, m, v, c, lr, gscale, t, NULL, stream);
}

extern "C" int mxg_adamw_update_bf16(const mx_param_info info[MX_P_COUNT], float* params, const float* grads, float* m,
                                     float* v, const mx_adamw_config* c, double lr, float gscale, int64_t t,
                                     uint16_t* const copy[MX_P_COUNT], void* stream) {
    mx_piece pc[MX_P_COUNT];
    for (int i = 0; i < MX_P_COUNT; i++)
        pc[i] = (mx_piece){info[i].offset, info[i].offset, info[i].numel, info[i].offset, info[i].is_matrix};
    return adamw_pieces(pc, MX_P_COUNT, params, grads, m, v, c, lr, gscale, t, copy, stream);
}

extern "C" int mxg_adamw_update(const mx_param_info info[MX_P_COUNT], float* params, const float* grads, float* m,
                                float* v, const mx_adamw_config* c, double lr, float gscale, int64_t t,
                                void* stream) {
    return mxg_adamw_update_bf16(info, params, grads, m, v, c, lr, gscale, t, NULL, stream);
}

struct mxg_span_table {
    SpanDev* d; /* device */
    int n;
    size_t blocks, chunks;
};

extern "C" int mxg_span_table_create(mxg_span_table** out, const mxg_span* spans, int n) {
    *out = NULL;
    ARG_CHECK(n > 0 && spans, "mxg_span_table_create: no spans");
    SpanDev* h = (SpanDev*)malloc((size_t)n * sizeof *h);
    mxg_span_table* t = (mxg_span_table*)calloc(1, sizeof *t);
    if (!h || !t) {
        free(h);
        free(t);
        return mx_fail(MX_ENOMEM, "mxg_span_table_create: out of host memory");
    }
    size_t b = 0, c = 0;
    for (int i = 0; i < n; i++) {
        h[i].s = spans[i];
        h[i].b0 = b;
        h[i].c0 = c;
        b += (spans[i].n + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
        c += (spans[i].n + SS_CHUNK - 1) / SS_CHUNK;
    }
    t->n = n;
    t->blocks = b;
    t->chunks = c;
    cudaError_t e = cudaMalloc((void**)&t->d, (size_t)n * sizeof *h);
    if (e == cudaSuccess) e = cudaMemcpy(t->d, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice);
    free(h);
    if (e != cudaSuccess) {
        cudaGetLastError();
        mxg_span_table_free(t);
        return mx_fail(MX_EIO, "mxg_span_table_create: %s", cudaGetErrorString(e));
    }
    *out = t;
    return MX_OK;
}

extern "C" void mxg_span_table_free(mxg_span_table* t) {
    if (!t) return;
    cudaFree(t->d);
    free(t);
}

extern "C" size_t mxg_span_table_chunks(const mxg_span_table* t) { return t ? t->chunks : 0; }

extern "C" int mxg_sum_squares_spans(const mxg_span_table* t, double* out, double* ws, void* stream) {
    ARG_CHECK(t && t->chunks > 0 && ws && out, "mxg_sum_squares_spans: empty table or no workspace");
    cudaStream_t s = MXG_STREAM(stream);
    k_sumsq_spans_part<<<blocks_for(t->chunks, SS_BLOCK), SS_BLOCK, 0, s>>>(ws, t->d, t->n, t->chunks);
    CU_LAUNCHED();
    k_sumsq_final<<<1, 1024, 0, s>>>(out, ws, t->chunks);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_adamw_spans(const mxg_span_table* t, const mx_adamw_config* c, double lr, float gscale,
                               int64_t step, void* stream) {
    ARG_CHECK(t && step >= 1, "mxg_adamw_spans: no table or step %lld (1-based)", (long long)step);
    if (!t->blocks) return MX_OK;
    ARG_CHECK(t->blocks <= 0x7fffffffu, "mxg_adamw_spans: %zu blocks", t->blocks);
    const AdamScalars a = adam_scalars(c, lr, step);
    k_adamw_spans<<<(unsigned)t->blocks, ADAMW_BLOCK, 0, MXG_STREAM(stream)>>>(t->d, t->n, a.b1, a.b2, a.eps, a.flr,
                                                                               a.decay_m, a.bc1, a.bc2, gscale);
    CU_LAUNCHED();
    return MX_OK;
}
