/* test_mx.c: the MX numerics against reference values and identities. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/mx.h"
#include "test.h"

static const float k_grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

/* deterministic test data: uniform in [-1, 1) */
static float urand(uint64_t* s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static float nrand(uint64_t* s) { /* approx normal: sum of 12 uniforms */
    float a = 0;
    for (int i = 0; i < 12; i++) a += urand(s) * 0.5f;
    return a;
}

TEST(e2m1_rne_ties_and_saturation) {
    const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.1f, 0.0f, 0.26f, 0.74f, 100.0f, 1e-30f};
    const float out[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, 0.0f, 0.5f, 0.5f, 6.0f, 0.0f};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        CHECK_SAME_F(mx_e2m1_decode(mx_e2m1_rne(in[i])), out[i]);
        CHECK_SAME_F(mx_e2m1_decode(mx_e2m1_rne(-in[i])), -out[i]);
    }
}

TEST(e2m1_all_codes_decode) {
    for (int c = 0; c < 16; c++) {
        float v = mx_e2m1_decode((uint8_t)c);
        float want = (c & 8) ? -k_grid[c & 7] : k_grid[c & 7];
        CHECK_SAME_F(v, want);
        /* every code is its own rounding (the grid is exact) */
        CHECK_EQ_INT(mx_e2m1_rne(v), c);
    }
}

TEST(e2m1_rne_is_nearest_even) {
    uint64_t s = 1;
    for (int i = 0; i < 200000; i++) {
        float v = urand(&s) * 7.0f;
        float a = fabsf(v);
        /* brute force: nearest grid point, ties to the even code */
        int best = 0;
        for (int c = 1; c < 8; c++) {
            float d = fabsf(a - k_grid[c]), db = fabsf(a - k_grid[best]);
            if (d < db || (d == db && (c & 1) == 0)) best = c;
        }
        if (a > 6) best = 7;
        float want = v < 0 ? -k_grid[best] : k_grid[best];
        float got = mx_e2m1_decode(mx_e2m1_rne(v));
        if (got != want) { CHECKF(0, "rne(%.9g) = %g, expected %g", v, got, want); break; }
    }
}

/* mx_e2m1_rint_bits (the GPU fast quantizer's rounding) against mx_e2m1_rne's magnitude on every float of
 * [0.25, 8) (every threshold and tie lies there) and on a sample of the binades below (which all round to
 * 0 or 0.5), and the float it returns: 2^23 + code exactly. The GPU test checks all 2^32 floats. */
TEST(e2m1_rint_equals_rne) {
    long long bad = 0, n = 0;
    for (uint32_t e = 0; e <= 129; e++) {          /* biased exponents of y < 8 */
        const uint32_t step = e >= 125 ? 1u : 4099u; /* all of [0.25, 8), a sample below */
        for (uint32_t m = 0; m < (1u << 23); m += step) {
            const float y = mx_u2f(e << 23 | m);
            const uint32_t want = (uint32_t)(mx_e2m1_rne(y) & 7), got = mx_e2m1_rint_bits(y);
            n++;
            if (got != 0x4b000000u + want) {
                if (!bad) CHECKF(0, "y = %.9g: rint bits 0x%08x, mx_e2m1_rne %u", y, got, want);
                bad++;
            }
        }
    }
    CHECKF(bad == 0, "%lld of %lld floats differ", bad, n);
    CHECK(n > 40000000);
    /* the ties and the saturation by name */
    const float ys[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 6.99f, 7.0f, 7.99f, 0.0f};
    const uint32_t cs[] = {0, 2, 2, 4, 4, 6, 6, 7, 7, 7, 7, 0};
    for (int i = 0; i < 12; i++) CHECKF(mx_e2m1_rint_bits(ys[i]) == 0x4b000000u + cs[i], "y = %g", ys[i]);
}

TEST(e8m0_decode) {
    CHECK_SAME_F(mx_e8m0_decode(0x00), ldexpf(1.0f, -127));
    CHECK_SAME_F(mx_e8m0_decode(0x7F), 1.0f);
    CHECK_SAME_F(mx_e8m0_decode(0x80), 2.0f);
    CHECK_SAME_F(mx_e8m0_decode(0xFE), ldexpf(1.0f, 127));
    CHECK(isnan(mx_e8m0_decode(0xFF)));
}

TEST(fp8_codes_round_trip) {
    int n_nan4 = 0, n_nan5 = 0, n_inf5 = 0;
    for (int c = 0; c < 256; c++) {
        float v4 = mx_e4m3_decode((uint8_t)c), v5 = mx_e5m2_decode((uint8_t)c);
        if (isnan(v4)) n_nan4++;
        else CHECK_EQ_INT(mx_e4m3_encode(v4), c);
        if (isnan(v5)) n_nan5++;
        else if (isinf(v5)) n_inf5++;
        else CHECK_EQ_INT(mx_e5m2_encode(v5), c);
    }
    CHECK_EQ_INT(n_nan4, 2);  /* S.1111.111 */
    CHECK_EQ_INT(n_nan5, 6);
    CHECK_EQ_INT(n_inf5, 2);
    CHECK_SAME_F(mx_e4m3_decode(0x7E), 448.0f);
    CHECK_SAME_F(mx_e4m3_decode(0x01), ldexpf(1.0f, -9));
    CHECK_SAME_F(mx_e4m3_decode(0x08), ldexpf(1.0f, -6));
    CHECK_SAME_F(mx_e5m2_decode(0x7B), 57344.0f);
    CHECK_SAME_F(mx_e5m2_decode(0x01), ldexpf(1.0f, -16));
    CHECK_SAME_F(mx_e5m2_decode(0x3C), 1.0f);
    CHECK_SAME_F(mx_e4m3_decode(0x38), 1.0f);
    /* saturation (SATFINITE) and NaN */
    CHECK_EQ_INT(mx_e4m3_encode(1000.0f), 0x7E);
    CHECK_EQ_INT(mx_e4m3_encode(-INFINITY), 0xFE);
    CHECK_EQ_INT(mx_e5m2_encode(1e9f), 0x7B);
    CHECK(isnan(mx_e4m3_decode(mx_e4m3_encode(NAN))));
    CHECK(isnan(mx_e5m2_decode(mx_e5m2_encode(NAN))));
}

/* FP8 encode must be round-to-nearest-even over the finite codes. */
static void fp8_nearest(int e5) {
    uint64_t s = 7;
    float maxv = e5 ? 57344.0f : 448.0f;
    for (int i = 0; i < 20000; i++) {
        float v = ldexpf(urand(&s), (int)((urand(&s) + 1) * 12) - 14) * (e5 ? 64.0f : 1.0f);
        if (fabsf(v) > maxv) continue;
        int best = -1;
        float bd = INFINITY;
        for (int c = 0; c < 256; c++) {
            float d = e5 ? mx_e5m2_decode((uint8_t)c) : mx_e4m3_decode((uint8_t)c);
            if (!isfinite(d) || signbit(d) != signbit(v)) continue;
            float dist = fabsf(d - v);
            if (dist < bd || (dist == bd && (c & 1) == 0)) { bd = dist; best = c; }
        }
        int got = e5 ? mx_e5m2_encode(v) : mx_e4m3_encode(v);
        if (got != best) { CHECKF(0, "%s(%.9g) = 0x%02x, expected 0x%02x", e5 ? "e5m2" : "e4m3", v, got, best); return; }
    }
}
TEST(fp8_encode_is_nearest_even) { fp8_nearest(0); fp8_nearest(1); }

TEST(bf16_rounding) {
    CHECK_SAME_F(mx_round_bf16(1.0f), 1.0f);
    CHECK_SAME_F(mx_round_bf16(1.0f + ldexpf(1, -8)), 1.0f);                       /* tie -> even */
    CHECK_SAME_F(mx_round_bf16(1.0f + 3 * ldexpf(1, -8)), 1.0f + ldexpf(1, -6));    /* tie -> even (up) */
    CHECK_SAME_F(mx_round_bf16(1.0f + ldexpf(1, -8) + ldexpf(1, -20)), 1.0f + ldexpf(1, -7));
    CHECK(isnan(mx_round_bf16(NAN)));
    /* every NaN the canonical quiet 0x7fff (the hardware conversion's); subnormals rounded, not flushed; the largest
     * float overflows to Inf */
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fffffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) CHECK(mx_bf16_from_f32(mx_u2f(nans[i])) == 0x7fff);
    CHECK(mx_bf16_from_f32(mx_u2f(0x00018000u)) == 0x0002); /* tie, odd: up */
    CHECK(mx_bf16_from_f32(mx_u2f(0x00008000u)) == 0x0000); /* tie, even: down */
    CHECK(mx_bf16_from_f32(mx_u2f(0x80008001u)) == 0x8001); /* above the tie: up, the sign kept */
    CHECK(mx_bf16_from_f32(mx_u2f(0x7f7fffffu)) == 0x7f80);
    CHECK(mx_bf16_from_f32(-INFINITY) == 0xff80);
}

TEST(philox_known_answers) {
    /* Random123 kat_vectors, philox4x32 10 */
    const uint32_t ctr[3][4] = {{0, 0, 0, 0}, {~0u, ~0u, ~0u, ~0u}, {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
    const uint32_t key[3][2] = {{0, 0}, {~0u, ~0u}, {0xa4093822, 0x299f31d0}};
    const uint32_t want[3][4] = {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                 {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                 {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        mx_philox4x32_10(ctr[t], key[t], out);
        for (int i = 0; i < 4; i++) CHECK_EQ_INT(out[i], want[t][i]);
    }
    /* mx_rand_u32 is word index%4 of counter (index/4, index>>34, stream, domain) */
    uint32_t c[4] = {1, 0, 7, MX_RNG_SR}, k[2] = {0x1234, 0}, o[4];
    mx_philox4x32_10(c, k, o);
    CHECK_EQ_INT(mx_rand_u32(0x1234, MX_RNG_SR, 7, 6), o[2]);
}

/* ---- scale rules -------------------------------------------------------------- */

static void block_with_amax(float* b, float amax, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < 32; i++) b[i] = urand(&s) * amax * 0.5f;
    b[seed % 32] = -amax;
}

TEST(scale_rules_on_crafted_blocks) {
    float b[32];
    uint8_t codes[32];
    int clip;
    for (int k = -20; k <= 20; k += 5) {
        float amax = 7.9f * ldexpf(1, k);
        block_with_amax(b, amax, 3);
        /* floor: e = k, 7.9 saturates to 6 */
        uint8_t sb = mx_quantize_block(b, 1, MX_SCALE_FLOOR, NULL, codes, &clip);
        CHECK_EQ_INT(sb, 127 + k);
        CHECK_EQ_INT(clip, 1);
        CHECK_EQ_INT(codes[3] & 7, 7);
        /* ceil: e = k+1, 3.95 -> 4, nothing clips */
        sb = mx_quantize_block(b, 1, MX_SCALE_CEIL, NULL, codes, &clip);
        CHECK_EQ_INT(sb, 127 + k + 1);
        CHECK_EQ_INT(clip, 0);
        CHECK_SAME_F(mx_e2m1_decode(codes[3]), -4.0f);
        /* even: 7.9 = 1.975 * 4 rounds to 2 * 4 -> e = k+1 */
        sb = mx_quantize_block(b, 1, MX_SCALE_EVEN, NULL, codes, &clip);
        CHECK_EQ_INT(sb, 127 + k + 1);
    }
    /* even at its boundary: amax = 7 * 2^k (mantissa 1.75) rounds up; just below does not */
    float a7 = 7.0f * ldexpf(1, 4);
    CHECK_EQ_INT(mx_e8m0_for_amax(a7, MX_SCALE_EVEN), 127 + 5);
    CHECK_EQ_INT(mx_e8m0_for_amax(nextafterf(a7, 0), MX_SCALE_EVEN), 127 + 4);
    CHECK_EQ_INT(mx_e8m0_for_amax(a7, MX_SCALE_FLOOR), 127 + 4);
    /* ceil at its boundary: 6 * 2^k fits, the next float up does not */
    float a6 = 6.0f * ldexpf(1, -3);
    CHECK_EQ_INT(mx_e8m0_for_amax(a6, MX_SCALE_CEIL), 127 - 3);
    CHECK_EQ_INT(mx_e8m0_for_amax(nextafterf(a6, 1), MX_SCALE_CEIL), 127 - 2);
    /* clamps */
    CHECK_EQ_INT(mx_e8m0_for_amax(1e-40f, MX_SCALE_FLOOR), 0);
    CHECK_EQ_INT(mx_e8m0_for_amax(ldexpf(1, -120), MX_SCALE_FLOOR), 127 - 122);
    CHECK_EQ_INT(mx_e8m0_for_amax(3.4e38f, MX_SCALE_FLOOR), 127 + 125);
    CHECK_EQ_INT(mx_e8m0_for_amax(INFINITY, MX_SCALE_CEIL), 0xFF);
}

TEST(ceil_never_clips_random) {
    uint64_t s = 11;
    float b[32];
    uint8_t codes[32];
    for (int t = 0; t < 5000; t++) {
        for (int i = 0; i < 32; i++) b[i] = ldexpf(urand(&s), (int)(urand(&s) * 40));
        int clip;
        uint8_t sb = mx_quantize_block(b, 1, MX_SCALE_CEIL, NULL, codes, &clip);
        CHECK_EQ_INT(clip, 0);
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(b[i]));
        float sc = mx_e8m0_decode(sb);
        /* the smallest such scale: half of it would clip */
        CHECK(amax / sc <= 6.0f && amax / (sc * 0.5f) > 6.0f);
        if (test_failures) return;
    }
}

TEST(zero_and_nonfinite_blocks) {
    float x[2 * 32] = {0};
    x[32 + 5] = NAN;
    mx_qopts o = {MX_LAYOUT_1x32, MX_SCALE_FLOOR, MX_ROUND_RNE, 0, 0};
    mx_fp4 t;
    REQUIRE(mx_fp4_alloc(&t, 2, 32, MX_LAYOUT_1x32) == 0);
    REQUIRE(mx_quantize_fp4(x, 2, 32, &o, &t) == 0);
    CHECK_EQ_INT(t.scales[0], 0x00);
    CHECK_EQ_INT(t.scales[1], 0xFF);
    float y[64];
    mx_dequantize_fp4(&t, y);
    for (int i = 0; i < 32; i++) CHECK_SAME_F(y[i], 0.0f);
    for (int i = 32; i < 64; i++) CHECK(isnan(y[i]));
    x[32 + 5] = -INFINITY;
    mx_quantize_fp4(x, 2, 32, &o, &t);
    CHECK_EQ_INT(t.scales[1], 0xFF);
    mx_fp4_free(&t);
}

/* ---- whole tensors --------------------------------------------------------------- */

TEST(grid_values_round_trip_all_layouts) {
    const int R = 64, C = 96;
    float* x = malloc(sizeof(float) * R * C);
    float* y = malloc(sizeof(float) * R * C);
    uint64_t s = 5;
    for (int L = 0; L < 3; L++) {
        /* grid values times a per-block power of two, each block holding a 6 */
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                int blk = L == 0 ? r * 100 + c / 32 : L == 1 ? c * 100 + r / 32 : (r / 32) * 100 + c / 32;
                int e = blk % 23 - 11;
                int code = (int)((urand(&s) + 1) * 8) & 15;
                x[r * C + c] = mx_e2m1_decode((uint8_t)code) * ldexpf(1, e);
                int first = L == 0 ? c % 32 == 0 : L == 1 ? r % 32 == 0 : (r % 32 == 0 && c % 32 == 0);
                if (first) x[r * C + c] = 6.0f * ldexpf(1, e);
            }
        mx_qopts o = {(mx_layout)L, MX_SCALE_FLOOR, MX_ROUND_RNE, 0, 0};
        REQUIRE(mx_fakequant_fp4(x, y, R, C, &o, NULL) == 0);
        for (int i = 0; i < R * C; i++) CHECK_SAME_F(y[i], x[i]);
        if (test_failures) break;
    }
    free(x);
    free(y);
}

TEST(random_blocks_error_bound) {
    const int R = 128, C = 256;
    float* x = malloc(sizeof(float) * R * C);
    float* y = malloc(sizeof(float) * R * C);
    uint64_t s = 9;
    for (int i = 0; i < R * C; i++) x[i] = nrand(&s);
    for (int rule = 0; rule < 3; rule++) {
        mx_qopts o = {MX_LAYOUT_1x32, (mx_scale_rule)rule, MX_ROUND_RNE, 0, 0};
        mx_fp4 t;
        REQUIRE(mx_fp4_alloc(&t, R, C, MX_LAYOUT_1x32) == 0);
        mx_quantize_fp4(x, R, C, &o, &t);
        mx_dequantize_fp4(&t, y);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                float sc = mx_e8m0_decode(mx_fp4_scale_at(&t, r, c));
                float v = x[r * C + c] / sc, q = y[r * C + c] / sc;
                /* within the grid: half a spacing (<= |v|/4 above 1, <= 0.25 below); above 6: saturated */
                float bound = fabsf(v) >= 6 ? fabsf(v) - 6 : fabsf(v) >= 1 ? fabsf(v) / 4 : 0.25f;
                if (!(fabsf(v - q) <= bound)) { CHECKF(0, "rule %d: %g -> %g", rule, v, q); break; }
            }
        double sqnr = mx_sqnr_db(x, y, (size_t)R * C);
        /* Gaussian data, MXFP4: about 17-18 dB (measured); a broken quantizer lands far lower */
        CHECKF(sqnr > 16.0 && sqnr < 21.0, "rule %s: SQNR %.2f dB", mx_scale_name((mx_scale_rule)rule), sqnr);
        mx_fp4_free(&t);
    }
    free(x);
    free(y);
}

TEST(layout_32x1_is_1x32_of_transpose) {
    const int R = 64, C = 32 * 3;
    float *x = malloc(sizeof(float) * R * C), *xt = malloc(sizeof(float) * R * C);
    uint64_t s = 13;
    for (int i = 0; i < R * C; i++) x[i] = nrand(&s) * (i % 7 == 0 ? 30 : 1);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) xt[c * R + r] = x[r * C + c];
    mx_fp4 a, b;
    mx_qopts oc = {MX_LAYOUT_32x1, MX_SCALE_EVEN, MX_ROUND_RNE, 0, 0};
    mx_qopts orow = {MX_LAYOUT_1x32, MX_SCALE_EVEN, MX_ROUND_RNE, 0, 0};
    REQUIRE(mx_fp4_alloc(&a, R, C, MX_LAYOUT_32x1) == 0 && mx_fp4_alloc(&b, C, R, MX_LAYOUT_1x32) == 0);
    mx_quantize_fp4(x, R, C, &oc, &a);
    mx_quantize_fp4(xt, C, R, &orow, &b);
    /* the stored (transposed) codes and scales are the same bytes */
    CHECK(memcmp(a.codes, b.codes, (size_t)R * C / 2) == 0);
    CHECK(memcmp(a.scales, b.scales, (size_t)R * C / 32) == 0);
    /* packing: element 2i low nibble, 2i+1 high nibble */
    CHECK_EQ_INT(a.codes[0] & 15, mx_fp4_code_at(&a, 0, 0));
    CHECK_EQ_INT(a.codes[0] >> 4, mx_fp4_code_at(&a, 1, 0));
    mx_fp4_free(&a);
    mx_fp4_free(&b);
    free(x);
    free(xt);
}

TEST(layout_32x32_one_scale_per_tile) {
    const int R = 64, C = 64;
    float* x = malloc(sizeof(float) * R * C);
    uint64_t s = 17;
    for (int i = 0; i < R * C; i++) x[i] = urand(&s);
    x[5 * C + 40] = 100.0f;  /* tile (0,1) */
    mx_fp4 t;
    mx_qopts o = {MX_LAYOUT_32x32, MX_SCALE_FLOOR, MX_ROUND_RNE, 0, 0};
    REQUIRE(mx_fp4_alloc(&t, R, C, MX_LAYOUT_32x32) == 0);
    REQUIRE(mx_quantize_fp4(x, R, C, &o, &t) == 0);
    CHECK_EQ_INT(mx_fp4_n_scales(R, C, MX_LAYOUT_32x32), 4);
    CHECK_EQ_INT(t.scales[1], mx_e8m0_for_amax(100.0f, MX_SCALE_FLOOR));
    CHECK_EQ_INT(mx_fp4_scale_at(&t, 31, 63), t.scales[1]);
    CHECK_EQ_INT(mx_fp4_scale_at(&t, 32, 0), t.scales[2]);
    for (int k = 0; k < 4; k++) {
        int tr = k / 2, tc = k % 2;
        float amax = 0;
        for (int i = 0; i < 32; i++)
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[(tr * 32 + i) * C + tc * 32 + j]));
        CHECK_EQ_INT(t.scales[k], mx_e8m0_for_amax(amax, MX_SCALE_FLOOR));
    }
    mx_fp4_free(&t);
    free(x);
}

TEST(bad_shapes_are_errors) {
    mx_fp4 t;
    CHECK(mx_fp4_alloc(&t, 4, 48, MX_LAYOUT_1x32) == MX_EINVAL);
    CHECK(strstr(mx_last_error(), "multiple of 32") != NULL);
    CHECK(mx_fp4_alloc(&t, 48, 32, MX_LAYOUT_32x1) == MX_EINVAL);
    CHECK(mx_fp4_alloc(&t, 32, 48, MX_LAYOUT_32x32) == MX_EINVAL);
    CHECK(mx_fp4_alloc(&t, 3, 32, MX_LAYOUT_1x32) == MX_OK);
    mx_fp4_free(&t);
    CHECK(mx_fp4_alloc(&t, 0, 32, MX_LAYOUT_1x32) == MX_EINVAL);
}

/* ---- stochastic rounding ----------------------------------------------------------- */

TEST(sr_unbiased_and_reproducible) {
    /* a block scaled to e = 0 (amax 6 -> floor gives 2^0) with values between grid points */
    const float vals[] = {0.1f, 0.3f, 1.3f, 2.2f, 3.7f, 4.5f, 5.9f, -0.7f, -2.9f};
    const int draws = 20000;
    for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
        double sum = 0;
        for (int d = 0; d < draws; d++) {
            uint32_t r = mx_rand_u32(42, MX_RNG_SR, (uint32_t)v, (uint64_t)d);
            sum += mx_e2m1_decode(mx_e2m1_sr(vals[v], r));
        }
        double mean = sum / draws;
        float a = fabsf(vals[v]);
        double step = a < 2 ? 0.5 : a < 4 ? 1 : 2;
        double sd = step * 0.5 / sqrt(draws);  /* Bernoulli sd <= step/2 */
        CHECKF(fabs(mean - vals[v]) < 5 * sd, "SR mean of %g = %.5f (5 sd = %.5f)", vals[v], mean, 5 * sd);
    }
    /* on-grid values never move */
    for (int c = 0; c < 16; c++)
        for (uint32_t r = 0; r < 4000000000u; r += 123456789u)
            CHECK_EQ_INT(mx_e2m1_sr(mx_e2m1_decode((uint8_t)c), r), c);
    /* same seed, same codes; another seed, others */
    const int R = 32, C = 64;
    float x[32 * 64], y1[32 * 64], y2[32 * 64], y3[32 * 64];
    uint64_t s = 3;
    for (int i = 0; i < R * C; i++) x[i] = nrand(&s);
    mx_qopts o = {MX_LAYOUT_1x32, MX_SCALE_FLOOR, MX_ROUND_SR, 1234, 7};
    mx_fakequant_fp4(x, y1, R, C, &o, NULL);
    mx_fakequant_fp4(x, y2, R, C, &o, NULL);
    o.seed = 1235;
    mx_fakequant_fp4(x, y3, R, C, &o, NULL);
    CHECK(memcmp(y1, y2, sizeof y1) == 0);
    int diff = 0;
    for (int i = 0; i < R * C; i++) diff += y1[i] != y3[i];
    CHECKF(diff > R * C / 10, "another seed changed only %d of %d values", diff, R * C);
}

/* scale=dither (Tseng et al.'s 3/4 scaling): floor's exponent, the scaled values times 3/4 before rounding,
 * decoded times 4/3 (correctly rounded); stochastic rounding never clips and stays unbiased where floor's
 * clips. */
TEST(dither_scale_rule) {
    CHECK(mx_scale_parse("dither") == MX_SCALE_DITHER && !strcmp(mx_scale_name(MX_SCALE_DITHER), "dither"));
    CHECK(mx_e8m0_for_amax(7.5f, MX_SCALE_DITHER) == mx_e8m0_for_amax(7.5f, MX_SCALE_FLOOR));
    CHECK(mx_e8m0_for_amax(7.5f, MX_SCALE_DITHER) == 127); /* floor(log2 7.5) - 2 = 0 */
    /* a hand-made block: amax 7.5 -> e = 0; x * 3/4 = 5.625, 0.75, -2.25 round (RNE) to 6, 1 (tie: even code),
     * -2; decoded x 4/3: 8, 4/3, -8/3 (each the float nearest) */
    float x[32] = {7.5f, 1.0f, -3.0f}, y[32], y0[32];
    mx_qopts o = {MX_LAYOUT_1x32, MX_SCALE_DITHER, MX_ROUND_RNE, 0, 0};
    int64_t clipped = -1;
    CHECK(mx_fakequant_fp4(x, y, 1, 32, &o, &clipped) == 0 && clipped == 0);
    CHECK_SAME_F(y[0], 8.0f);
    CHECK_SAME_F(y[1], 4.0f / 3.0f);
    CHECK_SAME_F(y[2], -8.0f / 3.0f);
    CHECK_SAME_F(y[3], 0.0f);
    o.scale = MX_SCALE_FLOOR; /* floor: 7.5 clips to 6, the block counts as clipped */
    CHECK(mx_fakequant_fp4(x, y0, 1, 32, &o, &clipped) == 0 && clipped == 1 && y0[0] == 6.0f);
    /* the packed tensor (every layout) decodes the same values: mx_fp4.scale carries the rule */
    for (int l = 0; l < 3; l++) {
        float big[32 * 32], a[32 * 32], b[32 * 32];
        uint64_t st = 77 + (uint64_t)l;
        for (int i = 0; i < 32 * 32; i++) big[i] = 3.0f * nrand(&st);
        mx_qopts q = {(mx_layout)l, MX_SCALE_DITHER, MX_ROUND_RNE, 0, 0};
        mx_fp4 t;
        REQUIRE(mx_fp4_alloc(&t, 32, 32, (mx_layout)l) == 0);
        CHECK(mx_quantize_fp4(big, 32, 32, &q, &t) == 0 && t.scale == MX_SCALE_DITHER && t.n_clipped_blocks == 0);
        CHECK(mx_dequantize_fp4(&t, a) == 0);
        CHECK(mx_fakequant_fp4(big, b, 32, 32, &q, NULL) == 0);
        CHECK(memcmp(a, b, sizeof a) == 0);
        for (int r = 0; r < 32; r++) /* the value is the code's grid point x 2^e x 4/3, rounded once */
            for (int c = 0; c < 32; c++) {
                double want = (double)mx_e2m1_decode(mx_fp4_code_at(&t, r, c)) * mx_e8m0_decode(mx_fp4_scale_at(&t, r, c)) *
                              4.0 / 3.0;
                CHECK_SAME_F(a[r * 32 + c], (float)want);
            }
        mx_fp4_free(&t);
    }
    /* SR: 7.9 in a block of amax 7.9 (e = 0) is 5.925 after the 3/4, between 4 and 6: the mean of the decoded
     * draws is 7.9; floor's SR clips it to 6 every time */
    const int rows = 4096;
    float* xs = calloc((size_t)rows * 32, sizeof(float));
    float* ys = calloc((size_t)rows * 32, sizeof(float));
    for (int r = 0; r < rows; r++) xs[(size_t)r * 32] = 7.9f;
    mx_qopts sr = {MX_LAYOUT_1x32, MX_SCALE_DITHER, MX_ROUND_SR, 99, 3};
    CHECK(mx_fakequant_fp4(xs, ys, rows, 32, &sr, &clipped) == 0 && clipped == 0);
    double sum = 0;
    for (int r = 0; r < rows; r++) sum += ys[(size_t)r * 32];
    double sd = 2.0 * 4.0 / 3.0 * 0.5 / sqrt((double)rows); /* Bernoulli of one step (2), times 4/3 */
    CHECKF(fabs(sum / rows - 7.9) < 5 * sd, "dither SR mean %.5f (want 7.9, 5 sd %.5f)", sum / rows, 5 * sd);
    sr.scale = MX_SCALE_FLOOR;
    CHECK(mx_fakequant_fp4(xs, ys, rows, 32, &sr, &clipped) == 0 && clipped == rows && ys[0] == 6.0f);
    free(xs);
    free(ys);
}

/* ---- Hadamard ------------------------------------------------------------------ */

TEST(hadamard_orthonormal_and_sylvester) {
    for (int n = 2; n <= 256; n *= 2) {
        float* H = calloc((size_t)n * n, sizeof(float));
        for (int i = 0; i < n; i++) {
            H[i * n + i] = 1.0f;
            mx_fwht(H + i * n, n);  /* row i = e_i H */
        }
        double worst = 0, worst_entry = 0;
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < n; j++) {
                double d = 0;
                for (int k = 0; k < n; k++) d += (double)H[i * n + k] * H[j * n + k];
                worst = fmax(worst, fabs(d - (i == j)));
                double want = (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) / sqrt((double)n);
                worst_entry = fmax(worst_entry, fabs(H[i * n + j] - want));
            }
        }
        CHECKF(worst < 1e-6, "n=%d: |H H^T - I| = %g", n, worst);
        CHECKF(worst_entry < 1e-7, "n=%d: entries off the Sylvester matrix by %g", n, worst_entry);
        free(H);
    }
    CHECK(!mx_hadamard_valid(12) && !mx_hadamard_valid(512) && !mx_hadamard_valid(1) && mx_hadamard_valid(16));
    float x[24];
    CHECK(mx_hadamard_rotate(x, 1, 24, 1, 16, 0, 0, 0) == MX_EINVAL);
}

TEST(hadamard_rotation_axes_and_random_signs) {
    const int R = 32, C = 64;
    float x[32 * 64], a[32 * 64], b[32 * 64];
    uint64_t s = 21;
    for (int i = 0; i < R * C; i++) x[i] = nrand(&s);
    /* rotating along columns == rotating the transpose along rows */
    memcpy(a, x, sizeof x);
    mx_hadamard_rotate(a, R, C, 0, 16, 1, 99, 5);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) b[c * R + r] = x[r * C + c];
    mx_hadamard_rotate(b, C, R, 1, 16, 1, 99, 5);
    int same = 1;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) same &= a[r * C + c] == b[c * R + r];
    CHECK(same);
    /* rhN: reproducible from its seed, different under another, norm preserved */
    float c1[32 * 64], c2[32 * 64], c3[32 * 64];
    memcpy(c1, x, sizeof x); memcpy(c2, x, sizeof x); memcpy(c3, x, sizeof x);
    mx_hadamard_rotate(c1, R, C, 1, 32, 1, 7, 1);
    mx_hadamard_rotate(c2, R, C, 1, 32, 1, 7, 1);
    mx_hadamard_rotate(c3, R, C, 1, 32, 1, 8, 1);
    CHECK(memcmp(c1, c2, sizeof c1) == 0);
    CHECK(memcmp(c1, c3, sizeof c1) != 0);
    double n0 = 0, n1 = 0;
    for (int i = 0; i < R * C; i++) { n0 += (double)x[i] * x[i]; n1 += (double)c1[i] * c1[i]; }
    CHECK_NEAR(n1 / n0, 1.0, 1e-5);
    /* signs: about half negative */
    int neg = 0;
    for (int j = 0; j < 4096; j++) neg += mx_rh_sign(7, 1, (uint64_t)j) < 0;
    CHECKF(neg > 1900 && neg < 2200, "%d of 4096 signs negative", neg);
    /* hN spreads an outlier: a single spike becomes n equal magnitudes */
    float v[16] = {0};
    v[3] = 8.0f;
    mx_fwht(v, 16);
    for (int i = 0; i < 16; i++) CHECK_SAME_F(fabsf(v[i]), 2.0f);
}

/* ---- FP8 per tensor ----------------------------------------------------------- */

TEST(fp8_per_tensor_current_scaling) {
    float x[256], y[256];
    uint64_t s = 8;
    for (int i = 0; i < 256; i++) x[i] = nrand(&s) * 0.01f;
    x[17] = -0.5f;
    float amax = mx_amax(x, 256);
    CHECK_SAME_F(amax, 0.5f);
    float sc = mx_fp8_scale_for_amax(amax, MX_FP8_E4M3);
    CHECK_SAME_F(sc, 896.0f);
    uint8_t codes[256];
    mx_fp8_quantize(x, 256, sc, MX_FP8_E4M3, codes);
    CHECK_EQ_INT(codes[17], 0xFE);  /* -448 */
    mx_fp8_fakequant(x, y, 256, sc, MX_FP8_E4M3);
    for (int i = 0; i < 256; i++) {
        CHECK_SAME_F(y[i], mx_e4m3_decode(codes[i]) * (1.0f / sc));
        /* E4M3: relative error <= 2^-4 for normal values */
        if (fabsf(x[i] * sc) >= ldexpf(1, -6)) CHECK(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0.0625f);
    }
    CHECK_SAME_F(mx_fp8_scale_for_amax(0.0f, MX_FP8_E5M2), 1.0f);
    CHECK_SAME_F(mx_fp8_scale_for_amax(2.0f, MX_FP8_E5M2), 28672.0f);
}

TEST(fakequant_equals_quantize_dequantize) {
    const int R = 64, C = 128;
    float *x = malloc(sizeof(float) * R * C), *a = malloc(sizeof(float) * R * C), *b = malloc(sizeof(float) * R * C);
    uint64_t s = 31;
    for (int i = 0; i < R * C; i++) x[i] = nrand(&s) * (i % 97 == 0 ? 100.0f : 1.0f);
    x[70] = NAN;
    for (int L = 0; L < 3; L++)
        for (int round = 0; round < 2; round++)
            for (int rule = 0; rule < 3; rule++) {
                mx_qopts o = {(mx_layout)L, (mx_scale_rule)rule, (mx_round)round, 5, 9};
                mx_fp4 t;
                REQUIRE(mx_fp4_alloc(&t, R, C, o.layout) == 0);
                mx_quantize_fp4(x, R, C, &o, &t);
                mx_dequantize_fp4(&t, a);
                int64_t clipped = -1;
                REQUIRE(mx_fakequant_fp4(x, b, R, C, &o, &clipped) == 0);
                for (int i = 0; i < R * C; i++) CHECK_SAME_F(b[i], a[i]);
                CHECK_EQ_INT(clipped, t.n_clipped_blocks);
                mx_fp4_free(&t);
                if (test_failures) { CHECKF(0, "layout %d round %d rule %d", L, round, rule); goto out; }
            }
out:
    free(x); free(a); free(b);
}

/* The fast 1x32 fake-quant path computes RNE in the value domain; it must
 * equal the code-domain reference at and around every midpoint of the grid
 * (10^5 consecutive floats on each side) and everywhere in between. */
TEST(fakequant_rne_fast_path_at_every_midpoint) {
    const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.0f, 2.5f, 3.5f, 4.0f, 5.0f, 6.0f, 0.5f, 1.0f, 3.0f};
    float x[32], y[32];
    int64_t clipped;
    mx_qopts o = {MX_LAYOUT_1x32, MX_SCALE_FLOOR, MX_ROUND_RNE, 0, 0};
    for (size_t m = 0; m < sizeof mids / sizeof mids[0]; m++)
        for (int sgn = 0; sgn < 2; sgn++) {
            float v = mids[m];
            for (int k = 0; k < 100000; k++) v = nextafterf(v, 0);
            for (int k = 0; k < 200000; k += 31) {
                /* element 0 fixes the scale at 2^0 (amax 4 -> floor e = 0); 31 values probed */
                x[0] = 4.0f;
                for (int i = 1; i < 32; i++) {
                    x[i] = sgn ? -v : v;
                    v = nextafterf(v, 8);
                }
                mx_fakequant_fp4(x, y, 1, 32, &o, &clipped);
                for (int i = 1; i < 32; i++) {
                    float want = mx_e2m1_decode(mx_e2m1_rne(x[i]));
                    if (memcmp(&y[i], &want, 4)) { CHECKF(0, "Q(%.9g) = %.9g, expected %.9g", x[i], y[i], want); return; }
                }
            }
        }
}
