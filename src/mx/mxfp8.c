/* mxfp8.c: MXFP8 on the CPU (OCP MX v1.0; docs/numerics.md "MXFP8"): E4M3 codes, a byte each, in
 * blocks of 32 (layouts 1x32, 32x1) with an E8M0 scale (rules floor, ceil). The scalar steps
 * are mx_scalar.h's (mx_mxfp8_e8m0_for_amax, mx_mxfp8_encode / _decode over fp8.c's E4M3);
 * storage uses format.c's block helpers. */
#include "mxlm/mx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int f8_check(int rows, int cols, mx_layout layout) {
    if (layout != MX_LAYOUT_1x32 && layout != MX_LAYOUT_32x1)
        return mx_fail(MX_EINVAL, "MXFP8: layout %s: must be 1x32 or 32x1", mx_layout_name(layout));
    return mx_check_shape(rows, cols, layout);
}

int mx_mxfp8_alloc(mx_mxfp8* t, int rows, int cols, mx_layout layout) {
    memset(t, 0, sizeof *t);
    int rc = f8_check(rows, cols, layout);
    if (rc) return rc;
    size_t n = (size_t)rows * (size_t)cols;
    t->rows = rows; t->cols = cols; t->layout = layout;
    t->codes = calloc(n, 1);
    t->scales = calloc(n / MX_BLOCK, 1);
    if (!t->codes || !t->scales) { mx_mxfp8_free(t); return mx_fail(MX_ENOMEM, "out of memory for a %dx%d MXFP8 tensor", rows, cols); }
    return MX_OK;
}

void mx_mxfp8_free(mx_mxfp8* t) {
    free(t->codes); free(t->scales);
    t->codes = t->scales = NULL;
}

uint8_t mx_mxfp8_code_at(const mx_mxfp8* t, int r, int c) {
    return t->codes[mx_block_code_index(t->rows, t->cols, t->layout, r, c)];
}
uint8_t mx_mxfp8_scale_at(const mx_mxfp8* t, int r, int c) {
    return t->scales[mx_block_scale_index(t->rows, t->cols, t->layout, r, c)];
}

int mx_quantize_mxfp8(const float* x, int rows, int cols, const mx_qopts* o, mx_mxfp8* t) {
    int rc = f8_check(rows, cols, o->layout);
    if (rc) return rc;
    if (t->rows != rows || t->cols != cols || t->layout != o->layout || !t->codes)
        return mx_fail(MX_EINVAL, "mx_quantize_mxfp8: destination is not a %dx%d %s tensor", rows, cols,
                       mx_layout_name(o->layout));
    if ((o->scale != MX_SCALE_FLOOR && o->scale != MX_SCALE_CEIL) || o->round != MX_ROUND_RNE)
        return mx_fail(MX_EINVAL, "mx_quantize_mxfp8: the scale rule must be floor or ceil, the rounding rne");
    const int cl = o->layout == MX_LAYOUT_32x1;
    const int nouter = cl ? cols : rows, ninner = (cl ? rows : cols) / MX_BLOCK;
    const size_t st = cl ? (size_t)cols : 1;
    int64_t clipped = 0;
#pragma omp parallel for schedule(static) reduction(+ : clipped)
    for (int a = 0; a < nouter; a++)
        for (int b = 0; b < ninner; b++) {
            const int r0 = cl ? b * MX_BLOCK : a, c0 = cl ? a : b * MX_BLOCK;
            const float* p = x + (size_t)r0 * cols + c0;
            float amax = 0.0f;
            int bad = 0;
            for (int i = 0; i < MX_BLOCK; i++) {
                float v = fabsf(p[i * st]);
                if (!(v <= 3.4028235e38f)) bad = 1;
                else if (v > amax) amax = v;
            }
            uint8_t sb = bad ? (uint8_t)MX_E8M0_NAN : mx_mxfp8_e8m0_for_amax(amax, o->scale);
            t->scales[mx_block_scale_index(rows, cols, o->layout, r0, c0)] = sb;
            const float inv = bad ? 0.0f : mx_exp2i(127 - (int)sb);
            int clip = 0;
            for (int i = 0; i < MX_BLOCK; i++) {
                int r = r0 + (cl ? i : 0), c = c0 + (cl ? 0 : i);
                uint8_t q = 0;
                if (!bad) {
                    clip |= fabsf(p[i * st] * inv) > MX_E4M3_MAX;
                    q = mx_mxfp8_encode(p[i * st], sb);
                }
                t->codes[mx_block_code_index(rows, cols, o->layout, r, c)] = q;
            }
            clipped += clip;
        }
    t->n_blocks = (int64_t)nouter * ninner;
    t->n_clipped_blocks = clipped;
    return MX_OK;
}

int mx_dequantize_mxfp8(const mx_mxfp8* t, float* y) {
    if (!t->codes) return mx_fail(MX_EINVAL, "mx_dequantize_mxfp8: empty tensor");
    for (int r = 0; r < t->rows; r++)
        for (int c = 0; c < t->cols; c++)
            y[(size_t)r * t->cols + c] = mx_mxfp8_decode(mx_mxfp8_code_at(t, r, c), mx_mxfp8_scale_at(t, r, c));
    return MX_OK;
}

int mx_fakequant_mxfp8(const float* x, float* y, int rows, int cols, const mx_qopts* o, int64_t* n_clipped_blocks) {
    mx_mxfp8 t;
    int rc = mx_mxfp8_alloc(&t, rows, cols, o->layout);
    if (rc) return rc;
    rc = mx_quantize_mxfp8(x, rows, cols, o, &t);
    if (!rc) rc = mx_dequantize_mxfp8(&t, y);
    if (n_clipped_blocks) *n_clipped_blocks = t.n_clipped_blocks;
    mx_mxfp8_free(&t);
    return rc;
}
