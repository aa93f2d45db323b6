/* common.cuh: checked CUDA calls for the GPU library (errors go to mx_fail). */
#ifndef MXLM_CUDA_COMMON_CUH
#define MXLM_CUDA_COMMON_CUH
#include <cuda_runtime.h>
#include <stdint.h>

#include "mxlm/gpu.h"
#include "mxlm/mx.h"

/* Return an MX_EIO error from the enclosing function if a CUDA call fails. */
#define CU_TRY(call)                                                                        \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess)                                                              \
            return mx_fail(MX_EIO, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)
/* After a launch: the launch error (not a sync). */
#define CU_LAUNCHED() CU_TRY(cudaGetLastError())

#define MXG_STREAM(s) ((cudaStream_t)(s))

/* Free quant.cu's scratch (called by mxg_shutdown). */
void mxg_quant_release(void);

#endif
