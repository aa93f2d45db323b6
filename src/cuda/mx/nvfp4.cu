/*
 * nvfp4.cu: the twin of src/mx/nvfp4.c on the GPU: NVFP4 (E2M1 in blocks of 16 with an E4M3 block scale
 * and an FP32 tensor scale; layouts 1x16, 16x1, 16x16; RNE or SR) through the scalar steps of
 * mx_scalar.h (mx_nvfp4_tensor_scale, mx_nvfp4_block_scale, mx_nvfp4_mult, the E2M1 rounding, the
 * Philox SR stream at the element's row-major index), so the codes, scales and decoded values are
 * mx_quantize_nvfp4's bit for bit in an object built with --fmad=false (mk/cuda.mk). What comes out
 * is what the GEMM takes: q x sb in BF16 (exact: a 2-bit by 4-bit significand) with the tensor
 * scale left to the GEMM's caller (linear.cu: 1 / (S_a S_b) on the product), and/or (q x sb) / S
 * in FP32 (mx_dequantize_nvfp4's values; telemetry and the tests). One thread per block.
 */
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/mx/blockq.cuh"
#include "mxlm/gpu.h"
#include "mxlm/mx_scalar.h"

namespace {

constexpr int NB = MX_NVFP4_BLOCK;

/* mx_amax_finite: the largest |x| over the finite elements into *out (zeroed by the caller): a max is
 * exact in any order, and non-negative floats order as their bits, so an unsigned atomicMax is the
 * CPU's value whatever the schedule. blockDim.x a multiple of 32. */
__global__ void k_amax_finite(const float* __restrict__ x, size_t n, float* out) {
    float m = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float a = fabsf(x[i]);
        if (a <= 3.4028235e38f && a > m) m = a;
    }
    m = block_max_warps(m); /* one atomic per block: a warp's each serialized on one address took 25 us a launch */
    if (threadIdx.x == 0 && m > 0.0f) atomicMax((unsigned*)out, __float_as_uint(m));
}

/* S = mx_nvfp4_tensor_scale(amax) into amax_S[1]. */
__global__ void k_tensor_scale(float* amax_S) { amax_S[1] = mx_nvfp4_tensor_scale(amax_S[0]); }

/* NVFP4's steps for k_ref_blocks (mx_quantize_nvfp4's, then mx_nvfp4_decode); h = q x sb (exact). */
struct Nvfp4Q {
    const float* amax_S; /* device: [1] the tensor scale */
    int sr;
    uint64_t seed;
    uint32_t tid;
    struct Block { float S, m, sbv; int zero; };
    __device__ Block block(float amax, int bad) const {
        Block b;
        b.S = amax_S[1];
        const uint8_t sb = bad ? (uint8_t)MX_E4M3_NAN : mx_nvfp4_block_scale(amax, b.S);
        b.zero = bad || sb == 0; /* codes 0: NaN through the scale, or sb = 0 */
        b.m = b.zero ? 0.0f : mx_nvfp4_mult(sb, b.S);
        b.sbv = mx_e4m3_decode(sb);
        return b;
    }
    __device__ void elem(const Block& b, float x, size_t idx, int& clip, float& d, float& h) const {
        uint8_t code = 0;
        if (!b.zero) {
            const float v = x * b.m;
            clip |= fabsf(v) > 6.0f;
            code = sr ? mx_e2m1_sr(v, mx_rand_u32(seed, MX_RNG_SR, tid, idx)) : mx_e2m1_rne(v);
        }
        h = mx_e2m1_decode(code) * b.sbv;
        d = h / b.S;
    }
};

}  // namespace

extern "C" int mxg_amax_finite(const float* x, size_t n, float* out, void* stream) {
    cudaStream_t st = MXG_STREAM(stream);
    CU_TRY(cudaMemsetAsync(out, 0, sizeof(float), st));
    if (!n) return MX_OK;
    k_amax_finite<<<block_grid(n, 256), 256, 0, st>>>(x, n, out);
    CU_LAUNCHED();
    return MX_OK;
}

extern "C" int mxg_fakequant_nvfp4(const float* x, int rows, int cols, const mx_qopts* o, float* amax_S, uint16_t* y16,
                                   float* y, unsigned long long* stats, unsigned long long* clip_total, void* stream) {
    const int th = o->layout == MX_LAYOUT_1x16 ? 1 : NB, tw = o->layout == MX_LAYOUT_16x1 ? 1 : NB;
    ARG_CHECK(o->layout == MX_LAYOUT_1x16 || o->layout == MX_LAYOUT_16x1 || o->layout == MX_LAYOUT_16x16,
              "NVFP4: layout %s: must be 1x16, 16x1 or 16x16", mx_layout_name(o->layout));
    ARG_CHECK(rows > 0 && cols > 0 && rows % th == 0 && cols % tw == 0, "NVFP4: %dx%d is not a whole number of %dx%d blocks",
              rows, cols, th, tw);
    ARG_CHECK((unsigned)o->round <= MX_ROUND_SR, "NVFP4: bad rounding");
    int rc = mxg_amax_finite(x, (size_t)rows * cols, amax_S, stream);
    if (rc) return rc;
    k_tensor_scale<<<1, 1, 0, MXG_STREAM(stream)>>>(amax_S);
    CU_LAUNCHED();
    const Nvfp4Q q = {amax_S, o->round == MX_ROUND_SR, o->seed, o->tensor_id};
    return ref_blocks(x, rows, cols, th, tw, q, y16, y, stats, clip_total, stream);
}
