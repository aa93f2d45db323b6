/* test_linear.c: recipes and the quantized linear layer. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/linear.h"
#include "mxlm/linear_plan.h"
#include "test.h"

static float urand(uint64_t* s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static float* rand_mat(int n, uint64_t seed, float scale) {
    float* x = malloc(sizeof(float) * n);
    uint64_t s = seed;
    for (int i = 0; i < n; i++) x[i] = urand(&s) * scale;
    return x;
}
/* C[M,N] = A[M,K] B[N,K]^T in double */
static void ref_gemm_tn(const float* A, const float* B, double* C, int M, int N, int K) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)A[i * K + k] * B[j * K + k];
            C[i * N + j] = s;
        }
}
static float* transposed(const float* x, int r, int c) {
    float* t = malloc(sizeof(float) * r * c);
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) t[j * r + i] = x[i * c + j];
    return t;
}

/* ---- recipes ------------------------------------------------------------------ */

TEST(recipe_names_parse) {
    mx_recipe r;
    for (const char* const* n = mx_recipe_names(); *n; n++) CHECKF(mx_recipe_parse(*n, &r) == 0, "%s: %s", *n, mx_last_error());
    REQUIRE(mx_recipe_parse("mxfp4-fdw-h16", &r) == 0);
    for (int g = 0; g < 3; g++) {
        CHECK_EQ_INT(r.g[g].fmt, MX_FMT_MXFP4);
        CHECK_EQ_INT(r.g[g].had_n, 16);
        CHECK_EQ_INT(r.g[g].had_random, 0);
        CHECK_EQ_INT(r.g[g].round_a, MX_ROUND_RNE);
    }
    REQUIRE(mx_recipe_parse("mxfp4-fd", &r) == 0);
    CHECK(r.g[0].fmt == MX_FMT_MXFP4 && r.g[1].fmt == MX_FMT_MXFP4 && r.g[2].fmt == MX_FMT_FP8);
    REQUIRE(mx_recipe_parse("mxfp4-f-rh16", &r) == 0);
    CHECK(r.g[0].had_n == 16 && r.g[0].had_random == 1 && r.g[1].fmt == MX_FMT_FP8 && r.g[1].had_n == 0);
    REQUIRE(mx_recipe_parse("mxfp4-fdw-sr", &r) == 0);
    CHECK(r.g[2].round_a == MX_ROUND_SR && r.g[2].round_b == MX_ROUND_SR);
    REQUIRE(mx_recipe_parse("mxfp4-fdw-h16-2d-ceil", &r) == 0);
    CHECK(r.g[0].w2d && r.g[1].w2d && !r.g[2].w2d && r.g[2].scale == MX_SCALE_CEIL);
    REQUIRE(mx_recipe_parse("bf16", &r) == 0);
    CHECK(r.g[0].fmt == MX_FMT_BF16 && r.g[2].fmt == MX_FMT_BF16);
    REQUIRE(mx_recipe_parse("fp8-delayed", &r) == 0);
    CHECK(r.fp8_scaling == MX_FP8_DELAYED);
}

TEST(recipe_compact_strings) {
    mx_recipe r;
    REQUIRE(mx_recipe_parse("bf16+fdw:fmt=mxfp4,had=h16,round=rne/sr", &r) == 0);
    for (int g = 0; g < 3; g++)
        CHECK(r.g[g].fmt == MX_FMT_MXFP4 && r.g[g].had_n == 16 && r.g[g].round_a == MX_ROUND_RNE &&
              r.g[g].round_b == MX_ROUND_SR);
    REQUIRE(mx_recipe_parse("mxfp4-fdw+w:had=h32,scale=even;f:w=2d+rh=step", &r) == 0);
    CHECK(r.g[2].had_n == 32 && r.g[2].scale == MX_SCALE_EVEN && r.g[0].w2d && !r.g[1].w2d && r.rh_mode == MX_RH_STEP);
    REQUIRE(mx_recipe_parse("w:fmt=mxfp4,had=rh64", &r) == 0);
    CHECK(r.g[0].fmt == MX_FMT_FP32 && r.g[2].fmt == MX_FMT_MXFP4 && r.g[2].had_n == 64 && r.g[2].had_random);
    char d[512];
    mx_recipe_parse("mxfp4-fdw-h16", &r);
    mx_recipe_describe(&r, d, sizeof d);
    CHECK(strstr(d, "wgrad=mxfp4,had=h16,round=rne/rne,scale=floor,w=1d") != NULL);
}

TEST(recipe_errors) {
    mx_recipe r;
    const char* bad[] = {"", "+", "++", "nonsense", "mxfp4-", "mxfp4-fx", "mxfp4-ff", "mxfp4-fdw-h12", "mxfp4-fdw-h512",
                         "mxfp4-fdw-sr-sr", "mxfp4-fdw-h16-rh16", "bf16+w:round=sr", "fp8+f:w=2d", "mxfp4-fdw+w:w=2d",
                         "mxfp4-fdw+w:bogus=1", "mxfp4-fdw+w:had", "mxfp4-fdw+x:had=h16", "fp8+all:scale=ceil",
                         "mxfp4-w-2d", "mxfp4-fdw+rh=sometimes", "mxfp4-fdw+f:round=rne/xx"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = mx_recipe_parse(bad[i], &r);
        CHECKF(rc == MX_EINVAL, "'%s' was accepted", bad[i]);
        CHECKF(strlen(mx_last_error()) > 10, "'%s': no message", bad[i]);
    }
}

/* The format table (formats.h) is what the recipe grammar and the checks read: a recipe asking
 * a format for a rounding, a weight layout or a scale rule its row does not allow is refused by
 * name; the dimension checks take the row's block; the GPU refusals its GPU columns. */
TEST(format_table_drives_the_checks) {
    const mx_format_info* f4 = mx_format_get(MX_FMT_MXFP4);
    CHECK(f4 && !strcmp(f4->name, "mxfp4") && f4->block == 32 && f4->scale == MX_SCALE_E8M0 && f4->elem == MX_ELEM_E2M1);
    CHECK(mx_format_find("fp8") == mx_format_get(MX_FMT_FP8) && mx_format_parse("nvfp5") == -1);
    /* issue 18's rows: NVFP4 (E2M1 / 16, E4M3 + FP32 tensor scale) and MXFP8 (E4M3 / 32, E8M0); the GPU runs
     * both, with rotations */
    const mx_format_info* nv = mx_format_get(MX_FMT_NVFP4), *m8 = mx_format_get(MX_FMT_MXFP8);
    CHECK(nv && nv == mx_format_find("nvfp4") && nv->block == 16 && nv->scale == MX_SCALE_E4M3_TENSOR &&
          nv->elem == MX_ELEM_E2M1 && mx_format_has_sr(nv) && mx_format_has_2d(nv) && !nv->scale_rules && nv->gpu == 1 &&
          mx_format_gpu_rotates(nv));
    CHECK(m8 && m8 == mx_format_find("mxfp8") && m8->block == 32 && m8->scale == MX_SCALE_E8M0 &&
          m8->elem == MX_ELEM_E4M3 && !mx_format_has_sr(m8) && !mx_format_has_2d(m8) && m8->gpu == 1 &&
          m8->scale_rules == (MX_BIT(MX_SCALE_FLOOR) | MX_BIT(MX_SCALE_CEIL)));
    CHECK(mx_format_layout(nv, 0) == MX_LAYOUT_1x16 && mx_format_layout(nv, 1) == MX_LAYOUT_16x16 &&
          mx_format_layout(m8, 0) == MX_LAYOUT_1x32);
    CHECK(mx_format_get(MX_FMT_COUNT) == NULL && !strcmp(mx_format_name(MX_FMT_BF16), "bf16"));
    for (int i = 0; i < MX_FMT_COUNT; i++) {
        const mx_format_info* f = mx_format_get((mx_format)i);
        CHECKF(f->id == (mx_format)i && mx_format_parse(f->name) == i, "row %d", i);
        CHECKF(f->roundings & MX_BIT(MX_ROUND_RNE), "%s: rne must be allowed", f->name);
        CHECKF(!f->block == (f->scale == MX_SCALE_NONE || f->scale == MX_SCALE_TENSOR), "%s: a block format has a block size", f->name);
    }
    static const struct { const char* recipe; const char* msg; } refused[] = {
        {"fp8+f:round=sr", "recipe: fprop is fp8: stochastic rounding applies to mxfp4 or nvfp4 only"},
        {"bf16+w:round=rne/sr", "recipe: wgrad is bf16: stochastic rounding applies to mxfp4 or nvfp4 only"},
        {"bf16+d:w=2d", "recipe: dgrad is bf16: 2d weights apply to mxfp4 or nvfp4 only"},
        {"fp32+w:scale=even", "recipe: wgrad is fp32: scale=even does not apply (scale rules apply to mxfp4 or mxfp8; mxfp8: floor, ceil)"},
        {"mxfp8+f:scale=even", "recipe: fprop is mxfp8: scale=even does not apply (scale rules apply to mxfp4 or mxfp8; mxfp8: floor, ceil)"},
        {"mxfp8+d:w=2d", "recipe: dgrad is mxfp8: 2d weights apply to mxfp4 or nvfp4 only"},
        {"mxfp8+w:round=sr", "recipe: wgrad is mxfp8: stochastic rounding applies to mxfp4 or nvfp4 only"},
        {"fp8+f:fmt=nvfp5", "recipe: fmt=nvfp5: must be fp32, bf16, fp8, mxfp4, nvfp4 or mxfp8"},
    };
    mx_recipe r;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECKF(mx_recipe_parse(refused[i].recipe, &r) == MX_EINVAL, "'%s' was accepted", refused[i].recipe);
        CHECKF(!strcmp(mx_last_error(), refused[i].msg), "'%s': '%s'", refused[i].recipe, mx_last_error());
    }
    /* dimensions: the block of the row */
    CHECK(mx_recipe_parse("mxfp4-fdw-2d", &r) == 0);
    CHECK(mx_gemm_check_dims(MX_FPROP, &r.g[MX_FPROP], 64, 64, 64) == 0);
    CHECK(mx_gemm_check_dims(MX_FPROP, &r.g[MX_FPROP], 64, 64, 48) == MX_EINVAL);
    CHECK(!strcmp(mx_last_error(), "linear fprop: MXFP4 needs the reduction dim (48) to be a multiple of 32"));
    CHECK(mx_gemm_check_dims(MX_DGRAD, &r.g[MX_DGRAD], 64, 48, 64) == MX_EINVAL);
    CHECK(strstr(mx_last_error(), "32x32 weight tiles need 48 to be a multiple of 32") != NULL);
    CHECK(mx_gemm_check_dims(MX_WGRAD, &r.g[MX_WGRAD], 64, 48, 64) == 0); /* wgrad has no weight */
    CHECK(mx_recipe_parse("bf16", &r) == 0 && mx_gemm_check_dims(MX_FPROP, &r.g[MX_FPROP], 3, 5, 7) == 0);
    CHECK(mx_recipe_parse("nvfp4+d:w=2d", &r) == 0 && mx_gemm_check_dims(MX_FPROP, &r.g[MX_FPROP], 8, 8, 48) == 0);
    CHECK(mx_gemm_check_dims(MX_DGRAD, &r.g[MX_DGRAD], 8, 24, 48) == MX_EINVAL);
    CHECK(strstr(mx_last_error(), "16x16 weight tiles need 24 to be a multiple of 16") != NULL);
    /* named recipes of issue 18: every GEMM in the format; the GPU runs them, rotations included */
    CHECK(mx_recipe_parse("mxfp8", &r) == 0 && r.g[MX_WGRAD].fmt == MX_FMT_MXFP8 && r.g[MX_FPROP].scale == MX_SCALE_CEIL &&
          mx_gemm_gpu_refusal(&r, MX_FPROP) == 0);
    CHECK(mx_recipe_parse("nvfp4", &r) == 0 && r.g[MX_DGRAD].fmt == MX_FMT_NVFP4 && r.g[MX_DGRAD].round_b == MX_ROUND_RNE &&
          mx_gemm_gpu_refusal(&r, MX_WGRAD) == 0);
    CHECK(mx_recipe_parse("nvfp4+w:had=rh16", &r) == 0 && mx_gemm_gpu_refusal(&r, MX_WGRAD) == 0);
    CHECK(mx_recipe_parse("bf16+w:had=h16", &r) == 0 && mx_gemm_gpu_refusal(&r, MX_WGRAD) == 2);
    CHECK(mx_recipe_parse("nvfp4+w:had=rh16,round=sr/rne+f:w=2d", &r) == 0 && r.g[MX_WGRAD].round_a == MX_ROUND_SR);
    /* nvfp4-nvidia (arXiv 2509.25149): 2D weights in Fprop and Dgrad, rh16 on Wgrad only, SR on the gradient
     * operands only; its name is kept, and overrides still apply on top */
    CHECK(mx_recipe_parse("nvfp4-nvidia", &r) == 0 && !strcmp(r.name, "nvfp4-nvidia"));
    for (int g = 0; g < 3; g++) CHECK(r.g[g].fmt == MX_FMT_NVFP4 && r.g[g].scale == MX_SCALE_FLOOR);
    CHECK(r.g[MX_FPROP].w2d && r.g[MX_DGRAD].w2d && !r.g[MX_WGRAD].w2d);
    CHECK(!r.g[MX_FPROP].had_n && !r.g[MX_DGRAD].had_n && r.g[MX_WGRAD].had_n == 16 && r.g[MX_WGRAD].had_random);
    CHECK(r.g[MX_FPROP].round_a == MX_ROUND_RNE && r.g[MX_FPROP].round_b == MX_ROUND_RNE);
    CHECK(r.g[MX_DGRAD].round_a == MX_ROUND_SR && r.g[MX_DGRAD].round_b == MX_ROUND_RNE);
    CHECK(r.g[MX_WGRAD].round_a == MX_ROUND_SR && r.g[MX_WGRAD].round_b == MX_ROUND_RNE);
    CHECK(mx_gemm_gpu_refusal(&r, MX_FPROP) == 0 && mx_gemm_gpu_refusal(&r, MX_WGRAD) == 0);
    CHECK(mx_recipe_parse("nvfp4-nvidia+w:had=h16", &r) == 0 && r.g[MX_WGRAD].had_n == 16 && !r.g[MX_WGRAD].had_random &&
          r.g[MX_DGRAD].w2d);
    /* mxfp4-tseng (arXiv 2502.20586): Fprop BF16; Dgrad and Wgrad MXFP4 with rh64 (signs each step), SR on both
     * operands and the 3/4 scaling (scale=dither); on the GPU through mxfp4_ref.cu */
    CHECK(mx_recipe_parse("mxfp4-tseng", &r) == 0 && !strcmp(r.name, "mxfp4-tseng") && r.rh_mode == MX_RH_STEP);
    CHECK(r.g[MX_FPROP].fmt == MX_FMT_BF16 && !r.g[MX_FPROP].had_n);
    for (int g = 1; g < 3; g++)
        CHECK(r.g[g].fmt == MX_FMT_MXFP4 && r.g[g].had_n == 64 && r.g[g].had_random && r.g[g].round_a == MX_ROUND_SR &&
              r.g[g].round_b == MX_ROUND_SR && r.g[g].scale == MX_SCALE_DITHER && !r.g[g].w2d);
    CHECK(mx_gemm_gpu_refusal(&r, MX_FPROP) == 0 && mx_gemm_gpu_refusal(&r, MX_DGRAD) == 0 &&
          mx_gemm_gpu_refusal(&r, MX_WGRAD) == 0);
    CHECK(mx_recipe_parse("mxfp4-fdw-sr-dither", &r) == 0 && r.g[MX_WGRAD].scale == MX_SCALE_DITHER);
    CHECK(mx_recipe_parse("mxfp8+all:scale=dither", &r) == MX_EINVAL); /* MXFP8: floor and ceil only */
    /* what the GPU runs */
    CHECK(mx_recipe_parse("mxfp4-fdw-h16", &r) == 0);
    for (int g = 0; g < 3; g++) CHECK(mx_gemm_gpu_refusal(&r, (mx_gemm_id)g) == 0);
    CHECK(mx_recipe_parse("fp8-delayed", &r) == 0 && mx_gemm_gpu_refusal(&r, MX_FPROP) == 3);
    CHECK(mx_recipe_parse("bf16+f:had=h16", &r) == 0 && mx_gemm_gpu_refusal(&r, MX_FPROP) == 2 &&
          mx_gemm_gpu_refusal(&r, MX_DGRAD) == 0);
    /* the operand plan: streams and layouts */
    CHECK(mx_recipe_parse("mxfp4-fdw-2d-sr", &r) == 0);
    mx_qopts qo = mx_operand_qopts(&r.g[MX_DGRAD], MX_DGRAD, 1, 7, 3, 5);
    CHECK(qo.layout == MX_LAYOUT_32x32 && qo.round == MX_ROUND_SR && qo.tensor_id == 5 * 6 + 1 * 2 + 1 &&
          qo.seed == 7 + 3 * MX_GOLDEN);
    CHECK(mx_operand_qopts(&r.g[MX_WGRAD], MX_WGRAD, 1, 7, 3, 5).layout == MX_LAYOUT_1x32);
    CHECK(mx_operand_fp8_kind(MX_DGRAD, 0) == MX_FP8_E5M2 && mx_operand_fp8_kind(MX_FPROP, 0) == MX_FP8_E4M3);
}

/* ---- the GEMM and the layer ---------------------------------------------------------- */

TEST(sgemm_matches_double_and_thread_count) {
    const int M = 37, N = 45, K = 70;
    float *A = rand_mat(M * K, 1, 1), *B = rand_mat(N * K, 2, 1);
    float* C = malloc(sizeof(float) * M * N);
    double* R = malloc(sizeof(double) * M * N);
    REQUIRE(mx_sgemm_tn(A, B, C, M, N, K, 0) == 0);
    ref_gemm_tn(A, B, R, M, N, K);
    for (int i = 0; i < M * N; i++) CHECK_NEAR(C[i], R[i], 1e-5 * K);
    /* the same bits with one thread and with three */
    float* C1 = malloc(sizeof(float) * M * N);
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    mx_sgemm_tn(A, B, C1, M, N, K, 0);
    omp_set_num_threads(3);
    mx_sgemm_tn(A, B, C, M, N, K, 0);
    omp_set_num_threads(nt);
    CHECK(memcmp(C, C1, sizeof(float) * M * N) == 0);
    /* accumulate */
    REQUIRE(mx_sgemm_tn(A, B, C, M, N, K, 1) == 0);
    for (int i = 0; i < M * N; i++) CHECK_NEAR(C[i], 2 * R[i], 2e-5 * K);
    free(A); free(B); free(C); free(C1); free(R);
}

/* rotated, unquantized GEMMs equal the plain ones (H H^T = I) in all three GEMMs */
TEST(hadamard_leaves_fp32_linear_unchanged) {
    const int M = 64, K = 96, N = 64;
    float *X = rand_mat(M * K, 3, 1), *W = rand_mat(N * K, 4, 0.1f), *dY = rand_mat(M * N, 5, 1);
    const char* recipes[] = {"fp32+all:had=h16", "fp32+all:had=h32", "fp32+all:had=rh16", "fp32+fdw:had=h2"};
    mx_recipe plain, rot;
    REQUIRE(mx_recipe_parse("fp32", &plain) == 0);
    float *Y0 = calloc(M * N, 4), *Y1 = calloc(M * N, 4), *dX0 = calloc(M * K, 4), *dX1 = calloc(M * K, 4);
    float *dW0 = calloc(N * K, 4), *dW1 = calloc(N * K, 4);
    mx_linear_ctx c0 = {.recipe = &plain, .seed = 1, .layer_id = 2};
    mx_linear_forward(&c0, X, W, Y0, M, K, N);
    mx_linear_backward(&c0, X, W, dY, dX0, dW0, M, K, N);
    for (size_t t = 0; t < sizeof recipes / sizeof recipes[0]; t++) {
        REQUIRE(mx_recipe_parse(recipes[t], &rot) == 0);
        mx_linear_ctx c1 = {.recipe = &rot, .seed = 1, .layer_id = 2};
        memset(dX1, 0, M * K * 4);
        memset(dW1, 0, N * K * 4);
        REQUIRE(mx_linear_forward(&c1, X, W, Y1, M, K, N) == 0);
        REQUIRE(mx_linear_backward(&c1, X, W, dY, dX1, dW1, M, K, N) == 0);
        for (int i = 0; i < M * N; i++) CHECK_NEAR(Y1[i], Y0[i], 1e-5);
        for (int i = 0; i < M * K; i++) CHECK_NEAR(dX1[i], dX0[i], 1e-5);
        for (int i = 0; i < N * K; i++) CHECK_NEAR(dW1[i], dW0[i], 1e-4);
        if (test_failures) { CHECKF(0, "recipe %s", recipes[t]); break; }
    }
    free(X); free(W); free(dY); free(Y0); free(Y1); free(dX0); free(dX1); free(dW0); free(dW1);
}

/* L = sum(G .* Y): dL/dW and dL/dX from backward against central differences. */
static void fd_check(const char* recipe, double tol, double h) {
    const int M = 32, K = 64, N = 32;
    float *X = rand_mat(M * K, 6, 1), *W = rand_mat(N * K, 7, 0.2f), *G = rand_mat(M * N, 8, 1);
    float* Y = malloc(sizeof(float) * M * N);
    float *dX = calloc(M * K, 4), *dW = calloc(N * K, 4);
    mx_recipe r;
    if (mx_recipe_parse(recipe, &r)) { CHECKF(0, "%s", mx_last_error()); return; }
    mx_linear_ctx c = {.recipe = &r, .seed = 1};
    mx_linear_backward(&c, X, W, G, dX, dW, M, K, N);
    double worst = 0;
    for (int t = 0; t < 40; t++) {
        int which = t % 2;
        float* P = which ? W : X;
        int idx = (t * 7919) % (which ? N * K : M * K);
        float save = P[idx];
        double L[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            P[idx] = save + (float)(sgn ? -h : h);
            mx_linear_forward(&c, X, W, Y, M, K, N);
            double s = 0;
            for (int i = 0; i < M * N; i++) s += (double)G[i] * Y[i];
            L[sgn] = s;
        }
        P[idx] = save;
        double fd = (L[0] - L[1]) / (2 * h), an = which ? dW[idx] : dX[idx];
        double err = fabs(fd - an) / fmax(1.0, fabs(an));
        if (err > worst) worst = err;
    }
    CHECKF(worst < tol, "%s: worst relative gradient error %.3g (tol %.3g)", recipe, worst, tol);
    free(X); free(W); free(G); free(Y); free(dX); free(dW);
}
TEST(gradients_match_finite_differences) {
    /* L is bilinear in (X, W), so a central difference has no truncation
     * error and a wide step is exact up to rounding; with BF16 operands the
     * loss is piecewise constant at the bf16 grid, so the step must be wide
     * and the tolerance reflects bf16's 8 significant bits. */
    fd_check("fp32", 1e-3, 1e-2);
    fd_check("bf16", 2e-2, 0.5);
    fd_check("bf16+all:had=h16", 2e-2, 0.5);
}

/* Each MXFP4 GEMM equals a plain FP32 GEMM on the operands rotated and
 * fake-quantized by the library (the routing: which operand, which axis,
 * which layout, which random stream). */
TEST(mxfp4_gemms_equal_gemm_of_dequantized_operands) {
    const int M = 64, K = 64, N = 96;
    float *X = rand_mat(M * K, 9, 1), *W = rand_mat(N * K, 10, 0.05f), *dY = rand_mat(M * N, 11, 0.01f);
    X[5] = 40.0f;  /* an outlier */
    const char* recipes[] = {"mxfp4-fdw", "mxfp4-fdw-h16", "mxfp4-fdw-rh16", "mxfp4-fdw-sr", "mxfp4-fdw-h32-2d-even"};
    for (size_t t = 0; t < sizeof recipes / sizeof recipes[0]; t++) {
        mx_recipe r;
        REQUIRE(mx_recipe_parse(recipes[t], &r) == 0);
        mx_linear_ctx c = {.recipe = &r, .seed = 77, .layer_id = 3, .step = 5};
        float *Y = malloc(4 * M * N), *dX = calloc(M * K, 4), *dW = calloc(N * K, 4);
        REQUIRE(mx_linear_forward(&c, X, W, Y, M, K, N) == 0);
        REQUIRE(mx_linear_backward(&c, X, W, dY, dX, dW, M, K, N) == 0);
        /* by hand */
        float *Wt = transposed(W, N, K), *dYt = transposed(dY, M, N), *Xt = transposed(X, M, K);
        const struct { const float* a; const float* b; int ma, nb, red; float* out; } gm[3] = {
            {X, W, M, N, K, Y}, {dY, Wt, M, K, N, dX}, {dYt, Xt, N, K, M, dW}};
        for (int g = 0; g < 3; g++) {
            const mx_gemm_recipe* q = &r.g[g];
            float *a = malloc(4 * gm[g].ma * gm[g].red), *b = malloc(4 * gm[g].nb * gm[g].red);
            memcpy(a, gm[g].a, 4 * gm[g].ma * gm[g].red);
            memcpy(b, gm[g].b, 4 * gm[g].nb * gm[g].red);
            if (q->had_n) {
                mx_hadamard_rotate(a, gm[g].ma, gm[g].red, 1, q->had_n, q->had_random, 77, 3 * 3 + g);
                mx_hadamard_rotate(b, gm[g].nb, gm[g].red, 1, q->had_n, q->had_random, 77, 3 * 3 + g);
            }
            uint64_t sr_seed = 77 + 5 * 0x9E3779B97F4A7C15ull;
            mx_qopts oa = {MX_LAYOUT_1x32, q->scale, q->round_a, sr_seed, 3 * 6 + g * 2};
            mx_qopts ob = {(q->w2d && g != 2) ? MX_LAYOUT_32x32 : MX_LAYOUT_1x32, q->scale, q->round_b, sr_seed, 3 * 6 + g * 2 + 1};
            mx_fakequant_fp4(a, a, gm[g].ma, gm[g].red, &oa, NULL);
            mx_fakequant_fp4(b, b, gm[g].nb, gm[g].red, &ob, NULL);
            float* ref = malloc(4 * gm[g].ma * gm[g].nb);
            mx_sgemm_tn(a, b, ref, gm[g].ma, gm[g].nb, gm[g].red, 0);
            for (int i = 0; i < gm[g].ma * gm[g].nb; i++) CHECK_SAME_F(gm[g].out[i], ref[i]);
            /* and the FP32 GEMM of dequantized values is the exact product to FP32 rounding */
            double* exact = malloc(8 * gm[g].ma * gm[g].nb);
            ref_gemm_tn(a, b, exact, gm[g].ma, gm[g].nb, gm[g].red);
            for (int i = 0; i < gm[g].ma * gm[g].nb; i++) CHECK_NEAR(ref[i], exact[i], 1e-6 * (1 + fabs(exact[i])) * 8);
            free(a); free(b); free(ref); free(exact);
            if (test_failures) { CHECKF(0, "recipe %s gemm %d", recipes[t], g); break; }
        }
        free(Wt); free(dYt); free(Xt); free(Y); free(dX); free(dW);
        if (test_failures) break;
    }
    free(X); free(W); free(dY);
}

TEST(mxfp4_quantization_changes_and_telemetry) {
    const int M = 64, K = 64, N = 64;
    float *X = rand_mat(M * K, 12, 1), *W = rand_mat(N * K, 13, 0.1f), *dY = rand_mat(M * N, 14, 1);
    mx_recipe r, rf;
    mx_recipe_parse("mxfp4-fdw", &r);
    mx_recipe_parse("fp32", &rf);
    mx_linear_state st;
    memset(&st, 0, sizeof st);
    mx_linear_ctx c = {.recipe = &r, .seed = 1, .state = &st, .telemetry = 1};
    mx_linear_ctx cf = {.recipe = &rf};
    float *Y = malloc(4 * M * N), *Yf = malloc(4 * M * N);
    mx_linear_forward(&c, X, W, Y, M, K, N);
    mx_linear_forward(&cf, X, W, Yf, M, K, N);
    double num = 0, den = 0;
    for (int i = 0; i < M * N; i++) { num += (Y[i] - Yf[i]) * (double)(Y[i] - Yf[i]); den += (double)Yf[i] * Yf[i]; }
    double sqnr = 10 * log10(den / num);
    CHECKF(sqnr > 8 && sqnr < 25, "MXFP4 GEMM output SQNR %.2f dB", sqnr);
    CHECK_EQ_INT(st.op[MX_FPROP][0].blocks, M * K / 32);
    CHECK_EQ_INT(st.op[MX_FPROP][1].blocks, N * K / 32);
    double s0 = mx_stats_sqnr_db(&st.op[MX_FPROP][0]);
    CHECKF(s0 > 15 && s0 < 22, "operand SQNR %.2f", s0);
    CHECK(st.op[MX_FPROP][0].clipped > 0);  /* floor rule on uniform data clips some blocks */
    /* the product's telemetry: sum C^2 of the unquantized product, sum (Cq - C)^2, and Y unchanged by it */
    CHECK(st.out[MX_FPROP].sig2 == den);
    CHECK_NEAR(st.out[MX_FPROP].err2, num, 1e-6 * num);
    CHECK_NEAR(mx_stats_sqnr_db(&st.out[MX_FPROP]), sqnr, 1e-4);
    mx_linear_ctx c0 = c;
    c0.telemetry = 0;
    float* Y0 = malloc(4 * M * N);
    mx_linear_forward(&c0, X, W, Y0, M, K, N);
    CHECK(memcmp(Y0, Y, 4 * M * N) == 0);
    float* dX = calloc(M * K, 4);
    float* dX0 = calloc(M * K, 4);
    for (int i = 0; i < M * K; i++) dX[i] = dX0[i] = 0.25f * (float)(i % 7); /* accumulated into */
    mx_linear_backward(&c, X, W, dY, dX, NULL, M, K, N);
    mx_linear_backward(&c0, X, W, dY, dX0, NULL, M, K, N);
    CHECK(memcmp(dX0, dX, 4 * M * K) == 0);
    CHECK_EQ_INT(st.op[MX_DGRAD][0].blocks, M * N / 32);
    CHECK_EQ_INT(st.op[MX_WGRAD][0].blocks, 0);
    double sd = mx_stats_sqnr_db(&st.out[MX_DGRAD]);
    CHECKF(sd > 8 && sd < 25, "Dgrad product SQNR %.2f dB", sd);
    CHECK(st.out[MX_WGRAD].sig2 == 0 && st.out[MX_WGRAD].err2 == 0); /* no Wgrad ran */
    mx_linear_state sf; /* an FP32 GEMM records nothing */
    memset(&sf, 0, sizeof sf);
    cf.state = &sf;
    cf.telemetry = 1;
    mx_linear_forward(&cf, X, W, Yf, M, K, N);
    CHECK(sf.out[MX_FPROP].sig2 == 0 && sf.out[MX_FPROP].err2 == 0);
    free(X); free(W); free(dY); free(Y); free(Yf); free(Y0); free(dX); free(dX0);
}

TEST(sr_streams_follow_step_and_layer) {
    const int M = 32, K = 64, N = 32;
    float *X = rand_mat(M * K, 15, 1), *W = rand_mat(N * K, 16, 0.1f);
    mx_recipe r;
    mx_recipe_parse("mxfp4-fdw-sr", &r);
    float *Y1 = malloc(4 * M * N), *Y2 = malloc(4 * M * N), *Y3 = malloc(4 * M * N), *Y4 = malloc(4 * M * N);
    mx_linear_ctx c = {.recipe = &r, .seed = 9, .layer_id = 1, .step = 3};
    mx_linear_forward(&c, X, W, Y1, M, K, N);
    mx_linear_forward(&c, X, W, Y2, M, K, N);
    c.step = 4;
    mx_linear_forward(&c, X, W, Y3, M, K, N);
    c.step = 3; c.layer_id = 2;
    mx_linear_forward(&c, X, W, Y4, M, K, N);
    CHECK(memcmp(Y1, Y2, 4 * M * N) == 0);
    CHECK(memcmp(Y1, Y3, 4 * M * N) != 0);
    CHECK(memcmp(Y1, Y4, 4 * M * N) != 0);
    free(X); free(W); free(Y1); free(Y2); free(Y3); free(Y4);
}

TEST(fp8_recipe_is_per_tensor_hybrid) {
    const int M = 32, K = 32, N = 32;
    float *X = rand_mat(M * K, 17, 3), *W = rand_mat(N * K, 18, 0.1f), *dY = rand_mat(M * N, 19, 1e-3f);
    mx_recipe r;
    mx_recipe_parse("fp8", &r);
    mx_linear_ctx c = {.recipe = &r};
    float *Y = malloc(4 * M * N), *ref = malloc(4 * M * N);
    float *Xq = malloc(4 * M * K), *Wq = malloc(4 * N * K);
    mx_linear_forward(&c, X, W, Y, M, K, N);
    mx_fp8_fakequant(X, Xq, M * K, mx_fp8_scale_for_amax(mx_amax(X, M * K), MX_FP8_E4M3), MX_FP8_E4M3);
    mx_fp8_fakequant(W, Wq, N * K, mx_fp8_scale_for_amax(mx_amax(W, N * K), MX_FP8_E4M3), MX_FP8_E4M3);
    mx_sgemm_tn(Xq, Wq, ref, M, N, K, 0);
    for (int i = 0; i < M * N; i++) CHECK_SAME_F(Y[i], ref[i]);
    /* Dgrad: dY in E5M2 */
    float *dX = calloc(M * K, 4), *dYq = malloc(4 * M * N), *Wt = transposed(W, N, K), *refdx = malloc(4 * M * K);
    mx_linear_backward(&c, X, W, dY, dX, NULL, M, K, N);
    mx_fp8_fakequant(dY, dYq, M * N, mx_fp8_scale_for_amax(mx_amax(dY, M * N), MX_FP8_E5M2), MX_FP8_E5M2);
    mx_fp8_fakequant(Wt, Wt, N * K, mx_fp8_scale_for_amax(mx_amax(Wt, N * K), MX_FP8_E4M3), MX_FP8_E4M3);
    mx_sgemm_tn(dYq, Wt, refdx, M, K, N, 0);
    for (int i = 0; i < M * K; i++) CHECK_SAME_F(dX[i], refdx[i]);
    free(X); free(W); free(dY); free(Y); free(ref); free(Xq); free(Wq); free(dX); free(dYq); free(Wt); free(refdx);
}

TEST(fp8_delayed_scaling_uses_previous_amax) {
    const int M = 32, K = 32, N = 32;
    float *X = rand_mat(M * K, 20, 1), *W = rand_mat(N * K, 21, 0.1f);
    mx_recipe r;
    mx_recipe_parse("fp8-delayed", &r);
    mx_linear_state st;
    memset(&st, 0, sizeof st);
    mx_linear_ctx c = {.recipe = &r, .state = &st};
    float *Y = malloc(4 * M * N), *ref = malloc(4 * M * N), *Xq = malloc(4 * M * K), *Wq = malloc(4 * N * K);
    mx_linear_forward(&c, X, W, Y, M, K, N);  /* step 1: history empty -> current amax */
    float ax = mx_amax(X, M * K);
    CHECK_SAME_F(st.amax_hist[0][0][0], ax);
    /* step 2: amax shrinks by a factor that is not a power of two (a power of two
     * would leave E4M3 rounding unchanged), and the scale must be the old one */
    for (int i = 0; i < M * K; i++) X[i] *= 0.3f;
    mx_linear_forward(&c, X, W, Y, M, K, N);
    float* Ycur = malloc(4 * M * N);
    mx_recipe rc;
    mx_recipe_parse("fp8", &rc);
    mx_linear_ctx cc = {.recipe = &rc};
    mx_linear_forward(&cc, X, W, Ycur, M, K, N);
    CHECK(memcmp(Y, Ycur, 4 * M * N) != 0);  /* delayed differs from current scaling */
    free(Ycur);
    mx_fp8_fakequant(X, Xq, M * K, mx_fp8_scale_for_amax(ax, MX_FP8_E4M3), MX_FP8_E4M3);
    mx_fp8_fakequant(W, Wq, N * K, mx_fp8_scale_for_amax(mx_amax(W, N * K), MX_FP8_E4M3), MX_FP8_E4M3);
    mx_sgemm_tn(Xq, Wq, ref, M, N, K, 0);
    for (int i = 0; i < M * N; i++) CHECK_SAME_F(Y[i], ref[i]);
    CHECK_EQ_INT(st.amax_n[0][0], 2);
    free(X); free(W); free(Y); free(ref); free(Xq); free(Wq);
}

TEST(linear_shape_errors) {
    mx_recipe r;
    mx_recipe_parse("mxfp4-fdw-h16", &r);
    float X[32 * 48] = {0}, W[32 * 48] = {0}, Y[32 * 32];
    mx_linear_ctx c = {.recipe = &r};
    CHECK(mx_linear_forward(&c, X, W, Y, 32, 48, 32) == MX_EINVAL);
    CHECK(strstr(mx_last_error(), "fprop") != NULL);
    mx_recipe_parse("fp32+f:had=h32", &r);
    CHECK(mx_linear_forward(&c, X, W, Y, 32, 48, 32) == MX_EINVAL);
    CHECK(strstr(mx_last_error(), "h32") != NULL);
}
