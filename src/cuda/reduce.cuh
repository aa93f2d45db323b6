/*
 * reduce.cuh: the fixed-order warp and block reductions of the GPU kernels,
 * written once. No CPU twin: the CPU sums in a loop; these are the GPU's
 * orders, each fixed (a butterfly, then a tree), so two runs give the same
 * bits. Where two kernels reduce in different orders both orders are here,
 * named by what differs:
 *   warp_*            xor butterfly over the 32 lanes (offsets 16, 8, 4, 2, 1);
 *                     every lane gets the result
 *   block_*_warps     butterfly in each warp, then the warps' partials (lane w
 *                     holds warp w's) butterflied again; any blockDim.x that is
 *                     a multiple of 32, <= 1024
 *   block_*_tree256   a shared-memory halving tree over exactly 256 threads
 *                     (s = 128, 64, ..., 1), the caller's buffer of 256 floats
 * They contain no multiply, so the object's --fmad setting does not touch them.
 */
#ifndef MXLM_CUDA_REDUCE_CUH
#define MXLM_CUDA_REDUCE_CUH
#include <cuda_runtime.h>
#include <math.h>

namespace {

/* ---- warp: xor butterfly ---- */
__device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ int warp_max(int x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ unsigned warp_max(unsigned x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
/* The max over each aligned group of w lanes (w a power of two <= 32; xor offsets w/2, ..., 1): every lane
 * of the group gets its group's; a max is exact in any order. Every lane of the warp calls it. */
__device__ __forceinline__ float group_max(float x, int w) {
    for (int o = w >> 1; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ int group_max(int x, int w) {
    for (int o = w >> 1; o > 0; o >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
/* float, double, unsigned, unsigned long long */
template <typename T> __device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* ---- block: butterflies per warp, then over the warps' partials ---- */
/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. A fixed tree: the same bits on every run. */
__device__ double block_sum_warps_d(double x) {
    __shared__ double part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x = warp_sum(x);
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0) part[warp] = x;
    __syncthreads();
    double y = lane < nw ? part[lane] : 0.0;
    return warp_sum(y);
}
__device__ float block_max_warps(float x) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x = warp_max(x);
    __syncthreads();
    if (lane == 0) part[warp] = x;
    __syncthreads();
    float y = lane < nw ? part[lane] : -INFINITY;
    return warp_max(y);
}

/* The block's largest m (|x| bits: an integer max, order-free) added to *dst by one atomicMax (thread 0, where
 * nonzero): an amax over a grid of blocks, exact whatever order they run in. Every thread of the block calls it;
 * calls may follow one another. */
__device__ __forceinline__ void block_amax_to(unsigned m, unsigned* dst) {
    __shared__ unsigned wm[32];
    m = warp_max(m);
    __syncthreads(); /* wm may still be read by a previous call */
    if ((threadIdx.x & 31) == 0) wm[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < (blockDim.x >> 5) ? wm[threadIdx.x] : 0u;
        m = warp_max(m);
        if (threadIdx.x == 0 && m) atomicMax(dst, m);
    }
}

/* ---- block: shared-memory halving tree over 256 threads ---- */
/* Block-wide reductions over 256 threads in a fixed tree. */
__device__ float block_max_tree256(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}
__device__ float block_sum_tree256(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

}  // namespace

#endif
