/*
 * test.cuh: the harness of the GPU test programs (as tests/test.h serves the
 * CPU tests): build/cuda/tests/gpu/run (main_run.cu: the quantizers and the
 * GEMMs, tests/gpu/test_{mxfp4,fp8,gemm}.cu) and build/cuda/tests/gpu/layers
 * (main_layers.cu: the model layers, tests/gpu/test_<layer>.cu). A case
 * function draws its inputs from the program's random stream (g_rng, seeded
 * by main: the cases run in main's order, so the inputs are those of that
 * order), runs when its name (or group) contains one of the command-line
 * filters (none: all), and counts as passed or failed; the program ends with
 * "N passed, N failed".
 */
#ifndef MXLM_TESTS_GPU_TEST_CUH
#define MXLM_TESTS_GPU_TEST_CUH
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "mxlm/gpu.h"
#include "mxlm/gpu_model.h"
#include "mxlm/linear_plan.h"
#include "mxlm/model.h"
#include "mxlm/mx.h"
#include "mxlm/recipe.h"
#include "mxlm/trainer.h"

typedef std::vector<float> vecf;

/* ---- cases: counts, filters, failures ---- */
inline int g_pass = 0, g_fail = 0;
inline int g_fail_case = 0;        /* the current case has failed */
inline int g_msgs = 0, g_msg_cap = 1 << 30; /* FAIL lines printed; at most g_msg_cap (run: 40) */
inline int g_nfilt = 0;
inline char** g_filt = NULL;

/* Run a case whose name (or group, where given) contains any of the command-line filters (none: all). */
inline int wanted(const char* name, const char* group = NULL) {
    if (!g_nfilt) return 1;
    for (int i = 0; i < g_nfilt; i++)
        if (strstr(name, g_filt[i]) || (group && !strcmp(group, g_filt[i]))) return 1;
    return 0;
}
inline void fail(const char* fmt, ...) {
    g_fail_case = 1;
    if (g_msgs++ < g_msg_cap) {
        fflush(stdout); /* the case's own lines first (a log of both streams keeps them in order) */
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "    FAIL: ");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
}
/* A named case (the layer tests): begin prints its name, end counts it. */
inline void begin(const char* name) {
    g_fail_case = 0;
    printf("[%s]\n", name);
}
inline void end(void) {
    if (g_fail_case) g_fail++;
    else g_pass++;
}

#define CK(call)                                                                                            \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) {                                                                            \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));          \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)
/* A library call: a failure fails the case (MX also returns from the case function). */
#define MX(call)                                                                                     \
    do {                                                                                             \
        int r_ = (call);                                                                             \
        if (r_) { fail("%s:%d: %s -> %d: %s", __FILE__, __LINE__, #call, r_, mx_last_error()); return; } \
    } while (0)
#define MXC(call)                                                                                           \
    do {                                                                                                    \
        int r_ = (call);                                                                                    \
        if (r_) fail("%s:%d: %s -> %d: %s", __FILE__, __LINE__, #call, r_, mx_last_error());                \
    } while (0)

/* ---- random inputs: splitmix64 from g_rng (each main seeds it; MXG_SEED overrides) ---- */
inline uint64_t g_rng = 0;
inline uint64_t rnd64(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* A test program's start: its arguments are the filters (wanted), the GPU is named (0) or none is usable (1, said
 * on stderr), and g_rng = seed unless MXG_SEED gives one. */
inline int gpu_test_start(int argc, char** argv, uint64_t seed) {
    g_nfilt = argc - 1;
    g_filt = argv + 1;
    g_rng = seed;
    char info[512];
    if (mxg_device_info(info, sizeof info)) {
        fprintf(stderr, "no usable GPU: %s\n", info);
        return 1;
    }
    printf("GPU: %s\n", info);
    if (getenv("MXG_SEED")) g_rng = strtoull(getenv("MXG_SEED"), NULL, 0);
    return 0;
}
inline double rndu(void) { return (rnd64() >> 11) * (1.0 / 9007199254740992.0); }
/* A standard normal (Box-Muller) in double (run) and rounded to float (layers). */
inline double rndn(void) {
    double u = rndu() + 1e-300, v = rndu();
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
inline float rndnf(void) {
    double u = rndu() + 1e-300, v = rndu();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}
inline vecf randn(size_t n, float s) {
    vecf x(n);
    for (auto& e : x) e = s * rndnf();
    return x;
}

/* ---- device buffers (run: raw pointers; layers: RAII) ---- */
template <typename T> inline T* dalloc(size_t n) {
    T* p;
    CK(cudaMalloc(&p, n * sizeof(T) + 16));
    return p;
}
template <typename T> inline std::vector<T> d2h(const T* d, size_t n) {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
inline int first_diff(const uint8_t* a, const uint8_t* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return (int)i;
    return -1;
}

/* ---- device buffers ---- */
struct Dev {
    void* p = NULL;
    size_t bytes = 0;
    explicit Dev(size_t b) : bytes(b) { CK(cudaMalloc(&p, b ? b : 4)); }
    Dev(const Dev&) = delete;
    Dev& operator=(const Dev&) = delete;
    ~Dev() { cudaFree(p); }
    float* f() { return (float*)p; }
    int32_t* i() { return (int32_t*)p; }
    double* d() { return (double*)p; }
    uint16_t* h() { return (uint16_t*)p; }
    void poison() { CK(cudaMemset(p, 0xff, bytes)); } /* NaN in FP32 and in BF16 */
};
template <class T>
inline void up(Dev& d, const std::vector<T>& h) { CK(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
template <class T>
inline std::vector<T> down(const Dev& d, size_t n) {
    std::vector<T> h(n);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h.data(), d.p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
inline vecf downf(const Dev& d, size_t n) { return down<float>(d, n); }

/* ---- comparisons ---- */
enum { EXACT = 0, ELEM = 1, NORM = 2, FROB = 3 };
inline void compare(const char* what, const vecf& g, const vecf& c, int mode, double tol) {
    size_t n = c.size(), same = 0, bad = 0, worst_i = 0;
    double amax = 0, emax = 0, worst = 0;
    int nan = 0;
    double d2 = 0, c2 = 0;
    for (size_t i = 0; i < n; i++) {
        amax = fmax(amax, fabs((double)c[i]));
        d2 += ((double)g[i] - c[i]) * ((double)g[i] - c[i]);
        c2 += (double)c[i] * c[i];
    }
    if (mode == FROB) { /* ||g - c|| / ||c|| over the whole tensor */
        double fr = c2 > 0 ? sqrt(d2 / c2) : sqrt(d2);
        printf("    %-22s frob: ||gpu - cpu|| / ||cpu|| = %.3g (tol %.1g)\n", what, fr, tol);
        if (!(fr <= tol)) fail("%s: relative Frobenius error %.3g above %.1g", what, fr, tol);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        double a = g[i], b = c[i], e = fabs(a - b);
        if (memcmp(&g[i], &c[i], 4) == 0) { same++; continue; }
        if (a != a || b != b) { nan = 1; bad++; continue; }
        emax = fmax(emax, e);
        double r = mode == ELEM ? e / (fabs(b) + 1e-3 * amax) : e / (amax > 0 ? amax : 1.0);
        if (r > worst) { worst = r; worst_i = i; }
        if (mode == EXACT || (mode != EXACT && r > tol)) bad++;
    }
    printf("    %-22s %s: %zu/%zu bit-identical, max |d| %.3g, max |ref| %.3g, worst %s %.3g (tol %.1g)\n", what,
           mode == EXACT ? "exact" : mode == ELEM ? "elem" : "norm", same, n, emax, amax,
           mode == ELEM ? "elem rel" : "rel to max", worst, mode == EXACT ? 0.0 : tol);
    if (bad)
        fail("%s: %zu of %zu elements out of tolerance%s (worst at %zu: gpu %.9g cpu %.9g)", what, bad, n,
             nan ? " (NaN)" : "", worst_i, (double)g[worst_i], (double)c[worst_i]);
}
/* A BF16 output against the RNE rounding of the FP32 output of the same kernel, bit for bit. */
inline void same_as_bf16(const char* what, const std::vector<uint16_t>& h, const vecf& f) {
    size_t bad = 0;
    for (size_t i = 0; i < f.size(); i++) bad += h[i] != mx_bf16_from_f32(f[i]);
    if (bad) fail("%s: %zu of %zu differ from the BF16 rounding of the FP32 output", what, bad, f.size());
    else printf("    %-22s %zu/%zu equal to BF16(the FP32 output)\n", what, f.size(), f.size());
}
inline void same_bytes(const char* what, const void* a, const void* b, size_t bytes) {
    if (memcmp(a, b, bytes)) fail("%s: two GPU runs differ (not deterministic)", what);
    else printf("    %-22s deterministic (two runs, identical bytes)\n", what);
}

/* ---- per-GEMM quantization telemetry on the GPU (mxg_opstats: mx/mxfp4.cu, nn/linear.cu, nn/llama.cu) ----
 * Against linear.c's statistics (accumulate_stats + the MXFP4 block counts) on the same inputs:
 *   sig2, err2  relative difference <= tol; both NaN counts as equal (a NaN MXFP4 block makes
 *               err2 NaN on both sides: its finite elements are compared with NaN)
 *   blocks, nonfinite  equal;  clipped  |gpu - cpu| <= tol_clip (0: equal)
 * In the linear-layer and quantizer checks the quantized operands are bit-identical to the CPU's
 * (test_linear_operands), so the FP64 sums differ only in their order (atomics against a sequential
 * loop): ~1e-15 relative expected; the tolerance 1e-6 (an SQNR within 4e-6 dB) leaves room for that
 * and still fails on any wrong element set, operand, rotation or dequantized value. */
inline double rel_d(double g, double c) {
    if (g != g && c != c) return 0.0;
    if (g == c) return 0.0;
    if (g != g || c != c) return INFINITY;
    return fabs(g - c) / fmax(fabs(c), 1e-300);
}
inline double sqnr_of(double s, double e) { return e == 0 ? INFINITY : s == 0 ? -INFINITY : 10.0 * log10(s / e); }

/* One operand's check; returns the relative differences through ws/we (max-accumulated). */
inline void check_opstats(const char* what, const mxg_opstats* g, const mx_operand_stats* c, double tol,
                          long long tol_clip, double tol_db, double* ws, double* we, int verbose) {
    double rs = rel_d(g->sig2, c->sig2), re = rel_d(g->err2, c->err2);
    double dg = sqnr_of(g->sig2, g->err2), dc = sqnr_of(c->sig2, c->err2);
    double ddb = (isfinite(dg) && isfinite(dc)) ? fabs(dg - dc) : (dg == dc || (dg != dg && dc != dc)) ? 0.0 : INFINITY;
    long long dclip = (long long)g->clipped - (long long)c->clipped;
    int bad = !(rs <= tol) || (tol_db > 0 ? !(ddb <= tol_db) : !(re <= tol)) ||
              (long long)g->blocks != (long long)c->blocks || (long long)g->nonfinite != (long long)c->nonfinite ||
              llabs(dclip) > tol_clip;
    if (rs > *ws) *ws = rs;
    if (re > *we) *we = re;
    if (verbose || bad)
        printf("    %-24s sig2 %.6g (rel %.2g) err2 %.6g (rel %.2g) SQNR %.4f/%.4f dB blocks %llu/%lld clipped %llu/%lld "
               "nonfinite %llu/%lld (gpu/cpu)\n",
               what, c->sig2, rs, c->err2, re, dg, dc, g->blocks, (long long)c->blocks, g->clipped, (long long)c->clipped,
               g->nonfinite, (long long)c->nonfinite);
    if (bad)
        fail("%s: telemetry differs (sig2 rel %.3g, err2 rel %.3g, SQNR diff %.3g dB; tol %.1g%s, clipped diff %lld tol %lld)",
             what, rs, re, ddb, tol_db > 0 ? tol_db : tol, tol_db > 0 ? " dB" : "", dclip, tol_clip);
}

/* ---- the cases, by file (tests/gpu/test_<twin>.cu); each main runs them in a fixed order ---- */
/* run (main_run.cu) */
void test_e2m1(void);                                                         /* test_mxfp4.cu */
void test_quant(const char* filter);                                          /* test_mxfp4.cu */
void test_quant_swiglu(const char* filter);                                   /* test_mxfp4.cu */
void test_outer_fixup(void);                                                    /* test_mxfp4.cu */
void test_outer_rescale(void);                                                  /* test_mxfp4.cu */
void test_fp8(const char* filter);                                            /* test_fp8.cu */
void test_nvfp4(const char* filter);                                          /* test_nvfp4.cu */
void test_mxfp8(const char* filter);                                          /* test_nvfp4.cu */
void test_rotate(const char* filter);                                         /* test_nvfp4.cu */
void test_fp4_ref(const char* filter);                                        /* test_nvfp4.cu */
void gemm_case(int M, int N, int K, int had, int oow_row, const char* filter); /* test_gemm.cu */
/* layers (main_layers.cu) */
void test_embedding(int N, int D, int V);                                     /* test_embedding.cu */
void test_rmsnorm(int N, int D);                                              /* test_rmsnorm.cu */
void test_rope(int B, int T, int nh, int hd);                                 /* test_rope.cu */
/* mode 0: the SIMT kernels; 1: cuBLASLt FP32 GEMMs; 2: TF32 GEMMs */
void test_attention(int B, int T, int H, int KV, int hd, int mode = 0);       /* test_attention.cu */
void test_swiglu(size_t n);                                                   /* test_swiglu.cu */
void test_xent(int N, int V);                                                 /* test_xent.cu */
void test_lm_head(int N, int D, int V, int Nc);                               /* test_xent.cu */
void test_sum_squares(size_t n);                                              /* test_adamw.cu */
void test_adamw(void);                                                        /* test_adamw.cu */
void test_adamw_spans(void);                                                  /* test_adamw.cu */
void test_model(int B, int T);                                                /* test_llama.cu */
void test_linear_operands(const char* recipe);                                /* test_linear.cu */
void test_linear_outer_round(const char* recipe);                             /* test_linear.cu */
void test_switches_outer(void);                                               /* test_linear.cu */
void test_linear_epilogues(const char* recipe);                               /* test_linear.cu */
void test_gpu_model(const char* recipe, int exact, double tol_loss, double tol_grad, int head16 = 0,
                    int attn = 0);                                            /* test_llama.cu */
void test_quant_telemetry(mx_layout l0, mx_layout l1, int had_n, int rnd, int sr, int rows,
                          int cols);                                          /* test_mxfp4.cu */
void test_linear_telemetry(const char* recipe, int M, int K, int N, int nonfin); /* test_linear.cu */
void test_model_telemetry(const char* recipe, int exact, double tol_sig, double tol_db, double tol_sig_bwd,
                          double tol_db_bwd);                                   /* test_llama.cu */
void test_gpu_decode(const char* recipe, int head16, double tol);             /* test_llama.cu */
void test_model_shared_grads(const char* recipe, int act16);                  /* test_llama.cu */
void test_model_wcache(const char* recipe, const char* outer);               /* test_llama.cu */
void test_model_fp8_amax(int act16, int recompute, int flash = 0, int ask_xt = 0);                       /* test_llama.cu */

#endif
