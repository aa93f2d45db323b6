/*
 * mxfp8.cu: the twin of src/mx/mxfp8.c on the GPU: MXFP8 (OCP MX v1.0: E4M3 elements with an E8M0 scale
 * per 32; layouts 1x32, 32x1; scale rules floor and ceil; RNE) through the scalar steps of mx_scalar.h
 * (mx_mxfp8_e8m0_for_amax, mx_mxfp8_encode / _decode), so codes, scales and decoded values are
 * mx_quantize_mxfp8's bit for bit in an object built with --fmad=false (mk/cuda.mk). What comes out is
 * the decoded values, E4M3 x 2^e: in BF16 for the GEMM (exact: a 4-bit significand, unless the value
 * is below BF16's normal range, 2^-126) and/or in FP32 (mx_dequantize_mxfp8's). One thread per block.
 */
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/mx/blockq.cuh"
#include "mxlm/gpu.h"
#include "mxlm/mx_scalar.h"

namespace {

/* MXFP8's steps for k_ref_blocks (mx_quantize_mxfp8's, then mx_mxfp8_decode); h = the decoded value. */
struct Mxfp8Q {
    int rule;
    struct Block { uint8_t sb; int bad; float inv; };
    __device__ Block block(float amax, int bad) const {
        Block b;
        b.bad = bad;
        b.sb = bad ? (uint8_t)MX_E8M0_NAN : mx_mxfp8_e8m0_for_amax(amax, (mx_scale_rule)rule);
        b.inv = bad ? 0.0f : mx_exp2i(127 - (int)b.sb);
        return b;
    }
    __device__ void elem(const Block& b, float x, size_t, int& clip, float& d, float& h) const {
        uint8_t q = 0;
        if (!b.bad) {
            clip |= fabsf(x * b.inv) > MX_E4M3_MAX;
            q = mx_mxfp8_encode(x, b.sb);
        }
        d = h = mx_mxfp8_decode(q, b.sb);
    }
};

}  // namespace

extern "C" int mxg_fakequant_mxfp8(const float* x, int rows, int cols, const mx_qopts* o, uint16_t* y16, float* y,
                                   unsigned long long* stats, unsigned long long* clip_total, void* stream) {
    ARG_CHECK(o->layout == MX_LAYOUT_1x32 || o->layout == MX_LAYOUT_32x1, "MXFP8: layout %s: must be 1x32 or 32x1",
              mx_layout_name(o->layout));
    const int th = o->layout == MX_LAYOUT_32x1 ? MX_BLOCK : 1, tw = MX_BLOCK + 1 - th;
    ARG_CHECK(rows > 0 && cols > 0 && rows % th == 0 && cols % tw == 0, "MXFP8: %dx%d is not a whole number of %s blocks",
              rows, cols, mx_layout_name(o->layout));
    ARG_CHECK((o->scale == MX_SCALE_FLOOR || o->scale == MX_SCALE_CEIL) && o->round == MX_ROUND_RNE,
              "MXFP8: the scale rule must be floor or ceil, the rounding rne");
    const Mxfp8Q q = {(int)o->scale};
    return ref_blocks(x, rows, cols, th, tw, q, y16, y, stats, clip_total, stream);
}
