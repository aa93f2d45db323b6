/* common.cuh: checked CUDA calls for the GPU library (errors go to mx_fail), the
 * argument check and grid-size helper of the layer files, the profiler marks.
 * No CPU twin: the GPU library's plumbing. */
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

/* Return an MX_EINVAL error with a message if cond is false. */
#define ARG_CHECK(cond, ...) do { if (!(cond)) return mx_fail(MX_EINVAL, __VA_ARGS__); } while (0)

/* Blocks of a 1-D grid over n elements (n > 0). */
inline unsigned blocks_for(size_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

/* Return an MX_EIO error if a cuBLAS(Lt) call fails (include <cublasLt.h> first). */
#define LT_TRY(call)                                                                                 \
    do {                                                                                             \
        cublasStatus_t s_ = (call);                                                                  \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                             \
            return mx_fail(MX_EIO, "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__, #call, (int)s_); \
    } while (0)

/* Step-time breakdown (nn/llama.cu): with MXLM_GPU_PROFILE=1 in the environment,
 * ranges of GPU work are timed with CUDA events by category. */
enum { PROF_QUANT = 0, PROF_GEMM, PROF_ATTN, PROF_HEAD, PROF_ELEM, PROF_OPT, PROF_N };
extern int g_mxg_prof;
/* The linear GEMM (mx_gemm_id) whose quantize and GEMM ranges are being timed, -1 outside one: the
 * profile also splits those two parts by Fprop / Dgrad / Wgrad (linear.cu's recipe_gemm sets it). */
extern int g_mxg_prof_gid;
void mxg_prof_mark(int cat, int begin, cudaStream_t st);
#define PROF_B(cat, st) do { if (g_mxg_prof) mxg_prof_mark((cat), 1, (st)); } while (0)
#define PROF_E(cat, st) do { if (g_mxg_prof) mxg_prof_mark((cat), 0, (st)); } while (0)

/* Free mx/fp8.cu's scratch (called by mxg_shutdown). */
void mxg_fp8_release(void);

#endif
