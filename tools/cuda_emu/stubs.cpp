#include <stdio.h>
#include "mxlm/gpu.h"
extern "C" int mxg_device_info(char* buf, size_t n) { snprintf(buf, n, "host emulation (cuda_emu.h)"); return 0; }
extern "C" void mxg_shutdown(void) {}
