/* fuzz_quant.c: libFuzzer harness for block quantization. The first bytes
 * choose shape, layout, scale rule, rounding and rotation; the rest are the
 * float32 values (any bit patterns: NaN, Inf, subnormals). Invariants:
 * fake-quant == quantize + dequantize bit for bit, every scale is a valid
 * E8M0 byte, a block's values are within its scale's range (|q| <= 6 * 2^e),
 * and a NaN scale only where the block held a NaN or Inf. data[7] picks the format: MXFP4, NVFP4
 * (every scale a non-negative E4M3 byte, |q| <= 6 sb / S, S finite and positive) or MXFP8 (|q| <=
 * 448 * 2^e, no NaN code in a finite block); the same fake-quant and NaN-scale invariants. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/mx.h"

/* The input x [cnt]: the data after its 8 header bytes (zero-padded); a, b [cnt] for two outputs. */
static float* inputs(const uint8_t* data, size_t n, size_t cnt, float** a, float** b) {
    float* x = calloc(cnt, sizeof(float));
    *a = malloc(cnt * sizeof(float));
    *b = malloc(cnt * sizeof(float));
    memcpy(x, data + 8, (n - 8) < cnt * 4 ? n - 8 : cnt * 4);
    return x;
}

static int one_nvfp4_mxfp8(const uint8_t* data, size_t n, int nv) {
    int layout = nv ? MX_LAYOUT_1x16 + data[0] % 3 : data[0] % 2, rule = (data[1] & 1) ? MX_SCALE_CEIL : MX_SCALE_FLOOR;
    int round = nv ? (data[2] & 1) : MX_ROUND_RNE, B = nv ? 16 : 32;
    int rows = B * (1 + (data[4] & 1)), cols = B * (1 + ((data[4] >> 1) & 1));
    if (layout == MX_LAYOUT_1x16 || layout == MX_LAYOUT_1x32) rows = 1 + (data[4] >> 2) % 3;
    if (layout == MX_LAYOUT_16x1 || layout == MX_LAYOUT_32x1) cols = 1 + (data[4] >> 2) % 3;
    uint64_t seed = data[5] | ((uint64_t)data[6] << 8);
    size_t cnt = (size_t)rows * cols;
    float *a, *b, *x = inputs(data, n, cnt, &a, &b);
    int axis = mx_layout_is_cols((mx_layout)layout) ? 0 : 1;
    int hn = (data[3] % 3) * 8;  /* none, h8, h16 */
    if (hn && (axis ? cols : rows) % hn == 0) mx_hadamard_rotate(x, rows, cols, axis, hn, data[3] & 8, seed, 3);
    mx_qopts o = {(mx_layout)layout, (mx_scale_rule)rule, (mx_round)round, seed, 1};
    int64_t clipped, want_clipped;
    mx_nvfp4 tn;
    mx_mxfp8 t8;
    if (nv) {
        if (mx_nvfp4_alloc(&tn, rows, cols, o.layout) || mx_quantize_nvfp4(x, rows, cols, &o, &tn)) abort();
        mx_dequantize_nvfp4(&tn, a);
        want_clipped = tn.n_clipped_blocks;
        if (!(tn.tensor_scale > 0.0f && tn.tensor_scale <= 3.4028235e38f)) abort();
        if (mx_fakequant_nvfp4(x, b, rows, cols, &o, &clipped)) abort();
    } else {
        if (mx_mxfp8_alloc(&t8, rows, cols, o.layout) || mx_quantize_mxfp8(x, rows, cols, &o, &t8)) abort();
        mx_dequantize_mxfp8(&t8, a);
        want_clipped = t8.n_clipped_blocks;
        if (rule == MX_SCALE_CEIL && want_clipped) abort();  /* ceil never clips */
        if (mx_fakequant_mxfp8(x, b, rows, cols, &o, &clipped)) abort();
    }
    if (clipped != want_clipped) abort();
    /* which blocks held a NaN or Inf */
    for (size_t i = 0; i < cnt; i++) {
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) abort();
        int r = (int)(i / cols), c = (int)(i % cols);
        int nan_scale;
        float bound;
        if (nv) {
            uint8_t sb = mx_nvfp4_scale_at(&tn, r, c);
            if (sb & 0x80) abort();  /* scales are non-negative */
            nan_scale = sb == MX_E4M3_NAN;
            bound = nan_scale ? 0.0f : mx_nvfp4_decode(7, sb, tn.tensor_scale);
        } else {
            uint8_t sb = mx_mxfp8_scale_at(&t8, r, c), q = mx_mxfp8_code_at(&t8, r, c);
            nan_scale = sb == MX_E8M0_NAN;
            if (!nan_scale && (q & 0x7f) == 0x7f) abort();  /* no NaN code in a finite block */
            bound = nan_scale ? 0.0f : MX_E4M3_MAX * mx_e8m0_decode(sb);
        }
        if (nan_scale) {
            if (!isnan(a[i])) abort();
        } else {
            if (!(fabsf(a[i]) <= bound)) abort();
            if (!isfinite(x[i])) abort();
        }
    }
    if (nv) mx_nvfp4_free(&tn);
    else mx_mxfp8_free(&t8);
    free(x); free(a); free(b);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    if (n < 8) return 0;
    if (data[7] % 3) return one_nvfp4_mxfp8(data, n, data[7] % 3 == 1);
    int layout = data[0] % 3, rule = data[1] % 4, round = data[2] & 1; /* floor, even, ceil, dither */
    int had = data[3] % 5;  /* none, h2, h16, h32, rh16 */
    int rows = 32 * (1 + (data[4] & 1)), cols = 32 * (1 + ((data[4] >> 1) & 1));
    if (layout == MX_LAYOUT_1x32) rows = 1 + (data[4] >> 2) % 3;
    if (layout == MX_LAYOUT_32x1) cols = 1 + (data[4] >> 2) % 3;
    uint64_t seed = data[5] | ((uint64_t)data[6] << 8);
    size_t cnt = (size_t)rows * cols;
    float *a, *b, *x = inputs(data, n, cnt, &a, &b);
    int axis = layout == MX_LAYOUT_32x1 ? 0 : 1;
    static const int hn[5] = {0, 2, 16, 32, 16};
    if (hn[had] && (axis ? cols : rows) % hn[had] == 0)
        mx_hadamard_rotate(x, rows, cols, axis, hn[had], had == 4, seed, 3);
    mx_qopts o = {(mx_layout)layout, (mx_scale_rule)rule, (mx_round)round, seed, 1};
    mx_fp4 t;
    if (mx_fp4_alloc(&t, rows, cols, o.layout)) abort();
    if (mx_quantize_fp4(x, rows, cols, &o, &t)) abort();
    mx_dequantize_fp4(&t, a);
    int64_t clipped;
    if (mx_fakequant_fp4(x, b, rows, cols, &o, &clipped)) abort();
    if (clipped != t.n_clipped_blocks) abort();
    if (rule == MX_SCALE_DITHER && clipped) abort(); /* x 2^-e x 3/4 < 6: dither never clips */
    for (size_t i = 0; i < cnt; i++) {
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) abort();
        int r = (int)(i / cols), c = (int)(i % cols);
        uint8_t sb = mx_fp4_scale_at(&t, r, c);
        if (sb == 0xFF) {
            if (!isnan(a[i])) abort();
        } else if (!(fabsf(a[i]) <= (rule == MX_SCALE_DITHER ? 8.0f : 6.0f) * mx_e8m0_decode(sb))) abort();
        if (sb != 0xFF && !isfinite(x[i])) abort();
    }
    mx_fp4_free(&t);
    free(x); free(a); free(b);
    return 0;
}
