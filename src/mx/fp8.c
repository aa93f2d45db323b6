/* fp8.c: FP8 per-tensor scaling (E4M3 / E5M2, current-scaling amax), the BF16 round trip
 * and the amax of a tensor. */
#include "mxlm/mx.h"

#include <math.h>

/* ---- FP8 / BF16 ------------------------------------------------------------ */

float mx_amax(const float* x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > m || a != a) m = a;
        if (m != m) return m;
    }
    return m;
}

float mx_fp8_scale_for_amax(float amax, mx_fp8_kind kind) {
    return mx_fp8_scale_amax(amax, (int)kind);
}

void mx_fp8_quantize(const float* x, size_t n, float scale, mx_fp8_kind kind, uint8_t* codes) {
    for (size_t i = 0; i < n; i++)
        codes[i] = kind == MX_FP8_E4M3 ? mx_e4m3_encode(x[i] * scale) : mx_e5m2_encode(x[i] * scale);
}

void mx_fp8_dequantize(const uint8_t* codes, size_t n, float scale, mx_fp8_kind kind, float* y) {
    float inv = 1.0f / scale;
    for (size_t i = 0; i < n; i++)
        y[i] = (kind == MX_FP8_E4M3 ? mx_e4m3_decode(codes[i]) : mx_e5m2_decode(codes[i])) * inv;
}

void mx_fp8_fakequant(const float* x, float* y, size_t n, float scale, mx_fp8_kind kind) {
    float inv = 1.0f / scale;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = x[i] * scale;
        float d = kind == MX_FP8_E4M3 ? mx_e4m3_decode(mx_e4m3_encode(v)) : mx_e5m2_decode(mx_e5m2_encode(v));
        y[i] = d * inv;
    }
}

void mx_bf16_fakequant(const float* x, float* y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = mx_round_bf16(x[i]);
}
