/*
 * hadamard.cu: the twin of src/mx/hadamard.c's mx_hadamard_rotate for the formats whose quantizer has no
 * fused rotation (NVFP4, MXFP8: nvfp4.cu, mxfp8.cu; MXFP4's kernels rotate in registers, hadamard.cuh).
 * mxg_hadamard_rotate rotates x[rows, cols] in place along its rows (axis 1): every n consecutive values
 * of a row, times the sign of their position (rhN: mx_rh_sign(seed, rot_id, j), drawn as the CPU draws
 * them) when random, through mx_fwht's butterflies in its stage order, then one multiply by
 * mx_hadamard_norm(n). A lane per value (n <= 32: a group of n lanes; n = 32 E: a warp, lane l holding the
 * values l + 32 e): the stages of distance h < 32 exchange through shuffles, the larger ones within a lane's
 * registers, in mx_fwht's stage order (h = 1, 2, 4, ...), each pair's a + b and a - b the CPU's operations (a
 * stage's pairs are independent, so their order within it does not matter). Bit-exact with the CPU in an
 * object built with --fmad=false (mk/cuda.mk). (The first form, a thread per group through a local buffer,
 * took 116-200 us a launch at the 20m study's shapes: its loads were n floats apart across the warp.)
 */
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "mxlm/gpu.h"
#include "mxlm/mx_scalar.h"

namespace {

/* E values per lane: E = 1 for n <= 32 (a group of w = n lanes, 32 / n groups a warp), else n = 32 E (a warp). */
template <int E>
__global__ void k_hadamard_lanes(float* __restrict__ x, int rows, int cols, int n, int random_sign, uint64_t seed,
                                 uint32_t rot_id) {
    const int w = n < 32 ? n : 32, gpw = 32 / w, lane = threadIdx.x & 31, k = lane % w;
    const int groups = cols / n;
    const size_t total = (size_t)rows * groups;
    const size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5, nwarps = ((size_t)gridDim.x * blockDim.x) >> 5;
    const float s = mx_hadamard_norm(n);
    for (size_t g0 = warp * gpw; g0 < total; g0 += nwarps * gpw) { /* uniform over the warp */
        const size_t g = g0 + lane / w;
        const bool on = g < total;
        const size_t r = on ? g / groups : 0;
        const int j0 = on ? (int)(g % groups) * n : 0;
        float* p = x + r * cols + j0;
        float v[E];
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int j = k + 32 * e;
            v[e] = !on ? 0.0f : random_sign ? p[j] * mx_rh_sign(seed, rot_id, (uint64_t)(j0 + j)) : p[j];
        }
        for (int h = 1; h < w; h <<= 1) /* mx_fwht's stages h < 32: the partner is lane k ^ h */
#pragma unroll
            for (int e = 0; e < E; e++) {
                const float o = __shfl_xor_sync(0xffffffffu, v[e], h);
                v[e] = (k & h) ? o - v[e] : v[e] + o; /* upper: a - b; lower: a + b */
            }
#pragma unroll
        for (int m = 1; m < E; m <<= 1) /* the stages h = 32 m: values e and e + m of the lane */
#pragma unroll
            for (int e = 0; e < E; e++)
                if (!(e & m)) {
                    const float a = v[e], b = v[e + m];
                    v[e] = a + b;
                    v[e + m] = a - b;
                }
        if (on)
#pragma unroll
            for (int e = 0; e < E; e++) p[k + 32 * e] = v[e] * s;
    }
}

}  // namespace

extern "C" int mxg_hadamard_rotate(float* x, int rows, int cols, int n, int random_sign, uint64_t seed,
                                   uint32_t rot_id, void* stream) {
    if (n < 2 || n > 256 || (n & (n - 1))) return mx_fail(MX_EINVAL, "Hadamard size %d: must be a power of two in 2..256", n);
    if (rows <= 0 || cols <= 0 || cols % n)
        return mx_fail(MX_EINVAL, "Hadamard h%d along a dimension of %d: not a multiple of %d", n, cols, n);
    const size_t lanes = (size_t)rows * cols / (n > 32 ? n / 32 : 1), nb = (lanes + 255) / 256; /* a lane per E values */
    const unsigned grid = (unsigned)(nb < 8192 ? nb : 8192);
    cudaStream_t st = MXG_STREAM(stream);
    if (n <= 32) k_hadamard_lanes<1><<<grid, 256, 0, st>>>(x, rows, cols, n, random_sign, seed, rot_id);
    else if (n == 64) k_hadamard_lanes<2><<<grid, 256, 0, st>>>(x, rows, cols, n, random_sign, seed, rot_id);
    else if (n == 128) k_hadamard_lanes<4><<<grid, 256, 0, st>>>(x, rows, cols, n, random_sign, seed, rot_id);
    else k_hadamard_lanes<8><<<grid, 256, 0, st>>>(x, rows, cols, n, random_sign, seed, rot_id);
    CU_LAUNCHED();
    return MX_OK;
}
