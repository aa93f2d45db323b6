/*
 * elem.cuh: element access of the GPU kernels that read or write FP32 and BF16 tensors alike,
 * written once. No CPU twin: the CPU keeps FP32 and rounds with mx_bf16_fakequant; these are
 * the same conversions (mx_scalar.h: BF16 widened exactly, rounded RNE). No multiply: the
 * object's --fmad setting does not touch them.
 *   elem_get / elem_put   one element, as float
 *   Vec<T>, unpack<T>     16-byte vectors (4 floats or 8 BF16) into floats; vec_ok: a pointer and
 *                         count that allow them
 *   pack8_bf16            8 floats rounded into one 16-byte BF16 vector (ptx.cuh's bf16x2_rn)
 *   pack4_bf16            4 floats rounded into one 8-byte BF16 vector
 */
#ifndef MXLM_CUDA_ELEM_CUH
#define MXLM_CUDA_ELEM_CUH
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/ptx.cuh" /* bf16x2_rn */
#include "mxlm/mx_scalar.h"

namespace {

__device__ __forceinline__ float elem_get(const float* p) { return *p; }
__device__ __forceinline__ float elem_get(const uint16_t* p) { return mx_bf16_to_f32(*p); } /* exact */
__device__ __forceinline__ void elem_put(float* p, float v) { *p = v; }
__device__ __forceinline__ void elem_put(uint16_t* p, float v) { *p = mx_bf16_from_f32(v); } /* RNE */

template <typename T> struct Vec;
template <> struct Vec<float> { static constexpr int N = 4; typedef float4 V; };
template <> struct Vec<uint16_t> { static constexpr int N = 8; typedef uint4 V; };
template <typename T> __device__ __forceinline__ void unpack(const typename Vec<T>::V& v, float (&f)[Vec<T>::N]);
template <> __device__ __forceinline__ void unpack<float>(const float4& v, float (&f)[4]) {
    f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
}
template <> __device__ __forceinline__ void unpack<uint16_t>(const uint4& v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    for (int k = 0; k < 4; k++) { f[2 * k] = mx_bf16_to_f32((uint16_t)w[k]); f[2 * k + 1] = mx_bf16_to_f32((uint16_t)(w[k] >> 16)); }
}
template <typename T> bool vec_ok(const void* p, size_t n) { return !((uintptr_t)p & 15) && n % Vec<T>::N == 0; }

__device__ __forceinline__ uint4 pack8_bf16(const float (&f)[8]) {
    return make_uint4(bf16x2_rn(f[0], f[1]), bf16x2_rn(f[2], f[3]), bf16x2_rn(f[4], f[5]), bf16x2_rn(f[6], f[7]));
}

__device__ __forceinline__ uint2 pack4_bf16(float a, float b, float c, float d) {
    return make_uint2(bf16x2_rn(a, b), bf16x2_rn(c, d));
}

/* The |y| bits of a value as stored (BF16: rounded, widened to float), k_amax's order: an amax over them is an integer
 * max (NaN above Inf), what an FP8 cast of the stored tensor would compute. */
__device__ __forceinline__ unsigned stored_abs_bits(float, float v) { return mx_f2u(v) & 0x7fffffffu; }
__device__ __forceinline__ unsigned stored_abs_bits(uint16_t, float v) {
    return ((uint32_t)mx_bf16_from_f32(v) << 16) & 0x7fffffffu;
}

/* The largest |x| bits of a stored vector (8 BF16 values widened, or 4 floats), k_amax's order (NaN above Inf): an
 * integer max over them is the amax an FP8 cast of the stored tensor computes (the producers' _amax kernels). */
__device__ __forceinline__ unsigned amax_bits(const uint4& p) {
    const uint32_t w[4] = {p.x, p.y, p.z, p.w};
    unsigned m = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) m = max(m, max((w[k] & 0x7fffu) << 16, (w[k] >> 16 & 0x7fffu) << 16));
    return m;
}
__device__ __forceinline__ unsigned amax_bits(const float4& v) {
    return max(max(mx_f2u(v.x) & 0x7fffffffu, mx_f2u(v.y) & 0x7fffffffu),
               max(mx_f2u(v.z) & 0x7fffffffu, mx_f2u(v.w) & 0x7fffffffu));
}

}  // namespace

#endif
