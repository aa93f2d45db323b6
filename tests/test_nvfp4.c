/* test_nvfp4.c: NVFP4 (src/mx/nvfp4.c, docs/numerics.md "NVFP4") against hand-computed vectors.
 * Notation: S = 2688 / amax_t, d = (amax_b / 6) * S, sb = E4M3(d), r = S / sb, q = E2M1(x r),
 * value = (q sb) / S. E4M3 codes: s.eeee.mmm, bias 7 (0x7E = 448, 0x69 = 1.125 * 2^6 = 72,
 * subnormals m * 2^-9 with code m). E2M1 codes: 0 .5 1 1.5 2 3 4 6 = 0..7, 8 | c negative. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/linear.h"
#include "mxlm/mx.h"
#include "mxlm/recipe.h"
#include "test.h"

static void quant(const float* x, int R, int C, mx_layout L, mx_round rnd, mx_nvfp4* t, float* y) {
    mx_qopts o = {L, MX_SCALE_FLOOR, rnd, 11, 3};
    REQUIRE(mx_nvfp4_alloc(t, R, C, L) == 0);
    REQUIRE(mx_quantize_nvfp4(x, R, C, &o, t) == 0);
    REQUIRE(mx_dequantize_nvfp4(t, y) == 0);
}

TEST(nvfp4_scalar_steps) {
    /* S: 2688/6 = 448; 2688/1 = 2688; amax 0 -> 1; Inf/NaN -> 1; 2688/2^-140 overflows -> FLT_MAX */
    CHECK_SAME_F(mx_nvfp4_tensor_scale(6.0f), 448.0f);
    CHECK_SAME_F(mx_nvfp4_tensor_scale(1.0f), 2688.0f);
    CHECK_SAME_F(mx_nvfp4_tensor_scale(0.0f), 1.0f);
    CHECK_SAME_F(mx_nvfp4_tensor_scale(INFINITY), 1.0f);
    CHECK_SAME_F(mx_nvfp4_tensor_scale(ldexpf(1.0f, -140)), FLT_MAX);
    /* block scale: (6/6)*448 = 448 -> 0x7E; (1/6)*448 = 74.67 -> 72 (grid 8 in [64,128)) = 0x69;
     * saturation: (6/6)*1000 = 1000 -> 448 = 0x7E; (0/6)*S = 0 -> 0x00 */
    CHECK_EQ_INT(mx_nvfp4_block_scale(6.0f, 448.0f), 0x7E);
    CHECK_EQ_INT(mx_nvfp4_block_scale(1.0f, 448.0f), 0x69);
    CHECK_EQ_INT(mx_nvfp4_block_scale(6.0f, 1000.0f), 0x7E);
    CHECK_EQ_INT(mx_nvfp4_block_scale(0.0f, 448.0f), 0x00);
    /* subnormal, tie: amax_b = 6*2^-16: d = 2^-16 * 448 = 3.5 * 2^-9 -> even 4 * 2^-9 = code 0x04;
     * 2.5 * 2^-9 -> 2 (code 0x02); below 2^-10 -> 0 */
    CHECK_EQ_INT(mx_nvfp4_block_scale(6.0f * ldexpf(1.0f, -16), 448.0f), 0x04);
    CHECK_EQ_INT(mx_nvfp4_block_scale(6.0f * ldexpf(2.5f, -9), 1.0f), 0x02);
    CHECK_EQ_INT(mx_nvfp4_block_scale(6.0f * ldexpf(1.0f, -20), 448.0f), 0x00);
    /* decode: (6 * 72) / 448 = 432/448; NaN scale -> NaN */
    CHECK_SAME_F(mx_nvfp4_decode(7, 0x69, 448.0f), 432.0f / 448.0f);
    CHECK(isnan(mx_nvfp4_decode(3, MX_E4M3_NAN, 448.0f)));
}

/* Two rows of 16 (1x16): row 0 has amax 6 = amax_t, so S = 448, sb = 448, r = 1 and the codes are
 * plain E2M1 with its ties; row 1 has amax 1: sb = 72 (0x69), r = 448/72 = 6.2222, so
 *   1.0 -> 6.22 -> 6 (clipped), decoded 6*72/448 = 0.96428573
 *   0.5 -> 3.11 -> 3, decoded 216/448; 0.25 -> 1.56 -> 1.5, 108/448; 0.125 -> 0.78 -> 1, 72/448
 *   -0.0625 -> -0.39 -> -0.5 (code 9), -36/448; 0.03 -> 0.19 -> 0 */
TEST(nvfp4_reference_vector_1x16) {
    float x[32] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5.0f, -6.0f,
                   1.0f, 0.5f, 0.25f, 0.125f, -0.0625f, 0.03f};
    const uint8_t want_q0[16] = {0, 2, 2, 4, 4, 6, 6, 7, 8, 10, 10, 12, 12, 14, 14, 15};
    const float want_y0[16] = {0, 1, 1, 2, 2, 4, 4, 6, -0.0f, -1, -1, -2, -2, -4, -4, -6};
    const uint8_t want_q1[6] = {7, 5, 3, 2, 9, 0};
    const float want_y1[6] = {432.0f / 448.0f, 216.0f / 448.0f, 108.0f / 448.0f, 72.0f / 448.0f, -36.0f / 448.0f, 0.0f};
    mx_nvfp4 t;
    float y[32];
    quant(x, 2, 16, MX_LAYOUT_1x16, MX_ROUND_RNE, &t, y);
    CHECK_SAME_F(t.tensor_scale, 448.0f);
    CHECK_EQ_INT(t.scales[0], 0x7E);
    CHECK_EQ_INT(t.scales[1], 0x69);
    for (int i = 0; i < 16; i++) {
        CHECK_EQ_INT(mx_nvfp4_code_at(&t, 0, i), want_q0[i]);
        CHECK_SAME_F(y[i], want_y0[i]);
    }
    for (int i = 0; i < 6; i++) {
        CHECK_EQ_INT(mx_nvfp4_code_at(&t, 1, i), want_q1[i]);
        CHECK_SAME_F(y[16 + i], want_y1[i]);
    }
    for (int i = 6; i < 16; i++) CHECK_SAME_F(y[16 + i], 0.0f);
    CHECK_EQ_INT(t.codes[0], 0x20); /* packing: element 0 (code 0) low nibble, element 1 (code 2) high */
    CHECK_EQ_INT(t.n_blocks, 2);
    CHECK_EQ_INT(t.n_clipped_blocks, 1); /* row 1: 1.0 r = 6.22 > 6 */
    mx_nvfp4_free(&t);
}

/* Zeros, sb = 0, a subnormal E4M3 scale, a NaN and an Inf block; S from the finite elements only.
 * Rows of 16: row 0 = {6} (amax_t 6, S = 448); row 1 zeros; row 2 amax 6*2^-20: d = 7*2^-14 < 2^-10
 * -> sb 0 -> zeros; row 3 amax 6*2^-16: sb = 4*2^-9 = 2^-7 (code 4, the tie 3.5 -> 4), r = 448*2^7 =
 * 57344: 6*2^-16 -> 5.25 -> 6, decoded 6*2^-7/448; 3*2^-16 -> 2.625 -> 3; 2^-16 -> 0.875 -> 1;
 * -2^-17 -> -0.4375 -> -0.5; row 4 has a NaN, row 5 an Inf (1e30 next to it does not count). */
TEST(nvfp4_zero_subnormal_nonfinite_blocks) {
    float x[6 * 16] = {0};
    x[0] = 6.0f;
    x[32] = 6.0f * ldexpf(1.0f, -20);
    x[48] = 6.0f * ldexpf(1.0f, -16); x[49] = 3.0f * ldexpf(1.0f, -16); x[50] = ldexpf(1.0f, -16); x[51] = -ldexpf(1.0f, -17);
    x[64] = NAN; x[65] = 1.0f;
    x[80] = INFINITY; x[81] = 2.0f;
    mx_nvfp4 t;
    float y[6 * 16];
    quant(x, 6, 16, MX_LAYOUT_1x16, MX_ROUND_RNE, &t, y);
    CHECK_SAME_F(t.tensor_scale, 448.0f);
    const uint8_t want_sb[6] = {0x7E, 0x00, 0x00, 0x04, 0x7F, 0x7F};
    for (int b = 0; b < 6; b++) CHECK_EQ_INT(t.scales[b], want_sb[b]);
    for (int i = 16; i < 48; i++) CHECK_SAME_F(y[i], 0.0f);
    const uint8_t wq[4] = {7, 5, 2, 9};
    const float wy[4] = {0.046875f / 448.0f, 0.0234375f / 448.0f, 0.0078125f / 448.0f, -0.00390625f / 448.0f};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(mx_nvfp4_code_at(&t, 3, i), wq[i]);
        CHECK_SAME_F(y[48 + i], wy[i]);
    }
    for (int i = 64; i < 96; i++) CHECK(isnan(y[i]));
    for (int i = 64; i < 96; i++) CHECK_EQ_INT(mx_nvfp4_code_at(&t, i / 16, i % 16), 0);
    mx_nvfp4_free(&t);
    /* an all-zero tensor: S = 1, every sb 0, zeros */
    memset(x, 0, sizeof x);
    quant(x, 1, 16, MX_LAYOUT_1x16, MX_ROUND_RNE, &t, y);
    CHECK_SAME_F(t.tensor_scale, 1.0f);
    CHECK_EQ_INT(t.scales[0], 0);
    for (int i = 0; i < 16; i++) CHECK_SAME_F(y[i], 0.0f);
    mx_nvfp4_free(&t);
}

/* Huge: amax_t = 1.5*2^127: S = 2688/(1.5*2^127) = 1.75*2^-117 (exact); d = 2^125 * S = 448 -> 0x7E;
 * r = 2^-125: 1.5*2^127 -> 6 (code 7), decoded 2688/S = 1.5*2^127 exactly; 2^126 -> 2 (code 4) -> 2^126.
 * Tiny (normal): amax_t = 2^-100: S = 2688*2^100; d = (2^-100/6)*S rounds to 448 -> 0x7E; r = 6*2^100:
 * 2^-100 -> 6 -> 2^-100, 2^-101 -> 3 -> 2^-101 (exact round trip).
 * Tiny (subnormal amax 2^-140): S clamps to FLT_MAX; d = f32(2^-140/6) * FLT_MAX ~ 4e-5 < 2^-10 -> sb 0:
 * the block decodes to zeros. */
TEST(nvfp4_huge_and_tiny_tensors) {
    float x[16] = {0}, y[16];
    mx_nvfp4 t;
    x[0] = ldexpf(1.5f, 127); x[1] = ldexpf(1.0f, 126);
    quant(x, 1, 16, MX_LAYOUT_1x16, MX_ROUND_RNE, &t, y);
    CHECK_SAME_F(t.tensor_scale, ldexpf(1.75f, -117));
    CHECK_EQ_INT(t.scales[0], 0x7E);
    CHECK_EQ_INT(mx_nvfp4_code_at(&t, 0, 0), 7);
    CHECK_EQ_INT(mx_nvfp4_code_at(&t, 0, 1), 4);
    CHECK_SAME_F(y[0], ldexpf(1.5f, 127));
    CHECK_SAME_F(y[1], ldexpf(1.0f, 126));
    mx_nvfp4_free(&t);
    x[0] = ldexpf(1.0f, -100); x[1] = ldexpf(1.0f, -101);
    quant(x, 1, 16, MX_LAYOUT_1x16, MX_ROUND_RNE, &t, y);
    CHECK_SAME_F(t.tensor_scale, 2688.0f * ldexpf(1.0f, 100));
    CHECK_EQ_INT(t.scales[0], 0x7E);
    CHECK_SAME_F(y[0], ldexpf(1.0f, -100));
    CHECK_SAME_F(y[1], ldexpf(1.0f, -101));
    mx_nvfp4_free(&t);
    x[0] = ldexpf(1.0f, -140); x[1] = 0;
    quant(x, 1, 16, MX_LAYOUT_1x16, MX_ROUND_RNE, &t, y);
    CHECK_SAME_F(t.tensor_scale, FLT_MAX);
    CHECK_EQ_INT(t.scales[0], 0);
    CHECK_SAME_F(y[0], 0.0f);
    mx_nvfp4_free(&t);
}

/* 16x16 tiles: a 16x32 matrix, tile 0 holds 6 at (3,5) and tile 1 holds 1.0 at (15,16) and 0.5 at
 * (0,31): amax_t 6, S 448; tile 0 sb 448 (0x7E), tile 1 sb 72 (0x69) as in the 1x16 vector:
 * 1.0 -> code 7 (432/448), 0.5 -> code 5 (216/448). Scales [rows/16, cols/16] = {0x7E, 0x69}. */
TEST(nvfp4_2d_tiles) {
    float x[16 * 32] = {0}, y[16 * 32];
    x[3 * 32 + 5] = 6.0f; x[15 * 32 + 16] = 1.0f; x[0 * 32 + 31] = 0.5f;
    mx_nvfp4 t;
    quant(x, 16, 32, MX_LAYOUT_16x16, MX_ROUND_RNE, &t, y);
    CHECK_EQ_INT((int)mx_nvfp4_n_scales(16, 32, MX_LAYOUT_16x16), 2);
    CHECK_EQ_INT(t.scales[0], 0x7E);
    CHECK_EQ_INT(t.scales[1], 0x69);
    CHECK_EQ_INT(mx_nvfp4_scale_at(&t, 15, 16), 0x69);
    CHECK_EQ_INT(mx_nvfp4_code_at(&t, 15, 16), 7);
    CHECK_EQ_INT(mx_nvfp4_code_at(&t, 0, 31), 5);
    CHECK_SAME_F(y[3 * 32 + 5], 6.0f);
    CHECK_SAME_F(y[15 * 32 + 16], 432.0f / 448.0f);
    CHECK_SAME_F(y[31], 216.0f / 448.0f);
    CHECK_EQ_INT(t.n_blocks, 2);
    mx_nvfp4_free(&t);
}

/* 16x1 is byte-identical to 1x16 of the transpose (codes stored [cols, rows/2], scales [cols, rows/16]);
 * fake-quant equals quantize + dequantize; SR uses the element's Philox SR bits. */
TEST(nvfp4_16x1_transpose_fakequant_sr) {
    const int R = 32, C = 16;
    float x[32 * 16], xt[16 * 32], y[32 * 16], yt[16 * 32], z[32 * 16];
    test_lcg_matrix(x, xt, R, C, 5, 37, 40.0f);
    mx_nvfp4 a, b;
    quant(x, R, C, MX_LAYOUT_16x1, MX_ROUND_RNE, &a, y);
    quant(xt, C, R, MX_LAYOUT_1x16, MX_ROUND_RNE, &b, yt);
    CHECK(memcmp(a.codes, b.codes, R * C / 2) == 0 && memcmp(a.scales, b.scales, R * C / 16) == 0);
    CHECK_SAME_F(a.tensor_scale, b.tensor_scale);
    mx_nvfp4_free(&a); mx_nvfp4_free(&b);
    const mx_layout Ls[3] = {MX_LAYOUT_1x16, MX_LAYOUT_16x1, MX_LAYOUT_16x16};
    for (int l = 0; l < 3; l++)
        for (int rnd = 0; rnd < 2; rnd++) {
            mx_qopts o = {Ls[l], MX_SCALE_FLOOR, (mx_round)rnd, 11, 3};
            quant(x, R, C, Ls[l], (mx_round)rnd, &a, y);
            int64_t clipped = -1;
            CHECK(mx_fakequant_nvfp4(x, z, R, C, &o, &clipped) == 0);
            CHECK(memcmp(y, z, sizeof y) == 0 && clipped == a.n_clipped_blocks);
            if (rnd) /* the code of element (r, c): SR of x * r with bits (seed 11, SR, tensor 3, r*C + c) */
                for (int i = 0; i < R * C; i++) {
                    uint8_t sb = mx_nvfp4_scale_at(&a, i / C, i % C);
                    if (!sb) continue;
                    uint8_t want = mx_e2m1_sr(x[i] * mx_nvfp4_mult(sb, a.tensor_scale), mx_rand_u32(11, MX_RNG_SR, 3, (uint64_t)i));
                    if (mx_nvfp4_code_at(&a, i / C, i % C) != want) { CHECKF(0, "sr code %d", i); break; }
                }
            mx_nvfp4_free(&a);
        }
    /* shapes and layouts: NVFP4 refuses the 32 layouts and non-multiples of 16 */
    CHECK(mx_nvfp4_alloc(&a, 16, 32, MX_LAYOUT_1x32) == MX_EINVAL);
    CHECK(mx_nvfp4_alloc(&a, 16, 24, MX_LAYOUT_1x16) == MX_EINVAL);
    CHECK(strstr(mx_last_error(), "multiple of 16") != NULL);
}

/* The CPU linear layer runs the nvfp4 and mxfp8 recipes: Y = Q(X) Q(W)^T with the formats' fake-quant. */
TEST(linear_runs_nvfp4_and_mxfp8) {
    const int M = 4, K = 32, N = 8;
    float X[4 * 32], W[8 * 32], Y[4 * 8], Xq[4 * 32], Wq[8 * 32], Yw[4 * 8];
    uint64_t s = 9;
    for (int i = 0; i < M * K; i++) { s = s * 6364136223846793005ull + 1; X[i] = (float)(s >> 40) / 16777216.0f - 0.5f; }
    for (int i = 0; i < N * K; i++) { s = s * 6364136223846793005ull + 1; W[i] = (float)(s >> 40) / 16777216.0f - 0.5f; }
    const char* names[2] = {"nvfp4", "mxfp8"};
    for (int k = 0; k < 2; k++) {
        mx_recipe r;
        REQUIRE(mx_recipe_parse(names[k], &r) == 0);
        mx_linear_state st;
        memset(&st, 0, sizeof st);
        mx_linear_ctx c = {&r, 1, 0, 0, &st, 1};
        REQUIRE(mx_linear_forward(&c, X, W, Y, M, K, N) == 0);
        mx_qopts o = {k ? MX_LAYOUT_1x32 : MX_LAYOUT_1x16, k ? MX_SCALE_CEIL : MX_SCALE_FLOOR, MX_ROUND_RNE, 0, 0};
        if (k) { mx_fakequant_mxfp8(X, Xq, M, K, &o, NULL); mx_fakequant_mxfp8(W, Wq, N, K, &o, NULL); }
        else { mx_fakequant_nvfp4(X, Xq, M, K, &o, NULL); mx_fakequant_nvfp4(W, Wq, N, K, &o, NULL); }
        mx_sgemm_tn(Xq, Wq, Yw, M, N, K, 0);
        CHECKF(memcmp(Y, Yw, sizeof Y) == 0, "%s: linear forward differs from Q(X) Q(W)^T", names[k]);
        CHECK_EQ_INT(st.op[MX_FPROP][0].blocks, k ? M * K / 32 : M * K / 16);
    }
}
