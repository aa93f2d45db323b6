/*
 * embedding.cu: the GPU twin of src/nn/embedding.c.
 *   forward   out[n, :] = table[tokens[n], :]
 *   backward  dtable[v, :] += sum of dout[n, :] over the positions n with token v,
 *             in increasing n (the CPU's sequence of adds)
 * Guarantee: bit-identical to the CPU, deterministic: the positions are
 * bucketed by token with integer atomics only, then ordered by position (a
 * unique result) before one block per token adds them in the CPU's order.
 *
 * Built with --fmad=false (mk/cuda.mk): an add and a multiply are never
 * contracted into an FMA, so an expression written in the CPU's order rounds
 * exactly as the CPU's (built without FMA contraction: C11, x86-64-v2).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/gpu_model.h"

namespace {

/* ---- embedding ------------------------------------------------------------------- */

__global__ void k_embed_fwd(float* out, const int32_t* tokens, const float* table, int N, int D) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * D) return;
    size_t n = i / D, c = i % D;
    out[i] = table[(size_t)tokens[n] * D + c];
}

/* Workspace of the backward (ints): count[V], start[V], fill[V], pos[N], sorted[N]. */
__global__ void k_embed_count(int* count, const int32_t* tokens, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) atomicAdd(&count[tokens[n]], 1); /* integer: the result does not depend on order */
}

/* Exclusive prefix sum of count [V] into start [V], one block of 1024: each
 * thread scans a contiguous span, then the span totals are scanned. */
__global__ void k_exclusive_scan(int* start, const int* count, int V) {
    __shared__ int tot[1024];
    const int t = threadIdx.x, span = (V + 1023) / 1024;
    const int a = t * span, b = min(a + span, V);
    int s = 0;
    for (int i = a; i < b; i++) s += count[i];
    tot[t] = s;
    __syncthreads();
    if (t == 0) {
        int run = 0;
        for (int i = 0; i < 1024; i++) { int c = tot[i]; tot[i] = run; run += c; }
    }
    __syncthreads();
    int run = tot[t];
    for (int i = a; i < b; i++) { start[i] = run; run += count[i]; }
}

/* Put every position into its token's bucket (any order inside it). */
__global__ void k_embed_place(int* pos, int* fill, const int* start, const int32_t* tokens, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int v = tokens[n];
    pos[start[v] + atomicAdd(&fill[v], 1)] = n;
}

/* Order each bucket by position: the rank of n is the number of smaller
 * positions in its bucket (positions are distinct: a unique, deterministic result). */
__global__ void k_embed_rank(int* sorted, const int* pos, const int* start, const int* count, const int32_t* tokens,
                             int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int v = tokens[n], s = start[v], c = count[v], r = 0;
    for (int i = 0; i < c; i++) r += pos[s + i] < n;
    sorted[s + r] = n;
}

/* One block per (bucket head i, column tile): dtable[v][c] += dout[n][c] for
 * the bucket's positions in increasing order (the CPU's sequence of adds). */
__global__ void k_embed_accum(float* dtable, const float* dout, const int* sorted, const int* start, const int* count,
                              const int32_t* tokens, int N, int D) {
    int i = blockIdx.x;
    int v = tokens[sorted[i]];
    if (start[v] != i) return; /* not the head of its bucket */
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= D) return;
    float acc = dtable[(size_t)v * D + c];
    for (int j = i; j < i + count[v]; j++) acc += dout[(size_t)sorted[j] * D + c];
    dtable[(size_t)v * D + c] = acc;
}

}  // namespace

extern "C" int mxg_embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D,
                                     void* stream) {
    ARG_CHECK(N > 0 && D > 0, "mxg_embedding_forward: bad shape N %d D %d", N, D);
    k_embed_fwd<<<blocks_for((size_t)N * D, 256), 256, 0, MXG_STREAM(stream)>>>(out, tokens, table, N, D);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" size_t mxg_embedding_backward_workspace(int N, int V) {
    return sizeof(int) * (3 * (size_t)V + 2 * (size_t)N);
}

extern "C" int mxg_embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D, int V,
                                      void* ws, size_t ws_bytes, void* stream) {
    ARG_CHECK(N > 0 && D > 0 && V > 0, "mxg_embedding_backward: bad shape N %d D %d V %d", N, D, V);
    ARG_CHECK(ws && ws_bytes >= mxg_embedding_backward_workspace(N, V), "mxg_embedding_backward: workspace too small");
    cudaStream_t s = MXG_STREAM(stream);
    int* count = (int*)ws;  /* [V] */
    int* start = count + V; /* [V] */
    int* fill = start + V;  /* [V] */
    int* pos = fill + V;    /* [N] */
    int* sorted = pos + N;  /* [N] */
    CU_TRY(cudaMemsetAsync(count, 0, sizeof(int) * (size_t)V, s));
    CU_TRY(cudaMemsetAsync(fill, 0, sizeof(int) * (size_t)V, s));
    k_embed_count<<<blocks_for(N, 256), 256, 0, s>>>(count, tokens, N);
    CU_LAUNCHED();
    k_exclusive_scan<<<1, 1024, 0, s>>>(start, count, V);
    CU_LAUNCHED();
    k_embed_place<<<blocks_for(N, 256), 256, 0, s>>>(pos, fill, start, tokens, N);
    CU_LAUNCHED();
    k_embed_rank<<<blocks_for(N, 256), 256, 0, s>>>(sorted, pos, start, count, tokens, N);
    CU_LAUNCHED();
    dim3 grid((unsigned)N, blocks_for(D, 128));
    k_embed_accum<<<grid, 128, 0, s>>>(dtable, dout, sorted, start, count, tokens, N, D);
    CU_LAUNCHED();
    return MX_OK;
}
