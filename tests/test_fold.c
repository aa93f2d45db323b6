/* test_fold.c: the folded form of MXFP4 operands (mx.h, src/mx/fold.c): exact inside the window, the
 * blocks outside it listed, and the product of two folded operands plus the fix-up of their listed blocks
 * equal to the product of the exact operands, bit for bit in FP64 (the data keep every partial sum exact:
 * block exponents within 20 binades, K = 128 or 256, so any summation order gives the same double). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/mx.h"
#include "test.h"

static uint64_t g_s = 0x243F6A8885A308D3ull;
static double u01(void) {
    g_s = g_s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_s >> 11) * (1.0 / 9007199254740992.0);
}

/* x [rows, cols]: every 32-block along the rows (dir 0) or the columns (dir 1) of magnitude 2^-U, U uniform
 * in [0, span): an OUTER fold (one e_ref a row) leaves some blocks outside its window */
static void gen(float* x, int rows, int cols, int dir, int span) {
    const int nb = dir ? rows / 32 : cols / 32, nl = dir ? cols : rows;
    for (int l = 0; l < nl; l++)
        for (int b = 0; b < nb; b++) {
            const float m = ldexpf(1.0f, -(int)(u01() * span));
            for (int j = 0; j < 32; j++) {
                const size_t r = dir ? (size_t)b * 32 + j : (size_t)l, c = dir ? (size_t)l : (size_t)b * 32 + j;
                x[r * cols + c] = (float)(u01() * 2.0 - 1.0) * m;
            }
        }
}

static double exact_at(const mx_fp4* t, int dir, int i, int k) {
    const int r = dir ? k : i, c = dir ? i : k;
    return (double)mx_e2m1_decode(mx_fp4_code_at(t, r, c)) * (double)mx_e8m0_decode(mx_fp4_scale_at(t, r, c));
}

/* A [M, K] (1x32) and B given as B^T [K, N] (32x1, dir 1): folded, listed, multiplied and fixed up */
static void product_case(int M, int N, int K, int span, mx_fold_mode mode, size_t* n_a, size_t* n_b, int* exact_round) {
    float* xa = malloc((size_t)M * K * 4);
    float* xb = malloc((size_t)K * N * 4);
    REQUIRE(xa && xb);
    gen(xa, M, K, 0, span);
    gen(xb, K, N, 1, span);
    mx_fp4 ta, tb;
    const mx_qopts oa = {MX_LAYOUT_1x32, MX_SCALE_FLOOR, MX_ROUND_RNE, 0, 0}, ob = {MX_LAYOUT_32x1, MX_SCALE_FLOOR, MX_ROUND_RNE, 0, 0};
    REQUIRE(mx_fp4_alloc(&ta, M, K, MX_LAYOUT_1x32) == 0 && mx_fp4_alloc(&tb, K, N, MX_LAYOUT_32x1) == 0);
    REQUIRE(mx_quantize_fp4(xa, M, K, &oa, &ta) == 0 && mx_quantize_fp4(xb, K, N, &ob, &tb) == 0);
    const size_t nfs_a = mode == MX_FOLD_OUTER ? (size_t)M : (size_t)M * (K / 128);
    const size_t nfs_b = mode == MX_FOLD_OUTER ? (size_t)N : (size_t)N * (K / 128);
    uint8_t *ea = malloc((size_t)M * K), *eb = malloc((size_t)N * K);
    float *fa = malloc(nfs_a * 4), *fb = malloc(nfs_b * 4);
    mx_fold_block *la = malloc(sizeof *la * (size_t)M * K / 32), *lb = malloc(sizeof *lb * (size_t)N * K / 32);
    double *C = malloc(sizeof *C * (size_t)M * N), *Cx = malloc(sizeof *Cx * (size_t)M * N);
    REQUIRE(ea && eb && fa && fb && la && lb && C && Cx);
    REQUIRE(mx_fold_mxfp4(&ta, 0, mode, MX_FOLD_LIST, ea, fa, la, (size_t)M * K / 32, n_a) == 0);
    REQUIRE(mx_fold_mxfp4(&tb, 1, mode, MX_FOLD_LIST, eb, fb, lb, (size_t)N * K / 32, n_b) == 0);
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += exact_at(&ta, 0, r, k) * exact_at(&tb, 1, c, k);
            Cx[(size_t)r * N + c] = s;
        }
    /* the folded values: exact inside the window, zero for the listed blocks */
    size_t bad = 0, q = 0;
    for (int r = 0; r < M; r++)
        for (int k = 0; k < K; k++) {
            const int listed = q < *n_a && la[q].row == r && la[q].block == k / 32;
            const double f = (double)mx_e4m3_decode(ea[(size_t)r * K + k]) *
                             (mode == MX_FOLD_OUTER ? fa[r] : fa[(size_t)(k / 128) * M + r]);
            bad += f != (listed ? 0.0 : exact_at(&ta, 0, r, k));
            if (listed && k % 32 == 31) q++;
        }
    CHECKF(bad == 0, "%zu folded values of A neither exact nor listed", bad);
    CHECK(q == *n_a);
    REQUIRE(mx_fold_product(&ta, 0, ea, fa, la, *n_a, &tb, 1, eb, fb, lb, *n_b, mode, C) == 0);
    size_t diff = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) diff += C[i] != Cx[i];
    CHECKF(diff == 0, "%zu of %d products with the fix-up differ from the exact product", diff, M * N);
    /* without the fix-up (the ROUND fold: the listed blocks rounded into E4M3, nothing added) */
    size_t na2 = 0, nb2 = 0;
    REQUIRE(mx_fold_mxfp4(&ta, 0, mode, MX_FOLD_ROUND, ea, fa, NULL, 0, &na2) == 0);
    REQUIRE(mx_fold_mxfp4(&tb, 1, mode, MX_FOLD_ROUND, eb, fb, NULL, 0, &nb2) == 0);
    CHECK(na2 == *n_a && nb2 == *n_b);
    REQUIRE(mx_fold_product(&ta, 0, ea, fa, NULL, 0, &tb, 1, eb, fb, NULL, 0, mode, C) == 0);
    diff = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) diff += C[i] != Cx[i];
    *exact_round = diff == 0;
    free(xa); free(xb); free(ea); free(eb); free(fa); free(fb); free(la); free(lb); free(C); free(Cx);
    mx_fp4_free(&ta); mx_fp4_free(&tb);
}

TEST(fold_outer_fixup_is_exact) {
    size_t na = 0, nb = 0;
    int exact_round = 1;
    /* blocks over 20 binades: an OUTER fold leaves many outside its 15-binade window */
    product_case(24, 16, 256, 20, MX_FOLD_OUTER, &na, &nb, &exact_round);
    CHECKF(na > 10 && nb > 10, "OUTER: only %zu / %zu blocks outside the window (the case tests nothing)", na, nb);
    CHECK(!exact_round); /* without the fix-up the product is not exact */
    /* VEC128 (e_ref per 128): fewer outside, and exact with the fix-up too */
    size_t va = 0, vb = 0;
    product_case(24, 16, 256, 20, MX_FOLD_VEC128, &va, &vb, &exact_round);
    CHECK(va < na && vb < nb);
    /* a narrow range: nothing outside, the plain fold exact */
    product_case(8, 8, 128, 10, MX_FOLD_OUTER, &na, &nb, &exact_round);
    CHECK_EQ_INT((int)(na + nb), 0);
    CHECK(exact_round);
}

/* dir 1 of a 32x1 tensor is dir 0 of the transposed 1x32 one; a NaN block folds to E4M3 NaN; refusals */
TEST(fold_directions_nan_and_refusals) {
    const int R = 8, K = 256;
    float* x = malloc((size_t)R * K * 4);
    float* xt = malloc((size_t)R * K * 4);
    REQUIRE(x && xt);
    gen(x, R, K, 0, 20);
    x[3 * K + 70] = NAN; /* row 3, block 2 */
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++) xt[(size_t)k * R + r] = x[(size_t)r * K + k];
    mx_fp4 a, at;
    const mx_qopts o1 = {MX_LAYOUT_1x32, MX_SCALE_FLOOR, MX_ROUND_RNE, 0, 0}, o2 = {MX_LAYOUT_32x1, MX_SCALE_FLOOR, MX_ROUND_RNE, 0, 0};
    REQUIRE(mx_fp4_alloc(&a, R, K, MX_LAYOUT_1x32) == 0 && mx_fp4_alloc(&at, K, R, MX_LAYOUT_32x1) == 0);
    REQUIRE(mx_quantize_fp4(x, R, K, &o1, &a) == 0 && mx_quantize_fp4(xt, K, R, &o2, &at) == 0);
    uint8_t e1[8 * 256], e2[8 * 256];
    float f1[8], f2[8];
    mx_fold_block l1[64], l2[64];
    size_t n1 = 0, n2 = 0;
    REQUIRE(mx_fold_mxfp4(&a, 0, MX_FOLD_OUTER, MX_FOLD_LIST, e1, f1, l1, 64, &n1) == 0);
    REQUIRE(mx_fold_mxfp4(&at, 1, MX_FOLD_OUTER, MX_FOLD_LIST, e2, f2, l2, 64, &n2) == 0);
    CHECK(n1 == n2 && n1 > 0 && !memcmp(e1, e2, sizeof e1) && !memcmp(f1, f2, sizeof f1) && !memcmp(l1, l2, n1 * sizeof *l1));
    int nan_ok = 1;
    for (int j = 0; j < 32; j++) nan_ok &= e1[3 * K + 64 + j] == 0x7f;
    CHECK(nan_ok);
    /* refusals: a list too short, the wrong layout for the direction, K not a multiple of 128 */
    CHECK(mx_fold_mxfp4(&a, 0, MX_FOLD_OUTER, MX_FOLD_LIST, e1, f1, l1, n1 - 1, &n2) != 0);
    CHECK(mx_fold_mxfp4(&a, 1, MX_FOLD_OUTER, MX_FOLD_LIST, e1, f1, l1, 64, &n2) != 0);
    mx_fp4 s;
    REQUIRE(mx_fp4_alloc(&s, 2, 96, MX_LAYOUT_1x32) == 0);
    CHECK(mx_fold_mxfp4(&s, 0, MX_FOLD_OUTER, MX_FOLD_ROUND, e1, f1, NULL, 0, &n2) != 0);
    mx_fp4_free(&s); mx_fp4_free(&a); mx_fp4_free(&at);
    free(x); free(xt);
}

/* t [R, K] 1x32: x with each 128-group of magnitude 2^-U, U uniform in [0, span), its blocks within 4 binades of
 * it (VEC128's window holds every block, a row spans `span` binades), quantized RNE with the floor rule */
static void quant_groups(int R, int K, int span, mx_fp4* t) {
    float* x = malloc((size_t)R * K * 4);
    REQUIRE(x);
    for (int r = 0; r < R; r++)
        for (int g = 0; g < K / 128; g++) {
            const int u = (int)(u01() * span);
            for (int b = 0; b < 4; b++) {
                const float m = ldexpf(1.0f, -u - (int)(u01() * 4));
                for (int j = 0; j < 32; j++) x[(size_t)r * K + g * 128 + b * 32 + j] = (float)(u01() * 2.0 - 1.0) * m;
            }
        }
    const mx_qopts o = {MX_LAYOUT_1x32, MX_SCALE_FLOOR, MX_ROUND_RNE, 0, 0};
    REQUIRE(mx_fp4_alloc(t, R, K, MX_LAYOUT_1x32) == 0 && mx_quantize_fp4(x, R, K, &o, t) == 0);
    free(x);
}

/* VEC128 -> OUTER (mx_fold_outer_from_vec128): over blocks spanning `span` binades, where the VEC128 fold is
 * exact the re-expressed operand is mx_fold_mxfp4's OUTER ROUND form byte for byte (fscale too), the blocks it
 * rounds are among OUTER's out-of-window ones, and in place gives the same bytes */
static void refold_case(int R, int K, int span, size_t* n_round, size_t* n_oow_outer) {
    mx_fp4 t;
    quant_groups(R, K, span, &t);
    uint8_t *ev = malloc((size_t)R * K), *eo = malloc((size_t)R * K), *er = malloc((size_t)R * K);
    float *fv = malloc((size_t)R * (K / 128) * 4), *fo = malloc((size_t)R * 4), *fr = malloc((size_t)R * 4);
    REQUIRE(ev && eo && er && fv && fo && fr);
    size_t nv = 0;
    REQUIRE(mx_fold_mxfp4(&t, 0, MX_FOLD_VEC128, MX_FOLD_ROUND, ev, fv, NULL, 0, &nv) == 0);
    REQUIRE(mx_fold_mxfp4(&t, 0, MX_FOLD_OUTER, MX_FOLD_ROUND, eo, fo, NULL, 0, n_oow_outer) == 0);
    CHECKF(nv == 0, "the VEC128 fold left %zu blocks outside its window (the case needs it exact)", nv);
    REQUIRE(mx_fold_outer_from_vec128(ev, fv, R, K, er, fr, NULL, n_round) == 0);
    CHECK(!memcmp(er, eo, (size_t)R * K) && !memcmp(fr, fo, (size_t)R * 4));
    CHECK(*n_round <= *n_oow_outer);
    size_t n2 = 0;
    REQUIRE(mx_fold_outer_from_vec128(ev, fv, R, K, ev, fr, NULL, &n2) == 0); /* in place */
    CHECK(!memcmp(ev, eo, (size_t)R * K) && n2 == *n_round);
    free(ev); free(eo); free(er); free(fv); free(fo); free(fr);
    mx_fp4_free(&t);
}

TEST(fold_outer_from_vec128) {
    size_t nr = 0, no = 0;
    refold_case(16, 1024, 24, &nr, &no); /* groups over 24 binades: VEC128 exact, OUTER not */
    CHECKF(nr > 10 && no >= nr, "rounded %zu, outside OUTER's window %zu (the case tests nothing)", nr, no);
    refold_case(8, 256, 6, &nr, &no); /* a narrow range: nothing rounds */
    CHECK(nr == 0 && no == 0);
    /* the scalar steps: exact powers of two both ways, a subnormal rounding to even, NaN kept */
    CHECK(mx_log2_pow2(mx_exp2i(-149)) == -149 && mx_log2_pow2(mx_exp2i(-127)) == -127 && mx_log2_pow2(mx_exp2i(121)) == 121);
    int ix = 0;
    CHECK(mx_e4m3_rescale(0x38, 3, &ix) == 0x20 && !ix);          /* 1.0 -> 0.125 exactly */
    CHECK(mx_e4m3_rescale(0x01, 1, &ix) == 0x00 && ix);           /* 2^-9 / 2: a tie, to even (zero) */
    ix = 0;
    CHECK(mx_e4m3_rescale(0x03, 1, &ix) == 0x02 && ix);           /* 3 x 2^-9 / 2 = 1.5 x 2^-9: to even, 2 x 2^-9 */
    ix = 0;
    CHECK(mx_e4m3_rescale(0xff, 5, &ix) == 0xff && !ix);          /* NaN */
    CHECK(mx_e4m3_rescale(0xb8, 40, &ix) == 0x80 && ix);          /* -1.0, far down: -0 */
    uint8_t e[128] = {0};
    float f = 1.0f, fo = 0;
    size_t n = 0;
    CHECK(mx_fold_outer_from_vec128(e, &f, 1, 96, e, &fo, NULL, &n) != 0); /* K not a multiple of 128 */
}

/* the exact fix-up (mx_fold_outer_fixup): A [M, K] and B [N, K] quantized with 128-groups over 24 binades, their
 * VEC128 forms exact, their OUTER forms rounded in the flagged blocks; C = A_o B_o^T (FP64, rounded once) plus the
 * fix-up is A B^T within FP32 rounding, where C without it is not */
static void vec_form(int R, int K, int span, uint8_t* ev, float* fv) {
    mx_fp4 t;
    quant_groups(R, K, span, &t);
    size_t nv = 0;
    REQUIRE(mx_fold_mxfp4(&t, 0, MX_FOLD_VEC128, MX_FOLD_ROUND, ev, fv, NULL, 0, &nv) == 0);
    REQUIRE(nv == 0);
    mx_fp4_free(&t);
}

/* mx_e4m3_rescale's integer steps against its definition, every code and shift: the E4M3 encoding of the
 * decoded value times 2^-down (down clamped at 31 there: every value is then below half the subnormal step),
 * and *inexact exactly where that rounds. */
TEST(e4m3_rescale_every_code_and_shift) {
    long bad = 0, rounded = 0;
    for (int c = 0; c < 256; c++)
        for (int down = -2; down <= 300; down++) {
            uint8_t want = (uint8_t)c;
            int wix = 0, ix = 0;
            if ((c & 0x7f) != 0x7f && down > 0) {
                const float v = mx_e4m3_decode((uint8_t)c) * mx_exp2i(down > 31 ? -31 : -down);
                want = mx_e4m3_encode(v);
                wix = mx_e4m3_decode(want) != v;
            }
            const uint8_t got = mx_e4m3_rescale((uint8_t)c, down, &ix);
            bad += got != want || ix != wix;
            rounded += wix;
        }
    CHECK(bad == 0);
    CHECK(rounded > 1000); /* the rounding branch is exercised (and not only to zero) */
}

TEST(fold_outer_fixup_restores_the_product) {
    const int M = 12, N = 10, K = 512, nb = K / 32;
    uint8_t *av = malloc((size_t)M * K), *ao = malloc((size_t)M * K), *bv = malloc((size_t)N * K), *bo = malloc((size_t)N * K);
    uint8_t *af = malloc((size_t)M * nb), *bf = malloc((size_t)N * nb);
    float *afs = malloc((size_t)M * (K / 128) * 4), *bfs = malloc((size_t)N * (K / 128) * 4), afo[12], bfo[10];
    float *C = malloc((size_t)M * N * 4), *C2 = malloc((size_t)M * N * 4);
    REQUIRE(av && ao && bv && bo && af && bf && afs && bfs && C && C2);
    vec_form(M, K, 24, av, afs);
    vec_form(N, K, 24, bv, bfs);
    size_t na = 0, nbr = 0;
    REQUIRE(mx_fold_outer_from_vec128(av, afs, M, K, ao, afo, af, &na) == 0);
    REQUIRE(mx_fold_outer_from_vec128(bv, bfs, N, K, bo, bfo, bf, &nbr) == 0);
    CHECKF(na > 5 && nbr > 5, "rounded blocks %zu / %zu (the case tests nothing)", na, nbr);
    size_t nf = 0;
    for (int i = 0; i < M * nb; i++) nf += af[i];
    CHECK(nf == na);
    double worst_plain = 0, worst_fixed = 0;
    for (int r = 0; r < M; r++)
        for (int n = 0; n < N; n++) {
            double s = 0, so = 0;
            for (int k = 0; k < K; k++) {
                const double a = (double)mx_e4m3_decode(av[(size_t)r * K + k]) * afs[(size_t)(k / 128) * M + r];
                const double b = (double)mx_e4m3_decode(bv[(size_t)n * K + k]) * bfs[(size_t)(k / 128) * N + n];
                s += a * b;
                so += (double)mx_e4m3_decode(ao[(size_t)r * K + k]) * afo[r] * (double)mx_e4m3_decode(bo[(size_t)n * K + k]) * bfo[n];
            }
            C[(size_t)r * N + n] = (float)so;
            C2[(size_t)r * N + n] = (float)s; /* the exact product, kept to compare */
        }
    for (int i = 0; i < M * N; i++) {
        const double e = fabs((double)C[i] - (double)C2[i]) / (fabs((double)C2[i]) + 1e-30);
        if (e > worst_plain) worst_plain = e;
    }
    REQUIRE(mx_fold_outer_fixup(C, M, N, K, av, afs, ao, afo, af, bv, bfs, bo, bfo, bf) == 0);
    for (int i = 0; i < M * N; i++) {
        const double e = fabs((double)C[i] - (double)C2[i]) / (fabs((double)C2[i]) + 1e-30);
        if (e > worst_fixed) worst_fixed = e;
    }
    /* the fix-up's sums are FP32 over at most K terms added to an FP32 C: relative error ~K 2^-24 at worst where
     * terms cancel; these data make it far smaller. Without it the rounded blocks' values are lost outright. */
    CHECKF(worst_fixed < 1e-4, "with the fix-up: worst relative error %.3g", worst_fixed);
    CHECKF(worst_plain > 100 * worst_fixed && worst_plain > 1e-6, "without the fix-up: %.3g (with: %.3g)", worst_plain, worst_fixed);
    /* nothing flagged: C unchanged */
    memset(af, 0, (size_t)M * nb);
    memset(bf, 0, (size_t)N * nb);
    memcpy(C2, C, (size_t)M * N * 4);
    REQUIRE(mx_fold_outer_fixup(C, M, N, K, av, afs, ao, afo, af, bv, bfs, bo, bfo, bf) == 0);
    CHECK(!memcmp(C, C2, (size_t)M * N * 4));
    free(av); free(ao); free(bv); free(bo); free(af); free(bf); free(afs); free(bfs); free(C); free(C2);
}
