/* nvfp4.c: NVFP4 on the CPU (docs/numerics.md "NVFP4"): E2M1 codes in blocks of 16 (layouts
 * 1x16, 16x1, 16x16) with an E4M3 block scale and an FP32 tensor scale. The scalar steps
 * (tensor scale, block scale, multiplier, decode) are mx_scalar.h's, shared with a GPU twin;
 * the E2M1 rounding (RNE, SR with the Philox SR stream) is MXFP4's; storage uses format.c's
 * block helpers. The specification a CUDA quantizer is to match bit for bit. */
#include "mxlm/mx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NB MX_NVFP4_BLOCK

static int nv_check(int rows, int cols, mx_layout layout) {
    if (layout != MX_LAYOUT_1x16 && layout != MX_LAYOUT_16x1 && layout != MX_LAYOUT_16x16)
        return mx_fail(MX_EINVAL, "NVFP4: layout %s: must be 1x16, 16x1 or 16x16", mx_layout_name(layout));
    return mx_check_shape(rows, cols, layout);
}

size_t mx_nvfp4_n_scales(int rows, int cols, mx_layout layout) {
    size_t n = (size_t)rows * (size_t)cols;
    return layout == MX_LAYOUT_16x16 ? n / (NB * NB) : n / NB;
}

int mx_nvfp4_alloc(mx_nvfp4* t, int rows, int cols, mx_layout layout) {
    memset(t, 0, sizeof *t);
    int rc = nv_check(rows, cols, layout);
    if (rc) return rc;
    size_t n = (size_t)rows * (size_t)cols;
    t->rows = rows; t->cols = cols; t->layout = layout; t->tensor_scale = 1.0f;
    t->codes = calloc(n / 2, 1);
    t->scales = calloc(mx_nvfp4_n_scales(rows, cols, layout), 1);
    if (!t->codes || !t->scales) { mx_nvfp4_free(t); return mx_fail(MX_ENOMEM, "out of memory for a %dx%d NVFP4 tensor", rows, cols); }
    return MX_OK;
}

void mx_nvfp4_free(mx_nvfp4* t) {
    free(t->codes); free(t->scales);
    t->codes = t->scales = NULL;
}

float mx_amax_finite(const float* x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a <= 3.4028235e38f && a > m) m = a;
    }
    return m;
}

uint8_t mx_nvfp4_code_at(const mx_nvfp4* t, int r, int c) {
    size_t i = mx_block_code_index(t->rows, t->cols, t->layout, r, c);
    return (uint8_t)((t->codes[i >> 1] >> ((i & 1) * 4)) & 0xF);
}
uint8_t mx_nvfp4_scale_at(const mx_nvfp4* t, int r, int c) {
    return t->scales[mx_block_scale_index(t->rows, t->cols, t->layout, r, c)];
}
static void put_code(mx_nvfp4* t, int r, int c, uint8_t code) {
    size_t i = mx_block_code_index(t->rows, t->cols, t->layout, r, c);
    uint8_t* b = &t->codes[i >> 1];
    if (i & 1) *b = (uint8_t)((*b & 0x0F) | (code << 4));
    else *b = (uint8_t)((*b & 0xF0) | code);
}

int mx_quantize_nvfp4(const float* x, int rows, int cols, const mx_qopts* o, mx_nvfp4* t) {
    int rc = nv_check(rows, cols, o->layout);
    if (rc) return rc;
    if (t->rows != rows || t->cols != cols || t->layout != o->layout || !t->codes)
        return mx_fail(MX_EINVAL, "mx_quantize_nvfp4: destination is not a %dx%d %s tensor", rows, cols,
                       mx_layout_name(o->layout));
    if ((unsigned)o->round > MX_ROUND_SR) return mx_fail(MX_EINVAL, "mx_quantize_nvfp4: bad rounding");
    const float S = mx_nvfp4_tensor_scale(mx_amax_finite(x, (size_t)rows * cols));
    t->tensor_scale = S;
    /* a block: th x tw elements at (r0, c0) */
    const int th = o->layout == MX_LAYOUT_1x16 ? 1 : NB, tw = o->layout == MX_LAYOUT_16x1 ? 1 : NB;
    const int nbr = rows / th, nbc = cols / tw;
    int64_t clipped = 0;
#pragma omp parallel for schedule(static) reduction(+ : clipped)
    for (int br = 0; br < nbr; br++)
        for (int bc = 0; bc < nbc; bc++) {
            const int r0 = br * th, c0 = bc * tw;
            float amax = 0.0f;
            int bad = 0;
            for (int i = 0; i < th; i++)
                for (int j = 0; j < tw; j++) {
                    float a = fabsf(x[(size_t)(r0 + i) * cols + c0 + j]);
                    if (!(a <= 3.4028235e38f)) bad = 1;
                    else if (a > amax) amax = a;
                }
            uint8_t sb = bad ? (uint8_t)MX_E4M3_NAN : mx_nvfp4_block_scale(amax, S);
            t->scales[mx_block_scale_index(rows, cols, o->layout, r0, c0)] = sb;
            const int zero = bad || sb == 0;  /* codes 0: NaN via the scale, or sb = 0 */
            const float m = zero ? 0.0f : mx_nvfp4_mult(sb, S);
            int clip = 0;
            for (int i = 0; i < th; i++)
                for (int j = 0; j < tw; j++) {
                    uint8_t code = 0;
                    if (!zero) {
                        size_t idx = (size_t)(r0 + i) * cols + c0 + j;
                        float v = x[idx] * m;
                        clip |= fabsf(v) > 6.0f;
                        code = o->round == MX_ROUND_SR ? mx_e2m1_sr(v, mx_rand_u32(o->seed, MX_RNG_SR, o->tensor_id, idx))
                                                       : mx_e2m1_rne(v);
                    }
                    put_code(t, r0 + i, c0 + j, code);  /* 16-element blocks: whole bytes, no race */
                }
            clipped += clip;
        }
    t->n_blocks = (int64_t)nbr * nbc;
    t->n_clipped_blocks = clipped;
    return MX_OK;
}

int mx_dequantize_nvfp4(const mx_nvfp4* t, float* y) {
    if (!t->codes) return mx_fail(MX_EINVAL, "mx_dequantize_nvfp4: empty tensor");
    for (int r = 0; r < t->rows; r++)
        for (int c = 0; c < t->cols; c++)
            y[(size_t)r * t->cols + c] = mx_nvfp4_decode(mx_nvfp4_code_at(t, r, c), mx_nvfp4_scale_at(t, r, c), t->tensor_scale);
    return MX_OK;
}

int mx_fakequant_nvfp4(const float* x, float* y, int rows, int cols, const mx_qopts* o, int64_t* n_clipped_blocks) {
    mx_nvfp4 t;
    int rc = mx_nvfp4_alloc(&t, rows, cols, o->layout);
    if (rc) return rc;
    rc = mx_quantize_nvfp4(x, rows, cols, o, &t);
    if (!rc) rc = mx_dequantize_nvfp4(&t, y);
    if (n_clipped_blocks) *n_clipped_blocks = t.n_clipped_blocks;
    mx_nvfp4_free(&t);
    return rc;
}
