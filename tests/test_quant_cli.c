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

/* The files of one `mxlm quant` (TMPDIR/ni, no, nc, ns into in, out, codes, scales: 512 bytes each) and its
 * input [R, C] (input(R, C, seed)), written to in. */
static float* quant_files(char* in, char* out, char* codes, char* scales, const char* ni, const char* no,
                          const char* nc, const char* ns, int R, int C, uint64_t seed) {
    const char* d = test_tmpdir();
    snprintf(in, 512, "%s/%s", d, ni);
    snprintf(out, 512, "%s/%s", d, no);
    snprintf(codes, 512, "%s/%s", d, nc);
    snprintf(scales, 512, "%s/%s", d, ns);
    float* x = input(R, C, seed);
    write_f32(in, x, (size_t)R * C);
    return x;
}

/* TMPDIR/ni holding n zero floats (n <= 64) and TMPDIR/no absent (into in, out: 512 bytes each). */
static void zero_files(char* in, char* out, const char* ni, const char* no, size_t n) {
    const float z[64] = {0};
    snprintf(in, 512, "%s/%s", test_tmpdir(), ni);
    snprintf(out, 512, "%s/%s", test_tmpdir(), no);
    write_f32(in, z, n);
    unlink(out);
}

/* Compare `mxlm quant` against the library for one configuration. */
static void one(const char* layout, const char* scale, const char* round, const char* had, int R, int C) {
    char in[512], out[512], codes[512], scales[512];
    float* x = quant_files(in, out, codes, scales, "in.f32", "out.f32", "codes.bin", "scales.bin", R, C, 1234);
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
    float x[64] = {0};
    zero_files(in, out, "bad.f32", "bad.out", 63); /* one float short of 2x32 */
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

/* --format nvfp4 / mxfp8 end to end: the hand-computed vectors of test_nvfp4.c / test_mxfp8.c
 * through the CLI (out, codes, scales, tensor scale), the library for every layout, and refusals. */
TEST(quant_cli_nvfp4_and_mxfp8_vectors) {
    const char* d = test_tmpdir();
    const char* bin = test_mxlm_bin();
    char in[512], out[512], codes[512], scales[512], ts[512];
    snprintf(in, sizeof in, "%s/nv.f32", d);
    snprintf(out, sizeof out, "%s/nv.out", d);
    snprintf(codes, sizeof codes, "%s/nv.codes", d);
    snprintf(scales, sizeof scales, "%s/nv.scales", d);
    snprintf(ts, sizeof ts, "%s/nv.ts", d);
    /* NVFP4 1x16, 2x16: row 0 amax 6 = amax_t -> S = 448, sb = 448 (0x7E), r = 1; row 1 amax 1 -> sb = E4M3(74.67)
     * = 72 (0x69), r = 6.22: 1.0 -> 6 (code 7) -> 432/448, 0.5 -> 3 (code 5) -> 216/448 */
    float x[32] = {0.75f, 2.5f, 6.0f}, y0[32] = {1.0f, 2.0f, 6.0f};
    x[16] = 1.0f; x[17] = 0.5f;
    y0[16] = 432.0f / 448.0f; y0[17] = 216.0f / 448.0f;
    write_f32(in, x, 32);
    REQUIRE(test_sh("%s quant --format nvfp4 --rows 2 --cols 16 --in %s --out %s --codes %s --scales %s --tensor-scale %s",
                    bin, in, out, codes, scales, ts) == 0);
    size_t n;
    float* y = test_read_file(out, &n);
    REQUIRE(y && n == 128);
    for (int i = 0; i < 32; i++) CHECK_SAME_F(y[i], y0[i]);
    free(y);
    uint8_t* c = test_read_file(codes, &n);
    REQUIRE(c && n == 16);
    CHECK_EQ_INT(c[0], 0x42); /* codes 2 (1.0) low, 4 (2.0) high */
    CHECK_EQ_INT(c[1], 0x07); /* 6.0 -> 7, then 0 */
    CHECK_EQ_INT(c[8], 0x57); /* row 1: 7 low, 5 high */
    free(c);
    uint8_t* s = test_read_file(scales, &n);
    REQUIRE(s && n == 2);
    CHECK(s[0] == 0x7E && s[1] == 0x69);
    free(s);
    float* S = test_read_file(ts, &n);
    REQUIRE(S && n == 4);
    CHECK_SAME_F(S[0], 448.0f);
    free(S);
    /* MXFP8 1x32 floor: amax 1000 -> e = 1 (byte 128): 1000 -> 448 (0x7E) -> 896; ceil: e = 2 -> 256 (0x78) -> 1024 */
    float x8[32] = {1000.0f, -3.0f};
    write_f32(in, x8, 32);
    const char* rule[2] = {"floor", "ceil"};
    const float want[2] = {896.0f, 1024.0f};
    const uint8_t wc[2] = {0x7E, 0x78}, ws[2] = {128, 129};
    for (int k = 0; k < 2; k++) {
        REQUIRE(test_sh("%s quant --format mxfp8 --scale %s --rows 1 --cols 32 --in %s --out %s --codes %s --scales %s",
                        bin, rule[k], in, out, codes, scales) == 0);
        y = test_read_file(out, &n);
        REQUIRE(y && n == 128);
        CHECK_SAME_F(y[0], want[k]);
        CHECK_SAME_F(y[1], -3.0f);
        free(y);
        c = test_read_file(codes, &n);
        CHECK(c && n == 32 && c[0] == wc[k]);
        free(c);
        s = test_read_file(scales, &n);
        CHECK(s && n == 1 && s[0] == ws[k]);
        free(s);
    }
}

static void one_block(const char* fmt, const char* layout, const char* extra, int R, int C) {
    char in[512], out[512], codes[512], scales[512];
    float* x = quant_files(in, out, codes, scales, "b.f32", "b.out", "b.codes", "b.scales", R, C, 99);
    int sr = strstr(extra, "sr") != NULL;
    int rc = test_sh("%s quant --format %s --rows %d --cols %d --layout %s %s --seed 5 --tensor-id 2 --in %s --out %s "
                     "--codes %s --scales %s", test_mxlm_bin(), fmt, R, C, layout, extra, in, out, codes, scales);
    CHECK_EQ_INT(rc, 0);
    const char* h = strstr(extra, "--hadamard h");
    if (h) /* the library's answer quantizes the rotated input (along rows; along columns for Bx1) */
        mx_hadamard_rotate(x, R, C, mx_layout_is_cols((mx_layout)mx_layout_parse(layout)) ? 0 : 1, atoi(h + 12), 0, 5, 0);
    mx_qopts o = {(mx_layout)mx_layout_parse(layout), strstr(extra, "ceil") ? MX_SCALE_CEIL : MX_SCALE_FLOOR,
                  sr ? MX_ROUND_SR : MX_ROUND_RNE, 5, 2};
    float* y = malloc(sizeof(float) * R * C);
    const uint8_t *wc, *ws;
    size_t nc, ns;
    mx_nvfp4 tn = {0};
    mx_mxfp8 t8 = {0};
    if (!strcmp(fmt, "nvfp4")) {
        mx_nvfp4_alloc(&tn, R, C, o.layout);
        mx_quantize_nvfp4(x, R, C, &o, &tn);
        mx_dequantize_nvfp4(&tn, y);
        wc = tn.codes; nc = (size_t)R * C / 2; ws = tn.scales; ns = mx_nvfp4_n_scales(R, C, o.layout);
    } else {
        mx_mxfp8_alloc(&t8, R, C, o.layout);
        mx_quantize_mxfp8(x, R, C, &o, &t8);
        mx_dequantize_mxfp8(&t8, y);
        wc = t8.codes; nc = (size_t)R * C; ws = t8.scales; ns = (size_t)R * C / 32;
    }
    size_t n;
    float* got = test_read_file(out, &n);
    CHECKF(got && n == (size_t)R * C * 4 && memcmp(got, y, n) == 0, "%s %s %s: output differs", fmt, layout, extra);
    uint8_t* gc = test_read_file(codes, &n);
    CHECK(gc && n == nc && memcmp(gc, wc, nc) == 0);
    free(gc);
    uint8_t* gs = test_read_file(scales, &n);
    CHECK(gs && n == ns && memcmp(gs, ws, ns) == 0);
    free(gs); free(got); free(y); free(x);
    mx_nvfp4_free(&tn);
    mx_mxfp8_free(&t8);
}

TEST(quant_cli_nvfp4_mxfp8_match_library_and_refusals) {
    one_block("nvfp4", "1x16", "--round rne", 3, 48);
    one_block("nvfp4", "16x1", "--round sr", 32, 5);
    one_block("nvfp4", "16x16", "--round sr --hadamard h16", 32, 48);
    one_block("mxfp8", "1x32", "--scale floor", 3, 64);
    one_block("mxfp8", "32x1", "--scale ceil --hadamard h32", 64, 3);
    const char* bin = test_mxlm_bin();
    char in[512], out[512];
    zero_files(in, out, "r.f32", "r.out", 64);
    const float x[24] = {0};
    static const struct { const char* args; const char* msg; } bad[] = {
        {"--format nvfp4 --layout 1x32", "--layout 1x32 does not apply to --format nvfp4 (1x16, 16x1 or 16x16)"},
        {"--format mxfp4 --layout 16x16", "--layout 16x16 does not apply to --format mxfp4"},
        {"--format mxfp8 --layout 32x32", "--layout 32x32 does not apply to --format mxfp8 (1x32 or 32x1)"},
        {"--format mxfp8 --scale even", "--scale even does not apply to --format mxfp8 (floor or ceil)"},
        {"--format nvfp4 --scale floor", "--scale floor does not apply to --format nvfp4"},
        {"--format mxfp8 --round sr", "--round sr applies to --format mxfp4 and nvfp4 only"},
        {"--format e4m3 --round sr", "--round sr applies to --format mxfp4 and nvfp4 only"},
        {"--format mxfp4 --tensor-scale /tmp/x", "--tensor-scale applies to --format nvfp4 only"},
        {"--format nvfp5", "--format must be mxfp4, nvfp4, mxfp8, e4m3, e5m2 or bf16"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECKF(test_sh("%s quant --rows 2 --cols 32 %s --in %s --out %s 2>/dev/null", bin, bad[i].args, in, out) == 2,
               "'%s' was not refused with exit 2", bad[i].args);
        CHECKF(test_sh("%s quant --rows 2 --cols 32 %s --in %s --out %s 2>&1 | grep -qF -- '%s'", bin, bad[i].args, in,
                       out, bad[i].msg) == 0, "'%s': message", bad[i].args);
        CHECK(!exists(out));
    }
    /* shapes: nvfp4 needs multiples of 16 */
    write_f32(in, x, 24);
    CHECK_EQ_INT(test_sh("%s quant --format nvfp4 --rows 1 --cols 24 --in %s --out %s 2>/dev/null", bin, in, out), 2);
    CHECK(test_sh("%s quant --format nvfp4 --rows 1 --cols 24 --in %s --out %s 2>&1 | grep -q 'multiple of 16'", bin, in, out) == 0);
    CHECK(!exists(out));
}
