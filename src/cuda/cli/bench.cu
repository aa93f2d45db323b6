/*
 * bench.cu: the GPU twin of src/cli/bench.c: the benchmarks behind ./mxlm
 * bench (CUDA build). Every table is a
 * ratio against a ceiling measured in the same run: a device-to-device copy
 * for the quantizers (bytes read + written), cuBLASLt BF16 and FP8
 * per-tensor GEMMs for the MXFP4 fast path. Timing: CUDA events around each
 * launch after warm-up, median of `iters`; inputs are random, never zeros.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "cuda/common.cuh"

namespace {

__global__ void k_fill_bf16(uint16_t* x, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t r = mx_rand_u32(seed, MX_RNG_DATA, 0, i);
        /* sum of 4 bytes ~ roughly normal; occasional outliers */
        float v = ((float)(r & 255) + (float)((r >> 8) & 255) + (float)((r >> 16) & 255) - 382.5f) / 128.0f;
        if (((r >> 24) & 255) == 0) v *= 50.0f;
        x[i] = mx_bf16_from_f32(v * scale);
    }
}

int fill(uint16_t* x, size_t n, uint64_t seed, float scale) {
    k_fill_bf16<<<132 * 16, 256>>>(x, n, seed, scale);
    CU_LAUNCHED();
    return MX_OK;
}

/* Median time in ms of fn() over iters runs (after 3 warm-ups); -1 on error. */
double time_ms(int iters, const std::function<int()>& fn) {
    cudaEvent_t a, b;
    if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess) return -1;
    for (int i = 0; i < 3; i++)
        if (fn()) return -1;
    std::vector<float> t;
    for (int i = 0; i < iters; i++) {
        cudaEventRecord(a);
        if (fn()) return -1;
        cudaEventRecord(b);
        if (cudaEventSynchronize(b) != cudaSuccess) return -1;
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        t.push_back(ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (cudaGetLastError() != cudaSuccess) return -1;
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

void print_gpu(void) {
    char info[512];
    mxg_device_info(info, sizeof info);
    printf("GPU: %s\n", info);
}

/* Copy ceiling: GB/s counting bytes read + written, over a buffer of `bytes`. */
double copy_gbs(size_t bytes, int iters) {
    void *s, *d;
    if (cudaMalloc(&s, bytes) != cudaSuccess || cudaMalloc(&d, bytes) != cudaSuccess) return -1;
    cudaMemset(s, 0x3c, bytes);
    double ms = time_ms(iters, [&]() { return cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess ? 0 : MX_EIO; });
    cudaFree(s);
    cudaFree(d);
    return ms > 0 ? 2.0 * bytes / (ms * 1e6) : -1;
}

struct QBuf {
    uint8_t *codes[2], *scales[2], *e4[2];
    float* fs[2];
    unsigned long long* cnt;
};

/* The GPU's line, then a BF16 input x [n] on the device (fill's values of seed). */
int bench_input(uint16_t** x, size_t n, int seed) {
    print_gpu();
    CU_TRY(cudaMalloc(x, n * 2));
    return fill(*x, n, seed, 1.0f);
}

}  // namespace

extern "C" int mxg_bench_quant(int rows, int cols, int iters) {
    size_t n = (size_t)rows * cols;
    uint16_t* x;
    int rc = bench_input(&x, n, 1);
    if (rc) return rc;
    QBuf q;
    for (int d = 0; d < 2; d++) {
        CU_TRY(cudaMalloc(&q.codes[d], n / 2));
        CU_TRY(cudaMalloc(&q.scales[d], n / 32));
        CU_TRY(cudaMalloc(&q.e4[d], n));
        CU_TRY(cudaMalloc(&q.fs[d], n / 128 * 4));
    }
    CU_TRY(cudaMalloc(&q.cnt, 64));
    float* xf; /* the same values in FP32: the trainer's operands */
    CU_TRY(cudaMalloc(&xf, n * 4));
    {
        std::vector<uint16_t> hb(n);
        std::vector<float> hf(n);
        CU_TRY(cudaMemcpy(hb.data(), x, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) hf[i] = mx_bf16_to_f32(hb[i]);
        CU_TRY(cudaMemcpy(xf, hf.data(), n * 4, cudaMemcpyHostToDevice));
    }
    double cbw = copy_gbs(1ull << 30, iters);
    printf("input: BF16 [%d, %d] (%.0f MiB; f32: the same values in FP32); copy ceiling: %.0f GB/s (cudaMemcpy D2D 1 GiB, "
           "read + write)\n", rows, cols, n * 2 / 1048576.0, cbw);
    printf("default: the kernel mxg_quantize picks (the fast kernel where it applies); general: the staged kernels "
           "alone (mxg_quant_set_fast(0))\n");
    printf("%-48s %9s %9s %8s %8s %11s %8s\n", "kernel (one read of x)", "time ms", "GB/s", "of copy", "Gelem/s",
           "general ms", "speedup");
    struct V { const char* name; int row, col, had, rnd, sr, fold, f32; };  // fold 1: +E4M3 VEC128, 2: E4M3 only, 3: E4M3 OUTER only
    const V vs[] = {
        {"f32 1x32 rne, h16, E4M3 VEC128 only (Fprop)", 1, 0, 16, 0, 0, 2, 1},
        {"f32 32x1 rne, h16, E4M3 VEC128 only (Wgrad)", 0, 1, 16, 0, 0, 2, 1},
        {"f32 1x32 + 32x1 rne, h16, E4M3 VEC128 only", 1, 1, 16, 0, 0, 2, 1},
        {"1x32 + 32x1 rne, h16, E4M3 VEC128 only", 1, 1, 16, 0, 0, 2, 0},
        {"1x32 rne, no rotation", 1, 0, 0, 0, 0, 0, 0},
        {"1x32 rne, h16", 1, 0, 16, 0, 0, 0, 0},
        {"32x1 rne, h16", 0, 1, 16, 0, 0, 0, 0},
        {"1x32 + 32x1 rne, none", 1, 1, 0, 0, 0, 0, 0},
        {"1x32 + 32x1 rne, h16  [goal >= 80%]", 1, 1, 16, 0, 0, 0, 0},
        {"1x32 + 32x1 rne, h32", 1, 1, 32, 0, 0, 0, 0},
        {"1x32 + 32x1 rne, rh16", 1, 1, 16, 1, 0, 0, 0},
        {"1x32 + 32x1 sr, h16", 1, 1, 16, 0, 1, 0, 0},
        {"1x32 + 32x1 rne, h16, + E4M3 VEC128 both", 1, 1, 16, 0, 0, 1, 0},
        {"1x32 rne, h16, E4M3 VEC128 only", 1, 0, 16, 0, 0, 2, 0},
        {"1x32 rne, h16, E4M3 OUTER only (one pass)", 1, 0, 16, 0, 0, 3, 0},
        {"1x32 rne, rh16", 1, 0, 16, 1, 0, 0, 0},
        {"1x32 sr, h16", 1, 0, 16, 0, 1, 0, 0},
        {"1x32 rne, h64 (shared-memory rotation)", 1, 0, 64, 0, 0, 0, 0},
        {"1x32 rne, h256 (shared-memory rotation)", 1, 0, 256, 0, 0, 0, 0},
    };
    for (const V& v : vs) {
        mxg_qspec s[2];
        mxg_qout o[2];
        memset(s, 0, sizeof s);
        memset(o, 0, sizeof o);
        size_t bytes = n * (v.f32 ? 4 : 2);
        for (int d = 0; d < 2; d++) {
            s[d].layout = d ? MX_LAYOUT_32x1 : MX_LAYOUT_1x32;
            s[d].scale = MX_SCALE_FLOOR;
            s[d].round = v.sr ? MX_ROUND_SR : MX_ROUND_RNE;
            s[d].seed = 5;
            s[d].tensor_id = d;
            s[d].had_n = v.had;
            s[d].had_random = v.rnd;
            s[d].had_seed = 9;
            if (!(d ? v.col : v.row)) continue;
            if (v.fold < 2) { o[d].codes = q.codes[d]; o[d].scales = q.scales[d]; bytes += n / 2 + n / 32; }
            if (v.fold) { o[d].e4m3 = q.e4[d]; o[d].fscale = q.fs[d]; bytes += n + (v.fold == 3 ? 0 : n / 32); }
            if (v.fold == 3) o[d].fold = MXG_FOLD_OUTER;
            o[d].counters = q.cnt + 2 * d;
        }
        auto run = [&]() {
            return mxg_quantize(v.f32 ? (const void*)xf : (const void*)x, v.f32 ? MXG_F32 : MXG_BF16, rows, cols,
                                v.row ? &s[0] : NULL, v.row ? &o[0] : NULL, v.col ? &s[1] : NULL, v.col ? &o[1] : NULL, NULL);
        };
        double ms = time_ms(iters, run);
        mxg_quant_set_fast(0);
        double ms_gen = time_ms(iters, run);
        mxg_quant_set_fast(1);
        if (ms < 0 || ms_gen < 0) { fprintf(stderr, "bench quant: %s: %s\n", v.name, mx_last_error()); return MX_EIO; }
        double gbs = bytes / (ms * 1e6);
        printf("%-48s %9.3f %9.0f %7.1f%% %8.1f %11.3f %7.2fx\n", v.name, ms, gbs, 100.0 * gbs / cbw, n / (ms * 1e6), ms_gen,
               ms_gen / ms);
    }
    cudaFree(xf);
    for (int d = 0; d < 2; d++) { cudaFree(q.codes[d]); cudaFree(q.scales[d]); cudaFree(q.e4[d]); cudaFree(q.fs[d]); }
    cudaFree(q.cnt);
    cudaFree(x);
    return MX_OK;
}

extern "C" int mxg_bench_hadamard(int rows, int cols, int iters) {
    size_t n = (size_t)rows * cols;
    uint16_t* x;
    int rc = bench_input(&x, n, 2);
    if (rc) return rc;
    uint8_t *c0, *c1, *s0, *s1;
    CU_TRY(cudaMalloc(&c0, n / 2)); CU_TRY(cudaMalloc(&c1, n / 2));
    CU_TRY(cudaMalloc(&s0, n / 32)); CU_TRY(cudaMalloc(&s1, n / 32));
    printf("input: BF16 [%d, %d]; fused rotation + MXFP4 (1x32 + 32x1 from one read, rne, floor)\n", rows, cols);
    printf("%-8s %9s %10s %10s\n", "rotation", "time ms", "Gelem/s", "vs h32");
    const int hs[] = {0, 16, 32, 64, 128};
    double t[5];
    for (int i = 0; i < 5; i++) {
        mxg_qspec a = {MX_LAYOUT_1x32, MX_SCALE_FLOOR, MX_ROUND_RNE, 1, 1, hs[i], 1, 0, 0, 0, 0};
        mxg_qspec b = a;
        b.layout = MX_LAYOUT_32x1;
        mxg_qout oa = {c0, s0, NULL, NULL, NULL, MXG_FOLD_VEC128, NULL}, ob = {c1, s1, NULL, NULL, NULL, MXG_FOLD_VEC128, NULL};
        t[i] = time_ms(iters, [&]() { return mxg_quantize(x, MXG_BF16, rows, cols, &a, &oa, &b, &ob, NULL); });
        if (t[i] < 0) { fprintf(stderr, "bench hadamard: %s\n", mx_last_error()); return MX_EIO; }
    }
    for (int i = 0; i < 5; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, hs[i] ? "h%d" : "none", hs[i]);
        printf("%-8s %9.3f %10.1f %9.3fx\n", nm, t[i], n / (t[i] * 1e6), t[2] / t[i]);
    }
    printf("H16 / H32 throughput: %.3fx (the paper: 1.08x on MI355X)\n", t[2] / t[1]);
    cudaFree(x); cudaFree(c0); cudaFree(c1); cudaFree(s0); cudaFree(s1);
    return MX_OK;
}

extern "C" int mxg_bench_gemm(int M, int N, int K, int iters) {
    print_gpu();
    if (K % 128) return mx_fail(MX_EINVAL, "bench gemm: K must be a multiple of 128");
    size_t na = (size_t)M * K, nb = (size_t)N * K, nc = (size_t)M * N;
    uint16_t *A, *B, *C, *wa, *wb;
    CU_TRY(cudaMalloc(&A, na * 2)); CU_TRY(cudaMalloc(&B, nb * 2)); CU_TRY(cudaMalloc(&C, nc * 2));
    CU_TRY(cudaMalloc(&wa, na * 2)); CU_TRY(cudaMalloc(&wb, nb * 2));
    int rc = fill(A, na, 3, 1.0f);
    if (!rc) rc = fill(B, nb, 4, 0.02f);
    if (rc) return rc;
    uint8_t *ea, *eb, *ca, *cb, *sa, *sb, *qa, *qb;
    float *fa, *fb, *oa, *ob, *sc;
    unsigned long long* cnt;
    CU_TRY(cudaMalloc(&ea, na)); CU_TRY(cudaMalloc(&eb, nb)); CU_TRY(cudaMalloc(&qa, na)); CU_TRY(cudaMalloc(&qb, nb));
    CU_TRY(cudaMalloc(&ca, na / 2)); CU_TRY(cudaMalloc(&cb, nb / 2)); CU_TRY(cudaMalloc(&sa, na / 32)); CU_TRY(cudaMalloc(&sb, nb / 32));
    CU_TRY(cudaMalloc(&fa, na / 128 * 4)); CU_TRY(cudaMalloc(&fb, nb / 128 * 4));
    CU_TRY(cudaMalloc(&oa, M * 4)); CU_TRY(cudaMalloc(&ob, N * 4)); CU_TRY(cudaMalloc(&sc, 64)); CU_TRY(cudaMalloc(&cnt, 64));
    CU_TRY(cudaMemset(cnt, 0, 64));
    mxg_qspec qs = {MX_LAYOUT_1x32, MX_SCALE_FLOOR, MX_ROUND_RNE, 1, 1, 16, 1, 0, 0, 0, 0};
    mxg_qout qoa = {NULL, NULL, ea, fa, cnt, MXG_FOLD_VEC128, NULL}, qob = {NULL, NULL, eb, fb, cnt + 2, MXG_FOLD_VEC128, NULL};
    mxg_qout qpa = {ca, sa, NULL, NULL, NULL, MXG_FOLD_VEC128, NULL}, qpb = {cb, sb, NULL, NULL, NULL, MXG_FOLD_VEC128, NULL};
    mxg_fp4 tA = {M, K, MX_LAYOUT_1x32, ca, sa}, tB = {N, K, MX_LAYOUT_1x32, cb, sb};
    double flop = 2.0 * M * N * K;
    auto qmx = [&]() {
        int r = mxg_quantize(A, MXG_BF16, M, K, &qs, &qoa, NULL, NULL, NULL);
        return r ? r : mxg_quantize(B, MXG_BF16, N, K, &qs, &qob, NULL, NULL, NULL);
    };
    auto q8 = [&]() {
        int r = mxg_fp8_quantize(A, MXG_BF16, na, MX_FP8_E4M3, NULL, sc, sc + 1, sc + 4, NULL, 0, qa, NULL);
        return r ? r : mxg_fp8_quantize(B, MXG_BF16, nb, MX_FP8_E4M3, NULL, sc + 8, sc + 9, sc + 12, NULL, 0, qb, NULL);
    };
    /* operands ready before timing GEMM-only variants */
    rc = qmx();
    if (!rc) rc = q8();
    if (!rc) rc = mxg_quantize(A, MXG_BF16, M, K, &qs, &qpa, NULL, NULL, NULL);
    if (!rc) rc = mxg_quantize(B, MXG_BF16, N, K, &qs, &qpb, NULL, NULL, NULL);
    if (rc) return rc;
    CU_TRY(cudaDeviceSynchronize());
    /* the OUTER operands get their own E4M3 buffers: the (otherwise unused) BF16 workspaces wa/wb */
    uint8_t* eoa = (uint8_t*)wa;  // na bytes fit in the BF16 workspace (2*na)
    uint8_t* eob = (uint8_t*)wb;
    struct Row { const char* name; double ms; };
    std::vector<Row> rows;
    auto add = [&](const char* nm, const std::function<int()>& f) {
        double ms = time_ms(iters, f);
        if (ms < 0) { printf("%-52s failed: %s\n", nm, mx_last_error()); ms = -1; }
        rows.push_back({nm, ms});
        return ms;
    };
    double t_bf16 = add("BF16 x BF16 (cuBLASLt)", [&]() {
        return mxg_gemm_tn(MXG_SCALE_NONE, A, MXG_BF16, NULL, B, MXG_BF16, NULL, C, MXG_BF16, M, N, K, NULL);
    });
    double t_fp8 = add("FP8 E4M3 x E4M3 per-tensor (cuBLASLt)", [&]() {
        return mxg_gemm_tn(MXG_SCALE_TENSOR, qa, MXG_E4M3, sc + 4, qb, MXG_E4M3, sc + 12, C, MXG_BF16, M, N, K, NULL);
    });
    add("FP8 per-tensor incl. amax + cast of both", [&]() {
        int r = q8();
        return r ? r : mxg_gemm_tn(MXG_SCALE_TENSOR, qa, MXG_E4M3, sc + 4, qb, MXG_E4M3, sc + 12, C, MXG_BF16, M, N, K, NULL);
    });
    add("MXFP4 fast path, FP8 VEC128_32F", [&]() {
        return mxg_gemm_tn(MXG_SCALE_VEC128, ea, MXG_E4M3, fa, eb, MXG_E4M3, fb, C, MXG_BF16, M, N, K, NULL);
    });
    add("MXFP4 fast path VEC128 incl. h16 quantize of both", [&]() {
        int r = qmx();
        return r ? r : mxg_gemm_tn(MXG_SCALE_VEC128, ea, MXG_E4M3, fa, eb, MXG_E4M3, fb, C, MXG_BF16, M, N, K, NULL);
    });
    {
        int r = mxg_fold(&tA, 1, MXG_FOLD_OUTER, eoa, oa, NULL, NULL);
        if (!r) r = mxg_fold(&tB, 1, MXG_FOLD_OUTER, eob, ob, NULL, NULL);
        if (r) return r;
    }
    add("MXFP4 fast path, FP8 OUTER_VEC_32F", [&]() {
        return mxg_gemm_tn(MXG_SCALE_OUTER, eoa, MXG_E4M3, oa, eob, MXG_E4M3, ob, C, MXG_BF16, M, N, K, NULL);
    });
    mxg_qout qua = {NULL, NULL, eoa, oa, cnt, MXG_FOLD_OUTER, NULL}, qub = {NULL, NULL, eob, ob, cnt + 2, MXG_FOLD_OUTER, NULL};
    add("MXFP4 fast path OUTER incl. h16 quantize of both", [&]() {
        int r = mxg_quantize(A, MXG_BF16, M, K, &qs, &qua, NULL, NULL, NULL);
        if (!r) r = mxg_quantize(B, MXG_BF16, N, K, &qs, &qub, NULL, NULL, NULL);
        return r ? r : mxg_gemm_tn(MXG_SCALE_OUTER, eoa, MXG_E4M3, oa, eob, MXG_E4M3, ob, C, MXG_BF16, M, N, K, NULL);
    });
    add("MXFP4 fast path OUTER incl. quantize of A only (W cached)", [&]() {
        int r = mxg_quantize(A, MXG_BF16, M, K, &qs, &qua, NULL, NULL, NULL);
        return r ? r : mxg_gemm_tn(MXG_SCALE_OUTER, eoa, MXG_E4M3, oa, eob, MXG_E4M3, ob, C, MXG_BF16, M, N, K, NULL);
    });
    /* exact emulation: its own BF16 workspaces */
    uint16_t *xa, *xb;
    CU_TRY(cudaMalloc(&xa, na * 2)); CU_TRY(cudaMalloc(&xb, nb * 2));
    add("MXFP4 exact emulation (dequant + BF16 GEMM)", [&]() { return mxg_gemm_mxfp4_exact(&tA, &tB, xa, xb, C, MXG_BF16, NULL); });
    printf("GEMM C[M,N] = A[M,K] B[N,K]^T, M %d, N %d, K %d (%.1f GFLOP), BF16 output, FP32 accumulation, FAST_ACCUM off\n", M, N,
           K, flop / 1e9);
    printf("%-52s %9s %9s %8s %8s\n", "path", "time ms", "TFLOP/s", "vs BF16", "vs FP8");
    for (const Row& r : rows) {
        if (r.ms < 0) continue;
        printf("%-52s %9.3f %9.1f %7.2fx %7.2fx\n", r.name, r.ms, flop / (r.ms * 1e9), t_bf16 / r.ms, t_fp8 / r.ms);
    }
    unsigned long long hc[4];
    CU_TRY(cudaMemcpy(hc, cnt, 32, cudaMemcpyDeviceToHost));
    printf("(folds: blocks outside the 14-binade window, summed over all timed runs (VEC128 and OUTER): A %llu, B %llu)\n", hc[1], hc[3]);
    cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(wa); cudaFree(wb); cudaFree(xa); cudaFree(xb);
    cudaFree(ea); cudaFree(eb); cudaFree(qa); cudaFree(qb); cudaFree(ca); cudaFree(cb); cudaFree(sa); cudaFree(sb);
    cudaFree(fa); cudaFree(fb); cudaFree(oa); cudaFree(ob); cudaFree(sc); cudaFree(cnt);
    mxg_shutdown();
    return MX_OK;
}
