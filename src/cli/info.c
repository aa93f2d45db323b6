/* info.c: ./mxlm info — version and build features. */
#include <stdio.h>
#include <zlib.h>
#include <zstd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli/cli.h"
#include "mxlm/engine.h"
#include "mxlm/mx.h"

int cmd_info(int argc, char** argv) {
    int rc = cli_parse(argc, argv, "info", "", NULL, 0, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    printf("mxlm %s\n", MXLM_VERSION);
    printf("build:    %s, C11, %s\n", __DATE__,
#ifdef __OPTIMIZE__
           "optimized"
#else
           "debug"
#endif
    );
#ifdef _OPENMP
    printf("openmp:   yes (%d threads)\n", omp_get_max_threads());
#else
    printf("openmp:   no\n");
#endif
    printf("zlib:     %s\nzstd:     %s\n", zlibVersion(), ZSTD_versionString());
    char buf[512];
    const int gpu = mx_engine_gpu_info(buf, sizeof buf);
    if (gpu == 1) printf("cuda:     yes; GPU: %s\n", buf);
    else if (gpu == 0) printf("cuda:     built with CUDA, but no usable GPU: %s\n", buf);
    else printf("cuda:     no (CPU build; `make cuda` builds the GPU path)\n");
    printf("formats:  MXFP4 (E2M1 + E8M0; layouts 1x32 32x1 32x32; scale floor even ceil; rne sr),\n"
           "          FP8 E4M3/E5M2 per-tensor, BF16; Hadamard hN/rhN n=2..256\n");
    return 0;
}
