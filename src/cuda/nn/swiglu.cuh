/*
 * swiglu.cuh: the SwiGLU expressions on the device, once (src/nn/swiglu.c's, in its order), for
 * swiglu.cu's kernels and for the fused SwiGLU-backward quantizer (mx/mxfp4.cu's
 * mxg_quantize_swiglu_bwd). Both files are built with --fmad=false, so these round as the CPU's.
 *   forward   h = g * sigmoid(g) * up
 *   backward  dup = dh * g sigmoid(g);  dgate = dh * up * s (1 + g (1 - s)),  s = sigmoid(g)
 */
#ifndef MXLM_CUDA_SWIGLU_CUH
#define MXLM_CUDA_SWIGLU_CUH

__device__ __forceinline__ float swiglu_h(float g, float u) {
    const float sg = 1.0f / (1.0f + expf(-g));
    return g * sg * u;
}
__device__ __forceinline__ void swiglu_d(float g, float u, float d, float* dg, float* du) {
    const float sg = 1.0f / (1.0f + expf(-g)), silu = g * sg;
    *du = d * silu;
    *dg = d * u * sg * (1.0f + g * (1.0f - sg));
}

#endif
