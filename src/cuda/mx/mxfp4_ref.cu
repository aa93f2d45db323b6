/*
 * mxfp4_ref.cu: MXFP4 in the reference form of src/mx/mxfp4.c (mx_quantize_fp4 + mx_dequantize_fp4), one
 * thread per block (1x32, 32x1, or a 32x32 tile), every scale rule: the path of the rules the fast kernels
 * of mxfp4.cu do not run (dither: floor's exponent, the scaled values x 3/4 before rounding, decoded
 * x 4/3; Tseng et al.'s recipe, mxfp4-tseng). The scalar steps are mx_scalar.h's (mx_e8m0_for_amax,
 * mx_fp4_prescale, the E2M1 rounding, the Philox SR stream at the element's row-major index,
 * mx_fp4_scaled), so codes, scales and decoded values are the CPU's bit for bit in an object built with
 * --fmad=false (mk/cuda.mk). Outputs: q x 2^e in BF16 (exact; dither's 4/3 left to the GEMM's caller,
 * linear.cu's block_gemm) and/or the decoded values in FP32 (the CPU's, 4/3 included).
 */
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/mx/blockq.cuh"
#include "mxlm/gpu.h"
#include "mxlm/mx_scalar.h"

namespace {

/* MXFP4's steps for k_ref_blocks (mx_quantize_fp4's, then mx_dequantize_fp4's value); h = q x 2^e (exact). */
struct Fp4RefQ {
    int rule, sr;
    uint64_t seed;
    uint32_t tid;
    struct Block { int bad; float inv, sc; };
    __device__ Block block(float amax, int bad) const {
        Block b;
        b.bad = bad;
        const uint8_t sb = bad ? (uint8_t)MX_E8M0_NAN : mx_e8m0_for_amax(amax, (mx_scale_rule)rule);
        b.inv = bad ? 0.0f : mx_exp2i(127 - (int)sb);
        b.sc = mx_e8m0_decode(sb);
        return b;
    }
    __device__ void elem(const Block& b, float x, size_t idx, int& clip, float& d, float& h) const {
        uint8_t code = 0;
        if (!b.bad) {
            const float v = mx_fp4_prescale(x, b.inv, (mx_scale_rule)rule);
            clip |= fabsf(v) > 6.0f;
            code = sr ? mx_e2m1_sr(v, mx_rand_u32(seed, MX_RNG_SR, tid, idx)) : mx_e2m1_rne(v);
        }
        const float q = mx_e2m1_decode(code);
        h = q * b.sc; /* a 2-bit significand times 2^e */
        d = mx_fp4_scaled(q, b.sc, (mx_scale_rule)rule);
    }
};

}  // namespace

extern "C" int mxg_fakequant_fp4_ref(const float* x, int rows, int cols, const mx_qopts* o, uint16_t* y16, float* y,
                                     unsigned long long* stats, unsigned long long* clip_total, void* stream) {
    ARG_CHECK(o->layout == MX_LAYOUT_1x32 || o->layout == MX_LAYOUT_32x1 || o->layout == MX_LAYOUT_32x32,
              "MXFP4: layout %s: must be 1x32, 32x1 or 32x32", mx_layout_name(o->layout));
    const int th = o->layout == MX_LAYOUT_1x32 ? 1 : MX_BLOCK, tw = o->layout == MX_LAYOUT_32x1 ? 1 : MX_BLOCK;
    ARG_CHECK(rows > 0 && cols > 0 && rows % th == 0 && cols % tw == 0, "MXFP4: %dx%d is not a whole number of %s blocks",
              rows, cols, mx_layout_name(o->layout));
    ARG_CHECK((unsigned)o->scale <= MX_SCALE_DITHER && (unsigned)o->round <= MX_ROUND_SR, "MXFP4: bad scale rule or rounding");
    const Fp4RefQ q = {(int)o->scale, o->round == MX_ROUND_SR, o->seed, o->tensor_id};
    return ref_blocks(x, rows, cols, th, tw, q, y16, y, stats, clip_total, stream);
}
