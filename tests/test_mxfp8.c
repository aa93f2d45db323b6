/* test_mxfp8.c: MXFP8 (src/mx/mxfp8.c, docs/numerics.md "MXFP8") against hand-computed vectors.
 * E8M0 byte sb = e + 127; element code = E4M3(x / 2^e) (s.eeee.mmm, bias 7, max 448 = 0x7E,
 * subnormals m * 2^-9), value = E4M3(code) * 2^e. floor: e = floor(log2 amax) - 8;
 * ceil: the smallest e with amax / 2^e <= 448. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/mx.h"
#include "test.h"

static void quant8(const float* x, int R, int C, mx_layout L, mx_scale_rule rule, mx_mxfp8* t, float* y) {
    mx_qopts o = {L, rule, MX_ROUND_RNE, 0, 0};
    REQUIRE(mx_mxfp8_alloc(t, R, C, L) == 0);
    REQUIRE(mx_quantize_mxfp8(x, R, C, &o, t) == 0);
    REQUIRE(mx_dequantize_mxfp8(t, y) == 0);
}

TEST(mxfp8_scale_rules) {
    /* 448 = 1.75 * 2^8: floor 8-8 = 0 (127); ceil: 448/2^0 <= 448 -> 0 (127)
     * 449: floor 0 (127, 449 saturates); ceil: mantissa 1.754 > 1.75 -> 1 (128)
     * 1000 = 1.95 * 2^9: floor 1 (128); ceil 2 (129)
     * 1.0: floor/ceil -8 (119); 0 and subnormals: -127 (0); Inf/NaN: 0xFF
     * FLT_MAX = 1.99.. * 2^127: floor 119 (246), ceil 120 (247); 2^127: 119 (246) both */
    const float a[] = {448.0f, 449.0f, 1000.0f, 1.0f, 0.0f, 1e-40f, FLT_MAX, ldexpf(1.0f, 127)};
    const int fl[] = {127, 127, 128, 119, 0, 0, 246, 246};
    const int ce[] = {127, 128, 129, 119, 0, 0, 247, 246};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        CHECKF(mx_mxfp8_e8m0_for_amax(a[i], MX_SCALE_FLOOR) == fl[i], "floor(%g)", a[i]);
        CHECKF(mx_mxfp8_e8m0_for_amax(a[i], MX_SCALE_CEIL) == ce[i], "ceil(%g)", a[i]);
    }
    CHECK_EQ_INT(mx_mxfp8_e8m0_for_amax(INFINITY, MX_SCALE_FLOOR), 0xFF);
    CHECK_EQ_INT(mx_mxfp8_e8m0_for_amax(NAN, MX_SCALE_CEIL), 0xFF);
}

/* One block of 32 with amax 1000:
 *   floor e = 1: 1000/2 = 500 -> saturates to 448 (0x7E), decoded 896 (clipped);
 *               17/2 = 8.5 -> tie between 8 (1.000 * 2^3, exponent field 10) and 9 -> even 8 (0x50), decoded 16;
 *               -3/2 = -1.5 -> exact (0xBC), decoded -3
 *   ceil  e = 2: 1000/4 = 250 -> grid 16 in [128, 256): 256 (0x78), decoded 1024;
 *               17/4 = 4.25 -> tie between 4 and 4.5 -> even 4 (0x48), decoded 16;
 *               -3/4 = -0.75 -> exact (0xB4), decoded -3 */
TEST(mxfp8_reference_vector_floor_and_ceil) {
    float x[32] = {1000.0f, 17.0f, -3.0f};
    mx_mxfp8 t;
    float y[32];
    quant8(x, 1, 32, MX_LAYOUT_1x32, MX_SCALE_FLOOR, &t, y);
    CHECK_EQ_INT(t.scales[0], 128);
    CHECK_EQ_INT(t.codes[0], 0x7E); CHECK_EQ_INT(t.codes[1], 0x50); CHECK_EQ_INT(t.codes[2], 0xBC);
    CHECK_SAME_F(y[0], 896.0f); CHECK_SAME_F(y[1], 16.0f); CHECK_SAME_F(y[2], -3.0f); CHECK_SAME_F(y[3], 0.0f);
    CHECK_EQ_INT(t.n_clipped_blocks, 1);
    mx_mxfp8_free(&t);
    quant8(x, 1, 32, MX_LAYOUT_1x32, MX_SCALE_CEIL, &t, y);
    CHECK_EQ_INT(t.scales[0], 129);
    CHECK_EQ_INT(t.codes[0], 0x78); CHECK_EQ_INT(t.codes[1], 0x48); CHECK_EQ_INT(t.codes[2], 0xB4);
    CHECK_SAME_F(y[0], 1024.0f); CHECK_SAME_F(y[1], 16.0f); CHECK_SAME_F(y[2], -3.0f);
    CHECK_EQ_INT(t.n_clipped_blocks, 0);
    mx_mxfp8_free(&t);
}

/* Subnormal elements: amax 1 -> e = -8: 2^-17 / 2^-8 = 2^-9 (code 0x01, decoded 2^-17); 2^-18 -> 2^-10:
 * the tie between 0 and 2^-9 goes to 0; 3*2^-18 -> 1.5 * 2^-9 -> tie -> 2 (code 0x02, decoded 2^-16).
 * Zero block: e = -127 (byte 0), zeros. NaN block, Inf block: 0xFF, NaN. Tiny: amax 2^-130
 * (subnormal FP32) -> e = -127: 2^-130 * 2^127 = 0.125 (code 0x20), decoded 2^-130 exactly.
 * Huge: amax 2^127, floor e = 119: 2^127 / 2^119 = 256 (0x78) -> 2^127. */
TEST(mxfp8_subnormal_zero_nonfinite_huge_tiny) {
    float x[6 * 32] = {0}, y[6 * 32];
    x[0] = 1.0f; x[1] = ldexpf(1.0f, -17); x[2] = ldexpf(1.0f, -18); x[3] = 3.0f * ldexpf(1.0f, -18);
    x[64] = NAN; x[65] = 1.0f;
    x[96] = -INFINITY;
    x[128] = ldexpf(1.0f, -130);
    x[160] = ldexpf(1.0f, 127); x[161] = -1.0f;
    mx_mxfp8 t;
    quant8(x, 6, 32, MX_LAYOUT_1x32, MX_SCALE_FLOOR, &t, y);
    const int want_sb[6] = {119, 0, 0xFF, 0xFF, 0, 246};
    for (int b = 0; b < 6; b++) CHECK_EQ_INT(t.scales[b], want_sb[b]);
    CHECK_EQ_INT(t.codes[1], 0x01); CHECK_EQ_INT(t.codes[2], 0x00); CHECK_EQ_INT(t.codes[3], 0x02);
    CHECK_SAME_F(y[0], 1.0f); CHECK_SAME_F(y[1], ldexpf(1.0f, -17)); CHECK_SAME_F(y[2], 0.0f);
    CHECK_SAME_F(y[3], ldexpf(1.0f, -16));
    for (int i = 32; i < 64; i++) CHECK_SAME_F(y[i], 0.0f);
    for (int i = 64; i < 128; i++) CHECK(isnan(y[i]));
    CHECK_EQ_INT(t.codes[128], 0x20);
    CHECK_SAME_F(y[128], ldexpf(1.0f, -130));
    CHECK_EQ_INT(t.codes[160], 0x78);
    CHECK_SAME_F(y[160], ldexpf(1.0f, 127));
    CHECK_SAME_F(y[161], -0.0f); /* -1 / 2^119 is far below E4M3's smallest subnormal: -0 */
    mx_mxfp8_free(&t);
}

/* 32x1 is byte-identical to 1x32 of the transpose; fake-quant = quantize + dequantize; bad layouts,
 * rules and roundings are refused. */
TEST(mxfp8_32x1_transpose_and_fakequant) {
    const int R = 64, C = 3;
    float x[64 * 3], xt[3 * 64], y[64 * 3], yt[64 * 3], z[64 * 3];
    test_lcg_matrix(x, xt, R, C, 77, 29, 3000.0f);
    for (int rule = 0; rule < 3; rule += 2) {
        mx_mxfp8 a, b;
        quant8(x, R, C, MX_LAYOUT_32x1, (mx_scale_rule)rule, &a, y);
        quant8(xt, C, R, MX_LAYOUT_1x32, (mx_scale_rule)rule, &b, yt);
        CHECK(memcmp(a.codes, b.codes, R * C) == 0 && memcmp(a.scales, b.scales, R * C / 32) == 0);
        mx_qopts o = {MX_LAYOUT_32x1, (mx_scale_rule)rule, MX_ROUND_RNE, 0, 0};
        int64_t clipped = -1;
        CHECK(mx_fakequant_mxfp8(x, z, R, C, &o, &clipped) == 0);
        CHECK(memcmp(y, z, sizeof y) == 0 && clipped == a.n_clipped_blocks);
        if (rule == MX_SCALE_CEIL) CHECK_EQ_INT(clipped, 0);
        mx_mxfp8_free(&a); mx_mxfp8_free(&b);
    }
    mx_mxfp8 t;
    CHECK(mx_mxfp8_alloc(&t, 32, 32, MX_LAYOUT_32x32) == MX_EINVAL);
    CHECK(mx_mxfp8_alloc(&t, 32, 16, MX_LAYOUT_1x16) == MX_EINVAL);
    REQUIRE(mx_mxfp8_alloc(&t, 1, 32, MX_LAYOUT_1x32) == 0);
    mx_qopts bad = {MX_LAYOUT_1x32, MX_SCALE_EVEN, MX_ROUND_RNE, 0, 0};
    CHECK(mx_quantize_mxfp8(x, 1, 32, &bad, &t) == MX_EINVAL);
    bad.scale = MX_SCALE_FLOOR; bad.round = MX_ROUND_SR;
    CHECK(mx_quantize_mxfp8(x, 1, 32, &bad, &t) == MX_EINVAL);
    mx_mxfp8_free(&t);
}
