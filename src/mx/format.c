/* format.c: the number formats as data (formats.h), the names of the enums of mx.h, shape
 * checks, errors (mx_fail / mx_last_error) and the SQNR. */
#include "mxlm/formats.h"
#include "mxlm/recipe.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- errors -------------------------------------------------------------- */

static _Thread_local char g_err[512];

const char* mx_last_error(void) { return g_err[0] ? g_err : "no error"; }

int mx_fail(int code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return code;
}

/* ---- names ----------------------------------------------------------------- */

static const char* k_layout[] = {"1x32", "32x1", "32x32"};
static const char* k_scale[] = {"floor", "even", "ceil"};
static const char* k_round[] = {"rne", "sr"};

static int lookup(const char* s, const char* const* names, int n) {
    for (int i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}
int mx_layout_parse(const char* s) { return lookup(s, k_layout, 3); }
int mx_scale_parse(const char* s) { return lookup(s, k_scale, 3); }
int mx_round_parse(const char* s) { return lookup(s, k_round, 2); }
const char* mx_layout_name(mx_layout l) { return (unsigned)l < 3 ? k_layout[l] : "?"; }
const char* mx_scale_name(mx_scale_rule r) { return (unsigned)r < 3 ? k_scale[r] : "?"; }
const char* mx_round_name(mx_round r) { return (unsigned)r < 2 ? k_round[r] : "?"; }

/* ---- the format table (formats.h) ---------------------------------------------------- */

#define ALL_ROUND (MX_BIT(MX_ROUND_RNE) | MX_BIT(MX_ROUND_SR))
static const mx_format_info k_formats[MX_FMT_COUNT] = {
    /* id           name     label    element       bits block scale            layouts                                                      roundings             rules fp8 scalings                                       gpu had gpu fp8 scalings */
    {MX_FMT_FP32,  "fp32",  "FP32",  MX_ELEM_FP32, 32,  0,   MX_SCALE_NONE,   0,                                                            MX_BIT(MX_ROUND_RNE), 0,    0,                                                 1,  0,  0},
    {MX_FMT_BF16,  "bf16",  "BF16",  MX_ELEM_BF16, 16,  0,   MX_SCALE_NONE,   0,                                                            MX_BIT(MX_ROUND_RNE), 0,    0,                                                 1,  0,  0},
    {MX_FMT_FP8,   "fp8",   "FP8",   MX_ELEM_FP8,  8,   0,   MX_SCALE_TENSOR, 0,                                                            MX_BIT(MX_ROUND_RNE), 0,    MX_BIT(MX_FP8_CURRENT) | MX_BIT(MX_FP8_DELAYED),  1,  0,  MX_BIT(MX_FP8_CURRENT)},
    {MX_FMT_MXFP4, "mxfp4", "MXFP4", MX_ELEM_E2M1, 4,   32,  MX_SCALE_E8M0,   MX_BIT(MX_LAYOUT_1x32) | MX_BIT(MX_LAYOUT_32x1) | MX_BIT(MX_LAYOUT_32x32), ALL_ROUND,         1,    0,                                                 1,  1,  0},
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
int mx_format_has_2d(const mx_format_info* f) { return (f->layouts & MX_BIT(MX_LAYOUT_32x32)) != 0; }
int mx_format_has_scale_rule(const mx_format_info* f) { return f->scale_rules; }
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
    if ((unsigned)layout > MX_LAYOUT_32x32) return mx_fail(MX_EINVAL, "unknown block layout %d", (int)layout);
    if (rows <= 0 || cols <= 0) return mx_fail(MX_EINVAL, "shape %dx%d: dimensions must be positive", rows, cols);
    int need_r = layout != MX_LAYOUT_1x32, need_c = layout != MX_LAYOUT_32x1;
    if ((need_r && rows % MX_BLOCK) || (need_c && cols % MX_BLOCK))
        return mx_fail(MX_EINVAL, "shape %dx%d: layout %s needs %s a multiple of 32", rows, cols,
                       mx_layout_name(layout),
                       layout == MX_LAYOUT_1x32 ? "cols" : layout == MX_LAYOUT_32x1 ? "rows" : "rows and cols");
    /* packing two per byte along the stored rows needs an even count */
    return MX_OK;
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
