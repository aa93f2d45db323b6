/*
 * main_run.cu: build/cuda/tests/gpu/run, the GPU kernels against the CPU
 * library (src/mx), on an H100/H200: the quantizers (test_mxfp4.cu,
 * test_fp8.cu, test_nvfp4.cu: NVFP4, MXFP8, MXFP4's reference form, the standalone rotation) and the GEMMs (test_gemm.cu). Run: make test-gpu
 * [T=substring]. Ends with "N passed, N failed".
 */
#include <time.h>

#include "test.cuh"

int main(int argc, char** argv) {
    const char* filter = NULL;
    g_msg_cap = 40;
    if (gpu_test_start(argc, argv, 0x9E3779B97F4A7C15ull)) return 1;
    if (!getenv("MXG_SEED")) g_rng ^= (uint64_t)time(NULL); /* fresh inputs each run; the seed is printed */
    printf("input seed: MXG_SEED=0x%llx\n", (unsigned long long)g_rng);
    test_e2m1();
    test_quant(filter);
    test_fp8(filter);
    test_nvfp4(filter);
    test_mxfp8(filter);
    test_fp4_ref(filter);
    test_rotate(filter);
    gemm_case(256, 384, 512, 16, 0, filter);
    gemm_case(128, 256, 4096, 32, 0, filter);
    gemm_case(256, 128, 1024, 16, 1, filter);
    test_quant_swiglu(filter); /* the inputs of the cases before it stay those of their MXG_SEED */
    test_outer_fixup();        /* after it, for the same reason */
    test_outer_rescale();
    mxg_shutdown();
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
