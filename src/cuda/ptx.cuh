/* ptx.cuh: PTX wrappers that more than one kernel family uses (the flash attention's tiles, the MXFP4
 * fast quantizer's column pass): ldmatrix, plain and transposed. No CPU twin: data movement only.
 *
 * ldmatrix.m8n8.x4 (b16): threads 8i .. 8i + 7 give the 16-byte rows (addresses) of matrix i = 0..3;
 * thread t receives one 32-bit word of each matrix in r[i]:
 *   ldsm4   the row t / 4, elements 2 (t % 4) (low half) and 2 (t % 4) + 1
 *   ldsm4t  element t / 4 of the rows 2 (t % 4) (low half) and 2 (t % 4) + 1 (the transpose). */
#ifndef MXLM_CUDA_PTX_CUH
#define MXLM_CUDA_PTX_CUH
#include <stdint.h>

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

}  // namespace

#endif
