/* mxfp4.c: MXFP4 on the CPU (OCP MX v1.0): the per-block quantizer, quantize / dequantize /
 * fake-quantize in the layouts 1x32, 32x1 and 32x32. The specification the CUDA quantizers
 * are tested against (bit for bit). */
#include "mxlm/mx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- MXFP4 ----------------------------------------------------------------- */

/* MXFP4's layouts are the 32 ones. */
static int fp4_check(int rows, int cols, mx_layout layout) {
    if ((unsigned)layout > MX_LAYOUT_32x32)
        return mx_fail(MX_EINVAL, "MXFP4: layout %s: must be 1x32, 32x1 or 32x32", mx_layout_name(layout));
    return mx_check_shape(rows, cols, layout);
}

size_t mx_fp4_n_scales(int rows, int cols, mx_layout layout) {
    size_t n = (size_t)rows * (size_t)cols;
    return layout == MX_LAYOUT_32x32 ? n / (MX_BLOCK * MX_BLOCK) : n / MX_BLOCK;
}

int mx_fp4_alloc(mx_fp4* t, int rows, int cols, mx_layout layout) {
    memset(t, 0, sizeof *t);
    int rc = fp4_check(rows, cols, layout);
    if (rc) return rc;
    size_t n = (size_t)rows * (size_t)cols;
    t->rows = rows; t->cols = cols; t->layout = layout;
    t->codes = calloc(n / 2, 1);
    t->scales = calloc(mx_fp4_n_scales(rows, cols, layout), 1);
    if (!t->codes || !t->scales) { mx_fp4_free(t); return mx_fail(MX_ENOMEM, "out of memory for a %dx%d MXFP4 tensor", rows, cols); }
    return MX_OK;
}

void mx_fp4_free(mx_fp4* t) {
    free(t->codes); free(t->scales);
    t->codes = t->scales = NULL;
}

uint8_t mx_quantize_block(const float* x, int stride, mx_scale_rule rule, const uint32_t* rbits,
                          uint8_t codes[MX_BLOCK], int* clipped) {
    float amax = 0.0f;
    int bad = 0;
    for (int i = 0; i < MX_BLOCK; i++) {
        float a = fabsf(x[(size_t)i * stride]);
        if (!(a <= 3.4028235e38f)) bad = 1;  /* NaN or Inf */
        else if (a > amax) amax = a;
    }
    *clipped = 0;
    if (bad) { memset(codes, 0, MX_BLOCK); return MX_E8M0_NAN; }
    uint8_t sb = mx_e8m0_for_amax(amax, rule);
    float inv = mx_exp2i(127 - (int)sb);  /* 1 / 2^(sb-127), exact */
    for (int i = 0; i < MX_BLOCK; i++) {
        float v = mx_fp4_prescale(x[(size_t)i * stride], inv, rule);
        if (fabsf(v) > 6.0f) *clipped = 1;
        codes[i] = rbits ? mx_e2m1_sr(v, rbits[i]) : mx_e2m1_rne(v);
    }
    return sb;
}

/* Position of element (r, c) in the stored code order of t (format.c's block helpers). */
static size_t code_index(const mx_fp4* t, int r, int c) { return mx_block_code_index(t->rows, t->cols, t->layout, r, c); }
static size_t scale_index(const mx_fp4* t, int r, int c) { return mx_block_scale_index(t->rows, t->cols, t->layout, r, c); }

uint8_t mx_fp4_code_at(const mx_fp4* t, int r, int c) {
    size_t i = code_index(t, r, c);
    return (uint8_t)((t->codes[i >> 1] >> ((i & 1) * 4)) & 0xF);
}
uint8_t mx_fp4_scale_at(const mx_fp4* t, int r, int c) { return t->scales[scale_index(t, r, c)]; }

static void put_code(mx_fp4* t, int r, int c, uint8_t code) {
    size_t i = code_index(t, r, c);
    uint8_t* b = &t->codes[i >> 1];
    if (i & 1) *b = (uint8_t)((*b & 0x0F) | (code << 4));
    else *b = (uint8_t)((*b & 0xF0) | code);
}

int mx_quantize_fp4(const float* x, int rows, int cols, const mx_qopts* o, mx_fp4* t) {
    int rc = fp4_check(rows, cols, o->layout);
    if (rc) return rc;
    if (t->rows != rows || t->cols != cols || t->layout != o->layout || !t->codes)
        return mx_fail(MX_EINVAL, "mx_quantize_fp4: destination is not a %dx%d %s tensor", rows, cols,
                       mx_layout_name(o->layout));
    if ((unsigned)o->scale > MX_SCALE_DITHER || (unsigned)o->round > MX_ROUND_SR)
        return mx_fail(MX_EINVAL, "mx_quantize_fp4: bad scale rule or rounding");
    t->scale = o->scale;
    int64_t clipped_blocks = 0, n_blocks = 0;
    const int B = MX_BLOCK;
    if (o->layout == MX_LAYOUT_32x32) {
        /* One scale per tile: the tile's amax over 32x32 values. */
        float tile[MX_BLOCK * MX_BLOCK];
        for (int tr = 0; tr < rows; tr += B)
            for (int tc = 0; tc < cols; tc += B) {
                float amax = 0.0f;
                int bad = 0;
                for (int i = 0; i < B; i++)
                    for (int j = 0; j < B; j++) {
                        float v = x[(size_t)(tr + i) * cols + tc + j];
                        tile[i * B + j] = v;
                        float a = fabsf(v);
                        if (!(a <= 3.4028235e38f)) bad = 1;
                        else if (a > amax) amax = a;
                    }
                uint8_t sb = bad ? MX_E8M0_NAN : mx_e8m0_for_amax(amax, o->scale);
                t->scales[(size_t)(tr / B) * (cols / B) + tc / B] = sb;
                float inv = bad ? 0.0f : mx_exp2i(127 - (int)sb);
                int clip = 0;
                for (int i = 0; i < B; i++)
                    for (int j = 0; j < B; j++) {
                        uint8_t code = 0;
                        if (!bad) {
                            float v = mx_fp4_prescale(tile[i * B + j], inv, o->scale);
                            if (fabsf(v) > 6.0f) clip = 1;
                            if (o->round == MX_ROUND_SR) {
                                uint64_t idx = (uint64_t)(tr + i) * cols + tc + j;
                                code = mx_e2m1_sr(v, mx_rand_u32(o->seed, MX_RNG_SR, o->tensor_id, idx));
                            } else code = mx_e2m1_rne(v);
                        }
                        put_code(t, tr + i, tc + j, code);
                    }
                clipped_blocks += clip;
                n_blocks++;
            }
    } else {
        int along_rows = o->layout == MX_LAYOUT_1x32;
        int nb_outer = along_rows ? rows : cols;            /* rows (1x32) or columns (32x1) */
        int nb_inner = (along_rows ? cols : rows) / B;      /* blocks along each */
#pragma omp parallel for schedule(static) reduction(+ : clipped_blocks, n_blocks)
        for (int o1 = 0; o1 < nb_outer; o1++)
            for (int b = 0; b < nb_inner; b++) {
                uint32_t rb[MX_BLOCK];
                uint8_t codes[MX_BLOCK];
                int r0 = along_rows ? o1 : b * B, c0 = along_rows ? b * B : o1;
                const float* p = x + (size_t)r0 * cols + c0;
                int stride = along_rows ? 1 : cols;
                if (o->round == MX_ROUND_SR)
                    for (int i = 0; i < B; i++) {
                        uint64_t idx = (uint64_t)(r0 + (along_rows ? 0 : i)) * cols + c0 + (along_rows ? i : 0);
                        rb[i] = mx_rand_u32(o->seed, MX_RNG_SR, o->tensor_id, idx);
                    }
                int clip;
                uint8_t sb = mx_quantize_block(p, stride, o->scale, o->round == MX_ROUND_SR ? rb : NULL, codes, &clip);
                t->scales[scale_index(t, r0, c0)] = sb;
                for (int i = 0; i < B; i++)
                    put_code(t, r0 + (along_rows ? 0 : i), c0 + (along_rows ? i : 0), codes[i]);
                clipped_blocks += clip;
                n_blocks++;
            }
    }
    t->n_blocks = n_blocks;
    t->n_clipped_blocks = clipped_blocks;
    return MX_OK;
}

int mx_dequantize_fp4(const mx_fp4* t, float* y) {
    if (!t->codes) return mx_fail(MX_EINVAL, "mx_dequantize_fp4: empty tensor");
    for (int r = 0; r < t->rows; r++)
        for (int c = 0; c < t->cols; c++) {
            uint8_t sb = mx_fp4_scale_at(t, r, c);
            /* decode(code) * 2^e is exact: a 2-bit significand times a power of two
             * (subnormal results included; dither: then x 4/3, mx_fp4_scaled). 0xFF gives NaN. */
            y[(size_t)r * t->cols + c] = mx_fp4_scaled(mx_e2m1_decode(mx_fp4_code_at(t, r, c)), mx_e8m0_decode(sb), t->scale);
        }
    return MX_OK;
}

/* decode(mx_e2m1_rne(v)) computed in the value domain, without branches on
 * the grid: below 2 the grid is k/2, in [2,4) it is k, in [4,6] it is 2k, and
 * in each range the code's parity is k's, so rintf (ties to even) gives the
 * tie-to-even-code rule. Equal to the reference for every float (tested at
 * every midpoint and on random values). */
static inline float e2m1_rne_value(float v) {
    float a = fabsf(v), q;
    if (a < 2.0f) q = rintf(a * 2.0f) * 0.5f;
    else if (a < 4.0f) q = rintf(a);
    else q = fminf(rintf(a * 0.5f) * 2.0f, 6.0f);
    return copysignf(q, v);
}

/* y = Q(x) for one 1x32 block with RNE (the same scale and values as
 * mx_quantize_block + decode). */
static void fakequant_block_rne(const float* x, float* y, mx_scale_rule rule, int* clipped) {
    float amax = 0.0f;
    int bad = 0;
    for (int i = 0; i < MX_BLOCK; i++) {
        float a = fabsf(x[i]);
        bad |= !(a <= 3.4028235e38f);
        amax = a > amax ? a : amax;
    }
    *clipped = 0;
    if (bad) {
        for (int i = 0; i < MX_BLOCK; i++) y[i] = mx_e8m0_decode(MX_E8M0_NAN);
        return;
    }
    uint8_t sb = mx_e8m0_for_amax(amax, rule);
    float inv = mx_exp2i(127 - (int)sb), sc = mx_e8m0_decode(sb);
    int clip = 0;
    for (int i = 0; i < MX_BLOCK; i++) {
        float v = mx_fp4_prescale(x[i], inv, rule);
        clip |= fabsf(v) > 6.0f;
        y[i] = mx_fp4_scaled(e2m1_rne_value(v), sc, rule);
    }
    *clipped = clip;
}

int mx_fakequant_fp4(const float* x, float* y, int rows, int cols, const mx_qopts* o, int64_t* n_clipped_blocks) {
    if (o->layout != MX_LAYOUT_1x32) {
        mx_fp4 t;
        int rc = mx_fp4_alloc(&t, rows, cols, o->layout);
        if (rc) return rc;
        rc = mx_quantize_fp4(x, rows, cols, o, &t);
        if (!rc) rc = mx_dequantize_fp4(&t, y);
        if (n_clipped_blocks) *n_clipped_blocks = t.n_clipped_blocks;
        mx_fp4_free(&t);
        return rc;
    }
    /* 1x32: the same block function, without packing, rows in parallel */
    int rc = fp4_check(rows, cols, o->layout);
    if (rc) return rc;
    if ((unsigned)o->scale > MX_SCALE_DITHER || (unsigned)o->round > MX_ROUND_SR)
        return mx_fail(MX_EINVAL, "mx_fakequant_fp4: bad scale rule or rounding");
    int64_t clipped = 0;
#pragma omp parallel for schedule(static) reduction(+ : clipped)
    for (int r = 0; r < rows; r++) {
        uint32_t rb[MX_BLOCK];
        uint8_t codes[MX_BLOCK];
        for (int c0 = 0; c0 < cols; c0 += MX_BLOCK) {
            size_t base = (size_t)r * cols + c0;
            if (o->round == MX_ROUND_SR)
                for (int i = 0; i < MX_BLOCK; i++) rb[i] = mx_rand_u32(o->seed, MX_RNG_SR, o->tensor_id, base + i);
            int clip;
            if (o->round == MX_ROUND_RNE) {
                fakequant_block_rne(x + base, y + base, o->scale, &clip);
            } else {
                uint8_t sb = mx_quantize_block(x + base, 1, o->scale, rb, codes, &clip);
                float sc = mx_e8m0_decode(sb);
                for (int i = 0; i < MX_BLOCK; i++) y[base + i] = mx_fp4_scaled(mx_e2m1_decode(codes[i]), sc, o->scale);
            }
            clipped += clip;
        }
    }
    if (n_clipped_blocks) *n_clipped_blocks = clipped;
    return MX_OK;
}
