/*
 * hadamard.cu: the twin of src/mx/hadamard.c's mx_hadamard_rotate for the formats whose quantizer has no
 * fused rotation (NVFP4, MXFP8: nvfp4.cu, mxfp8.cu; MXFP4's kernels rotate in registers, hadamard.cuh).
 * mxg_hadamard_rotate rotates x[rows, cols] in place along its rows (axis 1): every n consecutive values
 * of a row, times the sign of their position (rhN: mx_rh_sign(seed, rot_id, j), drawn as the CPU draws
 * them) when random, through mx_fwht's butterflies in its stage order, then one multiply by
 * mx_hadamard_norm(n). One thread per group of n (n <= 256, in local memory): written for exactness, not
 * speed. Bit-exact with the CPU in an object built with --fmad=false (mk/cuda.mk).
 */
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "mxlm/gpu.h"
#include "mxlm/mx_scalar.h"

namespace {

/* NMAX: the local buffer's size (the driver reserves local memory for every resident thread: 1 KiB each at
 * 256, ~270 MB on an H200, so the smaller rotations use smaller instances). */
template <int NMAX>
__global__ void k_hadamard_rows(float* __restrict__ x, int rows, int cols, int n, int random_sign, uint64_t seed,
                                uint32_t rot_id) {
    const int groups = cols / n;
    const size_t total = (size_t)rows * groups;
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < total; g += (size_t)gridDim.x * blockDim.x) {
        const size_t r = g / groups;
        const int j0 = (int)(g % groups) * n;
        float* p = x + r * cols + j0;
        float buf[NMAX];
        for (int k = 0; k < n; k++) buf[k] = random_sign ? p[k] * mx_rh_sign(seed, rot_id, (uint64_t)(j0 + k)) : p[k];
        for (int h = 1; h < n; h <<= 1) /* mx_fwht */
            for (int i = 0; i < n; i += 2 * h)
                for (int j = i; j < i + h; j++) {
                    const float a = buf[j], b = buf[j + h];
                    buf[j] = a + b;
                    buf[j + h] = a - b;
                }
        const float s = mx_hadamard_norm(n);
        for (int k = 0; k < n; k++) p[k] = buf[k] * s;
    }
}

}  // namespace

extern "C" int mxg_hadamard_rotate(float* x, int rows, int cols, int n, int random_sign, uint64_t seed,
                                   uint32_t rot_id, void* stream) {
    if (n < 2 || n > 256 || (n & (n - 1))) return mx_fail(MX_EINVAL, "Hadamard size %d: must be a power of two in 2..256", n);
    if (rows <= 0 || cols <= 0 || cols % n)
        return mx_fail(MX_EINVAL, "Hadamard h%d along a dimension of %d: not a multiple of %d", n, cols, n);
    const size_t total = (size_t)rows * (cols / n), nb = (total + 127) / 128;
    const unsigned grid = (unsigned)(nb < 8192 ? nb : 8192);
    cudaStream_t st = MXG_STREAM(stream);
    if (n <= 32) k_hadamard_rows<32><<<grid, 128, 0, st>>>(x, rows, cols, n, random_sign, seed, rot_id);
    else if (n <= 64) k_hadamard_rows<64><<<grid, 128, 0, st>>>(x, rows, cols, n, random_sign, seed, rot_id);
    else k_hadamard_rows<256><<<grid, 128, 0, st>>>(x, rows, cols, n, random_sign, seed, rot_id);
    CU_LAUNCHED();
    return MX_OK;
}
