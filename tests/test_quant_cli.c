/* test_quant_cli.c: ./mxlm quant as a black box, against the library. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mxlm/mx.h"
#include "test.h"

static void write_f32(const char* path, const float* x, size_t n) {
    FILE* f = fopen(path, "wb");
    fwrite(x, 4, n, f);
    fclose(f);
}
static int exists(const char* p) { struct stat st; return stat(p, &st) == 0; }

static float* input(int R, int C, uint64_t seed) {
    float* x = malloc(sizeof(float) * R * C);
    uint64_t s = seed;
    for (int i = 0; i < R * C; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ((float)(s >> 40) / 16777216.0f - 0.5f) * (i % 61 == 0 ? 50.0f : 2.0f);
    }
    return x;
}

/* Compare `mxlm quant` against the library for one configuration. */
static void one(const char* layout, const char* scale, const char* round, const char* had, int R, int C) {
    const char* d = test_tmpdir();
    char in[512], out[512], codes[512], scales[512];
    snprintf(in, sizeof in, "%s/in.f32", d);
    snprintf(out, sizeof out, "%s/out.f32", d);
    snprintf(codes, sizeof codes, "%s/codes.bin", d);
    snprintf(scales, sizeof scales, "%s/scales.bin", d);
    float* x = input(R, C, 1234);
    write_f32(in, x, (size_t)R * C);
    int rc = test_sh("%s quant --rows %d --cols %d --layout %s --scale %s --round %s --hadamard %s --seed 99 "
                     "--tensor-id 4 --in %s --out %s --codes %s --scales %s",
                     test_mxlm_bin(), R, C, layout, scale, round, had, in, out, codes, scales);
    CHECK_EQ_INT(rc, 0);
    /* the library's answer */
    mx_layout L = (mx_layout)mx_layout_parse(layout);
    int axis = L == MX_LAYOUT_32x1 ? 0 : 1;
    if (strcmp(had, "none")) {
        int rnd = had[0] == 'r';
        mx_hadamard_rotate(x, R, C, axis, atoi(had + 1 + rnd), rnd, 99, 0);
    }
    mx_qopts o = {L, (mx_scale_rule)mx_scale_parse(scale), (mx_round)mx_round_parse(round), 99, 4};
    mx_fp4 t;
    mx_fp4_alloc(&t, R, C, L);
    mx_quantize_fp4(x, R, C, &o, &t);
    float* y = malloc(sizeof(float) * R * C);
    mx_dequantize_fp4(&t, y);
    size_t n = 0;
    float* got = test_read_file(out, &n);
    REQUIRE(got && n == (size_t)R * C * 4);
    CHECKF(memcmp(got, y, n) == 0, "%s %s %s %s: output differs from the library", layout, scale, round, had);
    size_t nc = 0, ns = 0;
    uint8_t* gc = test_read_file(codes, &nc);
    uint8_t* gs = test_read_file(scales, &ns);
    CHECK(nc == (size_t)R * C / 2 && memcmp(gc, t.codes, nc) == 0);
    CHECK(ns == mx_fp4_n_scales(R, C, L) && memcmp(gs, t.scales, ns) == 0);
    free(gc); free(gs); free(got); free(y); free(x);
    mx_fp4_free(&t);
}

TEST(quant_cli_matches_library) {
    one("1x32", "floor", "rne", "none", 32, 64);
    one("1x32", "even", "sr", "h16", 8, 96);
    one("32x1", "ceil", "rne", "h32", 64, 8);
    one("32x1", "floor", "sr", "rh16", 64, 32);
    one("32x32", "floor", "rne", "h16", 64, 64);
    one("32x32", "even", "sr", "rh32", 32, 96);
}

TEST(quant_cli_reference_vector) {
    /* one block of 32 with amax 7.9: floor gives scale 2^0 and saturates to 6 */
    const char* d = test_tmpdir();
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/v.f32", d);
    snprintf(out, sizeof out, "%s/v.out", d);
    float x[32], want[32];
    const float src[8] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 7.9f};
    const float dst[8] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f};
    for (int i = 0; i < 32; i++) { x[i] = (i & 8 ? -1 : 1) * src[i % 8]; want[i] = (i & 8 ? -1 : 1) * dst[i % 8]; }
    write_f32(in, x, 32);
    REQUIRE(test_sh("%s quant --rows 1 --cols 32 --in %s --out %s", test_mxlm_bin(), in, out) == 0);
    size_t n;
    float* y = test_read_file(out, &n);
    REQUIRE(y && n == 128);
    for (int i = 0; i < 32; i++) CHECK_SAME_F(y[i], want[i]);
    free(y);
    /* FP8 e4m3 per tensor: amax 7.9 -> scale 448/7.9; 7.9 is exactly representable after scaling */
    REQUIRE(test_sh("%s quant --rows 1 --cols 32 --format e4m3 --in %s --out %s", test_mxlm_bin(), in, out) == 0);
    y = test_read_file(out, &n);
    REQUIRE(y && n == 128);
    CHECK_NEAR(y[7], 7.9f, 1e-5);
    CHECK_NEAR(y[0], 0.25f, 0.25f / 16);
    free(y);
}

TEST(quant_cli_bad_input) {
    const char* d = test_tmpdir();
    const char* bin = test_mxlm_bin();
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/bad.f32", d);
    snprintf(out, sizeof out, "%s/bad.out", d);
    float x[64] = {0};
    write_f32(in, x, 63);  /* one float short of 2x32 */
    unlink(out);
    CHECK_EQ_INT(test_sh("%s quant --rows 2 --cols 32 --in %s --out %s 2>/dev/null", bin, in, out), 1);
    CHECK(!exists(out));
    CHECK(test_sh("%s quant --rows 2 --cols 32 --in %s --out %s 2>&1 | grep -q 'bytes'", bin, in, out) == 0);
    write_f32(in, x, 64);
    /* not a multiple of 32 */
    CHECK_EQ_INT(test_sh("%s quant --rows 1 --cols 64 --layout 32x1 --in %s --out %s 2>/dev/null", bin, in, out), 2);
    CHECK(test_sh("%s quant --rows 1 --cols 64 --layout 32x1 --in %s --out %s 2>&1 | grep -q 'multiple of 32'", bin, in, out) == 0);
    CHECK(!exists(out));
    /* unknown option, bad values */
    CHECK_EQ_INT(test_sh("%s quant --rows 2 --cols 32 --frobnicate 1 --in %s --out %s 2>/dev/null", bin, in, out), 2);
    CHECK_EQ_INT(test_sh("%s quant --rows 2 --cols 32 --scale round --in %s --out %s 2>/dev/null", bin, in, out), 2);
    CHECK_EQ_INT(test_sh("%s quant --rows 2 --cols 32 --hadamard h12 --in %s --out %s 2>/dev/null", bin, in, out), 2);
    CHECK_EQ_INT(test_sh("%s quant --rows two --cols 32 --in %s --out %s 2>/dev/null", bin, in, out), 2);
    CHECK_EQ_INT(test_sh("%s quant --rows 2 --cols 32 --in %s/missing.f32 --out %s 2>/dev/null", bin, d, out), 1);
    CHECK_EQ_INT(test_sh("%s quant --rows 2 --cols 32 --in %s 2>/dev/null", bin, in), 2);
    CHECK(!exists(out));
    /* an existing output is left untouched by a failing run */
    FILE* f = fopen(out, "w");
    fputs("keep", f);
    fclose(f);
    CHECK_EQ_INT(test_sh("%s quant --rows 4 --cols 32 --in %s --out %s 2>/dev/null", bin, in, out), 1);
    size_t n;
    char* kept = test_read_file(out, &n);
    CHECK(kept && n == 4 && !memcmp(kept, "keep", 4));
    free(kept);
    /* unwritable destination: error, non-zero */
    CHECK_EQ_INT(test_sh("%s quant --rows 2 --cols 32 --in %s --out /nonexistent-dir/x.f32 2>/dev/null", bin, in), 1);
    CHECK(test_sh("%s quant --rows 2 --cols 32 --in %s --out /nonexistent-dir/x.f32 2>&1 | grep -q nonexistent-dir", bin, in) == 0);
}

TEST(cli_info_and_unknown_command) {
    CHECK(test_sh("%s info | grep -q 'mxlm '", test_mxlm_bin()) == 0);
    CHECK_EQ_INT(test_sh("%s frobnicate 2>/dev/null", test_mxlm_bin()), 2);
    CHECK_EQ_INT(test_sh("%s 2>/dev/null", test_mxlm_bin()), 2);
}

/* tools/mx_ref.py is an independent implementation (pure Python, exact
 * rational arithmetic, brute-force nearest values) written from the docs;
 * `mxlm quant` must agree with it bit for bit on random matrices with
 * outliers, zero and NaN blocks, for every layout, scale rule, rounding,
 * Hadamard choice and both FP8 formats. */
TEST(quant_cli_vs_independent_python_reference) {
    char log[600];
    snprintf(log, sizeof log, "%s/mx_ref.log", test_tmpdir());
    int rc = test_sh("python3 tools/mx_ref.py --mxlm %s --cases 30 --seed 7 > %s 2>&1", test_mxlm_bin(), log);
    CHECK_EQ_INT(rc, 0);
    if (rc) test_sh("grep -v '^ok' %s | head -5 >&2", log);
    CHECK(test_sh("grep -q '^30 passed, 0 failed$' %s", log) == 0);
}
