/* gpu.h: the GPU path (CUDA build only: compiled with -DMXLM_CUDA). */
#ifndef MXLM_GPU_H
#define MXLM_GPU_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
/* Describe the GPU found (name, memory, compute capability, CUDA and cuBLASLt
 * versions) into buf; return 0 if a usable GPU is present, -1 otherwise. */
int mxg_device_info(char* buf, size_t n);
#ifdef __cplusplus
}
#endif
#endif
