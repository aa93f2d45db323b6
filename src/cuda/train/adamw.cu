/*
 * adamw.cu: the GPU twin of src/train/adamw.c.
 *   sum of squares  the CPU's chunks of 4096 in FP64 (one thread each, the values staged
 *                   coalesced through shared memory), then the
 *                   chunks' partials in a fixed tree
 *   AdamW           m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *                   p = p decay - lr mhat / (sqrt(vhat) + eps), the CPU's scalars
 * Guarantee: bit-identical per chunk partial and per update (the CPU's order);
 * the final sum of the partials in the GPU's fixed order.
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

/* ---- optimizer ------------------------------------------------------------------- */

#define SS_CHUNK 4096 /* mx_sum_squares's chunk (adamw.c) */

/* One thread per chunk, sequential in FP64: the CPU's partial, bit for bit. The chunks are read
 * coalesced: each step, a warp stages the next 32 values of each of its 32 chunks in shared memory
 * (one 128-byte load per chunk), then every thread adds its own chunk's 32 in order (a thread
 * walking its own 16 KiB chunk alone had read at ~1 TB/s). */
#define SS_BLOCK 128
__global__ void __launch_bounds__(SS_BLOCK) k_sumsq_part(double* part, const float* g, size_t n, size_t nch) {
    __shared__ float sl[SS_BLOCK][33];
    const int t = threadIdx.x, lane = t & 31, w0 = t & ~31;
    const size_t c0 = (size_t)blockIdx.x * SS_BLOCK, c = c0 + t;
    const size_t i0 = c * SS_CHUNK, i1 = c < nch ? ((c + 1) * SS_CHUNK < n ? (c + 1) * SS_CHUNK : n) : 0;
    double s = 0.0;
    for (int k = 0; k < SS_CHUNK; k += 32) {
        for (int j = 0; j < 32; j++) { /* row w0 + j: chunk c0 + w0 + j, values k .. k + 31 */
            const size_t idx = (c0 + w0 + j) * SS_CHUNK + k + lane;
            sl[w0 + j][lane] = idx < n ? g[idx] : 0.0f;
        }
        __syncwarp();
        for (int j = 0; j < 32; j++) {
            const size_t i = i0 + k + j;
            if (i < i1) {
                const float v = sl[t][j];
                s += (double)v * v;
            }
        }
        __syncwarp();
    }
    if (c < nch) part[c] = s;
}

/* One block of 1024: thread t adds partials t, t+1024, ... in order, then a fixed tree. */
__global__ void k_sumsq_final(double* out, const double* part, size_t nch) {
    double s = 0.0;
    for (size_t c = threadIdx.x; c < nch; c += blockDim.x) s += part[c];
    s = block_sum_warps_d(s);
    if (threadIdx.x == 0) *out = s;
}

/* p16 (NULL: none): the updated weight rounded to BF16 (RNE) as well, the bytes mxg_to_bf16 makes of p. */
__global__ void k_adamw(float* p, const float* g, float* mm, float* vv, size_t n, float b1, float b2, float eps,
                        float flr, float decay, float bc1, float bc2, float gscale, uint16_t* p16) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gi = g[i] * gscale;
    const float mi = b1 * mm[i] + (1.0f - b1) * gi;
    const float vi = b2 * vv[i] + (1.0f - b2) * gi * gi;
    mm[i] = mi;
    vv[i] = vi;
    const float mhat = mi / bc1, vhat = vi / bc2;
    const float pn = p[i] * decay - flr * mhat / (sqrtf(vhat) + eps);
    p[i] = pn;
    if (p16) p16[i] = mx_bf16_from_f32(pn);
}

int adamw_pieces(const mx_piece* pc, int n_pieces, float* params, const float* grads, float* m, float* v,
                 const mx_adamw_config* c, double lr, float gscale, int64_t t, uint16_t* const* copy, void* stream) {
    ARG_CHECK(t >= 1, "mxg_adamw_update: step %lld (1-based)", (long long)t);
    /* scalars exactly as mx_adamw_update computes them */
    const float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
    const float bc1 = (float)(1.0 - pow(c->beta1, (double)t)), bc2 = (float)(1.0 - pow(c->beta2, (double)t));
    const float flr = (float)lr;
    for (int i = 0; i < n_pieces; i++) {
        const mx_piece* p = &pc[i];
        if (!p->n) continue;
        const float decay = p->decay ? 1.0f - flr * (float)c->weight_decay : 1.0f;
        k_adamw<<<blocks_for(p->n, 256), 256, 0, MXG_STREAM(stream)>>>(
            params + p->full, grads + p->full, m + p->shard, v + p->shard, p->n, b1, b2, eps, flr, decay, bc1, bc2,
            gscale, copy ? copy[i] : NULL);
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
