/* format.c: the number formats as data (formats.h), the names of the enums of mx.h, shape
 * checks and the SQNR (errors: src/util/error.c). */
#include "mxlm/formats.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- names ----------------------------------------------------------------- */

static const char* k_layout[MX_LAYOUT_COUNT] = {"1x32", "32x1", "32x32", "1x16", "16x1", "16x16"};
static const char* k_scale[] = {"floor", "even", "ceil", "dither"};
static const char* k_round[] = {"rne", "sr"};

static int lookup(const char* s, const char* const* names, int n) {
    for (int i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}
int mx_layout_parse(const char* s) { return lookup(s, k_layout, MX_LAYOUT_COUNT); }
int mx_scale_parse(const char* s) { return lookup(s, k_scale, 4); }
int mx_round_parse(const char* s) { return lookup(s, k_round, 2); }
const char* mx_layout_name(mx_layout l) { return (unsigned)l < MX_LAYOUT_COUNT ? k_layout[l] : "?"; }
const char* mx_scale_name(mx_scale_rule r) { return (unsigned)r < 4 ? k_scale[r] : "?"; }
const char* mx_round_name(mx_round r) { return (unsigned)r < 2 ? k_round[r] : "?"; }

/* ---- the format table (formats.h) ---------------------------------------------------- */

#define ALL_ROUND (MX_BIT(MX_ROUND_RNE) | MX_BIT(MX_ROUND_SR))
#define L_MX (MX_BIT(MX_LAYOUT_1x32) | MX_BIT(MX_LAYOUT_32x1) | MX_BIT(MX_LAYOUT_32x32))
#define L_NV (MX_BIT(MX_LAYOUT_1x16) | MX_BIT(MX_LAYOUT_16x1) | MX_BIT(MX_LAYOUT_16x16))
#define L_MX1D (MX_BIT(MX_LAYOUT_1x32) | MX_BIT(MX_LAYOUT_32x1))
#define ALL_RULES (MX_BIT(MX_SCALE_FLOOR) | MX_BIT(MX_SCALE_EVEN) | MX_BIT(MX_SCALE_CEIL) | MX_BIT(MX_SCALE_DITHER))
#define FP8_BOTH (MX_BIT(MX_FP8_CURRENT) | MX_BIT(MX_FP8_DELAYED))
static const mx_format_info k_formats[MX_FMT_COUNT] = {
    /* id           name     label    element       bits block scale                 layouts roundings             rules                                      fp8 scalings gpu had gpu fp8 scalings */
    {MX_FMT_FP32,  "fp32",  "FP32",  MX_ELEM_FP32, 32,  0,   MX_SCALE_NONE,         0,      MX_BIT(MX_ROUND_RNE), 0,                                         0,           1,  0,  0},
    {MX_FMT_BF16,  "bf16",  "BF16",  MX_ELEM_BF16, 16,  0,   MX_SCALE_NONE,         0,      MX_BIT(MX_ROUND_RNE), 0,                                         0,           1,  0,  0},
    {MX_FMT_FP8,   "fp8",   "FP8",   MX_ELEM_FP8,  8,   0,   MX_SCALE_TENSOR,       0,      MX_BIT(MX_ROUND_RNE), 0,                                         FP8_BOTH,    1,  0,  MX_BIT(MX_FP8_CURRENT)},
    {MX_FMT_MXFP4, "mxfp4", "MXFP4", MX_ELEM_E2M1, 4,   32,  MX_SCALE_E8M0,         L_MX,   ALL_ROUND,            ALL_RULES,                                 0,           1,  1,  0},
    /* NVFP4 and MXFP8 on the GPU: nvfp4.cu, mxfp8.cu and linear.cu's block_gemm (docs/gpu.md) */
    {MX_FMT_NVFP4, "nvfp4", "NVFP4", MX_ELEM_E2M1, 4,   16,  MX_SCALE_E4M3_TENSOR,  L_NV,   ALL_ROUND,            0,                                         0,           1,  1,  0},
    {MX_FMT_MXFP8, "mxfp8", "MXFP8", MX_ELEM_E4M3, 8,   32,  MX_SCALE_E8M0,         L_MX1D, MX_BIT(MX_ROUND_RNE), MX_BIT(MX_SCALE_FLOOR) | MX_BIT(MX_SCALE_CEIL), 0,     1,  1,  0},
};

const mx_format_info* mx_format_get(mx_format f) { return (unsigned)f < MX_FMT_COUNT ? &k_formats[f] : NULL; }

const mx_format_info* mx_format_find(const char* s) {
    for (int i = 0; s && i < MX_FMT_COUNT; i++)
        if (!strcmp(s, k_formats[i].name)) return &k_formats[i];
    return NULL;
}
int mx_format_parse(const char* s) {
    const mx_format_info* f = mx_format_find(s);
    return f ? (int)f->id : -1;
}
const char* mx_format_name(mx_format f) { return (unsigned)f < MX_FMT_COUNT ? k_formats[f].name : "?"; }

int mx_format_any(const mx_format_info* f) { return f != NULL; }
int mx_format_has_sr(const mx_format_info* f) { return (f->roundings & MX_BIT(MX_ROUND_SR)) != 0; }
int mx_format_has_2d(const mx_format_info* f) {
    return (f->layouts & (MX_BIT(MX_LAYOUT_32x32) | MX_BIT(MX_LAYOUT_16x16))) != 0;
}
int mx_format_has_scale_rule(const mx_format_info* f) { return f->scale_rules != 0; }
mx_layout mx_format_layout(const mx_format_info* f, int w2d) {
    if (f->block == 16) return w2d ? MX_LAYOUT_16x16 : MX_LAYOUT_1x16;
    return w2d ? MX_LAYOUT_32x32 : MX_LAYOUT_1x32;
}
int mx_format_gpu_rotates(const mx_format_info* f) { return f->gpu && f->gpu_hadamard; }

const char* mx_format_list(int (*pred)(const mx_format_info*), char* buf, size_t n) {
    int idx[MX_FMT_COUNT], k = 0;
    for (int i = 0; i < MX_FMT_COUNT; i++)
        if (pred(&k_formats[i])) idx[k++] = i;
    size_t off = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < k && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%s", i == 0 ? "" : i == k - 1 ? " or " : ", ",
                                k_formats[idx[i]].name);
    return buf;
}

/* ---- shapes ---------------------------------------------------------------------- */

int mx_check_shape(int rows, int cols, mx_layout layout) {
    if ((unsigned)layout >= MX_LAYOUT_COUNT) return mx_fail(MX_EINVAL, "unknown block layout %d", (int)layout);
    if (rows <= 0 || cols <= 0) return mx_fail(MX_EINVAL, "shape %dx%d: dimensions must be positive", rows, cols);
    int b = mx_layout_block(layout), cl = mx_layout_is_cols(layout), two = mx_layout_is_2d(layout);
    int need_r = cl || two, need_c = !cl;
    if ((need_r && rows % b) || (need_c && cols % b))
        return mx_fail(MX_EINVAL, "shape %dx%d: layout %s needs %s a multiple of %d", rows, cols,
                       mx_layout_name(layout), two ? "rows and cols" : cl ? "rows" : "cols", b);
    /* packing two per byte along the stored rows needs an even count */
    return MX_OK;
}

size_t mx_block_code_index(int rows, int cols, mx_layout layout, int r, int c) {
    if (mx_layout_is_cols(layout)) return (size_t)c * rows + r;
    return (size_t)r * cols + c;
}
size_t mx_block_scale_index(int rows, int cols, mx_layout layout, int r, int c) {
    int b = mx_layout_block(layout);
    if (mx_layout_is_2d(layout)) return (size_t)(r / b) * (cols / b) + c / b;
    if (mx_layout_is_cols(layout)) return (size_t)c * (rows / b) + r / b;
    return (size_t)r * (cols / b) + c / b;
}

/* ---- SQNR ------------------------------------------------------------------------ */

double mx_sqnr_db(const float* x, const float* q, size_t n) {
    double s = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)x[i] - (double)q[i];
        s += (double)x[i] * x[i];
        e += d * d;
    }
    if (e == 0) return INFINITY;
    if (s == 0) return -INFINITY;
    return 10.0 * log10(s / e);
}
