/* ptx.cuh: PTX wrappers that more than one kernel family uses (the flash attention's tiles, the MXFP4
 * fast quantizer's column pass, the element-wise kernels' BF16 stores): ldmatrix, plain and transposed, and
 * the paired BF16 conversion. No CPU twin: data movement, and a rounding that is mx_bf16_from_f32's.
 *
 * ldmatrix.m8n8.x4 (b16): threads 8i .. 8i + 7 give the 16-byte rows (addresses) of matrix i = 0..3;
 * thread t receives one 32-bit word of each matrix in r[i]:
 *   ldsm4   the row t / 4, elements 2 (t % 4) (low half) and 2 (t % 4) + 1
 *   ldsm4t  element t / 4 of the rows 2 (t % 4) (low half) and 2 (t % 4) + 1 (the transpose). */
#ifndef MXLM_CUDA_PTX_CUH
#define MXLM_CUDA_PTX_CUH
#include <stdint.h>

#include "mxlm/mx_scalar.h"

namespace {

__device__ __forceinline__ void ldsm4(uint32_t r[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm4t(uint32_t r[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* lo and hi rounded to BF16 and packed (lo the low half): mx_bf16_from_f32's bits (RNE, NaN the canonical 0x7fff)
 * by one cvt.rn.bf16x2.f32 for the pair, where the integer form takes about five instructions a value. */
__device__ __forceinline__ uint32_t bf16x2_rn(float lo, float hi) {
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else /* a host emulation of the kernels (tools/cuda_emu): the scalar form, twice */
    return (uint32_t)mx_bf16_from_f32(lo) | (uint32_t)mx_bf16_from_f32(hi) << 16;
#endif
}

}  // namespace

#endif
