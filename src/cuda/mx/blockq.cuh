/*
 * blockq.cuh: what the one-thread-per-block quantizers (nvfp4.cu, mxfp8.cu, mxfp4_ref.cu: the reference
 * forms of the CPU quantizers, for the formats and rules without a fast kernel) share: the kernel
 * (k_ref_blocks: one thread per block, a format's block and element steps as a functor; k_ref_lanes: a lane
 * per column of a block that is 16 or 32 wide, the same steps), its grid, a block's amax pass, and the flush
 * of the block counts (warp sums, then one integer atomic per warp: exact in any order).
 */
#ifndef MXLM_CUDA_MX_BLOCKQ_CUH
#define MXLM_CUDA_MX_BLOCKQ_CUH
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/mx_scalar.h"

namespace {

/* Blocks of `threads` for n items, grid-stride beyond 4096 blocks. */
inline unsigned block_grid(size_t n, unsigned threads) {
    const size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

/* stats (may be NULL): [0] += blocks, [1] += clipped blocks (mxg_opstats's adjacent fields); clip_total
 * (may be NULL) += clipped blocks. Every thread of the warp calls it. */
__device__ __forceinline__ void flush_block_counts(unsigned long long nb, unsigned long long nclip,
                                                   unsigned long long* stats, unsigned long long* clip_total) {
    nb = warp_sum(nb);
    nclip = warp_sum(nclip);
    if ((threadIdx.x & 31) == 0) {
        if (stats && nb) atomicAdd(&stats[0], nb);
        if (stats && nclip) atomicAdd(&stats[1], nclip);
        if (clip_total && nclip) atomicAdd(clip_total, nclip);
    }
}

/* The first pass of the CPU's block quantizers over the th x tw block at (r0, c0) of x[., cols]: the
 * largest |x| of its finite elements, and bad = 1 when it holds a NaN or an Inf. */
__device__ __forceinline__ float block_amax(const float* __restrict__ x, int cols, int r0, int c0, int th, int tw,
                                            int& bad) {
    float amax = 0.0f;
    bad = 0;
    for (int i = 0; i < th; i++)
        for (int j = 0; j < tw; j++) {
            const float a = fabsf(x[(size_t)(r0 + i) * cols + c0 + j]);
            if (!(a <= 3.4028235e38f)) bad = 1;
            else if (a > amax) amax = a;
        }
    return amax;
}

/* The second pass over the same th x tw block: F's element step (fmt.elem(b, v, idx, clip, d, h): v = x[idx]
 * quantized, d its decoded FP32 value, the CPU's, and h the value the GEMM takes in BF16; clip set when it
 * clipped) on each element, the outputs written where given. */
template <class F>
__device__ __forceinline__ void block_elems(const F& fmt, const typename F::Block& blk, const float* __restrict__ x,
                                            int cols, int r0, int c0, int th, int tw, int& clip,
                                            uint16_t* __restrict__ y16, float* __restrict__ y) {
    for (int i = 0; i < th; i++)
        for (int j = 0; j < tw; j++) {
            const size_t idx = (size_t)(r0 + i) * cols + c0 + j;
            float d, h;
            fmt.elem(blk, x[idx], idx, clip, d, h);
            if (y16) y16[idx] = mx_bf16_from_f32(h);
            if (y) y[idx] = d;
        }
}

/* The reference-form quantizer of a format F: one thread per th x tw block of x[rows, cols] (row-major), the
 * block's amax pass, then F's block step (b = fmt.block(amax, bad): its scale) and element step (block_elems),
 * the counts flushed. */
template <class F>
__global__ void k_ref_blocks(const float* __restrict__ x, int rows, int cols, int th, int tw, F fmt,
                             uint16_t* __restrict__ y16, float* __restrict__ y, unsigned long long* stats,
                             unsigned long long* clip_total) {
    const int nbc = cols / tw;
    const size_t nblocks = (size_t)(rows / th) * nbc;
    unsigned long long nb = 0, nclip = 0;
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < nblocks; b += (size_t)gridDim.x * blockDim.x) {
        const int r0 = (int)(b / nbc) * th, c0 = (int)(b % nbc) * tw;
        int bad;
        const float amax = block_amax(x, cols, r0, c0, th, tw, bad);
        const typename F::Block blk = fmt.block(amax, bad);
        int clip = 0;
        block_elems(fmt, blk, x, cols, r0, c0, th, tw, clip, y16, y);
        nb++;
        nclip += (unsigned long long)clip;
    }
    flush_block_counts(nb, nclip, stats, clip_total);
}

/* k_ref_blocks' arithmetic for blocks tw = 16 or 32 wide (the 1x16 / 1x32 layouts along K and the 16x16 / 32x32
 * tiles): the tw lanes of an aligned group take a block's tw columns (lane k column c0 + k, its th rows), so
 * a warp's loads and stores are 32 consecutive floats of a row. The amax is each lane's over its column, then
 * the group's max (exact in any order, the same finite-only rule as block_amax), bad the group's OR; every
 * lane makes the block step from the same amax (the same scale) and the element step of its own elements (the
 * element's row-major index: the same SR draw); the clip flag is the group's OR. Written for the load pattern
 * (k_ref_blocks' thread reads 64-128 contiguous bytes while its warp's neighbours read 32 lines: 93-165 us a
 * launch at the 20m study's shapes, 2026-12-03 kprof); the values are k_ref_blocks' bit for bit. */
template <class F>
__global__ void k_ref_lanes(const float* __restrict__ x, int rows, int cols, int th, int tw, F fmt,
                            uint16_t* __restrict__ y16, float* __restrict__ y, unsigned long long* stats,
                            unsigned long long* clip_total) {
    const int nbc = cols / tw, gpw = 32 / tw, lane = threadIdx.x & 31, k = lane % tw;
    const size_t nblocks = (size_t)(rows / th) * nbc;
    const size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5, nwarps = ((size_t)gridDim.x * blockDim.x) >> 5;
    unsigned long long nb = 0, nclip = 0;
    for (size_t b0 = warp * gpw; b0 < nblocks; b0 += nwarps * gpw) { /* uniform over the warp */
        const size_t b = b0 + lane / tw;
        const bool on = b < nblocks;
        const int r0 = on ? (int)(b / nbc) * th : 0, c = on ? (int)(b % nbc) * tw + k : 0;
        int bad = 0, clip = 0; /* the lane's column of the block (th x 1 at (r0, c)), then the group's */
        float amax = on ? block_amax(x, cols, r0, c, th, 1, bad) : 0.0f;
        amax = group_max(amax, tw);
        bad = group_max(bad, tw);
        if (on) block_elems(fmt, fmt.block(amax, bad), x, cols, r0, c, th, 1, clip, y16, y);
        clip = group_max(clip, tw);
        if (on && k == 0) {
            nb++;
            nclip += (unsigned long long)clip;
        }
    }
    flush_block_counts(nb, nclip, stats, clip_total);
}

/* Launch k_ref_lanes for a th x tw layout of x[rows, cols] with tw 16 or 32, else k_ref_blocks (tw = 1: a
 * thread per column block, whose warp's loads are already consecutive columns); the wrappers check the shape. */
template <class F>
int ref_blocks(const float* x, int rows, int cols, int th, int tw, const F& fmt, uint16_t* y16, float* y,
               unsigned long long* stats, unsigned long long* clip_total, void* stream) {
    const size_t nblocks = (size_t)(rows / th) * (cols / tw);
    if (tw == 16 || tw == 32)
        k_ref_lanes<F><<<block_grid(nblocks * tw, 256), 256, 0, MXG_STREAM(stream)>>>(x, rows, cols, th, tw, fmt, y16, y,
                                                                                      stats, clip_total);
    else
        k_ref_blocks<F><<<block_grid(nblocks, 128), 128, 0, MXG_STREAM(stream)>>>(x, rows, cols, th, tw, fmt, y16, y,
                                                                                  stats, clip_total);
    CU_LAUNCHED();
    return MX_OK;
}

}  // namespace

#endif
