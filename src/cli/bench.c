/* bench.c: ./mxlm bench quant|hadamard|gemm — GPU benchmarks (CUDA build),
 * each printing a table of ratios against ceilings measured in the same run
 * (copy bandwidth; cuBLASLt BF16 and FP8 GEMMs). See docs/gpu.md. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "mxlm/engine.h"
#include "mxlm/mx.h"

static const char k_usage[] =
    "mxlm bench quant|hadamard|gemm [options]\n"
    "  quant     fused rotation + MXFP4 quantize kernels: GB/s vs a device-to-device copy\n"
    "  hadamard  H16 vs H32 (and none, h64, h128) fused quantize throughput\n"
    "  gemm      MXFP4 fast path vs cuBLASLt BF16 and FP8 per-tensor, TFLOP/s (Llama shapes by default)\n"
    "GPU benchmarks need the CUDA build (make cuda).";

int cmd_bench(int argc, char** argv) {
    int rows = 16384, cols = 4096, M = 16384, N = 14336, K = 4096, iters = 20;
    cli_opt opts[] = {
        {"rows", OPT_INT, &rows, "quant/hadamard: input rows (tokens), default 16384"},
        {"cols", OPT_INT, &cols, "quant/hadamard: input cols (hidden), default 4096"},
        {"M", OPT_INT, &M, "gemm: tokens, default 16384"},
        {"N", OPT_INT, &N, "gemm: output features, default 14336"},
        {"K", OPT_INT, &K, "gemm: reduction dim, default 4096"},
        {"iters", OPT_INT, &iters, "timed repetitions (median reported), default 20"},
    };
    char* pos[64];
    int npos = 0;
    int rc = cli_parse(argc, argv, "bench", k_usage, opts, (int)(sizeof opts / sizeof opts[0]), pos, &npos);
    if (rc) return rc == 1 ? 0 : rc;
    if (npos != 1 || (strcmp(pos[0], "quant") && strcmp(pos[0], "hadamard") && strcmp(pos[0], "gemm"))) {
        fprintf(stderr, "mxlm bench: name one benchmark: quant, hadamard or gemm\n");
        return 2;
    }
    if (rows <= 0 || cols <= 0 || M <= 0 || N <= 0 || K <= 0 || iters <= 0) {
        fprintf(stderr, "mxlm bench: sizes and --iters must be positive\n");
        return 2;
    }
    if (!mx_engine_gpu_built()) {
        fprintf(stderr, "mxlm bench %s: GPU benchmarks need the CUDA build (make cuda)\n", pos[0]);
        return 2;
    }
    if ((rc = mx_engine_gpu_bench(pos[0], rows, cols, M, N, K, iters))) {
        fprintf(stderr, "mxlm bench %s: %s\n", pos[0], mx_last_error());
        return 1;
    }
    return 0;
}
